"""What a minifier query runs, in a child of the fork server (or in a fresh repro.py process).

run_dynamo(gm, inputs, backend_spec, config, tol) compiles the graph with the backend through a
Probe (probe.py), runs it once on the inputs and re-raises the backend's own first exception
(not Dynamo's BackendCompilerFailed wrapper), so that a query fails exactly the way the graph
failed in the user's run. With tol set it returns {"accuracy": node kind, "error": e} for a
divergence from fp64 eager, else {"ok": True}.
"""
from __future__ import annotations

import json
import os

from dynamo.minifier import probe as _probe

#: dynamo.config options a query does not copy from the user's run
_NOT_COPIED = ("debug_function", "trace_path", "suppress_errors", "verbose")


def apply_config(config: dict) -> None:
    from dynamo import config as cfg
    for name, value in (config or {}).items():
        if name not in _NOT_COPIED:
            setattr(cfg, name, value)
    cfg.suppress_errors = False


def run_dynamo(gm, inputs, spec: dict, config: dict, tol=None):
    import dynamo
    apply_config(config)
    name, fn = _probe.load_backend(spec)
    p = _probe.Probe(name, fn, tol)
    compiled = dynamo.compile(gm, backend=p.backend())
    try:
        compiled(*inputs)
    except BaseException:
        if p.failure is not None and p.failure.exc is not None:
            # With the traceback as the probe caught it: the frames Dynamo added on the way up
            # differ from the user's run and are not part of the failure.
            raise p.failure.exc.with_traceback(p.failure.tb) from None
        raise
    if p.failure is not None and p.failure.stage == "accuracy":
        return {"accuracy": p.failure.node_kind, "error": p.failure.error}
    return {"ok": True}


def repro_main(module_class, load_inputs, spec: dict, config: dict, tol=None,
               stage="dynamo", kernel=None) -> None:
    """repro.py's main: runs the graph (with kernel: that one generated kernel alone,
    kernel_stage.run_kernel_source); on a failure raises it (or AssertionError for a
    divergence). With DYNAMO_REPRO_RESULT=path set, also writes what happened there as JSON (how
    dynamo-minify checks that the repro reproduces)."""
    import traceback
    result_path = os.environ.get("DYNAMO_REPRO_RESULT")
    try:
        module = module_class()
        if stage in ("aot", "kernel"):
            # The graph again as a GraphModule, for the IR importer.
            import torch.fx
            module = torch.fx.symbolic_trace(module)
        if stage == "kernel" and kernel is not None:
            import functools
            from dynamo.minifier.kernel_stage import run_kernel_source
            run = functools.partial(run_kernel_source, kernel=kernel)
        elif stage == "kernel":
            from dynamo.minifier.kernel_stage import run_kernel as run
        elif stage == "aot":
            from dynamo.minifier.aot_stage import run_aot as run
        else:
            run = run_dynamo
        result = run(module, load_inputs(), spec, config, tol)
    except BaseException as exc:
        if result_path:
            with open(result_path, "w", encoding="utf-8") as f:
                json.dump({"kind": "exception",
                           "exc_type": f"{type(exc).__module__}.{type(exc).__qualname__}",
                           "message": str(exc), "traceback": traceback.format_exc()}, f)
        raise
    if result_path:
        with open(result_path, "w", encoding="utf-8") as f:
            json.dump({"kind": "ok", "value": result}, f)
    if "accuracy" in result:
        raise AssertionError(f"the compiled graph diverges from fp64 eager at a {result['accuracy']} "
                             f"node (error {result['error']:.3g}, tolerance {tol})")
    print(f"repro.py: the {'kernel' if kernel is not None else 'graph'} compiled and ran without the failure"
          + (f"; kernels: {', '.join(result['kernels'])}" if result.get("kernels") else ""))
