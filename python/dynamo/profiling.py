"""dynamo.profile_recompiles(): why functions recompile, and what to change.

    with dynamo.profile_recompiles() as prof:
        for batch in loader:
            model(batch)
    print(prof.report())

While the block runs every compile record is kept. ``report()`` groups them per function: the
compiles, each recompile's failed guards (kind, source, expected and seen value, the user line that
created the guard), cache_size_limit hits and the calls that ran eagerly after one, compile time,
and suggestions for known patterns (a tensor size that changes between calls, a global rebound
between calls, a Python int or float argument that varies, the cache limit hit).

Eager runs after a cache-limit hit are counted with ``sys.setprofile`` on the thread that hit the
limit, installed only from that moment (none before, so no cost while nothing hits the limit)
and only when no other profiler is set; ``count_eager_runs=False`` turns it off.

The report is rendered here, from the records in memory, not by the C++ report over a trace store
(``dynamo._C._reports.profile_report``): the eager-run counts and the suggestions exist only here,
and no store is needed. See docs/logs.md.
"""
import collections
import json
import re
import sys
import threading

from dynamo import eval_frame
from dynamo.logs import created_at_text, reason_entries
from dynamo.utils import short_path

__all__ = ["profile_recompiles", "RecompileProfile"]

_EXPECTED_GOT = re.compile(r"expected (.*), got (.*)$")
_DIM = re.compile(r" mismatch at dim (\d+)")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_GLOBAL = re.compile(r"^G\['([^']+)'\]$")
_MAX_RECOMPILES_SHOWN = 5


def profile_recompiles(count_eager_runs=True):
    """A context manager collecting compile records; ``.report()`` explains the recompiles."""
    return RecompileProfile(count_eager_runs)


class Failure:
    """One failed guard of a recompile: the guarded source and its guard kind, the failure text,
    expected and seen values (when the guard says them), the tensor dim, the line that created the
    guard, and how many cached entries failed on this source."""

    __slots__ = ("source", "kind", "text", "expected", "got", "dim", "created", "entries")

    def __init__(self, text, created, sources):
        self.text, self.created, self.entries = text, created, 1
        self.source = _find_source(text, sources)
        self.kind = sources.get(self.source, _kind_from_text(text))
        m = _EXPECTED_GOT.search(text)
        self.expected, self.got = (m.group(1), m.group(2)) if m else (None, None)
        d = _DIM.search(text)
        self.dim = int(d.group(1)) if d else None

    def as_dict(self):
        return {k: getattr(self, k) for k in self.__slots__}


class RecompileProfile:
    """Collects compile records while active (``with`` block); ``report()`` renders them."""

    def __init__(self, count_eager_runs=True):
        self.records = []
        self._count_eager = count_eager_runs
        self._limited = {}          # (file, line, function) -> eager runs after the cache limit
        self._profiling = False
        self._lock = threading.Lock()

    def __enter__(self):
        eval_frame.add_compile_listener(self._on_compile)
        return self

    def __exit__(self, *exc):
        eval_frame.remove_compile_listener(self._on_compile)
        if self._profiling and sys.getprofile() is self._on_call:
            sys.setprofile(None)
        self._profiling = False
        return False

    # -- collecting ----------------------------------------------------------------------------

    def _on_compile(self, record):
        with self._lock:
            self.records.append(record)
            if record.get("status") != "cache-limit":
                return
            key = (record.get("file", ""), int(record.get("line") or 0), record.get("function", ""))
            if self._count_eager and not self._profiling and sys.getprofile() is None:
                self._profiling = True
                sys.setprofile(self._on_call)
            # The call that hit the limit runs eagerly after this returns: its "call" event is
            # the first one counted. None: not counted (off, or another profiler is set).
            self._limited.setdefault(key, 0 if self._profiling else None)

    def _on_call(self, frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        key = (code.co_filename, code.co_firstlineno, code.co_qualname)
        if self._limited.get(key) is not None and not _is_transformed(code):
            self._limited[key] += 1

    # -- the report ----------------------------------------------------------------------------

    def summary(self):
        """The report as data: one dict per function, in first-compile order."""
        functions = collections.OrderedDict()
        for r in self.records:
            key = (r.get("file", ""), int(r.get("line") or 0), r.get("function", "?"))
            functions.setdefault(key, []).append(r)
        return [_function_summary(key, recs, self._limited.get(key)) for key, recs in functions.items()]

    def report(self, fmt="text"):
        """``fmt="text"``: the readable report; ``fmt="json"``: summary() as JSON."""
        if fmt == "json":
            return json.dumps(self.summary(), indent=2, default=lambda o: o.as_dict())
        if fmt != "text":
            raise ValueError(f"report(fmt={fmt!r}): fmt must be 'text' or 'json'")
        return _render(self.summary())


def _is_transformed(code):
    from dynamo import _C
    return any(isinstance(c, _C.CompiledGraph) for c in code.co_consts)


def _find_source(text, sources):
    # The failure text quotes the guarded source ("tensor 'x' ...", "'G['SCALE']' changed").
    for s in sorted(sources, key=len, reverse=True):
        if s and f"'{s}'" in text:
            return s
    m = re.search(r"'(.+?)'(?: |$)", text)
    return m.group(1) if m else ""


def _kind_from_text(text):
    if text.startswith("grad mode"):
        return "GRAD_MODE"
    if text.startswith("default dtype"):
        return "DEFAULT_DTYPE"
    if text.startswith("tensor "):
        return "TENSOR_MATCH"
    return "?"


def _function_summary(key, recs, eager_runs):
    file, line, function = key
    sources = {}
    recompiles = []
    cache_limit = None
    for r in recs:
        if r.get("status") == "compiled" and int(r.get("attempt") or 0) > 0 and (r.get("reason") or "").strip():
            recompiles.append({"attempt": int(r["attempt"]), "failures": _failures(r["reason"], sources)})
        elif r.get("status") == "cache-limit":
            last = (r.get("reason") or "").partition("last reason: ")[2]
            cache_limit = {"after_compiles": int(r.get("attempt") or 0),
                           "last_reason": _failures(last, sources), "eager_runs": eager_runs}
        for g in r.get("guards") or ():
            sources.setdefault(g.get("source", ""), g.get("kind", "?"))
    compiled = [r for r in recs if r.get("status") == "compiled"]
    out = {"function": function, "file": file, "line": line, "compiles": len(compiled),
           "recompiles": recompiles, "cache_limit": cache_limit,
           "not_compiled": [(r.get("status"), (r.get("reason") or "").strip())
                            for r in recs if r.get("status") in ("skipped", "failed")],
           "compile_ms": round(sum(float(r.get("total_ms") or 0.0) for r in recs), 6)}
    out["suggestions"] = _suggestions(out)
    return out


def _failures(reason, sources):
    """Failed guards of one recompile, one per guarded source (the newest entry's first)."""
    by_source = collections.OrderedDict()
    for text, created in reason_entries(reason):
        f = Failure(text, created, sources)
        key = (f.source, f.kind, f.dim)
        if key in by_source:
            by_source[key].entries += 1
        else:
            by_source[key] = f
    return list(by_source.values())


# ---- suggestions --------------------------------------------------------------------------------

def _suggestions(fs):
    """Known patterns over one function's recompiles, each with what to do."""
    sizes, globals_, scalars = collections.OrderedDict(), collections.OrderedDict(), collections.OrderedDict()
    for rc in fs["recompiles"]:
        for fl in rc["failures"]:   # one per guarded source: each counts once per recompile
            if fl.kind == "TENSOR_MATCH" and fl.dim is not None and "size mismatch" in fl.text:
                _values(sizes, (fl.source, fl.dim), fl)
            elif _GLOBAL.match(fl.source or ""):
                _values(globals_, _GLOBAL.match(fl.source).group(1), fl)
            elif fl.kind == "EQUALS_MATCH" and _IDENT.match(fl.source or "") and _is_number(fl.got):
                _values(scalars, fl.source, fl)
    out = []
    for (src, dim), (n, vals) in sizes.items():
        out.append(f"dim {dim} of tensor '{src}' changed in {n} recompile{_s(n)} (sizes {_list(vals)}): "
                   f"sizes are specialised, so every new size compiles again. Pad or bucket the "
                   f"input to a few fixed sizes, or compile only the part whose sizes are fixed.")
    for name, (n, vals) in globals_.items():
        out.append(f"the global '{name}' was rebound in {n} recompile{_s(n)} (values {_list(vals)}): "
                   f"its value is a constant of the graph. Keep it fixed while compiled code runs, "
                   f"or hold it in a tensor updated in place ({name}.fill_(v)) or pass it as a tensor argument.")
    for name, (n, vals) in scalars.items():
        out.append(f"the Python number '{name}' varied in {n} recompile{_s(n)} (values {_list(vals)}): "
                   f"each value is a constant of its own graph. Pass it as a tensor "
                   f"(torch.tensor({name})) when it changes from call to call.")
    limit = fs["cache_limit"]
    if limit is not None:
        runs = limit["eager_runs"]
        ran = f"; {runs} call{_s(runs)} ran eagerly from then on" if runs else ""
        out.append(f"hit cache_size_limit after {limit['after_compiles']} compiles{ran}. Fix the "
                   f"recompile cause above; raise dynamo.config.cache_size_limit only when the "
                   f"number of variants is small and bounded.")
    return out


def _values(groups, key, failure):
    n, vals = groups.get(key, (0, []))
    for v in (failure.expected, failure.got):
        if v is not None and v not in vals:
            vals.append(v)
    groups[key] = (n + 1, vals)


def _is_number(text):
    try:
        float(text)
        return True
    except (TypeError, ValueError):
        return False


def _s(n):
    return "" if n == 1 else "s"


def _list(values, limit=6):
    shown = ", ".join(values[:limit])
    return shown + (f", ... ({len(values)} in all)" if len(values) > limit else "")


# ---- text ---------------------------------------------------------------------------------------

def _render(summaries):
    if not summaries:
        return "Recompile profile: no compiles while profiling\n"
    compiles = sum(f["compiles"] for f in summaries)
    recompiles = sum(len(f["recompiles"]) for f in summaries)
    limited = sum(1 for f in summaries if f["cache_limit"])
    lines = [f"Recompile profile: {len(summaries)} function{_s(len(summaries))}, {compiles} "
             f"compile{_s(compiles)}, {recompiles} recompile{_s(recompiles)}, "
             f"{limited} hit cache_size_limit"]
    # Functions that recompiled or hit the limit first; the others on one line each.
    for f in sorted(summaries, key=lambda f: (not (f["recompiles"] or f["cache_limit"]))):
        lines.append("")
        lines.extend(_render_function(f))
    return "\n".join(lines) + "\n"


def _render_function(f):
    head = (f"{f['function']} ({short_path(f['file'])}:{f['line']}): {f['compiles']} "
            f"compile{_s(f['compiles'])}, {len(f['recompiles'])} recompile{_s(len(f['recompiles']))}, "
            f"{f['compile_ms']:.3f} ms compiling")
    lines = [head]
    for status, reason in f["not_compiled"]:
        lines.append(f"  {status}: {reason.splitlines()[0] if reason else ''}".rstrip())
    shown = f["recompiles"][:_MAX_RECOMPILES_SHOWN]
    for rc in shown:
        lines.extend(_render_failures(f"  recompile {rc['attempt']}: ", rc["failures"]))
    hidden = len(f["recompiles"]) - len(shown)
    if hidden > 0:
        lines.append(f"  ... {hidden} more recompile{_s(hidden)} (see the suggestions; "
                     f"report(fmt='json') lists all)")
    limit = f["cache_limit"]
    if limit is not None:
        runs = limit["eager_runs"]
        tail = f"; then {runs} eager run{_s(runs)}" if runs is not None else ""
        lines.append(f"  cache_size_limit hit after {limit['after_compiles']} compiles{tail}")
        lines.extend(_render_failures("    last reason: ", limit["last_reason"]))
    if f["suggestions"]:
        lines.append("  suggestions:")
        lines.extend(f"    - {s}" for s in f["suggestions"])
    return lines


def _render_failures(lead, failures):
    lines = []
    pad = " " * len(lead)
    for i, fl in enumerate(failures):
        more = f" (and {fl.entries - 1} older entr{'y' if fl.entries == 2 else 'ies'})" if fl.entries > 1 else ""
        lines.append(f"{lead if i == 0 else pad}[{fl.kind}] {fl.text}{more}")
        if fl.created:
            lines.append(f"{pad}  guard created at {created_at_text(fl.created)}")
    return lines

