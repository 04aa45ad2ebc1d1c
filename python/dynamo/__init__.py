"""Dynamo: graph capture for PyTorch, with debugging tools."""
from dynamo._C import (  # noqa: F401
    __version__, DynamoError, UserError, InternalError, TraceStoreError, Unsupported,
    BackendCompilerFailed,
)
