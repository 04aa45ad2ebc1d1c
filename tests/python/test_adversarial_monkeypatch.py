"""Adversarial pass (issue #7), category f: monkeypatching between calls: methods replaced on a
class or an instance, globals and module attributes changed, closure cells rebound, defaults
changed, hooks added or removed after the first call, submodules and parameters swapped. Every
change must be seen by the next compiled call (guards), never a stale cached graph."""
import sys
import types

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from adversarial_harness import check_case, params, registry

CASES, case = registry()

SCALE = 1.0
ACT = torch.relu
CONFIG = {"mode": "sum", "eps": 1e-5}

# a module object other code imports and patches (like `import mymodule.config as cfg`)
fakecfg = types.ModuleType("adv_fakecfg")
fakecfg.FACTOR = 2.0
fakecfg.use_bias = True
sys.modules["adv_fakecfg"] = fakecfg

# a second one for the programs that import it inside the function
lazycfg = types.ModuleType("adv_lazycfg")
lazycfg.SCALE = 1.0
lazycfg.steps = 0
sys.modules["adv_lazycfg"] = lazycfg


class K:
    def go(self, x):
        return x + 1

    def run(self, x):
        return self.go(x) * 2


@case
def method_replaced_on_class():
    def fn(k, x):
        return k.run(x)

    def drive(f, i):
        if i >= 1:
            K.go = lambda self, x: x * 100
        try:
            return f(k, x)
        finally:
            if i == 2:
                K.go = orig
    orig = K.__dict__["go"]
    k, x = K(), torch.ones(2)
    return fn, drive


@case
def method_replaced_on_instance():
    def fn(k, x):
        return k.run(x)

    def drive(f, i):
        if i == 1:
            k.go = lambda x: x - 50
        if i == 2:
            del k.go
        return f(k, x)
    k, x = K(), torch.ones(2)
    return fn, drive


@case
def global_scalar_changed():
    def fn(x):
        return x * SCALE

    def drive(f, i):
        globals()["SCALE"] = [1.0, 2.5, -0.0][i]
        return f(x)
    x = torch.ones(2)
    return fn, drive


@case
def global_function_swapped():
    def fn(x):
        return ACT(x) + 1

    def drive(f, i):
        globals()["ACT"] = [torch.relu, torch.tanh, F.gelu][i]
        return f(x)
    x = torch.randn(4)
    return fn, drive


@case
def module_attribute_changed():
    import adv_fakecfg

    def fn(x):
        y = x * adv_fakecfg.FACTOR
        if adv_fakecfg.use_bias:
            y = y + 1
        return y

    def drive(f, i):
        fakecfg.FACTOR = [2.0, 3.0, 3.0][i]
        fakecfg.use_bias = [True, True, False][i]
        return f(x)
    x = torch.ones(2)
    return fn, drive


@case
def closure_cell_rebound_between_calls():
    def make():
        temp = 1.0

        def fn(x):
            return (x / temp).softmax(-1)

        def set_temp(t):
            nonlocal temp
            temp = t
        return fn, set_temp
    fn, set_temp = make()

    def drive(f, i):
        set_temp([1.0, 0.5, 2.0][i])
        return f(x)
    x = torch.randn(4)
    return fn, drive


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        return self.fc(x).relu()


@case
def forward_hook_added_after_first_call():
    m = Net()
    seen = []

    def drive(f, i):
        if i == 1:
            m.fc.register_forward_hook(lambda mod, inp, out: out * 10)
            m.register_forward_hook(lambda mod, inp, out: seen.append(out.shape))
        return f(x)
    x = torch.randn(2, 3)
    return m, drive, lambda: list(seen)


@case
def forward_pre_hook_added_then_removed():
    m = Net()
    handles = []

    def drive(f, i):
        if i == 1:
            handles.append(m.register_forward_pre_hook(lambda mod, inp: (inp[0] * 0,)))
        if i == 2:
            handles.pop().remove()
        return f(x)
    x = torch.randn(2, 3)
    return m, drive


@case
def function_defaults_changed():
    def helper(x, k=2.0):
        return x * k

    def fn(x):
        return helper(x)

    def drive(f, i):
        if i == 1:
            helper.__defaults__ = (5.0,)
        return f(x)
    x = torch.ones(2)
    return fn, drive


@case
def submodule_swapped():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.act = nn.ReLU()

        def forward(self, x):
            return self.act(x - 0.5)
    m = Block()

    def drive(f, i):
        if i == 1:
            m.act = nn.GELU()
        if i == 2:
            m.act = nn.Identity()
        return f(x)
    x = torch.randn(4)
    return m, drive


@case
def train_eval_toggle_dropout_and_bn():
    m = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Dropout(0.5))

    def drive(f, i):
        m.train(i != 1)
        return f(x), m[1].running_mean.clone(), m[1].num_batches_tracked.clone()
    x = torch.randn(8, 4)
    return m, drive


@case
def parameter_replaced_with_new_parameter():
    m = Net()

    def drive(f, i):
        if i == 1:
            m.fc.weight = nn.Parameter(torch.ones(3, 3))
        return f(x)
    x = torch.randn(2, 3)
    return m, drive


@case
def parameter_data_changed_in_place():
    m = Net()

    def drive(f, i):
        if i >= 1:
            with torch.no_grad():
                m.fc.weight.mul_(2)
                m.fc.bias.fill_(i)
        return f(x)
    x = torch.randn(2, 3)
    return m, drive


class Scaler:
    factor = 2.0

    def __call__(self, x):
        return x * self.factor


@case
def class_attribute_changed():
    s = Scaler()

    def fn(x):
        return s(x)

    def drive(f, i):
        Scaler.factor = [2.0, 7.0, 7.0][i]
        if i == 2:
            s.factor = 0.5  # instance attribute now shadows the class attribute
        return f(x)
    Scaler.factor = 2.0
    x = torch.ones(2)
    return fn, drive


@case
def config_dict_mutated():
    def fn(x):
        if CONFIG["mode"] == "sum":
            return x.sum() + CONFIG["eps"]
        return x.mean() + CONFIG["eps"]

    def drive(f, i):
        CONFIG["mode"] = ["sum", "mean", "mean"][i]
        CONFIG["eps"] = [1e-5, 1e-5, 1.0][i]
        return f(x)
    x = torch.arange(4.0)
    return fn, drive


@case
def function_attribute_changed():
    def fn(x):
        return x * fn.scale
    fn.scale = 1.0

    def drive(f, i):
        fn.scale = float(i + 1)
        return f(x)
    x = torch.ones(2)
    return fn, drive


@case
def requires_grad_toggled_on_parameter():
    m = Net()

    def drive(f, i):
        m.fc.weight.requires_grad_(i != 1)
        out = f(x)
        return out, out.requires_grad, out.grad_fn is None
    x = torch.randn(2, 3)
    return m, drive


@case
def buffer_reassigned_between_calls():
    class Norm(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("mean", torch.zeros(3))

        def forward(self, x):
            return x - self.mean
    m = Norm()

    def drive(f, i):
        if i == 1:
            m.mean = torch.ones(3)
        if i == 2:
            m.mean = torch.ones(3, dtype=torch.float64)
        return f(x)
    x = torch.randn(2, 3)
    return m, drive


@case
def forward_replaced_on_instance():
    m = Net()

    def drive(f, i):
        if i == 1:
            m.forward = lambda x: x * -1
        return f(x)
    x = torch.randn(2, 3)
    return m, drive


@case
def torch_function_monkeypatched_in_module_namespace():
    # code that patches F.<op> (e.g. to add logging or a custom kernel) and restores it
    def fn(x):
        return F.softplus(x)
    orig = F.softplus

    def drive(f, i):
        if i == 1:
            F.softplus = lambda x: x * 0 + 42
        try:
            return f(x)
        finally:
            F.softplus = orig
    x = torch.randn(3)
    return fn, drive


class Helped(nn.Module):
    def helper(self, x):
        return x + 1

    def forward(self, x):
        return self.helper(x) * 2


@case
def module_method_patched_on_class():
    m = Helped()
    orig = Helped.__dict__["helper"]

    def drive(f, i):
        if i == 1:
            Helped.helper = lambda self, x: x * 100
        if i == 2:
            Helped.helper = orig
            m.helper = lambda x: x - 50
        try:
            return f(x)
        finally:
            Helped.helper = orig
    x = torch.ones(2)
    return m, drive


class PropHolder:
    @property
    def s(self):
        return 2.0


@case
def property_replaced_on_class():
    p = PropHolder()
    orig = PropHolder.__dict__["s"]

    def fn(x):
        return x * p.s

    def drive(f, i):
        if i == 1:
            PropHolder.s = property(lambda self: 5.0)
        try:
            return f(torch.ones(1))
        finally:
            PropHolder.s = orig
    return fn, drive


class CallHolder:
    def __call__(self, x):
        return x + 1


@case
def dunder_call_replaced_on_class():
    c = CallHolder()
    orig = CallHolder.__dict__["__call__"]

    def fn(x):
        return c(x)

    def drive(f, i):
        if i == 1:
            CallHolder.__call__ = lambda self, x: x * 9
        try:
            return f(torch.ones(1))
        finally:
            CallHolder.__call__ = orig
    return fn, drive


@case
def default_dtype_changed_between_calls():
    def fn(x):
        t = torch.tensor([1.5]) + x
        a = torch.arange(3.0)
        return t, a, t.dtype, a.dtype, torch.zeros(1).dtype

    def drive(f, i):
        torch.set_default_dtype([torch.float32, torch.float64, torch.float32][i])
        try:
            return f(torch.ones(1, dtype=torch.float64))
        finally:
            torch.set_default_dtype(torch.float32)
    return fn, drive


@case
def module_attribute_read_via_import_inside():
    def fn(x):
        import adv_lazycfg
        return x * adv_lazycfg.SCALE

    def drive(f, i):
        lazycfg.SCALE = [1.0, 5.0, 7.0][i]
        return f(torch.ones(1))
    lazycfg.SCALE = 1.0
    return fn, drive


@case
def module_attribute_from_import_inside():
    def fn(x):
        from adv_lazycfg import SCALE
        return x * SCALE

    def drive(f, i):
        lazycfg.SCALE = [1.0, 5.0, 7.0][i]
        return f(torch.ones(1))
    lazycfg.SCALE = 1.0
    return fn, drive


@case
def module_attribute_written_via_import_inside():
    def fn(x):
        import adv_lazycfg
        adv_lazycfg.steps = adv_lazycfg.steps + 1
        return x + adv_lazycfg.steps
    lazycfg.steps = 0
    return fn, lambda f, i: f(torch.zeros(1)), lambda: lazycfg.steps


class Bottleneck(nn.Module):
    expansion = 1

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)

    def forward(self, x):
        return self.fc(x) * type(self).expansion


@case
def class_attribute_read_via_type_of_self():
    m = Bottleneck()

    def drive(f, i):
        Bottleneck.expansion = [1, 4, 2][i]
        return f(torch.ones(1, 2))
    Bottleneck.expansion = 1
    return m, drive


class KBase(nn.Module):
    k = 1.0


class KViaSuper(KBase):
    def forward(self, x):
        return x * super().k


class KViaGetattrType(KBase):
    def forward(self, x):
        return x * getattr(type(self), "k")


def _class_attr_case(cls):
    m = cls()

    def drive(f, i):
        KBase.k = [1.0, 5.0, 7.0][i]
        return f(torch.ones(1))
    KBase.k = 1.0
    return m, drive


@case
def class_attribute_read_via_super():
    return _class_attr_case(KViaSuper)


@case
def class_attribute_via_getattr_type():
    return _class_attr_case(KViaGetattrType)


class KViaClassmethod(KBase):
    @classmethod
    def scale(cls):
        return cls.k

    def forward(self, x):
        return x * self.scale()


@case
def class_attribute_read_in_classmethod():
    return _class_attr_case(KViaClassmethod)


class ActiveBlocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(2, 2) for _ in range(4))
        self.active = range(0, 2)

    def forward(self, x):
        for i in self.active:
            x = self.blocks[i](x)
        return x


@case
def range_attribute_changed():
    m = ActiveBlocks()

    def drive(f, i):
        m.active = [range(0, 2), range(0, 4), range(1, 3)][i]
        return f(torch.ones(1, 2))
    return m, drive


@case
def range_argument_changed():
    def fn(x, r):
        return x * sum(r), len(r)
    rs = [range(3), range(4), range(1, 4)]
    return fn, lambda f, i: f(torch.ones(1), rs[i])


def kw_helper(x, *, k=2.0):
    return x * k


@case
def kwdefaults_changed():
    def fn(x):
        return kw_helper(x)

    def drive(f, i):
        kw_helper.__kwdefaults__ = {"k": [2.0, 5.0, 7.0][i]}
        return f(torch.ones(1))
    kw_helper.__kwdefaults__ = {"k": 2.0}
    return fn, drive


def _uses_max(x):
    return x * max(2.0, 1.0)


@case
def builtin_shadowed_by_global_later():
    g = globals()

    def drive(f, i):
        if i == 0:
            g.pop("max", None)
        else:
            g["max"] = lambda a, b: float(i + 4)
        try:
            return f(torch.ones(1))
        finally:
            g.pop("max", None)
    g.pop("max", None)
    return _uses_max, drive


@case
def full_backward_hook_added_after_first_call():
    m = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    log = []

    def drive(f, i):
        if i == 1:
            m[0].register_full_backward_hook(lambda mod, gin, gout: log.append(("bw", gout[0].shape)))
        out = f(torch.ones(1, 2))
        out.sum().backward()
        return out, list(log)
    return m, drive


@case
def global_forward_hook_sees_wrapper():
    from torch.nn.modules import module as modmod
    m = nn.Sequential(nn.Linear(2, 2), nn.ReLU())

    def drive(f, i):
        log = []
        h = modmod.register_module_forward_hook(lambda mod, inp, out: log.append(type(mod).__name__))
        h2 = modmod.register_module_forward_hook(lambda mod, inp, out: out * 10) if i == 2 else None
        try:
            return f(torch.ones(1, 2)), log
        finally:
            h.remove()
            if h2 is not None:
                h2.remove()
    return m, drive


_METHOD = "F1b: property / __call__ looked up through the class are not guarded: stale after patching"
XFAIL = {
}


@pytest.mark.parametrize("case", params(CASES, XFAIL))
def test_adversarial_monkeypatch(case):
    check_case(case)
