#!/usr/bin/env bash
# tools/emit_all.sh BUILD_DIR OUT_DIR: every example chain's kernels as codegen
# emits them, for sm_80, sm_90a, gfx90a and gfx1100 at a few shapes, into
# OUT_DIR/<chain>.<target>.<shape>.{cu,json,probe}: the source (`epifuse emit`),
# its JSON form (name, tile, bindings), and tools/emit_probe.cpp's report (launch
# geometry at several multiprocessor counts, workspace, the disk record's tile
# bytes, the general kernel, the tuner's candidates). Compare two builds with
# `diff -r`: a refactor of codegen should leave no difference.
set -euo pipefail
build=$(cd "${1:?usage: emit_all.sh BUILD_DIR OUT_DIR}" && pwd)
out=${2:?usage: emit_all.sh BUILD_DIR OUT_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
probe="$build/emit_probe"
flags=$(sed -n 's/^CXX_FLAGS = //p' "$build/CMakeFiles/epifuse_tests.dir/flags.make")
defines=-DFMT_HEADER_ONLY=1
includes=$(sed -n 's/^CXX_INCLUDES = //p' "$build/CMakeFiles/epifuse_tests.dir/flags.make")
# shellcheck disable=SC2086
c++ $flags $defines $includes "$root/tools/emit_probe.cpp" -o "$probe" "$build/libepifuse.a" -ldl

# The examples, and the fuzzer's GEMM seeds for the mainloops no example takes
# (exact f32 on FFMA, split-K shapes, column-major layouts).
for chain in "$root"/examples/chains/*.json "$root"/tests/fuzz/seeds/gemm_*.json "$root"/tests/fuzz/seeds/dual_*.json; do
  name=$(basename "$chain" .json)
  [[ $chain == */seeds/* ]] && name=seed_$name
  gemm=$(python3 -c "import json,sys; m=json.load(open(sys.argv[1])).get('mainloop', {}); m=m if isinstance(m, dict) else {'kind': m}; print(int(m.get('kind', 'elementwise') != 'elementwise'))" "$chain")
  if [[ $gemm == 1 ]]; then shapes=(default 65,130,33 4096,4096,4096 128,4096,1024); else shapes=(default 65,130 4096,4096); fi
  for target in sm_80 sm_90a gfx90a gfx1100; do
    for shape in "${shapes[@]}"; do
      base="$out/$name.$target.$shape"
      args=(--target "$target")
      probe_shape=$shape
      if [[ $shape != default ]]; then
        args+=(--shape "$shape")
      else
        probe_shape=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); s=d.get('shape'); print(','.join(map(str,s)) if s else '1024,1024,1024')" "$chain")
      fi
      "$build/epifuse" emit "${args[@]}" "$chain" >"$base.cu" 2>"$base.err" || echo "exit $?" >>"$base.err"
      "$build/epifuse" emit --json "${args[@]}" "$chain" >"$base.json" 2>/dev/null || true
      "$probe" "$chain" "$target" "$probe_shape" >"$base.probe" 2>&1 || true
    done
  done
done
echo "emit_all: $(ls "$out" | wc -l) files in $out"
