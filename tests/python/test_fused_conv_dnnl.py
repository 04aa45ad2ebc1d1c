"""Conv steps through oneDNN's own API (backends/src/fused_dnnl_conv.cpp): a primitive made once
per step with its weight packed once, the output written into a buffer the program plans (an
arena slot while only kernels and conv steps read it, a pool block when it escapes), and the
ReLU / hardtanh after the conv (or the folded batch_norm) applied as the primitive's post-op.

Tolerance: within 1e-4 relative (atol 1e-4 of the output's largest magnitude) of eager, as in
test_fused_conv.py (folding batch_norm reassociates; oneDNN's kernels round differently)."""
import os
import re
import subprocess
import sys
import threading

import pytest
import torch
import torch.nn.functional as F

import dynamo
from compile_fixtures import fresh_dynamo  # noqa: F401  (fixture)
from fused_harness import close, program_text


def _has_dnnl():
    cache = os.path.join(os.environ.get("DYNAMO_BUILD_DIR", ""), "CMakeCache.txt")
    if not os.path.exists(cache):
        return False
    text = open(cache).read()
    return re.search(r"^DYNAMO_DNNL_LIBRARY:FILEPATH=.*dnnl", text, re.M) is not None


needs_dnnl = pytest.mark.skipif(not _has_dnnl(), reason="built without oneDNN (libdnnl-dev): conv steps call ATen")


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _buffer_lines(program):
    return dict(re.findall(r"^(b\d+): (.*)$", program, re.M))


def conv_bn(cin, cout, k=3, **kw):
    conv = torch.nn.Conv2d(cin, cout, k, **kw)
    bn = torch.nn.BatchNorm2d(cout)
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)
    bn.weight.data.uniform_(0.5, 1.5)
    bn.bias.data.uniform_(-1, 1)
    return torch.nn.Sequential(conv, bn)


POST = {
    "none": lambda y: y,
    "relu": F.relu,
    "relu_inplace": lambda y: F.relu(y, inplace=True),
    "relu6": lambda y: F.hardtanh(y, 0.0, 6.0),
    "relu6_module_inplace": torch.nn.ReLU6(inplace=True),
    "hardtanh": lambda y: F.hardtanh(y, -0.5, 0.75),
}
SHAPES = {
    "3x3": dict(cin=16, cout=24, padding=1),                   # NCHW: oneDNN's blocked layout
    "stem": dict(cin=3, cout=16, k=7, stride=2, padding=3),    # channels-last
    "groups": dict(cin=8, cout=12, padding=1, groups=4),
    "depthwise": dict(cin=16, cout=16, padding=1, groups=16, bias=False),
    "dilated": dict(cin=16, cout=8, padding=2, dilation=2, stride=(2, 1)),
    "1x1": dict(cin=16, cout=32, k=1, bias=False),
    "asymmetric": dict(cin=16, cout=8, k=(3, 1), padding=(1, 0), stride=(1, 2)),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("post", sorted(POST))
def test_conv_post_op_matches_eager(shape, post):
    torch.manual_seed(0)
    kw = dict(SHAPES[shape])
    m = conv_bn(kw.pop("cin"), kw.pop("cout"), kw.pop("k", 3), **kw).eval()
    act = POST[post]
    x = torch.randn(2, m[0].in_channels, 13, 11) * 2

    def f(t):
        return act(m(t)) * 2 - 1

    with torch.no_grad():
        got, want = dynamo.optimize("fused")(f)(x), f(x)
    close(got, want)


def test_program_names_the_post_op_and_plans_the_conv_output():
    torch.manual_seed(0)
    x = torch.randn(2, 16, 9, 9)
    w1, w2 = torch.randn(16, 16, 3, 3) * 0.1, torch.randn(8, 16, 3, 3) * 0.1

    def fn(t, w1, w2):
        y = F.hardtanh(F.conv2d(t, w1, None, 1, 1), 0.0, 6.0)   # read only by the next conv
        return F.relu(F.conv2d(y, w2, None, 1, 1)) + 1            # read only by a kernel

    f = program_text(fn, x, w1, w2)
    prog = f.report["program"]
    convs = [line for line in prog.splitlines() if line.startswith("conv #")]
    assert len(convs) == 2, prog
    assert "groups 1 clip(0, 6) -> b" in convs[0] and "groups 1 relu -> b" in convs[1], convs
    bufs = _buffer_lines(prog)
    for c in convs:
        result = re.search(r"-> (b\d+)", c).group(1)
        assert bufs[result].startswith("intermediate ") and " arena+" in bufs[result], (result, prog)
    assert ("conv2d", "conv step (NCHW, hardtanh folded in)") in f.report["externs"]
    assert [k["name"] for k in f.report["kernels"]] == ["k0_add"]
    close(f(x, w1, w2), fn(x, w1, w2))


def test_conv_output_that_escapes_is_a_pool_block():
    torch.manual_seed(0)
    x = torch.randn(2, 16, 9, 9)
    w = torch.randn(8, 16, 3, 3) * 0.1
    fn = lambda t, w: (F.relu(F.conv2d(t, w, None, 1, 1)), F.max_pool2d(F.conv2d(t, w, None, 1, 1), 2))  # noqa: E731
    f = program_text(fn, x, w)
    prog = f.report["program"]
    bufs = _buffer_lines(prog)
    results = [re.search(r"-> (b\d+)", c).group(1) for c in prog.splitlines() if c.startswith("conv #")]
    # the first escapes (a graph output); the second is read only by the pool, which takes its
    # arena slot by pointer (test_fused_pool_arena.py)
    assert [bufs[r].split()[0] for r in results] == ["output", "intermediate"], prog
    for got, want in zip(f(x, w), fn(x, w)):
        close(got, want)
        assert got.stride() == want.stride()


class Block(torch.nn.Module):
    """resnet's BasicBlock with a downsample."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.a = conv_bn(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.b = conv_bn(cout, cout, 3, padding=1, bias=False)
        self.down = conv_bn(cin, cout, 1, stride=stride, bias=False)

    def forward(self, x):
        out = F.relu(self.a(x), inplace=True)
        out = self.b(out)
        out += self.down(x)
        return F.relu(out)


def test_residual_block_matches_eager():
    torch.manual_seed(0)
    m = torch.nn.Sequential(conv_bn(3, 16, 7, stride=2, padding=3), torch.nn.ReLU(inplace=True),
                            torch.nn.MaxPool2d(3, 2, 1), Block(16, 16, 1), Block(16, 32, 2)).eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        f = dynamo.optimize("fused")(m)
        for _ in range(2):
            close(f(x), m(x))


def test_weights_changed_between_calls_are_packed_again():
    torch.manual_seed(0)
    m = torch.nn.Sequential(conv_bn(16, 16, 3, padding=1), torch.nn.ReLU6()).eval()
    x = torch.randn(2, 16, 10, 10)
    with torch.no_grad():
        f = dynamo.optimize("fused")(lambda t: m(t) + 1)
        close(f(x), m(x) + 1)
        m[0][0].weight.mul_(-0.5)                          # in place: a new version
        close(f(x), m(x) + 1)
        state = {k: v * 1.5 if v.is_floating_point() else v for k, v in m.state_dict().items()}
        m.load_state_dict(state)                           # copies into the same tensors
        close(f(x), m(x) + 1)
        m[0][1].running_var.fill_(3.0)                     # a folded batch_norm statistic
        close(f(x), m(x) + 1)


@pytest.mark.parametrize("shape", ["3x3", "stem", "depthwise"])
@pytest.mark.parametrize("post", ["relu", "relu6", "hardtanh"])
def test_nan_and_inf_through_a_post_op_stay_as_in_eager(shape, post):
    # oneDNN's (and torch's prepacked) ReLU / clip post-ops map a NaN conv output to the lower
    # bound; eager's relu and hardtanh keep NaN. A call whose input or weight holds NaN or inf
    # runs the post-op as eager does; the next finite call takes the post-op again.
    torch.manual_seed(0)
    kw = dict(SHAPES[shape])
    m = conv_bn(kw.pop("cin"), kw.pop("cout"), kw.pop("k", 3), **kw).eval()
    act = POST[post]

    def f(t):
        return act(m(t)) * 2 - 1

    x = torch.randn(2, m[0].in_channels, 13, 11)
    bad = x.clone()
    bad[0, 0, 5, 5] = float("nan")
    bad[1, 0, 2, 3] = float("inf")
    bad[1, -1, 7, 1] = -float("inf")
    with torch.no_grad():
        g = dynamo.optimize("fused")(f)
        close(g(x), f(x))
        got, want = g(bad), f(bad)
        assert want.isnan().any()
        assert torch.equal(got.isnan(), want.isnan())
        assert torch.equal(got.isinf(), want.isinf())
        fin = want.isfinite()
        close(got[fin], want[fin])
        close(g(x), f(x))
        m[0].weight[0, 0, 0, 0] = float("nan")           # a NaN weight: every call is exact
        got, want = g(x), f(x)
        assert want.isnan().any()
        assert torch.equal(got.isnan(), want.isnan())


@pytest.mark.parametrize("where", ["input", "weight"])
def test_nan_reaches_the_conv_after_a_clipped_conv(where):
    # A conv with a post-op skips the NaN/inf scan of its input only when the step just before
    # was a oneDNN conv whose clip bounded that very buffer (mobilenet's expand -> depthwise).
    # When the first conv ran through ATen instead (a NaN in its input or its weight), its
    # clamp_ keeps NaN, the second conv must see it, and the NaNs land where eager's do.
    torch.manual_seed(0)
    m = torch.nn.Sequential(conv_bn(8, 24, 1, bias=False), torch.nn.ReLU6(),
                            conv_bn(24, 24, 3, padding=1, groups=24, bias=False), torch.nn.ReLU6(),
                            conv_bn(24, 8, 1, bias=False)).eval()

    def f(t):
        return m(t) + 1

    x = torch.randn(2, 8, 10, 9)
    with torch.no_grad():
        g = dynamo.optimize("fused")(f)
        close(g(x), f(x))
        if where == "input":
            x[1, 3, 4, 4] = float("nan")
        else:
            m[0][0].weight[5, 2, 0, 0] = float("nan")
        got, want = g(x), f(x)
        assert want.isnan().any()
        assert torch.equal(got.isnan(), want.isnan())  # (a NaN weight reaches every output)
        fin = want.isfinite()
        if fin.any():
            close(got[fin], want[fin])


def test_two_threads_call_one_compiled_function():
    torch.manual_seed(0)
    m = torch.nn.Sequential(conv_bn(16, 32, 3, padding=1), torch.nn.ReLU(), conv_bn(32, 32, 3, groups=32, padding=1),
                            torch.nn.ReLU6(), conv_bn(32, 16, 1)).eval()
    xs = [torch.randn(2, 16, 20, 20) for _ in range(4)]
    with torch.no_grad():
        wants = [m(x) for x in xs]
        f = dynamo.optimize("fused")(lambda t: m(t) * 1)
        close(f(xs[0]), wants[0])
        errors = []

        def worker(i):
            try:
                with torch.no_grad():
                    for _ in range(15):
                        close(f(xs[i]), wants[i])
            except Exception as e:  # noqa: BLE001 -- reported below
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(xs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors


CODE = r"""
import torch, dynamo, torch.nn.functional as F
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.ReLU6(),
                        torch.nn.Conv2d(16, 16, 3, padding=1, groups=16), torch.nn.ReLU()).eval()
x = torch.randn(2, 16, 12, 12)
with torch.no_grad():
    got, want = dynamo.optimize('fused')(lambda t: m(t) * 2)(x), m(x) * 2
torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())
print('ok')
"""


@needs_dnnl
def test_conv_steps_run_as_onednn_primitives():
    r = subprocess.run([sys.executable, "-c", CODE], env=dict(os.environ, DYNAMO_LOGS="fusion"),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    steps = re.findall(r"^\[dynamo fusion\] conv step (\d+): (\S+) (\S+)", r.stderr, re.M)
    assert [s[:2] for s in steps] == [("0", "oneDNN"), ("1", "oneDNN")], r.stderr
    assert all(not impl.startswith("ref") for _, _, impl in steps), steps


def test_without_onednn_the_same_program_runs_through_aten():
    # DYNAMO_FUSED_NO_DNNL=1 (read per compile): at::convolution with the weights folded per call, the
    # ReLU6 post-op applied by a clamp, and the planned buffers filled by a copy
    r = subprocess.run([sys.executable, "-c", CODE],
                       env=dict(os.environ, DYNAMO_LOGS="fusion", DYNAMO_FUSED_NO_DNNL="1"),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    assert "oneDNN" not in r.stderr
    assert "clip(0, 6) -> b" in r.stderr and "relu -> b" in r.stderr, r.stderr
