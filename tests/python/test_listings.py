"""The listings of a compile (printed and serialized graphs, pass graphs, guard text, bytecode
listing) are built only when someone reads them: a listener that asked (listings=True, the
default), a trace store, or a log (docs/performance.md, "Listings on demand")."""
import torch

import dynamo


def f(x):
    return (x * 2).sin() + 1


def _record(listings, trace=None):
    seen = []
    dynamo.reset()
    dynamo.add_compile_listener(seen.append, listings=listings)
    try:
        if trace is not None:
            dynamo.recording.enable(trace)
        dynamo.compile(f)(torch.ones(3))
    finally:
        dynamo.remove_compile_listener(seen.append)
        if trace is not None:
            dynamo.recording.disable()
        dynamo.reset()
    (record,) = seen
    return record


def test_a_listener_that_does_not_read_them_gets_none():
    r = _record(listings=False)
    assert r["listings"] is False
    assert [(g["text"], g["json"]) for g in r["graphs"]] == [("", "")]
    assert r["guard_text"] == "" and r["bytecode"] == ""
    # What is not a listing stays: the op counts, the guards as data, the pass statuses.
    assert r["graphs"][0]["op_counts"] == {"operator.mul": 1, "torch.Tensor.sin": 1, "operator.add": 1}
    assert r["guards"] and [p["status"] for p in r["passes"]]


def test_a_listener_that_reads_them_gets_them():
    r = _record(listings=True)
    assert r["listings"] is True
    (g,) = r["graphs"]
    assert g["text"].startswith("graph(%x)") and '"nodes"' in g["json"]
    assert "TENSOR_MATCH" in r["guard_text"] and "RESUME" in r["bytecode"]


def test_a_trace_store_asks_for_them(tmp_path):
    r = _record(listings=False, trace=tmp_path / "t.db")
    assert r["listings"] is True and r["graphs"][0]["text"].startswith("graph(%x)")
    with dynamo.trace.open(tmp_path / "t.db") as store:
        (run,) = store.runs()
        (c,) = store.compiles(run_id=run["id"])
        (g,) = store.graphs(c["id"])
        assert g["printed"] == r["graphs"][0]["text"]


def test_removing_the_last_listing_listener_stops_them():
    first = []
    dynamo.add_compile_listener(first.append)
    dynamo.remove_compile_listener(first.append)
    assert _record(listings=False)["listings"] is False
