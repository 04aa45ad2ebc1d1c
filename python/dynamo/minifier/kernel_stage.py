"""--after=kernel: a graph the `fused` backend failed on, compiled by the code generator alone.

The unit is the graph the fused backend got (captured as for --after=dynamo); each query lowers
it to loop IR and kernels with dynamo._C._codegen.compile (native.to_ir for the IR graph) and
runs them once: no frame capture, no Dynamo wrapper, only the generator and its kernels. Two
reduction passes read the fused program (`program()`: _C._codegen.lower, nothing compiled):
isolate_kernel drops whole steps of it (a binary search down to the failing kernel) and
bypass_ops takes ops out of their fusion group; shrink_shapes shrinks the kernel's loops (its
inputs' sizes).

When the minified graph lowers to a single kernel, repro.py holds that kernel: its C++ source as
the generator emitted it and its parameters (`single_kernel()`), and runs it alone
(`run_kernel_source()`): the source compiled by the backend's kernel compiler
(_C._codegen.compile_kernel: same compiler, flags and cache, same error), called through ctypes
on the real input values, its outputs compared with an fp64 eager run of the graph. Otherwise
the repro runs the graph through the generator, as the queries do.
"""
from __future__ import annotations

from dynamo.minifier import probe as _probe


def compile_kernels(gm, inputs):
    """The fused program of gm (its .report lists the kernels)."""
    from dynamo import _C
    from dynamo.minifier import native
    return _C._codegen.compile(native.to_ir(gm, inputs).serialize(), list(inputs))


def program(unit):
    """The program the generator makes of unit's graph ({kernels, buffers, steps}; nothing
    compiled), cached on the unit; None when it cannot be lowered."""
    if "program" not in unit._values:
        from dynamo import _C
        from dynamo.minifier import native
        try:
            unit._values["program"] = _C._codegen.lower(native.to_ir(unit.gm, unit.inputs).serialize())
        except Exception:
            unit._values["program"] = None
    return unit._values["program"]


def single_kernel(unit):
    """{name, source, params} of the one kernel unit's graph lowers to (params: the buffers it
    takes, in argument order: node, kind, dtype, shape, strides); None when the program has
    another step or no kernel."""
    p = program(unit)
    if p is None or len(p["steps"]) != 1 or p["steps"][0][0] != "kernel":
        return None
    k = p["kernels"][p["steps"][0][1]]
    calls = [n.name for n in unit.calls()]
    params = []
    for i in k["params"]:
        b = dict(p["buffers"][i])
        if b["kind"] != "input":
            # Which call node's value it holds, by position: repro.py traces the graph again,
            # and the names torch.fx gives its nodes then are not the unit's.
            b["call"] = calls.index(b["node"]) if b["node"] in calls else None
        params.append(b)
    return {"name": k["name"], "source": k["source"], "params": params}


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


def run_kernel_source(gm, inputs, spec: dict, config: dict, tol=None, kernel=None):
    """repro.py's run of one kernel alone (see the module doc); results as run_kernel's. The
    outputs are compared with fp64 eager as the probe does: beyond tol relative to the value's
    magnitude and beyond 10x eager fp32's own error."""
    import ctypes
    import torch
    from dynamo import _C
    from dynamo.minifier import query
    from dynamo.minifier.unit import record_values, target_name
    query.apply_config(config)
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    given = dict(zip(names, inputs))
    calls = [n.name for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    address, _ = _C._codegen.compile_kernel(kernel["source"], kernel["name"])
    args, outs = [], {}
    for b in kernel["params"]:
        if b["kind"] == "input":
            t = given[b["node"]].detach()
            if list(t.shape) != b["shape"] or list(t.stride()) != b["strides"]:
                raise ValueError(f"input {b['node']} is {tuple(t.shape)} with strides {t.stride()}; "
                                 f"the kernel was generated for {b['shape']} strides {b['strides']}")
        else:
            t = torch.empty_strided(b["shape"], b["strides"], dtype=getattr(torch, b["dtype"]))
            if b["kind"] == "output" and b.get("call") is not None:
                outs[calls[b["call"]]] = t
        args.append(t)
    pointers = (ctypes.c_void_p * len(args))(*[t.data_ptr() for t in args])
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(address)(pointers)
    if tol is not None:
        ref64 = record_values(gm, [_probe._to_fp64(v) for v in inputs])
        ref32 = record_values(gm, inputs)
        nodes = {n.name: n for n in gm.graph.nodes}
        for name, got in outs.items():
            if not got.is_floating_point() or name not in ref64:
                continue
            r64 = ref64[name].double()
            err, own = _probe.max_error(got, r64), _probe.max_error(ref32[name], r64)
            finite = r64[r64.isfinite()]
            scale = max(1.0, finite.abs().max().item() if finite.numel() else 0.0)
            if err > max(tol * scale, 10 * own):
                return {"accuracy": target_name(nodes[name]), "error": err, "kernels": [kernel["name"]]}
    return {"ok": True, "kernels": [kernel["name"]]}


def describe_kernels(gm, inputs) -> str:
    """'1 kernel (k0_tanh)' for a graph that compiles; '' when it does not."""
    try:
        with __import__("torch").no_grad():
            names = [k["name"] for k in compile_kernels(gm, inputs).report["kernels"]]
    except Exception:
        return ""
    return f"{len(names)} kernel{'s' if len(names) != 1 else ''} ({', '.join(names)})"
