"""dynamo-minify --from-trace trace.db: start from the trace store of a run that crashed.

The store has the crashed compile's graph (its JSON) and its inputs' metadata, not their values,
so the script is run again (its argv is in the store) with capture on, and the graph of that new
run that is the same graph (the same call nodes, by name and target) is the one minified. The
crash must happen again in it: a crash that does not is reported as nondeterministic.
"""
from __future__ import annotations

import os

from dynamo.minifier import capture as _capture


class FromTraceError(Exception):
    """The store cannot be used: the message names the cause and the fix."""


def crashed_run(path: str) -> dict:
    """{"argv", "crash" (the run's crash record), "graph" (the crashed compile's graph JSON)} of
    the last run of the store that crashed in or after a compile."""
    from dynamo import trace
    if not os.path.exists(path):
        raise FromTraceError(f"--from-trace {path}: no such file\n"
                             f"  = hint: pass the trace store the crashed run wrote (DYNAMO_TRACE=...)")
    try:
        store = trace.open(path)
    except trace.TraceStoreError as e:
        raise FromTraceError(f"--from-trace {path}: {e}") from None
    with store:
        runs = [r for r in store.runs() if r["crash"] and r["crash"]["compile_id"]]
        if not runs:
            raise FromTraceError(
                f"--from-trace {path}: no run in this trace store crashed during a compile or a "
                f"compiled graph's first call\n  = hint: for an exception or a wrong result, run "
                f"dynamo-minify script.py [args...] instead")
        run = runs[-1]
        graphs = store.graphs(run["crash"]["compile_id"])
    if not graphs:
        raise FromTraceError(f"--from-trace {path}: the crashed compile recorded no graph\n"
                             f"  = hint: run dynamo-minify script.py [args...] instead")
    return {"argv": list(run["argv"]), "crash": run["crash"], "graph": graphs[0]["serialized"].decode()}


def signature_of_json(text: str):
    from dynamo import graph_io
    return [(n["name"], n.get("target", "")) for n in graph_io.load(text)["nodes"]
            if n["op"] not in ("placeholder", "output")]


def signature_of_gm(gm):
    return [n.name for n in gm.graph.nodes if n.op not in ("placeholder", "output")]


def matching_graph(capture_dir: str, graph_json: str):
    """The index of the captured graph that is the trace's graph, or None."""
    want = [name for name, _ in signature_of_json(graph_json)]
    for e in _capture.read_events(capture_dir):
        if e["event"] == "start":
            blob = _capture.load_graph(capture_dir, e["graph"])
            if blob.get("gm") is not None and signature_of_gm(blob["gm"]) == want:
                return e["graph"]
    return None
