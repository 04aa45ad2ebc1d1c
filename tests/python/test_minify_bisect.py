"""dynamo-bisect end to end on the small conv net with faults injected into a backend of the
ladder (MINIFY_FAULT_OVERRIDE, tests/python/minify_faults.py): it names the backend, the
decomposition group, the graph and the diverging node, with a command for each step, and leaves
nothing behind outside its own run directory."""
import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from minify_util import SMALL_MODEL, run  # noqa: E402

# The tool names the interpreter it runs under in its commands: the build's Python (python3 on
# stack 1, the virtual environment's python on stack 2), the one ctest runs this file with.
PYTHON = os.path.basename(sys.executable)


def test_accuracy_bisect_names_backend_graph_and_node(tmp_path):
    code, _, err = run("dynamo-bisect", "--accuracy", "--tol", "1e-4", "--workdir", "b",
                       SMALL_MODEL, "aot_eager", cwd=tmp_path,
                       env={"MINIFY_FAULT_OVERRIDE": "aot_eager:wrong_on_relu"})
    assert code == 0, err
    lines = err.splitlines()
    assert "dynamo-bisect:   backend eager: passes" in lines
    assert ("dynamo-bisect:   backend aot_eager: FAILS: divergence from fp64 eager beyond the "
            "tolerance") in lines
    assert "dynamo-bisect: backend: aot_eager is the first backend of the ladder that fails" in lines
    assert (f"dynamo-bisect:   reproduce: DYNAMO_REPRO_AFTER=dynamo DYNAMO_REPRO_LEVEL=4 "
            f"DYNAMO_REPRO_TOL=0.0001 DYNAMO_BISECT_BACKEND=aot_eager {PYTHON} {SMALL_MODEL} "
            f"aot_eager") in lines
    assert ("dynamo-bisect: pass: no pass of passes.def is involved (disabling all of them: "
            "still fails)") in lines
    assert any(line.startswith("dynamo-bisect: graph: graph 0 of the run (13 nodes, first op at "
                               f"{SMALL_MODEL}:20: ") for line in lines), err
    node = next(line for line in lines if line.startswith("dynamo-bisect: node: "))
    assert node.startswith("dynamo-bisect: node: relu (Tensor.relu) is the first node whose value "
                           "diverges from fp64 eager beyond 0.0001 (")
    assert node.endswith(f"queries); from {SMALL_MODEL}:22: y = self.conv2(y).relu()")
    # All state is in the run's directory; nothing else was written.
    assert os.listdir(tmp_path) == ["b"]
    result = json.loads((tmp_path / "b" / "result.json").read_text())
    assert [s["step"] for s in result["steps"]] == ["backend", "pass", "graph", "node"]
    assert [r["label"] for r in result["runs"]] == ["original", "backend-eager", "backend-aot_eager",
                                                    "passes-1"]
    assert result["runner"] == "fork server"
    # The trace store of the bisection: the bisection with its steps, then the script's 4 runs.
    import dynamo.trace
    with dynamo.trace.open(tmp_path / "b" / "trace.db") as store:
        runs = store.runs()
        assert [r["argv"][0] for r in runs] == ["dynamo-bisect"] + [SMALL_MODEL] * 4
        arts = store.artifacts(runs[0]["id"])
    assert [a["name"] for a in arts] == ["dynamo.bisect.step"] * 4 + ["dynamo.bisect.result"]
    assert [json.loads(a["data"]) for a in arts[:4]] == result["steps"]


def test_decomposition_group_is_found(tmp_path):
    code, _, err = run("dynamo-bisect", "--backends", "aot_eager_decomp_partition", "--workdir",
                       "b", SMALL_MODEL, "aot_eager_decomp_partition", cwd=tmp_path,
                       env={"MINIFY_FAULT_OVERRIDE": "aot_eager_decomp_partition:decomp_raise_on_amax"})
    assert code == 0, err
    lines = err.splitlines()
    assert ("dynamo-bisect: decomposition: disabling decomposition group softmax makes the failure "
            "go away (4 runs)") in lines
    assert (f"dynamo-bisect:   reproduce: DYNAMO_BISECT_BACKEND=aot_eager_decomp_partition "
            f"DYNAMO_AOT_DISABLE_DECOMPS=softmax {PYTHON} {SMALL_MODEL} aot_eager_decomp_partition") in lines
    assert "dynamo-bisect:   reproduce: dynamo-minify --resume b/backend-aot_eager_decomp_partition" in lines


def test_script_that_does_not_fail(tmp_path):
    code, _, err = run("dynamo-bisect", "--workdir", "b", SMALL_MODEL, "eager", cwd=tmp_path)
    assert code == 0
    assert err == (f"dynamo-bisect: {SMALL_MODEL} ran without a failure in any compiled graph: "
                   f"nothing to bisect\n")


@pytest.mark.parametrize("fork", [True, False], ids=["fork_server", "no_fork_server"])
def test_crash_of_a_run_is_a_result(tmp_path, fork):
    # A run of the script that aborts (in a fork of the server, or a fresh process with
    # --no-fork-server) is a failure the bisector narrows down, the same with either runner.
    # The ladder is the failing rung alone: every run with --no-fork-server is a fresh interpreter
    # importing torch (about 8 s of CPU on stack 2), and test_accuracy_bisect_* climbs past a
    # passing rung.
    flags = [] if fork else ["--no-fork-server"]
    code, _, err = run("dynamo-bisect", *flags, "--backends", "aot_eager", "--workdir", "b",
                       SMALL_MODEL, "aot_eager", cwd=tmp_path,
                       env={"MINIFY_FAULT_OVERRIDE": "aot_eager:abort_on_relu"})
    assert code == 0, err
    lines = err.splitlines()
    assert f"dynamo-bisect: {SMALL_MODEL} fails with backend aot_eager: crash (SIGABRT)" in lines
    assert "dynamo-bisect:   backend aot_eager: FAILS: crash (SIGABRT)" in lines
    assert any(line.startswith("dynamo-bisect: graph: graph 0 of the run (13 nodes,")
               for line in lines), err
    result = json.loads((tmp_path / "b" / "result.json").read_text())
    assert result["runner"] == ("fork server" if fork else "subprocess")
    assert [(r["label"], r["status"]) for r in result["runs"]] == [
        ("original", -6), ("backend-aot_eager", -6), ("passes-1", -6)]


def test_counted_pass_names_the_bad_application(tmp_path):
    # test_corrupt_node (passes.def, test only) applies once per call node and breaks the one
    # named relu: the bisector finds the pass, then the number of the application that breaks it.
    code, _, err = run("dynamo-bisect", "--backends", "eager", "--workdir", "b", SMALL_MODEL, "eager",
                       cwd=tmp_path, env={"DYNAMO_TEST_CORRUPT_NODE": "relu"})
    assert code == 0, err
    lines = err.splitlines()
    assert "dynamo-bisect: pass: disabling pass test_corrupt_node makes the failure go away (2 runs)" in lines
    app = next(line for line in lines if line.startswith("dynamo-bisect: application: "))
    result = json.loads((tmp_path / "b" / "result.json").read_text())
    step = next(s for s in result["steps"] if s["step"] == "application")
    k = step["application"]["index"]
    # The relu of the model (its 7th call node), found by node name and line, not by number.
    assert app == (f"dynamo-bisect: application: application {k} of 13 of pass test_corrupt_node brings "
                   f"the failure (with its first {k - 1} the script passes; 3 runs): node relu "
                   f"(torch.Tensor.relu) at {SMALL_MODEL}:22: y = self.conv2(y).relu(), in the graph of "
                   f"Net.forward ({SMALL_MODEL}:19)")
    assert step["command"] == (f"DYNAMO_BISECT_BACKEND=eager DYNAMO_BISECT_PASS=test_corrupt_node:{k} "
                               f"{PYTHON} {SMALL_MODEL} eager")
    assert f"dynamo-bisect:   reproduce: {step['command']}" in lines
    # The search's own runs: k applications fail, k - 1 pass.
    runs = {r["label"]: r for r in result["runs"]}
    assert runs[f"applications-{k}"]["failure"] is not None
    assert runs[f"applications-{k - 1}"]["failure"] is None
    assert [s["step"] for s in result["steps"]] == ["backend", "pass", "application", "graph"]
    # Nothing of the bisection stays to change later ordinary runs: in the same directory, the
    # script fails in full again (not capped at the k - 1 applications that pass), and the
    # bisection wrote nothing outside its own directory.
    assert os.listdir(tmp_path) == ["b"]
    e = dict(os.environ, DYNAMO_TEST_CORRUPT_NODE="relu",
             PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.run([sys.executable, SMALL_MODEL, "eager"], cwd=tmp_path, env=e,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "dynamo_test_corrupted" in proc.stderr, proc.stderr
    assert os.listdir(tmp_path) == ["b"]


def test_accuracy_bisect_names_a_pass_that_changes_values(tmp_path):
    # test_corrupt_node in its value mode makes relu 1e-2 off: the graph the backend gets is
    # wrong, and only a reference taken before the passes (the graph as captured, in fp64) sees
    # it. The bisector names the pass and the application.
    code, _, err = run("dynamo-bisect", "--accuracy", "--tol", "1e-4", "--backends", "eager",
                       "--workdir", "b", SMALL_MODEL, "eager", cwd=tmp_path,
                       env={"DYNAMO_TEST_CORRUPT_NODE": "relu:value"})
    assert code == 0, err
    lines = err.splitlines()
    assert (f"dynamo-bisect: {SMALL_MODEL} fails with backend eager: divergence from fp64 eager "
            f"beyond the tolerance") in lines
    assert "dynamo-bisect: pass: disabling pass test_corrupt_node makes the failure go away (2 runs)" in lines
    result = json.loads((tmp_path / "b" / "result.json").read_text())
    step = next(s for s in result["steps"] if s["step"] == "application")
    k = step["application"]["index"]
    assert (f"dynamo-bisect: application: application {k} of 13 of pass test_corrupt_node brings "
            f"the failure (with its first {k - 1} the script passes; 3 runs): node relu "
            f"(torch.Tensor.relu) at {SMALL_MODEL}:22: y = self.conv2(y).relu(), in the graph of "
            f"Net.forward ({SMALL_MODEL}:19)") in lines
    assert step["command"] == (f"DYNAMO_REPRO_AFTER=dynamo DYNAMO_REPRO_LEVEL=4 DYNAMO_REPRO_TOL=0.0001 "
                               f"DYNAMO_BISECT_BACKEND=eager DYNAMO_BISECT_PASS=test_corrupt_node:{k} "
                               f"{PYTHON} {SMALL_MODEL} eager")


def test_captured_graph_is_the_reference_before_the_passes(monkeypatch):
    # In-process: while a backend compiles, _C._compiler.captured_graph() is the graph before the
    # pass pipeline; the probe's fp64 reference is that graph, so a value a pass got wrong shows.
    import torch
    import dynamo
    from dynamo import _C
    from dynamo.minifier import probe

    monkeypatch.setenv("DYNAMO_TEST_CORRUPT_NODE", "relu:value")
    seen = {}

    def backend(gm, example_inputs):
        seen["got"] = [n.name for n in gm.graph.nodes if n.op == "call_method"]
        seen["captured"] = [n.name for n in _C._compiler.captured_graph().graph.nodes
                            if n.op == "call_method"]
        return gm.forward

    def f(x):
        return (x * 2).relu() + 1

    p = probe.Probe("checked", backend, accuracy_tol=1e-4)
    out = dynamo.compile(f, backend=p.backend())(torch.ones(3))
    assert seen == {"got": ["relu", "relu_corrupted"], "captured": ["relu"]}
    assert (out - 3.01).abs().max().item() < 1e-6   # the backend ran the corrupted graph
    assert p.failure is not None and p.failure.stage == "accuracy" and p.failure.passes_changed
    assert _C._compiler.captured_graph() is None   # outside a backend's compile
