"""A stand-in for `python` in the tools' end-to-end tests: a server that imported torch once forks
a child per invocation, so that a test that starts 20 Python programs pays for one torch import
(about 1 s of CPU on stack 1, 3 s on stack 2), not 20 (docs/stacks.md, "The tools' tests: forked Python children").

    test --argv, env, cwd, fds 0-2--> launcher (python -S, no torch)  --unix socket--> server
                                                                                          |
                                       handler (fork per request) <------------------------+
                                          |-- fork --> child: fds, cwd, env, sys.path, argv;
                                          |            runs the script as __main__, then the
                                          |            interpreter exits as a fresh one does
                                          <-- wait status (exit code or killing signal) --
    launcher exits with that code, or kills itself with that signal

`launcher()` is the path of an executable that takes `python`'s command line: `script.py args`,
`-m module args` or `-c code args` (the forms the tests use). The child behaves as a fresh
process for what the tests check: exit code or signal, stdout/stderr (its fds are the
launcher's own, passed over the socket), files, the trace store, atexit hooks and thread joins
(the child leaves the server's loop and ends as `python` does). dynamo is never imported in the
server (it reads DYNAMO_* at import), and tempfile and random reseed in a fork. Anything else
runs the real interpreter (the launcher execs it): interpreter options (`-X faulthandler`), or an
environment that differs from the one the server started with outside DYNAMO_*, MINIFY_* and PYTHONPATH (torch
read the server's at import). PYFORK=0 in the tests' environment turns the server off.

The fork-safety checks are fork_server.py's (python/dynamo/minifier/), loaded from that file
alone: the server refuses to start when its imports started a thread or imported dynamo.
"""
import os
import pickle
import socket
import struct
import sys

_SELF = os.path.abspath(__file__)
HERE = os.path.dirname(_SELF)
_HEADER = struct.Struct("!Q")
# torch's modules a compile imports on first use (python/dynamo/minifier/script_runner.py WARM).
WARM = ("torch._functorch.aot_autograd", "functorch", "torch.fx.passes.shape_prop")
# Variables that may differ between the server and a forked child: nothing the server imported
# reads them (DYNAMO_*: dynamo, never imported there; MINIFY_*: the tests' minify_faults.py).
# PYTEST_CURRENT_TEST names the running test (the server started in an earlier one); LINES and
# COLUMNS are what readline exports to the C environment when pytest imports it: a child process
# started without env= inherits them, os.environ does not show them.
_FREE = ("PYTHONPATH", "PWD", "OLDPWD", "_", "PYTEST_CURRENT_TEST", "LINES", "COLUMNS")
_FREE_PREFIXES = ("DYNAMO_", "MINIFY_")


def _send(sock, obj, fds=()):
    data = pickle.dumps(obj)
    msg = _HEADER.pack(len(data)) + data
    if fds:
        socket.send_fds(sock, [msg], list(fds))
    else:
        sock.sendall(msg)


def _recv_exact(sock, n, fds_wanted=0):
    buf, fds = b"", []
    while len(buf) < n:
        if fds_wanted and not fds:
            chunk, fds, _, _ = socket.recv_fds(sock, n - len(buf), fds_wanted)
        else:
            chunk = sock.recv(n - len(buf))
        if not chunk:
            return None, fds
        buf += chunk
    return buf, fds


def _recv(sock, fds_wanted=0):
    header, fds = _recv_exact(sock, _HEADER.size, fds_wanted)
    if header is None:
        return None, fds
    data, _ = _recv_exact(sock, _HEADER.unpack(header)[0])
    return (None if data is None else pickle.loads(data)), fds


# ---- the launcher (no torch; started as `python -S launcher`) -----------------------------------

def client_main(sock_path, python, argv):
    """Runs argv (python's command line less the interpreter) in a fork of the server at
    sock_path; execs python itself when the server says so or cannot be reached."""
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(sock_path)
        _send(sock, {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}, fds=(0, 1, 2))
        reply, _ = _recv(sock)
    except OSError:
        reply = None
    if not reply or "status" not in reply:
        os.execv(python, [python, *argv])
    status = reply["status"]
    if os.WIFSIGNALED(status):
        import signal
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    return os.waitstatus_to_exitcode(status)


# ---- the server ---------------------------------------------------------------------------------

def _fork_safety():
    import importlib.util
    path = os.path.join(os.environ.get("DYNAMO_SOURCE_DIR") or os.path.join(HERE, "..", ".."),
                        "python", "dynamo", "minifier", "fork_server.py")
    spec = importlib.util.spec_from_file_location("_pyfork_fork_server", path)
    mod = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# In the server: the variables its imports set in os.environ, with their values. A request may
# carry them with these values too (its sender imported torch as well, e.g. the test process).
_set_by_imports = {}


def _why_not(request, base_env):
    """Why the request needs the real interpreter ("" when a fork will do)."""
    argv = request["argv"]
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-m", "-c")) or \
            (argv[0] in ("-m", "-c") and len(argv) < 2):
        return "interpreter options"
    env = request["env"]
    for key in set(env) | set(base_env):
        if not key.startswith(_FREE_PREFIXES) and key not in _FREE and \
                env.get(key) != base_env.get(key) and \
                (key not in _set_by_imports or env[key] != _set_by_imports[key]):
            return f"{key} differs"
    return ""


def _wait_child(pid, conn):
    """The child's wait status; kills it when the launcher goes away first."""
    import select
    pidfd = os.pidfd_open(pid)
    while True:
        ready, _, _ = select.select([pidfd, conn], [], [])
        if conn in ready and not conn.recv(1, socket.MSG_PEEK):
            os.kill(pid, 9)
        if pidfd in ready or conn in ready:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                os.close(pidfd)
                return status


def _handle(conn, base_env):
    """In the handler process: the request, or None after it was answered."""
    request, fds = _recv(conn, fds_wanted=3)
    if request is None or len(fds) != 3:
        return None
    why = _why_not(request, base_env)
    if why:
        _send(conn, {"exec": why})
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        for i, fd in enumerate(fds):
            os.dup2(fd, i)
        for fd in fds:
            os.close(fd)
        conn.close()
        return request
    for fd in fds:
        os.close(fd)
    _send(conn, {"status": _wait_child(pid, conn)})
    return None


def _serve(sock_path, base_env):
    """Accepts requests until stdin ends (then waits for the handlers still running); returns the
    request in a child. The handlers are waited for so that their CPU time (their children's
    included) counts in the test's, as a fresh interpreter's would."""
    import select
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sock_path)
    listener.listen(64)
    print("ready", flush=True)
    handlers = set()
    while True:
        ready, _, _ = select.select([listener, sys.stdin], [], [])
        for pid in list(handlers):
            if os.waitpid(pid, os.WNOHANG)[0]:
                handlers.discard(pid)
        if sys.stdin in ready and not os.read(sys.stdin.fileno(), 1):
            for pid in handlers:
                os.waitpid(pid, 0)
            return None
        if listener not in ready:
            continue
        conn, _ = listener.accept()
        pid = os.fork()
        if pid:
            handlers.add(pid)
            conn.close()
            continue
        listener.close()
        code, request = 70, None
        try:
            request = _handle(conn, base_env)
            if request is not None:
                return request   # the child: leaves the loop
            code = 0
        finally:
            if request is None:
                os._exit(code)


def _base_path():
    """sys.path without its script entry and the server's PYTHONPATH entries: a child's sys.path
    is its own first entry and PYTHONPATH before these."""
    own = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return [p for p in sys.path[1:] if p not in own]


def _become(request, base_path, set_by_imports):
    """In the child: the environment, directory, sys.path and argv of `python argv`.
    set_by_imports: the variables the server's imports set in os.environ (torch 2.x's
    TORCHINDUCTOR_CACHE_DIR), set again as the same imports in a fresh interpreter would."""
    import importlib
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ.update(set_by_imports)
    os.chdir(request["cwd"])
    argv = request["argv"]
    if argv[0] == "-c":
        first, sys.argv = "", ["-c", *argv[2:]]
    elif argv[0] == "-m":
        first, sys.argv = os.getcwd(), ["-m", *argv[2:]]
    else:
        first, sys.argv = os.path.dirname(os.path.abspath(argv[0])), list(argv)
    extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [first, *extra, *base_path]
    sys.orig_argv = [sys.executable, *argv]
    importlib.invalidate_caches()


def _run(argv):
    """Runs argv's code as __main__, as `python` would."""
    import builtins
    import runpy
    import types
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    sys.modules["__main__"] = main   # not this file's module: `-m` runs in __main__'s dict
    if argv[0] == "-m":
        runpy._run_module_as_main(argv[1], alter_argv=True)
        return
    if argv[0] == "-c":
        code = compile(argv[1], "<string>", "exec")
    else:
        import importlib.machinery
        path = os.path.abspath(argv[0])
        main.__file__, main.__cached__ = path, None
        main.__loader__ = importlib.machinery.SourceFileLoader("__main__", path)
        with open(path, "rb") as f:
            code = compile(f.read(), path, "exec")
    exec(code, main.__dict__)


def _exit_code(exc):
    """The exit status of a SystemExit, as the interpreter computes it (a message is printed)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


def _exit(code):
    """Ends the child as the interpreter ends (non-daemon threads joined, atexit hooks run,
    stdout and stderr flushed), less the teardown of every module (about 2 s with torch
    imported, and nothing the tests read happens in it)."""
    import atexit
    import threading
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def server_main(sock_path):
    fork_server = _fork_safety()
    # The environment the server started with is what a request is compared with: torch 2.x's
    # imports set TORCHINDUCTOR_CACHE_DIR in os.environ (torch._inductor's cache_dir(), when
    # unset), which no launcher's environment has; compared with the server's environment after
    # its imports, every request on stack 2 "differed" and ran the real interpreter.
    base_env = dict(os.environ)
    ready = fork_server._preload(["torch", *("~" + n for n in WARM), "!dynamo"])
    if ready["unsafe"]:
        print(f"pyfork: not serving: {ready['unsafe']}", file=sys.stderr, flush=True)
        return 1
    _set_by_imports.update((k, v) for k, v in os.environ.items() if base_env.get(k) != v)
    base_path = _base_path()
    request = _serve(sock_path, base_env)
    if request is None:
        return 0
    _become(request, base_path, _set_by_imports)
    del fork_server
    try:
        _run(request["argv"])
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException as exc:
        tb = exc.__traceback__
        while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) == _SELF:
            tb = tb.tb_next   # this file's frames: python's own traceback starts in the script
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        if isinstance(exc, KeyboardInterrupt):
            import signal
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        code = 1
    _exit(code)


# ---- used by the tests ---------------------------------------------------------------------------

class _Server:
    def __init__(self):
        import subprocess
        import tempfile
        self.dir = tempfile.mkdtemp(prefix="pyfork-")
        self.sock = os.path.join(self.dir, "s")
        self.proc = subprocess.Popen([sys.executable, _SELF, "serve", self.sock],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.path = os.path.join(self.dir, "python")
        with open(self.path, "w", encoding="utf-8") as f:
            f.write(f"#!{sys.executable} -S\nimport sys\nsys.path.insert(0, {HERE!r})\n"
                    f"import pyfork\nsys.exit(pyfork.client_main({self.sock!r}, "
                    f"{sys.executable!r}, sys.argv[1:]))\n")
        os.chmod(self.path, 0o755)
        self.ok = None

    def wait_ready(self):
        if self.ok is None:
            self.ok = self.proc.stdout.readline().strip() == b"ready"
        return self.ok

    def close(self):
        import shutil
        self.proc.stdin.close()   # the server waits for its running handlers, then exits
        try:
            self.proc.wait(timeout=60)
        except Exception:  # noqa: BLE001 - a handler that does not end
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


_server = None


def launcher():
    """The path of the `python` stand-in (started on first use; ends with the test process), or
    sys.executable where fork is missing, PYFORK=0 is set or the server did not start."""
    global _server
    if os.environ.get("PYFORK") == "0" or not hasattr(os, "fork"):
        return sys.executable
    if _server is None:
        import atexit
        _server = _Server()
        atexit.register(_server.close)
    return _server.path if _server.wait_ready() else sys.executable


def start():
    """Starts the server without waiting for it (a test module calls this at import so that the
    server imports torch while the tests before its first use run)."""
    if os.environ.get("PYFORK") != "0" and hasattr(os, "fork"):
        global _server
        if _server is None:
            import atexit
            _server = _Server()
            atexit.register(_server.close)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        sys.exit(server_main(sys.argv[2]))
