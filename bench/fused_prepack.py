"""CNN inference with oneDNN's prepacked convolutions (ReLU as post-op) against at::convolution.

Run from the repository root (docs/codegen.md has the figures and the load):

    PYTHONPATH=build/python /usr/bin/python3 bench/fused_prepack.py                # ~2 min
    PYTHONPATH=build/python /usr/bin/python3 bench/fused_prepack.py --rounds 20 --cases resnet18_b8

bench/fused.py's resnet18_b8 and mobilenet_v2_b8 cases (eval, batch 8, no_grad), three variants
in one process: eager; fused (conv steps through mkldnn_prepacked::conv2d_run, a following ReLU
its post-op); fused compiled with DYNAMO_FUSED_NO_PREPACK=1 (conv steps through
at::convolution with the folded channels-last weight, ReLUs applied after it: the conv steps as
they were before). Each round runs the three back to back, in an order that rotates per round;
reported: the median per-round ratio of wall time and of process CPU time with a bootstrap 95%
interval (bench/fused_train.py's method). Nothing is asserted: figures only.
"""
import argparse
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fused as fused_bench  # noqa: E402
import fused_train  # noqa: E402

import dynamo  # noqa: E402

CASES = ("resnet18_b8", "mobilenet_v2_b8")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--cases", default=",".join(CASES))
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count())
    torch.set_grad_enabled(False)
    for name in args.cases.split(","):
        fn, make = fused_bench.CASES[name]
        torch.manual_seed(0)
        inputs = make()
        packed = dynamo.optimize("fused")(fn)
        packed(*inputs)
        os.environ["DYNAMO_FUSED_NO_PREPACK"] = "1"
        try:
            plain = dynamo.optimize("fused")(lambda *a: fn(*a))  # a second function: compiled again
            plain(*inputs)
        finally:
            del os.environ["DYNAMO_FUSED_NO_PREPACK"]
        want = fn(*inputs)
        for got in (packed(*inputs), plain(*inputs)):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())
        variants = [("eager", fn), ("prepacked", packed), ("at_convolution", plain)]
        times = {k: [] for k, _ in variants}
        for i in range(args.rounds):
            order = variants[i % 3:] + variants[:i % 3]
            for k, f in order:
                times[k].append(fused_train._clock(f, *inputs))
        row = {"case": name, "rounds": args.rounds, "threads": torch.get_num_threads(),
               "load_avg_1m": round(os.getloadavg()[0], 1)}
        for k, _ in variants:
            row[k + "_wall_ms"] = round(statistics.median(t[0] for t in times[k]) * 1e3, 1)
        for num, den in (("eager", "prepacked"), ("eager", "at_convolution"), ("at_convolution", "prepacked")):
            for j, clock in ((0, "wall"), (1, "cpu")):
                r = [a[j] / b[j] for a, b in zip(times[num], times[den]) if b[j] > 0]
                lo, hi = fused_train.bootstrap_ci(r)
                row[f"{num}/{den}_{clock}"] = [round(statistics.median(r), 3), round(lo, 3), round(hi, 3)]
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
