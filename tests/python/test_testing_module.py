"""The test-only bindings live in _dynamo_testing (python/testing/), not in the production module
dynamo._C, and the install rules do not ship them."""
import os
import pathlib

import dynamo
import _dynamo_testing


def test_production_module_has_no_test_bindings():
    for name in ("_bytecode", "_frame", "_guards"):
        assert not hasattr(dynamo._C, name), name
    for name in ("bytecode", "frame", "guards"):
        assert hasattr(_dynamo_testing, name), name


def test_testing_module_raises_dynamos_exception_classes():
    # Its copy of the error translation uses dynamo._C's classes, not copies of its own.
    try:
        _dynamo_testing.guards.GuardSetBuilder().add("NO_SUCH_KIND")
    except dynamo.UserError as e:
        assert "unknown guard kind 'NO_SUCH_KIND'" in str(e)
    else:
        raise AssertionError("no error raised")


def test_install_rules_leave_the_testing_module_out():
    python = pathlib.Path(os.environ["DYNAMO_BUILD_DIR"]) / "python"
    package_rules = (python / "cmake_install.cmake").read_text()
    testing_rules = (python / "testing" / "cmake_install.cmake").read_text()
    assert "file(INSTALL" in package_rules and "_dynamo_testing" not in package_rules
    assert "file(INSTALL" not in testing_rules
