#!/usr/bin/env bash
# The Python module's tests (docs/python.md), twice: from the checkout against
# build/libepifuse_c.so, then from `pip install .` into a fresh virtual
# environment (Debian's python3 with its numpy and pytest; the in-tree build
# backend needs no registry). GPU tests skip without torch and a GPU.
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
exit $status
