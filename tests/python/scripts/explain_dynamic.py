# dynamo-explain end-to-end input (tests/python/test_explain_cli.py): dynamic shapes. The batch
# size changes (dynamic from the second call), an int argument changes (a symbolic int with a
# guard on `n > 4`), and `scaled` hands its input's size to math.prod, which needs a Python int
# (specialised).
import math

import torch

import dynamo


def f(x, n):
    if n > 4:
        return x.relu() * n
    return x.sum(1) + n


def scaled(x):
    return x.view(math.prod(x.shape[:1]), -1) * 2


f_c = dynamo.compile(f)
for b, n in [(4, 5), (6, 6), (8, 7), (10, 8)]:
    f_c(torch.randn(b, 3), n)
scaled_c = dynamo.compile(scaled)
for b in (4, 6):
    scaled_c(torch.randn(b, 3, 2))
