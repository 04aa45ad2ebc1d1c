"""Shared by the dynamo-minify / dynamo-bisect tests: runs the real programs from the build."""
import os
import subprocess
import sys

import pyfork

HERE = os.path.dirname(os.path.abspath(__file__))
SMALL_MODEL = os.path.join(HERE, "minify_small_model.py")


def tool(name):
    build = os.environ.get("DYNAMO_BUILD_DIR") or os.path.join(HERE, "..", "..", "..", "build")
    return os.path.join(build, "cli", name)


def run(name, *args, cwd, env=None, timeout=300, fresh=False):
    """Runs a tool; in a fork of the tests' pre-imported server (pyfork.py), or with fresh as a
    fresh process as a user runs it."""
    e = dict(os.environ)
    e.update(env or {})
    e["PYTHONPATH"] = os.pathsep.join([HERE, *[p for p in sys.path if p]])
    cmd = [tool(name)] if fresh else [pyfork.launcher(), tool(name)]
    proc = subprocess.run([*cmd, *map(str, args)], cwd=cwd, env=e, capture_output=True,
                          text=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def run_repro(path, cwd):
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    proc = subprocess.run([pyfork.launcher(), str(path)], cwd=cwd, env=e, capture_output=True,
                          text=True, timeout=120)
    return proc.returncode, proc.stderr + proc.stdout


def repro_nodes(text):
    """The call lines of repro.py's forward."""
    body = text.split("def forward(self", 1)[1].split("\n\n", 1)[0]
    return [line.strip() for line in body.splitlines()[1:] if " = " in line]
