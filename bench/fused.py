"""The fused backend against eager PyTorch and a same-run memory copy (issue 10's anchors).

Run from the repository root (docs/codegen.md has the figures and the machine):

    PYTHONPATH=build/python /usr/bin/python3 bench/fused.py              # ~1 min
    PYTHONPATH=build/python /usr/bin/python3 bench/fused.py --repeats 31
    PYTHONPATH=build/python /usr/bin/python3 bench/fused.py --cases chain6,softmax_layer_norm
    PYTHONPATH=build/python /usr/bin/python3 bench/fused.py --cases resnet18_b8 --threads 1   # loaded machine

Cases (torch threads = CPU cores unless --threads; every case compiled with dynamo.optimize("fused") and checked
against eager before timing):

    chain6    ((x * 2 + 1).relu() * 0.5 - 0.25).sigmoid() on 8M float32: 6 pointwise ops, one kernel
    softmax_layer_norm   F.layer_norm(torch.softmax(x, -1), (1024,)) on 8192x1024 float32
    mean_var  x.mean(-1) and x.var-like centred square sum, 8192x1024: row reductions, one kernel
    mlp_block linear-gelu-linear-dropout-residual (eval), 512x1024 -> 4096 -> 1024
    resnet18_b8  torchvision resnet18, eval, batch 8 (conv steps: prepacked weights, batch_norm folded,
                 NCHW 3x3 convs in oneDNN's blocked layout)
    mobilenet_v2_b8  torchvision mobilenet_v2, eval, batch 8
    mlp_train    a training step (forward + backward) of the MLP block (dropout off), 256x1024 (AOT layer, kernels
                 for both graphs)
    cnn_train    a training step of a small CNN (conv-bn-relu x2, pool, linear), batch 32, 32x32
    transformer_train  a training step of nn.TransformerEncoderLayer(512, 8, 2048, dropout 0),
                 batch 16 x 128 tokens

The anchor `copy` is `dst.copy_(src)` of the same 8M float32 into a reused buffer: bytes moved
(read + write) per second. A case's GB/s counts each input once and each output once. Timing:
wall clock, the variants interleaved within each repeat (eager, fused, copy, ...), the median of
the repeats reported with the spread (min-max), and the ratio of the minima (`x (min)`), the
steadier figure when other jobs share the machine; `x CPU` is the ratio of the medians of process
CPU time (with --threads 1, the compute alone: OpenMP threads preempted by other jobs neither spin
nor wait there). Nothing is asserted: figures only.
--clean-cache reads a 64 MiB scratch tensor before every timed call (eager, fused and copy alike),
so that each starts with caches full of clean lines that hold none of its operands; without it a
call starts with whatever the previous one left: after eager's six fresh 32 MiB tensors (freed,
their lines still dirty) the fused call writes those back, a copy after the fused call half as
many (docs/performance.md, "chain6: the harnesses and the sigmoid", bench/fused_chain6_harness.py).
Training steps with paired rounds and confidence intervals: bench/fused_train.py; conv steps with
and without oneDNN's prepacked convolution: bench/fused_prepack.py; compile time:
bench/fused_compile.py; peak memory per case: bench/fused_peak.py; chain6 against kernel variants
and copy anchors in C++: bench/fused_chain6_variants.cpp.
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.nn.functional as F

import dynamo


def chain6(x):
    return ((x * 2 + 1).relu() * 0.5 - 0.25).sigmoid()


def softmax_layer_norm(x):
    return F.layer_norm(torch.softmax(x, -1), (x.shape[-1],))


def mean_var(x):
    m = x.mean(-1, keepdim=True)
    return m, ((x - m) * (x - m)).mean(-1, keepdim=True)


class MLP(torch.nn.Module):
    """linear-gelu-linear-dropout-residual (eval)."""

    def __init__(self, d=1024, h=4096):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(d, h), torch.nn.Linear(h, d)
        self.drop = torch.nn.Dropout(0.1)

    def forward(self, x):
        return x + self.drop(self.fc2(F.gelu(self.fc1(x))))


def _module_case(make_module, make_input):
    state = {}

    def fn(x):
        return state["m"](x)

    def inputs():
        state["m"] = make_module().eval()
        return (make_input(),)
    return fn, inputs


def _resnet18():
    import torchvision
    return torchvision.models.resnet18()


def _mobilenet_v2():
    import torchvision
    return torchvision.models.mobilenet_v2()


def _small_cnn():
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.BatchNorm2d(64), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10))


def _train_case(make_module, make_input):
    """A training step: the loss's forward (eager, or the module compiled) and its backward."""
    state = {}

    def step(forward, x):
        loss = (forward(x) ** 2).mean()
        loss.backward()
        return loss.detach()

    def inputs():
        state["m"] = make_module()
        return (make_input(),)

    def compiled(wrap=None):
        # a function calling the module (dynamo.optimize(module) of a torch.nn container once
        # ran eagerly, its forward being in torch's files; fixed, see docs/capture.md). wrap: how
        # to compile the forward (bench/side_by_side_fused.py passes torch.compile's inductor).
        fwd = (wrap or dynamo.optimize("fused"))(lambda x: state["m"](x))
        return lambda x: step(fwd, x)
    return (lambda x: step(state["m"], x)), inputs, compiled


CASES = {
    "chain6": (chain6, lambda: (torch.randn(8 * 1024 * 1024),)),
    "softmax_layer_norm": (softmax_layer_norm, lambda: (torch.randn(8192, 1024),)),
    "mean_var": (mean_var, lambda: (torch.randn(8192, 1024),)),
    "mlp_block": _module_case(MLP, lambda: torch.randn(512, 1024)),
    "resnet18_b8": _module_case(_resnet18, lambda: torch.randn(8, 3, 224, 224)),
    "mobilenet_v2_b8": _module_case(_mobilenet_v2, lambda: torch.randn(8, 3, 224, 224)),
    "mlp_train": _train_case(lambda: MLP().eval(), lambda: torch.randn(256, 1024)),
    "transformer_train": _train_case(
        lambda: torch.nn.TransformerEncoderLayer(512, 8, 2048, dropout=0.0, batch_first=True),
        lambda: torch.randn(16, 128, 512)),
    "cnn_train": _train_case(lambda: _small_cnn().train(), lambda: torch.randn(32, 3, 32, 32)),
}


def _bytes(inputs, outputs):
    outs = outputs if isinstance(outputs, (tuple, list)) else [outputs]
    return sum(t.numel() * t.element_size() for t in list(inputs) + list(outs))


def _time(fn, *args, cpu=None, before=None):
    if before is not None:
        before()
    t0, c0 = time.perf_counter(), time.process_time()
    fn(*args)
    if cpu is not None:
        cpu.append(time.process_time() - c0)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--threads", type=int, default=os.cpu_count(),
                    help="torch threads (default: the CPU cores); 1 with the cpu_ratio column is the "
                         "steadier figure when other jobs load the machine")
    ap.add_argument("--clean-cache", action="store_true",
                    help="read a 64 MiB scratch tensor before every timed call (eager, fused and copy alike)")
    args = ap.parse_args()
    threads = args.threads
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    src = torch.randn(8 * 1024 * 1024)
    dst = torch.empty_like(src)
    copy = lambda: dst.copy_(src)  # noqa: E731
    copy_bytes = 2 * src.numel() * src.element_size()
    scratch = torch.ones(16 << 20) if args.clean_cache else None
    clean = (lambda: scratch.sum()) if args.clean_cache else None  # noqa: E731
    rows = []
    for name in args.cases.split(","):
        fn, make, *train = CASES[name]
        torch.set_grad_enabled(bool(train))        # training steps: forward and backward
        inputs = make()
        compiled = train[0]() if train else dynamo.optimize("fused")(fn)
        t0 = time.perf_counter()
        got = compiled(*inputs)                    # compiles (cold or disk-cache warm)
        first_ms = (time.perf_counter() - t0) * 1e3
        want = fn(*inputs)
        for g, w in zip(got if isinstance(got, tuple) else [got], want if isinstance(want, tuple) else [want]):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
        for _ in range(2):                          # warm-up
            fn(*inputs), compiled(*inputs), copy()
        te, tf, tc, ce, cf = [], [], [], [], []
        for _ in range(args.repeats):
            te.append(_time(fn, *inputs, cpu=ce, before=clean))
            tf.append(_time(compiled, *inputs, cpu=cf, before=clean))
            tc.append(_time(copy, before=clean))
        nbytes = _bytes(inputs, want)
        e, f, c = (statistics.median(v) for v in (te, tf, tc))
        row = {
            "case": name, "threads": threads, "repeats": args.repeats, "clean_cache": args.clean_cache,
            "eager_ms": round(e * 1e3, 2), "fused_ms": round(f * 1e3, 2), "copy_ms": round(c * 1e3, 2),
            "speedup_vs_eager": round(e / f, 2),
            "fused_GBps": round(nbytes / f / 1e9, 2), "copy_GBps": round(copy_bytes / c / 1e9, 2),
            "fraction_of_copy_bw": round((nbytes / f) / (copy_bytes / c), 2),
            # on a shared, loaded machine the minima are the steadiest comparison (state both)
            "speedup_of_minima": round(min(te) / min(tf), 2),
            # process CPU time (all threads): with --threads 1 the compute, whatever the load
            "eager_cpu_ms": round(statistics.median(ce) * 1e3, 2), "fused_cpu_ms": round(statistics.median(cf) * 1e3, 2),
            "cpu_ratio": round(statistics.median(ce) / statistics.median(cf), 2),
            "eager_spread_ms": [round(min(te) * 1e3, 2), round(max(te) * 1e3, 2)],
            "fused_spread_ms": [round(min(tf) * 1e3, 2), round(max(tf) * 1e3, 2)],
            "first_call_ms": round(first_ms, 1),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"\n{'case':20} {'eager ms':>9} {'fused ms':>9} {'x eager':>8} {'x (min)':>8} {'GB/s':>7} {'copy GB/s':>10} "
          f"{'of copy':>8} {'x CPU':>6}")
    for r in rows:
        print(f"{r['case']:20} {r['eager_ms']:9.2f} {r['fused_ms']:9.2f} {r['speedup_vs_eager']:8.2f} "
              f"{r['speedup_of_minima']:8.2f} {r['fused_GBps']:7.2f} {r['copy_GBps']:10.2f} {r['fraction_of_copy_bw']:8.2f} {r['cpu_ratio']:6.2f}")


if __name__ == "__main__":
    main()
