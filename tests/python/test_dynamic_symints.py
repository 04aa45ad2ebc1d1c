"""Symbolic Python ints (docs/dynamic-shapes.md, core/src/interp/sym_values.cpp): an int input that
changes between calls becomes a graph input after its first change instead of a constant, where
the graph only computes with it; comparisons become guards with their line; a value that must be
concrete is specialised with a guard. Every result is checked against eager."""
import math

import pytest
import torch

import dynamo

from compile_fixtures import compiled, fresh_dynamo, records  # noqa: F401  (fixtures)


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def same(a, b):
    if isinstance(a, tuple):
        return len(a) == len(b) and all(same(p, q) for p, q in zip(a, b))
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    return type(a) is type(b) and a == b


X = torch.randn(2, 4)


def test_an_int_argument_that_changes_every_call_compiles_three_times(records):
    def f(x, step):
        return x * step + step * 2
    cf = dynamo.compile(f)
    for s in range(12):
        assert same(cf(X, s), f(X, s)), s
    # 0 and 1 stay constants (as sizes 0 and 1 do); from 2 on one graph takes the int as input.
    assert len(compiled(records)) == 3
    text = compiled(records)[2]["dynamic_shapes"]
    assert "step is dynamic (s0): automatic dynamic: the value changed (1 -> 2)" in text
    assert "s0 = step in [2, inf] (dynamic; example 2)" in text
    assert "ints below 2 stay constants" in compiled(records)[1]["dynamic_shapes"]
    guards = {(g["kind"], g["source"]) for g in compiled(records)[2]["guards"]}
    assert ("TYPE_MATCH", "step") in guards and ("EQUALS_MATCH", "step") not in guards


def test_a_module_step_counter_does_not_recompile_every_call(records):
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.lin = torch.nn.Linear(4, 4)
            self.step = 0

        def forward(self, x):
            self.step += 1
            return self.lin(x) * self.step

    m, ref = M(), M()
    cm = dynamo.compile(m)
    for i in range(10):
        assert torch.equal(cm(X), ref(X)), i
        assert m.step == ref.step == i + 1 and type(m.step) is int
    assert len(compiled(records)) == 3
    assert "self.step is dynamic (s0)" in compiled(records)[2]["dynamic_shapes"]


def test_a_counter_in_a_dict_written_back_by_the_graph(records):
    state = {"step": 0}

    def f(x):
        state["step"] += 1
        return x + state["step"]
    cf = dynamo.compile(f)
    want = {"step": 0}
    for i in range(8):
        want["step"] += 1
        assert torch.equal(cf(X), X + want["step"]), i
        assert state == want
    assert len(compiled(records)) == 3


def test_int_results_come_back_as_python_ints(records):
    def f(x, n):
        return x * n, n + 1, -n, n // 2, n % 3, n * n, 3 - n, +n
    cf = dynamo.compile(f)
    for n in range(2, 12):
        assert same(cf(X, n), f(X, n)), n
    assert len(compiled(records)) == 2  # static 2, then one graph for every n >= 2


def test_a_branch_on_a_symbolic_int_is_guarded_with_its_line(records):
    def f(x, n):
        if n % 3 == 0:
            return x + n
        return x - n
    cf = dynamo.compile(f)
    for n in range(2, 14):
        assert same(cf(X, n), f(X, n)), n
    # static 2; symbolic from 3 with n % 3 == 0; the other outcome (4) gets an entry of its own
    assert len(compiled(records)) == 3
    texts = [r["dynamic_shapes"] for r in compiled(records)[1:]]
    assert any("Mod(n, 3) == 0  # comparison at " in t and "test_dynamic_symints.py" in t for t in texts)
    assert any("Mod(n, 3) != 0  # comparison at " in t for t in texts)


def test_a_relation_guard_failure_is_recorded_as_data(records):
    def f(x, n):
        if n > 4:
            return x + n
        return x - n
    cf = dynamo.compile(f)
    for n in (2, 3, 6):
        assert same(cf(X, n), f(X, n)), n
    assert len(compiled(records)) == 3
    failures = [fl for m in compiled(records)[2]["misses"] for fl in m["failures"] if fl["kind"] == "SHAPE_ENV"]
    assert [(fl["source"], fl["dim"], fl["expected"], fl["seen"]) for fl in failures] == [("n", -1, "n <= 4", "n = 6")]
    assert failures[0]["reason"].startswith("shape guard failed: n <= 4 (guard created at ")


def test_a_python_loop_count_specialises_the_int_with_a_guard(records):
    def f(x, n):
        x = x * 2
        for i in range(n):
            x = x + i
        return x
    cf = dynamo.compile(f)
    for n in range(2, 7):
        assert same(cf(X, n), f(X, n)), n
    assert len(compiled(records)) == 5  # one per count: the graph unrolls the loop
    text = compiled(records)[1]["dynamic_shapes"]
    assert "n == 3  # specialised: used as a Python value at" in text
    # Once specialised, the int stays a constant in later compiles of the code.
    assert "n is dynamic" not in compiled(records)[2]["dynamic_shapes"]


def test_an_int_that_sets_a_size_is_specialised(records):
    def f(x, n):
        return x.view(n, -1).sum(0)
    cf = dynamo.compile(f)
    for n in (2, 4, 8, 4):
        assert same(cf(X, n), f(X, n)), n
    assert "n == 4  # specialised: Tensor.view() fails or changes its outputs for other sizes at" in \
        compiled(records)[1]["dynamic_shapes"]
    assert len(compiled(records)) == 3


@pytest.mark.parametrize("body", [
    lambda x, n: x + [1, 2, 3][n % 3],
    lambda x, n: x + len(f"{n}"),
    lambda x, n: x + (n in (1, 2, 5)),
    lambda x, n: x + torch.tensor(n),
    lambda x, n: x * math.sqrt(n),
    lambda x, n: x + torch.zeros(n).sum(),
])
def test_values_needed_as_python_values_are_exact(records, body):
    cf = dynamo.compile(body)
    for n in range(0, 7):
        assert same(cf(X, n), body(X, n)), n
    assert all(not r["breaks"] for r in records)


def test_other_types_after_a_symbolic_int_recompile(records):
    def f(x, n):
        return x * n
    cf = dynamo.compile(f)
    for n in (2, 3, 4.5, True, 7, 9):
        assert same(cf(X, n), f(X, n)), n
    assert len(compiled(records)) == 4  # 2 static, ints >= 2, 4.5, True


def test_a_graph_break_elsewhere_keeps_the_int_symbolic(records, capsys):
    def f(x, n):
        y = x * n
        print("between")
        return y + n
    cf = dynamo.compile(f)
    for n in range(0, 8):
        assert same(cf(X, n), f(X, n)), n
    # f: static 0, static 1, symbolic from 2. Each compile of f makes its own resume function;
    # they share one policy (the same break of the same function), so the third one, compiled
    # at n = 2, already knows n changed: symbolic from 2 too.
    assert len(compiled(records)) == 6
    assert sum("n is dynamic" in (r["dynamic_shapes"] or "") for r in compiled(records)) == 2
    assert "n is dynamic (s0): automatic dynamic: the value changed (1 -> 2)" in compiled(records)[-1]["dynamic_shapes"]
    assert not any(r["breaks"] and "symbolic int" in r["breaks"][0]["detail"] for r in records)


def test_dynamic_false_and_automatic_off_keep_ints_constant(records):
    def f(x, n):
        return x * n
    cf = dynamo.compile(f, dynamic=False)
    for n in range(2, 7):
        assert same(cf(X, n), f(X, n))
    assert len(compiled(records)) == 5
    dynamo.reset()
    records.clear()
    dynamo.config.automatic_dynamic_shapes = False
    cf = dynamo.compile(f)
    for n in range(2, 7):
        assert same(cf(X, n), f(X, n))
    assert len(compiled(records)) == 5


def test_the_int_is_a_graph_input(records):
    def f(x, n):
        return x * (n + 1)
    cf = dynamo.compile(f)
    for n in (2, 3, 4):
        assert same(cf(X, n), f(X, n))
    graph = compiled(records)[1]["graphs"][0]
    assert graph["num_inputs"] == 2 and graph["op_counts"] == {"operator.add": 1, "operator.mul": 1}
    assert '{"op":"placeholder","name":"n","source":"n"' in graph["json"]


def test_ints_inside_a_tuple_argument_stay_exact(records):
    # torchvision's clip_boxes_to_image(boxes, (height, width)): the tuple's ints become symbolic
    # after they change; the tuple must not be folded into a constant with the first values.
    def clip(boxes, size):
        height, width = size
        return torch.stack((boxes[..., 0::2].clamp(min=0, max=width),
                            boxes[..., 1::2].clamp(min=0, max=height)), dim=2).reshape(boxes.shape)
    cf = dynamo.compile(clip)
    torch.manual_seed(0)
    for size in [(128, 160), (120, 160), (146, 128), (120, 160), (146, 128), (99, 77)]:
        boxes = torch.rand(50, 4) * 300
        assert torch.equal(cf(boxes, size), clip(boxes, size)), size
    assert len(compiled(records)) == 3
    assert "size[1] is dynamic (s1)" in compiled(records)[2]["dynamic_shapes"]
