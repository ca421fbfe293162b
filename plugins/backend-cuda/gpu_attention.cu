/*
 * gpu_attention.cu - attention over the KV cache for backend-cuda /
 * backend-rocm (vt/backend.h: attention, and attention_dpos of ABI 1.2 with
 * pos0 read from device memory): one block per (token, query head) whose
 * warps each run an online (max-subtracted) float32 softmax over a share of
 * the visible positions, merged at the end (4 warps per block, 16 when the
 * blocks are few, as in decode).
 */
#include <limits.h>
#include <math.h>

#include "gpu_device.cuh"

/* ======================= attention ======================= */

#define ATTN_WARPS 4       /* warps per (token, head) block when there are many blocks */
#define ATTN_WARPS_FEW 16  /* ... when there are few (decode): more positions in flight */

/* The end of a block's online softmax: each warp's max m, weight sum l and
 * accumulator acc (lane l: dims l + 32c) to shared memory; returns the
 * block's max M and weight sum L, with f[w] the factor of warp w (0 for a
 * warp that saw no position). The caller reads sacc after this. */
template <int C, int W>
static __device__ __forceinline__ void attn_merge_warps(float m, float l, const float acc[C],
                                                        float (&sm)[W], float (&sl)[W],
                                                        float (&sacc)[W][32 * C], float f[W],
                                                        float *M_out, float *L_out)
{
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    if (lane == 0) {
        sm[wid] = m;
        sl[wid] = l;
    }
#pragma unroll
    for (int c = 0; c < C; c++) sacc[wid][lane + 32 * c] = acc[c];
    __syncthreads();
    float M = -INFINITY;
    for (int w = 0; w < W; w++)
        if (sl[w] > 0.0f) M = fmaxf(M, sm[w]); /* an empty warp's m is -inf: no effect */
    float L = 0.0f;
    for (int w = 0; w < W; w++) {
        f[w] = sl[w] > 0.0f ? expf(sm[w] - M) : 0.0f; /* a warp that saw no position adds 0 */
        L += sl[w] * f[w];
    }
    *M_out = M;
    *L_out = L;
}

/* One block of W warps per (token, query head): warp w runs an online
 * float32 softmax over positions s0 + w, s0 + w + W, ...; lane l holds dims
 * l + 32c (c < C) of q and of the output accumulator. */
template <int C, int W>
static __global__ void __launch_bounds__(32 * W) k_attn(const float *q, int64_t ldq, int64_t ldq_head, const float *k,
                              const float *v, float *out, int64_t ldo, int64_t n_head,
                              int64_t n_gqa, int64_t hd, int64_t ld_kv, int64_t pos0,
                              const int32_t *pos0_dev, int64_t window, float scale, float softcap)
{
    __shared__ float sm[W], sl[W];
    if (pos0_dev) pos0 = *pos0_dev; /* attention_dpos */
    __shared__ float sacc[W][32 * C];
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    int64_t t = blockIdx.x / n_head, h = blockIdx.x % n_head, kvh = h / n_gqa;
    int64_t p = pos0 + t, s1 = p + 1, s0 = 0;
    if (window > 0 && p - window + 1 > 0) s0 = p - window + 1;
    const float *qh = q + t * ldq + h * ldq_head;
    float qr[C], acc[C];
#pragma unroll
    for (int c = 0; c < C; c++) {
        int64_t e = lane + 32 * c;
        qr[c] = e < hd ? qh[e] : 0.0f;
        acc[c] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int64_t s = s0 + wid; s < s1; s += W) {
        const float *ks = k + s * ld_kv + kvh * hd, *vs = v + s * ld_kv + kvh * hd;
        float d = 0.0f;
#pragma unroll
        for (int c = 0; c < C; c++) {
            int64_t e = lane + 32 * c;
            if (e < hd) d += qr[c] * ks[e];
        }
        d = warp_sum(d);
        float sc = d * scale;
        if (softcap > 0.0f) sc = softcap * tanhf(sc / softcap);
        float mn = fmaxf(m, sc);
        float corr = expf(m - mn); /* 0 for the first position (m = -inf) */
        float pe = expf(sc - mn);
        l = l * corr + pe;
#pragma unroll
        for (int c = 0; c < C; c++) {
            int64_t e = lane + 32 * c;
            acc[c] = acc[c] * corr + (e < hd ? pe * vs[e] : 0.0f);
        }
        m = mn;
    }
    float M, L, f[W];
    attn_merge_warps<C, W>(m, l, acc, sm, sl, sacc, f, &M, &L);
    float *oh = out + t * ldo + h * hd;
    for (int64_t e = threadIdx.x; e < hd; e += blockDim.x) {
        float o = 0.0f;
        for (int w = 0; w < W; w++) o += sacc[w][e] * f[w];
        oh[e] = o / L;
    }
}

/* Decode (few blocks): the visible positions of each (token, query head) are
 * cut into n_split contiguous parts, one block of ATTN_SPLIT_W warps each,
 * so that a short decode step still spreads its K/V reads over the device.
 * The parts are sized on the device from the visible range (pos0 may come
 * from device memory), so one launch shape serves every position; a block
 * writes its part's max, weight sum and unnormalised output to part
 * [(t·n_head + h)·n_split + sp][2 + head_dim], and k_attn_merge combines the
 * parts in order (a part with no position adds 0). Each warp takes two
 * positions per step so that their loads overlap. */
#define ATTN_SPLIT_W 4
#define ATTN_SPLIT_MAX 32
template <int C>
static __global__ void __launch_bounds__(32 * ATTN_SPLIT_W)
k_attn_split(const float *q, int64_t ldq, int64_t ldq_head, const float *k, const float *v,
             float *part, int64_t n_head, int64_t n_gqa, int64_t hd, int64_t ld_kv, int64_t pos0,
             const int32_t *pos0_dev, int64_t window, float scale, float softcap, int n_split)
{
    const int W = ATTN_SPLIT_W;
    __shared__ float sm[W], sl[W];
    __shared__ float sacc[W][32 * C];
    if (pos0_dev) pos0 = *pos0_dev;
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int64_t th = blockIdx.x / n_split, sp = blockIdx.x % n_split;
    const int64_t t = th / n_head, h = th % n_head, kvh = h / n_gqa;
    const int64_t p = pos0 + t, s1 = p + 1;
    int64_t s0 = 0;
    if (window > 0 && p - window + 1 > 0) s0 = p - window + 1;
    const int64_t len = (s1 - s0 + n_split - 1) / n_split;
    const int64_t a = s0 + sp * len, b = a + len < s1 ? a + len : s1;
    const float *qh = q + t * ldq + h * ldq_head;
    float qr[C], acc[C];
#pragma unroll
    for (int c = 0; c < C; c++) {
        int64_t e = lane + 32 * c;
        qr[c] = e < hd ? qh[e] : 0.0f;
        acc[c] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int64_t s = a + wid; s < b; s += 2 * W) {
        const int64_t s2 = s + W;
        const bool two = s2 < b;
        const float *k1 = k + s * ld_kv + kvh * hd, *v1 = v + s * ld_kv + kvh * hd;
        const float *k2 = k + (two ? s2 : s) * ld_kv + kvh * hd, *v2 = v + (two ? s2 : s) * ld_kv + kvh * hd;
        float d1 = 0.0f, d2 = 0.0f;
#pragma unroll
        for (int c = 0; c < C; c++) {
            int64_t e = lane + 32 * c;
            if (e < hd) {
                d1 += qr[c] * k1[e];
                d2 += qr[c] * k2[e];
            }
        }
        d1 = warp_sum(d1);
        d2 = warp_sum(d2);
        float c1 = d1 * scale, c2 = d2 * scale;
        if (softcap > 0.0f) {
            c1 = softcap * tanhf(c1 / softcap);
            c2 = softcap * tanhf(c2 / softcap);
        }
        float mn = fmaxf(m, two ? fmaxf(c1, c2) : c1);
        float corr = expf(m - mn); /* 0 for the first position (m = -inf) */
        float e1 = expf(c1 - mn), e2 = two ? expf(c2 - mn) : 0.0f;
        l = l * corr + e1 + e2;
#pragma unroll
        for (int c = 0; c < C; c++) {
            int64_t e = lane + 32 * c;
            acc[c] = acc[c] * corr + (e < hd ? e1 * v1[e] + e2 * v2[e] : 0.0f);
        }
        m = mn;
    }
    float M, L, f[W];
    attn_merge_warps<C, W>(m, l, acc, sm, sl, sacc, f, &M, &L);
    float *pp = part + (int64_t)blockIdx.x * (2 + hd);
    if (threadIdx.x == 0) {
        pp[0] = M;
        pp[1] = L;
    }
    for (int64_t e = threadIdx.x; e < hd; e += blockDim.x) {
        float o = 0.0f;
        for (int w = 0; w < W; w++) o += sacc[w][e] * f[w];
        pp[2 + e] = o;
    }
}

/* out row (t, h) = Σ_sp acc_sp · e^(M_sp − M) / Σ_sp L_sp · e^(M_sp − M), parts in order.
 * The parts' factors are found once, side by side (warp 0, lane sp: n_split <=
 * ATTN_SPLIT_MAX = 32), into shared memory; the sums then run over sp in order,
 * with the loads of several parts in flight. */
static __global__ void k_attn_merge(const float *part, float *out, int64_t ldo, int64_t n_head,
                                    int64_t hd, int n_split)
{
    __shared__ float fac[ATTN_SPLIT_MAX], s_l[1];
    __shared__ int on[ATTN_SPLIT_MAX]; /* part sp saw a position (L_sp > 0) */
    const int64_t th = blockIdx.x, t = th / n_head, h = th % n_head;
    const float *pp = part + th * n_split * (2 + hd);
    if (threadIdx.x < 32) {
        const int sp = threadIdx.x;
        const float Ms = sp < n_split ? pp[sp * (2 + hd)] : 0.0f;
        const float Ls = sp < n_split ? pp[sp * (2 + hd) + 1] : 0.0f;
        float M = Ls > 0.0f ? Ms : -INFINITY;
        for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, VT_GPU_SHFL_XOR(M, o));
        const float f = Ls > 0.0f ? expf(Ms - M) : 0.0f;
        if (sp < n_split) fac[sp] = f, on[sp] = Ls > 0.0f;
        /* L in part order, as a running sum */
        float L = 0.0f;
        for (int k = 0; k < n_split; k++) {
            const float Lk = VT_GPU_SHFL(Ls, k), fk = VT_GPU_SHFL(f, k);
            if (Lk > 0.0f) L += Lk * fk;
        }
        if (sp == 0) s_l[0] = L;
    }
    __syncthreads();
    const float L = s_l[0];
    float *oh = out + t * ldo + h * hd;
    for (int64_t e = threadIdx.x; e < hd; e += blockDim.x) {
        float o = 0.0f;
#pragma unroll 8
        for (int sp = 0; sp < n_split; sp++) {
            if (on[sp]) o += pp[sp * (2 + hd) + 2 + e] * fac[sp];
        }
        oh[e] = o / L;
    }
}

/* The parts' buffer of the split kernel (ctx->attn_part, VT_GPU_ATTN_PART_BYTES):
 * allocated on first use, never while a graph is recorded (graph_begin
 * reserves it); 0 when it is not there. */
extern "C" void vt_gpu_attn_reserve(vt_backend_ctx *ctx)
{
    if (ctx->attn_part || ctx->capturing) return;
    void *p = NULL;
    if (vt_gpu_malloc(&p, VT_GPU_ATTN_PART_BYTES) != vt_gpu_success) {
        (void)vt_gpu_get_last_error();
        return; /* the one-block-per-head kernel then runs */
    }
    ctx->attn_part = p;
}

/* attention and attention_dpos: pos0_dev NULL (pos0, n_kv from the host) or
 * the device int32 holding pos0 (n_kv then pos0 + n_tokens <= n_kv, unchecked
 * on the host). */
static vt_status attention_impl(vt_backend_ctx *ctx, const char *op, const float *q, int64_t ldq,
                                int64_t ldq_head, const float *k_cache, const float *v_cache,
                                float *out, int64_t ldo, int64_t n_tokens, int64_t n_head,
                                int64_t n_head_kv, int64_t head_dim, int64_t pos0,
                                const int32_t *pos0_dev, int64_t n_kv, int64_t window, float scale,
                                float softcap)
{
    NEED_CTX("attention");
    CHECK(n_tokens >= 0, "%s: n_tokens %lld < 0", op, (long long)n_tokens);
    CHECK(n_head > 0 && n_head_kv > 0 && n_head % n_head_kv == 0,
          "%s: n_head %lld is not a positive multiple of n_head_kv %lld", op, (long long)n_head,
          (long long)n_head_kv);
    CHECK(head_dim > 0, "%s: head_dim %lld <= 0", op, (long long)head_dim);
    CHECK(pos0 >= 0 && window >= 0, "%s: pos0 %lld, window %lld", op, (long long)pos0,
          (long long)window);
    if (n_tokens == 0) return VT_OK;
    CHECK(pos0 + n_tokens <= n_kv,
          "%s: positions up to %lld need the cache to hold them, but n_kv is %lld", op,
          (long long)(pos0 + n_tokens - 1), (long long)n_kv);
    CHECK(q && k_cache && v_cache && out, "%s: a pointer is NULL", op);
    CHECK((n_head == 1 || ldq_head >= head_dim) && (n_tokens == 1 || ldq >= head_dim),
          "%s: q strides ldq %lld, ldq_head %lld too small for %lld heads of %lld", op,
          (long long)ldq, (long long)ldq_head, (long long)n_head, (long long)head_dim);
    CHECK(ldo >= n_head * head_dim, "%s: ldo %lld < n_head·head_dim %lld", op, (long long)ldo,
          (long long)(n_head * head_dim));
    if (head_dim > VT_GPU_ATTN_MAX_HEAD_DIM)
        return vt_gpu_fail(ctx->host, VT_ERR_UNSUPPORTED, "%s: head_dim %lld exceeds the "
                           "kernel's limit of %d", op, (long long)head_dim, VT_GPU_ATTN_MAX_HEAD_DIM);
    if (n_tokens * n_head > INT_MAX)
        return vt_gpu_fail(ctx->host, VT_ERR_UNSUPPORTED, "%s: %lld tokens x %lld heads "
                           "exceed the grid", op, (long long)n_tokens, (long long)n_head);
    TRY(vt_gpu_select_device(ctx, op));
    unsigned nb = (unsigned)(n_tokens * n_head);
    int64_t g = n_head / n_head_kv, ld_kv = n_head_kv * head_dim;
    /* few blocks (decode): the positions split over n_split blocks per
     * (token, head) when the parts' buffer holds them (the split depends on
     * the block count only, so a recorded step and its ops agree) */
    const int n_sm = ctx->n_sm > 0 ? ctx->n_sm : 132;
    if ((int64_t)nb < n_sm) {
        int n_split = (int)ceil_div(2 * (int64_t)n_sm, (int64_t)nb);
        if (n_split > ATTN_SPLIT_MAX) n_split = ATTN_SPLIT_MAX;
        vt_gpu_attn_reserve(ctx);
        const size_t need = (size_t)nb * (size_t)n_split * (size_t)(2 + head_dim) * sizeof(float);
        if (ctx->attn_part && need <= VT_GPU_ATTN_PART_BYTES) {
            float *part = (float *)ctx->attn_part;
            const unsigned ns = nb * (unsigned)n_split;
#define ATTN_SPLIT(C)                                                                          \
    k_attn_split<C><<<ns, 32 * ATTN_SPLIT_W, 0, VT_ST>>>(q, ldq, ldq_head, k_cache, v_cache,   \
                                                         part, n_head, g, head_dim, ld_kv,     \
                                                         pos0, pos0_dev, window, scale,        \
                                                         softcap, n_split)
            if (head_dim <= 64) ATTN_SPLIT(2);
            else if (head_dim <= 128) ATTN_SPLIT(4);
            else if (head_dim <= 256) ATTN_SPLIT(8);
            else ATTN_SPLIT(16);
#undef ATTN_SPLIT
            TRY(launched(ctx, op));
            k_attn_merge<<<nb, 128, 0, VT_ST>>>(part, out, ldo, n_head, head_dim, n_split);
            return launched(ctx, op);
        }
    }
    /* few blocks: 16 warps each, so that one (token, head)'s positions are
     * spread over more warps; else 4 */
    const bool few = nb < 256;
#define ATTN_LAUNCH(C)                                                                         \
    do {                                                                                       \
        if (few)                                                                               \
            k_attn<C, ATTN_WARPS_FEW><<<nb, 32 * ATTN_WARPS_FEW, 0, VT_ST>>>(                  \
                q, ldq, ldq_head, k_cache, v_cache, out, ldo, n_head, g, head_dim, ld_kv, pos0, \
                pos0_dev, window, scale, softcap);                                             \
        else                                                                                   \
            k_attn<C, ATTN_WARPS><<<nb, 32 * ATTN_WARPS, 0, VT_ST>>>(                          \
                q, ldq, ldq_head, k_cache, v_cache, out, ldo, n_head, g, head_dim, ld_kv, pos0, \
                pos0_dev, window, scale, softcap);                                             \
    } while (0)
    if (head_dim <= 64) ATTN_LAUNCH(2);
    else if (head_dim <= 128) ATTN_LAUNCH(4);
    else if (head_dim <= 256) ATTN_LAUNCH(8);
    else ATTN_LAUNCH(16);
#undef ATTN_LAUNCH
    return launched(ctx, op);
}

extern "C" vt_status vt_gpu_attention(vt_backend_ctx *ctx, const float *q, int64_t ldq,
                                      int64_t ldq_head, const float *k_cache, const float *v_cache,
                                      float *out, int64_t ldo, int64_t n_tokens, int64_t n_head,
                                      int64_t n_head_kv, int64_t head_dim, int64_t pos0,
                                      int64_t n_kv, int64_t window, float scale, float softcap)
{
    return attention_impl(ctx, "attention", q, ldq, ldq_head, k_cache, v_cache, out, ldo, n_tokens,
                          n_head, n_head_kv, head_dim, pos0, NULL, n_kv, window, scale, softcap);
}

extern "C" vt_status vt_gpu_attention_dpos(vt_backend_ctx *ctx, const float *q, int64_t ldq,
                                           int64_t ldq_head, const float *k_cache,
                                           const float *v_cache, float *out, int64_t ldo,
                                           int64_t n_tokens, int64_t n_head, int64_t n_head_kv,
                                           int64_t head_dim, const int32_t *pos0,
                                           int64_t n_kv_max, int64_t window, float scale,
                                           float softcap)
{
    if (ctx && !pos0)
        return vt_gpu_fail(ctx->host, VT_ERR_INVALID_ARG, "attention_dpos: pos0 is NULL");
    return attention_impl(ctx, "attention_dpos", q, ldq, ldq_head, k_cache, v_cache, out, ldo,
                          n_tokens, n_head, n_head_kv, head_dim, 0, pos0, n_kv_max, window, scale,
                          softcap);
}

