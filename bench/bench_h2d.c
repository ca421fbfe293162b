/*
 * bench_h2d.c - host-to-device copy bandwidth through a backend plugin's own
 * table (copy_h2d), from pinned (host_alloc_pinned) and pageable (malloc)
 * memory, for slot-sized copies: the ceiling the device store's commits
 * (one staging slot -> device slot, then synchronize) can reach; then, from
 * pinned memory, batches of 24 copies as the host tier issues them: queued
 * copy_h2d_async calls with one synchronize per batch (the copy engine), one
 * copy_h2d_ahead call per batch between ahead_fork and ahead_join (the
 * prefetch's path), and the batch split over both queues (odd copies ahead,
 * even ones on the ops' queue, so two copy engines may run at once).
 *
 *   bench_h2d PLUGIN.so [slot_bytes [total_MiB]]
 * Prints GB/s (1e9 bytes/s) per source and per copy size.
 */
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vt/backend.h"

static void h_log(vt_log_level l, const char *fmt, ...) { (void)l; (void)fmt; }
static char err[1024];
static void h_err(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, sizeof err, fmt, ap);
    va_end(ap);
}
static const char *h_last(void) { return err; }

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double run(const vt_backend_api *a, vt_backend_ctx *c, void *dst, const void *src, size_t n,
                  size_t total)
{
    size_t reps = total / n ? total / n : 1;
    a->copy_h2d(c, dst, src, n); /* warm */
    a->synchronize(c);
    double t0 = now();
    for (size_t i = 0; i < reps; i++) {
        if (a->copy_h2d(c, dst, src, n) != VT_OK || a->synchronize(c) != VT_OK) {
            fprintf(stderr, "copy failed: %s\n", err);
            return 0;
        }
    }
    return (double)n * (double)reps / (now() - t0) / 1e9;
}

/* batches of B copies of n bytes from distinct places of src (64 MiB) into
 * dst; ahead: one copy_h2d_ahead per batch, else copy_h2d_async each */
#define B 24
static double run_batch(const vt_backend_api *a, vt_backend_ctx *c, uint8_t *dst,
                        const uint8_t *src, size_t n, size_t total, int ahead)
{
    size_t per = (64u << 20) / n < B ? (64u << 20) / n : B;
    if (!per) return 0;
    size_t reps = total / (n * per) ? total / (n * per) : 1;
    vt_h2d_copy cp[B];
    for (size_t i = 0; i < per; i++) cp[i] = (vt_h2d_copy){dst + i * n, src + i * n, n};
    double t0 = 0;
    for (size_t r = 0; r <= reps; r++) { /* the first batch warms up */
        if (r == 1) t0 = now();
        vt_status st = VT_OK;
        if (ahead == 2) { /* split: the odd copies on the ahead queue, the even on the ops' */
            vt_h2d_copy odd[B];
            uint32_t no = 0;
            for (size_t i = 1; i < per; i += 2) odd[no++] = cp[i];
            st = a->ahead_fork(c);
            if (st == VT_OK && no) st = a->copy_h2d_ahead(c, odd, no);
            for (size_t i = 0; i < per && st == VT_OK; i += 2)
                st = a->copy_h2d_async(c, cp[i].dst, cp[i].src, n);
            if (st == VT_OK) st = a->ahead_join(c);
        } else if (ahead) {
            st = a->ahead_fork(c);
            if (st == VT_OK) st = a->copy_h2d_ahead(c, cp, (uint32_t)per);
            if (st == VT_OK) st = a->ahead_join(c);
        } else {
            for (size_t i = 0; i < per && st == VT_OK; i++)
                st = a->copy_h2d_async(c, cp[i].dst, cp[i].src, n);
        }
        if (st == VT_OK) st = a->synchronize(c);
        if (st != VT_OK) {
            fprintf(stderr, "copy failed: %s\n", err);
            return 0;
        }
    }
    return (double)n * (double)per * (double)reps / (now() - t0) / 1e9;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PLUGIN.so [slot_bytes [total_MiB]]\n", argv[0]);
        return 2;
    }
    size_t slot = argc > 2 ? strtoull(argv[2], NULL, 10) : 1u << 20;
    size_t total = (argc > 3 ? strtoull(argv[3], NULL, 10) : 2048) << 20;
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    const vt_plugin_desc *d = ((vt_plugin_entry_fn)dlsym(h, VT_PLUGIN_ENTRY_SYMBOL))();
    const vt_backend_api *a = d->table;
    if (a->device_count() <= 0) {
        fprintf(stderr, "backend '%s' has no device\n", d->name);
        return 1;
    }
    vt_host_api host = {.struct_size = sizeof host, .abi_major = VT_ABI_MAJOR,
                        .abi_minor = VT_ABI_MINOR, .log = h_log, .set_error = h_err,
                        .last_error = h_last};
    vt_backend_params bp = {.struct_size = sizeof bp, .device = 0, .n_threads = 1, .host = &host};
    vt_backend_ctx *c;
    if (a->init(&bp, &c) != VT_OK) {
        fprintf(stderr, "init: %s\n", err);
        return 1;
    }
    size_t sizes[] = {slot / 4 ? slot / 4 : 1, slot, slot * 4, 64u << 20};
    void *dev = NULL, *pin = NULL;
    if (a->alloc(c, sizes[3], "bench destination", &dev) != VT_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    void *pg = malloc(sizes[3]);
    memset(pg, 1, sizes[3]);
    int have_pin = a->host_alloc_pinned && a->host_alloc_pinned(c, sizes[3], "bench pinned", &pin) == VT_OK;
    if (have_pin) memset(pin, 1, sizes[3]);
    printf("backend %s: copy_h2d + synchronize, %zu MiB per size\n", d->name, total >> 20);
    const int has_async = a->struct_size >= offsetof(vt_backend_api, copy_h2d_async) + sizeof(void *) &&
                          a->copy_h2d_async;
    const int has_ahead = a->struct_size >= offsetof(vt_backend_api, ahead_join) + sizeof(void *) &&
                          a->ahead_fork && a->copy_h2d_ahead && a->ahead_join;
    printf("| bytes per copy | pinned GB/s | pageable GB/s | pinned, %d queued copy_h2d_async | "
           "pinned, %d in one copy_h2d_ahead | pinned, %d split over both queues |\n"
           "|---|---|---|---|---|---|\n", B, B, B);
    for (size_t i = 0; i < 4; i++) {
        double gp = have_pin ? run(a, c, dev, pin, sizes[i], total) : 0;
        double gq = run(a, c, dev, pg, sizes[i], total);
        double gb = have_pin && has_async ? run_batch(a, c, dev, pin, sizes[i], total, 0) : 0;
        double ga = have_pin && has_ahead ? run_batch(a, c, dev, pin, sizes[i], total, 1) : 0;
        double g2 = have_pin && has_ahead && has_async ? run_batch(a, c, dev, pin, sizes[i], total, 2)
                                                      : 0;
        printf("| %zu | %.2f | %.2f | %.2f | %.2f | %.2f |\n", sizes[i], gp, gq, gb, ga, g2);
    }
    if (have_pin) a->host_free_pinned(c, pin);
    free(pg);
    a->free(c, dev);
    a->shutdown(c);
    return 0;
}
