"""torch.autocast / torch.cuda.amp.autocast blocks and other torch context managers."""
import torch
import torch.nn as nn

from . import snippet


@snippet
def autocast_cpu_disabled():
    fc = nn.Linear(4, 4)
    def f(x):
        with torch.autocast("cpu", enabled=False):
            return fc(x)
    return f, (torch.randn(2, 4),)


@snippet
def cuda_amp_autocast_disabled_region():
    fc = nn.Linear(4, 4)
    def f(x):
        with torch.cuda.amp.autocast(enabled=False):
            y = fc(x.float())
        return y.relu()
    return f, (torch.randn(2, 4),)


@snippet(breaks="autocast")
def autocast_bf16_cpu():
    fc = nn.Linear(4, 4)
    def f(x):
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            return fc(x).float()
    return f, (torch.randn(2, 4),)


@snippet
def no_grad_block():
    fc = nn.Linear(3, 3)
    def f(x):
        with torch.no_grad():
            t = fc(x)
        return x + t
    return f, (torch.randn(2, 3),)


@snippet
def set_grad_enabled_false():
    def f(x):
        with torch.set_grad_enabled(False):
            y = x * 2
        return y
    return f, (torch.randn(3),)


@snippet
def enable_grad_inside():
    def f(x):
        with torch.enable_grad():
            return x.sin()
    return f, (torch.randn(3),)


@snippet
def nullcontext_amp_off():
    import contextlib
    def f(x, amp=False):
        ctx = torch.autocast("cpu") if amp else contextlib.nullcontext()
        with ctx:
            return x.exp()
    return f, (torch.randn(3),)


@snippet(breaks="inference_mode")
def inference_mode_block():
    def f(x):
        with torch.inference_mode():
            return x * 2
    return f, (torch.randn(3),)
