"""The fused backend with dynamic sizes: kernels taking their sizes as parameters against static
per-size kernels, in the same run (docs/dynamic-shapes.md, "The fused backend").

    PYTHONPATH=build/python /usr/bin/python3 bench/fused_dynamic.py             # ~2 min
    PYTHONPATH=build/python /usr/bin/python3 bench/fused_dynamic.py --quick     # ~30 s

The kernel cache is a fresh temporary directory (DYNAMO_KERNEL_CACHE), so a static compile of a
new size really runs the C++ compiler, as it does the first time a size is seen on a machine.

1. Cost of a new size. For each workload, one dynamic entry (mark_dynamic on the varying dim)
   is warmed with two sizes (`first size ms` / `second size ms`: their first calls, and the kernel
   libraries each loaded: the first compile's kernels are already parametrised (a probe lowering
   at other sizes), so the second loads none unless its structure differs); then each of N new
   sizes is called once: `dynamic ms` is the median time of that first call (meta run of the
   graph, lowering, kernel sources, in-memory cache hit, the run itself). `static ms` is the
   median time of the first call of a static compile (dynamic=False) at a new size (capture,
   lowering, C++ compile of that size's kernels, the run). Also counted: kernel libraries newly
   loaded over the N sizes (_C._codegen.counters()).
2. Steady state. At a few sizes, the parametrised kernels (the dynamic entry) against the static
   kernels of that size (a dynamic=False compile): rounds of 20 calls each, alternating which goes
   first; `ratio` is the median of the per-round ratios dynamic / static (goal: <= 1.05),
   `ratio (min)` the ratio of the fastest rounds. One thread (torch and OpenMP) unless
   DYNAMO_BENCH_THREADS is set: the comparison is of the generated code.

3. A new value of a Python number (`--numbers`, also in the default run): `step` (an int) and `lr`
   (a float) change on every call of `(x * lr + step).relu() * 0.5 + x` over (256, 1024). After
   two warm calls (the static first compile, then the dynamic entry), `new value ms` is the median
   time of the calls with a new value, `lowerings` and `kernels loaded` are counted over them,
   `same value ms` is the median time of calls repeating one value, against eager in the same run.
   Two modes in the same run: numbers read by the kernels at call time (now), and
   DYNAMO_FUSED_NUMBERS_PER_VALUE=1 (before: numbers are extern arguments, each value lowered).

Workloads: `mlp` Linear(256, 1024)-GELU-Linear(1024, 256) + residual, batch varies; `pointwise`
layer_norm(gelu(x) * 0.5 + x) over (batch, 1024), batch varies (kernel time dominates, loops
vectorised over runtime extents); `transformer` TransformerEncoderLayer(64, 4, 256), sequence
length varies at batch 4; `cnn` conv-bn-relu x2, avgpool, linear at 32x32, batch varies.
Output: one JSON line per measurement, then a table. Nothing is asserted.
"""
import argparse
import json
import os
import statistics
import tempfile
import time

os.environ.setdefault("DYNAMO_KERNEL_CACHE", tempfile.mkdtemp(prefix="dynamo-bench-kernels-"))
# One thread for torch and the kernels' OpenMP loops unless --threads: the comparison is of the
# generated code, and two threads on a shared machine measure the other jobs.
_THREADS = os.environ.get("DYNAMO_BENCH_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", _THREADS)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import dynamo  # noqa: E402
from dynamo import _C  # noqa: E402


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(256, 1024), torch.nn.Linear(1024, 256)

    def forward(self, x):
        return x + self.b(F.gelu(self.a(x)))


class Pointwise(torch.nn.Module):
    def forward(self, x):
        return F.layer_norm(F.gelu(x) * 0.5 + x, (x.shape[-1],))


def _cnn():
    return torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                               torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                               torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10))


# name -> (module maker, input of size n, dim that varies, warm sizes, new sizes, steady sizes)
WORKLOADS = {
    "mlp": (Mlp, lambda n: torch.randn(n, 256), 0, [8, 16], [5, 64, 33, 17, 31, 9, 40, 12, 50, 27], [64, 256]),
    "pointwise": (Pointwise, lambda n: torch.randn(n, 1024), 0, [8, 16], [5, 64, 33, 17, 31, 9, 40, 12, 50, 27],
                  [63, 512]),
    "transformer": (lambda: torch.nn.TransformerEncoderLayer(64, 4, 256, dropout=0.0),
                    lambda n: torch.randn(n, 4, 64), 0, [8, 16], [5, 64, 33, 17, 31, 9, 40, 12, 50, 27], [64, 128]),
    "cnn": (_cnn, lambda n: torch.randn(n, 3, 32, 32), 0, [4, 6], [5, 9, 12, 7, 3, 10, 11, 13, 14, 15], [16]),
}


def units():
    return _C._codegen.counters()["units_loaded"]


def first_call_ms(f, x):
    t = time.perf_counter()
    f(x)
    return (time.perf_counter() - t) * 1e3


def new_size_cost(name, quick):
    make, inp, dim, warm, new, _ = WORKLOADS[name]
    if quick:
        new = new[:4]
    torch.manual_seed(0)
    m = make().eval()
    dyn = dynamo.compile(m, backend="fused")
    static = dynamo.compile(m, backend="fused", dynamic=False)
    with torch.no_grad():
        warm_ms, warm_units = [], []
        for i, n in enumerate(warm):
            x = inp(n)
            if i == 0:
                dynamo.mark_dynamic(x, dim)
            u0 = units()
            warm_ms.append(first_call_ms(dyn, x))
            warm_units.append(units() - u0)
        u0 = units()
        dyn_ms = [first_call_ms(dyn, inp(n)) for n in new]
        loaded_dynamic = units() - u0
        # Static compiles at sizes the dynamic entry did not see (their kernels are new text).
        u0 = units()
        static_ms = [first_call_ms(static, inp(n + 100)) for n in new[:4 if quick else 6]]
        loaded_static = units() - u0
    return {"bench": "new_size", "workload": name, "sizes": len(new),
            "dynamic_ms": round(statistics.median(dyn_ms), 2), "dynamic_max_ms": round(max(dyn_ms), 2),
            "dynamic_units_loaded": loaded_dynamic,
            "first_size_ms": round(warm_ms[0], 1), "first_size_units_loaded": warm_units[0],
            "second_size_ms": round(warm_ms[1], 1), "second_size_units_loaded": warm_units[1],
            "static_ms": round(statistics.median(static_ms), 1), "static_units_loaded": loaded_static,
            "static_sizes": len(static_ms)}


def steady(name, quick):
    make, inp, dim, warm, _, sizes = WORKLOADS[name]
    rows = []
    torch.manual_seed(0)
    m = make().eval()
    with torch.no_grad():
        for n in sizes:
            dynamo.reset()
            dyn = dynamo.compile(m, backend="fused")
            static = dynamo.compile(m, backend="fused", dynamic=False)
            for i, w in enumerate(warm):  # the dynamic entry, parametrised from the second size
                x = inp(w)
                if i == 0:
                    dynamo.mark_dynamic(x, dim)
                dyn(x)
            x = inp(n)
            want = m(x)
            got_d, got_s = dyn(x), static(x)
            err = max((got_d - want).abs().max().item(), (got_s - want).abs().max().item())
            calls = 5 if quick else 20
            repeats = 7 if quick else 41
            td, ts, ratios = [], [], []
            for r in range(repeats):
                pair = ((dyn, td), (static, ts)) if r % 2 == 0 else ((static, ts), (dyn, td))
                for f, out in pair:
                    t = time.perf_counter()
                    for _ in range(calls):
                        f(x)
                    out.append((time.perf_counter() - t) / calls * 1e3)
                ratios.append(td[-1] / ts[-1])
            rows.append({"bench": "steady", "workload": name, "size": n,
                         "dynamic_ms": round(statistics.median(td), 4), "static_ms": round(statistics.median(ts), 4),
                         "ratio": round(statistics.median(ratios), 3),
                         "ratio_min": round(min(td) / min(ts), 3), "max_abs_err_vs_eager": err})
    return rows


def numbers_case(quick):
    """The cost of a new value of an int and a float input, per mode (section 3 of the doc)."""
    def step_fn(x, step, lr):
        return (x * lr + step).relu() * 0.5 + x

    torch.manual_seed(0)
    x = torch.randn(256, 1024)
    values = 8 if quick else 30
    rows = []
    for mode in ("per_value", "call_time"):
        if mode == "per_value":
            os.environ["DYNAMO_FUSED_NUMBERS_PER_VALUE"] = "1"
        else:
            os.environ.pop("DYNAMO_FUSED_NUMBERS_PER_VALUE", None)
        dynamo.reset()
        f = dynamo.compile(step_fn, backend="fused")
        for k in range(2):  # the static first compile, then the dynamic entry
            f(x, 5 + k, 0.1 + k * 0.01)
        c0 = dict(_C._codegen.counters())
        new_ms, err = [], 0.0
        for k in range(values):
            step, lr = 7 + k, 0.1 * 0.97**k
            t = time.perf_counter()
            got = f(x, step, lr)
            new_ms.append((time.perf_counter() - t) * 1e3)
            err = max(err, (got - step_fn(x, step, lr)).abs().max().item())
        c1 = dict(_C._codegen.counters())
        same_ms, eager_ms = [], []
        for _ in range(5 if quick else 15):
            for fn, out in ((f, same_ms), (step_fn, eager_ms)):
                t = time.perf_counter()
                for _ in range(10):
                    fn(x, 99, 0.05)
                out.append((time.perf_counter() - t) / 10 * 1e3)
        rows.append({"bench": "numbers", "mode": mode, "values": values,
                     "new_value_ms": round(statistics.median(new_ms), 3), "new_value_max_ms": round(max(new_ms), 3),
                     "lowerings": c1["lowerings"] - c0["lowerings"], "units_loaded": c1["units_loaded"] - c0["units_loaded"],
                     "same_value_ms": round(statistics.median(same_ms), 3), "eager_ms": round(statistics.median(eager_ms), 3),
                     "max_abs_err_vs_eager": err})
    os.environ.pop("DYNAMO_FUSED_NUMBERS_PER_VALUE", None)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--numbers", action="store_true", help="only section 3 (a new value of a Python number)")
    args = ap.parse_args()
    torch.set_num_threads(int(_THREADS))
    rows = []
    for r in numbers_case(args.quick):
        rows.append(r)
        print(json.dumps(r), flush=True)
    for name in ([] if args.numbers else args.workloads.split(",")):
        dynamo.reset()
        rows.append(new_size_cost(name, args.quick))
        print(json.dumps(rows[-1]), flush=True)
        for r in steady(name, args.quick):
            rows.append(r)
            print(json.dumps(r), flush=True)
    print("\n| numbers | values | new value: median ms (max) | lowerings | kernels loaded | same value ms | eager ms "
          "| max err vs eager |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["bench"] == "numbers":
            mode = "read at call time" if r["mode"] == "call_time" else "lowered per value (before)"
            print(f"| {mode} | {r['values']} | {r['new_value_ms']} ({r['new_value_max_ms']}) | {r['lowerings']} | "
                  f"{r['units_loaded']} | {r['same_value_ms']} | {r['eager_ms']} | {r['max_abs_err_vs_eager']:.1e} |")
    if args.numbers:
        return
    print("\n| workload | first size ms (kernels loaded) | second size ms (kernels loaded) | new size: dynamic ms (max) "
          "| kernels loaded | new size: static ms | kernels loaded |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if r["bench"] == "new_size":
            print(f"| {r['workload']} ({r['sizes']} sizes) | {r['first_size_ms']} ({r['first_size_units_loaded']}) | "
                  f"{r['second_size_ms']} ({r['second_size_units_loaded']}) | {r['dynamic_ms']} ({r['dynamic_max_ms']}) | "
                  f"{r['dynamic_units_loaded']} | {r['static_ms']} | {r['static_units_loaded']} "
                  f"({r['static_sizes']} sizes) |")
    print("\n| workload | size | parametrised ms | static ms | ratio (median of rounds) | ratio (min) | max err vs eager |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if r["bench"] == "steady":
            print(f"| {r['workload']} | {r['size']} | {r['dynamic_ms']} | {r['static_ms']} | {r['ratio']} | "
                  f"{r['ratio_min']} | {r['max_abs_err_vs_eager']:.1e} |")


if __name__ == "__main__":
    main()
