# The GPU test tier's groups of test files (doctest -sf filters), one process each:
# each file's cases are independent, and the slow ones (the 4096^3 checks, the tile
# sweeps) sit in different files. Sourced by tools/gpu_suite.sh and
# tools/sanitize_suite.sh; a new file in tests/gpu/ joins a group here.
gpu_groups=("*test_gemm.cpp,*test_gemm_col_sum.cpp" "*test_gemm_sm90.cpp" "*test_dual_gemm.cpp" "*test_elementwise.cpp"
            "*test_row.cpp" "*test_gemm_wave.cpp" "*test_driver.cpp,*test_disk_cache_gpu.cpp,*test_devices.cpp" "*test_strided_operands.cpp"
            "*test_batched_gemm.cpp" "*test_strided_epilogue.cpp" "*test_strided_rows.cpp")
