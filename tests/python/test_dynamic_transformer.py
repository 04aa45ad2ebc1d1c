"""Issue 15: a batch_first nn.TransformerEncoderLayer in eval mode under no_grad takes torch 1.13's
fused fast path (torch._transformer_encoder_layer_fwd, no meta kernel); its sequence length must
stay symbolic (at most 2 compiles for 30 lengths) with results equal to eager for every length."""
import contextlib

import pytest
import torch

import dynamo


@pytest.fixture(autouse=True)
def _fresh():
    dynamo.reset()
    yield
    dynamo.reset()


def _run(backend, train, nograd, layers, mask):
    torch.manual_seed(0)
    mod = torch.nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.0, batch_first=True)
    if layers:
        mod = torch.nn.TransformerEncoder(mod, layers, enable_nested_tensor=False)
    mod.train(train)
    recs = []
    dynamo.add_compile_listener(recs.append)
    try:
        fn = dynamo.compile(lambda x, m: mod(x, src_key_padding_mask=m), backend=backend)
        for length in range(2, 32):
            x = torch.randn(3, length, 16)
            m = None
            if mask:
                m = torch.zeros(3, length, dtype=torch.bool)
                m[0, -1] = True
            with torch.no_grad() if nograd else contextlib.nullcontext():
                got = fn(x, m)
                want = mod(x, src_key_padding_mask=m)
            assert torch.equal(got, want), length
    finally:
        dynamo.remove_compile_listener(recs.append)
    return [r["status"] for r in recs]


@pytest.mark.parametrize("train,nograd,layers,mask", [
    (False, True, 0, False),   # the fused fast path
    (False, True, 0, True),
    (False, True, 3, False),
    (False, False, 0, False),
    (True, True, 2, True),
    (True, False, 0, False),
])
def test_batch_first_encoder_compiles_twice_for_30_lengths(train, nograd, layers, mask):
    assert _run("eager", train, nograd, layers, mask) == ["compiled", "compiled"]


@pytest.mark.parametrize("backend", ["aot_eager", "fused"])
def test_batch_first_fast_path_other_backends(backend):
    assert _run(backend, False, True, 0, True) == ["compiled", "compiled"]
