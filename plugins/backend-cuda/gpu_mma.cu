/*
 * gpu_mma.cu - moe_ffn's prefill GEMMs for block-type weights on tensor
 * cores (backend-cuda on sm_80 and newer; backend-rocm compiles it to stubs
 * that are never used): the grouped gate/up and down products over the
 * (token, expert) pairs sorted by expert (gpu_internal.h, vt_gpu_tc_args).
 * The dense mat_mul's tensor-core path is cuBLAS in bfloat16 (gpu_ops.cu).
 *
 * One kernel, k_tc_gemm<T, MODE, BM>: a block of 4 warps computes a tile of
 * BM pairs of one expert × TC_BN output rows, TC_BK input columns at a time:
 *  - the weight tile is decoded exactly to float32 (dec8<T>, the decoders of
 *    gpu_device.cuh that get_rows and the float kernels use) and the
 *    activation tile read as float32 and (p.xq, the default) rounded to
 *    int8 blocks as the one-token kernels round it (x̂ = d·q, xq_round: a
 *    row's 32 columns of the tile are exactly one block, held by 8 adjacent
 *    lanes), both rounded to TF32 (cvt.rna: to
 *    nearest, ties away from zero; 10 fraction bits, float32's exponent
 *    range, so nothing overflows that float32 holds) into shared memory;
 *  - warps in 2 × 2, each (BM/2) × 32 outputs as m16n8k8 TF32 MMAs with
 *    float32 accumulation (PTX ISA, "Matrix multiply-accumulate operation
 *    using mma instruction", shape .m16n8k8, .tf32: fragment layouts);
 *  - epilogue: gate/up act(g)·u (moe_act, the float kernels' activation)
 *    into row s of the pairs' scratch; down: row s of y.
 *
 * Error against the float32 product of w and x̂: each input is rounded once to 11
 * significant bits (relative error <= 2^-11), so a product term is within
 * 2^-10 (plus 2^-22) of its exact value and a dot product within about
 * 2^-10·Σ|x_i·w_i| plus float32 summation rounding. Block-type weights are
 * lossy at 2^-8 (Q8_0) or coarser, and the one-token kernels already round
 * activations to int8 (gpu_matvec.cu); float weights (F32, F16, BF16) never
 * come here, so the fixtures' f32-exact files keep float32 products.
 * tests/test_moe_ops.c checks every block type against backend-cpu's
 * scalar reference within that bound.
 *
 * Shared memory rows are TC_BK + 4 words apart: the fragment loads of a
 * warp (rows g = lane/4, columns t = lane%4) hit 32 distinct banks.
 * Rows of A are read as float4 (vt_gpu_tc_usable requires 16-byte aligned
 * rows); weights keep walign<T>() (moe_ffn's checks).
 */
#include <limits.h>
#include <stdio.h>

#include "gpu_device.cuh"

#define TC_THREADS 128
#define TC_BN 64
#define TC_BK 32
#define TC_LD (TC_BK + 4)

enum { TC_GATE_UP = VT_GPU_TC_GATE_UP, TC_DOWN = VT_GPU_TC_DOWN };

/* The kernel's arguments, passed by value (vt_gpu_tc_args, device side). */
struct tc_params {
    const float *a;
    int64_t lda;
    const void *const *w0, *const *w1; /* per-expert tables */
    size_t rb;
    int n_in;
    int64_t n_out;
    const int32_t *sorted, *off, *tiles;
    int nx, k, act;
    int xq; /* activations rounded to int8 blocks first (xq_round) */
    float *y;
};

#if !defined(VT_GPU_HIP)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define TC_DEVICE_OK 1
static __device__ __forceinline__ uint32_t to_tf32(float f)
{
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(f));
    return r;
}

static __device__ __forceinline__ void mma_tf32(float c[4], const uint32_t a[4], uint32_t b0,
                                                uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Rows [o0, o0 + TC_BN) × columns [k0, k0 + TC_BK) of a weight as TF32 into
 * ws (rows >= n_out as 0): 256 8-value groups, two per thread. The groups
 * 4(k0/32) .. +3 of a row cover exactly its columns k0 .. k0+31 (QT's
 * layouts), and every run of 4 starts at a multiple of 4 (16-byte stores). */
template <int T>
static __device__ __forceinline__ void tc_wtile(const uint8_t *w, size_t rb, int64_t n_out,
                                                int64_t o0, int k0, uint32_t (*ws)[TC_LD])
{
#pragma unroll
    for (int q = 0; q < 2; q++) {
        const int idx = threadIdx.x + TC_THREADS * q, rr = idx >> 2, gq = idx & 3;
        const int64_t o = o0 + rr;
        float v[8];
        int64_t e0, e1;
        if (o < n_out) {
            dec8<T>(w + (size_t)o * rb, k0 / 8 + gq, v, e0, e1);
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++) v[j] = 0.0f;
            e0 = k0 + 8 * gq;
            e1 = e0 + 4;
        }
        uint4 u0 = make_uint4(to_tf32(v[0]), to_tf32(v[1]), to_tf32(v[2]), to_tf32(v[3]));
        uint4 u1 = make_uint4(to_tf32(v[4]), to_tf32(v[5]), to_tf32(v[6]), to_tf32(v[7]));
        *(uint4 *)&ws[rr][e0 - k0] = u0;
        *(uint4 *)&ws[rr][e1 - k0] = u1;
    }
}
#endif

/*
 * Grid: x tiles of the pairs sorted by expert, y output tiles. Tile x of
 * expert e (tile_expert) is sorted slots s0 .. s0+BM-1 of that expert; the A
 * row of slot s is the pair's token row a + (sorted[s] / k)·lda (gate/up) or
 * a + s·lda (down); the output row is s. One shared-memory stage (two
 * stages measured slower on the H200: 46 KB per block halves the blocks per
 * SM); the next columns' activations are loaded into registers while the
 * MMAs run.
 */
template <int T, int MODE, int BM>
static __global__ void __launch_bounds__(TC_THREADS) k_tc_gemm(tc_params p)
{
#ifdef TC_DEVICE_OK
    constexpr bool GU = MODE == TC_GATE_UP;
    constexpr int MT = BM / 32; /* m16 tiles per warp */
    constexpr int AQ = BM / 16; /* float4 loads of A per thread and stage */
    __shared__ __align__(16) uint32_t as[BM][TC_LD];
    __shared__ __align__(16) uint32_t ws0[TC_BN][TC_LD];
    __shared__ __align__(16) uint32_t ws1[GU ? TC_BN : 1][GU ? TC_LD : 4];
    __shared__ const float *arow[BM];
    __shared__ int orow[BM];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    const int wm = (warp >> 1) * (BM / 2), wn = (warp & 1) * 32;
    const int e = tile_expert(p.tiles, p.nx, blockIdx.x);
    if (e < 0) return;
    const int s0 = p.off[e] + (blockIdx.x - p.tiles[e]) * BM, s_end = p.off[e + 1];
    const int64_t o0 = (int64_t)blockIdx.y * TC_BN;
    const uint8_t *W0 = (const uint8_t *)p.w0[e], *W1 = NULL;
    if constexpr (GU) W1 = (const uint8_t *)p.w1[e];
    for (int r = tid; r < BM; r += TC_THREADS) {
        const int s = s0 + r;
        const float *ar = NULL;
        if (s < s_end) ar = GU ? p.a + (int64_t)(p.sorted[s] / p.k) * p.lda : p.a + (int64_t)s * p.lda;
        arow[r] = ar;
        orow[r] = s < s_end ? s : -1;
    }
    __syncthreads();
    float acc0[MT][4][4], acc1[GU ? MT : 1][4][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                acc0[i][j][c] = 0.0f;
                if constexpr (GU) acc1[i][j][c] = 0.0f;
            }
    float4 va[AQ];
    auto load_a = [&](int k0) {
#pragma unroll
        for (int q = 0; q < AQ; q++) { /* BM rows × 8 float4 */
            const int idx = tid + TC_THREADS * q, r = idx >> 3, c = (idx & 7) * 4;
            const float *ar = arow[r];
            va[q] = ar ? *(const float4 *)(ar + k0 + c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    };
    load_a(0);
    for (int k0 = 0; k0 < p.n_in; k0 += TC_BK) {
#pragma unroll
        for (int q = 0; q < AQ; q++) {
            const int idx = tid + TC_THREADS * q, r = idx >> 3, c = (idx & 7) * 4;
            if (p.xq) { /* row r's 32 columns (one int8 block) are 8 adjacent lanes' float4s */
                float4 &v = va[q];
                uint32_t mb = max(max(__float_as_uint(fabsf(v.x)), __float_as_uint(fabsf(v.y))),
                                  max(__float_as_uint(fabsf(v.z)), __float_as_uint(fabsf(v.w))));
#pragma unroll
                for (int o = 1; o < 8; o <<= 1) mb = max(mb, (uint32_t)__shfl_xor_sync(0xffffffffu, (int)mb, o));
                float d, id;
                xq_scale(mb, d, id);
                v = make_float4(xq_round(v.x, d, id), xq_round(v.y, d, id), xq_round(v.z, d, id),
                                xq_round(v.w, d, id));
            }
            *(uint4 *)&as[r][c] = make_uint4(to_tf32(va[q].x), to_tf32(va[q].y),
                                             to_tf32(va[q].z), to_tf32(va[q].w));
        }
        tc_wtile<T>(W0, p.rb, p.n_out, o0, k0, ws0);
        if constexpr (GU) tc_wtile<T>(W1, p.rb, p.n_out, o0, k0, ws1);
        __syncthreads();
        if (k0 + TC_BK < p.n_in) load_a(k0 + TC_BK); /* in flight during the MMAs */
#pragma unroll
        for (int kk = 0; kk < TC_BK; kk += 8) {
            uint32_t af[MT][4];
#pragma unroll
            for (int i = 0; i < MT; i++) {
                const int r = wm + 16 * i + g;
                af[i][0] = as[r][kk + t4];
                af[i][1] = as[r + 8][kk + t4];
                af[i][2] = as[r][kk + t4 + 4];
                af[i][3] = as[r + 8][kk + t4 + 4];
            }
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int n = wn + 8 * j + g;
                const uint32_t b0 = ws0[n][kk + t4], b1 = ws0[n][kk + t4 + 4];
#pragma unroll
                for (int i = 0; i < MT; i++) mma_tf32(acc0[i][j], af[i], b0, b1);
                if constexpr (GU) {
                    const uint32_t c0 = ws1[n][kk + t4], c1 = ws1[n][kk + t4 + 4];
#pragma unroll
                    for (int i = 0; i < MT; i++) mma_tf32(acc1[i][j], af[i], c0, c1);
                }
            }
        }
        __syncthreads();
    }
    /* c[0], c[1]: row g, columns 2t, 2t+1; c[2], c[3]: row g + 8 */
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int orr = orow[wm + 16 * i + g + 8 * h];
            if (orr < 0) continue;
            float *yr = p.y + (int64_t)orr * p.n_out;
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    const int64_t o = o0 + wn + 8 * j + 2 * t4 + c;
                    if (o >= p.n_out) continue;
                    float v = acc0[i][j][2 * h + c];
                    if constexpr (GU) v = moe_act(p.act, v, acc1[i][j][2 * h + c]);
                    yr[o] = v;
                }
        }
#else
    (void)p;
#endif
}

/* The block types with kernels here. */
#define TC_TYPES(X) VT_GPU_BLOCK_TYPES(X) VT_GPU_EXT_TYPES(X)

template <int T>
static void tc_launch(const vt_gpu_tc_args *a, vt_gpu_stream st)
{
    tc_params p;
    p.a = a->a;
    p.lda = a->lda;
    p.w0 = a->w0;
    p.w1 = a->w1;
    p.rb = a->rb;
    p.n_in = (int)a->n_in;
    p.n_out = a->n_out;
    p.sorted = a->sorted;
    p.off = a->off;
    p.tiles = a->tiles;
    p.nx = a->n_expert;
    p.k = a->k;
    p.act = a->act;
    p.xq = a->xq;
    p.y = a->y;
    dim3 g((unsigned)a->max_tiles, (unsigned)ceil_div(a->n_out, TC_BN));
    if (a->mode == VT_GPU_TC_GATE_UP)
        k_tc_gemm<T, TC_GATE_UP, VT_GPU_TC_BM_MOE><<<g, TC_THREADS, 0, st>>>(p);
    else
        k_tc_gemm<T, TC_DOWN, VT_GPU_TC_BM_MOE><<<g, TC_THREADS, 0, st>>>(p);
}

static int tc_type(uint32_t t)
{
#define TC_KNOWN(T_, n) if (t == (uint32_t)VT_TYPE_##T_) return 1;
    TC_TYPES(TC_KNOWN)
#undef TC_KNOWN
    return 0;
}
#endif /* !VT_GPU_HIP */

extern "C" int vt_gpu_tc_probe(void)
{
#if defined(VT_GPU_HIP)
    return 0;
#else
    /* the kernels hold MMAs only when the code the device runs was compiled
     * for sm_80 or newer (a build for older architectures JIT-compiles the
     * empty body of its PTX) */
    cudaFuncAttributes fa;
    if (cudaFuncGetAttributes(&fa, k_tc_gemm<VT_TYPE_Q8_0, TC_DOWN, VT_GPU_TC_BM_MOE>) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return fa.ptxVersion >= 80 && fa.binaryVersion >= 80;
#endif
}

extern "C" int vt_gpu_tc_usable(const vt_backend_ctx *ctx, uint32_t type, const float *a,
                                int64_t lda, int64_t n_in)
{
#if defined(VT_GPU_HIP)
    (void)ctx, (void)type, (void)a, (void)lda, (void)n_in;
    return 0;
#else
    return ctx->gemm_tc && tc_type(type) && (uintptr_t)a % 16 == 0 && lda % 4 == 0 &&
           n_in % TC_BK == 0 && n_in <= INT_MAX;
#endif
}

extern "C" vt_status vt_gpu_tc_run(vt_backend_ctx *ctx, const vt_gpu_tc_args *a, const char *op)
{
#if defined(VT_GPU_HIP)
    (void)a;
    return vt_gpu_fail(ctx->host, VT_ERR_INTERNAL, "%s: no tensor-core kernels in backend %s", op,
                       VT_GPU_PLUGIN_NAME);
#else
    if (a->max_tiles > INT_MAX || ceil_div(a->n_out, TC_BN) > 65535 || a->n_rows > INT_MAX)
        return vt_gpu_fail(ctx->host, VT_ERR_UNSUPPORTED, "%s: %lld rows x %lld outputs exceed "
                           "the tensor-core kernels' grid", op, (long long)a->n_rows,
                           (long long)a->n_out);
    int done = 0;
#define TC_RUN(T_, n)                                                                              \
    if (a->type == (uint32_t)VT_TYPE_##T_) {                                                       \
        tc_launch<VT_TYPE_##T_>(a, VT_ST);                                                         \
        done = 1;                                                                                  \
    }
    TC_TYPES(TC_RUN)
#undef TC_RUN
    if (!done)
        return vt_gpu_fail(ctx->host, VT_ERR_INTERNAL, "%s: no tensor-core kernel for %s", op,
                           vt_type_name(a->type));
    return launched(ctx, op);
#endif
}
