/*
 * prefault.c - reading a model's mapped weights at load (prefault.h).
 */
#include "prefault.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "error.h"
#include "gguf_info.h"

#define PREFAULT_CHUNK ((uint64_t)64 << 20)

typedef struct range {
    uintptr_t lo, hi; /* page-aligned, [lo, hi) */
    uint32_t shard;
    uint64_t file_lo;  /* file offset of lo */
    uintptr_t data_hi; /* the last tensor's end (hi less the page rounding) */
} range;

static int range_cmp(const void *a, const void *b)
{
    const range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Read [p, p + n) of a file mapping: MADV_POPULATE_READ, or one byte per
 * page after MADV_WILLNEED where the kernel lacks it (EINVAL). Returns 0, or
 * the errno of a refusal. */
static int read_pages(uint8_t *p, size_t n, size_t page)
{
#ifdef MADV_POPULATE_READ
    for (;;) {
        if (madvise(p, n, MADV_POPULATE_READ) == 0) return 0;
        if (errno != EINTR) break;
    }
    if (errno != EINVAL) return errno;
#endif
    (void)madvise(p, n, MADV_WILLNEED); /* a hint: its failure changes nothing */
    volatile uint8_t sink = 0;
    for (size_t off = 0; off < n; off += page) sink ^= ((volatile const uint8_t *)p)[off];
    (void)sink;
    return 0;
}

vt_status vt_prefault_weights(const vt_gguf *g, int skip_experts, vt_gguf_progress_fn progress,
                              void *user, uint64_t *bytes)
{
    if (bytes) *bytes = 0;
    const int64_t nt = vt_gguf_n_tensors(g);
    const long run_end = vt_gguf_first_unrun_block(g);
    const long ps = sysconf(_SC_PAGESIZE);
    const uintptr_t page = ps > 0 ? (uintptr_t)ps : 4096;
    range *r = nt > 0 ? malloc((size_t)nt * sizeof *r) : NULL;
    if (nt > 0 && !r) {
        vt_set_error_oom((uint64_t)nt * sizeof *r, "prefault range table of %s",
                         vt_gguf_shard_path(g, 0));
        return VT_ERR_OUT_OF_MEMORY;
    }
    size_t n = 0;
    for (int64_t i = 0; i < nt; i++) {
        const vt_gguf_tensor *t = vt_gguf_tensor_at(g, i);
        if (!t->data || !t->nbytes || vt_gguf_block_of(t->name) >= run_end) continue;
        if (skip_experts && vt_gguf_is_routed_expert(t)) continue;
        uintptr_t lo = (uintptr_t)t->data, hi = lo + (uintptr_t)t->nbytes;
        uintptr_t a = lo & ~(page - 1);
        r[n++] = (range){a, (hi + page - 1) & ~(page - 1), t->shard, t->file_offset - (lo - a), hi};
    }
    if (n) qsort(r, n, sizeof *r, range_cmp);
    size_t m = 0; /* merge ranges that touch or overlap (one shard's mapping) */
    for (size_t i = 0; i < n; i++) {
        if (m && r[m - 1].shard == r[i].shard && r[i].lo <= r[m - 1].hi) {
            if (r[i].hi > r[m - 1].hi) r[m - 1].hi = r[i].hi;
            if (r[i].data_hi > r[m - 1].data_hi) r[m - 1].data_hi = r[i].data_hi;
        } else {
            r[m++] = r[i];
        }
    }
    uint64_t total = 0, done = 0;
    for (size_t i = 0; i < m; i++) total += r[i].hi - r[i].lo;
    vt_status st = VT_OK;
    int stop = 0;
    for (size_t i = 0; i < m && !stop; i++) {
        for (uintptr_t p = r[i].lo; p < r[i].hi && !stop;) {
            size_t len = r[i].hi - p < PREFAULT_CHUNK ? (size_t)(r[i].hi - p) : (size_t)PREFAULT_CHUNK;
            int err = read_pages((uint8_t *)p, len, page);
            if (err) {
                uintptr_t end = p + len < r[i].data_hi ? p + len : r[i].data_hi;
                uint64_t off = r[i].file_lo + (p - r[i].lo), off_end = r[i].file_lo + (end - r[i].lo);
                if (err == EFAULT || err == EIO) { /* the file cannot give these bytes */
                    vt_set_error("%s: reading the weights at bytes %" PRIu64 "..%" PRIu64
                                 " into memory failed: %s%s", vt_gguf_shard_path(g, r[i].shard),
                                 off, off_end, strerror(err),
                                 err == EFAULT ? " (is the file shorter than its tensor table says?)"
                                               : "");
                    st = VT_ERR_IO;
                    stop = 1;
                    break;
                }
                /* a speed-up only: the rest is read at first use */
                vt_log(VT_LOG_WARN, "%s: reading the weights at bytes %" PRIu64 "..%" PRIu64
                       " into memory at load: %s; the rest is read at first use",
                       vt_gguf_shard_path(g, r[i].shard), off, off_end, strerror(err));
                if (progress) progress(user, total, total); /* the report ends */
                stop = 1;
                break;
            }
            p += len;
            done += len;
            if (progress) progress(user, done, total);
        }
    }
    free(r);
    if (bytes) *bytes = done;
    return st;
}
