"""Matmul steps of the fused backend (codegen/src/lower_matmul.cpp): linear / mm / addmm computed
with at::mm_out into pooled memory, the bias and what follows (activation, residual) one fused
kernel over the product; eval-mode dropout an alias. Results against eager and a float64 run."""
import torch
import torch.nn.functional as F

import dynamo
from fused_harness import fused, reference


def close_to_reference(got, fn, *inputs):
    """got within float32 tolerance of fn's float64 result, scaled by eager's own error."""
    want, ref = fn(*inputs), reference(fn, *inputs)
    err_eager = (want.double() - ref).abs().max().item()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert (got.double() - ref).abs().max().item() <= 2 * err_eager + 1e-6


def torch_level(fn, *inputs):
    """fn as the torch-level graph capture makes (F.linear, F.gelu, F.dropout calls), compiled."""
    import dynamo._C as C
    from fused_harness import to_dynamo_graph
    gm = torch.fx.symbolic_trace(fn)
    return C._codegen.compile(to_dynamo_graph(gm, inputs).serialize(), list(inputs))


def mlp(x, w1, b1, w2, b2):
    return x + F.dropout(F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2), 0.1, training=False)


def test_linear_bias_gelu_and_residual_fuse_after_the_product():
    fc1, fc2 = torch.nn.Linear(64, 256), torch.nn.Linear(256, 64)
    args = (torch.randn(32, 64), fc1.weight.detach(), fc1.bias.detach(), fc2.weight.detach(), fc2.bias.detach())
    f = torch_level(mlp, *args)
    prog = f.report["program"]
    # two matmul steps; bias + gelu one kernel, bias + dropout (eval: an alias) + residual another
    assert prog.count("matmul #") == 2 and len(f.report["kernels"]) == 2, prog
    assert f.report["externs"] == [("linear", "matmul step (at::mm_out; the bias is fused into the epilogue)"),
                                   ("linear_1", "matmul step (at::mm_out; the bias is fused into the epilogue)")]
    close_to_reference(f(*args), mlp, *args)
    close_to_reference(f(*args), mlp, *args)  # second call: pooled blocks reused


def test_module_mlp_through_dynamo_matches_eager():
    m = torch.nn.Sequential(torch.nn.Linear(96, 384), torch.nn.GELU(), torch.nn.Linear(384, 96),
                            torch.nn.Dropout(0.1)).eval()
    x = torch.randn(40, 96)
    with torch.no_grad():
        got = dynamo.optimize("fused")(lambda t: t + m(t))(x)
        want = x + m(x)
        ref = x.double() + m.double()(x.double())
    m.float()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert (got.double() - ref).abs().max().item() <= 2 * (want.double() - ref).abs().max().item() + 1e-6


def test_aten_mm_and_addmm_with_epilogues():
    a, b, bias = torch.randn(48, 80), torch.randn(80, 56), torch.randn(56)
    fn = lambda x, y, z: torch.relu(torch.ops.aten.addmm(z, x, y)) * 2 + torch.ops.aten.mm(x, y)  # noqa: E731
    f = fused(fn, a, b, bias)
    prog = f.report["program"]
    assert prog.count("matmul #") == 2, prog
    assert len(f.report["kernels"]) == 1, prog  # bias, relu, scale and the sum: one pass
    close_to_reference(f(a, b, bias), fn, a, b, bias)


def test_linear_of_3d_input_and_non_contiguous_operands():
    x = torch.randn(4, 10, 32)
    w = torch.randn(32, 24).t()   # [24, 32] non-contiguous weight
    bias = torch.randn(24)
    fn = lambda t, ww, bb: F.gelu(F.linear(t, ww, bb))  # noqa: E731
    f = fused(fn, x, w, bias)
    assert "matmul #" in f.report["program"], f.report["program"]
    close_to_reference(f(x, w, bias), fn, x, w, bias)
    # a plain product escaping as the output
    g = fused(lambda p, q: torch.ops.aten.mm(p, q), torch.randn(8, 16), torch.randn(16, 4).t().contiguous().t())
    p, q = torch.randn(8, 16), torch.randn(16, 4).t().contiguous().t()
    torch.testing.assert_close(g(p, q), p @ q, rtol=1e-5, atol=1e-5)


def test_training_dropout_and_float64_stay_extern():
    x, w = torch.randn(8, 16, dtype=torch.float64), torch.randn(4, 16, dtype=torch.float64)
    f = fused(lambda t, ww: F.linear(t, ww).relu(), x, w)
    assert "matmul #" not in f.report["program"]
    torch.testing.assert_close(f(x, w), F.linear(x, w).relu())
    y = torch.randn(8, 16)
    with torch.no_grad():
        torch.manual_seed(0)
        got = dynamo.optimize("fused")(lambda t: F.dropout(t, 0.5, training=True) * 2)(y)
    assert ((got == 0) | (got == y * 4)).all()


def test_zero_size_and_weight_updates_between_calls():
    # an empty inner dim gives zeros (+ bias), an empty batch an empty result, as eager
    fn = lambda t, ww, bb: torch.relu(F.linear(t, ww, bb))  # noqa: E731
    for x, w in ((torch.randn(5, 0), torch.randn(3, 0)), (torch.randn(0, 4), torch.randn(3, 4))):
        bias = torch.randn(3)
        f = torch_level(fn, x, w, bias)
        assert "matmul #" in f.report["program"]
        torch.testing.assert_close(f(x, w, bias), fn(x, w, bias))
    # weights are read at each call (no cached copy): an update is seen
    x, w, bias = torch.randn(6, 4), torch.randn(3, 4), torch.randn(3)
    f = torch_level(fn, x, w, bias)
    f(x, w, bias)
    w.mul_(-2)
    torch.testing.assert_close(f(x, w, bias), fn(x, w, bias), rtol=1e-5, atol=1e-5)


def _has_dnnl():
    import os
    import re
    cache = os.path.join(os.environ.get("DYNAMO_BUILD_DIR", ""), "CMakeCache.txt")
    return os.path.exists(cache) and re.search(r"^DYNAMO_DNNL_LIBRARY:FILEPATH=.*dnnl", open(cache).read(), re.M) is not None


def test_bmm_steps_match_eager_for_strided_operands(monkeypatch, capfd):
    # bmm steps run oneDNN's batched matmul (backends/src/fused_dnnl_matmul.cpp) when the build
    # has it, made from the first call's strides: transposed operands, a batch stride 0 (an
    # expanded weight) and a strided batch all give eager's product within float32 tolerance.
    monkeypatch.setenv("DYNAMO_LOGS", "fusion")
    fn = lambda p, q: torch.ops.aten.bmm(p, q) * 2  # noqa: E731
    base = torch.randn(6, 24, 16)
    operands = [
        (torch.randn(6, 24, 16), torch.randn(6, 16, 8)),                          # contiguous
        (torch.randn(6, 16, 24).transpose(1, 2), torch.randn(6, 8, 16).transpose(1, 2)),  # both transposed
        (base[::2], torch.randn(16, 8).expand(3, 16, 8)),                          # strided batch, stride 0
    ]
    for a, b in operands:
        f = fused(fn, a, b)
        assert "bmm #" in f.report["program"], f.report["program"]
        close_to_reference(f(a, b), fn, a, b)
        # the operands change between calls: the product reads them again
        a2, b2 = a * -1.5, b + 1
        close_to_reference(f(a2, b2), fn, a2, b2)
    err = capfd.readouterr().err
    if _has_dnnl() and torch.__version__.startswith("1."):
        # (with torch 2.x's own oneDNN loaded, Debian's primitive may refuse to execute: the step
        # then says "ATen (...)" and runs at::bmm_out, as checked by the results above)
        assert "bmm step 0: oneDNN" in err, err
    # the ATen path (DYNAMO_FUSED_NO_DNNL_BMM=1, read per compile) gives the same within tolerance
    monkeypatch.setenv("DYNAMO_FUSED_NO_DNNL_BMM", "1")
    a, b = operands[1]
    f = fused(fn, a, b)
    close_to_reference(f(a, b), fn, a, b)
    assert "bmm step" not in capfd.readouterr().err


def _openblas_loaded():
    import ctypes
    try:
        ctypes.CDLL("libopenblas.so.0", mode=getattr(__import__("os"), "RTLD_NOLOAD", 4))
        return True
    except OSError:
        return False


def test_mm_steps_on_the_openmp_pool_match_eager(monkeypatch, capfd):
    # With 2+ torch threads and OpenBLAS as torch's BLAS, an mm step runs one single-threaded
    # OpenBLAS GEMM per OpenMP thread over its rows (result taller than wide) or its columns
    # (backends/src/fused_blas_split.cpp); operands without a unit stride take at::mm_out.
    monkeypatch.setenv("DYNAMO_LOGS", "fusion")
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        fn = lambda p, q: torch.ops.aten.mm(p, q) * 2  # noqa: E731
        operands = [
            (torch.randn(37, 16), torch.randn(16, 5)),                   # split by rows, odd
            (torch.randn(3, 16), torch.randn(16, 41)),                   # split by columns
            (torch.randn(16, 37).t(), torch.randn(41, 16).t()),          # both transposed
            (torch.randn(1, 16), torch.randn(16, 1)),                    # one element: one part
            (torch.randn(24, 32)[:, ::2], torch.randn(16, 8)),           # no unit stride: ATen
            (torch.randn(64, 48)[8:40, 4:20], torch.randn(20, 30)[2:18, 1:26]),  # row strides > cols
        ]
        for a, b in operands:
            f = fused(fn, a, b)
            assert "matmul #" in f.report["program"], f.report["program"]
            close_to_reference(f(a, b), fn, a, b)
            a2, b2 = a * -1.5, b + 1        # new values between calls: read again
            close_to_reference(f(a2, b2), fn, a2, b2)
        # a linear of a 3-d input with its bias and gelu fused after the product (the weight read
        # transposed in place)
        x, w, bias = torch.randn(4, 10, 32), torch.randn(24, 32), torch.randn(24)
        lin = lambda t, ww, bb: F.gelu(F.linear(t, ww, bb))  # noqa: E731
        close_to_reference(fused(lin, x, w, bias)(x, w, bias), lin, x, w, bias)
        err = capfd.readouterr().err
        if _openblas_loaded():
            assert err.count("mm step 0: OpenBLAS on the OpenMP pool") == 6, err
            assert err.count("mm step 0: ATen (operand strides)") == 1, err
        # DYNAMO_FUSED_BLAS_POOL=0 (read per compile): at::mm_out, same values within tolerance
        monkeypatch.setenv("DYNAMO_FUSED_BLAS_POOL", "0")
        a, b = operands[0]
        close_to_reference(fused(fn, a, b)(a, b), fn, a, b)
        assert "mm step" not in capfd.readouterr().err
        # one torch thread: at::mm_out as well
        monkeypatch.delenv("DYNAMO_FUSED_BLAS_POOL")
        torch.set_num_threads(1)
        close_to_reference(fused(fn, a, b)(a, b), fn, a, b)
        assert "mm step" not in capfd.readouterr().err
    finally:
        torch.set_num_threads(threads)


def test_mm_steps_on_the_openmp_pool_from_two_threads():
    # Two Python threads calling one compiled mm function at once: each call's split GEMM is
    # right, and OpenBLAS's process-wide thread count (1 while any split GEMM runs) is back to
    # what it was once both are done.
    import ctypes
    import threading

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        fn = lambda p, q: torch.ops.aten.mm(p, q) + 1  # noqa: E731
        a, b = torch.randn(96, 64), torch.randn(64, 80)
        f = fused(fn, a, b)
        blas = ctypes.CDLL("libopenblas.so.0") if _openblas_loaded() else None
        before = blas.openblas_get_num_threads() if blas else None
        errors = []

        def worker(seed):
            g = torch.Generator().manual_seed(seed)
            try:
                for _ in range(20):
                    p, q = torch.randn(96, 64, generator=g), torch.randn(64, 80, generator=g)
                    close_to_reference(f(p, q), fn, p, q)
            except Exception as e:  # reported below, with the thread's seed
                errors.append((seed, e))

        ts = [threading.Thread(target=worker, args=(s,)) for s in (1, 2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errors, errors
        if blas:
            assert blas.openblas_get_num_threads() == before
    finally:
        torch.set_num_threads(threads)


def _torch_has_dnnl_linear():
    return hasattr(torch.ops, "mkldnn") and hasattr(torch.ops.mkldnn, "_linear_pointwise") and \
        torch.backends.mkldnn.is_available()


def test_large_inference_mm_steps_take_torchs_onednn_linear(monkeypatch, capfd):
    # An inference graph's mm step of at least 2^24 multiply-adds whose right operand is a
    # contiguous [n, k] weight read transposed runs torch's mkldnn::_linear_pointwise where torch
    # registers it (torch 2.x; backends/src/fused_torch_linear.h); torch 1.13 has no such op and
    # keeps at::mm_out. Either way the MLP block matches eager and the fp64 reference, and a weight
    # changed in place between calls is read again (nothing packed is kept).
    monkeypatch.setenv("DYNAMO_LOGS", "fusion")
    fc1, fc2 = torch.nn.Linear(256, 1024), torch.nn.Linear(1024, 256)
    args = [torch.randn(128, 256), fc1.weight.detach().clone(), fc1.bias.detach(),
            fc2.weight.detach().clone(), fc2.bias.detach()]
    f = fused(mlp, *args)
    close_to_reference(f(*args), mlp, *args)
    args[1].mul_(-0.5)
    args[3].add_(0.25)
    close_to_reference(f(*args), mlp, *args)
    err = capfd.readouterr().err
    dnnl_steps = err.count("oneDNN linear (torch's mkldnn::_linear_pointwise)")
    assert dnnl_steps == (2 if _torch_has_dnnl_linear() else 0), err
    # below 2^24 multiply-adds (here 32 * 64 * 256), and with DYNAMO_FUSED_NO_DNNL_MM=1 (read per
    # compile): at::mm_out
    small = [torch.randn(32, 64), torch.randn(256, 64), torch.randn(256), torch.randn(64, 256), torch.randn(64)]
    close_to_reference(fused(mlp, *small)(*small), mlp, *small)
    monkeypatch.setenv("DYNAMO_FUSED_NO_DNNL_MM", "1")
    close_to_reference(fused(mlp, *args)(*args), mlp, *args)
    assert "oneDNN linear" not in capfd.readouterr().err
