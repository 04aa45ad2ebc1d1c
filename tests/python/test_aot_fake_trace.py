"""The AOT trace over fake tensors (torch 2.x; python/dynamo/aot/tracing.py, docs/aot.md): the
joint graph it gives is the real trace's, node for node (code, shapes, strides, dtypes) and field
for field (mutations, gradients, outputs), and whatever the fake trace cannot settle is traced
again on real tensors, giving today's graph or today's Fallback reason."""
import pytest
import torch

import dynamo
from dynamo.aot import tracing
from dynamo.aot.fallback import Fallback

pytestmark = pytest.mark.skipif(
    int(torch.__version__.split(".")[0]) < 2,
    reason="torch 1.13 traces on real tensors only (its fake tensors lack meta kernels the models need)")


@pytest.fixture(autouse=True)
def _fresh():
    dynamo.reset()
    yield
    dynamo.reset()


def capture(fn, *args):
    """The captured graph of fn and its example inputs, as the AOT layer receives them."""
    got = []

    def backend(gm, example_inputs):
        got.append((gm, list(example_inputs)))
        return gm.forward

    dynamo.optimize(backend)(fn)(*args)
    assert len(got) == 1, f"expected one graph, got {len(got)}"
    return got[0]


def sources(gm):
    return [n.meta.get("dynamo_source", n.name) for n in gm.graph.nodes if n.op == "placeholder"]


def trace(monkeypatch, how, gm, examples, training=True, decompose=False):
    monkeypatch.setenv("DYNAMO_AOT_TRACE", how)
    table = None
    if decompose:
        from dynamo.aot import decompositions
        table = decompositions.table({})
    with torch.enable_grad() if training else torch.no_grad():
        return tracing.trace(gm, examples, sources(gm), training, table)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        return self.fc2(self.drop(torch.nn.functional.gelu(self.fc1(x))))


def small_cnn():
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(inplace=True),
        torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(8 * 4 * 4, 5))


def encoder():
    return torch.nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.1, batch_first=True)


def inplace_and_views(x, w):
    y = x * w
    y.add_(1)
    z = y.view(4, -1).t()
    return z.relu_().sum(0), y[1:].transpose(0, 1)


MODELS = {
    "mlp_dropout": (lambda: Block().train(), lambda: (torch.randn(8, 16),)),
    "cnn_batchnorm": (lambda: small_cnn().train(), lambda: (torch.randn(4, 3, 8, 8),)),
    "transformer": (lambda: encoder().train(), lambda: (torch.randn(2, 5, 16),)),
}


@pytest.mark.parametrize("decompose", [False, True], ids=["aot_eager", "decomp"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_fake_trace_of_a_training_model_equals_the_real_one(monkeypatch, name, decompose):
    make_model, make_inputs = MODELS[name]
    torch.manual_seed(0)
    model, args = make_model(), make_inputs()
    gm, examples = capture(lambda *a: model(*a), *args)
    rng = torch.random.get_rng_state()
    real = trace(monkeypatch, "real", gm, examples, decompose=decompose)
    fake = trace(monkeypatch, "fake", gm, examples, decompose=decompose)
    assert (real.mode, fake.mode) == ("real", "fake")
    assert tracing._layout(fake) == tracing._layout(real)
    assert torch.equal(torch.random.get_rng_state(), rng)  # neither trace draws random numbers
    # "check" traces both and compares them itself; it returns the real trace
    assert trace(monkeypatch, "check", gm, examples, decompose=decompose).mode == "real"


def inplace_on_fresh_values(x, w):
    y = x * w
    y.add_(1)
    u = y.view(4, -1).t()
    return u.sum(0), (y * 2).relu_(), y[1:].transpose(0, 1)


def test_fake_trace_keeps_in_place_ops_views_and_batchnorm_mutations(monkeypatch):
    x, w = torch.randn(4, 6), torch.randn(4, 6, requires_grad=True)
    gm, examples = capture(inplace_on_fresh_values, x, w)
    real, fake = trace(monkeypatch, "real", gm, examples), trace(monkeypatch, "fake", gm, examples)
    assert fake.mode == "fake" and tracing._layout(fake) == tracing._layout(real)
    assert fake.rewritten  # the in-place ops on fresh values, made out-of-place as in the real trace

    model = small_cnn().train()
    gm, examples = capture(lambda a: model(a), torch.randn(4, 3, 8, 8))
    real, fake = trace(monkeypatch, "real", gm, examples), trace(monkeypatch, "fake", gm, examples)
    assert fake.mode == "fake" and fake.mutated_inputs == real.mutated_inputs != []  # running stats


def test_an_in_place_write_through_a_view_is_traced_on_real_tensors(monkeypatch):
    # autograd records relu_ on the view t() with as_strided for real tensors and by replaying the
    # views for fake ones: a different graph, so the fake trace hands over to the real one
    x, w = torch.randn(4, 6), torch.randn(4, 6, requires_grad=True)
    gm, examples = capture(inplace_and_views, x, w)
    real, got = trace(monkeypatch, "real", gm, examples), trace(monkeypatch, "fake", gm, examples)
    assert got.mode == "real (fake failed: _NeedsReal: an in-place write through a view)"
    assert tracing._layout(got) == tracing._layout(real)
    assert "as_strided" in got.graph.python_code("self").src


def test_inference_trace_is_fake_and_keeps_outputs_aliasing_inputs(monkeypatch):
    def f(x):
        return x.view(-1), (x + 1).t()

    gm, examples = capture(f, torch.randn(3, 4))
    real = trace(monkeypatch, "real", gm, examples, training=False)
    fake = trace(monkeypatch, "fake", gm, examples, training=False)
    assert (fake.mode, fake.training) == ("fake", False)
    assert tracing._layout(fake) == tracing._layout(real)


def test_aliasing_output_of_a_training_graph_falls_back_with_the_real_traces_reason(monkeypatch):
    def f(x):
        return x.view(-1), x * 2

    gm, examples = capture(f, torch.randn(3, 4, requires_grad=True))
    reasons = []
    for how in ("real", "fake"):
        with pytest.raises(Fallback) as e:
            trace(monkeypatch, how, gm, examples)
        reasons.append(str(e.value))
    assert reasons[0] == reasons[1] == ("graph output 0 aliases input 'x' (a view or the same tensor): the AOT "
                                        "wrapper cannot give it eager's aliasing and autograd history")


def nonzero_out(x):
    return x * 2, torch.nonzero(x * 1)


def item_scale(x):
    return (x * (x * x).sum().item(),)


@pytest.mark.parametrize("fn", [nonzero_out, item_scale], ids=["nonzero", "item"])
def test_data_dependent_ops_are_traced_again_on_real_tensors(monkeypatch, fn):
    gm = torch.fx.symbolic_trace(fn)
    examples = [torch.tensor([0.0, 1.0, 2.0], requires_grad=True)]
    answers = []
    for how in ("real", "fake"):
        try:
            got = trace(monkeypatch, how, gm, examples)
            answers.append(("traced", got.mode.split(" ")[0], tracing._layout(got)))
        except Fallback as e:
            answers.append(("fallback", str(e)))
    # the fake trace cannot size nonzero's output nor read .item(): the real trace decides
    assert answers[0] == answers[1]
    if fn is nonzero_out:
        assert answers[0] == ("fallback", "operator aten::nonzero has an output shape that depends on tensor values")
    else:
        assert answers[0][:2] in {("traced", "real"), ("fallback", answers[0][-1])}


def test_tensor_constants_are_traced_on_real_tensors(monkeypatch):
    def f(x):
        return x * torch.tensor([1.0, 2.0, 3.0])

    gm, examples = capture(f, torch.randn(2, 3, requires_grad=True))
    got = trace(monkeypatch, "fake", gm, examples)
    assert got.mode == "real (fake failed: _NeedsReal: tensor constants made in the graph: lifted from the real trace)"
    assert len(got.constants) == 1 and torch.equal(got.constants[0], torch.tensor([1.0, 2.0, 3.0]))


def test_compiled_training_step_uses_the_fake_trace_and_matches_eager(monkeypatch):
    monkeypatch.setenv("DYNAMO_AOT_TRACE", "check")  # a fake trace unlike the real one would raise
    torch.manual_seed(0)
    model = Block().train()
    x = torch.randn(8, 16)
    ref = __import__("copy").deepcopy(model)
    torch.manual_seed(1)
    want = ref(x)
    want.sum().backward()
    torch.manual_seed(1)
    got = dynamo.compile(model, backend="aot_eager")(x)
    got.sum().backward()
    assert torch.equal(got, want)
    for a, b in zip(model.parameters(), ref.parameters()):
        assert torch.equal(a.grad, b.grad)
    monkeypatch.setenv("DYNAMO_AOT_TRACE", "fake")
    dynamo.reset()
    from dynamo import aot
    dynamo.compile(Block().train(), backend="aot_eager")(x).sum().backward()
    assert aot.last_records()[-1]["trace_mode"] == "fake"


def test_an_unknown_trace_mode_is_refused_with_a_user_error(monkeypatch):
    monkeypatch.setenv("DYNAMO_AOT_TRACE", "sometimes")
    with pytest.raises(dynamo.UserError) as e:
        tracing.trace_mode()
    assert str(e.value) == ("error: DYNAMO_AOT_TRACE='sometimes' is not a trace mode\n"
                            "  = hint: set it to fake, real or check, or unset it")


def test_a_handover_is_logged_and_recorded_with_its_reason(monkeypatch, capsys):
    from dynamo import aot, logs
    logs.set_logs("aot_graphs")
    try:
        monkeypatch.setenv("DYNAMO_AOT_TRACE", "fake")
        x = torch.randn(2, 3, requires_grad=True)
        dynamo.compile(lambda a: a * torch.tensor([1.0, 2.0, 3.0]), backend="aot_eager")(x).sum().backward()
    finally:
        logs.set_logs("")
    want = "real (fake failed: _NeedsReal: tensor constants made in the graph: lifted from the real trace)"
    assert aot.last_records()[-1]["trace_mode"] == want
    assert ("[dynamo] aot: the fake trace handed over to the real trace: _NeedsReal: tensor constants made "
            "in the graph: lifted from the real trace\n") in capsys.readouterr().err


def test_an_unexpected_error_of_the_fake_trace_propagates(monkeypatch):
    # a bug of the fake path (here: a TypeError from the fake mode) is not hidden behind the real trace
    def broken():
        raise TypeError("a bug in the fake path")

    monkeypatch.setattr(tracing, "_fake_mode", broken)
    gm, examples = capture(lambda a: a * 2, torch.randn(2, 3, requires_grad=True))
    with pytest.raises(TypeError, match="a bug in the fake path"):
        trace(monkeypatch, "fake", gm, examples)
    assert trace(monkeypatch, "real", gm, examples).mode == "real"


def test_an_output_layout_unlike_eagers_hands_over_to_the_real_trace(monkeypatch):
    # eager's output 0 given other strides (the same values, column-major): the fake trace's
    # output layout no longer matches it, and the real trace decides
    run = tracing._reference_run

    def column_major(*a):
        outs, *rest = run(*a)
        return [outs[0].t().contiguous().t()] + outs[1:], *rest

    gm, examples = capture(lambda a: (a * 2, a + 1), torch.randn(3, 4, requires_grad=True))
    assert trace(monkeypatch, "fake", gm, examples).mode == "fake"
    monkeypatch.setattr(tracing, "_reference_run", column_major)
    got = trace(monkeypatch, "fake", gm, examples)
    assert got.mode == ("real (fake failed: _NeedsReal: output 0 is ((3, 4), (4, 1)) (shape, strides) on fake "
                        "tensors, ((3, 4), (1, 3)) in eager)")


def test_the_whole_graph_cache_is_skipped_in_check_mode(monkeypatch):
    # a check must trace both ways: the fused preset's cache (whose entries the fake trace made)
    # is neither read nor written then
    from dynamo import aot
    from dynamo.aot import graph_cache
    calls = []
    monkeypatch.setattr(graph_cache, "load", lambda k: calls.append("load"))  # None: a miss
    monkeypatch.setattr(graph_cache, "store", lambda k, entry: calls.append("store"))
    monkeypatch.delenv("DYNAMO_GRAPH_CACHE", raising=False)
    monkeypatch.delenv("DYNAMO_REPRO_AFTER", raising=False)
    x = torch.randn(4, 6, requires_grad=True)
    for how, want in (("fake", (["load", "store"], "miss", "fake")), ("check", ([], None, "real"))):
        monkeypatch.setenv("DYNAMO_AOT_TRACE", how)
        assert graph_cache.enabled() == (how == "fake")
        dynamo.reset()
        calls.clear()
        dynamo.compile(lambda a: (a * 2).sin(), backend="fused")(x).sum().backward()
        rec = aot.last_records()[-1]
        assert (calls, rec.get("graph_cache"), rec["trace_mode"]) == want


def test_the_reference_run_runs_once_when_the_fake_trace_hands_over(monkeypatch):
    run, calls = tracing._reference_run, []

    def counted(*a):
        calls.append(1)
        return run(*a)

    monkeypatch.setattr(tracing, "_reference_run", counted)
    gm, examples = capture(lambda a: a * torch.tensor([1.0, 2.0, 3.0]), torch.randn(2, 3, requires_grad=True))
    for how in ("fake", "check", "real"):
        calls.clear()
        assert trace(monkeypatch, how, gm, examples).mode.startswith("real")
        assert len(calls) == 1, how
