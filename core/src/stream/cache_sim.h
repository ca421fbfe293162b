/*
 * cache_sim.h - offline replacement-policy simulation over a routing trace:
 * the hit rate of Belady's optimum (evict the key whose next use is farthest
 * in the future; L. A. Belady, "A study of replacement algorithms for a
 * virtual-storage computer", IBM Systems Journal 5(2), 1966) and of LRU, on
 * the sequence of keys the expert streamer was asked for, with the
 * streamer's batch rule: the keys of one acquire are resident together (none
 * of them is a victim while the batch fills), and a key repeated within one
 * batch is one use.
 *
 * A trace is n requests; request i asks for key[i] (0 .. n_keys-1, a
 * (layer, matrix, expert) index) in batch batch[i] (non-decreasing; one
 * acquire call), and counts toward the reported figures when counted[i]
 * (e.g. decode-phase requests only; every request still moves the cache).
 * capacity: slots of the simulated cache, at least the largest batch.
 */
#ifndef VT_CACHE_SIM_H
#define VT_CACHE_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "vt/status.h"

typedef struct vt_cache_sim_result {
    uint64_t uses;  /* counted uses (distinct keys per batch) */
    uint64_t hits;  /* of them, found resident */
} vt_cache_sim_result;

/* Belady's optimum and LRU. VT_ERR_INVALID_ARG for a key >= n_keys, batches
 * out of order or a batch larger than capacity; VT_ERR_OUT_OF_MEMORY. */
vt_status vt_cache_sim_belady(const uint32_t *key, const uint64_t *batch, const uint8_t *counted,
                              size_t n, uint32_t n_keys, uint64_t capacity,
                              vt_cache_sim_result *out);
vt_status vt_cache_sim_lru(const uint32_t *key, const uint64_t *batch, const uint8_t *counted,
                           size_t n, uint32_t n_keys, uint64_t capacity, vt_cache_sim_result *out);

#endif
