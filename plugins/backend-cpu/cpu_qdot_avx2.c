/*
 * cpu_qdot_avx2.c - the "avx2" integer dot products of the decode path
 * (cpu_qdot_body.h): vpmaddubsw + vpmaddwd. Compiled for AVX2/FMA/F16C in this
 * file only; used when the CPU has all three.
 */
#include "cpu_internal.h"

#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

#include <immintrin.h>

#define QD_FN(n) qdot_avx2_##n
#define QDOT_SET vt_cpu_qdot_avx2
#define QDOT_NAME "avx2"

static int qdot_avx2_supported(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && vt_cpu_has_f16c();
}
#define QDOT_SUPPORTED qdot_avx2_supported

/* acc + Σ of 4 products u·s per int32 lane; |u·s pair sums| <= 2·128·127 < 2^15: no saturation */
static inline __m256i dot4(__m256i acc, __m256i u, __m256i s)
{
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
}

#include "cpu_qdot_body.h"

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else /* not x86-64: no integer decode path */

static int qdot_none(void) { return 0; }
const vt_cpu_qdot_set vt_cpu_qdot_avx2 = {.name = "avx2", .supported = qdot_none};

#endif
