"""Convolutions in the fused backend's inference graphs: conv steps with a prepared channels-last
weight, an eval-mode batch_norm folded into it, activations kept channels-last between convs and
kernels, outputs in eager's layout, and prepared weights made again when a parameter changes.

Tolerance: within 1e-4 relative (atol 1e-4 of the output's largest magnitude) of eager; folding
batch_norm into the weight reassociates, and oneDNN's channels-last kernels round differently."""
import os
import re
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import dynamo
from compile_fixtures import fresh_dynamo  # noqa: F401  (fixture)
from fused_harness import close, program_text


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def conv_bn(cin=6, cout=10, **kw):
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(cin, cout, 3, **kw)
    bn = torch.nn.BatchNorm2d(cout)
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)
    bn.weight.data.uniform_(0.5, 1.5)
    bn.bias.data.uniform_(-1, 1)
    return torch.nn.Sequential(conv, bn).eval()


@pytest.mark.parametrize("kw", [dict(padding=1), dict(stride=2, bias=False), dict(padding=2, dilation=2),
                                dict(padding=1, groups=2), dict(padding=(1, 0), stride=(1, 2))])
def test_conv_batch_norm_relu_matches_eager(kw):
    m = conv_bn(**kw)
    x = torch.randn(3, 6, 11, 9)

    def f(t):
        return F.relu(m(t)) * 2 - 1

    with torch.no_grad():
        got, want = dynamo.optimize("fused")(f)(x), f(x)
    close(got, want)
    assert got.stride() == want.stride()        # eager's layout for what the user sees


@pytest.mark.parametrize("dnnl", ["1", "0"])
def test_relu_after_conv_is_its_post_op(monkeypatch, dnnl):
    # oneDNN's conv with the ReLU as post-op, or (DYNAMO_FUSED_NO_DNNL, a build without oneDNN)
    # at::convolution and an in-place ReLU: the same program either way
    if dnnl == "0":
        monkeypatch.setenv("DYNAMO_FUSED_NO_DNNL", "1")
        code = ("import torch, dynamo, torch.nn.functional as F\n"
                "torch.manual_seed(0)\n"
                "m = torch.nn.Sequential(torch.nn.Conv2d(6, 10, 3, padding=1), torch.nn.ReLU()).eval()\n"
                "x = torch.randn(3, 6, 11, 9)\n"
                "with torch.no_grad():\n"
                "    got, want = dynamo.optimize('fused')(lambda t: m(t) * 2)(x), m(x) * 2\n"
                "torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())\n"
                "print('ok')\n")
        r = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, DYNAMO_LOGS="fusion"),
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
        assert "groups 1 relu -> b" in r.stderr, r.stderr
        return
    conv = conv_bn(padding=1)
    w, b = conv[0].weight.detach(), conv[0].bias.detach()
    x = torch.randn(3, 6, 11, 9)
    fn = lambda t, w, b: F.relu(F.conv2d(t, w, b, 1, 1)) + 1  # noqa: E731
    f = program_text(fn, x, w, b)
    assert "groups 1 relu -> b" in f.report["program"], f.report["program"]
    # 6 input channels: channels-last (convTakesNchw)
    assert ("conv2d", "conv step (channels-last, relu folded in)") in f.report["externs"]
    assert [k["name"] for k in f.report["kernels"]] == ["k0_add"]
    close(f(x, w, b), fn(x, w, b))


def test_in_place_relu_after_conv_batch_norm_with_later_readers():
    # nn.ReLU(inplace=True) after conv-bn: later readers of the batch_norm's tensor read the ReLU's
    # result (the captured graph names the mutated tensor, not the relu node)
    m = conv_bn(padding=1)

    def f(t):
        y = m(t)
        F.relu(y, inplace=True)
        return y * 2 + y.sum()

    x = torch.randn(2, 6, 8, 8)
    with torch.no_grad():
        got, want = dynamo.optimize("fused")(f)(x), f(x)
    close(got, want)


# Activations whose `inplace` flag is positional in the modules that call them (nn.Hardswish
# calls F.hardswish(x, self.inplace)): a conv step's channels-last result was handed to the
# activation as an NCHW copy and the write was lost (mobilenet_v3 under fused was wrong).
POSITIONAL_INPLACE = {
    "F.relu(y, True)": lambda y: F.relu(y, True),
    "nn.Hardswish(inplace=True)": torch.nn.Hardswish(inplace=True),
    "nn.Hardsigmoid(inplace=True)": torch.nn.Hardsigmoid(inplace=True),
    "F.silu(y, True)": lambda y: F.silu(y, True),
    "F.mish(y, True)": lambda y: F.mish(y, True),
    "nn.ELU(inplace=True)": torch.nn.ELU(inplace=True),
    "nn.LeakyReLU(0.1, True)": torch.nn.LeakyReLU(0.1, True),
    "nn.SELU(True)": torch.nn.SELU(True),
    "nn.CELU(inplace=True)": torch.nn.CELU(inplace=True),
    "nn.Threshold(0.1, 0.0, True)": torch.nn.Threshold(0.1, 0.0, True),
    "F.relu6(y, True)": lambda y: F.relu6(y, True),
    "F.rrelu(y, 0.1, 0.3, False, True)": lambda y: F.rrelu(y, 0.1, 0.3, False, True),
}


def test_inplace_positions_of_the_registry_match_torch_signatures():
    # codegen/inplace_functions.def names where each F function takes `inplace`; a torch release
    # that moved it would make the lowering miss the flag again
    import inspect
    import re
    src = os.environ.get("DYNAMO_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
    with open(os.path.join(src, "codegen", "inplace_functions.def")) as fh:
        entries = re.findall(r'^DYNAMO_INPLACE_FUNCTION\("(\w+)", (\d+)\)', fh.read(), re.M)
    assert len(entries) >= 19
    by_name = {f.__name__: f for f in vars(F).values() if callable(f) and hasattr(f, "__name__")}
    for name, position in entries:
        fn = getattr(F, name, None) or by_name[name]
        assert list(inspect.signature(fn).parameters).index("inplace") == int(position), name


@pytest.mark.parametrize("name", list(POSITIONAL_INPLACE))
def test_positional_in_place_activation_after_conv_is_seen_by_later_readers(name):
    act = POSITIONAL_INPLACE[name]
    m = conv_bn(padding=1)
    conv2 = torch.nn.Conv2d(10, 4, 1).eval()

    def f(t):
        y = m(t)
        act(y)
        return conv2(y) + 1

    x = torch.randn(2, 6, 8, 8)
    with torch.no_grad():
        got, want = dynamo.optimize("fused")(f)(x), f(x)
    close(got, want)


def test_relu_with_another_reader_before_it_is_not_folded():
    m = conv_bn(padding=1)
    x = torch.randn(2, 6, 8, 8)
    fn = lambda t: (lambda y: (y.sum(), F.relu(y)))(m(t))  # noqa: E731
    with torch.no_grad():
        got, want = dynamo.optimize("fused")(fn)(x), fn(x)
    close(got[0], want[0])
    close(got[1], want[1])


def test_conv_output_returned_directly_and_read_by_an_extern_keeps_eagers_layout():
    m = conv_bn()
    x = torch.randn(2, 6, 8, 8)

    def f(t):
        y = m[0](t)                              # a conv result that is a graph output
        z = m[1](m[0](t * 2)).relu()             # a folded conv, channels-last inside
        return y, F.max_pool2d(z, 2), z.sum((2, 3))

    with torch.no_grad():
        got, want = dynamo.optimize("fused")(f)(x), f(x)
    for g, w in zip(got, want):
        close(g, w)
        assert g.stride() == w.stride()


def test_prepared_weights_follow_parameter_updates():
    m = conv_bn(padding=1)
    x = torch.randn(2, 6, 8, 8)
    f = dynamo.optimize("fused")(lambda t: m(t).relu())
    with torch.no_grad():
        close(f(x), m(x).relu())
        m[0].weight.mul_(0.5)                    # in place: a new version of the same storage
        m[1].running_var.add_(1.0)
        close(f(x), m(x).relu())
        m.load_state_dict(conv_bn(padding=1).state_dict())   # copy_ into every parameter
        m[0].bias.data = torch.randn(10)         # a new tensor: a new data pointer
        close(f(x), m(x).relu())


@pytest.mark.parametrize("channels_last", [False, True])
def test_packed_conv_leaves_the_modules_weight_alone(channels_last):
    # Once oneDNN holds its packed copy, the backend frees its own folded/channels-last copy of the
    # weight; a conv without batch_norm whose weight is already channels-last hands the module's
    # own storage in (no copy), which must stay intact.
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(6, 10, 3, padding=1).eval()
    if channels_last:
        conv = conv.to(memory_format=torch.channels_last)
    before = conv.weight.detach().clone()
    x = torch.randn(2, 6, 8, 8)
    f = dynamo.optimize("fused")(lambda t: conv(t).relu())
    with torch.no_grad():
        for _ in range(3):
            close(f(x), conv(x).relu())
    assert torch.equal(conv.weight, before)
    assert conv.weight.is_contiguous(memory_format=torch.channels_last) == channels_last


def test_training_mode_batch_norm_is_not_folded():
    m = conv_bn(padding=1).train()
    x = torch.randn(4, 6, 8, 8)
    stats = m[1].running_mean.clone()
    with torch.no_grad():
        got = dynamo.optimize("fused")(lambda t: m(t).relu())(x)
    after = m[1].running_mean.clone()
    m[1].running_mean.copy_(stats)
    m[1].num_batches_tracked.zero_()
    with torch.no_grad():
        want = m(x).relu()
    close(got, want)
    close(after, m[1].running_mean)              # the statistics were updated once, as eager


CODE = """
import torch, torchvision, dynamo
torch.manual_seed(0)
m = torchvision.models.resnet18().eval()
x = torch.randn(2, 3, 64, 64)
with torch.no_grad():
    got, want = dynamo.optimize("fused")(m)(x), m(x)
torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())
print("ok")
"""


def test_resnet18_eval_runs_every_conv_as_a_step_with_its_batch_norm_folded(tmp_path):
    env = dict(os.environ, DYNAMO_LOGS="fusion")
    r = subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"
    convs = [line for line in r.stderr.splitlines() if line.startswith("conv #")]
    assert len(convs) == 20 and all("folded" in c for c in convs), convs
    # the stem and each block's first conv take their ReLU as oneDNN's post-op; the ReLU after
    # each residual add stays a kernel (the add is not a post-op torch 1.13 offers)
    assert sum("folded relu ->" in c for c in convs) == 9, convs
    # the stem (3 input channels) writes channels-last, and so does the max_pool after it; the
    # 3x3 convs over 64+ channels and the 1x1 downsamples of NCHW input run NCHW (oneDNN's
    # blocked kernels), and the residual add+ReLU kernels keep their first operand's layout:
    # NCHW, one flat loop, except the first, which reads the channels-last pooled identity
    assert "strides [65536, 1, 2048, 64] (relu)" in r.stderr
    assert "strides [16384, 1, 1024, 64] (max_pool2d)" in r.stderr
    assert "strides [16384, 256, 16, 1] (relu_1)" in r.stderr
    assert "strides [8192, 64, 8, 1] (batch_norm_7)" in r.stderr       # layer2's 1x1 downsample
    assert "kernel k0_relu_2 outer [2, 64, 256] inner []" in r.stderr
    assert "kernel k1_relu_4 outer [32768] inner []" in r.stderr
    assert "kernel k2_relu_6 outer [16384] inner []" in r.stderr
    strides = dict(re.findall(r"^(b\d+): \w+ float32\[[^]]*\] strides (\[[^]]*\])", r.stderr, re.M))
    results = [strides[re.search(r"-> (b\d+)", c).group(1)] for c in convs]
    assert results[0] == "[65536, 1, 2048, 64]" and all(r.endswith(", 1]") for r in results[1:]), results


def test_depthwise_block_with_relu6_in_place():
    torch.manual_seed(1)
    block = torch.nn.Sequential(
        torch.nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False), torch.nn.BatchNorm2d(8),
        torch.nn.ReLU6(inplace=True), torch.nn.Conv2d(8, 16, 1, bias=False), torch.nn.BatchNorm2d(16)).eval()
    for bn in (block[1], block[4]):
        bn.running_var.uniform_(0.5, 2)
    x = torch.randn(2, 8, 10, 10) * 4
    with torch.no_grad():
        got, want = dynamo.optimize("fused")(lambda t: block(t))(x), block(x)
    close(got, want)


def test_hardtanh_keeps_nan_and_bounds_as_eager():
    y = torch.tensor([float("nan"), -1.0, 3.0, 7.0, float("inf"), -float("inf")])
    for f in (lambda t: F.hardtanh(t * 1, 0.0, 6.0), lambda t: F.relu6(t + 0), lambda t: F.hardtanh(t - 0)):
        got, want = dynamo.optimize("fused")(f)(y), f(y)
        assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.nan_to_num(), want.nan_to_num())
        dynamo.reset()


def test_pooling_reads_the_conv_result_in_its_channels_last_layout():
    # resnet18's stem: conv-bn-relu, then max_pool2d (an extern): the pool takes the conv step's
    # channels-last buffer as it is and returns channels-last, so neither the conv's result nor
    # the pool's is copied between layouts (before: 8x64x112x112 to NCHW, 8x64x56x56 back)
    m = conv_bn(cin=3, cout=16, stride=2, padding=1)
    x = torch.randn(2, 3, 33, 31)

    def f(t):
        y = F.max_pool2d(F.relu(m(t)), 3, 2, 1)
        z = y * 2 - 1
        return z, F.adaptive_avg_pool2d(z.relu(), 1).flatten(1), F.avg_pool2d(y.relu(), 2), y

    fused = dynamo.optimize("fused")(f)
    with torch.no_grad():
        want = f(x)
        got = fused(x)
        for g, w in zip(got, want):
            close(g, w)
            assert g.stride() == w.stride()      # eager's layout for what the user sees
        with torch.profiler.profile(record_shapes=True) as prof:
            fused(x)
    conv_out, pooled = [2, 16, 17, 16], [2, 16, 9, 8]
    assert list(want[3].shape) == pooled
    copies = [e.input_shapes[0] for e in prof.events() if e.name == "aten::copy_"]
    assert conv_out not in copies, copies
    # of the pool's shape only the graph outputs z and y, handed back in eager's layout
    assert copies.count(pooled) == 2, copies
    pools = [e.input_shapes[0] for e in prof.events() if e.name == "aten::max_pool2d"]
    assert pools == [conv_out]


def test_pooling_program_marks_the_extern():
    w = torch.randn(8, 3, 3, 3)
    x = torch.randn(2, 3, 12, 12)
    fn = lambda t, w: F.max_pool2d(F.relu(F.conv2d(t, w, None, 1, 1)), 2) + 1  # noqa: E731
    f = program_text(fn, x, w)
    lines = f.report["program"].splitlines()
    assert any(line.startswith("extern #") and line.endswith("(arguments in the program's layout)")
               for line in lines), f.report["program"]
    close(f(x, w), fn(x, w))


def test_max_pool_with_indices_keeps_eagers_layout():
    # a tuple result: its items are not re-laid out by the program, so the pool gets its input
    # in eager's layout (a copy of the channels-last conv result) and is not marked
    w = torch.randn(8, 3, 3, 3)
    x = torch.randn(2, 3, 12, 12)
    fn = lambda t, w: (lambda p: (p[0] + 1, p[1]))(  # noqa: E731
        F.max_pool2d(F.relu(F.conv2d(t, w, None, 1, 1)), 2, return_indices=True))
    f = program_text(fn, x, w)
    assert "(arguments in the program's layout)" not in f.report["program"], f.report["program"]
    got, want = f(x, w), fn(x, w)
    close(got[0], want[0])
    assert torch.equal(got[1], want[1]) and got[1].stride() == want[1].stride()
