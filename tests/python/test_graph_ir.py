"""Tests of the graph IR (core/src/graph) through dynamo._C._graph.

Covers: building graphs with every argument kind; the printer (golden files under
tests/python/golden/graph/, regenerated with DYNAMO_UPDATE_GOLDEN=1); target naming; the JSON
serializer and dynamo.graph_io.deserialize; the C++ reader (read_graph: byte-identical round trips of
every test graph and of a captured resnet18, resolve() to run them again); target kinds and ATen
schemas; the users map; tensor strides and memory format; to_fx; the C++ runner (same results as FX and as
eager, bitwise; intermediates freed after their last use; errors naming the node and the user
line; input refcounts unchanged); unique naming; immutability; error messages.

Run the optional timing report with DYNAMO_BENCH=1 (it prints, it asserts nothing).
"""
import gc
import json
import math
import operator
import os
import pathlib
import struct
import sys
import timeit
import weakref

import pytest
import torch
import torch.nn.functional as F

import dynamo
from dynamo import fx_bridge, graph_io
from dynamo._C import _graph as G

GOLDEN_DIR = pathlib.Path(__file__).parent / "golden" / "graph"
UPDATE_GOLDEN = os.environ.get("DYNAMO_UPDATE_GOLDEN") == "1"


# ---- helpers -----------------------------------------------------------------------------------

def check_golden(name, text):
    path = GOLDEN_DIR / name
    if UPDATE_GOLDEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    assert path.exists(), f"missing golden file {path}; create it with DYNAMO_UPDATE_GOLDEN=1"
    expected = path.read_text()
    assert text == expected, (
        f"{path} differs from the output. Check the change makes sense, then regenerate it "
        f"with DYNAMO_UPDATE_GOLDEN=1.\n--- expected\n{expected}\n--- actual\n{text}")


def same(a, b):
    """Bitwise equality of nested outputs (tensors with torch.equal and equal dtypes)."""
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
                and torch.equal(a, b))
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict):
        return type(b) is dict and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return a == b


def clone_all(inputs):
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


# ---- graphs used by several tests ---------------------------------------------------------------
# Each case: build(b) records the graph into builder b; eager(*inputs) is the same computation run
# directly; inputs() makes fresh inputs.

def pointwise_build(b):
    x = b.placeholder("x", tensor_meta=((4, 5), torch.float32, "cpu", False),
                      location=("model.py", 3, "def forward(x, y):"))
    y = b.placeholder("y")
    a = b.call_function(torch.add, (x, y), location=("model.py", 4, "a = x + y"))
    m = b.call_function(torch.mul, (a, 2.5), location=("model.py", 5, "m = a * 2.5"))
    r = b.call_function(F.relu, (m,), location=("model.py", 6, "r = F.relu(m)"))
    s = b.call_function(torch.sigmoid, (r,))
    t = b.call_method("tanh", (s,))
    u = b.call_function(torch.sub, (t, x), {"alpha": 0.5})
    b.output(u)


def pointwise_eager(x, y):
    m = torch.mul(torch.add(x, y), 2.5)
    return torch.sub(torch.sigmoid(F.relu(m)).tanh(), x, alpha=0.5)


def pointwise_inputs():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(4, 5, generator=g), torch.randn(4, 5, generator=g)]


def conv_bn_relu_build(b):
    x = b.placeholder("x", tensor_meta=((2, 3, 8, 8), torch.float32, "cpu", False))
    w = b.placeholder("self.conv.weight", tensor_meta=((4, 3, 3, 3), torch.float32, "cpu", True))
    cb = b.placeholder("self.conv.bias")
    mean = b.placeholder("self.bn.running_mean")
    var = b.placeholder("self.bn.running_var")
    bw = b.placeholder("self.bn.weight")
    bb = b.placeholder("self.bn.bias")
    c = b.call_function(F.conv2d, (x, w, cb), {"stride": 1, "padding": (1, 1)},
                        location=("model.py", 12, "x = self.conv(x)"))
    n = b.call_function(F.batch_norm, (c, mean, var),
                        {"weight": bw, "bias": bb, "training": False, "momentum": 0.1,
                         "eps": 1e-05},
                        location=("model.py", 13, "x = self.bn(x)"))
    r = b.call_function(F.relu, (n,), {"inplace": False},
                        location=("model.py", 14, "return F.relu(x)"))
    b.output(r)


def conv_bn_relu_eager(x, w, cb, mean, var, bw, bb):
    c = F.conv2d(x, w, cb, stride=1, padding=(1, 1))
    n = F.batch_norm(c, mean, var, weight=bw, bias=bb, training=False, momentum=0.1, eps=1e-05)
    return F.relu(n, inplace=False)


def conv_bn_relu_inputs():
    torch.manual_seed(1)
    conv = torch.nn.Conv2d(3, 4, 3, padding=1)
    bn = torch.nn.BatchNorm2d(4).eval()
    bn.running_mean.uniform_()
    bn.running_var.uniform_(0.5, 2.0)
    with torch.no_grad():
        return [torch.randn(2, 3, 8, 8), conv.weight.detach().clone(),
                conv.bias.detach().clone(), bn.running_mean.clone(), bn.running_var.clone(),
                bn.weight.detach().clone(), bn.bias.detach().clone()]


def views_build(b):
    x = b.placeholder("x")
    v = b.call_method("view", (x, 6, -1))
    r = b.call_function(torch.reshape, (v, (3, 2, -1)))
    g0 = b.call_function(operator.getitem, (r, 1))
    g1 = b.call_function(operator.getitem, (r, (slice(None, None, None), slice(0, 2, None),
                                                Ellipsis)))
    g2 = b.call_function(operator.getitem, (x, (None, slice(1, None, 2))))
    p = b.call_method("permute", (r, 2, 0, 1))
    c = b.call_method("contiguous", (p,), {"memory_format": torch.contiguous_format})
    f = b.call_function(torch.flatten, (c,), {"start_dim": 1})
    cat = b.call_function(torch.cat, ([g0, g0],), {"dim": 0})
    b.output([g0, g1, g2, f, cat])


def views_eager(x):
    r = torch.reshape(x.view(6, -1), (3, 2, -1))
    g0 = r[1]
    return [g0, r[:, 0:2, ...], x[None, 1::2],
            torch.flatten(r.permute(2, 0, 1).contiguous(memory_format=torch.contiguous_format),
                          start_dim=1),
            torch.cat([g0, g0], dim=0)]


def views_inputs():
    return [torch.arange(24, dtype=torch.float32).reshape(4, 6)]


def inplace_build(b):
    x = b.placeholder("x")
    y = b.placeholder("y")
    c = b.call_method("clone", (x,))
    b.call_function(torch.Tensor.add_, (c, y), {"alpha": 3})
    b.call_method("mul_", (c, 2))
    r = b.call_function(torch.relu_, (c,))
    b.call_method("clamp_", (y,), {"min": -0.5, "max": 0.5})
    b.output((c, r, y))


def inplace_eager(x, y):
    c = x.clone()
    torch.Tensor.add_(c, y, alpha=3)
    c.mul_(2)
    r = torch.relu_(c)
    y.clamp_(min=-0.5, max=0.5)
    return (c, r, y)


def dtype_build(b):
    x = b.placeholder("x")
    d = b.call_method("to", (x, torch.float64))
    z = b.call_function(torch.zeros, ((2, 3),), {"dtype": torch.float16,
                                                   "device": torch.device("cpu"),
                                                   "layout": torch.strided})
    f = b.call_function(torch.full, ((2, 3), 7), {"dtype": torch.int64})
    s = b.call_function(torch.sum, (d,), {"dim": (0,), "keepdim": True, "dtype": torch.float32})
    e = b.call_function(torch.empty_like, (x,), {"memory_format": torch.preserve_format})
    sh = b.call_function(operator.getitem, (e, slice(None, 1, None)))
    k = b.call_method("new_ones", (x, (2,)), {"dtype": torch.bool})
    b.output({"d": d, "z": z, "f": f, "s": s, "shape": b.call_method("size", (sh,)), "k": k})


def dtype_eager(x):
    d = x.to(torch.float64)
    return {"d": d, "z": torch.zeros((2, 3), dtype=torch.float16, device=torch.device("cpu"),
                                     layout=torch.strided),
            "f": torch.full((2, 3), 7, dtype=torch.int64),
            "s": torch.sum(d, dim=(0,), keepdim=True, dtype=torch.float32),
            "shape": torch.empty_like(x, memory_format=torch.preserve_format)[:1].size(),
            "k": x.new_ones((2,), dtype=torch.bool)}


def dtype_inputs():
    return [torch.linspace(-1, 1, 12).reshape(3, 4)]


CASES = {
    "pointwise": (pointwise_build, pointwise_eager, pointwise_inputs),
    "conv_bn_relu": (conv_bn_relu_build, conv_bn_relu_eager, conv_bn_relu_inputs),
    "views": (views_build, views_eager, views_inputs),
    "inplace": (inplace_build, inplace_eager, lambda: pointwise_inputs()[:1] * 2),
    "dtypes": (dtype_build, dtype_eager, dtype_inputs),
}


def build(case):
    b = G.GraphBuilder()
    CASES[case][0](b)
    return b.build()


# ---- building, every argument kind ---------------------------------------------------------------

def test_every_argument_kind_round_trips_through_node_args():
    b = G.GraphBuilder()
    x = b.placeholder("x")
    values = (None, True, False, 0, -(2 ** 63), 2 ** 63 - 1, 1.5, -0.0, float("inf"), "s'q\"\n",
              torch.float32, torch.bfloat16, torch.device("cpu"), torch.device("cuda", 1),
              torch.channels_last, torch.strided, Ellipsis, slice(None, x, 2), (x, (1, [2, x])),
              [], (), {"a": x, "b": [None]})
    n = b.call_function(print, (x,) + values, {"kw": x, "d": torch.int8})
    assert n.args == (x,) + values
    assert n.kwargs == {"kw": x, "d": torch.int8}
    assert n.args[0] is not x and n.args[0] == x  # a new view of the same node
    assert {x: 1}[n.args[0]] == 1
    b.output(n)
    text = str(b.build())
    assert ("%print_1 = builtins.print(%x, None, True, False, 0, -9223372036854775808, "
            "9223372036854775807, 1.5, -0.0, inf, 's\\'q\"\\n', torch.float32, torch.bfloat16, "
            "device('cpu'), device('cuda:1'), torch.channels_last, torch.strided, ..., "
            "slice(None, %x, 2), (%x, (1, [2, %x])), [], (), {'a': %x, 'b': [None]}, kw=%x, "
            "d=torch.int8)") in text


@pytest.mark.parametrize("value", [0.1, 1e-05, 1e-4, 1e16, 1e15, 1e10, 123456789.0, 2.5e-300,
                                   5e-324, 1.7976931348623157e308, -3.0, 1 / 3, 0.0])
def test_floats_print_as_python_repr_and_serialize_bitwise(value):
    b = G.GraphBuilder()
    x = b.placeholder("x")
    b.output(b.call_function(torch.mul, (x, value)))
    g = b.build()
    assert f"torch.mul(%x, {value!r})" in str(g)
    gm = graph_io.deserialize(g.serialize())
    mul = [n for n in gm.graph.nodes if n.op == "call_function"][0]
    assert struct.pack("<d", mul.args[1]) == struct.pack("<d", value)


def test_bad_argument_is_a_user_error_with_a_hint():
    b = G.GraphBuilder()
    with pytest.raises(dynamo.UserError) as e:
        b.call_function(torch.add, (object(), 1))
    assert str(e.value) == (
        "error: cannot use a 'object' object as a graph argument\n"
        "  = why: graph arguments are nodes, None, bool, int, float, str, torch dtypes, devices, "
        "memory formats and layouts, Ellipsis, slices, and tuples, lists and str-keyed dicts of "
        "these\n"
        "  = hint: record the value as a node, or pass it as a graph input")
    with pytest.raises(dynamo.UserError, match="does not fit in 64 bits"):
        b.call_function(torch.add, (2 ** 64,))
    with pytest.raises(dynamo.UserError, match="must be callable, not 'int'"):
        b.call_function(3)


def test_node_from_another_builder_is_rejected():
    other = G.GraphBuilder().placeholder("x")
    b = G.GraphBuilder()
    with pytest.raises(dynamo.UserError) as e:
        b.call_function(torch.neg, ([other],))
    assert str(e.value) == "error: node 'x' does not belong to this graph builder"


def test_build_without_output_and_second_output_are_user_errors():
    b = G.GraphBuilder()
    x = b.placeholder("x")
    with pytest.raises(dynamo.UserError) as e:
        b.build()
    assert str(e.value) == "error: the graph has no output: call output() before build()"
    b.output(x)
    with pytest.raises(dynamo.UserError, match="cannot add a second output after the graph's "
                                               "output was set"):
        b.output(x)
    with pytest.raises(dynamo.UserError, match="cannot add a call_function node after"):
        b.call_function(torch.neg, (x,))


def test_node_views_expose_metadata():
    b = G.GraphBuilder()
    x = b.placeholder("self.layer.weight", tensor_meta=torch.ones(2, 3, requires_grad=True))
    y = b.call_function(torch.neg, (x,), location=("m.py", 7, "return -w"),
                        user_stack=[("main.py", 1, "run()"), ("m.py", 7, "return -w")],
                        stack_trace='File "m.py", line 7')
    b.output(y)
    assert (x.name, x.op, x.source, x.target) == ("self_layer_weight", "placeholder",
                                                  "self.layer.weight", None)
    assert x.tensor_meta == ((2, 3), "torch.float32", "cpu", True)
    assert (y.op, y.target, y.target_name) == ("call_function", torch.neg, "torch.neg")
    assert y.location == ("m.py", 7, "return -w")
    assert y.stack_trace == 'File "m.py", line 7'
    assert y.tensor_meta is None and x.location is None
    gm = b.build().to_fx()
    neg = [n for n in gm.graph.nodes if n.name == "neg"][0]
    assert neg.meta["stack_trace"] == 'File "m.py", line 7'
    assert neg.meta["dynamo_location"] == ("m.py", 7, "return -w")
    assert neg.meta["dynamo_user_stack"] == [("main.py", 1, "run()"), ("m.py", 7, "return -w")]
    ph = [n for n in gm.graph.nodes if n.op == "placeholder"][0]
    assert ph.meta["dynamo_source"] == "self.layer.weight"
    assert ph.meta["dynamo_tensor_meta"] == ((2, 3), "torch.float32", "cpu", True)


# ---- target naming ------------------------------------------------------------------------------

@pytest.mark.parametrize("target,name", [
    (torch.add, "torch.add"),
    (torch.conv2d, "torch.conv2d"),
    (F.relu, "torch.nn.functional.relu"),
    (F.gelu, "torch.nn.functional.gelu"),
    (operator.getitem, "operator.getitem"),
    (torch.Tensor.add_, "torch.Tensor.add_"),
    (torch.Tensor.__floordiv__, "torch.Tensor.__floordiv__"),
    (torch.ops.aten.add.Tensor, "torch.ops.aten.add.Tensor"),
    (torch.linalg.norm, "torch.linalg.norm"),
    (math.sqrt, "math.sqrt"),
    (len, "builtins.len"),
])
def test_targets_are_named_so_they_resolve_back(target, name):
    b = G.GraphBuilder()
    n = b.call_function(target, ())
    assert n.target_name == name
    assert graph_io.resolve_target(name) is target
    b.output(n)
    node = json.loads(b.build().serialize())["nodes"][0]
    assert node["target"] == name and "resolvable" not in node


def test_unresolvable_target_is_marked_and_deserialize_says_why():
    local = lambda t: t + 1  # noqa: E731
    b = G.GraphBuilder()
    x = b.placeholder("x")
    b.output(b.call_function(local, (x,)))
    g = b.build()
    node = json.loads(g.serialize())["nodes"][1]
    assert node["resolvable"] is False
    assert node["target"].endswith("<locals>.<lambda>")
    assert node["name"] == "_lambda_"
    with pytest.raises(graph_io.GraphFormatError, match="cannot resolve call target"):
        graph_io.deserialize(g.serialize())
    # The runner and to_fx hold the object itself and do not need the name.
    t = torch.ones(2)
    assert torch.equal(g.runner()(t), t + 1)
    assert torch.equal(g.to_fx()(t), t + 1)


# ---- printer golden tests -------------------------------------------------------------------------

@pytest.mark.parametrize("case", sorted(CASES))
def test_printer_golden(case):
    check_golden(f"{case}.txt", str(build(case)))


def test_printer_options_drop_locations_and_meta():
    g = build("pointwise")
    text = g.format(show_locations=False, show_tensor_meta=False)
    assert "#" not in text and "f32" not in text
    assert text.splitlines()[1] == "  %x = placeholder[source=x]"


def test_serializer_golden():
    check_golden("conv_bn_relu.json", build("conv_bn_relu").serialize(pretty=True))


def test_serialize_compact_and_pretty_are_the_same_json():
    g = build("dtypes")
    assert json.loads(g.serialize()) == json.loads(g.serialize(pretty=True))
    assert "\n" not in g.serialize()


# ---- the C++ reader: JSON -> Graph -> JSON, resolve, users, layouts -------------------------------

@pytest.mark.parametrize("case", sorted(CASES))
def test_cpp_reader_round_trips_byte_for_byte_and_runs_after_resolve(case):
    _, eager, make_inputs = CASES[case]
    g = build(case)
    for pretty in (False, True):
        text = g.serialize(pretty=pretty)
        back = G.read_graph(text)
        assert back.serialize(pretty=pretty) == text
        assert G.read_graph(back.serialize(pretty=pretty)).serialize(pretty=pretty) == text
        assert str(back) == str(g) and back == g and not back != g
    back = G.read_graph(g.serialize())
    calls = [n for n in back.nodes if n.op == "call_function"]
    assert calls and all(n.target is None for n in calls)  # known by name only
    assert [n.target_name for n in back.nodes] == [n.target_name for n in g.nodes]
    with pytest.raises(dynamo.UserError, match="known by name only"):
        back.runner()
    resolved = back.resolve()
    assert resolved == g and str(resolved) == str(g)
    assert [n.target for n in resolved.nodes] == [n.target for n in g.nodes]
    assert same(resolved.runner()(*make_inputs()), eager(*make_inputs()))
    assert same(resolved.to_fx()(*make_inputs()), eager(*make_inputs()))


def test_cpp_reader_refuses_bad_text_with_a_user_error():
    with pytest.raises(dynamo.UserError, match="not valid JSON"):
        G.read_graph("{")
    doc = json.loads(build("pointwise").serialize())
    doc["nodes"][2]["args"][0] = {"node": "nope"}
    with pytest.raises(dynamo.UserError, match="node 2 'add': uses node 'nope', which is not "
                                               "defined before it"):
        G.read_graph(json.dumps(doc))


def test_resolve_names_the_node_of_an_unresolvable_target():
    b = G.GraphBuilder()
    x = b.placeholder("x")
    b.output(b.call_function(lambda t: t, (x,)))
    back = G.read_graph(b.build().serialize())
    with pytest.raises(dynamo.UserError, match="cannot resolve call target '.*<lambda>' of node "
                                               "'_lambda_'.*not resolvable when the graph was"):
        back.resolve()


def test_target_kinds_and_aten_schemas():
    b = G.GraphBuilder()
    x = b.placeholder("x")
    a = b.call_function(torch.ops.aten.add.Tensor, (x, x))
    r = b.call_function(torch.ops.aten.relu.default, (a,))
    m = b.call_function(torch.Tensor.mul, (r, 2))
    f = b.call_function(torch.add, (m, 1))
    v = b.call_method("view", (f, -1))
    b.output(v)
    g = b.build()
    assert [(n.target_kind, n.schema) for n in (a, r, m, f, v)] == [
        ("aten", "aten::add.Tensor"), ("aten", "aten::relu"), ("method", None),
        ("function", None), (None, None)]
    nodes = json.loads(g.serialize())["nodes"]
    assert nodes[1]["schema"] == "aten::add.Tensor" and "schema" not in nodes[3]
    t = torch.randn(3)
    assert torch.equal(G.read_graph(g.serialize()).resolve().runner()(t), g.runner()(t))
    assert graph_io.deserialize(g.serialize())(t).equal(g.runner()(t))  # Python reader too


def test_users_map():
    g = build("pointwise")
    users = {n.name: [u.name for u in g.users(n)] for n in g.nodes}
    assert users == {"x": ["add", "sub"], "y": ["add"], "add": ["mul"], "mul": ["relu"],
                     "relu": ["sigmoid"], "sigmoid": ["tanh"], "tanh": ["sub"], "sub": ["output"],
                     "output": []}
    v = build("views")
    assert [u.name for u in v.users(v.find("getitem"))] == ["cat", "output"]  # used 3 times


@pytest.mark.parametrize("make,strides,fmt", [
    (lambda: torch.empty(2, 3, 4, 5), (60, 20, 5, 1), "contiguous"),
    (lambda: torch.empty(2, 3, 4, 5).to(memory_format=torch.channels_last), (60, 1, 15, 3),
     "channels_last"),
    (lambda: torch.empty(3, 4).t(), (1, 4), "other"),
    (lambda: torch.empty(2, 1, 4, 4).to(memory_format=torch.channels_last), (16, 1, 4, 1),
     "contiguous"),  # PyTorch calls it contiguous too: size-1 dimension
    (lambda: torch.tensor(1.0), (), "contiguous"),
])
def test_tensor_meta_keeps_strides_and_memory_format(make, strides, fmt):
    t = make()
    b = G.GraphBuilder()
    x = b.placeholder("x", tensor_meta=t)
    b.output(x)
    g = b.build()
    assert x.tensor_meta == (tuple(t.shape), str(t.dtype), "cpu", False)
    assert x.tensor_layout == (strides, fmt)
    meta = json.loads(g.serialize())["nodes"][0]["meta"]["tensor"]
    assert (meta["strides"], meta["memory_format"]) == (list(strides), fmt)
    assert G.read_graph(g.serialize()).find("x").tensor_layout == (strides, fmt)
    assert graph_io.read(g.serialize()) == g
    for gm in (g.to_fx(), graph_io.deserialize(g.serialize())):
        ph = next(iter(gm.graph.nodes))
        assert ph.meta["dynamo_tensor_layout"] == (strides, fmt)
    assert build("pointwise").find("x").tensor_layout is None  # unknown: not written


def test_tensor_meta_of_a_meta_example_as_the_tracer_has_it():
    t = torch.empty(2, 3, 4, 5, device="meta").to(memory_format=torch.channels_last)
    b = G.GraphBuilder()
    x = b.placeholder("x", tensor_meta=t)
    assert x.tensor_meta == ((2, 3, 4, 5), "torch.float32", "meta", False)
    assert x.tensor_layout == ((60, 1, 15, 3), "channels_last")


def test_dropping_a_graph_releases_its_targets():
    def make_target():
        return lambda t: t + 1

    fn = make_target()
    ref = weakref.ref(fn)
    b = G.GraphBuilder()
    x = b.placeholder("x")
    b.output(b.call_function(fn, (x,)))
    g = b.build()
    runner = g.runner()
    copy = G.read_graph(g.serialize())  # name only: holds no reference
    del fn, b, x, g
    gc.collect()
    assert ref() is not None  # the runner's graph holds it
    del runner
    gc.collect()
    assert ref() is None and copy.nodes[1].target is None


def test_captured_resnet18_reads_back_and_runs_like_eager():
    torchvision = pytest.importorskip("torchvision")
    from capture_harness import Recorder
    dynamo.reset()
    torch.manual_seed(0)
    model = torchvision.models.resnet18().eval()
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad(), Recorder() as rec:
        expected = dynamo.compile(model, fullgraph=True)(x)
    (record,) = rec.graphs
    text = record["json"]
    g = G.read_graph(text)
    assert g.serialize() == text and str(g) == record["text"]
    assert G.read_graph(g.serialize(pretty=True)) == g
    resolved = g.resolve()
    inputs = [x if n.source == "x" else operator.attrgetter(n.source[len("self."):])(model)
              for n in resolved.inputs]
    with torch.no_grad():
        (got,) = resolved.runner()(*inputs)  # the graph returns its outputs as a tuple
    assert same(got, expected)


def test_dynamo_trace_graph_prints_stored_graphs_through_the_cpp_reader(tmp_path):
    from report_cli_util import run
    import subprocess
    import textwrap
    db = tmp_path / "trace.db"
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent("""
        import torch, dynamo
        def f(x, w):
            return torch.relu(x @ w).sum(dim=1) * 2
        print(dynamo.compile(f)(torch.randn(3, 4), torch.randn(4, 5)).shape)
    """))
    env = dict(os.environ, DYNAMO_TRACE=str(db))
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    from dynamo import _C
    with _C.TraceReader(str(db)) as store:
        (compile_row,) = [c for c in store.compiles(run_id=store.runs()[0]["id"])
                          if store.graphs(c["id"])]
        (stored,) = store.graphs(compile_row["id"])
    printed = run("dynamo-trace", "graph", db, compile_row["id"])
    assert printed.returncode == 0, printed.stderr
    header, body = printed.stdout.split("\n", 1)
    assert header.startswith(f"# compile {compile_row['id']}, graph 0: ")
    assert body == stored["printed"]
    as_json = run("dynamo-trace", "graph", db, compile_row["id"], "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert as_json.stdout == G.read_graph(stored["serialized"].decode()).serialize(pretty=True)
    missing = run("dynamo-trace", "graph", db, 999)
    assert missing.returncode == 1 and "has no graphs" in missing.stderr


# ---- op counts ---------------------------------------------------------------------------------

def test_op_counts_by_target_name():
    assert build("inplace").op_counts() == {
        "torch.Tensor.add_": 1, "torch.Tensor.clamp_": 1, "torch.Tensor.clone": 1,
        "torch.Tensor.mul_": 1, "torch.relu_": 1}
    assert build("views").op_counts()["operator.getitem"] == 3


# ---- serialize -> deserialize, runner, to_fx, eager: all the same ----------------------------------

@pytest.mark.parametrize("case", sorted(CASES))
def test_all_executions_agree_bitwise(case):
    _, eager, make_inputs = CASES[case]
    g = build(case)
    expected = eager(*make_inputs())
    runner = g.runner()
    assert same(runner(*make_inputs()), expected)
    assert same(g.to_fx()(*make_inputs()), expected)
    assert same(graph_io.deserialize(g.serialize())(*make_inputs()), expected)
    assert same(runner(*make_inputs()), expected)  # a second run gives the same


def test_in_place_ops_mutate_inputs_like_eager():
    _, eager, _ = CASES["inplace"]
    x, y = torch.randn(3, 3), torch.randn(3, 3) * 4
    y_eager = y.clone()
    c, r, y_out = build("inplace").runner()(x, y)
    eager(x, y_eager)
    assert y_out is y and torch.equal(y, y_eager)  # the input itself was clamped
    assert r is c  # relu_ returns its argument


def test_to_fx_round_trip_keeps_nodes_names_and_targets():
    g = build("conv_bn_relu")
    gm = g.to_fx()
    assert isinstance(gm, torch.fx.GraphModule)
    fx_nodes = list(gm.graph.nodes)
    assert [(n.op, n.name) for n in fx_nodes] == [(n.op, n.name) for n in g.nodes]
    for ours, theirs in zip(g.nodes, fx_nodes):
        if ours.op in ("call_function", "call_method"):
            assert theirs.target == ours.target
    assert not list(gm.named_parameters()) and not list(gm.named_buffers())
    # Deserializing the JSON gives the very same code.
    assert graph_io.deserialize(g.serialize()).code == gm.code


def test_to_fx_keeps_tensor_method_descriptor_calls_runnable():
    g = build("inplace")
    fx_nodes = {n.name: n for n in g.to_fx().graph.nodes}
    add_ = fx_nodes["add_"]
    if add_.op == "call_method":  # torch < 2.0: FX cannot print torch.Tensor.add_ as a target
        assert add_.target == "add_" and torch.__version__ < "2"
    else:
        assert add_.target is torch.Tensor.add_
    assert [n.op for n in g.nodes if n.name != "add_"] == [
        n.op for n in fx_nodes.values() if n.name != "add_"]


def test_deserialize_rejects_other_formats_and_versions():
    with pytest.raises(graph_io.GraphFormatError, match="not a Dynamo graph"):
        graph_io.deserialize('{"format": "x"}')
    doc = json.loads(build("pointwise").serialize())
    doc["version"] = 99
    with pytest.raises(graph_io.GraphFormatError) as e:
        graph_io.deserialize(json.dumps(doc))
    assert str(e.value) == ("graph format version 99 is not supported (this reader knows "
                            "version 1); read it with the Dynamo version that wrote it")
    with pytest.raises(graph_io.GraphFormatError, match="not valid JSON"):
        graph_io.load("{")


def test_fx_bridge_refuses_names_fx_would_change():
    entries = [("placeholder", "x", "x", (), {}, {}),
               ("call_function", "x", torch.neg, (fx_bridge.NodeRef("x"),), {}, {})]
    with pytest.raises(ValueError, match="FX renamed it to 'x_1'"):
        fx_bridge.build_graph_module(entries)


# ---- naming --------------------------------------------------------------------------------------

def test_unique_names_follow_fx_rules():
    b = G.GraphBuilder()
    x = b.placeholder("x")
    w = b.placeholder("self.conv1.weight")
    l0 = b.placeholder("L['x']")
    o = b.placeholder("output")
    adds = [b.call_function(torch.add, (x, w)) for _ in range(3)]
    hinted = b.call_function(torch.add, (x, 1), name="add_1")
    s = b.call_function(torch.sum, (x,))
    d = b.call_function(torch.div, (x, 2), name="3d")
    m = b.call_method("add_", (x, 1))
    m2 = b.call_method("add_", (x, 1))
    b.output((adds[0], hinted, s, d, m, m2, o, l0))
    names = [n.name for n in b.build().nodes]
    assert names == ["x", "self_conv1_weight", "L_x_", "output_1", "add", "add_1", "add_2",
                     "add_3", "sum_1", "_3d", "add_", "add__1", "output"]
    # FX keeps all of them.
    assert [n.name for n in b.build().to_fx().graph.nodes] == names


def test_placeholders_added_late_still_come_first():
    b = G.GraphBuilder()
    x = b.placeholder("x")
    n = b.call_function(torch.neg, (x,))
    y = b.placeholder("y")
    b.output(b.call_function(torch.add, (n, y)))
    g = b.build()
    assert [n.name for n in g.inputs] == ["x", "y"]
    assert str(g).splitlines()[0] == "graph(%x, %y):"
    assert torch.equal(g.runner()(torch.ones(1), torch.ones(1)), torch.zeros(1))


# ---- immutability --------------------------------------------------------------------------------

def test_built_graph_never_changes():
    b = G.GraphBuilder()
    x = b.placeholder("x")
    b.output(b.call_function(torch.neg, (x,)))
    g = b.build()
    before = (str(g), g.serialize(), len(g))
    with pytest.raises(AttributeError):
        g.nodes = []
    with pytest.raises(AttributeError):
        x.name = "y"
    with pytest.raises(AttributeError):
        g.output.args = ()
    nodes = g.nodes
    nodes.clear()  # a copy: the graph is not affected
    # A builder made from the graph makes a new graph; g stays as it was.
    b2 = G.GraphBuilder(g)
    assert len(b2) == 2
    neg = g.find("neg")
    b2.output((b2.call_function(torch.exp, (neg,)), neg))
    g2 = b2.build()
    assert (str(g), g.serialize(), len(g)) == before
    assert [n.name for n in g2.nodes] == ["x", "neg", "exp", "output"]
    assert g2.find("neg") == neg  # shared, immutable node
    # Building again from the first builder gives an equal, separate graph.
    g3 = b.build()
    assert str(g3) == str(g) and g3 is not g
    assert g.find("nope") is None


def test_runner_keeps_its_graph_alive():
    b = G.GraphBuilder()
    x = b.placeholder("x")
    b.output(b.call_function(torch.neg, (x,)))
    runner = b.build().runner()
    del b
    gc.collect()
    assert torch.equal(runner(torch.ones(2)), -torch.ones(2))
    assert str(runner.graph).startswith("graph(%x):")
    assert runner.input_count == 1


# ---- runner ------------------------------------------------------------------------------------

def test_runner_frees_intermediates_after_last_use():
    seen = {}

    def make_big(x):
        big = x.expand(1000, 1000).clone()  # 4 MB
        seen["big"] = weakref.ref(big)
        return big

    def probe(t):
        seen["alive_after_sum"] = seen["big"]() is not None
        return t

    b = G.GraphBuilder()
    x = b.placeholder("x")
    big = b.call_function(make_big, (x,))
    s = b.call_function(torch.sum, (big,))
    p = b.call_function(probe, (s,))
    b.call_function(torch.neg, (x,))  # unused result: freed right away
    b.output(p)
    runner = b.build().runner()
    assert runner.last_uses == [-1, 1, 2, 4, 3]  # slot 3 (probe) is the output
    out = runner(torch.ones(1))
    assert out.item() == 1e6
    assert seen["alive_after_sum"] is False
    assert seen["big"]() is None


def test_runner_run_owned_frees_inputs_after_last_use():
    seen = {}

    def probe(t):
        seen["a_alive"] = seen["a"]() is not None
        seen["b_alive"] = seen["b"]() is not None
        return t

    b = G.GraphBuilder()
    a = b.placeholder("a")
    bb = b.placeholder("b")
    b.placeholder("unused")
    s = b.call_function(torch.sum, (a,))
    p = b.call_function(probe, (s,))
    out = b.call_function(torch.add, (p, bb))
    b.output(out)
    runner = b.build().runner()
    assert runner.input_last_uses == [0, 2, -1]
    args = [torch.ones(1000), torch.ones(3), torch.zeros(2)]
    seen["a"], seen["b"] = weakref.ref(args[0]), weakref.ref(args[1])
    unused = weakref.ref(args[2])
    result = runner.run_owned(args)
    assert args == []  # the runner took the list's references
    assert seen["a_alive"] is False and seen["b_alive"] is True
    assert seen["b"]() is None and unused() is None
    assert result.tolist() == [1001.0] * 3
    # the plain call borrows its inputs: they live on
    kept = torch.ones(1000)
    runner(kept, torch.ones(3), torch.zeros(2))
    assert kept.sum().item() == 1000.0


def test_runner_run_owned_errors():
    b = G.GraphBuilder()
    x = b.placeholder("x")
    b.output(b.call_function(torch.neg, (x,)))
    runner = b.build().runner()
    with pytest.raises(TypeError, match="run_owned\\(\\) takes a list of the inputs, which it empties"):
        runner.run_owned((torch.ones(1),))
    args = [torch.ones(1), torch.ones(1)]
    first = weakref.ref(args[0])
    with pytest.raises(TypeError, match="the graph takes 1 inputs but 2 were given"):
        runner.run_owned(args)
    assert args == [] and first() is None


def test_runner_releases_everything_when_a_node_fails():
    seen = {}

    def make(x):
        t = x * 2
        seen["t"] = weakref.ref(t)
        return t

    b = G.GraphBuilder()
    x = b.placeholder("x")
    t = b.call_function(make, (x,))
    b.output(b.call_function(torch.add, (t, torch.ones(3).shape)))
    with pytest.raises(TypeError):
        b.build().runner()(torch.ones(2))
    assert seen["t"]() is None


def test_runner_error_names_the_node_and_user_line():
    b = G.GraphBuilder()
    x = b.placeholder("x")
    y = b.placeholder("y")
    a = b.call_function(torch.add, (x, y), location=("model.py", 12, "return x + y"))
    b.output(a)
    runner = b.build().runner()
    with pytest.raises(RuntimeError) as e:
        runner(torch.ones(2), torch.ones(3))
    # The message is eager's, untouched; the node and the user's line are in a PEP 678 note.
    assert str(e.value) == ("The size of tensor a (2) must match the size of tensor b (3) at "
                            "non-singleton dimension 0")
    assert e.value.__notes__ == [
        "While running node 'add' of the captured graph: %add = torch.add(%x, %y)\n"
        "  --> model.py:12\n"
        "   |  return x + y"]
    assert e.value.graph_node == "add"
    with pytest.raises(TypeError) as e:
        runner(torch.ones(2))
    assert str(e.value) == "the graph takes 2 inputs but 1 were given"
    with pytest.raises(TypeError, match="positional"):
        runner(x=1, y=2)


def test_runner_error_with_non_string_args_gets_a_note():
    def fail(t):
        raise KeyError("k", 2)

    b = G.GraphBuilder()
    x = b.placeholder("x")
    b.output(b.call_method("size", (b.call_function(fail, (x,)),)))
    with pytest.raises(KeyError) as e:
        b.build().runner()(torch.ones(1))
    assert e.value.args == ("k", 2)
    if sys.version_info >= (3, 11):
        assert e.value.__notes__ == [
            "While running node 'fail' of the captured graph: %fail = "
            + e.value.__notes__[0].split(" = ", 1)[1]]


def test_input_refcounts_unchanged_after_many_runs():
    g = build("pointwise")
    runner = g.runner()
    x, y = pointwise_inputs()
    before = (sys.getrefcount(x), sys.getrefcount(y))
    for _ in range(10_000):
        runner(x, y)
    assert (sys.getrefcount(x), sys.getrefcount(y)) == before
    # Outputs that are inputs, and constants in the output.
    b = G.GraphBuilder()
    p = b.placeholder("p")
    b.output((p, [p, 1], {"p": p}))
    r = b.build().runner()
    before = sys.getrefcount(x)
    for _ in range(10_000):
        out = r(x)
    assert out == (x, [x, 1], {"p": x})
    del out
    assert sys.getrefcount(x) == before


def test_runner_is_reentrant():
    inner = build("pointwise").runner()
    b = G.GraphBuilder()
    x = b.placeholder("x")
    y = b.placeholder("y")
    b.output(b.call_function(inner, (x, y)))
    outer = b.build().runner()
    x0, y0 = pointwise_inputs()
    assert same(outer(x0, y0), pointwise_eager(x0, y0))


# ---- timings (report only) -------------------------------------------------------------------------

@pytest.mark.skipif(os.environ.get("DYNAMO_BENCH") != "1", reason="set DYNAMO_BENCH=1 to time")
def test_report_runner_overhead():
    n = 100_000
    b = G.GraphBuilder()
    x = b.placeholder("x")
    y = b.placeholder("y")
    b.output(b.call_function(torch.add, (x, y)))
    run = b.build().runner()
    a, c = torch.ones(1), torch.ones(1)
    t_direct = min(timeit.repeat(lambda: torch.add(a, c), number=n, repeat=3)) / n * 1e6
    t_runner = min(timeit.repeat(lambda: run(a, c), number=n, repeat=3)) / n * 1e6

    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32),
                              torch.nn.ReLU(), torch.nn.Linear(32, 4))
    b = G.GraphBuilder()
    h = b.placeholder("x")
    params = [b.placeholder(f"self.{name}") for name, _ in mlp.named_parameters()]
    for i in range(3):
        h = b.call_function(F.linear, (h, params[2 * i], params[2 * i + 1]))
        if i < 2:
            h = b.call_function(F.relu, (h,))
    b.output(h)
    mlp_run = b.build().runner()
    ps = [p.detach() for p in mlp.parameters()]
    inp = torch.randn(8, 16)
    with torch.no_grad():
        assert same(mlp_run(inp, *ps), mlp(inp))
        t_mod = min(timeit.repeat(lambda: mlp(inp), number=n, repeat=3)) / n * 1e6
        t_mlp = min(timeit.repeat(lambda: mlp_run(inp, *ps), number=n, repeat=3)) / n * 1e6
    print(f"\n1-node add: torch.add {t_direct:.2f} us, runner {t_runner:.2f} us "
          f"(overhead {t_runner - t_direct:.2f} us)")
    print(f"3-layer MLP: nn.Module {t_mod:.2f} us, runner {t_mlp:.2f} us")
