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
"""
import glob
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
