/*
 * gpu_rows.cu - the row movement and routing ops of backend-cuda and
 * backend-rocm (vt/backend.h): copy_2d, gather_rows, scatter_add (in order
 * of i for every column, as the CPU adds), softmax_topk (on the host, the
 * CPU's algorithm) and copy_rows_dpos.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_internal.h"
#include "gpu_device.cuh"
#include "vt/plugin_util.h"

/* ======================= copies, gather, scatter ======================= */

/* dst[r*ld_dst + c] = src[row(r)*ld_src + c], row(r) = idx ? idx[r] : r. */
static __global__ void k_copy_rows(const float *src, int64_t ld_src, const int32_t *idx,
                                   float *dst, int64_t ld_dst, int64_t n_rows, int64_t n_cols)
{
    int64_t n = n_rows * n_cols, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {
        int64_t r = e / n_cols, c = e - r * n_cols;
        int64_t sr = idx ? (int64_t)idx[r] : r;
        dst[r * ld_dst + c] = src[sr * ld_src + c];
    }
}

/* dst[(*row0 + r) * ld_dst + c] = src[r * ld_src + c] (copy_rows_dpos). */
static __global__ void k_copy_rows_at(const float *src, int64_t ld_src, float *dst, int64_t ld_dst,
                                      int64_t n_rows, int64_t n_cols, const int32_t *row0)
{
    int64_t n = n_rows * n_cols, stride = (int64_t)gridDim.x * blockDim.x, r0 = *row0;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {
        int64_t r = e / n_cols, c = e - r * n_cols;
        dst[(r0 + r) * ld_dst + c] = src[r * ld_src + c];
    }
}

/* One thread per column, i in order: dst[idx[i]][c] += wt[i]·src[i][c]. */
static __global__ void k_scatter_add(const float *src, int64_t ld_src, const int32_t *idx,
                                     const float *wt, int64_t n, int64_t n_cols, float *dst,
                                     int64_t ld_dst)
{
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < n_cols; c += stride)
        for (int64_t i = 0; i < n; i++) {
            float s = src[i * ld_src + c];
            if (wt) s = __fmul_rn(wt[i], s);
            float *d = dst + (int64_t)idx[i] * ld_dst + c;
            *d = __fadd_rn(*d, s);
        }
}

extern "C" vt_status vt_gpu_copy_2d(vt_backend_ctx *ctx, const float *src, int64_t ld_src,
                                    float *dst, int64_t ld_dst, int64_t n_rows, int64_t n_cols)
{
    NEED_CTX("copy_2d");
    CHECK(n_rows >= 0 && n_cols >= 0, "copy_2d: shape [%lld, %lld]", (long long)n_rows,
          (long long)n_cols);
    if (n_rows == 0 || n_cols == 0) return VT_OK;
    CHECK(src && dst, "copy_2d: src or dst is NULL");
    CHECK(ld_src >= n_cols && ld_dst >= n_cols, "copy_2d: strides %lld/%lld < n_cols %lld",
          (long long)ld_src, (long long)ld_dst, (long long)n_cols);
    TRY(vt_gpu_select_device(ctx, "copy_2d"));
    k_copy_rows<<<grid_for(n_rows * n_cols, 256), 256, 0, VT_ST>>>(src, ld_src, NULL, dst, ld_dst, n_rows,
                                                         n_cols);
    return launched(ctx, "copy_2d");
}

extern "C" vt_status vt_gpu_gather_rows(vt_backend_ctx *ctx, const float *src, int64_t ld_src,
                                        const int32_t *idx, int64_t n, int64_t n_cols, float *dst,
                                        int64_t ld_dst)
{
    NEED_CTX("gather_rows");
    CHECK(n >= 0 && n_cols >= 0, "gather_rows: n %lld, n_cols %lld", (long long)n, (long long)n_cols);
    if (n == 0 || n_cols == 0) return VT_OK;
    CHECK(src && idx && dst, "gather_rows: a pointer is NULL");
    CHECK(ld_src >= n_cols && ld_dst >= n_cols, "gather_rows: strides %lld/%lld < n_cols %lld",
          (long long)ld_src, (long long)ld_dst, (long long)n_cols);
    for (int64_t i = 0; i < n; i++)
        if (idx[i] < 0)
            return vt_gpu_fail(ctx->host, VT_ERR_RANGE, "gather_rows: index %d (entry %lld) < 0",
                               idx[i], (long long)i);
    TRY(vt_gpu_select_device(ctx, "gather_rows"));
    void *didx;
    TRY(vt_gpu_upload(ctx, "gather_rows", idx, (size_t)n * sizeof(int32_t), NULL, 0, &didx, NULL));
    k_copy_rows<<<grid_for(n * n_cols, 256), 256, 0, VT_ST>>>(src, ld_src, (const int32_t *)didx, dst,
                                                    ld_dst, n, n_cols);
    return launched(ctx, "gather_rows");
}

extern "C" vt_status vt_gpu_scatter_add(vt_backend_ctx *ctx, const float *src, int64_t ld_src,
                                        const int32_t *idx, const float *wt, int64_t n,
                                        int64_t n_cols, float *dst, int64_t ld_dst)
{
    NEED_CTX("scatter_add");
    CHECK(n >= 0 && n_cols >= 0, "scatter_add: n %lld, n_cols %lld", (long long)n, (long long)n_cols);
    if (n == 0 || n_cols == 0) return VT_OK;
    CHECK(src && idx && dst, "scatter_add: a pointer is NULL");
    CHECK(ld_src >= n_cols && ld_dst >= n_cols, "scatter_add: strides %lld/%lld < n_cols %lld",
          (long long)ld_src, (long long)ld_dst, (long long)n_cols);
    for (int64_t i = 0; i < n; i++)
        if (idx[i] < 0)
            return vt_gpu_fail(ctx->host, VT_ERR_RANGE, "scatter_add: index %d (entry %lld) < 0",
                               idx[i], (long long)i);
    TRY(vt_gpu_select_device(ctx, "scatter_add"));
    void *didx, *dwt = NULL;
    TRY(vt_gpu_upload(ctx, "scatter_add", idx, (size_t)n * sizeof(int32_t), wt,
               wt ? (size_t)n * sizeof(float) : 0, &didx, &dwt));
    k_scatter_add<<<grid_for(n_cols, 128), 128, 0, VT_ST>>>(src, ld_src, (const int32_t *)didx,
                                                  (const float *)dwt, n, n_cols, dst, ld_dst);
    return launched(ctx, "scatter_add");
}

/* ======================= MoE routing ======================= */

/* Routing runs on the host with vt_util_softmax_topk_row (vt/plugin_util.h),
 * the same row routine as backend-cpu, so ids and weights agree bit for bit. */
extern "C" vt_status vt_gpu_softmax_topk(vt_backend_ctx *ctx, const float *logits, int64_t n_rows,
                                         int64_t n, int64_t k, int renorm, int32_t *ids,
                                         float *weights, float *probs)
{
    NEED_CTX("softmax_topk");
    if (ctx->capturing) /* its results are host arrays */
        return vt_gpu_fail(ctx->host, VT_ERR_UNSUPPORTED, "softmax_topk: an op with host array "
                           "results cannot be recorded into a graph (moe_route is the one to record)");
    CHECK(n_rows >= 0 && n > 0 && k > 0 && k <= n, "softmax_topk: n_rows %lld, n %lld, k %lld",
          (long long)n_rows, (long long)n, (long long)k);
    CHECK(n < INT32_MAX, "softmax_topk: n %lld does not fit an int32 id", (long long)n);
    if (n_rows == 0) return VT_OK;
    CHECK(logits && ids && weights, "softmax_topk: a pointer is NULL");
    TRY(vt_gpu_select_device(ctx, "softmax_topk"));
    size_t lb = (size_t)n_rows * (size_t)n * sizeof(float);
    TRY(vt_gpu_reserve(ctx, "softmax_topk", &ctx->hbuf, &ctx->hbuf_bytes, lb + (size_t)n * sizeof(float), 1));
    float *hl = (float *)ctx->hbuf, *p = hl + (size_t)n_rows * (size_t)n;
    vt_gpu_error e = vt_gpu_memcpy(hl, logits, lb, vt_gpu_memcpy_d2h); /* waits for the router */
    if (e != vt_gpu_success)
        return vt_gpu_fail(ctx->host, vt_gpu_status_of(e), "softmax_topk: copy of %lld x %lld "
                           "logits from device %d failed: %s", (long long)n_rows, (long long)n,
                           ctx->device, vt_gpu_get_error_string(e));
    for (int64_t r = 0; r < n_rows; r++)
        vt_util_softmax_topk_row(hl + r * n, n, k, renorm, ids + r * k, weights + r * k,
                                 probs ? probs + r * n : NULL, p);
    return VT_OK;
}

extern "C" vt_status vt_gpu_copy_rows_dpos(vt_backend_ctx *ctx, const float *src, int64_t ld_src,
                                           float *dst, int64_t ld_dst, int64_t n_rows,
                                           int64_t n_cols, const int32_t *row0)
{
    NEED_CTX("copy_rows_dpos");
    CHECK(n_rows >= 0 && n_cols >= 0, "copy_rows_dpos: n_rows %lld, n_cols %lld",
          (long long)n_rows, (long long)n_cols);
    if (n_rows == 0 || n_cols == 0) return VT_OK;
    CHECK(src && dst && row0, "copy_rows_dpos: a pointer is NULL");
    CHECK(ld_src >= n_cols && ld_dst >= n_cols, "copy_rows_dpos: strides %lld/%lld < n_cols %lld",
          (long long)ld_src, (long long)ld_dst, (long long)n_cols);
    TRY(vt_gpu_select_device(ctx, "copy_rows_dpos"));
    k_copy_rows_at<<<grid_for(n_rows * n_cols, 256), 256, 0, VT_ST>>>(src, ld_src, dst, ld_dst,
                                                                     n_rows, n_cols, row0);
    return launched(ctx, "copy_rows_dpos");
}
