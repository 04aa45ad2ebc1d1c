"""torch.inference_mode blocks and decorators captured in one graph (core/src/interp/inference_mode.cpp;
issue 14): the block becomes enter_inference_mode / exit_inference_mode nodes, so its results are
inference tensors as in eager. Compared with eager bitwise (values, is_inference(),
requires_grad, grad mode inside), on the eager, aot_eager and fused backends; the mode the frame
is entered in is guarded."""
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
    assert not torch.is_inference_mode_enabled() and torch.is_grad_enabled()


def one_graph(fn, *args, backend="eager"):
    with Recorder() as rec:
        out = dynamo.compile(fn, fullgraph=True, backend=backend)(*args)
    assert len(rec.graphs) == 1, rec.records
    assert rec.breaks == []
    return out, rec


def flags(out):
    return [(o.is_inference(), o.requires_grad) for o in out]


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(6, 12), nn.ReLU())
        self.head = nn.Linear(12, 3)

    def forward(self, x):
        feats = self.backbone(x)
        with torch.inference_mode():  # scores for logging only
            probs = self.head(feats).softmax(-1)
        return self.head(feats), probs


@pytest.mark.parametrize("backend", BACKENDS)
def test_inference_mode_block_makes_inference_tensors(backend):
    torch.manual_seed(0)
    m = Classifier()
    x = torch.randn(4, 6)
    out, rec = one_graph(m, x, backend=backend)
    ref = m(x)
    assert same(out, ref)
    assert flags(out) == flags(ref) == [(False, True), (True, False)]
    text = rec.graphs[0]["text"]
    assert "dynamo.context_nodes.enter_inference_mode(True)" in text and "exit_inference_mode()" in text
    out[0].sum().backward()  # the part outside the block trains as in eager
    assert m.head.weight.grad is not None
    if backend == "aot_eager":
        last = dynamo.aot.last_records()[-1]
        assert last["function"] == "Classifier.forward" and last["fallback"] == (
            "the graph enters torch.inference_mode: its results must be inference tensors, which a traced graph "
            "run outside the mode does not make")


def test_inference_mode_decorator_on_forward():
    torch.manual_seed(0)

    class Predictor(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))

        @torch.inference_mode()
        def forward(self, x):
            return self.net(x).argmax(-1), self.net(x)

    p = Predictor()
    x = torch.randn(3, 4)
    out, _ = one_graph(p, x)
    ref = p(x)
    assert same(out, ref) and flags(out) == flags(ref) == [(True, False), (True, False)]


def test_nesting_with_no_grad_and_inference_mode_false():
    w = torch.randn(3, 3, requires_grad=True)

    def f(x):
        with torch.no_grad():
            a = x @ w
            with torch.inference_mode():
                b = a * 2
                inside = (torch.is_grad_enabled(), torch.is_inference_mode_enabled(), b.is_inference())
                with torch.inference_mode(False):  # grad mode on again, as c10::InferenceMode sets it
                    c = x @ w
                    mid = (torch.is_grad_enabled(), torch.is_inference_mode_enabled())
        return a, b, c, inside, mid, torch.is_grad_enabled()

    x = torch.randn(2, 3)
    out, _ = one_graph(f, x)
    ref = f(x)
    assert same(out, ref)
    assert flags(out[:3]) == flags(ref[:3]) == [(False, False), (True, False), (False, True)]
    assert out[3:] == ((False, True, True), (True, False), True)


def test_entry_mode_is_guarded():
    def f(x):
        with torch.inference_mode(False):
            return x * 2, torch.is_inference_mode_enabled()

    x = torch.randn(3)
    cf = dynamo.compile(f)
    assert same(cf(x), f(x))
    with Recorder() as rec:
        with torch.inference_mode():
            xi = torch.randn(3)
            out, ref = cf(xi), f(xi)
    assert same(out, ref) and flags(out[:1]) == flags(ref[:1])
    failures = [g for r in rec.records for m in r["misses"] for g in m["failures"]]
    assert [g["reason"] for g in failures if g["kind"] == "INFERENCE_MODE"] == [
        "inference mode changed: expected disabled, got enabled"]


def test_inplace_update_of_an_inference_tensor_outside_raises_as_in_eager():
    def f(x):
        with torch.inference_mode():
            y = x * 2
        y.add_(1)
        return y

    x = torch.randn(3)
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside InferenceMode"):
        f(x)
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside InferenceMode"):
        dynamo.compile(f)(x)


def test_graph_that_raises_inside_the_block_leaves_inference_mode():
    from dynamo import context_nodes

    def f(x, idx):
        with torch.no_grad():
            with torch.inference_mode():
                return x[idx] * 2

    x = torch.randn(3)
    cf = dynamo.compile(f)
    ok = torch.tensor([1])
    assert same(cf(x, ok), f(x, ok))
    with pytest.raises(IndexError):
        cf(x, torch.tensor([9]))
    assert context_nodes.depth() == 0
