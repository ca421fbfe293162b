/*
 * vt/plugin.h - the plugin ABI: the descriptor every plugin exports and the
 * host table the core hands to plugins.
 *
 * A plugin is a shared object loaded with dlopen(). It exports exactly one
 * symbol, VT_PLUGIN_ENTRY_SYMBOL ("vt_plugin_entry"), of type
 * vt_plugin_entry_fn, returning a pointer to a static vt_plugin_desc.
 *
 * Versioning (after PJRT's struct_size and SQLite's iVersion):
 *  - abi_major: a different major is refused at load, naming the file.
 *  - abi_minor: the plugin's minor. Tables are append-only: a member added in
 *    minor N is only read when the plugin's minor is >= N and the table's
 *    struct_size covers it. A table smaller than what its declared minor
 *    requires is refused at load, naming the file.
 *  - Every function table and parameter struct that crosses the boundary
 *    starts with uint32_t struct_size (vt_plugin_desc, vt_host_api,
 *    vt_backend_api, vt_backend_params, vt_model_api, vt_model_params,
 *    vt_model_info). Plain value records (vt_weight, vt_capability,
 *    vt_gguf_tensor, vt_gguf_str, vt_backend) are fixed for an ABI major.
 *
 * Ownership: the descriptor, its strings and its table are owned by the plugin
 * and must stay valid until dlclose(). The host table is owned by the core and
 * valid for the life of the process.
 */
#ifndef VT_PLUGIN_H
#define VT_PLUGIN_H

#include <stdarg.h>
#include <stdint.h>

#include "vt/gguf.h"
#include "vt/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VT_ABI_MAJOR 1
#define VT_ABI_MINOR 9

#define VT_PLUGIN_ENTRY_SYMBOL "vt_plugin_entry"

#if defined(__GNUC__)
#define VT_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define VT_PLUGIN_EXPORT
#endif

typedef enum vt_plugin_kind {
    VT_PLUGIN_BACKEND = 1, /* table: vt_backend_api (vt/backend.h) */
    VT_PLUGIN_MODEL = 2,   /* table: vt_model_api (vt/model.h) */
    VT_PLUGIN_STORE = 3    /* table: vt_store_api (vt/store.h), ABI 1.1 */
} vt_plugin_kind;

typedef struct vt_plugin_desc {
    uint32_t struct_size; /* sizeof(vt_plugin_desc) as the plugin was built */
    uint16_t abi_major;   /* VT_ABI_MAJOR the plugin was built against */
    uint16_t abi_minor;   /* VT_ABI_MINOR the plugin was built against */
    uint32_t kind;        /* vt_plugin_kind */
    const char *name;     /* short name: "cpu", "qwen35"; [a-z0-9_-]+ */
    const char *version;  /* plugin's own version string, e.g. "0.1.0" */
    const char *description; /* one line, for `vt plugins` */
    const void *table;    /* the kind's function table; starts with uint32_t struct_size */
} vt_plugin_desc;

typedef const vt_plugin_desc *(*vt_plugin_entry_fn)(void);

/*
 * The expert streamer (ABI 1.1), owned by the core: a bounded arena of slots
 * holding routed-expert slices, filled from the GGUF on a miss (DESIGN.md
 * "Expert streaming"). A model plugin gets one in vt_model_params.experts
 * when the residency streams its experts (NULL: experts resident, read them
 * in place), registers its routed-expert stacks at load and acquires the
 * slices each layer needs while it runs.
 */
typedef struct vt_expert_streamer vt_expert_streamer;

/* Counters of one layer, or of all layers. */
typedef struct vt_expert_stats {
    uint64_t hits;         /* slices found resident */
    uint64_t misses;       /* slices filled from the file */
    uint64_t bytes_filled; /* bytes read from the file into slots */
    uint64_t evictions;    /* resident slices dropped to make room */
    uint64_t fill_errors;  /* fills that failed (the key stayed absent) */
    double fill_seconds;   /* wall time spent reading and committing fills */
    double commit_seconds; /* of which in commit_slot (a device store: the H2D copy + sync) */
} vt_expert_stats;

/* Log levels; anything that changes where work runs is logged at WARN. */
typedef enum vt_log_level {
    VT_LOG_ERROR = 0,
    VT_LOG_WARN = 1,
    VT_LOG_INFO = 2,
    VT_LOG_DEBUG = 3
} vt_log_level;

/*
 * The host table: what the core offers every plugin. Plugins never link the
 * core; they call through this table. Members are appended only; check
 * struct_size before reading a member newer than VT_ABI_MINOR 0.
 * Every function is thread-safe.
 */
typedef struct vt_host_api {
    uint32_t struct_size;
    uint16_t abi_major, abi_minor;

    /* Log a printf-style message at a level (prefixed with the level). */
    void (*log)(vt_log_level level, const char *fmt, ...);
    /* Set the calling thread's last-error message (printf-style). Returns nothing;
     * the plugin then returns its vt_status. */
    void (*set_error)(const char *fmt, ...);
    /* Read the calling thread's last-error message ("" when none). */
    const char *(*last_error)(void);

    /* GGUF access: the vt_gguf_* functions of vt/gguf.h with the same name and
     * contracts (e.g. get_u32: VT_ERR_NOT_FOUND without a message when the key
     * is absent, VT_ERR_FORMAT naming the key for a wrong type). Returned
     * pointers are owned by g and valid while g is open. */
    vt_status (*gguf_get_u32)(const vt_gguf *g, const char *key, uint32_t *out);
    vt_status (*gguf_get_f32)(const vt_gguf *g, const char *key, float *out);
    vt_status (*gguf_get_bool)(const vt_gguf *g, const char *key, int *out);
    vt_status (*gguf_get_str)(const vt_gguf *g, const char *key, vt_gguf_str *out);
    vt_status (*gguf_get_arr)(const vt_gguf *g, const char *key, vt_gguf_type *elem_type,
                              uint64_t *count, const void **data);
    vt_status (*gguf_get_arr_i64)(const vt_gguf *g, const char *key, uint64_t i, int64_t *out);
    const vt_gguf_tensor *(*gguf_find_tensor)(const vt_gguf *g, const char *name);
    int64_t (*gguf_n_tensors)(const vt_gguf *g);
    const vt_gguf_tensor *(*gguf_tensor_at)(const vt_gguf *g, int64_t i);

    /* ---- ABI 1.1 ---- the expert streamer */
    /*
     * Register routed-expert stack `t` (ne[2] = n_expert slices, each one
     * contiguous range of nbytes / ne[2] bytes, gguf.md §3) as matrix `matrix`
     * (0, 1, 2... in the order the model will read them) of layer `layer`.
     * Errors: VT_ERR_INVALID_ARG (registered twice, matrix ids not dense),
     * VT_ERR_RANGE (a slice larger than a slot).
     */
    vt_status (*experts_register)(vt_expert_streamer *s, uint32_t layer, uint32_t matrix,
                                  const vt_gguf_tensor *t);
    /*
     * Make the slices of n experts (ids, host) of layer `layer` resident, all
     * at once: out[i * n_matrices + m] (host array of n * n_matrices pointers)
     * receives the slot holding matrix m of expert ids[i], in the backend's
     * memory. Pointers stay valid until the next experts_acquire on s. Slots
     * this call needs are never evicted by it. Errors: VT_ERR_RANGE when the
     * arena has fewer slots than n * n_matrices; VT_ERR_IO naming layer,
     * matrix, expert, file and offset when a fill fails (the cache stays
     * consistent and a retry refills).
     */
    vt_status (*experts_acquire)(vt_expert_streamer *s, uint32_t layer, const int32_t *ids,
                                 uint32_t n, const void **out);
    /* Counters of `layer`, or of every layer when layer < 0. */
    vt_status (*experts_stats)(const vt_expert_streamer *s, int32_t layer, vt_expert_stats *out);

    /* ---- ABI 1.1 ---- pinned host memory budget (residency config: pinned_budget) */
    /* Reserve `bytes` of the process's pinned-memory budget before pinning them
     * (cudaHostAlloc...). Returns 1 when reserved, 0 when the budget would be
     * exceeded. Atomic: safe under concurrent callers. */
    int (*pinned_reserve)(uint64_t bytes);
    /* Give back a reservation (the pinning failed, or the buffer was freed). */
    void (*pinned_release)(uint64_t bytes);
    /* Record a fallback that changes where or how work runs (pinned -> pageable
     * staging, ...): logged at WARN with `what` and counted (vt run --stats). */
    void (*note_fallback)(const char *what);

    /* ---- ABI 1.5 ---- the expert streamer's prefetch (expert_cache.prefetch) */
    /* Whether prefetch is on for s (next-layer: a host tier and a store with
     * the ahead publishes); 0 for NULL. A model skips computing predictions
     * when it is off. */
    int (*experts_prefetch_on)(const vt_expert_streamer *s);
    /*
     * A hint that layer `layer` will soon acquire experts ids (host, n): the
     * streamer starts copying those the device tier lacks and the host tier
     * holds, on the store's ahead queue, beside the ops issued after the
     * last experts_acquire. It never evicts a slot that acquire returned
     * (the ops queued after it read the slot), so call it after the acquire,
     * after or before the ops that use its slots (after: their launch is
     * not delayed by the copies' issue), and before the next acquire; the
     * next experts_acquire orders itself after the copies. Give ids in
     * decreasing router weight (the order moe_route writes): the streamer
     * considers only the first expert_cache.prefetch_top of them (auto: 6
     * of every 8, rounded up), the likeliest to be used, and copies at most
     * expert_cache.prefetch_max experts (auto: 3 of every 8), the first of
     * them not resident. Does nothing
     * when prefetch is off. Errors:
     * VT_ERR_INVALID_ARG / VT_ERR_RANGE as experts_acquire (bad layer or
     * id); a copy that cannot be queued (VT_ERR_IO or the backend's status):
     * the key stays absent, nothing claimed.
     */
    vt_status (*experts_prefetch)(vt_expert_streamer *s, uint32_t layer, const int32_t *ids,
                                  uint32_t n);

    /* ---- ABI 1.6 ---- the mapping's pages */
    /*
     * Tensor t of g (t->data mapped) has been copied where the backend's ops
     * read it and the model no longer reads it through the mapping: the
     * whole pages inside its bytes leave the process's resident set
     * (madvise MADV_DONTNEED on the read-only file mapping). A later read of
     * t->data still sees the same bytes (the pages fault in again from the
     * file). Pages shared with a neighbouring tensor are kept. Errors:
     * VT_ERR_INVALID_ARG (t not a tensor of g, or not mapped); VT_ERR_IO
     * naming the tensor when madvise fails (nothing is changed then).
     */
    vt_status (*gguf_release_pages)(const vt_gguf *g, const vt_gguf_tensor *t);
} vt_host_api;

#ifdef __cplusplus
}
#endif
#endif
