"""Adversarial pass, session 8 (outsider testing of the capture core on both stacks): real model
code around nn.Module state (hooks registered and removed between calls, state_dict loads,
train/eval, buffers, properties, __getattr__/__setattr__ overrides, modules in dicts and lists),
grad modes around graph breaks, constants that change between calls, random streams, in-place ops
on input views, aliasing, and exceptions raised after side effects. About 100 programs were written
(scratch files, not kept); the cases here are the ones that found a wrong result, each reduced,
plus neighbours that pin the fixed paths. Each case is compared with eager call by call (results,
exceptions, side effects) under the backends eager and aot_eager, and under fused where tensors
flow through arithmetic a kernel could take."""
import pytest
import torch
import torch.nn as nn

from adversarial_harness import check_case_under, params, registry

CASES, case = registry()
BACKENDS = ("eager", "aot_eager")
FUSED = ("global_forward_pre_hook_registered_between_calls",
         "full_reductions_after_in_place_resize_and_transpose_of_inputs",
         "buffer_accumulates_a_value_that_requires_grad_then_a_caught_raise",
         "requires_grad_set_on_an_intermediate_inside_the_function",
         "a_leaf_made_inside_the_function_beside_an_input_that_requires_grad",
         "a_view_taken_before_a_growing_resize_keeps_the_old_storage")


def _global_hooks_between_calls(post):
    m = nn.Linear(2, 2)
    handles = []

    def drive(f, i):
        if i == 1:
            handles.append(nn.modules.module.register_module_forward_pre_hook(lambda mod, inp: (inp[0] * 3,)))
            if post:
                handles.append(nn.modules.module.register_module_forward_hook(lambda mod, inp, out: out + 1))
        try:
            return f(torch.ones(1, 2))
        finally:
            if i == 2:
                for h in handles:
                    h.remove()
    return m, drive


@case
def global_forward_pre_hook_registered_between_calls():
    # Was (aot_eager, fused): the AOT tracer called the graph module (an nn.Module) with gm(...), so
    # the global pre-hook ran once more on it and was traced into the graph: the input was scaled
    # twice (9x, not 3x).
    return _global_hooks_between_calls(post=False)


@case
def global_forward_pre_and_post_hooks_registered_between_calls():
    return _global_hooks_between_calls(post=True)


@case
def full_reductions_after_in_place_resize_and_transpose_of_inputs():
    # Was (fused): a kernel reading x after x.resize_(2, 2) took x's sizes from the graph input
    # (6 elements), so x.sum() summed the storage's old elements (15, not 6).
    def fn(x, y, z):
        x.resize_(2, 2)
        y.t_()
        z.resize_(3, 3)  # grows: a new storage (only its first 4 elements are set)
        return x.sum(), x.amax(), x.mean(), y.sum(), y.sum(0), z.view(-1)[:4].sum(), x.shape, y.stride()

    def drive(f, i):
        x, y, z = torch.arange(6.0), torch.arange(6.0).reshape(2, 3), torch.ones(4)
        return f(x, y, z), x, y, z.shape
    return fn, drive


@case
def buffer_accumulates_a_value_that_requires_grad_then_a_caught_raise():
    # Was (aot_eager, fused): the buffer's in-place update was replayed as a copy into it, so the
    # buffer did not get the autograd history eager gives it (requires_grad True in eager).
    log = []

    class M(nn.Module):
        def __init__(s):
            super().__init__()
            s.lin = nn.Linear(2, 2)
            s.n = 0
            s.register_buffer("acc", torch.zeros(2))

        def helper(s, x):
            s.n += 1
            s.acc.add_(x.sum(0))
            log.append(s.n)
            if x.shape[0] == 2:
                raise KeyError(f"batch {x.shape[0]}")
            return x

        def forward(s, x):
            y = s.lin(x)
            try:
                y = s.helper(y)
            except KeyError as e:
                log.append(str(e))
            return y * 2

    m = M()
    return m, lambda f, i: f(torch.ones(i + 1, 2)), lambda: (list(log), m.n, m.acc.requires_grad, m.acc.detach().clone())


@case
def requires_grad_set_on_an_intermediate_inside_the_function():
    # Was (aot_eager, fused): no input requires grad, so the graph was compiled for inference and
    # its outputs did not require grad (eager's do, through the new leaf y).
    def fn(x):
        y = x * 2
        y.requires_grad_()
        z = (y * y).sum()
        return z, z.requires_grad, y.is_leaf, torch.ones(2, requires_grad=True) * x

    def drive(f, i):
        z, rg, leaf, w = f(torch.ones(2))
        z.backward()
        return z, rg, leaf, w, w.requires_grad
    return fn, drive


@case
def a_leaf_made_inside_the_function_beside_an_input_that_requires_grad():
    # Was (aot_eager, fused; review): an input requires grad, so the graph was traced for training,
    # and the leaf z made inside it came back a non-leaf without .grad (eager: a leaf, .grad [1, 1, 1]).
    def fn(x, y):
        z = y.clone().requires_grad_()
        w = torch.ones(3, requires_grad=True)
        return z, x * 2, (w * x).sum()

    def drive(f, i):
        z, a, s = f(torch.ones(3, requires_grad=True), torch.arange(3.0))
        (z.sum() + a.sum() + s).backward()
        return z, a, s, z.is_leaf, z.grad
    return fn, drive


@case
def a_view_taken_before_a_growing_resize_keeps_the_old_storage():
    # Was (fused; review): v kept reading x's data pointer after resize_ had moved x to a new,
    # larger storage (freed memory: [0.12, 0.0] where eager gives [5, 5]). Graphs that give a
    # tensor new storage in place run on the eager runner under fused.
    def fn(x):
        v = x[:2]
        x.resize_(100000)
        x[:2].fill_(5.0)
        return v * 1, x[:2] * 1

    return fn, lambda f, i: f(torch.arange(6.0))


@pytest.mark.parametrize("case,backend", params(CASES, {}, BACKENDS))
def test_adversarial_s8(case, backend, monkeypatch):
    check_case_under(case, backend, monkeypatch)


@pytest.mark.parametrize("case", [c for c in CASES if c.name in FUSED], ids=lambda c: c.name)
def test_adversarial_s8_fused(case, monkeypatch):
    check_case_under(case, "fused", monkeypatch)
