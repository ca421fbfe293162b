/*
 * streamer_rig.h - the rig the expert streamer tests share (streamer_rig.c):
 * a generated GGUF whose every expert slice holds a known pattern, and a
 * streamer over the host store, wrapped so that tests can fail its commits,
 * publishes, quiesces and ahead joins, defer its copies, count its reads and
 * inject faults at the fill points.
 *
 * The rig_* variables configure the NEXT rig_open_*. rig_open_with resets
 * n_quiesce, n_publish, n_begin, n_join, publish_failures and join_failures;
 * commit_failures, quiesce_failures, fault_point and n_reads are the tests'
 * to set and reset.
 */
#ifndef VT_TEST_STREAMER_RIG_H
#define VT_TEST_STREAMER_RIG_H

#include "test_util.h"

#include <sys/types.h>

#include "expert_streamer.h"

#define N_LAYER 3
#define N_MAT 3
#define N_EXP 8
#define N_IN 40  /* F32 row of 40: slice = 40 * 5 * 4 = 800 bytes, not page aligned */
#define N_OUT 5
#define SLICE (N_IN * N_OUT * 4)
/* rig_prefetch_max's default: beyond any prediction (the tests written
 * before the cap count every copy) */
#define RIG_NO_CAP 1000
/* a whole expert's slot: its three slices, each at a multiple of 256 bytes */
#define UNIT (3 * ((SLICE + VT_STREAMER_UNIT_ALIGN - 1) / VT_STREAMER_UNIT_ALIGN * VT_STREAMER_UNIT_ALIGN))

typedef struct rig {
    vt_gguf *g;
    vt_store *store;
    vt_store_api api; /* a copy of the host store's, so commit can be wrapped */
    vt_expert_streamer *s;
} rig;

extern const char *mat_name[N_MAT]; /* gate, up, down */
extern char model_path[256];        /* the pattern file (group_setup) */

/* the next rig's vt_streamer_params */
extern vt_cache_policy rig_policy;
extern int rig_prefetch;
extern uint32_t rig_prefetch_top, rig_prefetch_max;
extern uint64_t rig_host_slot_bytes; /* host-tier slot bytes (SLICE + 64) */
extern uint32_t rig_readers;         /* reader threads (0: none) */
extern uint64_t rig_ring;            /* staging ring slots (0: none) */
extern int rig_unit;                 /* slots hold whole experts (slot_unit_expert) */

/* failure budgets: > 0, that many calls fail */
extern int commit_failures, publish_failures, quiesce_failures, join_failures;
/* counts of the wrapped store's calls (since the last rig_open_with) */
extern int n_quiesce, n_publish, n_begin, n_join;
extern size_t n_reads; /* reads that reached counting_read (atomic) */
/* the fill point (vt_streamer_fault_point) that fails once for fault_expert; 0 none */
extern int fault_point;
extern uint32_t fault_expert;

/* Element i of (layer l, matrix m, expert e)'s slice. */
float pattern(uint32_t l, uint32_t m, uint32_t e, uint32_t i);
/* cmocka group setup / teardown: write / remove the pattern file. */
int group_setup(void **state);
int group_teardown(void **state);
/* A reader (vt_streamer_set_reader) that counts its calls in n_reads. */
ssize_t counting_read(void *ctx, int fd, void *buf, size_t n, off_t off);

/* The host store (commit wrapped), a streamer over it with n_host host-tier
 * slots (0: none) and the rig_* parameters, every stack registered. mode: 0
 * the host store's own publish (memcpy), 1 publish deferred to quiesce, 2 a
 * table of ABI 1.1's size (no publish/quiesce), 3 / 4 ahead publishes copied
 * at once / at join, 5 a table of ABI 1.4 (publish, no ahead publishes). */
void rig_open_with(rig *r, uint64_t n_slots, int direct, uint64_t n_host, int mode);
/* rig_open_with, plus the counting reader and the fault hook. */
void rig_open_host(rig *r, uint64_t n_slots, uint64_t n_host, int mode);
/* No host tier, mode 0. */
void rig_open(rig *r, uint64_t n_slots, int direct);
/* Prefetch on, a host tier holding every slice. */
void rig_open_prefetch(rig *r, uint64_t n_slots, int mode);
void rig_close(rig *r);
/* Each out[i * N_MAT + m] holds (l, m, ids[i])'s pattern; fails the test if not. */
void check_slices(uint32_t l, const int32_t *ids, uint32_t n, const void **out);
/* vt_streamer_acquire of ids, then check_slices. */
void acquire_ok(rig *r, uint32_t l, const int32_t *ids, uint32_t n);
/* Every expert of every layer read once into the host tier (the arena keeps
 * the last ones). */
void warm_host_tier(rig *r);

#endif
