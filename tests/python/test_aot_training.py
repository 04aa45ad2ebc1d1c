"""20 training steps under aot_eager give eager's loss curve and parameters, bitwise: a small CNN
with BatchNorm and a TransformerEncoderLayer with dropout, with SGD (momentum) and Adam."""
import copy

import pytest
import torch

import dynamo
import dynamo.aot as aot


@pytest.fixture(autouse=True)
def _fresh():
    dynamo.reset()
    yield
    dynamo.reset()


def small_cnn():
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(inplace=True),
        torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.BatchNorm2d(16),
        torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Dropout(0.1),
        torch.nn.Linear(16, 10))


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.1,
                                                      batch_first=True)
        self.head = torch.nn.Linear(32, 10)

    def forward(self, x):
        return self.head(self.layer(x).mean(1))


def batches(kind, steps):
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        x = torch.randn(8, 3, 16, 16, generator=g) if kind == "cnn" else torch.randn(8, 6, 32, generator=g)
        yield x, torch.randint(0, 10, (8,), generator=g)


def train(model, opt_name, kind, compiled_backend=None, steps=20):
    opt = (torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9) if opt_name == "sgd"
           else torch.optim.Adam(model.parameters(), lr=1e-3))
    fwd = dynamo.compile(model, backend=compiled_backend) if compiled_backend else model
    losses = []
    torch.manual_seed(123)
    for x, y in batches(kind, steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(fwd(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return torch.stack(losses)


@pytest.mark.parametrize("kind", ["cnn", "transformer"])
@pytest.mark.parametrize("opt_name", ["sgd", "adam"])
def test_twenty_steps_give_eagers_loss_curve_and_parameters(kind, opt_name):
    torch.manual_seed(0)
    eager = small_cnn() if kind == "cnn" else Encoder()
    compiled = copy.deepcopy(eager)
    before = len(aot.last_records())
    expected = train(eager, opt_name, kind)
    got = train(compiled, opt_name, kind, "aot_eager")
    records = aot.last_records()[before:]
    assert records and all(r["fallback"] is None for r in records)
    assert any(r.get("training") for r in records)
    assert torch.equal(expected, got), (expected - got).abs().max()
    for (n, p), q in zip(eager.state_dict().items(), compiled.state_dict().values()):
        assert torch.equal(p, q), n
