"""Golden files of the fused generator's output: the lowered program and the generated C++ and
CUDA C of a pointwise chain, softmax and layer_norm (tests/codegen/golden/). Regenerate after a
deliberate change with DYNAMO_UPDATE_GOLDEN=1 (check the diff makes sense first)."""
import os
import pathlib
import sys

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from fused_harness import fused  # noqa: E402

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "codegen" / "golden"

CASES = {
    "chain": (lambda x: ((x * 2 + 1).relu() * 0.5 - 0.25).sigmoid(), (torch.zeros(4, 8),)),
    "softmax": (lambda x: torch.softmax(x, -1), (torch.zeros(6, 10),)),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (16,), w, b), (torch.zeros(3, 16), torch.zeros(16), torch.zeros(16))),
}


def _check(path, actual):
    if os.environ.get("DYNAMO_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual)
        return
    assert path.exists(), f"{path} is missing; run with DYNAMO_UPDATE_GOLDEN=1 to create it"
    assert actual == path.read_text(), (
        f"{path} differs from the output. Check the change makes sense, then regenerate with "
        f"DYNAMO_UPDATE_GOLDEN=1.\n--- actual ---\n{actual}")


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case):
    fn, inputs = CASES[case]
    report = fused(fn, *inputs).report
    text = report["program"] + "\n"
    for k in report["kernels"]:
        text += f"==== {k['name']} ({k['loops']}) C++\n{k['source']}==== {k['name']} CUDA\n{k['cuda_source']}"
    _check(GOLDEN / f"{case}.txt", text)
