"""Python numbers on the fused backend (docs/dynamic-shapes.md, "Python numbers in the fused
backend"): an int or float graph input (a symbolic int or float: a step counter, a scale, a
learning rate) that the graph only computes with is a kernel argument read at call time, so a new
value lowers nothing and compiles nothing (`lowerings` and `units_loaded` of
_C._codegen.counters() do not move). A number whose value changes what the graph's nodes return
on meta tensors stays in the per-size signature: each new value is lowered again, and
DYNAMO_LOGS=fusion says why.

Exactness: a single pointwise op with a number equals eager bitwise (ATen converts the wrapped
number's exact int64 or double to the common dtype, as the kernel does: no double rounding of an
int beyond 2^53); chains are within the code generator's tolerance. The same programs with the
eager and aot_eager backends compile at most twice and equal eager bitwise."""
import pytest
import torch
import torch.nn.functional as F

import dynamo
from dynamo import _C

from compile_fixtures import compiled, fresh_dynamo, records  # noqa: F401  (fixtures)


pytestmark = pytest.mark.usefixtures("fresh_dynamo")

# (float)(2^53 + 2^29 + 1) is 2^53 + 2^30; through a double it is 2^53 (two roundings to even).
BEYOND_2_53 = 2**53 + 2**29 + 1


def counters():
    return dict(_C._codegen.counters())


def moved(before):
    after = counters()
    return {k: after[k] - before[k] for k in ("lowerings", "units_loaded", "program_hits")}


def close(got, want, rtol=1e-5, atol=1e-5):
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol * max(want.abs().max().item(), 1.0))


def bitwise(got, want):
    """Equal dtype and values, NaNs in the same places and the sign of zeros too."""
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    if got.is_floating_point():
        assert torch.equal(torch.isnan(got), torch.isnan(want)), (got, want)
        assert torch.equal(torch.nan_to_num(got, 0.0), torch.nan_to_num(want, 0.0)), (got, want)
        assert torch.equal(torch.signbit(got), torch.signbit(want)), (got, want)
    else:
        assert torch.equal(got, want), (got, want)


def test_a_new_value_of_an_int_and_a_float_lowers_and_compiles_nothing(records):
    def f(x, n, lr):
        return (x * n + lr) * 2 - x.relu() * lr

    cf = dynamo.compile(f, backend="fused")
    x = torch.randn(8, 16)
    steps = []
    for i in range(12):
        n, lr = i + 5, 0.1 * 0.9**i
        before = counters()
        close(cf(x, n, lr), f(x, n, lr))
        steps.append(moved(before))
    # Call 1: n and lr constants (a static compile); call 2: both symbolic (the dynamic entry,
    # one kernel reading them); calls 3..12: nothing lowered, nothing loaded.
    assert len(compiled(records)) == 2
    assert steps[1]["lowerings"] + steps[1]["program_hits"] == 1 and steps[1]["units_loaded"] == 1, steps
    assert all(s == {"lowerings": 0, "units_loaded": 0, "program_hits": 0} for s in steps[2:]), steps


def test_the_kernel_reads_the_numbers_from_its_argument_array(capfd, monkeypatch):
    monkeypatch.setenv("DYNAMO_LOGS", "fusion,output_code")

    def f(x, n, lr):
        return x * n - lr

    cf = dynamo.compile(f, backend="fused")
    x = torch.randn(4, 4)
    for i in range(3):
        close(cf(x, i + 2, 0.5 + i), f(x, i + 2, 0.5 + i))
    err = capfd.readouterr().err
    assert "arg0: int read at call time (n)\narg1: float read at call time (lr)\n" in err, err
    assert "sub(mul(b0[1*x0], float32(arg0:int64)), float32(arg1:float64))" in err, err
    assert "const long long dyn_a0 = ((const long long*)args[2])[0];  // a Python int, read at call time" in err, err
    assert "__builtin_memcpy(&dyn_a1, &((const long long*)args[2])[1], 8);" in err, err


# (function, tensor, values): single ops, so the kernel's result is eager's bit for bit.
SINGLE_OPS = {
    "float32 * int beyond 2^53": (lambda x, n: x * n, torch.linspace(-3, 3, 12),
                                  [5, 6, 7, BEYOND_2_53, -BEYOND_2_53 + 2**40, 2**62 + 1, 2**63 - 1]),
    "int - float32": (lambda x, n: n - x, torch.linspace(-3, 3, 12), [5, 6, 7, BEYOND_2_53, 2**31 + 5]),
    "int64 * int": (lambda x, n: x * n, torch.arange(-6, 6), [5, 6, 7, BEYOND_2_53, 2**62 + 1, 2**63 - 1]),
    "int32 * int (wraps as ATen's cast)": (lambda x, n: x * n, torch.arange(-6, 6, dtype=torch.int32),
                                           [5, 6, 7, 2**31 + 5, 2**40 + 3]),
    "int64 / int (true division)": (lambda x, n: x / n, torch.arange(-6, 6), [5, 6, 7, BEYOND_2_53]),
    "bool + int": (lambda x, n: x + n, torch.arange(12) % 3 == 0, [5, 6, 7, BEYOND_2_53]),
    "float64 * int": (lambda x, n: x * n, torch.linspace(-3, 3, 12, dtype=torch.float64), [5, 6, 7, BEYOND_2_53]),
    "float32 * float": (lambda x, n: x * n, torch.linspace(-3, 3, 12),
                        [0.5, 0.25, 0.1, 1e30, -0.0, float("inf"), float("nan"), 1e-45]),
    "int64 * float (float32 result)": (lambda x, n: x * n, torch.arange(-6, 6), [0.5, 0.25, 0.1, 3.0000001, 1e30]),
    "float32 / float": (lambda x, n: x / n, torch.linspace(-3, 3, 12), [0.5, 0.25, 0.1, 3.0, -0.0, 1e-300]),
}


@pytest.mark.parametrize("case", sorted(SINGLE_OPS))
def test_single_ops_with_a_number_equal_eager_bitwise_for_adversarial_values(case):
    fn, x, values = SINGLE_OPS[case]
    cf = dynamo.compile(fn, backend="fused")
    for i, v in enumerate(values):
        if i == 2:
            before = counters()
        bitwise(cf(x, v), fn(x, v))
    # From the third value on (the dynamic entry made by the second): no lowering, no kernel.
    # (A negative int after positive ones fails the symbol's range guard: a static compile.)
    negatives = sum(1 for v in values[2:] if isinstance(v, int) and v < 2)
    assert moved(before)["units_loaded"] <= negatives and moved(before)["lowerings"] <= negatives, moved(before)


def test_a_constant_int_beyond_2_53_is_not_rounded_through_a_double():
    # The static path: the number is a constant of the graph. Before, the kernel multiplied by
    # (float)(double)n = 2^53 where eager gives (float)n = 2^53 + 2^30.
    def f(x):
        return x * BEYOND_2_53

    x = torch.ones(4)
    got = dynamo.compile(f, backend="fused")(x)
    bitwise(got, f(x))
    assert got[0].item() == 2.0**53 + 2.0**30


def test_an_int_beyond_int64_runs_the_call_on_the_eager_runner_and_raises_as_eager():
    def f(x, n):
        return x * n

    cf = dynamo.compile(f, backend="fused")
    x = torch.linspace(-3, 3, 12)
    for v in [5, 6, 7]:
        bitwise(cf(x, v), f(x, v))
    # Not an int64 kernel argument: the call runs on the eager runner, which raises as eager does
    # (torch 1.13: RuntimeError "Overflow when unpacking long"; torch 2.x: OverflowError).
    with pytest.raises((RuntimeError, OverflowError)) as want:
        f(x, 2**70)
    with pytest.raises((RuntimeError, OverflowError)) as got:
        cf(x, 2**70)
    assert (got.type, str(got.value)) == (want.type, str(want.value))
    bitwise(cf(x, 8), f(x, 8))


def test_a_number_whose_meta_run_fails_for_other_values_is_lowered_per_value_and_says_so(capfd, monkeypatch):
    # F.dropout checks p on meta tensors too: the probe value -(p + 1.25) fails, so p is not
    # value-free (correct, one lowering per value) and the log names the input and the node.
    monkeypatch.setenv("DYNAMO_LOGS", "fusion")

    def f(x, p):
        return F.dropout(x * 2, p, training=False) + p

    cf = dynamo.compile(f, backend="fused")
    x = torch.randn(4, 4)
    steps = []
    for p in [0.1, 0.2, 0.3, 0.4, 0.45]:
        before = counters()
        close(cf(x, p), f(x, p))
        steps.append(moved(before))
    # one lowering per value, or its program read back from the program cache (the program does
    # not depend on the value: the cache key has every node's sizes at this value)
    assert [s["lowerings"] + s["program_hits"] for s in steps[2:]] == [1, 1, 1], steps
    assert all(s["units_loaded"] == 0 for s in steps[2:]), steps
    err = capfd.readouterr().err
    assert ": float input 'p' is lowered per value: node 'dropout' did not run on meta tensors: dropout " \
           "probability has to be between 0 and 1, but got -1.45" in err, err


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.scale = 0.5
        self.step = 3

    def forward(self, x):
        self.step += 1
        return self.lin(x) * self.scale + self.step


def sgd_update(p, g, lr):
    return p - lr * g


def shift(x, i):
    return (x + i) * 2


PROGRAMS = ["sgd_lr", "module_scale_and_step", "loop_index"]


def run_program(name, fn, backend):
    """(outputs of fn compiled, eager outputs) over a workload of changing numbers."""
    torch.manual_seed(0)
    got, want = [], []
    if name == "sgd_lr":
        p, g = torch.randn(64), torch.randn(64)
        cf = dynamo.compile(sgd_update, backend=backend)
        for k in range(10):
            lr = 0.1 * (0.95**k)
            got.append(cf(p, g, lr))
            want.append(sgd_update(p, g, lr))
    elif name == "module_scale_and_step":
        m, ref = Scaled().eval(), Scaled().eval()
        ref.load_state_dict(m.state_dict())
        cm = dynamo.compile(m, backend=backend)
        x = torch.randn(4, 8)
        with torch.no_grad():
            for k in range(10):
                m.scale = ref.scale = 0.5 + 0.125 * k
                got.append(cm(x))
                want.append(ref(x))
        assert m.step == ref.step == 13
    else:
        x = torch.randn(16)
        cf = dynamo.compile(shift, backend=backend)
        for i in range(2, 12):
            got.append(cf(x, i))
            want.append(shift(x, i))
    return got, want


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "fused"])
@pytest.mark.parametrize("name", PROGRAMS)
def test_programs_with_changing_numbers_compile_at_most_twice(records, backend, name):
    before = counters()
    got, want = run_program(name, None, backend)
    for a, b in zip(got, want):
        if backend == "fused":
            close(a, b)
        else:
            bitwise(a, b)
    assert len(compiled(records)) <= 2, [r.get("dynamic_shapes") for r in compiled(records)]
    assert all(r["status"] != "cache-limit" for r in records)
    if backend == "fused":
        # The static first compile and the dynamic entry: two lowerings for ten values.
        assert moved(before)["lowerings"] <= 2, moved(before)
