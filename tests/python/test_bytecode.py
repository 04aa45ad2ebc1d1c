"""Tests of the bytecode toolkit (core/src/bytecode) through _dynamo_testing.bytecode (python/testing/).

Round trips (decode -> assemble) a corpus of stdlib / torch / torchvision code objects and
checks instructions, stack size, exception table and positions against CPython's own; runs
reassembled functions; builds new code (a mini resume function, EXTENDED_ARG jumps, backward
jumps, a function object in co_consts); and pins the verifier's error messages.
"""
import asyncio
import dis
import importlib
import os
import re
import sys
import types

import pytest

import dynamo
from _dynamo_testing import bytecode as B

PY312 = sys.version_info >= (3, 12)


# ---- helpers -----------------------------------------------------------------------------------

def all_code_objects(code):
    """code and every code object nested in its co_consts, depth first."""
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from all_code_objects(c)


def deep_roundtrip(code):
    """Round trips code and, first, every nested code object in its constants."""
    opts = B.code_options(code)
    opts["consts"] = [deep_roundtrip(c) if isinstance(c, types.CodeType) else c
                      for c in opts["consts"]]
    return B.assemble(B.decode(code), opts)


def normalized(code):
    """(opname, arg or jump-target index) per instruction, as dis sees it (no caches/prefixes)."""
    instrs = [i for i in dis.get_instructions(code) if i.opname != "EXTENDED_ARG"]
    index_of = {}
    for idx, ins in enumerate(instrs):
        index_of[ins.offset] = idx
    # a jump to an EXTENDED_ARG prefix means the instruction after it
    raw = list(dis.get_instructions(code))
    for k, ins in enumerate(raw):
        if ins.opname == "EXTENDED_ARG":
            nxt = next(r for r in raw[k:] if r.opname != "EXTENDED_ARG")
            index_of[ins.offset] = index_of[nxt.offset]
    out = []
    for ins in instrs:
        if ins.opcode in dis.hasjrel:
            out.append((ins.opname, "->", index_of[ins.argval]))
        else:
            out.append((ins.opname, ins.arg))
    return out, index_of


def handler_map(code):
    """{instruction index: (target index, depth, lasti)} from dis's exception table."""
    _, index_of = normalized(code)
    starts = sorted(index_of)
    out = {}
    for e in dis.Bytecode(code).exception_entries:
        for off in starts:
            if e.start <= off < e.end:
                out[index_of[off]] = (index_of[e.target], e.depth, e.lasti)
    return out


def check_roundtrip(code):
    new = B.roundtrip(code)
    name = f"{code.co_filename}:{code.co_firstlineno} {code.co_qualname}"
    assert normalized(new)[0] == normalized(code)[0], name
    assert new.co_stacksize == code.co_stacksize, name
    assert handler_map(new) == handler_map(code), name
    if new.co_code == code.co_code:
        # same layout: the (differently encoded) line tables must mean the same thing
        assert list(new.co_lines()) == list(code.co_lines()), name
        assert list(new.co_positions()) == list(code.co_positions()), name
    else:
        keys = ("line", "end_line", "col", "end_col")
        assert [tuple(d[k] for k in keys) for d in B.decode(new)] == \
               [tuple(d[k] for k in keys) for d in B.decode(code)], name
    for field in ("co_names", "co_varnames", "co_cellvars", "co_freevars", "co_consts",
                  "co_flags", "co_argcount", "co_kwonlyargcount", "co_posonlyargcount",
                  "co_nlocals", "co_qualname", "co_firstlineno"):
        assert getattr(new, field) == getattr(code, field), (name, field)
    return new.co_code == code.co_code


STDLIB_MODULES = ["json.decoder", "json.encoder", "argparse", "collections", "inspect", "dis",
                  "typing", "dataclasses", "ast", "tarfile", "zipfile", "asyncio.base_events",
                  "asyncio.tasks", "email.message", "re._parser", "re._compiler", "contextlib",
                  "functools", "pydoc_data.topics", "unittest.case", "difflib", "statistics"]


def module_sources(names):
    for name in names:
        mod = importlib.import_module(name)
        path = getattr(mod, "__file__", None)
        if path and path.endswith(".py"):
            yield path


def package_sources(pkg_name):
    try:
        pkg = importlib.import_module(pkg_name)
    except Exception:  # not installed here
        return
    root = os.path.dirname(pkg.__file__)
    for dirpath, _, files in os.walk(root):
        for f in sorted(files):
            if f.endswith(".py"):
                yield os.path.join(dirpath, f)


def corpus_files():
    files = list(module_sources(STDLIB_MODULES))
    files += list(package_sources("torch.nn.modules"))
    files += list(package_sources("torchvision.models"))
    return files


# ---- round trip corpus ---------------------------------------------------------------------

@pytest.mark.parametrize("path", corpus_files(), ids=os.path.basename)
def test_roundtrip_corpus(path):
    with open(path, encoding="utf-8") as fh:
        top = compile(fh.read(), path, "exec")
    codes = list(all_code_objects(top))
    identical = sum(check_roundtrip(c) for c in codes)
    # CPython's assembler also emits minimal EXTENDED_ARG prefixes and zeroed caches, so the
    # instruction bytes come out identical; only the line table encoding differs (long forms).
    assert identical == len(codes), f"{len(codes) - identical} code objects differ in co_code"


def test_corpus_needs_extended_arg():
    """Code with > 256 constants, names and locals, and a jump over > 256 code units, as CPython
    compiles it, round trips (EXTENDED_ARG on LOAD_CONST, STORE_FAST and jumps)."""
    src = "def many(x):\n" + "".join(f"    v{i} = 'c{i}'\n" for i in range(300))
    src += "    return v0, v299\n" + BIG_SOURCE
    top = compile(src, "<many>", "exec")
    codes = list(all_code_objects(top))
    ext = [i for c in codes for i in dis.get_instructions(c) if i.opname == "EXTENDED_ARG"]
    assert len(ext) > 100
    assert all(check_roundtrip(c) for c in codes)


MATCH_SOURCE = '''
def matcher(cmd):
    match cmd:
        case ["go", direction] if direction in ("n", "s"):
            return ("go", direction)
        case {"action": action, **rest}:
            return ("dict", action, len(rest))
        case Point(x=0, y=yy):
            return ("point", yy)
        case [1, *others]:
            return ("star", others)
        case str() | bytes():
            return "text"
        case _:
            return None

class Point:
    __match_args__ = ("x", "y")
    def __init__(self, x, y):
        self.x, self.y = x, y
'''


# ---- running reassembled functions ---------------------------------------------------------

def f_loops(n):
    total = 0
    for i in range(n):
        if i % 3 == 0:
            continue
        j = 0
        while j < i:
            total += j
            j += 1
            if total > 1000:
                break
    return total


def f_try(x):
    log = []
    try:
        try:
            log.append(10 // x)
        except ZeroDivisionError as e:
            log.append(type(e).__name__)
            raise KeyError("k") from e
        finally:
            log.append("finally")
    except KeyError as e:
        log.append(str(e))
    else:
        log.append("else")
    return log


class _Ctx:
    def __init__(self, log):
        self.log = log

    def __enter__(self):
        self.log.append("enter")
        return self

    def __exit__(self, *exc):
        self.log.append(("exit", exc[0].__name__ if exc[0] else None))
        return True  # swallow


def f_with(x):
    log = []
    with _Ctx(log) as c:
        log.append(c is not None)
        if x:
            raise ValueError(x)
        log.append("body done")
    return log


def f_comprehensions(xs):
    squares = [x * x for x in xs if x % 2]
    table = {x: [y for y in range(x)] for x in xs}
    gen = sum(x for x in xs)
    return squares, table, gen, {x % 3 for x in xs}


def f_closure(a):
    b = a * 2

    def inner(c):
        nonlocal b
        b += c
        return a + b + c

    return inner(1), inner(2), b


def f_generator(n):
    def gen():
        for i in range(n):
            got = yield i
            if got:
                yield ("got", got)
        yield from range(2)
        return "done"
    g = gen()
    out = [next(g), g.send("x"), next(g)]
    out.extend(g)
    return out


async def _agen(n):
    for i in range(n):
        await asyncio.sleep(0)
        yield i


def f_async(n):
    async def main():
        acc = [i async for i in _agen(n)]
        async with asyncio.timeout(5) if hasattr(asyncio, "timeout") else _NullAsync():
            acc.append(await asyncio.sleep(0, result="slept"))
        return acc
    return asyncio.run(main())


class _NullAsync:
    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False


def f_kwargs(*args, k=3, **kw):
    def callee(a, b=0, *rest, c=1, **more):
        return a, b, rest, c, sorted(more)
    return callee(*args, c=k, **kw), callee(1, b=2, c=3, z=4)


def f_exception_group(x):
    try:
        raise ExceptionGroup("g", [ValueError(x), TypeError(x)])
    except* ValueError as eg:
        caught = [str(e) for e in eg.exceptions]
    except* TypeError:
        caught2 = "type"
    return caught, caught2


def f_uncaught(x):
    return {"a": 1}[x]


BIG_SOURCE = "def f_big(x):\n    y = 0\n    if x:\n" + "".join(
    f"        y = y + {i}\n" for i in range(400)) + "    return y\n"

SAMPLES = [
    (f_loops, [(0,), (10,), (100,)]),
    (f_try, [(1,), (0,)]),
    (f_with, [(0,), (1,)]),
    (f_comprehensions, [([1, 2, 3, 4],)]),
    (f_closure, [(5,)]),
    (f_generator, [(3,)]),
    (f_async, [(3,)]),
    (f_kwargs, [((1, 2, 3), )]),
    (f_exception_group, [("v",)]),
]


def _swap_and_call(fn, args, deep):
    original = fn.__code__
    try:
        expected = fn(*args)
        fn.__code__ = deep_roundtrip(original) if deep else B.roundtrip(original)
        assert fn.__code__ is not original
        return expected, fn(*args)
    finally:
        fn.__code__ = original


@pytest.mark.parametrize("fn,arglists", SAMPLES, ids=[s[0].__name__ for s in SAMPLES])
def test_reassembled_functions_run(fn, arglists):
    for args in arglists:
        if fn is f_kwargs:
            expected = fn(*args[0], k=9, q=1)
            original = fn.__code__
            try:
                fn.__code__ = deep_roundtrip(original)
                assert fn(*args[0], k=9, q=1) == expected
            finally:
                fn.__code__ = original
            continue
        expected, got = _swap_and_call(fn, args, deep=True)
        assert got == expected


def test_reassembled_match_and_big_function():
    ns = {}
    exec(compile(MATCH_SOURCE + BIG_SOURCE, "<samples>", "exec"), ns)
    matcher, Point, f_big = ns["matcher"], ns["Point"], ns["f_big"]
    assert any(i.opname == "EXTENDED_ARG" for i in dis.get_instructions(f_big))
    cases = [["go", "n"], {"action": 1, "x": 2}, Point(0, 7), [1, 2, 3], "s", 4.5]
    expected = [matcher(c) for c in cases]
    matcher.__code__ = deep_roundtrip(matcher.__code__)
    assert [matcher(c) for c in cases] == expected
    want = (f_big(0), f_big(1))
    f_big.__code__ = B.roundtrip(f_big.__code__)
    assert (f_big(0), f_big(1)) == want == (0, sum(range(400)))


def test_uncaught_exception_keeps_traceback_line():
    original = f_uncaught.__code__
    f_uncaught.__code__ = B.roundtrip(original)
    try:
        with pytest.raises(KeyError) as info:
            f_uncaught("zz")
        # pytest's lineno is 0-based; the failing line is the one after the `def`
        assert info.traceback[-1].lineno == original.co_firstlineno
    finally:
        f_uncaught.__code__ = original


# ---- building new code ---------------------------------------------------------------------

def I(opname, arg=0, **kw):
    d = {"opname": opname, "arg": arg}
    d.update(kw)
    return d


def base_options(**kw):
    opts = {"argcount": 0, "flags": 3, "consts": [None], "names": [], "varnames": [],
            "filename": "<generated>", "name": "gen", "firstlineno": 1}
    opts.update(kw)
    return opts


def make_function(instrs, opts, globals_=None):
    code = B.assemble(instrs, opts)
    return types.FunctionType(code, globals_ if globals_ is not None else {})


def test_function_object_in_consts_is_called():
    seen = []

    def helper(a, b):
        seen.append((a, b))
        return a * 10 + b

    opts = base_options(argcount=1, varnames=["x"], consts=[None, helper, 5])
    instrs = [I("RESUME"), I("PUSH_NULL"), I("LOAD_CONST", 1), I("LOAD_FAST", 0),
              I("LOAD_CONST", 2), *B.call_sequence(2), I("RETURN_VALUE")]
    fn = make_function(instrs, opts)
    assert fn(7) == 75 and seen == [(7, 5)]
    assert fn.__code__.co_consts[1] is helper
    assert fn.__code__.co_stacksize == 4


def test_keyword_call_from_generated_code():
    def helper(a, *, scale):
        return a * scale

    opts = base_options(argcount=1, varnames=["x"], consts=[None, helper, 3, ("scale",)])
    call = B.call_sequence(2)
    instrs = [I("RESUME"), I("PUSH_NULL"), I("LOAD_CONST", 1), I("LOAD_FAST", 0),
              I("LOAD_CONST", 2), I("KW_NAMES", 3), *call, I("RETURN_VALUE")]
    assert make_function(instrs, opts)(4) == 12


def countdown_loop(body_nops, backward_cond=False):
    """acc = 0; while x: acc += x; x -= 1 (+ NOP padding); return acc."""
    add, sub = (13, 23)  # NB_INPLACE_ADD, NB_INPLACE_SUBTRACT
    instrs = [I("RESUME"), I("LOAD_CONST", 1), I("STORE_FAST", 1)]
    loop = len(instrs)
    instrs += [I("LOAD_FAST", 0), None,  # placeholder: exit jump
               I("LOAD_FAST", 1), I("LOAD_FAST", 0), I("BINARY_OP", add), I("STORE_FAST", 1),
               I("LOAD_FAST", 0), I("LOAD_CONST", 2), I("BINARY_OP", sub), I("STORE_FAST", 0)]
    instrs += [I("NOP")] * body_nops
    if backward_cond:
        instrs += [I("LOAD_FAST", 0), B.pop_jump_if(True, loop)]
    else:
        instrs += [B.jump_to(loop)]
    end = len(instrs)
    instrs[loop + 1] = B.pop_jump_if(False, end)
    instrs += [I("LOAD_FAST", 1), I("RETURN_VALUE")]
    opts = base_options(argcount=1, varnames=["x", "acc"], consts=[None, 0, 1])
    return instrs, opts


def test_backward_jump_is_encoded_backward():
    instrs, opts = countdown_loop(0)
    fn = make_function(instrs, opts)
    assert fn(4) == 10 and fn(0) == 0
    names = [d["opname"] for d in B.decode(fn)]
    assert "JUMP_BACKWARD" in names and "JUMP_FORWARD" not in names


def test_backward_conditional_jump():
    instrs, opts = countdown_loop(0, backward_cond=True)
    if PY312:
        with pytest.raises(dynamo.InternalError, match="cannot jump backward"):
            B.assemble(instrs, opts)
    else:
        fn = make_function(instrs, opts)
        assert fn(4) == 10
        assert "POP_JUMP_BACKWARD_IF_TRUE" in [d["opname"] for d in B.decode(fn)]


@pytest.mark.parametrize("nops", [300, 70000])
def test_jumps_needing_extended_arg(nops):
    instrs, opts = countdown_loop(nops)
    fn = make_function(instrs, opts)
    assert fn(5) == 15
    raw = list(dis.get_instructions(fn.__code__))
    ext = [i for i in raw if i.opname == "EXTENDED_ARG"]
    assert len(ext) >= (2 if nops > 65536 else 1)
    decoded = B.decode(fn)
    jumps = [d for d in decoded if d["target"] is not None]
    assert max(d["arg"] for d in jumps) > (65535 if nops > 65536 else 255)
    # decode folds the prefixes back: the same instruction list comes back
    assert [d["opname"] for d in decoded[:3]] == ["RESUME", "LOAD_CONST", "STORE_FAST"]
    assert len(decoded) == len(instrs)
    assert [d["target"] for d in decoded if d["target"] is not None] == \
           [d["target"] for d in instrs if d.get("target") is not None]


def test_insert_shifts_targets():
    instrs, _ = countdown_loop(0)
    shifted = B.insert(instrs, 0, [I("NOP"), I("NOP")])
    assert len(shifted) == len(instrs) + 2
    old_targets = [d.get("target") for d in instrs if d.get("target") is not None]
    new_targets = [d["target"] for d in shifted if d["target"] is not None]
    assert new_targets == [t + 2 for t in old_targets]


def resume_original(a, b):
    x = a + 1
    y = x * b
    for i in range(3):
        y += i
    return y, x


def test_resume_function_jumps_into_original_body():
    """A mini resume function: args (___stack0, x, b), the stack value re-pushed, then a jump to
    the middle of `y = x * b` (after LOAD_FAST x) in the whole, kept original body."""
    code = resume_original.__code__
    body = B.decode(code)
    line = code.co_firstlineno + 2
    first = next(k for k, d in enumerate(body) if d["line"] == line)
    assert body[first]["opname"] == "LOAD_FAST" and code.co_varnames[body[first]["arg"]] == "x"
    target = first + 1  # stack holds [x] here

    old = list(code.co_varnames)
    new_varnames = ["___stack0", "x", "b"] + [n for n in old if n not in ("x", "b")]
    remap = {i: new_varnames.index(n) for i, n in enumerate(old)}
    local_ops = {o["name"] for o in B.opcodes() if o["has_local"]}
    for d in body:
        if d["opname"] in local_ops:
            d["arg"] = remap[d["arg"]]
    prologue = [I("RESUME"), I("LOAD_FAST", 0), B.jump_to(target + 3)]
    instrs = B.insert(body, 0, prologue)
    opts = B.code_options(code)
    opts.update(argcount=3, varnames=new_varnames, name="resume_in_original",
                qualname="<resume in resume_original>", firstlineno=line)
    stack_max = B.verify(instrs, opts)
    depths = B.stack_depths(instrs)
    assert depths[3] == -1  # the original entry is unreachable now
    assert depths[target + 3] == 1
    fn = make_function(instrs, opts, resume_original.__globals__)
    assert fn.__code__.co_stacksize == stack_max
    a, b = 4, 3
    assert fn(a + 1, a + 1, b) == resume_original(a, b)


def resume_try(a):
    r = 0
    try:
        r = 10 // a
    except ZeroDivisionError:
        r = -1
    return r


def test_resume_inside_try_keeps_handlers():
    code = resume_try.__code__
    body = B.decode(code)
    line = code.co_firstlineno + 3
    target = next(k for k, d in enumerate(body) if d["line"] == line)
    assert body[target]["handler"] is not None
    instrs = B.insert(body, 0, [I("RESUME"), B.jump_to(target + 2)])
    fn = make_function(instrs, B.code_options(code), resume_try.__globals__)
    assert fn(0) == -1 and fn(5) == 2
    assert len(B.exception_table(fn)) == len(B.exception_table(code))


# ---- verifier ------------------------------------------------------------------------------

def verifier_message(instrs, opts=None):
    with pytest.raises(dynamo.InternalError) as info:
        B.verify(instrs, opts)
    msg = str(info.value)
    assert "This is a bug in Dynamo" in msg
    return re.search(r"bytecode verifier: (.*)", msg).group(1)


def test_verifier_rejects_stack_underflow():
    msg = verifier_message([I("RESUME"), I("POP_TOP"), I("LOAD_CONST"), I("RETURN_VALUE")])
    assert msg == ("at #1 POP_TOP 0 (line -): stack underflow: depth -1 after the fall-through "
                   "edge to #2")


def test_verifier_rejects_jump_out_of_range():
    msg = verifier_message([I("RESUME"), B.jump_to(99), I("LOAD_CONST"), I("RETURN_VALUE")])
    assert msg == "at #1 JUMP_FORWARD 0 (line -): jump target #99 is out of range (4 instructions)"


def test_verifier_rejects_depth_mismatch_at_merge():
    instrs = [I("RESUME"), I("LOAD_FAST", 0), B.pop_jump_if(True, 4), I("LOAD_CONST"),
              I("LOAD_CONST"), I("RETURN_VALUE")]
    msg = verifier_message(instrs)
    assert msg == ("at #4 LOAD_CONST 0 (line -): stack depth mismatch at a merge point: 0 on one "
                   "path, 1 on the fall-through edge from #3 LOAD_CONST 0 (line -)")


def test_verifier_rejects_falling_off_the_end():
    msg = verifier_message([I("RESUME"), I("NOP")])
    assert msg == "at #1 NOP 0 (line -): control falls off the end of the code"


def test_verifier_checks_indices_against_options():
    msg = verifier_message([I("RESUME"), I("LOAD_CONST", 5), I("RETURN_VALUE")], base_options())
    assert msg == "at #1 LOAD_CONST 5 (line -): co_consts index 5 is out of range (1 entries)"


def test_assemble_refuses_invalid_code():
    with pytest.raises(dynamo.InternalError, match="stack underflow"):
        B.assemble([I("RESUME"), I("POP_TOP"), I("RETURN_VALUE")], base_options())


def test_verify_accepts_real_code():
    for fn in (f_loops, f_try, f_with, f_generator, resume_original):
        assert B.verify(fn) == fn.__code__.co_stacksize


def test_bad_instruction_dict_is_a_user_error():
    with pytest.raises(dynamo.UserError, match="unknown opcode name 'NOT_AN_OP'"):
        B.verify([I("NOT_AN_OP")])


# ---- opcode metadata and printer -----------------------------------------------------------

def test_opcode_table_matches_dis():
    ours = {o["name"]: o for o in B.opcodes()}
    specialized = set(getattr(dis, "_specialized_instructions", []))
    for name, op in dis.opmap.items():
        if name in specialized or op >= 256 or name.startswith("INSTRUMENTED_"):
            continue
        if name in ("RESERVED",):
            continue
        assert name in ours, name
        o = ours[name]
        assert o["opcode"] == op, name
        assert o["cache_entries"] == dis._inline_cache_entries[op], name
        assert o["jump"] == (op in dis.hasjrel), name
        assert o["has_const"] == (op in dis.hasconst), name
        assert o["has_name"] == (op in dis.hasname), name
        assert o["has_local"] == (op in dis.haslocal), name
        assert o["has_free"] == (op in dis.hasfree), name
    other_version = "only_311" if PY312 else "only_312"
    assert not any(o[other_version] for o in ours.values())
    if PY312:
        assert ours["RETURN_CONST"]["only_312"] and "PRECALL" not in ours
    else:
        assert ours["PRECALL"]["only_311"] and "RETURN_CONST" not in ours
        assert ours["POP_JUMP_BACKWARD_IF_TRUE"]["backward"]
    assert ours["JUMP_BACKWARD"]["backward"] and ours["RETURN_VALUE"]["no_fallthrough"]
    assert ours["FOR_ITER"]["conditional"] and not ours["JUMP_FORWARD"]["conditional"]


def test_decode_fields():
    d = B.decode(f_try)
    assert d[0]["opname"] == "RESUME" and d[0]["offset"] == 0
    jumps = [x for x in d if x["target"] is not None]
    assert jumps and all(0 <= x["target"] < len(d) for x in jumps)
    assert any(x["handler"] is not None for x in d)
    table = B.exception_table(f_try)
    assert table and all(s <= e and 0 <= t < len(d) for s, e, t, _, _ in table)
    assert all(x["opname"] not in ("CACHE", "EXTENDED_ARG") for x in d)


def mask(text):
    return re.sub(r"0x[0-9a-f]+", "0x?", text)


@pytest.mark.skipif(PY312, reason="golden text recorded on 3.11")
def test_printer_golden_311():
    instrs, opts = countdown_loop(0)
    text = B.dis(instrs, opts)
    expected = """\
    --       0 RESUME                           0
             1 LOAD_CONST                       1  (0)
             2 STORE_FAST                       1  (acc)
       >>    3 LOAD_FAST                        0  (x)
             4 POP_JUMP_FORWARD_IF_FALSE       14  (to #14)
             5 LOAD_FAST                        1  (acc)
             6 LOAD_FAST                        0  (x)
             7 BINARY_OP                       13  (+=)
             8 STORE_FAST                       1  (acc)
             9 LOAD_FAST                        0  (x)
            10 LOAD_CONST                       2  (1)
            11 BINARY_OP                       23  (-=)
            12 STORE_FAST                       0  (x)
            13 JUMP_FORWARD                     3  (to #3)
       >>   14 LOAD_FAST                        1  (acc)
            15 RETURN_VALUE
"""
    assert text == expected, ("check the change makes sense, then update the expected text\n"
                              + text)


def test_printer_shows_exception_table_and_lines():
    text = mask(B.dis(f_try))
    assert "ExceptionTable:" in text
    assert re.search(r"#\d+ to #\d+ -> #\d+ \[1\] lasti", text)
    first_line = text.splitlines()[0]
    assert str(f_try.__code__.co_firstlineno) in first_line
