"""Joint forward/backward tracing at the ATen level, with functorch's ``make_fx``.

``trace(gm, examples, training, decompositions)`` runs the captured graph (a torch.fx.GraphModule
of torch-level ops) once on clones of its inputs, to learn what eager does (which outputs require
grad, which inputs are mutated, whether outputs alias inputs or each other: a training graph
falls back then), then traces it with
``make_fx`` (on fake tensors on torch 2.x, else on fresh clones in real mode: ``trace``), the RNG
state saved and put back around both runs:

- training: ``joint(primals, tangents)`` runs the graph, then
  ``torch.autograd.grad(differentiable outputs, inputs that require grad, tangents)``; the FX
  output becomes one flat list: user outputs, mutation markers, one gradient per primal (None
  where there is none);
- inference: the graph alone; output: user outputs, mutation markers.

Afterwards rewrites.py cleans the FX graph up (``drop_dead``), in-place ops on fresh, unaliased values are
made out-of-place (``functionalize_inplace``: the partitioner may then recompute), and in-place
ops that write graph inputs (BatchNorm running statistics, ``buf.add_(1)``) stay in the graph and
are marked as forward outputs so no partition drops them: they run once, in the forward, on the
real tensors, exactly as eager runs them. Anything that would not give eager's results raises
``Fallback`` with the reason.
"""
import contextlib
import copy
import os

import torch
from torch.utils import _pytree as pytree

from dynamo import _C, logs
from dynamo.aot import rewrites
from dynamo.aot.fallback import Fallback

__all__ = ["Fallback", "Traced", "trace", "trace_mode", "preserve_rng_state", "check_inputs", "decompose_like_eager"]


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
            key = _storage_key(t)
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


def _clone(t, requires_grad=None):
    """A copy with t's strides: make_fx records a reshape of a contiguous example as a view
    (aten._reshape_alias with its strides), wrong on the real, strided input (a column slice).
    On a fake tensor (inside its mode) the same metadata without data."""
    d = t.detach()
    c = d.clone(memory_format=torch.preserve_format)
    if c.stride() != d.stride() and d.numel():
        c = torch.empty_strided(d.size(), d.stride(), dtype=d.dtype, device=d.device)
        if torch._debug_has_internal_overlap(c) == 0:
            c.copy_(d)
        else:  # overlapping strides (expand): the spanned storage copied, viewed the same way
            extent = 1 + sum((n - 1) * st for n, st in zip(d.size(), d.stride()))
            span = d.as_strided((extent,), (1,), d.storage_offset()).clone()
            c = span.as_strided(d.size(), d.stride(), 0)
    if requires_grad is None:
        requires_grad = t.requires_grad
    return c.requires_grad_(True) if requires_grad else c


def _copy(t, mode):
    """A fake tensor of `mode` (entered by the caller) with the metadata _clone(t) would give."""
    return _clone(mode.from_tensor(t), t.requires_grad)


def _storage_key(t):
    if not t.numel():
        return None
    # torch 2.x's Tensor.storage() warns that TypedStorage is deprecated: untyped_storage() there.
    storage = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    return (t.device, storage.data_ptr())


def _flat_outputs(out):
    flat, _ = pytree.tree_flatten(out)
    if not isinstance(out, (tuple, list)) or len(flat) != len(out):
        raise Fallback(f"the graph returns a {type(out).__name__} structure, not a flat tuple of tensors")
    for k, o in enumerate(flat):
        if not isinstance(o, torch.Tensor):
            raise Fallback(f"graph output {k} is a {type(o).__name__}, not a tensor")
    return list(flat)


def _leaves(tensors):
    """The leaf tensors autograd reaches from the grad_fn of `tensors` (AccumulateGrad's variables)."""
    seen, found = set(), []
    stack = [t.grad_fn for t in tensors if t.grad_fn is not None]
    while stack:
        fn = stack.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        var = getattr(fn, "variable", None)
        if var is not None:
            found.append(var)
        stack.extend(f for f, _ in fn.next_functions)
    return found


def _check_no_new_leaves(ins, outs):
    """Fallback when an output of the reference run is, or reaches through autograd, a leaf that
    requires grad and is none of the inputs (nor behind them): a tensor the graph made with
    requires_grad_() or requires_grad=True. Eager's backward accumulates its .grad (and a returned
    one is a leaf); the AOT wrapper's outputs would be non-leaves whose history stops at the inputs."""
    if not any(o.requires_grad for o in outs):
        return
    allowed = {id(t) for t in ins} | {id(v) for v in _leaves(ins)}
    for k, o in enumerate(outs):
        for leaf in ([o] if o.requires_grad and o.grad_fn is None else _leaves([o])):
            if id(leaf) not in allowed:
                raise Fallback(f"graph output {k} {'is' if leaf is o else 'depends on'} a tensor the graph "
                               f"made that requires grad (requires_grad_ inside the graph): eager "
                               f"accumulates its .grad, the AOT wrapper cannot")


def _reference_run(gm, examples, sources):
    """Runs gm on clones, as eager would: which outputs require grad, what is mutated, aliasing."""
    # A non-leaf input stays a non-leaf (in-place ops on it are legal, unlike on a leaf).
    ins = [_clone(t) * 1 if t.requires_grad and not t.is_leaf else _clone(t) for t in examples]
    versions = [t._version for t in ins]
    with preserve_rng_state():
        try:
            # gm.forward, not gm(): FX's call wrapper prints the generated code to stderr when it
            # raises, and a raise here is an answer (fall back; a probe at sizes the graph rejects)
            outs = _flat_outputs(gm.forward(*ins))
        except Fallback:
            raise
        except Exception as e:  # noqa: BLE001 - eager raises it too, from the eager runner
            raise Fallback(f"the graph raised {type(e).__name__} when run on copies of its inputs: {e}") from e
    mutated = [i for i, t in enumerate(ins) if t._version != versions[i]]
    _check_no_new_leaves(ins, outs)
    where = {}
    for i, t in enumerate(ins):
        key = _storage_key(t)
        if key is not None:
            where[key] = f"input '{sources[i]}'"
    aliasing = None
    for k, o in enumerate(outs):
        key = _storage_key(o)
        if key is None:
            continue
        if key in where and aliasing is None:
            aliasing = (f"graph output {k} aliases {where[key]} (a view or the same tensor): the AOT "
                        f"wrapper cannot give it eager's aliasing and autograd history")
        where[key] = f"graph output {k}"
    # Detached: the reference run's autograd graph (its activations) is freed before the trace.
    return [o.detach() for o in outs], [bool(o.requires_grad) for o in outs], mutated, ins, aliasing


def _functionalize(traced, examples, training, tangents, device_type):
    """The same trace made functional (functorch.experimental.functionalize, traced again):
    views and in-place ops become out-of-place ops, and input mutations become copy_ into the
    inputs at the end (kept as forward outputs by input_markers)."""
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


def _grad_tangents(graph, tangents, grads):
    """For each input's gradient in `grads` (a node, or None), the positions of the tangents it
    reads, as a sorted list (None where there is no gradient). The runtime returns no gradient
    for an input whose tangents all came as None (no path from the loss to those outputs), as
    eager autograd leaves .grad None for a tensor the loss does not reach."""
    bit = {t: 1 << k for k, t in enumerate(tangents)}
    deps = {}
    for n in graph.nodes:
        mask = bit.get(n, 0)
        for a in n.all_input_nodes:
            mask |= deps.get(a, 0)
        deps[n] = mask
    out = []
    for g in grads:
        if not isinstance(g, torch.fx.Node):
            out.append(None)
            continue
        mask = deps.get(g, 0)
        out.append([k for k in range(len(tangents)) if mask >> k & 1])
    return out


def trace(gm, examples, sources, training, decompositions=None):
    """Traces gm at the ATen level. Returns a Traced with: graph (torch.fx.Graph), training,
    num_primals, num_user_outputs, num_fwd_outputs, diff_inputs, diff_outputs (indices),
    out_requires_grad, mutated_inputs, rewritten (in-place ops made out-of-place), mode ("fake"
    or "real": how it was traced).

    The reference run is always on real tensors (eager's values decide its errors), once. On
    torch 2.x make_fx then traces the joint graph on fake tensors first (no computation: the same
    ops, shapes and strides, from the meta kernels). Anything that trace cannot settle by itself
    is traced again on real tensors, which decides as before: every Fallback (the reason comes
    from the real run), torch's fake-tensor errors and make_fx's RuntimeError /
    NotImplementedError (data-dependent ops such as nonzero or .item(), ops without a meta
    kernel), tensor constants made in the graph, in-place writes through views, user outputs
    whose shape or strides differ from eager's. Any other error of the fake trace propagates. A
    handover is logged (DYNAMO_LOGS=aot_graphs) and its mode reads "real (fake failed: <why>)".
    DYNAMO_AOT_TRACE=real traces on real tensors only; =check traces both ways and raises if the
    graphs or their layouts differ (tests/python/test_aot_fake_trace.py)."""
    how = trace_mode()
    rewrites.check_captured(gm)
    # Always on real tensors, once (the real trace after a handover reuses it): eager's values
    # decide its errors (an embedding index out of range, binary_cross_entropy's input outside
    # [0, 1]), which a fake run would not raise.
    ref = _reference_run(gm, examples, sources)
    fake = None
    if how != "real":
        try:
            fake = _trace(gm, examples, sources, training, decompositions, _fake_mode(), ref)
        except _fake_failures() as e:  # the real trace decides: same result or same Fallback
            why = _short_reason(e)
            if logs.enabled("aot_graphs"):
                logs._emit([f"{logs.PREFIX} aot: the fake trace handed over to the real trace: {why}"])
            fake = None
        if fake is not None and how == "fake":
            return fake
    real = _trace(gm, examples, sources, training, decompositions, None, ref)
    if fake is not None:
        _check_same(fake, real)
    elif how != "real":
        real.mode = f"real (fake failed: {why})"
    return real


def _fake_failures():
    """What the fake trace may raise and the real trace settle: anything else is a bug of the fake
    path and propagates (it used to be swallowed, sending every graph to the real trace)."""
    from torch._subclasses import fake_tensor as ft
    return (Fallback, _NeedsReal, ft.DataDependentOutputException, ft.DynamicOutputShapeException,
            ft.UnsupportedOperatorException, ft.UnsupportedFakeTensorException, RuntimeError,
            NotImplementedError)


def _short_reason(e, limit=120):
    text = str(e).strip().splitlines()
    text = text[0] if text else ""
    text = text if len(text) <= limit else text[:limit - 3] + "..."
    return type(e).__name__ + (f": {text}" if text else "")


#: torch 1.13's fake tensors lack meta kernels for much of what the models here run: real there.
_FAKE_SUPPORTED = int(torch.__version__.split(".")[0]) >= 2


def trace_mode():
    """"fake" (the default on torch 2.x), "real" (torch 1.13, or DYNAMO_AOT_TRACE=real) or
    "check" (DYNAMO_AOT_TRACE=check: both, compared)."""
    how = os.environ.get("DYNAMO_AOT_TRACE", "fake")
    if how not in ("fake", "real", "check"):
        raise _C.UserError(f"error: DYNAMO_AOT_TRACE={how!r} is not a trace mode\n"
                           f"  = hint: set it to fake, real or check, or unset it")
    return how if _FAKE_SUPPORTED else "real"


class _NeedsReal(Exception):
    """The fake trace met something only the real trace handles (constants, functionalization)."""


def _fake_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode
    # No fallback kernels: an op without a meta kernel raises, and the real trace takes over.
    return FakeTensorMode(allow_fallback_kernels=False)


def _writes_through_a_view(graph):
    """Whether an in-place op of the FX graph writes a view (of an input or of a value)."""
    import operator
    views = set()
    for n in graph.nodes:
        if n.op != "call_function":
            continue
        if n.target is operator.getitem:
            if n.args and n.args[0] in views:
                views.add(n)  # an item of split / unbind / chunk
            continue
        schema = getattr(n.target, "_schema", None)
        if schema is None:
            continue
        first_in = schema.arguments[0].alias_info if schema.arguments else None
        if first_in is not None and first_in.is_write and n.args and n.args[0] in views:
            return True
        first_out = schema.returns[0].alias_info if schema.returns else None
        if first_out is not None and not first_out.is_write:
            views.add(n)
    return False


def _layout(traced):
    """What a Traced says, as text: the graph's code, every node's tensor meta, the fields."""
    lines = [traced.graph.python_code("self").src]
    for n in traced.graph.nodes:
        tm = n.meta.get("tensor_meta")
        if hasattr(tm, "shape"):
            tm = (tuple(tm.shape), tuple(tm.stride), tm.dtype, tm.requires_grad, tm.memory_format)
        lines.append(f"{n.name}: {tm}")
    for k, v in sorted(traced.__dict__.items()):
        if k not in ("graph", "mode"):
            lines.append(f"{k} = {v!r}")
    return lines


def _check_same(fake, real):
    a, b = _layout(fake), _layout(real)
    if a != b:
        import difflib
        diff = "\n".join(difflib.unified_diff(b, a, "real", "fake", lineterm="", n=1))
        raise AssertionError(f"dynamo internal error: the fake trace differs from the real one "
                             f"(DYNAMO_AOT_TRACE=check):\n{diff}")


def _check_output_layouts(graph, ref_outs):
    """_NeedsReal unless every user output of the fake trace has the shape and strides of the
    reference run's (eager's) output: the compiled graph must never lay an output out otherwise."""
    out_node = next(n for n in graph.nodes if n.op == "output")
    for k, (node, ref) in enumerate(zip(out_node.args[0], ref_outs)):
        tm = node.meta.get("tensor_meta") if isinstance(node, torch.fx.Node) else None
        got = (tuple(tm.shape), tuple(tm.stride)) if hasattr(tm, "shape") else None
        want = (tuple(ref.shape), tuple(ref.stride()))
        if got != want:
            raise _NeedsReal(f"output {k} is {got} (shape, strides) on fake tensors, {want} in eager")


def _trace(gm, examples, sources, training, decompositions, mode, ref):
    """One trace, on fake tensors (mode: a FakeTensorMode) or real ones (None); ref is
    _reference_run's result, shared by both (the real trace, which comes last, empties its copies)."""
    from functorch import make_fx

    ref_outs, out_rg, mutated, ref_ins, aliasing = ref
    for i in mutated:
        if ref_ins[i].requires_grad and not examples[i].requires_grad:
            raise Fallback(f"the graph writes a value that requires grad into input '{sources[i]}' in "
                           f"place: eager gives the input an autograd history, the AOT wrapper cannot")
    if any(out_rg) and not any(t.requires_grad for t in examples):
        raise Fallback(f"graph output {out_rg.index(True)} requires grad though no input does "
                       f"(requires_grad_ inside the graph): the AOT wrapper's outputs would not")
    if training and not any(out_rg):
        training = False
    if training and aliasing:
        raise Fallback(aliasing)  # inference graphs keep aliasing: the runner makes the same views
    for i in mutated:
        if examples[i].requires_grad and training:
            raise Fallback(f"the graph mutates input '{sources[i]}' in place and it requires grad: the "
                           f"AOT wrapper cannot rebase its autograd history")
    n_in = len(examples)
    diff_in = [i for i, t in enumerate(examples) if t.requires_grad] if training else []
    diff_out = [k for k, rg in enumerate(out_rg) if rg] if training else []

    def forward(primals):
        # gm.forward, not gm(): the graph module is an nn.Module, so gm() would run the global
        # module hooks (register_module_forward_hook) on it and trace them into the graph, where
        # the captured graph already holds the user's modules' hooks.
        return _flat_outputs(gm.forward(*primals))

    def joint(primals, tangents):
        outs = forward(primals)
        grads = torch.autograd.grad([outs[k] for k in diff_out], [primals[i] for i in diff_in],
                                    tangents, allow_unused=True)
        full = [None] * n_in
        for i, g in zip(diff_in, grads):
            full[i] = g
        return outs + full

    # The reference run's copies serve again where it changed nothing (one copy of the
    # parameters, not two); what it mutated, or made a non-leaf, is copied afresh.
    if mode is None:
        ins = [ref_ins[i] if i not in mutated and ref_ins[i].is_leaf else _clone(t) for i, t in enumerate(examples)]
        ref_ins.clear()  # the copies not reused are freed before the trace, as before
    else:  # fake copies with the metadata of the real ones
        with mode:
            ins = [_copy(t, mode) for t in examples]
    del ref_ins
    tangents = [ref_outs[k].detach().contiguous() for k in diff_out] if training else None
    if mode is not None and tangents:
        with mode:
            tangents = [mode.from_tensor(t) for t in tangents]
    device_type = examples[0].device.type if examples else "cpu"
    with preserve_rng_state(), decompose_like_eager(device_type), \
            torch.enable_grad() if training else contextlib.nullcontext(), \
            mode if mode is not None else contextlib.nullcontext():
        try:
            if training:
                traced = make_fx(joint, decompositions or {})(ins, tangents)
            else:
                traced = make_fx(forward, decompositions or {})(ins)
        except Fallback:
            raise
        except Exception as e:  # noqa: BLE001 - the graph still runs, on the eager runner
            if mode is not None and not isinstance(e, _fake_failures()):
                raise  # a bug of the fake path: not hidden behind the real trace
            raise Fallback(f"make_fx could not trace the graph: {type(e).__name__}: {e}") from e
    if mode is not None:
        _check_output_layouts(traced.graph, ref_outs)
    functionalized = False
    graph, owner = traced.graph, traced
    if mode is not None and any(n.op == "get_attr" for n in graph.nodes):
        raise _NeedsReal("tensor constants made in the graph: lifted from the real trace")
    if mode is not None and _writes_through_a_view(graph):
        # autograd records such a write differently for fake tensors (it replays the views
        # where real tensors get as_strided): the real trace, as before
        raise _NeedsReal("an in-place write through a view")
    if rewrites.dangling_writes(graph, n_in):
        trial = copy.deepcopy(graph)  # a failed attempt must not leave half-rewritten code behind
        if rewrites.sequence_dangling_writes(trial, n_in):
            graph = trial
        elif mode is not None:
            raise _NeedsReal("an in-place write through a view read again: the real trace decides")
        elif not decompositions:
            # functionalize re-decomposes every op with a CompositeImplicit kernel
            # (silu_backward): not eager's kernels, so not for the bitwise backends.
            raise Fallback("the graph writes in place through a view that is read again after the "
                           "write; ordering it needs functionalization, which changes the kernels "
                           "(use aot_eager_decomp_partition to accept that)")
        else:
            owner = _functionalize(traced, examples, training, tangents if training else None, device_type)
            graph, functionalized = owner.graph, True
    constants = rewrites.lift_constants(graph, owner, n_in)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    out_node = next(n for n in graph.nodes if n.op == "output")
    rewrites.check_ops(graph)
    rewrites.drop_detach(graph)
    rewrites.drop_dead(graph)
    rewrites.functional_bernoulli(graph)
    rewritten = rewrites.functionalize_inplace(graph, set(placeholders[:n_in + len(constants)]))
    markers, mutated_nodes = rewrites.input_markers(graph, placeholders[:n_in])
    n_user = len(ref_outs)
    flat = list(out_node.args[0])  # after the rewrites, which replaced uses in the output too
    grads = flat[n_user:] + ([None] * len(constants) if training else [])  # constants: no gradient
    new_out = flat[:n_user] + markers + grads
    out_node.args = (new_out,)
    graph.lint()
    grad_tangents = _grad_tangents(graph, placeholders[n_in + len(constants):], flat[n_user:]) if training else []
    return Traced(graph=graph, training=training, num_primals=n_in + len(constants), constants=constants,
                  num_user_outputs=n_user,
                  num_fwd_outputs=n_user + len(markers), diff_inputs=diff_in, diff_outputs=diff_out,
                  out_requires_grad=out_rg, mutated_inputs=sorted(set(mutated)),
                  mutated_placeholders=[p.name for p in placeholders if p in mutated_nodes],
                  rewritten=rewritten, functionalized=functionalized, placeholders=[p.name for p in placeholders],
                  grad_tangents=grad_tangents, mode="real" if mode is None else "fake")
