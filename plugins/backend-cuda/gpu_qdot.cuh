/*
 * gpu_qdot.cuh - the integer dot products of backend-cuda's one-token
 * matvecs (gpu_matvec.cu: mat_mul with one token, and moe_ffn's decode
 * kernels), for nvcc and hipcc.
 *
 * The scheme is backend-cpu's (plugins/backend-cpu/cpu_internal.h,
 * vt_cpu_xq; llama.cpp's q8_1 activations with MMVQ-style block dots):
 *  - a token's activations are rounded to int8 in blocks of 32 values:
 *    d_b = max_b|x| / 127 (0 when that max is below 127·FLT_MIN, NaN when the
 *    block holds a NaN or an infinity), q_i = round-to-nearest-even(x_i ·
 *    (1/d_b)) clamped to [-127, 127], and s_b = d_b · Σ q_i for the min terms;
 *    so |x − d·q| <= d/2 (+ the float rounding of x·(1/d));
 *  - each weight block is decoded in registers to its integer codes (never
 *    to float), the products are summed exactly in int32 (dp4a: four int8
 *    products per instruction), and the block's scales are applied once in
 *    float32.
 * One "unit" is what one thread reads in one step: 64 values (a quarter of a
 * 256-value super-block) for Q4_K, Q5_K and Q6_K, one 32-value block for Q8_0,
 * Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL and the low-bit types (gpu_lowbit.cuh; four
 * 8-value groups). Qi<T>::dot(row, u, xq, xd, xs) returns unit u's Σ w·x̂ in float.
 *
 * Layouts (gguf.md §6): Q8_0 d f16 | qs int8[32]; Q5_0 d f16 | qh u32 |
 * qs u8[16] (byte j: element j low nibble, j+16 high, fifth bits in qh);
 * Q4_K d, dmin f16 | scales u8[12] | qs u8[128]; Q6_K ql u8[128] | qh u8[64] |
 * scales int8[16] | d f16; the others beside their Qi below. Q4_1, Q5_1,
 * Q4_K and Q5_K blocks (20, 24, 144, 176 bytes) are read as 32-bit words
 * (4-byte aligned data, as every kernel of those types needs); Q8_0, Q4_0,
 * Q5_0, IQ4_NL and Q6_K blocks sit at 2-byte boundaries and are read as
 * aligned 32-bit words joined by a funnel shift (qd_words), never past their
 * block; the low-bit types through their QT<T>::igroup byte and 16-bit loads.
 */
#ifndef VT_GPU_QDOT_CUH
#define VT_GPU_QDOT_CUH

#include <float.h>

#include "gpu_device.cuh"

/* int8 x4 dot product with accumulate: c + Σ_k a_k·b_k (signed bytes) */
static __device__ __forceinline__ int qd_dp4a(int a, int b, int c)
{
#if defined(VT_GPU_HIP)
    for (int k = 0; k < 4; k++)
        c += (int)(signed char)(uint8_t)(a >> (8 * k)) * (int)(signed char)(uint8_t)(b >> (8 * k));
    return c;
#else
    return __dp4a(a, b, c);
#endif
}

/* bytes of a word minus 32 (Q6_K) or 16 (Q5_0), each byte 0..63 / 0..31:
 * the high bit set first, so that no byte borrows from the next */
static __device__ __forceinline__ uint32_t qd_sub_bytes(uint32_t v, uint32_t k4)
{
    return ((v | 0x80808080u) - k4) ^ 0x80808080u;
}

/* (hi:lo) >> sh, sh in {0, 16} (a funnel shift) */
static __device__ __forceinline__ uint32_t qd_fsh(uint32_t lo, uint32_t hi, int sh)
{
    return (uint32_t)((((uint64_t)hi << 32) | lo) >> sh);
}

/* N little-endian words of the 4N bytes at 2-aligned p, reading aligned words
 * only and none past p + 4N: an unaligned p takes the aligned words from
 * p − 2 on and the last two bytes as a 16-bit load (predicated, no branch) */
template <int N>
static __device__ __forceinline__ void qd_words(const uint8_t *p, uint32_t out[N])
{
    const uintptr_t ip = (uintptr_t)p;
    const int mis = (int)(ip & 2u);
    const uint32_t *a = (const uint32_t *)(ip & ~(uintptr_t)3);
    uint32_t w[N];
#pragma unroll
    for (int i = 0; i < N; i++) w[i] = a[i];
    const uint32_t last = mis ? (uint32_t)*(const uint16_t *)(p + 4 * N - 2) : 0u;
#pragma unroll
    for (int i = 0; i < N; i++) out[i] = qd_fsh(w[i], i + 1 < N ? w[i + 1] : last, mis ? 16 : 0);
}

/* Spread bits 0..3 of t to bit 4 of bytes 0..3 (Q5_0's fifth bits). */
static __device__ __forceinline__ uint32_t qd_bit4(uint32_t t)
{
    return ((t & 15u) * 0x00204081u & 0x01010101u) << 4;
}

/* One 32-value block by one warp: lane l holds value v; q[l] its code, and
 * lane 0 writes *d and *s (d · Σ q). */
/* The warp's max of a >= 0 (as bits: the order of non-negative floats, a NaN
 * or infinity above every finite value) and Σ of an int: one instruction each
 * where the device has warp reductions (sm_80 on), a shuffle tree elsewhere. */
static __device__ __forceinline__ uint32_t qd_warp_max_bits(uint32_t b)
{
#if !defined(VT_GPU_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    return __reduce_max_sync(0xffffffffu, b);
#else
    for (int o = 16; o > 0; o >>= 1) {
        const uint32_t ob = (uint32_t)VT_GPU_SHFL_XOR((int)b, o);
        b = ob > b ? ob : b;
    }
    return b;
#endif
}
static __device__ __forceinline__ int qd_warp_sum_i(int v)
{
#if !defined(VT_GPU_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    return __reduce_add_sync(0xffffffffu, v);
#else
    for (int o = 16; o > 0; o >>= 1) v += VT_GPU_SHFL_XOR(v, o);
    return v;
#endif
}

/* One 32-value block rounded by a warp, lane i holding value i: the block's
 * max |v| (a NaN or an infinity anywhere makes the block bad), d, q, s. */
static __device__ __forceinline__ void qd_quantize32(float v, int8_t *q, float *d, float *s)
{
    const int lane = threadIdx.x & 31;
    float db, id;
    xq_scale(qd_warp_max_bits(__float_as_uint(fabsf(v))), db, id);
    const int qi = xq_code(v, id);
    q[lane] = (int8_t)qi;
    const int sum = qd_warp_sum_i(qi);
    if (lane == 0) {
        *d = db;
        *s = db * (float)sum;
    }
}

/* Round n values of x (n a multiple of 32) to int8 blocks into q, d, s (shared
 * memory), by the whole thread block; the caller synchronises after. Each
 * warp loads QD_BATCH blocks' values before it reduces any, so that their
 * global loads are in flight together. */
#define QD_BATCH 8
static __device__ __forceinline__ void qd_quantize(const float *__restrict__ x, int n, int8_t *q,
                                                   float *d, float *s)
{
    const int lane = threadIdx.x & 31, nw = blockDim.x >> 5, nb = n / 32;
    for (int b0 = threadIdx.x >> 5; b0 < nb; b0 += nw * QD_BATCH) {
        float v[QD_BATCH];
#pragma unroll
        for (int k = 0; k < QD_BATCH; k++) {
            const int b = b0 + k * nw;
            v[k] = b < nb ? x[32 * b + lane] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < QD_BATCH; k++) {
            const int b = b0 + k * nw;
            if (b < nb) qd_quantize32(v[k], q + 32 * b, d + b, s + b); /* uniform per warp */
        }
    }
}

/* Shared-memory bytes of the quantised activations of n values per row, rows rows. */
static inline size_t qd_smem_bytes(int64_t n, int64_t rows)
{
    return (size_t)rows * ((size_t)n + 8 * (size_t)(n / 32));
}

template <int T> struct Qi {
    enum { ok = 0, UNIT = 32 };
};

/* Q8_0: unit = block u, 32 values */
template <> struct Qi<VT_TYPE_Q8_0> {
    enum { ok = 1, UNIT = 32 };
    static __device__ __forceinline__ float dot(const uint8_t *row, int u, const int8_t *xq,
                                                const float *xd, const float *xs)
    {
        (void)xs;
        const uint8_t *b = row + 34 * (size_t)u;
        uint32_t w[8];
        qd_words<8>(b + 2, w);
        const float d = f16_to_f32(ld16(b));
        const int4 *X = (const int4 *)(xq + 32 * u);
        const int4 x0 = X[0], x1 = X[1];
        int acc = 0;
        acc = qd_dp4a((int)w[0], x0.x, acc);
        acc = qd_dp4a((int)w[1], x0.y, acc);
        acc = qd_dp4a((int)w[2], x0.z, acc);
        acc = qd_dp4a((int)w[3], x0.w, acc);
        acc = qd_dp4a((int)w[4], x1.x, acc);
        acc = qd_dp4a((int)w[5], x1.y, acc);
        acc = qd_dp4a((int)w[6], x1.z, acc);
        acc = qd_dp4a((int)w[7], x1.w, acc);
        return d * xd[u] * (float)acc;
    }
};

/* Q5_0: unit = block u, 32 values, codes q − 16 */
template <> struct Qi<VT_TYPE_Q5_0> {
    enum { ok = 1, UNIT = 32 };
    static __device__ __forceinline__ float dot(const uint8_t *row, int u, const int8_t *xq,
                                                const float *xd, const float *xs)
    {
        (void)xs;
        const uint8_t *b = row + 22 * (size_t)u;
        uint32_t w[5]; /* qh | qs[0..15] */
        qd_words<5>(b + 2, w);
        const float d = f16_to_f32(ld16(b));
        const int *X = (const int *)(xq + 32 * u);
        int acc = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t qs = w[1 + i];
            const uint32_t lo = (qs & 0x0F0F0F0Fu) | qd_bit4(w[0] >> (4 * i));
            const uint32_t hi = ((qs >> 4) & 0x0F0F0F0Fu) | qd_bit4(w[0] >> (16 + 4 * i));
            acc = qd_dp4a((int)qd_sub_bytes(lo, 0x10101010u), X[i], acc);
            acc = qd_dp4a((int)qd_sub_bytes(hi, 0x10101010u), X[4 + i], acc);
        }
        return d * xd[u] * (float)acc;
    }
};

/* Q4_0: unit = block u, 32 values, codes q − 8 (byte j: element j low
 * nibble, j+16 high) */
template <> struct Qi<VT_TYPE_Q4_0> {
    enum { ok = 1, UNIT = 32 };
    static __device__ __forceinline__ float dot(const uint8_t *row, int u, const int8_t *xq,
                                                const float *xd, const float *xs)
    {
        (void)xs;
        const uint8_t *b = row + 18 * (size_t)u;
        uint32_t w[4];
        qd_words<4>(b + 2, w);
        const int *X = (const int *)(xq + 32 * u);
        int acc = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            acc = qd_dp4a((int)qd_sub_bytes(w[i] & 0x0F0F0F0Fu, 0x08080808u), X[i], acc);
            acc = qd_dp4a((int)qd_sub_bytes((w[i] >> 4) & 0x0F0F0F0Fu, 0x08080808u), X[4 + i], acc);
        }
        return f16_to_f32(ld16(b)) * xd[u] * (float)acc;
    }
};

/* Q4_1 (d, m f16 | qs u8[16], 20 bytes) and Q5_1 (d, m | qh u32 | qs, 24
 * bytes), read as 32-bit words (4-byte aligned): d·q + m, so Σ w·x̂ =
 * d·d_x·Σ q·q_x + m·s_x */
template <int QH> struct QiQ1 {
    enum { ok = 1, UNIT = 32 };
    static __device__ __forceinline__ float dot(const uint8_t *row, int u, const int8_t *xq,
                                                const float *xd, const float *xs)
    {
        const uint32_t *bw = (const uint32_t *)(row + (QH ? 24 : 20) * (size_t)u);
        const uint32_t dm = bw[0], qh = QH ? bw[1] : 0u;
        const uint32_t *qs = bw + (QH ? 2 : 1);
        const int *X = (const int *)(xq + 32 * u);
        int acc = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t q = qs[i];
            const uint32_t lo = (q & 0x0F0F0F0Fu) | (QH ? qd_bit4(qh >> (4 * i)) : 0u);
            const uint32_t hi = ((q >> 4) & 0x0F0F0F0Fu) | (QH ? qd_bit4(qh >> (16 + 4 * i)) : 0u);
            acc = qd_dp4a((int)lo, X[i], acc);
            acc = qd_dp4a((int)hi, X[4 + i], acc);
        }
        return f16_to_f32(dm & 0xFFFFu) * xd[u] * (float)acc + f16_to_f32(dm >> 16) * xs[u];
    }
};
template <> struct Qi<VT_TYPE_Q4_1> : QiQ1<0> {};
template <> struct Qi<VT_TYPE_Q5_1> : QiQ1<1> {};

/* IQ4_NL: unit = block u, codes K[q] (iq4_value's table), four at a time:
 * two byte permutes over the table's halves, chosen per byte by bit 3 */
static __device__ __forceinline__ uint32_t qd_iq4_lookup(uint32_t v) /* 4 bytes, each 0..15 */
{
    const uint32_t sel = (v & 0x7u) | ((v >> 4) & 0x70u) | ((v >> 8) & 0x700u) | ((v >> 12) & 0x7000u);
    const uint32_t lo = __byte_perm(0xBFAD9881u, 0xF6EADDCFu, sel); /* K[0..7] */
    const uint32_t hi = __byte_perm(0x26190D01u, 0x71594535u, sel); /* K[8..15] */
    const uint32_t m = ((v >> 3) & 0x01010101u) * 0xFFu;
    return (lo & ~m) | (hi & m);
}
template <> struct Qi<VT_TYPE_IQ4_NL> {
    enum { ok = 1, UNIT = 32 };
    static __device__ __forceinline__ float dot(const uint8_t *row, int u, const int8_t *xq,
                                                const float *xd, const float *xs)
    {
        (void)xs;
        const uint8_t *b = row + 18 * (size_t)u;
        uint32_t w[4];
        qd_words<4>(b + 2, w);
        const int *X = (const int *)(xq + 32 * u);
        int acc = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            acc = qd_dp4a((int)qd_iq4_lookup(w[i] & 0x0F0F0F0Fu), X[i], acc);
            acc = qd_dp4a((int)qd_iq4_lookup((w[i] >> 4) & 0x0F0F0F0Fu), X[4 + i], acc);
        }
        return f16_to_f32(ld16(b)) * xd[u] * (float)acc;
    }
};

/* 6-bit scales and mins of sub-blocks 2j and 2j+1 of a Q4_K/Q5_K super-block
 * (§6.9), from its header words h: d, dmin | scales bytes 0..3 (h.y), 4..7
 * (h.z), 8..11 (h.w) */
static __device__ __forceinline__ void qd_k4_scales(uint4 h, int j, int &sc0, int &m0, int &sc1,
                                                    int &m1)
{
    if (j < 2) {
        sc0 = (int)byte_of(h.y, 2 * j) & 63, m0 = (int)byte_of(h.z, 2 * j) & 63;
        sc1 = (int)byte_of(h.y, 2 * j + 1) & 63, m1 = (int)byte_of(h.z, 2 * j + 1) & 63;
    } else {
        const int k0 = 2 * j - 4, k1 = 2 * j - 3;
        sc0 = (int)((byte_of(h.w, k0) & 15u) | (byte_of(h.y, k0) >> 6) << 4);
        m0 = (int)((byte_of(h.w, k0) >> 4) | (byte_of(h.z, k0) >> 6) << 4);
        sc1 = (int)((byte_of(h.w, k1) & 15u) | (byte_of(h.y, k1) >> 6) << 4);
        m1 = (int)((byte_of(h.w, k1) >> 4) | (byte_of(h.z, k1) >> 6) << 4);
    }
}

/* Q4_K: unit u = quarter j = u%4 of super-block u/4: sub-blocks 2j (low
 * nibbles of qs[32j..32j+31]) and 2j+1 (high nibbles) */
template <> struct Qi<VT_TYPE_Q4_K> {
    enum { ok = 1, UNIT = 64 };
    static __device__ __forceinline__ float dot(const uint8_t *row, int u, const int8_t *xq,
                                                const float *xd, const float *xs)
    {
        const int sb = u >> 2, j = u & 3;
        const uint8_t *b = row + 144 * (size_t)sb;
        const uint32_t *bw = (const uint32_t *)b; /* 4-byte aligned (check_weight) */
        const uint4 h = make_uint4(bw[0], bw[1], bw[2], bw[3]); /* d, dmin | scales[0..11] */
        const uint32_t *pa = bw + 4 + 8 * j, *pb = bw + 8 + 8 * j;
        const uint4 qa = make_uint4(pa[0], pa[1], pa[2], pa[3]), qb = make_uint4(pb[0], pb[1], pb[2], pb[3]);
        int sc0, m0, sc1, m1;
        qd_k4_scales(h, j, sc0, m0, sc1, m1);
        const int ab = 8 * sb + 2 * j; /* activation blocks ab (low) and ab + 1 (high) */
        const int4 *X = (const int4 *)(xq + 32 * ab);
        const int4 a0 = X[0], a1 = X[1], c0 = X[2], c1 = X[3];
        const uint32_t M = 0x0F0F0F0Fu;
        int s0 = 0, s1 = 0;
        s0 = qd_dp4a((int)(qa.x & M), a0.x, s0), s1 = qd_dp4a((int)((qa.x >> 4) & M), c0.x, s1);
        s0 = qd_dp4a((int)(qa.y & M), a0.y, s0), s1 = qd_dp4a((int)((qa.y >> 4) & M), c0.y, s1);
        s0 = qd_dp4a((int)(qa.z & M), a0.z, s0), s1 = qd_dp4a((int)((qa.z >> 4) & M), c0.z, s1);
        s0 = qd_dp4a((int)(qa.w & M), a0.w, s0), s1 = qd_dp4a((int)((qa.w >> 4) & M), c0.w, s1);
        s0 = qd_dp4a((int)(qb.x & M), a1.x, s0), s1 = qd_dp4a((int)((qb.x >> 4) & M), c1.x, s1);
        s0 = qd_dp4a((int)(qb.y & M), a1.y, s0), s1 = qd_dp4a((int)((qb.y >> 4) & M), c1.y, s1);
        s0 = qd_dp4a((int)(qb.z & M), a1.z, s0), s1 = qd_dp4a((int)((qb.z >> 4) & M), c1.z, s1);
        s0 = qd_dp4a((int)(qb.w & M), a1.w, s0), s1 = qd_dp4a((int)((qb.w >> 4) & M), c1.w, s1);
        const float d = f16_to_f32(h.x & 0xFFFFu), dm = f16_to_f32(h.x >> 16);
        return d * ((float)sc0 * xd[ab] * (float)s0 + (float)sc1 * xd[ab + 1] * (float)s1) -
               dm * ((float)m0 * xs[ab] + (float)m1 * xs[ab + 1]);
    }
};

/* Q6_K: unit u = quarter j = u%4 of super-block u/4: half h = j/2, columns
 * l0..l0+15 (l0 = 16·(j%2)) of its four 32-value rows c = 0..3 (element
 * 128h + 32c + l, §6.12) */
template <> struct Qi<VT_TYPE_Q6_K> {
    enum { ok = 1, UNIT = 64 };
    static __device__ __forceinline__ float dot(const uint8_t *row, int u, const int8_t *xq,
                                                const float *xd, const float *xs)
    {
        (void)xs;
        const int sb = u >> 2, j = u & 3, h = j >> 1, l0 = 16 * (j & 1);
        const uint8_t *b = row + 210 * (size_t)sb;
        uint32_t A[4], B[4], H[4];
        qd_words<4>(b + 64 * h + l0, A);      /* ql: rows c = 0 (low), 2 (high) */
        qd_words<4>(b + 64 * h + 32 + l0, B); /* ql: rows c = 1 (low), 3 (high) */
        qd_words<4>(b + 128 + 32 * h + l0, H);
        const signed char *sc = (const signed char *)b + 192 + 8 * h + (j & 1);
        const float d = f16_to_f32(ld16(b + 208));
        const int ab = 8 * sb + 4 * h; /* activation block of row c: ab + c */
        const int4 x0 = *(const int4 *)(xq + 32 * ab + l0), x1 = *(const int4 *)(xq + 32 * (ab + 1) + l0);
        const int4 x2 = *(const int4 *)(xq + 32 * (ab + 2) + l0), x3 = *(const int4 *)(xq + 32 * (ab + 3) + l0);
        const int xw0[4] = {x0.x, x0.y, x0.z, x0.w}, xw1[4] = {x1.x, x1.y, x1.z, x1.w};
        const int xw2[4] = {x2.x, x2.y, x2.z, x2.w}, xw3[4] = {x3.x, x3.y, x3.z, x3.w};
        const uint32_t M = 0x0F0F0F0Fu, HM = 0x30303030u, K32 = 0x20202020u;
        int s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t a = A[i], c = B[i], hh = H[i];
            s0 = qd_dp4a((int)qd_sub_bytes((a & M) | ((hh << 4) & HM), K32), xw0[i], s0);
            s1 = qd_dp4a((int)qd_sub_bytes((c & M) | ((hh << 2) & HM), K32), xw1[i], s1);
            s2 = qd_dp4a((int)qd_sub_bytes(((a >> 4) & M) | (hh & HM), K32), xw2[i], s2);
            s3 = qd_dp4a((int)qd_sub_bytes(((c >> 4) & M) | ((hh >> 2) & HM), K32), xw3[i], s3);
        }
        return d * ((float)sc[0] * xd[ab] * (float)s0 + (float)sc[2] * xd[ab + 1] * (float)s1 +
                    (float)sc[4] * xd[ab + 2] * (float)s2 + (float)sc[6] * xd[ab + 3] * (float)s3);
    }
};

/* Q5_K: as Q4_K (d, dmin f16 | scales u8[12] | qh u8[32] | qs u8[128], 176
 * bytes, read as 32-bit words), the fifth bit of sub-block s's value l being
 * bit s of qh[l]: unit u = quarter j of super-block u/4, sub-blocks 2j and 2j+1 */
template <> struct Qi<VT_TYPE_Q5_K> {
    enum { ok = 1, UNIT = 64 };
    static __device__ __forceinline__ float dot(const uint8_t *row, int u, const int8_t *xq,
                                                const float *xd, const float *xs)
    {
        const int sb = u >> 2, j = u & 3;
        const uint32_t *bw = (const uint32_t *)(row + 176 * (size_t)sb); /* 4-byte aligned */
        const uint4 h = make_uint4(bw[0], bw[1], bw[2], bw[3]); /* d, dmin | scales[0..11] */
        int sc0, m0, sc1, m1;
        qd_k4_scales(h, j, sc0, m0, sc1, m1);
        const int ab = 8 * sb + 2 * j; /* activation blocks ab (low) and ab + 1 (high) */
        const int *X0 = (const int *)(xq + 32 * ab), *X1 = X0 + 8;
        const uint32_t M = 0x0F0F0F0Fu, B = 0x01010101u;
        int s0 = 0, s1 = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t qs = bw[12 + 8 * j + i], qh = bw[4 + i];
            const uint32_t lo = (qs & M) | ((qh >> (2 * j)) & B) << 4;
            const uint32_t hi = ((qs >> 4) & M) | ((qh >> (2 * j + 1)) & B) << 4;
            s0 = qd_dp4a((int)lo, X0[i], s0);
            s1 = qd_dp4a((int)hi, X1[i], s1);
        }
        const float d = f16_to_f32(h.x & 0xFFFFu), dm = f16_to_f32(h.x >> 16);
        return d * ((float)sc0 * xd[ab] * (float)s0 + (float)sc1 * xd[ab + 1] * (float)s1) -
               dm * ((float)m0 * xs[ab] + (float)m1 * xs[ab + 1]);
    }
};

/* The low-bit types (gpu_lowbit.cuh): unit u = 32 values (activation block
 * u), its four 8-value groups' int8 codes from QT<T>::igroup, each group's
 * integer sum scaled by the group's own scale. */
template <int T> struct QiLow {
    enum { ok = 1, UNIT = 32 };
    static __device__ __forceinline__ float dot(const uint8_t *row, int u, const int8_t *xq,
                                                const float *xd, const float *xs)
    {
        (void)xs;
        constexpr int UPB = QT<T>::QK / 32;
        const uint8_t *b = row + (size_t)(u / UPB) * QT<T>::BYTES;
        const int g0 = 4 * (u % UPB);
        const int4 *X = (const int4 *)(xq + 32 * u);
        const int4 x0 = X[0], x1 = X[1];
        const int xw[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        float acc = 0.0f;
#pragma unroll
        for (int l = 0; l < 4; l++) {
            uint32_t q[2];
            float sc;
            QT<T>::igroup(b, g0 + l, q, sc);
            acc += sc * (float)qd_dp4a((int)q[1], xw[2 * l + 1], qd_dp4a((int)q[0], xw[2 * l], 0));
        }
        return xd[u] * acc;
    }
};
#define QD_LOWBIT(T, n)                                                                        \
    template <> struct Qi<VT_TYPE_##T> : QiLow<VT_TYPE_##T> {};
VT_GPU_LOWBIT_TYPES(QD_LOWBIT)
#undef QD_LOWBIT

/* Lanes per row for n_in / UNIT units (a power of two, at most 32): log2. */
static inline int qd_lanes_log2(int64_t units)
{
    int l = 0;
    while (l < 5 && ((int64_t)1 << l) < units) l++;
    return l;
}

#endif
