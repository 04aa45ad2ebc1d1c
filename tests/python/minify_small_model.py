"""A small conv net (about 20 captured nodes, one relu in the middle) compiled with the backend
named on the command line (`--train`: also the backward): the input of the dynamo-minify tests."""
import sys

import torch

import dynamo
import minify_faults  # noqa: F401  (registers the faulty backends)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.conv2 = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4 * 8 * 8, 10)

    def forward(self, x):
        y = torch.sigmoid(self.bn(self.conv1(x)))
        y = y * 2.0 - 1.0
        y = self.conv2(y).relu()
        y = torch.tanh(y + 0.5)
        y = y.flatten(1)
        return torch.log_softmax(self.fc(y) * 0.5, dim=1)


def main():
    torch.manual_seed(0)
    train = "--train" in sys.argv
    model = Net().train(train)
    x = torch.randn(2, 3, 8, 8)
    out = dynamo.compile(model, backend=sys.argv[1])(x)
    if train:
        out.sum().backward()
    print(out.sum().item())


if __name__ == "__main__":
    main()
