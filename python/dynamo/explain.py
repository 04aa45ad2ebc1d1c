"""dynamo.explain(fn)(*args): why a function splits into several graphs, as data and as a report.

It resets Dynamo, runs ``fn`` once compiled with the eager backend while collecting every compile
record (the frame itself, the resume functions after each break, the functions it calls), resets
again, and returns an ``ExplainOutput``. Graph breaks are grouped by (kind, file, line): a break
met by many compiles (inside a loop, in a function compiled for several argument values) is one
``BreakReason`` with a count, not one entry per compile.

    >>> out = dynamo.explain(f)(x)
    >>> out.graph_count, out.graph_break_count, [b.kind for b in out.break_reasons]
    (3, 2, ['print', 'data-dependent-branch'])
    >>> print(out)
"""
import collections
import warnings

from dynamo import eval_frame
from dynamo.utils import short_path

__all__ = ["explain", "ExplainOutput", "BreakReason"]


class BreakReason:
    """One distinct graph break: where (kind, file, line, source line), why, the fix, the user
    stack of its first occurrence (outermost first) and how many compiles met it."""

    __slots__ = ("kind", "file", "line", "source", "detail", "explanation", "hint", "user_stack",
                 "count", "functions", "compiles", "_direct", "_inlined")

    def __init__(self, brk, function):
        self.kind = brk.get("kind", "")
        self.file = brk.get("file", "")
        self.line = int(brk.get("line") or 0)
        self.source = (brk.get("source") or "").strip()
        self.detail = brk.get("detail", "")
        self.explanation = brk.get("explanation", "")
        self.hint = brk.get("hint", "")
        self.user_stack = [dict(s) for s in brk.get("user_stack") or ()]
        self.count = 1
        self.compiles = 0             # compiles that met it
        self.functions = [function]   # the compiled functions that met it, first first
        self._direct = self._inlined = 0

    def _add(self, brk):
        # The storage::BreakTally rule (storage/include/dynamo/storage/trace_reader.h): a break
        # in a callee is met both by the caller's compile, which inlined it (user stack of 2+
        # frames), and by the callee's own compile; each saw the same pass, so the larger of the
        # two sums counts. Here every compile ran once, so each record adds 1.
        self.compiles += 1
        if len(brk.get("user_stack") or ()) > 1:
            self._inlined += 1
        else:
            self._direct += 1
        self.count = max(self._direct, self._inlined, 1)

    @property
    def reason(self):
        """One line: ``detail: explanation`` (PyTorch's break_reasons[i].reason)."""
        if self.detail and self.explanation:
            return f"{self.detail}: {self.explanation}"
        return self.detail or self.explanation

    def __repr__(self):
        return f"BreakReason({self.kind!r} at {short_path(self.file)}:{self.line}, count={self.count})"


class ExplainOutput:
    """What ``dynamo.explain(fn)(*args)`` found.

    graphs: printed graph texts, in compile order; graph_count: len(graphs).
    graph_break_count: graph break occurrences, summed over break_reasons (a break in a loop that
      four compiles meet counts 4; a break in a called function, met by the caller's compile and
      by the callee's own, counts once); break_reasons: the distinct breaks (BreakReason, .count).
    op_count: ops over all graphs; ops_per_graph: {qualified op: count} per graph.
    out_guards: the guard dicts of every compiled entry.
    compile_times: milliseconds per phase (capture, guards, backend) and total, summed.
    not_compiled: (function, file, line, status, reason) for frames that were skipped or failed.
    result: what fn returned. records: the raw compile records.
    """

    def __init__(self, records, result):
        self.records = records
        self.result = result
        compiled = [r for r in records if r.get("status") == "compiled"]
        graphs = [(r, g) for r in compiled for g in r.get("graphs") or ()]
        self.graphs = [g.get("text", "") for _, g in graphs]
        self.graph_functions = [r.get("function", "?") for r, _ in graphs]
        self.graph_count = len(self.graphs)
        self.ops_per_graph = [dict(g.get("op_counts") or {}) for _, g in graphs]
        self.op_count = sum(sum(ops.values()) for ops in self.ops_per_graph)
        self.break_reasons = _distinct_breaks(records)
        self.graph_break_count = sum(b.count for b in self.break_reasons)
        self.out_guards = [dict(g) for r in compiled for g in r.get("guards") or ()]
        self.compile_times = {
            phase: round(sum(float(r.get(key) or 0.0) for r in records), 6)
            for phase, key in (("capture_ms", "capture_ms"), ("guard_ms", "guard_ms"),
                               ("backend_ms", "backend_ms"), ("total_ms", "total_ms"))}
        self.not_compiled = [(r.get("function", "?"), r.get("file", ""), int(r.get("line") or 0),
                              r.get("status", ""), (r.get("reason") or "").strip())
                             for r in records if r.get("status") != "compiled"]

    def __str__(self):
        return "\n".join(_render(self)) + "\n"

    def __repr__(self):
        return (f"ExplainOutput(graph_count={self.graph_count}, graph_break_count="
                f"{self.graph_break_count}, op_count={self.op_count}, "
                f"distinct_breaks={len(self.break_reasons)})")


def explain(fn, *extra_args, **extra_kwargs):
    """``dynamo.explain(fn)(*args, **kwargs)`` returns an ExplainOutput (see the module doc).
    The older ``dynamo.explain(fn, *args, **kwargs)`` still works, with a FutureWarning."""
    if extra_args or extra_kwargs:
        warnings.warn("dynamo.explain(f, *args, **kwargs) is deprecated; use "
                      "dynamo.explain(f)(*args, **kwargs) instead", FutureWarning, stacklevel=2)
        return explain(fn)(*extra_args, **extra_kwargs)

    def inner(*args, **kwargs):
        records = []
        listener = records.append
        eval_frame.reset()
        eval_frame.add_compile_listener(listener)
        try:
            result = eval_frame.compile(fn, backend="eager")(*args, **kwargs)
        finally:
            eval_frame.remove_compile_listener(listener)
            eval_frame.reset()
        return ExplainOutput(records, result)

    return inner


def _distinct_breaks(records):
    groups = collections.OrderedDict()
    for r in records:
        for b in r.get("breaks") or ():
            key = (b.get("kind", ""), b.get("file", ""), int(b.get("line") or 0))
            if key not in groups:
                groups[key] = BreakReason(b, r.get("function", "?"))
            elif r.get("function") not in groups[key].functions:
                groups[key].functions.append(r.get("function"))
            groups[key]._add(b)
    return list(groups.values())


# ---- the report -------------------------------------------------------------------------------

def _render(out):
    lines = [f"Graph Count: {out.graph_count}",
             f"Graph Break Count: {out.graph_break_count}",
             f"Op Count: {out.op_count}"]
    if out.break_reasons:
        lines.append(f"Break Reasons ({len(out.break_reasons)} distinct):")
        for i, b in enumerate(out.break_reasons, 1):
            lines.extend(_render_break(i, b))
    else:
        lines.append("Break Reasons: none")
    for fn, file, line, status, reason in out.not_compiled:
        lines.append(f"Not compiled: {fn} ({short_path(file)}:{line}) {status}: {reason.splitlines()[0] if reason else ''}".rstrip())
    if out.ops_per_graph:
        lines.append("Ops per Graph:")
        for i, (fn, ops) in enumerate(zip(out.graph_functions, out.ops_per_graph), 1):
            text = ", ".join(f"{op} x{n}" for op, n in sorted(ops.items())) or "(no ops)"
            lines.append(f"  {i}. {fn}: {text}")
    lines.append(_guard_summary(out.out_guards))
    t = out.compile_times
    lines.append(f"Compile Time: {t['total_ms']:.3f} ms (capture {t['capture_ms']:.3f}, "
                 f"guards {t['guard_ms']:.3f}, backend {t['backend_ms']:.3f})")
    return lines


def _render_break(index, b):
    times = f" ({b.count} times)" if b.count > 1 else ""
    lines = [f"  {index}. {b.kind} at {short_path(b.file)}:{b.line}{times}"]
    if b.source:
        lines.append(f"       {b.source}")
    if b.reason:
        lines.append(f"     why: {b.reason}")
    if b.hint:
        lines.append(f"     hint: {b.hint}")
    # The stack says more than the location only when the break sits in a called function.
    if len(b.user_stack) > 1:
        lines.append("     user stack (first occurrence, outermost first):")
        for s in b.user_stack:
            src = (s.get("source") or "").strip()
            where = f"{short_path(s.get('file', ''))}:{s.get('line', 0)}"
            lines.append(f"       {where}: {src}" if src else f"       {where}")
    return lines


def _guard_summary(guards):
    if not guards:
        return "Guards: none"
    kinds = collections.Counter(g.get("kind", "?") for g in guards)
    parts = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"Guards: {len(guards)} ({parts})"
