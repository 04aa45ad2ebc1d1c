"""dynamo-bisect's counted-pass search at torchvision scale: resnet18 (69 captured nodes, a
1x3x32x32 input) with the test-only pass test_corrupt_node breaking one relu deep in layer3
(DYNAMO_TEST_CORRUPT_NODE=relu_13, the 53rd call node). The bisector must name the pass and
exactly that application, by a binary search over DYNAMO_BISECT_PASS=test_corrupt_node:N (the
applications are numbered over the process: 200 in the failing run, whose fallbacks compile the
modules' frames one by one). 12 runs of the script; labelled `slow` (tests/CMakeLists.txt): 17 s
of CPU, but 170 s of wall time on the shared 2-core machine under load."""
import importlib.util
import json
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from minify_util import run  # noqa: E402

SCRIPT = """import torch, torchvision, dynamo
torch.manual_seed(0)
model = torchvision.models.resnet18().eval()
with torch.no_grad():
    print(dynamo.compile(model, backend="eager")(torch.randn(1, 3, 32, 32)).sum().item())
"""


@pytest.mark.skipif(importlib.util.find_spec("torchvision") is None, reason="needs torchvision")
def test_counted_pass_finds_the_one_bad_application_in_resnet18(tmp_path):
    (tmp_path / "tv.py").write_text(SCRIPT)
    code, _, err = run("dynamo-bisect", "--backends", "eager", "--workdir", "b", "tv.py",
                       cwd=tmp_path, env={"DYNAMO_TEST_CORRUPT_NODE": "relu_13"})
    assert code == 0, err
    lines = err.splitlines()
    # (The eager backend's shape propagation meets the corrupted call first.)
    assert lines[0].startswith("dynamo-bisect: tv.py fails with backend eager: builtins.RuntimeError: "
                               "ShapeProp error for: node=%relu_1N_corrupted "), err
    assert "dynamo-bisect: pass: disabling pass test_corrupt_node makes the failure go away (2 runs)" in lines
    app = next(line for line in lines if line.startswith("dynamo-bisect: application: "))
    assert re.fullmatch(
        r"dynamo-bisect: application: application 53 of \d+ of pass test_corrupt_node brings the "
        r"failure \(with its first 52 the script passes; \d+ runs\): node relu_13 "
        r"\(torch\.nn\.functional\.relu\) at \S+/torch/nn/modules/activation\.py:\d+: return "
        r"F\.relu\(input, inplace=self\.inplace\), in the graph of ResNet\.forward "
        r"\(\S+/torchvision/models/resnet\.py:\d+\)", app), app
    result = json.loads((tmp_path / "b" / "result.json").read_text())
    runs = {r["label"]: r for r in result["runs"]}
    # The search's own evidence: 53 applications fail, 52 pass.
    assert runs["applications-53"]["failure"] is not None
    assert runs["applications-52"]["failure"] is None
    # The build's interpreter, as the tool names it: python3 on stack 1, the venv's python on stack 2.
    assert f"DYNAMO_BISECT_PASS=test_corrupt_node:53 {os.path.basename(sys.executable)} tv.py" in next(
        s["command"] for s in result["steps"] if s["step"] == "application")
    assert len(result["runs"]) <= 13   # original, backend, 2 pass runs, a binary search over the applications
