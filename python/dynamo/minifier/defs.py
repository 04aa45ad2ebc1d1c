"""Reads the minifier's registries, minifier/reduction_passes.def and minifier/bisect_ladder.def.

The build copies them beside this package (python/CMakeLists.txt); from a source checkout they
are read from the repository's minifier/ folder. The same entries feed the CLIs' --print-passes,
the engine's pass order and the tables of docs/minify.md and docs/bisect.md.
"""
from __future__ import annotations

import functools
import os
import re
from typing import NamedTuple

_HERE = os.path.dirname(os.path.abspath(__file__))
_ARG = re.compile(r'\s*("(?:[^"\\]|\\.)*"(?:\s*"(?:[^"\\]|\\.)*")*|[^,]+)\s*(?:,|$)')


class ReductionPass(NamedTuple):
    name: str
    candidate: str
    description: str
    kernel_only: bool = False   #: DYNAMO_KERNEL_REDUCTION_PASS: run by --after=kernel only


class BisectStep(NamedTuple):
    name: str
    finds: str
    env: str


def _path(name: str) -> str:
    for folder in (_HERE, os.path.join(_HERE, "..", "..", "..", "minifier")):
        p = os.path.join(folder, name)
        if os.path.exists(p):
            return p
    raise FileNotFoundError(f"{name} is missing beside {_HERE}: rebuild (cmake --build build)")


def _entries(name: str):
    text = open(_path(name), encoding="utf-8").read()
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith(("//", "#")))
    out = []
    # A macro call may span lines: join everything up to the closing parenthesis of each call.
    for m in re.finditer(r'(DYNAMO_[A-Z_]+)\(((?:[^()"]|"(?:[^"\\]|\\.)*")*)\)', text):
        args = []
        for a in _ARG.findall(m.group(2)):
            a = a.strip()
            if a.startswith('"'):
                a = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', a))
            args.append(a)
        out.append((m.group(1), args))
    return out


@functools.lru_cache(maxsize=None)
def reduction_passes() -> tuple:
    """The passes of reduction_passes.def, in order."""
    return tuple(ReductionPass(*args, kernel_only=macro == "DYNAMO_KERNEL_REDUCTION_PASS")
                 for macro, args in _entries("reduction_passes.def")
                 if macro in ("DYNAMO_REDUCTION_PASS", "DYNAMO_KERNEL_REDUCTION_PASS"))


def stage_passes(stage: str) -> list:
    """The names of the passes a stage runs, in order (--after=kernel: all of them)."""
    return [p.name for p in reduction_passes() if stage == "kernel" or not p.kernel_only]


@functools.lru_cache(maxsize=None)
def bisect_backends() -> tuple:
    """The backend ladder of bisect_ladder.def, weakest first."""
    return tuple(args[0] for macro, args in _entries("bisect_ladder.def")
                 if macro == "DYNAMO_BISECT_BACKEND")


@functools.lru_cache(maxsize=None)
def bisect_steps() -> tuple:
    return tuple(BisectStep(*args) for macro, args in _entries("bisect_ladder.def")
                 if macro == "DYNAMO_BISECT_STEP")


def markdown_passes() -> str:
    rows = ["| pass | candidate | dropping a candidate |", "|---|---|---|"]
    rows += [f"| `{p.name}`{' (`--after=kernel`)' if p.kernel_only else ''} | {p.candidate} | "
             f"{p.description} |" for p in reduction_passes()]
    return "\n".join(rows) + "\n"


def markdown_bisect() -> str:
    rows = ["| step | finds | drives |", "|---|---|---|"]
    rows += [f"| `{s.name}` | {s.finds} | {'`' + s.env + '`' if s.env else ''} |"
             for s in bisect_steps()]
    rows.append("")
    rows.append("Backend ladder: " + " → ".join(f"`{b}`" for b in bisect_backends()) + ".")
    return "\n".join(rows) + "\n"


def debugging_reference() -> str:
    """The reference block of docs/debugging.md, generated from the .def files: backends
    (backends.def and the registered callables), graph passes (passes.def), decomposition groups
    (decompositions.def), reduction passes and bisect steps (minifier/*.def) and the environment
    variables the debugging tools read. tests/python/test_minify_engine.py keeps the doc in step
    (DYNAMO_UPDATE_GOLDEN=1 rewrites it)."""
    from dynamo import _C, list_passes
    from dynamo.aot import decompositions
    out = ["### Backends (`backends/backends.def`)", "", "| backend | what it does |", "|---|---|"]
    out += [f"| `{n}` | {d} |" for n, d in _C._compiler.backend_list()]
    out += ["", "### Graph passes (`core/include/dynamo/core/passes.def`; `DYNAMO_DISABLE_PASSES=a,b`)",
            "", "| pass | what it does |", "|---|---|"]
    out += [f"| `{n}` | {d} |" for n, d in list_passes()]
    out += ["", "### Decomposition groups (`backends/decompositions.def`; "
                "`DYNAMO_AOT_DISABLE_DECOMPS=a,b`)", "", "| group | what it lowers |", "|---|---|"]
    out += [f"| `{n}` | {d} |" for n, _, d in decompositions.groups()]
    out += ["", "### Reduction passes of dynamo-minify (`minifier/reduction_passes.def`)", "",
            markdown_passes().rstrip(), "",
            "### Steps of dynamo-bisect (`minifier/bisect_ladder.def`)", "", markdown_bisect().rstrip(),
            "", "### Environment variables", "", "| variable | read by | effect |", "|---|---|---|"]
    out += [f"| `{k}` | {who} | {what} |" for k, who, what in ENV_VARS]
    return "\n".join(out) + "\n"


#: (variable, read by, effect) of the debugging tools.
ENV_VARS = (
    ("DYNAMO_REPRO_AFTER", "dynamo.compile / optimize",
     "`dynamo`: every backend is wrapped and each graph and its inputs saved before it compiles; "
     "`aot`: the same for the AOT layer's forward and backward graphs (docs/minify.md)"),
    ("DYNAMO_REPRO_LEVEL", "the capture", "`4`: each graph's first run is also compared with fp64 eager"),
    ("DYNAMO_REPRO_TOL", "the capture", "the accuracy tolerance (default 1e-3, relative to each output's magnitude)"),
    ("DYNAMO_REPRO_DIR", "the capture", "where it writes (default `./dynamo_minify/run-<pid>`)"),
    ("DYNAMO_BISECT_BACKEND", "dynamo.compile / optimize", "replaces the backend every compile asks for (dynamo-bisect's ladder)"),
    ("DYNAMO_DISABLE_PASSES", "dynamo.config.disabled_passes", "comma-separated passes not to run"),
    ("DYNAMO_BISECT_PASS", "dynamo.compile / optimize", "`name:N[,name:N]`: only the first N applications "
     "of the pass in the process go ahead (dynamo-bisect's counted passes; DYNAMO_LOGS=passes and the "
     "compile records number them)"),
    ("DYNAMO_TEST_CORRUPT_NODE", "dynamo.compile / optimize", "tests only: turns on the test pass "
     "`test_corrupt_node`, which breaks the call nodes of this name (`name:value`: makes their "
     "values 1e-2 off) (docs/bisect.md)"),
    ("DYNAMO_TEST_MISCOMPILE", "the fused code generator", "tests only: `op[:value|compile|crash]` "
     "makes the emitters get that unary op wrong in every kernel holding it (docs/minify.md)"),
    ("DYNAMO_AOT_DISABLE_DECOMPS", "dynamo.aot", "comma-separated decomposition groups not to apply"),
    ("DYNAMO_LOGS", "dynamo.logs", "one line per event to stderr (docs/logs.md)"),
    ("DYNAMO_TRACE", "dynamo.config.trace_path", "the SQLite trace store to record into"),
)
