"""numpy arrays in compiled code (core/src/interp/call_constructs.cpp; issue 14):
torch.from_numpy / torch.as_tensor of an array read from the frame is a graph input of its own,
fetched as torch.from_numpy(<source>) on every call (it shares the array's memory as in eager),
guarded on dtype, shape and strides; np.array([...]) of constants made in the function becomes
torch.tensor(data, dtype=...). What needs an array's data or an array made from values the
graph computes breaks, with a reason."""
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import dynamo
from capture_harness import Recorder, same


@pytest.fixture(autouse=True)
def _fresh():
    dynamo.reset()
    yield
    dynamo.reset()


def one_graph(fn, *args, backend="eager"):
    with Recorder() as rec:
        out = dynamo.compile(fn, fullgraph=True, backend=backend)(*args)
    assert len(rec.graphs) == 1, rec.records
    return out, rec


def normalise(x, mean):
    t = torch.from_numpy(mean)
    t.mul_(2)  # writes the caller's array, as in eager
    return (x - t) / 2, t


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_from_numpy_of_an_input_array_shares_its_memory(backend):
    x = torch.randn(2, 3)
    a, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.arange(6, dtype=np.float32).reshape(2, 3)
    out, rec = one_graph(normalise, x, a, backend=backend)
    ref = normalise(x, b)
    assert same(out, ref) and np.array_equal(a, b)
    assert out[1].data_ptr() == a.ctypes.data  # the returned tensor is a view of the caller's array
    assert "TENSOR_MATCH   tensor torch.from_numpy(mean): float32 cpu sizes=[2, 3] strides=[3, 1]" in rec.compiled[0]["guard_text"]


def test_a_new_array_reuses_the_entry_and_dtype_or_strides_recompile():
    cf = dynamo.compile(normalise)
    x = torch.randn(2, 3)
    with Recorder() as rec:
        for arr in [np.ones((2, 3), np.float32), np.full((2, 3), 3.0, np.float32),   # same entry
                    np.ones((2, 3), np.float64),                                     # dtype: recompiles
                    np.ones((2, 6), np.float32)[:, ::2]]:                            # strides: recompiles
            ref_arr = arr.copy()
            out = cf(x, arr)
            assert same(out, normalise(x, ref_arr))
    assert len(rec.compiled) == 3
    reasons = [g["reason"] for r in rec.records for m in r["misses"] for g in m["failures"]]
    assert any("torch.from_numpy(mean)" in r and "dtype" in r for r in reasons), reasons
    assert any("torch.from_numpy(mean)" in r and "stride" in r for r in reasons), reasons


def test_as_tensor_of_an_array_attribute():
    class Anchors(nn.Module):
        def __init__(self):
            super().__init__()
            self.anchors = np.array([[10, 13], [16, 30], [33, 23]], dtype=np.float32)

        def forward(self, wh):
            return wh / torch.as_tensor(self.anchors)

    m = Anchors()
    wh = torch.rand(3, 2) * 40
    out, _ = one_graph(m, wh)
    assert same(out, m(wh))


def test_np_array_of_constants_is_a_tensor_of_them():
    def f(x):
        w = torch.from_numpy(np.array([0.2, 0.3, 0.5], dtype=np.float32))
        return x @ w, torch.as_tensor(np.asarray([[1, 2], [3, 4]])).sum()

    x = torch.randn(2, 3)
    out, rec = one_graph(f, x)
    assert same(out, f(x)) and out[1].dtype == torch.int64


def test_what_needs_array_data_breaks_with_a_reason():
    def readonly(x, arr):
        return x * torch.from_numpy(arr)

    arr = np.ones((2, 3), np.float32)
    arr.flags.writeable = False
    with pytest.raises(dynamo.Unsupported, match=r"torch.from_numpy\(\) of a read-only numpy array"):
        dynamo.compile(readonly, fullgraph=True)(torch.ones(2, 3), arr)

    def of_tensor(x):
        return torch.from_numpy(x.numpy() * 2)

    with pytest.raises(dynamo.Unsupported, match=r"Tensor.numpy\(\) needs the tensor's data"):
        dynamo.compile(of_tensor, fullgraph=True)(torch.ones(2))

    def mutated(x):
        a = np.array([1.0, 2.0], dtype=np.float32)
        a[0] = 5.0
        return x + torch.from_numpy(a)

    with pytest.raises(dynamo.Unsupported):
        dynamo.compile(mutated, fullgraph=True)(torch.ones(2))
    dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns on a read-only array, in eager too
        for fn, args in [(readonly, (torch.ones(2, 3), arr)), (of_tensor, (torch.ones(2),)),
                         (mutated, (torch.ones(2),))]:
            assert same(dynamo.compile(fn)(*args), fn(*args))
