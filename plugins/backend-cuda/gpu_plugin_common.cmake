# gpu_plugin_common.cmake - what backend-cuda and backend-rocm share at
# configure time: the AUTO|ON|OFF option, the STATUS line and the facts the
# tests read (tests/gpu_backends.cmake), and the compile/link flags of a GPU
# plugin directory.

# vt_gpu_option(<VAR> <plugin-name>): the cache option VAR = AUTO|ON|OFF.
macro(vt_gpu_option var plugin)
  set(${var} AUTO CACHE STRING
      "Build ${plugin}: AUTO (when its toolchain is found), ON (a missing toolchain is an error), OFF")
  set_property(CACHE ${var} PROPERTY STRINGS AUTO ON OFF)
  string(TOUPPER "${${var}}" _vt_gpu_mode)
  set(_vt_gpu_var ${var})
  if(NOT _vt_gpu_mode MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "${var}=${${var}}: use AUTO, ON or OFF")
  endif()
endmacro()

# vt_gpu_no_device(<out> <what> <device-path>...): with the option AUTO and
# VT_BUILD_TESTS off, when none of the device paths exists, <out> is why the
# plugin is not built (a user's build compiles what can run here; minutes of
# nvcc/hipcc otherwise); else empty. ON, or VT_BUILD_TESTS=ON (the tests and
# CI), builds it wherever its toolchain is.
function(vt_gpu_no_device out what)
  set(${out} "" PARENT_SCOPE)
  if(NOT _vt_gpu_mode STREQUAL "AUTO" OR VT_BUILD_TESTS)
    return()
  endif()
  foreach(_vt_dev IN LISTS ARGN)
    if(EXISTS "${_vt_dev}")
      return()
    endif()
  endforeach()
  string(REPLACE ";" ", " _vt_devs "${ARGN}")
  set(${out} "no ${what} here (${_vt_devs} absent); -D${_vt_gpu_var}=ON or -DVT_BUILD_TESTS=ON builds it"
      PARENT_SCOPE)
endfunction()

# vt_gpu_result(<plugin-name> <mode> <built: TRUE|FALSE> <toolchain-present> <why>):
# print the STATUS line (or fail for ON without a toolchain) and record for the
# tests, as global properties VT_GPU_<name>_BUILT / _WHY / _REQUIRED:
# REQUIRED is set when CI=true and the toolchain exists, so that under CI a
# plugin that should have been built and was not fails its test instead of
# skipping.
function(vt_gpu_result plugin mode built toolchain why)
  if(built)
    message(STATUS "backend-${plugin}: built (${why})")
  elseif(mode STREQUAL "ON")
    message(FATAL_ERROR "backend-${plugin}: requested with ON but cannot be built: ${why}")
  else()
    message(STATUS "backend-${plugin}: skipped: ${why}")
  endif()
  set(required FALSE)
  if("$ENV{CI}" STREQUAL "true" AND toolchain AND NOT mode STREQUAL "OFF")
    set(required TRUE)
  endif()
  set_property(GLOBAL PROPERTY VT_GPU_${plugin}_BUILT ${built})
  set_property(GLOBAL PROPERTY VT_GPU_${plugin}_WHY "${why}")
  set_property(GLOBAL PROPERTY VT_GPU_${plugin}_REQUIRED ${required})
endfunction()

# vt_gpu_directory_flags(): in the calling directory, keep the project's
# compile options (-Wall -Wextra, -Werror) for C sources only - nvcc and hipcc
# get their own - and drop the sanitizer flags for every language: the vendor
# runtimes are not instrumented, and a GPU plugin linked by g++ with
# -fsanitize would bring a second ASan runtime into a clang-ASan process. An
# uninstrumented plugin loads into a sanitized vt or test as any system
# library does.
macro(vt_gpu_directory_flags)
  get_directory_property(_vt_opts COMPILE_OPTIONS)
  set(_vt_new "")
  foreach(_vt_o IN LISTS _vt_opts)
    if(NOT _vt_o MATCHES "^-f(no-)?sanitize")
      list(APPEND _vt_new "$<$<COMPILE_LANGUAGE:C>:${_vt_o}>")
    endif()
  endforeach()
  set_directory_properties(PROPERTIES COMPILE_OPTIONS "${_vt_new}")
  get_directory_property(_vt_lopts LINK_OPTIONS)
  list(FILTER _vt_lopts EXCLUDE REGEX "^-f(no-)?sanitize")
  set_directory_properties(PROPERTIES LINK_OPTIONS "${_vt_lopts}")
endmacro()

# vt_gpu_plugin_link(<target>): every undefined symbol resolved at link time
# (the plugin is self-contained), and the object never unloaded by dlclose():
# the vendor runtimes register exit handlers and keep threads that must not
# outlive their code.
function(vt_gpu_plugin_link target)
  target_link_options(${target} PRIVATE "LINKER:--no-undefined" "LINKER:-z,nodelete")
endfunction()
