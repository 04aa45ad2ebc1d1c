"""dynamo.profile_recompiles() (python/dynamo/profiling.py, rendered by the C++ recompile report
over a trace store) and dynamo.utils.compile_times(): the recompile reasons name the guard kind,
the source, the dim, expected and seen values and the user line; the suggestions for a changing
size, a varying int argument, a rebound global and the cache limit; the eager runs after the
limit; the temporary store and an existing one; the compile-time tables."""
import csv
import gc
import inspect
import io
import json
import math
import os
import warnings

import pytest
import torch

import dynamo
import dynamo.recording
from dynamo import _C

SCALE = 1.0


def by_size(x):
    return x.sum(0) * 2


def by_int(x, n):
    return x * n


def by_global(x):
    return x * SCALE


def _line(fn, text):
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, l in enumerate(lines) if text in l)


@pytest.fixture(autouse=True)
def _reset():
    dynamo.reset()
    # These tests study one recompile per size (static sizes); automatic dynamic shapes would
    # turn the second size into a dynamic one (tests/python/test_dynamic_shapes.py).
    saved = dynamo.config.automatic_dynamic_shapes
    dynamo.config.automatic_dynamic_shapes = False
    yield
    dynamo.config.automatic_dynamic_shapes = saved
    dynamo.reset()


def _function(prof, name):
    return next(f for f in prof.summary() if f["name"] == name)


def _failure(fn, index):
    """The first (newest entry's) parsed guard failure of recompile `index`."""
    return fn["recompile_reasons"][index]["failures"][0]


def test_size_change_reason_and_suggestion():
    f = dynamo.compile(by_size)
    with dynamo.profile_recompiles() as prof:
        for n in (2, 3, 4):
            f(torch.ones(n, 3))
    s = _function(prof, "by_size")
    assert (s["compiles"], s["recompiles"], s["cache_limit_hits"]) == (3, 2, 0)
    fl = _failure(s, 0)
    assert (fl["guard_kind"], fl["source"], fl["property"], fl["dim"], fl["expected"], fl["seen"]) == \
        ("TENSOR_MATCH", "x", "size", 0, "2", "3")
    # The guard is created by the line that first uses x.
    line = _line(by_size, "return x.sum(0) * 2")
    assert fl["created_at"] == {"file": s["file"], "line": line, "source_line": "return x.sum(0) * 2"}
    assert s["file"] in (__file__, "test_profile_api.py", os.path.relpath(__file__))
    text = prof.report()
    assert ("  #1 tensor 'x' size mismatch at dim 0: expected 2, got 3\n"
            "       guard TENSOR_MATCH on x (size at dim 0): expected 2, seen 3\n"
            f"       created at {s['file']}:{line}: return x.sum(0) * 2\n") in text
    assert ("  #2 tensor 'x' size mismatch at dim 0: expected 3, got 4\n"
            "       guard TENSOR_MATCH on x (size at dim 0): expected 3, seen 4\n"
            f"       created at {s['file']}:{line}: return x.sum(0) * 2\n"
            "       + 1 more guard failure against older entries\n") in text
    assert ("    - tensor 'x' changes size at dim 0 from call to call (2 recompiles; sizes seen: 2, 3, 4): "
            f"automatic dynamic shapes did not apply (turned off, dynamic=False, or the size is read as a "
            f"Python int); call dynamo.mark_dynamic(x, 0) before the call, or pad or bucket the input to a few "
            f"sizes [{s['file']}:{line}]\n") in text


def test_varying_int_argument_suggestion():
    f = dynamo.compile(by_int)
    with dynamo.profile_recompiles() as prof:
        for n in (1, 2, 3):
            f(torch.ones(2), n)
    s = _function(prof, "by_int")
    fl = _failure(s, 1)
    assert (fl["guard_kind"], fl["source"], fl["property"], fl["expected"], fl["seen"]) == \
        ("EQUALS_MATCH", "n", "value", "2", "3")
    line = _line(by_int, "return x * n")
    assert fl["created_at"]["line"] == line and fl["created_at"]["source_line"] == "return x * n"
    text = prof.report()
    assert "  #1 'n' changed: expected 1, got 2\n       guard EQUALS_MATCH on n (value): expected 1, seen 2\n" in text
    assert ("    - Python int 'n' varies from call to call (2 recompiles; values seen: 1, 2, 3): automatic dynamic "
            "did not make it symbolic (turned off, dynamic=False, a backend that specialises, or the value is needed "
            "as a Python value); pass it as a tensor (torch.tensor(n)) or hoist it out of the compiled function") in text


def test_rebound_global_suggestion_and_cache_limit():
    global SCALE
    f = dynamo.compile(by_global)
    limit = dynamo.config.cache_size_limit
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with dynamo.profile_recompiles() as prof:
            for i in range(limit + 3):      # limit compiles, then 3 eager calls
                SCALE = float(i)
                f(torch.ones(2))
    s = _function(prof, "by_global")
    # compile attempts: `limit` compiled, then the one refused by the cache limit
    assert (s["compiles"], s["recompiles"], s["cache_limit_hits"]) == (limit + 1, limit - 1, 1)
    fl = _failure(s, 0)
    assert (fl["guard_kind"], fl["source"], fl["expected"], fl["seen"]) == ("EQUALS_MATCH", "G['SCALE']", "0.0", "1.0")
    line = _line(by_global, "x * SCALE")
    assert (fl["created_at"]["line"], fl["created_at"]["source_line"]) == (line, "return x * SCALE")
    hit = s["recompile_reasons"][-1]
    assert (hit["status"], hit["eager_runs"]) == ("cache_limit", 3)
    assert s["eager_runs"] == 3
    text = prof.report()
    assert f"1 function: {limit + 1} compiles, {limit - 1} recompiles, 1 cache-limit hit, compile time " in text
    assert (f"  #{limit} cache_size_limit hit: not compiled; the function runs eagerly from now on "
            "(then 3 eager runs)\n") in text
    assert f"       last reason: 'G['SCALE']' changed: expected {limit - 1.0}, got {float(limit)}\n" in text
    assert f"       created at {s['file']}:{line}: return x * SCALE\n" in text
    assert f"    - global 'SCALE' is rebound from call to call ({limit} recompiles; values seen: 0.0, 1.0, " in text
    assert (f"    - hit cache_size_limit with {limit} compiled entries; from then on every call ran eagerly "
            f"(3 calls counted): remove the recompile causes above, or raise "
            f"dynamo.config.cache_size_limit above {limit}") in text
    assert f"  ... {limit - 1 - 5} more recompiles (the JSON form lists all)\n" in text   # not a wall of text
    assert '"eager_runs": 3' in prof.report(fmt="json")


def test_other_formats_are_the_cpp_report():
    f = dynamo.compile(by_size)
    with dynamo.profile_recompiles() as prof:
        for n in (2, 3, 4):
            f(torch.ones(n, 3))
    path = prof._path
    for fmt in ("markdown", "junit", "sarif"):
        assert prof.report(fmt=fmt) == _C._reports.profile_report(
            path, fmt, run_id=prof._run_id, since_us=prof._since_us, until_us=prof._until_us,
            root_dir=os.getcwd())
    assert "changing-size" in prof.report(fmt="sarif")
    assert "| `by_size`" in prof.report(fmt="markdown")


def test_temporary_store_is_removed_and_recording_stays_off(tmp_path):
    assert not dynamo.recording.is_enabled()
    with dynamo.profile_recompiles() as prof:
        dynamo.compile(by_size)(torch.ones(2, 3))
    path = prof._path
    assert os.path.exists(path) and not dynamo.recording.is_enabled()
    assert "by_size" in prof.report()
    del prof
    gc.collect()
    assert not os.path.exists(path)


def test_uses_the_store_already_recorded_into(tmp_path):
    db = str(tmp_path / "trace.db")
    dynamo.recording.enable(db)
    try:
        f, g = dynamo.compile(by_size), dynamo.compile(by_int)
        f(torch.ones(2, 3))                     # before the block: not in the report
        with dynamo.profile_recompiles() as prof:
            f(torch.ones(3, 3))
            f(torch.ones(4, 3))
        g(torch.ones(2), 1)                     # after the block: not in the report
        assert prof._path == db and dynamo.recording.is_enabled()
        s = prof.summary()
        assert [(fn["name"], fn["compiles"], fn["recompiles"]) for fn in s] == [("by_size", 2, 2)]
        assert _failure(s[0], 0)["expected"] == "2" and _failure(s[0], 0)["seen"] == "3"
    finally:
        dynamo.recording.disable()
    assert os.path.exists(db)


def test_report_format_errors_and_empty():
    with dynamo.profile_recompiles() as prof:
        pass
    assert prof.summary() == []
    assert prof.report().endswith("\nNo function was compiled. If the script does not call dynamo itself, "
                                  "run it with --capture-all.\n")
    with pytest.raises(dynamo.UserError, match=r"unknown report format 'html'"):
        prof.report(fmt="html")


def test_compile_times_tables():
    dynamo.utils.reset_compile_times()
    f = dynamo.compile(by_int)
    f(torch.ones(2), 1)
    f(torch.ones(2), 2)
    rows = list(csv.reader(io.StringIO(dynamo.utils.compile_times(repr="csv"))))
    assert rows[0] == ["function", "location", "attempt", "status", "capture", "guards", "backend", "total"]
    assert [(r[0], r[2], r[3]) for r in rows[1:]] == [("by_int", "0", "compiled"), ("by_int", "1", "compiled")]
    assert all(float(r[7]) >= float(r[4]) > 0 for r in rows[1:])
    agg = list(csv.reader(io.StringIO(dynamo.utils.compile_times(repr="csv", aggregate=True))))
    assert agg[0][:3] == ["function", "location", "compiles"] and agg[1][0] == "by_int" and agg[1][2] == "2"
    text = dynamo.utils.compile_times(aggregate=True)
    assert text.startswith("Dynamo compile times (ms), 2 compiles since the last reset\nfunction")
    assert "by_int" in text.splitlines()[2]
    dynamo.utils.reset_compile_times()
    assert dynamo.utils.compile_times() == "Dynamo compile times (ms), 0 compiles since the last reset: none\n"
    with pytest.raises(ValueError, match=r"repr must be 'str' or 'csv'"):
        dynamo.utils.compile_times(repr="html")


def crosses_a_break(x):
    v = x.sum().item()
    return x * v


def by_float_branch(x, lr):
    if lr > 0.05:
        return x * lr
    return x - lr


def test_varying_float_specialised_by_a_branch_suggestion():
    # lr is a symbolic float from its first change, but the branch needs its value: guarded by
    # value at that line, and a constant in every later compile (one recompile per value).
    f = dynamo.compile(by_float_branch)
    with dynamo.profile_recompiles() as prof:
        for lr in (0.1, 0.2, 0.3, 0.02):
            f(torch.ones(2), lr)
    s = _function(prof, "by_float_branch")
    fl = _failure(s, 2)
    assert (fl["guard_kind"], fl["source"], fl["property"], fl["expected"], fl["seen"]) == \
        ("EQUALS_MATCH", "lr", "value", "0.3", "0.02")
    assert fl["created_at"]["source_line"] == "if lr > 0.05:"
    (sug,) = [g for g in s["suggestions"] if g["id"] == "varying-float"]
    assert sug["message"] == (
        "Python float 'lr' varies from call to call (3 recompiles; values seen: 0.1, 0.2, 0.3, 0.02): it is guarded by "
        "value because a use needs its value (a comparison or branch, int(), str(), math of it: the compile "
        "record's dynamic shapes name the line), or automatic dynamic is off (dynamic=False, a backend that "
        "specialises); move that use out of the compiled function, or pass it as a tensor (torch.tensor(lr))")


def test_value_crossing_a_break_names_the_break_line_and_suggests_keeping_a_tensor():
    f = dynamo.compile(crosses_a_break)
    with dynamo.profile_recompiles() as prof:
        for k in range(3):
            f(torch.ones(2) * (k + 1))
    s = _function(prof, "<resume in crosses_a_break>")   # the code after the break recompiles
    fl = _failure(s, 0)
    line = _line(crosses_a_break, "v = x.sum().item()")
    assert fl["guard_kind"] == "EQUALS_MATCH" and fl["source"].startswith("___stack")
    assert fl["created_at"]["line"] == line and fl["created_at"]["source_line"] == "v = x.sum().item()"
    (sug,) = [g for g in s["suggestions"] if g["id"] == "value-across-break"]
    assert sug["message"].startswith("a Python value computed by `v = x.sum().item()` before a graph break "
                                     "changes from call to call (2 recompiles; values seen: ")
    assert sug["message"].endswith("keep it a tensor (drop .item() / float()), or do the conversion outside "
                                   "the compiled function")


def by_shape(x):
    return x.view(math.prod(x.shape[:1]), -1) * 2  # math.prod needs Python ints


def test_a_failing_shape_guard_of_a_dynamic_entry_is_a_shape_guard_suggestion():
    dynamo.config.automatic_dynamic_shapes = True
    f = dynamo.compile(by_shape)
    with dynamo.profile_recompiles() as prof:
        for n in (2, 3, 4, 5, 6):
            assert torch.equal(f(torch.ones(n, 3, 2)), by_shape(torch.ones(n, 3, 2)))
    data = json.loads(prof.report(fmt="json"))
    fn = next(f for r in data["runs"] for f in r["functions"] if f["name"] == "by_shape")
    shape = [s for s in fn["suggestions"] if s["id"] == "shape-guard"]
    assert len(shape) == 1, fn["suggestions"]
    assert shape[0]["message"].startswith(
        "dim 0 of tensor 'x' fails a shape guard of a dynamic entry from call to call (3 recompiles; guard: == 3; "
        "seen: 4, 5, 6): it was specialised (used as a Python value at ")
    where = shape[0]["where"]
    assert where["file"].endswith("test_profile_api.py")
    assert (where["line"], where["source_line"]) == (_line(by_shape, "x.view(math.prod"),
                                                     "return x.view(math.prod(x.shape[:1]), -1) * 2  # math.prod needs Python ints")
