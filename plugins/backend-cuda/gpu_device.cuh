/*
 * gpu_device.cuh - what the kernel files of backend-cuda / backend-rocm
 * (gpu_ops.cu, gpu_moe.cu) share: the argument-check and launch helpers, the
 * exact float32 decoding of every weight type (QT<T>, wload<T>, walign<T>)
 * and the warp/block reductions. Header-only (macros, static inline and
 * template functions), compiled by nvcc or hipcc.
 */
#ifndef VT_GPU_DEVICE_CUH
#define VT_GPU_DEVICE_CUH

#include <stdint.h>
#include <string.h>

#include "gpu_internal.h"
#include "vt/types.h"

/* ======================= host-side helpers ======================= */

#define CHECK(cond, ...)                                                                       \
    do {                                                                                       \
        if (!(cond)) return vt_gpu_fail(ctx->host, VT_ERR_INVALID_ARG, __VA_ARGS__);           \
    } while (0)

#define NEED_CTX(op)                                                                           \
    do {                                                                                       \
        if (!ctx) return vt_gpu_fail(NULL, VT_ERR_INVALID_ARG, op ": ctx is NULL");            \
    } while (0)

#define TRY(x)                                                                                 \
    do {                                                                                       \
        vt_status st_ = (x);                                                                   \
        if (st_ != VT_OK) return st_;                                                          \
    } while (0)

static inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Grid size for a grid-stride loop over n items of `threads`-thread blocks. */
static inline unsigned grid_for(int64_t n, unsigned threads)
{
    int64_t b = ceil_div(n, threads);
    if (b > 65535 * 8) b = 65535 * 8;
    return b > 0 ? (unsigned)b : 1u;
}

/* After a launch: the launch error, if any, named by op. */
static inline vt_status launched(vt_backend_ctx *ctx, const char *op)
{
    vt_gpu_xq_forget(ctx); /* the launch may have written the rounded activations' source */
    vt_gpu_error e = vt_gpu_get_last_error();
    if (e == vt_gpu_success) return VT_OK;
    return vt_gpu_fail(ctx->host, vt_gpu_status_of(e), "%s: kernel launch on device %d (%s) failed: %s",
                       op, ctx->device, ctx->name, vt_gpu_get_error_string(e));
}

/* launched() for a kernel that writes only [out, out + n_out floats) and
 * [out2, out2 + n_out2 floats) (out2 may be NULL): the rounding held before it
 * stays held when it does not overlap them (vt_gpu_xq_carry), so that an
 * element-wise op or the routing between two matmuls of one input does not
 * cost another rounding launch. */
static inline vt_status launched_into(vt_backend_ctx *ctx, const char *op, const void *out,
                                      int64_t n_out, const void *out2, int64_t n_out2)
{
    const vt_gpu_xq_mark m = vt_gpu_xq_note(ctx);
    vt_status st = launched(ctx, op);
    if (st == VT_OK) vt_gpu_xq_carry(ctx, m, out, n_out, out2, n_out2);
    return st;
}

/* ======================= weight decoding ======================= */

/*
 * Every weight type is decoded exactly to float32 (gguf.md §6), with the
 * arithmetic of backend-cpu's reference (plugins/backend-cpu/cpu_dequant.c):
 * integer codes and sub-scales are exact, every product of an fp16 scale, an
 * integer sub-scale and a code fits in float32's significand, and the one
 * rounding is the final addition of the min/offset term (Q4_1, Q5_1, Q2_K,
 * Q4_K, Q5_K), done once in the reference's order: d·q + m and
 * (d·sc)·q − dmin·m. Products and sums use __fmul_rn / __fadd_rn /
 * __fsub_rn, so no multiply-add is fused (it would give the same bits, since
 * the products are exact, but the code does not rely on it). The values
 * therefore equal vt_cpu_dequant_row's bit for bit (tests/test_cuda_quant.c
 * checks the quant-zoo fixture on the device).
 *
 * The decoders here are __host__ __device__, so that a host program can
 * compare them with the reference; on the host the same expressions are
 * plain float operations. (gpu_lowbit.cuh's are device-only: they read the
 * grids from device memory.)
 *
 * A quantised type T is described by QT<T>: QK values in BYTES bytes per
 * block, and the alignment ALIGN of the weight data it needs (the decoders
 * read 16-bit words from blocks of even size and 32-bit words from blocks
 * whose size is a multiple of 4, so a row base aligned to ALIGN keeps every
 * such word aligned; check_weight refuses a misaligned weight). Two entry
 * points:
 *   group(b, g, v, e0, e1): group g (0 .. QK/8-1) of the block at b as eight
 *     values: v[0..3] are elements e0..e0+3 of the block, v[4..7] elements
 *     e1..e1+3. The groups of a block are its QK/8 disjoint 8-value pieces
 *     whose bytes are adjacent: in the 32-value nibble formats (Q4_0, Q4_1,
 *     Q5_0, Q5_1, IQ4_NL, MXFP4, and IQ4_XS's sub-blocks) byte j holds
 *     elements j and j+16, so group g is bytes 4g..4g+3 = elements
 *     4g..4g+3 and 16+4g..16+4g+3; in Q8_0, the K-quants Q2_K..Q6_K and the
 *     low-bit types (gpu_lowbit.cuh) it is elements 8g..8g+7. Consecutive
 *     lanes decode consecutive groups, so a warp reads each block's bytes
 *     together.
 *   elem(b, i): element i (0 .. QK-1) of the block alone (the tiled GEMM
 *     loads single elements).
 */
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define QD_DEVICE 1
#else
#define QD_DEVICE 0
#endif
#define QD static __host__ __device__ __forceinline__

QD float q_mul(float a, float b)
{
#if QD_DEVICE
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
QD float q_add(float a, float b)
{
#if QD_DEVICE
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
QD float q_sub(float a, float b)
{
#if QD_DEVICE
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}
QD float q_from_bits(uint32_t u)
{
#if QD_DEVICE
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

/* Little-endian words of a block: ld16 at a 2-aligned address, ld32 at a
 * 4-aligned one, ld32_2 at a 2-aligned one (two halves), ld32_1 anywhere. */
QD uint32_t ld16(const uint8_t *p)
{
#if QD_DEVICE
    return *(const uint16_t *)p;
#else
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
#endif
}
QD uint32_t ld32(const uint8_t *p)
{
#if QD_DEVICE
    return *(const uint32_t *)p;
#else
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
#endif
}
QD uint32_t ld32_2(const uint8_t *p) { return ld16(p) | ld16(p + 2) << 16; }
QD uint32_t ld32_1(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
/* byte k (0..3) of w */
QD uint32_t byte_of(uint32_t w, int k) { return (w >> (8 * k)) & 0xFFu; }

/* binary16 bits -> float, exact (gguf.md §6.1). */
QD float f16_to_f32(uint32_t h)
{
    uint32_t s = (h & 0x8000u) << 16, e = (h >> 10) & 31u, m = h & 1023u;
    if (e == 0) { /* zero or subnormal: m · 2^-24, exact in float */
        float f = q_mul((float)m, 5.9604644775390625e-8f);
        return s ? -f : f;
    }
    uint32_t bits = e == 31u ? (s | 0x7f800000u | (m << 13)) : (s | ((e + 112u) << 23) | (m << 13));
    return q_from_bits(bits);
}

/* IQ4_NL / IQ4_XS codebook K[q], q = 0..15 (gguf.md §6.14): the int8 values
 * packed little-endian in two 64-bit constants, so no table is indexed. */
QD int iq4_value(uint32_t q)
{
    const uint64_t lo = 0xF6EADDCFBFAD9881ull; /* -127 -104 -83 -65 -49 -35 -22 -10 */
    const uint64_t hi = 0x7159453526190D01ull; /*    1   13  25  38  53  69  89 113 */
    return (int)(signed char)(uint8_t)((q < 8 ? lo : hi) >> (8 * (q & 7)));
}

/* MXFP4: E2M1 code q (0..15) doubled (0, 1, 2, 3, 4, 6, 8, 12 and their
 * negatives), and the E8M0 scale halved, 2^(e-128), as float bits with the
 * subnormal cases e = 0, 1 (gguf.md §6.16; the reference's e8m0_half). */
QD int mxfp4_value(uint32_t q)
{
    int m = (int)(uint8_t)(0x0C08060403020100ull >> (8 * (q & 7)));
    return q & 8 ? -m : m;
}
QD float e8m0_half(uint32_t e)
{
    return q_from_bits(e < 2 ? 0x00200000u << e : (e - 1) << 23);
}

/* Signed 6-bit scale k (0..15) of a Q3_K block, sb = its 12 scale bytes (§6.8). */
QD int q3_k_scale(const uint8_t *sb, int k)
{
    int low = k < 8 ? sb[k] & 0x0F : sb[k - 8] >> 4;
    int high = (sb[8 + (k & 3)] >> (2 * (k >> 2))) & 3;
    return (low | high << 4) - 32;
}

/* 6-bit scale and min of sub-block j (0..7) of Q4_K/Q5_K, q = the 12 packed
 * bytes (§6.9). */
QD void k4_scale_min(const uint8_t *q, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0F) | (q[j - 4] >> 6) << 4;
        *m = (q[j + 4] >> 4) | (q[j] >> 6) << 4;
    }
}

template <int T> struct QT {
    enum { quant = 0, QK = 1, ALIGN = 1 }; /* F32, F16, BF16: plain elements, see wload */
};

/* Q8_0 (§6.2): d f16 | qs int8[32]. */
template <> struct QT<VT_TYPE_Q8_0> {
    enum { quant = 1, QK = 32, BYTES = 34, ALIGN = 2 };
    QD void group(const uint8_t *b, int g, float v[8], int &e0, int &e1)
    {
        float d = f16_to_f32(ld16(b));
        uint32_t a = ld32_2(b + 2 + 8 * g), c = ld32_2(b + 6 + 8 * g);
        for (int k = 0; k < 4; k++) {
            v[k] = q_mul(d, (float)(signed char)byte_of(a, k));
            v[4 + k] = q_mul(d, (float)(signed char)byte_of(c, k));
        }
        e0 = 8 * g;
        e1 = 8 * g + 4;
    }
    QD float elem(const uint8_t *b, int i)
    {
        return q_mul(f16_to_f32(ld16(b)), (float)(signed char)b[2 + i]);
    }
};

/* Q4_0 (§6.3): d f16 | qs u8[16]; byte j: element j (low), j+16 (high). */
template <> struct QT<VT_TYPE_Q4_0> {
    enum { quant = 1, QK = 32, BYTES = 18, ALIGN = 2 };
    QD void group(const uint8_t *b, int g, float v[8], int &e0, int &e1)
    {
        float d = f16_to_f32(ld16(b));
        uint32_t q = ld32_2(b + 2 + 4 * g);
        for (int k = 0; k < 4; k++) {
            uint32_t x = byte_of(q, k);
            v[k] = q_mul(d, (float)((int)(x & 0x0F) - 8));
            v[4 + k] = q_mul(d, (float)((int)(x >> 4) - 8));
        }
        e0 = 4 * g;
        e1 = 16 + 4 * g;
    }
    QD float elem(const uint8_t *b, int i)
    {
        uint32_t x = b[2 + (i & 15)];
        int q = (int)(i < 16 ? x & 0x0F : x >> 4);
        return q_mul(f16_to_f32(ld16(b)), (float)(q - 8));
    }
};

/* Q4_1 (§6.4): d f16 | m f16 | qs u8[16]; d·q + m. */
template <> struct QT<VT_TYPE_Q4_1> {
    enum { quant = 1, QK = 32, BYTES = 20, ALIGN = 4 };
    QD void group(const uint8_t *b, int g, float v[8], int &e0, int &e1)
    {
        uint32_t dm = ld32(b), q = ld32(b + 4 + 4 * g);
        float d = f16_to_f32(dm & 0xFFFFu), m = f16_to_f32(dm >> 16);
        for (int k = 0; k < 4; k++) {
            uint32_t x = byte_of(q, k);
            v[k] = q_add(q_mul(d, (float)(x & 0x0F)), m);
            v[4 + k] = q_add(q_mul(d, (float)(x >> 4)), m);
        }
        e0 = 4 * g;
        e1 = 16 + 4 * g;
    }
    QD float elem(const uint8_t *b, int i)
    {
        uint32_t x = b[4 + (i & 15)];
        uint32_t q = i < 16 ? x & 0x0F : x >> 4;
        return q_add(q_mul(f16_to_f32(ld16(b)), (float)q), f16_to_f32(ld16(b + 2)));
    }
};

/* Q5_0 (§6.5): d f16 | qh u32 | qs u8[16]; element i's 5th bit is bit i of qh. */
template <> struct QT<VT_TYPE_Q5_0> {
    enum { quant = 1, QK = 32, BYTES = 22, ALIGN = 2 };
    QD void group(const uint8_t *b, int g, float v[8], int &e0, int &e1)
    {
        float d = f16_to_f32(ld16(b));
        uint32_t h = ld32_2(b + 2), q = ld32_2(b + 6 + 4 * g);
        for (int k = 0; k < 4; k++) {
            int j = 4 * g + k;
            uint32_t x = byte_of(q, k);
            int lo = (int)((x & 0x0F) | ((h >> j) & 1u) << 4);
            int hi = (int)((x >> 4) | ((h >> (j + 16)) & 1u) << 4);
            v[k] = q_mul(d, (float)(lo - 16));
            v[4 + k] = q_mul(d, (float)(hi - 16));
        }
        e0 = 4 * g;
        e1 = 16 + 4 * g;
    }
    QD float elem(const uint8_t *b, int i)
    {
        uint32_t x = b[6 + (i & 15)];
        int q = (int)((i < 16 ? x & 0x0F : x >> 4) | ((ld32_2(b + 2) >> i) & 1u) << 4);
        return q_mul(f16_to_f32(ld16(b)), (float)(q - 16));
    }
};

/* Q5_1 (§6.6): d f16 | m f16 | qh u32 | qs u8[16]; d·q + m. */
template <> struct QT<VT_TYPE_Q5_1> {
    enum { quant = 1, QK = 32, BYTES = 24, ALIGN = 4 };
    QD void group(const uint8_t *b, int g, float v[8], int &e0, int &e1)
    {
        uint32_t dm = ld32(b), h = ld32(b + 4), q = ld32(b + 8 + 4 * g);
        float d = f16_to_f32(dm & 0xFFFFu), m = f16_to_f32(dm >> 16);
        for (int k = 0; k < 4; k++) {
            int j = 4 * g + k;
            uint32_t x = byte_of(q, k);
            uint32_t lo = (x & 0x0F) | ((h >> j) & 1u) << 4;
            uint32_t hi = (x >> 4) | ((h >> (j + 16)) & 1u) << 4;
            v[k] = q_add(q_mul(d, (float)lo), m);
            v[4 + k] = q_add(q_mul(d, (float)hi), m);
        }
        e0 = 4 * g;
        e1 = 16 + 4 * g;
    }
    QD float elem(const uint8_t *b, int i)
    {
        uint32_t x = b[8 + (i & 15)];
        uint32_t q = (i < 16 ? x & 0x0F : x >> 4) | ((ld32(b + 4) >> i) & 1u) << 4;
        return q_add(q_mul(f16_to_f32(ld16(b)), (float)q), f16_to_f32(ld16(b + 2)));
    }
};

/* IQ4_NL (§6.14): d f16 | qs u8[16]; d·K[q]. */
template <> struct QT<VT_TYPE_IQ4_NL> {
    enum { quant = 1, QK = 32, BYTES = 18, ALIGN = 2 };
    QD void group(const uint8_t *b, int g, float v[8], int &e0, int &e1)
    {
        float d = f16_to_f32(ld16(b));
        uint32_t q = ld32_2(b + 2 + 4 * g);
        for (int k = 0; k < 4; k++) {
            uint32_t x = byte_of(q, k);
            v[k] = q_mul(d, (float)iq4_value(x & 0x0F));
            v[4 + k] = q_mul(d, (float)iq4_value(x >> 4));
        }
        e0 = 4 * g;
        e1 = 16 + 4 * g;
    }
    QD float elem(const uint8_t *b, int i)
    {
        uint32_t x = b[2 + (i & 15)];
        return q_mul(f16_to_f32(ld16(b)), (float)iq4_value(i < 16 ? x & 0x0F : x >> 4));
    }
};

/* MXFP4 (§6.16): e u8 (E8M0) | qs u8[16] (E2M1); 17-byte blocks: byte loads. */
template <> struct QT<VT_TYPE_MXFP4> {
    enum { quant = 1, QK = 32, BYTES = 17, ALIGN = 1 };
    QD void group(const uint8_t *b, int g, float v[8], int &e0, int &e1)
    {
        float d = e8m0_half(b[0]);
        uint32_t q = ld32_1(b + 1 + 4 * g);
        for (int k = 0; k < 4; k++) {
            uint32_t x = byte_of(q, k);
            v[k] = q_mul((float)mxfp4_value(x & 0x0F), d);
            v[4 + k] = q_mul((float)mxfp4_value(x >> 4), d);
        }
        e0 = 4 * g;
        e1 = 16 + 4 * g;
    }
    QD float elem(const uint8_t *b, int i)
    {
        uint32_t x = b[1 + (i & 15)];
        return q_mul((float)mxfp4_value(i < 16 ? x & 0x0F : x >> 4), e8m0_half(b[0]));
    }
};

/* Q2_K (§6.7): scales u8[16] | qs u8[64] | d f16 | dmin f16. Element i:
 * h = i/128, j = (i%128)/32, l = i%32, q = (qs[32h+l] >> 2j) & 3,
 * (d·sc)·q − dmin·m with sc, m the nibbles of scales[i/16]. Group g =
 * elements 8g..8g+7: h = g/16, j = (g/4)%4, l = 8(g%4) .., scales[g/2]. */
template <> struct QT<VT_TYPE_Q2_K> {
    enum { quant = 1, QK = 256, BYTES = 84, ALIGN = 4 };
    QD void group(const uint8_t *b, int g, float v[8], int &e0, int &e1)
    {
        int h = g >> 4, j = (g >> 2) & 3, l0 = 8 * (g & 3);
        uint32_t dd = ld32(b + 80), s = b[g >> 1];
        float ds = q_mul(f16_to_f32(dd & 0xFFFFu), (float)(s & 0x0F));
        float dm = q_mul(f16_to_f32(dd >> 16), (float)(s >> 4));
        uint32_t q0 = ld32(b + 16 + 32 * h + l0), q1 = ld32(b + 20 + 32 * h + l0);
        for (int k = 0; k < 4; k++) {
            v[k] = q_sub(q_mul(ds, (float)((q0 >> (8 * k + 2 * j)) & 3u)), dm);
            v[4 + k] = q_sub(q_mul(ds, (float)((q1 >> (8 * k + 2 * j)) & 3u)), dm);
        }
        e0 = 8 * g;
        e1 = 8 * g + 4;
    }
    QD float elem(const uint8_t *b, int i)
    {
        int h = i >> 7, j = (i >> 5) & 3, l = i & 31;
        uint32_t q = (b[16 + 32 * h + l] >> (2 * j)) & 3u, s = b[i >> 4];
        float ds = q_mul(f16_to_f32(ld16(b + 80)), (float)(s & 0x0F));
        float dm = q_mul(f16_to_f32(ld16(b + 82)), (float)(s >> 4));
        return q_sub(q_mul(ds, (float)q), dm);
    }
};

/* Q3_K (§6.8): hmask u8[32] | qs u8[64] | scales u8[12] | d f16. Element i:
 * h, j, l as Q2_K, q = ((qs[32h+l] >> 2j) & 3) − (bit 4h+j of hmask[l] ? 0 : 4),
 * (d·sc[i/16])·q. */
template <> struct QT<VT_TYPE_Q3_K> {
    enum { quant = 1, QK = 256, BYTES = 110, ALIGN = 2 };
    QD void group(const uint8_t *b, int g, float v[8], int &e0, int &e1)
    {
        int h = g >> 4, j = (g >> 2) & 3, l0 = 8 * (g & 3), hs = 4 * h + j;
        float dsc = q_mul(f16_to_f32(ld16(b + 108)), (float)q3_k_scale(b + 96, g >> 1));
        uint32_t q0 = ld32_2(b + 32 + 32 * h + l0), q1 = ld32_2(b + 36 + 32 * h + l0);
        uint32_t m0 = ld32_2(b + l0), m1 = ld32_2(b + l0 + 4);
        for (int k = 0; k < 4; k++) {
            int a = (int)((q0 >> (8 * k + 2 * j)) & 3u) - ((m0 >> (8 * k + hs)) & 1u ? 0 : 4);
            int c = (int)((q1 >> (8 * k + 2 * j)) & 3u) - ((m1 >> (8 * k + hs)) & 1u ? 0 : 4);
            v[k] = q_mul(dsc, (float)a);
            v[4 + k] = q_mul(dsc, (float)c);
        }
        e0 = 8 * g;
        e1 = 8 * g + 4;
    }
    QD float elem(const uint8_t *b, int i)
    {
        int h = i >> 7, j = (i >> 5) & 3, l = i & 31;
        int q = (int)((b[32 + 32 * h + l] >> (2 * j)) & 3u) - ((b[l] >> (4 * h + j)) & 1u ? 0 : 4);
        float dsc = q_mul(f16_to_f32(ld16(b + 108)), (float)q3_k_scale(b + 96, i >> 4));
        return q_mul(dsc, (float)q);
    }
};

/* Q4_K (§6.10) and Q5_K (§6.11): d f16 | dmin f16 | scales u8[12] |
 * (Q5_K: qh u8[32] |) qs u8[128]. Sub-block s = i/32, l = i%32: low 4 bits
 * from qs[32(s/2)+l] (low nibble for even s, high for odd), Q5_K's 5th bit is
 * bit s of qh[l]; (d·sc[s])·q − dmin·m[s]. Group g: s = g/4, l = 8(g%4) ... */
template <int QH> struct QT45 {
    enum { QS = QH ? 48 : 16 };
    QD void group(const uint8_t *b, int g, float v[8], int &e0, int &e1)
    {
        int s = g >> 2, l0 = 8 * (g & 3), sh = 4 * (s & 1), sc, m;
        k4_scale_min(b + 4, s, &sc, &m);
        uint32_t dd = ld32(b);
        float ds = q_mul(f16_to_f32(dd & 0xFFFFu), (float)sc);
        float dm = q_mul(f16_to_f32(dd >> 16), (float)m);
        uint32_t q0 = ld32(b + QS + 32 * (s >> 1) + l0), q1 = ld32(b + QS + 4 + 32 * (s >> 1) + l0);
        uint32_t h0 = QH ? ld32(b + 16 + l0) : 0u, h1 = QH ? ld32(b + 20 + l0) : 0u;
        for (int k = 0; k < 4; k++) {
            uint32_t a = ((q0 >> (8 * k + sh)) & 15u) | ((h0 >> (8 * k + s)) & 1u) << 4;
            uint32_t c = ((q1 >> (8 * k + sh)) & 15u) | ((h1 >> (8 * k + s)) & 1u) << 4;
            v[k] = q_sub(q_mul(ds, (float)a), dm);
            v[4 + k] = q_sub(q_mul(ds, (float)c), dm);
        }
        e0 = 8 * g;
        e1 = 8 * g + 4;
    }
    QD float elem(const uint8_t *b, int i)
    {
        int s = i >> 5, l = i & 31, sc, m;
        k4_scale_min(b + 4, s, &sc, &m);
        uint32_t x = b[QS + 32 * (s >> 1) + l];
        uint32_t q = (s & 1 ? x >> 4 : x & 0x0F) | (QH ? ((uint32_t)(b[16 + l] >> s) & 1u) << 4 : 0u);
        float ds = q_mul(f16_to_f32(ld16(b)), (float)sc);
        float dm = q_mul(f16_to_f32(ld16(b + 2)), (float)m);
        return q_sub(q_mul(ds, (float)q), dm);
    }
};
template <> struct QT<VT_TYPE_Q4_K> : QT45<0> {
    enum { quant = 1, QK = 256, BYTES = 144, ALIGN = 4 };
};
template <> struct QT<VT_TYPE_Q5_K> : QT45<1> {
    enum { quant = 1, QK = 256, BYTES = 176, ALIGN = 4 };
};

/* Q6_K (§6.12): ql u8[128] | qh u8[64] | scales int8[16] | d f16. Element i:
 * h = i/128, c = (i%128)/32, l = i%32; low 4 bits from ql[64h + l + 32(c&1)]
 * (low nibble for c < 2), high 2 bits (qh[32h+l] >> 2c) & 3, q − 32;
 * (d·scales[i/16])·q. */
template <> struct QT<VT_TYPE_Q6_K> {
    enum { quant = 1, QK = 256, BYTES = 210, ALIGN = 2 };
    QD void group(const uint8_t *b, int g, float v[8], int &e0, int &e1)
    {
        int h = g >> 4, c = (g >> 2) & 3, l0 = 8 * (g & 3), ls = c < 2 ? 0 : 4;
        float dsc = q_mul(f16_to_f32(ld16(b + 208)), (float)(signed char)b[192 + (g >> 1)]);
        const uint8_t *ql = b + 64 * h + 32 * (c & 1) + l0, *qh = b + 128 + 32 * h + l0;
        uint32_t a0 = ld32_2(ql), a1 = ld32_2(ql + 4), b0 = ld32_2(qh), b1 = ld32_2(qh + 4);
        for (int k = 0; k < 4; k++) {
            int x = (int)(((a0 >> (8 * k + ls)) & 15u) | ((b0 >> (8 * k + 2 * c)) & 3u) << 4) - 32;
            int y = (int)(((a1 >> (8 * k + ls)) & 15u) | ((b1 >> (8 * k + 2 * c)) & 3u) << 4) - 32;
            v[k] = q_mul(dsc, (float)x);
            v[4 + k] = q_mul(dsc, (float)y);
        }
        e0 = 8 * g;
        e1 = 8 * g + 4;
    }
    QD float elem(const uint8_t *b, int i)
    {
        int h = i >> 7, c = (i >> 5) & 3, l = i & 31;
        uint32_t lb = b[64 * h + l + 32 * (c & 1)];
        uint32_t low = c < 2 ? lb & 0x0F : lb >> 4, high = (b[128 + 32 * h + l] >> (2 * c)) & 3u;
        float dsc = q_mul(f16_to_f32(ld16(b + 208)), (float)(signed char)b[192 + (i >> 4)]);
        return q_mul(dsc, (float)((int)(low | high << 4) - 32));
    }
};

/* IQ4_XS (§6.15): d f16 | scales_h u16 | scales_l u8[4] | qs u8[128].
 * Sub-block s (32 values) has ls = low nibble s%2 of scales_l[s/2] | bits
 * 2s..2s+1 of scales_h << 4, dl = d·(ls − 32), and bytes qs[16s .. 16s+15]
 * as an IQ4_NL block: (d·(ls−32))·K[q]. Group g: s = g/4, bytes 16s + 4(g%4) ... */
template <> struct QT<VT_TYPE_IQ4_XS> {
    enum { quant = 1, QK = 256, BYTES = 136, ALIGN = 4 };
    QD float sub_scale(const uint8_t *b, int s)
    {
        uint32_t hd = ld32(b);
        int ls = (int)(((b[4 + (s >> 1)] >> (4 * (s & 1))) & 0x0F) | ((hd >> (16 + 2 * s)) & 3u) << 4);
        return q_mul(f16_to_f32(hd & 0xFFFFu), (float)(ls - 32));
    }
    QD void group(const uint8_t *b, int g, float v[8], int &e0, int &e1)
    {
        int s = g >> 2, p = g & 3;
        float dl = sub_scale(b, s);
        uint32_t q = ld32(b + 8 + 16 * s + 4 * p);
        for (int k = 0; k < 4; k++) {
            uint32_t x = byte_of(q, k);
            v[k] = q_mul(dl, (float)iq4_value(x & 0x0F));
            v[4 + k] = q_mul(dl, (float)iq4_value(x >> 4));
        }
        e0 = 32 * s + 4 * p;
        e1 = 32 * s + 16 + 4 * p;
    }
    QD float elem(const uint8_t *b, int i)
    {
        int s = i >> 5, j = i & 31;
        uint32_t x = b[8 + 16 * s + (j & 15)];
        return q_mul(sub_scale(b, s), (float)iq4_value(j < 16 ? x & 0x0F : x >> 4));
    }
};

/*
 * The int8 rounding of activations in blocks of 32 values, as backend-cpu's
 * quantize and llama.cpp's q8_0/q8_1 do it: d = max|x| / 127 (0 for a block
 * whose max is below 127·FLT_MIN), q = x·(1/d) rounded to nearest even and
 * clamped to ±127. xq_scale takes the bits of the block's max |x| (the order
 * of non-negative floats; a NaN or an infinity is above every finite value)
 * and gives d and 1/d; a non-finite block gets d = NaN and 1/d = 0, so its
 * products come out NaN. The one-token kernels (gpu_qdot.cuh) take q and d;
 * the prefill GEMMs take x̂ = d·q (xq_round), the same rounded activations.
 */
static __device__ __forceinline__ void xq_scale(uint32_t max_bits, float &d, float &id)
{
    const float m = __uint_as_float(max_bits);
    d = m >= 127.0f * 1.17549435e-38f ? m / 127.0f : 0.0f;
    id = d > 0.0f ? 1.0f / d : 0.0f;
    if (max_bits > 0x7f7fffffu) { /* above FLT_MAX: NaN or infinite */
        d = __int_as_float(0x7fc00000);
        id = 0.0f;
    }
}
static __device__ __forceinline__ int xq_code(float v, float id)
{
    int q = __float2int_rn(v * id);
    if (!(id > 0.0f)) q = 0; /* a zero or non-finite block (v·0 is NaN for an infinite v) */
    return q > 127 ? 127 : q < -127 ? -127 : q;
}
static __device__ __forceinline__ float xq_round(float v, float d, float id)
{
    return d * (float)xq_code(v, id);
}

/* The low-bit types (IQ1-IQ3, TQ1_0, TQ2_0, NVFP4, Q1_0, Q2_0): group g is
 * elements 8g .. 8g+7 of the block, as in the K-quants. */
#include "gpu_lowbit.cuh"

/* Element i of a weight row of type T, exact in float32 (the tiled GEMM's
 * loads): F32, F16 and BF16 directly (§6.1), block types through QT<T>::elem. */
template <int T> static __device__ __forceinline__ float wload(const uint8_t *row, int64_t i)
{
    return QT<T>::elem(row + (i / QT<T>::QK) * QT<T>::BYTES, (int)(i % QT<T>::QK));
}
template <> __device__ __forceinline__ float wload<VT_TYPE_F32>(const uint8_t *row, int64_t i)
{
    return ((const float *)row)[i];
}
template <> __device__ __forceinline__ float wload<VT_TYPE_F16>(const uint8_t *row, int64_t i)
{
    return f16_to_f32(((const unsigned short *)row)[i]);
}
template <> __device__ __forceinline__ float wload<VT_TYPE_BF16>(const uint8_t *row, int64_t i)
{
    return __uint_as_float((unsigned)((const unsigned short *)row)[i] << 16);
}

/* Alignment of the weight data the kernels of type T need (see QT). */
template <int T> static constexpr int walign()
{
    return T == VT_TYPE_F32 ? 4 : T == VT_TYPE_F16 || T == VT_TYPE_BF16 ? 2 : (int)QT<T>::ALIGN;
}

/* 8 values of a row from input column 8G on: v[0..3] are columns e0..e0+3,
 * v[4..7] columns e1..e1+3 (row-relative). Block types through QT<T>::group;
 * F32/F16/BF16 8 consecutive elements. n_in is a multiple of 8. */
template <int T>
static __device__ __forceinline__ void dec8(const uint8_t *row, int64_t G, float v[8], int64_t &e0,
                                            int64_t &e1)
{
    if constexpr (QT<T>::quant) {
        const int GB = QT<T>::QK / 8;
        int64_t blk = G / GB;
        int a, b;
        QT<T>::group(row + blk * QT<T>::BYTES, (int)(G % GB), v, a, b);
        e0 = blk * QT<T>::QK + a;
        e1 = blk * QT<T>::QK + b;
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = wload<T>(row, 8 * G + j);
        e0 = 8 * G;
        e1 = 8 * G + 4;
    }
}

/* ======================= activations ======================= */

/* op(x) in double, rounded once: vt_cpu_unary_ref's formulas (vt/backend.h
 * vt_unary_op; GELU as x / (1 + e^(-2u))). */
static __device__ __forceinline__ float unary_ref(int op, float xf)
{
    double x = xf;
    switch (op) {
    case VT_UNARY_SILU: return (float)(x / (1.0 + exp(-x)));
    case VT_UNARY_SIGMOID: return (float)(1.0 / (1.0 + exp(-x)));
    case VT_UNARY_SOFTPLUS: return xf > 20.0f ? xf : (float)log1p(exp(x));
    case VT_UNARY_GELU_TANH: {
        const double c = 0.79788456080286535588; /* sqrt(2/pi) */
        double u = c * (x + 0.044715 * x * x * x);
        return (float)(x / (1.0 + exp(-2.0 * u)));
    }
    case VT_UNARY_EXP: return (float)exp(x);
    case VT_UNARY_TANH: return (float)tanh(x);
    }
    return xf;
}

/* act(g) · u: the activation in double rounded once, then one float product */
static __device__ __forceinline__ float moe_act(int act, float g, float u)
{
    return __fmul_rn(unary_ref(act == VT_MOE_ACT_SILU ? VT_UNARY_SILU : VT_UNARY_GELU_TANH, g), u);
}

/* The expert whose tiles contain tile `tile` of a grouped product (tiles
 * from gpu_moe.cu's k_moe_sort: tiles[e] the first tile of expert e,
 * ascending, tiles[nx] the total), or -1 past the end. */
static __device__ __forceinline__ int tile_expert(const int32_t *tiles, int nx, int tile)
{
    if (tile >= tiles[nx]) return -1;
    int lo = 0, hi = nx - 1; /* last e with tiles[e] <= tile and a non-empty run */
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (tiles[mid] <= tile) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* ======================= reductions ======================= */

static __device__ __forceinline__ float warp_sum(float v)
{
    for (int m = 16; m > 0; m >>= 1) v += VT_GPU_SHFL_XOR(v, m);
    return v;
}

static __device__ __forceinline__ double warp_sum_d(double v)
{
    for (int m = 16; m > 0; m >>= 1) v += VT_GPU_SHFL_XOR(v, m);
    return v;
}

/* Sum of v over the block (blockDim.x a multiple of 32, at most 1024);
 * every thread gets the result. */
static __device__ inline double block_sum_d(double v)
{
    __shared__ double part[32];
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum_d(v);
    __syncthreads(); /* part[] may still be read from a previous call */
    if (lane == 0) part[wid] = v;
    __syncthreads();
    double s = 0.0;
    for (int i = 0; i < nw; i++) s += part[i];
    return s;
}

#endif
