"""Adversarial pass, session 6: the fused and aot_eager backends on model code written the way
people write it (HF-style attention with rotary embeddings, RMSNorm and SwiGLU, mixture-of-experts
routing with topk / scatter_add / index_add_, masks with NaN and inf, integer and bool ops, type
promotion, strided / aliased / zero-size / 0-dim inputs, in-place updates of inputs and buffers,
autograd regions, gradients w.r.t. inputs, a second backward, changing shapes, graph breaks in the
middle of a model), inference and training, each case run through both backends and compared call
by call with eager:
- aot_eager: bitwise (results, gradients, side effects; NaN where eager has NaN);
- fused: adversarial_harness.fp_compare, as in test_adversarial_fused.py (floating values within
  the kernels' tolerance of a float64 reference run of the same program, integer / bool / Python
  values exactly);
- exceptions: the same type and message as eager.
Cases failing today are strict xfails (XFAIL below) naming the cause."""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from adversarial_harness import bitwise, fp_check, fp_params, fp_registry, randn

# A case that dynamo cannot compile at all (it warns and runs eagerly) fails instead of passing
# trivially.
pytestmark = pytest.mark.filterwarnings("error:dynamo. could not compile")
CASES, case = fp_registry()
BACKENDS = ("aot_eager", "fused")


# ----------------------------------------------------------------------------------------------
# A LLaMA-style decoder layer: RMSNorm, rotary embeddings, HF masks, SwiGLU

class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d) + 0.1 * torch.randn(d))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32) if dtype != torch.float64 else x
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps)).to(dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class Rotary(nn.Module):
    def __init__(self, dim, max_pos=16, base=10000):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        t = torch.arange(max_pos, dtype=inv_freq.dtype)
        emb = torch.cat((torch.outer(t, inv_freq),) * 2, dim=-1)
        self.register_buffer("cos_cached", emb.cos()[None, None], persistent=False)
        self.register_buffer("sin_cached", emb.sin()[None, None], persistent=False)

    def forward(self, q, k, position_ids):
        cos = self.cos_cached.squeeze(1).squeeze(0)[position_ids].unsqueeze(1)
        sin = self.sin_cached.squeeze(1).squeeze(0)[position_ids].unsqueeze(1)
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


class LlamaAttention(nn.Module):
    def __init__(self, d=32, heads=4, kv_heads=2):
        super().__init__()
        self.h, self.kvh, self.hd = heads, kv_heads, d // heads
        self.q_proj = nn.Linear(d, heads * self.hd, bias=False)
        self.k_proj = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.v_proj = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.o_proj = nn.Linear(heads * self.hd, d, bias=False)
        self.rotary = Rotary(self.hd)

    def forward(self, x, attention_mask, position_ids):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.h, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.kvh, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.kvh, self.hd).transpose(1, 2)
        q, k = self.rotary(q, k, position_ids)
        rep = self.h // self.kvh
        k = k[:, :, None].expand(B, self.kvh, rep, T, self.hd).reshape(B, self.h, T, self.hd)
        v = v[:, :, None].expand(B, self.kvh, rep, T, self.hd).reshape(B, self.h, T, self.hd)
        w = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.hd)
        w = w + attention_mask
        w = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(w, v).transpose(1, 2).reshape(B, T, -1)
        return self.o_proj(out)


class SwiGLU(nn.Module):
    def __init__(self, d=32, hidden=48):
        super().__init__()
        self.gate_proj = nn.Linear(d, hidden, bias=False)
        self.up_proj = nn.Linear(d, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def hf_causal_mask(attention_mask, dtype):
    """HF's 4D additive mask: the causal triangle and the padding, both as finfo.min."""
    B, T = attention_mask.shape
    mn = torch.finfo(dtype).min
    causal = torch.full((T, T), mn, dtype=dtype).triu(1)[None, None]
    pad = (1.0 - attention_mask[:, None, None, :].to(dtype)) * mn
    return (causal + pad).clamp(min=mn)


class LlamaLayer(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(d), RMSNorm(d)
        self.self_attn, self.mlp = LlamaAttention(d), SwiGLU(d)

    def forward(self, x, attention_mask):
        B, T, _ = x.shape
        position_ids = (attention_mask.long().cumsum(-1) - 1).masked_fill(attention_mask == 0, 1)
        mask = hf_causal_mask(attention_mask, x.dtype)
        x = x + self.self_attn(self.input_layernorm(x), mask, position_ids)
        return x + self.mlp(self.post_attention_layernorm(x))


def _left_padded(B, T, i):
    am = torch.ones(B, T, dtype=torch.long)
    am[0, : 1 + i] = 0
    return am


@case()
def llama_layer_left_padding_inference():
    m = LlamaLayer().eval()

    def drive(f, i, c):
        with torch.no_grad():
            return f(c(randn(2, 6, 32)), _left_padded(2, 6, i))
    return m, drive


@case()
def llama_layer_training_grads_of_params_and_input():
    m = LlamaLayer()

    def drive(f, i, c):
        x = c(randn(2, 5, 32)).requires_grad_()
        out = f(x, _left_padded(2, 5, i))
        loss = out.pow(2).mean()
        loss.backward()
        grads = [p.grad.clone() for p in m.parameters()]
        m.zero_grad(set_to_none=True)
        return loss.detach(), x.grad, grads
    return m, drive


# ----------------------------------------------------------------------------------------------
# Mixture of experts routing

class MoE(nn.Module):
    def __init__(self, d=16, experts=4, k=2, hidden=24):
        super().__init__()
        self.k, self.e = k, experts
        self.router = nn.Linear(d, experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(experts, d, hidden) * 0.2)
        self.w2 = nn.Parameter(torch.randn(experts, hidden, d) * 0.2)
        self.register_buffer("load", torch.zeros(experts))

    def forward(self, x):
        B, T, D = x.shape
        h = x.reshape(-1, D)
        probs = self.router(h).softmax(-1)
        weight, sel = probs.topk(self.k, dim=-1)
        weight = weight / weight.sum(-1, keepdim=True)
        counts = torch.zeros(self.e, dtype=x.dtype).scatter_add_(0, sel.reshape(-1), torch.ones(sel.numel(), dtype=x.dtype))
        self.load.mul_(0.9).add_(counts, alpha=0.1)
        out = torch.zeros_like(h)
        tok = torch.arange(h.shape[0]).repeat_interleave(self.k)
        flat = sel.reshape(-1)
        y = torch.bmm(h[tok].unsqueeze(1), self.w1[flat])
        y = torch.bmm(F.gelu(y), self.w2[flat]).squeeze(1) * weight.reshape(-1, 1)
        out.index_add_(0, tok, y)
        aux = (counts / counts.sum() * probs.mean(0)).sum() * self.e
        return out.view(B, T, D), aux, sel


@case()
def moe_topk_routing_inference_updates_load_buffer():
    m = MoE().eval()

    def drive(f, i, c):
        with torch.no_grad():
            return f(c(randn(2, 3 + i, 16)))
    return m, drive, lambda: m.load.clone()


@case()
def moe_topk_routing_training_grads():
    m = MoE()

    def drive(f, i, c):
        out, aux, sel = f(c(randn(2, 4, 16)))
        (out.square().mean() + 0.01 * aux).backward()
        grads = [p.grad.clone() for p in m.parameters()]
        m.zero_grad(set_to_none=True)
        return out.detach(), aux.detach(), sel, grads
    return m, drive, lambda: m.load.clone()


# ----------------------------------------------------------------------------------------------
# NaN, inf and integer ops

@case()
def where_with_nan_and_inf_branches_and_nan_to_num():
    def fn(x):
        safe_log = torch.where(x > 0, x.log(), torch.full_like(x, float("nan")))
        inv = torch.where(x != 0, 1.0 / x, torch.tensor(float("inf")))
        clipped = torch.nan_to_num(safe_log, nan=0.0, posinf=1e4, neginf=-1e4)
        finite = torch.isfinite(inv) & ~torch.isnan(safe_log)
        return safe_log, inv, clipped, finite, torch.where(finite, x, x.new_zeros(())).sum()

    def drive(f, i, c):
        x = c(torch.tensor([-1.0, 0.0, -0.0, 2.0, float("inf"), float("-inf"), float("nan"), 1e-45]))
        return f(x * (i + 1))
    return fn, drive


@case()
def integer_floor_div_mod_shifts_and_masks():
    def fn(a, b):
        q, r = a // b, a % b
        t = torch.div(a, b, rounding_mode="trunc")
        sh = (a << 2) >> 1
        u = (a.abs() >> 1) & 7
        mask = (a % 3 == 0) | (b < 0)
        return q, r, t, sh, u, mask, (a * mask).argmax(), a[mask].sum(), q * r + t

    def drive(f, i, c):
        a = torch.randint(-50, 50, (4, 5))
        b = torch.randint(1, 7, (4, 5)) * torch.where(torch.rand(4, 5) > 0.5, 1, -1)
        return f(a.int() if i else a, b.int() if i else b)
    return fn, drive


@case()
def integer_floor_div_by_a_zero_tensor_raises_as_eager():
    def fn(a, b):
        return (a + 1) // b
    return fn, lambda f, i, c: f(torch.arange(4), torch.tensor([1, 2, 0, 3]) if i else torch.tensor([0, 1, 1, 1]))


@case()
def type_promotion_int_float_double_bool_and_0dim():
    def fn(i32, f32, f64_0d, b, i8):
        return (i32 + f32, i32 * 2.5, f32 + f64_0d, i32 + f64_0d, b + i8, i8 * 1.5, b * 3,
                i32 / 2, i8 // 3, (f32 > 0) + (i32 > 0), torch.tensor(3) * f32)

    def drive(f, i, c):
        return f(torch.randint(-9, 9, (3, 4), dtype=torch.int32), c(randn(3, 4)),
                 torch.tensor(1.5 + i, dtype=torch.float64), torch.rand(3, 4) > 0.5,
                 torch.randint(-100, 100, (4,), dtype=torch.int8))
    return fn, drive


@case()
def float64_parameters_with_float32_input_raises_as_eager():
    m = nn.Linear(4, 3).double()
    return m, lambda f, i, c: f(randn(2, 4))


@case()
def bfloat16_rmsnorm_swiglu_inference():
    m = nn.Sequential(RMSNorm(32), SwiGLU(32)).to(torch.bfloat16).eval()

    def drive(f, i, c):
        with torch.no_grad():
            return f(c(randn(3, 32, dtype=torch.bfloat16)))
    return m, drive


# ----------------------------------------------------------------------------------------------
# Strided, aliased, zero-size and 0-dim inputs; outputs that alias

@case()
def as_strided_expanded_transposed_and_channels_last_inputs():
    def fn(a, e, t, cl, s):
        return (a * 2 + e).sum(0), t.softmax(-1) + s, (cl * cl.mean((2, 3), keepdim=True)).relu(), s * a.amax()

    def drive(f, i, c):
        base = c(randn(40))
        a = base.as_strided((3, 4), (1, 3), 2 + i)
        e = c(randn(1, 4)).expand(3, 4)
        t = c(randn(5, 3)).t()
        cl = c(randn(2, 3, 4, 4)).to(memory_format=torch.channels_last)
        return f(a, e, t, cl, c(torch.tensor(0.5 * i)))
    return fn, drive


@case()
def zero_size_inputs_through_norms_and_masks():
    def fn(x, m):
        y = F.layer_norm(x, x.shape[-1:]) * 2
        return y.masked_fill(m[..., None], 0.0), y.sum(0), x.amax(-1), m.any()

    def drive(f, i, c):
        return f(c(randn(0, 3, 5)), torch.zeros(0, 3, dtype=torch.bool))
    return fn, drive


@case()
def outputs_alias_the_input_and_each_other():
    def fn(x):
        v = x.view(2, -1)
        y = x * 2
        return x, v, y, y, x[0], y.t()

    def drive(f, i, c):
        x = c(randn(2, 3))
        out = f(x)
        facts = (out[0] is x, out[2] is out[3], out[1]._base is x or out[1].data_ptr() == x.data_ptr(),
                 out[4].data_ptr() == x.data_ptr(), out[5].data_ptr() == out[2].data_ptr())
        x.add_(1)   # views of x see it
        return out, facts, out[1].clone(), out[4].clone()
    return fn, drive


@case()
def in_place_updates_of_input_and_buffers_in_a_model():
    class Stats(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("ema", torch.zeros(4))
            self.register_buffer("steps", torch.zeros((), dtype=torch.long))
            self.register_buffer("last", torch.zeros(3, 4))

        def forward(self, x):
            self.steps += 1
            self.ema.mul_(0.9).add_(x.mean(0), alpha=0.1)
            self.last.copy_(x)
            x.add_(self.ema)
            return x.relu_(), self.ema * self.steps
    m = Stats()
    state = {}

    def drive(f, i, c):
        state["x"] = x = c(randn(3, 4))
        return f(x)
    return m, drive, lambda: (m.ema.clone(), m.steps.clone(), m.last.clone(), state["x"].clone())


@case(calls=3)
def batchnorm_train_running_stats_with_gradients():
    m = nn.Sequential(nn.Linear(5, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 2))
    bn = m[1]

    def drive(f, i, c):
        x = c(randn(7, 5) + i)
        out = f(x)
        out.sum().backward()
        grads = [p.grad.clone() for p in m.parameters()]
        m.zero_grad()
        return out.detach(), grads
    return m, drive, lambda: (bn.running_mean.clone(), bn.running_var.clone(), bn.num_batches_tracked.clone())


# ----------------------------------------------------------------------------------------------
# Autograd: regions, partial requires_grad, detach, reduction="none", second backward, grad()

@case()
def no_grad_and_enable_grad_regions_inside_the_function():
    lin = nn.Linear(4, 4)

    def fn(x):
        with torch.no_grad():
            scale = lin(x).abs().mean() + 1
        y = lin(x) / scale
        with torch.no_grad():
            with torch.enable_grad():
                z = (y * x).tanh()
        return y, z, scale, z.requires_grad, scale.requires_grad

    def drive(f, i, c):
        x = c(randn(3, 4)).requires_grad_(i == 0)
        y, z, scale, zr, sr = f(x)
        (y.sum() + z.sum()).backward()
        g = lin.weight.grad.clone()
        lin.zero_grad()
        return y.detach(), z.detach(), scale, zr, sr, g, x.grad
    return fn, drive, None, (lin,)


@case()
def requires_grad_on_some_inputs_only_and_detach():
    def fn(a, b, c_):
        h = (a * b).sin() + c_.detach() * a
        return h.sum(), (h.detach() * c_).sum()

    def drive(f, i, c):
        a = c(randn(3, 3)).requires_grad_()
        b = c(randn(3, 3))
        c_ = c(randn(3, 3)).requires_grad_(i == 1)
        s, t = f(a, b, c_)
        (s + t).backward()
        return s.detach(), t.detach(), a.grad, c_.grad, t.requires_grad
    return fn, drive


@case()
def per_token_loss_reduction_none_then_index():
    m = nn.Linear(6, 5)

    def fn(x, y, keep):
        losses = F.cross_entropy(m(x), y, reduction="none")
        return losses[keep].mean(), losses

    def drive(f, i, c):
        x, y = c(randn(8, 6)), torch.randint(0, 5, (8,))
        keep = torch.tensor([True, False] * 4) if i == 0 else torch.arange(8) % 3 == 0
        loss, per = f(x, y, keep)
        loss.backward()
        g = m.weight.grad.clone()
        m.zero_grad()
        return loss.detach(), per.detach(), g
    return fn, drive, None, (m,)


@case()
def retain_graph_and_a_second_backward_accumulate():
    m = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))

    def drive(f, i, c):
        x = c(randn(5, 4))
        out = f(x).sum()
        out.backward(retain_graph=True)
        g1 = m[0].weight.grad.clone()
        out.backward()
        g2 = m[0].weight.grad.clone()
        m.zero_grad()
        return out.detach(), g1, g2
    return m, drive


@case()
def autograd_grad_with_respect_to_inputs_only():
    # (create_graph=True is refused with a documented error: docs/aot.md, "double backward".)
    m = nn.Sequential(nn.Linear(3, 6), nn.SiLU(), nn.Linear(6, 1))

    def drive(f, i, c):
        x = c(randn(4, 3)).requires_grad_()
        w = c(randn(4, 3)).requires_grad_()
        y = f(x * w).sum()
        gx, gw = torch.autograd.grad(y, (x, w))
        return y.detach(), gx, gw, m[0].weight.grad
    return m, drive


# ----------------------------------------------------------------------------------------------
# Changing shapes and graph breaks in the middle of a model

class BreakingModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)
        self.norm = RMSNorm(8)
        self.seen = []

    def forward(self, x):
        h = F.gelu(self.a(self.norm(x)))
        n = h.abs().amax().item()               # graph break
        self.seen.append(round(n, 3))
        if h.mean() > 0:                        # data-dependent branch
            h = h * 2 + 1
        else:
            h = h.softmax(-1) - 1
        print(end="")                           # graph break
        return self.b(h).relu() + x


@case(calls=3)
def graph_breaks_item_print_and_data_branch_inference():
    m = BreakingModel().eval()

    def drive(f, i, c):
        with torch.no_grad():
            return f(c(randn(3, 8) + [3, -3, 0][i]))
    return m, drive, lambda: list(m.seen)


@case(calls=3)
def graph_breaks_in_the_middle_of_a_training_step():
    m = BreakingModel()

    def drive(f, i, c):
        out = f(c(randn(3, 8) + [3, -3, 0][i]))
        out.mean().backward()
        grads = [p.grad.clone() for p in m.parameters()]
        m.zero_grad()
        return out.detach(), grads
    return m, drive


@case(calls=3)
def changing_shapes_without_mark_dynamic():
    m = nn.Sequential(RMSNorm(8), SwiGLU(8, 12)).eval()

    def drive(f, i, c):
        with torch.no_grad():
            return f(c(randn([2, 5, 1][i], [3, 3, 7][i], 8)))
    return m, drive


@case(calls=3)
def changing_shapes_in_training():
    m = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.GELU(), nn.Linear(8, 2))

    def drive(f, i, c):
        x = c(randn([3, 6, 2][i], 4)).requires_grad_()
        out = f(x)
        out.pow(2).sum().backward()
        grads = [p.grad.clone() for p in m.parameters()]
        m.zero_grad()
        return out.detach(), x.grad, grads
    return m, drive


# ----------------------------------------------------------------------------------------------
# Errors as eager raises them

@case()
def shape_mismatch_in_a_residual_raises_as_eager():
    m = nn.Linear(4, 5)
    return (lambda x: m(x) + x), (lambda f, i, c: f(c(randn(2, 4)))), None, (m,)


@case()
def out_of_range_gather_in_a_router_raises_as_eager():
    def fn(logits, idx):
        return logits.softmax(-1).gather(-1, idx) * 2
    return fn, lambda f, i, c: f(c(randn(3, 4)), torch.tensor([[0], [3], [4 + i]]))


# ----------------------------------------------------------------------------------------------
# Batch 2: edges of the generated code (C++ undefined behaviour, reductions of infinities,
# duplicate indices, in-place side effects of nn modules, autocast, strides)

@case()
def shifts_by_out_of_range_amounts_as_eager():
    def fn(a, s):
        return a >> s, a << s, a >> 70, a << 65, (a.int() >> s.int()), a.to(torch.uint8) << 3
    return fn, lambda f, i, c: f(torch.tensor([-8, 5, 1, -1, 2 ** 40, 7]), torch.tensor([64, 63, -1, 3, 80, 0]))


@case()
def float_to_narrow_integer_casts_of_out_of_range_values():
    def fn(x):
        return x.long(), x.to(torch.uint8), x.to(torch.int8), x.int(), (x * 2).to(torch.int16)
    nan, inf = float("nan"), float("inf")
    return fn, lambda f, i, c: f(torch.tensor([nan, inf, -inf, -1e20, 300.0, -5.0, 255.9, -129.0, 1e10] * 2))


@case()
def logsumexp_and_log_softmax_of_infinite_rows():
    def fn(x):
        return torch.logsumexp(x, -1), x.log_softmax(-1), torch.logsumexp(x, 0), x.softmax(0)
    ninf, inf = float("-inf"), float("inf")
    return fn, lambda f, i, c: f(c(torch.tensor([[ninf, ninf, ninf], [inf, 1.0, 2.0], [ninf, 0.0, 1.0], [3.0, 2.0, 1.0]])))


@case()
def index_put_accumulate_and_augmented_assignment_with_duplicate_indices():
    def fn(x, idx, v):
        a = x.index_put((idx,), v, accumulate=True)
        b = x.clone()
        b[idx] += v
        c_ = x.clone()
        c_[idx] = v
        return a, b, c_
    return fn, lambda f, i, c: f(c(randn(5)), torch.tensor([0, 2, 0, 4, 2, 0]), c(torch.arange(6.0) + 1))


@case()
def scatter_reduce_amax_and_index_copy():
    def fn(src, idx):
        out = src.new_full((4,), -1.0).scatter_reduce(0, idx, src, "amax", include_self=False)
        mean = src.new_zeros(4).scatter_reduce(0, idx, src, "mean", include_self=True)
        cp = src.new_zeros(4, 2).index_copy(0, torch.tensor([3, 1]), src[:4].view(2, 2))
        return out, mean, cp
    return fn, lambda f, i, c: f(c(randn(6)), torch.tensor([0, 1, 0, 3, 1, 0]))


@case()
def embedding_padding_idx_and_max_norm_renormalises_the_weight():
    emb = nn.Embedding(10, 4, padding_idx=0, max_norm=1.0)
    with torch.no_grad():
        emb.weight.mul_(3)

    def drive(f, i, c):
        idx = torch.tensor([[0, 3, 3, 7], [2, 0, 9, 3]])
        out = f(idx)
        out.sum().backward()
        g = emb.weight.grad.clone()
        emb.zero_grad()
        return out.detach(), g
    return emb, drive, lambda: emb.weight.detach().clone()


@case()
def embedding_scale_grad_by_freq_and_padding_idx_backward():
    w = nn.Parameter(torch.randn(8, 3))

    def fn(idx):
        return F.embedding(idx, w, padding_idx=1, scale_grad_by_freq=True).tanh()

    def drive(f, i, c):
        out = f(torch.tensor([1, 2, 2, 5, 1, 2, 7]))
        out.sum().backward()
        g = w.grad.clone()
        w.grad = None
        return out.detach(), g
    return fn, drive


@case()
def weight_clipping_in_place_under_no_grad_inside_the_function():
    m = nn.Linear(4, 3)

    def fn(x):
        with torch.no_grad():
            for p in m.parameters():
                p.clamp_(-0.2, 0.2)
        return m(x).sum(), m.weight

    def drive(f, i, c):
        s, w = f(c(randn(2, 4)))
        s.backward()
        g = m.weight.grad.clone()
        m.zero_grad()
        return s.detach(), g, w is m.weight
    return fn, drive, lambda: [p.detach().clone() for p in m.parameters()], (m,)


@case()
def training_dropout_uses_the_same_random_stream_as_eager():
    m = nn.Sequential(nn.Linear(6, 16), nn.Dropout(0.5), nn.ReLU(), nn.Linear(16, 2), nn.Dropout(0.2))

    def drive(f, i, c):
        x = c(randn(4, 6))
        out = f(x)
        out.sum().backward()
        g = m[0].weight.grad.clone()
        m.zero_grad()
        return out.detach(), g, torch.rand(2)
    return m, drive


@case()
def autocast_bfloat16_linear_and_softmax():
    m = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4)).eval()

    def drive(f, i, c):
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            y = f(c(randn(3, 8)))
        return y, y.dtype
    return m, drive


@case()
def channels_last_output_strides_and_a_view_after_them():
    def fn(x):
        y = (x + 1).relu()
        return y, y.is_contiguous(), y.is_contiguous(memory_format=torch.channels_last), y.stride()

    def drive(f, i, c):
        return f(c(randn(2, 3, 4, 5)).to(memory_format=torch.channels_last))
    return fn, drive


@case()
def view_of_a_channels_last_result_raises_as_eager():
    def fn(x):
        return (x * 2).view(2, -1).sum(1)
    return fn, lambda f, i, c: f(c(randn(2, 3, 4, 5)).to(memory_format=torch.channels_last))


@case()
def transposed_result_strides_are_eager_strides():
    def fn(x):
        y = x.t() * 2
        z = x.permute(1, 0) + y
        return y, z, y.stride(), z.stride(), z.view(-1) if z.is_contiguous() else z.reshape(-1)
    return fn, lambda f, i, c: f(c(randn(3, 4)))


@case()
def masked_fill_with_a_0dim_tensor_value_that_requires_grad():
    def fn(x, val, mask):
        return x.masked_fill(mask, val).pow(2).sum()

    def drive(f, i, c):
        x, val = c(randn(3, 4)).requires_grad_(), c(torch.tensor(0.7)).requires_grad_()
        s = f(x, val, torch.rand(3, 4) > 0.5)
        s.backward()
        return s.detach(), x.grad, val.grad
    return fn, drive


@case()
def cumsum_of_int32_and_bool_and_sums_that_overflow_int32():
    def fn(a, m):
        return a.cumsum(0), m.cumsum(-1), a.sum(), (a * 1000).sum(dtype=torch.int32), m.sum(), a.prod()
    return fn, lambda f, i, c: f(torch.full((5,), 2 ** 30 + i, dtype=torch.int32), torch.rand(2, 5) > 0.3)


@case()
def cross_entropy_label_smoothing_weights_and_ignore_index_backward():
    m = nn.Linear(5, 4)
    w = torch.tensor([1.0, 2.0, 0.5, 1.5])

    def drive(f, i, c):
        x, y = c(randn(6, 5)), torch.tensor([0, 3, -100, 2, 1, -100])
        loss = f(x, y)
        loss.backward()
        g = m.weight.grad.clone()
        m.zero_grad()
        return loss.detach(), g

    def fn(x, y):
        return F.cross_entropy(m(x), y, weight=w.to(x.dtype), label_smoothing=0.1)
    return fn, drive, None, (m,)


# ----------------------------------------------------------------------------------------------
# Batch 3: KV caches, in-place type rules, Python values flowing out of tensors

class KVCacheAttention(nn.Module):
    """HF generation style: the new keys / values are written into preallocated cache buffers at
    the current position, and the attention reads the cache up to it."""

    def __init__(self, d=16, heads=2, max_len=12):
        super().__init__()
        self.h, self.hd = heads, d // heads
        self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.register_buffer("k_cache", torch.zeros(1, heads, max_len, d // heads))
        self.register_buffer("v_cache", torch.zeros(1, heads, max_len, d // heads))

    def forward(self, x, pos):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.h, self.hd).permute(2, 0, 3, 1, 4)
        self.k_cache[:, :, pos:pos + T] = k
        self.v_cache[:, :, pos:pos + T] = v
        keys, vals = self.k_cache[:, :, : pos + T], self.v_cache[:, :, : pos + T]
        s = q @ keys.transpose(-1, -2) / self.hd ** 0.5
        causal = torch.ones(T, pos + T, dtype=torch.bool).tril(pos)
        s = s.masked_fill(~causal, float("-inf"))
        return self.o((s.softmax(-1) @ vals).transpose(1, 2).reshape(B, T, C))


@case(calls=3)
def kv_cache_prefill_then_decode_steps():
    m = KVCacheAttention().eval()
    steps = [(0, 4), (4, 1), (5, 2)]

    def drive(f, i, c):
        pos, T = steps[i]
        with torch.no_grad():
            return f(c(randn(1, T, 16)), pos)
    return m, drive, lambda: (m.k_cache.clone(), m.v_cache.clone())


@case()
def in_place_ops_follow_eager_type_rules():
    def fn(i64, f32, f64, i8, b):
        a = f32.clone().add_(f64)               # stays float32
        n = i64.clone().mul_(3)
        w = i8.clone().add_(100)                # wraps as int8
        k = b.clone().logical_or_(i64 > 0)
        f32.mul_(2).sub_(i64)                   # the input, in place, int operand
        return a, n, w, k, a.dtype, w.dtype

    def drive(f, i, c):
        return f(torch.arange(-3, 3), randn(6), torch.randn(6, dtype=torch.float64),
                 torch.tensor([100, -100, 27, 28, 0, 127], dtype=torch.int8), torch.rand(6) > 0.5)
    return fn, drive


@case()
def in_place_float_into_an_integer_input_raises_as_eager():
    def fn(n, x):
        y = x * 2
        n.add_(y)
        return n
    return fn, lambda f, i, c: f(torch.arange(4), c(randn(4)))


@case()
def in_place_on_a_leaf_that_requires_grad_raises_as_eager():
    def fn(w, x):
        w.mul_(x)
        return w.sum()
    return fn, lambda f, i, c: f(c(randn(3)).requires_grad_(), c(randn(3)))


@case()
def in_place_on_views_of_intermediates_in_training():
    lin = nn.Linear(4, 6)

    def fn(x):
        h = lin(x)
        h[:, :2].mul_(3)
        h.relu_()
        h += x.repeat(1, 2)[:, :6]
        return h.square().mean()

    def drive(f, i, c):
        x = c(randn(5, 4)).requires_grad_()
        loss = f(x)
        loss.backward()
        g = lin.weight.grad.clone()
        lin.zero_grad()
        return loss.detach(), g, x.grad
    return fn, drive, None, (lin,)


@case(calls=3)
def item_value_used_after_the_break_changes_between_calls():
    lin = nn.Linear(4, 4)

    def fn(x):
        h = lin(x).tanh()
        scale = h.abs().max().item()
        return (h / scale).exp(), scale

    def drive(f, i, c):
        with torch.no_grad():
            return f(c(randn(3, 4) * (i + 1)))
    return fn, drive, None, (lin,)


@case(calls=3)
def python_attribute_counter_used_in_the_graph():
    class Warmup(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.step = nn.Linear(4, 4), 0

        def forward(self, x):
            self.step += 1
            frac = min(1.0, self.step / 2)
            return self.lin(x) * frac + x * (1 - frac), self.step
    m = Warmup().eval()

    def drive(f, i, c):
        with torch.no_grad():
            return f(c(randn(2, 4)))
    return m, drive, lambda: m.step


@case()
def cat_with_a_legacy_empty_1d_tensor_and_stack_of_views():
    def fn(x, e):
        return torch.cat([e, x, e], 0) * 2, torch.stack([x[0], x[1].t(), x[2]]).sum(0), torch.cat([x, x], -1).relu()
    return fn, lambda f, i, c: f(c(randn(3, 2, 2)), c(torch.empty(0)))


@case()
def masked_assignment_into_an_input_and_a_global_cache():
    cache = torch.zeros(6)

    def fn(x, mask):
        x[mask] = 0.0
        cache.add_(x)
        return x * 2, cache.sum()

    state = {}

    def drive(f, i, c):
        state["x"] = x = c(randn(6))
        return f(x, x > 0.3)
    return fn, drive, lambda: (cache.clone(), state["x"].clone())


@case()
def max_with_dim_namedtuple_sort_and_topk_ties():
    def fn(x):
        mx = x.max(dim=1)
        srt = x.sort(dim=1, descending=True, stable=True)
        tk = x.topk(2, dim=1)
        return mx.values * 2, mx.indices, srt.indices, srt.values + 1, tk.indices, x.argmin(1)
    return fn, lambda f, i, c: f(c(torch.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0], [5.0, -1.0, 5.0, -1.0]])))


@case()
def pad_reflect_negative_roll_flip_unfold_and_einsum():
    def fn(x):
        a = F.pad(x, (2, 2, 1, 1), mode="reflect")
        b = F.pad(x, (-1, 1, 0, -1))
        r = torch.roll(x, shifts=(1, -2), dims=(2, 3)).flip(-1)
        u = x.unfold(3, 3, 2)
        e = torch.einsum("bchw,bcwk->bchk", x, x.transpose(-1, -2))
        return a * 2, b + 1, r.relu(), u.sum(-1), e
    return fn, lambda f, i, c: f(c(randn(1, 2, 4, 5)))


@case()
def normalize_zero_vectors_and_std_of_one_element():
    def fn(x):
        return F.normalize(x, dim=-1), x[:, :1].std(-1), x.std(-1, unbiased=False), F.cosine_similarity(x, x.flip(0))
    return fn, lambda f, i, c: f(c(torch.cat([torch.zeros(1, 4), randn(2, 4)])))


# ----------------------------------------------------------------------------------------------
# Batch 4: what users do with the outputs of a compiled training graph

@case()
def in_place_on_a_returned_view_of_an_intermediate_then_backward():
    lin = nn.Linear(4, 3)

    def fn(x):
        h = lin(x)
        return h.t(), h[0]

    def drive(f, i, c):
        x = c(randn(2, 4)).requires_grad_()
        ht, h0 = f(x)
        ht.mul_(2)
        (ht.sum() + h0.sum()).backward()
        g = lin.weight.grad.clone()
        lin.zero_grad()
        return ht.detach(), h0.detach(), g, x.grad
    return fn, drive, None, (lin,)


@case()
def in_place_on_a_returned_view_of_an_input_that_requires_grad():
    def fn(x):
        return x.view(-1), (x * 3).sum()

    def drive(f, i, c):
        base = c(randn(2, 3)).requires_grad_()
        x = base * 1
        v, s = f(x)
        v.add_(1)
        (v.square().sum() + s).backward()
        return v.detach(), x.detach(), base.grad
    return fn, drive


@case()
def same_output_twice_input_returned_and_unused_outputs_in_training():
    lin = nn.Linear(3, 3)

    def fn(x, y):
        h = lin(x).sigmoid()
        return h, h, x, (y * 2).exp(), y.shape[0]

    def drive(f, i, c):
        x, y = c(randn(4, 3)).requires_grad_(), c(randn(2)).requires_grad_()
        a, b, xx, unused, n = f(x, y)
        (a.sum() + 2 * b.sum() + xx.sum()).backward()
        g = lin.weight.grad.clone()
        lin.zero_grad()
        return a.detach(), g, x.grad, y.grad, xx is x, a is b, n, unused.requires_grad
    return fn, drive, None, (lin,)


@case()
def retain_grad_on_an_output_and_hooks_on_inputs():
    lin = nn.Linear(3, 2)

    def fn(x):
        return lin(x).tanh()

    def drive(f, i, c):
        x = c(randn(4, 3)).requires_grad_()
        seen = []
        x.register_hook(lambda g: seen.append(g.clone()) or g * 2)
        y = f(x)
        y.retain_grad()
        y.pow(3).sum().backward()
        g = lin.weight.grad.clone()
        lin.zero_grad()
        return y.detach(), y.grad, x.grad, seen, y.is_leaf, y.grad_fn is not None
    return fn, drive, None, (lin,)


@case()
def autograd_grad_allow_unused_and_a_shape_only_input():
    def fn(a, b, c_):
        return (a.exp() * c_.shape[0]).sum() + b.sum() * 0

    def drive(f, i, c):
        a, b, c_ = (c(randn(3)).requires_grad_() for _ in range(3))
        out = f(a, b, c_)
        return torch.autograd.grad(out, (a, b, c_), allow_unused=True)
    return fn, drive


@case()
def non_leaf_inputs_and_detached_outputs_share_memory():
    def fn(x):
        d = x.detach()
        return d, (x * x).sum()

    def drive(f, i, c):
        p = c(randn(4)).requires_grad_()
        x = p * 2
        d, s = f(x)
        d[0] = 100.0
        s.backward()
        return d, x.detach(), p.grad
    return fn, drive


@case()
def input_mutated_in_a_training_graph():
    lin = nn.Linear(4, 2)

    def fn(x, stats):
        stats.mul_(0.5).add_(x.detach().mean(0))
        x.mul_(2)
        return lin(x).square().mean()

    state = {}

    def drive(f, i, c):
        state["x"], state["s"] = x, st = c(randn(3, 4)), c(torch.zeros(4))
        loss = f(x, st)
        loss.backward()
        g = lin.weight.grad.clone()
        lin.zero_grad()
        return loss.detach(), g
    return fn, drive, lambda: (state["x"].clone(), state["s"].clone()), (lin,)


@case()
def grad_of_an_input_only_an_unused_output_reads_stays_none():
    # Found here: the compiled backward was called with zeros for the unused output and returned
    # a zero gradient for `b`, so b.grad became zeros where eager leaves it None.
    def fn(a, b):
        return a.exp(), b * 2

    def drive(f, i, c):
        a, b = c(randn(3)).requires_grad_(), c(randn(3)).requires_grad_()
        x, y = f(a, b)
        (x.sum() if i == 0 else x.sum() + y.sum()).backward()
        return a.grad, b.grad
    return fn, drive


# ----------------------------------------------------------------------------------------------
# Batch 5: reductions over empty dim lists, bool arithmetic errors, 0-dim integer division

@case()
def reductions_over_an_empty_dim_list_and_duplicate_dims():
    def fn(x, n):
        return x.sum(dim=[]), x.mean(dim=[]), n.sum(dim=[]), x.amax(dim=[1, -1]) if i_[0] else x.sum((0, 1), keepdim=True)
    i_ = [0]

    def drive(f, i, c):
        i_[0] = i
        return f(c(randn(3, 4)), torch.arange(12).view(3, 4))
    return fn, drive


@case()
def bool_subtraction_and_negation_raise_as_eager():
    def fn(m, x):
        y = x * 2
        return (m - m if y.shape[0] == 3 else -m), y
    return fn, lambda f, i, c: f(torch.rand(3 - i, 2) > 0.5, c(randn(3 - i, 2)))


@case()
def zero_dim_integer_division_by_zero_and_float_division_by_zero():
    def fn(a, b, x):
        return x // 0, x % 0, torch.fmod(x, 0.0), a // b
    return fn, lambda f, i, c: f(torch.tensor(7), torch.tensor(i), c(randn(4)))


@case()
def clamp_with_broadcast_tensor_bounds_and_integer_true_division():
    def fn(x, lo, hi, a, b):
        return x.clamp(min=lo, max=hi), torch.clamp(x, max=hi), a / b, (a / b).dtype, torch.true_divide(a, 2)
    return fn, lambda f, i, c: f(c(randn(3, 4) * 3), c(randn(4) - 1), c(randn(3, 1) + 1),
                                 torch.arange(1, 13).view(3, 4), torch.tensor([2, -3, 5, 7]))



@case()
def two_backwards_through_different_outputs_of_one_call():
    lin = nn.Linear(3, 3)

    def fn(a, b):
        h = lin(a)
        return h.sigmoid(), (h * b).sum(-1), b.exp()

    def drive(f, i, c):
        a, b = c(randn(2, 3)).requires_grad_(), c(randn(2, 3)).requires_grad_()
        x, y, z = f(a, b)
        x.sum().backward(retain_graph=True)
        ga, gb = a.grad.clone(), b.grad
        (y.sum() + z.sum()).backward(retain_graph=True)
        z.sum().backward()
        g = lin.weight.grad.clone()
        lin.zero_grad()
        return ga, gb, a.grad, b.grad, g
    return fn, drive, None, (lin,)


XFAIL = {}


@pytest.mark.parametrize("name, backend", fp_params(CASES, XFAIL, BACKENDS))
def test_case(name, backend):
    fp_check(CASES, name, backend)


def test_the_bitwise_comparison_catches_a_one_ulp_difference():
    a = torch.tensor([1.0, 2.0])
    assert bitwise(torch.nextafter(a, a + 1), a) is not None
    assert bitwise(torch.tensor([float("nan")]), torch.tensor([float("nan")])) is None
    assert bitwise(a.requires_grad_(), a.detach()) is not None
