"""Where a fused compile of a bench/fused.py case spends its time, cold and warm, phase by phase.

Run from the build tree of either stack (docs/performance.md has the figures and the load):

    cd build-py312 && PYTHONPATH=$PWD/python ~/.cache/dynamo/py312-torch2.11/bin/python \\
        ../bench/fused_compile_phases.py [--cases mlp_train,cnn_train] [--warm-up same|inference]
    PYTHONPATH=build/python /usr/bin/python3 bench/fused_compile_phases.py      # stack 1

Per case, a new kernel cache directory ($DYNAMO_KERNEL_CACHE) and two new processes, as
bench/side_by_side_fused.py measures them: cold (the directory empty) and warm (the directory the
cold process filled). The child imports everything, compiles a small unrelated function first
(one-time set-up: --warm-up same, the default, makes it a training step when the case is one, so
that the AOT trace's imports of torch's make_fx are set-up too, as inductor's own warm-up does for
it; --warm-up inference always compiles an inference function, bench/side_by_side_fused.py's
warm-up before this change), then runs the case's first compiled call and a second one. The
children cache Python bytecode (no $PYTHONDONTWRITEBYTECODE) unless --no-bytecode-cache.
Printed per compile (ms; CPU = the process's user + system time, children = its waited-for
C++ compiler runs):

    first call    wall and CPU of the first compiled call minus the second (what
                  side_by_side_fused.py reports), and the compiler children's CPU
    capture       Dynamo's bytecode capture (the compile record's capture_ms)
    backend       the backend's compile of the captured graph (backend_ms: for a training step
                  the AOT layer's trace .. forward lowering; the backward is compiled later)
    aot           the AOT record's phases_ms: graph_cache lookup, trace (make_fx of the joint
                  graph with the decompositions: on fake tensors on torch 2.x, real tensors on
                  torch 1.13 or where the fake trace hands over; "trace_modes" in the JSON says
                  which), import, partition, compile_forward, compile_backward (at the first
                  backward)
    kernels       per fused graph: kernels, compiler runs (translation units; 0 when every kernel
                  was in the cache), the longest run's wall ms, the runs' summed wall ms

Nothing is asserted: figures only.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _cpu():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return (s.ru_utime + s.ru_stime) * 1e3, (c.ru_utime + c.ru_stime) * 1e3, time.perf_counter() * 1e3


def _warm_up(training):
    import torch
    import dynamo

    def small(a):
        return ((a * 3).sin() + 1).sum()
    a = torch.randn(64, requires_grad=training)
    with torch.set_grad_enabled(training):
        out = dynamo.optimize("fused")(small)(a)
        if training:
            out.backward()
    dynamo.reset()


def child(case, warm_up):
    import torch
    import dynamo
    from dynamo import _C
    import fused

    eager, inputs, *train = fused.CASES[case]
    from dynamo import aot
    _warm_up(bool(train) and warm_up == "same")
    before = len(aot.last_records())
    records, graphs = [], []
    dynamo.eval_frame.add_compile_listener(records.append, listings=False)
    compile_fn = _C._codegen.compile

    def compile_and_report(*args, **kwargs):
        start = time.perf_counter()
        fn = compile_fn(*args, **kwargs)
        kernels = fn.report["kernels"] if hasattr(fn, "report") else []
        runs = {k["cache_key"]: k["compile_ms"] for k in kernels if not k["cache_hit"]}
        graphs.append({"graph": kwargs.get("name", "graph"), "ms": round((time.perf_counter() - start) * 1e3, 1),
                       "kernels": len(kernels), "compiler_runs": len(runs),
                       "longest_run_ms": round(max(runs.values(), default=0.0), 1),
                       "runs_sum_ms": round(sum(runs.values()), 1)})
        return fn
    _C._codegen.compile = compile_and_report
    torch.set_grad_enabled(bool(train))
    args = inputs()
    fn = train[0]() if train else dynamo.optimize("fused")(eager)
    c0 = _cpu()
    fn(*args)
    c1 = _cpu()
    fn(*args)
    c2 = _cpu()
    first = [(c1[i] - c0[i]) - (c2[i] - c1[i]) for i in range(3)]
    mine = aot.last_records()[before:]
    aot_phases = [r["phases_ms"] for r in mine if not r.get("fallback")]
    print(json.dumps({
        "first_call_cpu_ms": round(first[0] + first[1], 1), "first_call_wall_ms": round(first[2], 1),
        "compiler_children_cpu_ms": round(first[1], 1),
        "capture_ms": round(sum(float(r.get("capture_ms") or 0) for r in records), 1),
        "backend_ms": round(sum(float(r.get("backend_ms") or 0) for r in records), 1),
        "aot_phases_ms": aot_phases, "graphs": graphs,
        "graph_cache": [r.get("graph_cache") for r in mine],
        "trace_modes": [r.get("trace_mode") for r in mine if "trace_mode" in r]}))


def _row(case, temp, got):
    aot = "; ".join(", ".join(f"{k} {v:.0f}" for k, v in p.items()) for p in got["aot_phases_ms"]) or "-"
    kern = "; ".join(f"{g['graph']}: {g['kernels']} kernels, {g['compiler_runs']} runs "
                     f"(longest {g['longest_run_ms']:.0f}, sum {g['runs_sum_ms']:.0f})" for g in got["graphs"])
    return (f"| {case} | {temp} | {got['first_call_cpu_ms']:.0f} ({got['compiler_children_cpu_ms']:.0f}) | "
            f"{got['first_call_wall_ms']:.0f} | {got['capture_ms']:.0f} | {got['backend_ms']:.0f} | {aot} | {kern} |")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default="mlp_train,cnn_train,transformer_train")
    p.add_argument("--warm-up", choices=("same", "inference"), default="same")
    p.add_argument("--no-bytecode-cache", action="store_true",
                   help="keep $PYTHONDONTWRITEBYTECODE in the children (as bench/side_by_side_fused.py)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        child(a.child, a.warm_up)
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="fused-compile-phases-") as workdir:
        for case in a.cases.split(","):
            env = dict(os.environ, DYNAMO_KERNEL_CACHE=tempfile.mkdtemp(dir=workdir))
            if not a.no_bytecode_cache:
                env.pop("PYTHONDONTWRITEBYTECODE", None)
            for temp in ("cold", "warm"):
                proc = subprocess.run([sys.executable, __file__, "--child", case, "--warm-up", a.warm_up],
                                      capture_output=True, text=True, env=env)
                if proc.returncode != 0:
                    print(f"{case} {temp}: failed\n{proc.stderr[-2000:]}", flush=True)
                    break
                got = json.loads(proc.stdout.strip().splitlines()[-1])
                print(json.dumps(dict(got, case=case, temp=temp, warm_up=a.warm_up)), flush=True)
                rows.append(_row(case, temp, got))
    print("\n| case | | first call CPU ms (compiler children) | wall ms | capture | backend | AOT phases ms | "
          "kernels: compiler runs (wall ms) |")
    print("|---|---|---:|---:|---:|---:|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
