"""Training through the fused backend: graphs that need autograd go through the AOT layer (preset
"fused" of dynamo.aot.PRESETS: joint trace, decompositions, min-cut partition) and both the forward
and the backward graph are lowered to kernels.

Tolerance (float32): loss and gradients within rtol 1e-4 of eager (atol 1e-5, or 1e-4 of the
gradient's largest magnitude when that is larger: deep nets' gradients span many scales), and no further
from a float64 reference than 4x eager's own distance from it (+1e-6): the kernels reassociate
sums and use their own exp/erf, so bitwise equality is not expected (docs/codegen.md)."""
import copy

import pytest
import torch
import torch.nn.functional as F

import dynamo
import dynamo.aot as aot

from compile_fixtures import fresh_dynamo  # noqa: F401  (fixture)


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


@pytest.fixture
def reports(monkeypatch):
    """The FusedFunction reports of every forward/backward graph the preset compiles."""
    seen = []
    fw, bw = aot.COMPILERS["fused"]

    def wrap(kind, compiler):
        def compile_and_record(graph):
            fn = compiler(graph)
            seen.append((kind, fn.report))
            return fn
        return compile_and_record

    monkeypatch.setitem(aot.COMPILERS, "fused", (wrap("forward", fw), wrap("backward", bw)))
    return seen


def grads_of(model, loss_fn, *inputs):
    model.zero_grad(set_to_none=True)
    loss = loss_fn(model, *inputs)
    loss.backward()
    return loss.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def check_against_eager_and_fp64(model, loss_fn, *inputs):
    """Compiled loss/grads vs eager (float32) and a float64 copy; returns the compiled grads."""
    eager, compiled, ref = model, copy.deepcopy(model), copy.deepcopy(model).double()
    fn = dynamo.optimize("fused")(loss_fn)
    want_loss, want = grads_of(eager, loss_fn, *inputs)
    before = len(aot.last_records())
    got_loss, got = grads_of(compiled, fn, *inputs)
    records = aot.last_records()[before:]
    assert any(r["backend"] == "fused" and r.get("training") and not r["fallback"] for r in records), records
    ref_loss, ref_g = grads_of(ref, loss_fn, *[t.double() if t.is_floating_point() else t for t in inputs])
    assert got.keys() == want.keys() and got
    torch.testing.assert_close(got_loss, want_loss, rtol=1e-4, atol=1e-5)
    for name in want:
        atol = max(1e-5, 1e-4 * want[name].abs().max().item())
        torch.testing.assert_close(got[name], want[name], rtol=1e-4, atol=atol, msg=name)
        err_fused = (got[name].double() - ref_g[name]).abs().max().item()
        err_eager = (want[name].double() - ref_g[name]).abs().max().item()
        assert err_fused <= 4 * err_eager + 1e-6, (name, err_fused, err_eager)
    return got


def kernels_of(reports, kind):
    return [k for what, r in reports if what == kind for k in r["kernels"]]


def test_mlp_forward_and_backward_graphs_become_kernels(reports):
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 16))
    x = torch.randn(8, 32)
    check_against_eager_and_fp64(mlp, lambda m, t: (m(t).tanh() ** 2).mean(), x)
    fw, bw = kernels_of(reports, "forward"), kernels_of(reports, "backward")
    assert fw and bw, reports
    assert all(r["eager_reason"] == "" for _, r in reports)
    # gelu's backward (decomposed to pointwise arithmetic with erf and exp) is in a kernel
    assert any("exp" in k["source"] and "dyn_erf" in k["source"] for k in bw), [k["name"] for k in bw]


def test_softmax_layer_norm_gradients(reports):
    torch.manual_seed(1)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln = torch.nn.LayerNorm(48)
            self.scale = torch.nn.Parameter(torch.randn(48))

        def forward(self, x):
            return self.ln(torch.softmax(x * self.scale, -1) + x)

    x = torch.randn(16, 48)
    check_against_eager_and_fp64(Block(), lambda m, t: (m(t) * torch.arange(48.0)).sum(), x)
    assert kernels_of(reports, "forward") and kernels_of(reports, "backward")


def test_small_cnn_training_step_and_batch_norm_statistics():
    torch.manual_seed(2)
    cnn = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(inplace=True),
        torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.BatchNorm2d(16),
        torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10))
    x, y = torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))
    eager = copy.deepcopy(cnn)
    check_against_eager_and_fp64(cnn, lambda m, t: F.cross_entropy(m(t), y), x)
    # the running statistics the compiled forward updated equal eager's
    compiled = copy.deepcopy(eager)
    F.cross_entropy(eager(x), y)
    F.cross_entropy(dynamo.optimize("fused")(lambda t: compiled(t))(x), y)
    for (n, a), b in zip(eager.state_dict().items(), compiled.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=n)


def test_transformer_encoder_layer_training_step():
    # torch 2.x: the forward graph views sdpa's output through a permute (aten.view of a
    # non-contiguous layout): the extern views it in eager's strides, not the kernel buffer's.
    torch.manual_seed(3)
    layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0,
                                             batch_first=True)
    x = torch.randn(4, 6, 32)
    check_against_eager_and_fp64(layer, lambda m, t: m(t).pow(2).mean(), x)


def test_resnet18_training_step():
    import torchvision
    torch.manual_seed(4)
    model = torchvision.models.resnet18(num_classes=10)
    x, y = torch.randn(4, 3, 64, 64), torch.randint(0, 10, (4,))
    got = check_against_eager_and_fp64(model, lambda m, t: F.cross_entropy(m(t), y), x)
    assert len(got) == len(list(model.parameters()))


def test_a_graph_the_aot_layer_refuses_runs_eagerly_with_the_reason():
    def f(x):
        x.mul_(2)            # mutates an input that requires grad: the AOT layer falls back
        return x.sin()

    a = torch.randn(3, requires_grad=True)
    before = len(aot.last_records())
    out = dynamo.optimize("fused")(f)(a * 1)
    ref = f(a * 1)
    assert torch.equal(out, ref)
    records = [r for r in aot.last_records()[before:] if r["backend"] == "fused"]
    assert records and "mutates input 'x' in place and it requires grad" in records[-1]["fallback"]
    g1, = torch.autograd.grad(out.sum(), a)
    g2, = torch.autograd.grad(ref.sum(), a)
    assert torch.equal(g1, g2)


class _Attention(torch.nn.Module):
    """A projection and two batched products: mm/addmm and bmm in both graphs."""

    def __init__(self, d=32):
        super().__init__()
        self.qkv, self.out = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, -1)
        a = torch.softmax(torch.bmm(q, k.transpose(1, 2)) / 8.0, -1)
        return self.out(torch.relu(torch.bmm(a, v)))


def test_products_of_training_graphs_are_matmul_steps(reports):
    torch.manual_seed(5)
    x = torch.randn(3, 10, 32)
    check_against_eager_and_fp64(_Attention(), lambda m, t: m(t).pow(2).mean(), x)
    for kind in ("forward", "backward"):
        rs = [r for what, r in reports if what == kind]
        program = "".join(r["program"] for r in rs)
        reasons = {why for r in rs for _, why in r["externs"]}
        # forward: the two projections (the AOT graph's mm of a t view, bias in the epilogue) and
        # both bmm; backward: every weight and input gradient product
        assert program.count("matmul #") >= 2 and program.count("bmm #") >= 2, program
        assert "matmul step (at::mm_out)" in reasons, reasons
        names = {n for r in rs for n, why in r["externs"] if not why.startswith("matmul step")}
        assert not any(n.startswith(("mm", "bmm", "addmm")) for n in names), names


def test_matmul_steps_across_optimizer_steps_match_eager():
    # the products' results come from the caching pool: gradients handed to autograd and saved
    # activations must stay intact while the next step's products reuse freed blocks
    torch.manual_seed(6)
    eager = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64))
    compiled = copy.deepcopy(eager)
    fn = dynamo.optimize("fused")(lambda t: compiled(t))
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_c = torch.optim.SGD(compiled.parameters(), lr=0.1)
    for step in range(3):
        x = torch.randn(16, 64)
        for model, f, opt in ((eager, eager, opt_e), (compiled, fn, opt_c)):
            opt.zero_grad(set_to_none=step % 2 == 0)
            f(x).pow(2).mean().backward()
            opt.step()
        for (n, a), b in zip(eager.named_parameters(), compiled.parameters()):
            torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5, msg=f"step {step}: {n}")


def test_attention_gradient_cat_is_stored_in_slices_over_steps(reports):
    # The backward concatenates the q/k/v gradients ([S, B*H, D] views reshaped to [S, B, H*D])
    # into the in_proj weight's gradient: one kernel stores each straight into its slice of the
    # cat (no cat extern, no copy of the transposed gradients), and layer_norm's
    # prims.convert_element_type casts are kernels too. Grads match eager over several steps.
    torch.manual_seed(6)
    layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0)
    x = torch.randn(6, 4, 32)
    opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    for _ in range(3):
        check_against_eager_and_fp64(layer, lambda m, t: m(t).pow(2).mean(), x)
        layer.zero_grad(set_to_none=True)
        layer(x).pow(2).mean().backward()
        opt.step()
    if torch.__version__ >= "2":
        return  # torch 2.x traces attention through sdpa: no such cat (the numerics above still hold)
    for kind in ("forward", "backward"):
        rs = [r for what, r in reports if what == kind]
        externs = {node for r in rs for node, _ in r["externs"]}
        assert not any(n.startswith(("cat", "convert_element_type")) for n in externs), externs
    backward = [r["program"] for what, r in reports if what == "backward"]
    assert len(backward) == 3  # one compile per step (check_against_eager_and_fp64 compiles afresh)
    for program in backward:
        cat_kernels = [line for line in program.splitlines() if line.startswith("kernel") and "_cat" in line]
        assert len(cat_kernels) == 1 and "outer [6, 4, 4, 8]" in cat_kernels[0], cat_kernels


def test_dropout_draws_as_eager_and_keeps_the_forward_lowered(reports):
    # The decomposition writes dropout as bernoulli_(empty_like(x), 1 - p); the AOT layer makes
    # it bernoulli(x, 1 - p) (ATen's own definition of it: the same draws), so the forward holds
    # no in-place write and keeps its matmul steps. Under one seed the masks equal eager's.
    torch.manual_seed(7)
    layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.25,
                                             batch_first=True)
    compiled = copy.deepcopy(layer)
    fn = dynamo.optimize("fused")(lambda t: compiled(t))
    x = torch.randn(4, 6, 32)
    for step in range(3):
        torch.manual_seed(100 + step)
        want = layer(x)
        want.pow(2).mean().backward()
        after_eager = torch.rand(1)
        torch.manual_seed(100 + step)
        got = fn(x)
        got.pow(2).mean().backward()
        assert torch.equal(torch.rand(1), after_eager)  # the same number of draws
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        for (name, p), q in zip(layer.named_parameters(), compiled.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=name)
        layer.zero_grad(set_to_none=True)
        compiled.zero_grad(set_to_none=True)
    if torch.__version__ >= "2":
        return  # torch 2.x decomposes dropout otherwise (no bernoulli_ on empty_like; sdpa attention)
    forward = [r for what, r in reports if what == "forward"]
    assert forward
    for r in forward:
        reasons = [why for _, why in r["externs"]]
        assert any(why.startswith("matmul step") for why in reasons), reasons
        drawn = [n for n, _ in r["externs"] if "bernoulli" in n]
        assert drawn and all(n.startswith("bernoulli_p") for n in drawn), drawn  # bernoulli.p, not bernoulli_
