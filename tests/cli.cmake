vt_add_test(test_cli SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_cli.c LIBS PkgConfig::CJSON LABELS "cli;fixtures" TIMEOUT 300)
add_dependencies(test_cli vt backend-cpu model-qwen35)
if(TARGET model-gemma4)
  add_dependencies(test_cli model-gemma4)
endif()
# the commands' progress bars on a terminal (script(1)) and on a file
vt_add_test(test_cli_progress SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_cli_progress.c
            LABELS "cli;fixtures" TIMEOUT 300)
add_dependencies(test_cli_progress vt backend-cpu model-qwen35)

# test_readme: every `vt <command>` the README shows has a working --help and
# lists each --flag written after it (tests/test_readme.sh)
add_test(NAME test_readme
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_readme.sh $<TARGET_FILE:vt>
                 ${CMAKE_SOURCE_DIR}/README.md)
set_tests_properties(test_readme PROPERTIES LABELS "cli" TIMEOUT 60)

# test_default_build: a build with no options holds what a user runs only
# (tests/test_default_build.sh); configures a temporary build directory
add_test(NAME test_default_build
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_default_build.sh ${CMAKE_SOURCE_DIR})
set_tests_properties(test_default_build PROPERTIES LABELS "cli" TIMEOUT 300)
# vt chat through a pty and a pipe (tests/cli_chat.sh): turns reuse the KV
# cache and answer as the whole conversation evaluated afresh would
add_test(NAME cli_chat
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli_chat.sh $<TARGET_FILE:vt> ${VT_FIXTURES_DIR}
                 ${VT_PLUGIN_OUTPUT_DIR})
set_tests_properties(cli_chat PROPERTIES LABELS "cli;fixtures" TIMEOUT 300 SKIP_RETURN_CODE 77)
