"""dynamo-minify --accuracy: a backend whose relu is off by 1e-2 (tests/python/minify_faults.py) is
minified to the relu alone; the repro raises AssertionError naming the divergence in a fresh
process. The same through DYNAMO_REPRO_LEVEL=4."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from minify_util import SMALL_MODEL, repro_nodes, run, run_repro  # noqa: E402


def test_divergence_is_minified_to_the_wrong_op(tmp_path):
    code, _, err = run("dynamo-minify", "--accuracy", "--tol", "1e-4", "-o", tmp_path / "r.py",
                       SMALL_MODEL, "wrong_on_relu", cwd=tmp_path)
    assert code == 0, err
    assert "graph 0 (13 nodes, backend wrong_on_relu) fails: divergence from fp64 eager beyond the tolerance" in err
    nodes = repro_nodes((tmp_path / "r.py").read_text())
    assert len(nodes) == 1 and ".relu()" in nodes[0], nodes
    rc, out = run_repro(tmp_path / "r.py", tmp_path)
    assert rc == 1
    assert ("AssertionError: the compiled graph diverges from fp64 eager at a Tensor.relu node "
            "(error 0.01, tolerance 0.0001)") in out


def test_within_tolerance_is_not_a_failure(tmp_path):
    """The same backend with a tolerance above its error: nothing to minify (exit 0)."""
    code, _, err = run("dynamo-minify", "-o", tmp_path / "r.py", SMALL_MODEL, "wrong_on_relu",
                       cwd=tmp_path, env={"DYNAMO_REPRO_LEVEL": "4"})
    assert code == 0, err
    assert "(no output diverged beyond --tol 0.001): nothing to minify, nothing written" in err
    assert not (tmp_path / "r.py").exists() and not (tmp_path / "r_minify").exists()


def test_an_exception_while_minifying_a_divergence_is_not_followed(tmp_path):
    """wrong_then_raise diverges on relu, but raises on a relu without a convolution in front: the
    queries that drop the convolution fail with an exception, which is another failure (the
    PyTorch complaint: an accuracy failure minified into a runtime error "down to nothing")."""
    code, _, err = run("dynamo-minify", "--accuracy", "--tol", "1e-4", "-o", tmp_path / "r.py",
                       SMALL_MODEL, "wrong_then_raise", cwd=tmp_path)
    assert code == 0, err
    assert ("failed differently (builtins.ValueError: another fault: relu without a convolution"
            in err and "counted as passing, not followed" in err), err
    nodes = repro_nodes((tmp_path / "r.py").read_text())
    assert len(nodes) <= 3 and any("conv2d" in n for n in nodes) and any(".relu()" in n for n in nodes), nodes
    assert "it reproduces the failure in a fresh process (divergence from fp64 eager beyond the tolerance)" in err
    rc, out = run_repro(tmp_path / "r.py", tmp_path)
    assert rc == 1 and "AssertionError: the compiled graph diverges from fp64 eager" in out
    assert "ValueError" not in out


def test_a_divergence_a_pass_made_is_sent_to_the_bisector(tmp_path):
    """A capture run where test_corrupt_node (value mode) made relu 1e-2 off: the divergence is
    against the graph as captured, before the passes. Minified later without the faulty pass,
    the graph the backend got no longer diverges from itself: the tool says a pass changed the
    values and names the dynamo-bisect command, instead of calling the failure nondeterministic."""
    import subprocess
    cap = tmp_path / "cap"
    env = dict(os.environ, DYNAMO_REPRO_AFTER="dynamo", DYNAMO_REPRO_LEVEL="4", DYNAMO_REPRO_TOL="1e-4",
               DYNAMO_REPRO_DIR=str(cap), DYNAMO_TEST_CORRUPT_NODE="relu:value",
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    subprocess.run([sys.executable, SMALL_MODEL, "eager"], cwd=tmp_path, env=env,
                   capture_output=True, timeout=300)
    code, _, err = run("dynamo-minify", "--accuracy", "--tol", "1e-4", "--resume", cap, "-o",
                       tmp_path / "r.py", cwd=tmp_path)
    assert code == 1, err
    assert ("graph 0 diverges in the run from the graph Dynamo captured (the fp64 reference, taken "
            "before the pass pipeline), but the graph the passes made and the backend got does not "
            "diverge from itself when run alone: a pass of passes.def changed its values. Not "
            "minified\n") in err, err
    assert "  = hint: dynamo-bisect --accuracy --tol 0.0001 " in err
    assert not (tmp_path / "r.py").exists()
