"""mlp_block's mm steps: torch's oneDNN linear against at::mm_out, beside inductor (stack 2).

    PYTHONPATH=<build-py312>/python ~/.cache/dynamo/py312-torch2.11/bin/python \\
        bench/fused_mm_dnnl.py [--repeats N] [--threads 1] [--no-inductor]

One process, thread CPU time, the variants interleaved within each repeat:
  eager            the module (bench/fused.py's mlp_block, eval, no grad)
  fused            the fused backend as built (mm steps through mkldnn::_linear_pointwise where
                   torch registers it; backends/src/fused_torch_linear.h)
  fused_mm_out     the fused backend compiled with DYNAMO_FUSED_NO_DNNL_MM=1 (at::mm_out, as before)
  inductor         torch.compile(backend="inductor") (addmm into its buffer, then its gelu kernel)
  gemm_mm_out / gemm_dnnl   the first product alone (512x1024 @ 1024x4096), by torch.mm(out=) and by
                   torch.ops.mkldnn._linear_pointwise (no bias): the GEMMs themselves
Printed: per variant the median and minimum (ms), and the median of the per-repeat ratios to
`fused` (paired: each repeat's ratio, so a load swing shared by a repeat cancels). Nothing asserted.
"""
import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dynamo  # noqa: E402
import fused  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--no-inductor", action="store_true")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    torch.set_grad_enabled(False)
    fn, make = fused.CASES["mlp_block"][:2]
    torch.manual_seed(0)
    (x,) = make()
    variants = {"eager": fn}
    variants["fused"] = dynamo.optimize("fused")(lambda t: fn(t))
    variants["fused"](x)  # compiled now, with the default paths
    os.environ["DYNAMO_FUSED_NO_DNNL_MM"] = "1"
    variants["fused_mm_out"] = dynamo.optimize("fused")(lambda t: fn(t))
    variants["fused_mm_out"](x)
    del os.environ["DYNAMO_FUSED_NO_DNNL_MM"]
    if not a.no_inductor and hasattr(torch, "compile"):
        variants["inductor"] = torch.compile(lambda t: fn(t), backend="inductor")
    w = torch.randn(4096, 1024)
    out = torch.empty(512, 4096)
    variants["gemm_mm_out"] = lambda t: torch.mm(t, w.t(), out=out)
    if hasattr(torch.ops.mkldnn, "_linear_pointwise"):
        variants["gemm_dnnl"] = lambda t: torch.ops.mkldnn._linear_pointwise(t, w, None, "none", [], "")
    want = fn(x)
    for k in ("fused", "fused_mm_out", "inductor"):
        if k in variants:
            torch.testing.assert_close(variants[k](x), want, rtol=1e-4, atol=1e-5)
    for v in variants.values():
        v(x)
    times = {k: [] for k in variants}
    for _ in range(a.repeats):
        for k, v in variants.items():
            t0 = time.thread_time()
            v(x)
            times[k].append((time.thread_time() - t0) * 1e3)
    print(f"mlp_block, {a.threads} thread(s), thread CPU ms, {a.repeats} interleaved repeats, torch {torch.__version__}")
    print("| variant | median | min | paired ratio to fused (median) |")
    print("|---|---:|---:|---:|")
    for k, ts in times.items():
        ratio = statistics.median(t / f for t, f in zip(ts, times["fused"]))
        print(f"| {k} | {statistics.median(ts):.2f} | {min(ts):.2f} | {ratio:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
