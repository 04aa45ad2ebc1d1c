"""Compile time, commit cost and per-call overhead of two builds, measured in the same run.

    PYTHONPATH=build/python /usr/bin/python3 bench/compare_builds.py \\
        --old ../base/build/python --new build/python --rounds 8

Each round starts one child process per build (the order alternates from round to round, so
machine drift hits both alike); a child measures, with torch on 1 thread:

    resnet18       the first compiled call after dynamo.reset() (eval, no_grad, batch 1), wall
                   and thread CPU, tracing on (a fresh store, a commit per compile) and off; and
                   the compiler's own total for the compile (the listener's total_ms)
    small50        50 tiny functions (x * i + 1), each compiled and called once, tracing on
    call           the per-call cost of a compiled tiny function f(x, y) = x + y minus the
                   uncompiled call, thread CPU per call (the bench/overhead.py "add" case)

and prints one JSON line of medians over its repeats. The parent prints, per figure, the median
over rounds for each build and the ratio new / old. Timings are never asserted.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r'''
import json, os, statistics, sys, tempfile, time
import torch
import dynamo
torch.set_num_threads(1)
repeats = int(sys.argv[1])
out = {}
totals = []
dynamo.add_compile_listener(lambda r: totals.append(r.get("total_ms", 0.0)))

def first_call(run):
    dynamo.reset()
    w0, c0 = time.perf_counter(), time.thread_time()
    run()
    return (time.perf_counter() - w0) * 1e3, (time.thread_time() - c0) * 1e3

def med(samples, i):
    return statistics.median(s[i] for s in samples)

import torchvision
torch.manual_seed(0)
model = torchvision.models.resnet18().eval()
x = torch.randn(1, 3, 224, 224)
compiled = dynamo.optimize("eager")(model)
fns = []
for i in range(50):
    ns = {}
    exec(f"def f{i}(x):\n    return x * {i} + 1\n", ns)
    fns.append(dynamo.optimize("eager")(ns[f"f{i}"]))
t = torch.ones(4)
store = os.path.join(tempfile.mkdtemp(), "t.db")
with torch.no_grad():
    model(x)
    for tracing in (False, True):
        if tracing:
            dynamo.recording.enable(store)
        compiled(x)  # warm-up
        samples, tot = [], []
        for _ in range(repeats):
            totals.clear()
            samples.append(first_call(lambda: compiled(x)))
            tot.append(sum(totals))
        key = "resnet18_trace" if tracing else "resnet18"
        out[key + "_wall_ms"] = med(samples, 0)
        out[key + "_cpu_ms"] = med(samples, 1)
        out[key + "_compiler_ms"] = statistics.median(tot)
    samples = [first_call(lambda: [f(t) for f in fns]) for _ in range(repeats)]
    out["small50_trace_wall_ms"] = med(samples, 0)
    out["small50_trace_cpu_ms"] = med(samples, 1)
    dynamo.recording.disable()

def add(a, b):
    return a + b
fast = dynamo.compile(add)
a, b = torch.ones(4), torch.ones(4)
fast(a, b)
n = 20000
diffs = []
for _ in range(max(5, repeats)):
    c0 = time.thread_time_ns()
    for _ in range(n):
        add(a, b)
    c1 = time.thread_time_ns()
    for _ in range(n):
        fast(a, b)
    c2 = time.thread_time_ns()
    diffs.append(((c2 - c1) - (c1 - c0)) / n / 1e3)
out["call_overhead_us"] = statistics.median(diffs)
print(json.dumps(out))
'''


def run_child(pythonpath, repeats):
    env = dict(os.environ, PYTHONPATH=pythonpath)
    env.pop("DYNAMO_TRACE", None)
    r = subprocess.run([sys.executable, "-c", CHILD, str(repeats)], env=env,
                       capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise SystemExit(f"child for {pythonpath} failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old", required=True, help="PYTHONPATH of the old build (build/python)")
    p.add_argument("--new", required=True, help="PYTHONPATH of the new build")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--repeats", type=int, default=5, help="repeats inside each child")
    args = p.parse_args()
    results = {"old": [], "new": []}
    for r in range(args.rounds):
        for which in (("old", "new") if r % 2 == 0 else ("new", "old")):
            results[which].append(run_child(getattr(args, which), args.repeats))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    print(f"{'figure':28} {'old':>10} {'new':>10} {'new/old':>8}   "
          f"(median of {args.rounds} rounds x {args.repeats} repeats)")
    for key in results["old"][0]:
        old = statistics.median(x[key] for x in results["old"])
        new = statistics.median(x[key] for x in results["new"])
        print(f"{key:28} {old:10.3f} {new:10.3f} {new / old if old else float('nan'):8.3f}")


if __name__ == "__main__":
    main()
