"""The fused backend with dynamic sizes (docs/dynamic-shapes.md, "The fused backend"): one dynamic
entry lowers its graph again per input signature, and kernels whose text is the same for two sizes
take the integers that differ as a parameter array, so the C++ compiler runs for the first
structures only, not per size. Results within the code generator's tolerance of eager.

Compiles of the C++ compiler are counted with _C._codegen.counters(): units_loaded is the number of
kernel libraries this process used for the first time (a new source text), whether the compiler
built it now or an earlier run left it in the disk cache."""
import pytest
import torch

import dynamo
from dynamo import _C

from compile_fixtures import compiled, fresh_dynamo, records  # noqa: F401  (fixtures)


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def units():
    return _C._codegen.counters()["units_loaded"]


def close(got, want, rtol=1e-5, atol=1e-5):
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol * max(want.abs().max().item(), 1.0))


BATCHES = [8, 16, 1, 5, 64, 33, 2, 17, 31, 9, 40, 12, 3, 50, 27, 64, 7, 60, 11, 24]


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_twenty_batch_sizes_compile_the_kernels_for_the_first_structures_only(records, model):
    torch.manual_seed(0)
    if model == "mlp":
        m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).eval()
        shape = (16,)
    else:
        m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.Tanh(),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 5)).eval()
        shape = (3, 12, 12)
    f = dynamo.compile(m, backend="fused")
    loaded = []
    with torch.no_grad():
        for b in BATCHES:
            x = torch.randn(b, *shape)
            before = units()
            got = f(x)
            loaded.append(units() - before)
            close(got, m(x))
    assert len(compiled(records)) == 3  # static 8, the dynamic entry (16), size 1 specialised
    assert all(r["status"] != "cache-limit" for r in records)
    assert "backend 'fused' specialises its graph on the input sizes" in compiled(records)[1]["dynamic_shapes"]
    # New kernel text for batch 8 (static), 16 (the dynamic entry: parametrised) and 1 (static);
    # none for the 17 other sizes.
    assert loaded[0] > 0 and loaded[1] > 0
    assert sum(loaded[3:]) == 0, loaded


def test_a_transformer_layer_fed_thirty_lengths_compiles_twice_and_no_kernel_per_length(records):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0).eval()
    f = dynamo.compile(layer, backend="fused")
    loaded = []
    with torch.no_grad():
        for t in range(2, 32):
            x = torch.randn(t, 3, 32)
            before = units()
            got = f(x)
            loaded.append(units() - before)
            close(got, layer(x))
    assert len(compiled(records)) == 2
    assert "src.size()[0] is dynamic (s0)" in compiled(records)[1]["dynamic_shapes"]
    assert sum(loaded[2:]) == 0, loaded  # lengths 4..31 reuse length 3's kernels


def test_resnet18_with_a_dynamic_batch_compiles_once():
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    m = torchvision.models.resnet18().eval()
    f = dynamo.compile(m, backend="fused")
    records = []
    dynamo.add_compile_listener(records.append)
    try:
        with torch.no_grad():
            loaded = []
            for i, b in enumerate([2, 3, 5]):
                x = torch.randn(b, 3, 64, 64)
                if i == 0:
                    dynamo.mark_dynamic(x, 0)
                before = units()
                got = f(x)
                loaded.append(units() - before)
                want = m(x)
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())
    finally:
        dynamo.remove_compile_listener(records.append)
    assert len(compiled(records)) == 1
    assert loaded[1] == loaded[2] == 0, loaded  # batches 3 and 5 run batch 2's parametrised kernels


def _train_model(kind):
    torch.manual_seed(0)
    if kind == "mlp":
        return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    # batch_norm in training mode: its kernels divide by N = batch * 10 * 10 (a float constant
    # that is a parameter too)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                               torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 5))


@pytest.mark.parametrize("kind", ["mlp", "cnn_batch_norm"])
def test_training_goes_through_the_per_size_aot_path_and_shares_kernels(records, kind):
    m, ref = _train_model(kind), _train_model(kind)
    f = dynamo.compile(m, backend="fused")
    loaded = []
    for b in [8, 16, 5, 64, 33, 2, 17]:
        x = torch.randn(b, 16) if kind == "mlp" else torch.randn(b, 3, 10, 10)
        before = units()
        y = f(x)
        y.square().sum().backward()
        loaded.append(units() - before)
        want = ref(x)
        want.square().sum().backward()
        close(y.detach(), want.detach())
        for p, q in zip(m.parameters(), ref.parameters()):
            close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
            p.grad = q.grad = None
    assert len(compiled(records)) == 2  # static 8, then one dynamic entry
    if kind == "mlp":
        assert sum(loaded[2:]) == 0, loaded  # forward and backward kernels of batch 16 serve the rest
    else:
        # Batch 64: batch_norm's sums run over 6400 > 4096 elements and accumulate in double,
        # another kernel text (another structure), compiled once; the other sizes reuse batch 16's.
        assert loaded[2] == 0 and loaded[3] <= 1 and sum(loaded[4:]) == 0, loaded


def test_a_graph_whose_ops_fail_on_meta_tensors_runs_new_sizes_on_the_eager_runner(records, capfd, monkeypatch):
    # aten::_logcumsumexp has no meta kernel in torch 1.13 (the tracer does not probe it: its
    # argument has no dynamic size). The dynamic entry's first size is compiled from the captured
    # graph; a later size cannot be lowered, runs on the eager runner (exact) and says why.
    try:
        torch.empty(2, device="meta").logcumsumexp(0)
        pytest.skip("this torch has a meta kernel for logcumsumexp")
    except NotImplementedError:
        pass
    monkeypatch.setenv("DYNAMO_LOGS", "fusion")

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(8), requires_grad=False)

        def forward(self, x):
            return torch.relu(x) * self.w.logcumsumexp(0)

    m = M()
    cf = dynamo.compile(m, backend="fused", dynamic=True)
    with torch.no_grad():
        for b in [4, 6, 9]:
            x = torch.randn(b, 8)
            got = cf(x)
            if b > 4:
                assert torch.equal(got, m(x)), b  # the eager runner
            close(got, m(x))
    assert len(compiled(records)) == 1
    err = capfd.readouterr().err
    assert "new sizes run on the eager runner: node 'logcumsumexp' did not run on meta tensors: Could not run " \
           "'aten::_logcumsumexp' with arguments from the 'Meta' backend" in err, err


def test_sizes_dropped_from_the_entry_come_back_without_a_compile_and_strides_are_checked(records):
    # 20 sizes through one entry keep the 16 most recently used; the first ones, dropped, are
    # lowered again on their return (no kernel compiled). A tensor of the last call's shape but
    # other strides is not taken by the last size's kernels.
    def f(x):
        return (x * 3 - 1).tanh() + x.sum(-1, keepdim=True)

    cf = dynamo.compile(f, backend="fused", dynamic=True)
    with torch.no_grad():
        for b in range(2, 22):
            x = torch.randn(b, 8)
            close(cf(x), f(x))
        before = units()
        for b in range(2, 6):
            x = torch.randn(b, 8)
            close(cf(x), f(x))
        assert units() == before
        x = torch.randn(8, 5)
        close(cf(x.t()), f(x.t()))  # (5, 8) with strides (1, 5) right after (5, 8) contiguous
    assert all(r["status"] != "cache-limit" for r in records)


def test_explain_lists_the_lowerings_per_input_signature():
    from report_cli_util import run
    r = run("dynamo-explain", "fused_per_size.py")
    assert r.returncode == 0, r.stderr
    assert "done" in r.stdout + r.stderr
    assert "       fused lowering per input signature: 3 compiles (x: [6, 3]; x: [8, 3]; x: [10, 3]), " in r.stdout, r.stdout
    assert "backend 'fused' specialises its graph on the input sizes" in r.stdout


@pytest.mark.parametrize("how", ["dynamic=True", "mark_dynamic"])
def test_a_dynamic_first_compile_has_parametrised_kernels_so_the_second_size_compiles_none(records, how):
    # No static compile first: the per-size backend lowers the graph once at probe sizes (each
    # dynamic dimension one larger) before compiling the first size, so the integers that move
    # with the batch are parameters already, and sizes 2..N load no new kernel.
    torch.manual_seed(0)
    n = 12
    last = torch.nn.Tanh() if how == "mark_dynamic" else torch.nn.Sigmoid()  # the cases share no kernel text
    m = torch.nn.Sequential(torch.nn.Linear(n, 24), torch.nn.GELU(), torch.nn.Linear(24, 6), last).eval()
    f = dynamo.compile(m, backend="fused", dynamic=True if how == "dynamic=True" else None)
    loaded = []
    with torch.no_grad():
        for i, b in enumerate([5, 11, 3, 29, 7]):
            x = torch.randn(b, n)
            if i == 0 and how == "mark_dynamic":
                dynamo.mark_dynamic(x, 0)
            before = units()
            got = f(x)
            loaded.append(units() - before)
            close(got, m(x))
    assert len(compiled(records)) == 1
    assert loaded[0] > 0 and sum(loaded[1:]) == 0, loaded



def _probe_train_model(kind, how):
    # Kernels no other case compiles: the same parametrised source is one library for the process.
    torch.manual_seed(0)
    if kind == "mlp":
        act = torch.nn.Tanh() if how == "mark_dynamic" else torch.nn.Sigmoid()
        return torch.nn.Sequential(torch.nn.Linear(12, 20), act, torch.nn.Linear(20, 3))
    if kind == "cnn":
        return torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3, padding=1), torch.nn.BatchNorm2d(6), torch.nn.ReLU(),
                                   torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(6, 3))
    return torch.nn.TransformerEncoderLayer(d_model=12, nhead=2, dim_feedforward=20, dropout=0.0, batch_first=True)


@pytest.mark.parametrize("kind,how", [("mlp", "mark_dynamic"), ("mlp", "dynamic=True"), ("cnn", "mark_dynamic"),
                                      ("transformer", "mark_dynamic")])
def test_a_dynamic_training_first_compile_has_parametrised_forward_and_backward_kernels(records, kind, how):
    # The AOT layer's forward and backward graphs are traced, partitioned and lowered once at probe
    # sizes (the dynamic dimension one larger) before the first size is compiled: sizes 2..N of a
    # training step run no C++ compiler (before: the first two sizes each compiled kernels).
    m, ref = _probe_train_model(kind, how), _probe_train_model(kind, how)
    # One compiled function per case, each at its own line: kernel families are kept per function
    # and line for the process, so a case (or another test) compiling the same kernel texts
    # through nn.Sequential.forward would have parametrised them already.
    step = {("mlp", "mark_dynamic"): lambda x: m(x),
            ("mlp", "dynamic=True"): lambda x: m(x),
            ("cnn", "mark_dynamic"): lambda x: m(x),
            ("transformer", "mark_dynamic"): lambda x: m(x)}[(kind, how)]
    f = dynamo.compile(step, backend="fused", dynamic=True if how == "dynamic=True" else None)
    runs = []
    for i, n in enumerate([5, 11, 3, 9, 7]):
        if kind == "mlp":
            x = torch.randn(n, 12)
        elif kind == "cnn":
            x = torch.randn(n, 3, 8, 8)  # batch_norm's sums stay under 4096 elements (one structure)
        else:
            x = torch.randn(2, n, 12)  # the sequence length varies
        if i == 0 and how == "mark_dynamic":
            dynamo.mark_dynamic(x, 1 if kind == "transformer" else 0)
        before = units()
        y = f(x)
        loss = y.square().mean()
        loss.backward()
        runs.append(units() - before)
        want = ref(x).square().mean()
        want.backward()
        close(loss.detach(), want.detach(), rtol=1e-5)
        for p, q in zip(m.parameters(), ref.parameters()):
            close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
            p.grad = q.grad = None
    assert len(compiled(records)) == 1
    assert runs[0] > 0 and sum(runs[1:]) == 0, runs


def test_the_size_scope_of_aot_compiles_is_per_thread():
    # Thread A's forward compile is inside its scope while thread B enters its own: A still reads
    # its scope (a module-global one would read B's, and A's kernels would join B's families).
    import threading
    from dynamo import aot
    a_in, b_in, a_read = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def compiler_a(graph):
        a_in.set()
        assert b_in.wait(30)
        seen["a"] = aot._size_scope()
        a_read.set()

    def compiler_b(graph):
        b_in.set()
        assert a_read.wait(30)
        seen["b"] = aot._size_scope()

    ta = threading.Thread(target=aot._scoped(compiler_a, "f@a.py:1"), args=(None,))
    ta.start()
    assert a_in.wait(30)
    tb = threading.Thread(target=aot._scoped(compiler_b, "g@b.py:9"), args=(None,))
    tb.start()
    ta.join(30)
    tb.join(30)
    assert seen == {"a": "f@a.py:1", "b": "g@b.py:9"}
    assert aot._size_scope() == ""  # this thread never entered one
