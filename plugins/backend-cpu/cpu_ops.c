/*
 * cpu_ops.c - the compute ops of backend-cpu (vt/backend.h is the contract):
 * argument checks, splitting an op into slices, and running the slices with
 * the context's kernel set on the thread pool.
 *
 * Splitting: matmul over blocks of output rows (and blocks of 64 tokens for
 * large batches), attention over (token, query head), the delta net over
 * (value head, strip of value columns), the conv over channel blocks, norms
 * over rows, elementwise ops over blocks of elements. An op whose work is
 * below VT_CPU_INLINE_WORK runs on the calling thread and wakes no worker.
 *
 * Ops not in the kernel table (RoPE, copies, gather/scatter, routing,
 * get_rows) have one implementation, which is the reference for every set:
 * they are exact (copies, dequantisation) or evaluated in double.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"
#include "vt/plugin_util.h"

#define MIN_TASK_WORK 8192 /* do not cut slices smaller than this */

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Split n units of `unit_work` work each into tasks of whole units: about 4 per
 * thread, none below MIN_TASK_WORK; returns units per task (n when inline). */
static int64_t units_per_task(const vt_backend_ctx *ctx, int64_t n, double unit_work)
{
    if (n <= 0) return 1;
    if (ctx->n_threads <= 1 || unit_work * (double)n < VT_CPU_INLINE_WORK) return n;
    int64_t per = ceil_div(n, 4 * (int64_t)ctx->n_threads);
    if (unit_work > 0) {
        int64_t min_units = (int64_t)ceil(MIN_TASK_WORK / unit_work);
        per = max64(per, min_units);
    }
    return max64(1, min64(per, n));
}

#define CHECK(cond, ...)                                                                       \
    do {                                                                                       \
        if (!(cond)) return vt_cpu_fail(ctx, VT_ERR_INVALID_ARG, __VA_ARGS__);                 \
    } while (0)

/* ======================= matmul and get_rows ======================= */

struct mm_job {
    const vt_backend_ctx *ctx;
    vt_cpu_mm_fn fn;
    const uint8_t *w;
    size_t rb;
    int64_t n_in, n_out, ldx, ldy, n_tok;
    const float *x;
    float *y;
    int64_t rows_per, n_rb, tok_per;
};

static void mm_task(void *arg, int64_t task, int thread)
{
    const struct mm_job *j = arg;
    int64_t rb = task % j->n_rb, tb = task / j->n_rb;
    int64_t r0 = rb * j->rows_per, r1 = min64(r0 + j->rows_per, j->n_out);
    int64_t t0 = tb * j->tok_per, t1 = min64(t0 + j->tok_per, j->n_tok);
    j->fn(j->w + (size_t)r0 * j->rb, j->rb, j->n_in, j->x + t0 * j->ldx, j->ldx,
          j->y + t0 * j->ldy + r0, j->ldy, r1 - r0, t1 - t0, j->ctx->scratch[thread]);
}

static vt_status check_weight(const vt_backend_ctx *ctx, const char *op, uint32_t type,
                              const vt_weight *w)
{
    const char *nm = w && w->name ? w->name : "(unnamed)";
    CHECK(w, "%s: weight is NULL", op);
    CHECK(w->type == type, "%s: weight %s has type %s but was passed to the %s kernel", op, nm,
          vt_type_name(w->type), vt_type_name(type));
    CHECK(w->n_in > 0 && w->n_out >= 0, "%s: weight %s has shape [%lld, %lld]", op, nm,
          (long long)w->n_out, (long long)w->n_in);
    CHECK(vt_type_block_size(type) > 0 && w->n_in % vt_type_block_size(type) == 0,
          "%s: weight %s: rows of %lld values are not whole %s blocks of %lld", op, nm,
          (long long)w->n_in, vt_type_name(type), (long long)vt_type_block_size(type));
    CHECK(w->row_bytes == vt_type_row_bytes(type, (uint64_t)w->n_in),
          "%s: weight %s: row_bytes %llu does not match %lld elements of %s (%llu)", op, nm,
          (unsigned long long)w->row_bytes, (long long)w->n_in, vt_type_name(type),
          (unsigned long long)vt_type_row_bytes(type, (uint64_t)w->n_in));
    CHECK(w->data || w->n_out == 0, "%s: weight %s has no data", op, nm);
    return VT_OK;
}

/*
 * The integer path of every block type with a qdot kernel, at every batch
 * size: each token's activations quantised once into int8 blocks (ctx->xq,
 * one 64-byte-aligned view per token), then the integer dot products over
 * slices of rows, in chunks of VT_CPU_MM_TOK_CHUNK tokens. Several tokens go
 * to the type's mm kernel where it has one (the low-bit types, Q4_K, Q5_K:
 * each block decoded once for several tokens); another type's go through its
 * one-token dot, token by token over sub-blocks of QD_SUB_BYTES of rows that
 * stay in the cache. Either way each token's output is what its one-token call gives,
 * bit for bit, so a row's result never depends on the rest of the batch
 * (batch invariance; issue 43 item 5), and the activations are rounded as
 * llama.cpp's CPU kernels round them in prefill too.
 */
#define QD_SUB_BYTES 16384
struct int8_job {
    vt_cpu_qdot_fn dot;       /* the one-token kernel */
    vt_cpu_lowbit_mm_fn mm;   /* several tokens at once, or NULL */
    const uint8_t *w;
    size_t rb;
    int64_t n_in, n_out, rows_per, n_tok, ldy;
    const vt_cpu_xq *xq;
    float *y;
};

static void int8_task(void *arg, int64_t task, int thread)
{
    (void)thread;
    const struct int8_job *j = arg;
    int64_t r0 = task * j->rows_per, r1 = min64(r0 + j->rows_per, j->n_out);
    if (j->mm && j->n_tok > 1) {
        j->mm(j->w + (size_t)r0 * j->rb, j->rb, j->n_in, j->xq, j->n_tok, j->y + r0, j->ldy, r1 - r0);
        return;
    }
    const int64_t sub = j->n_tok > 1 ? max64(1, QD_SUB_BYTES / (int64_t)j->rb) : r1 - r0;
    for (int64_t r = r0; r < r1; r += sub) {
        const int64_t n = min64(sub, r1 - r);
        for (int64_t t = 0; t < j->n_tok; t++)
            j->dot(j->w + (size_t)r * j->rb, j->rb, j->n_in, &j->xq[t], j->y + t * j->ldy + r, n);
    }
}

static vt_status int8_mat_mul(vt_backend_ctx *ctx, vt_cpu_qdot_fn dot, vt_cpu_lowbit_mm_fn mm,
                              const vt_weight *w, const float *x, int64_t ldx, float *y,
                              int64_t ldy, int64_t n_tokens)
{
    const int64_t nb = w->n_in / 32, chunk = min64(n_tokens, VT_CPU_MM_TOK_CHUNK);
    const size_t stride = (vt_cpu_xq_bytes(nb) + 63) / 64 * 64, need = stride * (size_t)chunk;
    if (need > ctx->xq_bytes) {
        void *p = NULL;
        if (posix_memalign(&p, 64, need) != 0)
            return vt_cpu_fail_oom(ctx, need, "the quantised activations of %s",
                                   w->name ? w->name : "(unnamed)");
        free(ctx->xq);
        ctx->xq = p;
        ctx->xq_bytes = need;
    }
    vt_cpu_xq xq[VT_CPU_MM_TOK_CHUNK];
    for (int64_t t0 = 0; t0 < n_tokens; t0 += chunk) {
        const int64_t nt = min64(chunk, n_tokens - t0);
        for (int64_t t = 0; t < nt; t++) {
            xq[t] = vt_cpu_xq_view((uint8_t *)ctx->xq + (size_t)t * stride, nb);
            ctx->qd->quantize(x + (t0 + t) * ldx, w->n_in, &xq[t]);
        }
        struct int8_job j = {dot, mm, w->data, (size_t)w->row_bytes, w->n_in, w->n_out, w->n_out,
                             nt, ldy, xq, y + t0 * ldy};
        double work = (double)w->n_in * (double)w->n_out * (double)nt;
        if (ctx->n_threads > 1 && work >= VT_CPU_INLINE_WORK) {
            int64_t rp = ceil_div(w->n_out, 4 * (int64_t)ctx->n_threads);
            while (rp < w->n_out && (double)rp * (double)w->n_in * (double)nt < MIN_TASK_WORK)
                rp *= 2;
            j.rows_per = min64(rp, w->n_out);
            vt_cpu_pool_run(ctx->pool, int8_task, &j, ceil_div(w->n_out, j.rows_per));
        } else {
            int8_task(&j, 0, 0);
        }
    }
    return VT_OK;
}

vt_status vt_cpu_mat_mul(vt_backend_ctx *ctx, uint32_t type, const vt_weight *w, const float *x,
                         int64_t ldx, float *y, int64_t ldy, int64_t n_tokens)
{
    vt_status st = check_weight(ctx, "mat_mul", type, w);
    if (st) return st;
    const char *nm = w->name ? w->name : "(unnamed)";
    CHECK(n_tokens >= 0, "mat_mul %s: n_tokens %lld < 0", nm, (long long)n_tokens);
    if (n_tokens == 0 || w->n_out == 0) return VT_OK;
    CHECK(x && y, "mat_mul %s: x or y is NULL", nm);
    CHECK(ldx >= w->n_in, "mat_mul %s: ldx %lld < n_in %lld", nm, (long long)ldx, (long long)w->n_in);
    CHECK(ldy >= w->n_out, "mat_mul %s: ldy %lld < n_out %lld", nm, (long long)ldy,
          (long long)w->n_out);
    vt_cpu_mm_fn fn = ctx->k->mat_mul[type];
    if (!fn)
        return vt_cpu_fail(ctx, VT_ERR_UNSUPPORTED, "mat_mul %s: weight type %s not implemented", nm,
                           vt_type_name(type));
    /* int8 activations at every batch size, as llama.cpp's CPU kernels take
     * them; the float path stays for the types without a qdot kernel, the
     * scalar kernels (ctx->qd NULL) and VT_CPU_INT8_DOT=0 */
    if (ctx->qd && ctx->qd->dot[type] && w->n_in % 32 == 0)
        return int8_mat_mul(ctx, ctx->qd->dot[type],
                            ctx->qd->mm[type] ? ctx->qd->mm[type] : vt_cpu_lowbit_mm(type), w, x,
                            ldx, y, ldy, n_tokens);
    st = vt_cpu_scratch_reserve(ctx, (size_t)VT_CPU_MM_SCRATCH(w->n_in) * sizeof(float));
    if (st) return st;

    struct mm_job j = {ctx, fn, w->data, (size_t)w->row_bytes, w->n_in, w->n_out, ldx, ldy,
                       n_tokens, x, y, w->n_out, 1, n_tokens};
    double work = (double)w->n_in * (double)w->n_out * (double)n_tokens;
    if (ctx->n_threads > 1 && work >= VT_CPU_INLINE_WORK) {
        j.tok_per = min64(n_tokens, VT_CPU_MM_TOK_CHUNK);
        int64_t n_tb = ceil_div(n_tokens, j.tok_per);
        int64_t want_rb = max64(1, ceil_div(4 * (int64_t)ctx->n_threads, n_tb));
        int64_t rp = (ceil_div(w->n_out, want_rb) + 7) / 8 * 8;
        while (rp < w->n_out && (double)rp * (double)w->n_in * (double)j.tok_per < MIN_TASK_WORK)
            rp *= 2;
        j.rows_per = min64(rp, w->n_out);
        j.n_rb = ceil_div(w->n_out, j.rows_per);
        vt_cpu_pool_run(ctx->pool, mm_task, &j, j.n_rb * n_tb);
    } else {
        mm_task(&j, 0, 0);
    }
    return VT_OK;
}

struct rows_job {
    uint32_t type;
    const uint8_t *data;
    size_t rb;
    int64_t n_in, per, n;
    const int32_t *ids;
    float *out;
};

static void rows_task(void *arg, int64_t task, int thread)
{
    (void)thread;
    const struct rows_job *j = arg;
    int64_t i1 = min64((task + 1) * j->per, j->n);
    for (int64_t i = task * j->per; i < i1; i++)
        vt_cpu_dequant_row(j->type, j->data + (size_t)j->ids[i] * j->rb, j->n_in,
                           j->out + i * j->n_in);
}

vt_status vt_cpu_get_rows(vt_backend_ctx *ctx, uint32_t type, const vt_weight *w,
                          const int32_t *ids, int64_t n, float *out)
{
    vt_status st = check_weight(ctx, "get_rows", type, w);
    if (st) return st;
    const char *nm = w->name ? w->name : "(unnamed)";
    CHECK(n >= 0, "get_rows %s: n %lld < 0", nm, (long long)n);
    if (n == 0) return VT_OK;
    CHECK(ids && out, "get_rows %s: ids or out is NULL", nm);
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= w->n_out)
            return vt_cpu_fail(ctx, VT_ERR_RANGE, "get_rows %s: row id %d (entry %lld) outside [0, %lld)",
                               nm, ids[i], (long long)i, (long long)w->n_out);
    if (!vt_cpu_type_supported(type))
        return vt_cpu_fail(ctx, VT_ERR_UNSUPPORTED, "get_rows %s: weight type %s not implemented", nm,
                           vt_type_name(type));
    struct rows_job j = {type, w->data, (size_t)w->row_bytes, w->n_in, 0, n, ids, out};
    j.per = units_per_task(ctx, n, (double)w->n_in);
    vt_cpu_pool_run(ctx->pool, rows_task, &j, ceil_div(n, j.per));
    return VT_OK;
}

/* ======================= norms ======================= */

struct norm_job {
    const vt_backend_ctx *ctx;
    const float *x, *w;
    float *y;
    int64_t ldx, ldy, n_rows, n, per;
    float eps;
    int l2;
};

static void norm_task(void *arg, int64_t task, int thread)
{
    (void)thread;
    const struct norm_job *j = arg;
    int64_t r1 = min64((task + 1) * j->per, j->n_rows);
    for (int64_t r = task * j->per; r < r1; r++) {
        if (j->l2)
            j->ctx->k->l2_norm_row(j->x + r * j->ldx, j->y + r * j->ldy, j->n, j->eps);
        else
            j->ctx->k->rms_norm_row(j->x + r * j->ldx, j->w, j->y + r * j->ldy, j->n, j->eps);
    }
}

static vt_status norm_op(vt_backend_ctx *ctx, const char *op, const float *x, int64_t ldx,
                         const float *w, float *y, int64_t ldy, int64_t n_rows, int64_t n,
                         float eps, int l2)
{
    CHECK(n_rows >= 0 && n > 0, "%s: bad shape [%lld, %lld]", op, (long long)n_rows, (long long)n);
    if (n_rows == 0) return VT_OK;
    CHECK(x && y, "%s: x or y is NULL", op);
    CHECK(ldx >= n && ldy >= n, "%s: row strides %lld/%lld shorter than n %lld", op,
          (long long)ldx, (long long)ldy, (long long)n);
    CHECK(eps >= 0.0f, "%s: eps %g < 0", op, (double)eps);
    struct norm_job j = {ctx, x, w, y, ldx, ldy, n_rows, n, 0, eps, l2};
    j.per = units_per_task(ctx, n_rows, 3.0 * (double)n);
    vt_cpu_pool_run(ctx->pool, norm_task, &j, ceil_div(n_rows, j.per));
    return VT_OK;
}

vt_status vt_cpu_rms_norm(vt_backend_ctx *ctx, const float *x, int64_t ldx, const float *w,
                          float *y, int64_t ldy, int64_t n_rows, int64_t n, float eps)
{
    return norm_op(ctx, "rms_norm", x, ldx, w, y, ldy, n_rows, n, eps, 0);
}

vt_status vt_cpu_l2_norm(vt_backend_ctx *ctx, const float *x, int64_t ldx, float *y, int64_t ldy,
                         int64_t n_rows, int64_t n, float eps)
{
    return norm_op(ctx, "l2_norm", x, ldx, NULL, y, ldy, n_rows, n, eps, 1);
}

/* ======================= RoPE (NeoX pairing) ======================= */

/* cos/sin of pos·base^(−2i/n_rot) / ff[i] for i < n_rot/2, angle in double. */
static void rope_table(double *cs, int64_t n_rot, int32_t pos, float base, const float *ff)
{
    int64_t half = n_rot / 2;
    for (int64_t i = 0; i < half; i++) {
        double theta = (double)pos * pow((double)base, -2.0 * (double)i / (double)n_rot);
        if (ff) theta /= (double)ff[i];
        cs[i] = cos(theta);
        cs[half + i] = sin(theta);
    }
}

static void rope_apply(float *x, int64_t ld_head, int64_t n_head, int64_t n_rot, const double *cs)
{
    int64_t half = n_rot / 2;
    for (int64_t h = 0; h < n_head; h++) {
        float *xh = x + h * ld_head;
        for (int64_t i = 0; i < half; i++) {
            double a = xh[i], b = xh[i + half], c = cs[i], s = cs[half + i];
            xh[i] = (float)(a * c - b * s);
            xh[i + half] = (float)(a * s + b * c);
        }
    }
}

struct rope_job {
    float *x;
    int64_t ld_token, ld_head, n_head, n_rot, n_tokens, per;
    const int32_t *pos;
    float base;
    const float *ff;
    void **scratch;
};

static void rope_task(void *arg, int64_t task, int thread)
{
    const struct rope_job *j = arg;
    double *cs = j->scratch[thread];
    int64_t t1 = min64((task + 1) * j->per, j->n_tokens);
    for (int64_t t = task * j->per; t < t1; t++) {
        rope_table(cs, j->n_rot, j->pos[t], j->base, j->ff);
        rope_apply(j->x + t * j->ld_token, j->ld_head, j->n_head, j->n_rot, cs);
    }
}

vt_status vt_cpu_rope_neox(vt_backend_ctx *ctx, float *x, int64_t ld_token, int64_t ld_head,
                           int64_t n_tokens, int64_t n_head, int64_t n_rot, const int32_t *pos,
                           float base, const float *freq_factors)
{
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
    const int64_t half = n_rot / 2;

    if (n_tokens == 1) { /* decode: reuse the table of the previous call when it matches */
        vt_status st = VT_OK;
        if (ctx->rope.cap < n_rot) {
            free(ctx->rope.ff);
            free(ctx->rope.cs);
            ctx->rope.ff = malloc((size_t)half * sizeof(float));
            ctx->rope.cs = malloc((size_t)n_rot * sizeof(double));
            ctx->rope.valid = 0;
            ctx->rope.cap = 0;
            if (!ctx->rope.ff)
                st = vt_cpu_fail_oom(ctx, (uint64_t)half * sizeof(float),
                                     "rope_neox: frequency table of %lld entries", (long long)half);
            else if (!ctx->rope.cs)
                st = vt_cpu_fail_oom(ctx, (uint64_t)n_rot * sizeof(double),
                                     "rope_neox: cos/sin table of %lld entries", (long long)n_rot);
            else
                ctx->rope.cap = n_rot;
        }
        if (st) return st;
        int hit = ctx->rope.valid && ctx->rope.pos == pos[0] && ctx->rope.base == base &&
                  ctx->rope.n_rot == n_rot && ctx->rope.has_ff == (freq_factors != NULL) &&
                  (!freq_factors || !memcmp(ctx->rope.ff, freq_factors, (size_t)half * sizeof(float)));
        if (!hit) {
            rope_table(ctx->rope.cs, n_rot, pos[0], base, freq_factors);
            ctx->rope.valid = 1;
            ctx->rope.pos = pos[0];
            ctx->rope.base = base;
            ctx->rope.n_rot = n_rot;
            ctx->rope.has_ff = freq_factors != NULL;
            if (freq_factors) memcpy(ctx->rope.ff, freq_factors, (size_t)half * sizeof(float));
        }
        rope_apply(x, ld_head, n_head, n_rot, ctx->rope.cs);
        return VT_OK;
    }
    vt_status st = vt_cpu_scratch_reserve(ctx, (size_t)n_rot * sizeof(double));
    if (st) return st;
    struct rope_job j = {x, ld_token, ld_head, n_head, n_rot, n_tokens, 0, pos, base,
                         freq_factors, ctx->scratch};
    j.per = units_per_task(ctx, n_tokens, (double)(n_head * n_rot + 4 * n_rot));
    vt_cpu_pool_run(ctx->pool, rope_task, &j, ceil_div(n_tokens, j.per));
    return VT_OK;
}

/* ======================= attention ======================= */

struct attn_job {
    const vt_backend_ctx *ctx;
    const float *q, *k, *v;
    float *out;
    int64_t ldq, ldq_head, ldo, n_head, n_gqa, head_dim, ld_kv, pos0, window, n_kv;
    float scale, softcap;
};

static void attn_task(void *arg, int64_t task, int thread)
{
    const struct attn_job *j = arg;
    int64_t t = task / j->n_head, h = task % j->n_head;
    int64_t kvh = h / j->n_gqa;
    int64_t p = j->pos0 + t;
    int64_t s1 = p + 1, s0 = 0;
    if (j->window > 0 && p - j->window + 1 > 0) s0 = p - j->window + 1;
    float *scores = j->ctx->scratch[thread];
    double *acc = (double *)(void *)(scores + ((j->n_kv + 15) & ~(int64_t)15));
    j->ctx->k->attn_head(j->q + t * j->ldq + h * j->ldq_head, j->k + kvh * j->head_dim,
                         j->v + kvh * j->head_dim, j->ld_kv, j->head_dim, s0, s1, j->scale,
                         j->softcap, scores, acc, j->out + t * j->ldo + h * j->head_dim);
}

vt_status vt_cpu_attention(vt_backend_ctx *ctx, const float *q, int64_t ldq, int64_t ldq_head,
                           const float *k_cache, const float *v_cache, float *out, int64_t ldo,
                           int64_t n_tokens, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                           int64_t pos0, int64_t n_kv, int64_t window, float scale, float softcap)
{
    CHECK(n_tokens >= 0, "attention: n_tokens %lld < 0", (long long)n_tokens);
    CHECK(n_head > 0 && n_head_kv > 0 && n_head % n_head_kv == 0,
          "attention: n_head %lld is not a positive multiple of n_head_kv %lld", (long long)n_head,
          (long long)n_head_kv);
    CHECK(head_dim > 0, "attention: head_dim %lld <= 0", (long long)head_dim);
    CHECK(pos0 >= 0 && window >= 0, "attention: pos0 %lld, window %lld", (long long)pos0,
          (long long)window);
    if (n_tokens == 0) return VT_OK;
    CHECK(pos0 + n_tokens <= n_kv,
          "attention: positions up to %lld need the cache to hold them, but n_kv is %lld",
          (long long)(pos0 + n_tokens - 1), (long long)n_kv);
    CHECK(q && k_cache && v_cache && out, "attention: a pointer is NULL");
    CHECK((n_head == 1 || ldq_head >= head_dim) && (n_tokens == 1 || ldq >= head_dim),
          "attention: q strides ldq %lld, ldq_head %lld too small for %lld heads of %lld",
          (long long)ldq, (long long)ldq_head, (long long)n_head, (long long)head_dim);
    CHECK(ldo >= n_head * head_dim, "attention: ldo %lld < n_head·head_dim %lld", (long long)ldo,
          (long long)(n_head * head_dim));
    size_t need = ((size_t)(n_kv + 15) & ~(size_t)15) * sizeof(float) +
                  (size_t)head_dim * sizeof(double);
    vt_status st = vt_cpu_scratch_reserve(ctx, need);
    if (st) return st;
    struct attn_job j = {ctx, q, k_cache, v_cache, out, ldq, ldq_head, ldo, n_head,
                         n_head / n_head_kv, head_dim, n_head_kv * head_dim, pos0, window, n_kv,
                         scale, softcap};
    int64_t n_tasks = n_tokens * n_head;
    double span = (double)(window > 0 ? min64(window, pos0 + n_tokens) : pos0 + n_tokens);
    double work = (double)n_tasks * span * (double)head_dim * 2.0;
    if (ctx->n_threads > 1 && work >= VT_CPU_INLINE_WORK && n_tasks <= VT_CPU_POOL_MAX_TASKS)
        vt_cpu_pool_run(ctx->pool, attn_task, &j, n_tasks);
    else
        for (int64_t i = 0; i < n_tasks; i++) attn_task(&j, i, 0);
    return VT_OK;
}

/* ======================= causal conv ======================= */

struct conv_job {
    const vt_backend_ctx *ctx;
    const float *x, *w;
    float *state, *y;
    int64_t ldx, ldy, n_tokens, n_ch, d_conv, per;
};

static void conv_task(void *arg, int64_t task, int thread)
{
    (void)thread;
    const struct conv_job *j = arg;
    int64_t c0 = task * j->per, c1 = min64(c0 + j->per, j->n_ch);
    j->ctx->k->ssm_conv(j->x + c0, j->ldx, j->w + c0 * j->d_conv, j->state ? j->state + c0 : NULL,
                        j->n_ch, j->y + c0, j->ldy, j->n_tokens, c1 - c0, j->d_conv);
}

vt_status vt_cpu_ssm_conv(vt_backend_ctx *ctx, const float *x, int64_t ldx, const float *w,
                          float *state, float *y, int64_t ldy, int64_t n_tokens, int64_t n_ch,
                          int64_t d_conv)
{
    CHECK(n_tokens >= 0 && n_ch > 0 && d_conv >= 1, "ssm_conv: n_tokens %lld, n_ch %lld, d_conv %lld",
          (long long)n_tokens, (long long)n_ch, (long long)d_conv);
    if (n_tokens == 0) return VT_OK;
    CHECK(x && w && y && (state || d_conv == 1), "ssm_conv: a pointer is NULL");
    CHECK(ldx >= n_ch && ldy >= n_ch, "ssm_conv: ldx %lld / ldy %lld < n_ch %lld", (long long)ldx,
          (long long)ldy, (long long)n_ch);
    CHECK(x != y, "ssm_conv: y must not alias x (later tokens read earlier inputs)");
    struct conv_job j = {ctx, x, w, state, y, ldx, ldy, n_tokens, n_ch, d_conv, 0};
    int64_t per = units_per_task(ctx, n_ch, (double)(n_tokens * (d_conv + 4)));
    if (per < n_ch) per = (per + 63) / 64 * 64; /* whole cache lines of channels per slice */
    j.per = min64(per, n_ch);
    vt_cpu_pool_run(ctx->pool, conv_task, &j, ceil_div(n_ch, j.per));
    return VT_OK;
}

/* ======================= gated delta net ======================= */

struct delta_job {
    const vt_backend_ctx *ctx;
    const float *q, *k, *v, *g, *beta;
    float *state, *out;
    int64_t ldqk, ldv, ldo, n_tokens, n_k, n_v, d_k, d_v, cw, n_strips;
};

static void delta_task(void *arg, int64_t task, int thread)
{
    const struct delta_job *j = arg;
    int64_t h = task / j->n_strips, c0 = (task % j->n_strips) * j->cw;
    int64_t c1 = min64(c0 + j->cw, j->d_v);
    int64_t kh = h % j->n_k; /* tiled head order, qwen35moe.md §5.7.3 */
    j->ctx->k->delta_head(j->q + kh * j->d_k, j->k + kh * j->d_k, j->ldqk, j->v + h * j->d_v + c0,
                          j->ldv, j->g + h, j->beta + h, j->n_v,
                          j->state + h * j->d_k * j->d_v + c0, j->d_v,
                          j->out + h * j->d_v + c0, j->ldo, j->n_tokens, j->d_k, c1 - c0,
                          j->ctx->scratch[thread]);
}

vt_status vt_cpu_gated_delta_net(vt_backend_ctx *ctx, const float *q, const float *k, int64_t ldqk,
                                 const float *v, int64_t ldv, const float *g, const float *beta,
                                 float *state, float *out, int64_t ldo, int64_t n_tokens,
                                 int64_t n_k, int64_t n_v, int64_t d_k, int64_t d_v)
{
    CHECK(n_tokens >= 0 && n_k > 0 && n_v > 0 && d_k > 0 && d_v > 0,
          "gated_delta_net: n_tokens %lld, n_k %lld, n_v %lld, d_k %lld, d_v %lld",
          (long long)n_tokens, (long long)n_k, (long long)n_v, (long long)d_k, (long long)d_v);
    if (n_tokens == 0) return VT_OK;
    CHECK(q && k && v && g && beta && state && out, "gated_delta_net: a pointer is NULL");
    CHECK(ldqk >= n_k * d_k && ldv >= n_v * d_v && ldo >= n_v * d_v,
          "gated_delta_net: strides ldqk %lld, ldv %lld, ldo %lld too small", (long long)ldqk,
          (long long)ldv, (long long)ldo);
    vt_status st = vt_cpu_scratch_reserve(ctx, 3 * (size_t)d_v * sizeof(double));
    if (st) return st;
    struct delta_job j = {ctx, q, k, v, g, beta, state, out, ldqk, ldv, ldo, n_tokens,
                          n_k, n_v, d_k, d_v, d_v, 1};
    double work = 4.0 * (double)n_tokens * (double)n_v * (double)d_k * (double)d_v;
    if (ctx->n_threads > 1 && work >= VT_CPU_INLINE_WORK) {
        /* strips of 32 columns when heads alone do not give every thread work */
        if (n_v < 2 * ctx->n_threads && d_v > 32) {
            j.cw = 32;
            j.n_strips = ceil_div(d_v, 32);
        }
        vt_cpu_pool_run(ctx->pool, delta_task, &j, n_v * j.n_strips);
    } else {
        for (int64_t h = 0; h < n_v; h++) delta_task(&j, h, 0);
    }
    return VT_OK;
}

/* ======================= elementwise ======================= */

#define ELEM_CHUNK 16384

struct elem_job {
    const vt_backend_ctx *ctx;
    int kind; /* 0 unary, 1 binary, 2 scale, 3 mul_rows */
    int op;
    const float *a, *b;
    float *y;
    int64_t n, nb, per;
    float s;
    /* binary only: how b is laid over a. Decided once by vt_cpu_binary from the
     * caller's (n, nb), never re-derived from the job's unit count: for the row
     * layout j->n counts rows, and a row count equal to nb (4 tokens against 4
     * DeltaNet heads) must not read as "one row". */
    enum { ELEM_B_ROW = 0, ELEM_B_SCALAR = 1, ELEM_B_ROWS = 2 } b_layout;
};

static void elem_task(void *arg, int64_t task, int thread)
{
    (void)thread;
    const struct elem_job *j = arg;
    const vt_cpu_kernels *k = j->ctx->k;
    int64_t i0 = task * j->per, i1 = min64(i0 + j->per, j->n);
    switch (j->kind) {
    case 0: k->unary((vt_unary_op)j->op, j->a + i0, j->y + i0, i1 - i0); break;
    case 1:
        if (j->b_layout == ELEM_B_ROW) /* one row: a slice of columns */
            k->binary((vt_binary_op)j->op, j->a + i0, j->b + i0, j->y + i0, 1, i1 - i0);
        else if (j->b_layout == ELEM_B_SCALAR) /* broadcast scalar: a slice of elements */
            k->binary((vt_binary_op)j->op, j->a + i0, j->b, j->y + i0, i1 - i0, 1);
        else /* units are rows */
            k->binary((vt_binary_op)j->op, j->a + i0 * j->nb, j->b, j->y + i0 * j->nb, i1 - i0, j->nb);
        break;
    case 2: k->scale(j->a + i0, j->y + i0, i1 - i0, j->s); break;
    case 3: k->mul_rows(j->a + i0 * j->nb, j->b + i0, j->y + i0 * j->nb, i1 - i0, j->nb); break;
    }
}

static void elem_run(vt_backend_ctx *ctx, struct elem_job *j, double unit_work)
{
    j->per = units_per_task(ctx, j->n, unit_work);
    if (j->per < j->n && unit_work < ELEM_CHUNK) {
        int64_t min_units = (int64_t)(ELEM_CHUNK / unit_work);
        if (j->per < min_units) j->per = min64(min_units, j->n);
    }
    vt_cpu_pool_run(ctx->pool, elem_task, j, ceil_div(j->n, j->per));
}

vt_status vt_cpu_unary(vt_backend_ctx *ctx, vt_unary_op op, const float *x, float *y, int64_t n)
{
    CHECK(n >= 0, "unary: n %lld < 0", (long long)n);
    CHECK((unsigned)op <= VT_UNARY_TANH, "unary: unknown op %d", (int)op);
    if (n == 0) return VT_OK;
    CHECK(x && y, "unary: x or y is NULL");
    struct elem_job j = {ctx, 0, (int)op, x, NULL, y, n, 1, 0, 0.0f, ELEM_B_ROW};
    elem_run(ctx, &j, 4.0); /* transcendental: a few times a copy */
    return VT_OK;
}

vt_status vt_cpu_binary(vt_backend_ctx *ctx, vt_binary_op op, const float *a, const float *b,
                        float *y, int64_t n, int64_t nb)
{
    CHECK(n >= 0 && nb > 0, "binary: n %lld, nb %lld", (long long)n, (long long)nb);
    CHECK((unsigned)op <= VT_BINARY_MUL, "binary: unknown op %d", (int)op);
    CHECK(n % nb == 0, "binary: nb %lld does not divide n %lld", (long long)nb, (long long)n);
    if (n == 0) return VT_OK;
    CHECK(a && b && y, "binary: a pointer is NULL");
    struct elem_job j = {ctx, 1, (int)op, a, b, y, n, nb, 0, 0.0f, ELEM_B_ROW};
    if (nb == n) {
        elem_run(ctx, &j, 1.0);
    } else if (nb == 1) {
        j.b_layout = ELEM_B_SCALAR;
        elem_run(ctx, &j, 1.0);
    } else {
        j.b_layout = ELEM_B_ROWS;
        j.n = n / nb; /* units are rows */
        elem_run(ctx, &j, (double)nb);
    }
    return VT_OK;
}

vt_status vt_cpu_scale(vt_backend_ctx *ctx, const float *x, float *y, int64_t n, float s)
{
    CHECK(n >= 0, "scale: n %lld < 0", (long long)n);
    if (n == 0) return VT_OK;
    CHECK(x && y, "scale: x or y is NULL");
    struct elem_job j = {ctx, 2, 0, x, NULL, y, n, 1, 0, s, ELEM_B_ROW};
    elem_run(ctx, &j, 1.0);
    return VT_OK;
}

vt_status vt_cpu_mul_rows(vt_backend_ctx *ctx, const float *x, const float *s, float *y,
                          int64_t n_rows, int64_t n_cols)
{
    CHECK(n_rows >= 0 && n_cols >= 0, "mul_rows: shape [%lld, %lld]", (long long)n_rows,
          (long long)n_cols);
    if (n_rows == 0 || n_cols == 0) return VT_OK;
    CHECK(x && s && y, "mul_rows: a pointer is NULL");
    struct elem_job j = {ctx, 3, 0, x, s, y, n_rows, n_cols, 0, 0.0f, ELEM_B_ROW};
    elem_run(ctx, &j, (double)n_cols);
    return VT_OK;
}

/* ======================= copies, gather, scatter ======================= */

struct copy_job {
    const float *src;
    float *dst;
    int64_t ld_src, ld_dst, n_cols, n, per;
    const int32_t *idx;
    const float *wt;
    int kind; /* 0 copy_2d, 1 gather, 2 scatter_add (slices are column ranges) */
};

static void copy_task(void *arg, int64_t task, int thread)
{
    (void)thread;
    const struct copy_job *j = arg;
    if (j->kind == 2) {
        int64_t c0 = task * j->per, c1 = min64(c0 + j->per, j->n_cols);
        for (int64_t i = 0; i < j->n; i++) { /* in order of i: repeated ids add in order */
            const float *s = j->src + i * j->ld_src;
            float *d = j->dst + (int64_t)j->idx[i] * j->ld_dst;
            if (j->wt) {
                float w = j->wt[i];
                for (int64_t c = c0; c < c1; c++) d[c] += w * s[c];
            } else {
                for (int64_t c = c0; c < c1; c++) d[c] += s[c];
            }
        }
        return;
    }
    int64_t r1 = min64((task + 1) * j->per, j->n);
    for (int64_t r = task * j->per; r < r1; r++) {
        const float *s = j->src + (j->kind == 1 ? (int64_t)j->idx[r] : r) * j->ld_src;
        memmove(j->dst + r * j->ld_dst, s, (size_t)j->n_cols * sizeof(float));
    }
}

vt_status vt_cpu_copy_2d(vt_backend_ctx *ctx, const float *src, int64_t ld_src, float *dst,
                         int64_t ld_dst, int64_t n_rows, int64_t n_cols)
{
    CHECK(n_rows >= 0 && n_cols >= 0, "copy_2d: shape [%lld, %lld]", (long long)n_rows,
          (long long)n_cols);
    if (n_rows == 0 || n_cols == 0) return VT_OK;
    CHECK(src && dst, "copy_2d: src or dst is NULL");
    CHECK(ld_src >= n_cols && ld_dst >= n_cols, "copy_2d: strides %lld/%lld < n_cols %lld",
          (long long)ld_src, (long long)ld_dst, (long long)n_cols);
    struct copy_job j = {src, dst, ld_src, ld_dst, n_cols, n_rows, 0, NULL, NULL, 0};
    /* copies are memory-bound: threads only help for large ones */
    j.per = units_per_task(ctx, n_rows, (double)n_cols / 16.0);
    vt_cpu_pool_run(ctx->pool, copy_task, &j, ceil_div(n_rows, j.per));
    return VT_OK;
}

vt_status vt_cpu_gather_rows(vt_backend_ctx *ctx, const float *src, int64_t ld_src,
                             const int32_t *idx, int64_t n, int64_t n_cols, float *dst,
                             int64_t ld_dst)
{
    CHECK(n >= 0 && n_cols >= 0, "gather_rows: n %lld, n_cols %lld", (long long)n, (long long)n_cols);
    if (n == 0 || n_cols == 0) return VT_OK;
    CHECK(src && idx && dst, "gather_rows: a pointer is NULL");
    CHECK(ld_src >= n_cols && ld_dst >= n_cols, "gather_rows: strides %lld/%lld < n_cols %lld",
          (long long)ld_src, (long long)ld_dst, (long long)n_cols);
    for (int64_t i = 0; i < n; i++)
        if (idx[i] < 0)
            return vt_cpu_fail(ctx, VT_ERR_RANGE, "gather_rows: index %d (entry %lld) < 0", idx[i],
                               (long long)i);
    struct copy_job j = {src, dst, ld_src, ld_dst, n_cols, n, 0, idx, NULL, 1};
    j.per = units_per_task(ctx, n, (double)n_cols / 16.0);
    vt_cpu_pool_run(ctx->pool, copy_task, &j, ceil_div(n, j.per));
    return VT_OK;
}

vt_status vt_cpu_scatter_add(vt_backend_ctx *ctx, const float *src, int64_t ld_src,
                             const int32_t *idx, const float *wt, int64_t n, int64_t n_cols,
                             float *dst, int64_t ld_dst)
{
    CHECK(n >= 0 && n_cols >= 0, "scatter_add: n %lld, n_cols %lld", (long long)n, (long long)n_cols);
    if (n == 0 || n_cols == 0) return VT_OK;
    CHECK(src && idx && dst, "scatter_add: a pointer is NULL");
    CHECK(ld_src >= n_cols && ld_dst >= n_cols, "scatter_add: strides %lld/%lld < n_cols %lld",
          (long long)ld_src, (long long)ld_dst, (long long)n_cols);
    for (int64_t i = 0; i < n; i++)
        if (idx[i] < 0)
            return vt_cpu_fail(ctx, VT_ERR_RANGE, "scatter_add: index %d (entry %lld) < 0", idx[i],
                               (long long)i);
    struct copy_job j = {src, dst, ld_src, ld_dst, n_cols, n, 0, idx, wt, 2};
    /* column slices: every slice keeps the order of i */
    int64_t per = units_per_task(ctx, n_cols, (double)n);
    if (per < n_cols) per = (per + 15) / 16 * 16;
    j.per = min64(per, n_cols);
    vt_cpu_pool_run(ctx->pool, copy_task, &j, ceil_div(n_cols, j.per));
    return VT_OK;
}

/* ======================= MoE routing ======================= */

struct topk_job {
    const float *logits;
    int64_t n, k, per, n_rows;
    int renorm;
    int32_t *ids;
    float *weights, *probs;
    void **scratch;
};


static void topk_task(void *arg, int64_t task, int thread)
{
    const struct topk_job *j = arg;
    int64_t r1 = min64((task + 1) * j->per, j->n_rows);
    for (int64_t r = task * j->per; r < r1; r++)
        vt_util_softmax_topk_row(j->logits + r * j->n, j->n, j->k, j->renorm, j->ids + r * j->k,
                                 j->weights + r * j->k, j->probs ? j->probs + r * j->n : NULL,
                                 j->scratch[thread]);
}

vt_status vt_cpu_softmax_topk(vt_backend_ctx *ctx, const float *logits, int64_t n_rows, int64_t n,
                              int64_t k, int renorm, int32_t *ids, float *weights, float *probs)
{
    CHECK(n_rows >= 0 && n > 0 && k > 0 && k <= n, "softmax_topk: n_rows %lld, n %lld, k %lld",
          (long long)n_rows, (long long)n, (long long)k);
    CHECK(n < INT32_MAX, "softmax_topk: n %lld does not fit an int32 id", (long long)n);
    if (n_rows == 0) return VT_OK;
    CHECK(logits && ids && weights, "softmax_topk: a pointer is NULL");
    vt_status st = vt_cpu_scratch_reserve(ctx, (size_t)n * sizeof(float));
    if (st) return st;
    struct topk_job j = {logits, n, k, 0, n_rows, renorm, ids, weights, probs, ctx->scratch};
    j.per = units_per_task(ctx, n_rows, (double)n * (double)(k + 4));
    vt_cpu_pool_run(ctx->pool, topk_task, &j, ceil_div(n_rows, j.per));
    return VT_OK;
}
