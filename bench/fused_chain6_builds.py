"""chain6 of two builds against the same-run copy anchor, alternating child processes: one command.

    PYTHONPATH=build/python /usr/bin/python3 bench/fused_chain6_builds.py \\
        --old ../main/build/python --new build/python --threads 2 --rounds 6

Each round runs bench/fused_chain6_stream.py once per build (the order alternates from round to
round, so drift hits both alike; the child compiles chain6, checks it against eager, then times
the kernel with ordinary stores, the kernel with streaming stores and `dst.copy_(src)` interleaved
in blocks of calls). The parent prints, per build, the medians over rounds of the ordinary-store
kernel's wall time, its `of_copy` (copy wall / kernel wall, bench/fused.py's fraction of copy
bandwidth), the copy's wall time and the CPU time per call (process, all threads), and new / old.
Nothing is asserted: figures only (one JSON line).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def child(pythonpath, threads):
    env = dict(os.environ, PYTHONPATH=pythonpath)
    out = subprocess.run([sys.executable, os.path.join(HERE, "fused_chain6_stream.py"), "--threads", str(threads)],
                         env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old", required=True, help="the old build's python directory (PYTHONPATH)")
    ap.add_argument("--new", required=True, help="the new build's python directory (PYTHONPATH)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    runs = {"old": [], "new": []}
    for r in range(args.rounds):
        for name in (("old", "new") if r % 2 == 0 else ("new", "old")):
            runs[name].append(child(os.path.abspath(getattr(args, name)), args.threads))
    out = {"threads": args.threads, "rounds": args.rounds, "load_avg_1m": os.getloadavg()[0]}
    for name, rs in runs.items():
        out[name] = {
            "fused_wall_ms": round(statistics.median(x["plain"]["wall_ms"] for x in rs), 3),
            "of_copy": round(statistics.median(x["plain"]["of_copy"] for x in rs), 3),
            "of_copy_minima": round(statistics.median(x["plain"]["of_copy_minima"] for x in rs), 3),
            "copy_wall_ms": round(statistics.median(x["copy"]["wall_ms"] for x in rs), 3),
            "fused_cpu_ms": round(statistics.median(x["plain"]["cpu_ms"] for x in rs), 3),
            "copy_over_cpu": round(statistics.median(x["plain"]["copy_over_cpu"] for x in rs), 3),
        }
    out["new_over_old_of_copy"] = round(out["new"]["of_copy"] / out["old"]["of_copy"], 3)
    out["new_over_old_cpu"] = round(out["new"]["fused_cpu_ms"] / out["old"]["fused_cpu_ms"], 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
