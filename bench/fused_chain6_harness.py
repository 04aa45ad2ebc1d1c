"""Why bench/fused.py and bench/fused_chain6_stream.py time the same chain6 kernel differently.

bench/fused.py times single calls, each fused call right after one eager call (~150 ms that
allocates, fills and frees six fresh 32 MiB tensors) and before one copy; fused_chain6_stream.py
times blocks of consecutive calls of one variant. This script times the same compiled chain6 and
the same-run anchor `dst.copy_(src)` as single calls after different preludes, interleaved in
rounds, so that each prelude's effect on the next timed call shows on its own:

    after_self   the call right after a call of the same function (the stream harness's case)
    after_eager  right after one eager chain6 call (bench/fused.py's order for the fused call)
    after_sleep  after 150 ms asleep (the OpenMP workers have gone to sleep; no cache traffic)
    after_dirty  right after writing 6 x 32 MiB of fresh eager-sized tensors, freed before the call
                 (the cache full of dirty lines and glibc's returned memory, no torch op of chain6)
    after_clean  right after reading a 64 MiB scratch tensor (the cache full of clean lines that
                 hold neither operand: what bench/fused.py --clean-cache puts before every call)

For each (prelude, timed function): wall median and minimum, and the process CPU time median
(user + system, all threads). The compiled result is checked against eager first (assert_close);
the timings are figures only (one JSON line).

    PYTHONPATH=build/python /usr/bin/python3 bench/fused_chain6_harness.py --threads 2 --rounds 15
"""
import argparse
import json
import os
import statistics
import time

import torch

import dynamo
from _timing import chain6, chain6_setup


def timed(fn):
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    x, copy_ = chain6_setup(args.threads)
    compiled = dynamo.optimize("fused")(chain6)
    torch.testing.assert_close(compiled(x), chain6(x), rtol=1e-4, atol=1e-5)
    timed_fns = {"fused": lambda: compiled(x), "copy": copy_}

    def dirty():
        ts = [torch.empty(8 << 20).fill_(1.0) for _ in range(6)]
        del ts

    scratch = torch.ones(16 << 20)
    preludes = {
        "after_self": None,  # the timed function itself
        "after_eager": lambda: chain6(x),
        "after_sleep": lambda: time.sleep(0.15),
        "after_dirty": dirty,
        "after_clean": lambda: scratch.sum(),
    }
    for fn in list(timed_fns.values()) + [p for p in preludes.values() if p]:
        fn(), fn()
    res = {(p, f): ([], []) for p in preludes for f in timed_fns}
    for _ in range(args.rounds):
        for p, pre in preludes.items():
            for f, fn in timed_fns.items():
                (pre or fn)()
                w, c = timed(fn)
                res[(p, f)][0].append(w)
                res[(p, f)][1].append(c)
    out = {"threads": args.threads, "rounds": args.rounds, "load_avg_1m": os.getloadavg()[0]}
    for (p, f), (w, c) in res.items():
        out[f"{p}/{f}"] = {"wall_ms": round(statistics.median(w) * 1e3, 3), "min_ms": round(min(w) * 1e3, 3),
                           "cpu_ms": round(statistics.median(c) * 1e3, 3)}
    for p in preludes:
        out[f"{p}/of_copy"] = round(out[f"{p}/copy"]["wall_ms"] / out[f"{p}/fused"]["wall_ms"], 3)
    out["load_avg_1m_end"] = os.getloadavg()[0]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
