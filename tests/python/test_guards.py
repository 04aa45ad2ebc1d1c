"""Sources and guards (core/src/guards) through the _dynamo_testing.guards test API.

Each guard kind passes and fails on the right inputs with its exact failure text; sources fetch
what Python would; the nn.Module fast path and its safety helper; dedup; failures() lists every
failing guard with the user line that created it; a source that raises is a clean failure;
refcounts are stable over 100k checks. The perf figures are printed (pytest -s), not asserted.
"""
import gc
import sys
import time

import pytest
import torch

import dynamo
from _dynamo_testing import guards as g

WHERE = ("model.py", 12, "y = x.view(4, -1)")


def one_guard(kind, source=None, value=None, **kw):
    b = g.GuardSetBuilder()
    if value is None:
        assert b.add(kind, source, **kw)
    else:
        assert b.add(kind, source, value, **kw)
    return b.build()


def reason(gs, locals_, globals_=None):
    """The single failure reason of gs on these values."""
    fails = gs.failures(locals_, globals_ if globals_ is not None else {})
    assert len(fails) == 1, fails
    return fails[0]["reason"]


X = g.local(0, "x")


# ---- the .def list ---------------------------------------------------------------------------

def test_guard_kinds_list_the_def_file():
    kinds = {name: (cost, desc) for name, cost, desc in g.guard_kinds()}
    for name in ["TYPE_MATCH", "ID_MATCH", "EQUALS_MATCH", "TENSOR_MATCH", "LENGTH_CHECK",
                 "DICT_KEYS", "GRAD_MODE", "DEFAULT_DTYPE", "IS_NONE", "NOT_NONE", "HASATTR",
                 "NO_INSTANCE_ATTR", "MODULE_CALL"]:
        assert name in kinds
        assert kinds[name][1]
    assert kinds["GRAD_MODE"][0] == 0 and kinds["TENSOR_MATCH"][0] > kinds["ID_MATCH"][0]


def test_unknown_kind_is_a_user_error():
    with pytest.raises(dynamo.UserError, match="unknown guard kind 'NOPE'"):
        g.GuardSetBuilder().add("NOPE", X, 1)


def test_source_and_global_state_mismatch_is_a_user_error():
    with pytest.raises(dynamo.UserError, match="GRAD_MODE takes no source"):
        g.GuardSetBuilder().add("GRAD_MODE", X, True)
    with pytest.raises(dynamo.UserError, match="IS_NONE needs a source"):
        g.GuardSetBuilder().add("IS_NONE")


# ---- leaf guards -------------------------------------------------------------------------------

def test_type_match():
    gs = one_guard("TYPE_MATCH", g.local(0, "cfg"), {"a": 1})
    assert gs.check([{}], {})
    assert not gs.check([[]], {})
    assert not gs.check([type("D", (dict,), {})()], {})  # subclasses fail: exact type
    assert reason(gs, [[1]]) == "type of 'cfg' changed: expected dict, got list"


def f():
    pass


def h():
    pass


def test_id_match():
    gs = one_guard("ID_MATCH", g.local(0, "fn"), f)
    assert gs.check([f], {})
    assert not gs.check([h], {})
    assert reason(gs, [h]) == ("'fn' is a different object: expected function f, got function h")


def test_id_match_keeps_only_a_weak_reference():
    class Obj:
        pass

    o = Obj()
    before = sys.getrefcount(o)
    gs = one_guard("ID_MATCH", g.local(0, "o"), o)
    assert sys.getrefcount(o) == before  # the guard does not keep the object alive
    assert gs.check([o], {})
    other = Obj()
    r = reason(gs, [other])
    assert r.startswith("'o' is a different object: expected Obj object at 0x")
    del o
    gc.collect()
    assert "(since deleted)" in reason(gs, [other])


def test_id_match_on_objects_without_weakrefs():
    big = 10 ** 30  # ints take no weak references: the guard holds a strong one
    gs = one_guard("ID_MATCH", X, big)
    assert gs.check([big], {})
    assert not gs.check([10 ** 30 + 0 * len(sys.argv)], {})


def test_equals_match():
    gs = one_guard("EQUALS_MATCH", g.local(0, "scale"), 2.0)
    assert gs.check([2.0], {})
    assert not gs.check([3.0], {})
    assert reason(gs, [3.0]) == "'scale' changed: expected 2.0, got 3.0"
    # Same value, other type: True == 1 in Python, but not for the guard.
    gs = one_guard("EQUALS_MATCH", g.local(0, "flag"), True)
    assert not gs.check([1], {})
    assert reason(gs, [1]) == "'flag' changed: expected True (bool), got 1 (int)"
    gs = one_guard("EQUALS_MATCH", g.local(0, "shape"), (4, "a", None))
    assert gs.check([(4, "a", None)], {})
    assert not gs.check([(4.0, "a", None)], {})
    assert reason(gs, [(4, "b", None)]) == (
        "'shape' changed: expected (4, 'a', None), got (4, 'b', None)")
    gs = one_guard("EQUALS_MATCH", X, float("nan"))
    assert gs.check([float("nan")], {})  # NaN must not recompile on every call


def test_equals_match_rejects_unsupported_constants():
    with pytest.raises(dynamo.UserError) as e:
        g.GuardSetBuilder().add("EQUALS_MATCH", X, [1, 2])
    assert "EQUALS_MATCH needs an int, float, str, bool, None or a tuple of those; got list" in (
        str(e.value))


def test_length_check():
    gs = one_guard("LENGTH_CHECK", g.local(0, "xs"), 3)
    assert gs.check([[1, 2, 3]], {}) and gs.check([(1, 2, 3)], {}) and gs.check([dict(a=1, b=2, c=3)], {})
    assert not gs.check([[1, 2, 3, 4]], {})
    assert reason(gs, [[1, 2, 3, 4]]) == "length of 'xs' changed: expected 3, got 4"
    assert reason(gs, [7]) == "length of 'xs' changed: expected 3, got int without a length"


def test_dict_keys():
    gs = one_guard("DICT_KEYS", g.local(0, "cfg"), {"lr": 0.1, "wd": 0.0})
    assert gs.check([{"lr": 1, "wd": 2}], {})
    assert not gs.check([{"wd": 2, "lr": 1}], {})  # order matters
    assert reason(gs, [{"wd": 2, "lr": 1}]) == (
        "keys of 'cfg' changed: expected ['lr', 'wd'], got ['wd', 'lr']")
    assert reason(gs, [{"lr": 1, "momentum": 2}]) == (
        "keys of 'cfg' changed: expected ['lr', 'wd'], got ['lr', 'momentum']")
    assert reason(gs, [[1]]) == "keys of 'cfg' changed: expected ['lr', 'wd'], got list (not a dict)"


def test_is_none_and_not_none():
    gs = one_guard("IS_NONE", g.local(0, "bias"))
    assert gs.check([None], {})
    assert reason(gs, [torch.zeros(1)]) == "'bias' is no longer None: got Tensor"
    gs = one_guard("NOT_NONE", g.local(0, "bias"))
    assert gs.check([1], {})
    assert reason(gs, [None]) == "'bias' is now None"


def test_hasattr():
    class Obj:
        pass

    o = Obj()
    o.foo = 1
    gs = one_guard("HASATTR", g.local(0, "self"), "foo")
    assert gs.check([o], {})
    assert reason(gs, [Obj()]) == "'self' no longer has attribute 'foo'"
    gs = one_guard("HASATTR", g.local(0, "self"), "foo", present=False)
    assert gs.check([Obj()], {})
    assert reason(gs, [o]) == "'self' now has attribute 'foo'"


def test_no_instance_attr():
    class Obj:
        def go(self):
            return 1

    o = Obj()
    gs = one_guard("NO_INSTANCE_ATTR", g.local(0, "self"), "go")
    assert gs.check([o], {})
    o.go = lambda: 2
    assert reason(gs, [o]) == "'self' now has an instance attribute 'go' hiding the class's"
    assert gs.check([1], {})  # no instance dict: nothing can hide the class's


def test_module_call():
    m = torch.nn.Linear(2, 2)
    gs = one_guard("MODULE_CALL", g.local(0, "m"))
    assert gs.check([m], {})
    h = m.register_forward_pre_hook(lambda mod, args: None)
    assert reason(gs, [m]) == "module 'm' now has forward_pre_hooks (_forward_pre_hooks is not empty)"
    h.remove()
    m.forward = lambda x: x
    assert reason(gs, [m]) == "module 'm' now has an instance attribute 'forward'"


# ---- TENSOR_MATCH ------------------------------------------------------------------------------

def tensor_guard(example):
    return one_guard("TENSOR_MATCH", X, example, where=WHERE)


def test_tensor_match_passes_on_same_metadata():
    gs = tensor_guard(torch.randn(4, 8))
    assert gs.check([torch.zeros(4, 8)], {})
    assert gs.guards()[0]["checked"] == (
        "tensor x: float32 cpu sizes=[4, 8] strides=[8, 1] requires_grad=False")


@pytest.mark.parametrize("value, text", [
    (lambda: torch.randn(8, 8), "tensor 'x' size mismatch at dim 0: expected 4, got 8"),
    (lambda: torch.randn(8, 4).t(), "tensor 'x' stride mismatch at dim 0: expected 8, got 1"),
    (lambda: torch.randn(4, 8, dtype=torch.float64),
     "tensor 'x' dtype mismatch: expected float32, got float64"),
    (lambda: torch.empty(4, 8, device="meta"), "tensor 'x' device mismatch: expected cpu, got meta"),
    (lambda: torch.randn(4, 8, requires_grad=True),
     "tensor 'x' requires_grad mismatch: expected False, got True"),
    (lambda: torch.randn(4, 8, 1), "tensor 'x' ndim mismatch: expected 2, got 3"),
    (lambda: torch.nn.Parameter(torch.randn(4, 8), requires_grad=False),
     "tensor 'x' type mismatch: expected Tensor, got Parameter"),
    (lambda: [1, 2], "tensor 'x' type mismatch: expected Tensor, got list"),
    (lambda: torch.randn(4, 8).to_sparse(), "tensor 'x' layout mismatch: expected Strided, got Sparse"),
])
def test_tensor_match_failures(value, text):
    gs = tensor_guard(torch.randn(4, 8))
    v = value()
    assert not gs.check([v], {})
    fails = gs.failures([v], {})
    assert [x["reason"] for x in fails] == [text]
    assert fails[0]["text"] == text + "\n  (guard created at model.py:12: y = x.view(4, -1))"


def test_tensor_match_parameter_vs_tensor():
    p = torch.nn.Parameter(torch.randn(3))
    gs = tensor_guard(p)
    assert gs.check([torch.nn.Parameter(torch.zeros(3))], {})
    assert reason(gs, [torch.zeros(3, requires_grad=True)]) == (
        "tensor 'x' type mismatch: expected Parameter, got Tensor")
    assert gs.guards()[0]["checked"].endswith("requires_grad=True type=Parameter")


def test_tensor_match_dispatch_keys_follow_thread_local_state():
    t = torch.randn(2)
    gs = tensor_guard(t)
    assert gs.check([t], {})
    with torch.inference_mode():  # excludes the autograd keys in TLS
        assert not gs.check([t], {})
        r = reason(gs, [t])
    assert r.startswith("tensor 'x' dispatch key set mismatch: expected DispatchKeySet(")


def test_tensor_match_sparse_example():
    s = torch.randn(3, 3).to_sparse()
    gs = tensor_guard(s)
    assert gs.check([torch.zeros(3, 3).to_sparse()], {})
    assert not gs.check([torch.zeros(3, 3)], {})
    assert "layout=Sparse" in gs.describe()


def test_tensor_match_needs_a_tensor():
    with pytest.raises(dynamo.UserError, match="TENSOR_MATCH needs a torch.Tensor, got int"):
        g.GuardSetBuilder().add("TENSOR_MATCH", X, 3)


# ---- global state ------------------------------------------------------------------------------

def test_grad_mode():
    gs = one_guard("GRAD_MODE", where=("train.py", 3, "loss = model(x)"))
    assert gs.check([], {})
    with torch.no_grad():
        assert not gs.check([], {})
        fails = gs.failures([], {})
    assert [x["reason"] for x in fails] == ["grad mode changed: expected enabled, got disabled"]
    assert fails[0]["text"].endswith("(guard created at train.py:3: loss = model(x))")
    gs = one_guard("GRAD_MODE", value=False)
    with torch.no_grad():
        assert gs.check([], {})


def test_default_dtype():
    gs = one_guard("DEFAULT_DTYPE")
    assert gs.check([], {})
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert reason(gs, []) == "default dtype changed: expected float32, got float64"
    finally:
        torch.set_default_dtype(old)
    assert gs.check([], {})


# ---- sources -----------------------------------------------------------------------------------

class Cfg:
    def __init__(self):
        self.lr = 0.1
        self.layers = [{"w": 1}, {"w": 2}]


def test_source_names_and_fetch():
    cfg = Cfg()
    glb = {"G_CFG": {"lr": 0.5, 3: "three", (1, 2): "pair"}}
    frame = ([cfg, (10, 20, 30)], glb)
    cases = [
        (g.local(0, "cfg"), "cfg", cfg),
        (g.local(0, "cfg").attr("lr"), "cfg.lr", 0.1),
        (g.local(0, "cfg").attr("layers").item(-1).item("w"), "cfg.layers[-1]['w']", 2),
        (g.local(1, "t").item(1), "t[1]", 20),
        (g.global_("G_CFG").item("lr"), "G['G_CFG']['lr']", 0.5),
        (g.global_("G_CFG").item(3), "G['G_CFG'][3]", "three"),
        (g.global_("G_CFG").item((1, 2)), "G['G_CFG'][(1, 2)]", "pair"),
        (g.builtin("len"), "builtins['len']", len),
    ]
    for src, name, value in cases:
        assert src.name == name
        assert src.fetch(*frame) == value


def test_source_fetch_errors():
    with pytest.raises(NameError, match="name 'nope' is not defined"):
        g.global_("nope").fetch([], {})
    with pytest.raises(KeyError):
        g.global_("d").item((1, 2)).fetch([], {"d": {}})
    with pytest.raises(IndexError):
        g.local(0, "xs").item(5).fetch([[1]], {})
    with pytest.raises(UnboundLocalError, match="local variable 'z' \\(slot 3\\) is not bound"):
        g.local(3, "z").fetch([], {})
    with pytest.raises(AttributeError):
        g.local(0, "o").attr("missing").fetch([object()], {})


def test_slots_read_through_an_accessor():
    # The frame hook adapts its FrameView through FrameValues::localAt instead of an array.
    t = torch.randn(2)
    b = g.GuardSetBuilder()
    b.add("TENSOR_MATCH", g.local(1, "t"), t)
    b.add("EQUALS_MATCH", g.local(0, "n"), 3)
    gs = b.build()
    assert gs.check_via_accessor([3, t], {})
    assert not gs.check_via_accessor([4, t], {})
    assert not gs.check_via_accessor([3], {})  # slot 1 out of range: unbound, a failure


def test_source_equality_and_hash():
    a = g.local(0, "self").attr("fc1").item(0)
    b = g.local(0, "self").attr("fc1").item(0)
    assert a == b and hash(a) == hash(b)
    assert a != g.local(0, "self").attr("fc1").item(1)
    assert g.local(0, "self").attr("w") != g.local(0, "self").module_attr("w")
    assert g.local(0, "x").item(1) != g.local(0, "x").item("1")
    assert len({a, b, g.local(1, "x")}) == 2


# ---- nn.Module fast path -----------------------------------------------------------------------

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Linear(2, 2)
        self.register_buffer("running", torch.zeros(2))
        self.scale = 3
        self.layer1 = torch.nn.Sequential(torch.nn.Linear(2, 2))


class WithProperty(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Linear(2, 2)

    @property
    def weight(self):
        return self.inner.weight


class WithGetattr(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)

    def __getattr__(self, name):
        return super().__getattr__(name)


def test_module_attr_plan():
    net = Net()
    assert g.module_attr_plan(net, "conv") == (True, "submodule", "")
    assert g.module_attr_plan(net, "running") == (True, "buffer", "")
    assert g.module_attr_plan(net, "scale") == (True, "attribute", "")
    assert g.module_attr_plan(net.conv, "weight") == (True, "parameter", "")
    assert g.module_attr_plan(net, "nothing") == (
        False, "none", "'nothing' is not in the instance dict, _parameters, _buffers or _modules")
    assert g.module_attr_plan(net, "forward") == (
        False, "none", "class Net defines an attribute 'forward'")
    assert g.module_attr_plan(WithProperty(), "weight") == (
        False, "none", "class WithProperty defines a property 'weight'")
    assert g.module_attr_plan(WithGetattr(), "lin") == (
        False, "none", "class WithGetattr overrides __getattr__")
    assert g.module_attr_plan(Cfg(), "lr") == (False, "none", "not an nn.Module instance (type Cfg)")


def test_module_attr_fast_fetch_matches_getattr():
    net = Net()
    self_ = g.local(0, "self")
    cases = [
        (self_.module_attr("conv", "submodule").module_attr("weight", "parameter"),
         "self.conv.weight", net.conv.weight),
        (self_.module_attr("conv", "submodule").module_attr("bias", "parameter"),
         "self.conv.bias", net.conv.bias),
        (self_.module_attr("running", "buffer"), "self.running", net.running),
        (self_.module_attr("scale"), "self.scale", 3),
        (self_.module_attr("layer1", "submodule").item(0).module_attr("weight", "parameter"),
         "self.layer1[0].weight", net.layer1[0].weight),
    ]
    for src, name, value in cases:
        assert src.name == name
        assert src.fetch([net], {}) is value or src.fetch([net], {}) == value
    with pytest.raises(AttributeError, match="'Net' object has no attribute 'gone'"):
        self_.module_attr("gone").fetch([net], {})


def test_module_params_guarded_through_fast_path():
    net = Net()
    self_ = g.local(0, "self")
    w = self_.module_attr("conv", "submodule").module_attr("weight", "parameter")
    b = g.GuardSetBuilder()
    b.add("ID_MATCH", self_, net)
    b.add("TENSOR_MATCH", w, net.conv.weight, where=("net.py", 9, "return self.conv(x)"))
    gs = b.build()
    assert gs.check([net], {})
    net.conv.weight = torch.nn.Parameter(torch.randn(3, 2))  # replaced through Module.__setattr__
    assert gs.failures([net], {})[0]["reason"] == (
        "tensor 'self.conv.weight' size mismatch at dim 0: expected 2, got 3")


# ---- GuardSet ----------------------------------------------------------------------------------

def test_dedup_of_identical_guards_on_equal_sources():
    b = g.GuardSetBuilder()
    t = torch.randn(2)
    assert b.add("TENSOR_MATCH", g.local(0, "x"), t)
    assert not b.add("TENSOR_MATCH", g.local(0, "x"), torch.zeros(2))  # same expectation
    assert b.add("TENSOR_MATCH", g.local(0, "x"), torch.zeros(3))      # different expectation
    assert b.add("TYPE_MATCH", g.local(0, "cfg").attr("lr"), 1.0)
    assert not b.add("TYPE_MATCH", g.local(0, "cfg").attr("lr"), 2.0)
    assert b.add("GRAD_MODE")
    assert not b.add("GRAD_MODE")
    assert b.add("EQUALS_MATCH", g.local(1, "n"), 3)
    assert not b.add("EQUALS_MATCH", g.local(1, "n"), 3)
    assert b.add("EQUALS_MATCH", g.local(1, "n"), True)  # True is not 1 for the guard
    assert len(b) == 6
    assert len(b.build()) == 6 and len(b) == 0


def test_failures_lists_every_failing_guard_in_check_order():
    b = g.GuardSetBuilder()
    b.add("TENSOR_MATCH", g.local(0, "x"), torch.randn(4, 8), where=("m.py", 5, "a = x + 1"))
    b.add("TENSOR_MATCH", g.local(1, "y"), torch.randn(4, 8), where=("m.py", 6, "b = y * 2"))
    b.add("EQUALS_MATCH", g.global_("SCALE"), 2.0, where=("m.py", 7, "c = a * SCALE"))
    b.add("GRAD_MODE", where=("m.py", 4, "def f(x, y):"))
    gs = b.build()
    ok = [torch.randn(4, 8), torch.randn(4, 8)]
    assert gs.check(ok, {"SCALE": 2.0})
    assert gs.failures(ok, {"SCALE": 2.0}) == []
    with torch.no_grad():
        fails = gs.failures([torch.randn(4, 8), torch.randn(4, 9)], {"SCALE": 3.0})
    assert [(x["kind"], x["source"], x["reason"], x["line"]) for x in fails] == [
        ("GRAD_MODE", "", "grad mode changed: expected enabled, got disabled", 4),
        ("EQUALS_MATCH", "G['SCALE']", "'G['SCALE']' changed: expected 2.0, got 3.0", 7),
        ("TENSOR_MATCH", "y", "tensor 'y' size mismatch at dim 1: expected 8, got 9", 6),
    ]
    assert fails[2]["text"] == ("tensor 'y' size mismatch at dim 1: expected 8, got 9\n"
                                "  (guard created at m.py:6: b = y * 2)")


def test_describe_orders_cheap_checks_first():
    # Global state first; then per source (fetched once) its guards cheapest first; sources
    # whose cheapest guard is cheaper come first; insertion order breaks ties.
    b = g.GuardSetBuilder()
    b.add("TENSOR_MATCH", g.local(0, "x"), torch.randn(2), where=("m.py", 3, "return x + n"))
    b.add("EQUALS_MATCH", g.local(1, "n"), 1, where=("m.py", 3, "return x + n"))
    b.add("TENSOR_MATCH", g.local(2, "z"), torch.randn(3))
    b.add("TYPE_MATCH", g.local(2, "z"), torch.randn(3))
    b.add("GRAD_MODE")
    lines = b.build().describe().splitlines()
    assert [line.split("  #")[0].rstrip() for line in lines] == [
        "GRAD_MODE     grad mode is enabled",
        "TYPE_MATCH    type(z) is Tensor",
        "TENSOR_MATCH  tensor z: float32 cpu sizes=[3] strides=[1] requires_grad=False",
        "EQUALS_MATCH  n == 1 (int)",
        "TENSOR_MATCH  tensor x: float32 cpu sizes=[2] strides=[1] requires_grad=False",
    ]
    assert lines[3].endswith("  # m.py:3: return x + n")
    assert "#" not in lines[1]


def test_source_that_raises_is_a_clean_failure():
    class Obj:
        pass

    o = Obj()
    o.w = torch.randn(2)
    src = g.local(0, "self").attr("w")
    b = g.GuardSetBuilder()
    b.add("TENSOR_MATCH", src, o.w, where=("m.py", 8, "return self.w * 2"))
    b.add("NOT_NONE", src.attr("grad_fn").attr("name"))  # deeper guard under the same source
    b.add("EQUALS_MATCH", g.local(1, "n"), 1)
    gs = b.build()
    del o.w
    assert gs.check([o, 1], {}) is False  # returns normally: no exception left set
    fails = gs.failures([o, 1], {})
    assert len(fails) == 1
    assert fails[0]["reason"] == (
        "could not read 'self.w': AttributeError: 'Obj' object has no attribute 'w'")
    assert fails[0]["text"].endswith("(guard created at m.py:8: return self.w * 2)")
    # Unbound local (short locals list), missing global.
    gs = one_guard("IS_NONE", g.local(2, "z"))
    assert not gs.check([], {})
    assert reason(gs, []) == "could not read 'z': UnboundLocalError: local variable 'z' (slot 2) is not bound"
    gs = one_guard("IS_NONE", g.global_("GONE"))
    assert reason(gs, [], {}) == "could not read 'G['GONE']': NameError: name 'GONE' is not defined"


def test_raising_comparison_is_a_failure_not_an_exception():
    class Key(str):
        def __eq__(self, other):
            raise RuntimeError("boom")

        __hash__ = str.__hash__

    gs = one_guard("DICT_KEYS", X, {"a": 1})
    assert gs.check([{"a": 2}], {})
    assert not gs.check([{Key("a"): 2}], {})


# ---- refcounts and performance -----------------------------------------------------------------

class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 16)
        self.fc3 = torch.nn.Linear(16, 4)


def mlp_guards(model, fast=True):
    self_ = g.local(0, "self")
    b = g.GuardSetBuilder()
    b.add("ID_MATCH", self_, model)
    for name in ("fc1", "fc2", "fc3"):
        mod = self_.module_attr(name, "submodule") if fast else self_.attr(name)
        for p in ("weight", "bias"):
            src = mod.module_attr(p, "parameter") if fast else mod.attr(p)
            b.add("TENSOR_MATCH", src, getattr(getattr(model, name), p))
    return b.build()


def xy_guards(x, y):
    b = g.GuardSetBuilder()
    b.add("TENSOR_MATCH", g.local(0, "x"), x)
    b.add("TENSOR_MATCH", g.local(1, "y"), y)
    return b.build()


def test_refcounts_stable_over_100k_checks():
    x, y = torch.randn(1), torch.randn(1)
    model = MLP()
    params = [model.fc1, model.fc2, model.fc3] + list(model.parameters())
    gs_xy, gs_mlp = xy_guards(x, y), mlp_guards(model)
    before = [sys.getrefcount(o) for o in [x, y, model] + params]
    ns, passed = gs_xy.bench([x, y], {}, 100_000)
    assert passed == 100_000
    ns, passed = gs_mlp.bench([model], {}, 100_000)
    assert passed == 100_000
    # Failing paths too: a failing tensor and a source that raises.
    ns, passed = gs_xy.bench([x, torch.randn(2)], {}, 100_000)
    assert passed == 0
    broken = MLP()
    gs_broken = mlp_guards(broken)
    del broken.fc2  # fc1's guards pass, then reading self.fc2 raises inside the check
    ns, passed = gs_broken.bench([broken], {}, 100_000)
    assert passed == 0
    for _ in range(1000):
        assert len(gs_broken.failures([broken], {})) == 1
    after = [sys.getrefcount(o) for o in [x, y, model] + params]
    assert before == after


def test_perf_report(capsys):
    x, y = torch.randn(1), torch.randn(1)
    model = MLP()
    n = 200_000
    rows = []
    gs = xy_guards(x, y)
    rows.append(("x + y: 2 TENSOR_MATCH", min(gs.bench([x, y], {}, n)[0] for _ in range(3))))
    gs = mlp_guards(model)
    rows.append(("MLP: ID_MATCH + 6 TENSOR_MATCH (fast path)",
                 min(gs.bench([model], {}, n)[0] for _ in range(3))))
    gs = mlp_guards(model, fast=False)
    rows.append(("MLP: same through getattr (Module.__getattr__)",
                 min(gs.bench([model], {}, n // 10)[0] for _ in range(3))))
    start = time.perf_counter()
    for _ in range(n):
        x + y
    rows.append(("eager x + y from Python (reference)", (time.perf_counter() - start) / n * 1e9))
    with capsys.disabled():
        print()
        for label, ns in rows:
            print(f"  guard perf: {label:50s} {ns:8.1f} ns")
