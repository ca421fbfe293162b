/*
 * expert_streamer_create.c - the expert streamer's lifecycle
 * (expert_streamer.h): create (the device tier's slots from the store, the
 * pinned or plain host tier, the reader pool, the shards' file descriptors
 * and their O_DIRECT twins), the file reader hook, and destroy. The rest of
 * the streamer is in expert_streamer.c and its siblings.
 */
#include "streamer_tables.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "capabilities.h"
#include "registry.h"
#include "vt/plugin_util.h"

static ssize_t default_read(void *ctx, int fd, void *buf, size_t n, off_t off)
{
    (void)ctx;
    return pread(fd, buf, n, off);
}

void vt_streamer_set_reader(vt_expert_streamer *s, vt_streamer_read_fn fn, void *ctx)
{
    s->read_fn = fn ? fn : default_read;
    s->read_ctx = ctx;
}

/* ------------------------------------------------------------ lifecycle */

/* n slots in n_cls classes (first: class c is slots first[c] .. first[c+1]-1;
 * NULL: one class of every slot), all free. */
static vt_status tier_init(tier *t, uint64_t n, uint32_t n_cls, const uint64_t *first,
                           const char *what)
{
    t->n = n;
    t->lru_head = t->lru_tail = NO_SLOT;
    t->n_cls = first ? n_cls : 1;
    for (uint32_t c = 0; c <= t->n_cls; c++) t->first[c] = first ? first[c] : c ? n : 0;
    for (uint32_t c = 0; c < t->n_cls; c++)
        t->free_head[c] = t->first[c] < t->first[c + 1] ? t->first[c] : NO_SLOT;
    t->n_used = 0;
    if (!n) return VT_OK;
    t->slots = (uint64_t)(size_t)n == n ? calloc((size_t)n, sizeof *t->slots) : NULL;
    if (!t->slots) {
        vt_set_error("out of memory: expert streamer %s table for %" PRIu64 " slots (%" PRIu64
                     " bytes)", what, n, n * (uint64_t)sizeof *t->slots);
        return VT_ERR_OUT_OF_MEMORY;
    }
    for (uint32_t c = 0; c < t->n_cls; c++)
        for (uint64_t i = t->first[c]; i < t->first[c + 1]; i++) {
            t->slots[i].cls = c;
            t->slots[i].next = i + 1 < t->first[c + 1] ? i + 1 : NO_SLOT;
        }
    return VT_OK;
}

static void free_host_tier(vt_expert_streamer *s)
{
    const vt_backend *be = s->p.backend;
    for (uint32_t c = 0; c < s->n_chunks; c++) {
        host_chunk *k = &s->chunks[c];
        if (k->pinned) {
            be->api->host_free_pinned(be->ctx, k->base);
            vt_host_table()->pinned_release(k->bytes);
        } else {
            free(k->base);
        }
    }
    free(s->chunks);
    free(s->host_addr);
    free(s->hdoff);
    s->hdoff = NULL;
    free(s->host.slots);
    s->chunks = NULL;
    s->n_chunks = 0;
    s->host_addr = NULL;
    s->host.slots = NULL;
}

static int backend_can_pin(const vt_backend *be)
{
    if (!be || !be->api || !be->api->host_alloc_pinned) return 0;
    for (uint32_t i = 0; i < be->api->n_caps; i++)
        if (be->api->caps[i].id == VT_CAP_PINNED_HOST_ALLOC)
            return be->api->caps[i].state == VT_CAP_PRESENT;
    return 0;
}

/* The host tier's memory: chunks of about HOST_CHUNK_BYTES, pinned through the
 * backend while the pinned budget lasts, pageable (page-aligned malloc) beyond
 * it, with one noted fallback when the backend could have pinned them. */
static vt_status alloc_host_tier(vt_expert_streamer *s)
{
    /* the staging ring's slots follow the host tier's in the same chunks */
    const uint64_t n = s->p.n_host_slots + s->n_ring, stride = s->p.host_slot_bytes;
    vt_status st = tier_init(&s->host, s->p.n_host_slots, 1, NULL, "host tier");
    if (st != VT_OK || !n) return st;
    uint64_t per_chunk = HOST_CHUNK_BYTES / stride ? HOST_CHUNK_BYTES / stride : 1;
    uint64_t n_chunks = (n + per_chunk - 1) / per_chunk;
    s->host_addr = calloc((size_t)n, sizeof *s->host_addr);
    s->hdoff = calloc((size_t)n, sizeof *s->hdoff);
    s->chunks = calloc((size_t)n_chunks, sizeof *s->chunks);
    if (!s->host_addr || !s->hdoff || !s->chunks) {
        vt_set_error("out of memory: the host tier's tables (%" PRIu64 " slots)", n);
        return VT_ERR_OUT_OF_MEMORY;
    }
    const vt_host_api *H = vt_host_table();
    const vt_backend *be = s->p.backend;
    int can_pin = backend_can_pin(be);
    uint64_t slot = 0;
    for (uint64_t c = 0; c < n_chunks; c++) {
        uint64_t k = n - slot < per_chunk ? n - slot : per_chunk;
        uint64_t bytes = k * stride;
        host_chunk *ch = &s->chunks[c];
        void *p = NULL;
        if (can_pin && H->pinned_reserve(bytes)) {
            if (be->api->host_alloc_pinned(be->ctx, (size_t)bytes, "expert host tier", &p) == VT_OK) {
                ch->pinned = 1;
            } else {
                H->pinned_release(bytes);
                p = NULL;
            }
        }
        if (!p) {
            p = aligned_alloc(DIRECT_ALIGN, (size_t)((bytes + DIRECT_ALIGN - 1) / DIRECT_ALIGN *
                                                     DIRECT_ALIGN));
            if (!p) {
                char b1[32], b2[32];
                vt_set_error("out of memory: the expert host tier and staging ring (%" PRIu64
                             " slots, %s) could not be allocated after %s; lower "
                             "expert_cache.host_arena or expert_cache.staging", n,
                             vt_format_bytes(n * stride, 0, b1, sizeof b1),
                             vt_format_bytes(slot * stride, 0, b2, sizeof b2));
                return VT_ERR_OUT_OF_MEMORY;
            }
        }
        ch->base = p;
        ch->bytes = bytes;
        s->n_chunks = (uint32_t)c + 1;
        if (ch->pinned) s->host_pinned_bytes += bytes;
        else s->host_pageable_bytes += bytes;
        for (uint64_t j = 0; j < k; j++) s->host_addr[slot + j] = (uint8_t *)p + j * stride;
        slot += k;
    }
    if (can_pin && s->host_pageable_bytes) {
        char why[384], b1[32], b2[32];
        snprintf(why, sizeof why, "expert streamer: %s of the %s host tier / staging ring is "
                 "pageable (it exceeds "
                 "the pinned budget, pinned_budget); experts still stream, H2D copies from it are "
                 "slower", vt_format_bytes(s->host_pageable_bytes, 0, b1, sizeof b1),
                 vt_format_bytes(n * stride, 0, b2, sizeof b2));
        H->note_fallback(why);
    }
    return VT_OK;
}

void vt_streamer_destroy(vt_expert_streamer *s)
{
    if (!s) return;
    if (s->pub_pending && s->p.store_api->quiesce(s->p.store) != VT_OK)
        vt_log(VT_LOG_WARN, "expert streamer: waiting for the last host-tier copies failed: %s",
               vt_last_error());
    vt_reader_pool_destroy(s->pool);
    free_host_tier(s);
    free(s->ring_gen);
    free(s->pend);
    free(s->pend_read);
    free(s->ahead_pub);
    free(s->ahead_key);
    if (s->stacks)
        for (uint64_t i = 0; i < (uint64_t)s->p.n_layer * MAX_MATRICES; i++) {
            free(s->stacks[i].slot_of);
            free(s->stacks[i].hslot_of);
            free(s->stacks[i].freq);
        }
    if (s->fds)
        for (uint32_t k = 0; k < vt_gguf_n_shards(s->p.gguf); k++)
            if (s->fds[k] >= 0) close(s->fds[k]);
    free(s->fds);
    free(s->stacks);
    free(s->n_matrices);
    free(s->dev.slots);
    free(s->dev.lhead);
    free(s->dev.ltail);
    free(s->dev.lcount);
    free(s->visits);
    free(s->stats);
    free(s->hstats);
    free(s->trace.layer);
    free(s->trace.phase);
    free(s->trace.off);
    free(s->trace.ids);
    free(s->bounce);
    free(s);
}

static vt_status open_shards(vt_expert_streamer *s)
{
    uint32_t n = vt_gguf_n_shards(s->p.gguf);
    s->fds = malloc(n * sizeof *s->fds);
    if (!s->fds) {
        vt_set_error("out of memory: expert streamer shard table (%zu bytes)", n * sizeof *s->fds);
        return VT_ERR_OUT_OF_MEMORY;
    }
    for (uint32_t k = 0; k < n; k++) s->fds[k] = -1;
    s->direct = s->p.io_direct;
    for (uint32_t k = 0; k < n; k++) {
        const char *path = vt_gguf_shard_path(s->p.gguf, k);
        int fd = -1;
        if (s->direct) {
            fd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
            if (fd < 0) {
                vt_log(VT_LOG_WARN, "expert streamer: %s cannot be opened with O_DIRECT (%s); "
                       "falling back to buffered pread (the page cache will cache experts too)",
                       path, strerror(errno));
                s->direct = 0;
                for (uint32_t j = 0; j < k; j++) {
                    close(s->fds[j]);
                    s->fds[j] = open(vt_gguf_shard_path(s->p.gguf, j), O_RDONLY | O_CLOEXEC);
                    if (s->fds[j] < 0) {
                        vt_set_error("expert streamer: cannot open %s: %s",
                                     vt_gguf_shard_path(s->p.gguf, j), strerror(errno));
                        return VT_ERR_IO;
                    }
                }
            }
        }
        if (fd < 0) fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            vt_set_error("expert streamer: cannot open %s: %s", path, strerror(errno));
            return VT_ERR_IO;
        }
        s->fds[k] = fd;
    }
    return VT_OK;
}

vt_status vt_streamer_create(const vt_streamer_params *p, vt_expert_streamer **out)
{
    *out = NULL;
    if (!p || !p->gguf || !p->store_api || !p->store || !p->n_slots || !p->slot_bytes ||
        !p->n_layer) {
        vt_set_error("expert streamer: gguf, store, n_slots, slot_bytes and n_layer are required");
        return VT_ERR_INVALID_ARG;
    }
    vt_expert_streamer *s = calloc(1, sizeof *s);
    if (!s) {
        vt_set_error("out of memory: expert streamer (%zu bytes)", sizeof *s);
        return VT_ERR_OUT_OF_MEMORY;
    }
    s->p = *p;
    s->read_fn = default_read;
    uint64_t n_stacks = (uint64_t)p->n_layer * MAX_MATRICES;
    s->stacks = calloc(n_stacks, sizeof *s->stacks);
    s->n_matrices = calloc(p->n_layer, sizeof *s->n_matrices);
    s->stats = calloc(p->n_layer, sizeof *s->stats);
    s->hstats = calloc(p->n_layer, sizeof *s->hstats);
    if (!s->stacks || !s->n_matrices || !s->stats || !s->hstats) {
        vt_set_error("out of memory: expert streamer tables for %u layers (%" PRIu64 " bytes)",
                     p->n_layer, n_stacks * (uint64_t)sizeof *s->stacks);
        vt_streamer_destroy(s);
        return VT_ERR_OUT_OF_MEMORY;
    }
    const vt_store_api *sa = p->store_api;
    s->publish = sa->struct_size >= VT_STORE_API_SIZE_1_4 && sa->publish && sa->quiesce;
    if (p->prefetch) {
        const char *why = NULL;
        if (!p->n_host_slots)
            why = "it copies from the host tier, and there is none (expert_cache.host_arena is 0, "
                  "or auto under the host store)";
        else if (!s->publish || sa->struct_size < VT_STORE_API_SIZE_1_5 || !sa->begin_ahead ||
                 !sa->publish_ahead || !sa->join_ahead)
            why = "the store has no begin_ahead/publish_ahead/join_ahead (store ABI 1.5)";
        else if (p->prefetch == VT_STREAMER_PREFETCH_AUTO &&
                 !(p->backend && p->backend->api &&
                   vt_util_backend_has(p->backend->api, VT_CAP_COPY_H2D_AHEAD,
                                       offsetof(vt_backend_api, ahead_join) + sizeof(void *))))
            why = "the backend has no second copy queue (copy.h2d_ahead), so the copies would "
                  "not overlap compute";
        if (why && p->prefetch == VT_STREAMER_PREFETCH_AUTO) {
            vt_log(VT_LOG_INFO, "expert streamer: expert_cache.prefetch: auto is off: %s", why);
            why = NULL;
        } else if (!why) {
            s->ahead_ok = 1;
        }
        if (why) {
            vt_set_error("expert streamer: expert_cache.prefetch: next-layer cannot run: %s", why);
            vt_streamer_destroy(s);
            return VT_ERR_UNSUPPORTED;
        }
    }
    if (p->n_host_slots > UINT32_MAX) {
        vt_set_error("expert streamer: a host tier of %" PRIu64 " slots is more than 2^32",
                     p->n_host_slots);
        vt_streamer_destroy(s);
        return VT_ERR_RANGE;
    }
    /* the staging ring: only without a host tier and with the store's publish */
    s->n_ring = !p->n_host_slots && s->publish ? p->n_ring_slots : 0;
    if (s->n_ring == 1) s->n_ring = 2; /* one half read while the other is copied */
    if ((p->n_host_slots || s->n_ring) && p->host_slot_bytes < p->slot_bytes) {
        vt_set_error("expert streamer: host-tier slots of %" PRIu64 " bytes are smaller than the "
                     "store's slots (%" PRIu64 " bytes)", p->host_slot_bytes, p->slot_bytes);
        vt_streamer_destroy(s);
        return VT_ERR_INVALID_ARG;
    }
    /* the device tier's slot classes, checked as the store checks them */
    vt_store_params lp = {.struct_size = sizeof lp, .slot_bytes = p->slot_bytes,
                          .n_slots = p->n_slots, .n_classes = p->n_classes,
                          .class_slots = p->class_slots, .class_bytes = p->class_bytes};
    vt_status st = VT_OK;
    if (vt_store_layout_init(&lp, 1, &s->cls)) {
        vt_set_error("expert streamer: %u slot classes that do not lay out %" PRIu64 " slots of "
                     "at most %" PRIu64 " bytes (counts summing to n_slots, each class 1.."
                     "slot_bytes, at most %d classes)", p->n_classes, p->n_slots, p->slot_bytes,
                     VT_STORE_MAX_CLASSES);
        st = VT_ERR_INVALID_ARG;
    }
    if (st == VT_OK) st = tier_init(&s->dev, p->n_slots, s->cls.n_classes, s->cls.first, "slot");
    s->rng = 0x9e3779b97f4a7c15ull;
    if (st == VT_OK && p->policy != VT_CACHE_POLICY_LRU) {
        s->dev.lhead = malloc(p->n_layer * sizeof *s->dev.lhead);
        s->dev.ltail = malloc(p->n_layer * sizeof *s->dev.ltail);
        s->dev.lcount = calloc(p->n_layer, sizeof *s->dev.lcount);
        s->visits = calloc(p->n_layer, sizeof *s->visits);
        if (!s->dev.lhead || !s->dev.ltail || !s->dev.lcount || !s->visits) {
            vt_set_error("out of memory: expert streamer per-layer lists (%u layers)", p->n_layer);
            st = VT_ERR_OUT_OF_MEMORY;
        } else {
            for (uint32_t l = 0; l < p->n_layer; l++) s->dev.lhead[l] = s->dev.ltail[l] = NO_SLOT;
        }
    }
    if (st == VT_OK && s->n_ring) {
        s->ring_gen = malloc(s->n_ring * sizeof *s->ring_gen);
        if (!s->ring_gen) {
            vt_set_error("out of memory: the staging ring's table (%" PRIu64 " slots)", s->n_ring);
            st = VT_ERR_OUT_OF_MEMORY;
        } else {
            for (uint64_t r = 0; r < s->n_ring; r++) s->ring_gen[r] = UINT64_MAX;
        }
    }
    if (st == VT_OK) st = alloc_host_tier(s);
    if (st == VT_OK && ((p->n_readers > 1 && p->n_host_slots) || s->n_ring))
        st = vt_reader_pool_create(p->n_readers ? p->n_readers : 1, &s->pool);
    if (st == VT_OK) st = open_shards(s);
    if (st != VT_OK) {
        vt_streamer_destroy(s);
        return st;
    }
    *out = s;
    return VT_OK;
}
