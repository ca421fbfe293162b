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
 * Then the model-level checks of test_cuda_ops_models.c (the same program).
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
#include "test_cuda_ops.h"

#include "engine.h"
#include "error.h"
#include "registry.h"
#include "vt/backend.h"


const vt_backend_api *G, *C; /* cuda, cpu */
vt_backend_ctx *gctx, *tctx, *cctx; /* cuda (cuBLAS), cuda (tiled GEMM), cpu scalar */
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
int ready(void)
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

float *fbuf(size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(p);
    return p;
}

void fill_u(float *p, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++) p[i] = urand(lo, hi);
}

void fill_c(float *p, size_t n, float v)
{
    for (size_t i = 0; i < n; i++) p[i] = v;
}

/* [rows][ld] random in [lo, hi), padding columns NaN */
float *strided(int64_t rows, int64_t cols, int64_t ld, float lo, float hi)
{
    float *p = fbuf((size_t)(rows * ld));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < ld; c++) p[r * ld + c] = c < cols ? urand(lo, hi) : NAN;
    return p;
}

void *dput(const void *h, size_t bytes)
{
    void *d = NULL;
    if (G->alloc(gctx, bytes ? bytes : 4, "test", &d) != VT_OK) fail_msg("alloc: %s", vt_last_error());
    if (h && bytes && G->copy_h2d(gctx, d, h, bytes) != VT_OK) fail_msg("h2d: %s", vt_last_error());
    return d;
}

void dget(void *h, const void *d, size_t bytes)
{
    if (G->copy_d2h(gctx, h, d, bytes) != VT_OK) fail_msg("d2h: %s", vt_last_error());
}

void dfree(void *d) { G->free(gctx, d); }

/* Compare n floats: |got - ref| <= (tol ? tol[i] : 0) + abs + rel·|ref|, NaN
 * only where ref is NaN (same bits not required). Prints one line of
 * numbers; fails naming the first bad element. Returns max |Δ|. */
double compare(const char *what, const float *got, const float *ref, int64_t n,
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
