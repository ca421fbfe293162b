# Every prefill length and every chunk size on every fixture model
# (test_prefill_sweep.c): prefixes 1..N in one chunk against the references,
# chunk sizes 1..N against one chunk, and the trained model's greedy
# references with n_batch 1..8, resident and streamed. test_prefill_sweep runs
# on the CPU (reference and fast kernels, so in CI); test_prefill_sweep_cuda
# runs the same cases on device "cuda" and skips loudly (77) without a CUDA
# device; a backend-cuda that should have been built under CI=true and was not
# is a failure, as for test_cuda_ops.
vt_add_test(test_prefill_sweep SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_prefill_sweep.c
            LIBS vtcore PkgConfig::CJSON LABELS "qwen35;gemma4;fixtures" TIMEOUT 600)
add_dependencies(test_prefill_sweep model-qwen35 model-gemma4 backend-cpu)
if(VT_SANITIZE)
  target_compile_definitions(test_prefill_sweep PRIVATE VT_TEST_SANITIZED=1)
endif()

vt_add_test(test_prefill_sweep_cuda SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_prefill_sweep.c
            LIBS vtcore PkgConfig::CJSON LABELS "gpu;cuda;fixtures" TIMEOUT 600)
target_compile_definitions(test_prefill_sweep_cuda PRIVATE VT_SWEEP_DEVICE="cuda")
vt_cuda_test_definitions(test_prefill_sweep_cuda)
add_dependencies(test_prefill_sweep_cuda model-qwen35 model-gemma4 backend-cpu)
if(TARGET store-device)
  add_dependencies(test_prefill_sweep_cuda store-device)
endif()
if(VT_SANITIZE)
  target_compile_definitions(test_prefill_sweep_cuda PRIVATE VT_TEST_SANITIZED=1)
endif()
