# The quantisers of core/tools/quantize.c (float32 rows to every common GGUF
# weight type, gguf.md §6) checked through backend-cpu's reference
# dequantiser (the static vt_cpu_kernels library) against error bounds derived
# per type; F16/BF16/Q8_0 bytes against an independent implementation; and
# `vt mkmodel`'s per-tensor type choice (mixes, fallback), ending with `vt run`
# on a model of each type. Needs the vt binary and the plugins it loads.
vt_add_test(test_quantize SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_quantize.c
            ${CMAKE_CURRENT_SOURCE_DIR}/test_quantize_mkmodel.c
            LIBS vt_cpu_kernels vtcore LABELS "quant;gguf" TIMEOUT 60)
add_dependencies(test_quantize vt backend-cpu model-qwen35)
if(TARGET model-gemma4)
  add_dependencies(test_quantize model-gemma4)
endif()
if(VT_SANITIZE)
  target_compile_definitions(test_quantize PRIVATE VT_TEST_SANITIZED=1)
endif()
