/*
 * test_expert_streamer.h - what the two files of the test_expert_streamer
 * program share: the helpers of test_expert_streamer.c (setup, main) that
 * test_expert_streamer_batched.c uses, and the cases it defines.
 */
#ifndef VT_TEST_EXPERT_STREAMER_H
#define VT_TEST_EXPERT_STREAMER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "streamer_rig.h"

typedef struct fault {
    int mode;  /* 0 pass, 1 EIO, 2 short reads, 3 EINTR once, 4 EOF, 5 EIO on call `calls` */
    int calls; /* faulty calls left (mode 1, 3, 4) */
} fault;
void acquire_host_ok(rig *r, uint32_t l, const int32_t *ids, uint32_t n);

/* test_expert_streamer_batched.c */
void test_reader_pool(void **state);
void test_batched_equals_serial(void **state);
void test_batched_faults(void **state);
void test_batched_direct_io(void **state);

#endif
