"""Joint forward/backward tracing at the ATen level, with functorch's ``make_fx``.

``trace(gm, examples, training, decompositions)`` runs the captured graph (a torch.fx.GraphModule
of torch-level ops) once on clones of its inputs, to learn what eager does (which outputs require
grad, which inputs are mutated, whether outputs alias inputs or each other), then traces it with
``make_fx`` on fresh clones, in real mode, the RNG state saved and put back around both runs:

- training: ``joint(primals, tangents)`` runs the graph, then
  ``torch.autograd.grad(differentiable outputs, inputs that require grad, tangents)``; the FX
  output becomes one flat list: user outputs, mutation markers, one gradient per primal (None
  where there is none);
- inference: the graph alone; output: user outputs, mutation markers.

Afterwards the FX graph is cleaned up (``_drop_dead``), in-place ops on fresh, unaliased values are
made out-of-place (``_functionalize_inplace``: the partitioner may then recompute), and in-place
ops that write graph inputs (BatchNorm running statistics, ``buf.add_(1)``) stay in the graph and
are marked as forward outputs so no partition drops them: they run once, in the forward, on the
real tensors, exactly as eager runs them. Anything that would not give eager's results raises
``Fallback`` with the reason.
"""
import contextlib
import operator

import torch
from torch.utils import _pytree as pytree

__all__ = ["Fallback", "Traced", "trace", "preserve_rng_state"]

#: ATen ops whose output shapes depend on tensor values: a real-mode trace bakes the sizes it saw.
DATA_DEPENDENT_OPS = frozenset({
    "aten::nonzero", "aten::masked_select", "aten::_unique", "aten::_unique2", "aten::unique_dim",
    "aten::unique_consecutive", "aten::_local_scalar_dense", "aten::item", "aten::bincount",
    "aten::repeat_interleave", "aten::histc",
})


class Fallback(Exception):
    """The AOT layer cannot promise eager's results for this graph; str(e) says why."""


class Traced:
    """The result of trace(): the FX graph and the layout of its inputs and outputs."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


@contextlib.contextmanager
def preserve_rng_state():
    """Puts the CPU (and initialised CUDA) RNG state back after the block."""
    cpu = torch.random.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    try:
        yield
    finally:
        torch.random.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


def check_inputs(examples, sources):
    """Fallback for inputs the tracer cannot handle or whose aliasing a clone would break."""
    seen = {}
    for i, t in enumerate(examples):
        name = sources[i]
        if not isinstance(t, torch.Tensor):
            raise Fallback(f"graph input '{name}' is a {type(t).__name__}, not a tensor")
        if type(t) not in (torch.Tensor, torch.nn.Parameter):
            raise Fallback(f"graph input '{name}' is a tensor subclass ({type(t).__name__})")
        if t.layout != torch.strided:
            raise Fallback(f"graph input '{name}' is a sparse tensor ({t.layout}): make_fx cannot trace it")
        if t.is_quantized:
            raise Fallback(f"graph input '{name}' is a quantized tensor: make_fx cannot trace it")
        if t.is_complex():
            raise Fallback(f"graph input '{name}' is a complex tensor: not supported by the AOT layer")
        if t.is_inference():
            raise Fallback(f"graph input '{name}' is an inference-mode tensor: autograd cannot trace it")
        if t.numel() and t.device.type != "meta":
            key = (t.device, t.storage().data_ptr())
            if key in seen:
                raise Fallback(f"graph inputs '{seen[key]}' and '{name}' share storage: tracing clones "
                               f"would lose the aliasing")
            seen[key] = name


@contextlib.contextmanager
def decompose_like_eager(device_type):
    """make_fx (1.13) runs an op's CompositeImplicitAutograd kernel whenever it has one, even where
    eager dispatches to a backend kernel (silu_backward: eager runs the fused CPU kernel, make_fx
    the math formula, and gradients differ in the last bits). Inside this block an op with a
    kernel for the device's backend or a CompositeExplicitAutograd kernel is traced as itself."""
    original = torch._ops.OpOverload.decompose
    keys = [torch._C.DispatchKey.CompositeExplicitAutograd]
    backend = {"cpu": "CPU", "cuda": "CUDA"}.get(device_type)
    if backend is not None:
        keys.append(getattr(torch._C.DispatchKey, backend))
    has = torch._C._dispatch_has_kernel_for_dispatch_key

    def decompose(self, *args, **kwargs):
        if any(has(self.name(), k) for k in keys):
            return NotImplemented
        return original(self, *args, **kwargs)

    torch._ops.OpOverload.decompose = decompose
    try:
        yield
    finally:
        torch._ops.OpOverload.decompose = original


def _clone(t):
    c = t.detach().clone(memory_format=torch.preserve_format)
    return c.requires_grad_(True) if t.requires_grad else c


def _storage_key(t):
    return (t.device, t.storage().data_ptr()) if t.numel() else None


def _flat_outputs(out):
    flat, _ = pytree.tree_flatten(out)
    if not isinstance(out, (tuple, list)) or len(flat) != len(out):
        raise Fallback(f"the graph returns a {type(out).__name__} structure, not a flat tuple of tensors")
    for k, o in enumerate(flat):
        if not isinstance(o, torch.Tensor):
            raise Fallback(f"graph output {k} is a {type(o).__name__}, not a tensor")
    return list(flat)


def _reference_run(gm, examples, sources):
    """Runs gm on clones, as eager would: which outputs require grad, what is mutated, aliasing."""
    # A non-leaf input stays a non-leaf (in-place ops on it are legal, unlike on a leaf).
    ins = [_clone(t) * 1 if t.requires_grad and not t.is_leaf else _clone(t) for t in examples]
    versions = [t._version for t in ins]
    with preserve_rng_state():
        try:
            outs = _flat_outputs(gm(*ins))
        except Fallback:
            raise
        except Exception as e:  # noqa: BLE001 - eager raises it too, from the eager runner
            raise Fallback(f"the graph raised {type(e).__name__} when run on copies of its inputs: {e}") from e
    mutated = [i for i, t in enumerate(ins) if t._version != versions[i]]
    where = {}
    for i, t in enumerate(ins):
        key = _storage_key(t)
        if key is not None:
            where[key] = f"input '{sources[i]}'"
    for k, o in enumerate(outs):
        key = _storage_key(o)
        if key is None:
            continue
        if key in where:
            raise Fallback(f"graph output {k} aliases {where[key]} (a view or the same tensor): the AOT "
                           f"wrapper cannot give it eager's aliasing and autograd history")
        where[key] = f"graph output {k}"
    return outs, mutated


def _schema(node):
    t = node.target
    return t._schema if isinstance(t, torch._ops.OpOverload) else None


def _written_args(node):
    s = _schema(node)
    if s is None:
        return []
    out = []
    for i, a in enumerate(s.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            v = node.args[i] if i < len(node.args) else node.kwargs.get(a.name)
            if isinstance(v, torch.fx.Node):
                out.append(v)
    return out


def _returns_alias(node):
    s = _schema(node)
    return s is not None and len(s.returns) == 1 and s.returns[0].alias_info is not None


def _alias_roots(graph):
    """{node: the node whose storage it shares} for views and in-place results."""
    root = {}
    for n in graph.nodes:
        root[n] = n
        if n.op == "call_function" and _returns_alias(n) and n.args and isinstance(n.args[0], torch.fx.Node):
            root[n] = root[n.args[0]]
    return root


def _meta_dtype(n):
    tm = n.meta.get("tensor_meta") if isinstance(n, torch.fx.Node) else None
    return getattr(tm, "dtype", None)


def is_random(schema_name):
    """True for ATen ops that draw random numbers (never decomposed, rewritten or recomputed)."""
    base = schema_name.split(".")[0].rstrip("_")
    return base in RANDOM_BASES


RANDOM_BASES = frozenset({"aten::native_dropout", "aten::dropout", "aten::bernoulli", "aten::rand_like",
                          "aten::randn_like", "aten::rand", "aten::randn", "aten::randint", "aten::randint_like",
                          "aten::randperm", "aten::multinomial", "aten::normal", "aten::uniform",
                          "aten::_fused_dropout", "aten::rrelu_with_noise", "aten::exponential",
                          "aten::geometric", "aten::log_normal", "aten::cauchy", "aten::random",
                          "aten::feature_dropout", "aten::alpha_dropout", "aten::feature_alpha_dropout"})


def _outplace_of(node):
    s = _schema(node)
    name = s.name.split("::")[1]
    if is_random(s.name):
        return None
    if not name.endswith("_") or name.endswith("__") or len(_written_args(node)) != 1:
        return None
    packet = getattr(torch.ops.aten, name[:-1], None)
    overload = getattr(packet, node.target._overloadname, None) if packet is not None else None
    return overload


def _functionalize_inplace(graph, protected):
    """x.op_(...) on a value made in the graph, with no other alias of it, becomes x2 = op(...):
    the later uses of x read x2. Leaves in-place ops on inputs and on aliased values alone.
    Returns the number rewritten."""
    rewritten = 0
    views = {}  # root -> number of nodes aliasing it (views, in-place results)
    root = {}
    for n in list(graph.nodes):
        root.setdefault(n, n)
        if n.op != "call_function":
            continue
        if _returns_alias(n) and n.args and isinstance(n.args[0], torch.fx.Node):
            base = root[n.args[0]]
            written = _written_args(n)
            outplace = _outplace_of(n) if written else None
            w = written[0] if written else None
            if (outplace is not None and w is n.args[0] and base is w and w.op == "call_function"
                    and w not in protected and views.get(w, 0) == 0 and _same_dtypes(n, w)):
                with graph.inserting_before(n):
                    m = graph.call_function(outplace, n.args, n.kwargs)
                m.meta = dict(n.meta)
                n.replace_all_uses_with(m)
                _replace_later_uses(graph, w, m, n)
                graph.erase_node(n)
                root[m] = m
                rewritten += 1
                continue
            root[n] = base
            views[base] = views.get(base, 0) + 1
    return rewritten


def _replace_later_uses(graph, old, new, after):
    seen = False
    for n in graph.nodes:
        if n is after:
            seen = True
            continue
        if seen and n is not new and old in n.all_input_nodes:
            n.replace_input_with(old, new)


def _same_dtypes(n, w):
    dt = _meta_dtype(w)
    if dt is None or not dt.is_floating_point:
        return False
    for a in list(n.args) + list(n.kwargs.values()):
        if isinstance(a, torch.fx.Node) and _meta_dtype(a) not in (None, dt):
            return False
        if isinstance(a, torch.fx.Node) and _meta_dtype(a) is None:
            return False
    return True


def _drop_dead(graph):
    """Removes nodes nobody uses, except those that write memory (in-place ops)."""
    for n in reversed(list(graph.nodes)):
        if n.op == "call_function" and not n.users and not _written_args(n):
            graph.erase_node(n)


def _check_ops(graph):
    for n in graph.nodes:
        if n.op == "get_attr":
            raise Fallback(f"the trace made a constant tensor ({n.target}): not supported by the AOT layer")
        if n.op != "call_function" or n.target is operator.getitem:
            continue
        s = _schema(n)
        if s is None:
            raise Fallback(f"the trace holds a call of {n.target!r}, which is not an ATen operator")
        if not s.name.startswith(("aten::", "prims::")):  # prims: from functorch's decompositions
            raise Fallback(f"operator {s.name} is not an ATen op and has no meta kernel in torch 1.13: "
                           f"its graph runs on the eager runner")
        if s.name in DATA_DEPENDENT_OPS:
            raise Fallback(f"operator {s.name} has an output shape that depends on tensor values")
        if s.name == "aten::index" and any(
                isinstance(i, torch.fx.Node) and _meta_dtype(i) in (torch.bool, torch.uint8)
                for i in (n.args[1] if len(n.args) > 1 else ())):
            raise Fallback("boolean-mask indexing (aten::index) has an output shape that depends on tensor values")


def _input_markers(graph, placeholders):
    """In-place writes to graph inputs (or views of them) whose single result nobody uses: kept
    as extra forward outputs so that no partition drops them."""
    root = _alias_roots(graph)
    phs = set(placeholders)
    markers, mutated = [], set()
    for n in graph.nodes:
        for w in _written_args(n):
            if root[w] in phs:
                mutated.add(root[w])
                if _returns_alias(n) and not n.users:
                    markers.append(n)
    return markers, mutated


def _dangling_writes(graph, n_in):
    """In-place writes into graph values (not inputs) that no node uses: a later read of the
    written storage through another alias depends on them without saying so, and a partition
    that keeps only what outputs need would drop them (autograd's as_strided/copy_ backward of an
    in-place op on a view, in-place dropout)."""
    root = _alias_roots(graph)
    phs = set([n for n in graph.nodes if n.op == "placeholder"][:n_in])
    return [n for n in graph.nodes if n.op == "call_function" and not n.users
            and any(root[w] not in phs for w in _written_args(n))]


def _sequence_dangling_writes(graph, n_in):
    """Makes each dangling write W (into storage R) explicit: the nodes after W that read R read
    as_strided(W, R's sizes and strides, 0) instead, the same memory but a value that depends on
    W, so no partition can drop or reorder the write. The ops stay eager's. False (graph partly
    rewritten, to be traced again) when a view of R made before W is read after it."""
    for _ in range(10000):
        dangling = _dangling_writes(graph, n_in)
        if not dangling:
            return True
        w = dangling[0]
        root = _alias_roots(graph)
        order = {n: i for i, n in enumerate(graph.nodes)}
        r = root[_written_args(w)[0]]
        tm = r.meta.get("tensor_meta")
        if tm is None or r.op == "placeholder":
            return False
        # R itself and in-place results on it (x.zero_() is x): the same tensor as R.
        same = {r}
        for n in graph.nodes:
            if n.op == "call_function" and order[n] < order[w] and n.args \
                    and isinstance(n.args[0], torch.fx.Node) and n.args[0] in same \
                    and _returns_alias(n) and n.args[0] in _written_args(n):
                same.add(n)
        later = [n for n in graph.nodes if order[n] > order[w]
                 and any(root.get(a) is r for a in n.all_input_nodes)]
        for n in later:
            if any(root.get(a) is r and a not in same and order[a] < order[w] for a in n.all_input_nodes):
                return False
        with graph.inserting_after(w):
            seq = graph.call_function(torch.ops.aten.as_strided.default,
                                      (w, list(tm.shape), list(tm.stride), 0))
        seq.meta = dict(r.meta)
        for n in later:
            for a in list(n.all_input_nodes):
                if a in same:
                    n.replace_input_with(a, seq)
    return False


def _functionalize(traced, examples, training, tangents, device_type):
    """The same trace made functional (functorch.experimental.functionalize, traced again):
    views and in-place ops become out-of-place ops, and input mutations become copy_ into the
    inputs at the end (kept as forward outputs by _input_markers)."""
    from functorch import make_fx
    from functorch.experimental import functionalize

    def replay(*flat):
        with torch.no_grad():
            return torch.fx.Interpreter(traced).run(*flat)

    ins = [_clone(t) for t in examples]
    try:
        with preserve_rng_state(), decompose_like_eager(device_type):
            if training:
                return make_fx(functionalize(lambda primals, tangents: replay(*primals, *tangents)))(ins, tangents)
            return make_fx(functionalize(lambda primals: replay(*primals)))(ins)
    except Exception as e:  # noqa: BLE001 - functionalization gaps of torch 1.13
        raise Fallback(f"the graph writes in place through views, and functionalizing it failed: "
                       f"{type(e).__name__}: {e}") from e


def trace(gm, examples, sources, training, decompositions=None):
    """Traces gm at the ATen level. Returns a Traced with: graph (torch.fx.Graph), training,
    num_primals, num_user_outputs, num_fwd_outputs, diff_inputs, diff_outputs (indices),
    out_requires_grad, mutated_inputs, rewritten (in-place ops made out-of-place)."""
    from functorch import make_fx

    ref_outs, mutated = _reference_run(gm, examples, sources)
    out_rg = [bool(o.requires_grad) for o in ref_outs]
    if training and not any(out_rg):
        training = False
    for i in mutated:
        if examples[i].requires_grad and training:
            raise Fallback(f"the graph mutates input '{sources[i]}' in place and it requires grad: the "
                           f"AOT wrapper cannot rebase its autograd history")
    n_in = len(examples)
    diff_in = [i for i, t in enumerate(examples) if t.requires_grad] if training else []
    diff_out = [k for k, rg in enumerate(out_rg) if rg] if training else []

    def forward(primals):
        return _flat_outputs(gm(*primals))

    def joint(primals, tangents):
        outs = forward(primals)
        grads = torch.autograd.grad([outs[k] for k in diff_out], [primals[i] for i in diff_in],
                                    tangents, allow_unused=True)
        full = [None] * n_in
        for i, g in zip(diff_in, grads):
            full[i] = g
        return outs + full

    ins = [_clone(t) for t in examples]
    device_type = examples[0].device.type if examples else "cpu"
    with preserve_rng_state(), decompose_like_eager(device_type), \
            torch.enable_grad() if training else contextlib.nullcontext():
        if training:
            tangents = [ref_outs[k].detach().contiguous() for k in diff_out]
            traced = make_fx(joint, decompositions or {})(ins, tangents)
        else:
            traced = make_fx(forward, decompositions or {})(ins)
    functionalized = False
    if _dangling_writes(traced.graph, n_in) and not _sequence_dangling_writes(traced.graph, n_in):
        traced = _functionalize(traced, examples, training, tangents if training else None, device_type)
        functionalized = True
    graph = traced.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    out_node = next(n for n in graph.nodes if n.op == "output")
    _check_ops(graph)
    _drop_dead(graph)
    rewritten = _functionalize_inplace(graph, set(placeholders[:n_in]))
    markers, mutated_nodes = _input_markers(graph, placeholders[:n_in])
    n_user = len(ref_outs)
    flat = list(out_node.args[0])  # after the rewrites, which replaced uses in the output too
    new_out = flat[:n_user] + markers + flat[n_user:]
    out_node.args = (new_out,)
    graph.lint()
    return Traced(graph=graph, training=training, num_primals=n_in, num_user_outputs=n_user,
                  num_fwd_outputs=n_user + len(markers), diff_inputs=diff_in, diff_outputs=diff_out,
                  out_requires_grad=out_rg, mutated_inputs=sorted(set(mutated)),
                  mutated_placeholders=[p.name for p in placeholders if p in mutated_nodes],
                  rewritten=rewritten, functionalized=functionalized, placeholders=[p.name for p in placeholders])
