"""dynamo.optimize / compile / run / disable / reset: the user-facing API over the frame hook."""
import functools
import inspect
import os
import sys
import threading

from dynamo import _C, backends, config

_state = threading.local()
_listeners = []        # callables receiving one dict per compile attempt
_listing_listeners = []  # those of them that read the listings (add_compile_listener(listings=True))


_debug_function_seen = {}   # DYNAMO_DEBUG_FUNCTION name -> whether any compile matched it


def _warn_unmatched_debug_function():
    for name, seen in _debug_function_seen.items():
        if not seen:
            import warnings
            warnings.warn_explicit(
                f"dynamo: DYNAMO_DEBUG_FUNCTION={name!r} matched no function compiled in this process, so "
                f"nothing was compiled; it names a function by its __name__ (a method's name without its "
                f"class, e.g. 'forward'); dynamo-explain lists the names it saw",
                UserWarning, "DYNAMO_DEBUG_FUNCTION", 0)


def _on_compile(record):
    if config.debug_function in _debug_function_seen:
        _debug_function_seen[config.debug_function] = True
    if config.verbose:
        g = record["graphs"][0] if record["graphs"] else None
        ops = sum(g["op_counts"].values()) if g else 0
        print(f"dynamo: {record['status']} {record['function']} ({record['file']}:{record['line']}) "
              f"ops={ops} breaks={len(record['breaks'])} {record['reason'].strip()}", file=sys.stderr)
    for listener in list(_listeners):
        listener(record)


def _skip_file_prefixes():
    """Files whose frames are never compiled as frames of their own: the standard library, torch
    itself and this package. Their code is still traced when user code calls it (inlined)."""
    import os
    import sysconfig
    import torch
    paths = sysconfig.get_paths()
    out = {os.path.join(paths["stdlib"], ""), os.path.join(os.path.dirname(__file__), ""),
           os.path.join(os.path.dirname(torch.__file__), ""),
           "<frozen "}  # frozen stdlib modules (codecs, os, ...) are named "<frozen name>"
    return sorted(out)


#: Libraries with nothing to capture: their Python functions run as ordinary Python when traced
#: code calls them (a graph break at the call), and their frames are never compiled. Listed in
#: docs/capture.md ("Skip list").
SKIPPED_LIBRARIES = ("numpy", "scipy", "pandas", "sklearn", "matplotlib", "PIL", "cv2", "h5py",
                     "yaml", "tqdm", "pytest", "_pytest", "pluggy", "IPython")


@functools.lru_cache(maxsize=1)
def _library_prefixes():
    """Directories of the skipped libraries that are installed (found without importing them)."""
    import importlib.util
    import os
    out = []
    for name in SKIPPED_LIBRARIES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            continue
        for loc in (spec.submodule_search_locations or []):
            out.append(os.path.join(loc, ""))
        if not spec.submodule_search_locations and spec.origin:
            out.append(spec.origin)
    return tuple(sorted(set(out)))


def _make_handle(backend, fullgraph, force_codes=(), dynamic=None):
    if os.environ.get("DYNAMO_BISECT_BACKEND"):
        backend = os.environ["DYNAMO_BISECT_BACKEND"]   # dynamo-bisect's backend ladder (docs/bisect.md)
    name, fn = backends.lookup(backend)
    if os.environ.get("DYNAMO_REPRO_AFTER"):
        from dynamo.minifier import capture  # dynamo-minify's capture run (docs/minify.md)
        name, fn = capture.wrap_backend(name, fn)
    if config.debug_function and config.debug_function not in _debug_function_seen:
        if not _debug_function_seen:
            import atexit
            atexit.register(_warn_unmatched_debug_function)
        _debug_function_seen[config.debug_function] = False
    native = fn is None
    return _C._compiler.make(name, None if native else fn, bool(fullgraph),
                             int(config.cache_size_limit), bool(config.suppress_errors), _on_compile,
                             _skip_file_prefixes(), config.debug_function or "", tuple(force_codes),
                             _library_prefixes(), tuple(config.disabled_passes),
                             -1 if dynamic is None else int(bool(dynamic)),
                             bool(config.automatic_dynamic_shapes), _pass_limits(),
                             os.environ.get("DYNAMO_TEST_CORRUPT_NODE", "").strip())


def _pass_limits():
    """((pass, N), ...) of DYNAMO_BISECT_PASS=name:N[,name:N]: dynamo-bisect's counted passes
    (docs/bisect.md): only the first N applications of the pass in this process go ahead."""
    text = os.environ.get("DYNAMO_BISECT_PASS", "").strip()
    if not text:
        return ()
    known = [name for name, _ in _C._compiler.pass_list(True)]
    out = []
    for item in (p.strip() for p in text.split(",") if p.strip()):
        name, _, n = item.partition(":")
        if name not in known or not n.isdigit():
            raise _C.UserError(
                f"error: DYNAMO_BISECT_PASS={text!r}: '{item}' is not <pass>:<applications>\n"
                f"  = hint: a pass of passes.def ({', '.join(known)}) and how many of its first "
                f"applications to make, e.g. DYNAMO_BISECT_PASS={known[0]}:3")
        out.append((name, int(n)))
    return tuple(out)


class _Context:
    """Sets the thread's hook mode for the duration of a with block or a call."""

    def __init__(self, mode, handle):
        self._mode = mode
        self._handle = handle

    def __enter__(self):
        stack = getattr(_state, "stack", None)
        if stack is None:
            stack = _state.stack = []
        stack.append(_C._compiler.set_mode(self._mode, self._handle))
        return self

    def __exit__(self, *exc):
        mode, handle = _state.stack.pop()
        _C._compiler.set_mode(mode, handle)
        return False

    def __call__(self, fn):
        remake = getattr(self, "_remake", None)
        forward = _forward_code(fn)
        if remake is not None and forward is not None and _in_skipped_file(forward):
            # A module passed to optimize(...)(module) is compiled like compile(module): its
            # forward even when torch defines it (nn.Sequential), which the frame-level skip
            # list would otherwise leave eager. That takes a handle of its own (force codes
            # are fixed per handle); a module defined elsewhere shares this context's handle,
            # and the with-block form keeps the skip list.
            return _wrap(fn, remake((forward,)))
        return _wrap(fn, self)


def _in_skipped_file(code):
    """Whether frames of `code` are skipped by default (torch, the standard library, ...)."""
    return any(code.co_filename.startswith(p) for p in _skip_file_prefixes() + list(_library_prefixes()))


def _forward_code(fn):
    """The code of an nn.Module's class-level forward (the frame its call runs), or None."""
    import torch
    if not isinstance(fn, torch.nn.Module):
        return None
    forward = getattr(type(fn), "forward", None)
    return getattr(forward, "__code__", None)


def _wrap(fn, ctx):
    import torch
    if isinstance(fn, torch.nn.Module):
        return OptimizedModule(fn, ctx, getattr(ctx, "_compile_args", {}))
    if not callable(fn):
        raise _C.UserError(
            f"error: dynamo can only compile a function or an nn.Module, not {type(fn).__name__} ({fn!r})\n"
            f"  = hint: pass the function itself, e.g. dynamo.compile(model) or dynamo.compile(f)")
    if inspect.isgeneratorfunction(fn) or inspect.iscoroutinefunction(fn):
        raise _C.UserError(f"error: dynamo cannot compile generator or coroutine function {fn.__qualname__}\n"
                           f"  = hint: compile the function that consumes it instead")

    # A C wrapper: sets the hook mode around the call with no Python frame of its own.
    compiled = _C._compiler.wrap(fn, ctx._mode, ctx._handle)
    functools.update_wrapper(compiled, fn)
    return compiled


def _optimized_module_class():
    import torch

    class OptimizedModule(torch.nn.Module):
        """What dynamo.compile(module) returns: an nn.Module that runs the original under Dynamo.

        It shares the original's parameter, buffer and submodule dicts, so parameters(),
        state_dict() keys, optimizers and parent modules see exactly the original's (no
        `_orig_mod.` prefix); attributes read or set on it reach the original. copy.deepcopy and
        pickle give a compiled copy of a copy of the original."""

        _own = ("_orig_mod", "_dynamo_args", "forward", "training")

        def __init__(self, module, ctx, compile_args):
            super().__init__()
            d = self.__dict__
            # Hook dicts are shared too: a hook registered on the wrapper is the original's, and
            # runs once, when the wrapper calls the original (see __call__).
            for shared in ("_parameters", "_buffers", "_modules", "_non_persistent_buffers_set",
                           "_forward_hooks", "_forward_pre_hooks", "_backward_hooks"):
                d[shared] = getattr(module, shared)
            d["_orig_mod"] = module
            d["_dynamo_args"] = compile_args
            d["training"] = module.training
            # A C wrapper: switches the hook mode, then calls the original module.
            d["forward"] = _C._compiler.wrap(module, ctx._mode, ctx._handle)

        def __call__(self, *args, **kwargs):
            # Straight to the original module's call (its hooks, global ones included, run there
            # once): nn.Module.__call__ here would run the global hooks a second time.
            return self.__dict__["forward"](*args, **kwargs)

        def __getattr__(self, name):
            try:
                return super().__getattr__(name)
            except AttributeError:
                return getattr(self.__dict__["_orig_mod"], name)

        def __setattr__(self, name, value):
            if name in OptimizedModule._own:
                self.__dict__[name] = value
            else:
                setattr(self.__dict__["_orig_mod"], name, value)

        def train(self, mode=True):
            self._orig_mod.train(mode)
            self.__dict__["training"] = mode
            return self

        def __deepcopy__(self, memo):
            import copy
            return compile(copy.deepcopy(self._orig_mod, memo), **self._dynamo_args)

        def __reduce__(self):
            return (_recompile, (self._orig_mod, self._dynamo_args))

        def __repr__(self):
            return f"dynamo.compile({self._orig_mod!r})"

    return OptimizedModule


def _recompile(module, args):
    return compile(module, **args)


OptimizedModule = _optimized_module_class()


def _skip_torch_call_machinery():
    """nn.Module.__call__ (hooks, then forward) runs as Python; the forward frames it calls are
    captured. Capturing the wrapper itself would only trace hook bookkeeping."""
    import torch
    for name in ("_call_impl", "_wrapped_call_impl", "__call__"):
        fn = getattr(torch.nn.Module, name, None)
        if fn is not None and hasattr(fn, "__code__"):
            _C._compiler.disable_code(fn.__code__)


_skip_torch_call_machinery()
_C._compiler.disable_code(_Context.__enter__.__code__)
_C._compiler.disable_code(_Context.__exit__.__code__)


def optimize(backend="eager", nopython=False):
    """A context manager and decorator that compiles the frames run inside it.

        with dynamo.optimize("eager"):
            model(x)

        @dynamo.optimize(my_compiler)
        def f(x): ...
    """
    ctx = _Context("compile", _make_handle(backend, nopython))
    ctx._remake = functools.partial(_module_context, backend, nopython, None)
    return ctx


def _module_context(backend, fullgraph, dynamic, force_codes):
    """The context that compiles one module: its forward code is forced past the skip list."""
    ctx = _Context("compile", _make_handle(backend, fullgraph, force_codes, dynamic))
    ctx._compile_args = {"backend": backend, "fullgraph": fullgraph, "dynamic": dynamic}
    return ctx


def compile(fn_or_module, backend="eager", fullgraph=False, dynamic=None):
    """Returns a compiled version of a function or an nn.Module (the module keeps its parameters
    and state_dict). With fullgraph=True the first graph break raises dynamo.Unsupported.

    dynamic: None (sizes start static; one that changes is recompiled as dynamic when
    config.automatic_dynamic_shapes is on), True (every input size is dynamic from the first
    compile, 0 and 1 excepted), False (every size static: one compile per size)."""
    if dynamic not in (None, True, False):
        raise _C.UserError(
            f"error: dynamo.compile(dynamic=...) must be None, True or False, got {dynamic!r}\n"
            f"  = hint: None recompiles a size that changed as dynamic; True makes sizes dynamic "
            f"from the start; False keeps every size static")
    if not callable(fn_or_module):
        raise _C.UserError(
            f"error: dynamo.compile needs a function or an nn.Module, got {type(fn_or_module).__name__} "
            f"({fn_or_module!r})\n  = hint: pass the function itself, e.g. dynamo.compile(model)")
    # The module's own forward is compiled even when it lives in torch's files (nn.Linear).
    forward = _forward_code(fn_or_module)
    ctx = _module_context(backend, fullgraph, dynamic, (forward,) if forward is not None else ())
    return _wrap(fn_or_module, ctx)


def run(fn=None):
    """Run-only mode: reuse what was compiled, never compile anew. As a decorator or a context
    manager (dynamo.run() with no argument)."""
    ctx = _Context("run_only", None)
    return ctx if fn is None else _wrap(getattr(fn, "_dynamo_orig", fn), ctx)


def disable(fn=None):
    """Runs fn (or the with block) without capture, also for what it calls."""
    if fn is None:
        return _Context("off", None)
    _C._compiler.disable_code(fn.__code__) if hasattr(fn, "__code__") else None
    return _wrap(fn, _Context("off", None))


def reset():
    """Forgets every compiled entry: the next calls compile anew."""
    _C._compiler.reset()


def add_compile_listener(fn, listings=True):
    """fn(record) is called after every compile attempt (a dict: graphs, breaks, guards, timings).

    listings: whether fn reads the record's listings: each graph's ``text`` and ``json``, the
    passes' ``graph``, ``guard_text`` and ``bytecode``. They cost about a third of a compile and
    are built only when someone reads them (a listener that asked, a trace store, a log); with
    listings=False they are "" unless another reader asked (``record["listings"]`` says)."""
    _listeners.append(fn)
    if listings:
        _listing_listeners.append(fn)
        _C._compiler.set_listener_listings(True)
    return fn


def remove_compile_listener(fn):
    _listeners.remove(fn)
    if fn in _listing_listeners:
        _listing_listeners.remove(fn)
        _C._compiler.set_listener_listings(bool(_listing_listeners))


def list_passes():
    """[(name, description)] of the graph passes, in the order they run (passes.def)."""
    return [tuple(row) for row in _C._compiler.pass_list()]


def _check_dim(t, dim, what):
    import torch
    if not isinstance(t, torch.Tensor):
        raise _C.UserError(f"error: dynamo.{what} needs a torch.Tensor, got {type(t).__name__}\n"
                           f"  = hint: call it on the input tensor before passing it to the compiled function")
    if isinstance(dim, bool) or not isinstance(dim, int) or not -t.dim() <= dim < max(t.dim(), 1):
        raise _C.UserError(f"error: dynamo.{what}: dim {dim!r} is out of range for a tensor with {t.dim()} "
                           f"dimensions\n  = hint: pass a dimension index from {-t.dim()} to {t.dim() - 1}")
    return dim % t.dim()


def mark_dynamic(t, dim, min=None, max=None):
    """Makes size `dim` of tensor `t` dynamic from the first compile (no recompile when it
    changes), optionally within [min, max]. Sizes 0 and 1 are still specialised. The mark lives
    on the tensor (t._dynamo_dynamic_dims), as in PyTorch."""
    dim = _check_dim(t, dim, "mark_dynamic")
    for name, v in (("min", min), ("max", max)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise _C.UserError(f"error: dynamo.mark_dynamic: {name} must be None or an int >= 0, got {v!r}")
    if min is not None and max is not None and min > max:
        raise _C.UserError(f"error: dynamo.mark_dynamic: min {min} is greater than max {max}")
    dims = dict(getattr(t, "_dynamo_dynamic_dims", {}) or {})
    dims[dim] = (min, max)
    t._dynamo_dynamic_dims = dims
    static = set(getattr(t, "_dynamo_static_dims", set()) or set())
    static.discard(dim)
    t._dynamo_static_dims = static


def mark_static(t, dim):
    """Keeps size `dim` of tensor `t` static: a change recompiles for the new size, even with
    automatic dynamic shapes or dynamic=True."""
    dim = _check_dim(t, dim, "mark_static")
    static = set(getattr(t, "_dynamo_static_dims", set()) or set())
    static.add(dim)
    t._dynamo_static_dims = static
    dims = dict(getattr(t, "_dynamo_dynamic_dims", {}) or {})
    dims.pop(dim, None)
    t._dynamo_dynamic_dims = dims
