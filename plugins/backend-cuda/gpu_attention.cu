/*
 * gpu_attention.cu - attention over the KV cache for backend-cuda /
 * backend-rocm (vt/backend.h: attention, and attention_dpos of ABI 1.2 with
 * pos0 read from device memory):
 *  - prefill (16 tokens or more, and at least one (token, head) pair per
 *    SM; fewer pairs take the split kernel below): a tiled, flash-attention
 *    style kernel
 *    (k_attn_tiled: 16 queries of a head per block share each tile of 32
 *    K/V rows in shared memory, online softmax per query row);
 *  - fewer tokens: one block per (token, query head) whose warps each run an
 *    online (max-subtracted) float32 softmax over a share of the visible
 *    positions, merged at the end (4 warps per block, 16 when the blocks are
 *    few), or for decode the positions split over several blocks per head
 *    (k_attn_split + k_attn_merge).
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

/* ======================= prefill: tiled attention ======================= */

/*
 * Prefill (n_tokens >= ATTN_TILE_MIN): flash-attention style tiling. A block
 * of FA_THREADS threads takes FA_BQ consecutive tokens of one query head and
 * walks the visible key positions FA_BK at a time; each key tile's K and V
 * rows are read once for all FA_BQ queries (instead of once per query), in
 * FA_DC-column chunks through shared memory. Thread (r = tid / 8, c = tid % 8)
 * holds query row r: scores of keys c + 8j (j < 4) and output columns
 * 4c + 32j .. +3 (float4 groups); the row's 8 threads keep the same running
 * max m and weight sum l (shuffle reductions over lanes xor 1, 2, 4). Per key
 * tile: s = (q·k)·scale (softcap: softcap·tanh(s/softcap)), positions outside
 * the causal window masked, m' = max(m, tile max), o and l scaled by
 * e^(m − m'), p = e^(s − m') added. float32 throughout, like k_attn (the
 * products are summed in another order: float32 rounding only).
 */
#define FA_BQ 16
#define FA_BK 32
#define FA_DC 128
#define FA_THREADS 128
#define ATTN_TILE_MIN 16

template <int NC, bool VEC>
static __global__ void __launch_bounds__(FA_THREADS)
k_attn_tiled(const float *q, int64_t ldq, int64_t ldq_head, const float *k, const float *v,
             float *out, int64_t ldo, int64_t n_tokens, int64_t n_gqa, int hd,
             int64_t ld_kv, int64_t pos0, const int32_t *pos0_dev, int64_t window, float scale,
             float softcap)
{
    __shared__ __align__(16) float qs[FA_BQ][FA_DC + 4];
    __shared__ __align__(16) float kv[FA_BK][FA_DC + 4];
    __shared__ float ps[FA_BQ][FA_BK + 1];
    if (pos0_dev) pos0 = *pos0_dev;
    const int tid = threadIdx.x, r = tid >> 3, c = tid & 7;
    const int64_t h = blockIdx.y, kvh = h / n_gqa, t0 = (int64_t)blockIdx.x * FA_BQ;
    const int64_t nq = n_tokens - t0 < FA_BQ ? n_tokens - t0 : FA_BQ;
    const int64_t p_first = pos0 + t0, p_last = pos0 + t0 + nq - 1;
    int64_t s_lo = 0;
    if (window > 0 && p_first - window + 1 > 0) s_lo = p_first - window + 1;
    const int64_t s_hi = p_last + 1;
    const int64_t my_p = pos0 + t0 + r; /* this thread's query position (r < nq) */
    int64_t my_lo = 0;
    if (window > 0 && my_p - window + 1 > 0) my_lo = my_p - window + 1;
    float4 o[NC][FA_DC / 32];
#pragma unroll
    for (int ch = 0; ch < NC; ch++)
#pragma unroll
        for (int j = 0; j < FA_DC / 32; j++) o[ch][j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float m = -INFINITY, l = 0.0f;
    const float *kb = k + kvh * hd, *vb = v + kvh * hd;
    for (int64_t s0 = s_lo - s_lo % FA_BK; s0 < s_hi; s0 += FA_BK) {
        float sc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        /* scores, chunk by chunk of FA_DC columns */
#pragma unroll
        for (int ch = 0; ch < NC; ch++) {
            const int d0 = ch * FA_DC;
            for (int i = tid; i < FA_BQ * FA_DC; i += FA_THREADS) {
                const int rr = i / FA_DC, d = i % FA_DC;
                qs[rr][d] = rr < nq && d0 + d < hd ? q[(t0 + rr) * ldq + h * ldq_head + d0 + d] : 0.0f;
            }
            if constexpr (VEC) {
                for (int i = tid; i < FA_BK * (FA_DC / 4); i += FA_THREADS) {
                    const int kk = i / (FA_DC / 4), d = (i % (FA_DC / 4)) * 4;
                    const int64_t s = s0 + kk;
                    *(float4 *)&kv[kk][d] = s < s_hi && d0 + d < hd
                                                ? *(const float4 *)(kb + s * ld_kv + d0 + d)
                                                : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                }
            } else {
                for (int i = tid; i < FA_BK * FA_DC; i += FA_THREADS) {
                    const int kk = i / FA_DC, d = i % FA_DC;
                    const int64_t s = s0 + kk;
                    kv[kk][d] = s < s_hi && d0 + d < hd ? kb[s * ld_kv + d0 + d] : 0.0f;
                }
            }
            __syncthreads();
#pragma unroll 8
            for (int d = 0; d < FA_DC; d += 4) {
                const float4 qv = *(const float4 *)&qs[r][d];
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const float4 kq = *(const float4 *)&kv[c + 8 * j][d];
                    sc[j] += qv.x * kq.x + qv.y * kq.y + qv.z * kq.z + qv.w * kq.w;
                }
            }
            __syncthreads();
        }
        /* mask, softcap, online softmax update */
        float tmax = -INFINITY;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int64_t s = s0 + c + 8 * j;
            float x = sc[j] * scale;
            if (softcap > 0.0f) x = softcap * tanhf(x / softcap);
            const bool vis = r < nq && s >= my_lo && s <= my_p;
            sc[j] = vis ? x : -INFINITY;
            tmax = fmaxf(tmax, sc[j]);
        }
        tmax = fmaxf(tmax, VT_GPU_SHFL_XOR(tmax, 1));
        tmax = fmaxf(tmax, VT_GPU_SHFL_XOR(tmax, 2));
        tmax = fmaxf(tmax, VT_GPU_SHFL_XOR(tmax, 4));
        const float mn = fmaxf(m, tmax);
        float corr = 1.0f, psum = 0.0f;
        if (mn != -INFINITY) {
            corr = expf(m - mn); /* 0 while no position was visible (m = -inf) */
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float pe = expf(sc[j] - mn); /* masked: e^-inf = 0 */
                ps[r][c + 8 * j] = pe;
                psum += pe;
            }
        } else {
#pragma unroll
            for (int j = 0; j < 4; j++) ps[r][c + 8 * j] = 0.0f;
        }
        psum += VT_GPU_SHFL_XOR(psum, 1);
        psum += VT_GPU_SHFL_XOR(psum, 2);
        psum += VT_GPU_SHFL_XOR(psum, 4);
        l = l * corr + psum;
        m = mn;
        /* o = o·corr + p·V, chunk by chunk */
#pragma unroll
        for (int ch = 0; ch < NC; ch++) {
            const int d0 = ch * FA_DC;
            if constexpr (VEC) {
                for (int i = tid; i < FA_BK * (FA_DC / 4); i += FA_THREADS) {
                    const int kk = i / (FA_DC / 4), d = (i % (FA_DC / 4)) * 4;
                    const int64_t s = s0 + kk;
                    *(float4 *)&kv[kk][d] = s < s_hi && d0 + d < hd
                                                ? *(const float4 *)(vb + s * ld_kv + d0 + d)
                                                : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                }
            } else {
                for (int i = tid; i < FA_BK * FA_DC; i += FA_THREADS) {
                    const int kk = i / FA_DC, d = i % FA_DC;
                    const int64_t s = s0 + kk;
                    kv[kk][d] = s < s_hi && d0 + d < hd ? vb[s * ld_kv + d0 + d] : 0.0f;
                }
            }
            __syncthreads();
#pragma unroll
            for (int j = 0; j < FA_DC / 32; j++) {
                o[ch][j].x *= corr;
                o[ch][j].y *= corr;
                o[ch][j].z *= corr;
                o[ch][j].w *= corr;
            }
#pragma unroll 4
            for (int kk = 0; kk < FA_BK; kk++) {
                const float pe = ps[r][kk];
#pragma unroll
                for (int j = 0; j < FA_DC / 32; j++) {
                    const float4 vv = *(const float4 *)&kv[kk][4 * c + 32 * j];
                    o[ch][j].x += pe * vv.x;
                    o[ch][j].y += pe * vv.y;
                    o[ch][j].z += pe * vv.z;
                    o[ch][j].w += pe * vv.w;
                }
            }
            __syncthreads();
        }
    }
    if (r >= nq) return;
    float *oh = out + (t0 + r) * ldo + h * hd;
    const float il = 1.0f / l;
#pragma unroll
    for (int ch = 0; ch < NC; ch++)
#pragma unroll
        for (int j = 0; j < FA_DC / 32; j++) {
            const int d = ch * FA_DC + 4 * c + 32 * j;
            const float ov[4] = {o[ch][j].x, o[ch][j].y, o[ch][j].z, o[ch][j].w};
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (d + e < hd) oh[d + e] = ov[e] * il;
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
    if (n_tokens >= ATTN_TILE_MIN) { /* prefill: the tiled kernel */
        const bool vec = head_dim % 4 == 0 && ld_kv % 4 == 0 && (uintptr_t)k_cache % 16 == 0 &&
                         (uintptr_t)v_cache % 16 == 0;
        dim3 grid((unsigned)ceil_div(n_tokens, FA_BQ), (unsigned)n_head);
        if (grid.x > INT_MAX || n_head > 65535)
            return vt_gpu_fail(ctx->host, VT_ERR_UNSUPPORTED, "%s: %lld tokens x %lld heads "
                               "exceed the grid", op, (long long)n_tokens, (long long)n_head);
#define ATTN_TILED(NC)                                                                          \
    do {                                                                                        \
        if (vec)                                                                                \
            k_attn_tiled<NC, true><<<grid, FA_THREADS, 0, VT_ST>>>(                             \
                q, ldq, ldq_head, k_cache, v_cache, out, ldo, n_tokens, g,                      \
                (int)head_dim, ld_kv, pos0, pos0_dev, window, scale, softcap);                  \
        else                                                                                    \
            k_attn_tiled<NC, false><<<grid, FA_THREADS, 0, VT_ST>>>(                            \
                q, ldq, ldq_head, k_cache, v_cache, out, ldo, n_tokens, g,                      \
                (int)head_dim, ld_kv, pos0, pos0_dev, window, scale, softcap);                  \
    } while (0)
        if (head_dim <= FA_DC) ATTN_TILED(1);
        else if (head_dim <= 2 * FA_DC) ATTN_TILED(2);
        else if (head_dim <= 3 * FA_DC) ATTN_TILED(3);
        else ATTN_TILED(4);
#undef ATTN_TILED
        return launched(ctx, op);
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

