/*
 * test_cuda_quant.c - backend-cuda's weight kernels for every block type it
 * declares (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
 * IQ4_NL, IQ4_XS, MXFP4; gguf.md §6; and the 15 low-bit types IQ2_XXS ..
 * Q2_0 with ids 64-66, reached through vt_backend_mat_mul_fn/get_rows_fn)
 * against backend-cpu's scalar reference
 * dequantiser vt_cpu_dequant_row (plugins/backend-cpu/cpu_dequant.c, itself
 * bit-exact against llama.cpp on the quant-zoo fixture, test_quant_zoo),
 * through the plugin API: backend-cuda is dlopen-ed from the build's plugin
 * folder and called through its vt_backend_api table.
 *
 *  1. Capabilities (no device needed): mat_mul and get_rows PRESENT with a
 *     function for the 28 block types and F32/F16/BF16; the integer, F64,
 *     Q8_1 and Q8_K ids ABSENT with the reason, and no function.
 *  2. quant-zoo (fixtures/quant-zoo/README.md), every one of its 15 tensors,
 *     and quant-zoo-2 (the 15 low-bit types, quantised by ggml), likewise:
 *     get_rows of all 64 rows (in a permuted order) on the device equals
 *     dequant-<TYPE>.f32.bin bit for bit; and mat_mul with one-hot
 *     activations (token t has a single 1.0 at column c_t, zeros elsewhere)
 *     gives exactly column c_t of the reference for every row, whatever the
 *     summation order (every other product is ±0), on the decode kernel
 *     (8 tokens; float4 and scalar activation loads), cuBLAS SGEMM (64
 *     tokens) and the tiled GEMM, covering all
 *     256 columns: this checks each path's decoding and element mapping bit
 *     for bit; and on the tensor-core path (64 and 17 tokens, the context as
 *     users get it) every output equals the reference element rounded to
 *     TF32 (to nearest, ties away), the rounding that path applies to weights.
 *  3. Random weights: random block bytes whose fp16 scale fields (and MXFP4's
 *     E8M0 exponent) are overwritten with sane values (|d| in 0.01 .. 0.1,
 *     2^-8 .. 2^-2), rows of several blocks, odd row counts:
 *     - get_rows bit-exact against vt_cpu_dequant_row, with repeated ids;
 *       and once more on fully random bytes (infinite, NaN and subnormal
 *       scales, MXFP4 exponents 0, 1 and 255), where a NaN must stay NaN
 *       (payloads may differ) and every other value must have the same bits;
 *     - one-hot mat_mul exact on all columns of 5 super-blocks (1280 values),
 *       on all three paths (the decode kernel with activation rows 16-byte
 *       aligned, which it reads as float4, and not);
 *     - mat_mul on random activations, batches 1, 3, 17 and 64 (64 takes the
 *       SGEMM path, and the tiled kernel runs 17 and 64 too), row strides
 *       with NaN padding (activation rows alternately 16-byte aligned and
 *       not), outputs compared whole (padding must keep its sentinel).
 *       Reference: double-precision sums of vt_cpu_dequant_row's floats.
 *       The device sums in float32 (lanes, then a shuffle tree; or
 *       SGEMM; or the tiled kernel); float32 rounding errors of a dot product
 *       behave like a random walk, |Δ| ~ sqrt(n)·u·Σ|w_i x_i| and
 *       Σ|w_i x_i| <= ||w||·||x||, so, as test_cuda_ops does, we allow
 *       |Δ| <= 4·sqrt(n_in)·u·||w_o||·||x_t|| (u = 2^-24): a statistical
 *       estimate, not a worst-case bound (cuBLAS's summation order is not
 *       specified); the exact one-hot cases above are the strict check of
 *       each decoder on every path. One case has more
 *       rows than one 64 MiB dequantisation chunk of the SGEMM path.
 *       The tensor-core path (qctx, more than 8 tokens; also 9, 65 and 130
 *       tokens against 65, 129 and 64 rows) rounds the activations to int8
 *       blocks as decode does (x̂ = d·q, round_int8), then weights and x̂
 *       to TF32 (11 significant bits: each rounding within 2^-11), so each
 *       term w_i·x̂_i is within (2^-10 + 2^-22)·|w_i·x̂_i| of its value: it
 *       is held to that bound, summed, on top of the float32 one, against
 *       the reference on x̂;
 *       one case has more rows than one TF32 chunk (2048 rows of 8192).
 *       The tensor-core expectations assume what the H200 has (sm_80+ and
 *       cublasGemmEx); qctx is made with VT_GPU_GEMM and VT_GPU_INT8_DOT
 *       unset, whatever the caller's environment. The contexts of 2. and 3. other than qctx run
 *       with VT_GPU_GEMM=cublas (float32 products).
 *  3b. One token on a context as users get it (int8 activations for Q8_0,
 *     Q5_0, Q4_K and Q6_K, gpu_matvec.cu): against the reference on the
 *     activations rounded as the kernels specify (test's own rounding), for
 *     every block type (the others must take the float path), rows per warp
 *     from 1 to 32, more rows than one grid pass, a NaN activation. The
 *     contexts of 2. and 3. run with VT_GPU_INT8_DOT=0 (the float kernels).
 *  4. Refusals: a misaligned weight (the kernels read 32-bit words of Q4_K
 *     blocks) and an n_in that is not a whole number of blocks.
 *
 * Without a CUDA device (CI) the device cases skip loudly (exit 77); the
 * capability case still runs when the plugin was built. A plugin that was
 * not built skips, except when CMake saw CI=true and the toolchain (then it
 * fails), as in test_cuda_ops.
 */
#include <dlfcn.h>
#include <float.h>
#include <math.h>

#include "test_util.h"
#include "test_quant_blocks.h"

#include "cpu_internal.h"
#include "error.h"
#include "registry.h"
#include "vt/backend.h"
#include "vt/gguf.h"
#include "test_cuda_quant.h"


const vt_backend_api *G;
/* cuda (cuBLAS prefill, VT_GPU_GEMM=cublas), cuda (tiled GEMM): both with
 * VT_GPU_INT8_DOT=0, the float kernels; qctx: as a user gets it, int8
 * activations for one token, tensor cores for block types in prefill (cuBLAS TF32) */
vt_backend_ctx *gctx, *tctx, *qctx;
static int g_state;                 /* 0 not tried, 1 ready, -1 skip */

/* ---------------------------------------------------------------- types */

/* A block type: id, name, values and bytes per block, offsets of its fp16
 * scale fields (d, and m/dmin where there is one; -1 none), and whether its
 * scale is MXFP4's E8M0 byte at offset 0 (e8m0 = 1) or IQ1_M's fp16 spread
 * over the top nibbles of the 4 u16 at byte 48 (e8m0 = 2). */

/* The op of type t (ids past VT_TYPE_SLOTS through ABI 1.9's _ext members) */

const qtype QTYPES[] = {
    {VT_TYPE_Q4_0, "Q4_0", 32, 18, {0, -1}, 0},     {VT_TYPE_Q4_1, "Q4_1", 32, 20, {0, 2}, 0},
    {VT_TYPE_Q5_0, "Q5_0", 32, 22, {0, -1}, 0},     {VT_TYPE_Q5_1, "Q5_1", 32, 24, {0, 2}, 0},
    {VT_TYPE_Q8_0, "Q8_0", 32, 34, {0, -1}, 0},     {VT_TYPE_Q2_K, "Q2_K", 256, 84, {80, 82}, 0},
    {VT_TYPE_Q3_K, "Q3_K", 256, 110, {108, -1}, 0}, {VT_TYPE_Q4_K, "Q4_K", 256, 144, {0, 2}, 0},
    {VT_TYPE_Q5_K, "Q5_K", 256, 176, {0, 2}, 0},    {VT_TYPE_Q6_K, "Q6_K", 256, 210, {208, -1}, 0},
    {VT_TYPE_IQ4_NL, "IQ4_NL", 32, 18, {0, -1}, 0}, {VT_TYPE_IQ4_XS, "IQ4_XS", 256, 136, {0, -1}, 0},
    {VT_TYPE_MXFP4, "MXFP4", 32, 17, {-1, -1}, 1},
    /* the low-bit types (gpu_lowbit.cuh); random bytes are valid blocks */
    {VT_TYPE_IQ2_XXS, "IQ2_XXS", 256, 66, {0, -1}, 0}, {VT_TYPE_IQ2_XS, "IQ2_XS", 256, 74, {0, -1}, 0},
    {VT_TYPE_IQ2_S, "IQ2_S", 256, 82, {0, -1}, 0},     {VT_TYPE_IQ3_XXS, "IQ3_XXS", 256, 98, {0, -1}, 0},
    {VT_TYPE_IQ3_S, "IQ3_S", 256, 110, {0, -1}, 0},    {VT_TYPE_IQ1_S, "IQ1_S", 256, 50, {0, -1}, 0},
    {VT_TYPE_IQ1_M, "IQ1_M", 256, 56, {-1, -1}, 2},    {VT_TYPE_IQ1_XS, "IQ1_XS", 256, 46, {0, -1}, 0},
    {VT_TYPE_IQ1_XXS, "IQ1_XXS", 256, 42, {0, -1}, 0}, {VT_TYPE_IQ1_XXXS, "IQ1_XXXS", 256, 38, {0, -1}, 0},
    {VT_TYPE_TQ1_0, "TQ1_0", 256, 54, {52, -1}, 0},    {VT_TYPE_TQ2_0, "TQ2_0", 256, 66, {64, -1}, 0},
    {VT_TYPE_NVFP4, "NVFP4", 64, 36, {-1, -1}, 0},     {VT_TYPE_Q1_0, "Q1_0", 128, 18, {0, -1}, 0},
    {VT_TYPE_Q2_0, "Q2_0", 64, 18, {0, -1}, 0},
};
const int n_qtypes = (int)(sizeof QTYPES / sizeof QTYPES[0]);

/* quant-zoo.gguf's tensors (README's table): all 15 */
static const char *const ZOO[] = {"F16",  "Q4_0", "Q4_1", "Q5_0",   "Q5_1",   "Q8_0", "Q2_K", "Q3_K",
                                  "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS", "BF16", "MXFP4"};
#define N_ZOO ((int)(sizeof ZOO / sizeof ZOO[0]))
/* quant-zoo-2.gguf's tensors (fixtures/quant-zoo-2/README.md): the low-bit types */
static const char *const ZOO2[] = {"IQ2_XXS", "IQ2_XS", "IQ2_S",    "IQ3_XXS", "IQ3_S",
                                   "IQ1_S",   "IQ1_M",  "IQ1_XS",   "IQ1_XXS", "IQ1_XXXS",
                                   "TQ1_0",   "TQ2_0",  "NVFP4",    "Q1_0",    "Q2_0"};
#define N_ZOO2 ((int)(sizeof ZOO2 / sizeof ZOO2[0]))
#define ZOO_ROWS 64
#define ZOO_COLS 256

/* ---------------------------------------------------------------- setup */

static void skip_all(const char *why)
{
    fprintf(stderr,
            "\n**********************************************************************\n"
            "*** SKIPPING: %s\n"
            "**********************************************************************\n\n",
            why);
    vt_test_fixtures_skipped = 1;
}

/* The plugin's table, or NULL when the plugin was not built (skipped). */
static const vt_backend_api *plugin(void)
{
    static const vt_backend_api *api;
    if (api) return api;
    if (!VT_GPU_TEST_BUILT) {
        if (VT_GPU_TEST_REQUIRED)
            fail_msg("backend-cuda was not built although CMake ran with CI=true and found its "
                     "toolchain: %s", VT_GPU_TEST_WHY);
        skip_all("backend-cuda was not built: " VT_GPU_TEST_WHY);
        return NULL;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/backend-cuda.so", vt_test_plugin_dir());
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) fail_msg("dlopen %s: %s", path, dlerror());
    vt_plugin_entry_fn entry = (vt_plugin_entry_fn)dlsym(h, VT_PLUGIN_ENTRY_SYMBOL);
    assert_non_null(entry);
    const vt_plugin_desc *d = entry();
    assert_non_null(d);
    assert_int_equal(d->kind, VT_PLUGIN_BACKEND);
    assert_string_equal(d->name, "cuda");
    api = (const vt_backend_api *)d->table;
    return api;
}

/* 1 when a device context is up; otherwise the case is skipped (0). */
int ready(void)
{
    if (g_state == 0) {
        g_state = -1;
        G = plugin();
        if (G) {
            int n = G->device_count();
            if (n == 0) {
                skip_all("backend-cuda reports no CUDA device on this machine: the weight-kernel "
                         "checks need one (they run on the H200)");
            } else {
                vt_backend_params bp = {.struct_size = sizeof bp, .device = 0,
                                        .host = vt_host_table()};
                unsetenv("VT_GPU_GEMM");
                unsetenv("VT_GPU_INT8_DOT");
                unsetenv("VT_GPU_TC_DENSE");
                unsetenv("VT_GPU_PREFILL_XQ");
                if (G->init(&bp, &qctx) != VT_OK) fail_msg("cuda init: %s", vt_last_error());
                setenv("VT_GPU_INT8_DOT", "0", 1);
                setenv("VT_GPU_GEMM", "cublas", 1);
                if (G->init(&bp, &gctx) != VT_OK) fail_msg("cuda init: %s", vt_last_error());
                setenv("VT_GPU_GEMM", "tiled", 1);
                if (G->init(&bp, &tctx) != VT_OK) fail_msg("cuda init (tiled): %s", vt_last_error());
                unsetenv("VT_GPU_GEMM");
                unsetenv("VT_GPU_INT8_DOT");
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
    if (qctx) G->shutdown(qctx);
    gctx = tctx = qctx = NULL;
    return 0;
}

/* ---------------------------------------------------------------- helpers */

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;

static uint32_t rnd32(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}

/* uniform in [lo, hi) */
float urand(float lo, float hi)
{
    return lo + (hi - lo) * (float)(rnd32() >> 8) * (1.0f / 16777216.0f);
}

float *fbuf(size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(p);
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


static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* fp16 bits of a normal float in the fp16 range (mantissa truncated). */
static uint16_t f16_bits(float f)
{
    uint32_t b = bits_of(f);
    uint32_t s = (b >> 16) & 0x8000u, e = (b >> 23) & 255u, m = b & 0x7fffffu;
    return (uint16_t)(s | ((e - 127 + 15) << 10) | (m >> 13));
}

/* n_out rows of n_in values of type q: random bytes; unless hostile, every
 * fp16 scale field is a random-sign value of magnitude 0.01 .. 0.1 and an
 * MXFP4 exponent byte is 120 .. 126 (scales 2^-8 .. 2^-2 of the doubled
 * codes). *rb: the row bytes. */
uint8_t *make_weight(const qtype *q, int64_t n_in, int64_t n_out, int hostile, size_t *rb)
{
    *rb = (size_t)vt_type_row_bytes(q->id, (uint64_t)n_in);
    assert_true(*rb == (size_t)(n_in / q->qk * q->bytes));
    size_t nb = *rb * (size_t)n_out;
    uint8_t *w = malloc(nb + 1);
    assert_non_null(w);
    for (size_t i = 0; i < nb; i++) w[i] = (uint8_t)rnd32();
    if (hostile) return w;
    for (size_t b = 0; b < nb / (size_t)q->bytes; b++) {
        uint8_t *blk = w + b * (size_t)q->bytes;
        for (int f = 0; f < 2; f++) {
            if (q->f16_at[f] < 0) continue;
            float v = urand(0.01f, 0.1f);
            uint16_t h = (uint16_t)(f16_bits(v) | ((rnd32() & 1u) << 15));
            blk[q->f16_at[f]] = (uint8_t)h;
            blk[q->f16_at[f] + 1] = (uint8_t)(h >> 8);
        }
        if (q->e8m0 == 1) blk[0] = (uint8_t)(120 + rnd32() % 7);
        if (q->e8m0 == 2) { /* IQ1_M: nibble k of the fp16 in the top nibble of u16 k at 48 */
            uint16_t h = (uint16_t)(f16_bits(urand(0.01f, 0.1f)) | ((rnd32() & 1u) << 15));
            for (int k = 0; k < 4; k++) blk[49 + 2 * k] = (uint8_t)((blk[49 + 2 * k] & 0x0F) | ((h >> (4 * k)) & 15) << 4);
        }
    }
    return w;
}

/* Rows [n_out][n_in] of w decoded by the reference. */
float *ref_rows(uint32_t type, const uint8_t *w, size_t rb, int64_t n_in, int64_t n_out)
{
    float *f = fbuf((size_t)(n_in * n_out));
    for (int64_t o = 0; o < n_out; o++)
        if (vt_cpu_dequant_row(type, w + (size_t)o * rb, n_in, f + o * n_in) != VT_OK)
            fail_msg("vt_cpu_dequant_row(%s) failed", vt_type_name(type));
    return f;
}

/* get_rows of ids (n of them) on the device vs ref rows: same bits, except
 * that NaN may stand for NaN when nan_any (payloads may differ). */
static void check_get_rows(const char *what, const vt_weight *wg, const float *ref, int64_t n_in,
                           const int32_t *ids, int64_t n, int nan_any)
{
    size_t no = (size_t)(n * n_in);
    float *og = fbuf(no);
    memset(og, 0xA5, no * sizeof(float)); /* a NaN pattern: unwritten values show */
    float *od = dput(og, no * sizeof(float));
    int32_t *idc = malloc(sizeof(int32_t) * (size_t)n);
    assert_non_null(idc);
    memcpy(idc, ids, sizeof(int32_t) * (size_t)n);
    OKC(GR(wg->type)(gctx, wg, idc, n, od));
    memset(idc, 0xff, sizeof(int32_t) * (size_t)n); /* host ids may be reused once the op returns */
    dget(og, od, no * sizeof(float));
    int64_t bad = 0, first = -1, n_nan = 0;
    for (int64_t j = 0; j < n; j++)
        for (int64_t i = 0; i < n_in; i++) {
            float g = og[j * n_in + i], r = ref[(int64_t)ids[j] * n_in + i];
            if (nan_any && isnan(r) && isnan(g)) {
                n_nan++;
                continue;
            }
            if (bits_of(g) != bits_of(r)) {
                if (first < 0) first = j * n_in + i;
                bad++;
            }
        }
    fprintf(stderr, "  %-52s %lld values, %lld NaN, %lld differ\n", what, (long long)no,
            (long long)n_nan, (long long)bad);
    if (bad) {
        int64_t j = first / n_in, i = first % n_in;
        float g = og[first], r = ref[(int64_t)ids[j] * n_in + i];
        fail_msg("%s: output row %lld (weight row %d) column %lld (block %lld): cuda %.9g "
                 "(0x%08x), reference %.9g (0x%08x); %lld values differ",
                 what, (long long)j, ids[j], (long long)i,
                 (long long)(i / vt_type_block_size(wg->type)), (double)g, bits_of(g), (double)r,
                 bits_of(r), (long long)bad);
    }
    free(idc);
    free(og);
    dfree(od);
}

/* One-hot mat_mul on every column of the weight (wg on the device, ref its
 * reference rows): in batches of T tokens, token t has 1.0 at column c_t
 * and zeros elsewhere (padding of the ldx stride NaN), so y[t][o] must be
 * ref[o][c_t] exactly (every other product is ±0); padding of the ldy
 * stride must keep its sentinel. ctx: gctx or tctx. */
/* f rounded to TF32, to nearest with ties away from zero (finite values):
 * the dense tensor-core path's rounding of weights and activations
 * (gpu_ops.cu, put_val of tf32_val) */
static float tf32_of(float f)
{
    uint32_t u = bits_of(f);
    if ((u & 0x7F800000u) == 0x7F800000u) return f;
    u = (u + 0x1000u) & 0xFFFFE000u;
    float r;
    memcpy(&r, &u, 4);
    return r;
}

/* One-hot mat_mul on ctx: every output equals the reference element (tc:
 * the element rounded to TF32, the tensor-core path's weight rounding;
 * the 1.0 and the zeros are exact). A last chunk of 8 tokens or fewer takes
 * the decode kernels: checked only when tc is 0. */
static void check_one_hot(const char *what, vt_backend_ctx *ctx, const vt_weight *wg,
                          const float *ref, int64_t T, int64_t ldx_pad, int tc)
{
    const int64_t n_in = wg->n_in, n_out = wg->n_out, ldx = n_in + ldx_pad, ldy = n_out + 1;
    float *x = fbuf((size_t)(T * ldx)), *y = fbuf((size_t)(T * ldy));
    float *xd = dput(NULL, sizeof(float) * (size_t)(T * ldx));
    float *yd = dput(NULL, sizeof(float) * (size_t)(T * ldy));
    int64_t checked = 0;
    for (int64_t c0 = 0; c0 < n_in; c0 += T) {
        int64_t nt = n_in - c0 < T ? n_in - c0 : T;
        if (tc && nt <= 8) break;
        for (int64_t t = 0; t < nt; t++)
            for (int64_t i = 0; i < ldx; i++) x[t * ldx + i] = i >= n_in ? NAN : i == c0 + t ? 1.0f : 0.0f;
        for (int64_t k = 0; k < nt * ldy; k++) y[k] = 1234.5f;
        if (G->copy_h2d(gctx, xd, x, sizeof(float) * (size_t)(nt * ldx)) != VT_OK ||
            G->copy_h2d(gctx, yd, y, sizeof(float) * (size_t)(nt * ldy)) != VT_OK)
            fail_msg("h2d: %s", vt_last_error());
        OKC(MM(wg->type)(ctx, wg, xd, ldx, yd, ldy, nt));
        dget(y, yd, sizeof(float) * (size_t)(nt * ldy));
        for (int64_t t = 0; t < nt; t++)
            for (int64_t o = 0; o < ldy; o++) {
                float g = y[t * ldy + o], r = o < n_out ? ref[o * n_in + c0 + t] : 1234.5f;
                if (tc && o < n_out) r = tf32_of(r);
                if (!(g == r)) /* equal values (the sign of a zero may differ) */
                    fail_msg("%s: token %lld (1.0 at column %lld, block %lld), row %lld: cuda %.9g "
                             "(0x%08x), want %.9g (0x%08x)%s",
                             what, (long long)t, (long long)(c0 + t),
                             (long long)((c0 + t) / vt_type_block_size(wg->type)), (long long)o,
                             (double)g, bits_of(g), (double)r, bits_of(r),
                             o >= n_out ? " (padding of ldy)" : "");
                checked++;
            }
        if (nt < T) break;
    }
    fprintf(stderr, "  %-52s exact on %lld outputs\n", what, (long long)checked);
    free(x);
    free(y);
    dfree(xd);
    dfree(yd);
}

/* One-hot checks on the three paths: decode kernel (8 tokens; activation
 * rows 16-byte aligned, read as float4, and not), SGEMM (64), tiled GEMM
 * (64). */
static void one_hot_all(const char *name, const vt_weight *wg, const float *ref)
{
    char what[128];
    snprintf(what, sizeof what, "%s one-hot mat_mul [vec x4, 8 tokens]", name);
    check_one_hot(what, gctx, wg, ref, 8, 4, 0);
    snprintf(what, sizeof what, "%s one-hot mat_mul [vec, 8 tokens]", name);
    check_one_hot(what, gctx, wg, ref, 8, 3, 0);
    snprintf(what, sizeof what, "%s one-hot mat_mul [gemm, 64 tokens]", name);
    check_one_hot(what, gctx, wg, ref, 64, 3, 0);
    snprintf(what, sizeof what, "%s one-hot mat_mul [tiled, 64 tokens]", name);
    check_one_hot(what, tctx, wg, ref, 64, 3, 0);
    /* the tensor-core path (block types), 64 and 17 tokens */
    const int tc = vt_type_block_size(wg->type) > 1;
    snprintf(what, sizeof what, "%s one-hot mat_mul [%s, 64 tokens]", name, tc ? "tc" : "gemm");
    check_one_hot(what, qctx, wg, ref, 64, 4, tc);
    snprintf(what, sizeof what, "%s one-hot mat_mul [%s, 17 tokens]", name, tc ? "tc" : "gemm");
    check_one_hot(what, qctx, wg, ref, 17, 4, tc);
}

/* ---------------------------------------------------------------- 1. capabilities */

static const vt_capability *find_cap(const vt_backend_api *api, uint32_t id)
{
    for (size_t i = 0; i < api->n_caps; i++)
        if (api->caps[i].id == id) return &api->caps[i];
    return NULL;
}

static void test_capabilities(void **s)
{
    (void)s;
    const vt_backend_api *api = plugin();
    if (!api) {
        skip();
        return;
    }
    uint32_t have[N_QTYPES + 3];
    for (int k = 0; k < N_QTYPES; k++) have[k] = QTYPES[k].id;
    have[N_QTYPES] = VT_TYPE_F32;
    have[N_QTYPES + 1] = VT_TYPE_F16;
    have[N_QTYPES + 2] = VT_TYPE_BF16;
    for (int k = 0; k < N_QTYPES + 3; k++) {
        uint32_t t = have[k];
        const vt_capability *m = find_cap(api, VT_CAP_MAT_MUL(t)), *g = find_cap(api, VT_CAP_GET_ROWS(t));
        if (!m || m->state != VT_CAP_PRESENT || !g || g->state != VT_CAP_PRESENT)
            fail_msg("%s: mat_mul / get_rows not declared PRESENT", vt_type_name(t));
        if (!vt_backend_mat_mul_fn(api, t) || !vt_backend_get_rows_fn(api, t))
            fail_msg("%s: mat_mul / get_rows function missing from the table", vt_type_name(t));
    }
    static const uint32_t absent[] = {VT_TYPE_Q8_1, VT_TYPE_Q8_K, VT_TYPE_I8, VT_TYPE_I16,
                                      VT_TYPE_I32,  VT_TYPE_I64,  VT_TYPE_F64};
    for (size_t k = 0; k < sizeof absent / sizeof absent[0]; k++) {
        uint32_t t = absent[k];
        const vt_capability *m = find_cap(api, VT_CAP_MAT_MUL(t)), *g = find_cap(api, VT_CAP_GET_ROWS(t));
        if (!m || m->state != VT_CAP_ABSENT || !g || g->state != VT_CAP_ABSENT)
            fail_msg("%s: mat_mul / get_rows not declared ABSENT", vt_type_name(t));
        if (!m->reason || !strstr(m->reason, "no kernels for integer, F64, Q8_1 or Q8_K") ||
            !g->reason || !strstr(g->reason, "no kernels for integer, F64, Q8_1 or Q8_K"))
            fail_msg("%s: ABSENT reason '%s' does not say which types have no kernels", vt_type_name(t),
                     m->reason ? m->reason : "(null)");
        assert_null(api->mat_mul[t]);
        assert_null(api->get_rows[t]);
    }
    fprintf(stderr, "  capabilities: %d weight types PRESENT, %zu checked ABSENT\n", N_QTYPES + 3,
            sizeof absent / sizeof absent[0]);
}

/* ---------------------------------------------------------------- 2. quant-zoo */

/* Every tensor of fixture dir (quant-zoo or quant-zoo-2): get_rows and the
 * one-hot products on every path against dequant-<TYPE>.f32.bin. */
static void zoo_check(const char *fx, const char *dir, const char *const *names, int n_names)
{
    char rel[128];
    snprintf(rel, sizeof rel, "%s/%s.gguf", dir, dir);
    char *path = vt_test_path(fx, rel);
    vt_gguf *g = NULL;
    if (vt_gguf_open(path, 0, &g) != VT_OK) fail_msg("vt_gguf_open %s: %s", path, vt_last_error());
    int32_t ids[ZOO_ROWS];
    for (int j = 0; j < ZOO_ROWS; j++) ids[j] = (int32_t)((j * 37 + 11) % ZOO_ROWS); /* a permutation */
    for (int k = 0; k < n_names; k++) {
        char name[64];
        snprintf(name, sizeof name, "%s.weight", names[k]);
        snprintf(rel, sizeof rel, "%s/dequant-%s.f32.bin", dir, names[k]);
        const vt_gguf_tensor *t = vt_gguf_find_tensor(g, name);
        if (!t || !t->data) fail_msg("%s.gguf: no tensor %s (or no data)", dir, name);
        assert_int_equal(t->ne[0], ZOO_COLS);
        assert_int_equal(t->ne[1], ZOO_ROWS);
        assert_string_equal(vt_type_name(t->type), names[k]);
        size_t rb = (size_t)vt_type_row_bytes(t->type, ZOO_COLS);
        assert_int_equal(t->nbytes, rb * ZOO_ROWS);
        char *rp = vt_test_path(fx, rel);
        size_t len = 0;
        float *want = vt_test_read_file(rp, &len);
        free(rp);
        assert_int_equal(len, sizeof(float) * ZOO_ROWS * ZOO_COLS);

        void *wd = dput(t->data, (size_t)t->nbytes);
        vt_weight wg = {t->type, ZOO_COLS, ZOO_ROWS, rb, wd, name};
        char what[128];
        snprintf(what, sizeof what, "%s %s get_rows (64 rows, permuted)", dir, names[k]);
        check_get_rows(what, &wg, want, ZOO_COLS, ids, ZOO_ROWS, 0);
        snprintf(what, sizeof what, "%s %s", dir, names[k]);
        one_hot_all(what, &wg, want);
        dfree(wd);
        free(want);
    }
    vt_gguf_close(g);
    free(path);
    fprintf(stderr, "  %s: %d types bit-exact (get_rows, one-hot products on every path)\n", dir,
            n_names);
}

static void test_zoo(void **s)
{
    (void)s;
    if (!ready()) return;
    const char *fx = vt_test_fixtures();
    if (!fx) return;
    zoo_check(fx, "quant-zoo", ZOO, N_ZOO);
    zoo_check(fx, "quant-zoo-2", ZOO2, N_ZOO2);
}

/* ---------------------------------------------------------------- 3. random weights */

static void test_get_rows_random(void **s)
{
    (void)s;
    if (!ready()) return;
    const int64_t n_in = 1280, n_out = 37;
    static const int32_t ids[] = {0, 36, 5, 5, 17, 0, 1, 2, 35, 36, 20, 9, 9, 9};
    const int64_t n = (int64_t)(sizeof ids / sizeof ids[0]);
    for (int k = 0; k < N_QTYPES; k++) {
        const qtype *q = &QTYPES[k];
        for (int hostile = 0; hostile < 2; hostile++) {
            size_t rb;
            uint8_t *wh = make_weight(q, n_in, n_out, hostile, &rb);
            float *ref = ref_rows(q->id, wh, rb, n_in, n_out);
            if (!hostile)
                for (int64_t i = 0; i < n_in * n_out; i++) assert_true(isfinite(ref[i]));
            void *wd = dput(wh, rb * (size_t)n_out);
            vt_weight wg = {q->id, n_in, n_out, rb, wd, "test.rows"};
            char what[128];
            snprintf(what, sizeof what, "%s get_rows %s (%lld x %lld, %lld ids)", q->name,
                     hostile ? "all bytes random" : "sane scales", (long long)n_out,
                     (long long)n_in, (long long)n);
            check_get_rows(what, &wg, ref, n_in, ids, n, hostile);
            if (!hostile) {
                /* out of range: refused by name */
                int32_t bad = (int32_t)n_out;
                vt_clear_error();
                float *od = dput(NULL, sizeof(float) * (size_t)n_in);
                assert_int_equal(GR(q->id)(gctx, &wg, &bad, 1, od), VT_ERR_RANGE);
                assert_non_null(strstr(vt_last_error(), "get_rows"));
                dfree(od);
                snprintf(what, sizeof what, "%s (%lld x %lld, sane scales)", q->name,
                         (long long)n_out, (long long)n_in);
                one_hot_all(what, &wg, ref);
            }
            dfree(wd);
            free(ref);
            free(wh);
        }
    }
}

/* [rows][ld] random in [lo, hi), padding columns NaN */
static float *strided(int64_t rows, int64_t cols, int64_t ld, float lo, float hi)
{
    float *p = fbuf((size_t)(rows * ld));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < ld; c++) p[r * ld + c] = c < cols ? urand(lo, hi) : NAN;
    return p;
}

/* The activation rounding of backend-cuda's one-token matvecs
 * (gpu_qdot.cuh, the same as backend-cpu's vt_cpu_xq): per 32 values d =
 * max|x| / 127, q = round-to-nearest-even(x · (1/d)) in [-127, 127]; xh gets
 * d·q (NaN for a block with a NaN or infinity). */
void round_int8(const float *x, int64_t n, double *xh)
{
    for (int64_t b = 0; b < n / 32; b++) {
        float m = 0.0f;
        int bad = 0;
        for (int i = 0; i < 32; i++) {
            float a = fabsf(x[32 * b + i]);
            if (!(a <= FLT_MAX)) bad = 1;
            else if (a > m) m = a;
        }
        float d = m >= 127.0f * FLT_MIN ? m / 127.0f : 0.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
        for (int i = 0; i < 32; i++) {
            float q = nearbyintf(x[32 * b + i] * id);
            if (q > 127.0f) q = 127.0f;
            if (q < -127.0f) q = -127.0f;
            xh[32 * b + i] = bad ? NAN : (double)d * (double)q;
        }
    }
}

double g_worst;    /* largest |Δ| / tol over all random mat_mul cases (float paths) */
double g_worst_tc; /* the same for the tensor-core path and its bound */

void mm_case(const qtype *q, int64_t n_in, int64_t n_out, int64_t T)
{
    size_t rb;
    uint8_t *wh = make_weight(q, n_in, n_out, 0, &rb);
    float *wf = ref_rows(q->id, wh, rb, n_in, n_out);
    /* activation rows 16-byte aligned (the decode kernel reads them as float4)
     * or not (one float at a time), alternately */
    const int64_t ldx = n_in + ((n_out % 3 + T) % 2 ? 5 : 4), ldy = n_out + 3;
    float *x = strided(T, n_in, ldx, -1.0f, 1.0f);
    size_t ny = (size_t)(T * ldy);

    /* reference in double and the tolerance; padding: the sentinel, exactly */
    double *yr = calloc(ny, sizeof(double)), *tol = calloc(ny, sizeof(double));
    double *wn = calloc((size_t)n_out, sizeof(double)), *tol_tc = calloc(ny, sizeof(double));
    double *yr_tc = calloc(ny, sizeof(double)), *xh = calloc((size_t)n_in, sizeof(double));
    assert_true(yr && tol && wn && tol_tc && yr_tc && xh);
    /* the tensor-core path rounds the activations of a block type to int8
     * blocks first (x̂ = d·q, as decode does), then to TF32 */
    const int tc_xq = vt_type_block_size(q->id) > 1 && n_in % 32 == 0;
    for (int64_t o = 0; o < n_out; o++)
        for (int64_t i = 0; i < n_in; i++) wn[o] += (double)wf[o * n_in + i] * wf[o * n_in + i];
    for (int64_t t = 0; t < T; t++) {
        const float *xt = x + t * ldx;
        double xn = 0;
        for (int64_t i = 0; i < n_in; i++) xn += (double)xt[i] * xt[i];
        if (tc_xq) round_int8(xt, n_in, xh);
        else
            for (int64_t i = 0; i < n_in; i++) xh[i] = xt[i];
        for (int64_t o = 0; o < ldy; o++) {
            if (o >= n_out) {
                yr[t * ldy + o] = yr_tc[t * ldy + o] = 1234.5;
                continue;
            }
            const float *wr = wf + o * n_in;
            double acc = 0, acc_h = 0, sabs = 0;
            for (int64_t i = 0; i < n_in; i++) {
                acc += (double)wr[i] * xt[i];
                acc_h += (double)wr[i] * xh[i];
                sabs += fabs((double)wr[i] * xh[i]);
            }
            yr[t * ldy + o] = acc;
            yr_tc[t * ldy + o] = acc_h;
            tol[t * ldy + o] = 4.0 * sqrt((double)n_in) * U32 * sqrt(wn[o]) * sqrt(xn);
            /* TF32 inputs (gpu_ops.cu; 11 significant bits, unit roundoff
             * 2^-11 each): each term within (2^-10 + 2^-22)·|w x̂| */
            tol_tc[t * ldy + o] = tol[t * ldy + o] + (0x1p-10 + 0x1p-22) * sabs;
        }
    }

    void *wd = dput(wh, rb * (size_t)n_out);
    float *xd = dput(x, sizeof(float) * (size_t)(T * ldx));
    float *yg = fbuf(ny);
    vt_weight wg = {q->id, n_in, n_out, rb, wd, "test.w"};
    for (int path = 0; path < 3; path++) {
        if (path >= 1 && T <= 8) break; /* decode kernel: the same for every context */
        /* path 2: qctx, the tensor cores (cuBLAS in TF32) */
        vt_backend_ctx *ctx = path == 2 ? qctx : path ? tctx : gctx;
        const int tc = path == 2;
        const double *tl = tc ? tol_tc : tol, *yw = tc ? yr_tc : yr;
        for (size_t k = 0; k < ny; k++) yg[k] = 1234.5f;
        float *yd = dput(yg, sizeof(float) * ny);
        OKC(MM(q->id)(ctx, &wg, xd, ldx, yd, ldy, T));
        dget(yg, yd, sizeof(float) * ny);
        dfree(yd);
        double max_abs = 0, worst = 0;
        int64_t bad = -1;
        for (size_t k = 0; k < ny; k++) {
            double d = fabs((double)yg[k] - yw[k]);
            if (!(d <= tl[k])) { /* NaN fails too */
                if (bad < 0) bad = (int64_t)k;
            }
            if (d > max_abs) max_abs = d;
            if (tl[k] > 0 && d / tl[k] > worst) worst = d / tl[k];
        }
        if (!tc && worst > g_worst) g_worst = worst;
        if (tc && worst > g_worst_tc) g_worst_tc = worst;
        char what[160];
        snprintf(what, sizeof what, "%s mat_mul n_in %lld n_out %lld T %lld %s", q->name,
                 (long long)n_in, (long long)n_out, (long long)T,
                 T > 8 ? (path == 2 ? "[tc tf32]" : path ? "[tiled]" : "[gemm]")
                       : ldx % 4 ? "[vec]" : "[vec x4]");
        fprintf(stderr, "  %-52s max|d| %.3g  worst d/tol %.3g\n", what, max_abs, worst);
        if (bad >= 0)
            fail_msg("%s: token %lld row %lld: cuda %.9g, reference %.9g (|d| %.3g > tol %.3g)",
                     what, (long long)(bad / ldy), (long long)(bad % ldy), (double)yg[bad], yw[bad],
                     fabs((double)yg[bad] - yw[bad]), tl[bad]);
    }
    free(tol_tc);
    free(yr_tc);
    free(xh);
    dfree(wd);
    dfree(xd);
    free(yg);
    free(yr);
    free(tol);
    free(wn);
    free(wf);
    free(wh);
    free(x);
}

static void test_mat_mul_random(void **s)
{
    (void)s;
    if (!ready()) return;
    static const int64_t n_outs[] = {1, 7, 333};
    static const int64_t Ts[] = {1, 3, 17, 64};
    g_worst = g_worst_tc = 0;
    for (int k = 0; k < N_QTYPES; k++) {
        const qtype *q = &QTYPES[k];
        const int64_t n_ins[] = {q->qk == 32 ? 160 : 256, 1280, 4352};
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++)
                for (int c = 0; c < 4; c++) mm_case(q, n_ins[a], n_outs[b], Ts[c]);
    }
    /* more rows than one 64 MiB dequantisation chunk (3855 rows of 4352) */
    mm_case(&QTYPES[7], 4352, 4100, 17);  /* Q4_K */
    mm_case(&QTYPES[12], 4352, 3857, 64); /* MXFP4 */
    /* more rows than one 64 MiB TF32 chunk of the tensor-core path (2048 rows of 8192) */
    mm_case(&QTYPES[9], 8192, 4100, 17); /* Q6_K */
    /* odd token counts on both sides of the 64-token tile, one that fills it twice */
    for (int k = 0; k < N_QTYPES; k++) {
        mm_case(&QTYPES[k], QTYPES[k].qk == 32 ? 160 : 512, 65, 9);
        mm_case(&QTYPES[k], QTYPES[k].qk == 32 ? 160 : 512, 129, 65);
        mm_case(&QTYPES[k], QTYPES[k].qk == 32 ? 160 : 512, 64, 130);
    }
    fprintf(stderr, "  random mat_mul: worst |d|/tol over all cases %.3g (float paths), %.3g "
            "(tensor cores, TF32 bound)\n", g_worst, g_worst_tc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_capabilities),
        cmocka_unit_test(test_zoo),
        cmocka_unit_test(test_get_rows_random),
        cmocka_unit_test(test_mat_mul_random),
        cmocka_unit_test(test_mat_mul_int8),
        cmocka_unit_test(test_int8_rounding_reuse),
        cmocka_unit_test(test_refusals),
    };
    return vt_test_exit(cmocka_run_group_tests_name("cuda_quant", tests, NULL, teardown));
}
