"""The fused backend's program cache (backends/src/fused_program_cache.h; docs/codegen.md).

An inference graph (no autograd: it skips the AOT layer and its whole-graph cache) is lowered once;
the lowered program and its kernels' sources are stored under a key of the graph, every value's
tensor meta and the options. A warm compile in a new process reads them back (no lowering) and must
be exactly the cold compile: outputs bitwise equal, also after a weight changes in place (a conv
step's weights are read from the live module, never from the cache). A corrupt entry is ignored
with a warning, lowered again and overwritten; a changed graph, size, dtype, strides,
requires_grad or lowering option misses. The tests count hits and misses
(_C._codegen.counters()), never time; each test has its own $DYNAMO_KERNEL_CACHE (the tests that
start from SCRIPT's cold and warm runs copy them from one module-scoped pair of runs: each new
process costs seconds of torch import and kernel compiles)."""
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

SCRIPT = r"""
import json, sys, torch, dynamo
from dynamo import _C
torch.manual_seed(0)
torch.set_grad_enabled(False)
m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                        torch.nn.Conv2d(8, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8),
                        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4)).eval()
for bn in (m[1], m[4]):
    bn.running_mean.uniform_(-0.5, 0.5)
    bn.running_var.uniform_(0.5, 2.0)
x = torch.randn(2, 3, 10, 10)
f = dynamo.optimize("fused")(lambda x: torch.softmax(m(x) * 2 - 1, dim=-1))
out = {"before": f(x)}
m[3].weight.mul_(-1.5)        # in place, after the compile: the next call prepares it again
m[1].running_var.add_(0.25)   # a folded batch_norm's statistics too
out["after"] = f(x)
out["eager_after"] = torch.softmax(m(x) * 2 - 1, dim=-1)
torch.save(out, sys.argv[1])
c = _C._codegen.counters()
print(json.dumps({k: v for k, v in c.items() if k.startswith("program_")}))
"""


def _run(tmp_path, code, out_name, **env):
    e = dict(os.environ, DYNAMO_KERNEL_CACHE=str(tmp_path / "cache"), **env)
    e.pop("DYNAMO_GRAPH_CACHE", None)
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / out_name)], env=e, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


def _counts(hits=0, misses=0, stores=0, rejected=0):
    return {"program_hits": hits, "program_misses": misses, "program_stores": stores, "program_rejected": rejected}


def _assert_bitwise_equal(a, b):
    a, b = torch.load(a), torch.load(b)
    assert sorted(a) == ["after", "before", "eager_after"]
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k


@pytest.fixture(scope="module")
def cold_and_warm(tmp_path_factory):
    """SCRIPT run twice on one empty cache: (directory, counters of the cold run, of the warm run).
    The directory holds cache/ as the warm run left it, cold.pt and warm.pt."""
    d = tmp_path_factory.mktemp("cold_and_warm")
    cold, _ = _run(d, SCRIPT, "cold.pt")
    entries = sorted(p.name for p in (d / "cache").iterdir())
    warm, _ = _run(d, SCRIPT, "warm.pt")
    return d, cold, warm, entries


@pytest.fixture
def after_a_cold_run(tmp_path, cold_and_warm):
    """tmp_path with a copy of cold_and_warm's cache/ (its one program entry stored by the cold
    run) and cold.pt: where a test that starts from a cold run begins."""
    d, _, _, _ = cold_and_warm
    shutil.copytree(d / "cache", tmp_path / "cache")
    shutil.copy(d / "cold.pt", tmp_path / "cold.pt")
    return tmp_path


def test_a_warm_compile_in_a_new_process_reads_the_program_back_and_is_bitwise_the_cold_one(cold_and_warm):
    d, cold, warm, entries_after_cold = cold_and_warm
    assert cold == _counts(misses=1, stores=1)
    assert len([e for e in entries_after_cold if e.endswith(".program")]) == 1
    assert [e for e in entries_after_cold if e.endswith(".tmp")] == []
    assert warm == _counts(hits=1)
    _assert_bitwise_equal(d / "cold.pt", d / "warm.pt")


def test_a_weight_changed_after_a_warm_hit_changes_the_output_as_in_eager(cold_and_warm):
    d, _, warm, _ = cold_and_warm
    assert warm == _counts(hits=1)
    out = torch.load(d / "warm.pt")
    assert not torch.equal(out["before"], out["after"])  # the changed weights were read, not cached ones
    torch.testing.assert_close(out["after"], out["eager_after"], rtol=1e-5, atol=1e-6)


def test_a_truncated_or_corrupt_entry_is_ignored_with_a_warning_and_lowered_again(after_a_cold_run):
    tmp_path = after_a_cold_run
    [entry] = list((tmp_path / "cache").glob("*.program"))
    data = entry.read_bytes()
    entry.write_bytes(data[:len(data) // 2])                                      # truncated
    again, err = _run(tmp_path, SCRIPT, "again.pt")
    assert again == _counts(stores=1, rejected=1)
    assert err.count(f"RuntimeWarning: dynamo: ignoring the program cache entry {entry} (checksum mismatch: "
                     f"truncated or corrupt); lowering the graph again") == 1, err
    _assert_bitwise_equal(tmp_path / "cold.pt", tmp_path / "again.pt")
    assert entry.read_bytes() == data                                             # overwritten
    body = bytearray(data)
    body[-9] ^= 0x5A                                                               # one byte changed
    entry.write_bytes(bytes(body))
    again, err = _run(tmp_path, SCRIPT, "again2.pt")
    assert again == _counts(stores=1, rejected=1) and "(checksum mismatch: truncated or corrupt)" in err, err
    entry.write_bytes(b"not an entry")
    again, err = _run(tmp_path, SCRIPT, "again3.pt")
    assert again == _counts(stores=1, rejected=1) and "(no header); lowering the graph again" in err, err
    warm, _ = _run(tmp_path, SCRIPT, "warm.pt")                                   # rewritten: a hit again
    assert warm == _counts(hits=1)
    _assert_bitwise_equal(tmp_path / "cold.pt", tmp_path / "warm.pt")


CHANGES = r"""
import json, os, sys, torch, dynamo
from dynamo import _C
torch.set_grad_enabled(False)

def f(x, y):
    return (x * y + 1).relu().sum(dim=-1)

def g(x, y):
    return (x * y + 1).sigmoid().sum(dim=-1)

def compile_once(fn, *args):
    dynamo.reset()
    before = _C._codegen.counters()
    dynamo.optimize("fused")(fn)(*args)
    after = _C._codegen.counters()
    return {k: after["program_" + k] - before["program_" + k] for k in ("hits", "misses")}

x, y = torch.randn(4, 8), torch.randn(4, 8)
out = {"first": compile_once(f, x, y), "same": compile_once(f, x, y),
       "graph": compile_once(g, x, y),
       "size": compile_once(f, torch.randn(5, 8), torch.randn(5, 8)),
       "dtype": compile_once(f, x.double(), y.double()),
       "strides": compile_once(f, torch.randn(8, 4).t(), y),
       "requires_grad": compile_once(f, x.clone().requires_grad_(), y),
       "same_again": compile_once(f, x, y)}
os.environ["DYNAMO_GRAPH_CACHE"] = "0"
out["off"] = compile_once(f, x, y)
print(json.dumps(out))
"""


def test_a_changed_graph_size_dtype_strides_or_requires_grad_misses(tmp_path):
    out, _ = _run(tmp_path, CHANGES, "unused")
    hit, miss, none = {"hits": 1, "misses": 0}, {"hits": 0, "misses": 1}, {"hits": 0, "misses": 0}
    assert out == {"first": miss, "same": hit, "graph": miss, "size": miss, "dtype": miss, "strides": miss,
                   "requires_grad": miss, "same_again": hit, "off": none}


def test_the_key_holds_the_lowering_options_and_the_emitter(tmp_path):
    # The same graph through _C._codegen.compile: C++ kernels, the CUDA host shim, and as a forward
    # graph of the AOT layer (convolutions stay ATen calls there) are three entries.
    code = r"""
import json, sys, torch
sys.path.insert(0, sys.argv[2])
from dynamo import _C
from fused_harness import to_dynamo_graph
torch.set_grad_enabled(False)
fn = lambda x, w: torch.nn.functional.relu(torch.nn.functional.conv2d(x, w)) + 1
inputs = [torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3)]
text = to_dynamo_graph(torch.fx.symbolic_trace(fn), inputs).serialize()
def go(**kw):
    before = _C._codegen.counters()
    _C._codegen.compile(text, inputs, **kw)
    after = _C._codegen.counters()
    return [after["program_hits"] - before["program_hits"], after["program_misses"] - before["program_misses"]]
print(json.dumps([go(), go(), go(cuda_host_shim=True), go(inside_autograd=True), go(cuda_host_shim=True)]))
"""
    e = dict(os.environ, DYNAMO_KERNEL_CACHE=str(tmp_path / "cache"))
    e.pop("DYNAMO_GRAPH_CACHE", None)
    r = subprocess.run([sys.executable, "-c", code, "unused", os.path.dirname(os.path.abspath(__file__))], env=e,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) == [[0, 1], [1, 0], [0, 1], [0, 1], [1, 0]]


def test_program_entries_count_toward_the_cache_size_limit_and_the_oldest_is_evicted(tmp_path):
    (tmp_path / "cache").mkdir()
    stale = tmp_path / "cache" / ("ab" * 32 + ".program")
    stale.write_bytes(b"x" * (3 << 19))          # 1.5 MB, over the 1 MB limit on its own
    os.utime(stale, (1_000_000_000, 1_000_000_000))
    cold, _ = _run(tmp_path, SCRIPT, "cold.pt", DYNAMO_KERNEL_CACHE_MB="1")
    assert cold == _counts(misses=1, stores=1)
    assert not stale.exists()
    assert len(list((tmp_path / "cache").glob("*.program"))) == 1


NUMBERS = r"""
import json, sys, torch, dynamo
from dynamo import _C
torch.set_grad_enabled(False)
x = torch.linspace(-3, 3, 4096).reshape(64, 64)
f = dynamo.optimize("fused")(lambda x, lr, step: (x * lr + step).relu() * 0.5 + x)
out = {}
for k, (lr, step) in enumerate([(0.5, 2), (0.25, 3), (-1.75, 4), (3.125, 9)]):
    out[f"fused_{k}"] = f(x, lr, step)
    out[f"eager_{k}"] = (x * lr + step).relu() * 0.5 + x
torch.save(out, sys.argv[1])
c = _C._codegen.counters()
print(json.dumps({k: v for k, v in c.items() if k.startswith("program_")}))
"""


def test_a_program_whose_kernels_read_python_numbers_reads_them_at_call_time_after_a_warm_hit(tmp_path):
    # The numbers a kernel reads at call time (Program::scalars, kScalar expressions) are part of
    # the stored program: a warm hit that lost them would compute with stale or missing values.
    cold, _ = _run(tmp_path, NUMBERS, "cold.pt")
    assert cold["program_stores"] >= 2 and cold["program_hits"] == 0
    warm, _ = _run(tmp_path, NUMBERS, "warm.pt")
    assert warm["program_hits"] == cold["program_stores"] and warm["program_misses"] == 0
    a, b = torch.load(tmp_path / "cold.pt"), torch.load(tmp_path / "warm.pt")
    for k in range(4):
        assert torch.equal(a[f"fused_{k}"], b[f"fused_{k}"]), k
        torch.testing.assert_close(b[f"fused_{k}"], b[f"eager_{k}"], rtol=1e-6, atol=1e-6)
