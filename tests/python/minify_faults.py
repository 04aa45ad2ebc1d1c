"""Test-only backends with injected faults, for the dynamo-minify and dynamo-bisect tests.

Each one misbehaves on graphs holding one op kind (relu: a `torch.relu` call, a `.relu()` method
or `torch.nn.functional.relu`) and runs every other graph correctly:

    raise_on_relu     raises RuntimeError at compile
    wrong_on_relu     compiles; relu's result is off by 1e-2 (an accuracy bug)
    abort_on_relu     compiles; the compiled graph aborts the process when it runs
    raise_then_other  raises on relu, but a graph with relu and no conv raises ValueError instead
                      (a failure that turns into another while shrinking)
    wrong_then_raise  relu off by 1e-2 as wrong_on_relu, but a graph with relu and no conv raises
                      ValueError (an accuracy failure that turns into an exception while shrinking)
"""
import os

import torch
import torch.fx

import dynamo
import dynamo.aot


def _relu_nodes(gm):
    return [n for n in gm.graph.nodes
            if (n.op == "call_method" and n.target in ("relu", "relu_"))
            or (n.op == "call_function" and getattr(n.target, "__name__", "") in ("relu", "relu_"))]


@dynamo.register_backend("raise_on_relu")
def raise_on_relu(gm, example_inputs):
    bad = _relu_nodes(gm)
    if bad:
        raise RuntimeError(f"fault injected: this backend cannot compile relu "
                           f"({len(list(gm.graph.nodes))} nodes)")
    return gm.forward


@dynamo.register_backend("raise_then_other")
def raise_then_other(gm, example_inputs):
    bad = _relu_nodes(gm)
    if bad:
        convs = [n for n in gm.graph.nodes if n.op == "call_function" and "conv" in str(n.target)]
        if not convs:
            raise ValueError("another fault: relu without a convolution")
        raise RuntimeError("fault injected: this backend cannot compile relu")
    return gm.forward


@dynamo.register_backend("wrong_on_relu")
def wrong_on_relu(gm, example_inputs):
    bad = {n.name for n in _relu_nodes(gm)}

    class Wrong(torch.fx.Interpreter):
        def run_node(self, n):
            out = super().run_node(n)
            return out + 1e-2 if n.name in bad else out

    def run(*args):
        return Wrong(gm).run(*args)
    return run


@dynamo.register_backend("wrong_then_raise")
def wrong_then_raise(gm, example_inputs):
    if _relu_nodes(gm) and not any(n.op == "call_function" and "conv" in str(n.target)
                                   for n in gm.graph.nodes):
        raise ValueError("another fault: relu without a convolution")
    return wrong_on_relu(gm, example_inputs)


@dynamo.register_backend("abort_on_relu")
def abort_on_relu(gm, example_inputs):
    if not _relu_nodes(gm):
        return gm.forward

    def run(*args):
        os.abort()
    return run


@dynamo.register_backend("flaky_once")
def flaky_once(gm, example_inputs):
    """Fails the first time only (a marker file, MINIFY_FLAKY_MARKER, remembers): a
    nondeterministic failure."""
    marker = os.environ["MINIFY_FLAKY_MARKER"]
    if not os.path.exists(marker):
        open(marker, "w").close()
        raise RuntimeError("fault injected: fails once")
    return gm.forward


# --after=aot: compilers of the AOT layer (each gets a _C._graph.Graph of ATen ops).
def _schemas(graph):
    return [n.schema for n in graph.nodes if n.op == "call_function" and n.target_kind == "aten"]


def fw_raise_on_relu(graph):
    if any(s.startswith("aten::relu") for s in _schemas(graph)):
        raise RuntimeError("fault injected: the forward compiler cannot compile aten::relu")
    return graph.runner()


def bw_raise_on_threshold_backward(graph):
    runner = graph.runner()
    if not any(s.startswith("aten::threshold_backward") for s in _schemas(graph)):
        return runner

    def run(*args):
        raise RuntimeError("fault injected: the backward graph cannot run aten::threshold_backward")
    return run


dynamo.register_backend("aot_fw_raise_on_relu")(
    dynamo.aot.make_backend("aot_eager", fw_compiler=fw_raise_on_relu))
dynamo.register_backend("aot_bw_raise_on_threshold_backward")(
    dynamo.aot.make_backend("aot_eager", bw_compiler=bw_raise_on_threshold_backward))


def fw_raise_on_amax(graph):
    """A compiler bug on a decomposed op: aten::amax comes from the softmax decomposition group."""
    if any(s.startswith("aten::amax") for s in _schemas(graph)):
        raise RuntimeError("fault injected: the forward compiler cannot compile aten::amax")
    return graph.runner()


decomp_raise_on_amax = dynamo.aot.make_backend("aot_eager_decomp_partition",
                                               fw_compiler=fw_raise_on_amax)

# MINIFY_FAULT_OVERRIDE=aot_eager:wrong_on_relu,...: a backend of the bisector's ladder replaced
# by a faulty one (a registered name takes precedence over the backends.def one).
for _item in filter(None, os.environ.get("MINIFY_FAULT_OVERRIDE", "").split(",")):
    _name, _fault = _item.split(":")
    dynamo.register_backend(_name)(globals()[_fault])
