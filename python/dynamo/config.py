"""Dynamo's settings. Change them before compiling: a compiler reads them when it is made.

    import dynamo
    dynamo.config.cache_size_limit = 16
    dynamo.config.suppress_errors = False
"""
import os

#: Compiled entries per code object; past it the function runs eagerly (one warning).
cache_size_limit = 8
#: A failure to compile (backend error, internal error) runs the function eagerly with one
#: warning instead of raising. Graph breaks with fullgraph=True always raise.
suppress_errors = True
#: Print one line per compile to stderr.
verbose = False
#: Path of the SQLite trace store to record into; None: off. DYNAMO_TRACE=path.db sets it.
trace_path = os.environ.get("DYNAMO_TRACE") or None
#: Compile only frames whose function name (co_name) is this; DYNAMO_DEBUG_FUNCTION=name sets it.
debug_function = os.environ.get("DYNAMO_DEBUG_FUNCTION") or None
