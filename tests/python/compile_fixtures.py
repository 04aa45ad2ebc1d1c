"""Shared pytest fixtures of the tests that compile through dynamo and read its compile records.

A test file imports what it uses and names the reset fixture in its pytestmark:

    from compile_fixtures import compiled, fresh_dynamo, records  # noqa: F401  (fixtures)
    pytestmark = pytest.mark.usefixtures("fresh_dynamo")

    def test_x(records):
        ...
        assert len(compiled(records)) == 1

check_over_sizes() is the dynamic-shape tests' loop (test_dynamic_shape_reads.py,
test_dynamic_model_code.py): one program over many sizes against eager, then its compile count.
"""
import pytest
import torch

import dynamo


@pytest.fixture
def fresh_dynamo():
    """dynamo.reset() before and after the test; config.automatic_dynamic_shapes restored after it."""
    dynamo.reset()
    saved = dynamo.config.automatic_dynamic_shapes
    yield
    dynamo.config.automatic_dynamic_shapes = saved
    dynamo.reset()


@pytest.fixture
def records():
    """The compile records (dicts) of the compiles the test makes, in order."""
    got = []
    dynamo.add_compile_listener(got.append)
    yield got
    dynamo.remove_compile_listener(got.append)


def compiled(records):
    """The records of compiles that made a graph (status "compiled")."""
    return [r for r in records if r["status"] == "compiled"]


def check_over_sizes(records, name, fn, inputs, sizes, backend, dynamic, automatic_compiles, no_grad=True):
    """Compiles fn (a function or module) with backend and dynamic (None: automatic dynamic),
    calls it on inputs(t) for every t of sizes (under torch.no_grad() when no_grad) and compares
    with eager: bitwise for eager and aot_eager, rtol 1e-4 / atol 1e-5 for fused. Then the
    compiles: one under dynamic=True; under automatic dynamic, a count in automatic_compiles (a
    tuple of the counts allowed)."""
    kw = {} if dynamic is None else {"dynamic": dynamic}
    cf = dynamo.compile(fn, backend=backend, **kw)
    for t in sizes:
        args = inputs(t)
        with torch.set_grad_enabled(not no_grad):
            want, got = fn(*args), cf(*args)
        if backend == "fused":
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, msg=f"{name} at {t}")
        else:
            assert torch.equal(got, want), (name, t)
    statuses = [r["status"] for r in records]
    why = [(r.get("reason"), r.get("dynamic_shapes")) for r in records]
    if dynamic:
        assert statuses == ["compiled"], why
    else:
        assert statuses in [["compiled"] * n for n in automatic_compiles], why
