"""generate_inputs: candidates are the tensor inputs that still hold real values; a dropped one is
replaced by generated values (unit.generated_like: seeded normal values, zeros for integer and
bool tensors), which repro.py writes as one call instead of the values. Kept only when the
failure does not depend on the real values (the same failure with the generated ones)."""


def reduce(unit, oracle):
    import torch
    from dynamo.minifier.unit import generated_like, is_generated

    cands = [i for i, v in enumerate(unit.inputs)
             if isinstance(v, torch.Tensor) and v.numel() > 0 and not is_generated(v)]
    drop = [i for i in cands if not oracle.should_keep()]
    if not drop:
        return None
    ed = unit.edit()
    for i in drop:
        ed.inputs[i] = generated_like(ed.inputs[i])
    return ed.done()
