"""Constructs of real model code that break the graph on purpose (issue 14), and break cleanly:
the break names the construct and why, and in default mode everything equals eager.

- backward hooks (module full / old-style backward hooks, full backward pre-hooks on torch 2.x,
  Tensor.register_hook inside forward): the hooks run through autograd on the real tensors, so
  gradients and the hooks' calls (order, count, what they see) equal eager's;
- modules with parameters made in forward (nn.Linear(4, 4)(x)): eager makes fresh random
  parameters on every call; compiled code must too, never one frozen initialisation.
"""
import pytest
import torch
from torch import nn

import dynamo
from capture_harness import Recorder, same
from stacks import only_on_stack2

BACKENDS = ["eager", "aot_eager"]


@pytest.fixture(autouse=True)
def _fresh():
    dynamo.reset()
    yield
    dynamo.reset()


def breaks_with(fn, *args):
    with pytest.raises(dynamo.Unsupported) as e:
        dynamo.compile(fn, fullgraph=True)(*args)
    dynamo.reset()
    return str(e.value).splitlines()[0]


# ---- backward hooks ---------------------------------------------------------------------------

def hooked_model(kind):
    """A small model and the log its hooks write, built the same way for eager and compiled."""
    torch.manual_seed(0)
    log = []

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(4, 8)
            self.fc2 = nn.Linear(8, 2)

        def forward(self, x):
            h = self.fc1(x).relu()
            if kind == "tensor":
                h.register_hook(lambda g: log.append(("h", g.shape, g.sum().item())))
                h.register_hook(lambda g: g * 0.5)  # a hook that changes the gradient
            return self.fc2(h)

    net = Net()
    if kind == "full":
        net.fc1.register_full_backward_hook(
            lambda m, gin, gout: log.append(("fc1", [g is None for g in gin], gout[0].sum().item())))
        net.fc2.register_full_backward_hook(
            lambda m, gin, gout: (log.append(("fc2", gout[0].sum().item())), (gin[0] * 2,))[1])
    elif kind == "old":
        net.fc2.register_backward_hook(lambda m, gin, gout: log.append(("fc2-old", len(gin))))
    elif kind == "pre":
        net.fc2.register_full_backward_pre_hook(lambda m, gout: log.append(("fc2-pre", gout[0].sum().item())))
    return net, log


def run_and_backward(net, x):
    for p in net.parameters():
        p.grad = None
    out = net(x)
    (out * torch.tensor([1.0, -2.0])).sum().backward()
    return out, x.grad, [p.grad.clone() for p in net.parameters()]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["full", "old", "tensor",
                                  pytest.param("pre", marks=only_on_stack2("register_full_backward_pre_hook is torch 2.x"))])
def test_backward_hooks_run_through_autograd_as_in_eager(kind, backend):
    x = torch.randn(3, 4)
    net, log = hooked_model(kind)
    ref = run_and_backward(net, x.clone().requires_grad_())
    ref_log = list(log)
    net, log = hooked_model(kind)
    with Recorder() as rec:
        compiled = dynamo.compile(net, backend=backend)
        got = run_and_backward(compiled, x.clone().requires_grad_())
        again = run_and_backward(compiled, x.clone().requires_grad_())  # the cache entries again
    assert same(got[0], ref[0]) and same(got[1], ref[1]) and all(same(a, b) for a, b in zip(got[2], ref[2]))
    assert log[:len(ref_log)] == ref_log and len(log) == 2 * len(ref_log) and ref_log
    assert same(again[0], ref[0])
    assert rec.breaks, "a hook that autograd calls breaks the graph"


@pytest.mark.parametrize("register", ["register_full_backward_hook",
                                      pytest.param("register_full_backward_pre_hook",
                                                   marks=only_on_stack2("backward pre-hooks are torch 2.x"))])
def test_backward_hook_added_after_compiling_recompiles_and_runs(register):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
    compiled = dynamo.compile(net)
    x = torch.randn(2, 4, requires_grad=True)
    compiled(x).sum().backward()
    calls = []
    getattr(net[2], register)(lambda m, *grads: calls.append(len(grads)))
    with Recorder() as rec:
        compiled(x).sum().backward()
    assert len(calls) == 1
    failures = [g["kind"] for r in rec.records for m in r["misses"] for g in m["failures"]]
    assert "MODULE_CALL" in failures, failures


def test_backward_hook_break_messages():
    x = torch.randn(3, 4)
    net, _ = hooked_model("full")
    assert breaks_with(net, x) == ("error: graph break (unsupported-call) with fullgraph=True: call of a module "
                                   "with backward hooks (Linear)")
    net, _ = hooked_model("tensor")
    assert breaks_with(net, x.requires_grad_()) == (
        "error: graph break (unsupported-call) with fullgraph=True: Tensor.register_hook() inside the compiled "
        "function: autograd calls the hook on the real tensor, which the graph cannot hold; the call runs as Python")


# ---- modules with parameters made in forward ---------------------------------------------------

class LazyHead(nn.Module):
    """Code that builds its layer on the fly (a pattern of quick experiments)."""

    def forward(self, x):
        return nn.Linear(x.shape[-1], 2)(x).relu()


def test_module_with_parameters_made_in_forward_is_fresh_on_every_call():
    x = torch.randn(3, 4)
    m = LazyHead()
    torch.manual_seed(7)
    ref = [m(x), m(x), torch.rand(1)]  # fresh parameters each call, and the generator moves on
    assert not same(ref[0], ref[1])
    torch.manual_seed(7)
    with Recorder() as rec:
        cm = dynamo.compile(m)
        got = [cm(x), cm(x), torch.rand(1)]
    assert all(same(a, b) for a, b in zip(got, ref))
    assert [b["detail"] for b in rec.breaks] == [
        "creating a module with parameters (Linear) inside the compiled function: they would "
        "be new on every call (create it in __init__)"]


def test_module_with_parameters_made_in_forward_breaks_in_fullgraph():
    msg = breaks_with(LazyHead(), torch.randn(3, 4))
    assert msg == ("error: graph break (unsupported-call) with fullgraph=True: creating a module with parameters "
                   "(Linear) inside the compiled function: they would be new on every call (create it in __init__)")


def test_parameter_free_module_made_in_forward_is_captured():
    def f(x):
        return nn.Softmax(dim=-1)(x) + nn.Dropout(p=0.0)(x)

    x = torch.randn(2, 5)
    with Recorder() as rec:
        out = dynamo.compile(f, fullgraph=True)(x)
    assert same(out, f(x)) and len(rec.graphs) == 1
