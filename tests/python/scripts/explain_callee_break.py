# dynamo-explain / dynamo-trace end-to-end input (tests/python/test_explain_cli.py): a graph
# break inside a function that a compiled function calls. `outer` inlines `helper`, meets the
# branch on a tensor's value, and breaks at the call instead; `helper` is then compiled on its
# own. Called 20 times: the break happens 20 times, and every report says 20.
import torch


def helper(x):
    y = x + 1
    if y.sum() > 0:
        return y * 2
    return y


def outer(x):
    return helper(x * 3) - 1


for _ in range(20):
    outer(torch.ones(3))
