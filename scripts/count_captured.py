#!/usr/bin/env python3
"""Counts the snippets of tests/python/snippets that Dynamo captures whole: compiled with
fullgraph=True (backend "eager"), one graph, outputs equal to eager (torch.equal). Prints one line
per snippet that is not captured (with the break), the count per group and in all.

    PYTHONPATH=build/python /usr/bin/python3 scripts/count_captured.py [--json out.json] [-v]

A snippet whose compiled outputs differ from eager's is reported WRONG (exit status 1).
"""
import argparse
import collections
import json
import pathlib
import sys
import warnings

import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "python"))

import dynamo  # noqa: E402
from snippets import load  # noqa: E402


def same(a, b):
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


def run(s, compile_kwargs):
    """(status, detail): status is 'whole', 'break' or 'wrong'."""
    torch.manual_seed(0)
    fn, args = s.build()
    torch.manual_seed(0)
    fn_eager, args_eager = s.build()  # a closure's modules are not deep-copyable
    torch.manual_seed(1)
    ref = fn_eager(*args_eager)
    graphs = []
    dynamo.reset()
    dynamo.add_compile_listener(graphs.append)
    try:
        torch.manual_seed(1)
        out = dynamo.compile(fn, **compile_kwargs)(*args)
    except dynamo.Unsupported as e:
        return "break", str(e).splitlines()[0]
    finally:
        dynamo.remove_compile_listener(graphs.append)
        dynamo.reset()
    if not same(out, ref) or not same(list(args), list(args_eager)):
        return "wrong", "outputs or inputs differ from eager"
    n = sum(1 for r in graphs if r["status"] == "compiled" for g in r["graphs"] if g["num_nodes"] > 0)
    skipped = [r.get("reason", "") for r in graphs if r["status"] != "compiled"]
    if n != 1:
        return "break", f"{n} graphs" + (f" ({skipped[0]})" if skipped else "")
    return "whole", ""


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write per-snippet results here")
    ap.add_argument("-v", action="store_true", help="list the snippets captured whole too")
    opts = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    results = []
    per_group = collections.OrderedDict()
    for s in load():
        try:
            status, detail = run(s, {"fullgraph": True})
        except Exception as e:  # an error of the snippet or of Dynamo: not captured
            status, detail = "break", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        results.append({"name": s.name, "status": status, "detail": detail})
        g = per_group.setdefault(s.group, [0, 0])
        g[0] += status == "whole"
        g[1] += 1
        if status != "whole" or opts.v:
            print(f"{status:5} {s.name}: {detail}")
    whole = sum(r["status"] == "whole" for r in results)
    wrong = sum(r["status"] == "wrong" for r in results)
    print()
    for group, (w, n) in per_group.items():
        print(f"{group:24} {w:4}/{n:<4} {100.0 * w / n:5.1f}%")
    print(f"{'total':24} {whole:4}/{len(results):<4} {100.0 * whole / len(results):5.1f}% captured whole"
          f" ({wrong} wrong)")
    if opts.json:
        pathlib.Path(opts.json).write_text(json.dumps(results, indent=1))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
