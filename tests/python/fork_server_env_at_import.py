"""Reads the environment when imported, as dynamo.config does: a fork server's query with an
environment must apply it before the import (tests/python/test_minify_fork_server.py)."""
import os

VALUE = os.environ.get("FORK_SERVER_TEST_VALUE")


def value():
    return VALUE
