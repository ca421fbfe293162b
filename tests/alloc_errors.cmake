# Allocation failure messages (vt issue 3, item 6): the core's named-allocation
# helpers (error.h), backend-cpu's alloc() on impossible sizes and under a
# lowered RLIMIT_AS, and the qwen35 model's load()/seq_new() with a backend
# alloc() that fails at call N, for every N: the message names the allocation
# and its byte count, and nothing leaks. Needs the random-weight test model of the build tree.
vt_add_test(test_alloc_errors SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_alloc_errors.c
            LIBS vtcore LABELS "alloc;qwen35;cpu" TIMEOUT 60)
add_dependencies(test_alloc_errors model-qwen35 backend-cpu random-model)
