# Debian packages (cmake/packaging.cmake): build them with cpack, install vt and
# vt-model-qwen35 into a scratch root with dpkg-deb -x, run a model from there,
# add vt-backend-cuda with no rebuild, swap in plugins of other ABI versions,
# and lintian every package (errors fail). See tests/test_packages.sh.
set(VT_PKG_EXPECTED vt vt-dev)
foreach(_vt_plugin model-qwen35 model-gemma4 store-device backend-cuda backend-rocm)
  if(TARGET ${_vt_plugin}) # a GPU backend without its toolchain has no package
    list(APPEND VT_PKG_EXPECTED vt-${_vt_plugin})
  endif()
endforeach()
add_test(NAME test_packages
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/test_packages.sh ${CMAKE_BINARY_DIR} ${VT_FIXTURES_DIR}
          ${CMAKE_BINARY_DIR}/demo/vt-random-qwen35moe.gguf ${CMAKE_BINARY_DIR}/tests/fake-plugins
          ${VT_PKG_EXPECTED})
set_tests_properties(test_packages PROPERTIES LABELS "packaging" TIMEOUT 600)
