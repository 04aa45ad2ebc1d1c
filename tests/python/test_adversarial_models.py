"""Adversarial pass (issue #7), category h: what real models do in forward: step counters on
self, buffers updated in forward (EMA, queues, KV caches), in-place ops on inputs and on views of
inputs, no_grad blocks, random ops under a seed, weight tying, RNNs, attention with masks,
backward through the compiled graph."""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from adversarial_harness import check_case, params, registry

CASES, case = registry()


@case
def batchnorm_train_running_stats():
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
    m.train()
    xs = [torch.randn(2, 3, 8, 8) for _ in range(3)]
    return m, lambda f, i: f(xs[i]), lambda: {k: v.clone() for k, v in m.state_dict().items()}


class StepCounter(nn.Module):
    def __init__(self):
        super().__init__()
        self.step = 0
        self.fc = nn.Linear(2, 2)

    def forward(self, x):
        self.step += 1
        warmup = min(1.0, self.step / 2)
        return self.fc(x) * warmup


@case
def self_step_counter_warmup():
    m = StepCounter()
    return m, lambda f, i: f(torch.ones(1, 2)), lambda: m.step


class EMA(nn.Module):
    def __init__(self, d=3, momentum=0.9):
        super().__init__()
        self.momentum = momentum
        self.register_buffer("avg", torch.zeros(d))
        self.register_buffer("count", torch.tensor(0))

    def forward(self, x):
        if self.training:
            self.avg.mul_(self.momentum).add_(x.mean(0), alpha=1 - self.momentum)
            self.count += 1
        return x - self.avg


@case
def ema_buffer_updated_in_forward():
    m = EMA()
    xs = [torch.randn(4, 3) for _ in range(3)]

    def drive(f, i):
        m.train(i != 2)
        return f(xs[i])
    return m, drive, lambda: (m.avg.clone(), m.count.clone())


@case
def inplace_relu_on_input_returns_none():
    def fn(x):
        x.relu_()
        x.mul_(2)

    def drive(f, i):
        x = torch.randn(4) + i
        r = f(x)
        return r, x
    return fn, drive


@case
def inplace_on_view_of_input():
    def fn(x):
        row = x[0]
        row.mul_(10)
        x[1:, 0] = -1.0
        return x.sum()
    xs = [torch.ones(3, 2), torch.arange(6.0).reshape(3, 2), torch.ones(2, 2)]
    return fn, lambda f, i: (f(xs[i]), xs[i].clone())


class Distill(nn.Module):
    def __init__(self):
        super().__init__()
        self.student = nn.Linear(3, 3)
        self.teacher = nn.Linear(3, 3)

    def forward(self, x):
        with torch.no_grad():
            target = self.teacher(x).softmax(-1)
        logp = self.student(x).log_softmax(-1)
        return F.kl_div(logp, target, reduction="batchmean"), target.requires_grad


@case
def no_grad_teacher_block_and_backward():
    m = Distill()

    def drive(f, i):
        m.zero_grad()
        loss, rg = f(torch.randn(2, 3))
        loss.backward()
        return loss, rg, m.student.weight.grad, m.teacher.weight.grad
    return m, drive


@case
def dropout_train_with_seed():
    m = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.3), nn.ReLU(), nn.Dropout(0.5))
    return m, lambda f, i: f(torch.ones(3, 4))


@case
def random_ops_in_forward():
    def fn(x):
        noise = torch.randn_like(x) * 0.1
        perm = torch.randperm(x.shape[0])
        mask = torch.rand(x.shape) > 0.5
        ints = torch.randint(0, 10, (2,))
        return (x + noise)[perm], mask, ints, torch.bernoulli(torch.full_like(x, 0.5))
    return fn, lambda f, i: f(torch.ones(4, 2))


class Queue(nn.Module):
    """MoCo-style memory queue: a buffer overwritten by slices, pointer as a buffer."""
    def __init__(self, k=6, d=2):
        super().__init__()
        self.register_buffer("queue", torch.zeros(k, d))
        self.register_buffer("ptr", torch.zeros(1, dtype=torch.long))
        self.k = k

    @torch.no_grad()
    def enqueue(self, keys):
        ptr = int(self.ptr)
        n = keys.shape[0]
        self.queue[ptr:ptr + n] = keys
        self.ptr[0] = (ptr + n) % self.k

    def forward(self, q, k):
        logits = q @ self.queue.T
        self.enqueue(k)
        return logits


@case
def moco_queue_enqueue_with_pointer():
    m = Queue()
    qs = [torch.randn(2, 2) for _ in range(3)]
    ks = [torch.randn(2, 2) for _ in range(3)]
    return m, lambda f, i: f(qs[i], ks[i]), lambda: (m.queue.clone(), m.ptr.clone())


class Memory(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mem", torch.zeros(0, 2))

    def forward(self, x):
        self.mem = torch.cat([self.mem, x.detach()])[-3:]
        return x + self.mem.mean(0)


@case
def buffer_reassigned_in_forward_growing():
    m = Memory()
    return m, lambda f, i: f(torch.full((1, 2), float(i))), lambda: m.mem.clone()


class KVCacheAttention(nn.Module):
    def __init__(self, d=4):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)

    def forward(self, x, past=None):
        q, k, v = self.qkv(x).chunk(3, -1)
        if past is not None:
            pk, pv = past
            k = torch.cat([pk, k], dim=1)
            v = torch.cat([pv, v], dim=1)
        att = (q @ k.transpose(1, 2)) / math.sqrt(q.size(-1))
        return att.softmax(-1) @ v, (k, v)


@case
def kv_cache_decoding_loop():
    m = KVCacheAttention()
    tokens = torch.randn(1, 4, 4)

    def drive(f, i):
        past, outs = None, []
        for t in range(i + 1):
            out, past = f(tokens[:, t:t + 1], past)
            outs.append(out)
        return outs, past
    return m, drive


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(6, 4)
        self.out = nn.Linear(4, 6, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, ids):
        return self.out(self.emb(ids).tanh())


@case
def weight_tying_and_backward():
    m = Tied()

    def drive(f, i):
        m.zero_grad()
        y = f(torch.tensor([[1, 2, i]]))
        y.sum().backward()
        return y, m.emb.weight.grad
    return m, drive


@case
def lstm_forward_with_state():
    m = nn.LSTM(3, 4, batch_first=True)

    def drive(f, i):
        x = torch.randn(2, 5, 3)
        out, (h, c) = f(x)
        return out, h, c
    return m, drive


class MaskedAttention(nn.Module):
    def __init__(self, d=4):
        super().__init__()
        self.mha = nn.MultiheadAttention(d, 2, batch_first=True)

    def forward(self, x, pad_mask):
        causal = torch.triu(torch.ones(x.shape[1], x.shape[1], dtype=torch.bool), 1)
        out, w = self.mha(x, x, x, key_padding_mask=pad_mask, attn_mask=causal)
        return out.masked_fill(pad_mask.unsqueeze(-1), 0.0), w
    

@case
def multihead_attention_with_masks():
    m = MaskedAttention().eval()
    x = torch.randn(2, 3, 4)
    masks = [torch.tensor([[False, False, True], [False, False, False]]),
             torch.zeros(2, 3, dtype=torch.bool), torch.tensor([[False, True, True], [False, False, True]])]
    return m, lambda f, i: f(x, masks[i])


@case
def embedding_padding_idx_and_mask_fill():
    emb = nn.Embedding(5, 3, padding_idx=0)

    def fn(ids):
        mask = ids == 0
        h = emb(ids)
        scores = h.sum(-1).masked_fill(mask, float("-inf"))
        return scores.softmax(-1), h
    ids = [torch.tensor([[1, 2, 0]]), torch.tensor([[0, 0, 4]]), torch.tensor([[3, 3, 3]])]
    return fn, lambda f, i: f(ids[i])


class ModuleDictHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"cls": nn.Linear(2, 3), "box": nn.Linear(2, 4), "aux": nn.Linear(2, 1)})

    def forward(self, x, skip=()):
        return {name: head(x) for name, head in self.heads.items() if name not in skip}


@case
def module_dict_heads_key_order():
    m = ModuleDictHeads()
    skips = [(), ("box",), ("cls", "aux")]
    return m, lambda f, i: f(torch.randn(1, 2), skips[i])


@case
def explicit_generator_argument():
    def fn(x, g):
        return x + torch.randn(x.shape, generator=g), torch.rand(2, generator=g)

    def drive(f, i):
        g = torch.Generator().manual_seed(7 + i)
        a = f(torch.zeros(3), g)
        return a, g.get_state()
    return fn, drive


@case
def half_roundtrip_and_autocast_like_casts():
    def fn(x):
        h = x.half()
        y = (h * 3).float()
        return y, h.dtype, (x.to(torch.bfloat16) + 1).to(x.dtype)
    return fn, lambda f, i: f(torch.randn(4) * (i + 1))


class GradAccum(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 1)
        self.micro = 0

    def forward(self, x, y):
        self.micro += 1
        loss = F.mse_loss(self.fc(x), y) / 2
        return loss


@case
def grad_accumulation_over_calls():
    m = GradAccum()
    x, y = torch.randn(4, 2), torch.randn(4, 1)

    def drive(f, i):
        loss = f(x, y)
        loss.backward()
        return loss, m.fc.weight.grad.clone()
    return m, drive, lambda: m.micro


@case
def x_requires_grad_input_grad():
    def fn(x):
        return (x.sin() * x).sum()

    def drive(f, i):
        x = torch.arange(3.0, requires_grad=True) + 0
        x.retain_grad()
        y = f(x)
        y.backward()
        return y, x.grad
    return fn, drive


class SelfTraining(nn.Module):
    """Module that flips its own mode and stores the last output (e.g. SWA / stochastic depth)."""
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.last = None
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls % 2 == 0:
            self.eval()
        else:
            self.train()
        out = F.dropout(self.fc(x), 0.5, self.training)
        self.last = out.detach()
        return out


@case
def module_flips_its_own_training_flag():
    m = SelfTraining()
    return m, lambda f, i: f(torch.ones(1, 2)), lambda: (m.training, m.last, m.calls)


class StochasticDepth(nn.Module):
    def __init__(self, p=0.5):
        super().__init__()
        self.p = p
        self.block = nn.Linear(3, 3)

    def forward(self, x):
        if self.training and torch.rand(1).item() < self.p:
            return x
        return x + self.block(x)


@case
def stochastic_depth_random_skip():
    m = StochasticDepth()
    return m, lambda f, i: f(torch.ones(1, 3))


class ParamFree(nn.Module):
    def forward(self, x, out=None):
        if out is None:
            out = torch.empty_like(x)
        torch.mul(x, 2, out=out)
        return out


@case
def out_argument_into_preallocated_tensor():
    m = ParamFree()

    def drive(f, i):
        buf = torch.zeros(3)
        r = f(torch.ones(3) * i, buf if i != 1 else None)
        return r, buf, r is buf
    return m, drive


@case
def setitem_with_tensor_mask_on_input():
    def fn(x, thr):
        x[x < thr] = 0
        x[:, -1] += 1
        return x
    xs = [torch.randn(3, 3) for _ in range(3)]

    def drive(f, i):
        x = xs[i].clone()
        r = f(x, [0.0, 0.5, -0.5][i])
        return r, r is x, x
    return fn, drive


@case
def train_step_sgd_momentum():
    m = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(8, 3), torch.randn(8, 1)

    def train_step(x, y):
        opt.zero_grad()
        loss = F.mse_loss(m(x), y)
        loss.backward()
        opt.step()
        return loss.detach()
    return train_step, lambda f, i: f(x, y), lambda: [p.detach().clone() for p in m.parameters()]


@case
def train_step_adam_clip_grad_item():
    m = nn.Linear(3, 1)
    opt = torch.optim.Adam(m.parameters(), lr=0.1)
    x, y = torch.randn(8, 3), torch.randn(8, 1)

    def train_step(x, y):
        loss = ((m(x) - y) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(m.parameters(), 0.5)
        opt.step()
        return loss.item(), norm
    return train_step, lambda f, i: f(x, y), lambda: ([p.detach().clone() for p in m.parameters()],
                                                      opt.state_dict()["state"][0]["step"])


@case
def ema_of_parameters_loop():
    m = nn.Linear(2, 2)
    ema = nn.Linear(2, 2)
    ema.load_state_dict(m.state_dict())

    def update(decay):
        with torch.no_grad():
            for pe, pm in zip(ema.parameters(), m.parameters()):
                pe.mul_(decay).add_(pm, alpha=1 - decay)
            m.weight.add_(1)
        return ema(torch.ones(1, 2))
    return update, lambda f, i: f(0.9), lambda: [p.clone() for p in ema.parameters()]


@case
def load_state_dict_inside_function():
    m = nn.Linear(2, 2)

    def fn(v):
        sd = m.state_dict()
        sd["weight"] = sd["weight"] * 0 + v
        m.load_state_dict(sd)
        return m(torch.ones(1, 2))
    return fn, lambda f, i: f(float(i)), lambda: m.weight.detach().clone()


class BufAlias(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("b", torch.zeros(3))

    def forward(self, x):
        self.b.add_(1)
        return x * 2


@case
def input_is_a_view_of_a_buffer_mutated_in_forward():
    m = BufAlias()
    return m, lambda f, i: f(m.b[1:]), lambda: m.b.clone()


class Clamped(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.calls = 0

    def __setattr__(self, k, v):
        if k == "calls":
            v = min(v, 2)
        super().__setattr__(k, v)

    def forward(self, x):
        self.calls += 1
        return self.fc(x) * self.calls


@case(calls=4)
def module_with_own_setattr():
    m = Clamped()
    return m, lambda f, i: f(torch.ones(1, 2)), lambda: m.calls


class Counted(nn.Module):
    def __init__(self):
        super().__init__()
        self.n = 0

    def __call__(self, *args, **kwargs):
        self.n += 1
        return super().__call__(*args, **kwargs) + self.n

    def forward(self, x):
        return x * 2


class CountedOuter(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Counted()

    def forward(self, x):
        return self.inner(x)


@case
def submodule_overrides_dunder_call():
    m = CountedOuter()
    return m, lambda f, i: f(torch.ones(1)), lambda: m.inner.n


class GradCamNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(3, 3)
        self.fc2 = nn.Linear(3, 1)
        self.grads = []
        self.act = None

    def forward(self, x):
        h = self.fc1(x).relu()
        h.register_hook(lambda g: self.grads.append(g.clone()))
        self.act = h
        h.retain_grad()
        return self.fc2(h).sum()


@case
def tensor_hook_and_retain_grad_in_forward():
    m = GradCamNet()

    def drive(f, i):
        m.grads.clear()
        y = f(torch.ones(1, 3) * (i + 1))
        y.backward()
        return y, list(m.grads), m.act.grad
    return m, drive


class ClipGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(-1, 1)

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return g * (x.abs() <= 1)


@case
def custom_autograd_function():
    def fn(x):
        return ClipGrad.apply(x * 2).sum()

    def drive(f, i):
        x = torch.tensor([0.2, 0.9, -3.0 * i], requires_grad=True)
        y = f(x)
        y.backward()
        return y, x.grad
    return fn, drive


@case
def gradient_penalty_autograd_grad():
    m = nn.Linear(2, 2)

    def fn(x):
        x = x.requires_grad_(True)
        y = m(x).sum()
        g, = torch.autograd.grad(y, x, create_graph=True)
        return g.pow(2).sum()

    def drive(f, i):
        m.zero_grad()
        gp = f(torch.ones(1, 2) * (i + 1))
        gp.backward()
        return gp, m.weight.grad
    return fn, drive


class FailsLate(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(()))
        self.n = 0
        self.log = []

    def forward(self, x, idx):
        self.count += 1
        x.mul_(2)
        self.n += 1
        self.log.append(self.n)
        return x[idx]


@case
def inplace_updates_then_op_fails_in_graph():
    m = FailsLate()
    x = torch.ones(2)
    idx = [torch.tensor(0), torch.tensor(5), torch.tensor(1)]
    return m, lambda f, i: f(x, idx[i]), lambda: (m.count.clone(), x.clone(), m.n, list(m.log))


class Conv1D(nn.Module):
    """GPT-2's Conv1D (transformers.pytorch_utils)."""
    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        x = x.view(size_out)
        return x


class BertSelfAttention(nn.Module):
    """The shape of transformers' BertSelfAttention + embeddings' position_ids buffer."""
    def __init__(self, hidden=8, heads=2, max_pos=16):
        super().__init__()
        self.num_attention_heads = heads
        self.attention_head_size = hidden // heads
        self.all_head_size = hidden
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = Conv1D(hidden, hidden)
        self.dropout = nn.Dropout(0.1)
        self.pos = nn.Embedding(max_pos, hidden)
        self.register_buffer("position_ids", torch.arange(max_pos).expand((1, -1)), persistent=False)

    def transpose_for_scores(self, x):
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        x = x.view(new_x_shape)
        return x.permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask=None, head_mask=None, past_key_value=None,
                output_attentions=False):
        past_length = past_key_value[0].shape[2] if past_key_value is not None else 0
        seq_length = hidden_states.size(1)
        position_ids = self.position_ids[:, past_length: seq_length + past_length]
        hidden_states = hidden_states + self.pos(position_ids)
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        if past_key_value is not None:
            key_layer = torch.cat([past_key_value[0], key_layer], dim=2)
            value_layer = torch.cat([past_key_value[1], value_layer], dim=2)
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        if attention_mask is not None:
            extended = attention_mask[:, None, None, :].to(dtype=attention_scores.dtype)
            extended = (1.0 - extended) * torch.finfo(attention_scores.dtype).min
            attention_scores = attention_scores + extended
        attention_probs = nn.functional.softmax(attention_scores, dim=-1)
        attention_probs = self.dropout(attention_probs)
        if head_mask is not None:
            attention_probs = attention_probs * head_mask
        context_layer = torch.matmul(attention_probs, value_layer)
        context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
        new_context_layer_shape = context_layer.size()[:-2] + (self.all_head_size,)
        context_layer = context_layer.view(new_context_layer_shape)
        outputs = (context_layer, attention_probs) if output_attentions else (context_layer,)
        return outputs + ((key_layer, value_layer),)


@case
def hf_bert_self_attention_with_cache_and_masks():
    m = BertSelfAttention()
    h = torch.randn(2, 3, 8)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])

    def drive(f, i):
        m.train(i == 2)
        m.zero_grad()
        out = f(h, attention_mask=mask, output_attentions=(i == 1))
        nxt = f(h[:, :1], past_key_value=out[-1], output_attentions=True)
        (out[0].sum() + nxt[0].sum()).backward()
        return out, nxt, m.query.weight.grad, m.value.weight.grad
    return m, drive


def detection_postprocess(boxes, scores, labels, score_thresh=0.3, nms_thresh=0.5, topk=3):
    from torchvision.ops import boxes as box_ops
    keep = scores > score_thresh
    boxes, scores, labels = boxes[keep], scores[keep], labels[keep]
    boxes = box_ops.clip_boxes_to_image(boxes, (10, 10))
    keep = box_ops.remove_small_boxes(boxes, 1e-2)
    boxes, scores, labels = boxes[keep], scores[keep], labels[keep]
    keep = box_ops.batched_nms(boxes, scores, labels, nms_thresh)[:topk]
    return {"boxes": boxes[keep], "scores": scores[keep], "labels": labels[keep]}


@case
def torchvision_detection_postprocess():
    def make(n):
        xy = torch.rand(n, 2) * 8
        wh = torch.rand(n, 2) * 4
        return torch.cat([xy, xy + wh], 1), torch.rand(n), torch.randint(0, 2, (n,))
    sets = [make(8), make(5), make(12)]
    return detection_postprocess, lambda f, i: f(*sets[i])


class PyRandomDepth(nn.Module):
    """Stochastic depth decided with Python's random module (common in research code)."""
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(2, 2) for _ in range(3))
        self.taken = []

    def forward(self, x):
        import random
        for j, b in enumerate(self.blocks):
            if self.training and random.random() < 0.5:
                self.taken.append(j)
                continue
            x = x + b(x)
        return x


@case(calls=4)
def python_random_stochastic_depth():
    m = PyRandomDepth()
    return m, lambda f, i: f(torch.ones(1, 2)), lambda: list(m.taken)


class TinyViT(nn.Module):
    """timm VisionTransformer shape: cls token, interpolated pos-embed, string pool config,
    grad-checkpointing flag."""
    def __init__(self, d=8, patch=4, depth=2):
        super().__init__()
        self.patch = patch
        self.proj = nn.Conv2d(3, d, patch, patch)
        self.cls_token = nn.Parameter(torch.randn(1, 1, d) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, 1 + 4, d) * 0.02)  # trained for 2x2 patches
        self.blocks = nn.Sequential(*[nn.Sequential(nn.LayerNorm(d), nn.Linear(d, d), nn.GELU())
                                      for _ in range(depth)])
        self.global_pool = "token"
        self.grad_checkpointing = False
        self.head = nn.Linear(d, 3)

    def _pos_embed(self, x):
        n = x.shape[1]
        old = self.pos_embed.shape[1] - 1
        pos = self.pos_embed
        if n != old:
            gs_old, gs_new = int(math.sqrt(old)), int(math.sqrt(n))
            grid = pos[:, 1:].reshape(1, gs_old, gs_old, -1).permute(0, 3, 1, 2)
            grid = F.interpolate(grid, size=(gs_new, gs_new), mode="bicubic", align_corners=False)
            pos = torch.cat([pos[:, :1], grid.permute(0, 2, 3, 1).reshape(1, gs_new * gs_new, -1)], dim=1)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)
        return x + pos

    def forward(self, img):
        x = self.proj(img).flatten(2).transpose(1, 2)
        x = self._pos_embed(x)
        if self.grad_checkpointing and not torch.jit.is_scripting():
            from torch.utils.checkpoint import checkpoint_sequential
            x = checkpoint_sequential(self.blocks, 2, x)
        else:
            x = self.blocks(x)
        if self.global_pool == "avg":
            x = x[:, 1:].mean(dim=1)
        elif self.global_pool:
            x = x[:, 0]
        return self.head(x)


@case
def timm_vit_pos_embed_interpolation_and_config_strings():
    m = TinyViT()

    def drive(f, i):
        m.global_pool = ["token", "avg", ""][i]
        m.grad_checkpointing = i == 1
        img = torch.randn(2, 3, 8 + 4 * i, 8 + 4 * i)
        out = f(img)
        out.sum().backward() if out.requires_grad else None
        return out, m.cls_token.grad
    return m, drive


class UpBlock(nn.Module):
    """milesial/Pytorch-UNet's Up: pad the upsampled map to the skip's size."""
    def __init__(self, c):
        super().__init__()
        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)
        self.conv = nn.Conv2d(2 * c, c, 3, padding=1)

    def forward(self, x1, x2):
        x1 = self.up(x1)
        diffY = x2.size()[2] - x1.size()[2]
        diffX = x2.size()[3] - x1.size()[3]
        x1 = F.pad(x1, [diffX // 2, diffX - diffX // 2, diffY // 2, diffY - diffY // 2])
        return self.conv(torch.cat([x2, x1], dim=1))


class TinyUNet(nn.Module):
    def __init__(self, c=2):
        super().__init__()
        self.inc = nn.Conv2d(1, c, 3, padding=1)
        self.down = nn.MaxPool2d(2)
        self.mid = nn.Conv2d(c, c, 3, padding=1)
        self.up = UpBlock(c)

    def forward(self, x):
        skips = []
        x = self.inc(x)
        skips.append(x)
        x = self.mid(self.down(x))
        return self.up(x, skips.pop())


@case
def unet_skip_list_and_odd_size_padding():
    m = TinyUNet()
    sizes = [(8, 8), (9, 7), (8, 8)]
    return m, lambda f, i: f(torch.randn(1, 1, *sizes[i]))


class GreedyDecoder(nn.Module):
    """Seq2seq greedy decoding: Python loop, .item() EOS check, break, list of tokens."""
    def __init__(self, vocab=6, d=4, eos=0):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.cell = nn.GRUCell(d, d)
        self.out = nn.Linear(d, vocab)
        self.eos = eos

    def forward(self, h, max_len=6, bos=1):
        tok = torch.tensor([bos])
        tokens = []
        for _ in range(max_len):
            h = self.cell(self.emb(tok), h)
            tok = self.out(h).argmax(-1)
            if tok.item() == self.eos:
                break
            tokens.append(tok.item())
        return tokens, h


@case
def greedy_decode_loop_with_item_and_break():
    m = GreedyDecoder()
    hs = [torch.randn(1, 4) for _ in range(3)]
    return m, lambda f, i: f(hs[i], max_len=4 + i)


class RopeCache(nn.Module):
    """Rotary-embedding style table cache keyed by (length, dtype); returns the cached tensors."""
    def __init__(self):
        super().__init__()
        self.cache = {}
        self.builds = 0

    def _table(self, n, dtype):
        key = (n, dtype)
        if key not in self.cache:
            self.builds += 1
            t = torch.arange(n, dtype=dtype)[:, None] * torch.arange(1, 3, dtype=dtype)
            self.cache[key] = (t.sin(), t.cos())
        return self.cache[key]

    def forward(self, x):
        sin, cos = self._table(x.shape[-2], x.dtype)
        return x * cos + x.flip(-1) * sin, sin


@case(calls=5)
def cache_dict_keyed_by_length_and_dtype():
    m = RopeCache()
    keys = [(3, torch.float32), (3, torch.float32), (4, torch.float32), (3, torch.float64), (3, torch.float32)]

    def drive(f, i):
        n, dt = keys[i]
        out, sin = f(torch.ones(1, n, 2, dtype=dt))
        return out, sin is m.cache[(n, dt)][0], m.builds, list(m.cache.keys())
    return m, drive


class ShapeKeyedAccumulator(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = {}

    def forward(self, x):
        key = x.shape
        if key not in self.cache:
            self.cache[key] = torch.zeros(key)
        buf = self.cache[key]
        buf.add_(x)
        return buf


@case(calls=4)
def buffers_cached_by_torch_size_accumulated_in_place():
    m = ShapeKeyedAccumulator()
    shapes = [(2,), (2,), (3,), (2,)]

    def drive(f, i):
        out = f(torch.ones(shapes[i]))
        return out.clone(), out is m.cache[torch.Size(shapes[i])], len(m.cache)
    return m, drive


class LazyProj(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = None

    def forward(self, x):
        if self.proj is None:
            self.proj = nn.Linear(x.shape[-1], 2)
        return self.proj(x)


@case
def lazy_submodule_created_in_forward():
    m = LazyProj()
    xs = [torch.ones(1, 3), torch.ones(1, 3), torch.ones(2, 3)]
    return m, lambda f, i: f(xs[i]), lambda: [n for n, _ in m.named_parameters()]


XFAIL = {}


@pytest.mark.parametrize("case", params(CASES, XFAIL))
def test_adversarial_models(case):
    check_case(case)


_ID_GUARD = "R2: ID_MATCH guard on an object made fresh every call: recompiles every call"


def test_custom_autograd_function_does_not_recompile_every_call():
    from adversarial_harness import recompiles

    def fn(x):
        return ClipGrad.apply(x * 2).sum()
    assert recompiles(fn, lambda: (torch.ones(3),)) == []


def test_set_add_does_not_recompile_every_call():
    from adversarial_harness import recompiles

    def fn(x, seen):
        seen.add(1)
        return x * 2
    seen = set()
    assert recompiles(fn, lambda: (torch.ones(1), seen)) == []


@pytest.mark.xfail(strict=True, reason=_ID_GUARD + " (a list made in the frame, aliased, passed to the resume function)")
def test_aliased_local_list_across_break_does_not_recompile_every_call():
    import io
    from adversarial_harness import recompiles

    def fn(x):
        a = [x]
        b = a
        print("break", file=io.StringIO())
        b.append(x + 1)
        return len(a)
    assert recompiles(fn, lambda: (torch.ones(1),)) == []


def test_plain_model_does_not_recompile():
    # the control: an ordinary module with a counter-free forward compiles once
    from adversarial_harness import recompiles
    m = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    assert recompiles(m, lambda: (torch.ones(1, 2),)) == []
