"""Graph nodes that enter and leave a ``torch.autocast`` block (core/src/interp/autocast.cpp).

A captured ``with torch.autocast("cpu", dtype=torch.bfloat16):`` block becomes two nodes around
the block's ops: ``enter_autocast(device_type, dtype, enabled, cache_enabled)`` before them and
``exit_autocast()`` after them. Running them does what the block's ``__enter__`` and
``__exit__`` do in eager (they are torch's own, on a fresh ``torch.autocast`` made from the
block's effective settings), so every op between them dispatches under the same autocast state
as in eager:

- the eager runner and callable backends run the nodes in order;
- the AOT backends trace the graph with ``make_fx`` while the nodes run, so autocast's casts are
  recorded as explicit ``aten._to_copy`` ops and the ATen graphs replay eager's dtypes without
  autocast;
- the fused backend runs such a graph on the eager runner (its kernels do not autocast).

The blocks entered on a thread are kept on a stack: ``unwind()`` leaves every block still open,
innermost first, as the blocks' ``__exit__`` would when an exception passes through them (a graph
that raises part-way, a trace that fails).
"""
import threading

import torch

__all__ = ["enter_autocast", "exit_autocast", "unwind", "depth", "has_autocast"]

_local = threading.local()


def _stack():
    s = getattr(_local, "stack", None)
    if s is None:
        s = _local.stack = []
    return s


def enter_autocast(device_type, dtype, enabled, cache_enabled):
    """What ``torch.autocast(device_type, dtype, enabled, cache_enabled).__enter__()`` does."""
    cm = torch.autocast(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
    cm.__enter__()
    _stack().append(cm)


def exit_autocast():
    """What the innermost open block's ``__exit__(None, None, None)`` does."""
    _stack().pop().__exit__(None, None, None)


def depth():
    """How many blocks are open on this thread."""
    return len(_stack())


def unwind(to_depth=0):
    """Leaves the open blocks until ``to_depth`` remain, innermost first."""
    s = _stack()
    while len(s) > to_depth:
        s.pop().__exit__(None, None, None)


def has_autocast(gm):
    """Whether a torch.fx.GraphModule holds autocast nodes."""
    return any(n.op == "call_function" and n.target in (enter_autocast, exit_autocast) for n in gm.graph.nodes)
