"""dynamo-demo: compile a real model and a function with a graph break, record everything into a
trace store, check the results against eager, and show what was captured and recorded.

    dynamo-demo [--db PATH] [--model NAME]        (python -m dynamo.demo ...)

Exit status: 0 when every compiled output equals eager (torch.equal), 1 when one differs, 2 when
the trace store cannot be written or the model cannot be made.
"""
import argparse
import collections
import linecache
import os
import sys

import torch

import dynamo
import dynamo.recording
import dynamo.trace

DEFAULT_DB = "dynamo-demo.db"
TOP_OPS = 6


# A small function with a graph break: the branch depends on the tensor's values. Dynamo never
# compiles frames of its own package, so the example is compiled from this text under its own
# file name (registered with linecache, so breaks and guards show its source lines).
EXAMPLE_FILE = "dynamo_demo_example.py"
EXAMPLE_SOURCE = """\
import torch


def scale_if_large(x):
    y = torch.relu(x) * 2
    if y.sum() > 10:
        return y / y.sum()
    return y - 1
"""


def _example():
    lines = EXAMPLE_SOURCE.splitlines(True)
    linecache.cache[EXAMPLE_FILE] = (len(EXAMPLE_SOURCE), None, lines, EXAMPLE_FILE)
    namespace = {}
    exec(compile(EXAMPLE_SOURCE, EXAMPLE_FILE, "exec"), namespace)  # noqa: S102 - our own text
    return namespace["scale_if_large"]


def _parse(argv):
    p = argparse.ArgumentParser(prog="dynamo-demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--db", default=DEFAULT_DB, metavar="PATH",
                   help=f"trace store to record into (default ./{DEFAULT_DB}; a run is appended)")
    p.add_argument("--model", default="resnet18", metavar="NAME",
                   help="a torchvision model name (default resnet18)")
    return p.parse_args(argv)


def _make_model(name):
    import torchvision
    get_model = getattr(torchvision.models, "get_model", None)
    if get_model is not None:
        return get_model(name, weights=None).eval()
    return getattr(torchvision.models, name)(pretrained=False).eval()


def _where(file, line):
    return f"{os.path.basename(file)}:{line}"


def _ms(records, key):
    return sum(float(r.get(key) or 0) for r in records)


def _describe(title, records, out):
    """Print what the compiler captured for one function or model: a few lines."""
    graphs = [g for r in records for g in r["graphs"]]
    ops = collections.Counter()
    for g in graphs:
        ops.update(g["op_counts"])
    breaks = [b for r in records for b in r["breaks"]]
    guards = sum(len(r["guards"]) for r in records)
    recompiles = sum(1 for r in records if r["attempt"] > 0)
    out(f"{title}: {len(records)} compile(s) ({recompiles} recompile), {len(graphs)} graph(s), "
        f"{sum(ops.values())} ops of {len(ops)} kinds, {len(breaks)} graph break(s), "
        f"{guards} guards")
    top = ", ".join(f"{op.split('.')[-1]} x{n}" for op, n in ops.most_common(TOP_OPS))
    more = f", +{len(ops) - TOP_OPS} more kinds" if len(ops) > TOP_OPS else ""
    out(f"  top ops: {top}{more}")
    out(f"  compile time: {_ms(records, 'total_ms'):.1f} ms "
        f"(capture {_ms(records, 'capture_ms'):.1f}, guards {_ms(records, 'guard_ms'):.1f}, "
        f"backend {_ms(records, 'backend_ms'):.1f})")
    seen = set()
    for b in breaks:
        key = (b["kind"], b["file"], b["line"])
        if key in seen:
            continue
        seen.add(key)
        where = _where(b["file"], b["line"])
        out(f"  graph break [{b['kind']}] at {where}:  {b['source'].strip()}")
        out(f"    why: {b['explanation']}")
    for r in records:
        if r["attempt"] > 0 and r["reason"].strip():
            out(f"  recompiled {r['function']}: {r['reason'].strip().splitlines()[0]}")


def _check(title, same, out):
    out(f"  {title} output equals eager (torch.equal): {'yes' if same else 'NO'}")
    return same


def _summary_from_store(path, run_id, out):
    with dynamo.trace.open(path) as store:
        c = store.counts(run_id)
        frames = store.frames(run_id)
        out(f"read back from {path} (run {run_id}): {c['frames']} frames, "
            f"{c['compiles']} compiles, {c['graphs']} graphs, {c['graph_breaks']} breaks, "
            f"{c['guards']} guards, {c['guard_failures']} guard failures, {c['code']} code")
        for f in frames[:4]:
            statuses = collections.Counter(x["status"] for x in store.compiles(frame_id=f["id"]))
            out(f"  frame {f['name']} ({_where(f['file'], f['first_line'])}): "
                + ", ".join(f"{n} {s}" for s, n in sorted(statuses.items())))
        for g in store.graph_break_groups(run_id)[:3]:
            out(f"  break {g['count']} x {g['kind']} at {_where(g['file'], g['line'])}")
        for failure in store.guard_failures(run_id=run_id)[:2]:
            out(f"  guard failure: {failure['reason']}")
    out(f"more: dynamo-trace summary|breaks|compiles|failures {path}")


def _compile_and_compare(name, model, records, out):
    """Compile the model and the example, print what was captured; True when every compiled
    output equals eager."""
    out(f"dynamo demo: {name} (eval, batch 1) and scale_if_large (a graph break)")
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        eager = model(x)
        compiled = dynamo.compile(model)(x)
    _describe(name, list(records), out)
    ok = _check(name, torch.equal(eager, compiled), out)

    first = len(records)
    scale_if_large = _example()
    fn = dynamo.compile(scale_if_large)
    same = True
    for n in (8, 16):  # the second size recompiles: a guard failure to record
        t = torch.linspace(-1.0, 3.0, n)
        same &= torch.equal(scale_if_large(t), fn(t))
    _describe("scale_if_large", records[first:], out)
    return _check("scale_if_large", same, out) and ok


def _error(summary, hint):
    print(f"dynamo-demo: error: {summary}", file=sys.stderr)
    if hint:
        print(f"  = hint: {hint}", file=sys.stderr)
    return 2


def main(argv=None):
    args = _parse(sys.argv[1:] if argv is None else argv)
    out = print
    torch.manual_seed(0)
    try:
        model = _make_model(args.model)
    except Exception as e:  # noqa: BLE001 - unknown name, torchvision missing, ...
        return _error(f"cannot make torchvision model {args.model!r}: {e}",
                      "pass --model with a torchvision name such as resnet18 or mobilenet_v2")
    try:
        run = dynamo.trace.start_run(args.db)
    except dynamo.TraceStoreError as e:
        hint = getattr(e, "hint", "")
        return _error(getattr(e, "summary", str(e)),
                      f"{hint} (dynamo-demo --db PATH)" if hint else "")
    dynamo.recording.enable(args.db)  # records into the run just started
    records = []
    dynamo.add_compile_listener(records.append)
    try:
        ok = _compile_and_compare(args.model, model, records, out)
    finally:
        dynamo.remove_compile_listener(records.append)
        dynamo.recording.disable()
        dynamo.trace.end_run()  # flushes and closes the run: everything is on disk

    out(f"trace: {len(records)} compiles recorded into {os.path.abspath(args.db)}")
    _summary_from_store(args.db, run.run_id, out)
    if not ok:
        out("FAILED: a compiled output differs from eager")
        return 1
    out("ok: compiled outputs equal eager")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
