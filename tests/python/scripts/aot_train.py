# dynamo-trace aot / dynamo-explain end-to-end input (tests/python/test_aot_trace_cli.py): one
# train step and one inference call of a small model under aot_eager, and a graph whose output
# aliases its input (a training graph the AOT layer runs on the eager runner, with the reason).
import torch

import dynamo


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.bn = torch.nn.BatchNorm1d(8)

    def forward(self, x):
        return torch.relu(self.bn(self.fc(x))).cos().sum()


def flat_and_double(x):
    return x.view(-1), x * 2


torch.manual_seed(0)
net = Net()
step = dynamo.compile(net, backend="aot_eager")
step(torch.randn(4, 8)).backward()
with torch.no_grad():
    step(torch.randn(4, 8))
dynamo.compile(flat_and_double, backend="aot_eager")(torch.randn(2, 3, requires_grad=True))
print("grad norm", float(net.fc.weight.grad.norm()))
