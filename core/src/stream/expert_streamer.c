/*
 * expert_streamer.c - the expert streamer (expert_streamer.h): the registry
 * of expert stacks, the fill contract with its failure path (one key at a
 * time, or batched through the reader pool and the staging ring), pread /
 * O_DIRECT I/O and acquire. Its lifecycle (create, the tiers' memory, the
 * shards, destroy) is in expert_streamer_create.c, the tiers' slot lists and
 * policies in expert_streamer_slots.c, the prefetch in
 * expert_streamer_prefetch.c, counters and the trace in expert_streamer_stats.c.
 */
#include "streamer_tables.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "error.h"
#include "registry.h"

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------ registry of stacks */

static uint64_t unit_align(uint64_t n)
{
    return (n + VT_STREAMER_UNIT_ALIGN - 1) / VT_STREAMER_UNIT_ALIGN * VT_STREAMER_UNIT_ALIGN;
}

/* The smallest slot class with slots that holds `bytes` (UINT32_MAX: none). */
static uint32_t class_for(const vt_expert_streamer *s, uint64_t bytes)
{
    uint32_t cls = UINT32_MAX;
    for (uint32_t c = 0; c < s->cls.n_classes; c++)
        if (s->cls.bytes[c] >= bytes && class_slots(s, c) &&
            (cls == UINT32_MAX || s->cls.bytes[c] < s->cls.bytes[cls]))
            cls = c;
    return cls;
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
    /* whole-expert slots: matrix m > 0 joins the unit of the layer's matrix 0 */
    stack *k0 = stack_at(s, layer, 0);
    const int join = s->p.slot_unit_expert && matrix > 0;
    if (join && n_exp != k0->n_expert) {
        vt_set_error("expert streamer: '%s' has %" PRIu64 " experts, '%s' of the same layer %"
                     PRIu64 "; whole-expert slots (expert_cache.slot_unit: expert) need one "
                     "count per layer", t->name, n_exp, k0->t->name, k0->n_expert);
        return VT_ERR_INVALID_ARG;
    }
    const uint64_t key_bytes = join ? unit_align(k0->slice_bytes) + unit_align(slice)
                             : s->p.slot_unit_expert ? unit_align(slice) : slice;
    if (key_bytes > s->p.slot_bytes) {
        if (join)
            vt_set_error("expert streamer: one whole expert of layer %u is %" PRIu64 " bytes "
                         "with '%s', larger than a slot (%" PRIu64 " bytes)", layer, key_bytes,
                         t->name, s->p.slot_bytes);
        else
            vt_set_error("expert streamer: one expert of '%s' is %" PRIu64 " bytes, larger than "
                         "a slot (%" PRIu64 " bytes)", t->name, key_bytes, s->p.slot_bytes);
        return VT_ERR_RANGE;
    }
    /* its slot class: the smallest class with slots that holds a key */
    const uint32_t cls = class_for(s, key_bytes);
    if (cls == UINT32_MAX) {
        vt_set_error("expert streamer: one %s of '%s' is %" PRIu64 " bytes; no slot class "
                     "with slots holds that many", join ? "whole expert up to" : "expert",
                     t->name, key_bytes);
        return VT_ERR_RANGE;
    }
    /* the O_DIRECT bounce buffers first (one per reader; the acquiring thread
     * uses reader 0's): nothing is registered if it fails */
    if (s->direct && slice > s->bounce_bytes) {
        const size_t b = (size_t)((slice + 2 * DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN);
        const uint32_t nw = s->pool ? vt_reader_pool_size(s->pool) : 1;
        uint8_t *nb = aligned_alloc(DIRECT_ALIGN, b * nw);
        if (!nb) {
            vt_set_error("out of memory: O_DIRECT bounce buffers (%u of %zu bytes)", nw, b);
            return VT_ERR_OUT_OF_MEMORY;
        }
        free(s->bounce);
        s->bounce = nb;
        s->bounce_bytes = b - DIRECT_ALIGN;
        s->bounce_stride = b;
    }
    stack *k = stack_at(s, layer, matrix);
    if (join) { /* the unit grows; this stack only names the matrix and reads it */
        k0->sub_off[matrix] = unit_align(k0->slice_bytes);
        k0->sub_bytes[matrix] = slice;
        k0->slice_bytes = key_bytes;
        k0->cls = cls;
        k->t = t;
        k->n_expert = n_exp;
        k->slice_bytes = slice;
        s->n_matrices[layer]++;
        return VT_OK;
    }
    k->cls = cls;
    k->slot_of = malloc(n_exp * sizeof *k->slot_of);
    if (!k->slot_of) {
        vt_set_error("out of memory: expert streamer key table for '%s' (%" PRIu64 " bytes)",
                     t->name, n_exp * (uint64_t)sizeof *k->slot_of);
        return VT_ERR_OUT_OF_MEMORY;
    }
    if (s->p.policy == VT_CACHE_POLICY_LFRU) {
        k->freq = calloc(n_exp, sizeof *k->freq);
        if (!k->freq) {
            free(k->slot_of);
            k->slot_of = NULL;
            vt_set_error("out of memory: expert streamer use counts for '%s'", t->name);
            return VT_ERR_OUT_OF_MEMORY;
        }
    }
    if (s->host.n) {
        k->hslot_of = malloc(n_exp * sizeof *k->hslot_of);
        if (!k->hslot_of) {
            free(k->slot_of);
            k->slot_of = NULL;
            free(k->freq);
            k->freq = NULL;
            vt_set_error("out of memory: expert streamer host-tier key table for '%s'", t->name);
            return VT_ERR_OUT_OF_MEMORY;
        }
        for (uint64_t e = 0; e < n_exp; e++) k->hslot_of[e] = NO_SLOT;
    }
    for (uint64_t e = 0; e < n_exp; e++) k->slot_of[e] = NO_SLOT;
    k->t = t;
    k->n_expert = n_exp;
    k->slice_bytes = key_bytes;
    k->sub_off[0] = 0;
    k->sub_bytes[0] = slice;
    s->n_matrices[layer]++;
    return VT_OK;
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

/* pread into buf until want bytes are in, stopping once `enough` are (under
 * O_DIRECT the rest of the last block is alignment): the bytes read; a
 * failure sets j->err (errno), an end of file before `enough` bytes j->eof. */
static uint64_t job_pread(const vt_expert_streamer *s, read_job *j, int fd, uint8_t *buf,
                          uint64_t want, uint64_t at, uint64_t enough)
{
    uint64_t done = 0;
    while (done < want && done < enough) {
        ssize_t r = s->read_fn(s->read_ctx, fd, buf + done, (size_t)(want - done),
                               (off_t)(at + done));
        if (r < 0) {
            if (errno == EINTR) continue;
            j->err = errno ? errno : EIO;
            break;
        }
        if (r == 0) {
            j->eof = 1;
            break;
        }
        done += (uint64_t)r;
    }
    return done;
}

/* Read n bytes at file offset off of fd into dst (cap bytes there; 0: exactly
 * n), on a reader thread or the acquiring one: buffered; under O_DIRECT
 * (j->direct) in place when dst has room for the aligned blocks (*data_off:
 * where the bytes start), else through the caller's bounce buffer (then
 * copied to dst, *data_off 0). j->done: bytes of the n read. */
static void job_read(const vt_expert_streamer *s, read_job *j, int fd, uint8_t *dst, uint64_t n,
                     uint64_t off, uint64_t cap, uint8_t *bounce, uint32_t *data_off)
{
    *data_off = 0;
    if (!j->direct) {
        j->done = job_pread(s, j, fd, dst, n, off, n);
        return;
    }
    const uint64_t lead = off % DIRECT_ALIGN;
    const uint64_t want = (lead + n + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN;
    const uint64_t skip = (DIRECT_ALIGN - (uintptr_t)dst % DIRECT_ALIGN) % DIRECT_ALIGN;
    const int in_place = skip + want <= cap && skip + lead <= UINT32_MAX;
    uint8_t *buf = in_place ? dst + skip : bounce;
    const uint64_t done = job_pread(s, j, fd, buf, want, off - lead, lead + n);
    j->done = done > lead ? done - lead : 0;
    if (j->err || j->eof) return;
    if (in_place) *data_off = (uint32_t)(skip + lead);
    else memcpy(dst, bounce + lead, (size_t)n);
}

/* The outcome of read j of n bytes at offset off (key expert of k's
 * matrix): VT_OK, or VT_ERR_IO with the error naming the key, the file and
 * what happened (errno, or the file ending first). */
static vt_status read_outcome(const vt_expert_streamer *s, const read_job *j, const stack *k,
                              uint32_t expert, uint64_t n, uint64_t off)
{
    if (j->err) {
        vt_set_error("expert streamer: reading expert %u of %s (%" PRIu64 " bytes at offset %"
                     PRIu64 " of %s) failed: %s", expert, matrix_label(k), n, off,
                     vt_gguf_shard_path(s->p.gguf, k->t->shard), strerror(j->err));
        return VT_ERR_IO;
    }
    if (j->eof) {
        vt_set_error("expert streamer: reading expert %u of %s: the file ends after %" PRIu64
                     " of %" PRIu64 " bytes at offset %" PRIu64 " of %s (truncated?)", expert,
                     matrix_label(k), j->done, n, off, vt_gguf_shard_path(s->p.gguf, k->t->shard));
        return VT_ERR_IO;
    }
    return VT_OK;
}

/* Read n bytes at off of fd into dst. With O_DIRECT the read covers whole
 * aligned blocks: into dst's own memory when its cap bytes hold them at an
 * aligned address (the slice then starts at dst + *data_off), else through
 * reader 0's bounce buffer and a copy to dst (*data_off 0), on the acquiring
 * thread (job_read, as the readers do). An O_DIRECT read the file system
 * refuses turns O_DIRECT off (direct_off) and is read again. */
static vt_status read_slice(vt_expert_streamer *s, int fd, uint8_t *dst, uint64_t n, uint64_t off,
                            const stack *k, uint32_t expert, uint64_t cap, uint32_t *data_off)
{
    read_job j = {.direct = s->direct};
    job_read(s, &j, fd, dst, n, off, cap, s->bounce, data_off);
    if (j.err == EINVAL && j.direct && j.done == 0) {
        /* the file system took O_DIRECT at open but refuses the read */
        vt_status st = direct_off(s, strerror(j.err));
        if (st != VT_OK) return st;
        return read_slice(s, s->fds[k->t->shard], dst, n, off, k, expert, cap, data_off);
    }
    return read_outcome(s, &j, k, expert, n, off);
}

/* The file reads of key (layer, matrix, expert): its slice, or, for a
 * whole-expert key, each registered matrix's slice at its place in the
 * unit. Returns the count; parts[p]: the matrix's stack (shard, name), bytes,
 * file offset, offset in the key's bytes. */
typedef struct key_part {
    const stack *k;
    uint64_t n, off, at;
} key_part;

static uint32_t key_parts(const vt_expert_streamer *s, uint32_t layer, uint32_t matrix,
                          uint32_t expert, key_part *parts)
{
    const stack *k = stack_at(s, layer, matrix);
    if (!s->p.slot_unit_expert) {
        parts[0] = (key_part){k, k->slice_bytes, k->t->file_offset + (uint64_t)expert * k->slice_bytes, 0};
        return 1;
    }
    const uint32_t M = s->n_matrices[layer];
    for (uint32_t m = 0; m < M; m++) {
        const stack *km = stack_at(s, layer, m);
        const uint64_t n = k->sub_bytes[m];
        parts[m] = (key_part){km, n, km->t->file_offset + (uint64_t)expert * n, k->sub_off[m]};
    }
    return M;
}

/* Read key (layer, matrix, expert) from the file into dst (cap bytes): one
 * slice as read_slice reads it (*data_off where it starts), or a unit's
 * slices each at its place (through the bounce buffer under O_DIRECT,
 * *data_off 0). */
static vt_status read_key(vt_expert_streamer *s, uint32_t layer, uint32_t matrix, uint32_t expert,
                          uint8_t *dst, uint64_t cap, uint32_t *data_off)
{
    key_part parts[MAX_MATRICES];
    const uint32_t n = key_parts(s, layer, matrix, expert, parts);
    if (!s->p.slot_unit_expert)
        return read_slice(s, s->fds[parts[0].k->t->shard], dst, parts[0].n, parts[0].off,
                          parts[0].k, expert, cap, data_off);
    *data_off = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t no_off;
        vt_status st = read_slice(s, s->fds[parts[i].k->t->shard], dst + parts[i].at, parts[i].n,
                                  parts[i].off, parts[i].k, expert, 0, &no_off);
        if (st != VT_OK) return st;
    }
    return VT_OK;
}

/* Make key resident in the host tier: a host hit, or a file read into a fresh
 * host slot. On failure the host slot goes back to the free list and the key
 * stays absent in the host tier. */
static vt_status host_fill(vt_expert_streamer *s, uint32_t layer, uint32_t matrix, uint32_t expert,
                           uint64_t *hslot_out)
{
    stack *k = stack_at(s, layer, matrix);
    uint64_t h = k->hslot_of[expert];
    if (h != NO_SLOT) {
        s->hstats[layer].hits++;
        es_lru_touch(&s->host, h);
        *hslot_out = h;
        return VT_OK;
    }
    vt_status st = es_take_host_slot(s, &h);
    if (st != VT_OK) return st;
    double t0 = now_seconds();
    st = read_key(s, layer, matrix, expert, s->host_addr[h], s->p.host_slot_bytes, &s->hdoff[h]);
    if (st == VT_OK && es_fault_at(s, VT_STREAMER_FAULT_HOST_COMMIT, layer, matrix, expert)) {
        vt_set_error("expert streamer: host-tier commit of expert %u of %s (layer %u) into host "
                     "slot %" PRIu64 ": injected failure", expert, k->t->name, layer, h);
        st = VT_ERR_IO;
    }
    s->hstats[layer].read_seconds += now_seconds() - t0;
    if (st != VT_OK) {
        es_give_back(&s->host, h);
        s->hstats[layer].errors++;
        return st;
    }
    es_claim(&s->host, h, layer, matrix, expert, s->pub_gen);
    s->host.slots[h].batch = s->pub_gen - 1; /* not a publish source yet */
    k->hslot_of[expert] = h;
    s->hstats[layer].misses++;
    s->hstats[layer].bytes_read += k->slice_bytes;
    *hslot_out = h;
    return VT_OK;
}

/* Publish host slot h into device slot `slot`: the store's publish (queued,
 * ordered with the backend's ops), or, for a store without it (ABI < 1.4),
 * slot_for_write + memcpy + commit_slot. */
static vt_status publish_from_host(vt_expert_streamer *s, const stack *k, uint32_t layer,
                                   uint32_t matrix, uint32_t expert, uint64_t h, uint64_t slot)
{
    const vt_store_api *a = s->p.store_api;
    vt_status st;
    if (es_fault_at(s, VT_STREAMER_FAULT_PUBLISH, layer, matrix, expert)) {
        vt_set_error("injected publish failure");
        st = VT_ERR_IO;
    } else if (s->publish) {
        st = a->publish(s->p.store, slot, s->host_addr[h] + s->hdoff[h], k->slice_bytes);
        if (st == VT_OK) {
            if (h < s->host.n) s->host.slots[h].batch = s->pub_gen;
            else s->ring_gen[h - s->host.n] = s->pub_gen; /* a staging ring slot */
            s->dev.slots[slot].pub = s->pub_gen + 1;
            s->pub_pending = 1;
        }
    } else {
        uint8_t *dst = a->slot_for_write(s->p.store, slot);
        if (!dst) {
            st = VT_ERR_INTERNAL;
        } else {
            memcpy(dst, s->host_addr[h] + s->hdoff[h], (size_t)k->slice_bytes);
            st = a->commit_slot(s->p.store, slot, k->slice_bytes);
        }
    }
    if (st != VT_OK)
        vt_error_prefix("expert streamer: publish of expert %u of %s (layer %u) from %s %" PRIu64
                        " into slot %" PRIu64, expert, k->t->name, layer,
                        h < s->host.n ? "host slot" : "staging ring slot",
                        h < s->host.n ? h : h - s->host.n, slot);
    return st;
}

/* Fill key (layer, matrix, expert) into a fresh device-tier slot: from the
 * host tier when there is one (filled from the file first on a host miss),
 * else read from the file through slot_for_write / commit_slot. On any
 * failure the slot is returned to the free list and the key stays absent in
 * the device tier (and in the host tier when that step failed). */
static vt_status fill(vt_expert_streamer *s, uint32_t layer, uint32_t matrix, uint32_t expert,
                      uint64_t *slot_out)
{
    stack *k = stack_at(s, layer, matrix);
    uint64_t slot = es_take_slot(s, layer, k->cls);
    if (slot == NO_SLOT) {
        vt_set_error("expert streamer: the arena's %" PRIu64 " slots of %" PRIu64 " bytes are "
                     "all needed by this batch of layer %u; it cannot also hold expert %u of %s",
                     class_slots(s, k->cls), s->cls.bytes[k->cls], layer, expert, k->t->name);
        return VT_ERR_RANGE;
    }
    double t0 = now_seconds();
    vt_status st;
    if (s->host.n) {
        uint64_t h = NO_SLOT;
        st = host_fill(s, layer, matrix, expert, &h);
        if (st == VT_OK) {
            double tc = now_seconds();
            st = publish_from_host(s, k, layer, matrix, expert, h, slot);
            s->stats[layer].commit_seconds += now_seconds() - tc;
        }
    } else {
        uint8_t *dst = s->p.store_api->slot_for_write(s->p.store, slot);
        if (!dst) {
            vt_error_prefix("expert streamer: slot_for_write(%" PRIu64 ") for expert %u of %s",
                            slot, expert, k->t->name);
            st = VT_ERR_INTERNAL;
        } else {
            uint32_t no_off;
            st = read_key(s, layer, matrix, expert, dst, 0,
                          &no_off); /* the store's staging: through the bounce buffer */
            if (st == VT_OK) {
                double tc = now_seconds();
                st = s->p.store_api->commit_slot(s->p.store, slot, k->slice_bytes);
                s->stats[layer].commit_seconds += now_seconds() - tc;
                if (st != VT_OK)
                    vt_error_prefix("expert streamer: commit of expert %u of %s (layer %u) into "
                                    "slot %" PRIu64, expert, k->t->name, layer, slot);
            }
        }
    }
    s->stats[layer].fill_seconds += now_seconds() - t0;
    if (st != VT_OK) {
        es_give_back(&s->dev, slot); /* invalidate before the error returns */
        s->stats[layer].fill_errors++;
        return st;
    }
    es_claim(&s->dev, slot, layer, matrix, expert, s->batch);
    if (s->visits) s->dev.slots[slot].visit = s->visits[layer];
    k->slot_of[expert] = slot;
    s->stats[layer].misses++;
    s->stats[layer].bytes_filled += k->slice_bytes;
    *slot_out = slot;
    return VT_OK;
}

/* ------------------------------------------------------------ batched fills */

#define PENDING_SLOT (NO_SLOT - 1) /* slot_of of a key waiting in fill_batch */
/* Run the read of pending fill i (on reader thread `worker`): thread-safe, it
 * only reads the streamer (read_fn, direct), uses the worker's own bounce
 * buffer and writes its own job. A whole-expert key reads each part into its
 * place (under O_DIRECT through the bounce buffer: the parts' places are not
 * block aligned). */
static void run_job(void *ctx, uint64_t i, uint32_t worker)
{
    vt_expert_streamer *s = ctx;
    read_job *j = &s->pend[s->pend_read[i]].job;
    uint8_t *bounce = s->bounce ? s->bounce + (size_t)worker * s->bounce_stride : NULL;
    j->direct = s->direct;
    j->err = j->eof = 0;
    j->done = 0;
    j->data_off = 0;
    if (j->n_part <= 1) {
        job_read(s, j, j->fd, j->dst, j->n, j->off, j->cap, bounce, &j->data_off);
        return;
    }
    for (uint32_t p = 0; p < j->n_part; p++) {
        uint32_t no_off;
        j->bad = p;
        job_read(s, j, j->part[p].fd, j->dst + j->part[p].at, j->part[p].n, j->part[p].off, 0,
                 bounce, &no_off);
        if (j->err || j->eof) return;
    }
}

/* The outcome of pending fill q's read, on the acquiring thread: VT_OK, or
 * the error worded as read_slice words it. A read that O_DIRECT refused
 * (EINVAL before any byte) is redone here through read_key, which falls back
 * to buffered reads; its time counts as the host tier's read time when it
 * reads into the host tier. */
static vt_status finish_read(vt_expert_streamer *s, uint32_t layer, pend *q)
{
    read_job *j = &q->job;
    if (j->err == EINVAL && j->direct && j->done == 0) {
        const double t0 = now_seconds();
        vt_status st = read_key(s, layer, q->matrix, q->expert, j->dst, j->cap, &j->data_off);
        if (q->kind == PEND_HOST_READ) s->hstats[layer].read_seconds += now_seconds() - t0;
        return st;
    }
    if (j->n_part > 1 && (j->err || j->eof)) /* name the slice that failed */
        return read_outcome(s, j, stack_at(s, layer, j->bad), q->expert, j->part[j->bad].n,
                            j->part[j->bad].off);
    return read_outcome(s, j, stack_at(s, layer, q->matrix), q->expert, j->n, j->off);
}

/* Drop pending fill q: its device slot (and a host slot taken for it) back
 * on the free lists, the key absent. */
static void drop_pending(vt_expert_streamer *s, uint32_t layer, pend *q)
{
    stack *k = stack_at(s, layer, q->matrix);
    k->slot_of[q->expert] = NO_SLOT;
    es_give_back(&s->dev, q->slot);
    if (q->kind == PEND_HOST_READ) es_give_back(&s->host, q->h);
    else if (q->kind == PEND_HOST_HIT) s->host.slots[q->h].held = 0;
}

static void drop_all_pending(vt_expert_streamer *s, uint32_t layer)
{
    for (size_t i = 0; i < s->n_pend; i++) drop_pending(s, layer, &s->pend[i]);
    s->n_pend = s->n_pend_ring = 0;
}

/* Complete the pending fills: every read at once on the reader threads;
 * with ring slots among them, a quiesce (the copies out of the other half
 * ran during the reads); then in order: the host-tier commit, the publish,
 * the device-tier claim. The first failure is returned; the fills after it
 * are dropped. */
static vt_status flush_pending(vt_expert_streamer *s, uint32_t layer)
{
    if (!s->n_pend) return VT_OK;
    const double t0 = now_seconds();
    size_t n_read = 0; /* the readers wake only for reads (host hits have none) */
    for (size_t i = 0; i < s->n_pend; i++)
        if (s->pend[i].kind != PEND_HOST_HIT) s->pend_read[n_read++] = i;
    vt_reader_pool_run(s->pool, run_job, s, n_read);
    const double t1 = now_seconds();
    vt_status st = VT_OK;
    if (s->n_pend_ring && s->pub_pending && (st = es_quiesce_publishes(s)) != VT_OK) {
        vt_error_prefix("expert streamer: waiting for the staging ring's copies");
        drop_all_pending(s, layer);
        return st;
    }
    int host_reads = 0;
    for (size_t i = 0; i < s->n_pend; i++) {
        pend *q = &s->pend[i];
        if (st != VT_OK) {
            drop_pending(s, layer, q);
            continue;
        }
        stack *k = stack_at(s, layer, q->matrix);
        const uint32_t m = q->matrix, e = q->expert;
        if (q->kind != PEND_HOST_HIT) {
            st = finish_read(s, layer, q);
            s->hdoff[q->h] = q->job.data_off;
        }
        if (q->kind == PEND_HOST_READ) {
            host_reads = 1;
            if (st == VT_OK && es_fault_at(s, VT_STREAMER_FAULT_HOST_COMMIT, layer, m, e)) {
                vt_set_error("expert streamer: host-tier commit of expert %u of %s (layer %u) "
                             "into host slot %" PRIu64 ": injected failure", e, k->t->name,
                             layer, q->h);
                st = VT_ERR_IO;
            }
            if (st != VT_OK) {
                s->hstats[layer].errors++;
                s->stats[layer].fill_errors++;
                drop_pending(s, layer, q);
                continue;
            }
            es_claim(&s->host, q->h, layer, m, e, s->pub_gen);
            s->host.slots[q->h].batch = s->pub_gen - 1; /* not a publish source yet */
            k->hslot_of[e] = q->h;
            s->hstats[layer].misses++;
            s->hstats[layer].bytes_read += k->slice_bytes;
        } else if (q->kind == PEND_HOST_HIT) {
            s->host.slots[q->h].held = 0;
        }
        if (st == VT_OK) {
            double tc = now_seconds();
            st = publish_from_host(s, k, layer, m, e, q->h, q->slot);
            s->stats[layer].commit_seconds += now_seconds() - tc;
        }
        if (st != VT_OK) {
            s->stats[layer].fill_errors++;
            q->kind = PEND_RING; /* nothing of the host tier left to give back */
            drop_pending(s, layer, q);
            continue;
        }
        es_claim(&s->dev, q->slot, layer, m, e, s->batch);
        if (s->visits) s->dev.slots[q->slot].visit = s->visits[layer];
        k->slot_of[e] = q->slot;
        s->stats[layer].misses++;
        s->stats[layer].bytes_filled += k->slice_bytes;
    }
    s->stats[layer].fill_seconds += now_seconds() - t0;
    if (host_reads) s->hstats[layer].read_seconds += t1 - t0;
    s->n_pend = s->n_pend_ring = 0;
    return st;
}

/* The host tier cannot give a slot without flushing first: none is free and
 * its least recently used slot is the source of a pending fill (every other
 * one is too, hits being moved to the front), or every slot is taken. */
static int host_needs_flush(const vt_expert_streamer *s)
{
    const tier *t = &s->host;
    return t->free_head[0] == NO_SLOT && (t->lru_tail == NO_SLOT || t->slots[t->lru_tail].held);
}

/* Fill every device-tier miss of an acquire (ids, n, the layer's M
 * matrices) through the batched path: take each miss's slots in order, then
 * flush (reads at once, then commits and publishes in order) whenever a
 * ring half is full, the host tier needs its pending slots back, or the
 * batch ends. On an error the fills not yet flushed are dropped. */
static vt_status fill_batch(vt_expert_streamer *s, uint32_t layer, const int32_t *ids,
                            uint32_t n, uint32_t M)
{
    const uint64_t need = (uint64_t)n * M;
    if (need > s->pend_cap) {
        pend *np = (uint64_t)(size_t)need == need ? realloc(s->pend, (size_t)need * sizeof *np)
                                                  : NULL;
        if (np) s->pend = np;
        size_t *nr = np ? realloc(s->pend_read, (size_t)need * sizeof *nr) : NULL;
        if (!nr) {
            vt_set_error("out of memory: expert streamer fill list for %" PRIu64 " slices", need);
            return VT_ERR_OUT_OF_MEMORY;
        }
        s->pend_read = nr;
        s->pend_cap = (size_t)need;
    }
    const uint64_t wave = s->n_ring / 2;
    s->n_pend = s->n_pend_ring = 0;
    vt_status st = VT_OK;
    for (uint32_t i = 0; i < n && st == VT_OK; i++) {
        for (uint32_t m = 0; m < M; m++) {
            stack *k = stack_at(s, layer, m);
            const uint32_t e = (uint32_t)ids[i];
            if (k->slot_of[e] != NO_SLOT) continue; /* a hit, or already pending */
            es_count_use(s, layer, m, e);
            const int host_read = s->host.n && k->hslot_of[e] == NO_SLOT;
            if ((host_read && host_needs_flush(s)) || (!s->host.n && s->n_pend_ring >= wave))
                if ((st = flush_pending(s, layer)) != VT_OK) break;
            uint64_t slot = es_take_slot(s, layer, k->cls);
            if (slot == NO_SLOT) {
                if ((st = flush_pending(s, layer)) != VT_OK) break;
                vt_set_error("expert streamer: the arena's %" PRIu64 " slots of %" PRIu64 " bytes "
                             "are all needed by this batch of layer %u; it cannot also hold "
                             "expert %u of %s", class_slots(s, k->cls), s->cls.bytes[k->cls], layer,
                             e, k->t->name);
                st = VT_ERR_RANGE;
                break;
            }
            pend *q = &s->pend[s->n_pend];
            *q = (pend){.matrix = m, .expert = e, .slot = slot, .h = NO_SLOT};
            key_part parts[MAX_MATRICES];
            const uint32_t np = key_parts(s, layer, m, e, parts);
            q->job.fd = s->fds[parts[0].k->t->shard];
            q->job.n = parts[0].n;
            q->job.off = parts[0].off;
            q->job.cap = s->p.host_slot_bytes;
            q->job.n_part = s->p.slot_unit_expert ? np : 1;
            for (uint32_t p = 0; p < np && s->p.slot_unit_expert; p++) {
                q->job.part[p].fd = s->fds[parts[p].k->t->shard];
                q->job.part[p].n = parts[p].n;
                q->job.part[p].off = parts[p].off;
                q->job.part[p].at = parts[p].at;
            }
            if (s->host.n && !host_read) {
                q->kind = PEND_HOST_HIT;
                q->h = k->hslot_of[e];
                s->hstats[layer].hits++;
                es_lru_touch(&s->host, q->h);
                s->host.slots[q->h].held = 1;
            } else if (s->host.n) {
                if ((st = es_take_host_slot(s, &q->h)) != VT_OK) {
                    es_give_back(&s->dev, slot);
                    break;
                }
                q->kind = PEND_HOST_READ;
                q->job.dst = s->host_addr[q->h];
            } else {
                uint64_t r = s->ring_next;
                s->ring_next = (r + 1) % s->n_ring;
                if (s->pub_pending && s->ring_gen[r] == s->pub_gen &&
                    (st = es_quiesce_publishes(s)) != VT_OK) {
                    vt_error_prefix("expert streamer: waiting for the copy out of staging ring "
                                    "slot %" PRIu64, r);
                    es_give_back(&s->dev, slot);
                    break;
                }
                q->kind = PEND_RING;
                q->h = s->host.n + r;
                q->job.dst = s->host_addr[q->h];
                s->n_pend_ring++;
            }
            k->slot_of[e] = PENDING_SLOT; /* a repeated id is one fill */
            s->n_pend++;
        }
    }
    if (st != VT_OK) {
        drop_all_pending(s, layer);
        return st;
    }
    return flush_pending(s, layer);
}

/* The arguments of an acquire or a prefetch (what: its name): the layer
 * registered, ids in range of every matrix of it; *n_matrices out: the
 * layer's keys per expert (key_matrices). */
vt_status es_check_ids(const vt_expert_streamer *s, const char *what, uint32_t layer,
                       const int32_t *ids, uint32_t n, uint32_t *n_matrices)
{
    if (!s || (n && !ids)) {
        vt_set_error("expert streamer: %s: NULL argument", what);
        return VT_ERR_INVALID_ARG;
    }
    if (layer >= s->p.n_layer || !s->n_matrices[layer]) {
        vt_set_error("expert streamer: %s: layer %u has no registered expert stacks", what, layer);
        return VT_ERR_INVALID_ARG;
    }
    const uint32_t M = s->n_matrices[layer];
    uint64_t n_exp = stack_at(s, layer, 0)->n_expert;
    for (uint32_t m = 1; m < M; m++)
        if (stack_at(s, layer, m)->n_expert < n_exp) n_exp = stack_at(s, layer, m)->n_expert;
    for (uint32_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (uint64_t)ids[i] >= n_exp) {
            vt_set_error("expert streamer: %s: expert id %d of layer %u is out of range (%" PRIu64
                         " experts in %s)", what, ids[i], layer, n_exp,
                         stack_at(s, layer, 0)->t->name);
            return VT_ERR_RANGE;
        }
    }
    *n_matrices = key_matrices(s, layer);
    return VT_OK;
}

/* join_ahead before an acquire reads a prefetched slot or a fill reuses one.
 * When it fails the copies are not ordered before the ops: every slot still
 * marked as prefetched is dropped (its bytes may not be there). */
static vt_status join_prefetch(vt_expert_streamer *s)
{
    if (!s->ahead_pending) return VT_OK;
    s->ahead_pending = 0;
    vt_status st = s->p.store_api->join_ahead(s->p.store);
    if (st == VT_OK) return VT_OK;
    /* nothing orders the ops after the copies now: wait for the device (the
     * copies still running) before their slots can be filled again */
    char why[256];
    snprintf(why, sizeof why, "%s", vt_last_error());
    if (s->p.store_api->quiesce(s->p.store) == VT_OK) {
        s->pub_pending = 0;
        s->pub_gen++;
    }
    vt_set_error("%s", why);
    for (uint64_t i = 0; i < s->dev.n; i++) {
        slot_info *x = &s->dev.slots[i];
        if (!x->used || !x->ahead) continue;
        x->ahead = 0; /* an error, not a wrong prediction */
        es_evict(s, i);
        s->stats[x->layer].evictions--; /* not an eviction: an error */
        s->stats[x->layer].fill_errors++;
        es_give_back(&s->dev, i);
    }
    vt_error_prefix("expert streamer: joining the prefetch copies");
    return st;
}

vt_status vt_streamer_acquire(vt_expert_streamer *s, uint32_t layer, const int32_t *ids,
                              uint32_t n, const void **out)
{
    uint32_t M = 0;
    if (n && !out) {
        vt_set_error("expert streamer: acquire: NULL argument");
        return VT_ERR_INVALID_ARG;
    }
    vt_status cst = es_check_ids(s, "acquire", layer, ids, n, &M);
    if (cst != VT_OK) return cst;
    if ((uint64_t)n * M > s->p.n_slots) {
        vt_set_error("expert streamer: layer %u needs %u experts x %u matrices = %" PRIu64
                     " slots at once, the arena has %" PRIu64, layer, n, M, (uint64_t)n * M,
                     s->p.n_slots);
        return VT_ERR_RANGE;
    }
    for (uint32_t c = 0; s->cls.n_classes > 1 && c < s->cls.n_classes; c++) { /* per class too */
        uint32_t mc = 0;
        for (uint32_t m = 0; m < M; m++) mc += stack_at(s, layer, m)->cls == c;
        if ((uint64_t)n * mc > class_slots(s, c)) {
            vt_set_error("expert streamer: layer %u needs %u experts x %u matrices = %" PRIu64
                         " slots of %" PRIu64 " bytes at once, the arena has %" PRIu64, layer, n,
                         mc, (uint64_t)n * mc, s->cls.bytes[c], class_slots(s, c));
            return VT_ERR_RANGE;
        }
    }
    if ((cst = join_prefetch(s)) != VT_OK) return cst;
    s->batch++;
    s->acquired_batch = s->batch;
    if (s->visits) s->visits[layer]++;
    if (s->tracing) es_trace_add(s, layer, ids, n);
    /* first the hits: every resident key of the batch is claimed by it before
     * any fill chooses a victim, so no fill evicts a key the same batch asks
     * for later; a repeat within the batch is one use */
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t m = 0; m < M; m++) {
            uint64_t slot = stack_at(s, layer, m)->slot_of[ids[i]];
            if (slot == NO_SLOT) continue;
            slot_info *x = &s->dev.slots[slot];
            if (x->batch == s->batch) continue;
            s->stats[layer].hits++;
            if (x->ahead) { /* a prediction that came true */
                x->ahead = 0;
                s->pstats.used++;
            }
            x->batch = s->batch;
            if (s->visits) x->visit = s->visits[layer];
            es_count_use(s, layer, m, (uint32_t)ids[i]);
            es_lru_touch(&s->dev, slot);
        }
    /* then the misses, in order: batched (reads at once), or one at a time */
    if (s->pool) { /* a host tier with readers, or the staging ring */
        vt_status st = fill_batch(s, layer, ids, n, M);
        if (st != VT_OK) return st;
    }
    for (uint32_t i = 0; i < n; i++) {
        for (uint32_t m = 0; m < M; m++) {
            uint64_t slot = stack_at(s, layer, m)->slot_of[ids[i]];
            if (slot == NO_SLOT) {
                es_count_use(s, layer, m, (uint32_t)ids[i]);
                vt_status st = fill(s, layer, m, (uint32_t)ids[i], &slot);
                if (st != VT_OK) return st;
            }
            const void *p = s->p.store_api->slot_for_read(s->p.store, slot);
            if (!p) {
                vt_error_prefix("expert streamer: slot_for_read(%" PRIu64 ")", slot);
                return VT_ERR_INTERNAL;
            }
            if (!s->p.slot_unit_expert) {
                out[(uint64_t)i * M + m] = p;
                continue;
            }
            /* a whole expert: each matrix at its place in the slot */
            const stack *k0 = stack_at(s, layer, 0);
            const uint32_t Mm = s->n_matrices[layer];
            for (uint32_t j = 0; j < Mm; j++)
                out[(uint64_t)i * Mm + j] = (const uint8_t *)p + k0->sub_off[j];
        }
    }
    /* prefetch on: fork the ahead queue here, so that copies of a prefetch
     * issued after the ops that read these slots start after the ops queued
     * so far (this acquire's publishes included), not after those ops */
    if (s->ahead_ok) {
        if (s->p.store_api->begin_ahead(s->p.store) != VT_OK) {
            /* the acquire itself is done: prefetch goes off, said once */
            char why[384];
            snprintf(why, sizeof why, "expert streamer: prefetch off: the store's begin_ahead "
                     "failed after the acquire of layer %u: %s", layer, vt_last_error());
            vt_host_table()->note_fallback(why);
            s->ahead_ok = 0;
            s->forked = 0;
        } else {
            s->forked = 1;
        }
    }
    return VT_OK;
}

