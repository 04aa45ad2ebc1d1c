"""Compile-time statistics: how long each compile phase took, per function.

A module-level collector is a compile listener from import on (``dynamo`` imports this module), so
``compile_times()`` covers every compile since import or since ``reset_compile_times()``::

    >>> print(dynamo.utils.compile_times(aggregate=True))
    Dynamo compile times (ms), 4 compiles since the last reset
    function        location   compiles  capture  guards  backend   total
    f               model.py:4        2    1.356   0.059    0.021   1.545

Phases are the compile record's timings: ``capture`` (tracing), ``guards`` (building the guard
set), ``backend`` (the backend compiling the graph) and ``total`` (the whole attempt, the parts
between phases included). Also shared helpers of the debugging tools (``short_path``).
"""
import csv
import io
import os
import threading

from dynamo import eval_frame

__all__ = ["compile_times", "reset_compile_times", "short_path"]

_PHASES = (("capture", "capture_ms"), ("guards", "guard_ms"), ("backend", "backend_ms"),
           ("total", "total_ms"))

_lock = threading.Lock()
_rows = []   # one tuple per compile attempt: (function, file, line, attempt, status, ms per phase)


def short_path(path):
    """``path`` relative to the working directory when it lies under it, else unchanged."""
    if not path or path.startswith("<"):
        return path or "?"
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def _collect(record):
    row = (record.get("function", "?"), record.get("file", ""), int(record.get("line") or 0),
           int(record.get("attempt") or 0), record.get("status", ""),
           tuple(float(record.get(key) or 0.0) for _, key in _PHASES))
    with _lock:
        _rows.append(row)


def reset_compile_times():
    """Forget the compile times collected so far."""
    with _lock:
        _rows.clear()


def compile_times(repr="str", aggregate=False):  # noqa: A002 - PyTorch's parameter name
    """Time per compile phase (capture, guards, backend, total; milliseconds) per function.

    ``aggregate=False``: one row per compile attempt; ``aggregate=True``: one row per function
    with the number of compiles and the summed times. ``repr="str"`` returns an aligned table,
    ``repr="csv"`` CSV text with a header row."""
    if repr not in ("str", "csv"):
        raise ValueError(f"compile_times(repr={repr!r}): repr must be 'str' or 'csv'")
    with _lock:
        rows = list(_rows)
    header, table = (_aggregate(rows) if aggregate else _per_compile(rows))
    if repr == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(header)
        writer.writerows([round(v, 6) if isinstance(v, float) else v for v in row] for row in table)
        return out.getvalue()
    title = f"Dynamo compile times (ms), {len(rows)} compile{'s' if len(rows) != 1 else ''} since the last reset"
    if not rows:
        return title + ": none\n"
    return title + "\n" + _align(header, [[_cell(v) for v in r] for r in table])


def _per_compile(rows):
    header = ["function", "location", "attempt", "status"] + [p for p, _ in _PHASES]
    table = [[fn, f"{short_path(file)}:{line}", attempt, status, *times]
             for fn, file, line, attempt, status, times in rows]
    return header, table


def _aggregate(rows):
    sums = {}
    for fn, file, line, _, _, times in rows:
        entry = sums.setdefault((fn, file, line), [0, [0.0] * len(_PHASES)])
        entry[0] += 1
        entry[1] = [a + b for a, b in zip(entry[1], times)]
    header = ["function", "location", "compiles"] + [p for p, _ in _PHASES]
    table = [[fn, f"{short_path(file)}:{line}", n, *times]
             for (fn, file, line), (n, times) in sums.items()]
    return header, table


def _cell(value):
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _align(header, table):
    widths = [max(len(str(c)) for c in col) for col in zip(header, *table)]
    # Text columns (the first two, and status) left-aligned, numbers right-aligned.
    left = {i for i, h in enumerate(header) if h in ("function", "location", "status")}
    lines = []
    for row in [header] + table:
        cells = [str(c).ljust(w) if i in left else str(c).rjust(w)
                 for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


eval_frame.add_compile_listener(_collect, listings=False)
