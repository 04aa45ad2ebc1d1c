"""Adversarial pass 2 (issue #7): real model and training code, written the way public projects
write it, compared with eager exactly by adversarial_harness (outputs bitwise, gradients, buffers,
optimizer state and Python side effects, over several calls with `torch.manual_seed` reseeded
before each call). This file: aliasing of results, grad modes, RNG state, closures,
and compiled models inside compiled train steps."""
import collections
import dataclasses
import math
import random
from typing import NamedTuple, Optional, Tuple

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from adversarial_harness import check_case, params, registry

CASES, case = registry()

from test_adversarial_realmodels_loops import TinyLM  # noqa: E402  the decoding loops' small language model


def _params(m):
    return [p.detach().clone() for p in m.parameters()]


def _grads(m):
    return [None if p.grad is None else p.grad.clone() for p in m.parameters()]


def _bufs(m):
    return {k: v.clone() for k, v in m.named_buffers()}


def _opt_state(opt):
    out = []
    for st in opt.state.values():
        out.append({k: (v.clone() if torch.is_tensor(v) else v) for k, v in st.items()})
    return out, [g["lr"] for g in opt.param_groups]



# aliasing of results, grad modes, RNG state, closures: what training scripts rely on
# ----------------------------------------------------------------------------------------------

@case
def returned_views_and_noop_casts_alias_inputs():
    """HF/timm code returns `x.float()`, `x.to(dtype)`, `x.contiguous()`, `x.detach()`, views: when
    they are no-ops eager returns the input itself (or a view), so the caller's in-place updates
    reach the input."""
    def fn(x, w):
        a = x.float()
        b = x.to(torch.float32)
        c = x.contiguous()
        d = x.detach()
        e = x[1:]
        g = x.view(-1)
        return a, b, c, d, e, g, w.data, (a is x, b is x, c is x)

    def drive(f, i):
        x = torch.ones(3, 2) * i
        w = torch.zeros(2)
        outs = f(x, w)
        for k, o in enumerate(outs[:7]):
            o.add_(10 ** k)                                  # caller mutates what it got back
        return outs, x, w
    return fn, drive


@case
def returned_parameter_and_buffer_identity_then_mutated():
    m = nn.Linear(2, 2)
    m.register_buffer("scale", torch.ones(2))

    def fn(x):
        return m(x), m.weight, m.scale, m.bias.data

    def drive(f, i):
        y, w, s, b = f(torch.ones(1, 2))
        with torch.no_grad():
            s.mul_(2)
            b.add_(1)
        return y, w is m.weight, s is m.scale, type(w).__name__
    return fn, drive, lambda: (_params(m), _bufs(m))


@case
def called_under_outer_no_grad_then_with_grad():
    m = nn.Sequential(nn.Linear(3, 3), nn.Tanh())

    def drive(f, i):
        x = torch.randn(2, 3)
        with torch.no_grad():
            a = f(x)
        b = f(x)
        with torch.inference_mode(i == 2):
            c = f(x)
        b.sum().backward()
        return a, b, c.requires_grad, a.requires_grad, _grads(m)
    return m, drive


@case
def set_grad_enabled_by_phase_and_leaked_grad_mode():
    m = nn.Linear(3, 1)

    def run_phase(x, phase):
        m.train(phase == "train")
        with torch.set_grad_enabled(phase == "train"):
            out = m(x)
        return out, out.requires_grad, torch.is_grad_enabled()

    def drive(f, i):
        return f(torch.randn(2, 3), ["train", "val", "train"][i]), torch.is_grad_enabled()
    return run_phase, drive


@case
def grad_mode_leaked_by_set_grad_enabled_statement():
    m = nn.Linear(3, 1)

    def leaky(x):
        torch.set_grad_enabled(False)
        return m(x)

    def drive(f, i):
        try:
            out = f(torch.randn(2, 3))
            return out, out.requires_grad, torch.is_grad_enabled()
        finally:
            torch.set_grad_enabled(True)
    return leaky, drive


@case
def manual_seed_inside_function_and_fork_rng():
    def fn(x, seed):
        torch.manual_seed(seed)
        a = torch.randn_like(x)
        with torch.random.fork_rng():
            torch.manual_seed(seed + 1)
            b = torch.rand(2)
        c = torch.rand(2)                                   # continues the seed-`seed` stream
        return a, b, c

    return fn, lambda f, i: [f(torch.zeros(3), i), torch.rand(1), f(torch.zeros(3), 7)]


@case
def explicit_generator_object_state_advances():
    g = torch.Generator().manual_seed(123)

    def fn(x, gen):
        noise = torch.randn(x.shape, generator=gen)
        idx = torch.randperm(x.shape[0], generator=gen)
        return (x + noise)[idx], torch.empty(2).uniform_(generator=gen)

    return fn, lambda f, i: [f(torch.zeros(3), g), f(torch.zeros(3), g), g.get_state().sum()]


@case
def rng_state_saved_and_restored_for_reproducible_dropout():
    drop = nn.Dropout(0.5)

    def fn(x):
        state = torch.get_rng_state()
        a = drop(x)
        torch.set_rng_state(state)
        b = drop(x)
        return a, b, torch.equal(a, b)

    return fn, lambda f, i: f(torch.ones(6) * (i + 1))


@case
def gradient_checkpointing_with_dropout_preserves_rng():
    from torch.utils.checkpoint import checkpoint
    layers = nn.ModuleList(nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.3), nn.GELU()) for _ in range(2))
    flags = {"gradient_checkpointing": True}

    def forward(x):
        for layer in layers:
            if flags["gradient_checkpointing"] and layer.training:
                def create_custom_forward(module):
                    def custom_forward(*inputs):
                        return module(*inputs)
                    return custom_forward
                x = checkpoint(create_custom_forward(layer), x)
            else:
                x = layer(x)
        return x

    def drive(f, i):
        flags["gradient_checkpointing"] = i != 1
        for l in layers:
            l.zero_grad()
        x = torch.randn(2, 4, requires_grad=True)
        y = f(x)
        y.sum().backward()
        return y, x.grad, [_grads(l) for l in layers]
    return forward, drive


@case
def maml_inner_loop_functional_weights_autograd_grad_create_graph():
    net = nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 1))
    meta_opt = torch.optim.Adam(net.parameters(), lr=1e-2)

    def functional_forward(x, weights):
        x = F.linear(x, weights[0], weights[1])
        x = F.relu(x)
        return F.linear(x, weights[2], weights[3])

    def meta_step(xs, ys, xq, yq, inner_lr, inner_steps):
        meta_opt.zero_grad()
        fast = list(net.parameters())
        for _ in range(inner_steps):
            loss = F.mse_loss(functional_forward(xs, fast), ys)
            grads = torch.autograd.grad(loss, fast, create_graph=True)
            fast = [w - inner_lr * g for w, g in zip(fast, grads)]
        q_loss = F.mse_loss(functional_forward(xq, fast), yq)
        q_loss.backward()
        meta_opt.step()
        return q_loss.item()

    return meta_step, lambda f, i: f(torch.randn(4, 2), torch.randn(4, 1), torch.randn(3, 2), torch.randn(3, 1),
                                     0.1, 1 + i % 2), lambda: (_params(net), _opt_state(meta_opt))


@case
def lbfgs_step_with_closure():
    m = nn.Linear(3, 1)
    opt = torch.optim.LBFGS(m.parameters(), lr=0.5, max_iter=3, history_size=3)
    evals = []

    def step(x, y):
        def closure():
            opt.zero_grad()
            loss = F.mse_loss(m(x), y)
            loss.backward()
            evals.append(loss.item())
            return loss
        return opt.step(closure)

    x, y = torch.randn(6, 3), torch.randn(6, 1)
    return step, lambda f, i: f(x, y), lambda: (_params(m), list(evals))


@case
def embedding_max_norm_renormalizes_weight_in_place():
    m = nn.Embedding(6, 3, max_norm=1.0)
    with torch.no_grad():
        m.weight.mul_(3)

    def drive(f, i):
        m.zero_grad()
        y = f(torch.tensor([[1, 2], [2, 4 + i % 2]]))
        y.sum().backward()
        return y, m.weight.grad
    return m, drive, lambda: m.weight.detach().clone()


@case
def batchnorm_cumulative_average_momentum_none_and_no_running_stats():
    bn1 = nn.BatchNorm1d(3, momentum=None)
    bn2 = nn.BatchNorm1d(3, track_running_stats=False)
    bn3 = nn.BatchNorm1d(3)

    def fn(x):
        return bn1(x), bn2(x), F.batch_norm(x, bn3.running_mean, bn3.running_var, training=bn3.training, momentum=0.3)

    def drive(f, i):
        for b in (bn1, bn2, bn3):
            b.train(i != 1)
        return f(torch.randn(4, 3) + i)
    return fn, drive, lambda: (_bufs(bn1), _bufs(bn2), _bufs(bn3))


@case
def weight_norm_pre_hook_and_parametrize_orthogonal():
    wn = nn.utils.weight_norm(nn.Linear(3, 3))
    import torch.nn.utils.parametrize as P

    class Sym(nn.Module):
        def forward(self, X):
            return X.triu() + X.triu(1).transpose(-1, -2)
    lin = nn.Linear(3, 3)
    P.register_parametrization(lin, "weight", Sym())

    def fn(x):
        return wn(x), lin(x), lin.weight

    def drive(f, i):
        wn.zero_grad()
        lin.zero_grad()
        out = f(torch.randn(2, 3))
        (out[0].sum() + out[1].sum()).backward()
        with torch.no_grad():
            wn.weight_g.mul_(1.5)
        return out, _grads(wn), _grads(lin)
    return fn, drive


@case
def inplace_on_leaf_requiring_grad_raises_same_error():
    w = nn.Parameter(torch.ones(3))

    def fn(x, in_no_grad):
        if in_no_grad:
            with torch.no_grad():
                w.add_(x)
            return w * 2
        w.add_(x)                                           # RuntimeError: leaf variable ... in-place
        return w * 2

    return fn, lambda f, i: f(torch.ones(3), i != 1), lambda: w.detach().clone()


@case
def backward_twice_without_retain_graph_raises():
    m = nn.Linear(2, 1)

    def fn(x, retain):
        loss = m(x).exp().sum()
        loss.backward(retain_graph=retain)
        loss.backward()
        return loss.detach()

    def drive(f, i):
        m.zero_grad()
        return f(torch.ones(1, 2), i != 1), _grads(m)
    return fn, drive


@case
def dataloader_iterator_refilled_on_stop_iteration():
    data = [(torch.randn(2, 3), torch.randn(2, 1)) for _ in range(2)]
    m = nn.Linear(3, 1)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    st = {"it": iter(data), "epoch": 0}

    def step():
        try:
            x, y = next(st["it"])
        except StopIteration:
            st["epoch"] += 1
            st["it"] = iter(data)
            x, y = next(st["it"])
        opt.zero_grad()
        loss = F.mse_loss(m(x), y)
        loss.backward()
        opt.step()
        return loss.detach(), st["epoch"]

    return step, lambda f, i: [f(), f()], lambda: (_params(m), st["epoch"])


@case
def grad_noise_and_grad_value_clip_reading_p_grad_after_backward():
    m = nn.Linear(3, 2)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    log = []

    def step(x, std):
        opt.zero_grad()
        m(x).pow(2).sum().backward()
        for name, p in m.named_parameters():
            if p.grad is not None:
                p.grad.add_(torch.randn_like(p.grad) * std)
                log.append((name, round(p.grad.norm().item(), 5)))
        torch.nn.utils.clip_grad_value_(m.parameters(), 0.5)
        opt.step()
        vec = torch.nn.utils.parameters_to_vector(m.parameters())
        return vec

    return step, lambda f, i: f(torch.randn(4, 3), 0.1 * i), lambda: (_params(m), list(log))


@case
def swa_averaged_model_and_grad_scaler_disabled():
    m = nn.Linear(3, 1)
    swa = torch.optim.swa_utils.AveragedModel(m)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    scaler = torch.cuda.amp.GradScaler(enabled=False)

    def step(x, y):
        opt.zero_grad()
        with torch.autocast("cpu", enabled=False):
            loss = F.mse_loss(m(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        swa.update_parameters(m)
        return loss.detach(), swa(x)

    return step, lambda f, i: f(torch.randn(4, 3), torch.randn(4, 1)), lambda: (_params(m), _params(swa), _bufs(swa))


@case
def autocast_cpu_bfloat16_region_dtypes():
    m = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))

    def fn(x, enabled):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=enabled):
            h = m[0](x)
            s = h.softmax(-1)
        o = m[1](h.float())
        return h, s, o, (h.float() @ x.t())

    def drive(f, i):
        m.zero_grad()
        out = f(torch.randn(2, 4), i != 1)
        out[2].float().sum().backward()
        return out, _grads(m)
    return fn, drive


@case
def model_eval_called_inside_then_restored():
    m = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5), nn.BatchNorm1d(3))

    @torch.no_grad()
    def validate(x):
        was_training = m.training
        m.eval()
        out = m(x)
        m.train(was_training)
        return out, was_training

    def drive(f, i):
        m.train(i != 1)
        r = f(torch.randn(4, 3))
        return r, m.training, m[2].training, m(torch.randn(4, 3))
    return validate, drive, lambda: _bufs(m)


@case
def reset_parameters_with_init_on_first_call_and_seeded_init():
    class Lazy(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)
            self.initialized = False

        def forward(self, x):
            if not self.initialized:
                nn.init.xavier_uniform_(self.fc.weight, gain=nn.init.calculate_gain("relu"))
                nn.init.zeros_(self.fc.bias)
                nn.init.trunc_normal_(self.fc.bias, std=0.02)
                self.initialized = True
            return F.relu(self.fc(x))
    m = Lazy()
    return m, lambda f, i: f(torch.ones(1, 3)), lambda: _params(m)


@case
def hf_generate_style_logits_processors_and_stopping_criteria():
    lm = TinyLM()

    class MinLength:
        def __init__(self, min_length, eos):
            self.min_length, self.eos = min_length, eos

        def __call__(self, input_ids, scores):
            if input_ids.shape[-1] < self.min_length:
                scores[:, self.eos] = -float("inf")
            return scores

    class NoRepeatBigram:
        def __call__(self, input_ids, scores):
            for b in range(input_ids.shape[0]):
                toks = input_ids[b].tolist()
                banned = [toks[j + 1] for j in range(len(toks) - 1) if toks[j] == toks[-1]]
                scores[b, banned] = -float("inf")
            return scores

    class MaxLen:
        def __init__(self, n):
            self.n = n

        def __call__(self, input_ids, scores):
            return input_ids.shape[-1] >= self.n

    @torch.no_grad()
    def generate(input_ids, processors, criteria, eos=2):
        h = torch.zeros(input_ids.shape[0], 4)
        for t in range(input_ids.shape[1]):
            logp, h = lm(input_ids[:, t], h)
        unfinished = input_ids.new(input_ids.shape[0]).fill_(1)
        while True:
            scores = logp.clone()
            for p in processors:
                scores = p(input_ids, scores)
            nxt = torch.argmax(scores, dim=-1)
            nxt = nxt * unfinished + 0 * (1 - unfinished)
            input_ids = torch.cat([input_ids, nxt[:, None]], dim=-1)
            unfinished = unfinished.mul((nxt != eos).long())
            if unfinished.max() == 0 or any(c(input_ids, scores) for c in criteria):
                break
            logp, h = lm(nxt, h)
        return input_ids

    return generate, lambda f, i: f(torch.randint(0, 9, (2, 2 + i)), [MinLength(4, 2), NoRepeatBigram()], [MaxLen(6 + i)])



class Lion(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-2, betas=(0.9, 0.99), weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if len(state) == 0:
                    state["exp_avg"] = torch.zeros_like(p)
                    state["step"] = 0
                state["step"] += 1
                p.data.mul_(1 - group["lr"] * group["weight_decay"])
                exp_avg = state["exp_avg"]
                beta1, beta2 = group["betas"]
                update = exp_avg * beta1 + p.grad * (1 - beta1)
                p.add_(torch.sign(update), alpha=-group["lr"])
                exp_avg.mul_(beta2).add_(p.grad, alpha=1 - beta2)


@case
def custom_optimizer_state_keyed_by_parameters_and_fstring_logs():
    import json
    m = nn.Linear(3, 2)
    m.bias.requires_grad_(False)
    opt = Lion(m.parameters(), weight_decay=0.1)
    logs = []

    def step(x, y):
        opt.zero_grad()
        loss = F.mse_loss(m(x), y)
        loss.backward()
        opt.step()
        logs.append(f"loss {loss:.4f} {loss.item():.3f}")
        logs.append(json.dumps({"loss": round(loss.item(), 4), "shape": list(x.shape)}))
        return torch.is_tensor(loss), x.shape == (4, 3), loss.grad_fn is None, repr(loss.detach())

    return step, lambda f, i: f(torch.randn(4, 3), torch.zeros(4, 2)), lambda: (
        _params(m), list(logs), [(s["step"], s["exp_avg"].clone()) for s in opt.state.values()])


@case
def pgd_attack_loop_enable_grad_inside_eval_no_grad():
    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)).eval()

    def pgd(x, y, eps, alpha, steps, random_start=True):
        x_adv = x.clone().detach()
        if random_start:
            x_adv = x_adv + torch.empty_like(x_adv).uniform_(-eps, eps)
            x_adv = torch.clamp(x_adv, 0, 1).detach()
        for _ in range(steps):
            x_adv.requires_grad = True
            with torch.enable_grad():
                loss = F.cross_entropy(m(x_adv), y)
            grad = torch.autograd.grad(loss, [x_adv], retain_graph=False, create_graph=False)[0]
            x_adv = x_adv.detach() + alpha * grad.sign()
            delta = torch.clamp(x_adv - x, min=-eps, max=eps)
            x_adv = torch.clamp(x + delta, min=0, max=1).detach()
        return x_adv, (m(x_adv).argmax(1) == y).float().mean()

    def drive(f, i):
        with torch.no_grad():
            return f(torch.rand(3, 4), torch.tensor([0, 1, 2]), 0.1, 0.03, 2 + i, random_start=i != 1)
    return pgd, drive, lambda: _grads(m)


@case
def forward_hooks_collect_intermediate_features_into_dict():
    m = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Conv2d(2, 2, 3), nn.AdaptiveAvgPool2d(1))
    features = {}

    def get_activation(name):
        def hook(model, inp, output):
            features[name] = output.detach()
        return hook
    m[1].register_forward_hook(get_activation("relu1"))
    m[2].register_forward_hook(get_activation("conv2"))

    def fn(x):
        out = m(x)
        return out.flatten(1), {k: v.shape for k, v in features.items()}

    return fn, lambda f, i: f(torch.randn(1, 1, 5 + i, 6)), lambda: {k: v.clone() for k, v in features.items()}


@case
def gradient_clamp_hooks_registered_on_parameters_at_init():
    m = nn.Linear(3, 2)
    seen = []
    for name, p in m.named_parameters():
        p.register_hook(lambda g, name=name: (seen.append(name), g.clamp(-0.05, 0.05))[1])

    def step(x):
        m.zero_grad()
        m(x).pow(2).sum().backward()
        return _grads(m)

    return step, lambda f, i: f(torch.randn(4, 3) * (i + 1)), lambda: list(seen)


@case
def pruning_forward_pre_hook_weight_mask():
    import torch.nn.utils.prune as prune
    m = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))

    def drive(f, i):
        if i == 1:
            prune.l1_unstructured(m[0], name="weight", amount=0.5)
        if i == 2:
            prune.random_unstructured(m[2], name="weight", amount=0.3)
        m.zero_grad()
        y = f(torch.randn(3, 4))
        y.sum().backward()
        return y, [(n, None if p.grad is None else p.grad.clone()) for n, p in m.named_parameters()]
    return m, drive, lambda: _bufs(m)


class MemoryBank(nn.Module):
    def __init__(self, n=8, d=3, momentum=0.5):
        super().__init__()
        self.register_buffer("bank", F.normalize(torch.randn(n, d), dim=1))
        self.momentum = momentum
        self.enc = nn.Linear(4, 3)

    def forward(self, x, idx, T=0.1):
        f = F.normalize(self.enc(x), dim=1)
        logits = f @ self.bank.t().clone() / T
        loss = F.cross_entropy(logits, idx)
        with torch.no_grad():
            pos = self.bank.index_select(0, idx)
            pos.mul_(self.momentum).add_(f.detach() * (1 - self.momentum))
            self.bank.index_copy_(0, idx, F.normalize(pos, dim=1))
            self.bank[idx[:1]] = self.bank[idx[:1]] * 1.0
        return loss


@case
def instance_discrimination_memory_bank_index_copy():
    m = MemoryBank()

    def drive(f, i):
        m.zero_grad()
        idx = torch.from_numpy(np.random.permutation(8)[:3])
        loss = f(torch.randn(3, 4), idx)
        loss.backward()
        return loss, _grads(m)
    return m, drive, lambda: _bufs(m)


@case
def numpy_permutation_indexes_and_from_numpy_bookkeeping():
    m = nn.Linear(3, 1)

    def epoch_step(X, Y, bs):
        perm = np.random.permutation(len(X))
        losses = []
        for start in range(0, len(X), bs):
            idx = perm[start:start + bs]
            xb, yb = X[idx], Y[torch.from_numpy(idx)]
            losses.append(F.mse_loss(m(xb), yb).item())
        w = np.asarray(losses, dtype=np.float32)
        return float(w.mean()), torch.from_numpy(w).float(), np.argmin(w)

    return epoch_step, lambda f, i: f(torch.randn(7, 3), torch.randn(7, 1), 2 + i)



class PeftLikeWrapper(nn.Module):
    """peft/accelerate-style wrapper: unknown attributes are forwarded to the wrapped model."""
    def __init__(self, m):
        super().__init__()
        self.base_model = m

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.base_model, name)

    def forward(self, x):
        return self.base_model(x) * self.scale


@case
def getattr_forwarding_wrapper_reads_wrapped_attribute():
    b = nn.Linear(2, 2)
    b.scale = 2.0
    w = PeftLikeWrapper(b)

    def drive(f, i):
        b.scale = [2.0, 2.0, 3.0][i]
        return f(torch.ones(1, 2) * i)
    return w, drive


@case
def freeze_then_unfreeze_backbone_requires_grad_inside_step():
    m = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    st = {"epoch": 0}

    def step(x):
        m[0].requires_grad_(st["epoch"] != 0)
        opt.zero_grad()
        loss = m(x).sum()
        loss.backward()
        opt.step()
        st["epoch"] += 1
        return ([p.requires_grad for p in m.parameters()],
                sum(p.numel() for p in filter(lambda p: p.requires_grad, m.parameters())))
    return step, lambda f, i: f(torch.randn(1, 2)), lambda: (_params(m), _grads(m), _opt_state(opt))


@case
def inplace_on_expanded_tensor_raises_like_eager():
    def fn(x):
        y = x.expand(3, 2)
        y.add_(1)
        return y
    return fn, lambda f, i: f(torch.ones(1, 2) * i)


@case
def setitem_of_tensor_requiring_grad_into_zeros_grad_flows():
    w = nn.Parameter(torch.ones(2))

    def fn(k):
        x = torch.zeros(3)
        x[0] = w[0] * k
        x[1:3] = w
        x.sum().backward()
        return x, x.requires_grad, type(x.grad_fn).__name__
    return fn, lambda f, i: f(float(i + 1)), lambda: w.grad.clone()


@case
def modified_saved_tensor_backward_raises_version_error():
    m = nn.Linear(2, 2)

    def fn(x, modify):
        z = m(x).sigmoid()
        if modify:
            z.mul_(2)                 # sigmoid's output is saved for backward
        z.sum().backward()
        return z
    return fn, lambda f, i: f(torch.ones(1, 2), i == 1), lambda: _grads(m)


@case
def parameter_list_and_parameter_dict_iteration():
    P = nn.ParameterList([nn.Parameter(torch.ones(2) * k) for k in range(3)])
    D = nn.ParameterDict({"a": nn.Parameter(torch.ones(2)), "b": nn.Parameter(torch.zeros(2))})

    def fn(x):
        s = x
        for p in P:
            s = s + p
        for k, p in D.items():
            s = s * p if k == "a" else s + p
        return s

    def drive(f, i):
        for p in list(P) + list(D.values()):
            p.grad = None
        y = f(torch.ones(2) * i)
        y.sum().backward()
        return y, [p.grad for p in P], [p.grad for p in D.values()]
    return fn, drive


@case
def pad_sequence_and_split_by_python_lengths():
    from torch.nn.utils.rnn import pad_sequence

    def fn(seqs):
        p = pad_sequence(seqs, batch_first=True, padding_value=-1.0)
        lengths = (p != -1).sum(1).tolist()
        return torch.split(p.flatten(), [p.shape[1]] * p.shape[0]), lengths, [s[:n] for s, n in zip(p, lengths)]
    return fn, lambda f, i: f([torch.randn(2 + i), torch.randn(1), torch.randn(3)])


@torch.jit.script
def fused_bias_gelu(x, b):
    y = x + b
    return y * 0.5 * (1.0 + torch.tanh(0.79788456 * y * (1 + 0.044715 * y * y)))


@torch.jit.script
def masked_sum(x, mask: torch.Tensor, dim: int = -1):
    return (x * mask).sum(dim)


@case
def torch_jit_script_helpers_called_from_python():
    b = torch.randn(3)

    def fn(x):
        return fused_bias_gelu(x, b), masked_sum(x, (x > 0).float())
    return fn, lambda f, i: f(torch.randn(2, 3))


@case
def nullcontext_or_no_grad_chosen_by_freeze_flag():
    import contextlib
    m, head = nn.Linear(2, 2), nn.Linear(2, 1)

    def fn(x, freeze):
        ctx = torch.no_grad() if freeze else contextlib.nullcontext()
        with ctx:
            h = m(x)
        return head(h), h.requires_grad

    def drive(f, i):
        m.zero_grad()
        head.zero_grad()
        y, rg = f(torch.ones(1, 2), i == 1)
        y.sum().backward()
        return y, rg, _grads(m), _grads(head)
    return fn, drive


@case
def warnings_logging_and_print_in_forward():
    import contextlib
    import functools
    import io
    import logging
    import warnings
    logger = logging.getLogger("adv2.realmodels")
    logger.propagate = False
    buf = io.StringIO()
    logger.handlers[:] = [logging.StreamHandler(buf)]
    logger.setLevel(logging.INFO)

    @functools.lru_cache(None)
    def warning_once(msg):
        logger.warning(msg)
    m = nn.Linear(2, 2)

    def fn(x):
        if x.shape[0] > 1:
            warnings.warn("batch > 1 is deprecated", FutureWarning)
        warning_once("only once")
        logger.info("forward called with %s", tuple(x.shape))
        print("step", x.shape[0])
        return m(x)

    def drive(f, i):
        out = io.StringIO()
        with warnings.catch_warnings(record=True) as w, contextlib.redirect_stdout(out):
            warnings.simplefilter("always")
            r = f(torch.ones(1 + i % 2, 2)), f(torch.ones(2, 2))
        return r, [str(x.message) for x in w if "dynamo" not in str(x.message)], out.getvalue()

    def observe():
        v = buf.getvalue()
        buf.seek(0)
        buf.truncate()
        return v
    return fn, drive, observe



# the model is compiled (as users do: `model = compile(model)`) and the train step around it too;
# the harness compares the outer step eager vs compiled

@case
def compiled_model_inside_compiled_train_step_with_train_eval_switch():
    import dynamo
    m = nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.5), nn.BatchNorm1d(4), nn.Linear(4, 1))
    cm = dynamo.compile(m)
    opt = torch.optim.SGD(cm.parameters(), lr=0.1, momentum=0.9)

    def step(x, y, train):
        cm.train(train)
        opt.zero_grad()
        loss = F.mse_loss(cm(x), y)
        if train:
            loss.backward()
            opt.step()
        return loss.detach(), cm.training, m.training, m[1].training

    return step, lambda f, i: f(torch.randn(4, 3), torch.randn(4, 1), i != 1), lambda: (_params(m), _bufs(m),
                                                                                          _opt_state(opt))


@case
def compiled_module_wrapper_state_dict_and_indexing():
    import dynamo
    m = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
    cm = dynamo.compile(m)

    def fn(x):
        sd = cm.state_dict()
        return list(sd.keys()), cm[0].weight.shape, len(list(cm.parameters())), cm(x)
    return fn, lambda f, i: f(torch.randn(2, 3))


@case
def deepcopy_of_compiled_module_as_ema():
    import copy

    import dynamo
    m = nn.Linear(3, 3)
    cm = dynamo.compile(m)
    ema = copy.deepcopy(cm)

    def fn(x):
        with torch.no_grad():
            for pe, pm in zip(ema.parameters(), cm.parameters()):
                pe.mul_(0.5).add_(pm, alpha=0.5)
        return ema(x), cm(x)
    return fn, lambda f, i: f(torch.randn(2, 3)), lambda: _params(ema)



class _Cfg:
    def __init__(self):
        self.use_cache, self.output_attentions, self.scale = False, False, 1.0


class _Mode(__import__("enum").Enum):
    TRAIN = 1
    EVAL = 2


class ConfiguredBlock(nn.Module):
    """Config object shared by reference, enum mode, env var switch, global torch flags read in forward."""
    def __init__(self, cfg):
        super().__init__()
        self.config, self.fc, self.mode = cfg, nn.Linear(2, 2), _Mode.TRAIN

    def forward(self, x):
        import os
        y = self.fc(x) * self.config.scale
        if self.mode == _Mode.EVAL:
            y = y * 10
        if os.environ.get("ADV2_DISABLE_FC") == "1":
            y = x
        if torch.is_autocast_cpu_enabled():
            y = y.float() + 100
        if torch.are_deterministic_algorithms_enabled():
            y = y + 1000
        if self.config.output_attentions:
            return y, "attn"
        return (y,)


@case(calls=8)
def config_object_enum_env_var_and_global_flags_changed_between_calls():
    import os
    cfg = _Cfg()
    m = ConfiguredBlock(cfg)

    def drive(f, i):
        x = torch.ones(1, 2)
        if i == 1:
            cfg.scale = 2.0
        if i == 2:
            setattr(cfg, "output_attentions", True)
        if i == 3:
            cfg.__dict__.update(output_attentions=False)
            m.mode = _Mode.EVAL
        if i == 4:
            os.environ["ADV2_DISABLE_FC"] = "1"
            try:
                return f(x)
            finally:
                del os.environ["ADV2_DISABLE_FC"]
        if i == 5:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return f(x)
        if i == 6:
            torch.use_deterministic_algorithms(True)
            try:
                return f(x)
            finally:
                torch.use_deterministic_algorithms(False)
        return f(x)
    return m, drive


class _FailingBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, fail):
        ctx.fail = fail
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        if ctx.fail:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB (simulated)")
        return g, None


@case(calls=5)
def fairseq_style_skip_nonfinite_loss_and_oom_retry_in_backward():
    m = nn.Linear(3, 1)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    stats = {"skipped_nonfinite": 0, "oom": 0, "updates": 0}

    def train_step(x, fail):
        opt.zero_grad()
        loss = _FailingBackward.apply(m(x), fail).mean()
        if not torch.isfinite(loss):
            stats["skipped_nonfinite"] += 1
            return None
        try:
            loss.backward()
        except RuntimeError as e:
            if "out of memory" in str(e):
                stats["oom"] += 1
                opt.zero_grad()
                return "oom"
            raise
        opt.step()
        stats["updates"] += 1
        return loss.detach()

    def drive(f, i):
        x = torch.randn(2, 3)
        if i == 1:
            x[0, 0] = float("inf")
        return f(x, i == 3)
    return train_step, drive, lambda: (_params(m), dict(stats))



class UNetLite(nn.Module):
    def __init__(self, c=2, depth=3):
        super().__init__()
        self.downs = nn.ModuleList(nn.Conv2d(c if i == 0 else 4, 4, 3, padding=1) for i in range(depth))
        self.ups = nn.ModuleList(nn.Conv2d(8, 4, 3, padding=1) for _ in range(depth))
        self.out = nn.Conv2d(4, 1, 1)

    def forward(self, x):
        skips = []
        for down in self.downs:
            x = F.relu(down(x))
            skips.append(x)
            x = F.max_pool2d(x, 2, ceil_mode=True)
        for up, skip in zip(self.ups, reversed(skips)):
            x = F.interpolate(x, size=skip.shape[-2:], mode="nearest")
            x = F.relu(up(torch.cat([x, skip], 1)))
        return self.out(x), [s.shape[-1] for s in skips[::-1]]


@case
def unet_zip_ups_with_reversed_skips_odd_sizes():
    m = UNetLite()

    def drive(f, i):
        m.zero_grad()
        y, widths = f(torch.randn(1, 2, 7 + i, 9 - i))
        y.sum().backward()
        return y, widths, _grads(m)
    return m, drive


@case
def collate_zip_star_batch_generator_pipeline_and_counter():
    import itertools

    def batches(data, bs):
        for i in range(0, len(data), bs):
            yield data[i:i + bs]

    def step(samples, bs):
        losses, counts = [], collections.Counter()
        for n, batch in enumerate(batches(samples, bs), start=1):
            xs, ys = zip(*batch)
            x, y = torch.stack(xs), torch.tensor(ys)
            counts.update(ys)
            losses.append(F.cross_entropy(x, y) * n)
        cyc = list(itertools.islice(itertools.cycle(losses), len(losses) + 1))
        return torch.stack(losses), dict(counts), len(cyc), counts.most_common(1)

    def drive(f, i):
        samples = [(torch.randn(3), k % 3) for k in range(5 + i)]
        return f(samples, 2)
    return step, drive


@case
def heapq_beam_search_over_python_tuples():
    import heapq
    lm = TinyLM()

    @torch.no_grad()
    def search(h0, width, steps):
        heap = [(0.0, [1], h0)]
        for _ in range(steps):
            cand = []
            for score, seq, h in heap:
                logp, h2 = lm(torch.tensor([seq[-1]]), h)
                vals, idx = logp[0].topk(width)
                for v, t in zip(vals.tolist(), idx.tolist()):
                    heapq.heappush(cand, (score - v, seq + [t], h2))
            heap = heapq.nsmallest(width, cand, key=lambda c: c[0])
        return [(round(s, 5), seq) for s, seq, _ in heap]

    return search, lambda f, i: f(torch.randn(1, 4), 2 + i % 2, 2 + i)



class QuantParam(nn.Parameter):
    """bitsandbytes-style Parameter subclass carrying quantization state."""
    def __new__(cls, data, quant_state=None, requires_grad=True):
        p = super().__new__(cls, data, requires_grad)
        p.quant_state = quant_state
        return p


class _Slotted:
    __slots__ = ("scale", "bias")

    def __init__(self):
        self.scale, self.bias = 2.0, 1.0


@case
def parameter_subclass_with_state_and_slots_config():
    lin = nn.Linear(2, 2)
    lin.weight = QuantParam(lin.weight.data, quant_state={"absmax": 1.0})
    sl = _Slotted()

    def fn(x):
        w = lin.weight
        s = w.quant_state["absmax"] if hasattr(w, "quant_state") else 0.0
        return F.linear(x, w * s, lin.bias) * sl.scale + sl.bias, type(w).__name__

    def drive(f, i):
        lin.zero_grad()
        if i == 2:
            lin.weight.quant_state["absmax"] = 3.0
            sl.scale = 0.5
        y, n = f(torch.ones(1, 2) * i)
        y.sum().backward()
        return y, n, lin.weight.grad
    return fn, drive


class Tagged(torch.Tensor):
    calls = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        Tagged.calls.append(getattr(func, "__name__", str(func)))
        return super().__torch_function__(func, types, args, kwargs or {})


@case
def torch_function_subclass_input_through_linear():
    lin = nn.Linear(2, 2)

    def fn(x):
        y = lin(x) + 1
        return type(y).__name__, y.as_subclass(torch.Tensor)

    def drive(f, i):
        Tagged.calls.clear()
        return f(torch.ones(1, 2).as_subclass(Tagged) * i), list(Tagged.calls)
    return fn, drive


class DeviceDtypeProps(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)

    @property
    def device(self):
        return next(self.parameters()).device

    @property
    def dtype(self):
        return next(self.parameters()).dtype

    def forward(self, x):
        x = x.to(self.device, self.dtype)
        try:
            extra = self.missing_attr
        except AttributeError:
            extra = 0.5
        return self.fc(x) + extra


@case
def hf_device_dtype_properties_and_missing_attribute_fallback():
    m = DeviceDtypeProps()

    def drive(f, i):
        if i == 2:
            m.missing_attr = 2.0
        return f(torch.ones(1, 2, dtype=torch.float64) * i)
    return m, drive



class _KwInner(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)

    def forward(self, h, *args, scale=1.0, **kwargs):
        out = self.fc(h) * scale
        if kwargs.get("add") is not None:
            out = out + kwargs["add"]
        return out, sorted(kwargs), len(args)


class HFKwargsModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = _KwInner()

    def forward(self, input_ids=None, attention_mask=None, inputs_embeds=None, labels=None, return_dict=None, **kwargs):
        if input_ids is not None and inputs_embeds is not None:
            raise ValueError("You cannot specify both input_ids and inputs_embeds at the same time")
        h = inputs_embeds if inputs_embeds is not None else input_ids.float()
        if attention_mask is not None:
            h = h * attention_mask
        out, keys, nargs = self.inner(h, *kwargs.pop("extra_args", ()), **kwargs)
        loss = F.mse_loss(out, labels) if labels is not None else None
        return {"loss": loss, "out": out, "keys": keys, "nargs": nargs} if return_dict is not False else (out,)


@case
def hf_forward_called_with_different_keyword_subsets_and_kwargs_passthrough():
    m = HFKwargsModel()
    calls = [
        lambda g: g(torch.ones(1, 2)),
        lambda g: g(input_ids=torch.ones(1, 2), attention_mask=torch.tensor([[1.0, 0.0]])),
        lambda g: g(inputs_embeds=torch.ones(1, 2), labels=torch.zeros(1, 2), scale=2.0),
        lambda g: g(torch.ones(1, 2), None, None, None, False),
        lambda g: g(torch.ones(1, 2), add=torch.ones(2), extra_args=(1, 2)),
        lambda g: g(torch.ones(1, 2), inputs_embeds=torch.ones(1, 2)),
        lambda g: g(**{"input_ids": torch.ones(1, 2), "scale": 3.0, "unused_flag": True}),
    ]

    def drive(f, i):
        out = []
        for c in calls[i::3]:
            try:
                out.append(("ok", c(f)))
            except ValueError as e:
                out.append(("raise", str(e)))
        return out
    return m, drive



XFAIL = {}


@pytest.mark.parametrize("case", params(CASES, XFAIL))
def test_adversarial_aliasing(case):
    check_case(case)


def _compiles_over_calls(fn, make_args, calls=6):
    """Compiles fn and calls it `calls` times (state changes as the program makes it change);
    returns the reasons of the compiles made after the second call."""
    import warnings

    import dynamo
    from capture_harness import Recorder
    dynamo.reset()
    f = dynamo.compile(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f(*make_args())
        f(*make_args())
        with Recorder() as rec:
            for _ in range(calls - 2):
                f(*make_args())
    dynamo.reset()
    return [(r["function"], (r["reason"] or "").splitlines()[0]) for r in rec.compiled]
