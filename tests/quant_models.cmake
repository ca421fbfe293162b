# qwen35moe models in every quantised type and the K_M mixes (vt mkmodel):
# fast kernels (float prefill, integer decode) against the scalar reference.
vt_add_test(test_quant_models SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_quant_models.c
            LIBS vtcore LABELS "cpu;quant" TIMEOUT 300)
add_dependencies(test_quant_models backend-cpu model-qwen35)
