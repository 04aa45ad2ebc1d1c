"""DYNAMO_LOGS (python/dynamo/logs.py) and DYNAMO_DEBUG_FUNCTION, each in a subprocess with the
variable set: what every log name prints on stderr (exact lines, paths relative to the script's
directory), nothing by default, one line per distinct graph break, the unknown-name warning, and
set_logs from Python."""
import os
import subprocess
import sys
import textwrap

import pyfork

SCRIPT = """\
import torch
import dynamo


def step(x, i):
    x = x * 2 + i
    print("step", i)
    return x + 1


def loop(x):
    for i in range(3):
        x = step(x, i)
    return x


dynamo.compile(loop)(torch.ones(3))
"""
PRINT_LINE, CALL_LINE, STEP_DEF, I_USE = 7, 13, 5, 6


def _run(tmp_path, logs=None, script=SCRIPT, extra_env=None):
    (tmp_path / "prog.py").write_text(script)
    env = dict(os.environ)
    for var in ("DYNAMO_LOGS", "DYNAMO_DEBUG_FUNCTION", "DYNAMO_TRACE"):
        env.pop(var, None)
    if logs is not None:
        env["DYNAMO_LOGS"] = logs
    env.update(extra_env or {})
    p = subprocess.run([pyfork.launcher(), "prog.py"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stderr


BREAK = f'[dynamo] graph break (print) at prog.py:{PRINT_LINE}: print("step", i)  \u2014 call to print()'


def test_off_by_default(tmp_path):
    assert _run(tmp_path) == ""


def test_graph_breaks_once_per_location(tmp_path):
    # Met 4 times (loop's own attempt, then step for i = 0, 1, 2): printed once.
    assert _run(tmp_path, "graph_breaks") == BREAK + "\n"


def test_graph_breaks_verbose_prints_the_user_stack(tmp_path):
    assert _run(tmp_path, "+graph_breaks") == (
        f"{BREAK}\n    at prog.py:{CALL_LINE}: x = step(x, i)\n    at prog.py:{PRINT_LINE}: print(\"step\", i)\n")


def test_recompiles(tmp_path):
    assert _run(tmp_path, "recompiles") == (
        f"[dynamo] recompiling step (prog.py:{STEP_DEF}), attempt 1: 'i' changed: expected 0, got 1 "
        f"(guard created at prog.py:{I_USE})\n"
        f"[dynamo] recompiling step (prog.py:{STEP_DEF}), attempt 2: 'i' changed: expected 1, got 2 "
        f"(guard created at prog.py:{I_USE})\n")


def test_recompiles_verbose_lists_every_reason(tmp_path):
    err = _run(tmp_path, "+recompiles")
    assert err.splitlines()[-3:] == [
        f"[dynamo] recompiling step (prog.py:{STEP_DEF}), attempt 2: 'i' changed: expected 1, got 2 "
        f"(guard created at prog.py:{I_USE})",
        f"    - 'i' changed: expected 1, got 2  (guard created at prog.py:{I_USE}: x = x * 2 + i)",
        f"    - 'i' changed: expected 0, got 2  (guard created at prog.py:{I_USE}: x = x * 2 + i)"]


def test_cache_limit_line(tmp_path):
    script = SCRIPT.replace("import dynamo\n", "import dynamo, warnings; warnings.simplefilter('ignore'); "
                            "dynamo.config.cache_size_limit = 2\n")
    err = _run(tmp_path, "recompiles", script)
    assert (f"[dynamo] step (prog.py:{STEP_DEF}) hit cache_size_limit after 2 compiles; it runs eagerly "
            f"from now on. Last reason: 'i' changed: expected 1, got 2 (guard created at prog.py:{I_USE})") in err


def test_guards_graph_bytecode(tmp_path):
    err = _run(tmp_path, "guards,graph,bytecode")
    # Kinds are padded to the longest one shown (NO_INSTANCE_ATTR: print is not shadowed).
    assert (f"[dynamo] guards of step (prog.py:{STEP_DEF}), attempt 0:\n    GRAD_MODE         grad mode is enabled\n"
            "    DEFAULT_DTYPE     default dtype is ") in err
    assert "    EQUALS_MATCH      i == 1 (int)" in err  # i == 2 is a symbolic int (TYPE_MATCH + shape guards)
    assert "    NO_INSTANCE_ATTR  'print' not in " in err
    assert (f"[dynamo] graph 0 of step (prog.py:{STEP_DEF}), attempt 0 (2 nodes):\n    graph(%x):\n"
            f"      %x: f32[3] = placeholder[source=x]  # {tmp_path / 'prog.py'}:{I_USE}\n") in err
    assert f"[dynamo] transformed bytecode of step (prog.py:{STEP_DEF}), attempt 0:\n" in err
    assert "RESUME" in err and "graph break" not in err and "recompiling" not in err


def test_all_minus_and_set_logs(tmp_path):
    err = _run(tmp_path, "all,-guards,-passes,-graph,-bytecode")
    assert err.splitlines()[0] == BREAK and len(err.splitlines()) == 3
    script = SCRIPT.replace("import dynamo\n", "import dynamo; dynamo.logs.set_logs('graph_breaks')\n")
    assert _run(tmp_path, "recompiles", script) == BREAK + "\n"   # set_logs replaces the env


def test_unknown_name_warns_once_with_the_valid_names(tmp_path):
    err = _run(tmp_path, "bogus,graph_breaks,+nope")
    assert err == ("DYNAMO_LOGS:0: UserWarning: dynamo: unknown DYNAMO_LOGS names 'bogus', '+nope'; "
                   "valid names: all, graph_breaks, recompiles, guards, passes, graph, bytecode, aot_graphs, "
                   "partition, fusion, output_code "
                   "(+name for more detail, -name to turn one off)\n" + BREAK + "\n")


def test_debug_function_compiles_only_that_function(tmp_path):
    script = textwrap.dedent("""\
        import torch
        import dynamo
        seen = []
        dynamo.add_compile_listener(lambda r: seen.append((r["function"], r["status"])))

        def helper(x):
            return x.cos()

        def target(x):
            return helper(x) + 1

        def outer(x):
            return target(x) * 2

        dynamo.compile(outer)(torch.ones(2))
        print(seen)
        """)
    (tmp_path / "prog.py").write_text(script)
    env = {k: v for k, v in os.environ.items() if k not in ("DYNAMO_LOGS", "DYNAMO_TRACE")}
    env["DYNAMO_DEBUG_FUNCTION"] = "target"
    p = subprocess.run([sys.executable, "prog.py"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "[('target', 'compiled')]\n"


def test_debug_function_that_matches_nothing_says_so_once(tmp_path):
    script = textwrap.dedent("""\
        import torch
        import dynamo

        def f(x):
            return x.cos()

        c = dynamo.compile(f)
        c(torch.ones(2))
        c(torch.ones(3))
        print("ran")
        """)
    err = _run(tmp_path, script=script, extra_env={"DYNAMO_DEBUG_FUNCTION": "forwrd"})
    assert err.count("matched no function") == 1
    assert ("UserWarning: dynamo: DYNAMO_DEBUG_FUNCTION='forwrd' matched no function compiled in this "
            "process, so nothing was compiled") in err


def test_set_logs_in_process_counts_breaks_in_cpp():
    # The compile logs live in C++ (python/src/log_bindings.cpp): set_logs hands the levels over,
    # and graph_break_counts() reads the counts kept there; set_logs forgets them.
    import dynamo
    import torch
    ns = {}
    exec(compile(SCRIPT.replace("dynamo.compile(loop)(torch.ones(3))\n", ""), "prog.py", "exec"), ns)
    try:
        dynamo.logs.set_logs("graph_breaks")
        dynamo.reset()
        dynamo.compile(ns["loop"])(torch.ones(3))
        assert dynamo.logs.graph_break_counts() == {("print", "prog.py", PRINT_LINE): 4}
        dynamo.logs.set_logs("")
        assert dynamo.logs.graph_break_counts() == {}
    finally:
        dynamo.logs.set_logs("")
        dynamo.reset()
