# Registry tests: fake backend plugins built with different defects, each
# into its own directory under the build tree (not the real plugin folder).
set(VT_FAKE_VARIANTS good abi2 small undeclared present_null absent_set)
set(VT_FAKE_DEFS_good "")
set(VT_FAKE_DEFS_abi2 "FAKE_ABI_MAJOR=2")
set(VT_FAKE_DEFS_small "FAKE_SMALL_TABLE=1")
set(VT_FAKE_DEFS_undeclared "FAKE_UNDECLARED=1")
set(VT_FAKE_DEFS_present_null "FAKE_PRESENT_NULL=1")
set(VT_FAKE_DEFS_absent_set "FAKE_ABSENT_SET=1")
set(VT_FAKE_TARGETS "")
foreach(v ${VT_FAKE_VARIANTS})
  add_library(fake-backend-${v} MODULE ${CMAKE_CURRENT_SOURCE_DIR}/plugins/fake_backend.c)
  set_target_properties(fake-backend-${v} PROPERTIES PREFIX "" OUTPUT_NAME backend-fake
    LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests/fake-plugins/${v})
  target_include_directories(fake-backend-${v} PRIVATE ${CMAKE_SOURCE_DIR}/core/include)
  if(VT_FAKE_DEFS_${v})
    target_compile_definitions(fake-backend-${v} PRIVATE ${VT_FAKE_DEFS_${v}})
  endif()
  list(APPEND VT_FAKE_TARGETS fake-backend-${v})
endforeach()

vt_add_test(test_registry SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_registry.c LIBS vtcore LABELS "registry")
add_dependencies(test_registry ${VT_FAKE_TARGETS})
target_compile_definitions(test_registry PRIVATE VT_FAKE_PLUGIN_ROOT="${CMAKE_BINARY_DIR}/tests/fake-plugins")

vt_add_test(test_sampler SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_sampler.c LIBS vtcore LABELS "sampler")

# test_cli runs `vt --plugin-dir <fake-plugins/good> --device fake` to see the
# capability refusal by name.
if(TARGET test_cli)
  add_dependencies(test_cli fake-backend-good)
endif()
