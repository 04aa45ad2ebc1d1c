"""The pass pipeline (core/include/dynamo/core/passes.def): dead-code elimination keeps what
could change anything, passes can be disabled by name, and DYNAMO_LOGS=passes shows them."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import dynamo


@pytest.fixture(autouse=True)
def _fresh():
    dynamo.reset()
    yield
    dynamo.reset()
    dynamo.config.disabled_passes = ()


def _graph_ops(fn, *args):
    records = []
    listener = dynamo.add_compile_listener(records.append)
    try:
        out = dynamo.compile(fn)(*args)
    finally:
        dynamo.remove_compile_listener(listener)
    (rec,) = [r for r in records if r["status"] == "compiled"]
    return out, rec, sorted(rec["graphs"][0]["op_counts"])


def test_list_passes():
    assert [name for name, _ in dynamo.list_passes()] == ["dead_code_elimination"]


def test_dead_pure_ops_go_and_raising_random_mutating_ops_stay():
    def f(x, idx, buf):
        unused = (x * 2).relu().sum()       # pure: removed
        maybe_raises = x[idx]               # may raise: stays
        noise = torch.rand(3)               # random: stays (the generator moves as in eager)
        buf.add_(1)                         # mutates: stays
        return x + 1

    x, idx = torch.ones(3), torch.tensor(1)
    buf_e, buf_c = torch.zeros(2), torch.zeros(2)
    torch.manual_seed(0)
    expected = f(x, idx, buf_e)
    after_e = torch.rand(1)
    torch.manual_seed(0)
    out, rec, ops = _graph_ops(f, x, idx, buf_c)
    after_c = torch.rand(1)
    assert torch.equal(out, expected) and torch.equal(buf_c, buf_e) and torch.equal(after_c, after_e)
    (dce,) = rec["passes"]
    assert dce["name"] == "dead_code_elimination" and dce["status"] == "changed"
    assert dce["nodes_before"] - dce["nodes_after"] == 3    # mul, relu, sum
    assert "torch.Tensor.relu" not in ops and "operator.mul" not in ops
    assert {"operator.getitem", "torch.rand", "torch.Tensor.add_", "operator.add"} <= set(ops)
    with pytest.raises(IndexError):                         # the unused x[idx] still raises
        dynamo.compile(f)(x, torch.tensor(9), buf_c)


def test_a_disabled_pass_does_not_run():
    def f(x):
        unused = x.sin()
        return x + 1

    dynamo.config.disabled_passes = ("dead_code_elimination",)
    _, rec, ops = _graph_ops(f, torch.ones(2))
    assert rec["passes"][0]["status"] == "disabled" and "torch.Tensor.sin" in ops
    dynamo.reset()
    dynamo.config.disabled_passes = ()
    _, rec, ops = _graph_ops(f, torch.ones(2))
    assert rec["passes"][0]["status"] == "changed" and "torch.Tensor.sin" not in ops


def test_unknown_pass_name_is_rejected_with_the_valid_names():
    with pytest.raises(dynamo.UserError) as e:
        dynamo.config.disabled_passes = ("dce",)
    assert str(e.value).startswith("error: dynamo.config.disabled_passes must be a tuple of pass names "
                                   "(dead_code_elimination), or one comma-separated str, got tuple ('dce',)")


def test_passes_log(tmp_path):
    (tmp_path / "prog.py").write_text(textwrap.dedent("""\
        import torch
        import dynamo

        def f(x):
            dead = x.cos()
            return x + 1

        def g(x):
            return x * 2

        dynamo.compile(f)(torch.ones(2))
        dynamo.compile(g)(torch.ones(2))
        """))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNAMO_")}
    env["DYNAMO_LOGS"] = "passes"
    p = subprocess.run([sys.executable, "prog.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stderr.splitlines()
    assert lines[0] == "[dynamo] pass dead_code_elimination on f (prog.py:4), attempt 0: changed (4 -> 3 nodes):"
    assert lines[1] == "    graph(%x):"
    # Each application, numbered as DYNAMO_BISECT_PASS counts them.
    assert "    application 1: cos (torch.Tensor.cos) at prog.py:5" in lines
    assert lines[-1] == ("[dynamo] pass dead_code_elimination on g (prog.py:8), attempt 0 (unchanged) "
                         "(3 -> 3 nodes)")


def test_disable_through_the_environment(tmp_path):
    (tmp_path / "prog.py").write_text("import dynamo\nprint(dynamo.config.disabled_passes)\n")
    env = dict(os.environ, DYNAMO_DISABLE_PASSES="dead_code_elimination")
    p = subprocess.run([sys.executable, "prog.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.stdout == "('dead_code_elimination',)\n", p.stderr


def test_in_place_and_out_ops_are_never_removed():
    import torch.nn.functional as F

    def f(x, y):
        F.relu(x, inplace=True)          # result unused: the input itself was changed
        F.relu(y, True)
        torch.add(x, 1, out=y)
        return x * 1, y * 1

    e = (torch.tensor([-1.0, 2.0]), torch.tensor([-3.0, 4.0]))
    c = (e[0].clone(), e[1].clone())
    expected = f(*e)
    got = dynamo.compile(f)(*c)
    assert all(torch.equal(a, b) for a, b in zip(got, expected))
    assert torch.equal(c[0], e[0]) and torch.equal(c[1], e[1])


_COUNTED = textwrap.dedent("""\
    import torch
    import dynamo

    def f(x):
        a = x.cos()
        b = x.sin()
        return x + 1

    recs = []
    dynamo.add_compile_listener(recs.append, listings=False)
    dynamo.compile(f)(torch.ones(2))
    (dce,) = recs[0]["passes"]
    print([(a["index"], a["node"], a["op"], a["where"].rsplit("/", 1)[-1], a["applied"]) for a in dce["applications"]])
    """)


def _run_counted(tmp_path, **env):
    (tmp_path / "prog.py").write_text(_COUNTED)
    e = {k: v for k, v in os.environ.items() if not k.startswith("DYNAMO_")}
    e.update(env)
    return subprocess.run([sys.executable, "prog.py"], cwd=tmp_path, env=e, capture_output=True, text=True,
                          timeout=120)


def test_applications_are_numbered_and_limited(tmp_path):
    # Dead-code elimination walks backwards: sin is its first application, cos its second.
    p = _run_counted(tmp_path)
    assert p.stdout == ("[(1, 'sin', 'torch.Tensor.sin', 'prog.py:6', True), "
                        "(2, 'cos', 'torch.Tensor.cos', 'prog.py:5', True)]\n"), p.stderr
    p = _run_counted(tmp_path, DYNAMO_BISECT_PASS="dead_code_elimination:1")
    assert p.stdout == ("[(1, 'sin', 'torch.Tensor.sin', 'prog.py:6', True), "
                        "(2, 'cos', 'torch.Tensor.cos', 'prog.py:5', False)]\n"), p.stderr


def test_bisect_pass_bad_value(tmp_path):
    p = _run_counted(tmp_path, DYNAMO_BISECT_PASS="dce:1")
    assert p.returncode == 1
    assert p.stderr.splitlines()[-2:] == [
        "dynamo.UserError: error: DYNAMO_BISECT_PASS='dce:1': 'dce:1' is not <pass>:<applications>",
        "  = hint: a pass of passes.def (dead_code_elimination, test_corrupt_node) and how many of its first "
        "applications to make, e.g. DYNAMO_BISECT_PASS=dead_code_elimination:3"]


def test_test_pass_is_off_and_unlisted_unless_turned_on():
    assert "test_corrupt_node" not in [name for name, _ in dynamo.list_passes()]
    # Known to the switches, so that dynamo-bisect can disable it.
    dynamo.config.disabled_passes = ("test_corrupt_node",)
    dynamo.config.disabled_passes = ()
