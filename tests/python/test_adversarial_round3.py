"""Adversarial pass, round 3: the features that landed last (autocast and inference_mode blocks,
numpy arrays as inputs, symbolic floats, yield from / weakref / lazy torch.Size, forward hooks,
the fused backend on small models, sets and dynamic batch sizes), written the way model code is
written. Each case is compared with eager call by call (results, exceptions, side effects) under
the backends eager and aot_eager; cases failing today are strict xfails naming the diagnosis."""
import pytest
import torch

from adversarial_harness import check_case_under, params, registry

CASES, case = registry()
BACKENDS = ("eager", "aot_eager")


@case
def autocast_cpu_float16_enter_raises():
    # torch 1.x: autocast("cpu", dtype=float16) warns and disables itself in its constructor,
    # but __enter__ still calls set_autocast_cpu_dtype(float16), which raises.
    def fn(x):
        with torch.autocast("cpu", dtype=torch.float16):
            return x @ x
    return fn, lambda f, i: f(torch.randn(2, 2))


@case
def unused_matmul_of_mismatched_dtypes_raises():
    # The result is unused; eager's mm raises on bfloat16 @ float32 (autocast disabled there).
    def fn(x, w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            a = x @ w
            with torch.autocast("cpu", enabled=False):
                b = x @ w
                c = a @ w  # noqa: F841
        return a, b
    x, w = torch.randn(3, 3), torch.randn(3, 3)
    return fn, lambda f, i: f(x * i, w)


@case
def autocast_around_call_with_disabled_block():
    # aot_eager replayed its ATen graph under the caller's autocast: the mm recorded uncast in the
    # captured autocast(enabled=False) block was cast to bfloat16 again.
    def fn(x, w):
        a = x @ w
        with torch.autocast("cpu", enabled=False):
            b = x @ w
            c = a.float() @ w
        return a, b, c
    x, w = torch.randn(3, 3), torch.randn(3, 3)

    def drive(f, i):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=(i != 1)):
            return f(x, w)
    return fn, drive


@case
def autocast_around_training_call_with_disabled_block():
    # aot_eager's joint trace ran the backward of the block's float32 mm under the caller's
    # autocast (bfloat16 gradients); eager's backward, called outside autocast, runs it in float32.
    lin = torch.nn.Linear(3, 3)

    def fn(x):
        h = lin(x)
        with torch.autocast("cpu", enabled=False):
            g = h.float() @ lin.weight
        return (g * h).sum()

    def drive(f, i):
        lin.zero_grad(set_to_none=True)
        x = torch.randn(2, 3, requires_grad=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = f(x)
        loss.backward()
        return loss, x.grad, lin.weight.grad, lin.bias.grad
    return fn, drive


@case
def reshape_of_column_slice():
    # aot_eager traced on a contiguous copy of the strided input: the reshape became a view with
    # the copy's strides (aten._reshape_alias) and read the slice's storage as if contiguous.
    base = torch.arange(12.0).reshape(3, 4)
    xs = [base[:, :3], torch.randn(3, 3), base[:, :3].t(), torch.ones(1, 3).expand(3, 3)]

    def fn(x):
        y = x.view(-1) if x.is_contiguous() else x.reshape(-1)
        return y, x.flatten() * 2, x.stride()
    return fn, lambda f, i: f(xs[i])


case(calls=4)(reshape_of_column_slice)


@case
def flags_of_input_tensors():
    # is_inference(), is_conj() and is_neg() of the frame's tensors were answered from their meta
    # examples, which do not carry the flags: always False.
    with torch.inference_mode():
        frozen = torch.ones(2)
    z = torch.tensor([1 + 2j, 3 - 1j])
    xs = [(torch.ones(2), z), (frozen, z.conj()), (torch.ones(2), z._neg_view()), (frozen, z)]

    def fn(x, c):
        return x * 2, x.is_inference(), c.is_conj(), torch.is_conj(c), c.is_neg()
    return fn, lambda f, i: f(*xs[i])


case(calls=4)(flags_of_input_tensors)


@case
def inference_flag_of_view_of_input():
    with torch.inference_mode():
        frozen = torch.ones(2, 2)
    xs = [torch.ones(2, 2), frozen, torch.ones(2, 2)]

    def fn(x):
        return x * 2, x[0].is_inference()
    return fn, lambda f, i: f(xs[i])


def _state():
    return (torch.is_grad_enabled(), torch.is_inference_mode_enabled(), torch.is_autocast_cpu_enabled())


def _suspended_in(make_block):
    # A generator left suspended inside a block: eager leaves the block when the dropped generator
    # is closed; the graph entered it and never left, so the state stayed switched after the call.
    def gen(x):
        with make_block():
            yield x @ x * 2
            yield x * 3

    def fn(x):
        g = gen(x)
        return next(g)

    def drive(f, i):
        return f(torch.randn(2, 2, requires_grad=True)), _state()
    return fn, drive, _state


@case
def generator_suspended_in_autocast_block():
    return _suspended_in(lambda: torch.autocast("cpu", dtype=torch.bfloat16))


@case
def generator_suspended_in_inference_mode_block():
    return _suspended_in(torch.inference_mode)


@case
def generator_suspended_in_no_grad_block():
    return _suspended_in(torch.no_grad)


@case
def inference_mode_and_autocast_in_one_with():
    # The autocast example's dtype cast was made outside the traced inference mode: the block's
    # result read as a normal tensor (is_inference() False) although the graph makes an inference one.
    lin = torch.nn.Linear(2, 2)

    def fn(x):
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            b = lin(x)
        return b, b.is_inference(), b.requires_grad
    return fn, lambda f, i: f(torch.randn(1, 2))


XFAIL = {}


@pytest.mark.parametrize("case,backend", params(CASES, XFAIL, BACKENDS))
def test_adversarial_round3(case, backend, monkeypatch):
    check_case_under(case, backend, monkeypatch)
