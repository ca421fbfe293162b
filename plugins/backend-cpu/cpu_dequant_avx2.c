/*
 * cpu_dequant_avx2.c - AVX2 dequantisation of the types that dominate
 * quantised checkpoints (Q4_K, Q5_K, Q6_K), for the float path's
 * panels (prefill): bit-identical to the scalar reference (cpu_dequant.c),
 * because every value is formed with the same float operations in the same
 * order (d·sc, then ·q, then − dmin·m), one rounding each. (Q8_0 has its
 * own float kernels, cpu_simd_body.h.) The file is
 * compiled for AVX2 and F16C but not FMA, so the compiler cannot fuse a
 * multiply and a subtraction into one rounding. Other types, and CPUs
 * without AVX2, take the scalar reference. tests/test_cpu_quant_kernels.c
 * checks the bits against it.
 */
#include "cpu_internal.h"

#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,f16c,no-fma")
#endif

#include <immintrin.h>

static inline float f16(const uint8_t *p) { return _cvtsh_ss(vt_cpu_rd16(p)); }

/* 8 unsigned bytes at p (or a vector's low 8 bytes) as 8 floats */
static inline __m256 u8x8(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); }

static void deq_q45_k(const uint8_t *b, int q5, float *y)
{
    const float d = f16(b), dmin = f16(b + 2);
    const uint8_t *sc = b + 4, *qh = b + 16, *qs = b + (q5 ? 48 : 16);
    for (int s = 0; s < 8; s++) {
        int scale, m;
        vt_cpu_k4_scale_min(sc, s, &scale, &m);
        const __m256 ds = _mm256_set1_ps(d * (float)scale), dm = _mm256_set1_ps(dmin * (float)m);
        __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(qs + 32 * (s / 2)));
        if (s & 1) v = _mm256_srli_epi16(v, 4);
        v = _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
        if (q5) {
            __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)qh);
            __m256i bit = _mm256_set1_epi8((char)(1 << s));
            h = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h, bit), bit), _mm256_set1_epi8(0x10));
            v = _mm256_or_si256(v, h);
        }
        __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
        __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
        for (int k = 0; k < 4; k++)
            _mm256_storeu_ps(y + 32 * s + 8 * k, _mm256_sub_ps(_mm256_mul_ps(ds, u8x8(parts[k])), dm));
    }
}

static void deq_q6_k(const uint8_t *b, float *y)
{
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *scales = (const int8_t *)(b + 192);
    const float d = f16(b + 208);
    for (int h = 0; h < 2; h++) {
        for (int c = 0; c < 4; c++) {
            __m256i lb = _mm256_loadu_si256((const __m256i *)(const void *)(ql + 64 * h + 32 * (c & 1)));
            __m256i low = c < 2 ? lb : _mm256_srli_epi16(lb, 4);
            low = _mm256_and_si256(low, _mm256_set1_epi8(0x0F));
            __m256i hb = _mm256_loadu_si256((const __m256i *)(const void *)(qh + 32 * h));
            hb = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * c), _mm256_set1_epi8(3));
            __m256i q = _mm256_sub_epi8(_mm256_or_si256(low, _mm256_slli_epi16(hb, 4)), _mm256_set1_epi8(32));
            __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
            __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
            float *o = y + 128 * h + 32 * c;
            for (int k = 0; k < 4; k++) {
                /* values 8k..8k+7 of the 32: scale index (128h + 32c + 8k) / 16 */
                const __m256 dsc = _mm256_set1_ps(d * (float)scales[8 * h + 2 * c + k / 2]);
                __m256 qf = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[k]));
                _mm256_storeu_ps(o + 8 * k, _mm256_mul_ps(dsc, qf));
            }
        }
    }
}

static int has_avx2(void) { return __builtin_cpu_supports("avx2") && vt_cpu_has_f16c(); }

void vt_cpu_dequant_row_fast(uint32_t type, const void *src, int64_t n, float *dst)
{
    static int cached = -1; /* CPUID once; every thread computes the same value */
    int ok = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (ok < 0) {
        ok = has_avx2();
        __atomic_store_n(&cached, ok, __ATOMIC_RELAXED);
    }
    const uint8_t *p = src;
    switch (ok ? type : VT_TYPE_COUNT) {
    case VT_TYPE_Q4_K: for (int64_t b = 0; b < n / 256; b++) deq_q45_k(p + 144 * b, 0, dst + 256 * b); return;
    case VT_TYPE_Q5_K: for (int64_t b = 0; b < n / 256; b++) deq_q45_k(p + 176 * b, 1, dst + 256 * b); return;
    case VT_TYPE_Q6_K: for (int64_t b = 0; b < n / 256; b++) deq_q6_k(p + 210 * b, dst + 256 * b); return;
    default: vt_cpu_dequant_row(type, src, n, dst); return;
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else

void vt_cpu_dequant_row_fast(uint32_t type, const void *src, int64_t n, float *dst)
{
    vt_cpu_dequant_row(type, src, n, dst);
}

#endif
