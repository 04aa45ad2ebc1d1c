"""One report per question: dynamo.explain() and dynamo-explain run the same function and agree
on the graphs, the op names and the op counts (both count ops by common/op_key.h)."""
import collections
import importlib.util
import json

import torch

import dynamo
from report_cli_util import SCRIPTS, run


def _load_script(name="explain_ops"):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines f; the __main__ block does not run
    return module


def test_explain_and_dynamo_explain_agree_on_op_names_and_counts():
    r = run("dynamo-explain", "--json", "explain_ops.py")
    assert r.returncode == 0, r.stderr
    (cli_run,) = json.loads(r.stdout)["runs"]
    cli_ops = collections.Counter()
    cli_graphs = 0
    for fn in cli_run["functions"]:
        for g in fn["graphs"]:
            cli_graphs += 1
            cli_ops.update(g["op_counts"])

    out = dynamo.explain(_load_script().f)(torch.ones(3))
    py_ops = collections.Counter()
    for ops in out.ops_per_graph:
        py_ops.update(ops)

    assert py_ops == cli_ops
    assert out.graph_count == cli_graphs == 2
    assert out.op_count == cli_run["ops"] == sum(cli_ops.values())
    assert py_ops["torch.Tensor.sum"] == 2
    assert "Tensor.sum" not in py_ops and "Tensor.sum" not in cli_ops
    assert out.graph_break_count == cli_run["break_occurrences"] == 1


def test_explain_and_dynamo_explain_group_and_count_breaks_alike():
    # One source of truth: dynamo.explain() is built from the report dynamo-explain renders.
    r = run("dynamo-explain", "--json", "explain_same_breaks.py")
    assert r.returncode == 0, r.stderr
    (cli_run,) = json.loads(r.stdout)["runs"]
    cli = [(b["kind"], b["line"], b["occurrences"], b["compiles"]) for b in cli_run["breaks"]]

    out = dynamo.explain(_load_script("explain_same_breaks").main)()
    py = [(b.kind, b.line, b.count, b.compiles) for b in out.break_reasons]

    assert py == cli
    assert [k for k, _, _, _ in py] == ["data-dependent-branch"]
    # Once per pass of the loop: main's skipped compile, outer's (helper inlined) and helper's
    # own all met the same 5 passes (storage::BreakTally), so 5, not 6 (1 + 5 summed).
    assert py[0][2] == 5
    assert py[0][3] == 3
    assert out.graph_break_count == cli_run["break_occurrences"] == py[0][2]
    assert out.graph_count == cli_run["graphs"] and out.op_count == cli_run["ops"]
