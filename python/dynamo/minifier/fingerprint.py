"""The failure fingerprint: what "the same failure" means to the minifier.

A fingerprint is (kind, exception type, masked message, innermost Dynamo frame).
Numbers, hex addresses and tensor shapes are masked in the message so that a
smaller graph failing the same way matches; the innermost frame is the last
traceback frame whose file lies inside the dynamo package (line numbers are
left out: a frame is a file and a function). A crash fingerprints by its
signal. A query whose fingerprint differs from the original's counts as
passing: the minifier reports it and never follows it.
"""
from __future__ import annotations

import dataclasses
import os
import re
import signal as _signal

from .fork_server import QueryResult

_HEX = re.compile(r"0x[0-9a-fA-F]+")
_NUM = re.compile(r"(?<![A-Za-z_])[-+]?\d+(\.\d+)?([eE][-+]?\d+)?")
_SHAPE = re.compile(r"(?<![A-Za-z_])\d+x\d+\b")  # "2x64": a shape in a matmul message
_PATH = re.compile(r"(?<![\w.])/(?:[\w.+-]+/)+[\w.+-]*")  # an absolute file path
_KERNEL = re.compile(r"\bk\d+(?:_[A-Za-z0-9]+)+\b")       # codegen's kernel names: k0_tanh_mul
# A C++ compiler's echo of the offending source line and its caret line ("  12 |   b1[0] = ...",
# "     |     ^~~~"): the code it shows changes as the graph shrinks, the error does not.
_SOURCE_ECHO = re.compile(r"^[ \t]*(\d+[ \t]*)?\|.*$\n?", re.MULTILINE)
_FRAME = re.compile(r'^\s*File "([^"]+)", line \d+, in (\S+)', re.MULTILINE)
_DYNAMO_DIR = os.sep + "dynamo" + os.sep
_MINIFIER_DIR = _DYNAMO_DIR + "minifier" + os.sep


def mask_message(message: str) -> str:
    """Masks addresses and numbers: 'size 64 at 0x7f..' -> 'size N at ADDR'; also file paths
    ('/tmp/x/2de3...cpp' -> PATH) and the fused backend's generated kernel names
    (k0_sum_1_mean_add_1 -> KERNEL), which change as the graph shrinks, and a C++ compiler's
    echo of the source line it stopped at."""
    message = _SOURCE_ECHO.sub("", message)
    message = _PATH.sub("PATH", message)
    message = _KERNEL.sub("KERNEL", message)
    message = _SHAPE.sub("NxN", _HEX.sub("ADDR", message))
    return _NUM.sub("N", message).strip()


def innermost_dynamo_frame(traceback_text: str) -> str:
    """'dynamo/backends.py:compile' for the innermost frame in Dynamo's code, or ''."""
    last = ""
    for path, func in _FRAME.findall(traceback_text):
        i = path.rfind(_DYNAMO_DIR)
        # The minifier's own frames (the fork server running the query) are not the failure's.
        if i >= 0 and _MINIFIER_DIR not in path[i:]:
            last = f"{path[i + 1:]}:{func}"
    return last


@dataclasses.dataclass(frozen=True)
class Fingerprint:
    kind: str  # "exception", "crash", "exit", "timeout", "accuracy"
    exc_type: str = ""
    message: str = ""
    frame: str = ""

    def describe(self) -> str:
        if self.kind == "crash":
            return f"crash ({self.exc_type})"
        if self.kind == "exception":
            where = f" in {self.frame}" if self.frame else ""
            return f"{self.exc_type}: {self.message}{where}"
        if self.kind == "accuracy":
            return "divergence from fp64 eager beyond the tolerance"
        return self.kind + (f" ({self.exc_type})" if self.exc_type else "")


def fingerprint(result: QueryResult) -> Fingerprint | None:
    """The fingerprint of a failed query; None when it passed."""
    if not result.failed:
        return None
    if result.kind == "exception":
        return Fingerprint("exception", result.exc_type, mask_message(result.message),
                           innermost_dynamo_frame(result.traceback))
    if result.kind == "crash":
        try:
            name = _signal.Signals(result.signal).name
        except ValueError:
            name = f"signal {result.signal}"
        return Fingerprint("crash", name)
    if result.kind == "exit":
        return Fingerprint("exit", f"exit code {result.exit_code}")
    return Fingerprint(result.kind)


def accuracy_fingerprint() -> Fingerprint:
    """For --accuracy: a divergence from the fp64 reference beyond the tolerance. Whatever output
    node shows it: the divergence first shows at the graph's last op (log_softmax) and moves to
    the faulty op (relu) as the graph shrinks; requiring the same node kind would keep the whole
    path from the faulty op to the output (7 of 13 nodes in test_minify_accuracy's model instead
    of 1). An exception or a crash while minifying a divergence is another failure."""
    return Fingerprint("accuracy")
