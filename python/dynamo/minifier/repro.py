"""Writes repro.py: a standalone script (torch and dynamo only) holding the graph as readable
code and its inputs, that fails the way the minified graph fails.

Small tensors (at most INLINE_MAX elements) are written inline with their exact values; larger
ones are saved beside the script (``<name>_inputs.pt``), exact too. An input whose values the
failure does not depend on (generate_inputs replaced them) is one call that makes them again. Returns (path, text) pairs:
only the CLI writes files.
"""
from __future__ import annotations

import math
import os
import re
import types

INLINE_MAX = 64


def _import_line(name, value):
    if isinstance(value, types.ModuleType):
        return f"import {value.__name__} as {name}" if value.__name__ != name else f"import {name}"
    if isinstance(value, float):
        return f"{name} = float({str(value)!r})"
    if value is type(None):
        return f"{name} = type(None)"
    mod = getattr(value, "__module__", None)
    qual = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    if mod and qual and "." not in qual:
        return f"from {mod} import {qual} as {name}" if qual != name else f"from {mod} import {name}"
    if mod and qual:
        return f"import {mod}; {name} = {mod}.{qual}"
    raise ValueError(f"cannot write an import for {name} = {value!r}")


def graph_code(gm, class_name="Repro") -> str:
    """`class Repro(torch.nn.Module)` with the graph's forward, and the imports it needs."""
    code = gm.graph.python_code("self")
    used = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", code.src))
    imports = sorted({_import_line(k, v) for k, v in code.globals.items() if k in used} |
                     {"import torch"})
    body = "\n".join("    " + line if line.strip() else "" for line in code.src.strip("\n").splitlines())
    return "\n".join(imports) + f"\n\n\nclass {class_name}(torch.nn.Module):\n{body.rstrip()}\n"


def _literal(v):
    if isinstance(v, float):
        return f"float({str(v)!r})" if not math.isfinite(v) else repr(v)
    return repr(v)


def _tensor_expr(t, i, big_name):
    import torch
    from dynamo.minifier.unit import is_generated
    rg = ".requires_grad_()" if t.requires_grad else ""
    if is_generated(t):  # the same call as unit.generated_like()
        if t.is_floating_point() or t.is_complex():
            return (f"torch.randn({tuple(t.shape)}, dtype={t.dtype}, "
                    f"generator=torch.Generator().manual_seed(0)){rg}", False)
        return f"torch.zeros({tuple(t.shape)}, dtype={t.dtype}){rg}", False
    if t.numel() <= INLINE_MAX and t.device.type == "cpu" and t.layout == torch.strided:
        values = t.detach().reshape(-1).tolist()
        vals = ", ".join(_literal(x) for x in values)
        return (f"torch.tensor([{vals}], dtype={t.dtype}).reshape({tuple(t.shape)}){rg}", False)
    return (f"_saved[{i}]{'.detach().requires_grad_()' if t.requires_grad else ''}", True)


def inputs_code(inputs, big_name):
    """(code of load_inputs(), {index: tensor} to save beside)."""
    import torch
    lines, saved = [], {}
    for i, v in enumerate(inputs):
        if isinstance(v, torch.Tensor):
            expr, big = _tensor_expr(v, i, big_name)
            if big:
                saved[i] = v.detach().clone()
            lines.append(f"        {expr},  # {tuple(v.shape)} {v.dtype}")
        else:
            lines.append(f"        {_literal(v)},")
    load = (f"    _saved = torch.load(os.path.join(os.path.dirname(os.path.abspath(__file__)), "
            f"{big_name!r}))\n") if saved else ""
    return (f"def load_inputs():\n    \"\"\"The graph's inputs: exact values, or generated ones where the failure does "
            f"not depend on them.\"\"\"\n{load}"
            f"    return [\n" + "\n".join(lines) + "\n    ]\n", saved)


def inputs_path(path: str) -> str:
    """Where the inputs too large to inline go: beside the repro, <stem>_inputs.pt."""
    stem = os.path.splitext(os.path.basename(path))[0]
    return os.path.join(os.path.dirname(path), f"{stem}_inputs.pt")


def kernel_code(kernel) -> str:
    """KERNEL_SOURCE (the generated C++ as text) and KERNEL (its name and parameters)."""
    import pprint
    source = kernel["source"]
    if "'''" in source or "\\" in source:   # not as a raw string: as an escaped literal
        literal = repr(source)
    else:
        literal = "r'''" + source + "'''"
    params = pprint.pformat(kernel["params"], width=100, sort_dicts=False)
    return (f"#: The one kernel the code generator made of the graph: its C++ source as emitted.\n"
            f"KERNEL_SOURCE = {literal}\n\n"
            f"#: Its symbol, and its parameters in argument order (args[i] = the data of param i).\n"
            f"KERNEL = {{\"name\": {kernel['name']!r}, \"source\": KERNEL_SOURCE,\n"
            f"          \"params\": {params}}}\n")


def write(unit, spec: dict, config: dict, tol, fingerprint_text: str, path: str,
          command: str = "", stage: str = "dynamo", kernel=None):
    """[(path, text or tensors)]: repro.py and, when some input is large, its inputs file. With
    kernel (--after=kernel, kernel_stage.single_kernel()): the repro runs that kernel alone."""
    big_name = os.path.basename(inputs_path(path))
    load, saved = inputs_code(unit.inputs, big_name)
    kinds = ", ".join(unit.op_kinds())
    text = f'''"""Minified by dynamo-minify: {unit.size()} node(s) ({kinds}).

The failure: {fingerprint_text}
{('Made by: ' + command) if command else ''}
{('It compiles and runs the one kernel ' + kernel['name'] + ' below (the C++ source the code generator' + chr(10) + 'emitted) on the inputs, and compares its outputs with fp64 eager: the graph is the reference.' + chr(10)) if kernel else ''}Run it with `python3 {os.path.basename(path)}`: it needs only torch and dynamo.
"""
import os

import dynamo
from dynamo.minifier.query import repro_main
{graph_code(unit.gm)}

{load}

#: {"The AOT compiler the ATen graph failed in (the module that defines it)." if stage == "aot" else
    "The backend the graph failed in (a backends.def name, or the module that defines it)."}
BACKEND = {spec!r}
#: The dynamo.config values of the failing run.
CONFIG = {config!r}
#: Accuracy tolerance (None: the failure is an exception or a crash).
TOL = {tol!r}
{(chr(10) + kernel_code(kernel)) if kernel else ''}
if __name__ == "__main__":
    repro_main(Repro, load_inputs, BACKEND, CONFIG, TOL{f', stage="{stage}"' if stage != "dynamo" else ''}{', kernel=KERNEL' if kernel else ''})
'''
    out = [(path, text)]
    if saved:
        out.append((inputs_path(path), saved))
    return out
