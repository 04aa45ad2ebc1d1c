"""dynamo-minify end to end on a small conv net (13 captured nodes) with faults injected by
test-only backends (tests/python/minify_faults.py): the minifier shrinks the failing graph
to the faulty op, writes a repro.py that reproduces the same failure in a fresh process, and a
failure that turns into another while shrinking is not followed."""
import os
import re
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from minify_util import SMALL_MODEL, repro_nodes, run, run_repro  # noqa: E402


def test_exception_in_backend_shrinks_to_the_relu(tmp_path):
    # The real program in a fresh process, as a user runs it (the other tests fork it: pyfork.py).
    code, _, err = run("dynamo-minify", "-o", tmp_path / "repro.py", SMALL_MODEL, "raise_on_relu",
                       cwd=tmp_path, fresh=True)
    assert code == 0, err
    assert ("graph 0 (13 nodes, backend raise_on_relu) fails: builtins.RuntimeError: fault "
            "injected: this backend cannot compile relu (N nodes)") in err
    assert "wrote " + str(tmp_path / "repro.py") + ": it reproduces the failure in a fresh process" in err
    # Progress as it goes: one line per accepted step (pass, granularity, nodes now / at start,
    # queries, elapsed), then the summary.
    progress = [line for line in err.splitlines() if line.startswith("dynamo-minify: [")]
    assert progress and all(re.fullmatch(r"dynamo-minify: \[[a-z_]+ granularity \d+\] nodes \d+/13, "
                                         r"queries \d+, \d+\.\d s(  \(smaller, kept\))?", line)
                            for line in progress), progress
    assert any(line.endswith("(smaller, kept)") for line in progress)
    assert re.search(r"minified graph 0 from 13 to \d node\(s\) \(.*\) in \d+ queries, \d+\.\d s", err)
    text = (tmp_path / "repro.py").read_text()
    nodes = repro_nodes(text)
    assert len(nodes) <= 3 and any(".relu()" in n for n in nodes), nodes
    # The failure does not depend on the input values: generate_inputs replaced every one of them
    # by a call that makes them again, and nothing is saved beside the repro.
    inputs = text.split("def load_inputs", 1)[1].split("    ]\n", 1)[0].splitlines()[3:]
    assert inputs and all(line.strip().startswith("torch.randn(") and
                          "generator=torch.Generator().manual_seed(0))" in line for line in inputs), inputs
    assert not (tmp_path / "repro_inputs.pt").exists()
    # The repro alone, in a fresh interpreter, fails the same way.
    rc, out = run_repro(tmp_path / "repro.py", tmp_path)
    assert rc == 1 and "RuntimeError: fault injected: this backend cannot compile relu" in out
    # The original run's artifacts stay for investigation.
    work = tmp_path / "repro_minify"
    assert (work / "original_graph.py").read_text().count(" = ") >= 13
    assert (work / "capture" / "graph_0.pt").exists() and (work / "state.json").exists()
    # The trace store holds the script's run and the minification: every accepted step with its
    # query count and time, as in state.json.
    import json
    import dynamo.trace
    state = json.loads((work / "state.json").read_text())
    with dynamo.trace.open(work / "trace.db") as store:
        runs = store.runs()
        assert [r["argv"][0] for r in runs] == [SMALL_MODEL, "dynamo-minify"]
        arts = store.artifacts(runs[1]["id"])
    names = [a["name"] for a in arts]
    assert names == (["dynamo.minify.start"] + ["dynamo.minify.step"] * len(state["steps"])
                     + ["dynamo.minify.result"])
    assert [json.loads(a["data"]) for a in arts[1:-1]] == state["steps"]
    assert json.loads(arts[-1]["data"])["nodes"] == len(nodes)


def test_abort_is_a_result_and_the_repro_aborts(tmp_path):
    code, _, err = run("dynamo-minify", "-o", tmp_path / "r.py", SMALL_MODEL, "abort_on_relu",
                       cwd=tmp_path)
    assert code == 0, err
    assert "fails: crash (SIGABRT)" in err
    nodes = repro_nodes((tmp_path / "r.py").read_text())
    assert len(nodes) <= 3 and any(".relu()" in n for n in nodes), nodes
    # The tool ran r.py in a fresh interpreter and it aborted (test_exception_in_backend_* checks
    # that this line tells the truth by running the repro itself).
    assert (f"wrote {tmp_path / 'r.py'}: it reproduces the failure in a fresh process "
            f"(crash (SIGABRT))") in err


def test_a_different_failure_is_reported_and_not_followed(tmp_path):
    # --no-isolate: the queries in the tool's process (the failures are exceptions), no server.
    code, _, err = run("dynamo-minify", "--no-isolate", "-o", tmp_path / "r.py", SMALL_MODEL,
                       "raise_then_other", cwd=tmp_path)
    assert code == 0, err
    assert ("failed differently (builtins.ValueError: another fault: relu without a convolution): "
            "counted as passing, not followed") in err
    text = (tmp_path / "r.py").read_text()
    nodes = repro_nodes(text)
    # Still the original failure: a convolution stays in front of the relu.
    assert any("conv2d" in n for n in nodes) and any(".relu()" in n for n in nodes), nodes
    assert len(nodes) <= 3
    # The tool's own run of r.py in a fresh interpreter gave the original failure, not the other.
    wrote = next(line for line in err.splitlines() if line.startswith("dynamo-minify: wrote "))
    assert wrote.startswith(f"dynamo-minify: wrote {tmp_path / 'r.py'}: it reproduces the failure "
                            f"in a fresh process (builtins.RuntimeError: fault injected: this "
                            f"backend cannot compile relu"), wrote


def test_env_capture_then_resume(tmp_path):
    """A user's own command with DYNAMO_REPRO_AFTER=dynamo leaves a capture directory and says
    how to minify it; --resume minifies it without running the script again."""
    import subprocess
    env = dict(os.environ, DYNAMO_REPRO_AFTER="dynamo",
               PYTHONPATH=os.pathsep.join([os.path.dirname(SMALL_MODEL), *sys.path]))
    proc = subprocess.run([sys.executable, SMALL_MODEL, "raise_on_relu"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    runs = list((tmp_path / "dynamo_minify").iterdir())
    assert len(runs) == 1
    assert (f"dynamo: graph 0 failed at its compile (builtins.RuntimeError); minify it with: "
            f"dynamo-minify --resume dynamo_minify/{runs[0].name}") in proc.stderr
    code, _, err = run("dynamo-minify", "--no-isolate", "--resume", runs[0], "-o", "r.py",
                       cwd=tmp_path)
    assert code == 0, err
    assert "running" not in err and "it reproduces the failure in a fresh process" in err
    assert len(repro_nodes((tmp_path / "r.py").read_text())) <= 3


def test_a_stopped_run_resumes_from_its_checkpoint(tmp_path):
    """A first run limited to truncate_suffix stops at 7 nodes with a repro whose large inputs are
    saved beside it; --resume continues from the checkpoint (same query count, not from zero)
    down to the relu, and the stale inputs file goes."""
    code, _, err = run("dynamo-minify", "--no-isolate", "--quiet", "--passes", "truncate_suffix",
                       "-o", "r.py", SMALL_MODEL, "raise_on_relu", cwd=tmp_path)
    assert code == 0, err
    assert "minified graph 0 from 13 to 7 node(s)" in err and (tmp_path / "r_inputs.pt").exists()
    queries = int(err.split("node(s) (", 1)[1].split(" in ", 1)[1].split(" queries")[0])
    code, _, err = run("dynamo-minify", "--no-isolate", "--quiet", "--resume", "r_minify",
                       cwd=tmp_path)
    assert code == 0, err
    assert f"resuming from r_minify: 7 nodes, {queries} queries so far" in err
    assert "minified graph 0 from 13 to 1 node(s) (Tensor.relu)" in err
    assert "it reproduces the failure in a fresh process" in err
    assert not (tmp_path / "r_inputs.pt").exists()


def test_from_trace_of_a_crashed_run(tmp_path):
    """The trace store of a run that aborted names the script and the crashed compile; the
    minifier runs the script again for the input values and minifies that graph."""
    import shutil
    import subprocess
    for f in ("minify_small_model.py", "minify_faults.py"):
        shutil.copy(os.path.join(os.path.dirname(SMALL_MODEL), f), tmp_path)
    env = dict(os.environ, DYNAMO_TRACE="crash.db", PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run([sys.executable, "minify_small_model.py", "abort_on_relu"], cwd=tmp_path,
                          env=env, capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGABRT
    code, _, err = run("dynamo-minify", "--quiet", "--from-trace", "crash.db", "-o", "r.py",
                       cwd=tmp_path)
    assert code == 0, err
    assert err.startswith("dynamo-minify: crash.db: crashed (SIGABRT) during the first call of "
                          f"compile #0 of frame Net.forward ({tmp_path / 'minify_small_model.py'}:19); "
                          "running minify_small_model.py again to capture the graph's input values\n")
    assert "graph 0 (13 nodes, backend abort_on_relu) fails: crash (SIGABRT)" in err
    assert "it reproduces the failure in a fresh process (crash (SIGABRT))" in err
    nodes = repro_nodes((tmp_path / "r.py").read_text())
    assert len(nodes) == 1 and ".relu()" in nodes[0]


def test_capture_leaves_the_scripts_results_alone(tmp_path):
    """Under DYNAMO_REPRO_AFTER=dynamo the backends.def backend still compiles and runs the graph
    (through dynamo.minifier.native) and a graph that updates buffers in place (batch norm in
    training mode) updates them once: outputs and running stats equal an uncompiled copy's."""
    import subprocess
    (tmp_path / "bn.py").write_text(
        "import torch, dynamo\n"
        "torch.manual_seed(0)\n"
        "make = lambda: torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU()).train()\n"
        "m, ref = make(), make()\n"
        "ref.load_state_dict(m.state_dict())\n"
        "x = torch.randn(2, 3, 8, 8)\n"
        "with torch.no_grad():\n"
        "    out, exp = dynamo.compile(m, backend='eager')(x), ref(x)\n"
        "print(torch.equal(out, exp), torch.equal(m[1].running_mean, ref[1].running_mean))\n")
    env = dict(os.environ, DYNAMO_REPRO_AFTER="dynamo", DYNAMO_REPRO_DIR=str(tmp_path / "cap"),
               DYNAMO_LOGS="graph", PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run([sys.executable, "bn.py"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.stdout == "True True\n", proc.stderr
    # One graph, captured once (no nested capture of the graph's own code), started and ok.
    assert proc.stderr.count("[dynamo] graph 0 of ") == 1
    import json
    events = [json.loads(line) for line in (tmp_path / "cap" / "events.jsonl").read_text().splitlines()]
    assert [(e["event"], e["graph"]) for e in events] == [("start", 0), ("ok", 0)]
