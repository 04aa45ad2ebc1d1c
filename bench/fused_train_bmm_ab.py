"""A training case three ways in one process: eager, the fused backend as built, and the fused
backend compiled with one switch variable set, NAME[=VALUE] (VALUE 1 by default; default
DYNAMO_FUSED_NO_DNNL_BMM: bmm steps through at::bmm_out; DYNAMO_FUSED_BLAS_POOL=0: mm steps
through at::mm_out, OpenBLAS on its own threads).

    PYTHONPATH=build/python /usr/bin/python3 bench/fused_train_bmm_ab.py transformer_train 1 12
    PYTHONPATH=build/python /usr/bin/python3 bench/fused_train_bmm_ab.py mlp_train 2 16 DYNAMO_FUSED_BLAS_POOL=0

Arguments: the case, the torch threads, the rounds (the order reversed every other round), and
optionally the switch. Prints process CPU and wall time per variant (median, minimum) and the
medians of the per-round eager / variant ratios, CPU and wall.
"""
import os
import statistics
import sys
import time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import fused as fb  # noqa: E402
case = sys.argv[1]; threads = int(sys.argv[2]); rounds = int(sys.argv[3])
switch, _, value = (sys.argv[4] if len(sys.argv) > 4 else "DYNAMO_FUSED_NO_DNNL_BMM").partition("=")
torch.set_num_threads(threads); torch.manual_seed(0)
fn, make, comp = fb.CASES[case]
x, = make()
f1 = comp()
f1(x)
os.environ[switch] = value or "1"
f2 = comp()
f2(x)
del os.environ[switch]
alt = f"fused+{switch}={value or '1'}"
variants = [("eager", fn), ("fused", f1), (alt, f2)]
cpu = {k: [] for k, _ in variants}; wall = {k: [] for k, _ in variants}
for _ in range(2):
    for k, f in variants: f(x)
for r in range(rounds):
    order = variants if r % 2 == 0 else variants[::-1]
    for k, f in order:
        c0, w0 = time.process_time(), time.perf_counter(); f(x)
        cpu[k].append(time.process_time() - c0); wall[k].append(time.perf_counter() - w0)
print(f"load {os.getloadavg()[0]:.1f}, {threads} threads, {rounds} rounds")
for k, _ in variants:
    print(f"{k:40} cpu med {statistics.median(cpu[k])*1e3:8.1f} min {min(cpu[k])*1e3:8.1f}  wall med {statistics.median(wall[k])*1e3:8.1f} min {min(wall[k])*1e3:8.1f}")
for k in ("fused", alt):
    rc = [a / b for a, b in zip(cpu["eager"], cpu[k])]
    rw = [a / b for a, b in zip(wall["eager"], wall[k])]
    print(f"eager/{k:34} cpu ratio median {statistics.median(rc):.3f}  wall ratio median {statistics.median(rw):.3f}")
