"""dynamo-minify's bad input: each case says what is wrong and exits without writing a repro."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from minify_util import SMALL_MODEL, run  # noqa: E402


def test_script_that_does_not_fail(tmp_path):
    code, _, err = run("dynamo-minify", "-o", tmp_path / "r.py", SMALL_MODEL, "eager", cwd=tmp_path)
    assert code == 0, err
    assert err.endswith(f"{SMALL_MODEL} ran without a failure in any compiled graph (no backend "
                        f"error or crash): nothing to minify, nothing written\n")
    assert sorted(os.listdir(tmp_path)) == []


def test_script_that_fails_without_dynamo(tmp_path):
    script = tmp_path / "user_bug.py"
    script.write_text("import torch, dynamo\n"
                      "f = dynamo.compile(lambda x: x.sin() + 1, backend='eager')\n"
                      "f(torch.ones(3))\n"
                      "raise ValueError('the script has a bug of its own')\n")
    code, _, err = run("dynamo-minify", "-o", tmp_path / "r.py", script, cwd=tmp_path)
    assert code == 1, err
    assert (f"{script} fails (ValueError: the script has a bug of its own), but no compiled graph "
            f"failed in its backend: the failure is in the script itself or outside Dynamo's "
            f"backends, not a compiler bug the minifier can shrink; nothing written") in err
    assert not (tmp_path / "r.py").exists() and not (tmp_path / "r_minify").exists()


def test_nondeterministic_failure_is_detected(tmp_path):
    code, _, err = run("dynamo-minify", "-o", tmp_path / "r.py", SMALL_MODEL, "flaky_once",
                       cwd=tmp_path, env={"MINIFY_FLAKY_MARKER": str(tmp_path / "marker")})
    assert code == 1, err
    assert ("the failure is nondeterministic: graph 0 failed in the run with builtins.RuntimeError: "
            "fault injected: fails once, but run alone again: query 1: no failure; query 2: no "
            "failure. Not minified; the graph and its inputs are in ") in err
    assert not (tmp_path / "r.py").exists()


def test_unwritable_output_is_checked_before_running(tmp_path):
    start = time.monotonic()
    code, _, err = run("dynamo-minify", "-o", tmp_path / "missing" / "r.py", SMALL_MODEL,
                       "raise_on_relu", cwd=tmp_path)
    assert code == 2
    assert err == (f"dynamo-minify: error: cannot write the repro to {tmp_path / 'missing' / 'r.py'}: "
                   f"folder {tmp_path / 'missing'} does not exist\n"
                   f"  = hint: create it, or pass -o with a path in an existing folder\n")
    assert "running" not in err and time.monotonic() - start < 30


def test_missing_script_unknown_pass_and_bad_resume(tmp_path):
    code, _, err = run("dynamo-minify", "nope.py", cwd=tmp_path)
    assert code == 2 and err == ("dynamo-minify: error: no such script: nope.py\n"
                                 "  = hint: pass the path of the Python script that fails\n")
    code, _, err = run("dynamo-minify", "--passes", "truncate,dead_code", SMALL_MODEL, cwd=tmp_path)
    assert code == 2 and err.startswith("dynamo-minify: error: unknown reduction pass 'truncate'\n"
                                        "  = hint: known passes: isolate_kernel, truncate_suffix, ")
    code, _, err = run("dynamo-minify", "--resume", tmp_path, cwd=tmp_path)
    assert code == 2 and err.startswith(f"dynamo-minify: error: --resume {tmp_path}: not a "
                                        f"dynamo-minify work directory (no state.json)")


def test_print_passes_lists_the_def_file(tmp_path):
    code, out, _ = run("dynamo-minify", "--print-passes", cwd=tmp_path)
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()] == [
        "isolate_kernel", "truncate_suffix", "remove_outputs", "dead_code", "replace_with_values",
        "remove_unused_inputs", "bypass_ops", "shrink_shapes", "generate_inputs"]
    assert "isolate_kernel         (--after=kernel only) replaces the values" in out


def test_from_trace_without_a_store(tmp_path):
    code, _, err = run("dynamo-minify", "--from-trace", "nope.db", cwd=tmp_path)
    assert code == 2
    assert err == ("dynamo-minify: error: --from-trace nope.db: no such file\n"
                   "  = hint: pass the trace store the crashed run wrote (DYNAMO_TRACE=...)\n")


def test_after_kernel_needs_the_fused_backend(tmp_path):
    code, _, err = run("dynamo-minify", "--after=kernel", "-o", "r.py", SMALL_MODEL,
                       "raise_on_relu", cwd=tmp_path)
    assert code == 2
    assert ("graph 0 failed in backend raise_on_relu, not in fused: --after=kernel minifies a graph "
            "of the fused backend; nothing written\n  = hint: use --after=dynamo for this backend\n") in err
    assert not (tmp_path / "r.py").exists() and not (tmp_path / "r_minify").exists()
