"""The trace store from Python: round trips through dynamo._C, the bad inputs raising
dynamo.TraceStoreError with the exact message, the DYNAMO_TRACE policy (a bad path warns once
and the program goes on), the run record with versions, and fork()."""
import os
import platform
import sqlite3
import subprocess
import sys
import textwrap

import pytest

import dynamo
import dynamo.trace
from dynamo import _C


def _run_script(code, env_extra, tmp_path, timeout=120):
    env = dict(os.environ)
    env.pop("DYNAMO_TRACE", None)
    env.update(env_extra)
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(code))
    return subprocess.run([sys.executable, str(script), "--flag", "value"], env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_round_trip_of_every_record_type(tmp_path):
    path = str(tmp_path / "t.db")
    with _C.TraceWriter(path, argv=["prog", "-x"], python_version="3.11.2",
                        torch_version="1.13.1", rank=0, world_size=2) as w:
        frame = w.record_frame("model.py", 10, "forward")
        comp = w.record_compile(frame, attempt=1, status="graph_break", reason="first call",
                                duration_us=900, phases={"trace": 600, "codegen": 300})
        graph = w.record_graph(comp, b"\x00serialized", format="dynamo-graph/1",
                               printed="graph(x)", num_nodes=2, inputs=["x"], outputs=["y"])
        w.record_graph_break(comp, "data_dependent_branch", file="model.py", line=12,
                             source_line="if x.sum() < 0:", explanation="depends on a value",
                             hints=["use torch.where"], user_stack=["model.py:12 in forward"])
        guard = w.record_guard(comp, "TENSOR_MATCH", "x.size() == (4,)", source="L['x']",
                               file="model.py", line=11, source_line="y = x + 1")
        w.record_guard_failure(comp, "tensor 'x' size mismatch at index 0. expected 4, actual 8",
                               frame_id=frame, guard_id=guard)
        w.record_code("cuda_kernel", "__global__ void k() {}", name="k", compile_id=comp)
        w.record_code("transformed_bytecode", b"\x97\x00", name="forward", compile_id=comp)
        w.record_artifact("log.txt", "hello", media_type="text/plain", compile_id=comp)
        w.flush()
        assert w.stats()["committed"] == 9
        run_id = w.run_id
    assert w.closed

    with dynamo.trace.open(path) as r:
        assert r.schema_version == dynamo.trace.SCHEMA_VERSION == 3
        (run,) = r.runs()
        assert run["id"] == run_id
        assert run["argv"] == ["prog", "-x"]
        assert (run["rank"], run["world_size"]) == (0, 2)
        assert run["end_time_us"] >= run["start_time_us"] > 0
        (f,) = r.frames(run_id)
        assert (f["id"], f["file"], f["first_line"], f["name"]) == (frame, "model.py", 10, "forward")
        (c,) = r.compiles(frame_id=frame)
        assert c["id"] == comp and c["status"] == "graph_break" and c["attempt"] == 1
        assert c["phases"] == [("trace", 600), ("codegen", 300)]
        assert r.compiles(run_id=run_id) == [c]
        (g,) = r.graphs(comp)
        assert g["id"] == graph and g["serialized"] == b"\x00serialized"
        assert (g["inputs"], g["outputs"], g["num_nodes"]) == (["x"], ["y"], 2)
        (b,) = r.graph_breaks(comp)
        assert (b["kind"], b["file"], b["line"]) == ("data_dependent_branch", "model.py", 12)
        assert b["hints"] == ["use torch.where"]
        assert b["user_stack"] == ["model.py:12 in forward"]
        assert r.graph_break_groups()[0]["count"] == 1
        (gd,) = r.guards(comp)
        assert gd["checks"] == "x.size() == (4,)" and gd["source"] == "L['x']"
        (fail,) = r.guard_failures(run_id=run_id)
        assert fail["guard_id"] == guard and "size mismatch" in fail["reason"]
        kernel, bytecode = r.code(run_id, comp)
        assert kernel["language"] == "cuda" and kernel["content"] == "__global__ void k() {}"
        assert bytecode["content"] == b"\x97\x00"
        (a,) = r.artifacts(run_id)
        assert a["data"] == b"hello" and a["media_type"] == "text/plain"
        assert r.counts()["code"] == 2
        assert r.integrity_check() == "ok"


def test_bad_arguments_are_user_errors(tmp_path):
    with _C.TraceWriter(str(tmp_path / "t.db")) as w:
        with pytest.raises(dynamo.UserError, match="unknown code kind 'fortran'"):
            w.record_code("fortran", "x")
        with pytest.raises(dynamo.UserError, match="hints must be a list of str"):
            w.record_graph_break(1, "k", hints="not a list")
    with pytest.raises(dynamo.TraceStoreError, match="is closed"):
        w.record_frame("a.py", 1, "f")


def test_writer_arguments_come_from_the_row_definitions(tmp_path):
    # python/src/storage_rows.def makes the record_* methods: their parsing and their signatures.
    assert _C.TraceWriter.record_guard_failure.__doc__ == (
        "record_guard_failure(compile_id, reason, frame_id=0, guard_id=0, time_us=0, *, "
        "guard_kind='', guard_source='', property='', dim=-1, expected='', seen='', "
        "caused_compile_id=0, file='', line=0, source_line='') -> id")
    assert _C.TraceWriter.record_artifact.__doc__ == (
        "record_artifact(name, data, media_type='application/octet-stream', compile_id=0, "
        "time_us=0) -> id")
    path = str(tmp_path / "t.db")
    with _C.TraceWriter(path) as w:
        frame = w.record_frame("m.py", 3, "f")
        comp = w.record_compile(frame, 0, "graph_break", "first call")
        w.record_graph_break(comp, "print", "m.py", 4, "print(x)", detail="call to print()")
        w.record_guard_failure(comp, "tensor 'x' size mismatch", guard_kind="TENSOR_MATCH",
                               guard_source="x", property="size", dim=0, expected="4", seen="8",
                               file="m.py", line=3, source_line="def f(x):")
        with pytest.raises(TypeError, match=r"^record_frame\(\) missing required argument 'name' \(pos 3\)$"):
            w.record_frame("m.py", 3)
        with pytest.raises(TypeError, match=r"^'nme' is an invalid keyword argument for record_frame\(\)$"):
            w.record_frame("m.py", 3, "f", nme="g")
        with pytest.raises(TypeError, match=r"^record_frame\(\) got multiple values for argument 'file' \(pos 1\)$"):
            w.record_frame("m.py", 3, "f", file="n.py")
        with pytest.raises(TypeError, match=r"^record_frame\(\) takes at most 3 positional arguments \(4 given\)$"):
            w.record_frame("m.py", 3, "f", "g")
        with pytest.raises(dynamo.UserError, match="first_line must be int, not str$"):
            w.record_frame("m.py", "3", "f")
        with pytest.raises(TypeError, match=r"^record_guard_failure\(\) takes at most 5 positional"):
            w.record_guard_failure(comp, "r", 0, 0, 0, "TENSOR_MATCH")
    with _C.TraceReader(path) as r:
        (b,) = r.graph_breaks(comp)
        assert (b["kind"], b["line"], b["source_line"], b["detail"]) == ("print", 4, "print(x)", "call to print()")
        (f,) = r.guard_failures(compile_id=comp)
        assert (f["guard_kind"], f["guard_source"], f["property"], f["dim"], f["expected"], f["seen"]) == \
            ("TENSOR_MATCH", "x", "size", 0, "4", "8")
        assert (f["file"], f["line"], f["source_line"]) == ("m.py", 3, "def f(x):")
        (c,) = r.compiles(frame_id=frame)
        assert (c["status"], c["reason"], c["attempt"]) == ("graph_break", "first call", 0)


def test_unwritable_path_raises_trace_store_error_naming_file_and_fix():
    with pytest.raises(dynamo.TraceStoreError) as info:
        _C.TraceWriter("/etc/passwd/trace.db")
    e = info.value
    assert e.summary == ("cannot create trace store '/etc/passwd/trace.db': "
                         "'/etc/passwd' is not a directory")
    assert "DYNAMO_TRACE=" in e.hint
    assert "= hint: pass a path in a writable directory" in str(e)


def test_non_sqlite_file_is_refused_and_untouched(tmp_path):
    path = tmp_path / "notes.txt"
    content = b"these are my notes, not a database\n" * 10
    path.write_bytes(content)
    for opener in (_C.TraceWriter, dynamo.trace.open):
        with pytest.raises(dynamo.TraceStoreError) as info:
            opener(str(path))
        assert info.value.summary == (
            f"'{path}' is not a Dynamo trace store (not an SQLite database)")
        assert "pass a new file name" in info.value.hint
    assert path.read_bytes() == content


def test_newer_schema_is_refused_and_untouched(tmp_path):
    path = tmp_path / "future.db"
    _C.TraceWriter(str(path)).close()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 7")
    db.close()
    before = path.read_bytes()
    for opener in (_C.TraceWriter, dynamo.trace.open, dynamo.trace.upgrade):
        with pytest.raises(dynamo.TraceStoreError) as info:
            opener(str(path))
        assert info.value.summary == (
            f"'{path}' was written by trace-store schema version 7; "
            "this Dynamo reads up to version 3")
        assert info.value.hint == "upgrade Dynamo, or write to a new file"
    assert path.read_bytes() == before


def test_start_run_records_process_and_versions(tmp_path):
    import torch

    path = tmp_path / "run.db"
    run = dynamo.trace.start_run(path, rank=3, world_size=4)
    try:
        assert dynamo.trace.current_run() is run
        run.record_frame("f.py", 1, "f")
    finally:
        dynamo.trace.end_run()
    assert dynamo.trace.current_run() is None or os.environ.get("DYNAMO_TRACE")
    (r,) = dynamo.trace.open(path).runs()
    assert r["pid"] == os.getpid()
    assert r["argv"] == sys.argv
    assert r["python_version"] == platform.python_version()
    assert r["torch_version"] == torch.__version__
    assert r["dynamo_version"] == dynamo.__version__
    assert (r["rank"], r["world_size"]) == (3, 4)
    assert r["end_time_us"] > 0


def test_bad_dynamo_trace_path_warns_once_and_the_program_goes_on(tmp_path):
    result = _run_script("""
        import dynamo.trace
        assert dynamo.trace.current_run() is None
        assert dynamo.trace.current_run() is None
        print("still running")
    """, {"DYNAMO_TRACE": "/etc/passwd/trace.db"}, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "still running\n"
    warnings = [line for line in result.stderr.splitlines() if "TraceWarning" in line]
    assert len(warnings) == 1, result.stderr
    assert ("dynamo: tracing is off: DYNAMO_TRACE='/etc/passwd/trace.db' cannot be used: "
            "cannot create trace store '/etc/passwd/trace.db': '/etc/passwd' is not a directory"
            in warnings[0])
    assert "(hint: pass a path in a writable directory" in warnings[0]


def test_dynamo_trace_records_a_run_closed_at_exit(tmp_path):
    path = tmp_path / "env.db"
    result = _run_script("""
        import dynamo.trace
        run = dynamo.trace.current_run()
        run.record_frame("script.py", 1, "<module>")
        print(run.run_id)
    """, {"DYNAMO_TRACE": str(path)}, tmp_path)
    assert result.returncode == 0, result.stderr
    with dynamo.trace.open(path) as r:
        (run,) = r.runs()
        assert run["id"] == int(result.stdout)
        assert run["argv"][1:] == ["--flag", "value"]
        assert run["python_version"] == platform.python_version()
        assert run["torch_version"] != ""
        assert run["end_time_us"] > 0  # closed by the atexit handler
        assert len(r.frames(run["id"])) == 1


def test_persisted_rows_survive_os_exit(tmp_path):
    # persist(): one write to the row journal instead of a commit; the process ends before its
    # writer thread's batch, and the next reader inserts the rows.
    path = tmp_path / "p.db"
    result = _run_script("""
        import os
        import dynamo.trace
        run = dynamo.trace.current_run()
        run.persist()  # the first call commits and turns the journal on
        frame = run.record_frame("script.py", 1, "<module>")
        run.record_compile(frame, status="ok", reason="first call")
        run.persist()
        print(run.run_id, flush=True)
        os._exit(0)
    """, {"DYNAMO_TRACE": str(path)}, tmp_path)
    assert result.returncode == 0, result.stderr
    with dynamo.trace.open(path) as r:
        (run,) = r.runs()
        assert run["end_time_us"] == 0
        assert [f["name"] for f in r.frames(run["id"])] == ["<module>"]
        assert [c["reason"] for c in r.compiles(run_id=run["id"])] == ["first call"]
    assert not list(tmp_path.glob("p.db-rows-*"))


def test_forked_child_leaves_the_parent_run_alone(tmp_path):
    path = tmp_path / "fork.db"
    result = _run_script(f"""
        import os, sys
        import dynamo.trace
        parent = dynamo.trace.start_run({str(path)!r})
        parent.record_frame("parent.py", 1, "before_fork")
        pid = os.fork()
        if pid == 0:
            assert dynamo.trace.current_run() is None   # the parent's run is not the child's
            child = dynamo.trace.start_run({str(path)!r})
            child.record_frame("child.py", 1, "child")
            sys.exit(0)                                 # atexit runs: must not hang
        _, status = os.waitpid(pid, 0)
        assert status == 0, status
        parent.record_frame("parent.py", 2, "after_fork")
        print("ok")
    """, {}, tmp_path, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"
    with dynamo.trace.open(path) as r:
        runs = r.runs()
        assert len(runs) == 2
        names = sorted(f["name"] for run in runs for f in r.frames(run["id"]))
        assert names == ["after_fork", "before_fork", "child"]
        assert r.integrity_check() == "ok"


def test_reports_are_text(tmp_path):
    path = str(tmp_path / "rep.db")
    with _C.TraceWriter(path, argv=["prog"]) as w:
        f = w.record_frame("m.py", 1, "f")
        c = w.record_compile(f, status="graph_break")
        w.record_graph_break(c, "print", file="m.py", line=3, source_line="print(x)",
                             explanation="print is a side effect", hints=["remove it"])
    text = dynamo.trace.report(path, "breaks", mask=True)
    assert text.startswith("1 graph break at 1 location\n")
    assert "1 x print at m.py:3\n   |  print(x)\n" in text
    with pytest.raises(dynamo.UserError, match="unknown report 'nope'"):
        dynamo.trace.report(path, "nope")


def test_version_1_file_is_read_and_upgraded(tmp_path):
    path = str(tmp_path / "v1.db")
    with _C.TraceWriter(path, schema_version_for_testing=1) as w:
        assert w.schema_version == 1
        w.record_frame("old.py", 1, "f")
    assert dynamo.trace.open(path).schema_version == 1
    assert dynamo.trace.upgrade(path) == 1
    with dynamo.trace.open(path) as r:
        assert r.schema_version == dynamo.trace.SCHEMA_VERSION == 3
        assert r.runs()[0]["rank"] == -1
        assert r.counts()["frames"] == 1


def test_row_keys_come_from_storage_rows_def(tmp_path):
    # python/src/storage_rows.def lists the keys of every row dict, in this order.
    path = str(tmp_path / "k.db")
    with _C.TraceWriter(path) as w:
        frame = w.record_frame("m.py", 1, "f")
        comp = w.record_compile(frame, status="ok")
        w.record_guard(comp, "TENSOR_MATCH", "x.size() == (4,)", source="L['x']", file="m.py", line=2)
        run_id = w.run_id
    with dynamo.trace.open(path) as r:
        assert list(r.frames(run_id)[0]) == ["id", "run_id", "file", "first_line", "name"]
        assert list(r.compiles(run_id=run_id)[0]) == [
            "id", "run_id", "frame_id", "attempt", "status", "reason", "start_time_us",
            "duration_us", "phases"]
        assert list(r.guards(comp)[0]) == [
            "id", "run_id", "compile_id", "kind", "checks", "source", "file", "line", "source_line"]
        assert list(r.runs()[0])[-1] == "crash" and r.runs()[0]["crash"] is None
