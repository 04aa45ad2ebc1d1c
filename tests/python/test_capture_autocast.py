"""torch.autocast blocks captured in one graph (core/src/interp/autocast.cpp; issue 14): the block
becomes enter_autocast / exit_autocast nodes, so every backend runs its ops in eager's dtypes.
Outputs, dtypes and gradients are compared with eager bitwise on the eager, aot_eager and fused
backends; the autocast state the frame is entered with is guarded."""
import pytest
import torch
from torch import nn

import dynamo
import dynamo.aot
from capture_harness import Recorder, same

BACKENDS = ["eager", "aot_eager", "fused"]


@pytest.fixture(autouse=True)
def _fresh():
    dynamo.reset()
    yield
    dynamo.reset()
    assert not torch.is_autocast_cpu_enabled()  # no test may leave autocast on


def one_graph(fn, *args, backend="eager"):
    with Recorder() as rec:
        out = dynamo.compile(fn, fullgraph=True, backend=backend)(*args)
    assert len(rec.graphs) == 1, rec.records
    assert rec.breaks == []
    return out, rec


def dtypes(out):
    return [o.dtype for o in out] if isinstance(out, (tuple, list)) else [out.dtype]


def check(out, ref, backend, bf16_inside=False):
    """eager and aot_eager: bitwise equal to eager. fused: its kernels (the float32 ops around the
    block; bfloat16 ops stay ATen calls) round differently, within float32's tolerance; gradients
    that flow back through bfloat16 casts within one bfloat16 step (2**-7 relative)."""
    assert out.dtype == ref.dtype
    if backend != "fused":
        assert same(out, ref)
    elif bf16_inside:
        torch.testing.assert_close(out, ref, rtol=2 ** -7, atol=2 ** -7 * ref.abs().max().item())
    else:
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


class Block(nn.Module):
    """A mixed-precision block as training scripts write it."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 8)
        self.norm = nn.LayerNorm(8)

    def forward(self, x):
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            h = self.fc1(x).relu()
            h = self.fc2(h)
        return self.norm(h.float() + x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_autocast_block_matches_eager_dtypes_and_values(backend):
    torch.manual_seed(0)
    m = Block()
    x = torch.randn(4, 8)
    out, rec = one_graph(m, x, backend=backend)
    ref = m(x)
    assert out.dtype == ref.dtype == torch.float32
    check(out, ref, backend)
    text = rec.graphs[0]["text"]
    assert "dynamo.context_nodes.enter_autocast('cpu', torch.bfloat16, True, True)" in text
    assert "dynamo.context_nodes.exit_autocast()" in text
    assert not torch.is_autocast_cpu_enabled()


@pytest.mark.parametrize("backend", BACKENDS)
def test_autocast_block_training_gradients_equal_eager(backend):
    torch.manual_seed(0)
    m = Block()
    x = torch.randn(4, 8, requires_grad=True)
    m.zero_grad()
    ref = m(x)
    weights = torch.linspace(-1, 1, ref.numel()).view_as(ref)  # a loss whose gradients are not ~0
    (ref * weights).sum().backward()
    ref_grads = [p.grad.clone() for p in m.parameters()] + [x.grad.clone()]
    m.zero_grad()
    x.grad = None
    out = dynamo.compile(m, fullgraph=True, backend=backend)(x)
    (out * weights).sum().backward()
    check(out, ref, backend)
    grads = [p.grad for p in m.parameters()] + [x.grad]
    assert [g.dtype for g in grads] == [g.dtype for g in ref_grads]
    for g, r in zip(grads, ref_grads):
        check(g, r, backend, bf16_inside=True)
    if backend != "eager":  # the AOT layer traced it (autocast's casts as ATen ops), no fallback
        last = dynamo.aot.last_records()[-1]
        assert last["function"] == "Block.forward" and last["training"] and last["fallback"] is None


def test_fused_runs_autocast_inference_graphs_on_the_eager_runner():
    from dynamo import _C
    x = torch.randn(2, 4)

    def f(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return torch.mm(x, x.t()) + 1

    _, rec = one_graph(f, x, backend="fused")
    report = _C._codegen.compile(rec.graphs[0]["json"], [x]).report
    assert report["eager_reason"] == ("node 'enter_autocast' enters an autocast block: kernels do not autocast "
                                      "(training graphs go through the AOT layer, which records autocast's casts "
                                      "as ops)")
    assert report["kernels"] == []


def test_cpu_amp_autocast_decorator_and_nesting():
    torch.manual_seed(0)
    fc = nn.Linear(4, 4)

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = fc

        @torch.cpu.amp.autocast()
        def forward(self, x):
            y = self.fc(x)
            with torch.autocast("cpu", enabled=False):  # a full-precision island
                z = self.fc(y.float())
            with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
                w = self.fc(z)
            return y, z, w, torch.is_autocast_cpu_enabled()

    h = Head()
    x = torch.randn(2, 4)
    out, _ = one_graph(h, x)
    ref = h(x)
    assert same(out, ref)
    assert dtypes(out[:3]) == [torch.bfloat16, torch.float32, torch.bfloat16] and out[3] is True
    out2, _ = one_graph(h, x, backend="aot_eager")
    assert same(out2, ref)


def test_autocast_queries_answer_the_traced_state():
    def f(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            inside = (torch.is_autocast_cpu_enabled(), torch.get_autocast_cpu_dtype())
        return x * 2, inside, torch.is_autocast_cpu_enabled()

    x = torch.randn(3)
    out, _ = one_graph(f, x)
    assert same(out, f(x))
    assert out[1] == (True, torch.bfloat16) and out[2] is False


def test_entry_state_is_guarded():
    torch.manual_seed(0)
    fc = nn.Linear(4, 4)

    def f(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = fc(x)
        return y * 2, x @ x.t()

    x = torch.randn(2, 4)
    cf = dynamo.compile(f, backend="aot_eager")
    assert same(cf(x), f(x))
    with Recorder() as rec:  # entered under autocast: recompiled, with eager's dtypes outside the block too
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out, ref = cf(x), f(x)
    assert same(out, ref) and dtypes(out) == [torch.bfloat16, torch.bfloat16]
    failures = [g for r in rec.records for m in r["misses"] for g in m["failures"]]
    assert [g["reason"] for g in failures if g["kind"] == "AUTOCAST"] == [
        "autocast changed: expected off, got cpu(torch.bfloat16)"]
    assert same(cf(x), f(x))  # and back outside: the first entry again


def test_cuda_autocast_without_cuda_is_disabled_as_in_eager():
    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")

    def f(x):
        with torch.cuda.amp.autocast():
            return x @ x

    x = torch.randn(2, 2)
    with pytest.warns(UserWarning):
        ref = f(x)
    out, rec = one_graph(f, x)
    assert same(out, ref) and out.dtype == torch.float32
    assert "enter_autocast" not in rec.graphs[0]["text"]


def test_graph_that_raises_inside_the_block_leaves_autocast():
    from dynamo import context_nodes

    def f(x, w, idx):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x @ w
            return y[idx] * 2  # an index out of range raises inside the graph

    x, w = torch.randn(2, 3), torch.randn(3, 2)
    cf = dynamo.compile(f, backend="eager")
    ok = torch.tensor([1])
    assert same(cf(x, w, ok), f(x, w, ok))
    bad = torch.tensor([7])
    with pytest.raises(IndexError):
        f(x, w, bad)
    with Recorder() as rec:
        with pytest.raises(IndexError):
            cf(x, w, bad)
    assert rec.records == []  # the same graph ran and raised
    assert not torch.is_autocast_cpu_enabled() and context_nodes.depth() == 0
    assert same(cf(x, w, ok), f(x, w, ok))


def test_graph_break_inside_the_block_runs_the_function_as_python():
    def f(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x @ x.t()
            print("inside")
            return y + 1

    x = torch.randn(2, 2)
    with pytest.raises(dynamo.Unsupported, match="print"):
        dynamo.compile(f, fullgraph=True)(x)
    dynamo.reset()
    with Recorder() as rec:
        out = dynamo.compile(f)(x)
    assert same(out, f(x)) and out.dtype == torch.bfloat16
    first = rec.records[0]
    assert first["function"].endswith(".f") and first["status"] == "skipped" and first["reason"].startswith("graph break inside")


@pytest.mark.parametrize("backend", BACKENDS)
def test_graph_without_blocks_called_under_autocast_follows_it(backend):
    # The AOT layer and fused fix dtypes when they compile: a graph compiled outside autocast is
    # guarded on that state, so a call under autocast recompiles (the eager runner's ops autocast
    # as they run); fused runs its graphs on the eager runner while autocast is on.
    torch.manual_seed(0)
    fc = nn.Linear(4, 4)

    def f(x):
        return fc(x).relu()

    x = torch.randn(2, 4)
    cf = dynamo.compile(f, backend=backend)
    assert same(cf(x), f(x))
    with Recorder() as rec:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out, ref = cf(x), f(x)
    assert out.dtype == ref.dtype == torch.bfloat16
    check(out, ref, backend, bf16_inside=True)
    failures = [g["kind"] for r in rec.records for m in r["misses"] for g in m["failures"]]
    assert ("AUTOCAST" in failures) == (backend != "eager"), failures
