"""Adversarial pass, round 6 (outsider testing): dynamic shapes combined with graph breaks, the
fused backend on training steps with a batch of one, and transformer blocks, written the way model
code is written. Each program runs eagerly and compiled; results, gradients and raised exceptions
are compared: bitwise under the eager backends, within rtol = atol = 1e-4 under "fused" (its
kernels reassociate sums and use their own exp)."""
import math
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dynamo
from adversarial_harness import same

TOL = 1e-4


def close(got, want, path="out", exact=False):
    """None when got matches want (exact, or within TOL for floating tensors), else a message."""
    if isinstance(want, (list, tuple)):
        assert type(got) is type(want) and len(got) == len(want), f"{path}: {got!r} vs {want!r}"
        for i, (g, w) in enumerate(zip(got, want)):
            m = close(g, w, f"{path}[{i}]", exact)
            if m:
                return m
        return None
    if exact or not isinstance(want, torch.Tensor) or not want.is_floating_point():
        return same(got, want, path)
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"{path}: {got.dtype}{tuple(got.shape)} vs {want.dtype}{tuple(want.shape)}"
    ok = torch.allclose(got.detach(), want.detach(), rtol=TOL, atol=TOL, equal_nan=True)
    return None if ok else f"{path}: max difference {(got - want).abs().max().item()}"


def run(build, calls, backend, dynamic=None):
    """[(kind, value)] per call of the target build() makes, eagerly (backend None) or compiled."""
    dynamo.reset()
    torch.manual_seed(0)
    target, drive = build()
    f = target if backend is None else dynamo.compile(target, backend=backend, dynamic=dynamic)
    log = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(calls):
            torch.manual_seed(100 + i)
            try:
                log.append(("ok", drive(f, i)))
            except Exception as e:  # noqa: BLE001 - the exception is what is compared
                log.append(("raise", type(e), str(e)))
    dynamo.reset()
    return log


def check(build, calls, backend, dynamic=None):
    eager, compiled = run(build, calls, None), run(build, calls, backend, dynamic)
    for i, (e, c) in enumerate(zip(eager, compiled)):
        assert e[0] == c[0], f"call {i}: eager {e[0]} {str(e[1:])[:300]} vs compiled {c[0]} {str(c[1:])[:300]}"
        m = close(c[1:], e[1:], f"call {i}", exact=backend != "fused")
        assert m is None, m


BACKENDS = ("eager", "aot_eager", "fused")
DYNAMIC = (None, True)


# ----------------------------------------------------------------------------------------------
# Training steps with a batch of one under "fused": eager's backward of `w.sum(1) / heads`
# (nn.MultiheadAttention's averaged weights) expands the gradient with a stride 0; a view of that
# expand went into a buffer laid out with eager's strides, and copy_ refused to write into the
# overlapping memory ("more than one element of the written-to tensor refers to a single memory
# location").

def heads_averaged_attention():
    def fn(q, k, v):
        w = torch.bmm(q, k.transpose(1, 2)).softmax(-1)
        return torch.bmm(w, v), w.view(1, 2, 4, 4).sum(dim=1) / 2

    def drive(f, i):
        q, k, v = (torch.randn(2, 4, 8, requires_grad=True) for _ in range(3))
        out, w = f(q, k, v)
        return (out, w) + torch.autograd.grad(out.sum() + (w * w).sum(), (q, k, v))
    return fn, drive


def mha_train_batch_sizes():
    mha = nn.MultiheadAttention(16, 2, batch_first=True)
    shapes = [(2, 5), (1, 4), (3, 7), (1, 6)]

    def drive(f, i):
        B, T = shapes[i]
        x = torch.randn(B, T, 16, requires_grad=True)
        mask = torch.triu(torch.full((T, T), float("-inf")), 1)
        out, w = f(x, x, x, attn_mask=mask, need_weights=True)
        (out.sum() + w.square().sum()).backward()
        grads = [p.grad.clone() for p in mha.parameters()]
        mha.zero_grad(set_to_none=True)
        return out, w, x.grad, grads
    return mha, drive


@pytest.mark.parametrize("dynamic", DYNAMIC)
@pytest.mark.parametrize("backend", BACKENDS)
def test_backward_of_heads_averaged_attention(backend, dynamic):
    check(heads_averaged_attention, 2, backend, dynamic)


@pytest.mark.parametrize("dynamic", DYNAMIC)
@pytest.mark.parametrize("backend", BACKENDS)
def test_multihead_attention_training_with_batch_of_one(backend, dynamic):
    check(mha_train_batch_sizes, 4, backend, dynamic)
