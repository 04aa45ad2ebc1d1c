"""torchvision classification models compile with fullgraph=True to one graph and match eager
bitwise: outputs in eval mode; outputs, buffer updates (BatchNorm statistics) and gradients in
train mode.

The models of torchvision_cases.AOT_TRAIN_SET also run the train step under aot_eager here,
checked against the same eager step (test_aot_torchvision.py's assertions; that file runs the
rest of the set): one build and one eager step serve both backends.

CI runs the smallest builder of every family (about 4 minutes on 2 cores on stack 1). Stack 2's
default run sweeps one builder per family in eval mode (torchvision_cases.ONE_PER_FAMILY) and the
train step of torchvision_cases.STACK2_TRAIN (the others are skipped there with the reason;
DYNAMO_STACK2_FULL=1 runs them). Every builder (80 of them; about 45 minutes on stack 1, 31 on
stack 2 in eval mode) runs with DYNAMO_ALL_TORCHVISION=1; the last results are in docs/models.md
and docs/stacks.md.
"""
import copy
import os

import pytest
import torch

import dynamo
import dynamo.aot as aot
from capture_harness import Recorder, same
from stacks import full_set_on_stack1
from torchvision_cases import (AOT_TRAIN_SET, FAMILIES, FAMILY_REPRESENTATIVES, ONE_PER_FAMILY,
                               STACK2_TRAIN, all_builders, build, input_for)

ALL = bool(os.environ.get("DYNAMO_ALL_TORCHVISION"))
MODELS = all_builders() if ALL else FAMILY_REPRESENTATIVES


def cases(names, stack2_names, reason):
    """names as parameters; those outside stack2_names skipped on stack 2's default run."""
    if ALL:
        return names
    return [n if n in stack2_names else pytest.param(n, marks=full_set_on_stack1(reason)) for n in names]


EVAL_CASES = cases(MODELS, ONE_PER_FAMILY, "one builder per family in eval mode (the second "
                   "generation of a family captures the same layer kinds)")
TRAIN_CASES = cases(MODELS, STACK2_TRAIN, "the train step of torchvision_cases.STACK2_TRAIN, one "
                    "model per kind of train-mode state")


def flat(out):
    return list(out) if isinstance(out, tuple) else [out]


def pair(name, train):
    # a deep copy: the same parameters and buffers as a second build(name), without initialising
    # the weights again (seconds for the larger models)
    eager = build(name)
    compiled = copy.deepcopy(eager)
    eager.train(train)
    compiled.train(train)
    return eager, compiled


def test_representatives_exist_in_this_torchvision():
    assert set(FAMILY_REPRESENTATIVES) <= set(all_builders())
    # stack 2's subsets: every family once in eval mode, train models among the representatives
    assert sorted(max((f for f in FAMILIES if n.startswith(f)), key=len) for n in ONE_PER_FAMILY) == \
        sorted(FAMILIES)
    assert set(STACK2_TRAIN) <= set(FAMILY_REPRESENTATIVES)


@pytest.mark.parametrize("name", EVAL_CASES)
def test_eval_one_graph_identical_outputs(name):
    dynamo.reset()
    eager, model = pair(name, train=False)
    x = input_for(name)
    compiled = dynamo.compile(model, fullgraph=True)
    with torch.no_grad(), Recorder() as rec:
        expected = eager(x)
        got = compiled(x)
        again = compiled(x)
    assert len(rec.graphs) == 1
    for e, g, a in zip(flat(expected), flat(got), flat(again)):
        assert same(g, e) and same(a, e)


@pytest.mark.parametrize("name", TRAIN_CASES)
def test_train_identical_outputs_buffers_and_gradients(name):
    dynamo.reset()
    eager, model = pair(name, train=True)
    aot_model = copy.deepcopy(model) if name in AOT_TRAIN_SET else None  # before any step
    x = input_for(name)
    compiled = dynamo.compile(model, fullgraph=True)
    with Recorder() as rec:
        torch.manual_seed(1)  # dropout and stochastic depth draw the same numbers
        expected = eager(x)
        torch.manual_seed(1)
        got = compiled(x)
    assert len(rec.graphs) == 1
    assert all(same(g, e) for e, g in zip(flat(expected), flat(got)))
    sum(o.sum() for o in flat(expected)).backward()
    sum(o.sum() for o in flat(got)).backward()
    assert_same_state(eager, model)
    if aot_model is not None:
        # aot_eager's train step against the same eager step: outputs, buffers and gradients
        # bitwise, every AOT record a training graph without fallback
        dynamo.reset()
        before = len(aot.last_records())
        compiled_aot = dynamo.compile(aot_model, backend="aot_eager", fullgraph=True)
        torch.manual_seed(1)
        got_aot = compiled_aot(x)
        assert all(same(g, e) for e, g in zip(flat(expected), flat(got_aot))), "aot_eager outputs"
        sum(o.sum() for o in flat(got_aot)).backward()
        assert_same_state(eager, aot_model, "aot_eager: ")
        records = aot.last_records()[before:]
        assert records and all(r["fallback"] is None and r["training"] for r in records)


def assert_same_state(eager, model, what=""):
    """Buffers (BatchNorm statistics) and gradients of model bitwise equal to eager's."""
    for (n, b_e), (_, b_c) in zip(eager.named_buffers(), model.named_buffers()):
        assert same(b_c, b_e), f"{what}buffer {n} differs"
    for (n, p_e), (_, p_c) in zip(eager.named_parameters(), model.named_parameters()):
        assert (p_e.grad is None) == (p_c.grad is None), what + n
        if p_e.grad is not None:
            assert same(p_c.grad, p_e.grad), f"{what}gradient of {n} differs"
