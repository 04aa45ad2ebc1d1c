"""The backend registry: names users pass to dynamo.optimize / dynamo.compile.

Two kinds: the C++ backends of ``backends/backends.def`` (``"eager"``: Dynamo's C++ graph runner,
no FX), and Python callables ``compiler(gm, example_inputs) -> callable`` where ``gm`` is a
``torch.fx.GraphModule`` of the captured graph and ``example_inputs`` the real input tensors
(registered with ``register_backend``, or passed directly).
"""
_REGISTRY = {}


def register_backend(name=None):
    """Decorator: ``@register_backend("mine")`` makes ``backend="mine"`` work."""
    def wrap(fn):
        _REGISTRY[name or fn.__name__] = fn
        return fn
    return wrap


def _native():
    """{name: description} of the C++ backends (backends.def)."""
    from dynamo import _C
    return dict(_C._compiler.backend_list())


def list_backends():
    """Names of the backends: the C++ ones of backends.def and the registered callables, sorted."""
    return sorted(set(_REGISTRY) | set(_native()))


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
    if backend in _native() and backend not in _REGISTRY:
        return backend, None      # built in C++: the compiler makes it by name
    if backend not in _REGISTRY:
        raise UserError(
            f"error: unknown backend '{backend}'\n"
            f"  = hint: known backends: {', '.join(list_backends())}; "
            f"or pass a callable compiler(gm, example_inputs)")
    return backend, _REGISTRY[backend]


@register_backend("fx_eager")
def fx_eager(gm, example_inputs):
    """Runs the torch.fx.GraphModule of the captured graph: checks the FX bridge end to end."""
    return gm.forward
