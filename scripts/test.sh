#!/usr/bin/env bash
# The whole test suite: a -Werror build with every cmocka suite and fixture
# comparison, then an ASan+UBSan (clang) build running all of them again
# (the GGUF parser's hostile-input and the tokenizer suites included). Fixtures are read from ../shared/fixtures (or
# $VT_FIXTURES_DIR); without them the fixture tests skip loudly, and under
# CI=true they fail.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)

cmake -S . -B build -DVT_BUILD_TESTS=ON -DVT_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"

cmake -S . -B build-asan -DVT_BUILD_TESTS=ON -DVT_WERROR=ON -DVT_SANITIZE=ON -DCMAKE_C_COMPILER=clang \
  -DCMAKE_BUILD_TYPE=Debug # -O0: clang -O2 with sanitizers takes minutes on the SIMD kernels
cmake --build build-asan -j"$jobs"
# intercept_tls_get_addr=0: clang 14's LeakSanitizer sizes a module's dynamic
# TLS block from a guess at glibc's allocation and, for the HIP runtime that
# backend-rocm brings in, can read a garbage range and crash at exit ("Tracer
# caught signal 11", depending only on memory layout); leaks are still checked
ASAN_OPTIONS=detect_leaks=1:intercept_tls_get_addr=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j1 # the CPU backend's threads spin: no oversubscription
