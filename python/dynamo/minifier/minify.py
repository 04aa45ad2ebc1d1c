"""dynamo-minify: shrinks the first graph whose compile or run fails in a backend to a small,
standalone repro.py that fails the same way (docs/minify.md).

    dynamo-minify [--after=dynamo] [--accuracy [--tol T]] [--isolate|--no-isolate]
                  [--resume DIR] [-o repro.py] script.py [args...]

1. checks that the output can be written; 2. runs the script with capture on (capture.py) and
finds the first failing graph (an exception, a crash, or with --accuracy a divergence from fp64
eager); 3. re-runs that graph alone twice (a different outcome means the failure is
nondeterministic); 4. shrinks it with the delta engine (engine.py), every query in a fork of a
server that imported torch and dynamo (a crash is a result); 5. writes repro.py and runs it in a
fresh process to check it reproduces the same failure. The script's run (2) and the repro's (5)
are forks of a second server that imported torch but not dynamo (script_runner.ForkRunner); both
servers are forked from cli/dynamo-minify, so one minification imports torch once.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

from dynamo.minifier import capture as _capture, defs, engine as _engine, repro as _repro
from dynamo.minifier import script_runner as _script_runner
from dynamo.minifier.fingerprint import Fingerprint, accuracy_fingerprint, fingerprint as _fingerprint
from dynamo.minifier.fork_server import ForkServer, QueryResult

PROG = "dynamo-minify"
_QUERIES = {"dynamo": "dynamo.minifier.query:run_dynamo", "aot": "dynamo.minifier.aot_stage:run_aot",
            "kernel": "dynamo.minifier.kernel_stage:run_kernel"}
_MAX_DIFFERENT_SHOWN = 3   # distinct other failures printed as they happen; the rest are counted


class UsageError(Exception):
    """A user error: printed as `dynamo-minify: error: ...` and exit status 2."""


def _say(msg):
    print(f"{PROG}: {msg}", file=sys.stderr, flush=True)


def parse_args(argv):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--after", choices=["dynamo", "aot", "kernel"], default=os.environ.get("DYNAMO_REPRO_AFTER") or "dynamo",
                   help="the stage whose failure to minify: dynamo (default: the backend's compile or "
                        "run of a captured graph) or aot (the AOT layer's forward or backward compiler "
                        "and the ATen graph it runs) or kernel (a graph of the fused backend, "
                        "compiled by the code generator alone)")
    p.add_argument("--accuracy", action="store_true",
                   default=os.environ.get("DYNAMO_REPRO_LEVEL", "").strip() == "4",
                   help="minify a divergence from an fp64 eager reference instead of an error")
    p.add_argument("--tol", type=float, default=1e-3,
                   help="accuracy tolerance, relative to each output's magnitude (default 1e-3)")
    iso = p.add_mutually_exclusive_group()
    iso.add_argument("--isolate", dest="isolate", action="store_true", default=True,
                     help="run each query in a fork of a server process (default): a crash is a result")
    iso.add_argument("--no-isolate", dest="isolate", action="store_false",
                     help="run queries in this process (faster start; a crash ends the run)")
    p.add_argument("--resume", metavar="DIR",
                   help="continue a stopped run from its work directory, or minify a capture "
                        "directory a DYNAMO_REPRO_AFTER run wrote")
    p.add_argument("--from-trace", metavar="TRACE_DB",
                   help="start from the trace store of a run that crashed: the script and its "
                        "arguments come from the store, the script is run again to capture the "
                        "crashed graph's input values")
    p.add_argument("-o", "--output", default="repro.py", help="the repro to write (default repro.py)")
    p.add_argument("--workdir", help="checkpoints and the original run's artifacts "
                                     "(default: <output without .py>_minify/)")
    p.add_argument("--trace", metavar="PATH",
                   help="trace store that records the script's run and the minification, every "
                        "step with its query count and time (default: WORKDIR/trace.db)")
    p.add_argument("--passes", help="comma-separated reduction passes to run (default: all, "
                                    "in reduction_passes.def order)")
    p.add_argument("--skip-passes", default="", help="comma-separated passes not to run")
    p.add_argument("--print-passes", action="store_true", help="list the reduction passes and exit")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per query (default 120)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument("script", nargs="?")
    p.add_argument("args", nargs=argparse.REMAINDER)
    return p.parse_args(argv)


def _pass_list(args, stage="dynamo"):
    """The passes to run for a stage: --passes (checked) or the stage's passes of
    reduction_passes.def (the kernel-only ones with --after=kernel only), less --skip-passes."""
    known = [p.name for p in defs.reduction_passes()]
    chosen = [x.strip() for x in args.passes.split(",") if x.strip()] if args.passes \
        else defs.stage_passes(stage)
    skip = [x.strip() for x in args.skip_passes.split(",") if x.strip()]
    for name in chosen + skip:
        if name not in known:
            raise UsageError(f"unknown reduction pass '{name}'\n  = hint: known passes: "
                             f"{', '.join(known)} (--print-passes)")
    return [n for n in chosen if n not in skip]


def check_output(path):
    """Fails before anything runs when the repro cannot be written."""
    folder = os.path.dirname(os.path.abspath(path)) or "."
    if os.path.isdir(path):
        raise UsageError(f"cannot write the repro to {path}: it is a directory\n"
                         f"  = hint: pass -o with a file name, e.g. -o {os.path.join(path, 'repro.py')}")
    if not os.path.isdir(folder):
        raise UsageError(f"cannot write the repro to {path}: folder {folder} does not exist\n"
                         f"  = hint: create it, or pass -o with a path in an existing folder")
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise UsageError(f"cannot write the repro to {path}: permission denied\n"
                         f"  = hint: pass -o with a writable path")


def _child_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNAMO_REPRO_")}
    env.pop("DYNAMO_TRACE", None)
    return env


def capture_env(capture_dir, args, trace=None, extra=None):
    """The environment of a run of the user's script with capture on (into capture_dir); with
    trace, the run's compiles are recorded into that trace store too; extra (dynamo-bisect's
    DYNAMO_* settings of the run) added last."""
    env = _child_env()
    if trace:
        env["DYNAMO_TRACE"] = trace
    # --after=kernel captures the graphs the backends get, as --after=dynamo does.
    env.update(DYNAMO_REPRO_AFTER="aot" if args.after == "aot" else "dynamo",
               DYNAMO_REPRO_DIR=capture_dir)
    if args.accuracy:
        env.update(DYNAMO_REPRO_LEVEL="4", DYNAMO_REPRO_TOL=repr(args.tol))
    env.update(extra or {})
    return env


def run_capture(script, script_args, capture_dir, args, trace=None, runner=None, extra=None):
    """Runs the user's script with capture on; returns (exit status, stderr tail). The runner
    (script_runner.py) is a fresh process per run by default, or dynamo-bisect's fork server;
    the script's stderr is kept in capture_dir/stderr.log."""
    os.makedirs(capture_dir, exist_ok=True)
    runner = runner or _script_runner.SubprocessRunner()
    return runner.run(script, script_args, capture_env(capture_dir, args, trace, extra),
                      os.path.join(capture_dir, "stderr.log"))


def failing_graph(capture_dir, status):
    """(graph index, Fingerprint) of the run's first failure; None when no graph failed."""
    events = _capture.read_events(capture_dir)
    fails = [e for e in events if e["event"] == "fail"]
    if fails:
        f = fails[0]
        if f["stage"] == "accuracy":
            return f["graph"], accuracy_fingerprint()
        return f["graph"], _fingerprint(QueryResult("exception", exc_type=f["exc_type"],
                                                    message=f["message"], traceback=f["traceback"]))
    if status < 0:  # killed by a signal: the graph that started and never ended
        ended = {e["graph"] for e in events if e["event"] in ("ok", "fail")}
        started = [e["graph"] for e in events if e["event"] == "start" and e["graph"] not in ended]
        if started:
            return started[-1], _fingerprint(QueryResult("crash", signal=-status))
    return None


class LocalRunner:
    """--no-isolate: queries in this process (a crash ends the minifier)."""

    queries = 0

    def query(self, target, *a, timeout=None, **kw):
        import traceback
        from dynamo.minifier.fork_server import _resolve
        self.queries += 1
        try:
            return QueryResult("ok", value=_resolve(target)(*a, **kw))
        except Exception as exc:
            return QueryResult("exception", exc_type=f"{type(exc).__module__}.{type(exc).__qualname__}",
                               message=str(exc), traceback=traceback.format_exc())

    def close(self):
        pass


def result_fingerprint(result: QueryResult):
    if result.kind == "ok":
        v = result.value or {}
        return accuracy_fingerprint() if "accuracy" in v else None
    return _fingerprint(result)


def launch_server(args, workdir, zygote=None):
    """The fork server, started at once (it imports torch while the script runs), or None for
    --no-isolate. The queries' own output (FX prints the traceback of a failing graph) goes to
    WORKDIR/queries.log. zygote: the server forked by cli/dynamo-minify after it imported torch
    (fork_server.Zygote), used instead of starting a fresh interpreter."""
    if not args.isolate:
        return None
    log = open(os.path.join(workdir, "queries.log"), "ab")
    server = ForkServer(preload=["torch", "dynamo"], warm=_script_runner.WARM, env=_child_env(),
                        stderr=log, zygote=zygote).launch()
    log.close()  # the server holds its own descriptor
    return server


class Minifier:
    def __init__(self, args, workdir, state, server=None):
        self.args, self.workdir, self.state = args, workdir, state
        self.fp = Fingerprint(**state["fingerprint"])
        self.runner = server if server is not None else LocalRunner()
        self.cache = {}
        self.different = {}
        self.writer = None
        if args.trace:
            # One run of the trace store per dynamo-minify invocation: its steps as artifacts.
            from dynamo import trace
            try:
                self.writer = trace.start_run(args.trace, argv=[PROG, *sys.argv[1:]])
            except trace.TraceStoreError as e:
                _say(f"not recording into the trace store: {e}")
        self.queries = state.get("queries", 0)

    def query(self, unit):
        self.queries += 1
        r = self.runner.query(_QUERIES[self.state["stage"]], unit.gm, list(unit.inputs), self.state["backend"],
                              self.state["config"], self.state["tol"], timeout=self.args.timeout)
        return result_fingerprint(r)

    def test(self, unit):
        key = unit.key()
        if key not in self.cache:
            got = self.query(unit)
            same = got == self.fp
            if got is not None and not same and got not in self.different:
                self.different[got] = self.queries
                if len(self.different) <= _MAX_DIFFERENT_SHOWN:
                    _say(f"query {self.queries} failed differently ({got.describe()}): "
                         f"counted as passing, not followed")
            self.cache[key] = same
        return self.cache[key]

    def checkpoint(self, unit, step):
        import torch
        self.record("dynamo.minify.step", step)
        from dynamo.minifier.unit import is_generated
        torch.save({"gm": unit.gm, "inputs": list(unit.inputs),
                    "generated": [is_generated(v) for v in unit.inputs]},
                   os.path.join(self.workdir, "checkpoint.pt.tmp"))
        os.replace(os.path.join(self.workdir, "checkpoint.pt.tmp"),
                   os.path.join(self.workdir, "checkpoint.pt"))
        self.state["steps"].append(step)
        self.state["queries"] = self.queries
        save_state(self.workdir, self.state)

    def record(self, name, data):
        """An artifact of this run in the trace store (JSON), on disk at once."""
        if self.writer is not None:
            self.writer.record_artifact(name, json.dumps(data, default=repr).encode(),
                                        "application/json")
            self.writer.flush()

    def progress(self, info):
        # Every accepted step, and every 10th query while nothing is accepted.
        if not self.args.quiet and (info["accepted"] or self.queries % 10 == 0):
            _say(f"[{info['pass']} granularity {info['granularity']}] nodes {info['size']}/"
                 f"{self.state['start_nodes']}, queries {self.queries}, {info['elapsed']:.1f} s"
                 f"{'  (smaller, kept)' if info['accepted'] else ''}")


def save_state(workdir, state):
    tmp = os.path.join(workdir, "state.json.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(state, f, indent=1, default=repr)
    os.replace(tmp, os.path.join(workdir, "state.json"))


def verify_repro(path, fp: Fingerprint, timeout, runner=None):
    """(reproduces, what happened): runs repro.py in a fresh process (the runner's: a fork of the
    run server, which has not imported dynamo, or a fresh interpreter)."""
    result_file = path + ".result.json"
    if os.path.exists(result_file):
        os.remove(result_file)
    env = _child_env()
    env["DYNAMO_REPRO_RESULT"] = result_file
    runner = runner or _script_runner.SubprocessRunner()
    status, _ = runner.run(path, [], env, os.devnull, timeout=timeout)
    if status is None:
        return False, "timed out"
    if status < 0:
        r = QueryResult("crash", signal=-status)
    elif os.path.exists(result_file):
        with open(result_file, encoding="utf-8") as f:
            r = QueryResult(**json.load(f))
        os.remove(result_file)
    else:
        r = QueryResult("exit", exit_code=status)
    got = result_fingerprint(r)
    return got == fp, (got.describe() if got else "no failure")


def _passes_changed(state) -> bool:
    """Whether the capture's accuracy failure was against a captured graph the passes changed."""
    return any(e["event"] == "fail" and e["graph"] == state["graph"] and e.get("passes_changed")
               for e in _capture.read_events(state["capture_dir"]))


def _write_repro(args, state, small, fp, cmd, kernel, runner=None):
    """Writes repro.py (and its inputs file) and runs it in a fresh process: (reproduces, what
    it gave)."""
    files = _repro.write(small, state["backend"], state["config"], state["tol"], fp.describe(),
                         args.output, cmd, state["stage"], kernel)
    stale = _repro.inputs_path(args.output)
    if os.path.exists(stale) and stale not in [p for p, _ in files]:
        os.remove(stale)   # the inputs of an earlier, larger repro of the same name
    for path, content in files:
        if isinstance(content, str):
            with open(path, "w", encoding="utf-8") as f:
                f.write(content)
        else:
            import torch
            torch.save(content, path)
    return verify_repro(args.output, fp, args.timeout, runner)


def _load_unit(d):
    import torch
    from dynamo.minifier import aot_stage
    from dynamo.minifier.unit import Unit
    from dynamo.minifier.unit import mark_generated
    blob = torch.load(d, weights_only=False)  # the tool's own unit (a GraphModule): not weights only
    mark_generated(blob["inputs"], blob.get("generated"))
    if blob.get("stage") == "aot":
        return aot_stage.load_unit(blob), blob
    return Unit(blob["gm"], tuple(blob["inputs"])), blob


def _start(args, workdir, trace_crash=None, runner=None):
    """The state of a new run: captures, finds the failing graph. None: nothing to minify."""
    capture_dir = os.path.join(workdir, "capture")
    if args.resume and os.path.exists(os.path.join(args.resume, "events.jsonl")):
        capture_dir, status, tail = args.resume, -1, ""
        if any(e["event"] == "fail" for e in _capture.read_events(capture_dir)):
            status = 1
    else:
        if os.path.isdir(capture_dir):
            shutil.rmtree(capture_dir)
        _say(f"running {args.script} with capture on (--after={args.after}"
             f"{', --accuracy' if args.accuracy else ''})")
        status, tail = run_capture(args.script, args.args, capture_dir, args, args.trace, runner)
    found = failing_graph(capture_dir, status)
    if trace_crash is not None:
        from dynamo.minifier import from_trace
        index = from_trace.matching_graph(capture_dir, trace_crash["graph"])
        if index is None or found is None or found[0] != index:
            _say(f"the crash recorded in {args.from_trace} did not happen again when {args.script} "
                 f"was re-run ({'no graph failed' if found is None else 'graph ' + str(found[0]) + ' failed: ' + found[1].describe()}"
                 f"{'' if index is not None else '; the crashed graph was not captured'}): the "
                 f"failure is nondeterministic or depends on the run's inputs; nothing written")
            return None, 1
    if found is None:
        if status == 0:
            _say(f"{args.script} ran without a failure in any compiled graph "
                 f"({'no output diverged beyond --tol ' + repr(args.tol) if args.accuracy else 'no backend error or crash'}): "
                 f"nothing to minify, nothing written")
            return None, 0
        _say(f"{args.script} fails ({tail or 'exit status ' + str(status)}), but no compiled graph "
             f"failed in its backend: the failure is in the script itself or outside Dynamo's "
             f"backends, not a compiler bug the minifier can shrink; nothing written")
        return None, 1
    index, fp = found
    path = os.path.join(capture_dir, f"graph_{index}.pt")
    if not os.path.exists(path):
        why = next((e.get("unsaved") for e in _capture.read_events(capture_dir)
                    if e["event"] == "start" and e["graph"] == index), "")
        _say(f"graph {index} fails ({fp.describe()}), but it could not be saved for minifying"
             f"{': ' + why if why else ''}; nothing written. This is a bug in dynamo-minify: "
             f"please report it with the script")
        return None, 1
    unit, blob = _load_unit(path)
    if args.after == "kernel" and blob["backend"]["name"] != "fused":
        _say(f"graph {index} failed in backend {blob['backend']['name']}, not in fused: "
             f"--after=kernel minifies a graph of the fused backend; nothing written\n"
             f"  = hint: use --after=dynamo for this backend")
        return None, 2
    state = {"script": args.script, "args": args.args,
             "stage": "kernel" if args.after == "kernel" else blob.get("stage", "dynamo"),
             "kind": blob.get("kind", "graph"), "graph": index,
             "capture_dir": os.path.abspath(capture_dir), "fingerprint": fp.__dict__,
             "backend": blob["backend"], "config": blob["config"],
             "tol": args.tol if fp.kind == "accuracy" else None, "start_nodes": unit.size(),
             "queries": 0, "steps": [], "output": args.output}
    with open(os.path.join(workdir, "original_graph.py"), "w", encoding="utf-8") as f:
        f.write(_repro.graph_code(unit.gm, "Original"))
    what = (f"{blob['kind']} graph {index} of {blob['aot_backend']} ({unit.size()} ATen nodes, "
            f"compiler {blob['backend']['name']})" if state["stage"] == "aot" else
            f"graph {index} ({unit.size()} nodes, backend {blob['backend']['name']})")
    _say(f"{what} fails: {fp.describe()}")
    return (state, unit), 0


def main(argv=None, zygote=None, run_zygote=None):
    """The tool. zygote: the query server, run_zygote: the server of the script's runs (the
    capture and the repro's check), both forked by cli/dynamo-minify before it imported dynamo
    (fork_server.Zygote); ended here when they are not used (--no-isolate, an error)."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return _main(args, zygote, run_zygote)
    except UsageError as e:
        _say(f"error: {e}")
        return 2
    finally:
        for z in (zygote, run_zygote):
            if z is not None:
                z.close()   # a no-op once a ForkServer adopted it


def _main(args, zygote=None, run_zygote=None):
    if args.print_passes:
        for p in defs.reduction_passes():
            print(f"{p.name:22} {'(--after=kernel only) ' if p.kernel_only else ''}{p.description}")
        return 0
    passes = _pass_list(args)
    check_output(args.output)
    resume_work = args.resume and os.path.exists(os.path.join(args.resume, "state.json"))
    if args.resume and not resume_work and not os.path.exists(os.path.join(args.resume, "events.jsonl")):
        raise UsageError(f"--resume {args.resume}: not a dynamo-minify work directory (no state.json) "
                         f"nor a capture directory (no events.jsonl)\n"
                         f"  = hint: pass the directory a stopped dynamo-minify run printed")
    trace_crash = None
    if args.from_trace:
        from dynamo.minifier import from_trace
        try:
            trace_crash = from_trace.crashed_run(args.from_trace)
        except from_trace.FromTraceError as e:
            raise UsageError(str(e)) from None
        if not args.script:
            args.script, args.args = trace_crash["argv"][0], trace_crash["argv"][1:]
        _say(f"{args.from_trace}: {trace_crash['crash']['text']}; running {args.script} again "
             f"to capture the graph's input values")
    if not args.resume:
        if not args.script:
            raise UsageError("no script given\n  = hint: dynamo-minify [options] script.py [args...]")
        if not os.path.isfile(args.script):
            raise UsageError(f"no such script: {args.script}\n  = hint: pass the path of the Python script that fails")
    workdir = args.resume if resume_work else (
        args.workdir or os.path.splitext(os.path.abspath(args.output))[0] + "_minify")
    os.makedirs(workdir, exist_ok=True)
    if args.trace is None:
        args.trace = os.path.join(workdir, "trace.db")
    start = time.monotonic()
    server = launch_server(args, workdir, zygote)
    runner = None
    try:
        # The script's runs in forks of a server that imported torch and the script's imports
        # but not dynamo (script_runner.ForkRunner, as dynamo-bisect's runs): a fresh process
        # for everything dynamo reads at import; a fresh interpreter where that cannot be.
        script = args.script or (args.resume and _resume_script(args.resume))
        runner = _script_runner.make_runner(script or "", _child_env(), True, PROG,
                                            run_zygote)
        return _minify(args, workdir, resume_work, start, passes, server, trace_crash, runner)
    finally:
        if server is not None:
            server.close()
        if runner is not None:
            runner.close()


def _resume_script(workdir):
    """The script of the stopped run in workdir (its state.json), or None."""
    try:
        with open(os.path.join(workdir, "state.json"), encoding="utf-8") as f:
            return json.load(f).get("script")
    except (OSError, ValueError):
        return None


def _minify(args, workdir, resume_work, start, passes, server, trace_crash, runner):
    if resume_work:
        with open(os.path.join(workdir, "state.json"), encoding="utf-8") as f:
            state = json.load(f)
        ck = os.path.join(workdir, "checkpoint.pt")
        unit, _ = _load_unit(ck if os.path.exists(ck) else
                             os.path.join(state["capture_dir"], f"graph_{state['graph']}.pt"))
        if args.output == "repro.py":
            args.output = state["output"]
        _say(f"resuming from {workdir}: {unit.size()} nodes, {state['queries']} queries so far")
    else:
        started, code = _start(args, workdir, trace_crash, runner)
        if started is None:
            shutil.rmtree(workdir, ignore_errors=True)
            return code
        state, unit = started
        save_state(workdir, state)
    m = Minifier(args, workdir, state, server)
    m.record("dynamo.minify.start", {k: state[k] for k in (
        "script", "args", "stage", "graph", "fingerprint", "backend", "start_nodes", "queries")})
    try:
        if not resume_work:
            outcomes = [m.query(unit) for _ in range(2)]
            if any(o != m.fp for o in outcomes) and _passes_changed(state) and not any(outcomes):
                _say(f"graph {state['graph']} diverges in the run from the graph Dynamo captured "
                     f"(the fp64 reference, taken before the pass pipeline), but the graph the "
                     f"passes made and the backend got does not diverge from itself when run alone: "
                     f"a pass of passes.def changed its values. Not minified\n"
                     f"  = hint: dynamo-bisect --accuracy --tol {args.tol!r} "
                     f"{state['script'] or 'script.py'}"
                     f"{' ' + ' '.join(state['args']) if state['args'] else ''} names the pass and "
                     f"its bad application")
                return 1
            if any(o != m.fp for o in outcomes):
                seen = "; ".join(f"query {i + 1}: {o.describe() if o else 'no failure'}"
                                 for i, o in enumerate(outcomes))
                _say(f"the failure is nondeterministic: graph {state['graph']} failed in the run with "
                     f"{m.fp.describe()}, but run alone again: {seen}. Not minified; the graph and "
                     f"its inputs are in {state['capture_dir']}")
                return 1
        eng = _engine.Engine(m.test, _pass_list(args, state["stage"]), m.progress, m.checkpoint)
        eng.queries = m.queries
        small = eng.run(unit)
    finally:
        m.runner.close()
    cmd = "dynamo-minify " + " ".join([f"--after={state['stage']}",
                                       *(["--accuracy", "--tol", repr(state["tol"])] if state["tol"] else []),
                                       "-o", args.output, str(state["script"]), *state["args"]])
    kernel = None
    if state["stage"] == "kernel":
        from dynamo.minifier import kernel_stage
        kernel = kernel_stage.single_kernel(small)
    ok, what = _write_repro(args, state, small, m.fp, cmd, kernel, runner)
    if kernel is not None and not ok:
        _say(f"the repro of kernel {kernel['name']} alone does not reproduce the failure (it gave: "
             f"{what}); writing the repro that runs the graph through the code generator instead")
        kernel = None
        ok, what = _write_repro(args, state, small, m.fp, cmd, None, runner)
    state["queries"] = m.queries
    state["result"] = {"nodes": small.size(), "ops": small.op_kinds(), "reproduces": ok,
                       "elapsed_s": round(time.monotonic() - start, 2)}
    save_state(workdir, state)
    m.record("dynamo.minify.result", dict(state["result"], queries=m.queries))
    if m.writer is not None:
        from dynamo import trace
        trace.end_run()
    if len(m.different) > _MAX_DIFFERENT_SHOWN:
        _say(f"{len(m.different)} queries failed in other ways in all (counted as passing, not "
             f"followed); their output is in {os.path.join(workdir, 'queries.log')}")
    if kernel is not None:
        _say(f"the minified graph is one kernel, {kernel['name']}: repro.py compiles and runs its C++ "
             f"source alone")
    elif state["stage"] == "kernel":
        from dynamo.minifier import kernel_stage
        kernels = kernel_stage.describe_kernels(small.gm, small.inputs)
        _say(f"the minified graph is {kernels}" if kernels else
             "the minified graph does not compile to kernels (the failure is in the code generator or "
             "the kernel compiler): repro.py shows it")
    _say(f"minified graph {state['graph']} from {state['start_nodes']} to {small.size()} node(s) "
         f"({', '.join(small.op_kinds())}) in {m.queries} queries, {time.monotonic() - start:.1f} s")
    if ok:
        _say(f"wrote {args.output}: it reproduces the failure in a fresh process ({m.fp.describe()})")
        _say(f"the original graph, its inputs and the backend config are in {workdir}")
        return 0
    _say(f"wrote {args.output}, but it does NOT reproduce the failure in a fresh process "
         f"(it gave: {what}); the original graph and inputs are in {workdir}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
