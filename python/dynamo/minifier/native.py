"""Compiling a GraphModule with a backend of backends.def (C++) from Python, for the probe.

A backend of backends.def takes Dynamo's IR graph, not a GraphModule, and the probe runs where
the frame hook is suspended (inside the compiler, or inside a compiled graph's call), so a
nested dynamo.compile(gm) would silently run eagerly. Instead the GraphModule is imported back
into the IR (`to_ir`: placeholders, call_function and call_method nodes, with tensor meta from a
shape propagation on the real inputs) and handed to the same code the C++ backend runs:

    eager                         the IR graph's runner (core's GraphRunner)
    fused                         dynamo._C._codegen.compile(graph JSON, inputs); graphs needing
                                  autograd run eagerly, as in backends/src/fused_backend.cpp
    aot_eager, aot_eager_*        dynamo.aot.compile_graph(gm, inputs, name)

The pass pipeline (passes.def) has already run on the graph the probe gets; it does not run
again on the minifier's smaller graphs (dynamo-bisect covers the passes).
"""
from __future__ import annotations

AOT_BACKENDS = ("aot_eager", "aot_eager_default_partitioner", "aot_eager_decomp_partition")


def _map(value, env):
    import torch.fx
    if isinstance(value, torch.fx.Node):
        return env[value]
    if isinstance(value, tuple):
        return tuple(_map(v, env) for v in value)
    if isinstance(value, list):
        return [_map(v, env) for v in value]
    if isinstance(value, dict):
        return {k: _map(v, env) for k, v in value.items()}
    if isinstance(value, slice):
        return slice(_map(value.start, env), _map(value.stop, env), _map(value.step, env))
    return value


def to_ir(gm, inputs):
    """The _C._graph.Graph of a GraphModule (placeholders, call_function, call_method)."""
    import torch
    from torch.fx.passes.shape_prop import ShapeProp
    from dynamo import _C
    from dynamo.aot import importer
    device = next((str(v.device) for v in inputs if isinstance(v, torch.Tensor)), "cpu")
    # On clones: a graph that updates an input in place (batch norm's running stats) must not
    # update the user's tensors a second time.
    with torch.no_grad():
        ShapeProp(gm).propagate(*[v.detach().clone() if isinstance(v, torch.Tensor) else v
                                  for v in inputs])
    b = _C._graph.GraphBuilder()
    env = {}
    for n in gm.graph.nodes:
        meta = importer._meta(n, device)
        if n.op == "placeholder":
            env[n] = b.placeholder(n.meta.get("dynamo_source", n.name), name=n.name, tensor_meta=meta)
        elif n.op == "call_function":
            env[n] = b.call_function(n.target, _map(tuple(n.args), env), _map(dict(n.kwargs), env),
                                     name=n.name, tensor_meta=meta)
        elif n.op == "call_method":
            env[n] = b.call_method(n.target, _map(tuple(n.args), env), _map(dict(n.kwargs), env),
                                   name=n.name, tensor_meta=meta)
        elif n.op == "output":
            b.output(_map(n.args[0], env))
        else:
            raise ValueError(f"unexpected {n.op} node {n.name!r}")
    return b.build()


def compile_native(name, gm, inputs):
    """A callable running gm the way backend `name` of backends.def does; None when `name` is
    not one this module knows."""
    import torch
    if name in AOT_BACKENDS:
        from dynamo import aot
        fn = aot.compile_graph(gm, list(inputs), name)
        return gm.forward if isinstance(fn, str) else fn
    if name == "eager":
        return to_ir(gm, inputs).runner()
    if name == "fused":
        from dynamo import _C
        if torch.is_grad_enabled() and any(isinstance(v, torch.Tensor) and v.requires_grad
                                           for v in inputs):
            return gm.forward
        return _C._codegen.compile(to_ir(gm, inputs).serialize(), list(inputs))
    return None
