/*
 * cpu_qdot_body.h - the integer dot products of backend-cpu's decode path:
 * one token's activations quantised to int8 (vt_cpu_xq, 32 values per
 * block) times the rows of a quantised weight matrix, for every block type
 * (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL,
 * IQ4_XS, MXFP4; layouts in gguf.md §6 and cpu_dequant.c).
 *
 * Included once per instruction set (cpu_qdot_avx2.c, cpu_qdot_avx512.c)
 * inside that file's target pragma, after it has defined
 *   QDOT_SET   the vt_cpu_qdot_set object's name, QDOT_NAME its name,
 *   QDOT_SUPPORTED  a function returning 1 when the CPU can run it,
 *   dot4(acc, u, s)  acc + int32 lane k = Σ_{i=4k..4k+3} u[i]·s[i]
 *                   (u: 32 unsigned bytes <= 128, s: 32 signed bytes with
 *                   |s| <= 127; AVX2: vpmaddubsw + vpmaddwd, which cannot
 *                   saturate at those ranges; AVX512-VNNI: vpdpbusd),
 * so both sets compute the same integers.
 *
 * Arithmetic. A weight block is decoded in registers to 32 integer codes
 * q (signed, or unsigned for the types with a min), the activation block to
 * its int8 codes xq and scale dx; Σ q·xq is exact in int32 (|Σ| < 2^24, so
 * it converts to float exactly) and is scaled by the block's float scale
 * (fp16 d · integer sub-scale · dx, a rounding or two) and summed
 * with FMA into 8 float lanes; the min term of Q4_1/Q5_1/Q2_K/Q4_K/Q5_K is
 * min · dx · Σxq over the sub-block, summed in float. Compared with the exact
 * float dot Σ w·x of the dequantised row, the only error beyond float32
 * summation is the activation's rounding, |x − dx·xq| <= dx/2 per value
 * (tests/test_cpu_quant_kernels.c derives the bound and checks every type against
 * the scalar reference).
 */

#include <immintrin.h>
#include <float.h>
#include <math.h>
#include <string.h>

#if defined(__OPTIMIZE__)
#define QD_INLINE static inline __attribute__((always_inline))
#else
#define QD_INLINE static inline
#endif
/* Full unrolling of the loops over a super-block's sub-blocks, so that their
 * shift counts, bit masks and permute indices are constants (GCC needs
 * telling at -O2; clang unrolls such loops itself). */
#define QD_PRAGMA(x) _Pragma(#x)
#if defined(__clang__)
#define QD_UNROLL(n)
#else
#define QD_UNROLL(n) QD_PRAGMA(GCC unroll n)
#endif

QD_INLINE float qd_f16(const uint8_t *p) { return _cvtsh_ss(vt_cpu_rd16(p)); }

QD_INLINE __m256i qd_load256(const uint8_t *p) { return _mm256_loadu_si256((const __m256i *)(const void *)p); }
QD_INLINE __m128i qd_load128(const uint8_t *p) { return _mm_loadu_si128((const __m128i *)(const void *)p); }

/* 16 bytes of nibble pairs -> 32 bytes: low nibbles (values 0..15), then high nibbles. */
QD_INLINE __m256i qd_nibbles16(const uint8_t *p)
{
    __m128i v = qd_load128(p);
    const __m128i m = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}

/* 32 bits (bit i for value i) -> 32 bytes of `val` where the bit is set, else 0. */
QD_INLINE __m256i qd_bits32(uint32_t bits, uint8_t val)
{
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL,
                                           0x0101010101010101LL, 0x0000000000000000LL);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
    return _mm256_and_si256(v, _mm256_set1_epi8((char)val));
}

/* Signed codes w times signed activations: |w| (as unsigned) times x·sign(w). */
QD_INLINE __m256i qd_dot_ss(__m256i acc, __m256i w, __m256i x)
{
    return dot4(acc, _mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
}

/* the int8 codes of activation block b */
#define QX(b) qd_load256((const uint8_t *)(x->q + 32 * (b)))

/* acc += float(i32) · s */
QD_INLINE __m256 qd_fma(__m256i i32, float s, __m256 acc)
{
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(i32), _mm256_set1_ps(s), acc);
}

QD_INLINE float qd_hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* lane k of v in every lane */
QD_INLINE __m256 qd_lane(__m256 v, int k) { return _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(k)); }

/* The fp16 fields at p, p + stride, ... (8 of them) as floats. */
QD_INLINE __m256 qd_f16x8(const uint8_t *p, size_t stride)
{
    __m128i h = _mm_setr_epi16((short)vt_cpu_rd16(p), (short)vt_cpu_rd16(p + stride),
                               (short)vt_cpu_rd16(p + 2 * stride), (short)vt_cpu_rd16(p + 3 * stride),
                               (short)vt_cpu_rd16(p + 4 * stride), (short)vt_cpu_rd16(p + 5 * stride),
                               (short)vt_cpu_rd16(p + 6 * stride), (short)vt_cpu_rd16(p + 7 * stride));
    return _mm256_cvtph_ps(h);
}

/* ---- activation quantisation ---- */

static void QD_FN(quantize)(const float *xf, int64_t n, const vt_cpu_xq *xq)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < n / 32; b++) {
        const float *xb = xf + 32 * b;
        __m256 v0 = _mm256_loadu_ps(xb), v1 = _mm256_loadu_ps(xb + 8);
        __m256 v2 = _mm256_loadu_ps(xb + 16), v3 = _mm256_loadu_ps(xb + 24);
        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
                                 _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        float amax = _mm_cvtss_f32(h);
        /* a NaN or infinite value (max_ps may drop a NaN): the block's scale
         * is NaN, so the dot products come out NaN as on the float path */
        __m256 un = _mm256_or_ps(_mm256_or_ps(_mm256_cmp_ps(v0, v0, _CMP_UNORD_Q),
                                              _mm256_cmp_ps(v1, v1, _CMP_UNORD_Q)),
                                 _mm256_or_ps(_mm256_cmp_ps(v2, v2, _CMP_UNORD_Q),
                                              _mm256_cmp_ps(v3, v3, _CMP_UNORD_Q)));
        int bad = _mm256_movemask_ps(un) != 0 || !(amax <= FLT_MAX);
        /* a block whose max is below 127 · FLT_MIN (1.5e-36) becomes zeros:
         * 1/d would overflow; the error is below that max */
        float d = amax >= 127.0f * FLT_MIN ? amax / 127.0f : 0.0f;
        float id = d > 0.0f ? 1.0f / d : 0.0f;
        if (bad) {
            d = NAN;
            id = 0.0f;
        }
        __m256 vid = _mm256_set1_ps(id);
        /* round to nearest even (MXCSR default) */
        __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v0, vid));
        __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v1, vid));
        __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v2, vid));
        __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v3, vid));
        __m256i p01 = _mm256_packs_epi32(i0, i1), p23 = _mm256_packs_epi32(i2, i3);
        __m256i q = _mm256_packs_epi16(p01, p23);
        /* packs interleave the 128-bit lanes: restore element order */
        q = _mm256_permutevar8x32_epi32(q, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        /* codes in [-127, 127] (the sign trick and vpmaddubsw's range rely on
         * it); only a NaN·0 lane could give -128 */
        q = _mm256_max_epi8(q, _mm256_set1_epi8(-127));
        _mm256_storeu_si256((__m256i *)(void *)(xq->q + 32 * b), q);
        /* per-16 sums of the codes */
        __m256i s4 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q),
                                       _mm256_set1_epi16(1));
        __m128i lo = _mm256_castsi256_si128(s4), hi = _mm256_extracti128_si256(s4, 1);
        lo = _mm_hadd_epi32(lo, lo);
        lo = _mm_hadd_epi32(lo, lo);
        hi = _mm_hadd_epi32(hi, hi);
        hi = _mm_hadd_epi32(hi, hi);
        int s0 = _mm_cvtsi128_si32(lo), s1 = _mm_cvtsi128_si32(hi);
        xq->d[b] = d;
        xq->ds[b] = d * (float)(s0 + s1);
        xq->s16[2 * b] = (int16_t)s0;
        xq->s16[2 * b + 1] = (int16_t)s1;
    }
}

/* ---- per type: one row · the token ----
 * x: the token's blocks; nb: 32-value blocks of the row (32-value types) or
 * nsb: 256-value super-blocks. Two or more accumulators keep the FMA chains
 * short; block scales are formed 8 at a time where the layout allows. */

/* A 32-value type whose block has an fp16 d at offset 0 and codes decoded
 * by DECODE(p) (signed: SIGNED = 1): Σ_b d_b·dx_b·Σ q·xq, scales 8 blocks at a time. */
#define QD_LEGACY(NAME, BYTES, SIGNED, DECODE)                                                  \
    QD_INLINE float NAME(const uint8_t *row, int64_t nb, const vt_cpu_xq *x)                   \
    {                                                                                          \
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();                             \
        int64_t b = 0;                                                                         \
        for (; b + 8 <= nb; b += 8) {                                                          \
            const uint8_t *p0 = row + (size_t)b * (BYTES);                                     \
            __m256 sv = _mm256_mul_ps(qd_f16x8(p0, (BYTES)), _mm256_loadu_ps(x->d + b));        \
            QD_UNROLL(8) for (int k = 0; k < 8; k += 2) {                                                   \
                const uint8_t *p = p0 + (size_t)k * (BYTES), *p2 = p + (BYTES);                \
                __m256i w0 = DECODE(p), w1 = DECODE(p2);                                       \
                __m256i i0 = SIGNED ? qd_dot_ss(_mm256_setzero_si256(), w0, QX(b + k))         \
                                    : dot4(_mm256_setzero_si256(), w0, QX(b + k));             \
                __m256i i1 = SIGNED ? qd_dot_ss(_mm256_setzero_si256(), w1, QX(b + k + 1))     \
                                    : dot4(_mm256_setzero_si256(), w1, QX(b + k + 1));         \
                a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i0), qd_lane(sv, k), a0);              \
                a1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i1), qd_lane(sv, k + 1), a1);          \
            }                                                                                  \
        }                                                                                      \
        for (; b < nb; b++) {                                                                  \
            const uint8_t *p = row + (size_t)b * (BYTES);                                      \
            __m256i w = DECODE(p);                                                             \
            __m256i i0 = SIGNED ? qd_dot_ss(_mm256_setzero_si256(), w, QX(b))                  \
                                : dot4(_mm256_setzero_si256(), w, QX(b));                      \
            a0 = qd_fma(i0, qd_f16(p) * x->d[b], a0);                                          \
        }                                                                                      \
        return qd_hsum(_mm256_add_ps(a0, a1));                                                 \
    }

/* Q8_0 (gguf.md §6.2): d · q, q int8. */
QD_INLINE __m256i qd_dec_q8_0(const uint8_t *p) { return qd_load256(p + 2); }
QD_LEGACY(qd_row_q8_0, 34, 1, qd_dec_q8_0)

/* Q4_0 (§6.3): d · (q − 8). */
QD_INLINE __m256i qd_dec_q4_0(const uint8_t *p)
{
    return _mm256_sub_epi8(qd_nibbles16(p + 2), _mm256_set1_epi8(8));
}
QD_LEGACY(qd_row_q4_0, 18, 1, qd_dec_q4_0)

/* Q5_0 (§6.5): d · ((q | h << 4) − 16). */
QD_INLINE __m256i qd_dec_q5_0(const uint8_t *p)
{
    uint32_t h;
    memcpy(&h, p + 2, 4);
    return _mm256_sub_epi8(_mm256_or_si256(qd_nibbles16(p + 6), qd_bits32(h, 0x10)),
                           _mm256_set1_epi8(16));
}
QD_LEGACY(qd_row_q5_0, 22, 1, qd_dec_q5_0)

/* The IQ4_NL/IQ4_XS codebook (§6.14) and MXFP4's doubled E2M1 values (§6.16),
 * as pshufb tables. */
QD_INLINE __m256i qd_lut_iq4(void)
{
    return _mm256_broadcastsi128_si256(
        _mm_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113));
}
QD_INLINE __m256i qd_lut_e2m1(void)
{
    return _mm256_broadcastsi128_si256(
        _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
}

/* IQ4_NL (§6.14): d · codebook[q]. */
QD_INLINE __m256i qd_dec_iq4_nl(const uint8_t *p)
{
    return _mm256_shuffle_epi8(qd_lut_iq4(), qd_nibbles16(p + 2));
}
QD_LEGACY(qd_row_iq4_nl, 18, 1, qd_dec_iq4_nl)

/* Q4_1 / Q5_1 (§6.4, §6.6): d · q + m: the min term m · dx · Σxq = m · ds. */
QD_INLINE float qd_row_q45_1(const uint8_t *row, int64_t nb, const vt_cpu_xq *x, const int Q5)
{
    const size_t bs = Q5 ? 24 : 20;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    float mins = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = row + (size_t)b * bs;
        __m256i w = qd_nibbles16(p + (Q5 ? 8 : 4));
        if (Q5) {
            uint32_t h;
            memcpy(&h, p + 4, 4);
            w = _mm256_or_si256(w, qd_bits32(h, 0x10));
        }
        __m256i i32 = dot4(_mm256_setzero_si256(), w, QX(b));
        if (b & 1)
            a1 = qd_fma(i32, qd_f16(p) * x->d[b], a1);
        else
            a0 = qd_fma(i32, qd_f16(p) * x->d[b], a0);
        mins = fmaf(qd_f16(p + 2), x->ds[b], mins);
    }
    return qd_hsum(_mm256_add_ps(a0, a1)) + mins;
}

/* MXFP4 (§6.16): 2^(e−127) · E2M1[q]. */
QD_INLINE float qd_row_mxfp4(const uint8_t *row, int64_t nb, const vt_cpu_xq *x)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    const __m256i lut = qd_lut_e2m1();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = row + (size_t)b * 17;
        __m256i w = _mm256_shuffle_epi8(lut, qd_nibbles16(p + 1));
        __m256i i32 = qd_dot_ss(_mm256_setzero_si256(), w, QX(b));
        if (b & 1)
            a1 = qd_fma(i32, vt_cpu_e8m0_half(p[0]) * x->d[b], a1);
        else
            a0 = qd_fma(i32, vt_cpu_e8m0_half(p[0]) * x->d[b], a0);
    }
    return qd_hsum(_mm256_add_ps(a0, a1));
}

/* Q4_K / Q5_K (§6.10, §6.11): sub-block s of 32: d·sc_s · q − dmin·m_s. The
 * 8 sub-block scales d·sc_s·dx_s and min terms dmin·m_s·ds_s are formed as
 * one vector each. */
/* One super-block of Q4_K / Q5_K decoded: the weight half of the dot
 * product, shared by the one-token and several-token kernels so that both
 * do the same float operations. dsc = d·scale (8 lanes, one per 32 values),
 * dm = dmin·min, lo/hi[j]: the codes of values 64j..64j+31 / 64j+32..64j+63. */
typedef struct qd_k45 {
    __m256 dsc, dm;
    __m256i lo[4], hi[4];
} qd_k45;

QD_INLINE void qd_k45_decode(const uint8_t *p, const int Q5, qd_k45 *o)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const uint8_t *sc = p + 4;
    const uint8_t *qs = p + (Q5 ? 48 : 16);
    /* 6-bit scales and mins (§6.9), as 8 bytes each */
    uint32_t a, b2, c;
    memcpy(&a, sc, 4);
    memcpy(&b2, sc + 4, 4);
    memcpy(&c, sc + 8, 4);
    uint64_t sc8 = (uint64_t)(a & 0x3f3f3f3fu) |
                   (uint64_t)((c & 0x0f0f0f0fu) | ((a >> 2) & 0x30303030u)) << 32;
    uint64_t m8 = (uint64_t)(b2 & 0x3f3f3f3fu) |
                  (uint64_t)(((c >> 4) & 0x0f0f0f0fu) | ((b2 >> 2) & 0x30303030u)) << 32;
    __m256 scv = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc8)));
    __m256 mv = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)m8)));
    o->dsc = _mm256_mul_ps(_mm256_set1_ps(qd_f16(p)), scv);
    o->dm = _mm256_mul_ps(_mm256_set1_ps(qd_f16(p + 2)), mv);
    __m256i qh = Q5 ? qd_load256(p + 16) : _mm256_setzero_si256();
QD_UNROLL(4)
    for (int j = 0; j < 4; j++) {
        __m256i v = qd_load256(qs + 32 * j);
        __m256i lo = _mm256_and_si256(v, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        if (Q5) {
            const __m256i bl = _mm256_set1_epi8((char)(1 << (2 * j)));
            const __m256i bh = _mm256_set1_epi8((char)(1 << (2 * j + 1)));
            const __m256i h16 = _mm256_set1_epi8(0x10);
            lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bl), bl), h16));
            hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bh), bh), h16));
        }
        o->lo[j] = lo;
        o->hi[j] = hi;
    }
}

/* One token's part of super-block sb: a0/a1 take the even/odd 32-value
 * blocks' scaled integer sums, am the min term. */
QD_INLINE void qd_k45_token(const qd_k45 *k, int64_t sb, const vt_cpu_xq *x, __m256 *a0,
                            __m256 *a1, __m256 *am)
{
    __m256 sv = _mm256_mul_ps(k->dsc, _mm256_loadu_ps(x->d + 8 * sb));
    *am = _mm256_fmadd_ps(k->dm, _mm256_loadu_ps(x->ds + 8 * sb), *am);
QD_UNROLL(4)
    for (int j = 0; j < 4; j++) {
        __m256i il = dot4(_mm256_setzero_si256(), k->lo[j], QX(8 * sb + 2 * j));
        __m256i ih = dot4(_mm256_setzero_si256(), k->hi[j], QX(8 * sb + 2 * j + 1));
        *a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(il), qd_lane(sv, 2 * j), *a0);
        *a1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ih), qd_lane(sv, 2 * j + 1), *a1);
    }
}

QD_INLINE float qd_row_q45_k(const uint8_t *row, int64_t nsb, const vt_cpu_xq *x, const int Q5)
{
    const size_t bs = Q5 ? 176 : 144;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), am = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < nsb; sb++) {
        qd_k45 k;
        qd_k45_decode(row + (size_t)sb * bs, Q5, &k);
        qd_k45_token(&k, sb, x, &a0, &a1, &am);
    }
    return qd_hsum(_mm256_add_ps(a0, a1)) - qd_hsum(am);
}

/* Several tokens (<= VT_CPU_MM_TOK_CHUNK) of Q4_K / Q5_K: each super-block
 * decoded once for up to QD_MM_T tokens, each token's arithmetic that of
 * qd_row_q45_k, so every output equals its one-token call bit for bit. */
#define QD_MM_T 4
QD_INLINE void qd_mm_q45_k(const uint8_t *w, size_t rb, int64_t n_in, const vt_cpu_xq *x,
                           int64_t n_tok, float *y, int64_t ldy, int64_t n_rows, const int Q5)
{
    const size_t bs = Q5 ? 176 : 144;
    const int64_t nsb = n_in / 256;
    for (int64_t r = 0; r < n_rows; r++) {
        const uint8_t *row = w + (size_t)r * rb;
        for (int64_t t0 = 0; t0 < n_tok; t0 += QD_MM_T) {
            const int nt = n_tok - t0 < QD_MM_T ? (int)(n_tok - t0) : QD_MM_T;
            __m256 a0[QD_MM_T], a1[QD_MM_T], am[QD_MM_T];
            for (int t = 0; t < QD_MM_T; t++) a0[t] = a1[t] = am[t] = _mm256_setzero_ps();
            for (int64_t sb = 0; sb < nsb; sb++) {
                qd_k45 k;
                qd_k45_decode(row + (size_t)sb * bs, Q5, &k);
                for (int t = 0; t < nt; t++) qd_k45_token(&k, sb, &x[t0 + t], &a0[t], &a1[t], &am[t]);
            }
            for (int t = 0; t < nt; t++)
                y[(t0 + t) * ldy + r] = qd_hsum(_mm256_add_ps(a0[t], a1[t])) - qd_hsum(am[t]);
        }
    }
}

/*
 * The types with a scale per 16 values (Q2_K, Q3_K, Q6_K): a super-block's 16
 * sub-scales become two float vectors (groups 0..7, 8..15), multiplied once
 * by d and by each group's activation scale dx (dx of value block g/2), so a
 * 32-value block's scale vector (lanes 0..3: group 2b, 4..7: group 2b + 1,
 * matching the int32 lanes of its dot) is one permute.
 */
QD_INLINE void qd_group_scales(__m256 sc_lo, __m256 sc_hi, float d, const float *dx, __m256 out[2])
{
    __m256 dxv = _mm256_mul_ps(_mm256_loadu_ps(dx), _mm256_set1_ps(d));
    out[0] = _mm256_mul_ps(sc_lo, _mm256_permutevar8x32_ps(dxv, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3)));
    out[1] = _mm256_mul_ps(sc_hi, _mm256_permutevar8x32_ps(dxv, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7)));
}
/* block b (0..7) of the super-block: lanes 0..3 group 2b, 4..7 group 2b + 1 */
QD_INLINE __m256 qd_block_scale(const __m256 g[2], int b)
{
    const int k = 2 * (b & 3);
    return _mm256_permutevar8x32_ps(g[b >> 2], _mm256_setr_epi32(k, k, k, k, k + 1, k + 1, k + 1, k + 1));
}
/* 16 signed bytes -> two vectors of 8 floats */
QD_INLINE void qd_i8x16_to_f(__m128i v, __m256 *lo, __m256 *hi)
{
    *lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
    *hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v, 8)));
}

/* Σ_g scale_g · Σxq_g of a super-block (the scale vectors of qd_group_scales,
 * the per-16 code sums), added to acc: the offset term of Q3_K and Q6_K. */
QD_INLINE __m256 qd_group_offsets(const __m256 g[2], const int16_t *s16, __m256 acc)
{
    __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)s16);
    __m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(v)));
    __m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_extracti128_si256(v, 1)));
    return _mm256_fmadd_ps(g[1], hi, _mm256_fmadd_ps(g[0], lo, acc));
}

/* Q6_K (§6.12): d · scale[i/16] · (q − 32), q = low | high << 4 in 0..63: the
 * unsigned codes go straight into vpmaddubsw, the −32 is 32 · Σ_g scale_g ·
 * Σxq_g per super-block. */
QD_INLINE float qd_row_q6_k(const uint8_t *row, int64_t nsb, const vt_cpu_xq *x)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), ao = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < nsb; sb++) {
        const uint8_t *p = row + (size_t)sb * 210;
        __m256 sl, sh, g[2];
        qd_i8x16_to_f(_mm_loadu_si128((const __m128i *)(const void *)(p + 192)), &sl, &sh);
        qd_group_scales(sl, sh, qd_f16(p + 208), x->d + 8 * sb, g);
        ao = qd_group_offsets(g, x->s16 + 16 * sb, ao);
QD_UNROLL(8)
        for (int h = 0; h < 2; h++) {
            __m256i l0 = qd_load256(p + 64 * h), l1 = qd_load256(p + 64 * h + 32);
            __m256i qh = qd_load256(p + 128 + 32 * h);
QD_UNROLL(8)
            for (int c = 0; c < 4; c++) {
                __m256i lb = c & 1 ? l1 : l0;
                __m256i low = c < 2 ? _mm256_and_si256(lb, m4) : _mm256_and_si256(_mm256_srli_epi16(lb, 4), m4);
                __m256i high = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), m3);
                __m256i w = _mm256_or_si256(low, _mm256_slli_epi16(high, 4));
                __m256i i32 = dot4(_mm256_setzero_si256(), w, QX(8 * sb + 4 * h + c));
                __m256 sc = qd_block_scale(g, 4 * h + c);
                if (c & 1)
                    a1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i32), sc, a1);
                else
                    a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i32), sc, a0);
            }
        }
    }
    return qd_hsum(_mm256_add_ps(a0, a1)) - 32.0f * qd_hsum(ao);
}

/* Q3_K's 16 signed 6-bit scales (§6.8) as 16 bytes, from the 12 packed bytes:
 * low nibbles (bytes 0..7, low then high nibble) and 2-bit highs (bytes 8..11). */
QD_INLINE __m128i qd_q3_k_scales(const uint8_t *sbs)
{
    uint32_t a, b, c;
    memcpy(&a, sbs, 4);
    memcpy(&b, sbs + 4, 4);
    memcpy(&c, sbs + 8, 4);
    const uint32_t m4 = 0x0f0f0f0fu, m2 = 0x03030303u;
    uint32_t w0 = (a & m4) | (c & m2) << 4;               /* scales 0..3 */
    uint32_t w1 = (b & m4) | ((c >> 2) & m2) << 4;        /* 4..7 */
    uint32_t w2 = ((a >> 4) & m4) | ((c >> 4) & m2) << 4; /* 8..11 */
    uint32_t w3 = ((b >> 4) & m4) | ((c >> 6) & m2) << 4; /* 12..15 */
    return _mm_sub_epi8(_mm_setr_epi32((int)w0, (int)w1, (int)w2, (int)w3), _mm_set1_epi8(32));
}

/* Q3_K (§6.8): d · sc[i/16] · (q − 4), q = q2 | hbit << 2 in 0..7 (unsigned
 * codes, the −4 as 4 · Σ_g sc_g · Σxq_g per super-block, as Q6_K). */
QD_INLINE float qd_row_q3_k(const uint8_t *row, int64_t nsb, const vt_cpu_xq *x)
{
    const __m256i m3 = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), ao = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < nsb; sb++) {
        const uint8_t *p = row + (size_t)sb * 110;
        __m256 sl, sh, g[2];
        qd_i8x16_to_f(qd_q3_k_scales(p + 96), &sl, &sh);
        qd_group_scales(sl, sh, qd_f16(p + 108), x->d + 8 * sb, g);
        ao = qd_group_offsets(g, x->s16 + 16 * sb, ao);
        __m256i hm = qd_load256(p);
QD_UNROLL(8)
        for (int h = 0; h < 2; h++) {
            __m256i qs = qd_load256(p + 32 + 32 * h);
QD_UNROLL(8)
        for (int j = 0; j < 4; j++) {
                __m256i q2 = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * j), m3);
                const __m256i bit = _mm256_set1_epi8((char)(1 << (4 * h + j)));
                __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit);
                /* q2 | hbit << 2 in 0..7; the −4 is the offset term */
                __m256i w = _mm256_or_si256(q2, _mm256_and_si256(set, four));
                __m256i i32 = dot4(_mm256_setzero_si256(), w, QX(8 * sb + 4 * h + j));
                __m256 sc = qd_block_scale(g, 4 * h + j);
                if (j & 1)
                    a1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i32), sc, a1);
                else
                    a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i32), sc, a0);
            }
        }
    }
    return qd_hsum(_mm256_add_ps(a0, a1)) - 4.0f * qd_hsum(ao);
}

/* Q2_K (§6.7): d · (s & 15) · q − dmin · (s >> 4), s = scales[i/16]; the min
 * term Σ_g dmin · m_g · dx · Σxq_g as one vector FMA per 8 groups. */
QD_INLINE float qd_row_q2_k(const uint8_t *row, int64_t nsb, const vt_cpu_xq *x)
{
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), am = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < nsb; sb++) {
        const uint8_t *p = row + (size_t)sb * 84;
        __m128i s8 = _mm_loadu_si128((const __m128i *)(const void *)p);
        __m128i sc = _mm_and_si128(s8, _mm_set1_epi8(0x0F));
        __m128i mn = _mm_and_si128(_mm_srli_epi16(s8, 4), _mm_set1_epi8(0x0F));
        __m256 sl, sh, g[2], ml, mh, gm[2];
        qd_i8x16_to_f(sc, &sl, &sh);
        qd_group_scales(sl, sh, qd_f16(p + 80), x->d + 8 * sb, g);
        qd_i8x16_to_f(mn, &ml, &mh);
        qd_group_scales(ml, mh, qd_f16(p + 82), x->d + 8 * sb, gm);
        /* Σxq per group, as floats */
        __m256i s16 = _mm256_loadu_si256((const __m256i *)(const void *)(x->s16 + 16 * sb));
        __m256 bl = _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(s16)));
        __m256 bh = _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_extracti128_si256(s16, 1)));
        am = _mm256_fmadd_ps(gm[0], bl, am);
        am = _mm256_fmadd_ps(gm[1], bh, am);
QD_UNROLL(8)
        for (int h = 0; h < 2; h++) {
            __m256i qs = qd_load256(p + 16 + 32 * h);
QD_UNROLL(8)
        for (int j = 0; j < 4; j++) {
                __m256i w = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * j), m3);
                __m256i i32 = dot4(_mm256_setzero_si256(), w, QX(8 * sb + 4 * h + j));
                __m256 scv = qd_block_scale(g, 4 * h + j);
                if (j & 1)
                    a1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i32), scv, a1);
                else
                    a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i32), scv, a0);
            }
        }
    }
    return qd_hsum(_mm256_add_ps(a0, a1)) - qd_hsum(am);
}

/* IQ4_XS (§6.15): d · (ls − 32) · codebook[q] per sub-block of 32; the 8
 * 6-bit ls from 8 nibbles (scales_l) and 8 two-bit highs (scales_h). */
QD_INLINE float qd_row_iq4_xs(const uint8_t *row, int64_t nsb, const vt_cpu_xq *x)
{
    const __m256i lut = qd_lut_iq4();
    const __m256i hshift = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < nsb; sb++) {
        const uint8_t *p = row + (size_t)sb * 136;
        const uint8_t *qs = p + 8;
        uint32_t l4;
        memcpy(&l4, p + 4, 4);
        __m128i nib = _mm_unpacklo_epi8(_mm_cvtsi32_si128((int)(l4 & 0x0f0f0f0fu)),
                                        _mm_cvtsi32_si128((int)((l4 >> 4) & 0x0f0f0f0fu)));
        __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(vt_cpu_rd16(p + 2)), hshift),
                                      _mm256_set1_epi32(3));
        __m256i ls = _mm256_sub_epi32(_mm256_or_si256(_mm256_cvtepu8_epi32(nib), _mm256_slli_epi32(hi, 4)),
                                      _mm256_set1_epi32(32));
        __m256 sv = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(ls), _mm256_set1_ps(qd_f16(p))),
                                  _mm256_loadu_ps(x->d + 8 * sb));
QD_UNROLL(8)
        for (int s = 0; s < 8; s += 2) {
            __m256i w0 = _mm256_shuffle_epi8(lut, qd_nibbles16(qs + 16 * s));
            __m256i w1 = _mm256_shuffle_epi8(lut, qd_nibbles16(qs + 16 * s + 16));
            __m256i i0 = qd_dot_ss(_mm256_setzero_si256(), w0, QX(8 * sb + s));
            __m256i i1 = qd_dot_ss(_mm256_setzero_si256(), w1, QX(8 * sb + s + 1));
            a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i0), qd_lane(sv, s), a0);
            a1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i1), qd_lane(sv, s + 1), a1);
        }
    }
    return qd_hsum(_mm256_add_ps(a0, a1));
}

/* ---- the row loops ---- */

/* Rows are short (a few KiB) and each is one stream; the hardware prefetcher
 * loses time at every row start, so the rows QD_PF_ROWS ahead are touched
 * early (one prefetch per cache line). On the 2-core x86 machine the
 * 248320 x 2048 LM head went from 15.3 to 24.2 GB/s (Q6_K, 2 threads) and
 * Q4_K from 14.7 to 25.0 (bench_cpu_matvec 248320 2048); matrices that fit
 * the caches did not change. */
#define QD_PF_ROWS 4
QD_INLINE void qd_prefetch(const uint8_t *p, size_t len)
{
    for (size_t i = 0; i < len; i += 64) _mm_prefetch((const char *)(p + i), _MM_HINT_T0);
}

#define QD_ROWS(NAME, BLOCK_VALUES, EXPR)                                                       \
    static void QD_FN(NAME)(const uint8_t *w, size_t rb, int64_t n_in, const vt_cpu_xq *x,     \
                            float *y, int64_t n_rows)                                          \
    {                                                                                          \
        const int64_t nb = n_in / (BLOCK_VALUES);                                              \
        for (int64_t r = 0; r < n_rows; r++) {                                                 \
            const uint8_t *row = w + (size_t)r * rb;                                           \
            if (r + QD_PF_ROWS < n_rows) qd_prefetch(row + (size_t)QD_PF_ROWS * rb, rb);       \
            y[r] = EXPR;                                                                       \
        }                                                                                      \
    }
QD_ROWS(q8_0, 32, qd_row_q8_0(row, nb, x))
QD_ROWS(q4_0, 32, qd_row_q4_0(row, nb, x))
QD_ROWS(q4_1, 32, qd_row_q45_1(row, nb, x, 0))
QD_ROWS(q5_0, 32, qd_row_q5_0(row, nb, x))
QD_ROWS(q5_1, 32, qd_row_q45_1(row, nb, x, 1))
QD_ROWS(iq4_nl, 32, qd_row_iq4_nl(row, nb, x))
QD_ROWS(mxfp4, 32, qd_row_mxfp4(row, nb, x))
QD_ROWS(q2_k, 256, qd_row_q2_k(row, nb, x))
QD_ROWS(q4_k, 256, qd_row_q45_k(row, nb, x, 0))
QD_ROWS(q5_k, 256, qd_row_q45_k(row, nb, x, 1))
QD_ROWS(q3_k, 256, qd_row_q3_k(row, nb, x))
QD_ROWS(q6_k, 256, qd_row_q6_k(row, nb, x))
QD_ROWS(iq4_xs, 256, qd_row_iq4_xs(row, nb, x))
#undef QD_ROWS

static void QD_FN(mm_q4_k)(const uint8_t *w, size_t rb, int64_t n_in, const vt_cpu_xq *x,
                           int64_t n_tok, float *y, int64_t ldy, int64_t n_rows)
{
    qd_mm_q45_k(w, rb, n_in, x, n_tok, y, ldy, n_rows, 0);
}
static void QD_FN(mm_q5_k)(const uint8_t *w, size_t rb, int64_t n_in, const vt_cpu_xq *x,
                           int64_t n_tok, float *y, int64_t ldy, int64_t n_rows)
{
    qd_mm_q45_k(w, rb, n_in, x, n_tok, y, ldy, n_rows, 1);
}


const vt_cpu_qdot_set QDOT_SET = {
    .name = QDOT_NAME,
    .supported = QDOT_SUPPORTED,
    .quantize = QD_FN(quantize),
    .dot = {[VT_TYPE_Q8_0] = QD_FN(q8_0), [VT_TYPE_Q4_0] = QD_FN(q4_0),
            [VT_TYPE_Q4_1] = QD_FN(q4_1), [VT_TYPE_Q5_0] = QD_FN(q5_0),
            [VT_TYPE_Q5_1] = QD_FN(q5_1), [VT_TYPE_IQ4_NL] = QD_FN(iq4_nl),
            [VT_TYPE_MXFP4] = QD_FN(mxfp4), [VT_TYPE_Q2_K] = QD_FN(q2_k),
            [VT_TYPE_Q3_K] = QD_FN(q3_k), [VT_TYPE_Q4_K] = QD_FN(q4_k),
            [VT_TYPE_Q5_K] = QD_FN(q5_k), [VT_TYPE_Q6_K] = QD_FN(q6_k),
            [VT_TYPE_IQ4_XS] = QD_FN(iq4_xs), VT_CPU_LOWBIT_DOTS},
    .mm = {[VT_TYPE_Q4_K] = QD_FN(mm_q4_k), [VT_TYPE_Q5_K] = QD_FN(mm_q5_k)},
};
