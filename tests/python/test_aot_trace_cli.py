"""The AOT records in the reports, end to end: tests/python/scripts/aot_train.py runs under the
real dynamo-explain (one train step and one inference call of a small model under aot_eager, and a
graph the AOT layer runs on the eager runner), then `dynamo-trace aot`, `dynamo-trace aot-graph`
and `dynamo-explain --json` read its store. Golden files (masked) in tests/python/golden/aot/;
regenerate with DYNAMO_UPDATE_GOLDEN=1 after checking the difference makes sense."""
import json

import pytest

from report_cli_util import check_golden, line_of, run

SCRIPT = "aot_train.py"


@pytest.fixture(scope="module")
def aot_db(tmp_path_factory):
    db = tmp_path_factory.mktemp("aot") / "aot.db"
    r = run("dynamo-explain", "--save-db", db, SCRIPT)
    assert r.returncode == 0, r.stderr
    assert "grad norm" in r.stderr  # the script ran to its end
    return db


@pytest.fixture(scope="module")
def explain_json(aot_db):
    r = run("dynamo-explain", "--json", "--db", aot_db)
    assert r.returncode == 0, r.stderr
    (run_doc,) = json.loads(r.stdout)["runs"]
    return {f["name"]: f for f in run_doc["functions"]}


def compile_ids(db):
    """compile id of each (function, attempt) with AOT records, from dynamo-trace aot."""
    out = run("dynamo-trace", "aot", db).stdout
    ids, function = {}, None
    for line in out.splitlines():
        if line.startswith("  ") and not line.startswith("    "):
            function = line.split(" (")[0].strip()
        elif line.strip().startswith("compile #"):
            attempt = int(line.split("#")[1].split(" ")[0])
            ids[(function, attempt)] = int(line.split("(id ")[1].split(")")[0])
    return ids


def test_golden_dynamo_trace_aot(aot_db):
    r = run("dynamo-trace", "aot", aot_db, "--mask")
    assert r.returncode == 0, r.stderr
    check_golden("aot", "aot_train.trace.txt", r.stdout)


def test_golden_dynamo_explain_text_and_json(aot_db):
    for fmt, name in (("text", "aot_train.explain.txt"), ("json", "aot_train.explain.json")):
        r = run("dynamo-explain", "--mask", "--format", fmt, "--db", aot_db)
        assert r.returncode == 0, r.stderr
        check_golden("aot", name, r.stdout)


def test_golden_backward_graph(aot_db):
    cid = compile_ids(aot_db)[("Net.forward", 0)]
    r = run("dynamo-trace", "aot-graph", aot_db, cid, "backward")
    assert r.returncode == 0, r.stderr
    check_golden("aot", "aot_train.backward.txt", r.stdout.replace(str(cid), "<compile>"))


def test_explain_json_has_the_training_compile_and_its_partition(explain_json):
    train, infer = explain_json["Net.forward"]["graphs"]
    aot = train["aot"]
    assert (aot["backend"], aot["training"], aot["fallback"]) == ("aot_eager", True, None)
    part = aot["partition"]
    assert part["mode"] == "min_cut"
    assert part["saved_values"] == len(part["saved"]) > 0
    assert part["recomputed_nodes"] == len(part["recomputed"]) > 0
    # Saved are the inputs of a Linear and a BatchNorm (f32[4, 8] and f32[8] values) and the
    # relu: sin and neg of cos's backward are recomputed from the relu.
    assert part["recomputed"] == ["sin", "neg"]
    assert part["bytes_saved"] == 544
    assert set(aot["phases_us"]) == {"trace", "import", "partition", "compile_forward"}
    assert aot["compile_time_us"] == sum(aot["phases_us"].values())
    assert aot["mutated_inputs"] == ["self.bn.num_batches_tracked"]
    # The inference compile (no_grad): a forward graph only, no partition.
    assert infer["aot"]["training"] is False
    assert (infer["aot"]["joint"], infer["aot"]["backward"], infer["aot"]["partition"]) == (None, None, None)
    assert infer["aot"]["forward"]["ops"] > 0


def test_explain_json_names_the_fallback(explain_json):
    (graph,) = explain_json["flat_and_double"]["graphs"]
    assert graph["aot"]["fallback"] == (
        "graph output 0 aliases input 'x' (a view or the same tensor): the AOT wrapper cannot give it "
        "eager's aliasing and autograd history")
    assert graph["aot"]["partition"] is None and graph["aot"]["joint"] is None


def test_graph_sizes_and_partition_agree_with_the_stored_graphs(aot_db, explain_json):
    """The counts of the report are those of the graphs aot-graph prints: the backward reads the
    saved values then one tangent, the recomputed nodes run in the backward and not in the
    forward, the forward returns the saved values after its outputs."""
    aot = explain_json["Net.forward"]["graphs"][0]["aot"]
    cid = compile_ids(aot_db)[("Net.forward", 0)]
    graphs = {}
    for which in ("joint", "forward", "backward"):
        r = run("dynamo-trace", "aot-graph", aot_db, cid, which, "--json")
        assert r.returncode == 0, r.stderr
        graphs[which] = json.loads(r.stdout)
        nodes = graphs[which]["nodes"]
        calls = [n for n in nodes if n["op"] in ("call_function", "call_method", "call_module")]
        assert (len(nodes), len(calls)) == (aot[which]["nodes"], aot[which]["ops"]), which
    saved = aot["partition"]["saved"]
    bw_inputs = [n["name"] for n in graphs["backward"]["nodes"] if n["op"] == "placeholder"]
    assert bw_inputs == saved + ["tangents_1"]
    bw_names = {n["name"] for n in graphs["backward"]["nodes"]}
    fw_names = {n["name"] for n in graphs["forward"]["nodes"]}
    for name in aot["partition"]["recomputed"]:
        assert name in bw_names and name not in fw_names, name
    (fw_out,) = [n for n in graphs["forward"]["nodes"] if n["op"] == "output"]
    assert fw_out["args"][0]["tuple"][-len(saved):] == [{"node": s} for s in saved]


def test_text_report_shows_the_aot_line(aot_db):
    out = run("dynamo-explain", "--db", aot_db).stdout
    assert ("       aot: aot_eager (training): joint 35 nodes, forward 19 nodes, backward 25 nodes; "
            "min_cut partition: 8 saved (544 bytes), 2 recomputed; ") in out
    line = line_of(SCRIPT, "def flat_and_double")
    assert f"flat_and_double (aot_train.py:{line})" in out


def test_aot_graph_errors_name_the_cause_and_the_fix(aot_db):
    ids = compile_ids(aot_db)
    r = run("dynamo-trace", "aot-graph", aot_db, ids[("Net.forward", 1)], "joint")
    assert r.returncode == 1
    assert r.stderr == (f"dynamo-trace: compile {ids[('Net.forward', 1)]} of {aot_db} has no AOT joint graph "
                        "(an inference compile has only a forward graph)\n")
    r = run("dynamo-trace", "aot-graph", aot_db, 999)
    assert r.returncode == 1
    assert r.stderr == (f"dynamo-trace: compile 999 of {aot_db} has no AOT records (it did not use an AOT "
                        f"backend such as aot_eager); list the AOT compiles with: dynamo-trace aot {aot_db}\n")
    r = run("dynamo-trace", "aot-graph", aot_db, ids[("Net.forward", 0)], "grads")
    assert r.returncode == 2
    assert r.stderr == ("dynamo-trace: unknown AOT graph 'grads': use joint, forward or backward "
                        "(or nothing for all three)\n")
    r = run("dynamo-trace", "aot-graph", aot_db, "x")
    assert r.returncode == 2
    assert r.stderr == "dynamo-trace: COMPILE_ID must be a positive integer, not 'x'\n"


def test_fallback_compile_prints_its_reason_and_no_graph(aot_db):
    ids = compile_ids(aot_db)
    r = run("dynamo-trace", "aot-graph", aot_db, ids[("flat_and_double", 0)])
    assert r.returncode == 0, r.stderr
    assert r.stdout == (f"# compile {ids[('flat_and_double', 0)]}, graph 0: aot_eager ran it on the eager "
                        "runner: graph output 0 aliases input 'x' (a view or the same tensor): the AOT "
                        "wrapper cannot give it eager's aliasing and autograd history\n")


def test_store_without_aot_compiles_says_so(tmp_path):
    db = tmp_path / "clean.db"
    assert run("dynamo-explain", "--save-db", db, "explain_clean.py").returncode == 0
    r = run("dynamo-trace", "aot", db)
    assert (r.returncode, r.stdout) == (0, "no AOT compiles (no graph went to aot_eager or another AOT backend)\n")
    doc = json.loads(run("dynamo-explain", "--json", "--db", db).stdout)
    graphs = [g for f in doc["runs"][0]["functions"] for g in f["graphs"]]
    assert graphs and all(g["aot"] is None for g in graphs)
