"""remove_outputs: candidates are the graph's outputs; a dropped one is no longer returned (at
least one output stays), and what only it used is removed."""


def reduce(unit, oracle):
    out = unit.output_node()
    value = out.args[0]
    if not isinstance(value, (tuple, list)) or len(value) < 2:
        return None
    keep = [oracle.should_keep() for _ in value]
    if all(keep) or not any(keep):
        return None
    ed = unit.edit()
    new_out = ed.output_node()
    new_out.args = (tuple(v for v, k in zip(new_out.args[0], keep) if k),)
    ed.remove_dead()
    return ed.done()
