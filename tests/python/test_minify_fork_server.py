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


def say(text):
    print(f"out: {text}", flush=True)
    print(f"err: {text}", file=sys.stderr, flush=True)


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


# Safety of the fork, and queries with their own environment (dynamo-bisect's runs).

from dynamo.minifier.fork_server import ForkUnsafe  # noqa: E402


def test_importing_torch_starts_no_thread_pool():
    # With OpenBLAS's own pool off, the server that imported torch (and dynamo) is one thread:
    # torch's intra-op pool is not started by the import, so forking it is safe.
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    with ForkServer(preload=["torch", "dynamo"], env=env) as s:
        assert s.ready_info["threads_required"] == 1
        assert s.ready_info["unsafe"] == ""
        assert s.query(f"{HERE}:add_tensors", 3).value == 6.0


def test_optional_preload_that_starts_a_thread_is_refused():
    s = ForkServer(preload=["torch"], optional=["fork_server_thread_at_import"])
    with pytest.raises(ForkUnsafe) as e:
        s.start()
    assert str(e.value) == ("importing fork_server_thread_at_import started 1 thread(s); "
                            "forking after that is unsafe")
    s.close()


def test_optional_preload_that_imports_a_forbidden_module_is_refused():
    s = ForkServer(preload=["torch"], optional=["fork_server_env_at_import"],
                   forbid=["fork_server_env_at_import"])
    with pytest.raises(ForkUnsafe) as e:
        s.start()
    assert str(e.value) == "importing fork_server_env_at_import imported fork_server_env_at_import"
    s.close()


def test_optional_preload_that_fails_is_skipped():
    with ForkServer(preload=["torch"], optional=["no_such_module_here"]) as s:
        assert s.ready_info["skipped"] == ["no_such_module_here"]
        assert s.query(f"{HERE}:add_tensors", 2).value == 2.0


def test_query_environment_is_applied_before_the_target_is_imported():
    env = {k: v for k, v in os.environ.items() if k != "FORK_SERVER_TEST_VALUE"}
    with ForkServer(preload=["torch"], env=env) as s:
        r = s.query_with_env(dict(env, FORK_SERVER_TEST_VALUE="run 1"),
                             "fork_server_env_at_import:value")
        assert r.value == "run 1"
        r = s.query_with_env(dict(env, FORK_SERVER_TEST_VALUE="run 2"),
                             "fork_server_env_at_import:value")
        assert r.value == "run 2"
        assert s.query("fork_server_env_at_import:value").value is None


def test_script_imports_are_the_installed_ones(tmp_path):
    from dynamo.minifier.script_runner import script_imports
    (tmp_path / "helper.py").write_text("X = 1\n")
    script = tmp_path / "s.py"
    script.write_text("import torch, helper\nimport dynamo\nfrom torch import nn\n"
                      "from . import x\nimport no_such_module_here\n"
                      "def f():\n    import json\n")
    assert script_imports(str(script)) == ["torch"]


# The failure fingerprint of query results.

from dynamo.minifier import fingerprint, mask_message  # noqa: E402


def test_innermost_dynamo_frame():
    from dynamo.minifier.fingerprint import innermost_dynamo_frame
    tb = (
        'Traceback (most recent call last):\n'
        '  File "/home/u/script.py", line 3, in <module>\n'
        '  File "/x/python/dynamo/eval_frame.py", line 120, in _compile\n'
        '  File "/x/python/dynamo/backends.py", line 88, in compile_graph\n'
        '  File "/home/u/mybackend.py", line 9, in my_backend\n'
        'RuntimeError: boom\n')
    assert innermost_dynamo_frame(tb) == "dynamo/backends.py:compile_graph"
    assert innermost_dynamo_frame("no frames") == ""


def test_mask_message():
    assert mask_message("size 64 at 0x7ffe12, tol 1.5e-3") == "size N at ADDR, tol N"
    assert mask_message("conv2d_3 failed") == "conv2d_3 failed"
    # A C++ compiler's echo of the line it stopped at changes with the graph; its error does not.
    gcc = ("/tmp/k.cpp:131:22: error: 'dyn_bad' was not declared in this scope\n"
           "  131 |   b1[0LL] = dyn_bad(dyn_tanh(b0[0LL]));\n"
           "      |             ^~~~~~~\n"
           "This is a bug in Dynamo")
    assert mask_message(gcc) == ("PATH:N:N: error: 'dyn_bad' was not declared in this scope\n"
                                 "This is a bug in Dynamo")


def test_same_failure_with_other_numbers_has_the_same_fingerprint(server):
    a = fingerprint(server.query(f"{HERE}:raise_value_error", "bad op 3 at 0x10"))
    b = fingerprint(server.query(f"{HERE}:raise_value_error", "bad op 17 at 0xff"))
    c = fingerprint(server.query(f"{HERE}:raise_value_error", "other failure"))
    assert a == b
    assert a != c
    assert a.describe() == "builtins.ValueError: bad op N at ADDR"


def test_crash_fingerprint_is_its_signal(server):
    seg = fingerprint(server.query(f"{HERE}:segfault"))
    ab = fingerprint(server.query(f"{HERE}:abort"))
    assert seg.describe() == "crash (SIGSEGV)"
    assert ab.describe() == "crash (SIGABRT)"
    assert seg != ab


def test_passing_query_has_no_fingerprint(server):
    assert fingerprint(server.query(f"{HERE}:add_tensors", 2)) is None


# The run server of dynamo-bisect (script_runner.py): its queries (the node step), and the same
# server forked from the tool (fork_server.Zygote) instead of started.

def test_run_server_queries_are_isolated_and_leave_the_server_without_dynamo(tmp_path):
    from dynamo.minifier.script_runner import ForkRunner
    script = tmp_path / "s.py"
    script.write_text("import torch\n")
    log = str(tmp_path / "queries.log")
    runner = ForkRunner(str(script), dict(os.environ)).start()
    try:
        assert runner.query(f"{HERE}:add_tensors", 4, log_path=log).value == 12.0
        r = runner.query(f"{HERE}:segfault", log_path=log)
        assert (r.kind, r.signal) == ("crash", signal.SIGSEGV)
        assert runner.query(f"{HERE}:hang", log_path=log, timeout=1.0).kind == "timeout"
        r = runner.query(f"{HERE}:raise_value_error", "in the log", log_path=log)
        assert (r.kind, r.message) == ("exception", "in the log")
        # The queries imported dynamo in their children (the test module, script_runner); the
        # server they were forked from never did, and it still answers.
        assert runner.server.query("sys:modules.__contains__", "dynamo").value is False
        assert runner.server.query("sys:modules.__contains__", "torch").value is True
        assert runner.query(f"{HERE}:add_tensors", 2, log_path=log).value == 2.0
    finally:
        runner.close()


ZYGOTE_SCRIPT = r"""
import importlib.util, os, signal, sys
spec = importlib.util.spec_from_file_location("_dynamo_fork_server", sys.argv[1])
fs = sys.modules["_dynamo_fork_server"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fs)
unused = fs.Zygote.fork(["torch"])
unused.close()                  # never adopted: ended and waited for (no zombie left)
try:
    os.waitpid(unused.pid, os.WNOHANG)
    print("unused not reaped")
except ChildProcessError:
    print("unused reaped")
z = fs.Zygote.fork(["torch"])   # torch imported here, before dynamo, as cli/dynamo-bisect does
assert "dynamo" not in sys.modules
from dynamo.minifier.fork_server import ForkServer, ForkUnsafe
env = {k: v for k, v in os.environ.items() if k != "FORK_SERVER_TEST_VALUE"}
env["PYTHONPATH"] = os.pathsep.join(sys.path)
with ForkServer(preload=["torch"], optional=["no_such_module_here"], forbid=["dynamo"],
                env=env, zygote=z) as s:
    assert s.ready_info["unsafe"] == "" and s.ready_info["skipped"] == ["no_such_module_here"]
    print("pid", s._proc.pid == z.pid)
    print("ok", s.query("test_minify_fork_server:add_tensors", 4).value)
    print("segv", s.query("test_minify_fork_server:segfault").signal == signal.SIGSEGV)
    print("timeout", s.query("test_minify_fork_server:hang", timeout=1.0).kind)
    print("env", s.query_with_env(dict(env, FORK_SERVER_TEST_VALUE="x"),
                                  "fork_server_env_at_import:value").value)
    print("dynamo in server", s.query("sys:modules.__contains__", "dynamo").value)
z3 = fs.Zygote.fork(["torch"])  # a log as stderr (dynamo-minify's queries.log): opened by name there
log = open("queries.log", "ab")
with ForkServer(preload=["torch"], env=env, stderr=log, zygote=z3) as s:
    s.query("test_minify_fork_server:say", "to the log")
log.close()
print("log", repr(open("queries.log").read()))
z2 = fs.Zygote.fork(["torch"])
try:
    ForkServer(preload=["torch"], optional=["fork_server_thread_at_import"], zygote=z2).start()
except ForkUnsafe as e:
    print("unsafe", e)
"""


def test_zygote_forked_from_the_tool_serves_as_a_started_server(tmp_path):
    import subprocess
    from dynamo.minifier import fork_server
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.run([sys.executable, "-c", ZYGOTE_SCRIPT, fork_server.__file__], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "unused reaped", "pid True", "ok 12.0", "segv True", "timeout timeout", "env x",
        "dynamo in server False", r"log 'out: to the log\nerr: to the log\n'",
        "unsafe importing fork_server_thread_at_import started 1 thread(s); forking after that "
        "is unsafe"]
