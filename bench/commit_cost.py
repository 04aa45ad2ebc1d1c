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
"""
import argparse
import os
import statistics
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
