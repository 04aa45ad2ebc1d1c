"""The Backend interface (core/include/dynamo/core/backend.h) and backends.def: the C++ "eager"
backend and Python callables behind one interface, names from the .def."""
import pytest
import torch

import dynamo
from dynamo import _C


@pytest.fixture(autouse=True)
def _fresh():
    dynamo.reset()
    yield
    dynamo.reset()


def test_list_backends_comes_from_the_def_and_the_registry():
    native = dict(_C._compiler.backend_list())
    assert list(native)[0] == "eager" and "C++ graph runner" in native["eager"]
    assert {"aot_eager", "aot_eager_default_partitioner", "aot_eager_decomp_partition", "fused"} <= set(native)
    assert {"eager", "fx_eager"} <= set(dynamo.list_backends())


@pytest.mark.parametrize("backend", ["eager", "fx_eager", lambda gm, ex: gm.forward])
def test_every_kind_of_backend_matches_eager(backend):
    def f(x, y):
        return (x @ y).relu() + 1

    x, y = torch.randn(3, 4), torch.randn(4, 2)
    assert torch.equal(dynamo.compile(f, backend=backend)(x, y), f(x, y))


def test_side_effects_before_a_failing_node_with_a_callable_backend():
    # A Python backend cannot say which node failed: the effects before the first node apply.
    log = []

    def f(x, idx):
        log.append("before any op")
        y = x * 2
        return y[idx]

    c = dynamo.compile(f, backend=lambda gm, ex: gm.forward)
    with pytest.raises(IndexError):
        c(torch.ones(3), torch.tensor(5))
    assert log == ["before any op"]


def test_unknown_backend_names_the_known_ones():
    with pytest.raises(dynamo.UserError) as e:
        dynamo.compile(lambda x: x, backend="eagre")
    assert "unknown backend 'eagre'" in str(e.value) and "eager" in str(e.value)
