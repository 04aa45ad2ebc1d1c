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


def _drive_calls(build, calls, seed, wrap, cast=None, to_double=False):
    """Builds a fresh case from `seed`, wraps its target (identity, or a compile), and calls the
    driver `calls` times; returns [(("ok", value) or ("raise", type, message), observed), ...].
    With cast (the fp-reference harness below) the driver is drive(f, i, cast); to_double turns
    the target and the extra modules the builder names (built[3]) into float64 first."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    built = build()
    target, drive = built[0], built[1]
    observe = built[2] if len(built) > 2 and built[2] is not None else None
    if to_double:
        for m in (target,) + tuple(built[3] if len(built) > 3 else ()):
            if isinstance(m, torch.nn.Module):
                m.double()
    f = wrap(target)
    extra = () if cast is None else (cast,)
    log = []
    for i in range(calls):
        random.seed(100 + i)
        np.random.seed(100 + i)
        torch.manual_seed(100 + i)
        try:
            r = ("ok", drive(f, i, *extra))
        except Exception as e:  # noqa: BLE001 - the exception is the result being compared
            r = ("raise", type(e), str(e))
        log.append((r, observe() if observe else None))
    return log


def _drive(case, compiled):
    return _drive_calls(case.build, case.calls, case.seed, dynamo.compile if compiled else (lambda t: t))


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


# ----------------------------------------------------------------------------------------------
# Backends against eager and a float64 reference (test_adversarial_fused*.py). A case here is
# build() -> (target, drive[, observe[, extra modules]]) with drive(f, i, cast): `cast` is applied
# to every input the driver makes (identity for eager and compiled runs, `up` for the float64
# reference run, where the target and the extra modules are made float64 too).
# - fused: floating values within the generated kernels' tolerance of the float64 reference
#   (fp_compare), integer / bool / Python values exactly;
# - other backends (aot_eager): bitwise (bitwise);
# - exceptions: the same type and message as eager.

FP_CALLS = 2
FP_TOL = {torch.bfloat16: (2e-2, 2e-2), torch.float16: (2e-3, 2e-3)}
FP_DEFAULT_TOL = (1e-4, 1e-5)


def fp_registry(calls=FP_CALLS):
    """Returns (cases, decorator): @case() / @case(calls=n) registers a builder under its name in
    the dict cases (name -> (build, calls))."""
    cases = {}

    def case(calls=calls):
        def deco(build):
            cases[build.__name__] = (build, calls)
            return build
        return deco
    return cases, case


def fp_params(cases, xfail, backends=None):
    """pytest params over case names; names in xfail (name -> diagnosis) are strict xfails. With
    backends: a (name, backend) param per case and backend, id "<name>-<backend>"."""
    import pytest
    unknown = set(xfail) - set(cases)
    assert not unknown, f"xfail names no case: {unknown}"

    def marks(n):
        return [pytest.mark.xfail(strict=True, reason=xfail[n])] if n in xfail else []
    if backends is None:
        return [pytest.param(n, id=n, marks=marks(n)) for n in cases]
    return [pytest.param(n, b, id=f"{n}-{b}", marks=marks(n)) for n in cases for b in backends]


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


def up(t):
    """The reference's view of an input: floating tensors in float64, the rest as is."""
    if isinstance(t, torch.Tensor) and t.is_floating_point():
        return t.detach().double().requires_grad_(t.requires_grad) if t.is_leaf else t.double()
    return t


def same_input(t):
    return t


def _fp_close(got, eager, ref, path):
    if got.dtype != eager.dtype or got.shape != eager.shape:
        return f"{path}: {got.dtype}{tuple(got.shape)} vs eager {eager.dtype}{tuple(eager.shape)}"
    if not got.is_floating_point():
        return None if torch.equal(got, eager) else f"{path}: values differ\n{got}\nvs eager\n{eager}"
    g, e, r = got.detach().double(), eager.detach().double(), ref.detach().double()
    if not torch.equal(g.isnan(), r.isnan()) and not torch.equal(g.isnan(), e.isnan()):
        return f"{path}: NaN pattern differs\n{got}\nvs eager\n{eager}"
    fin = ~(g.isnan() | r.isnan() | e.isnan())
    inf = fin & (g.isinf() | e.isinf() | r.isinf())
    if not bool(((g == e) | (g == r))[inf].all()):
        return f"{path}: infinities differ\n{got}\nvs eager\n{eager}"
    fin &= ~inf
    g, e, r = g[fin], e[fin], r[fin]
    if g.numel() == 0:
        return None
    rtol, atol = FP_TOL.get(eager.dtype, FP_DEFAULT_TOL)
    bound = 4 * (e - r).abs().max() + rtol * r.abs() + atol * max(1.0, r.abs().max().item())
    err = (g - r).abs()
    if bool((err <= bound).all()):
        return None
    i = int((err - bound).argmax())
    return (f"{path}: fused {g[i].item()!r} vs fp64 {r[i].item()!r} (eager {e[i].item()!r}), "
            f"error {err[i].item():.3g} > bound {bound[i].item():.3g}")


_LEAF = object()


def _containers(compare, got, eager, ref, path):
    """The walk fp_compare and bitwise share: a type mismatch's message, or each item of a list,
    tuple or dict compared by compare(got, eager, ref, path) (None or the first message); _LEAF
    when `eager` is no container (ref: the reference's matching value, or None)."""
    if type(got) is not type(eager):
        return f"{path}: type {type(got).__name__} vs eager {type(eager).__name__}"
    if isinstance(eager, (list, tuple)):
        if len(got) != len(eager):
            return f"{path}: len {len(got)} vs eager {len(eager)}"
        refs = [None] * len(eager) if ref is None else ref
        for k, (a, b, c) in enumerate(zip(got, eager, refs)):
            m = compare(a, b, c, f"{path}[{k}]")
            if m:
                return m
        return None
    if isinstance(eager, dict):
        if list(got) != list(eager):
            return f"{path}: keys {list(got)} vs eager {list(eager)}"
        for k in eager:
            m = compare(got[k], eager[k], None if ref is None else ref[k], f"{path}[{k!r}]")
            if m:
                return m
        return None
    return _LEAF


def fp_compare(got, eager, ref, path="out"):
    """None when `got` (fused) matches eager within the kernels' tolerance of the float64
    reference `ref`: |got - ref| <= 4 max|eager - ref| + rtol |ref| + atol max(1, max|ref|)
    elementwise (rtol, atol from FP_TOL by eager's dtype); integer, bool and Python values
    exactly. Else a message naming the first difference."""
    if isinstance(eager, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"{path}: {type(got).__name__} vs eager Tensor"
        return _fp_close(got, eager, ref, path)
    m = _containers(fp_compare, got, eager, ref, path)
    if m is not _LEAF:
        return m
    if isinstance(eager, float):
        if math.isnan(eager):
            return None if math.isnan(got) else f"{path}: {got!r} vs eager nan"
        ok = abs(got - ref) <= 4 * abs(eager - ref) + 1e-4 * abs(ref) + 1e-5
        return None if ok else f"{path}: {got!r} vs eager {eager!r}"
    return None if got == eager else f"{path}: {got!r} vs eager {eager!r}"


def bitwise(got, eager, path="out"):
    """None when `got` equals eager bit for bit (NaN where eager has NaN), else a message."""
    if isinstance(eager, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"{path}: {type(got).__name__} vs eager Tensor"
        if got.dtype != eager.dtype or got.shape != eager.shape:
            return f"{path}: {got.dtype}{tuple(got.shape)} vs eager {eager.dtype}{tuple(eager.shape)}"
        if got.requires_grad != eager.requires_grad:
            return f"{path}: requires_grad {got.requires_grad} vs eager {eager.requires_grad}"
        if got.numel() > 1 and got.stride() != eager.stride():
            return f"{path}: strides {got.stride()} vs eager {eager.stride()}"
        g, e = got.detach(), eager.detach()
        if g.is_floating_point():
            if not torch.equal(g.isnan(), e.isnan()):
                return f"{path}: NaN pattern differs\n{got}\nvs eager\n{eager}"
            g, e = g.nan_to_num(0.0), e.nan_to_num(0.0)
        return None if torch.equal(g, e) else f"{path}: values differ\n{got}\nvs eager\n{eager}"
    m = _containers(lambda a, b, _, p: bitwise(a, b, p), got, eager, None, path)
    if m is not _LEAF:
        return m
    if isinstance(eager, float) and math.isnan(eager):
        return None if isinstance(got, float) and math.isnan(got) else f"{path}: {got!r} vs eager nan"
    return None if got == eager else f"{path}: {got!r} vs eager {eager!r}"


def strides(got, eager, path):
    """None when every tensor of `got` has eager's strides (where eager's layout is unambiguous)."""
    if isinstance(eager, torch.Tensor):
        ok = eager.numel() <= 1 or got.stride() == eager.stride()
        return None if ok else f"{path}: strides {got.stride()} vs eager {eager.stride()}"
    if isinstance(eager, (list, tuple)) and isinstance(got, (list, tuple)):
        for k, (a, b) in enumerate(zip(got, eager)):
            m = strides(a, b, f"{path}[{k}]")
            if m:
                return m
    return None


def fp_drive(build, calls, mode, backend=None):
    """mode: "eager", "compiled" (through `backend`) or "ref" (float64 reference, eagerly)."""
    wrap = (lambda t: dynamo.compile(t, backend=backend)) if mode == "compiled" else (lambda t: t)
    ref = mode == "ref"
    return _drive_calls(build, calls, 0, wrap, up if ref else same_input, to_double=ref)


def fp_check(cases, name, backend, check_strides=True):
    """Runs case `name` eagerly, as a float64 reference (fused only) and through `backend`, and
    asserts they agree call by call (fused: fp_compare; other backends: bitwise); with
    check_strides the results' strides are eager's too."""
    build, calls = cases[name]
    dynamo.reset()
    eager = fp_drive(build, calls, "eager")
    ref = fp_drive(build, calls, "ref") if backend == "fused" else None
    dynamo.reset()
    got = fp_drive(build, calls, "compiled", backend)
    dynamo.reset()
    for i in range(calls):
        (re_, oe), (rg, og) = eager[i], got[i]
        if re_[0] != rg[0] or (re_[0] == "raise" and re_[1:] != rg[1:]):
            raise AssertionError(f"call {i}: eager {re_} vs {backend} {rg}")
        if re_[0] != "ok":
            continue
        if backend == "fused":
            rr, orf = ref[i]
            assert rr[0] == "ok", f"call {i}: the float64 reference raised {rr}"
            m = (fp_compare(rg[1], re_[1], rr[1], f"call {i} result")
                 or fp_compare(og, oe, orf, f"call {i} side effects"))
        else:
            m = bitwise(rg[1], re_[1], f"call {i} result") or bitwise(og, oe, f"call {i} side effects")
        if check_strides:
            m = m or strides(rg[1], re_[1], f"call {i} result")
        assert m is None, m
