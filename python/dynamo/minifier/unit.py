"""The thing the minifier shrinks: one graph (a torch.fx.GraphModule, a pure function of its
inputs) and the real values of its inputs.

A `Unit` is never changed: a reduction pass returns a new one (`Unit.edit()` gives a copy whose
graph may be edited, `Editor.done()` the new unit). The recorded values of every node (an eager
run on the real inputs) are computed once per unit, on demand, for replace_with_values.

An input whose values the failure does not depend on may be replaced by generated values
(generate_inputs): `generated_like(t)` makes them, deterministically, and marks the tensor, so that
repro.py writes one call that makes them again instead of the values.
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Any, List, Optional

PURE_OPS = ("placeholder", "output")


@dataclasses.dataclass(frozen=True)
class Unit:
    gm: Any                 #: torch.fx.GraphModule
    inputs: tuple           #: one value per placeholder, in order
    _values: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)

    # -- views ----------------------------------------------------------------------------
    def placeholders(self):
        return [n for n in self.gm.graph.nodes if n.op == "placeholder"]

    def calls(self):
        return [n for n in self.gm.graph.nodes if n.op not in PURE_OPS]

    def output_node(self):
        return next(n for n in self.gm.graph.nodes if n.op == "output")

    def size(self) -> int:
        """The complexity the engine drives down: the number of call nodes."""
        return len(self.calls())

    def key(self) -> str:
        """Identifies the unit for the query cache: its code, its input shapes and which inputs
        hold generated values."""
        import torch
        shapes = tuple((tuple(v.shape), is_generated(v)) if isinstance(v, torch.Tensor) else repr(v)
                       for v in self.inputs)
        return self.gm.code + repr(shapes)

    def op_kinds(self) -> List[str]:
        return [target_name(n) for n in self.calls()]

    def recorded_values(self) -> dict:
        """{node name: value} of an eager run of the graph on the real inputs (cached)."""
        if "values" not in self._values:
            self._values["values"] = record_values(self.gm, self.inputs)
        return self._values["values"]

    def edit(self) -> "Editor":
        return Editor(self)

    def with_recorded_values(self, names) -> Optional["Unit"]:
        """The unit with each named call node replaced by a new input holding its recorded value
        (recorded_values()), and what only those nodes used removed; None as for Editor.done()."""
        values = self.recorded_values()
        ed = self.edit()
        for name in names:
            node = ed.node(name)
            ph = ed.add_input(f"{name}_value", values[name])
            node.replace_all_uses_with(ph)
            ed.graph.erase_node(node)
        ed.remove_dead()
        return ed.done()


class Editor:
    """A private copy of a unit's graph and inputs to change; done() makes the new Unit."""

    def __init__(self, unit: Unit):
        self.gm = copy.deepcopy(unit.gm)
        self.graph = self.gm.graph
        self.inputs = list(unit.inputs)
        self.source = unit

    def node(self, name):
        return next(n for n in self.graph.nodes if n.name == name)

    def placeholders(self):
        return [n for n in self.graph.nodes if n.op == "placeholder"]

    def output_node(self):
        return next(n for n in self.graph.nodes if n.op == "output")

    def add_input(self, name_hint: str, value) -> Any:
        """A new placeholder after the last one, with its value."""
        last = self.placeholders()[-1] if self.placeholders() else None
        if last is not None:
            with self.graph.inserting_after(last):
                ph = self.graph.placeholder(name_hint)
        else:
            with self.graph.inserting_before(next(iter(self.graph.nodes))):
                ph = self.graph.placeholder(name_hint)
        self.inputs.append(value)
        return ph

    def remove_input(self, node) -> None:
        i = self.placeholders().index(node)
        self.graph.erase_node(node)
        del self.inputs[i]

    def remove_dead(self) -> None:
        """Removes call nodes nobody uses (to a fixpoint), then placeholders nobody uses."""
        for n in reversed(list(self.graph.nodes)):
            if n.op not in PURE_OPS and not n.users:
                self.graph.erase_node(n)
        for n in self.placeholders():
            if not n.users:
                self.remove_input(n)

    def done(self) -> Optional[Unit]:
        """The new unit; None when the edit left a graph with no call node or no output."""
        self.graph.lint()
        self.gm.recompile()
        unit = Unit(self.gm, tuple(self.inputs))
        return unit if unit.size() > 0 else None


def target_name(node) -> str:
    """'torch.relu', 'Tensor.add_', 'aten.convolution.default': the kind of a call node."""
    t = node.target
    if node.op == "call_method":
        return f"Tensor.{t}"
    name = getattr(t, "__name__", None) or str(t)
    mod = getattr(t, "__module__", None)
    if type(t).__name__ == "OpOverload":
        return str(t)
    if mod in ("torch", "torch.functional", "torch._C._VariableFunctions") or mod is None:
        return f"torch.{name}" if mod else name
    if mod == "_operator":
        return f"operator.{name}"
    return f"{mod}.{name}"


_GENERATED = "_dynamo_minify_generated"  # set on a tensor made by generated_like()


def generated_like(t):
    """A tensor of t's shape, dtype and requires_grad with values made by a call repro.py can
    repeat: seeded standard normal values for floating-point tensors, zeros for the others."""
    import torch
    if t.is_floating_point() or t.is_complex():
        out = torch.randn(tuple(t.shape), dtype=t.dtype, generator=torch.Generator().manual_seed(0))
    else:
        out = torch.zeros(tuple(t.shape), dtype=t.dtype)
    if t.requires_grad:
        out.requires_grad_(True)
    setattr(out, _GENERATED, True)
    return out


def is_generated(v) -> bool:
    """Whether v was made by generated_like() (and so is not a real input value)."""
    return bool(getattr(v, _GENERATED, False))


def mark_generated(inputs, flags):
    """Marks again the inputs a checkpoint recorded as generated (the mark is not saved with the
    tensor); one whose values are not those generated_like() makes is left unmarked."""
    import torch
    for v, flag in zip(inputs, flags or ()):
        if flag and isinstance(v, torch.Tensor) and torch.equal(v.detach(), generated_like(v).detach()):
            setattr(v, _GENERATED, True)


def _clone_value(v):
    import torch
    if isinstance(v, torch.Tensor):
        out = v.detach().clone()
        if v.requires_grad and out.is_floating_point():
            out.requires_grad_(True)
        return out
    return v


def record_values(gm, inputs) -> dict:
    """{node name: value} for every node of an eager run (clones, so a later in-place op does
    not change a recorded value)."""
    import torch
    import torch.fx

    values = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            out = super().run_node(n)
            if n.op != "output":
                values[n.name] = _clone_value(out)
            return out

    with torch.no_grad():
        Recorder(gm).run(*[_clone_value(v) for v in inputs])
    return values
