"""Graph nodes that enter and leave torch's state context managers: ``torch.autocast`` blocks
(core/src/interp/autocast.cpp) and ``torch.inference_mode`` blocks
(core/src/interp/inference_mode.cpp).

A captured ``with torch.autocast("cpu", dtype=torch.bfloat16):`` block becomes two nodes around
the block's ops: ``enter_autocast(device_type, dtype, enabled, cache_enabled)`` before them and
``exit_autocast()`` after them; ``with torch.inference_mode():`` becomes
``enter_inference_mode(True)`` ... ``exit_inference_mode()``. Running them does what the block's
``__enter__`` and ``__exit__`` do in eager (they are torch's own, on a fresh context manager made
from the block's effective settings), so every op between them dispatches under the same state
as in eager:

- the eager runner and callable backends run the nodes in order;
- the AOT backends trace autocast blocks with ``make_fx`` while the nodes run, so autocast's casts
  are recorded as explicit ``aten._to_copy`` ops and the ATen graphs replay eager's dtypes without
  autocast (the runtime switches off an autocast entered around the call while they run; a
  training graph with blocks called under autocast runs on the eager runner); a graph with inference-mode nodes runs on the eager runner (its results must be
  inference tensors, which a traced graph run outside the mode would not make);
- the fused backend runs such inference graphs on the eager runner (its kernels do not autocast).

The blocks entered on a thread are kept on one stack: ``unwind()`` leaves every block still open,
innermost first, as the blocks' ``__exit__`` would when an exception passes through them (a graph
that raises part-way, a trace that fails).
"""
import threading

import torch

__all__ = ["enter_autocast", "exit_autocast", "enter_inference_mode", "exit_inference_mode", "unwind", "depth",
           "has_autocast", "has_inference_mode"]

_local = threading.local()


def _stack():
    s = getattr(_local, "stack", None)
    if s is None:
        s = _local.stack = []
    return s


def _enter(cm):
    cm.__enter__()
    _stack().append(cm)


def _exit():
    _stack().pop().__exit__(None, None, None)


def enter_autocast(device_type, dtype, enabled, cache_enabled):
    """What ``torch.autocast(device_type, dtype, enabled, cache_enabled).__enter__()`` does."""
    _enter(torch.autocast(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled))


def exit_autocast():
    """What the innermost open autocast block's ``__exit__(None, None, None)`` does."""
    _exit()


def enter_inference_mode(mode):
    """What ``torch.inference_mode(mode).__enter__()`` does."""
    _enter(torch.inference_mode(mode))


def exit_inference_mode():
    """What the innermost open inference-mode block's ``__exit__(None, None, None)`` does."""
    _exit()


def depth():
    """How many blocks are open on this thread."""
    return len(_stack())


def unwind(to_depth=0):
    """Leaves the open blocks until ``to_depth`` remain, innermost first."""
    s = _stack()
    while len(s) > to_depth:
        s.pop().__exit__(None, None, None)


def _calls(gm, targets):
    return any(n.op == "call_function" and n.target in targets for n in gm.graph.nodes)


def has_autocast(gm):
    """Whether a torch.fx.GraphModule holds autocast nodes."""
    return _calls(gm, (enter_autocast, exit_autocast))


def has_inference_mode(gm):
    """Whether a torch.fx.GraphModule holds inference-mode nodes."""
    return _calls(gm, (enter_inference_mode, exit_inference_mode))
