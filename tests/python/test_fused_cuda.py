"""The CUDA side of the fused generator, without a GPU: every generated CUDA kernel compiles with
NVRTC to CUBIN for sm_80 and sm_90 (and to PTX for compute_80), the CUBIN's symbol table lists the
kernel (cuobjdump is not installed here: the ELF is read directly), and the same CUDA bodies,
compiled for the host with a shim that walks the grid, give eager's results."""
import os
import sys

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from fused_harness import aten_graph, fused  # noqa: E402

import dynamo._C as C  # noqa: E402

EM_CUDA = 190

CASES = {
    "chain": (lambda x, y: ((x * 2 + y).relu().sigmoid() - 0.5).tanh(), lambda: (torch.randn(33, 17), torch.randn(17))),
    "softmax": (lambda x: torch.softmax(x, -1), lambda: (torch.randn(9, 40),)),
    "log_softmax_dim0": (lambda x: torch.log_softmax(x, 0), lambda: (torch.randn(12, 5),)),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (24,), w, b), lambda: (torch.randn(6, 24), torch.randn(24), torch.randn(24))),
    "sum_mean": (lambda x: (x.sum(1), x.mean(0, keepdim=True), x.amax(1)), lambda: (torch.randn(10, 7, dtype=torch.float64),)),
    "int_where": (lambda a, b: torch.where(a > b, a * 3, b - 1), lambda: (torch.randint(-9, 9, (300,)), torch.randint(-9, 9, (300,)))),
    "noncontig_gelu": (lambda x: F.gelu(x) + x.clamp(-1, 1), lambda: (torch.randn(16, 20).t(),)),
}

nvrtc_ok, nvrtc_info = C._codegen.nvrtc_available()


@pytest.mark.skipif(not nvrtc_ok, reason=f"NVRTC not available: {nvrtc_info}")
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_kernel_compiles_to_cubin_and_ptx(case):
    fn, make = CASES[case]
    f = fused(fn, *make())
    assert f.report["kernels"], f.report["program"]
    for k in f.report["kernels"]:
        for arch in ("sm_80", "sm_90"):
            ok, log, cubin = C._codegen.nvrtc_compile(k["cuda_source"], k["name"], arch)
            assert ok, f"{arch}: {log}\n{k['cuda_source']}"
            machine, functions = C._codegen.cubin_functions(cubin)
            assert machine == EM_CUDA
            assert k["name"] in functions, functions
        ok, log, ptx = C._codegen.nvrtc_compile(k["cuda_source"], k["name"], "compute_80")
        assert ok, log
        assert f".entry {k['name']}(" in ptx.decode()


@pytest.mark.parametrize("case", sorted(CASES))
def test_cuda_bodies_match_eager_through_the_host_shim(case):
    fn, make = CASES[case]
    inputs = make()
    f = fused(fn, *inputs, cuda_host_shim=True)
    got, want = f(*inputs), fn(*inputs)
    got = got if isinstance(got, (tuple, list)) else [got]
    want = want if isinstance(want, (tuple, list)) else [want]
    for g, w in zip(got, want):
        if w.is_floating_point():
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
        else:
            assert torch.equal(g, w)


def test_cubin_reader_rejects_non_elf():
    assert C._codegen.cubin_functions(b"not an elf") == (0, [])


def test_gpu_execution():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here (torch.cuda.is_available() is False): launching the fused "
                    "kernels through the driver API is not built yet; CUBINs are checked above")
    pytest.skip("a GPU is present but the CUDA launch path of the fused backend is not built yet")


# Lowered at three sizes in one size scope: the first lowering is the family's reference (literal
# sizes), the second and third take the sizes that moved from `dyn_params`, with the same text.
SIZED = {
    "softmax": (lambda x: torch.softmax(x, -1), lambda n: (torch.randn(n, 40),)),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (24,), w, b), lambda n: (torch.randn(n, 24), torch.randn(24), torch.randn(24))),
    "sum_mean": (lambda x: (x.sum(1), x.mean(0, keepdim=True), x.amax(1)), lambda n: (torch.randn(n, 7, dtype=torch.float64),)),
    "chain_2d": (lambda x, y: ((x * 2 + y).relu().sigmoid() - 0.5).tanh(), lambda n: (torch.randn(n, 2 * n + 1), torch.randn(2 * n + 1))),
}


def _sized_sources(case, scope):
    fn, make = SIZED[case]
    sources = []
    for n in (6, 9, 23):
        torch.manual_seed(n)
        inputs = make(n)
        _, g = aten_graph(fn, *inputs)
        f = C._codegen.compile(g.serialize(), list(inputs), cuda_host_shim=True, size_scope=scope)
        got, want = f(*inputs), fn(*inputs)
        got = got if isinstance(got, (tuple, list)) else [got]
        want = want if isinstance(want, (tuple, list)) else [want]
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
        sources.append({k["name"]: k["source"] for k in f.report["kernels"]})
    return sources


@pytest.mark.parametrize("case", sorted(SIZED))
def test_cuda_kernels_read_the_sizes_that_vary_from_a_parameter_array(case):
    sources = _sized_sources(case, f"test_fused_cuda.sized:{case}")
    assert sources[1] == sources[2]  # one CUDA source (one NVRTC compile) for sizes 9 and 23
    assert sources[0] != sources[1]  # size 6: the reference, literal sizes
    assert all("dyn_p[0]" in s for s in sources[1].values()), sources[1]
    assert not any("dyn_p[" in s for s in sources[0].values())


@pytest.mark.skipif(not nvrtc_ok, reason=f"NVRTC not available: {nvrtc_info}")
@pytest.mark.parametrize("case", sorted(SIZED))
def test_parametrised_cuda_kernels_compile_with_nvrtc(case):
    sources = _sized_sources(case, f"test_fused_cuda.nvrtc:{case}")
    for name, src in sources[2].items():
        ok, log, cubin = C._codegen.nvrtc_compile(src, name, "sm_80")
        assert ok, f"{log}\n{src}"
        assert name in C._codegen.cubin_functions(cubin)[1]


# A Python int and a Python float graph input read by the kernel at call time (docs/codegen.md,
# "Python numbers read at call time"): the first entries of `dyn_params`, before any size.
def _number_graph(x, n, lr):
    import operator
    b = C._graph.GraphBuilder()
    px = b.placeholder("x", name="x", tensor_meta=x)
    pn = b.placeholder("n", name="n", tensor_meta=None)
    plr = b.placeholder("lr", name="lr", tensor_meta=None)
    m = b.call_function(operator.mul, (px, pn), {}, name="mul", tensor_meta=x * n)
    a = b.call_function(operator.add, (m, plr), {}, name="add", tensor_meta=x * n + lr)
    r = b.call_function(torch.relu, (a,), {}, name="relu", tensor_meta=(x * n + lr).relu())
    b.output(r)
    return b.build()


def test_a_number_read_at_call_time_runs_through_the_host_shim_at_every_value():
    x = torch.randn(300)
    f = C._codegen.compile(_number_graph(x, 3, 0.5).serialize(), [x, 3, 0.5], cuda_host_shim=True)
    src = f.report["kernels"][0]["cuda_source"]
    assert "const long long dyn_a0 = dyn_params[0];  // a Python int, read at call time" in src, src
    assert "const double dyn_a1 = dyn_bits_double(dyn_params[1]);  // a Python float, read at call time" in src, src
    for n, lr in [(3, 0.5), (-7, 0.25), (2**53 + 2**29 + 1, -1.5), (5, float("inf"))]:
        want = (x * n + lr).relu()
        scale = want.nan_to_num(0.0, 0.0, 0.0).abs().max().item()
        torch.testing.assert_close(f(x, n, lr), want, rtol=1e-5, atol=1e-5 * max(scale, 1.0))


@pytest.mark.skipif(not nvrtc_ok, reason=f"NVRTC not available: {nvrtc_info}")
def test_a_number_read_at_call_time_compiles_with_nvrtc():
    x = torch.randn(300)
    f = C._codegen.compile(_number_graph(x, 3, 0.5).serialize(), [x, 3, 0.5], cuda_host_shim=True)
    k = f.report["kernels"][0]
    ok, log, cubin = C._codegen.nvrtc_compile(k["cuda_source"], k["name"], "sm_80")
    assert ok, f"{log}\n{k['cuda_source']}"
    assert k["name"] in C._codegen.cubin_functions(cubin)[1]
