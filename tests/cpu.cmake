# backend-cpu (plugins/backend-cpu): the scalar reference ops against naive
# double re-computations, every SIMD kernel set against the scalar set, the
# plugin as dlopen sees it, and dequantisation against the quant-zoo and
# qwen35moe-tiny fixtures. The suites link the static library vt_cpu_kernels
# (the plugin's code without its entry point). Also the matvec bandwidth
# benchmark (bench/bench_cpu_matvec.c), built but not run as a test.
vt_add_test(test_cpu_ops SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_cpu_ops.c
            LIBS vt_cpu_kernels LABELS cpu TIMEOUT 60)
vt_add_test(test_cpu_simd SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_cpu_simd.c
            LIBS vt_cpu_kernels LABELS cpu TIMEOUT 60)
vt_add_test(test_cpu_plugin SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_cpu_plugin.c
            LIBS ${CMAKE_DL_LIBS} LABELS cpu TIMEOUT 30)
add_dependencies(test_cpu_plugin backend-cpu)
vt_add_test(test_quant SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_quant.c
            LIBS vt_cpu_kernels vtcore LABELS "cpu;fixtures" TIMEOUT 60)

add_executable(bench_cpu_matvec ${CMAKE_SOURCE_DIR}/bench/bench_cpu_matvec.c)
target_link_libraries(bench_cpu_matvec PRIVATE vt_cpu_kernels)
target_include_directories(bench_cpu_matvec PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
add_executable(bench_cpu_ops ${CMAKE_SOURCE_DIR}/bench/bench_cpu_ops.c)
target_link_libraries(bench_cpu_ops PRIVATE vt_cpu_kernels)

# The block-quantised types' mat_mul (integer decode path and float path) on
# random blocks against the scalar reference, with bounds from the arithmetic.
vt_add_test(test_cpu_quant_kernels SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_cpu_quant_kernels.c
            LIBS vt_cpu_kernels LABELS "cpu;quant" TIMEOUT 180)
# bench/bench_read_bw: the read bandwidth of a large array with N threads (the
# ceiling bench/quant_decode.sh compares decode with). Built, not run as a test.
add_executable(bench_read_bw ${CMAKE_SOURCE_DIR}/bench/bench_read_bw.c)
target_link_libraries(bench_read_bw PRIVATE Threads::Threads)

# The fused MoE ops of ABI 1.2 (moe_route, moe_ffn): backend-cpu's scalar and
# fast kernels against a double evaluation of the contract, the split expert
# range against one call, refusals. The same file with VT_MOE_TEST_BACKEND
# "cuda" is test_moe_ops_cuda (tests/gpu_backends.cmake).
vt_add_test(test_moe_ops SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_moe_ops.c
            LIBS vtcore ${CMAKE_DL_LIBS} LABELS cpu TIMEOUT 300)
add_dependencies(test_moe_ops backend-cpu)
# bench/bench_sampler: host ms per sampled token at a 248k vocabulary, per
# setting (greedy, vt run's default chain, temperature over the whole
# vocabulary, top-p, min-p). Built, not run as a test.
add_executable(bench_sampler ${CMAKE_SOURCE_DIR}/bench/bench_sampler.c)
target_link_libraries(bench_sampler PRIVATE vtcore m)
target_include_directories(bench_sampler PRIVATE ${VT_CORE_INTERNAL_INCLUDE_DIRS} ${CMAKE_SOURCE_DIR}/bench)
