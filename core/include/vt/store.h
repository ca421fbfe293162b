/*
 * vt/store.h - the expert slot store table (ABI 1.1; publish and quiesce 1.4;
 * the ahead publishes 1.5).
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
} vt_store_params;

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
