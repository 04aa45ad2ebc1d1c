"""Records every compile into the trace store (docs/trace-store.md, "What the compiler records").

The compiler hands its records to the trace writer in C++ (``dynamo._C._recording``, the
compile sink in python/src/recording_bindings.cpp): no Python dict in between. This module only
decides which store is written::

    dynamo.config.trace_path / DYNAMO_TRACE / enable(path)
        |
        v
    _C._recording.install(opener)      the sink calls opener() before every compile: it names the
        |                              run (and opens DYNAMO_TRACE's run before the first backend)
        v
    TraceWriter (dynamo.trace's run)   frames, compiles, graphs, breaks, guards, guard failures
                                       (as data), bytecode; cache entry hits when the run ends

Recording is on while ``dynamo.config.trace_path`` (default: the ``DYNAMO_TRACE`` environment
variable) is set, or after ``enable(path)``; ``disable()`` turns it off. It runs only when
something compiles, never on a compiled call. Every compile's rows are committed before its code
runs (so a process that crashes or is killed on the first call keeps them, and a crash leaves a
marker naming the compile). The run is ``dynamo.trace``'s current run (one per process, closed
at exit; closing it records the hits of its cache entries). A trace path that cannot be used
never stops the program: one ``dynamo.trace.TraceWarning`` names the file and the fix, and
recording stays off for that path. Python listeners (``dynamo.add_compile_listener``) stay an
optional API fed from the same records.
"""
import os
import threading
import warnings

from dynamo import _C, config, trace

__all__ = ["enable", "disable", "is_enabled", "record_into", "record_entry_hits", "store_status",
           "set_commit_each_compile", "add_artifact_source"]

_lock = threading.Lock()
_explicit_path = None   # set by enable(path); wins over config.trace_path
_off = False            # set by disable()
_tried = set()          # (pid, path) pairs this module tried to open (success or warning)
_started = None         # (pid, writer) of the run that enable() or the sink's opener started


def store_status(record):
    """The compiles.status the store keeps for a listener's compile record: ok, graph_break,
    skipped, failed or cache_limit (common/include/dynamo/common/compile_statuses.def)."""
    return record["store_status"]


def set_commit_each_compile(on):
    """What secures a compile's rows before its code runs (docs/trace-store.md, "Durability").
    True (the default): one write() to the store's row journal (TraceWriter.persist); "commit":
    an SQLite commit (flush; the behaviour before the row journal); False: nothing, the rows
    wait for the writer's batch (512 rows or 100 ms) and a killed process loses them. The last
    two are only for measuring the cost (bench/commit_cost.py). Returns the previous setting."""
    modes = {False: 0, "commit": 1, True: 2}
    if on not in modes or (on is not True and on is not False and on != "commit"):
        raise ValueError(f"set_commit_each_compile: expected True, False or 'commit', got {on!r}")
    previous = _C._recording.set_commit_mode(modes[on])
    return {0: False, 1: "commit", 2: True}[previous]


def enable(path=None):
    """Record every compile from now on into the trace store at ``path`` (default:
    ``dynamo.config.trace_path``). Starts the run at once, so a bad path warns here; returns
    the TraceWriter, or None when the path cannot be used (one TraceWarning, tracing off)."""
    global _explicit_path, _off
    path = os.fspath(path) if path is not None else config.trace_path
    if not path:
        raise ValueError("dynamo.recording.enable() needs a trace store path: pass one, or set "
                         "dynamo.config.trace_path (DYNAMO_TRACE=/tmp/trace.db)")
    with _lock:
        _explicit_path, _off = path, False
    run = trace.current_run()
    if run is not None and _same_file(run.path, path):
        _C._recording.attach(run)
        return run
    _tried.add((os.getpid(), path))
    return _start(path)


def disable():
    """Stop recording. A run this module started is closed (entry hits recorded, flushed, end
    time recorded); a run started with dynamo.trace.start_run stays open."""
    global _explicit_path, _off, _started
    with _lock:
        _explicit_path, _off = None, True
        started, _started = _started, None
    # trace._run, not current_run(): asking must not start a DYNAMO_TRACE run.
    if started is not None and started[0] == os.getpid() and trace._run is started[1]:
        trace.end_run()  # records the entries' hits, then closes
    elif _C._recording.attached(None):
        _C._recording.record_hits()
    _C._recording.attach(None)


def record_into(path):
    """Record every compile into the trace store at ``path`` until the returned ``restore()`` is
    called (dynamo.profile_recompiles uses it). Returns ``(writer, restore)``; writer is None when
    the path cannot be used (one TraceWarning). ``restore()`` closes the run this started (entry
    hits recorded, flushed) and puts the previous enable()/disable() setting back."""
    with _lock:
        saved = (_explicit_path, _off)
    previous_run = trace._run
    writer = enable(path)
    started = writer is not None and writer is not previous_run

    def restore():
        global _explicit_path, _off, _started
        if started and trace._run is writer:
            trace.end_run()
        with _lock:
            _explicit_path, _off = saved
            if started and _started is not None and _started[1] is writer:
                _started = None

    return writer, restore


def is_enabled():
    """True while compiles are recorded (a path is set and recording was not disabled)."""
    return not _off and bool(_active_path())


_artifact_sources = []


def _artifacts():
    out = []
    for source in _artifact_sources:
        out.extend(source())
    return out


def add_artifact_source(fn):
    """fn() -> [(name, data bytes, media type)]: artifacts recorded with each compile, linked to
    its compile id (the AOT layer's joint, forward and backward graphs). Called by the compile
    sink right after the compile's rows, before they are committed."""
    _artifact_sources.append(fn)
    if len(_artifact_sources) == 1:
        _C._recording.set_artifact_source(_artifacts)
    return fn


def record_entry_hits(writer=None):
    """Record the hits of the current run's live cache entries now (also done when the run is
    closed: at exit, disable(), dynamo.trace.end_run()). Returns {compile id: hits}, or None when
    no run is recorded."""
    writer = writer if writer is not None else trace._run
    if writer is None or not _C._recording.attached(writer):
        return None
    return _C._recording.record_hits()


# ---- the opener the sink calls before every compile --------------------------------------------

def _open_for_compile():
    if _off:
        return None
    path = _active_path()
    if not path:
        return None
    return _writer(path)


def _active_path():
    return _explicit_path or config.trace_path


def _writer(path):
    run = trace.current_run()  # drops a parent's run after fork(); starts DYNAMO_TRACE's run
    if run is not None:
        return run
    if path == os.environ.get(trace.ENV_VAR):
        return None  # current_run() tried this path and warned
    key = (os.getpid(), path)
    if key in _tried:
        return None  # warned already, or the run was ended: one run per process
    _tried.add(key)
    return _start(path)


def _start(path):
    global _started
    try:
        writer = trace.start_run(path)
    except trace.TraceStoreError as e:
        summary = getattr(e, "summary", str(e))
        hint = getattr(e, "hint", "")
        message = f"dynamo: tracing is off: trace path {path!r} cannot be used: {summary}"
        if hint:
            message += f" (hint: {hint})"
        warnings.warn(message, trace.TraceWarning, stacklevel=3)
        return None
    _started = (os.getpid(), writer)
    _C._recording.attach(writer)
    return writer


def _same_file(a, b):
    return os.path.abspath(os.fspath(a)) == os.path.abspath(os.fspath(b))


_C._recording.install(_open_for_compile)
