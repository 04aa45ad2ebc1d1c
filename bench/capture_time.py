"""Capture (compile) time of torchvision models: eval, no_grad, batch 1, 3x224x224.

Run from the repository root (see docs/performance.md for the figures and the machine):

    PYTHONPATH=build/python /usr/bin/python3 bench/capture_time.py            # ~40 s
    PYTHONPATH=build/python /usr/bin/python3 bench/capture_time.py --quick    # resnet18 only
    PYTHONPATH=build/python /usr/bin/python3 bench/capture_time.py --models resnet18,vit_b_16

Per model and repeat (dynamo.reset() before each repeat, so every repeat compiles anew), timed
with the thread's CPU time (--wall for the wall clock; the compiler's own figures are wall time):

    first_call_ms    time of the first compiled call (capture + guards + backend + one run)
    eager_ms         median time of an uncompiled call (after warm-up), measured just before
    compile_ms       first_call_ms - eager_ms: what compiling adds to the first call
    capture_ms, guard_ms, backend_ms, total_ms
                     the compiler's own figures, summed over the compile records of the first call
    steady_ms        median time of later compiled calls (cache hits), for context

Reported: the median over repeats, per column (so compile_ms is the median of the per-repeat
differences, not the difference of the two medians).
The goal (issue): resnet18 capture under 100 ms; anchor
torch.compile(backend="eager") 0.92 s on torch 2.11 (another machine). Timings are never asserted.
One JSON line per model, then a human table.
"""
import argparse
import json
import platform
import statistics
import sys
import time

import torch

import dynamo
from dynamo import _C

DEFAULT_MODELS = ["resnet18", "vit_b_16", "mobilenet_v2", "densenet121"]


# The clock: the thread's CPU time by default (capture runs on the calling thread, and so do the
# model's ops with 1 torch thread; time spent descheduled by other jobs does not count), or wall.
_clock = time.thread_time_ns


def _ms(fn, *args):
    t0 = _clock()
    fn(*args)
    return (_clock() - t0) / 1e6


def measure(name, repeats, eager_runs):
    import torchvision
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)().eval()  # random weights: no download
    x = torch.randn(1, 3, 224, 224)
    records = []
    listener = dynamo.add_compile_listener(records.append)
    samples = []
    try:
        with torch.no_grad():
            expected = model(x)  # warm-up: lazy initialisation inside torch
            for _ in range(repeats):
                dynamo.reset()
                records.clear()
                eager = statistics.median(_ms(model, x) for _ in range(eager_runs))
                compiled = dynamo.compile(model)
                t0 = _clock()
                got = compiled(x)
                first = (_clock() - t0) / 1e6
                compile_records = list(records)
                steady = statistics.median(_ms(compiled, x) for _ in range(eager_runs))
                if len(records) != len(compile_records):
                    raise SystemExit(f"{name}: later calls recompiled ({len(records)} records)")
                if not torch.allclose(expected, got, rtol=1e-4, atol=1e-5):
                    raise SystemExit(f"{name}: compiled output differs from eager")
                samples.append(_sample(eager, first, steady, compile_records))
    finally:
        dynamo.remove_compile_listener(listener)
        dynamo.reset()
    return _summary(name, repeats, samples)


def _sample(eager, first, steady, records):
    def total(key):
        return sum(r.get(key, 0.0) for r in records)
    return {
        "eager_ms": eager, "first_call_ms": first, "compile_ms": first - eager,
        "steady_ms": steady, "capture_ms": total("capture_ms"), "guard_ms": total("guard_ms"),
        "backend_ms": total("backend_ms"), "total_ms": total("total_ms"),
        "records": len(records), "statuses": sorted({r["status"] for r in records}),
        "graphs": sum(len(r["graphs"]) for r in records),
        "nodes": sum(g["num_nodes"] for r in records for g in r["graphs"]),
        "breaks": sum(len(r["breaks"]) for r in records),
        "guards": sum(len(r["guards"]) for r in records),
    }


def _summary(name, repeats, samples):
    row = {"bench": "capture_time", "model": name, "repeats": repeats,
           "clock": "wall" if _clock is time.perf_counter_ns else "thread_cpu"}
    for key in ("eager_ms", "first_call_ms", "compile_ms", "capture_ms", "guard_ms",
                "backend_ms", "total_ms", "steady_ms"):
        row[key] = round(statistics.median(s[key] for s in samples), 3)
    last = samples[-1]
    for key in ("records", "statuses", "graphs", "nodes", "breaks", "guards"):
        row[key] = last[key]
    row["goal_ms"] = 100.0 if name == "resnet18" else None
    return row


def environment():
    return {
        "bench": "environment", "python": platform.python_version(), "torch": torch.__version__,
        "torchvision": _torchvision_version(), "dynamo": getattr(_C, "__version__", "?"),
        "torch_threads": torch.get_num_threads(), "platform": platform.platform(),
    }


def _torchvision_version():
    import torchvision
    return torchvision.__version__


_COLUMNS = [("eager", "eager_ms"), ("1st call", "first_call_ms"), ("compile", "compile_ms"),
            ("capture", "capture_ms"), ("guards", "guard_ms"), ("backend", "backend_ms"),
            ("total", "total_ms"), ("steady", "steady_ms"), ("nodes", "nodes"),
            ("breaks", "breaks"), ("#guards", "guards")]


def table(rows):
    """The rows as a plain-text table (milliseconds)."""
    lines = ["milliseconds, median of repeats; compile = 1st call - eager; capture/guards/backend/"
             "total: the compiler's own figures",
             f"{'model':<14}" + "".join(f"{title:>10}" for title, _ in _COLUMNS)]
    for row in rows:
        cells = []
        for _, key in _COLUMNS:
            v = row[key]
            cells.append(str(v) if isinstance(v, int) else f"{v:.1f}")
        lines.append(f"{row['model']:<14}" + "".join(f"{c:>10}" for c in cells))
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="resnet18 only, 1 repeat: a smoke run")
    p.add_argument("--models", default=None,
                   help="comma-separated torchvision model names "
                        f"(default {','.join(DEFAULT_MODELS)})")
    p.add_argument("--repeats", type=int, default=None, help="compiles per model (default 5)")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    p.add_argument("--wall", action="store_true",
                   help="time with the wall clock instead of the thread's CPU time")
    args = p.parse_args(argv)
    global _clock
    if args.wall:
        _clock = time.perf_counter_ns
    torch.set_num_threads(args.threads)
    if args.models:
        models = args.models.split(",")
    else:
        models = ["resnet18"] if args.quick else DEFAULT_MODELS
    repeats = args.repeats or (1 if args.quick else 5)
    eager_runs = 1 if args.quick else 3
    print(json.dumps(environment()), flush=True)
    rows = []
    for name in models:
        rows.append(measure(name, repeats, eager_runs))
        print(json.dumps(rows[-1]), flush=True)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
