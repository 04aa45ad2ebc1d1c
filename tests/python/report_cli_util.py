"""Helpers of the dynamo-explain / dynamo-profile end-to-end tests: where the programs are, how
to run them, and golden files (tests/python/golden/{explain,profile}/).

Golden files hold the --mask output (times, pids, hosts, directories masked). After a change to a
report, check that the difference makes sense, then regenerate with
    DYNAMO_UPDATE_GOLDEN=1 ctest --test-dir build -R 'py.test_(explain|profile)_cli'
"""
import os
import pathlib
import subprocess

import pytest

import pyfork

from stacks import STACK2

HERE = pathlib.Path(__file__).resolve().parent
SCRIPTS = HERE / "scripts"
GOLDEN = HERE / "golden"
EXTENSIONS = {"text": "txt", "json": "json", "junit": "xml", "markdown": "md", "sarif": "sarif"}


def program(name):
    build = os.environ.get("DYNAMO_BUILD_DIR")
    if not build:
        pytest.skip("DYNAMO_BUILD_DIR is not set (ctest sets it)")
    path = pathlib.Path(build) / "cli" / name
    if not path.exists():
        pytest.fail(f"{path} was not built")
    return str(path)


def run(tool, *args, cwd=None, timeout=300, fresh=False):
    """Runs a report program; returns the CompletedProcess (text mode). The script runs in a fork
    of the tests' pre-imported server (pyfork.py), or with fresh in a fresh interpreter as the
    program runs it for a user."""
    env = dict(os.environ)
    env.pop("DYNAMO_TRACE", None)
    if not fresh:
        env["DYNAMO_SCRIPT_PYTHON"] = pyfork.launcher()
    return subprocess.run([program(tool), *map(str, args)], cwd=cwd or SCRIPTS, env=env,
                          capture_output=True, text=True, timeout=timeout)


def line_of(script, text):
    """The 1-based line of `script` (in SCRIPTS) that contains `text`."""
    for i, line in enumerate((SCRIPTS / script).read_text().splitlines(), 1):
        if text in line:
            return i
    raise AssertionError(f"{text!r} is not in {script}")


def check_golden(kind, name, actual):
    """Compares `actual` with golden/<kind>/<name>. Where stack 2's output differs for a reason of
    torch 2.x's own (a guard on a registry torch 1.13 does not have), its golden is
    golden/stack2/<kind>/<name>, used on stack 2 when it exists. DYNAMO_UPDATE_GOLDEN=1 rewrites the
    stack's own file; on stack 2 it writes golden/stack2/ only when the output differs from stack 1's
    (and removes a stack-2 file that has become the same)."""
    path = GOLDEN / kind / name
    stack2_path = GOLDEN / "stack2" / kind / name
    if os.environ.get("DYNAMO_UPDATE_GOLDEN") == "1":
        if not STACK2:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(actual)
        elif path.exists() and path.read_text() == actual:
            stack2_path.unlink(missing_ok=True)
        else:
            stack2_path.parent.mkdir(parents=True, exist_ok=True)
            stack2_path.write_text(actual)
        return
    if STACK2 and stack2_path.exists():
        path = stack2_path
    assert path.exists(), f"{path} is missing; run with DYNAMO_UPDATE_GOLDEN=1 to create it"
    expected = path.read_text()
    assert actual == expected, (
        f"{path} differs from the output. Check the change makes sense, then regenerate with "
        f"DYNAMO_UPDATE_GOLDEN=1.\n--- actual ---\n{actual}")
