/*
 * bench_cpu_matvec.c - weight bandwidth of backend-cpu's mat_mul at batch 1
 * (decode), per weight type, for 1 and 2 threads (and the scalar reference
 * for comparison). GB/s = weight bytes streamed per second. Not a test.
 *
 *   usage: bench_cpu_matvec [n_out [n_in [seconds_per_case]]]   (default 8192 2048 0.5)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_internal.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void bench_log(vt_log_level l, const char *fmt, ...) { (void)l; (void)fmt; }
static void bench_err(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}
static const char *bench_last(void) { return ""; }

int main(int argc, char **argv)
{
    int64_t n_out = argc > 1 ? atoll(argv[1]) : 8192, n_in = argc > 2 ? atoll(argv[2]) : 2048;
    double secs = argc > 3 ? atof(argv[3]) : 0.5;
    vt_host_api host = {sizeof host, VT_ABI_MAJOR, VT_ABI_MINOR, bench_log, bench_err, bench_last,
                        NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    const vt_backend_api *api = vt_cpu_backend_api();
    static const uint32_t types[] = {VT_TYPE_F32, VT_TYPE_F16, VT_TYPE_BF16, VT_TYPE_Q8_0};
    float *x = malloc(sizeof(float) * (size_t)n_in), *y = malloc(sizeof(float) * (size_t)n_out);
    for (int64_t i = 0; i < n_in; i++) x[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    printf("mat_mul batch 1, [%lld x %lld], kernel set auto = %s\n", (long long)n_out,
           (long long)n_in, vt_cpu_kernels_best()->name);
    printf("%-6s %-8s %8s %10s %10s\n", "type", "kernels", "threads", "us/call", "GB/s");
    for (int ti = 0; ti < 4; ti++) {
        uint32_t type = types[ti];
        uint64_t rb = vt_type_row_bytes(type, (uint64_t)n_in);
        size_t bytes = (size_t)rb * (size_t)n_out;
        uint8_t *data = malloc(bytes);
        for (size_t i = 0; i < bytes; i++) data[i] = (uint8_t)(i * 131 + (i >> 9));
        if (type == VT_TYPE_F16 || type == VT_TYPE_BF16 || type == VT_TYPE_F32 || type == VT_TYPE_Q8_0) {
            /* keep values finite: clear exponent-all-ones patterns */
            for (size_t i = 0; i < bytes; i += (type == VT_TYPE_F32 ? 4 : 2)) {
                if (type == VT_TYPE_F32) data[i + 3] &= 0x3f;
                else if (type == VT_TYPE_F16) data[i + 1] &= 0x3b;
                else if (type == VT_TYPE_BF16) data[i + 1] &= 0x3f;
            }
            if (type == VT_TYPE_Q8_0)
                for (size_t b = 0; b < bytes; b += 34) data[b + 1] = 0x20; /* scale ~0.008 */
        }
        vt_weight w = {type, n_in, n_out, rb, data, "bench"};
        static const struct {
            const char *k;
            int t;
        } cfg[] = {{"auto", 1}, {"auto", 2}, {"scalar", 1}};
        for (int c = 0; c < 3; c++) {
            vt_backend_params p = {sizeof p, 0, cfg[c].t, cfg[c].k, &host};
            vt_backend_ctx *ctx = NULL;
            if (api->init(&p, &ctx) != VT_OK) return 1;
            api->mat_mul[type](ctx, &w, x, n_in, y, n_out, 1); /* warm up */
            int64_t iters = 0;
            double t0 = now_s(), t1;
            do {
                api->mat_mul[type](ctx, &w, x, n_in, y, n_out, 1);
                iters++;
                t1 = now_s();
            } while (t1 - t0 < (cfg[c].k[0] == 's' ? secs / 2 : secs));
            double per = (t1 - t0) / (double)iters;
            printf("%-6s %-8s %8d %10.1f %10.2f\n", vt_type_name(type), cfg[c].k, cfg[c].t, per * 1e6,
                   (double)bytes / per / 1e9);
            api->shutdown(ctx);
        }
        free(data);
    }
    free(x);
    free(y);
    return 0;
}
