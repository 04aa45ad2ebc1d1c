"""Sets built and used in the function: seen-sets, layer selections, deduplication."""
import torch
import torch.nn as nn

from . import snippet


@snippet
def return_layers_in_set():
    layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(4)])
    def f(x, return_idx=(1, 3)):
        keep = set(return_idx)
        outs = []
        for i, layer in enumerate(layers):
            x = layer(x)
            if i in keep:
                outs.append(x)
        return outs
    return f, (torch.randn(2, 4),)


@snippet
def seen_set_skip_duplicates():
    def f(x):
        seen = set()
        out = x
        for k in [1, 2, 2, 3, 1]:
            if k in seen:
                continue
            seen.add(k)
            out = out + k
        return out, len(seen)
    return f, (torch.randn(3),)


@snippet
def set_literal_membership():
    class Block(nn.Module):
        def __init__(self, act="relu"):
            super().__init__()
            self.act = act

        def forward(self, x):
            if self.act in {"relu", "relu6"}:
                return x.clamp(min=0)
            return x.sigmoid()
    return Block(), (torch.randn(5),)


@snippet
def set_comprehension_of_sizes():
    def f(a, b, c):
        sizes = {t.shape[-1] for t in (a, b, c)}
        if len(sizes) == 1:
            return a + b + c
        return a
    return f, (torch.randn(2, 3), torch.randn(2, 3), torch.randn(2, 3))


@snippet
def set_update_and_sorted():
    def f(x):
        dims = set()
        dims.update([2, 1])
        dims.add(1)
        return x.sum(dim=sorted(dims))
    return f, (torch.randn(2, 3, 4),)


@snippet
def set_difference_of_keys():
    def f(feats):
        wanted = {"p3", "p4"}
        missing = wanted - set(feats.keys())
        return [feats[k] * 2 for k in sorted(wanted - missing)]
    return f, ({"p3": torch.randn(2), "p4": torch.randn(2), "p5": torch.randn(2)},)


@snippet
def frozenset_constant_membership():
    NORMS = frozenset(["bn", "ln"])
    def f(x, kind="bn"):
        if kind in NORMS:
            return (x - x.mean()) / (x.std() + 1e-5)
        return x
    return f, (torch.randn(6),)


@snippet
def set_iteration_of_ints():
    def f(x):
        s = {3, 1, 2}
        for k in s:
            x = x * k
        return x
    return f, (torch.randn(3),)


@snippet
def set_of_strings_iterated_sorted():
    def f(x):
        names = set(["w", "b", "w"])
        return [x + len(n) for n in sorted(names)]
    return f, (torch.randn(2),)


@snippet
def set_discard_and_len():
    def f(x):
        active = set(range(4))
        active.discard(2)
        active.remove(0)
        return x * len(active)
    return f, (torch.randn(2),)


@snippet
def set_union_operator():
    def f(x):
        a = {1, 2}
        b = {2, 3}
        return x.pow(len(a | b)), 3 in (a & b) or 2 in (a & b)
    return f, (torch.randn(3),)


@snippet
def set_of_layer_names_to_freeze():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(3, 3)
            self.b = nn.Linear(3, 3)
            self.frozen = ["a"]

        def forward(self, x):
            frozen = set(self.frozen)
            for name in ["a", "b"]:
                layer = getattr(self, name)
                x = layer(x).detach() if name in frozen else layer(x)
            return x
    return Net(), (torch.randn(2, 3),)
