"""The per-process memo of example results (core/src/interp/example_memo.h): capture runs each
torch call on meta tensors once per distinct key (callable, every argument's sizes, strides,
offset, dtype, requires_grad, the grad mode and default dtype). What capture reads from a result's
example (strides, dtype, shape) becomes a constant of the graph, so a key that missed one of
them would bake another call's value in: each test makes a first call that fills the memo, then
one that differs in exactly one field, and compares both with eager. The memo lives across
captures until dynamo.reset(): a second capture of the same function here uses a copy of its code
(fresh()), so that the memo is still filled."""
import types

import pytest
import torch

import dynamo
from capture_harness import Recorder


@pytest.fixture(autouse=True)
def _fresh():
    dynamo.reset()
    yield
    dynamo.reset()


def fresh(fn):
    """fn with a code object of its own: captured anew, with the memo as the last capture left it."""
    return types.FunctionType(fn.__code__.replace(co_name=fn.__code__.co_name + "_again"), fn.__globals__,
                              fn.__name__, fn.__defaults__, fn.__closure__)


def one_graph(fn, *args):
    with Recorder() as rec:
        out = dynamo.compile(fn, fullgraph=True, backend="eager")(*args)
    assert len(rec.graphs) == 1, rec.records
    return out


def test_strides_of_a_repeated_call_are_its_own():
    def f(a, b):
        y1, y2 = torch.relu(a), torch.relu(b)  # the same call and sizes, other strides
        return y1.stride(), y2.stride(), y1.is_contiguous(), y2.is_contiguous(), y1 * 2, y2 * 2

    a, b = torch.randn(4, 6), torch.randn(6, 4).t()
    got, want = one_graph(f, a, b), f(a, b)
    assert got[:4] == want[:4] == ((6, 1), (1, 4), True, False)
    torch.testing.assert_close(got[4:], want[4:], rtol=0, atol=0)


def test_dtype_follows_the_default_dtype():
    def f(x):
        y = x / 2  # an integer tensor / 2: the default dtype
        return y.dtype, y

    x = torch.arange(6)
    assert one_graph(f, x)[0] == torch.float32
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        got = one_graph(fresh(f), x)
    finally:
        torch.set_default_dtype(old)
    assert got[0] == torch.float64
    assert got[1].dtype == torch.float64


def test_batch_norm_of_other_channels_after_a_hit():
    def f(x, w):
        y = torch.nn.functional.batch_norm(x, w, w, w, w, False, 0.1, 1e-5)
        z = torch.nn.functional.batch_norm(x, w, w, w, w, False, 0.1, 1e-5)  # a hit
        return y.shape, z.shape, y + z

    x, w = torch.randn(2, 3, 4, 4), torch.rand(3) + 0.5
    got, want = one_graph(f, x, w), f(x, w)
    assert got[:2] == want[:2]
    torch.testing.assert_close(got[2], want[2], rtol=0, atol=0)
    x5, w5 = torch.randn(2, 5, 4, 4), torch.rand(5) + 0.5
    got = one_graph(fresh(f), x5, w5)
    assert got[0] == got[1] == (2, 5, 4, 4)
    bad = torch.rand(4) + 0.5  # 4 weights for 5 channels: eager raises, so must the compiled call
    with pytest.raises(RuntimeError):
        f(x5, bad)
    with pytest.raises(Exception):
        dynamo.compile(fresh(f), fullgraph=True, backend="eager")(x5, bad)


def test_in_place_update_of_a_leaf_that_requires_grad_still_raises():
    def f(x):
        x.relu_()
        return x * 2

    plain = torch.randn(3, 4)
    torch.testing.assert_close(dynamo.compile(f, backend="eager")(plain.clone()), f(plain.clone()), rtol=0, atol=0)
    leaf = torch.randn(3, 4, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        f(leaf)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        dynamo.compile(fresh(f), backend="eager")(leaf)


def test_in_place_hit_returns_the_updated_input():
    def f(x, y):
        x.clamp_(-0.5, 0.5)
        y.clamp_(-0.5, 0.5)  # a hit: x and y have the same metadata
        return x.stride(), y.stride(), x + y

    a, b = torch.randn(4, 4), torch.randn(4, 4)
    got = one_graph(f, a.clone(), b.clone())
    want = f(a.clone(), b.clone())
    assert got[:2] == want[:2]
    torch.testing.assert_close(got[2], want[2], rtol=0, atol=0)


def test_a_conjugate_view_is_not_a_plain_tensor_of_its_metadata():
    # resolve_conj returns a plain tensor itself and copies a conjugate view: a memo keyed on
    # sizes, strides and dtype alone returned the view, and the mul_ then wrote through it into z.
    def f(a, z):
        a.resolve_conj()
        c = z.conj().resolve_conj()
        c.mul_(2)
        return z.clone(), c, z.conj().imag.resolve_neg() * 1

    a, z = torch.randn(3, dtype=torch.complex64), torch.randn(3, dtype=torch.complex64)
    want = f(a.clone(), z.clone())
    got = dynamo.compile(f, backend="eager")(a.clone(), z.clone())
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0)

