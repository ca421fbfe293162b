# The expert streamer and the host slot store (core/src/stream/expert_streamer*.c,
# host_store.c): pattern files, LRU, fault injection at read and commit.
vt_add_test(test_expert_streamer SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_expert_streamer.c
            ${CMAKE_CURRENT_SOURCE_DIR}/test_expert_streamer_batched.c
            ${CMAKE_CURRENT_SOURCE_DIR}/streamer_rig.c LIBS vtcore LABELS streamer TIMEOUT 60)

# The router-ahead prefetch over the same rig: ahead publishes copied at once
# and at join, prefetch_top / prefetch_max, failed publishes and joins, refusals.
vt_add_test(test_streamer_prefetch SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_streamer_prefetch.c
            ${CMAKE_CURRENT_SOURCE_DIR}/streamer_rig.c LIBS vtcore LABELS streamer TIMEOUT 60)

# Slot classes (vt/store.h 1.7): the layout, the host store over it, the
# streamer's slices in their classes on a file of two slice sizes.
vt_add_test(test_slot_classes SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_slot_classes.c
            LIBS vtcore LABELS streamer TIMEOUT 60)

# Streamed vs resident on the qwen35moe-tiny fixtures: bit-identical through the
# minimum arena, counters prove the streamer ran.
# It takes ~205 s of the 2-core CI machine beside the other tests: the limit
# leaves room for a loaded machine (it timed out at 300 s on one).
vt_add_test(test_streaming SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_streaming.c
            LIBS vtcore PkgConfig::CJSON ${CMAKE_DL_LIBS} LABELS "streamer;fixtures" TIMEOUT 900)
add_dependencies(test_streaming model-qwen35 backend-cpu)
if(VT_SANITIZE)
  target_compile_definitions(test_streaming PRIVATE VT_TEST_SANITIZED=1)
endif()

# Peak RSS of a streamed run on a generated 768 MiB-of-experts model stays
# within dense + arena + caches + 10% (+ the process's own 48 MiB).
vt_add_test(test_streaming_memory SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_streaming_memory.c
            LIBS vtcore LABELS "streamer" TIMEOUT 300)
add_dependencies(test_streaming_memory model-qwen35 backend-cpu vt)
if(VT_SANITIZE)
  target_compile_definitions(test_streaming_memory PRIVATE VT_TEST_SANITIZED=1)
endif()

# The device slot store against its contract (lazy-device CPU wrapper in CI,
# backend-cuda where a GPU is present).
vt_add_test(test_store_device SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_store_device.c
            LIBS vtcore ${CMAKE_DL_LIBS} LABELS "streamer" TIMEOUT 120)
add_dependencies(test_store_device store-device backend-cpu)
add_dependencies(test_streaming store-device)
if(TARGET backend-cuda)
  add_dependencies(test_streaming backend-cuda)
  add_dependencies(test_store_device backend-cuda)
endif()

# bench/bench_h2d: copy_h2d bandwidth of a backend plugin, pinned vs pageable
# (the ceiling of the device store's commits); built, not run as a test.
add_executable(bench_h2d ${CMAKE_SOURCE_DIR}/bench/bench_h2d.c)
target_include_directories(bench_h2d PRIVATE ${CMAKE_SOURCE_DIR}/core/include)
target_link_libraries(bench_h2d PRIVATE ${CMAKE_DL_LIBS})

# Belady's optimum and LRU replayed over routing traces (core/src/stream/cache_sim.c).
vt_add_test(test_cache_sim SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_cache_sim.c
            LIBS vtcore LABELS streamer TIMEOUT 60)

# bench/cache_sim: replacement policies replayed over a `vt bench --trace`
# routing trace through the real streamer, next to Belady; built, not a test.
add_executable(cache_sim ${CMAKE_SOURCE_DIR}/bench/cache_sim.c)
target_include_directories(cache_sim PRIVATE ${VT_CORE_INTERNAL_INCLUDE_DIRS})
target_link_libraries(cache_sim PRIVATE vtcore)
