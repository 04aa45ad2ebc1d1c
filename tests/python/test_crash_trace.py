"""Runs that crash keep their trace (issue #16; docs/trace-store.md, "Durability" and "Crashes").

Each test runs a small script in its own process with DYNAMO_TRACE set, lets it die (SIGKILL,
a segfaulting backend, abort), and reads the store it left. A compile's rows are committed
before its code first runs, and a fatal signal the process can catch leaves a crash marker
naming the compile whose first call was running.
"""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

import dynamo.trace
import pyfork
from report_cli_util import run as run_tool

PYTHON = sys.executable

CRASHING = textwrap.dedent("""\
    import ctypes, os, signal, sys
    import torch, dynamo

    def crashing_backend(gm, example_inputs):
        def compiled(*args):
            how = sys.argv[1]
            if how == "kill":
                os.kill(os.getpid(), signal.SIGSEGV)
            elif how == "deref":
                ctypes.string_at(0)
            elif how == "abort":
                os.abort()
            return gm(*args)
        return compiled

    def g(x):
        return x * 3

    def f(x):
        return torch.relu(x) + 1

    dynamo.optimize("eager")(g)(torch.ones(2))
    dynamo.optimize(crashing_backend)(f)(torch.ones(3))
    print("not reached")
    """)


def run_script(tmp_path, source, *args, relative=False, python_args=()):
    # relative: DYNAMO_TRACE=t.db in the script's directory (the marker path is made absolute
    # when the writer opens).
    script = tmp_path / "crash.py"
    script.write_text(source)
    env = dict(os.environ, DYNAMO_TRACE="t.db" if relative else str(tmp_path / "t.db"))
    # In a fork of the tests' server (pyfork.py); python_args make it a fresh interpreter.
    return subprocess.run([pyfork.launcher(), *python_args, str(script), *map(str, args)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)


def line_of(source, text):
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


def integrity(path):
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return db.execute("PRAGMA integrity_check").fetchone()[0]


def test_sigkill_right_after_compiles_keeps_every_compile_and_graph(tmp_path):
    # The measurement: 50 compiles, each called once, then SIGKILL at once. Before
    # issue #16 none of them reached the store.
    n = 50
    source = textwrap.dedent(f"""\
        import os, signal
        import torch, dynamo
        fns = []
        for i in range({n}):
            ns = {{}}
            exec(f"def f{{i}}(x):\\n    return x * {{i}} + 1\\n", ns)
            dynamo.optimize("eager")(ns[f"f{{i}}"])(torch.ones(4))
        os.kill(os.getpid(), signal.SIGKILL)
        """)
    r = run_script(tmp_path, source)
    assert r.returncode == -signal.SIGKILL, r.stderr
    path = tmp_path / "t.db"
    assert integrity(path) == "ok"
    with dynamo.trace.open(path) as store:
        (run,) = store.runs()
        assert run["end_time_us"] == 0 and run["crash"] is None  # SIGKILL cannot be caught
        compiles = store.compiles(run_id=run["id"])
        assert len(compiles) == n
        assert all(len(store.graphs(c["id"])) == 1 for c in compiles)
        assert sorted(f["name"] for f in store.frames(run["id"])) == sorted(
            f"f{i}" for i in range(n))
    assert not list(tmp_path.glob("t.db-crash-*"))
    assert not list(tmp_path.glob("t.db-rows-*"))  # the reader inserted the journal's rows
    assert "did not close (still running, or killed)" in dynamo.trace.report(path, "runs")


KILLED_IN_FIRST_CALL = textwrap.dedent("""\
    import os, signal
    import torch, dynamo

    calls = [0]

    def backend(gm, example_inputs):
        calls[0] += 1
        if calls[0] < 3:
            return gm
        def compiled(*args):  # the recompile's code: killed on its first call
            os.kill(os.getpid(), signal.SIGKILL)
        return compiled

    @dynamo.optimize(backend)
    def f(x):
        y = x * 2
        print("break")
        return y + 1

    f(torch.ones(3))                     # compile #0 of f, then of its resume function
    f(torch.ones(3, dtype=torch.int64))  # dtype guard fails: compile #1 of f, killed in its call
    print("not reached")
    """)


def test_sigkill_during_a_compiles_first_call_keeps_all_its_records(tmp_path):
    # Every kind of row a compile records is committed before its code first runs: the compile,
    # its graph, its graph break, its guards, the guard failure that caused it and its bytecode.
    r = run_script(tmp_path, KILLED_IN_FIRST_CALL)
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert "not reached" not in r.stdout
    path = tmp_path / "t.db"
    assert integrity(path) == "ok"
    with dynamo.trace.open(path) as store:
        (run,) = store.runs()
        assert run["end_time_us"] == 0 and run["crash"] is None
        (frame_f,) = [fr for fr in store.frames(run["id"]) if fr["name"] == "f"]
        first, killed = store.compiles(frame_id=frame_f["id"])
        assert (first["attempt"], killed["attempt"]) == (0, 1)
        assert len(store.graphs(killed["id"])) == 1
        (brk,) = store.graph_breaks(killed["id"])
        break_line = line_of(KILLED_IN_FIRST_CALL, 'print("break")')
        assert (brk["line"], brk["source_line"]) == (break_line, 'print("break")')
        guards = store.guards(killed["id"])
        assert ("TENSOR_MATCH", "x") in [(g["kind"], g["source"]) for g in guards]
        (failure,) = store.guard_failures(compile_id=first["id"])
        assert failure["caused_compile_id"] == killed["id"]
        assert failure["property"] == "dtype"
        assert [c["kind"] for c in store.code(run["id"], killed["id"])] == ["transformed_bytecode"]
    assert not list(tmp_path.glob("t.db-crash-*"))
    assert not list(tmp_path.glob("t.db-rows-*"))


@pytest.mark.parametrize("how", ["kill", "deref"])
def test_backend_that_segfaults_on_first_call_leaves_compile_graph_and_marker(tmp_path, how,
                                                                             monkeypatch):
    r = run_script(tmp_path, CRASHING, how)
    assert r.returncode == -signal.SIGSEGV, r.stderr
    assert "not reached" not in r.stdout
    path = tmp_path / "t.db"
    marker = tmp_path / "t.db-crash-1"
    assert marker.exists()
    assert integrity(path) == "ok"
    f_line = line_of(CRASHING, "def f(x):")
    expected = (f"run 1: pid <masked>, started <masked>, crashed (SIGSEGV) during the first call "
                f"of compile #0 of frame f ({tmp_path}/crash.py:{f_line}): {tmp_path}/crash.py "
                f"{how}\n")
    assert dynamo.trace.report(path, "runs", mask=True) == expected
    with dynamo.trace.open(path) as store:
        (run,) = store.runs()
        crash = run["crash"]
        assert (crash["signal_name"], crash["stage"], crash["frame"], crash["attempt"]) == (
            "SIGSEGV", "first_call", "f", 0)
        (frame_f,) = [fr for fr in store.frames(run["id"]) if fr["name"] == "f"]
        (compile_f,) = store.compiles(frame_id=frame_f["id"])
        assert crash["compile_id"] == compile_f["id"]
        # What the minifier starts from: the crashing compile's graph and its inputs.
        (graph,) = store.graphs(compile_f["id"])
        assert graph["inputs"] == ["x"] and b"relu" in graph["serialized"]
        assert len(store.compiles(run_id=run["id"])) == 2
    # The next writer merges the marker into the store; the report does not change. (A path
    # without a directory: the markers are found in the working directory.)
    monkeypatch.chdir(tmp_path)
    dynamo.trace.start_run("t.db", argv=["merge"])
    dynamo.trace.end_run()
    assert not marker.exists()
    assert dynamo.trace.report(path, "runs", mask=True).startswith(expected)
    with dynamo.trace.open(path) as store:
        (artifact,) = store.artifacts(1)
        assert artifact["name"] == "dynamo.crash"
        assert artifact["data"].startswith(b"dynamo-crash 1\nrun 1\nsignal 11\nstage 1\n")


CRASHING_IN_BACKEND = textwrap.dedent("""\
    import os, signal
    import torch, dynamo

    def crashing_backend(gm, example_inputs):
        os.kill(os.getpid(), signal.SIGSEGV)

    def g(x):
        return x * 3

    def f(x):
        return torch.relu(x) + 1

    dynamo.optimize("eager")(g)(torch.ones(2))       # the run's writer opens with its first compile
    dynamo.optimize(crashing_backend)(f)(torch.ones(3))
    print("not reached")
    """)


def test_backend_that_segfaults_while_compiling_is_named(tmp_path):
    r = run_script(tmp_path, CRASHING_IN_BACKEND)
    assert r.returncode == -signal.SIGSEGV, r.stderr
    path = tmp_path / "t.db"
    assert integrity(path) == "ok"
    assert dynamo.trace.report(path, "runs", mask=True) == (
        f"run 1: pid <masked>, started <masked>, crashed (SIGSEGV) in a backend: {tmp_path}/crash.py\n")


def test_a_crash_in_the_very_first_compiles_backend_leaves_a_store(tmp_path):
    # The run opens when the first compile starts (the compile sink asks dynamo.recording), not
    # with its first record: a backend that kills the process on the first compile still leaves
    # the run and its crash marker.
    source = CRASHING_IN_BACKEND.replace(
        'dynamo.optimize("eager")(g)(torch.ones(2))       # the run\'s writer opens with its first compile\n', "")
    assert "optimize(\"eager\")" not in source
    r = run_script(tmp_path, source)
    assert r.returncode == -signal.SIGSEGV, r.stderr
    path = tmp_path / "t.db"
    assert integrity(path) == "ok"
    assert dynamo.trace.report(path, "runs", mask=True) == (
        f"run 1: pid <masked>, started <masked>, crashed (SIGSEGV) in a backend: {tmp_path}/crash.py\n")


def test_abort_in_compiled_code_is_named(tmp_path):
    r = run_script(tmp_path, CRASHING, "abort", relative=True)
    assert r.returncode == -signal.SIGABRT, r.stderr
    assert (tmp_path / "t.db-crash-1").exists()
    text = dynamo.trace.report(tmp_path / "t.db", "runs", mask=True)
    assert ", crashed (SIGABRT) during the first call of compile #0 of frame f (" in text


def test_faulthandler_still_prints_its_traceback(tmp_path):
    r = run_script(tmp_path, CRASHING, "deref", python_args=["-X", "faulthandler"])
    assert r.returncode == -signal.SIGSEGV
    assert "Fatal Python error: Segmentation fault" in r.stderr
    assert 'crash.py", line' in r.stderr
    assert (tmp_path / "t.db-crash-1").exists()


def test_a_run_that_closed_leaves_no_marker(tmp_path):
    source = textwrap.dedent("""\
        import os
        import torch, dynamo, dynamo.trace
        dynamo.optimize("eager")(lambda x: x + 1)(torch.ones(2))
        dynamo.trace.end_run()
        os.abort()
        """)
    r = run_script(tmp_path, source)
    assert r.returncode == -signal.SIGABRT
    assert not list(tmp_path.glob("t.db-crash-*"))
    with dynamo.trace.open(tmp_path / "t.db") as store:
        (run,) = store.runs()
        assert run["end_time_us"] > 0 and run["crash"] is None


def test_dynamo_explain_names_the_crashing_compile(tmp_path, monkeypatch):
    script = tmp_path / "crash.py"
    script.write_text(CRASHING.replace("sys.argv[1]", '"deref"'))
    tmp = tmp_path / "tmp"  # the tool's temporary store goes here, and goes away with its marker
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    r = run_tool("dynamo-explain", "--mask", script, cwd=tmp_path)
    # torch 2.x's own compiler makes its cache directory (torchinductor_<user>) under TMPDIR when
    # the crashing script's torch starts up: torch's, not the tool's.
    assert [p for p in tmp.iterdir() if not p.name.startswith("torchinductor_")] == []
    f_line = line_of(CRASHING, "def f(x):")
    assert "dynamo-explain: the script was killed by signal 11" in r.stderr
    assert r.stdout.startswith(
        "dynamo-explain: run 1 (crash.py)\n"
        "the run did not finish cleanly: it crashed (SIGSEGV) during the first call of compile #0 "
        f"of frame f (crash.py:{f_line}); the compiles recorded up to then, their graphs "
        "included, are in the trace store, but the runtime hit counts are missing and the counts "
        "below may be low. Fix the crash and rerun it to the end (dynamo-trace compiles TRACE.db "
        "lists the compiles).\n"), r.stdout


def test_reports_say_how_the_run_ended_text_and_json(tmp_path):
    # dynamo-explain and dynamo-profile, text and JSON, on the store a segfaulting run left: the
    # same words as dynamo-trace runs, the file relative to the root, the crashing compile named.
    script = tmp_path / "crash.py"
    script.write_text(CRASHING.replace("sys.argv[1]", '"abort"'))
    r = run_tool("dynamo-explain", "--mask", "--save-db", tmp_path / "t.db", script, cwd=tmp_path)
    assert "dynamo-explain: the script was killed by signal 6" in r.stderr
    f_line = line_of(CRASHING, "def f(x):")
    text = f"crashed (SIGABRT) during the first call of compile #0 of frame f (crash.py:{f_line})"
    note = (f"the run did not finish cleanly: it {text}; the compiles recorded up to then, their "
            "graphs included, are in the trace store, but the runtime hit counts are missing and "
            "the counts below may be low. Fix the crash and rerun it to the end (dynamo-trace "
            "compiles TRACE.db lists the compiles).\n")
    assert r.stdout.startswith("dynamo-explain: run 1 (crash.py)\n" + note), r.stdout
    profile = run_tool("dynamo-profile", "--mask", "--db", "t.db", cwd=tmp_path)
    assert profile.stdout.startswith("dynamo-profile: run 1 (crash.py)\n" + note), profile.stdout
    with dynamo.trace.open(tmp_path / "t.db") as store:
        (run,) = store.runs()
        (frame_f,) = [fr for fr in store.frames(run["id"]) if fr["name"] == "f"]
        (compile_f,) = store.compiles(frame_id=frame_f["id"])
    expected = {"ended": "crashed", "text": text, "signal": 6, "signal_name": "SIGABRT",
                "stage": "first_call", "compile_id": compile_f["id"], "attempt": 0, "frame": "f",
                "file": "crash.py", "line": f_line, "time_us": "<time>"}
    for tool in ("dynamo-explain", "dynamo-profile"):
        doc = json.loads(run_tool(tool, "--json", "--mask", "--db", "t.db", cwd=tmp_path).stdout)
        (doc_run,) = doc["runs"]
        assert (doc_run["finished_cleanly"], doc_run["crash"]) == (False, expected), tool


def test_a_crash_in_a_backend_reads_so_in_the_json(tmp_path):
    r = run_script(tmp_path, CRASHING_IN_BACKEND)
    assert r.returncode == -signal.SIGSEGV, r.stderr
    doc = json.loads(run_tool("dynamo-explain", "--json", "--mask", "--db", "t.db",
                              cwd=tmp_path).stdout)
    (doc_run,) = doc["runs"]
    assert doc_run["crash"] == {"ended": "crashed", "text": "crashed (SIGSEGV) in a backend",
                                "signal": 11, "signal_name": "SIGSEGV", "stage": "backend",
                                "time_us": "<time>"}


def test_four_processes_two_killed_mid_run(tmp_path):
    # Four processes compile into one store; two are killed with SIGKILL while compiling. Every
    # compile a process announced (after its first call) is in the store, the others close
    # cleanly without waiting on the dead ones, and the file is sound.
    source = textwrap.dedent("""\
        import sys
        import torch, dynamo
        for i in range(int(sys.argv[1])):
            ns = {}
            exec(f"def f{i}(x):\\n    return x * {i} - 1\\n", ns)
            dynamo.optimize("eager")(ns[f"f{i}"])(torch.ones(3))
            print(i + 1, flush=True)
        """)
    script = tmp_path / "crash.py"
    script.write_text(source)
    env = dict(os.environ, DYNAMO_TRACE=str(tmp_path / "t.db"))

    def start(n):
        return subprocess.Popen([PYTHON, str(script), str(n)], cwd=tmp_path, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    doomed = [start(100000), start(100000)]
    announced = [int(p.stdout.readline()) for p in doomed]  # both are compiling now
    t0 = time.monotonic()
    live = [start(40), start(40)]
    for i, p in enumerate(doomed):
        for _ in range(5):
            announced[i] = int(p.stdout.readline())
        p.send_signal(signal.SIGKILL)
        rest = p.stdout.read().split()
        if rest:
            announced[i] = int(rest[-1])
        assert p.wait() == -signal.SIGKILL
    for p in live:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert out.split()[-1] == "40"
    # The dead writers never hold the live ones up (SQLite's busy timeout is 30 s).
    assert time.monotonic() - t0 < 60
    path = tmp_path / "t.db"
    assert integrity(path) == "ok"
    with dynamo.trace.open(path) as store:
        runs = {r["pid"]: r for r in store.runs()}
        for p in live:
            assert runs[p.pid]["end_time_us"] > 0
            assert len(store.compiles(run_id=runs[p.pid]["id"])) == 40
        for p, n in zip(doomed, announced):
            assert runs[p.pid]["end_time_us"] == 0 and runs[p.pid]["crash"] is None
            assert len(store.compiles(run_id=runs[p.pid]["id"])) >= n
