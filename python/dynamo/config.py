"""Dynamo's settings. Change them before compiling: a compiler reads them when it is made.

    import dynamo
    dynamo.config.cache_size_limit = 16
    dynamo.config.suppress_errors = False

Every option is in one table, ``OPTIONS`` below; the checks made at assignment, this module's
help text and ``markdown_table()`` (for the docs) all read it. An unknown name or a value of the
wrong kind raises ``dynamo.UserError`` at the assignment, naming the option and what it accepts:

    dynamo.config.cache_size_limt = 2   # UserError: unknown option; did you mean cache_size_limit?
"""
import difflib
import os
import sys
import types
from typing import Any, Callable, NamedTuple, Optional

from dynamo._C import UserError

_INT_MAX = 2**31 - 1  # the C++ side stores cache_size_limit in an int


class Option(NamedTuple):
    """One setting: its name, default, one-line doc and the check its values must pass."""
    name: str
    default: Any
    doc: str
    accepts: str                     #: what it takes, in words ("True or False")
    check: Callable[[Any], Any]      #: the value to store; raises _Rejected for a bad one
    env: Optional[str] = None        #: environment variable that sets the default


class _Rejected(Exception):
    """Raised by a check for a value its option does not take."""


def _check_bool(v):
    if not isinstance(v, bool):
        raise _Rejected
    return v


def _check_limit(v):
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= _INT_MAX:
        raise _Rejected
    return v


def _check_path(v):
    if isinstance(v, os.PathLike):
        v = os.fspath(v)
    if not isinstance(v, str) or not v:
        raise _Rejected
    return v


def _check_name(v):
    if not isinstance(v, str) or not v:
        raise _Rejected
    return v


def _pass_names():
    from dynamo import _C
    return tuple(name for name, _ in _C._compiler.pass_list(True))  # test-only passes too


def _check_passes(v):
    """Pass names (a sequence, or one comma-separated str as in DYNAMO_DISABLE_PASSES)."""
    if isinstance(v, str):
        v = [p.strip() for p in v.split(",") if p.strip()]
    if not isinstance(v, (list, tuple)) or not all(isinstance(p, str) for p in v):
        raise _Rejected
    known = _pass_names()
    if any(p not in known for p in v):
        raise _Rejected
    return tuple(v)


def _optional(check):
    """The check, also taking None (the option is off)."""
    return lambda v: None if v is None else check(v)


OPTIONS = (
    Option("cache_size_limit", 8,
           "Compiled entries per code object; past it the function runs eagerly (one warning).",
           f"an int from 0 to {_INT_MAX}", _check_limit),
    Option("suppress_errors", True,
           "A failure to compile (backend error, internal error) runs the function eagerly with "
           "one warning instead of raising. Graph breaks with fullgraph=True always raise.",
           "True or False", _check_bool),
    Option("verbose", False, "Print one line per compile to stderr.", "True or False",
           _check_bool),
    Option("trace_path", None,
           "Path of the SQLite trace store to record into; None: off.",
           "None or a non-empty path (str or os.PathLike)", _optional(_check_path),
           env="DYNAMO_TRACE"),
    Option("debug_function", None,
           "Compile only frames whose function name (co_name) is this; None: all.",
           "None or a non-empty function name (str)", _optional(_check_name),
           env="DYNAMO_DEBUG_FUNCTION"),
    Option("disabled_passes", (),
           "Passes of the pipeline not to run (docs/passes.md; dynamo.list_passes() names them).",
           "a tuple of pass names (dead_code_elimination), or one comma-separated str",
           _check_passes, env="DYNAMO_DISABLE_PASSES"),
    Option("automatic_dynamic_shapes", True,
           "A tensor size that changes between calls is recompiled once as a dynamic (symbolic) "
           "size instead of once per value (docs/dynamic-shapes.md). Sizes 0 and 1 stay "
           "specialised. False: every size is static unless marked with dynamo.mark_dynamic.",
           "True or False", _check_bool),
)

_BY_NAME = {o.name: o for o in OPTIONS}


def _default(option):
    if option.env and os.environ.get(option.env):
        return os.environ[option.env]
    return option.default


def _unknown_option(name):
    close = difflib.get_close_matches(name, _BY_NAME, n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    return UserError(f"error: dynamo.config has no option '{name}'\n"
                     f"  = hint: {hint}options: {', '.join(_BY_NAME)}")


def _bad_value(option, value):
    return UserError(f"error: dynamo.config.{option.name} must be {option.accepts}, "
                     f"got {type(value).__name__} {value!r}\n"
                     f"  = hint: {option.doc} Default: {option.default!r}.")


def validate(name, value):
    """The value that ``dynamo.config.<name> = value`` stores; raises dynamo.UserError for an
    unknown name or a value the option does not take."""
    option = _BY_NAME.get(name)
    if option is None:
        raise _unknown_option(name)
    try:
        return option.check(value)
    except _Rejected:
        raise _bad_value(option, value) from None


def markdown_table():
    """The options as a Markdown table (name, default, accepted values, doc) for the docs."""
    rows = ["| option | default | accepts | what it does |", "|---|---|---|---|"]
    for o in OPTIONS:
        env = f" `{o.env}=...` sets the default." if o.env else ""
        rows.append(f"| `{o.name}` | `{o.default!r}` | {o.accepts} | {o.doc}{env} |")
    return "\n".join(rows) + "\n"


class _ConfigModule(types.ModuleType):
    """This module's class: checks every assignment to a public name against OPTIONS."""

    def __setattr__(self, name, value):
        if not name.startswith("_"):
            value = validate(name, value)
        super().__setattr__(name, value)

    def __delattr__(self, name):
        if name in _BY_NAME:
            raise UserError(f"error: dynamo.config.{name} cannot be deleted\n"
                            f"  = hint: assign its default instead: "
                            f"dynamo.config.{name} = {_BY_NAME[name].default!r}")
        super().__delattr__(name)


def _help_text():
    lines = [__doc__, "Options:", ""]
    for o in OPTIONS:
        env = f" ({o.env}=... sets the default)" if o.env else ""
        lines.append(f"    {o.name} = {o.default!r}{env}\n        {o.doc} Accepts {o.accepts}.")
    return "\n".join(lines) + "\n"


for _o in OPTIONS:
    globals()[_o.name] = validate(_o.name, _default(_o))
__doc__ = _help_text()
sys.modules[__name__].__class__ = _ConfigModule
del _o
