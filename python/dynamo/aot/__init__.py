"""The AOT layer behind ``aot_eager``, ``aot_eager_default_partitioner`` and
``aot_eager_decomp_partition`` (backends/backends.def; docs/aot.md).

The C++ backend (backends/src/aot_backend.cpp) calls ``compile_graph`` with the captured graph
as a torch.fx.GraphModule and the real inputs:

    captured graph --tracing.trace (make_fx, real mode, on clones)--> ATen FX graph
      --importer.to_ir--> joint graph (core IR) --_C._aot.partition--> forward, backward graphs
      --forward/backward compilers (core's GraphRunner)--> runtime.make_training_fn
    inference (grad mode off, or no input / output requires grad): forward-only trace, no joint.
    preset "fused": graph_cache.py keys the captured graph and its inputs before the trace; a hit
    reads the trace's layout and the imported / partitioned graphs back from disk instead.

It returns the callable, or a str (the reason) when the graph must run on the eager runner
instead. Every compile leaves a record: logged with DYNAMO_LOGS=aot_graphs,partition and written
to the trace store as artifacts of the compile (``dynamo.aot``, ``dynamo.aot.joint``,
``dynamo.aot.forward``, ``dynamo.aot.backward``).
"""
import json
import os
import threading
import time

import torch

from dynamo import _C, autograd_function, context_nodes, eval_frame, logs, recording
from dynamo.aot import decompositions, graph_cache, importer, rewrites, runtime, saved_outputs, split, tracing
from dynamo.aot.tracing import Fallback

__all__ = ["compile_graph", "probe_graph", "PRESETS", "Fallback", "last_records", "make_backend"]

#: backend name -> (partition mode, decompose)
PRESETS = {
    "aot_eager": ("min_cut", False),
    "aot_eager_default_partitioner": ("save_all", False),
    "aot_eager_decomp_partition": ("min_cut", True),
    "fused": ("min_cut", True),
}

_local = threading.local()
_recent = []          # the last records, newest last (tests and tools)
_RECENT_MAX = 64


def _default_compiler(graph):
    return graph.runner()


# ---- preset "fused": forward and backward graphs lowered to kernels (docs/codegen.md) ---------

#: The function (and line) whose forward / backward graph is being compiled, set around the
#: compilers' calls (the backward compile comes later, at the first backward): kernels whose text
#: repeats across compiles of one scope (the function traced at other sizes) take the sizes that
#: differ as parameters, so one C++ compile serves them (docs/dynamic-shapes.md). Kept per thread
#: (_local.size_scope): two threads compiling at once must not see each other's scope.
def _size_scope():
    return getattr(_local, "size_scope", "")


def _fused_compiler(kind):
    def compile_fused(graph):
        outer = _size_scope()
        scope = f"{outer}:{kind}" if outer else ""
        if _probing() and scope:
            _local.probed += _C._codegen.probe(graph.serialize(), scope, inside_autograd=True)
            return None
        return _C._codegen.compile(graph.serialize(), [], inside_autograd=True, name=kind, size_scope=scope)
    return compile_fused


def _probing():
    return getattr(_local, "probed", None) is not None


def _grown(t, dims):
    """t with each dimension in dims one larger (its first slice repeated at the end: values
    of the kind the graph sees, valid indices stay valid), contiguous, its requires_grad kept."""
    if not dims or not isinstance(t, torch.Tensor):
        return t
    with torch.no_grad():
        g = t.detach()
        for d in dims:
            g = torch.cat([g, g.narrow(d, 0, 1)], d)
        return g.contiguous().requires_grad_(t.requires_grad)


def probe_graph(gm, examples, grow, backend, function="", file="", line=0):
    """The probe lowering of a training graph with dynamic sizes (preset "fused";
    backends/src/aot_backend.cpp): gm traced, partitioned and its forward and backward graphs
    lowered (no C++ compile) at probe sizes, input i with each dimension in grow[i] one larger,
    so that the integers that move with the sizes are parameters already in the kernels of the
    first size's compile (docs/dynamic-shapes.md). No record, no cache entry. Returns how many
    kernels it registered (0: nothing to probe, or the trace fell back)."""
    if backend not in COMPILERS or not any(grow):
        return 0
    probes = [_grown(t, dims) for t, dims in zip(examples, grow)]
    saved, _local.probed = getattr(_local, "probed", None), 0
    try:
        compile_graph(gm, probes, backend, function, file, line)
        return _local.probed
    finally:
        _local.probed = saved


def _scoped(compiler, scope):
    def scoped(graph):
        saved, _local.size_scope = _size_scope(), scope
        try:
            return compiler(graph)
        finally:
            _local.size_scope = saved
    return scoped


#: backend -> (forward compiler, backward compiler) used instead of the graph runner
COMPILERS = {"fused": (_fused_compiler("forward"), _fused_compiler("backward"))}


class _Plan:
    def __init__(self, traced, backend, function, where):
        self.__dict__.update(traced.__dict__)
        self.backend, self.function, self.where = backend, function, where


def compile_graph(gm, examples, backend, function="", file="", line=0,
                  fw_compiler=_default_compiler, bw_compiler=_default_compiler):
    """A callable over the graph inputs running the AOT-compiled graph, or the reason (str) to
    run the graph on the eager runner instead."""
    mode, decompose = PRESETS.get(backend, ("min_cut", False))
    if backend in COMPILERS and fw_compiler is _default_compiler and bw_compiler is _default_compiler:
        fw_compiler, bw_compiler = COMPILERS[backend]
        scope = f"aot:{function}@{file}:{line}"
        fw_compiler, bw_compiler = _scoped(fw_compiler, scope), _scoped(bw_compiler, scope)
    rec = {"backend": backend, "function": function, "file": file, "line": int(line),
           "partition_mode": mode, "phases_ms": {}, "fallback": None}
    custom = autograd_function.aot_reason(gm)
    if custom is not None:
        rec["fallback"] = custom
        _finish(rec)
        return custom
    if context_nodes.has_inference_mode(gm):
        rec["fallback"] = ("the graph enters torch.inference_mode: its results must be inference tensors, "
                           "which a traced graph run outside the mode does not make")
        _finish(rec)
        return rec["fallback"]
    parts = split.split_at_autograd(gm)
    if parts is not None and context_nodes.has_autocast(gm):
        rec["fallback"] = "the graph enters an autocast block and calls autograd: it runs on the eager runner"
        _finish(rec)
        return rec["fallback"]
    if (context_nodes.has_autocast(gm) and any(runtime.autocast_on())
            and torch.is_grad_enabled() and any(getattr(t, "requires_grad", False) for t in examples)):
        # The joint trace would run the backward under the autocast entered around the call,
        # casting the backward ops of the block's uncast ops that eager's backward runs uncast.
        rec["fallback"] = ("the graph has an autocast block, is called under autocast and needs autograd: "
                           "it runs on the eager runner")
        _finish(rec)
        return rec["fallback"]
    if parts is not None and any(n.op != "placeholder" and n.op != "output" for n in parts[0].graph.nodes):
        return _compile_split(parts, examples, backend, function, file, line, fw_compiler, bw_compiler)
    sources = [n.meta.get("dynamo_source", n.name) for n in gm.graph.nodes if n.op == "placeholder"]
    if os.environ.get("DYNAMO_REPRO_AFTER") == "aot":
        from dynamo.minifier import aot_stage  # dynamo-minify --after=aot (docs/minify.md)
        fw_compiler, bw_compiler = aot_stage.wrap_compilers(fw_compiler, bw_compiler, backend)
    depth = context_nodes.depth()
    try:
        fn = _compile(gm, list(examples), sources, rec, mode, decompose, fw_compiler, bw_compiler)
    except Fallback as e:
        rec["fallback"] = str(e)
        fn = str(e)
    finally:
        context_nodes.unwind(depth)  # a trace that failed inside an autocast block leaves it
    _finish(rec)
    return fn


def _compile_split(parts, examples, backend, function, file, line, fw_compiler, bw_compiler):
    """A graph with loss.backward() inside: the part before it through the AOT layer, the rest
    (the autograd call, the optimizer's updates) as captured (split.py)."""
    pre, post = parts
    fn = compile_graph(pre, examples, backend, f"{function} (before its autograd call)", file, line,
                       fw_compiler, bw_compiler)
    if isinstance(fn, str):
        return fn
    run_post = post.forward

    def split_step(*args):
        return run_post(*args, *fn(*args))

    return split_step


def _phase(rec, name, start):
    rec["phases_ms"][name] = round((time.perf_counter() - start) * 1e3, 3)


def _compile(gm, examples, sources, rec, mode, decompose, fw_compiler, bw_compiler):
    tracing.check_inputs(examples, sources)
    cache_key = _cache_key(gm, examples, sources, rec, mode, decompose)
    if cache_key is not None:
        start = time.perf_counter()
        entry = graph_cache.load(cache_key)
        _phase(rec, "graph_cache", start)
        if entry is not None:
            rec["graph_cache"] = "hit"
            return _from_entry(entry, rec, fw_compiler, bw_compiler)
        rec["graph_cache"] = "miss"
    training = torch.is_grad_enabled() and any(t.requires_grad for t in examples)
    counts = {}
    table = decompositions.table(counts) if decompose else None
    start = time.perf_counter()
    traced = tracing.trace(gm, examples, sources, training, table)
    _phase(rec, "trace", start)
    plan = _Plan(traced, rec["backend"], rec["function"], f"{rec['file']}:{rec['line']}")
    rec.update(training=traced.training, mutated_inputs=[sources[i] for i in traced.mutated_inputs],
               inplace_rewritten=traced.rewritten, trace_mode=traced.mode)
    if decompose:
        rec["decompositions"] = counts
    device = str(next((t.device for t in examples), "cpu"))
    n_in, n_const = len(sources), len(traced.constants)
    names = dict(zip(traced.placeholders, sources))
    names.update({p: f"constant {p}" for p in traced.placeholders[n_in:n_in + n_const]})
    names.update({p: f"tangents[{i}]" for i, p in enumerate(traced.placeholders[n_in + n_const:])})
    start = time.perf_counter()
    graph = importer.to_ir(traced.graph, names, device)
    _phase(rec, "import", start)
    if not traced.training:
        if cache_key is not None:
            _store(cache_key, traced, rec, {"forward": graph.serialize()})
        return _inference(graph, plan, rec, traced.constants, fw_compiler)
    rec["joint"] = graph
    rec["watched_outputs"] = saved_outputs.outputs_read_by_backward(graph, traced.num_user_outputs,
                                                                    traced.num_fwd_outputs)
    start = time.perf_counter()
    part = _partition(graph, traced, mode)
    _phase(rec, "partition", start)
    rec.update(saved=part["saved"], recomputed=part["recomputed"], bytes_saved=part["bytes_saved"],
               summary=part["summary"])
    if cache_key is not None:
        _store(cache_key, traced, rec, {"joint": graph.serialize(), "forward": part["forward"],
                                        "backward": part["backward"]})
    return _training(part["forward"], part["backward"], plan, rec, traced.constants, fw_compiler, bw_compiler)


# ---- the whole-graph cache of the fused preset (graph_cache.py; docs/codegen.md) --------------

#: The trace's fields an entry keeps (everything runtime.py and the record read, no graph).
_PLAN_FIELDS = ("training", "num_primals", "num_user_outputs", "num_fwd_outputs", "diff_inputs",
                "diff_outputs", "out_requires_grad", "mutated_inputs", "mutated_placeholders", "rewritten",
                "functionalized", "placeholders", "grad_tangents")
#: The compile record's fields an entry keeps.
_REC_FIELDS = ("training", "mutated_inputs", "inplace_rewritten", "decompositions", "saved", "recomputed",
               "bytes_saved", "summary", "watched_outputs")


def _cache_key(gm, examples, sources, rec, mode, decompose):
    """The whole-graph cache key of this compile, or None (not the fused preset, the cache off, or
    a graph it cannot key: recorded in rec["graph_cache"])."""
    if rec["backend"] not in graph_cache.BACKENDS or not graph_cache.enabled() or _probing():
        return None
    context = (f"mode={mode} decompose={decompose} grad={torch.is_grad_enabled()} "
               f"autocast={runtime.autocast_on()} sources={sources}")
    try:
        return graph_cache.key(gm, examples, rec["backend"], context)
    except graph_cache.Uncacheable as e:
        graph_cache.uncacheable()
        rec["graph_cache"] = f"not cached: {e}"
        return None


def _store(cache_key, traced, rec, graphs):
    if traced.constants:
        graph_cache.uncacheable()
        rec["graph_cache"] = "not cached: the trace lifted tensor constants"
        return
    plan = {f: getattr(traced, f) for f in _PLAN_FIELDS}
    graph_cache.store(cache_key, dict(graphs, plan=plan, rec={f: rec[f] for f in _REC_FIELDS if f in rec}))


def _from_entry(entry, rec, fw_compiler, bw_compiler):
    """The compiled callable from a cache entry: what the trace, import and partition made, read
    back; the forward (and later the backward) graph lowered as after a trace."""
    traced = tracing.Traced(constants=[], **entry["plan"])
    plan = _Plan(traced, rec["backend"], rec["function"], f"{rec['file']}:{rec['line']}")
    rec.update(entry["rec"])
    if not traced.training:
        return _inference(_C._graph.read_graph(entry["forward"]).resolve(), plan, rec, [], fw_compiler)
    rec["joint"] = graph_cache.StoredGraph(entry["joint"])
    if "watched_outputs" not in rec:  # an entry stored before the field existed
        rec["watched_outputs"] = saved_outputs.outputs_read_by_backward(
            _C._graph.read_graph(entry["joint"]), traced.num_user_outputs, traced.num_fwd_outputs)
    return _training(entry["forward"], entry["backward"], plan, rec, [], fw_compiler, bw_compiler)


def _inference(graph, plan, rec, constants, fw_compiler):
    rec["forward"] = graph
    start = time.perf_counter()
    fw = fw_compiler(graph)
    _phase(rec, "compile_forward", start)
    if _probing():
        return fw
    return _with_constants(runtime.make_inference_fn(fw, plan), constants)


def _training(forward_json, backward_json, plan, rec, constants, fw_compiler, bw_compiler):
    start = time.perf_counter()
    forward = _C._graph.read_graph(forward_json).resolve()
    rec["forward"], rec["backward_json"] = forward, backward_json
    fw = fw_compiler(forward)
    _phase(rec, "compile_forward", start)
    if _probing():  # the backward is lowered now (a probe has no backward call to wait for)
        bw_compiler(_C._graph.read_graph(backward_json).resolve())
        return fw

    owner = {"entry_id": 0}  # the cache entry this compile is part of (_claim_owners)
    _owners().append(owner)

    def compile_backward():
        # Compiled at the first backward call, after the compile was recorded: the backend's
        # kernels are late rows of the compile that made the entry (docs/trace-store.md).
        return _C._compiler.collect_late_kernels(
            owner["entry_id"], lambda: bw_compiler(_C._graph.read_graph(backward_json).resolve()))

    def backward_compiled(ms):
        rec["phases_ms"]["compile_backward"] = round(ms, 3)
        if logs.enabled("aot_graphs"):
            logs._emit([f"{logs.PREFIX} aot: compiled the backward of {rec['function']} in {ms:.1f} ms"])

    watched = rec.get("watched_outputs", ())
    return _with_constants(runtime.make_training_fn(fw, compile_backward, plan, backward_compiled, watched),
                           constants)


def _with_constants(fn, constants):
    """fn with the trace's tensor constants appended to every call's inputs."""
    if not constants:
        return fn
    constants = tuple(constants)

    def with_constants(*args):
        return fn(*args, *constants)

    return with_constants


def _never_recomputed(graph):
    """Schema names of the ops no partition may recompute: random ops (a recompute draws fresh
    numbers) and ops that write memory (a recompute writes again)."""
    out = set()
    for n in graph.nodes:
        if n.op == "call_function" and n.target_kind == "aten":
            schema = n.schema
            if (rewrites.is_random(schema) or schema.split("::")[1].split(".")[0].endswith("_")
                    or schema.startswith("aten::native_batch_norm")):
                out.add(schema)
    return out


def _partition(graph, traced, mode):
    """_C._aot.partition, then a check: a recomputed node must not read a value an in-place op
    writes (it would see the new value); when one does, the save-all partition is used."""
    disabled = sorted(_never_recomputed(graph))
    text = graph.serialize()
    part = _C._aot.partition(text, traced.num_primals, traced.num_fwd_outputs,
                             save_all=(mode == "save_all"), disabled_ops=disabled)
    if part["recomputed"] and (_recompute_reads_written(graph, part["recomputed"])
                               or set(part["recomputed"]) & _names_of(graph, disabled)):
        part = _C._aot.partition(text, traced.num_primals, traced.num_fwd_outputs, save_all=True,
                                 disabled_ops=disabled)
        part["summary"] += " (save-all: the min-cut recomputed a random or in-place op, or read a value written in place)"
    return part


def _names_of(graph, schemas):
    schemas = set(schemas)
    return {n.name for n in graph.nodes if n.op == "call_function" and n.target_kind == "aten" and n.schema in schemas}


def _recompute_reads_written(graph, recomputed):
    written = set()
    for n in graph.nodes:
        if n.op == "call_function" and n.target_kind == "aten" and n.schema.split("::")[1].split(".")[0].endswith("_"):
            if n.args:
                written.add(n.args[0].name if hasattr(n.args[0], "name") else None)
    for name in recomputed:
        node = graph.find(name)
        if node is None:
            continue
        for a in node.args:
            if hasattr(a, "name") and a.name in written:
                return True
    return False


# ---- records: logs and the trace store ------------------------------------------------------

def _pending():
    p = getattr(_local, "pending", None)
    if p is None:
        p = _local.pending = []
    return p


def _finish(rec):
    if _probing():  # a probe lowering is part of the compile that runs it, not a compile
        return
    _pending().append(rec)
    _recent.append(rec)
    del _recent[:-_RECENT_MAX]
    _log(rec)


def last_records():
    """The most recent AOT compile records (dicts), newest last."""
    return list(_recent)


def _summary_json(rec):
    keys = ("backend", "function", "file", "line", "training", "partition_mode", "fallback", "phases_ms",
            "mutated_inputs", "inplace_rewritten", "saved", "recomputed", "bytes_saved", "summary",
            "decompositions", "graph_cache")
    return json.dumps({k: rec[k] for k in keys if k in rec}, sort_keys=True)


def _log(rec):
    where = f"{rec['function']} ({rec['file']}:{rec['line']})"
    lines = []
    if logs.enabled("aot_graphs"):
        if rec["fallback"]:
            lines.append(f"{logs.PREFIX} aot: {rec['backend']} runs the graph of {where} on the eager runner: "
                         f"{rec['fallback']}")
        else:
            times = ", ".join(f"{k} {v:.1f} ms" for k, v in rec["phases_ms"].items())
            lines.append(f"{logs.PREFIX} aot: {rec['backend']} compiled {where} "
                         f"({'training' if rec.get('training') else 'inference'}): {times}")
            for key in ("joint", "forward"):
                if key in rec:
                    lines += logs._block(f"aot {key} graph of {where}", str(rec[key]))
            if "backward_json" in rec:
                lines += logs._block(f"aot backward graph of {where}",
                                     str(_C._graph.read_graph(rec["backward_json"])))
    if logs.enabled("partition") and "summary" in rec:
        lines.append(f"{logs.PREFIX} partition of {where} ({rec['partition_mode']}): {rec['summary']}")
        if logs.enabled("partition") > 1:
            lines.append(f"    saved: {', '.join(rec['saved'])}")
            lines.append(f"    recomputed: {', '.join(rec['recomputed']) or '-'}")
    if lines:
        logs._emit(lines)


def _artifacts():
    """The trace-store artifacts of the AOT compiles of this compile record (recording hook)."""
    out = []
    for rec in _pending():
        out.append(("dynamo.aot", _summary_json(rec).encode(), "application/json"))
        for key in ("joint", "forward"):
            if key in rec:
                out.append((f"dynamo.aot.{key}", rec[key].serialize().encode(), "application/json"))
        if "backward_json" in rec:
            out.append(("dynamo.aot.backward", rec["backward_json"].encode(), "application/json"))
    return out


def take_pending_json(entry_id=0):
    """The "dynamo.aot" JSON of the newest AOT compile not yet linked to a compile record, or None;
    forgets them all. The aot backends call it after compiling a dynamic graph for new input sizes
    during a call (backends/src/aot_backend.cpp), so that the record goes with that entry's
    compile and not with the process's next one; the training functions it made belong to the
    entry `entry_id`."""
    _claim_owners(entry_id)
    pending = _pending()
    out = _summary_json(pending[-1]) if pending else None
    pending.clear()
    return out


def _owners():
    o = getattr(_local, "owners", None)
    if o is None:
        o = _local.owners = []
    return o


def _claim_owners(entry_id):
    """The training functions made since the last claim belong to the cache entry `entry_id`
    (0: no entry was made): their backward graphs' kernels are recorded with its compile."""
    for owner in _owners():
        owner["entry_id"] = entry_id
    _owners().clear()


def _clear_pending(record):
    _pending().clear()
    _claim_owners(record.get("entry_id", 0))


def make_backend(backend="aot_eager", fw_compiler=_default_compiler, bw_compiler=_default_compiler):
    """A Python backend compiler(gm, example_inputs) running the AOT layer with other forward and
    backward compilers (each takes a _C._graph.Graph, returns a callable over its inputs)."""
    def aot_backend(gm, example_inputs):
        fn = compile_graph(gm, example_inputs, backend, getattr(gm, "_dynamo_function", ""), "", 0,
                           fw_compiler, bw_compiler)
        return gm.forward if isinstance(fn, str) else fn
    return aot_backend


recording.add_artifact_source(_artifacts)
eval_frame.add_compile_listener(_clear_pending, listings=False)
