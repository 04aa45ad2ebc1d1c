"""Python side of dynamo-minify / dynamo-bisect (issue 11).

So far: the failure fingerprint (fingerprint.py) and `ForkServer` runs each query in a
child forked from a server process that has already imported torch, so a query
costs a fork instead of a fresh interpreter, and a segfault or abort in a query
is a result (QueryResult.kind == "crash"), not the end of the minification.
"""
from .fork_server import ForkServer, QueryResult
from .fingerprint import Fingerprint, fingerprint, mask_message

__all__ = ["ForkServer", "QueryResult", "Fingerprint", "fingerprint", "mask_message"]
