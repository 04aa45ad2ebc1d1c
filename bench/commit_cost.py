"""What committing every compile before its first call costs (issue #16; the figures are in
docs/trace-store.md, "What the compiler records"). Not a test: timings are never asserted.

    PYTHONPATH=build/python /usr/bin/python3 bench/commit_cost.py \\
        --models resnet18,vit_b_16,mobilenet_v2,densenet121,small50 --repeats 10

Tracing is on (a fresh store in a temporary directory). Per model and repeat, dynamo.reset()
and one compiled call (eval, no_grad, batch 1, 3x224x224, 1 torch thread), timed twice: once with
dynamo.recording.set_commit_each_compile(False) (the rows wait for the writer thread's batch, as
before issue #16) and once with True (one commit per compile before the code runs). Older builds
(the Python recorder) are driven through dynamo.recording.COMMIT_EACH_COMPILE instead. The two modes alternate in order from repeat to repeat. "small50" compiles 50 tiny
functions (x * i + 1) and calls each once: the case where a commit weighs most. Prints the median
wall and thread-CPU milliseconds of each mode and their ratio (after / before).

"realmodels" runs every case of tests/python/test_adversarial_realmodels.py (transformer blocks,
CNN blocks, training steps, decoding loops: small real-world modules, several compiles each
because of graph breaks and recompiles): per case, a fresh target and its driver's calls
(dynamo.compile, backend eager; the first calls compile), timed as above in both modes. It prints
the median over cases of each case's ratio (after / before, of its medians over repeats), and the
median compile of all cases: its own duration (the compiles table's duration_us, which does not
include recording) and what the commit adds per compile ((after - before) / compiles).

    PYTHONPATH=build/python /usr/bin/python3 bench/commit_cost.py --models realmodels --repeats 5
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

import dynamo
from dynamo import recording


def set_commit(on):
    if hasattr(recording, "set_commit_each_compile"):
        recording.set_commit_each_compile(on)
    else:  # a build before the C++ recorder
        recording.COMMIT_EACH_COMPILE = on


def small_functions(n=50):
    fns = []
    for i in range(n):
        ns = {}
        exec(f"def f{i}(x):\n    return x * {i} + 1\n", ns)
        fns.append(dynamo.optimize("eager")(ns[f"f{i}"]))
    return fns


def realmodel_cases():
    """(name, run) per case of test_adversarial_realmodels.py; run() builds a fresh target and
    drives it compiled, returning the number of compiles it made."""
    import random
    import warnings

    import numpy as np
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python")
    sys.path.insert(0, here)
    import test_adversarial_realmodels as rm

    def runner(case):
        def run():
            torch.manual_seed(case.seed)
            built = case.build()
            target, drive = built[0], built[1]
            f = dynamo.compile(target)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for i in range(case.calls):
                    random.seed(100 + i)
                    np.random.seed(100 + i)
                    torch.manual_seed(100 + i)
                    try:
                        drive(f, i)
                    except Exception:  # noqa: BLE001 - some cases raise on purpose
                        pass
        return run
    return [(c.name, runner(c)) for c in rm.CASES if c.name not in rm.XFAIL]


def timed(run, mode, compiled):
    set_commit(mode)
    dynamo.reset()
    n0 = len(compiled)
    w0, c0 = time.perf_counter(), time.thread_time()
    run()
    w, c = (time.perf_counter() - w0) * 1e3, (time.thread_time() - c0) * 1e3
    return w, c, len(compiled) - n0


def realmodels(repeats):
    compiled = []  # (total_ms) of every compile, in both modes
    listener = dynamo.add_compile_listener(lambda r: compiled.append(r["total_ms"]))
    ratios_w, ratios_c, added_us, own_ms = [], [], [], []
    for name, run in realmodel_cases():
        samples = {False: [], True: []}
        timed(run, True, compiled)  # warm-up (training cases need grad: no no_grad here)
        for r in range(repeats):
            for mode in ((False, True) if r % 2 == 0 else (True, False)):
                k = len(compiled)
                samples[mode].append(timed(run, mode, compiled))
                own_ms.extend(compiled[k:])
        med = {m: [statistics.median(s[i] for s in samples[m]) for i in (0, 1)] for m in samples}
        n = statistics.median(s[2] for s in samples[True])
        ratios_w.append(med[True][0] / med[False][0])
        ratios_c.append(med[True][1] / med[False][1])
        if n:
            added_us.append((med[True][1] - med[False][1]) * 1e3 / n)
        print(f"  {name}: {n:.0f} compiles, wall {med[False][0]:.2f} -> {med[True][0]:.2f} ms "
              f"(x{ratios_w[-1]:.3f}), thread CPU {med[False][1]:.2f} -> {med[True][1]:.2f} ms "
              f"(x{ratios_c[-1]:.3f})", flush=True)
    dynamo.remove_compile_listener(listener)
    print(f"realmodels: {len(ratios_w)} cases, median ratio wall x{statistics.median(ratios_w):.3f}, "
          f"thread CPU x{statistics.median(ratios_c):.3f}; median compile {statistics.median(own_ms):.3f} ms "
          f"(its own duration, before recording); the commit adds a median "
          f"{statistics.median(added_us):.0f} us of thread CPU per compile; median of {repeats} "
          f"interleaved repeats", flush=True)


def workload(name):
    if name == "small50":
        t = torch.ones(4)
        return lambda: [f(t) for f in small_functions()]
    import torchvision
    torch.manual_seed(0)
    model = dynamo.optimize("eager")(getattr(torchvision.models, name)().eval())
    x = torch.randn(1, 3, 224, 224)
    return lambda: model(x)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="resnet18")
    p.add_argument("--repeats", type=int, default=10)
    args = p.parse_args()
    torch.set_num_threads(1)
    recording.enable(os.path.join(tempfile.mkdtemp(), "t.db"))
    for name in args.models.split(","):
        if name == "realmodels":
            realmodels(args.repeats)
            continue
        run = workload(name)
        samples = {False: [], True: []}
        with torch.no_grad():
            run()  # warm-up: imports, first-time torch work
            for r in range(args.repeats):
                for mode in ((False, True) if r % 2 == 0 else (True, False)):
                    set_commit(mode)
                    dynamo.reset()
                    w0, c0 = time.perf_counter(), time.thread_time()
                    run()
                    samples[mode].append(((time.perf_counter() - w0) * 1e3,
                                          (time.thread_time() - c0) * 1e3))
        med = {m: [statistics.median(s[i] for s in samples[m]) for i in (0, 1)] for m in samples}
        print(f"{name}: wall {med[False][0]:.1f} -> {med[True][0]:.1f} ms "
              f"(ratio {med[True][0] / med[False][0]:.3f}); thread CPU {med[False][1]:.1f} -> "
              f"{med[True][1]:.1f} ms (ratio {med[True][1] / med[False][1]:.3f}); "
              f"median of {args.repeats} interleaved repeats", flush=True)
    set_commit(True)


if __name__ == "__main__":
    main()
