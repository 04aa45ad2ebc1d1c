"""Compiles recorded into the trace store (python/dynamo/recording.py): with DYNAMO_TRACE in a
subprocess and with dynamo.recording.enable() in this process, every row kind is read back through
dynamo._C.TraceReader with its actual values (break kind and line, guard failure text, op counts);
a bad trace path warns once and the program completes; compiled calls record nothing; and the
dynamo-demo program runs end to end."""
import collections
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import dynamo
import dynamo.recording
import dynamo.trace
from dynamo import _C, graph_io
import pyfork

# Both the subprocess script and the in-process tests compile this function: a data-dependent
# branch (graph break at the `if`), then a second size (a recompile with a guard failure).
BRANCHY = """\
import torch


def branchy(x):
    y = x * 2 + 1
    if y.sum() > 0:
        return y.relu()
    return y - 1
"""
BRANCH_LINE = 6   # the `if` in BRANCHY
DEF_LINE = 4      # `def branchy` in BRANCHY


def _run(args, env_extra, timeout=300, cwd=None):
    env = dict(os.environ)
    env.pop("DYNAMO_TRACE", None)
    env.update(env_extra)
    return subprocess.run([pyfork.launcher(), *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def _script(tmp_path, body):
    (tmp_path / "branchy.py").write_text(BRANCHY)
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(body))
    return str(script)


def _break_kind(slug):
    return {k: (explanation, hint) for k, explanation, hint in _C._compiler.break_kinds()}[slug]


def _op_counts(serialized):
    doc = graph_io.load(serialized.decode())
    return dict(collections.Counter(n["target"] if n["op"] == "call_function" else
                                    f"torch.Tensor.{n['target']}"
                                    for n in doc["nodes"] if n["op"].startswith("call_")))


@pytest.fixture
def clean_recording(monkeypatch):
    """No DYNAMO_TRACE, no run, recording not disabled; the run is ended afterwards."""
    monkeypatch.delenv("DYNAMO_TRACE", raising=False)
    monkeypatch.setattr(dynamo.config, "trace_path", None)
    monkeypatch.setattr(dynamo.recording, "_off", False)
    dynamo.trace.end_run()
    yield
    dynamo.recording.disable()
    dynamo.trace.end_run()


def _load_branchy(tmp_path):
    path = tmp_path / "branchy_inproc.py"
    path.write_text(BRANCHY)
    namespace = {}
    exec(compile(BRANCHY, str(path), "exec"), namespace)
    return namespace["branchy"], str(path)


def _check_branchy_rows(store, run_id, file):
    """The rows of compiling branchy at sizes 4 then 8."""
    frames = {f["name"]: f for f in store.frames(run_id)}
    assert set(frames) == {"branchy", "<resume in branchy>"}
    frame = frames["branchy"]
    assert (frame["file"], frame["first_line"]) == (file, DEF_LINE)

    first, second = store.compiles(frame_id=frame["id"])
    assert (first["attempt"], first["status"], first["reason"]) == (0, "graph_break", "first call")
    assert second["attempt"] == 1 and second["status"] == "graph_break"
    assert "tensor 'x' size mismatch at dim 0: expected 4, got 8" in second["reason"]
    assert [name for name, _ in first["phases"]] == ["capture", "guards", "backend"]
    assert first["duration_us"] >= sum(us for _, us in first["phases"]) - 3  # rounding

    (brk,) = store.graph_breaks(first["id"])
    explanation, hint = _break_kind("data-dependent-branch")
    assert brk["kind"] == "data-dependent-branch"
    assert (brk["file"], brk["line"], brk["source_line"]) == (file, BRANCH_LINE, "if y.sum() > 0:")
    assert explanation in brk["explanation"]
    assert brk["hints"] == [hint]
    assert brk["user_stack"] == [f"{file}:{BRANCH_LINE}: if y.sum() > 0:"]

    (graph,) = store.graphs(first["id"])
    assert graph["format"] == "dynamo.graph/1"
    assert _op_counts(graph["serialized"]) == {"operator.mul": 1, "operator.add": 1,
                                               "torch.Tensor.sum": 1, "operator.gt": 1}
    assert graph["inputs"] == ["x"] and graph["num_nodes"] == 4
    assert "operator.mul(%x, 2)" in graph["printed"]

    guards = store.guards(first["id"])
    tensor_guards = [g for g in guards if g["kind"] == "TENSOR_MATCH"]
    assert [g["source"] for g in tensor_guards] == ["x"]
    assert "sizes=[4]" in tensor_guards[0]["checks"]
    assert any(g["kind"] == "GRAD_MODE" for g in guards)

    (failure,) = store.guard_failures(run_id=run_id)
    assert failure["reason"].startswith("tensor 'x' size mismatch at dim 0: expected 4, got 8")
    assert failure["compile_id"] == first["id"]     # the cache entry whose guards failed
    assert failure["frame_id"] == frame["id"]
    assert failure["guard_id"] == tensor_guards[0]["id"]
    assert failure["time_us"] > 0

    code = store.code(run_id, first["id"])
    assert [(c["kind"], c["name"]) for c in code] == [("transformed_bytecode", "branchy")]
    assert b"RESUME" in bytes(code[0]["content"]) or "RESUME" in str(code[0]["content"])
    assert store.integrity_check() == "ok"


# ---- DYNAMO_TRACE in a subprocess -----------------------------------------------------------

def test_dynamo_trace_records_every_row_kind(tmp_path):
    db = tmp_path / "trace.db"
    script = _script(tmp_path, """
        import sys, torch, dynamo
        sys.path.insert(0, sys.argv[1])
        from branchy import branchy
        f = dynamo.compile(branchy)
        for n in (4, 8):
            x = torch.randn(n)
            assert torch.equal(f(x), branchy(x))
        print("done")
    """)
    result = _run([script, str(tmp_path)], {"DYNAMO_TRACE": str(db)})
    assert result.returncode == 0, result.stderr
    assert "done" in result.stdout and "Warning" not in result.stderr, result.stderr
    with _C.TraceReader(str(db)) as store:
        (run,) = store.runs()
        assert run["end_time_us"] > 0  # closed at exit
        _check_branchy_rows(store, run["id"], str(tmp_path / "branchy.py"))


def test_bad_dynamo_trace_path_warns_once_and_the_program_completes(tmp_path):
    not_a_dir = tmp_path / "notes.txt"
    not_a_dir.write_text("a file, not a directory")
    bad = str(not_a_dir / "trace.db")
    script = _script(tmp_path, """
        import sys, torch, dynamo
        sys.path.insert(0, sys.argv[1])
        from branchy import branchy
        f = dynamo.compile(branchy)
        for n in (4, 8, 16):
            assert torch.equal(f(torch.ones(n)), branchy(torch.ones(n)))
        print("completed")
    """)
    result = _run([script, str(tmp_path)], {"DYNAMO_TRACE": bad})
    assert result.returncode == 0, result.stderr
    assert "completed" in result.stdout
    warned = [line for line in result.stderr.splitlines() if "tracing is off" in line]
    assert len(warned) == 1, result.stderr
    assert f"DYNAMO_TRACE={bad!r} cannot be used" in warned[0]
    assert "is not a directory" in warned[0] and "(hint: pass a path in a writable" in warned[0]
    assert not os.path.exists(bad)


def test_forked_child_records_into_its_own_run(tmp_path):
    db = tmp_path / "fork.db"
    script = _script(tmp_path, """
        import os, sys, torch, dynamo, dynamo.recording, dynamo.trace
        dynamo.recording.enable(sys.argv[1])
        def parent_fn(x): return x + 1
        dynamo.compile(parent_fn)(torch.ones(2))
        pid = os.fork()
        if pid == 0:
            def child_fn(x): return x * 5
            dynamo.compile(child_fn)(torch.ones(2))
            dynamo.trace.end_run()
            os._exit(0)
        os.waitpid(pid, 0)
    """)
    result = _run([script, str(db)], {})
    assert result.returncode == 0, result.stderr
    with _C.TraceReader(str(db)) as store:
        runs = store.runs()
        assert [[f["name"] for f in store.frames(r["id"])] for r in runs] == [
            ["parent_fn"], ["child_fn"]]
        assert runs[0]["pid"] != runs[1]["pid"]
        assert all(r["end_time_us"] > 0 for r in runs)


# ---- enable() / config.trace_path in this process -------------------------------------------

def test_enable_records_into_the_path_and_disable_closes_the_run(tmp_path, clean_recording):
    db = str(tmp_path / "inproc.db")
    branchy, file = _load_branchy(tmp_path)
    writer = dynamo.recording.enable(db)
    assert writer is not None and dynamo.recording.is_enabled()
    f = dynamo.compile(branchy)
    for n in (4, 8):
        x = torch.randn(n)
        assert torch.equal(f(x), branchy(x))
    dynamo.recording.disable()
    assert writer.closed and not dynamo.recording.is_enabled()
    with _C.TraceReader(db) as store:
        (run,) = store.runs()
        assert run["id"] == writer.run_id and run["end_time_us"] > 0
        _check_branchy_rows(store, run["id"], file)


def test_graph_op_counts_match_what_the_compiler_reported(tmp_path, clean_recording):
    db = str(tmp_path / "ops.db")
    seen = []
    dynamo.add_compile_listener(seen.append)
    try:
        dynamo.recording.enable(db)

        def ops(x):
            return torch.sin(x) + torch.cos(x) * 2 + x.relu().sum()
        dynamo.compile(ops)(torch.randn(3))
        dynamo.recording.disable()
    finally:
        dynamo.remove_compile_listener(seen.append)
    (record,) = [r for r in seen if r["function"].endswith("ops")]
    expected = record["graphs"][0]["op_counts"]
    assert expected["torch.sin"] == 1 and expected["torch.cos"] == 1
    with _C.TraceReader(db) as store:
        (compile_row,) = store.compiles(run_id=store.runs()[0]["id"])
        assert compile_row["status"] == "ok" and compile_row["reason"] == "first call"
        (graph,) = store.graphs(compile_row["id"])
        assert _op_counts(graph["serialized"]) == expected
        assert graph["num_nodes"] == record["graphs"][0]["num_nodes"]
        assert graph["serialized"].decode() == record["graphs"][0]["json"]
        assert graph["printed"] == record["graphs"][0]["text"]


def test_config_trace_path_turns_recording_on(tmp_path, clean_recording, monkeypatch):
    db = str(tmp_path / "config.db")
    monkeypatch.setattr(dynamo.config, "trace_path", db)
    assert dynamo.recording.is_enabled()

    def g(x):
        return x * 3
    dynamo.compile(g)(torch.ones(2))
    run = dynamo.trace.current_run()
    assert run is not None and run.path == db
    dynamo.trace.end_run()
    with _C.TraceReader(db) as store:
        assert store.counts()["compiles"] == 1


def test_compiled_calls_record_nothing(tmp_path, clean_recording):
    db = str(tmp_path / "calls.db")
    writer = dynamo.recording.enable(db)

    def h(x):
        return x + 1
    f = dynamo.compile(h)
    x = torch.ones(4)
    f(x)
    writer.flush()
    rows = writer.stats()["enqueued"]
    for _ in range(200):
        f(x)
    writer.flush()
    assert writer.stats()["enqueued"] == rows  # only compiles write rows


def test_enable_with_a_bad_path_warns_once_and_compiling_goes_on(tmp_path, clean_recording):
    bad = str(tmp_path / "missing-dir" / "t.db")
    with pytest.warns(dynamo.trace.TraceWarning) as caught:
        assert dynamo.recording.enable(bad) is None
    (w,) = caught
    assert str(w.message).startswith(f"dynamo: tracing is off: trace path {bad!r} cannot be used: ")
    assert "does not exist" in str(w.message) and "(hint: " in str(w.message)

    def k(x):
        return x - 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second warning would fail here
        f = dynamo.compile(k)
        assert torch.equal(f(torch.ones(3)), torch.zeros(3))
        assert torch.equal(f(torch.ones(5)), torch.zeros(5))
    assert not os.path.exists(bad)


def test_enable_without_a_path_says_how_to_give_one(clean_recording):
    with pytest.raises(ValueError, match=r"pass one, or set dynamo.config.trace_path"):
        dynamo.recording.enable()


def test_listener_and_store_share_the_status_vocabulary(tmp_path, clean_recording):
    # compile_statuses.def: the listener's "compiled" is the store's ok or graph_break.
    db = str(tmp_path / "status.db")
    dynamo.recording.enable(db)
    records = []
    dynamo.add_compile_listener(records.append)
    try:
        def plain(x):
            return x + 1

        def breaking(x):
            y = x * 2
            print("", end="")
            return y + 1
        dynamo.compile(plain)(torch.ones(2))
        dynamo.compile(breaking)(torch.ones(2))
    finally:
        dynamo.remove_compile_listener(records.append)
        dynamo.recording.disable()
    got = {(r["function"].rpartition(".")[2], r["status"], dynamo.recording.store_status(r))
           for r in records}
    assert ("plain", "compiled", "ok") in got
    assert ("breaking", "compiled", "graph_break") in got
    with _C.TraceReader(db) as store:
        run_id = store.runs()[0]["id"]
        stored = {(fr["name"].rpartition(".")[2], c["status"]) for fr in store.frames(run_id)
                  for c in store.compiles(frame_id=fr["id"])}
    assert {(f, s) for f, _, s in got} <= stored


def test_guard_failures_are_recorded_as_data(tmp_path, clean_recording):
    # The failing guard as the guard itself saw it, joined by id to its guard row, the failed
    # entry's compile and the recompile it caused (schema v3).
    db = str(tmp_path / "data.db")
    dynamo.recording.enable(db)

    def g(x, n):
        return x * n
    f = dynamo.compile(g)
    f(torch.ones(2), 2)
    f(torch.ones(2), 3)
    dynamo.recording.disable()
    with _C.TraceReader(db) as store:
        run_id = store.runs()[0]["id"]
        (frame,) = store.frames(run_id)
        first, second = store.compiles(frame_id=frame["id"])
        (failure,) = store.guard_failures(run_id=run_id)
        assert failure["compile_id"] == first["id"]
        assert failure["caused_compile_id"] == second["id"]
        assert (failure["guard_kind"], failure["guard_source"], failure["property"],
                failure["expected"], failure["seen"]) == ("EQUALS_MATCH", "n", "value", "2", "3")
        assert failure["reason"] == "'n' changed: expected 2, got 3"
        assert failure["line"] == g.__code__.co_firstlineno + 1
        guard = next(x for x in store.guards(compile_id=first["id"]) if x["id"] == failure["guard_id"])
        assert (guard["kind"], guard["source"]) == ("EQUALS_MATCH", "n")


def test_cache_entry_hits_are_counted_by_the_entry(tmp_path, clean_recording):
    db = str(tmp_path / "hits.db")
    dynamo.recording.enable(db)

    def h(x):
        return x + 1
    f = dynamo.compile(h)
    for _ in range(5):
        f(torch.ones(2))
    dynamo.recording.disable()  # closes the run: the hits are recorded first
    with _C.TraceReader(db) as store:
        run_id = store.runs()[0]["id"]
        (frame,) = store.frames(run_id)
        (c,) = store.compiles(frame_id=frame["id"])
    assert _C.TraceReader(db).artifacts(run_id=run_id) == []  # no text artifact any more
    text = dynamo.trace.report(db, "summary")
    assert "compiles 1" in text
    import sqlite3
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT compile_id, hits FROM cache_entry_hits").fetchall() == [
            (c["id"], 4)]


def test_recompile_reasons_pair_with_their_cache_entries(tmp_path, clean_recording):
    # Three sizes: the third compile lists two failures, newest entry first.
    db = str(tmp_path / "three.db")
    dynamo.recording.enable(db)

    def s(x):
        return (x * 2).sin()
    f = dynamo.compile(s, dynamic=False)  # one compile per size (static shapes)
    for n in (4, 8, 16):
        f(torch.randn(n))
    dynamo.recording.disable()
    with _C.TraceReader(db) as store:
        run_id = store.runs()[0]["id"]
        (frame,) = store.frames(run_id)
        compiles = store.compiles(frame_id=frame["id"])
        assert [c["attempt"] for c in compiles] == [0, 1, 2]
        pairs = sorted((f["compile_id"], f["reason"].split(" (guard")[0])
                       for f in store.guard_failures(run_id=run_id))
        by_attempt = {c["id"]: c["attempt"] for c in compiles}
        assert sorted((by_attempt[c], r) for c, r in pairs) == sorted([
            (0, "tensor 'x' size mismatch at dim 0: expected 4, got 8"),
            (0, "tensor 'x' size mismatch at dim 0: expected 4, got 16"),
            (1, "tensor 'x' size mismatch at dim 0: expected 8, got 16"),
        ])
        assert "\n" not in compiles[2]["reason"]


# ---- the demo program -----------------------------------------------------------------------

def test_demo_runs_end_to_end(tmp_path):
    pytest.importorskip("torchvision")
    db = tmp_path / "demo.db"
    result = _run(["-m", "dynamo.demo", "--db", str(db)], {}, cwd=str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    lines = out.splitlines()
    assert len(lines) <= 40, out
    assert lines[0] == "dynamo demo: resnet18 (eval, batch 1) and scale_if_large (a graph break)"
    assert "resnet18: 1 compile(s) (0 recompile), 1 graph(s), " in out
    assert "  top ops: conv2d x20, batch_norm x20, relu x17" in out
    assert "  resnet18 output equals eager (torch.equal): yes" in out
    assert ("  graph break [data-dependent-branch] at dynamo_demo_example.py:6:  if y.sum() > 10:"
            in out)
    assert ("  recompiled scale_if_large: tensor 'x' size mismatch at dim 0: expected 8, got 16"
            in out)
    assert "  scale_if_large output equals eager (torch.equal): yes" in out
    assert f"recorded into {db}" in out
    assert f"read back from {db} (run 1): 3 frames, 5 compiles, 5 graphs, 2 breaks" in out
    assert "  break 2 x data-dependent-branch at dynamo_demo_example.py:6" in out
    assert lines[-1] == "ok: compiled outputs equal eager"
    with _C.TraceReader(str(db)) as store:
        assert [f["name"] for f in store.frames(1)][0] == "ResNet.forward"
        assert store.integrity_check() == "ok"


def test_demo_with_an_unusable_db_says_how_to_fix_it(tmp_path, capsys, clean_recording):
    from dynamo import demo
    bad = str(tmp_path / "missing" / "demo.db")
    assert demo.main(["--db", bad]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dynamo-demo: error: cannot create trace store '{bad}': directory ")
    assert "does not exist" in err and "(dynamo-demo --db PATH)" in err


def test_demo_exits_1_when_an_output_differs(tmp_path, capsys, clean_recording, monkeypatch):
    pytest.importorskip("torchvision")
    from dynamo import demo
    monkeypatch.setattr(torch, "equal", lambda a, b: False)
    assert demo.main(["--db", str(tmp_path / "differs.db")]) == 1
    out = capsys.readouterr().out
    assert "  resnet18 output equals eager (torch.equal): NO" in out
    assert out.splitlines()[-1] == "FAILED: a compiled output differs from eager"
