#!/usr/bin/env bash
# Sets up and builds (tools/setup.sh), then checks that every reference points inside
# the repository and that no words of work history remain (tools/check_repo_docs.sh),
# and runs the doctest suite, checks that the GPU tier's groups run every GPU case once
# (tools/check_gpu_groups.sh), draws and emits the GPU fuzz's random chains without a
# GPU (build/epifuse_gpu_fuzz --dry-run, docs/fuzzing.md), the CLI tests, the installed package's checks (tools/test_install.sh: install to a temporary
# prefix, build and run tests/consumer against it) and the fuzzers (tools/fuzz.sh:
# their own clang build in build-fuzz/, then FUZZ_SECONDS of fuzzing the chain
# reader, default 60, and FUZZ_C_API_SECONDS of fuzzing the C ABI, default 420).
# Exits non-zero when anything failed. Without a GPU (or NVRTC, or hipRTC) the
# doctest suite says in one line which test suites it skips, and counts their
# cases as skipped.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
cd "$ROOT"

tools/setup.sh || { echo "test: setup or build failed" >&2; exit 1; }

failed=()
echo
echo "== the repository's references and wording (tools/check_repo_docs.sh)"
tools/check_repo_docs.sh || failed+=("repository references and wording")
echo
echo "== doctest suite ($BUILD_DIR/epifuse_tests)"
"$BUILD_DIR/epifuse_tests" || failed+=("doctest suite")
echo
echo "== every GPU test case in one group of the GPU tier (tools/check_gpu_groups.sh)"
tools/check_gpu_groups.sh "$BUILD_DIR/epifuse_tests" || failed+=("GPU test groups")
echo
echo "== the GPU fuzz's random chains, drawn and emitted without a GPU (epifuse_gpu_fuzz --dry-run)"
"$BUILD_DIR/epifuse_gpu_fuzz" --dry-run --cases 150 --out "$BUILD_DIR/gpu-fuzz-dry" || failed+=("GPU fuzz dry run")
echo
echo "== CLI tests (tests/cli/run_examples.sh)"
tests/cli/run_examples.sh "$BUILD_DIR/epifuse" || failed+=("CLI tests")
echo
echo "== installed package (tools/test_install.sh)"
BUILD_DIR="$BUILD_DIR" tools/test_install.sh || failed+=("installed package")
echo
echo "== Python module (tools/test_python.sh)"
BUILD_DIR="$BUILD_DIR" tools/test_python.sh || failed+=("Python module")
echo
# The C ABI target runs 1,200-1,400 inputs a second on one core (each accepted
# chain is differentiated too): 720 s is about a million.
echo "== fuzzers (tools/fuzz.sh ${FUZZ_SECONDS:-60} ${FUZZ_C_API_SECONDS:-720})"
tools/fuzz.sh "${FUZZ_SECONDS:-60}" "${FUZZ_C_API_SECONDS:-720}" || failed+=("fuzzer")
echo
if ((${#failed[@]} > 0)); then
  echo "test: FAILED: ${failed[*]}"
  exit 1
fi
echo "test: all passed"
