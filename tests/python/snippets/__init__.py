"""A corpus of model snippets written the way public projects write them (not the way the tracer
expects), to measure how much real model code Dynamo captures whole (issue 14).

Each snippet is a function decorated with ``@snippet`` that builds ``(callable, args)``: a module
or function and its example inputs. ``scripts/count_captured.py`` compiles every snippet with
``fullgraph=True`` and counts those captured whole (one graph, outputs equal to eager);
``tests/python/test_snippet_corpus.py`` checks that every snippet gives eager's results in
default mode and that those not marked ``breaks=...`` are captured whole.

``breaks``: a substring of the graph-break message the snippet still raises with
``fullgraph=True`` (what is not captured yet, and why).
"""
import importlib
import pkgutil

SNIPPETS = []


class Snippet:
    def __init__(self, fn, group, breaks):
        self.build, self.group, self.breaks = fn, group, breaks
        self.name = f"{group}.{fn.__name__}"


def snippet(fn=None, *, breaks=None):
    def register(f):
        SNIPPETS.append(Snippet(f, f.__module__.rsplit(".", 1)[-1], breaks))
        return f
    return register(fn) if fn is not None else register


def load():
    """Every snippet of the corpus, in file then definition order."""
    if not SNIPPETS:
        for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
            importlib.import_module(f"{__name__}.{info.name}")
    return list(SNIPPETS)
