"""dynamo-minify --after=aot: the unit is the ATen graph the AOT layer hands to its forward or
backward compiler. A forward compiler that refuses aten::relu and a backward graph that fails at
aten::threshold_backward (test-only compilers, tests/python/minify_faults.py) are each
shrunk to that one ATen op, and the repro (ATen code) fails the same way in a fresh process."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from minify_util import SMALL_MODEL, repro_nodes, run, run_repro  # noqa: E402
from stacks import STACK2  # noqa: E402

# The small model's backward graph: torch 1.13's AOT trace has one aten._reshape_alias and one
# view where torch 2.x's has three views (stack 2: 28 nodes). (32 / 31 before forward values an mm
# or convolution_backward reads were saved rather than recomputed: backends/src/partition.)
BW_NODES = 28 if STACK2 else 27


@pytest.mark.parametrize("backend, graph, op, message", [
    ("aot_fw_raise_on_relu", "forward graph 0 of aot_eager (18 ATen nodes, compiler fw_raise_on_relu)",
     "torch.ops.aten.relu.default", "the forward compiler cannot compile aten::relu"),
    ("aot_bw_raise_on_threshold_backward",
     f"backward graph 1 of aot_eager ({BW_NODES} ATen nodes, compiler bw_raise_on_threshold_backward)",
     "torch.ops.aten.threshold_backward.default",
     "the backward graph cannot run aten::threshold_backward"),
])
def test_aot_graph_is_minified_to_the_failing_aten_op(tmp_path, backend, graph, op, message):
    code, _, err = run("dynamo-minify", "--after=aot", "-o", tmp_path / "r.py", SMALL_MODEL,
                       backend, "--train", cwd=tmp_path)
    assert code == 0, err
    assert f"{graph} fails: builtins.RuntimeError: fault injected: {message}" in err
    assert "it reproduces the failure in a fresh process" in err
    nodes = repro_nodes((tmp_path / "r.py").read_text())
    assert len(nodes) == 1 and op in nodes[0], nodes
    rc, out = run_repro(tmp_path / "r.py", tmp_path)
    assert rc == 1 and f"RuntimeError: fault injected: {message}" in out
