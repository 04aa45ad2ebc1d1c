"""dynamo.profile_recompiles(): why functions recompile, and what to change.

    with dynamo.profile_recompiles() as prof:
        for batch in loader:
            model(batch)
    print(prof.report())                 # or report(fmt="json" | "markdown" | "junit" | "sarif")

The block records every compile into a trace store and ``report()`` is the C++ recompile report
over it (``dynamo._C._reports.profile_report``, the one ``dynamo-profile`` prints): per function
the compiles, each recompile's failed guard (kind, source, dim, expected and seen value, the user
line that created the guard), cache_size_limit hits, compile time, and suggestions for known
patterns. See docs/logs.md.

    recording on already (DYNAMO_TRACE, dynamo.recording.enable)?
        yes: its store and run; the report keeps the compiles that ended while the block ran
        no:  a temporary store, recorded into while the block runs, deleted with the profile

Eager runs after a cache-limit hit are counted with ``sys.setprofile`` on the thread that hit the
limit, installed only from that moment (none before, so no cost while nothing hits the limit)
and only when no other profiler is set; ``count_eager_runs=False`` turns it off. When the block
ends the counts go into the store as the ``dynamo.eager_runs`` artifact, which the report shows.
"""
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import weakref

from dynamo import _C, eval_frame, recording, trace

__all__ = ["profile_recompiles", "RecompileProfile", "EAGER_RUNS_ARTIFACT"]

#: The artifact holding the calls that ran eagerly after each cache-limit hit (text/plain, one
#: "compile_id calls" line each); profiler/include/dynamo/profiler/profile_report.h reads it.
EAGER_RUNS_ARTIFACT = "dynamo.eager_runs"


def profile_recompiles(count_eager_runs=True):
    """A context manager recording the compiles of its block; ``.report()`` explains the
    recompiles."""
    return RecompileProfile(count_eager_runs)


class RecompileProfile:
    """Records compiles while active (``with`` block); ``report()`` renders them."""

    def __init__(self, count_eager_runs=True):
        self._count_eager = count_eager_runs
        self._limited = {}          # (file, line, function) -> eager runs after the cache limit
        self._profiling = False
        self._lock = threading.Lock()
        self._writer = None         # the TraceWriter recorded into
        self._path = None           # its file
        self._run_id = None
        self._since_us = 0          # the block's window, in recording.py's clock
        self._until_us = 0          # 0 while the block runs
        self._restore = None        # recording.record_into's restore(), for a run started here

    def __enter__(self):
        self._since_us = _now_us()
        if recording.is_enabled() and trace.current_run() is not None:
            self._writer = trace.current_run()
        elif trace._run is not None and trace._run_pid == os.getpid():
            # A run is open but compiles are not recorded: record into it while the block runs.
            self._writer, self._restore = recording.record_into(trace._run.path)
        else:
            tmp = tempfile.mkdtemp(prefix="dynamo-profile-")
            weakref.finalize(self, shutil.rmtree, tmp, True)
            self._writer, self._restore = recording.record_into(os.path.join(tmp, "profile.db"))
        if self._writer is not None:
            self._path, self._run_id = self._writer.path, self._writer.run_id
        eval_frame.add_compile_listener(self._on_compile, listings=False)
        return self

    def __exit__(self, *exc):
        eval_frame.remove_compile_listener(self._on_compile)
        if self._profiling and sys.getprofile() is self._on_call:
            sys.setprofile(None)
        self._profiling = False
        self._until_us = _now_us()
        try:
            if self._writer is not None and not self._writer.closed:
                self._record_eager_runs()
                self._writer.flush()
        finally:
            if self._restore is not None:
                self._restore()
                self._restore = None
        return False

    # -- eager runs after a cache-limit hit -----------------------------------------------------

    def _on_compile(self, record):
        if record.get("status") != "cache-limit":
            return
        with self._lock:
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

    def _record_eager_runs(self):
        counted = {k: n for k, n in self._limited.items() if n is not None}
        if not counted:
            return
        self._writer.flush()
        lines = []
        with trace.open(self._path) as store:
            for frame in store.frames(self._run_id):
                n = counted.get((frame["file"], frame["first_line"], frame["name"]))
                if n is None:
                    continue
                hits = [c["id"] for c in store.compiles(frame_id=frame["id"])
                        if c["status"] == "cache_limit" and self._in_window(c)]
                if hits:  # the count is per function: it goes to its first hit of the block
                    lines.append(f"{hits[0]} {n}\n")
        if lines:
            self._writer.record_artifact(EAGER_RUNS_ARTIFACT, "".join(lines).encode(),
                                         media_type="text/plain")

    def _in_window(self, compile_row):
        end = compile_row["start_time_us"] + compile_row["duration_us"]
        return end >= self._since_us and (not self._until_us or end <= self._until_us)

    # -- the report ----------------------------------------------------------------------------

    def report(self, fmt="text", masked=False):
        """The recompile report of the block: ``fmt`` text, json, markdown, junit or sarif
        (dynamo.UserError for another). ``masked``: times, pids and versions masked, files by
        base name (for golden tests)."""
        if self._path is None:
            raise RuntimeError("profile_recompiles: nothing was recorded: the trace store could not "
                               "be opened (see the TraceWarning above)")
        if self._writer is not None and not self._writer.closed:
            self._writer.flush()
        return _C._reports.profile_report(self._path, fmt, run_id=self._run_id, masked=masked,
                                          since_us=self._since_us, until_us=self._until_us,
                                          root_dir=os.getcwd())

    def summary(self):
        """The report as data: the JSON report's functions (name, file, line, compiles,
        recompiles, cache_limit_hits, eager_runs when counted, recompile_reasons with their
        parsed failures, suggestions), most compiles first."""
        runs = json.loads(self.report("json"))["runs"]
        return runs[0]["functions"] if runs else []


def _is_transformed(code):
    return any(isinstance(c, _C.CompiledGraph) for c in code.co_consts)


def _now_us():
    # recording.py's clock: compile end times and guard failure times are in it.
    return time.time_ns() // 1000
