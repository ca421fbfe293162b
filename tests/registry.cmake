# Registry tests: fake backend plugins built with different defects, each
# into its own directory under the build tree (not the real plugin folder).
set(VT_FAKE_VARIANTS good abi2 small undeclared present_null absent_set minor0 noprobe allops ext_null
    discrete ctor7)
set(VT_FAKE_DEFS_good "")
set(VT_FAKE_DEFS_abi2 "FAKE_ABI_MAJOR=2")
set(VT_FAKE_DEFS_small "FAKE_SMALL_TABLE=1")
set(VT_FAKE_DEFS_undeclared "FAKE_UNDECLARED=1")
set(VT_FAKE_DEFS_present_null "FAKE_PRESENT_NULL=1")
set(VT_FAKE_DEFS_absent_set "FAKE_ABSENT_SET=1")
set(VT_FAKE_DEFS_minor0 "FAKE_ABI_MINOR=0")
set(VT_FAKE_DEFS_noprobe "FAKE_NO_PROBE=1;FAKE_ALL_OPS=1")
set(VT_FAKE_DEFS_allops "FAKE_ALL_OPS=1")
set(VT_FAKE_DEFS_ext_null "FAKE_ALL_OPS=1;FAKE_EXT_NULL=1")
set(VT_FAKE_DEFS_discrete "FAKE_ALL_OPS=1;FAKE_DISCRETE=1")
set(VT_FAKE_DEFS_ctor7 "FAKE_CTOR=1;FAKE_ABI_MAJOR=7")
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

# store plugins: devfake (needs memory_probe) next to the noprobe/allops backends,
# and one missing a required function
add_library(fake-store-devfake MODULE ${CMAKE_CURRENT_SOURCE_DIR}/plugins/fake_store.c)
add_library(fake-store-nocommit MODULE ${CMAKE_CURRENT_SOURCE_DIR}/plugins/fake_store.c)
target_compile_definitions(fake-store-nocommit PRIVATE FAKE_STORE_NO_COMMIT=1)
foreach(t fake-store-devfake fake-store-nocommit)
  set_target_properties(${t} PROPERTIES PREFIX "" OUTPUT_NAME store-devfake)
  target_include_directories(${t} PRIVATE ${CMAKE_SOURCE_DIR}/core/include)
  list(APPEND VT_FAKE_TARGETS ${t})
endforeach()
set_target_properties(fake-store-devfake PROPERTIES
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests/fake-plugins/store)
set_target_properties(fake-store-nocommit PROPERTIES
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests/fake-plugins/store_nocommit)

vt_add_test(test_registry SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_registry.c LIBS vtcore LABELS "registry")
add_dependencies(test_registry ${VT_FAKE_TARGETS})
target_compile_definitions(test_registry PRIVATE VT_FAKE_PLUGIN_ROOT="${CMAKE_BINARY_DIR}/tests/fake-plugins")

vt_add_test(test_sampler SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_sampler.c LIBS vtcore LABELS "sampler")

# test_cli runs `vt --plugin-dir <fake-plugins/good> --device fake` to see the
# capability refusal by name.
if(TARGET test_cli)
  add_dependencies(test_cli ${VT_FAKE_TARGETS})
endif()

# resolution + fit check: fake backends/stores with the real qwen35 plugin
vt_add_test(test_residency SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_residency.c LIBS vtcore LABELS "registry")
add_dependencies(test_residency ${VT_FAKE_TARGETS} store-device)
if(TARGET model-gemma4)
  add_dependencies(test_residency model-gemma4)
endif()
target_compile_definitions(test_residency PRIVATE VT_FAKE_PLUGIN_ROOT="${CMAKE_BINARY_DIR}/tests/fake-plugins")

# Load progress: the bar's text, and the engine's upload report on the fake
# discrete backend (weights copied) against backend-cpu (read in place).
vt_add_test(test_load_progress SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_load_progress.c
            LIBS vtcore LABELS "cli;fixtures" TIMEOUT 60)
add_dependencies(test_load_progress ${VT_FAKE_TARGETS} model-qwen35 backend-cpu)
target_compile_definitions(test_load_progress PRIVATE VT_FAKE_PLUGIN_ROOT="${CMAKE_BINARY_DIR}/tests/fake-plugins")
