"""Writes the JSON fixtures of the C++ graph reader tests (tests/core/data/*.json).

The graphs of tests/python/test_graph_ir.py (serialized compact and pretty) and a real capture:
torchvision's resnet18 compiled by dynamo.compile, its JSON taken from the compile listener (what
the trace store keeps). Run from a build tree, after a change of the serialized form:

    cd build && PYTHONPATH=python:../tests/python /usr/bin/python3 ../tests/core/export_graphs.py
"""
import pathlib
import sys

import torch

import dynamo
import test_graph_ir
from capture_harness import Recorder
from torchvision_cases import build, input_for

OUT = pathlib.Path(__file__).parent / "data"


def kinds_graph():
    """Every argument kind, every target kind (function, Tensor method, ATen op, unresolvable),
    tensor meta with strides in each memory format, a user stack and a stack trace."""
    from dynamo._C import _graph as G
    b = G.GraphBuilder()
    nhwc = torch.empty(2, 3, 4, 5).to(memory_format=torch.channels_last)
    x = b.placeholder("x", tensor_meta=nhwc, location=("m.py", 1, "def f(x, y):"),
                      user_stack=[("top.py", 9, "f(x, y)"), ("m.py", 1, "def f(x, y):")])
    y = b.placeholder("y", tensor_meta=torch.empty(3, 4).t(), stack_trace="File m.py, line 1")
    z = b.placeholder("z", tensor_meta=torch.empty(6, requires_grad=True))
    values = (None, True, False, 0, -(2 ** 63), 2 ** 63 - 1, 1.5, -0.0, float("inf"),
              float("-inf"), float("nan"), 1e16, 5e-324, "s'q\"\n\u00e9\x01", torch.float32,
              torch.device("cuda", 1), torch.channels_last, torch.strided, Ellipsis,
              slice(None, x, 2), (x, (1, [2, y])), [], (), {"a": x, "b": [None]})
    p = b.call_function(print, (x,) + values, {"kw": z, "d": torch.int8})
    a = b.call_function(torch.ops.aten.add.Tensor, (x, x), {"alpha": 2},
                        tensor_meta=((2, 3, 4, 5), torch.float32, "cpu", False, (60, 1, 15, 3),
                                     "channels_last"))
    r = b.call_function(torch.ops.aten.relu.default, (a,))
    m = b.call_function(torch.Tensor.add_, (r, 1))
    lam = b.call_function(lambda t: t, (m,))
    v = b.call_method("view", (y, -1))
    b.output({"p": p, "lam": lam, "v": v, "same": [x, x]})
    return b.build()


def main():
    OUT.mkdir(exist_ok=True)
    for case in sorted(test_graph_ir.CASES):
        g = test_graph_ir.build(case)
        (OUT / f"{case}.json").write_text(g.serialize(pretty=True))
    (OUT / "kinds.json").write_text(kinds_graph().serialize())
    dynamo.reset()
    model = build("resnet18").eval()
    with torch.no_grad(), Recorder() as rec:
        dynamo.compile(model, fullgraph=True)(input_for("resnet18"))
    (graph,) = rec.graphs
    (OUT / "resnet18.json").write_text(graph["json"])
    print(f"wrote {len(test_graph_ir.CASES) + 2} graphs to {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
