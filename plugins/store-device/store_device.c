/*
 * store_device.c - the device expert slot store (vt/store.h, name "device").
 *
 * A discrete GPU cannot read a host arena, so the slots live in device memory:
 *  - one contiguous arena allocated through the backend (alloc), n_slots
 *    slots of slot_bytes rounded up to 256, or (ABI 1.7) the params' slot
 *    classes, each slot its class's bytes rounded up to 256
 *    (vt_store_layout);
 *  - ONE host staging buffer of slot_bytes: pinned (backend host_alloc_pinned)
 *    when the backend declares pinned_host_alloc PRESENT and the process's
 *    pinned budget (host->pinned_reserve) allows, else pageable (malloc) with
 *    a WARN and a counted fallback (host->note_fallback). The experts still
 *    run on the device either way; only the H2D copy is slower.
 * The fill contract:
 *  - slot_for_write(slot) hands out the STAGING buffer (never the device slot)
 *    and remembers the slot;
 *  - commit_slot(slot, bytes) refuses any slot other than the one staged, then
 *    copies staging -> device slot (copy_h2d) and synchronizes, so the slot
 *    holds the bytes when it returns;
 *  - slot_for_read(slot) is the device slot.
 * publish(slot, src, bytes) (ABI 1.4, the streamer's host tier as src)
 * copies src straight into the device slot with the backend's
 * copy_h2d_async when it declares copy.h2d_async PRESENT (queued with the
 * ops, no synchronize: the ops after it read the slot, the ops before it
 * have read the old bytes by then), else with copy_h2d; quiesce()
 * synchronizes the backend, after which every publish's source is free.
 * begin_ahead / publish_ahead / join_ahead (ABI 1.5, the streamer's
 * prefetch) use the backend's second copy queue (copy.h2d_ahead: fork,
 * copies, join), else publish in order with a noted fallback.
 * It requires the backend's memory_probe: its arena is sized from the probed
 * total at configuration time (residency.c), so a backend without a probe is
 * refused there, by name, before anything is allocated.
 * If any acquisition in create fails, everything acquired so far is released
 * before the error returns.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vt/plugin_util.h"
#include "vt/store.h"

#define SLOT_ALIGN 256u

struct vt_store {
    const vt_host_api *host;
    const vt_backend *be;
    uint64_t n_slots, slot_bytes;
    vt_store_layout layout; /* the slots' classes in the arena */
    uint8_t *arena;        /* device memory */
    void *staging;         /* host, slot_bytes */
    int staging_pinned;    /* 1: host_alloc_pinned, budget reserved; 0: malloc */
    uint64_t staged;       /* slot handed out by slot_for_write; UINT64_MAX: none */
    int async_copy;        /* backend declares copy.h2d_async PRESENT */
    int ahead_copy;        /* backend declares copy.h2d_ahead PRESENT (ABI 1.5) */
    int ahead_noted;       /* the in-order fallback of the ahead publishes was noted */
    vt_h2d_copy *ahead;    /* publish_ahead's copies for the backend */
    uint32_t n_ahead_cap;
};

static const uint32_t device_required[] = {VT_CAP_MEMORY_PROBE};

static int cap_present(const vt_backend_api *a, uint32_t id)
{
    for (uint32_t i = 0; i < a->n_caps; i++)
        if (a->caps[i].id == id) return a->caps[i].state == VT_CAP_PRESENT;
    return 0;
}


static const char *human(uint64_t b, char *buf, size_t cap)
{
    return vt_format_bytes(b, 0, buf, cap);
}

static vt_status sd_footprint(const vt_store_params *p, vt_store_footprint *out)
{
    vt_store_layout l;
    out->device_bytes = vt_store_layout_init(p, SLOT_ALIGN, &l) ? UINT64_MAX : l.total;
    out->host_bytes = p->n_slots ? p->slot_bytes : 0; /* one staging slot */
    return VT_OK;
}

static void sd_destroy(vt_store *s)
{
    if (!s) return;
    const vt_backend_api *a = s->be->api;
    if (s->arena) a->free(s->be->ctx, s->arena);
    if (s->staging) {
        if (s->staging_pinned) {
            a->host_free_pinned(s->be->ctx, s->staging);
            s->host->pinned_release(s->slot_bytes);
        } else {
            free(s->staging);
        }
    }
    free(s->ahead);
    free(s);
}

static vt_status sd_create(const vt_store_params *p, vt_store **out)
{
    *out = NULL;
    const vt_host_api *h = p->host;
    if (!h || !p->backend || !p->backend->api) return VT_ERR_INVALID_ARG;
    if (h->struct_size < offsetof(vt_host_api, note_fallback) + sizeof h->note_fallback) {
        h->set_error("store device: the core's host table has no pinned-memory budget (ABI 1.1)");
        return VT_ERR_ABI;
    }
    char hb[32];
    vt_store_layout layout = {0};
    if (!p->n_slots || !p->slot_bytes || vt_store_layout_init(p, SLOT_ALIGN, &layout) ||
        (uint64_t)(size_t)layout.total != layout.total) {
        h->set_error("store device: an arena of %llu slots of at most %llu bytes (%u classes) is "
                     "not allocatable", (unsigned long long)p->n_slots,
                     (unsigned long long)p->slot_bytes, layout.n_classes);
        return VT_ERR_INVALID_ARG;
    }
    const uint64_t arena_bytes = layout.total;
    vt_store *s = calloc(1, sizeof *s);
    if (!s) {
        h->set_error("store device: allocation of %zu bytes for the store failed: out of memory",
                     sizeof *s);
        return VT_ERR_OUT_OF_MEMORY;
    }
    s->host = h;
    s->be = p->backend;
    s->n_slots = p->n_slots;
    s->slot_bytes = p->slot_bytes;
    s->layout = layout;
    s->staged = UINT64_MAX;
    const vt_backend_api *a = s->be->api;
    s->async_copy = cap_present(a, VT_CAP_COPY_H2D_ASYNC) && a->copy_h2d_async;
    s->ahead_copy = a->struct_size >= offsetof(vt_backend_api, ahead_join) + sizeof(void *) &&
                    cap_present(a, VT_CAP_COPY_H2D_AHEAD) && a->ahead_fork && a->copy_h2d_ahead &&
                    a->ahead_join;
    char what[96];
    snprintf(what, sizeof what, "expert arena (%llu slots, %u size class%s)",
             (unsigned long long)s->n_slots, s->layout.n_classes,
             s->layout.n_classes > 1 ? "es" : "");
    void *arena = NULL;
    vt_status st = a->alloc(s->be->ctx, (size_t)arena_bytes, what, &arena);
    if (st != VT_OK) {
        sd_destroy(s);
        return st; /* the backend's message names the allocation and its bytes */
    }
    s->arena = arena;

    /* staging: pinned within budget, else pageable */
    if (cap_present(a, VT_CAP_PINNED_HOST_ALLOC) && h->pinned_reserve(s->slot_bytes)) {
        void *pin = NULL;
        if (a->host_alloc_pinned(s->be->ctx, (size_t)s->slot_bytes, "expert staging slot", &pin) ==
            VT_OK) {
            s->staging = pin;
            s->staging_pinned = 1;
        } else {
            h->pinned_release(s->slot_bytes);
            char why[512];
            snprintf(why, sizeof why, "store device: pinning the %s expert staging slot failed "
                     "(%s); using pageable memory: experts still run on the device, H2D copies "
                     "are slower", human(s->slot_bytes, hb, sizeof hb), h->last_error());
            h->note_fallback(why);
        }
    } else {
        char why[512];
        snprintf(why, sizeof why, "store device: the %s expert staging slot is pageable: %s; "
                 "experts still run on the device, H2D copies are slower",
                 human(s->slot_bytes, hb, sizeof hb),
                 cap_present(a, VT_CAP_PINNED_HOST_ALLOC)
                     ? "it would exceed the pinned budget (pinned_budget)"
                     : "the backend declares pinned_host_alloc ABSENT");
        h->note_fallback(why);
    }
    if (!s->staging) {
        s->staging = malloc((size_t)s->slot_bytes);
        if (!s->staging) {
            h->set_error("store device: allocation of %s (%llu bytes) for the expert staging slot "
                         "failed: out of memory", human(s->slot_bytes, hb, sizeof hb),
                         (unsigned long long)s->slot_bytes);
            sd_destroy(s);
            return VT_ERR_OUT_OF_MEMORY;
        }
    }
    h->log(VT_LOG_INFO, "store device: arena %s (%llu slots) on backend '%s', staging %s",
           human(arena_bytes, hb, sizeof hb), (unsigned long long)s->n_slots,
           s->be->name ? s->be->name : "?", s->staging_pinned ? "pinned" : "pageable");
    *out = s;
    return VT_OK;
}

static void *sd_slot_for_write(vt_store *s, uint64_t slot)
{
    if (slot >= s->n_slots) {
        s->host->set_error("store device: slot %llu is out of range (%llu slots)",
                           (unsigned long long)slot, (unsigned long long)s->n_slots);
        return NULL;
    }
    s->staged = slot;
    return s->staging;
}

static vt_status sd_commit_slot(vt_store *s, uint64_t slot, uint64_t bytes)
{
    if (slot != s->staged) {
        if (s->staged == UINT64_MAX)
            s->host->set_error("store device: commit_slot(%llu) but no slot is staged",
                               (unsigned long long)slot);
        else
            s->host->set_error("store device: commit_slot(%llu) but the staged slot is %llu",
                               (unsigned long long)slot, (unsigned long long)s->staged);
        return VT_ERR_INVALID_ARG;
    }
    s->staged = UINT64_MAX;
    uint64_t cap;
    const uint64_t off = vt_store_slot_offset(&s->layout, slot, &cap);
    if (bytes > cap) {
        s->host->set_error("store device: commit of %llu bytes into slot %llu of %llu bytes",
                           (unsigned long long)bytes, (unsigned long long)slot,
                           (unsigned long long)cap);
        return VT_ERR_INVALID_ARG;
    }
    const vt_backend_api *a = s->be->api;
    vt_status st = a->copy_h2d(s->be->ctx, s->arena + off, s->staging, (size_t)bytes);
    if (st == VT_OK) st = a->synchronize(s->be->ctx);
    return st;
}

/* Slot `slot`'s device address when it can take `bytes` from src, else NULL
 * with the error set (what: "publish", "ahead publish"). */
static uint8_t *sd_dst(vt_store *s, const char *what, uint64_t slot, const void *src,
                       uint64_t bytes)
{
    uint64_t cap = 0, off = slot < s->n_slots ? vt_store_slot_offset(&s->layout, slot, &cap) : 0;
    if (slot >= s->n_slots || bytes > cap || !src || s->staged != UINT64_MAX) {
        s->host->set_error("store device: %s of %llu bytes into slot %llu (%llu slots; this one "
                           "of %llu bytes)%s", what, (unsigned long long)bytes,
                           (unsigned long long)slot, (unsigned long long)s->n_slots,
                           (unsigned long long)cap,
                           !src ? " from a NULL source"
                           : s->staged != UINT64_MAX ? " while a slot is staged" : "");
        return NULL;
    }
    return s->arena + off;
}

static vt_status sd_publish(vt_store *s, uint64_t slot, const void *src, uint64_t bytes)
{
    uint8_t *dst = sd_dst(s, "publish", slot, src, bytes);
    if (!dst) return VT_ERR_INVALID_ARG;
    const vt_backend_api *a = s->be->api;
    return s->async_copy ? a->copy_h2d_async(s->be->ctx, dst, src, (size_t)bytes)
                         : a->copy_h2d(s->be->ctx, dst, src, (size_t)bytes);
}

/* ABI 1.5: on the backend's second copy queue (copy.h2d_ahead), else in
 * order with the ops as publish (correct, nothing overlaps: said once). */
static vt_status sd_begin_ahead(vt_store *s)
{
    if (s->ahead_copy) return s->be->api->ahead_fork(s->be->ctx);
    if (!s->ahead_noted) {
        s->ahead_noted = 1;
        s->host->note_fallback("store device: prefetch copies run in order with the ops (the "
                               "backend has no copy.h2d_ahead): they do not overlap compute");
    }
    return VT_OK;
}

static vt_status sd_publish_ahead(vt_store *s, const vt_store_publish *p, uint32_t n)
{
    if (n && !p) {
        s->host->set_error("store device: publish_ahead of %u publishes from a NULL array", n);
        return VT_ERR_INVALID_ARG;
    }
    if (!s->ahead_copy) {
        for (uint32_t i = 0; i < n; i++) {
            vt_status st = sd_publish(s, p[i].slot, p[i].src, p[i].bytes);
            if (st != VT_OK) return st;
        }
        return VT_OK;
    }
    if (n > s->n_ahead_cap) {
        vt_h2d_copy *c = realloc(s->ahead, (size_t)n * sizeof *c);
        if (!c) {
            s->host->set_error("store device: out of memory for %u ahead copies", n);
            return VT_ERR_OUT_OF_MEMORY;
        }
        s->ahead = c;
        s->n_ahead_cap = n;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint8_t *dst = sd_dst(s, "ahead publish", p[i].slot, p[i].src, p[i].bytes);
        if (!dst) return VT_ERR_INVALID_ARG;
        s->ahead[i] = (vt_h2d_copy){.dst = dst, .src = p[i].src, .bytes = (size_t)p[i].bytes};
    }
    return s->be->api->copy_h2d_ahead(s->be->ctx, s->ahead, n);
}

static vt_status sd_join_ahead(vt_store *s)
{
    return s->ahead_copy ? s->be->api->ahead_join(s->be->ctx) : VT_OK;
}

static vt_status sd_quiesce(vt_store *s)
{
    return s->be->api->synchronize(s->be->ctx);
}

static const void *sd_slot_for_read(vt_store *s, uint64_t slot)
{
    if (slot >= s->n_slots) {
        s->host->set_error("store device: slot %llu is out of range (%llu slots)",
                           (unsigned long long)slot, (unsigned long long)s->n_slots);
        return NULL;
    }
    uint64_t cap;
    return s->arena + vt_store_slot_offset(&s->layout, slot, &cap);
}

static const vt_store_api device_store_api = {
    .struct_size = sizeof(vt_store_api),
    .required_caps = device_required,
    .n_required_caps = 1,
    .footprint = sd_footprint,
    .create = sd_create,
    .destroy = sd_destroy,
    .slot_for_write = sd_slot_for_write,
    .commit_slot = sd_commit_slot,
    .slot_for_read = sd_slot_for_read,
    .publish = sd_publish,
    .quiesce = sd_quiesce,
    .begin_ahead = sd_begin_ahead,
    .publish_ahead = sd_publish_ahead,
    .join_ahead = sd_join_ahead,
};

static const vt_plugin_desc device_store_desc = {
    .struct_size = sizeof(vt_plugin_desc),
    .abi_major = VT_ABI_MAJOR,
    .abi_minor = VT_ABI_MINOR,
    .kind = VT_PLUGIN_STORE,
    .name = "device",
    .version = "0.1.0",
    .description = "expert slot arena in device memory (filled from the host tier or the staging ring)",
    .table = &device_store_api,
};

VT_PLUGIN_EXPORT const vt_plugin_desc *vt_plugin_entry(void);
VT_PLUGIN_EXPORT const vt_plugin_desc *vt_plugin_entry(void) { return &device_store_desc; }
