/*
 * vt/backend.h - the backend plugin table: memory, capabilities and the
 * compute ops the model plugins call.
 *
 * A backend plugin's descriptor (vt/plugin.h) has kind VT_PLUGIN_BACKEND and
 * its table is a vt_backend_api. A model plugin never includes a vendor
 * header: it allocates "device" memory through this table and calls ops on
 * it. Ops are eager: when an op returns VT_OK its result is visible to the
 * next op on the same context (a backend with async queues orders them; the
 * host sees results after synchronize()/copy_d2h()).
 *
 * Conventions for every op:
 *  - Pointers named x, y, a, b, q, k, v, state, out... are device memory of
 *    this backend (for backend-cpu: host memory). Arrays documented "host" are
 *    host memory read before the op returns.
 *  - Activations are float32, row-major; `ld*` arguments are row strides in
 *    elements (floats), so strided views (e.g. the query half of an
 *    interleaved [query|gate] row) need no copy.
 *  - Shapes are written [rows, cols] with cols contiguous.
 *  - Failures return a vt_status and set host->set_error() with what failed.
 *
 * Required vs capabilities (DESIGN.md "The plugin ABI"): the memory functions
 * and init/shutdown are required (NULL is a load error). Every other member is
 * an optional capability and the table's `caps` list must declare each
 * capability id this ABI knows as PRESENT (function set) or ABSENT (function
 * NULL, with a one-line reason). Per-weight-type matmul and row gather are
 * capabilities VT_CAP_MAT_MUL(type) and VT_CAP_GET_ROWS(type).
 *
 * Thread-safety: one vt_backend_ctx is used by one thread at a time.
 *
 * ABI history: 1.0 the table up to softmax_topk; 1.1 appends device_name and
 * the capability VT_CAP_DEVICE_NAME; 1.2 appends moe_route and moe_ffn (routing
 * and the routed-expert FFN with their arrays in device memory) and their
 * capabilities VT_CAP_OP_MOE_ROUTE and VT_CAP_OP_MOE_FFN, and decode graphs
 * (graph_begin .. graph_free with the device-position ops rope_neox_dpos,
 * attention_dpos, copy_rows_dpos) under VT_CAP_GRAPH. A plugin built for
 * an older minor loads on a newer core; the capabilities it predates read
 * ABSENT ("plugin built for ABI 1.0"). 1.3 appends the element-wise
 * fusions mul_act, add_rms_norm and delta_net_gates (VT_CAP_OP_MUL_ACT,
 * VT_CAP_OP_ADD_RMS_NORM, VT_CAP_OP_DELTA_NET_GATES): each is the
 * composition of 1.0 ops in one call, so that a GPU runs one launch where
 * the composition runs several; a backend without them is served by the
 * composition (models check the capability). 1.4 appends copy_h2d_async
 * (VT_CAP_COPY_H2D_ASYNC): a host-to-device copy queued with the ops that
 * returns before it completes, which the expert streamer's host tier uses
 * to overlap the copies of a layer's misses (a backend without it is
 * served by copy_h2d). 1.5 appends a second copy queue beside the ops
 * (ahead_fork, copy_h2d_ahead, ahead_join under VT_CAP_COPY_H2D_AHEAD), on
 * which the expert streamer copies the experts it predicts for the next
 * layer while the current one computes. 1.9 appends mat_mul_ext and
 * get_rows_ext, the weight-typed ops of type ids >= VT_TYPE_SLOTS, with
 * capability ids from VT_CAP_TYPE_EXT_BASE (so a type id of any size can be
 * declared); the ids below it keep their numbers.
 */
#ifndef VT_BACKEND_H
#define VT_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "vt/plugin.h"
#include "vt/status.h"
#include "vt/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- capabilities ---- */

typedef enum vt_cap_id {
    /* memory and platform */
    VT_CAP_MEMORY_PROBE = 0,             /* memory_probe(): free/total device bytes */
    VT_CAP_PINNED_HOST_ALLOC = 1,        /* host_alloc_pinned()/host_free_pinned() */
    VT_CAP_HOST_ADDRESSABLE_DEVICE_MEMORY = 2, /* device pointers are host pointers (CPU, unified memory) */
    VT_CAP_ASYNC_QUEUE = 3,              /* ops may run asynchronously until synchronize() */
    VT_CAP_PEER_COPY = 4,                /* copy between two devices of this backend */
    VT_CAP_DEVICE_NAME = 5,              /* device_name(): "NVIDIA H200" (ABI 1.1) */
    /* ops (one capability per op; weight-typed ops below) */
    VT_CAP_OP_RMS_NORM = 16,
    VT_CAP_OP_L2_NORM = 17,
    VT_CAP_OP_ROPE_NEOX = 18,
    VT_CAP_OP_ATTENTION = 19,
    VT_CAP_OP_SSM_CONV = 20,
    VT_CAP_OP_GATED_DELTA_NET = 21,
    VT_CAP_OP_UNARY = 22,
    VT_CAP_OP_BINARY = 23,
    VT_CAP_OP_SCALE = 24,
    VT_CAP_OP_MUL_ROWS = 25,
    VT_CAP_OP_COPY_2D = 26,
    VT_CAP_OP_GATHER_ROWS = 27,
    VT_CAP_OP_SCATTER_ADD = 28,
    VT_CAP_OP_SOFTMAX_TOPK = 29,
    VT_CAP_OP_MOE_ROUTE = 30,            /* moe_route(): routing into device arrays (ABI 1.2) */
    VT_CAP_OP_MOE_FFN = 31,              /* moe_ffn(): fused routed-expert FFN (ABI 1.2) */
    VT_CAP_GRAPH = 32,                   /* graph_*() and the device-position ops (ABI 1.2) */
    VT_CAP_OP_MUL_ACT = 33,              /* mul_act(): op(a) · b (ABI 1.3) */
    VT_CAP_OP_ADD_RMS_NORM = 34,         /* add_rms_norm(): residual add, then rms_norm (ABI 1.3) */
    VT_CAP_OP_DELTA_NET_GATES = 35,      /* delta_net_gates(): beta and g of §5.7.1 (ABI 1.3) */
    VT_CAP_COPY_H2D_ASYNC = 36,          /* copy_h2d_async(): queued H2D copy (ABI 1.4) */
    VT_CAP_COPY_H2D_AHEAD = 37,          /* ahead_fork/copy_h2d_ahead/ahead_join (ABI 1.5) */
    VT_CAP_FIXED_COUNT = 38, /* ids 0 .. VT_CAP_FIXED_COUNT-1 (unused ids are skipped) */
    /* weight-typed ops: base + ggml type id (vt/types.h), 0 <= id < VT_TYPE_SLOTS */
    VT_CAP_MAT_MUL_BASE = 64,
    VT_CAP_GET_ROWS_BASE = 64 + VT_TYPE_SLOTS,
    VT_CAP_ID_LIMIT = 64 + 2 * VT_TYPE_SLOTS,
    /* ABI 1.9: weight-typed ops of type ids >= VT_TYPE_SLOTS (any size):
     * mat_mul of type t is VT_CAP_TYPE_EXT_BASE + 2 * (t - VT_TYPE_SLOTS),
     * get_rows the id after it; their functions are mat_mul_ext/get_rows_ext */
    VT_CAP_TYPE_EXT_BASE = 1024
} vt_cap_id;

#define VT_CAP_MAT_MUL(type)                                                                   \
    ((uint32_t)(type) < VT_TYPE_SLOTS                                                          \
         ? (uint32_t)VT_CAP_MAT_MUL_BASE + (uint32_t)(type)                                    \
         : (uint32_t)VT_CAP_TYPE_EXT_BASE + 2u * ((uint32_t)(type) - VT_TYPE_SLOTS))
#define VT_CAP_GET_ROWS(type)                                                                  \
    ((uint32_t)(type) < VT_TYPE_SLOTS                                                          \
         ? (uint32_t)VT_CAP_GET_ROWS_BASE + (uint32_t)(type)                                   \
         : (uint32_t)VT_CAP_TYPE_EXT_BASE + 2u * ((uint32_t)(type) - VT_TYPE_SLOTS) + 1u)
/* The type a weight-typed capability id stands for, and whether it is get_rows;
 * 0 when id is not weight-typed. */
static inline int vt_cap_weight_type(uint32_t id, uint32_t *type, int *get_rows)
{
    if (id >= VT_CAP_MAT_MUL_BASE && id < VT_CAP_ID_LIMIT) {
        *get_rows = id >= VT_CAP_GET_ROWS_BASE;
        *type = id - (*get_rows ? VT_CAP_GET_ROWS_BASE : VT_CAP_MAT_MUL_BASE);
        return 1;
    }
    if (id >= VT_CAP_TYPE_EXT_BASE && id - VT_CAP_TYPE_EXT_BASE < 0x7fff0000u) {
        *get_rows = (int)((id - VT_CAP_TYPE_EXT_BASE) & 1u);
        *type = VT_TYPE_SLOTS + (id - VT_CAP_TYPE_EXT_BASE) / 2u;
        return 1;
    }
    return 0;
}

typedef enum vt_cap_state { VT_CAP_ABSENT = 0, VT_CAP_PRESENT = 1 } vt_cap_state;

/* One declaration. A backend lists one entry per capability id its ABI minor knows. */
typedef struct vt_capability {
    uint32_t id;        /* vt_cap_id (or VT_CAP_MAT_MUL(t) / VT_CAP_GET_ROWS(t)) */
    uint32_t state;     /* vt_cap_state */
    const char *reason; /* ABSENT: one line saying why (required); PRESENT: NULL or a note */
} vt_capability;

/* ---- objects ---- */

typedef struct vt_backend_ctx vt_backend_ctx; /* defined by each backend */
typedef struct vt_graph vt_graph;             /* a recorded op sequence (ABI 1.2), backend-defined */

/* What init() gets; owned by the caller, read during init() only (host: the
 * core's table, valid for the life of the process; keep the pointer). */
typedef struct vt_backend_params {
    uint32_t struct_size;
    int32_t device;      /* device index, 0-based, < device_count() */
    int32_t n_threads;   /* CPU worker threads; <= 0: one per online core */
    const char *kernels; /* "auto" (NULL) picks by CPU/GPU features; "scalar" forces the
                            plain reference kernels (float32 throughout) */
    const vt_host_api *host;
} vt_backend_params;

/* A 2-D weight matrix [n_out rows][n_in cols] of `type`, rows packed (gguf.md §3):
 * y = W x computes y[o] = dot(row o, x). An expert slice of a stacked tensor is
 * such a matrix too. */
typedef struct vt_weight {
    uint32_t type;      /* ggml type id */
    int64_t n_in;       /* ne[0]: elements per row (multiple of the block size) */
    int64_t n_out;      /* rows */
    uint64_t row_bytes; /* vt_type_row_bytes(type, n_in) */
    const void *data;   /* device memory, n_out * row_bytes bytes */
    const char *name;   /* tensor name, for error messages */
} vt_weight;

typedef enum vt_unary_op {
    VT_UNARY_SILU = 0,     /* x / (1 + e^-x) */
    VT_UNARY_SIGMOID = 1,  /* 1 / (1 + e^-x) */
    VT_UNARY_SOFTPLUS = 2, /* x > 20 ? x : log(1 + e^x)  (qwen35moe.md §5.1) */
    VT_UNARY_GELU_TANH = 3,/* 0.5x(1 + tanh(u)), u = sqrt(2/pi)(x + 0.044715x^3); computed as
                              x / (1 + e^(-2u)), which is the same value without the
                              cancellation of 1 + tanh(u) for large negative x */
    VT_UNARY_EXP = 4,
    VT_UNARY_TANH = 5
} vt_unary_op;

typedef enum vt_binary_op {
    VT_BINARY_ADD = 0,
    VT_BINARY_MUL = 1
} vt_binary_op;

/* Activation of the routed experts: y = W_down (act(W_gate x) ⊙ (W_up x)). */
typedef enum vt_moe_act {
    VT_MOE_ACT_SILU = 0,      /* VT_UNARY_SILU (Qwen3.5, qwen35moe.md §5.8) */
    VT_MOE_ACT_GELU_TANH = 1  /* VT_UNARY_GELU_TANH (Gemma 4, gemma4.md pitfall 16) */
} vt_moe_act;

/*
 * Arguments of moe_ffn (ABI 1.2): the routed experts of a MoE layer for all
 * tokens of a batch at once (qwen35moe.md §5.8 steps 4-5, gemma4.md §5.3).
 * Owned by the caller, read during the call only.
 *
 * For every token t < n_tokens and j < k with e = ids[t][j] and
 * expert_begin <= e < expert_end (pairs outside the range are skipped, so a
 * streamed layer runs one call per group of resident experts):
 *   g = act(W_gate[e] · x[t]) ⊙ (W_up[e] · x[t])      [n_ff]
 *   y = W_down[e] · g                                  [n_embd]
 *   out[t] += weights[t][j] · y
 * The additions into out[t] happen one expert at a time in increasing expert
 * id, each rounded to float32, so splitting the expert range over several
 * calls gives the same bits as one call. A token that picks the same expert
 * twice adds it twice, in order of j. g and y are float32 products with
 * float32 (or wider) accumulation and the activation of vt_unary_op: the
 * composition of mat_mul, unary and binary up to summation order; which
 * kernels run may depend on n_tokens, never on how many pairs fall in the
 * range (so the bits do not either).
 *
 * Expert weights are reached through per-layer tables of device pointers,
 * one entry per expert: W_gate[e] = w_gate[e] ([n_ff][n_embd] rows of
 * type_gate, vt_weight layout), W_up[e] = w_up[e] (the same shape, type_up),
 * W_down[e] = w_down[e] ([n_embd][n_ff], type_down). A fused gate_up stack is
 * expressed as w_up[e] = w_gate[e] + n_ff rows. Only entries of experts some
 * pair in the range selects are read; the tables themselves are device
 * memory (backend-cpu: host memory), so a resident stack's table is written
 * once and a streamed layer rewrites the entries of the slots it acquired.
 */
typedef struct vt_moe_ffn_args {
    uint32_t struct_size;          /* sizeof(vt_moe_ffn_args) as the caller compiled it */
    uint32_t act;                  /* vt_moe_act */
    int64_t n_tokens;              /* rows of x, ids, weights and out (>= 0) */
    int64_t k;                     /* experts per token (top-k, >= 1) */
    int64_t n_embd;                /* columns of x and out; n_in of gate/up, n_out of down */
    int64_t n_ff;                  /* expert hidden size; n_out of gate/up, n_in of down */
    int64_t n_expert;              /* entries of each pointer table */
    int64_t expert_begin, expert_end; /* 0 <= begin <= end <= n_expert */
    const float *x;                /* device [n_tokens][n_embd], row stride ldx */
    int64_t ldx;
    const int32_t *ids;            /* device [n_tokens][k] expert ids */
    const float *weights;          /* device [n_tokens][k] */
    float *out;                    /* device [n_tokens][n_embd], row stride ldo; may not alias x */
    int64_t ldo;
    uint32_t type_gate, type_up, type_down; /* ggml type ids */
    const void *const *w_gate;     /* device [n_expert] device pointers */
    const void *const *w_up;
    const void *const *w_down;
    void *scratch;                 /* device, scratch_bytes >= vt_moe_ffn_scratch_bytes() */
    size_t scratch_bytes;
    const char *name;              /* for messages: "blk.3.ffn_*_exps" */
} vt_moe_ffn_args;

/* Scratch moe_ffn may use for a call of these sizes (bytes, an upper bound
 * every backend stays within): per (token, expert) pair two rows of n_ff and
 * two of n_embd floats, four int32, plus per expert two int32, and 4 KiB of
 * alignment slack. */
static inline size_t vt_moe_ffn_scratch_bytes(int64_t n_tokens, int64_t k, int64_t n_embd,
                                              int64_t n_ff, int64_t n_expert)
{
    size_t pairs = (size_t)n_tokens * (size_t)k;
    return pairs * (size_t)(2 * n_ff + 2 * n_embd) * sizeof(float) +
           pairs * 4 * sizeof(int32_t) + (size_t)(n_expert + 1) * 2 * sizeof(int32_t) + 4096;
}

/* ---- the table ---- */

/* One copy of copy_h2d_ahead (ABI 1.5): bytes of host memory src to device
 * memory dst. */
typedef struct vt_h2d_copy {
    void *dst;
    const void *src;
    size_t bytes;
} vt_h2d_copy;

typedef struct vt_backend_api {
    uint32_t struct_size;

    /* Capability declarations: n_caps entries. */
    const vt_capability *caps;
    uint32_t n_caps;

    /* -- required -- */
    /* Number of devices this backend can drive now (0 when none; never an error).
     * Needs no context; callable any time after load, from any thread. */
    int (*device_count)(void);
    /* Create a context on params->device. *out is owned by the caller and given
     * back with shutdown(). Errors: VT_ERR_INVALID_ARG (device out of range),
     * VT_ERR_OUT_OF_MEMORY, or the vendor runtime's failure with its message. */
    vt_status (*init)(const vt_backend_params *params, vt_backend_ctx **out);
    /* Release the context (free what was allocated through it first). NULL allowed. */
    void (*shutdown)(vt_backend_ctx *ctx);
    /* Allocate `bytes` of device memory (aligned to 64 bytes); `what` names the
     * allocation in the error message ("KV cache blk.3", "scratch"). Contents
     * are undefined (memset_zero for zeros). Errors: VT_ERR_OUT_OF_MEMORY naming
     * `what` and the bytes. The caller frees it with free(). */
    vt_status (*alloc)(vt_backend_ctx *ctx, size_t bytes, const char *what, void **out);
    /* Free memory from alloc() of the same context; NULL allowed. */
    void (*free)(vt_backend_ctx *ctx, void *ptr);
    /* Copies of `bytes` bytes: host -> device, device -> host, device -> device
     * (same context; regions must not overlap). Ordered with the ops of the
     * context; copy_d2h returns once the bytes are in host memory. */
    vt_status (*copy_h2d)(vt_backend_ctx *ctx, void *dst, const void *src, size_t bytes);
    vt_status (*copy_d2h)(vt_backend_ctx *ctx, void *dst, const void *src, size_t bytes);
    vt_status (*copy_d2d)(vt_backend_ctx *ctx, void *dst, const void *src, size_t bytes);
    /* Set `bytes` bytes of device memory to zero. */
    vt_status (*memset_zero)(vt_backend_ctx *ctx, void *dst, size_t bytes);
    /* Wait for every op and copy issued on the context; an asynchronous failure
     * of one of them is reported here. */
    vt_status (*synchronize)(vt_backend_ctx *ctx);

    /* -- capabilities: memory and platform -- */
    /* Live free and total bytes of the device (VT_CAP_MEMORY_PROBE). */
    vt_status (*memory_probe)(vt_backend_ctx *ctx, uint64_t *free_bytes, uint64_t *total_bytes);
    /* Page-locked host memory of `bytes` bytes for fast copies
     * (VT_CAP_PINNED_HOST_ALLOC); reserve it first with host->pinned_reserve.
     * Freed with host_free_pinned (NULL allowed). */
    vt_status (*host_alloc_pinned)(vt_backend_ctx *ctx, size_t bytes, const char *what, void **out);
    void (*host_free_pinned)(vt_backend_ctx *ctx, void *ptr);
    /* Copy `bytes` bytes from src (device memory of src_ctx) to dst (device
     * memory of dst_ctx), two devices of this backend (VT_CAP_PEER_COPY). */
    vt_status (*copy_peer)(vt_backend_ctx *dst_ctx, void *dst, vt_backend_ctx *src_ctx,
                           const void *src, size_t bytes);

    /* -- capabilities: weight-typed ops, indexed by ggml type id -- */
    /* y[T, n_out] (row stride ldy) = x[T, n_in] (row stride ldx) · Wᵀ. (gguf.md §3) */
    vt_status (*mat_mul[VT_TYPE_SLOTS])(vt_backend_ctx *ctx, const vt_weight *w, const float *x,
                                        int64_t ldx, float *y, int64_t ldy, int64_t n_tokens);
    /* out[i, n_in] = dequantised row ids[i] of w, for i < n (ids: host). (embedding lookup) */
    vt_status (*get_rows[VT_TYPE_SLOTS])(vt_backend_ctx *ctx, const vt_weight *w,
                                         const int32_t *ids, int64_t n, float *out);

    /* -- capabilities: ops -- */
    /* y[r, :n] = x[r, :n] / sqrt(mean(x[r]^2) + eps) * w[:n]  (w NULL: no weight),
     * r < n_rows; sum of squares accumulated in double. x == y (same ld) allowed.
     * (qwen35moe.md §5.1) */
    vt_status (*rms_norm)(vt_backend_ctx *ctx, const float *x, int64_t ldx, const float *w,
                          float *y, int64_t ldy, int64_t n_rows, int64_t n, float eps);
    /* y[r, :n] = x[r, :n] / max(||x[r]||_2, eps). x == y (same ld) allowed.
     * (qwen35moe.md §5.1, llama.cpp form) */
    vt_status (*l2_norm)(vt_backend_ctx *ctx, const float *x, int64_t ldx, float *y,
                         int64_t ldy, int64_t n_rows, int64_t n, float eps);
    /* In-place NeoX RoPE on x viewed as [n_tokens][n_head][head_dim] with token stride
     * ld_token and head stride ld_head (elements). Token t has position pos[t] (host).
     * Pairs (i, i + n_rot/2) for i < n_rot/2 rotate by angle pos·base^(−2i/n_rot)
     * (divided by freq_factors[i] when freq_factors, device, is not NULL);
     * dims n_rot..head_dim-1 untouched. (qwen35moe.md §5.5, gemma4.md) */
    vt_status (*rope_neox)(vt_backend_ctx *ctx, float *x, int64_t ld_token, int64_t ld_head,
                           int64_t n_tokens, int64_t n_head, int64_t n_rot, const int32_t *pos,
                           float base, const float *freq_factors);
    /*
     * Causal GQA attention over a KV cache.
     * q: [n_tokens][n_head][head_dim] (token stride ldq, head stride ldq_head);
     * k_cache, v_cache: [n_kv][n_head_kv * head_dim] contiguous (positions 0..n_kv-1
     * of this sequence, the current tokens already appended);
     * query t sits at position pos0 + t and sees cache positions s with
     * s <= pos0 + t and (window == 0 or s > pos0 + t − window).
     * Query head j uses KV head j / (n_head / n_head_kv) (grouped).
     * score = scale · q·k, then (softcap > 0) softcap·tanh(score/softcap);
     * softmax in float32 (max-subtracted); out: [n_tokens][n_head * head_dim] (ldo).
     * (qwen35moe.md §5.4 step 6)
     */
    vt_status (*attention)(vt_backend_ctx *ctx, const float *q, int64_t ldq, int64_t ldq_head,
                           const float *k_cache, const float *v_cache, float *out, int64_t ldo,
                           int64_t n_tokens, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                           int64_t pos0, int64_t n_kv, int64_t window, float scale, float softcap);
    /*
     * Causal depthwise conv with carried state, then SiLU (qwen35moe.md §5.7.2).
     * x: [n_tokens][n_ch] (ldx); w: [n_ch][d_conv] contiguous, tap 0 = oldest;
     * state: [d_conv-1][n_ch] raw inputs of the previous tokens, oldest first,
     * updated in place to the last d_conv-1 inputs; y: [n_tokens][n_ch] (ldy).
     * y must not alias x (later tokens read earlier inputs).
     */
    vt_status (*ssm_conv)(vt_backend_ctx *ctx, const float *x, int64_t ldx, const float *w,
                          float *state, float *y, int64_t ldy, int64_t n_tokens, int64_t n_ch,
                          int64_t d_conv);
    /*
     * Gated delta rule, recurrent form (qwen35moe.md §5.7.4), per value head h
     * with key head h % n_k (tiled order, §5.7.3):
     *   S ← exp(g)·S; m = Sᵀk; δ = β(v − m); S ← S + k ⊗ δ; o = Sᵀq
     * q, k: [n_tokens][n_k * d_k] (ldqk; already L2-normed, q scaled);
     * v: [n_tokens][n_v * d_v] (ldv); g, beta: [n_tokens][n_v] contiguous;
     * state: [n_v][d_k][d_v] float32 (S[i][j], i key dim), updated in place;
     * out: [n_tokens][n_v * d_v] (ldo).
     */
    vt_status (*gated_delta_net)(vt_backend_ctx *ctx, const float *q, const float *k, int64_t ldqk,
                                 const float *v, int64_t ldv, const float *g, const float *beta,
                                 float *state, float *out, int64_t ldo, int64_t n_tokens,
                                 int64_t n_k, int64_t n_v, int64_t d_k, int64_t d_v);
    /* y[i] = op(x[i]) for i < n (x == y allowed). */
    vt_status (*unary)(vt_backend_ctx *ctx, vt_unary_op op, const float *x, float *y, int64_t n);
    /* y[i] = a[i] op b[i % nb] for i < n (nb divides n; y may alias a). */
    vt_status (*binary)(vt_backend_ctx *ctx, vt_binary_op op, const float *a, const float *b,
                        float *y, int64_t n, int64_t nb);
    /* y[i] = s · x[i] (x == y allowed). */
    vt_status (*scale)(vt_backend_ctx *ctx, const float *x, float *y, int64_t n, float s);
    /* y[r, c] = x[r, c] · s[r]; s device, [n_rows]; rows contiguous of n_cols (x == y allowed). */
    vt_status (*mul_rows)(vt_backend_ctx *ctx, const float *x, const float *s, float *y,
                          int64_t n_rows, int64_t n_cols);
    /* dst[r, :n_cols] = src[r, :n_cols] with row strides (elements). */
    vt_status (*copy_2d)(vt_backend_ctx *ctx, const float *src, int64_t ld_src, float *dst,
                         int64_t ld_dst, int64_t n_rows, int64_t n_cols);
    /* dst[i, :] = src[idx[i], :] for i < n (idx: host). */
    vt_status (*gather_rows)(vt_backend_ctx *ctx, const float *src, int64_t ld_src,
                             const int32_t *idx, int64_t n, int64_t n_cols, float *dst,
                             int64_t ld_dst);
    /* dst[idx[i], :] += wt[i] · src[i, :] for i < n (idx, wt: host; wt NULL = 1).
     * idx entries may repeat; additions happen in order of i. */
    vt_status (*scatter_add)(vt_backend_ctx *ctx, const float *src, int64_t ld_src,
                             const int32_t *idx, const float *wt, int64_t n, int64_t n_cols,
                             float *dst, int64_t ld_dst);
    /*
     * MoE routing (qwen35moe.md §5.8 steps 1-3): per row r of logits [n_rows][n]:
     * p = softmax(logits[r]) over all n, pick the k largest p (ties: lower index),
     * write ids[r][:k] (host) and weights[r][:k] (host) = p / max(sum of picked p,
     * 6.103515625e-5) when renorm, else p. probs (host, may be NULL) gets p.
     */
    vt_status (*softmax_topk)(vt_backend_ctx *ctx, const float *logits, int64_t n_rows, int64_t n,
                              int64_t k, int renorm, int32_t *ids, float *weights, float *probs);

    /* ---- ABI 1.1 (read only when the plugin's abi_minor >= 1) ---- */
    /* Capability VT_CAP_DEVICE_NAME: write device `device`'s marketing name
     * ("NVIDIA H200", "AMD Instinct MI300X", "host CPU (x86-64, AVX2)") into buf
     * (cap bytes, NUL-terminated). Needs no context; valid for
     * 0 <= device < device_count(). */
    vt_status (*device_name)(int device, char *buf, size_t cap);

    /* ---- ABI 1.2 (read only when the plugin's abi_minor >= 2) ---- */
    /*
     * Capability VT_CAP_OP_MOE_ROUTE: softmax_topk's routing with its results in
     * device memory, so that routing needs no host round trip. Per row r of
     * logits [n_rows][n] (device, contiguous): p = softmax(logits[r]) over all
     * n, the k largest p (ties: lower index) in decreasing order of p go to
     * ids[r][:k] (device int32) and weights[r][:k] (device float32) =
     * p / max(sum of picked p, 6.103515625e-5) when renorm, else p; then, when
     * expert_scale (device [n]) is not NULL, weights[r][j] *= expert_scale[ids[r][j]]
     * (Gemma 4's per-expert scale, after the renormalisation). The values are
     * softmax_topk's (vt_util_softmax_topk_row) for the same logits, but for
     * the order in which a backend adds the softmax denominator (double): p
     * may differ in its last float bit, and so a near-tie may pick the other
     * expert.
     */
    vt_status (*moe_route)(vt_backend_ctx *ctx, const float *logits, int64_t n_rows, int64_t n,
                           int64_t k, int renorm, const float *expert_scale, int32_t *ids,
                           float *weights);
    /* Capability VT_CAP_OP_MOE_FFN: the routed-expert FFN of vt_moe_ffn_args,
     * for every weight type whose VT_CAP_MAT_MUL is PRESENT, with gate and up
     * of one type and n_embd, n_ff multiples of 32 (what every backend
     * handles; a model with other shapes composes the per-expert ops).
     * Errors: VT_ERR_INVALID_ARG (shapes, ranges, NULL pointers, scratch too
     * small), VT_ERR_CAPABILITY (a weight type without kernels),
     * VT_ERR_UNSUPPORTED (gate and up of two types on a backend that needs
     * one). */
    vt_status (*moe_ffn)(vt_backend_ctx *ctx, const vt_moe_ffn_args *args);

    /*
     * Capability VT_CAP_GRAPH: record a sequence of ops once and replay it
     * (a decode step: the same ops on the same buffers every token).
     * graph_begin: the ops issued on ctx until graph_end are recorded, not
     * run. Recorded ops read their device buffers at replay; their scalar
     * arguments and pointers are those of the recording. Ops with host array
     * arguments (get_rows ids, rope_neox pos, gather/scatter idx, softmax_topk),
     * copies and synchronize are refused while recording (VT_ERR_UNSUPPORTED
     * naming the op); positions come from device memory through the _dpos
     * ops below. An op that fails while recording is not recorded: the
     * caller checks every op's status and, on a failure, ends the recording
     * and frees what graph_end returns instead of replaying it. Positions
     * read from device memory must be in range for the buffers the op was
     * given (they are not checked on the host).
     * graph_end: stop recording; *out is the graph, the caller's until
     * graph_free. graph_launch: run the graph once, ordered with the other ops
     * of ctx. graph_free: NULL allowed.
     */
    vt_status (*graph_begin)(vt_backend_ctx *ctx);
    vt_status (*graph_end)(vt_backend_ctx *ctx, vt_graph **out);
    vt_status (*graph_launch)(vt_backend_ctx *ctx, vt_graph *graph);
    void (*graph_free)(vt_backend_ctx *ctx, vt_graph *graph);
    /* rope_neox with pos in device memory ([n_tokens] int32). */
    vt_status (*rope_neox_dpos)(vt_backend_ctx *ctx, float *x, int64_t ld_token, int64_t ld_head,
                                int64_t n_tokens, int64_t n_head, int64_t n_rot,
                                const int32_t *pos, float base, const float *freq_factors);
    /* attention with pos0 read from device memory (one int32) and n_kv =
     * pos0 + n_tokens, at most n_kv_max (the cache's rows). */
    vt_status (*attention_dpos)(vt_backend_ctx *ctx, const float *q, int64_t ldq,
                                int64_t ldq_head, const float *k_cache, const float *v_cache,
                                float *out, int64_t ldo, int64_t n_tokens, int64_t n_head,
                                int64_t n_head_kv, int64_t head_dim, const int32_t *pos0,
                                int64_t n_kv_max, int64_t window, float scale, float softcap);
    /* dst[(row0 + r), :n_cols] = src[r, :n_cols] for r < n_rows, row0 read
     * from device memory (one int32): appending K/V rows to a cache. */
    vt_status (*copy_rows_dpos)(vt_backend_ctx *ctx, const float *src, int64_t ld_src, float *dst,
                                int64_t ld_dst, int64_t n_rows, int64_t n_cols,
                                const int32_t *row0);

    /* ---- ABI 1.3 (read only when the plugin's abi_minor >= 3) ---- */
    /*
     * Capability VT_CAP_OP_MUL_ACT: y[r, c] = op(a[r, c]) · b[r, c] for
     * r < n_rows, c < n_cols, rows strided by lda, ldb, ldy (elements). Each
     * value is unary()'s op(a) rounded to float, then one float product: the
     * bits of unary() into a temporary and binary(MUL) with b. y may alias
     * a or b when it has the same stride (each element is read before it is
     * written). SwiGLU / GeGLU (qwen35moe.md §5.8, gemma4.md §5.3), the
     * sigmoid output gate of gated attention (qwen35moe.md §5.4) and the
     * SiLU gate of the DeltaNet output norm (§5.7.5).
     */
    vt_status (*mul_act)(vt_backend_ctx *ctx, vt_unary_op op, const float *a, int64_t lda,
                         const float *b, int64_t ldb, float *y, int64_t ldy, int64_t n_rows,
                         int64_t n_cols);
    /*
     * Capability VT_CAP_OP_ADD_RMS_NORM: the residual add and the RMSNorm
     * after it, per row r < n_rows:
     *   x[r, :n] <- x[r, :n] + s_r · a[r, :n],  s_r = sigmoid(gate[r]) (gate NULL: 1,
     *               no product);
     *   y[r, :n] = rms_norm(x[r, :n]) · w      (y NULL: only the addition).
     * gate is device [n_rows] (raw logits, qwen35moe.md §5.8's shared-expert
     * gate); w may be NULL as in rms_norm. Rounding: the bits of
     * unary(SIGMOID) on gate, mul_rows of a, binary(ADD) into x, then
     * rms_norm of the new x (sum of squares in double, its order the
     * backend's). x, a and y are [n_rows][n] with row strides ldx, lda, ldy;
     * y must not overlap x or a. (qwen35moe.md §5.3, pitfall 16)
     */
    vt_status (*add_rms_norm)(vt_backend_ctx *ctx, float *x, int64_t ldx, const float *a,
                              int64_t lda, const float *gate, const float *w, float *y,
                              int64_t ldy, int64_t n_rows, int64_t n, float eps);
    /*
     * Capability VT_CAP_OP_DELTA_NET_GATES: the gates of the gated delta
     * rule from the raw projections (qwen35moe.md §5.7.1), for t < n_tokens,
     * h < n_v:
     *   beta[t][h] = sigmoid(b[t][h]),
     *   g[t][h]    = ssm_a[h] · softplus(alpha[t][h] + dt_bias[h]).
     * b and alpha are [n_tokens][n_v] with row strides ldb, lda; dt_bias and
     * ssm_a device [n_v]; beta and g contiguous [n_tokens][n_v]; beta may be
     * b and g may be alpha when their stride is n_v (in place), no other
     * overlap. Rounding: the bits of unary(SIGMOID), binary(ADD),
     * unary(SOFTPLUS) and binary(MUL) in that order.
     */
    vt_status (*delta_net_gates)(vt_backend_ctx *ctx, const float *b, int64_t ldb,
                                 const float *alpha, int64_t lda, const float *dt_bias,
                                 const float *ssm_a, float *beta, float *g, int64_t n_tokens,
                                 int64_t n_v);

    /* ---- ABI 1.4 (read only when the plugin's abi_minor >= 4) ---- */
    /*
     * Capability VT_CAP_COPY_H2D_ASYNC: copy `bytes` bytes of host memory src
     * to device memory dst, queued in order with the context's ops and
     * copies: every op issued after it reads the new bytes, and it writes
     * dst only after every op issued before it has finished reading dst. It
     * may return before the copy is done: src must stay allocated and
     * unchanged until synchronize() (or a copy_d2h, which waits for the
     * queue) has returned. With page-locked src (host_alloc_pinned) the copy
     * overlaps the host; with pageable src it may complete before returning.
     * Refused while a graph records (as copy_h2d). Errors: VT_ERR_INVALID_ARG
     * (NULL pointer with bytes > 0); a failure of the copy itself may be
     * reported by the next synchronize().
     */
    vt_status (*copy_h2d_async)(vt_backend_ctx *ctx, void *dst, const void *src, size_t bytes);

    /* ---- ABI 1.5 (read only when the plugin's abi_minor >= 5) ---- */
    /*
     * Capability VT_CAP_COPY_H2D_AHEAD (all three or none): host-to-device
     * copies on a second queue that runs beside the context's ops.
     *   ahead_fork(ctx)      copies issued by copy_h2d_ahead after this call
     *                        start only once every op and copy issued on the
     *                        context before it has finished (so they may
     *                        overwrite memory those ops read);
     *   copy_h2d_ahead(...)  queue n copies (host array, read during the
     *                        call) on the second queue and return; they run
     *                        concurrently with the ops issued after the
     *                        fork, which must neither read nor write their
     *                        dst before the next ahead_join;
     *   ahead_join(ctx)      every op and copy issued on the context after
     *                        this call starts only once every copy_h2d_ahead
     *                        issued before it has finished.
     * synchronize() waits for the second queue too. src must stay allocated
     * and unchanged until the join's ops or synchronize() have passed.
     * Refused while a graph records. Errors: VT_ERR_INVALID_ARG (NULL
     * pointer with bytes > 0); a failure of a copy itself may be reported by
     * the next synchronize(). The host never waits in any of the three.
     * One call for many copies lets a backend queue them as it likes.
     */
    vt_status (*ahead_fork)(vt_backend_ctx *ctx);
    vt_status (*copy_h2d_ahead)(vt_backend_ctx *ctx, const vt_h2d_copy *copies, uint32_t n);
    vt_status (*ahead_join)(vt_backend_ctx *ctx);

    /* ---- ABI 1.9 (read only when the plugin's abi_minor >= 9) ---- */
    /*
     * The weight-typed ops of the type ids that do not fit mat_mul[] and
     * get_rows[] (w->type >= VT_TYPE_SLOTS: IQ1_XS, IQ1_XXS, IQ1_XXXS): the
     * same contracts, the type read from w->type. Set when the backend
     * declares VT_CAP_MAT_MUL(t) / VT_CAP_GET_ROWS(t) PRESENT for at least one
     * such t; a call with a type it declares ABSENT fails with
     * VT_ERR_UNSUPPORTED. Callers look the function up through
     * vt_backend_mat_mul_fn / vt_backend_get_rows_fn below.
     */
    vt_status (*mat_mul_ext)(vt_backend_ctx *ctx, const vt_weight *w, const float *x,
                             int64_t ldx, float *y, int64_t ldy, int64_t n_tokens);
    vt_status (*get_rows_ext)(vt_backend_ctx *ctx, const vt_weight *w, const int32_t *ids,
                              int64_t n, float *out);
} vt_backend_api;

typedef vt_status (*vt_mat_mul_fn)(vt_backend_ctx *ctx, const vt_weight *w, const float *x,
                                   int64_t ldx, float *y, int64_t ldy, int64_t n_tokens);
typedef vt_status (*vt_get_rows_fn)(vt_backend_ctx *ctx, const vt_weight *w, const int32_t *ids,
                                    int64_t n, float *out);

/* 1 when api's capability list declares id PRESENT. A plugin built for an
 * older minor never lists a newer id, so this is safe on any table. */
static inline int vt_backend_declares(const vt_backend_api *api, uint32_t id)
{
    for (uint32_t i = 0; i < api->n_caps; i++)
        if (api->caps[i].id == id) return api->caps[i].state == VT_CAP_PRESENT;
    return 0;
}

/* mat_mul / get_rows of weight type t on api, or NULL where the backend has
 * none (an unknown id, a type it declares ABSENT, a plugin older than 1.9 for
 * t >= VT_TYPE_SLOTS). */
static inline vt_mat_mul_fn vt_backend_mat_mul_fn(const vt_backend_api *api, uint32_t t)
{
    if (t < VT_TYPE_SLOTS) return api->mat_mul[t];
    if (api->struct_size < offsetof(vt_backend_api, get_rows_ext) + sizeof(void *)) return NULL;
    return vt_backend_declares(api, VT_CAP_MAT_MUL(t)) ? api->mat_mul_ext : NULL;
}
static inline vt_get_rows_fn vt_backend_get_rows_fn(const vt_backend_api *api, uint32_t t)
{
    if (t < VT_TYPE_SLOTS) return api->get_rows[t];
    if (api->struct_size < offsetof(vt_backend_api, get_rows_ext) + sizeof(void *)) return NULL;
    return vt_backend_declares(api, VT_CAP_GET_ROWS(t)) ? api->get_rows_ext : NULL;
}

/* A backend instance as the core and models see it. Owned by the core: valid
 * from a model's load() until after its free(). */
typedef struct vt_backend {
    const vt_backend_api *api; /* the plugin's table */
    vt_backend_ctx *ctx;       /* pass to every call of api */
    const char *name; /* plugin name, "cpu" */
} vt_backend;

#ifdef __cplusplus
}
#endif
#endif
