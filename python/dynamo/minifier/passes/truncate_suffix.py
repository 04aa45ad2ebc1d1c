"""truncate_suffix: an earlier node becomes the output.

Candidates: the call nodes, last first. The graph is cut before the earliest node the oracle
drops: that node and every later one go, and the values the removed nodes read from the kept
part (call nodes only) become the graph's outputs, with the old outputs that were kept.
"""


def reduce(unit, oracle):
    calls = unit.calls()
    keep = {n.name: oracle.should_keep() for n in reversed(calls)}
    cut = next((i for i, n in enumerate(calls) if not keep[n.name]), None)
    if cut is None or cut == 0:
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
