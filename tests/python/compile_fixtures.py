"""Shared pytest fixtures of the tests that compile through dynamo and read its compile records.

A test file imports what it uses and names the reset fixture in its pytestmark:

    from compile_fixtures import compiled, fresh_dynamo, records  # noqa: F401  (fixtures)
    pytestmark = pytest.mark.usefixtures("fresh_dynamo")

    def test_x(records):
        ...
        assert len(compiled(records)) == 1
"""
import pytest

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
