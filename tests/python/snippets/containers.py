"""Lists, dicts and tuples the way detection, segmentation and NLP code builds them."""
import collections

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import snippet


@snippet
def fpn_lateral_outputs():
    class FPN(nn.Module):
        def __init__(self, chans=(2, 4, 8), out=4):
            super().__init__()
            self.lateral = nn.ModuleList(nn.Conv2d(c, out, 1) for c in chans)

        def forward(self, feats):
            results = []
            last = self.lateral[-1](feats[-1])
            results.append(last)
            for feat, lat in zip(feats[:-1][::-1], list(self.lateral)[:-1][::-1]):
                inner = lat(feat)
                last = inner + F.interpolate(last, size=inner.shape[-2:], mode="nearest")
                results.insert(0, last)
            return results
    feats = [torch.randn(1, 2, 8, 8), torch.randn(1, 4, 4, 4), torch.randn(1, 8, 2, 2)]
    return FPN(), (feats,)


@snippet
def ordered_dict_of_features():
    body = nn.Sequential(collections.OrderedDict([("c1", nn.Conv2d(3, 4, 3)), ("r1", nn.ReLU()),
                                                  ("c2", nn.Conv2d(4, 4, 3))]))
    def f(x):
        out = collections.OrderedDict()
        for name, m in body.named_children():
            x = m(x)
            if name.startswith("c"):
                out[name] = x
        return out
    return f, (torch.randn(1, 3, 8, 8),)


@snippet
def losses_dict_sum():
    def f(pred, target):
        losses = {"l1": F.l1_loss(pred, target), "l2": F.mse_loss(pred, target)}
        losses["total"] = sum(losses.values())
        return losses
    return f, (torch.randn(3), torch.randn(3))


@snippet
def input_dict_batch():
    enc = nn.Linear(4, 4)
    def f(batch):
        x = batch["input"]
        mask = batch.get("mask")
        h = enc(x)
        if mask is not None:
            h = h * mask
        return {"hidden": h, "pooled": h.mean(1)}
    return f, ({"input": torch.randn(2, 3, 4), "mask": torch.ones(2, 3, 1)},)


@snippet
def list_of_tensors_stack_and_split():
    def f(xs):
        y = torch.stack(xs, 0) * 2
        return list(torch.unbind(y, 0))
    return f, ([torch.randn(3), torch.randn(3)],)


@snippet
def tuple_hidden_state_passthrough():
    cell = nn.LSTMCell(2, 3)
    def f(x, state):
        h, c = cell(x, state)
        return h, (h, c)
    return f, (torch.randn(4, 2), (torch.zeros(4, 3), torch.zeros(4, 3)))


@snippet
def kwargs_dict_splat_into_module():
    fc = nn.Linear(3, 3)
    def f(**inputs):
        return fc(inputs["x"]) + inputs.get("bias", 0)
    def g(x):
        return f(x=x, bias=1.0)
    return g, (torch.randn(2, 3),)


@snippet
def output_list_append_in_loop():
    blocks = nn.ModuleList([nn.Conv2d(2, 2, 3, padding=1) for _ in range(3)])
    def f(x):
        outs = []
        for b in blocks:
            x = b(x)
            outs.append(x)
        return torch.cat(outs, 1)
    return f, (torch.randn(1, 2, 4, 4),)


@snippet
def list_comprehension_with_condition():
    def f(xs):
        return [x.relu() for x in xs if x.dim() == 2]
    return f, ([torch.randn(2, 2), torch.randn(3), torch.randn(1, 4)],)


@snippet
def dict_items_iteration_sorted():
    def f(d):
        total = 0
        for k, v in sorted(d.items()):
            total = total + v * len(k)
        return total
    return f, ({"bb": torch.randn(2), "a": torch.randn(2)},)


@snippet
def nested_tuple_return():
    def f(x):
        return (x, (x * 2, [x * 3, {"k": x * 4}]))
    return f, (torch.randn(2),)


@snippet
def mutate_input_list():
    def f(xs):
        xs.append(xs[0] * 2)
        return len(xs)
    return f, ([torch.randn(2)],)


@snippet
def dict_update_with_kwargs():
    def f(x):
        cfg = dict(scale=2.0)
        cfg.update(shift=1.0)
        return x * cfg["scale"] + cfg["shift"]
    return f, (torch.randn(3),)


@snippet
def reversed_list_of_skips():
    def f(skips, x):
        for s in reversed(skips):
            x = x + s
        return x
    return f, ([torch.randn(2), torch.randn(2)], torch.randn(2))


@snippet
def zip_strict_free_pairs():
    heads = nn.ModuleList([nn.Linear(2, 1), nn.Linear(2, 1)])
    def f(feats):
        return [h(x) for h, x in zip(heads, feats)]
    return f, ([torch.randn(3, 2), torch.randn(3, 2)],)


@snippet
def slice_of_module_list():
    layers = nn.ModuleList([nn.Linear(3, 3) for _ in range(4)])
    def f(x):
        for l in layers[1:3]:
            x = l(x)
        return x
    return f, (torch.randn(1, 3),)


@snippet
def defaultdict_grouping():
    def f(xs):
        groups = collections.defaultdict(list)
        for i, x in enumerate(xs):
            groups[i % 2].append(x)
        return [torch.stack(v).sum(0) for v in groups.values()]
    return f, ([torch.randn(2) for _ in range(4)],)


@snippet
def enumerate_start_one():
    def f(xs):
        return sum(x * i for i, x in enumerate(xs, 1))
    return f, ([torch.randn(2), torch.randn(2)],)
