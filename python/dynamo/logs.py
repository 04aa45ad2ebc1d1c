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

The compile logs (graph_breaks, recompiles, guards, passes, graph, bytecode) are printed in C++
by the compile sink from the compiler's record (python/src/log_bindings.cpp), the same record the
trace store gets; this module only parses the names and hands the levels to ``_C._logs``. Nothing
runs on compiled calls. Guard failures come as data from the compiler (kind, source, expected,
seen, the user line that created the guard), the same fields the trace store keeps.
"""
import sys
import threading
import warnings

from dynamo import _C

__all__ = ["LOG_NAMES", "set_logs", "enabled", "graph_break_counts", "ENV_VAR"]

ENV_VAR = "DYNAMO_LOGS"
#: The log names, in the order they print for one compile.
LOG_NAMES = ("graph_breaks", "recompiles", "guards", "passes", "graph", "bytecode", "aot_graphs", "partition",
             "fusion", "output_code")
PREFIX = "[dynamo]"

_lock = threading.Lock()
_levels = {}            # name -> 1 (on) or 2 (+name, verbose); absent: off


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
        _C._logs.set_levels(dict(levels))  # the C++ side prints, and forgets the breaks seen


def enabled(name):
    """0 when log ``name`` is off, 1 when on, 2 when verbose (+name)."""
    return _levels.get(name, 0)


def graph_break_counts():
    """{(kind, file, line): times met} for the graph breaks seen while graph_breaks logs on."""
    return _C._logs.graph_break_counts()


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


# ---- helpers of the Python-side logs (aot_graphs, partition: python/dynamo/aot) ----------------

def _emit(lines):
    err = sys.stderr
    if err is not None:
        err.write("".join(line + "\n" for line in lines))
        err.flush()


def _block(title, body):
    body = (body or "").rstrip("\n")
    return [f"{PREFIX} {title}:"] + ["    " + line for line in body.splitlines()] if body else []


def _init_from_env():
    import os
    spec = os.environ.get(ENV_VAR, "")
    if spec.strip():
        _apply(spec, from_env=True)


_init_from_env()
