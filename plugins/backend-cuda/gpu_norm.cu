/*
 * gpu_norm.cu - rms_norm, l2_norm and add_rms_norm (ABI 1.3) of backend-cuda and backend-rocm
 * (vt/backend.h: shapes, strides; formula: qwen35moe.md §5.3, the CPU's
 * plugins/backend-cpu/cpu_kernels_scalar.c), for nvcc and hipcc.
 *
 * One block per row (short rows of a multi-row call: one warp per row): the
 * sum of squares in double, the scale rounded once to
 * float (rms: 1/sqrt(mean + eps); l2: 1/max(||x||, eps)), then y = x·scale
 * (·w) in float with no fused multiply-add, as the CPU: the same bits but for
 * the order of the double additions.
 *
 * A one-row rms_norm whose output the int8 matvecs may read next
 * (gpu_matvec.cu) also rounds that output to int8 blocks (gpu_qdot.cuh) into
 * ctx->xq_dev and marks it held (vt_gpu_xq_keep), so the matmuls that follow
 * skip their rounding launch: the rounding of the values just stored, the bits
 * k_quantize_x would give.
 */
#include <limits.h>
#include <math.h>

#include "gpu_internal.h"
#include "gpu_qdot.cuh"

#define NORM_THREADS 256
/* values per thread held in registers between the passes */
#define NORM_CACHE 16
/* one-row norms: 1024 threads, 4 values each (n <= 4096), so that each warp's
 * share of the reduction and of the rounding is short (H200, Gemma anchor
 * shape: decode 844 tok/s with 1024 threads, 832 with 512 x 8, 792 with 256 x 16) */
#define NORM_ROW_THREADS 1024
#define NORM_ROW_CACHE 4

/* Σ v over the block, every thread gets it: warp shuffles, then the warps'
 * partial sums by one more shuffle tree (NT/32 <= 32 warps). */
template <int NT> static __device__ __forceinline__ double norm_block_sum(double v)
{
    __shared__ double part[NT / 32];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    v = warp_sum_d(v);
    if (NT == 32) return v;
    if (lane == 0) part[wid] = v;
    __syncthreads();
    v = lane < NT / 32 ? part[lane] : 0.0;
    return warp_sum_d(v);
}

/* Rows of at most NC·NT values: element i of the row is thread i % NT's value
 * i / NT, so a warp's 32 lanes hold one 32-value block per value index (the
 * rounding's blocks). w's values are loaded before the reduction so that
 * their latency overlaps it. q, qd, qs (rms only, n a multiple of 32): the
 * int8 rounding of y as well. */
template <int NT, int NC, bool ADD>
static __global__ void __launch_bounds__(NT)
k_norm_cached(float *__restrict__ x, int64_t ldx, const float *__restrict__ a, int64_t lda,
              const float *__restrict__ gate, const float *__restrict__ w,
              float *__restrict__ y, int64_t ldy, int n, float eps, int l2,
              int8_t *__restrict__ q, float *__restrict__ qd, float *__restrict__ qs)
{
    float *xr = x + (int64_t)blockIdx.x * ldx;
    float *yr = y + (int64_t)blockIdx.x * ldy;
    const int tid = threadIdx.x;
    float v[NC], wv[NC];
    if (ADD) { /* add_rms_norm: x += s·a first (mul_rows and binary(ADD)'s roundings) */
        const float *ar = a + (int64_t)blockIdx.x * lda;
        const float sg = gate ? unary_ref(VT_UNARY_SIGMOID, gate[blockIdx.x]) : 1.0f;
#pragma unroll
        for (int k = 0; k < NC; k++) {
            const int i = tid + k * NT;
            if (i < n) {
                v[k] = __fadd_rn(xr[i], gate ? __fmul_rn(ar[i], sg) : ar[i]);
                xr[i] = v[k];
            } else {
                v[k] = 0.0f;
            }
        }
        if (!y) return; /* uniform: only the addition */
    }
#pragma unroll
    for (int k = 0; k < NC; k++) {
        const int i = tid + k * NT;
        if (!ADD) v[k] = i < n ? xr[i] : 0.0f;
        wv[k] = w && i < n ? w[i] : 1.0f;
    }
    double s = 0.0;
#pragma unroll
    for (int k = 0; k < NC; k++)
        if (tid + k * NT < n) s += (double)v[k] * (double)v[k];
    s = norm_block_sum<NT>(s); /* every read of the row happens before its barrier */
    const float sc = l2 ? (float)(1.0 / fmax(sqrt(s), (double)eps))
                        : (float)(1.0 / sqrt(s / (double)n + (double)eps));
#pragma unroll
    for (int k = 0; k < NC; k++) {
        const int i = tid + k * NT;
        if (k * NT >= n) break; /* uniform */
        const float t = __fmul_rn(v[k], sc);
        const float o = w ? __fmul_rn(t, wv[k]) : t;
        if (i < n) yr[i] = o;
        if (q) { /* n % 32 == 0: the warp's block is whole or absent */
            const int b = i >> 5;
            if (32 * b < n) qd_quantize32(o, q + 32 * b, qd + b, qs + b);
        }
    }
}

/* A one-row norm of n <= 4096 values: NORM_ROW_THREADS x NORM_ROW_CACHE
 * (H200, Qwen / Gemma anchor decode with 1024 threads 1139 / 861 tok/s, with
 * 512 x 8 1107 / 829, with 256 x 16 1102 / 787). */
template <bool ADD>
static void launch_row(vt_backend_ctx *ctx, float *x, int64_t ldx, const float *a, int64_t lda,
                       const float *gate, const float *w, float *y, int64_t ldy, int n,
                       float eps, int l2, int8_t *q, float *qd, float *qs)
{
    k_norm_cached<NORM_ROW_THREADS, NORM_ROW_CACHE, ADD><<<1, NORM_ROW_THREADS, 0, VT_ST>>>(
        x, ldx, a, lda, gate, w, y, ldy, n, eps, l2, q, qd, qs);
}

/* Short rows (n <= 32·NCW), several of them: one warp per row, NORM_WARP_ROWS
 * rows per block, lane l holding values l, l + 32, ...; the sum of squares
 * by one warp reduction (no shared memory, no barrier): per-head norms
 * (q/k norms, the DeltaNet output norm, L2 norms of key heads). */
#define NORM_WARP_ROWS 8
#define NORM_WARP_CACHE 16
static __global__ void __launch_bounds__(32 * NORM_WARP_ROWS)
k_norm_warp(const float *__restrict__ x, int64_t ldx, const float *__restrict__ w,
            float *__restrict__ y, int64_t ldy, int64_t n_rows, int n, float eps, int l2)
{
    const int64_t r = (int64_t)blockIdx.x * NORM_WARP_ROWS + (threadIdx.x >> 5);
    if (r >= n_rows) return; /* whole warps */
    const int lane = threadIdx.x & 31;
    const float *xr = x + r * ldx;
    float *yr = y + r * ldy;
    float v[NORM_WARP_CACHE];
    double s = 0.0;
#pragma unroll
    for (int k = 0; k < NORM_WARP_CACHE; k++) {
        const int i = lane + 32 * k;
        v[k] = i < n ? xr[i] : 0.0f;
        if (i < n) s += (double)v[k] * (double)v[k];
    }
    s = warp_sum_d(s);
    const float sc = l2 ? (float)(1.0 / fmax(sqrt(s), (double)eps))
                        : (float)(1.0 / sqrt(s / (double)n + (double)eps));
#pragma unroll
    for (int k = 0; k < NORM_WARP_CACHE; k++) {
        const int i = lane + 32 * k;
        if (i < n) {
            const float t = __fmul_rn(v[k], sc);
            yr[i] = w ? __fmul_rn(t, w[i]) : t;
        }
    }
}

/* Longer rows: two passes over global memory. */
static __global__ void __launch_bounds__(NORM_THREADS)
k_norm_long(const float *x, int64_t ldx, const float *w, float *y, int64_t ldy, int64_t n,
            float eps, int l2)
{
    const float *xr = x + (int64_t)blockIdx.x * ldx;
    float *yr = y + (int64_t)blockIdx.x * ldy;
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += (double)xr[i] * (double)xr[i];
    s = norm_block_sum<NORM_THREADS>(s);
    float sc = l2 ? (float)(1.0 / fmax(sqrt(s), (double)eps))
                  : (float)(1.0 / sqrt(s / (double)n + (double)eps));
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        float t = __fmul_rn(xr[i], sc);
        yr[i] = w ? __fmul_rn(t, w[i]) : t;
    }
}

static vt_status norm_op(vt_backend_ctx *ctx, const char *op, const float *x, int64_t ldx,
                         const float *w, float *y, int64_t ldy, int64_t n_rows, int64_t n,
                         float eps, int l2)
{
    CHECK(n_rows >= 0 && n > 0, "%s: bad shape [%lld, %lld]", op, (long long)n_rows, (long long)n);
    if (n_rows == 0) return VT_OK;
    CHECK(x && y, "%s: x or y is NULL", op);
    CHECK(ldx >= n && ldy >= n, "%s: row strides %lld/%lld shorter than n %lld", op,
          (long long)ldx, (long long)ldy, (long long)n);
    CHECK(eps >= 0.0f, "%s: eps %g < 0", op, (double)eps);
    CHECK(n_rows <= INT_MAX, "%s: %lld rows exceed the grid", op, (long long)n_rows);
    TRY(vt_gpu_select_device(ctx, op));
    if (n > (int64_t)NORM_CACHE * NORM_THREADS) {
        k_norm_long<<<(unsigned)n_rows, NORM_THREADS, 0, VT_ST>>>(x, ldx, w, y, ldy, n, eps, l2);
        return launched(ctx, op);
    }
    if (n_rows > 1 && n <= 32 * NORM_WARP_CACHE) {
        k_norm_warp<<<(unsigned)ceil_div(n_rows, NORM_WARP_ROWS), 32 * NORM_WARP_ROWS, 0, VT_ST>>>(
            x, ldx, w, y, ldy, n_rows, (int)n, eps, l2);
        return launched(ctx, op);
    }
    int8_t *q = NULL;
    float *qd = NULL, *qs = NULL;
    const int round = !l2 && n_rows == 1 && n % 32 == 0 && vt_gpu_xq_view(ctx, n, &q, &qd, &qs);
    float *xw = const_cast<float *>(x); /* read only: ADD is false */
    if (n_rows == 1 && n <= (int64_t)NORM_ROW_CACHE * NORM_ROW_THREADS)
        launch_row<false>(ctx, xw, ldx, NULL, 0, NULL, w, y, ldy, (int)n, eps, l2,
                          round ? q : NULL, qd, qs);
    else
        k_norm_cached<NORM_THREADS, NORM_CACHE, false><<<(unsigned)n_rows, NORM_THREADS, 0, VT_ST>>>(
            xw, ldx, NULL, 0, NULL, w, y, ldy, (int)n, eps, l2, round ? q : NULL, qd, qs);
    vt_status st = launched(ctx, op);
    if (st == VT_OK && round) vt_gpu_xq_keep(ctx, y, n);
    return st;
}

extern "C" vt_status vt_gpu_rms_norm(vt_backend_ctx *ctx, const float *x, int64_t ldx,
                                     const float *w, float *y, int64_t ldy, int64_t n_rows,
                                     int64_t n, float eps)
{
    NEED_CTX("rms_norm");
    return norm_op(ctx, "rms_norm", x, ldx, w, y, ldy, n_rows, n, eps, 0);
}

extern "C" vt_status vt_gpu_l2_norm(vt_backend_ctx *ctx, const float *x, int64_t ldx, float *y,
                                    int64_t ldy, int64_t n_rows, int64_t n, float eps)
{
    NEED_CTX("l2_norm");
    return norm_op(ctx, "l2_norm", x, ldx, NULL, y, ldy, n_rows, n, eps, 1);
}

/* x[r] += s_r · a[r] for rows too long for k_norm_cached (add_rms_norm's
 * first half; the norm then runs as rms_norm on x). */
static __global__ void k_add_rows(float *x, int64_t ldx, const float *a, int64_t lda,
                                  const float *gate, int64_t n)
{
    float *xr = x + (int64_t)blockIdx.x * ldx;
    const float *ar = a + (int64_t)blockIdx.x * lda;
    const float sg = gate ? unary_ref(VT_UNARY_SIGMOID, gate[blockIdx.x]) : 1.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        xr[i] = __fadd_rn(xr[i], gate ? __fmul_rn(ar[i], sg) : ar[i]);
}

/* 1 when [p, p + n rows of ld) and [q, q + n rows of ldq) overlap (both of cols floats per row) */
static int rows_overlap(const float *p, int64_t ldp, const float *q, int64_t ldq, int64_t n_rows,
                        int64_t cols)
{
    const float *pe = p + (n_rows - 1) * ldp + cols, *qe = q + (n_rows - 1) * ldq + cols;
    return p < qe && q < pe;
}

extern "C" vt_status vt_gpu_add_rms_norm(vt_backend_ctx *ctx, float *x, int64_t ldx,
                                         const float *a, int64_t lda, const float *gate,
                                         const float *w, float *y, int64_t ldy, int64_t n_rows,
                                         int64_t n, float eps)
{
    NEED_CTX("add_rms_norm");
    const char *op = "add_rms_norm";
    CHECK(n_rows >= 0 && n > 0, "%s: bad shape [%lld, %lld]", op, (long long)n_rows, (long long)n);
    if (n_rows == 0) return VT_OK;
    CHECK(x && a, "%s: x or a is NULL", op);
    CHECK(ldx >= n && lda >= n && (!y || ldy >= n), "%s: row strides %lld/%lld/%lld shorter than "
          "n %lld", op, (long long)ldx, (long long)lda, (long long)ldy, (long long)n);
    CHECK(eps >= 0.0f, "%s: eps %g < 0", op, (double)eps);
    CHECK(n_rows <= INT_MAX, "%s: %lld rows exceed the grid", op, (long long)n_rows);
    CHECK(!y || (!rows_overlap(y, ldy, x, ldx, n_rows, n) && !rows_overlap(y, ldy, a, lda, n_rows, n)),
          "%s: y overlaps x or a", op);
    TRY(vt_gpu_select_device(ctx, op));
    if (n > (int64_t)NORM_CACHE * NORM_THREADS) {
        k_add_rows<<<(unsigned)n_rows, NORM_THREADS, 0, VT_ST>>>(x, ldx, a, lda, gate, n);
        TRY(launched(ctx, op));
        if (!y) return VT_OK;
        return norm_op(ctx, op, x, ldx, w, y, ldy, n_rows, n, eps, 0);
    }
    int8_t *q = NULL;
    float *qd = NULL, *qs = NULL;
    const int round = y && n_rows == 1 && n % 32 == 0 && vt_gpu_xq_view(ctx, n, &q, &qd, &qs);
    if (n_rows == 1 && n <= (int64_t)NORM_ROW_CACHE * NORM_ROW_THREADS)
        launch_row<true>(ctx, x, ldx, a, lda, gate, w, y, ldy, (int)n, eps, 0, round ? q : NULL, qd,
                         qs);
    else
        k_norm_cached<NORM_THREADS, NORM_CACHE, true><<<(unsigned)n_rows, NORM_THREADS, 0, VT_ST>>>(
            x, ldx, a, lda, gate, w, y, ldy, (int)n, eps, 0, round ? q : NULL, qd, qs);
    vt_status st = launched(ctx, op);
    if (st == VT_OK && round) vt_gpu_xq_keep(ctx, y, n);
    return st;
}
