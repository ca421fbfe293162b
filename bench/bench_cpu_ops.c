/*
 * bench_cpu_ops.c - per-op overhead of backend-cpu: the cost of an op small
 * enough to run on the calling thread, of one thread-pool round trip with no
 * work (workers spinning), and of the matvecs of a tiny model (n_embd 256),
 * for 1 and 2 threads. Not a test.
 *
 *   usage: bench_cpu_ops [iterations]   (default 200000)
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cpu_internal.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void nop_task(void *arg, int64_t task, int thread)
{
    (void)arg;
    (void)task;
    (void)thread;
}

int main(int argc, char **argv)
{
    long iters = argc > 1 ? atol(argv[1]) : 200000;
    const vt_backend_api *api = vt_cpu_backend_api();
    static float x[1 << 16], y[1 << 16];
    float *w32 = calloc(256 * 256, sizeof(float));
    uint8_t *wq = calloc(256 * 8, 34);
    for (int i = 0; i < 256 * 256; i++) w32[i] = (float)(i % 13) * 0.01f;
    for (int i = 0; i < 1 << 16; i++) x[i] = (float)(i % 7) * 0.1f;
    vt_weight wf = {VT_TYPE_F32, 256, 256, 1024, w32, "f32"};
    vt_weight w8 = {VT_TYPE_Q8_0, 256, 256, 272, wq, "q8"};
    for (int nt = 1; nt <= 2; nt++) {
        vt_backend_params p = {sizeof p, 0, nt, NULL, NULL};
        vt_backend_ctx *ctx = NULL;
        if (api->init(&p, &ctx) != VT_OK) return 1;
        double t0 = now_s();
        for (long i = 0; i < iters; i++) api->scale(ctx, x, y, 256, 1.5f);
        double inl = (now_s() - t0) / iters;
        t0 = now_s();
        for (long i = 0; i < iters; i++) vt_cpu_pool_run(ctx->pool, nop_task, NULL, 2 * nt);
        double pool = (now_s() - t0) / iters;
        t0 = now_s();
        for (long i = 0; i < iters; i++) api->mat_mul[VT_TYPE_F32](ctx, &wf, x, 256, y, 256, 1);
        double mf = (now_s() - t0) / iters;
        t0 = now_s();
        for (long i = 0; i < iters; i++) api->mat_mul[VT_TYPE_Q8_0](ctx, &w8, x, 256, y, 256, 1);
        double mq = (now_s() - t0) / iters;
        t0 = now_s();
        for (long i = 0; i < iters; i++) api->rms_norm(ctx, x, 256, w32, y, 256, 1, 256, 1e-6f);
        double rn = (now_s() - t0) / iters;
        printf("threads %d (%s): inline scale[256] %.3f us, empty pool round trip %.3f us, "
               "rms_norm[256] %.3f us, matvec 256x256 F32 %.2f us, Q8_0 %.2f us\n",
               nt, ctx->k->name, inl * 1e6, pool * 1e6, rn * 1e6, mf * 1e6, mq * 1e6);
        api->shutdown(ctx);
    }
    free(w32);
    free(wq);
    return 0;
}
