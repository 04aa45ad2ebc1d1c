"""Constructs of real model code captured whole (issue 14; core/src/interp/call_constructs.cpp):
torch.autograd.Function.apply, torch.nn modules made inside forward, torch.autograd.Variable,
legacy tensor constructors and x.new(...), item()/int() of tensors made from constants, modules
with forward hooks, sets, lazy generators, numpy on constants, instances of user classes. Each is
compared with eager (outputs, gradients, side effects) in fullgraph mode, with a guard test."""
import collections
import dataclasses
import typing

import pytest
import torch
from torch import nn
from torch.autograd import Variable

import dynamo
import dynamo.aot
from capture_harness import Recorder, same
from stacks import only_on_stack2


@pytest.fixture(autouse=True)
def _fresh():
    dynamo.reset()
    yield
    dynamo.reset()


def one_graph(fn, *args, backend="eager"):
    """Runs fn compiled with fullgraph=True; asserts exactly one graph with ops was made."""
    with Recorder() as rec:
        out = dynamo.compile(fn, fullgraph=True, backend=backend)(*args)
    assert len(rec.graphs) == 1, rec.records
    assert rec.breaks == []
    return out


# ---- torch.autograd.Function.apply ------------------------------------------------------------

class StraightThrough(torch.autograd.Function):
    """A backward that is not the forward's derivative: only the user's backward gives it."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        ctx.scale = scale
        return torch.round(x * scale) / scale

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (x.abs() <= 1).to(grad.dtype) * 3.0, None


class TwoOutputs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.needs = ctx.needs_input_grad
        idx = a.argmax(dim=1)
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(a, b)
        return a * b, idx

    @staticmethod
    def backward(ctx, grad, _grad_idx):
        a, b = ctx.saved_tensors
        return grad * b * 2, grad * a * 5


def _grads(fn, backend, *shapes):
    torch.manual_seed(0)
    inputs = [torch.randn(*s, requires_grad=True) for s in shapes]
    ref_inputs = [t.detach().clone().requires_grad_() for t in inputs]
    out = one_graph(fn, *inputs, backend=backend)
    ref = fn(*ref_inputs)
    assert same(out, ref)
    first = lambda o: o[0] if isinstance(o, tuple) else o
    first(out).sum().backward()
    first(ref).sum().backward()
    for t, r in zip(inputs, ref_inputs):
        assert torch.equal(t.grad, r.grad)
    return inputs


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_autograd_function_runs_the_users_backward(backend):
    def f(x):
        y = StraightThrough.apply(x * 2, 4.0)
        return y.relu() + 1

    (x,) = _grads(f, backend, (4, 5))
    # The user's backward ran (x.abs() <= 1 mask times 3), not the derivative of round (zero).
    assert x.grad.abs().sum() > 0


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_autograd_function_two_outputs_non_differentiable(backend):
    def f(a, b):
        prod, idx = TwoOutputs.apply(a, b)
        return prod.sum(dim=1) + idx.float(), idx

    _grads(f, backend, (3, 4), (3, 4))


def test_aot_backend_leaves_the_graph_to_the_eager_runner():
    def f(x):
        return StraightThrough.apply(x, 2.0) * 3

    _grads(f, "aot_eager", (5,))
    assert any("StraightThrough" in (r.get("fallback") or "") for r in dynamo.aot.last_records())


def test_autograd_function_under_no_grad_and_aliased_apply():
    apply = StraightThrough.apply  # the way libraries export it: `round_ste = RoundSTE.apply`

    def f(x):
        with torch.no_grad():
            a = apply(x, 8.0)
        return a + StraightThrough.apply(x, 2.0)

    x = torch.randn(6, requires_grad=True)
    assert same(one_graph(f, x), f(x))


calls = []


class Counting(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        calls.append(x.shape[0])  # a side effect of the forward: once per call, as in eager
        return x.exp()

    @staticmethod
    def backward(ctx, g):
        return g


def test_autograd_function_forward_side_effects_happen_once_per_call():
    def f(x):
        return Counting.apply(x) + 1

    x = torch.randn(3)
    cf = dynamo.compile(f, fullgraph=True)
    calls.clear()
    out1, out2 = cf(x), cf(x)
    compiled_calls = list(calls)
    calls.clear()
    f(x), f(x)
    assert same(out1, f(x)) and same(out2, f(x))
    assert compiled_calls == [3, 3] == calls[:2]


class Doubler(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


class Tripler(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, g):
        return g * 3


FN = Doubler


def test_autograd_function_guard_on_the_class():
    def f(x):
        return FN.apply(x) + 1

    global FN
    x = torch.ones(2)
    cf = dynamo.compile(f, fullgraph=True)
    with Recorder() as rec:
        assert same(cf(x), f(x))
        FN = Tripler
        try:
            assert same(cf(x), torch.full((2,), 4.0))
        finally:
            FN = Doubler
    assert len(rec.compiled) == 2


class Printing(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        print("forward")
        return x + 1

    @staticmethod
    def backward(ctx, g):
        return g


def test_autograd_function_whose_forward_cannot_be_traced_breaks(capsys):
    def f(x):
        return Printing.apply(x * 2) * 3

    x = torch.randn(3)
    with pytest.raises(dynamo.Unsupported, match=r"the forward of torch.autograd.Function .*Printing cannot be "
                                                 r"captured: call to print\(\)"):
        dynamo.compile(f, fullgraph=True)(x)
    dynamo.reset()
    capsys.readouterr()
    assert same(dynamo.compile(f)(x), f(x))
    assert capsys.readouterr().out == "forward\nforward\n"


# ---- modules made inside forward --------------------------------------------------------------

class Head(nn.Module):
    def __init__(self, dim=1):
        super().__init__()
        self.dim = dim
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        x = nn.ReLU(inplace=False)(self.fc(x))
        x = nn.Dropout(p=0.0)(x)
        return nn.Softmax(dim=self.dim)(x), nn.LogSoftmax(self.dim)(x)


def test_modules_made_in_forward():
    torch.manual_seed(0)
    m = Head()
    x = torch.randn(3, 4)
    assert same(one_graph(m, x), m(x))


def test_upsample_and_pooling_made_in_forward():
    def f(x):
        y = nn.Upsample(scale_factor=2, mode="nearest")(x)
        return nn.MaxPool2d(kernel_size=2, stride=2)(y) + nn.AdaptiveAvgPool2d((1, 1))(x)

    x = torch.randn(1, 2, 4, 4)
    assert same(one_graph(f, x), f(x))


def test_dropout_made_in_forward_draws_the_same_numbers_as_eager():
    def f(x):
        return nn.Dropout(0.5)(x) * 2

    x = torch.ones(64)
    torch.manual_seed(3)
    out = one_graph(f, x)
    torch.manual_seed(3)
    assert same(out, f(x))


def test_module_made_in_forward_guards_its_arguments():
    m = Head(dim=1)
    x = torch.randn(3, 4)
    cf = dynamo.compile(m, fullgraph=True)
    with Recorder() as rec:
        assert same(cf(x), m(x))
        m.dim = 0
        assert same(cf(x), m(x))
    assert len(rec.compiled) == 2


def test_module_with_parameters_made_in_forward_breaks():
    def f(x):
        return nn.Linear(3, 3)(x)

    with pytest.raises(dynamo.Unsupported, match=r"creating a module with parameters \(Linear\) inside the compiled function: they would be new on "
                                                 r"every call \(create it in __init__\)"):
        dynamo.compile(f, fullgraph=True)(torch.randn(2, 3))
    dynamo.reset()
    x = torch.randn(2, 3)
    torch.manual_seed(1)
    out = dynamo.compile(f)(x)
    torch.manual_seed(1)
    assert same(out, f(x))


def test_module_made_in_forward_that_escapes_is_new_on_every_call():
    def f(x):
        act = nn.ReLU()
        return act(x), act

    cf = dynamo.compile(f)
    x = torch.randn(3)
    (y1, a1), (y2, a2) = cf(x), cf(x)
    assert same(y1, f(x)[0]) and a1 is not a2 and isinstance(a1, nn.ReLU)


# ---- torch.autograd.Variable ------------------------------------------------------------------

def test_variable_is_detach_sharing_storage():
    def f(x):
        y = x * 2
        v = Variable(y)
        v.add_(1)  # changes y too, as in eager
        w = Variable(x.detach(), requires_grad=True)
        return y, v.requires_grad, w * 3, w.requires_grad

    x = torch.randn(3, requires_grad=True)
    out, ref = one_graph(f, x), f(x)
    assert same(out[:2], ref[:2]) and out[3] is True and same(out[2].detach(), ref[2].detach())
    assert out[2].requires_grad and out[2].grad_fn is not None


def test_variable_with_requires_grad_not_a_constant_breaks():
    def f(x, flag):
        return Variable(x, requires_grad=flag)

    with pytest.raises(dynamo.Unsupported, match="torch.autograd.Variable with a requires_grad that is not a "
                                                 "constant bool"):
        dynamo.compile(f, fullgraph=True)(torch.randn(2), torch.tensor(True))


# ---- legacy constructors and x.new ------------------------------------------------------------

def test_new_with_a_size_is_sizes_not_data():
    # x.new(x.size()) used to become x.new((2, 2)): a tensor holding 2., 2. (broadcast silently).
    def f(x):
        buf = x.new(x.size()).zero_()
        return buf + x, x.new(2, 3).shape, x.new().shape, x.new([1, 2]), x.new((4, 5))

    x = torch.randn(2, 2, dtype=torch.float64)
    out, ref = one_graph(f, x), f(x)
    assert same(out, ref)
    assert out[3].dtype == torch.float64


def test_legacy_constructors():
    def f(x):
        a = torch.FloatTensor(2, 3).shape
        b = torch.LongTensor([1, 2, 3])
        c = torch.Tensor(x.size())  # sizes: uninitialised, compare shape and dtype
        d = torch.Tensor([[1, 2], [3, 4]])
        e = torch.ByteTensor(4).dtype
        return a, b, c.shape, c.dtype, d + x, e, torch.Tensor().shape

    x = torch.randn(2, 2)
    assert same(one_graph(f, x), f(x))


def test_legacy_torch_tensor_follows_the_default_dtype():
    def f(x):
        return torch.Tensor([1, 2]) + x.sum()

    x = torch.ones(2, dtype=torch.float64)
    cf = dynamo.compile(f, fullgraph=True)
    assert same(cf(x), f(x))
    torch.set_default_dtype(torch.float64)
    try:
        out = cf(x)
        assert out.dtype == torch.float64 and same(out, f(x))
    finally:
        torch.set_default_dtype(torch.float32)


# ---- Python values of tensors made from constants ---------------------------------------------

def test_item_and_int_of_tensors_made_from_constants_and_sizes():
    def f(x):
        n = torch.tensor(x.shape[0]).item()
        m = int(torch.tensor(x.shape[1]))
        scale = float(torch.tensor(2.5))
        lst = torch.arange(3).tolist()
        return x * n + m * scale, n, m, lst

    x = torch.randn(2, 3)
    cf = dynamo.compile(f, fullgraph=True)
    with Recorder() as rec:
        assert same(cf(x), f(x))
        y = torch.randn(5, 3)
        assert same(cf(y), f(y))  # a new size recompiles: n is not reused
    assert len(rec.compiled) == 2


def test_item_of_a_constant_tensor_changed_by_an_op_breaks():
    def f(x):
        t = torch.tensor([1.0])
        t.add_(x.sum())
        return t.item()

    with pytest.raises(dynamo.Unsupported, match=r"Tensor.item\(\) needs the tensor's data"):
        dynamo.compile(f, fullgraph=True)(torch.ones(3))
    dynamo.reset()
    assert dynamo.compile(f)(torch.ones(3)) == 4.0


# ---- modules with forward hooks and pre-hooks -------------------------------------------------

def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2))


def test_forward_hooks_and_pre_hooks_run_in_the_graph():
    net = _net()
    features = {}

    def keep(name):
        def hook(module, inputs, output):
            features[name] = output.detach()
        return hook

    net[0].register_forward_pre_hook(lambda m, inp: (inp[0] * 2,))
    net[0].register_forward_hook(lambda m, inp, out: out + inp[0].sum())
    net[1].register_forward_hook(keep("relu"))
    net[2].register_forward_pre_hook(lambda m, inp: inp[0] - 1)  # a tensor, not a tuple

    def f(x):
        return net(x), features["relu"] * 1

    x = torch.randn(3, 4)
    out = one_graph(f, x)
    compiled_features = dict(features)
    features.clear()
    assert same(out, f(x)) and same(compiled_features, features)


def test_hooks_removed_or_added_after_compiling_recompile():
    net = _net()
    h = net[0].register_forward_hook(lambda m, i, o: o * 10)
    x = torch.randn(2, 4)
    cf = dynamo.compile(net, fullgraph=True)
    with Recorder() as rec:
        assert same(cf(x), net(x))
        h.remove()
        assert same(cf(x), net(x))
        net[2].register_forward_hook(lambda m, i, o: o - 3)
        assert same(cf(x), net(x))
    assert len(rec.compiled) == 3


def test_global_forward_hook():
    net = _net()
    handle = torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: o * 2 if isinstance(m, nn.Linear) else None)
    try:
        x = torch.randn(2, 4)
        assert same(one_graph(net, x), net(x))
    finally:
        handle.remove()


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_forward_hook_gradients(backend):
    net = _net()
    net[0].register_forward_hook(lambda m, i, o: o.tanh())
    ref = _net()
    ref[0].register_forward_hook(lambda m, i, o: o.tanh())
    x = torch.randn(3, 4)
    one_graph(net, x, backend=backend).sum().backward()
    ref(x).sum().backward()
    for p, q in zip(net.parameters(), ref.parameters()):
        assert torch.equal(p.grad, q.grad)


def test_backward_hooks_still_break():
    net = _net()
    net[0].register_full_backward_hook(lambda m, gi, go: None)
    with pytest.raises(dynamo.Unsupported, match=r"call of a module with backward hooks \(Linear\)"):
        dynamo.compile(net, fullgraph=True)(torch.randn(2, 4))


def test_hook_replaced_under_the_same_handle_recompiles():
    net = _net()
    h = net[0].register_forward_hook(lambda m, i, o: o * 10)
    x = torch.randn(2, 4)
    cf = dynamo.compile(net, fullgraph=True)
    assert same(cf(x), net(x))
    net[0]._forward_hooks[h.id] = lambda m, i, o: o * -1
    assert same(cf(x), net(x))


# torch 2.x's Module._call_impl runs hooks and forward under `try: ... except Exception:`, whose
# handler calls the forward hooks registered with always_call=True before re-raising. Without such
# hooks the handler only re-raises and the hooks are captured as above; with one, the handler must
# stay in force, so the module call runs as Python (and its always-called hook runs on an error).
ALWAYS_CALL = only_on_stack2("forward hooks with always_call=True came with torch 2.1's Module._call_impl")


def _failing_input():
    return torch.randn(2, 5)  # net[0] is Linear(4, 6): forward raises


@ALWAYS_CALL
def test_always_called_forward_hook_keeps_the_handler_in_force():
    net = _net()
    calls = []
    net[2].register_forward_hook(lambda m, i, o: calls.append("hook"), always_call=True)
    net[0].register_forward_hook(lambda m, i, o: calls.append("first"), always_call=True)
    x = torch.randn(2, 4)
    with pytest.raises(dynamo.Unsupported, match=r"a tensor operation inside a try block"):
        dynamo.compile(net, fullgraph=True)(x)
    dynamo.reset()
    calls.clear()
    expected = net(x)
    eager_calls = list(calls)
    calls.clear()
    cf = dynamo.compile(net)
    assert same(cf(x), expected) and calls == eager_calls == ["first", "hook"]
    calls.clear()
    with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied"):
        cf(_failing_input())
    assert calls == ["first"]  # net[0]'s handler ran it before re-raising, as in eager


@ALWAYS_CALL
@pytest.mark.parametrize("where", ["module", "global"])
def test_always_called_hook_registered_after_compiling_recompiles(where):
    net = _net()
    net[0].register_forward_hook(lambda m, i, o: o * 2)
    x = torch.randn(2, 4)
    calls = []
    with Recorder() as rec:
        cf = dynamo.compile(net)
        assert same(cf(x), net(x))
        assert len(rec.compiled) == 1 and rec.breaks == []
        if where == "module":
            handle = net[0].register_forward_hook(lambda m, i, o: calls.append("always"), always_call=True)
        else:
            handle = torch.nn.modules.module.register_module_forward_hook(
                lambda m, i, o: calls.append("always"), always_call=True)
        try:
            assert same(cf(x), net(x))
            assert len(rec.compiled) > 1  # the empty always-called registries are guarded
            bad = _failing_input()
            calls.clear()
            with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied"):
                net(bad)
            eager_calls = list(calls)
            calls.clear()
            with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied"):
                cf(bad)
            # module: net[0]'s handler; global: net[0]'s, then the Sequential's
            assert calls == eager_calls == ["always"] * (1 if where == "module" else 2)
        finally:
            handle.remove()


# ---- weakrefs -----------------------------------------------------------------------------------

class _Holder:
    pass


def test_weakref_call_gives_the_object_the_function_reads_and_is_guarded():
    """ref() of a weakref the function reads: the object it already read through its own source
    (torch 2.x's RNN compares its flat weights' weakrefs with its parameters this way)."""
    import weakref
    h = _Holder()
    h.w = torch.randn(3)
    h.refs = [weakref.ref(h.w)]

    def f(x):
        w = h.w
        changed = any(r() is not w for r in h.refs)
        return x * w + (1 if changed else 0)

    x = torch.randn(3)
    assert same(one_graph(f, x), f(x))
    dynamo.reset()
    cf = dynamo.compile(f)
    with Recorder() as rec:
        assert same(cf(x), f(x))
        assert len(rec.records) == 1 and rec.breaks == []
        old, h.w = h.w, torch.randn(3)  # the weakref points at the old tensor, still alive:
        assert same(cf(x), f(x))        # the guard fails; the new capture breaks at the call
        assert len(rec.records) == 2
        assert [b["detail"] for b in rec.breaks] == [
            "call of a weakref to an object (Tensor) that the function does not read otherwise"]
    del old  # now dead: ref() is None, captured whole
    dynamo.reset()
    assert same(one_graph(f, x), f(x))
    h.refs = [weakref.ref(h.w)]
    dynamo.reset()
    assert same(one_graph(f, x), f(x))


def test_weakref_to_an_object_not_read_otherwise_breaks():
    import weakref
    h = _Holder()
    h.t = torch.randn(3)
    h.ref = weakref.ref(h.t)

    def f(x):
        return x + h.ref()

    x = torch.randn(3)
    with pytest.raises(dynamo.Unsupported, match=r"call of a weakref to an object \(Tensor\) that the "
                                                  r"function does not read otherwise"):
        dynamo.compile(f, fullgraph=True)(x)
    dynamo.reset()
    assert same(dynamo.compile(f)(x), f(x))


def test_dead_weakref_gives_none():
    import weakref
    h = _Holder()
    h.ref = weakref.ref(_Holder())  # dead at once

    def f(x):
        return x + 1 if h.ref() is None else x - 1

    x = torch.randn(3)
    assert same(one_graph(f, x), f(x))


# ---- sets built in the function ---------------------------------------------------------------

def test_set_of_strings_iterates_in_the_real_sets_order():
    def f(x):
        names = {"alpha", "beta", "gamma", "delta", "epsilon"}
        names.add("zeta")
        names.discard("beta")
        order = []
        out = x
        for i, n in enumerate(names):
            order.append(n)
            out = out * (i + 1) + len(n)
        return out, order, "gamma" in names, len(names)

    x = torch.ones(2)
    assert same(one_graph(f, x), f(x))


def test_set_comprehension_update_and_operators():
    def f(a, b, keys):
        sizes = {t.shape[-1] for t in (a, b)}
        seen = set()
        for k in keys:
            seen.add(k)
        seen.update([7, 8], {9})
        both = seen & {1, 7, 100}
        rest = seen - both
        popped = rest.pop()
        return a * len(sizes) + b * len(seen), sorted(both), popped, rest.issubset(seen), {*both, 3} == {1, 3, 7}

    a, b = torch.randn(2, 3), torch.randn(2, 3)
    assert same(one_graph(f, a, b, [1, 2, 2, 3]), f(a, b, [1, 2, 2, 3]))


def test_set_built_from_an_input_list_is_guarded_by_the_list():
    def f(x, keep):
        wanted = set(keep)
        return x * 2 if 3 in wanted else x - 1

    x = torch.ones(2)
    cf = dynamo.compile(f, fullgraph=True)
    with Recorder() as rec:
        assert same(cf(x, [1, 2]), f(x, [1, 2]))
        assert same(cf(x, [3, 2]), f(x, [3, 2]))
    assert len(rec.compiled) == 2


def test_set_of_modules_by_identity():
    net = _net()

    def f(x):
        seen = set()
        for m in [net[0], net[1], net[0], net[2]]:
            if m in seen:
                continue
            seen.add(m)
            x = m(x)
        return x

    x = torch.randn(2, 4)
    assert same(one_graph(f, x), f(x))


def test_a_set_that_outlives_the_graph_is_new_on_every_call():
    def f(x):
        s = {1, 2}
        s.add(x.shape[0])
        return x + 1, s

    cf = dynamo.compile(f)
    x = torch.ones(3)
    (y1, s1), (y2, s2) = cf(x), cf(x)
    assert s1 == {1, 2, 3} and s1 is not s2 and same(y1, f(x)[0])
    s1.add(100)
    assert cf(x)[1] == {1, 2, 3}


def test_set_changed_while_iterating_breaks_as_python_raises():
    def f(x):
        s = {1, 2}
        for k in s:
            s.add(k + 10)
        return x

    with pytest.raises(RuntimeError, match="Set changed size during iteration"):
        dynamo.compile(f)(torch.ones(1))


def test_set_of_tensors_breaks():
    def f(x, y):
        return len({x, y})

    with pytest.raises(dynamo.Unsupported, match=r"a set member that is not known while capturing \(tensor"):
        dynamo.compile(f, fullgraph=True)(torch.ones(1), torch.ones(1))


def test_mutating_a_set_from_outside_breaks():
    shared = {1}

    def f(x):
        shared.add(2)
        return x + len(shared)

    with pytest.raises(dynamo.Unsupported, match=r"call to <built-in method add of set object"):
        dynamo.compile(f, fullgraph=True)(torch.ones(1))
    dynamo.reset()
    shared.clear()
    shared.add(1)
    assert same(dynamo.compile(f)(torch.ones(1)), torch.full((1,), 3.0)) and shared == {1, 2}


def test_set_orders_of_every_construction_match_eager():
    # Iteration order depends on how the table was built (merged from a set, pre-sized for a
    # dict, grown member by member, with deleted slots): each is replayed on a real set.
    def f(x, d):
        a = set(d)
        b = set(d.keys())
        c = {"k%d" % i for i in range(20)}
        e = set()
        e.update(c)
        e.update(frozenset(["z1", "z2", "z3"]))
        e |= {"w"}
        for k in sorted(c)[:7]:
            c.discard(k)
        c.add("new")
        return x + len(e), list(a), list(b), list(c), list(e), list(c | a), list(a.union(["q", "r"]))

    d = {f"key{i}": i for i in range(12)}
    x = torch.ones(1)
    assert same(one_graph(f, x, d), f(x, d))


def test_set_changed_by_an_in_place_operator_through_an_alias():
    def f(x):
        s = {1}
        t = s
        s |= {5, 9}
        s -= {1}
        return [x * k for k in t]

    x = torch.ones(1)
    assert same(one_graph(f, x), f(x))


# ---- generators run lazily --------------------------------------------------------------------

def test_generator_values_are_computed_when_the_loop_asks_for_them():
    # The generator reads x; the loop body changes x in place between two values.
    def gen(x):
        for _ in range(2):
            yield x * 1

    def f(x):
        outs = []
        for y in gen(x):
            outs.append(y)
            x.add_(1)
        return outs

    x, x_ref = torch.zeros(2), torch.zeros(2)
    assert same(one_graph(f, x), f(x_ref)) and same(x, x_ref)


events = []


def test_generator_and_consumer_side_effects_interleave_as_in_python():
    def numbers(n):
        for i in range(n):
            events.append(i)
            yield i

    def f(x):
        for k, v in enumerate(numbers(3), start=1):
            events.append(-10 * k)
            x = x + v
        first = next(numbers(2))
        pairs = list(zip(numbers(3), ["a", "b"]))  # zip pulls a third value, then stops
        return x, first, pairs

    x = torch.zeros(1)
    events.clear()
    out = one_graph(f, x)
    compiled = list(events)
    events.clear()
    assert same(out, f(x)) and compiled == events


def test_generator_partly_consumed_then_listed():
    def f(xs):
        g = (t * 2 for t in xs)
        head = next(g)
        rest = list(g)
        return head, rest, next(g, None), list(g)

    xs = [torch.randn(2) for _ in range(3)]
    assert same(one_graph(f, xs), f(xs))


def test_generator_method_of_a_module():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(3, 3), nn.Linear(3, 3)])

        def stages(self, x):
            for layer in self.layers:
                x = layer(x)
                yield x

        def forward(self, x):
            outs = []
            for y in self.stages(x):
                outs.append(y.relu())
            return outs

    torch.manual_seed(0)
    net, x = Net(), torch.randn(2, 3)
    assert same(one_graph(net, x), net(x))


def test_generator_that_prints_keeps_the_order_of_output(capsys):
    def gen(x):
        for i in range(2):
            print("yield", i)
            yield x + i

    def f(x):
        total = x
        for y in gen(x):
            print("got")
            total = total + y
        return total

    x = torch.ones(1)
    f(x)
    eager = capsys.readouterr().out
    assert same(dynamo.compile(f)(x), f(x))
    assert capsys.readouterr().out == eager * 2


def test_yield_from_delegates_values_and_returns_the_inner_result():
    """`yield from` (GET_YIELD_FROM_ITER, SEND, END_SEND on 3.12): the inner generator's values
    pass through lazily, interleaved with the consumer's side effects, and its return value is the
    expression's value."""
    def inner(x):
        events.append("inner 1")
        yield x + 1
        events.append("inner 2")
        yield x * 2
        return x.sum()

    def outer(x):
        total = yield from inner(x)
        yield from (x - 1, x - 2)  # a tuple: iter() of it
        yield from []
        yield total

    def f(x):
        outs = []
        for y in outer(x):
            events.append("got")
            outs.append(y)
            x.add_(1)  # the next value sees the change, as in Python
        return outs

    x, x_ref = torch.randn(3), None
    x_ref = x.clone()
    events.clear()
    out = one_graph(f, x)
    compiled = list(events)
    events.clear()
    assert same(out, f(x_ref)) and same(x, x_ref) and compiled == events


def test_yield_from_in_recursive_generators_modules_walk():
    """Module.modules() / named_modules() recurse through `yield from` (torch 2.x's
    Transformer fast-path checks walk self.modules()): captured whole, counted as eager counts."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 3), nn.Sequential(nn.ReLU(), nn.Sequential(nn.Linear(3, 2))))

    def f(x):
        names = [name for name, _ in net.named_modules()]
        hooked = any(len(m._forward_hooks) for m in net.modules())
        return net(x) * len(names), names, hooked

    x = torch.randn(2, 3)
    assert same(one_graph(f, x), f(x))


def test_yield_from_then_a_break_in_the_consumer_gives_eagers_result(capsys):
    def inner(x):
        yield x + 1
        yield x + 2

    def outer(x):
        yield from inner(x)

    def f(x):
        total = x
        for y in outer(x):
            print("got")
            total = total + y
        return total

    x = torch.ones(2)
    f(x)
    eager = capsys.readouterr().out
    assert same(dynamo.compile(f)(x), f(x))
    assert capsys.readouterr().out == eager * 2


# ---- numpy on sizes and constants -------------------------------------------------------------

def test_numpy_on_sizes_and_constants():
    import numpy as np

    def f(q, k, step=3, total=10):
        scale = np.sqrt(q.size(-1))
        n = int(np.prod(q.shape[1:]))
        half = int(np.floor(q.shape[-1] / 3))
        lr = 0.5 * (1 + np.cos(np.pi * step / total))
        out = q @ k.transpose(-1, -2) / scale
        return out * lr, q.reshape(-1, n)[:, :half], float(np.mean([1.0, 2.0, 4.0]))

    q, k = torch.randn(2, 3, 4), torch.randn(2, 3, 4)
    assert same(one_graph(f, q, k), f(q, k))
    cf = dynamo.compile(f, fullgraph=True)
    with Recorder() as rec:  # a new size recompiles (np.sqrt of it is not reused)
        q2, k2 = torch.randn(2, 3, 9), torch.randn(2, 3, 9)
        assert same(cf(q2, k2), f(q2, k2))
    assert len(rec.compiled) == 1


def test_numpy_of_tensor_data_breaks():
    import numpy as np

    def f(x):
        return x * np.sqrt(x.sum())

    with pytest.raises(dynamo.Unsupported, match=r"numpy.sqrt\(\) of a tensor needs its data"):
        dynamo.compile(f, fullgraph=True)(torch.ones(3))
    dynamo.reset()
    x = torch.ones(3)
    assert same(dynamo.compile(f)(x), f(x))


# ---- instances of user classes made in the function -------------------------------------------

class Scaler:
    b = 3.0  # a class attribute the instance shadows

    def __init__(self, s, b=5.0):
        super().__init__()
        self.s = s
        self.b = b
        if not hasattr(self, "cache"):
            self.cache = None

    def __call__(self, t):
        return t * self.s + self.b


@dataclasses.dataclass
class Output:
    logits: torch.Tensor
    loss: typing.Optional[torch.Tensor] = None
    scale: int = 2

    def __post_init__(self):
        self.double = self.scale * 2


def test_instances_of_plain_classes_and_dataclasses():
    fc = nn.Linear(3, 2)

    def f(x, y):
        sc = Scaler(2.0)
        logits = fc(x)
        out = Output(logits, nn.functional.cross_entropy(logits, y))
        return sc(out.logits) * out.double + out.loss, sc.b, sc.cache, getattr(sc, "missing", 7)

    x, y = torch.randn(4, 3), torch.tensor([0, 1, 1, 0])
    assert same(one_graph(f, x, y), f(x, y))


def test_instance_that_outlives_the_graph_is_new_on_every_call():
    def f(x):
        return Output(x * 2)

    cf = dynamo.compile(f)
    x = torch.ones(2)
    a, b = cf(x), cf(x)
    assert isinstance(a, Output) and a is not b and same(a.logits, x * 2) and a.double == 4


def test_replacing_init_recompiles():
    def f(x):
        return Scaler(3.0)(x)

    x = torch.ones(2)
    cf = dynamo.compile(f, fullgraph=True)
    assert same(cf(x), f(x))
    original = Scaler.__init__

    def other_init(self, s, b=0.0):
        self.s, self.b = -s, b

    Scaler.__init__ = other_init
    try:
        assert same(cf(x), torch.full((2,), -3.0))
    finally:
        Scaler.__init__ = original


def test_instance_with_bool_breaks():
    class Flag:
        def __init__(self, on):
            self.on = on

        def __bool__(self):
            return self.on

    def f(x):
        return x + 1 if Flag(False) else x - 1

    with pytest.raises(dynamo.Unsupported, match=r"truth value of .* made in the function \(defines __bool__ or __len__\)"):
        dynamo.compile(f, fullgraph=True)(torch.ones(1))
    dynamo.reset()
    assert same(dynamo.compile(f)(torch.ones(1)), torch.zeros(1))


# ---- autocast(enabled=False) blocks -----------------------------------------------------------

def test_autocast_disabled_blocks_are_captured_and_guarded():
    torch.manual_seed(0)
    fc = nn.Linear(4, 4)

    def f(x):
        with torch.autocast("cpu", enabled=False):
            y = fc(x)
        with torch.cuda.amp.autocast(enabled=False):
            z = y.float() * 2
        return z

    x = torch.randn(2, 4)
    assert same(one_graph(f, x), f(x))
    cf = dynamo.compile(f)
    assert same(cf(x), f(x))
    with Recorder() as rec:  # under autocast the block does change the state: not reused
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out, ref = cf(x), f(x)
    assert same(out, ref) and out.dtype == torch.float32
    failures = [g for r in rec.records for m in r["misses"] for g in m["failures"]]
    assert any(g["kind"] == "AUTOCAST" and g["reason"] == "autocast changed: expected off, got cpu(torch.bfloat16)"
               for g in failures)


def test_autocast_enabled_block_is_captured():
    # (test_capture_autocast.py has the backends, decorators, nesting and guards.)
    def f(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return x @ x

    x = torch.randn(2, 2)
    out = one_graph(f, x)
    assert same(out, f(x)) and out.dtype == torch.bfloat16


def test_map_and_filter_are_lazy():
    def f(xs, x):
        doubled = map(lambda t: t * 2 + x, xs)
        x.add_(1)  # map has not called the lambda yet: it sees the new x, as in eager
        firsts = list(map(torch.relu, (t - 0.5 for t in xs)))
        kept = list(filter(lambda t: t.dim() == 1, [x, x.view(1, -1), x * 3]))
        pairs = list(map(lambda a, b: a + b, xs, [1.0, 2.0]))
        return list(doubled), firsts, kept, pairs

    xs = [torch.randn(2), torch.randn(2)]
    x, x_ref = torch.zeros(2), torch.zeros(2)
    assert same(one_graph(f, xs, x), f(xs, x_ref)) and same(x, x_ref)


def test_filter_on_tensor_values_breaks():
    def f(xs):
        return list(filter(lambda t: t.sum() > 0, xs))

    with pytest.raises(dynamo.Unsupported, match="data-dependent"):
        dynamo.compile(f, fullgraph=True)([torch.ones(2), -torch.ones(2)])
    dynamo.reset()
    xs = [torch.ones(2), -torch.ones(2)]
    assert same(dynamo.compile(f)(xs), f(xs))


def test_sorted_items_with_tensor_values():
    def f(d, pairs):
        out = [k + str(v.shape[0]) for k, v in sorted(d.items())]
        rev = [v * i for i, (k, v) in enumerate(sorted(d.items(), reverse=True))]
        return out, rev, sorted(pairs)

    d = {"b": torch.ones(2), "a": torch.zeros(3), "c": torch.ones(1)}
    pairs = [(3, torch.ones(1)), (1, torch.zeros(1))]
    assert same(one_graph(f, d, pairs), f(d, pairs))


def test_sorted_with_equal_first_elements_breaks():
    def f(pairs):
        return sorted(pairs)

    with pytest.raises(dynamo.Unsupported):  # tuples with equal keys compare the tensors next
        dynamo.compile(f, fullgraph=True)([(1, torch.ones(1)), (1, torch.zeros(1))])


# ---- slices of module containers --------------------------------------------------------------

def test_slices_of_module_lists_and_sequentials():
    torch.manual_seed(0)
    layers = nn.ModuleList([nn.Linear(3, 3) for _ in range(4)])
    body = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 3), nn.Tanh())

    def f(x):
        for layer in layers[1:3]:
            x = layer(x)
        x = body[:2](x) + body[-2:](x)
        return x, len(layers[::2]), isinstance(body[1:], nn.Sequential)

    x = torch.randn(2, 3)
    assert same(one_graph(f, x), f(x))
    cf = dynamo.compile(f, fullgraph=True)
    with Recorder() as rec:  # a member added to the list recompiles
        layers.append(nn.Linear(3, 3))
        assert same(cf(x), f(x))
    assert len(rec.compiled) == 1


def test_a_slice_that_outlives_the_graph_is_new_on_every_call():
    layers = nn.ModuleList([nn.Linear(3, 3) for _ in range(3)])

    def f(x):
        part = layers[:2]
        return part[0](x), part

    cf = dynamo.compile(f)
    x = torch.randn(1, 3)
    (y1, p1), (y2, p2) = cf(x), cf(x)
    assert p1 is not p2 and isinstance(p1, nn.ModuleList) and same(y1, f(x)[0])


def test_defaultdict_made_in_the_function():
    def f(xs):
        groups = collections.defaultdict(list)
        counts = collections.defaultdict(int)
        for i, x in enumerate(xs):
            groups[i % 2].append(x)
            counts["n"] += 1
        return [torch.stack(v).sum(0) for v in groups.values()], dict(counts), "k" in groups, groups.get(7)

    xs = [torch.randn(2) for _ in range(5)]
    assert same(one_graph(f, xs), f(xs))

    def g(x):
        d = collections.defaultdict(list)
        d["a"].append(x)
        return d

    out = dynamo.compile(g)(torch.ones(1))  # outlives the graph: made by Python, a real defaultdict
    assert type(out) is collections.defaultdict and same(dict(out), {"a": [torch.ones(1)]})


def test_arithmetic_on_tensors_made_from_constants_stays_constant():
    def f(x):
        half = int(torch.tensor(x.shape[1]) // 2)
        scale = float(torch.tensor(2.0) * 3 - 1)
        big = bool(torch.tensor(x.shape[0]) > 3)
        return x[:, :half] * scale, half, scale, big

    x = torch.randn(2, 8)
    cf = dynamo.compile(f, fullgraph=True)
    with Recorder() as rec:
        assert same(cf(x), f(x))
        y = torch.randn(5, 6)
        assert same(cf(y), f(y))
    assert len(rec.compiled) == 2 and len(rec.graphs) == 2
