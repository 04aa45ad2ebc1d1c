#!/usr/bin/env bash
# The one set-up command: installs the Debian packages Dynamo needs (skipping what is there),
# builds, installs (package `dynamo` for /usr/bin/python3, `dynamo-*` programs in /usr/local/bin),
# then runs the demo. See README.md.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/scripts/lib.sh"

dynamo_install_deps
dynamo_build "$here" "$here/build"
dynamo_log "installing"
dynamo_as_root cmake --install "$here/build" >/dev/null
dynamo_log "running the demo: dynamo-demo"
cd "${TMPDIR:-/tmp}"
exec dynamo-demo
