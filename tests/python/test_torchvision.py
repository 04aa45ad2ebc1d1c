"""torchvision classification models compile with fullgraph=True to one graph and match eager
bitwise: outputs in eval mode; outputs, buffer updates (BatchNorm statistics) and gradients in
train mode.

CI runs the smallest builder of every family (about 4 minutes on 2 cores). Every builder of
torchvision 0.14 (80 of them; about 45 minutes) runs with DYNAMO_ALL_TORCHVISION=1; its last
results are in docs/models.md.
"""
import copy
import os

import pytest
import torch

import dynamo
from capture_harness import Recorder, same
from torchvision_cases import all_builders, build, input_for

FAMILY_REPRESENTATIVES = [
    "alexnet", "convnext_tiny", "densenet121", "efficientnet_b0", "efficientnet_v2_s", "googlenet",
    "inception_v3", "maxvit_t", "mnasnet0_5", "mobilenet_v2", "mobilenet_v3_small", "regnet_x_400mf",
    "regnet_y_400mf", "resnet18", "resnext50_32x4d", "shufflenet_v2_x0_5", "squeezenet1_1",
    "swin_t", "swin_v2_t", "vgg11_bn", "vit_b_32", "wide_resnet50_2",
]

MODELS = all_builders() if os.environ.get("DYNAMO_ALL_TORCHVISION") else FAMILY_REPRESENTATIVES


def flat(out):
    return list(out) if isinstance(out, tuple) else [out]


def pair(name, train):
    # a deep copy: the same parameters and buffers as a second build(name), without initialising
    # the weights again (seconds for the larger models)
    eager = build(name)
    compiled = copy.deepcopy(eager)
    eager.train(train)
    compiled.train(train)
    return eager, compiled


def test_representatives_exist_in_this_torchvision():
    assert set(FAMILY_REPRESENTATIVES) <= set(all_builders())


@pytest.mark.parametrize("name", MODELS)
def test_eval_one_graph_identical_outputs(name):
    dynamo.reset()
    eager, model = pair(name, train=False)
    x = input_for(name)
    compiled = dynamo.compile(model, fullgraph=True)
    with torch.no_grad(), Recorder() as rec:
        expected = eager(x)
        got = compiled(x)
        again = compiled(x)
    assert len(rec.graphs) == 1
    for e, g, a in zip(flat(expected), flat(got), flat(again)):
        assert same(g, e) and same(a, e)


@pytest.mark.parametrize("name", MODELS)
def test_train_identical_outputs_buffers_and_gradients(name):
    dynamo.reset()
    eager, model = pair(name, train=True)
    x = input_for(name)
    compiled = dynamo.compile(model, fullgraph=True)
    with Recorder() as rec:
        torch.manual_seed(1)  # dropout and stochastic depth draw the same numbers
        expected = eager(x)
        torch.manual_seed(1)
        got = compiled(x)
    assert len(rec.graphs) == 1
    assert all(same(g, e) for e, g in zip(flat(expected), flat(got)))
    sum(o.sum() for o in flat(expected)).backward()
    sum(o.sum() for o in flat(got)).backward()
    for (n, b_e), (_, b_c) in zip(eager.named_buffers(), model.named_buffers()):
        assert same(b_c, b_e), f"buffer {n} differs"
    for (n, p_e), (_, p_c) in zip(eager.named_parameters(), model.named_parameters()):
        assert (p_e.grad is None) == (p_c.grad is None), n
        if p_e.grad is not None:
            assert same(p_c.grad, p_e.grad), f"gradient of {n} differs"
