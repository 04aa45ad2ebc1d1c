"""The interleaved block timing that the chain6 A/B benches share (bench/fused_chain6_cpu.py,
bench/fused_chain6_stream.py): each variant, the same-run `dst.copy_(src)` anchor among them, runs
in blocks of calls, the variants taking turns block by block so that a change in machine load
falls on all of them alike; and the set-up of the chain6 benches (those two and
bench/fused_chain6_harness.py). Not a benchmark itself.
"""
import resource
import time

import torch


def chain6(x):
    """bench/fused.py's chain6: six pointwise ops over one vector, one fused kernel."""
    return ((x * 2 + 1).relu() * 0.5 - 0.25).sigmoid()


def chain6_setup(threads):
    """Sets torch's thread count and seed 0; returns (x, copy): chain6's input (8M float32) and the
    same-run anchor, copy() = dst.copy_(src) over two more vectors of that size (bench/fused.py's)."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    x, src = torch.randn(8 << 20), torch.randn(8 << 20)
    dst = torch.empty_like(src)
    return x, lambda: dst.copy_(src)


def _cpu_s():
    """CPU seconds of this process so far: user + system, all threads."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def interleaved_blocks(variants, blocks, calls, warmup=2):
    """Time `variants` (name -> zero-argument callable), each called `warmup` times first.

    Returns name -> (walls, cpus): `walls` the wall-clock seconds of every timed call
    (blocks x calls values), `cpus` the process CPU seconds per call of each block (blocks values).
    """
    for _ in range(warmup):
        for fn in variants.values():
            fn()
    out = {name: ([], []) for name in variants}
    for _ in range(blocks):
        for name, fn in variants.items():
            walls, cpus = out[name]
            c0 = _cpu_s()
            for _ in range(calls):
                s = time.perf_counter()
                fn()
                walls.append(time.perf_counter() - s)
            cpus.append((_cpu_s() - c0) / calls)
    return out
