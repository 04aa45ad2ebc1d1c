"""The inspector's AOT fixture: a trace store with AOT joint / forward / backward graphs, their
partition, and a dynamic-shapes recompile. Run by ctest (gui.aot_store, PYTHONPATH=build/python):

    python3 tests/gui/make_aot_store.py OUT.db [--model resnet18]

Records, into a fresh OUT.db:
  - Net.forward (a conv / batch norm / relu / linear net, train mode) under backend "aot_eager",
    one forward and backward: its compile has the dynamo.aot summary and the joint, forward and
    backward graphs;
  - Head.forward (a linear layer and a sigmoid) under "aot_eager" without grad: an inference
    compile, whose only AOT graph is the forward graph;
  - mlp (a plain function, backend "eager") called with batch 8 then 16: the second call
    recompiles with a dynamic batch, which records the dynamo.dynamic_shapes artifact;
  - with --model NAME, a torchvision model (train mode, batch 2, 3x64x64) under "aot_eager" too
    (docs/inspector.md's screenshots and figures use resnet18).
Checks that each compiled result equals eager (torch.equal) and exits 1 otherwise.
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
        y = torch.relu(self.bn(self.conv(x)))
        y = y.mean(dim=(2, 3))
        return self.fc(y)


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 3)

    def forward(self, x):
        return torch.sigmoid(self.fc(x))


def mlp(x, w):
    return torch.tanh(x @ w) * 2


def train_step(model, x):
    """Forward and backward, eager and compiled; True when outputs and gradients are equal."""
    torch.manual_seed(0)
    ref = model(x)
    ref.sum().backward()
    ref_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    compiled = dynamo.compile(model, backend="aot_eager")
    torch.manual_seed(0)
    out = compiled(x)
    out.sum().backward()
    grads = [p.grad for p in model.parameters()]
    return torch.equal(out, ref) and all(torch.equal(a, b) for a, b in zip(grads, ref_grads))


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--model", default="", help="also a torchvision model under aot_eager")
    args = p.parse_args(argv)
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(args.out + suffix):
            os.remove(args.out + suffix)
    torch.manual_seed(0)
    writer, restore = recording.record_into(args.out)
    ok = True
    try:
        ok &= train_step(Net().train(), torch.randn(2, 3, 8, 8))
        head = Head().eval()
        x = torch.randn(4, 8)
        with torch.no_grad():
            ok &= torch.equal(dynamo.compile(head, backend="aot_eager")(x), head(x))
        f = dynamo.compile(mlp)
        w = torch.randn(16, 4)
        for batch in (8, 16):
            x = torch.randn(batch, 16)
            ok &= torch.equal(f(x, w), mlp(x, w))
        if args.model:
            import torchvision
            model = getattr(torchvision.models, args.model)(num_classes=10).train()
            ok &= train_step(model, torch.randn(2, 3, 64, 64))
    finally:
        restore()
    if not ok:
        print("make_aot_store: a compiled result differs from eager", file=sys.stderr)
        return 1
    print(f"make_aot_store: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
