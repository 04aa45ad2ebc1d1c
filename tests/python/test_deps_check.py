"""scripts/check_deps.py: passes on this machine's build, fails naming the package when one is
taken out of the list, and gets alternatives, virtual packages, merged /usr and symlinks right
(on a small fake dpkg database)."""
import io
import os
import re
import sys
import textwrap
from contextlib import redirect_stdout

import pytest

SRC = os.environ.get("DYNAMO_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
BUILD = os.environ.get("DYNAMO_BUILD_DIR") or os.path.join(SRC, "build")
sys.path.insert(0, os.path.join(SRC, "scripts"))
import check_deps  # noqa: E402
from stacks import only_on_stack1  # noqa: E402
from check_deps import DpkgDb, Use  # noqa: E402

on_debian = pytest.mark.skipif(not os.path.exists("/var/lib/dpkg/status"), reason="no dpkg here")


def run_main(*args):
    out = io.StringIO()
    with redirect_stdout(out):
        rc = check_deps.main(["--build-dir", BUILD, "--source-dir", SRC, *args])
    return rc, out.getvalue()


def lib_sh_without(tmp_path, package):
    """A copy of scripts/lib.sh with `package` taken out of DYNAMO_APT_PACKAGES."""
    with open(os.path.join(SRC, "scripts", "lib.sh")) as f:
        text = f.read()
    reduced = re.sub(rf"(?<=\s){re.escape(package)}(?=\s)", "", text, count=1)
    assert reduced != text
    path = tmp_path / "lib.sh"
    path.write_text(reduced)
    return str(path)


# ---- this machine's real build ----------------------------------------------------------------

@only_on_stack1("its Python, torch and their headers come from PyPI, which no Debian package brings in: the Debian provenance check is stack 1's")
@on_debian
def test_passes_on_this_build():
    # No time limit here (a timed assertion failed at load 12: 28 s): the check's cost is CI's.
    rc, out = run_main()
    assert rc == 0, out
    assert re.fullmatch(r"deps check ok: the files used come from \d+ Debian packages, all installed "
                        r"by the set-up \(\d+ listed in scripts/lib.sh; \d+ with their dependencies "
                        r"and the base system\); \d+ project files not looked up\n", out.splitlines(True)[-1])


@only_on_stack1("its Python, torch and their headers come from PyPI, which no Debian package brings in: the Debian provenance check is stack 1's")
@on_debian
def test_taking_pybind11_out_fails_naming_it(tmp_path):
    lib_sh = lib_sh_without(tmp_path, "pybind11-dev")
    rc, out = run_main("--packages-file", lib_sh)
    assert rc == 1
    lines = out.splitlines()
    assert lines[0] == ("error: 1 Debian package used by the build or the tests is not installed "
                        "by the set-up:")
    assert re.fullmatch(r"  pybind11-dev: /usr/include/pybind11/\S+\.h \(compiled into \S+\.o\)",
                        lines[1]), lines[1]
    assert lines[2:4] == [f"  = hint: add it to DYNAMO_APT_PACKAGES in {lib_sh}:",
                          "      pybind11-dev"]
    assert lines[-1].startswith("deps check FAILED: the files used come from ")
    assert ", 1 not installed by the set-up (" in lines[-1]


@only_on_stack1("its Python, torch and their headers come from PyPI, which no Debian package brings in: the Debian provenance check is stack 1's")
@on_debian
def test_taking_sqlite_out_fails_with_the_exact_message(tmp_path):
    lib_sh = lib_sh_without(tmp_path, "libsqlite3-dev")
    rc, out = run_main("--packages-file", lib_sh)
    assert rc == 1
    assert out.splitlines()[:4] == [
        "error: 1 Debian package used by the build or the tests is not installed by the set-up:",
        "  libsqlite3-dev: /usr/include/sqlite3.h "
        "(compiled into storage/CMakeFiles/dynamo_storage.dir/src/sqlite.cpp.o)",
        f"  = hint: add it to DYNAMO_APT_PACKAGES in {lib_sh}:",
        "      libsqlite3-dev",
    ]


def test_reads_the_list_from_lib_sh(tmp_path):
    listed = check_deps.read_package_list(os.path.join(SRC, "scripts", "lib.sh"))
    assert {"pybind11-dev", "libxml2-utils", "python3-jsonschema", "g++"} <= set(listed)
    f = tmp_path / "lib.sh"
    f.write_text("X=1\nDYNAMO_APT_PACKAGES=(\n  a b  # c d\n  e\n)\nfoo() { :; }\n")
    assert check_deps.read_package_list(str(f)) == ["a", "b", "e"]


@only_on_stack1("its Python, torch and their headers come from PyPI, which no Debian package brings in: the Debian provenance check is stack 1's")
@on_debian
def test_real_libc_is_found_under_both_spellings():
    db = DpkgDb.load()
    for path in ("/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6"):
        assert any("libc6" in owners for _, owners in db.owners_of(path)), path


def test_no_dpkg_database_is_a_skip(tmp_path):
    rc, out = run_main("--dpkg-dir", str(tmp_path))
    assert (rc, out) == (77, f"deps check skipped: no dpkg database at {tmp_path} (not a Debian system)\n")


# ---- a fake dpkg database ---------------------------------------------------------------------

STATUS = """\
Package: app
Status: install ok installed
Priority: optional
Pre-Depends: loader
Depends: mta-a | mta-b (>= 1.0), libblas.so.3, python3:any (>= 3.11), editor | vim

Package: loader
Status: install ok installed
Priority: optional

Package: mta-b
Status: install ok installed
Priority: optional

Package: openblas
Status: install ok installed
Priority: optional
Provides: libblas.so.3 (= 3)

Package: refblas
Status: install ok installed
Priority: optional
Provides: libblas.so.3

Package: python3
Status: install ok installed
Priority: optional

Package: editor
Status: install ok installed
Priority: optional

Package: vim
Status: install ok installed
Priority: optional

Package: libc6
Status: install ok installed
Priority: required

Package: stray
Status: install ok installed
Priority: optional

Package: gone
Status: deinstall ok config-files
Priority: optional
"""

LISTS = {
    "mta-b": ["/usr/sbin/sendmail"],
    "openblas:amd64": ["/usr/lib/x86_64-linux-gnu/libblas.so.3"],
    "refblas": ["/usr/lib/x86_64-linux-gnu/refblas/libblas.so.3"],
    "libc6:amd64": ["/lib/x86_64-linux-gnu/libfake-c.so.6"],
    "stray": ["/usr/include/stray.h", "/usr/lib/x86_64-linux-gnu/libstray.so.1"],
    "vim": ["/usr/bin/vim"],
}


@pytest.fixture
def fake_db(tmp_path):
    d = tmp_path / "dpkg"
    (d / "info").mkdir(parents=True)
    (d / "status").write_text(STATUS)
    for pkg, paths in LISTS.items():
        (d / "info" / f"{pkg}.list").write_text("".join(p + "\n" for p in paths))
    return DpkgDb.load(str(d))


def test_closure_alternatives_virtuals_and_base(fake_db):
    closure, unknown = fake_db.closure(["app"])
    # mta-a is not installed, so mta-b; libblas.so.3 is virtual: both installed providers;
    # editor | vim: the first installed one only; libc6 is Priority: required (base system).
    assert closure == {"app", "loader", "mta-b", "openblas", "refblas", "python3", "editor", "libc6"}
    assert unknown == []
    assert "gone" not in fake_db.packages


def test_virtual_already_satisfied_adds_no_other_provider(fake_db):
    closure, _ = fake_db.closure(["openblas", "app"])
    assert "openblas" in closure and "refblas" not in closure


def test_listed_names_not_installed_are_errors(fake_db):
    report = check_deps.check([], fake_db, ["app", "nosuch"])
    assert report.not_listed_roots == ["nosuch"]
    assert check_deps.render(report).startswith(
        "error: nosuch, listed in scripts/lib.sh, is not installed here\n"
        "  = hint: run ./setup.sh (or apt-get install nosuch); check the name\n")


def test_merged_usr_both_ways(fake_db):
    # recorded as /lib/..., used as /usr/lib/...; recorded as /usr/lib/..., used as /lib/...
    assert fake_db.owners_of("/usr/lib/x86_64-linux-gnu/libfake-c.so.6") == [
        ("/usr/lib/x86_64-linux-gnu/libfake-c.so.6", {"libc6"})]
    assert [o for _, o in fake_db.owners_of("/lib/x86_64-linux-gnu/libblas.so.3")] == [{"openblas"}]


def test_used_files_of_a_package_outside_the_closure_fail_with_the_exact_message(fake_db):
    uses = [Use("/usr/include/stray.h", "compiled into a.o"),
            Use("/usr/lib/x86_64-linux-gnu/libstray.so.1", "linked into b.so"),
            Use("/usr/sbin/sendmail", "program 'sendmail' run by the tests"),
            Use("/lib/x86_64-linux-gnu/libblas.so.3", "linked into b.so"),
            Use("/work/src/x.h", "compiled into a.o"),
            Use("/usr/local/include/cuda.h", "compiled into a.o")]
    report = check_deps.check(uses, fake_db, ["app"], project_dirs=["/work/src"])
    assert check_deps.failed(report)
    assert check_deps.render(report) == textwrap.dedent("""\
        error: 1 Debian package used by the build or the tests is not installed by the set-up:
          stray: /usr/include/stray.h (compiled into a.o)
          = hint: add it to DYNAMO_APT_PACKAGES in scripts/lib.sh:
              stray
        note: 1 used files belong to no Debian package (pip, /usr/local, CUDA, files made by hand); the set-up cannot install them:
          /usr/local/include/cuda.h (compiled into a.o)
        deps check FAILED: the files used come from 3 Debian packages, 1 not installed by the set-up (1 listed in scripts/lib.sh; 8 with their dependencies and the base system); 1 project files not looked up
        """)
    ok = check_deps.check(uses, fake_db, ["app", "stray"], project_dirs=["/work/src"])
    assert not check_deps.failed(ok)
    assert sorted(ok.packages_used) == ["mta-b", "openblas", "stray"]


def test_each_link_on_the_way_counts(fake_db, tmp_path):
    # /usr/bin/c++ -> /etc/alternatives/c++ -> /usr/bin/vim style: an unowned link is skipped,
    # the owned file it ends at must be in the closure.
    alt = tmp_path / "alternatives-editor"
    alt.symlink_to("/usr/bin/vim")
    link = tmp_path / "editor"
    link.symlink_to(alt)
    hops = fake_db.owners_of(str(link))
    assert hops == [("/usr/bin/vim", {"vim"})]
    report = check_deps.check([Use(str(link), "program 'editor'")], fake_db, ["app"])
    assert report.missing == {"vim": Use("/usr/bin/vim", f"program 'editor', via {link}")}


def test_optional_imports_are_not_counted():
    collector = check_deps._ImportCollector()
    collector.visit(check_deps.ast.parse(textwrap.dedent("""\
        import os.path, json
        from torch import nn
        from . import sibling
        try:
            import maybe
        except ImportError:
            import fallback
        def f():
            import inner
        """)))
    assert collector.found == {"os": 1, "json": 1, "torch": 2, "fallback": 7, "inner": 9}
