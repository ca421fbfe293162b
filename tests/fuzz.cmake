# libFuzzer targets for the GGUF reader and the tokenizer (tests/fuzz/):
# fuzz_gguf (whole files), fuzz_tokenize (text through the fixture's
# tokenizer), fuzz_vocab (hostile vocabularies and merges).
# Nothing here is built unless -DVT_FUZZ=ON is given, with clang:
#   cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DVT_FUZZ=ON
#   cmake --build build-fuzz --target fuzz_gguf fuzz_tokenize fuzz_vocab fuzz_seeds
# CI never sets VT_FUZZ; bench/fuzz.sh builds and runs the targets for a
# given time. The parser and tokenizer sources are compiled a second time,
# into a static library instrumented for coverage and ASan+UBSan; the shared
# vtcore and every other target stay as they are.
option(VT_FUZZ "Build the libFuzzer targets (clang only; not for CI)" OFF)
if(NOT VT_FUZZ)
  return()
endif()
if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "VT_FUZZ=ON needs clang (libFuzzer): -DCMAKE_C_COMPILER=clang")
endif()

set(VT_FUZZ_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=undefined
    -fno-omit-frame-pointer -g)
set(VT_FUZZ_SOURCES error.c config.c gguf_reader.c gguf_writer.c gguf_info.c tokenizer.c
    tokenizer_unicode.c chat_template.c) # config.c: error.c formats byte counts with it
list(TRANSFORM VT_FUZZ_SOURCES PREPEND ${CMAKE_SOURCE_DIR}/core/src/)

add_library(vtcore_fuzz STATIC ${VT_FUZZ_SOURCES})
target_include_directories(vtcore_fuzz PUBLIC ${CMAKE_SOURCE_DIR}/core/include
                                              ${CMAKE_SOURCE_DIR}/core/src)
target_compile_options(vtcore_fuzz PRIVATE ${VT_FUZZ_FLAGS} -fsanitize=fuzzer-no-link)
target_link_libraries(vtcore_fuzz PUBLIC PkgConfig::UTF8PROC PkgConfig::YAML Threads::Threads m)

set(VT_FUZZ_MODEL_DEFAULT ${VT_FIXTURES_DIR}/qwen35moe-tiny/gguf/qwen35moe-tiny-bf16.gguf)
foreach(target fuzz_gguf fuzz_tokenize fuzz_vocab)
  add_executable(${target} ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/${target}.c)
  target_compile_options(${target} PRIVATE ${VT_FUZZ_FLAGS} -fsanitize=fuzzer)
  target_compile_definitions(${target} PRIVATE VT_FUZZ_DEFAULT_MODEL="${VT_FUZZ_MODEL_DEFAULT}")
  target_link_options(${target} PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(${target} PRIVATE vtcore_fuzz)
endforeach()

# the seed corpus writer (bench/fuzz.sh runs it)
add_executable(fuzz_seeds ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_seeds.c)
target_include_directories(fuzz_seeds PRIVATE ${CMAKE_SOURCE_DIR}/core/src)
target_link_libraries(fuzz_seeds PRIVATE vtcore)
