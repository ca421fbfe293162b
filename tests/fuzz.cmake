# libFuzzer targets for the GGUF reader and the tokenizer (tests/fuzz/):
# fuzz_gguf (whole files), fuzz_tokenize (text through the fixture's
# tokenizer), fuzz_vocab (hostile vocabularies and merges), fuzz_serve_request
# (vt serve's JSON request bodies), fuzz_nfc (the tokenizer's NFC, with a
# time budget per input: a slow input is a finding).
# The libFuzzer binaries are built only with -DVT_FUZZ=ON, with clang:
#   cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DVT_FUZZ=ON
#   cmake --build build-fuzz --target fuzz_gguf fuzz_tokenize fuzz_vocab fuzz_nfc fuzz_seeds
# CI never sets VT_FUZZ; bench/fuzz.sh builds and runs the targets for a
# given time. The parser and tokenizer sources are compiled a second time,
# into a static library instrumented for coverage and ASan+UBSan; the shared
# vtcore and every other target stay as they are.
#
# Every build (CI included) also builds the seed writer fuzz_seeds and, for
# each target, fuzz_replay_<target>: the same harness linked with
# fuzz/fuzz_replay.c instead of libFuzzer. The test fuzz_seed_replay writes
# the seed corpora and replays each through its harness, so the harnesses
# compile with any compiler and their seeds run under the ASan/UBSan pass.
set(VT_FUZZ_MODEL_DEFAULT ${VT_FIXTURES_DIR}/qwen35moe-tiny/gguf/qwen35moe-tiny-bf16.gguf)
add_executable(fuzz_seeds ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_seeds.c)
target_include_directories(fuzz_seeds PRIVATE ${VT_CORE_INTERNAL_INCLUDE_DIRS})
target_link_libraries(fuzz_seeds PRIVATE vtcore PkgConfig::CJSON)
foreach(target fuzz_gguf fuzz_tokenize fuzz_vocab fuzz_nfc fuzz_jinja)
  add_executable(fuzz_replay_${target} ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/${target}.c
                 ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_replay.c)
  target_include_directories(fuzz_replay_${target} PRIVATE ${VT_CORE_INTERNAL_INCLUDE_DIRS})
  target_compile_definitions(fuzz_replay_${target} PRIVATE
                             VT_FUZZ_DEFAULT_MODEL="${VT_FUZZ_MODEL_DEFAULT}")
  target_link_libraries(fuzz_replay_${target} PRIVATE vtcore PkgConfig::UTF8PROC m)
endforeach()
# vt serve's request parser: its seeds are files (tests/fuzz/serve_request_seeds/)
add_executable(fuzz_replay_fuzz_serve_request ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_serve_request.c
               ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_replay.c)
target_link_libraries(fuzz_replay_fuzz_serve_request PRIVATE vtserve)
add_test(NAME fuzz_seed_replay
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/replay_seeds.sh
                 $<TARGET_FILE_DIR:fuzz_seeds> ${VT_FIXTURES_DIR})
set_tests_properties(fuzz_seed_replay PROPERTIES LABELS "fuzz" TIMEOUT 300 SKIP_RETURN_CODE 77)

option(VT_FUZZ "Build the libFuzzer targets (clang only; not for CI)" OFF)
if(NOT VT_FUZZ)
  return()
endif()
if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "VT_FUZZ=ON needs clang (libFuzzer): -DCMAKE_C_COMPILER=clang")
endif()

set(VT_FUZZ_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=undefined
    -fno-omit-frame-pointer -g)
set(VT_FUZZ_SOURCES base/error.c gguf/gguf_reader.c gguf/gguf_access.c gguf/gguf_value.c
    gguf/gguf_name_index.c gguf/gguf_guard.c gguf/gguf_writer.c gguf/gguf_info.c
    text/tokenizer.c text/tokenizer_load.c text/tokenizer_unicode.c text/chat_template.c
    text/jinja_value.c text/jinja_scan.c text/jinja_parse.c text/jinja_eval.c text/jinja_builtins.c
    text/jinja_filters.c)
list(TRANSFORM VT_FUZZ_SOURCES PREPEND ${CMAKE_SOURCE_DIR}/core/src/)

add_library(vtcore_fuzz STATIC ${VT_FUZZ_SOURCES})
target_include_directories(vtcore_fuzz PUBLIC ${CMAKE_SOURCE_DIR}/core/include
                                              ${VT_CORE_INTERNAL_INCLUDE_DIRS})
target_compile_options(vtcore_fuzz PRIVATE ${VT_FUZZ_FLAGS} -fsanitize=fuzzer-no-link)
target_link_libraries(vtcore_fuzz PUBLIC PkgConfig::UTF8PROC PkgConfig::YAML Threads::Threads m)

add_library(vtserve_fuzz STATIC ${CMAKE_SOURCE_DIR}/core/serve/serve_request.c)
target_include_directories(vtserve_fuzz PUBLIC ${CMAKE_SOURCE_DIR}/core/serve)
target_compile_options(vtserve_fuzz PRIVATE ${VT_FUZZ_FLAGS} -fsanitize=fuzzer-no-link)
target_link_libraries(vtserve_fuzz PUBLIC PkgConfig::CJSON m)
add_executable(fuzz_serve_request ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_serve_request.c)
target_compile_options(fuzz_serve_request PRIVATE ${VT_FUZZ_FLAGS} -fsanitize=fuzzer)
target_link_options(fuzz_serve_request PRIVATE -fsanitize=fuzzer,address,undefined)
target_link_libraries(fuzz_serve_request PRIVATE vtserve_fuzz)

foreach(target fuzz_gguf fuzz_tokenize fuzz_vocab fuzz_nfc fuzz_jinja)
  add_executable(${target} ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/${target}.c)
  target_compile_options(${target} PRIVATE ${VT_FUZZ_FLAGS} -fsanitize=fuzzer)
  target_compile_definitions(${target} PRIVATE VT_FUZZ_DEFAULT_MODEL="${VT_FUZZ_MODEL_DEFAULT}")
  target_link_options(${target} PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(${target} PRIVATE vtcore_fuzz)
endforeach()
