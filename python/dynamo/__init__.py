"""Dynamo: graph capture for PyTorch, with debugging tools.

    import dynamo
    fast = dynamo.compile(model)                 # or @dynamo.optimize("eager")
    out = fast(x)
"""
from dynamo._C import (  # noqa: F401
    __version__, DynamoError, UserError, InternalError, TraceStoreError, Unsupported,
    BackendCompilerFailed,
)
from dynamo import config  # noqa: F401
from dynamo.backends import list_backends, register_backend  # noqa: F401
from dynamo.eval_frame import (  # noqa: F401
    optimize, compile, run, disable, reset, mark_dynamic, mark_static, add_compile_listener, remove_compile_listener, list_passes,
)
from dynamo import recording  # noqa: E402,F401  (records compiles when config.trace_path / DYNAMO_TRACE is set)
from dynamo import utils, logs  # noqa: E402,F401  (compile_times collector; DYNAMO_LOGS)
from dynamo.explain import explain  # noqa: E402,F401
from dynamo.profiling import profile_recompiles  # noqa: E402,F401
from dynamo import context_nodes  # noqa: E402,F401  (graph nodes of autocast and inference-mode blocks: imported before any trace)
