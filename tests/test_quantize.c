/*
 * test_quantize.c - the quantisers of core/tools/quantize.c (vt_quantize_row:
 * float32 rows to every common GGUF weight type) and `vt mkmodel`'s use of
 * them.
 *
 * 1. Round trip: rows of many kinds (normal with several seeds, all zeros, a
 *    single huge outlier of either sign, negative-only, positive-only with an
 *    offset, scales varying per 16 values, tiny, large, exact grid ties) are
 *    quantised, decoded by backend-cpu's reference dequantiser
 *    (vt_cpu_dequant_row, bit-exact against llama.cpp: test_quant_zoo.c), and
 *    every element's error is held to a bound DERIVED below for each type from
 *    the documented scale rule (quantize.h) - computed here in double from the
 *    input alone, never from the code under test. Quantising twice, or block
 *    by block, gives the same bytes.
 * 2. F16, BF16 and Q8_0 bytes equal an independent implementation written
 *    here (double arithmetic with frexp/nearbyint; llama.cpp's reference Q8_0
 *    with roundf), including subnormals, ties, overflow, inf and NaN.
 * 3. Refusals: bad n, NULL, unsupported types, non-finite values.
 * 4. (parts 4 and 5: test_quantize_mkmodel.c, the same program)
 *    vt_mkmodel: q4_k_m / q5_k_m put Q6_K exactly on output.weight and the
 *    ffn_down matrices (qwen35moe and gemma4), norms and routers stay F32,
 *    general.file_type is llama.cpp's; every quantised tensor's bytes equal
 *    vt_quantize_row of the same model's F32 tensor (the generator's batches,
 *    chunks and threads put each block in its place); 1 and 3 generator
 *    threads give the same file; the llama.cpp fallback for rows that are
 *    not whole blocks (n_embd 64: Q4_K -> Q5_0, Q6_K -> Q8_0, Q2_K -> IQ4_NL,
 *    a row of 48 -> F16).
 * 5. `vt run` on a small model (n_embd 256) of every type and of the mixes
 *    exits 0.
 */
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"
#include "test_quantize.h"

#include "cpu_internal.h"
#include "error.h"
#include "mkmodel.h"
#include "quantize.h"
#include "vt/gguf.h"
#include "vt/types.h"

char *g_dir;

static int setup(void **state)
{
    (void)state;
    g_dir = strdup("/tmp/vt-test-quantize-XXXXXX");
    return g_dir && mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    int rc = system(cmd);
    free(g_dir);
    return rc ? -1 : 0;
}

/* The types vt_quantize_row writes. */
static const uint32_t TYPES[] = {
    VT_TYPE_F32,  VT_TYPE_F16,  VT_TYPE_BF16, VT_TYPE_Q8_0, VT_TYPE_Q4_0,   VT_TYPE_Q4_1,
    VT_TYPE_Q5_0, VT_TYPE_Q5_1, VT_TYPE_Q2_K, VT_TYPE_Q3_K, VT_TYPE_Q4_K,   VT_TYPE_Q5_K,
    VT_TYPE_Q6_K, VT_TYPE_IQ4_NL, VT_TYPE_IQ4_XS, VT_TYPE_MXFP4,
};
#define N_TYPES ((int)(sizeof TYPES / sizeof TYPES[0]))

/* ------------------------------------------------------------------------ */
/* Test data                                                                 */
/* ------------------------------------------------------------------------ */

static uint64_t rng_next(uint64_t *s) /* splitmix64 */
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_unit(uint64_t *s) { return ((double)(rng_next(s) >> 11) + 0.5) * 0x1p-53; }

static double rng_normal(uint64_t *s) /* Box-Muller */
{
    double u1 = rng_unit(s), u2 = rng_unit(s);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#define ROW 1024 /* 4 super-blocks of 256, 32 blocks of 32 */

enum {
    ROW_NORMAL1, ROW_NORMAL2, ROW_NORMAL3, ROW_ZEROS, ROW_OUTLIER_POS, ROW_OUTLIER_NEG,
    ROW_NEGATIVE, ROW_POSITIVE, ROW_SCALES, ROW_TINY, ROW_LARGE, ROW_TIES, N_ROWS
};
static const char *const ROW_NAMES[N_ROWS] = {
    "normal seed 1", "normal seed 2", "normal seed 3", "all zeros", "huge positive outlier",
    "huge negative outlier", "negative only", "positive only (offset 3)",
    "scale varying per 16", "tiny (1e-4)", "large (100)", "grid ties",
};

static void make_row(int kind, float *x)
{
    uint64_t s = 0x1234567ull + (uint64_t)kind * 1000003ull;
    for (int i = 0; i < ROW; i++) {
        double n = rng_normal(&s), v;
        switch (kind) {
        case ROW_ZEROS: v = 0.0; break;
        case ROW_OUTLIER_POS: v = i == 137 ? 50.0 : 0.02 * n; break;
        case ROW_OUTLIER_NEG: v = i == 600 ? -80.0 : 0.02 * n; break;
        case ROW_NEGATIVE: v = -(fabs(n) + 0.1); break;
        case ROW_POSITIVE: v = 3.0 + fabs(n); break;
        case ROW_SCALES: v = n * ldexp(1.0, (i / 16) % 9 - 4); break;
        case ROW_TINY: v = n * 1e-4; break;
        case ROW_LARGE: v = n * 100.0; break;
        case ROW_TIES: v = (double)(i % 16 - 8) + (i % 3 ? 0.5 : 0.0); break;
        default: v = n; break; /* the three normal rows differ by kind in the seed */
        }
        x[i] = (float)v;
    }
}

/* ------------------------------------------------------------------------ */
/* Error bounds, derived per type                                            */
/* ------------------------------------------------------------------------ */
/*
 * Notation. For a block x (32 values, or a 256-value super-block): A = max|x|,
 * ext = the value of largest |x| (the first if tied). f16(v) is v rounded to
 * binary16; for |v| < 65504, |f16(v) - v| <= fe(v) = |v|·2^-11 + 2^-25
 * (half an ulp of a normal half is at most 2^-11 relative; half the subnormal
 * spacing 2^-24 is 2^-25). G(x; s, lo, hi) = min over integers k in [lo, hi]
 * of |x - k·s| (the best any uniform grid of step s can do); for x inside the
 * grid's span it is at most |s|/2. sigma = 2^-16·A + 1e-30 covers float32
 * rounding in the quantiser's divisions (a near-tie may round to the other
 * neighbour) and in the dequantiser's one rounding product or sum.
 *
 * Every bound has the same shape: (error of the ideal, unrounded scales) +
 * (largest code) x (error of the rounded scale), by the triangle inequality:
 * the quantiser picks the code nearest x on the FINAL grid, which is at least
 * as close as the code k* that is best for the ideal grid, and that code
 * moves by |k*|·|s' - s| when s is replaced by the stored s'.
 *
 *  Q8_0    d = A/127, q = round(x/d) in [-127, 127] (never clipped), stored d'
 *          = f16(d): |x - q·d'| <= |x - q·d| + 127·|d - d'|
 *          <= d/2 + 127·fe(d) + sigma.
 *  Q4_0,   s = ext / -h (h = 8, 16), codes k in [-h, h-1] at step s' =
 *  Q5_0    f16(s): err <= G(x; s, -h, h-1) + h·fe(s) + sigma. G <= |s|/2,
 *          except for x on the side opposite ext beyond (h - 1/2)|s|, where
 *          the top code h-1 is short of x by at most |s|.
 *  Q4_1,   m = min x, d = (max - min)/L (L = 15, 31), both f16; grid m' + k·d',
 *  Q5_1    k in [0, L]: err <= G(x - m; d, 0, L) + fe(m) + L·fe(d) + sigma,
 *          G <= d/2.
 *  IQ4_NL  s = ext / -127 (ext meets the codebook end -127), grid K[k]·s',
 *          s' = f16(s): err <= min_k |x - K[k]·s| + 127·fe(s) + sigma. The
 *          first term is at most half a codebook gap (<= 11.5|s|) inside
 *          [-127s, 113s] and at most 14|s| beyond 113|s| on the other side.
 *  MXFP4   scale 2^(e-127) with e the smallest exponent with A <= 6·2^(e-127)
 *          (a power of two: no rounding); each x is the nearest of the E2M1
 *          grid {0, ±0.5, ±1, ±1.5, ±2, ±3, ±4, ±6} times the scale, so
 *          err = its distance to that grid (half the FP4 spacing at that
 *          magnitude times 2^(e-127)), checked to within 1e-6 relative.
 *  K-quant scale codes. A super-block scale d = (largest ideal sub-block
 *          scale) / smax is stored as d' = f16(d); sub-block scale codes are
 *          r = round(s_j / d') clamped to the code range. Unclipped, the
 *          stored scale d'·r is within d'/2 <= (d + fe(d))/2 of s_j; clipped
 *          at smax (only when f16 rounded d down, |s_j| <= smax·d), within
 *          smax·(d - d') <= smax·fe(d). So
 *          delta(d, smax) = (d + fe(d))/2 + smax·fe(d) bounds |s_j - d'·r|.
 *  Q2_K,   sub-blocks of n (16, 32, 32) with lo = min(0, min x), hi = max x,
 *  Q4_K,   scale_j = (hi - lo)/L (L = 3, 15, 31), min_j = -lo; d = max scale_j
 *  Q5_K    / smax, dmin = max min_j / smax (smax = 15 for Q2_K's 4-bit fields,
 *          63 for the 6-bit ones). The final grid is -dm_j + k·ds_j, k in
 *          [0, L], with |ds_j - scale_j| <= delta(d), |dm_j - min_j| <=
 *          delta(dmin): err <= G(x - lo; scale_j, 0, L) + delta(dmin, smax)
 *          + L·delta(d, smax) + sigma, G <= scale_j/2.
 *  Q3_K,   sub-blocks of 16, s_j = ext_j / -h (h = 4, 32); d = max|s_j| / smax
 *  Q6_K    (smax = 31 for Q3_K's signed 6-bit scales, 127 for Q6_K's int8);
 *          codes in [-h, h-1]: err <= G(x; s_j, -h, h-1) + h·delta(d, smax)
 *          + sigma.
 *  IQ4_XS  sub-blocks of 32, s_j = ext_j / -127, d = max|s_j| / 31, grid
 *          K[k]·dl_j with |dl_j - s_j| <= delta(d, 31): err <= min_k |x -
 *          K[k]·s_j| + 127·delta(d, 31) + sigma.
 *  F16     |f16(x) - x| <= fe(x); BF16: |bf16(x) - x| <= |x|·2^-8 + 2^-149.
 */

static double fe(double v) { return fabs(v) * 0x1p-11 + 0x1p-25; }
static double delta(double d, int smax) { return (d + fe(d)) / 2 + smax * fe(d); }

static double grid_dist(double x, double s, int lo, int hi)
{
    if (s == 0.0) return fabs(x);
    double k0 = nearbyint(x / s), best = INFINITY;
    for (int dk = -1; dk <= 1; dk++) {
        double k = k0 + dk;
        k = k < lo ? lo : k > hi ? hi : k;
        double e = fabs(x - k * s);
        best = e < best ? e : best;
    }
    return best;
}

static const int IQ4_K[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                              1,    13,   25,  38,  53,  69,  89,  113}; /* gguf.md §6.14 */

static double codebook_dist(double x, double s)
{
    double best = INFINITY;
    for (int k = 0; k < 16; k++) {
        double e = fabs(x - IQ4_K[k] * s);
        best = e < best ? e : best;
    }
    return best;
}

static double fp4_dist(double x, double s)
{
    static const double g[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6}; /* gguf.md §6.16 */
    double best = INFINITY;
    for (int k = 0; k < 8; k++) {
        double e = fmin(fabs(x - g[k] * s), fabs(x + g[k] * s));
        best = e < best ? e : best;
    }
    return best;
}

static double amax_of(const float *x, int n)
{
    double a = 0;
    for (int i = 0; i < n; i++) a = fmax(a, fabs((double)x[i]));
    return a;
}

static double ext_of(const float *x, int n)
{
    double e = x[0];
    for (int i = 1; i < n; i++)
        if (fabs((double)x[i]) > fabs(e)) e = x[i];
    return e;
}

/* The allowed error b[i] of every element of one block x of `type` (the block
 * size of the type; 1 for F32/F16/BF16), as derived above. */
static void block_bounds(uint32_t type, const float *x, double *b)
{
    const int n = (int)vt_type_block_size(type);
    const double A = amax_of(x, n), sigma = A * 0x1p-16 + 1e-30;
    switch (type) {
    case VT_TYPE_F32: b[0] = 0; return;
    case VT_TYPE_F16: b[0] = fe(x[0]); return;
    case VT_TYPE_BF16: b[0] = fabs((double)x[0]) * 0x1p-8 + 0x1p-149; return;
    case VT_TYPE_Q8_0: {
        double d = A / 127;
        for (int i = 0; i < n; i++) b[i] = d / 2 + 127 * fe(d) + sigma;
        return;
    }
    case VT_TYPE_Q4_0:
    case VT_TYPE_Q5_0: {
        int h = type == VT_TYPE_Q4_0 ? 8 : 16;
        double s = ext_of(x, n) / -h;
        for (int i = 0; i < n; i++) b[i] = grid_dist(x[i], s, -h, h - 1) + h * fe(s) + sigma;
        return;
    }
    case VT_TYPE_Q4_1:
    case VT_TYPE_Q5_1: {
        int L = type == VT_TYPE_Q4_1 ? 15 : 31;
        double mn = x[0], mx = x[0];
        for (int i = 1; i < n; i++) {
            mn = fmin(mn, x[i]);
            mx = fmax(mx, x[i]);
        }
        double d = (mx - mn) / L;
        for (int i = 0; i < n; i++) b[i] = grid_dist(x[i] - mn, d, 0, L) + fe(mn) + L * fe(d) + sigma;
        return;
    }
    case VT_TYPE_IQ4_NL: {
        double s = ext_of(x, n) / -127;
        for (int i = 0; i < n; i++) b[i] = codebook_dist(x[i], s) + 127 * fe(s) + sigma;
        return;
    }
    case VT_TYPE_MXFP4: {
        int e = 0; /* smallest e in 0..254 with A <= 6·2^(e-127) */
        while (e < 254 && A > 6 * ldexp(1.0, e - 127)) e++;
        double s = ldexp(1.0, e - 127);
        for (int i = 0; i < n; i++) b[i] = fp4_dist(x[i], s) * (1 + 1e-6) + 1e-30;
        return;
    }
    case VT_TYPE_Q2_K:
    case VT_TYPE_Q4_K:
    case VT_TYPE_Q5_K: {
        const int len = type == VT_TYPE_Q2_K ? 16 : 32, L = type == VT_TYPE_Q2_K ? 3 : type == VT_TYPE_Q4_K ? 15 : 31,
                  smax = type == VT_TYPE_Q2_K ? 15 : 63;
        double lo[16], scale[16], max_scale = 0, max_min = 0;
        for (int j = 0; j < 256 / len; j++) {
            double l = 0, h = x[len * j];
            for (int i = 0; i < len; i++) {
                l = fmin(l, x[len * j + i]);
                h = fmax(h, x[len * j + i]);
            }
            lo[j] = l;
            scale[j] = (h - l) / L;
            max_scale = fmax(max_scale, scale[j]);
            max_min = fmax(max_min, -l);
        }
        double dd = delta(max_scale / smax, smax), dm = delta(max_min / smax, smax);
        for (int i = 0; i < 256; i++)
            b[i] = grid_dist(x[i] - lo[i / len], scale[i / len], 0, L) + dm + L * dd + sigma;
        return;
    }
    case VT_TYPE_Q3_K:
    case VT_TYPE_Q6_K:
    case VT_TYPE_IQ4_XS: {
        const int len = type == VT_TYPE_IQ4_XS ? 32 : 16,
                  h = type == VT_TYPE_Q3_K ? 4 : type == VT_TYPE_Q6_K ? 32 : 127,
                  smax = type == VT_TYPE_Q6_K ? 127 : 31;
        double s[16], S = 0;
        for (int j = 0; j < 256 / len; j++) {
            s[j] = ext_of(x + len * j, len) / -h;
            S = fmax(S, fabs(s[j]));
        }
        double dd = delta(S / smax, smax);
        for (int i = 0; i < 256; i++)
            b[i] = (type == VT_TYPE_IQ4_XS ? codebook_dist(x[i], s[i / len])
                                           : grid_dist(x[i], s[i / len], -h, h - 1)) +
                   h * dd + sigma;
        return;
    }
    default: fail_msg("no bound for type %u", type);
    }
}

/* ------------------------------------------------------------------------ */
/* 1. Round trip through the reference dequantiser                           */
/* ------------------------------------------------------------------------ */

/*
 * Best code given the block's own scales: the bounds above allow rounding
 * with an unrounded scale; the quantisers must round each weight on the FINAL
 * grid. Every code value c is tried by writing c into ALL code fields of a
 * copy of the block (the code bytes of gguf.md §6; with every field equal,
 * their order inside the block does not matter) and decoding it: the decoded
 * value of each weight must be as close to x as the best c gives. Q8_0 is
 * exempt: it keeps llama.cpp's reference arithmetic (codes from the unrounded
 * d = amax/127), byte for byte, so a code may be one off the final grid's
 * best near a tie; its bound above covers that.
 */
static int code_count(uint32_t type)
{
    switch (type) {
    case VT_TYPE_Q8_0: return 256;
    case VT_TYPE_Q5_0:
    case VT_TYPE_Q5_1:
    case VT_TYPE_Q5_K: return 32;
    case VT_TYPE_Q6_K: return 64;
    case VT_TYPE_Q3_K: return 8;
    case VT_TYPE_Q2_K: return 4;
    case VT_TYPE_F32:
    case VT_TYPE_F16:
    case VT_TYPE_BF16: return 0;
    default: return 16; /* Q4_0, Q4_1, Q4_K, IQ4_NL, IQ4_XS, MXFP4 */
    }
}

/* Fill n bytes with the w-bit field value v repeated (w = 1, 2, 4, 8). */
static void fill_fields(uint8_t *p, size_t n, unsigned v, int w)
{
    unsigned byte = 0;
    for (int k = 0; k < 8; k += w) byte |= (v & ((1u << w) - 1)) << k;
    memset(p, (int)byte, n);
}

static void set_codes(uint32_t type, uint8_t *b, int c)
{
    switch (type) {
    case VT_TYPE_Q8_0: b[2] = (uint8_t)c; memset(b + 2, b[2], 32); break; /* int8 bits */
    case VT_TYPE_Q4_0:
    case VT_TYPE_IQ4_NL: fill_fields(b + 2, 16, c, 4); break;
    case VT_TYPE_Q4_1: fill_fields(b + 4, 16, c, 4); break;
    case VT_TYPE_MXFP4: fill_fields(b + 1, 16, c, 4); break;
    case VT_TYPE_Q5_0: fill_fields(b + 2, 4, c >> 4, 1); fill_fields(b + 6, 16, c, 4); break;
    case VT_TYPE_Q5_1: fill_fields(b + 4, 4, c >> 4, 1); fill_fields(b + 8, 16, c, 4); break;
    case VT_TYPE_Q2_K: fill_fields(b + 16, 64, c, 2); break;
    case VT_TYPE_Q3_K: fill_fields(b, 32, c >> 2, 1); fill_fields(b + 32, 64, c, 2); break;
    case VT_TYPE_Q4_K: fill_fields(b + 16, 128, c, 4); break;
    case VT_TYPE_Q5_K: fill_fields(b + 16, 32, c >> 4, 1); fill_fields(b + 48, 128, c, 4); break;
    case VT_TYPE_Q6_K: fill_fields(b, 128, c, 4); fill_fields(b + 128, 64, c >> 4, 2); break;
    case VT_TYPE_IQ4_XS: fill_fields(b + 8, 128, c, 4); break;
    default: fail_msg("no codes for type %u", type);
    }
}

/* The smallest error any code gives each weight of block blk (scales kept). */
static void best_code_error(uint32_t type, const uint8_t *blk, const float *x, double *best)
{
    const int n = (int)vt_type_block_size(type);
    uint8_t copy[512];
    float y[256];
    for (int i = 0; i < n; i++) best[i] = INFINITY;
    for (int c = 0; c < code_count(type); c++) {
        memcpy(copy, blk, vt_type_size(type));
        set_codes(type, copy, c);
        assert_int_equal(vt_cpu_dequant_row(type, copy, n, y), VT_OK);
        for (int i = 0; i < n; i++) best[i] = fmin(best[i], fabs((double)y[i] - (double)x[i]));
    }
}

size_t row_bytes(uint32_t type, int64_t n)
{
    return (size_t)(n / vt_type_block_size(type)) * vt_type_size(type);
}

static void test_round_trip(void **state)
{
    (void)state;
    float x[ROW], y[ROW];
    double b[ROW];
    static uint8_t q1[ROW * 4 + 64], q2[ROW * 4 + 64], q3[ROW * 4 + 64];
    int failed = 0;
    for (int t = 0; t < N_TYPES; t++) {
        const uint32_t type = TYPES[t], bs = vt_type_block_size(type);
        const size_t nbytes = row_bytes(type, ROW), ts = vt_type_size(type);
        double worst_ratio = 0, rms_err = 0, rms_x = 0;
        for (int r = 0; r < N_ROWS; r++) {
            make_row(r, x);
            memset(q1, 0xA5, sizeof q1);
            memset(q2, 0x5A, sizeof q2);
            assert_int_equal(vt_quantize_row(type, x, ROW, q1), VT_OK);
            assert_int_equal(vt_quantize_row(type, x, ROW, q2), VT_OK);
            if (memcmp(q1, q2, nbytes)) fail_msg("%s: quantising twice differs", vt_type_name(type));
            if (q1[nbytes] != 0xA5) fail_msg("%s: wrote past the row's %zu bytes", vt_type_name(type), nbytes);
            for (uint32_t k = 0; k < ROW / bs; k++) /* block by block: no state between blocks */
                assert_int_equal(vt_quantize_row(type, x + k * bs, bs, q3 + k * ts), VT_OK);
            if (memcmp(q1, q3, nbytes)) fail_msg("%s: block by block differs", vt_type_name(type));
            assert_int_equal(vt_cpu_dequant_row(type, q1, ROW, y), VT_OK);
            for (uint32_t k = 0; k < ROW / bs; k++) block_bounds(type, x + k * bs, b + k * bs);
            if (code_count(type) && type != VT_TYPE_Q8_0) {
                for (uint32_t k = 0; k < ROW / bs; k++) {
                    double best[256], tiny = amax_of(x + k * bs, (int)bs) * 0x1p-18 + 1e-30;
                    best_code_error(type, q1 + k * ts, x + k * bs, best);
                    for (uint32_t i = 0; i < bs; i++) {
                        double err = fabs((double)y[k * bs + i] - (double)x[k * bs + i]);
                        if (!(err <= best[i] + tiny) && failed++ < 20)
                            print_error("%s, row '%s', element %u: error %.3g, but another "
                                        "code of the same block gives %.3g\n",
                                        vt_type_name(type), ROW_NAMES[r], k * bs + i, err, best[i]);
                    }
                }
            }
            for (int i = 0; i < ROW; i++) {
                double err = fabs((double)y[i] - (double)x[i]);
                if (!(err <= b[i])) {
                    if (failed++ < 20)
                        print_error("%s, row '%s', element %d: x = %.9g, decoded %.9g, error %.3g "
                                    "> bound %.3g\n",
                                    vt_type_name(type), ROW_NAMES[r], i, x[i], y[i], err, b[i]);
                }
                if (b[i] > 0) worst_ratio = fmax(worst_ratio, err / b[i]);
                if (r <= ROW_NORMAL3) {
                    rms_err += err * err;
                    rms_x += (double)x[i] * x[i];
                }
            }
        }
        printf("  %-7s worst error / bound %.3f, normal rows: rms error / rms value %.5f\n",
               vt_type_name(type), worst_ratio, sqrt(rms_err / (rms_x > 0 ? rms_x : 1)));
    }
    if (failed) fail_msg("%d elements beyond their derived bound", failed);
}

/* The relative rms error on normal data, against ceilings that a working
 * quantiser of that many bits stays well inside (a uniform step D over about
 * 2·3σ with b bits gives D/sqrt(12) ≈ 6σ/2^b/3.46 - e.g. 4 bits: 0.11σ; the
 * ceilings allow 1.5x that, and catch a quantiser that wastes range). */
static void test_quality(void **state)
{
    (void)state;
    static const struct {
        uint32_t type;
        double max_rel_rms;
    } ceil_of[] = {
        {VT_TYPE_Q8_0, 0.006}, {VT_TYPE_Q6_K, 0.025}, {VT_TYPE_Q5_0, 0.07},  {VT_TYPE_Q5_1, 0.06},
        {VT_TYPE_Q5_K, 0.05},  {VT_TYPE_Q4_0, 0.13},  {VT_TYPE_Q4_1, 0.12},  {VT_TYPE_Q4_K, 0.10},
        {VT_TYPE_IQ4_NL, 0.12}, {VT_TYPE_IQ4_XS, 0.12}, {VT_TYPE_MXFP4, 0.20}, {VT_TYPE_Q3_K, 0.25},
        {VT_TYPE_Q2_K, 0.45},
    };
    enum { N = 256 * 64 };
    static float x[N], y[N];
    static uint8_t q[N * 2];
    uint64_t s = 42;
    for (int i = 0; i < N; i++) x[i] = (float)rng_normal(&s);
    for (size_t k = 0; k < sizeof ceil_of / sizeof ceil_of[0]; k++) {
        uint32_t type = ceil_of[k].type;
        assert_int_equal(vt_quantize_row(type, x, N, q), VT_OK);
        assert_int_equal(vt_cpu_dequant_row(type, q, N, y), VT_OK);
        double se = 0, sx = 0;
        for (int i = 0; i < N; i++) {
            se += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
            sx += (double)x[i] * x[i];
        }
        double rel = sqrt(se / sx);
        printf("  %-7s rms error / rms value on N(0,1): %.4f (ceiling %.3f)\n", vt_type_name(type),
               rel, ceil_of[k].max_rel_rms);
        if (rel > ceil_of[k].max_rel_rms)
            fail_msg("%s: relative rms error %.4f above %.3f", vt_type_name(type), rel,
                     ceil_of[k].max_rel_rms);
    }
}

/* ------------------------------------------------------------------------ */
/* 2. F16, BF16, Q8_0 against an independent implementation                  */
/* ------------------------------------------------------------------------ */

/* binary16 of f, round to nearest even, in double: the quantum of |f|'s
 * binade (2^(E-10), at least the subnormal 2^-24), nearbyint (ties to even). */
static uint16_t ref_f16(float f)
{
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    if (isnan(f)) return 0x7E00;
    double a = fabs((double)f);
    if (isinf(a)) return sign | 0x7C00;
    int e;
    frexp(a, &e);
    int E = e - 1 < -14 ? -14 : e - 1; /* a in [2^E, 2^(E+1)) */
    double quantum = ldexp(1.0, E - 10), r = nearbyint(a / quantum) * quantum;
    if (r >= 65536.0) return sign | 0x7C00;
    if (r < ldexp(1.0, -14)) return sign | (uint16_t)(r / ldexp(1.0, -24));
    frexp(r, &e);
    E = e - 1;
    return sign | (uint16_t)((E + 15) << 10) | (uint16_t)((r / ldexp(1.0, E) - 1.0) * 1024);
}

/* bfloat16 of f: the nearer of the two neighbours by truncation, ties to even. */
static uint16_t ref_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if (isnan(f)) return 0x7FC0;
    if (isinf(f)) return (uint16_t)(u >> 16);
    uint32_t lo = u & 0xFFFF0000u, hi = lo + 0x10000u;
    float flo, fhi;
    memcpy(&flo, &lo, 4);
    memcpy(&fhi, &hi, 4);
    double a = fabs((double)f), dlo = fabs((double)flo),
           dhi = isinf(fhi) ? ldexp(1.0, 128) : fabs((double)fhi);
    if (a - dlo < dhi - a) return (uint16_t)(lo >> 16);
    if (a - dlo > dhi - a) return (uint16_t)(hi >> 16);
    return (uint16_t)(((lo >> 16) & 1) ? hi >> 16 : lo >> 16);
}

/* llama.cpp's reference Q8_0 block (quantize_row_q8_0_ref), as written there. */
static void ref_q8_0(const float *x, uint8_t *blk)
{
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
    uint16_t h = ref_f16(d);
    blk[0] = (uint8_t)h;
    blk[1] = (uint8_t)(h >> 8);
    for (int j = 0; j < 32; j++) blk[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
}

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

static int is_nan16(uint16_t h, int bf) /* NaN in binary16 / bfloat16 */
{
    return bf ? (h & 0x7F80) == 0x7F80 && (h & 0x7F) : (h & 0x7C00) == 0x7C00 && (h & 0x3FF);
}

static void test_exact_formats(void **state)
{
    (void)state;
    enum { N = 40000 };
    static float x[N];
    static uint8_t out[N * 2];
    uint64_t s = 7;
    int n = 0;
    /* special values: zeros, the ends of each range, ties, overflow, inf, NaN */
    const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.0f, 65520.0f, -65520.0f,
                             1e10f, 0x1p-24f, 0x1p-25f, 0x1.8p-25f, 0x1p-26f, 0x1.8p-24f, 0x1p-14f,
                             0x1.ffcp-15f, 0x1.002p0f, 0x1.006p0f, 0x1.001p0f, 0x1.0101p0f,
                             0x1.0180p0f, 0x1.0080p0f, 3.0e38f, 3.4028235e38f, -3.4028235e38f,
                             1e-40f, -1e-45f, INFINITY, -INFINITY, NAN};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) x[n++] = special[i];
    while (n < N / 2) /* random values over the binades around the half range */
        x[n++] = (float)(ldexp(rng_unit(&s) + 0.5, (int)(rng_next(&s) % 56) - 36) *
                         (rng_next(&s) & 1 ? -1 : 1));
    while (n < N) { /* random bit patterns: every exponent, mantissa tails at ties */
        uint32_t u = (uint32_t)rng_next(&s);
        if (n % 4 == 0) u = (u & 0xFFFF0000u) | 0x8000u; /* bf16 ties */
        if (n % 4 == 1) u = (u & 0xFFFFE000u) | 0x1000u; /* f16 ties */
        memcpy(&x[n++], &u, 4);
    }
    assert_int_equal(vt_quantize_row(VT_TYPE_F16, x, N, out), VT_OK);
    for (int i = 0; i < N; i++) {
        uint16_t got = rd16(out + 2 * i), want = ref_f16(x[i]);
        if (isnan(x[i]) ? !is_nan16(got, 0) : got != want)
            fail_msg("F16 of %a: got 0x%04x, want 0x%04x", (double)x[i], got, want);
    }
    assert_int_equal(vt_quantize_row(VT_TYPE_BF16, x, N, out), VT_OK);
    for (int i = 0; i < N; i++) {
        uint16_t got = rd16(out + 2 * i), want = ref_bf16(x[i]);
        if (isnan(x[i]) ? !is_nan16(got, 1) : got != want)
            fail_msg("BF16 of %a: got 0x%04x, want 0x%04x", (double)x[i], got, want);
    }
    /* Q8_0: every test row kind, and random scales over many binades */
    float row[ROW];
    uint8_t got[ROW / 32 * 34], want[34];
    for (int r = 0; r < N_ROWS + 20; r++) {
        if (r < N_ROWS)
            make_row(r, row);
        else
            for (int i = 0; i < ROW; i++)
                row[i] = (float)(rng_normal(&s) * ldexp(1.0, (int)(rng_next(&s) % 40) - 24));
        assert_int_equal(vt_quantize_row(VT_TYPE_Q8_0, row, ROW, got), VT_OK);
        for (int k = 0; k < ROW / 32; k++) {
            ref_q8_0(row + 32 * k, want);
            if (memcmp(got + 34 * k, want, 34))
                fail_msg("Q8_0 block %d of row %d differs from the reference", k, r);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* 3. Refusals                                                               */
/* ------------------------------------------------------------------------ */

static void test_errors(void **state)
{
    (void)state;
    float x[256] = {0};
    uint8_t out[1024];
    memset(out, 0x77, sizeof out);
    assert_int_equal(vt_quantize_row(VT_TYPE_Q4_K, x, 100, out), VT_ERR_INVALID_ARG);
    assert_non_null(strstr(vt_last_error(), "Q4_K"));
    assert_non_null(strstr(vt_last_error(), "100"));
    assert_int_equal(vt_quantize_row(VT_TYPE_Q4_0, x, 48, out), VT_ERR_INVALID_ARG);
    assert_int_equal(vt_quantize_row(VT_TYPE_Q8_0, x, -32, out), VT_ERR_INVALID_ARG);
    assert_int_equal(vt_quantize_row(VT_TYPE_Q8_0, NULL, 32, out), VT_ERR_INVALID_ARG);
    assert_int_equal(vt_quantize_row(VT_TYPE_F16, x, 32, NULL), VT_ERR_INVALID_ARG);
    assert_int_equal(vt_quantize_row(VT_TYPE_Q6_K, x, 0, NULL), VT_OK); /* nothing to do */
    assert_int_equal(out[0], 0x77);
    static const uint32_t unsupported[] = {VT_TYPE_Q8_1, VT_TYPE_Q8_K, VT_TYPE_I8, VT_TYPE_F64,
                                           4, 31, 43, 67, 999};
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++) {
        assert_false(vt_quantize_handles(unsupported[i]));
        assert_int_equal(vt_quantize_row(unsupported[i], x, 256, out), VT_ERR_UNSUPPORTED);
        assert_non_null(strstr(vt_last_error(), "256"));
    }
    assert_int_equal(vt_quantize_row(VT_TYPE_Q8_K, x, 256, out), VT_ERR_UNSUPPORTED);
    assert_non_null(strstr(vt_last_error(), "Q8_K"));
    for (int t = 0; t < N_TYPES; t++) assert_true(vt_quantize_handles(TYPES[t]));
    /* a non-finite value in a block type is refused, naming its index */
    x[77] = NAN;
    assert_int_equal(vt_quantize_row(VT_TYPE_Q4_K, x, 256, out), VT_ERR_INVALID_ARG);
    assert_non_null(strstr(vt_last_error(), "77"));
    x[77] = -INFINITY;
    assert_int_equal(vt_quantize_row(VT_TYPE_MXFP4, x, 256, out), VT_ERR_INVALID_ARG);
    assert_int_equal(vt_quantize_row(VT_TYPE_F16, x, 256, out), VT_OK); /* F16 stores -inf */
    assert_int_equal(rd16(out + 2 * 77), 0xFC00);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),      cmocka_unit_test(test_quality),
        cmocka_unit_test(test_exact_formats),   cmocka_unit_test(test_errors),
        cmocka_unit_test(test_mkmodel_q4_k_m),  cmocka_unit_test(test_mkmodel_gemma4_mix),
        cmocka_unit_test(test_fallback),        cmocka_unit_test(test_run_q4_k_m),
        cmocka_unit_test(test_run_each_type),   cmocka_unit_test(test_lowbit_blocks),
        cmocka_unit_test(test_mkmodel_ud_mixes),
    };
    return vt_test_exit(cmocka_run_group_tests(tests, setup, teardown));
}
