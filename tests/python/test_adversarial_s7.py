"""Adversarial pass, session 7 (outsider testing of the capture core on both stacks): programs
written the way model code is written around the 3.12 bytecode (inlined comprehensions shadowing
locals and cells, BINARY_SLICE/STORE_SLICE, LOAD_SUPER_ATTR) and graph breaks with resume
functions. About 100 programs were written (scratch files, not kept); the cases here are the ones
that found a wrong result, each reduced, plus a few neighbours that pin the fixed paths. Each case
is compared with eager call by call (results, exceptions, side effects) under the backends eager
and aot_eager, and three under fused (the harness's strict comparison: these cases carry no float
arithmetic a generated kernel could round differently)."""
import inspect
import sys

import pytest
import torch
import torch.nn as nn

import dynamo
from adversarial_harness import check_case_under, params, recompiles, registry

CASES, case = registry()
BACKENDS = ("eager", "aot_eager")
# The fused backend (generated kernels) on the cases whose graphs hold tensor ops worth a kernel.
FUSED = ("staticmethod_classmethod_and_attribute_through_super", "property_through_super_in_a_module_subclass",
         "list_in_a_methods_closure_appended_every_call")


class _Base:
    scale = 2.0

    @classmethod
    def make(cls, x):
        return x * cls.scale

    @staticmethod
    def act(x):
        return x.relu()

    @property
    def bias(self):
        return 1.5


class _Child(_Base):
    scale = 3.0

    @classmethod
    def make(cls, x):
        return super().make(x) + 1  # super() in a classmethod: the receiver is the class

    @property
    def bias(self):
        return super().bias * 2  # a property read through super()

    def go(self, x):
        # a static method and a class method through super(), and a plain class attribute
        return super().act(x) * 2 + super().make(x) + super().scale + self.bias


@case
def property_read_through_super():
    # Was: super().bias bound the property object to the receiver as if it were a method
    # (TypeError: unsupported operand type(s) for *: 'method' and 'int').
    c = _Child()
    return (lambda x: x + c.bias), lambda f, i: f(torch.arange(3.0))


@case
def staticmethod_classmethod_and_attribute_through_super():
    # Was: super().act(x) passed the receiver to the static method (TypeError: takes 1
    # positional argument but 2 were given).
    c = _Child()
    return (lambda x: (c.go(x), _Child.make(x))), lambda f, i: f(torch.arange(-1.0, 2.0))


@case
def property_through_super_in_a_module_subclass():
    class Block(nn.Module):
        def __init__(s):
            super().__init__()
            s.lin = nn.Linear(2, 2)

        @property
        def width(s):
            return s.lin.out_features

    class Scaled(Block):
        @property
        def width(s):
            return super().width * 2

        def forward(s, x):
            return s.lin(x) * s.width

    torch.manual_seed(0)
    m = Scaled()
    return m, lambda f, i: f(torch.ones(1, 2))


def _names_in_current_frame(x, a=1):
    fr = inspect.currentframe()
    return x + a, sorted(fr.f_locals), fr.f_code.co_name, fr.f_lineno - fr.f_code.co_firstlineno


@case
def inspect_currentframe_sees_the_users_frame():
    # Was: the frame was the compiled code's, with its stack temporaries among the locals
    # (['__dynamo_s0', 'a', 'x']) and the line of the graph break.
    return _names_in_current_frame, lambda f, i: f(torch.ones(2))


@case
def sys_getframe_locals_after_tensor_work():
    def fn(x):
        y = x * 2
        fr = sys._getframe()
        return y, sorted(fr.f_locals), fr.f_back is not None
    return fn, lambda f, i: f(torch.ones(2))


@case
def list_in_a_methods_closure_appended_every_call():
    # Was: a method of a class defined in a function (reached through its class, with no source)
    # had its closure list taken as a constant: the traced contents were written back over the
    # real list every call, so the list stayed [1] after three calls.
    calls = []

    class Counter:
        def hit(s, x):
            calls.append(x.shape[0])
            return x * 2

        @property
        def n(s):
            calls.append("n")
            return len(calls)

    c = Counter()
    return (lambda x: c.hit(x) + c.n), lambda f, i: f(torch.ones(i + 1)), lambda: list(calls)


@case
def mutable_default_of_a_method_filled_every_call():
    class Cache:
        def get(s, x, memo={}):  # noqa: B006 - the shared default is the point
            memo[len(memo)] = x.sum()
            return x + len(memo)

    c = Cache()
    return (lambda x: c.get(x)), lambda f, i: f(torch.ones(2)), lambda: dict(Cache.get.__defaults__[0])


@pytest.mark.parametrize("case,backend", params(CASES, {}, BACKENDS))
def test_adversarial_s7(case, backend, monkeypatch):
    check_case_under(case, backend, monkeypatch)


@pytest.mark.parametrize("case", [c for c in CASES if c.name in FUSED], ids=lambda c: c.name)
def test_adversarial_s7_fused(case, monkeypatch):
    check_case_under(case, "fused", monkeypatch)


def test_descriptors_through_super_do_not_recompile_every_call():
    # The guard on a class method read through super() is on the class's __dict__ entry: getattr
    # would make a new bound method each call.
    c = _Child()
    assert recompiles(lambda x: c.go(x), lambda: (torch.ones(2),)) == []


def test_a_property_through_super_runs_when_called_not_when_traced():
    calls = []

    class A:
        @property
        def v(s):
            calls.append("get")
            return 2

    class B(A):
        def f(s, x):
            return x * super().v

    b = B()
    dynamo.reset()
    f = dynamo.compile(b.f)
    for _ in range(3):
        assert torch.equal(f(torch.ones(1)), torch.full((1,), 2.0))
    assert calls == ["get", "get", "get"]
    dynamo.reset()
