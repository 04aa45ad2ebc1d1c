"""Constructs real model code uses that used to break the graph (issue 14), each captured whole
(fullgraph=True), equal to eager, side effects included."""
import collections

import pytest
import torch

import dynamo


@pytest.fixture(autouse=True)
def _fresh():
    dynamo.reset()
    yield
    dynamo.reset()


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


X = torch.tensor([[1.0, -2.0, 3.0], [0.5, 4.0, -1.0]])


def test_finfo_for_attention_masks():
    def f(scores, mask):
        return scores.masked_fill(mask, torch.finfo(scores.dtype).min), torch.iinfo(torch.int32).max

    mask = X < 0
    assert _same(dynamo.compile(f, fullgraph=True)(X, mask), f(X, mask))


def test_return_types_fields():
    def f(x):
        r = x.max(dim=1)
        s = torch.sort(x, dim=0)
        return r.values + 1, r.indices, s.values * 2

    assert _same(dynamo.compile(f, fullgraph=True)(X), f(X))


def test_del_items_setdefault_and_pop():
    def f(x, d):
        out = {"a": x, "b": x * 2, "c": x + 1}
        del out["b"]
        lst = [x, x * 3, x * 4]
        del lst[1]
        d.setdefault("seen", 0)
        extra = d.pop("extra", None)
        out.setdefault("z", x.sum())
        return out, lst, extra

    d_e, d_c = {"extra": 5}, {"extra": 5}
    assert _same(dynamo.compile(f, fullgraph=True)(X, d_c), f(X, d_e)) and d_c == d_e


def test_dict_get_with_a_non_constant_key_is_not_guessed():
    class Key:
        def __init__(self, k):
            self.k = k

        def __hash__(self):
            return hash(self.k)

        def __eq__(self, other):
            return other == self.k

    def f(x, d, key):
        return x * d.get(key, 100)

    d = {"a": 2}
    assert _same(dynamo.compile(f)(X, d, Key("a")), f(X, d, Key("a")))


def test_a_tensor_slice_bound_is_a_tensor_to_python_break():
    def f(m, box):
        y0 = max(box[1], 0)
        return m[y0:] * 2

    m, box = torch.randn(8, 8), torch.tensor([1, 2, 3, 4])
    out = dynamo.explain(f)(m, box)
    assert {b.kind for b in out.break_reasons} == {"tensor-to-python"}    # max(t, 0), then m[t:]
    assert any("a tensor used as a slice bound" in b.reason for b in out.break_reasons)
    assert _same(dynamo.compile(f)(m, box), f(m, box))


def test_code_in_a_nullcontext_block_is_captured():
    import contextlib

    def f(x, freeze):
        ctx = torch.no_grad() if freeze else contextlib.nullcontext()
        with ctx:
            y = x * 2
        return y + 1

    x = torch.ones(2, requires_grad=True)
    out = dynamo.explain(f)(x, False)
    assert not any("try block" in b.reason for b in out.break_reasons)
    for freeze in (False, True):
        e, c = f(x, freeze), dynamo.compile(f)(x, freeze)
        assert _same(c, e) and c.requires_grad == e.requires_grad


def test_cnn_train_step_with_backward_is_one_graph():
    torch.manual_seed(0)
    conv_e = torch.nn.Conv2d(3, 4, 3)
    conv_c = torch.nn.Conv2d(3, 4, 3)
    conv_c.load_state_dict(conv_e.state_dict())

    def step(conv, x):
        loss = torch.nn.functional.grid_sample(conv(x), torch.zeros(2, 2, 2, 2), align_corners=False).sum()
        loss.backward()
        return loss.detach()

    x = torch.randn(2, 3, 5, 5)
    out = dynamo.explain(step)(conv_c, x)
    assert out.graph_count == 1 and out.graph_break_count == 0
    conv_c.zero_grad()
    for _ in range(2):
        assert _same(dynamo.compile(step)(conv_c, x), step(conv_e, x))
    assert torch.equal(conv_c.weight.grad, conv_e.weight.grad) and torch.equal(conv_c.bias.grad, conv_e.bias.grad)


def test_optimizer_step_and_nullcontext_blocks_are_captured():
    import contextlib
    torch.manual_seed(0)
    lin_e = torch.nn.Linear(3, 1)
    lin_c = torch.nn.Linear(3, 1)
    lin_c.load_state_dict(lin_e.state_dict())
    opt_e = torch.optim.SGD(lin_e.parameters(), lr=0.1)
    opt_c = torch.optim.SGD(lin_c.parameters(), lr=0.1)

    def step(lin, opt, x):
        with torch.autograd.profiler.record_function("my step"):
            with contextlib.nullcontext():
                loss = lin(x).pow(2).mean()
        with torch.no_grad():
            with contextlib.nullcontext():
                torch.set_grad_enabled(True)       # nullcontext's exit must not undo this
            assert torch.is_grad_enabled()
        return loss

    x = torch.randn(4, 3)
    out = dynamo.explain(step)(lin_c, opt_c, x)
    assert not any("record_function" in b.reason or "nullcontext" in b.reason for b in out.break_reasons)
    for _ in range(2):
        assert _same(dynamo.compile(step)(lin_c, opt_c, x), step(lin_e, opt_e, x))
    assert torch.is_grad_enabled()
