#!/usr/bin/env python3
"""Lists the C and C++ functions longer than a limit (the house style's ~150 lines in core/).

    /usr/bin/python3 scripts/function_lengths.py [--limit 150] [--all] [PATH ...]   (default: core)

A function is a brace block whose head (the text since the previous `;`, `{` or `}`) ends in a
parameter list, optionally followed by qualifiers (`const`, `noexcept`, `override`, a trailing
return type, a constructor's initialiser list); `if`/`for`/`while`/`switch`/`catch` blocks, lambdas
and class, namespace and initialiser-list braces are not functions. Comments, strings and character
literals are blanked first, so braces inside them do not count. A function's length is the number
of lines from its head's first line to its closing brace; lambdas and local classes count in the
function that holds them. It is a brace matcher, not a parser: macros that open blocks can fool it,
and it says so by listing nothing odd rather than failing (check a surprising result by eye).

Exit status: 1 when some function is over the limit, else 0 (`--all` lists every function and
always exits 0).
"""
import argparse
import os
import re
import sys

EXTENSIONS = (".c", ".cc", ".cpp", ".h", ".hpp")
CONTROL = {"if", "for", "while", "switch", "catch", "return", "sizeof", "decltype", "alignof", "defined"}
NOT_FUNCTION_HEAD = re.compile(r"\b(namespace|class|struct|union|enum)\b[^()]*$")


def blank(text):
    """Comments, string and char literals replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == 'R' and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if m:
                end = text.find(")" + m.group(1) + '"', i)
                end = n if end < 0 else end + len(m.group(1)) + 2
                out.append(re.sub(r"[^\n]", " ", text[i:end]))
                i = end
            else:
                out.append(c)
                i += 1
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum():
                out.append(" ")  # a digit separator: 1'000'000
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def function_name(head):
    """The function's name when `head` (text before a `{`) is a function definition, else None."""
    head = re.sub(r"^\s*#.*$", " ", head, flags=re.M).strip()  # preprocessor lines
    if not head or NOT_FUNCTION_HEAD.search(head.split("(")[0]):
        return None
    # Drop a constructor's initialiser list: `) : a_(x), b_{y}` -> `)`.
    m = re.match(r"(.*?\))\s*:(?!:)(.*)$", head, flags=re.S)
    if m and m.group(2).strip() and not re.search(r"\)\s*->", m.group(1)):
        head = m.group(1)
    # Drop trailing qualifiers and a trailing return type.
    head = re.sub(r"\s*->\s*[\w:<>,\s*&]+$", "", head)
    head = re.sub(r"(\s*\b(const|noexcept|override|final|volatile|mutable)\b|\s*&&?|\s*noexcept\([^()]*\))*$", "", head)
    if not head.endswith(")"):
        return None
    # Find the matching '(' of the final ')'.
    depth = 0
    for k in range(len(head) - 1, -1, -1):
        if head[k] == ")":
            depth += 1
        elif head[k] == "(":
            depth -= 1
            if depth == 0:
                break
    else:
        return None
    before = head[:k].rstrip()
    m = re.search(r"([~\w:]+(?:<[^<>()]*>)?|operator\s*[^\s(]+(?:\(\))?)\s*$", before)
    if not m:
        return None  # a lambda `[..](..)` or a cast
    name = m.group(1)
    last = name.split("::")[-1]
    if last in CONTROL or before.endswith("]") or "=" in before.split("operator")[0][-2:]:
        return None
    if re.search(r"(^|[=,(?:]|\breturn)\s*$", before[: len(before) - len(name)].rstrip()):
        return None  # an expression, not a declaration
    return name


def functions(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = blank(f.read())
    results = []
    stack = []  # (kind, start line, name)
    head_start = 0
    line = 1
    line_of = []
    for i, c in enumerate(text):
        line_of.append(line)
        if c == "\n":
            line += 1
    for i, c in enumerate(text):
        if c == "{":
            head = text[head_start:i]
            inside = any(kind == "function" for kind, _, _ in stack)
            name = None if inside else function_name(head)
            if name:
                first = head_start + len(head) - len(head.lstrip())
                stack.append(("function", line_of[first], name))
            else:
                stack.append(("block", line_of[i], None))
            head_start = i + 1
        elif c == "}":
            if stack:
                kind, start, name = stack.pop()
                if kind == "function":
                    results.append((line_of[i] - start + 1, start, name))
            head_start = i + 1
        elif c == ";":
            head_start = i + 1
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", default=["core"])
    ap.add_argument("--limit", type=int, default=150)
    ap.add_argument("--all", action="store_true", help="list every function, longest first")
    args = ap.parse_args()
    rows = []
    for root in args.paths:
        files = [root] if os.path.isfile(root) else [
            os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(EXTENSIONS)]
        for path in sorted(files):
            for length, start, name in functions(path):
                rows.append((length, f"{path}:{start}", name))
    rows.sort(key=lambda r: (-r[0], r[1]))
    over = [r for r in rows if r[0] > args.limit]
    for length, where, name in rows if args.all else over:
        print(f"{length:5d}  {where}  {name}")
    if not args.all:
        print(f"{len(over)} function(s) over {args.limit} lines, of {len(rows)} in {', '.join(args.paths)}")
    return 0 if args.all or not over else 1


if __name__ == "__main__":
    sys.exit(main())
