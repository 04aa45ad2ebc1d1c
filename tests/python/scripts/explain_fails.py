# dynamo-explain end-to-end input: compiles a function with a break, then fails (exit code 2).
import torch


def f(x):
    if x.sum() > 0:
        return x + 1
    return x - 1


f(torch.ones(2))
raise ValueError("boom from the script")
