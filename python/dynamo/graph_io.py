"""Reading graphs written by Dynamo's serializer (core/src/graph/serializer.cpp).

The trace store keeps each captured graph as JSON text (format "dynamo.graph", version 1; the
format is described in core/include/dynamo/core/graph_serializer.h). This module turns that text
back into a ``torch.fx.GraphModule`` for the minifier and the Qt inspector::

    gm = dynamo.graph_io.deserialize(text)
    gm(x, y)

Call targets are stored by qualified name ("torch.add", "operator.getitem",
"torch.Tensor.add_") and resolved by importing; pass ``resolve=`` to control that (for example
to refuse names outside torch). Only the standard library is needed to *read* the JSON
(:func:`load`); building the GraphModule needs torch. Members added over version 1 ("schema" of
ATen operator targets, "strides" and "memory_format" of tensor meta) are optional.

The C++ reader of the same text is ``dynamo._C._graph.read_graph(text)`` (see :func:`read`): it
gives the IR Graph itself (printable, comparable, re-serializable byte for byte), with targets
known by name until ``Graph.resolve()``.
"""
import importlib
import json

from dynamo import fx_bridge

__all__ = ["FORMAT", "VERSION", "GraphFormatError", "load", "decode_arg", "resolve_target",
           "to_entries", "deserialize", "read"]

FORMAT = "dynamo.graph"
VERSION = 1


class GraphFormatError(ValueError):
    """The text is not a graph this version of Dynamo can read."""


def load(text):
    """The parsed JSON document, after checking its format and version."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise GraphFormatError(f"graph text is not valid JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise GraphFormatError(f"not a Dynamo graph: expected format {FORMAT!r}")
    if doc.get("version") != VERSION:
        raise GraphFormatError(
            f"graph format version {doc.get('version')!r} is not supported (this reader knows "
            f"version {VERSION}); read it with the Dynamo version that wrote it")
    return doc


def resolve_target(name):
    """The object a qualified name stands for: import the first part, then walk attributes,
    importing submodules where an attribute is missing ("torch.nn.functional.relu")."""
    parts = name.split(".")
    try:
        obj = importlib.import_module(parts[0])
        prefix = parts[0]
        for part in parts[1:]:
            prefix += "." + part
            try:
                obj = getattr(obj, part)
            except AttributeError:
                obj = importlib.import_module(prefix)
    except ImportError:
        raise GraphFormatError(f"cannot resolve call target {name!r}: no such module or "
                               f"attribute in this Python environment") from None
    return obj


def _torch_constant(kind, name):
    import torch
    if kind == "device":
        return torch.device(name)
    attr = name[len("torch."):] if name.startswith("torch.") else name
    return getattr(torch, attr)


def decode_arg(value):
    """A serialized argument as a Python value; node references become fx_bridge.NodeRef."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [decode_arg(v) for v in value]
    if not isinstance(value, dict) or len(value) != 1:
        raise GraphFormatError(f"malformed argument: {value!r}")
    (tag, payload), = value.items()
    if tag == "node":
        return fx_bridge.NodeRef(payload)
    if tag == "float":
        return float(payload)
    if tag in ("dtype", "device", "memory_format", "layout"):
        return _torch_constant(tag, payload)
    if tag == "ellipsis":
        return Ellipsis
    if tag == "slice":
        return slice(*(decode_arg(v) for v in payload))
    if tag == "tuple":
        return tuple(decode_arg(v) for v in payload)
    if tag == "dict":
        return {key: decode_arg(v) for key, v in payload}
    raise GraphFormatError(f"unknown argument tag {tag!r}")


def _decode_meta(meta):
    out = {}
    loc = lambda d: (d["file"], d["line"], d["source_line"])  # noqa: E731
    if "location" in meta:
        out["location"] = loc(meta["location"])
    if "user_stack" in meta:
        out["user_stack"] = [loc(d) for d in meta["user_stack"]]
    if "stack_trace" in meta:
        out["stack_trace"] = meta["stack_trace"]
    if "tensor" in meta:
        t = meta["tensor"]
        out["tensor_meta"] = (tuple(t["shape"]), t["dtype"], t["device"], t["requires_grad"])
        if "strides" in t:
            out["tensor_layout"] = (tuple(t["strides"]), t["memory_format"])
    return out


def to_entries(text, resolve=resolve_target):
    """The fx_bridge entries of a serialized graph: (op, name, target, args, kwargs, meta)."""
    entries = []
    for node in load(text)["nodes"]:
        op, name = node["op"], node["name"]
        meta = _decode_meta(node.get("meta", {}))
        if op == "placeholder":
            meta["source"] = node.get("source", name)
            entries.append((op, name, name, (), {}, meta))
            continue
        if op == "call_function":
            target = resolve(node["target"])
        elif op in ("call_method", "output"):
            target = node.get("target", "output")
        else:
            raise GraphFormatError(f"unknown node op {op!r} for node {name!r}")
        args = tuple(decode_arg(a) for a in node.get("args", []))
        kwargs = {k: decode_arg(v) for k, v in node.get("kwargs", {}).items()}
        entries.append((op, name, target, args, kwargs, meta))
    return entries


def deserialize(text, resolve=resolve_target):
    """A torch.fx.GraphModule rebuilt from serialized graph text."""
    return fx_bridge.build_graph_module(to_entries(text, resolve))


def read(text, resolve=False):
    """The IR Graph (``dynamo._C._graph.Graph``) of serialized graph text, through the C++ reader;
    with ``resolve=True`` its targets are imported by name so it can run (``graph.runner()``)."""
    from dynamo._C import _graph
    graph = _graph.read_graph(text)
    return graph.resolve() if resolve else graph
