"""The guard evaluation of one cache entry, measured alone (used by bench/overhead.py and
bench/dynamic_shapes.py).

    time_guards(fn, args)   dynamo._C._guard_bench.run: the entry's GuardCheck::check (the call the
                            frame hook makes on every call) evaluated in a C++ loop for fn(*args);
                            min and median ns per evaluation over repeats
    count_guards(...)       under callgrind only: instructions per evaluation (deterministic: the
                            machine's load does not move it)
    callgrind_counts(script, args)
                            runs `script args --guard-count-child` under valgrind --tool=callgrind
                            (instrumentation off except inside the counted loops) and returns
                            {label: instructions per check}

A callgrind run takes a few minutes (importing torch under valgrind), so the benches do it only
with --callgrind.

Run as a script, it lists the guards of the cache entries of a few modules compiled alone (the
MLP of bench/overhead.py on (4, 8, 16), torch.nn.Conv2d, torch.nn.BatchNorm2d) by kind, and times
each entry's check; with --callgrind also instructions per check (docs/performance.md, "Which
guards the MLP's 860 ns are"):

    PYTHONPATH=build/python /usr/bin/python3 bench/guard_eval.py [--callgrind]
"""
import argparse
import collections
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

from dynamo import _C

COUNT_CHECKS = 1000  # checks per callgrind count


def time_guards(fn, args, n=20_000, repeats=9, entry=0):
    """{"min_ns", "median_ns"} per guard evaluation of fn's cache entry `entry` for fn(*args)."""
    r = _C._guard_bench.run(fn, tuple(args), n, repeats, entry)
    if not r["passed"]:
        raise SystemExit(f"guard bench: the entry's guard fails for these args ({fn})")
    return {"min_ns": min(r["ns"]), "median_ns": statistics.median(r["ns"])}


def count_guards(fn, args, label, entry=0):
    """Under callgrind: counts COUNT_CHECKS evaluations into a dump named `label`."""
    return _C._guard_bench.count(fn, tuple(args), COUNT_CHECKS, label, entry)


def callgrind_counts(script, args):
    """{label: instructions per check} from a child run of `script` under callgrind."""
    out = tempfile.mkdtemp(prefix="guard-cg-")
    cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no",
           f"--callgrind-out-file={out}/cg.out", sys.executable, script, *args, "--guard-count-child"]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=dict(os.environ))
    if proc.returncode != 0:
        raise SystemExit(f"callgrind run failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    counts = {}
    for path in glob.glob(os.path.join(out, "cg.out.*")):
        text = open(path).read()
        label = re.search(r"^desc: Trigger: Client Request: (.*)$", text, re.M)
        total = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
        if label and total:
            counts[label.group(1)] = int(total.group(1)) / COUNT_CHECKS
    return counts


def ratio(a, b):
    return round(a / b, 3) if a and b else None


def module_cases():
    """(label, module, input): modules whose entries the script lists, each compiled alone."""
    import torch
    from overhead import MLP
    torch.manual_seed(0)
    return [("mlp3_bt_static", MLP().eval(), torch.randn(4, 8, 16)),
            ("conv2d", torch.nn.Conv2d(3, 4, 3).eval(), torch.randn(1, 3, 8, 8)),
            ("batchnorm2d", torch.nn.BatchNorm2d(4).eval(), torch.randn(1, 4, 8, 8))]


def compile_alone(module, x):
    """The guards (listener records) of `module`'s one cache entry after two calls on x."""
    import torch
    import dynamo
    dynamo.reset()
    records = []
    listener = dynamo.add_compile_listener(records.append)
    try:
        with torch.no_grad():
            fn = dynamo.optimize("eager")(module)
            fn(x), fn(x)
    finally:
        dynamo.remove_compile_listener(listener)
    return records[-1]["guards"]


def main():
    import torch
    ap = argparse.ArgumentParser(description="guards of a few modules' cache entries: kinds, ns, instructions")
    ap.add_argument("--callgrind", action="store_true", help="also instructions per check (minutes)")
    ap.add_argument("--guard-count-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.guard_count_child:
        for label, module, x in module_cases():
            compile_alone(module, x)
            with torch.no_grad():
                if not count_guards(module.forward, (x,), label):
                    raise SystemExit("--guard-count-child: not running under callgrind")
        return
    counts = callgrind_counts(__file__, []) if args.callgrind else {}
    for label, module, x in module_cases():
        guards = compile_alone(module, x)
        with torch.no_grad():
            ns = [time_guards(module.forward, (x,), n=10_000, repeats=5) for _ in range(3)]
        print(json.dumps({"case": label, "guards": len(guards),
                          "kinds": dict(collections.Counter(g["kind"] for g in guards)),
                          "attribute_guards": [g["source"] for g in guards if g["kind"] == "EQUALS_MATCH"],
                          "ns_min": round(min(t["min_ns"] for t in ns), 1),
                          "ns_median": round(statistics.median(t["median_ns"] for t in ns), 1),
                          "instructions": counts.get(label), "load_avg_1m": round(os.getloadavg()[0], 2)}))


if __name__ == "__main__":
    main()
