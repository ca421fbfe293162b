/*
 * gpu_matvec.cu - backend-cuda's (and backend-rocm's) one-token matvecs on
 * int8 activations (gpu_qdot.cuh: the scheme, the per-type block dots):
 * mat_mul with one token, and moe_ffn's decode kernels, for the weight types
 * Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q4_K, Q5_K, Q6_K and the low-bit types
 * (MQ_TYPES). Other types,
 * and contexts made with
 * VT_GPU_INT8_DOT=0, take the float kernels (exact dequantisation, float
 * activations) of gpu_ops.cu / gpu_moe.cu.
 *
 * Why: the float decode kernels turn every 4- or 6-bit code into a float
 * before a fused multiply-add; at the 248320 x 2048 LM head that kept Q4_K at
 * 21% and Q6_K at 30% of the device's copy bandwidth. dp4a takes four codes
 * per instruction from the packed bytes, as llama.cpp's MMVQ kernels do.
 *
 * Layout of the work: each thread block first rounds the activation row(s)
 * it needs into shared memory (qd_quantize), then walks output rows
 * grid-stride. A row is split over a group of 2^k lanes (k from the row's unit
 * count, at most a warp), each lane summing units l, l + 2^k, ..., then a
 * shuffle tree within the group; a warp holds 32 / 2^k rows.
 */
#include <limits.h>

#include "gpu_internal.h"
#include "gpu_qdot.cuh"
#include "vt/plugin_util.h"

#define MQ_THREADS 128
#define MQ_SMEM_MAX (48 * 1024) /* dynamic shared memory without an opt-in */
#define MQ_WARPS (MQ_THREADS / 32)
#define MQ_ONE_BLOCKS 4 /* k_mmq_vec: one row per step below this many blocks per SM */

/* x [n] rounded into q [n], d, s [n/32] (global): one warp per 32-value block. */
static __global__ void __launch_bounds__(MQ_THREADS)
k_quantize_x(const float *__restrict__ x, int n, int8_t *__restrict__ q, float *__restrict__ d,
             float *__restrict__ s)
{
    const int b = blockIdx.x * MQ_WARPS + (threadIdx.x >> 5);
    if (b >= n / 32) return; /* whole warps */
    qd_quantize32(x[32 * b + (threadIdx.x & 31)], q + 32 * b, d + b, s + b);
}

/* y[r] = Σ_u dot(row r, unit u) for r < n_out, one token: x [n_in] rounded
 * in shared memory first (PRE false), or already rounded in global memory
 * (PRE: gq, gd, gs from k_quantize_x). A lane group takes two rows per step
 * (r and r + MQ_WARPS·rpw), so that both rows' loads are in flight together;
 * ONE: one row per step, for a matrix too small to give every SM several
 * warps otherwise (a row's arithmetic is the same either way). */
template <int T, bool PRE, bool ONE = false>
static __global__ void __launch_bounds__(MQ_THREADS)
k_mmq_vec(const uint8_t *__restrict__ w, size_t rb, int n_in, int64_t n_out,
          const float *__restrict__ x, const int8_t *__restrict__ gq, const float *__restrict__ gd,
          const float *__restrict__ gs, float *__restrict__ y, int lpr_log2)
{
    extern __shared__ int4 mq_smem[];
    const int8_t *xq;
    const float *xd, *xs;
    if constexpr (PRE) {
        xq = gq, xd = gd, xs = gs;
    } else {
        int8_t *q = (int8_t *)mq_smem;
        float *d = (float *)(q + n_in), *sc = d + n_in / 32;
        qd_quantize(x, n_in, q, d, sc);
        __syncthreads();
        xq = q, xd = d, xs = sc;
    }
    const int units = n_in / Qi<T>::UNIT, lpr = 1 << lpr_log2, rpw = 32 >> lpr_log2;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int sub = lane >> lpr_log2, li = lane & (lpr - 1);
    const int64_t half = (int64_t)MQ_WARPS * rpw, per = ONE ? half : 2 * half;
    for (int64_t r0 = (int64_t)blockIdx.x * per; r0 < n_out; r0 += (int64_t)gridDim.x * per) {
        const int64_t ra = r0 + warp * rpw + sub, rb2 = ra + half;
        float acc_a = 0.0f, acc_b = 0.0f;
        /* a row past n_out reads row ra (or row 0): never stored */
        const uint8_t *row_a = w + (size_t)(ra < n_out ? ra : 0) * rb;
        const uint8_t *row_b = w + (size_t)(rb2 < n_out ? rb2 : 0) * rb;
        for (int u = li; u < units; u += lpr) {
            acc_a += Qi<T>::dot(row_a, u, xq, xd, xs);
            if (!ONE) acc_b += Qi<T>::dot(row_b, u, xq, xd, xs);
        }
        for (int o = lpr >> 1; o > 0; o >>= 1) {
            acc_a += VT_GPU_SHFL_XOR(acc_a, o);
            if (!ONE) acc_b += VT_GPU_SHFL_XOR(acc_b, o);
        }
        if (li == 0 && ra < n_out) y[ra] = acc_a;
        if (!ONE && li == 0 && rb2 < n_out) y[rb2] = acc_b;
    }
}

/* The types with int8 kernels (a Qi<T> in gpu_qdot.cuh) */
#define MQ_TYPES(X)                                                                                \
    X(Q8_0, q8_0) X(Q4_0, q4_0) X(Q4_1, q4_1) X(Q5_0, q5_0) X(Q5_1, q5_1) X(IQ4_NL, iq4_nl)      \
    X(Q4_K, q4_k) X(Q5_K, q5_k) X(Q6_K, q6_k) VT_GPU_LOWBIT_TYPES(X)

static int mq_type_ok(uint32_t t)
{
#define MQ_OK(T, n) if (t == VT_TYPE_##T) return 1;
    MQ_TYPES(MQ_OK)
#undef MQ_OK
    return 0;
}

static int mq_unit(uint32_t t)
{
    return t == VT_TYPE_Q4_K || t == VT_TYPE_Q5_K || t == VT_TYPE_Q6_K ? 64 : 32;
}

/* The data the kernels of type t can read: Q4_1, Q5_1, Q4_K and Q5_K as
 * 32-bit words, NVFP4 (36-byte blocks, no 16-bit field) as bytes, the rest as
 * 16-bit words. */
static int mq_aligned(uint32_t t, const void *data, size_t rb)
{
    if (t == VT_TYPE_Q4_1 || t == VT_TYPE_Q5_1 || t == VT_TYPE_Q4_K || t == VT_TYPE_Q5_K)
        return (uintptr_t)data % 4 == 0 && rb % 4 == 0;
    if (t == VT_TYPE_NVFP4) return 1;
    return (uintptr_t)data % 2 == 0 && rb % 2 == 0;
}

static unsigned mq_grid(const vt_backend_ctx *ctx, int64_t items, int64_t per)
{
    int64_t need = ceil_div(items, per), cap = (int64_t)(ctx->n_sm > 0 ? ctx->n_sm : 132) * 16;
    return (unsigned)(need < cap ? need : cap);
}

extern "C" int vt_gpu_overlap(const void *y, int64_t n_y, const void *src, int64_t n_src)
{
    const uintptr_t a = (uintptr_t)y, b = (uintptr_t)src;
    return a < b + 4 * (uintptr_t)n_src && b < a + 4 * (uintptr_t)n_y;
}

/* The views of ctx->xq_dev for n values */
struct mq_xq {
    int8_t *q;
    float *d, *s;
};
static mq_xq mq_view(vt_backend_ctx *ctx, int64_t n)
{
    mq_xq v;
    v.q = (int8_t *)ctx->xq_dev;
    v.d = (float *)(v.q + VT_GPU_XQ_MAX);
    v.s = v.d + VT_GPU_XQ_MAX / 32;
    (void)n;
    return v;
}

/* x [n] rounded into ctx->xq_dev unless it holds x already (ctx->xq_src);
 * 0 when there is no buffer (it is allocated on first use, never while a
 * graph is recorded) or n does not fit. */
extern "C" void vt_gpu_xq_reserve(vt_backend_ctx *ctx)
{
    if (ctx->xq_dev || ctx->capturing || !ctx->int8_dot) return;
    void *p = NULL;
    if (vt_gpu_malloc(&p, qd_smem_bytes(VT_GPU_XQ_MAX, 1)) != vt_gpu_success) {
        (void)vt_gpu_get_last_error();
        return; /* the shared-memory kernels do the rounding instead */
    }
    ctx->xq_dev = p;
}

extern "C" int vt_gpu_xq_view(vt_backend_ctx *ctx, int64_t n, int8_t **q, float **d, float **s)
{
    if (!ctx->int8_dot || n > VT_GPU_XQ_MAX) return 0;
    vt_gpu_xq_reserve(ctx);
    if (!ctx->xq_dev) return 0;
    const mq_xq v = mq_view(ctx, n);
    *q = v.q, *d = v.d, *s = v.s;
    return 1;
}

/* k_quantize_x over x [n] (n a multiple of 32) into q, d, s */
static vt_status mq_quantize(vt_backend_ctx *ctx, const float *x, int64_t n, int8_t *q, float *d,
                             float *s, const char *op)
{
    k_quantize_x<<<(unsigned)ceil_div(n / 32, MQ_WARPS), MQ_THREADS, 0, VT_ST>>>(x, (int)n, q, d, s);
    return launched(ctx, op);
}

static int mq_round_x(vt_backend_ctx *ctx, const float *x, int64_t n, vt_status *st, mq_xq *v)
{
    *st = VT_OK;
    if (n > VT_GPU_XQ_MAX) return 0;
    vt_gpu_xq_reserve(ctx);
    if (!ctx->xq_dev) return 0;
    *v = mq_view(ctx, n);
    if (vt_gpu_xq_holds(ctx, x, n)) return 1;
    *st = mq_quantize(ctx, x, n, v->q, v->d, v->s, "mat_mul (activation rounding)");
    return 1;
}

extern "C" int vt_gpu_mmq_vec(vt_backend_ctx *ctx, const vt_weight *w, const float *x, float *y,
                              vt_status *st)
{
    const uint32_t t = w->type;
    if (!ctx->int8_dot || !mq_type_ok(t) || !mq_aligned(t, w->data, (size_t)w->row_bytes))
        return 0;
    const int64_t n_in = w->n_in;
    if (n_in % mq_unit(t) || n_in > INT_MAX || qd_smem_bytes(n_in, 1) > MQ_SMEM_MAX) return 0;
    const int l2 = qd_lanes_log2(n_in / mq_unit(t));
    /* one row per step when two would leave fewer than MQ_ONE_BLOCKS blocks per
     * SM (H200, Qwen / Gemma anchor decode 1151 / 850 tok/s against 1122 / 824
     * with two rows always) */
    const int64_t per2 = (int64_t)MQ_WARPS * (32 >> l2) * 2;
    const uint8_t *wd = (const uint8_t *)w->data;
    const size_t rb = (size_t)w->row_bytes;
    mq_xq v = {NULL, NULL, NULL};
    const int pre = mq_round_x(ctx, x, n_in, st, &v);
    if (*st != VT_OK) return 1;
    /* (without pre-rounded activations every block rounds x itself: two rows per step) */
    const int one = pre && ceil_div(w->n_out, per2) <
                               (int64_t)MQ_ONE_BLOCKS * (ctx->n_sm > 0 ? ctx->n_sm : 132);
    const unsigned grid = mq_grid(ctx, w->n_out, one ? per2 / 2 : per2);
    const size_t smem = pre ? 0 : qd_smem_bytes(n_in, 1);
#define MQ_LAUNCH(T_)                                                                              \
    if (pre && one)                                                                                \
        k_mmq_vec<T_, true, true><<<grid, MQ_THREADS, 0, VT_ST>>>(wd, rb, (int)n_in, w->n_out, x,  \
                                                                   v.q, v.d, v.s, y, l2);          \
    else if (pre)                                                                                  \
        k_mmq_vec<T_, true><<<grid, MQ_THREADS, 0, VT_ST>>>(wd, rb, (int)n_in, w->n_out, x, v.q,   \
                                                             v.d, v.s, y, l2);                     \
    else                                                                                           \
        k_mmq_vec<T_, false><<<grid, MQ_THREADS, smem, VT_ST>>>(wd, rb, (int)n_in, w->n_out, x,    \
                                                                NULL, NULL, NULL, y, l2)
#define MQ_CASE(T, n)                                                                              \
    case VT_TYPE_##T: MQ_LAUNCH(VT_TYPE_##T); break;
    switch (t) {
        MQ_TYPES(MQ_CASE)
    default: break; /* mq_type_ok */
    }
#undef MQ_CASE
#undef MQ_LAUNCH
    *st = launched(ctx, "mat_mul");
    if (*st == VT_OK && pre && !vt_gpu_overlap(y, w->n_out, x, n_in)) { /* x stays rounded */
        vt_gpu_xq_keep(ctx, x, n_in);
    }
    return 1;
}

/* ======================= moe_ffn decode ======================= */

/* act(g) · u as gpu_moe.cu's float path computes it */
static __device__ __forceinline__ float mq_act(int act, float g, float u)
{
    return __fmul_rn(unary_ref(act == VT_MOE_ACT_SILU ? VT_UNARY_SILU : VT_UNARY_GELU_TANH, g), u);
}

/* For pair p (token p / K, expert ids[p] in [eb, ee)), rows of 32-row chunks
 * c: a = act(gate_e · x_t)·(up_e · x_t), rounded at once to int8 blocks
 * (the chunk is one activation block of the down matmul): aq [P][F], ad / as
 * [P][F/32]. x: n_tok rows (ldx) rounded into shared memory first, or (PRE,
 * one token) already rounded in gq / gd / gs. GU_WARPS warps per chunk, each
 * lane holding 32 / GU_WARPS rows' loads at once (16 warps measured faster
 * than 8 on both anchor shapes, H200). */
#define GU_WARPS 16
template <int T, bool PRE>
static __global__ void __launch_bounds__(32 * GU_WARPS)
k_moe_q_gate_up(const float *__restrict__ x, int64_t ldx, int n_tok, const int8_t *__restrict__ gq,
                const float *__restrict__ gd, const float *__restrict__ gs,
                const int32_t *__restrict__ ids, int K, int P, int eb, int ee,
                const void *const *__restrict__ wg, const void *const *__restrict__ wu, size_t rb,
                int E, int F, int act, int lpr_log2, int8_t *__restrict__ aq,
                float *__restrict__ ad, float *__restrict__ as)
{
    extern __shared__ int4 mq_smem[];
    __shared__ float a_chunk[32];
    const int8_t *xq;
    const float *xd, *xs;
    if constexpr (PRE) { /* one token, rounded by k_quantize_x */
        xq = gq, xd = gd, xs = gs;
    } else {
        int8_t *q = (int8_t *)mq_smem;
        float *d = (float *)(q + (size_t)n_tok * E), *sc = d + (size_t)n_tok * (E / 32);
        for (int t = 0; t < n_tok; t++)
            qd_quantize(x + (size_t)t * ldx, E, q + (size_t)t * E, d + (size_t)t * (E / 32),
                        sc + (size_t)t * (E / 32));
        __syncthreads();
        xq = q, xd = d, xs = sc;
    }
    const int units = E / Qi<T>::UNIT, lpr = 1 << lpr_log2, rpw = 32 >> lpr_log2;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int sub = lane >> lpr_log2, li = lane & (lpr - 1);
    const int nc = F / 32;
    for (int64_t ci = blockIdx.x; ci < (int64_t)P * nc; ci += gridDim.x) {
        const int p = (int)(ci / nc), c = (int)(ci % nc);
        const int e = ids[p];
        if (e < eb || e >= ee) continue; /* the whole block skips */
        const int t = p / K;
        const int8_t *q = xq + (size_t)t * E;
        const float *d = xd + (size_t)t * (E / 32), *s = xs + (size_t)t * (E / 32);
        /* the chunk's 32 rows: pass k takes rows (k·GU_WARPS + warp)·rpw + sub */
        const int NP = 32 / GU_WARPS;
        float g[NP], v[NP];
#pragma unroll
        for (int k = 0; k < NP; k++) g[k] = v[k] = 0.0f;
        for (int kk = li; kk < units; kk += lpr) {
#pragma unroll
            for (int k = 0; k < NP; k++) {
                const int rr = (k * GU_WARPS + warp) * rpw + sub;
                if (rr < 32) {
                    const size_t off = (size_t)(32 * c + rr) * rb;
                    g[k] += Qi<T>::dot((const uint8_t *)wg[e] + off, kk, q, d, s);
                    v[k] += Qi<T>::dot((const uint8_t *)wu[e] + off, kk, q, d, s);
                }
            }
        }
        /* every lane of a group ends with the row's sums; with at least NP
         * lanes per group, lane k evaluates row k's activation, so that the
         * NP evaluations (double exp) run side by side */
        float mg = 0.0f, mv = 0.0f;
        int mr = -1;
#pragma unroll
        for (int k = 0; k < NP; k++) {
            if ((k * GU_WARPS + warp) * rpw >= 32) break; /* uniform per warp */
            const int rr = (k * GU_WARPS + warp) * rpw + sub;
            float gk = g[k], vk = v[k];
            for (int o = lpr >> 1; o > 0; o >>= 1) {
                gk += VT_GPU_SHFL_XOR(gk, o);
                vk += VT_GPU_SHFL_XOR(vk, o);
            }
            if (lpr < NP) {
                if (li == 0) a_chunk[rr] = mq_act(act, gk, vk);
            } else if (li == k) {
                mg = gk, mv = vk, mr = rr;
            }
        }
        if (mr >= 0) a_chunk[mr] = mq_act(act, mg, mv);
        __syncthreads();
        if (warp == 0)
            qd_quantize32(a_chunk[lane], aq + (size_t)p * F + 32 * c, ad + (size_t)p * nc + c,
                          as + (size_t)p * nc + c);
        __syncthreads();
    }
}

/* One token's gate/up, row by row: a_f[p][f] = act(gate_e row f · x̂)·(up_e
 * row f · x̂) for the pairs p in range (e = ids[p] in [eb, ee)), x̂ rounded in
 * gq / gd / gs; k_mmq_vec's layout (a lane group of 2^lpr_log2 lanes per row,
 * the same sums as k_moe_q_gate_up's, so the same bits), rows of every pair
 * spread over the whole grid. One k_quantize_x over a_f rounds it after. */
template <int T>
static __global__ void __launch_bounds__(MQ_THREADS)
k_moe_q_gu_rows(const int8_t *__restrict__ gq, const float *__restrict__ gd,
                const float *__restrict__ gs, const int32_t *__restrict__ ids, int P, int eb,
                int ee, const void *const *__restrict__ wg, const void *const *__restrict__ wu,
                size_t rb, int E, int F, int act, int lpr_log2, float *__restrict__ a_f)
{
    const int units = E / Qi<T>::UNIT, lpr = 1 << lpr_log2, rpw = 32 >> lpr_log2;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int sub = lane >> lpr_log2, li = lane & (lpr - 1);
    const int64_t n_rows = (int64_t)P * F, per = (int64_t)MQ_WARPS * rpw;
    for (int64_t r0 = (int64_t)blockIdx.x * per; r0 < n_rows; r0 += (int64_t)gridDim.x * per) {
        const int64_t rr = r0 + warp * rpw + sub;
        const int ok = rr < n_rows;
        const int p = ok ? (int)(rr / F) : 0, f = ok ? (int)(rr % F) : 0;
        const int e = ids[p];
        const int in = ok && e >= eb && e < ee;
        float g = 0.0f, v = 0.0f;
        if (in) {
            const size_t off = (size_t)f * rb;
            const uint8_t *rg = (const uint8_t *)wg[e] + off, *ru = (const uint8_t *)wu[e] + off;
            for (int u = li; u < units; u += lpr) {
                g += Qi<T>::dot(rg, u, gq, gd, gs);
                v += Qi<T>::dot(ru, u, gq, gd, gs);
            }
        }
        for (int o = lpr >> 1; o > 0; o >>= 1) {
            g += VT_GPU_SHFL_XOR(g, o);
            v += VT_GPU_SHFL_XOR(v, o);
        }
        if (li == 0 && ok) a_f[rr] = in ? mq_act(act, g, v) : 0.0f; /* 0: rounded, never read */
    }
}

/* out[t][r] += Σ_j w_tj · (down_e row r · â_tj) over token t's pairs j with
 * e = ids[t·K + j] in [eb, ee), added in increasing expert id (ties by j) as
 * k_moe_combine adds them. One warp per (t, r): its lanes are K' groups of
 * 32 / K' lanes (K' = K rounded up to a power of two, lg_log2 = log2(32 / K')),
 * group j summing pair j's dot product, so the K rows are read at once; lane 0
 * takes the K sums by shuffles in addition order and adds them. The pairs'
 * weights, row pointers and that order are found once per block (shared
 * memory). â from aq/ad/as. */
#define MQ_MAXK 8
#define MQ_MAXP (VT_GPU_MM_VEC_MAX * MQ_MAXK)
template <int T>
static __global__ void __launch_bounds__(MQ_THREADS)
k_moe_q_down(const int8_t *__restrict__ aq, const float *__restrict__ ad, const float *__restrict__ as,
             const int32_t *__restrict__ ids, const float *__restrict__ wts, int K, int n_tok,
             int eb, int ee, const void *const *__restrict__ wd, size_t rb, int E, int F,
             int lg_log2, float *__restrict__ out, int64_t ldo)
{
    __shared__ const uint8_t *s_row[MQ_MAXP];
    __shared__ float s_w[MQ_MAXP];
    __shared__ int s_ord[MQ_MAXP]; /* token t's pairs in [eb, ee) in addition order */
    __shared__ int s_cnt[VT_GPU_MM_VEC_MAX];
    const int P = n_tok * K;
    for (int i = threadIdx.x; i < P; i += blockDim.x) {
        const int t = i / K, j = i % K, e = ids[i];
        const int in = e >= eb && e < ee;
        s_w[i] = wts[i];
        s_row[i] = in ? (const uint8_t *)wd[e] : NULL;
        int rank = 0, cnt = 0; /* pairs before j in (expert, j) order, pairs in range */
        for (int jj = 0; jj < K; jj++) {
            const int e2 = ids[t * K + jj];
            const int in2 = e2 >= eb && e2 < ee;
            cnt += in2;
            rank += in2 && (e2 < e || (e2 == e && jj < j));
        }
        if (in) s_ord[t * K + rank] = j;
        if (j == 0) s_cnt[t] = cnt;
    }
    __syncthreads();
    const int units = F / Qi<T>::UNIT, lg = 1 << lg_log2;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int j = lane >> lg_log2, li = lane & (lg - 1);
    const int64_t items = (int64_t)n_tok * E;
    for (int64_t it = (int64_t)blockIdx.x * MQ_WARPS + warp; it < items;
         it += (int64_t)gridDim.x * MQ_WARPS) { /* uniform per warp */
        const int t = (int)(it / E);
        const int64_t r = it % E;
        const int p = t * K + j;
        float y = 0.0f;
        const uint8_t *base = j < K ? s_row[p] : NULL;
        if (base) {
            const uint8_t *row = base + (size_t)r * rb;
            const int8_t *q = aq + (size_t)p * F;
            const float *d = ad + (size_t)p * (F / 32), *s = as + (size_t)p * (F / 32);
#pragma unroll 4
            for (int u = li; u < units; u += lg) y += Qi<T>::dot(row, u, q, d, s);
        }
        for (int o = lg >> 1; o > 0; o >>= 1) y += VT_GPU_SHFL_XOR(y, o);
        /* the K sums in addition order: one shuffle each, lane 0 adds */
        float acc = lane == 0 ? out[(size_t)t * ldo + r] : 0.0f;
        for (int rank = 0; rank < s_cnt[t]; rank++) { /* uniform per warp */
            const int jj = s_ord[t * K + rank];
            const float v = VT_GPU_SHFL(y, jj << lg_log2);
            acc = __fadd_rn(acc, __fmul_rn(s_w[t * K + jj], v));
        }
        if (lane == 0) out[(size_t)t * ldo + r] = acc;
    }
}

extern "C" int vt_gpu_moe_q_usable(const vt_backend_ctx *ctx, const vt_moe_ffn_args *a)
{
    if (!ctx->int8_dot || a->n_tokens > VT_GPU_MM_VEC_MAX || a->k > MQ_MAXK) return 0;
    if (!mq_type_ok(a->type_gate) || a->type_up != a->type_gate || !mq_type_ok(a->type_down)) return 0;
    const int64_t E = a->n_embd, F = a->n_ff;
    if (E % mq_unit(a->type_gate) || F % mq_unit(a->type_down) || F % 32) return 0;
    if (qd_smem_bytes(E, a->n_tokens) > MQ_SMEM_MAX) return 0;
    return 1; /* expert data: the alignment of moe_ffn's contract, as the float kernels */
}

/* moe_ffn's decode on int8 activations: gate/up (act rounded into buf), then
 * down with the weighted, ordered additions into out; buf: moe_ffn's scratch
 * from act_buf on (P·F floats, then y's P·E floats: moe_carve), of which the
 * one-token path uses 4·P·F bytes (rounded up to 256) + 1.25·P·F. */
extern "C" vt_status vt_gpu_moe_q_run(vt_backend_ctx *ctx, const vt_moe_ffn_args *a, void *buf,
                                      int *rounded)
{
    *rounded = 0;
    const int E = (int)a->n_embd, F = (int)a->n_ff, K = (int)a->k, nt = (int)a->n_tokens;
    const int P = nt * K, eb = (int)a->expert_begin, ee = (int)a->expert_end;
    int8_t *aq = (int8_t *)buf;
    float *ad = (float *)(aq + (size_t)P * F), *as = ad + (size_t)P * (F / 32);
    const size_t rbg = (size_t)vt_type_row_bytes(a->type_gate, (uint64_t)E);
    const size_t rbd = (size_t)vt_type_row_bytes(a->type_down, (uint64_t)F);
    const int l2g = qd_lanes_log2(E / mq_unit(a->type_gate));
    int l2d = 5; /* lanes per pair: 32 / K rounded up to a power of two */
    while ((1 << (5 - l2d)) < K) l2d--;
    const size_t sg = qd_smem_bytes(E, nt);
    const unsigned gg = mq_grid(ctx, (int64_t)P * (F / 32), 1);
    const unsigned gd = mq_grid(ctx, (int64_t)nt * E, MQ_WARPS);
    mq_xq v = {NULL, NULL, NULL};
    vt_status st = VT_OK;
    const int pre = nt == 1 && mq_round_x(ctx, a->x, E, &st, &v);
    TRY(st);
    /* one token, and room for the float act in front (act_buf is P·F floats
     * and y, P·E floats, follows it: moe_carve): rows over the whole grid,
     * then one rounding launch; else one block per 32-row chunk, rounded in
     * the block */
    /* one token: the one-block-per-chunk kernel (rounding in the block) by
     * default, the row kernel and a rounding launch with VT_GPU_MOE_GU=rows
     * (H200, Qwen anchor shape: decode 1119 tok/s against 1095) */
    const char *gu_env = getenv("VT_GPU_MOE_GU");
    const int rows_ok = gu_env && !strcmp(gu_env, "rows");
    if (pre && rows_ok && 5 * (int64_t)F <= 16 * (int64_t)E) {
        float *a_f = (float *)buf;
        aq = (int8_t *)buf + (((size_t)P * F * sizeof(float) + 255) & ~(size_t)255);
        ad = (float *)(aq + (size_t)P * F), as = ad + (size_t)P * (F / 32);
        const unsigned gr = mq_grid(ctx, (int64_t)P * F, (int64_t)MQ_WARPS * (32 >> l2g));
#define MQ_GR(T_)                                                                                  \
    k_moe_q_gu_rows<T_><<<gr, MQ_THREADS, 0, VT_ST>>>(v.q, v.d, v.s, a->ids, P, eb, ee, a->w_gate, \
                                                      a->w_up, rbg, E, F, (int)a->act, l2g, a_f)
#define MQ_CASE(T, n)                                                                              \
    case VT_TYPE_##T: MQ_GR(VT_TYPE_##T); break;
        switch (a->type_gate) {
            MQ_TYPES(MQ_CASE)
        default: break; /* vt_gpu_moe_q_usable */
        }
#undef MQ_CASE
#undef MQ_GR
        TRY(launched(ctx, "moe_ffn (gate/up)"));
        TRY(mq_quantize(ctx, a_f, (int64_t)P * F, aq, ad, as, "moe_ffn (act rounding)"));
    } else {
#define MQ_GU(T_)                                                                                  \
    if (pre)                                                                                       \
        k_moe_q_gate_up<T_, true><<<gg, 32 * GU_WARPS, 0, VT_ST>>>(                                \
            a->x, a->ldx, nt, v.q, v.d, v.s, a->ids, K, P, eb, ee, a->w_gate, a->w_up, rbg, E, F,  \
            (int)a->act, l2g, aq, ad, as);                                                         \
    else                                                                                           \
        k_moe_q_gate_up<T_, false><<<gg, 32 * GU_WARPS, sg, VT_ST>>>(                              \
            a->x, a->ldx, nt, NULL, NULL, NULL, a->ids, K, P, eb, ee, a->w_gate, a->w_up, rbg, E,  \
            F, (int)a->act, l2g, aq, ad, as)
#define MQ_CASE(T, n)                                                                              \
    case VT_TYPE_##T: MQ_GU(VT_TYPE_##T); break;
        switch (a->type_gate) {
            MQ_TYPES(MQ_CASE)
        default: break; /* vt_gpu_moe_q_usable */
        }
#undef MQ_CASE
#undef MQ_GU
        TRY(launched(ctx, "moe_ffn (gate/up)"));
    }
#define MQ_D(T_)                                                                                   \
    k_moe_q_down<T_><<<gd, MQ_THREADS, 0, VT_ST>>>(aq, ad, as, a->ids, a->weights, K, nt, eb, ee,  \
                                                   a->w_down, rbd, E, F, l2d, a->out, a->ldo)
#define MQ_CASE(T, n)                                                                              \
    case VT_TYPE_##T: MQ_D(VT_TYPE_##T); break;
    switch (a->type_down) {
        MQ_TYPES(MQ_CASE)
    default: break; /* vt_gpu_moe_q_usable */
    }
#undef MQ_CASE
#undef MQ_D
    *rounded = pre;
    return launched(ctx, "moe_ffn (down)");
}
