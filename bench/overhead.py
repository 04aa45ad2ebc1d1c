"""Per-call overhead of a compiled tiny function and a small MLP, against the uncompiled call.

Run from the repository root (see docs/performance.md for the figures and the machine):

    PYTHONPATH=build/python /usr/bin/python3 bench/overhead.py            # full run, ~1 min
    PYTHONPATH=build/python /usr/bin/python3 bench/overhead.py --quick    # smoke run, a few s

Each case is timed as a plain Python loop of N calls, 15 repeats, the variants of a case
interleaved inside each repeat so that machine drift hits them alike. The clock is the thread's
CPU time (time.thread_time_ns; --wall for the wall clock), so other jobs on a shared machine
mostly drop out; torch runs on 1 thread (--threads). Variants:

    eager     the uncompiled call: f(x, y) / module(x)
    compiled  the user-facing compiled call: dynamo.compile(f)(x, y) / dynamo.compile(module)(x)
    hooked    the captured function called inside the compile context (the loop's own frame is
              skipped): f(x, y) / module.forward(x), i.e. compiled minus the Python wrapper
              (`with ctx:`, _Context.__enter__/__exit__, and for modules OptimizedModule (nn.Module.__call__ + the C wrapper)
              plus nn.Module.__call__)
    graph     the CompiledGraph object taken from the cache entry's transformed code, called
              directly: input fetching, GraphRunner, output rebuilding; no hook, no guards
    op        (add only) operator.add(x, y): the graph's one op with nothing around it
    eager_forward  (modules only) module.forward(x) uncompiled: eager without nn.Module.__call__

so that  wrapper = compiled - hooked,  hook + guards + transformed frame = hooked - graph,
graph machinery (fetch, runner, rebuild) = graph - op,  nn.Module.__call__ = eager - eager_forward
(the breakdown is taken from the minima over repeats; the headline figures are medians).

The mlp3_bt rows also carry the guard evaluation alone (bench/guard_eval.py): both entries'
GuardCheck::check in a C++ loop, interleaved (guard_ns_min / guard_ns_median), and with --callgrind
the instructions per check (guard_instr, independent of the machine's load); the dynamic row has
the ratios dynamic / static (guard_ratio_*; goal <= 1.2).

Output: one JSON line per case (prefix-free, one object per line), then a human table.
The goal (issue): compiled - eager <= 1 us per call. Timings are never asserted.
"""
import argparse
import dis
import gc
import json
import operator
import platform
import statistics
import sys
import time

import torch

import dynamo
import guard_eval
from dynamo import _C


# --- timing loops -------------------------------------------------------------------------------
# One loop per arity, so no *args unpacking is timed. Their frames are skipped by the hook, so the
# "hooked" variant can run them inside the compile context without compiling the loop itself.

# The clock: the thread's CPU time by default (time spent descheduled, e.g. while other jobs share
# the machine, does not count; torch runs these ops on the calling thread with 1 thread), or wall.
_clock = time.thread_time_ns


def _loop1(fn, a, n):
    t0 = _clock()
    for _ in range(n):
        fn(a)
    return (_clock() - t0) / n / 1000.0  # us per call


def _loop2(fn, a, b, n):
    t0 = _clock()
    for _ in range(n):
        fn(a, b)
    return (_clock() - t0) / n / 1000.0


_C._compiler.disable_code(_loop1.__code__)
_C._compiler.disable_code(_loop2.__code__)


def _time(fn, args, n, ctx=None):
    loop = _loop1 if len(args) == 1 else _loop2
    gc.disable()
    try:
        if ctx is None:
            return loop(fn, *args, n)
        with ctx:
            return loop(fn, *args, n)
    finally:
        gc.enable()


# --- workloads ----------------------------------------------------------------------------------

def add(x, y):
    return x + y


class MLP(torch.nn.Module):
    """Three Linear(16, 16) + relu layers."""

    def __init__(self, width=16):
        super().__init__()
        self.fc1 = torch.nn.Linear(width, width)
        self.fc2 = torch.nn.Linear(width, width)
        self.fc3 = torch.nn.Linear(width, width)

    def forward(self, x):
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return torch.relu(self.fc3(x))


def _graph_callable(code, bound):
    """(CompiledGraph, args) from a transformed code object of the form
    LOAD_CONST <CompiledGraph>; LOAD_FAST a; LOAD_FAST b; ...; CALL; RETURN_VALUE,
    or None when the code has another shape (then the "graph" variant is skipped)."""
    graph, names = None, []
    for ins in dis.get_instructions(code):
        if ins.opname == "LOAD_CONST" and isinstance(ins.argval, _C.CompiledGraph):
            graph, names = ins.argval, []
        elif graph is not None and ins.opname == "LOAD_FAST":
            names.append(ins.argval)
        elif graph is not None and ins.opname in ("PRECALL", "CALL", "CALL_FUNCTION"):
            break
        elif graph is not None and ins.opname not in ("PUSH_NULL", "NOP"):
            return None
    if graph is None or len(names) not in (1, 2) or not all(n in bound for n in names):
        return None
    return graph, tuple(bound[n] for n in names)


class Case:
    def __init__(self, name, fn, hook_fn, args, code, bound, calls, grad, extra):
        self.name, self.fn, self.hook_fn, self.args = name, fn, hook_fn, args
        self.code, self.bound, self.calls, self.grad = code, bound, calls, grad
        self.extra = extra  # {variant: callable} timed uncompiled with the same args


def _cases(quick, calls=None):
    torch.manual_seed(0)
    tiny_n, mlp_n = (20_000, 5_000) if quick else (40_000, 10_000)  # calls per repeat
    if calls:
        tiny_n = mlp_n = calls
    x, y = torch.randn(1), torch.randn(1)
    mlp = MLP().eval()
    inp = torch.randn(1, 16)
    fwd = MLP.forward.__code__
    inp3, inp3d = torch.randn(4, 8, 16), torch.randn(4, 8, 16)
    dynamo.mark_dynamic(inp3d, 0)
    dynamo.mark_dynamic(inp3d, 1)
    return [
        Case("add_1elem", add, add, (x, y), add.__code__, {"x": x, "y": y}, tiny_n, grad=True,
             extra={"op": operator.add}),
        Case("mlp3_no_grad", mlp, mlp.forward, (inp,), fwd, {"self": mlp, "x": inp}, mlp_n,
             grad=False, extra={"eager_forward": mlp.forward}),
        Case("mlp3_grad", mlp, mlp.forward, (inp,), fwd, {"self": mlp, "x": inp}, mlp_n,
             grad=True, extra={"eager_forward": mlp.forward}),
        # Dynamic shapes (docs/dynamic-shapes.md): the same MLP on a (batch, seq, 16) input,
        # static, and with batch and sequence marked dynamic (TENSOR_MATCH with a dynamic mask
        # plus the shape guards). Goal: dynamic guards cost at most 1.2x the static ones.
        Case("mlp3_bt_static", mlp, mlp.forward, (inp3,), fwd, {"self": mlp, "x": inp3}, mlp_n,
             grad=False, extra={"eager_forward": mlp.forward}),
        Case("mlp3_bt_dynamic", mlp, mlp.forward, (inp3d,), fwd, {"self": mlp, "x": inp3d}, mlp_n,
             grad=False, extra={"eager_forward": mlp.forward}),
    ]


def run_case(case, repeats):
    dynamo.reset()
    records = []
    listener = dynamo.add_compile_listener(records.append)
    try:
        with torch.set_grad_enabled(case.grad):
            ctx = dynamo.optimize("eager")
            compiled = ctx(case.fn)  # same as dynamo.compile(fn): one handle shared with "hooked"
            expected = case.fn(*case.args)
            got = compiled(*case.args)
            if not torch.equal(expected, got):
                raise SystemExit(f"{case.name}: compiled result differs from eager")
            entries = _C._compiler.cache_entries(case.code)
            if len(entries) != 1:
                raise SystemExit(f"{case.name}: expected one cache entry, got {len(entries)}")
            direct = _graph_callable(entries[0]["code"], case.bound)
            variants = {"eager": (case.fn, case.args, None),
                        "compiled": (compiled, case.args, None),
                        "hooked": (case.hook_fn, case.args, ctx)}
            if direct is not None:
                variants["graph"] = (direct[0], direct[1], None)
            for k, fn in case.extra.items():
                variants[k] = (fn, case.args, None)
            for fn, args, c in variants.values():  # warm up every path
                _time(fn, args, max(case.calls // 20, 100), c)
            samples = {k: [] for k in variants}
            for _ in range(repeats):
                for k, (fn, args, c) in variants.items():
                    samples[k].append(_time(fn, args, case.calls, c))
            hits = _C._compiler.cache_entries(case.code)[0]["hits"]
    finally:
        dynamo.remove_compile_listener(listener)
    med = {k: statistics.median(v) for k, v in samples.items()}
    low = {k: min(v) for k, v in samples.items()}
    added = statistics.median(c - e for c, e in zip(samples["compiled"], samples["eager"]))

    def r(v):
        return None if v is None else round(v, 4)

    def diff(a, b):  # the breakdown uses the minima: differences of small noisy medians flip sign
        return low[a] - low[b] if a in low and b in low else None
    row = {
        "bench": "overhead", "case": case.name, "calls": case.calls, "repeats": repeats,
        "grad": case.grad, "clock": "wall" if _clock is time.perf_counter_ns else "thread_cpu",
        "eager_us": r(med["eager"]), "compiled_us": r(med["compiled"]),
        "added_us": r(added), "ratio": r(med["compiled"] / med["eager"]),
        "eager_min_us": r(low["eager"]), "compiled_min_us": r(low["compiled"]),
        "added_min_us": r(diff("compiled", "eager")),
        "hooked_us": r(med["hooked"]), "graph_us": r(med.get("graph")),
        "op_us": r(med.get("op")), "eager_forward_us": r(med.get("eager_forward")),
        "wrapper_us": r(diff("compiled", "hooked")),
        "hook_guards_us": r(diff("hooked", "graph")),
        "graph_machinery_us": r(diff("graph", "op")),
        "module_call_us": r(diff("eager", "eager_forward")),
        "compiles": len(records), "guards": len(records[0]["guards"]) if records else 0,
        "cache_hits": hits, "goal_added_us": 1.0,
    }
    return row


# --- the guard evaluation alone (bench/guard_eval.py) ---------------------------------------------

def guard_pair_setup():
    """The MLP's forward compiled twice on the same code: static (dynamic=False) and with batch and
    sequence marked dynamic. Returns {variant: (bound forward, args, entry index)}."""
    torch.manual_seed(0)
    dynamo.reset()
    mlp = MLP().eval()
    inp3, inp3d = torch.randn(4, 8, 16), torch.randn(4, 8, 16)
    dynamo.mark_dynamic(inp3d, 0)
    dynamo.mark_dynamic(inp3d, 1)
    with torch.no_grad():
        dynamo.compile(mlp, dynamic=False)(inp3)
        dynamo.compile(mlp)(inp3d)  # another compiler: its own entry on the same code
    ids = [e["id"] for e in _C._compiler.cache_entries(MLP.forward.__code__)]
    if len(ids) != 2:
        raise SystemExit(f"guard pair: expected two cache entries, got {len(ids)}")
    dyn = ids.index(max(ids))  # the later compile
    return {"static": (mlp.forward, (inp3,), 1 - dyn), "dynamic": (mlp.forward, (inp3d,), dyn)}


def guard_pair(quick, counts):
    """min / median ns per guard evaluation of each entry (interleaved), and the callgrind counts."""
    entries = guard_pair_setup()
    ns = {k: [] for k in entries}
    with torch.no_grad():
        for _ in range(3 if quick else 5):
            for k, (fn, args, entry) in entries.items():
                t = guard_eval.time_guards(fn, args, n=2_000 if quick else 10_000, repeats=3, entry=entry)
                ns[k] += [t["min_ns"], t["median_ns"]]
    out = {}
    for k in entries:
        out[k] = {"guard_ns_min": round(min(ns[k]), 1), "guard_ns_median": round(statistics.median(ns[k]), 1),
                  "guard_instr": (counts or {}).get(f"mlp3_bt/{k}")}
    for key in ("guard_ns_min", "guard_ns_median", "guard_instr"):
        out["dynamic"][key.replace("guard_", "guard_ratio_")] = guard_eval.ratio(out["dynamic"][key], out["static"][key])
    return out


def guard_count_child():
    """Under callgrind (guard_eval.callgrind_counts): count the MLP's static and dynamic guards."""
    with torch.no_grad():
        for k, (fn, args, entry) in guard_pair_setup().items():
            if not guard_eval.count_guards(fn, args, f"mlp3_bt/{k}", entry):
                raise SystemExit("--guard-count-child: not running under callgrind")


def environment():
    return {
        "bench": "environment", "python": platform.python_version(), "torch": torch.__version__,
        "dynamo": getattr(_C, "__version__", "?"), "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(), "processor": platform.processor() or platform.machine(),
    }


_COLUMNS = [("eager", "eager_us"), ("compiled", "compiled_us"), ("added", "added_us"),
            ("ratio", "ratio"), ("hooked", "hooked_us"), ("graph", "graph_us"), ("op", "op_us"),
            ("eager_fwd", "eager_forward_us"), ("added_min", "added_min_us"),
            ("wrapper", "wrapper_us"), ("hook+grd", "hook_guards_us"),
            ("graph-op", "graph_machinery_us"), ("mod_call", "module_call_us"), ("guards", "guards")]


def table(rows):
    """The rows as a plain-text table (microseconds per call)."""
    lines = ["per call, microseconds. eager..eager_fwd: median of repeats (added: median of "
             "the paired differences); added_min and the columns after it: from the minima",
             f"{'case':<14}" + "".join(f"{title:>10}" for title, _ in _COLUMNS)]
    for row in rows:
        cells = []
        for _, key in _COLUMNS:
            v = row[key]
            cells.append("-" if v is None else str(v) if isinstance(v, int) else f"{v:.3f}")
        lines.append(f"{row['case']:<14}" + "".join(f"{c:>10}" for c in cells))
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="few calls and repeats: a smoke run")
    p.add_argument("--repeats", type=int, default=None,
                   help="repeats per variant (default 15, quick 2)")
    p.add_argument("--wall", action="store_true",
                   help="time with the wall clock instead of the thread's CPU time")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    p.add_argument("--case", action="append", help="run only this case (repeatable)")
    p.add_argument("--calls", type=int, default=None,
                   help="calls per repeat of every case (default 40000 / 10000, quick 20000 / 5000; "
                        "the smoke test's few hundred check the output, not the figures)")
    p.add_argument("--callgrind", action="store_true",
                   help="also count instructions per guard check (mlp3_bt cases) under callgrind (minutes)")
    p.add_argument("--guard-count-child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.guard_count_child:
        return guard_count_child()
    counts = guard_eval.callgrind_counts(__file__, []) if args.callgrind else None
    repeats = args.repeats or (2 if args.quick else 15)
    global _clock
    if args.wall:
        _clock = time.perf_counter_ns
    print(json.dumps(environment()), flush=True)
    rows = []
    cases = [c for c in _cases(args.quick, args.calls) if not args.case or c.name in args.case]
    pair = guard_pair(args.quick, counts) if any(c.name.startswith("mlp3_bt") for c in cases) else None
    for case in cases:
        rows.append(run_case(case, repeats))
        if pair and case.name.startswith("mlp3_bt"):
            rows[-1].update(pair["dynamic" if case.name.endswith("dynamic") else "static"])
        print(json.dumps(rows[-1]), flush=True)
    print(table(rows))
    if pair:
        s, d = pair["static"], pair["dynamic"]
        print(f"guard evaluation alone (mlp3_bt, C++ loop over the entry's check): static {s['guard_ns_min']} / "
              f"{s['guard_ns_median']} ns, dynamic {d['guard_ns_min']} / {d['guard_ns_median']} ns (min / median), "
              f"ratio {d['guard_ratio_ns_min']} / {d['guard_ratio_ns_median']}; instructions per check: static "
              f"{s['guard_instr']}, dynamic {d['guard_instr']}, ratio {d['guard_ratio_instr']} (goal <= 1.2)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
