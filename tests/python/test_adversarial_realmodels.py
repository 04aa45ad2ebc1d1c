"""Adversarial pass 2 (issue #7): real model and training code, written the way public projects
write it, compared with eager exactly by adversarial_harness (outputs bitwise, gradients, buffers,
optimizer state and Python side effects, over several calls with `torch.manual_seed` reseeded
before each call). This file: transformer blocks (HF style), CNN blocks and GAN/VAE training
steps; test_adversarial_realmodels_loops.py holds unrolled RNNs, decoding loops and losses,
test_adversarial_training.py and test_adversarial_aliasing.py the rest."""
import collections
import dataclasses
import math
import random
from typing import Optional, Tuple

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from adversarial_harness import check_case, params, registry

CASES, case = registry()


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



# ----------------------------------------------------------------------------------------------
# transformers (HF style)
# ----------------------------------------------------------------------------------------------

class GPT2Attention(nn.Module):
    def __init__(self, d=8, heads=2, max_pos=16, p=0.1):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(max_pos, max_pos, dtype=torch.bool)).view(1, 1, max_pos, max_pos),
                             persistent=False)
        self.register_buffer("masked_bias", torch.tensor(-1e4), persistent=False)
        self.n_head, self.head_dim = heads, d // heads
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.attn_dropout = nn.Dropout(p)
        self.resid_dropout = nn.Dropout(p)

    def _split_heads(self, t):
        new_shape = t.size()[:-1] + (self.n_head, self.head_dim)
        return t.view(new_shape).permute(0, 2, 1, 3)

    def _merge_heads(self, t):
        t = t.permute(0, 2, 1, 3).contiguous()
        return t.view(t.size()[:-2] + (self.n_head * self.head_dim,))

    def _attn(self, q, k, v, attention_mask=None):
        w = torch.matmul(q, k.transpose(-1, -2))
        w = w / torch.full([], v.size(-1) ** 0.5, dtype=w.dtype, device=w.device)
        ql, kl = q.size(-2), k.size(-2)
        causal = self.bias[:, :, kl - ql:kl, :kl]
        mask_value = torch.finfo(w.dtype).min
        mask_value = torch.full([], mask_value, dtype=w.dtype).to(w.device)
        w = torch.where(causal, w.to(w.dtype), mask_value)
        if attention_mask is not None:
            w = w + attention_mask
        w = nn.functional.softmax(w, dim=-1)
        w = self.attn_dropout(w.type(v.dtype))
        return torch.matmul(w, v), w

    def forward(self, hidden, layer_past=None, attention_mask=None, use_cache=False, output_attentions=False):
        q, k, v = self.c_attn(hidden).split(self.n_head * self.head_dim, dim=2)
        q, k, v = self._split_heads(q), self._split_heads(k), self._split_heads(v)
        if layer_past is not None:
            pk, pv = layer_past
            k = torch.cat((pk, k), dim=-2)
            v = torch.cat((pv, v), dim=-2)
        present = (k, v) if use_cache is True else None
        a, w = self._attn(q, k, v, attention_mask)
        a = self.resid_dropout(self.c_proj(self._merge_heads(a)))
        outputs = (a, present)
        if output_attentions:
            outputs += (w,)
        return outputs


@case
def gpt2_attention_incremental_decoding_with_dropout():
    m = GPT2Attention()
    prompt = torch.randn(2, 3, 8)
    steps = [torch.randn(2, 1, 8) for _ in range(3)]

    def drive(f, i):
        m.train(i != 1)
        out, present = f(prompt, use_cache=True)[:2]
        outs = [out]
        for s in steps[:i + 1]:
            mask = torch.zeros(2, 1, 1, present[0].size(-2) + 1)
            mask[0, ..., 0] = torch.finfo(torch.float32).min
            o, present, w = f(s, layer_past=present, attention_mask=mask, use_cache=True, output_attentions=True)
            outs += [o, w]
        return outs, present
    return m, drive


def _expand_mask(mask, dtype, tgt_len=None):
    bsz, src_len = mask.size()
    tgt_len = tgt_len if tgt_len is not None else src_len
    expanded = mask[:, None, None, :].expand(bsz, 1, tgt_len, src_len).to(dtype)
    inverted = 1.0 - expanded
    return inverted.masked_fill(inverted.to(torch.bool), torch.finfo(dtype).min)


class BertLayer(nn.Module):
    def __init__(self, d=8, heads=2):
        super().__init__()
        self.h, self.dh = heads, d // heads
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.o = nn.Linear(d, d)
        self.ln1 = nn.LayerNorm(d, eps=1e-12)
        self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d), nn.Dropout(0.1))
        self.ln2 = nn.LayerNorm(d, eps=1e-12)
        self.drop = nn.Dropout(0.1)

    def t(self, x):
        b, s, _ = x.shape
        return x.view(b, s, self.h, self.dh).transpose(1, 2)

    def forward(self, x, ext_mask, head_mask=None):
        q, k, v = self.t(self.q(x)), self.t(self.k(x)), self.t(self.v(x))
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(self.dh)
        scores = scores + ext_mask
        probs = self.drop(scores.softmax(-1))
        if head_mask is not None:
            probs = probs * head_mask
        ctx = torch.einsum("bhqk,bhkd->bhqd", probs, v).transpose(1, 2).reshape(x.shape)
        x = self.ln1(x + self.drop(self.o(ctx)))
        return self.ln2(x + self.ff(x)), probs


class BertEncoder(nn.Module):
    def __init__(self, n=2, d=8, vocab=20):
        super().__init__()
        self.emb = nn.Embedding(vocab, d, padding_idx=0)
        self.pos = nn.Embedding(16, d)
        self.register_buffer("position_ids", torch.arange(16).expand((1, -1)))
        self.layer = nn.ModuleList(BertLayer(d) for _ in range(n))
        self.gradient_checkpointing = False

    def forward(self, input_ids, attention_mask=None, output_hidden_states=False, output_attentions=False,
                return_dict=True):
        seq = input_ids.shape[1]
        if attention_mask is None:
            attention_mask = torch.ones(input_ids.shape)
        pos = self.position_ids[:, :seq]
        h = self.emb(input_ids) + self.pos(pos)
        ext = _expand_mask(attention_mask, h.dtype)
        all_hidden = () if output_hidden_states else None
        all_attn = () if output_attentions else None
        for i, layer in enumerate(self.layer):
            if output_hidden_states:
                all_hidden = all_hidden + (h,)
            h, a = layer(h, ext)
            if output_attentions:
                all_attn = all_attn + (a,)
        if not return_dict:
            return tuple(v for v in [h, all_hidden, all_attn] if v is not None)
        return {"last_hidden_state": h, "hidden_states": all_hidden, "attentions": all_attn}


@case
def bert_encoder_expand_mask_hidden_states_and_backward():
    m = BertEncoder()
    ids = torch.tensor([[5, 6, 7, 0], [3, 4, 0, 0]])

    def drive(f, i):
        m.zero_grad()
        mask = (ids != 0).long()
        out = f(ids, mask, output_hidden_states=i > 0, output_attentions=i == 2, return_dict=i != 1)
        h = out["last_hidden_state"] if isinstance(out, dict) else out[0]
        h.sum().backward()
        return out, _grads(m)
    return m, drive


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class LlamaRotaryEmbedding(nn.Module):
    def __init__(self, dim, max_pos=4, base=10000):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq)
        self._set_cos_sin_cache(max_pos)

    def _set_cos_sin_cache(self, seq_len):
        self.max_seq_len_cached = seq_len
        t = torch.arange(self.max_seq_len_cached, dtype=self.inv_freq.dtype)
        freqs = torch.einsum("i,j->ij", t, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos()[None, None, :, :], persistent=False)
        self.register_buffer("sin_cached", emb.sin()[None, None, :, :], persistent=False)

    def forward(self, x, seq_len=None):
        if seq_len > self.max_seq_len_cached:
            self._set_cos_sin_cache(seq_len)
        return self.cos_cached[:, :, :seq_len, ...].to(dtype=x.dtype), self.sin_cached[:, :, :seq_len, ...].to(dtype=x.dtype)


class LlamaAttention(nn.Module):
    def __init__(self, d=8, heads=2):
        super().__init__()
        self.h, self.dh = heads, d // heads
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)
        self.rotary_emb = LlamaRotaryEmbedding(self.dh)

    def forward(self, x, position_ids, past_key_value=None, use_cache=True):
        bsz, q_len, _ = x.size()
        q = self.q_proj(x).view(bsz, q_len, self.h, self.dh).transpose(1, 2)
        k = self.k_proj(x).view(bsz, q_len, self.h, self.dh).transpose(1, 2)
        v = self.v_proj(x).view(bsz, q_len, self.h, self.dh).transpose(1, 2)
        kv_seq_len = k.shape[-2]
        if past_key_value is not None:
            kv_seq_len += past_key_value[0].shape[-2]
        cos, sin = self.rotary_emb(v, seq_len=kv_seq_len)
        cos = cos.squeeze(1).squeeze(0)[position_ids].unsqueeze(1)
        sin = sin.squeeze(1).squeeze(0)[position_ids].unsqueeze(1)
        q = (q * cos) + (rotate_half(q) * sin)
        k = (k * cos) + (rotate_half(k) * sin)
        if past_key_value is not None:
            k = torch.cat([past_key_value[0], k], dim=2)
            v = torch.cat([past_key_value[1], v], dim=2)
        past_key_value = (k, v) if use_cache else None
        w = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.dh)
        if q_len > 1:
            causal = torch.full((q_len, kv_seq_len), float("-inf")).triu(1 + kv_seq_len - q_len)
            w = w + causal
        w = nn.functional.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
        o = torch.matmul(w, v).transpose(1, 2).reshape(bsz, q_len, -1)
        return self.o_proj(o), past_key_value


@case
def llama_rotary_cache_grows_past_cached_length():
    m = LlamaAttention()

    def drive(f, i):
        x = torch.randn(1, 3, 8)
        out, past = f(x, torch.arange(3)[None])
        outs = [out]
        for t in range(3, 3 + i + 1):                    # t >= 4 regrows the cos/sin cache buffers
            out, past = f(torch.randn(1, 1, 8), torch.tensor([[t]]), past_key_value=past)
            outs.append(out)
        return outs, past, m.rotary_emb.max_seq_len_cached
    return m, drive, lambda: _bufs(m)


class T5Attention(nn.Module):
    def __init__(self, heads=2, buckets=8, max_distance=16, bidirectional=True, has_bias=True):
        super().__init__()
        self.n_heads, self.buckets, self.max_distance = heads, buckets, max_distance
        self.is_decoder = not bidirectional
        self.has_relative_attention_bias = has_bias
        self.relative_attention_bias = nn.Embedding(buckets, heads)

    @staticmethod
    def _relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
        relative_buckets = 0
        if bidirectional:
            num_buckets //= 2
            relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
            relative_position = torch.abs(relative_position)
        else:
            relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
        max_exact = num_buckets // 2
        is_small = relative_position < max_exact
        rel_if_large = max_exact + (
            torch.log(relative_position.float() / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
        ).to(torch.long)
        rel_if_large = torch.min(rel_if_large, torch.full_like(rel_if_large, num_buckets - 1))
        relative_buckets += torch.where(is_small, relative_position, rel_if_large)
        return relative_buckets

    def compute_bias(self, query_length, key_length):
        context_position = torch.arange(query_length, dtype=torch.long)[:, None]
        memory_position = torch.arange(key_length, dtype=torch.long)[None, :]
        relative_position = memory_position - context_position
        bucket = self._relative_position_bucket(relative_position, bidirectional=(not self.is_decoder),
                                                num_buckets=self.buckets, max_distance=self.max_distance)
        values = self.relative_attention_bias(bucket)
        return values.permute([2, 0, 1]).unsqueeze(0)

    def forward(self, scores, position_bias=None):
        if position_bias is None:
            if not self.has_relative_attention_bias:
                position_bias = torch.zeros((1, self.n_heads, scores.shape[-2], scores.shape[-1]), requires_grad=self.training)
            else:
                position_bias = self.compute_bias(scores.shape[-2], scores.shape[-1])
        return (scores + position_bias).softmax(-1), position_bias


@case
def t5_relative_position_bias_buckets():
    enc, dec = T5Attention(), T5Attention(bidirectional=False)

    def fn(scores):
        a, pb = enc(scores)
        b, _ = enc(scores, position_bias=pb)
        c, pb2 = dec(scores)
        return a, b, c, pb2
    shapes = [(1, 2, 5, 5), (1, 2, 7, 7), (1, 2, 3, 9)]

    def drive(f, i):
        enc.zero_grad()
        dec.zero_grad()
        out = f(torch.randn(shapes[i]))
        sum(o.sum() for o in out).backward()
        return out, enc.relative_attention_bias.weight.grad, dec.relative_attention_bias.weight.grad
    return fn, drive


def new_gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def quick_gelu(x):
    return x * torch.sigmoid(1.702 * x)


ACT2FN = {"gelu": F.gelu, "gelu_new": new_gelu, "quick_gelu": quick_gelu, "relu": F.relu,
          "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": nn.SiLU(), "gelu_mod": nn.GELU("tanh")}


class MLPWithActName(nn.Module):
    def __init__(self, act="gelu"):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, 8), nn.Linear(8, 4)
        self.act_name = act

    def forward(self, x):
        act = ACT2FN[self.act_name]
        return self.fc2(act(self.fc1(x)))


@case
def gelu_variants_selected_by_config_string():
    m = MLPWithActName()
    names = list(ACT2FN)

    def drive(f, i):
        outs = []
        for n in names[i::3]:
            m.act_name = n
            m.zero_grad()
            y = f(torch.randn(3, 4))
            y.pow(2).mean().backward()
            outs.append((n, y, m.fc1.weight.grad.clone()))
        return outs
    return m, drive


class T5LayerNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d) + torch.randn(d) * 0.1)
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        if self.weight.dtype in [torch.float16, torch.bfloat16]:
            hidden_states = hidden_states.to(self.weight.dtype)
        return self.weight * hidden_states


class ManualLayerNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.g, self.b, self.eps = nn.Parameter(torch.randn(d)), nn.Parameter(torch.randn(d)), eps

    def forward(self, x):
        u = x.mean(-1, keepdim=True)
        s = (x - u).pow(2).mean(-1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.eps)
        return self.g * x + self.b


@case
def rmsnorm_and_manual_layernorm_dtype_switch():
    rms, ln = T5LayerNorm(6), ManualLayerNorm(6)

    def fn(x):
        return rms(x), ln(x), F.layer_norm(x, (6,), ln.g, ln.b, 1e-5)

    def drive(f, i):
        if i == 2:
            rms.to(torch.bfloat16)
        x = torch.randn(2, 6)
        out = f(x)
        (out[0].float().sum() + out[1].sum()).backward()
        return out, rms.weight.grad, ln.g.grad
    return fn, drive


class ClipTextPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.ln = nn.LayerNorm(4)
        self.proj = nn.Linear(4, 3, bias=False)
        self.logit_scale = nn.Parameter(torch.ones([]) * np.log(1 / 0.07))

    def forward(self, input_ids, img):
        x = self.ln(self.emb(input_ids))
        pooled = x[torch.arange(x.shape[0]), input_ids.to(dtype=torch.int, device=x.device).argmax(dim=-1)]
        t = self.proj(pooled)
        t = t / t.norm(p=2, dim=-1, keepdim=True)
        img = img / img.norm(dim=-1, keepdim=True)
        logit_scale = self.logit_scale.exp()
        logits = torch.matmul(t, img.t()) * logit_scale
        labels = torch.arange(len(logits))
        loss = (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2.0
        return loss, logits


@case
def clip_eos_pooling_and_contrastive_loss():
    m = ClipTextPool()

    def drive(f, i):
        m.zero_grad()
        ids = torch.randint(1, 9, (3, 5))
        ids[:, -1 - i] = 9
        loss, logits = f(ids, torch.randn(3, 3))
        loss.backward()
        with torch.no_grad():
            m.logit_scale.clamp_(0, 4.6052)
        return loss, logits, _grads(m), m.logit_scale.detach().clone()
    return m, drive


class LayerDropEncoder(nn.Module):
    def __init__(self, n=4, p=0.5):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(n))
        self.layerdrop = p
        self.skipped = []

    def forward(self, x):
        for idx, layer in enumerate(self.layers):
            dropout_probability = torch.rand([])
            if self.training and (dropout_probability < self.layerdrop):
                self.skipped.append(idx)
                continue
            x = torch.tanh(layer(x))
        return x


@case
def layerdrop_with_torch_rand_scalar():
    m = LayerDropEncoder()

    def drive(f, i):
        m.train(i != 2)
        a = f(torch.randn(2, 4))
        b = f(torch.randn(2, 4))                        # the RNG stream continues (no reseed)
        return a, b
    return m, drive, lambda: list(m.skipped)


class HFLayerDropPyRandom(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))

    def forward(self, x):
        hidden = ()
        for layer in self.layers:
            dropout_probability = random.uniform(0, 1)
            if self.training and dropout_probability < 0.4:
                layer_outputs = (None,)
            else:
                layer_outputs = (layer(x),)
                x = layer_outputs[0]
            hidden = hidden + (layer_outputs[0],)
        return x, hidden


@case
def layerdrop_with_python_random_uniform():
    m = HFLayerDropPyRandom()
    return m, lambda f, i: (f(torch.randn(1, 4)), f(torch.randn(1, 4)))


@dataclasses.dataclass
class Seq2SeqOutput:
    loss: Optional[torch.Tensor] = None
    logits: torch.Tensor = None
    past_key_values: Optional[Tuple[Tuple[torch.Tensor]]] = None
    aux: dict = dataclasses.field(default_factory=dict)


class TinySeq2Seq(nn.Module):
    def __init__(self, vocab=11, d=6):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(nn.Linear(d, d) for _ in range(2))
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.emb.weight                          # tied

    def forward(self, input_ids, labels=None, past_key_values=None, use_cache=None):
        h = self.emb(input_ids)
        presents = [] if use_cache else None
        for i, layer in enumerate(self.layers):
            past = past_key_values[i] if past_key_values is not None else None
            kv = layer(h)
            if past is not None:
                kv = torch.cat([past[0], kv], 1)
            h = h + kv[:, -h.shape[1]:].relu()
            if use_cache:
                presents.append((kv, kv * 2))
        logits = self.lm_head(h)
        loss = None
        if labels is not None:
            shift_logits = logits[..., :-1, :].contiguous()
            shift_labels = labels[..., 1:].contiguous()
            loss = F.cross_entropy(shift_logits.view(-1, shift_logits.size(-1)), shift_labels.view(-1), ignore_index=-100)
        return Seq2SeqOutput(loss=loss, logits=logits, past_key_values=tuple(presents) if use_cache else None,
                             aux={"n_layers": len(self.layers)})


@case
def dataclass_output_with_list_cache_and_shifted_lm_loss():
    m = TinySeq2Seq()

    def drive(f, i):
        m.zero_grad()
        ids = torch.randint(0, 11, (2, 4))
        labels = ids.clone()
        labels[0, 2:] = -100
        out = f(ids, labels=labels if i != 1 else None, use_cache=i > 0)
        if out.loss is not None:
            out.loss.backward()
        nxt = f(ids[:, -1:], past_key_values=out.past_key_values, use_cache=True) if out.past_key_values else None
        return out, nxt, m.emb.weight.grad
    return m, drive


class ScriptableBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.drop_path = 0.2

    def forward(self, x):
        if torch.jit.is_scripting() or torch.jit.is_tracing():
            return self.fc(x)
        torch._assert(x.dim() == 2, "expected 2D input")
        if self.training and self.drop_path > 0:
            keep = torch.empty(x.shape[0], 1).bernoulli_(1 - self.drop_path)
            return x + self.fc(x) * keep / (1 - self.drop_path)
        return x + self.fc(x)


@case
def jit_is_scripting_and_torch_assert():
    m = ScriptableBlock()

    def drive(f, i):
        m.train(i < 2)
        return f(torch.randn(4, 3)), f(torch.randn(4, 3))
    return m, drive


class MoEGate(nn.Module):
    def __init__(self, d=4, experts=4, k=2):
        super().__init__()
        self.gate = nn.Linear(d, experts, bias=False)
        self.experts = nn.ModuleList(nn.Linear(d, d) for _ in range(experts))
        self.k = k
        self.register_buffer("expert_counts", torch.zeros(experts, dtype=torch.long))

    def forward(self, x):
        logits = self.gate(x)
        probs = logits.softmax(-1)
        topv, topi = probs.topk(self.k, dim=-1)
        topv = topv / topv.sum(-1, keepdim=True)
        with torch.no_grad():
            self.expert_counts += torch.bincount(topi.flatten(), minlength=len(self.experts))
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            idx, slot = torch.where(topi == e)
            if idx.numel() == 0:
                continue
            out.index_add_(0, idx, expert(x[idx]) * topv[idx, slot, None])
        aux = (probs.mean(0) * F.one_hot(topi[:, 0], len(self.experts)).float().mean(0)).sum() * len(self.experts)
        return out, aux


@case
def moe_topk_routing_index_add_and_aux_loss():
    m = MoEGate()

    def drive(f, i):
        m.zero_grad()
        out, aux = f(torch.randn(5 + i, 4))
        (out.sum() + aux).backward()
        return out, aux, _grads(m)
    return m, drive, lambda: m.expert_counts.clone()


def alibi_slopes(n):
    def pow2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]
    if math.log2(n).is_integer():
        return pow2(n)
    c = 2 ** math.floor(math.log2(n))
    return pow2(c) + alibi_slopes(2 * c)[0::2][: n - c]


@case
def alibi_bias_from_python_slopes_and_masked_fill_inf():
    def fn(q, k, pad_mask):
        n_heads, L = q.shape[1], q.shape[2]
        slopes = torch.tensor(alibi_slopes(n_heads))
        pos = torch.arange(L)
        bias = (pos[None, :] - pos[:, None]).abs().neg()[None] * slopes[:, None, None]
        s = q @ k.transpose(-1, -2) + bias
        s = s.masked_fill(~pad_mask[:, None, None, :], float("-inf"))
        return s.softmax(-1)                      # fully masked rows give nan in both
    shapes = [(1, 4, 3, 2), (2, 3, 4, 2), (1, 6, 2, 2)]

    def drive(f, i):
        q = torch.randn(shapes[i])
        mask = torch.rand(shapes[i][0], shapes[i][2]) > 0.3
        mask[0] = False if i == 2 else mask[0]
        return f(q, torch.randn(shapes[i]), mask)
    return fn, drive


# ----------------------------------------------------------------------------------------------
# CNN blocks (timm / torchvision style)
# ----------------------------------------------------------------------------------------------

def drop_path(x, drop_prob: float = 0.0, training: bool = False, scale_by_keep: bool = True):
    if drop_prob == 0.0 or not training:
        return x
    keep_prob = 1 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)
    random_tensor = x.new_empty(shape).bernoulli_(keep_prob)
    if keep_prob > 0.0 and scale_by_keep:
        random_tensor.div_(keep_prob)
    return x * random_tensor


def drop_path_rand(x, drop_prob, training):
    if drop_prob == 0.0 or not training:
        return x
    keep_prob = 1 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)
    random_tensor = keep_prob + torch.rand(shape, dtype=x.dtype, device=x.device)
    random_tensor.floor_()
    return x.div(keep_prob) * random_tensor


class SqueezeExcite(nn.Module):
    def __init__(self, c, rd=4):
        super().__init__()
        self.fc1 = nn.Conv2d(c, rd, 1)
        self.fc2 = nn.Conv2d(rd, c, 1)

    def forward(self, x):
        s = x.mean((2, 3), keepdim=True)
        s = self.fc2(F.relu(self.fc1(s), inplace=True))
        return x * s.sigmoid()


class MBConv(nn.Module):
    def __init__(self, c=4, drop=0.3, use_rand=False):
        super().__init__()
        self.conv_dw = nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.act = nn.SiLU(inplace=True)
        self.se = SqueezeExcite(c)
        self.conv_pw = nn.Conv2d(c, c, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        self.drop_path_rate = drop
        self.use_rand = use_rand

    def forward(self, x):
        shortcut = x
        x = self.act(self.bn1(self.conv_dw(x)))
        x = self.se(x)
        x = self.bn2(self.conv_pw(x))
        dp = drop_path_rand if self.use_rand else drop_path
        return dp(x, self.drop_path_rate, self.training) + shortcut


@case
def mbconv_se_bn_inplace_silu_drop_path_bernoulli():
    m = nn.Sequential(MBConv(), MBConv(drop=0.5))

    def drive(f, i):
        m.train(i != 1)
        m.zero_grad()
        y = f(torch.randn(3, 4, 5, 5))
        y.mean().backward()
        return y, _grads(m)
    return m, drive, lambda: _bufs(m)


@case
def drop_path_torch_rand_floor_variant():
    m = nn.Sequential(MBConv(use_rand=True), MBConv(drop=0.6, use_rand=True))

    def drive(f, i):
        m.zero_grad()
        y = f(torch.randn(4, 4, 3, 3))
        y2 = f(torch.randn(4, 4, 3, 3))
        (y + y2).sum().backward()
        return y, y2, _grads(m)
    return m, drive, lambda: _bufs(m)


class CBAM(nn.Module):
    def __init__(self, c=4):
        super().__init__()
        self.mlp = nn.Sequential(nn.Flatten(), nn.Linear(c, c // 2), nn.ReLU(), nn.Linear(c // 2, c))
        self.spatial = nn.Conv2d(2, 1, 7, padding=3)

    def forward(self, x):
        avg = F.avg_pool2d(x, (x.size(2), x.size(3)), stride=(x.size(2), x.size(3)))
        mx = F.max_pool2d(x, (x.size(2), x.size(3)), stride=(x.size(2), x.size(3)))
        ca = torch.sigmoid(self.mlp(avg) + self.mlp(mx)).unsqueeze(2).unsqueeze(3).expand_as(x)
        x = x * ca
        pooled = torch.cat((torch.max(x, 1)[0].unsqueeze(1), torch.mean(x, 1).unsqueeze(1)), dim=1)
        return x * torch.sigmoid(self.spatial(pooled))


@case
def cbam_channel_and_spatial_attention_changing_sizes():
    m = CBAM()
    sizes = [(2, 4, 6, 6), (1, 4, 5, 7), (2, 4, 6, 6)]

    def drive(f, i):
        m.zero_grad()
        y = f(torch.randn(sizes[i]))
        y.sum().backward()
        return y, _grads(m)
    return m, drive


class STN(nn.Module):
    def __init__(self):
        super().__init__()
        self.loc = nn.Linear(2 * 6 * 6, 6)
        with torch.no_grad():
            self.loc.weight.mul_(0.01)
            self.loc.bias.copy_(torch.tensor([1, 0, 0, 0, 1, 0], dtype=torch.float))

    def forward(self, x, mode="bilinear"):
        theta = self.loc(x.flatten(1)).view(-1, 2, 3)
        grid = F.affine_grid(theta, x.size(), align_corners=False)
        y = F.grid_sample(x, grid, mode=mode, padding_mode="border", align_corners=False)
        y = F.pad(y, (1, 2, 0, 1), mode="reflect")
        return F.interpolate(y, scale_factor=1.5, mode="bilinear", align_corners=True)


@case
def spatial_transformer_affine_grid_sample_pad_interpolate():
    m = STN()

    def drive(f, i):
        m.zero_grad()
        y = f(torch.randn(2, 2, 6, 6), mode=["bilinear", "nearest", "bilinear"][i])
        y.sum().backward()
        return y, _grads(m)
    return m, drive


class FPN(nn.Module):
    def __init__(self, chans=(2, 4, 8), out=4):
        super().__init__()
        self.lateral = nn.ModuleList(nn.Conv2d(c, out, 1) for c in chans)
        self.smooth = nn.ModuleDict({f"p{i}": nn.Conv2d(out, out, 3, padding=1) for i in range(len(chans))})

    def forward(self, feats):
        lat = [l(f) for l, f in zip(self.lateral, feats)]
        results = [lat[-1]]
        for idx in range(len(lat) - 2, -1, -1):
            top = F.interpolate(results[0], size=lat[idx].shape[-2:], mode="nearest")
            results.insert(0, lat[idx] + top)
        return collections.OrderedDict((k, self.smooth[k](r)) for k, r in zip([f"p{i}" for i in range(len(results))], results))


@case
def fpn_top_down_interpolate_to_odd_sizes_ordered_dict():
    m = FPN()
    sizes = [(9, 5, 3), (8, 4, 2), (7, 4, 2)]

    def drive(f, i):
        m.zero_grad()
        feats = [torch.randn(1, c, s, s + 1) for c, s in zip((2, 4, 8), sizes[i])]
        out = f(feats)
        sum(v.sum() for v in out.values()).backward()
        return out, _grads(m)
    return m, drive


def channel_shuffle(x, groups):
    b, c, h, w = x.size()
    x = x.view(b, groups, c // groups, h, w)
    x = torch.transpose(x, 1, 2).contiguous()
    return x.view(b, -1, h, w)


class ShuffleUnit(nn.Module):
    def __init__(self, c=4):
        super().__init__()
        self.branch = nn.Sequential(nn.Conv2d(c // 2, c // 2, 1), nn.BatchNorm2d(c // 2), nn.ReLU(inplace=True),
                                    nn.Conv2d(c // 2, c // 2, 3, padding=1, groups=c // 2))

    def forward(self, x):
        x1, x2 = x.chunk(2, dim=1)
        out = torch.cat((x1, self.branch(x2)), dim=1)
        return channel_shuffle(out, 2)


@case
def shufflenet_chunk_concat_channel_shuffle_bn_train():
    m = nn.Sequential(ShuffleUnit(), ShuffleUnit())

    def drive(f, i):
        m.zero_grad()
        y = f(torch.randn(2, 4, 4, 4))
        y.sum().backward()
        return y, _grads(m)
    return m, drive, lambda: _bufs(m)


class WSConv2d(nn.Conv2d):
    def forward(self, x):
        w = self.weight
        mean = w.mean(dim=(1, 2, 3), keepdim=True)
        var = w.var(dim=(1, 2, 3), keepdim=True, unbiased=False)
        w = (w - mean) / torch.sqrt(var + 1e-5)
        return F.conv2d(x, w, self.bias, self.stride, self.padding, self.dilation, self.groups)


@case
def weight_standardized_conv_groupnorm():
    m = nn.Sequential(WSConv2d(3, 4, 3, padding=1), nn.GroupNorm(2, 4), nn.ReLU())

    def drive(f, i):
        m.zero_grad()
        y = f(torch.randn(2, 3, 4 + i, 4))
        y.sum().backward()
        return y, _grads(m)
    return m, drive


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return F.relu(out)


@case
def resnet_train_step_sgd_nesterov_weight_decay_bn_buffers():
    m = nn.Sequential(BasicBlock(3, 4, 2), BasicBlock(4, 4), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3))
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4)

    def step(x, y):
        m.train()
        opt.zero_grad()
        out = m(x)
        loss = F.cross_entropy(out, y, label_smoothing=0.1)
        loss.backward()
        opt.step()
        acc = (out.argmax(1) == y).float().mean()
        return loss.item(), acc.item()

    def drive(f, i):
        return f(torch.randn(4, 3, 6, 6), torch.randint(0, 3, (4,)))
    return step, drive, lambda: (_params(m), _bufs(m), _opt_state(opt))


# ----------------------------------------------------------------------------------------------
# GAN / VAE training steps
# ----------------------------------------------------------------------------------------------

class VAE(nn.Module):
    def __init__(self, d=6, z=2):
        super().__init__()
        self.enc = nn.Linear(d, 8)
        self.mu, self.logvar = nn.Linear(8, z), nn.Linear(8, z)
        self.dec = nn.Sequential(nn.Linear(z, 8), nn.ReLU(), nn.Linear(8, d))

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def forward(self, x):
        h = F.relu(self.enc(x))
        mu, logvar = self.mu(h), self.logvar(h)
        z = self.reparameterize(mu, logvar) if self.training else mu
        return torch.sigmoid(self.dec(z)), mu, logvar


@case
def vae_train_step_reparam_kl_bce_adam():
    m = VAE()
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    log = collections.defaultdict(list)

    def train_step(x, beta):
        m.train()
        opt.zero_grad()
        recon, mu, logvar = m(x)
        bce = F.binary_cross_entropy(recon, x, reduction="sum")
        kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
        loss = (bce + beta * kld) / x.size(0)
        loss.backward()
        opt.step()
        log["loss"].append(loss.item())
        log["kld"].append(kld.item() / x.size(0))
        return {"loss": loss.detach(), "recon": recon.detach()}

    def drive(f, i):
        x = torch.rand(4, 6)
        return f(x, beta=min(1.0, 0.5 * (i + 1)))
    return train_step, drive, lambda: (_params(m), _opt_state(opt), dict(log))


class Critic(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))

    def forward(self, x):
        return self.net(x)


@case
def wgan_gp_two_optimizers_gradient_penalty_create_graph():
    G = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 3))
    D = Critic()
    optG = torch.optim.Adam(G.parameters(), lr=1e-3, betas=(0.5, 0.9))
    optD = torch.optim.Adam(D.parameters(), lr=1e-3, betas=(0.5, 0.9))
    state = {"step": 0}

    def gradient_penalty(real, fake):
        alpha = torch.rand(real.size(0), 1).expand_as(real)
        inter = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
        d = D(inter)
        grads = torch.autograd.grad(outputs=d, inputs=inter, grad_outputs=torch.ones_like(d),
                                    create_graph=True, retain_graph=True, only_inputs=True)[0]
        return ((grads.view(grads.size(0), -1).norm(2, dim=1) - 1) ** 2).mean()

    def train_step(real):
        z = torch.randn(real.size(0), 2)
        fake = G(z)
        optD.zero_grad()
        d_loss = D(fake.detach()).mean() - D(real).mean() + 10 * gradient_penalty(real, fake.detach())
        d_loss.backward()
        optD.step()
        state["step"] += 1
        g_loss = None
        if state["step"] % 2 == 0:
            for p in D.parameters():
                p.requires_grad_(False)
            optG.zero_grad()
            g_loss = -D(G(z)).mean()
            g_loss.backward()
            optG.step()
            for p in D.parameters():
                p.requires_grad_(True)
        return d_loss.detach(), g_loss if g_loss is None else g_loss.detach()

    return train_step, lambda f, i: f(torch.randn(4, 3)), lambda: (_params(G), _params(D), _opt_state(optD),
                                                                    _opt_state(optG), dict(state))


@case
def wgan_weight_clipping_rmsprop_no_grad_clamp():
    G = nn.Linear(2, 3)
    D = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    optD = torch.optim.RMSprop(D.parameters(), lr=5e-2)

    def train_step(real, clip):
        fake = G(torch.randn(real.shape[0], 2)).detach()
        optD.zero_grad()
        loss = -(D(real).mean() - D(fake).mean())
        loss.backward()
        optD.step()
        for p in D.parameters():
            p.data.clamp_(-clip, clip)
        return loss

    return train_step, lambda f, i: f(torch.randn(5, 3), 0.05 * (i + 1)), lambda: (_params(D), _opt_state(optD))


class VectorQuantizerEMA(nn.Module):
    def __init__(self, n=5, d=3, decay=0.9, eps=1e-5):
        super().__init__()
        self.embedding = nn.Embedding(n, d)
        self.embedding.weight.data.normal_()
        self.register_buffer("_ema_cluster_size", torch.zeros(n))
        self._ema_w = nn.Parameter(torch.Tensor(n, d))
        self._ema_w.data.normal_()
        self._decay, self._epsilon, self._n = decay, eps, n

    def forward(self, inputs):
        flat = inputs.view(-1, inputs.shape[-1])
        distances = (torch.sum(flat ** 2, dim=1, keepdim=True) + torch.sum(self.embedding.weight ** 2, dim=1)
                     - 2 * torch.matmul(flat, self.embedding.weight.t()))
        encoding_indices = torch.argmin(distances, dim=1).unsqueeze(1)
        encodings = torch.zeros(encoding_indices.shape[0], self._n)
        encodings.scatter_(1, encoding_indices, 1)
        quantized = torch.matmul(encodings, self.embedding.weight).view(inputs.shape)
        if self.training:
            self._ema_cluster_size = self._ema_cluster_size * self._decay + (1 - self._decay) * torch.sum(encodings, 0)
            n = torch.sum(self._ema_cluster_size.data)
            self._ema_cluster_size = ((self._ema_cluster_size + self._epsilon) / (n + self._n * self._epsilon) * n)
            dw = torch.matmul(encodings.t(), flat)
            self._ema_w = nn.Parameter(self._ema_w * self._decay + (1 - self._decay) * dw)
            self.embedding.weight = nn.Parameter(self._ema_w / self._ema_cluster_size.unsqueeze(1))
        e_latent_loss = F.mse_loss(quantized.detach(), inputs)
        quantized = inputs + (quantized - inputs).detach()
        avg_probs = torch.mean(encodings, dim=0)
        perplexity = torch.exp(-torch.sum(avg_probs * torch.log(avg_probs + 1e-10)))
        return 0.25 * e_latent_loss, quantized, perplexity


@case
def vqvae_ema_codebook_parameters_reassigned_in_forward():
    m = VectorQuantizerEMA()

    def drive(f, i):
        x = torch.randn(2, 4, 3, requires_grad=True)
        loss, q, ppl = f(x)
        (loss + q.sum()).backward()
        return loss, q, ppl, x.grad
    return m, drive, lambda: (_bufs(m), m.embedding.weight.detach().clone(), m._ema_w.detach().clone())


@case
def gan_hinge_loss_spectral_norm_power_iteration():
    D = nn.Sequential(nn.utils.spectral_norm(nn.Linear(3, 4)), nn.LeakyReLU(0.1),
                      nn.utils.spectral_norm(nn.Linear(4, 1)))
    opt = torch.optim.Adam(D.parameters(), lr=1e-2, betas=(0.0, 0.9))

    def step(real, fake):
        opt.zero_grad()
        loss = F.relu(1.0 - D(real)).mean() + F.relu(1.0 + D(fake)).mean()
        loss.backward()
        opt.step()
        return loss.detach()
    return step, lambda f, i: f(torch.randn(4, 3), torch.randn(4, 3)), lambda: (_params(D), _bufs(D), _opt_state(opt))


@case
def gumbel_softmax_hard_and_distributions_rsample():
    logits_p = nn.Parameter(torch.randn(3, 4))

    def fn(tau, hard):
        y = F.gumbel_softmax(logits_p, tau=tau, hard=hard)
        d = torch.distributions.Normal(logits_p.mean(1), logits_p.std(1).exp())
        z = d.rsample()
        lp = d.log_prob(z).sum()
        kl = torch.distributions.kl_divergence(d, torch.distributions.Normal(0.0, 1.0)).sum()
        return y, z, lp, kl

    def drive(f, i):
        logits_p.grad = None
        out = f(1.0 / (i + 1), hard=i != 1)
        (out[0].pow(2).sum() + out[2] + out[3]).backward()
        return out, logits_p.grad
    return fn, drive


# ----------------------------------------------------------------------------------------------

XFAIL = {}


@pytest.mark.parametrize("case", params(CASES, XFAIL))
def test_adversarial_realmodels(case):
    check_case(case)
