"""--after=kernel: a graph the `fused` backend failed on, compiled by the code generator alone.

The unit is the graph the fused backend got (captured as for --after=dynamo); each query lowers
it to loop IR and kernels with dynamo._C._codegen.compile (native.to_ir for the IR graph) and
runs them once: no frame capture, no Dynamo wrapper, only the generator and its kernels. The
reduction passes shrink the fusion group (fewer ops) and, through shrink_shapes, its loops (smaller
inputs). The repro runs the same function, and on success prints the kernels it compiled.
"""
from __future__ import annotations

from dynamo.minifier import probe as _probe


def compile_kernels(gm, inputs):
    """The fused program of gm (its .report lists the kernels)."""
    from dynamo import _C
    from dynamo.minifier import native
    return _C._codegen.compile(native.to_ir(gm, inputs).serialize(), list(inputs))


def run_kernel(gm, inputs, spec: dict, config: dict, tol=None):
    """One query of --after=kernel; same results as query.run_dynamo, plus the kernel names."""
    import torch
    from dynamo.minifier import query
    query.apply_config(config)
    before = [_probe._clone(v) for v in inputs] if tol is not None else None
    with torch.no_grad():
        fn = compile_kernels(gm, inputs)
        out = fn(*inputs)
    kernels = [k["name"] for k in fn.report["kernels"]]
    if before is not None:
        div = _probe.divergence(gm, before, out, tol)
        if div is not None:
            return {"accuracy": div[0], "error": div[1], "kernels": kernels}
    return {"ok": True, "kernels": kernels}


def describe_kernels(gm, inputs) -> str:
    """'1 kernel (k0_tanh)' for a graph that compiles; '' when it does not."""
    try:
        with __import__("torch").no_grad():
            names = [k["name"] for k in compile_kernels(gm, inputs).report["kernels"]]
    except Exception:
        return ""
    return f"{len(names)} kernel{'s' if len(names) != 1 else ''} ({', '.join(names)})"
