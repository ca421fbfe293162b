/*
 * test_cpu_quant_kernels.c - backend-cpu's mat_mul for the block-quantised
 * types (Q4_0 ... Q6_K, IQ4_NL, IQ4_XS, MXFP4, and Q8_0's decode path)
 * against the scalar reference (exact dequantisation, cpu_dequant.c, then a
 * double-precision dot), for every kernel set this CPU runs, odd row
 * counts, batch 1, 2, 3, 17 and 64 (the integer dot products of
 * cpu_qdot_body.h and cpu_lowbit.c at every batch size, or the float GEMM
 * path of cpu_simd_body.h when they are off).
 *
 * Tolerances, from the arithmetic (u = 2^-24):
 *  - float path: weights dequantised exactly, products and sums in float32
 *    in some order: |Δ| <= (n_in + 16)·u·Σ|w·x| + 2u·|y|, the bound
 *    tests/test_cpu_simd.c uses;
 *  - integer path: the activations are rounded to 32-value blocks of int8,
 *    x̂ = d_b·q with d_b = max_b|x| / 127, |x − x̂| <= d_b/2 (plus float error
 *    of x·(1/d_b) below 2^-10·d_b/2); the integer sums are exact and their
 *    scaling/accumulation in float32 is covered by the float bound taken
 *    over |x| + d_b. So |Δ| <= Σ_b 0.5005·d_b·Σ_{i∈b}|w_i| + the float bound.
 *    That bound is loose for a wrong decode of one block, so the integer
 *    path is also run on activations that lie on the int8 grid (x = d_b·k,
 *    one |k| = 127 per block, d_b a power of two): they quantise exactly,
 *    the first term is 0 and any decode error shows.
 * Also: the quantiser itself (codes, scales, per-16 sums) against the
 * formula, and bit-identical results for 1 and 2 threads.
 */
#include <float.h>

#include "test_cpu_common.h"
#include "test_quant_blocks.h"

#define TC_U (1.0 / 16777216.0)

/* Reference y[t][r] in double, and the two magnitudes the bounds need. */
typedef struct {
    double *y, *mag, *qterm; /* [T][n_out] */
} ref_out;

static ref_out reference(uint32_t type, const uint8_t *wd, size_t rb, int64_t n_in, int64_t n_out,
                         const float *x, int64_t T)
{
    ref_out o = {calloc((size_t)(T * n_out), sizeof(double)), calloc((size_t)(T * n_out), sizeof(double)),
                 calloc((size_t)(T * n_out), sizeof(double))};
    assert_true(o.y && o.mag && o.qterm);
    float *wf = tc_alloc_f(n_in);
    double *db = calloc((size_t)(n_in / 32), sizeof(double));
    assert_non_null(db);
    for (int64_t t = 0; t < T; t++) {
        const float *xt = x + t * n_in;
        for (int64_t b = 0; b < n_in / 32; b++) {
            double m = 0;
            for (int i = 0; i < 32; i++) m = fmax(m, fabs(xt[32 * b + i]));
            db[b] = m / 127.0;
        }
        for (int64_t r = 0; r < n_out; r++) {
            assert_int_equal(vt_cpu_dequant_row(type, wd + (size_t)r * rb, n_in, wf), VT_OK);
            double s = 0, mag = 0, q = 0;
            for (int64_t i = 0; i < n_in; i++) {
                s += (double)wf[i] * xt[i];
                mag += fabs((double)wf[i]) * (fabs((double)xt[i]) + db[i / 32]);
                q += fabs((double)wf[i]) * 0.5005 * db[i / 32];
            }
            o.y[t * n_out + r] = s;
            o.mag[t * n_out + r] = mag;
            o.qterm[t * n_out + r] = q;
        }
    }
    free(db);
    free(wf);
    return o;
}

static void ref_free(ref_out *o)
{
    free(o->y);
    free(o->mag);
    free(o->qterm);
}

/* x on the int8 grid: block b = 2^-e_b · k, k in [-127, 127], one |k| = 127. */
static void grid_x(tc_rng *rng, float *x, int64_t n)
{
    for (int64_t b = 0; b < n / 32; b++) {
        float c = ldexpf(1.0f, -6 - (int)(tc_next(rng) % 4));
        int big = (int)(tc_next(rng) % 32);
        for (int i = 0; i < 32; i++) {
            int k = (int)(tc_next(rng) % 255) - 127;
            if (i == big) k = tc_next(rng) & 1 ? 127 : -127;
            x[32 * b + i] = c * (float)k;
        }
    }
}

/* One case: mat_mul through the API with ctx, against the reference. */
static void run_case(vt_backend_ctx *ctx, const char *what, uint32_t type, int64_t n_in,
                     int64_t n_out, int64_t T, int grid, uint64_t seed)
{
    tc_rng rng = {seed * 7919 + 17};
    size_t rb = (size_t)vt_type_row_bytes(type, (uint64_t)n_in);
    uint8_t *wd = malloc(rb * (size_t)n_out);
    assert_non_null(wd);
    tqb_fill(type, wd, n_out, n_in, seed, -8);
    float *x = tc_alloc_f(T * n_in), *y = tc_alloc_f(T * n_out);
    if (grid)
        grid_x(&rng, x, T * n_in);
    else
        for (int64_t i = 0; i < T * n_in; i++) /* varied block maxima, a few outliers */
            x[i] = tc_unif(&rng, -1.0f, 1.0f) * (i % 97 == 5 ? 8.0f : 1.0f) * (float)(1 + (i / 32) % 3);
    vt_weight w = {type, n_in, n_out, rb, wd, "test.quant_weight"};
    assert_int_equal(vt_backend_mat_mul_fn(tc_api(), type)(ctx, &w, x, n_in, y, n_out, T), VT_OK);
    ref_out o = reference(type, wd, rb, n_in, n_out, x, T);
    const vt_cpu_qdot_set *qd = vt_cpu_ctx_kernels(ctx) ? ctx->qd : NULL;
    /* the qdot set's integer products at every batch size */
    int integer = qd && qd->dot[type] != NULL;
    for (int64_t t = 0; t < T; t++)
        for (int64_t r = 0; r < n_out; r++) {
            double want = o.y[t * n_out + r], got = y[t * n_out + r];
            double tol = (n_in + 16) * TC_U * o.mag[t * n_out + r] + 2 * TC_U * fabs(want);
            if (integer && !grid) tol += o.qterm[t * n_out + r];
            if (!(fabs(got - want) <= tol))
                fail_msg("%s: mat_mul %s n_in %lld n_out %lld T %lld (%s%s activations): token %lld row "
                         "%lld: got %.9g want %.9g |diff| %.3g > tol %.3g",
                         what, vt_type_name(type), (long long)n_in, (long long)n_out, (long long)T,
                         integer ? "integer path, " : "float path, ", grid ? "grid" : "random",
                         (long long)t, (long long)r, got, want, fabs(got - want), tol);
        }
    ref_free(&o);
    free(x);
    free(y);
    free(wd);
}

static void sweep(vt_backend_ctx *ctx, const char *what)
{
    for (size_t ti = 0; ti < TQB_N_TYPES + TQB_N_LOWBIT; ti++) {
        uint32_t type = ti < TQB_N_TYPES ? tqb_types[ti] : tqb_lowbit_types[ti - TQB_N_TYPES];
        int64_t bs = vt_type_block_size(type);
        /* an odd number of blocks where it can be: 3 and 10 super-blocks; 3 and 33
         * 32-blocks; 3 and 17 64-blocks (NVFP4, Q2_0); 3 and 9 128-blocks (Q1_0) */
        int64_t n_in1 = 3 * bs, n_in2 = bs == 256 ? 2560 : bs == 128 ? 1152 : bs == 64 ? 1088 : 1056;
        static const int64_t toks[] = {1, 2, 3, 17, 64};
        for (size_t k = 0; k < sizeof toks / sizeof toks[0]; k++) {
            int64_t T = toks[k];
            run_case(ctx, what, type, n_in1, 37, T, 0, 100 + ti * 10 + k);
            if (T <= 3) run_case(ctx, what, type, n_in2, T == 1 ? 75 : 13, T, 0, 200 + ti * 10 + k);
            if (T <= 3) {
                run_case(ctx, what, type, n_in1, 41, T, 1, 300 + ti * 10 + k);
                run_case(ctx, what, type, n_in2, 9, T, 1, 400 + ti * 10 + k);
            }
        }
    }
}

static void test_scalar(void **state)
{
    (void)state;
    vt_backend_ctx *ctx = tc_ctx("scalar", 1);
    assert_null(ctx->qd); /* the reference set takes the float path */
    sweep(ctx, "scalar");
    tc_api()->shutdown(ctx);
}

static void simd_sets(const char *set)
{
    vt_backend_ctx *ctx = tc_simd_ctx(set, 2);
    if (!ctx) return;
    char what[64];
    if (ctx->qd) {
        snprintf(what, sizeof what, "%s + %s integer dot", set, ctx->qd->name);
        sweep(ctx, what);
    } else {
        fprintf(stderr, "[  NOTE    ] set %s has no integer dot products here\n", set);
    }
    /* the other integer set where this CPU runs it */
    const vt_cpu_qdot_set *others[] = {&vt_cpu_qdot_avx2, &vt_cpu_qdot_avx512vnni};
    for (size_t i = 0; i < 2; i++) {
        if (others[i] == ctx->qd) continue;
        if (!others[i]->supported()) {
            fprintf(stderr, "[  SKIP    ] integer dot '%s': this CPU lacks it\n", others[i]->name);
            continue;
        }
        vt_cpu_ctx_set_qdot(ctx, others[i]);
        snprintf(what, sizeof what, "%s + %s integer dot", set, others[i]->name);
        sweep(ctx, what);
    }
    vt_cpu_ctx_set_qdot(ctx, NULL); /* decode on the float path */
    snprintf(what, sizeof what, "%s, float decode", set);
    sweep(ctx, what);
    tc_api()->shutdown(ctx);
}

static void test_avx2(void **state)
{
    (void)state;
    simd_sets("avx2");
}
static void test_avx512(void **state)
{
    (void)state;
    simd_sets("avx512");
}
static void test_avx2w16(void **state)
{
    (void)state;
    simd_sets("avx2w16");
}

/* The activation quantiser against its formula. */
static void test_quantize_x(void **state)
{
    (void)state;
    const vt_cpu_qdot_set *sets[] = {&vt_cpu_qdot_avx2, &vt_cpu_qdot_avx512vnni};
    int ran = 0;
    for (size_t k = 0; k < 2; k++) {
        if (!sets[k]->supported()) continue;
        ran++;
        tc_rng rng = {99};
        enum { N = 32 * 40 };
        float x[N];
        tc_fill(&rng, x, N, -3.0f, 3.0f);
        for (int i = 32; i < 64; i++) x[i] = 0.0f; /* an all-zero block */
        x[70] = 1e30f;                             /* a huge outlier */
        x[100] = -1e-30f;                          /* tiny values */
        for (int i = 128; i < 160; i++) x[i] = (i & 1 ? 1e-38f : -3e-39f); /* max below 127·FLT_MIN */
        x[200] = NAN;                              /* a NaN lane (block 6) */
        x[260] = INFINITY;                         /* an infinite lane (block 8) */
        void *buf = NULL;
        assert_int_equal(posix_memalign(&buf, 64, vt_cpu_xq_bytes(N / 32)), 0);
        vt_cpu_xq q = vt_cpu_xq_view(buf, N / 32);
        sets[k]->quantize(x, N, &q);
        for (int b = 0; b < N / 32; b++) {
            double amax = 0;
            int nonfinite = 0;
            for (int i = 0; i < 32; i++) {
                amax = fmax(amax, fabs(x[32 * b + i]));
                nonfinite |= !isfinite(x[32 * b + i]);
            }
            if (nonfinite) { /* the scale carries the NaN into every dot product */
                if (!isnan(q.d[b])) fail_msg("quantize %s block %d: a non-finite value, d %g", sets[k]->name, b, q.d[b]);
                for (int i = 0; i < 32; i++) assert_true(q.q[32 * b + i] >= -127);
                continue;
            }
            if (amax < 127.0 * FLT_MIN) { /* tiny block: zeros */
                assert_true(q.d[b] == 0.0f);
                for (int i = 0; i < 32; i++) assert_int_equal(q.q[32 * b + i], 0);
                continue;
            }
            assert_true(fabs(q.d[b] - amax / 127.0) <= 1e-6 * amax / 127.0);
            int s0 = 0, s1 = 0;
            for (int i = 0; i < 32; i++) {
                double xi = x[32 * b + i], rec = (double)q.d[b] * q.q[32 * b + i];
                if (!(fabs(xi - rec) <= 0.5005 * q.d[b]))
                    fail_msg("quantize %s block %d value %d: x %.9g code %d d %.9g", sets[k]->name, b,
                             i, xi, q.q[32 * b + i], (double)q.d[b]);
                assert_true(q.q[32 * b + i] >= -127 && q.q[32 * b + i] <= 127);
                if (i < 16) s0 += q.q[32 * b + i];
                else s1 += q.q[32 * b + i];
            }
            assert_int_equal(q.s16[2 * b], s0);
            assert_int_equal(q.s16[2 * b + 1], s1);
            assert_true(q.ds[b] == q.d[b] * (float)(s0 + s1));
        }
        free(buf);
    }
    if (!ran) fprintf(stderr, "[  SKIP    ] no integer dot set runs on this CPU\n");
}

/* 1 and 2 threads give the same bits on the integer path: the pool's row
 * slices (offsets of rows and outputs) cover every row once, as one slice does. */
static void test_threads(void **state)
{
    (void)state;
    vt_backend_ctx *c1 = tc_ctx(NULL, 1), *c2 = tc_ctx(NULL, 2);
    if (!c1->qd) {
        fprintf(stderr, "[  SKIP    ] no integer dot set on this CPU\n");
    } else {
        for (size_t ti = 0; ti < TQB_N_TYPES + TQB_N_LOWBIT; ti++) {
            uint32_t type = ti < TQB_N_TYPES ? tqb_types[ti] : tqb_lowbit_types[ti - TQB_N_TYPES];
            int64_t n_in = 1024, n_out = 301;
            size_t rb = (size_t)vt_type_row_bytes(type, (uint64_t)n_in);
            uint8_t *wd = malloc(rb * (size_t)n_out);
            assert_non_null(wd);
            tqb_fill(type, wd, n_out, n_in, 5 + ti, -8);
            float x[1024], y1[301], y2[301];
            tc_rng rng = {3 + ti};
            tc_fill(&rng, x, n_in, -1.0f, 1.0f);
            vt_weight w = {type, n_in, n_out, rb, wd, "test.threads"};
            assert_int_equal(vt_backend_mat_mul_fn(tc_api(), type)(c1, &w, x, n_in, y1, n_out, 1), VT_OK);
            assert_int_equal(vt_backend_mat_mul_fn(tc_api(), type)(c2, &w, x, n_in, y2, n_out, 1), VT_OK);
            assert_memory_equal(y1, y2, sizeof y1);
            free(wd);
        }
    }
    tc_api()->shutdown(c1);
    tc_api()->shutdown(c2);
}

/* Batch invariance (issue 43 item 5): each token of a several-token call
 * equals that token alone, bit for bit, whatever the other tokens are, for
 * every type, with 1 and 2 threads: on the integer path (int8 activations at
 * every batch size; a low-bit type's decoded blocks shared) and on the float
 * path (F32, F16, BF16 always; every type with the integer dot products off),
 * whose one-token kernel sums as the several-token tiles do. Float rows of
 * 517 values: two column blocks of VT_CPU_MM_KB and a tail. */
static void fill_float_weight(uint32_t type, uint8_t *wd, size_t bytes, uint64_t seed)
{
    tc_rng rng = {seed};
    if (type == VT_TYPE_F32) {
        tc_fill(&rng, (float *)(void *)wd, (int64_t)(bytes / 4), -1.0f, 1.0f);
        return;
    }
    for (size_t i = 0; i + 1 < bytes; i += 2) {
        uint32_t r = (uint32_t)tc_next(&rng);
        uint16_t h = type == VT_TYPE_F16 ? (uint16_t)((r & 0x8000u) | ((10u + (r >> 16) % 8) << 10) | (r & 0x3FFu))
                                         : (uint16_t)((r & 0x8000u) | ((120u + (r >> 16) % 8) << 7) | (r & 0x7Fu));
        memcpy(wd + i, &h, 2);
    }
}

static void test_batch_invariant(void **state)
{
    (void)state;
    static const uint32_t float_types[] = {VT_TYPE_F32, VT_TYPE_F16, VT_TYPE_BF16};
    vt_backend_ctx *ctx[2] = {tc_ctx(NULL, 1), tc_ctx(NULL, 2)};
    const vt_cpu_qdot_set *qd = ctx[0]->qd;
    enum { T = 70, N_OUT = 53 }; /* past one 64-token chunk */
    const size_t n_all = 3 + TQB_N_TYPES + TQB_N_LOWBIT;
    for (int path = 0; path < 2; path++) { /* 0: as users get it; 1: integer dot products off */
        if (path == 0 && !qd) fprintf(stderr, "[  NOTE    ] no integer dot set on this CPU\n");
        for (int c = 0; c < 2; c++) vt_cpu_ctx_set_qdot(ctx[c], path ? NULL : qd);
        for (size_t ti = 0; ti < n_all; ti++) {
            const uint32_t type = ti < 3 ? float_types[ti]
                                  : ti < 3 + TQB_N_TYPES ? tqb_types[ti - 3]
                                                         : tqb_lowbit_types[ti - 3 - TQB_N_TYPES];
            const int64_t n_in = ti < 3 ? 517 : 2 * 256;
            size_t rb = (size_t)vt_type_row_bytes(type, (uint64_t)n_in);
            uint8_t *wd = malloc(rb * N_OUT);
            float *x = tc_alloc_f(T * n_in), *yb = tc_alloc_f(T * N_OUT), y1[N_OUT];
            assert_non_null(wd);
            if (ti < 3) fill_float_weight(type, wd, rb * N_OUT, 31 + ti);
            else tqb_fill(type, wd, N_OUT, n_in, 77 + ti, -8);
            tc_rng rng = {11 + ti};
            tc_fill(&rng, x, T * n_in, -2.0f, 2.0f);
            vt_weight w = {type, n_in, N_OUT, rb, wd, "test.batch_invariant"};
            vt_mat_mul_fn mm = vt_backend_mat_mul_fn(tc_api(), type);
            for (int c = 0; c < 2; c++) {
                assert_int_equal(mm(ctx[c], &w, x, n_in, yb, N_OUT, T), VT_OK);
                for (int t = 0; t < T; t += 23) {
                    assert_int_equal(mm(ctx[c], &w, x + t * n_in, n_in, y1, N_OUT, 1), VT_OK);
                    if (memcmp(y1, yb + t * N_OUT, sizeof y1))
                        fail_msg("%s (%s path): token %d of %d differs from the same token alone "
                                 "(%d threads)", vt_type_name(type),
                                 path || !qd || !qd->dot[type] ? "float" : "integer", t, T, c + 1);
                }
            }
            free(wd);
            free(x);
            free(yb);
        }
    }
    tc_api()->shutdown(ctx[0]);
    tc_api()->shutdown(ctx[1]);
}

/* The low-bit kernels' per-16 integer sums: the AVX2 version equals the plain
 * loop on random codes, on the extremes (|q| = 127, x = ±127) and at every
 * block size (64, 128, 256). */
static void test_group_sums(void **state)
{
    (void)state;
#if defined(__x86_64__)
    if (!__builtin_cpu_supports("avx2")) {
        fprintf(stderr, "[  SKIP    ] group sums: this CPU lacks AVX2\n");
        return;
    }
    tc_rng rng = {99};
    int8_t q[256], x[256];
    int32_t a[16], b[16];
    for (int round = 0; round < 200; round++) {
        for (int i = 0; i < 256; i++) {
            int lim = round % 3 == 0 ? 127 : round % 3 == 1 ? 62 : 9;
            q[i] = (int8_t)(round == 0 ? (i & 1 ? 127 : -127) : (int)(tc_unif(&rng, 0, 1) * (2 * lim + 1)) - lim);
            x[i] = (int8_t)(round == 0 ? (i & 2 ? 127 : -127) : (int)(tc_unif(&rng, 0, 1) * 255) - 127);
        }
        for (int n = 64; n <= 256; n *= 2) {
            vt_cpu_group_sums_c(q, x, n, a);
            vt_cpu_group_sums_avx2(q, x, n, b);
            if (memcmp(a, b, sizeof(int32_t) * (size_t)(n / 16)))
                fail_msg("group sums of %d values differ from the plain loop (round %d)", n, round);
        }
    }
#endif
}

/* The kernels' low-bit decoders (cpu_lowbit_avx2.c's where the CPU has AVX2)
 * give the plain decoders' integers and scales bit for bit, on valid blocks
 * of three scale ranges and on fully random bytes. */
static void test_lowbit_decoders(void **state)
{
    (void)state;
    tc_rng rng = {4711};
    int n_fast = 0;
    for (size_t ti = 0; ti < TQB_N_LOWBIT; ti++) {
        const uint32_t type = tqb_lowbit_types[ti];
        vt_cpu_lowbit_int_fn plain = vt_cpu_lowbit_int(type, 0), fast = vt_cpu_lowbit_int(type, 1);
        assert_non_null(plain);
        assert_non_null(fast);
        n_fast += fast != plain;
        const int bs = (int)vt_type_block_size(type), ts = (int)vt_type_size(type);
        enum { ROWS = 64 };
        uint8_t *w = malloc((size_t)ts * ROWS);
        assert_non_null(w);
        for (int pass = 0; pass < 4; pass++) {
            if (pass < 3) {
                tqb_fill(type, w, ROWS, bs, 100 + ti * 4 + (uint64_t)pass, -14 + 8 * pass);
            } else {
                for (int i = 0; i < ts * ROWS; i++) w[i] = (uint8_t)(tc_unif(&rng, 0, 1) * 256);
            }
            for (int r = 0; r < ROWS; r++) {
                int8_t qa[256], qb[256];
                float sa[16], sb[16];
                plain(w + (size_t)r * ts, qa, sa);
                fast(w + (size_t)r * ts, qb, sb);
                if (memcmp(qa, qb, (size_t)bs) || memcmp(sa, sb, sizeof(float) * (size_t)(bs / 16)))
                    fail_msg("%s: the kernels' decoder differs from the plain one (pass %d, block %d)",
                             vt_type_name(type), pass, r);
            }
        }
        free(w);
    }
    fprintf(stderr, "  low-bit decoders: %d types with their own kernel decoder, equal to the plain "
            "ones\n", n_fast);
}

/* The float path's fast dequantisation equals the reference bit for bit. */
static void test_fast_dequant(void **state)
{
    (void)state;
    for (size_t ti = 0; ti < TQB_N_TYPES; ti++) {
        uint32_t type = tqb_types[ti];
        const int64_t n_in = 1024, n_rows = 9;
        size_t rb = (size_t)vt_type_row_bytes(type, (uint64_t)n_in);
        uint8_t *wd = malloc(rb * (size_t)n_rows);
        float *a = tc_alloc_f(n_in), *b = tc_alloc_f(n_in);
        assert_non_null(wd);
        for (int e = -14; e <= 6; e += 10) { /* small, medium and large scales */
            tqb_fill(type, wd, n_rows, n_in, 4242 + ti + (uint64_t)(e + 20), e);
            for (int64_t r = 0; r < n_rows; r++) {
                assert_int_equal(vt_cpu_dequant_row(type, wd + (size_t)r * rb, n_in, a), VT_OK);
                vt_cpu_dequant_row_fast(type, wd + (size_t)r * rb, n_in, b);
                for (int64_t i = 0; i < n_in; i++)
                    if (memcmp(&a[i], &b[i], 4))
                        fail_msg("fast dequant %s row %lld value %lld: %.9g, reference %.9g", vt_type_name(type),
                                 (long long)r, (long long)i, b[i], a[i]);
            }
        }
        free(wd);
        free(a);
        free(b);
    }
}

/* A weight whose rows are not whole blocks is refused by name (both paths). */
static void test_partial_blocks(void **state)
{
    (void)state;
    vt_backend_ctx *ctx = tc_ctx(NULL, 1);
    static uint8_t data[4096];
    float x[288 * 2] = {0}, y[4];
    static const uint32_t ts[] = {VT_TYPE_Q4_K, VT_TYPE_Q6_K, VT_TYPE_IQ4_XS, VT_TYPE_Q4_0};
    for (size_t i = 0; i < 4; i++) {
        int64_t n_in = ts[i] == VT_TYPE_Q4_0 ? 40 : 288; /* 1.25 blocks, 1.125 blocks */
        vt_weight w = {ts[i], n_in, 2, vt_type_row_bytes(ts[i], (uint64_t)n_in), data, "blk.0.partial"};
        for (int64_t T = 1; T <= 2; T++) {
            tc_err[0] = 0;
            assert_int_equal(tc_api()->mat_mul[ts[i]](ctx, &w, x, n_in, y, 2, T), VT_ERR_INVALID_ARG);
            assert_non_null(strstr(tc_err, "blk.0.partial"));
            assert_non_null(strstr(tc_err, "not whole"));
        }
        int32_t id = 0;
        assert_int_equal(tc_api()->get_rows[ts[i]](ctx, &w, &id, 1, x), VT_ERR_INVALID_ARG);
    }
    tc_api()->shutdown(ctx);
}

/* Every block type is declared PRESENT with a kernel behind it, for mat_mul and get_rows. */
static void test_capabilities(void **state)
{
    (void)state;
    const vt_backend_api *api = tc_api();
    for (size_t ti = 0; ti < TQB_N_TYPES; ti++) {
        uint32_t t = tqb_types[ti];
        int mm = 0, gr = 0;
        for (uint32_t i = 0; i < api->n_caps; i++) {
            if (api->caps[i].id == VT_CAP_MAT_MUL(t)) mm = api->caps[i].state == VT_CAP_PRESENT;
            if (api->caps[i].id == VT_CAP_GET_ROWS(t)) gr = api->caps[i].state == VT_CAP_PRESENT;
        }
        if (!mm || !gr || !api->mat_mul[t] || !api->get_rows[t])
            fail_msg("type %s: mat_mul/get_rows not declared PRESENT with a function", vt_type_name(t));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_capabilities), cmocka_unit_test(test_quantize_x),
        cmocka_unit_test(test_partial_blocks), cmocka_unit_test(test_fast_dequant),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_batch_invariant), cmocka_unit_test(test_group_sums),
        cmocka_unit_test(test_lowbit_decoders),       cmocka_unit_test(test_scalar),
        cmocka_unit_test(test_avx2),         cmocka_unit_test(test_avx512),
        cmocka_unit_test(test_avx2w16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
