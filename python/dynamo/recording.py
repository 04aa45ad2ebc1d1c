"""Records every compile into the trace store (docs/trace-store.md, "What the compiler records").

A compile listener (``dynamo.add_compile_listener``) maps each compile record onto the store's
rows::

    compile record (dict)          trace store
    ---------------------          -----------
    function, file, line     -->   frames          (one per (file, first line, name) per run)
    attempt, status, reason,  -->  compiles        (+ compile_phases: capture, guards, backend)
      *_ms timings
    graphs[i]                -->   graphs          (json as the serialized blob, printed text)
    breaks[i]                -->   graph_breaks    (kind, file:line, source line, why, hints)
    guards[i]                -->   guards
    reason lines (recompile) -->   guard_failures  (one per line, linked to the failed entry)
    bytecode                 -->   code            (kind transformed_bytecode)

Recording is on while ``dynamo.config.trace_path`` (default: the ``DYNAMO_TRACE`` environment
variable) is set, or after ``enable(path)``; ``disable()`` turns it off. It runs only when
something compiles, never on a compiled call. ``record_*()`` only enqueue; the listener then
waits for the writer thread to commit the compile's rows (``flush``), so they are in the store
before the compiled code runs, and a crash on its first call leaves a marker naming the compile. The run is ``dynamo.trace``'s current run (one per process, closed at exit).
A trace path that cannot be used never stops the program: one ``dynamo.trace.TraceWarning``
names the file and the fix, and recording stays off for that path.
"""
import atexit
import gc
import json
import os
import re
import threading
import time
import types
import warnings

from dynamo import config, eval_frame, trace

__all__ = ["enable", "disable", "is_enabled", "record_compile", "record_into", "store_status"]

_lock = threading.Lock()
_explicit_path = None   # set by enable(path); wins over config.trace_path
_off = False            # set by disable()
_tried = set()          # (pid, path) pairs this module tried to open (success or warning)
_started = None         # (pid, writer) of the run that enable() or the listener started
_warned_internal = False

# Per-run caches, cleared when the run changes. Keyed by (store path, run id): run ids restart
# at 1 in each store, and profile_recompiles() records into a fresh temporary store each time.
_cache_run_id = None
_frames = {}            # (file, first line, name) -> frame id
_entries = {}           # frame id -> [(compile id, {guard source: guard id})], newest first
_break_entries = {}     # cache entry id -> compile id, for compiles with graph breaks

#: The artifact that holds the runtime hits of the cache entries whose compiles had graph breaks
#: (text/plain, one "compile_id hits" line each), recorded at exit. dynamo-explain counts a
#: break's occurrences as: compiles that met it + the hits of the entries that pass it.
ENTRY_HITS_ARTIFACT = "dynamo.entry_hits"

_STATUS = {"skipped": "skipped", "failed": "failed", "cache-limit": "cache_limit"}
_QUOTED = re.compile(r"'([^']+)'")


def store_status(record):
    """The compiles.status the store keeps for a compile record: ok, graph_break, skipped,
    failed or cache_limit."""
    status = record.get("status", "")
    if status == "compiled":
        return "graph_break" if record.get("breaks") else "ok"
    return _STATUS.get(status, status)


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
        return run
    _tried.add((os.getpid(), path))
    return _start(path)


def disable():
    """Stop recording. A run this module started is closed (flushed, end time recorded); a run
    started with dynamo.trace.start_run stays open."""
    global _explicit_path, _off, _started
    with _lock:
        _explicit_path, _off = None, True
        started, _started = _started, None
    # trace._run, not current_run(): asking must not start a DYNAMO_TRACE run.
    if started is not None and started[0] == os.getpid() and trace._run is started[1]:
        record_entry_hits(started[1])
        trace.end_run()


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
            record_entry_hits(writer)
            trace.end_run()
        with _lock:
            _explicit_path, _off = saved
            if started and _started is not None and _started[1] is writer:
                _started = None

    return writer, restore


def is_enabled():
    """True while compiles are recorded (a path is set and recording was not disabled)."""
    return not _off and bool(_active_path())


def record_compile(writer, record):
    """Record one compile record (the listener's dict) through ``writer``; returns the compile
    id. Only enqueues rows."""
    _reset_caches_for((writer.path, writer.run_id))
    frame_id = _frame_id(writer, record)
    total_us = _us(record.get("total_ms"))
    end_us = _now_us()
    compile_id = writer.record_compile(
        frame_id, attempt=int(record.get("attempt", 0)), status=store_status(record),
        reason=_compile_reason(record), start_time_us=end_us - total_us,
        duration_us=total_us,
        phases={"capture": _us(record.get("capture_ms")), "guards": _us(record.get("guard_ms")),
                "backend": _us(record.get("backend_ms"))})
    # The failures carry the compile's end time: a reader finds the recompile they caused.
    _record_guard_failures(writer, record, frame_id, end_us)
    for index, graph in enumerate(record.get("graphs") or ()):
        _record_graph(writer, compile_id, index, graph)
    for b in record.get("breaks") or ():
        _record_break(writer, compile_id, b)
    guard_ids = {}
    for g in record.get("guards") or ():
        gid = writer.record_guard(compile_id, _text(g.get("kind")), _text(g.get("checked")),
                                  source=_text(g.get("source")), file=_text(g.get("file")),
                                  line=int(g.get("line") or 0),
                                  source_line=_text(g.get("user_source")))
        guard_ids.setdefault(_text(g.get("source")), gid)
    for source in _artifact_sources:  # e.g. the AOT layer's graphs (dynamo.aot)
        for name, data, media_type in source(record):
            writer.record_artifact(name, data, media_type=media_type, compile_id=compile_id)
    if record.get("bytecode"):
        writer.record_code("transformed_bytecode", record["bytecode"],
                           name=_text(record.get("function")), compile_id=compile_id)
    if record.get("status") == "compiled":
        _entries.setdefault(frame_id, []).insert(0, (compile_id, guard_ids))
        if record.get("breaks") and record.get("entry_id"):
            _break_entries[int(record["entry_id"])] = compile_id
    return compile_id


_artifact_sources = []


def add_artifact_source(fn):
    """fn(record) -> [(name, data bytes, media type)]: artifacts recorded with each compile, linked
    to its compile id (the AOT layer's joint, forward and backward graphs)."""
    _artifact_sources.append(fn)
    return fn


# ---- the listener ---------------------------------------------------------------------------

def _listener(record):
    if _off:
        return
    path = _active_path()
    if not path:
        return
    writer = _writer(path)
    if writer is None:
        return
    try:
        with _lock:
            compile_id = record_compile(writer, record)
        # The compiled code runs for the first time right after the listeners: a crash there
        # leaves a marker naming this compile.
        ran = record.get("status") == "compiled"
        writer.note_crash_stage("first_call" if ran else "unknown", compile_id if ran else 0)
    except Exception as e:  # noqa: BLE001 - recording must never break the user's compile
        _warn_internal(path, e)
        return
    if COMMIT_EACH_COMPILE:
        _commit(writer, path)


#: Commit every compile's rows before its code runs (docs/trace-store.md, "Durability"), so a
#: process that crashes or is killed on the first call keeps them. Off: rows wait for the
#: writer's batch (512 rows or 100 ms); only for measuring what the commit costs.
COMMIT_EACH_COMPILE = True
_warned_commit = False


def _commit(writer, path):
    global _warned_commit
    try:
        writer.flush()  # releases the GIL while the writer thread commits
    except trace.TraceStoreError as e:
        if not _warned_commit:
            _warned_commit = True
            warnings.warn(f"dynamo: the trace store {path!r} lost rows: {e}; the program goes "
                          f"on, and later compiles are recorded when the disk allows",
                          trace.TraceWarning, stacklevel=3)


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
    return writer


def _warn_internal(path, error):
    global _warned_internal
    if _warned_internal:
        return
    _warned_internal = True
    warnings.warn(f"dynamo: internal error in python/dynamo/recording.py while recording a "
                  f"compile into {path!r}: {error!r}. This is a Dynamo bug; please report it. "
                  f"The program goes on; some compiles may be missing from the trace.",
                  trace.TraceWarning, stacklevel=3)


def _same_file(a, b):
    return os.path.abspath(os.fspath(a)) == os.path.abspath(os.fspath(b))


# ---- record mapping -------------------------------------------------------------------------

def _reset_caches_for(run_id):
    global _cache_run_id
    if run_id != _cache_run_id:
        _cache_run_id = run_id
        _frames.clear()
        _entries.clear()
        _break_entries.clear()


def _frame_id(writer, record):
    key = (_text(record.get("file")), int(record.get("line") or 0), _text(record.get("function")))
    frame_id = _frames.get(key)
    if frame_id is None:
        frame_id = _frames[key] = writer.record_frame(*key)
    if int(record.get("attempt", 0)) == 0:
        _entries.pop(frame_id, None)  # a first compile (or after dynamo.reset()): no old entries
    return frame_id


def _compile_reason(record):
    # One line: the report prints it after the attempt ("#1 ok in 0.3ms: <reason>").
    reason = "; ".join(_reason_entries(_text(record.get("reason"))))
    if not reason and int(record.get("attempt", 0)) == 0:
        return "first call"
    return reason


def _failure_lines(record):
    """The guard failure reasons of a recompile, one per failed cache entry, newest first."""
    reason = _text(record.get("reason")).strip()
    if not reason:
        return []
    status = record.get("status")
    if status == "cache-limit":
        _, sep, last = reason.partition("last reason: ")
        return _reason_entries(last)[:1] if sep else []
    if status != "compiled" or int(record.get("attempt", 0)) == 0:
        return []  # skipped / failed: the reason says why, not which guard failed
    return _reason_entries(reason)


def _reason_entries(reason):
    """One string per failed cache entry: a reason line, with its indented continuation lines
    ("  (guard created at file:line: source)") joined on with a space."""
    out = []
    for line in reason.splitlines():
        if not line.strip():
            continue
        if line[:1].isspace() and out:
            out[-1] += " " + line.strip()
        else:
            out.append(line.strip())
    return out


def _record_guard_failures(writer, record, frame_id, now):
    lines = _failure_lines(record)
    entries = _entries.get(frame_id, [])
    if not lines or not entries:
        return
    # The compiler lists one reason per cache entry, newest entry first; when the counts differ
    # (entries evicted, or not all listed) every reason goes to the newest entry.
    paired = zip(entries, lines) if len(lines) == len(entries) else ((entries[0], l) for l in lines)
    for (compile_id, guard_ids), line in paired:
        writer.record_guard_failure(compile_id, line, frame_id=frame_id,
                                    guard_id=_failing_guard(guard_ids, line), time_us=now)


def _failing_guard(guard_ids, reason):
    # "tensor 'x' size mismatch ..." names the guarded value in quotes.
    m = _QUOTED.search(reason)
    return guard_ids.get(m.group(1), 0) if m else 0


def _record_graph(writer, compile_id, index, graph):
    text = _text(graph.get("json"))
    fmt, inputs, outputs = "dynamo.graph/1", [], []
    try:
        doc = json.loads(text)
        fmt = f"{doc.get('format', 'dynamo.graph')}/{doc.get('version', 1)}"
        nodes = doc.get("nodes", [])
        inputs = [n.get("name", "") for n in nodes if n.get("op") == "placeholder"]
        outputs = [_output_name(a) for n in nodes if n.get("op") == "output"
                   for a in _flatten(n.get("args", []))]
    except (ValueError, AttributeError, TypeError):
        pass  # keep the text as it is; graph_io reports a bad document when it is read
    writer.record_graph(compile_id, text.encode(), format=fmt, printed=_text(graph.get("text")),
                        index=index, num_nodes=int(graph.get("num_nodes") or 0),
                        inputs=inputs, outputs=outputs)


def _flatten(args):
    for a in args:
        if isinstance(a, dict) and "tuple" in a:
            yield from _flatten(a["tuple"])
        elif isinstance(a, list):
            yield from _flatten(a)
        else:
            yield a


def _output_name(arg):
    if isinstance(arg, dict) and "node" in arg:
        return str(arg["node"])
    return json.dumps(arg)


def _record_break(writer, compile_id, b):
    explanation, detail = _text(b.get("explanation")), _text(b.get("detail"))
    if detail and detail not in explanation:
        explanation = f"{detail}: {explanation}" if explanation else detail
    stack = [_stack_entry(s) for s in b.get("user_stack") or ()]
    hint = _text(b.get("hint"))
    writer.record_graph_break(compile_id, _text(b.get("kind")), file=_text(b.get("file")),
                              line=int(b.get("line") or 0), source_line=_text(b.get("source")),
                              explanation=explanation, hints=[hint] if hint else [],
                              user_stack=stack)


def _stack_entry(s):
    # "file:line: source line", as records.h's userStack strings.
    where = f"{_text(s.get('file'))}:{int(s.get('line') or 0)}"
    source = _text(s.get("source")).strip()
    return f"{where}: {source}" if source else where


def _text(value):
    # The binding takes C strings: None becomes "", and NUL bytes cannot pass.
    return "" if value is None else str(value).replace("\0", "\\0")


def _us(ms):
    return int(round(float(ms or 0) * 1000))


def _now_us():
    return time.time_ns() // 1000


# ---- runtime hits, recorded at exit ---------------------------------------------------------

def _entry_hits(wanted):
    """{entry id: hits} for the wanted cache entry ids. The records carry no code objects, so
    this walks the live functions' code, the code of their cache entries and the code objects
    nested in both (resume functions live in the transformed code's constants)."""
    from dynamo import _C
    found, seen = {}, set()
    stack = [o.__code__ for o in gc.get_objects() if type(o) is types.FunctionType]
    while stack and len(found) < len(wanted):
        code = stack.pop()
        if id(code) in seen:
            continue
        seen.add(id(code))
        for entry in _C._frame.cache_entries(code):
            if entry["id"] in wanted:
                found[entry["id"]] = int(entry["hits"])
            if isinstance(entry.get("code"), types.CodeType):
                stack.append(entry["code"])
        stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return found


def record_entry_hits(writer=None):
    """Record the ENTRY_HITS_ARTIFACT for this run now (also done at exit). Returns the
    {compile id: hits} written, or None when there is nothing to record."""
    writer = writer if writer is not None else trace._run
    if writer is None or (writer.path, writer.run_id) != _cache_run_id or not _break_entries:
        return None
    hits = _entry_hits(set(_break_entries))
    by_compile = {_break_entries[e]: h for e, h in hits.items()}
    text = "".join(f"{cid} {h}\n" for cid, h in sorted(by_compile.items()))
    writer.record_artifact(ENTRY_HITS_ARTIFACT, text.encode(), media_type="text/plain")
    return by_compile


def _record_entry_hits_at_exit():
    # Registered after dynamo.trace's own atexit hook, so it runs before the run is closed.
    try:
        if trace._run is not None and trace._run_pid == os.getpid():
            record_entry_hits()
    except Exception as e:  # noqa: BLE001 - never disturb the program's exit
        _warn_internal(config.trace_path or "", e)


eval_frame.add_compile_listener(_listener)
atexit.register(_record_entry_hits_at_exit)
