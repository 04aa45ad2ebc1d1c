#!/usr/bin/python3
"""The full torchvision 0.14 run of issue #7: every segmentation, detection, video and optical-flow
builder (and, with --with-classification, the 80 classifiers) compiled with dynamo.compile(model)
in default mode (graph breaks allowed, eager backend), in eval mode under torch.no_grad(), random
weights, compared with eager bitwise (torch.equal on every tensor, same container types and keys).

Each model is called compiled three times: two inputs of the same shape (new values: the second
call must hit the cache or recompile correctly) and, where it is cheap, a third of another shape.
Detection models run with their score thresholds at 0 so that random weights still produce boxes,
and their backbone (model.backbone(images), an OrderedDict of feature maps) is compiled and
compared on its own too. Inputs and builder arguments: tests/python/torchvision_cases.py.

Every model runs in a child process of its own (a crash or a hang costs one model, not the run),
one at a time, with one torch thread. One line per model, then a summary:

    PYTHONPATH=/work/main/build/python /usr/bin/python3 scripts/torchvision_all.py
    ... --family detection           # one family (segmentation, detection, video, optical_flow,
                                     #   classification); repeatable
    ... --model raft_small           # one model; repeatable
    ... --with-classification        # the classifiers too
    ... --markdown                   # also print the table of docs/models.md
    ... --json results.json          # every result, with the failures' tracebacks

Columns: result (ok / wrong / exception / crashed / timeout), graphs and graph breaks of the first
compiled call (what dynamo.explain(model)(inputs) reports: same reset, backend and call), the
compiles the later calls added (recompiles: by the 2nd call + by the 3rd), the eager and first compiled call times in seconds,
and for detection the backbone's result, graphs and breaks.
"""
import argparse
import copy
import json
import os
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))

from sweep_format import fmt  # noqa: E402  (beside this script)

RESULT_TAG = "TORCHVISION_ALL_RESULT "


# ---- one model (child process) --------------------------------------------------------------

def clone(x):
    import torch
    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, (list, tuple)):
        return type(x)(clone(v) for v in x)
    if isinstance(x, dict):
        return type(x)((k, clone(v)) for k, v in x.items())
    return x


def first_difference(got, expected, path="out"):
    """None when got equals expected bitwise (same containers, keys, dtypes, shapes, values),
    else a short description of the first difference."""
    import torch
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"{path}: {type(got).__name__} instead of a tensor"
        if got.dtype != expected.dtype or got.shape != expected.shape:
            return f"{path}: {got.dtype}{list(got.shape)} instead of {expected.dtype}{list(expected.shape)}"
        if torch.equal(got, expected):
            return None
        if expected.is_floating_point() and torch.equal(got.isnan(), expected.isnan()) and \
                torch.equal(got.nan_to_num(), expected.nan_to_num()):
            return None
        diff = (got.double() - expected.double()).abs()
        return f"{path}: values differ (max abs diff {diff.max().item():.3g}, " \
               f"{int((diff > 0).sum())} of {diff.numel()} elements)"
    if type(got) is not type(expected):
        return f"{path}: {type(got).__name__} instead of {type(expected).__name__}"
    if isinstance(expected, (list, tuple)):
        if len(got) != len(expected):
            return f"{path}: length {len(got)} instead of {len(expected)}"
        for i, (g, e) in enumerate(zip(got, expected)):
            d = first_difference(g, e, f"{path}[{i}]")
            if d:
                return d
        return None
    if isinstance(expected, dict):
        if list(got.keys()) != list(expected.keys()):
            return f"{path}: keys {list(got.keys())} instead of {list(expected.keys())}"
        for k in expected:
            d = first_difference(got[k], expected[k], f"{path}[{k!r}]")
            if d:
                return d
        return None
    return None if got == expected else f"{path}: {got!r} instead of {expected!r}"


def check_compiled(eager_fn, compiled_fn, calls):
    """Runs eager then compiled over calls [(args, kwargs)]; returns a result dict."""
    import dynamo
    from capture_harness import Recorder
    from dynamo.explain import ExplainOutput
    import torch

    out = {"result": "ok", "detail": "", "graphs": None, "breaks": None, "distinct_breaks": None,
           "break_sites": [], "recompiles": [], "eager_s": None, "compiled_s": None, "calls": len(calls)}
    with torch.no_grad():
        t = time.perf_counter()
        expected = [eager_fn(*clone(a), **k) for a, k in calls[:1]]
        out["eager_s"] = round(time.perf_counter() - t, 3)
        expected += [eager_fn(*clone(a), **k) for a, k in calls[1:]]
    dynamo.reset()
    compiled = dynamo.compile(compiled_fn)
    for i, (args, kwargs) in enumerate(calls):
        with Recorder() as rec:
            t = time.perf_counter()
            try:
                with torch.no_grad():
                    got = compiled(*clone(args), **kwargs)
            except Exception as e:  # noqa: BLE001 - every failure is a result
                out["result"] = "exception"
                msg = f"{type(e).__name__}: {e}".strip().splitlines()
                out["detail"] = f"call {i + 1}: " + (msg[0] if msg else type(e).__name__)[:300]
                out["traceback"] = traceback.format_exc()[-6000:]
                return out
            finally:
                elapsed = round(time.perf_counter() - t, 3)
                if i == 0:
                    explained = ExplainOutput(rec.records, None)
                    out["compiled_s"] = elapsed
                    out["graphs"] = explained.graph_count
                    out["breaks"] = explained.graph_break_count
                    out["distinct_breaks"] = len(explained.break_reasons)
                    out["break_sites"] = [
                        f"{b.kind} at {os.path.basename(b.file)}:{b.line} x{b.count}: {b.reason}"[:240]
                        for b in explained.break_reasons]
                    out["not_compiled"] = [f"{fn} {os.path.basename(f)}:{ln} {st}: {r}"[:240]
                                           for fn, f, ln, st, r in explained.not_compiled]
                else:
                    out["recompiles"].append(sum(1 for r in rec.records if r.get("status") == "compiled"))
        diff = first_difference(got, expected[i])
        if diff:
            out["result"] = "wrong"
            out["detail"] = f"call {i + 1}: {diff}"[:400]
            return out
    return out


def run_one(name):
    import torch
    torch.set_num_threads(1)
    from torchvision_cases import backbone_input, build_family_model, family_inputs, family_of

    family = family_of(name)
    t0 = time.perf_counter()
    eager = build_family_model(name)
    model = copy.deepcopy(eager)
    calls = [c for c in (family_inputs(name, v) for v in range(3)) if c is not None]
    res = {"model": name, "family": family}
    res.update(check_compiled(eager, model, calls))
    if family == "detection":
        bcalls = [((x,), {}) for x in (backbone_input(name, v) for v in range(3)) if x is not None]
        res["backbone"] = check_compiled(eager.backbone, model.backbone, bcalls)
    res["total_s"] = round(time.perf_counter() - t0, 1)
    return res


# ---- the run (parent process) ---------------------------------------------------------------

def models_for(families, models, with_classification):
    from torchvision_cases import FAMILY_MODELS, all_builders, family_of
    if models:
        for m in models:
            family_of(m)  # raises on an unknown name
        return list(models)
    names = []
    for family in families or list(FAMILY_MODELS) + (["classification"] if with_classification else []):
        names += all_builders() if family == "classification" else FAMILY_MODELS[family]
    return names


def run_child(name, timeout):
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    t = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", name],
                              capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"model": name, "result": "timeout", "detail": f"no result after {timeout} s",
                "total_s": round(time.perf_counter() - t, 1)}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG):])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
    return {"model": name, "result": "crashed",
            "detail": f"exit code {proc.returncode}: {tail[0][:300]}", "traceback": proc.stderr[-6000:],
            "total_s": round(time.perf_counter() - t, 1)}


def recompiles(r):
    """Compiles made by the 2nd call (same shapes, new values) + by the 3rd (another shape)."""
    n = r.get("recompiles")
    return None if n is None else "+".join(str(k) for k in n) or "0"


def line_for(r):
    s = (f"{r['model']:<40} {r['result']:<9} graphs={fmt(r.get('graphs')):<3} "
         f"breaks={fmt(r.get('breaks')):<3} recompiles={fmt(recompiles(r)):<5} "
         f"eager={fmt(r.get('eager_s'), '{:.2f}')}s compiled={fmt(r.get('compiled_s'), '{:.2f}')}s "
         f"total={fmt(r.get('total_s'), '{:.0f}')}s")
    b = r.get("backbone")
    if b:
        s += f"  backbone: {b['result']} graphs={fmt(b.get('graphs'))} breaks={fmt(b.get('breaks'))}"
    details = [d for d in (r.get("detail"), b and b.get("detail") and "backbone " + b["detail"]) if d]
    return s + ("\n    " + "\n    ".join(details) if details else "")


def cell(r):
    return {"ok": "✓ equal", "wrong": "✗ wrong result", "exception": "✗ exception",
            "crashed": "✗ crashed", "timeout": "✗ timeout"}[r["result"]]


def markdown(results):
    rows = ["| model | family | result | graphs | breaks | recompiles | eager s | compiled s (1st call) "
            "| backbone: result, graphs, breaks | failure |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        b = r.get("backbone")
        bcell = f"{cell(b)}, {fmt(b.get('graphs'))}, {fmt(b.get('breaks'))}" if b else ""
        detail = "; ".join(d for d in (r.get("detail"), b and b.get("detail") and "backbone " + b["detail"]) if d)
        detail = detail.replace("|", "\\|").replace("\n", " ")
        rows.append(f"| {r['model']} | {r.get('family', '')} | {cell(r)} | {fmt(r.get('graphs'))} | "
                    f"{fmt(r.get('breaks'))} | {fmt(recompiles(r))} | "
                    f"{fmt(r.get('eager_s'), '{:.2f}')} | {fmt(r.get('compiled_s'), '{:.2f}')} | {bcell} | "
                    f"{detail} |")
    return "\n".join(rows)


def passed(r):
    return r["result"] == "ok" and (r.get("backbone") is None or r["backbone"]["result"] == "ok")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", action="append",
                    choices=["segmentation", "detection", "video", "optical_flow", "classification"])
    ap.add_argument("--model", action="append")
    ap.add_argument("--with-classification", action="store_true")
    ap.add_argument("--timeout", type=int, default=1200, help="seconds per model (default 1200)")
    ap.add_argument("--markdown", action="store_true", help="print the docs/models.md table too")
    ap.add_argument("--json", help="write every result (with tracebacks) to this file")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.child:
        try:
            res = run_one(args.child)
        except Exception as e:  # noqa: BLE001 - building the model or the inputs failed
            res = {"model": args.child, "result": "exception", "detail": f"setup: {type(e).__name__}: {e}"[:300],
                   "traceback": traceback.format_exc()[-6000:]}
        print(RESULT_TAG + json.dumps(res), flush=True)
        return 0

    names = models_for(args.family, args.model, args.with_classification)
    import dynamo
    import torch
    import torchvision
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, dynamo from "
          f"{os.path.dirname(dynamo.__file__)}; {len(names)} models", flush=True)
    results = []
    t = time.perf_counter()
    for name in names:
        r = run_child(name, args.timeout)
        results.append(r)
        print(line_for(r), flush=True)
    ok = sum(passed(r) for r in results)
    by = {}
    for r in results:
        key = "ok" if passed(r) else r["result"] if r["result"] != "ok" else "backbone " + r["backbone"]["result"]
        by[key] = by.get(key, 0) + 1
    print(f"\nsummary: {ok} of {len(results)} models compile and equal eager "
          f"({', '.join(f'{v} {k}' for k, v in sorted(by.items()))}) in {time.perf_counter() - t:.0f} s")
    if args.markdown:
        print("\n" + markdown(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0 if ok == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
