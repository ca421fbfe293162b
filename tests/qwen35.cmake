# Qwen3.5 model plugin (plugins/model-qwen35): reference-logit comparisons on
# the qwen35moe-tiny fixtures through the engine, greedy decoding, split
# files, chunked prefill; and load-time refusals on edited copies of the
# fixture GGUF.

vt_add_test(test_qwen35_fixtures SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_qwen35_fixtures.c
            LIBS vtcore PkgConfig::CJSON LABELS "qwen35;fixtures" TIMEOUT 120)
add_dependencies(test_qwen35_fixtures model-qwen35 backend-cpu)

vt_add_test(test_qwen35_load SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_qwen35_load.c
            LIBS vtcore LABELS "qwen35;fixtures" TIMEOUT 60)
add_dependencies(test_qwen35_load model-qwen35 backend-cpu)

# Hostile hyperparameters: every key the loader reads set to 0, 1, 2^31,
# 2^32-1, a wrong type or removed, through required_caps, the engine and one
# forward; refusals must name the key, peak RSS < 1 GiB.
vt_add_test(test_qwen35_hostile SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_qwen35_hostile.c
            LIBS vtcore LABELS "qwen35;fixtures" TIMEOUT 60)
add_dependencies(test_qwen35_hostile model-qwen35 backend-cpu)

# The trained model in the low-bit mixes (qwen35moe-trained-lowbit): llama.cpp's
# logits by the fixture's criterion on the CPU, resident and streamed through
# the minimum arena (streamed equal to resident bit for bit).
vt_add_test(test_lowbit_models SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_lowbit_models.c
            LIBS vtcore PkgConfig::CJSON ${CMAKE_DL_LIBS} LABELS "qwen35;fixtures;quant" TIMEOUT 600)
add_dependencies(test_lowbit_models model-qwen35 backend-cpu)
