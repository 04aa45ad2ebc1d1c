"""Adversarial pass, round 4 (outsider testing): programs written the way training and model code
is written (optimizer steps with schedulers and clipping, gradient accumulation, EMA under no_grad,
HuggingFace-style config/kwargs/cache modules, hooks, custom autograd Functions, closures and
globals, exceptions raised inside and caught outside), plus the flags of views of inference-mode
inputs. Each case is compared with eager call by call (results, exceptions, side effects) under
the backends eager and aot_eager; cases failing today are strict xfails naming the diagnosis."""
import dataclasses
import functools
import itertools

import pytest
import torch

from adversarial_harness import check_case_under, params, registry

CASES, case = registry()
BACKENDS = ("eager", "aot_eager")


@case
def view_flags_of_inference_inputs():
    # x.t(), x[0] and x.view(-1) of an inference tensor are inference tensors; x * 2 is not.
    with torch.inference_mode():
        frozen = torch.ones(2, 2)
    xs = [torch.ones(2, 2), frozen, torch.ones(2, 2), frozen]

    def fn(x):
        y = x * 2
        return y, x.t().is_inference(), x.view(-1).is_inference(), y.is_inference(), x[0][1:].is_inference()
    return fn, lambda f, i: f(xs[i])


case(calls=4)(view_flags_of_inference_inputs)


@case
def unused_bmm_of_mismatched_dtypes_raises():
    def fn(x, w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            a = torch.bmm(x, w)
            with torch.autocast("cpu", enabled=False):
                torch.bmm(a, w)
        return a
    return fn, lambda f, i: f(torch.randn(1, 2, 2), torch.randn(1, 2, 2))


@case
def sgd_step_lr_schedule_clip_accumulate():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    log = []

    def step(x, y, accum=2):
        for k in range(accum):
            loss = torch.nn.functional.mse_loss(model(x[k::accum]), y[k::accum]) / accum
            loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        sched.step()
        log.append(f"lr={sched.get_last_lr()[0]:.4f}")
        return loss.detach(), norm

    def drive(f, i):
        return f(torch.randn(4, 4), torch.randn(4, 1))
    return step, drive, lambda: ([p.detach().clone() for p in model.parameters()], list(log))


@case
def ema_update_under_no_grad():
    net = torch.nn.Linear(3, 3)
    ema = torch.nn.Linear(3, 3)
    ema.load_state_dict(net.state_dict())
    for p in ema.parameters():
        p.requires_grad_(False)

    def update(x, decay=0.9):
        out = net(x).sum()
        out.backward()
        with torch.no_grad():
            for p in net.parameters():
                p -= 0.1 * p.grad
                p.grad = None
            for e, p in zip(ema.parameters(), net.parameters()):
                e.mul_(decay).add_(p, alpha=1 - decay)
        return out.detach()
    return update, lambda f, i: f(torch.randn(2, 3)), lambda: [t.detach().clone() for t in
                                                               itertools.chain(net.parameters(), ema.parameters())]


@dataclasses.dataclass
class _Cfg:
    hidden: int = 4
    heads: int = 2
    use_cache: bool = True
    output_attentions: bool = False


class _Attention(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.qkv = torch.nn.Linear(cfg.hidden, 3 * cfg.hidden)

    def forward(self, h, attention_mask=None, past_key_value=None, **kwargs):
        b, t, _ = h.shape
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        if past_key_value is not None:
            k = torch.cat([past_key_value[0], k], dim=1)
            v = torch.cat([past_key_value[1], v], dim=1)
        scores = q @ k.transpose(-1, -2) / (q.shape[-1] ** 0.5)
        total = k.shape[1]
        causal = torch.arange(total)[None, :] <= (torch.arange(t) + total - t)[:, None]
        scores = scores.masked_fill(~causal, float("-inf"))
        if attention_mask is not None:
            scores = scores + (1.0 - attention_mask[:, None, :].to(scores.dtype)) * -1e4
        probs = scores.softmax(-1)
        out = {"hidden": probs @ v}
        if self.cfg.use_cache:
            out["past_key_value"] = (k, v)
        if kwargs.get("output_attentions", self.cfg.output_attentions):
            out["attentions"] = probs
        return out


@case
def hf_style_attention_with_cache_and_kwargs():
    cfg = _Cfg()
    attn = _Attention(cfg)

    def drive(f, i):
        h = torch.randn(1, 2, 4)
        mask = torch.ones(1, 2 + 2 * (i > 0))
        past = (torch.randn(1, 2, 4), torch.randn(1, 2, 4)) if i > 0 else None
        if i == 2:
            cfg.use_cache = False
            return f(h, attention_mask=mask, past_key_value=past, output_attentions=True)
        return f(h, attention_mask=mask, past_key_value=past)
    return attn, drive


class _Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


@case
def custom_function_with_hooks_and_grad():
    lin = torch.nn.Linear(2, 2)
    seen = []
    lin.register_forward_pre_hook(lambda m, a: seen.append(("pre", tuple(a[0].shape))))
    lin.register_forward_hook(lambda m, a, o: seen.append(("post", o.dtype)))

    def fn(x):
        y = _Square.apply(lin(x)).sum()
        y.backward()
        return y.detach(), lin.weight.grad.clone()

    def drive(f, i):
        lin.zero_grad()
        return f(torch.randn(3, 2))
    return fn, drive, lambda: list(seen)


_COUNTER = 0


@case
def raise_inside_caught_outside_with_side_effects():
    global _COUNTER
    _COUNTER = 0
    store = {"n": 0}

    def fn(x, limit):
        global _COUNTER
        _COUNTER += 1
        store["n"] += 1
        y = x.sum()
        if y.item() > limit:
            raise ValueError(f"sum {y.item():.2f} over {limit}")
        return y

    def drive(f, i):
        try:
            return f(torch.full((2,), float(i)), 1.5)
        except ValueError as e:
            return "caught " + str(e)
    return fn, drive, lambda: (dict(store), _COUNTER)


@case
def try_finally_and_partial_in_forward():
    events = []
    act = functools.partial(torch.nn.functional.leaky_relu, negative_slope=0.2)

    def fn(x):
        try:
            events.append("enter")
            if x.shape[0] > 2:
                return act(x[:2]) * 3
            return act(x)
        finally:
            events.append("exit")
    return fn, lambda f, i: f(torch.randn(1 + i, 2)), lambda: list(events)


@case
def module_list_slicing_and_parameter_list():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(2, 2) for _ in range(4))
            self.scales = torch.nn.ParameterList(torch.nn.Parameter(torch.tensor(float(k))) for k in range(4))
            self.heads = torch.nn.ModuleDict({"a": torch.nn.Linear(2, 1), "b": torch.nn.Linear(2, 3)})

        def forward(self, x, head="a", upto=None):
            for layer, s in zip(self.layers[:upto], self.scales):
                x = layer(x) * s
            for layer in reversed(self.layers[upto:] if upto else []):
                x = x + layer(x)
            return self.heads[head](x)
    net = Net()
    return net, lambda f, i: f(torch.randn(2, 2), head="ab"[i % 2], upto=[None, 2, 1][i])


@case
def input_mutated_through_view_in_augmentation():
    def augment(img, flip):
        top = img[:, :1]
        top.mul_(0.5)
        if flip:
            img = img.flip(-1)
        return img.clamp(0, 1)

    def drive(f, i):
        img = torch.rand(3, 2, 2)
        out = f(img, i % 2 == 1)
        return out, img
    return augment, drive


@case
def recursion_and_lru_cache():
    @functools.lru_cache(maxsize=None)
    def widths(n):
        return (1,) if n == 0 else widths(n - 1) + (n + 1,)

    def depth_sum(x, n):
        if n == 0:
            return x
        return depth_sum(x * 0.5, n - 1) + x.sum() * widths(n)[-1]
    return depth_sum, lambda f, i: f(torch.randn(2), i + 1)


@pytest.mark.parametrize("case,backend", params(CASES, {}, BACKENDS))
def test_adversarial_round4(case, backend, monkeypatch):
    check_case_under(case, backend, monkeypatch)
