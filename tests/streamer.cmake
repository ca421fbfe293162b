# The expert streamer and the host slot store (core/src/expert_streamer.c,
# host_store.c): pattern files, LRU, fault injection at read and commit.
vt_add_test(test_expert_streamer SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_expert_streamer.c
            LIBS vtcore LABELS streamer TIMEOUT 60)
