"""numpy and math on sizes and constants (scales, fan-in, positions)."""
import math

import numpy as np
import torch
import torch.nn as nn

from . import snippet


@snippet
def np_sqrt_of_head_dim():
    def f(q, k):
        return q @ k.transpose(-1, -2) / np.sqrt(q.size(-1))
    return f, (torch.randn(2, 3, 4), torch.randn(2, 3, 4))


@snippet
def math_sqrt_of_head_dim():
    def f(q, k):
        return q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))
    return f, (torch.randn(2, 3, 4), torch.randn(2, 3, 4))


@snippet
def np_prod_of_shape():
    def f(x):
        n = int(np.prod(x.shape[1:]))
        return x.view(-1, n)
    return f, (torch.randn(2, 3, 4),)


@snippet
def np_floor_of_size():
    def f(x):
        h = int(np.floor(x.shape[-1] / 2))
        return x[..., :h]
    return f, (torch.randn(2, 7),)


@snippet
def math_log_of_constant():
    def f(x, d_model=8):
        div = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        return x * div
    return f, (torch.randn(4),)


@snippet
def np_array_of_numbers():
    def f(x):
        w = torch.from_numpy(np.array([0.2, 0.3, 0.5], dtype=np.float32))
        return x @ w
    return f, (torch.randn(2, 3),)


@snippet
def np_log2_levels():
    def f(x):
        levels = int(np.log2(x.shape[-1]))
        for _ in range(levels):
            x = x[..., ::2]
        return x
    return f, (torch.randn(2, 8),)


@snippet
def math_ceil_padding():
    def f(x, stride=3):
        pad = math.ceil(x.shape[-1] / stride) * stride - x.shape[-1]
        return torch.nn.functional.pad(x, (0, pad))
    return f, (torch.randn(1, 7),)


@snippet
def np_random_free_mean_of_list():
    def f(x):
        return x * float(np.mean([1.0, 2.0, 3.0]))
    return f, (torch.randn(3),)


@snippet
def np_pi_and_cos_schedule():
    def f(x, step=3, total=10):
        return x * 0.5 * (1 + np.cos(np.pi * step / total))
    return f, (torch.randn(3),)


@snippet
def float_of_shape_scale():
    fc = nn.Linear(4, 4)
    def f(x):
        return fc(x) * (1.0 / float(x.shape[-1]) ** 0.5)
    return f, (torch.randn(2, 4),)


@snippet
def from_numpy_input_batch():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(6, 2)

        def forward(self, batch):  # a data loader's numpy batch, converted in forward
            x = torch.from_numpy(batch).float()
            return self.fc(x)

    return Net(), (np.random.RandomState(0).rand(4, 6),)


@snippet
def numpy_mean_std_attributes():
    class Normalize(nn.Module):
        def __init__(self):
            super().__init__()
            self.mean = np.array([0.485, 0.456, 0.406], dtype=np.float32).reshape(3, 1, 1)
            self.std = np.array([0.229, 0.224, 0.225], dtype=np.float32).reshape(3, 1, 1)

        def forward(self, img):
            return (img - torch.as_tensor(self.mean)) / torch.as_tensor(self.std)

    return Normalize(), (torch.rand(2, 3, 4, 4),)


@snippet
def yolo_anchor_grid_from_numpy():
    anchors = np.array([[10, 13], [16, 30], [33, 23]], dtype=np.float32)

    def decode(pred, stride=8):
        wh = torch.exp(pred[..., 2:4]) * torch.from_numpy(anchors).view(1, 3, 1, 2)
        xy = torch.sigmoid(pred[..., 0:2]) * stride
        return torch.cat([xy, wh], -1)

    return decode, (torch.randn(2, 3, 5, 4),)


@snippet(breaks="Tensor.numpy() needs the tensor's data")
def numpy_postprocess_of_tensor():
    def f(logits):
        probs = logits.softmax(-1).numpy()
        return torch.from_numpy(np.argsort(-probs, axis=-1)[:, :2].copy())

    return f, (torch.randn(3, 5),)
