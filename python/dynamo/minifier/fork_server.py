"""A fork server for isolated minifier queries.

The server is a separate interpreter that imports torch (and any modules the
caller names) once, then waits for requests on a pipe. Each request names a
function by "module:qualname" and carries pickled arguments; the server forks,
the child runs the function and writes back its pickled return value or the
exception it raised, and the server reports how the child ended. A child killed
by a signal (segfault, abort) or running past the timeout is reported as such.

The server itself never runs a query, so torch's thread pools are never started
in the process that forks (forking after they start is unsafe). The server is
started from this file alone (not as dynamo.minifier.fork_server), so the dynamo
package is imported in it only when the caller preloads it; a request may carry
an environment that replaces the server's in the child before the target is
imported (dynamo-bisect's runs: dynamo reads DYNAMO_* variables at import).

Preloads: required modules (an import error stops the server), warm ones (torch
modules the children would otherwise each import on their own: an import error is
ignored), optional ones (the script's own imports: an import error is ignored)
and forbidden ones. The server refuses to serve (ForkUnsafe) when the warm or
optional imports started a native thread (a torch op run at import starts the
intra-op pool) or imported a forbidden module. The threads the required imports
start are known to survive a fork: importing torch starts only OpenBLAS's pool,
which shuts itself down in a child (pthread_atfork); torch's own intra-op pool
starts at the first parallel op, never at import.
"""
from __future__ import annotations

import dataclasses
import importlib
import os
import pickle
import signal
import struct
import subprocess
import sys
import traceback
from typing import Any, Optional

_HEADER = struct.Struct("!Q")


def _send(stream, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)))
    stream.write(data)
    stream.flush()


def _recv(stream):
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    data = stream.read(size)
    if len(data) < size:
        return None
    return pickle.loads(data)


class ForkUnsafe(RuntimeError):
    """The server's warm or optional preloads made forking unsafe (the message says how)."""


@dataclasses.dataclass
class QueryResult:
    """How one query ended.

    kind: "ok" (value holds the return value), "exception" (exc_type,
    message and traceback hold the exception), "crash" (signal holds the
    signal number: the child died), "exit" (exit_code: the child called
    exit), or "timeout".
    """

    kind: str
    value: Any = None
    exc_type: str = ""
    message: str = ""
    traceback: str = ""
    signal: int = 0
    exit_code: int = 0

    @property
    def failed(self) -> bool:
        return self.kind != "ok"


def _resolve(target: str):
    module_name, _, qualname = target.partition(":")
    obj = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _run_child(target: str, args: tuple, kwargs: dict, write_fd: int) -> None:
    with os.fdopen(write_fd, "wb") as out:
        try:
            value = _resolve(target)(*args, **kwargs)
            reply = {"kind": "ok", "value": value}
        except BaseException as exc:  # the query's own failure is its result
            reply = {
                "kind": "exception",
                "exc_type": f"{type(exc).__module__}.{type(exc).__qualname__}",
                "message": str(exc),
                "traceback": traceback.format_exc(),
            }
        try:
            _send(out, reply)
        except Exception as exc:  # unpicklable value
            _send(out, {"kind": "exception", "exc_type": "pickle.PicklingError",
                        "message": f"query result is not picklable: {exc}",
                        "traceback": ""})


def _serve_one(request: dict) -> dict:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        code = 0
        try:
            if request.get("env") is not None:
                os.environ.clear()
                os.environ.update(request["env"])
            _run_child(request["target"], request["args"], request["kwargs"], write_fd)
        except BaseException:
            code = 70
        os._exit(code)
    os.close(write_fd)
    timeout = request.get("timeout")
    timed_out = False
    if timeout:
        def on_alarm(signum, frame):
            raise TimeoutError
        old = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        with os.fdopen(read_fd, "rb") as inp:
            reply = _recv(inp)
        _, status = os.waitpid(pid, 0)
    except TimeoutError:
        timed_out = True
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        reply = None
    finally:
        if timeout:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
    if timed_out:
        return {"kind": "timeout"}
    if os.WIFSIGNALED(status):
        return {"kind": "crash", "signal": os.WTERMSIG(status)}
    if reply is None:
        return {"kind": "exit", "exit_code": os.WEXITSTATUS(status)}
    return reply


def native_threads() -> int:
    """The threads of this process (Linux: /proc/self/task), or Python's where that is missing."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        import threading
        return threading.active_count()


def _preload(names) -> dict:
    """Imports the preloads (argv: `name` required, `~name` warm, `?name` optional, `!name`
    forbidden); the ready message: threads after the required and after all imports, and why
    forking is unsafe ("" when it is safe)."""
    required = [n for n in names if n[0] not in "?!~"]
    checked = [n[1:] for n in names if n[0] in "~?"]   # warm, then optional (argv order)
    forbidden = [n[1:] for n in names if n[0] == "!"]
    for name in required:
        importlib.import_module(name)
    base = native_threads()
    skipped = []
    for name in checked:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the run itself will meet the error
            skipped.append(name)
    threads = native_threads()
    unsafe = ""
    if threads > base:
        unsafe = (f"importing {', '.join(checked)} started {threads - base} thread(s); forking "
                  f"after that is unsafe")
    hit = [n for n in forbidden if n in sys.modules]
    if hit:
        unsafe = f"importing {', '.join(checked)} imported {', '.join(hit)}"
    return {"ready": True, "threads_required": base, "threads": threads, "skipped": skipped,
            "unsafe": unsafe}


def _serve(names, inp, out) -> None:
    """Preloads names, says ready, then answers requests until inp ends."""
    ready = _preload(names)
    _send(out, ready)
    if ready["unsafe"]:
        return
    while True:
        request = _recv(inp)
        if request is None:
            return
        _send(out, _serve_one(request))


def _server_main() -> None:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    # Queries print freely; the protocol owns the real stdout.
    proto_out = os.fdopen(os.dup(stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), stdout.fileno())
    _serve(sys.argv[1:], stdin, proto_out)


class Zygote:
    """A server forked from the calling process instead of started as a fresh interpreter: the
    tool imports torch once and the server shares that import (cli/dynamo-bisect and
    cli/dynamo-minify fork it before anything imports dynamo). The fork waits for its first
    message, the preloads, the environment and the log file (the ForkServer's stderr, where the
    queries' output goes) of a ForkServer that adopts it (ForkServer(zygote=...)), then serves as
    a started server does; it exits when its input ends, unused or not.

        tool: import torch --fork--> zygote (torch imported; waits)
        tool: import dynamo, parse argv, ...
        tool: ForkServer(zygote=z).start() --{preload, env, log}--> zygote: warm/script imports,
                                                                   ready
    """

    #: The tool's ends of the pipes of the zygotes forked so far: a later zygote closes them, or
    #: an earlier one would never see its input end (cli/dynamo-minify forks two).
    _tool_fds: set = set()

    def __init__(self, pid, stdin, stdout):
        self.pid, self.stdin, self.stdout = pid, stdin, stdout
        self.adopted = False   # a ForkServer owns it (and ends it)

    @classmethod
    def fork(cls, preload=("torch",)) -> "Optional[Zygote]":
        """Imports preload here, then forks the zygote; None where os.fork is missing."""
        for name in preload:
            importlib.import_module(name)
        if not hasattr(os, "fork"):
            return None
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(req_w)
            os.close(rep_r)
            for fd in cls._tool_fds - {req_r, rep_w}:   # a closed zygote's numbers are reused
                try:
                    os.close(fd)
                except OSError:
                    pass
            code = 0
            try:
                inp, out = os.fdopen(req_r, "rb"), os.fdopen(rep_w, "wb")
                os.dup2(2, 1)   # queries print freely; the protocol has its own pipe
                first = _recv(inp)
                if first is not None and first.get("log"):
                    # The queries' output, as a started server's stderr (ForkServer(stderr=)).
                    log = os.open(first["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                    os.dup2(log, 1)
                    os.dup2(log, 2)
                    os.close(log)
                if first is not None:
                    os.environ.clear()
                    os.environ.update(first["env"])
                    _serve(first["preload"], inp, out)
            except BaseException:  # noqa: BLE001 - the tool sees the pipe end
                code = 70
            os._exit(code)
        os.close(req_r)
        os.close(rep_w)
        cls._tool_fds.update((req_w, rep_r))
        return cls(pid, os.fdopen(req_w, "wb"), os.fdopen(rep_r, "rb"))

    def wait(self) -> int:
        _, status = os.waitpid(self.pid, 0)
        return os.waitstatus_to_exitcode(status)

    def close(self) -> None:
        """Ends the zygote when no ForkServer adopted it."""
        if not self.adopted and self.stdin is not None:
            self.stdin.close()
            self.stdout.close()
            self.stdin = None
            self.wait()


class ForkServer:
    """Runs queries isolated in children of a server that has imported torch.

    >>> with ForkServer(preload=["torch"]) as server:
    ...     r = server.query("mymod:check", graph_json, inputs)
    """

    def __init__(self, preload=("torch",), python: Optional[str] = None,
                 env: Optional[dict] = None, stderr=None, optional=(), forbid=(), warm=(),
                 zygote: Optional[Zygote] = None):
        self._preload = [*preload, *("~" + n for n in warm), *("?" + n for n in optional),
                         *("!" + n for n in forbid)]
        self._python = python or sys.executable
        self._env = env
        self._stderr = stderr    # where the queries' output goes (default: inherited)
        self._zygote = zygote    # a forked server to use instead of starting one (once)
        self._proc = None        # subprocess.Popen, or the adopted Zygote
        self._ready = False
        self.queries = 0
        self.ready_info: dict = {}   # the server's ready message (threads, skipped, unsafe)

    def launch(self) -> "ForkServer":
        """Starts the server process without waiting for it to import torch (start() or the
        first query waits): the caller can do other work meanwhile."""
        if self._proc is None:
            self._spawn()
        return self

    def start(self) -> "ForkServer":
        if self._proc is None:
            self._spawn()
        if not self._ready:
            self._wait_ready()
        return self

    def _spawn(self) -> None:
        self._ready = False
        env = dict(os.environ if self._env is None else self._env)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in [*sys.path, env.get("PYTHONPATH", "")] if p)
        if self._zygote is not None:
            self._proc, self._zygote = self._zygote, None
            self._proc.adopted = True
            # A file given as stderr (the queries' output) is opened again by name there.
            log = getattr(self._stderr, "name", None)
            _send(self._proc.stdin, {"preload": self._preload, "env": env,
                                     "log": os.path.abspath(log) if isinstance(log, str) else None})
            return
        # This file alone, under a private name: `import dynamo.minifier.fork_server` would import
        # the dynamo package into the server. The protocol is pickled dicts, no class of it.
        self._proc = subprocess.Popen(
            [self._python, "-c",
             "import sys, importlib.util as u; "
             "s = u.spec_from_file_location('_dynamo_fork_server', sys.argv[1]); "
             "m = sys.modules['_dynamo_fork_server'] = u.module_from_spec(s); "
             "s.loader.exec_module(m); "
             "sys.argv[1:2] = []; m._server_main()",
             os.path.abspath(__file__), *self._preload],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, env=env)

    def _wait_ready(self) -> None:
        ready = _recv(self._proc.stdout)
        if not ready:
            code = self._proc.wait()
            self._proc = None
            raise RuntimeError(f"the minifier's fork server did not start (exit code {code})")
        self.ready_info = ready
        if ready.get("unsafe"):
            self.close_process()
            raise ForkUnsafe(ready["unsafe"])
        self._ready = True

    def query(self, target: str, *args, timeout: Optional[float] = None,
              **kwargs) -> QueryResult:
        """Runs target ("module:qualname") with args in a fresh fork."""
        return self.query_with_env(None, target, *args, timeout=timeout, **kwargs)

    def query_with_env(self, env: Optional[dict], target: str, *args,
                       timeout: Optional[float] = None, **kwargs) -> QueryResult:
        """As query, the child's os.environ replaced by env (when not None) before target's
        module is imported."""
        self.start()
        _send(self._proc.stdin, {"target": target, "args": args, "kwargs": kwargs,
                                 "timeout": timeout, "env": env})
        reply = _recv(self._proc.stdout)
        if reply is None:
            self._proc = None
            raise RuntimeError("the minifier's fork server died")
        self.queries += 1
        return QueryResult(**reply)

    def close_process(self) -> None:
        if self._proc is not None:
            self._proc.stdin.close()
            self._proc.wait()
            self._proc = None

    def close(self) -> None:
        if self._zygote is not None:   # never started: the zygote ends unused
            self._zygote.close()
            self._zygote = None
        if self._proc is not None:
            self._proc.stdin.close()
            self._proc.wait()
            self._proc = None
            self._ready = False

    def __enter__(self) -> "ForkServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
