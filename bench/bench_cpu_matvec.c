/*
 * bench_cpu_matvec.c - backend-cpu's mat_mul per weight type, for 1 and 2
 * threads (and the scalar reference for comparison). At batch 1 (decode) the
 * figure of merit is weight bandwidth: GB/s = weight bytes streamed per
 * second. At n_tok > 1 (prefill, or the tokens routed to one expert) it is
 * arithmetic: GFLOP/s = 2·n_out·n_in·n_tok per second. Each case reports the
 * median of 7 timed runs of `seconds_per_case`/7 each, so a shared machine's
 * noise shows as min/max spread instead of moving the figure; "best" is the
 * fastest run, and "cpu" divides the process's CPU time (not wall time) by
 * the thread count, which time-slicing by other jobs does not inflate (the
 * pool's workers spin while they wait, so idle threads count too). Not a test.
 *
 *   usage: bench_cpu_matvec [n_out [n_in [seconds_per_case [n_tok [noscalar [TYPES]]]]]]
 *          (default 8192 2048 0.5 1; "noscalar" skips the reference; TYPES a
 *          comma list such as q4_k,q8_0, default every type). Block types are
 *          random valid blocks (tests/test_quant_blocks.h). Decode (n_tok 1)
 *          of a block type takes the integer dot products; VT_CPU_INT8_DOT=0
 *          in the environment measures the float path instead.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_internal.h"
#include "test_quant_blocks.h"

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static double now_s(void) { return clock_s(CLOCK_MONOTONIC); }
static double cpu_s(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }

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

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define REPS 7

int main(int argc, char **argv)
{
    int64_t n_out = argc > 1 ? atoll(argv[1]) : 8192, n_in = argc > 2 ? atoll(argv[2]) : 2048;
    double secs = argc > 3 ? atof(argv[3]) : 0.5;
    int64_t n_tok = argc > 4 ? atoll(argv[4]) : 1;
    int with_scalar = !(argc > 5 && !strcmp(argv[5], "noscalar"));
    if (n_out <= 0 || n_in <= 0 || n_tok <= 0 || secs <= 0) {
        fprintf(stderr, "usage: %s [n_out [n_in [seconds_per_case [n_tok [noscalar]]]]]\n", argv[0]);
        return 2;
    }
    vt_host_api host = {.struct_size = sizeof host, .abi_major = VT_ABI_MAJOR,
                        .abi_minor = VT_ABI_MINOR, .log = bench_log, .set_error = bench_err,
                        .last_error = bench_last};
    const vt_backend_api *api = vt_cpu_backend_api();
    static const uint32_t types[] = {VT_TYPE_F32,  VT_TYPE_F16,  VT_TYPE_BF16,   VT_TYPE_Q8_0,
                                     VT_TYPE_Q4_0, VT_TYPE_Q4_1, VT_TYPE_Q5_0,   VT_TYPE_Q5_1,
                                     VT_TYPE_Q2_K, VT_TYPE_Q3_K, VT_TYPE_Q4_K,   VT_TYPE_Q5_K,
                                     VT_TYPE_Q6_K, VT_TYPE_IQ4_NL, VT_TYPE_IQ4_XS, VT_TYPE_MXFP4,
                                     VT_TYPE_IQ2_XXS, VT_TYPE_IQ2_XS, VT_TYPE_IQ2_S, VT_TYPE_IQ3_XXS,
                                     VT_TYPE_IQ3_S, VT_TYPE_IQ1_S, VT_TYPE_IQ1_M, VT_TYPE_IQ1_XS,
                                     VT_TYPE_IQ1_XXS, VT_TYPE_IQ1_XXXS, VT_TYPE_TQ1_0, VT_TYPE_TQ2_0,
                                     VT_TYPE_NVFP4, VT_TYPE_Q1_0, VT_TYPE_Q2_0};
    const char *only = argc > 6 ? argv[6] : NULL;
    float *x = malloc(sizeof(float) * (size_t)(n_in * n_tok));
    float *y = malloc(sizeof(float) * (size_t)(n_out * n_tok));
    if (!x || !y) return 1;
    for (int64_t i = 0; i < n_in * n_tok; i++) x[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    printf("mat_mul [%lld x %lld] x %lld token(s), kernel set auto = %s, median of %d\n",
           (long long)n_out, (long long)n_in, (long long)n_tok, vt_cpu_kernels_best()->name, REPS);
    printf("%-8s %-7s %3s %9s %8s %8s %8s %8s %8s\n", "type", "kernels", "thr", "us/call", "GB/s",
           "bestGB/s", "GFLOP/s", "cpuGF/s", "spread%");
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        uint32_t type = types[ti];
        if (only) { /* a comma list of names, case-insensitive */
            char want[256];
            snprintf(want, sizeof want, ",%s,", only);
            char nm[32];
            snprintf(nm, sizeof nm, ",%s,", vt_type_name(type));
            for (char *c = want; *c; c++) *c = (char)(*c >= 'a' && *c <= 'z' ? *c - 32 : *c);
            if (!strstr(want, nm)) continue;
        }
        if (n_in % vt_type_block_size(type)) continue;
        uint64_t rb = vt_type_row_bytes(type, (uint64_t)n_in);
        size_t bytes = (size_t)rb * (size_t)n_out;
        uint8_t *data = malloc(bytes);
        if (!data) return 1;
        for (size_t i = 0; i < bytes; i++) data[i] = (uint8_t)(i * 131 + (i >> 9));
        /* keep values finite: clear exponent-all-ones patterns */
        for (size_t i = 0; i < bytes; i += (type == VT_TYPE_F32 ? 4 : 2)) {
            if (type == VT_TYPE_F32) data[i + 3] &= 0x3f;
            else if (type == VT_TYPE_F16) data[i + 1] &= 0x3b;
            else if (type == VT_TYPE_BF16) data[i + 1] &= 0x3f;
        }
        if (type != VT_TYPE_F32 && type != VT_TYPE_F16 && type != VT_TYPE_BF16)
            tqb_fill(type, data, n_out, n_in, 12345, -8);
        vt_weight w = {type, n_in, n_out, rb, data, "bench"};
        static const struct {
            const char *k;
            int t;
        } cfg[] = {{"auto", 1}, {"auto", 2}, {"scalar", 1}};
        for (int c = 0; c < (with_scalar ? 3 : 2); c++) {
            vt_backend_params p = {sizeof p, 0, cfg[c].t, cfg[c].k, &host};
            vt_backend_ctx *ctx = NULL;
            if (api->init(&p, &ctx) != VT_OK) return 1;
            vt_mat_mul_fn mm = vt_backend_mat_mul_fn(api, type);
            mm(ctx, &w, x, n_in, y, n_out, n_tok); /* warm up */
            double per[REPS], cpu[REPS], slot = (cfg[c].k[0] == 's' ? secs / 2 : secs) / REPS;
            for (int r = 0; r < REPS; r++) {
                int64_t iters = 0;
                double t0 = now_s(), c0 = cpu_s(), t1;
                do {
                    mm(ctx, &w, x, n_in, y, n_out, n_tok);
                    iters++;
                    t1 = now_s();
                } while (t1 - t0 < slot);
                per[r] = (t1 - t0) / (double)iters;
                cpu[r] = (cpu_s() - c0) / (double)iters / cfg[c].t;
            }
            qsort(per, REPS, sizeof per[0], cmp_d);
            qsort(cpu, REPS, sizeof cpu[0], cmp_d);
            double med = per[REPS / 2], flop = 2.0 * (double)n_out * (double)n_in * (double)n_tok;
            printf("%-8s %-7s %3d %9.1f %8.2f %8.2f %8.2f %8.2f %8.1f\n", vt_type_name(type),
                   cfg[c].k, cfg[c].t, med * 1e6, (double)bytes / med / 1e9,
                   (double)bytes / per[0] / 1e9, flop / med / 1e9, flop / cpu[REPS / 2] / 1e9,
                   100.0 * (per[REPS - 1] - per[0]) / med);
            api->shutdown(ctx);
        }
        free(data);
    }
    free(x);
    free(y);
    return 0;
}
