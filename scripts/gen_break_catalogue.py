#!/usr/bin/env python3
"""Writes docs/graph-breaks.md from core/include/dynamo/core/break_kinds.def (the one list of
graph-break kinds) and core/include/dynamo/core/break_constructs.def (constructs of real model code
that still break, with the kind each reports). Run it after editing either .def file;
tests/python/test_docs.py checks that the committed page matches.

    /usr/bin/python3 scripts/gen_break_catalogue.py            # rewrite docs/graph-breaks.md
    /usr/bin/python3 scripts/gen_break_catalogue.py --check    # exit 1 if it is out of date
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEF = ROOT / "core/include/dynamo/core/break_kinds.def"
CONSTRUCTS = ROOT / "core/include/dynamo/core/break_constructs.def"
DOC = ROOT / "docs/graph-breaks.md"

ENTRY = re.compile(r'DYNAMO_BREAK\(\s*(\w+),\s*"([^"]*)",\s*"([^"]*)",\s*"([^"]*)"\)', re.S)
CONSTRUCT = re.compile(r'DYNAMO_BREAK_CONSTRUCT\(\s*"([^"]*)",\s*"([^"]*)",\s*"([^"]*)",\s*"([^"]*)"\)', re.S)


def parse(text, pattern=ENTRY):
    body = "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("//"))
    return [m.groups() for m in pattern.finditer(body)]


def render(rows, constructs=()):
    out = ["# Graph-break catalogue", "",
           "Generated from `core/include/dynamo/core/break_kinds.def` by "
           "`scripts/gen_break_catalogue.py`; do not edit by hand.", "",
           "A graph break ends the current graph: the graph captured so far is compiled, the "
           "breaking code runs as ordinary Python, and capture resumes after it in a resume "
           "function. With `fullgraph=True` the first break raises `dynamo.Unsupported` instead. "
           "Each break is reported with its kind (the slug below), the user's file and line, the "
           "source line, the explanation and the hint.", "",
           "| kind | why it breaks the graph | what to do |", "|---|---|---|"]
    for _name, slug, why, hint in rows:
        out.append(f"| `{slug}` | {why} | {hint} |")
    if constructs:
        out += ["", "## What real model code still breaks", "",
                "Generated from `core/include/dynamo/core/break_constructs.def`. Constructs that real "
                "model code uses and that are not captured yet, with the kind of break they report "
                "(the snippet corpus `tests/python/snippets` holds examples; "
                "`scripts/count_captured.py` counts what is captured whole). What is captured is "
                "described in [capture.md](capture.md).", "",
                "| construct | kind | why | what to do |", "|---|---|---|---|"]
        for construct, kind, why, hint in constructs:
            out.append(f"| {construct} | `{kind}` | {why} | {hint} |")
    return "\n".join(out) + "\n"


def main(argv):
    kinds = parse(DEF.read_text())
    constructs = parse(CONSTRUCTS.read_text(), CONSTRUCT)
    written = sum(1 for l in CONSTRUCTS.read_text().splitlines() if l.startswith("DYNAMO_BREAK_CONSTRUCT("))
    if written != len(constructs):
        print(f"{CONSTRUCTS.relative_to(ROOT)}: {written - len(constructs)} entries could not be read "
              "(four string literals without escaped quotes)")
        return 1
    unknown = sorted({c[1] for c in constructs} - {k[1] for k in kinds})
    if unknown:
        print(f"{CONSTRUCTS.relative_to(ROOT)} names unknown break kinds: {', '.join(unknown)}")
        return 1
    text = render(kinds, constructs)
    if "--check" in argv:
        if not DOC.exists() or DOC.read_text() != text:
            print(f"{DOC.relative_to(ROOT)} is out of date: run /usr/bin/python3 scripts/gen_break_catalogue.py")
            return 1
        return 0
    DOC.write_text(text)
    print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
