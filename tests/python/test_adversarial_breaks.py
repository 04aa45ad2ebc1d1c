"""Adversarial pass (issue #7), category b: state that lives across graph breaks (locals, lists,
sets, deques, defaultdicts, numpy arrays, iterators, cells), several breaks in a row, breaks in
helpers and in methods reached through super()."""
import collections
import io
import contextlib

import numpy as np
import pytest
import torch
import torch.nn as nn

from adversarial_harness import check_case, params, registry

CASES, case = registry()
_SINK = io.StringIO()


def log(*a):
    # a print-like graph break that does not spam the test output
    print(*a, file=_SINK)


@case
def list_built_before_print_used_after():
    def fn(x):
        feats = [x, x * 2]
        log("shapes", [f.shape for f in feats])
        feats.append(x * 3)
        return torch.stack(feats), len(feats)
    x = torch.randn(3)
    return fn, lambda f, i: f(x + i)


@case
def set_before_item_mutated_after():
    def fn(x, seen):
        seen.add(1)
        k = int(x.argmax().item())
        seen.add(k)
        seen.discard(1)
        return x[k], seen
    xs = [torch.tensor([0.0, 5.0, 1.0]), torch.tensor([9.0, 0.0, 1.0]), torch.tensor([0.0, 0.0, 7.0])]
    seen = set()
    return fn, lambda f, i: f(xs[i], seen), lambda: sorted(seen)


@case
def deque_maxlen_across_break():
    hist = collections.deque(maxlen=3)

    def fn(x):
        hist.append(x.sum())
        if x.mean() > 0:
            hist.append(x.max())
        hist.append(x.min())
        return torch.stack(list(hist))
    xs = [torch.randn(4) for _ in range(3)]
    return fn, lambda f, i: f(xs[i]), lambda: list(hist)


@case
def defaultdict_counter_around_branch():
    stats = collections.defaultdict(int)

    def fn(x):
        stats["calls"] += 1
        if (x > 0).any():
            stats["pos"] += 1
            x = x.relu()
        else:
            stats["neg"] += 1
        stats["calls"] += 0
        return x, dict(stats)
    xs = [torch.randn(3), -torch.rand(3), torch.randn(3)]
    return fn, lambda f, i: f(xs[i]), lambda: dict(stats)


@case
def numpy_array_before_break_written_after():
    def fn(x):
        acc = np.zeros(3)
        acc[0] = x.shape[0]
        v = x.sum().item()
        acc[1] = v
        acc[2] = acc[0] + 1
        return torch.from_numpy(acc), acc
    x = torch.randn(4)
    return fn, lambda f, i: f(x * i)


@case
def three_breaks_in_a_row():
    def fn(x):
        a = x * 2
        log("a", a.shape)
        b = a.sum().item()
        c = (a + b).tolist()
        d = torch.tensor(c) * 3
        log("d")
        return d, b, c
    x = torch.arange(4.0)
    return fn, lambda f, i: f(x + i)


def _helper_with_break(x, trace):
    trace.append("in")
    log("helper", x.shape)
    trace.append("after-print")
    y = x * 2
    if y.sum() > 0:
        trace.append("pos")
    return y


@case
def break_inside_helper_mutating_list():
    def fn(x, trace):
        trace.append("start")
        y = _helper_with_break(x, trace)
        trace.append("end")
        return y + 1
    trace = []
    xs = [torch.ones(2), -torch.ones(2), torch.ones(3)]
    return fn, lambda f, i: f(xs[i], trace), lambda: list(trace)


class Base(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.seen = []

    def forward(self, x):
        h = self.fc(x)
        self.seen.append(tuple(h.shape))
        log("base", h.shape)
        return h


class Child(Base):
    def forward(self, x):
        pre = x * 0.5
        h = super().forward(pre)
        return h + pre, len(self.seen)


@case
def break_in_super_forward():
    m = Child()
    x = torch.randn(2, 4)
    return m, lambda f, i: f(x + i), lambda: list(m.seen)


@case
def closure_cell_shared_across_break():
    def fn(x):
        scale = 2.0

        def apply(t):
            return t * scale
        log("break")
        scale = 3.0
        return apply(x)
    x = torch.randn(3)
    return fn, lambda f, i: f(x)


@case
def nonlocal_counter_across_break():
    def fn(x):
        count = 0

        def bump(t):
            nonlocal count
            count += 1
            return t + count
        x = bump(x)
        log("mid")
        x = bump(x)
        if x.sum() > 100:
            x = x * 0
        x = bump(x)
        return x, count
    x = torch.randn(3)
    return fn, lambda f, i: f(x * (1 + 100 * i))


@case
def generator_created_before_break():
    def fn(xs):
        gen = (t * 2 for t in xs)
        first = next(gen)
        log("first", first.shape)
        rest = list(gen)
        return first, rest
    xs = [torch.randn(2) for _ in range(3)]
    return fn, lambda f, i: f(xs[: i + 1])


@case
def iterator_partially_consumed_across_break():
    def fn(x):
        it = iter(x.unbind(0))
        a = next(it)
        if a.sum() > 0:
            a = a * 10
        b = next(it)
        return a + b, [t for t in it]
    xs = [torch.ones(4, 2), -torch.ones(4, 2), torch.ones(3, 2)]
    return fn, lambda f, i: f(xs[i])


@case
def dict_key_deleted_before_break():
    def fn(d):
        cache = dict(d)
        del cache["a"]
        cache["z"] = cache["b"] * 2
        log("cache", list(cache))
        cache["a"] = cache["z"] + 1
        return cache
    d = {"a": torch.ones(2), "b": torch.randn(2), "c": torch.zeros(2)}
    return fn, lambda f, i: f(d)


@case
def data_dependent_break_inside_for_loop():
    def fn(xs):
        kept = []
        for j, t in enumerate(xs):
            if t.sum() > 0:
                kept.append((j, t * 2))
            else:
                kept.append((j, None))
        return kept
    xs = [torch.randn(3) for _ in range(5)]
    return fn, lambda f, i: f(xs[i:])


@case
def break_inside_no_grad_block():
    w = torch.randn(3, requires_grad=True)

    def fn(x):
        y = x * w
        with torch.no_grad():
            z = y * 2
            log("inside no_grad", z.requires_grad)
            z2 = z + w
        return y, z, z2, torch.is_grad_enabled()

    def drive(f, i):
        y, z, z2, g = f(x)
        return y, z, z2, g, torch.is_grad_enabled(), y.requires_grad, z2.requires_grad
    x = torch.randn(3)
    return fn, drive


class Cacher(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = None
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        if self.cache is None:
            self.cache = self.lin(x).detach()
        log("cached")
        out = self.cache + x
        self.cache = out.detach()
        return out


@case
def self_attribute_set_before_break_read_after():
    m = Cacher()
    x = torch.randn(2, 3)
    return m, lambda f, i: f(x), lambda: m.cache


@case
def aliased_list_mutated_after_break():
    def fn(x):
        a = [x]
        b = a
        log("alias")
        b.append(x + 1)
        c = a
        c += [x + 2]
        return a, b is a, len(a)
    x = torch.randn(2)
    return fn, lambda f, i: f(x)


@case
def while_loop_with_data_dependent_exit():
    def fn(x):
        steps = 0
        history = []
        while x.abs().max() > 1.0:
            x = x / 2
            steps += 1
            history.append(steps)
        return x, steps, history
    xs = [torch.tensor([5.0, -3.0]), torch.tensor([0.5]), torch.tensor([100.0, 1.0, 2.0])]
    return fn, lambda f, i: f(xs[i])


@case
def item_value_in_python_math_after_break():
    def fn(x):
        m = x.max().item()
        scale = 1.0 / (m + 1e-6) if m > 0 else 1.0
        return x * scale, scale, type(m).__name__
    xs = [torch.tensor([1.0, 4.0]), torch.tensor([-2.0, -1.0]), torch.tensor([3, 2])]
    return fn, lambda f, i: f(xs[i])


@case
def item_in_list_comprehension():
    def fn(xs):
        vals = [t.sum().item() for t in xs]
        best = max(range(len(vals)), key=vals.__getitem__)
        return xs[best], vals
    xs = [torch.randn(3) for _ in range(4)]
    return fn, lambda f, i: f(xs[i:] or xs)


@case
def contextlib_redirect_and_print():
    def fn(x):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            print("norm", round(x.norm().item(), 3))
        return x / x.norm(), buf.getvalue()
    x = torch.tensor([3.0, 4.0])
    return fn, lambda f, i: f(x * (i + 1))


class Tracker(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.losses = []
        self.best = float("inf")

    def forward(self, x):
        out = self.fc(x)
        loss = out.pow(2).mean()
        lv = loss.item()
        self.losses.append(lv)
        if lv < self.best:
            self.best = lv
        return loss


@case
def module_tracking_best_loss_via_item():
    m = Tracker()
    xs = [torch.randn(3, 2), torch.randn(3, 2) * 0.1, torch.randn(3, 2) * 10]
    return m, lambda f, i: f(xs[i]), lambda: (list(m.losses), m.best)


@case
def list_grows_while_iterated():
    def fn(x, limit):
        queue = [x]
        for t in queue:
            if len(queue) < limit:
                queue.append(t * 2)
        return len(queue), torch.stack(queue)
    return fn, lambda f, i: f(torch.ones(1), 3 + i)


@case
def list_shrinks_while_iterated():
    def fn(lst):
        n = 0
        for t in lst:
            lst.pop()
            n += 1
        return n, len(lst)
    return fn, lambda f, i: f([torch.ones(1)] * (4 + i))


@case
def iterator_made_before_append():
    def fn(x, lst):
        it = iter(lst)
        lst.append(x)
        return [t * 2 for t in it]
    return fn, lambda f, i: f(torch.ones(1), [torch.zeros(1)] * (i + 1))


@case
def dict_grows_while_iterated():
    def fn(x, d):
        for k in d:
            d[k + "_x"] = x
        return d
    return fn, lambda f, i: f(torch.ones(1), {"a": 1})


XFAIL = {
}


@pytest.mark.parametrize("case", params(CASES, XFAIL))
def test_adversarial_breaks(case):
    check_case(case)
