"""What committing every compile before its first call costs (issue #16; the figures are in
docs/trace-store.md, "What the compiler records"). Not a test: timings are never asserted.

    PYTHONPATH=build/python /usr/bin/python3 bench/commit_cost.py \\
        --models resnet18,vit_b_16,mobilenet_v2,densenet121,small50 --repeats 10

Tracing is on (a fresh store in a temporary directory). Per model and repeat, dynamo.reset()
and one compiled call (eval, no_grad, batch 1, 3x224x224, 1 torch thread), timed in three modes
of dynamo.recording.set_commit_each_compile: False ("batch": the rows wait for the writer
thread's batch, as before issue #16: the baseline), "commit" (an SQLite commit per compile before
its code runs) and True ("journal": one write() per compile to the row journal, the default).
The order of the modes rotates from repeat to repeat. "small50" compiles 50 tiny functions
(x * i + 1) and calls each once: the case where securing the rows weighs most. Prints the median
wall and thread-CPU milliseconds of each mode and the ratios to "batch".

"realmodels" runs every case of tests/python/test_adversarial_realmodels.py and
test_adversarial_realmodels_loops.py (transformer blocks,
CNN blocks, training steps, decoding loops: small real-world modules, several compiles each
because of graph breaks and recompiles): per case, a fresh target and its driver's calls
(dynamo.compile, backend eager; the first calls compile), timed as above in both modes. It prints
the median over cases of each case's ratio (mode / batch, of its medians over repeats), and the
median compile of all cases: its own duration (the listener's total_ms, which does not include
recording) and what each mode adds per compile ((mode - batch) / compiles, thread CPU).

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


MODES = {"batch": False, "commit": "commit", "journal": True}


def set_commit(mode):
    recording.set_commit_each_compile(MODES[mode])


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
    import test_adversarial_realmodels_loops as rm_loops

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
    return [(c.name, runner(c)) for m in (rm, rm_loops) for c in m.CASES if c.name not in m.XFAIL]


def timed(run, mode, compiled):
    set_commit(mode)
    dynamo.reset()
    n0 = len(compiled)
    w0, c0 = time.perf_counter(), time.thread_time()
    run()
    w, c = (time.perf_counter() - w0) * 1e3, (time.thread_time() - c0) * 1e3
    return w, c, len(compiled) - n0


def rotations(repeats):
    names = list(MODES)
    for r in range(repeats):
        k = r % len(names)
        yield names[k:] + names[:k]


def realmodels(repeats):
    compiled = []  # (total_ms) of every compile, in every mode
    listener = dynamo.add_compile_listener(lambda r: compiled.append(r["total_ms"]))
    ratios = {m: ([], []) for m in MODES}  # mode -> (wall ratios, CPU ratios), one per case
    added_us = {m: [] for m in MODES}
    own_ms = []
    for name, run in realmodel_cases():
        samples = {m: [] for m in MODES}
        timed(run, "journal", compiled)  # warm-up (training cases need grad: no no_grad here)
        for order in rotations(repeats):
            for mode in order:
                k = len(compiled)
                samples[mode].append(timed(run, mode, compiled))
                own_ms.extend(compiled[k:])
        med = {m: [statistics.median(s[i] for s in samples[m]) for i in (0, 1)] for m in samples}
        n = statistics.median(s[2] for s in samples["batch"])
        line = f"  {name}: {n:.0f} compiles, batch wall {med['batch'][0]:.2f} ms"
        for m in ("commit", "journal"):
            ratios[m][0].append(med[m][0] / med["batch"][0])
            ratios[m][1].append(med[m][1] / med["batch"][1])
            if n:
                added_us[m].append((med[m][1] - med["batch"][1]) * 1e3 / n)
            line += f"; {m} wall x{ratios[m][0][-1]:.3f}, CPU x{ratios[m][1][-1]:.3f}"
        print(line, flush=True)
    dynamo.remove_compile_listener(listener)
    print(f"realmodels: {len(ratios['commit'][0])} cases; median "
          f"compile {statistics.median(own_ms):.3f} ms (its own duration, before recording); "
          f"median of {repeats} interleaved repeats", flush=True)
    for m in ("commit", "journal"):
        wall = statistics.median(ratios[m][0])
        print(f"  {m} / batch: median ratio over cases: wall x{wall:.3f}, "
              f"thread CPU x{statistics.median(ratios[m][1]):.3f}; adds a median "
              f"{statistics.median(added_us[m]):.0f} us of thread CPU per compile", flush=True)


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
        samples = {m: [] for m in MODES}
        with torch.no_grad():
            run()  # warm-up: imports, first-time torch work
            for order in rotations(args.repeats):
                for mode in order:
                    set_commit(mode)
                    dynamo.reset()
                    w0, c0 = time.perf_counter(), time.thread_time()
                    run()
                    samples[mode].append(((time.perf_counter() - w0) * 1e3,
                                          (time.thread_time() - c0) * 1e3))
        med = {m: [statistics.median(s[i] for s in samples[m]) for i in (0, 1)] for m in samples}
        b = med["batch"]
        print(f"{name}: batch wall {b[0]:.1f} ms, CPU {b[1]:.1f} ms; " + "; ".join(
            f"{m} wall {med[m][0]:.1f} ms (x{med[m][0] / b[0]:.3f}), CPU {med[m][1]:.1f} ms "
            f"(x{med[m][1] / b[1]:.3f})" for m in ("commit", "journal")) +
            f"; median of {args.repeats} rotated repeats", flush=True)
    set_commit("journal")


if __name__ == "__main__":
    main()
