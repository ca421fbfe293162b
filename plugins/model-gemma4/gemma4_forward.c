/*
 * gemma4_forward.c - the Gemma 4 forward pass (gemma4.md §5), expressed
 * entirely as backend ops (vt/backend.h); the only host-side arithmetic is on
 * the router's top-k weights that softmax_topk returns in host memory (the
 * per-expert scale, §5.3) and the bucketing of routed tokens by expert.
 *
 * Layout of the activations (T = tokens of this call, rows contiguous):
 *   x [T][D] residual stream, h [T][D] normed input of a sublayer, a [T][D]
 *   sublayer output; q/att [T][H*d]; kp/vp [T][Hkv*d] raw projections;
 *   f_m / f_e [T][D] the MLP and expert branches of the FFN.
 *
 * Pitfalls of §8 are referenced by number where the code guards against them.
 */
#include <inttypes.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gemma4.h"

#define TRY(x) do { vt_status st_ = (x); if (st_ != VT_OK) return st_; } while (0)

/* y[n][F] -> gelu(g) ⊙ u: GeGLU hidden for rows of x [n][D] (ld D), then
 * y = W_down · hidden; y [n][D]. (§5.3, pitfall 17: tanh GELU) */
static vt_status g4_geglu(vt_model *m, const vt_weight *wg, const vt_weight *wu,
                          const vt_weight *wd, const vt_weight *wgu, const float *x, float *y,
                          int64_t n)
{
    const int64_t E = m->hp.n_embd, F = wg->n_out;
    if (m->fuse && wgu->data) { /* merged: [gate | up] rows of f_g, GELU·mul into f_u */
        TRY(vt_mc_mm(&m->mc, wgu, x, E, m->f_g, 2 * F, n));
        TRY(m->api->mul_act(m->ctx, VT_UNARY_GELU_TANH, m->f_g, 2 * F, m->f_g + F, 2 * F, m->f_u,
                            F, n, F));
        return vt_mc_mm(&m->mc, wd, m->f_u, F, y, E, n);
    }
    TRY(vt_mc_mm(&m->mc, wg, x, E, m->f_g, F, n));
    TRY(vt_mc_mm(&m->mc, wu, x, E, m->f_u, F, n));
    if (m->fuse) {
        TRY(m->api->mul_act(m->ctx, VT_UNARY_GELU_TANH, m->f_g, F, m->f_u, F, m->f_g, F, n, F));
    } else {
        TRY(m->api->unary(m->ctx, VT_UNARY_GELU_TANH, m->f_g, m->f_g, n * F));
        TRY(m->api->binary(m->ctx, VT_BINARY_MUL, m->f_g, m->f_u, m->f_g, n * F, n * F));
    }
    TRY(vt_mc_mm(&m->mc, wd, m->f_g, F, y, E, n));
    return VT_OK;
}

/* ---------------------------------------------------------------- */
/* sliding-window cache (§6)                                          */
/* ---------------------------------------------------------------- */

/*
 * Before a step of T tokens at positions pos0.., make room in every S-layer
 * cache: it holds positions swa_base .. swa_base + swa_cap - 1 in rows
 * 0 .. swa_cap - 1. The step needs positions pos0 - n_swa + 1 .. pos0 + T - 1
 * (the window of its first query, pitfall 8, plus its own tokens). When
 * pos0 + T would run past the end, the kept tail pos0 - n_swa + 1 .. pos0 - 1
 * moves to the front (in blocks no longer than the shift, so no copy
 * overlaps its source) and swa_base follows.
 */
static vt_status g4_swa_shift(vt_model *m, vt_model_seq *s, int64_t T)
{
    const int64_t pos0 = s->pos;
    if (pos0 + T - s->swa_base <= (int64_t)m->swa_cap) return VT_OK;
    int64_t new_base = pos0 - ((int64_t)m->hp.n_swa - 1);
    if (new_base < s->swa_base) new_base = s->swa_base;
    const int64_t shift = new_base - s->swa_base, keep = pos0 - new_base;
    if (shift <= 0 || keep + T > (int64_t)m->swa_cap) {
        m->host->set_error("gemma4: internal: sliding cache of %u rows cannot hold %" PRId64
                           " kept + %" PRId64 " new positions", m->swa_cap, keep, T);
        return VT_ERR_INTERNAL;
    }
    for (uint32_t il = 0; il < m->hp.n_layer; il++) {
        const gemma4_layer *ly = &m->layers[il];
        if (!ly->swa || !ly->has_kv) continue;
        const int64_t W = (int64_t)(gemma4_kv_row_bytes(m, il) / sizeof(float));
        for (int64_t r = 0; r < keep; r += shift) {
            int64_t n = keep - r < shift ? keep - r : shift;
            TRY(m->api->copy_2d(m->ctx, s->k_cache[il] + (shift + r) * W, W,
                                s->k_cache[il] + r * W, W, n, W));
            TRY(m->api->copy_2d(m->ctx, s->v_cache[il] + (shift + r) * W, W,
                                s->v_cache[il] + r * W, W, n, W));
        }
    }
    s->swa_base = new_base;
    return VT_OK;
}

/* ---------------------------------------------------------------- */
/* attention block (§5.3)                                             */
/* ---------------------------------------------------------------- */

static vt_status g4_attention(vt_model *m, vt_model_seq *s, uint32_t il, int64_t T, int graph)
{
    const gemma4_hparams *hp = &m->hp;
    const gemma4_layer *ly = &m->layers[il];
    const vt_backend_api *A = m->api;
    vt_backend_ctx *c = m->ctx;
    const int64_t E = hp->n_embd, hd = ly->head_dim, nh = ly->n_head, nkv = ly->n_head_kv;
    const int64_t QD = nh * hd, KVD = nkv * hd;
    const float *ff = ly->swa ? NULL : m->rope_freqs; /* pitfalls 6, 22 */
    /* cache rows: F layers by position, S layers relative to swa_base */
    const int64_t row0 = ly->swa ? s->pos - s->swa_base : s->pos;

    if (graph) {
        /* a recorded step: the same arithmetic, positions and cache rows from
         * d_pos ([0] position and F-layer row, [1] S-layer row) at replay */
        const int32_t *drow = ly->swa ? m->d_pos + 1 : m->d_pos;
        const int64_t rows = ly->swa ? (int64_t)m->swa_cap : (int64_t)m->n_ctx;
        /* merged (w_qkv): one matmul into q's row [q | k | v] */
        const int merged = m->fuse && ly->has_kv && ly->w_qkv.data;
        float *kp = merged ? m->q + QD : m->kp;
        if (merged) TRY(vt_mc_mm(&m->mc, &ly->w_qkv, m->h, E, m->q, ly->w_qkv.n_out, T));
        else TRY(vt_mc_mm(&m->mc, &ly->wq, m->h, E, m->q, QD, T));
        TRY(A->rms_norm(c, m->q, hd, ly->q_norm, m->q, hd, T * nh, hd, hp->eps));
        TRY(A->rope_neox_dpos(c, m->q, QD, hd, T, nh, ly->n_rot, m->d_pos, ly->rope_base, ff));
        if (ly->has_kv) {
            if (!merged) TRY(vt_mc_mm(&m->mc, &ly->wk, m->h, E, kp, KVD, T));
            const float *vraw = kp;
            if (ly->has_v) {
                if (merged) vraw = kp + KVD;
                else TRY(vt_mc_mm(&m->mc, &ly->wv, m->h, E, m->vp, KVD, T));
                if (!merged) vraw = m->vp;
            }
            TRY(A->rms_norm(c, vraw, hd, NULL, m->s_v, hd, T * nkv, hd, hp->eps));
            TRY(A->rms_norm(c, kp, hd, ly->k_norm, m->s_k, hd, T * nkv, hd, hp->eps));
            TRY(A->rope_neox_dpos(c, m->s_k, KVD, hd, T, nkv, ly->n_rot, m->d_pos, ly->rope_base,
                                  ff));
            TRY(A->copy_rows_dpos(c, m->s_k, KVD, s->k_cache[il], KVD, T, KVD, drow));
            TRY(A->copy_rows_dpos(c, m->s_v, KVD, s->v_cache[il], KVD, T, KVD, drow));
        }
        const uint32_t src = (uint32_t)ly->kv_src;
        TRY(A->attention_dpos(c, m->q, QD, hd, s->k_cache[src], s->v_cache[src], m->att, QD, T,
                              nh, nkv, hd, drow, rows, ly->swa ? (int64_t)hp->n_swa : 0, 1.0f,
                              0.0f));
        TRY(vt_mc_mm(&m->mc, &ly->wo, m->att, QD, m->a, E, T));
        return A->rms_norm(c, m->a, E, ly->post_attn_norm, m->a, E, T, E, hp->eps);
    }

    /* q: per-head RMSNorm with weights, then RoPE of the layer type (pitfall 5, 7) */
    TRY(vt_mc_mm(&m->mc, &ly->wq, m->h, E, m->q, QD, T));
    TRY(A->rms_norm(c, m->q, hd, ly->q_norm, m->q, hd, T * nh, hd, hp->eps));
    TRY(A->rope_neox(c, m->q, QD, hd, T, nh, ly->n_rot, m->pos, ly->rope_base, ff));

    if (ly->has_kv) {
        float *kc = s->k_cache[il] + row0 * KVD, *vc = s->v_cache[il] + row0 * KVD;
        TRY(vt_mc_mm(&m->mc, &ly->wk, m->h, E, m->kp, KVD, T));
        const float *vraw = m->kp; /* k_eq_v: V is the RAW K projection (pitfall 4) */
        if (ly->has_v) {
            TRY(vt_mc_mm(&m->mc, &ly->wv, m->h, E, m->vp, KVD, T));
            vraw = m->vp;
        }
        /* V: weightless RMSNorm per KV head, no RoPE (pitfall 3) */
        TRY(A->rms_norm(c, vraw, hd, NULL, vc, hd, T * nkv, hd, hp->eps));
        TRY(A->rms_norm(c, m->kp, hd, ly->k_norm, kc, hd, T * nkv, hd, hp->eps));
        TRY(A->rope_neox(c, kc, KVD, hd, T, nkv, ly->n_rot, m->pos, ly->rope_base, ff));
    }
    /* shared-KV layers read their source's cache, which already holds this
     * step's tokens (§5.6); same layer type, so the same row origin */
    const uint32_t src = (uint32_t)ly->kv_src;
    /* scale 1.0 (pitfall 2), no attention softcap (pitfall 24), window
     * n_swa on S layers counting the query itself (pitfall 8) */
    TRY(A->attention(c, m->q, QD, hd, s->k_cache[src], s->v_cache[src], m->att, QD, T, nh, nkv,
                     hd, row0, row0 + T, ly->swa ? (int64_t)hp->n_swa : 0, 1.0f, 0.0f));
    TRY(vt_mc_mm(&m->mc, &ly->wo, m->att, QD, m->a, E, T));
    TRY(A->rms_norm(c, m->a, E, ly->post_attn_norm, m->a, E, T, E, hp->eps));
    return VT_OK;
}

/* ---------------------------------------------------------------- */
/* routed experts (§5.3 branch 2): f_e = Σ_j w_j s_j Expert_j(u2)       */
/* ---------------------------------------------------------------- */


/* Layer il's router logits for the one-token prediction (vt_mc_predict_next):
 * its router input (as g4_experts) from the residual x. */
vt_status g4_router_ahead(vt_model *m, uint32_t il)
{
    const gemma4_hparams *hp = &m->hp;
    const vt_backend_api *A = m->api;
    const int64_t E = hp->n_embd;
    const gemma4_layer *nl = &m->layers[il];
    TRY(A->rms_norm(m->ctx, m->x, E, nl->router_scale, m->ah_h, E, 1, E, hp->eps));
    TRY(A->scale(m->ctx, m->ah_h, m->ah_h, E, 1.0f / sqrtf((float)E)));
    return vt_mc_mm(&m->mc, &nl->router, m->ah_h, E, m->ah_logits, hp->n_expert, 1);
}

/* The routed experts through the fused ops: f_e = Σ_j w_j s_j Expert_j(h),
 * the routing (with the per-expert scale) already in r_ids / r_w. Resident:
 * one moe_ffn over all experts; streamed: the ids come to the host, which
 * acquires groups of at most top-k experts and points the layer's table at
 * their slots, one moe_ffn per group (the same bits: moe_ffn adds per token
 * in increasing expert id). */
static vt_status g4_experts_fused(vt_model *m, uint32_t il, int64_t T)
{
    vt_moe_ffn_args a = vt_mc_moe_args(&m->mc, il, T);
    uint32_t n_ahead = 0;
    if (m->experts) TRY(vt_mc_predict_next(&m->mc, il, T, &n_ahead));
    /* streamed: prefetched once the experts' ops are queued (g4_experts) */
    return vt_mc_moe_ffn_run(&m->mc, il, &a, T, n_ahead, vt_mc_table_cb, m);
}

/* The fused routing of layer il: the router input RMSNorm0(r) ·
 * ffn_gate_inp.scale · 1/sqrt(D) (pitfall 13; the weighted norm folds the
 * elementwise scale in), the logits, the ids and weights on the device (the
 * per-expert scale applied there), the expert input pre_ffw_norm_2(r) in h
 * (pitfall 15) and f_e zeroed. */
static vt_status g4_route_fused(vt_model *m, uint32_t il, int64_t T)
{
    const gemma4_hparams *hp = &m->hp;
    const gemma4_layer *ly = &m->layers[il];
    const vt_backend_api *A = m->api;
    vt_backend_ctx *c = m->ctx;
    const int64_t E = hp->n_embd, nx = hp->n_expert, K = hp->n_expert_used;
    TRY(A->rms_norm(c, m->x, E, ly->router_scale, m->h, E, T, E, hp->eps));
    TRY(A->scale(c, m->h, m->h, T * E, 1.0f / sqrtf((float)E)));
    TRY(vt_mc_mm(&m->mc, &ly->router, m->h, E, m->r_logits, nx, T));
    TRY(A->moe_route(c, m->r_logits, T, nx, K, 1,
                     ly->exp_scale ? m->exp_scale_dev + (size_t)il * (size_t)nx : NULL, m->r_ids,
                     m->r_w));
    TRY(A->rms_norm(c, m->x, E, ly->pre_ffw_norm_2, m->h, E, T, E, hp->eps));
    return A->memset_zero(c, m->f_e, (size_t)(T * E) * sizeof(float));
}

static vt_status g4_experts(vt_model *m, uint32_t il, int64_t T)
{
    const gemma4_hparams *hp = &m->hp;
    const gemma4_layer *ly = &m->layers[il];
    const vt_backend_api *A = m->api;
    vt_backend_ctx *c = m->ctx;
    const int64_t E = hp->n_embd, nx = hp->n_expert, K = hp->n_expert_used;

    if (m->fused_moe) {
        TRY(g4_route_fused(m, il, T));
        TRY(g4_experts_fused(m, il, T));
        TRY(A->rms_norm(c, m->f_e, E, ly->post_ffw_norm_2, m->f_e, E, T, E, hp->eps));
        if (m->n_ahead) { /* the next layer's predicted experts, copied beside the ops queued */
            TRY(m->host->experts_prefetch(m->experts, il + 1, m->topk_ids + T * K, m->n_ahead));
            m->n_ahead = 0;
        }
        return VT_OK;
    }
    /* router input: RMSNorm0(r) · ffn_gate_inp.scale · 1/sqrt(D) (pitfall 13);
     * the weighted norm folds the elementwise scale in */
    TRY(A->rms_norm(c, m->x, E, ly->router_scale, m->h, E, T, E, hp->eps));
    TRY(A->scale(c, m->h, m->h, T * E, 1.0f / sqrtf((float)E)));
    TRY(vt_mc_mm(&m->mc, &ly->router, m->h, E, m->r_logits, nx, T));
    /* softmax over all experts, top-k, renormalise (pitfall 14) ... */
    TRY(A->softmax_topk(c, m->r_logits, T, nx, K, 1, m->topk_ids, m->topk_w, NULL));
    /* ... then the per-expert scale, after the renormalisation */
    if (ly->exp_scale)
        for (int64_t i = 0; i < T * K; i++)
            if (m->topk_ids[i] >= 0 && m->topk_ids[i] < nx)
                m->topk_w[i] *= ly->exp_scale[m->topk_ids[i]];

    /* expert input u2 = pre_ffw_norm_2(r) (pitfall 15) */
    TRY(A->rms_norm(c, m->x, E, ly->pre_ffw_norm_2, m->h, E, T, E, hp->eps));
    TRY(A->memset_zero(c, m->f_e, (size_t)(T * E) * sizeof(float)));

    TRY(vt_mc_moe_ops(&m->mc, &ly->x, il, T, E, hp->n_ff_exp, nx, K, VT_UNARY_GELU_TANH, m->h,
                      m->f_e)); /* pitfall 16: tanh GELU */
    TRY(A->rms_norm(c, m->f_e, E, ly->post_ffw_norm_2, m->f_e, E, T, E, hp->eps));
    return VT_OK;
}

/* The FFN's MLP (§5.3): f_m = MLP(ffn_norm(r)), post_ffw_norm_1 applied
 * when the layer also has experts. */
static vt_status g4_ffn_mlp(vt_model *m, uint32_t il, int64_t T)
{
    const gemma4_layer *ly = &m->layers[il];
    const int64_t E = m->hp.n_embd;
    TRY(vt_mc_norm_x(&m->mc, 0, T, ly->ffn_norm, m->h)); /* with the attention's residual when fused */
    TRY(g4_geglu(m, &ly->ffn_gate, &ly->ffn_up, &ly->ffn_down, &ly->w_gu, m->h, m->f_m, T));
    if (ly->moe)
        TRY(m->api->rms_norm(m->ctx, m->f_m, E, ly->post_ffw_norm_1, m->f_m, E, T, E, m->hp.eps));
    return VT_OK;
}

/* The FFN's end: x += post_ffw_norm(f_m [+ f_e]) (fused: left pending). */
static vt_status g4_ffn_end(vt_model *m, uint32_t il, int64_t T)
{
    const gemma4_hparams *hp = &m->hp;
    const gemma4_layer *ly = &m->layers[il];
    const vt_backend_api *A = m->api;
    vt_backend_ctx *c = m->ctx;
    const int64_t E = hp->n_embd;
    if (ly->moe) {
        if (m->fuse) { /* a = post_ffw_norm(f_m + f_e), added to x by the next norm */
            TRY(A->add_rms_norm(c, m->f_m, E, m->f_e, E, NULL, ly->post_ffw_norm, m->a, E, T, E,
                                hp->eps));
            m->res_a = m->a;
            return VT_OK;
        }
        TRY(A->binary(c, VT_BINARY_ADD, m->f_m, m->f_e, m->f_m, T * E, T * E));
    }
    TRY(A->rms_norm(c, m->f_m, E, ly->post_ffw_norm, m->f_m, E, T, E, hp->eps));
    if (m->fuse) {
        m->res_a = m->f_m;
        return VT_OK;
    }
    TRY(A->binary(c, VT_BINARY_ADD, m->x, m->f_m, m->x, T * E, T * E));
    return VT_OK;
}

/* FFN block (§5.3): x (= r on entry) += post_ffw_norm(MLP [+ experts]). */
static vt_status g4_ffn(vt_model *m, uint32_t il, int64_t T)
{
    TRY(g4_ffn_mlp(m, il, T));
    if (m->layers[il].moe) TRY(g4_experts(m, il, T));
    return g4_ffn_end(m, il, T);
}

/* §5.2 per-layer embeddings: ple [T][L*P] from the tokens and the scaled x. */
static vt_status g4_ple_inputs(vt_model *m, const int32_t *tokens, int64_t T)
{
    const gemma4_hparams *hp = &m->hp;
    const vt_backend_api *A = m->api;
    vt_backend_ctx *c = m->ctx;
    const int64_t E = hp->n_embd, P = hp->n_per_layer, LP = P * hp->n_layer;
    TRY(vt_backend_get_rows_fn(A, m->ple_token_embd.type)(c, &m->ple_token_embd, tokens, T, m->ple));
    TRY(A->scale(c, m->ple, m->ple, T * LP, sqrtf((float)P)));
    TRY(vt_mc_mm(&m->mc, &m->ple_model_proj, m->x, E, m->ple_tmp, LP, T));
    TRY(A->scale(c, m->ple_tmp, m->ple_tmp, T * LP, 1.0f / sqrtf((float)E)));
    /* RMSNorm over each P-slice with the one shared weight */
    TRY(A->rms_norm(c, m->ple_tmp, P, m->ple_proj_norm, m->ple_tmp, P, T * hp->n_layer, P,
                    hp->eps));
    TRY(A->binary(c, VT_BINARY_ADD, m->ple, m->ple_tmp, m->ple, T * LP, T * LP));
    TRY(A->scale(c, m->ple, m->ple, T * LP, 1.0f / sqrtf(2.0f)));
    return VT_OK;
}

/* §5.3 per-layer embedding injection: x += post_norm(proj · (gelu(inp_gate · x) ⊙ ple[l])). */
static vt_status g4_ple_inject(vt_model *m, uint32_t il, int64_t T)
{
    const gemma4_hparams *hp = &m->hp;
    const gemma4_layer *ly = &m->layers[il];
    const vt_backend_api *A = m->api;
    vt_backend_ctx *c = m->ctx;
    const int64_t E = hp->n_embd, P = hp->n_per_layer, LP = P * hp->n_layer;
    TRY(vt_mc_mm(&m->mc, &ly->inp_gate, m->x, E, m->ple_g, P, T));
    TRY(A->unary(c, VT_UNARY_GELU_TANH, m->ple_g, m->ple_g, T * P));
    /* the layer's slice ple[:, l, :] made contiguous, then multiplied in */
    TRY(A->copy_2d(c, m->ple + (int64_t)il * P, LP, m->f_g, P, T, P));
    TRY(A->binary(c, VT_BINARY_MUL, m->ple_g, m->f_g, m->ple_g, T * P, T * P));
    TRY(vt_mc_mm(&m->mc, &ly->proj, m->ple_g, P, m->a, E, T));
    TRY(A->rms_norm(c, m->a, E, ly->ple_post_norm, m->a, E, T, E, hp->eps));
    TRY(A->binary(c, VT_BINARY_ADD, m->x, m->a, m->x, T * E, T * E));
    return VT_OK;
}

/* ---------------------------------------------------------------- */
/* the whole step                                                     */
/* ---------------------------------------------------------------- */

/* After the FFN of layer il: its residual, left pending when fused, goes in
 * before anything else reads x; the per-layer embedding (pitfall 18) and
 * the layer's output scale of the whole residual stream (pitfall 19). */
static vt_status g4_layer_end(vt_model *m, uint32_t il, int64_t T, int graph)
{
    const gemma4_hparams *hp = &m->hp;
    const gemma4_layer *ly = &m->layers[il];
    const int64_t E = hp->n_embd;
    if (hp->n_per_layer || ly->has_out_scale || (!graph && m->dump_path))
        TRY(vt_mc_norm_x(&m->mc, 0, T, NULL, NULL));
    if (hp->n_per_layer) TRY(g4_ple_inject(m, il, T));
    if (ly->has_out_scale) TRY(m->api->scale(m->ctx, m->x, m->x, T * E, ly->out_scale));
    if (!graph) TRY(vt_mc_dump(&m->mc, m->x, T, E));
    return VT_OK;
}

/* Every layer on x (embedded, PLE inputs ready) for the n_seq sequences whose
 * tokens are consecutive rows (n_tok[i] each, T in all): the norms, the
 * projections outside attention, the MLP and the routed experts (grouped
 * over every row) run once over all T rows, each sequence's attention over
 * its own rows, positions and caches. graph: one sequence, one token,
 * attention takes positions and cache rows from d_pos (a recorded step). */
static vt_status g4_layers_multi(vt_model *m, vt_model_seq *const *seqs, const int64_t *n_tok,
                                 uint32_t n_seq, int64_t T, int graph)
{
    const gemma4_hparams *hp = &m->hp;
    const vt_backend_api *A = m->api;
    vt_backend_ctx *c = m->ctx;
    const int64_t E = hp->n_embd;
    m->res_a = NULL;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        const gemma4_layer *ly = &m->layers[il];
        TRY(vt_mc_norm_x(&m->mc, 0, T, ly->attn_norm, m->h)); /* pitfall 1 */
        TRY(vt_mc_mixer_rows(&m->mc, seqs, n_tok, n_seq, T, il, graph, g4_attention));
        if (m->fuse) m->res_a = m->a; /* r = x + a, added by the FFN's first norm */
        else TRY(A->binary(c, VT_BINARY_ADD, m->x, m->a, m->x, T * E, T * E)); /* r */
        TRY(g4_ffn(m, il, T));
        TRY(g4_layer_end(m, il, T, graph));
    }
    return VT_OK;
}

static vt_status g4_layers(vt_model *m, vt_model_seq *s, int64_t T, int graph)
{
    return g4_layers_multi(m, &s, &T, 1, T, graph);
}

/* The layers of one token with positions from d_pos: a whole-step graph
 * (vt_mc_graph_decode). */
vt_status g4_step_layers(vt_model *m, vt_model_seq *s) { return g4_layers(m, s, 1, 1); }

/* The first MoE layer at or after il (n_layer: none): where a segment ends */
uint32_t g4_next_cut(const vt_model *m, uint32_t il)
{
    while (il < m->hp.n_layer && !m->layers[il].moe) il++;
    return il;
}

/* The ops of the segment that follows the acquire of MoE layer `after`
 * (UINT32_MAX: the first segment): that layer's routed experts over the
 * table the acquire wrote (the whole expert range) and the rest of it, the
 * layers up to the next MoE layer's routing and its prediction for the
 * layer after (whether it was made goes to s->seg_pred[j]; past the last,
 * the final norm, LM head and soft-cap into logits_buf). The same ops, in
 * the same order, as g4_layers' graph-decode variant (graph = 1: attention
 * reads the positions from d_pos), whose bits the resident graph tests hold
 * equal to the op path. */
vt_status g4_seg_ops(vt_model *m, vt_model_seq *s, uint32_t j, uint32_t after)
{
    const gemma4_hparams *hp = &m->hp;
    const vt_backend_api *A = m->api;
    vt_backend_ctx *c = m->ctx;
    const int64_t E = hp->n_embd;
    uint32_t il = 0;
    if (after != UINT32_MAX) {
        vt_moe_ffn_args a = vt_mc_moe_args(&m->mc, after, 1);
        TRY(A->moe_ffn(c, &a));
        TRY(A->rms_norm(c, m->f_e, E, m->layers[after].post_ffw_norm_2, m->f_e, E, 1, E,
                        hp->eps));
        TRY(g4_ffn_end(m, after, 1));
        TRY(g4_layer_end(m, after, 1, 1));
        il = after + 1;
    }
    for (; il < hp->n_layer; il++) {
        const gemma4_layer *ly = &m->layers[il];
        TRY(vt_mc_norm_x(&m->mc, 0, 1, ly->attn_norm, m->h));
        TRY(g4_attention(m, s, il, 1, 1));
        if (m->fuse) m->res_a = m->a;
        else TRY(A->binary(c, VT_BINARY_ADD, m->x, m->a, m->x, E, E));
        TRY(g4_ffn_mlp(m, il, 1));
        if (ly->moe) {
            TRY(g4_route_fused(m, il, 1));
            uint32_t n_ahead = 0;
            TRY(vt_mc_predict_next(&m->mc, il, 1, &n_ahead));
            s->seg_pred[j] = n_ahead != 0;
            return VT_OK;
        }
        TRY(g4_ffn_end(m, il, 1));
        TRY(g4_layer_end(m, il, 1, 1));
    }
    return vt_mc_head_row(&m->mc, 0);
}

vt_status gemma4_forward(vt_model *m, vt_model_seq *s, const int32_t *tokens, int64_t T,
                         float *logits, int all_logits)
{
    if (!m) return VT_ERR_INVALID_ARG;
    const gemma4_hparams *hp = &m->hp;
    const vt_backend_api *A = m->api;
    vt_backend_ctx *c = m->ctx;
    const int64_t E = hp->n_embd;

    TRY(vt_mc_forward_check(&m->mc, s, tokens, T, m->d.n_vocab, "gemma4", hp->n_ctx_train, m->pos));
    TRY(g4_swa_shift(m, s, T));

    /* §5.1 embeddings times f32 sqrt(D) (pitfall 11: input lookup only) */
    TRY(vt_backend_get_rows_fn(A, m->token_embd.type)(c, &m->token_embd, tokens, T, m->x));
    TRY(A->scale(c, m->x, m->x, T * E, sqrtf((float)E)));
    TRY(vt_mc_dump(&m->mc, m->x, T, E));
    if (hp->n_per_layer) TRY(g4_ple_inputs(m, tokens, T));

    /* a graph step reads the position and the S-layer row from d_pos */
    const int32_t rows[2] = {(int32_t)s->pos, (int32_t)(s->pos - s->swa_base)};
    int done = 0;
    TRY(vt_mc_graph_decode(&m->mc, &s->sq, T, rows, 2, logits, &done));
    if (done) return VT_OK;
    TRY(g4_layers(m, s, T, 0));
    s->pos += T;
    /* §5.5 final norm, LM head, soft-capping c·tanh(z/c) (pitfall 12) */
    return vt_mc_logits(&m->mc, T, all_logits, logits);
}

vt_status gemma4_forward_multi(vt_model *m, vt_model_seq *const *seqs, const int64_t *n_tok,
                               uint32_t n_seq, const int32_t *tokens, float *logits)
{
    if (seqs && n_tok && tokens && n_seq == 1)
        return gemma4_forward(m, seqs[0], tokens, n_tok[0], logits, 0);
    const vt_backend_api *A = m->api;
    vt_backend_ctx *c = m->ctx;
    const int64_t E = m->hp.n_embd;
    int64_t T = 0;
    TRY(vt_mc_multi_check(&m->mc, seqs, n_tok, n_seq, tokens, m->d.n_vocab, m->pos, &T));
    /* each sequence's sliding caches make room for its own tokens (§6) */
    for (uint32_t i = 0; i < n_seq; i++) TRY(g4_swa_shift(m, seqs[i], n_tok[i]));

    /* §5.1 embeddings times sqrt(D), §5.2 per-layer inputs: per token */
    TRY(vt_backend_get_rows_fn(A, m->token_embd.type)(c, &m->token_embd, tokens, T, m->x));
    TRY(A->scale(c, m->x, m->x, T * E, sqrtf((float)E)));
    if (m->hp.n_per_layer) TRY(g4_ple_inputs(m, tokens, T));
    TRY(g4_layers_multi(m, seqs, n_tok, n_seq, T, 0));
    for (uint32_t i = 0; i < n_seq; i++) seqs[i]->pos += n_tok[i];
    /* each sequence's last row: final norm, LM head and soft-capping (§5.5) */
    return vt_mc_multi_logits(&m->mc, n_tok, n_seq, T, logits);
}
