"""The aot_eager backends (docs/aot.md): joint forward/backward graphs at the ATen level, the
partition, the autograd wrapper, and the correctness rules: input mutation, output aliasing and
requires_grad, RNG, guards, double backward, and the fallbacks with their reasons."""
import copy

import pytest
import torch

import dynamo
import dynamo.aot as aot
from dynamo import _C


@pytest.fixture(autouse=True)
def _fresh():
    dynamo.reset()
    yield
    dynamo.reset()


def _last():
    return aot.last_records()[-1]


def _grads(module):
    return {n: p.grad for n, p in module.named_parameters()}


def _assert_same_state(a, b):
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p, q), n
        assert (p.grad is None) == (q.grad is None), n
        if p.grad is not None:
            assert torch.equal(p.grad, q.grad), n
    for (n, p), q in zip(a.named_buffers(), b.buffers()):
        assert torch.equal(p, q), n


def _cnn():
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(inplace=True),
                               torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 5))


@pytest.mark.parametrize("backend", ["aot_eager", "aot_eager_default_partitioner"])
def test_training_matches_eager_bitwise_outputs_grads_and_buffers(backend):
    torch.manual_seed(0)
    m = _cnn()
    m2 = copy.deepcopy(m)
    c = dynamo.compile(m2, backend=backend)
    x = torch.randn(2, 3, 8, 8)
    y, y2 = m(x), c(x)
    assert torch.equal(y, y2) and y2.requires_grad and y2.grad_fn is not None
    y.square().sum().backward()
    y2.square().sum().backward()
    _assert_same_state(m, m2)
    rec = _last()
    assert rec["fallback"] is None and rec["training"] is True and rec["backend"] == backend
    assert rec["saved"] and rec["bytes_saved"] > 0
    assert {"trace", "import", "partition", "compile_forward", "compile_backward"} <= set(rec["phases_ms"])


def test_joint_graph_has_aten_targets_with_tensor_meta_and_parameter_inputs():
    torch.manual_seed(0)
    c = dynamo.compile(_cnn(), backend="aot_eager")
    c(torch.randn(2, 3, 8, 8))
    joint = _last()["joint"]
    kinds = {n.target_kind for n in joint.nodes if n.op == "call_function"}
    assert kinds <= {"aten", "function"}  # function: operator.getitem
    schemas = {n.schema for n in joint.nodes if n.op == "call_function" and n.target_kind == "aten"}
    assert {"aten::convolution", "aten::native_batch_norm", "aten::convolution_backward",
            "aten::native_batch_norm_backward"} <= schemas
    sources = [n.source for n in joint.inputs]
    assert "self.0.weight" in sources and "self.1.running_mean" in sources and "tangents[0]" in sources
    conv = next(n for n in joint.nodes if getattr(n, "schema", "") == "aten::convolution")
    shape, dtype, device, rg = conv.tensor_meta
    assert (tuple(shape), dtype, device) == ((2, 4, 6, 6), "torch.float32", "cpu")
    assert conv.tensor_layout[0] == (144, 36, 6, 1)


def test_backward_is_compiled_lazily_on_first_backward():
    c = dynamo.compile(torch.nn.Linear(3, 2), backend="aot_eager")
    y = c(torch.randn(4, 3))
    assert "compile_backward" not in _last()["phases_ms"]
    y.sum().backward()
    assert "compile_backward" in _last()["phases_ms"]


def test_inference_traces_forward_only():
    m = _cnn().eval()
    c = dynamo.compile(m, backend="aot_eager")
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        assert torch.equal(c(x), m(x))
    rec = _last()
    assert rec["training"] is False and "joint" not in rec and "saved" not in rec


def test_batchnorm_running_stats_in_train_mode_update_once_as_eager():
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(3)
    bn2 = copy.deepcopy(bn)
    c = dynamo.compile(bn2, backend="aot_eager")
    for _ in range(3):
        x = torch.randn(4, 3, 5, 5)
        assert torch.equal(bn(x), c(x))
    _assert_same_state(bn, bn2)
    assert int(bn2.num_batches_tracked) == 3


class _Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.register_buffer("count", torch.zeros(()))
        self.register_buffer("total", torch.zeros(3))

    def forward(self, x):
        self.count += 1
        self.total.add_(x.detach().sum(0))
        return self.lin(x) * self.count


def test_in_place_updates_of_buffers_apply_exactly_once():
    torch.manual_seed(0)
    m = _Counter()
    m2 = copy.deepcopy(m)
    c = dynamo.compile(m2, backend="aot_eager")
    for _ in range(2):
        x = torch.randn(2, 3)
        y, y2 = m(x), c(x)
        assert torch.equal(y, y2)
        y.sum().backward()
        y2.sum().backward()
    _assert_same_state(m, m2)
    assert float(m2.count) == 2.0
    assert "self.count" in _last()["mutated_inputs"]


def test_in_place_op_on_a_plain_input_applies_to_the_caller_tensor():
    def f(x, w):
        x.mul_(2)
        return (x * w).sum()

    w = torch.randn(3, requires_grad=True)
    x1, x2 = torch.ones(3), torch.ones(3)
    w2 = w.detach().clone().requires_grad_()
    out1 = f(x1, w)
    out2 = dynamo.compile(f, backend="aot_eager")(x2, w2)
    assert torch.equal(out1, out2) and torch.equal(x1, x2)
    out1.backward()
    out2.backward()
    assert torch.equal(w.grad, w2.grad)


def test_mutating_an_input_that_requires_grad_falls_back_with_the_reason():
    def f(x):
        x.mul_(2)
        return x.sin()

    a = torch.randn(3, requires_grad=True)
    out = dynamo.compile(f, backend="aot_eager")(a * 1)
    ref = f(a * 1)
    assert torch.equal(out, ref)
    assert "mutates input 'x' in place and it requires grad" in _last()["fallback"]
    g1, = torch.autograd.grad(out.sum(), a)
    g2, = torch.autograd.grad(ref.sum(), a)
    assert torch.equal(g1, g2)


@pytest.mark.parametrize("body", ["view", "identity"])
def test_output_aliasing_an_input_falls_back_and_keeps_the_alias(body):
    def f(x, w):
        y = x.view(-1) if body == "view" else x
        return y, (x * w).sum()

    x, w = torch.randn(2, 3), torch.randn(3, requires_grad=True)
    y, s = dynamo.compile(f, backend="aot_eager")(x, w)
    if body == "view":  # an input returned as it is never reaches the graph
        assert "aliases input 'x'" in _last()["fallback"]
    y.add_(1)  # eager semantics: y shares x's storage
    assert torch.equal(x.view(-1), y.view(-1))


def test_each_output_requires_grad_as_in_eager():
    def f(x, w):
        return x * w, (x * 2).detach() + 1, x.sum() * 0 + w.detach().sum()

    x, w = torch.randn(3), torch.randn(3, requires_grad=True)
    outs = dynamo.compile(f, backend="aot_eager")(x, w)
    ref = f(x, w)
    assert [o.requires_grad for o in outs] == [o.requires_grad for o in ref] == [True, False, False]
    assert all(torch.equal(a, b) for a, b in zip(outs, ref))


def test_dropout_matches_eager_for_the_same_seed_and_rng_state_after():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 2))
    m2 = copy.deepcopy(m)
    c = dynamo.compile(m2, backend="aot_eager")
    x = torch.randn(16, 8)
    for step in range(3):
        torch.manual_seed(step)
        y = m(x)
        after_eager = torch.random.get_rng_state()
        torch.manual_seed(step)
        y2 = c(x)
        assert torch.equal(torch.random.get_rng_state(), after_eager)
        assert torch.equal(y, y2)
        y.sum().backward()
        y2.sum().backward()
    _assert_same_state(m, m2)
    fw = _last()["forward"]
    random = {n.name for n in fw.nodes if n.op == "call_function" and n.target_kind == "aten"
              and n.schema.split(".")[0] in ("aten::native_dropout", "aten::bernoulli_")}
    assert random  # CPU eager dropout: bernoulli_ on an empty tensor, as here
    assert not random & set(_last()["recomputed"])


def test_in_place_dropout_on_a_view_keeps_its_backward_writes():
    # autograd's backward of an in-place op on a view writes through as_strided views that no
    # node uses; the partition must not drop those writes (they are sequenced explicitly).
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                            torch.nn.Dropout(0.2, inplace=True), torch.nn.Linear(4, 5))
    m2 = copy.deepcopy(m)
    c = dynamo.compile(m2, backend="aot_eager")
    x = torch.randn(8, 3, 8, 8)
    torch.manual_seed(1)
    y = m(x)
    torch.manual_seed(1)
    y2 = c(x)
    assert torch.equal(y, y2)
    y.square().sum().backward()
    y2.square().sum().backward()
    _assert_same_state(m, m2)


def test_in_place_residual_add_on_an_output_value():
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)

        def forward(self, x):
            out = self.conv(x) * 2
            out += x
            return out

    torch.manual_seed(0)
    m = Block()
    m2 = copy.deepcopy(m)
    x = torch.randn(2, 4, 5, 5, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    y, y2 = m(x), dynamo.compile(m2, backend="aot_eager")(x2)
    assert torch.equal(y, y2) and _last()["fallback"] is None
    y.square().sum().backward()
    y2.square().sum().backward()
    _assert_same_state(m, m2)
    assert torch.equal(x.grad, x2.grad)


def test_a_new_requires_grad_pattern_shape_or_dtype_recompiles():
    compiles = []
    dynamo.add_compile_listener(compiles.append)
    try:
        def f(x, w):
            return (x * w).tanh()

        c = dynamo.compile(f, backend="aot_eager")
        w = torch.randn(3)
        c(torch.randn(3), w)
        assert _last()["training"] is False
        wg = w.clone().requires_grad_()
        out = c(torch.randn(3), wg)
        assert _last()["training"] is True and out.requires_grad
        out.sum().backward()
        assert wg.grad is not None
        c(torch.randn(4, 3), wg)
        c(torch.randn(3, dtype=torch.float64), wg.detach().double().requires_grad_())
        assert len([r for r in compiles if r["status"] == "compiled"]) == 4
    finally:
        dynamo.remove_compile_listener(compiles.append)


def _double_backward_message(backend, fn):
    return (f"dynamo: backend '{backend}' cannot differentiate the backward of the compiled graph of "
            f"'{fn.__qualname__}' ({fn.__code__.co_filename}:{fn.__code__.co_firstlineno}) again: "
            f"create_graph=True / double backward through an AOT graph is not supported. Hint: compile "
            f"this function with backend='eager', or run it under dynamo.disable, when you need "
            f"higher-order gradients")


@pytest.mark.parametrize("backend", ["aot_eager", "aot_eager_default_partitioner", "aot_eager_decomp_partition"])
@pytest.mark.parametrize("how", ["autograd.grad", "backward"])
def test_double_backward_raises_an_error_naming_the_function(backend, how):
    def cube(x, w):
        return (x * w).pow(3).sum()

    x, w = torch.randn(3), torch.randn(3, requires_grad=True)
    compiled = dynamo.compile(cube, backend=backend)
    out = compiled(x, w)
    assert _last()["training"] and _last()["fallback"] is None
    with pytest.raises(RuntimeError) as err:
        if how == "backward":
            out.backward(create_graph=True)
        else:
            torch.autograd.grad(out, w, create_graph=True)
    assert str(err.value) == _double_backward_message(backend, cube)
    # Never a silent wrong gradient: no grad was written, and a first-order backward of a new
    # call still gives eager's.
    assert w.grad is None
    compiled(x, w).backward()
    expected = torch.autograd.grad(cube(x, w), w)[0]
    assert torch.allclose(w.grad, expected) if backend == "aot_eager_decomp_partition" else torch.equal(w.grad, expected)


@pytest.mark.parametrize("make,reason", [
    (lambda: torch.randn(3, 3).to_sparse(), "is a sparse tensor"),
    (lambda: torch.randn(3, dtype=torch.complex64), "is a complex tensor"),
    ])
def test_tensors_the_tracer_cannot_handle_fall_back_with_a_reason(make, reason):
    def f(x):
        return x * 2

    x = make()
    out = dynamo.compile(f, backend="aot_eager")(x)
    assert reason in _last()["fallback"]
    ref = f(x)
    assert torch.equal(out.to_dense() if out.is_sparse else out.dequantize() if out.is_quantized else out,
                       ref.to_dense() if ref.is_sparse else ref.dequantize() if ref.is_quantized else ref)


def test_torchvision_nms_falls_back_with_the_op_named():
    pytest.importorskip("torchvision")

    def f(boxes, scores):
        return (torch.ops.torchvision.nms(boxes * 1, scores, 0.5),)

    boxes = torch.tensor([[0, 0, 10, 10], [1, 1, 11, 11], [50, 50, 60, 60]], dtype=torch.float32)
    scores = torch.tensor([0.9, 0.8, 0.7])
    gm = torch.fx.symbolic_trace(f)
    reason = aot.compile_graph(gm, [boxes, scores], "aot_eager", "f", "m.py", 3)
    assert reason == ("operator torchvision::nms is not an ATen op and has no meta kernel in torch 1.13: "
                      "its graph runs on the eager runner")
    assert _last()["fallback"] == reason


def test_data_dependent_output_shapes_fall_back():
    def f(x):
        return (torch.nonzero(x * 1),)

    reason = aot.compile_graph(torch.fx.symbolic_trace(f), [torch.tensor([0.0, 1.0, 2.0])], "aot_eager")
    assert reason == "operator aten::nonzero has an output shape that depends on tensor values"


def test_decomp_partition_counts_and_disables_groups_and_never_decomposes_dropout():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Dropout(0.3),
                            torch.nn.Linear(8, 4), torch.nn.LogSoftmax(-1))
    x = torch.randn(5, 8)
    torch.manual_seed(1)
    ref = m(x)
    c = dynamo.compile(m, backend="aot_eager_decomp_partition")
    torch.manual_seed(1)
    out = c(x)
    assert torch.allclose(out, ref, atol=1e-6, rtol=1e-5)
    rec = _last()
    assert rec["decompositions"]["activations"] >= 1 and rec["decompositions"]["softmax"] >= 1
    schemas = {n.schema for n in rec["joint"].nodes if n.op == "call_function" and n.target_kind == "aten"}
    # (bernoulli_(empty_like(x)) is rewritten to bernoulli.p(x): the same draws, rewrites.functional_bernoulli)
    assert schemas & {"aten::native_dropout", "aten::bernoulli_.float", "aten::bernoulli.p"} and "aten::gelu" not in schemas and "aten::rand_like" not in schemas
    aot.decompositions.set_disabled(["activations"])
    try:
        dynamo.reset()
        c = dynamo.compile(copy.deepcopy(m), backend="aot_eager_decomp_partition")
        c(x)
        rec = _last()
        assert rec["decompositions"]["activations"] == 0
        assert "aten::gelu" in {n.schema for n in rec["joint"].nodes if n.op == "call_function"}
    finally:
        aot.decompositions.set_disabled([])


def test_unknown_decomposition_group_is_a_user_error():
    with pytest.raises(dynamo.UserError, match=r"unknown decomposition group 'nope'\n  = hint: known groups: activations, softmax"):
        aot.decompositions.set_disabled(["nope"])


def test_optimize_and_list_backends_know_the_aot_names():
    assert {"aot_eager", "aot_eager_default_partitioner", "aot_eager_decomp_partition"} <= set(dynamo.list_backends())

    def f(x, w):
        return (x @ w).relu()

    x, w = torch.randn(2, 3), torch.randn(3, 3, requires_grad=True)
    with dynamo.optimize("aot_eager"):
        out = f(x, w)
    assert torch.equal(out, f(x, w)) and _last()["function"].endswith(".f")


def test_aot_graphs_and_partition_go_to_the_trace_store(tmp_path):
    from dynamo import recording, trace
    path = tmp_path / "t.db"
    writer, restore = recording.record_into(path)
    try:
        c = dynamo.compile(torch.nn.Linear(3, 2), backend="aot_eager")
        c(torch.randn(4, 3)).sum().backward()
    finally:
        restore()
    reader = trace.open(str(path))
    run_id = reader.runs()[-1]["id"]
    arts = {a["name"]: a for a in reader.artifacts(run_id)}
    assert {"dynamo.aot", "dynamo.aot.joint", "dynamo.aot.forward", "dynamo.aot.backward"} <= set(arts)
    import json
    summary = json.loads(bytes(arts["dynamo.aot"]["data"]).decode())
    assert summary["backend"] == "aot_eager" and summary["saved"] and "partition" in summary["phases_ms"]
    joint = _C._graph.read_graph(bytes(arts["dynamo.aot.joint"]["data"]).decode())
    assert any(n.op == "call_function" and n.schema == "aten::addmm" for n in joint.nodes)
    assert arts["dynamo.aot"]["compile_id"] == arts["dynamo.aot.backward"]["compile_id"] != 0


def test_logs_print_the_graphs_and_the_partition(capsys):
    from dynamo import logs
    logs.set_logs("aot_graphs,partition")
    try:
        dynamo.compile(torch.nn.Linear(3, 2), backend="aot_eager")(torch.randn(4, 3))
    finally:
        logs.set_logs("")
    err = capsys.readouterr().err
    assert "[dynamo] aot: aot_eager compiled Linear.forward" in err and "(training): trace" in err
    assert "[dynamo] aot joint graph of Linear.forward" in err and "torch.ops.aten.addmm.default" in err
    assert "[dynamo] partition of Linear.forward" in err and "saved" in err


def test_backward_under_saved_tensors_hooks():
    # torch 1.13 cannot unpack a saved leaf under saved_tensors_hooks; parameters stay on ctx.
    torch.manual_seed(0)
    m = _cnn()
    m2 = copy.deepcopy(m)
    c = dynamo.compile(m2, backend="aot_eager")
    x = torch.randn(2, 3, 8, 8)
    packed = []

    def pack(t):
        packed.append(t.shape)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y, y2 = m(x), c(x)
    y.sum().backward()
    y2.sum().backward()
    _assert_same_state(m, m2)
    assert packed


def test_partition_binding_splits_a_joint_graph():
    b = _C._graph.GraphBuilder()
    meta = ((3,), torch.float32, "cpu", False)
    x = b.placeholder("x", name="primals_1", tensor_meta=((3,), torch.float32, "cpu", True))
    t = b.placeholder("tangents[0]", name="tangents_1", tensor_meta=meta)
    s = b.call_function(torch.ops.aten.sin.default, (x,), name="sin", tensor_meta=meta)
    c = b.call_function(torch.ops.aten.cos.default, (x,), name="cos", tensor_meta=meta)
    g = b.call_function(torch.ops.aten.mul.Tensor, (t, c), name="mul", tensor_meta=meta)
    b.output((s, g))
    part = _C._aot.partition(b.build().serialize(), 1, 1)
    fw, bw = _C._graph.read_graph(part["forward"]), _C._graph.read_graph(part["backward"])
    assert [n.name for n in fw.inputs] == ["primals_1"]
    assert [n.name for n in bw.inputs][-1] == "tangents_1"
    assert part["bytes_saved"] == 12 * len(part["saved"]) and part["summary"]
    xv, tv = torch.randn(3), torch.randn(3)
    outs = fw.resolve().runner()(xv)
    assert torch.equal(outs[0], xv.sin())
    grads = bw.resolve().runner()(*outs[1:], tv)
    assert torch.equal(grads[0], tv * xv.cos())


def test_outputs_aliasing_each_other_fall_back_and_keep_the_alias():
    def f(x, w):
        y = x * w
        return y, y.view(-1)

    x, w = torch.randn(2, 3), torch.randn(3, requires_grad=True)
    y, v = dynamo.compile(f, backend="aot_eager")(x, w)
    assert "graph output 1 aliases graph output 0" in _last()["fallback"]
    assert v._base is y or v._base is y._base or v.data_ptr() == y.data_ptr()


def test_integer_and_constant_outputs_in_training():
    def f(x, w):
        y = x * w
        return y.sum(), y.argmax(), torch.ones(2)

    x, w = torch.randn(4), torch.randn(4, requires_grad=True)
    outs = dynamo.compile(f, backend="aot_eager")(x, w)
    ref = f(x, w)
    assert [o.requires_grad for o in outs] == [o.requires_grad for o in ref]
    assert all(torch.equal(a, b) for a, b in zip(outs, ref))
    outs[0].backward()
    assert torch.equal(w.grad, x)


def test_tensor_constants_made_in_the_graph_become_inputs():
    def f(x, w):
        return x * w + torch.tensor([1.0, 2.0, 3.0])

    x, w = torch.randn(3), torch.randn(3, requires_grad=True)
    out = dynamo.compile(f, backend="aot_eager")(x, w)
    assert torch.equal(out, f(x, w)) and _last()["fallback"] is None
    assert any(n.source.startswith("constant ") for n in _last()["joint"].inputs)
    out.sum().backward()
    assert torch.equal(w.grad, x)
    with torch.no_grad():
        assert torch.equal(dynamo.compile(f, backend="aot_eager")(x, w), f(x, w))
    assert _last()["training"] is False and _last()["fallback"] is None


def test_a_saved_parameter_changed_before_backward_raises_as_in_eager():
    lin = torch.nn.Linear(3, 3)
    out = dynamo.compile(lin, backend="aot_eager")(torch.randn(2, 3, requires_grad=True))
    with torch.no_grad():
        lin.weight.mul_(2)
    with pytest.raises(RuntimeError, match=r"modified by an inplace operation: \[torch.FloatTensor \[3, 3\]\] is at "
                                           r"version \d+; expected version \d+ instead \(a parameter saved"):
        out.sum().backward()


def test_inference_graphs_keep_outputs_aliasing_inputs():
    def f(x):
        y = x * 2
        return x.view(-1), y, y.t()

    x = torch.randn(2, 3)
    with torch.no_grad():
        v, y, yt = dynamo.compile(f, backend="aot_eager")(x)
    assert _last()["fallback"] is None and _last()["training"] is False
    assert v.data_ptr() == x.data_ptr() and yt.data_ptr() == y.data_ptr()
    v.add_(1)
    assert torch.equal(x.view(-1), v)


def test_forward_and_backward_compilers_plug_in():
    seen = []

    def fw_compiler(graph):
        seen.append(("forward", sorted({n.schema for n in graph.nodes if n.op == "call_function"
                                        and n.target_kind == "aten"})))
        return graph.runner()

    def bw_compiler(graph):
        seen.append(("backward", len(graph.inputs)))
        return graph.runner()

    backend = aot.make_backend("aot_eager", fw_compiler, bw_compiler)
    lin = torch.nn.Linear(3, 2)
    out = dynamo.compile(lin, backend=backend)(torch.randn(4, 3))
    assert seen == [("forward", ["aten::addmm", "aten::t"])]
    out.sum().backward()
    assert seen[1][0] == "backward" and lin.weight.grad is not None


def _step_peak_bytes(step):
    """Peak of the running sum of the allocations and frees the profiler records during step()
    (deterministic on CPU: the same ops in the same order allocate the same sizes)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                    key=lambda e: e.start_ns() if hasattr(e, "start_ns") else e.start_us() * 1000)
    live = peak = 0
    for e in events:
        live += e.nbytes()
        peak = max(peak, live)
    return peak


def test_backward_frees_each_saved_value_after_its_last_use_as_eager():
    # Each layer saves 1 MiB activations; eager autograd frees them one by one as the backward
    # goes down the layers. The compiled backward must not hold them all until it returns. (The
    # save-all partition: the min-cut would save only x and w here and recompute the rest.)
    def f(x, w):
        for _ in range(6):
            x = torch.sin(x * w)
        return x

    torch.manual_seed(0)
    x, w = torch.randn(512, 512), torch.randn(512, 512, requires_grad=True)
    c = dynamo.optimize("aot_eager_default_partitioner")(f)
    c(x, w).sum().backward()  # compiles the forward and the backward
    w.grad = None
    eager = _step_peak_bytes(lambda: f(x, w).sum().backward())
    g_eager, w.grad = w.grad, None
    compiled = _step_peak_bytes(lambda: c(x, w).sum().backward())
    assert torch.equal(w.grad, g_eager)
    assert _last()["fallback"] is None and len(_last()["saved"]) >= 6
    assert compiled <= eager, (compiled, eager)


@pytest.mark.parametrize("backend", ["aot_eager", "aot_eager_default_partitioner"])
def test_retain_graph_keeps_the_saved_values_for_a_second_backward(backend):
    torch.manual_seed(0)
    m = _cnn()
    m2 = copy.deepcopy(m)
    c = dynamo.compile(m2, backend=backend)
    x = torch.randn(2, 3, 8, 8)
    y, y2 = m(x).square().sum(), c(x).square().sum()
    for _ in range(2):
        y.backward(retain_graph=True)
        y2.backward(retain_graph=True)
    _assert_same_state(m, m2)
    y.backward()
    y2.backward()
    _assert_same_state(m, m2)
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        y2.backward()
