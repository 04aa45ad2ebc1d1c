"""Dynamo's trace store from Python.

Everything the compiler does can be recorded into an SQLite trace store (see
docs/trace-store.md) that the explainer, the recompile profiler, the minifier, the bisector and
the Qt inspector read.

Writing::

    import dynamo.trace
    run = dynamo.trace.start_run("/tmp/trace.db")   # records pid, argv, Python/torch versions
    frame = run.record_frame("model.py", 10, "forward")
    run.flush()                                      # everything recorded so far is on disk
    dynamo.trace.end_run()                           # also done at exit

or set ``DYNAMO_TRACE=/tmp/trace.db``: the first ``current_run()`` starts the run. If that path
cannot be used, the program keeps running: one ``TraceWarning`` names the file and the fix, and
tracing stays off for the process.

Reading::

    with dynamo.trace.open("/tmp/trace.db") as store:
        for run in store.runs(): ...
    print(dynamo.trace.report("/tmp/trace.db", "breaks"))
"""
import atexit
import os
import platform
import sys
import threading
import warnings

from dynamo import _C
from dynamo._C import TraceReader, TraceStoreError, TraceWriter  # noqa: F401

__all__ = [
    "ENV_VAR", "SCHEMA_VERSION", "TraceReader", "TraceStoreError", "TraceWarning", "TraceWriter",
    "current_run", "end_run", "open", "report", "start_run", "upgrade",
]

#: The environment variable naming the trace store to write.
ENV_VAR = "DYNAMO_TRACE"
#: The schema version this build writes (and the newest it reads).
SCHEMA_VERSION = _C.TRACE_SCHEMA_VERSION


class TraceWarning(RuntimeWarning):
    """Tracing was requested but is off; the message names the file and the fix."""


_lock = threading.Lock()
_run = None          # the current TraceWriter, or None
_run_pid = None      # the process that opened it
_env_tried = False   # DYNAMO_TRACE was tried in this process (success or warning)


def open(path):  # noqa: A001 - mirrors the builtin on purpose: dynamo.trace.open(path)
    """Open a trace store for reading. Raises TraceStoreError naming the file and the fix."""
    return _C.TraceReader(os.fspath(path))


def report(path, name="summary", mask=False):
    """The text of a ``dynamo-trace`` report: summary, runs, breaks, compiles or failures."""
    return _C.trace_report(os.fspath(path), name, mask)


def upgrade(path):
    """Upgrade a trace store to SCHEMA_VERSION in place, keeping every row; returns the old
    version."""
    return _C.upgrade_trace_store(os.fspath(path))


def _torch_version():
    # torch is imported lazily, and only to name its version; a missing torch is no error.
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch  # noqa: F811
        except Exception:  # noqa: BLE001 - any import failure means "no torch version"
            return ""
    return str(getattr(torch, "__version__", ""))


def _env_int(name, default):
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return default


def start_run(path, *, argv=None, rank=None, world_size=None):
    """Start recording this process as a run in the trace store at ``path`` and make it the
    current run (replacing, and closing, any previous one). Records the pid, argv, Python, torch
    and Dynamo versions, the rank (``RANK``/``WORLD_SIZE`` from the environment unless given) and
    the start time. Raises TraceStoreError naming the file and the fix."""
    global _run, _run_pid
    import dynamo

    writer = _C.TraceWriter(
        os.fspath(path),
        argv=list(sys.argv if argv is None else argv),
        python_version=platform.python_version(),
        torch_version=_torch_version(),
        dynamo_version=dynamo.__version__,
        rank=_env_int("RANK", -1) if rank is None else rank,
        world_size=_env_int("WORLD_SIZE", 0) if world_size is None else world_size,
    )
    with _lock:
        previous, _run, _run_pid = _run, writer, os.getpid()
    if previous is not None:
        previous.close()
    return writer


def end_run():
    """Close the current run: flush it and record its end time. Safe to call twice."""
    global _run
    with _lock:
        writer, _run = _run, None
    if writer is not None:
        writer.close()


def current_run():
    """The current run's TraceWriter, or None when tracing is off.

    With no run started, the first call reads ``DYNAMO_TRACE``: when set, it starts a run there.
    When that fails, it warns once (TraceWarning, naming the file and the fix) and returns None
    from then on: a bad trace path never stops the program."""
    global _env_tried
    _forget_inherited_run()
    if _run is not None:
        return _run
    path = os.environ.get(ENV_VAR)
    if not path or _env_tried:
        return None
    _env_tried = True
    try:
        return start_run(path)
    except TraceStoreError as e:
        summary = getattr(e, "summary", str(e))
        hint = getattr(e, "hint", "")
        message = f"dynamo: tracing is off: {ENV_VAR}={path!r} cannot be used: {summary}"
        if hint:
            message += f" (hint: {hint})"
        warnings.warn(message, TraceWarning, stacklevel=2)
        return None


def _forget_inherited_run():
    # After fork() the child holds the parent's writer, which belongs to the parent (the C++
    # writer ignores it in the child). The child drops it and, when DYNAMO_TRACE is set, starts
    # its own run.
    global _run, _run_pid, _env_tried
    if _run is not None and _run_pid != os.getpid():
        _run, _run_pid, _env_tried = None, None, False


def _close_at_exit():
    _forget_inherited_run()
    try:
        end_run()
    except TraceStoreError as e:
        warnings.warn(f"dynamo: the trace store could not be closed cleanly: {e}", TraceWarning)


atexit.register(_close_at_exit)
