"""The decomposition groups of ``backends/decompositions.def`` over functorch's tables.

``table(disabled)`` is the decomposition table make_fx applies for ``aot_eager_decomp_partition``:
functorch's decompositions (``torch._decomp.decomposition_table``) of the ops of every group not
disabled, each wrapped to count how often it ran, per group. Random ops are never decomposed.
Groups are disabled by name with ``DYNAMO_AOT_DISABLE_DECOMPS=softmax,norms`` or
``set_disabled(["softmax"])``; an unknown name raises dynamo.UserError listing the groups.
"""
import os
import threading

import torch

from dynamo import _C
from dynamo.aot import tracing

__all__ = ["groups", "core_ops", "set_disabled", "disabled", "table", "RANDOM_OPS", "ENV_VAR"]

ENV_VAR = "DYNAMO_AOT_DISABLE_DECOMPS"
#: Never decomposed: functorch 1.13 turns native_dropout into rand_like (other masks than eager's).
RANDOM_OPS = frozenset({"aten::native_dropout", "aten::dropout", "aten::bernoulli", "aten::rand_like",
                        "aten::randn_like", "aten::rand", "aten::randn", "aten::randint",
                        "aten::randperm", "aten::multinomial", "aten::normal", "aten::uniform",
                        "aten::_fused_dropout", "aten::rrelu_with_noise"})

_lock = threading.Lock()
_disabled = None


def groups():
    """[(name, [ops], description)] in file order."""
    return [(n, list(ops), d) for n, ops, d in _C._aot.decomposition_groups()]


def core_ops():
    """The core ATen op set (schema names without overload)."""
    return list(_C._aot.core_ops())


def _check_names(names):
    known = [g[0] for g in groups()]
    bad = [n for n in names if n not in known]
    if bad:
        raise _C.UserError(f"error: unknown decomposition group{'s' if len(bad) > 1 else ''} "
                           f"{', '.join(repr(b) for b in bad)}\n  = hint: known groups: {', '.join(known)}")
    return sorted(set(names))


def set_disabled(names):
    """Disables these groups (replaces the environment's setting)."""
    global _disabled
    names = _check_names([n.strip() for n in names if n.strip()])
    with _lock:
        _disabled = names


def disabled():
    """The disabled group names."""
    global _disabled
    with _lock:
        if _disabled is None:
            _disabled = _check_names([n.strip() for n in os.environ.get(ENV_VAR, "").split(",") if n.strip()])
        return list(_disabled)


def _overload(op):
    name = op.split("::", 1)[1]
    base, _, overload = name.partition(".")
    packet = getattr(torch.ops.aten, base, None)
    return getattr(packet, overload or "default", None) if packet is not None else None


def table(counts):
    """{OpOverload: decomposition} of the enabled groups; each call adds 1 to counts[group]."""
    from torch._decomp import decomposition_table
    off = set(disabled())
    out = {}
    for name, ops, _ in groups():
        counts.setdefault(name, 0)
        if name in off:
            continue
        for op in ops:
            if op.split(".")[0] in RANDOM_OPS or tracing.is_random(op):
                continue
            overload = _overload(op)
            fn = decomposition_table.get(overload) if overload is not None else None
            if fn is not None:
                out[overload] = _counted(fn, name, counts)
    return out


def _counted(fn, group, counts):
    def decomposed(*args, **kwargs):
        counts[group] += 1
        return fn(*args, **kwargs)
    return decomposed
