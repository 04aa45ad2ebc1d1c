"""The reduction passes of dynamo-minify, one module each, listed in minifier/reduction_passes.def.

A pass is a module with one function, ``reduce(unit, oracle) -> Unit | None``: it walks its
candidates in a fixed order, asks ``oracle.should_keep()`` once per candidate, and returns the
unit without the candidates it was told to drop (None when that leaves no valid graph). It never
sees chunks or queries: the engine (engine.py) picks which candidates to drop and tests the result.
"""
import importlib

from dynamo.minifier import defs


def load(name):
    """The module of the pass called name (reduction_passes.def)."""
    if name not in {p.name for p in defs.reduction_passes()}:
        raise KeyError(name)
    return importlib.import_module(f"dynamo.minifier.passes.{name}")
