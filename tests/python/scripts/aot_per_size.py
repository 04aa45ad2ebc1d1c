# dynamo-explain / dynamo-profile / dynamo-trace end-to-end input (tests/python/test_aot_per_size_cli.py):
# aot_eager on a graph with a dynamic batch. The first call (batch 4) compiles static; the batch
# changes, so the second compile (batch 6) is dynamic, and the aot_eager backend compiles that
# graph once per input signature: batch 6 while the entry is made, batches 8 and 10 on their
# first calls, none for the second call with batch 8. Then `g` compiles once (its AOT record is
# its own, not one of f's per-size compiles), and `h` takes a float that changes (symbolic).
import torch

import dynamo

torch.manual_seed(0)
lin = torch.nn.Linear(3, 2)


def f(x):
    return lin(x).relu() * 2


def g(x):
    return lin(x).sigmoid()


def h(x, scale):
    return x * scale + 1


f_c = dynamo.compile(f, backend="aot_eager")
for b in (4, 6, 8, 8, 10):
    x = torch.randn(b, 3)
    assert torch.equal(f_c(x), f(x))
g_c = dynamo.compile(g, backend="aot_eager")
x = torch.randn(5, 3)
assert torch.equal(g_c(x), g(x))
h_c = dynamo.compile(h)
for scale in (0.5, 0.25, 0.125):
    assert torch.equal(h_c(x, scale), h(x, scale))
print("done")
