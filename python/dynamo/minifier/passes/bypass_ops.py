"""bypass_ops (--after=kernel): candidates are the call nodes that have a tensor argument of
their own shape and dtype (their recorded values); a dropped node's users read that argument
instead and the node is removed. Unlike replace_with_values, which cuts everything before the
node, this keeps the ops before it in the fusion group and takes one op out: tanh(a + b) * 2
becomes (a + b) * 2, still one kernel."""


def _same_layout_arg(node, values):
    import torch.fx
    mine = values.get(node.name)
    for a in node.args:
        if isinstance(a, torch.fx.Node):
            v = values.get(a.name)
            if (isinstance(v, torch.Tensor) and v.shape == mine.shape and v.dtype == mine.dtype):
                return a.name
    return None


def reduce(unit, oracle):
    import torch

    values = unit.recorded_values()
    cands = []
    for n in unit.calls():
        if isinstance(values.get(n.name), torch.Tensor):
            arg = _same_layout_arg(n, values)
            if arg is not None:
                cands.append((n.name, arg))
    drop = [c for c in cands if not oracle.should_keep()]
    if not drop:
        return None
    ed = unit.edit()
    bypassed = {}
    for name, arg in drop:
        node = ed.node(name)
        target = ed.node(bypassed.get(arg, arg))
        bypassed[name] = target.name
        node.replace_all_uses_with(target)
        ed.graph.erase_node(node)
    ed.remove_dead()
    return ed.done()
