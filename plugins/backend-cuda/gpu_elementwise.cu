/*
 * gpu_elementwise.cu - the element-wise ops of backend-cuda and backend-rocm
 * (vt/backend.h: unary, binary, scale, mul_rows, and ABI 1.3's fusions
 * mul_act and delta_net_gates), for nvcc and hipcc.
 *
 * Arithmetic as backend-cpu's scalar reference
 * (plugins/backend-cpu/cpu_kernels_scalar.c): activations evaluated in
 * double and rounded once (unary_ref, gpu_device.cuh), products and sums
 * with __fmul_rn / __fadd_rn (no fused multiply-add). A fusion performs the
 * roundings of the composition it replaces in the same order, so its bits
 * are those of the separate ops: the fusion saves launches and the
 * temporaries' memory traffic, nothing else.
 */
#include <limits.h>

#include "gpu_internal.h"
#include "gpu_device.cuh"
#include "gpu_qdot.cuh"

/* ======================= 1.0 element-wise ops ======================= */
static __global__ void k_unary(int op, const float *x, float *y, int64_t n)
{
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = unary_ref(op, x[i]);
}

static __global__ void k_binary(int op, const float *a, const float *b, float *y, int64_t n,
                                int64_t nb)
{
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float bv = b[nb == n ? i : i % nb];
        y[i] = op == VT_BINARY_ADD ? __fadd_rn(a[i], bv) : __fmul_rn(a[i], bv);
    }
}

static __global__ void k_scale(const float *x, float *y, int64_t n, float s)
{
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = __fmul_rn(x[i], s);
}

static __global__ void k_mul_rows(const float *x, const float *s, float *y, int64_t n_rows,
                                  int64_t n_cols)
{
    int64_t n = n_rows * n_cols, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = __fmul_rn(x[i], s[i / n_cols]);
}

extern "C" vt_status vt_gpu_unary(vt_backend_ctx *ctx, vt_unary_op op, const float *x, float *y,
                                  int64_t n)
{
    NEED_CTX("unary");
    CHECK(n >= 0, "unary: n %lld < 0", (long long)n);
    CHECK((unsigned)op <= VT_UNARY_TANH, "unary: unknown op %d", (int)op);
    if (n == 0) return VT_OK;
    CHECK(x && y, "unary: x or y is NULL");
    TRY(vt_gpu_select_device(ctx, "unary"));
    k_unary<<<grid_for(n, 256), 256, 0, VT_ST>>>((int)op, x, y, n);
    return launched_into(ctx, "unary", y, n, NULL, 0);
}

extern "C" vt_status vt_gpu_binary(vt_backend_ctx *ctx, vt_binary_op op, const float *a,
                                   const float *b, float *y, int64_t n, int64_t nb)
{
    NEED_CTX("binary");
    CHECK(n >= 0 && nb > 0, "binary: n %lld, nb %lld", (long long)n, (long long)nb);
    CHECK((unsigned)op <= VT_BINARY_MUL, "binary: unknown op %d", (int)op);
    CHECK(n % nb == 0, "binary: nb %lld does not divide n %lld", (long long)nb, (long long)n);
    if (n == 0) return VT_OK;
    CHECK(a && b && y, "binary: a pointer is NULL");
    TRY(vt_gpu_select_device(ctx, "binary"));
    k_binary<<<grid_for(n, 256), 256, 0, VT_ST>>>((int)op, a, b, y, n, nb);
    return launched_into(ctx, "binary", y, n, NULL, 0);
}

extern "C" vt_status vt_gpu_scale(vt_backend_ctx *ctx, const float *x, float *y, int64_t n, float s)
{
    NEED_CTX("scale");
    CHECK(n >= 0, "scale: n %lld < 0", (long long)n);
    if (n == 0) return VT_OK;
    CHECK(x && y, "scale: x or y is NULL");
    TRY(vt_gpu_select_device(ctx, "scale"));
    k_scale<<<grid_for(n, 256), 256, 0, VT_ST>>>(x, y, n, s);
    return launched_into(ctx, "scale", y, n, NULL, 0);
}

extern "C" vt_status vt_gpu_mul_rows(vt_backend_ctx *ctx, const float *x, const float *s, float *y,
                                     int64_t n_rows, int64_t n_cols)
{
    NEED_CTX("mul_rows");
    CHECK(n_rows >= 0 && n_cols >= 0, "mul_rows: shape [%lld, %lld]", (long long)n_rows,
          (long long)n_cols);
    if (n_rows == 0 || n_cols == 0) return VT_OK;
    CHECK(x && s && y, "mul_rows: a pointer is NULL");
    TRY(vt_gpu_select_device(ctx, "mul_rows"));
    k_mul_rows<<<grid_for(n_rows * n_cols, 256), 256, 0, VT_ST>>>(x, s, y, n_rows, n_cols);
    return launched_into(ctx, "mul_rows", y, n_rows * n_cols, NULL, 0);
}

/* ======================= ABI 1.3 fusions ======================= */

/* y[r, c] = op(a[r, c]) · b[r, c]; one thread per element of a 2-D grid-stride
 * loop (rows of n_cols, strides lda, ldb, ldy). */
static __global__ void k_mul_act(int op, const float *a, int64_t lda, const float *b, int64_t ldb,
                                 float *y, int64_t ldy, int64_t n_rows, int64_t n_cols)
{
    const int64_t n = n_rows * n_cols, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int64_t r = n_cols == 1 ? i : i / n_cols, c = i - r * n_cols;
        y[r * ldy + c] = __fmul_rn(unary_ref(op, a[r * lda + c]), b[r * ldb + c]);
    }
}

/* k_mul_act for a contiguous output of n values (n a multiple of 32), which
 * is also rounded to int8 blocks as it is stored (qd_quantize32: the bits
 * k_quantize_x would give), so that a one-token matmul reading it next
 * (gpu_matvec.cu) skips its rounding launch. One thread per value; whole
 * warps leave together (n % 32 == 0). */
static __global__ void k_mul_act_q(int op, const float *a, int64_t lda, const float *b,
                                   int64_t ldb, float *y, int64_t n_cols, int64_t n,
                                   int8_t *__restrict__ q, float *__restrict__ qd,
                                   float *__restrict__ qs)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int64_t r = i / n_cols, c = i - r * n_cols;
    const float v = __fmul_rn(unary_ref(op, a[r * lda + c]), b[r * ldb + c]);
    y[i] = v;
    qd_quantize32(v, q + (i & ~(int64_t)31), qd + i / 32, qs + i / 32);
}

/* outputs up to this many values are rounded for a one-token matmul (a
 * decode step's SwiGLU, gated norm or attention gate: 512 .. 8192 values) */
#define MUL_ACT_ROUND_MAX 16384

extern "C" vt_status vt_gpu_mul_act(vt_backend_ctx *ctx, vt_unary_op op, const float *a,
                                    int64_t lda, const float *b, int64_t ldb, float *y,
                                    int64_t ldy, int64_t n_rows, int64_t n_cols)
{
    NEED_CTX("mul_act");
    CHECK(n_rows >= 0 && n_cols >= 0, "mul_act: shape [%lld, %lld]", (long long)n_rows,
          (long long)n_cols);
    CHECK((unsigned)op <= VT_UNARY_TANH, "mul_act: unknown op %d", (int)op);
    if (n_rows == 0 || n_cols == 0) return VT_OK;
    CHECK(a && b && y, "mul_act: a pointer is NULL");
    CHECK(lda >= n_cols && ldb >= n_cols && ldy >= n_cols,
          "mul_act: row strides %lld/%lld/%lld shorter than %lld columns", (long long)lda,
          (long long)ldb, (long long)ldy, (long long)n_cols);
    TRY(vt_gpu_select_device(ctx, "mul_act"));
    const int64_t n = n_rows * n_cols;
    int8_t *q = NULL;
    float *qd = NULL, *qs = NULL;
    if ((n_rows == 1 || ldy == n_cols) && n % 32 == 0 && n <= MUL_ACT_ROUND_MAX &&
        vt_gpu_xq_view(ctx, n, &q, &qd, &qs)) {
        k_mul_act_q<<<(unsigned)ceil_div(n, 256), 256, 0, VT_ST>>>((int)op, a, lda, b, ldb, y,
                                                                   n_cols, n, q, qd, qs);
        TRY(launched(ctx, "mul_act"));
        vt_gpu_xq_keep(ctx, y, n);
        return VT_OK;
    }
    k_mul_act<<<grid_for(n, 256), 256, 0, VT_ST>>>((int)op, a, lda, b, ldb, y, ldy, n_rows,
                                                    n_cols);
    return launched_into(ctx, "mul_act", y, (n_rows - 1) * ldy + n_cols, NULL, 0);
}

/* beta = sigmoid(b); g = ssm_a · softplus(alpha + dt_bias), per (token, head),
 * each step rounded as the separate ops round it. */
static __global__ void k_delta_net_gates(const float *b, int64_t ldb, const float *alpha,
                                         int64_t lda, const float *dt_bias, const float *ssm_a,
                                         float *beta, float *g, int64_t n_tokens, int64_t n_v)
{
    const int64_t n = n_tokens * n_v, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int64_t t = i / n_v, h = i - t * n_v;
        beta[i] = unary_ref(VT_UNARY_SIGMOID, b[t * ldb + h]);
        const float s = __fadd_rn(alpha[t * lda + h], dt_bias[h]);
        g[i] = __fmul_rn(unary_ref(VT_UNARY_SOFTPLUS, s), ssm_a[h]);
    }
}

extern "C" vt_status vt_gpu_delta_net_gates(vt_backend_ctx *ctx, const float *b, int64_t ldb,
                                            const float *alpha, int64_t lda,
                                            const float *dt_bias, const float *ssm_a,
                                            float *beta, float *g, int64_t n_tokens, int64_t n_v)
{
    NEED_CTX("delta_net_gates");
    CHECK(n_tokens >= 0 && n_v > 0, "delta_net_gates: shape [%lld, %lld]", (long long)n_tokens,
          (long long)n_v);
    if (n_tokens == 0) return VT_OK;
    CHECK(b && alpha && dt_bias && ssm_a && beta && g, "delta_net_gates: a pointer is NULL");
    CHECK(ldb >= n_v && lda >= n_v, "delta_net_gates: row strides %lld/%lld shorter than n_v %lld",
          (long long)ldb, (long long)lda, (long long)n_v);
    TRY(vt_gpu_select_device(ctx, "delta_net_gates"));
    k_delta_net_gates<<<grid_for(n_tokens * n_v, 256), 256, 0, VT_ST>>>(
        b, ldb, alpha, lda, dt_bias, ssm_a, beta, g, n_tokens, n_v);
    return launched_into(ctx, "delta_net_gates", beta, n_tokens * n_v, g, n_tokens * n_v);
}
