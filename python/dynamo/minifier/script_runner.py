"""Runs the user's script under capture, once per trial of dynamo-bisect (and once for
dynamo-minify's original run): each run sees only its own environment (DYNAMO_BISECT_BACKEND,
DYNAMO_DISABLE_PASSES, DYNAMO_REPRO_DIR, ...) and a crash of the script is a result.

Two runners with the same `run(script, args, env, log_path, timeout=None) -> (exit status, stderr
tail)` (status -N: killed by signal N; None: ran past the timeout):

  SubprocessRunner   `python -m dynamo._run_script -- script args` in a fresh interpreter: every
                     run imports torch again (about 3 s on stack 1, 9 s or more on stack 2).
  ForkRunner         a fork server (fork_server.py; cli/dynamo-bisect and cli/dynamo-minify
                     fork it from themselves once torch is imported: one torch import per
                     bisection or minification) that imported
                     torch, WARM and the script's top-level imports once; each run is a fork
                     of it that applies the run's environment, imports dynamo and runs the
                     script. dynamo is never imported in the server: dynamo.config and
                     dynamo.logs read the environment at import.

      bisector --request--> server (torch, torchvision, ... imported; no thread pool started)
                              |-- fork --> child: env, import dynamo, run script, atexit hooks
                              <-- exit code, or the signal that killed it --

The server refuses to serve (ForkUnsafe, and the bisector falls back to SubprocessRunner) when
importing the script's modules started a thread (a torch op run at import starts the intra-op
pool, and forking after that is unsafe) or imported dynamo. `make_runner` also falls back where
os.fork is missing.

Besides torch, the server imports WARM: torch's modules that a compile imports on first use
(torch 2.x's torch._functorch.aot_autograd pulls in sympy, torch._dynamo, torch._inductor and
torch.distributed: about 900 modules and 2.5-3 s of CPU, in every run, whatever the backend).
Imported once in the server they cost a child nothing.

Both runners also answer isolated queries (`query`: dynamo-bisect's node step) in a fork of such
a server: the ForkRunner in its own server, so one bisection imports torch in one server; the
SubprocessRunner in a server started for the first query. The query's arguments travel pickled
as bytes and are unpickled in the child: unpickling a captured graph in the server could import
dynamo there.
"""
from __future__ import annotations

import ast
import atexit
import importlib.util
import os
import pickle
import subprocess
import sys
from typing import Optional

from dynamo.minifier.fork_server import ForkServer, ForkUnsafe


#: torch's modules a compile imports on first use, imported once in the server (a name the
#: installed torch does not have is skipped: torch._functorch is torch 2.x's, functorch 1.13's).
WARM = ("torch._functorch.aot_autograd", "functorch", "torch.fx.passes.shape_prop")


def _say(prog, msg):
    print(f"{prog}: {msg}", file=sys.stderr, flush=True)


def _tail(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else ""


def _python_path(env):
    return os.pathsep.join(p for p in [*sys.path, env.get("PYTHONPATH", "")] if p)


def _query_server(base_env, optional=(), zygote=None):
    """A fork server for runs and queries: torch and WARM imported, dynamo never (the zygote,
    when given, is that server forked from the tool: fork_server.Zygote)."""
    return ForkServer(preload=["torch"], warm=WARM, optional=optional, env=base_env,
                      forbid=["dynamo"], zygote=zygote)


def _query(server, base_env, target, args, kwargs, log_path, timeout):
    payload = pickle.dumps((args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
    return server.query_with_env(dict(base_env, PYTHONPATH=_python_path(base_env)),
                                 "dynamo.minifier.script_runner:query_in_child", log_path, target,
                                 payload, timeout=timeout)


class SubprocessRunner:
    """Each run is a fresh `python -m dynamo._run_script` process; queries run in a fork server
    started for the first one."""

    kind = "subprocess"

    def __init__(self, base_env=None, zygote=None):
        self.base_env = dict(os.environ if base_env is None else base_env)
        self.server = None
        self.zygote = zygote   # the query server, forked from the tool, or None: started

    def query(self, target, *args, log_path, timeout=None, **kwargs):
        """target(*args, **kwargs) in a fork of the query server (see ForkRunner.query)."""
        if self.server is None:
            self.server, self.zygote = _query_server(self.base_env, zygote=self.zygote), None
        return _query(self.server, self.base_env, target, args, kwargs, log_path, timeout)

    def run(self, script, script_args, env, log_path=None, timeout=None):
        env = dict(env, PYTHONPATH=_python_path(env))
        cmd = [sys.executable, "-m", "dynamo._run_script", "--", script, *script_args]
        try:
            proc = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, "timed out"
        err = proc.stderr.decode(errors="replace")
        if log_path:
            with open(log_path, "w", encoding="utf-8") as f:
                f.write(err)
        return proc.returncode, _tail(err)

    def close(self):
        if self.server is not None:
            self.server.close()
        if self.zygote is not None:
            self.zygote.close()


def script_imports(script) -> list:
    """The top-level modules the script imports at its top level (`import a.b`, `from c import
    d`) that resolve outside the script's own folder and are not dynamo: what a fork server can
    import once for every run. A local module, or one that fails to resolve, is left to the
    run."""
    try:
        with open(script, "rb") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return []
    here = os.path.dirname(os.path.abspath(script))
    names = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.append(node.module)
    out = []
    for name in names:
        root = name.split(".")[0]
        if root == "dynamo" or name in out:
            continue
        try:
            spec = importlib.util.find_spec(root)
        except (ImportError, ValueError):
            continue
        origin = (spec.origin or "") if spec else ""
        if not spec or os.path.dirname(os.path.abspath(origin)) == here or \
                any(os.path.dirname(os.path.abspath(p)) == here
                    for p in (spec.submodule_search_locations or [])):
            continue
        out.append(name)
    return out


def _redirect(log_path, append, stdout_to_log):
    """In a forked child: stdin from /dev/null, stderr (and stdout when stdout_to_log, else
    /dev/null) to log_path, truncated or appended to."""
    null = os.open(os.devnull, os.O_RDWR)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC),
                  0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(null, 0)
    os.dup2(log if stdout_to_log else null, 1)
    os.dup2(log, 2)
    for fd in {null, log} - {0, 1, 2}:
        os.close(fd)


def run_in_child(script, script_args, log_path):
    """The body of one forked run (called by the fork server in the child, whose environment is
    already the run's, before this module imported dynamo): stdin/stdout go to /dev/null and
    stderr to log_path, then the script runs as `python -m dynamo._run_script` would run it,
    atexit hooks included (the fork ends with os._exit, which skips them; the trace store's run
    ends in one)."""
    _redirect(log_path, append=False, stdout_to_log=False)
    from dynamo import _run_script
    rc = _run_script.main(["--", script, *script_args])
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    return rc


def query_in_child(log_path, target, payload):
    """The body of one query (called in a child of the server, its environment the base one):
    stdout and stderr appended to log_path, then target(*args, **kwargs), the arguments unpickled
    from payload here."""
    _redirect(log_path, append=True, stdout_to_log=True)
    from dynamo.minifier.fork_server import _resolve
    args, kwargs = pickle.loads(payload)
    try:
        return _resolve(target)(*args, **kwargs)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


class ForkRunner:
    """Each run is a fork of a server that imported torch and the script's imports."""

    kind = "fork server"

    def __init__(self, script, base_env, preload=None, zygote=None):
        self.base_env = dict(base_env)
        self.preload = list(script_imports(script) if preload is None else preload)
        self.server = _query_server(self.base_env, self.preload, zygote)

    def start(self):
        self.server.start()   # raises ForkUnsafe or RuntimeError
        return self

    def differs_outside_dynamo(self, env):
        """Whether env changes a variable other than DYNAMO_*: the server's imports saw the
        base environment, so such a run needs a fresh process."""
        keys = set(env) | set(self.base_env)
        return any(env.get(k) != self.base_env.get(k) for k in keys if not k.startswith("DYNAMO_"))

    def query(self, target, *args, log_path, timeout=None, **kwargs):
        """target(*args, **kwargs) ("module:qualname") in a fork of the run server with the base
        environment, its output appended to log_path: a QueryResult (a crash, an exit or the
        timeout is a result, as for ForkServer.query)."""
        return _query(self.server, self.base_env, target, args, kwargs, log_path, timeout)

    def run(self, script, script_args, env, log_path, timeout=None):
        if self.differs_outside_dynamo(env):
            return SubprocessRunner().run(script, script_args, env, log_path, timeout)
        r = self.server.query_with_env(dict(env, PYTHONPATH=_python_path(env)), "dynamo.minifier.script_runner:run_in_child",
                                       script, list(script_args), log_path, timeout=timeout)
        try:
            with open(log_path, encoding="utf-8", errors="replace") as f:
                tail = _tail(f.read())
        except OSError:
            tail = ""
        if r.kind == "ok":
            return int(r.value), tail
        if r.kind == "crash":
            return -r.signal, tail
        if r.kind == "exit":
            return r.exit_code, tail
        if r.kind == "timeout":
            return None, tail
        return 1, _tail(r.message) or tail   # _run_script itself raised

    def close(self):
        self.server.close()


def make_runner(script, base_env, use_fork=True, prog="dynamo-bisect", zygote=None):
    """A ForkRunner when os.fork exists and the server starts and is fork-safe; otherwise (or
    with use_fork=False) a SubprocessRunner. A fallback is said on stderr with its reason. The
    zygote (fork_server.Zygote), when given, becomes the server (of the queries only, for a
    SubprocessRunner)."""
    if not use_fork:
        return SubprocessRunner(base_env, zygote)
    if not hasattr(os, "fork"):
        _say(prog, "no os.fork on this platform: every run is a fresh process")
        return SubprocessRunner(base_env, zygote)
    runner = ForkRunner(script, base_env, zygote=zygote)
    try:
        return runner.start()
    except (ForkUnsafe, RuntimeError) as e:
        runner.close()
        _say(prog, f"not using a fork server ({e}): every run is a fresh process")
        return SubprocessRunner(base_env)
