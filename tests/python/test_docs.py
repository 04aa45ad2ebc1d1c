"""Generated documentation stays in step with its source lists."""
import os
import subprocess
import sys

import dynamo

SRC = os.environ.get("DYNAMO_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))


def test_break_catalogue_is_up_to_date():
    r = subprocess.run([sys.executable, os.path.join(SRC, "scripts/gen_break_catalogue.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_catalogue_lists_every_kind_the_compiler_knows():
    text = open(os.path.join(SRC, "docs/graph-breaks.md")).read()
    kinds = dynamo._C._compiler.break_kinds()
    assert len(kinds) >= 10
    for slug, explanation, hint in kinds:
        assert f"| `{slug}` | {explanation} | {hint} |" in text
