"""Adversarial pass (issue #7), category g: how real code calls code: deep recursion (on Python
ints and on tensors), long call chains, generators, closures (late binding), lambdas,
functools.partial / reduce / wraps / lru_cache, classmethods, staticmethods, properties, callable
objects, bound methods stored on other objects, *args/**kwargs forwarding, diamond super()."""
import collections
import functools
import operator

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from adversarial_harness import check_case, params, registry

CASES, case = registry()


def depth_sum(n):
    return 0 if n == 0 else n + depth_sum(n - 1)


@case
def recursion_on_python_ints_depth_80():
    def fn(x, n):
        return x * depth_sum(n)
    x = torch.ones(2)
    return fn, lambda f, i: f(x, [80, 75, 80][i])


def shrink(x, n):
    if n == 0:
        return x
    return shrink(x * 0.99 + 0.01, n - 1)


@case
def recursion_on_tensors_depth_70():
    def fn(x):
        return shrink(x, 70)
    return fn, lambda f, i: f(torch.full((3,), float(i)))


def tree_map(fn, obj):
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, dict):
        return {k: tree_map(fn, v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(tree_map(fn, v) for v in obj)
    return obj


@case
def recursive_tree_map_over_nested_batch():
    def fn(batch):
        return tree_map(lambda t: t * 2, batch)
    batch = {"a": torch.ones(2), "b": [torch.zeros(1), (torch.ones(1), 3)], "c": "name"}
    return fn, lambda f, i: f(batch)


def is_even(n):
    return True if n == 0 else is_odd(n - 1)


def is_odd(n):
    return False if n == 0 else is_even(n - 1)


@case
def mutual_recursion_depth_80():
    def fn(x, n):
        return x + 1 if is_even(n) else x - 1
    x = torch.zeros(2)
    return fn, lambda f, i: f(x, 80 + i)


def _make_chain(depth):
    def base(x):
        return x + 1
    f = base
    for _ in range(depth):
        f = (lambda g: (lambda x: g(x) * 1.0 + 0.0))(f)
    return f


@case
def deep_call_chain_of_lambdas():
    chain = _make_chain(40)

    def fn(x):
        return chain(x)
    return fn, lambda f, i: f(torch.full((2,), float(i)))


def gen_layers(x, n):
    for j in range(n):
        x = x * 2
        yield j, x


@case
def generator_function_consumed():
    def fn(x):
        outs = [t for _, t in gen_layers(x, 3)]
        total = sum(t.sum() for _, t in gen_layers(x, 2))
        return outs, total
    x = torch.ones(2)
    return fn, lambda f, i: f(x + i)


def inner_gen(x):
    yield x
    yield x + 1


def outer_gen(x):
    yield from inner_gen(x)
    yield x * 10


@case
def yield_from_generator():
    def fn(x):
        return list(outer_gen(x))
    return fn, lambda f, i: f(torch.ones(2) * i)


@case
def late_binding_closures_in_loop():
    def fn(x):
        fs = [lambda t: t * k for k in range(3)]
        gs = [lambda t, k=k: t * k for k in range(3)]
        return [f(x) for f in fs], [g(x) for g in gs]
    return fn, lambda f, i: f(torch.ones(2) + i)


@case
def functools_partial_softmax():
    sm = functools.partial(F.softmax, dim=-1)
    scaled = functools.partial(torch.mul, other=0.5)

    def fn(x):
        return sm(x), scaled(x), sm.keywords
    return fn, lambda f, i: f(torch.randn(2, 3))


class Encoder(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.d = d
        self.fc = nn.Linear(d, d)

    @classmethod
    def from_config(cls, cfg):
        return cls(cfg["d"])

    @staticmethod
    def normalize(x, eps=1e-6):
        return x / (x.norm(dim=-1, keepdim=True) + eps)

    @property
    def scale(self):
        return self.d ** -0.5

    def forward(self, x):
        return self.normalize(self.fc(x)) * self.scale


@case
def classmethod_staticmethod_property():
    m = Encoder.from_config({"d": 4})
    return m, lambda f, i: f(torch.randn(2, 4) + i)


@case
def functools_reduce_and_operator():
    def fn(xs):
        s = functools.reduce(operator.add, xs)
        p = functools.reduce(lambda a, b: a * b, xs, torch.ones_like(xs[0]))
        return s, p, functools.reduce(operator.mul, [t.shape[0] for t in xs], 1)
    xs = [torch.randn(2) for _ in range(4)]
    return fn, lambda f, i: f(xs[: i + 2])


@case
def map_filter_lambdas():
    def fn(xs):
        pos = list(filter(lambda t: t.shape[0] > 1, xs))
        return list(map(lambda t: t.relu(), pos)), list(map(torch.neg, xs))
    xs = [torch.randn(2), torch.randn(1), torch.randn(3)]
    return fn, lambda f, i: f(xs[i:] + xs[:i])


@case
def sorted_with_key_on_shapes():
    def fn(feats):
        order = sorted(feats, key=lambda t: t.shape[-1], reverse=True)
        return order, [t.shape[-1] for t in order]
    feats = [torch.randn(1, 4), torch.randn(1, 16), torch.randn(1, 8)]
    return fn, lambda f, i: f(feats[i:] + feats[:i])


class WithNested(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        def block(t, scale):
            return self.fc(t) * scale
        return block(block(x, 2.0), 0.5)


@case
def nested_function_using_self():
    m = WithNested()
    return m, lambda f, i: f(torch.randn(2, 3))


def log_calls(fn):
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        self.n_calls += 1
        return fn(self, *args, **kwargs)
    return wrapper


class Decorated(nn.Module):
    def __init__(self):
        super().__init__()
        self.n_calls = 0
        self.fc = nn.Linear(2, 2)

    @log_calls
    def forward(self, x, scale=1.0):
        return self.fc(x) * scale


@case
def decorator_with_wraps_on_forward():
    m = Decorated()
    return m, lambda f, i: f(torch.randn(1, 2), scale=float(i)), lambda: m.n_calls


class Callable:
    def __init__(self, w):
        self.w = w

    def __call__(self, x, *, bias=0.0):
        return x @ self.w + bias


@case
def plain_callable_object():
    c = Callable(torch.randn(3, 2))

    def fn(x):
        return c(x, bias=1.0), c(x)
    return fn, lambda f, i: f(torch.randn(2, 3))


def layer3(x, *args, **kwargs):
    return x * kwargs.get("scale", 1.0) + sum(args)


def layer2(*args, **kwargs):
    return layer3(*args, **kwargs)


def layer1(x, *rest, **kw):
    kw = dict(kw, scale=kw.get("scale", 1.0) * 2)
    return layer2(x, *rest, **kw)


@case
def args_kwargs_forwarding_three_layers():
    def fn(x):
        return layer1(x, 1, 2, scale=3.0), layer1(x), layer1(x, 5)
    return fn, lambda f, i: f(torch.ones(2) * i)


@functools.lru_cache(maxsize=None)
def rel_pos_index(n):
    return [[j - k + n - 1 for k in range(n)] for j in range(n)]


@case
def lru_cache_helper_of_ints():
    table = torch.randn(15)

    def fn(n):
        idx = torch.tensor(rel_pos_index(n))
        return table[idx]
    return fn, lambda f, i: f([4, 4, 3][i])


class A(nn.Module):
    def forward(self, x):
        return x + 1


class B(A):
    def forward(self, x):
        return super().forward(x) * 2


class C(A):
    def forward(self, x):
        return super().forward(x) - 3


class D(B, C):
    def forward(self, x):
        return super().forward(x) / 4


@case
def diamond_super_chain():
    m = D()
    return m, lambda f, i: f(torch.ones(2) * i)


class Manager:
    def __init__(self):
        self.scale = 3.0

    def run(self, x):
        return x * self.scale


class Caller:
    def __init__(self, fn):
        self.scale = 1.0
        self._fn = fn  # a bound method of another object (callbacks, plugin hook callers)

    def __call__(self, x):
        return self._fn(x)


@case
def bound_method_of_other_object_as_attribute():
    caller = Caller(Manager().run)

    def fn(x):
        return caller(x)
    return fn, lambda f, i: f(torch.ones(2) + i)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.post = self.postprocess  # bound method of self stored on self

    def postprocess(self, y):
        return y.softmax(-1)

    def forward(self, x):
        return self.post(self.fc(x))


@case
def bound_method_of_self_stored_on_self():
    m = Model()
    return m, lambda f, i: f(torch.randn(1, 2))


class Head:
    def __init__(self, scale):
        self.scale = scale

    def apply(self, x):
        return x * self.scale


class Dispatcher:
    def __init__(self):
        self.scale = -1.0
        heads = [Head(2.0), Head(3.0)]
        self.fns = {"a": heads[0].apply, "b": heads[1].apply}

    def __call__(self, name, x):
        return self.fns[name](x)


@case
def dict_of_bound_methods_dispatch():
    d = Dispatcher()

    def fn(x):
        return d("a", x), d("b", x)
    return fn, lambda f, i: f(torch.ones(2) * (i + 1))


@case
def getattr_string_dispatch():
    class Acts(nn.Module):
        def forward(self, x, name):
            return getattr(torch, name)(x), getattr(F, "gelu")(x)
    m = Acts()
    names = ["tanh", "sigmoid", "relu"]
    return m, lambda f, i: f(torch.randn(3), names[i])


@case
def itertools_chain_islice_accumulate_product():
    import itertools

    def fn(xs):
        a = list(itertools.islice(itertools.chain(xs, xs), 3))
        b = list(itertools.accumulate(xs, operator.add))
        c = [u * v for u, v in itertools.product(xs, repeat=2)]
        d = [u if v is None else u + v for u, v in itertools.zip_longest(xs, xs[1:])]
        return a, b, c, d
    xs = [torch.ones(2), -torch.ones(2), torch.arange(2.0)]
    return fn, lambda f, i: f(xs[: i + 1])


@case
def match_statement_on_config_and_shape():
    def fn(x, mode):
        match mode:
            case "relu":
                y = x.relu()
            case "scale" | "mul":
                y = x * 2
            case _:
                y = x
        match y.shape:
            case (b, c, h, w):
                return y.mean((2, 3)), (b, c)
            case (b, c):
                return y, (b, c)
            case _:
                return y, None
    args = [(-torch.ones(1, 2, 3, 3), "relu"), (torch.ones(2, 3), "mul"), (torch.ones(3), "other")]
    return fn, lambda f, i: f(*args[i])


@case
def match_mapping_and_class_patterns():
    Pt = collections.namedtuple("Pt", ["a", "b"])

    def fn(x, cfg, p):
        match cfg:
            case {"act": "gelu", **rest}:
                x, extra = F.gelu(x), rest
            case {"act": a}:
                extra = a
            case _:
                extra = None
        match p:
            case Pt(a=0, b=b):
                return x * b, extra
            case Pt(a, b) if a > b:
                return x * a, extra
            case _:
                return x, extra
    args = [({"act": "gelu", "p": 1}, Pt(0, 3)), ({"act": "relu"}, Pt(5, 1)), ({}, Pt(1, 5))]
    return fn, lambda f, i: f(torch.ones(2), *args[i])


class TreeNode:
    def __init__(self, val, children=()):
        self.val = val
        self.children = list(children)


def make_tree(depth):
    if depth == 0:
        return TreeNode(torch.ones(1, 2))
    return TreeNode(torch.ones(1, 2) * depth, [make_tree(depth - 1), make_tree(depth - 1)])


class TreeNet(nn.Module):
    """Recursive module over a Python tree (Tree-LSTM / recursive NN style)."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.visits = 0

    def forward(self, node):
        self.visits += 1
        h = self.fc(node.val)
        for c in node.children:
            h = h + self(c)
        return h.tanh()


@case
def recursive_module_over_python_tree():
    m = TreeNet()
    return m, lambda f, i: f(make_tree([2, 3, 2][i])), lambda: m.visits


XFAIL = {}


@pytest.mark.parametrize("case", params(CASES, XFAIL))
def test_adversarial_calls(case):
    check_case(case)
