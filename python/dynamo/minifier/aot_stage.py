"""--after=aot: the unit is one ATen-level graph the AOT layer hands to its forward or backward
compiler (dynamo/aot: `fw_compiler(graph)` / `bw_compiler(graph)`, default: core's runner), with
the real values it is called with.

Capture (DYNAMO_REPRO_AFTER=aot): dynamo.aot.compile_graph wraps its two compilers with
`wrap_compilers`. Each compiled graph i writes ``graph_<i>.pt`` (the graph's JSON, the compiler's
spec, forward or backward) and its events, like capture.py: a compile failure is recorded at once
(its inputs are then made from the graph's tensor meta: the values are not known yet); at the
first call the real inputs are saved before the graph runs, so a crash leaves them behind.

Query: `run_aot(gm, inputs, spec, config, tol)` imports the ATen GraphModule back into the IR
(dynamo.aot.importer.to_ir), compiles it with the same compiler and runs it once.
"""
from __future__ import annotations

import os
import traceback as _tb

from dynamo.minifier import capture as _capture, probe as _probe


def compiler_spec(fn) -> dict:
    return _probe.backend_spec(getattr(fn, "__name__", "compiler"), fn) | {"registered": False}


def _load_compiler(spec):
    _, fn = _probe.load_backend(spec)
    return fn


def _inputs_from_meta(gm):
    import torch
    out = []
    for n in gm.graph.nodes:
        if n.op != "placeholder":
            continue
        meta = n.meta.get("dynamo_tensor_meta")
        if meta is None:
            out.append(None)
            continue
        shape, dtype, device, requires_grad = meta
        dt = getattr(torch, dtype.replace("torch.", ""))
        t = torch.randn(shape, device=device).to(dt) if dt.is_floating_point else \
            torch.zeros(shape, dtype=dt, device=device)
        out.append(t.requires_grad_(requires_grad) if dt.is_floating_point else t)
    return out


def wrap_compilers(fw_compiler, bw_compiler, backend):
    """The two compilers, recording what capture.py records, under DYNAMO_REPRO_AFTER=aot."""
    if not _capture.active() or _capture.stage() != "aot":
        return fw_compiler, bw_compiler
    return (_wrap(fw_compiler, "forward", backend), _wrap(bw_compiler, "backward", backend))


def _wrap(compiler, kind, backend):
    import torch
    from dynamo import graph_io
    spec = compiler_spec(compiler)
    cfg = _capture.config_snapshot()
    tol = _capture.accuracy_tol()

    def fail(i, stage, exc, extra=None):
        rec = {"event": "fail", "graph": i, "stage": stage, "exc_type": "", "message": "",
               "traceback": "", "node_kind": "", "error": 0.0}
        if exc is not None:
            rec.update(exc_type=f"{type(exc).__module__}.{type(exc).__qualname__}", message=str(exc),
                       traceback="".join(_tb.format_exception(type(exc), exc, exc.__traceback__)))
        rec.update(extra or {})
        _capture._event(_capture.capture_dir(), rec)

    def wrapped(graph):
        d = _capture.capture_dir()
        i = _capture._ACTIVE["next"]
        _capture._ACTIVE["next"] += 1
        text = graph.serialize()
        path = os.path.join(d, f"graph_{i}.pt")
        blob = {"graph_json": text, "backend": spec, "config": cfg, "stage": "aot", "kind": kind,
                "aot_backend": backend}
        try:
            fn = compiler(graph)
        except BaseException as exc:
            blob["inputs"] = _inputs_from_meta(graph_io.deserialize(text))
            torch.save(blob, path)
            _capture._event(d, {"event": "start", "graph": i, "kind": kind})
            fail(i, "compile", exc)
            raise
        state = {"first": True}

        def run(*args):
            if not state["first"]:
                return fn(*args)
            state["first"] = False
            blob["inputs"] = [_probe._clone(a) for a in args]
            torch.save(blob, path)
            _capture._event(d, {"event": "start", "graph": i, "kind": kind})
            try:
                out = fn(*args)
            except BaseException as exc:
                fail(i, "run", exc)
                raise
            if tol is not None:
                div = _probe.divergence(graph_io.deserialize(text), blob["inputs"], out, tol)
                if div is not None:
                    fail(i, "accuracy", None, {"node_kind": div[0], "error": div[1],
                                               "message": f"divergence at a {div[0]} node"})
                    return out
            _capture._event(d, {"event": "ok", "graph": i})
            return out
        return run
    wrapped.__name__ = getattr(compiler, "__name__", "compiler")
    return wrapped


def load_unit(blob):
    from dynamo import graph_io
    from dynamo.minifier.unit import Unit
    return Unit(graph_io.deserialize(blob["graph_json"]), tuple(blob["inputs"]))


def run_aot(gm, inputs, spec: dict, config: dict, tol=None):
    """One query of --after=aot (see the module doc); same results as query.run_dynamo."""
    import torch
    from dynamo.aot import importer
    from dynamo.minifier import query
    query.apply_config(config)
    compiler = _load_compiler(spec)
    device = next((str(v.device) for v in inputs if isinstance(v, torch.Tensor)), "cpu")
    before = [_probe._clone(v) for v in inputs] if tol is not None else None
    fn = compiler(importer.to_ir(gm.graph, {}, device))
    out = fn(*inputs)
    if before is not None:
        div = _probe.divergence(gm, before, out, tol)
        if div is not None:
            return {"accuracy": div[0], "error": div[1]}
    return {"ok": True}
