"""The fused backend against torch.compile(backend="inductor") on CPU, on bench/fused.py's cases:
run time, and cold and warm compile time (issue 13's anchor; docs/performance.md has the figures).

    cd build-py312 && PYTHONPATH=$PWD/python ~/.cache/dynamo/py312-torch2.11/bin/python \\
        ../bench/side_by_side_fused.py [--quick] [--cases chain6,mlp_block] [--repeats N] \\
        [--skip-run] [--skip-compile]

Run time: one process, 1 torch thread (OMP_NUM_THREADS=1 too, for the fused backend's OpenMP
kernels), eager, fused and inductor interleaved within each repeat, thread CPU time; medians and
minima, ratio fused / inductor (the issue's goal: at most 1 on every case). Every compiled case is
checked against eager first (fused.py's tolerance, rtol 1e-4, atol 1e-5).

Compile time: every measurement in a new process. The child imports everything, compiles a
small unrelated function with the same backend (one-time set-up: the compiler's version probe,
inductor's CPU feature check, the training path's imports; of the case's kind: a training step
for the training cases, --warm-up inference for the earlier inference-only warm-up; inductor's
warm-up uses its own cache directory), then times the
case's first compiled call minus its second (a cache hit), as CPU time of the process and its waited-for
children (both backends run the C++ compiler as child processes; inductor with
compile_threads=1 so that its compiles are waited-for children too) and as wall time.
cold: the backend's cache directory is new and empty ($DYNAMO_KERNEL_CACHE for fused,
$TORCHINDUCTOR_CACHE_DIR for inductor: kernels, FX graph and AOTAutograd caches); warm: a second
process with the directory the cold one filled. Ratio inductor / fused (goal: at least 10).
The children run without $PYTHONDONTWRITEBYTECODE (unless --no-bytecode-cache), so that Python
modules are compiled once, as in a user's environment, not in every process.

Output: JSON lines (environment, one per case and part), then two tables. Nothing asserted.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import torch  # noqa: E402

import dynamo  # noqa: E402
import fused  # noqa: E402  (bench/fused.py: the cases)
from anchor_common import environment, median, process_ms, require_torch_compile, thread_ms  # noqa: E402

BACKENDS = ("fused", "inductor")
QUICK_CASES = ["chain6", "mlp_train"]


def _make(name, backend):
    """(eager fn, inputs, compiled fn) of one case; grad mode set for it."""
    fn, make, *train = fused.CASES[name]
    torch.set_grad_enabled(bool(train))
    torch.manual_seed(0)
    inputs = make()
    if backend == "fused":
        wrap = dynamo.optimize("fused")
    else:
        wrap = lambda f: torch.compile(f, backend="inductor")  # noqa: E731
    compiled = train[0](wrap) if train else wrap(fn)
    return fn, inputs, compiled


def _check(name, got, want):
    for g, w in zip(got if isinstance(got, tuple) else [got], want if isinstance(want, tuple) else [want]):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")


def _timed(fn, *args):
    t0 = thread_ms()
    fn(*args)
    return thread_ms() - t0


def run_time(name, repeats):
    fn, inputs, compiled_fused = _make(name, "fused")
    # a case's functions read its module from the case's state at call time, so after this
    # second _make all three run the same (re-made, same seed) module
    compiled_inductor = _make(name, "inductor")[2]
    want = fn(*inputs)
    variants = {"eager": fn, "fused": compiled_fused, "inductor": compiled_inductor}
    for k in ("fused", "inductor"):
        _check(f"{name} {k}", variants[k](*inputs), want)
    for v in variants.values():  # warm
        v(*inputs)
    times = {k: [] for k in variants}
    for _ in range(repeats):
        for k, v in variants.items():  # interleaved
            times[k].append(_timed(v, *inputs))
    row = {"bench": "side_by_side_fused", "part": "run", "case": name, "clock": "thread_cpu",
           "threads": torch.get_num_threads(), "repeats": repeats}
    for k in variants:
        row[f"{k}_ms"] = round(median(times[k]), 2)
        row[f"{k}_min_ms"] = round(min(times[k]), 2)
    row["fused_over_inductor"] = round(median(times["fused"]) / median(times["inductor"]), 3)
    row["fused_over_inductor_min"] = round(min(times["fused"]) / min(times["inductor"]), 3)
    return row


def _warm_up(backend, warm_dir, training):
    """One small unrelated compile of the same kind as the case (with autograd when the case is a
    training step, so that both backends' training paths are imported before the timing)."""
    def small(a):
        return ((a * 3).sin() + 1).sum()
    a = torch.randn(64, requires_grad=training)

    def run(compiled):
        with torch.set_grad_enabled(training):
            out = compiled(a)
            if training:
                out.backward()
    if backend == "fused":
        run(dynamo.optimize("fused")(small))
        dynamo.reset()
        return
    own = os.environ["TORCHINDUCTOR_CACHE_DIR"]
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = warm_dir
    try:
        run(torch.compile(small, backend="inductor"))
    finally:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = own
        torch._dynamo.reset()


def compile_one(name, backend, warm_dir, warm_up="same"):
    """The child of a compile measurement: prints one JSON line."""
    _warm_up(backend, warm_dir, warm_up == "same" and len(fused.CASES[name]) > 2)
    fn, inputs, compiled = _make(name, backend)
    want = fn(*inputs)
    cpu0, wall0 = process_ms()
    got = compiled(*inputs)
    cpu1, wall1 = process_ms()
    compiled(*inputs)
    cpu2, wall2 = process_ms()
    _check(f"{name} {backend}", got, want)
    print(json.dumps({"cpu_ms": (cpu1 - cpu0) - (cpu2 - cpu1), "wall_ms": (wall1 - wall0) - (wall2 - wall1)}))


def compile_times(name, threads, workdir, backends=BACKENDS, warm_up="same", bytecode_cache=True):
    row = {"bench": "side_by_side_fused", "part": "compile", "case": name,
           "clock": "process_and_children_cpu"}
    for backend in backends:
        cache = tempfile.mkdtemp(prefix=f"{backend}-{name}-", dir=workdir)
        env = dict(os.environ, DYNAMO_KERNEL_CACHE=cache, TORCHINDUCTOR_CACHE_DIR=cache)
        if bytecode_cache:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
        for temp in ("cold", "warm"):
            proc = subprocess.run([sys.executable, __file__, "--compile-one", name, backend,
                                   "--threads", str(threads), "--warm-dir", os.path.join(workdir, "inductor-warm-up"),
                                   "--warm-up", warm_up],
                                  capture_output=True, text=True, env=env)
            if proc.returncode != 0:
                row[f"{backend}_error"] = _last_error(proc.stderr)
                break
            got = json.loads(proc.stdout.strip().splitlines()[-1])
            row[f"{backend}_{temp}_ms"] = round(got["cpu_ms"], 1)
            row[f"{backend}_{temp}_wall_ms"] = round(got["wall_ms"], 1)
    for temp in ("cold", "warm"):
        if f"inductor_{temp}_ms" in row and f"fused_{temp}_ms" in row:
            row[f"{temp}_inductor_over_fused"] = round(row[f"inductor_{temp}_ms"] / row[f"fused_{temp}_ms"], 2)
    return row


def _last_error(text):
    """The exception line of a traceback (a case that fails is reported, not fatal)."""
    lines = [ln for ln in text.strip().splitlines() if ln and not ln.startswith((" ", "W1"))]
    return (lines[-1] if lines else "no output")[:300]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help=f"{','.join(QUICK_CASES)}, 3 repeats")
    p.add_argument("--cases", default=",".join(fused.CASES))
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--skip-run", action="store_true", help="compile times only")
    p.add_argument("--skip-compile", action="store_true", help="run times only")
    p.add_argument("--compile-backends", default=",".join(BACKENDS),
                   help="the backends whose compile time is measured (default fused,inductor; "
                        "fused alone re-measures a change of ours without inductor's minutes)")
    p.add_argument("--warm-up", choices=("same", "inference"), default="same",
                   help="the child's one-time set-up compile: of the case's kind (a training step for "
                        "the training cases; default) or always an inference function (before 2026-11-29)")
    p.add_argument("--no-bytecode-cache", action="store_true",
                   help="keep $PYTHONDONTWRITEBYTECODE in the children (by default they cache bytecode, "
                        "as a user's Python does)")
    p.add_argument("--compile-one", nargs=2, metavar=("CASE", "BACKEND"), help=argparse.SUPPRESS)
    p.add_argument("--warm-dir", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    require_torch_compile()
    torch.set_num_threads(a.threads)
    if a.compile_one:
        compile_one(*a.compile_one, a.warm_dir, a.warm_up)
        return 0
    cases, repeats = (QUICK_CASES, 3) if a.quick else (a.cases.split(","), a.repeats)
    print(json.dumps(environment(omp_num_threads=os.environ.get("OMP_NUM_THREADS"),
                                 cxx=subprocess.run(["c++", "--version"], capture_output=True,
                                                    text=True).stdout.splitlines()[0])), flush=True)
    runs, compiles = [], []
    with tempfile.TemporaryDirectory(prefix="side_by_side_fused-") as workdir:
        for name in cases:
            if not a.skip_run:
                try:
                    runs.append(run_time(name, repeats))
                except Exception as e:  # noqa: BLE001 - a case that fails is a result
                    runs.append({"bench": "side_by_side_fused", "part": "run", "case": name,
                                 "error": f"{type(e).__name__}: {e}".splitlines()[0][:300]})
                print(json.dumps(runs[-1]), flush=True)
            if not a.skip_compile:
                compiles.append(compile_times(name, a.threads, workdir, a.compile_backends.split(","),
                                              a.warm_up, not a.no_bytecode_cache))
                print(json.dumps(compiles[-1]), flush=True)
    if runs:
        print(f"\nrun time, ms per call (thread CPU, {a.threads} thread, median of {repeats}; min in brackets)")
        print("| case | eager | fused | inductor | fused / inductor (min) |")
        print("|---|---:|---:|---:|---:|")
        for r in runs:
            if "error" in r:
                print(f"| {r['case']} | failed: {r['error']} | | | |")
                continue
            print(f"| {r['case']} | {r['eager_ms']} | {r['fused_ms']} | {r['inductor_ms']} | "
                  f"{r['fused_over_inductor']} ({r['fused_over_inductor_min']}) |")
    if compiles:
        print("\ncompile time, ms (first compiled call - second; CPU of the process and its compiler children; new process each)")
        print("| case | fused cold | inductor cold | inductor / fused | fused warm | inductor warm | inductor / fused |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for r in compiles:
            cells = [r.get(k, r.get(f"{k.split('_')[0]}_error", "-")) for k in
                     ("fused_cold_ms", "inductor_cold_ms", "cold_inductor_over_fused", "fused_warm_ms",
                      "inductor_warm_ms", "warm_inductor_over_fused")]
            print(f"| {r['case']} | " + " | ".join(str(c) for c in cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
