#!/usr/bin/env bash
# Sets up a Debian 12 machine for epifuse and builds it (Release) in build/.
#
# Installs with apt-get whichever of the build and test dependencies are missing
# (running `apt-get update` first only then; via sudo when not root), then
# configures and builds. Safe to run again: installed packages are left alone and
# the build is incremental.
#
# Environment: JOBS (parallel build jobs, default: the number of CPUs),
#              BUILD_DIR (default: build).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}

# python3-pytest, python3-venv: the Python module's tests and its pip install . into
# a fresh virtual environment (tools/test_python.sh, docs/python.md).
# python3-numpy: Debian's, so that tests/cli/run_examples.sh can check with
# /usr/bin/python3 that numpy reads the .npy files epifuse writes.
# python3-torch: Debian's PyTorch (1.13, CPU), so that the module's torch tests
# that need no GPU run here too (the block op's plan on the CPU reference, the
# nn modules' parameters); those needing torch 2.4's torch.library or a GPU skip.
# clang, libclang-rt-dev: libFuzzer and the sanitizers for tools/fuzz.sh (the
# build below stays g++).
# libamdhip64-dev, libhiprtc-builtins5: hipRTC (inside ROCm 5's HIP runtime) for
# the AMD compile tier; opened with dlopen, never linked. clang-19: the same
# tier's gfx1100/gfx942 assembly, which ROCm 5's hipRTC cannot build (docs/amd.md).
PACKAGES=(cmake g++ make libfmt-dev nlohmann-json3-dev doctest-dev libcli11-dev libxxhash-dev python3-numpy python3-pytest python3-venv python3-torch
          clang libclang-rt-dev libamdhip64-dev libhiprtc-builtins5 clang-19)

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if ((${#missing[@]} > 0)); then
  echo "setup: installing ${missing[*]}"
  if ! command -v apt-get >/dev/null; then
    echo "setup: apt-get not found; install these packages by hand: ${missing[*]}" >&2
    exit 1
  fi
  SUDO=()
  if ((EUID != 0)); then
    if ! command -v sudo >/dev/null; then
      echo "setup: not root and no sudo; as root run: apt-get install ${missing[*]}" >&2
      exit 1
    fi
    SUDO=(sudo)
  fi
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: all dependencies are installed"
fi

echo "setup: building in ${BUILD_DIR#"$ROOT"/} (Release, $JOBS jobs)"
cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"
