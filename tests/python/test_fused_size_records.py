"""The fused backend's lowerings per input signature in the trace store (docs/trace-store.md,
"Lowerings per input signature"): a dynamic fused entry called with three sizes records one
"dynamo.aot_per_size" artifact per lowering (its sizes, why it ran, its kernels: reused from an
earlier lowering by their family's template, or new), and dynamo-explain / dynamo-profile print
them. (New kernels of a later lowering, rows of graph "per_size": storage_tests and gui_tests.)"""
import json
import os
import subprocess
import sys

import pytest

from dynamo import _C

SCRIPT = r"""
import torch, dynamo

def f(x):
    return (x * 3 - 1).tanh() + x.sum(-1, keepdim=True)

cf = dynamo.compile(f, backend="fused")  # 4 static; 5 recompiles with the batch dynamic
with torch.no_grad():
    for b in (4, 5, 9, 13, 9):
        x = torch.randn(b, 8)
        torch.testing.assert_close(cf(x), f(x), rtol=1e-5, atol=1e-5)
print("done")
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("size_records")
    db = tmp / "t.db"
    env = dict(os.environ, DYNAMO_TRACE=str(db), DYNAMO_KERNEL_CACHE=str(tmp / "kernels"))
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "done" in r.stdout, r.stderr
    return db, _C.TraceReader(str(db))


def _lowerings(reader):
    (run,) = reader.runs()
    static, compile = reader.compiles(run_id=run["id"])
    rows = [a for a in reader.artifacts(run["id"]) if a["name"] == "dynamo.aot_per_size"]
    assert all(a["compile_id"] == compile["id"] for a in rows)  # none for the static entry
    return compile, [json.loads(a["data"]) for a in sorted(rows, key=lambda a: a["id"])]


def test_each_lowering_is_recorded_with_its_sizes_reason_and_kernels(store):
    _, reader = store
    compile, lowerings = _lowerings(reader)
    # 5 with the entry, 9 and 13 on calls; 9 again is no lowering.
    assert [d["lowering"] for d in lowerings] == [0, 1, 2]
    assert [d["when"] for d in lowerings] == ["compile", "call", "call"]
    assert [d["symbols"] for d in lowerings] == [["s0=5"], ["s0=9"], ["s0=13"]]
    assert [d["reason"] for d in lowerings] == ["first input signature"] + ["new input signature"] * 2
    assert all(d["backend"] == "fused" and d["lower_ms"] > 0 and d["compile_ms"] >= d["lower_ms"] for d in lowerings)
    first, *later = lowerings
    kernels = reader.kernels_of_compile(compile["id"])
    own = [k for k in kernels if k["graph"] == "dynamo"]
    # The first lowering's kernels are the compile's own rows, compiled (a fresh kernel cache).
    assert [k["code_id"] for k in first["kernels"]] == [k["id"] for k in own]
    assert not any(k["reused"] or k["cache_hit"] for k in first["kernels"])
    assert all(k["compile_ms"] > 0 for k in first["kernels"])
    # Sizes 9 and 13: the probe made the batch a parameter, so every kernel is the first one's
    # (a family hit): no compile, no new row, the code id names the first lowering's row.
    for d in later:
        assert [k["name"] for k in d["kernels"]] == [k["name"] for k in own]
        assert all(k["reused"] for k in d["kernels"]), d
        assert [k["code_id"] for k in d["kernels"]] == [k["id"] for k in own]


def test_a_lowering_at_a_call_writes_no_row_for_a_reused_kernel(store):
    _, reader = store
    compile, lowerings = _lowerings(reader)
    kernels = reader.kernels_of_compile(compile["id"])
    assert {k["graph"] for k in kernels} == {"dynamo"}
    assert len(kernels) == len(lowerings[0]["kernels"])


def test_explain_and_profile_print_the_lowerings(store):
    from report_cli_util import run
    db, _ = store
    text = run("dynamo-explain", "--db", db).stdout
    assert "     dynamic: x.size()[0] as s0 in [2, inf] (automatic dynamic: " in text, text
    assert "       fused lowering per input signature: 3 compiles (x: [5, 8]; x: [9, 8]; x: [13, 8]), " in text, text
    lines = [line.strip() for line in text.splitlines() if line.strip().startswith("lowering #")]
    assert len(lines) == 3, text
    assert lines[0].startswith("lowering #0 at s0=5 (first input signature): 1 kernel new, 0 reused"), text
    assert lines[1].startswith("lowering #1 at s0=9 (new input signature): 0 kernels new, 1 reused"), text
    assert " reused (family hit); lowering " in lines[1]
    doc = json.loads(run("dynamo-explain", "--json", "--db", db).stdout)
    _, graph = doc["runs"][0]["functions"][0]["graphs"]
    assert [c["lowering"] for c in graph["aot_per_size"]] == [0, 1, 2]
    assert all(k["reused"] for k in graph["aot_per_size"][1]["kernels"])
    profile = run("dynamo-profile", "--db", db).stdout
    assert "    lowering #2 at s0=13 (new input signature): 0 kernels new, 1 reused" in profile, profile
