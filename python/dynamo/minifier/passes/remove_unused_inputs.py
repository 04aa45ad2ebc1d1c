"""remove_unused_inputs: candidates are the inputs nobody uses; a dropped one goes with its value."""


def reduce(unit, oracle):
    unused = [n.name for n in unit.placeholders() if not n.users]
    drop = [name for name in unused if not oracle.should_keep()]
    if not drop:
        return None
    ed = unit.edit()
    for name in drop:
        ed.remove_input(ed.node(name))
    return ed.done()
