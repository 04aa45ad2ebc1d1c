#!/usr/bin/python3
"""Fails when the build or the tests use a file of a Debian package that the set-up does not install.

setup.sh installs DYNAMO_APT_PACKAGES (scripts/lib.sh) with --no-install-recommends, so a fresh
machine has exactly those packages, their Depends and Pre-Depends, and the base system. A header
that this machine happens to have from a package installed by hand (pybind11-dev, say) builds here
and breaks there. This check sees it here:

    files used                       owner (dpkg's database)       the set-up's closure
    headers the compiler read  --+
    libraries linked            --+-> /var/lib/dpkg/info/*.list -> package -> in closure of
    CMake files read, tools     --+   (merged /usr, symlinks)                lib.sh + base system?
    Python modules imported    --+

Every owning package must be in the closure; one that is not is reported with an example file and
the line to add to scripts/lib.sh, and the exit status is 1. Files no package owns (the source and
build trees, /usr/local, pip, CUDA) are listed as such and are not errors. It reads dpkg's files
directly (no dpkg -S per file, no apt lists), so it takes well under a second.

    /usr/bin/python3 scripts/check_deps.py --build-dir build [--source-dir .] [--verbose]

Exit status: 0 all used packages are installed by the set-up, 1 some are not, 2 bad usage or no
build, 77 no dpkg database here (not a Debian machine: nothing to check; ctest reports a skip).
"""
import argparse
import ast
import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from typing import NamedTuple

EXIT_OK, EXIT_MISSING, EXIT_USAGE, EXIT_SKIP = 0, 1, 2, 77

#: Programs the tests and the code generator run, besides the interpreter and the build tools
#: (which come from CMakeCache.txt). A name missing from PATH is an error.
TEST_TOOLS = ("c++", "g++", "xmllint", "sqlite3", "xvfb-run")

#: Python files whose imports count (relative to the source tree).
PYTHON_SOURCES = ("python/dynamo/*.py", "tests/python/*.py", "tests/python/scripts/*.py",
                  "bench/*.py", "scripts/*.py")

#: Modules of the project itself, never looked up (_dynamo_testing: the test-only bindings,
#: python/testing/, built beside the package and not installed).
PROJECT_MODULES = frozenset({"dynamo", "_dynamo_testing"})

#: Top-level directories that merged /usr makes aliases of /usr/<dir>.
_MERGED_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


class Use(NamedTuple):
    """One file the build or the tests use, and why (shown as the example in a report)."""
    path: str
    why: str


# ---- the set-up's package list ----------------------------------------------------------------

def read_package_list(lib_sh):
    """The words of DYNAMO_APT_PACKAGES=( ... ) in scripts/lib.sh, comments dropped."""
    with open(lib_sh, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^DYNAMO_APT_PACKAGES=\((.*?)^\)", text, re.S | re.M)
    if not m:
        raise SystemExit(f"check_deps: no DYNAMO_APT_PACKAGES=( ... ) array in {lib_sh}")
    words = []
    for line in m.group(1).splitlines():
        words += line.split("#", 1)[0].split()
    return words


# ---- dpkg's database --------------------------------------------------------------------------

def _strip_qualifiers(name):
    """'python3:any' -> 'python3'; 'libc6:amd64' -> 'libc6'."""
    return name.split(":", 1)[0].strip()


def parse_relation(text):
    """A Depends-like field as a list of alternative groups, each a list of package names.
    Versions, architecture qualifiers and restrictions are dropped."""
    text = re.sub(r"\([^)]*\)|\[[^\]]*\]|<[^>]*>", "", text)
    groups = []
    for group in text.split(","):
        names = [_strip_qualifiers(a) for a in group.split("|")]
        names = [n for n in names if n]
        if names:
            groups.append(names)
    return groups


class Package(NamedTuple):
    name: str
    depends: list       #: Depends + Pre-Depends, alternative groups
    provides: list      #: virtual package names
    base: bool          #: Essential: yes or Priority: required (on every Debian system)


def parse_status(text):
    """Installed packages of a /var/lib/dpkg/status text, by name."""
    packages = {}
    for stanza in re.split(r"\n\s*\n", text):
        fields = {}
        key = None
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t") and key:
                fields[key] += " " + line.strip()
            elif ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        name = fields.get("Package")
        if not name or not fields.get("Status", "").endswith(" installed"):
            continue
        depends = parse_relation(fields.get("Pre-Depends", "")) + parse_relation(fields.get("Depends", ""))
        provides = [g[0] for g in parse_relation(fields.get("Provides", ""))]
        base = fields.get("Essential") == "yes" or fields.get("Priority") == "required"
        old = packages.get(name)  # the same name for two architectures: merge
        if old:
            depends, provides, base = old.depends + depends, old.provides + provides, old.base or base
        packages[name] = Package(name, depends, provides, base)
    return packages


class DpkgDb:
    """Installed packages and the files each one owns, read once from dpkg's own files."""

    def __init__(self, packages, file_lists):
        self.packages = packages                     #: name -> Package
        self.owners = defaultdict(set)               #: path -> package names
        for pkg, paths in file_lists.items():
            for p in paths:
                self.owners[p].add(pkg)
        self.providers = defaultdict(set)            #: virtual name -> installed packages
        for p in packages.values():
            for v in p.provides:
                self.providers[v].add(p.name)

    @classmethod
    def load(cls, dpkg_dir="/var/lib/dpkg"):
        with open(os.path.join(dpkg_dir, "status"), encoding="utf-8", errors="replace") as f:
            packages = parse_status(f.read())
        lists = {}
        for path in glob.glob(os.path.join(dpkg_dir, "info", "*.list")):
            pkg = _strip_qualifiers(os.path.basename(path)[:-len(".list")])
            with open(path, encoding="utf-8", errors="surrogateescape") as f:
                lists.setdefault(pkg, []).extend(f.read().splitlines())
        return cls(packages, lists)

    def resolve(self, name):
        """The installed packages that satisfy a dependency on `name`: itself, else its providers."""
        if name in self.packages:
            return {name}
        return set(self.providers.get(name, ()))

    def closure(self, roots):
        """(packages, unknown roots): the roots, the base system and everything they depend on.
        An alternative group takes its first installed alternative; a virtual package all its
        installed providers unless one is already in."""
        unknown = sorted(r for r in roots if not self.resolve(r))
        todo = [n for r in roots for n in sorted(self.resolve(r))]
        todo += sorted(p.name for p in self.packages.values() if p.base)
        chosen = set(todo)
        while todo:
            for group in self.packages[todo.pop()].depends:
                new = self._choose(group, chosen)
                chosen.update(new)
                todo += new
        return chosen, unknown

    def _choose(self, group, chosen):
        """What a dependency group adds to `chosen` (nothing when already satisfied by it)."""
        for alternative in group:
            found = self.resolve(alternative)
            if found:
                return [] if found & chosen else sorted(found)
        return []  # not satisfied on this machine: nothing to follow

    def owners_of(self, path):
        """[(path, packages)] for `path` and each symlink on the way to its real file that dpkg
        knows, in either merged-/usr spelling. Unowned links (/etc/alternatives/...) are left out."""
        hops = []
        for p in _symlink_chain(path):
            owners = set()
            for spelling in _spellings(p):
                owners |= self.owners.get(spelling, set())
            if owners:
                hops.append((p, owners))
        return hops


def _spellings(path):
    """`path` and its merged-/usr twin: /lib/x <-> /usr/lib/x."""
    parts = path.split("/", 3)  # ['', 'usr', 'lib', 'x...'] or ['', 'lib', 'x...']
    if len(parts) >= 3 and parts[1] in _MERGED_DIRS:
        return [path, "/usr" + path]
    if len(parts) >= 4 and parts[1] == "usr" and parts[2] in _MERGED_DIRS:
        return [path, path[len("/usr"):]]
    return [path]


def _symlink_chain(path):
    """`path`, each symlink target after it (final component links), and its real path."""
    chain = [os.path.normpath(path)]
    for _ in range(40):
        try:
            target = os.readlink(chain[-1])
        except OSError:
            break
        chain.append(os.path.normpath(os.path.join(os.path.dirname(chain[-1]), target)))
    chain.append(os.path.realpath(path))
    return list(dict.fromkeys(chain))


# ---- what the build and the tests use ---------------------------------------------------------

def _read_cmake_cache(build_dir):
    cache = {}
    path = os.path.join(build_dir, "CMakeCache.txt")
    if os.path.exists(path):
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                m = re.match(r"^([A-Za-z0-9_.+-]+):([A-Z]+)=(.*)$", line.rstrip("\n"))
                if m:
                    cache[m.group(1)] = (m.group(2), m.group(3))
    return cache


def _absolute(path, base):
    return os.path.normpath(path if os.path.isabs(path) else os.path.join(base, path))


def header_uses(build_dir, ninja="ninja"):
    """Files the compiler read, from ninja's deps log (or the *.d files of another generator)."""
    uses = {}
    if os.path.exists(os.path.join(build_dir, "build.ninja")):
        out = subprocess.run([ninja, "-C", build_dir, "-t", "deps"], capture_output=True,
                             text=True, check=True).stdout
        target = ""
        for line in out.splitlines():
            if line.startswith(" "):
                p = _absolute(line.strip(), build_dir)
                uses.setdefault(p, Use(p, f"compiled into {target}"))
            elif line:
                target = line.split(":", 1)[0]
        return list(uses.values())
    for d in glob.glob(os.path.join(build_dir, "**", "*.d"), recursive=True):
        with open(d, encoding="utf-8", errors="replace") as f:
            target, _, deps = f.read().replace("\\\n", " ").partition(": ")
        for word in deps.split():
            p = _absolute(word, build_dir)
            uses.setdefault(p, Use(p, f"compiled into {os.path.relpath(target, build_dir)}"))
    return list(uses.values())


def _ninja_unescape(word):
    return word.replace("$ ", " ").replace("$:", ":").replace("$$", "$")


def _ninja_words(text):
    return [_ninja_unescape(w) for w in re.split(r"(?<!\$) +", text) if w]


def link_uses(build_dir, default_dirs):
    """Libraries on the link lines of build.ninja (absolute paths and -l names), and the CMake
    files the configure step read (the implicit inputs of build.ninja's re-run rule)."""
    ninja = os.path.join(build_dir, "build.ninja")
    if not os.path.exists(ninja):
        return []
    with open(ninja, encoding="utf-8", errors="replace") as f:
        text = f.read().replace("$\n", "")
    uses = {}
    for m in re.finditer(r"^build (\S+): \S*LINKER\S*.*?(?=^build |\Z)", text, re.S | re.M):
        target, block = m.group(1), m.group(0)
        libs = re.search(r"^ +LINK_LIBRARIES = (.*)$", block, re.M)
        dirs = re.search(r"^ +LINK_PATH = (.*)$", block, re.M)
        search = [w[2:] for w in _ninja_words(dirs.group(1))] if dirs else []
        for word in _ninja_words(libs.group(1)) if libs else []:
            path = _library_path(word, build_dir, search + default_dirs)
            if path:
                uses.setdefault(path, Use(path, f"linked into {target}"))
    rerun = re.search(r"^build build\.ninja: RERUN_CMAKE [^|\n]*\|([^\n]*)", text, re.M)
    for word in _ninja_words(rerun.group(1)) if rerun else []:
        p = _absolute(word, build_dir)
        uses.setdefault(p, Use(p, "read by CMake when configuring"))
    return list(uses.values())


def _library_path(word, build_dir, search):
    if word.startswith("-l"):
        for d in search:
            for name in (f"lib{word[2:]}.so", f"lib{word[2:]}.a"):
                if os.path.exists(os.path.join(d, name)):
                    return os.path.join(d, name)
        return None
    if word.startswith("-"):
        return None
    return _absolute(word, build_dir)


def compiler_search_dirs(compiler):
    """The linker's default library directories, as the compiler reports them."""
    try:
        out = subprocess.run([compiler, "-print-search-dirs"], capture_output=True, text=True).stdout
    except OSError:
        return []
    for line in out.splitlines():
        if line.startswith("libraries: ="):
            return [os.path.normpath(d) for d in line[len("libraries: ="):].split(":") if d]
    return []


def tool_uses(cache):
    """Programs: the build tools CMakeCache.txt names (compilers, ninja, cmake, ccache, found
    libraries), the compiler's own passes, the interpreter, and TEST_TOOLS.
    Returns (uses, names of TEST_TOOLS not found on PATH)."""
    uses = []
    for key, (kind, value) in sorted(cache.items()):
        wanted = kind == "FILEPATH" or re.search(r"(COMMAND|EXECUTABLE|PROGRAM)$", key)
        if wanted and os.path.isabs(value) and os.path.isfile(value):
            uses.append(Use(value, f"CMakeCache.txt {key}"))
    compiler = cache.get("CMAKE_CXX_COMPILER", ("", "c++"))[1]
    for prog in ("cc1plus", "as", "ld"):
        uses += _compiler_part(compiler, "-print-prog-name=" + prog, f"run by {compiler}")
    for lib in ("libstdc++.so", "libgcc_s.so"):
        uses += _compiler_part(compiler, "-print-file-name=" + lib, f"linked by {compiler}")
    uses.append(Use(sys.executable, "the Python interpreter of the tests"))
    missing = []
    for name in TEST_TOOLS + ((os.environ["CXX"],) if os.environ.get("CXX") else ()):
        found = shutil.which(name)
        if found:
            uses.append(Use(found, f"program '{name}' run by the tests or the code generator"))
        else:
            missing.append(name)
    return uses, missing


def _compiler_part(compiler, flag, why):
    try:
        out = subprocess.run([compiler, flag], capture_output=True, text=True).stdout.strip()
    except OSError:
        return []
    path = out if os.path.isabs(out) else shutil.which(out) if out else None
    return [Use(path, why)] if path and os.path.exists(path) else []


class _ImportCollector(ast.NodeVisitor):
    """Top-level names of the absolute imports in a tree, except optional ones: those inside a
    `try:` whose handlers catch ImportError (or anything broader)."""

    def __init__(self):
        self.found = {}        # name -> line
        self._optional = 0

    def visit_Try(self, node):
        catches = any(h.type is None or re.search(r"'(ImportError|ModuleNotFoundError|Exception|"
                                                  r"BaseException)'", ast.dump(h.type))
                      for h in node.handlers)
        self._optional += catches
        for child in node.body:
            self.visit(child)
        self._optional -= catches
        for child in node.handlers + node.orelse + node.finalbody:
            self.visit(child)

    def visit_Import(self, node):
        for alias in node.names:
            self._add(alias.name, node.lineno)

    def visit_ImportFrom(self, node):
        if node.level == 0 and node.module:
            self._add(node.module, node.lineno)

    def _add(self, name, line):
        if not self._optional:
            self.found.setdefault(name.split(".")[0], line)


def imported_modules(source_dir):
    """{top-level module name: first 'file.py:line' importing it}, optional imports left out.
    A file that does not parse (a test input with a deliberate syntax error) is skipped."""
    found = {}
    for pattern in PYTHON_SOURCES:
        for path in sorted(glob.glob(os.path.join(source_dir, pattern))):
            with open(path, encoding="utf-8") as f:
                try:
                    tree = ast.parse(f.read(), path)
                except SyntaxError:
                    continue
            collector = _ImportCollector()
            collector.visit(tree)
            rel = os.path.relpath(path, source_dir)
            # A module the file makes itself (written to a temporary directory or put into
            # sys.modules under a name spelled in the file) is no dependency.
            made_here = {n.value.split(".")[0] for n in ast.walk(tree)
                         if isinstance(n, ast.Constant) and isinstance(n.value, str)}
            made_here |= {m[:-3] for m in made_here if m.endswith(".py")}
            for name, line in collector.found.items():
                if name in made_here and importlib.util.find_spec(name) is None:
                    continue
                found.setdefault(name, f"{rel}:{line}")
    return found


def module_uses(source_dir, build_dir):
    """The files of the modules the tests and the package import. Returns (uses, not found)."""
    uses, missing = [], []
    local_dirs = {os.path.dirname(os.path.join(source_dir, p)) for p in PYTHON_SOURCES}
    for name, where in sorted(imported_modules(source_dir).items()):
        if name in PROJECT_MODULES or any(
                os.path.exists(os.path.join(d, name + ".py")) or os.path.isdir(os.path.join(d, name))
                for d in local_dirs):
            continue
        spec = importlib.util.find_spec(name)
        if spec is None:
            missing.append(f"{name} (imported by {where})")
            continue
        if spec.origin in ("built-in", "frozen"):
            continue  # inside the interpreter, counted with it
        path = spec.origin or next(iter(spec.submodule_search_locations or []), None)
        if path and not _inside(path, build_dir):
            uses.append(Use(path, f"Python module '{name}' imported by {where}"))
    return uses, missing


def _inside(path, directory):
    path, directory = os.path.realpath(path), os.path.realpath(directory)
    return path == directory or path.startswith(directory.rstrip("/") + "/")


# ---- the check ---------------------------------------------------------------------------------

class Report(NamedTuple):
    missing: dict        #: package -> Use (example)   used, not installed by the set-up
    not_listed_roots: list  #: names in lib.sh that are neither installed nor provided
    unowned: list        #: Uses of files no package owns (outside the project)
    project: int         #: files of the source and build trees, not looked up
    packages_used: set   #: packages owning used files, all in the closure
    closure_size: int
    tools_missing: list  #: TEST_TOOLS not on PATH
    modules_missing: list  #: imported modules not found
    listed: list


def check(uses, db, listed, project_dirs=(), tools_missing=(), modules_missing=()):
    """Maps each used file to its packages and compares them with the closure of `listed`."""
    closure, unknown = db.closure(listed)
    missing, unowned, used, project = {}, [], set(), 0
    for use in sorted(set(uses)):
        if any(_inside(use.path, d) for d in project_dirs):
            project += 1
            continue
        hops = db.owners_of(use.path)
        if not hops:
            unowned.append(use)
        for path, owners in hops:   # each link and the file itself must come with the set-up
            if owners & closure:
                used |= owners & closure
                continue
            shown = use if path == use.path else Use(path, f"{use.why}, via {use.path}")
            for pkg in sorted(owners):
                missing.setdefault(pkg, shown)
    return Report(missing, unknown, unowned, project, used, len(closure), list(tools_missing),
                  list(modules_missing), list(listed))


def failed(report):
    return bool(report.missing or report.not_listed_roots or report.tools_missing
                or report.modules_missing)


def render(report, lib_sh="scripts/lib.sh", verbose=False):
    """The report as text: problems first, each with what to do."""
    out = []
    if report.missing:
        n = len(report.missing)
        out.append(f"error: {n} Debian package{'s' if n > 1 else ''} used by the build or the "
                   f"tests {'are' if n > 1 else 'is'} not installed by the set-up:")
        for pkg, use in sorted(report.missing.items()):
            out.append(f"  {pkg}: {use.path} ({use.why})")
        out.append(f"  = hint: add {'them' if n > 1 else 'it'} to DYNAMO_APT_PACKAGES in {lib_sh}:")
        out.append(f"      {' '.join(sorted(report.missing))}")
    for name in report.not_listed_roots:
        out.append(f"error: {name}, listed in {lib_sh}, is not installed here\n"
                   f"  = hint: run ./setup.sh (or apt-get install {name}); check the name")
    for name in report.tools_missing:
        out.append(f"error: program '{name}' is not on PATH, and the tests run it\n"
                   f"  = hint: install the package that has it and add that to {lib_sh}")
    for what in report.modules_missing:
        out.append(f"error: Python module {what} is not installed\n"
                   f"  = hint: install its python3-* package and add it to {lib_sh}")
    if report.unowned:
        out.append(f"note: {len(report.unowned)} used files belong to no Debian package (pip, "
                   f"/usr/local, CUDA, files made by hand); the set-up cannot install them:")
        shown = report.unowned if verbose else report.unowned[:10]
        out += [f"  {u.path} ({u.why})" for u in shown]
        if len(shown) < len(report.unowned):
            out.append(f"  ... {len(report.unowned) - len(shown)} more (--verbose lists all)")
    n_used = len(report.packages_used) + len(report.missing)
    outside = f"{len(report.missing)} not" if report.missing else "all"
    out.append(f"deps check {'FAILED' if failed(report) else 'ok'}: the files used come from "
               f"{n_used} Debian packages, {outside} installed by the set-up ({len(report.listed)} "
               f"listed in {lib_sh}; {report.closure_size} with their dependencies and the base "
               f"system); {report.project} project files not looked up")
    if verbose:
        out.append("packages used: " + " ".join(sorted(report.packages_used)))
    return "\n".join(out) + "\n"


def collect(build_dir, source_dir):
    """All uses, plus the tools and modules that could not be found."""
    cache = _read_cmake_cache(build_dir)
    ninja = cache.get("CMAKE_MAKE_PROGRAM", ("", "ninja"))[1]
    compiler = cache.get("CMAKE_CXX_COMPILER", ("", "c++"))[1]
    uses = header_uses(build_dir, ninja)
    uses += link_uses(build_dir, compiler_search_dirs(compiler))
    tools, tools_missing = tool_uses(cache)
    modules, modules_missing = module_uses(source_dir, build_dir)
    return uses + tools + modules, tools_missing, modules_missing


def main(argv=None):
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(here, "build"))
    ap.add_argument("--source-dir", default=here)
    ap.add_argument("--packages-file", help="a lib.sh to read DYNAMO_APT_PACKAGES from "
                    "(default: scripts/lib.sh of the source tree)")
    ap.add_argument("--dpkg-dir", default="/var/lib/dpkg", help="dpkg's database (status, info/)")
    ap.add_argument("--verbose", action="store_true", help="list every unowned file and package")
    args = ap.parse_args(argv)
    args.build_dir, args.source_dir = map(os.path.abspath, (args.build_dir, args.source_dir))
    lib_sh = args.packages_file or os.path.join(args.source_dir, "scripts", "lib.sh")
    if not os.path.exists(os.path.join(args.dpkg_dir, "status")):
        print(f"deps check skipped: no dpkg database at {args.dpkg_dir} (not a Debian system)")
        return EXIT_SKIP
    if not os.path.exists(os.path.join(args.build_dir, "CMakeCache.txt")):
        print(f"error: {args.build_dir} is not a configured build directory\n"
              f"  = hint: build first (./test.sh does), or pass --build-dir", file=sys.stderr)
        return EXIT_USAGE
    uses, tools_missing, modules_missing = collect(args.build_dir, args.source_dir)
    db = DpkgDb.load(args.dpkg_dir)
    report = check(uses, db, read_package_list(lib_sh), (args.source_dir, args.build_dir),
                   tools_missing, modules_missing)
    shown = os.path.relpath(lib_sh, args.source_dir) if _inside(lib_sh, args.source_dir) else lib_sh
    sys.stdout.write(render(report, shown, args.verbose))
    return EXIT_MISSING if failed(report) else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
