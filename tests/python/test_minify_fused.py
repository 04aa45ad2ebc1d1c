"""dynamo-minify with a backend of backends.def: the `fused` backend whose kernel compiler has a
bug in one fusion pattern (tests/python/minify_fake_cxx.sh as DYNAMO_CXX: a kernel whose loop
calls tanh on a computed value does not compile). The probe reaches the C++ backend through
dynamo.minifier.native (a nested dynamo.compile would run eagerly: the frame hook is suspended
inside a backend), and the graph shrinks to the fused pattern, add + tanh. With --after=kernel
the queries and the repro call the code generator alone; the repro, built by the real compiler,
is one kernel."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from minify_util import repro_nodes, run, run_repro  # noqa: E402

FAKE_CXX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "minify_fake_cxx.sh")

SCRIPT = """import torch, dynamo
def f(x, y):
    a = torch.sigmoid(x) * 2.0 - y
    b = torch.tanh(a + 0.5)
    return (b * b).sum(1) + a.mean(1)
with torch.no_grad():
    print(dynamo.compile(f, backend="fused")(torch.randn(8, 16), torch.randn(8, 16)))
"""


@pytest.mark.parametrize("after", ["dynamo", "kernel"])
def test_kernel_compiler_bug_in_one_fusion_pattern(tmp_path, after):
    (tmp_path / "k.py").write_text(SCRIPT)
    # Its own kernel cache: a kernel the real compiler built must not hide the fault.
    env = {"DYNAMO_CXX": FAKE_CXX, "DYNAMO_KERNEL_CACHE": str(tmp_path / "cache")}
    code, _, err = run("dynamo-minify", f"--after={after}", "--quiet", "-o", "r.py", "k.py",
                       cwd=tmp_path, env=env)
    assert code == 0, err
    # The C++ file in the message is absolute (masked as PATH) or, when ccache's base_dir rewrote
    # the compile command, relative to the build directory.
    err = err.replace("../codegen/src/kernel_cache.cpp", "PATH")
    assert ("graph 0 (9 nodes, backend fused) fails: dynamo.InternalError: internal error: "
            "unexpected C++ exception: internal error at PATH:N: check "
            "'false' failed: the generated kernel KERNEL did not compile ('PATH' ") in err
    assert "fake-cxx: internal compiler error: tanh inside a fused loop" in err
    assert "minified graph 0 from 9 to 2 node(s) (operator.add, torch.tanh)" in err
    assert "it reproduces the failure in a fresh process" in err
    nodes = repro_nodes((tmp_path / "r.py").read_text())
    assert len(nodes) == 2 and "torch.tanh" in nodes[1]
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        rc, out = run_repro(tmp_path / "r.py", tmp_path)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k)
            else:
                os.environ[k] = v
    assert rc == 1 and "fake-cxx: internal compiler error: tanh inside a fused loop" in out, out
    if after == "kernel":
        # The repro holds the one kernel's source; with the real compiler it builds and runs.
        assert "the minified graph is one kernel, k0_tanh: repro.py compiles and runs its C++ source alone" in err
        rc, out = run_repro(tmp_path / "r.py", tmp_path)
        assert rc == 0, out
        assert "repro.py: the kernel compiled and ran without the failure; kernels: k0_tanh\n" in out
