"""The fused backend's whole-graph cache (python/dynamo/aot/graph_cache.py; docs/codegen.md).

A warm compile in a new process finds the AOT layer's result on disk (no trace) and must be exactly
the cold compile: outputs and gradients bitwise equal. A truncated entry is ignored with a warning
and compiled again; a changed graph, dtype, size, requires_grad or partition option misses. The
tests count hits and misses (graph_cache.counters()), never time. Each run uses its own
$DYNAMO_KERNEL_CACHE, so nothing is shared with other tests or earlier runs (the two tests that
start from SCRIPT's cold run start from copies of one module-scoped cold run: each new process
costs seconds of torch import and kernel compiles)."""
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from dynamo import _C

SCRIPT = r"""
import json, sys, torch, dynamo
from dynamo.aot import graph_cache
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
x = torch.randn(8, 16)
train = dynamo.optimize("fused")(lambda x: torch.nn.functional.log_softmax(m(x), dim=-1).sum())
loss = train(x)
loss.backward()
w = torch.randn(5, 7, requires_grad=True)
infer = dynamo.optimize("fused")(lambda w: (w * 3).detach().exp() + 1)  # AOT layer, no autograd
out = infer(w)
recs = [r for r in dynamo.aot.last_records() if r["backend"] == "fused"]
torch.save({"loss": loss.detach(), "out": out, **{n: p.grad for n, p in m.named_parameters()}}, sys.argv[1])
print(json.dumps({"counters": graph_cache.counters(), "cache": [r.get("graph_cache") for r in recs],
                  "training": [r.get("training") for r in recs], "phases": [sorted(r["phases_ms"]) for r in recs]}))
"""


def _run(tmp_path, code, out_name, **env):
    e = dict(os.environ, DYNAMO_KERNEL_CACHE=str(tmp_path / "cache"), **env)
    e.pop("DYNAMO_GRAPH_CACHE", None)
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / out_name)], env=e, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


def _assert_bitwise_equal(a, b):
    a, b = torch.load(a), torch.load(b)
    assert sorted(a) == sorted(b) and len(a) == 6
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k


@pytest.fixture(scope="module")
def cold_run(tmp_path_factory):
    """SCRIPT run once on an empty cache: (directory holding cache/ as the run left it and cold.pt,
    the run's output)."""
    d = tmp_path_factory.mktemp("cold_run")
    cold, _ = _run(d, SCRIPT, "cold.pt")
    return d, cold


@pytest.fixture
def after_the_cold_run(tmp_path, cold_run):
    """tmp_path with a copy of cold_run's cache/ and cold.pt: where a test that starts from a cold
    run begins."""
    shutil.copytree(cold_run[0] / "cache", tmp_path / "cache")
    shutil.copy(cold_run[0] / "cold.pt", tmp_path / "cold.pt")
    return tmp_path


def test_a_warm_compile_in_a_new_process_skips_the_trace_and_is_bitwise_the_cold_one(cold_run, after_the_cold_run):
    d, cold = cold_run
    tmp_path = after_the_cold_run
    assert cold["counters"] == {"hits": 0, "misses": 2, "stores": 2, "rejected": 0, "uncacheable": 0}
    assert cold["cache"] == ["miss", "miss"] and cold["training"] == [True, False]
    assert len(list((d / "cache").glob("*.graph"))) == 2
    assert list((d / "cache").glob("*.tmp")) == []
    warm, _ = _run(tmp_path, SCRIPT, "warm.pt")
    assert warm["counters"] == {"hits": 2, "misses": 0, "stores": 0, "rejected": 0, "uncacheable": 0}
    assert warm["cache"] == ["hit", "hit"] and warm["training"] == [True, False]
    assert all("trace" not in p and "graph_cache" in p for p in warm["phases"]), warm["phases"]
    _assert_bitwise_equal(tmp_path / "cold.pt", tmp_path / "warm.pt")


def test_a_truncated_or_corrupt_entry_is_ignored_with_a_warning_and_compiled_again(after_the_cold_run):
    tmp_path = after_the_cold_run
    entries = sorted((tmp_path / "cache").glob("*.graph"))
    assert len(entries) == 2
    data = entries[0].read_bytes()
    entries[0].write_bytes(data[:len(data) // 2])                        # truncated
    body = bytearray(entries[1].read_bytes())
    body[-20] = ord("7") if body[-20] != ord("7") else ord("8")           # one byte changed
    entries[1].write_bytes(bytes(body))
    again, err = _run(tmp_path, SCRIPT, "again.pt")
    assert again["counters"] == {"hits": 0, "misses": 0, "stores": 2, "rejected": 2, "uncacheable": 0}
    assert err.count("RuntimeWarning: dynamo: ignoring the whole-graph cache entry") == 2, err
    assert err.count("(checksum mismatch: truncated or corrupt); compiling the graph again") == 2, err
    _assert_bitwise_equal(tmp_path / "cold.pt", tmp_path / "again.pt")
    warm, _ = _run(tmp_path, SCRIPT, "warm.pt")                           # rewritten: hits again
    assert warm["counters"]["hits"] == 2 and warm["counters"]["rejected"] == 0


CHANGES = r"""
import json, os, sys, torch, dynamo
from dynamo import aot
from dynamo.aot import graph_cache

def f(x, w):
    return (x @ w).relu().sum()

def g(x, w):
    return (x @ w).sigmoid().sum()

def compile_once(fn, *args):
    dynamo.reset()
    before = graph_cache.counters()
    dynamo.optimize("fused")(fn)(*args).backward()
    after = graph_cache.counters()
    return {k: after[k] - before[k] for k in ("hits", "misses")}

x, w = torch.randn(4, 8), torch.randn(8, 3, requires_grad=True)
out = {"first": compile_once(f, x, w), "same": compile_once(f, x, w),
       "graph": compile_once(g, x, w),
       "size": compile_once(f, torch.randn(5, 8), w),
       "dtype": compile_once(f, x.double(), w.detach().double().requires_grad_()),
       "requires_grad": compile_once(f, x.requires_grad_(), w)}
x.requires_grad_(False)
aot.PRESETS["fused"] = ("save_all", True)
out["partition_option"] = compile_once(f, x, w)
aot.PRESETS["fused"] = ("min_cut", True)
out["same_again"] = compile_once(f, x, w)
os.environ["DYNAMO_GRAPH_CACHE"] = "0"
out["off"] = compile_once(f, x, w)
print(json.dumps(out))
"""


def test_a_changed_graph_dtype_size_requires_grad_or_option_misses(tmp_path):
    out, _ = _run(tmp_path, CHANGES, "unused")
    hit, miss, none = {"hits": 1, "misses": 0}, {"hits": 0, "misses": 1}, {"hits": 0, "misses": 0}
    assert out == {"first": miss, "same": hit, "graph": miss, "size": miss, "dtype": miss,
                   "requires_grad": miss, "partition_option": miss, "same_again": hit, "off": none}


def test_a_graph_calling_a_function_outside_torch_is_not_cached():
    from dynamo.aot import graph_cache

    def double(t):
        return t * 2

    gm = torch.fx.symbolic_trace(lambda x: double(x) + 1)
    assert graph_cache.key(gm, [torch.randn(2)], "fused", "") == graph_cache.key(gm, [torch.randn(2)], "fused", "")
    gm.graph.call_function(double, (next(iter(gm.graph.nodes)),))
    with pytest.raises(graph_cache.Uncacheable, match=r"^node 'double' calls <function .*double.*>, which is not "
                                                      r"a torch, operator, math, builtins or dynamo function "
                                                      r"reachable by its name$"):
        graph_cache.key(gm, [torch.randn(2)], "fused", "")


def test_cache_files_are_named_by_a_key_and_one_extension():
    with pytest.raises(Exception, match=r"bad cache entry name 'a/b\.graph' \(expected <hex key>\.<extension>\)"):
        _C._codegen.cache_read("a/b.graph")
    with pytest.raises(Exception, match=r"bad cache entry name 'abc\.so'"):
        _C._codegen.cache_write("abc.so", b"x")
    name = "00" * 32 + ".testentry"
    _C._codegen.cache_write(name, b"one\x00two")
    assert _C._codegen.cache_read(name) == b"one\x00two"
    os.remove(os.path.join(_C._codegen.cache_dir(), name))
    assert _C._codegen.cache_read(name) is None


DIRECTORY = r"""
import os, sys, json
from dynamo import _C
d = _C._codegen.cache_dir()
for i in range(int(sys.argv[1])):
    _C._codegen.cache_write(f"{i:064x}.graph", b"x" * 300_000)
    _C._codegen.cache_read(f"{i + 1000:064x}.graph")     # a miss
print(json.dumps(sorted(os.listdir(d))))
"""


def _directory_run(cache, n, mb):
    env = dict(os.environ, DYNAMO_KERNEL_CACHE=str(cache), DYNAMO_KERNEL_CACHE_MB=str(mb))
    r = subprocess.run([sys.executable, "-c", DIRECTORY, str(n)], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_keys_share_256_lock_files_and_old_debris_goes_at_the_first_write(tmp_path):
    # An earlier version left a lock file per key ever looked up (63,000 in a long-used cache,
    # read by every scan of the directory) and a died compile leaves its temp files: a process's
    # first write removes those an hour old; fresh ones may belong to a running process.
    cache = tmp_path / "cache"
    cache.mkdir()
    old = [cache / ("ab" * 32 + ".lock"), cache / ("cd" * 32 + ".123.0.cpp"), cache / ("ef" * 32 + ".so.7.1.tmp")]
    fresh = cache / ("12" * 32 + ".lock")
    users = [cache / "model.cpp", cache / "notes.tmp", cache / "run.lock"]   # not the cache's names: kept
    for f in old + [fresh] + users:
        f.write_bytes(b"")
    for f in old + users:
        os.utime(f, (1_000_000_000, 1_000_000_000))
    names = _directory_run(cache, 40, 512)
    assert [n for n in names if n.endswith(".graph")] == [f"{i:064x}.graph" for i in range(40)]
    locks = [n for n in names if n.startswith("lock-")]
    assert 1 <= len(locks) <= 80 and all(len(n) == len("lock-00") for n in locks)   # 80 keys, 256 stripes
    assert not any(f.exists() for f in old) and fresh.exists() and all(f.exists() for f in users)
    assert set(names) == {f"{i:064x}.graph" for i in range(40)} | set(locks) | {fresh.name} | {f.name for f in users}


def test_a_process_writing_past_the_limit_evicts_the_oldest_entries(tmp_path):
    # The directory is read at a process's first write and again once its own writes may have
    # passed the limit: 40 entries of 300 KB against a 4 MB limit keep the newest 10-13.
    names = _directory_run(tmp_path / "cache", 40, 4)
    kept = [n for n in names if n.endswith(".graph")]
    assert 8 <= len(kept) <= 13, kept
    assert kept == [f"{i:064x}.graph" for i in range(40 - len(kept), 40)]
