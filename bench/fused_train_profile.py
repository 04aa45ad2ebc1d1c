"""One eager and one fused training step of bench/fused.py's training cases under torch.profiler.

    PYTHONPATH=build/python /usr/bin/python3 bench/fused_train_profile.py transformer_train 1
    SHAPES=1 PYTHONPATH=build/python /usr/bin/python3 bench/fused_train_profile.py mlp_train 2

Arguments: the case, the torch threads. Prints, for eager and fused twice each (alternating),
the wall time per step and each op's self CPU time per step (ms), largest first; SHAPES=1 adds
the rows per input shape. The fused backend's generated kernels appear under their names
(k<N>_<nodes>, RECORD_FUNCTION in backends/src/fused_backend.cpp), its matmul steps as aten::mm,
its bmm steps as aten::bmm (ATen) or not at all (oneDNN: inside the CompiledFunction rows).
docs/performance.md, "Training steps: where the time goes", has a table made from this.
"""
import collections
import os
import sys
import time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
import fused as fb
case = sys.argv[1]; threads = int(sys.argv[2])
torch.set_num_threads(threads); torch.manual_seed(0)
fn, make, comp = fb.CASES[case]
x, = make()
cf = comp()
for _ in range(3): fn(x); cf(x)
from torch.profiler import profile, ProfilerActivity
def prof(f, n=3):
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as p:
        t0=time.perf_counter()
        for _ in range(n): f(x)
        wall=(time.perf_counter()-t0)/n*1e3
    agg = collections.defaultdict(lambda:[0.0,0])
    shp = collections.defaultdict(lambda:[0.0,0])
    for e in p.events():
        agg[e.name][0]+=e.self_cpu_time_total/1e3/n; agg[e.name][1]+=1
        shp[(e.name,str(e.input_shapes))][0]+=e.self_cpu_time_total/1e3/n; shp[(e.name,str(e.input_shapes))][1]+=1
    return wall, agg, shp
for name,f in (("eager",fn),("fused",cf),("eager",fn),("fused",cf)):
    wall, agg, shp = prof(f)
    tot = sum(v[0] for v in agg.values())
    print(f"== {name} threads={threads} wall/step {wall:.1f} ms, profiled self sum {tot:.1f}")
    for k,v in sorted(agg.items(), key=lambda kv:-kv[1][0])[:25]:
        print(f"  {v[0]:8.2f} ms {v[1]//3:4d}x {k}")
    if os.environ.get("SHAPES"):
        for k,v in sorted(shp.items(), key=lambda kv:-kv[1][0])[:40]:
            print(f"  {v[0]:8.2f} ms {v[1]//3:4d}x {k[0]} {k[1]}")
