#!/usr/bin/env bash
# The test command: makes sure the dependencies are there, builds, and runs the whole suite
# (C++ unit tests and pytest files) through ctest. Extra arguments go to ctest, e.g.
#   ./test.sh -L unit        only the C++ unit tests
#   ./test.sh -R trace       only tests whose name matches
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/scripts/lib.sh"

dynamo_install_deps
dynamo_build "$here" "$here/build"
cd "$here/build"
exec ctest -j "$(nproc 2>/dev/null || echo 2)" --output-on-failure --timeout 900 "$@"
