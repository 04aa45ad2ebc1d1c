"""Dynamic shapes against static shapes in the same run (docs/dynamic-shapes.md).

    PYTHONPATH=build/python /usr/bin/python3 bench/dynamic_shapes.py            # ~1 min
    PYTHONPATH=build/python /usr/bin/python3 bench/dynamic_shapes.py --quick    # a few s

1. A varying-length workload: a TransformerEncoder (2 layers, d_model 32, eval) fed 30 sequence
   lengths (2..31), an MLP fed 20 batch sizes (1..64), a multi-head self-attention block fed 24
   (batch, sequence) shapes, and a step function `x * step + step // 4` called with 30 step
   counts (a symbolic int), an SGD-style update `p.add_(g, alpha=-lr)` called with 30 learning
   rates of a cosine schedule (a symbolic float), and the MLP under the aot_eager backend (whose
   dynamic entry AOT-compiles once per batch size: the `aot_compiles` column), each with
   dynamic=False (one compile per size, until cache_size_limit, then eager) and with the default
   automatic dynamic shapes. Reported: compiles, total compile time (sum of the compile records'
   totals), the workload's time, and whether every output equals eager bitwise.
2. Per-call cost of the guards: x * 2 on a (4, 8) tensor compiled static and with both dimensions
   marked dynamic; and `x * n` with a branch on `n > 4` (a relation guard on a symbolic int)
   against the same code with n constant; each call's cost above eager (thread CPU time, medians
   of interleaved repeats). The goal: the dynamic entry's added cost at most 1.2x the static one's.
   Beside it, the guard evaluation alone (bench/guard_eval.py): the entry's GuardCheck::check in a
   C++ loop, min and median ns per check, and with --callgrind the instructions per check (a
   figure the machine's load does not move); the ratios dynamic / static of each.

    PYTHONPATH=build/python /usr/bin/python3 bench/dynamic_shapes.py --guards-only --callgrind

Output: one JSON line per measurement, then a table. Timings are never asserted.
"""
import argparse
import json
import math
import random
import statistics
import time

import torch

import dynamo
import dynamo.aot
import guard_eval


class Attention(torch.nn.Module):
    """Multi-head self-attention over (batch, sequence, 32) with 4 heads."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(d, d) for _ in range(3))
        self.out = torch.nn.Linear(d, d)
        self.heads, self.scale = heads, (d // heads) ** -0.5

    def forward(self, x):
        q, k, v = (p(x).unflatten(-1, (self.heads, -1)).transpose(1, 2) for p in (self.q, self.k, self.v))
        att = ((q @ k.transpose(-2, -1)) * self.scale).softmax(-1)
        return self.out((att @ v).transpose(1, 2).flatten(2))


def step_fn(x, step):
    return x * step + step // 4


def lr_step(p, g, lr):
    p.add_(g, alpha=-lr)
    return p * 1


def workload(kind, dynamic, quick):
    torch.manual_seed(0)
    call = None
    backend = "eager"
    if kind == "attention":
        model = Attention().eval()
        shapes = [(b, t) for b in (2, 3, 5, 8) for t in (4, 7, 9, 16, 20, 31)]
        random.Random(0).shuffle(shapes)
        sizes = shapes[: 8 if quick else 24]
        make = lambda bt: torch.randn(bt[0], bt[1], 32)  # noqa: E731
    elif kind == "step-int":
        model = step_fn
        x = torch.randn(4, 8)
        sizes = list(range(10 if quick else 30))
        make = lambda n: n  # noqa: E731
        call = lambda fn, n: fn(x, n)  # noqa: E731
    elif kind == "lr-float":
        model = lr_step
        p, g = torch.randn(64), torch.randn(64)
        sizes = [0.05 * (1 + math.cos(math.pi * k / 30)) for k in range(10 if quick else 30)]
        make = lambda lr: lr  # noqa: E731
        call = lambda fn, lr: fn(p.clone(), g, lr)  # noqa: E731
    elif kind == "transformer":
        layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0)
        model = torch.nn.TransformerEncoder(layer, num_layers=2).eval()
        sizes = list(range(2, 12 if quick else 32))
        make = lambda n: torch.randn(n, 3, 32)  # noqa: E731
    else:  # mlp, mlp-aot
        backend = "aot_eager" if kind == "mlp-aot" else "eager"
        model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
        sizes = [8, 16, 1, 5, 64, 33, 2, 17, 31, 9, 40, 12, 3, 50, 27, 63, 7, 60, 11, 24][: 8 if quick else 20]
        make = lambda n: torch.randn(n, 16)  # noqa: E731
    dynamo.reset()
    records = []
    dynamo.add_compile_listener(records.append)
    aot_before = len(dynamo.aot.last_records())
    try:
        f = dynamo.compile(model, dynamic=dynamic, backend=backend)
        exact = True
        t0 = time.perf_counter()
        with torch.no_grad():
            for n in sizes:
                a = make(n)
                run = call or (lambda fn, a: fn(a))
                exact = exact and torch.equal(run(f, a), run(model, a))
        wall = time.perf_counter() - t0
    finally:
        dynamo.remove_compile_listener(records.append)
    return {
        "bench": "dynamic_shapes", "workload": kind, "mode": "static" if dynamic is False else "automatic",
        "sizes": len(sizes), "compiles": sum(1 for r in records if r["status"] == "compiled"),
        "cache_limit_hits": sum(1 for r in records if r["status"] == "cache-limit"),
        "compile_ms": round(sum(r["total_ms"] for r in records), 1), "workload_s": round(wall, 3),
        "exact": exact,
        "aot_compiles": len(dynamo.aot.last_records()) - aot_before if backend != "eager" else None,
    }


def times_two(x):
    return x * 2


def int_branch(x, n):
    if n > 4:
        return x * n
    return x - n


def guard_setup(case):
    """{variant: (callable, args)} for eager, static and dynamic, each code with its one entry
    (int_branch's dynamic code: the symbolic entry first), and the compiled entries' functions."""
    dynamo.reset()
    if case == "x_times_2":
        f = times_two
        xs, xd = (torch.randn(4, 8),), (torch.randn(4, 8),)
        dynamo.mark_dynamic(xd[0], 0)
        dynamo.mark_dynamic(xd[0], 1)
        warm_d = [xd]
    else:  # int_branch: n a symbolic int (after 5 -> 6) with the guard n > 4
        f = int_branch
        xs, xd = (torch.randn(4, 8), 6), (torch.randn(4, 8), 6)
        warm_d = [(xd[0], 5), xd]
    static_f = dynamo.compile(f, dynamic=False)
    static_f(*xs)
    # Another code object for the dynamic entry, so each code has exactly one entry.
    g = type(f)(f.__code__.replace(co_name="g"), f.__globals__)
    dyn_f = dynamo.compile(g)
    # int_branch: 5 compiles a constant entry, 6 the symbolic one; entries are tried newest
    # first, so the timed calls check the symbolic entry's guards only.
    for args in warm_d:
        dyn_f(*args)
    variants = {"eager": (f, xs), "static": (static_f, xs), "dynamic": (dyn_f, xd)}
    return variants, {"static": (f, xs), "dynamic": (g, xd)}


def guard_cost(quick, case="x_times_2", counts=None):
    calls, repeats = (5_000, 3) if quick else (40_000, 15)
    variants, entries = guard_setup(case)

    def loop(fn, x):
        t0 = time.thread_time_ns()
        for _ in range(calls):
            fn(*x)
        return (time.thread_time_ns() - t0) / calls / 1000.0
    for fn, x in variants.values():
        loop(fn, x)
    samples = {k: [] for k in variants}
    for _ in range(repeats):
        for k, (fn, x) in variants.items():
            samples[k].append(loop(fn, x))
    added_s = statistics.median(s - e for s, e in zip(samples["static"], samples["eager"]))
    added_d = statistics.median(d - e for d, e in zip(samples["dynamic"], samples["eager"]))
    # The guard evaluation alone (C++ loop over the entry's check), interleaved the same way.
    n = 5_000 if quick else 20_000
    ns = {"static": [], "dynamic": []}
    for _ in range(3 if quick else 5):
        for k, (fn, x) in entries.items():
            t = guard_eval.time_guards(fn, x, n=n, repeats=3)
            ns[k] += [t["min_ns"], t["median_ns"]]
    mins = {k: min(v) for k, v in ns.items()}
    meds = {k: statistics.median(v) for k, v in ns.items()}
    instr = {k: (counts or {}).get(f"{case}/{k}") for k in ("static", "dynamic")}
    return {
        "bench": "dynamic_shapes", "case": "guard_cost_" + case, "calls": calls, "repeats": repeats,
        "eager_us": round(statistics.median(samples["eager"]), 3),
        "static_added_us": round(added_s, 3), "dynamic_added_us": round(added_d, 3),
        "dynamic_over_static": round(added_d / added_s, 3) if added_s > 0 else None,
        "guard_ns_static_min": round(mins["static"], 1), "guard_ns_dynamic_min": round(mins["dynamic"], 1),
        "guard_ns_ratio_min": guard_eval.ratio(mins["dynamic"], mins["static"]),
        "guard_ns_static_median": round(meds["static"], 1), "guard_ns_dynamic_median": round(meds["dynamic"], 1),
        "guard_ns_ratio_median": guard_eval.ratio(meds["dynamic"], meds["static"]),
        "guard_instr_static": instr["static"], "guard_instr_dynamic": instr["dynamic"],
        "guard_instr_ratio": guard_eval.ratio(instr["dynamic"], instr["static"]), "goal": 1.2,
    }


GUARD_CASES = ("x_times_2", "int_branch")


def guard_count_child():
    """Under callgrind (guard_eval.callgrind_counts): count each case's static and dynamic guards."""
    for case in GUARD_CASES:
        _, entries = guard_setup(case)
        for k, (fn, x) in entries.items():
            if not guard_eval.count_guards(fn, x, f"{case}/{k}"):
                raise SystemExit("--guard-count-child: not running under callgrind")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer sizes and calls (smoke run)")
    ap.add_argument("--callgrind", action="store_true",
                    help="also count instructions per guard check under callgrind (a few minutes)")
    ap.add_argument("--guards-only", action="store_true", help="only the per-call guard cost cases")
    ap.add_argument("--guard-count-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    if args.guard_count_child:
        return guard_count_child()
    counts = guard_eval.callgrind_counts(__file__, []) if args.callgrind else None
    rows = []
    for kind in () if args.guards_only else ("mlp", "mlp-aot", "transformer", "attention", "step-int", "lr-float"):
        for dynamic in (False, None):
            rows.append(workload(kind, dynamic, args.quick))
            print(json.dumps(rows[-1]), flush=True)
    costs = [guard_cost(args.quick, case, counts) for case in GUARD_CASES]
    for cost in costs:
        print(json.dumps(cost), flush=True)
    print(f"{'workload':12} {'mode':10} {'sizes':>5} {'compiles':>8} {'limit':>5} {'compile_ms':>10} {'run_s':>7} "
          f"{'exact':5} aot_compiles")
    for r in rows:
        print(f"{r['workload']:12} {r['mode']:10} {r['sizes']:>5} {r['compiles']:>8} {r['cache_limit_hits']:>5} "
              f"{r['compile_ms']:>10} {r['workload_s']:>7} {str(r['exact']):5} {r['aot_compiles'] or '-'}")
    for cost in costs:
        print(f"guard cost per call above eager ({cost['case']}): static {cost['static_added_us']} us, dynamic "
              f"{cost['dynamic_added_us']} us, ratio {cost['dynamic_over_static']} (goal <= 1.2)")
        print(f"guard evaluation alone ({cost['case']}): static {cost['guard_ns_static_min']} / "
              f"{cost['guard_ns_static_median']} ns, dynamic {cost['guard_ns_dynamic_min']} / "
              f"{cost['guard_ns_dynamic_median']} ns (min / median), ratio {cost['guard_ns_ratio_min']} / "
              f"{cost['guard_ns_ratio_median']}; instructions per check: static {cost['guard_instr_static']}, "
              f"dynamic {cost['guard_instr_dynamic']}, ratio {cost['guard_instr_ratio']} (goal <= 1.2)")


if __name__ == "__main__":
    main()
