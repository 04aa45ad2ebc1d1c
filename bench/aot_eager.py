"""aot_eager against functorch 1.13's own AOTAutograd, on the same captured graphs, and against
eager (docs/aot.md has the figures and the machine). Run from the repository root:

    PYTHONPATH=build/python /usr/bin/python3 bench/aot_eager.py            # ~2 min
    PYTHONPATH=build/python /usr/bin/python3 bench/aot_eager.py --quick    # fewer repeats
    PYTHONPATH=build/python /usr/bin/python3 bench/aot_eager.py --peak-only  # peak memory only, ~10 s

Workloads (train mode): torchvision resnet18 (batch 8, 3x64x64) and a TransformerEncoderLayer
(d_model 256, 8 heads, batch 8 x 64 tokens, dropout 0.1). Each is captured once by Dynamo (a
recording backend keeps the torch.fx.GraphModule and the inputs); then, on that same graph:

    compile_ms        time to the first forward output: ours = dynamo.aot.compile_graph + one
                      call; functorch = the first call of aot_function(gm, nop, nop,
                      min_cut_rematerialization_partition) (it compiles on first call); median of
                      interleaved repeats, ratio ours / functorch
    saved_MiB         bytes the forward saves for backward: ours (aot_eager: the C++ min-cut;
                      aot_eager_default_partitioner: save-all) and functorch's default_partition
                      and min_cut_rematerialization_partition (networkx, python3-networkx)
    step_ms           one train step (forward, sum, backward) of the whole model: eager vs
                      dynamo.compile(model, backend="aot_eager"), interleaved repeats, medians and
                      their ratio
    held_MiB          activation memory held for backward after the forward (distinct storages
                      autograd keeps, through saved_tensors_hooks, parameters left out): eager vs
                      aot_eager
    graph_peak_MiB    the same on the captured graph alone (its inputs, parameters included, fresh
                      copies): the graph run by torch.fx (eager), by our aot_eager compile, by
                      functorch's aot_function with its min-cut partitioner
    peak_MiB          peak memory of one train step (forward, sum, backward; gradients set to None
                      before it) above the memory live when it starts: the running sum of the
                      allocations and frees the profiler records (torch.profiler,
                      profile_memory=True), eager vs aot_eager, and their ratio

Timings are the thread's CPU time (time.thread_time; --wall for the wall clock: the machine is
shared, and with 1 torch thread the forward, the backward and both compilers run on this thread),
never asserted. One JSON line for the environment, one per workload, then a table.
"""
import argparse
import copy
import json
import platform
import statistics
import sys
import time

import torch

import dynamo
import dynamo.aot as aot
from dynamo import _C

_clock = time.thread_time


def resnet18():
    import torchvision
    torch.manual_seed(0)
    return torchvision.models.resnet18().train(), torch.randn(8, 3, 64, 64)


def encoder_layer():
    torch.manual_seed(0)
    m = torch.nn.TransformerEncoderLayer(256, 8, 1024, dropout=0.1, batch_first=True).train()
    return m, torch.randn(8, 64, 256)


WORKLOADS = {"resnet18": resnet18, "transformer_layer": encoder_layer}


def capture(model, x):
    """The captured graph of model(x) and its real inputs (one graph expected)."""
    got = []

    def recorder(gm, example_inputs):
        got.append((gm, list(example_inputs)))
        return gm.forward

    dynamo.reset()
    dynamo.compile(model, backend=recorder, fullgraph=True)(x)
    dynamo.reset()
    assert len(got) == 1, f"expected one graph, got {len(got)}"
    return got[0]


def _fresh_inputs(examples):
    return [t.detach().clone().requires_grad_(t.requires_grad) for t in examples]


def ours_compile_ms(gm, examples, backend="aot_eager"):
    ins = _fresh_inputs(examples)
    t0 = _clock()
    fn = aot.compile_graph(gm, ins, backend, "bench", "", 0)
    assert not isinstance(fn, str), fn
    fn(*ins)
    ms = (_clock() - t0) * 1e3
    return ms, aot.last_records()[-1]


def _saved_bytes_of_fw(fw_module, num_outs):
    out = next(n for n in fw_module.graph.nodes if n.op == "output")
    total = 0
    for n in list(out.args[0])[num_outs:]:
        tm = n.meta.get("tensor_meta") if hasattr(n, "meta") else None
        if tm is not None and hasattr(tm, "shape"):
            numel = 1
            for d in tm.shape:
                numel *= int(d)
            total += numel * torch.empty((), dtype=tm.dtype).element_size()
    return total


def functorch_compile(gm, examples, partition):
    """(ms to the first forward output, bytes saved for backward) of functorch's aot_function."""
    from functorch.compile import aot_function, default_partition, min_cut_rematerialization_partition, nop
    partition_fn = min_cut_rematerialization_partition if partition == "min_cut" else default_partition
    saved = {}
    num_outs = len(gm(*_fresh_inputs(examples)))

    def fw(fx_module, args):
        saved["bytes"] = _saved_bytes_of_fw(fx_module, num_outs)
        return fx_module

    ins = _fresh_inputs(examples)
    t0 = _clock()
    fn = aot_function(gm, fw_compiler=fw, bw_compiler=nop, partition_fn=partition_fn)
    fn(*ins)
    return (_clock() - t0) * 1e3, saved.get("bytes", 0), fn


def _profiled_peak(step):
    """Peak of the running sum of the allocations and frees the profiler records during step()."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    # stable: ties keep the recorded order (torch 2.x's events give start_ns, 1.13's start_us)
    events.sort(key=lambda e: e.start_ns() if hasattr(e, "start_ns") else e.start_us() * 1000)
    live = peak = 0
    for e in events:
        live += e.nbytes()
        peak = max(peak, live)
    return peak


def graph_peak_bytes(fn, examples):
    """Peak memory of forward + backward of one captured graph run by fn (inputs' grads None)."""
    ins = _fresh_inputs(examples)
    fn(*ins)  # warm: compiles, the backward too
    ins = _fresh_inputs(examples)

    def step():
        outs = fn(*ins)
        outs = outs if isinstance(outs, (tuple, list)) else (outs,)
        sum(o.sum() for o in outs if isinstance(o, torch.Tensor) and o.requires_grad).backward()
    return _profiled_peak(step)


def held_bytes(fn, x):
    """Distinct storages autograd holds for backward after fn(x), parameters left out (both keep
    them; aot_eager keeps them on ctx, outside the hooks)."""
    seen = {}

    def pack(t):
        if t.numel() and not (t.is_leaf and t.requires_grad):
            seen[(t.device, t.storage().data_ptr())] = t.storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(x)
    out.sum().backward()
    return sum(seen.values())


def peak_bytes(model, fn, x):
    """Peak memory of one train step above what is live when it starts (gradients None)."""
    model.zero_grad(set_to_none=True)
    return _profiled_peak(lambda: fn(x).sum().backward())


def step_ms(fn, x, repeats):
    times = []
    for _ in range(repeats):
        t0 = _clock()
        fn(x).sum().backward()
        times.append((_clock() - t0) * 1e3)
    return times


def bench(name, repeats, step_repeats):
    model, x = WORKLOADS[name]()
    gm, examples = capture(model, x)
    row = {"bench": "aot_eager", "workload": name, "graph_nodes": len(gm.graph.nodes),
           "clock": "wall" if _clock is time.perf_counter else "thread_cpu"}
    ours, theirs = [], []
    for _ in range(repeats):  # interleaved
        ms, rec = ours_compile_ms(gm, examples)
        ours.append(ms)
        theirs.append(functorch_compile(gm, examples, "min_cut")[0])
    row["compile_ms_ours"] = round(statistics.median(ours), 1)
    row["compile_ms_functorch_mincut"] = round(statistics.median(theirs), 1)
    row["compile_ratio"] = round(row["compile_ms_ours"] / row["compile_ms_functorch_mincut"], 3)
    row["compile_phases_ms"] = rec["phases_ms"]
    row["saved_MiB_ours_aot_eager"] = round(rec["bytes_saved"] / 2**20, 3)
    row["saved_MiB_ours_default_partitioner"] = round(
        ours_compile_ms(gm, examples, "aot_eager_default_partitioner")[1]["bytes_saved"] / 2**20, 3)
    row["saved_MiB_functorch_default"] = round(functorch_compile(gm, examples, "default")[1] / 2**20, 3)
    _, mincut_bytes, functorch_fn = functorch_compile(gm, examples, "min_cut")
    row["saved_MiB_functorch_mincut"] = round(mincut_bytes / 2**20, 3)
    ours_fn = aot.compile_graph(gm, _fresh_inputs(examples), "aot_eager", "bench", "", 0)
    row["graph_peak_MiB_eager"] = round(graph_peak_bytes(gm, examples) / 2**20, 3)
    row["graph_peak_MiB_ours"] = round(graph_peak_bytes(ours_fn, examples) / 2**20, 3)
    row["graph_peak_MiB_functorch_mincut"] = round(graph_peak_bytes(functorch_fn, examples) / 2**20, 3)

    eager = model
    compiled_model = copy.deepcopy(model)
    dynamo.reset()
    compiled = dynamo.compile(compiled_model, backend="aot_eager")
    compiled(x).sum().backward()  # compile (forward and backward) outside the timing
    eager(x).sum().backward()
    e_times, c_times = [], []
    for _ in range(step_repeats):  # interleaved
        e_times += step_ms(eager, x, 1)
        c_times += step_ms(compiled, x, 1)
    row["step_ms_eager"] = round(statistics.median(e_times), 2)
    row["step_ms_aot_eager"] = round(statistics.median(c_times), 2)
    row["step_ratio"] = round(row["step_ms_aot_eager"] / row["step_ms_eager"], 3)
    row["held_MiB_eager"] = round(held_bytes(eager, x) / 2**20, 3)
    row["held_MiB_aot_eager"] = round(held_bytes(compiled, x) / 2**20, 3)
    row["peak_MiB_eager"] = round(peak_bytes(eager, eager, x) / 2**20, 3)
    row["peak_MiB_aot_eager"] = round(peak_bytes(compiled_model, compiled, x) / 2**20, 3)
    row["peak_ratio"] = round(row["peak_MiB_aot_eager"] / row["peak_MiB_eager"], 3)
    dynamo.reset()
    return row


def bench_peak(name):
    """Only the peak-memory columns (deterministic: no repeats needed)."""
    model, x = WORKLOADS[name]()
    gm, examples = capture(model, x)
    row = {"bench": "aot_eager_peak", "workload": name}
    ours_fn = aot.compile_graph(gm, _fresh_inputs(examples), "aot_eager", "bench", "", 0)
    row["graph_peak_MiB_eager"] = round(graph_peak_bytes(gm, examples) / 2**20, 3)
    row["graph_peak_MiB_ours"] = round(graph_peak_bytes(ours_fn, examples) / 2**20, 3)
    compiled_model = copy.deepcopy(model)
    dynamo.reset()
    compiled = dynamo.compile(compiled_model, backend="aot_eager")
    compiled(x).sum().backward()
    model(x).sum().backward()
    row["peak_MiB_eager"] = round(peak_bytes(model, model, x) / 2**20, 3)
    row["peak_MiB_aot_eager"] = round(peak_bytes(compiled_model, compiled, x) / 2**20, 3)
    row["peak_ratio"] = round(row["peak_MiB_aot_eager"] / row["peak_MiB_eager"], 3)
    dynamo.reset()
    return row


def environment():
    import torchvision
    return {"bench": "environment", "python": platform.python_version(), "torch": torch.__version__,
            "torchvision": torchvision.__version__, "dynamo": getattr(_C, "__version__", "?"),
            "torch_threads": torch.get_num_threads(), "platform": platform.platform(),
            "processor": platform.processor() or platform.machine()}


def main():
    global _clock
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--wall", action="store_true", help="time with the wall clock, not the thread's CPU time")
    ap.add_argument("--peak-only", action="store_true", help="only the peak-memory columns")
    args = ap.parse_args()
    if args.wall:
        _clock = time.perf_counter
    torch.set_num_threads(1)
    repeats, step_repeats = (2, 5) if args.quick else (3, 15)
    print(json.dumps(environment()), flush=True)
    rows = []
    if args.peak_only:
        print("| workload | step peak MiB eager / aot_eager (ratio) | graph peak MiB eager / ours |")
        print("|---|---|---|")
        for name in args.workloads.split(","):
            r = bench_peak(name)
            print(json.dumps(r), flush=True)
            print(f"| {name} | {r['peak_MiB_eager']} / {r['peak_MiB_aot_eager']} ({r['peak_ratio']}) | "
                  f"{r['graph_peak_MiB_eager']} / {r['graph_peak_MiB_ours']} |", flush=True)
        return 0
    for name in args.workloads.split(","):
        row = bench(name, repeats, step_repeats)
        print(json.dumps(row), flush=True)
        rows.append(row)
    print(f"\nmachine: {platform.processor() or platform.machine()}, torch {torch.__version__}, 1 thread, "
          f"{'wall clock' if args.wall else 'thread CPU time'}")
    print("| workload | compile ms ours / functorch min-cut (ratio) | saved MiB: ours min-cut / ours save-all / "
          "functorch default / functorch min-cut | step ms eager / aot_eager (ratio) | held MiB eager / aot_eager "
          "| step peak MiB eager / aot_eager (ratio) | graph peak MiB eager / ours / functorch min-cut |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['workload']} | {r['compile_ms_ours']} / {r['compile_ms_functorch_mincut']} ({r['compile_ratio']}) | "
              f"{r['saved_MiB_ours_aot_eager']} / {r['saved_MiB_ours_default_partitioner']} / "
              f"{r['saved_MiB_functorch_default']} / {r['saved_MiB_functorch_mincut']} | "
              f"{r['step_ms_eager']} / {r['step_ms_aot_eager']} ({r['step_ratio']}) | "
              f"{r['held_MiB_eager']} / {r['held_MiB_aot_eager']} | "
              f"{r['peak_MiB_eager']} / {r['peak_MiB_aot_eager']} ({r['peak_ratio']}) | "
              f"{r['graph_peak_MiB_eager']} / {r['graph_peak_MiB_ours']} / {r['graph_peak_MiB_functorch_mincut']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
