"""Graph nodes that call a ``torch.autograd.Function`` (core/src/interp/call_constructs.cpp).

A captured ``Fn.apply(x, w)`` becomes one node whose target is ``trampoline(Fn)``: a plain Python
function, made once per class, that calls ``Fn.apply``. Running the node runs the user's forward,
and autograd records the user's backward, as in eager. (``Fn.apply`` itself is a builtin bound
to the class, with no ``__module__``: torch.fx cannot name it in generated code.)

The AOT backends trace graphs into ATen ops, which would differentiate the forward's ops instead
of calling the user's backward: ``aot_reason`` tells them to run such a graph on the eager runner.
"""
import weakref

__all__ = ["trampoline", "function_of", "aot_reason"]

_trampolines = weakref.WeakKeyDictionary()


def trampoline(fn_class):
    """The node target calling ``fn_class.apply`` (the same function object for a class)."""
    t = _trampolines.get(fn_class)
    if t is None:
        def t(*args):
            return fn_class.apply(*args)
        t.__name__ = "apply_" + fn_class.__name__
        t.__qualname__ = t.__name__
        t._dynamo_autograd_function = fn_class
        _trampolines[fn_class] = t
    return t


def function_of(target):
    """The torch.autograd.Function class a node target calls, or None."""
    return getattr(target, "_dynamo_autograd_function", None)


def aot_reason(gm):
    """Why the AOT layer must not trace ``gm`` (a torch.fx.GraphModule), or None."""
    for node in gm.graph.nodes:
        cls = function_of(node.target) if node.op == "call_function" else None
        if cls is not None:
            return (f"the graph calls the torch.autograd.Function {cls.__qualname__}, whose backward "
                    "is the user's: it runs on the eager runner so autograd calls that backward")
    return None
