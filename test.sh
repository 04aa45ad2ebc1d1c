#!/usr/bin/env bash
# The test command: makes sure the dependencies are there, builds, and runs the whole suite
# (C++ unit tests and pytest files) through ctest, on both supported stacks (docs/stacks.md):
#   1. Debian's Python 3.11 + torch 1.13 in build/ (the default stack);
#   2. pyenv's Python 3.12 + torch 2.x from PyPI in build-py312/ (its virtual environment is made
#      once under ~/.cache/dynamo/; files labelled stack2_slow would be left out: none today, see
#      DYNAMO_STACK2_SLOW in cmake/DynamoTesting.cmake). DYNAMO_STACK2=0 skips stack 2; DYNAMO_STACK2=1 fails when its
#      environment cannot be made (by default that is reported and stack 1 decides).
# A failure on either stack fails the command. Extra arguments go to both ctest runs, e.g.
#   ./test.sh -L unit        only the C++ unit tests
#   ./test.sh -R trace       only tests whose name matches
# With no arguments the groups of small pytest files in DYNAMO_PYTEST_BATCHES run in one process
# per group (ctest label "batch") and their per-file entries (label "batched") are left out; with
# arguments the per-file entries run and the batches are left out (cmake/DynamoTesting.cmake).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/scripts/lib.sh"
jobs="$(nproc 2>/dev/null || echo 2)"
# ctest keeps only the last -LE (and -E) it is given, so with arguments the batches are left out by
# name: a user's own -LE (e.g. `./test.sh -LE slow`) then still applies and no file runs twice.
if [ "$#" -eq 0 ]; then skip=(-LE '^batched$'); else skip=(-E '^py[.]batch[.]'); fi

dynamo_install_deps
dynamo_build "$here" "$here/build"
rc1=0
(cd "$here/build" && ctest -j "$jobs" --output-on-failure --timeout 900 "${skip[@]}" "$@") || rc1=$?

rc2=0
if [ "${DYNAMO_STACK2:-auto}" != "0" ]; then
  dynamo_log "stack 2: Python 3.12 + torch 2.x in build-py312 (DYNAMO_STACK2=0 skips it)"
  if ! dynamo_stack2_env >/dev/null; then
    # No pyenv 3.12 or no PyPI here: the environment cannot be made. That is a failure only when
    # stack 2 was asked for (DYNAMO_STACK2=1); otherwise it is said loudly and stack 1 decides.
    if [ "${DYNAMO_STACK2:-auto}" = "1" ]; then rc2=1; fi
    dynamo_log "stack 2 NOT RUN: its environment could not be created (see above)"
  elif dynamo_build_stack2 "$here" "$here/build-py312"; then
    (cd "$here/build-py312" && ctest -j "$jobs" --output-on-failure --timeout 900 -L '^stack2$' "${skip[@]}" "$@") || rc2=$?
  else
    rc2=1
  fi
  [ "$rc2" -eq 0 ] || dynamo_log "stack 2 FAILED (exit $rc2)"
fi
[ "$rc1" -eq 0 ] || dynamo_log "stack 1 FAILED (exit $rc1)"
[ "$rc1" -eq 0 ] && [ "$rc2" -eq 0 ]
