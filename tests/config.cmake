vt_add_test(test_config SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_config.c LIBS vtcore LABELS "config")
