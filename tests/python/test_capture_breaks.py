"""Graph breaks, resume functions, side effects and fullgraph errors."""
import io
import contextlib
import logging

import pytest
import torch

import dynamo
from capture_harness import Recorder, check, same

A = torch.randn(4)
B = torch.randn(4)


def toy_example(a, b):
    x = a + b
    x = x / 2.0
    if x.sum() < 0:
        return x * -1.0
    return x


def test_seed_toy_two_graphs_guarded_on_tensors():
    a, b = -A.abs() - 1, -B.abs() - 1  # takes the branch
    rec = check(toy_example, a, b, graphs=2, breaks=1)
    first, second = rec.graphs
    assert first["op_counts"] == {"operator.add": 1, "operator.truediv": 1, "torch.Tensor.sum": 1,
                                  "operator.lt": 1}
    assert second["op_counts"] == {"operator.mul": 1}
    (brk,) = rec.breaks
    assert brk["kind"] == "data-dependent-branch"
    assert brk["source"] == "if x.sum() < 0:"
    guards = [g for r in rec.compiled for g in r["guards"] if g["source"] in ("a", "b")]
    assert {g["source"] for g in guards} == {"a", "b"}
    assert all(g["kind"] == "TENSOR_MATCH" for g in guards)


def test_seed_toy_other_branch_is_correct_too():
    check(toy_example, A.abs() + 1, B.abs() + 1)


def faq_toy(a, b):
    x = a / (torch.abs(a) + 1)
    print("woo")
    if b.sum() < 0:
        b = b * -1
    return x * b


def test_faq_toy_three_graphs_two_breaks():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rec = check(faq_toy, A, -B.abs() - 1, graphs=3, breaks=2)
    # print ran once for eager and once per compiled call, in order.
    assert out.getvalue() == "woo\n" * 3
    kinds = [b["kind"] for b in rec.breaks]
    assert kinds == ["print", "data-dependent-branch"]
    assert [b["source"] for b in rec.breaks] == ['print("woo")', "if b.sum() < 0:"]


def test_item_breaks_and_resumes():
    def f(x):
        y = x * 2
        n = y.sum().item()
        return y + n

    rec = check(f, A, graphs=2, breaks=1)
    assert rec.breaks[0]["kind"] == "tensor-to-python"


def test_tolist_break():
    def f(x):
        vals = (x + 1).tolist()
        return torch.tensor(vals) * 2

    check(f, A, breaks=1)


def test_logging_break():
    log = logging.getLogger("dynamo-test")

    def f(x):
        y = x + 1
        log.info("value %s", 3)
        return y * 2

    rec = check(f, A, graphs=2, breaks=1)
    assert rec.breaks[0]["kind"] == "logging"


def test_untraceable_c_call_breaks():
    import zlib

    def f(x):
        y = x + 1
        c = zlib.crc32(b"abc")
        return y * (c % 7)

    rec = check(f, A, breaks=1)
    assert rec.breaks[0]["kind"] == "unsupported-call"


def test_break_inside_inlined_function_restarts_and_resumes():
    def helper(t):
        t = t * 3
        print("in helper")
        return t + 1

    def f(x):
        y = x - 1
        z = helper(y)
        return z * 2

    with contextlib.redirect_stdout(io.StringIO()):
        rec = check(f, A, breaks=1)
    assert rec.breaks[0]["detail"] == "call to print()"
    # the helper itself is compiled on its own, around its print
    assert any(r["function"].endswith("helper") for r in rec.compiled)


def test_break_with_values_on_stack_and_kwargs():
    def f(x):
        return torch.cat([x, x + 1]) * len(str(print("s", end=""))) + x.sum()

    with contextlib.redirect_stdout(io.StringIO()):
        check(f, A, breaks=1)


def test_break_keeps_locals_and_closures():
    def f(x):
        scale = 3.0
        items = [x]

        def g():
            return scale

        y = x * g()
        print("", end="")
        items.append(y)
        scale = 5.0
        return torch.stack(items) * g()

    with contextlib.redirect_stdout(io.StringIO()):
        check(f, A, breaks=1)


def test_break_in_loop_runs_eagerly_and_correctly():
    def f(x):
        for i in range(3):
            x = x + i
            if x.sum() > 100:
                x = x * 0
        return x

    rec = check(f, A)
    assert any(r["status"] == "skipped" and "loop" in r["reason"] for r in rec.records)


def test_fullgraph_break_raises_with_location_and_hint():
    def f(x):
        y = x + 1
        if y.sum() > 0:
            return y
        return -y

    c = dynamo.compile(f, fullgraph=True)
    with pytest.raises(dynamo.Unsupported) as info:
        c(A)
    msg = str(info.value)
    assert "graph break (data-dependent-branch) with fullgraph=True" in msg
    assert "test_capture_breaks.py:" in msg
    assert "if y.sum() > 0:" in msg
    assert "torch.where" in msg
    assert info.value.user_line > 0 and info.value.user_file.endswith("test_capture_breaks.py")


# ---- side effects -----------------------------------------------------------------------------

class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.count = 0
        self.lin = torch.nn.Linear(4, 4)
        self.last = None

    def forward(self, x):
        self.count += 1
        y = self.lin(x)
        self.last = y
        return y * self.count


def test_attribute_mutation_replayed():
    m_eager, m_comp = Counter(), Counter()
    m_comp.load_state_dict(m_eager.state_dict())
    c = dynamo.compile(m_comp, fullgraph=True)
    x = torch.randn(2, 4)
    for _ in range(3):
        assert same(c(x), m_eager(x))
    assert m_comp.count == m_eager.count == 3
    assert torch.equal(m_comp.last, m_eager.last)


def test_list_and_dict_mutation_replayed():
    def f(x, log, stats):
        log.append(x * 2)
        log.append("tag")
        stats["n"] = stats.get("n", 0) + 1
        stats["last"] = x + 1
        return x - 1

    le, se = [], {}
    lc, sc = [], {}
    c = dynamo.compile(f, fullgraph=True)
    for _ in range(2):
        assert same(c(A, lc, sc), f(A, le, se))
    assert len(lc) == len(le) == 4 and all(same(p, q) for p, q in zip(lc, le))
    assert sc.keys() == se.keys() and sc["n"] == se["n"] == 2


GLOBAL_STEP = 0


def bump(x):
    global GLOBAL_STEP
    GLOBAL_STEP = GLOBAL_STEP + 1
    return x * GLOBAL_STEP


def test_global_mutation_replayed():
    global GLOBAL_STEP
    GLOBAL_STEP = 0
    c = dynamo.compile(bump)
    r1 = c(A)
    r2 = c(A)
    assert GLOBAL_STEP == 2
    assert torch.equal(r1, A * 1) and torch.equal(r2, A * 2)


def test_closure_cell_mutation_replayed():
    def make():
        total = torch.zeros(4)

        def acc(x):
            nonlocal total
            total = total + x
            return total * 1

        return acc, lambda: total

    acc_e, get_e = make()
    acc_c, get_c = make()
    c = dynamo.compile(acc_c)
    for _ in range(3):
        assert same(c(A), acc_e(A))
    assert torch.equal(get_c(), get_e())


def test_inplace_on_input_is_visible_to_caller():
    def f(x):
        x.add_(1)
        return x * 2

    xe, xc = A.clone(), A.clone()
    c = dynamo.compile(f, fullgraph=True)
    assert same(c(xc), f(xe))
    assert torch.equal(xc, xe)


def test_batchnorm_running_stats_train_mode():
    bn_e = torch.nn.BatchNorm1d(4).train()
    bn_c = torch.nn.BatchNorm1d(4).train()
    c = dynamo.compile(bn_c, fullgraph=True)
    x = torch.randn(8, 4)
    for _ in range(3):
        assert same(c(x), bn_e(x))
    assert torch.equal(bn_c.running_mean, bn_e.running_mean)
    assert torch.equal(bn_c.running_var, bn_e.running_var)
    assert int(bn_c.num_batches_tracked) == int(bn_e.num_batches_tracked) == 3


def test_side_effects_before_a_break_happen_once():
    def f(x, log):
        log.append(1)
        y = x + 1
        print("", end="")
        log.append(2)
        return y

    le, lc = [], []
    c = dynamo.compile(f)
    with contextlib.redirect_stdout(io.StringIO()):
        assert same(c(A, lc), f(A, le))
    assert lc == le == [1, 2]


def test_break_at_a_super_call_keeps_the_parent_method():
    class Base:
        def __init__(self):
            self.log = []
            print("", end="")  # makes the inlined call fail: the break is at super().__init__()

    class Child(Base):
        def __init__(self, x):
            super().__init__()
            self.y = x * 2

    dynamo.reset()
    with contextlib.redirect_stdout(io.StringIO()), dynamo.optimize("eager"):
        c = Child(torch.ones(2))
    assert c.log == [] and torch.equal(c.y, torch.ones(2) * 2)


def test_module_init_under_capture_binds_super_methods_to_each_instance():
    class Net(torch.nn.Module):
        def __init__(self, k):
            super().__init__()
            self.k = k

    dynamo.reset()
    with dynamo.optimize("eager"):
        nets = [Net(i) for i in range(3)]
    assert [n.k for n in nets] == [0, 1, 2]
    assert all(n.training for n in nets) and all(n._parameters == {} for n in nets)
