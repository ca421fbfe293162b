/*
 * expert_streamer.c - the expert streamer (expert_streamer.h): key -> slot
 * tables, one LRU over all layers, the fill contract with its failure path,
 * per-layer counters, pread / O_DIRECT I/O.
 */
#include "expert_streamer.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "error.h"

#define NO_SLOT UINT64_MAX
#define DIRECT_ALIGN 4096u
#define MAX_MATRICES 8

typedef struct stack {
    const vt_gguf_tensor *t; /* NULL: not registered */
    uint64_t n_expert;
    uint64_t slice_bytes;
    uint64_t *slot_of;       /* [n_expert]: slot holding the slice, or NO_SLOT */
} stack;

typedef struct slot_info {
    uint32_t layer, matrix, expert;
    int used;
    uint64_t batch;          /* last batch that acquired it */
    uint64_t prev, next;     /* LRU links (used slots); free list uses next */
} slot_info;

struct vt_expert_streamer {
    vt_streamer_params p;
    stack *stacks;           /* [n_layer][MAX_MATRICES] */
    uint32_t *n_matrices;    /* [n_layer] */
    slot_info *slots;        /* [n_slots] */
    uint64_t lru_head, lru_tail; /* head = most recently used */
    uint64_t free_head;
    uint64_t n_used;
    uint64_t batch;
    vt_expert_stats *stats;  /* [n_layer] */
    int *fds;                /* [n_shards] */
    int direct;
    uint8_t *bounce;         /* O_DIRECT staging, aligned */
    size_t bounce_bytes;
    vt_streamer_read_fn read_fn;
    void *read_ctx;
};

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static ssize_t default_read(void *ctx, int fd, void *buf, size_t n, off_t off)
{
    (void)ctx;
    return pread(fd, buf, n, off);
}

/* ------------------------------------------------------------ lifecycle */

void vt_streamer_destroy(vt_expert_streamer *s)
{
    if (!s) return;
    if (s->stacks)
        for (uint64_t i = 0; i < (uint64_t)s->p.n_layer * MAX_MATRICES; i++) free(s->stacks[i].slot_of);
    if (s->fds)
        for (uint32_t k = 0; k < vt_gguf_n_shards(s->p.gguf); k++)
            if (s->fds[k] >= 0) close(s->fds[k]);
    free(s->fds);
    free(s->stacks);
    free(s->n_matrices);
    free(s->slots);
    free(s->stats);
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
    s->slots = (uint64_t)(size_t)p->n_slots == p->n_slots ? calloc(p->n_slots, sizeof *s->slots) : NULL;
    if (!s->stacks || !s->n_matrices || !s->stats || !s->slots) {
        vt_set_error("out of memory: expert streamer tables for %" PRIu64 " slots and %u layers "
                     "(%" PRIu64 " bytes)", p->n_slots, p->n_layer,
                     p->n_slots * sizeof *s->slots + n_stacks * sizeof *s->stacks);
        vt_streamer_destroy(s);
        return VT_ERR_OUT_OF_MEMORY;
    }
    for (uint64_t i = 0; i < p->n_slots; i++) s->slots[i].next = i + 1 < p->n_slots ? i + 1 : NO_SLOT;
    s->free_head = 0;
    s->lru_head = s->lru_tail = NO_SLOT;
    vt_status st = open_shards(s);
    if (st != VT_OK) {
        vt_streamer_destroy(s);
        return st;
    }
    *out = s;
    return VT_OK;
}

/* ------------------------------------------------------------ registry of stacks */

static stack *stack_at(const vt_expert_streamer *s, uint32_t layer, uint32_t matrix)
{
    return &s->stacks[(uint64_t)layer * MAX_MATRICES + matrix];
}

vt_status vt_streamer_register(vt_expert_streamer *s, uint32_t layer, uint32_t matrix,
                               const vt_gguf_tensor *t)
{
    if (!s || !t) {
        vt_set_error("expert streamer: register: NULL argument");
        return VT_ERR_INVALID_ARG;
    }
    if (layer >= s->p.n_layer || matrix >= MAX_MATRICES) {
        vt_set_error("expert streamer: register '%s': layer %u / matrix %u out of range "
                     "(%u layers, %d matrices)", t->name, layer, matrix, s->p.n_layer, MAX_MATRICES);
        return VT_ERR_INVALID_ARG;
    }
    if (matrix != s->n_matrices[layer]) {
        vt_set_error("expert streamer: register '%s' as matrix %u of layer %u, but the next "
                     "matrix of that layer is %u (registered in order, once each)", t->name,
                     matrix, layer, s->n_matrices[layer]);
        return VT_ERR_INVALID_ARG;
    }
    uint64_t n_exp = t->n_dims >= 3 && t->ne[2] > 0 ? (uint64_t)t->ne[2] : 0;
    if (!n_exp || t->nbytes % n_exp) {
        vt_set_error("expert streamer: '%s' is not a stack of experts (ne[2] = %" PRId64
                     ", %" PRIu64 " bytes)", t->name, t->ne[2], t->nbytes);
        return VT_ERR_INVALID_ARG;
    }
    uint64_t slice = t->nbytes / n_exp;
    if (slice > s->p.slot_bytes) {
        vt_set_error("expert streamer: one expert of '%s' is %" PRIu64 " bytes, larger than a "
                     "slot (%" PRIu64 " bytes)", t->name, slice, s->p.slot_bytes);
        return VT_ERR_RANGE;
    }
    /* the O_DIRECT bounce buffer first: nothing is registered if it fails */
    if (s->direct && slice > s->bounce_bytes) {
        size_t b = (size_t)((slice + 2 * DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN);
        uint8_t *nb = aligned_alloc(DIRECT_ALIGN, b);
        if (!nb) {
            vt_set_error("out of memory: O_DIRECT bounce buffer (%zu bytes)", b);
            return VT_ERR_OUT_OF_MEMORY;
        }
        free(s->bounce);
        s->bounce = nb;
        s->bounce_bytes = b - DIRECT_ALIGN;
    }
    stack *k = stack_at(s, layer, matrix);
    k->slot_of = malloc(n_exp * sizeof *k->slot_of);
    if (!k->slot_of) {
        vt_set_error("out of memory: expert streamer key table for '%s' (%" PRIu64 " bytes)",
                     t->name, n_exp * (uint64_t)sizeof *k->slot_of);
        return VT_ERR_OUT_OF_MEMORY;
    }
    for (uint64_t e = 0; e < n_exp; e++) k->slot_of[e] = NO_SLOT;
    k->t = t;
    k->n_expert = n_exp;
    k->slice_bytes = slice;
    s->n_matrices[layer]++;
    return VT_OK;
}

/* ------------------------------------------------------------ LRU */

static void lru_unlink(vt_expert_streamer *s, uint64_t i)
{
    slot_info *x = &s->slots[i];
    if (x->prev != NO_SLOT) s->slots[x->prev].next = x->next;
    else s->lru_head = x->next;
    if (x->next != NO_SLOT) s->slots[x->next].prev = x->prev;
    else s->lru_tail = x->prev;
}

static void lru_push_front(vt_expert_streamer *s, uint64_t i)
{
    slot_info *x = &s->slots[i];
    x->prev = NO_SLOT;
    x->next = s->lru_head;
    if (s->lru_head != NO_SLOT) s->slots[s->lru_head].prev = i;
    s->lru_head = i;
    if (s->lru_tail == NO_SLOT) s->lru_tail = i;
}

/* A slot for a new key: a free one, else the least recently used one not in
 * the current batch (evicted). NO_SLOT when every slot is pinned by the batch. */
static uint64_t take_slot(vt_expert_streamer *s)
{
    if (s->free_head != NO_SLOT) {
        uint64_t i = s->free_head;
        s->free_head = s->slots[i].next;
        return i;
    }
    for (uint64_t i = s->lru_tail; i != NO_SLOT; i = s->slots[i].prev) {
        slot_info *x = &s->slots[i];
        if (x->batch == s->batch) continue;
        lru_unlink(s, i);
        stack_at(s, x->layer, x->matrix)->slot_of[x->expert] = NO_SLOT;
        x->used = 0;
        s->n_used--;
        s->stats[x->layer].evictions++;
        return i;
    }
    return NO_SLOT;
}

static void give_back(vt_expert_streamer *s, uint64_t i)
{
    s->slots[i].used = 0;
    s->slots[i].next = s->free_head;
    s->free_head = i;
}

/* ------------------------------------------------------------ fill */

static const char *matrix_label(const stack *k) { return k->t->name; }

/* Leave O_DIRECT: reopen every shard for buffered reads, with a WARN. */
static vt_status direct_off(vt_expert_streamer *s, const char *why)
{
    vt_log(VT_LOG_WARN, "expert streamer: O_DIRECT reads of %s fail (%s); falling back to "
           "buffered pread (the page cache will cache experts too)",
           vt_gguf_shard_path(s->p.gguf, 0), why);
    s->direct = 0;
    for (uint32_t k = 0; k < vt_gguf_n_shards(s->p.gguf); k++) {
        int fd = open(vt_gguf_shard_path(s->p.gguf, k), O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            vt_set_error("expert streamer: cannot reopen %s: %s", vt_gguf_shard_path(s->p.gguf, k),
                         strerror(errno));
            return VT_ERR_IO;
        }
        close(s->fds[k]);
        s->fds[k] = fd;
    }
    return VT_OK;
}

/* Read n bytes at off of fd into dst, through the bounce buffer when direct. */
static vt_status read_slice(vt_expert_streamer *s, int fd, uint8_t *dst, uint64_t n, uint64_t off,
                            const stack *k, uint32_t expert)
{
    uint8_t *buf = dst;
    uint64_t want = n, at = off, lead = 0;
    if (s->direct) {
        lead = off % DIRECT_ALIGN;
        at = off - lead;
        want = (lead + n + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN;
        buf = s->bounce;
    }
    uint64_t done = 0;
    while (done < want) {
        if (s->direct && done >= lead + n) break; /* the slice is in; the rest is alignment */
        ssize_t r = s->read_fn(s->read_ctx, fd, buf + done, (size_t)(want - done), (off_t)(at + done));
        if (r < 0) {
            if (errno == EINTR) continue;
            if (s->direct && errno == EINVAL && done == 0) {
                /* the file system took O_DIRECT at open but refuses the read */
                vt_status st = direct_off(s, strerror(errno));
                if (st != VT_OK) return st;
                return read_slice(s, s->fds[k->t->shard], dst, n, off, k, expert);
            }
            vt_set_error("expert streamer: reading expert %u of %s (%" PRIu64 " bytes at offset %"
                         PRIu64 " of %s) failed: %s", expert, matrix_label(k), n, off,
                         vt_gguf_shard_path(s->p.gguf, k->t->shard), strerror(errno));
            return VT_ERR_IO;
        }
        if (r == 0) {
            /* end of file: with O_DIRECT the rounded-up tail may pass it legitimately */
            if (s->direct && done >= lead + n) break;
            vt_set_error("expert streamer: reading expert %u of %s: the file ends after %" PRIu64
                         " of %" PRIu64 " bytes at offset %" PRIu64 " of %s (truncated?)",
                         expert, matrix_label(k), done > lead ? done - lead : 0, n, off,
                         vt_gguf_shard_path(s->p.gguf, k->t->shard));
            return VT_ERR_IO;
        }
        done += (uint64_t)r;
    }
    if (s->direct) memcpy(dst, s->bounce + lead, (size_t)n);
    return VT_OK;
}

/* Fill key (layer, matrix, expert) into a fresh slot; on any failure the slot
 * is returned to the free list and the key stays absent. */
static vt_status fill(vt_expert_streamer *s, uint32_t layer, uint32_t matrix, uint32_t expert,
                      uint64_t *slot_out)
{
    stack *k = stack_at(s, layer, matrix);
    uint64_t slot = take_slot(s);
    if (slot == NO_SLOT) {
        vt_set_error("expert streamer: the arena's %" PRIu64 " slots are all needed by this "
                     "batch of layer %u; it cannot also hold expert %u of %s", s->p.n_slots,
                     layer, expert, k->t->name);
        return VT_ERR_RANGE;
    }
    double t0 = now_seconds();
    vt_status st;
    uint8_t *dst = s->p.store_api->slot_for_write(s->p.store, slot);
    if (!dst) {
        vt_error_prefix("expert streamer: slot_for_write(%" PRIu64 ") for expert %u of %s", slot,
                        expert, k->t->name);
        st = VT_ERR_INTERNAL;
    } else {
        uint64_t off = k->t->file_offset + (uint64_t)expert * k->slice_bytes;
        st = read_slice(s, s->fds[k->t->shard], dst, k->slice_bytes, off, k, expert);
        if (st == VT_OK) {
            double tc = now_seconds();
            st = s->p.store_api->commit_slot(s->p.store, slot, k->slice_bytes);
            s->stats[layer].commit_seconds += now_seconds() - tc;
            if (st != VT_OK)
                vt_error_prefix("expert streamer: commit of expert %u of %s (layer %u) into slot %"
                                PRIu64, expert, k->t->name, layer, slot);
        }
    }
    s->stats[layer].fill_seconds += now_seconds() - t0;
    if (st != VT_OK) {
        give_back(s, slot); /* invalidate before the error returns */
        s->stats[layer].fill_errors++;
        return st;
    }
    slot_info *x = &s->slots[slot];
    x->layer = layer;
    x->matrix = matrix;
    x->expert = expert;
    x->used = 1;
    x->batch = s->batch;
    lru_push_front(s, slot);
    k->slot_of[expert] = slot;
    s->n_used++;
    s->stats[layer].misses++;
    s->stats[layer].bytes_filled += k->slice_bytes;
    *slot_out = slot;
    return VT_OK;
}

vt_status vt_streamer_acquire(vt_expert_streamer *s, uint32_t layer, const int32_t *ids,
                              uint32_t n, const void **out)
{
    if (!s || (n && (!ids || !out))) {
        vt_set_error("expert streamer: acquire: NULL argument");
        return VT_ERR_INVALID_ARG;
    }
    if (layer >= s->p.n_layer || !s->n_matrices[layer]) {
        vt_set_error("expert streamer: layer %u has no registered expert stacks", layer);
        return VT_ERR_INVALID_ARG;
    }
    const uint32_t M = s->n_matrices[layer];
    if ((uint64_t)n * M > s->p.n_slots) {
        vt_set_error("expert streamer: layer %u needs %u experts x %u matrices = %" PRIu64
                     " slots at once, the arena has %" PRIu64, layer, n, M, (uint64_t)n * M,
                     s->p.n_slots);
        return VT_ERR_RANGE;
    }
    s->batch++;
    for (uint32_t i = 0; i < n; i++) {
        for (uint32_t m = 0; m < M; m++) {
            stack *k = stack_at(s, layer, m);
            if (ids[i] < 0 || (uint64_t)ids[i] >= k->n_expert) {
                vt_set_error("expert streamer: expert id %d of layer %u is out of range (%" PRIu64
                             " experts in %s)", ids[i], layer, k->n_expert, k->t->name);
                return VT_ERR_RANGE;
            }
            uint64_t slot = k->slot_of[ids[i]];
            if (slot != NO_SLOT) {
                slot_info *x = &s->slots[slot];
                if (x->batch != s->batch) s->stats[layer].hits++; /* a repeat in one batch is one use */
                x->batch = s->batch;
                lru_unlink(s, slot);
                lru_push_front(s, slot);
            } else {
                vt_status st = fill(s, layer, m, (uint32_t)ids[i], &slot);
                if (st != VT_OK) return st;
            }
            const void *p = s->p.store_api->slot_for_read(s->p.store, slot);
            if (!p) {
                vt_error_prefix("expert streamer: slot_for_read(%" PRIu64 ")", slot);
                return VT_ERR_INTERNAL;
            }
            out[(uint64_t)i * M + m] = p;
        }
    }
    return VT_OK;
}

/* ------------------------------------------------------------ counters */

vt_status vt_streamer_stats(const vt_expert_streamer *s, int32_t layer, vt_expert_stats *out)
{
    if (!s || !out) return VT_ERR_INVALID_ARG;
    memset(out, 0, sizeof *out);
    if (layer >= 0) {
        if ((uint32_t)layer >= s->p.n_layer) {
            vt_set_error("expert streamer: stats of layer %d: only %u layers", layer, s->p.n_layer);
            return VT_ERR_RANGE;
        }
        *out = s->stats[layer];
        return VT_OK;
    }
    for (uint32_t l = 0; l < s->p.n_layer; l++) {
        out->hits += s->stats[l].hits;
        out->misses += s->stats[l].misses;
        out->bytes_filled += s->stats[l].bytes_filled;
        out->evictions += s->stats[l].evictions;
        out->fill_errors += s->stats[l].fill_errors;
        out->fill_seconds += s->stats[l].fill_seconds;
        out->commit_seconds += s->stats[l].commit_seconds;
    }
    return VT_OK;
}

uint64_t vt_streamer_n_slots(const vt_expert_streamer *s) { return s->p.n_slots; }
uint64_t vt_streamer_n_resident(const vt_expert_streamer *s) { return s->n_used; }
uint32_t vt_streamer_n_layers(const vt_expert_streamer *s) { return s->p.n_layer; }
int vt_streamer_io_direct(const vt_expert_streamer *s) { return s->direct; }

int vt_streamer_is_resident(const vt_expert_streamer *s, uint32_t layer, uint32_t matrix,
                            uint32_t expert)
{
    if (layer >= s->p.n_layer || matrix >= s->n_matrices[layer]) return 0;
    const stack *k = stack_at(s, layer, matrix);
    return expert < k->n_expert && k->slot_of[expert] != NO_SLOT;
}

void vt_streamer_set_reader(vt_expert_streamer *s, vt_streamer_read_fn fn, void *ctx)
{
    s->read_fn = fn ? fn : default_read;
    s->read_ctx = ctx;
}
