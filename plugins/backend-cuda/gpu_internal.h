/*
 * gpu_internal.h - the seam between the parts of backend-cuda /
 * backend-rocm:
 *
 *  - gpu_backend.cu (nvcc or hipcc, C++ with C linkage): everything that calls
 *    the vendor runtime for memory - device count and names, contexts, device
 *    and pinned host memory, copies, the zero-fill kernel, the memory probe;
 *  - gpu_ops.cu (nvcc or hipcc): the compute ops (vt/backend.h) as kernels,
 *    the per-context scratch buffers and, under CUDA, cuBLAS for prefill;
 *  - gpu_attention.cu (nvcc or hipcc): attention and attention_dpos;
 *  - gpu_moe.cu (nvcc or hipcc): the fused MoE ops of ABI 1.2 (moe_route,
 *    moe_ffn);
 *  - gpu_device.cuh: what the two kernel files share (launch helpers, the
 *    weight decoders, reductions, activations);
 *  - gpu_plugin.c (C11): the capability list, the vt_backend_api table and
 *    the plugin descriptor.
 *
 * vt/types.h and vt/backend.h compile as C and C++, so every part sees the
 * op signatures of vt/backend.h.
 *
 * The functions below have exactly the signatures of the vt_backend_api
 * members of the same name (vt/backend.h), so the table points at them
 * directly; only init is split (gpu_plugin.c unpacks vt_backend_params).
 * Every failure sets host->set_error() with a message naming the op or
 * runtime call, the object and the byte count, and returns a vt_status:
 * VT_ERR_OUT_OF_MEMORY for an allocation the device cannot satisfy,
 * VT_ERR_INVALID_ARG for NULL pointers and bad shapes, VT_ERR_RANGE for a bad
 * device index or row id, VT_ERR_UNSUPPORTED for a shape beyond a kernel's
 * limit, VT_ERR_IO for any other runtime error (driver, launch, copy, cuBLAS).
 *
 * Execution model: one context drives one device; every kernel runs on the
 * context's stream, in issue order (a blocking stream, so the synchronous
 * copies, which use the legacy default stream, stay ordered with it; a
 * device-to-host copy of at most 64 KiB goes through the pinned bounce
 * buffer on the context's stream instead, vt_gpu_d2h_bounce). An op returns once its kernels are
 * enqueued (launch errors are checked at once, execution errors surface at
 * the next synchronising call); copies to the host synchronise. Host arrays
 * an op takes (ids, idx, wt, pos) are copied into the context's device
 * scratch before the op returns, so the caller may reuse them at once.
 */
#ifndef VT_GPU_INTERNAL_H
#define VT_GPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "vt/backend.h"
#include "vt/bytes.h"
#include "vt/plugin.h"
#include "vt/status.h"

/* Plugin name and the name the runtime's calls carry in messages. */
#ifdef VT_GPU_HIP
#define VT_GPU_PLUGIN_NAME "rocm"
#define VT_GPU_RUNTIME_NAME "HIP"
#else
#define VT_GPU_PLUGIN_NAME "cuda"
#define VT_GPU_RUNTIME_NAME "CUDA"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* A context: one device, its scratch buffers and the cuBLAS handle. */
struct vt_backend_ctx {
    int device;
    const vt_host_api *host;
    char name[256];       /* device name, for messages */
    int gemm_blas;        /* prefill matmul through cuBLAS (1) or the tiled kernel (0) */
    int gemm_tc;          /* prefill products of block-type weights on tensor cores: mat_mul
                             through cuBLAS in TF32 (gpu_ops.cu), moe_ffn TF32 MMA
                             (gpu_mma.cu); CUDA on sm_80+, unless VT_GPU_GEMM=cublas|tiled */
    void *blas;           /* cublasHandle_t, created by the first prefill matmul */
    void *scratch;        /* device: host arguments of an op (ids, idx, wt, pos) */
    size_t scratch_bytes;
    void *wbuf;           /* device: weight rows dequantised to float32 (or bfloat16) for cuBLAS */
    size_t wbuf_bytes;
    void *abuf;           /* device: a prefill matmul's activations as TF32 or bfloat16 (gemm_tc) */
    size_t abuf_bytes;
    void *hbuf;           /* host: logits of softmax_topk */
    size_t hbuf_bytes;
    /* op arguments (ids, idx, wt, pos) go through a ring: pinned host -> device
     * by an asynchronous copy ordered on the default stream, so an op does not
     * wait for the device; the ring is reused after a device synchronize when it
     * wraps. NULL: not set up (pinned budget refused or allocation failed):
     * arguments use the synchronous scratch path. */
    uint8_t *ring_host, *ring_dev;
    size_t ring_off;
    int ring_state;       /* 0 untried, 1 ready, -1 unavailable */
    void *stream;         /* vt_gpu_stream every op runs on (blocking: ordered with the
                             legacy stream that the synchronous copies use); NULL: legacy */
    /* ABI 1.5 ahead copies: a non-blocking stream and the fork / join events
     * (created at the first ahead_fork; NULL until then) */
    void *ahead_stream, *ev_fork, *ev_join;
    int capturing;        /* between graph_begin and graph_end (ops are recorded) */
    int n_sm;             /* the device's multiprocessors (grid sizes of the matvecs) */
    int prefill_xq;       /* prefill products of block-type weights take the activations
                             rounded to int8 blocks as the one-token kernels do (x̂ = d·q,
                             then to the tensor cores' format); 0 with env
                             VT_GPU_PREFILL_XQ=0 */
    int dense_tf32;       /* the dense tensor-core matmul in TF32 (float32 buffers, the
                             default) or in bfloat16 (env VT_GPU_TC_DENSE=bf16) */
    int int8_dot;         /* one-token matvecs of gpu_matvec.cu's types on int8 activations
                             (gpu_matvec.cu); 0 with env VT_GPU_INT8_DOT=0 */
    /* one token's activations rounded to int8 blocks (gpu_qdot.cuh) in xq_dev
     * (VT_GPU_XQ_MAX values), and which activation row they are: xq_src (NULL:
     * none), xq_n floats. Every launch and copy forgets it (launched(),
     * gpu_copy, memset_zero, graphs); a mat_mul or moe_ffn whose output does
     * not overlap xq_src keeps it, so the matmuls of one input share one
     * rounding pass. */
    void *xq_dev;
    const void *xq_src;
    int64_t xq_n;
    unsigned long xq_epoch; /* vt_gpu_xq_epoch when xq_src was set */
    void *attn_part;        /* decode attention's per-part results (gpu_attention.cu) */
    struct vt_gpu_timeline *tl; /* env VT_GPU_TIMELINE=FILE: marks on the streams (NULL: off) */
};

/* A diagnostic timeline (env VT_GPU_TIMELINE=FILE): vt_gpu_tl_mark records a
 * timed event of kind (one letter) on the ahead stream (ahead != 0) or the
 * context's stream; at shutdown every mark is written to FILE as "kind ms"
 * lines, ms since the first mark. A no-op when off or full. */
void vt_gpu_tl_mark(vt_backend_ctx *ctx, char kind, int ahead);

/* The pinned host buffer a device-to-host copy of `bytes` may bounce
 * through (gpu_ops.cu: 64 KiB after the argument ring), or NULL. */
uint8_t *vt_gpu_d2h_bounce(vt_backend_ctx *ctx, size_t bytes);

/* The ops' scratch (gpu_ops.cu). vt_gpu_reserve: *buf (device, or pinned
 * host when host_mem) holds at least `bytes`, growing by doubling after the
 * device has finished with the old buffer (refused while a graph records).
 * vt_gpu_upload: up to two host arrays a and b (b_bytes may be 0) copied
 * into device scratch (the argument ring when small), *da and *db their
 * device copies (refused while a graph records: a replay would copy the
 * recording's values). vt_gpu_ring_ready: the argument ring set up once per
 * context (0 when the pinned budget has no room for it). Errors name op. */
vt_status vt_gpu_reserve(vt_backend_ctx *ctx, const char *op, void **buf, size_t *cap,
                         size_t bytes, int host_mem);
vt_status vt_gpu_upload(vt_backend_ctx *ctx, const char *op, const void *a, size_t a_bytes,
                        const void *b, size_t b_bytes, void **da, void **db);
int vt_gpu_ring_ready(vt_backend_ctx *ctx);

/* Bumped by every launch, copy, fill, allocation and free of any context of
 * the plugin: rounded activations are reused only while it has not moved
 * since (another context's copy into the source, or a freed and reallocated
 * buffer, shows). */
extern unsigned long vt_gpu_xq_epoch;
static inline void vt_gpu_xq_forget(vt_backend_ctx *ctx)
{
    __atomic_add_fetch(&vt_gpu_xq_epoch, 1, __ATOMIC_RELAXED);
    if (ctx) ctx->xq_src = NULL;
}
static inline void vt_gpu_xq_keep(vt_backend_ctx *ctx, const void *src, int64_t n)
{
    ctx->xq_src = src;
    ctx->xq_n = n;
    ctx->xq_epoch = __atomic_load_n(&vt_gpu_xq_epoch, __ATOMIC_RELAXED);
}
static inline int vt_gpu_xq_holds(const vt_backend_ctx *ctx, const void *src, int64_t n)
{
    return ctx->xq_src && ctx->xq_src == src && ctx->xq_n == n &&
           ctx->xq_epoch == __atomic_load_n(&vt_gpu_xq_epoch, __ATOMIC_RELAXED);
}
/* The held rounding before an op (vt_gpu_xq_note), restored after it by
 * vt_gpu_xq_carry when the op wrote only [out, out + n_out floats) and
 * [out2, out2 + n_out2 floats) (out2 may be NULL), neither overlapping the
 * rounding's source row, and holds no newer rounding itself. */
typedef struct vt_gpu_xq_mark {
    const void *src;
    int64_t n;
    int held;
} vt_gpu_xq_mark;
int vt_gpu_overlap(const void *y, int64_t n_y, const void *src, int64_t n_src);
static inline vt_gpu_xq_mark vt_gpu_xq_note(const vt_backend_ctx *ctx)
{
    vt_gpu_xq_mark m = {ctx->xq_src, ctx->xq_n, 0};
    m.held = m.src && vt_gpu_xq_holds(ctx, m.src, m.n);
    return m;
}
static inline void vt_gpu_xq_carry(vt_backend_ctx *ctx, vt_gpu_xq_mark m, const void *out,
                                   int64_t n_out, const void *out2, int64_t n_out2)
{
    if (!m.held || (ctx->xq_src && vt_gpu_xq_holds(ctx, ctx->xq_src, ctx->xq_n))) return;
    if (vt_gpu_overlap(out, n_out, m.src, m.n) || (out2 && vt_gpu_overlap(out2, n_out2, m.src, m.n)))
        return;
    vt_gpu_xq_keep(ctx, m.src, m.n);
}

/* Devices the runtime sees now; 0 when the runtime reports an error
 * (no driver, no device). Never fails. */
int vt_gpu_device_count(void);

/* A context on `device` (0-based): selects it and creates the runtime's
 * context so that driver errors surface here. host: the core's table, used
 * for every later message. VT_ERR_RANGE naming the index and the count when
 * device is not in [0, device_count()). */
vt_status vt_gpu_init_device(int device, const vt_host_api *host, vt_backend_ctx **out);
void vt_gpu_shutdown(vt_backend_ctx *ctx);

/* Device memory (plain device allocation, never managed memory), 256-byte
 * aligned; bytes == 0 allocates one minimal block. */
vt_status vt_gpu_alloc(vt_backend_ctx *ctx, size_t bytes, const char *what, void **out);
void vt_gpu_free_mem(vt_backend_ctx *ctx, void *ptr);

/* Synchronous copies: the data is at dst when they return. */
vt_status vt_gpu_copy_h2d(vt_backend_ctx *ctx, void *dst, const void *src, size_t bytes);
vt_status vt_gpu_copy_h2d_async(vt_backend_ctx *ctx, void *dst, const void *src, size_t bytes);
/* ABI 1.5: the second copy queue (gpu_backend.cu) */
vt_status vt_gpu_ahead_fork(vt_backend_ctx *ctx);
vt_status vt_gpu_copy_h2d_ahead(vt_backend_ctx *ctx, const vt_h2d_copy *copies, uint32_t n);
vt_status vt_gpu_ahead_join(vt_backend_ctx *ctx);
vt_status vt_gpu_copy_d2h(vt_backend_ctx *ctx, void *dst, const void *src, size_t bytes);
vt_status vt_gpu_copy_d2d(vt_backend_ctx *ctx, void *dst, const void *src, size_t bytes);
/* bytes of device memory at dst set to 0 by a kernel; complete on return. */
vt_status vt_gpu_memset_zero(vt_backend_ctx *ctx, void *dst, size_t bytes);
vt_status vt_gpu_synchronize(vt_backend_ctx *ctx);

/* Live free and total bytes of the context's device (cudaMemGetInfo /
 * hipMemGetInfo after selecting the device). */
vt_status vt_gpu_memory_probe(vt_backend_ctx *ctx, uint64_t *free_bytes, uint64_t *total_bytes);

/* Page-locked host memory (cudaHostAlloc / hipHostMalloc) for staging. */
vt_status vt_gpu_host_alloc_pinned(vt_backend_ctx *ctx, size_t bytes, const char *what, void **out);
void vt_gpu_host_free_pinned(vt_backend_ctx *ctx, void *ptr);

/* The device's name from its properties ("NVIDIA H200"); no context needed.
 * VT_ERR_RANGE when device is not in [0, device_count()). */
vt_status vt_gpu_device_name(int device, char *buf, size_t cap);

/* ---- gpu_ops.cu ---- */

/* Set up the op state of a new context (prefill products, env VT_GPU_GEMM:
 * unset or tc: tensor cores for block-type weights where the device has
 * them; cublas: float32 everywhere; tiled: the tiled kernel, which is how
 * the tests reach the HIP path on an NVIDIA device; another value is warned
 * about and taken as tc), and free it (scratch, cuBLAS handle) before the
 * context goes. */
void vt_gpu_ops_init(vt_backend_ctx *ctx);
void vt_gpu_ops_release(vt_backend_ctx *ctx);

/* mat_mul / get_rows per weight type: F32, F16, BF16 (gguf.md §6.1), Q4_0,
 * Q4_1, Q5_0, Q5_1, Q8_0 (§6.2-6.6), Q2_K, Q3_K, Q4_K, Q5_K, Q6_K
 * (§6.7-6.12), IQ4_NL, IQ4_XS (§6.14-6.15), MXFP4 (§6.16) and the low-bit
 * types of gpu_lowbit.cuh (IQ1-IQ3, TQ1_0, TQ2_0, NVFP4, Q1_0, Q2_0; ids 64-66
 * of the iq1-narrow fork). Weights are decoded exactly to float32 with
 * backend-cpu's reference arithmetic (vt_cpu_dequant_row), so get_rows
 * equals it bit for bit. mat_mul with at most VT_GPU_MM_VEC_MAX tokens runs
 * the dequantise-on-the-fly kernel (one warp per output row), larger batches
 * dequantise rows in chunks of at most VT_GPU_WBUF_MAX bytes and run cuBLAS
 * SGEMM (CUDA) or the tiled kernel. Besides the shape checks, weight data
 * must be aligned to 4 bytes (F32, Q4_1, Q5_1, Q2_K, Q4_K, Q5_K, IQ4_XS:
 * blocks of a multiple of 4 bytes, read in 32-bit words), 2 bytes (F16, BF16,
 * Q4_0, Q5_0, Q8_0, Q3_K, Q6_K, IQ4_NL and the low-bit types but NVFP4) or 1
 * (MXFP4, NVFP4); a misaligned weight is refused with VT_ERR_INVALID_ARG.
 * (Device allocations are 256-byte aligned and GGUF tensor offsets
 * general.alignment-aligned, so only an odd alignment below 4 meets this.) */
#define VT_GPU_MM_VEC_MAX 8
#define VT_GPU_WBUF_MAX ((size_t)64 << 20)
/* The weight types with kernels, X(T, name) for VT_TYPE_<T>: plain, block
 * types below VT_TYPE_SLOTS (the mat_mul/get_rows tables), and the ids past
 * them (ABI 1.9's mat_mul_ext/get_rows_ext). Each has the entry points
 * vt_gpu_mat_mul_<name> and vt_gpu_get_rows_<name> (gpu_ops.cu). */
#define VT_GPU_PLAIN_TYPES(X) X(F32, f32) X(F16, f16) X(BF16, bf16)
#define VT_GPU_KQUANT_TYPES(X)                                                                 \
    X(Q4_0, q4_0) X(Q4_1, q4_1) X(Q5_0, q5_0) X(Q5_1, q5_1) X(Q8_0, q8_0) X(Q2_K, q2_k)        \
    X(Q3_K, q3_k) X(Q4_K, q4_k) X(Q5_K, q5_k) X(Q6_K, q6_k) X(IQ4_NL, iq4_nl)                 \
    X(IQ4_XS, iq4_xs) X(MXFP4, mxfp4)
#define VT_GPU_LOWBIT_SLOT_TYPES(X)                                                            \
    X(IQ2_XXS, iq2_xxs) X(IQ2_XS, iq2_xs) X(IQ2_S, iq2_s) X(IQ3_XXS, iq3_xxs) X(IQ3_S, iq3_s)  \
    X(IQ1_S, iq1_s) X(IQ1_M, iq1_m) X(TQ1_0, tq1_0) X(TQ2_0, tq2_0) X(NVFP4, nvfp4)            \
    X(Q1_0, q1_0) X(Q2_0, q2_0)
#define VT_GPU_EXT_TYPES(X) X(IQ1_XS, iq1_xs) X(IQ1_XXS, iq1_xxs) X(IQ1_XXXS, iq1_xxxs)
/* the block types with a mat_mul/get_rows table slot; the low-bit ones (gpu_lowbit.cuh) */
#define VT_GPU_BLOCK_TYPES(X) VT_GPU_KQUANT_TYPES(X) VT_GPU_LOWBIT_SLOT_TYPES(X)
#define VT_GPU_LOWBIT_TYPES(X) VT_GPU_LOWBIT_SLOT_TYPES(X) VT_GPU_EXT_TYPES(X)
#define VT_GPU_WEIGHT_TYPES(X) VT_GPU_PLAIN_TYPES(X) VT_GPU_BLOCK_TYPES(X) VT_GPU_EXT_TYPES(X)
#define VT_GPU_OP_DECL(T, n)                                                                   \
    vt_status vt_gpu_mat_mul_##n(vt_backend_ctx *ctx, const vt_weight *w, const float *x,      \
                                 int64_t ldx, float *y, int64_t ldy, int64_t n_tokens);        \
    vt_status vt_gpu_get_rows_##n(vt_backend_ctx *ctx, const vt_weight *w, const int32_t *ids, \
                                  int64_t n, float *out);
VT_GPU_WEIGHT_TYPES(VT_GPU_OP_DECL)
#undef VT_GPU_OP_DECL
/* mat_mul_ext / get_rows_ext: the entry of VT_GPU_EXT_TYPES named by
 * w->type; another type is refused with VT_ERR_CAPABILITY. */
vt_status vt_gpu_mat_mul_ext(vt_backend_ctx *ctx, const vt_weight *w, const float *x, int64_t ldx,
                             float *y, int64_t ldy, int64_t n_tokens);
vt_status vt_gpu_get_rows_ext(vt_backend_ctx *ctx, const vt_weight *w, const int32_t *ids,
                              int64_t n, float *out);

vt_status vt_gpu_rms_norm(vt_backend_ctx *ctx, const float *x, int64_t ldx, const float *w,
                          float *y, int64_t ldy, int64_t n_rows, int64_t n, float eps);
vt_status vt_gpu_l2_norm(vt_backend_ctx *ctx, const float *x, int64_t ldx, float *y, int64_t ldy,
                         int64_t n_rows, int64_t n, float eps);
vt_status vt_gpu_rope_neox(vt_backend_ctx *ctx, float *x, int64_t ld_token, int64_t ld_head,
                           int64_t n_tokens, int64_t n_head, int64_t n_rot, const int32_t *pos,
                           float base, const float *freq_factors);
/* head_dim up to VT_GPU_ATTN_MAX_HEAD_DIM (VT_ERR_UNSUPPORTED beyond). */
#define VT_GPU_ATTN_MAX_HEAD_DIM 512
vt_status vt_gpu_attention(vt_backend_ctx *ctx, const float *q, int64_t ldq, int64_t ldq_head,
                           const float *k_cache, const float *v_cache, float *out, int64_t ldo,
                           int64_t n_tokens, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                           int64_t pos0, int64_t n_kv, int64_t window, float scale, float softcap);
vt_status vt_gpu_ssm_conv(vt_backend_ctx *ctx, const float *x, int64_t ldx, const float *w,
                          float *state, float *y, int64_t ldy, int64_t n_tokens, int64_t n_ch,
                          int64_t d_conv);
vt_status vt_gpu_gated_delta_net(vt_backend_ctx *ctx, const float *q, const float *k, int64_t ldqk,
                                 const float *v, int64_t ldv, const float *g, const float *beta,
                                 float *state, float *out, int64_t ldo, int64_t n_tokens,
                                 int64_t n_k, int64_t n_v, int64_t d_k, int64_t d_v);
vt_status vt_gpu_unary(vt_backend_ctx *ctx, vt_unary_op op, const float *x, float *y, int64_t n);
vt_status vt_gpu_binary(vt_backend_ctx *ctx, vt_binary_op op, const float *a, const float *b,
                        float *y, int64_t n, int64_t nb);
vt_status vt_gpu_scale(vt_backend_ctx *ctx, const float *x, float *y, int64_t n, float s);
vt_status vt_gpu_mul_rows(vt_backend_ctx *ctx, const float *x, const float *s, float *y,
                          int64_t n_rows, int64_t n_cols);
/* ABI 1.3 fusions: gpu_elementwise.cu (mul_act, delta_net_gates), gpu_norm.cu (add_rms_norm) */
vt_status vt_gpu_mul_act(vt_backend_ctx *ctx, vt_unary_op op, const float *a, int64_t lda,
                         const float *b, int64_t ldb, float *y, int64_t ldy, int64_t n_rows,
                         int64_t n_cols);
vt_status vt_gpu_add_rms_norm(vt_backend_ctx *ctx, float *x, int64_t ldx, const float *a,
                              int64_t lda, const float *gate, const float *w, float *y,
                              int64_t ldy, int64_t n_rows, int64_t n, float eps);
vt_status vt_gpu_delta_net_gates(vt_backend_ctx *ctx, const float *b, int64_t ldb,
                                 const float *alpha, int64_t lda, const float *dt_bias,
                                 const float *ssm_a, float *beta, float *g, int64_t n_tokens,
                                 int64_t n_v);
vt_status vt_gpu_copy_2d(vt_backend_ctx *ctx, const float *src, int64_t ld_src, float *dst,
                         int64_t ld_dst, int64_t n_rows, int64_t n_cols);
vt_status vt_gpu_gather_rows(vt_backend_ctx *ctx, const float *src, int64_t ld_src,
                             const int32_t *idx, int64_t n, int64_t n_cols, float *dst,
                             int64_t ld_dst);
vt_status vt_gpu_scatter_add(vt_backend_ctx *ctx, const float *src, int64_t ld_src,
                             const int32_t *idx, const float *wt, int64_t n, int64_t n_cols,
                             float *dst, int64_t ld_dst);
vt_status vt_gpu_softmax_topk(vt_backend_ctx *ctx, const float *logits, int64_t n_rows, int64_t n,
                              int64_t k, int renorm, int32_t *ids, float *weights, float *probs);

/* ---- gpu_moe.cu (ABI 1.2) ---- */
/* moe_route: at most 8192 experts per row (VT_ERR_UNSUPPORTED beyond).
 * moe_ffn: gate and up of one type (VT_ERR_UNSUPPORTED otherwise), rows of
 * a multiple of 32 elements; n_tokens <= 65535. */
vt_status vt_gpu_moe_route(vt_backend_ctx *ctx, const float *logits, int64_t n_rows, int64_t n,
                           int64_t k, int renorm, const float *expert_scale, int32_t *ids,
                           float *weights);
vt_status vt_gpu_moe_ffn(vt_backend_ctx *ctx, const vt_moe_ffn_args *args);

/* ---- gpu_matvec.cu: one-token matvecs on int8 activations (gpu_qdot.cuh) ---- */

/* y[n_out] = W · x for one token x [n_in] when ctx->int8_dot, w's type is
 * Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q4_K, Q5_K, Q6_K or a low-bit type (MQ_TYPES)
 * and n_in fits the shared memory (~39k values): returns 1 with *st the
 * launch status; 0 (nothing launched) otherwise. */
int vt_gpu_mmq_vec(vt_backend_ctx *ctx, const vt_weight *w, const float *x, float *y,
                   vt_status *st);
/* moe_ffn's decode (n_tokens <= VT_GPU_MM_VEC_MAX, top-k <= 8) on int8
 * activations: usable when ctx->int8_dot and gate/up and down have such types
 * and fit; run writes out itself (the weighted sums in moe_ffn's order), with
 * buf moe_ffn's scratch from its act_buf on (n_tokens·k·n_ff floats, then
 * n_tokens·k·n_embd floats: gpu_moe.cu's moe_carve); *rounded: 1 when x
 * (one token) was rounded into ctx->xq_dev. */
int vt_gpu_moe_q_usable(const vt_backend_ctx *ctx, const vt_moe_ffn_args *a);
vt_status vt_gpu_moe_q_run(vt_backend_ctx *ctx, const vt_moe_ffn_args *a, void *buf, int *rounded);
#define VT_GPU_XQ_MAX 65536 /* values of xq_dev */
/* ctx->xq_dev allocated unless it is, int8_dot is off or a graph is being
 * recorded; a failed allocation leaves it NULL (the kernels then round in
 * shared memory) */
void vt_gpu_xq_reserve(vt_backend_ctx *ctx);
/* ctx->xq_dev's arrays for n values (q [n] int8, d and s [n/32]); 0 when
 * int8_dot is off, n exceeds VT_GPU_XQ_MAX or there is no buffer. A kernel
 * that fills them for activation row src calls vt_gpu_xq_keep(ctx, src, n)
 * after its launch. */
int vt_gpu_xq_view(vt_backend_ctx *ctx, int64_t n, int8_t **q, float **d, float **s);
/* ctx->attn_part (VT_GPU_ATTN_PART_BYTES) allocated unless it is or a graph
 * is being recorded; NULL after a failure (one block per head then) */
#define VT_GPU_ATTN_PART_BYTES ((size_t)4 << 20)
void vt_gpu_attn_reserve(vt_backend_ctx *ctx);
/* 1 when [y, y + n_y floats) and [src, src + n_src floats) overlap
 * (declared above, with the rounding's helpers) */

/* ---- gpu_mma.cu: moe_ffn's prefill GEMMs of block-type weights on tensor cores ---- */

/* y = A · Wᵀ with W of a block type (VT_GPU_BLOCK_TYPES and VT_GPU_EXT_TYPES,
 * not F32/F16/BF16), TF32
 * inputs and float32 accumulation (gpu_mma.cu states the error bound), over
 * moe_ffn's pairs sorted by expert (sorted, off, tiles from k_moe_sort over
 * tiles of VT_GPU_TC_BM_MOE pairs; max_tiles bounds tiles[n_expert]; n_rows
 * pairs in all; n_in a multiple of 32):
 *  - VT_GPU_TC_GATE_UP: W = w0[e] (gate) and w1[e] (up), A row of sorted
 *    slot s the token row a + (sorted[s] / k)·lda, y[s·n_out + o] = act(g)·u;
 *  - VT_GPU_TC_DOWN: W = w0[e], A row a + s·lda, y[s·n_out + o].
 * All pointers are device memory; the kernels are queued on ctx's stream. */
enum { VT_GPU_TC_GATE_UP = 1, VT_GPU_TC_DOWN = 2 };
#define VT_GPU_TC_BM_MOE 32
typedef struct vt_gpu_tc_args {
    uint32_t type;
    int mode;
    const float *a;
    int64_t lda;
    const void *const *w0, *const *w1;
    size_t rb;
    int64_t n_in, n_out, n_rows;
    const int32_t *sorted, *off, *tiles;
    int n_expert, k, act;
    int64_t max_tiles;
    float *y;
    int xq; /* 1: A's rows rounded to int8 blocks of 32 first (ctx->prefill_xq) */
} vt_gpu_tc_args;
/* 1 when the plugin's kernels were compiled for a device with TF32 MMA and
 * the current device runs them (vt_gpu_ops_init asks once per context) */
int vt_gpu_tc_probe(void);
/* 1 when ctx->gemm_tc, type has a kernel, A's rows are 16-byte aligned
 * (a and lda) and n_in is a multiple of 32 */
int vt_gpu_tc_usable(const vt_backend_ctx *ctx, uint32_t type, const float *a, int64_t lda,
                     int64_t n_in);
/* Queue the product; op names it in errors (launch failure, grid limits). */
vt_status vt_gpu_tc_run(vt_backend_ctx *ctx, const vt_gpu_tc_args *a, const char *op);

/* ---- decode graphs (ABI 1.2, capability VT_CAP_GRAPH): gpu_ops.cu ---- */
vt_status vt_gpu_graph_begin(vt_backend_ctx *ctx);
vt_status vt_gpu_graph_end(vt_backend_ctx *ctx, vt_graph **out);
vt_status vt_gpu_graph_launch(vt_backend_ctx *ctx, vt_graph *g);
void vt_gpu_graph_free(vt_backend_ctx *ctx, vt_graph *g);
vt_status vt_gpu_rope_neox_dpos(vt_backend_ctx *ctx, float *x, int64_t ld_token, int64_t ld_head,
                                int64_t n_tokens, int64_t n_head, int64_t n_rot,
                                const int32_t *pos, float base, const float *freq_factors);
vt_status vt_gpu_attention_dpos(vt_backend_ctx *ctx, const float *q, int64_t ldq, int64_t ldq_head,
                                const float *k_cache, const float *v_cache, float *out,
                                int64_t ldo, int64_t n_tokens, int64_t n_head, int64_t n_head_kv,
                                int64_t head_dim, const int32_t *pos0, int64_t n_kv_max,
                                int64_t window, float scale, float softcap);
vt_status vt_gpu_copy_rows_dpos(vt_backend_ctx *ctx, const float *src, int64_t ld_src, float *dst,
                                int64_t ld_dst, int64_t n_rows, int64_t n_cols,
                                const int32_t *row0);

#ifdef __cplusplus
}

/* C++ helpers shared by gpu_backend.cu and gpu_ops.cu (defined in gpu_backend.cu). */
#include "gpu_vendor.h"
/* Report through the host table (stderr when there is none); returns st. */
vt_status vt_gpu_fail(const vt_host_api *host, vt_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The vt_status of a runtime error; clears the runtime's last error. */
vt_status vt_gpu_status_of(vt_gpu_error e);
/* The context's stream as the vendor type (launches: <<<g, b, sh, VT_ST>>>). */
#define VT_ST ((vt_gpu_stream)ctx->stream)
/* Select the context's device; on failure sets the error naming op. */
vt_status vt_gpu_select_device(vt_backend_ctx *ctx, const char *op);
#endif
#endif
