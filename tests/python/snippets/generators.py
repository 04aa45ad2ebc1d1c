"""Generators made and consumed in the function: generator functions, generator expressions
passed to zip, list, next, enumerate, tuple, dict, any/all, and for loops."""
import torch
import torch.nn as nn

from . import snippet


@snippet
def sum_of_generator_expression():
    def f(xs):
        return sum(x.mean() for x in xs)
    return f, ([torch.randn(3), torch.randn(3)],)


@snippet
def list_of_generator_expression():
    layers = nn.ModuleList(nn.Linear(3, 3) for _ in range(2))
    def f(x):
        return torch.stack(list(l(x) for l in layers))
    return f, (torch.randn(2, 3),)


@snippet
def zip_with_generator():
    def f(xs, ws):
        return [x * w for x, w in zip(xs, (w * 2 for w in ws))]
    return f, ([torch.randn(2), torch.randn(2)], [1.0, 2.0])


@snippet
def next_of_generator():
    def f(feats):
        first = next(t for t in feats if t.dim() == 4)
        return first.mean()
    return f, ([torch.randn(3), torch.randn(1, 2, 3, 3)],)


@snippet
def enumerate_generator():
    def f(xs):
        out = 0
        for i, y in enumerate(x * 2 for x in xs):
            out = out + y * i
        return out
    return f, ([torch.randn(3)] * 3,)


@snippet
def generator_function_in_for():
    def pairs(xs):
        for i in range(len(xs) - 1):
            yield xs[i], xs[i + 1]

    def f(xs):
        return [a - b for a, b in pairs(xs)]
    return f, ([torch.randn(2) for _ in range(3)],)


@snippet
def tuple_of_generator():
    def f(x):
        return tuple(x[i] * 2 for i in range(x.shape[0]))
    return f, (torch.randn(3, 2),)


@snippet
def dict_of_generator_pairs():
    def f(x):
        d = dict((f"s{i}", x * i) for i in range(3))
        return d["s2"] - d["s1"]
    return f, (torch.randn(4),)


@snippet
def any_all_over_generator_of_sizes():
    def f(xs):
        if all(x.shape == xs[0].shape for x in xs):
            return torch.stack(xs).sum(0)
        return xs[0]
    return f, ([torch.randn(2, 2), torch.randn(2, 2)],)


@snippet
def max_over_generator_of_dims():
    def f(xs):
        n = max(x.shape[-1] for x in xs)
        return [torch.nn.functional.pad(x, (0, n - x.shape[-1])) for x in xs]
    return f, ([torch.randn(2, 3), torch.randn(2, 5)],)


@snippet
def generator_function_yielding_layer_outputs():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(3, 3), nn.Linear(3, 3)])

        def stages(self, x):
            for layer in self.layers:
                x = layer(x)
                yield x

        def forward(self, x):
            return list(self.stages(x))[-1]
    return Net(), (torch.randn(2, 3),)


@snippet
def map_over_generator():
    def f(xs):
        return torch.cat(list(map(torch.relu, (x - 0.5 for x in xs))))
    return f, ([torch.randn(2), torch.randn(3)],)
