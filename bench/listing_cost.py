"""What the listings of a compile cost: torchvision resnet18 compiled with the listings built
(the printed graph, its JSON, the pass graphs, the guard text and the bytecode listing: what every
compile built before they were made on demand) and without them (no trace store, no log, no
listener that asked: the default now). eval, no_grad, batch 1, 3x64x64, 1 torch thread.

Run from the repository root (figures in docs/performance.md, "Listings on demand"):

    PYTHONPATH=build/python /usr/bin/python3 bench/listing_cost.py              # ~20 s
    PYTHONPATH=build/python /usr/bin/python3 bench/listing_cost.py --repeats 11

Each repeat compiles the model once in each mode, in alternating order (dynamo.reset() before
each compile), timed with the thread's CPU time; reported: the median first compiled call per
mode and the compiler's own total_ms, and their ratio (without / with): a JSON line for the
environment, one for the model, then a table. Timings are never asserted.

For instruction counts (deterministic on a loaded machine), run one mode under callgrind:

    PYTHONPATH=build/python valgrind --tool=callgrind --collect-atstart=no \\
        --toggle-collect='*Compiler::compile(*' /usr/bin/python3 bench/listing_cost.py --one with
    (and --one without); callgrind_annotate callgrind.out.<pid> | head  -> "PROGRAM TOTALS"
"""
import argparse
import json
import platform
import statistics
import sys
import time

import torch

import dynamo


def _noop(record):
    pass


def _compile_once(compiled, x, with_listings):
    """The first compiled call after a reset: (thread CPU ms, the compiler's total_ms)."""
    totals = []

    def collect(record):
        totals.append(record["total_ms"])

    dynamo.reset()
    dynamo.add_compile_listener(collect, listings=False)
    if with_listings:
        dynamo.add_compile_listener(_noop, listings=True)
    try:
        t0 = time.thread_time_ns()
        with torch.no_grad():
            compiled(x)
        ms = (time.thread_time_ns() - t0) / 1e6
    finally:
        dynamo.remove_compile_listener(collect)
        if with_listings:
            dynamo.remove_compile_listener(_noop)
    return ms, sum(totals)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=7, help="compiles per mode (default 7)")
    p.add_argument("--one", choices=("with", "without"),
                   help="compile 3 times in this mode only (for callgrind), print nothing")
    args = p.parse_args(argv)
    import torchvision

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torchvision.models.resnet18().eval()
    x = torch.randn(1, 3, 64, 64)
    compiled = dynamo.optimize("eager")(model)
    if args.one:
        for _ in range(3):
            _compile_once(compiled, x, args.one == "with")
        dynamo.reset()
        return 0
    _compile_once(compiled, x, True)  # warm-up: imports, torch's first-call costs
    samples = {"with": [], "without": []}
    for i in range(args.repeats):
        order = ("with", "without") if i % 2 == 0 else ("without", "with")
        for mode in order:
            samples[mode].append(_compile_once(compiled, x, mode == "with"))
    dynamo.reset()
    print(json.dumps({"bench": "environment", "python": platform.python_version(),
                      "torch": torch.__version__, "torchvision": torchvision.__version__,
                      "dynamo": dynamo.__version__, "torch_threads": torch.get_num_threads(),
                      "platform": platform.platform()}))
    row = {"bench": "listing_cost", "model": "resnet18", "input": "1x3x64x64", "repeats": args.repeats}
    for mode, rows in samples.items():
        row[f"first_call_ms_{mode}"] = round(statistics.median(r[0] for r in rows), 2)
        row[f"total_ms_{mode}"] = round(statistics.median(r[1] for r in rows), 2)
    row["first_call_ratio"] = round(row["first_call_ms_without"] / row["first_call_ms_with"], 3)
    row["total_ratio"] = round(row["total_ms_without"] / row["total_ms_with"], 3)
    print(json.dumps(row))
    print(f"{'':28}{'with listings':>15}{'without':>10}{'ratio':>8}")
    for label, key in (("first compiled call, CPU ms", "first_call_ms"), ("compiler total_ms", "total_ms")):
        ratio = row[f"{key}_without"] / row[f"{key}_with"]
        print(f"{label:28}{row[key + '_with']:>15.2f}{row[key + '_without']:>10.2f}{ratio:>8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
