"""chain6 (bench/fused.py) with ordinary against streaming stores, in one process, interleaved.

The emitter writes a one-dim float32 vector kernel of >= 4M points with non-temporal stores
(`vmovntps`) only under DYNAMO_FUSED_STREAM_STORES=1 (docs/codegen.md, "Streaming stores"). This
script compiles chain6 twice in one process, once with the variable unset and once with it set
(each compile reads it; the program cache's key holds it), checks that the two give the same bits,
then times both and the same-run anchor `dst.copy_(src)` (bench/fused.py's), interleaved in
blocks of calls: wall-clock medians and minima, and the process CPU time (user + system, all
threads) per call. `of_copy` is bench/fused.py's `fraction_of_copy_bw` (copy time / kernel time,
both moving 2 x 32 MiB by the bench's count). To decide the default, run it on an idle machine
with 2 threads and with 1 (docs/performance.md, "chain6: streaming stores"):

    PYTHONPATH=build/python /usr/bin/python3 bench/fused_chain6_stream.py --threads 2
    PYTHONPATH=build/python /usr/bin/python3 bench/fused_chain6_stream.py --threads 1

Nothing is asserted: figures only (one JSON line).
"""
import argparse
import json
import os
import statistics

import torch

import dynamo
from _timing import chain6, chain6_setup, interleaved_blocks


def chain6_stream(x):  # a code object of its own: Dynamo caches compiled code per code object
    return ((x * 2 + 1).relu() * 0.5 - 0.25).sigmoid()


def compiled_with(stream, x):
    """The compiled function and its first result; it compiles on that first call."""
    os.environ["DYNAMO_FUSED_STREAM_STORES"] = "1" if stream else "0"
    fn = dynamo.optimize("fused")(chain6_stream if stream else chain6)
    return fn, fn(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--blocks", type=int, default=9, help="interleaved blocks of calls per variant")
    ap.add_argument("--calls", type=int, default=10, help="calls per block")
    args = ap.parse_args()
    x, copy_ = chain6_setup(args.threads)
    (plain, a), (stream, b) = compiled_with(False, x), compiled_with(True, x)
    os.environ.pop("DYNAMO_FUSED_STREAM_STORES")
    assert torch.equal(a.view(torch.int32), b.view(torch.int32)), "streaming stores changed the result"
    variants = {"plain": lambda: plain(x), "stream": lambda: stream(x), "copy": copy_}
    timed = interleaved_blocks(variants, args.blocks, args.calls)
    med = {k: statistics.median(walls) for k, (walls, _) in timed.items()}
    mn = {k: min(walls) for k, (walls, _) in timed.items()}
    cpu = {k: statistics.median(cpus) for k, (_, cpus) in timed.items()}
    out = {"threads": args.threads, "blocks": args.blocks, "calls": args.calls, "load_avg_1m": os.getloadavg()[0]}
    for k in ("plain", "stream", "copy"):
        out[k] = {"wall_ms": round(med[k] * 1e3, 3), "min_ms": round(mn[k] * 1e3, 3), "cpu_ms": round(cpu[k] * 1e3, 3)}
    for k in ("plain", "stream"):
        out[k]["of_copy"] = round(med["copy"] / med[k], 3)
        out[k]["of_copy_minima"] = round(mn["copy"] / mn[k], 3)
        out[k]["copy_over_cpu"] = round(cpu["copy"] / cpu[k], 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
