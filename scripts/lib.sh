# Shared by setup.sh, test.sh and .ci/run: dependency installation and the build.
# Source it; it defines functions only.

# Debian 12 packages the project needs. OpenBLAS matters: without it Debian's torch runs matrix
# products on the reference BLAS, about 9x slower. pybind11-dev: torch's python_variable.h includes
# pybind11 and libtorch-dev does not depend on it. libxml2-utils (xmllint) and python3-jsonschema
# validate the JUnit and SARIF reports in the tests; python3-networkx runs functorch's min-cut
# partitioner, the anchor of bench/aot_eager.py. xauth: xvfb-run needs it (xvfb only recommends it)
# for the inspector's end-to-end test; libegl-dev and libglu1-mesa-dev: CMake's FindOpenGL (run by
# Qt6Gui's config) records their libraries in CMakeCache.txt when present. valgrind: the
# instruction counts of docs/performance.md (callgrind). libssl-dev: SHA-256 (common/src/hash.cpp). scripts/check_deps.py (ctest setup.deps_check)
# fails when the build or the tests use a file of a package this list does not bring in.
DYNAMO_APT_PACKAGES=(
  g++ cmake ninja-build ccache pkg-config
  python3 python3-dev python3-pytest python3-torch python3-torchvision libtorch-dev pybind11-dev
  libxml2-utils python3-jsonschema
  python3-networkx
  valgrind
  libopenblas0-pthread
  libdnnl-dev
  libsqlite3-dev sqlite3
  libssl-dev
  catch2
  nlohmann-json3-dev
  qt6-base-dev libgraphviz-dev xvfb xauth libegl-dev libglu1-mesa-dev
)

dynamo_log() { printf '[dynamo] %s\n' "$*" >&2; }

# Runs a command as root: directly when we are root, else through sudo.
dynamo_as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else dynamo_log "need root for: $* (install sudo or run as root)"; return 1
  fi
}

# Installs whatever of DYNAMO_APT_PACKAGES is missing. Idempotent: when everything is there it
# touches nothing and runs no apt-get at all.
dynamo_install_deps() {
  local missing=() p
  for p in "${DYNAMO_APT_PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
  if [ ${#missing[@]} -eq 0 ]; then
    dynamo_log "dependencies: all ${#DYNAMO_APT_PACKAGES[@]} Debian packages present"
    return 0
  fi
  dynamo_log "installing ${#missing[@]} Debian packages: ${missing[*]}"
  dynamo_as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  dynamo_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# Configures SRC into BUILD (once) and builds it. Further arguments go to that first configure;
# without any, the tree is built for Debian's /usr/bin/python3 (stack 1).
dynamo_build() {
  local src="$1" build="$2" jobs
  shift 2
  [ $# -gt 0 ] || set -- -DPython3_EXECUTABLE=/usr/bin/python3
  # ccache: paths relative to the folder above the clone, so clones and worktrees share hits.
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(dirname "$src")}"
  jobs=$(nproc 2>/dev/null || echo 2)
  if [ ! -f "$build/build.ninja" ]; then
    cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
  fi
  cmake --build "$build" -j "$jobs"
}

# The second stack (issue 13): pyenv's Python 3.12 with torch 2.x from PyPI, in a virtual
# environment outside the clone so that every clone (CI's included) reuses it. torch 2.11.0 is what
# the GPU machines this project is lent run; torchvision 0.26.0 is the release built against it.
# The first creation downloads about 3 GB (torch's PyPI wheel brings CUDA's runtime libraries;
# nothing else is published there for Linux) and took 3 min 36 s here; afterwards a stamp file
# makes this a no-op.
# jsonschema: test_explain_schemas validates the reports (python3-jsonschema on stack 1).
DYNAMO_STACK2_PINS="torch==2.11.0 torchvision==0.26.0 pytest==9.2.0 jsonschema==4.23.0"
DYNAMO_STACK2_ENV="${DYNAMO_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/dynamo}/py312-torch2.11"

# Prints the newest pyenv Python 3.12 interpreter, or nothing.
dynamo_stack2_base_python() {
  local root="${PYENV_ROOT:-$HOME/.pyenv}" p best=""
  for p in "$root"/versions/3.12.*/bin/python3.12; do
    [ -x "$p" ] && best="$p"
  done
  printf '%s' "$best"
}

# Creates (once) the stack-2 virtual environment and prints its interpreter's path.
dynamo_stack2_env() {
  local env="$DYNAMO_STACK2_ENV" stamp="$DYNAMO_STACK2_ENV/.dynamo-pins" base
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$DYNAMO_STACK2_PINS" ] && [ -x "$env/bin/python" ]; then
    printf '%s' "$env/bin/python"
    return 0
  fi
  base="$(dynamo_stack2_base_python)"
  if [ -z "$base" ]; then
    dynamo_log "stack 2: no Python 3.12 under ${PYENV_ROOT:-$HOME/.pyenv}/versions (install one with pyenv, or set PYENV_ROOT)"
    return 1
  fi
  if [ -x "$env/bin/python" ] && [ -f "$stamp" ]; then
    # Pins changed: pip brings the environment to them in place (only what changed is fetched).
    dynamo_log "stack 2: updating $env to $DYNAMO_STACK2_PINS"
  else
    dynamo_log "stack 2: creating $env with $base and $DYNAMO_STACK2_PINS (first time only: about 3 GB from PyPI)"
    "$base" -m venv --clear "$env" >&2 || return 1
  fi
  # shellcheck disable=SC2086
  if ! "$env/bin/python" -m pip install --disable-pip-version-check -q $DYNAMO_STACK2_PINS >&2; then
    dynamo_log "stack 2: pip could not install $DYNAMO_STACK2_PINS into $env (is PyPI reachable?)"
    return 1
  fi
  printf '%s\n' "$DYNAMO_STACK2_PINS" > "$stamp"
  printf '%s' "$env/bin/python"
}

# Configures and builds the stack-2 tree (its own build directory) against that environment.
dynamo_build_stack2() {
  local src="$1" build="$2" py root
  py="$(dynamo_stack2_env)" || return 1
  root="$("$py" -c 'import sys; print(sys.base_prefix)')"
  dynamo_build "$src" "$build" -DPython3_EXECUTABLE="$py" -DPython3_ROOT_DIR="$root" \
    -DPython3_FIND_STRATEGY=LOCATION -DDYNAMO_BUILD_GUI=OFF >&2
}
