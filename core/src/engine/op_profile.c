/*
 * op_profile.c - per-op wall times of a backend through a wrapped table
 * (op_profile.h).
 */
#include "op_profile.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "capabilities.h"
#include "error.h"

enum {
    K_COPY_H2D, K_COPY_D2H, K_COPY_D2D, K_MEMSET, K_RMS_NORM, K_L2_NORM, K_ROPE, K_ATTENTION,
    K_SSM_CONV, K_DELTA_NET, K_UNARY, K_BINARY, K_SCALE, K_MUL_ROWS, K_COPY_2D, K_GATHER,
    K_SCATTER, K_TOPK, K_MOE_ROUTE, K_MOE_FFN, K_MUL_ACT, K_ADD_RMS_NORM, K_DELTA_GATES,
    K_COPY_H2D_ASYNC, K_COPY_H2D_AHEAD,
    K_FIXED,
    K_GET_ROWS = K_FIXED,                  /* + type */
    K_MAT_MUL = K_GET_ROWS + VT_TYPE_COUNT, /* + 2 * type + (routed expert) */
    K_COUNT = K_MAT_MUL + 2 * VT_TYPE_COUNT
};

static const char *const fixed_names[K_FIXED] = {
    "copy_h2d", "copy_d2h", "copy_d2d", "memset_zero", "rms_norm", "l2_norm", "rope_neox",
    "attention", "ssm_conv", "gated_delta_net", "unary", "binary", "scale", "mul_rows",
    "copy_2d", "gather_rows", "scatter_add", "softmax_topk", "moe_route", "moe_ffn", "mul_act", "add_rms_norm",
    "delta_net_gates", "copy_h2d_async (expert publish)",
    "copy_h2d_ahead (expert prefetch)"};

struct vt_op_profile {
    vt_capability *caps;   /* all_ops: the real list with graph declared ABSENT */
    const vt_backend_api *real;
    vt_backend_ctx *ctx;
    uint64_t calls[K_COUNT];
    double seconds[K_COUNT];
    double run_t0;         /* a run of copy_h2d_async open since (0: none) */
};

#define MAX_PROFILES 16
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static vt_op_profile *g_profiles[MAX_PROFILES];
static _Thread_local vt_op_profile *tl_active;
static _Thread_local vt_op_profile *tl_watched; /* vt_op_profile_watch_copies */
static _Thread_local void (*tl_watch_fn)(void *, size_t);
static _Thread_local void *tl_watch_user;

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static vt_op_profile *lookup(const vt_backend_ctx *ctx)
{
    vt_op_profile *p = NULL;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < MAX_PROFILES && !p; i++)
        if (g_profiles[i] && g_profiles[i]->ctx == ctx) p = g_profiles[i];
    pthread_mutex_unlock(&g_mu);
    return p;
}

/* Every wrapper: find the profile, time the real call plus a synchronize
 * when this thread records into it. A context nobody registered is an
 * engine bug, reported as VT_ERR_INTERNAL. PROFILED_CALL leaves the status
 * in st_; PROFILED returns it. */
#define PROFILED_CALL(key, call)                                                                \
    vt_op_profile *p_ = lookup(ctx);                                                            \
    if (!p_) {                                                                                  \
        vt_set_error("op profile: backend context not registered (engine bug)");                \
        return VT_ERR_INTERNAL;                                                                 \
    }                                                                                           \
    const vt_backend_api *R = p_->real;                                                        \
    vt_status st_;                                                                              \
    if (tl_active == p_ && p_->run_t0 != 0.0 && (st_ = close_run(p_)) != VT_OK) return st_;     \
    if (tl_active != p_) {                                                                      \
        st_ = call;                                                                             \
    } else {                                                                                    \
        double t0_ = now_seconds();                                                             \
        st_ = call;                                                                             \
        if (st_ == VT_OK) st_ = R->synchronize(ctx);                                            \
        p_->seconds[key] += now_seconds() - t0_;                                                \
        p_->calls[key]++;                                                                       \
    }
#define PROFILED(key, call)                                                                     \
    PROFILED_CALL(key, call)                                                                    \
    return st_;

/* The device store's publishes from the host tier: timed by run, not one by
 * one. A run is the copies an acquire queues back to back: it opens with a
 * synchronize at its first copy (everything before it has finished) and
 * closes, with a synchronize, at the next other op (or vt_op_profile_end),
 * so the row is the time the copies took queued as they run unprofiled, and
 * their host-side issue between them (a synchronize after each copy would
 * time its latency instead: a 590 KB copy then reaches 31 GB/s of 55). The
 * host's work between the copies of a run counts too: with a host tier that
 * is bookkeeping; without one, a batch of several read waves would add its
 * later waves' file reads, so the row measures the copy rate only for the
 * host-tier path (bench/stream_vs_anchor.sh uses it there). */
static vt_status close_run(vt_op_profile *p)
{
    vt_status st = p->real->synchronize(p->ctx);
    if (st != VT_OK)
        vt_error_prefix("op profile: waiting for the queued expert copies (copy_h2d_async)");
    p->seconds[K_COPY_H2D_ASYNC] += now_seconds() - p->run_t0;
    p->run_t0 = 0.0;
    return st;
}

static vt_status w_copy_h2d_async(vt_backend_ctx *ctx, void *d, const void *s, size_t n)
{
    vt_op_profile *p = lookup(ctx);
    if (!p) {
        vt_set_error("op profile: backend context not registered (engine bug)");
        return VT_ERR_INTERNAL;
    }
    if (tl_active != p) return p->real->copy_h2d_async(ctx, d, s, n);
    if (p->run_t0 == 0.0) {
        vt_status st = p->real->synchronize(ctx);
        if (st != VT_OK) return st;
        p->run_t0 = now_seconds();
    }
    p->calls[K_COPY_H2D_ASYNC]++;
    return p->real->copy_h2d_async(ctx, d, s, n);
}

/* the prefetch's copies on the second queue: timed with a synchronize (of
 * the whole device) too, so under the profile nothing overlaps */
static vt_status w_copy_h2d_ahead(vt_backend_ctx *ctx, const vt_h2d_copy *c, uint32_t n)
{
    PROFILED(K_COPY_H2D_AHEAD, R->copy_h2d_ahead(ctx, c, n))
}

static vt_status w_copy_h2d(vt_backend_ctx *ctx, void *d, const void *s, size_t n)
{
    PROFILED_CALL(K_COPY_H2D, R->copy_h2d(ctx, d, s, n))
    if (st_ == VT_OK && tl_watched == p_ && tl_watch_fn) tl_watch_fn(tl_watch_user, n);
    return st_;
}
static vt_status w_copy_d2h(vt_backend_ctx *ctx, void *d, const void *s, size_t n)
{
    PROFILED(K_COPY_D2H, R->copy_d2h(ctx, d, s, n))
}
static vt_status w_copy_d2d(vt_backend_ctx *ctx, void *d, const void *s, size_t n)
{
    PROFILED(K_COPY_D2D, R->copy_d2d(ctx, d, s, n))
}
static vt_status w_memset_zero(vt_backend_ctx *ctx, void *d, size_t n)
{
    PROFILED(K_MEMSET, R->memset_zero(ctx, d, n))
}
static vt_status w_mat_mul(vt_backend_ctx *ctx, const vt_weight *w, const float *x, int64_t ldx,
                           float *y, int64_t ldy, int64_t n)
{
    int expert = w->name && strstr(w->name, "_exps") != NULL;
    PROFILED(K_MAT_MUL + 2 * (int)w->type + expert, R->mat_mul[w->type](ctx, w, x, ldx, y, ldy, n))
}
/* the wrapped table's members are set only where the real ones are, so a
 * type reaches its wrapper only when it is below VT_TYPE_COUNT */
static vt_status w_mat_mul_ext(vt_backend_ctx *ctx, const vt_weight *w, const float *x,
                               int64_t ldx, float *y, int64_t ldy, int64_t n)
{
    int expert = w->name && strstr(w->name, "_exps") != NULL;
    int k = w->type < VT_TYPE_COUNT ? K_MAT_MUL + 2 * (int)w->type + expert : K_MOE_FFN;
    PROFILED(k, R->mat_mul_ext(ctx, w, x, ldx, y, ldy, n))
}
static vt_status w_get_rows_ext(vt_backend_ctx *ctx, const vt_weight *w, const int32_t *ids,
                                int64_t n, float *out)
{
    int k = w->type < VT_TYPE_COUNT ? K_GET_ROWS + (int)w->type : K_GATHER;
    PROFILED(k, R->get_rows_ext(ctx, w, ids, n, out))
}
static vt_status w_get_rows(vt_backend_ctx *ctx, const vt_weight *w, const int32_t *ids,
                            int64_t n, float *out)
{
    PROFILED(K_GET_ROWS + (int)w->type, R->get_rows[w->type](ctx, w, ids, n, out))
}
static vt_status w_rms_norm(vt_backend_ctx *ctx, const float *x, int64_t ldx, const float *w,
                            float *y, int64_t ldy, int64_t r, int64_t n, float eps)
{
    PROFILED(K_RMS_NORM, R->rms_norm(ctx, x, ldx, w, y, ldy, r, n, eps))
}
static vt_status w_l2_norm(vt_backend_ctx *ctx, const float *x, int64_t ldx, float *y,
                           int64_t ldy, int64_t r, int64_t n, float eps)
{
    PROFILED(K_L2_NORM, R->l2_norm(ctx, x, ldx, y, ldy, r, n, eps))
}
static vt_status w_rope(vt_backend_ctx *ctx, float *x, int64_t ldt, int64_t ldh, int64_t t,
                        int64_t h, int64_t nr, const int32_t *pos, float base, const float *ff)
{
    PROFILED(K_ROPE, R->rope_neox(ctx, x, ldt, ldh, t, h, nr, pos, base, ff))
}
static vt_status w_attention(vt_backend_ctx *ctx, const float *q, int64_t ldq, int64_t ldqh,
                             const float *k, const float *v, float *o, int64_t ldo, int64_t t,
                             int64_t h, int64_t hk, int64_t hd, int64_t p0, int64_t nkv,
                             int64_t win, float s, float sc)
{
    PROFILED(K_ATTENTION, R->attention(ctx, q, ldq, ldqh, k, v, o, ldo, t, h, hk, hd, p0, nkv, win, s, sc))
}
static vt_status w_ssm_conv(vt_backend_ctx *ctx, const float *x, int64_t ldx, const float *w,
                            float *st, float *y, int64_t ldy, int64_t t, int64_t ch, int64_t dc)
{
    PROFILED(K_SSM_CONV, R->ssm_conv(ctx, x, ldx, w, st, y, ldy, t, ch, dc))
}
static vt_status w_delta(vt_backend_ctx *ctx, const float *q, const float *k, int64_t ldqk,
                         const float *v, int64_t ldv, const float *g, const float *b, float *st,
                         float *o, int64_t ldo, int64_t t, int64_t nk, int64_t nv, int64_t dk,
                         int64_t dv)
{
    PROFILED(K_DELTA_NET, R->gated_delta_net(ctx, q, k, ldqk, v, ldv, g, b, st, o, ldo, t, nk, nv, dk, dv))
}
static vt_status w_unary(vt_backend_ctx *ctx, vt_unary_op op, const float *x, float *y, int64_t n)
{
    PROFILED(K_UNARY, R->unary(ctx, op, x, y, n))
}
static vt_status w_binary(vt_backend_ctx *ctx, vt_binary_op op, const float *a, const float *b,
                          float *y, int64_t n, int64_t nb)
{
    PROFILED(K_BINARY, R->binary(ctx, op, a, b, y, n, nb))
}
static vt_status w_scale(vt_backend_ctx *ctx, const float *x, float *y, int64_t n, float s)
{
    PROFILED(K_SCALE, R->scale(ctx, x, y, n, s))
}
static vt_status w_mul_rows(vt_backend_ctx *ctx, const float *x, const float *s, float *y,
                            int64_t r, int64_t n)
{
    PROFILED(K_MUL_ROWS, R->mul_rows(ctx, x, s, y, r, n))
}
static vt_status w_copy_2d(vt_backend_ctx *ctx, const float *s, int64_t lds, float *d,
                           int64_t ldd, int64_t r, int64_t n)
{
    PROFILED(K_COPY_2D, R->copy_2d(ctx, s, lds, d, ldd, r, n))
}
static vt_status w_gather(vt_backend_ctx *ctx, const float *s, int64_t lds, const int32_t *idx,
                          int64_t n, int64_t nc, float *d, int64_t ldd)
{
    PROFILED(K_GATHER, R->gather_rows(ctx, s, lds, idx, n, nc, d, ldd))
}
static vt_status w_scatter(vt_backend_ctx *ctx, const float *s, int64_t lds, const int32_t *idx,
                           const float *wt, int64_t n, int64_t nc, float *d, int64_t ldd)
{
    PROFILED(K_SCATTER, R->scatter_add(ctx, s, lds, idx, wt, n, nc, d, ldd))
}
static vt_status w_topk(vt_backend_ctx *ctx, const float *l, int64_t r, int64_t n, int64_t k,
                        int rn, int32_t *ids, float *w, float *pr)
{
    PROFILED(K_TOPK, R->softmax_topk(ctx, l, r, n, k, rn, ids, w, pr))
}

static vt_status w_moe_route(vt_backend_ctx *ctx, const float *l, int64_t r, int64_t n,
                             int64_t k, int rn, const float *sc, int32_t *ids, float *w)
{
    PROFILED(K_MOE_ROUTE, R->moe_route(ctx, l, r, n, k, rn, sc, ids, w))
}
static vt_status w_moe_ffn(vt_backend_ctx *ctx, const vt_moe_ffn_args *a)
{
    PROFILED(K_MOE_FFN, R->moe_ffn(ctx, a))
}

static vt_status w_mul_act(vt_backend_ctx *ctx, vt_unary_op op, const float *a, int64_t lda,
                           const float *b, int64_t ldb, float *y, int64_t ldy, int64_t r,
                           int64_t c)
{
    PROFILED(K_MUL_ACT, R->mul_act(ctx, op, a, lda, b, ldb, y, ldy, r, c))
}
static vt_status w_add_rms_norm(vt_backend_ctx *ctx, float *x, int64_t ldx, const float *a,
                                int64_t lda, const float *gate, const float *w, float *y,
                                int64_t ldy, int64_t r, int64_t n, float eps)
{
    PROFILED(K_ADD_RMS_NORM, R->add_rms_norm(ctx, x, ldx, a, lda, gate, w, y, ldy, r, n, eps))
}
static vt_status w_delta_gates(vt_backend_ctx *ctx, const float *b, int64_t ldb,
                               const float *al, int64_t lda, const float *dt, const float *sa,
                               float *beta, float *g, int64_t t, int64_t nv)
{
    PROFILED(K_DELTA_GATES, R->delta_net_gates(ctx, b, ldb, al, lda, dt, sa, beta, g, t, nv))
}

vt_op_profile *vt_op_profile_install(vt_backend_api *t, const vt_backend_api *real,
                                     vt_backend_ctx *ctx, int all_ops)
{
    vt_op_profile *p = calloc(1, sizeof *p);
    if (!p) {
        vt_set_error("op profile: out of memory (%zu bytes)", sizeof *p);
        return NULL;
    }
    p->real = real;
    p->ctx = ctx;
    int slot = -1;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < MAX_PROFILES && slot < 0; i++)
        if (!g_profiles[i]) {
            g_profiles[i] = p;
            slot = i;
        }
    pthread_mutex_unlock(&g_mu);
    if (slot < 0) {
        free(p);
        vt_set_error("op profile: more than %d profiled engines at once", MAX_PROFILES);
        return NULL;
    }
#define WRAP(field, fn) if (real->field) t->field = fn
    WRAP(copy_h2d, w_copy_h2d);
    if (!all_ops) return p;
    WRAP(copy_d2h, w_copy_d2h);
    WRAP(copy_d2d, w_copy_d2d);
    WRAP(memset_zero, w_memset_zero);
    WRAP(rms_norm, w_rms_norm);
    WRAP(l2_norm, w_l2_norm);
    WRAP(rope_neox, w_rope);
    WRAP(attention, w_attention);
    WRAP(ssm_conv, w_ssm_conv);
    WRAP(gated_delta_net, w_delta);
    WRAP(unary, w_unary);
    WRAP(binary, w_binary);
    WRAP(scale, w_scale);
    WRAP(mul_rows, w_mul_rows);
    WRAP(copy_2d, w_copy_2d);
    WRAP(gather_rows, w_gather);
    WRAP(scatter_add, w_scatter);
    WRAP(softmax_topk, w_topk);
    if (real->struct_size >= VT_BACKEND_API_SIZE_1_4) /* members of ABI 1.4 */
        WRAP(copy_h2d_async, w_copy_h2d_async);
    if (real->struct_size >= VT_BACKEND_API_SIZE_1_5 && real->copy_h2d_ahead) /* ABI 1.5 */
        WRAP(copy_h2d_ahead, w_copy_h2d_ahead);
    if (real->struct_size >= VT_BACKEND_API_SIZE_1_2) { /* members of ABI 1.2 */
        WRAP(moe_route, w_moe_route);
        WRAP(moe_ffn, w_moe_ffn);
        /* a recorded graph runs as one launch, which per-op times cannot see
         * into (and a synchronize inside a recording is not allowed): with
         * every op profiled the models run their ops one by one */
        t->graph_begin = NULL;
        t->graph_end = NULL;
        t->graph_launch = NULL;
        t->graph_free = NULL;
        t->rope_neox_dpos = NULL;
        t->attention_dpos = NULL;
        t->copy_rows_dpos = NULL;
        /* ... and the copied table declares it so */
        p->caps = real->n_caps ? calloc(real->n_caps, sizeof *p->caps) : NULL;
        if (real->n_caps && !p->caps) {
            vt_op_profile_free(p);
            vt_set_error("op profile: out of memory (%u capabilities)", real->n_caps);
            return NULL;
        }
        for (uint32_t i = 0; i < real->n_caps; i++) {
            p->caps[i] = real->caps[i];
            if (p->caps[i].id == VT_CAP_GRAPH)
                p->caps[i] = (vt_capability){VT_CAP_GRAPH, VT_CAP_ABSENT,
                                             "off while every op is profiled (vt bench --profile)"};
        }
        t->caps = p->caps;
    }
    if (real->struct_size >= VT_BACKEND_API_SIZE_1_3) { /* members of ABI 1.3 */
        WRAP(mul_act, w_mul_act);
        WRAP(add_rms_norm, w_add_rms_norm);
        WRAP(delta_net_gates, w_delta_gates);
    }
    for (int i = 0; i < VT_TYPE_SLOTS; i++) {
        WRAP(mat_mul[i], w_mat_mul);
        WRAP(get_rows[i], w_get_rows);
    }
    if (real->struct_size >= VT_BACKEND_API_SIZE_1_9) { /* members of ABI 1.9 */
        WRAP(mat_mul_ext, w_mat_mul_ext);
        WRAP(get_rows_ext, w_get_rows_ext);
    }
#undef WRAP
    return p;
}

void vt_op_profile_free(vt_op_profile *p)
{
    if (!p) return;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < MAX_PROFILES; i++)
        if (g_profiles[i] == p) g_profiles[i] = NULL;
    pthread_mutex_unlock(&g_mu);
    if (tl_active == p) tl_active = NULL;
    if (tl_watched == p) tl_watched = NULL;
    free(p->caps);
    free(p);
}

void vt_op_profile_watch_copies(vt_op_profile *p, void (*fn)(void *user, size_t bytes),
                                void *user)
{
    tl_watched = fn ? p : NULL;
    tl_watch_fn = fn;
    tl_watch_user = user;
}

void vt_op_profile_begin(vt_op_profile *p) { tl_active = p; }
void vt_op_profile_end(void)
{
    if (tl_active && tl_active->run_t0 != 0.0) (void)close_run(tl_active);
    tl_active = NULL;
}

void vt_op_profile_reset(vt_op_profile *p)
{
    if (!p) return;
    memset(p->calls, 0, sizeof p->calls);
    memset(p->seconds, 0, sizeof p->seconds);
}

static int by_time(const void *a, const void *b)
{
    const vt_op_profile_row *x = a, *y = b;
    return x->seconds < y->seconds ? 1 : x->seconds > y->seconds ? -1 : strcmp(x->name, y->name);
}

int vt_op_profile_rows(const vt_op_profile *p, vt_op_profile_row *rows, int cap)
{
    if (!p) return 0;
    vt_op_profile_row all[K_COUNT];
    int n = 0;
    for (int k = 0; k < K_COUNT; k++) {
        if (!p->calls[k]) continue;
        vt_op_profile_row *r = &all[n++];
        if (k < K_FIXED) snprintf(r->name, sizeof r->name, "%s", fixed_names[k]);
        else if (k < K_MAT_MUL)
            snprintf(r->name, sizeof r->name, "get_rows %s", vt_type_name((uint32_t)(k - K_GET_ROWS)));
        else
            snprintf(r->name, sizeof r->name, "mat_mul %s (%s)",
                     vt_type_name((uint32_t)((k - K_MAT_MUL) / 2)),
                     (k - K_MAT_MUL) % 2 ? "routed experts" : "dense");
        r->calls = p->calls[k];
        r->seconds = p->seconds[k];
    }
    qsort(all, (size_t)n, sizeof all[0], by_time);
    for (int i = 0; i < n && i < cap; i++) rows[i] = all[i];
    return n;
}
