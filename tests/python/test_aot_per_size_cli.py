"""The per-size compiles of an AOT backend in the reports, end to end (docs/dynamic-shapes.md):
tests/python/scripts/aot_per_size.py runs under the real dynamo-explain; a graph with a dynamic
batch under aot_eager is compiled once per input signature (one with the entry, two on calls),
and dynamo-explain --json, dynamo-profile --json and dynamo-trace aot read them back from the
store, each linked to the compile that made the entry."""
import json

import pytest

from report_cli_util import run

SCRIPT = "aot_per_size.py"


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("per_size") / "per_size.db"
    r = run("dynamo-explain", "--save-db", path, SCRIPT)
    assert r.returncode == 0, r.stderr
    assert "done" in r.stdout + r.stderr  # the script ran to its end, every result exact
    return path


@pytest.fixture(scope="module")
def functions(db):
    r = run("dynamo-explain", "--json", "--db", db)
    assert r.returncode == 0, r.stderr
    (run_doc,) = json.loads(r.stdout)["runs"]
    return {f["name"]: f for f in run_doc["functions"]}


def test_explain_json_lists_the_per_size_compiles_of_the_dynamic_graph(functions):
    static, dynamic = functions["f"]["graphs"]
    assert "aot_per_size" not in static  # a static entry compiles once, in its compile
    per_size = dynamic["aot_per_size"]
    assert [c["when"] for c in per_size] == ["compile", "call", "call"]
    assert [c["signature"][0] for c in per_size] == ["x: [6, 3]", "x: [8, 3]", "x: [10, 3]"]
    assert all(c["backend"] == "aot_eager" and c["fallback"] is None for c in per_size)
    assert all(isinstance(c["compile_time_us"], int) and c["compile_time_us"] > 0 for c in per_size)
    assert "G['lin'].weight: [2, 3]" in per_size[2]["signature"]


def test_a_later_compile_keeps_only_its_own_aot_record(db, functions):
    # The AOT layer's records of f's compiles on calls go with f's entry, not with g's compile.
    (graph,) = functions["g"]["graphs"]
    assert graph["aot"]["fallback"] is None and "aot_per_size" not in graph
    out = run("dynamo-trace", "aot", db).stdout
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  g ("))
    block = []
    for line in lines[start + 1:]:
        if not line.startswith("    "):
            break
        block.append(line)
    graphs = [line for line in block if line.startswith("    compile #")]
    assert len(graphs) == 1 and "compile #0 " in graphs[0] and "graph 0: aot_eager (training)" in graphs[0]


def test_explain_json_shows_a_float_input_as_dynamic(functions):
    dyn = functions["h"]["dynamic_shapes"]["dynamic"]
    assert dyn == [{"source": "scale", "symbol": "float", "range": "",
                    "why": "automatic dynamic: the value changed (0.5 -> 0.25)"}]


def test_profile_json_counts_them_without_a_recompile(db):
    r = run("dynamo-profile", "--json", "--db", db)
    assert r.returncode == 0, r.stderr
    (run_doc,) = json.loads(r.stdout)["runs"]
    f = next(fn for fn in run_doc["functions"] if fn["name"] == "f")
    assert f["recompiles"] == 1  # batch 4 -> 6: the dynamic compile; none after it
    assert [c["signature"][0] for c in f["backend_compiles_per_size"]] == ["x: [6, 3]", "x: [8, 3]", "x: [10, 3]"]
    text = run("dynamo-profile", "--db", db).stdout
    assert ("aot_eager compiled a graph with dynamic sizes once per input signature, without recompiling the "
            "function: 3 compiles (x: [6, 3]; x: [8, 3]; x: [10, 3])") in text


def test_dynamo_trace_aot_lists_them_under_the_compile(db):
    out = run("dynamo-trace", "aot", db, "--mask").stdout
    assert ("    compile #1: aot_eager compiled its graph once per input signature (3 compiles):\n"
            "       with the entry: x: [6, 3] in <masked>\n"
            "       on a call: x: [8, 3] in <masked>\n"
            "       on a call: x: [10, 3] in <masked>\n") in out
