"""Ordinary model code of public projects: blocks, attention, losses, heads (most of it is
captured already; it keeps the corpus representative)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import snippet


@snippet
def resnet_basic_block():
    class BasicBlock(nn.Module):
        expansion = 1

        def __init__(self, inplanes, planes, stride=1, downsample=None):
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.downsample = downsample

        def forward(self, x):
            identity = x
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            if self.downsample is not None:
                identity = self.downsample(x)
            out += identity
            return self.relu(out)
    return BasicBlock(4, 4).eval(), (torch.randn(1, 4, 6, 6),)


@snippet
def multi_head_attention_manual():
    class MHA(nn.Module):
        def __init__(self, d_model=8, h=2):
            super().__init__()
            self.d_k = d_model // h
            self.h = h
            self.linears = nn.ModuleList([nn.Linear(d_model, d_model) for _ in range(4)])

        def forward(self, query, key, value, mask=None):
            nbatches = query.size(0)
            query, key, value = [l(x).view(nbatches, -1, self.h, self.d_k).transpose(1, 2)
                                 for l, x in zip(self.linears, (query, key, value))]
            scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(self.d_k)
            if mask is not None:
                scores = scores.masked_fill(mask == 0, -1e9)
            p_attn = F.softmax(scores, dim=-1)
            x = torch.matmul(p_attn, value)
            x = x.transpose(1, 2).contiguous().view(nbatches, -1, self.h * self.d_k)
            return self.linears[-1](x)
    x = torch.randn(2, 5, 8)
    return MHA(), (x, x, x)


@snippet
def transformer_ffn_with_dropout_eval():
    class FFN(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = nn.Linear(8, 16)
            self.w2 = nn.Linear(16, 8)
            self.dropout = nn.Dropout(0.1)

        def forward(self, x):
            return self.w2(self.dropout(F.relu(self.w1(x))))
    return FFN().eval(), (torch.randn(2, 3, 8),)


@snippet
def positional_encoding_buffer():
    class PositionalEncoding(nn.Module):
        def __init__(self, d_model=8, max_len=20):
            super().__init__()
            pe = torch.zeros(max_len, d_model)
            position = torch.arange(0, max_len).unsqueeze(1).float()
            div_term = torch.exp(torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model))
            pe[:, 0::2] = torch.sin(position * div_term)
            pe[:, 1::2] = torch.cos(position * div_term)
            self.register_buffer("pe", pe.unsqueeze(0))

        def forward(self, x):
            return x + self.pe[:, : x.size(1)]
    return PositionalEncoding(), (torch.randn(2, 6, 8),)


@snippet
def se_block():
    class SELayer(nn.Module):
        def __init__(self, channel=8, reduction=4):
            super().__init__()
            self.avg_pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Sequential(nn.Linear(channel, channel // reduction, bias=False), nn.ReLU(inplace=True),
                                    nn.Linear(channel // reduction, channel, bias=False), nn.Sigmoid())

        def forward(self, x):
            b, c, _, _ = x.size()
            y = self.avg_pool(x).view(b, c)
            y = self.fc(y).view(b, c, 1, 1)
            return x * y.expand_as(x)
    return SELayer(), (torch.randn(2, 8, 4, 4),)


@snippet
def focal_loss():
    def focal(inputs, targets, alpha=0.25, gamma=2.0):
        p = torch.sigmoid(inputs)
        ce = F.binary_cross_entropy_with_logits(inputs, targets, reduction="none")
        p_t = p * targets + (1 - p) * (1 - targets)
        loss = ce * ((1 - p_t) ** gamma)
        alpha_t = alpha * targets + (1 - alpha) * (1 - targets)
        return (alpha_t * loss).mean()
    return focal, (torch.randn(10), torch.rand(10).round())


@snippet
def label_smoothing_loss():
    def f(pred, target, smoothing=0.1):
        n = pred.size(-1)
        log_preds = F.log_softmax(pred, dim=-1)
        loss = -log_preds.sum(dim=-1).mean()
        nll = F.nll_loss(log_preds, target)
        return smoothing * (loss / n) + (1 - smoothing) * nll
    return f, (torch.randn(4, 5), torch.tensor([1, 0, 4, 2]))


@snippet
def unet_up_block_with_pad():
    class Up(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.ConvTranspose2d(4, 2, 2, stride=2)
            self.conv = nn.Conv2d(4, 2, 3, padding=1)

        def forward(self, x1, x2):
            x1 = self.up(x1)
            diffY = x2.size()[2] - x1.size()[2]
            diffX = x2.size()[3] - x1.size()[3]
            x1 = F.pad(x1, [diffX // 2, diffX - diffX // 2, diffY // 2, diffY - diffY // 2])
            return self.conv(torch.cat([x2, x1], dim=1))
    return Up(), (torch.randn(1, 4, 3, 3), torch.randn(1, 2, 7, 7))


@snippet
def lstm_classifier_last_step():
    class LSTMClassifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(20, 6)
            self.lstm = nn.LSTM(6, 8, batch_first=True, bidirectional=True)
            self.fc = nn.Linear(16, 3)

        def forward(self, tokens):
            out, (h, c) = self.lstm(self.emb(tokens))
            h = torch.cat((h[-2, :, :], h[-1, :, :]), dim=1)
            return self.fc(h)
    return LSTMClassifier(), (torch.randint(0, 20, (2, 5)),)


@snippet
def mlp_with_layer_list_and_residual():
    class MLP(nn.Module):
        def __init__(self, dims=(4, 8, 8, 4)):
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))

        def forward(self, x):
            h = x
            for i, layer in enumerate(self.layers):
                h = layer(h)
                if i != len(self.layers) - 1:
                    h = F.gelu(h)
            return h + x
    return MLP(), (torch.randn(3, 4),)


@snippet
def depthwise_separable_conv():
    class DWConv(nn.Module):
        def __init__(self, c=4):
            super().__init__()
            self.dw = nn.Conv2d(c, c, 3, padding=1, groups=c)
            self.pw = nn.Conv2d(c, 2 * c, 1)
            self.bn = nn.BatchNorm2d(2 * c)

        def forward(self, x):
            return F.relu6(self.bn(self.pw(self.dw(x))))
    return DWConv().eval(), (torch.randn(1, 4, 5, 5),)


@snippet
def layernorm_channels_first():
    class LayerNorm2d(nn.Module):
        def __init__(self, c=3, eps=1e-6):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(c))
            self.bias = nn.Parameter(torch.zeros(c))
            self.eps = eps

        def forward(self, x):
            u = x.mean(1, keepdim=True)
            s = (x - u).pow(2).mean(1, keepdim=True)
            x = (x - u) / torch.sqrt(s + self.eps)
            return self.weight[:, None, None] * x + self.bias[:, None, None]
    return LayerNorm2d(), (torch.randn(2, 3, 4, 4),)


@snippet
def drop_path_eval():
    def drop_path(x, drop_prob: float = 0.0, training: bool = False):
        if drop_prob == 0.0 or not training:
            return x
        keep_prob = 1 - drop_prob
        shape = (x.shape[0],) + (1,) * (x.ndim - 1)
        random_tensor = keep_prob + torch.rand(shape, dtype=x.dtype, device=x.device)
        random_tensor.floor_()
        return x.div(keep_prob) * random_tensor
    def f(x):
        return drop_path(x, 0.1, False) + 1
    return f, (torch.randn(2, 3),)


@snippet
def drop_path_training_random():
    def f(x, drop_prob=0.2):
        keep_prob = 1 - drop_prob
        shape = (x.shape[0],) + (1,) * (x.ndim - 1)
        random_tensor = keep_prob + torch.rand(shape, dtype=x.dtype, device=x.device)
        random_tensor.floor_()
        return x.div(keep_prob) * random_tensor
    return f, (torch.randn(4, 3),)


@snippet
def patch_embedding_vit():
    class PatchEmbed(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Conv2d(3, 8, kernel_size=4, stride=4)
            self.cls_token = nn.Parameter(torch.zeros(1, 1, 8))

        def forward(self, x):
            B = x.shape[0]
            x = self.proj(x).flatten(2).transpose(1, 2)
            cls = self.cls_token.expand(B, -1, -1)
            return torch.cat((cls, x), dim=1)
    return PatchEmbed(), (torch.randn(2, 3, 8, 8),)


@snippet
def gru_cell_loop():
    cell = nn.GRUCell(3, 4)
    def f(xs):
        h = torch.zeros(xs.size(1), 4)
        outs = []
        for t in range(xs.size(0)):
            h = cell(xs[t], h)
            outs.append(h)
        return torch.stack(outs)
    return f, (torch.randn(3, 2, 3),)


@snippet
def contrastive_info_nce():
    def f(z1, z2, temperature=0.5):
        z1 = F.normalize(z1, dim=1)
        z2 = F.normalize(z2, dim=1)
        logits = z1 @ z2.t() / temperature
        labels = torch.arange(z1.size(0))
        return F.cross_entropy(logits, labels)
    return f, (torch.randn(4, 6), torch.randn(4, 6))


@snippet
def kl_divergence_vae():
    class VAEHead(nn.Module):
        def __init__(self):
            super().__init__()
            self.mu = nn.Linear(6, 2)
            self.logvar = nn.Linear(6, 2)

        def forward(self, h):
            mu, logvar = self.mu(h), self.logvar(h)
            kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
            return mu, kld
    return VAEHead(), (torch.randn(3, 6),)


@snippet
def reparameterize_randn_like():
    def f(mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std
    return f, (torch.randn(3, 2), torch.randn(3, 2))


@snippet
def gumbel_softmax_hard():
    def f(logits):
        return F.gumbel_softmax(logits, tau=0.5, hard=True)
    return f, (torch.randn(4, 5),)


@snippet
def iou_of_boxes():
    def box_iou(b1, b2):
        area1 = (b1[:, 2] - b1[:, 0]) * (b1[:, 3] - b1[:, 1])
        area2 = (b2[:, 2] - b2[:, 0]) * (b2[:, 3] - b2[:, 1])
        lt = torch.max(b1[:, None, :2], b2[:, :2])
        rb = torch.min(b1[:, None, 2:], b2[:, 2:])
        wh = (rb - lt).clamp(min=0)
        inter = wh[:, :, 0] * wh[:, :, 1]
        return inter / (area1[:, None] + area2 - inter)
    b = torch.tensor([[0.0, 0.0, 2.0, 2.0], [1.0, 1.0, 3.0, 3.0]])
    return box_iou, (b, b + 0.5)


@snippet
def anchor_grid_meshgrid():
    def f(feat, stride=8):
        h, w = feat.shape[-2:]
        ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
        grid = torch.stack((xs, ys), dim=-1).float() * stride
        return grid.view(-1, 2)
    return f, (torch.randn(1, 2, 3, 4),)


@snippet
def kwargs_forward_with_defaults():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x, scale=1.0, *, bias=None, **kwargs):
            y = self.fc(x) * scale
            if bias is not None:
                y = y + bias
            return y
    return Net(), (torch.randn(2, 3),)


@snippet
def dict_of_outputs_heads():
    class Heads(nn.Module):
        def __init__(self):
            super().__init__()
            self.heads = nn.ModuleDict({"cls": nn.Linear(4, 3), "box": nn.Linear(4, 4)})

        def forward(self, x):
            return {k: h(x) for k, h in self.heads.items()}
    return Heads(), (torch.randn(2, 4),)


@snippet
def sequential_with_lambda_layer():
    class Lambda(nn.Module):
        def __init__(self, fn):
            super().__init__()
            self.fn = fn

        def forward(self, x):
            return self.fn(x)
    net = nn.Sequential(nn.Linear(3, 4), Lambda(lambda t: t * torch.sigmoid(t)), nn.Linear(4, 2))
    return net, (torch.randn(2, 3),)


@snippet
def isinstance_dispatch_on_input():
    def f(x):
        if isinstance(x, (list, tuple)):
            x = torch.cat(x, 0)
        return x.mean(0)
    return f, ([torch.randn(2, 3), torch.randn(1, 3)],)


@snippet
def super_call_in_subclassed_linear():
    class ScaledLinear(nn.Linear):
        def forward(self, x):
            return super().forward(x) * 0.5
    return ScaledLinear(3, 2), (torch.randn(2, 3),)


@snippet
def chunk_and_glu():
    def f(x):
        a, b = x.chunk(2, dim=-1)
        return a * torch.sigmoid(b)
    return f, (torch.randn(3, 8),)


@snippet
def einsum_attention():
    def f(q, k, v):
        attn = torch.einsum("bhid,bhjd->bhij", q, k) * q.shape[-1] ** -0.5
        return torch.einsum("bhij,bhjd->bhid", attn.softmax(-1), v)
    t = torch.randn(1, 2, 3, 4)
    return f, (t, t * 2, t * 3)


@snippet
def masked_mean_pooling():
    def f(hidden, mask):
        mask = mask.unsqueeze(-1).float()
        return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    return f, (torch.randn(2, 4, 3), torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]]))


@snippet
def causal_mask_triu():
    def f(scores):
        T = scores.size(-1)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        return scores.masked_fill(mask, float("-inf")).softmax(-1)
    return f, (torch.randn(2, 4, 4),)


@snippet
def rotary_embedding():
    def f(x):
        d = x.shape[-1]
        inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
        t = torch.arange(x.shape[-2]).float()
        freqs = torch.einsum("i,j->ij", t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        rot = torch.cat((-x2, x1), dim=-1)
        return x * emb.cos() + rot * emb.sin()
    return f, (torch.randn(2, 5, 8),)


@snippet
def group_norm_and_silu_resblock():
    class ResBlock(nn.Module):
        def __init__(self, c=4):
            super().__init__()
            self.norm1 = nn.GroupNorm(2, c)
            self.conv1 = nn.Conv2d(c, c, 3, padding=1)
            self.norm2 = nn.GroupNorm(2, c)
            self.conv2 = nn.Conv2d(c, c, 3, padding=1)

        def forward(self, x):
            h = self.conv1(F.silu(self.norm1(x)))
            h = self.conv2(F.silu(self.norm2(h)))
            return x + h
    return ResBlock(), (torch.randn(1, 4, 4, 4),)


@snippet
def weight_init_free_embedding_bag():
    emb = nn.EmbeddingBag(10, 3, mode="mean")
    def f(idx, offsets):
        return emb(idx, offsets)
    return f, (torch.tensor([1, 2, 4, 5, 4, 3]), torch.tensor([0, 3]))


@snippet(breaks="tensor attribute .grad")
def train_step_with_sgd():
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    def step(x, y):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()
    return step, (torch.randn(4, 3), torch.randn(4, 1))


@snippet
def global_config_flag():
    def f(x):
        if CONFIG["use_norm"]:
            x = F.layer_norm(x, x.shape[-1:])
        return x * CONFIG["scale"]
    return f, (torch.randn(2, 4),)


CONFIG = {"use_norm": True, "scale": 2.0}


@snippet
def tuple_unpack_star():
    def f(x):
        b, *rest = x.shape
        return x.reshape(b, -1), len(rest)
    return f, (torch.randn(2, 3, 4),)


@snippet
def where_instead_of_branch():
    def f(x):
        return torch.where(x > 0, x, x * 0.01)
    return f, (torch.randn(6),)


@snippet(breaks="data-dependent")
def branch_on_tensor_value():
    def f(x):
        if x.sum() > 0:
            return x * 2
        return x
    return f, (torch.randn(6),)


@snippet(breaks="call to print()")
def print_debug_shape():
    def f(x):
        y = x * 2
        print(y.shape)
        return y
    return f, (torch.randn(2),)


@snippet
def logging_guarded_by_flag():
    DEBUG = False
    def f(x):
        if DEBUG:
            print(x)
        return x + 1
    return f, (torch.randn(2),)


@snippet(breaks="nonzero")
def nonzero_indices():
    def f(x):
        idx = torch.nonzero(x > 0)
        return idx
    return f, (torch.randn(5),)


@snippet
def cumsum_and_flip():
    def f(x):
        return torch.flip(torch.cumsum(x, dim=-1), dims=[-1])
    return f, (torch.randn(2, 5),)


@snippet
def scatter_one_hot():
    def f(labels, n=5):
        return torch.zeros(labels.size(0), n).scatter_(1, labels.unsqueeze(1), 1.0)
    return f, (torch.tensor([0, 3, 1]),)


@snippet
def interpolate_align_corners():
    def f(x, size=(6, 6)):
        return F.interpolate(x, size=size, mode="bilinear", align_corners=True)
    return f, (torch.randn(1, 2, 3, 3),)


@snippet
def grid_sample_affine():
    def f(x, theta):
        grid = F.affine_grid(theta, x.size(), align_corners=False)
        return F.grid_sample(x, grid, align_corners=False)
    theta = torch.tensor([[[1.0, 0.0, 0.1], [0.0, 1.0, -0.1]]])
    return f, (torch.randn(1, 1, 4, 4), theta)


@snippet
def conv1d_temporal_block():
    class TemporalBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv1d(3, 3, 3, padding=2, dilation=1)
            self.chomp = 2

        def forward(self, x):
            out = self.conv(x)[:, :, : -self.chomp].contiguous()
            return F.relu(out + x)
    return TemporalBlock(), (torch.randn(2, 3, 6),)


@snippet
def property_on_module():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)

        @property
        def dtype(self):
            return self.fc.weight.dtype

        def forward(self, x):
            return self.fc(x.to(self.dtype))
    return Net(), (torch.randn(2, 3, dtype=torch.float64),)


@snippet
def staticmethod_helper():
    class Net(nn.Module):
        @staticmethod
        def _norm(x):
            return x / x.norm(dim=-1, keepdim=True)

        def forward(self, x):
            return self._norm(x) * 2
    return Net(), (torch.randn(3, 4),)


@snippet
def classmethod_constant():
    class Net(nn.Module):
        eps = 1e-5

        @classmethod
        def get_eps(cls):
            return cls.eps

        def forward(self, x):
            return x / (x.abs().sum() + self.get_eps())
    return Net(), (torch.randn(4),)
