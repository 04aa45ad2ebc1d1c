"""truncate_suffix: an earlier node becomes the output.

Candidates: the call nodes, last first. Only a suffix is cut: the nodes dropped from the end
up to the first one kept go, and the values they read from the kept part (call nodes only)
become the graph's outputs, with the old outputs that were kept. A chunk that does not reach
the end cuts nothing, so the engine's halving granularity makes this a binary search for the
last node the failure needs (11 queries for a 41-node chain, against 48 when any dropped node
cut everything after it: tests/python/test_minify_engine.py).
"""


def reduce(unit, oracle):
    calls = unit.calls()
    dropped = [not oracle.should_keep() for _ in calls]
    k = next((i for i, d in enumerate(dropped) if not d), len(calls))
    cut = len(calls) - k
    if k == 0 or cut == 0:
        return None
    ed = unit.edit()
    removed = {n.name for n in calls[cut:]}
    kept = [n.name for n in calls[:cut]]
    frontier = []
    for n in calls[cut:]:
        for arg in n.all_input_nodes:
            if arg.name in kept and arg.name not in frontier:
                frontier.append(arg.name)
    out = ed.output_node()
    old = out.args[0] if isinstance(out.args[0], (tuple, list)) else (out.args[0],)
    outputs = [ed.node(a.name) for a in old if hasattr(a, "name") and a.name in kept]
    outputs += [ed.node(name) for name in frontier if name not in {o.name for o in outputs}]
    if not outputs:
        return None
    out.args = (tuple(outputs),)
    for n in reversed(list(ed.graph.nodes)):
        if n.name in removed:
            ed.graph.erase_node(n)
    ed.remove_dead()
    return ed.done()
