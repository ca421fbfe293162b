/*
 * test_quant_blocks.h - random but valid rows of the GGUF block types, for
 * the kernel tests and benchmarks: every byte random (codes, packed
 * sub-scales, high bits), then each block's fp16 scale fields (gguf.md §6)
 * overwritten with finite values of a chosen magnitude, and MXFP4's E8M0
 * exponent with a small range, so rows decode to finite, varied weights.
 * Header-only; depends on nothing but <stdint.h>/<string.h> and vt/types.h.
 */
#ifndef VT_TEST_QUANT_BLOCKS_H
#define VT_TEST_QUANT_BLOCKS_H

#include <stdint.h>
#include <string.h>

#include "vt/types.h"

/* The block types the CPU and CUDA kernels handle (F32/F16/BF16 aside). */
static const uint32_t tqb_types[] = {
    VT_TYPE_Q4_0, VT_TYPE_Q4_1, VT_TYPE_Q5_0, VT_TYPE_Q5_1, VT_TYPE_Q8_0,
    VT_TYPE_Q2_K, VT_TYPE_Q3_K, VT_TYPE_Q4_K, VT_TYPE_Q5_K, VT_TYPE_Q6_K,
    VT_TYPE_IQ4_NL, VT_TYPE_IQ4_XS, VT_TYPE_MXFP4};
#define TQB_N_TYPES (sizeof tqb_types / sizeof tqb_types[0])

/* The low-bit types (gpu_lowbit.cuh, cpu_lowbit.c). */
static const uint32_t tqb_lowbit_types[] = {
    VT_TYPE_IQ2_XXS, VT_TYPE_IQ2_XS, VT_TYPE_IQ2_S, VT_TYPE_IQ3_XXS, VT_TYPE_IQ3_S,
    VT_TYPE_IQ1_S, VT_TYPE_IQ1_M, VT_TYPE_IQ1_XS, VT_TYPE_IQ1_XXS, VT_TYPE_IQ1_XXXS,
    VT_TYPE_TQ1_0, VT_TYPE_TQ2_0, VT_TYPE_NVFP4, VT_TYPE_Q1_0, VT_TYPE_Q2_0};
#define TQB_N_LOWBIT (sizeof tqb_lowbit_types / sizeof tqb_lowbit_types[0])
static inline int tqb_is_lowbit(uint32_t t)
{
    for (size_t i = 0; i < TQB_N_LOWBIT; i++)
        if (tqb_lowbit_types[i] == t) return 1;
    return 0;
}

static inline uint64_t tqb_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

/* fp16 bits of ±m · 2^e, m in [1, 2) with 10 random mantissa bits, e in [-14, 15]. */
static inline uint16_t tqb_f16(uint64_t *s, int e, int allow_negative)
{
    e = e < -14 ? -14 : e > 15 ? 15 : e; /* normal fp16 exponents only */
    uint16_t sign = allow_negative && (tqb_next(s) >> 63) ? 0x8000u : 0;
    return (uint16_t)(sign | (uint16_t)((e + 15) << 10) | (uint16_t)((tqb_next(s) >> 20) & 1023u));
}

static inline void tqb_put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/*
 * Fill n_rows rows of n_in values (a multiple of the block size) of `type`
 * at out (row_bytes apart, vt_type_row_bytes). Scales are about 2^e_scale
 * (e.g. -8); mins (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K) about 2^(e_scale-1).
 */
static inline void tqb_fill(uint32_t type, uint8_t *out, int64_t n_rows, int64_t n_in,
                            uint64_t seed, int e_scale)
{
    uint64_t s = seed | 1;
    size_t rb = (size_t)vt_type_row_bytes(type, (uint64_t)n_in);
    size_t ts = (size_t)vt_type_size(type);
    int64_t nb = n_in / vt_type_block_size(type);
    for (size_t i = 0; i < rb * (size_t)n_rows; i++) out[i] = (uint8_t)(tqb_next(&s) >> 56);
    for (int64_t r = 0; r < n_rows; r++) {
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *p = out + (size_t)r * rb + (size_t)b * ts;
            int e = e_scale + (int)(tqb_next(&s) >> 62) - 1; /* e_scale - 1 .. e_scale + 2 */
            switch (type) {
            case VT_TYPE_Q8_0: case VT_TYPE_Q4_0: case VT_TYPE_Q5_0: case VT_TYPE_IQ4_NL:
            case VT_TYPE_IQ4_XS:
                tqb_put16(p, tqb_f16(&s, e, 1));
                break;
            case VT_TYPE_Q4_1: case VT_TYPE_Q5_1: case VT_TYPE_Q4_K: case VT_TYPE_Q5_K:
                tqb_put16(p, tqb_f16(&s, e, 0));
                tqb_put16(p + 2, tqb_f16(&s, e - 1, type == VT_TYPE_Q4_1 || type == VT_TYPE_Q5_1));
                break;
            case VT_TYPE_Q2_K:
                tqb_put16(p + 80, tqb_f16(&s, e, 0));
                tqb_put16(p + 82, tqb_f16(&s, e - 1, 0));
                break;
            case VT_TYPE_Q3_K: tqb_put16(p + 108, tqb_f16(&s, e, 1)); break;
            case VT_TYPE_Q6_K: tqb_put16(p + 208, tqb_f16(&s, e, 1)); break;
            case VT_TYPE_MXFP4: p[0] = (uint8_t)(127 + e_scale + 4 + (int)(tqb_next(&s) >> 62)); break;
            case VT_TYPE_IQ2_XXS: case VT_TYPE_IQ2_XS: case VT_TYPE_IQ2_S: case VT_TYPE_IQ3_XXS:
            case VT_TYPE_IQ3_S: case VT_TYPE_IQ1_S: case VT_TYPE_IQ1_XS: case VT_TYPE_IQ1_XXS:
            case VT_TYPE_IQ1_XXXS: case VT_TYPE_Q1_0: case VT_TYPE_Q2_0:
                tqb_put16(p, tqb_f16(&s, e, 1));
                break;
            case VT_TYPE_TQ1_0: tqb_put16(p + 52, tqb_f16(&s, e, 1)); break;
            case VT_TYPE_TQ2_0: tqb_put16(p + 64, tqb_f16(&s, e, 1)); break;
            case VT_TYPE_IQ1_M: { /* the fp16 scale lives in the top nibbles of 4 u16 at 48 */
                uint16_t v = tqb_f16(&s, e, 1);
                for (int k = 0; k < 4; k++)
                    p[49 + 2 * k] = (uint8_t)((p[49 + 2 * k] & 0x0f) | ((v >> (4 * k)) & 15) << 4);
                break;
            }
            case VT_TYPE_NVFP4: /* 4 UE4M3 scales, exponent field 1..4 */
                for (int k = 0; k < 4; k++)
                    p[k] = (uint8_t)((1 + (int)(tqb_next(&s) >> 62)) << 3 | (tqb_next(&s) >> 61));
                break;
            default: break;
            }
        }
    }
}

#endif
