"""dead_code: removes call nodes nobody uses, then inputs nobody uses. No candidates: the engine
tests the result once (a node whose side effect mattered to the failure makes the test fail,
and the pass is then not applied)."""


def reduce(unit, oracle):
    ed = unit.edit()
    ed.remove_dead()
    return ed.done()
