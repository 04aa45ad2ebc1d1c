"""Dynamic shapes (docs/dynamic-shapes.md): automatic dynamic sizes, mark_dynamic / mark_static,
dynamic=None|True|False, config.automatic_dynamic_shapes, specialisation with guards, duck-sizing
relations, and exact results against eager for every size."""
import json

import pytest
import torch
import torch.nn.functional as F

import dynamo

from compile_fixtures import compiled, fresh_dynamo, records  # noqa: F401  (fixtures)


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


BATCHES = [8, 16, 1, 5, 64, 33, 2, 17, 31, 9, 40, 12, 3, 50, 27, 64, 7, 60, 11, 24]


def test_twenty_batch_sizes_compile_at_most_three_times_and_match_eager(records):
    m = mlp()
    f = dynamo.compile(m)
    assert len(set(BATCHES)) >= 19 and min(BATCHES) == 1 and max(BATCHES) == 64
    for b in BATCHES:
        x = torch.randn(b, 16)
        assert torch.equal(f(x), m(x)), b
    assert len(compiled(records)) == 3  # static 8, dynamic batch, size 1 specialised
    assert "automatic dynamic: the size changed (8 -> 16)" in compiled(records)[1]["dynamic_shapes"]
    assert "s0 = input.size()[0] in [2, inf] (dynamic; example 16)" in compiled(records)[1]["dynamic_shapes"]
    assert compiled(records)[2]["reason"].startswith(
        "input.size()[0] is 1, outside [2, inf] (sizes 0 and 1 are specialised: a size that becomes 0 or 1 recompiles)")
    assert "sizes 0 and 1 are specialised" in compiled(records)[2]["dynamic_shapes"]
    # The shape-guard failure as data: which input, which dim, the range expected, the size seen.
    failures = [f for m in compiled(records)[2]["misses"] for f in m["failures"] if f["kind"] == "SHAPE_ENV"]
    assert [(f["source"], f["dim"], f["property"], f["expected"], f["seen"]) for f in failures] == [
        ("input", 0, "shape", "in [2, inf]", "1")]


def test_training_step_with_dynamic_batch_matches_eager(records):
    m1, m2 = mlp(), mlp()
    f = dynamo.compile(m2)
    for b in [4, 6, 9, 13]:
        x = torch.randn(b, 16)
        m1.zero_grad()
        m2.zero_grad()
        m1(x).square().mean().backward()
        f(x).square().mean().backward()
        for p1, p2 in zip(m1.parameters(), m2.parameters()):
            assert torch.equal(p1.grad, p2.grad)
    assert len(compiled(records)) == 2


def test_mark_dynamic_before_the_first_call_compiles_once(records):
    m = mlp()
    f = dynamo.compile(m)
    for b in [8, 12, 20, 3]:
        x = torch.randn(b, 16)
        dynamo.mark_dynamic(x, 0)
        assert torch.equal(f(x), m(x))
    assert len(compiled(records)) == 1
    assert "input.size()[0] is dynamic (s0): mark_dynamic" in compiled(records)[0]["dynamic_shapes"]


def test_mark_dynamic_range_is_guarded(records):
    def f(x):
        return x * 2
    cf = dynamo.compile(f)
    for b in [4, 6, 8, 9]:
        x = torch.randn(b)
        dynamo.mark_dynamic(x, 0, min=2, max=8)
        assert torch.equal(cf(x), f(x))
    assert len(compiled(records)) == 2
    assert "x.size()[0] is 9, outside [2, 8]" in compiled(records)[1]["reason"]


def test_dynamic_false_restores_static_behaviour(records):
    m = mlp()
    f = dynamo.compile(m, dynamic=False)
    for b in [8, 16, 24]:
        x = torch.randn(b, 16)
        assert torch.equal(f(x), m(x))
    assert len(compiled(records)) == 3
    assert all(r["dynamic_shapes"] == "" for r in compiled(records))


def test_automatic_dynamic_shapes_off_is_static(records):
    dynamo.config.automatic_dynamic_shapes = False
    m = mlp()
    f = dynamo.compile(m)
    for b in [8, 16, 24]:
        f(torch.randn(b, 16))
    assert len(compiled(records)) == 3


def test_dynamic_true_is_dynamic_from_the_first_compile(records):
    m = mlp()
    f = dynamo.compile(m, dynamic=True)
    for b in [8, 16, 24]:
        x = torch.randn(b, 16)
        assert torch.equal(f(x), m(x))
    assert len(compiled(records)) == 1
    assert "input.size()[0] is dynamic (s0): dynamic=True" in compiled(records)[0]["dynamic_shapes"]


def test_a_call_that_pins_one_size_keeps_the_others_dynamic(records):
    # layer_norm fails for another size of its normalised dimension: that symbol is specialised,
    # the batch stays dynamic (all of the call's symbols were pinned before: one compile per size)
    w, b = torch.randn(16), torch.randn(16)

    def f(x):
        return F.layer_norm(x * 2, (16,), w, b, 1e-5)

    cf = dynamo.compile(f, dynamic=True)
    for n in [5, 7, 9]:
        x = torch.randn(n, 16)
        assert torch.equal(cf(x), f(x)), n
    assert len(compiled(records)) == 1
    notes = compiled(records)[0]["dynamic_shapes"]
    assert "specialised to 16: layer_norm() fails or changes its outputs for other sizes" in notes
    assert "= x.size()[0] in [2, inf] (dynamic; example 5)" in notes


def test_mark_static_keeps_a_size_static(records):
    def f(x):
        return x.relu() + 1
    cf = dynamo.compile(f, dynamic=True)
    for b in [8, 16]:
        x = torch.randn(b, 4)
        dynamo.mark_static(x, 0)
        assert torch.equal(cf(x), f(x))
    assert len(compiled(records)) == 2


def test_a_size_read_as_a_python_int_is_specialised_with_a_guard(records):
    def f(x):
        shape = x.shape  # symbolic, until formatted: its sizes as Python ints
        return x.view(shape[0], -1) * 2, str(shape)
    cf = dynamo.compile(f)
    for b in [4, 6, 8, 10]:
        x = torch.randn(b, 3, 4)
        (got, text), (want, wtext) = cf(x), f(x)
        assert torch.equal(got, want) and text == wtext
    text = compiled(records)[1]["dynamic_shapes"]
    assert "x.size()[0] == 6  # specialised: used as a Python value at" in text
    # The specialised dimension stays static afterwards: one compile per size, never a wrong result.
    assert "outside [6, 6] (specialised: used as a Python value at" in compiled(records)[2]["reason"]
    assert len(compiled(records)) == 4


def test_duck_sized_relation_the_graph_depends_on_is_guarded(records):
    def f(x, y):
        return x + y
    cf = dynamo.compile(f)
    for b in [4, 6, 8]:
        x, y = torch.randn(b, 3), torch.randn(b, 3)
        assert torch.equal(cf(x, y), f(x, y))
    assert len(compiled(records)) == 2
    assert "x.size()[0] == y.size()[0] (duck sizing" in compiled(records)[1]["dynamic_shapes"]
    # Breaking the relation fails the guard (eager raises; so does the recompiled call).
    with pytest.raises(RuntimeError):
        cf(torch.randn(5, 3), torch.randn(7, 3))
    assert any("duck sizing" in r["reason"] for r in records[2:])
    failures = [f for r in records[2:] for m in r["misses"] for f in m["failures"] if f["kind"] == "SHAPE_ENV"]
    assert [(f["source"], f["dim"], f["expected"], f["seen"]) for f in failures] == [("x", 0, "== y.size()[0] (7)", "5")]


def test_relation_the_graph_does_not_depend_on_is_not_guarded(records):
    def f(x, y):
        return x.sum(0) * 2, y.relu()
    cf = dynamo.compile(f)
    for a, b in [(4, 5), (6, 9), (8, 8), (10, 3), (7, 12)]:
        x, y = torch.randn(a, 3), torch.randn(b, 2)
        out, ref = cf(x, y), f(x, y)
        assert all(torch.equal(o, r) for o, r in zip(out, ref))
    assert len(compiled(records)) == 2
    text = compiled(records)[1]["dynamic_shapes"]
    assert "s0 = x.size()[0]" in text and "s1 = y.size()[0]" in text


def test_slicing_and_shape_arithmetic_through_ops_stay_dynamic(records):
    def f(x, y):
        z = torch.cat([x, x], 0)
        return z[1:].relu().sum(1) + 1, y[:, :3].sum(1)
    cf = dynamo.compile(f)
    for b in [4, 6, 9, 13]:
        x, y = torch.randn(b, 3), torch.randn(b + 1, 5)
        out, ref = cf(x, y), f(x, y)
        assert all(torch.equal(o, r) for o, r in zip(out, ref))
    assert len(compiled(records)) == 2


def test_a_size_clamped_by_a_slice_keeps_its_symbol_with_a_guard_on_the_clamp(records):
    # x[:10] is 10 long while x has at least 10 elements and x's own length below that: which
    # case holds is guarded (the slice's line), never assumed linear over every size.
    def f(x):
        return x[:10] * 2
    cf = dynamo.compile(f)
    for b in [12, 16, 4, 20, 6, 25, 9]:
        x = torch.randn(b)
        assert torch.equal(cf(x), f(x)), b
    line = f.__code__.co_firstlineno + 1
    texts = [r["dynamic_shapes"] for r in compiled(records)]
    assert len(texts) == 3, texts  # static 12; 16.. with 10 <= n; 4.. with n < 10
    assert f"10 <= x.size()[0]  # slice bound at {__file__}:{line}" in texts[1], texts[1]
    assert f"10 > x.size()[0]  # slice bound at {__file__}:{line}" in texts[2], texts[2]
    assert not any("specialised" in t for t in texts)


def _seq_len(x):
    size = x.size()  # in inlined code: read lazily (torch 2.x's _get_seq_len does this)
    if len(size) == 2:
        return size[0]
    return size[1]


def _first_two(x):
    a, b, _ = x.size()
    return a * b


def test_size_of_a_dynamic_tensor_read_by_len_index_and_unpacking_stays_dynamic(records):
    def f(x):
        n = _seq_len(x)
        return x.reshape(_first_two(x), -1) * n

    cf = dynamo.compile(f)
    for t in [3, 4, 7, 9, 12]:
        x = torch.randn(2, t, 5)
        assert torch.equal(cf(x), f(x)), t
    assert len(compiled(records)) == 2
    assert "specialised" not in compiled(records)[1]["dynamic_shapes"]


def _whole_size(x):
    size = x.size()
    return x.new_zeros(size) + size.numel()  # the torch.Size used as a whole: still symbolic


def test_size_used_as_a_whole_stays_symbolic(records):
    def f(x):
        return _whole_size(x) + x

    cf = dynamo.compile(f)
    for t in [3, 4, 5, 9]:
        x = torch.randn(t, 2)
        assert torch.equal(cf(x), f(x)), t
    assert len(compiled(records)) == 2
    assert "specialised" not in compiled(records)[1]["dynamic_shapes"]


def test_transformer_encoder_thirty_sequence_lengths_compile_at_most_twice(records):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0)
    enc = torch.nn.TransformerEncoder(layer, num_layers=2).eval()
    f = dynamo.compile(enc)
    with torch.no_grad():
        for t in range(2, 32):
            x = torch.randn(t, 3, 32)
            assert torch.equal(f(x), enc(x)), t
    assert len(compiled(records)) == 2
    assert "src.size()[0] is dynamic (s0): automatic dynamic: the size changed (2 -> 3)" in compiled(records)[1]["dynamic_shapes"]


@pytest.mark.parametrize("backend", ["aot_eager", "aot_eager_decomp_partition"])
def test_aot_backend_compiles_per_size_inside_one_dynamic_entry(records, backend):
    # The AOT layer traces with the example sizes: the dynamic entry compiles the graph once per
    # distinct input size when called, the function itself compiles twice (static, dynamic), and
    # outputs and gradients equal eager bitwise for every size.
    m, ref = mlp(), mlp()
    cf = dynamo.compile(m, backend=backend)
    for b in BATCHES:
        x = torch.randn(b, 16)
        out, want = cf(x), ref(x)
        assert torch.equal(out, want), b
        out.sum().backward()
        want.sum().backward()
        for p, q in zip(m.parameters(), ref.parameters()):
            assert torch.equal(p.grad, q.grad), b
            p.grad = q.grad = None
    assert len(compiled(records)) == 3  # static 8, dynamic batch, size 1 specialised
    assert all(r["status"] != "cache-limit" for r in records)  # nothing ran eagerly
    assert (f"backend '{backend}' specialises its graph on the input sizes: this entry compiles the graph once "
            "per distinct input size when called (the function is not recompiled)") in compiled(records)[1]["dynamic_shapes"]


def test_fused_backend_lowers_per_size_inside_one_dynamic_entry_and_says_so(records):
    # (tests/python/test_fused_dynamic.py: kernels shared across sizes, models, training.)
    def f(x):
        return x * 2
    cf = dynamo.compile(f, backend="fused")
    for b in [4, 6, 9, 13]:
        x = torch.randn(b)
        assert torch.equal(cf(x), f(x))
    assert len(compiled(records)) == 2
    assert ("backend 'fused' specialises its graph on the input sizes: this entry compiles the graph once per "
            "distinct input size when called") in compiled(records)[1]["dynamic_shapes"]


def test_bad_arguments_are_user_errors():
    with pytest.raises(dynamo.UserError, match=r"dynamic=\.\.\.\) must be None, True or False, got 'yes'"):
        dynamo.compile(lambda x: x, dynamic="yes")
    with pytest.raises(dynamo.UserError, match="mark_dynamic: dim 3 is out of range for a tensor with 2 dimensions"):
        dynamo.mark_dynamic(torch.randn(2, 3), 3)
    with pytest.raises(dynamo.UserError, match="mark_dynamic: min 5 is greater than max 3"):
        dynamo.mark_dynamic(torch.randn(2, 3), 0, min=5, max=3)
    with pytest.raises(dynamo.UserError, match="mark_static needs a torch.Tensor, got list"):
        dynamo.mark_static([1], 0)
    with pytest.raises(dynamo.UserError, match="automatic_dynamic_shapes must be True or False"):
        dynamo.config.automatic_dynamic_shapes = 1


def test_in_place_size_change_specialises(records):
    def f(x):
        y = x * 2
        y.unsqueeze_(0)
        return y.sum(1) + y.shape[0]
    cf = dynamo.compile(f)
    for b in [4, 6, 8]:
        x = torch.randn(b, 3)
        assert torch.equal(cf(x), f(x))
    assert "Tensor.unsqueeze_() changes the sizes of its input in place" in compiled(records)[1]["dynamic_shapes"]


def test_dynamic_dims_and_shape_guards_go_to_the_trace_store(tmp_path):
    from dynamo import recording, trace
    path = tmp_path / "t.db"
    writer, restore = recording.record_into(path)
    try:
        m = mlp()
        f = dynamo.compile(m)
        for b in (8, 16, 24, 1):
            x = torch.randn(b, 16)
            assert torch.equal(f(x), m(x))
    finally:
        restore()
    reader = trace.open(str(path))
    run_id = reader.runs()[-1]["id"]
    arts = [a for a in reader.artifacts(run_id) if a["name"] == "dynamo.dynamic_shapes"]
    assert len(arts) == 2  # the static first compile records none
    text = bytes(arts[0]["data"]).decode()
    assert "s0 = input.size()[0] in [2, inf] (dynamic; example 16)" in text
    compiles = reader.compiles(run_id=run_id)
    assert arts[0]["compile_id"] == compiles[1]["id"]
    # size 1 leaves the dynamic entry's range: a shape-guard failure, recorded as data
    failures = [f for f in reader.guard_failures(run_id=run_id) if f["guard_kind"] == "SHAPE_ENV"]
    assert len(failures) == 1
    assert failures[0]["caused_compile_id"] == compiles[2]["id"]
    assert failures[0]["reason"].startswith("input.size()[0] is 1, outside [2, inf]")


def test_sizes_read_one_by_one_stay_symbolic(records):
    # x.shape[0], x.size(1) and `b, t, d = x.shape` give symbolic ints (x.size(k) nodes in the
    # graph) that view/reshape take without specialising.
    def f(x):
        b, t, d = x.shape
        return x.view(b, -1).sum(1) + x.view(x.shape[0] * t, d).sum(0).sum() + x.size(2)
    cf = dynamo.compile(f)
    for b in [2, 3, 5, 8, 13]:
        x = torch.randn(b, 4, 3)
        assert torch.equal(cf(x), f(x)), b
    assert len(compiled(records)) == 2
    assert "specialised" not in compiled(records)[1]["dynamic_shapes"]
    assert compiled(records)[1]["graphs"][0]["op_counts"]["torch.Tensor.size"] >= 1


def test_a_branch_on_a_size_relation_is_guarded_with_its_line(records):
    def f(x, y):
        if x.size(0) == 2 * y.size(0):
            return x.sum(0) * 2 + y.sum(0)
        return x.sum(0) - y.sum(0)
    cf = dynamo.compile(f)
    for b in [2, 3, 5, 7]:
        x, y = torch.randn(2 * b, 3), torch.randn(b, 3)
        assert torch.equal(cf(x, y), f(x, y)), b
    assert len(compiled(records)) == 2
    text = compiled(records)[1]["dynamic_shapes"]
    line = f.__code__.co_firstlineno + 1
    assert f"x.size()[0] == 2*y.size()[0]  # comparison at {__file__}:{line}" in text, text
    # The relation changes: the guard fails (naming both sizes) and the other branch compiles.
    x, y = torch.randn(10, 3), torch.randn(4, 3)
    assert torch.equal(cf(x, y), f(x, y))
    assert len(compiled(records)) == 3
    failures = [fl for m in compiled(records)[2]["misses"] for fl in m["failures"] if fl["kind"] == "SHAPE_ENV"]
    assert [(fl["source"], fl["dim"], fl["expected"], fl["seen"]) for fl in failures] == [
        ("x", 0, "x.size()[0] == 2*y.size()[0]", "x.size()[0] = 10, y.size()[0] = 4")]
    assert failures[0]["created_at"]["line"] == line


def _sym_shapes(record):
    nodes = json.loads(record["graphs"][0]["json"])["nodes"]
    return {n["name"]: n.get("meta", {}).get("tensor", {}).get("sym_shape") for n in nodes}


def test_the_graph_gives_every_node_its_symbolic_sizes(records):
    # Each node whose sizes depend on a symbol carries them in its tensor meta ("sym_shape"),
    # null for a static size; the JSON of a static compile has none.
    def f(x):
        return (torch.cat([x, x]) - 1).relu()[1:]
    for dynamic in (True, False):
        dynamo.reset()
        cf = dynamo.compile(f)
        x = torch.randn(6, 16)
        if dynamic:
            dynamo.mark_dynamic(x, 0)
        assert torch.equal(cf(x), f(x))
    dyn, static = compiled(records)
    shapes = _sym_shapes(dyn)
    assert shapes["x"] == ["s0", None]
    assert shapes["cat"] == ["2*s0", None]
    assert shapes["relu"] == ["2*s0", None]
    assert shapes["getitem"] == ["2*s0 - 1", None]
    assert "sym_shape" not in static["graphs"][0]["json"]


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "fused"])
def test_a_batch_equal_to_a_layer_width_stays_dynamic(records, backend):
    # dynamic=True, first batch 16 into Linear(16, 32): the batch and the feature width are duck
    # sized into one symbol, which linear() pins (the weight's 16 is a constant: parameters stay
    # static, as in PyTorch). The trace is redone with the two apart: only the width is pinned,
    # the batch stays dynamic (before: a second compile at batch 8, the duck guard failing).
    m = mlp()
    f = dynamo.compile(m, backend=backend, dynamic=True)
    with torch.no_grad():
        for b in [16, 8, 24, 16, 5, 33]:
            x = torch.randn(b, 16)
            got, want = f(x), m(x)
            if backend == "fused":
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
            else:
                assert torch.equal(got, want), b
    assert len(compiled(records)) == 1, [r["reason"] for r in compiled(records)]
    notes = compiled(records)[0]["dynamic_shapes"]
    assert "s0 = input.size()[0] in [2, inf] (dynamic; example 16)" in notes
    assert "input.size()[1] specialised to 16: linear() fails or changes its outputs for other sizes" in notes
    assert "duck sizing" not in notes and "weight" not in notes, notes


def test_a_batch_equal_to_a_layer_width_stays_dynamic_when_training(records):
    m, ref = mlp(), mlp()
    f = dynamo.compile(m, dynamic=True)
    for b in [16, 8, 24]:
        x = torch.randn(b, 16)
        y, want = f(x), ref(x)
        y.sum().backward()
        want.sum().backward()
        assert torch.equal(y, want)
        for p, q in zip(m.parameters(), ref.parameters()):
            assert torch.equal(p.grad, q.grad)
    assert len(compiled(records)) == 1


def test_a_relation_of_the_batch_with_a_width_the_graph_depends_on_is_guarded(records):
    # Both directions: the branch compares the batch with the layer's width: changing it
    # recompiles (and follows the other branch, as eager); other batches reuse that compile.
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(16, 4)

        def forward(self, x):
            y = self.lin(x)
            if x.size(0) == self.lin.in_features:
                return y * 2
            return y - 1

    torch.manual_seed(0)
    m = M()
    f = dynamo.compile(m, dynamic=True)
    with torch.no_grad():
        for b in [16, 16, 8, 24, 16, 5]:
            x = torch.randn(b, 16)
            assert torch.equal(f(x), m(x)), b
    assert len(compiled(records)) == 2, [r["reason"] for r in compiled(records)]
    assert "16" in compiled(records)[1]["reason"]


def test_a_duck_sized_relation_the_graph_depends_on_stays_shared_and_guarded(records):
    # x @ x needs a square x: the shared symbol is not pinned (a square of any size runs), so the
    # relation stays duck sized: squares reuse the compile, a non-square recompiles.
    def f(x):
        if x.size(0) == x.size(1):
            return x @ x
        return x * 2

    cf = dynamo.compile(f, dynamic=True)
    for shape in [(16, 16), (8, 8), (24, 24)]:
        x = torch.randn(*shape)
        assert torch.equal(cf(x), f(x)), shape
    assert len(compiled(records)) == 1
    assert "x.size()[1] == x.size()[0] (duck sizing" in compiled(records)[0]["dynamic_shapes"]
    x = torch.randn(8, 16)
    assert torch.equal(cf(x), f(x))
    assert len(compiled(records)) == 2
    assert "duck sizing" in compiled(records)[1]["reason"]
