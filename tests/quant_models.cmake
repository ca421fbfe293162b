# qwen35moe models in every quantised type and the K_M mixes (vt mkmodel):
# fast kernels (float prefill, integer decode) against the scalar reference.
vt_add_test(test_quant_models SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_quant_models.c
            LIBS vtcore LABELS "cpu;quant" TIMEOUT 120)
add_dependencies(test_quant_models backend-cpu model-qwen35)
if(VT_SANITIZE)
  target_compile_definitions(test_quant_models PRIVATE VT_TEST_SANITIZED=1)
endif()
