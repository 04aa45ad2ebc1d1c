"""Builds torch.fx.GraphModules from plain node descriptions.

Both ways of getting an FX graph out of Dynamo end here, so they agree node for node:

- ``Graph.to_fx()`` (C++, core/src/graph/fx.cpp) describes its nodes as tuples and calls
  :func:`build_graph_module`;
- :func:`dynamo.graph_io.deserialize` decodes the trace store's JSON into the same tuples.

An entry is ``(op, name, target, args, kwargs, meta)``: ``op`` is an FX op name
("placeholder", "call_function", "call_method", "output"); ``target`` is the callable for
call_function and the method name for call_method; ``args``/``kwargs`` hold plain Python values
with references to earlier nodes written as :class:`NodeRef`; ``meta`` is a dict with the optional
keys source, location, user_stack, stack_trace, tensor_meta and tensor_layout ((strides,
memory_format), when known).

Parameters and buffers are placeholders, so the GraphModule is a pure function of its inputs.
"""

__all__ = ["NodeRef", "build_graph_module"]


class NodeRef:
    """A reference to an earlier node, by name, inside an entry's args or kwargs."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"NodeRef({self.name!r})"

    def __eq__(self, other):
        return isinstance(other, NodeRef) and other.name == self.name

    def __hash__(self):
        return hash(("NodeRef", self.name))


def _resolve(value, env):
    """value with every NodeRef replaced by the fx.Node it names."""
    if isinstance(value, NodeRef):
        return env[value.name]
    if isinstance(value, tuple):
        return tuple(_resolve(v, env) for v in value)
    if isinstance(value, list):
        return [_resolve(v, env) for v in value]
    if isinstance(value, dict):
        return {k: _resolve(v, env) for k, v in value.items()}
    if isinstance(value, slice):
        return slice(_resolve(value.start, env), _resolve(value.stop, env),
                     _resolve(value.step, env))
    return value


def _copy_meta(node, meta):
    if "stack_trace" in meta:
        node.meta["stack_trace"] = meta["stack_trace"]
    for key in ("source", "location", "user_stack", "tensor_meta", "tensor_layout"):
        if key in meta:
            node.meta["dynamo_" + key] = meta[key]


def _needs_method_form(target):
    """True for a torch.Tensor method descriptor (torch.Tensor.add_) that this torch's FX cannot
    name in generated code (torch < 2.0 has no case for method descriptors). Such a node becomes
    call_method, which is the same call: torch.Tensor.add_(x, y) is x.add_(y)."""
    import types
    import torch
    import torch.fx.node

    if not isinstance(target, (types.MethodDescriptorType, types.WrapperDescriptorType)):
        return False
    try:
        torch.fx.node._get_qualified_name(target)
        return False
    except AttributeError:
        return getattr(torch.Tensor, target.__name__, None) is target


def build_graph_module(entries, class_name="DynamoGraphModule"):
    """A torch.fx.GraphModule made from entries (see the module docstring).

    Node names are kept as given: Dynamo already makes them unique and valid the way FX does. A
    name FX would change means the entries are inconsistent, and raises ValueError. On torch
    versions whose FX cannot print a torch.Tensor method descriptor target, that call_function
    node is made a call_method node (see _needs_method_form).
    """
    import torch
    import torch.fx

    graph = torch.fx.Graph()
    env = {}
    for op, name, target, args, kwargs, meta in entries:
        if op == "placeholder":
            node = graph.create_node(op, name, name=name)
        elif op == "output":
            node = graph.output(_resolve(args[0], env))
        elif op in ("call_function", "call_method"):
            if op == "call_function" and _needs_method_form(target):
                op, target = "call_method", target.__name__
            node = graph.create_node(op, target, _resolve(tuple(args), env),
                                     _resolve(dict(kwargs), env), name=name)
        else:
            raise ValueError(f"unknown node op {op!r} for node {name!r}")
        if op != "output" and node.name != name:
            raise ValueError(f"node name {name!r} is not unique or not a valid FX name "
                             f"(FX renamed it to {node.name!r})")
        _copy_meta(node, meta or {})
        env[name] = node
    graph.lint()
    return torch.fx.GraphModule(torch.nn.Module(), graph, class_name)
