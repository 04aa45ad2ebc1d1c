"""The JUnit and SARIF reports of dynamo-explain and dynamo-profile validate against the schemas
strict CI importers use: JUnit XML against the Apache Ant JUnit schema with xmllint (Debian
libxml2-utils), SARIF against the OASIS SARIF 2.1.0 schema with jsonschema (python3-jsonschema).
Both validators are declared dependencies (scripts/lib.sh), so these tests run, never skip.

The schema files in tests/python/schemas/ are our own: no Debian or PyPI package ships either
schema. junit-ant.xsd encodes the Ant schema's structure and constraints; sarif-2.1.0-subset.json
is a subset of the OASIS schema (see their header comments)."""
import json
import pathlib
import subprocess

import jsonschema
import pytest

from report_cli_util import run

SCHEMAS = pathlib.Path(__file__).resolve().parent / "schemas"
JUNIT_XSD = SCHEMAS / "junit-ant.xsd"
SARIF_SCHEMA = SCHEMAS / "sarif-2.1.0-subset.json"

# (tool, script): a loop with breaks, recompiles and a cache-limit hit, a break in a callee, a
# killed run (no compile recorded, a <system-err> note).
CASES = [("dynamo-explain", "explain_loop.py"), ("dynamo-profile", "profile_recompiles.py"),
         ("dynamo-explain", "explain_callee_break.py"),
         ("dynamo-profile", "explain_callee_break.py"), ("dynamo-explain", "explain_killed.py")]


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """One store per script, recorded once."""
    out = {}
    for _, script in CASES:
        if script in out:
            continue
        db = tmp_path_factory.mktemp("schemas") / (script + ".db")
        r = run("dynamo-explain", "--save-db", db, script)
        assert r.returncode in (0, 2), r.stderr
        out[script] = db
    return out


def xmllint(xml_path):
    return subprocess.run(["xmllint", "--noout", "--schema", str(JUNIT_XSD), str(xml_path)],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("masked", [False, True], ids=["plain", "masked"])
@pytest.mark.parametrize("tool, script", CASES)
def test_junit_validates_against_the_ant_schema(stores, tmp_path, tool, script, masked):
    args = ["--junit", "--db", stores[script]] + (["--mask"] if masked else [])
    r = run(tool, *args)
    assert r.returncode in (0, 1), r.stderr
    report = tmp_path / "report.xml"
    report.write_text(r.stdout)
    check = xmllint(report)
    assert check.returncode == 0, check.stderr
    assert check.stderr.strip() == f"{report} validates"


def test_the_xsd_rejects_what_strict_importers_reject(tmp_path):
    # The old report shape: attributes on <testsuites>, no id/package/timestamp/hostname, no
    # <properties>, two failures and a system-out inside one case.
    old = tmp_path / "old.xml"
    old.write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<testsuites name="t" tests="1"><testsuite name="s" tests="1" failures="1" errors="0" '
        'time="0"><testcase classname="c" name="n" time="0"><failure type="a">x</failure>'
        '<failure type="b">y</failure><system-out>z</system-out></testcase></testsuite>'
        '</testsuites>\n')
    check = xmllint(old)
    assert check.returncode != 0
    for missing in ("'id'", "'package'", "'timestamp'", "'hostname'"):
        assert f"The attribute {missing} is required but missing" in check.stderr
    assert "Element 'testsuites', attribute 'name': The attribute 'name' is not allowed" in \
        check.stderr


@pytest.fixture(scope="module")
def sarif_validator():
    schema = json.loads(SARIF_SCHEMA.read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema,
                                      format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)


@pytest.mark.parametrize("tool, script", CASES)
def test_sarif_validates_against_the_sarif_schema(stores, sarif_validator, tool, script):
    r = run(tool, "--sarif", "--db", stores[script])
    assert r.returncode in (0, 1), r.stderr
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
              for e in sarif_validator.iter_errors(json.loads(r.stdout))]
    assert errors == []


def test_the_sarif_schema_rejects_an_unencoded_uri(sarif_validator):
    doc = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "t"}}, "results": [
        {"message": {"text": "m"}, "locations": [{"physicalLocation": {
            "artifactLocation": {"uri": "my dir/caf\u00e9.py"}}}]}]}]}
    assert not sarif_validator.is_valid(doc)
    doc["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] = \
        "my%20dir/caf%C3%A9.py"
    assert sarif_validator.is_valid(doc)
