"""Dynamic shapes on shape code as models write it (issue 15): sequence lengths that change on
every call through slicing with symbolic bounds, positional tables, causal masks built with
torch.ones/tril/arange, padding to a multiple, split/chunk/cat, numel and size ** -0.5 scales.
Each program runs over 10 lengths under every backend and must equal eager (bitwise for eager and
aot_eager, within float32 tolerance for fused) with one compile under dynamic=True and two under
automatic dynamic (the static first compile, then one symbolic graph), where before this change
every length recompiled until the cache limit. Size rules: core/src/interp/size_rules.def."""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dynamo
from compile_fixtures import check_over_sizes, compiled, fresh_dynamo, records  # noqa: F401  (fixtures)

pytestmark = pytest.mark.usefixtures("fresh_dynamo")

LENGTHS = [5, 7, 12, 16, 9, 31, 17, 64, 3, 40]


class CausalSelfAttention(nn.Module):
    def __init__(self, d=32, heads=4, max_len=128):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.pos = nn.Parameter(torch.randn(1, max_len, d))

    def forward(self, x):
        b, t, c = x.shape
        x = x + self.pos[:, :t]
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = torch.tril(torch.ones(t, t, device=x.device)).view(1, 1, t, t)
        att = F.softmax(att.masked_fill(mask == 0, float("-inf")), dim=-1)
        return self.proj((att @ v).transpose(1, 2).contiguous().view(b, t, c))


class PadToMultiple(nn.Module):
    def __init__(self, k=8):
        super().__init__()
        self.k = k
        self.lin = nn.Linear(16, 16)

    def forward(self, x):
        b, t, c = x.shape
        pad = (self.k - t % self.k) % self.k
        x = F.pad(x, (0, 0, 0, pad))
        return self.lin(x.reshape(b, -1, self.k, c).mean(2))


class ClassToken(nn.Module):
    def __init__(self):
        super().__init__()
        self.cls = nn.Parameter(torch.randn(1, 1, 16))
        self.norm = nn.LayerNorm(16)

    def forward(self, x):
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1)
        pos = torch.arange(x.size(1), device=x.device).float().unsqueeze(-1) / x.size(1)
        return self.norm(x + pos)[:, 0]


class GatedHalves(nn.Module):
    def forward(self, x):
        a, b = torch.split(x, x.size(1) // 2, dim=1)
        z = x.new_zeros(x.shape[0], 3)
        return torch.cat([a * b.sigmoid(), z], dim=1).sum(-1, keepdim=True) / x.numel()


class LastToken(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, 16)

    def forward(self, ids):
        e = self.emb(ids)
        last = e[torch.arange(e.size(0)), (ids != 0).sum(1) - 1]
        return last * (e.size(1) ** -0.5)


class ChunkStack(nn.Module):
    def forward(self, x):
        first, second = x.chunk(2, dim=-1)
        return torch.stack([first.tanh(), second[..., : first.size(-1)]], dim=0).flatten(0, 1)


def _seq(batch, width):
    return lambda t: (torch.randn(batch, t, width),)


CASES = {
    "causal_attention": (CausalSelfAttention, _seq(2, 32)),
    "pad_to_multiple": (PadToMultiple, _seq(3, 16)),
    "class_token": (ClassToken, _seq(2, 16)),
    "gated_halves": (GatedHalves, lambda t: (torch.randn(t, 2 * t + 2),)),
    "last_token": (LastToken, lambda t: (torch.randint(1, 100, (4, t)),)),
    "chunk_stack": (ChunkStack, lambda t: (torch.randn(3, 2 * t),)),
}


def _check(records, name, backend, dynamic):
    torch.manual_seed(0)
    cls, make = CASES[name]
    check_over_sizes(records, name, cls().eval(), make, LENGTHS, backend, dynamic, automatic_compiles=(2,))


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("dynamic", [None, True])
def test_model_shape_code_compiles_once_for_every_length(records, name, backend, dynamic):
    _check(records, name, backend, dynamic)


@pytest.mark.parametrize("name", sorted(CASES))
def test_model_shape_code_under_fused(records, name):
    _check(records, name, "fused", True)


def test_a_split_whose_piece_count_changes_recompiles(records):
    # split(n // 2) gives two pieces for even n and three for odd n: the count is guarded.
    def f(x):
        parts = torch.split(x, x.size(1) // 2, dim=1)
        return torch.stack([p.sum() for p in parts[:2]]), len(parts)
    cf = dynamo.compile(f, dynamic=True)
    for n in [8, 10, 12, 9, 14, 11]:
        x = torch.randn(2, n)
        (got, gn), (want, wn) = cf(x), f(x)
        assert gn == wn and torch.equal(got, want), n
    texts = [r["dynamic_shapes"] for r in compiled(records)]
    assert len(texts) == 2, texts
    assert "# number of pieces" in texts[0]


def test_factories_of_symbolic_sizes_stay_symbolic(records):
    def f(x):
        n = x.size(0)
        return torch.zeros(n, 2) + torch.arange(n).unsqueeze(1) + torch.ones((n, 1)) * x.numel()
    cf = dynamo.compile(f, dynamic=True)
    for n in [3, 6, 11]:
        x = torch.randn(n, 4)
        assert torch.equal(cf(x), f(x)), n
    assert len(compiled(records)) == 1
    assert "specialised" not in compiled(records)[0]["dynamic_shapes"]


def test_a_slice_past_the_end_is_clamped_like_python(records):
    def f(x, y):
        return x[: y.size(0) + 4] * 2, x[-y.size(0):] + 1, x[2 : y.size(0)]
    cf = dynamo.compile(f, dynamic=True)
    for n, m in [(10, 3), (12, 5), (6, 5), (20, 9), (7, 2)]:
        x, y = torch.randn(n), torch.randn(m)
        got, want = cf(x, y), f(x, y)
        assert all(torch.equal(a, b) for a, b in zip(got, want)), (n, m)
        assert [g.shape for g in got] == [w.shape for w in want]
