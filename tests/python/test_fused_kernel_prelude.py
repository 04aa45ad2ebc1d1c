"""The generated C++ kernels include no system header (codegen/src/emit.cpp, kHostMath; docs/codegen.md).

The libm functions the kernels' helpers call are the compiler's builtins (`#define expf
__builtin_expf` ...) instead of <math.h>'s declarations, which cost every compiler run a parse of
libstdc++'s <cmath> (or the load of a 15 MB precompiled header). These tests check that a kernel
compiles with no include path at all, that its object code is the one <math.h> gives, instruction
for instruction, and that a precompiled prelude left in a cache by an earlier version is evicted."""
import glob
import os
import re
import subprocess
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))
from fused_harness import fused  # noqa: E402

CXX = os.environ.get("DYNAMO_CXX") or "c++"
# codegen/src/kernel_cache.cpp's kernelCompileFlags, less -shared: objects to disassemble
FLAGS = ["-O3", "-march=native", "-fopenmp", "-fPIC", "-fno-math-errno", "-fno-trapping-math", "-fwrapv",
         "-fno-exceptions", "-std=c++17", "-w"]


def _every_function(x, y):
    # every helper that calls a libm function, in one dtype
    return (x.exp() + x.log() + x.tanh() + x.sqrt() + x.rsqrt() + torch.erf(x) + x.floor() + x.trunc()
            + x.pow(y) + torch.floor_divide(x, y) + (-x).abs() + x.sigmoid())


def _inputs(dtype):
    torch.manual_seed(0)
    return torch.rand(4, 300, dtype=dtype) + 0.5, torch.rand(4, 300, dtype=dtype) + 0.25


SCRIPT = r"""
import os, sys, torch
sys.path.insert(0, sys.argv[2])
from test_fused_kernel_prelude import _every_function, _inputs
from fused_harness import fused
out = {}
for dtype in (torch.float32, torch.float64):
    x, y = _inputs(dtype)
    out[str(dtype)] = fused(_every_function, x, y)(x, y)
    out[str(dtype) + " shim"] = fused(_every_function, x, y, cuda_host_shim=True)(x, y)
torch.save(out, sys.argv[1])
"""


def _run(tmp_path, name, cxx):
    cache = tmp_path / name
    env = dict(os.environ, DYNAMO_KERNEL_CACHE=str(cache), DYNAMO_CXX=cxx)
    env.pop("DYNAMO_GRAPH_CACHE", None)
    out = tmp_path / (name + ".pt")
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(out), os.path.dirname(__file__)], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return cache, torch.load(out)


def test_kernels_compile_with_no_include_path(tmp_path):
    # A compiler that finds no system header (-nostdinc, -nostdinc++) compiles every kernel, the
    # CUDA host shim's too, to the same results and the same cache keys as the plain compiler.
    wrapper = tmp_path / "cxx-nostdinc"
    wrapper.write_text('#!/bin/sh\nexec %s -nostdinc -nostdinc++ "$@"\n' % CXX)
    wrapper.chmod(0o755)
    cache, got = _run(tmp_path, "bare", str(wrapper))
    plain_cache, want = _run(tmp_path, "plain", CXX)
    assert sorted(got) == sorted(want) and len(got) == 4
    for k in got:
        assert torch.equal(got[k], want[k]), k
    kernels = sorted(os.path.basename(p) for p in glob.glob(str(cache / "*.so")))
    assert kernels == sorted(os.path.basename(p) for p in glob.glob(str(plain_cache / "*.so"))) != []
    assert glob.glob(str(cache / "prelude-*")) == []


def _disassembly(tmp_path, name, source):
    src, obj = tmp_path / (name + ".cpp"), tmp_path / (name + ".o")
    src.write_text(source)
    subprocess.run([CXX, *FLAGS, "-c", str(src), "-o", str(obj)], check=True, capture_output=True, text=True)
    text = subprocess.run(["objdump", "-dr", "--no-show-raw-insn", str(obj)], check=True, capture_output=True,
                          text=True).stdout
    return text.split("\n", 3)[3]  # past the file name line


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_builtins_give_the_object_code_of_math_h(dtype, tmp_path):
    x, y = _inputs(dtype)
    (kernel,) = fused(_every_function, x, y).report["kernels"]
    source = kernel["source"]
    block = re.search(r"^(#define (\w+) __builtin_\2\n)+", source, re.M)
    assert block and "#include" not in source
    with_header = source[: block.start()] + "#include <math.h>\n" + source[block.end():]
    ours = _disassembly(tmp_path, "ours", source)
    assert ours == _disassembly(tmp_path, "math_h", with_header)
    # the float helpers call the float functions: at most libm's own names, never a double one
    calls = set(re.findall(r"R_X86_64_PLT32\s+(\w+)", ours))
    suffix = "f" if dtype == torch.float32 else ""
    assert {c for c in calls if c in ("expf", "exp", "logf", "log", "tanhf", "tanh", "erff", "erf", "powf", "pow",
                                      "fmodf", "fmod")} <= {n + suffix for n in ("exp", "log", "tanh", "erf", "pow", "fmod")}


def test_prelude_left_by_an_earlier_version_is_evicted(tmp_path):
    # Kernels compiled before this version left <cache>/prelude-<key>.h.gch (~15 MB) behind: it
    # still counts toward the size limit and goes when it is the oldest entry of a full cache.
    cache = tmp_path / "old"
    cache.mkdir()
    gch = cache / ("prelude-" + "0" * 64 + ".h.gch")
    gch.write_bytes(b"\0" * (3 << 20))
    (cache / ("prelude-" + "0" * 64 + ".h")).write_text("#include <math.h>\n")
    os.utime(gch, (1_000_000_000, 1_000_000_000))
    env = dict(os.environ, DYNAMO_KERNEL_CACHE=str(cache), DYNAMO_KERNEL_CACHE_MB="2")
    env.pop("DYNAMO_GRAPH_CACHE", None)
    script = ("import sys, torch; sys.path.insert(0, sys.argv[1]); from fused_harness import fused; "
              "x = torch.rand(64); assert torch.equal(fused(torch.neg, x)(x), -x)")
    r = subprocess.run([sys.executable, "-c", script, os.path.dirname(__file__)], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert not gch.exists()
    assert glob.glob(str(cache / "*.so")) != []
