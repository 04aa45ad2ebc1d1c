"""Peak memory of one call of a bench/fused.py case, eager against the fused backend (issue 10's bar
"peak memory of each case no higher than eager's").

    PYTHONPATH=build/python /usr/bin/python3 bench/fused_peak.py
    PYTHONPATH=build/python /usr/bin/python3 bench/fused_peak.py --cases chain6,mlp_block

The fused backend's kernel outputs come from Dynamo's own block pool, which torch.profiler's
memory events do not see, so this measures the resident set instead. Each (case, variant) runs in
a fresh process: the inputs (and the module) are made, the resident set is read (`base`), the
variant is called twice (the fused one compiles and fills its pool; outputs dropped), the peak
resident set is reset (/proc/self/clear_refs "5"), one more call is made with its output kept, and
`VmHWM - base` is the call's peak above the inputs (`held`: the resident set just before that
call, above `base`: what stays between calls). The peak counts what a warm call holds at its peak:
its output, its temporaries, and memory kept between calls (the fused pool's free blocks, glibc's
retained heap, the loaded kernels). Inference cases only (the training steps keep autograd state).
Nothing is asserted: figures only (one JSON line per case, then a table).
"""
import argparse
import json
import os
import subprocess
import sys

_CHILD = r"""
import sys, torch
sys.path.insert(0, {bench!r})
import fused as bench
import dynamo

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024

torch.set_num_threads(__import__("os").cpu_count())
torch.set_grad_enabled(False)
torch.manual_seed(0)
fn, make = bench.CASES[{case!r}][:2]
inputs = make()
f = fn if {variant!r} == "eager" else dynamo.optimize("fused")(fn)
base = status("VmRSS")
for _ in range(2):
    f(*inputs)
with open("/proc/self/clear_refs", "w") as c:
    c.write("5")
held = status("VmRSS") - base
out = f(*inputs)
print(status("VmHWM") - base, held)
"""


def peak(case, variant):
    code = _CHILD.format(bench=os.path.dirname(os.path.abspath(__file__)), case=case, variant=variant)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    peak_bytes, held = res.stdout.split()[-2:]
    return int(peak_bytes), int(held)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default="chain6,softmax_layer_norm,mean_var,mlp_block,resnet18_b8,mobilenet_v2_b8")
    args = ap.parse_args()
    rows = []
    for case in args.cases.split(","):
        (e, eh), (f, fh) = peak(case, "eager"), peak(case, "fused")
        row = {"case": case, "eager_peak_MiB": round(e / 2**20, 1), "fused_peak_MiB": round(f / 2**20, 1),
               "fused_over_eager": round(f / e, 2) if e else None,
               "eager_held_MiB": round(eh / 2**20, 1), "fused_held_MiB": round(fh / 2**20, 1)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"\n{'case':20} {'eager MiB':>10} {'fused MiB':>10} {'fused/eager':>12} {'held e/f MiB':>14}")
    for r in rows:
        print(f"{r['case']:20} {r['eager_peak_MiB']:10.1f} {r['fused_peak_MiB']:10.1f} {r['fused_over_eager']!s:>12} "
              f"{r['eager_held_MiB']:>6} / {r['fused_held_MiB']}")


if __name__ == "__main__":
    main()
