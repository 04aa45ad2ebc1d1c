"""Splits a captured graph at its first autograd call (``loss.backward()``, ``torch.autograd.grad``).

Dynamo records ``loss.backward()`` inside the graph of a training step, with the optimizer's
updates after it. Such a graph is no function to trace jointly (its autograd already ran when
make_fx would differentiate it), but its part before the call is the forward the AOT layer is
for:

    graph(inputs) = post(inputs, *pre(inputs))
      pre:  the nodes before the autograd call; outputs: the values the rest reads
      post: the autograd call and everything after it; inputs: the graph's, then pre's outputs

``pre`` is compiled by the AOT layer (its backward is what ``loss.backward()`` then runs);
``post`` runs as the captured torch-level code (torch.fx), on the real tensors.
"""
import torch

__all__ = ["is_autograd_call", "split_at_autograd"]

_AUTOGRAD_FUNCTIONS = ("torch.autograd.backward", "torch.autograd.grad", "torch.autograd.__init__.backward",
                       "torch.autograd.__init__.grad", "torch._tensor.Tensor.backward", "torch.Tensor.backward")


def is_autograd_call(n):
    """The autograd call's name when node n runs autograd, else None."""
    if n.op == "call_method" and n.target == "backward":
        return "Tensor.backward"
    if n.op == "call_function":
        name = f"{getattr(n.target, '__module__', '')}.{getattr(n.target, '__qualname__', '')}"
        if name in _AUTOGRAD_FUNCTIONS or getattr(n.target, "__name__", "") == "backward" and \
                "Tensor" in name:
            return name
    return None


def split_at_autograd(gm):
    """(pre, post) GraphModules, or None when gm holds no autograd call."""
    nodes = list(gm.graph.nodes)
    cut = next((i for i, n in enumerate(nodes) if is_autograd_call(n)), None)
    if cut is None:
        return None
    placeholders = [n for n in nodes if n.op == "placeholder"]
    pre = [n for n in nodes[:cut] if n.op not in ("placeholder", "output")]
    post = [n for n in nodes[cut:] if n.op not in ("placeholder", "output")]
    output = nodes[-1]
    pre_set = set(pre)
    crossing = []
    for n in post + [output]:
        for a in n.all_input_nodes:
            if a in pre_set and a not in crossing:
                crossing.append(a)

    g1, env1 = torch.fx.Graph(), {}
    for p in placeholders:
        env1[p] = g1.node_copy(p)
    for n in pre:
        env1[n] = g1.node_copy(n, lambda x: env1[x])
    g1.output(tuple(env1[c] for c in crossing))

    g2, env2 = torch.fx.Graph(), {}
    for p in placeholders:
        env2[p] = g2.node_copy(p)
    for c in crossing:
        env2[c] = g2.placeholder(f"{c.name}_pre")
    for n in post:
        env2[n] = g2.node_copy(n, lambda x: env2[x])
    g2.output(torch.fx.map_arg(output.args[0], lambda x: env2[x]))
    return torch.fx.GraphModule(gm, g1), torch.fx.GraphModule(gm, g2)
