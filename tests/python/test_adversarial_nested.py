"""Adversarial pass, round 6 (outsider testing): graph breaks deep inside nested calls (three frames
down, in a method, a closure, a lambda handed to a helper, a generator, a comprehension, under
no_grad / enable_grad / autocast / user context managers, in try/except/finally, in loops with
break/continue/else) and the state that must survive them (locals, attributes, buffers, counters,
lists, dicts, globals, nonlocals, RNG streams); exceptions raised after side effects; modules
mutated between calls (hooks added and removed, training toggled, submodules swapped, parameters
replaced, requires_grad flipped, buffers registered at run time, attributes of torch.nn's own
classes changed). Each case is compared with eager call by call under the backends eager and
aot_eager."""
import contextlib
import dataclasses
import io

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dynamo
from adversarial_harness import check_case_under, params, registry, run_case

CASES, case = registry()
BACKENDS = ("eager", "aot_eager")
_SINK = io.StringIO()


def grads(m):
    return [None if p.grad is None else p.grad.clone() for p in m.parameters()]


def log(*a):
    # a print-like graph break that does not spam the test output
    print(*a, file=_SINK)


@case
def break_three_frames_deep_with_local_mutations():
    trace = []
    def c(x):
        trace.append("c-in")
        log("deep", x.shape)
        trace.append("c-out")
        return x + 1
    def b(x, acc):
        acc.append(x.sum())
        y = c(x * 2)
        acc.append(y.sum())
        return y
    def a(x):
        acc = []
        z = b(x, acc)
        return z * 3, torch.stack(acc)
    return a, lambda f, i: f(torch.randn(3) + i), lambda: list(trace)


@case
def break_in_method_called_from_forward_updates_attr():
    class M(nn.Module):
        def __init__(s):
            super().__init__(); s.lin = nn.Linear(3, 3); s.n = 0; s.hist = []
        def helper(s, h):
            s.n += 1
            s.hist.append(float(h.mean()))
            if h.mean() > 0:
                return h.relu()
            return -h
        def forward(s, x):
            h = s.lin(x)
            h = s.helper(h)
            s.n += 10
            return h * s.n
    m = M()
    return m, lambda f, i: f(torch.randn(2, 3)), lambda: (m.n, list(m.hist))


@case
def break_in_closure_with_nonlocal():
    def make():
        count = 0
        saved = []
        def inner(x):
            nonlocal count
            count += 1
            saved.append(x.shape[0])
            log("inner", count)
            count += 100
            return x * count
        def outer(x):
            y = inner(x) + inner(x * 2)
            return y, count
        return outer, lambda: (count, list(saved))
    outer, obs = make()
    return outer, lambda f, i: f(torch.randn(2)), obs


@case
def break_in_lambda_passed_to_helper():
    calls = []
    def apply(fn, xs):
        return [fn(x) for x in xs]
    def f(x):
        out = apply(lambda t: (calls.append(1), log(t.shape), t.sin())[2], [x, x + 1, x * 2])
        return torch.stack(out).sum(0)
    return f, lambda g, i: g(torch.randn(4)), lambda: len(calls)


@case
def break_in_generator_body():
    def gen(xs):
        for k, x in enumerate(xs):
            if x.sum() > 0:
                yield x * k
            else:
                yield -x
    def f(x):
        parts = list(gen(x.unbind(0)))
        return torch.stack(parts)
    return f, lambda g, i: g(torch.randn(4, 3))


@case
def break_in_list_comprehension_body():
    seen = []
    def f(x):
        ys = [(seen.append(float(r.max())), r * 2)[1] for r in x]
        return torch.stack(ys), len(seen)
    return f, lambda g, i: g(torch.randn(3, 2)), lambda: list(seen)


@case
def break_inside_no_grad_then_grad_used():
    lin = nn.Linear(3, 3)
    def f(x):
        with torch.no_grad():
            t = lin(x)
            log("in no_grad", torch.is_grad_enabled())
            t2 = t * 2
            flag_in = torch.is_grad_enabled()
        out = lin(x) + t2
        return out, t2.requires_grad, flag_in, torch.is_grad_enabled(), out.requires_grad
    return f, lambda g, i: g(torch.randn(2, 3))


@case
def break_inside_enable_grad_under_outer_no_grad():
    w = torch.randn(3, requires_grad=True)
    def f(x):
        with torch.enable_grad():
            y = x * w
            log("eg", y.requires_grad)
            z = y.sum()
            g = torch.is_grad_enabled()
        return z, z.requires_grad, g, torch.is_grad_enabled()
    def drive(g, i):
        with torch.no_grad():
            return g(torch.randn(3))
    return f, drive


@case
def break_inside_autocast_cpu():
    lin = nn.Linear(4, 4)
    def f(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = lin(x)
            log("ac", h.dtype)
            h2 = lin(h)
            dt = h2.dtype
        return h2.float(), dt, (h2 + x).dtype
    return f, lambda g, i: g(torch.randn(2, 4))


@case
def break_inside_user_context_manager():
    events = []
    class CM:
        def __init__(s, name): s.name = name
        def __enter__(s):
            events.append(("enter", s.name)); return s
        def __exit__(s, *a):
            events.append(("exit", s.name, a[0] is None)); return False
    def f(x):
        with CM("a") as c:
            y = x + 1
            log(c.name)
            y = y * 2
        with CM("b"):
            if y.sum() > 0:
                y = y - 1
        return y
    return f, lambda g, i: g(torch.randn(3)), lambda: list(events)


@case
def break_inside_contextmanager_generator():
    events = []
    @contextlib.contextmanager
    def scope(n):
        events.append(f"in {n}")
        try:
            yield n * 2
        finally:
            events.append(f"out {n}")
    def f(x):
        with scope(3) as k:
            y = x * k
            log("mid")
            y = y + k
        return y
    return f, lambda g, i: g(torch.randn(3)), lambda: list(events)


@case
def try_except_path_runs_after_break():
    log_ = []
    def f(x):
        try:
            log_.append("try")
            log("t")
            y = x.view(7, -1)
            log_.append("nope")
        except RuntimeError as e:
            log_.append(type(e).__name__)
            y = x * 2
        finally:
            log_.append("finally")
        return y
    return f, lambda g, i: g(torch.randn(6)), lambda: list(log_)


@case
def loop_with_break_continue_else_and_graph_breaks():
    def f(x):
        out = []
        for k in range(5):
            if k == 1:
                continue
            log(k)
            if x.sum() > 10 * k:
                out.append(x * k)
            else:
                out.append(x - k)
            if k == 3 and x[0] > 0:
                break
        else:
            out.append(x.neg())
        return torch.stack(out)
    return f, lambda g, i: g(torch.randn(3) * 5)


@case
def batchnorm_train_with_break_in_middle():
    class M(nn.Module):
        def __init__(s):
            super().__init__(); s.bn1 = nn.BatchNorm1d(4); s.bn2 = nn.BatchNorm1d(4)
        def forward(s, x):
            h = s.bn1(x)
            log("m", h.shape)
            h = s.bn2(h * 2)
            return h
    m = M()
    def obs():
        return [t.clone() for t in m.buffers()]
    return m, lambda g, i: g(torch.randn(5, 4)), obs


@case
def dropout_masks_across_breaks_same_seed():
    drop = nn.Dropout(0.5)
    def f(x):
        a = drop(x)
        log("d")
        b = drop(x)
        c = torch.rand(3)
        if c.sum() > 1.5:
            d = F.dropout(x, 0.3)
        else:
            d = x
        return a, b, c, d, torch.randn(2)
    return f, lambda g, i: g(torch.ones(3, 4))


@case
def global_written_across_break():
    global GCOUNT
    GCOUNT = 0
    def f(x):
        global GCOUNT
        GCOUNT += 1
        log("g")
        GCOUNT *= 3
        return x + GCOUNT
    return f, lambda g, i: g(torch.randn(2)), lambda: GCOUNT


@case
def dict_appended_in_nested_helper_across_break():
    store = {}
    def put(k, v):
        store.setdefault(k, []).append(v)
        if v.sum() > 0:
            store[k + "_pos"] = True
    def f(x):
        put("a", x)
        put("b", -x)
        return len(store)
    return f, lambda g, i: g(torch.randn(3)), lambda: {k: (len(v) if isinstance(v, list) else v) for k, v in store.items()}


@case
def exception_after_side_effects_in_nested_helper():
    hist = []
    class M(nn.Module):
        def __init__(s):
            super().__init__(); s.register_buffer("cnt", torch.zeros(1)); s.steps = 0
        def check(s, x):
            s.steps += 1
            s.cnt += 1
            hist.append(x.shape)
            if x.shape[0] > 2:
                raise ValueError(f"too big: {x.shape[0]} at step {s.steps}")
            return x
        def forward(s, x):
            x = s.check(x * 2)
            return x + s.cnt
    m = M()
    return m, lambda g, i: g(torch.randn(i + 1)), lambda: (m.steps, m.cnt.clone(), list(hist))


@case
def exception_from_torch_op_after_inplace_buffer():
    m = nn.Module()
    m.register_buffer("b", torch.zeros(3))
    def f(x):
        m.b.add_(1)
        y = x @ torch.ones(4, 2)
        return y
    return f, lambda g, i: g(torch.randn(3 if i == 1 else 4)), lambda: m.b.clone()


@case
def stopiteration_in_generator_mid_graph():
    def f(x):
        it = iter([x, x + 1])
        a = next(it); b = next(it)
        try:
            c = next(it)
        except StopIteration:
            c = a * b
        return c
    return f, lambda g, i: g(torch.randn(2))


@case(calls=5)
def pre_and_post_hooks_added_removed_between_calls():
    m = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 2))
    handles = []
    seen = []
    def drive(f, i):
        if i == 1:
            handles.append(m[0].register_forward_pre_hook(lambda mod, inp: (inp[0] * 2,)))
        if i == 2:
            handles.append(m[2].register_forward_hook(lambda mod, inp, out: out + 100))
            handles.append(m.register_forward_hook(lambda mod, inp, out: seen.append(out.shape)))
        if i == 3:
            handles.pop(0).remove()
        if i == 4:
            for h in handles: h.remove()
            handles.clear()
        return f(torch.ones(2, 3))
    return m, drive, lambda: list(seen)


@case(calls=4)
def training_flag_toggled_between_calls_dropout_bn():
    m = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Dropout(0.5))
    def drive(f, i):
        m.train(i % 2 == 0)
        return f(torch.randn(3, 4))
    return m, drive, lambda: [b.clone() for b in m.buffers()]


@case(calls=4)
def submodule_swapped_activation():
    class M(nn.Module):
        def __init__(s):
            super().__init__(); s.lin = nn.Linear(3, 3); s.act = nn.ReLU()
        def forward(s, x):
            return s.act(s.lin(x))
    m = M()
    acts = [nn.ReLU(), nn.GELU(), nn.Tanh(), nn.GELU(approximate="tanh")]
    def drive(f, i):
        m.act = acts[i]
        return f(torch.randn(2, 3))
    return m, drive


@case(calls=4)
def parameter_replaced_and_requires_grad_flipped():
    m = nn.Linear(3, 2)
    def drive(f, i):
        if i == 1:
            m.weight = nn.Parameter(torch.ones(2, 3))
        if i == 2:
            m.weight.requires_grad_(False)
        if i == 3:
            m.bias = None
        out = f(torch.ones(1, 3))
        return out, out.requires_grad
    return m, drive


@case(calls=4)
def register_buffer_at_run_time_inside_forward():
    class M(nn.Module):
        def forward(s, x):
            if not hasattr(s, "seen"):
                s.register_buffer("seen", torch.zeros_like(x))
            s.seen += x
            return s.seen * 2
    m = M()
    return m, lambda f, i: f(torch.ones(2) * i), lambda: m.seen.clone()


@case(calls=4)
def register_buffer_between_calls_used_if_present():
    class M(nn.Module):
        def forward(s, x):
            if hasattr(s, "scale"):
                return x * s.scale
            return x
    m = M()
    def drive(f, i):
        if i == 1:
            m.register_buffer("scale", torch.tensor(3.0))
        if i == 3:
            del m.scale
        return f(torch.ones(2))
    return m, drive


@case(calls=4)
def attribute_named_like_buffer_reassigned_tensor():
    class M(nn.Module):
        def __init__(s):
            super().__init__(); s.register_buffer("b", torch.ones(2))
        def forward(s, x):
            return x + s.b
    m = M()
    def drive(f, i):
        if i == 1: m.b = torch.full((2,), 5.0)
        if i == 2: m.b.mul_(2)
        if i == 3: m.b = None
        try:
            return f(torch.zeros(2))
        except TypeError as e:
            return str(e)
    return m, drive


@case(calls=4)
def forward_pre_hook_with_kwargs():
    m = nn.Linear(2, 2)
    def drive(f, i):
        if i == 1:
            m.register_forward_pre_hook(lambda mod, a, kw: ((a[0] + 1,), kw), with_kwargs=True)
        return f(torch.ones(1, 2))
    return m, drive


@case(calls=3)
def exception_type_and_message_from_shape_mismatch_mid_graph():
    state = {"n": 0}
    m = nn.Linear(3, 2)
    def f(x):
        state["n"] += 1
        h = m(x)
        state["n"] += 1
        return h @ x
    return f, lambda g, i: g(torch.randn(2, 3)), lambda: dict(state)


@case(calls=3)
def assertion_error_from_assert_after_list_append():
    lst = []
    def f(x):
        lst.append(x.shape[0])
        y = x * 2
        lst.append(1)
        assert y.shape[0] < 3, f"bad len {y.shape[0]}"
        lst.append(2)
        return y
    return f, lambda g, i: g(torch.randn(i + 1)), lambda: list(lst)


@case(calls=3)
def exception_inside_with_no_grad_in_method():
    class M(nn.Module):
        def __init__(s):
            super().__init__(); s.lin = nn.Linear(2, 2); s.k = 0
        def inner(s, x):
            with torch.no_grad():
                s.k += 1
                s.lin.weight.add_(0.5)
                if x.shape[0] == 2:
                    raise KeyError("boom")
                return s.lin(x)
        def forward(s, x):
            try:
                return s.inner(x), torch.is_grad_enabled()
            except KeyError as e:
                return s.lin(x) * 0, torch.is_grad_enabled(), str(e)
    m = M()
    return m, lambda g, i: g(torch.randn(i + 1, 2)), lambda: (m.k, m.lin.weight.clone())


@case(calls=3)
def exception_raised_in_hook():
    m = nn.Linear(2, 2)
    n = [0]
    def hook(mod, inp):
        n[0] += 1
        if inp[0].shape[0] > 1:
            raise RuntimeError("hook says no")
    m.register_forward_pre_hook(hook)
    return m, lambda g, i: g(torch.randn(i + 1, 2)), lambda: n[0]


@case(calls=3)
def custom_exception_class_with_attrs():
    class MyErr(Exception):
        def __init__(s, v): super().__init__(f"val={v}"); s.v = v
    acc = []
    def f(x):
        acc.append(x.sum())
        if x.shape[0] == 2:
            raise MyErr(x.shape[0])
        return x
    def drive(g, i):
        try:
            return g(torch.ones(i + 1))
        except MyErr as e:
            return ("caught", e.v, str(e))
    return f, drive, lambda: len(acc)


@case(calls=3)
def tensor_mutated_then_exception_in_graph():
    def f(x, buf):
        buf.add_(x)
        buf.mul_(2)
        return torch.cat([buf, x.view(2, 2)])
    bufs = [torch.zeros(4), torch.zeros(4), torch.zeros(4)]
    def drive(g, i):
        try:
            return g(torch.ones(4), bufs[i])
        finally:
            pass
    return f, drive, lambda: [b.clone() for b in bufs]


@case(calls=4)
def module_training_toggle_inside_forward_children():
    class M(nn.Module):
        def __init__(s):
            super().__init__(); s.d = nn.Dropout(0.5); s.bn = nn.BatchNorm1d(3)
        def forward(s, x):
            s.eval()
            a = s.bn(s.d(x))
            s.train()
            b = s.bn(s.d(x))
            return a, b, s.training, s.d.training
    m = M()
    return m, lambda g, i: g(torch.randn(4, 3)), lambda: [b.clone() for b in m.buffers()]


@case(calls=4)
def parameter_data_swapped_with_different_shape():
    m = nn.Linear(3, 2)
    def drive(f, i):
        if i == 2:
            with torch.no_grad():
                m.weight.data = torch.ones(4, 3)
                m.bias.data = torch.zeros(4)
        return f(torch.ones(1, 3))
    return m, drive


@case(calls=4)
def module_forward_hooks_dict_and_always_call():
    m = nn.Linear(2, 2)
    out = []
    def drive(f, i):
        if i == 1:
            m.register_forward_hook(lambda mod, inp, o: out.append("post"), always_call=True)
        if i == 2:
            m.register_forward_hook(lambda mod, inp, o: o * 0, prepend=True)
        return f(torch.ones(1, 2))
    return m, drive, lambda: list(out)


@case
def train_step_break_in_submodule_method_with_dropout_and_bn():
    class Block(nn.Module):
        def __init__(s):
            super().__init__(); s.fc = nn.Linear(6, 6); s.bn = nn.BatchNorm1d(6); s.drop = nn.Dropout(0.3); s.n = 0
        def gate(s, h):
            s.n += 1
            if h.mean() > 0:  # data-dependent break inside a method
                return h * torch.sigmoid(h)
            return F.relu(h)
        def forward(s, x):
            return s.drop(s.gate(s.bn(s.fc(x))))
    class Net(nn.Module):
        def __init__(s):
            super().__init__(); s.b1 = Block(); s.b2 = Block(); s.head = nn.Linear(6, 1)
        def forward(s, x, y):
            h = s.b2(s.b1(x))
            log("h", h.shape)
            return F.mse_loss(s.head(h).squeeze(-1), y)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    def drive(f, i):
        opt.zero_grad()
        loss = f(torch.randn(8, 6), torch.randn(8))
        loss.backward()
        g = grads(net)
        opt.step()
        return loss.detach(), g
    return net, drive, lambda: ([b.clone() for b in net.buffers()], net.b1.n, net.b2.n, [p.detach().clone() for p in net.parameters()])


@case
def requires_grad_flipped_between_training_calls():
    net = nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 1))
    def drive(f, i):
        for p in net[0].parameters():
            p.requires_grad_(i != 1)
        net.zero_grad(set_to_none=True)
        out = f(torch.randn(4, 3)).sum()
        out.backward()
        return out.detach(), grads(net)
    return net, drive


@case
def dropout_rng_same_across_breaks_in_training():
    class M(nn.Module):
        def __init__(s):
            super().__init__(); s.fc = nn.Linear(5, 5)
        def forward(s, x):
            h = F.dropout(s.fc(x), 0.5, True)
            if h.sum() > 0:
                h = F.dropout(h, 0.2, True) + torch.rand_like(h)
            else:
                h = h - torch.randn_like(h)
            return h.pow(2).mean()
    m = M()
    def drive(f, i):
        m.zero_grad()
        loss = f(torch.randn(3, 5))
        loss.backward()
        return loss.detach(), grads(m), torch.rand(2)
    return m, drive


@case
def hook_added_between_training_calls_scales_grad_and_output():
    m = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 1))
    hs = []
    def drive(f, i):
        if i == 1:
            hs.append(m[0].register_forward_hook(lambda mod, a, o: o * 2))
        if i == 2:
            hs.pop().remove()
            hs.append(m[2].register_forward_pre_hook(lambda mod, a: (a[0] + 1,)))
        m.zero_grad()
        out = f(torch.randn(2, 3)).sum()
        out.backward()
        return out.detach(), grads(m)
    return m, drive


@case
def exception_mid_training_after_buffer_update_then_recover():
    class M(nn.Module):
        def __init__(s):
            super().__init__(); s.bn = nn.BatchNorm1d(3); s.fc = nn.Linear(3, 2)
        def forward(s, x, target):
            h = s.fc(s.bn(x))
            return F.cross_entropy(h, target)
    m = M()
    def drive(f, i):
        t = torch.tensor([0, 1, 5 if i == 1 else 1, 0])
        m.zero_grad()
        loss = f(torch.randn(4, 3), t)
        loss.backward()
        return loss.detach(), grads(m)
    return m, drive, lambda: [b.clone() for b in m.buffers()]


@case
def submodule_swapped_between_training_calls():
    class M(nn.Module):
        def __init__(s):
            super().__init__(); s.fc = nn.Linear(3, 3); s.act = nn.ReLU()
        def forward(s, x):
            return s.act(s.fc(x)).sum()
    m = M()
    acts = [nn.ReLU(), nn.GELU(), nn.Sequential(nn.Linear(3, 3), nn.Tanh())]
    def drive(f, i):
        m.act = acts[i]
        m.zero_grad()
        out = f(torch.randn(2, 3))
        out.backward()
        return out.detach(), grads(m)
    return m, drive


@case
def loop_with_break_else_in_train_step_lists_of_losses():
    net = nn.Linear(3, 3)
    hist = []
    def fn(x):
        losses = []
        h = x
        for k in range(4):
            h = torch.tanh(net(h))
            l = h.pow(2).mean()
            losses.append(l)
            if l.item() < 0.05:
                hist.append(("break", k))
                break
        else:
            hist.append(("else", len(losses)))
        return torch.stack(losses).sum()
    def drive(f, i):
        net.zero_grad()
        out = f(torch.randn(2, 3) * (0.1 if i == 1 else 2))
        out.backward()
        return out.detach(), grads(net)
    return fn, drive, lambda: list(hist)


@case(calls=4)
def torch_nn_attr_changed_inside_forward_by_user():
    class M(nn.Module):
        def __init__(s):
            super().__init__(); s.drop = nn.Dropout(0.0); s.act = nn.LeakyReLU(0.01)
        def forward(s, x, step):
            s.drop.p = min(0.5, step * 0.2)
            s.act.negative_slope = 0.01 * (step + 1)
            return s.act(s.drop(x))
    m = M()
    return m, lambda f, i: f(torch.randn(4, 4), i), lambda: (m.drop.p, m.act.negative_slope)


@case(calls=3)
def delattr_inside_forward():
    class M(nn.Module):
        def __init__(s):
            super().__init__(); s.cache = None; s.k = 0
        def forward(s, x):
            s.k += 1
            if s.cache is not None:
                y = x + s.cache
                del s.cache
                s.cache = None
            else:
                y = x
                s.cache = x * 2
            return y
    m = M()
    return m, lambda f, i: f(torch.ones(2) * i), lambda: (m.k, None if m.cache is None else m.cache.clone())


@case(calls=4)
def training_attribute_set_directly_inside_forward():
    class M(nn.Module):
        def __init__(s):
            super().__init__(); s.d = nn.Dropout(0.5)
        def forward(s, x):
            s.d.training = not s.d.training
            return s.d(x), s.d.training
    m = M()
    return m, lambda f, i: f(torch.ones(3, 3)), lambda: m.d.training


@case(calls=3)
def user_cm_exit_sees_exception_type_from_failing_op():
    seen = []
    class CM:
        def __enter__(s): seen.append("enter"); return s
        def __exit__(s, et, ev, tb):
            seen.append(("exit", None if et is None else et.__name__, None if ev is None else str(ev)[:40]))
            return et is IndexError
    def f(x):
        with CM():
            y = x * 2
            z = y[torch.tensor([5 if x.shape[0] == 2 else 0])]
            seen.append(("after", tuple(z.shape)))
        return y
    return f, lambda g, i: g(torch.ones(i + 1)), lambda: list(seen)


@case(calls=3)
def raise_from_preserves_cause():
    def helper(x):
        try:
            return x.view(3, -1)
        except RuntimeError as e:
            raise ValueError(f"bad shape {tuple(x.shape)}") from e
    def f(x):
        y = x + 1
        return helper(y)
    def drive(g, i):
        try:
            return g(torch.ones(i + 3))
        except ValueError as e:
            return ("caught", str(e), type(e.__cause__).__name__, e.__suppress_context__)
    return f, drive


@case(calls=3)
def hook_registered_inside_forward_on_first_call():
    class M(nn.Module):
        def __init__(s):
            super().__init__(); s.fc = nn.Linear(2, 2); s.feats = []
        def forward(s, x):
            if not s.fc._forward_hooks:
                s.fc.register_forward_hook(lambda mod, a, o: s.feats.append(o.detach()))
            return s.fc(x) * 2
    m = M()
    return m, lambda f, i: f(torch.ones(1, 2) * i), lambda: [t.clone() for t in m.feats]


@case(calls=3)
def setattr_getattr_builtins_with_names_and_defaults():
    class M(nn.Module):
        def __init__(s):
            super().__init__(); s.fc = nn.Linear(2, 2)
        def forward(s, x):
            for name in ("a", "b"):
                setattr(s, f"last_{name}", getattr(s, f"last_{name}", 0) + 1)
            scale = getattr(s.fc, "scale", 1.0)
            return s.fc(x) * scale * s.last_a
    m = M()
    def drive(f, i):
        if i == 2:
            m.fc.scale = 3.0
        return f(torch.ones(1, 2))
    return m, drive, lambda: (m.last_a, m.last_b)


@case
def inlined_comprehension_with_side_effects_and_break():
    seen = []
    def f(x):
        k = 5
        ys = [seen.append(k) or r * k for k in range(3) for r in [x]]
        log("after", k)
        zs = {j: x + j for j in range(2) if (x.sum() > 0) or j == 0}
        return torch.stack(ys), k, len(zs), sorted(zs)
    return f, lambda g, i: g(torch.randn(2)), lambda: list(seen)


@case
def walrus_in_comprehension_leaks_to_enclosing():
    def f(x):
        total = 0
        ys = [(total := total + r.sum()) for r in x]
        if (n := len(ys)) > 2:
            log(n)
        return torch.stack(ys), total, n
    return f, lambda g, i: g(torch.randn(3, 2))


@case
def match_statement_on_dataclass_config_and_tensor_value():
    @dataclasses.dataclass
    class Cfg:
        act: str
        depth: int
        scale: float = 1.0
    cfgs = [Cfg("relu", 1), Cfg("gelu", 2, 0.5), Cfg("silu", 3)]
    def f(x, cfg):
        match cfg:
            case Cfg(act="relu", depth=d):
                y = x.relu() * d
            case Cfg(act="gelu", scale=s) if s < 1:
                y = F.gelu(x) * s
            case _:
                y = F.silu(x)
        match int(x.argmax()):
            case 0: y = y + 1
            case 1 | 2: y = y - 1
            case other: y = y * other
        return y
    return f, lambda g, i: g(torch.randn(4), cfgs[i])


@case
def fstrings_with_tensors_and_format_specs():
    msgs = []
    def f(x):
        y = x * 2
        msgs.append(f"{y.sum():.3f} {y.shape} {y.dtype} {x.shape[0]!r:>4} {y.mean().item()=:.2f}")
        return y
    return f, lambda g, i: g(torch.randn(3)), lambda: list(msgs)


@case
def star_args_kwargs_forwarding_with_super_forward():
    class Base(nn.Module):
        def __init__(s):
            super().__init__(); s.lin = nn.Linear(3, 3)
        def forward(s, x, *extra, scale=1.0, **kw):
            y = s.lin(x) * scale
            for e in extra:
                y = y + e
            if kw.get("mask") is not None:
                y = y.masked_fill(kw["mask"], 0.0)
            return y
    class Child(Base):
        def forward(s, *args, **kwargs):
            kwargs.setdefault("scale", 2.0)
            out = super().forward(*args, **kwargs)
            log(out.shape)
            return out * 3
    m = Child()
    masks = [None, torch.tensor([True, False, True]), None]
    def drive(f, i):
        args = (torch.randn(2, 3),) + tuple(torch.randn(3) for _ in range(i))
        return f(*args, mask=masks[i], **({"scale": 0.5} if i == 2 else {}))
    return m, drive


@case
def local_deleted_before_a_break():
    def f(x):
        tmp = x * 2
        acc = tmp.sum()
        del tmp
        log("deleted")
        try:
            tmp
        except (NameError, UnboundLocalError) as e:
            kind = type(e).__name__
        return acc, kind
    return f, lambda g, i: g(torch.randn(3))


@case(calls=4)
def conv_padding_and_dilation_changed_between_calls():
    # Tuples configuring torch.nn's classes are one EQUALS_MATCH each: a change recompiles.
    conv = nn.Conv2d(2, 2, 3)

    def drive(f, i):
        conv.padding = [(0, 0), (1, 1), (1, 1), (2, 1)][i]
        conv.dilation = [(1, 1), (1, 1), (2, 2), (1, 1)][i]
        return f(torch.randn(1, 2, 6, 6))
    return conv, drive



@case(calls=4)
def torch_nn_module_attributes_changed_between_calls():
    # A dropout schedule and a slope changed on torch.nn's own classes: read in their forward,
    # so each change must recompile (they were taken as fixed after construction, unguarded).
    m = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.0), nn.LeakyReLU(0.1), nn.Softplus(beta=1.0))

    def drive(f, i):
        m[1].p = [0.0, 0.5, 0.9, 0.5][i]
        m[2].negative_slope = [0.1, 0.1, 0.5, 2.0][i]
        m[3].beta = [1.0, 2.0, 2.0, 0.5][i]
        return f(torch.randn(3, 4))
    return m, drive


@case(calls=4)
def counter_kept_on_a_torch_nn_module_by_its_hook():
    lin = nn.Linear(2, 2)
    lin.calls = 0

    def count(mod, inp, out):
        mod.calls += 1
        return out * mod.calls

    lin.register_forward_hook(count)
    return lin, lambda f, i: f(torch.ones(1, 2)), lambda: lin.calls


@case
def parameter_updated_in_place_under_no_grad_and_returned_inside_the_block():
    # Nothing returned requires grad: the AOT graph ran with the caller's grad mode, and the
    # in-place update of the parameter (legal inside no_grad) raised on the leaf.
    lin = nn.Linear(2, 2)

    def step(x):
        with torch.no_grad():
            lin.weight.add_(0.5)
            return lin(x)
    return step, lambda f, i: f(torch.randn(1, 2)), lambda: lin.weight.clone()


@pytest.mark.parametrize("case,backend", params(CASES, {}, BACKENDS))
def test_adversarial_nested(case, backend, monkeypatch):
    check_case_under(case, backend, monkeypatch)


# Training and module-mutation cases run again under the fused backend (generated kernels):
# every tensor within rtol 1e-4 / atol 1e-5 of eager, everything else equal.
FUSED = ("train_step_break_in_submodule_method_with_dropout_and_bn", "requires_grad_flipped_between_training_calls",
         "hook_added_between_training_calls_scales_grad_and_output", "submodule_swapped_between_training_calls",
         "loop_with_break_else_in_train_step_lists_of_losses", "torch_nn_module_attributes_changed_between_calls",
         "parameter_updated_in_place_under_no_grad_and_returned_inside_the_block", "batchnorm_train_with_break_in_middle")


def _tensors(v, out):
    if isinstance(v, torch.Tensor):
        out.append(v)
    elif isinstance(v, (list, tuple)):
        for x in v:
            _tensors(x, out)
    elif isinstance(v, dict):
        for x in v.values():
            _tensors(x, out)
    return out


@pytest.mark.parametrize("case", [c for c in CASES if c.name in FUSED], ids=lambda c: c.name)
def test_adversarial_nested_fused(case, monkeypatch):
    compile_ = dynamo.compile
    monkeypatch.setattr(dynamo, "compile", lambda t, **k: compile_(t, backend="fused", **k))
    eager, fused, _, _ = run_case(case)
    for i, ((re_, oe), (rf, of)) in enumerate(zip(eager, fused)):
        assert re_[0] == rf[0] and (re_[0] == "ok" or re_[1:] == rf[1:]), f"call {i}: eager {re_} vs fused {rf}"
        a, b = _tensors((re_, oe), []), _tensors((rf, of), [])
        assert len(a) == len(b), f"call {i}: {len(a)} tensors vs {len(b)}"
        for x, y in zip(a, b):
            assert (x.shape, x.dtype, x.requires_grad) == (y.shape, y.dtype, y.requires_grad)
            if x.is_floating_point():
                assert torch.allclose(x, y, rtol=1e-4, atol=1e-5), f"call {i}: {x} vs fused {y}"
            else:
                assert torch.equal(x, y), f"call {i}: {x} vs fused {y}"
