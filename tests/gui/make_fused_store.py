"""The inspector's kernel fixture: a trace store with the fused backend's kernels. Run by ctest
(gui.fused_store, PYTHONPATH=build/python):

    python3 tests/gui/make_fused_store.py OUT.db [--model resnet18]

Records, into a fresh OUT.db:
  - Net.forward (conv / batch norm / relu / pointwise arithmetic / mean / linear / sigmoid, eval,
    no grad) under backend "fused", called 5 times: its compile's graph 0 has generated C++
    kernels, each with the nodes it computes, its source, cache state, compile time and run time;
  - step (a linear layer's arithmetic with a weight that requires grad) under "fused", one
    forward and backward: the AOT layer's forward graph has kernels (graph "aot.forward"), and
    its backward graph, compiled at the backward call, late ones (graph "aot.backward");
  - with --model NAME, a torchvision model (eval, no grad, batch 1, 3x64x64) under "fused" too
    (docs/inspector.md's kernel screenshots and figures use resnet18).
Checks each compiled result against eager (rtol 1e-4, atol 1e-5) and exits 1 otherwise. Kernels
come from the user's kernel disk cache when present ($DYNAMO_KERNEL_CACHE): the tests read hit
or miss from the store, never assume one.
"""
import argparse
import os
import sys

import torch

import dynamo
from dynamo import recording


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)) * 2 + 1)
        y = y.mean(dim=(2, 3))
        return torch.sigmoid(self.fc(y)) * 3


def step(w, v):
    return torch.sigmoid(v @ w * 2 + 1).sum(dim=1)


def close(a, b):
    return torch.allclose(a, b, rtol=1e-4, atol=1e-5)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--model", default="", help="also a torchvision model under fused")
    args = p.parse_args(argv)
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(args.out + suffix):
            os.remove(args.out + suffix)
    torch.manual_seed(0)
    writer, restore = recording.record_into(args.out)
    ok = True
    try:
        net = Net().eval()
        x = torch.randn(2, 3, 8, 8)
        with torch.no_grad():
            compiled = dynamo.compile(net, backend="fused")
            for _ in range(5):  # the first 5 calls are timed: each kernel's run_us
                ok &= close(compiled(x), net(x))
        w = torch.randn(8, 4, requires_grad=True)
        v = torch.randn(2, 8)
        got = dynamo.optimize("fused")(step)(w, v)
        ok &= close(got, step(w, v))
        (grad,) = torch.autograd.grad(got.sum(), w)  # compiles the backward graph (late kernels)
        (want,) = torch.autograd.grad(step(w, v).sum(), w)
        ok &= close(grad, want)
        if args.model:
            import torchvision
            model = getattr(torchvision.models, args.model)().eval()
            img = torch.randn(1, 3, 64, 64)
            with torch.no_grad():
                ok &= close(dynamo.compile(model, backend="fused")(img), model(img))
    finally:
        restore()
    if not ok:
        print("make_fused_store: a compiled result differs from eager", file=sys.stderr)
        return 1
    print(f"make_fused_store: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
