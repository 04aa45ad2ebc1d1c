# dynamo-explain end-to-end input (tests/python/test_explain_cli.py): a plain script, no dynamo
# import, so dynamo-explain captures everything it runs. `step` has a data-dependent branch and
# is called 1000 times from a loop; `report` prints once.
import torch


def step(x):
    y = x * 2
    if y.sum() > 0:
        return y + 1
    return y - 1


def train(x, steps):
    for _ in range(steps):
        x = step(x) * 0.5
    return x


def report(x):
    total = x.sum()
    print("total", float(total))
    return total


out = train(torch.ones(4), 1000)
report(out)
