#!/usr/bin/env bash
# Checks the installed C++ package (docs/packaging.md) from an already-built
# build directory, without building epifuse again:
#   1. `cmake --install BUILD_DIR --prefix TMP` lays out lib/, include/, bin/ and
#      lib/cmake/epifuse/;
#   2. neither the installed library nor the CLI holds a path of the source or
#      build tree (templates are embedded; nothing there is read at run time),
#      and the library defines no benchmark symbol (they are epifuse_bench's,
#      linked into the CLI only);
#   3. tests/consumer configures with find_package(epifuse 0.1 CONFIG) against
#      TMP alone, builds and runs (its checks: tests/consumer/main.cpp), and a
#      request for 0.2 is refused (the version file: SameMinorVersion);
#   4. TMP/bin/epifuse --version and validate run on a copied example chain,
#      from outside the tree;
#   5. tests/consumer configures with add_subdirectory(epifuse) (not built: that
#      would compile the library again), making none of epifuse's own targets.
# Prints one line per step and `test_install: PASSED` or `test_install: FAILED: STEP`.
#
# Environment: BUILD_DIR (default: build), JOBS (default: the number of CPUs).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
requested=${BUILD_DIR:-$ROOT/build}
BUILD_DIR=$(cd "$requested" 2>/dev/null && pwd) && [[ -f $BUILD_DIR/CMakeCache.txt ]] || {
  echo "test_install: FAILED: no build directory $requested (run tools/setup.sh first)"
  exit 1
}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/epifuse-install.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
PREFIX=$WORK/prefix
LOG=$WORK/step.log

fail() {
  echo "test_install: FAILED: $*"
  exit 1
}
# step NAME COMMAND...: runs COMMAND with its output in $LOG; on failure shows
# the end of it and stops.
step() {
  local name=$1
  shift
  if ! "$@" > "$LOG" 2>&1; then
    tail -n 40 "$LOG" | sed 's/^/    /'
    fail "$name"
  fi
  echo "test_install: ok   $name"
}

step "cmake --install ${BUILD_DIR#"$ROOT"/} --prefix <tmp>" cmake --install "$BUILD_DIR" --prefix "$PREFIX"

# The layout. GNUInstallDirs chose the library folder at configure time (lib,
# or lib/<multiarch> for a /usr prefix).
lib=$(cd "$PREFIX" && find . -name libepifuse.a -printf '%h\n' | head -n 1)
lib=${lib#./}
[[ -n $lib ]] || fail "no libepifuse.a under the prefix"
for f in "$lib/libepifuse.a" include/epifuse/epifuse.hpp include/epifuse/jit.hpp bin/epifuse \
         "$lib/cmake/epifuse/epifuseConfig.cmake" "$lib/cmake/epifuse/epifuseConfigVersion.cmake" \
         "$lib/cmake/epifuse/epifuseTargets.cmake" share/doc/epifuse/LICENSE; do
  [[ -f $PREFIX/$f ]] || fail "the install has no $f"
done
echo "test_install: ok   layout: $lib/libepifuse.a, include/epifuse/ ($(ls "$PREFIX/include/epifuse" | wc -l) headers), bin/epifuse, $lib/cmake/epifuse/"

# No source or build path compiled in (EPIFUSE_SOURCE_DIR and EPIFUSE_BINARY_DIR
# are the test target's alone; __FILE__ is mapped with -ffile-prefix-map).
for f in "$lib/libepifuse.a" bin/epifuse; do
  for dir in "$ROOT" "$BUILD_DIR"; do
    if hits=$(strings -a "$PREFIX/$f" | grep -F "$dir"); then
      echo "$hits" | head -n 5 | sed 's/^/    /'
      fail "$f holds the path $dir"
    fi
  done
done
echo "test_install: ok   no source or build path in $lib/libepifuse.a or bin/epifuse"

# The benchmarks live in epifuse_bench (src/bench), outside the library: no
# defined symbol of bench(), tune_on_random_data() or the cuBLASLt baseline.
bench_symbols='epifuse::(bench\(|tune_on_random_data|baseline::|bench_detail::)'
if hits=$(nm -C --defined-only "$PREFIX/$lib/libepifuse.a" 2>/dev/null | grep -E "$bench_symbols"); then
  echo "$hits" | head -n 5 | sed 's/^/    /'
  fail "$lib/libepifuse.a defines benchmark symbols"
fi
nm -C --defined-only "$PREFIX/bin/epifuse" | grep -E "$bench_symbols" > /dev/null || fail "bin/epifuse has no benchmark symbols (nm)"
echo "test_install: ok   no benchmark symbol in $lib/libepifuse.a (nm); bin/epifuse has them"

# The consumer, against the prefix alone (no package registry, no build tree).
consumer_cmake=(cmake -S "$ROOT/tests/consumer" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PREFIX"
                -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON)
step "consumer: configure (find_package(epifuse 0.1 CONFIG))" "${consumer_cmake[@]}" -B "$WORK/consumer"
grep -F "consumer: epifuse" "$LOG" | sed 's/^-- /    /'
grep -qF "from $PREFIX/" "$LOG" || fail "consumer: find_package found epifuse outside the install prefix"
if "${consumer_cmake[@]}" -B "$WORK/consumer-0.2" -DEPIFUSE_CONSUMER_VERSION=0.2 > "$LOG" 2>&1; then
  fail "consumer: find_package(epifuse 0.2) accepted 0.1"
fi
echo "test_install: ok   consumer: find_package(epifuse 0.2) is refused"
step "consumer: build" cmake --build "$WORK/consumer" -j "$JOBS"
step "consumer: run" "$WORK/consumer/epifuse_consumer"
sed 's/^/    /' "$LOG"

# The installed CLI, run from outside the tree on a copy of an example chain.
cp "$ROOT/examples/chains/bias_gelu_dropout_add.json" "$WORK/chain.json"
step "bin/epifuse --version" bash -c 'cd "$1" && "$2" --version' _ "$WORK" "$PREFIX/bin/epifuse"
sed -n 1p "$LOG" | sed 's/^/    /'
step "bin/epifuse validate chain.json" bash -c 'cd "$1" && "$2" validate chain.json' _ "$WORK" "$PREFIX/bin/epifuse"

# add_subdirectory: configure only.
step "consumer: configure (add_subdirectory(epifuse))" cmake -S "$ROOT/tests/consumer" -B "$WORK/subdirectory" \
  -DEPIFUSE_CONSUMER_MODE=subdirectory
grep -qF "consumer: epifuse from add_subdirectory" "$LOG" || fail "consumer: add_subdirectory mode did not run"

echo "test_install: PASSED"
