# The installed SDK (issue 7): install this build into a temporary prefix,
# build examples/model-plugin out of tree against it with pkg-config and with
# find_package(vt), and run the installed vt with the example plugin
# (tests/test_sdk.sh says what is checked).
add_test(NAME sdk_install_example
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_sdk.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR}
                 ${CMAKE_C_COMPILER})
set_tests_properties(sdk_install_example PROPERTIES LABELS "sdk" TIMEOUT 300)
