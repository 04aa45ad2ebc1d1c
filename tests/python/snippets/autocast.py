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


@snippet
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


@snippet
def inference_mode_block():
    def f(x):
        with torch.inference_mode():
            return x * 2
    return f, (torch.randn(3),)


@snippet
def autocast_decorated_forward():
    class MLPHead(nn.Module):
        def __init__(self, dim=8, hidden=16, classes=3):
            super().__init__()
            self.proj = nn.Linear(dim, hidden)
            self.act = nn.GELU()
            self.out = nn.Linear(hidden, classes)

        @torch.cpu.amp.autocast()
        def forward(self, feats):
            return self.out(self.act(self.proj(feats)))

    return MLPHead(), (torch.randn(4, 8),)


@snippet
def autocast_fp32_island_for_softmax():
    class Attention(nn.Module):
        def __init__(self, dim=8, heads=2):
            super().__init__()
            self.heads = heads
            self.qkv = nn.Linear(dim, dim * 3)
            self.proj = nn.Linear(dim, dim)

        def forward(self, x):
            b, n, c = x.shape
            with torch.autocast("cpu", dtype=torch.bfloat16):
                q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
                with torch.autocast("cpu", enabled=False):  # softmax in full precision
                    attn = (q.float() @ k.float().transpose(-2, -1)) * (c // self.heads) ** -0.5
                    attn = attn.softmax(dim=-1)
                out = (attn.to(v.dtype) @ v).transpose(1, 2).reshape(b, n, c)
                out = self.proj(out)
            return out.float()

    return Attention(), (torch.randn(2, 5, 8),)


@snippet
def autocast_flag_from_config():
    class Encoder(nn.Module):
        def __init__(self, use_amp=True):
            super().__init__()
            self.use_amp = use_amp
            self.conv = nn.Conv1d(4, 8, 3, padding=1)
            self.norm = nn.BatchNorm1d(8)

        def forward(self, x):
            with torch.autocast(device_type=x.device.type, dtype=torch.bfloat16, enabled=self.use_amp):
                h = self.conv(x)
            return self.norm(h.float()).relu()

    return Encoder().eval(), (torch.randn(2, 4, 10),)


@snippet
def autocast_mixed_precision_loss():
    model = nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 4))
    def step(x, target):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(x)
        loss = nn.functional.cross_entropy(logits.float(), target)
        return loss, logits.dtype == torch.bfloat16
    return step, (torch.randn(5, 6), torch.tensor([0, 3, 1, 2, 0]))


@snippet
def inference_mode_decorated_predict():
    class Detector(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
            self.cls = nn.Linear(8, 5)

        @torch.inference_mode()
        def forward(self, images):
            logits = self.cls(self.features(images).flatten(1))
            scores, labels = logits.softmax(-1).max(-1)
            return {"scores": scores, "labels": labels}

    return Detector().eval(), (torch.randn(2, 3, 8, 8),)


@snippet
def inference_mode_ema_targets():
    class Student(nn.Module):
        def __init__(self):
            super().__init__()
            self.student = nn.Linear(6, 4)
            self.teacher = nn.Linear(6, 4)

        def forward(self, x):
            with torch.inference_mode():
                target = self.teacher(x).softmax(-1)
            pred = self.student(x).log_softmax(-1)
            return -(target.clone() * pred).sum(-1).mean()

    return Student(), (torch.randn(3, 6),)


@snippet
def inference_mode_with_no_grad_fallback():
    class Scorer(nn.Module):
        def __init__(self, use_inference_mode=True):
            super().__init__()
            self.ctx = torch.inference_mode if use_inference_mode else torch.no_grad
            self.fc = nn.Linear(4, 1)

        def forward(self, x):
            with self.ctx():
                return torch.sigmoid(self.fc(x)).squeeze(-1)

    return Scorer(), (torch.randn(5, 4),)
