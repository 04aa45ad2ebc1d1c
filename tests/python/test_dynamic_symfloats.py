"""Symbolic Python floats (docs/dynamic-shapes.md, core/src/interp/sym_values.cpp): a float input
that changes between calls (a learning rate, a scale) becomes a graph input after its first change,
guarded by type, where the graph only computes with it; a branch on it, or any use that needs its
value, specialises it with a value guard. Every result is checked bitwise against eager."""
import math

import pytest
import torch

import dynamo

from compile_fixtures import compiled, fresh_dynamo, records  # noqa: F401  (fixtures)


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def same(a, b):
    if isinstance(a, tuple):
        return len(a) == len(b) and all(same(p, q) for p, q in zip(a, b))
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    return type(a) is type(b) and a == b


X = torch.randn(3, 5)
LRS = [0.1 * 0.93 ** k + 1e-3 * k for k in range(12)]


def guards_of(record):
    return {(g["kind"], g["source"]) for g in record["guards"]}


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_float_argument_that_changes_every_call_compiles_twice(records, backend):
    def f(x, lr):
        return x * lr + lr * 2 - x / 3 * -lr
    cf = dynamo.compile(f, backend=backend)
    for lr in LRS:
        assert same(cf(X, lr), f(X, lr)), lr
    # The first value is a constant; from its first change on, one graph takes the float as input.
    assert len(compiled(records)) == 2
    second = compiled(records)[1]
    assert f"lr is dynamic (float): automatic dynamic: the value changed ({LRS[0]!r} -> {LRS[1]!r})" in \
        second["dynamic_shapes"]
    assert ("TYPE_MATCH", "lr") in guards_of(second) and ("EQUALS_MATCH", "lr") not in guards_of(second)
    graph = second["graphs"][0]
    assert '{"op":"placeholder","name":"lr","source":"lr"' in graph["json"]
    assert graph["op_counts"]["operator.neg"] == 1


def test_the_float_comes_back_as_a_python_float_and_is_stored(records):
    class Sched:
        def __init__(self):
            self.lr = 0.0

    s, ref = Sched(), Sched()

    def f(x, base, sched):
        sched.lr = base * 0.5 + 1e-4
        return x * sched.lr, sched.lr / 4

    cf = dynamo.compile(f)
    for base in LRS:
        out, want = cf(X, base, s), f(X, base, ref)
        assert same(out, want) and type(out[1]) is float and s.lr == ref.lr, base
    assert len(compiled(records)) == 2


def test_a_branch_on_a_float_specialises_it_with_a_guard(records):
    def f(x, lr):
        if lr > 0.05:
            return x * lr
        return x - lr
    cf = dynamo.compile(f)
    values = [0.1, 0.2, 0.02, 0.2, 0.3]
    for lr in values:
        assert same(cf(X, lr), f(X, lr)), lr
    second = compiled(records)[1]
    assert "lr specialised to 0.2: comparison at " in second["dynamic_shapes"]
    assert ("EQUALS_MATCH", "lr") in guards_of(second)
    # Specialised once: a constant in every later compile (one compile per distinct value).
    assert len(compiled(records)) == 4
    assert not any("is dynamic" in (r["dynamic_shapes"] or "") for r in compiled(records)[2:])


@pytest.mark.parametrize("body", [
    lambda x, s: x * (1 / s),                 # a division by a float that may be 0
    lambda x, s: x * math.cos(s),             # math of a float input (that may be inf)
    lambda x, s: x + len(f"{s}"),             # its text
    lambda x, s: x + int(s * 10),             # int() of it
    lambda x, s: x + torch.tensor(s),         # a factory taking it
])
def test_uses_that_need_the_value_are_specialised_and_exact(records, body):
    cf = dynamo.compile(body)
    for s in (0.25, 0.5, 0.75, 0.5, 1.25):
        assert same(cf(X, s), body(X, s)), s
    assert all(not r["breaks"] for r in records)
    assert "specialised to 0.5" in compiled(records)[1]["dynamic_shapes"]


def test_a_float_that_sets_a_size_is_specialised(records):
    def f(x, scale):
        return torch._C._nn.upsample_nearest1d(x, None, [scale]).sum(-1)
    cf = dynamo.compile(f)
    x = torch.randn(2, 3, 8)
    for scale in (1.5, 2.0, 2.5, 2.0):
        assert same(cf(x, scale), f(x, scale)), scale
    assert "scale specialised to 2.0: upsample_nearest1d() has results whose sizes or values depend on the float" in \
        compiled(records)[1]["dynamic_shapes"]
    assert len(compiled(records)) == 3


def test_a_cosine_schedule_of_an_int_step_is_one_graph(records):
    # lr from the step counter through math.cos: the int is symbolic (from 2), the float computed
    # from it is a graph value, and the update takes it as alpha.
    torch.manual_seed(0)
    p, q = torch.randn(6), None
    q = p.clone()
    g = torch.randn(6)

    def step(param, grad, k):
        lr = 0.05 * (1 + math.cos(math.pi * k / 100)) + 0.9 ** k * 1e-3
        param.add_(grad, alpha=-lr)
        return lr

    cs = dynamo.compile(step)
    for k in range(10):
        assert cs(p, g, k) == step(q, g, k)
        assert torch.equal(p, q), k
    assert len(compiled(records)) == 3  # k == 0, k == 1 (constants), then one graph
    ops = compiled(records)[2]["graphs"][0]["op_counts"]
    assert ops["math.cos"] == 1 and ops["operator.pow"] == 1


def test_dynamic_false_keeps_floats_constant(records):
    def f(x, lr):
        return x * lr
    cf = dynamo.compile(f, dynamic=False)
    for lr in LRS[:5]:
        assert same(cf(X, lr), f(X, lr))
    assert len(compiled(records)) == 5
    assert all(("EQUALS_MATCH", "lr") in guards_of(r) for r in compiled(records))


def test_an_int_after_a_symbolic_float_recompiles(records):
    def f(x, s):
        return x * s
    cf = dynamo.compile(f)
    for s in (0.5, 1.5, 2.5, 3, 4.5):
        assert same(cf(X, s), f(X, s)), s
    assert len(compiled(records)) == 3  # 0.5; floats from 1.5; the int 3 (TYPE_MATCH fails)
