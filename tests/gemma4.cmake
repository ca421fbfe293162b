# Gemma 4 model plugin (plugins/model-gemma4) on the gemma4-moe-tiny fixture,
# through the plugin ABI directly (dlopen-ed backend-cpu and model-gemma4):
# all-position logits vs transformers, greedy ids, chunked prefill past the
# sliding window, streamed experts bit-identical to resident.
vt_add_test(test_gemma4_fixtures SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_gemma4_fixtures.c
            LIBS vtcore PkgConfig::CJSON ${CMAKE_DL_LIBS} LABELS "gemma4;fixtures" TIMEOUT 300)
add_dependencies(test_gemma4_fixtures model-gemma4 backend-cpu)
add_dependencies(test_gemma4_fixtures store-device)
if(TARGET backend-cuda)
  add_dependencies(test_gemma4_fixtures backend-cuda)
endif()

# vt_mkmodel_gemma4 (core/tools/mkmodel.c): generated gemma4 MoE and dense models
# round-trip through the reader, load in the tokenizer and in model-gemma4 via
# the plugin ABI, finite logits; streamed experts bit-identical to resident.
vt_add_test(test_mkmodel_gemma4 SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_mkmodel_gemma4.c
            LIBS vtcore ${CMAKE_DL_LIBS} LABELS "gemma4;gguf" TIMEOUT 120)
add_dependencies(test_mkmodel_gemma4 model-gemma4 backend-cpu)
