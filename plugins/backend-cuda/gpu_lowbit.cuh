/*
 * gpu_lowbit.cuh - QT<T> (gpu_device.cuh) for the low-bit weight types of
 * backend-cuda / backend-rocm: the grid types IQ2_XXS, IQ2_XS, IQ2_S,
 * IQ3_XXS, IQ3_S, IQ1_S, IQ1_M and the narrow IQ1 types IQ1_XS, IQ1_XXS,
 * IQ1_XXXS (ids 64-66), the ternary TQ1_0 and TQ2_0, NVFP4, Q1_0 and Q2_0.
 * Included by gpu_device.cuh; every kernel that takes QT<T> (get_rows, the
 * decode matvec, the fused MoE op, the tiled and tensor-core GEMMs, the
 * cuBLAS dequantisation) thereby takes these types.
 *
 * Block layouts (format data): ggml-common.h of llama.cpp d32676d77, and of
 * unslothai/llama.cpp branch iq1-narrow (36fe8e1cc) for ids 64-66; the
 * layouts are spelled out beside backend-cpu's decoders
 * (plugins/backend-cpu/cpu_lowbit.c), whose arithmetic these follow step for
 * step: every value is sc · q with sc a float computed in the same order and
 * q a small integer, each product exact in float32 (cpu_lowbit.c's header
 * says why), so the values equal vt_cpu_dequant_row's and ggml's bit for bit
 * (tests/test_cuda_quant.c checks the quant-zoo-2 fixture on the device).
 *
 * Groups: for every type here group g of a block is its elements 8g .. 8g+7
 * (e0 = 8g, e1 = 8g + 4), so elem(b, i) is value i & 7 of group i / 8. Within
 * a 256-value super-block, ib = g / 4 is the 32-value sub-block and l = g % 4
 * the 8-value piece of it (one grid entry, or two of IQ3's 4-value ones).
 *
 * The grids (vt/iq_grids.h) are expanded at compile time into ggml's words
 * (coordinate j in byte j) in device memory of each kernel file: about 47 KiB,
 * read per 8 weights through the L1 cache. The functions are device-only.
 */
#ifndef VT_GPU_LOWBIT_CUH
#define VT_GPU_LOWBIT_CUH

#include "vt/iq_grids.h"

#define LB static __device__ __forceinline__

/* Entry `c` of a grid as ggml's word: coordinate j = byte k of `levels`,
 * k = bits j·bits .. of c (vt_iq_grid_word's rule, at compile time). */
static constexpr __host__ __device__ uint64_t lb_word(uint32_t c, int bits, int coords,
                                                      uint64_t levels)
{
    uint64_t w = 0;
    for (int j = 0; j < coords; j++)
        w |= ((levels >> (8 * ((c >> (bits * j)) & ((1u << bits) - 1u)))) & 0xFFu) << (8 * j);
    return w;
}
/* the levels of vt_iq_grid()'s definitions, byte k = level k */
#define LB_W_IQ2(c) lb_word((c), 2, 8, 0x2B1908ull),
#define LB_W_IQ3XXS(c) (uint32_t)lb_word((c), 3, 4, 0x3E342C241C140C04ull),
#define LB_W_IQ3S(c) (uint32_t)lb_word((c), 3, 4, 0x0F0D0B0907050301ull),
#define LB_W_IQ1(c) lb_word((c), 2, 8, 0xFF0100ull),

static __device__ const uint64_t lb_iq2xxs[256] = {VT_IQ2XXS_CODES(LB_W_IQ2)};
static __device__ const uint64_t lb_iq2xs[512] = {VT_IQ2XS_CODES(LB_W_IQ2)};
static __device__ const uint64_t lb_iq2s[1024] = {VT_IQ2S_CODES(LB_W_IQ2)};
static __device__ const uint32_t lb_iq3xxs[256] = {VT_IQ3XXS_CODES(LB_W_IQ3XXS)};
static __device__ const uint32_t lb_iq3s[512] = {VT_IQ3S_CODES(LB_W_IQ3S)};
static __device__ const uint64_t lb_iq1s[2048] = {VT_IQ1S_CODES(LB_W_IQ1)};
static __device__ const uint64_t lb_iq1xs[1024] = {VT_IQ1XS_CODES(LB_W_IQ1)};
static __device__ const uint64_t lb_iq1xxs[512] = {VT_IQ1XXS_CODES(LB_W_IQ1)};
static __device__ const uint64_t lb_iq1xxxs[256] = {VT_IQ1XXXS_CODES(LB_W_IQ1)};

/* IQ2_XXS / IQ2_XS / IQ3_XXS sign byte: 7 stored bits and their parity as
 * bit 7 (vt_iq_sign_byte) */
LB uint32_t lb_sign7(uint32_t s)
{
    s &= 127u;
    return s | ((uint32_t)__popc(s) & 1u) << 7;
}

/* bytes a + b, each byte on its own (no carry into the next) */
LB uint32_t lb_vadd4(uint32_t a, uint32_t b)
{
    return ((a & 0x7F7F7F7Fu) + (b & 0x7F7F7F7Fu)) ^ ((a ^ b) & 0x80808080u);
}

/* bit k of n (k < 4) as byte k: 0x01 or 0x00 */
LB uint32_t lb_bits4(uint32_t n) { return ((n & 15u) * 0x00204081u) & 0x01010101u; }

/* q = ± the coordinates of grid word w (unsigned magnitudes, all >= 1), minus
 * where bit j of s: per byte (v ^ 0xff) + 1 = −v, which never carries */
LB void lb_signed(uint32_t q[2], uint64_t w, uint32_t s)
{
    const uint32_t m0 = lb_bits4(s) * 0xFFu, m1 = lb_bits4(s >> 4) * 0xFFu;
    q[0] = ((uint32_t)w ^ m0) + (m0 & 0x01010101u);
    q[1] = ((uint32_t)(w >> 32) ^ m1) + (m1 & 0x01010101u);
}

/* IQ1: q_j = 8 c_j ± 1, c_j the signed coordinate j of w (bytes 0xff, 0, 1):
 * 8 c per byte is the word shifted left by 3 with each byte's low 3 bits cleared */
LB void lb_iq1(uint32_t q[2], uint64_t w, bool neg)
{
    const uint32_t k = neg ? 0xFFFFFFFFu : 0x01010101u;
    q[0] = lb_vadd4(((uint32_t)w << 3) & 0xF8F8F8F8u, k);
    q[1] = lb_vadd4(((uint32_t)(w >> 32) << 3) & 0xF8F8F8F8u, k);
}

/* (d · (½ + s)) · f: the IQ2/IQ3_XXS sub-block scale */
LB float lb_half_scale(float d, uint32_t s, float f) { return q_mul(q_mul(d, q_add(0.5f, (float)s)), f); }
/* (d · (2 s + 1)) · ⅛: the IQ1 sub-block scale over 8 */
LB float lb_iq1_scale(float d, uint32_t s)
{
    return q_mul(q_mul(d, (float)(2 * (int)s + 1)), VT_IQ1_DELTA);
}

/*
 * Each type below defines igroup(b, g, q, sc): group g as 8 int8 codes q
 * (bytes of q[0], q[1]: elements 8g .. 8g+7) and a scale, value = sc · q
 * exactly. LB_FROM_INT derives QT's float entry points from it: group()
 * (e0 = 8g, e1 = 8g + 4) and elem(); gpu_qdot.cuh's Qi takes the codes to
 * dp4a with the int8 activations.
 */
LB int lb_byte(const uint32_t q[2], int j) { return (int)(signed char)(uint8_t)(q[j >> 2] >> (8 * (j & 3))); }
#define LB_FROM_INT                                                                                \
    LB void group(const uint8_t *b, int g, float v[8], int &e0, int &e1)                           \
    {                                                                                              \
        uint32_t q[2];                                                                             \
        float sc;                                                                                  \
        igroup(b, g, q, sc);                                                                       \
        _Pragma("unroll") for (int j = 0; j < 8; j++) v[j] = q_mul(sc, (float)lb_byte(q, j));      \
        e0 = 8 * g;                                                                                \
        e1 = 8 * g + 4;                                                                            \
    }                                                                                              \
    LB float elem(const uint8_t *b, int i)                                                         \
    {                                                                                              \
        uint32_t q[2];                                                                             \
        float sc;                                                                                  \
        igroup(b, i >> 3, q, sc);                                                                  \
        return q_mul(sc, (float)lb_byte(q, i & 7));                                                \
    }

/* IQ2_XXS (66 B): d @0; per 32 values 8 B @2 + 8 ib: 4 grid indices, then a
 * u32 of 4 × 7 sign bits and a 4-bit scale; db = d (½ + s) / 4. */
template <> struct QT<VT_TYPE_IQ2_XXS> {
    enum { quant = 1, QK = 256, BYTES = 66, ALIGN = 2 };
    LB void igroup(const uint8_t *b, int g, uint32_t q[2], float &sc)
    {
        const int ib = g >> 2, l = g & 3;
        const uint8_t *q8 = b + 2 + 8 * ib;
        const uint32_t aux = ld32_2(q8 + 4);
        sc = lb_half_scale(f16_to_f32(ld16(b)), aux >> 28, 0.25f);
        lb_signed(q, lb_iq2xxs[q8[l]], lb_sign7(aux >> (7 * l)));
    }
    LB_FROM_INT
};

/* IQ2_XS (74 B): d @0; 32 u16 @2 (9-bit index | 7 sign bits << 9); 8 scale
 * bytes @66 (low nibble: first 16 values of a 32). */
template <> struct QT<VT_TYPE_IQ2_XS> {
    enum { quant = 1, QK = 256, BYTES = 74, ALIGN = 2 };
    LB void igroup(const uint8_t *b, int g, uint32_t q[2], float &sc)
    {
        const uint32_t s = b[66 + (g >> 2)], v = ld16(b + 2 + 2 * g);
        sc = lb_half_scale(f16_to_f32(ld16(b)), (g & 3) < 2 ? s & 15u : s >> 4, 0.25f);
        lb_signed(q, lb_iq2xs[v & 511u], lb_sign7(v >> 9));
    }
    LB_FROM_INT
};

/* IQ2_S (82 B): d @0; 32 index bytes @2, 32 sign bytes @34, 8 bytes @66 of
 * 4 × 2 index high bits, 8 scale bytes @74 (as IQ2_XS). */
template <> struct QT<VT_TYPE_IQ2_S> {
    enum { quant = 1, QK = 256, BYTES = 82, ALIGN = 2 };
    LB void igroup(const uint8_t *b, int g, uint32_t q[2], float &sc)
    {
        const int ib = g >> 2, l = g & 3;
        const uint32_t s = b[74 + ib];
        const uint32_t idx = b[2 + g] | ((uint32_t)b[66 + ib] << (8 - 2 * l) & 0x300u);
        sc = lb_half_scale(f16_to_f32(ld16(b)), l < 2 ? s & 15u : s >> 4, 0.25f);
        lb_signed(q, lb_iq2s[idx], b[34 + g]);
    }
    LB_FROM_INT
};

/* IQ3_XXS (98 B): d @0; 64 index bytes @2 (two 4-value entries per 8
 * values); 8 u32 @66 of 4 × 7 sign bits and a 4-bit scale; db = d (½ + s) / 2. */
template <> struct QT<VT_TYPE_IQ3_XXS> {
    enum { quant = 1, QK = 256, BYTES = 98, ALIGN = 2 };
    LB void igroup(const uint8_t *b, int g, uint32_t q[2], float &sc)
    {
        const int ib = g >> 2, l = g & 3;
        const uint32_t aux = ld32_2(b + 66 + 4 * ib);
        const uint8_t *i8 = b + 2 + 8 * ib + 2 * l;
        sc = lb_half_scale(f16_to_f32(ld16(b)), aux >> 28, 0.5f);
        lb_signed(q, lb_iq3xxs[i8[0]] | (uint64_t)lb_iq3xxs[i8[1]] << 32, lb_sign7(aux >> (7 * l)));
    }
    LB_FROM_INT
};

/* IQ3_S (110 B): d @0; 64 index bytes @2, 8 bytes @66 of index bit 8, 32
 * sign bytes @74, 4 scale bytes @106 (a nibble per 32 values); db = d (1 + 2 s). */
template <> struct QT<VT_TYPE_IQ3_S> {
    enum { quant = 1, QK = 256, BYTES = 110, ALIGN = 2 };
    LB void igroup(const uint8_t *b, int g, uint32_t q[2], float &sc)
    {
        const int ib = g >> 2, l = g & 3;
        const uint32_t qh = b[66 + ib];
        const uint32_t i1 = b[2 + 8 * ib + 2 * l] | (qh << (8 - 2 * l) & 256u);
        const uint32_t i2 = b[3 + 8 * ib + 2 * l] | (qh << (7 - 2 * l) & 256u);
        const uint32_t s = (b[106 + (ib >> 1)] >> (4 * (ib & 1))) & 15u;
        sc = q_mul(f16_to_f32(ld16(b)), (float)(1 + 2 * (int)s));
        lb_signed(q, lb_iq3s[i1] | (uint64_t)lb_iq3s[i2] << 32, b[74 + g]);
    }
    LB_FROM_INT
};

/* IQ1_S (50 B): d @0; 32 index low bytes @2; 8 u16 @34: 4 × 3 index high
 * bits, a 3-bit scale (bits 12-14), the delta's sign (bit 15). */
template <> struct QT<VT_TYPE_IQ1_S> {
    enum { quant = 1, QK = 256, BYTES = 50, ALIGN = 2 };
    LB void igroup(const uint8_t *b, int g, uint32_t q[2], float &sc)
    {
        const uint32_t qh = ld16(b + 34 + 2 * (g >> 2));
        sc = lb_iq1_scale(f16_to_f32(ld16(b)), (qh >> 12) & 7u);
        lb_iq1(q, lb_iq1s[b[2 + g] | ((qh >> (3 * (g & 3))) & 7u) << 8], qh & 0x8000u);
    }
    LB_FROM_INT
};

/* IQ1_M (56 B): 32 index low bytes @0; 16 bytes @32 (per 8 values a nibble:
 * 3 index high bits, the delta's sign); 4 u16 @48: a 3-bit scale per 16
 * values in bits 0-11, the fp16 d spread over their top nibbles. */
template <> struct QT<VT_TYPE_IQ1_M> {
    enum { quant = 1, QK = 256, BYTES = 56, ALIGN = 2 };
    LB void igroup(const uint8_t *b, int g, uint32_t q[2], float &sc)
    {
        const int ib = g >> 2, l = g & 3;
        const uint32_t s0 = ld16(b + 48), s1 = ld16(b + 50), s2 = ld16(b + 52), s3 = ld16(b + 54);
        const float d = f16_to_f32((s0 >> 12) | ((s1 >> 8) & 0x00F0u) | ((s2 >> 4) & 0x0F00u) |
                                   (s3 & 0xF000u));
        const uint32_t sw = ld16(b + 48 + 2 * (ib >> 1));
        const uint32_t nib = (uint32_t)b[32 + 2 * ib + (l >> 1)] >> (4 * (l & 1));
        sc = lb_iq1_scale(d, (sw >> (6 * (ib & 1) + 3 * (l >> 1))) & 7u);
        lb_iq1(q, lb_iq1s[b[g] | (nib & 7u) << 8], nib & 8u);
    }
    LB_FROM_INT
};

/* IQ1_XS (46 B): d @0; 32 index low bytes @2; 8 bytes @34 of 4 × 2 index
 * high bits; 4 bytes @42 of a nibble per 32 values (scale, delta sign). */
template <> struct QT<VT_TYPE_IQ1_XS> {
    enum { quant = 1, QK = 256, BYTES = 46, ALIGN = 2 };
    LB void igroup(const uint8_t *b, int g, uint32_t q[2], float &sc)
    {
        const int ib = g >> 2, l = g & 3;
        const uint32_t nib = (b[42 + (ib >> 1)] >> (4 * (ib & 1))) & 15u;
        sc = lb_iq1_scale(f16_to_f32(ld16(b)), nib & 7u);
        lb_iq1(q, lb_iq1xs[b[2 + g] | ((uint32_t)(b[34 + ib] >> (2 * l)) & 3u) << 8], nib & 8u);
    }
    LB_FROM_INT
};

/* IQ1_XXS (42 B): d @0; 32 index low bytes @2; 8 bytes @34: bits 0-3 index
 * bit 8 of the 4 entries, bits 4-6 scale, bit 7 delta sign. */
template <> struct QT<VT_TYPE_IQ1_XXS> {
    enum { quant = 1, QK = 256, BYTES = 42, ALIGN = 2 };
    LB void igroup(const uint8_t *b, int g, uint32_t q[2], float &sc)
    {
        const uint32_t h = b[34 + (g >> 2)];
        sc = lb_iq1_scale(f16_to_f32(ld16(b)), (h >> 4) & 7u);
        lb_iq1(q, lb_iq1xxs[b[2 + g] | ((h >> (g & 3)) & 1u) << 8], h & 0x80u);
    }
    LB_FROM_INT
};

/* IQ1_XXXS (38 B): d @0; 32 index bytes @2; 4 bytes @34 of a nibble per 32
 * values (as IQ1_XS). */
template <> struct QT<VT_TYPE_IQ1_XXXS> {
    enum { quant = 1, QK = 256, BYTES = 38, ALIGN = 2 };
    LB void igroup(const uint8_t *b, int g, uint32_t q[2], float &sc)
    {
        const int ib = g >> 2;
        const uint32_t nib = (b[34 + (ib >> 1)] >> (4 * (ib & 1))) & 15u;
        sc = lb_iq1_scale(f16_to_f32(ld16(b)), nib & 7u);
        lb_iq1(q, lb_iq1xxxs[b[2 + g]], nib & 8u);
    }
    LB_FROM_INT
};

/* Trit n (0..4) of a TQ1_0 byte q (a fixed-point fraction of 3^5):
 * ((q · 3^n mod 256) · 3) >> 8, as −1, 0, +1. */
LB int lb_trit(uint32_t q, int n)
{
    const uint32_t p = n == 0 ? 1u : n == 1 ? 3u : n == 2 ? 9u : n == 3 ? 27u : 81u;
    return (int)((((q * p) & 0xFFu) * 3u) >> 8) - 1;
}

/* TQ1_0 (54 B): 48 bytes @0 of 5 trits, 4 bytes @48 of 4, d @52. Values
 * 0..159: trit n of bytes 0..31 (value 32 n + m); 160..239: trit n of bytes
 * 32..47 (160 + 16 n + m); 240..255: trit n of bytes 48..51 (240 + 4 n + m). */
template <> struct QT<VT_TYPE_TQ1_0> {
    enum { quant = 1, QK = 256, BYTES = 54, ALIGN = 2 };
    LB void igroup(const uint8_t *b, int g, uint32_t q[2], float &sc)
    {
        sc = f16_to_f32(ld16(b + 52));
        q[0] = q[1] = 0;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            int n, m;
            if (g < 20) {
                n = g >> 2, m = 8 * (g & 3) + j;
            } else if (g < 30) {
                n = (g - 20) >> 1, m = 32 + 8 * ((g - 20) & 1) + j;
            } else {
                const int i = 8 * (g - 30) + j;
                n = i >> 2, m = 48 + (i & 3);
            }
            q[j >> 2] |= ((uint32_t)lb_trit(b[m], n) & 0xFFu) << (8 * (j & 3));
        }
    }
    LB_FROM_INT
};

/* TQ2_0 (66 B): 64 bytes @0 of 4 crumbs, d @64; value 128 h + 32 l + m is
 * crumb l of byte 32 h + m, as crumb − 1. */
template <> struct QT<VT_TYPE_TQ2_0> {
    enum { quant = 1, QK = 256, BYTES = 66, ALIGN = 2 };
    LB void igroup(const uint8_t *b, int g, uint32_t q[2], float &sc)
    {
        const uint8_t *p = b + 32 * (g >> 4) + 8 * (g & 3);
        const int sh = 2 * ((g >> 2) & 3);
        sc = f16_to_f32(ld16(b + 64));
        q[0] = lb_vadd4((ld32_2(p) >> sh) & 0x03030303u, 0xFFFFFFFFu);
        q[1] = lb_vadd4((ld32_2(p + 4) >> sh) & 0x03030303u, 0xFFFFFFFFu);
    }
    LB_FROM_INT
};

/* NVFP4 (36 B per 64): 4 UE4M3 scales @0, one per 16 values; 32 bytes @4:
 * byte 8 s + j holds value 16 s + j (low nibble) and 16 s + 8 + j (high),
 * E2M1 codes doubled (mxfp4_value), the scale halved: UE4M3 x (bias 7, bit 7
 * unused; 0 and 0x7f zero) / 2 = m · 2^-10 (exponent 0) or (8 + m) · 2^(e-11). */
LB float lb_ue4m3_half(uint32_t x)
{
    if (x == 0 || x == 0x7Fu) return 0.0f;
    const int e = (int)((x >> 3) & 15u), m = (int)(x & 7u);
    return q_mul((float)(e == 0 ? m : 8 + m), q_from_bits((uint32_t)(127 + (e == 0 ? -10 : e - 11)) << 23));
}
template <> struct QT<VT_TYPE_NVFP4> {
    enum { quant = 1, QK = 64, BYTES = 36, ALIGN = 1 };
    LB void igroup(const uint8_t *b, int g, uint32_t q[2], float &sc)
    {
        const int s = g >> 1, sh = 4 * (g & 1);
        sc = lb_ue4m3_half(b[s]);
        q[0] = q[1] = 0;
#pragma unroll
        for (int j = 0; j < 8; j++)
            q[j >> 2] |= ((uint32_t)mxfp4_value((b[4 + 8 * s + j] >> sh) & 15u) & 0xFFu) << (8 * (j & 3));
    }
    LB_FROM_INT
};

/* Q1_0 (18 B per 128): d @0; bit j % 8 of byte 2 + j / 8: +1 set, −1 not. */
template <> struct QT<VT_TYPE_Q1_0> {
    enum { quant = 1, QK = 128, BYTES = 18, ALIGN = 2 };
    LB void igroup(const uint8_t *b, int g, uint32_t q[2], float &sc)
    {
        const uint32_t x = b[2 + g];
        sc = f16_to_f32(ld16(b));
        q[0] = lb_vadd4(lb_bits4(x) << 1, 0xFFFFFFFFu); /* 2·bit − 1 */
        q[1] = lb_vadd4(lb_bits4(x >> 4) << 1, 0xFFFFFFFFu);
    }
    LB_FROM_INT
};

/* Q2_0 (18 B per 64): d @0; crumb j % 4 of byte 2 + j / 4, as crumb − 1:
 * byte k of x | x << 6 | x << 12 | x << 18 holds crumb k in its low bits. */
template <> struct QT<VT_TYPE_Q2_0> {
    enum { quant = 1, QK = 64, BYTES = 18, ALIGN = 2 };
    LB void igroup(const uint8_t *b, int g, uint32_t q[2], float &sc)
    {
        sc = f16_to_f32(ld16(b));
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint32_t x = b[2 + 2 * g + h];
            q[h] = lb_vadd4((x | x << 6 | x << 12 | x << 18) & 0x03030303u, 0xFFFFFFFFu);
        }
    }
    LB_FROM_INT
};

#undef LB_FROM_INT
#undef LB

#endif
