"""torchvision classifiers in train mode under aot_eager: outputs, BatchNorm buffer updates and
every gradient equal eager bitwise (docs/aot.md). CI runs one model per family of a fast set;
scripts/aot_torchvision_all.py runs all 80 builders."""
import os
import sys

import pytest
import torch

import dynamo
import dynamo.aot as aot

sys.path.insert(0, os.path.dirname(__file__))
from capture_harness import same  # noqa: E402
from torchvision_cases import all_builders, build, input_for  # noqa: E402

FAST_SET = ["resnet18", "mobilenet_v2", "densenet121", "squeezenet1_1", "shufflenet_v2_x0_5",
            "mnasnet0_5", "regnet_x_400mf", "efficientnet_b0"]
MODELS = all_builders() if os.environ.get("DYNAMO_ALL_TORCHVISION") else FAST_SET


def flat(out):
    return list(out) if isinstance(out, tuple) else [out]


def compare_train_step(name, backend="aot_eager"):
    """Runs one train-mode step eagerly and compiled; returns a list of what differs (empty:
    bitwise equal) and the AOT records of the compile."""
    dynamo.reset()
    eager, model = build(name), build(name)
    model.load_state_dict(eager.state_dict())
    eager.train()
    model.train()
    x = input_for(name)
    before = len(aot.last_records())
    compiled = dynamo.compile(model, backend=backend, fullgraph=True)
    torch.manual_seed(1)
    expected = eager(x)
    torch.manual_seed(1)
    got = compiled(x)
    diffs = [f"output {i}" for i, (e, g) in enumerate(zip(flat(expected), flat(got))) if not same(g, e)]
    sum(o.sum() for o in flat(expected)).backward()
    sum(o.sum() for o in flat(got)).backward()
    for (n, b_e), (_, b_c) in zip(eager.named_buffers(), model.named_buffers()):
        if not same(b_c, b_e):
            diffs.append(f"buffer {n}")
    for (n, p_e), (_, p_c) in zip(eager.named_parameters(), model.named_parameters()):
        if (p_e.grad is None) != (p_c.grad is None) or (p_e.grad is not None and not same(p_c.grad, p_e.grad)):
            diffs.append(f"gradient of {n}")
    return diffs, aot.last_records()[before:]


#: Models known not to be bitwise equal (docs/aot.md, "Known gaps"); none in the fast set.
NOT_BITWISE = set()


@pytest.mark.parametrize("name", MODELS)
def test_train_step_bitwise_equal_to_eager(name):
    if name in NOT_BITWISE:
        pytest.xfail("functionalized trace: last-bit gradient differences (docs/aot.md)")
    diffs, records = compare_train_step(name)
    assert not diffs
    assert records and all(r["fallback"] is None and r["training"] for r in records)
