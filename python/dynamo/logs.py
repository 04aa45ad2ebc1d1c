"""DYNAMO_LOGS: short, one-event-per-line compile logs on stderr, off by default.

    DYNAMO_LOGS=graph_breaks,recompiles python train.py
    DYNAMO_LOGS=all,-bytecode python train.py
    dynamo.logs.set_logs("+recompiles")            # the same from Python

Names (``LOG_NAMES``): ``graph_breaks`` (one line per distinct break location; later occurrences
are only counted, see ``graph_break_counts()``), ``recompiles`` (one line per recompile with the
first guard failure and the user line that created the guard; cache-limit hits), ``guards`` (the
guard list of each new entry), ``passes`` (what each graph pass did: the graph after a pass that
changed it, "(unchanged)" otherwise), ``graph`` (each captured graph), ``bytecode`` (each transformed
code object), ``aot_graphs`` (the AOT layer's joint, forward and backward graphs, compile times and
fallback reasons), ``partition`` (what the partitioner saved and recomputed), ``fusion`` and
``output_code`` (the fused backend's lowered program and each generated kernel's source; printed
by the C++ backend, which reads the environment variable only). ``+name`` is more verbose (``+graph_breaks``: the user stack; ``+recompiles``: every
failed guard), ``-name`` turns one off, ``all`` turns all on. The environment variable is read at
import; ``set_logs`` replaces the setting. An unknown name gives one warning listing the valid ones.

A compile listener prints the lines when a compile happens; nothing runs on compiled calls.
Guard failures come as data from the compiler (the record's ``misses``: kind, source, expected,
seen, the user line that created the guard), the same fields the trace store keeps.
"""
import sys
import threading
import warnings

from dynamo import _C, eval_frame
from dynamo.utils import short_path

__all__ = ["LOG_NAMES", "set_logs", "enabled", "graph_break_counts", "ENV_VAR"]

ENV_VAR = "DYNAMO_LOGS"
#: The log names, in the order they print for one compile.
LOG_NAMES = ("graph_breaks", "recompiles", "guards", "passes", "graph", "bytecode", "aot_graphs", "partition",
             "fusion", "output_code")
PREFIX = "[dynamo]"

_lock = threading.Lock()
_levels = {}            # name -> 1 (on) or 2 (+name, verbose); absent: off
_break_counts = {}      # (kind, file, line) -> times met since set_logs


def set_logs(spec=""):
    """Sets which logs print, from a DYNAMO_LOGS-style string (``"graph_breaks,+recompiles"``)
    or a list of names. Replaces the previous setting (and the environment's); ``""`` turns all
    off. Resets the graph-break counts. Unknown names: one UserWarning, the rest applies."""
    _apply(spec, from_env=False)


def _apply(spec, from_env):
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    levels, unknown = _parse(items)
    if unknown:
        message = (f"dynamo: unknown {ENV_VAR} name{'s' if len(unknown) > 1 else ''} "
                   f"{', '.join(repr(u) for u in unknown)}; valid names: all, {', '.join(LOG_NAMES)} "
                   f"(+name for more detail, -name to turn one off)")
        if from_env:  # no Python line to blame: name the variable instead
            warnings.warn_explicit(message, UserWarning, ENV_VAR, 0)
        else:
            warnings.warn(message, UserWarning, stacklevel=3)
    with _lock:
        _levels.clear()
        _levels.update(levels)
        _break_counts.clear()


def enabled(name):
    """0 when log ``name`` is off, 1 when on, 2 when verbose (+name)."""
    return _levels.get(name, 0)


def graph_break_counts():
    """{(kind, file, line): times met} for the graph breaks seen while graph_breaks logs on."""
    with _lock:
        return dict(_break_counts)


def _parse(items):
    levels, unknown = {}, []
    for raw in items:
        item = raw.strip()
        if not item:
            continue
        sign, name = (item[0], item[1:].strip()) if item[0] in "+-" else ("", item)
        names = LOG_NAMES if name == "all" else (name,) if name in LOG_NAMES else None
        if names is None:
            unknown.append(item)
            continue
        for n in names:
            if sign == "-":
                levels.pop(n, None)
            else:
                levels[n] = 2 if sign == "+" else 1
    return levels, unknown


# ---- the messages -------------------------------------------------------------------------------

def _where(file, line):
    return f"{short_path(file)}:{line}"


def _emit(lines):
    err = sys.stderr
    if err is not None:
        err.write("".join(line + "\n" for line in lines))
        err.flush()


def _graph_break_lines(record):
    out = []
    for b in record.get("breaks") or ():
        key = (b.get("kind", ""), b.get("file", ""), int(b.get("line") or 0))
        with _lock:
            seen = key in _break_counts
            _break_counts[key] = _break_counts.get(key, 0) + 1
        if seen:
            continue
        source = (b.get("source") or "").strip()
        line = f"{PREFIX} graph break ({key[0]}) at {_where(key[1], key[2])}"
        if source:
            line += f": {source}"
        if b.get("detail"):
            line += f"  \u2014 {b['detail']}"
        out.append(line)
        if enabled("graph_breaks") > 1:
            for s in b.get("user_stack") or ():
                src = (s.get("source") or "").strip()
                out.append(f"    at {_where(s.get('file', ''), s.get('line', 0))}"
                           + (f": {src}" if src else ""))
    return out


def guard_failures(record):
    """A compile record's guard failures as data, in order: every failing guard of every cache
    entry that missed (newest entry first), each a dict the compiler filled from the guard itself:
    reason, kind, source, property, dim, expected, seen, created_at ({file, line, source} or
    None)."""
    return [f for miss in record.get("misses") or () for f in miss["failures"]]


def created_at_text(failure, with_source=True):
    """Where a parsed guard failure's guard was created, ``file:line: source`` with the file
    shortened ("" when unknown); without the source when ``with_source`` is False."""
    created = failure.get("created_at")
    if not created:
        return ""
    where = _where(created["file"], created["line"])
    source = (created.get("source") or "").strip()
    return f"{where}: {source}" if with_source and source else where


def _recompile_lines(record):
    status = record.get("status")
    fn = f"{record.get('function', '?')} ({_where(record.get('file', ''), record.get('line', 0))})"
    attempt = int(record.get("attempt") or 0)
    if status == "cache-limit":
        failures = guard_failures(record)
        why = _reason_text(failures[0]) if failures else "?"
        return [f"{PREFIX} {fn} hit cache_size_limit after {attempt} compiles; it runs eagerly "
                f"from now on. Last reason: {why}"]
    failures = guard_failures(record)
    if status != "compiled" or attempt == 0 or not failures:
        return []
    out = [f"{PREFIX} recompiling {fn}, attempt {attempt}: {_reason_text(failures[0])}"]
    if enabled("recompiles") > 1:
        for f in failures:
            created = created_at_text(f)
            out.append(f"    - {f['reason']}" + (f"  (guard created at {created})" if created else ""))
    return out


def _reason_text(failure):
    created = created_at_text(failure, False)
    return f"{failure['reason']} (guard created at {created})" if created else failure["reason"]


def _block(title, body):
    body = (body or "").rstrip("\n")
    return [f"{PREFIX} {title}:"] + ["    " + line for line in body.splitlines()] if body else []


def _listener(record):
    if not _levels:
        return
    fn = f"{record.get('function', '?')} ({_where(record.get('file', ''), record.get('line', 0))})"
    attempt = int(record.get("attempt") or 0)
    lines = []
    if enabled("graph_breaks"):
        lines += _graph_break_lines(record)
    if enabled("recompiles"):
        lines += _recompile_lines(record)
    if record.get("status") == "compiled":
        if enabled("guards"):
            lines += _block(f"guards of {fn}, attempt {attempt}", record.get("guard_text"))
        if enabled("passes"):
            for p in record.get("passes") or ():
                title = (f"pass {p['name']} on {fn}, attempt {attempt}: {p['status']}"
                         f" ({p['nodes_before']} -> {p['nodes_after']} nodes)")
                if p["status"] == "changed":
                    lines += _block(title, p["graph"])
                else:
                    lines.append(f"{PREFIX} {title.replace(': unchanged', ' (unchanged)')}")
        if enabled("graph"):
            for i, g in enumerate(record.get("graphs") or ()):
                lines += _block(f"graph {i} of {fn}, attempt {attempt} ({g.get('num_nodes', 0)} nodes)",
                                g.get("text"))
        if enabled("bytecode"):
            lines += _block(f"transformed bytecode of {fn}, attempt {attempt}", record.get("bytecode"))
    if lines:
        _emit(lines)


def _init_from_env():
    import os
    spec = os.environ.get(ENV_VAR, "")
    if spec.strip():
        _apply(spec, from_env=True)


_init_from_env()
eval_frame.add_compile_listener(_listener)
