/*
 * test_cuda_ops.c - every compute op of backend-cuda against backend-cpu's
 * scalar reference kernels (kernels = "scalar": float32 values, double
 * accumulation), both plugins dlopen-ed from the build's plugin folder, on
 * random inputs with odd sizes, batches of 1 and more, and strided rows where
 * an op takes a row stride. Output buffers start filled with the same
 * sentinel on both sides and are compared whole, so a write outside the
 * result (into a stride's padding) fails too; input padding holds NaN, so a
 * read of it shows.
 *
 * The contexts run with VT_GPU_INT8_DOT=0 and VT_GPU_GEMM=cublas (float32
 * activations in every product; the int8 and tensor-core paths, bfloat16
 * for dense matmuls and TF32 for the experts, are test_cuda_quant's and
 * test_moe_ops's); the model check at the end also runs the q8_0 fixture as
 * users get it, against the rounding criterion.
 *
 * Tolerances (u = 2^-24, the float32 unit roundoff), op by op:
 *  - mat_mul, random data: the GPU accumulates in float32 (a warp's lanes
 *    each sum n_in/32 products, then a shuffle tree; or cuBLAS SGEMM; or the
 *    tiled kernel in order of i), the reference in double. Rounding errors
 *    of a float32 dot product behave like a random walk: |Δ| ~ sqrt(n)·u·
 *    Σ|w_i x_i|; Σ|w_i x_i| <= ||w||·||x||, so we allow
 *    |Δ| <= 4·sqrt(n_in)·u·||w_o||·||x_t||.
 *  - mat_mul, exact data: weights k/16 (Q8_0: d = 2^-7, any int8) and
 *    activations j/16 with |k|, |j| <= 16 make every product a multiple of
 *    2^-11 below 1 and every partial sum of <= 4128 terms exact in 24 bits,
 *    so any summation order gives the same float: |Δ| = 0 is required. This
 *    catches a wrong element, row or stride that a tolerance would hide.
 *  - get_rows, binary, scale, mul_rows, copy_2d, gather_rows, scatter_add,
 *    softmax_topk: the same float operations in the same order (topk runs the
 *    CPU's algorithm on the host on the same logits): exact.
 *  - rms_norm, l2_norm: both sum the exact squares in double (orders differ:
 *    relative 1e-16·n) and round the scale once, so the float scale differs
 *    by at most 1 ulp and y = (x·s)·w by at most 2 ulp: |Δ| <= 4u·2·|y|.
 *  - rope_neox, ssm_conv, unary: evaluated in double and rounded once on both
 *    sides; the device's libm differs from glibc by an ulp of double, which
 *    changes the float only near a rounding tie: |Δ| <= 1 ulp = 2u·|y|
 *    (plus 1e-30 absolute for results that underflow; RoPE: plus 1e-14, the
 *    double-level difference of a rotation a·c - b·s of inputs below 2 that
 *    cancels to a tiny float).
 *  - mul_act, add_rms_norm, delta_net_gates (ABI 1.3; the CPU declares them
 *    ABSENT, its scalar composition of unary, binary, mul_rows and rms_norm
 *    is the reference): the roundings of that composition, so the bounds of
 *    its parts (stated at each case).
 *  - gated_delta_net: float32 state and the CPU's operation order with double
 *    accumulators, no fused multiply-add: identical but for exp(g) from the
 *    device's libm (1 ulp of the decay when it lands on a tie), which then
 *    spreads over the tokens: |Δ| <= 64u·T·max|ref|.
 *  - attention: float32 online softmax vs the CPU's double sums. A score
 *    carries |Δs| <= (head_dim/32 + 6)·u·scale·max||q||·max||k|| (lane sums
 *    then a shuffle tree); each softmax weight then has relative error
 *    <= 2|Δs| + a few ulp of expf, and the float32 running sums over n_kv/4
 *    positions per warp add (n_kv/4 + 16)·u relative: since the output is a
 *    convex combination of v rows, |Δ| <= max|v|·(4|Δs| + 4(n_kv/4 + 16)·u).
 * Then a model-level check: the qwen35moe-tiny fixtures (bf16 and q8_0) run
 * through the engine on device "cuda" (prefill in chunks, and token by
 * token) against the Hugging Face reference logits (fixtures/README.md
 * criterion: max |Δ| <= 1e-2, same argmax where the reference top-1/top-2
 * gap exceeds 1e-3) and against device "cpu" with the scalar kernels.
 *
 * Without a device (CI, this machine) every case skips loudly (exit 77);
 * a plugin that was not built skips too, except when CMake saw CI=true and
 * the toolchain (then it fails).
 */
#include <dlfcn.h>
#include <math.h>

#include <cJSON.h>

#include "test_util.h"
#include "test_backend_load.h"

#include "engine.h"
#include "error.h"
#include "registry.h"
#include "vt/backend.h"

#define U32 5.9604644775390625e-8 /* 2^-24 */

static const vt_backend_api *G, *C; /* cuda, cpu */
static vt_backend_ctx *gctx, *tctx, *cctx; /* cuda (cuBLAS), cuda (tiled GEMM), cpu scalar */
static int g_state;                         /* 0 not tried, 1 ready, -1 skip */

/* ---------------------------------------------------------------- setup */

static const vt_backend_api *load_api(const char *name)
{
    return (const vt_backend_api *)vt_test_load_backend(name)->table;
}

static void skip_all(const char *why)
{
    fprintf(stderr,
            "\n**********************************************************************\n"
            "*** SKIPPING: %s\n"
            "**********************************************************************\n\n",
            why);
    vt_test_fixtures_skipped = 1;
}

/* 1 when both backends are up; otherwise the case is skipped (0). */
static int ready(void)
{
    if (g_state == 0) {
        g_state = -1;
        /* the float kernels everywhere (exact dequantisation, float32
         * activations): the bounds below are theirs; the one-token int8
         * kernels are checked by test_cuda_quant and, in the model, below */
        setenv("VT_GPU_INT8_DOT", "0", 1);
        setenv("VT_GPU_GEMM", "cublas", 1); /* no TF32 tensor-core prefill: test_cuda_quant's */
        if (!VT_GPU_TEST_BUILT) {
            if (VT_GPU_TEST_REQUIRED)
                fail_msg("backend-cuda was not built although CMake ran with CI=true and found "
                         "its toolchain: %s", VT_GPU_TEST_WHY);
            skip_all("backend-cuda was not built: " VT_GPU_TEST_WHY);
        } else {
            G = load_api("cuda");
            C = load_api("cpu");
            int n = G->device_count();
            if (n == 0) {
                skip_all("backend-cuda reports no CUDA device on this machine: the op checks "
                         "against backend-cpu need one (they run on the H200)");
            } else {
                vt_backend_params bp = {.struct_size = sizeof bp, .device = 0,
                                        .host = vt_host_table()};
                if (G->init(&bp, &gctx) != VT_OK) fail_msg("cuda init: %s", vt_last_error());
                setenv("VT_GPU_GEMM", "tiled", 1);
                if (G->init(&bp, &tctx) != VT_OK) fail_msg("cuda init (tiled): %s", vt_last_error());
                setenv("VT_GPU_GEMM", "cublas", 1);
                vt_backend_params cp = {.struct_size = sizeof cp, .device = 0, .n_threads = 0,
                                        .kernels = "scalar", .host = vt_host_table()};
                if (C->init(&cp, &cctx) != VT_OK) fail_msg("cpu init: %s", vt_last_error());
                char name[256] = "?";
                G->device_name(0, name, sizeof name);
                fprintf(stderr, "backend-cuda: device 0 of %d: %s\n", n, name);
                g_state = 1;
            }
        }
    }
    if (g_state != 1) {
        skip();
        return 0;
    }
    return 1;
}

static int teardown(void **s)
{
    (void)s;
    if (gctx) G->shutdown(gctx);
    if (tctx) G->shutdown(tctx);
    if (cctx) C->shutdown(cctx);
    gctx = tctx = cctx = NULL;
    return 0;
}

/* ---------------------------------------------------------------- helpers */

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static uint32_t rnd32(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}

/* uniform in [lo, hi) */
static float urand(float lo, float hi) { return lo + (hi - lo) * (float)(rnd32() >> 8) * (1.0f / 16777216.0f); }

static float *fbuf(size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(p);
    return p;
}

static void fill_u(float *p, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++) p[i] = urand(lo, hi);
}

static void fill_c(float *p, size_t n, float v)
{
    for (size_t i = 0; i < n; i++) p[i] = v;
}

/* [rows][ld] random in [lo, hi), padding columns NaN */
static float *strided(int64_t rows, int64_t cols, int64_t ld, float lo, float hi)
{
    float *p = fbuf((size_t)(rows * ld));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < ld; c++) p[r * ld + c] = c < cols ? urand(lo, hi) : NAN;
    return p;
}

static void *dput(const void *h, size_t bytes)
{
    void *d = NULL;
    if (G->alloc(gctx, bytes ? bytes : 4, "test", &d) != VT_OK) fail_msg("alloc: %s", vt_last_error());
    if (h && bytes && G->copy_h2d(gctx, d, h, bytes) != VT_OK) fail_msg("h2d: %s", vt_last_error());
    return d;
}

static void dget(void *h, const void *d, size_t bytes)
{
    if (G->copy_d2h(gctx, h, d, bytes) != VT_OK) fail_msg("d2h: %s", vt_last_error());
}

static void dfree(void *d) { G->free(gctx, d); }

/* Compare n floats: |got - ref| <= (tol ? tol[i] : 0) + abs + rel·|ref|, NaN
 * only where ref is NaN (same bits not required). Prints one line of
 * numbers; fails naming the first bad element. Returns max |Δ|. */
static double compare(const char *what, const float *got, const float *ref, int64_t n,
                      const double *tol, double abs_tol, double rel_tol)
{
    double max_abs = 0, max_rel = 0, worst = 0;
    int64_t bad = -1;
    for (int64_t i = 0; i < n; i++) {
        double g = got[i], r = ref[i];
        if (isnan(r) || isnan(g)) {
            if (!(isnan(r) && isnan(g)) && bad < 0) bad = i;
            continue;
        }
        double d = fabs(g - r), t = (tol ? tol[i] : 0.0) + abs_tol + rel_tol * fabs(r);
        if (d > max_abs) max_abs = d;
        if (fabs(r) > 1e-30 && d / fabs(r) > max_rel) max_rel = d / fabs(r);
        if (t > 0 && d / t > worst) worst = d / t;
        if (d > t && bad < 0) bad = i;
    }
    fprintf(stderr, "  %-58s max|d| %.3g  max rel %.3g  worst d/tol %.3g\n", what, max_abs,
            max_rel, worst);
    if (bad >= 0) {
        double t = (tol ? tol[bad] : 0.0) + abs_tol + rel_tol * fabs((double)ref[bad]);
        fail_msg("%s: element %lld: cuda %.9g, cpu %.9g (|d| %.3g > tol %.3g)", what,
                 (long long)bad, (double)got[bad], (double)ref[bad],
                 fabs((double)got[bad] - (double)ref[bad]), t);
    }
    return max_abs;
}

#define OKC(call)                                                                              \
    do {                                                                                       \
        vt_status st_ = (call);                                                                \
        if (st_ != VT_OK) fail_msg("%s: %s", #call, vt_last_error());                          \
    } while (0)

/* ---------------------------------------------------------------- weights */

static uint16_t f32_to_bf16_trunc(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return (uint16_t)(b >> 16);
}

/* f16 bits of f, which must be 0 or a normal f16 value exactly (k/16). */
static uint16_t f16_exact(float f)
{
    if (f == 0.0f) return 0;
    uint32_t b;
    memcpy(&b, &f, 4);
    uint32_t s = (b >> 16) & 0x8000u, e = (b >> 23) & 255u, m = b & 0x7fffffu;
    return (uint16_t)(s | ((e - 127 + 15) << 10) | (m >> 13));
}

/* Random f16 bits with exponent field in [e0, e1] (normal values). */
static uint16_t f16_rand(unsigned e0, unsigned e1)
{
    unsigned e = e0 + rnd32() % (e1 - e0 + 1);
    return (uint16_t)(((rnd32() & 1u) << 15) | (e << 10) | (rnd32() & 1023u));
}

/* A weight [n_out][n_in] of type t: exact ? values k/16 (Q8_0: d = 2^-7) :
 * random. Returns host bytes; *rb the row bytes. */
static uint8_t *make_weight(uint32_t t, int64_t n_in, int64_t n_out, int exact, size_t *rb)
{
    *rb = (size_t)vt_type_row_bytes(t, (uint64_t)n_in);
    uint8_t *w = malloc(*rb * (size_t)n_out + 1);
    assert_non_null(w);
    for (int64_t o = 0; o < n_out; o++) {
        uint8_t *row = w + (size_t)o * *rb;
        if (t == VT_TYPE_Q8_0) {
            for (int64_t b = 0; b < n_in / 32; b++) {
                uint8_t *blk = row + b * 34;
                uint16_t d = exact ? 0x2000u : f16_rand(6, 9); /* 2^-7; random 2^-9 .. 2^-6 */
                blk[0] = (uint8_t)d;
                blk[1] = (uint8_t)(d >> 8);
                for (int i = 0; i < 32; i++) blk[2 + i] = (uint8_t)rnd32();
            }
            continue;
        }
        for (int64_t i = 0; i < n_in; i++) {
            float v = exact ? (float)((int)(rnd32() % 33) - 16) / 16.0f : urand(-1.0f, 1.0f);
            if (t == VT_TYPE_F32) {
                memcpy(row + 4 * i, &v, 4);
            } else {
                uint16_t h = t == VT_TYPE_BF16 ? f32_to_bf16_trunc(v)
                             : exact            ? f16_exact(v)
                                                : f16_rand(10, 15);
                row[2 * i] = (uint8_t)h;
                row[2 * i + 1] = (uint8_t)(h >> 8);
            }
        }
    }
    return w;
}

/* ---------------------------------------------------------------- mat_mul */

static const uint32_t TYPES[4] = {VT_TYPE_F32, VT_TYPE_F16, VT_TYPE_BF16, VT_TYPE_Q8_0};

static void mm_case(uint32_t t, int64_t n_in, int64_t n_out, int64_t T, int exact)
{
    size_t rb;
    uint8_t *wh = make_weight(t, n_in, n_out, exact, &rb);
    const int64_t ldx = n_in + 5, ldy = n_out + 3;
    float *x = strided(T, n_in, ldx, -1.0f, 1.0f);
    if (exact)
        for (int64_t r = 0; r < T; r++)
            for (int64_t i = 0; i < n_in; i++) x[r * ldx + i] = (float)((int)(rnd32() % 33) - 16) / 16.0f;
    size_t ny = (size_t)(T * ldy);
    float *yc = fbuf(ny), *yg = fbuf(ny);
    fill_c(yc, ny, 1234.5f);

    vt_weight wc = {t, n_in, n_out, rb, wh, "test.w"};
    OKC(C->mat_mul[t](cctx, &wc, x, ldx, yc, ldy, T));

    /* tolerance from the dequantised rows (the CPU's get_rows is exact) */
    double *tol = calloc(ny, sizeof(double));
    assert_non_null(tol);
    if (!exact) {
        float *wf = fbuf((size_t)(n_in * n_out));
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)n_out);
        for (int64_t o = 0; o < n_out; o++) ids[o] = (int32_t)o;
        OKC(C->get_rows[t](cctx, &wc, ids, n_out, wf));
        double *wn = calloc((size_t)n_out, sizeof(double));
        assert_non_null(wn);
        for (int64_t o = 0; o < n_out; o++)
            for (int64_t i = 0; i < n_in; i++) wn[o] += (double)wf[o * n_in + i] * wf[o * n_in + i];
        for (int64_t r = 0; r < T; r++) {
            double xn = 0;
            for (int64_t i = 0; i < n_in; i++) xn += (double)x[r * ldx + i] * x[r * ldx + i];
            for (int64_t o = 0; o < n_out; o++)
                tol[r * ldy + o] = 4.0 * sqrt((double)n_in) * U32 * sqrt(wn[o]) * sqrt(xn);
        }
        free(wn);
        free(wf);
        free(ids);
    }

    void *wd = dput(wh, rb * (size_t)n_out);
    float *xd = dput(x, sizeof(float) * (size_t)(T * ldx));
    vt_weight wg = {t, n_in, n_out, rb, wd, "test.w"};
    for (int path = 0; path < 2; path++) {
        if (path == 1 && T <= 8) break; /* decode kernel: the same for both contexts */
        vt_backend_ctx *ctx = path ? tctx : gctx;
        fill_c(yg, ny, 1234.5f);
        float *yd = dput(yg, sizeof(float) * ny);
        OKC(G->mat_mul[t](ctx, &wg, xd, ldx, yd, ldy, T));
        dget(yg, yd, sizeof(float) * ny);
        dfree(yd);
        char what[160];
        snprintf(what, sizeof what, "mat_mul %s n_in %lld n_out %lld T %lld %s%s",
                 vt_type_name(t), (long long)n_in, (long long)n_out, (long long)T,
                 exact ? "exact" : "random", T <= 8 ? " [vec]" : path ? " [tiled]" : " [gemm]");
        compare(what, yg, yc, (int64_t)ny, tol, 0.0, 0.0);
    }
    dfree(wd);
    dfree(xd);
    free(tol);
    free(wh);
    free(x);
    free(yc);
    free(yg);
}

static void test_mat_mul(void **s)
{
    (void)s;
    if (!ready()) return;
    static const int64_t n_ins[] = {96, 160, 4096 + 32};
    static const int64_t n_outs[] = {1, 7, 333};
    static const int64_t Ts[] = {1, 3, 17, 64};
    for (int ti = 0; ti < 4; ti++)
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++)
                for (int c = 0; c < 4; c++) mm_case(TYPES[ti], n_ins[a], n_outs[b], Ts[c], 0);
    for (int ti = 0; ti < 4; ti++) {
        mm_case(TYPES[ti], 4096 + 32, 333, 1, 1);
        mm_case(TYPES[ti], 4096 + 32, 333, 8, 1);
        mm_case(TYPES[ti], 4096 + 32, 333, 64, 1);
    }
    /* more rows than one 64 MiB dequantisation chunk (4064 rows of 4128) */
    mm_case(VT_TYPE_Q8_0, 4096 + 32, 4100, 17, 0);
    mm_case(VT_TYPE_BF16, 4096 + 32, 4100, 9, 1);
}

static void test_get_rows(void **s)
{
    (void)s;
    if (!ready()) return;
    for (int ti = 0; ti < 4; ti++) {
        const int64_t n_in = 160, n_out = 37, n = 11;
        size_t rb;
        uint8_t *wh = make_weight(TYPES[ti], n_in, n_out, 0, &rb);
        int32_t ids[11] = {0, 36, 5, 5, 17, 0, 1, 2, 35, 36, 20};
        float *oc = fbuf((size_t)(n * n_in)), *og = fbuf((size_t)(n * n_in));
        vt_weight wc = {TYPES[ti], n_in, n_out, rb, wh, "test.rows"};
        OKC(C->get_rows[TYPES[ti]](cctx, &wc, ids, n, oc));
        void *wd = dput(wh, rb * (size_t)n_out);
        vt_weight wg = wc;
        wg.data = wd;
        float *od = dput(NULL, sizeof(float) * (size_t)(n * n_in));
        OKC(G->get_rows[TYPES[ti]](gctx, &wg, ids, n, od));
        memset(ids, 0xff, sizeof ids); /* host ids may be reused once the op returns */
        dget(og, od, sizeof(float) * (size_t)(n * n_in));
        char what[64];
        snprintf(what, sizeof what, "get_rows %s", vt_type_name(TYPES[ti]));
        compare(what, og, oc, n * n_in, NULL, 0.0, 0.0);
        /* out of range: refused by name */
        int32_t bad = (int32_t)n_out;
        vt_clear_error();
        assert_int_equal(G->get_rows[TYPES[ti]](gctx, &wg, &bad, 1, od), VT_ERR_RANGE);
        assert_non_null(strstr(vt_last_error(), "get_rows"));
        dfree(wd);
        dfree(od);
        free(wh);
        free(oc);
        free(og);
    }
}

/* ---------------------------------------------------------------- norms */

static void norm_case(int l2, int64_t rows, int64_t n, int with_w, int in_place)
{
    const int64_t ldx = n + 3, ldy = in_place ? ldx : n + 1;
    float *x = strided(rows, n, ldx, -2.0f, 2.0f);
    float *w = fbuf((size_t)n);
    fill_u(w, (size_t)n, 0.5f, 1.5f);
    size_t ny = (size_t)(rows * ldy);
    float *yc = fbuf(ny), *yg = fbuf(ny);
    if (in_place) {
        memcpy(yc, x, ny * sizeof(float));
    } else {
        fill_c(yc, ny, 7.0f);
    }
    float *xd = dput(x, sizeof(float) * (size_t)(rows * ldx));
    float *wd = dput(w, sizeof(float) * (size_t)n);
    float *yd = in_place ? xd : dput(yc, sizeof(float) * ny);
    const float eps = 1e-6f;
    if (l2) {
        OKC(C->l2_norm(cctx, in_place ? yc : x, ldx, yc, ldy, rows, n, eps));
        OKC(G->l2_norm(gctx, xd, ldx, yd, ldy, rows, n, eps));
    } else {
        OKC(C->rms_norm(cctx, in_place ? yc : x, ldx, with_w ? w : NULL, yc, ldy, rows, n, eps));
        OKC(G->rms_norm(gctx, xd, ldx, with_w ? wd : NULL, yd, ldy, rows, n, eps));
    }
    dget(yg, yd, sizeof(float) * ny);
    char what[128];
    snprintf(what, sizeof what, "%s rows %lld n %lld%s%s", l2 ? "l2_norm" : "rms_norm",
             (long long)rows, (long long)n, with_w ? " weighted" : "", in_place ? " in place" : "");
    compare(what, yg, yc, (int64_t)ny, NULL, 0.0, 8.0 * U32);
    dfree(xd);
    dfree(wd);
    if (!in_place) dfree(yd);
    free(x);
    free(w);
    free(yc);
    free(yg);
}

static void test_norms(void **s)
{
    (void)s;
    if (!ready()) return;
    static const int64_t rows[] = {1, 3, 17, 64};
    /* several rows of at most 512: one warp per row; longer: a block per row */
    static const int64_t ns[] = {64, 96, 128, 500, 512, 513, 4096 + 32};
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 7; b++) {
            norm_case(0, rows[a], ns[b], 1, 0);
            norm_case(0, rows[a], ns[b], 0, 0);
            norm_case(1, rows[a], ns[b], 0, 0);
        }
    norm_case(0, 17, 256, 1, 1);
    norm_case(1, 17, 128, 0, 1);
    /* one-row kernel (1024 threads, up to 4 values each) around its limits and
     * the model widths, and the 256-thread kernel's cached limit (16 x 256) */
    static const int64_t row_ns[] = {1, 31, 1000, 1024, 1025, 2048, 2816, 4095, 4096, 4097};
    for (size_t b = 0; b < sizeof row_ns / sizeof row_ns[0]; b++) {
        norm_case(0, 1, row_ns[b], 1, 0);
        norm_case(1, 1, row_ns[b], 0, 0);
        norm_case(0, 2, row_ns[b], 1, b & 1);
    }
    norm_case(0, 1, 2048, 1, 1);
}

/* ---------------------------------------------------------------- rope */

static void rope_case(int64_t T, int64_t n_head, int64_t hd, int64_t n_rot, int with_ff)
{
    const int64_t ld_head = hd + 6, ld_token = n_head * ld_head + 2;
    size_t nx = (size_t)(T * ld_token);
    float *x = fbuf(nx);
    fill_u(x, nx, -2.0f, 2.0f);
    float *xc = fbuf(nx), *xg = fbuf(nx);
    memcpy(xc, x, nx * sizeof(float));
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)T);
    for (int64_t t = 0; t < T; t++) pos[t] = (int32_t)(rnd32() % 5000);
    float *ff = fbuf((size_t)(n_rot / 2));
    fill_u(ff, (size_t)(n_rot / 2), 1.0f, 8.0f);
    float *xd = dput(x, nx * sizeof(float));
    float *ffd = dput(ff, sizeof(float) * (size_t)(n_rot / 2));
    OKC(C->rope_neox(cctx, xc, ld_token, ld_head, T, n_head, n_rot, pos, 10000.0f, with_ff ? ff : NULL));
    OKC(G->rope_neox(gctx, xd, ld_token, ld_head, T, n_head, n_rot, pos, 10000.0f,
                     with_ff ? ffd : NULL));
    dget(xg, xd, nx * sizeof(float));
    char what[128];
    snprintf(what, sizeof what, "rope_neox T %lld heads %lld head_dim %lld n_rot %lld%s",
             (long long)T, (long long)n_head, (long long)hd, (long long)n_rot,
             with_ff ? " freq_factors" : "");
    compare(what, xg, xc, (int64_t)nx, NULL, 1e-14, 2.0 * U32);
    dfree(xd);
    dfree(ffd);
    free(x);
    free(xc);
    free(xg);
    free(pos);
    free(ff);
}

static void test_rope(void **s)
{
    (void)s;
    if (!ready()) return;
    rope_case(1, 4, 64, 16, 0);
    rope_case(5, 3, 64, 64, 0);
    rope_case(17, 2, 128, 32, 1);
    rope_case(64, 4, 256, 64, 0);
}

/* ---------------------------------------------------------------- attention */

static void attn_case(int64_t T, int64_t n_head, int64_t n_head_kv, int64_t hd, int64_t pos0,
                      int64_t window, float softcap)
{
    const int64_t n_kv = pos0 + T, ldq_head = 2 * hd, ldq = n_head * ldq_head + 3;
    const int64_t ldo = n_head * hd + 4, kvd = n_head_kv * hd;
    size_t nq = (size_t)(T * ldq), nkv = (size_t)(n_kv * kvd), no = (size_t)(T * ldo);
    float *q = fbuf(nq), *k = fbuf(nkv), *v = fbuf(nkv), *oc = fbuf(no), *og = fbuf(no);
    fill_u(q, nq, -1.0f, 1.0f);
    fill_u(k, nkv, -1.0f, 1.0f);
    fill_u(v, nkv, -2.0f, 2.0f);
    fill_c(oc, no, -3.0f);
    const float scale = 1.0f / sqrtf((float)hd);
    OKC(C->attention(cctx, q, ldq, ldq_head, k, v, oc, ldo, T, n_head, n_head_kv, hd, pos0, n_kv,
                     window, scale, softcap));
    float *qd = dput(q, nq * sizeof(float)), *kd = dput(k, nkv * sizeof(float));
    float *vd = dput(v, nkv * sizeof(float)), *od = dput(oc, no * sizeof(float));
    fill_c(og, no, -3.0f);
    G->copy_h2d(gctx, od, og, no * sizeof(float));
    OKC(G->attention(gctx, qd, ldq, ldq_head, kd, vd, od, ldo, T, n_head, n_head_kv, hd, pos0, n_kv,
                     window, scale, softcap));
    dget(og, od, no * sizeof(float));
    /* the bound of the header comment, from the data */
    double qmax = 0, kmax = 0, vmax = 0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < n_head; h++) {
            double s2 = 0;
            for (int64_t e = 0; e < hd; e++) s2 += (double)q[t * ldq + h * ldq_head + e] * q[t * ldq + h * ldq_head + e];
            if (s2 > qmax) qmax = s2;
        }
    for (int64_t r = 0; r < n_kv * n_head_kv; r++) {
        double s2 = 0;
        for (int64_t e = 0; e < hd; e++) s2 += (double)k[r * hd + e] * k[r * hd + e];
        if (s2 > kmax) kmax = s2;
    }
    for (size_t i = 0; i < nkv; i++)
        if (fabs(v[i]) > vmax) vmax = fabs(v[i]);
    double ds = ((double)hd / 32 + 6) * U32 * scale * sqrt(qmax) * sqrt(kmax);
    double tol = vmax * (4 * ds + 4 * ((double)n_kv / 4 + 16) * U32);
    char what[160];
    snprintf(what, sizeof what, "attention T %lld h %lld/%lld hd %lld pos0 %lld win %lld cap %g",
             (long long)T, (long long)n_head, (long long)n_head_kv, (long long)hd, (long long)pos0,
             (long long)window, (double)softcap);
    compare(what, og, oc, (int64_t)no, NULL, tol, 0.0);
    dfree(qd);
    dfree(kd);
    dfree(vd);
    dfree(od);
    free(q);
    free(k);
    free(v);
    free(oc);
    free(og);
}

static void test_attention(void **s)
{
    (void)s;
    if (!ready()) return;
    attn_case(1, 4, 2, 64, 36, 0, 0.0f);    /* decode */
    attn_case(1, 8, 1, 128, 700, 0, 0.0f);  /* decode, long cache, GQA 8 */
    attn_case(17, 4, 2, 64, 5, 0, 0.0f);    /* prefill after a prefix */
    attn_case(64, 4, 4, 256, 0, 0, 0.0f);   /* prefill, no GQA, head_dim 256 */
    attn_case(33, 4, 2, 64, 10, 7, 0.0f);   /* sliding window */
    attn_case(3, 2, 1, 96, 40, 0, 30.0f);   /* softcap, odd head_dim */
    attn_case(5, 2, 2, 512, 3, 4, 50.0f);   /* head_dim 512, window, softcap */
    /* 16 tokens and more, with at least as many (token, head) pairs as the
     * device has SMs (fewer take the split kernel): the tiled kernel (16
     * queries x 32 keys per tile) */
    attn_case(16, 16, 2, 64, 0, 0, 0.0f);   /* exactly one query tile */
    attn_case(47, 8, 2, 128, 9, 0, 0.0f);   /* partial tiles, prefix not a tile multiple */
    attn_case(130, 16, 2, 256, 0, 0, 0.0f); /* Qwen3.5's full-attention shape */
    attn_case(100, 4, 4, 256, 3, 20, 0.0f); /* window shorter than a key tile */
    attn_case(70, 4, 2, 512, 0, 0, 0.0f);   /* head_dim 512: four column chunks */
    attn_case(65, 8, 8, 384, 200, 64, 0.0f); /* three chunks, window, long prefix */
    attn_case(33, 8, 2, 96, 0, 0, 30.0f);   /* softcap, head_dim 96 */
    attn_case(40, 8, 1, 90, 5, 0, 0.0f);    /* head_dim not a multiple of 4: scalar loads */
    /* beyond the kernel's head_dim: refused by name */
    float *p = dput(NULL, 4096 * sizeof(float));
    vt_clear_error();
    assert_int_equal(G->attention(gctx, p, 1024, 1024, p, p, p, 1024, 1, 1, 1, 1024, 0, 1, 0, 1.0f, 0.0f),
                     VT_ERR_UNSUPPORTED);
    assert_non_null(strstr(vt_last_error(), "attention"));
    dfree(p);
}

/* ---------------------------------------------------------------- linear attention */

static void conv_case(int64_t T, int64_t n_ch, int64_t d_conv)
{
    const int64_t ldx = n_ch + 8, ldy = n_ch + 2;
    float *x = strided(T, n_ch, ldx, -2.0f, 2.0f);
    float *w = fbuf((size_t)(n_ch * d_conv));
    fill_u(w, (size_t)(n_ch * d_conv), -1.0f, 1.0f);
    size_t ns = (size_t)((d_conv - 1) * n_ch), ny = (size_t)(T * ldy);
    float *sc = fbuf(ns + 1), *sg = fbuf(ns + 1), *yc = fbuf(ny), *yg = fbuf(ny);
    fill_u(sc, ns, -2.0f, 2.0f);
    memcpy(sg, sc, ns * sizeof(float));
    fill_c(yc, ny, 5.0f);
    float *xd = dput(x, sizeof(float) * (size_t)(T * ldx)), *wd = dput(w, sizeof(float) * (size_t)(n_ch * d_conv));
    float *sd = dput(sg, ns * sizeof(float)), *yd = dput(yc, ny * sizeof(float));
    OKC(C->ssm_conv(cctx, x, ldx, w, sc, yc, ldy, T, n_ch, d_conv));
    OKC(G->ssm_conv(gctx, xd, ldx, wd, sd, yd, ldy, T, n_ch, d_conv));
    dget(yg, yd, ny * sizeof(float));
    dget(sg, sd, ns * sizeof(float));
    char what[128];
    snprintf(what, sizeof what, "ssm_conv T %lld n_ch %lld d_conv %lld: y", (long long)T,
             (long long)n_ch, (long long)d_conv);
    compare(what, yg, yc, (int64_t)ny, NULL, 1e-30, 2.0 * U32);
    snprintf(what, sizeof what, "ssm_conv T %lld n_ch %lld d_conv %lld: state", (long long)T,
             (long long)n_ch, (long long)d_conv);
    compare(what, sg, sc, (int64_t)ns, NULL, 0.0, 0.0);
    dfree(xd);
    dfree(wd);
    dfree(sd);
    dfree(yd);
    free(x);
    free(w);
    free(sc);
    free(sg);
    free(yc);
    free(yg);
}

static void test_ssm_conv(void **s)
{
    (void)s;
    if (!ready()) return;
    conv_case(1, 96, 4);
    conv_case(2, 1000, 4);
    conv_case(5, 1000, 4);
    conv_case(33, 513, 4);
    conv_case(64, 96, 3);
    /* token chunks of 16 (one thread per channel and chunk, then the state) */
    conv_case(16, 257, 4);
    conv_case(17, 130, 4);
    conv_case(50, 8192, 4);
    conv_case(31, 77, 5);
    conv_case(40, 64, 1);
}

static void l2_rows(float *p, int64_t rows, int64_t ld, int64_t n_heads, int64_t d, float sc)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t h = 0; h < n_heads; h++) {
            float *v = p + r * ld + h * d;
            double s2 = 0;
            for (int64_t i = 0; i < d; i++) s2 += (double)v[i] * v[i];
            for (int64_t i = 0; i < d; i++) v[i] = (float)(v[i] / sqrt(s2)) * sc;
        }
}

static void delta_case(int64_t T, int64_t n_k, int64_t n_v, int64_t d_k, int64_t d_v)
{
    const int64_t ldqk = n_k * d_k + 5, ldv = n_v * d_v + 3, ldo = n_v * d_v + 7;
    float *q = strided(T, n_k * d_k, ldqk, -1.0f, 1.0f), *k = strided(T, n_k * d_k, ldqk, -1.0f, 1.0f);
    l2_rows(q, T, ldqk, n_k, d_k, 1.0f / sqrtf((float)d_k));
    l2_rows(k, T, ldqk, n_k, d_k, 1.0f);
    float *v = strided(T, n_v * d_v, ldv, -1.0f, 1.0f);
    float *g = fbuf((size_t)(T * n_v)), *beta = fbuf((size_t)(T * n_v));
    fill_u(g, (size_t)(T * n_v), -2.0f, -0.01f);
    fill_u(beta, (size_t)(T * n_v), 0.05f, 0.95f);
    size_t ns = (size_t)(n_v * d_k * d_v), no = (size_t)(T * ldo);
    float *sc = fbuf(ns), *sg = fbuf(ns), *oc = fbuf(no), *og = fbuf(no);
    fill_u(sc, ns, -0.5f, 0.5f);
    memcpy(sg, sc, ns * sizeof(float));
    fill_c(oc, no, 9.0f);
    float *qd = dput(q, sizeof(float) * (size_t)(T * ldqk)), *kd = dput(k, sizeof(float) * (size_t)(T * ldqk));
    float *vd = dput(v, sizeof(float) * (size_t)(T * ldv)), *gd = dput(g, sizeof(float) * (size_t)(T * n_v));
    float *bd = dput(beta, sizeof(float) * (size_t)(T * n_v)), *sd = dput(sg, ns * sizeof(float));
    float *od = dput(oc, no * sizeof(float));
    OKC(C->gated_delta_net(cctx, q, k, ldqk, v, ldv, g, beta, sc, oc, ldo, T, n_k, n_v, d_k, d_v));
    OKC(G->gated_delta_net(gctx, qd, kd, ldqk, vd, ldv, gd, bd, sd, od, ldo, T, n_k, n_v, d_k, d_v));
    dget(og, od, no * sizeof(float));
    dget(sg, sd, ns * sizeof(float));
    double omax = 0, smax = 0;
    for (size_t i = 0; i < no; i++)
        if (fabs(oc[i]) > omax) omax = fabs(oc[i]);
    for (size_t i = 0; i < ns; i++)
        if (fabs(sc[i]) > smax) smax = fabs(sc[i]);
    char what[128];
    snprintf(what, sizeof what, "gated_delta_net T %lld n_k %lld n_v %lld d_k %lld d_v %lld: out",
             (long long)T, (long long)n_k, (long long)n_v, (long long)d_k, (long long)d_v);
    compare(what, og, oc, (int64_t)no, NULL, 64.0 * U32 * (double)T * omax, 0.0);
    snprintf(what, sizeof what, "gated_delta_net T %lld n_k %lld n_v %lld d_k %lld d_v %lld: state",
             (long long)T, (long long)n_k, (long long)n_v, (long long)d_k, (long long)d_v);
    compare(what, sg, sc, (int64_t)ns, NULL, 64.0 * U32 * (double)T * smax, 0.0);
    dfree(qd);
    dfree(kd);
    dfree(vd);
    dfree(gd);
    dfree(bd);
    dfree(sd);
    dfree(od);
    free(q);
    free(k);
    free(v);
    free(g);
    free(beta);
    free(sc);
    free(sg);
    free(oc);
    free(og);
}

static void test_gated_delta_net(void **s)
{
    (void)s;
    if (!ready()) return;
    delta_case(1, 2, 4, 64, 64);   /* qwen35moe-tiny's shape, decode */
    delta_case(4, 2, 4, 64, 64);
    delta_case(33, 2, 4, 64, 64);
    delta_case(17, 1, 3, 32, 160); /* two column strips, odd d_v */
    delta_case(8, 16, 32, 128, 128); /* a real model's shape */
    delta_case(70, 16, 32, 128, 128); /* ... over a prefill chunk (registers kernel) */
    delta_case(9, 2, 3, 128, 72);  /* registers kernel: a partial strip of columns */
    delta_case(6, 1, 2, 256, 32);  /* registers kernel, d_k 256 */
    delta_case(5, 2, 3, 48, 40);   /* d_k without a registers kernel: the global-state one */
}

/* ---------------------------------------------------------------- elementwise */

static void test_elementwise(void **s)
{
    (void)s;
    if (!ready()) return;
    const int64_t n = 3 * 1000 + 3, nr = 3, nc = 1001;
    float *x = fbuf((size_t)n), *yc = fbuf((size_t)n), *yg = fbuf((size_t)n);
    fill_u(x, (size_t)n, -30.0f, 30.0f);
    x[0] = 0.0f;
    x[1] = 20.0f;
    x[2] = -0.0f;
    x[3] = 1e-3f;
    float *xd = dput(x, sizeof(float) * (size_t)n), *yd = dput(NULL, sizeof(float) * (size_t)n);
    static const char *names[] = {"silu", "sigmoid", "softplus", "gelu_tanh", "exp", "tanh"};
    for (int op = VT_UNARY_SILU; op <= VT_UNARY_TANH; op++) {
        OKC(C->unary(cctx, (vt_unary_op)op, x, yc, n));
        OKC(G->unary(gctx, (vt_unary_op)op, xd, yd, n));
        dget(yg, yd, sizeof(float) * (size_t)n);
        char what[64];
        snprintf(what, sizeof what, "unary %s (x in [-30, 30])", names[op]);
        compare(what, yg, yc, n, NULL, 1e-30, 2.0 * U32);
    }
    /* in place */
    float *xc = fbuf((size_t)n);
    memcpy(xc, x, sizeof(float) * (size_t)n);
    OKC(C->unary(cctx, VT_UNARY_SILU, xc, xc, n));
    float *xd2 = dput(x, sizeof(float) * (size_t)n);
    OKC(G->unary(gctx, VT_UNARY_SILU, xd2, xd2, n));
    dget(yg, xd2, sizeof(float) * (size_t)n);
    compare("unary silu in place", yg, xc, n, NULL, 1e-30, 2.0 * U32);

    /* binary: nb = n (same shape), nb = one row, nb = 1; y aliasing a */
    float *b = fbuf((size_t)n);
    fill_u(b, (size_t)n, -3.0f, 3.0f);
    float *bd = dput(b, sizeof(float) * (size_t)n);
    const int64_t nbs[] = {n, nc, 1};
    for (int op = 0; op < 2; op++)
        for (int i = 0; i < 3; i++) {
            int64_t nb = nbs[i];
            if (nb == nc && n % nc) continue;
            OKC(C->binary(cctx, (vt_binary_op)op, x, b, yc, n, nb));
            OKC(G->binary(gctx, (vt_binary_op)op, xd, bd, yd, n, nb));
            dget(yg, yd, sizeof(float) * (size_t)n);
            char what[64];
            snprintf(what, sizeof what, "binary %s nb %lld", op ? "mul" : "add", (long long)nb);
            compare(what, yg, yc, n, NULL, 0.0, 0.0);
        }
    memcpy(xc, x, sizeof(float) * (size_t)n);
    G->copy_h2d(gctx, xd2, x, sizeof(float) * (size_t)n);
    OKC(C->binary(cctx, VT_BINARY_MUL, xc, b, xc, n, nc));
    OKC(G->binary(gctx, VT_BINARY_MUL, xd2, bd, xd2, n, nc));
    dget(yg, xd2, sizeof(float) * (size_t)n);
    compare("binary mul in place, nb one row", yg, xc, n, NULL, 0.0, 0.0);

    OKC(C->scale(cctx, x, yc, n, 0.3f));
    OKC(G->scale(gctx, xd, yd, n, 0.3f));
    dget(yg, yd, sizeof(float) * (size_t)n);
    compare("scale 0.3", yg, yc, n, NULL, 0.0, 0.0);

    OKC(C->mul_rows(cctx, x, b, yc, nr, nc));
    OKC(G->mul_rows(gctx, xd, bd, yd, nr, nc));
    dget(yg, yd, sizeof(float) * (size_t)(nr * nc));
    compare("mul_rows 3 x 1001", yg, yc, nr * nc, NULL, 0.0, 0.0);
    dfree(xd);
    dfree(xd2);
    dfree(yd);
    dfree(bd);
    free(x);
    free(xc);
    free(b);
    free(yc);
    free(yg);
}

/* ---------------------------------------------------------------- ABI 1.3 fusions */

/* mul_act against its definition on the CPU: unary(op) into a temporary,
 * then binary(MUL), row by row (the CPU declares the fusion ABSENT; its
 * scalar composition is the reference). alias: 0 y separate, 1 y = b,
 * 2 y = a (same stride). Each element is op rounded once (1 ulp of libm
 * apart at most) times b: |Δ| <= 2u·|y| (+1e-30 for underflow). */
static void mul_act_case(int op, int64_t rows, int64_t cols, int alias)
{
    const int64_t lda = alias == 2 ? cols + 2 : cols + 3, ldb = alias == 1 ? cols + 2 : 2 * cols + 1;
    const int64_t ldy = alias == 1 ? ldb : alias == 2 ? lda : cols + 2;
    float *a = strided(rows, cols, lda, -12.0f, 12.0f), *b = strided(rows, cols, ldb, -3.0f, 3.0f);
    const size_t ny = (size_t)(rows * ldy);
    float *yc = alias == 1 ? b : alias == 2 ? a : fbuf(ny), *yg = fbuf(ny), *tmp = fbuf((size_t)cols);
    if (!alias) fill_c(yc, ny, 5.5f);
    float *ad = dput(a, sizeof(float) * (size_t)(rows * lda));
    float *bd = dput(b, sizeof(float) * (size_t)(rows * ldb));
    float *yd = alias == 1 ? bd : alias == 2 ? ad : dput(yc, sizeof(float) * ny);
    OKC(G->mul_act(gctx, (vt_unary_op)op, ad, lda, bd, ldb, yd, ldy, rows, cols));
    for (int64_t r = 0; r < rows; r++) {
        OKC(C->unary(cctx, (vt_unary_op)op, a + r * lda, tmp, cols));
        OKC(C->binary(cctx, VT_BINARY_MUL, tmp, b + r * ldb, yc + r * ldy, cols, cols));
    }
    dget(yg, yd, sizeof(float) * ny);
    char what[128];
    snprintf(what, sizeof what, "mul_act op %d rows %lld cols %lld%s", op, (long long)rows,
             (long long)cols, alias == 1 ? " y = b" : alias == 2 ? " y = a" : "");
    compare(what, yg, yc, (int64_t)ny, NULL, 1e-30, 2.0 * U32);
    dfree(ad);
    dfree(bd);
    if (!alias) {
        dfree(yd);
        free(yc);
    }
    free(a);
    free(b);
    free(yg);
    free(tmp);
}

/* add_rms_norm against unary(SIGMOID) of the gate, mul_rows of a, binary(ADD)
 * into x and rms_norm, on the CPU. x must match to the sigmoid's ulp
 * (|Δx| <= 2u·|s·a| + u·|x|, exact without a gate), y as rms_norm's bound
 * plus what x's difference moves: 16u·|y|. with_y 0: only the addition. */
static void add_norm_case(int64_t rows, int64_t n, int with_gate, int with_w, int with_y)
{
    const int64_t ldx = n + 3, lda = n + 1, ldy = n + 2;
    float *x = strided(rows, n, ldx, -2.0f, 2.0f), *a = strided(rows, n, lda, -2.0f, 2.0f);
    float *gate = fbuf((size_t)rows), *w = fbuf((size_t)n), *tmp = fbuf((size_t)n);
    fill_u(gate, (size_t)rows, -6.0f, 6.0f);
    fill_u(w, (size_t)n, 0.5f, 1.5f);
    const size_t nx = (size_t)(rows * ldx), ny = (size_t)(rows * ldy);
    float *xc = fbuf(nx), *xg = fbuf(nx), *yc = fbuf(ny), *yg = fbuf(ny), *sg = fbuf((size_t)rows);
    memcpy(xc, x, nx * sizeof(float));
    fill_c(yc, ny, 9.0f);
    float *xd = dput(x, sizeof(float) * nx), *ad = dput(a, sizeof(float) * (size_t)(rows * lda));
    float *gd = dput(gate, sizeof(float) * (size_t)rows), *wd = dput(w, sizeof(float) * (size_t)n);
    float *yd = dput(yc, sizeof(float) * ny);
    OKC(G->add_rms_norm(gctx, xd, ldx, ad, lda, with_gate ? gd : NULL, with_w ? wd : NULL,
                        with_y ? yd : NULL, ldy, rows, n, 1e-6f));
    OKC(C->unary(cctx, VT_UNARY_SIGMOID, gate, sg, rows));
    double *xtol = calloc(nx, sizeof(double));
    assert_non_null(xtol);
    for (int64_t r = 0; r < rows; r++) {
        const float *ar = a + r * lda;
        if (with_gate) {
            OKC(C->mul_rows(cctx, ar, sg + r, tmp, 1, n));
            ar = tmp;
            for (int64_t i = 0; i < n; i++)
                xtol[r * ldx + i] = 2.0 * U32 * fabs((double)tmp[i]) + U32 * fabs((double)xc[r * ldx + i] + tmp[i]);
        }
        OKC(C->binary(cctx, VT_BINARY_ADD, xc + r * ldx, ar, xc + r * ldx, n, n));
    }
    if (with_y) OKC(C->rms_norm(cctx, xc, ldx, with_w ? w : NULL, yc, ldy, rows, n, 1e-6f));
    dget(xg, xd, sizeof(float) * nx);
    dget(yg, yd, sizeof(float) * ny);
    char what[128];
    snprintf(what, sizeof what, "add_rms_norm rows %lld n %lld%s%s%s: x", (long long)rows,
             (long long)n, with_gate ? " gate" : "", with_w ? " weighted" : "",
             with_y ? "" : " (add only)");
    compare(what, xg, xc, (int64_t)nx, xtol, 0.0, 0.0);
    snprintf(what, sizeof what, "add_rms_norm rows %lld n %lld%s%s%s: y", (long long)rows,
             (long long)n, with_gate ? " gate" : "", with_w ? " weighted" : "",
             with_y ? "" : " (add only, y untouched)");
    compare(what, yg, yc, (int64_t)ny, NULL, 0.0, with_y ? 16.0 * U32 : 0.0);
    dfree(xd);
    dfree(ad);
    dfree(gd);
    dfree(wd);
    dfree(yd);
    free(x);
    free(a);
    free(gate);
    free(w);
    free(tmp);
    free(xc);
    free(xg);
    free(yc);
    free(yg);
    free(sg);
    free(xtol);
}

/* delta_net_gates against unary(SIGMOID), binary(ADD), unary(SOFTPLUS),
 * binary(MUL) on the CPU: each activation rounded once (1 ulp of libm),
 * |Δ| <= 2u·|y| (+1e-30). in_place: b and alpha are beta and g (stride n_v). */
static void gates_case(int64_t T, int64_t nv, int in_place)
{
    const int64_t ld = in_place ? nv : 3 * nv + 5;
    float *b = strided(T, nv, ld, -8.0f, 8.0f), *al = strided(T, nv, ld, -25.0f, 25.0f);
    float *dt = fbuf((size_t)nv), *sa = fbuf((size_t)nv);
    fill_u(dt, (size_t)nv, 0.5f, 1.5f);
    fill_u(sa, (size_t)nv, -16.0f, -1.0f);
    const size_t n = (size_t)(T * nv);
    float *bc = fbuf(n), *gc = fbuf(n), *bg = fbuf(n), *gg = fbuf(n);
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < nv; h++) bc[t * nv + h] = b[t * ld + h], gc[t * nv + h] = al[t * ld + h];
    OKC(C->unary(cctx, VT_UNARY_SIGMOID, bc, bc, (int64_t)n));
    OKC(C->binary(cctx, VT_BINARY_ADD, gc, dt, gc, (int64_t)n, nv));
    OKC(C->unary(cctx, VT_UNARY_SOFTPLUS, gc, gc, (int64_t)n));
    OKC(C->binary(cctx, VT_BINARY_MUL, gc, sa, gc, (int64_t)n, nv));
    float *bd = dput(b, sizeof(float) * (size_t)(T * ld)), *ald = dput(al, sizeof(float) * (size_t)(T * ld));
    float *dtd = dput(dt, sizeof(float) * (size_t)nv), *sad = dput(sa, sizeof(float) * (size_t)nv);
    float *betad = in_place ? bd : dput(NULL, sizeof(float) * n);
    float *gd = in_place ? ald : dput(NULL, sizeof(float) * n);
    OKC(G->delta_net_gates(gctx, bd, ld, ald, ld, dtd, sad, betad, gd, T, nv));
    dget(bg, betad, sizeof(float) * n);
    dget(gg, gd, sizeof(float) * n);
    char what[96];
    snprintf(what, sizeof what, "delta_net_gates T %lld n_v %lld%s: beta", (long long)T,
             (long long)nv, in_place ? " in place" : "");
    compare(what, bg, bc, (int64_t)n, NULL, 1e-30, 2.0 * U32);
    snprintf(what, sizeof what, "delta_net_gates T %lld n_v %lld%s: g", (long long)T,
             (long long)nv, in_place ? " in place" : "");
    compare(what, gg, gc, (int64_t)n, NULL, 1e-30, 2.0 * U32);
    if (!in_place) {
        dfree(betad);
        dfree(gd);
    }
    dfree(bd);
    dfree(ald);
    dfree(dtd);
    dfree(sad);
    free(b);
    free(al);
    free(dt);
    free(sa);
    free(bc);
    free(gc);
    free(bg);
    free(gg);
}

static void test_fusions(void **s)
{
    (void)s;
    if (!ready()) return;
    static const int64_t rows[] = {1, 2, 3, 17, 64};
    static const int64_t cols[] = {1, 7, 32, 256, 1001};
    for (int op = VT_UNARY_SILU; op <= VT_UNARY_TANH; op++)
        for (int r = 0; r < 5; r++)
            for (int c = 0; c < 5; c++) mul_act_case(op, rows[r], cols[c], (r + c) % 3);
    /* the one-row kernel (1024 x 4), the cached kernel (256 x 16) and the long
     * rows (an addition kernel, then rms_norm) around their limits */
    static const int64_t ns[] = {1, 31, 64, 96, 1000, 2048, 2816, 4095, 4096, 4097, 5000};
    for (int r = 0; r < 5; r++)
        for (size_t b = 0; b < sizeof ns / sizeof ns[0]; b++) {
            add_norm_case(rows[r], ns[b], 1, 1, 1);
            add_norm_case(rows[r], ns[b], 0, (int)(b & 1), 1);
            if (b % 3 == 0) add_norm_case(rows[r], ns[b], (int)(b & 1), 1, 0);
        }
    static const int64_t Ts[] = {1, 2, 3, 5, 17, 64, 130};
    static const int64_t nvs[] = {1, 3, 32, 48};
    for (int t = 0; t < 7; t++)
        for (int v = 0; v < 4; v++) gates_case(Ts[t], nvs[v], (t + v) & 1);
    /* refusals name the op */
    vt_clear_error();
    assert_int_equal(G->mul_act(gctx, VT_UNARY_SILU, NULL, 4, NULL, 4, NULL, 4, 1, 4),
                     VT_ERR_INVALID_ARG);
    assert_non_null(strstr(vt_last_error(), "mul_act"));
    float *d = dput(NULL, sizeof(float) * 64);
    vt_clear_error();
    assert_int_equal(G->add_rms_norm(gctx, d, 32, d + 32, 32, NULL, NULL, d + 16, 32, 1, 32, 1e-6f),
                     VT_ERR_INVALID_ARG); /* y overlaps x */
    assert_non_null(strstr(vt_last_error(), "add_rms_norm"));
    vt_clear_error();
    assert_int_equal(G->delta_net_gates(gctx, d, 2, d, 4, d, d, d, d, 1, 4), VT_ERR_INVALID_ARG);
    assert_non_null(strstr(vt_last_error(), "delta_net_gates"));
    dfree(d);
}

/* ---------------------------------------------------------------- copies */

static void test_copies(void **s)
{
    (void)s;
    if (!ready()) return;
    const int64_t rows = 37, cols = 300, ld_src = 311, ld_dst = 305, dst_rows = 41;
    size_t nsrc = (size_t)(rows * ld_src), ndst = (size_t)(dst_rows * ld_dst);
    float *src = fbuf(nsrc), *dc = fbuf(ndst), *dg = fbuf(ndst);
    fill_u(src, nsrc, -1.0f, 1.0f);
    fill_u(dc, ndst, -1.0f, 1.0f);
    float *srcd = dput(src, nsrc * sizeof(float)), *dstd = dput(dc, ndst * sizeof(float));

    OKC(C->copy_2d(cctx, src, ld_src, dc, ld_dst, rows, cols));
    OKC(G->copy_2d(gctx, srcd, ld_src, dstd, ld_dst, rows, cols));
    dget(dg, dstd, ndst * sizeof(float));
    compare("copy_2d 37 x 300 (ld 311 -> 305)", dg, dc, (int64_t)ndst, NULL, 0.0, 0.0);

    int32_t idx[23];
    for (int i = 0; i < 23; i++) idx[i] = (int32_t)(rnd32() % rows);
    idx[3] = idx[4]; /* repeats */
    OKC(C->gather_rows(cctx, src, ld_src, idx, 23, cols, dc, ld_dst));
    OKC(G->gather_rows(gctx, srcd, ld_src, idx, 23, cols, dstd, ld_dst));
    dget(dg, dstd, ndst * sizeof(float));
    compare("gather_rows 23 of 37, repeated index", dg, dc, (int64_t)ndst, NULL, 0.0, 0.0);

    /* scatter_add: 64 rows into 41, many repeats, with and without weights */
    int32_t sidx[64];
    float wt[64];
    for (int i = 0; i < 64; i++) {
        sidx[i] = (int32_t)(rnd32() % 5) * 7;
        wt[i] = urand(0.0f, 1.0f);
    }
    float *src2 = fbuf((size_t)(64 * ld_src));
    fill_u(src2, (size_t)(64 * ld_src), -1.0f, 1.0f);
    float *src2d = dput(src2, sizeof(float) * (size_t)(64 * ld_src));
    for (int with_w = 0; with_w < 2; with_w++) {
        OKC(C->scatter_add(cctx, src2, ld_src, sidx, with_w ? wt : NULL, 64, cols, dc, ld_dst));
        OKC(G->scatter_add(gctx, src2d, ld_src, sidx, with_w ? wt : NULL, 64, cols, dstd, ld_dst));
        dget(dg, dstd, ndst * sizeof(float));
        compare(with_w ? "scatter_add 64 rows, 5 targets, weighted" : "scatter_add 64 rows, 5 targets",
                dg, dc, (int64_t)ndst, NULL, 0.0, 0.0);
    }
    dfree(srcd);
    dfree(dstd);
    dfree(src2d);
    free(src);
    free(src2);
    free(dc);
    free(dg);
}

/* ---------------------------------------------------------------- routing */

static void topk_case(int64_t rows, int64_t n, int64_t k, int renorm, int ties)
{
    size_t nl = (size_t)(rows * n), nk = (size_t)(rows * k);
    float *l = fbuf(nl);
    for (size_t i = 0; i < nl; i++) l[i] = ties ? (float)(rnd32() % 4) * 0.5f : urand(-4.0f, 4.0f);
    int32_t *ic = malloc(nk * 4), *ig = malloc(nk * 4);
    float *wc = fbuf(nk), *wg = fbuf(nk), *pc = fbuf(nl), *pg = fbuf(nl);
    float *ld = dput(l, nl * sizeof(float));
    OKC(C->softmax_topk(cctx, l, rows, n, k, renorm, ic, wc, pc));
    OKC(G->softmax_topk(gctx, ld, rows, n, k, renorm, ig, wg, pg));
    char what[128];
    snprintf(what, sizeof what, "softmax_topk rows %lld n %lld k %lld%s%s: weights", (long long)rows,
             (long long)n, (long long)k, renorm ? " renorm" : "", ties ? " ties" : "");
    if (memcmp(ic, ig, nk * 4)) {
        for (size_t i = 0; i < nk; i++)
            if (ic[i] != ig[i]) fail_msg("%s: ids[%zu]: cuda %d, cpu %d", what, i, ig[i], ic[i]);
    }
    compare(what, wg, wc, (int64_t)nk, NULL, 0.0, 0.0);
    compare("  ... probs", pg, pc, (int64_t)nl, NULL, 0.0, 0.0);
    OKC(G->softmax_topk(gctx, ld, rows, n, k, renorm, ig, wg, NULL)); /* probs NULL */
    compare("  ... weights with probs NULL", wg, wc, (int64_t)nk, NULL, 0.0, 0.0);
    dfree(ld);
    free(l);
    free(ic);
    free(ig);
    free(wc);
    free(wg);
    free(pc);
    free(pg);
}

static void test_softmax_topk(void **s)
{
    (void)s;
    if (!ready()) return;
    topk_case(1, 8, 2, 1, 0);
    topk_case(17, 8, 2, 1, 1);
    topk_case(64, 128, 8, 1, 0);
    topk_case(3, 513, 1, 0, 1);
    topk_case(5, 256, 10, 0, 0);
}

/* ---------------------------------------------------------------- the model */

#define N_PROMPTS 3

typedef struct ref_prompt {
    char name[16];
    int32_t *ids;
    int n;
    float *logits;
    int *argmax;
    double *margin;
} ref_prompt;

static int *json_ints(const cJSON *a, int *n)
{
    assert_true(cJSON_IsArray(a));
    *n = cJSON_GetArraySize(a);
    int *v = malloc(sizeof(int) * (size_t)(*n ? *n : 1));
    assert_non_null(v);
    for (int i = 0; i < *n; i++) v[i] = (int)cJSON_GetArrayItem(a, i)->valuedouble;
    return v;
}

static int64_t load_refs(const char *dir, ref_prompt *p)
{
    char *ip = vt_test_path(dir, "refs/index.json");
    char *txt = vt_test_read_file(ip, NULL);
    cJSON *root = cJSON_Parse(txt);
    assert_non_null(root);
    const cJSON *prompts = cJSON_GetObjectItem(root, "prompts");
    assert_int_equal(cJSON_GetArraySize(prompts), N_PROMPTS);
    int64_t vocab = 0;
    for (int i = 0; i < N_PROMPTS; i++) {
        const cJSON *j = cJSON_GetArrayItem(prompts, i);
        ref_prompt *r = &p[i];
        snprintf(r->name, sizeof r->name, "%s", cJSON_GetObjectItem(j, "name")->valuestring);
        int n;
        r->ids = (int32_t *)json_ints(cJSON_GetObjectItem(j, "prompt_ids"), &r->n);
        r->argmax = json_ints(cJSON_GetObjectItem(j, "argmax_per_position"), &n);
        const cJSON *mg = cJSON_GetObjectItem(j, "top1_minus_top2_per_position");
        r->margin = malloc(sizeof(double) * (size_t)r->n);
        for (int t = 0; t < r->n; t++) r->margin[t] = cJSON_GetArrayItem(mg, t)->valuedouble;
        vocab = (int64_t)cJSON_GetArrayItem(cJSON_GetObjectItem(j, "shape"), 1)->valuedouble;
        char rel[64];
        snprintf(rel, sizeof rel, "refs/%s", cJSON_GetObjectItem(j, "file")->valuestring);
        char *lp = vt_test_path(dir, rel);
        size_t len;
        r->logits = vt_test_read_file(lp, &len);
        assert_int_equal(len, (size_t)r->n * (size_t)vocab * sizeof(float));
        free(lp);
    }
    cJSON_Delete(root);
    free(txt);
    free(ip);
    return vocab;
}

static vt_engine *open_engine(const char *path, const char *device, const char *kernels)
{
    vt_engine_params p = {.model_path = path, .plugin_dir = vt_test_plugin_dir(), .device = device,
                          .n_threads = 0, .kernels = kernels, .n_ctx = 256, .n_batch = 16};
    vt_engine *e = NULL;
    if (vt_engine_open(&p, &e) != VT_OK)
        fail_msg("vt_engine_open(%s, device %s): %s", path, device, vt_last_error());
    return e;
}

static float *eval_all(vt_engine *e, const ref_prompt *p, int64_t vocab)
{
    float *out = fbuf((size_t)p->n * (size_t)vocab);
    OKC(vt_engine_reset(e));
    OKC(vt_engine_eval(e, p->ids, p->n, out, 1));
    return out;
}

static int argmax_of(const float *row, int64_t n)
{
    int b = 0;
    for (int64_t i = 1; i < n; i++)
        if (row[i] > row[b]) b = (int)i;
    return b;
}

/* top1 - top2 of a row */
static double margin_of(const float *row, int64_t n)
{
    double a = -INFINITY, b = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        if (row[i] > a) {
            b = a;
            a = row[i];
        } else if (row[i] > b) {
            b = row[i];
        }
    }
    return a - b;
}

/* The q8_0 fixture's criterion (README: a smoke test, lossy like llama.cpp's
 * q8 activations, pooled mean 0.34 there): mean |Δ| vs the HF reference <=
 * 0.5 (the logits' std is 1.6). No argmax check: rounding the activations
 * moves near-ties of the router, and the CPU's int8 path flips the same
 * positions of this random model. */
static void cmp_q8(const char *what, const float *got, const float *ref, int n, int64_t vocab)
{
    double sum = 0;
    int top1 = 0;
    for (size_t i = 0; i < (size_t)n * (size_t)vocab; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        sum += isnan(d) ? INFINITY : d;
    }
    for (int t = 0; t < n; t++)
        top1 += argmax_of(got + (size_t)t * vocab, vocab) == argmax_of(ref + (size_t)t * vocab, vocab);
    double mean = sum / ((double)n * (double)vocab);
    fprintf(stderr, "  %-58s mean|d| %.3g  top-1 %d/%d\n", what, mean, top1, n);
    if (!(mean <= 0.5)) fail_msg("%s: mean |d| %.3g > 0.5", what, mean);
}

/* max |Δ| over every position; argmax of got must equal want_argmax (or the
 * argmax of ref when want_argmax is NULL) where the margin exceeds 1e-3. */
static void cmp_logits(const char *what, const float *got, const float *ref, int n, int64_t vocab,
                       const int *want_argmax, const double *margin, double max_tol,
                       double *max_out, double *sum_out, int *top1_out)
{
    double mx = 0, sum = 0;
    int top1 = 0;
    for (int t = 0; t < n; t++) {
        const float *g = got + (size_t)t * vocab, *r = ref + (size_t)t * vocab;
        for (int64_t i = 0; i < vocab; i++) {
            double d = fabs((double)g[i] - (double)r[i]);
            if (!(d <= mx)) mx = d; /* NaN sticks */
            sum += d;
        }
        int ga = argmax_of(g, vocab), ra = want_argmax ? want_argmax[t] : argmax_of(r, vocab);
        double m = margin ? margin[t] : margin_of(r, vocab);
        top1 += ga == ra;
        if (ga != ra && m > 1e-3)
            fail_msg("%s: position %d: argmax %d, reference %d (reference margin %.3g)", what, t,
                     ga, ra, m);
    }
    fprintf(stderr, "  %-58s max|d| %.3g  mean|d| %.3g  top-1 %d/%d\n", what, mx,
            sum / ((double)n * (double)vocab), top1, n);
    if (!(mx <= max_tol)) fail_msg("%s: max |d| %.3g > %.3g", what, mx, max_tol);
    *max_out = mx > *max_out ? mx : *max_out;
    *sum_out += sum;
    *top1_out += top1;
}

/* The fusions of ABI 1.3 and the merged matrices replace compositions with
 * the same roundings, and a one-token matmul computes each output row on its
 * own: decoding token by token with them (the default) and with
 * VT_FUSED_OPS=0 (the composed ops, separate matrices) must give the same
 * bits, through the recorded graph and op by op (VT_GRAPH=0). A prefill
 * chunk's products run over more rows at once (cuBLAS may then sum in
 * another order): within 1e-3. As users run it: int8 one-token matmuls,
 * tensor-core prefill. */
static void fused_case(const char *path, int graph)
{
    enum { N = 20 };
    int32_t ids[N];
    for (int t = 0; t < N; t++) ids[t] = 3 + (t * 37) % 200;
    float *dec[2] = {NULL, NULL}, *pre[2] = {NULL, NULL};
    int64_t V = 0;
    unsetenv("VT_GPU_INT8_DOT");
    unsetenv("VT_GPU_GEMM");
    if (!graph) setenv("VT_GRAPH", "0", 1);
    for (int f = 0; f < 2; f++) {
        setenv("VT_FUSED_OPS", f ? "0" : "1", 1);
        vt_engine *e = open_engine(path, "cuda", NULL);
        vt_model_info mi = {.struct_size = sizeof mi};
        vt_engine_model_info(e, &mi);
        V = mi.n_vocab;
        dec[f] = fbuf((size_t)N * (size_t)V);
        pre[f] = fbuf((size_t)16 * (size_t)V);
        OKC(vt_engine_reset(e));
        for (int t = 0; t < N; t++)
            OKC(vt_engine_eval(e, &ids[t], 1, dec[f] + (size_t)t * (size_t)V, 0));
        OKC(vt_engine_reset(e));
        OKC(vt_engine_eval(e, ids, 16, pre[f], 1));
        vt_engine_close(e);
    }
    unsetenv("VT_FUSED_OPS");
    unsetenv("VT_GRAPH");
    setenv("VT_GPU_INT8_DOT", "0", 1);
    setenv("VT_GPU_GEMM", "cublas", 1);
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    for (size_t i = 0; i < (size_t)N * (size_t)V; i++)
        if (memcmp(&dec[0][i], &dec[1][i], sizeof(float)))
            fail_msg("%s%s: token %zu logit %zu: fused %.9g, composed %.9g (the bits must agree)",
                     base, graph ? "" : " (VT_GRAPH=0)", i / (size_t)V, i % (size_t)V,
                     (double)dec[0][i], (double)dec[1][i]);
    char what[160];
    snprintf(what, sizeof what, "%s%s: %d tokens one by one, fused = composed bit for bit", base,
             graph ? "" : " (VT_GRAPH=0)", N);
    fprintf(stderr, "  %s\n", what);
    snprintf(what, sizeof what, "%s: prefill 16, fused vs composed", base);
    compare(what, pre[0], pre[1], 16 * V, NULL, 1e-3, 0.0);
    for (int f = 0; f < 2; f++) {
        free(dec[f]);
        free(pre[f]);
    }
}

/* vt_engine_eval_last on the GPU: the logits land in the engine's pinned
 * buffer; they must be vt_engine_eval's, step by step. */
static void eval_last_case(const char *path)
{
    vt_engine *e = open_engine(path, "cuda", NULL);
    vt_model_info mi = {.struct_size = sizeof mi};
    vt_engine_model_info(e, &mi);
    const int64_t V = mi.n_vocab;
    int32_t ids[12];
    for (int t = 0; t < 12; t++) ids[t] = 5 + (t * 29) % 150;
    float *ref = fbuf((size_t)5 * (size_t)V);
    const float *last = NULL;
    for (int pass = 0; pass < 2; pass++) {
        OKC(vt_engine_reset(e));
        for (int t = 0; t < 5; t++) {
            const int32_t *tk = t ? &ids[7 + t - 1] : ids;
            const int64_t n = t ? 1 : 7;
            if (!pass) {
                OKC(vt_engine_eval(e, tk, n, ref + (size_t)t * (size_t)V, 0));
            } else {
                OKC(vt_engine_eval_last(e, tk, n, &last));
                if (memcmp(last, ref + (size_t)t * (size_t)V, sizeof(float) * (size_t)V))
                    fail_msg("%s step %d: vt_engine_eval_last differs from vt_engine_eval", path, t);
            }
        }
    }
    fprintf(stderr, "  %s: vt_engine_eval_last == vt_engine_eval (prompt 7, 4 steps)\n",
            strrchr(path, '/') ? strrchr(path, '/') + 1 : path);
    free(ref);
    vt_engine_close(e);
}

static void test_model_fused_vs_composed(void **s)
{
    (void)s;
    if (!ready()) return;
    const char *fx = vt_test_fixtures();
    if (!fx) return;
    static const char *files[] = {"qwen35moe-tiny/gguf/qwen35moe-tiny-bf16.gguf",
                                  "qwen35moe-tiny/gguf/qwen35moe-tiny-q8_0.gguf",
                                  "gemma4-moe-tiny/gguf/gemma4-moe-tiny-f16.gguf"};
    for (int f = 0; f < 3; f++) {
        char *path = vt_test_path(fx, files[f]);
        fused_case(path, 1);
        fused_case(path, 0);
        if (f != 1) eval_last_case(path);
        free(path);
    }
}

static void test_model_fixtures(void **s)
{
    (void)s;
    if (!ready()) return;
    const char *fx = vt_test_fixtures();
    if (!fx) return;
    char *dir = vt_test_path(fx, "qwen35moe-tiny");
    ref_prompt p[N_PROMPTS];
    int64_t vocab = load_refs(dir, p);
    static const char *files[] = {"gguf/qwen35moe-tiny-bf16.gguf", "gguf/qwen35moe-tiny-q8_0.gguf"};
    for (int f = 0; f < 2; f++) {
        char *path = vt_test_path(dir, files[f]);
        vt_engine *eg = open_engine(path, "cuda", NULL);
        vt_engine *ec = open_engine(path, "cpu", "scalar");
        double m_ref = 0, s_ref = 0, m_cpu = 0, s_cpu = 0;
        int t_ref = 0, t_cpu = 0, n_pos = 0;
        for (int i = 0; i < N_PROMPTS; i++) {
            float *lg = eval_all(eg, &p[i], vocab), *lc = eval_all(ec, &p[i], vocab);
            char what[160];
            if (f == 0) { /* bf16 = the f32 model: the fixtures' f32 criterion */
                snprintf(what, sizeof what, "%s %s: cuda vs HF reference", files[f] + 5, p[i].name);
                cmp_logits(what, lg, p[i].logits, p[i].n, vocab, p[i].argmax, p[i].margin, 1e-2,
                           &m_ref, &s_ref, &t_ref);
            }
            /* cuda vs the CPU's scalar kernels on the same weights: float32 vs double sums */
            snprintf(what, sizeof what, "%s %s: cuda vs cpu scalar", files[f] + 5, p[i].name);
            cmp_logits(what, lg, lc, p[i].n, vocab, NULL, NULL, 1e-2, &m_cpu, &s_cpu, &t_cpu);
            n_pos += p[i].n;
            free(lg);
            free(lc);
        }
        fprintf(stderr, "  %s pooled over %d positions: cuda vs cpu max %.3g mean %.3g top-1 %d",
                files[f] + 5, n_pos, m_cpu, s_cpu / ((double)n_pos * (double)vocab), t_cpu);
        if (f == 0)
            fprintf(stderr, "; cuda vs HF max %.3g mean %.3g top-1 %d", m_ref,
                    s_ref / ((double)n_pos * (double)vocab), t_ref);
        fprintf(stderr, "\n");

        /* decode: the longest prompt token by token on the device (the
         * decode matmul kernel, attention over the growing cache) */
        const ref_prompt *L = &p[N_PROMPTS - 1];
        for (int i = 0; i < N_PROMPTS; i++)
            if (p[i].n > L->n) L = &p[i];
        float *step = fbuf((size_t)L->n * (size_t)vocab);
        OKC(vt_engine_reset(eg));
        for (int t = 0; t < L->n; t++)
            OKC(vt_engine_eval(eg, &L->ids[t], 1, step + (size_t)t * (size_t)vocab, 0));
        float *lc = eval_all(ec, L, vocab);
        char what[160];
        double m = 0, sm = 0;
        int t1 = 0;
        snprintf(what, sizeof what, "%s %s token by token: cuda vs cpu scalar", files[f] + 5, L->name);
        cmp_logits(what, step, lc, L->n, vocab, NULL, NULL, 1e-2, &m, &sm, &t1);
        if (f == 0) {
            snprintf(what, sizeof what, "%s %s token by token: cuda vs HF", files[f] + 5, L->name);
            cmp_logits(what, step, L->logits, L->n, vocab, L->argmax, L->margin, 1e-2, &m, &sm, &t1);
        } else {
            /* as users run it: one-token matmuls of the Q8_0 weights on int8
             * activations (gpu_matvec.cu), prefill products on TF32 tensor
             * cores (gpu_mma.cu), held to the rounding criterion */
            unsetenv("VT_GPU_INT8_DOT");
            unsetenv("VT_GPU_GEMM");
            vt_engine *eq = open_engine(path, "cuda", NULL);
            setenv("VT_GPU_INT8_DOT", "0", 1);
            setenv("VT_GPU_GEMM", "cublas", 1);
            for (int i = 0; i < N_PROMPTS; i++) {
                float *lq = eval_all(eq, &p[i], vocab);
                snprintf(what, sizeof what, "%s %s prefill, rounded activations: cuda vs HF",
                         files[f] + 5, p[i].name);
                cmp_q8(what, lq, p[i].logits, p[i].n, vocab);
                free(lq);
            }
            OKC(vt_engine_reset(eq));
            for (int t = 0; t < L->n; t++)
                OKC(vt_engine_eval(eq, &L->ids[t], 1, step + (size_t)t * (size_t)vocab, 0));
            snprintf(what, sizeof what, "%s %s token by token, int8 activations: cuda vs HF",
                     files[f] + 5, L->name);
            cmp_q8(what, step, L->logits, L->n, vocab);
            vt_engine_close(eq);
        }
        free(step);
        free(lc);
        vt_engine_close(eg);
        vt_engine_close(ec);
        free(path);
    }
    for (int i = 0; i < N_PROMPTS; i++) {
        free(p[i].ids);
        free(p[i].logits);
        free(p[i].argmax);
        free(p[i].margin);
    }
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mat_mul),
        cmocka_unit_test(test_get_rows),
        cmocka_unit_test(test_norms),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_ssm_conv),
        cmocka_unit_test(test_gated_delta_net),
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_fusions),
        cmocka_unit_test(test_copies),
        cmocka_unit_test(test_softmax_topk),
        cmocka_unit_test(test_model_fixtures),
        cmocka_unit_test(test_model_fused_vs_composed),
    };
    return vt_test_exit(cmocka_run_group_tests_name("cuda_ops", tests, NULL, teardown));
}
