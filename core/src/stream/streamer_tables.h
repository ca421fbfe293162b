/*
 * streamer_tables.h - what the expert streamer's sources share (not
 * a public header): its types, the slot tables' helpers and the functions one
 * source calls in another. expert_streamer.c: lifecycle, registry, fills and
 * acquire; expert_streamer_slots.c: the tiers' LRU lists, the replacement
 * policies and slot claims; expert_streamer_prefetch.c: the router-ahead
 * prefetch; expert_streamer_stats.c: counters, the routing trace, the cache
 * simulation and the getters.
 */
#ifndef VT_STREAMER_TABLES_H
#define VT_STREAMER_TABLES_H

#include "expert_streamer.h"

#include <stdint.h>

#include "reader_pool.h"

#define ES_INTERNAL __attribute__((visibility("hidden")))

#define NO_SLOT UINT64_MAX
#define DIRECT_ALIGN 4096u
#define MAX_MATRICES 8
#define HOST_CHUNK_BYTES (256ull << 20) /* host tier allocated in chunks of about this */

typedef struct stack {
    const vt_gguf_tensor *t; /* NULL: not registered */
    uint64_t n_expert;
    uint64_t slice_bytes;
    uint64_t *slot_of;       /* [n_expert]: device-tier slot holding the slice, or NO_SLOT */
    uint64_t *hslot_of;      /* [n_expert]: host-tier slot, or NO_SLOT (NULL: no host tier) */
    uint32_t *freq;          /* [n_expert]: uses, halved now and then (policy "lfru") */
    uint32_t cls;            /* the device tier's slot class its slices take */
    /* whole-expert slots (slot_unit_expert), in the layer's matrix-0 stack,
     * whose keys and slice_bytes are then the unit's: where each registered
     * matrix's slice sits in the unit and its bytes */
    uint64_t sub_off[MAX_MATRICES], sub_bytes[MAX_MATRICES];
} stack;

typedef struct slot_info {
    uint32_t layer, matrix, expert;
    uint32_t cls;            /* its slot class (device tier; 0 in the host tier) */
    int used;
    uint64_t batch;          /* device tier: last batch that acquired it; host tier: the
                              * publish generation that last read it (see quiesce) */
    uint64_t prev, next;     /* LRU links (used slots); free list uses next */
    uint64_t lprev, lnext;   /* the layer's own LRU list (device tier, policy "layer") */
    uint64_t visit;          /* its layer's acquire count at its last use */
    uint64_t pub;            /* device tier: 1 + the publish generation that filled it (0: none) */
    int ahead;               /* device tier: filled by a prefetch and not acquired since */
    int held;                /* host tier: the source of a publish of the pending fills
                              * (never a victim until they are flushed) */
} slot_info;

/* One tier's slots: an LRU list of used slots and a free list per slot class
 * (class c: slots first[c] .. first[c+1]-1; the host tier has one class). */
typedef struct tier {
    slot_info *slots;        /* [n] */
    uint64_t n;
    uint64_t lru_head, lru_tail; /* head = most recently used */
    uint32_t n_cls;
    uint64_t first[VT_STORE_MAX_CLASSES + 1];
    uint64_t free_head[VT_STORE_MAX_CLASSES];
    uint64_t n_used;
    /* per-layer LRU lists (NULL: none): head = most recent, count of used slots */
    uint64_t *lhead, *ltail, *lcount;
} tier;

/* One file read of the batched fill path, run by a reader thread: inputs,
 * then what happened (the main thread words the error, error.h being per
 * thread). */
typedef struct read_job {
    int fd;
    uint8_t *dst;            /* the host slot or ring slot */
    uint64_t n, off, cap;    /* slice bytes, file offset, bytes dst may take */
    /* a whole-expert key: n_part > 1 reads, part p of n bytes at file offset
     * off of fd into dst + at (with O_DIRECT through the reader's bounce
     * buffer); bad: the part that failed */
    uint32_t n_part, bad;
    struct {
        int fd;
        uint64_t n, off, at;
    } part[MAX_MATRICES];
    uint32_t data_off;       /* out: where the slice starts in dst */
    int err;                 /* out: errno of a failed read, 0 */
    int eof;                 /* out: the file ended first */
    int direct;              /* out: it ran with O_DIRECT */
    uint64_t done;           /* out: bytes read */
} read_job;

/* A device-tier miss waiting in the batched fill path (fill_batch). */
enum { PEND_HOST_HIT, PEND_HOST_READ, PEND_RING };
typedef struct pend {
    uint32_t matrix, expert;
    int kind;
    uint64_t slot;           /* the device slot taken for it (off every list) */
    uint64_t h;              /* the host slot (hit or taken), or the ring slot's index in
                              * host_addr */
    read_job job;            /* PEND_HOST_READ, PEND_RING */
} pend;

typedef struct host_chunk {
    uint8_t *base;
    uint64_t bytes;
    int pinned;              /* host_alloc_pinned, budget reserved */
} host_chunk;

struct vt_expert_streamer {
    vt_streamer_params p;
    vt_store_layout cls;     /* the device tier's slot classes, as the store lays them out
                              * (vt/store.h; one of slot_bytes without classes) */
    stack *stacks;           /* [n_layer][MAX_MATRICES] */
    uint32_t *n_matrices;    /* [n_layer] */
    tier dev;                /* the store's slots */
    tier host;               /* the host tier's slots (n = 0: none) */
    uint8_t **host_addr;     /* [host.n]: each host slot's memory */
    uint32_t *hdoff;         /* [host.n]: where its slice starts in it (an O_DIRECT read
                              * in place puts it at the file offset's alignment) */
    host_chunk *chunks;
    uint32_t n_chunks;
    uint64_t host_pinned_bytes, host_pageable_bytes;
    int publish;             /* the store has publish/quiesce (ABI 1.4) */
    uint64_t pub_gen;        /* publishes issued since the last quiesce carry this */
    int pub_pending;         /* a publish of generation pub_gen may still read its source */
    uint64_t batch;
    uint64_t keep_batch;     /* during a prefetch: the last acquire's batch, whose slots the
                              * ops queued after its fork read (no victim); else 0 */
    uint64_t acquired_batch; /* the last acquire's batch */
    int forked;              /* an acquire's end forked the ahead queue (begin_ahead) */
    int ahead_ok;            /* prefetch: next-layer, with a host tier and the store's
                              * begin/publish/join_ahead (ABI 1.5) */
    int ahead_pending;       /* ahead publishes issued since the last join_ahead */
    vt_store_publish *ahead_pub; /* [ahead_cap]: one prefetch's publishes */
    uint32_t *ahead_key;     /* [ahead_cap][3]: their matrix, expert, host slot (a host
                              * tier of < 2^32 slots: create checks) */
    size_t ahead_cap;
    vt_streamer_prefetch_stats pstats;
    uint64_t *visits;        /* [n_layer]: acquires of each layer (policy "layer") */
    uint64_t freq_uses;      /* uses since the counts were last halved (policy "lfru") */
    uint64_t rng;            /* victim sampling (policy "lfru"), fixed seed */
    vt_expert_stats *stats;  /* [n_layer] */
    vt_streamer_host_stats *hstats; /* [n_layer] */
    vt_streamer_fault_fn fault_fn;
    void *fault_ctx;
    vt_streamer_trace trace;     /* the routing trace, when recording */
    size_t trace_cap_acq, trace_cap_ids;
    int tracing;
    uint8_t trace_phase;
    int *fds;                /* [n_shards] */
    int direct;
    uint8_t *bounce;         /* O_DIRECT staging, aligned: one buffer per reader, reader
                              * w's at bounce + w * bounce_stride (the acquiring thread's
                              * read_slice uses reader 0's: never during a pool run) */
    size_t bounce_bytes;     /* bytes a read of one buffer may take (the stride less a block) */
    size_t bounce_stride;
    vt_streamer_read_fn read_fn;
    void *read_ctx;
    /* the batched fill path (readers > 1, or the staging ring) */
    vt_reader_pool *pool;
    uint64_t n_ring;         /* staging ring slots: host_addr[host.n + r] (no host tier) */
    uint64_t *ring_gen;      /* [n_ring]: pub_gen of its last publish, UINT64_MAX none */
    uint64_t ring_next;
    pend *pend;
    size_t *pend_read;       /* [pend_cap]: the pending fills that read, by index */
    size_t pend_cap, n_pend, n_pend_ring;
};

static inline stack *stack_at(const vt_expert_streamer *s, uint32_t layer, uint32_t matrix)
{
    return &s->stacks[(uint64_t)layer * MAX_MATRICES + matrix];
}

/* The registered stack of (layer, matrix) holding expert, or NULL. */
static inline const stack *stack_of_key(const vt_expert_streamer *s, uint32_t layer, uint32_t matrix,
                                 uint32_t expert)
{
    if (layer >= s->p.n_layer || matrix >= s->n_matrices[layer]) return NULL;
    const stack *k = stack_at(s, layer, matrix);
    return expert < k->n_expert ? k : NULL;
}

/* The device tier's slots of class cls. */
static inline uint64_t class_slots(const vt_expert_streamer *s, uint32_t cls)
{
    return s->dev.first[cls + 1] - s->dev.first[cls];
}

/* The keys per expert of layer: its registered matrices, or the one unit
 * holding them all (slot_unit_expert). */
static inline uint32_t key_matrices(const vt_expert_streamer *s, uint32_t layer)
{
    const uint32_t M = s->n_matrices[layer];
    return s->p.slot_unit_expert && M ? 1 : M;
}

/* expert_streamer_slots.c */
/* Move slot i of t to the front of its LRU lists. */
ES_INTERNAL void es_lru_touch(tier *t, uint64_t i);
/* Drop device slot i's key (counted as an eviction; a prefetched one never
 * acquired as wasted); returns i, off every list, for the caller to reuse. */
ES_INTERNAL uint64_t es_evict(vt_expert_streamer *s, uint64_t i);
/* A device-tier slot of class cls for a new key of layer (free, else the
 * policy's victim, evicted), NO_SLOT when every slot of the class is pinned. */
ES_INTERNAL uint64_t es_take_slot(vt_expert_streamer *s, uint32_t layer, uint32_t cls);
/* A host-tier slot for a new key (free, else the LRU one, its pending
 * publishes quiesced first); an error leaves the tier unchanged. */
ES_INTERNAL vt_status es_take_host_slot(vt_expert_streamer *s, uint64_t *out);
/* Slot i back on its class's free list, unused. */
ES_INTERNAL void es_give_back(tier *t, uint64_t i);
/* Slot i now holds (layer, matrix, expert), used by batch, most recent. */
ES_INTERNAL void es_claim(tier *t, uint64_t i, uint32_t layer, uint32_t matrix, uint32_t expert,
                          uint64_t batch);
/* One more use of the key for policy "lfru" (no-op under other policies). */
ES_INTERNAL void es_count_use(vt_expert_streamer *s, uint32_t layer, uint32_t matrix,
                              uint32_t expert);
/* store->quiesce for every publish so far; on failure the keys published in
 * this generation are dropped from the device tier. */
ES_INTERNAL vt_status es_quiesce_publishes(vt_expert_streamer *s);
/* The test hook's verdict: nonzero to fail at point pt for this key. */
ES_INTERNAL int es_fault_at(vt_expert_streamer *s, vt_streamer_fault_point pt, uint32_t layer,
                            uint32_t matrix, uint32_t expert);

/* expert_streamer.c */
/* An acquire's or a prefetch's arguments checked; *n_matrices: keys per expert. */
ES_INTERNAL vt_status es_check_ids(const vt_expert_streamer *s, const char *what, uint32_t layer,
                                   const int32_t *ids, uint32_t n, uint32_t *n_matrices);

/* expert_streamer_stats.c */
/* Append one acquire to the routing trace (recording stops when memory runs out). */
ES_INTERNAL void es_trace_add(vt_expert_streamer *s, uint32_t layer, const int32_t *ids,
                              uint32_t n);

#endif
