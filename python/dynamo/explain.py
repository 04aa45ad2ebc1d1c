"""dynamo.explain(fn)(*args): why a function splits into several graphs, as data and as a report.

It resets Dynamo, runs ``fn`` once compiled with the eager backend while recording every compile
(the frame itself, the resume functions after each break, the functions it calls) into a private
trace store, resets again, and returns an ``ExplainOutput`` built from that store by the C++
report dynamo-explain renders (``dynamo._C._reports.explain_run``): the same op names
(common/op_key.h), the same grouping of breaks by (kind, file, line) and the same occurrence
counts (storage::BreakTally: a break met on every pass of a loop counts each pass), and its text
is ``explain::renderExplainSummary``.

    >>> out = dynamo.explain(f)(x)
    >>> out.graph_count, out.graph_break_count, [b.kind for b in out.break_reasons]
    (3, 2, ['print', 'data-dependent-branch'])
    >>> print(out)
"""
import os
import shutil
import tempfile
import warnings

from dynamo import _C, eval_frame, recording
from dynamo.utils import short_path

__all__ = ["explain", "ExplainOutput", "BreakReason"]


class BreakReason:
    """One distinct graph break: where (kind, file, line, source line), why, the fix, the user
    stack of its first occurrence (outermost first) and how many times the program passed it
    (``count``: occurrences, as dynamo-explain counts them) in how many compiles."""

    __slots__ = ("kind", "file", "line", "source", "detail", "explanation", "hint", "user_stack",
                 "count", "functions", "compiles", "reason")

    def __init__(self, group, first):
        # group: a break of explain_run(); first: the compile record's break of its first
        # occurrence (its user stack as data), or {}.
        self.kind = group["kind"]
        self.file = group["file"]
        self.line = group["line"]
        self.source = group["source"].strip()
        #: One line, ``detail: explanation`` (PyTorch's break_reasons[i].reason).
        self.reason = group["explanation"]
        self.detail = first.get("detail", "")
        self.explanation = first.get("explanation", self.reason)
        self.hint = group["hint"]
        self.user_stack = [dict(s) for s in first.get("user_stack") or ()]
        self.count = group["count"]
        self.compiles = group["compiles"]
        self.functions = list(group["functions"])

    def __repr__(self):
        return f"BreakReason({self.kind!r} at {short_path(self.file)}:{self.line}, count={self.count})"


class ExplainOutput:
    """What ``dynamo.explain(fn)(*args)`` found.

    graphs: printed graph texts, in compile order; graph_count: len(graphs).
    graph_break_count: graph break occurrences, summed over break_reasons (a break in a loop that
      four calls pass counts 4; a break in a called function, met by the caller's compile and
      by the callee's own, counts once); break_reasons: the distinct breaks (BreakReason, .count),
      most frequent first.
    op_count: ops over all graphs; ops_per_graph: {qualified op: count} per graph.
    out_guards: the guard dicts of every compiled entry; guard_kinds: {kind: guards}.
    compile_times: milliseconds per phase (capture, guards, backend) and total, summed.
    not_compiled: (function, file, line, status, reason) for compiles that made no cache entry.
    result: what fn returned. records: the raw compile records.
    """

    def __init__(self, records, result, report):
        self.records = records
        self.result = result
        self.graphs = [g["text"] for g in report["graphs"]]
        self.graph_functions = [g["function"] for g in report["graphs"]]
        self.graph_count = len(self.graphs)
        self.ops_per_graph = [dict(g["op_counts"]) for g in report["graphs"]]
        self.op_count = report["ops"]
        firsts = {}
        for r in records:
            for b in r.get("breaks") or ():
                firsts.setdefault((b.get("kind"), b.get("file"), b.get("line")), b)
        self.break_reasons = [BreakReason(g, firsts.get((g["kind"], g["file"], g["line"]), {}))
                              for g in report["breaks"]]
        self.graph_break_count = report["break_occurrences"]
        self.out_guards = [dict(g) for r in records if r.get("status") == "compiled"
                           for g in r.get("guards") or ()]
        self.guard_kinds = dict(report["guard_kinds"])
        self.compile_times = {k: round(v, 6) for k, v in report["compile_times"].items()}
        self.not_compiled = [tuple(row) for row in report["not_compiled"]]
        self._text = report["summary"]

    def __str__(self):
        return self._text

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
        tmp = tempfile.mkdtemp(prefix="dynamo-explain-")
        try:
            path = os.path.join(tmp, "explain.db")
            eval_frame.reset()
            eval_frame.add_compile_listener(listener, listings=False)
            try:
                with recording.private_run(path):
                    result = eval_frame.compile(fn, backend="eager")(*args, **kwargs)
            finally:
                eval_frame.remove_compile_listener(listener)
                eval_frame.reset()
            report = _C._reports.explain_run(path, root_dir=os.getcwd())
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return ExplainOutput(records, result, report)

    return inner
