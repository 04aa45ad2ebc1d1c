"""aot_eager_decomp_partition against an fp64 reference (docs/aot.md): outputs and gradients of
the decomposed graph are within twice eager fp32's own error (max abs error over all outputs or
gradients, divided by the reference's largest magnitude), plus 1e-7."""
import copy

import pytest
import torch

import dynamo
import dynamo.aot as aot


def encoder():
    torch.manual_seed(0)
    m = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True, activation="gelu")
    return m, torch.randn(4, 6, 32)


def resnet18():
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    return torchvision.models.resnet18(), torch.randn(2, 3, 64, 64)


def _err(values, refs):
    scale = max(r.abs().max().item() for r in refs)
    return max((v.double() - r).abs().max().item() for v, r in zip(values, refs)) / scale


@pytest.mark.parametrize("make", [encoder, resnet18], ids=["encoder_gelu_layernorm_softmax", "resnet18"])
def test_decomposed_graph_within_twice_eagers_error_against_fp64(make):
    dynamo.reset()
    model, x = make()
    model.train()
    ref, eager, dec = copy.deepcopy(model).double(), copy.deepcopy(model), copy.deepcopy(model)
    r = ref(x.double())
    r.sum().backward()
    e = eager(x)
    e.sum().backward()
    d = dynamo.compile(dec, backend="aot_eager_decomp_partition", fullgraph=True)(x)
    d.sum().backward()
    rec = aot.last_records()[-1]
    assert rec["fallback"] is None and sum(rec["decompositions"].values()) > 0
    assert _err([d], [r]) <= 2 * _err([e], [r]) + 1e-7
    grads = lambda m: [p.grad for p in m.parameters()]  # noqa: E731
    assert _err(grads(dec), grads(ref)) <= 2 * _err(grads(eager), grads(ref)) + 1e-7
    dynamo.reset()
