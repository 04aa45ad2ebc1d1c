"""replace_with_values: candidates are the call nodes whose recorded value (an eager run on the
real inputs) is a tensor; a dropped node becomes a new input holding that value, and the nodes
and inputs only it used are removed. A failure in a later node survives this; one in the node
itself does not, which is what narrows the graph down to the failing node."""


def reduce(unit, oracle):
    import torch

    values = unit.recorded_values()
    cands = [n.name for n in unit.calls() if isinstance(values.get(n.name), torch.Tensor)]
    drop = [name for name in cands if not oracle.should_keep()]
    if not drop:
        return None
    return unit.with_recorded_values(drop)
