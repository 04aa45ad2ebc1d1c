"""Imports an ATen-level torch.fx.Graph (from tracing.trace) into Dynamo's graph IR.

Each call becomes a call_function node whose target is the ATen operator itself (core names it
``torch.ops.aten.add.Tensor``, schema ``aten::add.Tensor``) or ``operator.getitem``, with the
tensor meta make_fx recorded (shape, strides, memory format, dtype, requires_grad; the device is
the graph's, which make_fx's metadata lacks). Placeholders keep the user source of the input they
stand for ("self.conv1.weight"); tangents are "tangents[i]". The output is one flat tuple.
"""
import torch

from dynamo import _C

__all__ = ["to_ir"]


def _memory_format(tm):
    fmt = getattr(tm, "memory_format", None)
    if fmt == torch.contiguous_format:
        return "contiguous"
    if fmt == torch.channels_last:
        return "channels_last"
    return "other"


def _meta(node, device):
    tm = node.meta.get("tensor_meta")
    if tm is None or not hasattr(tm, "shape"):
        return None
    return (tuple(int(d) for d in tm.shape), tm.dtype, device, bool(tm.requires_grad),
            tuple(int(s) for s in tm.stride), _memory_format(tm))


def _map(value, env):
    if isinstance(value, torch.fx.Node):
        return env[value]
    if isinstance(value, tuple):
        return tuple(_map(v, env) for v in value)
    if isinstance(value, list):
        return [_map(v, env) for v in value]
    if isinstance(value, dict):
        return {k: _map(v, env) for k, v in value.items()}
    return value


def to_ir(fx_graph, sources, device):
    """The _C._graph.Graph of fx_graph. sources: {placeholder name: user source}."""
    b = _C._graph.GraphBuilder()
    env = {}
    for n in fx_graph.nodes:
        if n.op == "placeholder":
            env[n] = b.placeholder(sources.get(n.name, n.name), name=n.name, tensor_meta=_meta(n, device))
        elif n.op == "call_function":
            env[n] = b.call_function(n.target, _map(tuple(n.args), env), _map(dict(n.kwargs), env),
                                     name=n.name, tensor_meta=_meta(n, device))
        elif n.op == "output":
            b.output(tuple(_map(v, env) for v in n.args[0]))
        else:
            raise ValueError(f"unexpected {n.op} node {n.name!r} in an ATen trace")
    return b.build()
