"""Shared helpers of the capture tests: run a function eagerly and compiled, compare bitwise, and
count the graphs and graph breaks the compiler reported."""
import copy

import torch

import dynamo


class Recorder:
    """Collects the compiler's per-compile records while active."""

    def __init__(self):
        self.records = []

    def __enter__(self):
        dynamo.add_compile_listener(self.records.append)
        return self

    def __exit__(self, *exc):
        dynamo.remove_compile_listener(self.records.append)

    @property
    def compiled(self):
        return [r for r in self.records if r["status"] == "compiled"]

    @property
    def graphs(self):
        """Graphs with at least one op, in compile order."""
        return [g for r in self.compiled for g in r["graphs"] if g["num_nodes"] > 0]

    @property
    def breaks(self):
        seen, out = set(), []
        for r in self.records:
            for b in r["breaks"]:
                key = (b["kind"], b["file"], b["line"])
                if key not in seen:
                    seen.add(key)
                    out.append(b)
        return out


def same(a, b):
    """Bitwise equality of nested results (tensors compared with torch.equal, dtype included)."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and \
            (torch.equal(a, b) or (a.isnan().any() and torch.equal(a.isnan(), b.isnan())))
    if type(a).__module__ == "numpy" and type(a).__name__ == "ndarray":  # numpy inputs and outputs
        return type(b) is type(a) and a.dtype == b.dtype and a.shape == b.shape and (a == b).all()
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return type(a) is type(b) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def clone(x):
    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, (list, tuple, dict)):
        return copy.deepcopy(x)
    return x


def run_both(fn, args, *, fullgraph=False, backend="eager", calls=2):
    """Runs fn eagerly and compiled (calls times), returns (expected, [results], recorder)."""
    dynamo.reset()
    expected = fn(*[clone(a) for a in args])
    compiled = dynamo.compile(fn, backend=backend, fullgraph=fullgraph)
    with Recorder() as rec:
        results = [compiled(*[clone(a) for a in args]) for _ in range(calls)]
    return expected, results, rec


def check(fn, *args, graphs=None, breaks=None, fullgraph=False, backend="eager"):
    expected, results, rec = run_both(fn, args, fullgraph=fullgraph, backend=backend)
    for r in results:
        assert same(r, expected), f"compiled result differs:\n{r}\nvs eager\n{expected}"
    if graphs is not None:
        assert len(rec.graphs) == graphs, f"expected {graphs} graphs, got {len(rec.graphs)}: " + \
            "\n".join(g["text"] for g in rec.graphs) + "\n" + str([(r["function"], r["status"], r["reason"]) for r in rec.records])
    if breaks is not None:
        assert len(rec.breaks) == breaks, f"expected {breaks} breaks, got {[(b['kind'], b['detail']) for b in rec.breaks]}"
    return rec
