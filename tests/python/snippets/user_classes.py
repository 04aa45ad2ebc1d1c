"""Instances of user classes and dataclasses made inside the function."""
import dataclasses
from typing import Optional

import torch
import torch.nn as nn

from . import snippet


@dataclasses.dataclass
class ModelOutput:
    logits: torch.Tensor
    loss: Optional[torch.Tensor] = None


class Box:
    def __init__(self, x1, y1, x2, y2):
        self.x1, self.y1, self.x2, self.y2 = x1, y1, x2, y2

    def area(self):
        return (self.x2 - self.x1) * (self.y2 - self.y1)


@snippet
def dataclass_output():
    fc = nn.Linear(4, 2)
    def f(x):
        return ModelOutput(logits=fc(x)).logits
    return f, (torch.randn(3, 4),)


@snippet
def plain_class_boxes():
    def f(b):
        box = Box(b[:, 0], b[:, 1], b[:, 2], b[:, 3])
        return box.area()
    return f, (torch.rand(5, 4),)


@snippet
def config_object_in_forward():
    class Cfg:
        def __init__(self, scale=2.0):
            self.scale = scale
    def f(x):
        cfg = Cfg()
        return x * cfg.scale
    return f, (torch.randn(3),)


@snippet
def namedtuple_output():
    import collections
    Out = collections.namedtuple("Out", ["mean", "var"])
    def f(x):
        o = Out(x.mean(0), x.var(0))
        return o.mean + o.var
    return f, (torch.randn(4, 3),)


@snippet
def dataclass_passed_in():
    cfg = ModelOutput(logits=torch.zeros(1), loss=None)
    def f(x):
        return x + 1 if cfg.loss is None else x
    return f, (torch.randn(3),)


@snippet
def dataclass_with_loss():
    fc = nn.Linear(4, 3)
    def f(x, y):
        logits = fc(x)
        out = ModelOutput(logits, nn.functional.cross_entropy(logits, y))
        return out.loss
    return f, (torch.randn(2, 4), torch.tensor([0, 2]))


@snippet
def typing_namedtuple_state():
    from typing import NamedTuple

    class State(NamedTuple):
        h: torch.Tensor
        c: torch.Tensor
    cell = nn.LSTMCell(3, 4)
    def f(x):
        s = State(torch.zeros(2, 4), torch.zeros(2, 4))
        h, c = cell(x, (s.h, s.c))
        return State(h, c).h
    return f, (torch.randn(2, 3),)


@snippet
def helper_object_with_method():
    class Scaler:
        def __init__(self, s):
            self.s = s

        def __call__(self, t):
            return t * self.s
    def f(x):
        return Scaler(3)(x)
    return f, (torch.randn(2),)
