# The GPU test tier's groups, one process each: test files (doctest -sf filters), and
# for a file too slow for one process, a part of its test cases. Each file's cases are
# independent, and the slow ones (the 4096^3 checks, the tile sweeps) sit in different
# groups. Sourced by tools/gpu_suite.sh and tools/sanitize_suite.sh; a new file in
# tests/gpu/ joins a group here (tools/check_gpu_groups.sh, which tools/test.sh runs,
# fails while a case is in no group or in two).
#   gpu_groups[i]      the group's files (-sf)
#   gpu_group_only[i]  its test cases (-tc), empty for all of them
#   gpu_group_skip[i]  test cases it leaves to other groups (-tce), empty for none
# doctest filters split at commas: write a comma in a name as the '?' wildcard.
# The row family's file is three groups: its two tile sweeps took over 380 s in one
# process with the rest, and about 260 s as three (H100, 2026-11-28).
gpu_groups=("*test_gemm.cpp,*test_gemm_col_sum.cpp" "*test_gemm_sm90.cpp" "*test_dual_gemm.cpp" "*test_elementwise.cpp"
            "*test_row.cpp" "*test_row.cpp" "*test_row.cpp"
            "*test_gemm_wave.cpp" "*test_driver.cpp,*test_disk_cache_gpu.cpp,*test_devices.cpp" "*test_strided_operands.cpp"
            "*test_batched_gemm.cpp" "*test_strided_epilogue.cpp" "*test_strided_rows.cpp" "*test_row_backward.cpp")
gpu_group_only=("" "" "" ""
                "*bit-equal to one block per row (N <= 20000)" "*bit-equal to one block per row (long rows)" ""
                "" "" "" "" "" "" "")
gpu_group_skip=("" "" "" ""
                "" "" "*bit-equal to one block per row*"
                "" "" "" "" "" "" "")
# The doctest options of group i: gpu_group_args i [EXTRA_SKIP] (EXTRA_SKIP: more -tce patterns).
gpu_group_args() {
  local i=$1 skip=${gpu_group_skip[$1]}
  [[ -n ${2:-} ]] && skip=${skip:+$skip,}$2
  printf '%s\n' -ts="gpu*" -sf="${gpu_groups[$i]}"
  [[ -n ${gpu_group_only[$i]} ]] && printf '%s\n' -tc="${gpu_group_only[$i]}"
  [[ -n $skip ]] && printf '%s\n' -tce="$skip"
  return 0
}
# How group i is named in the suites' summaries: its files, and its part of them.
gpu_group_label() {
  printf '%s' "${gpu_groups[$1]}${gpu_group_only[$1]:+ (${gpu_group_only[$1]})}${gpu_group_skip[$1]:+ (all but ${gpu_group_skip[$1]})}"
}
