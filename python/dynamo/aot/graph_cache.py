"""The fused backend's whole-graph cache: the AOT layer's result for one captured graph, on disk.

A warm compile of a training step used to spend most of its first call in the AOT trace (make_fx of
the joint graph with the decompositions, docs/performance.md). This cache skips it: the key is
made from the Dynamo-captured graph and its inputs BEFORE the trace, and the entry holds what the
trace, the import and the partition produced, so that a hit goes straight to lowering the forward
graph (whose kernels the kernel cache holds):

    key   = sha256(format, Python and torch versions, this package's code, backend, grad mode,
                   autocast state, default dtype, every captured node (op, name, target, args),
                   every input's type, dtype, device, sizes, strides, offset, requires_grad, leaf)
    entry = <cache dir>/<key>.graph:  "dynamo-graph-cache <sha256 of body>\\n" + body (JSON):
            the trace's layout (num_primals, outputs, diff inputs/outputs, mutations, ...), the
            compile record's fields, and the joint, forward and backward graphs (core IR JSON)

The directory, the lock per key, the temp file + rename and the size limit with eviction are the
kernel cache's (codegen/kernel_cache.h: _C._codegen.cache_read / cache_write). An entry whose
checksum, format or key does not match is ignored with a warning and compiled again (then
overwritten). A graph calling anything but torch, operator, math, builtins or dynamo functions
(named so that the name resolves back to the same object), with an argument of another type, or
whose trace lifted tensor constants, is not cached. DYNAMO_GRAPH_CACHE=0 turns the cache off;
DYNAMO_AOT_TRACE=check skips it (neither read nor written: the check traces every graph).
"""
import hashlib
import json
import os
import sys
import warnings

import torch

from dynamo import _C

__all__ = ["BACKENDS", "enabled", "key", "load", "store", "counters", "StoredGraph", "Uncacheable"]

#: The AOT presets whose results are cached (their forward/backward compilers lower to kernels).
BACKENDS = ("fused",)
FORMAT = 1
_MAGIC = b"dynamo-graph-cache"
_EXT = ".graph"
_ALLOWED_MODULES = ("torch", "_operator", "operator", "math", "builtins", "dynamo")

_counters = {"hits": 0, "misses": 0, "stores": 0, "rejected": 0, "uncacheable": 0}
_code_version = None


class Uncacheable(Exception):
    """The graph cannot be keyed safely (the message says why)."""


class StoredGraph:
    """A core IR graph kept as its JSON text (the compile record's joint graph on a hit): read
    only when printed (DYNAMO_LOGS=aot_graphs)."""

    def __init__(self, text):
        self._text = text

    def serialize(self):
        return self._text

    def __str__(self):
        return str(_C._graph.read_graph(self._text))


def enabled():
    """Off with DYNAMO_GRAPH_CACHE=0, under the minifier, and with DYNAMO_AOT_TRACE=check: a check
    must trace both ways, not read back an entry (which the fake trace made)."""
    return (os.environ.get("DYNAMO_GRAPH_CACHE", "1") != "0" and not os.environ.get("DYNAMO_REPRO_AFTER")
            and os.environ.get("DYNAMO_AOT_TRACE") != "check")


def counters():
    """{hits, misses, stores, rejected, uncacheable} of this process: lookups that found a valid
    entry, lookups that found none, entries written, entries ignored as corrupt, graphs not keyed."""
    return dict(_counters)


def _code():
    """A digest of this package's Python sources and of the extension module's file: an entry made
    by other code of the AOT layer, the partitioner or the importer never matches."""
    global _code_version
    if _code_version is None:
        h = hashlib.sha256()
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for f in sorted(filenames):
                path = os.path.join(dirpath, f)
                if f.endswith(".py"):
                    h.update(path.encode())
                    with open(path, "rb") as src:
                        h.update(src.read())
        ext = getattr(_C, "__file__", None)
        if ext:
            st = os.stat(ext)
            h.update(f"{ext} {st.st_size} {st.st_mtime_ns}".encode())
        _code_version = h.hexdigest()
    return _code_version


def _resolves_to(module, path, obj):
    mod = sys.modules.get(module)
    for part in path.split("."):
        if mod is None:
            return False
        mod = getattr(mod, part, None)
    return mod is obj


def _target(node):
    t = node.target
    if node.op in ("placeholder", "output", "call_method"):
        if not isinstance(t, str):
            raise Uncacheable(f"node '{node.name}' has a {type(t).__name__} target")
        return t
    if isinstance(t, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return f"op:{t}"
    module = getattr(t, "__module__", None)
    owner = getattr(t, "__objclass__", None)
    if module is None and owner is not None:
        module = owner.__module__
    names = [n for n in (getattr(t, "__qualname__", None), getattr(t, "__name__", None)) if isinstance(n, str)]
    if isinstance(module, str) and module.split(".")[0] in _ALLOWED_MODULES:
        short = getattr(t, "__name__", None)
        if owner is not None and isinstance(short, str) and _resolves_to(owner.__module__, owner.__qualname__, owner):
            if getattr(owner, short, None) is t:
                return f"{owner.__module__}.{owner.__qualname__}.{short}"
        for name in names:
            if "<" not in name and _resolves_to(module, name, t):
                return f"{module}.{name}"
    raise Uncacheable(f"node '{node.name}' calls {t!r}, which is not a torch, operator, math, builtins or "
                      f"dynamo function reachable by its name")


def _render(a):
    if isinstance(a, torch.fx.Node):
        return "%" + a.name
    if a is None or isinstance(a, (bool, int, float, str)):
        return f"{type(a).__name__}:{a!r}"
    if isinstance(a, (list, tuple)):
        return f"{type(a).__name__}[" + ",".join(_render(x) for x in a) + "]"
    if isinstance(a, dict):
        return "dict{" + ",".join(f"{k!r}:{_render(v)}" for k, v in a.items()) + "}"
    if isinstance(a, slice):
        return f"slice({_render(a.start)},{_render(a.stop)},{_render(a.step)})"
    if a is Ellipsis:
        return "..."
    if isinstance(a, (torch.dtype, torch.device, torch.memory_format, torch.layout)):
        return f"{type(a).__name__}:{a}"
    raise Uncacheable(f"an argument is a {type(a).__name__}")


def _input(t):
    return (f"{type(t).__module__}.{type(t).__qualname__} {t.dtype} {t.device} {tuple(t.shape)} {t.stride()} "
            f"{t.storage_offset()} rg={t.requires_grad} leaf={t.is_leaf} conj={t.is_conj()} neg={t.is_neg()}")


def key(gm, examples, backend, context):
    """The hex key of the captured graph `gm` called with `examples` (the tensors
    tracing.check_inputs accepted) under `backend` and `context` (a str of the global state the
    trace depends on); raises Uncacheable."""
    lines = [f"{_MAGIC.decode()} {FORMAT}", sys.version, torch.__version__, _code(), backend, context,
             str(torch.get_default_dtype())]
    for n in gm.graph.nodes:
        args = _render(n.args) + " " + _render(dict(n.kwargs))
        source = n.meta.get("dynamo_source", "") if n.op == "placeholder" else ""
        lines.append(f"{n.op} {n.name} {_target(n)} {args} {source}")
    lines += [_input(t) for t in examples]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _reject(name, why):
    _counters["rejected"] += 1
    warnings.warn(f"dynamo: ignoring the whole-graph cache entry {os.path.join(_C._codegen.cache_dir(), name)} "
                  f"({why}); compiling the graph again", RuntimeWarning, stacklevel=3)
    return None


def load(k):
    """The entry (dict) stored under key `k`, or None (a miss; a corrupt entry warns)."""
    name = k + _EXT
    data = _C._codegen.cache_read(name)
    if data is None:
        _counters["misses"] += 1
        return None
    header, sep, body = data.partition(b"\n")
    parts = header.split(b" ")
    if not sep or len(parts) != 2 or parts[0] != _MAGIC:
        return _reject(name, "no header")
    if hashlib.sha256(body).hexdigest().encode() != parts[1]:
        return _reject(name, "checksum mismatch: truncated or corrupt")
    try:
        entry = json.loads(body)
    except ValueError as e:
        return _reject(name, f"not JSON: {e}")
    if not isinstance(entry, dict) or entry.get("format") != FORMAT or entry.get("key") != k:
        return _reject(name, "another format or key")
    _counters["hits"] += 1
    return entry


def store(k, entry):
    """Writes `entry` (a JSON-able dict) under key `k`; a cache that cannot be written warns."""
    try:
        body = json.dumps(dict(entry, format=FORMAT, key=k), sort_keys=True).encode()
    except (TypeError, ValueError):  # a field of the trace that JSON cannot hold: not cached
        _counters["uncacheable"] += 1
        return
    data = _MAGIC + b" " + hashlib.sha256(body).hexdigest().encode() + b"\n" + body
    try:
        _C._codegen.cache_write(k + _EXT, data)
    except Exception as e:  # noqa: BLE001 - a read-only cache costs speed, not correctness
        warnings.warn(f"dynamo: cannot write the whole-graph cache entry: {e}", RuntimeWarning, stacklevel=3)
        return
    _counters["stores"] += 1


def uncacheable():
    _counters["uncacheable"] += 1
