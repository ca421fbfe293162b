/*
 * vt/store.h - the expert slot store table (ABI 1.1; publish and quiesce 1.4;
 * the ahead publishes 1.5; slot classes 1.7).
 *
 * A slot store holds the arena of expert slots the expert streamer fills
 * (DESIGN.md "Expert streaming"). A slot holds one expert's slice of one
 * matrix (slot_bytes bytes). The host store lives in the core; a store plugin
 * (descriptor kind VT_PLUGIN_STORE, table vt_store_api) keeps its arena
 * elsewhere, e.g. in device memory of its backend (plugins/store-device).
 *
 * The fill contract (one fill at a time per store):
 *   dst = slot_for_write(s, slot)      host-writable destination, slot_bytes bytes
 *   ... pread() fills dst ...
 *   commit_slot(s, slot, bytes)        publishes the bytes into the slot;
 *                                      refuses a slot other than the one last
 *                                      handed out by slot_for_write
 *   slot_for_read(s, slot)             the slot itself, in the memory the
 *                                      backend's ops read (device memory)
 *
 * Requirements: required_caps lists the backend capabilities the store needs
 * (the device store: VT_CAP_MEMORY_PROBE). They are checked when the
 * configuration is resolved, before any weight is read; a miss is refused
 * naming the store, the capability, the backend and the backend's reason.
 *
 * Thread-safety: one store is used by one thread at a time.
 */
#ifndef VT_STORE_H
#define VT_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "vt/backend.h"
#include "vt/plugin.h"
#include "vt/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vt_store vt_store; /* defined by each store */

/* One publish of publish_ahead (ABI 1.5): bytes (<= slot_bytes) of host
 * memory src into slot. */
typedef struct vt_store_publish {
    uint64_t slot;
    const void *src;
    uint64_t bytes;
} vt_store_publish;

typedef struct vt_store_params {
    uint32_t struct_size;
    const vt_host_api *host;
    const vt_backend *backend;    /* the backend whose ops read the slots */
    uint64_t slot_bytes;          /* bytes of one slot (largest expert matrix slice) */
    uint64_t n_slots;             /* slots in the arena */
    uint64_t pinned_budget_bytes; /* most pinned host memory the store may take (0: none) */
    /* ---- ABI 1.7: slot classes (read when struct_size covers them) ----
     * Slots of several sizes in one arena, so that a model whose expert
     * slices differ in size (Q4_K_M: Q4_K gate/up, Q6_K down in some layers)
     * does not pay the largest slice for every slot. n_classes 0: every slot
     * is slot_bytes (as before 1.7). Else class c holds class_slots[c] slots
     * of class_bytes[c] bytes (each > 0 and <= slot_bytes), the classes in
     * slot order: class 0 is slots 0 .. class_slots[0]-1, and so on; the sum
     * of class_slots is n_slots. A publish or commit into a slot takes at most
     * its class's bytes. vt_store_layout_init reads these for a store. */
    uint32_t n_classes;           /* 0 .. VT_STORE_MAX_CLASSES */
    const uint64_t *class_slots;  /* [n_classes], caller-owned, read during the call */
    const uint64_t *class_bytes;  /* [n_classes], caller-owned, read during the call */
} vt_store_params;

#define VT_STORE_MAX_CLASSES 4

/* A store's arena laid out by class (vt_store_layout_init): class c holds
 * slots first[c] .. first[c+1]-1 of bytes[c] each, every slot stride[c]
 * bytes (bytes[c] rounded up to the store's alignment) from offset[c]. */
typedef struct vt_store_layout {
    uint32_t n_classes;                       /* 1 .. VT_STORE_MAX_CLASSES */
    uint64_t first[VT_STORE_MAX_CLASSES + 1]; /* first[n_classes] = n_slots */
    uint64_t bytes[VT_STORE_MAX_CLASSES];
    uint64_t stride[VT_STORE_MAX_CLASSES];
    uint64_t offset[VT_STORE_MAX_CLASSES];
    uint64_t total;                           /* the arena's bytes */
} vt_store_layout;

/* The layout p describes, every slot aligned to `align` bytes (a power of
 * two): one class of slot_bytes when p has no classes (n_classes 0 or a
 * struct_size from before 1.7). Returns 0, or -1 when the classes are
 * inconsistent (more than VT_STORE_MAX_CLASSES, a class of 0 bytes or more
 * than slot_bytes, counts that do not sum to n_slots) or the arena's bytes
 * overflow 64 bits; out is then unspecified. */
static inline int vt_store_layout_init(const vt_store_params *p, uint64_t align,
                                       vt_store_layout *out)
{
    const int classes = p->struct_size >= offsetof(vt_store_params, class_bytes) +
                                              sizeof p->class_bytes &&
                        p->n_classes > 0;
    const uint32_t n = classes ? p->n_classes : 1;
    if (n > VT_STORE_MAX_CLASSES || (classes && (!p->class_slots || !p->class_bytes))) return -1;
    out->n_classes = n;
    out->total = 0;
    uint64_t first = 0;
    for (uint32_t c = 0; c < n; c++) {
        const uint64_t cnt = classes ? p->class_slots[c] : p->n_slots;
        const uint64_t b = classes ? p->class_bytes[c] : p->slot_bytes;
        if (!b || b > p->slot_bytes || b > UINT64_MAX - align) return -1;
        uint64_t stride = (b + align - 1) / align * align, sz;
        if (__builtin_mul_overflow(stride, cnt, &sz) ||
            __builtin_add_overflow(out->total, sz, &out->total) ||
            __builtin_add_overflow(first, cnt, &first))
            return -1;
        out->first[c] = first - cnt;
        out->bytes[c] = b;
        out->stride[c] = stride;
        out->offset[c] = out->total - sz;
    }
    out->first[n] = first;
    return first == p->n_slots ? 0 : -1;
}

/* Slot `slot` (< first[n_classes]): its byte offset in the arena; *cap gets
 * the bytes it holds. */
static inline uint64_t vt_store_slot_offset(const vt_store_layout *l, uint64_t slot,
                                            uint64_t *cap)
{
    uint32_t c = 0;
    while (c + 1 < l->n_classes && slot >= l->first[c + 1]) c++;
    *cap = l->bytes[c];
    return l->offset[c] + (slot - l->first[c]) * l->stride[c];
}

/* Where a store's memory lives, for the fit check. */
typedef struct vt_store_footprint {
    uint32_t struct_size;
    uint64_t device_bytes; /* in the backend's memory (the arena, for a device store) */
    uint64_t host_bytes;   /* in host memory (staging buffers) */
} vt_store_footprint;

typedef struct vt_store_api {
    uint32_t struct_size;
    /* Capabilities this store needs of its backend (n_required_caps ids). */
    const uint32_t *required_caps;
    uint32_t n_required_caps;

    /* Bytes the store would take for p (reads no file, allocates nothing). */
    vt_status (*footprint)(const vt_store_params *p, vt_store_footprint *out);
    /* Acquire the arena and staging. On failure everything acquired is released
     * and the error names the allocation and its bytes. */
    vt_status (*create)(const vt_store_params *p, vt_store **out);
    void (*destroy)(vt_store *s);
    /* Host-writable destination for filling `slot` (slot_bytes bytes), or NULL
     * with an error set (slot out of range). */
    void *(*slot_for_write)(vt_store *s, uint64_t slot);
    /* Publish the `bytes` (<= slot_bytes) written into the destination of
     * `slot`. VT_ERR_INVALID_ARG when slot is not the one last handed out. */
    vt_status (*commit_slot)(vt_store *s, uint64_t slot, uint64_t bytes);
    /* The slot's bytes as the backend's ops read them, or NULL (out of range). */
    const void *(*slot_for_read)(vt_store *s, uint64_t slot);

    /* ---- ABI 1.4 (read only when the plugin's abi_minor >= 4) ---- */
    /* Publish `bytes` (<= slot_bytes) from caller-owned host memory src into
     * `slot`, the expert streamer's host tier being the source. Ordered with
     * the backend's ops: every op issued after it reads the new bytes, and
     * the slot's old bytes are not overwritten before the ops issued before
     * it have read them. It may return before the bytes are copied: src must
     * stay unchanged until quiesce() returns. No slot may be staged
     * (slot_for_write .. commit_slot) across it. Errors: VT_ERR_INVALID_ARG
     * (slot out of range, bytes > slot_bytes, NULL src); the backend's copy
     * error. On an error the slot's contents are undefined (the caller keeps
     * the key absent). */
    vt_status (*publish)(vt_store *s, uint64_t slot, const void *src, uint64_t bytes);
    /* Wait until every publish() has finished reading its source (and report
     * a copy that failed). */
    vt_status (*quiesce)(vt_store *s);

    /* ---- ABI 1.5 (read only when the plugin's abi_minor >= 5) ---- */
    /* Publishes that run beside the backend's ops (the expert streamer's
     * prefetch, all three or none):
     *   begin_ahead(s)       the publish_ahead calls that follow write their
     *                        slots only after every op issued before this
     *                        call has read them;
     *   publish_ahead(...)   n publishes (host array) as publish() each, but
     *                        they may run concurrently with the ops issued
     *                        after begin_ahead, which must not read their
     *                        slots before the next join_ahead; on an error
     *                        some of them may have been queued: every slot
     *                        of the call is undefined, and the caller still
     *                        joins (and quiesces) before reusing a slot or a
     *                        source of the call;
     *   join_ahead(s)        every op issued after this call reads the bytes
     *                        of every publish_ahead before it.
     * src stays unchanged until quiesce() returns, as for publish(). A store
     * whose backend has no second copy queue may publish in order (then
     * nothing overlaps, and it says so once through note_fallback).
     * Errors as publish(). */
    vt_status (*begin_ahead)(vt_store *s);
    vt_status (*publish_ahead)(vt_store *s, const vt_store_publish *p, uint32_t n);
    vt_status (*join_ahead)(vt_store *s);
} vt_store_api;

#ifdef __cplusplus
}
#endif
#endif
