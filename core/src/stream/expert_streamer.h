/*
 * expert_streamer.h - the expert streamer: one arena of slots and one LRU for
 * the routed experts of every layer (DESIGN.md "Expert streaming").
 *
 * Key = (layer, matrix, expert). A slot holds one expert's slice of one
 * matrix: for a stack [n_in, n_out, n_expert] the slice of expert e is bytes
 * [e * S, (e + 1) * S) of the tensor's data, S = nbytes / n_expert (gguf.md
 * §3), i.e. one contiguous range of its shard file at file_offset + e * S.
 *
 * The fill contract, on every miss (vt/store.h):
 *   dst = store->slot_for_write(slot); pread() the slice into dst (short reads
 *   and EINTR handled); store->commit_slot(slot, bytes).
 * If the read or the commit fails, the slot goes back to the free list and the
 * key stays absent before the error returns: the cache never reports a hit
 * over bytes that were not published, and a retry is a real miss.
 *
 * The host tier (n_host_slots > 0; expert_cache.host_arena): a second cache of
 * slices in host memory, with its own key table and LRU, that the streamer
 * allocates in chunks: pinned through the backend (host_alloc_pinned) while
 * the process's pinned budget lasts, page-aligned pageable memory beyond it
 * (one noted fallback). A device-tier miss is then:
 *   host hit:  store->publish(slot, host slot, bytes)   (no file read)
 *   host miss: pread the slice into a fresh host slot, mark it present in the
 *              host tier, then publish it.
 * publish may return before its copy has read the host slot; a host slot that
 * is the source of a publish since the last quiesce is reused only after
 * store->quiesce (one quiesce covers every publish so far). A store without
 * publish (ABI < 1.4) gets slot_for_write + memcpy + commit_slot instead.
 * Per tier, a failed step leaves the key absent in that tier and its slot
 * free: a failed read (or host-tier commit) leaves the key absent in both
 * tiers, a failed publish leaves it present in the host tier only.
 *
 * Batches: vt_streamer_acquire makes n experts × the layer's matrices resident
 * at once; slots used by the current batch are never evicted by it, so the
 * arena must hold at least n × matrices slots (VT_ERR_RANGE otherwise).
 *
 * The batched fill path (n_readers > 1, or a staging ring): an acquire's
 * misses are taken in order (device slot, then host hit, host slot or ring
 * slot), their file reads run at once on the reader threads, then, in order,
 * each is committed to the host tier and published. A failure at key i
 * publishes the keys before it and leaves i and every key after it absent
 * (their slots back on the free lists). Without a host tier and with a store
 * that has publish, reads land in a ring of staging slots (allocated with
 * the host tier's rules: pinned within the budget) and are published from
 * there; half the ring is read while the other half's copies run (one
 * quiesce between the reads and the publishes of each half).
 *
 * I/O: pread on a descriptor of each shard. With io_direct the shards are
 * opened with O_DIRECT (page cache bypassed): a read lands in place when its
 * slot has room for the aligned blocks, else it goes through an aligned
 * bounce buffer, one per reader thread (the parts of a whole-expert slot
 * always do); when the file system refuses O_DIRECT the streamer falls back
 * to plain pread with a WARN.
 *
 * Thread-safety: one streamer is used by one thread at a time.
 */
#ifndef VT_EXPERT_STREAMER_H
#define VT_EXPERT_STREAMER_H

#include <stdint.h>
#include <sys/types.h>

#include "vt/gguf.h"
#include "vt/plugin.h"
#include "vt/status.h"
#include "vt/store.h"

/* The device tier's replacement policy (expert_cache.policy). */
typedef enum vt_cache_policy {
    VT_CACHE_POLICY_LRU = 0,   /* one LRU over every layer */
    VT_CACHE_POLICY_LAYER = 1, /* LRU by each layer's own clock (expert_streamer_slots.c) */
    VT_CACHE_POLICY_LFRU = 2,  /* least frequently used of a sample, aged (see _slots.c) */
} vt_cache_policy;

enum { VT_STREAMER_PREFETCH_NEXT_LAYER = 1, VT_STREAMER_PREFETCH_AUTO = 2 };

typedef struct vt_streamer_params {
    const vt_gguf *gguf;        /* the model (tensor file offsets, shard paths) */
    const vt_store_api *store_api;
    vt_store *store;            /* created with n_slots of slot_bytes; not owned */
    uint64_t n_slots;
    uint64_t slot_bytes;
    uint32_t n_layer;           /* layers 0 .. n_layer-1 may register */
    int io_direct;              /* 1: O_DIRECT with fallback; 0: pread */
    vt_cache_policy policy;     /* of the device tier; the host tier is LRU */
    /* the host tier (0 slots: none) */
    uint64_t n_host_slots;
    uint64_t host_slot_bytes;   /* >= slot_bytes */
    const vt_backend *backend;  /* pins the host tier when it declares pinned_host_alloc;
                                 * may be NULL (pageable); must outlive the streamer */
    uint32_t n_readers;         /* reader threads for a batch's file reads (0, 1: none; the
                                 * misses are then filled one at a time unless there is a
                                 * staging ring) */
    uint64_t n_ring_slots;      /* the staging ring (expert_cache.staging), used only without a
                                 * host tier and with a store that has publish: slots of
                                 * host_slot_bytes (at least 2; 0: none) */
    int prefetch;               /* expert_cache.prefetch: VT_STREAMER_PREFETCH_NEXT_LAYER
                                 * needs the host tier and a store with the ahead publishes,
                                 * else create fails with VT_ERR_UNSUPPORTED naming the
                                 * reason; VT_STREAMER_PREFETCH_AUTO is next-layer when those
                                 * and the backend's second copy queue (copy.h2d_ahead) are
                                 * there, else off (logged at INFO); 0 off */
    uint32_t prefetch_top;      /* expert_cache.prefetch_top: a prefetch considers at most
                                 * this many of its ids, the first ones (a model passes them in
                                 * decreasing router weight; a resident one past the first N
                                 * is still kept from the prefetch's victims); 0 auto:
                                 * ceil(3 n / 4) of n ids */
    uint32_t prefetch_max;      /* expert_cache.prefetch_max: of those, a prefetch copies at
                                 * most this many experts (the first not resident, in the
                                 * ids' order); 0 auto: ceil(3 n / 8). Measured on the H100
                                 * (README, Prefetch): the copies that fit beside the
                                 * segment's compute (about three experts of the Qwen3.5
                                 * shape, 2 MiB each at ~50 GB/s in ~100 us) are free, more
                                 * delay the next layer's demand copies: Qwen3.5 shape, 25%
                                 * arena, vt bench -p 16 -n 128 sweep (stop 37, one H100):
                                 * top 6 at most 3 463.8 tok/s, top 5 unbounded 443.2, top 8
                                 * unbounded 408.3 (the README's figures come from a separate
                                 * run of bench/stream_vs_anchor.sh) */
    /* the device tier's slot classes (the store created with the same layout,
     * vt/store.h ABI 1.7): n_classes 0, one class of n_slots of slot_bytes;
     * else class c is class_slots[c] slots of class_bytes[c] (<= slot_bytes)
     * in slot order, summing to n_slots. A stack's slices take the smallest
     * class with slots that holds one; its keys' victims are of that class. */
    uint32_t n_classes;
    uint64_t class_slots[VT_STORE_MAX_CLASSES];
    uint64_t class_bytes[VT_STORE_MAX_CLASSES];
    /* expert_cache.slot_unit: 0 (matrix) a key, and a slot, per matrix of an
     * expert; 1 (expert) one key per expert of a layer, whose slot holds all
     * of the layer's registered matrices of it back to back, each at a
     * multiple of VT_STREAMER_UNIT_ALIGN (vt_streamer_unit_bytes): a miss is
     * one copy from the host tier instead of one per matrix (the copy engine
     * runs larger copies faster: bench_h2d). The matrices of a layer must
     * have the same expert count. */
    int slot_unit_expert;
} vt_streamer_params;

/* Where each matrix of a whole-expert slot starts (bytes, a multiple of this) */
#define VT_STREAMER_UNIT_ALIGN 256u

/* Prefetch counters (not part of the ABI). A prefetched key counts as a
 * device hit when an acquire then asks for it; its bytes are in
 * bytes_issued here, not in vt_expert_stats (neither misses nor
 * bytes_filled, whose fill rate they would distort). Keys dropped after a
 * failed copy or join count as fill errors there, not as wasted here. */
typedef struct vt_streamer_prefetch_stats {
    uint64_t issued;        /* keys copied ahead from the host tier */
    uint64_t used;          /* of those, acquired before being evicted */
    uint64_t wasted;        /* of those, evicted before any acquire asked for them */
    uint64_t skipped;       /* predicted keys the host tier lacked (not copied) */
    uint64_t bytes_issued, bytes_wasted;
} vt_streamer_prefetch_stats;

/* Host-tier counters, per layer or summed (not part of the ABI). */
typedef struct vt_streamer_host_stats {
    uint64_t hits;          /* device misses served from the host tier */
    uint64_t misses;        /* device misses read from the file into the host tier */
    uint64_t bytes_read;    /* bytes read from the file into the host tier */
    uint64_t evictions;
    uint64_t errors;        /* failed reads or host-tier commits */
    double read_seconds;    /* in reads into the host tier */
} vt_streamer_host_stats;

vt_status vt_streamer_create(const vt_streamer_params *p, vt_expert_streamer **out);
void vt_streamer_destroy(vt_expert_streamer *s);

/* See vt_host_api.experts_register / experts_acquire / experts_stats. */
vt_status vt_streamer_register(vt_expert_streamer *s, uint32_t layer, uint32_t matrix,
                               const vt_gguf_tensor *t);
vt_status vt_streamer_acquire(vt_expert_streamer *s, uint32_t layer, const int32_t *ids,
                              uint32_t n, const void **out);
vt_status vt_streamer_stats(const vt_expert_streamer *s, int32_t layer, vt_expert_stats *out);
/* See vt_host_api.experts_prefetch / experts_prefetch_on (ABI 1.5). */
vt_status vt_streamer_prefetch(vt_expert_streamer *s, uint32_t layer, const int32_t *ids,
                               uint32_t n);
int vt_streamer_prefetch_on(const vt_expert_streamer *s);
/* How many of n predicted ids a prefetch considers under expert_cache.prefetch_top
 * = top (0 auto: ceil(3 n / 4)); never more than n. */
uint32_t vt_streamer_prefetch_count(uint32_t top, uint32_t n);
/* The most experts one prefetch of n predicted ids copies under
 * expert_cache.prefetch_max = max (0 auto: ceil(3 n / 8)); never more than n. */
uint32_t vt_streamer_prefetch_max(uint32_t max, uint32_t n);
vt_status vt_streamer_prefetch_stats_get(const vt_expert_streamer *s,
                                         vt_streamer_prefetch_stats *out);

/* Introspection for tests and --stats. */
uint64_t vt_streamer_n_slots(const vt_expert_streamer *s);
uint64_t vt_streamer_n_resident(const vt_expert_streamer *s);
int vt_streamer_is_resident(const vt_expert_streamer *s, uint32_t layer, uint32_t matrix,
                            uint32_t expert);
uint32_t vt_streamer_n_layers(const vt_expert_streamer *s);
/* Whether O_DIRECT is in use (after a fallback: 0). */
int vt_streamer_io_direct(const vt_expert_streamer *s);
/* The staging ring's slots (0: none) and the readers of the batched fill path (1: none). */
uint64_t vt_streamer_n_ring_slots(const vt_expert_streamer *s);
uint32_t vt_streamer_n_readers(const vt_expert_streamer *s);

/* The host tier: slots, keys resident, pinned bytes, counters. */
uint64_t vt_streamer_n_host_slots(const vt_expert_streamer *s);
uint64_t vt_streamer_n_host_resident(const vt_expert_streamer *s);
uint64_t vt_streamer_host_pinned_bytes(const vt_expert_streamer *s);
int vt_streamer_is_host_resident(const vt_expert_streamer *s, uint32_t layer, uint32_t matrix,
                                 uint32_t expert);
vt_status vt_streamer_host_stats_get(const vt_expert_streamer *s, int32_t layer,
                                     vt_streamer_host_stats *out);
/* Wait for every publish issued so far (store->quiesce); a no-op without any. */
vt_status vt_streamer_quiesce(vt_expert_streamer *s);

/* The routing trace: every acquire while recording, in order: its layer,
 * phase (a caller's label, e.g. 0 prefill / 1 decode) and expert ids
 * (ids[off[i] .. off[i+1]) of acquire i). The streamer's batch rule applies
 * to each acquire (its keys resident together; a repeat is one use); every
 * matrix of the layer is one key per expert. truncated: recording stopped
 * early, out of memory. Owned by the streamer; valid until the next
 * trace_start or destroy. */
typedef struct vt_streamer_trace {
    size_t n_acquires;
    uint32_t *layer;
    uint8_t *phase;
    uint64_t *off;   /* [n_acquires + 1] */
    int32_t *ids;
    int truncated;
} vt_streamer_trace;
void vt_streamer_trace_start(vt_expert_streamer *s); /* clears the trace, records */
void vt_streamer_trace_stop(vt_expert_streamer *s);
void vt_streamer_trace_phase(vt_expert_streamer *s, uint8_t phase); /* for what follows */
const vt_streamer_trace *vt_streamer_get_trace(const vt_expert_streamer *s);
/* The keys per expert of a layer (0: none registered): its registered
 * matrices, or 1 when slots hold whole experts (slot_unit_expert); and the
 * experts in each of its stacks. */
uint32_t vt_streamer_n_matrices(const vt_expert_streamer *s, uint32_t layer);
uint64_t vt_streamer_n_experts(const vt_expert_streamer *s, uint32_t layer);

/* LRU and Belady's optimum (cache_sim.h) replayed over the recorded trace
 * with `capacity` slots; only acquires of phase counted_phase count (< 0:
 * all). Either result may be NULL. */
struct vt_cache_sim_result;
vt_status vt_streamer_simulate(const vt_expert_streamer *s, uint64_t capacity, int counted_phase,
                               struct vt_cache_sim_result *lru, struct vt_cache_sim_result *belady);

/* Fault injection in tests: called at each point; nonzero fails that step. */
typedef enum vt_streamer_fault_point {
    VT_STREAMER_FAULT_HOST_COMMIT = 1, /* after a read into a host slot, before it is marked */
    VT_STREAMER_FAULT_PUBLISH = 2,     /* instead of the publish from a host slot or a ring
                                        * slot */
} vt_streamer_fault_point;
typedef int (*vt_streamer_fault_fn)(void *ctx, vt_streamer_fault_point pt, uint32_t layer,
                                    uint32_t matrix, uint32_t expert);
void vt_streamer_set_fault(vt_expert_streamer *s, vt_streamer_fault_fn fn, void *ctx);

/* Replace pread (fault injection in tests): same contract as pread(2). With
 * n_readers > 1 it is called from several threads at once (the fault hook
 * is always called from the acquiring thread). */
typedef ssize_t (*vt_streamer_read_fn)(void *ctx, int fd, void *buf, size_t n, off_t off);
void vt_streamer_set_reader(vt_expert_streamer *s, vt_streamer_read_fn fn, void *ctx);

/* The core's host slot store (vt/store.h), name "host": one arena in host
 * memory (page-aligned), slot_for_write = slot_for_read = the slot itself,
 * commit_slot bounds-checked and refusing a slot other than the one last
 * handed out. It requires the backend's host_addressable_device_memory. */
const vt_store_api *vt_host_store_api(void);

#endif
