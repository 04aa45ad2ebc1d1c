"""The probe: a backend wrapped so that the first failure of each graph it compiles is caught as
data, the same way in the user's run (capture.py) and in every minifier query (query.py).

    probe = Probe(backend_spec, accuracy_tol=None)
    compiler = probe.backend()            # compiler(gm, example_inputs), for dynamo.compile
    ...
    probe.failure                         # None, or a Failure (stage, exception, node kind)

The wrapped compiler compiles the graph with the real backend: a Python callable is called as it
is; a backend of backends.def (compiled in C++) through native.py, which hands the graph to the
same code the C++ backend runs. The
compiled callable is wrapped too: its first call is checked (an exception; with accuracy on, a
divergence of an output from an fp64 eager run of the graph beyond the tolerance). Later calls go
straight to the compiled code.

The fp64 reference is the graph as Dynamo captured it, before the pass pipeline
(`dynamo._C._compiler.captured_graph()` while the backend compiles), not the graph the backend
got: a pass that changes values is then a divergence too, which dynamo-bisect --accuracy narrows
down to the pass and its application. Where there is no such graph (a minifier query of a graph
with no Dynamo capture around it) or its inputs differ, the graph itself is the reference.
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import sys
import traceback as _tb
from typing import Any, Callable, Optional

_SCRIPT_MODULE = "__dynamo_minify_script__"


@dataclasses.dataclass
class Failure:
    stage: str                      #: "compile", "run" or "accuracy"
    graph: int = 0                  #: index of the graph in its run (capture)
    exc: Optional[BaseException] = None
    exc_type: str = ""
    message: str = ""
    traceback: str = ""
    node_kind: str = ""             #: accuracy: the op of the diverging output
    error: float = 0.0              #: accuracy: the largest error found
    tb: Any = None                  #: the traceback where the probe caught the exception
    #: accuracy: the reference was the graph as captured and the passes had changed it
    passes_changed: bool = False

    def as_dict(self):
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in ("exc", "tb")}


def backend_spec(name: str, fn: Optional[Callable]) -> dict:
    """How a query process finds the same backend again: a name of backends.def, or the module
    (and file, for a script run as __main__) that defines or registers the callable."""
    from dynamo import backends
    if fn is None:
        return {"name": name}
    mod = getattr(fn, "__module__", None) or ""
    spec = {"name": name, "module": mod, "qualname": getattr(fn, "__qualname__", "")}
    if mod == "__main__":
        main = sys.modules.get("__main__")
        spec["file"] = os.path.abspath(getattr(main, "__file__", "") or "")
    elif getattr(sys.modules.get(mod), "__file__", None):
        # Where to import it from in a fresh process (a module beside the user's script).
        spec["path"] = os.path.dirname(os.path.dirname(os.path.abspath(sys.modules[mod].__file__))
                                       if "." in mod else os.path.abspath(sys.modules[mod].__file__))
    spec["registered"] = backends._REGISTRY.get(name) is fn
    return spec


def load_module(spec: dict):
    mod = spec.get("module")
    if not mod:
        return None
    if mod == "__main__":
        if _SCRIPT_MODULE in sys.modules:
            return sys.modules[_SCRIPT_MODULE]
        # The user's script, imported under another name: its `if __name__ == "__main__":` part
        # does not run, its backends are defined (and registered).
        s = importlib.util.spec_from_file_location(_SCRIPT_MODULE, spec["file"])
        module = importlib.util.module_from_spec(s)
        sys.modules[_SCRIPT_MODULE] = module
        sys.path.insert(0, os.path.dirname(spec["file"]))
        s.loader.exec_module(module)
        return module
    try:
        return importlib.import_module(mod)
    except ImportError:
        if not spec.get("path"):
            raise
        sys.path.insert(0, spec["path"])
        return importlib.import_module(mod)


def load_backend(spec: dict):
    """(name, callable or None) of a backend_spec, in this process."""
    module = load_module(spec)
    if module is None:
        return spec["name"], None
    if spec.get("registered"):
        from dynamo import backends
        return backends.lookup(spec["name"])
    obj = module
    for part in spec["qualname"].split("."):
        obj = getattr(obj, part)
    return spec["name"], obj


def _clone(v):
    import torch
    if isinstance(v, torch.Tensor):
        c = v.detach().clone()
        return c.requires_grad_(v.requires_grad) if c.is_floating_point() else c
    return v


def _to_fp64(v):
    import torch
    if isinstance(v, torch.Tensor) and v.is_floating_point():
        return v.detach().to(torch.float64)
    return v


def _flat(out):
    if isinstance(out, (tuple, list)):
        return [x for o in out for x in _flat(o)]
    return [out]


def output_nodes(gm):
    out = next(n for n in gm.graph.nodes if n.op == "output")
    value = out.args[0]
    return _flat(value) if isinstance(value, (tuple, list)) else [value]


def captured_reference(gm):
    """The graph of the compile in progress before the passes (see the module doc), when it takes
    the same inputs as gm; else gm."""
    from dynamo import _C
    ref = _C._compiler.captured_graph()
    if ref is None:
        return gm
    def count(g):
        return sum(1 for n in g.graph.nodes if n.op == "placeholder")
    return ref if count(ref) == count(gm) and len(output_nodes(ref)) == len(output_nodes(gm)) else gm


def max_error(got, ref64) -> float:
    """The largest |got - ref64| (in fp64); a NaN where the reference has one too counts as equal
    (an input that makes NaNs is not a compiler bug: generate_inputs can make a variance negative),
    a NaN or infinity only one side has as an infinite error."""
    import torch
    if not got.numel():
        return 0.0
    g = got.detach().double()
    diff = (g - ref64).abs()
    same = (g.isnan() & ref64.isnan()) | ((g == ref64) & g.isinf())
    diff = torch.where(same, torch.zeros_like(diff), diff)
    diff = torch.where(diff.isnan(), torch.full_like(diff, float("inf")), diff)
    return diff.max().item()


def divergence(gm, inputs, result, tol):
    """(node kind, error) of the first output of gm whose value in `result` is further from an
    fp64 eager run than tol (relative to the output's magnitude) and than 10x eager fp32's own
    error; None when every output is within. inputs: clones taken before the compiled run."""
    import torch
    from dynamo.minifier.unit import target_name
    with torch.no_grad():  # gm.forward: a global module hook must not run on our graph module
        ref64 = _flat(gm.forward(*[_to_fp64(v) for v in inputs]))
        ref32 = _flat(gm.forward(*[_clone(v) for v in inputs]))
    nodes = output_nodes(gm)
    for node, got, r64, r32 in zip(nodes, _flat(result), ref64, ref32):
        if not (isinstance(got, torch.Tensor) and got.is_floating_point()):
            continue
        if got.shape != r64.shape:
            return (target_name(node) if hasattr(node, "op") else "output", float("inf"))
        err = max_error(got, r64)
        own = max_error(r32, r64)
        finite = r64[r64.isfinite()] if got.numel() else r64
        scale = max(1.0, finite.abs().max().item() if finite.numel() else 0.0)
        if err > max(tol * scale, 10 * own):
            kind = target_name(node) if hasattr(node, "op") and node.op != "placeholder" else "input"
            return (kind, err)
    return None


class Probe:
    """Wraps a backend; records the first failure of the graphs it compiles (see module doc).

    on_event(kind, graph_index, payload): "start" (before compiling; payload: gm, inputs),
    "ok" (after the first run passed), "fail" (payload: the Failure). capture.py writes them."""

    def __init__(self, name: str, fn: Optional[Callable], accuracy_tol: Optional[float] = None,
                 on_event: Optional[Callable] = None):
        self.name, self.fn = name, fn
        self.tol = accuracy_tol
        self.failure: Optional[Failure] = None
        self.graphs = 0
        self._on_event = on_event or (lambda kind, i, payload: None)

    def _fail(self, failure: Failure):
        if self.failure is None:
            self.failure = failure
        self._on_event("fail", failure.graph, failure)

    def _exception(self, stage, i, exc):
        return Failure(stage, i, exc, f"{type(exc).__module__}.{type(exc).__qualname__}", str(exc),
                       "".join(_tb.format_exception(type(exc), exc, exc.__traceback__)),
                       tb=exc.__traceback__)

    def _compile_real(self, gm, example_inputs):
        if self.fn is not None:
            return self.fn(gm, example_inputs)
        from dynamo.minifier import native
        compiled = native.compile_native(self.name, gm, example_inputs)
        if compiled is not None:
            return compiled
        from dynamo import config, eval_frame
        old = config.suppress_errors
        config.suppress_errors = False
        try:
            with _unwrapped():
                return eval_frame.compile(gm, backend=self.name)
        finally:
            config.suppress_errors = old

    def backend(self) -> Callable:
        def compiler(gm, example_inputs):
            i = self.graphs
            self.graphs += 1
            self._on_event("start", i, (gm, example_inputs))
            reference = captured_reference(gm) if self.tol is not None else gm
            try:
                compiled = self._compile_real(gm, example_inputs)
            except BaseException as exc:
                self._fail(self._exception("compile", i, exc))
                raise
            return self._checked(i, reference, compiled, reference is not gm and reference.code != gm.code)
        compiler.__name__ = self.name
        return compiler

    def _checked(self, i, gm, compiled, passes_changed=False):
        state = {"first": True}

        def run(*args):
            if not state["first"]:
                return compiled(*args)
            state["first"] = False
            before = [_clone(a) for a in args] if self.tol is not None else None
            try:
                out = compiled(*args)
            except BaseException as exc:
                self._fail(self._exception("run", i, exc))
                raise
            if before is not None:
                d = divergence(gm, before, out, self.tol)
                if d is not None:
                    self._fail(Failure("accuracy", i, node_kind=d[0], error=d[1],
                                       message=f"divergence at a {d[0]} node (error {d[1]:.3g})",
                                       passes_changed=passes_changed))
                    return out
            self._on_event("ok", i, None)
            return out
        return run


class _Unwrapped:
    depth = 0


def _unwrapped():
    """While active, dynamo.compile does not wrap its backend in a capture probe (the probe's
    own compile of a backends.def backend)."""
    import contextlib

    @contextlib.contextmanager
    def cm():
        _Unwrapped.depth += 1
        try:
            yield
        finally:
            _Unwrapped.depth -= 1
    return cm()


def wrapping_disabled() -> bool:
    return _Unwrapped.depth > 0
