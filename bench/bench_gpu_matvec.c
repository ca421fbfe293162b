/*
 * bench_gpu_matvec.c - a GPU backend's mat_mul per weight type through the
 * plugin's own table: decode (1 token) as weight bandwidth, GB/s = weight
 * bytes / time, against the device's memory bandwidth measured here by
 * copy_d2d of a large buffer (bytes read + bytes written per second); and
 * prefill (512 tokens) as TFLOP/s. Weights are random valid blocks
 * (tests/test_quant_blocks.h). Not a test.
 *
 *   bench_gpu_matvec PLUGIN.so [n_out [n_in]]     (default 131072 4096: a
 *   matrix of 0.3-1 GB per type, beyond the GPU's L2)
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_quant_blocks.h"
#include "vt/backend.h"
#include "vt/plugin.h"

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

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_gpu_matvec PLUGIN.so [n_out [n_in]]\n");
        return 2;
    }
    int64_t n_out = argc > 2 ? atoll(argv[2]) : 131072, n_in = argc > 3 ? atoll(argv[3]) : 4096;
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "bench_gpu_matvec: %s\n", dlerror());
        return 1;
    }
    vt_plugin_entry_fn entry = (vt_plugin_entry_fn)dlsym(h, VT_PLUGIN_ENTRY_SYMBOL);
    if (!entry) return 1;
    const vt_plugin_desc *d = entry();
    const vt_backend_api *G = d->table;
    vt_host_api host = {.struct_size = sizeof host, .abi_major = VT_ABI_MAJOR,
                        .abi_minor = VT_ABI_MINOR, .log = h_log, .set_error = h_err,
                        .last_error = h_last};
    vt_backend_params bp = {.struct_size = sizeof bp, .device = 0, .host = &host};
    vt_backend_ctx *ctx;
    if (G->device_count() < 1 || G->init(&bp, &ctx) != VT_OK) {
        fprintf(stderr, "bench_gpu_matvec: no device (%s)\n", err);
        return 1;
    }
    /* the memory ceiling: copy_d2d of 1 GiB, read + write */
    size_t cb = (size_t)1 << 30;
    void *a = NULL, *b = NULL;
    if (G->alloc(ctx, cb, "copy src", &a) || G->alloc(ctx, cb, "copy dst", &b)) return 1;
    G->memset_zero(ctx, a, cb);
    G->copy_d2d(ctx, b, a, cb);
    G->synchronize(ctx);
    double t0 = now();
    for (int r = 0; r < 10; r++) G->copy_d2d(ctx, b, a, cb);
    G->synchronize(ctx);
    double copy_gbs = 2.0 * (double)cb * 10 / (now() - t0) / 1e9;
    G->free(ctx, a);
    G->free(ctx, b);
    printf("device memory: copy_d2d of 1 GiB moves %.0f GB/s (read + write)\n", copy_gbs);
    printf("mat_mul [%lld x %lld]\n", (long long)n_out, (long long)n_in);
    printf("%-7s %9s %11s %9s %7s %13s %9s\n", "type", "MB", "T=1 us", "GB/s", "% copy",
           "T=512 ms", "TFLOP/s");
    float *x, *y;
    if (G->alloc(ctx, sizeof(float) * (size_t)n_in * 512, "x", (void **)&x) ||
        G->alloc(ctx, sizeof(float) * (size_t)n_out * 512, "y", (void **)&y))
        return 1;
    G->memset_zero(ctx, x, sizeof(float) * (size_t)n_in * 512);
    static const uint32_t types[] = {VT_TYPE_BF16, VT_TYPE_F16,  VT_TYPE_Q8_0, VT_TYPE_Q4_0,
                                     VT_TYPE_Q4_1, VT_TYPE_Q5_0, VT_TYPE_Q5_1, VT_TYPE_Q2_K,
                                     VT_TYPE_Q3_K, VT_TYPE_Q4_K, VT_TYPE_Q5_K, VT_TYPE_Q6_K,
                                     VT_TYPE_IQ4_NL, VT_TYPE_IQ4_XS, VT_TYPE_MXFP4,
                                     /* the low-bit types (ids 64-66 through mat_mul_ext) */
                                     VT_TYPE_IQ2_XXS, VT_TYPE_IQ2_XS, VT_TYPE_IQ2_S,
                                     VT_TYPE_IQ3_XXS, VT_TYPE_IQ3_S, VT_TYPE_IQ1_S, VT_TYPE_IQ1_M,
                                     VT_TYPE_IQ1_XS, VT_TYPE_IQ1_XXS, VT_TYPE_IQ1_XXXS,
                                     VT_TYPE_TQ1_0, VT_TYPE_TQ2_0, VT_TYPE_NVFP4, VT_TYPE_Q1_0,
                                     VT_TYPE_Q2_0};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        uint32_t t = types[k];
        vt_mat_mul_fn mm = vt_backend_mat_mul_fn(G, t);
        if (!mm || n_in % vt_type_block_size(t)) continue;
        size_t rb = (size_t)vt_type_row_bytes(t, (uint64_t)n_in), nb = rb * (size_t)n_out;
        uint8_t *hw = malloc(nb);
        if (!hw) return 1;
        if (t == VT_TYPE_BF16 || t == VT_TYPE_F16)
            for (size_t i = 0; i < nb; i += 2) hw[i] = (uint8_t)i, hw[i + 1] = 0x3c; /* ~1.0..2.0 / 0.x */
        else
            tqb_fill(t, hw, n_out, n_in, 777 + k, -8);
        void *w;
        if (G->alloc(ctx, nb, "weights", &w)) return 1;
        G->copy_h2d(ctx, w, hw, nb);
        free(hw);
        vt_weight wg = {t, n_in, n_out, rb, w, "bench"};
        double us = 0, ms = 0;
        for (int pass = 0; pass < 2; pass++) {
            int T = pass ? 512 : 1, reps = pass ? 3 : 50;
            mm(ctx, &wg, x, n_in, y, n_out, T); /* warm */
            G->synchronize(ctx);
            double s0 = now();
            for (int r = 0; r < reps; r++)
                if (mm(ctx, &wg, x, n_in, y, n_out, T) != VT_OK) {
                    fprintf(stderr, "mat_mul %s: %s\n", vt_type_name(t), err);
                    return 1;
                }
            G->synchronize(ctx);
            double dt = (now() - s0) / reps;
            if (pass) ms = dt * 1e3;
            else us = dt * 1e6;
        }
        double gbs = (double)nb / (us * 1e-6) / 1e9;
        printf("%-7s %9.1f %11.1f %9.0f %6.0f%% %13.2f %9.1f\n", vt_type_name(t), (double)nb / 1e6, us,
               gbs, 100.0 * gbs / copy_gbs, ms, 2.0 * (double)n_in * (double)n_out * 512 / (ms * 1e-3) / 1e12);
        G->free(ctx, w);
    }
    G->shutdown(ctx);
    return 0;
}
