"""isolate_kernel (--after=kernel): candidates are the steps of the fused program the code
generator makes of the graph (kernels and extern calls), last first; a dropped step's stored
values (a kernel's stage outputs, an extern's result) become new inputs holding their recorded
values, and what only the step used is removed. Dropping every step but the failing kernel
leaves that kernel alone, in a binary search over steps rather than over nodes."""


def reduce(unit, oracle):
    import torch
    from dynamo.minifier.kernel_stage import program

    p = program(unit)
    if p is None:
        return None
    body = [n.name for n in unit.calls()]
    stored = []
    for kind, index in reversed(p["steps"]):
        if kind == "kernel":
            stored.append(p["kernels"][index]["nodes"])
        elif 0 <= index < len(body):
            stored.append([body[index]])
    values = unit.recorded_values()
    drop = [names for names in stored if not oracle.should_keep()]
    # (A name may be stored by two steps; one the importer renamed is not in the graph.)
    drop = list(dict.fromkeys(n for names in drop for n in names
                              if n in body and isinstance(values.get(n), torch.Tensor)))
    if not drop:
        return None
    return unit.with_recorded_values(drop)
