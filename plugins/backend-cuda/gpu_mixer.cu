/*
 * gpu_mixer.cu - the sequence-mixer ops of backend-cuda and backend-rocm
 * (vt/backend.h): rope_neox (and rope_neox_dpos, positions in device
 * memory), ssm_conv (the causal conv of a DeltaNet layer and its state) and
 * gated_delta_net. Their arithmetic against backend-cpu's scalar reference
 * is described in gpu_ops.cu's header.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_internal.h"
#include "gpu_device.cuh"

/* ======================= RoPE (NeoX pairing) ======================= */

/* One thread per (token, head, pair i < n_rot/2); angle, cos/sin and the
 * rotation in double, rounded once (as the CPU). */
static __global__ void k_rope(float *x, int64_t ld_token, int64_t ld_head, int64_t n_tokens,
                              int64_t n_head, int64_t n_rot, const int32_t *pos, float base,
                              const float *ff)
{
    int64_t half = n_rot / 2, n = n_tokens * n_head * half;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {
        int64_t i = e % half, th = e / half, h = th % n_head, t = th / n_head;
        double theta = (double)pos[t] * pow((double)base, -2.0 * (double)i / (double)n_rot);
        if (ff) theta /= (double)ff[i];
        double c = cos(theta), s = sin(theta);
        float *xh = x + t * ld_token + h * ld_head;
        double a = xh[i], b = xh[i + half];
        xh[i] = (float)(a * c - b * s);
        xh[i + half] = (float)(a * s + b * c);
    }
}

extern "C" vt_status vt_gpu_rope_neox(vt_backend_ctx *ctx, float *x, int64_t ld_token,
                                      int64_t ld_head, int64_t n_tokens, int64_t n_head,
                                      int64_t n_rot, const int32_t *pos, float base,
                                      const float *freq_factors)
{
    NEED_CTX("rope_neox");
    CHECK(n_tokens >= 0 && n_head >= 0, "rope_neox: n_tokens %lld, n_head %lld", (long long)n_tokens,
          (long long)n_head);
    CHECK(n_rot > 0 && n_rot % 2 == 0, "rope_neox: n_rot %lld is not a positive even number",
          (long long)n_rot);
    if (n_tokens == 0 || n_head == 0) return VT_OK;
    CHECK(x && pos, "rope_neox: x or pos is NULL");
    CHECK((n_head == 1 || ld_head >= n_rot) && (n_tokens == 1 || ld_token >= n_rot),
          "rope_neox: strides ld_token %lld, ld_head %lld too small for n_rot %lld",
          (long long)ld_token, (long long)ld_head, (long long)n_rot);
    CHECK(base > 0.0f, "rope_neox: base %g <= 0", (double)base);
    TRY(vt_gpu_select_device(ctx, "rope_neox"));
    void *dpos;
    TRY(vt_gpu_upload(ctx, "rope_neox", pos, (size_t)n_tokens * sizeof(int32_t), NULL, 0, &dpos, NULL));
    k_rope<<<grid_for(n_tokens * n_head * (n_rot / 2), 256), 256, 0, VT_ST>>>(
        x, ld_token, ld_head, n_tokens, n_head, n_rot, (const int32_t *)dpos, base, freq_factors);
    return launched(ctx, "rope_neox");
}

extern "C" vt_status vt_gpu_rope_neox_dpos(vt_backend_ctx *ctx, float *x, int64_t ld_token,
                                           int64_t ld_head, int64_t n_tokens, int64_t n_head,
                                           int64_t n_rot, const int32_t *pos, float base,
                                           const float *freq_factors)
{
    NEED_CTX("rope_neox_dpos");
    CHECK(n_tokens >= 0 && n_head >= 0, "rope_neox_dpos: n_tokens %lld, n_head %lld",
          (long long)n_tokens, (long long)n_head);
    CHECK(n_rot > 0 && n_rot % 2 == 0, "rope_neox_dpos: n_rot %lld is not a positive even number",
          (long long)n_rot);
    if (n_tokens == 0 || n_head == 0) return VT_OK;
    CHECK(x && pos, "rope_neox_dpos: x or pos is NULL");
    CHECK((n_head == 1 || ld_head >= n_rot) && (n_tokens == 1 || ld_token >= n_rot),
          "rope_neox_dpos: strides ld_token %lld, ld_head %lld too small for n_rot %lld",
          (long long)ld_token, (long long)ld_head, (long long)n_rot);
    CHECK(base > 0.0f, "rope_neox_dpos: base %g <= 0", (double)base);
    TRY(vt_gpu_select_device(ctx, "rope_neox_dpos"));
    k_rope<<<grid_for(n_tokens * n_head * (n_rot / 2), 256), 256, 0, VT_ST>>>(
        x, ld_token, ld_head, n_tokens, n_head, n_rot, pos, base, freq_factors);
    return launched(ctx, "rope_neox_dpos");
}

/* ======================= causal conv ======================= */

/* SiLU in double, rounded once (cpu_kernels_scalar.c vt_cpu_unary_ref). */
static __device__ __forceinline__ float silu_ref(float xf)
{
    double x = xf;
    return (float)(x / (1.0 + exp(-x)));
}

/* The new state: the last K1 columns of X = [state, x]; reads ahead of
 * writes, so in place is safe (one thread per channel). */
static __device__ __forceinline__ void ssm_conv_state(const float *x, int64_t ldx, float *state,
                                                      int64_t n_tokens, int64_t n_ch, int64_t K1,
                                                      int64_t c)
{
    for (int64_t j = 0; j < K1; j++) {
        int64_t col = n_tokens + j;
        state[j * n_ch + c] = col < K1 ? state[col * n_ch + c] : x[(col - K1) * ldx + c];
    }
}

/* One thread per (channel, SSM_CONV_TT tokens: blockIdx.y), tokens in order;
 * X = [state, x] by columns, the taps summed in double in order. With one
 * token chunk (decode) the thread also writes the new state; with more,
 * k_ssm_conv_state does after every chunk has read the old one. */
#define SSM_CONV_TT 16
static __global__ void k_ssm_conv(const float *x, int64_t ldx, const float *w, float *state,
                                  float *y, int64_t ldy, int64_t n_tokens, int64_t n_ch,
                                  int64_t d_conv)
{
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= n_ch) return;
    const int64_t K1 = d_conv - 1, t0 = (int64_t)blockIdx.y * SSM_CONV_TT;
    const int64_t t1 = t0 + SSM_CONV_TT < n_tokens ? t0 + SSM_CONV_TT : n_tokens;
    const float *wc = w + c * d_conv;
    for (int64_t t = t0; t < t1; t++) {
        double s = 0.0;
        for (int64_t kk = 0; kk < d_conv; kk++) {
            int64_t col = t + kk;
            float xv = col < K1 ? state[col * n_ch + c] : x[(col - K1) * ldx + c];
            s += (double)wc[kk] * (double)xv;
        }
        y[t * ldy + c] = silu_ref((float)s);
    }
    if (gridDim.y == 1) ssm_conv_state(x, ldx, state, n_tokens, n_ch, K1, c);
}

static __global__ void k_ssm_conv_state(const float *x, int64_t ldx, float *state,
                                        int64_t n_tokens, int64_t n_ch, int64_t d_conv)
{
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c < n_ch) ssm_conv_state(x, ldx, state, n_tokens, n_ch, d_conv - 1, c);
}

extern "C" vt_status vt_gpu_ssm_conv(vt_backend_ctx *ctx, const float *x, int64_t ldx,
                                     const float *w, float *state, float *y, int64_t ldy,
                                     int64_t n_tokens, int64_t n_ch, int64_t d_conv)
{
    NEED_CTX("ssm_conv");
    CHECK(n_tokens >= 0 && n_ch > 0 && d_conv >= 1, "ssm_conv: n_tokens %lld, n_ch %lld, d_conv %lld",
          (long long)n_tokens, (long long)n_ch, (long long)d_conv);
    if (n_tokens == 0) return VT_OK;
    CHECK(x && w && y && (state || d_conv == 1), "ssm_conv: a pointer is NULL");
    CHECK(ldx >= n_ch && ldy >= n_ch, "ssm_conv: ldx %lld / ldy %lld < n_ch %lld", (long long)ldx,
          (long long)ldy, (long long)n_ch);
    CHECK(x != y, "ssm_conv: y must not alias x (later tokens read earlier inputs)");
    TRY(vt_gpu_select_device(ctx, "ssm_conv"));
    const int64_t nt = ceil_div(n_tokens, SSM_CONV_TT);
    if (nt > 65535 || ceil_div(n_ch, 128) > INT_MAX)
        return vt_gpu_fail(ctx->host, VT_ERR_UNSUPPORTED, "ssm_conv: %lld tokens x %lld channels "
                           "exceed the grid", (long long)n_tokens, (long long)n_ch);
    dim3 grid((unsigned)ceil_div(n_ch, 128), (unsigned)nt);
    k_ssm_conv<<<grid, 128, 0, VT_ST>>>(x, ldx, w, state, y, ldy, n_tokens, n_ch, d_conv);
    if (nt > 1 && d_conv > 1) {
        TRY(launched(ctx, "ssm_conv"));
        k_ssm_conv_state<<<(unsigned)ceil_div(n_ch, 128), 128, 0, VT_ST>>>(x, ldx, state,
                                                                            n_tokens, n_ch, d_conv);
    }
    return launched(ctx, "ssm_conv");
}

/* ======================= gated delta net ======================= */

#define DN_COLS 128 /* value columns per block */

/* Block (h, strip): value head h, columns [strip·DN_COLS, +DN_COLS) of its
 * state S[d_k][d_v] (global memory); thread j owns column j, which evolves
 * independently of the others (qwen35moe.md §5.7.4):
 *   S ← exp(g)·S; m = Sᵀk; δ = β(v − m); S ← S + k ⊗ δ; o = Sᵀq
 * Float32 state, double accumulators, the CPU's operation order, no fused
 * multiply-add. k and q of the current token are staged in shared memory
 * (2·d_k floats, dynamic). */
static __global__ void k_delta(const float *q, const float *k, int64_t ldqk, const float *v,
                               int64_t ldv, const float *g, const float *beta, float *state,
                               float *out, int64_t ldo, int64_t n_tokens, int64_t n_k,
                               int64_t n_v, int64_t d_k, int64_t d_v)
{
    extern __shared__ float sh[];
    float *kt = sh, *qt = sh + d_k;
    int64_t h = blockIdx.x, kh = h % n_k; /* tiled head order, qwen35moe.md §5.7.3 */
    int64_t j = (int64_t)blockIdx.y * DN_COLS + threadIdx.x;
    float *S = state + h * d_k * d_v;
    for (int64_t t = 0; t < n_tokens; t++) {
        __syncthreads(); /* the previous token's kt/qt are no longer read */
        for (int64_t i = threadIdx.x; i < d_k; i += blockDim.x) {
            kt[i] = k[t * ldqk + kh * d_k + i];
            qt[i] = q[t * ldqk + kh * d_k + i];
        }
        __syncthreads();
        if (j >= d_v) continue;
        float eg = (float)exp((double)g[t * n_v + h]);
        float b = beta[t * n_v + h];
        double m = 0.0;
        for (int64_t i = 0; i < d_k; i++) {
            float sv = __fmul_rn(S[i * d_v + j], eg);
            S[i * d_v + j] = sv;
            m += (double)sv * (double)kt[i];
        }
        float dl = __fmul_rn(b, __fsub_rn(v[t * ldv + h * d_v + j], (float)m));
        double o = 0.0;
        for (int64_t i = 0; i < d_k; i++) {
            float sv = __fadd_rn(S[i * d_v + j], __fmul_rn(kt[i], dl));
            S[i * d_v + j] = sv;
            o += (double)sv * (double)qt[i];
        }
        out[t * ldo + h * d_v + j] = (float)o;
    }
}

/* The same recurrence with the state in registers, for d_k = DK (128 or 256):
 * block (h, strip of 32 value columns) of DN_W warps; lane l owns column
 * j = strip·32 + l and warp w the key rows [w·DK/DN_W, (w+1)·DK/DN_W) of it,
 * so a block keeps its 32 columns in registers across the whole chunk (read
 * once before the first token, written once after the last) and DN_W warps
 * per block hide each other's latency. Per token: k and q (fetched while the
 * previous token is computed) are staged in shared memory; each warp forms
 * its part of m = Sᵀk, the parts are added in warp order, every warp forms
 * δ and updates its rows, and the parts of o = Sᵀq are added the same way.
 * The per-element float32 products are k_delta's; the dot products
 * accumulate in double (per warp in four interleaved partial sums, then in
 * a fixed order), so they differ from the CPU's single running sum by double
 * rounding only (~1e-16 relative) before the one rounding to float. */
#define DN_RCOLS 32
#define DN_W 4
template <int DK>
static __global__ void __launch_bounds__(32 * DN_W)
k_delta_reg(const float *__restrict__ q, const float *__restrict__ k, int64_t ldqk,
            const float *__restrict__ v, int64_t ldv, const float *__restrict__ g,
            const float *__restrict__ beta, float *__restrict__ state, float *__restrict__ out,
            int64_t ldo, int64_t n_tokens, int64_t n_k, int64_t n_v, int64_t d_v)
{
    constexpr int RW = DK / DN_W;          /* key rows per warp */
    constexpr int PL = DK / (32 * DN_W);   /* k and q values each thread stages per token */
    static_assert(RW % 4 == 0 && PL >= 1, "d_k must be a multiple of 32 * DN_W");
    __shared__ float kt[DK], qt[DK];
    __shared__ double pm[DN_W][32], po[DN_W][32];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, tid = threadIdx.x;
    const int64_t h = blockIdx.x, kh = h % n_k; /* tiled head order, qwen35moe.md §5.7.3 */
    const int64_t j = (int64_t)blockIdx.y * DN_RCOLS + lane;
    const bool live = j < d_v;
    const int i0 = wid * RW;
    float *S = state + h * (int64_t)DK * d_v;
    float col[RW];
#pragma unroll
    for (int i = 0; i < RW; i++) col[i] = live ? S[(int64_t)(i0 + i) * d_v + j] : 0.0f;
    float kn[PL], qn[PL], gn = 0.0f, bn = 0.0f, vn = 0.0f;
    auto fetch = [&](int64_t t) {
#pragma unroll
        for (int u = 0; u < PL; u++) {
            kn[u] = k[t * ldqk + kh * DK + tid + 32 * DN_W * u];
            qn[u] = q[t * ldqk + kh * DK + tid + 32 * DN_W * u];
        }
        gn = g[t * n_v + h];
        bn = beta[t * n_v + h];
        vn = live ? v[t * ldv + h * d_v + j] : 0.0f;
    };
    if (n_tokens > 0) fetch(0);
    for (int64_t t = 0; t < n_tokens; t++) {
#pragma unroll
        for (int u = 0; u < PL; u++) kt[tid + 32 * DN_W * u] = kn[u], qt[tid + 32 * DN_W * u] = qn[u];
        const float gt = gn, b = bn, vj = vn;
        __syncthreads(); /* (1) kt, qt of token t */
        if (t + 1 < n_tokens) fetch(t + 1);
        const float eg = (float)exp((double)gt);
        double m4[4] = {0, 0, 0, 0};
#pragma unroll
        for (int i = 0; i < RW; i += 4) {
#pragma unroll
            for (int r = 0; r < 4; r++) {
                col[i + r] = __fmul_rn(col[i + r], eg);
                m4[r] += (double)col[i + r] * (double)kt[i0 + i + r];
            }
        }
        pm[wid][lane] = (m4[0] + m4[1]) + (m4[2] + m4[3]);
        __syncthreads(); /* (2) every warp's part of m */
        double m = pm[0][lane];
#pragma unroll
        for (int w = 1; w < DN_W; w++) m += pm[w][lane];
        const float dl = __fmul_rn(b, __fsub_rn(vj, (float)m));
        double o4[4] = {0, 0, 0, 0};
#pragma unroll
        for (int i = 0; i < RW; i += 4) {
#pragma unroll
            for (int r = 0; r < 4; r++) {
                col[i + r] = __fadd_rn(col[i + r], __fmul_rn(kt[i0 + i + r], dl));
                o4[r] += (double)col[i + r] * (double)qt[i0 + i + r];
            }
        }
        po[wid][lane] = (o4[0] + o4[1]) + (o4[2] + o4[3]);
        __syncthreads(); /* (3) every warp's part of o; kt, qt free for token t + 1 */
        if (wid == 0 && live) {
            double o = po[0][lane];
#pragma unroll
            for (int w = 1; w < DN_W; w++) o += po[w][lane];
            out[t * ldo + h * d_v + j] = (float)o;
        }
    }
    if (live)
#pragma unroll
        for (int i = 0; i < RW; i++) S[(int64_t)(i0 + i) * d_v + j] = col[i];
}

extern "C" vt_status vt_gpu_gated_delta_net(vt_backend_ctx *ctx, const float *q, const float *k,
                                            int64_t ldqk, const float *v, int64_t ldv,
                                            const float *g, const float *beta, float *state,
                                            float *out, int64_t ldo, int64_t n_tokens,
                                            int64_t n_k, int64_t n_v, int64_t d_k, int64_t d_v)
{
    NEED_CTX("gated_delta_net");
    CHECK(n_tokens >= 0 && n_k > 0 && n_v > 0 && d_k > 0 && d_v > 0,
          "gated_delta_net: n_tokens %lld, n_k %lld, n_v %lld, d_k %lld, d_v %lld",
          (long long)n_tokens, (long long)n_k, (long long)n_v, (long long)d_k, (long long)d_v);
    if (n_tokens == 0) return VT_OK;
    CHECK(q && k && v && g && beta && state && out, "gated_delta_net: a pointer is NULL");
    CHECK(ldqk >= n_k * d_k && ldv >= n_v * d_v && ldo >= n_v * d_v,
          "gated_delta_net: strides ldqk %lld, ldv %lld, ldo %lld too small", (long long)ldqk,
          (long long)ldv, (long long)ldo);
    size_t shmem = 2 * (size_t)d_k * sizeof(float);
    if (shmem > 48 * 1024 || n_v > INT_MAX || ceil_div(d_v, DN_COLS) > 65535)
        return vt_gpu_fail(ctx->host, VT_ERR_UNSUPPORTED, "gated_delta_net: d_k %lld, n_v %lld, "
                           "d_v %lld exceed the kernel's limits (d_k <= 6144)", (long long)d_k,
                           (long long)n_v, (long long)d_v);
    TRY(vt_gpu_select_device(ctx, "gated_delta_net"));
    if ((d_k == 128 || d_k == 256) && n_v <= INT_MAX &&
        ceil_div(d_v, DN_RCOLS) <= 65535) { /* the state in registers */
        dim3 grid((unsigned)n_v, (unsigned)ceil_div(d_v, DN_RCOLS));
        if (d_k == 128)
            k_delta_reg<128><<<grid, 32 * DN_W, 0, VT_ST>>>(q, k, ldqk, v, ldv, g, beta, state, out,
                                                           ldo, n_tokens, n_k, n_v, d_v);
        else
            k_delta_reg<256><<<grid, 32 * DN_W, 0, VT_ST>>>(q, k, ldqk, v, ldv, g, beta, state, out,
                                                           ldo, n_tokens, n_k, n_v, d_v);
        return launched(ctx, "gated_delta_net");
    }
    unsigned threads = d_v < DN_COLS ? (unsigned)((d_v + 31) / 32 * 32) : DN_COLS;
    dim3 grid((unsigned)n_v, (unsigned)ceil_div(d_v, DN_COLS));
    k_delta<<<grid, threads, shmem, VT_ST>>>(q, k, ldqk, v, ldv, g, beta, state, out, ldo, n_tokens, n_k,
                                      n_v, d_k, d_v);
    return launched(ctx, "gated_delta_net");
}
