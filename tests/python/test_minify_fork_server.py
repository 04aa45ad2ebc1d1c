"""dynamo.minifier.ForkServer: minifier queries isolated in forks of a server that imported torch.

A query's exception, a segfault, an abort, an exit and a hang are each a result; the server
survives all of them and answers the next query.
"""
import os
import signal
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from dynamo.minifier import ForkServer  # noqa: E402

HERE = "test_minify_fork_server"


def add_tensors(n):
    import torch
    return (torch.arange(n, dtype=torch.float64) * 2).sum().item()


def raise_value_error(msg):
    raise ValueError(msg)


def segfault():
    import ctypes
    ctypes.string_at(0)


def abort():
    os.abort()


def hang():
    import time
    time.sleep(60)


def exit_early():
    os._exit(3)


def torch_already_imported():
    return "torch" in sys.modules


@pytest.fixture(scope="module")
def server():
    with ForkServer(preload=["torch", HERE]) as s:
        yield s


def test_ok_result_is_returned(server):
    r = server.query(f"{HERE}:add_tensors", 4)
    assert r.kind == "ok" and not r.failed
    assert r.value == 12.0


def test_torch_is_imported_before_the_fork(server):
    assert server.query(f"{HERE}:torch_already_imported").value is True


def test_exception_is_a_result(server):
    r = server.query(f"{HERE}:raise_value_error", "bad op at 0x7f00")
    assert r.kind == "exception"
    assert r.exc_type == "builtins.ValueError"
    assert r.message == "bad op at 0x7f00"
    assert "raise_value_error" in r.traceback


def test_segfault_is_a_result_and_the_server_survives(server):
    r = server.query(f"{HERE}:segfault")
    assert r.kind == "crash" and r.signal == signal.SIGSEGV
    assert server.query(f"{HERE}:add_tensors", 2).value == 2.0


def test_abort_is_a_result(server):
    r = server.query(f"{HERE}:abort")
    assert r.kind == "crash" and r.signal == signal.SIGABRT


def test_exit_is_a_result(server):
    r = server.query(f"{HERE}:exit_early")
    assert r.kind == "exit" and r.exit_code == 3


def test_hang_is_a_timeout(server):
    r = server.query(f"{HERE}:hang", timeout=0.5)
    assert r.kind == "timeout"
    assert server.query(f"{HERE}:add_tensors", 3).value == 6.0


def test_query_count(server):
    before = server.queries
    server.query(f"{HERE}:add_tensors", 1)
    assert server.queries == before + 1
