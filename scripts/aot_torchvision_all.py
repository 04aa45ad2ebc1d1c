#!/usr/bin/python3
"""Every torchvision 0.14 classifier (80 builders) in train mode under an AOT backend: one train
step compiled with fullgraph=True against eager, outputs, BatchNorm buffer updates and every
gradient compared bitwise (torch.equal), random weights, the inputs of
tests/python/torchvision_cases.py. Each model runs in a child process of its own (a crash or a
hang costs one model), one torch thread. One line per model, then a summary (docs/aot.md):

    PYTHONPATH=build/python /usr/bin/python3 scripts/aot_torchvision_all.py
    ... --backend aot_eager_default_partitioner     # another AOT backend
    ... --model resnet18                            # one model; repeatable
    ... --skip vit_h_14                             # leave a model out; repeatable
    ... --markdown                                  # also print the table of docs/aot.md

Columns: result (bitwise / differs: what / exception / crashed / timeout), the time of the whole
run, the AOT compile time (sum over the graphs, backward excluded), values and bytes saved for
backward, values recomputed, then the graphs that ran on the eager runner and why.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))


def run_one(name, backend):
    import torch
    torch.set_num_threads(1)
    from test_aot_torchvision import compare_train_step
    start = time.perf_counter()
    diffs, records = compare_train_step(name, backend)
    out = {"model": name, "seconds": round(time.perf_counter() - start, 2), "diffs": diffs[:5],
           "num_diffs": len(diffs), "graphs": len(records),
           "fallbacks": [r["fallback"] for r in records if r["fallback"]],
           "bytes_saved": sum(r.get("bytes_saved", 0) for r in records),
           "saved": sum(len(r.get("saved", ())) for r in records),
           "recomputed": sum(len(r.get("recomputed", ())) for r in records),
           "compile_ms": round(sum(sum(v for k, v in r["phases_ms"].items() if k != "compile_backward")
                                   for r in records), 1)}
    # Bitwise or not is about the whole step; graphs the AOT layer handed to the eager runner
    # (with their reason) are counted apart.
    out["result"] = "differs" if diffs else "no graph" if not records else "bitwise"
    out["aot_graphs"] = len(records) - len(out["fallbacks"])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="aot_eager")
    ap.add_argument("--model", action="append")
    ap.add_argument("--skip", action="append", default=[], help="leave this model out (repeatable)")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(run_one(args.child, args.backend)))
        return 0
    from torchvision_cases import all_builders
    models = [m for m in (args.model or all_builders()) if m not in args.skip]
    results = []
    for name in models:
        cmd = [sys.executable, os.path.abspath(__file__), "--backend", args.backend, "--child", name]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
            lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
            r = json.loads(lines[-1]) if lines else {
                "model": name, "result": "crashed" if p.returncode < 0 else "exception",
                "error": (p.stderr.strip().splitlines() or ["?"])[-1]}
        except subprocess.TimeoutExpired:
            r = {"model": name, "result": "timeout"}
        results.append(r)
        detail = r.get("error") or ", ".join(r.get("diffs", []))
        if r.get("fallbacks"):
            detail += f"{len(r['fallbacks'])} of {r['graphs']} graphs on the eager runner: " + \
                "; ".join(sorted(set(f[:90] for f in r["fallbacks"])))
        print(f"{name:28s} {r['result']:9s} {r.get('seconds', 0):7.1f}s  compile {r.get('compile_ms', 0):8.1f} ms  "
              f"saved {r.get('saved', 0):4d} ({r.get('bytes_saved', 0) / 2**20:7.1f} MiB)  "
              f"recomputed {r.get('recomputed', 0):3d}  {detail}", flush=True)
    counts = {}
    for r in results:
        counts[r["result"]] = counts.get(r["result"], 0) + 1
    print(f"{args.backend}: {len(results)} models: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    if args.markdown:
        print("\n| model | result | AOT graphs / graphs | compile (ms) | saved for backward (MiB) | saved / recomputed |")
        print("|---|---|---|---|---|---|")
        for r in results:
            print(f"| {r['model']} | {r['result']} | {r.get('aot_graphs', '')} / {r.get('graphs', '')} | "
                  f"{r.get('compile_ms', '')} | {r.get('bytes_saved', 0) / 2**20:.1f} | "
                  f"{r.get('saved', '')} / {r.get('recomputed', '')} |")
    return 0 if all(r["result"] == "bitwise" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
