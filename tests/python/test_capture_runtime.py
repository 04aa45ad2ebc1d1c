"""Guards and recompilation, cache limit, run-only and disable, threads, reference leaks, user
backends and bad input."""
import gc
import sys
import threading
import warnings

import pytest
import torch

import dynamo
from capture_harness import Recorder, same


def add_mul(x, y):
    return (x + y) * 2


def compiles(rec):
    return [r for r in rec.records if r["status"] == "compiled"]


def test_same_shapes_hit_the_cache():
    dynamo.reset()
    c = dynamo.compile(add_mul)
    with Recorder() as rec:
        for _ in range(5):
            c(torch.ones(3), torch.ones(3))
    assert len(compiles(rec)) == 1


def test_size_change_recompiles_with_reason_naming_dim_sizes_and_line():
    dynamo.reset()
    c = dynamo.compile(add_mul)
    with Recorder() as rec:
        c(torch.ones(4), torch.ones(4))
        out = c(torch.ones(8), torch.ones(8))
    assert torch.equal(out, add_mul(torch.ones(8), torch.ones(8)))
    first, second = compiles(rec)
    assert second["attempt"] == 1
    assert "tensor 'x' size mismatch at dim 0: expected 4, got 8" in second["reason"]
    assert "guard created at" in second["reason"] and "test_capture_runtime.py" in second["reason"]


@pytest.mark.parametrize("change,expect", [
    (lambda t: t.double(), "dtype"),
    (lambda t: t.t(), "stride"),
    (lambda t: t.requires_grad_(), "requires_grad"),
    (lambda t: torch.nn.Parameter(t), "type"),
    (lambda t: t.unsqueeze(0), "ndim"),
])
def test_tensor_property_changes_recompile(change, expect):
    dynamo.reset()
    c = dynamo.compile(add_mul)
    base = torch.ones(3, 3)
    with Recorder() as rec:
        c(base, base)
        x = change(torch.ones(3, 3))
        assert same(c(x, x), add_mul(x, x))
    assert len(compiles(rec)) == 2
    assert expect in compiles(rec)[1]["reason"]


def test_constant_argument_is_guarded():
    def f(x, k):
        return x * k

    dynamo.reset()
    c = dynamo.compile(f)
    with Recorder() as rec:
        assert torch.equal(c(torch.ones(2), 2), torch.ones(2) * 2)
        assert torch.equal(c(torch.ones(2), 3), torch.ones(2) * 3)
        assert torch.equal(c(torch.ones(2), 2), torch.ones(2) * 2)
    assert len(compiles(rec)) == 2
    assert "'k'" in compiles(rec)[1]["reason"]


SCALE = 2.0


def uses_global(x):
    return x * SCALE


def test_global_rebinding_recompiles():
    global SCALE
    dynamo.reset()
    c = dynamo.compile(uses_global)
    SCALE = 2.0
    assert torch.equal(c(torch.ones(2)), torch.ones(2) * 2.0)
    SCALE = 5.0
    assert torch.equal(c(torch.ones(2)), torch.ones(2) * 5.0)
    SCALE = 2.0


def test_grad_mode_is_guarded():
    dynamo.reset()
    c = dynamo.compile(add_mul)
    x = torch.ones(2, requires_grad=True)
    out1 = c(x, x)
    with torch.no_grad():
        out2 = c(x, x)
    assert out1.requires_grad and not out2.requires_grad


def test_module_training_flag_is_guarded():
    m = torch.nn.Dropout(0.5)
    dynamo.reset()
    c = dynamo.compile(m)
    x = torch.ones(1000)
    m.eval()
    assert torch.equal(c(x), x)
    m.train()
    torch.manual_seed(0)
    y = c(x)
    assert (y == 0).any()


def test_cache_size_limit_runs_eagerly_with_one_warning():
    dynamo.reset()
    old = dynamo.config.cache_size_limit
    dynamo.config.cache_size_limit = 2
    try:
        def f(x, n):
            return x + n
        c = dynamo.compile(f)
        with warnings.catch_warnings(record=True) as caught, Recorder() as rec:
            warnings.simplefilter("always")
            for n in range(5):
                assert torch.equal(c(torch.ones(2), n), torch.ones(2) + n)
        assert len(compiles(rec)) == 2
        limit = [w for w in caught if "cache_size_limit" in str(w.message)]
        assert limit, [str(w.message) for w in caught]
        text = str(limit[0].message)
        assert "<locals>.f'" in text and "Last reason" in text and "'n'" in text
    finally:
        dynamo.config.cache_size_limit = old


def test_run_only_reuses_and_never_compiles():
    dynamo.reset()
    c = dynamo.compile(add_mul)
    c(torch.ones(3), torch.ones(3))
    r = dynamo.run(add_mul)
    with Recorder() as rec:
        assert torch.equal(r(torch.ones(3), torch.ones(3)), add_mul(torch.ones(3), torch.ones(3)))
        assert torch.equal(r(torch.ones(5), torch.ones(5)), add_mul(torch.ones(5), torch.ones(5)))
    assert rec.records == []


def test_disable_inside_compiled_region():
    calls = []

    @dynamo.disable
    def side(x):
        calls.append(1)
        return x + 1

    def f(x):
        return side(x) * 2

    dynamo.reset()
    with Recorder() as rec:
        out = dynamo.compile(f)(torch.ones(2))
    assert torch.equal(out, (torch.ones(2) + 1) * 2) and calls == [1]
    assert not any(r["function"].endswith("side") for r in compiles(rec))


def test_compiled_function_called_inside_a_compiled_region_is_traced_through():
    # The tracer knows dynamo.CompiledFunction by its type (set by the binding layer), not by
    # its name: a compile-mode wrapper is traced into, so f is one graph with g's ops.
    g = dynamo.compile(lambda x: x.sin())

    def f(x):
        return g(x) * 2

    dynamo.reset()
    with Recorder() as rec:
        out = dynamo.compile(f)(torch.ones(2))
    assert torch.equal(out, torch.ones(2).sin() * 2)
    (r,) = [r for r in compiles(rec) if r["function"].endswith("f")]
    assert r["breaks"] == [] and r["graphs"][0]["op_counts"] == {"torch.Tensor.sin": 1, "operator.mul": 1}


def test_optimize_as_context_manager_and_decorator():
    dynamo.reset()
    with Recorder() as rec:
        with dynamo.optimize("eager"):
            add_mul(torch.ones(2), torch.ones(2))

        @dynamo.optimize("eager")
        def g(x):
            return x.sin()
        assert torch.equal(g(torch.ones(2)), torch.ones(2).sin())
    assert {r["function"] for r in compiles(rec)} >= {"add_mul", "test_optimize_as_context_manager_and_decorator.<locals>.g"}


def test_reset_forgets_entries():
    dynamo.reset()
    c = dynamo.compile(add_mul)
    c(torch.ones(2), torch.ones(2))
    dynamo.reset()
    with Recorder() as rec:
        c(torch.ones(2), torch.ones(2))
    assert len(compiles(rec)) == 1


def test_compiled_module_keeps_parameters_and_state_dict():
    m = torch.nn.Linear(3, 3)
    c = dynamo.compile(m)
    assert c.weight is m.weight
    assert c.state_dict().keys() == m.state_dict().keys()
    assert same(c(torch.ones(1, 3)), m(torch.ones(1, 3)))


def test_threads_call_compiled_function():
    dynamo.reset()
    c = dynamo.compile(add_mul)
    errors = []
    inputs = [torch.full((4,), float(i)) for i in range(4)]

    def worker(i):
        try:
            for _ in range(200):
                out = c(inputs[i], inputs[i])
                if not torch.equal(out, add_mul(inputs[i], inputs[i])):
                    errors.append(i)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_no_reference_leak_over_100k_calls():
    dynamo.reset()
    c = dynamo.compile(add_mul)
    x, y = torch.ones(1), torch.ones(1)
    for _ in range(100):
        c(x, y)
    gc.collect()
    before_objects = len(gc.get_objects())
    before_x, before_y = sys.getrefcount(x), sys.getrefcount(y)
    for _ in range(100_000):
        c(x, y)
    gc.collect()
    assert sys.getrefcount(x) == before_x and sys.getrefcount(y) == before_y
    assert len(gc.get_objects()) - before_objects < 50


def test_user_backend_receives_graph_module_and_examples():
    seen = []

    def my_compiler(gm, example_inputs):
        seen.append((gm, example_inputs))
        return gm.forward

    dynamo.reset()
    c = dynamo.compile(add_mul, backend=my_compiler)
    x = torch.randn(3)
    assert torch.equal(c(x, x), add_mul(x, x))
    (gm, examples), = seen
    assert isinstance(gm, torch.fx.GraphModule)
    # x passed twice: one input per argument, so a later call with two tensors stays correct
    assert [n.op for n in gm.graph.nodes].count("placeholder") == 2
    assert examples[0] is x and examples[1] is x


def test_backend_that_raises_falls_back_with_one_warning():
    def broken(gm, example_inputs):
        raise ValueError("boom in backend")

    dynamo.reset()
    c = dynamo.compile(add_mul, backend=broken)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert torch.equal(c(torch.ones(2), torch.ones(2)), add_mul(torch.ones(2), torch.ones(2)))
        assert torch.equal(c(torch.ones(2), torch.ones(2)), add_mul(torch.ones(2), torch.ones(2)))
    msgs = [str(w.message) for w in caught if "dynamo" in str(w.message)]
    assert len(msgs) == 1 and "boom in backend" in msgs[0] and "add_mul" in msgs[0]


def test_backend_that_raises_propagates_without_suppress_errors():
    def broken(gm, example_inputs):
        raise ValueError("boom in backend")

    dynamo.reset()
    old = dynamo.config.suppress_errors
    dynamo.config.suppress_errors = False
    try:
        c = dynamo.compile(add_mul, backend=broken)
        with pytest.raises(dynamo.BackendCompilerFailed) as info:
            c(torch.ones(2), torch.ones(2))
        assert "boom in backend" in str(info.value) and "add_mul" in str(info.value)
        assert isinstance(info.value.__cause__, ValueError)
        assert str(info.value.__cause__) == "boom in backend"
    finally:
        dynamo.config.suppress_errors = old


def test_compile_of_a_non_callable_is_a_clear_error():
    with pytest.raises(dynamo.UserError) as info:
        dynamo.compile(42)
    assert "needs a function or an nn.Module, got int" in str(info.value)


def test_unknown_backend_lists_known_ones():
    with pytest.raises(dynamo.UserError) as info:
        dynamo.compile(add_mul, backend="inductor_typo")
    msg = str(info.value)
    assert "unknown backend 'inductor_typo'" in msg and "eager" in msg


def test_generators_are_left_alone():
    def gen(x):
        yield x + 1

    dynamo.reset()
    with Recorder() as rec:
        with dynamo.optimize("eager"):
            out = list(gen(torch.ones(2)))
    assert torch.equal(out[0], torch.ones(2) + 1)
    assert not any(r["function"].endswith("gen") for r in rec.records)


def test_registry_lists_backends():
    assert {"eager", "fx_eager"} <= set(dynamo.list_backends())


def test_dataclass_field_change_recompiles():
    import dataclasses

    @dataclasses.dataclass
    class C:
        k: float

    def f(x, c):
        return x * c.k

    dynamo.reset()
    cf = dynamo.compile(f)
    c = C(2.0)
    with Recorder() as rec:
        assert torch.equal(cf(torch.ones(2), c), torch.ones(2) * 2.0)
        c.k = 3.0
        assert torch.equal(cf(torch.ones(2), c), torch.ones(2) * 3.0)
    assert len(compiles(rec)) == 2
    assert "c.k" in compiles(rec)[1]["reason"]


def test_entries_still_run_after_the_cache_limit():
    dynamo.reset()
    old = dynamo.config.cache_size_limit
    dynamo.config.cache_size_limit = 2
    try:
        def g(x, n):
            return x * n
        c = dynamo.compile(g)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for n in range(4):
                c(torch.ones(2), n)
        hits = lambda: sum(e["hits"] for e in dynamo._C._compiler.cache_entries(g.__code__))
        before = hits()
        assert torch.equal(c(torch.ones(2), 1), torch.ones(2))  # matches the entry for n == 1
        assert hits() == before + 1
        assert torch.equal(c(torch.ones(2), 7), torch.ones(2) * 7)  # matches none: eager
        assert hits() == before + 1
    finally:
        dynamo.config.cache_size_limit = old


def test_same_tensor_twice_then_two_different_tensors():
    def f(a, b):
        a.add_(1)
        return a + b

    dynamo.reset()
    c = dynamo.compile(f)
    x = torch.zeros(3)
    xe = torch.zeros(3)
    assert torch.equal(c(x, x), f(xe, xe))          # aliased: b sees the in-place update
    y, z = torch.zeros(3), torch.ones(3)
    ye, ze = torch.zeros(3), torch.ones(3)
    assert torch.equal(c(y, z), f(ye, ze))          # not aliased: b is its own tensor
    assert torch.equal(y, ye) and torch.equal(z, ze)


def test_same_module_twice_then_different_modules():
    def f(m1, m2, x):
        return m1(x) + m2(x)

    dynamo.reset()
    c = dynamo.compile(f)
    a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    x = torch.ones(1, 2)
    assert torch.equal(c(a, a, x), f(a, a, x))
    assert torch.equal(c(a, b, x), f(a, b, x))


def test_compiled_module_is_a_module_for_parents_copies_and_pickle():
    import copy
    import pickle

    class Parent(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = torch.nn.Linear(3, 3)

        def forward(self, x):
            return self.enc(x).relu()

    p = Parent()
    keys = list(p.state_dict().keys())
    p.enc = dynamo.compile(p.enc)                      # assignable as a child module
    assert isinstance(p.enc, torch.nn.Module)
    assert list(p.state_dict().keys()) == keys         # no "_orig_mod." prefix
    x = torch.ones(2, 3)
    assert torch.equal(p(x), p.enc._orig_mod(x).relu())
    twin = copy.deepcopy(p)
    assert torch.equal(twin(x), p(x)) and twin.enc.weight is not p.enc.weight
    back = pickle.loads(pickle.dumps(p.enc))
    assert torch.equal(back(x), p.enc(x))
    p.eval()
    assert not p.enc._orig_mod.training
