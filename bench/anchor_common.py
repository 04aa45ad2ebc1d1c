"""What the same-run anchor benches of stack 2 share (bench/side_by_side*.py): the check that torch
has torch.compile, the clocks, and the environment line. Not a benchmark itself.
"""
import os
import platform
import resource
import sys
import time

import torch

from dynamo import _C


def require_torch_compile():
    """Exit 2 with a message on torch 1.x (stack 1): the anchors are torch.compile's."""
    if not hasattr(torch, "compile"):
        print(f"error: torch {torch.__version__} has no torch.compile; run this on stack 2 "
              "(docs/stacks.md)", file=sys.stderr)
        sys.exit(2)


def thread_ms():
    """The calling thread's CPU time in ms: capture, the eager backend and, with 1 torch thread,
    the model's ops all run on it; time spent descheduled by other jobs does not count."""
    return time.thread_time_ns() / 1e6


def process_ms():
    """(CPU ms of this process, all threads, plus its waited-for children: the C++ compiler runs
    that both the fused backend and inductor start; wall ms)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
    return cpu * 1e3, time.perf_counter() * 1e3


def median(values):
    values = sorted(values)
    n = len(values)
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2


def environment(**extra):
    try:
        import torchvision
        tv = torchvision.__version__
    except ImportError:
        tv = None
    return {"bench": "environment", "python": platform.python_version(), "torch": torch.__version__,
            "torchvision": tv, "dynamo": getattr(_C, "__version__", "?"),
            "torch_threads": torch.get_num_threads(), "platform": platform.platform(),
            "load_average": [round(v, 2) for v in os.getloadavg()], **extra}
