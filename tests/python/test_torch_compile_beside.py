"""torch's own torch.compile (torch._dynamo) beside Dynamo in one process (stack 2, torch 2.x).

Both capture frames through the interpreter's one PEP 523 slot. Importing and using torch._dynamo
beside Dynamo works; a dynamo-compiled call (or a `with dynamo.optimize` block) under
torch.compile is refused with a UserError naming the user's line (torch would capture Dynamo's
compiled code again); a torch.compile'd function called from code Dynamo captures runs under
torch's hook alone, and both give eager's results."""
import inspect

import pytest
import torch

import dynamo
from stacks import only_on_stack2

pytestmark = only_on_stack2("torch 1.13 has no torch.compile / torch._dynamo")

WHY = ("  = why: torch._dynamo's frame hook (PEP 523) is active on this thread (the code runs inside a "
       "torch.compile'd function or torch._dynamo.optimize), and the interpreter has one hook: torch "
       "would capture Dynamo's compiled code again\n"
       "  = hint: use one compiler for this code: call the dynamo-compiled function outside the "
       "torch.compile'd one, or wrap it with torch.compiler.disable(...) so that torch.compile leaves "
       "it to Dynamo")


@pytest.fixture(autouse=True)
def _fresh():
    import torch._dynamo
    dynamo.reset()
    torch._dynamo.reset()
    yield
    dynamo.reset()
    torch._dynamo.reset()


def inner(x):
    return x * 2 + 1


def _line_of(fn, text):
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def test_importing_torch_dynamo_beside_ours_keeps_both_working():
    import torch._dynamo  # noqa: F401
    x = torch.randn(4)
    ours = dynamo.compile(inner, fullgraph=True)
    theirs = torch.compile(inner, backend="eager", fullgraph=True)
    assert torch.equal(ours(x), inner(x)) and torch.equal(theirs(x), inner(x))
    assert torch.equal(ours(x), theirs(x))


def test_dynamo_compiled_call_under_torch_compile_is_refused_with_the_users_line():
    ours = dynamo.compile(inner)

    def g(x):
        return ours(x).sin()

    with pytest.raises(dynamo.UserError) as info:
        torch.compile(g, backend="eager")(torch.randn(4))
    assert str(info.value) == (
        "error: a call of a dynamo-compiled function under torch.compile: both would capture the same frames\n"
        f"  --> {__file__}:{_line_of(g, 'ours(x)')}\n"
        "   |  return ours(x).sin()\n" + WHY)
    assert info.value.user_line == _line_of(g, "ours(x)")


def test_with_optimize_under_torch_compile_is_refused():
    def g(x):
        with dynamo.optimize("eager"):
            y = inner(x)
        return y.sin()

    with pytest.raises(dynamo.UserError) as info:
        torch.compile(g, backend="eager")(torch.randn(4))
    assert str(info.value) == (
        "error: `with dynamo.optimize(...)` (or dynamo.run) under torch.compile: both would capture the same "
        "frames\n"
        f"  --> {__file__}:{_line_of(g, 'with dynamo')}\n"
        '   |  with dynamo.optimize("eager"):\n' + WHY)


def test_the_hint_works_torch_compiler_disable_leaves_the_call_to_dynamo():
    ours = dynamo.compile(inner)
    records = []
    dynamo.add_compile_listener(records.append, listings=False)
    try:
        def g(x):
            return torch.compiler.disable(ours)(x).sin()

        x = torch.randn(4)
        assert torch.equal(torch.compile(g, backend="eager")(x), inner(x).sin())
    finally:
        dynamo.remove_compile_listener(records.append)
    assert [r["function"] for r in records if r["status"] == "compiled"] == ["inner"]


@pytest.mark.parametrize("form", ["compile", "with"])
def test_torch_compiled_function_called_from_dynamo_code_runs_under_torchs_hook(form):
    """torch's hook goes over ours while its function runs; ours leaves the frames it hands on
    alone (before, Dynamo also compiled torch.compile's own helpers: dataclass __init__s, lambdas)."""
    theirs = torch.compile(inner, backend="eager")
    records = []
    dynamo.add_compile_listener(records.append, listings=False)
    x = torch.randn(4)
    try:
        if form == "compile":
            def g(x):
                return theirs(x).sin()
            out = dynamo.compile(g)(x)
        else:
            with dynamo.optimize("eager"):
                out = theirs(x).sin()
    finally:
        dynamo.remove_compile_listener(records.append)
    assert torch.equal(out, inner(x).sin())
    names = {r["function"] for r in records}
    assert not any("__init__" in n or "lambda" in n for n in names), names


def test_a_torch_dynamo_disable_wrapper_is_traced_as_the_function_it_wraps():
    """torch._dynamo.disable(f) only switches torch's hook off around f (torch 2.x wraps
    Optimizer.zero_grad with it): Dynamo captures f itself, whole."""
    import torch._dynamo

    @torch._dynamo.disable
    def helper(x):
        return x.cos() * 3

    def f(x):
        return helper(x) + 1

    x = torch.randn(4)
    records = []
    dynamo.add_compile_listener(records.append, listings=False)
    try:
        assert torch.equal(dynamo.compile(f, fullgraph=True)(x), f(x))
    finally:
        dynamo.remove_compile_listener(records.append)
    ops = records[0]["graphs"][0]["op_counts"]
    assert ops == {"torch.Tensor.cos": 1, "operator.mul": 1, "operator.add": 1}, ops
