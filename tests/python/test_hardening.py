"""Regression tests for issue 7 (hardening): silent wrong results after graph breaks, values
computed from tensor data, exceptions and side effects, guards on replaced methods, torch.Size,
in-place results, and the error paths of compile. Each compares dynamo.compile(fn) (default
settings: graph breaks allowed) with eager, outputs and side effects."""
import collections
import contextlib
import io

import pytest
import torch

import dynamo


@pytest.fixture(autouse=True)
def _fresh():
    dynamo.reset()
    yield
    dynamo.reset()


def _quiet(fn, *args):
    with contextlib.redirect_stdout(io.StringIO()):
        return fn(*args)


def same(a, b):
    """Exact equality of nested outputs, container types and key order included."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a.keys()) == list(b.keys()) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def check(fn, *args, calls=2):
    compiled = dynamo.compile(fn)
    for _ in range(calls):
        expected = _quiet(fn, *args)
        got = _quiet(compiled, *args)
        assert same(got, expected), (got, expected)


X = torch.tensor([3.0, 1.0, 2.0])


# ---- 1. locals across two breaks in a row -------------------------------------------------------

def test_local_survives_two_breaks_in_a_row():
    def g(x):
        a = x.tolist()
        print("hi")
        return x + 1, a
    check(g, X)


def test_list_sorted_after_a_break():
    def g(x):
        l = x.tolist()
        l.sort()
        return l
    check(g, X)


def test_list_appended_then_second_break():
    def g(x):
        a = x.tolist()
        a.append(9.0)
        b = x.max().item()
        return x * b, a
    check(g, X)


def test_three_breaks_keep_every_local():
    def g(x):
        a = x.tolist()
        s = {1, 2}
        print("one")
        d = collections.deque([x.sum().item()])
        print("two")
        dd = collections.defaultdict(list)
        dd["k"].append(len(a))
        print("three")
        return x * 2, a, sorted(s), list(d), dict(dd)
    check(g, X)


def test_value_passed_through_a_break_is_not_guarded():
    # print("loss", loss.item()) gets a new float each call: it must not recompile.
    def step(x):
        loss = (x * 2).sum()
        print("loss", loss.item())
        return loss

    compiled = dynamo.compile(step)
    records = []
    listener = dynamo.add_compile_listener(records.append)
    try:
        _quiet(compiled, X)
        first = len(records)
        for k in range(1, 5):
            _quiet(compiled, X + k)
    finally:
        dynamo.remove_compile_listener(listener)
    assert first >= 2 and len(records) == first, [(r["function"], r["reason"]) for r in records]


# ---- 2. dicts built in the function -------------------------------------------------------------

def test_ordered_dict_built_and_returned():
    def g(x):
        d = collections.OrderedDict()
        d["b"] = x
        d["a"] = x * 3
        return d
    check(g, X)


def test_ordered_dict_filled_across_a_break():
    def g(x):
        d = collections.OrderedDict()
        d["b"] = x
        print("between")
        d["a"] = x * 3
        d.update(c=x - 1)
        return d
    check(g, X)


def test_dict_from_pairs_and_copy_is_a_new_dict():
    def g(x, cfg):
        d = dict([("x", x), ("y", x + 1)], z=2)
        c = cfg.copy()
        c["extra"] = x.sum()
        return d, c, c is cfg, cfg

    compiled = dynamo.compile(g)
    cfg_e, cfg_c = {"lr": 0.1}, {"lr": 0.1}
    expected = _quiet(g, X, cfg_e)
    got = _quiet(compiled, X, cfg_c)
    assert same(got, expected) and got[2] is False and cfg_c == {"lr": 0.1}


class ModelOutput(collections.OrderedDict):
    """The model-output pattern of many libraries: items are attributes too."""

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def __setattr__(self, name, value):
        super().__setitem__(name, value)
        super().__setattr__(name, value)


def test_dict_subclass_with_its_own_setitem_runs_its_code():
    def g(x, out):
        out["logits"] = x * 2
        out.hidden = x + 1
        return out

    compiled = dynamo.compile(g)
    e, c = ModelOutput(), ModelOutput()
    expected = _quiet(g, X, e)
    got = _quiet(compiled, X, c)
    assert list(got.keys()) == list(expected.keys()) == ["logits", "hidden"]
    assert torch.equal(got.logits, expected.logits) and torch.equal(got["hidden"], expected.hidden)


def test_model_output_built_in_forward():
    class Net(torch.nn.Module):
        def forward(self, x):
            out = ModelOutput()
            out["a"] = x.relu()
            out.b = x.sin()
            return out

    net = Net()
    compiled = dynamo.compile(net)
    for _ in range(2):
        e, c = net(X), _quiet(compiled, X)
        assert type(c) is ModelOutput and list(c.keys()) == list(e.keys())
        assert torch.equal(c.a, e.a) and torch.equal(c["b"], e["b"])


# ---- 3. Python values computed from tensor data -------------------------------------------------

def test_torch_equal_is_not_folded():
    def f(q, k, v):
        if torch.equal(q, k) and torch.equal(k, v):
            return q * 2
        elif torch.equal(k, v):
            return q + k
        return q - v

    compiled = dynamo.compile(f)
    for args in [(X, X + 1, X + 1), (X, X, X), (X, X + 1, X + 2)]:
        assert same(compiled(*args), f(*args))


@pytest.mark.parametrize("expr", [
    lambda x: torch.allclose(x, x + 1e-9),
    lambda x: x.is_nonzero() if x.numel() == 1 else bool(x.sum()),
    lambda x: bool(x.any()),
    lambda x: x.sum().item() > 2,
    lambda x: repr(x).startswith("tensor"),
    lambda x: x.data_ptr() != 0,
    lambda x: 2.0 in x,
    lambda x: x[1:].storage_offset(),
])
def test_data_dependent_python_values_match_eager(expr):
    def f(x):
        r = expr(x)
        return x * 2, r

    compiled = dynamo.compile(f)
    for x in (X, torch.zeros(3), torch.tensor([5.0])):
        assert same(compiled(x), f(x))


# ---- 7. sizes are torch.Size -------------------------------------------------------------------

def test_shape_and_size_are_torch_size():
    def f(x):
        s = x.shape
        return (isinstance(s, torch.Size), isinstance(x.size(), torch.Size), s.numel(), x.size(),
                x.new_zeros(s), s[1:], type(s[1:]).__name__)
    check(f, torch.ones(2, 3))


# ---- 8. in-place results -----------------------------------------------------------------------

def test_inplace_result_is_its_input():
    def f(x):
        y = x.add_(1)
        z = torch.relu_(y)
        return y is x, z is x, x * 2

    e_in, c_in = X.clone(), X.clone()
    compiled = dynamo.compile(f)
    assert same(compiled(c_in), f(e_in)) and torch.equal(c_in, e_in)


# ---- 6. replaced methods -----------------------------------------------------------------------

class K:
    def go(self, x):
        return x + 1


def test_method_replaced_on_the_class_recompiles():
    k = K()

    def f(x):
        return k.go(x)

    compiled = dynamo.compile(f)
    assert same(compiled(X), X + 1)
    old = K.go
    try:
        K.go = lambda self, x: x * 100
        assert same(compiled(X), X * 100)
    finally:
        K.go = old
    assert same(compiled(X), X + 1)


def test_method_replaced_on_the_instance_recompiles():
    k = K()

    def f(x):
        return k.go(x)

    compiled = dynamo.compile(f)
    assert same(compiled(X), X + 1)
    k.go = lambda x: x * 7
    assert same(compiled(X), X * 7)
    del k.go
    assert same(compiled(X), X + 1)


def test_module_helper_and_forward_replaced_recompile():
    class M(torch.nn.Module):
        def helper(self, x):
            return x - 1

        def forward(self, x):
            return self.helper(x) * 2

    m = M()
    compiled = dynamo.compile(m)
    assert same(compiled(X), (X - 1) * 2)
    M.helper = lambda self, x: x + 10
    assert same(compiled(X), (X + 10) * 2)
    m.forward = lambda x: x * 0
    assert same(compiled(X), X * 0)


def test_bound_method_of_another_object_keeps_its_receiver():
    class Manager:
        def __init__(self):
            self.scale = 3.0

        def run(self, x):
            return x * self.scale

    class Caller:
        def __init__(self, fn):
            self.scale = 1.0
            self._fn = fn

        def __call__(self, x):
            return self._fn(x)

    caller = Caller(Manager().run)

    def f(x):
        return caller(x)
    check(f, X)


# ---- 4. exceptions raised by graph code reach the user's handlers --------------------------------

def test_try_except_around_an_op_that_fails_at_run_time():
    def f(x, idx):
        try:
            y = x[idx] * 2
        except IndexError:
            y = torch.zeros(1)
        return y + 1

    compiled = dynamo.compile(f)
    for idx in (torch.tensor(1), torch.tensor(9), torch.tensor(2)):
        assert same(compiled(X, idx), f(X, idx))


def test_try_except_in_an_inlined_helper():
    def safe_chol(a):
        try:
            return torch.linalg.cholesky(a)
        except RuntimeError:
            return torch.linalg.cholesky(a + torch.eye(2) * 10)

    def f(a):
        return safe_chol(a) * 2

    compiled = dynamo.compile(f)
    for a in (torch.eye(2), -torch.eye(2)):
        assert same(compiled(a), f(a))


def test_contextlib_suppress_around_a_failing_op():
    def f(x, idx):
        y = x * 2
        with contextlib.suppress(IndexError):
            y = x[idx]
        return y

    compiled = dynamo.compile(f)
    for idx in (torch.tensor(1), torch.tensor(7)):
        assert same(compiled(X, idx), f(X, idx))


def test_no_grad_block_that_raises_restores_grad_mode():
    def f(x, idx):
        with torch.no_grad():
            y = x * 2
            z = y[idx]
        return z

    compiled = dynamo.compile(f)
    assert same(compiled(X, torch.tensor(1)), f(X, torch.tensor(1)))
    with pytest.raises(IndexError):
        compiled(X, torch.tensor(9))
    assert torch.is_grad_enabled()


# ---- 5. side effects before a failing op ---------------------------------------------------------

class Counter:
    def __init__(self):
        self.count = 0


def _raise_and_state(fn, x, idx):
    log, o = [], Counter()
    try:
        fn(x, idx, log, o)
        err = None
    except Exception as e:  # noqa: BLE001 - compared with eager below
        err = (type(e), str(e))
    return err, log, o.count


def test_side_effects_before_a_runtime_error_are_applied():
    def f(x, idx, log, o):
        log.append("start")
        o.count += 1
        y = (x * 2)[idx]
        log.append("end")
        o.count += 1
        return y

    compiled = dynamo.compile(f)
    for idx in (torch.tensor(1), torch.tensor(5)):
        assert _raise_and_state(compiled, X, idx) == _raise_and_state(f, X, idx)


def test_runtime_error_message_is_eager_s():
    def f(x):
        return x.view(-1)

    x = torch.randn(3, 4).t()
    with pytest.raises(RuntimeError) as eager:
        f(x)
    with pytest.raises(RuntimeError) as compiled:
        dynamo.compile(f)(x)
    assert str(compiled.value) == str(eager.value)
    assert any("While running node 'view'" in n for n in compiled.value.__notes__)


# ---- crashes and errors of compile --------------------------------------------------------------

def _countdown(x, n):
    if n == 0:
        return x
    return _countdown(x + 1, n - 1)


def test_deep_recursion_falls_back_instead_of_raising():
    def f(x):
        return _countdown(x, 80) * 2

    assert same(dynamo.compile(f)(X), f(X))


def test_deep_recursion_with_fullgraph_names_the_user_line():
    def f(x):
        return _countdown(x, 80) * 2

    with pytest.raises(dynamo.Unsupported) as e:
        dynamo.compile(f, fullgraph=True)(X)
    msg = str(e.value)
    assert "inlining deeper than 64 nested calls (recursion)" in msg
    assert __file__ in msg or "test_hardening.py" in msg


def test_fullgraph_raises_after_a_default_compile_skipped_the_frame():
    def f(x):
        print("", end="")
        return x + 1

    _quiet(dynamo.compile(f), X)              # default mode: runs (in pieces)
    with pytest.raises(dynamo.Unsupported):
        _quiet(dynamo.compile(f, fullgraph=True), X)

    def g(x):
        with contextlib.suppress(ValueError):  # a frame run eagerly in default mode
            print("", end="")
        return x + 1

    _quiet(dynamo.compile(g), X)
    with pytest.raises(dynamo.Unsupported):
        _quiet(dynamo.compile(g, fullgraph=True), X)


def test_a_failed_backend_does_not_stop_another_backend():
    calls = []

    def bad(gm, example_inputs):
        raise RuntimeError("backend A is broken")

    def good(gm, example_inputs):
        calls.append(len(example_inputs))
        return gm.forward

    def f(x):
        return x * 3

    with pytest.warns(UserWarning, match="backend A is broken"):
        assert same(dynamo.compile(f, backend=bad)(X), X * 3)
    assert same(dynamo.compile(f, backend=good)(X), X * 3)
    assert calls == [1]


@pytest.mark.parametrize("result", [42, None])
def test_backend_returning_a_non_callable_falls_back_like_one_that_raises(result):
    def backend(gm, example_inputs):
        return result

    def f(x):
        return x * 3

    with pytest.warns(UserWarning, match=r"returned a non-callable \((int|NoneType)\)"):
        assert same(dynamo.compile(f, backend=backend)(X), X * 3)
    dynamo.reset()
    dynamo.config.suppress_errors = False
    try:
        with pytest.raises(dynamo.BackendCompilerFailed, match="returned a non-callable"):
            dynamo.compile(f, backend=backend)(X)
    finally:
        dynamo.config.suppress_errors = True


# ---- the skip list -----------------------------------------------------------------------------

def test_numpy_python_code_runs_as_python_not_in_pieces():
    import numpy as np

    def f(x):
        y = x * 2
        m = np.mean(y.numpy())            # numpy's own Python function (fromnumeric.mean)
        p = np.pad(np.arange(3), 1)       # more numpy Python code
        return y + float(m), p.tolist()

    records = []
    listener = dynamo.add_compile_listener(records.append)
    try:
        assert same(dynamo.compile(f)(X), f(X))
    finally:
        dynamo.remove_compile_listener(listener)
    assert not [r for r in records if "numpy" in r["file"]]       # no numpy frame compiled


# ---- more guards: default dtype, imports, classes reached through type() and super() ----------

def test_default_dtype_change_recompiles():
    def f(x):
        t = torch.tensor([1.5]) + x
        return t, t.dtype, torch.arange(3.0).dtype

    x = torch.ones(1, dtype=torch.float64)
    compiled = dynamo.compile(f)
    assert same(compiled(x), f(x))
    torch.set_default_dtype(torch.float64)
    try:
        assert same(compiled(x), f(x))
    finally:
        torch.set_default_dtype(torch.float32)


def test_attribute_of_a_module_imported_inside_is_guarded():
    def f(x):
        from hardening_helpers import cfgmod
        return x * cfgmod.SCALE

    from hardening_helpers import cfgmod
    compiled = dynamo.compile(f)
    for v in (2.0, 5.0):
        cfgmod.SCALE = v
        assert same(compiled(X), f(X))
    cfgmod.SCALE = 2.0


def test_class_attributes_through_type_and_super_are_guarded():
    class Base(torch.nn.Module):
        k = 1.0

    class ViaType(Base):
        def forward(self, x):
            return x * type(self).k

    class ViaSuper(Base):
        def forward(self, x):
            return x * super().k

    for cls in (ViaType, ViaSuper):
        m = cls()
        compiled = dynamo.compile(m)
        for v in (1.0, 5.0, 7.0):
            Base.k = v
            assert same(compiled(X), m(X))
        Base.k = 1.0


def test_keyword_only_defaults_are_guarded():
    def helper(x, *, k=2.0):
        return x * k

    def f(x):
        return helper(x)

    compiled = dynamo.compile(f)
    assert same(compiled(X), X * 2)
    helper.__kwdefaults__ = {"k": 5.0}
    assert same(compiled(X), X * 5)


# ---- modules that override __setattr__ / __call__ ----------------------------------------------

def test_module_with_its_own_setattr():
    class Clamped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.calls = 0

        def __setattr__(self, k, v):
            if k == "calls":
                v = min(v, 2)
            super().__setattr__(k, v)

        def forward(self, x):
            self.calls += 1
            return x * self.calls

    e, c = Clamped(), Clamped()
    compiled = dynamo.compile(c)
    for _ in range(4):
        assert same(compiled(X), e(X))
    assert c.calls == e.calls == 2


def test_submodule_with_its_own_call():
    class Counted(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.n = 0

        def __call__(self, *args, **kwargs):
            self.n += 1
            return super().__call__(*args, **kwargs) + self.n

        def forward(self, x):
            return x * 2

    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Counted()

        def forward(self, x):
            return self.inner(x)

    e, c = Outer(), Outer()
    compiled = dynamo.compile(c)
    for _ in range(3):
        assert same(compiled(X), e(X))
    assert c.inner.n == e.inner.n == 3


# ---- iteration over a list the loop changes ----------------------------------------------------

def test_loop_over_a_list_that_grows_and_shrinks():
    def worklist(x):
        queue = [x]
        for t in queue:
            if len(queue) < 4:
                queue.append(t * 2)
        return torch.stack(queue)

    def shrink(x):
        lst = [x, x + 1, x + 2, x + 3]
        n = 0
        for t in lst:
            lst.pop()
            n += 1
        return x * n

    def late_iter(x):
        lst = [x]
        it = iter(lst)
        lst.append(x + 1)
        return torch.stack(list(it))

    for f in (worklist, shrink, late_iter):
        check(f, X)


# ---- sizes into the graph ----------------------------------------------------------------------

def test_torch_size_arguments_stay_in_the_graph():
    import torch.nn.functional as F

    def f(a, b):
        return F.interpolate(a, size=b.shape[-2:], mode="nearest") + b, a.new_zeros(b.shape[-2:]), \
            a.view(a.size()[:-1] + (5, 1))

    a, b = torch.randn(1, 2, 4, 5), torch.randn(1, 2, 8, 10)
    compiled = dynamo.compile(f, fullgraph=True)
    assert same(compiled(a, b), f(a, b))


def test_dtype_queries_are_constants():
    def f(x):
        if not x.is_floating_point() or x.is_complex():
            x = x.float()
        return x * 2

    for x in (X, torch.arange(3)):
        assert same(dynamo.compile(f, fullgraph=True)(x), f(x))


def test_containers_appended_twice_to_an_input_list():
    def f(x, result):
        result.append([x])
        result.append({"a": x * 2})
        return x + 1

    e_out, c_out = [], []
    compiled = dynamo.compile(f)
    assert same(compiled(X, c_out), f(X, e_out)) and same(c_out, e_out)


def test_has_torch_function_is_a_constant_for_plain_tensors():
    def g(x):
        if torch.overrides.has_torch_function((x,)):
            return x - 1
        return x + 1

    assert same(dynamo.compile(g, fullgraph=True)(X), g(X))
