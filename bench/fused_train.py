"""Training steps of the fused backend against eager, measured so that a 3% difference shows.

Run from the repository root (docs/codegen.md has the figures, the load and the commands):

    PYTHONPATH=build/python /usr/bin/python3 bench/fused_train.py                 # ~2 min
    PYTHONPATH=build/python /usr/bin/python3 bench/fused_train.py --rounds 60 --cases mlp_train
    PYTHONPATH=build/python /usr/bin/python3 bench/fused_train.py --threads 1

The cases are bench/fused.py's training steps (mlp_train, cnn_train, transformer_train), each
compiled with dynamo.optimize("fused") and checked against eager first.

Why another script: on the shared 2-core development machine the wall time of one step moves by
2x from one second to the next, so the medians of two separately timed series (bench/fused.py)
cannot tell 0.97x from 1.03x. Here:

- **Paired rounds.** Each round runs one eager step and one fused step back to back, in an
  ABBA order (eager first in even rounds, fused first in odd ones), so both see the same load and
  neither always runs in the other's cache shadow. The statistic is the per-round ratio
  eager / fused; its median over the rounds is the speedup, and a 95% confidence interval comes
  from a bootstrap over the rounds (resampling whole rounds, 4000 times, fixed seed).
- **CPU time besides wall time.** `time.process_time()` (all threads of the process) is the work
  done, which other jobs on the machine inflate far less than wall time (they take cores away, but
  do not add to this process's CPU seconds). With OpenMP threads spinning while they wait, CPU
  time also counts spin, so both are shown; `--threads 1` removes the spin.
- **A verdict against the issue's bar** ("no case slower than eager by more than 3%"):
  `slower` when the interval's upper end is below 0.97, `ok` when its lower end is at least
  0.97, `undecided` otherwise (more rounds narrow it).

Nothing is asserted: figures only. One JSON line per case, then a table.
"""
import argparse
import json
import os
import random
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fused as fused_bench  # noqa: E402  (bench/fused.py: the cases)

TRAIN_CASES = ("mlp_train", "cnn_train", "transformer_train")
BAR = 0.97  # "no case slower than eager by more than 3%"


def bootstrap_ci(values, stat=statistics.median, n=4000, level=0.95, seed=0):
    """The (low, high) percentile-bootstrap interval of stat over values (resampled whole)."""
    rng = random.Random(seed)
    k = len(values)
    est = sorted(stat([values[rng.randrange(k)] for _ in range(k)]) for _ in range(n))
    lo = est[int((1 - level) / 2 * n)]
    hi = est[min(n - 1, int((1 + level) / 2 * n))]
    return lo, hi


def verdict(lo, hi):
    if hi < BAR:
        return "slower"
    if lo >= BAR:
        return "ok"
    return "undecided"


def _clock(fn, *args):
    w0, c0 = time.perf_counter(), time.process_time()
    fn(*args)
    return time.perf_counter() - w0, time.process_time() - c0


def measure(name, rounds, warmup):
    fn, make, compiled_of = fused_bench.CASES[name]
    torch.manual_seed(0)
    inputs = make()
    compiled = compiled_of()
    t0 = time.perf_counter()
    got = compiled(*inputs)                       # compiles (cold or disk-cache warm)
    first_ms = (time.perf_counter() - t0) * 1e3
    want = fn(*inputs)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    for _ in range(warmup):
        fn(*inputs), compiled(*inputs)
    ew, ec, fw, fc = [], [], [], []
    for i in range(rounds):
        if i % 2 == 0:
            e = _clock(fn, *inputs)
            f = _clock(compiled, *inputs)
        else:
            f = _clock(compiled, *inputs)
            e = _clock(fn, *inputs)
        ew.append(e[0]), ec.append(e[1]), fw.append(f[0]), fc.append(f[1])
    wall = [a / b for a, b in zip(ew, fw)]
    cpu = [a / b for a, b in zip(ec, fc) if b > 0]
    wlo, whi = bootstrap_ci(wall)
    clo, chi = bootstrap_ci(cpu)
    return {
        "case": name, "threads": torch.get_num_threads(), "rounds": rounds,
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "eager_wall_ms": round(statistics.median(ew) * 1e3, 2), "fused_wall_ms": round(statistics.median(fw) * 1e3, 2),
        "eager_cpu_ms": round(statistics.median(ec) * 1e3, 2), "fused_cpu_ms": round(statistics.median(fc) * 1e3, 2),
        "wall_speedup": round(statistics.median(wall), 3), "wall_ci95": [round(wlo, 3), round(whi, 3)],
        "cpu_speedup": round(statistics.median(cpu), 3), "cpu_ci95": [round(clo, 3), round(chi, 3)],
        "wall_verdict": verdict(wlo, whi), "cpu_verdict": verdict(clo, chi),
        "first_call_ms": round(first_ms, 1),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=40, help="paired eager/fused rounds per case")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads (default: cores)")
    ap.add_argument("--cases", default=",".join(TRAIN_CASES))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(True)
    rows = []
    for name in args.cases.split(","):
        if name not in TRAIN_CASES:
            ap.error(f"unknown case {name!r}: the training cases are {', '.join(TRAIN_CASES)}")
        row = measure(name, args.rounds, args.warmup)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"\n{'case':18} {'eager ms':>9} {'fused ms':>9} {'x wall':>7} {'95% CI':>13} {'':9} "
          f"{'x cpu':>6} {'95% CI':>13} {'':9} {'load':>5}")
    for r in rows:
        print(f"{r['case']:18} {r['eager_wall_ms']:9.1f} {r['fused_wall_ms']:9.1f} {r['wall_speedup']:7.3f} "
              f"{r['wall_ci95'][0]:6.3f}-{r['wall_ci95'][1]:<6.3f} {r['wall_verdict']:9} "
              f"{r['cpu_speedup']:6.3f} {r['cpu_ci95'][0]:6.3f}-{r['cpu_ci95'][1]:<6.3f} {r['cpu_verdict']:9} "
              f"{r['load_avg_1m']:5.1f}")


if __name__ == "__main__":
    main()
