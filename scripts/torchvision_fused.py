#!/usr/bin/env python3
"""Every torchvision classifier compiled with dynamo.compile(model, backend="fused", fullgraph=True)
in eval mode under torch.no_grad(), random weights, compared with eager and with a float64 copy
of the model (issue #13: "within tolerance (fused backend)").

A model passes when the compile is one graph, the fused backend lowered it (the fusion log shows
its program: no eager-runner fallback), and both compiled calls (two inputs of one shape, new
values) are within the fused tolerance (torchvision_cases.fused_comparison: that of
tests/python/test_fused_training.py, made relative):

  - close to eager: |got - eager| <= 1e-4 * |eager| + 1e-4 * max|eager|, and
  - no further from float64 than 4x eager's own distance: max|got - fp64| <=
    4 * max|eager - fp64| + 1e-6 * max|fp64|.

(The bounds are relative to the output's magnitude, where the training test's have absolute
floors: with random weights some classifiers' logits are about 1e-19.)

The models run in child processes, up to 8 per child (a crash or hang costs the model it was
running; the next child goes on after it), one torch thread, batch 1, the smallest input the
model accepts (tests/python/torchvision_cases.py's input_for: 64x64, ViT/MaxViT 224, Inception
299). One line per model as it finishes (also
appended to --jsonl, so a long run can be read while it goes), then a summary:

    PYTHONPATH=build-py312/python ~/.cache/dynamo/py312-torch2.11/bin/python scripts/torchvision_fused.py
    ... --model resnet18             # one model; repeatable
    ... --jsonl results.jsonl        # one JSON object per model, with the failures' tracebacks
    ... --markdown                   # also print the table of docs/stacks.md
    ... --from-jsonl results.jsonl   # print the summary (and --markdown) of an earlier run

Columns: result (ok / outside tolerance / fallback / exception / crashed / timeout), graphs,
kernels, conv steps and externs of the lowered program, max |fused - fp64| / max |eager - fp64|,
the first compiled call (capture + lowering + kernel compiles) and the eager call in seconds.
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))

from sweep_format import fmt  # noqa: E402  (beside this script)

RESULT_TAG = "TORCHVISION_FUSED_RESULT "
# The largest builders last, so that a run cut short still covers the rest.
LAST = ("regnet_y_32gf", "vit_l_32", "vit_l_16", "regnet_y_128gf", "vit_h_14")


def run_one(name):
    import torch
    torch.set_num_threads(1)
    import dynamo
    from capture_harness import Recorder
    from torchvision_cases import build, fused_comparison, input_for, with_nonzero_heads

    res = {"model": name, "result": "ok", "detail": ""}
    model = with_nonzero_heads(build(name)).eval()  # eval changes no state: eager and compiled share it
    x1 = input_for(name, batch=1)
    x2 = torch.randn(x1.shape, generator=torch.Generator().manual_seed(1))
    dynamo.reset()
    compiled = dynamo.compile(model, backend="fused", fullgraph=True)
    with torch.no_grad():
        t = time.perf_counter()
        eager = [model(x1)]
        res["eager_s"] = round(time.perf_counter() - t, 2)
        eager.append(model(x2))
        got = []
        with Recorder() as rec:
            t = time.perf_counter()
            got.append(compiled(x1))
            res["compiled_s"] = round(time.perf_counter() - t, 2)
            got.append(compiled(x2))
        res["graphs"] = len(rec.graphs)
        model.double()
        ref = [model(x1.double()), model(x2.double())]
    worst = None
    for i in range(2):
        ok, err_f, err_e, diff, scale = fused_comparison(got[i], eager[i], ref[i])
        if worst is None or err_f > worst[1]:
            worst = (ok, err_f, err_e, diff, scale)
        if not ok and res["result"] == "ok":
            res["result"] = "outside tolerance"
            res["detail"] = (f"call {i + 1}: max |fused - fp64| {err_f:.3g}, max |eager - fp64| {err_e:.3g}, "
                             f"max |fused - eager| {diff:.3g}")
    res["err_fused"], res["err_eager"], res["diff_eager"], res["scale"] = worst[1:]
    if res["graphs"] != 1 and res["result"] == "ok":
        res["result"], res["detail"] = "exception", f"{res['graphs']} graphs instead of 1"
    return res


def program_counts(stderr):
    """Kernels, conv steps and externs of the fused programs in a DYNAMO_LOGS=fusion log."""
    lines = stderr.splitlines()
    return {"programs": sum(ln.startswith("[dynamo fusion]") for ln in lines),
            "kernels": sum(ln.startswith("kernel ") for ln in lines),
            "convs": sum(ln.startswith("conv #") for ln in lines),
            "externs": sum(ln.startswith("extern #") for ln in lines)}


def run_with_log(name):
    """run_one with fd 2 (where the C++ fusion log goes) in a file: the result plus its counts."""
    import tempfile
    with tempfile.TemporaryFile(mode="w+") as log:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(log.fileno(), 2)
        try:
            res = run_one(name)
        except Exception as e:  # noqa: BLE001 - every failure is a result
            msg = f"{type(e).__name__}: {e}".strip().splitlines()
            res = {"model": name, "result": "exception", "detail": (msg[0] if msg else "")[:300],
                   "traceback": traceback.format_exc()[-6000:]}
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        log.seek(0)
        res.update(program_counts(log.read()))
    if res["result"] == "ok" and res["programs"] == 0:
        res["result"], res["detail"] = "fallback", "no fused program was lowered (eager runner)"
    return res


def run_children(names, timeout, on_result):
    """The models in child processes, several per child (torch's import is most of a small
    model's time); a child that crashes or hangs costs the model it was running, and the next
    child starts after it."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", DYNAMO_LOGS="fusion")
    todo = list(names)
    while todo:
        batch = [n for n in todo if n not in LAST][:8] or todo[:1]
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", ",".join(batch)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        err_tail = []
        threading.Thread(target=lambda: err_tail.extend(proc.stderr.read().splitlines()[-20:]), daemon=True).start()
        timer = threading.Timer(timeout * len(batch), proc.kill)
        timer.start()
        done, t = set(), time.perf_counter()
        for line in proc.stdout:
            if line.startswith(RESULT_TAG):
                res = json.loads(line[len(RESULT_TAG):])
                res["total_s"] = round(time.perf_counter() - t, 1)
                t = time.perf_counter()
                done.add(res["model"])
                on_result(res)
        rc = proc.wait()
        timed_out = not timer.is_alive() and rc != 0
        timer.cancel()
        rest = [n for n in batch if n not in done]
        if rest:
            on_result({"model": rest[0], "result": "timeout" if timed_out else "crashed",
                       "detail": f"no result after {timeout * len(batch)} s" if timed_out
                       else f"exit code {rc}: {(err_tail[-1:] or [''])[0][:300]}",
                       "traceback": "\n".join(err_tail), "total_s": round(time.perf_counter() - t, 1)})
            done.add(rest[0])
        todo = [n for n in todo if n not in done]


def line_for(r):
    s = (f"{r['model']:<22} {r['result']:<17} graphs={fmt(r.get('graphs'))} kernels={fmt(r.get('kernels'))} "
         f"convs={fmt(r.get('convs'))} externs={fmt(r.get('externs'))} "
         f"err={fmt(r.get('err_fused'), '{:.2g}')}/{fmt(r.get('err_eager'), '{:.2g}')} "
         f"compiled={fmt(r.get('compiled_s'), '{:.1f}')}s eager={fmt(r.get('eager_s'), '{:.2f}')}s "
         f"total={fmt(r.get('total_s'), '{:.0f}')}s")
    return s + (f"\n    {r['detail']}" if r.get("detail") else "")


def markdown(results):
    rows = ["| model | result | graphs | kernels / conv steps / externs | max abs err fused / eager (vs fp64) "
            "| 1st compiled call s | eager call s | failure |",
            "|---|---|---|---|---|---|---|---|"]
    for r in results:
        counts = "-" if r.get("kernels") is None else f"{r['kernels']} / {r['convs']} / {r['externs']}"
        err = "-" if r.get("err_fused") is None else f"{r['err_fused']:.2g} / {r['err_eager']:.2g}"
        mark = "✓" if r["result"] == "ok" else "✗ " + r["result"]
        detail = (r.get("detail") or "").replace("|", "\\|").replace("\n", " ")
        rows.append(f"| {r['model']} | {mark} | {fmt(r.get('graphs'))} | {counts} | {err} | "
                    f"{fmt(r.get('compiled_s'), '{:.1f}')} | {fmt(r.get('eager_s'), '{:.2f}')} | {detail} |")
    return "\n".join(rows)


def summary(results, seconds=None):
    by = {}
    for r in results:
        by[r["result"]] = by.get(r["result"], 0) + 1
    ok = by.get("ok", 0)
    took = "" if seconds is None else f" in {seconds:.0f} s"
    return (f"summary: {ok} of {len(results)} classifiers compile to one fused graph within tolerance "
            f"({', '.join(f'{v} {k}' for k, v in sorted(by.items()))}){took}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append")
    ap.add_argument("--timeout", type=int, default=1800,
                    help="seconds per model (default 1800; a child running n models gets n times that)")
    ap.add_argument("--jsonl", help="append one JSON line per model to this file")
    ap.add_argument("--from-jsonl", help="report an earlier run's JSON lines instead of running")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.child:
        import gc
        for name in args.child.split(","):
            print(RESULT_TAG + json.dumps(run_with_log(name)), flush=True)
            gc.collect()
        return 0

    if args.from_jsonl:
        with open(args.from_jsonl) as f:
            results = [json.loads(line) for line in f if line.strip()]
        t = None
    else:
        from torchvision_cases import all_builders
        import torch
        import torchvision
        names = args.model or sorted(all_builders(), key=lambda n: (n in LAST, LAST.index(n) if n in LAST else 0, n))
        print(f"torch {torch.__version__}, torchvision {torchvision.__version__}; {len(names)} models", flush=True)
        results, t0 = [], time.perf_counter()

        def record(r):
            results.append(r)
            print(line_for(r), flush=True)
            if args.jsonl:
                with open(args.jsonl, "a") as f:
                    f.write(json.dumps(r) + "\n")
        run_children(names, args.timeout, record)
        t = time.perf_counter() - t0
    print("\n" + summary(results, t))
    if args.markdown:
        print("\n" + markdown(results))
    return 0 if all(r["result"] == "ok" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
