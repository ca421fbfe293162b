/*
 * cpu_kernels_avx2w16.c - the "avx2w16" kernel set: cpu_simd_body.h with
 * 16-lane vectors made of two AVX2 registers. A test instantiation: it runs
 * the exact lane logic of the AVX-512 set (16-lane loops, tails, Q8_0 blocks
 * as two vectors) on a CPU without AVX-512, so tests/test_cpu_simd.c can
 * check that logic where no AVX-512 machine is at hand. Never chosen by
 * "auto".
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

#define VW 16
typedef struct {
    __m256 lo, hi;
} vf;
static inline vf mk(__m256 lo, __m256 hi)
{
    vf r = {lo, hi};
    return r;
}
static inline vf v_zero(void) { return mk(_mm256_setzero_ps(), _mm256_setzero_ps()); }
static inline vf v_set1(float f) { return mk(_mm256_set1_ps(f), _mm256_set1_ps(f)); }
static inline vf v_load(const float *p) { return mk(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)); }
static inline void v_store(float *p, vf v)
{
    _mm256_storeu_ps(p, v.lo);
    _mm256_storeu_ps(p + 8, v.hi);
}
static inline vf v_add(vf a, vf b) { return mk(_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)); }
static inline vf v_sub(vf a, vf b) { return mk(_mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi)); }
static inline vf v_mul(vf a, vf b) { return mk(_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)); }
static inline vf v_div(vf a, vf b) { return mk(_mm256_div_ps(a.lo, b.lo), _mm256_div_ps(a.hi, b.hi)); }
static inline vf v_max(vf a, vf b) { return mk(_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi)); }
static inline vf v_fma(vf a, vf b, vf c)
{
    return mk(_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi));
}
static inline float v_hsum(vf v) { return a8_hsum(_mm256_add_ps(v.lo, v.hi)); }
static inline float v_hmax(vf v) { return a8_hmax(_mm256_max_ps(v.lo, v.hi)); }
/* lanes i and i + 8 first, as the AVX-512 set does */
static inline void v_hsum4(vf a, vf b, vf c, vf d, float out[4])
{
    a8_hsum4(_mm256_add_ps(a.lo, a.hi), _mm256_add_ps(b.lo, b.hi), _mm256_add_ps(c.lo, c.hi),
             _mm256_add_ps(d.lo, d.hi), out);
}
static inline vf v_load_f16(const uint8_t *p) { return mk(a8_load_f16(p), a8_load_f16(p + 16)); }
static inline vf v_load_bf16(const uint8_t *p) { return mk(a8_load_bf16(p), a8_load_bf16(p + 16)); }
static inline vf v_load_i8(const uint8_t *p) { return mk(a8_load_i8(p), a8_load_i8(p + 8)); }
static inline vf v_exp(vf x) { return mk(a8_exp(x.lo), a8_exp(x.hi)); }
static inline vf v_tanh(vf x) { return mk(a8_tanh(x.lo), a8_tanh(x.hi)); }
static inline float f16_scalar(uint16_t h) { return _cvtsh_ss(h); }
static inline double sumsq_d(const float *x, int64_t n) { return a8_sumsq_d(x, n); }

/* the AVX-512 set's matmul tile, so its tile and tail logic is what runs here
 * (it spills registers: this set is for tests) */
#define MM_R 4
#define MM_NT 6
#define MM_R2 8
#define MM_R3 8
#define MM_R2Q 8
#define MM_R3Q 6

static int supported(void);

#define KSET vt_cpu_kernels_avx2w16
#define KNAME "avx2w16"
#define KISA "16-lane body on pairs of AVX2 registers (test instantiation)"
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

#else

static int unsupported(void) { return 0; }
const vt_cpu_kernels vt_cpu_kernels_avx2w16 = {.name = "avx2w16", .isa = "(not on this architecture)",
                                               .lanes = 16, .supported = unsupported};
#endif
