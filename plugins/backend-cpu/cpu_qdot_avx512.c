/*
 * cpu_qdot_avx512.c - the "avx512vnni" integer dot products of the decode
 * path (cpu_qdot_body.h): AVX512-VNNI's vpdpbusd (u8 × s8, four products
 * summed into each int32 lane in one instruction) on 256-bit vectors (VL).
 * Decode is bound by memory, not by vector width: the gain over AVX2 is the
 * two instructions vpdpbusd replaces. Same integers as the AVX2 set.
 * Compiled for that target in this file only; used when the CPU reports
 * avx512f, avx512bw, avx512vl and avx512vnni.
 */
#include "cpu_internal.h"

#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")
#endif

#include <immintrin.h>

#define QD_FN(n) qdot_avx512_##n
#define QDOT_SET vt_cpu_qdot_avx512vnni
#define QDOT_NAME "avx512vnni"

static int qdot_avx512_supported(void)
{
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
           __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && vt_cpu_has_f16c();
}
#define QDOT_SUPPORTED qdot_avx512_supported

static inline __m256i dot4(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }

#include "cpu_qdot_body.h"

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else

static int qdot_none(void) { return 0; }
const vt_cpu_qdot_set vt_cpu_qdot_avx512vnni = {.name = "avx512vnni", .supported = qdot_none};

#endif
