/*
 * vt/plugin_util.h - small header-only helpers that plugins share (plugins do
 * not link the core, so these are static inline; C and C++).
 *
 *  - byte counts in messages: vt_format_bytes (vt/bytes.h, included here);
 *  - vt_util_alloc_named / vt_util_calloc_named: allocations whose failure
 *    message names what was being allocated and how many bytes (DESIGN.md);
 *  - vt_util_softmax_topk_row: the routing of vt_backend_api.softmax_topk
 *    (vt/backend.h, qwen35moe.md §5.8) for one row on the host, the reference
 *    every backend that routes on the host uses, so their ids and weights
 *    agree bit for bit;
 *  - vt_util_moe_ffn_check: moe_ffn's argument checks, shared by the backends;
 *  - vt_util_moe_fused_available, vt_util_graph_available,
 *    vt_util_moe_ffn_streamed: the models' choice of the fused MoE path and
 *    of decode graphs, and a streamed layer's experts group by group;
 *  - vt_util_backend_has: whether a backend declares an optional op PRESENT
 *    and its table is large enough to hold the op's member (a model choosing
 *    between a fused op and its composition);
 *  - vt_util_bucket_by_expert, vt_util_next_expert_group: routed (token,
 *    expert) pairs grouped by expert, and experts in groups of at most top-k;
 *  - vt_util_exp_tab_pin, vt_util_exp_tab_upload: a streamed layer's
 *    expert table uploaded without blocking the host at decode.
 */
#ifndef VT_PLUGIN_UTIL_H
#define VT_PLUGIN_UTIL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vt/backend.h"
#include "vt/bytes.h"
#include "vt/plugin.h"
#include "vt/status.h"

#ifdef __cplusplus
extern "C" {
#endif


/*
 * Backend memory through api->alloc. On failure the backend's message is kept
 * when it already names `what` and a byte count; otherwise it is replaced by
 * "<who>: allocation of 1.19 GiB (N bytes) for <what> failed: <backend's reason>".
 */
static inline vt_status vt_util_alloc_named(const vt_host_api *host, const vt_backend_api *api,
                                            vt_backend_ctx *ctx, const char *who, size_t bytes,
                                            const char *what, void **out)
{
    vt_status st = api->alloc(ctx, bytes, what, out);
    if (st == VT_OK) return VT_OK;
    char prev[512], human[32];
    const char *e = host->last_error ? host->last_error() : NULL;
    snprintf(prev, sizeof prev, "%s", e ? e : "");
    if (strstr(prev, what) && strstr(prev, "bytes")) return st; /* the backend named it */
    host->set_error("%s: allocation of %s (%zu bytes) for %s failed: %s", who,
                    vt_format_bytes(bytes, 0, human, sizeof human), bytes, what,
                    prev[0] ? prev : "the backend gave no reason");
    return st;
}

/* calloc(n, size) (at least one byte) whose failure, or n x size overflow, sets
 * "<who>: allocation of ... for <what> failed: out of memory" and returns NULL. */
static inline void *vt_util_calloc_named(const vt_host_api *host, const char *who, size_t n,
                                         size_t size, const char *what)
{
    size_t bytes;
    char human[32];
    if (n && size > (size_t)-1 / n) {
        host->set_error("%s: allocation of %zu x %zu bytes for %s overflows the address space",
                        who, n, size, what);
        return NULL;
    }
    bytes = n * size;
    void *p = bytes ? calloc(n, size) : calloc(1, 1);
    if (!p)
        host->set_error("%s: allocation of %s (%zu bytes) for %s failed: out of memory", who,
                        vt_format_bytes(bytes, 0, human, sizeof human), bytes, what);
    return p;
}

/*
 * softmax_topk for one row (vt/backend.h): p = softmax(l) in double, rounded
 * to float (probs, may be NULL, receives it); k times the largest remaining p
 * (strictly greater: the lower index wins a tie; NaNs last, lowest index
 * first) into ids/wts; with renorm the weights are divided by the sum of the
 * picked p (at least 6.103515625e-5). p: n floats of scratch.
 */
static inline void vt_util_softmax_topk_row(const float *l, int64_t n, int64_t k, int renorm,
                                            int32_t *ids, float *wts, float *probs, float *p)
{
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (l[i] > mx) mx = l[i];
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += exp((double)l[i] - (double)mx);
    for (int64_t i = 0; i < n; i++) {
        p[i] = (float)(exp((double)l[i] - (double)mx) / sum);
        if (probs) probs[i] = p[i];
    }
    double picked = 0.0;
    for (int64_t m = 0; m < k; m++) {
        int64_t best = -1;
        for (int64_t i = 0; i < n; i++)
            if (p[i] >= 0.0f && (best < 0 || p[i] > p[best])) best = i;
        if (best < 0) /* only NaNs left: take the lowest unpicked index */
            for (int64_t i = 0; i < n && best < 0; i++)
                if (!(p[i] < 0.0f)) best = i;
        ids[m] = (int32_t)best;
        wts[m] = p[best];
        picked += p[best];
        p[best] = -1.0f; /* probabilities are >= 0: -1 marks "picked" */
    }
    if (renorm) {
        double den = picked > 6.103515625e-5 ? picked : 6.103515625e-5;
        for (int64_t m = 0; m < k; m++) wts[m] = (float)((double)wts[m] / den);
    }
}

/* 1 when api declares capability id PRESENT and api->struct_size covers the
 * member ending at member_end (offsetof(vt_backend_api, m) + sizeof(void *));
 * a backend built for an older ABI minor does not declare the newer ids. */
static inline int vt_util_backend_has(const vt_backend_api *api, uint32_t id, size_t member_end)
{
    if (!api || api->struct_size < member_end) return 0;
    return vt_backend_declares(api, id);
}

/*
 * Bucket the n_pairs = n_tokens x k routed (token, weight) pairs of a MoE
 * layer by expert, keeping token order within an expert (a counting sort):
 * ids/w are the router's [n_tokens][k] choices; on return cnt[e] (cnt has
 * n_expert + 1 entries) is the END of expert e's run in tok/wout and its start
 * is cnt[e-1] (0 for e = 0); tok[j] is the token of pair j, wout[j] its
 * weight. Returns -1, or the index of the first pair whose expert id is
 * outside [0, n_expert) (nothing is bucketed then).
 */
static inline int64_t vt_util_bucket_by_expert(const int32_t *ids, const float *w, int64_t n_pairs,
                                               int64_t k, int64_t n_expert, int32_t *cnt,
                                               int32_t *tok, float *wout)
{
    memset(cnt, 0, (size_t)(n_expert + 1) * sizeof *cnt);
    for (int64_t i = 0; i < n_pairs; i++) {
        if (ids[i] < 0 || ids[i] >= n_expert) return i;
        cnt[ids[i] + 1]++;
    }
    for (int64_t e = 0; e < n_expert; e++) cnt[e + 1] += cnt[e];
    for (int64_t i = 0; i < n_pairs; i++) {
        int32_t at = cnt[ids[i]]++;
        tok[at] = (int32_t)(i / k);
        wout[at] = w[i];
    }
    return -1;
}

/*
 * The argument checks of vt_backend_api.moe_ffn that every backend makes
 * (vt/backend.h, vt_moe_ffn_args): returns 1 when the call has work, 0 when
 * there is none (no tokens, an empty expert range), -1 for invalid
 * arguments with the reason in why (naming the experts' tensor): NULL args
 * or pointers, a struct_size below ABI 1.2's, shapes, the range, the
 * activation, strides, weight type ids vt does not know, rows that are not
 * whole blocks, a scratch below vt_moe_ffn_scratch_bytes(). Which types and
 * shapes a backend has kernels for it checks itself.
 */
static inline int vt_util_moe_ffn_check(const vt_moe_ffn_args *a, char *why, size_t cap)
{
    if (!a) {
        snprintf(why, cap, "moe_ffn: args is NULL");
        return -1;
    }
    if (a->struct_size < offsetof(vt_moe_ffn_args, name) + sizeof a->name) {
        snprintf(why, cap, "moe_ffn: args struct_size %u is smaller than ABI 1.2's", a->struct_size);
        return -1;
    }
    const char *nm = a->name ? a->name : "(unnamed experts)";
    const int64_t T = a->n_tokens, K = a->k, E = a->n_embd, F = a->n_ff, NX = a->n_expert;
    if (T < 0 || K < 1 || E < 1 || F < 1 || NX < 1) {
        snprintf(why, cap, "moe_ffn %s: n_tokens %lld, k %lld, n_embd %lld, n_ff %lld, n_expert %lld",
                 nm, (long long)T, (long long)K, (long long)E, (long long)F, (long long)NX);
        return -1;
    }
    if (a->expert_begin < 0 || a->expert_begin > a->expert_end || a->expert_end > NX) {
        snprintf(why, cap, "moe_ffn %s: expert range [%lld, %lld) not within [0, %lld]", nm,
                 (long long)a->expert_begin, (long long)a->expert_end, (long long)NX);
        return -1;
    }
    if (a->act != VT_MOE_ACT_SILU && a->act != VT_MOE_ACT_GELU_TANH) {
        snprintf(why, cap, "moe_ffn %s: activation %u unknown", nm, a->act);
        return -1;
    }
    if (T == 0 || a->expert_begin == a->expert_end) return 0;
    if (!a->x || !a->ids || !a->weights || !a->out || !a->w_gate || !a->w_up || !a->w_down) {
        snprintf(why, cap, "moe_ffn %s: a pointer is NULL", nm);
        return -1;
    }
    if (a->ldx < E || a->ldo < E) {
        snprintf(why, cap, "moe_ffn %s: ldx %lld / ldo %lld < n_embd %lld", nm, (long long)a->ldx,
                 (long long)a->ldo, (long long)E);
        return -1;
    }
    const uint32_t types[3] = {a->type_gate, a->type_up, a->type_down};
    static const char *const which[3] = {"gate", "up", "down"};
    for (int i = 0; i < 3; i++) {
        if (types[i] >= VT_TYPE_COUNT || vt_type_block_size(types[i]) == 0) {
            snprintf(why, cap, "moe_ffn %s: weight type id %u unknown", nm, types[i]);
            return -1;
        }
        int64_t n_in = i < 2 ? E : F;
        if (n_in % (int64_t)vt_type_block_size(types[i])) {
            snprintf(why, cap, "moe_ffn %s: %s rows of %lld elements are not whole %s blocks", nm,
                     which[i], (long long)n_in, vt_type_name(types[i]));
            return -1;
        }
    }
    const size_t need = vt_moe_ffn_scratch_bytes(T, K, E, F, NX);
    if (!a->scratch || a->scratch_bytes < need) {
        snprintf(why, cap, "moe_ffn %s: scratch of %zu bytes, %zu needed (vt_moe_ffn_scratch_bytes)",
                 nm, a->scratch_bytes, need);
        return -1;
    }
    return 1;
}

/*
 * The next group of routed experts of a layer whose pairs
 * vt_util_bucket_by_expert bucketed (cnt as it leaves it): from expert
 * *e_next on, the first (at most) k experts that have pairs, in increasing
 * id. Returns how many (0: none left); ids (may be NULL) receives them,
 * *first and *last the first and the last, and *e_next moves past the last
 * expert looked at, so the group's expert range is [*first, *e_next). A
 * streamed layer makes each group resident at once (the arena holds at
 * least k experts' slots).
 */
static inline uint32_t vt_util_next_expert_group(const int32_t *cnt, int64_t n_expert, int64_t k,
                                                 int64_t *e_next, int32_t *ids, int64_t *first,
                                                 int64_t *last)
{
    uint32_t n = 0;
    int64_t e;
    *first = *last = -1;
    for (e = *e_next; e < n_expert && (int64_t)n < k; e++) {
        if (cnt[e] - (e ? cnt[e - 1] : 0) == 0) continue;
        if (ids) ids[n] = (int32_t)e;
        if (*first < 0) *first = e;
        *last = e;
        n++;
    }
    *e_next = e;
    return n;
}

/*
 * The next RMSNorm of the residual stream, with the residual addition a
 * model left pending for it (ABI 1.3 add_rms_norm): rows r0 .. r0 + n of x
 * ([rows][n_embd], contiguous) get x += sigmoid(gate[r])·a[r] (res_gate
 * NULL: x += a[r]) when *res_a is set, then y = rms_norm(x)·w into y
 * ([n][n_embd]; y NULL: only the addition). *res_a is cleared; with nothing
 * pending it is rms_norm (or nothing when y is NULL).
 */
static inline vt_status vt_util_norm_pending(const vt_backend_api *api, vt_backend_ctx *ctx,
                                             float *x, const float **res_a,
                                             const float *res_gate, int64_t r0, int64_t n,
                                             int64_t n_embd, const float *w, float *y, float eps)
{
    const int64_t E = n_embd;
    if (*res_a) {
        const float *a = *res_a + r0 * E, *gate = res_gate ? res_gate + r0 : NULL;
        *res_a = NULL;
        return api->add_rms_norm(ctx, x + r0 * E, E, a, E, gate, w, y, E, n, E, eps);
    }
    if (!y) return VT_OK;
    return api->rms_norm(ctx, x + r0 * E, E, w, y, E, n, E, eps);
}

/* A fallback said once to the user: host->note_fallback (host ABI 1.1,
 * counted), or a WARN through host->log under an older core. */
static inline void vt_util_note_fallback(const vt_host_api *host, const char *why)
{
    if (host->struct_size >= offsetof(vt_host_api, note_fallback) + sizeof(void *) &&
        host->note_fallback)
        host->note_fallback(why);
    else
        host->log(VT_LOG_WARN, "%s", why);
}

/*
 * A model's comparison switch in the environment (VT_MOE_FFN, VT_GRAPH,
 * VT_FUSED_OPS): 1 when it is "0" (the switch turns the path off), 0 when
 * unset or "1"; any other value is reported through host->log (WARN, naming
 * it; host may be NULL) and means on, so that no setting is silently dropped.
 */
static inline int vt_util_env_off(const vt_host_api *host, const char *name)
{
    const char *env = getenv(name);
    if (!env) return 0;
    if (!strcmp(env, "0")) return 1;
    if (strcmp(env, "1") && host)
        host->log(VT_LOG_WARN, "%s=%s is neither 0 nor 1: ignored (the path stays on where the "
                  "backend has it)", name, env);
    return 0;
}

/*
 * Whether a model should take the fused routed-expert path: the backend
 * declares op.moe_route and op.moe_ffn and env VT_MOE_FFN is not "0" (the
 * switch that forces the per-expert ops, for comparisons).
 */
static inline int vt_util_moe_fused_available(const vt_backend_api *api)
{
    const char *env = getenv("VT_MOE_FFN");
    return !(env && !strcmp(env, "0")) &&
           vt_util_backend_has(api, VT_CAP_OP_MOE_ROUTE,
                               offsetof(vt_backend_api, moe_route) + sizeof(void *)) &&
           vt_util_backend_has(api, VT_CAP_OP_MOE_FFN,
                               offsetof(vt_backend_api, moe_ffn) + sizeof(void *));
}

/*
 * Whether a model may record its decode steps as graphs: the backend
 * declares VT_CAP_GRAPH (which the core accepts only with all seven members
 * set, and the op profiler declares ABSENT) and env VT_GRAPH is not "0".
 */
static inline int vt_util_graph_available(const vt_backend_api *api)
{
    const char *env = getenv("VT_GRAPH");
    return !(env && !strcmp(env, "0")) &&
           vt_util_backend_has(api, VT_CAP_GRAPH,
                               offsetof(vt_backend_api, copy_rows_dpos) + sizeof(void *));
}

/*
 * Whether a model should call ABI 1.3's element-wise fusions (mul_act,
 * add_rms_norm, delta_net_gates, vt/backend.h) and merge the weight
 * matrices that read one input into one matmul: 1 when the backend declares
 * all three PRESENT and env VT_FUSED_OPS is not "0" (the switch that forces
 * the composed ops, for comparisons; a value other than "0" or "1" is
 * reported through host->log once per call and ignored).
 */
static inline int vt_util_fusions_available(const vt_host_api *host, const vt_backend_api *api)
{
    const size_t end = offsetof(vt_backend_api, delta_net_gates) + sizeof(void *);
    return !vt_util_env_off(host, "VT_FUSED_OPS") && vt_util_backend_has(api, VT_CAP_OP_MUL_ACT, end) &&
           vt_util_backend_has(api, VT_CAP_OP_ADD_RMS_NORM, end) &&
           vt_util_backend_has(api, VT_CAP_OP_DELTA_NET_GATES, end);
}

/*
 * Merging weight matrices that read one input (a model's load, on a backend
 * whose weights are copies in device memory): one matmul over the merged
 * rows computes every part's outputs, one launch for a one-token step
 * instead of n. vt_util_merge_bytes: the merged size of parts[0..n) when
 * they can be merged (every data set, one type, one n_in), else 0.
 * vt_util_merge_weights: copy the parts' rows into dst (device memory of
 * vt_util_merge_bytes bytes) in the order given and wait for the copies;
 * old[i] gets part i's previous data (the caller frees its allocations),
 * each part's data then points at its rows in dst, and *out describes the
 * merged [n_in -> Σ n_out] matrix (its name the first part's).
 */
static inline size_t vt_util_merge_bytes(vt_weight *const *parts, int n)
{
    size_t bytes = 0;
    for (int i = 0; i < n; i++) {
        if (!parts[i]->data || parts[i]->type != parts[0]->type ||
            parts[i]->n_in != parts[0]->n_in || parts[i]->row_bytes != parts[0]->row_bytes)
            return 0;
        bytes += (size_t)parts[i]->n_out * (size_t)parts[i]->row_bytes;
    }
    return bytes;
}

static inline vt_status vt_util_merge_weights(const vt_backend_api *api, vt_backend_ctx *ctx,
                                              vt_weight *const *parts, int n, void *dst,
                                              const void **old, vt_weight *out)
{
    size_t off = 0;
    int64_t rows = 0;
    vt_status st;
    for (int i = 0; i < n; i++) {
        const size_t bytes = (size_t)parts[i]->n_out * (size_t)parts[i]->row_bytes;
        if ((st = api->copy_d2d(ctx, (uint8_t *)dst + off, parts[i]->data, bytes)) != VT_OK)
            return st;
        off += bytes;
    }
    if ((st = api->synchronize(ctx)) != VT_OK) return st;
    *out = *parts[0];
    off = 0;
    for (int i = 0; i < n; i++) {
        old[i] = parts[i]->data;
        parts[i]->data = (uint8_t *)dst + off;
        off += (size_t)parts[i]->n_out * (size_t)parts[i]->row_bytes;
        rows += parts[i]->n_out;
    }
    out->n_out = rows;
    out->data = dst;
    return VT_OK;
}

/*
 * A streamed layer's expert pointer table (device [3][n_expert] pointers,
 * rewritten after every acquire) reaches the device from a host image.
 * copy_h2d returns once its copy is done, so it first waits for every op and
 * copy queued before it, the acquire's expert copies included: while those
 * run the host queues nothing, and once they end the ops after the table
 * start only as fast as the host issues them. With copy.h2d_async (ABI 1.4)
 * and a page-locked image the upload is queued instead, and the host goes on
 * queueing moe_ffn, the shared expert and the next layer's ops while the
 * expert copies run.
 *
 * vt_util_exp_tab_pin: replaces the pageable image *image (malloc'ed, `bytes`)
 * by a page-locked copy (within the pinned budget, host->pinned_reserve) when
 * the backend declares copy.h2d_async and pinned.host_alloc PRESENT; returns
 * 1 then, else 0 with *image unchanged (the caller keeps copy_h2d).
 * vt_util_exp_tab_image_free: frees the image either way (`pinned` as
 * vt_util_exp_tab_pin returned; NULL allowed).
 * vt_util_exp_tab_upload: copies `bytes` of image to dev, queued when the
 * image is page-locked (`pinned`) and `queued` is set, else with copy_h2d.
 * The caller sets `queued` only when the image is not written again before a
 * copy_d2h or synchronize has returned (copy_h2d_async's contract): one
 * group per vt_util_moe_ffn_streamed* call (a one-token step routes at most
 * top-k experts), since every such call starts with the ids' copy_d2h, which
 * waits for the previous call's upload. A call of several groups (prefill)
 * rewrites the image between its groups and uploads with copy_h2d.
 */
static inline int vt_util_exp_tab_pin(const vt_host_api *host, const vt_backend_api *api,
                                      vt_backend_ctx *ctx, const void ***image, size_t bytes,
                                      const char *what)
{
    const size_t end = offsetof(vt_backend_api, copy_h2d_async) + sizeof(void *);
    void *p = NULL;
    if (!vt_util_backend_has(api, VT_CAP_COPY_H2D_ASYNC, end) ||
        !vt_util_backend_has(api, VT_CAP_PINNED_HOST_ALLOC, end) || !api->host_alloc_pinned ||
        !api->host_free_pinned ||
        host->struct_size < offsetof(vt_host_api, pinned_release) + sizeof(void *) ||
        !host->pinned_reserve || !host->pinned_release || !host->pinned_reserve(bytes))
        return 0;
    if (api->host_alloc_pinned(ctx, bytes, what, &p) != VT_OK) {
        host->pinned_release(bytes);
        return 0;
    }
    memcpy(p, *image, bytes);
    free((void *)*image);
    *image = (const void **)p;
    return 1;
}

static inline void vt_util_exp_tab_image_free(const vt_host_api *host, const vt_backend_api *api,
                                              vt_backend_ctx *ctx, const void **image,
                                              size_t bytes, int pinned)
{
    if (!image) return;
    if (!pinned) {
        free((void *)image);
        return;
    }
    api->host_free_pinned(ctx, (void *)image);
    host->pinned_release(bytes);
}

static inline vt_status vt_util_exp_tab_upload(const vt_backend_api *api, vt_backend_ctx *ctx,
                                               void *dev, const void *image, size_t bytes,
                                               int pinned, int queued)
{
    return pinned && queued ? api->copy_h2d_async(ctx, dev, image, bytes)
                            : api->copy_h2d(ctx, dev, image, bytes);
}

/*
 * A streamed layer's routed experts through moe_ffn (vt/backend.h): the
 * routing ids (a->ids, device [n_tokens][k]) are copied to ids_host, counted
 * per expert into cnt (n_expert + 1 int32: cnt[e] is the end of expert e's
 * run, as vt_util_bucket_by_expert leaves it), and each group of at most k
 * experts (vt_util_next_expert_group, ids into grp_ids) is acquired from the
 * streamer into slots (k x matrices pointers), its pointer-table entries are
 * written by write_table(user, grp_ids, n, slots), and one moe_ffn runs over
 * the group's expert range: the bits of one call over all experts.
 * An id outside [0, n_expert) is VT_ERR_INTERNAL naming who and the layer.
 */
typedef vt_status (*vt_util_table_fn)(void *user, uint32_t layer, const int32_t *ids, uint32_t n,
                                      const void *const *slots);
/* The routing ids of a streamed layer to the host (the first part of
 * vt_util_moe_ffn_streamed_ahead): a->ids (n_tokens * k) and the n_ahead
 * predicted ids after them into ids_host, each checked (an id outside
 * [0, n_expert) is VT_ERR_INTERNAL naming who and the layer), counted per
 * expert into cnt in the bucketed form (cnt[e] is the end of expert e's run). */
static inline vt_status vt_util_moe_ids_to_host(const vt_host_api *host, const vt_backend_api *api,
                                                vt_backend_ctx *ctx, uint32_t layer,
                                                const vt_moe_ffn_args *a, int32_t *ids_host,
                                                int32_t *cnt, const char *who,
                                                uint32_t ahead_layer, uint32_t n_ahead)
{
    const int64_t P = a->n_tokens * a->k, nx = a->n_expert;
    vt_status st = api->copy_d2h(ctx, ids_host, a->ids, (size_t)(P + n_ahead) * sizeof(int32_t));
    if (st != VT_OK) return st;
    memset(cnt, 0, (size_t)(nx + 1) * sizeof *cnt);
    for (int64_t i = 0; i < P + (int64_t)n_ahead; i++) {
        if (ids_host[i] < 0 || ids_host[i] >= nx) {
            host->set_error("%s: blk.%u router picked expert %d of %lld", who,
                            i < P ? layer : ahead_layer, ids_host[i], (long long)nx);
            return VT_ERR_INTERNAL;
        }
        if (i < P) cnt[ids_host[i] + 1]++;
    }
    for (int64_t e = 0; e < nx; e++) cnt[e + 1] += cnt[e];
    /* cnt[e + 1] is now the end of expert e's run: shift to the bucketed form */
    memmove(cnt, cnt + 1, (size_t)nx * sizeof *cnt);
    return VT_OK;
}

/*
 * As vt_util_moe_ffn_streamed, with a prediction for the next layer: when
 * n_ahead > 0, the n_ahead predicted ids of layer ahead_layer lie on the
 * device right after the routing ids (a->ids + n_tokens * k) and come to
 * the host in the same copy (ids_host holds n_tokens * k + n_ahead; the
 * prediction at ids_host + n_tokens * k), checked like the routed ones (an
 * id outside [0, n_expert) is VT_ERR_INTERNAL). The caller passes them to
 * host->experts_prefetch (ABI 1.5) once it has queued the ops it wants to
 * start first (the shared expert), so the copies run beside this layer's
 * experts and the next layer's attention.
 */
static inline vt_status vt_util_moe_ffn_streamed_ahead(
    const vt_host_api *host, const vt_backend_api *api, vt_backend_ctx *ctx,
    vt_expert_streamer *streamer, uint32_t layer, vt_moe_ffn_args *a, int32_t *ids_host,
    int32_t *cnt, int32_t *grp_ids, const void **slots, vt_util_table_fn write_table, void *user,
    const char *who, uint32_t ahead_layer, uint32_t n_ahead)
{
    const int64_t nx = a->n_expert;
    vt_status st = vt_util_moe_ids_to_host(host, api, ctx, layer, a, ids_host, cnt, who,
                                           ahead_layer, n_ahead);
    if (st != VT_OK) return st;
    int64_t e_next = 0, e_first, e_last;
    uint32_t n;
    while ((n = vt_util_next_expert_group(cnt, nx, a->k, &e_next, grp_ids, &e_first, &e_last))) {
        if ((st = host->experts_acquire(streamer, layer, grp_ids, n, slots)) != VT_OK) return st;
        if ((st = write_table(user, layer, grp_ids, n, slots)) != VT_OK) return st;
        a->expert_begin = e_first;
        a->expert_end = e_next;
        if ((st = api->moe_ffn(ctx, a)) != VT_OK) return st;
    }
    return VT_OK;
}

/*
 * The host's part of a streamed one-token layer whose moe_ffn runs later
 * from a recorded graph (a decode step cut into graph segments at each
 * layer's routing): the ids to the host as vt_util_moe_ids_to_host, the
 * token's top-k experts (one group) acquired into slots and the table
 * written, a->expert_begin .. expert_end set to the whole [0, n_expert) so
 * that the recorded moe_ffn serves every token (one token's pairs are all in
 * its group: the same pairs, the same bits, as the group's range). More than
 * one group (a->n_tokens > 1) is VT_ERR_INVALID_ARG.
 */
static inline vt_status vt_util_moe_streamed_acquire_one(
    const vt_host_api *host, const vt_backend_api *api, vt_backend_ctx *ctx,
    vt_expert_streamer *streamer, uint32_t layer, vt_moe_ffn_args *a, int32_t *ids_host,
    int32_t *cnt, int32_t *grp_ids, const void **slots, vt_util_table_fn write_table, void *user,
    const char *who, uint32_t ahead_layer, uint32_t n_ahead)
{
    if (a->n_tokens != 1) {
        host->set_error("%s: blk.%u: a graph segment's acquire takes one token, not %lld", who,
                        layer, (long long)a->n_tokens);
        return VT_ERR_INVALID_ARG;
    }
    vt_status st = vt_util_moe_ids_to_host(host, api, ctx, layer, a, ids_host, cnt, who,
                                           ahead_layer, n_ahead);
    if (st != VT_OK) return st;
    int64_t e_next = 0, e_first, e_last;
    uint32_t n = vt_util_next_expert_group(cnt, a->n_expert, a->k, &e_next, grp_ids, &e_first,
                                           &e_last);
    if ((st = host->experts_acquire(streamer, layer, grp_ids, n, slots)) != VT_OK) return st;
    if ((st = write_table(user, layer, grp_ids, n, slots)) != VT_OK) return st;
    a->expert_begin = 0;
    a->expert_end = a->n_expert;
    return VT_OK;
}

static inline vt_status vt_util_moe_ffn_streamed(const vt_host_api *host, const vt_backend_api *api,
                                                 vt_backend_ctx *ctx, vt_expert_streamer *streamer,
                                                 uint32_t layer, vt_moe_ffn_args *a,
                                                 int32_t *ids_host, int32_t *cnt, int32_t *grp_ids,
                                                 const void **slots, vt_util_table_fn write_table,
                                                 void *user, const char *who)
{
    return vt_util_moe_ffn_streamed_ahead(host, api, ctx, streamer, layer, a, ids_host, cnt,
                                          grp_ids, slots, write_table, user, who, 0, 0);
}

/* Whether the host's streamer prefetches (ABI 1.5 host table and
 * expert_cache.prefetch on): a model computes predictions only then. */
static inline int vt_util_prefetch_on(const vt_host_api *host, const vt_expert_streamer *s)
{
    return s && host->struct_size >= offsetof(vt_host_api, experts_prefetch) + sizeof(void *) &&
           host->experts_prefetch_on && host->experts_prefetch && host->experts_prefetch_on(s);
}

/* Drop tensor t's mapped pages once its bytes are on the device (host ABI
 * 1.6, gguf_release_pages); a no-op under an older core. The outcome only
 * changes the resident set, so a failure is logged, never returned. */
static inline void vt_util_release_pages(const vt_host_api *host, const vt_gguf *g,
                                         const vt_gguf_tensor *t)
{
    if (host->struct_size < offsetof(vt_host_api, gguf_release_pages) + sizeof(void *) ||
        !host->gguf_release_pages)
        return;
    if (host->gguf_release_pages(g, t) != VT_OK)
        host->log(VT_LOG_INFO, "%s (the pages stay resident)", host->last_error());
}

#ifdef __cplusplus
}
#endif
#endif
