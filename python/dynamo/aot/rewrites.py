"""Rewrites of the ATen-level torch.fx graph that make_fx traced (tracing.py uses them in order):

- check_captured / check_ops: what the AOT layer refuses, with the reason (Fallback);
- drop_detach: detach nodes (autograd-only) whose result is not returned;
- drop_dead: nodes nobody uses, except writes;
- sequence_dangling_writes: writes no node uses (autograd's backward through views) ordered
  before the reads of the storage they write, by reading as_strided(write) instead;
- lift_constants: tensor constants (get_attr) become inputs after the primals;
- functional_bernoulli: dropout's bernoulli_(empty_like(x), p) becomes bernoulli(x, p) (the same
  draws: ATen's bernoulli.p is empty_like + bernoulli_), so dropout leaves no in-place op behind;
- functionalize_inplace: x.op_() on a fresh, unaliased value becomes op(x);
- input_markers: in-place writes to inputs, kept as forward outputs so no partition drops them.

The alias analysis (alias_roots) follows views, in-place results and items of unbind/split lists
back to the node that owns the storage.
"""
import operator

import torch

from dynamo.aot.fallback import Fallback

__all__ = ["DATA_DEPENDENT_OPS", "RANDOM_BASES", "is_random", "alias_roots", "check_captured", "check_ops",
           "drop_dead", "drop_detach", "dangling_writes", "sequence_dangling_writes", "lift_constants",
           "functional_bernoulli", "functionalize_inplace", "input_markers", "written_args"]

#: ATen ops whose output shapes depend on tensor values: a real-mode trace bakes the sizes it saw.
DATA_DEPENDENT_OPS = frozenset({
    "aten::nonzero", "aten::masked_select", "aten::_unique", "aten::_unique2", "aten::unique_dim",
    "aten::unique_consecutive", "aten::_local_scalar_dense", "aten::item", "aten::bincount",
    "aten::repeat_interleave", "aten::histc",
})


def schema_of(node):
    t = node.target
    return t._schema if isinstance(t, torch._ops.OpOverload) else None


def written_args(node):
    s = schema_of(node)
    if s is None:
        return []
    out = []
    for i, a in enumerate(s.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            v = node.args[i] if i < len(node.args) else node.kwargs.get(a.name)
            if isinstance(v, torch.fx.Node):
                out.append(v)
    return out


def returns_alias(node):
    s = schema_of(node)
    return s is not None and len(s.returns) == 1 and s.returns[0].alias_info is not None


def view_source(n):
    """The node n is a view of (views, in-place results, items of unbind/split lists), or None."""
    if n.op != "call_function" or not n.args or not isinstance(n.args[0], torch.fx.Node):
        return None
    if n.target is operator.getitem:
        return n.args[0] if returns_alias(n.args[0]) else None
    return n.args[0] if returns_alias(n) else None


def alias_roots(graph):
    """{node: the node whose storage it shares} for views and in-place results."""
    root = {}
    for n in graph.nodes:
        src = view_source(n)
        root[n] = root[src] if src is not None else n
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
    s = schema_of(node)
    name = s.name.split("::")[1]
    if is_random(s.name):
        return None
    if not name.endswith("_") or name.endswith("__") or len(written_args(node)) != 1:
        return None
    packet = getattr(torch.ops.aten, name[:-1], None)
    overload = _same_arguments(packet, node.target) if packet is not None else None
    if overload is None or any(r.alias_info is not None for r in overload._schema.returns):
        return None  # t_ -> t is a view, not a fresh value
    return overload


def _arguments(schema):
    return [(a.name, str(a.type), a.kwarg_only) for a in schema.arguments]


def _same_arguments(packet, inplace):
    """The overload of `packet` taking the arguments of `inplace`: the one of the same overload
    name, or another where the names differ (pow_.Scalar(Tensor self, Scalar exponent) is
    pow.Tensor_Scalar, while pow.Scalar is (Scalar self, Tensor exponent)); None if no overload does."""
    want = _arguments(inplace._schema)
    preferred = inplace._overloadname
    for name in [preferred] + [o for o in packet.overloads() if o != preferred]:
        overload = getattr(packet, name, None)
        if overload is not None and _arguments(overload._schema) == want:
            return overload
    return None


def functionalize_inplace(graph, protected):
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
        if n.target is operator.getitem and view_source(n) is not None:
            root[n] = root[n.args[0]]
            views[root[n]] = views.get(root[n], 0) + 1
            continue
        if returns_alias(n) and n.args and isinstance(n.args[0], torch.fx.Node):
            base = root[n.args[0]]
            written = written_args(n)
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


def _contiguous_meta(n):
    tm = n.meta.get("tensor_meta")
    if tm is None:
        return False
    want, acc = [], 1
    for size in reversed(tm.shape):
        want.append(acc)
        acc *= max(size, 1)
    return all(sz == 1 or st == w for sz, st, w in zip(tm.shape, tm.stride, reversed(want)))


def functional_bernoulli(graph):
    """bernoulli_.float(empty_like(x), p), the empty tensor used by nothing else and contiguous,
    becomes bernoulli.p(x, p): ATen's out-of-place bernoulli is exactly empty_like + bernoulli_
    (contiguous), so the numbers drawn and the RNG state after are the same. The graph then holds
    no in-place write for dropout (functionalize_inplace makes its div_ a div), which keeps the
    fused lowering's views and matmul steps. Returns the number rewritten."""
    rewritten = 0
    target = torch.ops.aten.bernoulli_.float
    for n in list(graph.nodes):
        if n.op != "call_function" or n.target is not target or n.kwargs or len(n.args) != 2:
            continue
        e = n.args[0]
        if (not isinstance(e, torch.fx.Node) or e.op != "call_function"
                or e.target is not torch.ops.aten.empty_like.default or len(e.users) != 1
                or not isinstance(e.args[0], torch.fx.Node) or not _contiguous_meta(e)
                or not isinstance(n.args[1], float)):
            continue
        if any(k != "memory_format" for k in e.kwargs) or _meta_dtype(e) != _meta_dtype(e.args[0]):
            continue
        with graph.inserting_before(n):
            m = graph.call_function(torch.ops.aten.bernoulli.p, (e.args[0], n.args[1]))
        m.meta = dict(n.meta)
        n.replace_all_uses_with(m)
        graph.erase_node(n)
        graph.erase_node(e)
        rewritten += 1
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
    # Tensor arguments of another (or unknown) dtype could promote the out-of-place result.
    return all(_meta_dtype(a) == dt for a in list(n.args) + list(n.kwargs.values())
               if isinstance(a, torch.fx.Node))


def drop_detach(graph):
    """aten::detach only cuts autograd history, and the compiled graphs run without it (inside the
    autograd.Function, or with no input requiring grad): a detach whose result is not a graph
    output is replaced by its input (same tensor, one op and one saved alias fewer)."""
    out = next(n for n in graph.nodes if n.op == "output")
    returned = set(out.all_input_nodes)
    dropped = 0
    for n in list(graph.nodes):
        if (n.op == "call_function" and n.target is torch.ops.aten.detach.default and n not in returned
                and isinstance(n.args[0], torch.fx.Node)):
            n.replace_all_uses_with(n.args[0])
            graph.erase_node(n)
            dropped += 1
    return dropped


def drop_dead(graph):
    """Removes nodes nobody uses, except those that write memory (in-place ops)."""
    for n in reversed(list(graph.nodes)):
        if n.op == "call_function" and not n.users and not written_args(n):
            graph.erase_node(n)


def check_captured(gm):
    from dynamo.aot.split import is_autograd_call
    for n in gm.graph.nodes:
        name = is_autograd_call(n)
        if name:
            raise Fallback(f"the graph calls {name} (autograd inside the graph) before any op the "
                           f"AOT layer could compile")


def lift_constants(graph, owner, n_in):
    """Tensor constants of the trace (torch.tensor(...) in the model: get_attr nodes) become
    inputs after the primals; returns their values, which the runtime passes on every call."""
    from torch.fx.passes.shape_prop import _extract_tensor_metadata
    gets = [n for n in graph.nodes if n.op == "get_attr"]
    if not gets:
        return []
    after = [n for n in graph.nodes if n.op == "placeholder"][n_in - 1] if n_in else None
    values = []
    for n in gets:
        value = getattr(owner, n.target)
        if not isinstance(value, torch.Tensor):
            raise Fallback(f"the trace holds a constant {type(value).__name__} ({n.target})")
        if after is None:
            with graph.inserting_before(next(iter(graph.nodes))):
                ph = graph.placeholder(n.target)
        else:
            with graph.inserting_after(after):
                ph = graph.placeholder(n.target)
        ph.meta["tensor_meta"] = _extract_tensor_metadata(value)
        n.replace_all_uses_with(ph)
        graph.erase_node(n)
        after = ph
        values.append(value)
    return values


def check_ops(graph):
    for n in graph.nodes:
        if n.op != "call_function" or n.target is operator.getitem:
            continue
        s = schema_of(n)
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


def input_markers(graph, placeholders):
    """In-place writes to graph inputs (or views of them) whose single result nobody uses: kept
    as extra forward outputs so that no partition drops them."""
    root = alias_roots(graph)
    phs = set(placeholders)
    markers, mutated = [], set()
    for n in graph.nodes:
        for w in written_args(n):
            if root[w] in phs:
                mutated.add(root[w])
                if returns_alias(n) and not n.users:
                    markers.append(n)
    return markers, mutated


def dangling_writes(graph, n_in):
    """In-place writes into graph values (not inputs) that no node uses: a later read of the
    written storage through another alias depends on them without saying so, and a partition
    that keeps only what outputs need would drop them (autograd's as_strided/copy_ backward of an
    in-place op on a view, in-place dropout)."""
    root = alias_roots(graph)
    phs = set([n for n in graph.nodes if n.op == "placeholder"][:n_in])
    return [n for n in graph.nodes if n.op == "call_function" and not n.users
            and any(root[w] not in phs for w in written_args(n))]


def sequence_dangling_writes(graph, n_in):
    """Makes each dangling write W (into storage R) explicit: the nodes after W that read R read
    as_strided(W, R's sizes and strides, 0) instead, the same memory but a value that depends on
    W, so no partition can drop or reorder the write. The ops stay eager's. False (graph partly
    rewritten, to be traced again) when a view of R made before W is read after it."""
    for _ in range(10000):
        dangling = dangling_writes(graph, n_in)
        if not dangling:
            return True
        w = dangling[0]
        root = alias_roots(graph)
        order = {n: i for i, n in enumerate(graph.nodes)}
        r = root[written_args(w)[0]]
        tm = r.meta.get("tensor_meta")
        if tm is None or r.op == "placeholder":
            return False
        # R itself, earlier sequencing views of all of R, and in-place results on those
        # (x.zero_() is x): the same tensor as R.
        same = {r} | {n for n in graph.nodes if n.meta.get("dynamo_aot_seq") and root[n] is r}
        for n in graph.nodes:
            if n.op == "call_function" and order[n] < order[w] and n.args \
                    and isinstance(n.args[0], torch.fx.Node) and n.args[0] in same \
                    and returns_alias(n) and n.args[0] in written_args(n):
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
        seq.meta["dynamo_aot_seq"] = True  # the whole of r, after w
        for n in later:
            for a in list(n.all_input_nodes):
                if a in same:
                    n.replace_input_with(a, seq)
    return False
