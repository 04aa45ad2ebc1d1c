"""transformer_train (or another training case) three ways in one process: eager, fused with its
bmm steps through oneDNN, fused with them through at::bmm_out (DYNAMO_FUSED_NO_DNNL_BMM=1).

    PYTHONPATH=build/python /usr/bin/python3 bench/fused_train_bmm_ab.py transformer_train 1 12

Arguments: the case, the torch threads, the rounds (the order reversed every other round).
Prints process CPU and wall time per variant (median, minimum) and eager / fused CPU ratios.
"""
import os
import statistics
import sys
import time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import fused as fb
case = sys.argv[1]; threads = int(sys.argv[2]); rounds = int(sys.argv[3])
torch.set_num_threads(threads); torch.manual_seed(0)
fn, make, comp = fb.CASES[case]
x, = make()
f1 = comp()
f1(x)
os.environ["DYNAMO_FUSED_NO_DNNL_BMM"] = "1"
f2 = comp()
f2(x)
del os.environ["DYNAMO_FUSED_NO_DNNL_BMM"]
variants = [("eager", fn), ("fused", f1), ("fused_atenbmm", f2)]
cpu = {k: [] for k, _ in variants}; wall = {k: [] for k, _ in variants}
for _ in range(2):
    for k, f in variants: f(x)
for r in range(rounds):
    order = variants if r % 2 == 0 else variants[::-1]
    for k, f in order:
        c0, w0 = time.process_time(), time.perf_counter(); f(x)
        cpu[k].append(time.process_time() - c0); wall[k].append(time.perf_counter() - w0)
for k, _ in variants:
    print(f"{k:15} cpu med {statistics.median(cpu[k])*1e3:8.1f} min {min(cpu[k])*1e3:8.1f}  wall med {statistics.median(wall[k])*1e3:8.1f} min {min(wall[k])*1e3:8.1f}")
e = cpu["eager"]
for k in ("fused", "fused_atenbmm"):
    rat = [a / b for a, b in zip(e, cpu[k])]
    print(f"eager/{k} cpu ratio median {statistics.median(rat):.3f}  min-ratio {min(e)/min(cpu[k]):.3f}")
