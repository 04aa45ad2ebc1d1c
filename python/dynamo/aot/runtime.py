"""The runtime wrapper: compiled forward and backward graphs behind one torch.autograd.Function.

    outputs = fn(*graph_inputs)
      inference: forward runner -> user outputs (in-place input updates happen inside the graph;
                 run with grad mode off when no output requires grad)
      training:  CompiledFunction.apply(*graph_inputs)
                   forward:  fw(*inputs) -> user outputs, mutation markers, saved values;
                             saves the saved values, marks outputs eager leaves without grad as
                             non-differentiable
                   backward: compiles the backward graph on first use (bw_compiler), then
                             bw(*saved, *contiguous grads of differentiable outputs) -> one grad
                             per input (None where none, and None where every grad it reads came
                             as None: the loss does not reach the input through this graph, and
                             eager leaves its .grad None; those outputs get zeros); on the graph runner the arguments are
                             handed over (run_owned) after autograd drops its saved references
                             (maybe_clear_saved_tensors; kept under retain_graph=True), and each
                             is freed right after its last use in the backward graph

Autograd calls the backward as one node. The backward cannot itself be differentiated:
create_graph=True (double backward) raises an error that names the compiled function.
"""
import time

import torch

__all__ = ["make_inference_fn", "make_training_fn"]


def _autocast_api():
    """(is_on() -> (cpu, cuda), set_on(cpu, cuda)): torch 2.x takes the device (its _cpu_ forms are
    deprecated), torch 1.x has one function per device."""
    try:
        torch.is_autocast_enabled("cpu")
    except TypeError:
        def is_on():
            return torch.is_autocast_cpu_enabled(), torch.is_autocast_enabled()

        def set_on(cpu, gpu):
            torch.set_autocast_cpu_enabled(cpu)
            torch.set_autocast_enabled(gpu)
        return is_on, set_on

    def is_on():
        return torch.is_autocast_enabled("cpu"), torch.is_autocast_enabled("cuda")

    def set_on(cpu, gpu):
        torch.set_autocast_enabled("cpu", cpu)
        torch.set_autocast_enabled("cuda", gpu)
    return is_on, set_on


autocast_on, _set_autocast_on = _autocast_api()


def _without_autocast(fn):
    """fn run with autocast off: the trace recorded autocast's casts as explicit ops (and the ops
    of a captured autocast(enabled=False) block uncast), so the ATen graphs replay eager's dtypes
    only when no autocast around the call casts their ops again. A graph runner's owning call
    (run_owned, which frees the saved values after their last use) is kept, wrapped the same way."""
    def off(f, *args):
        cpu, gpu = autocast_on()
        if not cpu and not gpu:
            return f(*args)
        _set_autocast_on(False, False)
        try:
            return f(*args)
        finally:
            _set_autocast_on(cpu, gpu)

    def run(*args):
        return off(fn, *args)

    owned = getattr(fn, "run_owned", None)
    if owned is not None:
        run.run_owned = lambda args: off(owned, args)
    return run


def _without_grad(fn):
    """fn run with grad mode off. An inference graph whose outputs need no grad (the trace found
    none of them requires grad) can still be called with grad mode on: its ATen graph has lost
    the torch.no_grad() block it was captured under (make_fx records no grad-mode changes), and
    its in-place updates of parameters, legal under that block, would raise on leaves that require
    grad ("a leaf Variable that requires grad is being used in an in-place operation")."""
    def run(*args):
        if not torch.is_grad_enabled():
            return fn(*args)
        torch._C._set_grad_enabled(False)
        try:
            return fn(*args)
        finally:
            torch._C._set_grad_enabled(True)
    return run


def make_inference_fn(fw, plan):
    n = plan.num_user_outputs
    fw = _without_autocast(fw)
    if not any(plan.out_requires_grad):
        fw = _without_grad(fw)
    if plan.num_fwd_outputs == n:
        return fw

    def inference(*args):
        return tuple(fw(*args)[:n])

    return inference


def _double_backward_error(plan):
    return RuntimeError(
        f"dynamo: backend '{plan.backend}' cannot differentiate the backward of the compiled graph of "
        f"'{plan.function}' ({plan.where}) again: create_graph=True / double backward through an AOT "
        f"graph is not supported. Hint: compile this function with backend='eager', or run it under "
        f"dynamo.disable, when you need higher-order gradients")


def _unpack_saved(ctx):
    """The saved values in the backward graph's order, as a new list (no other local references)."""
    tensors = iter(ctx.saved_tensors)
    others = iter(ctx.others)
    return [next(tensors) if is_t else next(others) for is_t in ctx.layout]


def make_training_fn(fw, compile_backward, plan, on_backward_compiled=None, watched=()):
    """fw: the forward callable; compile_backward(): the backward callable, called once, lazily.
    watched: indices of user outputs eager autograd would save (saved_outputs.py): saved too, so
    an in-place write to one before backward() raises autograd's error, as in eager."""
    n_user, n_fwd = plan.num_user_outputs, plan.num_fwd_outputs
    diff_out = list(plan.diff_outputs)
    nondiff = [k for k in range(n_user) if k not in set(diff_out)]
    state = {"bw": None}
    fw = _without_autocast(fw)

    class CompiledFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            outs = fw(*args)
            saved = outs[n_fwd:]
            # Leaves that require grad (parameters) are kept on ctx: torch 1.13 fails to unpack a
            # saved leaf under saved_tensors_hooks ("No grad accumulator for a saved leaf").
            kept = [isinstance(s, torch.Tensor) and not (s.is_leaf and s.requires_grad) for s in saved]
            # The watched outputs go last: _unpack_saved reads only the saved values before them.
            watch = [outs[k] for k in watched
                     if isinstance(outs[k], torch.Tensor) and not (outs[k].is_leaf and outs[k].requires_grad)]
            ctx.save_for_backward(*[s for s, k in zip(saved, kept) if k], *watch)
            ctx.layout = kept
            ctx.others = [s for s, k in zip(saved, kept) if not k]
            # save_for_backward's version check, for what is kept on ctx.
            ctx.versions = [s._version if isinstance(s, torch.Tensor) else None for s in ctx.others]
            user = tuple(outs[:n_user])
            # Outputs the loss does not reach get None, not zeros (see _tangents).
            ctx.set_materialize_grads(False)
            ctx.diff_meta = [(user[k].shape, user[k].dtype, user[k].device) for k in diff_out]
            if nondiff:
                ctx.mark_non_differentiable(*[user[k] for k in nondiff])
            return user

        @staticmethod
        def backward(ctx, *grads):
            if torch.is_grad_enabled():  # the engine enables grad mode only for create_graph=True
                raise _double_backward_error(plan)
            bw = state["bw"]
            if bw is None:
                start = time.perf_counter()
                bw = state["bw"] = _without_autocast(compile_backward())
                if on_backward_compiled is not None:
                    on_backward_compiled((time.perf_counter() - start) * 1e3)
            for s, v in zip(ctx.others, ctx.versions):
                if v is not None and s._version != v:
                    raise RuntimeError(
                        f"one of the variables needed for gradient computation has been modified by an "
                        f"inplace operation: [{s.type()} {list(s.shape)}] is at version {s._version}; "
                        f"expected version {v} instead (a parameter saved for the backward of the "
                        f"compiled graph of '{plan.function}', {plan.where})")
            args = _unpack_saved(ctx)
            tangents, unreached = _tangents(ctx, grads)
            args += tangents
            run_owned = getattr(bw, "run_owned", None)
            if run_owned is None:  # another backward compiler: it borrows its inputs
                return _drop_unreached(tuple(bw(*args)), unreached)
            # Hand the saved values over: autograd drops its references now (unless the graph is
            # retained: retain_graph=True), the runner frees each one after its last use, as
            # eager autograd frees a saved tensor once its backward node has run.
            ctx.maybe_clear_saved_tensors()
            return _drop_unreached(tuple(run_owned(args)), unreached)

    def _tangents(ctx, grads):
        """The backward graph's tangents (zeros for the outputs autograd passed None: the loss does
        not reach them) and the inputs whose gradients read only such tangents: eager autograd
        leaves their .grad None (the loss does not reach them either), where zeros would be
        accumulated into it."""
        tangents, missing = [], set()
        for pos, (k, (shape, dtype, device)) in enumerate(zip(diff_out, ctx.diff_meta)):
            if grads[k] is None:
                missing.add(pos)
                tangents.append(torch.zeros(shape, dtype=dtype, device=device))
            else:
                tangents.append(grads[k].contiguous())
        reads = getattr(plan, "grad_tangents", None)
        if not missing or not reads:
            return tangents, ()
        unreached = [i for i, r in enumerate(reads) if r and missing.issuperset(r)]
        return tangents, unreached

    def _drop_unreached(grads, unreached):
        if not unreached:
            return grads
        grads = list(grads)
        for i in unreached:
            grads[i] = None
        return tuple(grads)

    CompiledFunction.__name__ = f"CompiledFunction_{plan.function.replace('.', '_')}"

    def training(*args):
        return CompiledFunction.apply(*args)

    return training
