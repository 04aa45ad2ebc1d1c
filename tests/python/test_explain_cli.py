"""dynamo-explain end to end: the real program runs scripts from tests/python/scripts/ in a fresh
interpreter and reports. Golden files per format (masked), JUnit and SARIF structure, the
1000-call loop counted on one line, exit codes 0/1/2, and every bad input with its message."""
import json
import shutil
import xml.etree.ElementTree as ET

import pytest

from report_cli_util import EXTENSIONS, SCRIPTS, check_golden, line_of, run

TOOL = "dynamo-explain"


@pytest.fixture(scope="module")
def loop_db(tmp_path_factory):
    """explain_loop.py run once, its store kept for every format: the script in a fresh
    interpreter, as the program runs it for a user (the other runs fork it: pyfork.py;
    test_run_directly_matches_db compares the two)."""
    db = tmp_path_factory.mktemp("explain") / "loop.db"
    r = run(TOOL, "--save-db", db, "explain_loop.py", fresh=True)
    assert r.returncode == 0, r.stderr
    assert "total 2004.0" in r.stderr  # the script's own output goes to stderr
    return db


@pytest.mark.parametrize("fmt", list(EXTENSIONS))
def test_golden(loop_db, fmt):
    r = run(TOOL, "--mask", "--format", fmt, "--db", loop_db)
    assert r.returncode == 0, r.stderr
    check_golden("explain", f"explain_loop.{EXTENSIONS[fmt]}", r.stdout)


def test_loop_break_counted_once_with_1000_occurrences(loop_db):
    doc = json.loads(run(TOOL, "--json", "--db", loop_db).stdout)
    (r,) = doc["runs"]
    branch = [b for b in r["breaks"] if b["kind"] == "data-dependent-branch"]
    assert len(branch) == 1
    assert branch[0]["occurrences"] == 1000
    assert branch[0]["line"] == line_of("explain_loop.py", "if y.sum() > 0:")
    assert branch[0]["user_stack"][0].endswith("x = step(x) * 0.5")
    text = run(TOOL, "--db", loop_db).stdout
    lines = [l for l in text.splitlines() if "data-dependent-branch at explain_loop.py" in l
             and "1000 times" in l]
    assert len(lines) == 2  # one in the distinct list, one under the function `step`
    assert "3 distinct graph breaks" in text


def test_run_directly_matches_db(loop_db):
    direct = run(TOOL, "--mask", "explain_loop.py")
    assert direct.returncode == 0, direct.stderr
    assert direct.stdout == run(TOOL, "--mask", "--db", loop_db).stdout


def test_junit_structure(loop_db):
    root = ET.fromstring(run(TOOL, "--junit", "--db", loop_db).stdout)
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    cases = suite.findall("testcase")
    assert [c.get("name").split(" (")[0] for c in cases] == [
        "train", "step", "<resume in step>", "report", "<resume in report>",
        "<resume in <resume in report>>"]
    assert int(suite.get("tests")) == len(cases)
    failing = [c for c in cases if c.findall("failure")]
    assert int(suite.get("failures")) == len(failing) == 4
    step = cases[1]
    (failure,) = step.findall("failure")
    assert failure.get("type") == "data-dependent-branch"
    assert "1000 times" in failure.get("message")
    assert "why:" in failure.text and "hint:" in failure.text
    assert all(c.get("classname") == "explain_loop.py" for c in cases)
    assert all(float(c.get("time")) >= 0 for c in cases)


def test_sarif_fields_and_lines(loop_db):
    doc = json.loads(run(TOOL, "--sarif", "--db", loop_db).stdout)
    assert doc["version"] == "2.1.0"
    (sarif_run,) = doc["runs"]
    assert sarif_run["tool"]["driver"]["name"] == "dynamo-explain"
    rule_ids = {r["id"] for r in sarif_run["tool"]["driver"]["rules"]}
    results = sarif_run["results"]
    assert len(results) == 3
    expected = {("data-dependent-branch", line_of("explain_loop.py", "if y.sum() > 0:")),
                ("print", line_of("explain_loop.py", 'print("total"')),
                ("tensor-to-python", line_of("explain_loop.py", 'print("total"'))}
    got = set()
    for res in results:
        assert res["ruleId"] in rule_ids
        assert res["message"]["text"]
        (loc,) = res["locations"]
        assert loc["physicalLocation"]["artifactLocation"]["uri"] == "explain_loop.py"
        got.add((res["ruleId"], loc["physicalLocation"]["region"]["startLine"]))
    assert got == expected


def test_exit_0_clean_script_under_fullgraph():
    r = run(TOOL, "--fullgraph", "--max-breaks", "0", "explain_clean.py")
    assert r.returncode == 0, r.stderr
    assert "0 distinct graph breaks" in r.stdout


def test_exit_1_max_breaks(loop_db):
    r = run(TOOL, "--max-breaks", "2", "--db", loop_db)
    assert r.returncode == 1
    assert "dynamo-explain: 3 distinct graph breaks, more than --max-breaks 2" in r.stderr
    assert r.stdout.startswith("dynamo-explain: run 1")  # the report is still written
    assert run(TOOL, "--max-breaks", "3", "--db", loop_db).returncode == 0


def test_exit_1_fullgraph(loop_db):
    r = run(TOOL, "--fullgraph", "--db", loop_db)
    assert r.returncode == 1
    assert ("dynamo-explain: --fullgraph: the script has 3 distinct graph breaks; the first is "
            "data-dependent-branch at explain_loop.py:9: if y.sum() > 0:") in r.stderr


def test_exit_2_script_failed_shows_its_traceback():
    r = run(TOOL, "--max-breaks", "0", "explain_fails.py")
    assert r.returncode == 2  # the script failure wins over the policy failure
    assert "Traceback (most recent call last):" in r.stderr
    assert f'explain_fails.py", line {line_of("explain_fails.py", "raise ValueError")}' in r.stderr
    assert "ValueError: boom from the script" in r.stderr
    assert "_run_script" not in r.stderr
    assert ("dynamo-explain: the script failed (exit code 1); the report covers what ran before "
            "that") in r.stderr
    assert "1 distinct graph break" in r.stdout


def test_script_args_and_output_file(tmp_path):
    out = tmp_path / "report.md"
    r = run(TOOL, "--markdown", "-o", out, "explain_clean.py", "--an-arg")
    assert r.returncode == 0, r.stderr
    assert out.read_text().startswith("### dynamo-explain: 0 distinct graph breaks")
    assert "explain_clean.py --an-arg" in out.read_text()


def test_bad_input_missing_script():
    r = run(TOOL, "no_such_script.py")
    assert r.returncode == 3
    assert r.stderr == "dynamo-explain: cannot run 'no_such_script.py': no such file\n"


def test_bad_input_syntax_error():
    r = run(TOOL, "explain_syntax_error.py")
    assert r.returncode == 3
    assert r.stderr.startswith(
        "dynamo-explain: cannot run 'explain_syntax_error.py': syntax error at line 4: ")
    assert "   |  def f(x)\n" in r.stderr
    assert r.stdout == ""


def test_bad_input_db_not_a_store(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database\n")
    r = run(TOOL, "--db", notes)
    assert r.returncode == 3
    assert f"dynamo-explain: error: '{notes}' is not a Dynamo trace store (not an SQLite database)" \
        in r.stderr
    missing = run(TOOL, "--db", tmp_path / "missing.db")
    assert missing.returncode == 3
    assert f"trace store '{tmp_path / 'missing.db'}' does not exist" in missing.stderr


@pytest.mark.parametrize("args, message", [
    (["--bogus", "explain_clean.py"], "dynamo-explain: unknown option '--bogus'"),
    (["--max-breaks", "many", "explain_clean.py"],
     "dynamo-explain: --max-breaks needs a non-negative integer, got 'many'"),
    (["--format", "pdf", "explain_clean.py"],
     "dynamo-explain: unknown format 'pdf' (text, json, junit, markdown, sarif)"),
    ([], "dynamo-explain: no script to run (or --db PATH) given"),
    (["--db", "x.db", "explain_clean.py"],
     "dynamo-explain: --db reports from an existing store and runs nothing; drop the script "
     "'explain_clean.py' or the --db option"),
])
def test_usage_errors(args, message):
    r = run(TOOL, *args)
    assert r.returncode == 64
    assert r.stderr.startswith(message + "\n\nusage: dynamo-explain [options] script.py")


def test_help():
    r = run(TOOL, "--help")
    assert r.returncode == 0
    assert "--max-breaks N" in r.stdout and "exit codes: 0 ok, 1 policy failed" in r.stdout


# ---- issue #7: one definition of a break occurrence, --root, -o, unfinished runs -------------

@pytest.fixture(scope="module")
def callee_db(tmp_path_factory):
    """explain_callee_break.py: outer calls helper 20 times; helper's branch breaks."""
    db = tmp_path_factory.mktemp("callee") / "callee.db"
    r = run(TOOL, "--save-db", db, "explain_callee_break.py")
    assert r.returncode == 0, r.stderr
    return db


def test_break_in_called_function_counted_once_per_call(callee_db):
    # outer's compile met the break inlined and broke at the call; helper's own compile met it
    # again. Both saw the same 20 passes: 20, not 40 (explain) or 2 (dynamo-trace).
    line = line_of("explain_callee_break.py", "if y.sum() > 0:")
    (r,) = json.loads(run(TOOL, "--json", "--db", callee_db).stdout)["runs"]
    (b,) = r["breaks"]
    assert (b["kind"], b["line"], b["occurrences"], b["compiles"]) == (
        "data-dependent-branch", line, 20, 2)
    assert r["break_occurrences"] == 20
    text = run(TOOL, "--db", callee_db).stdout
    assert (f"  1. data-dependent-branch at explain_callee_break.py:{line}, 20 times "
            "(met in 2 compiles)\n") in text
    assert "40 times" not in text
    trace = run("dynamo-trace", "breaks", callee_db)
    assert trace.returncode == 0, trace.stderr
    first, _, second = trace.stdout.splitlines()[:3]
    assert first == "20 graph breaks at 1 location"
    assert second.startswith("20 x data-dependent-branch at ")
    assert second.endswith(f"explain_callee_break.py:{line}")


def test_root_applies_when_running_a_script():
    # Run from scripts/ with --root its parent: the files show as scripts/..., as with --db on a
    # store with absolute files. The runner used to record the script's path as given
    # (relative), so no --root could apply to it.
    for root in (SCRIPTS.parent, ".."):
        r = run(TOOL, "--root", root, "--json", "explain_callee_break.py")
        assert r.returncode == 0, r.stderr
        (doc_run,) = json.loads(r.stdout)["runs"]
        assert {f["file"] for f in doc_run["functions"]} == {"scripts/explain_callee_break.py"}
        assert {b["file"] for b in doc_run["breaks"]} == {"scripts/explain_callee_break.py"}


def test_output_path_checked_before_the_script_runs(tmp_path):
    marker = tmp_path / "ran"
    script = tmp_path / "touch.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    r = run(TOOL, "-o", "/nonexistent/x", script)
    assert r.returncode == 3
    assert r.stderr == ("dynamo-explain: cannot write the report to '/nonexistent/x': directory "
                        "'/nonexistent' does not exist (create it, or pass -o with a path in an "
                        "existing directory); the script was not run\n")
    assert not marker.exists()
    r = run(TOOL, "-o", tmp_path, script)
    assert r.stderr == (f"dynamo-explain: cannot write the report to '{tmp_path}': it is a "
                        "directory (pass -o with a file name); the script was not run\n")
    assert not marker.exists()
    db_mode = run(TOOL, "-o", "/nonexistent/x", "--db", "x.db")
    assert db_mode.returncode == 3
    assert db_mode.stderr == ("dynamo-explain: cannot write the report to '/nonexistent/x': "
                              "directory '/nonexistent' does not exist (create it, or pass -o "
                              "with a path in an existing directory)\n")


def test_os_exit_keeps_the_trace():
    r = run(TOOL, "--json", "explain_os_exit.py")
    assert r.returncode == 0, r.stderr
    (doc_run,) = json.loads(r.stdout)["runs"]
    assert doc_run["finished_cleanly"] is True
    assert doc_run["crash"] == {"ended": "closed", "text": "closed"}
    assert doc_run["runtime_hits_recorded"] is True
    (b,) = doc_run["breaks"]
    assert (b["kind"], b["occurrences"]) == ("print", 5)


UNFINISHED = ("the run did not finish cleanly: its process ended without closing the trace store "
              "(os._exit, a crash or a kill) or is still running, so its last records and the "
              "runtime hit counts may be missing; the counts below may be low. Rerun it to the "
              "end, or call dynamo.trace.end_run() before os._exit.\n")


def test_run_that_did_not_close_says_so_instead_of_advising():
    r = run(TOOL, "--mask", "explain_killed.py")
    assert r.returncode == 2
    assert "dynamo-explain: the script was killed by signal 9" in r.stderr
    assert r.stdout.startswith("dynamo-explain: run 1 (explain_killed.py)\n" + UNFINISHED)
    assert "--capture-all" not in r.stdout
    profile = run("dynamo-profile", "--mask", "explain_killed.py")
    assert profile.stdout.startswith("dynamo-profile: run 1 (explain_killed.py)\n" + UNFINISHED)
    assert "--capture-all" not in profile.stdout
    (doc_run,) = json.loads(run(TOOL, "--json", "explain_killed.py").stdout)["runs"]
    assert doc_run["finished_cleanly"] is False
    # SIGKILL cannot be caught: no crash marker, the store cannot say more.
    assert doc_run["crash"] == {"ended": "did_not_close",
                                "text": "did not close (still running, or killed)"}


def test_sarif_uri_is_percent_encoded(tmp_path):
    # A file under a directory with a space, '#' and a non-ASCII name.
    odd = tmp_path / "my dir #1" / "caf\u00e9"
    odd.mkdir(parents=True)
    shutil.copy(SCRIPTS / "explain_callee_break.py", odd / "a b.py")
    r = run(TOOL, "--sarif", odd / "a b.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    (sarif_run,) = json.loads(r.stdout)["runs"]
    uris = {res["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
            for res in sarif_run["results"]}
    assert uris == {"my%20dir%20%231/caf%C3%A9/a%20b.py"}
    outside = run(TOOL, "--sarif", "--root", SCRIPTS, odd / "a b.py", cwd=tmp_path)
    (sarif_run,) = json.loads(outside.stdout)["runs"]
    uris = {res["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
            for res in sarif_run["results"]}
    quoted = str(tmp_path).replace("%", "%25").replace(" ", "%20")
    assert uris == {f"file://{quoted}/my%20dir%20%231/caf%C3%A9/a%20b.py"}


def test_dynamic_shapes_text_and_json():
    text = run(TOOL, "--mask", "explain_dynamic.py")
    assert text.returncode == 0, text.stderr
    assert ("     dynamic: n as s0 in [2, inf] (automatic dynamic: the value changed (5 -> 6)), x.size()[0] as s1 "
            "in [2, inf] (automatic dynamic: the size changed (4 -> 6)); 1 shape guard\n") in text.stdout
    assert (f"     specialised: x.size()[0] specialised to 6: used as a Python value at "
            f"explain_dynamic.py:{line_of('explain_dynamic.py', 'x.view(math.prod(x.shape')}\n") in text.stdout
    doc = json.loads(run(TOOL, "--json", "explain_dynamic.py").stdout)
    fns = {f["name"]: f for f in doc["runs"][0]["functions"]}
    assert fns["f"]["dynamic_shapes"] == {
        "dynamic": [{"source": "n", "symbol": "s0", "range": "[2, inf]",
                     "why": "automatic dynamic: the value changed (5 -> 6)"},
                    {"source": "x.size()[0]", "symbol": "s1", "range": "[2, inf]",
                     "why": "automatic dynamic: the size changed (4 -> 6)"}],
        "specialised": [],
        "guards": [f"n > 4  # comparison at explain_dynamic.py:{line_of('explain_dynamic.py', 'if n > 4:')}"],
        "notes": []}
    assert fns["scaled"]["dynamic_shapes"]["dynamic"] == []
    assert len(fns["scaled"]["dynamic_shapes"]["specialised"]) == 1


def test_dynamic_shapes_compile_and_guard_counts_as_the_docs_state():
    # docs/explain.md ("Dynamic shapes") quotes these two function lines: f's 8 guards and scaled's
    # 10 (2 compiles each).
    out = run(TOOL, "--mask", "explain_dynamic.py").stdout
    for fn, guards in (("f", 8), ("scaled", 10)):
        line = line_of("explain_dynamic.py", f"def {fn}(")
        head = f"\n  {fn} (explain_dynamic.py:{line}): 2 compiles (2 ok), 2 graphs, {guards} guards, <time> ("
        assert head in out, out
