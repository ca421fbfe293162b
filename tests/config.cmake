# The residency configuration (core/src/config/config.c, config_yaml.c): conf/residency.yaml, --set
# overrides, byte sizes. It parses hostile YAML, so it carries "parser" for the
# sanitizer job.
vt_add_test(test_config SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_config.c
            ${CMAKE_CURRENT_SOURCE_DIR}/test_config_print.c
            LIBS vtcore
            LABELS config parser TIMEOUT 60)
