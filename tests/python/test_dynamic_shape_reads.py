"""Whole-shape reads in model code (issue 15): `x.shape` and `x.size()` read as a whole in the
function being compiled are a symbolic torch.Size (its items symbolic ints where the dimension is
dynamic), so unpacking, slicing, tuple(), passing it to view/reshape/expand/new_zeros/torch.zeros,
comparing two shapes, len(), iterating, .numel() and isinstance() keep one graph for every size.
Each program runs over 10 sizes under every backend and must equal eager (bitwise for eager and
aot_eager, within float32 tolerance for fused) with one compile under dynamic=True and at most
two under automatic dynamic (before this change every size recompiled until the cache limit).
A torch.Size whose sizes are needed as Python ints (hashed as a dict key, formatted, passed to a
Python function the trace evaluates) still specialises, and the compile record says why."""
import pytest
import torch

import dynamo
from compile_fixtures import check_over_sizes, compiled, fresh_dynamo, records  # noqa: F401  (fixtures)

pytestmark = pytest.mark.usefixtures("fresh_dynamo")

SIZES = [5, 7, 12, 16, 9, 31, 17, 64, 3, 40]


def unpack(x):
    shape = x.shape  # kept, then unpacked
    b, t, c = shape
    return x.reshape(b * t, c).sum(0) * t


def view_star_slice(x):
    return x.view(*x.shape[:2], -1).sum(-1)


def reshape_first(x):
    return x.reshape(x.shape[0], -1) * 2


def tuple_of_shape(x):
    s = tuple(x.shape)
    return x.reshape(s[0], s[1] * s[2]) + s[1]


def shape_tail(x):
    tail = x.shape[1:]
    return x.reshape(-1, *tail).mean(0) + len(tail)


def new_zeros_of_shape(x):
    return x.new_zeros(x.shape) + x


def zeros_of_shape(x):
    return torch.zeros(x.shape) + torch.ones(x.size()) * x


def shapes_equal(x):
    y = x * 2
    if x.shape == y.shape:
        return y + 1
    return y - 1


def len_of_shape(x):
    return x.sum(dim=len(x.shape) - 1)


def scale_by_last(x):
    s = x.shape
    return x * (s[-1] ** -0.5)


def expand_star(x):
    return x[:, :1].expand(*x.shape) + x


def size_whole_then_indexed(x):
    s = x.size()
    b, t, c = s
    return x.view(s[0], -1) + t + c


def loop_over_shape(x):
    n = 1
    for d in x.shape:
        n = n * d
    return x.reshape(n) + 1


def size_to_view(x):
    shape = torch.Size([x.shape[0], -1])
    return x.view(x.shape).view(shape) * 3


def size_numel(x):
    return x.sum() / x.shape.numel()


def is_size(x):
    s = x.shape
    if isinstance(s, torch.Size) and isinstance(s, tuple):
        return x + s[0]
    return x


def new_empty_filled(x):
    return x.new_empty(x.shape[1:]).fill_(2.0) + x[0]


def size_plus_tuple(x):
    return x.view(x.shape[:1] + (-1,)).sum(1)


CASES = {f.__name__: f for f in [
    unpack, view_star_slice, reshape_first, tuple_of_shape, shape_tail, new_zeros_of_shape,
    zeros_of_shape, shapes_equal, len_of_shape, scale_by_last, expand_star,
    size_whole_then_indexed, loop_over_shape, size_to_view, size_numel, is_size, new_empty_filled,
    size_plus_tuple,
]}


def _check(records, name, backend, dynamic):
    torch.manual_seed(0)
    check_over_sizes(records, name, CASES[name], lambda t: (torch.randn(3, t, 4 + t % 3),), SIZES,
                     backend, dynamic, automatic_compiles=(1, 2), no_grad=False)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("dynamic", [None, True])
def test_whole_shape_reads_compile_once_for_every_size(records, name, backend, dynamic):
    _check(records, name, backend, dynamic)


@pytest.mark.parametrize("name", sorted(CASES))
def test_whole_shape_reads_under_fused(records, name):
    _check(records, name, "fused", True)


def test_a_returned_shape_is_an_equal_torch_size(records):
    def f(x):
        return x * 2, x.shape, x.size()[1:], tuple(x.shape)
    cf = dynamo.compile(f, dynamic=True)
    for t in SIZES:
        x = torch.randn(2, t)
        got, want = cf(x), f(x)
        assert torch.equal(got[0], want[0])
        for g, w in zip(got[1:], want[1:]):
            assert type(g) is type(w) and g == w, (t, g, w)
    assert len(compiled(records)) == 1


def test_a_shape_stored_on_an_object_is_the_eager_torch_size(records):
    class Holder:
        pass
    h = Holder()

    def f(x):
        h.shape = x.shape
        return x + 1
    cf = dynamo.compile(f, dynamic=True)
    for t in [4, 9, 13]:
        x = torch.randn(t, 3)
        assert torch.equal(cf(x), x + 1)
        assert type(h.shape) is torch.Size and h.shape == x.shape, (t, h.shape)
    assert len(compiled(records)) == 1


def test_a_shape_used_as_a_dict_key_specialises_and_says_why(records):
    def f(x):
        cache = {x.shape: 2}
        return x * cache[x.shape]
    cf = dynamo.compile(f, dynamic=True)
    for t in [4, 9, 13]:
        x = torch.randn(t, 3)
        assert torch.equal(cf(x), f(x)), t
    texts = [r["dynamic_shapes"] for r in compiled(records)]
    assert len(texts) == 3, texts
    assert "x.size()[0] specialised to 4: used as a Python value at " in texts[0], texts[0]
    assert "x.size()[0] == 4  # specialised" in texts[0], texts[0]


def test_a_formatted_shape_specialises_and_says_why(records):
    def f(x):
        return x + 1, str(x.shape)
    cf = dynamo.compile(f, dynamic=True)
    for t in [4, 9, 13]:
        x = torch.randn(t, 3)
        got, want = cf(x), f(x)
        assert torch.equal(got[0], want[0]) and got[1] == want[1], t
    texts = [r["dynamic_shapes"] for r in compiled(records)]
    assert len(texts) == 3, texts
    assert "x.size()[0] specialised to 4" in texts[0], texts[0]


SHAPES_SEEN = []


@dynamo.disable
def keep_shape(s):
    SHAPES_SEEN.append(s)


def test_a_shape_passed_to_an_unknown_function_is_the_eager_torch_size(records):
    def f(x):
        s = x.shape
        keep_shape(s)  # not traced: a graph break, s rebuilt for it
        return x * s[0]

    cf = dynamo.compile(f, dynamic=True)
    SHAPES_SEEN.clear()
    ts = [4, 9, 13, 6, 21]
    for t in ts:
        x = torch.randn(t, 3)
        assert torch.equal(cf(x), x * t), t
    assert [type(s) for s in SHAPES_SEEN] == [torch.Size] * len(ts), SHAPES_SEEN
    assert SHAPES_SEEN == [torch.Size([t, 3]) for t in ts]
    # f compiles once; its resume function (s read back from the frame, a torch.Size guarded by
    # its items, not by identity) static, then with s[0] symbolic
    names = [r["function"] for r in compiled(records)]
    assert [n.endswith("<locals>.f") for n in names] == [True, False, False], names
