/*
 * cpu_dequant.c - scalar reference dequantisation of the GGUF weight types
 * (gguf.md §6): F32, F16, BF16 (§6.1), Q8_0 (§6.2), Q4_0, Q4_1, Q5_0, Q5_1
 * (§6.3-6.6), the K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (§6.7-6.12), IQ4_NL,
 * IQ4_XS (§6.14-6.15) and MXFP4 (§6.16); the low-bit types (IQ1-IQ3, TQ,
 * NVFP4, Q1_0, Q2_0) are in cpu_lowbit.c.
 *
 * Exactness: integers are decoded exactly; every product (fp16 scale ·
 * integer sub-scale · integer code) fits in float32's 24-bit significand, so
 * the only rounding is the one addition of the min/offset term in Q4_1, Q5_1,
 * Q2_K, Q4_K and Q5_K. Any correct float32 implementation therefore gives the
 * same bits, which tests/test_quant_zoo.c checks against the quant-zoo
 * fixture (quant-zoo/README.md).
 *
 * This file is the reference, written for clarity, one block at a time.
 * get_rows, the scalar matmul and the SIMD float path's panels (prefill) use
 * it; the decode path's integer dot products (cpu_qdot_body.h) decode the
 * same layouts in registers. Every type here has mat_mul and get_rows
 * kernels, so vt_cpu_type_supported is this file's list.
 */
#include "cpu_internal.h"

#include <string.h>

int vt_cpu_type_supported(uint32_t type) { return vt_cpu_dequant_handles(type); }

static inline float f16_at(const uint8_t *p) { return vt_cpu_f16_to_f32(vt_cpu_rd16(p)); }

/* IQ4_NL / IQ4_XS non-linear 4-bit codebook (gguf.md §6.14). */
static const int8_t iq4_codebook[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                        1,    13,   25,  38,  53,  69,  89,  113};

/* ---- 32-value blocks (§6.2-6.6, §6.14, §6.16) ---- */

static void deq_q8_0(const uint8_t *b, float *y)
{
    float d = f16_at(b);
    const int8_t *qs = (const int8_t *)(b + 2);
    for (int i = 0; i < 32; i++) y[i] = d * (float)qs[i];
}

static void deq_q4_0(const uint8_t *b, float *y)
{
    float d = f16_at(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)((qs[j] & 0x0F) - 8);
        y[j + 16] = d * (float)((qs[j] >> 4) - 8);
    }
}

static void deq_q4_1(const uint8_t *b, float *y)
{
    float d = f16_at(b), m = f16_at(b + 2);
    const uint8_t *qs = b + 4;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)(qs[j] & 0x0F) + m;
        y[j + 16] = d * (float)(qs[j] >> 4) + m;
    }
}

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void deq_q5_0(const uint8_t *b, float *y)
{
    float d = f16_at(b);
    uint32_t h = rd32(b + 2);
    const uint8_t *qs = b + 6;
    for (int j = 0; j < 16; j++) {
        int lo = (int)((qs[j] & 0x0F) | ((h >> j) & 1u) << 4);
        int hi = (int)((qs[j] >> 4) | ((h >> (j + 16)) & 1u) << 4);
        y[j] = d * (float)(lo - 16);
        y[j + 16] = d * (float)(hi - 16);
    }
}

static void deq_q5_1(const uint8_t *b, float *y)
{
    float d = f16_at(b), m = f16_at(b + 2);
    uint32_t h = rd32(b + 4);
    const uint8_t *qs = b + 8;
    for (int j = 0; j < 16; j++) {
        int lo = (int)((qs[j] & 0x0F) | ((h >> j) & 1u) << 4);
        int hi = (int)((qs[j] >> 4) | ((h >> (j + 16)) & 1u) << 4);
        y[j] = d * (float)lo + m;
        y[j + 16] = d * (float)hi + m;
    }
}

static void deq_iq4_nl(const uint8_t *b, float *y)
{
    float d = f16_at(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)iq4_codebook[qs[j] & 0x0F];
        y[j + 16] = d * (float)iq4_codebook[qs[j] >> 4];
    }
}

static void deq_mxfp4(const uint8_t *b, float *y)
{
    /* E2M1 values doubled (0, 0.5, 1, ... 6 -> 0, 1, 2, ... 12), so the scale
     * 2^(e-127) becomes 2^(e-128): every product is exact either way (§6.16). */
    static const int8_t e2m1x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    float d = vt_cpu_e8m0_half(b[0]);
    const uint8_t *qs = b + 1;
    for (int j = 0; j < 16; j++) {
        y[j] = (float)e2m1x2[qs[j] & 0x0F] * d;
        y[j + 16] = (float)e2m1x2[qs[j] >> 4] * d;
    }
}

/* ---- 256-value super-blocks (§6.7-6.12, §6.15) ---- */

static void deq_q2_k(const uint8_t *b, float *y)
{
    const uint8_t *scales = b, *qs = b + 16;
    float d = f16_at(b + 80), dmin = f16_at(b + 82);
    for (int i = 0; i < 256; i++) {
        int h = i / 128, j = (i % 128) / 32, l = i % 32;
        int q = (qs[32 * h + l] >> (2 * j)) & 3;
        uint8_t s = scales[i / 16];
        y[i] = d * (float)(s & 0x0F) * (float)q - dmin * (float)(s >> 4);
    }
}

/* Signed 6-bit scale k (0..15) of a Q3_K block, table of §6.8. */
static int q3_k_scale(const uint8_t *sb, int k)
{
    int low = k < 8 ? sb[k] & 0x0F : sb[k - 8] >> 4;
    int high = (sb[8 + (k & 3)] >> (2 * (k / 4))) & 3;
    return (low | high << 4) - 32;
}

static void deq_q3_k(const uint8_t *b, float *y)
{
    const uint8_t *hmask = b, *qs = b + 32, *sb = b + 96;
    float d = f16_at(b + 108);
    int sc[16];
    for (int k = 0; k < 16; k++) sc[k] = q3_k_scale(sb, k);
    for (int i = 0; i < 256; i++) {
        int h = i / 128, j = (i % 128) / 32, l = i % 32;
        int q2 = (qs[32 * h + l] >> (2 * j)) & 3;
        int hbit = (hmask[l] >> (4 * h + j)) & 1;
        int q = q2 - (hbit ? 0 : 4);
        y[i] = d * (float)sc[i / 16] * (float)q;
    }
}

/* Q4_K (qh NULL) and Q5_K (qh = the 5th bits): §6.10, §6.11. */
static void deq_q45_k(const uint8_t *b, const uint8_t *qh, const uint8_t *qs, float *y)
{
    float d = f16_at(b), dmin = f16_at(b + 2);
    const uint8_t *scales = b + 4;
    for (int s = 0; s < 8; s++) {
        int sc, m;
        vt_cpu_k4_scale_min(scales, s, &sc, &m);
        float ds = d * (float)sc, dm = dmin * (float)m;
        for (int l = 0; l < 32; l++) {
            uint8_t byte = qs[32 * (s / 2) + l];
            int q = s % 2 ? byte >> 4 : byte & 0x0F;
            if (qh) q |= ((qh[l] >> s) & 1) << 4;
            y[32 * s + l] = ds * (float)q - dm;
        }
    }
}

static void deq_q6_k(const uint8_t *b, float *y)
{
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *scales = (const int8_t *)(b + 192);
    float d = f16_at(b + 208);
    for (int i = 0; i < 256; i++) {
        int h = i / 128, r = i % 128, c = r / 32, l = r % 32;
        uint8_t lb = ql[64 * h + l + 32 * (c & 1)];
        int low = c < 2 ? lb & 0x0F : lb >> 4;
        int high = (qh[32 * h + l] >> (2 * c)) & 3;
        int q = (low | high << 4) - 32;
        y[i] = d * (float)scales[i / 16] * (float)q;
    }
}

static void deq_iq4_xs(const uint8_t *b, float *y)
{
    float d = f16_at(b);
    uint16_t scales_h = vt_cpu_rd16(b + 2);
    const uint8_t *scales_l = b + 4, *qs = b + 8;
    for (int s = 0; s < 8; s++) {
        int ls = ((scales_l[s / 2] >> (4 * (s % 2))) & 0x0F) | ((scales_h >> (2 * s)) & 3) << 4;
        float dl = d * (float)(ls - 32);
        for (int j = 0; j < 16; j++) {
            y[32 * s + j] = dl * (float)iq4_codebook[qs[16 * s + j] & 0x0F];
            y[32 * s + j + 16] = dl * (float)iq4_codebook[qs[16 * s + j] >> 4];
        }
    }
}

static void deq_q4_k(const uint8_t *b, float *y) { deq_q45_k(b, NULL, b + 16, y); }
static void deq_q5_k(const uint8_t *b, float *y) { deq_q45_k(b, b + 16, b + 48, y); }

/* One block of `type` at b into y (block_size values); NULL for an unhandled type. */
typedef vt_cpu_deq_block_fn deq_block_fn;

static deq_block_fn block_fn(uint32_t type)
{
    switch (type) {
    case VT_TYPE_Q4_0: return deq_q4_0;
    case VT_TYPE_Q4_1: return deq_q4_1;
    case VT_TYPE_Q5_0: return deq_q5_0;
    case VT_TYPE_Q5_1: return deq_q5_1;
    case VT_TYPE_Q8_0: return deq_q8_0;
    case VT_TYPE_Q2_K: return deq_q2_k;
    case VT_TYPE_Q3_K: return deq_q3_k;
    case VT_TYPE_Q4_K: return deq_q4_k;
    case VT_TYPE_Q5_K: return deq_q5_k;
    case VT_TYPE_Q6_K: return deq_q6_k;
    case VT_TYPE_IQ4_NL: return deq_iq4_nl;
    case VT_TYPE_IQ4_XS: return deq_iq4_xs;
    case VT_TYPE_MXFP4: return deq_mxfp4;
    default: return vt_cpu_lowbit_block_fn(type);
    }
}

int vt_cpu_dequant_handles(uint32_t type)
{
    return type == VT_TYPE_F32 || type == VT_TYPE_F16 || type == VT_TYPE_BF16 ||
           block_fn(type) != NULL;
}

vt_status vt_cpu_dequant_row(uint32_t type, const void *src, int64_t n, float *dst)
{
    const uint8_t *p = src;
    if (!vt_cpu_dequant_handles(type)) return VT_ERR_UNSUPPORTED;
    if (n < 0) return VT_ERR_INVALID_ARG;
    if (n == 0) return VT_OK;
    if (!src || !dst) return VT_ERR_INVALID_ARG;
    switch (type) {
    case VT_TYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        return VT_OK;
    case VT_TYPE_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = f16_at(p + 2 * i);
        return VT_OK;
    case VT_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] = vt_cpu_bf16_to_f32(vt_cpu_rd16(p + 2 * i));
        return VT_OK;
    default:
        break;
    }
    int64_t bs = vt_type_block_size(type), ts = vt_type_size(type);
    if (n % bs) return VT_ERR_INVALID_ARG;
    deq_block_fn f = block_fn(type);
    for (int64_t b = 0; b < n / bs; b++) f(p + b * ts, dst + b * bs);
    return VT_OK;
}
