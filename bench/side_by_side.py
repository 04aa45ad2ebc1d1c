"""Per-call overhead on stack 2 (Python 3.12 + torch 2.x): Dynamo against torch's own
torch.compile(backend="eager"), and both against the uncompiled call, in the same run.

    cd build-py312 && PYTHONPATH=$PWD/python ~/.cache/dynamo/py312-torch2.11/bin/python \\
        ../bench/side_by_side.py [--quick] [--repeats N] [--calls N]

Cases: a tiny function (x + y on 1-element tensors) and a 3-layer MLP (batch 8, widths 64).
Each variant is a plain loop of N calls, timed with the thread's CPU time, 1 torch thread, the
variants interleaved inside each repeat; the figure is the median over repeats in us per call.
Output: one JSON line per case, then a table with the overhead (variant - eager) of each compiler
and the ratio of Dynamo's overhead to torch.compile's. The issue's goal: Dynamo adds at most 1 us.
Timings are never asserted. Needs torch 2.x (torch.compile); on torch 1.13 it says so and exits 2.
"""
import argparse
import json
import statistics
import sys
import time

import torch

import dynamo

_clock = time.thread_time_ns


def _loop(fn, args, n):
    t0 = _clock()
    for _ in range(n):
        fn(*args)
    return (_clock() - t0) / n / 1000.0


def tiny(x, y):
    return x + y


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                               torch.nn.ReLU(), torch.nn.Linear(64, 64)).eval()


def measure(name, fn, args, repeats, calls):
    variants = {
        "eager": fn,
        "dynamo": dynamo.compile(fn),
        "torch_compile_eager": torch.compile(fn, backend="eager"),
    }
    with torch.no_grad():
        for v in variants.values():  # compile and warm
            for _ in range(3):
                v(*args)
        times = {k: [] for k in variants}
        for _ in range(repeats):
            for k, v in variants.items():
                times[k].append(_loop(v, args, calls))
        want = fn(*args)
        for k, v in variants.items():
            assert torch.equal(v(*args), want), f"{name}: {k} differs from eager"
    med = {k: statistics.median(t) for k, t in times.items()}
    row = {"case": name, **{f"{k}_us": round(t, 3) for k, t in med.items()}}
    row["dynamo_overhead_us"] = round(med["dynamo"] - med["eager"], 3)
    row["torch_compile_overhead_us"] = round(med["torch_compile_eager"] - med["eager"], 3)
    row["dynamo_over_torch_compile"] = round(med["dynamo"] / med["torch_compile_eager"], 3)
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="3 repeats of 200 calls (a smoke run)")
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--calls", type=int, default=2000)
    a = p.parse_args()
    if not hasattr(torch, "compile"):
        print(f"error: torch {torch.__version__} has no torch.compile; run this on stack 2 "
              "(docs/stacks.md)", file=sys.stderr)
        return 2
    repeats, calls = (3, 200) if a.quick else (a.repeats, a.calls)
    torch.set_num_threads(1)
    x, y = torch.ones(1), torch.ones(1)
    net = mlp()
    rows = [measure("tiny_add", tiny, (x, y), repeats, calls),
            measure("mlp3", net, (torch.randn(8, 64),), repeats, calls)]
    print(json.dumps({"bench": "environment", "python": sys.version.split()[0],
                      "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
                      "repeats": repeats, "calls": calls}))
    for r in rows:
        print(json.dumps(r))
    print(f"{'case':10} {'eager us':>9} {'dynamo us':>10} {'t.c(eager) us':>14} {'dynamo +us':>11} "
          f"{'t.c +us':>8} {'dynamo/t.c':>11}")
    for r in rows:
        print(f"{r['case']:10} {r['eager_us']:9.2f} {r['dynamo_us']:10.2f} {r['torch_compile_eager_us']:14.2f} "
              f"{r['dynamo_overhead_us']:11.2f} {r['torch_compile_overhead_us']:8.2f} "
              f"{r['dynamo_over_torch_compile']:11.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
