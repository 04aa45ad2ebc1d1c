"""Test helpers for the fused backend: ATen graphs from functorch.make_fx, turned into Dynamo graphs.

The AOT layer (python/dynamo/aot, in progress elsewhere) is the product's way to get ATen graphs;
until it lands, these helpers convert a make_fx GraphModule node by node with the public
GraphBuilder (tests only: this is not a second importer in the product).

    f = fused(fn, *example_inputs)      # FusedFunction: f(*inputs), f.report
    text = program_text(fn, *inputs)    # the printed program of fn traced by torch.fx
    close(got, want)                    # the conv tests' tolerance against eager
"""
import torch
from functorch import make_fx

import dynamo._C as _C


def _meta(t):
    return t if isinstance(t, torch.Tensor) else None


def to_dynamo_graph(gm, example_inputs):
    """A Dynamo Graph of a make_fx GraphModule, with tensor meta from running it on the inputs."""
    env, values = {}, {}
    b = _C._graph.GraphBuilder()
    inputs = iter(example_inputs)
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            v = next(inputs)
            values[node] = v
            env[node] = b.placeholder(node.name, name=node.name, tensor_meta=_meta(v))
        elif node.op == "call_function":
            args = torch.fx.node.map_arg(node.args, lambda n: values[n])
            kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: values[n])
            v = node.target(*args, **kwargs)
            values[node] = v
            env[node] = b.call_function(
                node.target, torch.fx.node.map_arg(node.args, lambda n: env[n]),
                dict(torch.fx.node.map_arg(node.kwargs, lambda n: env[n])),
                name=node.name, tensor_meta=_meta(v))
        elif node.op == "output":
            b.output(torch.fx.node.map_arg(node.args[0], lambda n: env[n]))
        else:
            raise NotImplementedError(node.op)
    return b.build()


def aten_graph(fn, *inputs):
    """(make_fx GraphModule, Dynamo Graph) of fn on inputs."""
    gm = make_fx(fn)(*inputs)
    return gm, to_dynamo_graph(gm, inputs)


def fused(fn, *inputs, cuda_host_shim=False):
    """fn lowered to ATen with make_fx and compiled with the fused backend."""
    _, g = aten_graph(fn, *inputs)
    return _C._codegen.compile(g.serialize(), list(inputs), cuda_host_shim=cuda_host_shim)


def reference(fn, *inputs):
    """fn in float64 (floating inputs promoted), the accuracy reference."""
    up = [t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in inputs]
    return fn(*up)


def tolerance(dtype):
    return {torch.float32: (1e-5, 1e-5), torch.float64: (1e-12, 1e-12)}.get(dtype, (0, 0))


def program_text(fn, *inputs):
    """The fused backend's printed program of fn (traced with torch.fx.symbolic_trace, not make_fx:
    the graph keeps the convolution and batch_norm calls the conv tests look at)."""
    gm = torch.fx.symbolic_trace(fn)
    return _C._codegen.compile(to_dynamo_graph(gm, inputs).serialize(), list(inputs))


def close(got, want):
    """The conv tests' tolerance (test_fused_conv.py, test_fused_conv_dnnl.py): within 1e-4
    relative, atol 1e-4 of the output's largest magnitude (at least 1e-7)."""
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * max(want.abs().max().item(), 1e-3))
