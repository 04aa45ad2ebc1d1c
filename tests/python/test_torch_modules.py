"""Modules whose forward torch defines (nn.Sequential, nn.TransformerEncoderLayer, ...) passed to
dynamo.optimize(backend)(module) or dynamo.compile(module): their forward is compiled even though
torch's files are on the frame-level skip list, the result is bitwise the eager one, and
dynamo.explain reports the graphs the real run compiles. torch code that user code calls is still
inlined into the user's frame, and with `with dynamo.optimize(...)` torch frames stay skipped.

Before the fix optimize(backend)(nn.Sequential(...)) compiled nothing (the run was eager), while
explain (which goes through compile) showed a graph."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import dynamo
from stacks import only_on_stack2


@pytest.fixture()
def records():
    out = []
    dynamo.reset()
    dynamo.add_compile_listener(out.append, listings=False)
    yield out
    dynamo.remove_compile_listener(out.append)
    dynamo.reset()


def wrap(api, backend, module):
    if api == "optimize":
        return dynamo.optimize(backend)(module)
    return dynamo.compile(module, backend=backend)


def compiled_graphs(records, function):
    """Graphs compiled for frames of `function` (a qualname, resume functions included)."""
    return sum(len(r["graphs"]) for r in records
               if r["status"] == "compiled" and function in r["function"])


def run_both(module, make_input, compiled, train):
    """Eager then compiled, from the same RNG state: outputs and parameter gradients."""
    results = []
    for fn in (module, compiled):
        torch.manual_seed(1234)
        x = make_input()
        module.zero_grad(set_to_none=True)
        out = fn(x)
        grads = ()
        if train:
            out.sum().backward()
            grads = tuple(p.grad.clone() for p in module.parameters())
        results.append((out.detach(), grads))
    return results


def assert_bitwise(results):
    (out_e, grads_e), (out_c, grads_c) = results
    assert torch.equal(out_e, out_c)
    assert len(grads_e) == len(grads_c)
    for a, b in zip(grads_e, grads_c):
        assert torch.equal(a, b)


def sequential():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 4))


def encoder_layer(dropout):
    torch.manual_seed(0)
    return nn.TransformerEncoderLayer(16, 2, 32, dropout=dropout, batch_first=True)


class ModuleListModel(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(16, 16), nn.GELU()) for _ in range(3))
        self.norm = nn.LayerNorm(16)

    def forward(self, x):
        for block in self.blocks:
            x = x + block(x)
        return self.norm(x)


CASES = {
    # name: (factory, input, function whose frame is compiled)
    "Sequential": (sequential, lambda: torch.randn(5, 8), "Sequential.forward"),
    "TransformerEncoderLayer": (lambda: encoder_layer(0.1), lambda: torch.randn(2, 5, 16),
                                "TransformerEncoderLayer.forward"),
    "TransformerEncoder": (lambda: nn.TransformerEncoder(encoder_layer(0.1), 2),
                           lambda: torch.randn(2, 5, 16), "TransformerEncoder.forward"),
    "ModuleList": (ModuleListModel, lambda: torch.randn(4, 16), "ModuleListModel.forward"),
}


@pytest.mark.parametrize("api", ["optimize", "compile"])
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_module_forward_is_compiled_and_bitwise(records, case, train, backend, api):
    factory, make_input, function = CASES[case]
    module = factory().train(train)
    compiled = wrap(api, backend, module)
    assert_bitwise(run_both(module, make_input, compiled, train))
    assert compiled_graphs(records, function) == 1, [(r["function"], r["status"]) for r in records]
    # A second call hits the cache: nothing more is compiled.
    n = len(records)
    torch.manual_seed(1234)
    compiled(make_input())
    assert len(records) == n


@pytest.mark.parametrize("case", sorted(CASES))
def test_explain_agrees_with_the_run(records, case):
    factory, make_input, function = CASES[case]
    module = factory().eval()
    x = make_input()
    report = dynamo.explain(module)(x)
    records.clear()
    dynamo.optimize("eager")(module)(x)
    assert report.graph_count == sum(len(r["graphs"]) for r in records) == 1
    assert report.graph_break_count == 0
    assert compiled_graphs(records, function) == 1


def test_eval_dropout_under_no_grad_is_compiled(records):
    """Eval mode with dropout > 0 and no grad (torch's inference fast-path conditions)."""
    module = encoder_layer(0.3).eval()
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        expected = module(x)
        got = dynamo.optimize("aot_eager")(module)(x)
    assert torch.equal(expected, got)
    assert compiled_graphs(records, "TransformerEncoderLayer.forward") == 1
    # The fast path eager takes (torch 2.x's checks walk self.modules(), a `yield from`
    # generator) is the one captured: its fused kernel is the graph's.
    ops = [r["graphs"][0]["op_counts"] for r in records if r["status"] == "compiled"]
    assert ops[0].get("torch._transformer_encoder_layer_fwd") == 1, ops


@pytest.mark.parametrize("layers", [1, 2])
def test_encoder_fast_path_under_no_grad_equals_eager(records, layers):
    """TransformerEncoder in eval under no_grad: eager runs torch._transformer_encoder_layer_fwd
    per layer after its checks (torch 2.x: `yield from` in Module.modules()); so does the graph."""
    module = nn.TransformerEncoder(encoder_layer(0.1), layers).eval()
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        expected = module(x)
        got = dynamo.compile(module, fullgraph=True)(x)
    assert torch.equal(expected, got)
    ops = [r["graphs"][0]["op_counts"] for r in records if r["status"] == "compiled"]
    assert len(ops) == 1 and ops[0].get("torch._transformer_encoder_layer_fwd") == layers, ops


def printing_relu(x):
    print("activation")
    return F.relu(x)


@pytest.mark.parametrize("api", ["optimize", "compile"])
def test_graph_break_in_torch_forward_resumes_compiled(records, api, capsys):
    """A break inside a torch-defined forward: the resume function that continues it (also in
    torch's file) is compiled too, not left to run the rest of the forward eagerly."""
    torch.manual_seed(0)
    module = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True,
                                        activation=printing_relu).eval()
    x = torch.randn(2, 5, 16)
    expected = module(x)
    got = wrap(api, "eager", module)(x)
    assert torch.equal(expected, got)
    assert capsys.readouterr().out == "activation\nactivation\n"
    names = [r["function"] for r in records if r["status"] == "compiled"]
    assert "TransformerEncoderLayer.forward" in names
    assert "<resume in TransformerEncoderLayer.forward>" in names


def test_torch_modules_called_from_user_code_are_inlined(records):
    """Only the module handed to optimize is forced: a torch module that the user's function
    calls is traced into the user's graph, with no frame compile of its own."""
    seq = sequential()

    def f(x):
        return seq(x) * 2

    x = torch.randn(3, 8)
    assert torch.equal(dynamo.optimize("eager")(f)(x), seq(x) * 2)
    assert [r["function"] for r in records] == ["test_torch_modules_called_from_user_code_are_inlined.<locals>.f"]
    assert records[0]["graphs"][0]["op_counts"]["torch.nn.functional.linear"] == 3


def test_with_block_still_skips_torch_frames(records):
    """The with-block form names no module, so torch's frames keep the skip list."""
    seq = sequential()
    x = torch.randn(3, 8)
    with dynamo.optimize("eager"):
        out = seq(x)
    assert torch.equal(out, seq(x))
    assert compiled_graphs(records, "Sequential.forward") == 0


def test_user_module_shares_the_context_handle(records):
    """A module defined outside torch needs no forcing: optimize(...)(module) keeps the
    context's compiler, so the with-block form reuses the entry the wrapped call compiled."""
    model = ModuleListModel()
    x = torch.randn(4, 16)
    ctx = dynamo.optimize("eager")
    ctx(model)(x)
    with ctx:
        model(x)
    assert [r["function"] for r in records] == ["ModuleListModel.forward"]


RNN_CASES = [pytest.param(cls, backend, id=f"{cls.__name__}-{backend}",
                          marks=[only_on_stack2("torch 1.13's aot_eager GRU forward is not bitwise eager's "
                                                "(not a weakref matter: the capture is the same)")]
                          if (cls, backend) == (nn.GRU, "aot_eager") else [])
             for cls in (nn.LSTM, nn.GRU, nn.RNN) for backend in ("eager", "aot_eager")]


@pytest.mark.parametrize("cls, backend", RNN_CASES)
def test_rnn_captured_whole_and_bitwise(records, cls, backend):
    """torch 2.x's RNNBase.forward checks its flat weights' weakrefs (`ref() is not weight`): the
    call gives the parameter the forward read, guarded; forward and gradients equal eager."""
    torch.manual_seed(0)
    rnn = cls(4, 8, num_layers=2, batch_first=True)
    head = nn.Linear(8, 3)

    def f(x):
        out, _ = rnn(x)
        return head(out[:, -1])

    compiled = dynamo.compile(f, fullgraph=True, backend=backend)
    results = []
    for fn in (f, compiled):
        torch.manual_seed(1)
        x = torch.randn(3, 5, 4)
        rnn.zero_grad(set_to_none=True)
        out = fn(x)
        out.sum().backward()
        results.append((out.detach(), tuple(p.grad.clone() for p in rnn.parameters())))
    assert_bitwise(results)
    assert len([r for r in records if r["status"] == "compiled"]) == 1
    # A parameter replaced (RNNBase.__setattr__ keeps the old weakref): the guards fail, and the
    # forward, which sees the change and refreshes its flat weights, runs as eager's does.
    old = rnn.weight_hh_l1
    with torch.no_grad():
        rnn.weight_hh_l1 = nn.Parameter(old * 0.5)
    x = torch.randn(3, 5, 4)
    got = dynamo.compile(f, backend=backend)(x)
    if hasattr(rnn, "_flat_weight_refs"):  # torch 2.x: the compiled call refreshed them, as eager does
        assert rnn._flat_weight_refs[rnn._flat_weights_names.index("weight_hh_l1")]() is rnn.weight_hh_l1
    assert torch.equal(got, f(x))
    assert len(records) > 1
