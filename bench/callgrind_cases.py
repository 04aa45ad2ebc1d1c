"""The two workloads whose instruction counts docs/performance.md compares between builds: run
under callgrind with collection toggled on one function, they give counts that the load of a
shared machine does not move.

    PYTHONPATH=build/python valgrind --tool=callgrind --collect-atstart=no \\
        --toggle-collect='*compiledFunctionCall*' /usr/bin/python3 bench/callgrind_cases.py call
    PYTHONPATH=build/python valgrind --tool=callgrind --collect-atstart=no \\
        --toggle-collect='*Compiler::compile(*' /usr/bin/python3 bench/callgrind_cases.py resnet18
    (add --trace to record into a fresh trace store while compiling)

    call       2,001 calls of dynamo.compile(lambda a, b: a + b) on 4-element tensors: the per-call
               path, wrapper to result (the first call compiles)
    resnet18   torchvision's resnet18 (eval, no_grad, 1x3x64x64, 1 torch thread) compiled three
               times (dynamo.reset() before each)

Without valgrind it runs the same work and prints the wall time, as a smoke test.
"""
import argparse
import os
import sys
import tempfile
import time

import torch

import dynamo


def call_case():
    fast = dynamo.compile(lambda a, b: a + b)
    a, b = torch.ones(4), torch.ones(4)
    for _ in range(2001):
        fast(a, b)


def resnet18_case():
    import torchvision
    model = torchvision.models.resnet18().eval()
    x = torch.randn(1, 3, 64, 64)
    compiled = dynamo.optimize("eager")(model)
    with torch.no_grad():
        for _ in range(3):
            dynamo.reset()
            compiled(x)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("case", choices=["call", "resnet18"])
    p.add_argument("--trace", action="store_true", help="record into a fresh trace store")
    args = p.parse_args()
    torch.set_num_threads(1)
    if args.trace:
        dynamo.recording.enable(os.path.join(tempfile.mkdtemp(), "t.db"))
    start = time.perf_counter()
    call_case() if args.case == "call" else resnet18_case()
    print(f"{args.case}: {time.perf_counter() - start:.2f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
