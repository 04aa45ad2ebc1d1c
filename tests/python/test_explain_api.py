"""dynamo.explain(fn)(*args) (python/dynamo/explain.py): counts, distinct breaks with kinds, lines
and counts, the rendered report pinned with line numbers and times masked, and the older
explain(fn, *args) form's FutureWarning."""
import inspect
import os
import re
import warnings

import pytest
import torch

import dynamo
from stacks import only_on_stack2


def two_breaks(x, n):
    y = x.sin()
    print("two_breaks")
    z = y + n
    if z.sum() > 0:
        return z.cos()
    return z


def stepper(x, i):
    x = x * 2 + i
    print("step", i)
    return x + 1


def looped(x):
    for i in range(4):
        x = stepper(x, i)
    return x


def _line(fn, text):
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, l in enumerate(lines) if text in l)


def _explain(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dynamo.explain(fn)(*args)


def test_two_breaks_counts_kinds_and_lines(capsys):
    out = _explain(two_breaks, torch.ones(3), 1)
    assert out.graph_count == 3
    assert out.graph_break_count == 2
    assert out.op_count == 5        # sin | add, sum, gt | cos
    assert out.ops_per_graph == [{"torch.Tensor.sin": 1},
                                 {"operator.add": 1, "torch.Tensor.sum": 1, "operator.gt": 1},
                                 {"torch.Tensor.cos": 1}]
    assert [(b.kind, b.line, b.source, b.count) for b in out.break_reasons] == [
        ("print", _line(two_breaks, 'print("two_breaks")'), 'print("two_breaks")', 1),
        ("data-dependent-branch", _line(two_breaks, "if z.sum()"), "if z.sum() > 0:", 1)]
    first = out.break_reasons[0]
    assert first.file == __file__
    assert first.reason == ("call to print(): print() writes to the console, a side effect that "
                            "cannot be part of a graph")
    assert first.hint.startswith("remove the print")
    assert first.user_stack == [{"file": __file__, "line": first.line, "source": 'print("two_breaks")'}]
    assert torch.equal(out.result, two_breaks(torch.ones(3), 1))
    assert {g["kind"] for g in out.out_guards} >= {"TENSOR_MATCH", "EQUALS_MATCH", "GRAD_MODE"}
    assert set(out.compile_times) == {"capture_ms", "guard_ms", "backend_ms", "total_ms"}
    assert out.compile_times["total_ms"] > 0


def test_explain_resets_before_and_after():
    calls = []
    listener = dynamo.add_compile_listener(lambda r: calls.append(r["function"]))
    try:
        _explain(two_breaks, torch.ones(3), 1)
        _explain(two_breaks, torch.ones(3), 1)    # compiled anew: the first explain reset
        assert calls.count("two_breaks") == 2
    finally:
        dynamo.remove_compile_listener(listener)


def test_break_in_loop_is_one_reason_with_a_count():
    out = _explain(looped, torch.ones(3))
    # looped runs eagerly (a break inside its loop); stepper compiles for i = 0, 1 and 2 (from 2
    # on i is a symbolic int: i = 3 reuses that entry, one runtime hit). Occurrences are passes
    # through the break at run time (explain_report.h): 1 + 1 + (1 + 1 hit) = 4, one per call of
    # stepper. looped's own attempt met it too, inlined, on the first of those calls: the larger
    # sum counts, not both.
    assert len(out.break_reasons) == 1
    b = out.break_reasons[0]
    assert (b.kind, b.line, b.count, b.compiles) == ("print", _line(stepper, 'print("step"'), 4, 4)
    assert out.graph_break_count == 4
    assert b.functions == ["looped", "stepper"]
    assert [s["line"] for s in b.user_stack] == [_line(looped, "x = stepper"), b.line]
    assert out.not_compiled[0][0] == "looped" and out.not_compiled[0][3] == "skipped"


def _masked(text):
    text = text.replace(os.path.relpath(__file__) if not os.path.relpath(__file__).startswith("..")
                        else __file__, "FILE")
    text = re.sub(r"FILE:\d+", "FILE:N", text)
    return re.sub(r"\d+\.\d{3}", "T", text)


def test_str_format_two_breaks():
    out = _explain(two_breaks, torch.ones(3), 1)
    assert _masked(str(out)) == """\
Graph Count: 3
Graph Break Count: 2
Op Count: 5
Break Reasons (2 distinct):
  1. print at FILE:N
       print("two_breaks")
     why: call to print(): print() writes to the console, a side effect that cannot be part of a graph
     hint: remove the print from the hot path, or log after the compiled function returns
  2. data-dependent-branch at FILE:N
       if z.sum() > 0:
     why: branch on the value of a tensor (tensor %gt): the branch condition depends on the values inside a tensor, which are not known while capturing
     hint: compute both sides and select with torch.where(cond, a, b), or move the decision out of the compiled function
Ops per Graph:
  1. two_breaks: torch.Tensor.sin x1
  2. <resume in two_breaks>: operator.add x1, operator.gt x1, torch.Tensor.sum x1
  3. <resume in <resume in two_breaks>>: torch.Tensor.cos x1
Guards: 13 (DEFAULT_DTYPE 3, GRAD_MODE 3, TENSOR_MATCH 3, EQUALS_MATCH 2, ID_MATCH 1, NO_INSTANCE_ATTR 1)
Compile Time: T ms (capture T, guards T, backend T)
"""


def test_str_format_loop_shows_count_and_stack_once():
    text = _masked(str(_explain(looped, torch.ones(3))))
    assert """\
Break Reasons (1 distinct):
  1. print at FILE:N (4 times)
       print("step", i)
     why: call to print(): print() writes to the console, a side effect that cannot be part of a graph
     hint: remove the print from the hot path, or log after the compiled function returns
     user stack (first occurrence, outermost first):
       FILE:N: x = stepper(x, i)
       FILE:N: print("step", i)
Not compiled: looped (FILE:N) skipped: graph break inside a loop (call to print()); the function runs eagerly and the functions it calls are compiled on their own
""" in text
    assert text.count("user stack") == 1


def comprehension_break(x):
    ys = [x * i for i in range(3) if print(i) is None]
    return ys[0] + 1


def comprehension_break_in_try(x):
    try:
        ys = [x * i for i in range(3) if print(i) is None]
    except ValueError:
        ys = [x]
    return ys[0] + 1


def _skip_reasons(out):
    return [reason for _, _, _, status, reason in out.not_compiled if status == "skipped"]


_LOOP_SKIP = "); the function runs eagerly and the functions it calls are compiled on their own"


def test_a_break_in_a_comprehension_is_a_break_in_a_loop_not_in_a_try_block():
    # On 3.11 the comprehension is its own function, skipped for its loop; 3.12 inlines it
    # (PEP 709) under a handler that only restores the loop variable and re-raises, which
    # bytecode::firstUserHandler walks through (below, the 3.12 message).
    reasons = _skip_reasons(_explain(comprehension_break, torch.ones(3)))
    assert any(r.startswith("graph break inside a loop (") and r.endswith(_LOOP_SKIP) for r in reasons)
    assert not any("try block" in r for r in reasons)


@only_on_stack2("3.11 does not inline comprehensions (PEP 709)")
def test_a_break_in_an_inlined_comprehension_names_the_loop():
    reasons = _skip_reasons(_explain(comprehension_break, torch.ones(3)))
    assert "graph break inside a loop (call to print()" + _LOOP_SKIP in reasons


def test_a_break_in_a_comprehension_inside_a_try_is_in_a_try_block():
    out = _explain(comprehension_break_in_try, torch.ones(3))
    assert "graph break inside a try block (call to print()); the function runs eagerly so its exception handlers stay in force" in _skip_reasons(out)
    assert torch.equal(dynamo.compile(comprehension_break_in_try)(torch.ones(3)),
                       comprehension_break_in_try(torch.ones(3)))


def test_old_form_warns_and_works():
    with pytest.warns(FutureWarning, match=r"dynamo.explain\(f\)\(\*args, \*\*kwargs\) instead"):
        out = dynamo.explain(two_breaks, torch.ones(3), 1)
    assert out.graph_count == 3 and out.graph_break_count == 2


def test_no_breaks():
    out = _explain(lambda x: x * 2 + 1, torch.ones(2))
    assert (out.graph_count, out.graph_break_count, out.op_count) == (1, 0, 2)
    assert "Break Reasons: none" in str(out)


def test_explain_records_privately_and_leaves_the_traced_run_open(tmp_path):
    # dynamo.explain() reads its own private store: the user's traced run stays open and gets
    # none of explain's compiles, and later compiles are recorded into it again.
    path = tmp_path / "user.db"
    writer = dynamo.recording.enable(path)
    try:
        _explain(two_breaks, torch.ones(3), 1)
        assert not writer.closed
        dynamo.compile(lambda x: x + 1)(torch.ones(2))
        writer.flush()
        functions = [f["name"] for f in dynamo.trace.open(path).frames(writer.run_id)]
        assert len(functions) == 1 and functions[0].endswith("<lambda>")
    finally:
        dynamo.recording.disable()
        dynamo.reset()
