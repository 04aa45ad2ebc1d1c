"""The "fused" backend end to end through dynamo.optimize: torch-level inference graphs from capture
lowered directly, outputs as eager; training graphs through the AOT layer (test_fused_training.py
has the numerics); in-place ops; the disk cache; DYNAMO_LOGS=fusion,output_code."""
import os
import subprocess
import sys

import torch
import torch.nn.functional as F

import dynamo


def test_listed_backend():
    assert "fused" in dynamo.list_backends()


def test_torch_level_graph_is_fused_and_matches_eager():
    def f(x, y):
        z = torch.relu(x * 2 + y)
        return torch.softmax(z, -1) - F.gelu(z).sum(-1, keepdim=True), x.mean(), z.sigmoid().amax(0)

    x, y = torch.randn(64, 128), torch.randn(128)
    got = dynamo.optimize("fused")(f)(x, y)
    want = f(x, y)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def test_methods_operators_and_module_layers():
    m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32),
                            torch.nn.LayerNorm(32)).eval()
    x = torch.randn(16, 32)
    with torch.no_grad():
        got = dynamo.optimize("fused")(lambda t: m(t).tanh() * 0.5 + t.clamp(-1, 1) / 3)(x)
        want = m(x).tanh() * 0.5 + x.clamp(-1, 1) / 3
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_graphs_needing_grad_go_through_the_aot_layer_and_backpropagate():
    lin = torch.nn.Linear(8, 8)
    x = torch.randn(4, 8)
    out = dynamo.optimize("fused")(lambda a: (lin(a).relu() * 2).sum())(x)
    out.backward()
    assert lin.weight.grad is not None
    want = torch.autograd.grad((lin(x).relu() * 2).sum(), lin.weight)[0]
    torch.testing.assert_close(lin.weight.grad, want)


def test_in_place_ops_keep_their_effects():
    def f(x, buf):
        y = x * 2
        buf.add_(1)            # an extern in-place op: a barrier for fusion
        return y + buf, F.relu(y, inplace=False)

    x, b1, b2 = torch.randn(5, 6), torch.zeros(5, 6), torch.zeros(5, 6)
    got = dynamo.optimize("fused")(f)(x, b1)
    want = f(x, b2)
    assert torch.equal(b1, b2)
    for g, w in zip(got, want):
        assert torch.equal(g, w)


def _run(code, env):
    e = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=300)


CODE = """
import torch, dynamo
f = dynamo.optimize("fused")(lambda x: (x * 3 + 1).relu().exp())
x = torch.randn(1000)
assert torch.allclose(f(x), (x * 3 + 1).relu().exp(), rtol=1e-5)
"""


def test_disk_cache_and_logs(tmp_path):
    env = {"DYNAMO_KERNEL_CACHE": str(tmp_path / "kernels"), "DYNAMO_LOGS": "fusion,output_code"}
    first = _run(CODE, env)
    assert first.returncode == 0, first.stderr
    assert "[dynamo fusion] <lambda>" in first.stderr
    assert "b1[1*x0] = exp(max(add(mul(b0[1*x0], 3:float32), 1:float32), 0:float32))" in first.stderr
    assert "(outer [1000] inner [], compiled)" in first.stderr
    assert '#pragma omp parallel for' in first.stderr
    sos = list((tmp_path / "kernels").glob("*.so"))
    assert len(sos) == 1 and len(sos[0].stem) == 64   # sha256-named
    second = _run(CODE, env)
    assert second.returncode == 0, second.stderr
    assert "(outer [1000] inner [], cache hit)" in second.stderr
    assert list((tmp_path / "kernels").glob("*.tmp")) == []


def test_in_place_ops_on_owned_tensors_are_lowered_functionally():
    def f(a, b):
        y = a * 2
        y.relu_()              # y is the graph's own: lowered as relu, later reads of y see it
        z = y + b
        z += 1                 # operator.iadd on an owned tensor
        return torch.relu_(z), y

    a, b = torch.randn(4, 5), torch.randn(4, 5)
    got = dynamo.optimize("fused")(f)(a, b)
    want = f(a, b)
    for g, w in zip(got, want):
        assert torch.equal(g, w)


def test_in_place_op_on_a_tensor_an_extern_read_stays_in_place():
    def f(a):
        y = a * 2
        s = y.cumsum(0)        # an extern reads y before the mutation
        y.relu_()
        return s, y + 1

    a = torch.randn(6, 3)
    got = dynamo.optimize("fused")(f)(a)
    want = f(a)
    for g, w in zip(got, want):
        assert torch.equal(g, w)


def test_eval_batch_norm_relu_and_residual_match_eager():
    import torchvision
    m = torchvision.models.resnet18().eval()
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        got = dynamo.optimize("fused")(m)(x)
        want = m(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    bn = torch.nn.BatchNorm2d(7, affine=False).eval()
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)
    y = torch.randn(2, 7, 3, 5)
    with torch.no_grad():
        torch.testing.assert_close(dynamo.optimize("fused")(lambda t: bn(t).relu())(y), bn(y).relu())


def test_pooled_outputs_behave_like_eager_tensors():
    f = dynamo.optimize("fused")(lambda t: (t * 2).relu())
    x = torch.randn(256, 256)            # 256 KiB: from the block pool
    a = f(x)
    a.resize_(512, 512)                  # a pooled storage grows like eager's
    a.fill_(1.0)
    b = f(x)
    assert torch.equal(b, (x * 2).relu()) and a.sum().item() == 512 * 512
    del a
    c = f(x)                             # a freed block comes back to the pool: same values
    assert torch.equal(c, (x * 2).relu())


def test_a_returned_view_aliases_its_base_as_in_eager():
    def f(x):
        y = x * 2
        return x.t(), y.t(), y.t().t() + 1

    x = torch.randn(5, 7)
    got, want = dynamo.optimize("fused")(f)(x), f(x)
    assert got[0].data_ptr() == x.data_ptr() and got[0].stride() == want[0].stride()
    assert got[1].stride() == want[1].stride()       # a view of the graph's own value, as eager's
    for g, w in zip(got, want):
        assert torch.equal(g, w)


def test_erf_matches_eager():
    x = torch.cat([torch.linspace(-6, 6, 10001), torch.tensor([float("nan"), float("inf"), -float("inf")])])
    got, want = dynamo.optimize("fused")(lambda t: torch.erf(t * 1))(x), torch.erf(x)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1.5e-7, equal_nan=True)


def test_column_sums_match_eager():
    # sums over dim 0 (bias gradients) run with the loops exchanged: rows outer, columns vectorised
    x = torch.randn(300, 1000)
    for f in (lambda t: (t * 2).sum(0), lambda t: (t + 1).mean(0, keepdim=True), lambda t: t.relu().sum(0)):
        got, want = dynamo.optimize("fused")(f)(x), f(x)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)
        dynamo.reset()
    y = torch.randn(20000, 5) + 3    # a long float32 column sum accumulates in double
    got = dynamo.optimize("fused")(lambda t: (t * 1).sum(0))(y)
    torch.testing.assert_close(got.double(), y.double().sum(0), rtol=1e-6, atol=0)
