/*
 * residency.h - resolving a configuration for one model on one device, and
 * the fit check (DESIGN.md "Residency"; `vt fit`, and the first thing
 * `vt run` does).
 *
 * Resolution, in order, reading no weight (the GGUF may be opened with
 * VT_GGUF_NO_MMAP):
 *   1. platform = --device or the config's defaults.platform; its backend
 *      plugin, the model plugin for general.architecture, and the expert slot
 *      store ("host" is the core's; any other name is a store plugin);
 *   2. the backend reports at least one device (else refused with that reason);
 *      the platform's devices: one index picks that device (refused when the
 *      backend reports fewer); several (or all of several) need the
 *      backend's peer_copy, then a model plugin that spreads routed experts
 *      over devices, and are refused naming the first that is missing (no
 *      model plugin of this vt does yet: DESIGN.md, issue 18);
 *   3. what the model requires of the backend (its ops for this file's weight
 *      types) and what the store requires (the host store: the backend's
 *      host_addressable_device_memory; the device store: memory_probe) are
 *      PRESENT, else refused naming plugin, capability, backend and reason.
 * Fit (vt_residency_fit), after the backend's memory probe ran once:
 *   dense bytes (every tensor but the routed-expert stacks), routed-expert
 *   bytes, slot arena (streamed), staging, KV cache (kv_bytes_per_token ×
 *   n_ctx), recurrent state and scratch (the model's memory_needs), headroom,
 *   against the device TOTAL probed at registration (not the live free
 *   figure). With experts auto: resident if that fits, else streamed with the
 *   arena sized from the total minus everything else. The arena is at least
 *   top-k × expert matrices slots (one layer's experts at once).
 * Memory pools: when the device memory is the host's (backend declares
 * host_addressable_device_memory PRESENT, or the platform sets
 * unified_memory), there is ONE pool: device total, and every byte (dense,
 * experts, arena, staging, caches, headroom) is counted once against it.
 * Otherwise the device pool holds dense, resident experts, a device store's
 * arena, caches, scratch and headroom; staging and a host arena are checked
 * against host MemTotal separately.
 */
#ifndef VT_RESIDENCY_H
#define VT_RESIDENCY_H

#include <stdint.h>
#include <stdio.h>

#include "config.h"
#include "registry.h"
#include "vt/gguf.h"
#include "vt/status.h"
#include "vt/store.h"

typedef struct vt_fit {
    /* from the tensor table */
    uint64_t dense_bytes;       /* every tensor that is not a routed-expert stack */
    uint64_t expert_bytes;      /* routed-expert stacks (name contains "_exps") */
    uint64_t unrun_bytes;       /* the trailing nextn_predict_layers (MTP) blocks, which no
                                   model runs: in neither figure above, never loaded */
    uint64_t n_expert_tensors;  /* routed-expert stacks */
    uint64_t n_expert_slices;   /* expert slices in all stacks (one slot each) */
    uint64_t slot_bytes;        /* the largest expert slice: one slot */
    uint32_t n_expert_used;     /* <arch>.expert_used_count (top-k) */
    uint32_t expert_matrices;   /* expert stacks per layer (qwen35: 3) */
    uint64_t min_slots;         /* n_expert_used × expert_matrices (× 1 with whole-expert slots) */
    int slot_unit_expert;       /* expert_cache.slot_unit resolved: a slot holds one whole
                                 * expert of a layer (its matrices back to back, each at a
                                 * multiple of VT_STREAMER_UNIT_ALIGN); the "slices" above and
                                 * below are then those units */
    /* from the model plugin (0 when it does not report them) */
    int have_model_memory;
    uint64_t kv_bytes, state_bytes, scratch_bytes;
    /* from the configuration */
    vt_experts_mode experts;    /* resolved: RESIDENT or STREAMED */
    uint64_t arena_slots, arena_bytes; /* streamed only */
    /* the arena's slot classes (expert_cache.slot_classes: auto, an arena in bytes or auto,
     * slices of several sizes, a store of ABI >= 1.7); 0: every slot slot_bytes */
    uint32_t n_classes;
    uint64_t class_bytes[VT_STORE_MAX_CLASSES];  /* a slot of the class: its largest slice */
    uint64_t class_slots[VT_STORE_MAX_CLASSES];  /* its slots (the sum: arena_slots) */
    uint64_t class_slices[VT_STORE_MAX_CLASSES]; /* the file's slices that take it */
    uint64_t class_min[VT_STORE_MAX_CLASSES];    /* top-k x the most of one layer's matrices */
    char classes_note[160];     /* why there are none, when slot_classes is auto ("" else) */
    uint64_t staging_bytes;     /* host staging of the store */
    uint64_t host_slots;        /* the host tier (expert_cache.host_arena): slots of */
    uint64_t host_slot_bytes;   /* host_slot_bytes each (0 slots: no host tier) */
    uint64_t host_arena_bytes;  /* host_slots × host_slot_bytes */
    uint32_t readers;           /* reader threads for the misses' file reads (resolved) */
    uint64_t ring_slots;        /* the staging ring (expert_cache.staging): slots of
                                 * host_slot_bytes each, only for a store plugin without a
                                 * host tier; 0: none (the store's own staging slot) */
    uint64_t ring_bytes;        /* ring_slots × host_slot_bytes */
    uint64_t bounce_bytes;      /* io: direct: one O_DIRECT bounce buffer per reader of the
                                 * streamer's pool (readers with a host tier and readers > 1,
                                 * or with a staging ring; else 1), each a slot rounded up to
                                 * 4 KiB plus one block (an upper bound: the streamer sizes
                                 * them by the largest matrix slice) */
    uint64_t headroom_bytes;
    /* pools */
    int unified;                /* one pool (see above) */
    uint64_t device_need;       /* bytes the device pool must hold */
    uint64_t host_need;         /* bytes the host pool must hold (discrete only) */
    int device_total_known;
    uint64_t device_total, device_free; /* probed once at registration */
    uint64_t host_total;        /* MemTotal */
    int fits;
    char verdict[1024];         /* one or two sentences; the refusal when !fits */
} vt_fit;

/* The arena's slot classes of g (residency.c, expert_cache.slot_classes:
 * auto): sets f->n_classes (0: one slice size), class_bytes, class_slices,
 * class_min (f->n_expert_used must be set) and, without classes,
 * classes_note; class_slots is left 0 (the fit splits the arena). */
void vt_residency_slot_classes(vt_fit *f, const vt_gguf *g);

/* expert_cache.slot_unit resolved: 1 when a slot holds a whole expert
 * (expert, and auto: on the H100 whole-expert slots decoded the Qwen3.5
 * shape 11% faster, bench/stream_vs_anchor.sh), 0 when it holds one matrix
 * of one (matrix). */
int vt_residency_slot_unit_expert(const vt_config_platform *plat);

typedef struct vt_residency {
    char platform[64];
    const vt_config_platform *plat;   /* into the config given, or plat_storage */
    vt_config_platform plat_storage;  /* defaults of a platform the config does not name */
    const vt_plugin_entry *model;
    const vt_plugin_entry *backend;
    const vt_plugin_entry *store;     /* NULL: the core's host store */
    char store_name[64];
    char device_name[128];            /* backend's device_name, or "" */
    int32_t device;                   /* the backend device the platform runs on (its
                                       * devices: the one index given; default 0) */
    /* sequences the model will hold at once (vt serve --parallel): the KV
     * cache and recurrent state are counted this many times; 0 counts as 1.
     * Set before vt_residency_fit. */
    uint32_t n_seq;
    vt_fit fit;
} vt_residency;

/*
 * Steps 1-3 above. device: the platform name (--device), NULL for the
 * config's default. Errors: VT_ERR_NOT_FOUND (a plugin missing, naming the
 * directories searched), VT_ERR_UNSUPPORTED (zero devices), VT_ERR_CAPABILITY
 * (a requirement ABSENT, naming who needs what and the backend's reason).
 */
vt_status vt_residency_select(const vt_config *cfg, const vt_registry *reg, const vt_gguf *g,
                              const char *device, vt_residency *out);

/*
 * The fit check. probe_ok: the backend's memory_probe ran (free_bytes and
 * total_bytes valid); 0 when the capability is ABSENT (the budget is unknown,
 * and a configuration that depends on it is refused). n_ctx, n_batch: the
 * KV cache length and prefill chunk the model will be loaded with.
 * Returns VT_OK with r->fit.fits set (and the verdict filled) in every case
 * where the numbers could be computed; VT_ERR_CAPABILITY / VT_ERR_OUT_OF_MEMORY
 * mirror !fits so callers can return it (the message is the verdict).
 */
vt_status vt_residency_fit(vt_residency *r, const vt_gguf *g, int probe_ok, uint64_t free_bytes,
                           uint64_t total_bytes, uint32_t n_ctx, uint32_t n_batch);

/* The store's parameters, built here only: n slots of slot_bytes (of the
 * fit's slot classes when classes is given: its n_classes, class_slots and
 * class_bytes, which must outlive the result), the platform's pinned budget,
 * the core's host table, backend (NULL for a footprint). The fit asks the
 * store's footprint with them, the engine creates the store with the fit's
 * own (f->slot_bytes, f->arena_slots, f). */
vt_store_params vt_residency_store_params(const vt_residency *r, uint64_t slot_bytes, uint64_t n,
                                         const vt_fit *classes, const vt_backend *backend);
/* The store the platform names (expert_cache.store), or the core's host store. */
const vt_store_api *vt_residency_store_api(const vt_residency *r);

/*
 * For `vt fit`: create a context on device 0 of the selected backend, run its
 * memory_probe once (when PRESENT; *probe_ok = 0 when ABSENT), shut it down.
 * Errors: the backend's init or probe failure, prefixed with the backend.
 */
vt_status vt_residency_probe(const vt_residency *r, int *probe_ok, uint64_t *free_bytes,
                             uint64_t *total_bytes);

/* Print the fit table and the verdict (what `vt fit` shows). */
void vt_residency_print(const vt_residency *r, const char *model_path, uint32_t n_ctx, FILE *f);

#endif
