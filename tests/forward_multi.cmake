# Several sequences in one pass (test_forward_multi.c): batched rounds of
# vt_engine_seqs_eval with mixed chunk sizes, resets and frees mid-run, equal
# each sequence alone, on every fixture family, streamed and resident.
# test_forward_multi runs on the CPU (so in CI); test_forward_multi_cuda runs
# the same cases on device "cuda" and skips loudly (77) without a device.
vt_add_test(test_forward_multi SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_forward_multi.c
            LIBS vtcore LABELS "qwen35;gemma4;fixtures" TIMEOUT 600)
add_dependencies(test_forward_multi model-qwen35 model-gemma4 backend-cpu)

vt_add_test(test_forward_multi_cuda SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_forward_multi.c
            LIBS vtcore LABELS "gpu;cuda;fixtures" TIMEOUT 600)
target_compile_definitions(test_forward_multi_cuda PRIVATE VT_MULTI_DEVICE="cuda")
vt_cuda_test_definitions(test_forward_multi_cuda)
add_dependencies(test_forward_multi_cuda model-qwen35 model-gemma4 backend-cpu)
if(TARGET store-device)
  add_dependencies(test_forward_multi_cuda store-device)
endif()
