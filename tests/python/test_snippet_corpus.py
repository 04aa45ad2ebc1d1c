"""The snippet corpus (tests/python/snippets, issue 14): every snippet gives eager's results
compiled in default mode (graph breaks included), and with fullgraph=True it is captured whole
unless it is marked ``breaks=...``, in which case it raises dynamo.Unsupported naming that break.
scripts/count_captured.py prints the fraction captured whole."""
import pytest
import torch

import dynamo
from capture_harness import Recorder, same
from snippets import load
from stacks import known_gap_on_stack2

SNIPPETS = load()


@pytest.fixture(autouse=True)
def _fresh():
    dynamo.reset()
    yield
    dynamo.reset()


def _build(s):
    """Two independent copies (a closure's modules and optimizers are not deep-copyable)."""
    torch.manual_seed(0)
    fn, args = s.build()
    torch.manual_seed(0)
    return fn, args, s.build()


def test_the_corpus_has_at_least_200_snippets():
    assert len(SNIPPETS) >= 200 and len({s.name for s in SNIPPETS}) == len(SNIPPETS)


@pytest.mark.parametrize("s", SNIPPETS, ids=lambda s: s.name)
def test_snippet_equals_eager_in_default_mode(s, capsys):
    fn, args, (fn_e, args_e) = _build(s)
    torch.manual_seed(1)
    ref = fn_e(*args_e)
    eager_out = capsys.readouterr().out
    torch.manual_seed(1)
    out = dynamo.compile(fn)(*args)
    assert same(out, ref)
    assert same(list(args), list(args_e))  # mutations of the inputs, as in eager
    assert capsys.readouterr().out == eager_out


# What torch 2.x's own Python layer adds in these snippets' way (docs/stacks.md, known gaps).
_STACK2_GAPS = {
}


def _fullgraph_cases():
    for s in SNIPPETS:
        gap = _STACK2_GAPS.get(s.name)
        yield pytest.param(s, id=s.name, marks=[known_gap_on_stack2(gap)] if gap else [])


@pytest.mark.parametrize("s", list(_fullgraph_cases()))
def test_snippet_fullgraph(s):
    fn, args, (fn_e, args_e) = _build(s)
    torch.manual_seed(1)
    ref = fn_e(*args_e)
    torch.manual_seed(1)
    if s.breaks is not None:
        with pytest.raises(dynamo.Unsupported) as e:
            dynamo.compile(fn, fullgraph=True)(*args)
        assert s.breaks in str(e.value).splitlines()[0]
        return
    with Recorder() as rec:
        out = dynamo.compile(fn, fullgraph=True)(*args)
    assert same(out, ref)
    assert len(rec.graphs) == 1
