"""The interleaved block timing that the chain6 A/B benches share (bench/fused_chain6_cpu.py,
bench/fused_chain6_stream.py): each variant, the same-run `dst.copy_(src)` anchor among them, runs
in blocks of calls, the variants taking turns block by block so that a change in machine load
falls on all of them alike. Not a benchmark itself.
"""
import resource
import time


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
