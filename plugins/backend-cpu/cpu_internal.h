/*
 * cpu_internal.h - internals of backend-cpu shared by its source files and by
 * the backend's own tests (tests/test_cpu_*.c, tests/test_quant.c). Not part
 * of the plugin ABI: nothing here crosses the dlopen boundary.
 *
 * Structure of the backend:
 *  - kernel sets (vt_cpu_kernels): "scalar" (the float32 reference,
 *    cpu_kernels_scalar.c), "avx2" and "avx512" (cpu_kernels_avx2.c,
 *    cpu_kernels_avx512.c, both instantiating the width-generic body
 *    cpu_simd_body.h) and "avx2w16" (the 16-lane body emulated with pairs of
 *    AVX2 registers; a test instantiation that lets a machine without AVX-512
 *    run the AVX-512 body's lane logic). A kernel works on one slice of an op
 *    (a block of rows, one attention head, one delta-net head) on the calling
 *    thread.
 *  - the thread pool (cpu_pool.c) that runs an op's slices on every core.
 *  - the ops (cpu_ops.c): argument checks, splitting into slices, dispatch.
 *  - the plugin table (cpu_backend.c): memory, capabilities, init/shutdown.
 */
#ifndef VT_CPU_INTERNAL_H
#define VT_CPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "vt/backend.h"

/* ---- half-precision conversions (gguf.md §6.1), exact ---- */

static inline float vt_cpu_f16_to_f32(uint16_t h)
{
    uint32_t s = (uint32_t)(h >> 15) << 31;
    uint32_t e = (h >> 10) & 31u;
    uint32_t m = h & 1023u;
    uint32_t bits;
    if (e == 0) {
        if (m == 0) {
            bits = s;
        } else { /* subnormal: M · 2^-24, normalised for binary32 */
            int sh = 0;
            while (!(m & 1024u)) {
                m <<= 1;
                sh++;
            }
            bits = s | ((uint32_t)(127 - 15 + 1 - sh) << 23) | ((m & 1023u) << 13);
        }
    } else if (e == 31) {
        bits = s | 0x7f800000u | (m << 13); /* inf, NaN keeps its payload */
    } else {
        bits = s | ((e + 127 - 15) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline float vt_cpu_bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline uint16_t vt_cpu_rd16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

/* 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K super-block from
 * its 12 packed bytes q (gguf.md §6.9). */
static inline void vt_cpu_k4_scale_min(const uint8_t *q, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0F) | (q[j - 4] >> 6) << 4;
        *m = (q[j + 4] >> 4) | (q[j] >> 6) << 4;
    }
}

/* MXFP4's E8M0 scale halved, 2^(e - 128) as float bits (e = 0, 1 give
 * subnormals), matching the E2M1 values doubled to integers (gguf.md §6.16). */
static inline float vt_cpu_e8m0_half(uint8_t e)
{
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Bytes of a Q8_0 block (gguf.md §6.2): f16 d, int8 qs[32]. */
#define VT_CPU_Q8_0_BYTES 34

/*
 * Dequantise n elements (one row or a run of whole blocks) of `type` from src
 * into dst (n floats), exactly: the scalar reference of gguf.md §6 (§6.1 F32,
 * F16, BF16; §6.2-6.6 Q8_0, Q4_0, Q4_1, Q5_0, Q5_1; §6.7-6.12 Q2_K, Q3_K,
 * Q4_K, Q5_K, Q6_K; §6.14-6.15 IQ4_NL, IQ4_XS; §6.16 MXFP4). src holds
 * n / block_size blocks of vt_type_size(type) bytes. Bit-exact against the
 * quant-zoo fixture (tests/test_quant_zoo.c).
 * Returns VT_ERR_UNSUPPORTED for any other type, VT_ERR_INVALID_ARG when n < 0,
 * n is not a multiple of the type's block size, or src/dst is NULL (n > 0);
 * dst is untouched on error. Sets no error message (hot path): callers name
 * the tensor. Thread-safe.
 */
vt_status vt_cpu_dequant_row(uint32_t type, const void *src, int64_t n, float *dst);
/* vt_cpu_dequant_row, bit for bit, with AVX2 for Q4_K, Q5_K and Q6_K
 * where the CPU has it (cpu_dequant_avx2.c); n a whole number of blocks, src
 * and dst valid (no checks: the float path's panels). */
void vt_cpu_dequant_row_fast(uint32_t type, const void *src, int64_t n, float *dst);
/* One block of a block type at b into y (block_size values). */
typedef void (*vt_cpu_deq_block_fn)(const uint8_t *b, float *y);
/* The low-bit types' block decoders (cpu_lowbit.c): IQ1_S, IQ1_M,
 * IQ1_XS, IQ1_XXS, IQ1_XXXS, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, TQ1_0,
 * TQ2_0, NVFP4, Q1_0, Q2_0; NULL for any other type. */
vt_cpu_deq_block_fn vt_cpu_lowbit_block_fn(uint32_t type);
/* The codebooks of vt/iq_grids.h expanded to ggml's words, and ggml's
 * ksigns_iq2xs; filled when the plugin is loaded (a constructor). */
typedef struct vt_cpu_iq_tables {
    uint64_t iq2xxs[256], iq2xs[512], iq2s[1024];
    uint32_t iq3xxs[256], iq3s[512];
    uint64_t iq1s[2048], iq1xs[1024], iq1xxs[512], iq1xxxs[256];
    uint8_t signs[128];
    /* decode's forms: IQ1 entries as 8 int8 values 8 c + 1 ([0]) and 8 c - 1
     * ([1]); the byte mask of each sign byte (0xff where its bit is set) */
    uint64_t iq1s_q[2][2048], iq1xs_q[2][1024], iq1xxs_q[2][512], iq1xxxs_q[2][256];
    uint64_t sign_mask[256];
} vt_cpu_iq_tables;
extern vt_cpu_iq_tables vt_cpu_iq;
/* 1 when vt_cpu_dequant_row decodes `type` (a superset of vt_cpu_type_supported). */
int vt_cpu_dequant_handles(uint32_t type);
/* 1 when the mat_mul/get_rows kernels handle `type` (the backend's capabilities). */
int vt_cpu_type_supported(uint32_t type);

/* ---- kernel sets ---- */

/*
 * One matmul slice: y[t*ldy + r] = dot(row r of w, x[t*ldx ...]) for r < n_rows,
 * t < n_tok. w points at the slice's first row; rows are row_bytes apart.
 * scratch: at least VT_CPU_MM_SCRATCH(n_in) floats, 64-byte aligned (the
 * scalar kernel dequantises a row there, the SIMD kernels a weight panel).
 * A SIMD kernel takes tokens in chunks of VT_CPU_MM_TOK_CHUNK from the
 * slice's first and n_in in blocks of VT_CPU_MM_KB columns; the op starts
 * every token slice at a multiple of the chunk, so each output is computed
 * the same way for every thread count (cpu_simd_body.h).
 */
#define VT_CPU_MM_KB 512
#define VT_CPU_MM_TOK_CHUNK 64
#define VT_CPU_MM_SCRATCH(n_in) ((n_in) > 9 * VT_CPU_MM_KB ? (n_in) : 9 * VT_CPU_MM_KB)
typedef void (*vt_cpu_mm_fn)(const uint8_t *w, size_t row_bytes, int64_t n_in, const float *x,
                             int64_t ldx, float *y, int64_t ldy, int64_t n_rows, int64_t n_tok,
                             float *scratch);

/*
 * The weight types backend-cpu computes, as X(TYPE, name) for VT_TYPE_<TYPE>
 * and the kernels' names mm_<name> / gr_<name>: the types the float kernels
 * read directly (F32, F16, BF16, and Q8_0 from its codes), the block types
 * they dequantise into a panel (ids below VT_TYPE_SLOTS), and the block
 * types past the ABI's per-type tables (ABI 1.9: mat_mul_ext/get_rows_ext).
 * Every table of kernels is built from these lists.
 */
#define VT_CPU_DIRECT_TYPES(X) X(F32, f32) X(F16, f16) X(BF16, bf16) X(Q8_0, q8_0)
#define VT_CPU_PANEL_TYPES(X)                                                                  \
    X(Q4_0, q4_0) X(Q4_1, q4_1) X(Q5_0, q5_0) X(Q5_1, q5_1) X(Q2_K, q2_k) X(Q3_K, q3_k)         \
    X(Q4_K, q4_k) X(Q5_K, q5_k) X(Q6_K, q6_k) X(IQ4_NL, iq4_nl) X(IQ4_XS, iq4_xs)              \
    X(MXFP4, mxfp4) X(IQ2_XXS, iq2_xxs) X(IQ2_XS, iq2_xs) X(IQ3_XXS, iq3_xxs) X(IQ1_S, iq1_s)  \
    X(IQ3_S, iq3_s) X(IQ2_S, iq2_s) X(IQ1_M, iq1_m) X(TQ1_0, tq1_0) X(TQ2_0, tq2_0)            \
    X(NVFP4, nvfp4) X(Q1_0, q1_0) X(Q2_0, q2_0)
#define VT_CPU_EXT_TYPES(X) X(IQ1_XS, iq1_xs) X(IQ1_XXS, iq1_xxs) X(IQ1_XXXS, iq1_xxxs)
/* designated initialisers of a table of mm_<name> / gr_<name> */
#define VT_CPU_MM_INIT(T, n) [VT_TYPE_##T] = mm_##n,
#define VT_CPU_GR_INIT(T, n) [VT_TYPE_##T] = gr_##n,

typedef struct vt_cpu_kernels {
    const char *name; /* "scalar", "avx2", "avx512", "avx2w16" */
    const char *isa;  /* for the INFO log line */
    int lanes;        /* floats per vector (1 for scalar) */
    int (*supported)(void); /* 1 when this CPU can run the set */

    vt_cpu_mm_fn mat_mul[VT_TYPE_COUNT]; /* NULL: type not handled */

    /* One row: y = x / sqrt(mean(x²) + eps) (· w when w); sum of squares in double. */
    void (*rms_norm_row)(const float *x, const float *w, float *y, int64_t n, float eps);
    /* One row: y = x / max(||x||, eps); sum of squares in double. */
    void (*l2_norm_row)(const float *x, float *y, int64_t n, float eps);
    /*
     * One query head of one token: out[d] = Σ_s softmax(score)_s · v[s][d] over
     * cache positions s0 <= s < s1 (s1 > s0); k, v: the KV head's column in the
     * caches (row stride ld_kv). scores: s1 floats of scratch;
     * acc: head_dim doubles of scratch (used by the scalar kernel).
     */
    void (*attn_head)(const float *q, const float *k, const float *v, int64_t ld_kv,
                      int64_t head_dim, int64_t s0, int64_t s1, float scale, float softcap,
                      float *scores, double *acc, float *out);
    /*
     * One value head of the gated delta rule over n_tokens tokens (qwen35moe.md
     * §5.7.4). q, k: the key head's columns (token stride ldqk); v: the value
     * head's (ldv); g, beta: this head's entry of token 0, token stride ld_gb;
     * S: [d_k][ld_s] state; out: this head's columns (ldo).
     * Column j of S evolves independently of the others, so a call may cover a
     * strip of d_v columns of the head: v, S and out then point at the strip's
     * first column and ld_s is the head's full d_v.
     * scratch: 3 * d_v doubles.
     */
    void (*delta_head)(const float *q, const float *k, int64_t ldqk, const float *v, int64_t ldv,
                       const float *g, const float *beta, int64_t ld_gb, float *S, int64_t ld_s,
                       float *out, int64_t ldo, int64_t n_tokens, int64_t d_k, int64_t d_v,
                       double *scratch);
    /*
     * Channels [0, n_ch) of the causal conv + SiLU (qwen35moe.md §5.7.2); every
     * pointer is already offset to the slice's first channel; ld_state is the
     * state's row stride (the op's total channel count).
     */
    void (*ssm_conv)(const float *x, int64_t ldx, const float *w, float *state, int64_t ld_state,
                     float *y, int64_t ldy, int64_t n_tokens, int64_t n_ch, int64_t d_conv);
    void (*unary)(vt_unary_op op, const float *x, float *y, int64_t n);
    /* y[r*nb + c] = a[r*nb + c] op b[c], r < n_rows, c < nb. */
    void (*binary)(vt_binary_op op, const float *a, const float *b, float *y, int64_t n_rows,
                   int64_t nb);
    void (*scale)(const float *x, float *y, int64_t n, float s);
    /* y[r][c] = x[r][c] · s[r]. */
    void (*mul_rows)(const float *x, const float *s, float *y, int64_t n_rows, int64_t n_cols);
} vt_cpu_kernels;

extern const vt_cpu_kernels vt_cpu_kernels_scalar;
extern const vt_cpu_kernels vt_cpu_kernels_avx2;
extern const vt_cpu_kernels vt_cpu_kernels_avx2w16;
extern const vt_cpu_kernels vt_cpu_kernels_avx512;

/* ---- integer dot products: the decode path of the quantised types ---- */

/*
 * One token's activations quantised for the integer dot products, per block b
 * of 32 values (the weights' block or sub-block): d[b] = max|x| / 127,
 * q[32b + i] = round(x / d[b]) (nearest even), so |x − d·q| <= d/2 (+ the
 * float rounding of x·(1/d)); ds[b] = d[b] · Σ_i q (for the min terms of
 * Q4_1, Q5_1, Q4_K, Q5_K); s16[2b], s16[2b + 1]: Σ q over values 0..15 and
 * 16..31 (Q2_K's per-16 mins). Structure of arrays, so a super-block's 8
 * scales load as one vector. Views into one buffer (vt_cpu_xq_bytes).
 */
typedef struct vt_cpu_xq {
    int8_t *q;
    float *d, *ds;
    int16_t *s16;
} vt_cpu_xq;

/* Bytes of the buffer for nb blocks, and the views into it (64-byte aligned buf). */
static inline size_t vt_cpu_xq_bytes(int64_t nb) { return (size_t)nb * (32 + 4 + 4 + 4) + 64; }
static inline vt_cpu_xq vt_cpu_xq_view(void *buf, int64_t nb)
{
    uint8_t *p = buf;
    vt_cpu_xq v = {(int8_t *)p, (float *)(void *)(p + 32 * nb), (float *)(void *)(p + 36 * nb),
                   (int16_t *)(void *)(p + 40 * nb)};
    return v;
}

/* y[r] = Σ_i w[r][i] · x_i for r < n_rows, one token; w: the slice's first
 * row, rows rb bytes apart; x: the token's n_in / 32 quantised blocks. */
typedef void (*vt_cpu_qdot_fn)(const uint8_t *w, size_t rb, int64_t n_in, const vt_cpu_xq *x,
                               float *y, int64_t n_rows);

typedef struct vt_cpu_qdot_set {
    const char *name;       /* "avx2", "avx512vnni" */
    int (*supported)(void); /* 1 when this CPU can run it */
    /* x (n floats, n a multiple of 32) -> n / 32 blocks */
    void (*quantize)(const float *x, int64_t n, const vt_cpu_xq *xq);
    vt_cpu_qdot_fn dot[VT_TYPE_COUNT]; /* block types; NULL: none */
    /* several tokens at once, each as its dot gives it (vt_cpu_lowbit_mm_fn's
     * contract); NULL: dot token by token (the low-bit types: vt_cpu_lowbit_mm) */
    void (*mm[VT_TYPE_COUNT])(const uint8_t *w, size_t rb, int64_t n_in, const struct vt_cpu_xq *x,
                              int64_t n_tok, float *y, int64_t ldy, int64_t n_rows);
} vt_cpu_qdot_set;

/* The low-bit types (cpu_lowbit.c: blocks decoded to int8 and a scale per 16
 * values), as X(TYPE, name): their one-token dot products vt_cpu_dot_<name>
 * are in every qdot set. */
#define VT_CPU_LOWBIT_TYPES(X)                                                                 \
    X(IQ2_XXS, iq2_xxs) X(IQ2_XS, iq2_xs) X(IQ2_S, iq2_s) X(IQ3_XXS, iq3_xxs) X(IQ3_S, iq3_s)  \
    X(IQ1_S, iq1_s) X(IQ1_M, iq1_m) X(IQ1_XS, iq1_xs) X(IQ1_XXS, iq1_xxs)                      \
    X(IQ1_XXXS, iq1_xxxs) X(TQ1_0, tq1_0) X(TQ2_0, tq2_0) X(NVFP4, nvfp4) X(Q1_0, q1_0)        \
    X(Q2_0, q2_0)
#define VT_CPU_LOWBIT_DOT_DECL(T, n)                                                           \
    void vt_cpu_dot_##n(const uint8_t *w, size_t rb, int64_t n_in, const vt_cpu_xq *x, float *y, \
                        int64_t n_rows);
VT_CPU_LOWBIT_TYPES(VT_CPU_LOWBIT_DOT_DECL)
#undef VT_CPU_LOWBIT_DOT_DECL
/* s[g] = Σ_{i<16} q[16 g + i] · x[16 g + i] for g < n / 16 (n a multiple of
 * 64, |q| <= 127 and never -128): exact integer sums, so both versions give
 * the same s; the low-bit kernels take the AVX2 one where the CPU has it. */
typedef void (*vt_cpu_group_sums_fn)(const int8_t *q, const int8_t *x, int n, int32_t *s);
void vt_cpu_group_sums_c(const int8_t *q, const int8_t *x, int n, int32_t *s);
#if defined(__x86_64__)
void vt_cpu_group_sums_avx2(const int8_t *q, const int8_t *x, int n, int32_t *s);
#endif
/* n_tok (<= VT_CPU_MM_TOK_CHUNK) tokens at once, each exactly as its one-token
 * dot product: y[t * ldy + r] for r < n_rows; x: n_tok views. */
typedef void (*vt_cpu_lowbit_mm_fn)(const uint8_t *w, size_t rb, int64_t n_in,
                                    const vt_cpu_xq *x, int64_t n_tok, float *y, int64_t ldy,
                                    int64_t n_rows);
/* The low-bit type's several-token kernel, or NULL for any other type. */
vt_cpu_lowbit_mm_fn vt_cpu_lowbit_mm(uint32_t type);
/* A low-bit decoder: one block of the type at b into q[block size] integers
 * and sc[block size / 16] scales, value i = sc[i / 16] · q[i] exactly. */
typedef void (*vt_cpu_lowbit_int_fn)(const uint8_t *b, int8_t *q, float *sc);
/* The type's plain C decoder (fast 0: the reference's), or the one its
 * kernels use (fast 1: cpu_lowbit_avx2.c's where the CPU has AVX2 and the
 * type has one, else the plain one); NULL for a type that is not low-bit. */
vt_cpu_lowbit_int_fn vt_cpu_lowbit_int(uint32_t type, int fast);
/* cpu_lowbit_avx2.c: the AVX2 decoder of IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS or
 * IQ3_S (same q and sc as the plain one), NULL for another type or without
 * x86-64; the caller checks the CPU for AVX2. */
vt_cpu_lowbit_int_fn vt_cpu_lowbit_int_avx2(uint32_t type);
#if defined(__x86_64__)
/* cpu_lowbit_avx2.c: the several-token product of a 256-value low-bit type
 * (blocks of ts bytes decoded by dec) with AVX2 + FMA, the caller having
 * checked for both: vt_cpu_lowbit_mm_fn's contract, each token's result
 * independent of n_tok (<= VT_CPU_MM_TOK_CHUNK). */
void vt_cpu_lowbit_mm256_avx2(vt_cpu_lowbit_int_fn dec, int ts, const uint8_t *w, size_t rb,
                              int64_t n_in, const vt_cpu_xq *x, int64_t n_tok, float *y,
                              int64_t ldy, int64_t n_rows);
#endif
#define VT_CPU_LOWBIT_DOT_INIT(T, n) [VT_TYPE_##T] = vt_cpu_dot_##n,
#define VT_CPU_LOWBIT_DOTS VT_CPU_LOWBIT_TYPES(VT_CPU_LOWBIT_DOT_INIT)

extern const vt_cpu_qdot_set vt_cpu_qdot_avx2;
extern const vt_cpu_qdot_set vt_cpu_qdot_avx512vnni;

/*
 * The integer dot products that go with kernel set k: none for "scalar" (the
 * float reference), avx512vnni for "avx512" where the CPU has VNNI, else avx2
 * where the CPU has it; none when the environment says VT_CPU_INT8_DOT=0
 * (decode then takes the float path: exact dequantisation, float
 * activations, slower).
 */
const vt_cpu_qdot_set *vt_cpu_qdot_for(const vt_cpu_kernels *k);

/* F16C (CPUID.1:ECX bit 29); clang's __builtin_cpu_supports does not know it. */
int vt_cpu_has_f16c(void);

/* The set named `name` ("scalar", "avx2", "avx512", "avx2w16"), or NULL. */
const vt_cpu_kernels *vt_cpu_kernels_find(const char *name);
/* The fastest set this CPU supports. */
const vt_cpu_kernels *vt_cpu_kernels_best(void);

/* Shared scalar helpers (cpu_kernels_scalar.c), also used by SIMD sets for tails. */
float vt_cpu_unary_ref(vt_unary_op op, float x);

/* ---- thread pool ---- */

typedef struct vt_cpu_pool vt_cpu_pool;
/* One slice of an op: task index in [0, n_tasks), thread index in [0, n_threads). */
typedef void (*vt_cpu_task_fn)(void *arg, int64_t task, int thread);

/* Largest task count one vt_cpu_pool_run accepts. */
#define VT_CPU_POOL_MAX_TASKS ((int64_t)(1 << 20) - 1)

/* n_threads >= 1 counts the calling thread: n_threads - 1 workers are started. */
/* ctx (may be NULL) only carries the host for error messages. */
vt_status vt_cpu_pool_create(const vt_backend_ctx *ctx, int n_threads, vt_cpu_pool **out);
/* Stops and joins every worker. NULL is fine. */
void vt_cpu_pool_destroy(vt_cpu_pool *p);
int vt_cpu_pool_threads(const vt_cpu_pool *p);
/* Runs fn for every task on the pool (the caller works too) and returns when
 * all are done. Tasks are cut into one contiguous range per thread, run by
 * that thread first (the same shape maps the same tasks to the same thread
 * call after call) and stolen by the others when it is late. */
void vt_cpu_pool_run(vt_cpu_pool *p, vt_cpu_task_fn fn, void *arg, int64_t n_tasks);

/* CPUs this process may run on (sched_getaffinity; sysconf fallback). */
int vt_cpu_online_cores(void);

/* ---- the backend ---- */

/* Work (roughly: multiply-adds or elements touched) below which an op runs on
 * the calling thread without waking the workers. */
#define VT_CPU_INLINE_WORK 16384

struct vt_backend_ctx {
    const vt_host_api *host;
    const vt_cpu_kernels *k;
    const vt_cpu_qdot_set *qd; /* decode's integer dot products, or NULL */
    void *xq;                  /* tokens' quantised activations (vt_cpu_xq_view each) */
    size_t xq_bytes;           /* bytes xq holds */
    vt_cpu_pool *pool;
    int n_threads;
    void **scratch;       /* per thread, 64-byte aligned */
    size_t scratch_bytes; /* size of each */
    /* RoPE: cos/sin of the last single position rotated (the q and k calls of a
     * decode step share it); keyed by position, base, n_rot and the frequency
     * factors' values. */
    struct {
        int valid;
        int32_t pos;
        float base;
        int64_t n_rot;
        int has_ff;
        float *ff;  /* n_rot/2 */
        double *cs; /* n_rot: cos[0..n_rot/2), sin[n_rot/2..n_rot) */
        int64_t cap; /* n_rot the buffers hold */
    } rope;
};

/* Set the error through the host table (stderr when there is none); returns st. */
vt_status vt_cpu_fail(const vt_backend_ctx *ctx, vt_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Set "backend cpu: allocation of 1.19 GiB (1277952000 bytes) for <what> failed: out of
 * memory" (what is printf-style) and return VT_ERR_OUT_OF_MEMORY. */
vt_status vt_cpu_fail_oom(const vt_backend_ctx *ctx, uint64_t bytes, const char *what_fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Each thread's scratch holds at least `bytes`. */
vt_status vt_cpu_scratch_reserve(vt_backend_ctx *ctx, size_t bytes);

/* The ops (cpu_ops.c), with the signatures of vt_backend_api. */
vt_status vt_cpu_mat_mul(vt_backend_ctx *ctx, uint32_t type, const vt_weight *w, const float *x,
                         int64_t ldx, float *y, int64_t ldy, int64_t n_tokens);
vt_status vt_cpu_get_rows(vt_backend_ctx *ctx, uint32_t type, const vt_weight *w,
                          const int32_t *ids, int64_t n, float *out);
vt_status vt_cpu_rms_norm(vt_backend_ctx *ctx, const float *x, int64_t ldx, const float *w,
                          float *y, int64_t ldy, int64_t n_rows, int64_t n, float eps);
vt_status vt_cpu_l2_norm(vt_backend_ctx *ctx, const float *x, int64_t ldx, float *y, int64_t ldy,
                         int64_t n_rows, int64_t n, float eps);
vt_status vt_cpu_rope_neox(vt_backend_ctx *ctx, float *x, int64_t ld_token, int64_t ld_head,
                           int64_t n_tokens, int64_t n_head, int64_t n_rot, const int32_t *pos,
                           float base, const float *freq_factors);
vt_status vt_cpu_attention(vt_backend_ctx *ctx, const float *q, int64_t ldq, int64_t ldq_head,
                           const float *k_cache, const float *v_cache, float *out, int64_t ldo,
                           int64_t n_tokens, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                           int64_t pos0, int64_t n_kv, int64_t window, float scale, float softcap);
vt_status vt_cpu_ssm_conv(vt_backend_ctx *ctx, const float *x, int64_t ldx, const float *w,
                          float *state, float *y, int64_t ldy, int64_t n_tokens, int64_t n_ch,
                          int64_t d_conv);
vt_status vt_cpu_gated_delta_net(vt_backend_ctx *ctx, const float *q, const float *k, int64_t ldqk,
                                 const float *v, int64_t ldv, const float *g, const float *beta,
                                 float *state, float *out, int64_t ldo, int64_t n_tokens,
                                 int64_t n_k, int64_t n_v, int64_t d_k, int64_t d_v);
vt_status vt_cpu_unary(vt_backend_ctx *ctx, vt_unary_op op, const float *x, float *y, int64_t n);
vt_status vt_cpu_binary(vt_backend_ctx *ctx, vt_binary_op op, const float *a, const float *b,
                        float *y, int64_t n, int64_t nb);
vt_status vt_cpu_scale(vt_backend_ctx *ctx, const float *x, float *y, int64_t n, float s);
vt_status vt_cpu_mul_rows(vt_backend_ctx *ctx, const float *x, const float *s, float *y,
                          int64_t n_rows, int64_t n_cols);
vt_status vt_cpu_copy_2d(vt_backend_ctx *ctx, const float *src, int64_t ld_src, float *dst,
                         int64_t ld_dst, int64_t n_rows, int64_t n_cols);
vt_status vt_cpu_gather_rows(vt_backend_ctx *ctx, const float *src, int64_t ld_src,
                             const int32_t *idx, int64_t n, int64_t n_cols, float *dst,
                             int64_t ld_dst);
vt_status vt_cpu_scatter_add(vt_backend_ctx *ctx, const float *src, int64_t ld_src,
                             const int32_t *idx, const float *wt, int64_t n, int64_t n_cols,
                             float *dst, int64_t ld_dst);
vt_status vt_cpu_softmax_topk(vt_backend_ctx *ctx, const float *logits, int64_t n_rows, int64_t n,
                              int64_t k, int renorm, int32_t *ids, float *weights, float *probs);
/* cpu_moe.c (ABI 1.2) */
vt_status vt_cpu_moe_route(vt_backend_ctx *ctx, const float *logits, int64_t n_rows, int64_t n,
                           int64_t k, int renorm, const float *expert_scale, int32_t *ids,
                           float *weights);
vt_status vt_cpu_moe_ffn(vt_backend_ctx *ctx, const vt_moe_ffn_args *args);

/* The plugin's table (cpu_backend.c). */
const vt_backend_api *vt_cpu_backend_api(void);
const vt_plugin_desc *vt_cpu_plugin_desc(void);

/* Test hook: switch an initialised context to another kernel set (one the CPU
 * supports), with its integer dot products (vt_cpu_qdot_for). */
void vt_cpu_ctx_set_kernels(vt_backend_ctx *ctx, const vt_cpu_kernels *k);
/* Test hook: the integer dot products decode uses (NULL: the float path). */
void vt_cpu_ctx_set_qdot(vt_backend_ctx *ctx, const vt_cpu_qdot_set *qd);
const vt_cpu_kernels *vt_cpu_ctx_kernels(const vt_backend_ctx *ctx);

#endif
