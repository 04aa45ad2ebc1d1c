"""Compile time of torchvision resnet18 with the fused backend: cold (empty kernel cache) and warm.

Run from the repository root (docs/codegen.md has the figures and the load):

    PYTHONPATH=build/python /usr/bin/python3 bench/fused_compile.py                 # ~30 s
    PYTHONPATH=build/python /usr/bin/python3 bench/fused_compile.py --rounds 3 --units 0,100
    PYTHONPATH=build/python /usr/bin/python3 bench/fused_compile.py --train mlp_train,cnn_train,transformer_train

Each measurement is a new process (nothing loaded, nothing cached in memory) that makes
resnet18 (eval, batch 1, 224x224, no_grad), calls it eagerly three times, then times the first
call of dynamo.optimize("fused")(model): compile time = that call minus the last eager call.
Cold: $DYNAMO_KERNEL_CACHE is a fresh empty directory; warm without the program cache
(DYNAMO_GRAPH_CACHE=0: the kernels on disk, the graph lowered again) and warm (the lowered program
read back, backends/src/fused_program_cache.h): the same directory again, each in another new
process. For the warm runs, warm_phases_ms splits the compile: capture and backend (Dynamo's
compile record) and first_run_extra (the first call beyond an eager call: weights folded and
prepacked, oneDNN's first primitives). `--units` compares kernel translation-unit counts ($DYNAMO_KERNEL_UNITS:
0 = the default, one unit per core; 100 = one compiler run per kernel, the old behaviour);
the configurations are interleaved per round.

`--train CASES`: instead, the training steps of bench/fused.py (forward + backward of the loss),
each measurement a new process: the compiled step's first call (compile + one forward and
backward), and the median eager step (the second of two per process) to compare (the compiled
step may be faster than eager, so no difference is taken). Per round: cold (fresh cache), warm without the whole-graph cache
(DYNAMO_GRAPH_CACHE=0: the kernels found on disk, the AOT trace redone: the state before the
whole-graph cache), warm (the AOT layer's result read back, no trace). Nothing is asserted:
figures only.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import csv, io, json, time, torch, torchvision, dynamo
from dynamo import utils
torch.set_grad_enabled(False)
m = torchvision.models.resnet18().eval()
x = torch.randn(1, 3, 224, 224)
for _ in range(3):
    t = time.perf_counter(); m(x); eager = time.perf_counter() - t
f = dynamo.optimize("fused")(m)
t = time.perf_counter(); f(x); first = time.perf_counter() - t
row = list(csv.DictReader(io.StringIO(utils.compile_times(repr="csv"))))[-1]
print(json.dumps({"compile": (first - eager) * 1e3, "capture": float(row["capture"]),
                  "backend": float(row["backend"]), "total": float(row["total"])}))
"""


CHILD_TRAIN = r"""
import sys, time, torch
sys.path.insert(0, sys.argv[2])
import dynamo, fused
eager, inputs, compiled = fused.CASES[sys.argv[1]]
args = inputs()
for _ in range(2):
    t = time.perf_counter(); eager(*args); eager_s = time.perf_counter() - t
fn = compiled()
t = time.perf_counter(); fn(*args); first = time.perf_counter() - t
print(first * 1e3, eager_s * 1e3)
"""


def train_ms(cache, case, graph_cache):
    env = dict(os.environ, DYNAMO_KERNEL_CACHE=cache, DYNAMO_GRAPH_CACHE="1" if graph_cache else "0")
    r = subprocess.run([sys.executable, "-c", CHILD_TRAIN, case, os.path.dirname(os.path.abspath(__file__))],
                       env=env, capture_output=True, text=True, check=True)
    first, eager = r.stdout.strip().splitlines()[-1].split()
    return float(first), float(eager)


def main_train(cases, rounds):
    for case in cases:
        runs = {"cold": [], "warm_no_graph_cache": [], "warm": []}
        eager = []
        for _ in range(rounds):
            with tempfile.TemporaryDirectory(prefix="dynamo-kc-") as d:
                for kind, on in (("cold", True), ("warm_no_graph_cache", False), ("warm", True)):
                    first, eager_ms = train_ms(d, case, on)
                    runs[kind].append(first)
                    eager.append(eager_ms)
        row = {"case": case, "rounds": rounds, "load_avg_1m": round(os.getloadavg()[0], 1)}
        for k, v in runs.items():
            row[k + "_first_call_ms"] = [round(x) for x in v]
        row["eager_step_median_ms"] = round(statistics.median(eager))
        print(json.dumps(row), flush=True)


def compile_ms(cache, units, program_cache=True, phases=None):
    env = dict(os.environ, DYNAMO_KERNEL_CACHE=cache, DYNAMO_GRAPH_CACHE="1" if program_cache else "0")
    if units:
        env["DYNAMO_KERNEL_UNITS"] = str(units)
    else:
        env.pop("DYNAMO_KERNEL_UNITS", None)
    r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True)
    row = json.loads(r.stdout.strip().splitlines()[-1])
    if phases is not None:
        # capture (Dynamo's trace), backend (lowering or the program cache, kernel libraries),
        # and the rest of the first call over an eager call (weights folded and prepacked,
        # oneDNN's first primitives, first-touch pages)
        phases.append({"capture": round(row["capture"]), "backend": round(row["backend"]),
                       "first_run_extra": round(row["compile"] - row["total"])})
    return row["compile"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--units", default="0", help="comma-separated DYNAMO_KERNEL_UNITS values (0: default)")
    ap.add_argument("--train", default="", help="comma-separated training cases of bench/fused.py instead")
    args = ap.parse_args()
    if args.train:
        return main_train(args.train.split(","), args.rounds)
    units = [int(u) for u in args.units.split(",")]
    cold = {u: [] for u in units}
    warm = {u: [] for u in units}
    warm_np = {u: [] for u in units}
    phases = {u: [] for u in units}
    for _ in range(args.rounds):
        for u in units:
            with tempfile.TemporaryDirectory(prefix="dynamo-kc-") as d:
                cold[u].append(compile_ms(d, u))
                warm_np[u].append(compile_ms(d, u, program_cache=False))
                warm[u].append(compile_ms(d, u, phases=phases[u]))
    for u in units:
        row = {"units": u or "default", "rounds": args.rounds, "load_avg_1m": round(os.getloadavg()[0], 1),
               "cold_ms": [round(v) for v in cold[u]], "warm_no_program_cache_ms": [round(v) for v in warm_np[u]],
               "warm_ms": [round(v) for v in warm[u]], "warm_phases_ms": phases[u],
               "cold_median_ms": round(statistics.median(cold[u])), "warm_median_ms": round(statistics.median(warm[u]))}
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
