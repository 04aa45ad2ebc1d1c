# dynamo-explain end-to-end input (tests/python/test_fused_dynamic.py): the fused backend on a
# graph with a dynamic batch. Batch 4 compiles static; batch 6 makes the dynamic entry, lowered
# for batch 6 with it, then for batches 8 and 10 on their first calls (the second call with batch
# 8 reuses its lowering); the kernels of batches 8 and 10 are those of batch 6.
import torch

import dynamo

torch.manual_seed(0)
lin = torch.nn.Linear(3, 2)


def f(x):
    return (lin(x).relu() * 2).tanh()


f_c = dynamo.compile(f, backend="fused")
with torch.no_grad():
    for b in (4, 6, 8, 8, 10):
        x = torch.randn(b, 3)
        torch.testing.assert_close(f_c(x), f(x), rtol=1e-5, atol=1e-6)
print("done")
