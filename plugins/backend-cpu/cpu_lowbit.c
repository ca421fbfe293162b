/*
 * cpu_lowbit.c - the low-bit weight types in backend-cpu: the grid types
 * IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M and the narrow IQ1
 * types IQ1_XS, IQ1_XXS, IQ1_XXXS (ids 64-66), the ternary TQ1_0 and TQ2_0,
 * NVFP4, Q1_0 and Q2_0.
 *
 * One decoder per type turns a block into integers and a scale per 16
 * values: weight i = sc[i / 16] · q[i], q in int8. Every type has that form:
 * the grid types' values are a scale times a signed grid coordinate, and
 * IQ1's coordinate + delta (± 1/8) is (8 · coordinate ± 1) / 8. From it come
 * both the scalar reference dequantisation (sc · q) and decode's integer dot
 * product with the int8 activations of cpu_internal.h's vt_cpu_xq
 * (Σ over 16-value groups of sc · d_x · Σ q · q_x, the integer sums exact).
 *
 * Block layouts (format data): ggml-common.h of llama.cpp d32676d77, and of
 * unslothai/llama.cpp branch iq1-narrow (36fe8e1cc) for ids 64-66; the
 * codebooks come from vt/iq_grids.h. Offsets below are bytes into a block.
 *
 * Exactness: every value is a product of an fp16 (or UE4M3) scale, small
 * integer sub-scales and an integer of at most 6 bits (IQ1: 8 g ± 1 over 8),
 * at most 11 + 5 + 7 significant bits: float32 holds each product exactly,
 * so sc · q has the bits of ggml's to_float, which tests/test_quant_zoo2.c
 * checks on every value of the quant-zoo-2 fixture.
 */
#include "cpu_internal.h"

#include <math.h>
#include <string.h>

#include "vt/iq_grids.h"

/* ---- the grids, expanded once when the plugin is loaded ---- */

vt_cpu_iq_tables vt_cpu_iq;

static void expand64(vt_iq_grid_id id, uint64_t *out)
{
    const vt_iq_grid_def *g = vt_iq_grid(id);
    for (uint32_t i = 0; i < g->n; i++) out[i] = vt_iq_grid_word(g, i);
}

static void expand32(vt_iq_grid_id id, uint32_t *out)
{
    const vt_iq_grid_def *g = vt_iq_grid(id);
    for (uint32_t i = 0; i < g->n; i++) out[i] = (uint32_t)vt_iq_grid_word(g, i);
}

/* out[0][i], out[1][i]: entry i's 8 coordinates c (int8) as 8 c + 1 and 8 c - 1 */
static void iq1_decode_form(const uint64_t *grid, uint32_t n, uint64_t (*out)[n])
{
    for (uint32_t i = 0; i < n; i++)
        for (int s = 0; s < 2; s++) {
            uint64_t w = 0;
            for (int j = 0; j < 8; j++) {
                int c = (int8_t)(uint8_t)(grid[i] >> (8 * j));
                w |= (uint64_t)(uint8_t)(int8_t)(8 * c + (s ? -1 : 1)) << (8 * j);
            }
            out[s][i] = w;
        }
}

__attribute__((constructor)) static void iq_tables_init(void)
{
    expand64(VT_IQ_GRID_IQ2XXS, vt_cpu_iq.iq2xxs);
    expand64(VT_IQ_GRID_IQ2XS, vt_cpu_iq.iq2xs);
    expand64(VT_IQ_GRID_IQ2S, vt_cpu_iq.iq2s);
    expand32(VT_IQ_GRID_IQ3XXS, vt_cpu_iq.iq3xxs);
    expand32(VT_IQ_GRID_IQ3S, vt_cpu_iq.iq3s);
    expand64(VT_IQ_GRID_IQ1S, vt_cpu_iq.iq1s);
    expand64(VT_IQ_GRID_IQ1XS, vt_cpu_iq.iq1xs);
    expand64(VT_IQ_GRID_IQ1XXS, vt_cpu_iq.iq1xxs);
    expand64(VT_IQ_GRID_IQ1XXXS, vt_cpu_iq.iq1xxxs);
    for (uint32_t i = 0; i < 128; i++) vt_cpu_iq.signs[i] = vt_iq_sign_byte(i);
    for (uint32_t m = 0; m < 256; m++) {
        uint64_t w = 0;
        for (int j = 0; j < 8; j++)
            if ((m >> j) & 1u) w |= (uint64_t)0xff << (8 * j);
        vt_cpu_iq.sign_mask[m] = w;
    }
    iq1_decode_form(vt_cpu_iq.iq1s, 2048, vt_cpu_iq.iq1s_q);
    iq1_decode_form(vt_cpu_iq.iq1xs, 1024, vt_cpu_iq.iq1xs_q);
    iq1_decode_form(vt_cpu_iq.iq1xxs, 512, vt_cpu_iq.iq1xxs_q);
    iq1_decode_form(vt_cpu_iq.iq1xxxs, 256, vt_cpu_iq.iq1xxxs_q);
}

static inline float f16_at(const uint8_t *p) { return vt_cpu_f16_to_f32(vt_cpu_rd16(p)); }
static inline uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* 8 values: q[j] = ± coordinate j of g (unsigned magnitudes, all >= 1), minus
 * where bit j of signs: per byte (v ^ 0xff) + 1 = −v, which never carries into
 * the next byte since v >= 1. */
static inline void put8_signed(int8_t *q, uint64_t g, uint32_t signs)
{
    const uint64_t m = vt_cpu_iq.sign_mask[signs & 255];
    const uint64_t w = (g ^ m) + (m & 0x0101010101010101ULL);
    memcpy(q, &w, 8);
}

/* 8 values of IQ1 entry idx of table t (vt_cpu_iq's *_q forms): q[j] = 8 c ± 1 */
#define put8_iq1(q, t, idx, neg) memcpy((q), &(t)[(neg) ? 1 : 0][(idx)], 8)

static inline void sc2(float *sc, float v) { sc[0] = sc[1] = v; }

/* ---- IQ2 ---- */

/* IQ2_XXS (66 B): d f16 @0; per 32 values (8 × 8 B @2): 4 grid indices, then
 * a u32 of 4 × 7 sign bits and a 4-bit scale; db = d (½ + s) / 4. */
static void int_iq2_xxs(const uint8_t *b, int8_t *q, float *sc)
{
    const float d = f16_at(b);
    for (int ib = 0; ib < 8; ib++, q += 32) {
        const uint8_t *g = b + 2 + 8 * ib;
        const uint32_t aux = rd32(g + 4);
        sc2(sc + 2 * ib, d * (0.5f + (float)(aux >> 28)) * 0.25f);
        for (int l = 0; l < 4; l++)
            put8_signed(q + 8 * l, vt_cpu_iq.iq2xxs[g[l]], vt_cpu_iq.signs[(aux >> (7 * l)) & 127]);
    }
}

/* IQ2_XS (74 B): d @0; 32 u16 @2 (9-bit index | 7 sign bits << 9); 8 scale
 * bytes @66, the low nibble for the first 16 values of a 32, the high for the rest. */
static void int_iq2_xs(const uint8_t *b, int8_t *q, float *sc)
{
    const float d = f16_at(b);
    for (int ib = 0; ib < 8; ib++, q += 32) {
        sc[2 * ib] = d * (0.5f + (float)(b[66 + ib] & 15)) * 0.25f;
        sc[2 * ib + 1] = d * (0.5f + (float)(b[66 + ib] >> 4)) * 0.25f;
        for (int l = 0; l < 4; l++) {
            const uint16_t v = vt_cpu_rd16(b + 2 + 2 * (4 * ib + l));
            put8_signed(q + 8 * l, vt_cpu_iq.iq2xs[v & 511], vt_cpu_iq.signs[v >> 9]);
        }
    }
}

/* IQ2_S (82 B): d @0; 32 index bytes @2, 32 sign bytes @34 (all 8 bits
 * stored), 8 bytes @66 of 4 × 2 index high bits, 8 scale bytes @74 (as IQ2_XS). */
static void int_iq2_s(const uint8_t *b, int8_t *q, float *sc)
{
    const float d = f16_at(b);
    const uint8_t *qs = b + 2, *signs = b + 34, *qh = b + 66, *scales = b + 74;
    for (int ib = 0; ib < 8; ib++, q += 32) {
        sc[2 * ib] = d * (0.5f + (float)(scales[ib] & 15)) * 0.25f;
        sc[2 * ib + 1] = d * (0.5f + (float)(scales[ib] >> 4)) * 0.25f;
        for (int l = 0; l < 4; l++) {
            const uint32_t idx = qs[4 * ib + l] | ((uint32_t)qh[ib] << (8 - 2 * l) & 0x300);
            put8_signed(q + 8 * l, vt_cpu_iq.iq2s[idx], signs[4 * ib + l]);
        }
    }
}

/* ---- IQ3 (grid entries of 4 coordinates, two per 8 values) ---- */

/* IQ3_XXS (98 B): d @0; 64 index bytes @2 (8 per 32 values); 8 u32 @66 of
 * 4 × 7 sign bits and a 4-bit scale; db = d (½ + s) / 2. */
static void int_iq3_xxs(const uint8_t *b, int8_t *q, float *sc)
{
    const float d = f16_at(b);
    for (int ib = 0; ib < 8; ib++, q += 32) {
        const uint8_t *qs = b + 2 + 8 * ib;
        const uint32_t aux = rd32(b + 66 + 4 * ib);
        sc2(sc + 2 * ib, d * (0.5f + (float)(aux >> 28)) * 0.5f);
        for (int l = 0; l < 4; l++)
            put8_signed(q + 8 * l,
                        vt_cpu_iq.iq3xxs[qs[2 * l]] | (uint64_t)vt_cpu_iq.iq3xxs[qs[2 * l + 1]] << 32,
                        vt_cpu_iq.signs[(aux >> (7 * l)) & 127]);
    }
}

/* IQ3_S (110 B): d @0; 64 index bytes @2, 8 bytes @66 of index bit 8 (one
 * bit per entry), 32 sign bytes @74, 4 scale bytes @106 (a nibble per 32
 * values); db = d (1 + 2 s). */
static void int_iq3_s(const uint8_t *b, int8_t *q, float *sc)
{
    const float d = f16_at(b);
    const uint8_t *qs = b + 2, *qh = b + 66, *signs = b + 74, *scales = b + 106;
    for (int ib = 0; ib < 8; ib++, q += 32) {
        sc2(sc + 2 * ib, d * (float)(1 + 2 * ((scales[ib / 2] >> (4 * (ib & 1))) & 15)));
        for (int l = 0; l < 4; l++) {
            const uint32_t i1 = qs[8 * ib + 2 * l] | ((uint32_t)qh[ib] << (8 - 2 * l) & 256);
            const uint32_t i2 = qs[8 * ib + 2 * l + 1] | ((uint32_t)qh[ib] << (7 - 2 * l) & 256);
            put8_signed(q + 8 * l, vt_cpu_iq.iq3s[i1] | (uint64_t)vt_cpu_iq.iq3s[i2] << 32,
                        signs[4 * ib + l]);
        }
    }
}

/* ---- IQ1: weight = dl (c + delta), delta = ± 1/8: q = 8 c ± 1, sc = dl / 8 ---- */

/* IQ1_S (50 B): d @0; 32 index low bytes @2; 8 u16 @34: 4 × 3 index high
 * bits, a 3-bit scale s (bits 12-14), the delta's sign (bit 15); dl = d (2 s + 1). */
static void int_iq1_s(const uint8_t *b, int8_t *q, float *sc)
{
    const float d = f16_at(b);
    for (int ib = 0; ib < 8; ib++, q += 32) {
        const uint16_t qh = vt_cpu_rd16(b + 34 + 2 * ib);
        sc2(sc + 2 * ib, d * (float)(2 * ((qh >> 12) & 7) + 1) * VT_IQ1_DELTA);
        for (int l = 0; l < 4; l++) {
            const uint32_t idx = b[2 + 4 * ib + l] | ((uint32_t)(qh >> (3 * l)) & 7) << 8;
            put8_iq1(q + 8 * l, vt_cpu_iq.iq1s_q, idx, qh & 0x8000);
        }
    }
}

/* IQ1_M (56 B, no d field): 32 index low bytes @0; 16 bytes @32, one per 16
 * values: 3 index high bits and a delta sign bit per nibble; 8 bytes @48 as
 * 4 u16: a 3-bit scale per 16 values in bits 0-11, and the fp16 super-block
 * scale spread over their top nibbles. */
static void int_iq1_m(const uint8_t *b, int8_t *q, float *sc)
{
    uint16_t s[4];
    for (int i = 0; i < 4; i++) s[i] = vt_cpu_rd16(b + 48 + 2 * i);
    const float d = vt_cpu_f16_to_f32((uint16_t)((s[0] >> 12) | ((s[1] >> 8) & 0x00f0) |
                                                 ((s[2] >> 4) & 0x0f00) | (s[3] & 0xf000)));
    for (int ib = 0; ib < 8; ib++, q += 32) {
        for (int h = 0; h < 2; h++)
            sc[2 * ib + h] =
                d * (float)(2 * ((s[ib / 2] >> (6 * (ib % 2) + 3 * h)) & 7) + 1) * VT_IQ1_DELTA;
        for (int l = 0; l < 4; l++) {
            const uint8_t nib = (uint8_t)(b[32 + 2 * ib + l / 2] >> (4 * (l % 2)));
            put8_iq1(q + 8 * l, vt_cpu_iq.iq1s_q, b[4 * ib + l] | (uint32_t)(nib & 7) << 8, nib & 8);
        }
    }
}

/* IQ1_XS (46 B): d @0; 32 index low bytes @2; 8 bytes @34 of 4 × 2 index
 * high bits; 4 bytes @42 of a nibble per 32 values (bits 0-2 scale, bit 3
 * delta sign). */
static void int_iq1_xs(const uint8_t *b, int8_t *q, float *sc)
{
    const float d = f16_at(b);
    for (int ib = 0; ib < 8; ib++, q += 32) {
        const int nib = (b[42 + ib / 2] >> (4 * (ib & 1))) & 15;
        sc2(sc + 2 * ib, d * (float)(2 * (nib & 7) + 1) * VT_IQ1_DELTA);
        for (int l = 0; l < 4; l++) {
            const uint32_t idx = b[2 + 4 * ib + l] | (uint32_t)((b[34 + ib] >> (2 * l)) & 3) << 8;
            put8_iq1(q + 8 * l, vt_cpu_iq.iq1xs_q, idx, nib & 8);
        }
    }
}

/* IQ1_XXS (42 B): d @0; 32 index low bytes @2; 8 bytes @34: bits 0-3 index
 * bit 8 of the 4 entries, bits 4-6 scale, bit 7 delta sign. */
static void int_iq1_xxs(const uint8_t *b, int8_t *q, float *sc)
{
    const float d = f16_at(b);
    for (int ib = 0; ib < 8; ib++, q += 32) {
        const uint8_t h = b[34 + ib];
        sc2(sc + 2 * ib, d * (float)(2 * ((h >> 4) & 7) + 1) * VT_IQ1_DELTA);
        for (int l = 0; l < 4; l++)
            put8_iq1(q + 8 * l, vt_cpu_iq.iq1xxs_q, b[2 + 4 * ib + l] | (uint32_t)((h >> l) & 1) << 8,
                     h & 0x80);
    }
}

/* IQ1_XXXS (38 B): d @0; 32 index bytes @2; 4 bytes @34 of a nibble per 32
 * values (as IQ1_XS). */
static void int_iq1_xxxs(const uint8_t *b, int8_t *q, float *sc)
{
    const float d = f16_at(b);
    for (int ib = 0; ib < 8; ib++, q += 32) {
        const int nib = (b[34 + ib / 2] >> (4 * (ib & 1))) & 15;
        sc2(sc + 2 * ib, d * (float)(2 * (nib & 7) + 1) * VT_IQ1_DELTA);
        for (int l = 0; l < 4; l++) put8_iq1(q + 8 * l, vt_cpu_iq.iq1xxxs_q, b[2 + 4 * ib + l], nib & 8);
    }
}

/* ---- ternary ---- */

/* Trit n (0..4) of a TQ1_0 byte, which holds its trits as a fixed-point
 * fraction of 3^5: ((q · 3^n mod 256) · 3) >> 8, as −1, 0 or +1. */
static inline int8_t tq1_trit(uint8_t q, int n)
{
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    const uint8_t v = (uint8_t)(q * pow3[n]);
    return (int8_t)((int)(((uint32_t)v * 3u) >> 8) - 1);
}

/* TQ1_0 (54 B): 48 bytes @0 of 5 trits each, 4 bytes @48 of 4 trits each, d @52.
 * Values 0..159: trit n of bytes 0..31 (n outer); 160..239: trit n of bytes
 * 32..47; 240..255: trit n (n < 4) of bytes 48..51. */
static void int_tq1_0(const uint8_t *b, int8_t *q, float *sc)
{
    for (int g = 0; g < 16; g++) sc[g] = f16_at(b + 52);
    for (int n = 0; n < 5; n++)
        for (int m = 0; m < 32; m++) q[32 * n + m] = tq1_trit(b[m], n);
    for (int n = 0; n < 5; n++)
        for (int m = 0; m < 16; m++) q[160 + 16 * n + m] = tq1_trit(b[32 + m], n);
    for (int n = 0; n < 4; n++)
        for (int m = 0; m < 4; m++) q[240 + 4 * n + m] = tq1_trit(b[48 + m], n);
}

/* TQ2_0 (66 B): 64 bytes @0 of 4 crumbs each, d @64; value 128 h + 32 l + m
 * is crumb l of byte 32 h + m, as crumb − 1. */
static void int_tq2_0(const uint8_t *b, int8_t *q, float *sc)
{
    for (int g = 0; g < 16; g++) sc[g] = f16_at(b + 64);
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 4; l++)
            for (int m = 0; m < 32; m++)
                q[128 * h + 32 * l + m] = (int8_t)(((b[32 * h + m] >> (2 * l)) & 3) - 1);
}

/* ---- NVFP4, Q1_0, Q2_0 ---- */

/* UE4M3 (unsigned, 4 exponent bits, bias 7, 3 mantissa bits; 0x7f and 0 are
 * zero, bit 7 unused) times ½: NVFP4's sub-block scale, applied to the
 * doubled E2M1 codebook below. */
static float ue4m3_half(uint8_t x)
{
    if (x == 0 || x == 0x7f) return 0.0f;
    const int e = (x >> 3) & 15, m = x & 7;
    const float v = e == 0 ? ldexpf((float)m, -9) : ldexpf(1.0f + (float)m / 8.0f, e - 7);
    return v * 0.5f;
}

/* NVFP4 (36 B per 64): 4 UE4M3 scales @0, one per 16 values; 32 bytes @4:
 * byte 8 s + j holds value 16 s + j (low nibble) and 16 s + j + 8 (high),
 * E2M1 codes as 2× their value (ggml's kvalues_mxfp4). */
static void int_nvfp4(const uint8_t *b, int8_t *q, float *sc)
{
    static const int8_t e2m1x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    for (int s = 0; s < 4; s++) {
        sc[s] = ue4m3_half(b[s]);
        for (int j = 0; j < 8; j++) {
            q[16 * s + j] = e2m1x2[b[4 + 8 * s + j] & 15];
            q[16 * s + j + 8] = e2m1x2[b[4 + 8 * s + j] >> 4];
        }
    }
}

/* Q1_0 (18 B per 128): d @0; bit j % 8 of byte 2 + j / 8: +1 when set, −1 when not. */
static void int_q1_0(const uint8_t *b, int8_t *q, float *sc)
{
    for (int g = 0; g < 8; g++) sc[g] = f16_at(b);
    for (int j = 0; j < 128; j++) q[j] = (b[2 + j / 8] >> (j % 8)) & 1 ? 1 : -1;
}

/* Q2_0 (18 B per 64): d @0; crumb j % 4 of byte 2 + j / 4, as crumb − 1. */
static void int_q2_0(const uint8_t *b, int8_t *q, float *sc)
{
    for (int g = 0; g < 4; g++) sc[g] = f16_at(b);
    for (int j = 0; j < 64; j++) q[j] = (int8_t)(((b[2 + j / 4] >> (2 * (j % 4))) & 3) - 1);
}

/* ---- per type: the decoder, and from it dequantisation and the int8 dot ---- */


/* y = sc · q for one block of bs values */
static inline void deq_from_int(vt_cpu_lowbit_int_fn f, int bs, const uint8_t *b, float *y)
{
    int8_t q[256];
    float sc[16];
    f(b, q, sc);
    for (int i = 0; i < bs; i++) y[i] = sc[i / 16] * (float)q[i];
}

/*
 * The integer dot products of n_tok tokens with n_rows rows: for each row and
 * block (decoded once for all tokens), per token Σ over 16-value groups g of
 * sc[g] · d_x[32-block of g] · Σ q · q_x, the integer sums exact and the float
 * ones in block order, so a token's result does not depend on n_tok or on
 * which tokens share the call (batch invariance). x: n_tok views of n_in / 32
 * blocks; y[t * ldy + r]. n_tok <= VT_CPU_MM_TOK_CHUNK.
 */
void vt_cpu_group_sums_c(const int8_t *q, const int8_t *x, int n, int32_t *s)
{
    for (int g = 0; g < n / 16; g++) {
        int32_t a = 0;
        for (int i = 0; i < 16; i++) a += (int32_t)q[16 * g + i] * (int32_t)x[16 * g + i];
        s[g] = a;
    }
}

#if defined(__x86_64__)
#include <immintrin.h>
/* The same with AVX2, 64 values (4 groups) per step: vpmaddubsw on |q| and
 * x·sign(q) (|q| <= 62 and |x| <= 127, so a pair sum fits int16), vpmaddwd to
 * int32, then two horizontal adds leave each group's sum in one lane. */
__attribute__((target("avx2"))) void vt_cpu_group_sums_avx2(const int8_t *q, const int8_t *x,
                                                             int n, int32_t *s)
{
    const __m256i ones = _mm256_set1_epi16(1);
    for (int g = 0; g < n / 16; g += 4) {
        const __m256i q0 = _mm256_loadu_si256((const __m256i *)(q + 16 * g));
        const __m256i q1 = _mm256_loadu_si256((const __m256i *)(q + 16 * g + 32));
        const __m256i x0 = _mm256_loadu_si256((const __m256i *)(x + 16 * g));
        const __m256i x1 = _mm256_loadu_si256((const __m256i *)(x + 16 * g + 32));
        const __m256i d0 = _mm256_madd_epi16(
            _mm256_maddubs_epi16(_mm256_sign_epi8(q0, q0), _mm256_sign_epi8(x0, q0)), ones);
        const __m256i d1 = _mm256_madd_epi16(
            _mm256_maddubs_epi16(_mm256_sign_epi8(q1, q1), _mm256_sign_epi8(x1, q1)), ones);
        /* lanes of h: [g, g+2, g, g+2 | g+1, g+3, g+1, g+3] */
        const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(d0, d1), _mm256_setzero_si256());
        s[g] = _mm256_extract_epi32(h, 0);
        s[g + 2] = _mm256_extract_epi32(h, 1);
        s[g + 1] = _mm256_extract_epi32(h, 4);
        s[g + 3] = _mm256_extract_epi32(h, 5);
    }
}
#endif

static vt_cpu_group_sums_fn group_sums = vt_cpu_group_sums_c;

#if defined(__x86_64__)
/* 1 when the 256-value types take vt_cpu_lowbit_mm256_avx2 (AVX2 and FMA) */
static int mm256_avx2;
#endif

static inline void mm_from_int(vt_cpu_lowbit_int_fn f, int bs, int ts, const uint8_t *w, size_t rb,
                               int64_t n_in, const vt_cpu_xq *x, int64_t n_tok, float *y,
                               int64_t ldy, int64_t n_rows)
{
#if defined(__x86_64__)
    if (bs == 256 && mm256_avx2) {
        vt_cpu_lowbit_mm256_avx2(f, ts, w, rb, n_in, x, n_tok, y, ldy, n_rows);
        return;
    }
#endif
    int8_t q[256];
    float sc[16], acc[VT_CPU_MM_TOK_CHUNK][4];
    for (int64_t r = 0; r < n_rows; r++) {
        const uint8_t *row = w + (size_t)r * rb;
        memset(acc, 0, sizeof(acc[0]) * (size_t)n_tok);
        for (int64_t k = 0; k < n_in; k += bs, row += ts) {
            f(row, q, sc);
            for (int64_t t = 0; t < n_tok; t++) {
                const float *xd = x[t].d + k / 32;
                int32_t s[16];
                group_sums(q, x[t].q + k, bs, s);
                /* four running sums (group g into sum g % 4), so the additions
                 * do not wait on each other; the same order for every n_tok */
                for (int g = 0; g < bs / 16; g += 4)
                    for (int j = 0; j < 4; j++)
                        acc[t][j] += sc[g + j] * xd[(g + j) / 2] * (float)s[g + j];
            }
        }
        for (int64_t t = 0; t < n_tok; t++)
            y[t * ldy + r] = (acc[t][0] + acc[t][1]) + (acc[t][2] + acc[t][3]);
    }
}

/* The decoder each type's kernels use: the plain one, or (lowbit_init) an
 * AVX2 one of cpu_lowbit_avx2.c where the CPU has AVX2 */
static vt_cpu_lowbit_int_fn kernel_dec[VT_TYPE_COUNT];

/* A type's three kernels from its decoder (block geometry from vt/types.h):
 * the dequantisation (the reference) with the plain decoder, the dot
 * products with kernel_dec's */
#define LOWBIT_BS(T) ((int)vt_type_block_size(VT_TYPE_##T))
#define LOWBIT_TS(T) ((int)vt_type_size(VT_TYPE_##T))
#define LOWBIT_TYPE(T, NAME)                                                                   \
    static void deq_##NAME(const uint8_t *b, float *y)                                         \
    {                                                                                          \
        deq_from_int(int_##NAME, LOWBIT_BS(T), b, y);                                          \
    }                                                                                          \
    void vt_cpu_dot_##NAME(const uint8_t *w, size_t rb, int64_t n_in, const vt_cpu_xq *x,     \
                           float *y, int64_t n_rows)                                           \
    {                                                                                          \
        mm_from_int(kernel_dec[VT_TYPE_##T], LOWBIT_BS(T), LOWBIT_TS(T), w, rb, n_in, x, 1, y, \
                    1, n_rows);                                                                \
    }                                                                                          \
    static void mm_##NAME(const uint8_t *w, size_t rb, int64_t n_in, const vt_cpu_xq *x,      \
                          int64_t n_tok, float *y, int64_t ldy, int64_t n_rows)                \
    {                                                                                          \
        mm_from_int(kernel_dec[VT_TYPE_##T], LOWBIT_BS(T), LOWBIT_TS(T), w, rb, n_in, x,       \
                    n_tok, y, ldy, n_rows);                                                    \
    }
VT_CPU_LOWBIT_TYPES(LOWBIT_TYPE)
#undef LOWBIT_TYPE

vt_cpu_deq_block_fn vt_cpu_lowbit_block_fn(uint32_t type)
{
    switch (type) {
#define DEQ_CASE(T, n)                                                                         \
    case VT_TYPE_##T: return deq_##n;
        VT_CPU_LOWBIT_TYPES(DEQ_CASE)
#undef DEQ_CASE
    default: return NULL;
    }
}

vt_cpu_lowbit_int_fn vt_cpu_lowbit_int(uint32_t type, int fast)
{
    switch (type) {
#define INT_CASE(T, n)                                                                         \
    case VT_TYPE_##T: return fast ? kernel_dec[VT_TYPE_##T] : int_##n;
        VT_CPU_LOWBIT_TYPES(INT_CASE)
#undef INT_CASE
    default: return NULL;
    }
}

/* the integer sums and the kernels' decoders, by what the CPU has */
__attribute__((constructor)) static void lowbit_init(void)
{
#define DEC_INIT(T, n) kernel_dec[VT_TYPE_##T] = int_##n;
    VT_CPU_LOWBIT_TYPES(DEC_INIT)
#undef DEC_INIT
#if defined(__x86_64__)
    __builtin_cpu_init(); /* a constructor may run before libgcc's own */
    if (__builtin_cpu_supports("avx2")) {
        group_sums = vt_cpu_group_sums_avx2;
        mm256_avx2 = __builtin_cpu_supports("fma");
        for (uint32_t t = 0; t < VT_TYPE_COUNT; t++)
            if (vt_cpu_lowbit_int_avx2(t)) kernel_dec[t] = vt_cpu_lowbit_int_avx2(t);
    }
#endif
}

vt_cpu_lowbit_mm_fn vt_cpu_lowbit_mm(uint32_t type)
{
    switch (type) {
#define MM_CASE(T, n)                                                                          \
    case VT_TYPE_##T: return mm_##n;
        VT_CPU_LOWBIT_TYPES(MM_CASE)
#undef MM_CASE
    default: return NULL;
    }
}
