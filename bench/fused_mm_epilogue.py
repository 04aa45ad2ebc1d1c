"""mlp_block's steps one by one: how much of the fused block is its pointwise epilogues, and what
fusing them per GEMM chunk could save (issue 10's MLP bar, issue 13's mlp_block against inductor).

Run from the repository root (docs/performance.md, "mlp_block: the epilogues' share"):

    PYTHONPATH=build/python /usr/bin/python3 bench/fused_mm_epilogue.py --threads 1
    PYTHONPATH=build/python /usr/bin/python3 bench/fused_mm_epilogue.py --threads 2

mlp_block is bench/fused.py's MLP: x[512, 1024] -> fc1 (4096) -> gelu -> fc2 (1024) -> dropout
(eval) -> + x. The fused backend runs it as four steps: mm #0 (x @ W1.T, 512x4096), kernel k0
(gelu(mm0 + b1)), mm #1 (k0 @ W2.T, 512x1024), kernel k1 (x + (mm1 + b2)). Part 1 times, with the
fused backend and interleaved within each repeat: the whole block, a graph of the two products
alone, each epilogue kernel alone on a tensor of its input's shape, and a copy of the first
product's 8 MiB (the memory part of the gelu epilogue). Part 2 imitates epilogue fusion with
eager ops: the first product computed per block of rows, each block's bias + gelu applied right
after its GEMM while the block is in cache, against one GEMM and one pass; the GEMM per block
alone separates what blocking costs the GEMM from what it saves the epilogue.

`--threads N` sets torch's threads and, before torch loads, OPENBLAS_NUM_THREADS (unless set), so
that at 1 thread eager's and the fused step's at::mm_out are single-threaded (Debian's OpenBLAS
has its own pthread pool, which torch.set_num_threads does not size). Time: wall and process CPU
medians (the CPU figure counts every thread, spinning included). Nothing is asserted.
"""
import argparse
import os
import statistics
import sys
import time


def _timed(fns, repeats):
    wall = {k: [] for k in fns}
    cpu = {k: [] for k in fns}
    for _ in range(2):
        for f in fns.values():
            f()
    for _ in range(repeats):
        for k, f in fns.items():
            t0, c0 = time.perf_counter(), time.process_time()
            f()
            wall[k].append(time.perf_counter() - t0)
            cpu[k].append(time.process_time() - c0)
    return {k: (statistics.median(wall[k]) * 1e3, min(wall[k]) * 1e3, statistics.median(cpu[k]) * 1e3)
            for k in fns}


def _print(title, res, base):
    print(f"\n{title}\n{'step':34} {'wall ms':>8} {'min ms':>8} {'CPU ms':>8} {'CPU share':>10}")
    for k, (w, m, c) in res.items():
        print(f"{k:34} {w:8.2f} {m:8.2f} {c:8.2f} {c / res[base][2]:10.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--chunk-rows", default="64,128,256", help="row blocks of part 2")
    ap.add_argument("--inductor", action="store_true",
                    help="torch 2.x: also time torch.compile(backend='inductor') of the block and of k0's graph")
    args = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(args.threads))
    import torch
    import torch.nn.functional as F
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import dynamo
    from fused import MLP

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    torch.set_grad_enabled(False)
    m = MLP().eval()
    x = torch.randn(512, 1024)
    w1t, b1, w2t, b2 = m.fc1.weight.t(), m.fc1.bias, m.fc2.weight.t(), m.fc2.bias
    h, o = torch.randn(512, 4096), torch.randn(512, 1024)
    dst = torch.empty_like(h)
    block = dynamo.optimize("fused")(lambda x: m(x))
    products = dynamo.optimize("fused")(lambda x: torch.mm(torch.mm(x, w1t), w2t))
    gelu_ep = dynamo.optimize("fused")(lambda h: F.gelu(h + b1))
    residual_ep = dynamo.optimize("fused")(lambda o: x + (o + b2))
    torch.testing.assert_close(block(x), m(x), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(gelu_ep(h), F.gelu(h + b1), rtol=1e-4, atol=1e-5)
    steps = {
        "eager block": lambda: m(x),
        "fused block": lambda: block(x),
        "fused products alone (mm #0, mm #1)": lambda: products(x),
        "fused k0: gelu(mm0 + b1), 512x4096": lambda: gelu_ep(h),
        "fused k1: x + (mm1 + b2), 512x1024": lambda: residual_ep(o),
        "copy of 8 MiB (512x4096)": lambda: dst.copy_(h),
    }
    if args.inductor:
        ind_block = torch.compile(lambda x: m(x), backend="inductor")
        ind_gelu = torch.compile(lambda h: F.gelu(h + b1), backend="inductor")
        torch.testing.assert_close(ind_block(x), m(x), rtol=1e-4, atol=1e-5)
        ind_gelu(h)
        steps["inductor block"] = lambda: ind_block(x)
        steps["inductor k0's graph: gelu(h + b1)"] = lambda: ind_gelu(h)
    print(f"threads {args.threads}, OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}, "
          f"repeats {args.repeats}")
    part1 = _timed(steps, args.repeats)
    _print("part 1: the fused block's steps (CPU share of the fused block)", part1, "fused block")

    g = torch.empty(512, 4096)

    def whole():
        torch.mm(x, w1t, out=h)
        torch.add(h, b1, out=h)
        torch._C._nn.gelu(h, out=g)

    def blocked(rows, epilogue):
        def f():
            for lo in range(0, 512, rows):
                hb = h[lo:lo + rows]
                torch.mm(x[lo:lo + rows], w1t, out=hb)
                if epilogue:
                    hb.add_(b1)
                    torch._C._nn.gelu(hb, out=g[lo:lo + rows])
        return f

    fns = {"mm #0 whole": lambda: torch.mm(x, w1t, out=h), "mm #0 whole + one epilogue pass": whole}
    for r in (int(s) for s in args.chunk_rows.split(",")):
        fns[f"mm #0 per {r} rows"] = blocked(r, False)
        fns[f"mm #0 per {r} rows + its epilogue"] = blocked(r, True)
    _print("part 2: epilogue per row block (eager ops; CPU share of mm #0 whole)", _timed(fns, args.repeats),
           "mm #0 whole")


if __name__ == "__main__":
    main()
