# dynamo-explain end-to-end input: captures in one graph, no breaks (exit code 0 under
# --fullgraph).
import torch


def f(x):
    return (x * 2 + 1).relu()


for _ in range(3):
    f(torch.ones(3))
