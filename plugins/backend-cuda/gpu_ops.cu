/*
 * gpu_ops.cu - the compute ops of backend-cuda and backend-rocm (vt/backend.h
 * is the contract: shapes, strides, host vs device arrays, formulas) as
 * kernels, written once for nvcc and hipcc (gpu_vendor.h maps the few names
 * that differ): here the ops' scratch, mat_mul and get_rows; attention is in
 * gpu_attention.cu, the fused MoE ops in gpu_moe.cu, rms_norm and l2_norm in
 * gpu_norm.cu, RoPE, ssm_conv and gated_delta_net in gpu_mixer.cu, copies,
 * gathers, scatters and routing in gpu_rows.cu, decode graphs in
 * gpu_graph.cu, what they share in gpu_device.cuh.
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
extern "C" vt_status vt_gpu_reserve(vt_backend_ctx *ctx, const char *op, void **buf,
                                    size_t *cap, size_t bytes, int host_mem)
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
extern "C" int vt_gpu_ring_ready(vt_backend_ctx *ctx)
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
    if (!on || bytes > D2H_BOUNCE_BYTES || ctx->capturing || !vt_gpu_ring_ready(ctx)) return NULL;
    return ctx->ring_host + RING_BYTES;
}

extern "C" vt_status vt_gpu_upload(vt_backend_ctx *ctx, const char *op, const void *a,
                                   size_t a_bytes, const void *b, size_t b_bytes, void **da,
                                   void **db)
{
    if (ctx->capturing) /* a replay would copy the values of the recording */
        return vt_gpu_fail(ctx->host, VT_ERR_UNSUPPORTED, "%s: an op with host array arguments "
                           "cannot be recorded into a graph (graph_begin .. graph_end); the "
                           "device-position ops (rope_neox_dpos, attention_dpos, copy_rows_dpos) "
                           "are the ones to record", op);
    size_t off_b = (a_bytes + 255) & ~(size_t)255;
    size_t need = (off_b + b_bytes + 255) & ~(size_t)255;
    if (need <= RING_BYTES / 4 && vt_gpu_ring_ready(ctx)) {
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
    TRY(vt_gpu_reserve(ctx, op, &ctx->scratch, &ctx->scratch_bytes, off_b + b_bytes, 0));
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
        TRY(vt_gpu_reserve(ctx, "mat_mul", &ctx->wbuf, &ctx->wbuf_bytes, (size_t)hc * row_h, 0));
        TRY(vt_gpu_reserve(ctx, "mat_mul", &ctx->abuf, &ctx->abuf_bytes, (size_t)n_tokens * row_h, 0));
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
        TRY(vt_gpu_reserve(ctx, "mat_mul", &ctx->wbuf, &ctx->wbuf_bytes, (size_t)chunk * row_f, 0));
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
    TRY(vt_gpu_upload(ctx, "get_rows", ids, (size_t)n * sizeof(int32_t), NULL, 0, &dids, NULL));
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
