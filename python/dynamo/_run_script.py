"""The child side of ``dynamo-explain`` / ``dynamo-profile``: runs a user's script as
``__main__`` with capture and the trace store on (explain/include/dynamo/explain/tool_main.h).

    python -m dynamo._run_script [--tool NAME] [--capture auto|all|none] -- script.py [args...]

``DYNAMO_TRACE`` names the store to record into, ``DYNAMO_RUN_STATUS`` a file this module writes
its progress to, one line each: ``started``; then ``syntax_error<TAB>line<TAB>message<TAB>text``,
``unreadable<TAB>message`` or ``done<TAB>exit code``. The script's own traceback goes to stderr
unchanged (without this module's frame).

Capture: ``all`` runs the script inside ``dynamo.optimize("eager")`` (every function it calls
is compiled; the module's own top-level code is not), ``none`` leaves it to the script's own
``dynamo.compile`` calls, ``auto`` (the default) is ``none`` when the script imports dynamo and
``all`` otherwise.
"""
import contextlib
import os
import re
import sys
import traceback
import types

def _imports_dynamo(source):
    """Whether the script imports dynamo anywhere (`import dynamo`, `import torch, dynamo`,
    `from dynamo import ...`, `import dynamo.trace as t`, also inside functions)."""
    import ast
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "dynamo" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "dynamo" and not node.level:
            return True
    return False


def _flush_before_os_exit():
    """``os._exit`` skips atexit hooks, so the trace's batched records, the runtime hits and the
    run's end would be lost and the report would advise on missing data. In this process (not
    in children the script forks, which own no run) os._exit first closes the run and writes
    the ``done`` status."""
    real_exit = os._exit
    runner_pid = os.getpid()

    def _exit(status):
        if os.getpid() == runner_pid:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
                import dynamo.trace
                dynamo.trace.end_run()  # entry hits recorded, flushed, end time recorded
            except BaseException:  # noqa: BLE001 - the exit must happen whatever failed
                pass
            _status(f"done\t{status}")
        real_exit(status)

    _exit.__doc__ = real_exit.__doc__
    os._exit = _exit


def _status(line):
    path = os.environ.get("DYNAMO_RUN_STATUS")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line.replace("\n", " ") + "\n")


def _exit_code(e):
    """The exit code of a SystemExit, as the interpreter computes it."""
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)
    return 1


def _parse(argv):
    tool, capture = "dynamo", "auto"
    while argv and argv[0].startswith("--"):
        flag = argv.pop(0)
        if flag == "--":
            break
        if flag == "--tool":
            tool = argv.pop(0)
        elif flag == "--capture":
            capture = argv.pop(0)
        else:
            raise SystemExit(f"dynamo._run_script: unknown option {flag!r}")
    if not argv:
        raise SystemExit("usage: python -m dynamo._run_script [--capture auto|all|none] -- "
                         "script.py [args...]")
    return tool, capture, argv[0], argv[1:]


def main(argv):
    tool, capture, path, args = _parse(list(argv))
    argv_path = path  # sys.argv[0] stays as given, as with `python script.py`
    _status("started")
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        _status(f"unreadable\t{e.strerror or e}")
        return 3
    # As `python script.py` does (3.9+): the code and __file__ name the script by its absolute
    # path, so the store records absolute files and the reports can show them under --root.
    path = os.path.abspath(path)
    try:
        code = compile(source, path, "exec", dont_inherit=True)
    except SyntaxError as e:
        _status(f"syntax_error\t{e.lineno or 0}\t{e.msg}\t{(e.text or '').strip()}")
        return 3

    sys.argv = [argv_path, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(path))
    import dynamo
    import dynamo.recording
    if os.environ.get("DYNAMO_TRACE"):
        dynamo.recording.enable(os.environ["DYNAMO_TRACE"])  # the run starts now, argv = script
        _flush_before_os_exit()
    wrap = capture == "all" or (capture == "auto" and not _imports_dynamo(source))
    context = contextlib.nullcontext()
    if wrap:
        dynamo._C._compiler.disable_code(code)  # the module's top level runs as usual
        context = dynamo.optimize("eager")

    main_module = types.ModuleType("__main__")
    main_module.__dict__.update(__file__=path, __builtins__=__builtins__, __loader__=None,
                                __spec__=None, __package__=None, __cached__=None)
    sys.modules["__main__"] = main_module
    rc = 0
    try:
        with context:
            exec(code, main_module.__dict__)
    except SystemExit as e:
        rc = _exit_code(e)
    except BaseException as e:  # noqa: BLE001 - the script's failure, reported as Python would
        traceback.print_exception(type(e), e, e.__traceback__.tb_next)
        rc = 1
    sys.stdout.flush()
    _status(f"done\t{rc}")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
