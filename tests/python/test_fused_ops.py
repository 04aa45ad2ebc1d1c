"""The fused backend's op-level suite: every lowered op and fusion pattern against eager and an
fp64 reference, on random shapes, broadcasting, non-contiguous and zero-size inputs, across
dtypes; NaN propagation and integer division as eager; what is fused and what stays extern."""
import os
import sys

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from fused_harness import fused, reference, tolerance  # noqa: E402

torch.manual_seed(0)


def check(fn, *inputs, expect_kernels=None, expect_no_extern=True, exact=False):
    f = fused(fn, *inputs)
    got = f(*inputs)
    want = fn(*inputs)
    ref = reference(fn, *inputs)
    got_l = got if isinstance(got, (tuple, list)) else [got]
    want_l = want if isinstance(want, (tuple, list)) else [want]
    ref_l = ref if isinstance(ref, (tuple, list)) else [ref]
    for g, w, r in zip(got_l, want_l, ref_l):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        if exact or not w.is_floating_point():
            torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)
        else:
            rtol, atol = tolerance(w.dtype)
            # within the dtype's tolerance of the fp64 reference, scaled like eager's own error
            err_eager = (w.double() - r.double()).abs().nan_to_num(0).max().item() if w.numel() else 0
            torch.testing.assert_close(g.double(), r.double(), rtol=rtol * 10, atol=atol * 10 + 2 * err_eager,
                                       equal_nan=True)
    if expect_no_extern:
        assert f.report["externs"] == [], f.report["externs"]
    if expect_kernels is not None:
        assert len(f.report["kernels"]) == expect_kernels, f.report["program"]
    return f


UNARY = [torch.relu, torch.sigmoid, torch.tanh, torch.exp, torch.neg, torch.abs,
         lambda x: torch.log(x.abs() + 0.1), lambda x: torch.sqrt(x.abs()), lambda x: torch.rsqrt(x.abs() + 0.5),
         lambda x: x.reciprocal(), F.gelu, lambda x: F.gelu(x, approximate="tanh"),
         lambda x: x.clamp(-0.5, 0.5), lambda x: x.clamp_min(0.1), lambda x: x.clamp_max(0.1),
         lambda x: x ** 2, lambda x: x ** 3, lambda x: x.abs() ** 0.5, lambda x: x.abs() ** 1.7]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("op", range(len(UNARY)))
def test_unary(op, dtype):
    x = torch.randn(7, 13, dtype=dtype)
    check(UNARY[op], x, expect_kernels=1)


BINARY = [torch.add, torch.sub, torch.mul, torch.div, torch.maximum, torch.minimum,
          lambda a, b: torch.add(a, b, alpha=2), lambda a, b: torch.sub(a, b, alpha=3),
          lambda a, b: torch.div(a, b, rounding_mode="floor"), lambda a, b: torch.div(a, b, rounding_mode="trunc"),
          lambda a, b: torch.where(a > b, a, b), torch.eq, torch.ne, torch.lt, torch.le, torch.gt, torch.ge]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("op", range(len(BINARY)))
def test_binary_broadcast(op, dtype):
    a = torch.randn(5, 1, 7, dtype=dtype)
    b = torch.randn(3, 1, dtype=dtype) + 0.1
    check(BINARY[op], a, b, expect_kernels=1)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int8, torch.uint8])
def test_integer_ops_exact(dtype):
    a = torch.randint(0, 50, (6, 9), dtype=dtype)
    b = torch.randint(1, 50, (9,), dtype=dtype)
    check(lambda x, y: (x + y) * 3 - y, a, b, exact=True, expect_kernels=1)
    check(lambda x, y: torch.maximum(x, y).clamp(5, 40), a, b, exact=True, expect_kernels=1)
    check(lambda x, y: (x > y) & (x < 30) if False else x >= y, a, b, exact=True)
    check(lambda x, y: x / y, a, b)  # true division promotes to float32


def test_integer_floor_division_by_zero_raises_like_eager():
    a = torch.tensor([1, 2, 3])
    b = torch.tensor([1, 0, 1])
    fn = lambda x, y: torch.div(x + 1, y, rounding_mode="floor")  # noqa: E731
    f = fused(fn, a, torch.tensor([1, 1, 1]))
    assert [n for n, _ in f.report["externs"]] == ["div"]
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        fn(a, b)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        f(a, b)


def test_bool_and_conversions():
    x = torch.randn(4, 5)
    check(lambda t: (t > 0).to(torch.float32) * t, x, expect_kernels=1)
    check(lambda t: t.to(torch.int32) + 1, x * 10, exact=True)
    check(lambda t: (t * 3).to(torch.float64), x)
    check(lambda t: torch.where(t > 0, t, 0.5), x)


def test_scalar_promotion():
    i = torch.randint(-5, 5, (3, 4))
    check(lambda t: t * 2.5, i)                # int tensor * float -> float32
    check(lambda t: t + True, i, exact=True)   # int + bool -> int64
    f32 = torch.randn(3, 4)
    check(lambda t, s: t + s, f32, torch.tensor(2.0, dtype=torch.float64))  # 0-d tensor: float32


def test_nan_propagation():
    x = torch.tensor([[float("nan"), 1.0, -2.0], [3.0, float("nan"), -float("inf")]])
    y = torch.tensor([[0.0, float("nan"), 5.0], [1.0, 2.0, float("nan")]])
    for fn in [torch.relu, lambda t: t.clamp(-1, 1), lambda t: t.clamp_min(0),
               lambda t: torch.maximum(t, -t), lambda t: torch.minimum(t, t * 0)]:
        check(fn, x, exact=True)
    check(lambda a, b: torch.maximum(a, b), x, y, exact=True)
    check(lambda t: t.amax(1), x, exact=True)
    check(lambda t: t.amin(0), x, exact=True)
    check(lambda t: t.sum(1), x, exact=True)
    check(lambda t: torch.softmax(t, 1), x, exact=True)


def test_non_contiguous_inputs():
    base = torch.randn(8, 6, 4)
    t = base.permute(2, 0, 1)
    s = base[:, ::2, 1:3]
    check(lambda a: (a * 2).relu() + 1, t, expect_kernels=1)
    check(lambda a: a.sigmoid() - a, s, expect_kernels=1)
    check(lambda a: a.sum(-1), t)
    check(lambda a: torch.softmax(a, -1), s)


def test_zero_size():
    x = torch.randn(0, 5)
    check(lambda t: (t + 1).relu(), x)
    check(lambda t: t.sum(0), x)
    check(lambda t: t.sum(1), x)
    check(lambda t: t.mean(0), x)
    f = fused(lambda t: t.amax(0), x[:, :1].t().contiguous()[:, :0].t().contiguous().t() if False else torch.randn(3, 2))
    assert f.report["externs"] == []


@pytest.mark.parametrize("seed", range(6))
def test_random_shapes_chain(seed):
    g = torch.Generator().manual_seed(seed)
    rank = int(torch.randint(1, 5, (1,), generator=g))
    shape = [int(s) for s in torch.randint(1, 9, (rank,), generator=g)]
    bshape = [s if torch.rand(1, generator=g) < 0.5 else 1 for s in shape][1:]
    a = torch.randn(*shape, generator=g)
    b = torch.randn(*bshape, generator=g) if bshape else torch.randn((), generator=g)
    check(lambda x, y: torch.tanh(x * y + 1).relu() - torch.sigmoid(y), a, b, expect_kernels=1)


@pytest.mark.parametrize("dims,keepdim", [((1,), False), ((0, 2), True), ((-1,), True), ((), False)])
@pytest.mark.parametrize("op", ["sum", "mean", "amax", "amin"])
def test_reductions(op, dims, keepdim):
    x = torch.randn(4, 6, 5, dtype=torch.float64)
    if dims == ():
        fn = lambda t: getattr(t, op)()  # noqa: E731
        if op in ("amax", "amin"):
            fn = lambda t: getattr(torch, op)(t, (0, 1, 2))  # noqa: E731
    else:
        fn = lambda t: getattr(t, op)(dims, keepdim=keepdim)  # noqa: E731
    check(fn, x, expect_kernels=1)


def test_integer_sum_exact():
    x = torch.randint(-100, 100, (7, 9), dtype=torch.int32)
    check(lambda t: t.sum(1), x, exact=True)  # int32 sums to int64


def test_softmax_log_softmax_layer_norm_fuse_into_one_kernel():
    x = torch.randn(16, 33)
    check(lambda t: torch.softmax(t, -1), x, expect_kernels=1)
    check(lambda t: torch.log_softmax(t * 2, 1), x, expect_kernels=1)
    check(lambda t: torch.softmax(t, 0), x, expect_kernels=1)
    w, b = torch.randn(33), torch.randn(33)
    f = check(lambda t, w, b: F.layer_norm(t, (33,), w, b), x, w, b, expect_kernels=1)
    assert "inner [33]" in f.report["kernels"][0]["loops"]
    # the decomposed forms fuse too: amax/sub/exp/sum/div is one kernel
    check(lambda t: (t - t.amax(-1, keepdim=True)).exp() / (t - t.amax(-1, keepdim=True)).exp().sum(-1, keepdim=True),
          x, expect_kernels=1)
    check(lambda t: (t - t.mean(-1, keepdim=True)) / ((t - t.mean(-1, keepdim=True)) ** 2).mean(-1, keepdim=True).add(1e-5).sqrt(),
          x, expect_kernels=1)


def test_pointwise_chain_is_one_kernel_and_escaping_values_are_kept():
    x = torch.randn(64, 64)
    f = check(lambda t: ((t * 2 + 1).relu().sigmoid() - 0.5).tanh(), x, expect_kernels=1)
    assert f.report["arena_bytes"] == 0
    # an intermediate that is also an output is stored, and still one kernel
    f = check(lambda t: (lambda y: (y, y.exp() * 2))(t.sin().relu() if False else t.relu() * 3), x, expect_kernels=1)


def test_unsupported_ops_run_as_extern_calls():
    x = torch.randn(8, 8)
    w = torch.randn(8, 8)
    f = check(lambda t, m: (torch.mm(t, m) + 1).relu().cumsum(0), x, w, expect_no_extern=False)
    ext = [n for n, _ in f.report["externs"]]
    assert ext == ["mm", "cumsum"]
    assert len(f.report["kernels"]) == 1  # the add+relu epilogue between them


def test_views_lowered_when_they_do_not_escape():
    x = torch.randn(6, 4)
    check(lambda t: t.t().contiguous() * 2 if False else (t.t() * 2).relu(), x, expect_kernels=1)
    check(lambda t: t.unsqueeze(0).expand(3, 6, 4) + 1, x, expect_kernels=1)
    check(lambda t: t.permute(1, 0).sum(1), x, expect_kernels=1)
    # a view that is an output stays an alias of its input, as eager
    f = fused(lambda t: (t.t(), t + 1), x)
    out = f(x)
    assert out[0].data_ptr() == x.data_ptr()


def test_two_threads_share_one_compiled_function():
    import threading
    x = torch.randn(256, 257)
    f = fused(lambda t: torch.softmax(t * 2, -1) + t.mean(), x)
    want = torch.softmax(x * 2, -1) + x.mean()
    errors = []

    def worker():
        for _ in range(20):
            got = f(x)
            if not torch.allclose(got, want, atol=1e-6):
                errors.append("mismatch")

    ts = [threading.Thread(target=worker) for _ in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []


def test_input_with_other_strides_falls_back_to_eager():
    x = torch.randn(5, 6)
    f = fused(lambda t: t * 2 + 1, x)
    y = torch.randn(6, 5).t()
    assert torch.equal(f(y), y * 2 + 1)


def test_lowered_ops_list_matches_def():
    import dynamo._C as C
    names = [n for n, _, _ in C._codegen.lowered_ops()]
    assert "add" in names and "softmax" in names and "layer_norm" in names


def test_vectorised_float32_exp_edges():
    # the C++ kernels use a vectorisable expf (Cephes polynomial): within 2.5e-7 relative, the
    # denormal range within a few denormal steps, and inf/-inf/nan exact
    # (no selects after the polynomial: the clamp alone gives inf, 0 and NaN at the edges)
    specials = torch.tensor([float("inf"), -float("inf"), float("nan"), 88.73, 100.0, -120.0,
                             88.7229, 1e30, -1e30, -104.0, 88.72, -103.2])
    x = torch.cat([specials, torch.linspace(-110, 88.72, 200001)])
    f = fused(torch.exp, x)
    got, want = f(x), torch.exp(x.double()).float()
    assert got[0] == float("inf") and got[1] == 0 and torch.isnan(got[2])
    assert got[3] == float("inf") and got[4] == float("inf") and got[5] == 0
    assert got[6] == float("inf") and got[7] == float("inf") and got[8] == 0 and got[9] == 0
    assert 3.3e38 < got[10] < float("inf") and 0 < got[11] < 1.2e-38   # largest finite, a denormal
    finite = want.isfinite()
    normal = finite & (want.abs() > 1.2e-38)
    rel = ((got[normal].double() - want[normal].double()) / want[normal].double()).abs()
    assert rel.max().item() < 2.5e-7
    tiny = finite & ~normal
    assert (got[tiny].double() - want[tiny].double()).abs().max().item() < 1e-44


def test_view_read_by_an_op_that_did_not_lower_gets_a_copy():
    x = torch.randn(5, 3)
    f = check(lambda t: torch.pow(2, t.t()) + t.t().detach(), x, expect_no_extern=False)
    assert [n.split("_")[0] for n, _ in f.report["externs"]] == ["pow"]


def test_long_float32_sums_stay_accurate():
    # float32 sums accumulate in double: 4M elements summed as accurately as eager's cascade sum
    x = torch.randn(1 << 22) + 1.0
    f = fused(lambda t: (t.sum(), t.mean(), (t * 2).sum(0, keepdim=True)), x)
    got = f(x)
    ref = x.double().sum().item()
    assert abs(got[0].item() - ref) / abs(ref) < 2e-7
    assert abs(got[1].item() - ref / x.numel()) / abs(ref / x.numel()) < 2e-7
    assert abs(got[2].item() - 2 * ref) / abs(2 * ref) < 2e-7


def test_integer_overflow_wraps_like_eager():
    x = torch.tensor([2**31 - 1, -2**31, 5], dtype=torch.int32)
    check(lambda t: (t + 1) * 3 - t.abs(), x, exact=True)


def test_channel_statistics_coalesce_inner_loops():
    # a batch_norm-style statistic over (N, H, W) of NCHW: H*W is one contiguous inner loop, and
    # each run sums in float (as ATen's cascade) while the runs add up in double
    x = torch.randn(8, 3, 32, 32) + 3.0
    f = fused(lambda t: (t.sum((0, 2, 3)), (t * t).mean((0, 2, 3))), x)
    assert "inner [8, 1024]" in f.report["program"], f.report["program"]
    got = f(x)
    ref = (x.double().sum((0, 2, 3)), (x.double() * x.double()).mean((0, 2, 3)))
    for g, r in zip(got, ref):
        assert ((g.double() - r).abs() / r.abs()).max().item() < 2e-7
    check(lambda t: (t.sum((0, 2, 3)), (t * t).mean((0, 2, 3))), x)
    # a reduction whose inner dims are not contiguous together keeps them apart
    y = torch.randn(4, 6, 5, 7)
    g = fused(lambda t: t.sum((0, 2)), y)
    assert "inner [4, 5]" in g.report["program"], g.report["program"]
    check(lambda t: t.sum((0, 2)), y)


def test_where_on_bool_buffers_matches_eager():
    # bool inputs and intermediates are stored as bytes (so the loops vectorise) and still read
    # as bool: a mask input, a comparison result stored for another kernel, a bool output
    x = torch.randn(64, 300)
    m = torch.rand(64, 300) > 0.5
    check(lambda t, k: (torch.where(k, t * 2, t.relu()), torch.where(k, t > 0, t < -1), k.sum(1)), x, m)
    check(lambda t, k: torch.where(k, t * 0.5, t / 3).sum(0), x, m)


def test_several_column_sums_share_one_blocked_kernel():
    # layer_norm's weight and bias gradients: two sums over the leading dims of [B, T, C], emitted
    # column-blocked in one kernel (with an outer epilogue), and an unrelated pointwise value of
    # the same shape is not pulled into their strided loops
    g, x, w = torch.randn(4, 96, 80), torch.randn(4, 96, 80), torch.randn(80)
    fn = lambda a, b, c: ((a * b).sum((0, 1)) * c, a.sum((0, 1)), a * c + b)  # noqa: E731
    f = fused(fn, g, x, w)
    sums = [k for k in f.report["kernels"] if "accv" in k["source"]]
    assert len(sums) == 1 and sums[0]["source"].count("[64];") == 2, f.report["program"]
    assert len(f.report["kernels"]) == 2, f.report["program"]
    check(fn, g, x, w)
    # in float32 over more than 4096 rows the blocked sums accumulate in double
    y = torch.randn(8192, 3) + 1.0
    got = fused(lambda a: (a.sum(0), (a * a).sum(0)), y)(y)
    ref = (y.double().sum(0), (y.double() ** 2).sum(0))
    for a, r in zip(got, ref):
        assert ((a.double() - r).abs() / r.abs()).max().item() < 2e-7


def test_var_mean_lowered_as_two_row_reductions():
    # what the layer_norm decomposition writes (correction 0, keepdim), and the unbiased form
    x = torch.randn(6, 5, 33) * 3 + 2
    f = check(lambda t: torch.ops.aten.var_mean.correction(t, [2], correction=0, keepdim=True), x)
    assert not f.report["externs"]
    check(lambda t: torch.ops.aten.var_mean.correction(t, [0, 2], correction=1, keepdim=True), x)
    check(lambda t: torch.var_mean(t.double(), [1], unbiased=True, keepdim=True), x)


def test_var_mean_forms_not_lowered_run_in_aten():
    x = torch.randn(4, 7)
    f = check(lambda t: torch.var_mean(t, [1], unbiased=False, keepdim=False), x, expect_no_extern=False)
    assert [n.split("_")[0] for n, _ in f.report["externs"]] == ["var", "getitem", "getitem"]
    # N - correction = 0: eager's nan variance comes from ATen
    f = check(lambda t: torch.var_mean(t, [0], unbiased=True, keepdim=True), x[:1].clone(), expect_no_extern=False)
    assert [n.split("_")[0] for n, _ in f.report["externs"]] == ["var", "getitem", "getitem"]


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat_inputs_store_into_slices_of_one_buffer(dim):
    # each input is computed by its kernel straight into its slice: no cat copy, no extern
    a, b = torch.randn(4, 6), torch.randn(4, 6)
    c = torch.randn(4, 6).t().contiguous().t()          # non-contiguous input
    f = check(lambda x, y, z: torch.relu(torch.cat([x.exp(), y * 2, z], dim=dim)) + 1, a, b, c)
    assert "cat" in f.report["program"]


def test_cat_of_different_sizes_zero_size_and_as_output():
    a, b, e = torch.randn(3, 2, 5), torch.randn(3, 4, 5), torch.randn(3, 0, 5)
    # (inputs of other shapes iterate other spaces: one kernel each; the empty one stores nothing)
    f = check(lambda x, y, z: torch.cat((x.neg(), z, y.abs()), 1), a, b, e, expect_kernels=2)
    assert "b3[10 + 30*x0 + 1*x1] = abs(" in f.report["program"], f.report["program"]  # y's slice


def test_cat_of_mixed_dtypes_stays_extern():
    a, b = torch.randn(3, 4), torch.randn(3, 4, dtype=torch.float64)
    f = check(lambda x, y: torch.cat([x.neg(), y], 0), a, b, expect_no_extern=False)
    assert [n for n, _ in f.report["externs"]] == ["cat"]


# Explicit SIMD (codegen/src/emit.cpp, kVectorHelpers): contiguous float32 pointwise kernels whose
# last dim has 8 or more points run 8 lanes at a time where the compiler targets AVX2, the rest of
# the last dim (and every strided kernel) as scalar code. A strided view of the same numbers takes
# the scalar loop, so the two paths are compared bit for bit.
_SPECIALS = [float("nan"), -float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.0, -1.0, 0.5,
             -2.5, 3e38, -3e38, 1e-45, -1e-45, 88.9, -104.5]


def _strided(t):
    """t's numbers in a view whose last dim has stride 2 (the kernel keeps its scalar loop)."""
    return torch.stack([t, torch.zeros_like(t)], -1)[..., 0]


def _same_bits(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype
    nan_a, nan_b = a.isnan(), b.isnan()
    assert torch.equal(nan_a, nan_b)
    assert torch.equal(a[~nan_a].view(torch.int32), b[~nan_b].view(torch.int32))


def _pairs():
    # every ordered pair of the specials, 256 points: 32 vector steps, no remainder; plus 5 more
    a = torch.tensor(_SPECIALS).repeat_interleave(len(_SPECIALS))
    b = torch.tensor(_SPECIALS).repeat(len(_SPECIALS))
    return torch.cat([a, a[:5]]), torch.cat([b, b[7:12]])


def _vector_source(f):
    return [k["source"] for k in f.report["kernels"] if "dyn_vstore" in k["source"]]


_HAS_AVX2 = " avx2" in open("/proc/cpuinfo").read()
_UNARY = {
    "relu": torch.relu, "clamp": lambda a: a.clamp(-1, 1), "clamp_min": lambda a: a.clamp_min(0),
    "clamp_max": lambda a: a.clamp_max(0.5), "abs": torch.abs, "neg": torch.neg, "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt, "reciprocal": torch.reciprocal, "exp": torch.exp, "sigmoid": torch.sigmoid,
    "chain6": lambda a: ((a * 2 + 1).relu() * 0.5 - 0.25).sigmoid(),
}
_BINARY = {"maximum": torch.maximum, "minimum": torch.minimum, "div": torch.div, "max_scaled":
           lambda a, b: torch.maximum(a * 2, b).relu(), "min_sub": lambda a, b: torch.minimum(a, b - 1).abs()}


@pytest.mark.parametrize("name", sorted(_UNARY) + sorted(_BINARY))
def test_vector_helpers_match_scalar_bits(name):
    # NaN (both signs), +-inf, +-0.0, denormals, large and ordinary values in every ordered pair
    a, b = _pairs()
    fn, inputs = (_UNARY[name], (a,)) if name in _UNARY else (_BINARY[name], (a, b))
    f = fused(fn, *inputs)
    got = f(*inputs)
    if _HAS_AVX2:
        assert _vector_source(f), "the contiguous kernel should have a vector loop"
    strided = [_strided(t) for t in inputs]
    g = fused(fn, *strided)
    assert not _vector_source(g)
    _same_bits(got, g(*strided))
    # and as eager: NaN where eager has NaN, equal values elsewhere (the sign of a zero from
    # maximum/minimum is not compared: eager's own vector and scalar loops differ there); the
    # float functions within float32 tolerance (torch 2.11's eager sqrt is 1 ulp off the
    # correctly rounded one, which both our loops give, for some of these inputs)
    approx = name in ("exp", "sigmoid", "chain6", "sqrt", "rsqrt", "reciprocal", "div")
    torch.testing.assert_close(got, fn(*inputs), rtol=2e-6 if approx else 0, atol=1e-6 if approx else 0,
                               equal_nan=True)


def test_vector_exp_sigmoid_match_scalar_bits_over_range():
    x = torch.linspace(-110, 90, 400003)
    for fn in (torch.exp, torch.sigmoid, lambda t: (t * 2 + 1).relu().sigmoid()):
        f, g = fused(fn, x), fused(fn, _strided(x))
        assert not _vector_source(g)
        _same_bits(f(x), g(_strided(x)))


def test_sigmoid_edges_vector_and_scalar():
    # float32 sigmoid computes exp(-x) clamped to [-86, 88.8] with 2^n as 2^(n-1) * 2: the band
    # where 2^n overflows alone (x in [-88.72, -88.38]: results denormal), the lower clamp (x
    # near 86: 1 + exp(-x) is 1), where exp(-x) overflows (x < -88.72: 0, as ATen), infinities,
    # NaN, signed zeros and denormal inputs; the vector and the scalar loop give the same bits,
    # and the values are eager's within float32 tolerance (denormal results: absolutely)
    x = torch.cat([torch.tensor([-float("inf"), float("inf"), float("nan"), -0.0, 0.0, 1e-45, -1e-45, 1e-39,
                                 -88.72, -88.73, -88.38, -88.37, -100.0, -104.0, -105.0, 86.0, 87.0, 17.0]),
                   torch.linspace(-90, -84, 6001), torch.linspace(84, 90, 601), torch.linspace(15, 20, 501)])
    f, g = fused(torch.sigmoid, x), fused(torch.sigmoid, _strided(x))
    got = f(x)
    if _HAS_AVX2:
        assert _vector_source(f), "the contiguous kernel should have a vector loop"
    assert not _vector_source(g)
    _same_bits(got, g(_strided(x)))
    want = torch.sigmoid(x)
    torch.testing.assert_close(got, want, rtol=2e-6, atol=1e-37, equal_nan=True)
    assert got[0].item() == 0.0 and got[1].item() == 1.0 and got[2].isnan()
    assert (got[x < -88.73] == 0).all() and (got[x >= 84] == 1).all()
    # float64 keeps libm's exp: within 1e-15 of eager
    xd = x.double()
    torch.testing.assert_close(fused(torch.sigmoid, xd)(xd), torch.sigmoid(xd), rtol=1e-15, atol=1e-300,
                               equal_nan=True)


def test_vector_loops_shapes_broadcasts_scalars():
    # 2-D with a remainder, a row broadcast (uniform along the last dim), a column broadcast, a
    # Python float read at call time (a kScalar), several outputs, zero-size and short last dims
    a, row, col = torch.randn(6, 21), torch.randn(6, 1), torch.randn(21)
    check(lambda x, r, c: ((x - r) * c).relu().sigmoid(), a, row, col, expect_kernels=1)
    check(lambda x: (x.exp(), torch.maximum(x, x * 0.5)), torch.randn(3, 4, 17), expect_kernels=1)
    check(lambda x: x.clamp(-0.5, 0.5) * 3, torch.randn(0, 9))
    check(lambda x: x.sigmoid() * 2, torch.randn(7, 5))
    for n in (8, 9, 15, 16, 31):
        check(lambda x: (x * 2 + 1).relu().sigmoid(), torch.randn(n), expect_kernels=1)


def test_vector_kernel_has_scalar_fallback():
    # the vector loop is compiled only where the kernel's compiler targets AVX2; elsewhere the
    # kernel is the scalar loop (checked by compiling the source without AVX2 and running it)
    import ctypes
    import subprocess
    import tempfile
    x = torch.randn(37)
    f = fused(lambda t: (t * 2).relu().sigmoid(), x)
    src = f.report["kernels"][0]["source"]
    assert "#if defined(__AVX2__)" in src and "#else" in src
    name = f.report["kernels"][0]["name"]
    with tempfile.TemporaryDirectory() as d:
        so = os.path.join(d, "k.so")
        subprocess.run(["c++", "-O2", "-mno-avx", "-fopenmp", "-fPIC", "-shared", "-fno-math-errno", "-x", "c++",
                        "-", "-o", so], input=src.encode(), check=True)
        out = torch.empty_like(x)
        args = (ctypes.c_void_p * 2)(x.data_ptr(), out.data_ptr())
        getattr(ctypes.CDLL(so), name)(args)
    _same_bits(out, f(x))
