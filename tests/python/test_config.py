"""dynamo.config: unknown names and bad values are refused at the assignment, with exact messages;
reads, writes, env-var defaults and monkeypatch keep working."""
import os
import pathlib
import subprocess
import sys

import pytest

import dynamo
import dynamo.config
from dynamo import config


@pytest.fixture
def restore():
    saved = {o.name: getattr(config, o.name) for o in config.OPTIONS}
    yield
    for name, value in saved.items():
        setattr(config, name, value)


def raised(name, value):
    with pytest.raises(dynamo.UserError) as info:
        setattr(dynamo.config, name, value)
    return str(info.value)


def test_the_three_spellings_are_one_module():
    assert dynamo.config is config is sys.modules["dynamo.config"]


def test_defaults():
    assert (config.cache_size_limit, config.suppress_errors, config.verbose) == (8, True, False)


def test_typo_names_the_closest_option():
    assert raised("cache_size_limt", 2) == (
        "error: dynamo.config has no option 'cache_size_limt'\n"
        "  = hint: did you mean cache_size_limit? options: cache_size_limit, suppress_errors, "
        "verbose, trace_path, debug_function, disabled_passes, automatic_dynamic_shapes")
    assert not hasattr(config, "cache_size_limt")


def test_unknown_name_without_a_close_one():
    assert raised("fullgraph", True) == (
        "error: dynamo.config has no option 'fullgraph'\n"
        "  = hint: options: cache_size_limit, suppress_errors, verbose, trace_path, debug_function, disabled_passes, automatic_dynamic_shapes")


def test_wrong_type_names_the_option_and_what_it_takes(restore):
    assert raised("cache_size_limit", "abc") == (
        "error: dynamo.config.cache_size_limit must be an int from 0 to 2147483647, got str 'abc'\n"
        "  = hint: Compiled entries per code object; past it the function runs eagerly "
        "(one warning). Default: 8.")
    assert config.cache_size_limit == 8


@pytest.mark.parametrize("name,value,accepts,got", [
    ("cache_size_limit", -1, "an int from 0 to 2147483647", "int -1"),
    ("cache_size_limit", 2**31, "an int from 0 to 2147483647", "int 2147483648"),
    ("cache_size_limit", True, "an int from 0 to 2147483647", "bool True"),
    ("cache_size_limit", 2.0, "an int from 0 to 2147483647", "float 2.0"),
    ("suppress_errors", 1, "True or False", "int 1"),
    ("verbose", "yes", "True or False", "str 'yes'"),
    ("trace_path", "", "None or a non-empty path (str or os.PathLike)", "str ''"),
    ("trace_path", 3, "None or a non-empty path (str or os.PathLike)", "int 3"),
    ("debug_function", b"f", "None or a non-empty function name (str)", "bytes b'f'"),
])
def test_bad_values(name, value, accepts, got, restore):
    first_line = raised(name, value).splitlines()[0]
    assert first_line == f"error: dynamo.config.{name} must be {accepts}, got {got}"


def test_good_values_are_stored(restore, tmp_path):
    config.cache_size_limit = 0
    config.suppress_errors = False
    config.verbose = True
    config.trace_path = pathlib.Path(tmp_path / "t.db")
    config.debug_function = "forward"
    assert config.cache_size_limit == 0 and config.suppress_errors is False and config.verbose
    assert config.trace_path == str(tmp_path / "t.db")   # os.PathLike stored as str
    assert config.debug_function == "forward"
    config.trace_path = None
    config.debug_function = None
    assert config.trace_path is None and config.debug_function is None


def test_options_cannot_be_deleted():
    with pytest.raises(dynamo.UserError) as info:
        del dynamo.config.verbose
    assert str(info.value) == ("error: dynamo.config.verbose cannot be deleted\n"
                               "  = hint: assign its default instead: dynamo.config.verbose = False")


def test_monkeypatch_sets_and_restores(monkeypatch):
    monkeypatch.setattr(dynamo.config, "cache_size_limit", 3)
    assert config.cache_size_limit == 3
    monkeypatch.undo()
    assert config.cache_size_limit == 8


def test_private_names_are_not_checked():
    config._scratch = object()
    del config._scratch


def test_validate_is_the_same_check():
    assert config.validate("cache_size_limit", 5) == 5
    with pytest.raises(dynamo.UserError, match="no option 'nope'"):
        config.validate("nope", 1)


def test_help_and_docs_table_come_from_the_table():
    for o in config.OPTIONS:
        assert f"    {o.name} = {o.default!r}" in config.__doc__
        assert f"| `{o.name}` | `{o.default!r}` | {o.accepts} |" in config.markdown_table()
    assert "DYNAMO_TRACE=... sets the default" in config.__doc__


def test_env_var_defaults(tmp_path):
    db = str(tmp_path / "x.db")
    env = dict(os.environ, DYNAMO_TRACE=db, DYNAMO_DEBUG_FUNCTION="forward")
    out = subprocess.run(
        [sys.executable, "-c",
         "import dynamo; print(dynamo.config.trace_path, dynamo.config.debug_function)"],
        env=env, capture_output=True, text=True, check=True).stdout
    assert out == f"{db} forward\n"


def test_empty_env_var_means_off():
    env = dict(os.environ, DYNAMO_TRACE="", DYNAMO_DEBUG_FUNCTION="")
    out = subprocess.run(
        [sys.executable, "-c",
         "import dynamo; print(dynamo.config.trace_path, dynamo.config.debug_function)"],
        env=env, capture_output=True, text=True, check=True).stdout
    assert out == "None None\n"
