"""Pooling externs reading arena slots (docs/codegen.md, "Memory planning"): max_pool2d,
avg_pool2d and adaptive_avg_pool2d return fresh tensors, so the program lends them a planned
intermediate by pointer instead of keeping it in a pool block between calls (resnet18's stem conv
result, 8x64x112x112). The plan counts the extern's read in the slot's live range, and the
in-place pass writes no kernel output over a buffer an extern still reads. Each liveness test is
built so that the wrong rule gives a wrong result (checked by removing the rule).

Tolerance: the conv tests' (fused_harness.close); pooling itself runs in ATen, so the pooled
values of a kernel-made buffer are compared exactly where the kernel is exact."""
import re

import pytest
import torch
import torch.nn.functional as F

from compile_fixtures import fresh_dynamo  # noqa: F401  (fixture)
from fused_harness import close, program_text


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def buffers(text):
    """{'b3': (kind, arena offset or None, storage or None)} from a printed program."""
    out = {}
    for m in re.finditer(r"^(b\d+): (\w+) \w+\[[^]]*\] strides \[[^]]*\] \([^)]*\)( arena\+(\d+))?( in (b\d+))?$",
                         text, re.M):
        out[m.group(1)] = (m.group(2), int(m.group(4)) if m.group(4) else None, m.group(6))
    return out


def pool_reads(text):
    """The buffers each extern in the program's layout reads, in step order."""
    return [m.group(1).split(", ") for m in re.finditer(r"^extern #\d+ reads ([b\d, ]+?)(?: ->.*)?   \(", text, re.M)]


def test_stem_conv_result_is_an_arena_slot_the_pool_reads():
    # resnet18's stem: conv-bn-relu (a conv step), then max_pool2d: the conv's result is no pool
    # block any more but an arena slot that the pool reads by pointer
    torch.manual_seed(0)
    w, x = torch.randn(16, 3, 7, 7), torch.randn(2, 3, 32, 30)
    mean, var, gamma, beta = torch.randn(16), torch.rand(16) + 0.5, torch.rand(16) + 0.5, torch.randn(16)

    def fn(t, w, mean, var, gamma, beta):
        y = F.relu(F.batch_norm(F.conv2d(t, w, None, 2, 3), mean, var, gamma, beta, False))
        return torch.relu(F.max_pool2d(y, 3, 2, 1)) * 2

    args = (x, w, mean, var, gamma, beta)
    f = program_text(fn, *args)
    text = f.report["program"]
    conv = re.search(r"^conv #.* -> (b\d+)", text, re.M).group(1)
    assert pool_reads(text) == [[conv]], text
    kind, offset, _ = buffers(text)[conv]
    assert kind == "intermediate" and offset is not None, text
    with torch.no_grad():
        for _ in range(2):                       # the second call reuses the arena
            got, want = f(*args), fn(*args)
            close(got, want)
            assert got.stride() == want.stride()


def test_pool_read_keeps_the_slot_alive_past_a_later_kernel():
    # y (conv step) is read only by the pool, which comes after a kernel that makes `a` (read by
    # a second conv step) and after that conv: counted only up to the conv, y's slot would hold
    # `a` and the second conv's result by the time the pool reads it
    torch.manual_seed(0)
    w1, w2 = torch.randn(8, 3, 3, 3), torch.randn(8, 3, 3, 3)
    x, s = torch.randn(2, 3, 16, 16), torch.randn(2, 3, 16, 16)

    def fn(t, u, w1, w2):
        y = F.conv2d(t, w1, None, 1, 1)
        a = torch.exp(torch.sin(u) * 3)
        c = F.conv2d(a, w2, None, 1, 1)
        return F.max_pool2d(y, 2) + torch.mean(c), torch.amax(c, (2, 3))

    f = program_text(fn, x, s, w1, w2)
    text = f.report["program"]
    convs = re.findall(r"^conv #\d+ (b\d+) .* -> (b\d+)", text, re.M)
    bufs = buffers(text)
    y, a = convs[0][1], convs[1][0]
    assert pool_reads(text) == [[y]], text
    assert bufs[y][0] == "intermediate" and bufs[a][0] == "intermediate", text
    lines = text.splitlines()
    step = lambda pat: next(i for i, line in enumerate(lines) if re.match(pat, line))  # noqa: E731
    assert step(r"conv #") < step(r"kernel ") < step(r"extern #\d+ reads"), text  # a is made between them
    with torch.no_grad():
        for _ in range(2):
            got, want = f(x, s, w1, w2), fn(x, s, w1, w2)
            for g, w in zip(got, want):
                close(g, w)


def test_no_kernel_output_is_written_over_a_buffer_the_pool_reads_later():
    # y is a kernel-made intermediate (the first pool makes it a buffer); z's kernel is the last
    # kernel to read it, at z's own index, which the in-place pass would take for "y dies here"
    # and write z over y: the second pool, after it, would then pool z's values
    x = torch.randn(2, 4, 10, 12)

    def fn(t):
        y = torch.exp(torch.tanh(t) * 3)
        p1 = F.avg_pool2d(y, 2)
        z = torch.sigmoid(y) * 3
        return p1, z, F.max_pool2d(y, 2)

    f = program_text(fn, x)
    with torch.no_grad():
        got, want = f(x), fn(x)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    text = f.report["program"]
    [[y], [y2]] = pool_reads(text)
    assert y == y2 and buffers(text)[y] == ("intermediate", 0, None), text
    assert re.search(r"^kernel .*\n  b\d+\[1\*x0\] = mul\(sigmoid\(%s\[" % y, text, re.M), text


def test_in_place_chain_into_the_buffer_the_pool_reads_stays_allowed():
    # the other direction is safe: a kernel output the pool reads may live over an intermediate
    # that dies in its kernel (the pool reads the output, after it is written)
    x = torch.randn(2, 4, 10, 12)

    def fn(t):
        a = torch.exp(torch.sin(t) * torch.cos(t))
        y = a * torch.sum(a, (2, 3), keepdim=True)
        return F.avg_pool2d(y, 2), torch.amax(y)

    f = program_text(fn, x)
    with torch.no_grad():
        got, want = f(x), fn(x)
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("pool", ["max", "max_ceil", "avg", "adaptive", "adaptive1"])
def test_pooling_an_arena_slot_matches_eager(dtype, channels_last, pool):
    # a kernel-made intermediate (read by a later kernel too, so it is a buffer) pooled in place,
    # with NaN, +-inf and -inf-only windows: ATen's semantics, on the slot as the program laid it out
    torch.manual_seed(1)
    x = torch.randn(2, 5, 9, 11, dtype=dtype)
    x[0, 0, 0, 0] = float("nan")
    x[1, 2, 3, 4] = float("inf")
    x[1, 3, :3, :3] = float("-inf")
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    pools = {
        "max": lambda y: F.max_pool2d(y, 3, 2, 1, 1),
        "max_ceil": lambda y: F.max_pool2d(y, (2, 3), (2, 2), (1, 0), (1, 2), ceil_mode=True),
        "avg": lambda y: F.avg_pool2d(y, 3, 2, 1, ceil_mode=True, count_include_pad=False),
        "adaptive": lambda y: F.adaptive_avg_pool2d(y, (4, 5)),
        "adaptive1": lambda y: F.adaptive_avg_pool2d(y, 1),
    }

    def fn(t):
        y = t * 2 - 1
        return pools[pool](y) + 1, torch.sum(torch.exp(y))

    f = program_text(fn, x)
    [[b]] = pool_reads(f.report["program"])
    assert buffers(f.report["program"])[b][0] == "intermediate", f.report["program"]
    with torch.no_grad():
        got, want = f(x), fn(x)
    torch.testing.assert_close(got[0], want[0], equal_nan=True)
    torch.testing.assert_close(got[1], want[1], equal_nan=True)
    assert got[0].stride() == want[0].stride()


def test_a_graph_output_the_pool_reads_stays_a_pool_block():
    # y escapes (a graph output): the pool reads the output's block, nothing is lent
    x = torch.randn(2, 4, 10, 12)
    fn = lambda t: (lambda y: (y, F.max_pool2d(y, 2)))(torch.sin(t) * 2)  # noqa: E731
    f = program_text(fn, x)
    [[y]] = pool_reads(f.report["program"])
    assert buffers(f.report["program"])[y][0] == "output"
    got, want = f(x), fn(x)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_a_pooling_extern_that_raises_leaves_no_tensor_over_the_arena(monkeypatch):
    # F.max_pool2d reads y in its arena slot, lent by pointer for the call. When it raises, the
    # error's traceback keeps the frames whose locals hold y, while the arena goes back to serve
    # the next call: y must have memory of its own by then, holding the failing call's values
    torch.manual_seed(0)
    x = torch.randn(2, 5, 9, 11)

    def fn(t):
        y = t * 2 - 1
        return F.max_pool2d(y, 2) + 1, torch.sum(torch.exp(y))

    f = program_text(fn, x)
    [[b]] = pool_reads(f.report["program"])
    assert buffers(f.report["program"])[b][0] == "intermediate", f.report["program"]
    held, real = [], torch.max_pool2d

    def failing(t, *args, **kwargs):  # F.max_pool2d calls torch.max_pool2d
        held.append(t)
        raise RuntimeError("the pool failed")

    with torch.no_grad():
        monkeypatch.setattr(torch, "max_pool2d", failing)
        with pytest.raises(RuntimeError, match="^the pool failed$"):
            f(x)
        monkeypatch.setattr(torch, "max_pool2d", real)
        y = held[0]
        assert torch.equal(y, x * 2 - 1)
        f(-x)  # the next call writes its own y into the arena
        assert torch.equal(y, x * 2 - 1)
        y.fill_(7.0)  # and writing to the kept tensor changes no later call
        got, want = f(-x), fn(-x)
    close(got[0], want[0])
    close(got[1], want[1])
