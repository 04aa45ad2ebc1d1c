"""Adversarial pass (issue #7), category c: numpy inside models (sizes through numpy, numpy
scalars times tensors, x.numpy() / torch.from_numpy round trips and their memory sharing,
positional-encoding tables) and math on shapes."""
import math

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from adversarial_harness import check_case, params, registry

CASES, case = registry()


class Attention(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(-2, -1) / np.sqrt(q.shape[-1])
        return scores.softmax(-1) @ v, type(np.sqrt(q.shape[-1])).__name__


@case
def np_sqrt_of_dim_scaling():
    m = Attention()
    x = torch.randn(2, 5, 8)
    return m, lambda f, i: f(x[:, : 3 + i])


@case
def numpy_roundtrip_shares_memory():
    def fn(x):
        arr = x.numpy()
        t = torch.from_numpy(arr)
        return t, t.data_ptr() == x.data_ptr()

    def drive(f, i):
        x = torch.arange(4.0) + i
        t, shared = f(x)
        x.add_(100)
        return t, shared, x
    return fn, drive


@case
def numpy_array_of_sizes_prod():
    def fn(x):
        dims = np.array(x.shape)
        flat = int(np.prod(dims[1:]))
        return x.reshape(dims[0], flat), dims, flat
    xs = [torch.randn(2, 3, 4), torch.randn(2, 3, 4), torch.randn(3, 2, 2)]
    return fn, lambda f, i: f(xs[i])


@case
def np_random_inside_forward():
    def fn(x):
        keep = np.random.rand(x.shape[0]) > 0.5
        idx = np.nonzero(keep)[0]
        return x[torch.from_numpy(idx)], keep
    x = torch.randn(8, 2)
    return fn, lambda f, i: f(x)


@case
def np_arange_index():
    def fn(x):
        idx = torch.from_numpy(np.arange(0, x.shape[1], 2))
        return x[:, idx], idx.dtype
    x = torch.randn(3, 7)
    return fn, lambda f, i: f(x[:, : 7 - i])


@case
def math_on_shapes_for_padding():
    def fn(x, window=4):
        h, w = x.shape[-2:]
        pad_h = (math.ceil(h / window) * window) - h
        pad_w = int(np.ceil(w / window)) * window - w
        return F.pad(x, (0, pad_w, 0, pad_h)), (pad_h, pad_w)
    xs = [torch.randn(1, 1, 5, 6), torch.randn(1, 1, 8, 8), torch.randn(1, 1, 3, 9)]
    return fn, lambda f, i: f(xs[i])


@case
def numpy_argmax_returns_numpy_int():
    def fn(x):
        a = x.detach().cpu().numpy()
        best = a.argmax()
        return best, type(best).__name__, a[best]
    xs = [torch.tensor([1.0, 5.0, 2.0]), torch.tensor([9.0, 0.0]), torch.tensor([0.0, 0.0, 3.0])]
    return fn, lambda f, i: f(xs[i])


@case
def numpy_float32_scalar_times_tensor():
    def fn(x):
        s = np.float32(0.5)
        d = np.float64(2.0)
        return x * s, x * d, s * x, (x * d).dtype
    x = torch.randn(3)
    return fn, lambda f, i: f(x)


@case
def torch_tensor_from_numpy_list_dtype():
    def fn(x):
        anchors = np.array([[10, 13], [16, 30], [33, 23]]) / 416.0
        a = torch.tensor(anchors)
        b = torch.as_tensor(anchors, dtype=x.dtype)
        return x[..., :2] * b, a.dtype, a
    x = torch.randn(3, 4)
    return fn, lambda f, i: f(x)


@case
def np_stack_of_numpy_views():
    def fn(xs):
        arrs = [t.numpy() for t in xs]
        stacked = np.stack(arrs, axis=0)
        return torch.from_numpy(stacked).sum(0), stacked.shape
    xs = [torch.randn(2, 2) for _ in range(3)]
    return fn, lambda f, i: f(xs[: i + 1])


@case
def returned_numpy_view_is_live():
    def fn(x):
        y = x * 2
        return y.numpy(), y

    def drive(f, i):
        arr, y = f(torch.randn(3))
        y.add_(1)
        return arr, y
    return fn, drive


@case
def numpy_bool_mask_indexing():
    def fn(x):
        mask = np.array([True, False, True, True])
        return x[torch.from_numpy(mask)], x[:, mask.tolist()]
    x = torch.randn(4, 4)
    return fn, lambda f, i: f(x + i)


_PE_ORIG = np.sin(np.arange(16)[:, None] / np.power(10000, np.arange(8)[None, :] / 8)).astype(np.float32)
PE_TABLE = _PE_ORIG.copy()


@case
def global_numpy_table_changed_between_calls():
    def fn(x):
        pe = torch.from_numpy(PE_TABLE[: x.shape[1]])
        return x + pe

    g = globals()
    orig = _PE_ORIG

    def drive(f, i):
        if i == 1:
            g["PE_TABLE"] = orig * 2
        if i == 2:
            PE_TABLE[:] = 0  # in-place change of the array the global names
        return f(torch.zeros(2, 5, 8))

    g["PE_TABLE"] = orig.copy()
    return fn, drive


def sinusoid_table(n_pos, d):
    def angle_vec(pos):
        return [pos / np.power(10000, 2 * (j // 2) / d) for j in range(d)]
    table = np.array([angle_vec(p) for p in range(n_pos)])
    table[:, 0::2] = np.sin(table[:, 0::2])
    table[:, 1::2] = np.cos(table[:, 1::2])
    return torch.FloatTensor(table)


@case
def sinusoid_table_built_in_forward():
    def fn(x):
        return x + sinusoid_table(x.shape[1], x.shape[2]).unsqueeze(0)
    xs = [torch.randn(1, 4, 6), torch.randn(1, 4, 6), torch.randn(2, 3, 4)]
    return fn, lambda f, i: f(xs[i])


@case
def view_with_numpy_int():
    def fn(x):
        n = np.prod(x.shape[1:])
        return x.view(x.size(0), n), type(n).__name__
    x = torch.randn(2, 3, 4)
    return fn, lambda f, i: f(x)


@case
def numpy_inplace_write_mutates_tensor():
    def fn(x):
        arr = x.numpy()
        arr[0] = 42.0
        return x * 1

    xs = [torch.zeros(3), torch.ones(3), torch.arange(3.0)]
    return fn, lambda f, i: (f(xs[i]), xs[i].clone())


@case
def shape_math_with_floor_and_divmod():
    def fn(x, patch=4):
        b, c, h, w = x.shape
        nh, rh = divmod(h, patch)
        nw = w // patch
        out = x[:, :, : nh * patch, : nw * patch]
        out = out.reshape(b, c, nh, patch, nw, patch).permute(0, 2, 4, 1, 3, 5)
        return out.reshape(b, nh * nw, -1), (nh, rh, nw), math.floor(h / patch)
    xs = [torch.randn(1, 2, 8, 8), torch.randn(1, 2, 9, 12), torch.randn(2, 1, 4, 5)]
    return fn, lambda f, i: f(xs[i])


@case
def numpy_clip_of_item_value():
    def fn(x, lr):
        g = x.norm().item()
        coef = float(np.clip(1.0 / (g + 1e-6), 0.0, 1.0))
        return x * coef * lr, coef
    xs = [torch.tensor([0.1, 0.1]), torch.tensor([3.0, 4.0]), torch.tensor([0.0, 0.0])]
    return fn, lambda f, i: f(xs[i], 0.1)


@pytest.mark.parametrize("case", params(CASES, {}))
def test_adversarial_numpy(case):
    check_case(case)
