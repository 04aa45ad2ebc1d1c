"""Capture: what a run with DYNAMO_REPRO_AFTER set records for the minifier.

    DYNAMO_REPRO_AFTER=dynamo   every backend a script compiles with is wrapped in a Probe
    DYNAMO_REPRO_LEVEL=4        ... which also checks each graph's first run against fp64 eager
    DYNAMO_REPRO_TOL=1e-3       (the accuracy tolerance, relative to each output's magnitude)
    DYNAMO_REPRO_DIR=DIR        where the run writes (default ./dynamo_minify/run-<pid>)

DIR gets, per graph i, ``graph_<i>.pt`` (the torch.fx.GraphModule, its real inputs, the backend
spec, the dynamo.config values in force) written before the graph is compiled, and one line per
event in ``events.jsonl``: start, ok (the first run passed), fail (stage, exception, traceback or
diverging node), and per compile whose passes made applications, passes (each application of
each pass: number, node, op, user line, applied or skipped under DYNAMO_BISECT_PASS). A graph that started and never ended in a run that died by a signal is the one
that crashed. ``dynamo-minify --resume DIR`` minifies the failing graph of such a directory.
"""
from __future__ import annotations

import json
import os
import sys

from dynamo.minifier import probe as _probe

_ACTIVE = {}


def stage() -> str:
    return os.environ.get("DYNAMO_REPRO_AFTER", "").strip()


def active() -> bool:
    return stage() in ("dynamo", "aot") and not _probe.wrapping_disabled()


def accuracy_tol():
    if os.environ.get("DYNAMO_REPRO_LEVEL", "").strip() == "4":
        return float(os.environ.get("DYNAMO_REPRO_TOL", "1e-3"))
    return None


def capture_dir() -> str:
    d = os.environ.get("DYNAMO_REPRO_DIR") or os.path.join("dynamo_minify", f"run-{os.getpid()}")
    if "dir" not in _ACTIVE:
        os.makedirs(d, exist_ok=True)
        _ACTIVE["dir"] = d
        _ACTIVE["next"] = 0
        if not os.environ.get("DYNAMO_REPRO_DIR"):
            import atexit
            atexit.register(_tell_user, d)
    return _ACTIVE["dir"]


def _tell_user(d):
    failures = [e for e in read_events(d) if e["event"] == "fail"]
    if failures:
        f = failures[0]
        print(f"dynamo: graph {f['graph']} failed at its {f['stage']} "
              f"({f['exc_type'] or f['message']}); minify it with: dynamo-minify --resume {d}",
              file=sys.stderr)


def config_snapshot() -> dict:
    from dynamo import config
    return {o.name: getattr(config, o.name) for o in config.OPTIONS
            if o.name not in ("trace_path", "suppress_errors", "verbose")}


def _event(d, record):
    with open(os.path.join(d, "events.jsonl"), "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_events(d):
    path = os.path.join(d, "events.jsonl")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def wrap_backend(name, fn):
    """(name, compiler): the backend a dynamo.compile / optimize call gets under
    DYNAMO_REPRO_AFTER=dynamo; unchanged when capture is off."""
    if not active() or stage() != "dynamo":
        return name, fn
    import torch
    d = capture_dir()
    _listen_to_passes(d)
    spec = _probe.backend_spec(name, fn)
    cfg = config_snapshot()
    offset = {}

    def on_event(kind, i, payload):
        g = offset.setdefault(i, _ACTIVE["next"])
        if kind == "start":
            _ACTIVE["next"] += 1
            gm, inputs = payload
            where = locations(gm)
            saved = ""
            try:
                torch.save({"gm": gm, "inputs": list(inputs), "backend": spec, "config": cfg,
                            "stage": "dynamo", "locations": where}, os.path.join(d, f"graph_{g}.pt"))
            except Exception as e:  # the capture must never make the user's compile fail
                saved = f"{type(e).__name__}: {e}"
            _event(d, {"event": "start", "graph": g, "backend": name, "unsaved": saved,
                       "where": next(iter(where.values()), ""), "nodes": sum(
                           1 for n in gm.graph.nodes if n.op not in ("placeholder", "output"))})
        elif kind == "ok":
            _event(d, {"event": "ok", "graph": g})
        else:
            rec = payload.as_dict()
            rec.update(event="fail", graph=g)
            _event(d, rec)

    p = _probe.Probe(name, fn, accuracy_tol(), on_event)
    return name, p.backend()


def _listen_to_passes(d):
    """Records, once per process, the pass applications of every compile (dynamo-bisect's
    counted passes read them)."""
    if _ACTIVE.get("passes"):
        return
    _ACTIVE["passes"] = True
    from dynamo import eval_frame

    def on_compile(record):
        apps = {p["name"]: p["applications"] for p in record.get("passes", ()) if p.get("applications")}
        if apps:
            _event(d, {"event": "passes", "function": record.get("function", ""),
                       "where": f"{record.get('file', '')}:{record.get('line', 0)}",
                       "applications": apps})

    eval_frame.add_compile_listener(on_compile, listings=False)


def pass_applications(d, name) -> list:
    """Every application of pass `name` a capture run recorded, in order, each with the function
    and place of the compile it was made in."""
    out = []
    for e in read_events(d):
        if e["event"] == "passes":
            for a in e["applications"].get(name, ()):
                out.append(dict(a, function=e["function"], compile_where=e["where"]))
    return out


def locations(gm) -> dict:
    """{node name: "file.py:line: source line"} of the user code each call node came from (the
    meta is not kept when a GraphModule is saved)."""
    torch_dir = os.sep + "torch" + os.sep
    out = {}
    for n in gm.graph.nodes:
        if n.op in ("placeholder", "output"):
            continue
        frames = [n.meta.get("dynamo_location")] + list(reversed(n.meta.get("dynamo_user_stack") or []))
        frames = [f for f in frames if f]
        # The innermost frame in the user's code rather than in torch.nn's.
        user = [f for f in frames if torch_dir not in f[0]]
        if user or frames:
            f, line, src = (user or frames)[0]
            out[n.name] = f"{f}:{line}: {src.strip()}"
    return out


def load_graph(d, i):
    import torch
    # The tool's own file holding a GraphModule: torch >= 2.6 loads weights only by default.
    return torch.load(os.path.join(d, f"graph_{i}.pt"), weights_only=False)
