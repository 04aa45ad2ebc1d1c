"""shrink_shapes: candidates are the dimensions (size > 1) of the tensor inputs; a dropped one is
halved, keeping the first half of the real values. A graph that hard-codes the size (a view to
the old shape) then fails differently, which the engine counts as not reproducing."""


def reduce(unit, oracle):
    import torch

    cands = [(i, d) for i, v in enumerate(unit.inputs) if isinstance(v, torch.Tensor)
             for d in range(v.dim()) if v.shape[d] > 1]
    drop = [c for c in cands if not oracle.should_keep()]
    if not drop:
        return None
    ed = unit.edit()
    for i, d in drop:
        v = ed.inputs[i]
        half = v.detach().narrow(d, 0, (v.shape[d] + 1) // 2).clone()
        if v.requires_grad:
            half.requires_grad_(True)
        ed.inputs[i] = half
    return ed.done()
