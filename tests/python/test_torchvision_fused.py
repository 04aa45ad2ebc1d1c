"""torchvision classifiers compiled with the fused backend (fullgraph=True, eval, no_grad) are one
graph that the fused backend lowers, and match eager and a float64 copy within the fused
tolerance (torchvision_cases.fused_comparison). CI runs one classifier of each family, the
cheapest, at batch 1; all 80 run in scripts/torchvision_fused.py, whose last results are in
docs/stacks.md (issue 13)."""
import pytest
import torch

import dynamo
from capture_harness import Recorder
from stacks import only_on_stack2
from torchvision_cases import all_builders, build, fused_comparison, input_for, with_nonzero_heads

torch.set_num_threads(1)

# One cheap builder of each family of torchvision_cases.FAMILIES (test_torchvision's
# representatives less the second of a family: efficientnet_v2_s, mobilenet_v2, regnet_y_400mf,
# swin_v2_t are in the full sweep).
FUSED_REPRESENTATIVES = [
    "alexnet", "convnext_tiny", "densenet121", "efficientnet_b0", "googlenet", "inception_v3",
    "maxvit_t", "mnasnet0_5", "mobilenet_v3_small", "regnet_x_400mf", "resnet18", "resnext50_32x4d",
    "shufflenet_v2_x0_5", "squeezenet1_1", "swin_t", "vgg11_bn", "vit_b_32", "wide_resnet50_2",
]

pytestmark = only_on_stack2("the fused classifier sweep is stack 2's (torch 2.11's ATen graphs); "
                            "stack 1's fused models are test_fused_conv's and test_fused_backend's")


def test_every_family_has_a_representative():
    from torchvision_cases import FAMILIES
    names = set(all_builders())
    assert set(FUSED_REPRESENTATIVES) <= names
    assert [f for f in FAMILIES if not any(n.startswith(f) for n in FUSED_REPRESENTATIVES)] == []


# Strict: a fix turns the entry into a failure to remove from here.
XFAIL = {}  # mobilenet_v3_small was here: nn.Hardswish(inplace=True) after a conv (fixed, test_fused_conv)


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.xfail(strict=True, reason=XFAIL[n])]
                                               if n in XFAIL else []) for n in FUSED_REPRESENTATIVES])
def test_fused_one_graph_within_tolerance(name, monkeypatch, capfd):
    monkeypatch.setenv("DYNAMO_LOGS", "fusion")  # the C++ backend reads it at each compile
    dynamo.reset()
    model = with_nonzero_heads(build(name)).eval()  # eval changes no state: eager and compiled share it
    x = input_for(name, batch=1)
    compiled = dynamo.compile(model, backend="fused", fullgraph=True)
    with torch.no_grad(), Recorder() as rec:
        expected = model(x)
        got = compiled(x)
        model.double()
        ref = model(x.double())
    assert len(rec.graphs) == 1
    # the fused backend lowered the graph (no eager-runner fallback): its program was logged
    log = capfd.readouterr().err.splitlines()
    programs = [line for line in log if line.startswith("[dynamo fusion] ")  # (not each conv / mm
                and not line.startswith(("[dynamo fusion] conv step ",     # step's choice)
                                         "[dynamo fusion] mm step ", "[dynamo fusion] bmm step "))]
    assert len(programs) == 1, log[:5]
    assert any(line.startswith(("kernel ", "conv #")) for line in log)
    ok, err_fused, err_eager, diff, scale = fused_comparison(got, expected, ref)
    assert ok, (f"max |fused - fp64| {err_fused:.3g}, max |eager - fp64| {err_eager:.3g}, "
                f"max |fused - eager| {diff:.3g}, max |fp64| {scale:.3g}")
    assert scale > 0
