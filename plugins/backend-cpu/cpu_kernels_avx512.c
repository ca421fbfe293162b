/*
 * cpu_kernels_avx512.c - the "avx512" kernel set: cpu_simd_body.h on 16-lane
 * AVX-512F vectors (plus AVX2/FMA/F16C for scalar conversions). Only
 * AVX-512F instructions are used (no BW/DQ/VL), so every AVX-512 CPU runs
 * it. Compiled for that target in this file only; chosen when
 * __builtin_cpu_supports reports avx512f. The lane logic is shared with the
 * "avx2w16" set, which tests run on CPUs without AVX-512.
 */
#include "cpu_internal.h"

#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma,f16c")
#endif

#include "cpu_simd_avx2.h"

#define VW 16
typedef __m512 vf;
static inline vf v_zero(void) { return _mm512_setzero_ps(); }
static inline vf v_set1(float f) { return _mm512_set1_ps(f); }
static inline vf v_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void v_store(float *p, vf v) { _mm512_storeu_ps(p, v); }
static inline vf v_add(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf v_sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
static inline vf v_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline vf v_div(vf a, vf b) { return _mm512_div_ps(a, b); }
static inline vf v_max(vf a, vf b) { return _mm512_max_ps(a, b); }
static inline vf v_fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline float v_hsum(vf v) { return _mm512_reduce_add_ps(v); }
static inline float v_hmax(vf v) { return _mm512_reduce_max_ps(v); }
/* lanes i and i + 8 first, then the 8-lane sums of a8_hsum4 */
static inline __m256 fold8(vf v)
{
    return _mm256_add_ps(_mm512_castps512_ps256(v),
                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}
static inline void v_hsum4(vf a, vf b, vf c, vf d, float out[4])
{
    a8_hsum4(fold8(a), fold8(b), fold8(c), fold8(d), out);
}
static inline vf v_load_f16(const uint8_t *p)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
}
static inline vf v_load_bf16(const uint8_t *p)
{
    __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
}
static inline vf v_load_i8(const uint8_t *p)
{
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)));
}

/* exp: same algorithm and constants as a8_exp (cpu_simd_avx2.h). */
static inline vf v_exp(vf x)
{
    x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
    x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
    vf n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    vf r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    vf p = _mm512_set1_ps(1.9875691500E-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    __m512i ni = _mm512_cvtps_epi32(n);
    __m512i n1 = _mm512_srai_epi32(ni, 1);
    __m512i n2 = _mm512_sub_epi32(ni, n1);
    const __m512i bias = _mm512_set1_epi32(127);
    vf s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
    vf s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
    return _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
}

/* tanh: same as a8_tanh; sign handling through integer ops (AVX-512F has no and_ps). */
static inline vf v_tanh(vf x)
{
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    __m512i xi = _mm512_castps_si512(x);
    vf ax = _mm512_castsi512_ps(_mm512_andnot_si512(sign, xi));
    vf e = v_exp(_mm512_add_ps(ax, ax));
    vf big = _mm512_sub_ps(_mm512_set1_ps(1.0f),
                           _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
    big = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(big), _mm512_and_si512(sign, xi)));
    vf z = _mm512_mul_ps(x, x);
    vf p = _mm512_set1_ps(-5.70498872745E-3f);
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(2.06390887954E-2f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-5.37397155531E-2f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(1.33314422036E-1f));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-3.33332819422E-1f));
    vf small = _mm512_fmadd_ps(_mm512_mul_ps(p, z), x, x);
    __mmask16 is_small = _mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.625f), _CMP_LT_OQ);
    return _mm512_mask_blend_ps(is_small, big, small);
}

static inline float f16_scalar(uint16_t h) { return _cvtsh_ss(h); }

static inline double sumsq_d(const float *x, int64_t n)
{
    __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        __m512d l = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
        __m512d h = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
        a0 = _mm512_fmadd_pd(l, l, a0);
        a1 = _mm512_fmadd_pd(h, h, a1);
    }
    double sum = _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
    for (; i < n; i++) sum += (double)x[i] * (double)x[i];
    return sum;
}

/* matmul register tile: 4 rows × 6 tokens = 24 accumulators + 4 weight vectors
 * + 1 input vector, within the 32 zmm registers. A chunk of 2 (3) tokens: 8
 * rows × 2 (3) tokens + 2 (3) input vectors + 1 weight vector; Q8_0 keeps a
 * scale per row as well: 8 (6) rows. */
#define MM_R 4
#define MM_NT 6
#define MM_R2 8
#define MM_R3 8
#define MM_R2Q 8
#define MM_R3Q 6

static int supported(void);

#define KSET vt_cpu_kernels_avx512
#define KNAME "avx512"
#define KISA "AVX-512F (+FMA, F16C), 16 float lanes"
#define KSUPPORTED supported
#include "cpu_simd_body.h"

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

/* Outside the target region: runs on any CPU. */
static int supported(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
           __builtin_cpu_supports("fma") && vt_cpu_has_f16c();
}

#else

static int unsupported(void) { return 0; }
const vt_cpu_kernels vt_cpu_kernels_avx512 = {.name = "avx512", .isa = "(not on this architecture)",
                                              .lanes = 16, .supported = unsupported};
#endif
