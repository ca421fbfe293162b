/*
 * fake_store.c - a store plugin for the resolution tests: it requires its
 * backend's memory_probe (like the device store) and keeps its arena in
 * backend memory with one host staging slot. Built as "devfake".
 *   FAKE_STORE_NO_COMMIT   leave commit_slot NULL (a required function missing)
 */
#include <stdlib.h>
#include <string.h>

#include "vt/store.h"

struct vt_store {
    vt_store_params p;
    void *arena;
    void *staging;
    uint64_t staged; /* slot last handed out, UINT64_MAX: none */
};

static const uint32_t required[] = {VT_CAP_MEMORY_PROBE};

static vt_status fs_footprint(const vt_store_params *p, vt_store_footprint *out)
{
    out->device_bytes = p->slot_bytes * p->n_slots;
    out->host_bytes = p->slot_bytes;
    return VT_OK;
}

static void fs_destroy(vt_store *s)
{
    if (!s) return;
    if (s->arena) s->p.backend->api->free(s->p.backend->ctx, s->arena);
    free(s->staging);
    free(s);
}

static vt_status fs_create(const vt_store_params *p, vt_store **out)
{
    vt_store *s = calloc(1, sizeof *s);
    if (!s) return VT_ERR_OUT_OF_MEMORY;
    s->p = *p;
    s->staged = UINT64_MAX;
    vt_status st = p->backend->api->alloc(p->backend->ctx, p->slot_bytes * p->n_slots,
                                          "devfake expert arena", &s->arena);
    if (st == VT_OK && !(s->staging = malloc(p->slot_bytes ? p->slot_bytes : 1))) {
        p->host->set_error("devfake: staging of %llu bytes: out of memory",
                           (unsigned long long)p->slot_bytes);
        st = VT_ERR_OUT_OF_MEMORY;
    }
    if (st != VT_OK) {
        fs_destroy(s);
        return st;
    }
    *out = s;
    return VT_OK;
}

static void *fs_slot_for_write(vt_store *s, uint64_t slot)
{
    if (slot >= s->p.n_slots) return NULL;
    s->staged = slot;
    return s->staging;
}

static vt_status fs_commit(vt_store *s, uint64_t slot, uint64_t bytes)
{
    if (slot != s->staged || bytes > s->p.slot_bytes) return VT_ERR_INVALID_ARG;
    s->staged = UINT64_MAX;
    return s->p.backend->api->copy_h2d(s->p.backend->ctx,
                                       (char *)s->arena + slot * s->p.slot_bytes, s->staging, bytes);
}

static const void *fs_slot_for_read(vt_store *s, uint64_t slot)
{
    return slot < s->p.n_slots ? (const char *)s->arena + slot * s->p.slot_bytes : NULL;
}

static const vt_store_api table = {
    .struct_size = sizeof(vt_store_api),
    .required_caps = required,
    .n_required_caps = 1,
    .footprint = fs_footprint,
    .create = fs_create,
    .destroy = fs_destroy,
    .slot_for_write = fs_slot_for_write,
#ifndef FAKE_STORE_NO_COMMIT
    .commit_slot = fs_commit,
#endif
    .slot_for_read = fs_slot_for_read,
};

VT_PLUGIN_EXPORT const vt_plugin_desc *vt_plugin_entry(void)
{
#ifdef FAKE_STORE_NO_COMMIT
    (void)fs_commit;
#endif
    static const vt_plugin_desc d = {.struct_size = sizeof d, .abi_major = VT_ABI_MAJOR,
                                     .abi_minor = VT_ABI_MINOR, .kind = VT_PLUGIN_STORE,
                                     .name = "devfake", .version = "0.0.1",
                                     .description = "resolution test store (needs memory_probe)",
                                     .table = &table};
    return &d;
}
