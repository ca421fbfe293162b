/*
 * quantize.c - float32 rows to the GGUF weight types (see quantize.h; block
 * layouts gguf.md §6, decoded by plugins/backend-cpu/cpu_dequant.c).
 *
 * One function per block layout, grouped as the spec groups them: the number
 * formats (§6.1), the 32-value blocks (§6.2-6.6, §6.14, §6.16), the 256-value
 * super-blocks (§6.7-6.12, §6.15). The scale choice of every type is written
 * in quantize.h; this file only adds how the codes are packed. No libm: the
 * rounding helpers below are exact for the ranges they are given.
 */
#include "quantize.h"

#include <inttypes.h>
#include <string.h>

#include "error.h"
#include "vt/types.h"

/* ------------------------------------------------------------------------ */
/* Number formats (gguf.md §6.1)                                             */
/* ------------------------------------------------------------------------ */

static uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40u); /* NaN stays NaN */
    u += 0x7FFFu + ((u >> 16) & 1u); /* round to nearest even (a carry to inf is right) */
    return (uint16_t)(u >> 16);
}

/* IEEE binary16 of f, rounded to nearest even; overflow gives inf, NaN stays
 * NaN. The general case (subnormal, zero, overflow, inf, NaN). */
static uint16_t f32_to_f16_slow(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u, e = (u >> 23) & 0xFFu, m = u & 0x7FFFFFu;
    if (e == 0xFF) return (uint16_t)(sign | 0x7C00u | (m ? 0x200u : 0)); /* inf, NaN */
    int32_t he = (int32_t)e - 127 + 15;
    if (he >= 31) return (uint16_t)(sign | 0x7C00u); /* too large: inf */
    if (he <= 0) {                                   /* subnormal half (or zero) */
        if (he < -10) return (uint16_t)sign;         /* at most a quarter of the smallest subnormal */
        m |= 0x800000u;                              /* the implicit bit */
        uint32_t shift = (uint32_t)(14 - he);        /* 24-bit significand -> units of 2^-24 */
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++; /* may carry into the smallest normal */
        return (uint16_t)(sign | q);
    }
    uint32_t q = ((uint32_t)he << 10) | (m >> 13), rem = m & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1))) q++; /* a carry may reach inf: right */
    return (uint16_t)(sign | q);
}

/* f32_to_f16_slow with a fast path for the normal half range 2^-14 <= |f| < 2^16:
 * rebias the exponent (127 -> 15), round the 13 dropped bits to nearest even. */
static inline uint16_t f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a - 0x38800000u >= 0x47800000u - 0x38800000u) return f32_to_f16_slow(f);
    a -= 0x38000000u;
    a += 0xFFFu + ((a >> 13) & 1u); /* a carry into the exponent is right (65520 -> inf) */
    return (uint16_t)(((u >> 16) & 0x8000u) | (a >> 13));
}

/* The value of binary16 h (§6.1), exactly. */
static float f16_value(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 31u, m = h & 1023u, bits;
    if (e == 0) { /* zero or subnormal: m * 2^-24, exact */
        float v = (float)m * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    bits = e == 31 ? sign | 0x7F800000u | (m << 13) : sign | ((e + 112u) << 23) | (m << 13);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Store binary16 h little-endian at p. */
static inline void put16(uint8_t *p, uint16_t h)
{
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* f rounded to f16 and stored at p; returns the stored value (the FINAL scale). */
static inline float put_f16(uint8_t *p, float f)
{
    uint16_t h = f32_to_f16(f);
    put16(p, h);
    return f16_value(h);
}

/* ------------------------------------------------------------------------ */
/* Rounding helpers                                                          */
/* ------------------------------------------------------------------------ */

/* Round half away from zero (C roundf) of |x| < 2^31, without libm. */
static inline int32_t round_away(float x)
{
    int32_t t = (int32_t)x;    /* toward zero */
    float frac = x - (float)t; /* exact */
    return t + (frac >= 0.5f) - (frac <= -0.5f);
}

/* round_away(v) clamped to [lo, hi]; v beyond the range (inf included) gives
 * the end, NaN gives lo. |lo|, |hi| < 2^20. */
static inline int nearest_in(float v, int lo, int hi)
{
    if (!(v > (float)lo)) return lo;
    if (v >= (float)hi) return hi;
    return (int)round_away(v);
}

/* |x| as bits compare like |x| for finite values. */
static inline uint32_t abs_bits(float x)
{
    uint32_t a;
    memcpy(&a, &x, 4);
    return a & 0x7FFFFFFFu;
}

/* The value of largest |x| among x[0..n), the first if tied (0 for all zeros). */
static float extreme(const float *x, int n)
{
    float e = x[0];
    uint32_t ea = abs_bits(x[0]);
    for (int i = 1; i < n; i++) {
        uint32_t a = abs_bits(x[i]);
        if (a > ea) {
            ea = a;
            e = x[i];
        }
    }
    return e;
}

/* The midpoints between neighbours of the IQ4_NL / IQ4_XS codebook (gguf.md
 * §6.14) K = -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69,
 * 89, 113: code k is chosen for u in (mid[k-1], mid[k]]. */
static const float iq4_mid[15] = {-115.5f, -93.5f, -74.0f, -57.0f, -42.0f, -28.5f, -16.0f, -4.5f,
                                  7.0f,    19.0f,  31.5f,  45.5f,  61.0f,  79.0f,  101.0f};

/* Index of the codebook value nearest u (ties: the lower one; NaN: 0): the
 * midpoints below u, counted without branches (random data mispredicts a
 * search). */
static inline uint8_t iq4_nearest(float u)
{
    int k = 0;
    for (int i = 0; i < 15; i++) k += u > iq4_mid[i];
    return (uint8_t)k;
}

/* ------------------------------------------------------------------------ */
/* 32-value blocks (§6.2-6.6, §6.14, §6.16)                                  */
/* ------------------------------------------------------------------------ */

/* Q8_0 (llama.cpp's reference quantiser): d = amax / 127, q = round(x / d)
 * computed as x * (1 / d) with the unrounded d, d stored as f16. */
static void q8_0_block(const float *x, uint8_t *blk)
{
    uint32_t amax_bits = 0; /* |x| compares as its bits (finite values) */
    for (int j = 0; j < 32; j++) {
        uint32_t a = abs_bits(x[j]);
        amax_bits = a > amax_bits ? a : amax_bits;
    }
    float amax;
    memcpy(&amax, &amax_bits, 4);
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    put16(blk, f32_to_f16(d));
    for (int j = 0; j < 32; j++) {
        int32_t q = round_away(x[j] * id);
        q = q > 127 ? 127 : q < -127 ? -127 : q;
        blk[2 + j] = (uint8_t)(int8_t)q;
    }
}

/* Symmetric 4/5-bit codes 0..2^bits-1 (value q - 2^(bits-1)): Q4_0, Q5_0. */
static void q_sym_codes(const float *x, int bits, uint8_t *blk, uint8_t q[32])
{
    const int half = 1 << (bits - 1);
    float dq = put_f16(blk, extreme(x, 32) / (float)-half);
    float id = dq != 0.0f ? 1.0f / dq : 0.0f;
    for (int j = 0; j < 32; j++) {
        float v = x[j] * id;
        q[j] = (uint8_t)(nearest_in(v, -half, half - 1) + half);
    }
}

/* Affine 4/5-bit codes 0..2^bits-1 (value d·q + m): Q4_1, Q5_1. */
static void q_affine_codes(const float *x, int bits, uint8_t *blk, uint8_t q[32])
{
    const int top = (1 << bits) - 1;
    float mn = x[0], mx = x[0];
    for (int j = 1; j < 32; j++) {
        mn = x[j] < mn ? x[j] : mn;
        mx = x[j] > mx ? x[j] : mx;
    }
    float range = mx - mn;
    float dq = put_f16(blk, range / (float)top), mq = put_f16(blk + 2, mn);
    float id = dq > 0.0f ? 1.0f / dq : 0.0f;
    for (int j = 0; j < 32; j++) {
        float v = x[j] - mq;
        v *= id;
        q[j] = (uint8_t)nearest_in(v, 0, top);
    }
}

/* Codes 0..15 of 32 values into 16 bytes: low nibbles the first half (§6.3). */
static void pack_nibbles(const uint8_t q[32], uint8_t *qs)
{
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)((q[j] & 0x0F) | (q[j + 16] & 0x0F) << 4);
}

/* Bit 4 of 32 codes as the little-endian u32 qh (§6.5). */
static void pack_high_bits(const uint8_t q[32], uint8_t *qh)
{
    uint32_t h = 0;
    for (int j = 0; j < 32; j++) h |= (uint32_t)(q[j] >> 4 & 1u) << j;
    for (int k = 0; k < 4; k++) qh[k] = (uint8_t)(h >> (8 * k));
}

static void q4_0_block(const float *x, uint8_t *blk)
{
    uint8_t q[32];
    q_sym_codes(x, 4, blk, q);
    pack_nibbles(q, blk + 2);
}

static void q5_0_block(const float *x, uint8_t *blk)
{
    uint8_t q[32];
    q_sym_codes(x, 5, blk, q);
    pack_high_bits(q, blk + 2);
    pack_nibbles(q, blk + 6);
}

static void q4_1_block(const float *x, uint8_t *blk)
{
    uint8_t q[32];
    q_affine_codes(x, 4, blk, q);
    pack_nibbles(q, blk + 4);
}

static void q5_1_block(const float *x, uint8_t *blk)
{
    uint8_t q[32];
    q_affine_codes(x, 5, blk, q);
    pack_high_bits(q, blk + 4);
    pack_nibbles(q, blk + 8);
}

/* Nearest codebook indices of x[0..n) at scale d (d = 0: the value nearest 0, +1). */
static void iq4_codes(const float *x, int n, float d, uint8_t *q)
{
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < n; j++) q[j] = iq4_nearest(x[j] * id);
}

static void iq4_nl_block(const float *x, uint8_t *blk)
{
    uint8_t q[32];
    iq4_codes(x, 32, put_f16(blk, extreme(x, 32) / -127.0f), q);
    pack_nibbles(q, blk + 2);
}

static void mxfp4_block(const float *x, uint8_t *blk)
{
    uint32_t amax = 0;
    for (int j = 0; j < 32; j++) {
        uint32_t a = abs_bits(x[j]);
        amax = a > amax ? a : amax;
    }
    /* amax = 1.m · 2^E <= 6 · 2^k = 1.5 · 2^(k+2): k = E - 2, or E - 1 when 1.m > 1.5;
     * e = k + 127 from the biased exponent field; subnormal or zero amax: e = 0 */
    int32_t ef = (int32_t)(amax >> 23), e = ef - 2 + ((amax & 0x7FFFFFu) > 0x400000u);
    if (ef == 0 || e < 0) e = 0;
    if (e > 254) e = 254;
    /* 2^(127-e), the inverse scale: biased exponent 254 - e (e = 254: the subnormal 2^-127) */
    uint32_t ibits = e < 254 ? (uint32_t)(254 - e) << 23 : 0x00400000u;
    float inv;
    memcpy(&inv, &ibits, 4);
    blk[0] = (uint8_t)e;
    /* E2M1 magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6: code = midpoints below |x|/scale */
    static const float mid[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    uint8_t q[32];
    for (int j = 0; j < 32; j++) {
        float v = x[j] < 0.0f ? -x[j] : x[j];
        v *= inv; /* exact (a power of two) unless below 2^-126, where the code is 0 anyway */
        unsigned c = 0;
        for (int k = 0; k < 7; k++) c += v > mid[k];
        q[j] = (uint8_t)(c | (x[j] < 0.0f && c ? 8u : 0u));
    }
    pack_nibbles(q, blk + 1);
}

/* ------------------------------------------------------------------------ */
/* 256-value super-blocks (§6.7-6.12, §6.15)                                 */
/* ------------------------------------------------------------------------ */

/* Affine K-quants (Q2_K, Q4_K, Q5_K): ns sub-blocks of 256/ns values, codes
 * 0..top, scale and min codes 0..smax (quantize.h). Writes the f16 d, dmin
 * at d_at, dmin_at and the integer scale/min codes into sc, m; codes into q. */
static void k_affine(const float *x, int ns, int top, int smax, uint8_t *d_at, uint8_t *dmin_at,
                     uint8_t *sc, uint8_t *m, uint8_t q[256])
{
    const int len = 256 / ns;
    float scale[16], mins[16], max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < ns; j++) {
        const float *v = x + len * j;
        float lo = 0.0f, hi = v[0]; /* lo <= 0: the offset -dmin·m is never positive */
        for (int l = 0; l < len; l++) {
            lo = v[l] < lo ? v[l] : lo;
            hi = v[l] > hi ? v[l] : hi;
        }
        float range = hi - lo;
        scale[j] = range / (float)top;
        mins[j] = -lo;
        max_scale = scale[j] > max_scale ? scale[j] : max_scale;
        max_min = mins[j] > max_min ? mins[j] : max_min;
    }
    float dq = put_f16(d_at, max_scale / (float)smax), mq = put_f16(dmin_at, max_min / (float)smax);
    for (int j = 0; j < ns; j++) {
        sc[j] = (uint8_t)(dq > 0.0f ? nearest_in(scale[j] / dq, 0, smax) : 0);
        m[j] = (uint8_t)(mq > 0.0f ? nearest_in(mins[j] / mq, 0, smax) : 0);
        float ds = dq * (float)sc[j], dm = mq * (float)m[j]; /* exact products */
        float ids = ds > 0.0f ? 1.0f / ds : 0.0f;
        for (int l = 0; l < len; l++) {
            float v = x[len * j + l] + dm;
            v *= ids;
            q[len * j + l] = (uint8_t)nearest_in(v, 0, top);
        }
    }
}

/* Symmetric K-quants (Q3_K, Q6_K, IQ4_XS): ns sub-blocks; s_j = extreme_j /
 * -end; d = max |s_j| / smax stored at d_at; r[j] = round(s_j / d') in
 * [-smax, smax]; dl[j] = d'·r[j], the final sub-block scale. */
static void k_symmetric(const float *x, int ns, float end, int smax, uint8_t *d_at, int r[16],
                        float dl[16])
{
    const int len = 256 / ns;
    float s[16], big = 0.0f;
    for (int j = 0; j < ns; j++) {
        s[j] = extreme(x + len * j, len) / -end;
        float a = s[j] < 0.0f ? -s[j] : s[j];
        big = a > big ? a : big;
    }
    float dq = put_f16(d_at, big / (float)smax);
    for (int j = 0; j < ns; j++) {
        r[j] = dq > 0.0f ? nearest_in(s[j] / dq, -smax, smax) : 0;
        dl[j] = dq * (float)r[j]; /* exact product */
    }
}

/* Uniform codes lo..hi of x[0..n) at step ds (ds = 0: code 0), offset by -lo. */
static void k_sym_codes(const float *x, int n, float ds, int lo, int hi, uint8_t *q)
{
    float ids = ds != 0.0f ? 1.0f / ds : 0.0f;
    for (int l = 0; l < n; l++) q[l] = (uint8_t)(nearest_in(x[l] * ids, lo, hi) - lo);
}

static void q2_k_block(const float *x, uint8_t *blk)
{
    uint8_t sc[16], m[16], q[256];
    k_affine(x, 16, 3, 15, blk + 80, blk + 82, sc, m, q);
    for (int j = 0; j < 16; j++) blk[j] = (uint8_t)(sc[j] | m[j] << 4);
    uint8_t *qs = blk + 16;
    memset(qs, 0, 64);
    for (int i = 0; i < 256; i++) { /* i = 128h + 32j + l -> bits 2j of qs[32h + l] */
        int h = i / 128, j = (i % 128) / 32, l = i % 32;
        qs[32 * h + l] |= (uint8_t)(q[i] << (2 * j));
    }
}

static void q3_k_block(const float *x, uint8_t *blk)
{
    int r[16];
    float dl[16];
    uint8_t q[256]; /* q + 4, 0..7 */
    k_symmetric(x, 16, 4.0f, 31, blk + 108, r, dl);
    for (int j = 0; j < 16; j++) k_sym_codes(x + 16 * j, 16, dl[j], -4, 3, q + 16 * j);
    uint8_t *hmask = blk, *qs = blk + 32, *sb = blk + 96;
    memset(blk, 0, 108);
    for (int k = 0; k < 16; k++) { /* 6-bit r + 32: the table of §6.8 */
        uint8_t v = (uint8_t)(r[k] + 32);
        sb[k % 8] |= (uint8_t)((v & 0x0F) << (k < 8 ? 0 : 4));
        sb[8 + (k & 3)] |= (uint8_t)((v >> 4) << (2 * (k / 4)));
    }
    for (int i = 0; i < 256; i++) { /* low 2 bits in qs, the third bit in hmask */
        int h = i / 128, j = (i % 128) / 32, l = i % 32;
        qs[32 * h + l] |= (uint8_t)((q[i] & 3) << (2 * j));
        hmask[l] |= (uint8_t)((q[i] >> 2) << (4 * h + j));
    }
}

/* The 12-byte scale/min packing of Q4_K and Q5_K (§6.9). */
static void k4_pack_scales(const uint8_t sc[8], const uint8_t m[8], uint8_t *p)
{
    for (int j = 0; j < 4; j++) {
        p[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
        p[j + 4] = (uint8_t)(m[j] | (m[j + 4] >> 4) << 6);
        p[j + 8] = (uint8_t)((sc[j + 4] & 0x0F) | (m[j + 4] & 0x0F) << 4);
    }
}

/* Low nibbles of Q4_K/Q5_K: sub-block s in qs[32·(s/2) + l], low nibble if s even. */
static void k4_pack_nibbles(const uint8_t q[256], uint8_t *qs)
{
    for (int p = 0; p < 4; p++)
        for (int l = 0; l < 32; l++)
            qs[32 * p + l] = (uint8_t)((q[64 * p + l] & 0x0F) | (q[64 * p + 32 + l] & 0x0F) << 4);
}

static void q4_k_block(const float *x, uint8_t *blk)
{
    uint8_t sc[8], m[8], q[256];
    k_affine(x, 8, 15, 63, blk, blk + 2, sc, m, q);
    k4_pack_scales(sc, m, blk + 4);
    k4_pack_nibbles(q, blk + 16);
}

static void q5_k_block(const float *x, uint8_t *blk)
{
    uint8_t sc[8], m[8], q[256];
    k_affine(x, 8, 31, 63, blk, blk + 2, sc, m, q);
    k4_pack_scales(sc, m, blk + 4);
    uint8_t *qh = blk + 16;
    memset(qh, 0, 32);
    for (int s = 0; s < 8; s++) /* bit 4 of element 32s + l is bit s of qh[l] */
        for (int l = 0; l < 32; l++) qh[l] |= (uint8_t)((q[32 * s + l] >> 4) << s);
    k4_pack_nibbles(q, blk + 48);
}

static void q6_k_block(const float *x, uint8_t *blk)
{
    int r[16];
    float dl[16];
    uint8_t q[256]; /* q + 32, 0..63 */
    k_symmetric(x, 16, 32.0f, 127, blk + 208, r, dl);
    for (int j = 0; j < 16; j++) k_sym_codes(x + 16 * j, 16, dl[j], -32, 31, q + 16 * j);
    uint8_t *ql = blk, *qh = blk + 128;
    memset(blk, 0, 192);
    for (int j = 0; j < 16; j++) blk[192 + j] = (uint8_t)(int8_t)r[j];
    for (int i = 0; i < 256; i++) { /* §6.12 */
        int h = i / 128, c = (i % 128) / 32, l = i % 32;
        ql[64 * h + l + 32 * (c & 1)] |= (uint8_t)((q[i] & 0x0F) << (c < 2 ? 0 : 4));
        qh[32 * h + l] |= (uint8_t)((q[i] >> 4) << (2 * c));
    }
}

static void iq4_xs_block(const float *x, uint8_t *blk)
{
    int r[16];
    float dl[16];
    k_symmetric(x, 8, 127.0f, 31, blk, r, dl);
    uint16_t scales_h = 0;
    uint8_t *scales_l = blk + 4, *qs = blk + 8;
    memset(scales_l, 0, 4);
    for (int s = 0; s < 8; s++) {
        uint8_t ls = (uint8_t)(r[s] + 32);
        scales_l[s / 2] |= (uint8_t)((ls & 0x0F) << (4 * (s % 2)));
        scales_h |= (uint16_t)((ls >> 4) << (2 * s));
        uint8_t q[32];
        iq4_codes(x + 32 * s, 32, dl[s], q);
        pack_nibbles(q, qs + 16 * s);
    }
    put16(blk + 2, scales_h);
}

/* ------------------------------------------------------------------------ */
/* Rows                                                                      */
/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */
/* The low-bit types: valid blocks, not a quantiser                          */
/* ------------------------------------------------------------------------ */

/*
 * vt has no quantiser for the IQ1-IQ3, TQ, NVFP4, Q1_0 and Q2_0 types. A block
 * of them gets codes that are a hash of its values (the same values give the
 * same block) and scale fields set so that its decoded values span about the
 * block's max |x|: real files' magnitudes and valid bytes, for benchmarks and
 * streaming tests (vt mkmodel), not an approximation of x.
 */
static uint64_t lowbit_hash(const float *x, int n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        h = (h ^ u) * 0xff51afd7ed558ccdull;
        h ^= h >> 29;
    }
    return h | 1;
}

static float lowbit_amax(const float *x, int n)
{
    float m = 0.0f;
    for (int i = 0; i < n; i++) m = x[i] > m ? x[i] : -x[i] > m ? -x[i] : m;
    return m;
}

/* UE4M3 (NVFP4's sub-block scale, exponent bias 7, no sign) nearest below 2·v, v > 0:
 * decoded as that value times ½. */
static uint8_t lowbit_ue4m3_half(float v)
{
    float t = 2.0f * v;
    if (!(t > 0x1p-6f)) return 0x08; /* the smallest normal, 2^-6 */
    if (!(t < 448.0f)) return 0x7e;  /* the largest finite, 448 */
    int e = 7;
    float p = 1.0f;                  /* 2^(e - 7) */
    while (t >= 2.0f * p && e < 15) { p *= 2.0f; e++; }
    while (t < p && e > 1) { p *= 0.5f; e--; }
    int m = (int)((t / p - 1.0f) * 8.0f);
    m = m < 0 ? 0 : m > 7 ? 7 : m;
    if (e == 15 && m == 7) m = 6; /* 0x7f reads as zero */
    return (uint8_t)(e << 3 | m);
}

static void lowbit_block(uint32_t type, const float *x, uint8_t *b)
{
    const int bs = (int)vt_type_block_size(type), ts = (int)vt_type_size(type);
    uint64_t h = lowbit_hash(x, bs);
    for (int i = 0; i < ts; i++) { /* xorshift64 stream seeded by the values */
        h ^= h << 13;
        h ^= h >> 7;
        h ^= h << 17;
        b[i] = (uint8_t)(h >> 32);
    }
    const float amax = lowbit_amax(x, bs);
    switch (type) { /* largest decoded magnitude per unit of d, roughly halved: the codes are random */
    case VT_TYPE_IQ2_XXS: case VT_TYPE_IQ2_XS: case VT_TYPE_IQ2_S:
        put16(b, f32_to_f16(amax / 100.0f));
        break;
    case VT_TYPE_IQ3_XXS: case VT_TYPE_IQ3_S: put16(b, f32_to_f16(amax / 250.0f)); break;
    case VT_TYPE_IQ1_S: case VT_TYPE_IQ1_XS: case VT_TYPE_IQ1_XXS: case VT_TYPE_IQ1_XXXS:
        put16(b, f32_to_f16(amax / 8.0f));
        break;
    case VT_TYPE_IQ1_M: { /* the fp16 scale lives in the top nibbles of the 4 u16 at 48 */
        const uint16_t d = f32_to_f16(amax / 8.0f);
        for (int k = 0; k < 4; k++)
            b[49 + 2 * k] = (uint8_t)((b[49 + 2 * k] & 0x0f) | ((d >> (4 * k)) & 15) << 4);
        break;
    }
    case VT_TYPE_TQ1_0: put16(b + 52, f32_to_f16(amax)); break;
    case VT_TYPE_TQ2_0: put16(b + 64, f32_to_f16(amax / 2.0f)); break;
    case VT_TYPE_Q1_0: put16(b, f32_to_f16(amax)); break;
    case VT_TYPE_Q2_0: put16(b, f32_to_f16(amax / 2.0f)); break;
    case VT_TYPE_NVFP4: /* one scale per 16 values: e2m1 codes up to 6 */
        for (int s = 0; s < 4; s++) b[s] = lowbit_ue4m3_half(lowbit_amax(x + 16 * s, 16) / 6.0f);
        break;
    default: break;
    }
}

#define LOWBIT_QUANT(NAME, T)                                                                  \
    static void NAME(const float *x, uint8_t *blk) { lowbit_block(T, x, blk); }
LOWBIT_QUANT(iq2_xxs_block, VT_TYPE_IQ2_XXS)
LOWBIT_QUANT(iq2_xs_block, VT_TYPE_IQ2_XS)
LOWBIT_QUANT(iq2_s_block, VT_TYPE_IQ2_S)
LOWBIT_QUANT(iq3_xxs_block, VT_TYPE_IQ3_XXS)
LOWBIT_QUANT(iq3_s_block, VT_TYPE_IQ3_S)
LOWBIT_QUANT(iq1_s_block, VT_TYPE_IQ1_S)
LOWBIT_QUANT(iq1_m_block, VT_TYPE_IQ1_M)
LOWBIT_QUANT(iq1_xs_block, VT_TYPE_IQ1_XS)
LOWBIT_QUANT(iq1_xxs_block, VT_TYPE_IQ1_XXS)
LOWBIT_QUANT(iq1_xxxs_block, VT_TYPE_IQ1_XXXS)
LOWBIT_QUANT(tq1_0_block, VT_TYPE_TQ1_0)
LOWBIT_QUANT(tq2_0_block, VT_TYPE_TQ2_0)
LOWBIT_QUANT(nvfp4_block, VT_TYPE_NVFP4)
LOWBIT_QUANT(q1_0_block, VT_TYPE_Q1_0)
LOWBIT_QUANT(q2_0_block, VT_TYPE_Q2_0)
#undef LOWBIT_QUANT

typedef void (*quant_block_fn)(const float *x, uint8_t *blk);

static quant_block_fn block_fn(uint32_t type)
{
    switch (type) {
    case VT_TYPE_Q8_0: return q8_0_block;
    case VT_TYPE_Q4_0: return q4_0_block;
    case VT_TYPE_Q4_1: return q4_1_block;
    case VT_TYPE_Q5_0: return q5_0_block;
    case VT_TYPE_Q5_1: return q5_1_block;
    case VT_TYPE_Q2_K: return q2_k_block;
    case VT_TYPE_Q3_K: return q3_k_block;
    case VT_TYPE_Q4_K: return q4_k_block;
    case VT_TYPE_Q5_K: return q5_k_block;
    case VT_TYPE_Q6_K: return q6_k_block;
    case VT_TYPE_IQ4_NL: return iq4_nl_block;
    case VT_TYPE_IQ4_XS: return iq4_xs_block;
    case VT_TYPE_MXFP4: return mxfp4_block;
    case VT_TYPE_IQ2_XXS: return iq2_xxs_block;
    case VT_TYPE_IQ2_XS: return iq2_xs_block;
    case VT_TYPE_IQ2_S: return iq2_s_block;
    case VT_TYPE_IQ3_XXS: return iq3_xxs_block;
    case VT_TYPE_IQ3_S: return iq3_s_block;
    case VT_TYPE_IQ1_S: return iq1_s_block;
    case VT_TYPE_IQ1_M: return iq1_m_block;
    case VT_TYPE_IQ1_XS: return iq1_xs_block;
    case VT_TYPE_IQ1_XXS: return iq1_xxs_block;
    case VT_TYPE_IQ1_XXXS: return iq1_xxxs_block;
    case VT_TYPE_TQ1_0: return tq1_0_block;
    case VT_TYPE_TQ2_0: return tq2_0_block;
    case VT_TYPE_NVFP4: return nvfp4_block;
    case VT_TYPE_Q1_0: return q1_0_block;
    case VT_TYPE_Q2_0: return q2_0_block;
    default: return NULL;
    }
}

int vt_quantize_handles(uint32_t type)
{
    return type == VT_TYPE_F32 || type == VT_TYPE_F16 || type == VT_TYPE_BF16 ||
           block_fn(type) != NULL;
}

uint32_t vt_quantize_fallback(uint32_t type)
{
    switch (type) {
    case VT_TYPE_IQ1_S: case VT_TYPE_IQ1_M: case VT_TYPE_IQ1_XS: case VT_TYPE_IQ1_XXS:
    case VT_TYPE_IQ1_XXXS: case VT_TYPE_IQ2_XXS: case VT_TYPE_IQ2_XS: case VT_TYPE_IQ2_S:
    case VT_TYPE_IQ3_XXS: case VT_TYPE_IQ3_S:
    case VT_TYPE_IQ4_XS: return VT_TYPE_IQ4_NL;
    case VT_TYPE_Q2_0: case VT_TYPE_Q2_K: case VT_TYPE_Q3_K: case VT_TYPE_TQ1_0:
    case VT_TYPE_TQ2_0: return VT_TYPE_Q4_0;
    case VT_TYPE_Q4_K: return VT_TYPE_Q5_0;
    case VT_TYPE_Q5_K: return VT_TYPE_Q5_1;
    case VT_TYPE_Q6_K: return VT_TYPE_Q8_0;
    default: return VT_TYPE_F16;
    }
}

vt_status vt_quantize_row(uint32_t type, const float *x, int64_t n, void *dst)
{
    if (!vt_quantize_handles(type)) {
        vt_set_error("quantize: type %s (%" PRIu32 ") is not supported (row of %" PRId64
                     " values)", vt_type_name(type), type, n);
        return VT_ERR_UNSUPPORTED;
    }
    const int64_t bs = vt_type_block_size(type), ts = vt_type_size(type);
    if (n < 0 || n % bs) {
        vt_set_error("quantize: %s row of %" PRId64 " values: the length must be a "
                     "non-negative multiple of %" PRId64, vt_type_name(type), n, bs);
        return VT_ERR_INVALID_ARG;
    }
    if (n == 0) return VT_OK;
    if (!x || !dst) {
        vt_set_error("quantize: %s row of %" PRId64 " values: NULL %s", vt_type_name(type), n,
                     !x ? "source" : "destination");
        return VT_ERR_INVALID_ARG;
    }
    uint8_t *out = dst;
    switch (type) {
    case VT_TYPE_F32:
        memcpy(out, x, (size_t)n * 4); /* vt hosts are little-endian */
        return VT_OK;
    case VT_TYPE_F16:
        for (int64_t i = 0; i < n; i++) put16(out + 2 * i, f32_to_f16(x[i]));
        return VT_OK;
    case VT_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) put16(out + 2 * i, f32_to_bf16(x[i]));
        return VT_OK;
    default:
        break;
    }
    for (int64_t i = 0; i < n; i++) {
        if (abs_bits(x[i]) >= 0x7F800000u) {
            vt_set_error("quantize: %s row of %" PRId64 " values: value %" PRId64
                         " is not finite", vt_type_name(type), n, i);
            return VT_ERR_INVALID_ARG;
        }
    }
    quant_block_fn f = block_fn(type);
    for (int64_t b = 0; b < n / bs; b++) f(x + b * bs, out + b * ts);
    return VT_OK;
}
