"""Dynamic shapes against static shapes in the same run (docs/dynamic-shapes.md).

    PYTHONPATH=build/python /usr/bin/python3 bench/dynamic_shapes.py            # ~1 min
    PYTHONPATH=build/python /usr/bin/python3 bench/dynamic_shapes.py --quick    # a few s

1. A varying-length workload: a TransformerEncoder (2 layers, d_model 32, eval) fed 30 sequence
   lengths (2..31) and an MLP fed 20 batch sizes (1..64), with dynamic=False (one compile per
   size, until cache_size_limit, then eager) and with the default automatic dynamic shapes.
   Reported: compiles, total compile time (sum of the compile records' totals), the workload's
   time, and whether every output equals eager bitwise.
2. Per-call cost of the guards: x * 2 on a (4, 8) tensor compiled static and with both dimensions
   marked dynamic; each call's cost above eager (thread CPU time, medians of interleaved
   repeats). The goal: the dynamic entry's added cost at most 1.2x the static one's.

Output: one JSON line per measurement, then a table. Timings are never asserted.
"""
import argparse
import json
import statistics
import time

import torch

import dynamo


def workload(kind, dynamic, quick):
    torch.manual_seed(0)
    if kind == "transformer":
        layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0)
        model = torch.nn.TransformerEncoder(layer, num_layers=2).eval()
        sizes = list(range(2, 12 if quick else 32))
        make = lambda n: torch.randn(n, 3, 32)  # noqa: E731
    else:
        model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
        sizes = [8, 16, 1, 5, 64, 33, 2, 17, 31, 9, 40, 12, 3, 50, 27, 63, 7, 60, 11, 24][: 8 if quick else 20]
        make = lambda n: torch.randn(n, 16)  # noqa: E731
    dynamo.reset()
    records = []
    dynamo.add_compile_listener(records.append)
    try:
        f = dynamo.compile(model, dynamic=dynamic)
        exact = True
        t0 = time.perf_counter()
        with torch.no_grad():
            for n in sizes:
                x = make(n)
                exact = exact and torch.equal(f(x), model(x))
        wall = time.perf_counter() - t0
    finally:
        dynamo.remove_compile_listener(records.append)
    return {
        "bench": "dynamic_shapes", "workload": kind, "mode": "static" if dynamic is False else "automatic",
        "sizes": len(sizes), "compiles": sum(1 for r in records if r["status"] == "compiled"),
        "cache_limit_hits": sum(1 for r in records if r["status"] == "cache-limit"),
        "compile_ms": round(sum(r["total_ms"] for r in records), 1), "workload_s": round(wall, 3),
        "exact": exact,
    }


def guard_cost(quick):
    def f(x):
        return x * 2
    calls, repeats = (5_000, 3) if quick else (40_000, 15)
    xs, xd = torch.randn(4, 8), torch.randn(4, 8)
    dynamo.mark_dynamic(xd, 0)
    dynamo.mark_dynamic(xd, 1)
    dynamo.reset()
    static_f = dynamo.compile(f, dynamic=False)
    dyn_f = dynamo.compile(f)
    static_f(xs)
    # Another code object for the dynamic entry, so each code has exactly one entry.
    g = type(f)(f.__code__.replace(co_name="g"), f.__globals__)
    dyn_f = dynamo.compile(g)
    dyn_f(xd)
    variants = {"eager": (f, xs), "static": (static_f, xs), "dynamic": (dyn_f, xd)}

    def loop(fn, x):
        t0 = time.thread_time_ns()
        for _ in range(calls):
            fn(x)
        return (time.thread_time_ns() - t0) / calls / 1000.0
    for fn, x in variants.values():
        loop(fn, x)
    samples = {k: [] for k in variants}
    for _ in range(repeats):
        for k, (fn, x) in variants.items():
            samples[k].append(loop(fn, x))
    added_s = statistics.median(s - e for s, e in zip(samples["static"], samples["eager"]))
    added_d = statistics.median(d - e for d, e in zip(samples["dynamic"], samples["eager"]))
    return {
        "bench": "dynamic_shapes", "case": "guard_cost_x_times_2", "calls": calls, "repeats": repeats,
        "eager_us": round(statistics.median(samples["eager"]), 3),
        "static_added_us": round(added_s, 3), "dynamic_added_us": round(added_d, 3),
        "dynamic_over_static": round(added_d / added_s, 3) if added_s > 0 else None, "goal": 1.2,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer sizes and calls (smoke run)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for kind in ("mlp", "transformer"):
        for dynamic in (False, None):
            rows.append(workload(kind, dynamic, args.quick))
            print(json.dumps(rows[-1]), flush=True)
    cost = guard_cost(args.quick)
    print(json.dumps(cost), flush=True)
    print(f"{'workload':12} {'mode':10} {'sizes':>5} {'compiles':>8} {'limit':>5} {'compile_ms':>10} {'run_s':>7} exact")
    for r in rows:
        print(f"{r['workload']:12} {r['mode']:10} {r['sizes']:>5} {r['compiles']:>8} {r['cache_limit_hits']:>5} "
              f"{r['compile_ms']:>10} {r['workload_s']:>7} {r['exact']}")
    print(f"guard cost per call above eager: static {cost['static_added_us']} us, dynamic "
          f"{cost['dynamic_added_us']} us, ratio {cost['dynamic_over_static']} (goal <= 1.2)")


if __name__ == "__main__":
    main()
