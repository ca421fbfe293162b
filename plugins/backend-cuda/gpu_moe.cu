/*
 * gpu_moe.cu - the fused MoE ops of ABI 1.2 for backend-cuda / backend-rocm
 * (vt/backend.h is the contract): moe_route and moe_ffn.
 *
 * moe_route: one block per row. The max, then Σ exp(l − max) in double
 * (a block reduction, so the order of the double additions differs from the
 * CPU's loop: the float p agrees but for a rounding tie), p rounded to float
 * as softmax_topk does, then k rounds of a block-wide argmax (ties to the
 * lower index), the picked sum in double in pick order, the renormalisation
 * and the per-expert scale exactly as vt_util_softmax_topk_row. Results stay
 * in device memory.
 *
 * moe_ffn, by n_tokens (never by how many pairs fall in the expert range, so
 * a split range gives the bits of one call):
 *  - decode (n_tokens <= VT_GPU_MM_VEC_MAX): a batched matvec over the
 *    (token, expert) pairs: one kernel computes, for every pair and every
 *    row o of the expert's gate and up matrices, act(gate·x)·(up·x) (one
 *    warp per two rows, weights decoded on the fly in 8-value groups, the
 *    mat_mul decode kernel's scheme); a second does the down matvec per pair.
 *  - prefill: the pairs of the range are sorted by expert on the device (one
 *    block: counts, prefix sums, tile offsets, then each pair's slot), and a
 *    grouped tiled GEMM runs over tiles of MOE_BM pairs of one expert by
 *    MOE_BN output rows: gate and up together with the activation in the
 *    epilogue, then down. Weight tiles are decoded exactly to float32 in
 *    shared memory (8-value groups, QT<T>::group), activations read in place
 *    through the pair -> token map. Block types on a device with tensor
 *    cores (ctx->gemm_tc) run gpu_mma.cu's TF32 MMA kernel over the same
 *    tiles; float weights, and every type with VT_GPU_GEMM=cublas or tiled,
 *    the float32 kernel here (accumulation in order of the input index).
 *  - both: a combine kernel adds, per token and column, w·y of the token's
 *    pairs in the range in increasing expert id (ties in order of j) into
 *    out, each product and sum rounded (no fused multiply-add), as
 *    scatter_add does.
 * The activation is unary_ref's (double, rounded once) and the product
 * act·up one float multiplication: the arithmetic of unary + binary.
 * Float32 accumulation where backend-cpu's scalar reference uses double:
 * results differ by summation rounding only (tests/test_moe_ops.c).
 *
 * The weight pointer tables are device memory; an entry is read only for an
 * expert some pair in the range selects. Weight rows must keep the
 * alignment the type's decoder needs (walign<T>(): device allocations and
 * GGUF tensor data do).
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_device.cuh"
#include "vt/plugin_util.h"

/* ======================= moe_route ======================= */

#define ROUTE_THREADS 256
#define ROUTE_MAX_N 8192 /* experts per row held in shared memory */

static __global__ void k_moe_route(const float *__restrict__ logits, int n, int k, int renorm,
                                   const float *__restrict__ scale, int32_t *__restrict__ ids,
                                   float *__restrict__ weights)
{
    extern __shared__ float p[]; /* n */
    __shared__ float red_v[ROUTE_THREADS / 32];
    __shared__ int red_i[ROUTE_THREADS / 32];
    const float *l = logits + (size_t)blockIdx.x * (size_t)n;
    const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5, nw = blockDim.x >> 5;
    /* max */
    float mx = -INFINITY;
    for (int i = tid; i < n; i += blockDim.x) mx = fmaxf(mx, l[i]);
    for (int m = 16; m > 0; m >>= 1) mx = fmaxf(mx, VT_GPU_SHFL_XOR(mx, m));
    if (lane == 0) red_v[wid] = mx;
    __syncthreads();
    mx = red_v[0];
    for (int i = 1; i < nw; i++) mx = fmaxf(mx, red_v[i]);
    /* Σ exp(l - max) in double */
    double s = 0.0;
    for (int i = tid; i < n; i += blockDim.x) s += exp((double)l[i] - (double)mx);
    s = block_sum_d(s);
    for (int i = tid; i < n; i += blockDim.x) p[i] = (float)(exp((double)l[i] - (double)mx) / s);
    __syncthreads();
    double picked = 0.0; /* thread 0 */
    for (int m = 0; m < k; m++) {
        /* argmax over unpicked p >= 0, ties to the lower index */
        float bv = -1.0f;
        int bi = -1;
        for (int i = tid; i < n; i += blockDim.x)
            if (p[i] >= 0.0f && (bi < 0 || p[i] > bv)) bv = p[i], bi = i;
        for (int off = 16; off > 0; off >>= 1) {
            float ov = VT_GPU_SHFL_XOR(bv, off);
            int oi = VT_GPU_SHFL_XOR(bi, off);
            if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi))) bv = ov, bi = oi;
        }
        if (lane == 0) red_v[wid] = bv, red_i[wid] = bi;
        __syncthreads();
        if (tid == 0) {
            bv = red_v[0], bi = red_i[0];
            for (int i = 1; i < nw; i++)
                if (red_i[i] >= 0 && (bi < 0 || red_v[i] > bv || (red_v[i] == bv && red_i[i] < bi)))
                    bv = red_v[i], bi = red_i[i];
            if (bi < 0) /* only NaNs left: the lowest unpicked index */
                for (int i = 0; i < n && bi < 0; i++)
                    if (!(p[i] < 0.0f)) bi = i;
            ids[(size_t)blockIdx.x * k + m] = bi;
            weights[(size_t)blockIdx.x * k + m] = p[bi];
            picked += p[bi];
            p[bi] = -1.0f;
        }
        __syncthreads();
    }
    if (tid == 0) {
        float *w = weights + (size_t)blockIdx.x * k;
        const int32_t *id = ids + (size_t)blockIdx.x * k;
        double den = picked > 6.103515625e-5 ? picked : 6.103515625e-5;
        for (int m = 0; m < k; m++) {
            float v = renorm ? (float)((double)w[m] / den) : w[m];
            w[m] = scale ? __fmul_rn(v, scale[id[m]]) : v;
        }
    }
}

/* The same for rows of at most 32 * V experts (V = 8 for n <= 256, else
 * ROUTE_WARP_VALS), one warp per row (ROUTE_ROWS_PER_BLOCK rows per block):
 * lane l holds p of experts l, l + 32, ... in registers, and every
 * reduction is a warp shuffle. */
#define ROUTE_WARP_VALS 16
#define ROUTE_ROWS_PER_BLOCK 4
#if defined(VT_GPU_HIP) || !defined(__CUDA_ARCH__) || __CUDA_ARCH__ < 800
static __device__ __forceinline__ void route_better(float &bv, int &bi, float ov, int oi)
{
    if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi))) bv = ov, bi = oi;
}
#endif

template <int V>
static __global__ void __launch_bounds__(32 * ROUTE_ROWS_PER_BLOCK)
k_moe_route_warp(const float *__restrict__ logits, int64_t n_rows, int n, int k, int renorm,
                 const float *__restrict__ scale, int32_t *__restrict__ ids,
                 float *__restrict__ weights)
{
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * ROUTE_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    if (row >= n_rows) return; /* whole warps leave together */
    const float *l = logits + row * n;
    float p[V];
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < V; j++) {
        int i = lane + 32 * j;
        p[j] = i < n ? l[i] : -INFINITY;
        mx = fmaxf(mx, p[j]);
    }
    for (int m = 16; m > 0; m >>= 1) mx = fmaxf(mx, VT_GPU_SHFL_XOR(mx, m));
    /* each exponential once (double), summed in the order of the block kernel */
    double ex[V];
    double s = 0.0;
#pragma unroll
    for (int j = 0; j < V; j++) {
        ex[j] = lane + 32 * j < n ? exp((double)p[j] - (double)mx) : 0.0;
        if (lane + 32 * j < n) s += ex[j];
    }
    s = warp_sum_d(s);
#pragma unroll
    for (int j = 0; j < V; j++)
        p[j] = lane + 32 * j < n ? (float)(ex[j] / s) : -1.0f;
    double picked = 0.0;
    int my_id = 0; /* lane m keeps the m-th pick (k <= 32: the launcher's condition) */
    float my_v = 0.0f;
    for (int m = 0; m < k; m++) {
        float bv = -1.0f;
        int bi = -1;
#pragma unroll
        for (int j = 0; j < V; j++)
            if (p[j] >= 0.0f && (bi < 0 || p[j] > bv)) bv = p[j], bi = lane + 32 * j;
#if !defined(VT_GPU_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
        /* the warp's best by two reductions: the largest value (non-negative
         * floats order as their bits; key 0: the lane has none), then the
         * lowest index holding it */
        {
            const uint32_t key = bi < 0 ? 0u : __float_as_uint(bv) + 1u;
            const uint32_t kmax = __reduce_max_sync(0xffffffffu, key);
            const uint32_t imin = __reduce_min_sync(0xffffffffu, key == kmax && kmax ? (uint32_t)bi
                                                                                  : 0xffffffffu);
            bi = kmax ? (int)imin : -1;
        }
#else
        for (int off = 16; off > 0; off >>= 1) {
            float ov = VT_GPU_SHFL_XOR(bv, off);
            int oi = VT_GPU_SHFL_XOR(bi, off);
            route_better(bv, bi, ov, oi);
        }
#endif
        if (bi < 0) { /* only NaNs left: the lowest unpicked index */
            int lo = INT_MAX;
#pragma unroll
            for (int j = V - 1; j >= 0; j--)
                if (lane + 32 * j < n && !(p[j] < 0.0f)) lo = lane + 32 * j;
            for (int off = 16; off > 0; off >>= 1) lo = min(lo, VT_GPU_SHFL_XOR(lo, off));
            bi = lo;
        }
        /* the owner lane reads the picked value out and marks it */
        float v = 0.0f;
#pragma unroll
        for (int j = 0; j < V; j++)
            if (lane + 32 * j == bi) v = p[j], p[j] = -1.0f;
        v = VT_GPU_SHFL(v, bi & 31);
        if (lane == m) my_id = bi, my_v = v;
        picked += v;
    }
    /* the k weights at once, lane m the m-th (the block kernel's arithmetic) */
    if (lane < k) {
        double den = picked > 6.103515625e-5 ? picked : 6.103515625e-5;
        float v = renorm ? (float)((double)my_v / den) : my_v;
        ids[row * k + lane] = my_id;
        weights[row * k + lane] = scale ? __fmul_rn(v, scale[my_id]) : v;
    }
}

/* VT_GPU_ROUTE=block: k_moe_route for every row count (default: the warp
 * kernel where it applies), for comparisons and the tests; read at each call
 * (a graph records it once). A third kernel, one expert per thread of a
 * 256-thread block with one barrier per pick, measured slower on the H200
 * (Qwen anchor decode 1059 tok/s against the warp kernel's 1095) and was
 * dropped. */
static int route_kernel(void)
{
    const char *e = getenv("VT_GPU_ROUTE");
    return e && !strcmp(e, "block") ? 1 : 0;
}

extern "C" vt_status vt_gpu_moe_route(vt_backend_ctx *ctx, const float *logits, int64_t n_rows,
                                      int64_t n, int64_t k, int renorm, const float *expert_scale,
                                      int32_t *ids, float *weights)
{
    NEED_CTX("moe_route");
    CHECK(n_rows >= 0 && n > 0 && k > 0 && k <= n, "moe_route: n_rows %lld, n %lld, k %lld",
          (long long)n_rows, (long long)n, (long long)k);
    if (n_rows == 0) return VT_OK;
    CHECK(logits && ids && weights, "moe_route: a pointer is NULL");
    if (n > ROUTE_MAX_N || n_rows > INT_MAX)
        return vt_gpu_fail(ctx->host, VT_ERR_UNSUPPORTED, "moe_route: %lld experts per row (at "
                           "most %d) or %lld rows exceed the kernel", (long long)n, ROUTE_MAX_N,
                           (long long)n_rows);
    TRY(vt_gpu_select_device(ctx, "moe_route"));
    if (route_kernel() == 0 && n <= 32 * ROUTE_WARP_VALS && k <= 32 &&
        ceil_div(n_rows, ROUTE_ROWS_PER_BLOCK) <= INT_MAX) {
        const unsigned gr = (unsigned)ceil_div(n_rows, ROUTE_ROWS_PER_BLOCK);
        if (n <= 32 * 8)
            k_moe_route_warp<8><<<gr, 32 * ROUTE_ROWS_PER_BLOCK, 0, VT_ST>>>(
                logits, n_rows, (int)n, (int)k, renorm, expert_scale, ids, weights);
        else
            k_moe_route_warp<ROUTE_WARP_VALS><<<gr, 32 * ROUTE_ROWS_PER_BLOCK, 0, VT_ST>>>(
                logits, n_rows, (int)n, (int)k, renorm, expert_scale, ids, weights);
        return launched_into(ctx, "moe_route", ids, n_rows * k, weights, n_rows * k);
    }
    k_moe_route<<<(unsigned)n_rows, ROUTE_THREADS, (size_t)n * sizeof(float), VT_ST>>>(
        logits, (int)n, (int)k, renorm, expert_scale, ids, weights);
    return launched(ctx, "moe_route");
}

/* ======================= moe_ffn: shared pieces ======================= */

/* out[t][c] += w·y of token t's pairs in [eb, ee), increasing expert id (ties
 * by j); y row of pair p is pos ? pos[p] : p. One thread per (column, token). */
static __global__ void k_moe_combine(const int32_t *__restrict__ ids, const float *__restrict__ wts,
                                     const int32_t *__restrict__ pos, const float *__restrict__ y,
                                     int64_t E, int K, int eb, int ee, float *__restrict__ out,
                                     int64_t ldo)
{
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t t = blockIdx.y;
    if (c >= E) return;
    const int32_t *id = ids + t * K;
    float acc = out[t * ldo + c];
    int last_e = -1, last_j = -1;
    for (int n = 0; n < K; n++) {
        /* the next (expert, j) after (last_e, last_j) in the range */
        int be = INT_MAX, bj = -1;
        for (int j = 0; j < K; j++) {
            int e = id[j];
            if (e < eb || e >= ee) continue;
            if (e < last_e || (e == last_e && j <= last_j)) continue;
            if (e < be || (e == be && j < bj)) be = e, bj = j;
        }
        if (bj < 0) break;
        int64_t p = t * K + bj;
        int64_t r = pos ? pos[p] : p;
        acc = __fadd_rn(acc, __fmul_rn(wts[p], y[r * E + c]));
        last_e = be, last_j = bj;
    }
    out[t * ldo + c] = acc;
}

/* ======================= moe_ffn: decode (batched matvec) ======================= */

#define MOE_VEC_WARPS 8
#define MOE_VEC_ROWS 2
#define MOE_VEC_UNROLL 4

/* act_buf[p][o] = act(gate_e[o]·x_t)·(up_e[o]·x_t) for pair p = blockIdx.y
 * (t = p / K, e = ids[p]; nothing for e outside [eb, ee)); two rows per warp. */
template <int TG, int TU>
static __global__ void __launch_bounds__(32 * MOE_VEC_WARPS)
k_moe_vec_gate_up(const float *__restrict__ x, int64_t ldx, const int32_t *__restrict__ ids, int K,
                  int eb, int ee, const void *const *__restrict__ wg, const void *const *__restrict__ wu,
                  size_t rbg, size_t rbu, int64_t E, int64_t F, int act, float *__restrict__ act_buf)
{
    const int R = MOE_VEC_ROWS, lane = threadIdx.x & 31;
    const int64_t p = blockIdx.y;
    const int e = ids[p];
    if (e < eb || e >= ee) return;
    int64_t r0 = ((int64_t)blockIdx.x * MOE_VEC_WARPS + (threadIdx.x >> 5)) * R;
    if (r0 >= F) return;
    const int nr = F - r0 < R ? (int)(F - r0) : R;
    const float *xt = x + (p / K) * ldx;
    const uint8_t *g_rows[R], *u_rows[R];
#pragma unroll
    for (int q = 0; q < R; q++) {
        int64_t r = r0 + (q < nr ? q : 0);
        g_rows[q] = (const uint8_t *)wg[e] + (size_t)r * rbg;
        u_rows[q] = (const uint8_t *)wu[e] + (size_t)r * rbu;
    }
    float ag[R], au[R];
#pragma unroll
    for (int q = 0; q < R; q++) ag[q] = au[q] = 0.0f;
    const int64_t n_g = E / 8;
    for (int64_t G0 = lane; G0 < n_g; G0 += 32 * MOE_VEC_UNROLL) {
#pragma unroll
      for (int uu = 0; uu < MOE_VEC_UNROLL; uu++) { /* several groups' loads in flight */
        const int64_t G = G0 + 32 * uu;
        if (G >= n_g) break;
        float v[8], xa[8];
        int64_t e0 = 0, e1 = 0;
#pragma unroll
        for (int q = 0; q < R; q++) {
            dec8<TG>(g_rows[q], G, v, e0, e1);
            if (q == 0) /* gate and up share a type: the same columns for every row */
#pragma unroll
                for (int j = 0; j < 4; j++) xa[j] = xt[e0 + j], xa[4 + j] = xt[e1 + j];
            float s = ag[q];
#pragma unroll
            for (int j = 0; j < 8; j++) s += v[j] * xa[j];
            ag[q] = s;
            dec8<TU>(u_rows[q], G, v, e0, e1);
            s = au[q];
#pragma unroll
            for (int j = 0; j < 8; j++) s += v[j] * xa[j];
            au[q] = s;
        }
      }
    }
#pragma unroll
    for (int q = 0; q < R; q++) {
        float g = warp_sum(ag[q]), u = warp_sum(au[q]);
        if (lane == 0 && q < nr) act_buf[p * F + r0 + q] = moe_act(act, g, u);
    }
}

/* y[p][o] = down_e[o] · act_buf[p] for pair p = blockIdx.y in range. */
template <int TD>
static __global__ void __launch_bounds__(32 * MOE_VEC_WARPS)
k_moe_vec_down(const float *__restrict__ act_buf, const int32_t *__restrict__ ids, int eb, int ee,
               const void *const *__restrict__ wd, size_t rbd, int64_t E, int64_t F,
               float *__restrict__ y)
{
    const int R = MOE_VEC_ROWS, lane = threadIdx.x & 31;
    const int64_t p = blockIdx.y;
    const int e = ids[p];
    if (e < eb || e >= ee) return;
    int64_t r0 = ((int64_t)blockIdx.x * MOE_VEC_WARPS + (threadIdx.x >> 5)) * R;
    if (r0 >= E) return;
    const int nr = E - r0 < R ? (int)(E - r0) : R;
    const float *a = act_buf + p * F;
    const uint8_t *rows[R];
#pragma unroll
    for (int q = 0; q < R; q++) rows[q] = (const uint8_t *)wd[e] + (size_t)(r0 + (q < nr ? q : 0)) * rbd;
    float acc[R];
#pragma unroll
    for (int q = 0; q < R; q++) acc[q] = 0.0f;
    const int64_t n_g = F / 8;
    for (int64_t G0 = lane; G0 < n_g; G0 += 32 * MOE_VEC_UNROLL) {
#pragma unroll
      for (int uu = 0; uu < MOE_VEC_UNROLL; uu++) {
        const int64_t G = G0 + 32 * uu;
        if (G >= n_g) break;
        float v[8];
        int64_t e0, e1;
        float xa[8];
#pragma unroll
        for (int q = 0; q < R; q++) {
            dec8<TD>(rows[q], G, v, e0, e1);
            if (q == 0)
#pragma unroll
                for (int j = 0; j < 4; j++) xa[j] = a[e0 + j], xa[4 + j] = a[e1 + j];
            float s = acc[q];
#pragma unroll
            for (int j = 0; j < 8; j++) s += v[j] * xa[j];
            acc[q] = s;
        }
      }
    }
#pragma unroll
    for (int q = 0; q < R; q++) {
        float s = warp_sum(acc[q]);
        if (lane == 0 && q < nr) y[p * E + r0 + q] = s;
    }
}

/* ======================= moe_ffn: prefill (grouped GEMM) ======================= */

#define MOE_BM 32  /* pairs per tile (the tensor-core kernels' too) */
static_assert(MOE_BM == VT_GPU_TC_BM_MOE, "k_moe_sort's tiles are the tensor-core kernels' tiles");
#define MOE_BN 64  /* output rows per tile */
#define MOE_BK 32  /* input columns per step */
#define MOE_THREADS 128
#define MOE_SORT_THREADS 1024

/* One block: the pairs with expert in [eb, ee) sorted by expert.
 * off[e] (e <= nx): first sorted slot of expert e; tiles[e]: first tile of
 * expert e (tiles of MOE_BM pairs), tiles[nx] the total; sorted[s] = pair;
 * pos[p] = slot of pair p (-1 outside the range). cnt: nx ints of scratch. */
static __global__ void k_moe_sort(const int32_t *__restrict__ ids, int P, int nx, int eb, int ee,
                                  int32_t *__restrict__ off, int32_t *__restrict__ tiles,
                                  int32_t *__restrict__ sorted, int32_t *__restrict__ pos,
                                  int32_t *__restrict__ cnt)
{
    const int tid = threadIdx.x;
    for (int e = tid; e < nx; e += blockDim.x) cnt[e] = 0;
    __syncthreads();
    for (int p = tid; p < P; p += blockDim.x) {
        int e = ids[p];
        if (e >= eb && e < ee) atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    if (tid == 0) {
        int o = 0, tl = 0;
        for (int e = 0; e < nx; e++) {
            off[e] = o;
            tiles[e] = tl;
            o += cnt[e];
            tl += (cnt[e] + MOE_BM - 1) / MOE_BM;
            cnt[e] = 0; /* reused as the fill counter */
        }
        off[nx] = o;
        tiles[nx] = tl;
    }
    __syncthreads();
    for (int p = tid; p < P; p += blockDim.x) {
        int e = ids[p];
        if (e >= eb && e < ee) {
            int s = off[e] + atomicAdd(&cnt[e], 1);
            sorted[s] = p;
            pos[p] = s;
        } else {
            pos[p] = -1;
        }
    }
}

/* Decode rows [o0, o0 + MOE_BN) x columns [k0, k0 + MOE_BK) of a weight into
 * ws[MOE_BK][MOE_BN + 1] (rows >= n_out read as 0). 128 threads, 2 groups each. */
template <int T>
static __device__ __forceinline__ void load_wtile(const uint8_t *w, size_t rb, int64_t n_out,
                                                  int64_t o0, int64_t k0, float (*ws)[MOE_BN + 1])
{
#pragma unroll
    for (int q = 0; q < 2; q++) {
        int idx = threadIdx.x + MOE_THREADS * q; /* 0..255: row idx/4, group idx%4 */
        int rr = idx >> 2, gq = idx & 3;
        int64_t o = o0 + rr;
        float v[8];
        int64_t e0, e1;
        if (o < n_out) {
            dec8<T>(w + (size_t)o * rb, k0 / 8 + gq, v, e0, e1);
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++) v[j] = 0.0f;
            e0 = k0 + 8 * gq, e1 = e0 + 4; /* any distinct columns of the slice */
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            ws[e0 - k0 + j][rr] = v[j];
            ws[e1 - k0 + j][rr] = v[4 + j];
        }
    }
}

/*
 * The grouped GEMM. Tile blockIdx.x of MOE_BM sorted pairs of one expert by
 * MOE_BN output rows blockIdx.y: out = A · Wᵀ with A the tile's pair rows
 * (GATE_UP: x rows of the pairs' tokens; else act_buf rows in sorted order).
 * GATE_UP: two weights (gate, up), epilogue act(g)·u into act_buf[slot];
 * else one (down) into y[slot]. Thread (tx, ty): rows o0 + tx + 16j (j < 4),
 * pairs ty + 8i (i < 4).
 */
template <int TW, int TU, bool GATE_UP>
static __global__ void __launch_bounds__(MOE_THREADS)
k_moe_gemm(const float *__restrict__ a, int64_t lda, const int32_t *__restrict__ sorted,
           const int32_t *__restrict__ off, const int32_t *__restrict__ tiles, int nx, int K,
           const void *const *__restrict__ w0, const void *const *__restrict__ w1, size_t rb0,
           size_t rb1, int64_t n_in, int64_t n_out, int act, float *__restrict__ dst)
{
    __shared__ float as[MOE_BK][MOE_BM + 1];
    __shared__ float ws0[MOE_BK][MOE_BN + 1];
    __shared__ float ws1[GATE_UP ? MOE_BK : 1][GATE_UP ? MOE_BN + 1 : 1];
    const int e = tile_expert(tiles, nx, blockIdx.x);
    if (e < 0) return;
    const int s0 = off[e] + (blockIdx.x - tiles[e]) * MOE_BM; /* first sorted slot */
    const int s_end = off[e + 1];
    const int64_t o0 = (int64_t)blockIdx.y * MOE_BN;
    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const uint8_t *W0 = (const uint8_t *)w0[e], *W1 = GATE_UP ? (const uint8_t *)w1[e] : NULL;
    /* the A row each thread loads: row tid / 4 of the tile, 8 columns (tid % 4) * 8 */
    const int lr = tid >> 2, lc = (tid & 3) * 8;
    const int ls = s0 + lr;
    const float *arow = NULL;
    if (ls < s_end) arow = GATE_UP ? a + (int64_t)(sorted[ls] / K) * lda : a + (int64_t)ls * lda;
    float acc0[4][4], acc1[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc0[i][j] = acc1[i][j] = 0.0f;
    for (int64_t k0 = 0; k0 < n_in; k0 += MOE_BK) {
#pragma unroll
        for (int j = 0; j < 8; j++) as[lc + j][lr] = arow ? arow[k0 + lc + j] : 0.0f;
        load_wtile<TW>(W0, rb0, n_out, o0, k0, ws0);
        if constexpr (GATE_UP) load_wtile<TU>(W1, rb1, n_out, o0, k0, ws1);
        __syncthreads();
#pragma unroll 8
        for (int kk = 0; kk < MOE_BK; kk++) {
            float av[4], bv[4];
#pragma unroll
            for (int i = 0; i < 4; i++) av[i] = as[kk][ty + 8 * i];
#pragma unroll
            for (int j = 0; j < 4; j++) bv[j] = ws0[kk][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc0[i][j] += av[i] * bv[j];
            if constexpr (GATE_UP) {
                float cv[4];
#pragma unroll
                for (int j = 0; j < 4; j++) cv[j] = ws1[kk][tx + 16 * j];
#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                    for (int j = 0; j < 4; j++) acc1[i][j] += av[i] * cv[j];
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int s = s0 + ty + 8 * i;
        if (s >= s_end) continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int64_t o = o0 + tx + 16 * j;
            if (o >= n_out) continue;
            dst[(int64_t)s * n_out + o] = GATE_UP ? moe_act(act, acc0[i][j], acc1[i][j]) : acc0[i][j];
        }
    }
}

/* ======================= moe_ffn: dispatch ======================= */

/* Device scratch of one call (vt_moe_ffn_scratch_bytes bounds it): act_buf
 * [P][n_ff], y [P][n_embd], then (prefill) sorted [P], pos [P], off and tiles
 * [n_expert + 1], cnt [n_expert]; 256-byte aligned pieces. */
typedef struct moe_bufs {
    float *act_buf, *y;
    int32_t *sorted, *pos, *off, *tiles, *cnt;
    int64_t max_tiles;
} moe_bufs;

static size_t up256(size_t b) { return (b + 255) & ~(size_t)255; }

static moe_bufs moe_carve(const vt_moe_ffn_args *a)
{
    const int64_t P = a->n_tokens * a->k, nx = a->n_expert;
    uint8_t *sp = (uint8_t *)a->scratch;
    moe_bufs b;
    b.act_buf = (float *)sp;
    sp += up256((size_t)(P * a->n_ff) * sizeof(float));
    b.y = (float *)sp;
    sp += up256((size_t)(P * a->n_embd) * sizeof(float));
    b.sorted = (int32_t *)sp;
    sp += up256((size_t)P * sizeof(int32_t));
    b.pos = (int32_t *)sp;
    sp += up256((size_t)P * sizeof(int32_t));
    b.off = (int32_t *)sp;
    sp += up256((size_t)(nx + 1) * sizeof(int32_t));
    b.tiles = (int32_t *)sp;
    sp += up256((size_t)(nx + 1) * sizeof(int32_t));
    b.cnt = (int32_t *)sp;
    /* at most one partial tile per expert besides the full ones */
    int64_t n_e = a->expert_end - a->expert_begin;
    b.max_tiles = ceil_div(P, MOE_BM) + (n_e < P ? n_e : P);
    return b;
}

/* The grouping part of a tensor-core product over the sorted pairs (gpu_mma.cu) */
static vt_gpu_tc_args moe_tc_args(const vt_backend_ctx *ctx, const vt_moe_ffn_args *a,
                                  const moe_bufs *b, uint32_t type, int mode, size_t rb,
                                  int64_t n_in, int64_t n_out)
{
    vt_gpu_tc_args t;
    memset(&t, 0, sizeof t);
    t.type = type;
    t.mode = mode;
    t.rb = rb;
    t.n_in = n_in;
    t.n_out = n_out;
    t.n_rows = a->n_tokens * a->k;
    t.sorted = b->sorted;
    t.off = b->off;
    t.tiles = b->tiles;
    t.n_expert = (int)a->n_expert;
    t.k = (int)a->k;
    t.act = (int)a->act;
    t.max_tiles = b->max_tiles;
    t.xq = ctx->prefill_xq;
    return t;
}

/* gate and up (one type T) for every pair in range: act_buf */
template <int T>
static vt_status moe_gate_up(vt_backend_ctx *ctx, const vt_moe_ffn_args *a, const moe_bufs *b)
{
    const int64_t E = a->n_embd, F = a->n_ff, P = a->n_tokens * a->k;
    const size_t rb = (size_t)vt_type_row_bytes((uint32_t)T, (uint64_t)E);
    const int eb = (int)a->expert_begin, ee = (int)a->expert_end;
    if (a->n_tokens <= VT_GPU_MM_VEC_MAX) {
        dim3 g((unsigned)ceil_div(F, MOE_VEC_WARPS * MOE_VEC_ROWS), (unsigned)P);
        k_moe_vec_gate_up<T, T><<<g, 32 * MOE_VEC_WARPS, 0, VT_ST>>>(a->x, a->ldx, a->ids, (int)a->k, eb, ee,
                                                           a->w_gate, a->w_up, rb, rb, E, F,
                                                           (int)a->act, b->act_buf);
    } else if (vt_gpu_tc_usable(ctx, (uint32_t)T, a->x, a->ldx, E)) {
        vt_gpu_tc_args ta = moe_tc_args(ctx, a, b, (uint32_t)T, VT_GPU_TC_GATE_UP, rb, E, F);
        ta.a = a->x;
        ta.lda = a->ldx;
        ta.w0 = a->w_gate;
        ta.w1 = a->w_up;
        ta.y = b->act_buf;
        return vt_gpu_tc_run(ctx, &ta, "moe_ffn (gate/up)");
    } else {
        dim3 g((unsigned)b->max_tiles, (unsigned)ceil_div(F, MOE_BN));
        k_moe_gemm<T, T, true><<<g, MOE_THREADS, 0, VT_ST>>>(a->x, a->ldx, b->sorted, b->off, b->tiles,
                                                    (int)a->n_expert, (int)a->k, a->w_gate,
                                                    a->w_up, rb, rb, E, F, (int)a->act, b->act_buf);
    }
    return launched(ctx, "moe_ffn (gate/up)");
}

/* down (type T) for every pair in range: y */
template <int T>
static vt_status moe_down(vt_backend_ctx *ctx, const vt_moe_ffn_args *a, const moe_bufs *b)
{
    const int64_t E = a->n_embd, F = a->n_ff, P = a->n_tokens * a->k;
    const size_t rb = (size_t)vt_type_row_bytes((uint32_t)T, (uint64_t)F);
    const int eb = (int)a->expert_begin, ee = (int)a->expert_end;
    if (a->n_tokens <= VT_GPU_MM_VEC_MAX) {
        dim3 g((unsigned)ceil_div(E, MOE_VEC_WARPS * MOE_VEC_ROWS), (unsigned)P);
        k_moe_vec_down<T><<<g, 32 * MOE_VEC_WARPS, 0, VT_ST>>>(b->act_buf, a->ids, eb, ee, a->w_down, rb, E,
                                                     F, b->y);
    } else if (vt_gpu_tc_usable(ctx, (uint32_t)T, b->act_buf, F, F)) {
        vt_gpu_tc_args ta = moe_tc_args(ctx, a, b, (uint32_t)T, VT_GPU_TC_DOWN, rb, F, E);
        ta.a = b->act_buf;
        ta.lda = F;
        ta.w0 = a->w_down;
        ta.y = b->y;
        return vt_gpu_tc_run(ctx, &ta, "moe_ffn (down)");
    } else {
        dim3 g((unsigned)b->max_tiles, (unsigned)ceil_div(E, MOE_BN));
        k_moe_gemm<T, T, false><<<g, MOE_THREADS, 0, VT_ST>>>(b->act_buf, F, b->sorted, b->off, b->tiles,
                                                     (int)a->n_expert, (int)a->k, a->w_down, NULL,
                                                     rb, 0, F, E, (int)a->act, b->y);
    }
    return launched(ctx, "moe_ffn (down)");
}

/* The types with kernels (every type backend-cuda's mat_mul has). */
#define MOE_TYPES(X) VT_GPU_WEIGHT_TYPES(X)

static int moe_type_known(uint32_t t)
{
#define KNOWN(T, n) if (t == (uint32_t)VT_TYPE_##T) return 1;
    MOE_TYPES(KNOWN)
#undef KNOWN
    return 0;
}

static vt_status moe_run(vt_backend_ctx *ctx, const vt_moe_ffn_args *a)
{
    moe_bufs b = moe_carve(a);
    const int64_t T = a->n_tokens, P = T * a->k;
    const int eb = (int)a->expert_begin, ee = (int)a->expert_end;
    if (T > VT_GPU_MM_VEC_MAX) {
        k_moe_sort<<<1, MOE_SORT_THREADS, 0, VT_ST>>>(a->ids, (int)P, (int)a->n_expert, eb, ee, b.off,
                                            b.tiles, b.sorted, b.pos, b.cnt);
        TRY(launched(ctx, "moe_ffn (sort)"));
    }
    vt_status st = VT_ERR_INTERNAL;
    if (T <= VT_GPU_MM_VEC_MAX && vt_gpu_moe_q_usable(ctx, a)) {
        /* int8 activations (gpu_matvec.cu): act_buf holds the rounded act,
         * the down kernel adds into out itself */
        int rounded = 0;
        TRY(vt_gpu_moe_q_run(ctx, a, b.act_buf, &rounded));
        if (rounded && !vt_gpu_overlap(a->out, (T - 1) * a->ldo + a->n_embd, a->x, a->n_embd))
            vt_gpu_xq_keep(ctx, a->x, a->n_embd); /* x stays rounded for its next matmuls */
        return VT_OK;
    }
#define GATE_UP(T_, n)                                                                             \
    if (a->type_gate == (uint32_t)VT_TYPE_##T_) st = moe_gate_up<VT_TYPE_##T_>(ctx, a, &b);
    MOE_TYPES(GATE_UP)
#undef GATE_UP
    TRY(st);
    st = VT_ERR_INTERNAL;
#define DOWN(T_, n)                                                                                \
    if (a->type_down == (uint32_t)VT_TYPE_##T_) st = moe_down<VT_TYPE_##T_>(ctx, a, &b);
    MOE_TYPES(DOWN)
#undef DOWN
    TRY(st);
    k_moe_combine<<<dim3((unsigned)ceil_div(a->n_embd, 128), (unsigned)T), 128, 0, VT_ST>>>(
        a->ids, a->weights, T > VT_GPU_MM_VEC_MAX ? b.pos : NULL, b.y, a->n_embd, (int)a->k, eb,
        ee, a->out, a->ldo);
    return launched(ctx, "moe_ffn (combine)");
}

extern "C" vt_status vt_gpu_moe_ffn(vt_backend_ctx *ctx, const vt_moe_ffn_args *a)
{
    NEED_CTX("moe_ffn");
    char why[512];
    int work = vt_util_moe_ffn_check(a, why, sizeof why);
    if (work < 0) return vt_gpu_fail(ctx->host, VT_ERR_INVALID_ARG, "%s", why);
    if (!work) return VT_OK;
    const char *nm = a->name ? a->name : "(unnamed experts)";
    const int64_t T = a->n_tokens, K = a->k, E = a->n_embd, F = a->n_ff, NX = a->n_expert;
    const uint32_t types[3] = {a->type_gate, a->type_up, a->type_down};
    for (int i = 0; i < 3; i++) {
        if (!moe_type_known(types[i]))
            return vt_gpu_fail(ctx->host, VT_ERR_CAPABILITY, "moe_ffn %s: no kernels for weight "
                               "type %s (id %u)", nm, vt_type_name(types[i]), types[i]);
        CHECK((i < 2 ? E : F) % MOE_BK == 0,
              "moe_ffn %s: %s rows of %lld elements are not a multiple of 32", nm,
              i == 0 ? "gate" : i == 1 ? "up" : "down", (long long)(i < 2 ? E : F));
    }
    if (a->type_up != a->type_gate)
        return vt_gpu_fail(ctx->host, VT_ERR_UNSUPPORTED, "moe_ffn %s: gate (%s) and up (%s) of "
                           "different types are not implemented", nm, vt_type_name(a->type_gate),
                           vt_type_name(a->type_up));
    if (T * K > INT_MAX / 2 || T > 65535 || NX > INT_MAX / 2 ||
        (T <= VT_GPU_MM_VEC_MAX && T * K > 65535))
        return vt_gpu_fail(ctx->host, VT_ERR_UNSUPPORTED, "moe_ffn %s: %lld tokens x top-%lld "
                           "exceed the kernels' grid", nm, (long long)T, (long long)K);
    TRY(vt_gpu_select_device(ctx, "moe_ffn"));
    vt_gpu_tl_mark(ctx, 'm', 0);
    vt_status st = moe_run(ctx, a);
    vt_gpu_tl_mark(ctx, 'M', 0);
    return st;
}
