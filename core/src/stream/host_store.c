/*
 * host_store.c - the core's host slot store (vt/store.h, name "host"): one
 * page-aligned arena in host memory (page-aligned slots, by class with ABI
 * 1.7's slot classes: vt_store_layout). The slot a fill writes is the slot the
 * backend reads, so commit_slot only checks its arguments. It is the oracle
 * the device store is tested against. publish (ABI 1.4, from the streamer's
 * host tier) is a memcpy: the backends it serves read host memory and run
 * their ops to completion before returning, so nothing is in flight.
 */
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "error.h"
#include "expert_streamer.h"

#define HOST_STORE_ALIGN 4096 /* page-aligned slots */

struct vt_store {
    uint8_t *arena;
    uint64_t n_slots, slot_bytes;
    vt_store_layout layout;
    uint64_t staged; /* slot last handed out by slot_for_write; UINT64_MAX: none */
};

static const uint32_t host_required[] = {VT_CAP_HOST_ADDRESSABLE_DEVICE_MEMORY};

static vt_status hs_footprint(const vt_store_params *p, vt_store_footprint *out)
{
    vt_store_layout l;
    out->device_bytes = 0;
    out->host_bytes = vt_store_layout_init(p, HOST_STORE_ALIGN, &l) ? UINT64_MAX : l.total;
    return VT_OK;
}

/* The slot's address and, in *cap, its bytes (slot < n_slots). */
static uint8_t *hs_addr(const vt_store *s, uint64_t slot, uint64_t *cap)
{
    return s->arena + vt_store_slot_offset(&s->layout, slot, cap);
}

static vt_status hs_create(const vt_store_params *p, vt_store **out)
{
    *out = NULL;
    vt_store *s = calloc(1, sizeof *s);
    if (!s) {
        vt_set_error("out of memory: host store (%zu bytes)", sizeof *s);
        return VT_ERR_OUT_OF_MEMORY;
    }
    s->n_slots = p->n_slots;
    s->slot_bytes = p->slot_bytes;
    s->staged = UINT64_MAX;
    uint64_t bytes = 0;
    char hb[32];
    int bad = !p->n_slots || !p->slot_bytes || vt_store_layout_init(p, HOST_STORE_ALIGN, &s->layout);
    if (!bad) bytes = s->layout.total;
    if (bad || (uint64_t)(size_t)bytes != bytes) {
        vt_set_error("host store: an arena of %llu slots of %llu bytes is not allocatable",
                     (unsigned long long)p->n_slots, (unsigned long long)p->slot_bytes);
        free(s);
        return VT_ERR_INVALID_ARG;
    }
    s->arena = aligned_alloc(HOST_STORE_ALIGN, (size_t)bytes);
    if (!s->arena) {
        vt_set_error("host store: allocation of the expert arena failed: %s (%llu bytes, %llu "
                     "slots): out of memory", vt_format_bytes(bytes, 1, hb, sizeof hb),
                     (unsigned long long)bytes, (unsigned long long)p->n_slots);
        free(s);
        return VT_ERR_OUT_OF_MEMORY;
    }
    *out = s;
    return VT_OK;
}

static void hs_destroy(vt_store *s)
{
    if (!s) return;
    free(s->arena);
    free(s);
}

static void *hs_slot_for_write(vt_store *s, uint64_t slot)
{
    if (slot >= s->n_slots) {
        vt_set_error("host store: slot %llu is out of range (%llu slots)",
                     (unsigned long long)slot, (unsigned long long)s->n_slots);
        return NULL;
    }
    s->staged = slot;
    uint64_t cap;
    return hs_addr(s, slot, &cap);
}

static vt_status hs_commit_slot(vt_store *s, uint64_t slot, uint64_t bytes)
{
    if (slot != s->staged) {
        vt_set_error("host store: commit_slot(%llu) but the slot handed out for writing is %s%llu",
                     (unsigned long long)slot, s->staged == UINT64_MAX ? "none, last " : "",
                     (unsigned long long)(s->staged == UINT64_MAX ? 0 : s->staged));
        return VT_ERR_INVALID_ARG;
    }
    s->staged = UINT64_MAX;
    uint64_t cap;
    (void)hs_addr(s, slot, &cap);
    if (bytes > cap) {
        vt_set_error("host store: commit of %llu bytes into slot %llu of %llu",
                     (unsigned long long)bytes, (unsigned long long)slot,
                     (unsigned long long)cap);
        return VT_ERR_INVALID_ARG;
    }
    return VT_OK;
}

static const void *hs_slot_for_read(vt_store *s, uint64_t slot)
{
    if (slot >= s->n_slots) {
        vt_set_error("host store: slot %llu is out of range (%llu slots)",
                     (unsigned long long)slot, (unsigned long long)s->n_slots);
        return NULL;
    }
    uint64_t cap;
    return hs_addr(s, slot, &cap);
}

static vt_status hs_publish(vt_store *s, uint64_t slot, const void *src, uint64_t bytes)
{
    uint64_t cap = 0;
    uint8_t *dst = slot < s->n_slots ? hs_addr(s, slot, &cap) : NULL;
    if (slot >= s->n_slots || bytes > cap || !src || s->staged != UINT64_MAX) {
        vt_set_error("host store: publish of %llu bytes into slot %llu (%llu slots; this one of "
                     "%llu bytes)%s", (unsigned long long)bytes, (unsigned long long)slot,
                     (unsigned long long)s->n_slots, (unsigned long long)cap,
                     !src ? " from a NULL source" : s->staged != UINT64_MAX ? " while a slot is staged" : "");
        return VT_ERR_INVALID_ARG;
    }
    memcpy(dst, src, (size_t)bytes);
    return VT_OK;
}

static vt_status hs_quiesce(vt_store *s)
{
    (void)s;
    return VT_OK;
}

/* ABI 1.5: host memory has one queue, the caller's thread: ahead publishes
 * are publishes (nothing to overlap, nothing to order). */
static vt_status hs_publish_ahead(vt_store *s, const vt_store_publish *p, uint32_t n)
{
    if (n && !p) {
        vt_set_error("host store: publish_ahead of %u publishes from a NULL array", n);
        return VT_ERR_INVALID_ARG;
    }
    for (uint32_t i = 0; i < n; i++) {
        vt_status st = hs_publish(s, p[i].slot, p[i].src, p[i].bytes);
        if (st != VT_OK) return st;
    }
    return VT_OK;
}

static vt_status hs_no_queue(vt_store *s)
{
    (void)s;
    return VT_OK;
}

static const vt_store_api host_store_api = {
    .struct_size = sizeof(vt_store_api),
    .required_caps = host_required,
    .n_required_caps = 1,
    .footprint = hs_footprint,
    .create = hs_create,
    .destroy = hs_destroy,
    .slot_for_write = hs_slot_for_write,
    .commit_slot = hs_commit_slot,
    .slot_for_read = hs_slot_for_read,
    .publish = hs_publish,
    .quiesce = hs_quiesce,
    .begin_ahead = hs_no_queue,
    .publish_ahead = hs_publish_ahead,
    .join_ahead = hs_no_queue,
};

const vt_store_api *vt_host_store_api(void) { return &host_store_api; }
