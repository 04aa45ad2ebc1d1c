"""The fused backend's kernels in the trace store: each kernel's source (a cpp_kernel code row)
and its metadata (the graph it belongs to, the nodes it computes, cache hit or miss, compile
time), read back with TraceReader.kernels_of_compile (docs/trace-store.md, "Kernels").
The first two tests read one pair of runs (a module-scoped fixture: each new process costs seconds
of torch import and kernel compiles)."""
import json
import os
import subprocess
import sys

import pytest

from dynamo import _C

SCRIPT = r"""
import sys, torch, dynamo

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        y = torch.relu(self.conv(x) * 2 + 1)
        y = y.mean(dim=(2, 3))
        return torch.sigmoid(self.fc(y)) * 3

torch.manual_seed(0)
m = Net().eval()
x = torch.randn(2, 3, 8, 8)
with torch.no_grad():
    fn = dynamo.compile(m, backend="fused")
    for _ in range(int(sys.argv[2])):  # the first 5 calls are timed (run_us)
        torch.testing.assert_close(fn(x), m(x), rtol=1e-5, atol=1e-5)
if sys.argv[1] == "train":
    def step(w, v):
        return torch.sigmoid(v @ w * 2 + 1).sum(dim=1)
    w = torch.randn(8, 4, requires_grad=True)
    dynamo.optimize("fused")(step)(w, torch.randn(2, 8)).sum().backward()
print("done")
"""


def _run(tmp_path, db, mode="eval", calls=1):
    env = dict(os.environ, DYNAMO_TRACE=str(db), DYNAMO_KERNEL_CACHE=str(tmp_path / "kernels"))
    r = subprocess.run([sys.executable, "-c", SCRIPT, mode, str(calls)], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0 and "done" in r.stdout, r.stderr
    return _C.TraceReader(str(db))


def _compiles(store):
    (run,) = store.runs()
    return run, store.compiles(run_id=run["id"])


def _graph_nodes(serialized):
    return [n["name"] for n in json.loads(serialized)["nodes"]]


@pytest.fixture(scope="module")
def cold_then_warm(tmp_path_factory):
    """SCRIPT's eval part run twice on one empty kernel cache, each run with its own trace store:
    4 calls (fewer than the 5 a kernel's run time is taken over), then 7 calls, which find the
    kernels in the disk cache. (cold store, warm store)"""
    d = tmp_path_factory.mktemp("cold_then_warm")
    return _run(d, d / "cold.db", calls=4), _run(d, d / "warm.db", calls=7)


def test_fused_compile_records_its_kernels_with_nodes_source_and_cache_state(cold_then_warm):
    store, again = cold_then_warm
    run, (compile,) = _compiles(store)
    kernels = store.kernels_of_compile(compile["id"])
    # The net lowers to a reduction kernel (conv epilogue arithmetic + mean) and a pointwise one
    # (bias add + sigmoid + mul); the conv and the matrix product are ATen steps, not kernels.
    assert [k["name"] for k in kernels] == ["k0_mean", "k1_mul_1"]
    (graph,) = store.graphs(compile["id"])
    names = set(_graph_nodes(graph["serialized"]))
    for k in kernels:
        assert k["graph"] == "dynamo" and k["graph_index"] == 0
        assert k["kind"] == "cpp_kernel"
        assert f' {k["name"]}(' in k["source"]  # the kernel's entry point
        assert set(k["nodes"]) <= names, k
        assert not k["cache_hit"] and k["compile_us"] > 0 and k["lower_us"] > 0
        assert k["cache_key"] and k["loops"].startswith("outer [")
        assert k["run_us"] == -1 and k["run_calls"] == 0  # four calls: fewer than the 5 timed
    # The fusion groups: the inlined pointwise nodes are in the kernel that computes them.
    assert kernels[0]["nodes"] == ["mul", "add", "relu", "mean"]
    assert kernels[1]["nodes"][-2:] == ["sigmoid", "mul_1"]
    # The same sources are ordinary code rows of the compile.
    code = [c for c in store.code(run["id"], compile["id"]) if c["kind"] == "cpp_kernel"]
    assert [c["name"] for c in code] == ["k0_mean", "k1_mul_1"]
    assert [c["content"] for c in code] == [k["source"] for k in kernels]

    # A second process finds both kernels in the disk cache: recorded as hits, no compile time.
    _, (compile2,) = _compiles(again)
    hits = again.kernels_of_compile(compile2["id"])
    assert [k["name"] for k in hits] == ["k0_mean", "k1_mul_1"]
    assert all(k["cache_hit"] and k["compile_us"] == 0 for k in hits)
    assert [k["cache_key"] for k in hits] == [k["cache_key"] for k in kernels]


def test_traced_kernels_record_their_mean_run_time_over_the_first_five_calls(cold_then_warm):
    for calls, store in zip((4, 7), cold_then_warm):
        run, (compile,) = _compiles(store)
        kernels = store.kernels_of_compile(compile["id"])
        assert [k["name"] for k in kernels] == ["k0_mean", "k1_mul_1"]
        timed = [a for a in store.artifacts(run["id"]) if a["name"] == "dynamo.kernel.run"]
        if calls < 5:  # written once, after the fifth call
            assert timed == [] and all(k["run_us"] == -1 and k["run_calls"] == 0 for k in kernels)
        else:
            assert len(timed) == 2  # once per kernel, not again on the sixth and seventh calls
            # (Microseconds, rounded: these kernels are small, so 0 is a measured value.)
            assert all(k["run_us"] >= 0 and k["run_calls"] == 5 for k in kernels), kernels
            assert sorted(json.loads(a["data"])["code_id"] for a in timed) == sorted(k["id"] for k in kernels)


def _aot_graph_nodes(store, run, compile, name):
    (graph,) = [a for a in store.artifacts(run["id"]) if a["compile_id"] == compile["id"] and a["name"] == name]
    return set(_graph_nodes(graph["data"]))


def test_training_compile_records_its_forward_and_late_backward_kernels(tmp_path):
    store = _run(tmp_path, tmp_path / "t.db", mode="train")
    run, compiles = _compiles(store)
    step = compiles[-1]
    kernels = store.kernels_of_compile(step["id"])
    forward = [k for k in kernels if k["graph"] == "aot.forward"]
    backward = [k for k in kernels if k["graph"] == "aot.backward"]
    # The forward graph's kernels come with the compile; the backward graph is compiled at the
    # first backward call, after the compile was recorded: its kernels are late rows of it.
    assert forward and backward
    assert kernels == forward + backward
    forward_nodes = _aot_graph_nodes(store, run, step, "dynamo.aot.forward")
    backward_nodes = _aot_graph_nodes(store, run, step, "dynamo.aot.backward")
    for k in forward:
        assert k["graph_index"] == 0 and set(k["nodes"]) <= forward_nodes, (k["nodes"], forward_nodes)
    for k in backward:
        assert k["graph_index"] == 0 and set(k["nodes"]) <= backward_nodes, (k["nodes"], backward_nodes)
        assert k["kind"] == "cpp_kernel" and f' {k["name"]}(' in k["source"]
    assert "sigmoid" in {n for k in forward for n in k["nodes"]}
    # The late rows are code rows of the same compile.
    code = [c["name"] for c in store.code(run["id"], step["id"]) if c["kind"] == "cpp_kernel"]
    assert code == [k["name"] for k in kernels]
    # The eval compile (no backward) has no backward kernels.
    assert all(k["graph"] == "dynamo" for k in store.kernels_of_compile(compiles[0]["id"]))


PASSES_SCRIPT = r"""
import torch, dynamo

def f(x):
    unused = x * 3
    return x.relu() + 1

def g(x):
    return x.relu() + 1

assert torch.equal(dynamo.optimize("eager")(f)(torch.ones(4)), f(torch.ones(4)))
assert torch.equal(dynamo.optimize("eager")(g)(torch.ones(4)), g(torch.ones(4)))
print("done")
"""


def test_a_pass_that_changed_the_graph_is_recorded_with_the_nodes_it_removed(tmp_path):
    db = tmp_path / "p.db"
    script = tmp_path / "passes_script.py"
    script.write_text(PASSES_SCRIPT)
    r = subprocess.run([sys.executable, str(script)], env=dict(os.environ, DYNAMO_TRACE=str(db)),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "done" in r.stdout, r.stderr
    store = _C.TraceReader(str(db))
    run, compiles = _compiles(store)
    frames = {fr["id"]: fr["name"] for fr in store.frames(run["id"])}
    by_name = {frames[c["frame_id"]]: c for c in compiles}
    passes = {frames[a_c]: a for a in store.artifacts(run["id"]) if a["name"] == "dynamo.passes"
              for a_c in [next(c["frame_id"] for c in compiles if c["id"] == a["compile_id"])]}
    # f's unused product is removed by dead-code elimination; g's graph is left as it was: no row.
    assert set(passes) == {"f"}
    assert passes["f"]["compile_id"] == by_name["f"]["id"]
    assert passes["f"]["data"].decode() == (
        "pass dead_code_elimination: changed (5 -> 4 nodes)\n"
        "  removed: mul\n"
        f"  application 1: mul (operator.mul) at {script}:5\n")
    # The graph the pass got, for the inspector's diff: the captured graph, mul included.
    inputs = [a for a in store.artifacts(run["id"]) if a["name"].startswith("dynamo.pass.input/")]
    assert [(a["name"], a["compile_id"]) for a in inputs] == [
        ("dynamo.pass.input/dead_code_elimination", by_name["f"]["id"])]
    (graph,) = store.graphs(by_name["f"]["id"])
    assert set(_graph_nodes(inputs[0]["data"])) - set(_graph_nodes(graph["serialized"])) == {"mul"}
