"""dynamo-minify --after=kernel down to one generated kernel: the code generator gets one op
kind wrong inside the fused kernels (DYNAMO_TEST_MISCOMPILE=tanh[:mode], a test-only hook of
codegen/src/emit.cpp): `value` is 1e-2 off (an accuracy bug, --accuracy), `compile` emits a call
that does not compile, `crash` traps when the kernel runs. Each minifies from the 9-node graph
(tanh fused with add, mul and a sum) to the tanh alone, one kernel, and repro.py holds that
kernel's C++ source and runs it alone; it reproduces in a fresh process even without the hook
(the bug is in the source it holds). Also the two kernel-only reduction passes in-process."""
import os
import sys

import pytest
import torch
import torch.fx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from minify_util import repro_nodes, run, run_repro  # noqa: E402

from dynamo.minifier import engine, kernel_stage  # noqa: E402
from dynamo.minifier.unit import Unit  # noqa: E402

SCRIPT = """import torch, dynamo
def f(x, y):
    a = torch.sigmoid(x) * 2.0 - y
    b = torch.tanh(a + 0.5)
    return (b * b).sum(1) + a.mean(1)
with torch.no_grad():
    print(dynamo.compile(f, backend="fused")(torch.randn(8, 16), torch.randn(8, 16)))
"""

CASES = {
    "value": (["--accuracy", "--tol", "1e-4"], "divergence from fp64 eager beyond the tolerance",
              "b1[0LL] = ((float)(dyn_tanh(b0[0LL]) + (float)0.01));"),
    "compile": ([], "dynamo.InternalError: internal error: unexpected C++ exception: internal error at ",
                "b1[0LL] = dyn_test_miscompiled(dyn_tanh(b0[0LL]));"),
    "crash": ([], "crash (SIGILL)", "b1[0LL] = (__builtin_trap(), dyn_tanh(b0[0LL]));"),
}


@pytest.mark.parametrize("mode", list(CASES))
def test_a_miscompiled_op_minifies_to_one_kernel_whose_source_reproduces(tmp_path, mode):
    flags, failure, line = CASES[mode]
    (tmp_path / "k.py").write_text(SCRIPT)
    env = {"DYNAMO_TEST_MISCOMPILE": f"tanh:{mode}", "DYNAMO_KERNEL_CACHE": str(tmp_path / "cache")}
    code, _, err = run("dynamo-minify", "--after=kernel", *flags, "--quiet", "-o", "r.py", "k.py",
                       cwd=tmp_path, env=env)
    assert code == 0, err
    assert f"graph 0 (9 nodes, backend fused) fails: {failure}" in err
    assert "minified graph 0 from 9 to 1 node(s) (torch.tanh)" in err
    assert ("the minified graph is one kernel, k0_tanh: repro.py compiles and runs its C++ source "
            "alone") in err
    assert f"it reproduces the failure in a fresh process ({failure}" in err
    text = (tmp_path / "r.py").read_text()
    assert len(repro_nodes(text)) == 1
    # The kernel's own source, as the buggy generator emitted it, with its parameters.
    assert 'extern "C" void k0_tanh(void* const* args) {' in text and line in text
    assert "repro_main(Repro, load_inputs, BACKEND, CONFIG, TOL, stage=\"kernel\", kernel=KERNEL)" in text
    # In a fresh process without the hook: the source it holds still fails.
    assert "DYNAMO_TEST_MISCOMPILE" not in os.environ
    rc, out = run_repro(tmp_path / "r.py", tmp_path)
    if mode == "value":
        assert rc == 1 and ("AssertionError: the compiled graph diverges from fp64 eager at a "
                            "torch.tanh node (error 0.01, tolerance 0.0001)") in out, out
    elif mode == "compile":
        assert rc == 1 and "dyn_test_miscompiled" in out and "did not compile" in out, out
    else:
        assert rc == -4, out   # SIGILL


def kernel_unit():
    class F(torch.nn.Module):
        def forward(self, x, y):
            a = torch.sigmoid(x) * 2.0 - y
            b = torch.tanh(torch.cumsum(a, 1) + 0.5)   # cumsum: an extern step between kernels
            return ((b * b).sum(1) + a.mean(1),)
    return Unit(torch.fx.symbolic_trace(F()), (torch.randn(8, 16), torch.randn(8, 16)))


def has_tanh(unit):
    return any(n.target is torch.tanh for n in unit.calls())


def test_isolate_kernel_drops_whole_steps_of_the_fused_program():
    unit = kernel_unit()
    steps = kernel_stage.program(unit)["steps"]
    assert steps == [("kernel", 0), ("extern", 3), ("kernel", 1)], kernel_stage.program(unit)["program"]
    small = engine.Engine(has_tanh, passes=["isolate_kernel", "dead_code"]).run(unit)
    assert has_tanh(small) and small.size() < unit.size()
    # What is left is one kernel: the one that computes the tanh.
    kernel = kernel_stage.single_kernel(small)
    assert kernel is not None and "dyn_tanh(" in kernel["source"], kernel_stage.program(small)["program"]


def test_bypass_ops_takes_one_op_out_of_its_fusion_group():
    unit = kernel_unit()
    eng = engine.Engine(has_tanh, passes=["bypass_ops"])
    small = eng.run(unit)
    # Every op with an argument of its own shape went, except the tanh: the sigmoid, the mul
    # and the sub in front of it (x flows straight into the add), and the b * b after it.
    kinds = small.op_kinds()
    assert "torch.tanh" in kinds and "torch.sigmoid" not in kinds and "operator.mul" not in kinds[:2], kinds
    assert small.size() < unit.size()
