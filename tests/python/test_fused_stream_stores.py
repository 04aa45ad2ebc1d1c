"""Streaming (non-temporal) stores in the C++ kernels' float32 vector loops (issue 10, chain6).

Off by default; DYNAMO_FUSED_STREAM_STORES=1 turns them on for one-dim pointwise kernels whose
output has at least 4M elements (codegen/src/emit.cpp, streamingPays). The kernel then picks, at
run time, the streaming loop (output 32-byte aligned) or the ordinary one; both must give the bits
of the ordinary kernel, the remainder included, and the output must be complete when the kernel
returns (each thread fences its streaming stores before OpenMP's barrier).
"""
import ctypes
import os
import subprocess
import sys
import tempfile
import threading

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))
from fused_harness import fused, reference, tolerance  # noqa: E402

N = (4 << 20) + 13  # at the threshold, with a remainder of 5 after the 8-lane steps


def chain6(x):
    return ((x * 2 + 1).relu() * 0.5 - 0.25).sigmoid()


@pytest.fixture
def stream_on(monkeypatch):
    monkeypatch.setenv("DYNAMO_FUSED_STREAM_STORES", "1")


def _source(f):
    return "\n".join(k["source"] for k in f.report["kernels"])


def _same_bits(a, b):
    assert a.shape == b.shape and torch.equal(a.view(torch.int32), b.view(torch.int32))


def test_off_by_default(monkeypatch):
    monkeypatch.delenv("DYNAMO_FUSED_STREAM_STORES", raising=False)
    x = torch.randn(N)
    assert "dyn_vstream" not in _source(fused(chain6, x))


def test_streaming_kernel_matches_ordinary_bits(stream_on, monkeypatch):
    x = torch.randn(N)
    x[:64] = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 100.0, -100.0, 1e-40] * 8)
    f = fused(chain6, x)
    src = _source(f)
    assert "dyn_vstream(" in src and "__builtin_ia32_sfence();" in src and "nowait" in src
    got = f(x)  # read right after the call: every lane and the scalar remainder are there
    monkeypatch.setenv("DYNAMO_FUSED_STREAM_STORES", "0")
    g = fused(chain6, x)
    assert "dyn_vstream" not in _source(g)
    _same_bits(got, g(x))
    ref = reference(chain6, x)
    assert torch.allclose(got.double(), ref, rtol=tolerance(torch.float32)[0], atol=tolerance(torch.float32)[1], equal_nan=True)


def test_small_or_read_back_outputs_keep_ordinary_stores(stream_on):
    x = torch.randn((4 << 20) - 8)
    assert "dyn_vstream" not in _source(fused(chain6, x))        # under 4M elements
    y = torch.randn(1024, 4096)
    assert "dyn_vstream" not in _source(fused(lambda t: torch.softmax(t, -1) * 2, y))  # a reduction


def test_several_outputs_all_streamed(stream_on):
    x = torch.randn(N)
    f = fused(lambda t: (t.exp(), (t * 3).relu()), x)
    src = _source(f)
    assert src.count("dyn_vstream(b") == 2
    a, b = f(x)
    assert torch.allclose(a.double(), x.double().exp(), rtol=1e-6, atol=0, equal_nan=True)
    assert torch.equal(b, (x * 3).relu())


def test_unaligned_output_takes_the_ordinary_loop(stream_on):
    # the kernel's own source, compiled here and called with outputs 4, 16 and 32 bytes into a
    # buffer: the first two fail the alignment check (ordinary loop), the last streams
    x = torch.randn(N)
    f = fused(chain6, x)
    want = f(x)
    src, name = f.report["kernels"][0]["source"], f.report["kernels"][0]["name"]
    with tempfile.TemporaryDirectory() as d:
        so = os.path.join(d, "k.so")
        subprocess.run(["c++", "-O2", "-march=native", "-fopenmp", "-fPIC", "-shared", "-fno-math-errno", "-x", "c++",
                        "-", "-o", so], input=src.encode(), check=True)
        kernel = getattr(ctypes.CDLL(so), name)
        big = torch.full((N + 16,), float("nan"))
        assert big.data_ptr() % 32 == 0
        for shift in (1, 4, 8):
            big.fill_(float("nan"))
            args = (ctypes.c_void_p * 2)(x.data_ptr(), big.data_ptr() + 4 * shift)
            kernel(args)
            _same_bits(big[shift:shift + N], want)
            assert torch.isnan(big[:shift]).all() and torch.isnan(big[shift + N:]).all()


def test_two_threads_call_one_streaming_kernel(stream_on):
    x = torch.randn(N)
    f = fused(chain6, x)
    want = f(x)
    errors = []

    def worker():
        for _ in range(4):
            if not torch.equal(f(x), want):
                errors.append("mismatch")

    ts = [threading.Thread(target=worker) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
