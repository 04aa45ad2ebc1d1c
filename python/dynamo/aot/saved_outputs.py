"""Which user outputs of a training graph eager autograd would save for the backward.

Eager autograd saves some outputs for their own backward (sigmoid, tanh, exp, softmax save their
result), and an in-place write to such an output before backward() makes autograd raise ("one of
the variables needed for gradient computation has been modified by an inplace operation"). The
compiled backward may not read the output itself: after decompositions the partitioner may save a
value computed from it instead (sigmoid's backward `g * y * (1 - y)` saves `y * (1 - y)`), and the
write would go unnoticed, the gradients computed from the values before it. runtime.py checks
the versions of the outputs listed here, so the compiled function raises where eager raises.

On the joint graph (forward and backward, as traced from eager autograd, before the partition
chooses what to save): an output is listed when a node of the backward part (no user or mutation
output depends on it) reads the output or a view of it, as eager's backward nodes read what their
forward saved. The partitioned graphs cannot tell: the partitioner may save the output's input and
recompute the output in the backward (relu), where eager saved the output itself.
"""
import operator

import torch

__all__ = ["outputs_read_by_backward"]


def _is_view(n):
    t = n.target
    if t is operator.getitem:
        return True
    s = t._schema if isinstance(t, torch._ops.OpOverload) else None
    return s is not None and len(s.returns) == 1 and s.returns[0].alias_info is not None


def _tensor_args(n):
    out = []
    for a in list(n.args) + list(n.kwargs.values()):
        for v in (a if isinstance(a, (list, tuple)) else (a,)):
            if hasattr(v, "op") and hasattr(v, "name"):
                out.append(v)
    return out


def outputs_read_by_backward(joint, num_user_outputs, num_fwd_outputs):
    """Sorted indices of the user outputs of `joint` (a core IR graph returning the user outputs,
    the mutation outputs, then the gradients) that its backward part reads (see above)."""
    nodes = [n for n in joint.nodes if n.op == "call_function"]
    outs = list(joint.output.args[0])
    owner = {}  # node name -> index of the user output it is (or views)
    for k, o in enumerate(outs[:num_user_outputs]):
        if hasattr(o, "name"):
            owner.setdefault(o.name, k)
    for n in nodes:
        args = _tensor_args(n)
        if _is_view(n) and args and args[0].name in owner:
            owner.setdefault(n.name, owner[args[0].name])
    needed = set()  # names of the nodes user and mutation outputs depend on
    stack = [o for o in outs[:num_fwd_outputs] if hasattr(o, "name")]
    while stack:
        n = stack.pop()
        if n.name in needed:
            continue
        needed.add(n.name)
        stack.extend(_tensor_args(n) if n.op == "call_function" else [])
    read = set()
    for n in nodes:
        if n.name in needed or n.name in owner:
            continue
        read.update(owner[a.name] for a in _tensor_args(n) if a.name in owner)
    return sorted(read)
