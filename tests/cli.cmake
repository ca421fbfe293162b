vt_add_test(test_cli SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_cli.c LIBS PkgConfig::CJSON LABELS "cli;fixtures" TIMEOUT 300)
add_dependencies(test_cli vt backend-cpu model-qwen35)
