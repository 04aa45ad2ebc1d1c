"""Harness of the adversarial tests (issue #7): each case is a builder that makes a fresh target
(function or module) with its state, and a driver that calls it several times, changing inputs or
state between calls. The harness runs the builder twice from the same seed, drives one target
eagerly and one compiled (default settings: graph breaks allowed, backend eager), and compares
everything the driver observed, call by call: results (strictly: container types, dict key order,
dtypes, identity facts the driver computes), exceptions (type and message) and the side effects
the case exposes through `observe`."""
import dataclasses
import math
import random
import warnings

import numpy as np
import torch

import dynamo
from capture_harness import Recorder

CALLS = 3


class Case:
    """build() -> (target, drive) or (target, drive, observe).

    drive(f, i) calls f (eager target or compiled target) for call number i and returns what is
    compared; it may change inputs or state before calling. observe() returns the side effects
    after each call (also after a raise). Cases failing today are named in their file's XFAIL
    dict (name -> one-line diagnosis) and become strict xfails through params()."""

    def __init__(self, name, build, calls=CALLS, seed=0):
        self.name, self.build, self.calls, self.seed = name, build, calls, seed

    def __repr__(self):
        return self.name


def same(a, b, path="out"):
    """Strict equality; returns None when equal, else a message naming the first difference."""
    if type(a) is not type(b):
        return f"{path}: type {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, torch.Tensor):
        if a.dtype != b.dtype or a.shape != b.shape or a.device != b.device:
            return f"{path}: tensor {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}"
        if a.requires_grad != b.requires_grad:
            return f"{path}: requires_grad {a.requires_grad} vs {b.requires_grad}"
        if a.is_floating_point() or a.is_complex():
            if not torch.equal(a.isnan(), b.isnan()):
                return f"{path}: nan pattern differs"
            a, b = a.nan_to_num(0.0), b.nan_to_num(0.0)
        if not torch.equal(a.detach(), b.detach()):
            return f"{path}: values differ\n{a}\nvs\n{b}"
        return None
    if isinstance(a, np.ndarray):
        if a.dtype != b.dtype or a.shape != b.shape:
            return f"{path}: ndarray {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
        return None if np.array_equal(a, b, equal_nan=a.dtype.kind in "fc") else f"{path}: ndarray values {a} vs {b}"
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return f"{path}: len {len(a)} vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            m = same(x, y, f"{path}[{i}]")
            if m:
                return m
        if hasattr(a, "__dict__") and not isinstance(a, torch.Size):
            return same(vars(a), vars(b), f"{path}.__dict__")
        return None
    if isinstance(a, dict):
        if list(a.keys()) != list(b.keys()):
            return f"{path}: keys {list(a.keys())} vs {list(b.keys())}"
        for k in a:
            m = same(a[k], b[k], f"{path}[{k!r}]")
            if m:
                return m
        if hasattr(a, "__dict__"):
            return same(vars(a), vars(b), f"{path}.__dict__")
        if hasattr(a, "default_factory"):
            return None if a.default_factory is b.default_factory else f"{path}: default_factory"
        return None
    if isinstance(a, float):
        if math.isnan(a) and math.isnan(b):
            return None
        return None if a == b and math.copysign(1, a) == math.copysign(1, b) else f"{path}: {a!r} vs {b!r}"
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return same(vars(a), vars(b), f"{path}.<dataclass>")
    if isinstance(a, (set, frozenset)):
        return None if a == b else f"{path}: {a!r} vs {b!r}"
    try:
        eq = a == b
        if isinstance(eq, np.ndarray):
            eq = eq.all()
        eq = bool(eq)
    except Exception as e:  # noqa: BLE001
        return f"{path}: cannot compare {type(a).__name__}: {e}"
    return None if eq else f"{path}: {a!r} vs {b!r}"


def _drive(case, compiled):
    random.seed(case.seed)
    np.random.seed(case.seed)
    torch.manual_seed(case.seed)
    built = case.build()
    target, drive = built[0], built[1]
    observe = built[2] if len(built) > 2 else None
    f = dynamo.compile(target) if compiled else target
    log = []
    for i in range(case.calls):
        random.seed(100 + i)
        np.random.seed(100 + i)
        torch.manual_seed(100 + i)
        try:
            r = ("ok", drive(f, i))
        except Exception as e:  # noqa: BLE001 - the exception is the result being compared
            r = ("raise", type(e), str(e))
        log.append((r, observe() if observe else None))
    return log


def run_case(case, record=None):
    """Runs eager then compiled; returns (eager_log, compiled_log, recorder, warnings)."""
    dynamo.reset()
    eager = _drive(case, False)
    dynamo.reset()
    with warnings.catch_warnings(record=True) as w, Recorder() as rec:
        warnings.simplefilter("always")
        compiled = _drive(case, True)
    dynamo.reset()
    return eager, compiled, rec, [str(x.message) for x in w]


def _short(v, n=300):
    r = repr(v)
    return r if len(r) <= n else r[:n] + "..."


def check_case(case):
    eager, compiled, rec, warns = run_case(case)
    for i, ((re_, oe), (rc, oc)) in enumerate(zip(eager, compiled)):
        if re_[0] != rc[0]:
            raise AssertionError(f"call {i}: eager {re_[0]} {_short(re_[1:])} vs compiled {rc[0]} {_short(rc[1:])}")
        m = same(re_[1:], rc[1:], f"call {i} result") or same(oe, oc, f"call {i} side effects")
        if m:
            raise AssertionError(m)
    return rec, warns


def registry():
    """Returns (cases, decorator): @case registers a builder under its function name."""
    cases = []

    def case(build=None, *, calls=CALLS):
        def deco(b):
            cases.append(Case(b.__name__, b, calls))
            return b
        return deco(build) if build is not None else deco
    return cases, case


def params(cases, xfail, backends=None):
    """pytest params; cases named in xfail (name -> one-line diagnosis) are strict xfails. With
    backends: a (case, backend) param per case and backend, id "<case>-<backend>" (run them with
    check_case_under)."""
    import pytest
    names = {c.name for c in cases}
    unknown = set(xfail) - names
    assert not unknown, f"xfail names no case: {unknown}"

    def marks(c):
        return [pytest.mark.xfail(strict=True, reason=xfail[c.name])] if c.name in xfail else []
    if backends is None:
        return [pytest.param(c, id=c.name, marks=marks(c)) for c in cases]
    return [pytest.param(c, b, id=f"{c.name}-{b}", marks=marks(c)) for c in cases for b in backends]


def check_case_under(case, backend, monkeypatch):
    """check_case with every dynamo.compile the case makes given backend=backend."""
    compile_ = dynamo.compile
    monkeypatch.setattr(dynamo, "compile", lambda t, **k: compile_(t, backend=backend, **k))
    check_case(case)


def recompiles(fn, make_args, calls=3):
    """Compiles fn, calls it once, then `calls` more times with equal fresh arguments; returns
    the (function, reason) of every compile made by the later calls (none is expected)."""
    dynamo.reset()
    f = dynamo.compile(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f(*make_args())
        with Recorder() as rec:
            for _ in range(calls):
                f(*make_args())
    dynamo.reset()
    return [(r["function"], (r["reason"] or "").splitlines()[0]) for r in rec.compiled]
