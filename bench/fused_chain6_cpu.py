"""chain6 (bench/fused.py) against the same-run copy anchor in process CPU time, for loaded machines.

On the shared 2-core machine the wall time of an 8M-element kernel moves by 10-30x with the other
jobs, so bench/fused.py's `of copy` column says little there. This script times the fused chain6
and `dst.copy_(src)` (the same anchor) by the CPU time of the process (`resource.getrusage`, user
+ system, all threads) over blocks of calls, interleaved, and prints the ratio copy / fused, which
is bench/fused.py's `fraction_of_copy_bw` measured in CPU time instead of wall time. With
`--threads 1` it is the work each needs; to compare two builds, run it once per build's PYTHONPATH,
alternating (docs/performance.md, "chain6: dyn_exp without selects"):

    PYTHONPATH=build/python /usr/bin/python3 bench/fused_chain6_cpu.py --threads 1

Nothing is asserted: figures only (one JSON line).
"""
import argparse
import json
import os
import statistics

import torch

import dynamo
from _timing import chain6, chain6_setup, interleaved_blocks


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--blocks", type=int, default=7, help="interleaved blocks of calls per variant")
    ap.add_argument("--calls", type=int, default=20, help="calls per block")
    args = ap.parse_args()
    x, copy_ = chain6_setup(args.threads)
    compiled = dynamo.optimize("fused")(chain6)
    torch.testing.assert_close(compiled(x), chain6(x), rtol=1e-4, atol=1e-5)
    timed = interleaved_blocks({"fused": lambda: compiled(x), "copy": copy_},
                               args.blocks, args.calls)
    fused, copy = timed["fused"][1], timed["copy"][1]
    f, c = statistics.median(fused), statistics.median(copy)
    print(json.dumps({
        "threads": args.threads, "blocks": args.blocks, "calls": args.calls,
        "load_avg_1m": os.getloadavg()[0],
        "fused_cpu_ms": round(f * 1e3, 3), "copy_cpu_ms": round(c * 1e3, 3),
        "copy_over_fused": round(c / f, 3), "copy_over_fused_minima": round(min(copy) / min(fused), 3),
    }))


if __name__ == "__main__":
    main()
