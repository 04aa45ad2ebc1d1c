"""A compiled eval model reads the weights as they are at each call, however they were written.

Conv steps used to keep a packed (batch_norm-folded, oneDNN-reordered) weight cached by data
pointer and version counter; a write that does not bump the version (`p.data.add_()` in a
hand-written SGD loop, `torch.nn.init.*_`, EMA updates through `.data`, ...) left a compiled model
returning results of stale weights. Each test changes the weights one way between two compiled
calls and compares with eager.

Tolerance: as test_fused_conv.py (1e-4 relative; folding batch_norm reassociates)."""
import pytest
import torch
import torch.nn.functional as F

import dynamo


@pytest.fixture(autouse=True, params=["onednn", "aten"])
def _fresh(request, monkeypatch):
    # Both paths of a conv step: oneDNN's primitive, and at::convolution (DYNAMO_FUSED_NO_DNNL=1,
    # read per compile; a build without oneDNN).
    if request.param == "aten":
        monkeypatch.setenv("DYNAMO_FUSED_NO_DNNL", "1")
    dynamo.reset()
    yield
    dynamo.reset()


def close(got, want):
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * max(want.abs().max().item(), 1e-3))


class Net(torch.nn.Module):
    """A small CNN with every kind of conv step: stem (channels-last), 3x3 (NCHW, blocked),
    depthwise, 1x1, with and without batch_norm, with ReLU / ReLU6 post-ops."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 5, stride=2, padding=2, bias=False)
        self.bn0 = torch.nn.BatchNorm2d(16)
        self.conv = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(16)
        self.dw = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(16)
        self.pw = torch.nn.Conv2d(16, 24, 1)          # no batch_norm: the weight as it is
        self.fc = torch.nn.Linear(24, 5)

    def forward(self, x):
        x = F.relu(self.bn0(self.stem(x)))
        x = F.relu(self.bn1(self.conv(x))) + x
        x = F.hardtanh(self.bn2(self.dw(x)), 0.0, 6.0)
        x = F.relu(self.pw(x))
        return self.fc(x.mean((2, 3)))


def make():
    torch.manual_seed(0)
    m = Net()
    for mod in m.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 2)
            mod.weight.data.uniform_(0.5, 1.5)
            mod.bias.data.uniform_(-0.5, 0.5)
    return m.eval()


def compiled_eval(m):
    f = dynamo.optimize("fused")(m)

    def call(x):
        with torch.no_grad():
            return f(x)
    return call


def check(m, f, x):
    with torch.no_grad():
        close(f(x), m(x))


def test_sgd_steps_through_data_between_compiled_eval_calls():
    m = make()
    f = compiled_eval(m)
    x = torch.randn(4, 3, 32, 32)
    target = torch.randint(0, 5, (4,))
    check(m, f, x)
    for _ in range(3):
        m.train()
        loss = F.cross_entropy(m(x), target)       # also updates the bn running stats
        m.zero_grad()
        loss.backward()
        for p in m.parameters():
            p.data.add_(-0.1 * p.grad)              # no version bump
        m.eval()
        check(m, f, x)


@pytest.mark.parametrize("how", ["data_add", "data_mul_bn_weight", "no_grad_copy", "load_state_dict",
                                 "data_assign", "init_kaiming", "init_zeros_bias", "ema_lerp",
                                 "running_var_data", "detach_add", "numpy_write"])
def test_each_way_of_writing_a_weight(how):
    m = make()
    f = compiled_eval(m)
    x = torch.randn(2, 3, 32, 32)
    check(m, f, x)
    other = make()
    with torch.no_grad():
        other.conv.weight.mul_(-2)
        other.bn1.running_mean.add_(1)
    if how == "data_add":
        m.conv.weight.data.add_(0.5)
        m.stem.weight.data.mul_(-1)
    elif how == "data_mul_bn_weight":
        m.bn1.weight.data.mul_(3)
        m.bn2.bias.data.add_(2)
    elif how == "no_grad_copy":
        with torch.no_grad():
            m.conv.weight.copy_(other.conv.weight)
            m.dw.weight.copy_(torch.randn_like(m.dw.weight))
    elif how == "load_state_dict":
        m.load_state_dict(other.state_dict())
    elif how == "data_assign":
        m.conv.weight.data = other.conv.weight.data.clone()   # new storage
        m.pw.weight.data = torch.randn_like(m.pw.weight)
    elif how == "init_kaiming":
        torch.nn.init.kaiming_normal_(m.conv.weight)
        torch.nn.init.normal_(m.pw.weight)
    elif how == "init_zeros_bias":
        torch.nn.init.zeros_(m.conv.bias)
        torch.nn.init.ones_(m.bn0.weight)
    elif how == "ema_lerp":
        for p, q in zip(m.parameters(), other.parameters()):
            p.data.mul_(0.5).add_(q.data, alpha=0.5)
    elif how == "running_var_data":
        m.bn1.running_var.data.mul_(4)
        m.bn0.running_mean.data.add_(0.3)
    elif how == "detach_add":
        m.conv.weight.detach().add_(0.25)
    elif how == "numpy_write":
        m.conv.weight.detach().numpy()[:] *= -1
    check(m, f, x)


def test_batch_norm_stats_updated_by_a_train_mode_call_in_between():
    m = make()
    f = compiled_eval(m)
    x = torch.randn(4, 3, 32, 32)
    check(m, f, x)
    m.train()
    with torch.no_grad():
        m(x * 3 + 1)                                # moves running_mean / running_var in place
    m.eval()
    check(m, f, x)


def test_nan_written_through_data_reaches_the_output_as_in_eager():
    # The NaN/inf scan of a post-op step's weights must see a write that left the version alone:
    # oneDNN's ReLU post-op would map the NaN outputs to 0 where eager keeps NaN.
    m = make()
    f = compiled_eval(m)
    x = torch.randn(2, 3, 32, 32)
    check(m, f, x)
    m.stem.weight.data[0, 0, 0, 0] = float("nan")
    with torch.no_grad():
        got, want = f(x), m(x)
    assert want.isnan().any()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, equal_nan=True)
    m.stem.weight.data[0, 0, 0, 0] = 0.0
    check(m, f, x)
