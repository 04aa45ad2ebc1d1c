"""Capture time on stack 2: Dynamo against torch.compile(backend="eager") on torchvision models, in
the same run (issue 13's anchor; docs/performance.md has the figures).

    cd build-py312 && PYTHONPATH=$PWD/python ~/.cache/dynamo/py312-torch2.11/bin/python \\
        ../bench/side_by_side_capture.py [--quick] [--models resnet18,vit_b_16] [--repeats N] [--fresh]

Each model: eval, no_grad, batch 1, 3x224x224, random weights, 1 torch thread. A measurement is
the first compiled call minus the median of eager calls made just before it (compile_ms), timed
with the thread's CPU time (both compilers capture on the calling thread). Both compilers use the
eager backend, so compile_ms is capture + guards + one run of the captured code.

Default: one process; before each measurement dynamo.reset() and torch._dynamo.reset(), the two
compilers interleaved; before the first, each compiles an unrelated small function once, so
neither pays its lazy imports in the figures. --fresh: every measurement in a new process
instead (after imports and one eager call, no warm-up compile): a user's first compile,
one-time initialisation included.

Output: one JSON line per model (medians over repeats, graph and break counts, whether each
compiled output equals eager's bitwise), then a table with torch.compile / Dynamo (the issue's
goal: at least 10). Timings are never asserted.
"""
import argparse
import json
import subprocess
import sys

import torch

import dynamo
from anchor_common import environment, median, require_torch_compile, thread_ms

VARIANTS = ("dynamo", "torch_compile")


def _model(name):
    import torchvision
    torch.manual_seed(0)
    return getattr(torchvision.models, name)().eval(), torch.randn(1, 3, 224, 224)


def _compile(variant, model):
    """(compiled model, a function giving (graphs, breaks) of what it compiled)."""
    if variant == "dynamo":
        dynamo.reset()
        records = []
        listener = dynamo.add_compile_listener(records.append)

        def counts():
            dynamo.remove_compile_listener(listener)
            return (sum(len(r["graphs"]) for r in records), sum(len(r["breaks"]) for r in records))
        return dynamo.compile(model), counts
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()

    def counts():
        return (counters["stats"]["unique_graphs"], sum(counters["graph_break"].values()))
    return torch.compile(model, backend="eager"), counts


def measure_one(variant, model, x, expected, eager_runs):
    eager = []
    for _ in range(eager_runs):
        t0 = thread_ms()
        model(x)
        eager.append(thread_ms() - t0)
    compiled, counts = _compile(variant, model)
    t0 = thread_ms()
    got = compiled(x)
    first = thread_ms() - t0
    graphs, breaks = counts()
    if not torch.allclose(got, expected, rtol=1e-4, atol=1e-5):
        raise SystemExit(f"{variant}: compiled output differs from eager")
    return {"compile_ms": first - median(eager), "first_call_ms": first, "eager_ms": median(eager),
            "graphs": graphs, "breaks": breaks, "bitwise": bool(torch.equal(got, expected))}


def _warm_up():
    def small(a):
        return torch.relu(a) * 2 + 1
    a = torch.randn(4)
    dynamo.compile(small)(a)
    torch.compile(small, backend="eager")(a)
    dynamo.reset()
    torch._dynamo.reset()


def in_process(name, repeats, eager_runs):
    model, x = _model(name)
    samples = {v: [] for v in VARIANTS}
    with torch.no_grad():
        expected = model(x)
        for _ in range(repeats):
            for v in VARIANTS:  # interleaved
                samples[v].append(measure_one(v, model, x, expected, eager_runs))
    dynamo.reset()
    torch._dynamo.reset()
    return samples


def one_fresh(name, variant, eager_runs):
    """The --one mode: a single measurement, printed as JSON (the parent of --fresh reads it)."""
    model, x = _model(name)
    with torch.no_grad():
        expected = model(x)
        print(json.dumps(measure_one(variant, model, x, expected, eager_runs)))


def fresh(name, repeats, eager_runs, threads):
    samples = {v: [] for v in VARIANTS}
    for _ in range(repeats):
        for v in VARIANTS:
            proc = subprocess.run([sys.executable, __file__, "--one", name, v, "--threads", str(threads),
                                   "--eager-runs", str(eager_runs)], capture_output=True, text=True)
            if proc.returncode != 0:
                raise SystemExit(f"{name} {v}: child failed\n{proc.stdout}{proc.stderr}")
            samples[v].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return samples


def summary(name, samples, mode):
    row = {"bench": "side_by_side_capture", "model": name, "mode": mode, "clock": "thread_cpu",
           "repeats": len(samples["dynamo"])}
    for v in VARIANTS:
        for key in ("compile_ms", "first_call_ms", "eager_ms"):
            row[f"{v}_{key}"] = round(median(s[key] for s in samples[v]), 2)
        row[f"{v}_compile_ms_each"] = [round(s["compile_ms"], 1) for s in samples[v]]
        last = samples[v][-1]
        row[f"{v}_graphs"], row[f"{v}_breaks"] = last["graphs"], last["breaks"]
        row[f"{v}_bitwise"] = all(s["bitwise"] for s in samples[v])
    row["torch_compile_over_dynamo"] = round(row["torch_compile_compile_ms"] / row["dynamo_compile_ms"], 2)
    return row


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="resnet18, 1 repeat (a smoke run)")
    p.add_argument("--models", default="resnet18,vit_b_16")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--eager-runs", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--fresh", action="store_true", help="every measurement in a new process")
    p.add_argument("--one", nargs=2, metavar=("MODEL", "VARIANT"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    require_torch_compile()
    torch.set_num_threads(a.threads)
    if a.one:
        one_fresh(a.one[0], a.one[1], a.eager_runs)
        return 0
    models, repeats = (["resnet18"], 1) if a.quick else (a.models.split(","), a.repeats)
    eager_runs = 1 if a.quick else a.eager_runs
    mode = "fresh_process" if a.fresh else "in_process_reset"
    print(json.dumps(environment(mode=mode, repeats=repeats)), flush=True)
    if not a.fresh:
        _warm_up()
    rows = []
    for name in models:
        samples = fresh(name, repeats, eager_runs, a.threads) if a.fresh else in_process(name, repeats, eager_runs)
        rows.append(summary(name, samples, mode))
        print(json.dumps(rows[-1]), flush=True)
    print(f"compile ms = first compiled call - eager call, thread CPU time, median of {repeats}; {mode}")
    print(f"{'model':10} {'eager ms':>9} {'dynamo ms':>10} {'t.c(eager) ms':>14} {'graphs d/t.c':>13} "
          f"{'t.c/dynamo':>11}")
    for r in rows:
        print(f"{r['model']:10} {r['dynamo_eager_ms']:9.1f} {r['dynamo_compile_ms']:10.1f} "
              f"{r['torch_compile_compile_ms']:14.1f} {str(r['dynamo_graphs']) + '/' + str(r['torch_compile_graphs']):>13} "
              f"{r['torch_compile_over_dynamo']:11.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
