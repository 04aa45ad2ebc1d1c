# dynamo.explain() and dynamo-explain on the same function (tests/python/test_explain_consistency.py):
# torch functions, Tensor methods, operators and a graph break, so that both reports must agree
# on every op name ("torch.Tensor.sum", not "Tensor.sum") and count.
import torch


def f(x):
    y = torch.relu(x) * 2
    s = y.sum() + x.mean()
    print("break here")
    z = torch.sin(y).view(-1) + s
    return z.abs().sum()


if __name__ == "__main__":
    f(torch.ones(3))
