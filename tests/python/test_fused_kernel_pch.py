"""The precompiled prelude of the generated C++ kernels (codegen/src/kernel_cache.cpp; docs/codegen.md).

With GCC, the `#include <math.h>` every kernel starts with is precompiled once per cache directory
(<cache>/prelude-<key>.h.gch) and the kernels are compiled with `-include` of it: the same
declarations, so the same results and the same kernel keys. Each test runs a new process with its
own $DYNAMO_KERNEL_CACHE; they check files and results, never time. A damaged .gch (which GCC
refuses with an error) must cost speed, not the compile: the kernel is compiled again without it."""
import glob
import os
import subprocess
import sys

import pytest
import torch

SCRIPT = r"""
import json, sys, torch, dynamo
torch.set_grad_enabled(False)
x = torch.linspace(-3, 3, 1000)
f = dynamo.optimize("fused")(lambda x: (torch.sin(x) * 2 + 1).exp().sqrt() - torch.tanh(x))
torch.save({"got": f(x), "want": (torch.sin(x) * 2 + 1).exp().sqrt() - torch.tanh(x)}, sys.argv[1])
"""


def _gcc():
    try:
        v = subprocess.run([os.environ.get("DYNAMO_CXX") or "c++", "--version"], capture_output=True, text=True).stdout
    except OSError:
        return False
    return "Free Software Foundation" in v and "clang" not in v


def _run(cache, out, **env):
    e = dict(os.environ, DYNAMO_KERNEL_CACHE=str(cache), **env)
    for k in ("DYNAMO_GRAPH_CACHE", "DYNAMO_KERNEL_PCH"):
        if k not in env:
            e.pop(k, None)
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(out)], env=e, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    got = torch.load(out)
    torch.testing.assert_close(got["got"], got["want"], rtol=1e-5, atol=1e-5)
    return got["got"]


def _kernels(cache):
    return sorted(os.path.basename(p) for p in glob.glob(str(cache / "*.so")))


pytestmark = pytest.mark.skipif(not _gcc(), reason="the precompiled prelude is built with GCC only")


@pytest.fixture(scope="module")
def with_pch(tmp_path_factory):
    """(cache dir, result) of a run with the prelude (shared by the tests: a run costs seconds)."""
    tmp = tmp_path_factory.mktemp("pch")
    return tmp / "cache", _run(tmp / "cache", tmp / "a.pt")


def test_prelude_is_precompiled_and_changes_neither_results_nor_keys(with_pch, tmp_path):
    cache, got = with_pch
    assert len(glob.glob(str(cache / "prelude-*.h.gch"))) == 1
    without = _run(tmp_path / "b", tmp_path / "b.pt", DYNAMO_KERNEL_PCH="0")
    assert glob.glob(str(tmp_path / "b" / "prelude-*")) == []
    assert torch.equal(got, without)
    assert _kernels(cache) == _kernels(tmp_path / "b") != []


def test_damaged_prelude_falls_back_to_the_header(with_pch, tmp_path):
    cache, got = with_pch
    (gch,) = glob.glob(str(cache / "prelude-*.h.gch"))
    data = open(gch, "rb").read()
    with open(gch, "wb") as f:
        f.write(data[: len(data) // 3])  # truncated: GCC stops with "cannot read PCH file"
    for so in glob.glob(str(cache / "*.so")):
        os.remove(so)  # the kernels must be compiled again, with the damaged .gch present
    assert torch.equal(_run(cache, tmp_path / "a2.pt"), got)
    assert _kernels(cache) != []


def test_prelude_counts_toward_the_size_limit_and_is_evicted_when_oldest(with_pch, tmp_path):
    # A warm run (every kernel a hit, so the prelude is not touched) that stores its program
    # entries again evicts down to 80% of a limit half the .gch's size (5-15 MB with GCC 12):
    # the .gch, the oldest entry, goes; the kernels, used since, stay.
    cache, got = with_pch
    copy = tmp_path / "cache"
    copy.mkdir()
    for p in glob.glob(str(cache / "*.so")) + glob.glob(str(cache / "prelude-*")):
        with open(p, "rb") as src, open(copy / os.path.basename(p), "wb") as dst:
            dst.write(src.read())
    (gch,) = glob.glob(str(copy / "prelude-*.h.gch"))
    limit_mb = os.path.getsize(gch) >> 21
    assert limit_mb >= 1 and sum(os.path.getsize(p) for p in glob.glob(str(copy / "*.so"))) < (limit_mb << 19)
    os.utime(gch, (1_000_000_000, 1_000_000_000))
    kernels = _kernels(copy)
    assert torch.equal(_run(copy, tmp_path / "a.pt", DYNAMO_KERNEL_CACHE_MB=str(limit_mb)), got)
    assert glob.glob(str(copy / "prelude-*.h.gch")) == []
    assert _kernels(copy) == kernels != []
    assert glob.glob(str(copy / "*.program")) != []


def test_prelude_larger_than_a_quarter_of_the_limit_is_not_kept(with_pch, tmp_path):
    # A limit twice the .gch's size: the .gch is over a quarter of it, so it is removed once built
    # and the kernels are compiled without it: same results, same kernel keys, no .gch left to be
    # evicted and rebuilt over and over.
    cache, got = with_pch
    (gch,) = glob.glob(str(cache / "prelude-*.h.gch"))
    limit_mb = max(1, (2 * os.path.getsize(gch)) >> 20)
    assert torch.equal(_run(tmp_path / "c", tmp_path / "c.pt", DYNAMO_KERNEL_CACHE_MB=str(limit_mb)), got)
    assert glob.glob(str(tmp_path / "c" / "prelude-*.h.gch")) == []
    assert _kernels(tmp_path / "c") == _kernels(cache)
