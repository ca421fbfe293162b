# Scalar reference dequantisation of every GGUF weight type in backend-cpu
# (plugins/backend-cpu/cpu_dequant.c, gguf.md §6), bit-exact against the
# quant-zoo fixture, plus hostile arguments and `vt info`'s bits per weight.
# Links the backend's static kernel library and the core (GGUF reader, info).
vt_add_test(test_quant_zoo SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_quant_zoo.c
            LIBS vt_cpu_kernels vtcore LABELS "cpu;fixtures;parser" TIMEOUT 60)
# The low-bit types (IQ1-IQ3, TQ, NVFP4, Q1_0/Q2_0, the fork's ids 64-66): the
# codebooks of vt/iq_grids.h against ggml's, and the scalar reference bit-exact
# against the quant-zoo-2 fixture; `vt info` names them; an unknown id is refused.
vt_add_test(test_quant_zoo2 SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_quant_zoo2.c
            LIBS vt_cpu_kernels vtcore LABELS "cpu;fixtures;parser" TIMEOUT 60)
