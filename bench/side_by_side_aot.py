"""aot_eager on stack 2: Dynamo's backend="aot_eager" against torch.compile(backend="aot_eager"),
compile time and training-step time, in the same run (issue 13's anchor; docs/performance.md).

    cd build-py312 && PYTHONPATH=$PWD/python ~/.cache/dynamo/py312-torch2.11/bin/python \\
        ../bench/side_by_side_aot.py [--quick] [--workloads resnet18,transformer_layer] [--repeats N]

Workloads: bench/aot_eager.py's (train mode): torchvision resnet18, batch 8, 3x64x64, and
TransformerEncoderLayer(256, 8, 1024, dropout 0.1), batch 8 x 64 tokens. 1 torch thread, thread
CPU time (the forward, the backward and both compilers run on the calling thread).

    compile_ms   the first training step (forward, .sum(), backward) of a freshly compiled copy
                 of the model minus the median eager step just before it: capture, the joint
                 trace, the partition and both graphs' set-up, each compiler's whole first-step
                 cost. One process; dynamo.reset() and torch._dynamo.reset() before each, the
                 compilers interleaved, after one warm-up compile of a small training step each
                 (lazy imports not counted).
    step_ms      later steps: eager, Dynamo aot_eager and torch.compile aot_eager interleaved,
                 medians.
    ratios       torch.compile / Dynamo for compile time; Dynamo / torch.compile for step time.

The first step's loss and gradients are checked against eager's (resnet18: within 1e-4; the
transformer's dropout draws differently under each compiler, so only the loss's finiteness).
Timings are never asserted.
"""
import argparse
import copy
import json
import sys

import torch

import dynamo
from aot_eager import WORKLOADS
from anchor_common import environment, median, require_torch_compile, thread_ms

VARIANTS = ("dynamo", "torch_compile")


def _compiled(variant, model):
    if variant == "dynamo":
        dynamo.reset()
        return dynamo.compile(model, backend="aot_eager")
    torch._dynamo.reset()
    return torch.compile(model, backend="aot_eager")


def _step(fn, x):
    t0 = thread_ms()
    loss = fn(x).sum()
    loss.backward()
    return thread_ms() - t0, loss.detach()


def _grads(model):
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


def measure_compile(name, variant, model, x, eager_runs):
    eager_model = copy.deepcopy(model)
    eager_times = []
    for _ in range(eager_runs):
        eager_model.zero_grad(set_to_none=True)
        eager_times.append(_step(eager_model, x)[0])
    m = copy.deepcopy(model)
    compiled = _compiled(variant, m)
    first, loss = _step(compiled, x)
    want_loss = eager_model(x).sum() if name != "transformer_layer" else None
    if want_loss is not None:
        eager_model.zero_grad(set_to_none=True)
        want_loss.backward()
        torch.testing.assert_close(loss, want_loss.detach(), rtol=1e-4, atol=1e-4)
        for g, w in zip(_grads(m), _grads(eager_model)):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
    elif not torch.isfinite(loss):
        raise SystemExit(f"{name} {variant}: loss not finite")
    return first - median(eager_times)


def _warm_up():
    lin = torch.nn.Linear(4, 4)
    a = torch.randn(2, 4)
    for variant in VARIANTS:
        _step(_compiled(variant, copy.deepcopy(lin)), a)
    dynamo.reset()
    torch._dynamo.reset()


def bench(name, repeats, step_repeats, eager_runs):
    model, x = WORKLOADS[name]()
    row = {"bench": "side_by_side_aot", "workload": name, "clock": "thread_cpu", "repeats": repeats,
           "step_repeats": step_repeats}
    compile_ms = {v: [] for v in VARIANTS}
    for _ in range(repeats):
        for v in VARIANTS:  # interleaved
            compile_ms[v].append(measure_compile(name, v, model, x, eager_runs))
    for v in VARIANTS:
        row[f"compile_ms_{v}"] = round(median(compile_ms[v]), 1)
        row[f"compile_ms_{v}_each"] = [round(t, 1) for t in compile_ms[v]]
    row["compile_torch_compile_over_dynamo"] = round(row["compile_ms_torch_compile"] / row["compile_ms_dynamo"], 2)

    steppers = {"eager": copy.deepcopy(model)}
    dynamo.reset()
    torch._dynamo.reset()
    steppers["dynamo"] = dynamo.compile(copy.deepcopy(model), backend="aot_eager")
    steppers["torch_compile"] = torch.compile(copy.deepcopy(model), backend="aot_eager")
    times = {k: [] for k in steppers}
    for fn in steppers.values():  # compile, warm
        _step(fn, x)
    for _ in range(step_repeats):
        for k, fn in steppers.items():  # interleaved
            times[k].append(_step(fn, x)[0])
    for k in steppers:
        row[f"step_ms_{k}"] = round(median(times[k]), 2)
    row["step_dynamo_over_torch_compile"] = round(median(times["dynamo"]) / median(times["torch_compile"]), 3)
    row["step_dynamo_over_eager"] = round(median(times["dynamo"]) / median(times["eager"]), 3)
    row["step_torch_compile_over_eager"] = round(median(times["torch_compile"]) / median(times["eager"]), 3)
    dynamo.reset()
    torch._dynamo.reset()
    return row


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="transformer_layer, 1 compile, 3 steps")
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--repeats", type=int, default=3, help="compiles per compiler (default 3)")
    p.add_argument("--step-repeats", type=int, default=15)
    a = p.parse_args(argv)
    require_torch_compile()
    torch.set_num_threads(1)
    if a.quick:
        names, repeats, step_repeats, eager_runs = ["transformer_layer"], 1, 3, 1
    else:
        names, repeats, step_repeats, eager_runs = a.workloads.split(","), a.repeats, a.step_repeats, 3
    print(json.dumps(environment()), flush=True)
    _warm_up()
    rows = []
    for name in names:
        rows.append(bench(name, repeats, step_repeats, eager_runs))
        print(json.dumps(rows[-1]), flush=True)
    print("thread CPU time, 1 torch thread, medians; compile = first step - eager step")
    print("| workload | compile ms Dynamo / torch.compile (t.c / Dynamo) | step ms eager / Dynamo / torch.compile "
          "(Dynamo / t.c) |")
    print("|---|---|---|")
    for r in rows:
        print(f"| {r['workload']} | {r['compile_ms_dynamo']} / {r['compile_ms_torch_compile']} "
              f"({r['compile_torch_compile_over_dynamo']}) | {r['step_ms_eager']} / {r['step_ms_dynamo']} / "
              f"{r['step_ms_torch_compile']} ({r['step_dynamo_over_torch_compile']}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
