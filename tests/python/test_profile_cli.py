"""dynamo-profile end to end: the real program runs profile_recompiles.py (a changing input
size, a global rebound every call, a varying Python int, a cache-limit hit) and reports. Golden
files per format (masked), the size recompile naming dim/expected/seen/user line, the
suggestions, JUnit and SARIF structure, exit codes and bad inputs."""
import json
import xml.etree.ElementTree as ET

import pytest

from report_cli_util import EXTENSIONS, check_golden, line_of, run

TOOL = "dynamo-profile"
SCRIPT = "profile_recompiles.py"


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("profile") / "recompiles.db"
    # A fresh interpreter, as the program runs the script for a user (the others fork: pyfork.py).
    r = run(TOOL, "--save-db", path, SCRIPT, fresh=True)
    assert r.returncode == 0, r.stderr
    assert "hit cache_size_limit (4)" in r.stderr  # the compiler's own warning, unchanged
    return path


@pytest.fixture(scope="module")
def functions(db):
    (r,) = json.loads(run(TOOL, "--json", "--db", db).stdout)["runs"]
    return {f["name"]: f for f in r["functions"]}


@pytest.mark.parametrize("fmt", list(EXTENSIONS))
def test_golden(db, fmt):
    r = run(TOOL, "--mask", "--format", fmt, "--db", db)
    assert r.returncode == 0, r.stderr
    check_golden("profile", f"profile_recompiles.{EXTENSIONS[fmt]}", r.stdout)


def test_size_recompile_names_dim_expected_seen_and_user_line(functions, db):
    scale = functions["scale"]
    assert scale["compiles"] == 4 and scale["recompiles"] == 3
    first = scale["recompile_reasons"][0]["failures"][0]
    assert first["guard_kind"] == "TENSOR_MATCH"
    assert first["source"] == "x" and first["property"] == "size" and first["dim"] == 0
    assert (first["expected"], first["seen"]) == ("1", "2")
    # The guard is created by the line that first uses x.
    assert first["created_at"]["line"] == line_of(SCRIPT, "return x * 2")
    assert first["created_at"]["source_line"] == "return x * 2"
    text = run(TOOL, "--db", db).stdout
    assert ("  #1 tensor 'x' size mismatch at dim 0: expected 1, got 2\n"
            "       guard TENSOR_MATCH on x (size at dim 0): expected 1, seen 2\n"
            f"       created at profile_recompiles.py:{line_of(SCRIPT, 'return x * 2')}: "
            "return x * 2\n") in text


def test_suggestions(functions):
    def ids(name):
        return [s["id"] for s in functions[name]["suggestions"]]
    assert ids("scale") == ["changing-size"]
    assert "pad or bucket the input to a few sizes" in functions["scale"]["suggestions"][0]["message"]
    assert ids("shift") == ["global-rebound"]
    rebound = functions["shift"]["suggestions"][0]
    assert rebound["message"].startswith("global 'OFFSET' is rebound from call to call")
    assert rebound["where"]["line"] == line_of(SCRIPT, "return x + OFFSET")
    assert ids("power") == ["varying-int"]
    assert "torch.tensor(n)" in functions["power"]["suggestions"][0]["message"]
    assert ids("limited") == ["changing-size", "cache-limit"]


def test_cache_limit_hit_and_eager_after(functions):
    limited = functions["limited"]
    assert limited["cache_limit_hits"] == 1
    assert limited["ran_eagerly_after_cache_limit"] is True
    hit = [r for r in limited["recompile_reasons"] if r["status"] == "cache_limit"]
    assert len(hit) == 1
    assert hit[0]["failures"][0]["reason"] == "tensor 'x' size mismatch at dim 0: expected 4, got 5"
    assert "raise dynamo.config.cache_size_limit above 4" in limited["suggestions"][-1]["message"]


def test_junit_structure(db):
    root = ET.fromstring(run(TOOL, "--junit", "--db", db).stdout)
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    cases = {c.get("name").split(" (")[0]: c for c in suite.findall("testcase")}
    assert set(cases) == {"scale", "shift", "power", "limited"}
    # The Ant JUnit schema allows one <failure> per case: both causes are in it.
    (failure,) = cases["limited"].findall("failure")
    assert failure.get("type") == "changing-size,cache-limit"
    assert failure.get("message").startswith("2 failures: changing-size: ")
    assert "; cache-limit: hit cache_size_limit" in failure.get("message")
    assert int(suite.get("failures")) == 4


def test_sarif_lines(db):
    doc = json.loads(run(TOOL, "--sarif", "--db", db).stdout)
    assert doc["version"] == "2.1.0"
    (sarif_run,) = doc["runs"]
    assert sarif_run["tool"]["driver"]["name"] == "dynamo-profile"
    got = {(r["ruleId"], r["locations"][0]["physicalLocation"]["region"]["startLine"])
           for r in sarif_run["results"]}
    assert got == {("changing-size", line_of(SCRIPT, "return x * 2")),
                   ("global-rebound", line_of(SCRIPT, "return x + OFFSET")),
                   ("varying-int", line_of(SCRIPT, "return x * n")),
                   ("changing-size", line_of(SCRIPT, "return x - 1")),
                   ("cache-limit", line_of(SCRIPT, "def limited(x):"))}
    for r in sarif_run["results"]:
        uri = r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        assert uri == SCRIPT


def test_exit_codes(db, tmp_path):
    r = run(TOOL, "--max-recompiles", "2", "--db", db)
    assert r.returncode == 1
    assert ("dynamo-profile: scale (profile_recompiles.py:12) recompiled 3 times, more than "
            "--max-recompiles 2") in r.stderr
    assert run(TOOL, "--max-recompiles", "3", "--db", db).returncode == 0
    limit = run(TOOL, "--fail-on-cache-limit", "--db", db)
    assert limit.returncode == 1
    assert "dynamo-profile: limited (profile_recompiles.py:24) hit cache_size_limit" in limit.stderr
    failed = run(TOOL, "explain_fails.py")
    assert failed.returncode == 2 and "ValueError: boom from the script" in failed.stderr
    missing = run(TOOL, "nope.py")
    assert (missing.returncode, missing.stderr) == (
        3, "dynamo-profile: cannot run 'nope.py': no such file\n")
    notes = tmp_path / "notes.txt"
    notes.write_text("x")
    bad = run(TOOL, "--db", notes)
    assert bad.returncode == 3 and "is not a Dynamo trace store" in bad.stderr
    unknown = run(TOOL, "--max-breaks", "1", SCRIPT)  # an explain-only option
    assert unknown.returncode == 64
    assert unknown.stderr.startswith("dynamo-profile: unknown option '--max-breaks'")


def test_python_binding_matches_program(db):
    import dynamo  # noqa: F401  (PYTHONPATH is the build tree under ctest)
    from dynamo._C import _reports
    assert _reports.profile_report(str(db), "text", masked=True) == \
        run(TOOL, "--mask", "--db", db).stdout
    assert _reports.explain_policy(str(db), max_breaks=0) == (0, "")
    with pytest.raises(dynamo.UserError, match="unknown report format 'pdf'"):
        _reports.explain_report(str(db), "pdf")


def test_resume_functions_count_for_their_function(tmp_path):
    # explain_callee_break.py: outer and helper each break once, so each has one resume
    # function compiled once. They were listed as four functions "compiled once".
    r = run(TOOL, "--mask", "explain_callee_break.py")
    assert r.returncode == 0, r.stderr
    assert r.stdout == (
        "dynamo-profile: run 1 (explain_callee_break.py)\n"
        "2 functions: 4 compiles, 0 recompiles, 0 cache-limit hits, compile time <time>\n"
        "\n"
        "2 functions without recompiles, compiled more than once (resume functions after graph "
        "breaks):\n"
        "  outer (explain_callee_break.py:15): compiled 2 times (1 + 1 in 1 resume function "
        "after graph breaks), <time> compiling\n"
        "  helper (explain_callee_break.py:8): compiled 2 times (1 + 1 in 1 resume function "
        "after graph breaks), <time> compiling\n")
    assert "compiled once" not in r.stdout
    (doc_run,) = json.loads(run(TOOL, "--json", "explain_callee_break.py").stdout)["runs"]
    outer = {f["name"]: f for f in doc_run["functions"]}["outer"]
    assert (outer["compiles"], outer["resume_compiles"], outer["compiles_with_resume"]) == (1, 1, 2)
