"""The delta engine and the reduction passes in-process, with a Python interestingness test (no
fork server, no backend): what each pass of minifier/reduction_passes.def does to a graph, and
how many queries the engine needs."""
import os

import pytest
import torch
import torch.fx

from dynamo.minifier import defs, engine
from dynamo.minifier.passes import load
from dynamo.minifier.unit import Unit, is_generated


def chain(n=40, bad_at=23):
    """x -> n pointwise ops, one of them sin (the "failing" op), two outputs."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    w = g.placeholder("w")
    v = x
    for i in range(n):
        if i == bad_at:
            v = g.call_function(torch.sin, (v,))
        elif i % 3 == 0:
            v = g.call_function(torch.add, (v, w))
        else:
            v = g.call_function(torch.mul, (v, 1.5))
    side = g.call_function(torch.cos, (x,))
    g.output((v, side))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    return Unit(gm, (torch.randn(8, 6), torch.randn(8, 6)))


def has_sin(unit):
    return any(n.target is torch.sin for n in unit.calls())


def test_def_file_and_pass_modules_agree():
    names = [p.name for p in defs.reduction_passes()]
    assert names == ["isolate_kernel", "truncate_suffix", "remove_outputs", "dead_code",
                     "replace_with_values", "remove_unused_inputs", "bypass_ops", "shrink_shapes",
                     "generate_inputs"]
    # The kernel-only ones run with --after=kernel alone.
    assert [p.name for p in defs.reduction_passes() if p.kernel_only] == ["isolate_kernel", "bypass_ops"]
    assert defs.stage_passes("dynamo") == [n for n in names if n not in ("isolate_kernel", "bypass_ops")]
    assert defs.stage_passes("kernel") == names
    folder = os.path.dirname(load("dead_code").__file__)
    modules = sorted(f[:-3] for f in os.listdir(folder) if f.endswith(".py") and f != "__init__.py")
    assert modules == sorted(names)
    with pytest.raises(KeyError):
        load("no_such_pass")


def test_engine_shrinks_a_chain_to_the_one_failing_op():
    unit = chain()
    eng = engine.Engine(has_sin)
    small = eng.run(unit)
    assert [n.target for n in small.calls()] == [torch.sin]
    # has_sin does not look at values: generate_inputs replaced the one the sin reads.
    (value,) = small.inputs
    assert value.numel() == 1 and is_generated(value)
    assert eng.queries <= 26, eng.queries
    # Without generate_inputs it is the real one: recorded from an eager run of the original.
    names = [n for n in defs.stage_passes("dynamo") if n != "generate_inputs"]
    (value,) = engine.Engine(has_sin, passes=names).run(unit).inputs
    expected = unit.recorded_values()[next(n for n in unit.calls() if n.target is torch.sin).args[0].name]
    assert value.numel() == 1 and value.item() == expected.reshape(-1)[0].item()
    # Each accepted step is recorded, and sizes never grow.
    sizes = [s["size"] for s in eng.steps]
    assert sizes == sorted(sizes, reverse=True) and sizes[-1] == 1


def test_truncate_suffix_makes_an_earlier_node_the_output():
    unit = chain()
    small = engine.Engine(has_sin, passes=["truncate_suffix"]).run(unit)
    calls = small.calls()
    assert calls[-1].target is torch.sin and small.size() == 24
    assert list(small.output_node().args[0]) == [calls[-1]]


def test_remove_outputs_keeps_one():
    unit = chain()
    small = engine.Engine(has_sin, passes=["remove_outputs"]).run(unit)
    assert small.size() == unit.size() - 1           # cos went with its output
    assert not any(n.target is torch.cos for n in small.calls())


def test_a_failed_candidate_is_not_applied():
    unit = chain()
    never = engine.Engine(lambda u: False)
    assert never.run(unit) is unit and never.steps == []


def test_granularity_halves_from_the_largest_power_of_two():
    seen = []
    eng = engine.Engine(has_sin, passes=["replace_with_values"],
                        on_progress=lambda info: seen.append(info["granularity"]))
    eng.run(chain(n=10, bad_at=4))
    # 11 candidates: a chunk of 16 replaces every node (no graph left, no query), then 8, 4, 2,
    # 1 within the first round of passes (a success restarts at the same granularity).
    first_round = seen[:seen.index(1) + 1]
    assert first_round[0] == 8 and first_round == sorted(first_round, reverse=True)
    assert set(seen) == {8, 4, 2, 1}


def test_shrink_shapes_halves_while_the_failure_holds():
    unit = chain(n=4, bad_at=1)
    small = engine.Engine(lambda u: u.inputs[0].shape[0] >= 2, passes=["shrink_shapes"]).run(unit)
    assert tuple(small.inputs[0].shape) == (2, 1) and tuple(small.inputs[1].shape) == (1, 1)
    torch.testing.assert_close(small.inputs[0], unit.inputs[0][:2, :1], rtol=0, atol=0)


def test_generate_inputs_replaces_the_values_the_failure_does_not_depend_on():
    """x's values matter to the test (its first element must stay negative), w's do not: w gets
    generated values, which repro.py writes as the call that makes them again."""
    from dynamo.minifier import repro
    from dynamo.minifier.unit import generated_like, is_generated
    unit = chain(n=4, bad_at=1)
    x = unit.inputs[0].clone()
    x[0, 0] = -5.0
    unit = Unit(unit.gm, (x, unit.inputs[1].int()))
    eng = engine.Engine(lambda u: u.inputs[0].reshape(-1)[0].item() == -5.0, passes=["generate_inputs"])
    small = eng.run(unit)
    assert [is_generated(v) for v in small.inputs] == [False, True]
    assert small.inputs[0] is x
    assert torch.equal(small.inputs[1], torch.zeros(8, 6, dtype=torch.int32))  # zeros for integers
    # both (no), x (no), w (yes); x again after the success, and once more in the second round
    assert eng.queries == 5
    # Floating-point inputs get seeded normal values, the same every time.
    f = generated_like(torch.ones(3, 2, requires_grad=True))
    assert f.requires_grad and torch.equal(f.detach(), torch.randn(3, 2, generator=torch.Generator().manual_seed(0)))
    code, saved = repro.inputs_code([f, small.inputs[1]], "r_inputs.pt")
    assert not saved
    assert ("torch.randn((3, 2), dtype=torch.float32, generator=torch.Generator().manual_seed(0))"
            ".requires_grad_(),  # (3, 2) torch.float32") in code
    assert "torch.zeros((8, 6), dtype=torch.int32),  # (8, 6) torch.int32" in code
    # The query cache tells a unit with generated values from the one with the real ones.
    assert small.key() != unit.key()


def test_oracle_counts_and_drops():
    o = engine.Oracle(frozenset({1, 3}))
    assert [o.should_keep() for _ in range(5)] == [True, False, True, False, True]
    assert o.count == 5


SRC = os.environ.get("DYNAMO_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))


@pytest.mark.parametrize("doc, marker, make", [
    ("docs/minify.md", "reduction_passes.def (defs.markdown_passes)", defs.markdown_passes),
    ("docs/bisect.md", "bisect_ladder.def (defs.markdown_bisect)", defs.markdown_bisect),
    ("docs/debugging.md", "debugging reference (defs.debugging_reference)", defs.debugging_reference),
])
def test_generated_doc_tables_are_up_to_date(doc, marker, make):
    """The tables generated from the .def files; DYNAMO_UPDATE_GOLDEN=1 rewrites them."""
    path = os.path.join(SRC, doc)
    text = open(path, encoding="utf-8").read()
    begin, end = f"<!-- generated: {marker} -->\n", "<!-- end generated -->"
    head, rest = text.split(begin, 1)
    body, tail = rest.split(end, 1)
    if os.environ.get("DYNAMO_UPDATE_GOLDEN") and body != make():
        with open(path, "w", encoding="utf-8") as f:
            f.write(head + begin + make() + end + tail)
        body = make()
    assert body == make(), f"{doc} is out of date: rerun with DYNAMO_UPDATE_GOLDEN=1"
