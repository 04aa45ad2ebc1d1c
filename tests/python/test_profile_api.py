"""dynamo.profile_recompiles() (python/dynamo/profiling.py) and dynamo.utils.compile_times(): the
recompile reasons name the guard kind, the source, expected and seen values and the user line;
the suggestions for a changing size, a varying int argument, a rebound global and the cache
limit; the eager runs after the limit; the compile-time tables."""
import csv
import inspect
import io
import warnings

import pytest
import torch

import dynamo

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
    yield
    dynamo.reset()


def _function(prof, name):
    return next(f for f in prof.summary() if f["function"] == name)


def test_size_change_reason_and_suggestion():
    f = dynamo.compile(by_size)
    with dynamo.profile_recompiles() as prof:
        for n in (2, 3, 4):
            f(torch.ones(n, 3))
    s = _function(prof, "by_size")
    assert s["compiles"] == 3 and len(s["recompiles"]) == 2
    fl = s["recompiles"][0]["failures"][0]
    assert (fl.kind, fl.source, fl.dim, fl.expected, fl.got) == ("TENSOR_MATCH", "x", 0, "2", "3")
    assert fl.created == f"{__file__}:{_line(by_size, 'def by_size')}: def by_size(x):"
    text = prof.report()
    assert "recompile 1: [TENSOR_MATCH] tensor 'x' size mismatch at dim 0: expected 2, got 3\n" in text
    assert f"guard created at test_profile_api.py:{_line(by_size, 'def by_size')}: def by_size(x):" in text \
        or f"guard created at {__file__}:{_line(by_size, 'def by_size')}: def by_size(x):" in text
    assert "recompile 2: [TENSOR_MATCH] tensor 'x' size mismatch at dim 0: expected 3, got 4 (and 1 older entry)" in text
    assert ("- dim 0 of tensor 'x' changed in 2 recompiles (sizes 2, 3, 4): sizes are specialised, "
            "so every new size compiles again. Pad or bucket the input") in text


def test_varying_int_argument_suggestion():
    f = dynamo.compile(by_int)
    with dynamo.profile_recompiles() as prof:
        for n in (1, 2, 3):
            f(torch.ones(2), n)
    fl = _function(prof, "by_int")["recompiles"][1]["failures"][0]
    assert (fl.kind, fl.source, fl.expected, fl.got) == ("EQUALS_MATCH", "n", "2", "3")
    text = prof.report()
    assert "recompile 1: [EQUALS_MATCH] 'n' changed: expected 1, got 2\n" in text
    assert ("- the Python number 'n' varied in 2 recompiles (values 1, 2, 3): each value is a "
            "constant of its own graph. Pass it as a tensor (torch.tensor(n))") in text


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
    assert s["compiles"] == limit
    fl = s["recompiles"][0]["failures"][0]
    assert (fl.kind, fl.source, fl.expected, fl.got) == ("EQUALS_MATCH", "G['SCALE']", "0.0", "1.0")
    assert fl.created.endswith(f":{_line(by_global, 'x * SCALE')}: return x * SCALE")
    assert s["cache_limit"]["after_compiles"] == limit
    assert s["cache_limit"]["eager_runs"] == 3
    text = prof.report()
    assert f"Recompile profile: 1 function, {limit} compiles, {limit - 1} recompiles, 1 hit cache_size_limit" in text
    assert f"cache_size_limit hit after {limit} compiles; then 3 eager runs\n" in text
    assert f"last reason: [EQUALS_MATCH] 'G['SCALE']' changed: expected {limit - 1.0}, got {float(limit)}" in text
    assert f"- the global 'SCALE' was rebound in {limit - 1} recompiles (values 0.0, 1.0, " in text
    assert f"- hit cache_size_limit after {limit} compiles; 3 calls ran eagerly from then on." in text
    assert f"... {limit - 1 - 5} more recompiles" in text      # not a wall of text
    assert '"eager_runs": 3' in prof.report(fmt="json")


def test_report_format_errors_and_empty():
    with dynamo.profile_recompiles() as prof:
        pass
    assert prof.report() == "Recompile profile: no compiles while profiling\n"
    with pytest.raises(ValueError, match=r"fmt must be 'text' or 'json'"):
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
