#!/usr/bin/env bash
# Runs the Python SDK's pytest suite against the real daemon (ctest test `python_sdk`).
#
#   client/python/tests/run_tests.sh VENV_DIR CUBED_BINARY [pytest args...]
#
# Creates VENV_DIR with Debian's /usr/bin/python3 (nothing depends on a hand-installed
# interpreter), installs the package there as a user would (`pip install` of a copy of
# client/python: stubs generated at build time, grpcio/protobuf/numpy from PyPI) plus pytest, and
# runs the suite. When PyPI cannot be reached, it falls back to an offline venv on Debian's
# packages (python3-grpcio, python3-grpc-tools, python3-protobuf, python3-numpy, python3-pytest,
# installed by deploy/setup.sh). Exits 77 (ctest skip) only when neither way has the
# dependencies; a package that fails to build with PyPI reachable is a failure.
#
# With $CUBED_CLIENT_LIBRARY naming the native client core (libcubed_client_c.so; the ctest sets
# it to the build's), the package is installed with it bundled, as a user's install from a built
# tree, and the suite runs on connect()'s default core, native; the core tests (CORE_TESTS below)
# then run once more with CUBED_CLIENT_CORE=python, so that both cores stay covered. Without it,
# the package is pure Python and the suite runs on the Python core.
set -uo pipefail

if (($# < 2)); then
  echo "usage: $0 VENV_DIR CUBED_BINARY [pytest args...]" >&2
  exit 2
fi
venv=$1
cubed=$2
shift 2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
pkg=$(dirname "$here")
root=$(cd "$pkg/../.." && pwd)
py=/usr/bin/python3
SKIP=77

# A copy of the package, so that the in-tree build leaves nothing in the checkout; the protos
# come from the checkout (setup.py reads $CUBED_PROTO_DIR first).
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
cp -r "$pkg" "$src/cubed-client"
rm -rf "$src/cubed-client/build" "$src/cubed-client"/*.egg-info
export CUBED_PROTO_DIR=$root/proto
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

library=${CUBED_CLIENT_LIBRARY:-}
if [[ -n $library && ! -f $library ]]; then
  echo "FAILED: CUBED_CLIENT_LIBRARY=$library is not a file (ninja cubed_client_c)" >&2
  exit 1
fi
# The installed package finds the bundled copy (cubed_client/_native.py), not the variable.
unset CUBED_CLIENT_LIBRARY

# Hash of what the installed package is built from (the bundled library too): unchanged sources
# skip the reinstall.
src_hash=$( (cd "$root" && find client/python proto -type f \( -name '*.py' -o -name '*.proto' \
  -o -name '*.toml' -o -name '*.typed' -o -name '*.c' \) -not -path '*/tests/*' \
  -not -path '*/build/*' \
  -print0 | sort -z | xargs -0 sha256sum; [[ -z $library ]] || sha256sum <"$library") |
  sha256sum | cut -d' ' -f1)

install_online() {
  [[ -x $venv/bin/python ]] || "$py" -m venv "$venv" || return 1
  if [[ -f $venv/.cubed-src-hash && $(cat "$venv/.cubed-src-hash") == "$src_hash" ]] &&
    "$venv/bin/python" -c 'import cubed_client, pytest' 2>/dev/null; then
    return 0
  fi
  CUBED_CLIENT_LIBRARY=$library "$venv/bin/python" -m pip install -q --force-reinstall --no-deps \
    "$src/cubed-client" &&
    CUBED_CLIENT_LIBRARY=$library "$venv/bin/python" -m pip install -q "$src/cubed-client" \
      "pytest>=7" &&
    echo "$src_hash" >"$venv/.cubed-src-hash"
}

pypi_reachable() {
  "$py" - <<'PY'
import sys, urllib.request
try:
    urllib.request.urlopen("https://pypi.org/simple/pip/", timeout=10).read(1)
except Exception:
    sys.exit(1)
PY
}

python=$venv/bin/python
if ! install_online >"$venv.log" 2>&1; then
  if pypi_reachable; then
    echo "FAILED: pip install of the SDK failed although PyPI is reachable:" >&2
    cat "$venv.log" >&2
    exit 1
  fi
  echo "PyPI is unreachable; using Debian's packages (offline venv $venv-offline)"
  missing=$("$py" -c '
import importlib.util as u
mods = ["grpc", "grpc_tools", "google.protobuf", "numpy", "ml_dtypes", "pytest", "setuptools", "wheel"]
print(" ".join(m for m in mods if u.find_spec(m) is None))' 2>&1)
  if [[ -n $missing ]] || ! "$py" -c 'import venv' 2>/dev/null; then
    echo "SKIP: PyPI unreachable and Debian's python3 lacks: ${missing:-venv}" \
      "(deploy/setup.sh installs them)"
    exit $SKIP
  fi
  rm -rf "$venv-offline"
  if ! "$py" -m venv --system-site-packages "$venv-offline" ||
    ! CUBED_CLIENT_LIBRARY=$library "$venv-offline/bin/python" -m pip install -q --no-index \
      --no-build-isolation --no-deps "$src/cubed-client"; then
    echo "FAILED: the SDK does not build with Debian's grpc_tools" >&2
    exit 1
  fi
  python=$venv-offline/bin/python
fi

cd "$here" || exit 1
# Where the interpreter has its headers, setup.py builds the compiled launch (Note [Compiled
# launch] in cubed_client/_native.py): test_speedups.py then fails if it is missing.
if [[ -f $("$python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h ]]; then
  export CUBED_EXPECT_SPEEDUPS=1
fi
if [[ -z $library ]]; then
  exec "$python" -m pytest -q -p no:cacheprovider --cubed="$cubed" "$@" .
fi

# The bundled library must load: otherwise connect() would fall back to the Python core
# silently and the run would not cover what users get.
if ! "$python" -c '
import sys
from cubed_client import _native
path = _native.library_path()
_native.load()
sys.exit(0 if path and path.startswith(_native.__file__.rsplit("/", 1)[0]) else
         f"the native core loads from {path}, not from the package")'; then
  echo "FAILED: the installed package's bundled native core does not load" >&2
  exit 1
fi
echo "=== the whole suite on the default core (native, bundled) ==="
"$python" -m pytest -q -p no:cacheprovider --cubed="$cubed" "$@" .
rc=$?
(($# == 0)) || exit $rc  # Tests named on the command line: that run only.
# The Python core's own mechanisms (batching, ids, poisoning, futures, waiters, the ring reader,
# regions, graphs, cancellation) under the same tests: the files that drive the session stream,
# about 15 s. (test_ring.py and test_resume.py pin the Python core in the first run already; the
# sanitizer configuration runs the whole suite on the Python core.)
CORE_TESTS=(test_tensors.py test_errors.py test_ring.py test_regions.py test_wire.py
  test_graphs.py test_drills.py test_trace.py)
echo "=== the core tests on the Python core (CUBED_CLIENT_CORE=python) ==="
CUBED_CLIENT_CORE=python "$python" -m pytest -q -p no:cacheprovider --cubed="$cubed" \
  "${CORE_TESTS[@]}"
rc2=$?
((rc == 0)) && rc=$rc2
exit $rc
