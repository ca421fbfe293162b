/*
 * test_cpu_common.h - helpers for backend-cpu's suites (test_cpu_*.c,
 * test_quant.c): a host table that records the last error, contexts with a
 * chosen kernel set, a seeded RNG, and the test's own encoders for weight
 * types (float -> F16/BF16/Q8_0 bytes), written from gguf.md §6 independently
 * of the backend's code.
 */
#ifndef VT_TEST_CPU_COMMON_H
#define VT_TEST_CPU_COMMON_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "cpu_internal.h"

/* ---- host table ---- */

static _Thread_local char tc_err[1024];

static void tc_log(vt_log_level level, const char *fmt, ...)
{
    if (level > VT_LOG_INFO || !getenv("VT_TEST_VERBOSE")) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static void tc_set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tc_err, sizeof tc_err, fmt, ap);
    va_end(ap);
}

static const char *tc_last_error(void) { return tc_err; }

static const vt_host_api tc_host = {
    .struct_size = sizeof(vt_host_api),
    .abi_major = VT_ABI_MAJOR,
    .abi_minor = VT_ABI_MINOR,
    .log = tc_log,
    .set_error = tc_set_error,
    .last_error = tc_last_error,
};

static inline const vt_backend_api *tc_api(void) { return vt_cpu_backend_api(); }

/* A context with kernel set `kernels` ("scalar", "avx2", ...) and n_threads. */
static inline vt_backend_ctx *tc_ctx(const char *kernels, int n_threads)
{
    vt_backend_params p = {sizeof p, 0, n_threads, kernels, &tc_host};
    vt_backend_ctx *ctx = NULL;
    vt_status st = tc_api()->init(&p, &ctx);
    if (st != VT_OK)
        fail_msg("init(kernels=%s, n_threads=%d): %s", kernels ? kernels : "(null)", n_threads, tc_err);
    return ctx;
}

/* A context running the SIMD set `name`, or NULL (after printing why) when this CPU lacks it. */
static inline vt_backend_ctx *tc_simd_ctx(const char *name, int n_threads)
{
    const vt_cpu_kernels *k = vt_cpu_kernels_find(name);
    assert_non_null(k);
    if (!k->supported()) {
        fprintf(stderr, "[  SKIP    ] kernel set '%s' (%s): this CPU does not support it\n", name,
                k->isa);
        return NULL;
    }
    vt_backend_ctx *ctx = tc_ctx("scalar", n_threads);
    vt_cpu_ctx_set_kernels(ctx, k);
    return ctx;
}

/* ---- random numbers (xorshift64*, seeded: failures reproduce) ---- */

typedef struct {
    uint64_t s;
} tc_rng;

static inline uint64_t tc_next(tc_rng *r)
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 2685821657736338717ull;
}

/* uniform in [lo, hi) */
static inline float tc_unif(tc_rng *r, float lo, float hi)
{
    return lo + (hi - lo) * (float)((tc_next(r) >> 40) * (1.0 / 16777216.0));
}

static inline void tc_fill(tc_rng *r, float *x, int64_t n, float lo, float hi)
{
    for (int64_t i = 0; i < n; i++) x[i] = tc_unif(r, lo, hi);
}

static inline float *tc_alloc_f(int64_t n)
{
    float *p = calloc((size_t)(n > 0 ? n : 1), sizeof(float));
    assert_non_null(p);
    return p;
}

/* ---- the test's own encoders (gguf.md §6.1, §6.2) ---- */

/* float -> IEEE half, round to nearest even (subnormals, overflow to inf). */
static inline uint16_t tc_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ef = (x >> 23) & 0xffu, m = x & 0x7fffffu;
    if (ef == 0xff) return (uint16_t)(sign | 0x7c00u | (m ? 0x200u : 0));
    int32_t e = (int32_t)ef - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10) return (uint16_t)sign;
        m |= 0x800000u;
        int sh = 14 - e;
        uint32_t hm = m >> sh, rem = m & ((1u << sh) - 1), half = 1u << (sh - 1);
        if (rem > half || (rem == half && (hm & 1))) hm++;
        return (uint16_t)(sign | hm);
    }
    uint32_t hm = m >> 13, rem = m & 0x1fffu;
    uint32_t h = sign | ((uint32_t)e << 10) | hm;
    if (rem > 0x1000u || (rem == 0x1000u && (hm & 1))) h++;
    return (uint16_t)h;
}

/* Half -> float by the formula of gguf.md §6.1, in double (exact), for checking. */
static inline float tc_f16_to_f32(uint16_t h)
{
    int s = h >> 15, E = (h >> 10) & 31, M = h & 1023;
    double v;
    if (E == 0)
        v = ldexp((double)M, -24);
    else if (E == 31)
        v = M ? NAN : INFINITY;
    else
        v = ldexp(1.0 + M / 1024.0, E - 15);
    return (float)(s ? -v : v);
}

static inline uint16_t tc_f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t r = x + 0x7fffu + ((x >> 16) & 1u); /* round to nearest even (finite inputs) */
    return (uint16_t)(r >> 16);
}

static inline float tc_bf16_to_f32(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* Encode n_out rows of n_in floats as `type`; returns malloc-ed bytes and sets *rb. */
static inline uint8_t *tc_encode(uint32_t type, const float *w, int64_t n_out, int64_t n_in,
                                 size_t *rb)
{
    *rb = (size_t)vt_type_row_bytes(type, (uint64_t)n_in);
    assert_true(*rb > 0);
    uint8_t *out = calloc((size_t)n_out * *rb + 64, 1);
    assert_non_null(out);
    for (int64_t r = 0; r < n_out; r++) {
        uint8_t *row = out + (size_t)r * *rb;
        const float *src = w + r * n_in;
        switch (type) {
        case VT_TYPE_F32: memcpy(row, src, (size_t)n_in * 4); break;
        case VT_TYPE_F16:
            for (int64_t i = 0; i < n_in; i++) {
                uint16_t h = tc_f32_to_f16(src[i]);
                memcpy(row + 2 * i, &h, 2);
            }
            break;
        case VT_TYPE_BF16:
            for (int64_t i = 0; i < n_in; i++) {
                uint16_t h = tc_f32_to_bf16(src[i]);
                memcpy(row + 2 * i, &h, 2);
            }
            break;
        case VT_TYPE_Q8_0:
            for (int64_t b = 0; b < n_in / 32; b++) {
                uint8_t *blk = row + b * 34;
                float amax = 0.0f;
                for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(src[b * 32 + i]));
                float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
                uint16_t dh = tc_f32_to_f16(d);
                memcpy(blk, &dh, 2);
                for (int i = 0; i < 32; i++) blk[2 + i] = (uint8_t)(int8_t)lroundf(src[b * 32 + i] * id);
            }
            break;
        default: fail_msg("tc_encode: type %u", type);
        }
    }
    return out;
}

/* The test's own dequantisation of one element (gguf.md §6.1/§6.2). */
static inline float tc_decode(uint32_t type, const uint8_t *row, int64_t i)
{
    uint16_t h;
    switch (type) {
    case VT_TYPE_F32: {
        float f;
        memcpy(&f, row + 4 * i, 4);
        return f;
    }
    case VT_TYPE_F16: memcpy(&h, row + 2 * i, 2); return tc_f16_to_f32(h);
    case VT_TYPE_BF16: memcpy(&h, row + 2 * i, 2); return tc_bf16_to_f32(h);
    case VT_TYPE_Q8_0: {
        const uint8_t *blk = row + (i / 32) * 34;
        memcpy(&h, blk, 2);
        return tc_f16_to_f32(h) * (float)(int8_t)blk[2 + i % 32];
    }
    }
    fail_msg("tc_decode: type %u", type);
    return 0.0f;
}

static const uint32_t tc_types[4] = {VT_TYPE_F32, VT_TYPE_F16, VT_TYPE_BF16, VT_TYPE_Q8_0};

/* unit roundoff of float32 */
#define TC_U (1.0 / 16777216.0)

#endif
