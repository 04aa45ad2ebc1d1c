"""dynamo-bisect: finds which backend, pass or decomposition group, graph and (with --accuracy)
node a failure comes from, and prints the command that reproduces each step by hand
(docs/bisect.md). The steps are those of minifier/bisect_ladder.def:

  1. backend: the script runs with each backend of the ladder (eager, aot_eager,
     aot_eager_decomp_partition, fused) in place of its own (DYNAMO_BISECT_BACKEND), to the first
     that fails;
  2. pass / decomposition: inside that backend, every pass of passes.def is disabled
     (DYNAMO_DISABLE_PASSES), then the decomposition groups (DYNAMO_AOT_DISABLE_DECOMPS, a binary
     search over the groups); a subsystem whose disabling makes the failure go away is named;
     for a pass, a binary search over how many of its applications go ahead
     (DYNAMO_BISECT_PASS=name:N) then names the one application, the node it rewrote, that
     brings the failure;
  3. graph: the first graph of the run whose compile or run fails (the capture of
     DYNAMO_REPRO_AFTER=dynamo);
  4. node (--accuracy): the first node of that graph whose value diverges from fp64 eager
     (a binary search over the graph cut after each node, each cut a query in a fork of the
     same server).

Every run of the script is a fork of a server that imported torch, the torch modules a compile
imports and the script's imports once (script_runner.py; --no-fork-server or a server that
cannot fork safely: a fresh process per run, the node queries in a server of their own), with its
settings in its environment, and a crash of it is a result; all state
lives in this bisection's own directory (--workdir, default ./dynamo_bisect/run-<time>-<pid>):
the captures, result.json and trace.db (each run of the script, then the bisection itself as a
run whose artifacts are its steps). Nothing changes what later ordinary runs do.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time

from dynamo.minifier import capture as _capture, defs
from dynamo.minifier import minify as _minify

PROG = "dynamo-bisect"


def _say(msg):
    print(f"{PROG}: {msg}", file=sys.stderr, flush=True)


def parse_args(argv):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--accuracy", action="store_true",
                   help="bisect a divergence from fp64 eager instead of an error or crash")
    p.add_argument("--tol", type=float, default=1e-3, help="accuracy tolerance (default 1e-3)")
    p.add_argument("--backends", help="comma-separated backend ladder to climb instead of "
                                      "bisect_ladder.def's (e.g. to skip rungs known to pass)")
    p.add_argument("--workdir", help="this bisection's directory (default ./dynamo_bisect/run-<time>-<pid>)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per node query")
    p.add_argument("--no-fork-server", dest="fork_server", action="store_false",
                   help="run the script in a fresh process per run instead of a fork of a server "
                        "that imported torch once (slower; the fallback where fork is unsafe)")
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    return p.parse_args(argv)


class Runs:
    """Runs the script under capture with extra environment; remembers every run."""

    def __init__(self, args, workdir, runner=None):
        self.args, self.workdir, self.runner = args, workdir, runner
        self.log = []
        # Every run of the script records its compiles here; the bisection records its steps.
        self.trace = os.path.join(workdir, "trace.db")
        self.writer = None

    def command(self, env):
        pre = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        acc = (f"DYNAMO_REPRO_AFTER=dynamo DYNAMO_REPRO_LEVEL=4 DYNAMO_REPRO_TOL={self.args.tol!r} "
               if self.args.accuracy else "")
        return (f"{acc}{pre + ' ' if pre else ''}{os.path.basename(sys.executable)} "
                f"{shlex.join([self.args.script, *self.args.args])}")

    def run(self, label, env):
        """(failure or None, capture dir, exit status). failure: (graph, Fingerprint)."""
        cap = os.path.join(self.workdir, label)
        opts = argparse.Namespace(after="dynamo", accuracy=self.args.accuracy, tol=self.args.tol)
        status, tail = _minify.run_capture(self.args.script, self.args.args, cap, opts,
                                           self.trace, runner=self.runner, extra=env)
        found = _minify.failing_graph(cap, status)
        self.log.append({"label": label, "env": env, "status": status,
                         "failure": found[1].describe() if found else None})
        return found, cap, status, tail


def _first_disabling_that_fixes(runs, base_env, var, names, label):
    """The names (one, or none) whose disabling makes the failure go away: all at once first,
    then a binary search."""
    if not names:
        return None, 0
    count = 0

    def fixed(subset):
        nonlocal count
        count += 1
        env = dict(base_env, **{var: ",".join(subset)})
        found, *_ = runs.run(f"{label}-{count}", env)
        return found is None

    if not fixed(names):
        return None, count
    lo = list(names)
    while len(lo) > 1:
        half = lo[:len(lo) // 2]
        lo = half if fixed(half) else lo[len(lo) // 2:]
    return lo[0], count


def _first_true(lo, hi, pred):
    """The smallest k in [lo, hi] with pred(k), pred being false then true along the range and
    true at hi (which is never asked); a binary search."""
    while lo < hi:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _bad_application(runs, base_env, culprit, cap, fp):
    """(application, total, runs): the one application of pass `culprit` that brings the
    failure `fp`, found by a binary search over N in DYNAMO_BISECT_PASS=culprit:N (the first N
    applications go ahead) for the smallest N that fails the same way (a run that fails
    differently counts as passing, and is reported). None when the failing run recorded no
    application of the pass."""
    apps = _capture.pass_applications(cap, culprit)
    total = max((a["index"] for a in apps), default=0)
    if total == 0:
        return None, 0, 0
    count = 0
    last = {}

    def fails(n):
        nonlocal count
        count += 1
        env = dict(base_env, DYNAMO_BISECT_PASS=f"{culprit}:{n}")
        found, c, *_ = runs.run(f"applications-{n}", env)
        if found is not None and found[1] != fp:
            _say(f"  {culprit}:{n} fails differently ({found[1].describe()}): counted as passing, "
                 f"not followed")
            return False
        if found is not None:
            last[n] = c
        return found is not None

    # all `total` applications: the failing run itself, so the search ends at `total` at most
    lo = _first_true(1, total, fails)
    site_from = last.get(lo, cap)
    site = next((a for a in _capture.pass_applications(site_from, culprit) if a["index"] == lo), None)
    return dict(site or {"index": lo}), total, count


def _first_diverging_node(runner, cap, graph, tol, timeout):
    """(node name, op kind, location) of the first call node whose value diverges, found by a
    binary search over the graph cut after each node (the value of that node its output), each
    cut a query in a fork of the runner's server."""
    import torch
    from dynamo.minifier.unit import Unit, target_name
    blob = torch.load(os.path.join(cap, f"graph_{graph}.pt"), weights_only=False)  # our GraphModule
    unit = Unit(blob["gm"], tuple(blob["inputs"]))
    calls = [n.name for n in unit.calls()]

    def cut_after(k):
        ed = unit.edit()
        node = ed.node(calls[k])
        ed.output_node().args = ((node,),)
        ed.remove_dead()
        return ed.done()

    queries = 0
    log = os.path.join(cap, "node_queries.log")

    def diverges(k):
        nonlocal queries
        u = cut_after(k)
        if u is None:
            return False
        queries += 1
        r = runner.query("dynamo.minifier.query:run_dynamo", u.gm, list(u.inputs),
                         blob["backend"], blob["config"], tol, log_path=log, timeout=timeout)
        return r.kind == "ok" and "accuracy" in (r.value or {})
    if not diverges(len(calls) - 1):
        return None, queries
    lo = _first_true(0, len(calls) - 1, diverges)
    node = next(n for n in unit.calls() if n.name == calls[lo])
    return (calls[lo], target_name(node), blob.get("locations", {}).get(calls[lo], "")), queries


def main(argv=None, zygote=None):
    """The tool. zygote: the run server, forked by cli/dynamo-bisect before it imported dynamo
    (fork_server.Zygote); ended here when it is not used."""
    try:
        return _main(argv, zygote)
    finally:
        if zygote is not None:
            zygote.close()   # a no-op once a ForkServer adopted it


def _main(argv, zygote):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if not os.path.isfile(args.script):
        _say(f"error: no such script: {args.script}\n  = hint: pass the path of the Python script that fails")
        return 2
    workdir = args.workdir or os.path.join("dynamo_bisect",
                                           time.strftime("run-%Y%m%d-%H%M%S") + f"-{os.getpid()}")
    os.makedirs(workdir, exist_ok=True)
    from dynamo.minifier import script_runner
    runner = script_runner.make_runner(args.script, _minify._child_env(), args.fork_server, PROG,
                                       zygote)
    runs = Runs(args, workdir, runner)
    result = {"script": args.script, "args": args.args, "accuracy": args.accuracy,
              "runner": runner.kind, "steps": [], "runs_store": runs}
    from dynamo import trace
    try:
        # The bisection is the store's first run; each run of the script adds its own.
        runs.writer = trace.start_run(runs.trace, argv=[PROG, *(sys.argv[1:] if argv is None else argv)])
    except trace.TraceStoreError as e:
        _say(f"not recording into the trace store: {e}")
    try:
        return _bisect(args, runs, result)
    finally:
        runner.close()
        result.pop("runs_store")
        if runs.writer is not None:
            runs.writer.record_artifact("dynamo.bisect.result",
                                        json.dumps({"runs": runs.log}).encode(), "application/json")
            trace.end_run()
        result["runs"] = runs.log
        with open(os.path.join(workdir, "result.json"), "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)


def _step(result, name, text, command="", **extra):
    step = {"step": name, "result": text, "command": command, **extra}
    result["steps"].append(step)
    runs = result["runs_store"]
    if runs.writer is not None:
        runs.writer.record_artifact("dynamo.bisect.step", json.dumps(step).encode(), "application/json")
        runs.writer.flush()
    _say(f"{name}: {text}")
    if command:
        _say(f"  reproduce: {command}")


def _application_step(result, runs, base_env, culprit, cap, fp):
    site, total, n = _bad_application(runs, base_env, culprit, cap, fp)
    if site is None:
        _step(result, "application", f"the failing run recorded no application of {culprit}: "
                                     f"nothing to count")
        return
    k = site["index"]
    where = f" at {site['where']}: {site['source']}" if site.get("where") else ""
    what = (f"node {site['node']} ({site['op']}){where}, in the graph of {site['function']} "
            f"({site['compile_where']})" if "node" in site else "its node was not recorded")
    before = f"with its first {k - 1} the script passes" if k > 1 else "with none the script passes"
    _step(result, "application", f"application {k} of {total} of pass {culprit} brings the "
                                 f"failure ({before}; {n} runs): {what}",
          runs.command(dict(base_env, DYNAMO_BISECT_PASS=f"{culprit}:{k}")), application=site)


def _bisect(args, runs, result):
    what = "divergence from fp64 eager" if args.accuracy else "failure"
    found, cap, status, tail = runs.run("original", {})
    if found is None:
        if status == 0:
            _say(f"{args.script} ran without a {what} in any compiled graph: nothing to bisect")
            return 0
        _say(f"{args.script} fails ({tail or 'exit status ' + str(status)}), but no compiled graph "
             f"failed in its backend: not a compiler bug the bisector can narrow down")
        return 1
    fp = found[1]
    own = next((e.get("backend") for e in _capture.read_events(cap) if e["event"] == "start"), "?")
    _say(f"{args.script} fails with backend {own}: {fp.describe()}")

    # 1. the backend ladder
    base_env, failing = {}, None
    ladder = [b.strip() for b in args.backends.split(",") if b.strip()] if args.backends \
        else list(defs.bisect_backends())
    for b in ladder:
        env = {"DYNAMO_BISECT_BACKEND": b}
        f, c, _, _ = runs.run(f"backend-{b}", env)
        _say(f"  backend {b}: {'FAILS: ' + f[1].describe() if f else 'passes'}")
        if f is not None:
            failing, base_env, found, cap = b, env, f, c
            break
    if failing:
        _step(result, "backend", f"{failing} is the first backend of the ladder that fails",
              runs.command(base_env))
    else:
        _step(result, "backend", f"every backend of the ladder passes: the failure is in the "
                                 f"script's own backend '{own}'", runs.command({}))

    # 2. passes, then decomposition groups
    from dynamo import _C
    names = [n for n, _ in _C._compiler.pass_list(True)]  # test-only passes too: they may be on
    culprit, n = _first_disabling_that_fixes(runs, base_env, "DYNAMO_DISABLE_PASSES", names, "passes")
    if culprit:
        env = dict(base_env, DYNAMO_DISABLE_PASSES=culprit)
        _step(result, "pass", f"disabling pass {culprit} makes the failure go away ({n} runs)",
              runs.command(env))
        _application_step(result, runs, base_env, culprit, cap, found[1])
    else:
        _step(result, "pass", "no pass of passes.def is involved (disabling all of them: still fails)")
    if failing == "aot_eager_decomp_partition" or (not failing and own == "aot_eager_decomp_partition"):
        from dynamo.aot import decompositions
        groups = [g[0] for g in decompositions.groups()]
        culprit, n = _first_disabling_that_fixes(runs, base_env, "DYNAMO_AOT_DISABLE_DECOMPS",
                                                 groups, "decomps")
        if culprit:
            env = dict(base_env, DYNAMO_AOT_DISABLE_DECOMPS=culprit)
            _step(result, "decomposition", f"disabling decomposition group {culprit} makes the "
                                           f"failure go away ({n} runs)", runs.command(env))
        else:
            _step(result, "decomposition", "no decomposition group is involved (disabling all of "
                                           "them: still fails)")

    # 3. the graph
    graph = found[0]
    start = next((e for e in _capture.read_events(cap) if e["event"] == "start" and e["graph"] == graph), {})
    _step(result, "graph", f"graph {graph} of the run ({start.get('nodes', '?')} nodes, first op at "
                           f"{start.get('where') or '?'}) fails: {found[1].describe()}",
          f"dynamo-minify{' --accuracy --tol ' + repr(args.tol) if args.accuracy else ''} --resume {cap}")

    # 4. the node
    if args.accuracy:
        node, q = _first_diverging_node(runs.runner, cap, graph, args.tol, args.timeout)
        if node is None:
            _step(result, "node", f"no single node's value diverges when it is the output ({q} queries)")
        else:
            name, kind, where = node
            _step(result, "node", f"{name} ({kind}) is the first node whose value diverges from "
                                  f"fp64 eager beyond {args.tol} ({q} queries)"
                                  f"{'; from ' + where if where else ''}")
    _say(f"all runs and results: {os.path.join(runs.workdir, 'result.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
