/*
 * cpu_kernels_avx2.c - the "avx2" kernel set: cpu_simd_body.h on 8-lane
 * AVX2 vectors, with FMA and F16C. Compiled for that target here only
 * (#pragma GCC target), so the build needs no global -mavx flags; the set is
 * used only when __builtin_cpu_supports says the CPU has all three.
 */
#include "cpu_internal.h"

#if defined(__x86_64__) || defined(__i386__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

#include "cpu_simd_avx2.h"

#define VW 8
typedef __m256 vf;
static inline vf v_zero(void) { return _mm256_setzero_ps(); }
static inline vf v_set1(float f) { return _mm256_set1_ps(f); }
static inline vf v_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void v_store(float *p, vf v) { _mm256_storeu_ps(p, v); }
static inline vf v_add(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline vf v_sub(vf a, vf b) { return _mm256_sub_ps(a, b); }
static inline vf v_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline vf v_div(vf a, vf b) { return _mm256_div_ps(a, b); }
static inline vf v_max(vf a, vf b) { return _mm256_max_ps(a, b); }
static inline vf v_fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline float v_hsum(vf v) { return a8_hsum(v); }
static inline float v_hmax(vf v) { return a8_hmax(v); }
static inline void v_hsum4(vf a, vf b, vf c, vf d, float out[4]) { a8_hsum4(a, b, c, d, out); }
static inline vf v_load_f16(const uint8_t *p) { return a8_load_f16(p); }
static inline vf v_load_bf16(const uint8_t *p) { return a8_load_bf16(p); }
static inline vf v_load_i8(const uint8_t *p) { return a8_load_i8(p); }
static inline vf v_exp(vf x) { return a8_exp(x); }
static inline vf v_tanh(vf x) { return a8_tanh(x); }
static inline float f16_scalar(uint16_t h) { return _cvtsh_ss(h); }
static inline double sumsq_d(const float *x, int64_t n) { return a8_sumsq_d(x, n); }

/* matmul register tile: 3 rows × 4 tokens = 12 accumulators + 3 weight vectors
 * + 1 input vector = the 16 ymm registers. A chunk of 2 (3) tokens: 6 (4) rows
 * × 2 (3) tokens + 2 (3) input vectors + 1 weight vector; Q8_0 keeps a scale
 * per row as well: 4 (3) rows. */
#define MM_R 3
#define MM_NT 4
#define MM_R2 6
#define MM_R3 4
#define MM_R2Q 4
#define MM_R3Q 3

static int supported(void);

#define KSET vt_cpu_kernels_avx2
#define KNAME "avx2"
#define KISA "AVX2+FMA+F16C, 8 float lanes"
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
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           vt_cpu_has_f16c();
}

#else /* not x86 */

static int unsupported(void) { return 0; }
const vt_cpu_kernels vt_cpu_kernels_avx2 = {.name = "avx2", .isa = "AVX2 (not on this architecture)",
                                            .lanes = 8, .supported = unsupported};
#endif
