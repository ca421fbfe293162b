/*
 * cache_sim.c - Belady's optimum and LRU over a routing trace (cache_sim.h).
 *
 * Both run the same loop: a cache of `capacity` keys and a binary max-heap
 * of (priority, key) entries with lazy deletion (an entry is live while its
 * key is resident with that priority). The victim is the live entry of
 * largest priority whose key is not in the current batch:
 *   Belady: priority = position of the key's next use (never again: +inf);
 *   LRU:    priority = UINT64_MAX - the time of its last use.
 * Each batch runs as the streamer's acquire does: first every resident key of
 * the batch is used (a hit, claimed by the batch), then the others are
 * filled in order, choosing victims outside the batch.
 */
#include "cache_sim.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"

#define NEVER UINT64_MAX

typedef struct entry {
    uint64_t prio;
    uint32_t key;
} entry;

typedef struct heap {
    entry *a;
    size_t n, cap;
} heap;

static int heap_push(heap *h, uint64_t prio, uint32_t key)
{
    if (h->n == h->cap) {
        size_t nc = h->cap ? 2 * h->cap : 1024;
        entry *na = realloc(h->a, nc * sizeof *na);
        if (!na) return -1;
        h->a = na;
        h->cap = nc;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h->a[p].prio >= prio) break;
        h->a[i] = h->a[p];
        i = p;
    }
    h->a[i] = (entry){prio, key};
    return 0;
}

static entry heap_pop(heap *h)
{
    entry top = h->a[0], last = h->a[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && h->a[c + 1].prio > h->a[c].prio) c++;
        if (h->a[c].prio <= last.prio) break;
        h->a[i] = h->a[c];
        i = c;
    }
    if (h->n) h->a[i] = last;
    return top;
}

static vt_status simulate(int belady, const uint32_t *key, const uint64_t *batch,
                          const uint8_t *counted, size_t n, uint32_t n_keys, uint64_t capacity,
                          vt_cache_sim_result *out)
{
    memset(out, 0, sizeof *out);
    if (n && (!key || !batch)) {
        vt_set_error("cache simulation: NULL trace");
        return VT_ERR_INVALID_ARG;
    }
    uint64_t *next = malloc((n ? n : 1) * sizeof *next);     /* next use of request i's key */
    uint64_t *seen = malloc((n_keys ? n_keys : 1) * sizeof *seen); /* scratch per key */
    uint64_t *prio = malloc((n_keys ? n_keys : 1) * sizeof *prio); /* live priority; 0: absent */
    uint64_t *in_batch = malloc((n_keys ? n_keys : 1) * sizeof *in_batch); /* batch + 1 */
    uint8_t *dup = calloc(n ? n : 1, 1);                      /* a repeat within its batch */
    heap h = {0};
    entry *held = NULL;
    vt_status st = VT_OK;
    if (!next || !seen || !prio || !in_batch || !dup) goto oom;
    for (size_t i = 0; i < n; i++) {
        if (key[i] >= n_keys) {
            vt_set_error("cache simulation: request %zu asks for key %u of %u", i, key[i], n_keys);
            st = VT_ERR_INVALID_ARG;
            goto done;
        }
        if (i && batch[i] < batch[i - 1]) {
            vt_set_error("cache simulation: request %zu is in batch %llu after batch %llu", i,
                         (unsigned long long)batch[i], (unsigned long long)batch[i - 1]);
            st = VT_ERR_INVALID_ARG;
            goto done;
        }
    }
    /* repeats within a batch; then next uses, scanning backwards */
    for (uint32_t k = 0; k < n_keys; k++) in_batch[k] = 0;
    for (size_t i = 0; i < n; i++) {
        if (in_batch[key[i]] == batch[i] + 1) dup[i] = 1;
        in_batch[key[i]] = batch[i] + 1;
    }
    for (uint32_t k = 0; k < n_keys; k++) seen[k] = NEVER;
    for (size_t i = n; i-- > 0;) {
        if (dup[i]) continue;
        next[i] = seen[key[i]];
        seen[key[i]] = i;
    }
    for (uint32_t k = 0; k < n_keys; k++) prio[k] = in_batch[k] = 0;
    /* the largest batch must fit */
    for (size_t i = 0, b0 = 0; i <= n; i++) {
        if (i == n || batch[i] != batch[b0]) {
            uint64_t distinct = 0;
            for (size_t j = b0; j < i; j++) distinct += !dup[j];
            if (distinct > capacity) {
                vt_set_error("cache simulation: batch %llu needs %llu keys, the cache holds %llu",
                             (unsigned long long)batch[b0], (unsigned long long)distinct,
                             (unsigned long long)capacity);
                st = VT_ERR_INVALID_ARG;
                goto done;
            }
            b0 = i;
        }
    }
    held = malloc((capacity < n ? capacity : n ? n : 1) * sizeof *held + sizeof *held);
    if (!held) goto oom;
    uint64_t size = 0, clock = 0;
    for (size_t b0 = 0, b1; b0 < n; b0 = b1) {
        for (b1 = b0; b1 < n && batch[b1] == batch[b0]; b1++) {}
        const uint64_t mark = batch[b0] + 1;
        /* pass 1, the hits: each resident key of the batch is claimed first */
        for (size_t i = b0; i < b1; i++) {
            if (dup[i]) continue;
            uint32_t k = key[i];
            if (!counted || counted[i]) out->uses++;
            if (!prio[k]) continue;
            if (!counted || counted[i]) out->hits++;
            prio[k] = belady ? (next[i] == NEVER ? NEVER - 1 : next[i]) + 1 : NEVER - ++clock;
            in_batch[k] = mark;
            if (heap_push(&h, prio[k], k)) goto oom;
        }
        /* pass 2, the misses, in order */
        for (size_t i = b0; i < b1; i++) {
            uint32_t k = key[i];
            if (dup[i] || in_batch[k] == mark) continue;
            if (size == capacity) {
                size_t n_held = 0;
                for (;;) {
                    entry e = heap_pop(&h); /* never empty: capacity live keys are in it */
                    if (prio[e.key] != e.prio) continue; /* stale */
                    if (in_batch[e.key] == mark) {
                        held[n_held++] = e;
                        continue;
                    }
                    prio[e.key] = 0;
                    size--;
                    break;
                }
                for (size_t j = 0; j < n_held; j++)
                    if (heap_push(&h, held[j].prio, held[j].key)) goto oom;
            }
            size++;
            prio[k] = belady ? (next[i] == NEVER ? NEVER - 1 : next[i]) + 1 : NEVER - ++clock;
            in_batch[k] = mark;
            if (heap_push(&h, prio[k], k)) goto oom;
        }
    }
    goto done;
oom:
    vt_set_error("out of memory: cache simulation of %zu requests", n);
    st = VT_ERR_OUT_OF_MEMORY;
done:
    free(next);
    free(seen);
    free(prio);
    free(in_batch);
    free(dup);
    free(h.a);
    free(held);
    return st;
}

vt_status vt_cache_sim_belady(const uint32_t *key, const uint64_t *batch, const uint8_t *counted,
                              size_t n, uint32_t n_keys, uint64_t capacity,
                              vt_cache_sim_result *out)
{
    return simulate(1, key, batch, counted, n, n_keys, capacity, out);
}

vt_status vt_cache_sim_lru(const uint32_t *key, const uint64_t *batch, const uint8_t *counted,
                           size_t n, uint32_t n_keys, uint64_t capacity, vt_cache_sim_result *out)
{
    return simulate(0, key, batch, counted, n, n_keys, capacity, out);
}
