"""The backend registry: names users pass to dynamo.optimize / dynamo.compile.

A backend is a callable ``compiler(gm, example_inputs) -> callable`` where ``gm`` is a
``torch.fx.GraphModule`` of the captured graph and ``example_inputs`` the real input tensors.
``"eager"`` is special: Dynamo runs the captured graph with its own C++ runner, without FX.
"""
_REGISTRY = {}


def register_backend(name=None):
    """Decorator: ``@register_backend("mine")`` makes ``backend="mine"`` work."""
    def wrap(fn):
        _REGISTRY[name or fn.__name__] = fn
        return fn
    return wrap


def list_backends():
    """Names of the registered backends, sorted."""
    return sorted(_REGISTRY)


def lookup(backend):
    """(name, callable-or-None) for a backend name or callable. Raises dynamo.UserError for an
    unknown name, listing the known ones."""
    from dynamo._C import UserError
    if callable(backend):
        return getattr(backend, "__name__", "custom"), backend
    if not isinstance(backend, str):
        raise UserError(
            f"error: backend must be a name or a callable, got {type(backend).__name__}\n"
            f"  = hint: use one of {list_backends()} or pass compiler(gm, example_inputs)")
    if backend not in _REGISTRY:
        raise UserError(
            f"error: unknown backend '{backend}'\n"
            f"  = hint: known backends: {', '.join(list_backends())}; "
            f"or pass a callable compiler(gm, example_inputs)")
    return backend, _REGISTRY[backend]


@register_backend("eager")
def eager(gm, example_inputs):
    """Runs the captured graph as it is (Dynamo's C++ graph runner; this FX form is the fallback)."""
    return gm.forward


@register_backend("fx_eager")
def fx_eager(gm, example_inputs):
    """Runs the torch.fx.GraphModule of the captured graph: checks the FX bridge end to end."""
    return gm.forward
