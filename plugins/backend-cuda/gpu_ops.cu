/*
 * gpu_ops.cu - the compute ops of backend-cuda and backend-rocm (vt/backend.h
 * is the contract: shapes, strides, host vs device arrays, formulas) as
 * kernels, written once for nvcc and hipcc (gpu_vendor.h maps the few names
 * that differ); attention is in gpu_attention.cu, the fused MoE ops in
 * gpu_moe.cu, rms_norm and l2_norm in gpu_norm.cu, what they share in
 * gpu_device.cuh.
 *
 * Arithmetic, op by op, against backend-cpu's scalar reference
 * (plugins/backend-cpu/cpu_kernels_scalar.c):
 *  - weights: F32, F16, BF16 and the block types Q4_0, Q4_1, Q5_0, Q5_1,
 *    Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4 and the
 *    low-bit types of gpu_lowbit.cuh are decoded exactly to float32, bit for bit as backend-cpu's reference dequantiser
 *    (plugins/backend-cpu/cpu_dequant.c) does: see "weight decoding" below.
 *  - mat_mul: float32 products, float32 accumulation. Up to
 *    VT_GPU_MM_VEC_MAX tokens (decode): one warp per output row (block
 *    types: per MM_VEC_ROWS rows) dequantises the row on the fly and keeps
 *    one accumulator per token. More tokens (prefill), block types on a
 *    device with tensor cores (ctx->gemm_tc, the default on sm_80+): the
 *    activations are rounded to int8 blocks of 32 as decode rounds them
 *    (x̂ = d·q, xq_round; llama.cpp's rounding, so prefill and decode
 *    answer alike), rows are dequantised exactly, both rounded to TF32 (to
 *    nearest, ties away) into bounded device buffers, and cublasGemmEx
 *    multiplies them with float32 accumulation and output: each input
 *    within 2^-11, so each term within 2^-10 + 2^-22 of w·x̂
 *    (tests/test_cuda_quant.c's bound). VT_GPU_TC_DENSE=bf16 rounds to
 *    bfloat16 instead (about 9% faster prefill on an H100, but 2^-8 per
 *    input: the trained-lowbit fixture then misses llama.cpp's top token at
 *    one position); VT_GPU_PREFILL_XQ=0 keeps the activations unrounded.
 *    F32/F16/BF16 weights, and every type with VT_GPU_GEMM=cublas:
 *    rows dequantised exactly to float32 and cuBLAS SGEMM with the default
 *    (not TF32) math mode (F32 weights directly). Under HIP (no hipBLAS on
 *    Debian 12), or with env VT_GPU_GEMM=tiled, a 64x64 tiled kernel that
 *    dequantises while loading its tiles does the float32 product. The
 *    reference accumulates in double, so the float32 paths differ by
 *    summation rounding only.
 *  - get_rows, copies, gather, scatter_add (in order of i for every column),
 *    binary, scale, mul_rows: the same float operations as the CPU, no fused
 *    multiply-add: bit-identical.
 *  - rms_norm / l2_norm: sum of squares in double, the scale rounded once to
 *    float, as the CPU does; ssm_conv and unary evaluate in double and round
 *    once; rope_neox computes its angles, cos/sin and the rotation in double.
 *    These agree with the CPU to the last bit but for the rounding of the
 *    device's libm.
 *  - gated_delta_net: float32 state, the CPU's float operations per element,
 *    double accumulators, sequential over tokens; for d_k 128 and 256 the
 *    state stays in registers over the chunk and the dot products add their
 *    double partial sums in another order than the CPU's one running sum
 *    (double rounding, ~1e-16 relative, before the rounding to float); other
 *    d_k keep the state in global memory in the CPU's order.
 *  - attention: one block of 4 (16 when there are few blocks) warps per (token, query head), each
 *    warp an online (max-subtracted) float32 softmax over its share of the
 *    visible cache positions, merged at the end.
 *  - softmax_topk: the routing outputs are host arrays, so the logits are
 *    copied to the host and the CPU's algorithm (double softmax, ties to the
 *    lower index) runs there.
 *
 * Execution: everything on the context's stream (a blocking stream, ordered
 * with the legacy stream that the synchronous copies use), so ops run in issue
 * order; an op returns once its kernels are enqueued (capability
 * async_queue is ABSENT: results are visible to the next op, and to the host
 * after copy_d2h or synchronize). Launch errors are checked after every
 * launch and reported naming the op.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_internal.h"
#include "gpu_device.cuh"
#include "vt/plugin_util.h"

#if !defined(VT_GPU_HIP) && defined(VT_GPU_HAVE_CUBLAS)
#include <cublas_v2.h>
#include <dlfcn.h>
#include <pthread.h>
#define GPU_HAVE_BLAS 1
/*
 * cuBLAS is loaded with dlopen when the first prefill matmul needs it, not
 * linked: libcublas and libcublasLt map ~700 MB and their relocations cost
 * ~150 MiB of resident memory in every process that merely lists or loads
 * plugins (vt plugins, vt run --device cpu). Without it the tiled kernel does
 * the prefill product, and the fallback is logged at WARN.
 */
typedef struct blas_fns {
    cublasStatus_t (*create)(cublasHandle_t *);
    cublasStatus_t (*destroy)(cublasHandle_t);
    cublasStatus_t (*set_math_mode)(cublasHandle_t, cublasMath_t);
    cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
    cublasStatus_t (*sgemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const float *, const float *, int, const float *, int, const float *,
                            float *, int);
    const char *(*status_string)(cublasStatus_t);
    /* optional: the tensor-core path of block-type weights (bf16 inputs) */
    cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                              const void *, const void *, cudaDataType, int, const void *,
                              cudaDataType, int, const void *, void *, cudaDataType, int,
                              cublasComputeType_t, cublasGemmAlgo_t);
} blas_fns;
static blas_fns blas;
static char blas_error[256];
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

#define VT_STR2(x) #x
#define VT_STR(x) VT_STR2(x)

static void blas_load_once(void)
{
    /* the loader's path first (LD_LIBRARY_PATH, ld.so.cache), then the toolkit
     * the plugin was built against */
    static const char *names[] = {"libcublas.so." VT_STR(CUBLAS_VER_MAJOR),
#ifdef VT_CUBLAS_DIR
                                  VT_CUBLAS_DIR "/libcublas.so." VT_STR(CUBLAS_VER_MAJOR),
#endif
                                  "libcublas.so"};
    void *h = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !h; i++) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(blas_error, sizeof blas_error, "cannot load cuBLAS: %s", dlerror());
        return;
    }
    blas_fns b;
    *(void **)&b.create = dlsym(h, "cublasCreate_v2");
    *(void **)&b.destroy = dlsym(h, "cublasDestroy_v2");
    *(void **)&b.set_math_mode = dlsym(h, "cublasSetMathMode");
    *(void **)&b.set_stream = dlsym(h, "cublasSetStream_v2");
    *(void **)&b.sgemm = dlsym(h, "cublasSgemm_v2");
    *(void **)&b.status_string = dlsym(h, "cublasGetStatusString");
    *(void **)&b.gemm_ex = dlsym(h, "cublasGemmEx");
    if (!b.create || !b.destroy || !b.set_math_mode || !b.set_stream || !b.sgemm || !b.status_string) {
        snprintf(blas_error, sizeof blas_error, "cuBLAS library lacks an expected symbol");
        dlclose(h);
        return;
    }
    blas = b; /* h stays open for the life of the process */
}

/* 1 when cuBLAS is usable; else 0 with blas_error set. */
static int blas_loaded(void)
{
    pthread_once(&blas_once, blas_load_once);
    return blas.sgemm != NULL;
}
#else
#define GPU_HAVE_BLAS 0
#endif

/* ======================= scratch ======================= */

/* *buf (device, or host when host_mem) holds at least `bytes`; grows by
 * doubling, after the device has finished with the old buffer. */
static vt_status reserve(vt_backend_ctx *ctx, const char *op, void **buf, size_t *cap, size_t bytes,
                         int host_mem)
{
    if (*cap >= bytes) return VT_OK;
    if (ctx->capturing)
        return vt_gpu_fail(ctx->host, VT_ERR_UNSUPPORTED, "%s: its scratch would grow to %zu bytes "
                           "while a graph is being recorded; run the op once before recording",
                           op, bytes);
    size_t want = *cap ? *cap : 4096;
    while (want < bytes) want *= 2;
    if (*buf) {
        if (host_mem) {
            free(*buf);
        } else {
            (void)vt_gpu_device_synchronize(); /* a queued kernel may still read it */
            (void)vt_gpu_free(*buf);
            (void)vt_gpu_get_last_error();
        }
        *buf = NULL;
        *cap = 0;
    }
    char h[32];
    vt_format_bytes(want, 0, h, sizeof h);
    if (host_mem) {
        *buf = malloc(want);
        if (!*buf)
            return vt_gpu_fail(ctx->host, VT_ERR_OUT_OF_MEMORY,
                               "%s: host scratch of %s (%zu bytes): out of memory", op, h, want);
    } else {
        vt_gpu_error e = vt_gpu_malloc(buf, want);
        if (e != vt_gpu_success) {
            *buf = NULL;
            return vt_gpu_fail(ctx->host, vt_gpu_status_of(e), "%s: " VT_GPU_RT
                               "Malloc of %s (%zu bytes) of op scratch on device %d failed: %s",
                               op, h, want, ctx->device, vt_gpu_get_error_string(e));
        }
    }
    *cap = want;
    return VT_OK;
}

/* Copy up to two host arrays into the device scratch: a (a_bytes) at the
 * start, b (b_bytes, may be 0) after it at a 256-byte boundary. The copy is
 * ordered after every kernel queued before it (legacy default stream), so a
 * kernel still reading the previous contents is not disturbed. */
#define RING_BYTES ((size_t)4 << 20)
/* after the ring in the same pinned allocation (host side only): the bounce
 * buffer of small device-to-host copies (vt_gpu_d2h_bounce) */
#define D2H_BOUNCE_BYTES ((size_t)64 << 10)
#define RING_HOST_BYTES (RING_BYTES + D2H_BOUNCE_BYTES)

/* Set up the argument ring once per context (see gpu_internal.h). */
static int ring_ready(vt_backend_ctx *ctx)
{
    if (ctx->ring_state) return ctx->ring_state > 0;
    ctx->ring_state = -1;
    const vt_host_api *h = ctx->host;
    int budgeted = h->struct_size >= offsetof(vt_host_api, pinned_release) + sizeof(void *) &&
                   h->pinned_reserve && h->pinned_release;
    int have_note = h->struct_size >= offsetof(vt_host_api, note_fallback) + sizeof(void *) &&
                    h->note_fallback;
    char why[256];
    if (budgeted && !h->pinned_reserve(RING_HOST_BYTES)) { /* within the pinned budget only */
        snprintf(why, sizeof why, "backend %s: the 4 MiB pinned ring for op arguments (and 64 KiB for small read-backs) "
                 "exceeds the pinned budget (pinned_budget); every op's host arguments are copied "
                 "synchronously",
                 VT_GPU_PLUGIN_NAME);
        if (have_note) h->note_fallback(why);
        return 0;
    }
    void *hp = NULL, *dp = NULL;
    if (vt_gpu_host_alloc(&hp, RING_HOST_BYTES) != vt_gpu_success ||
        vt_gpu_malloc(&dp, RING_BYTES) != vt_gpu_success) {
        if (hp) (void)vt_gpu_host_free(hp);
        (void)vt_gpu_get_last_error();
        if (budgeted) h->pinned_release(RING_HOST_BYTES);
        snprintf(why, sizeof why, "backend %s: allocating the 4 MiB pinned ring for op arguments "
                 "(and 64 KiB for small read-backs) failed; every op's host arguments are copied synchronously", VT_GPU_PLUGIN_NAME);
        if (have_note) h->note_fallback(why);
        else h->log(VT_LOG_WARN, "%s", why);
        return 0;
    }
    ctx->ring_host = (uint8_t *)hp;
    ctx->ring_dev = (uint8_t *)dp;
    ctx->ring_off = 0;
    ctx->ring_state = 1;
    return 1;
}

/* The pinned bounce buffer for a device-to-host copy of `bytes` (the ring's
 * allocation, set up on first use), or NULL: too large, or no ring (the
 * copy goes to pageable memory directly). VT_GPU_PINNED_D2H=0: always NULL
 * (for comparisons). */
extern "C" uint8_t *vt_gpu_d2h_bounce(vt_backend_ctx *ctx, size_t bytes)
{
    static int on = -1;
    if (on < 0) on = !(getenv("VT_GPU_PINNED_D2H") && !strcmp(getenv("VT_GPU_PINNED_D2H"), "0"));
    if (!on || bytes > D2H_BOUNCE_BYTES || ctx->capturing || !ring_ready(ctx)) return NULL;
    return ctx->ring_host + RING_BYTES;
}

static vt_status upload(vt_backend_ctx *ctx, const char *op, const void *a, size_t a_bytes,
                        const void *b, size_t b_bytes, void **da, void **db)
{
    if (ctx->capturing) /* a replay would copy the values of the recording */
        return vt_gpu_fail(ctx->host, VT_ERR_UNSUPPORTED, "%s: an op with host array arguments "
                           "cannot be recorded into a graph (graph_begin .. graph_end); the "
                           "device-position ops (rope_neox_dpos, attention_dpos, copy_rows_dpos) "
                           "are the ones to record", op);
    size_t off_b = (a_bytes + 255) & ~(size_t)255;
    size_t need = (off_b + b_bytes + 255) & ~(size_t)255;
    if (need <= RING_BYTES / 4 && ring_ready(ctx)) {
        if (ctx->ring_off + need > RING_BYTES) {
            /* wrap: every copy and kernel that used the ring has finished */
            vt_gpu_error e = vt_gpu_device_synchronize();
            if (e != vt_gpu_success)
                return vt_gpu_fail(ctx->host, vt_gpu_status_of(e), "%s: synchronize before reusing "
                                   "the argument ring on device %d failed: %s", op, ctx->device,
                                   vt_gpu_get_error_string(e));
            ctx->ring_off = 0;
        }
        uint8_t *hp = ctx->ring_host + ctx->ring_off, *dp = ctx->ring_dev + ctx->ring_off;
        memcpy(hp, a, a_bytes);
        if (b_bytes) memcpy(hp + off_b, b, b_bytes);
        vt_gpu_error e = vt_gpu_memcpy_async(dp, hp, off_b + b_bytes, vt_gpu_memcpy_h2d, VT_ST);
        if (e != vt_gpu_success)
            return vt_gpu_fail(ctx->host, vt_gpu_status_of(e), "%s: upload of %zu bytes of host "
                               "arguments to device %d failed: %s", op, a_bytes + b_bytes,
                               ctx->device, vt_gpu_get_error_string(e));
        ctx->ring_off += need;
        *da = dp;
        if (db) *db = b_bytes ? dp + off_b : NULL;
        return VT_OK;
    }
    TRY(reserve(ctx, op, &ctx->scratch, &ctx->scratch_bytes, off_b + b_bytes, 0));
    vt_gpu_error e = vt_gpu_memcpy(ctx->scratch, a, a_bytes, vt_gpu_memcpy_h2d);
    if (e == vt_gpu_success && b_bytes)
        e = vt_gpu_memcpy((char *)ctx->scratch + off_b, b, b_bytes, vt_gpu_memcpy_h2d);
    if (e != vt_gpu_success)
        return vt_gpu_fail(ctx->host, vt_gpu_status_of(e), "%s: upload of %zu bytes of host "
                           "arguments to device %d failed: %s", op, a_bytes + b_bytes, ctx->device,
                           vt_gpu_get_error_string(e));
    *da = ctx->scratch;
    if (db) *db = b_bytes ? (char *)ctx->scratch + off_b : NULL;
    return VT_OK;
}

extern "C" void vt_gpu_ops_init(vt_backend_ctx *ctx)
{
    /* VT_GPU_GEMM: unset or "tc" (tensor cores for block-type weights where
     * the device has them, cuBLAS SGEMM for float weights), "cublas" (float32
     * products everywhere: dequantised chunks through SGEMM, moe_ffn's float
     * grouped GEMM), "tiled" (the tiled kernel, HIP's path) */
    const char *g = getenv("VT_GPU_GEMM");
    int known = !g || !strcmp(g, "tc") || !strcmp(g, "cublas") || !strcmp(g, "tiled");
    if (!known && ctx->host && ctx->host->log)
        ctx->host->log(VT_LOG_WARN, "backend %s: VT_GPU_GEMM=%s is none of tc, cublas, tiled; "
                       "prefill products use the default (tc)", VT_GPU_PLUGIN_NAME, g);
    if (!known) g = NULL;
    ctx->gemm_blas = GPU_HAVE_BLAS && !(g && !strcmp(g, "tiled"));
    ctx->gemm_tc = !(g && strcmp(g, "tc")) && vt_gpu_tc_probe();
    /* VT_GPU_PREFILL_XQ=0: prefill products on unrounded activations;
     * VT_GPU_TC_DENSE=bf16: the dense tensor-core matmul in bfloat16 (faster,
     * coarser: the trained-lowbit fixture then misses llama.cpp's answer) */
    const char *xq = getenv("VT_GPU_PREFILL_XQ"), *dn = getenv("VT_GPU_TC_DENSE");
    ctx->prefill_xq = !(xq && !strcmp(xq, "0"));
    ctx->dense_tf32 = !(dn && !strcmp(dn, "bf16"));
    const char *q = getenv("VT_GPU_INT8_DOT");
    ctx->int8_dot = 1;
    if (q && !strcmp(q, "0")) {
        ctx->int8_dot = 0;
    } else if (q && strcmp(q, "1")) {
        if (ctx->host && ctx->host->log)
            ctx->host->log(VT_LOG_WARN, "backend %s: VT_GPU_INT8_DOT=%s is neither 0 nor 1; "
                           "one-token matvecs keep int8 activations (1)", VT_GPU_PLUGIN_NAME, q);
    }
    /* the kernel choices read at each call (gpu_moe.cu, gpu_matvec.cu): an
     * unknown value is said here, once per context, and means the default */
    const char *r = getenv("VT_GPU_ROUTE"), *gu = getenv("VT_GPU_MOE_GU");
    if (r && strcmp(r, "warp") && strcmp(r, "block") && ctx->host && ctx->host->log)
        ctx->host->log(VT_LOG_WARN, "backend %s: VT_GPU_ROUTE=%s is neither warp nor block; "
                       "routing takes the default (warp)", VT_GPU_PLUGIN_NAME, r);
    if (gu && strcmp(gu, "chunk") && strcmp(gu, "rows") && ctx->host && ctx->host->log)
        ctx->host->log(VT_LOG_WARN, "backend %s: VT_GPU_MOE_GU=%s is neither chunk nor rows; "
                       "one-token expert gate/up takes the default (chunk)", VT_GPU_PLUGIN_NAME, gu);
}

extern "C" void vt_gpu_ops_release(vt_backend_ctx *ctx)
{
#if GPU_HAVE_BLAS
    if (ctx->blas) blas.destroy((cublasHandle_t)ctx->blas);
#endif
    ctx->blas = NULL;
    if (ctx->scratch) (void)vt_gpu_free(ctx->scratch);
    if (ctx->wbuf) (void)vt_gpu_free(ctx->wbuf);
    if (ctx->abuf) (void)vt_gpu_free(ctx->abuf);
    ctx->abuf = NULL;
    ctx->abuf_bytes = 0;
    if (ctx->xq_dev) (void)vt_gpu_free(ctx->xq_dev);
    ctx->xq_dev = NULL;
    if (ctx->attn_part) (void)vt_gpu_free(ctx->attn_part);
    ctx->attn_part = NULL;
    vt_gpu_xq_forget(ctx);
    if (ctx->ring_state > 0) {
        (void)vt_gpu_device_synchronize();
        (void)vt_gpu_free(ctx->ring_dev);
        (void)vt_gpu_host_free(ctx->ring_host);
        const vt_host_api *h = ctx->host;
        if (h->struct_size >= offsetof(vt_host_api, pinned_release) + sizeof(void *) &&
            h->pinned_release)
            h->pinned_release(RING_HOST_BYTES);
    }
    ctx->ring_host = ctx->ring_dev = NULL;
    ctx->ring_state = 0;
    (void)vt_gpu_get_last_error();
    free(ctx->hbuf);
    ctx->scratch = ctx->wbuf = ctx->hbuf = NULL;
    ctx->scratch_bytes = ctx->wbuf_bytes = ctx->hbuf_bytes = 0;
}


/* ======================= mat_mul, get_rows ======================= */

#define MM_VEC_WARPS 8 /* rows per block of the decode kernel */

/* y[t*ldy + r] = dot(row r, x[t*ldx ..]) for t < n_tok (<= VT_GPU_MM_VEC_MAX),
 * F32, F16, BF16 weights: one warp per row; lane l takes elements l, l+32, ... */
template <int T>
static __global__ void k_mm_vec(const uint8_t *w, size_t rb, int64_t n_in, int64_t n_out,
                                const float *x, int64_t ldx, float *y, int64_t ldy, int n_tok)
{
    int lane = threadIdx.x & 31;
    int64_t r = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= n_out) return; /* whole warps leave together */
    const uint8_t *row = w + (size_t)r * rb;
    float acc[VT_GPU_MM_VEC_MAX];
#pragma unroll
    for (int t = 0; t < VT_GPU_MM_VEC_MAX; t++) acc[t] = 0.0f;
    /* lane l takes 4 adjacent elements 4l.., 4l + 128.., ... (a warp reads
     * 128 contiguous elements per step), then the tail one at a time */
    const int64_t n4 = n_in / 128 * 128;
#pragma unroll 4
    for (int64_t i0 = 4 * lane; i0 < n4; i0 += 128) {
        float wv[4];
#pragma unroll
        for (int j = 0; j < 4; j++) wv[j] = wload<T>(row, i0 + j);
#pragma unroll
        for (int t = 0; t < VT_GPU_MM_VEC_MAX; t++)
            if (t < n_tok) {
                const float *xt = x + t * ldx + i0;
                acc[t] += wv[0] * xt[0] + wv[1] * xt[1] + wv[2] * xt[2] + wv[3] * xt[3];
            }
    }
    for (int64_t i = n4 + lane; i < n_in; i += 32) {
        float wv = wload<T>(row, i);
#pragma unroll
        for (int t = 0; t < VT_GPU_MM_VEC_MAX; t++)
            if (t < n_tok) acc[t] += wv * x[t * ldx + i];
    }
#pragma unroll
    for (int t = 0; t < VT_GPU_MM_VEC_MAX; t++) {
        if (t < n_tok) {
            float s = warp_sum(acc[t]);
            if (lane == 0) y[t * ldy + r] = s;
        }
    }
}

/* One token, F32/F16/BF16, few rows (the router, a gate of one row): one
 * block of MM_ROW_THREADS per row, thread i summing elements 4i.. (+ 4·blockDim
 * per step, loads of 4 steps in flight), then the block's partial sums in a
 * fixed order: a row's reads are spread over 4 warps instead of one. */
#define MM_ROW_THREADS 128
template <int T>
static __global__ void __launch_bounds__(MM_ROW_THREADS)
k_mm_row(const uint8_t *__restrict__ w, size_t rb, int64_t n_in, const float *__restrict__ x,
         float *__restrict__ y)
{
    __shared__ float part[MM_ROW_THREADS / 32];
    const uint8_t *row = w + (size_t)blockIdx.x * rb;
    const int64_t n4 = n_in / 4 * 4, step = 4 * MM_ROW_THREADS;
    float acc = 0.0f;
#pragma unroll 4
    for (int64_t i = 4 * threadIdx.x; i < n4; i += step)
        acc += wload<T>(row, i) * x[i] + wload<T>(row, i + 1) * x[i + 1] +
               wload<T>(row, i + 2) * x[i + 2] + wload<T>(row, i + 3) * x[i + 3];
    for (int64_t i = n4 + threadIdx.x; i < n_in; i += MM_ROW_THREADS) acc += wload<T>(row, i) * x[i];
    acc = warp_sum(acc);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int k = 0; k < MM_ROW_THREADS / 32; k++) s += part[k];
        y[blockIdx.x] = s;
    }
}

/* The same for block types, MM_VEC_ROWS rows per warp: lane l decodes the
 * 8-value groups l, l+32, ... (QT) of each of the warp's rows, so the 32
 * lanes read adjacent groups' bytes together, each group's scales are
 * decoded once for its 8 values, and each activation load serves every row
 * of the warp. A group's activations are two runs of 4 floats, read as two
 * float4 when X4 (x 16-byte aligned and ldx a multiple of 4: every run then
 * is, since block sizes and run starts are multiples of 4), else one float
 * at a time. NT (1, 2, 4 or 8) bounds n_tok at compile time, so that one
 * token does not cost eight tokens' predicated-off loads and products. The
 * loop is unrolled MM_VEC_UNROLL times so that several groups' loads are in
 * flight together. */
#ifndef MM_VEC_ROWS /* -D overrides, for tuning */
#define MM_VEC_ROWS 2
#endif
#ifndef MM_VEC_UNROLL
#define MM_VEC_UNROLL 4
#endif
template <int T, bool X4, int NT>
static __global__ void __launch_bounds__(32 * MM_VEC_WARPS, NT <= 2 ? 4 : 2)
k_mm_vec_q(const uint8_t *__restrict__ w, size_t rb, int64_t n_in, int64_t n_out,
           const float *__restrict__ x, int64_t ldx, float *__restrict__ y, int64_t ldy, int n_tok)
{
    const int R = MM_VEC_ROWS;
    int lane = threadIdx.x & 31;
    int64_t r0 = ((int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * R;
    if (r0 >= n_out) return; /* whole warps leave together */
    const int nr = n_out - r0 < R ? (int)(n_out - r0) : R;
    const uint8_t *rows[R]; /* a row past n_out re-reads the first: no branch, never stored */
#pragma unroll
    for (int k = 0; k < R; k++) rows[k] = w + (size_t)(r0 + (k < nr ? k : 0)) * rb;
    float acc[R][NT];
#pragma unroll
    for (int k = 0; k < R; k++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[k][t] = 0.0f;
    const int GB = QT<T>::QK / 8; /* groups per block: 4 or 32, a power of 2 */
    const int64_t n_g = n_in / 8;
    for (int64_t G0 = lane; G0 < n_g; G0 += 32 * MM_VEC_UNROLL) {
#pragma unroll
        for (int u = 0; u < MM_VEC_UNROLL; u++) {
            int64_t G = G0 + 32 * u;
            if (G >= n_g) break;
            int64_t blk = G / GB;
            float v[R][8];
            int e0 = 0, e1 = 0;
#pragma unroll
            for (int k = 0; k < R; k++)
                QT<T>::group(rows[k] + blk * QT<T>::BYTES, (int)(G % GB), v[k], e0, e1);
            const float *p = x + blk * QT<T>::QK + e0, *q = x + blk * QT<T>::QK + e1;
#pragma unroll
            for (int t = 0; t < NT; t++) {
                if (t < n_tok) {
                    float xa[8];
                    if constexpr (X4) {
                        float4 pa = *(const float4 *)(p + t * ldx), qa = *(const float4 *)(q + t * ldx);
                        xa[0] = pa.x, xa[1] = pa.y, xa[2] = pa.z, xa[3] = pa.w;
                        xa[4] = qa.x, xa[5] = qa.y, xa[6] = qa.z, xa[7] = qa.w;
                    } else {
#pragma unroll
                        for (int k = 0; k < 4; k++) {
                            xa[k] = p[t * ldx + k];
                            xa[4 + k] = q[t * ldx + k];
                        }
                    }
#pragma unroll
                    for (int k = 0; k < R; k++) {
                        float a = acc[k][t];
#pragma unroll
                        for (int j = 0; j < 8; j++) a += v[k][j] * xa[j];
                        acc[k][t] = a;
                    }
                }
            }
        }
    }
#pragma unroll
    for (int k = 0; k < R; k++)
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t < n_tok) {
                float s = warp_sum(acc[k][t]);
                if (lane == 0 && k < nr) y[t * ldy + r0 + k] = s;
            }
        }
}

/* Row j (< n) of out ([n][n_in]) = row ids ? ids[j] : j of the weight,
 * decoded exactly (grid-stride): F32, F16, BF16 one element per thread, block
 * types one 8-value group per thread. ids: device. Used by get_rows and by
 * the prefill path, which dequantises a chunk of rows to float32 for SGEMM. */
static __device__ __forceinline__ void put_val(float *o, float v) { *o = v; }
/* bfloat16 bits of v, rounded to nearest even (NaN stays a quiet NaN) */
static __device__ __forceinline__ __attribute__((unused)) void put_val(uint16_t *o, float v)
{
    uint32_t u = __float_as_uint(v);
    *o = (u & 0x7FFFFFFFu) > 0x7F800000u ? (uint16_t)((u >> 16) | 0x40u)
                                          : (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* float32 storage of v rounded to TF32 (10 fraction bits; to nearest, ties
 * away from zero, as cvt.rna.tf32.f32; a NaN or infinity kept): the dense
 * TF32 path rounds its inputs itself, so what cuBLAS's tensor cores take is
 * specified whatever their own conversion does */
struct tf32_val {
    float v;
};
static __device__ __forceinline__ __attribute__((unused)) void put_val(tf32_val *o, float v)
{
    uint32_t u = __float_as_uint(v);
    if ((u & 0x7F800000u) != 0x7F800000u) u = (u + 0x1000u) & 0xFFFFE000u;
    o->v = __uint_as_float(u);
}

template <int T, typename OutT = float>
static __global__ void k_dequant_rows(const uint8_t *w, size_t rb, int64_t n_in,
                                      const int32_t *ids, int64_t n, OutT *out)
{
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    if constexpr (QT<T>::quant) {
        const int GB = QT<T>::QK / 8;
        const int64_t n_g = n_in / 8, tot = n_g * n;
        for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < tot; e += stride) {
            int64_t j = e / n_g, G = e - j * n_g, blk = G / GB;
            const uint8_t *row = w + (size_t)(ids ? (int64_t)ids[j] : j) * rb;
            float v[8];
            int e0, e1;
            QT<T>::group(row + blk * QT<T>::BYTES, (int)(G % GB), v, e0, e1);
            OutT *o = out + j * n_in + blk * QT<T>::QK;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                put_val(o + e0 + k, v[k]);
                put_val(o + e1 + k, v[4 + k]);
            }
        }
    } else {
        const int64_t tot = n_in * n;
        for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < tot; e += stride) {
            int64_t j = e / n_in, i = e - j * n_in;
            put_val(out + e, wload<T>(w + (size_t)(ids ? (int64_t)ids[j] : j) * rb, i));
        }
    }
}

#if GPU_HAVE_BLAS
/* xb[t][i] (packed, n_in per row) = x[t·ldx + i] as OUT (bfloat16, or float
 * for TF32), grid-stride; with xq, rounded to int8 blocks of 32 first
 * (xq_round): n_in is then a multiple of 32 and blocks of 256 threads, so the
 * 32 elements of a warp are one block of one row and every lane takes each
 * step of the loop. */
template <typename OUT>
static __global__ void k_rows_act(const float *x, int64_t ldx, int64_t n_in, int64_t n, int xq,
                                  OUT *xb)
{
    const int64_t tot = n_in * n, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < tot; e += stride) {
        int64_t t = e / n_in, i = e - t * n_in;
        float v = x[t * ldx + i];
        if (xq) {
            uint32_t mb = __float_as_uint(fabsf(v));
            for (int o = 16; o > 0; o >>= 1)
                mb = max(mb, (uint32_t)VT_GPU_SHFL_XOR((int)mb, o));
            float d, id;
            xq_scale(mb, d, id);
            v = xq_round(v, d, id);
        }
        put_val(xb + e, v);
    }
}
#endif

/* Threads for k_dequant_rows over n rows of n_in: one per element or group. */
template <int T> static int64_t dequant_items(int64_t n_in, int64_t n)
{
    return (QT<T>::quant ? n_in / 8 : n_in) * n;
}

/* Tiled GEMM (HIP's prefill path; VT_GPU_GEMM=tiled on CUDA):
 * y[t*ldy + o] = Σ_i x[t*ldx + i] · W[o][i], tiles of 64 rows × 64 tokens,
 * 16 columns of n_in at a time; 256 threads, each 4 rows × 4 tokens;
 * weights dequantised while the tile is loaded; float32 accumulation in
 * order of i. */
#define GT 64
#define GK 16
template <int T>
static __global__ void k_mm_tiled(const uint8_t *w, size_t rb, int64_t n_in, int64_t n_out,
                                  const float *x, int64_t ldx, float *y, int64_t ldy,
                                  int64_t n_tok)
{
    __shared__ float ws[GK][GT + 1];
    __shared__ float xs[GK][GT + 1];
    int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    int64_t o0 = (int64_t)blockIdx.x * GT, t0 = (int64_t)blockIdx.y * GT;
    float acc[4][4];
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int b = 0; b < 4; b++) acc[a][b] = 0.0f;
    for (int64_t k0 = 0; k0 < n_in; k0 += GK) {
#pragma unroll
        for (int l = 0; l < 4; l++) {
            int idx = tid + 256 * l, kk = idx & (GK - 1), rr = idx >> 4;
            int64_t o = o0 + rr, t = t0 + rr, i = k0 + kk;
            ws[kk][rr] = (o < n_out && i < n_in) ? wload<T>(w + (size_t)o * rb, i) : 0.0f;
            xs[kk][rr] = (t < n_tok && i < n_in) ? x[t * ldx + i] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < GK; kk++) {
            float av[4], bv[4];
#pragma unroll
            for (int a = 0; a < 4; a++) av[a] = ws[kk][tx + 16 * a];
#pragma unroll
            for (int b = 0; b < 4; b++) bv[b] = xs[kk][ty + 16 * b];
#pragma unroll
            for (int a = 0; a < 4; a++)
#pragma unroll
                for (int b = 0; b < 4; b++) acc[a][b] += av[a] * bv[b];
        }
        __syncthreads();
    }
#pragma unroll
    for (int b = 0; b < 4; b++) {
        int64_t t = t0 + ty + 16 * b;
        if (t >= n_tok) continue;
#pragma unroll
        for (int a = 0; a < 4; a++) {
            int64_t o = o0 + tx + 16 * a;
            if (o < n_out) y[t * ldy + o] = acc[a][b];
        }
    }
}

/* The weight's type, shape, row bytes and data, and the data's alignment:
 * align bytes (walign<T>()), which every row then keeps (row bytes are whole
 * blocks). A misaligned weight is refused, naming it, rather than faulting. */
static vt_status check_weight(vt_backend_ctx *ctx, const char *op, uint32_t type, int align,
                              const vt_weight *w)
{
    CHECK(w, "%s: weight is NULL", op);
    const char *nm = w->name ? w->name : "(unnamed)";
    CHECK(w->type == type, "%s: weight %s has type %s but was passed to the %s kernel", op, nm,
          vt_type_name(w->type), vt_type_name(type));
    CHECK(w->n_in > 0 && w->n_out >= 0, "%s: weight %s has shape [%lld, %lld]", op, nm,
          (long long)w->n_out, (long long)w->n_in);
    CHECK(w->n_in % vt_type_block_size(type) == 0,
          "%s: weight %s: n_in %lld is not a multiple of %s's block of %u values", op, nm,
          (long long)w->n_in, vt_type_name(type), vt_type_block_size(type));
    CHECK(w->row_bytes == vt_type_row_bytes(type, (uint64_t)w->n_in),
          "%s: weight %s: row_bytes %llu does not match %lld elements of %s (%llu)", op, nm,
          (unsigned long long)w->row_bytes, (long long)w->n_in, vt_type_name(type),
          (unsigned long long)vt_type_row_bytes(type, (uint64_t)w->n_in));
    CHECK(w->data || w->n_out == 0, "%s: weight %s has no data", op, nm);
    CHECK((uintptr_t)w->data % (uintptr_t)align == 0,
          "%s: weight %s: data at %p is not %d-byte aligned, which the %s kernels need", op, nm,
          w->data, align, vt_type_name(type));
    return VT_OK;
}

#if GPU_HAVE_BLAS
static const char *blas_str(cublasStatus_t s) { return blas.status_string(s); }

static vt_status blas_handle(vt_backend_ctx *ctx, const char *nm)
{
    if (ctx->blas) return VT_OK;
    cublasHandle_t h = NULL;
    cublasStatus_t s = blas.create(&h);
    if (s == CUBLAS_STATUS_SUCCESS) s = blas.set_math_mode(h, CUBLAS_DEFAULT_MATH); /* no TF32 */
    if (s == CUBLAS_STATUS_SUCCESS) s = blas.set_stream(h, VT_ST); /* the context's stream */
    if (s != CUBLAS_STATUS_SUCCESS) {
        if (h) blas.destroy(h);
        return vt_gpu_fail(ctx->host, s == CUBLAS_STATUS_ALLOC_FAILED ? VT_ERR_OUT_OF_MEMORY : VT_ERR_IO,
                           "mat_mul %s: cuBLAS handle on device %d (%s): %s", nm, ctx->device,
                           ctx->name, blas_str(s));
    }
    ctx->blas = (void *)h;
    return VT_OK;
}
#endif

template <int T>
static vt_status mat_mul_run(vt_backend_ctx *ctx, const vt_weight *w, const float *x, int64_t ldx,
                             float *y, int64_t ldy, int64_t n_tokens)
{
    TRY(check_weight(ctx, "mat_mul", (uint32_t)T, walign<T>(), w));
    const char *nm = w->name ? w->name : "(unnamed)";
    CHECK(n_tokens >= 0, "mat_mul %s: n_tokens %lld < 0", nm, (long long)n_tokens);
    if (n_tokens == 0 || w->n_out == 0) return VT_OK;
    CHECK(x && y, "mat_mul %s: x or y is NULL", nm);
    CHECK(ldx >= w->n_in, "mat_mul %s: ldx %lld < n_in %lld", nm, (long long)ldx, (long long)w->n_in);
    CHECK(ldy >= w->n_out, "mat_mul %s: ldy %lld < n_out %lld", nm, (long long)ldy,
          (long long)w->n_out);
    TRY(vt_gpu_select_device(ctx, "mat_mul"));
    const uint8_t *wd = (const uint8_t *)w->data;
    const size_t rb = (size_t)w->row_bytes;

    if (n_tokens == 1) { /* int8 activations for the types of gpu_matvec.cu */
        vt_status st;
        if (vt_gpu_mmq_vec(ctx, w, x, y, &st)) return st;
    }
    if (n_tokens <= VT_GPU_MM_VEC_MAX) { /* decode: dequantise on the fly */
        /* warps per block: 8, or 2 for a matrix of few rows, so that its
         * blocks spread over the SMs (a row's arithmetic is the same) */
        const int rows_per_warp = QT<T>::quant ? MM_VEC_ROWS : 1;
        const int wpb = w->n_out < 4096 * rows_per_warp ? 2 : MM_VEC_WARPS;
        int64_t nb = ceil_div(w->n_out, (int64_t)wpb * rows_per_warp);
        if (nb > INT_MAX)
            return vt_gpu_fail(ctx->host, VT_ERR_UNSUPPORTED, "mat_mul %s: %lld rows exceed the "
                               "grid", nm, (long long)w->n_out);
        unsigned grid = (unsigned)nb, threads = 32 * (unsigned)wpb;
        int nt = (int)n_tokens;
        if constexpr (QT<T>::quant) {
            /* float4 activations when aligned (k_mm_vec_q); the token count
             * rounded up to 1, 2, 4 or 8 */
            if ((uintptr_t)x % 16 != 0 || ldx % 4 != 0)
                k_mm_vec_q<T, false, 8><<<grid, threads, 0, VT_ST>>>(wd, rb, w->n_in, w->n_out, x, ldx, y, ldy, nt);
            else if (nt == 1)
                k_mm_vec_q<T, true, 1><<<grid, threads, 0, VT_ST>>>(wd, rb, w->n_in, w->n_out, x, ldx, y, ldy, nt);
            else if (nt == 2)
                k_mm_vec_q<T, true, 2><<<grid, threads, 0, VT_ST>>>(wd, rb, w->n_in, w->n_out, x, ldx, y, ldy, nt);
            else if (nt <= 4)
                k_mm_vec_q<T, true, 4><<<grid, threads, 0, VT_ST>>>(wd, rb, w->n_in, w->n_out, x, ldx, y, ldy, nt);
            else
                k_mm_vec_q<T, true, 8><<<grid, threads, 0, VT_ST>>>(wd, rb, w->n_in, w->n_out, x, ldx, y, ldy, nt);
        } else if (nt == 1 && w->n_out <= 4096) {
            k_mm_row<T><<<(unsigned)w->n_out, MM_ROW_THREADS, 0, VT_ST>>>(wd, rb, w->n_in, x, y);
        } else {
            k_mm_vec<T><<<grid, threads, 0, VT_ST>>>(wd, rb, w->n_in, w->n_out, x, ldx, y, ldy, nt);
        }
        /* writes y only: a held rounding of another row (the router's input,
         * read next by moe_ffn) stays held */
        return launched_into(ctx, "mat_mul", y, (n_tokens - 1) * ldy + w->n_out, NULL, 0);
    }

#if GPU_HAVE_BLAS
    if (ctx->gemm_blas && !blas_loaded()) {
        ctx->gemm_blas = 0;
        char why[384];
        snprintf(why, sizeof why, "backend %s: %s; prefill matmuls use the tiled kernel instead "
                 "(slower)", VT_GPU_PLUGIN_NAME, blas_error);
        if (ctx->host->struct_size >= offsetof(vt_host_api, note_fallback) + sizeof(void *) &&
            ctx->host->note_fallback)
            ctx->host->note_fallback(why);
        else
            ctx->host->log(VT_LOG_WARN, "%s", why);
    }
#endif
    if (!ctx->gemm_blas) { /* tiled kernel straight from the packed weight */
        int64_t gx = ceil_div(w->n_out, GT), gy = ceil_div(n_tokens, GT);
        if (gx > INT_MAX || gy > 65535)
            return vt_gpu_fail(ctx->host, VT_ERR_UNSUPPORTED, "mat_mul %s: %lld rows x %lld tokens "
                               "exceed the grid", nm, (long long)w->n_out, (long long)n_tokens);
        dim3 grid((unsigned)gx, (unsigned)gy);
        k_mm_tiled<T><<<grid, 256, 0, VT_ST>>>(wd, rb, w->n_in, w->n_out, x, ldx, y, ldy, n_tokens);
        return launched(ctx, "mat_mul");
    }

#if GPU_HAVE_BLAS
    /* prefill: Y[T][o] (ldy) = X[T][i] (ldx) · W[o][i]ᵀ. In cuBLAS's
     * column-major terms Yᵀ (n_out x T, ld ldy) = Wcᵀ · Xc with Wc the
     * row-major W read as an n_in x rows matrix (ld n_in) and Xc = Xᵀ
     * (n_in x T, ld ldx). */
    if (w->n_in > INT_MAX || ldx > INT_MAX || ldy > INT_MAX || n_tokens > INT_MAX)
        return vt_gpu_fail(ctx->host, VT_ERR_UNSUPPORTED, "mat_mul %s: n_in %lld, ldx %lld, ldy "
                           "%lld or %lld tokens exceed cuBLAS's int dimensions", nm,
                           (long long)w->n_in, (long long)ldx, (long long)ldy, (long long)n_tokens);
    TRY(blas_handle(ctx, nm));
    cublasHandle_t h = (cublasHandle_t)ctx->blas;
    const float one = 1.0f, zero = 0.0f;
    if (QT<T>::quant && ctx->gemm_tc && blas.gemm_ex) {
        /* tensor cores: the chunk decoded exactly, then rounded to bfloat16
         * (to nearest even; TF32 with dense_tf32), the activations rounded to
         * int8 blocks (prefill_xq) and then the same way once, and
         * cublasGemmEx with float32 accumulation and output */
        const int tf32 = ctx->dense_tf32, xq = ctx->prefill_xq && w->n_in % 32 == 0;
        size_t row_h = (size_t)w->n_in * (tf32 ? 4 : 2);
        int64_t hc = (int64_t)(VT_GPU_WBUF_MAX / row_h);
        if (hc < 1) hc = 1;
        if (hc > w->n_out) hc = w->n_out;
        if (hc > INT_MAX) hc = INT_MAX;
        TRY(reserve(ctx, "mat_mul", &ctx->wbuf, &ctx->wbuf_bytes, (size_t)hc * row_h, 0));
        TRY(reserve(ctx, "mat_mul", &ctx->abuf, &ctx->abuf_bytes, (size_t)n_tokens * row_h, 0));
        if (tf32)
            k_rows_act<tf32_val><<<grid_for(w->n_in * n_tokens, 256), 256, 0, VT_ST>>>(
                x, ldx, w->n_in, n_tokens, xq, (tf32_val *)ctx->abuf);
        else
            k_rows_act<uint16_t><<<grid_for(w->n_in * n_tokens, 256), 256, 0, VT_ST>>>(
                x, ldx, w->n_in, n_tokens, xq, (uint16_t *)ctx->abuf);
        TRY(launched(ctx, "mat_mul"));
        const cudaDataType_t dt = tf32 ? CUDA_R_32F : CUDA_R_16BF;
        const cublasComputeType_t ct = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
        for (int64_t r0 = 0; r0 < w->n_out; r0 += hc) {
            int64_t nr = w->n_out - r0 < hc ? w->n_out - r0 : hc;
            if (tf32)
                k_dequant_rows<T, tf32_val><<<grid_for(dequant_items<T>(w->n_in, nr), 256), 256, 0, VT_ST>>>(
                    wd + (size_t)r0 * rb, rb, w->n_in, NULL, nr, (tf32_val *)ctx->wbuf);
            else
                k_dequant_rows<T, uint16_t><<<grid_for(dequant_items<T>(w->n_in, nr), 256), 256, 0, VT_ST>>>(
                    wd + (size_t)r0 * rb, rb, w->n_in, NULL, nr, (uint16_t *)ctx->wbuf);
            TRY(launched(ctx, "mat_mul"));
            cublasStatus_t s = blas.gemm_ex(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)nr, (int)n_tokens,
                                            (int)w->n_in, &one, ctx->wbuf, dt,
                                            (int)w->n_in, ctx->abuf, dt, (int)w->n_in,
                                            &zero, y + r0, CUDA_R_32F, (int)ldy,
                                            ct, CUBLAS_GEMM_DEFAULT);
            if (s != CUBLAS_STATUS_SUCCESS)
                return vt_gpu_fail(ctx->host, VT_ERR_IO, "mat_mul %s: cublasGemmEx bf16 (%lld x "
                                   "%lld x %lld) on device %d failed: %s", nm, (long long)nr,
                                   (long long)n_tokens, (long long)w->n_in, ctx->device,
                                   blas_str(s));
        }
        return launched(ctx, "mat_mul");
    }
    int64_t chunk = w->n_out;
    if (T != VT_TYPE_F32) {
        size_t row_f = (size_t)w->n_in * sizeof(float);
        chunk = (int64_t)(VT_GPU_WBUF_MAX / row_f);
        if (chunk < 1) chunk = 1;
        if (chunk > w->n_out) chunk = w->n_out;
        TRY(reserve(ctx, "mat_mul", &ctx->wbuf, &ctx->wbuf_bytes, (size_t)chunk * row_f, 0));
    }
    if (chunk > INT_MAX) chunk = INT_MAX;
    for (int64_t r0 = 0; r0 < w->n_out; r0 += chunk) {
        int64_t nr = w->n_out - r0 < chunk ? w->n_out - r0 : chunk;
        const float *a;
        if (T == VT_TYPE_F32) {
            a = (const float *)(wd + (size_t)r0 * rb);
        } else {
            /* the previous chunk's SGEMM, queued before, has read wbuf when this runs */
            k_dequant_rows<T><<<grid_for(dequant_items<T>(w->n_in, nr), 256), 256, 0, VT_ST>>>(
                wd + (size_t)r0 * rb, rb, w->n_in, NULL, nr, (float *)ctx->wbuf);
            TRY(launched(ctx, "mat_mul"));
            a = (const float *)ctx->wbuf;
        }
        cublasStatus_t s = blas.sgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)nr, (int)n_tokens,
                                       (int)w->n_in, &one, a, (int)w->n_in, x, (int)ldx, &zero,
                                       y + r0, (int)ldy);
        if (s != CUBLAS_STATUS_SUCCESS)
            return vt_gpu_fail(ctx->host, VT_ERR_IO, "mat_mul %s: cublasSgemm (%lld x %lld x %lld) "
                               "on device %d failed: %s", nm, (long long)nr, (long long)n_tokens,
                               (long long)w->n_in, ctx->device, blas_str(s));
    }
    return launched(ctx, "mat_mul");
#else
    return vt_gpu_fail(ctx->host, VT_ERR_INTERNAL, "mat_mul %s: no BLAS in this build", nm);
#endif
}

/* mat_mul_run, keeping the rounded activations (ctx->xq_src) of an earlier
 * one-token matmul when y does not overlap their source */
template <int T>
static vt_status mat_mul_t(vt_backend_ctx *ctx, const vt_weight *w, const float *x, int64_t ldx,
                           float *y, int64_t ldy, int64_t n_tokens)
{
    NEED_CTX("mat_mul");
    const vt_gpu_xq_mark m = vt_gpu_xq_note(ctx);
    vt_status st = mat_mul_run<T>(ctx, w, x, ldx, y, ldy, n_tokens);
    if (st != VT_OK)
        vt_gpu_xq_forget(ctx);
    else if (w && n_tokens > 0) /* this matmul wrote only y */
        vt_gpu_xq_carry(ctx, m, y, (n_tokens - 1) * ldy + w->n_out, NULL, 0);
    return st;
}

template <int T>
static vt_status get_rows_t(vt_backend_ctx *ctx, const vt_weight *w, const int32_t *ids, int64_t n,
                            float *out)
{
    NEED_CTX("get_rows");
    TRY(check_weight(ctx, "get_rows", (uint32_t)T, walign<T>(), w));
    const char *nm = w->name ? w->name : "(unnamed)";
    CHECK(n >= 0, "get_rows %s: n %lld < 0", nm, (long long)n);
    if (n == 0) return VT_OK;
    CHECK(ids && out, "get_rows %s: ids or out is NULL", nm);
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= w->n_out)
            return vt_gpu_fail(ctx->host, VT_ERR_RANGE, "get_rows %s: row id %d (entry %lld) "
                               "outside [0, %lld)", nm, ids[i], (long long)i, (long long)w->n_out);
    TRY(vt_gpu_select_device(ctx, "get_rows"));
    void *dids;
    TRY(upload(ctx, "get_rows", ids, (size_t)n * sizeof(int32_t), NULL, 0, &dids, NULL));
    k_dequant_rows<T><<<grid_for(dequant_items<T>(w->n_in, n), 256), 256, 0, VT_ST>>>(
        (const uint8_t *)w->data, (size_t)w->row_bytes, w->n_in, (const int32_t *)dids, n, out);
    return launched(ctx, "get_rows");
}

#define MM_ENTRY(SUF, TYPE)                                                                    \
    extern "C" vt_status vt_gpu_mat_mul_##SUF(vt_backend_ctx *ctx, const vt_weight *w,         \
                                              const float *x, int64_t ldx, float *y,           \
                                              int64_t ldy, int64_t n_tokens)                   \
    {                                                                                          \
        return mat_mul_t<TYPE>(ctx, w, x, ldx, y, ldy, n_tokens);                              \
    }                                                                                          \
    extern "C" vt_status vt_gpu_get_rows_##SUF(vt_backend_ctx *ctx, const vt_weight *w,        \
                                               const int32_t *ids, int64_t n, float *out)      \
    {                                                                                          \
        return get_rows_t<TYPE>(ctx, w, ids, n, out);                                          \
    }
#define MM_ENTRY_OF(T, n) MM_ENTRY(n, VT_TYPE_##T)
VT_GPU_WEIGHT_TYPES(MM_ENTRY_OF)
#undef MM_ENTRY_OF

extern "C" vt_status vt_gpu_mat_mul_ext(vt_backend_ctx *ctx, const vt_weight *w, const float *x,
                                        int64_t ldx, float *y, int64_t ldy, int64_t n_tokens)
{
    NEED_CTX("mat_mul");
    CHECK(w, "mat_mul: weight is NULL");
#define MM_EXT(T, n)                                                                           \
    if (w->type == VT_TYPE_##T) return mat_mul_t<VT_TYPE_##T>(ctx, w, x, ldx, y, ldy, n_tokens);
    VT_GPU_EXT_TYPES(MM_EXT)
#undef MM_EXT
    return vt_gpu_fail(ctx->host, VT_ERR_CAPABILITY, "mat_mul %s: no kernel for weight type %s "
                       "(id %u)", w->name ? w->name : "(unnamed)", vt_type_name(w->type), w->type);
}

extern "C" vt_status vt_gpu_get_rows_ext(vt_backend_ctx *ctx, const vt_weight *w,
                                         const int32_t *ids, int64_t n, float *out)
{
    NEED_CTX("get_rows");
    CHECK(w, "get_rows: weight is NULL");
#define GR_EXT(T, n_)                                                                          \
    if (w->type == VT_TYPE_##T) return get_rows_t<VT_TYPE_##T>(ctx, w, ids, n, out);
    VT_GPU_EXT_TYPES(GR_EXT)
#undef GR_EXT
    return vt_gpu_fail(ctx->host, VT_ERR_CAPABILITY, "get_rows %s: no kernel for weight type %s "
                       "(id %u)", w->name ? w->name : "(unnamed)", vt_type_name(w->type), w->type);
}

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
    TRY(upload(ctx, "rope_neox", pos, (size_t)n_tokens * sizeof(int32_t), NULL, 0, &dpos, NULL));
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
    TRY(upload(ctx, "gather_rows", idx, (size_t)n * sizeof(int32_t), NULL, 0, &didx, NULL));
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
    TRY(upload(ctx, "scatter_add", idx, (size_t)n * sizeof(int32_t), wt,
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
    TRY(reserve(ctx, "softmax_topk", &ctx->hbuf, &ctx->hbuf_bytes, lb + (size_t)n * sizeof(float), 1));
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

/* ======================= decode graphs ======================= */

/* A recorded op sequence: the instantiated graph of the context's stream. */
struct vt_graph {
    vt_gpu_graph_exec exec;
};

extern "C" vt_status vt_gpu_graph_begin(vt_backend_ctx *ctx)
{
    NEED_CTX("graph_begin");
    if (ctx->capturing)
        return vt_gpu_fail(ctx->host, VT_ERR_INVALID_ARG, "graph_begin: already recording");
    TRY(vt_gpu_select_device(ctx, "graph_begin"));
    vt_gpu_xq_forget(ctx); /* a recording must round its own activations */
    /* the argument ring is set up now: its first use allocates, which a recording cannot do */
    (void)ring_ready(ctx);
    vt_gpu_xq_reserve(ctx); /* the same for the rounded activations' buffer */
    vt_gpu_attn_reserve(ctx); /* and for decode attention's parts */
    vt_gpu_error e = vt_gpu_stream_begin_capture(VT_ST);
    if (e != vt_gpu_success)
        return vt_gpu_fail(ctx->host, vt_gpu_status_of(e), "graph_begin: " VT_GPU_RT
                           "StreamBeginCapture on device %d failed: %s", ctx->device,
                           vt_gpu_get_error_string(e));
    ctx->capturing = 1;
    return VT_OK;
}

extern "C" vt_status vt_gpu_graph_end(vt_backend_ctx *ctx, vt_graph **out)
{
    NEED_CTX("graph_end");
    if (out) *out = NULL;
    if (!ctx->capturing)
        return vt_gpu_fail(ctx->host, VT_ERR_INVALID_ARG, "graph_end: not recording");
    ctx->capturing = 0;
    vt_gpu_xq_forget(ctx);
    vt_gpu_graph_t g = NULL;
    vt_gpu_error e = vt_gpu_stream_end_capture(VT_ST, &g);
    if (e != vt_gpu_success || !g) {
        (void)vt_gpu_get_last_error();
        return vt_gpu_fail(ctx->host, e != vt_gpu_success ? vt_gpu_status_of(e) : VT_ERR_IO,
                           "graph_end: " VT_GPU_RT "StreamEndCapture on device %d failed: %s "
                           "(an op of the recording failed or used another stream)", ctx->device,
                           e != vt_gpu_success ? vt_gpu_get_error_string(e) : "no graph");
    }
    if (!out) {
        (void)vt_gpu_graph_destroy(g);
        return vt_gpu_fail(ctx->host, VT_ERR_INVALID_ARG, "graph_end: out is NULL");
    }
    vt_graph *vg = (vt_graph *)calloc(1, sizeof *vg);
    if (!vg) {
        (void)vt_gpu_graph_destroy(g);
        return vt_gpu_fail(ctx->host, VT_ERR_OUT_OF_MEMORY, "graph_end: %zu bytes", sizeof *vg);
    }
    e = vt_gpu_graph_instantiate(&vg->exec, g);
    (void)vt_gpu_graph_destroy(g);
    if (e != vt_gpu_success) {
        free(vg);
        return vt_gpu_fail(ctx->host, vt_gpu_status_of(e), "graph_end: " VT_GPU_RT
                           "GraphInstantiate on device %d failed: %s", ctx->device,
                           vt_gpu_get_error_string(e));
    }
    *out = vg;
    return VT_OK;
}

extern "C" vt_status vt_gpu_graph_launch(vt_backend_ctx *ctx, vt_graph *g)
{
    NEED_CTX("graph_launch");
    CHECK(g, "graph_launch: graph is NULL");
    CHECK(!ctx->capturing, "graph_launch: the context is recording a graph");
    TRY(vt_gpu_select_device(ctx, "graph_launch"));
    vt_gpu_xq_forget(ctx);
    vt_gpu_tl_mark(ctx, 'g', 0);
    vt_gpu_error e = vt_gpu_graph_exec_launch(g->exec, VT_ST);
    vt_gpu_tl_mark(ctx, 'G', 0);
    if (e != vt_gpu_success)
        return vt_gpu_fail(ctx->host, vt_gpu_status_of(e), "graph_launch: " VT_GPU_RT
                           "GraphLaunch on device %d failed: %s", ctx->device,
                           vt_gpu_get_error_string(e));
    return VT_OK;
}

extern "C" void vt_gpu_graph_free(vt_backend_ctx *ctx, vt_graph *g)
{
    if (!g) return;
    if (ctx) (void)vt_gpu_select_device(ctx, "graph_free");
    (void)vt_gpu_graph_exec_destroy(g->exec);
    (void)vt_gpu_get_last_error();
    free(g);
}
