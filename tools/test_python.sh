#!/usr/bin/env bash
# The Python module's tests (docs/python.md), twice: from the checkout against
# build/libepifuse_c.so, then from `pip install .` into a fresh virtual
# environment (Debian's python3 with its numpy and pytest; the in-tree build
# backend needs no registry). Then `pip install -e .` into another fresh one,
# and `import epifuse` from outside the tree must give the project's version.
# GPU tests skip without torch and a GPU.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
PY=/usr/bin/python3
cd "$ROOT"
status=0
echo "test_python: from the checkout"
EPIFUSE_LIBRARY="$BUILD_DIR/libepifuse_c.so" "$PY" -m pytest -q -p no:cacheprovider tests/python || status=1
venv=$(mktemp -d /tmp/epifuse-venv.XXXXXX)
trap 'rm -rf "$venv"' EXIT
echo "test_python: pip install . into a fresh virtual environment"
if "$PY" -m venv --system-site-packages "$venv" &&
   EPIFUSE_LIBRARY="$BUILD_DIR/libepifuse_c.so" "$venv/bin/python" -m pip install -q --no-deps "$ROOT"; then
  (cd /tmp && "$venv/bin/python" -c 'import epifuse, sys; print("  installed", epifuse.__version__, "at", epifuse.__file__)') || status=1
  EPIFUSE_TEST_INSTALLED=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/python || status=1
else
  echo "test_python: FAILED: pip install ." >&2
  status=1
fi
# An editable install loads the library from the checkout's build/ (the build
# backend refuses another build folder), so it is checked only against that one.
if [[ $(cd "$BUILD_DIR" 2>/dev/null && pwd) != "$ROOT/build" ]]; then
  echo "test_python: pip install -e . skipped: BUILD_DIR is not $ROOT/build"
else
  venv_e=$(mktemp -d /tmp/epifuse-venv-e.XXXXXX)
  trap 'rm -rf "$venv" "$venv_e"' EXIT
  echo "test_python: pip install -e . into a fresh virtual environment"
  want=$(sed -n 's/^project(epifuse VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
  if "$PY" -m venv --system-site-packages "$venv_e" &&
     (unset EPIFUSE_LIBRARY EPIFUSE_BUILD_DIR; "$venv_e/bin/python" -m pip install -q --no-deps --no-build-isolation -e "$ROOT"); then
    got=$(cd /tmp && env -u EPIFUSE_LIBRARY "$venv_e/bin/python" -c 'import epifuse; print(epifuse.__version__, epifuse.__file__)')
    echo "  editable: $got"
    pip_version=$("$venv_e/bin/python" -m pip show epifuse 2>/dev/null | sed -n 's/^Version: //p')
    if [[ $got != "$want $ROOT/python/epifuse/__init__.py" || $pip_version != "$want" ]]; then
      echo "test_python: FAILED: pip install -e .: want epifuse $want from $ROOT/python (pip says ${pip_version:-nothing})" >&2
      status=1
    fi
  else
    echo "test_python: FAILED: pip install -e ." >&2
    status=1
  fi
fi
exit $status
