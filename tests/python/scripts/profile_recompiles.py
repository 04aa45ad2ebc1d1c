# dynamo-profile end-to-end input (tests/python/test_profile_cli.py): recompiles with known
# causes. `scale` sees a new input size every call; `shift` reads a global rebound every call;
# `power` takes a Python int that varies; `limited` hits cache_size_limit (4) and runs eagerly.
import torch

import dynamo

dynamo.config.cache_size_limit = 4; dynamo.config.automatic_dynamic_shapes = False  # noqa: E702 (one compile per size)
OFFSET = 0.0


def scale(x):
    return x * 2


def shift(x):
    return x + OFFSET


def power(x, n):
    return x * n


def limited(x):
    return x - 1


scale_c = dynamo.compile(scale)
for size in range(1, 5):
    scale_c(torch.ones(size))

shift_c = dynamo.compile(shift)
for step in range(3):
    OFFSET = float(step)
    shift_c(torch.ones(2))

power_c = dynamo.compile(power)
for n in (2, 3, 4):
    power_c(torch.ones(2), n)

limited_c = dynamo.compile(limited)
for size in range(1, 8):
    limited_c(torch.ones(size))
