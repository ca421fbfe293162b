/*
 * qwen35_forward.c - the Qwen3.5 forward pass (qwen35moe.md §5), expressed
 * entirely as backend ops (vt/backend.h); the plugin touches no activation
 * itself, so the same code drives every backend.
 *
 * Layout of the activations (T = tokens of this call, rows contiguous):
 *   x [T][n_embd] residual stream, h [T][n_embd] normed input of a sublayer,
 *   a [T][n_embd] sublayer output. Mixer temporaries s_a..s_g are described
 *   where they are used; FFN temporaries f_*.
 *
 * Pitfalls of §8 are referenced by number where the code guards against them.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qwen35.h"

#define TRY(x) do { vt_status st_ = (x); if (st_ != VT_OK) return st_; } while (0)

/* ---------------------------------------------------------------- */
/* Gated DeltaNet (§5.7)                                              */
/* ---------------------------------------------------------------- */

static vt_status q35_linear_attn(vt_model *m, vt_model_seq *s, uint32_t il, int64_t T)
{
    const qwen35_hparams *hp = &m->hp;
    const qwen35_layer *ly = &m->layers[il];
    const vt_backend_api *A = m->api;
    vt_backend_ctx *c = m->ctx;
    const int64_t E = hp->n_embd, CD = hp->conv_dim, KD = hp->key_dim, VD = hp->value_dim;
    const int64_t nv = hp->n_v, nk = hp->n_k, dk = hp->d_k, dv = hp->d_v;
    float *mix = m->s_a;    /* [T][conv_dim] raw q|k|v projections */
    float *conv = m->s_b;   /* [T][conv_dim] after conv + SiLU */
    float *z = m->s_c;      /* [T][value_dim] */
    float *qn = m->s_d;     /* [T][key_dim] L2-normed, scaled q */
    float *kn = m->s_e;     /* [T][key_dim] L2-normed k */
    float *o = m->s_f;      /* [T][value_dim] delta-rule output */
    float *y = m->s_g;      /* [T][value_dim] gated norm output */
    float *beta = m->s_beta, *g = m->s_gdecay; /* [T][n_v] */

    /* §5.7.1 projections. Merged (w_in): one matmul into s_a's rows
     * [mix | z | beta | alpha] (stride LD), else one per matrix. */
    int64_t ldm = CD, ldz = VD, ldg = nv;
    const float *b_raw = beta, *a_raw = g;
    if (m->fuse && ly->w_in.data) {
        const int64_t LD = ly->w_in.n_out;
        TRY(vt_mc_mm(&m->mc, &ly->w_in, m->h, E, mix, LD, T));
        ldm = ldz = ldg = LD;
        z = mix + CD;
        b_raw = mix + CD + VD;
        a_raw = b_raw + nv;
    } else {
        TRY(vt_mc_mm(&m->mc, &ly->wqkv, m->h, E, mix, CD, T));
        TRY(vt_mc_mm(&m->mc, &ly->wz, m->h, E, z, VD, T));
        TRY(vt_mc_mm(&m->mc, &ly->wbeta, m->h, E, beta, nv, T));
        TRY(vt_mc_mm(&m->mc, &ly->walpha, m->h, E, g, nv, T));
    }
    /* beta = sigmoid(b); g = ssm_a · softplus(alpha + dt_bias); ssm_a is
     * already −exp(A_log) (pitfall 2) */
    if (m->fuse) {
        TRY(A->delta_net_gates(c, b_raw, ldg, a_raw, ldg, ly->dt_bias, ly->ssm_a, beta, g, T, nv));
    } else {
        TRY(A->unary(c, VT_UNARY_SIGMOID, beta, beta, T * nv));
        TRY(A->binary(c, VT_BINARY_ADD, g, ly->dt_bias, g, T * nv, nv));
        TRY(A->unary(c, VT_UNARY_SOFTPLUS, g, g, T * nv));
        TRY(A->binary(c, VT_BINARY_MUL, g, ly->ssm_a, g, T * nv, nv));
    }

    /* §5.7.2 causal conv over the raw projections with carried state, SiLU (pitfalls 10, 11) */
    TRY(A->ssm_conv(c, mix, ldm, ly->conv1d, s->conv_state[il], conv, CD, T, CD, hp->d_conv));

    /* §5.7.3 L2 norm per key head, then q / sqrt(d_k). A token's q (and k)
     * heads are nk contiguous rows of d_k: with one token they are normed
     * straight from the projection row; with more the q and k parts are
     * first made contiguous ([T][key_dim]) so that each is one call over
     * T·nk rows (two launches per layer instead of two per key head) */
    if (T == 1 && m->fuse) { /* q and k heads are 2 n_k rows of one call; k̂ follows q̂ in s_d */
        kn = qn + KD;
        TRY(A->l2_norm(c, conv, dk, qn, dk, 2 * nk, dk, hp->eps));
    } else if (T == 1) {
        TRY(A->l2_norm(c, conv, dk, qn, dk, nk, dk, hp->eps));
        TRY(A->l2_norm(c, conv + KD, dk, kn, dk, nk, dk, hp->eps));
    } else {
        TRY(A->copy_2d(c, conv, CD, qn, KD, T, KD));
        TRY(A->copy_2d(c, conv + KD, CD, kn, KD, T, KD));
        TRY(A->l2_norm(c, qn, dk, qn, dk, T * nk, dk, hp->eps));
        TRY(A->l2_norm(c, kn, dk, kn, dk, T * nk, dk, hp->eps));
    }
    TRY(A->scale(c, qn, qn, T * KD, 1.0f / sqrtf((float)dk)));

    /* §5.7.4 recurrence; value head h uses key head h % n_k (pitfall 3, in the op) */
    TRY(A->gated_delta_net(c, qn, kn, KD, conv + 2 * KD, CD, g, beta, s->rec_state[il], o, VD, T,
                           nk, nv, dk, dv));

    /* §5.7.5 y_h = RMSNorm(o_h; ssm_norm) ⊙ silu(z_h) (pitfall 13), then ssm_out */
    TRY(A->rms_norm(c, o, dv, ly->ssm_norm, y, dv, T * nv, dv, hp->eps));
    if (m->fuse) {
        TRY(A->mul_act(c, VT_UNARY_SILU, z, ldz, y, VD, y, VD, T, VD));
    } else {
        TRY(A->unary(c, VT_UNARY_SILU, z, z, T * VD));
        TRY(A->binary(c, VT_BINARY_MUL, y, z, y, T * VD, T * VD));
    }
    TRY(vt_mc_mm(&m->mc, &ly->wssm_out, y, VD, m->a, E, T));
    return VT_OK;
}

/* ---------------------------------------------------------------- */
/* gated full attention (§5.4, §5.5)                                  */
/* ---------------------------------------------------------------- */

static vt_status q35_full_attn(vt_model *m, vt_model_seq *s, uint32_t il, int64_t T, int graph)
{
    const qwen35_hparams *hp = &m->hp;
    const qwen35_layer *ly = &m->layers[il];
    const vt_backend_api *A = m->api;
    vt_backend_ctx *c = m->ctx;
    const int64_t E = hp->n_embd, hd = hp->head_dim, nh = ly->n_head, nkv = ly->n_head_kv;
    const int64_t QD = nh * hd, KVD = nkv * hd, pos0 = s->pos;
    float *qg = m->s_a;   /* [T][n_head][query | gate] (pitfall 5) */
    float *q = m->s_b;    /* [T][n_head][head_dim] normed, roped queries */
    float *gate = m->s_c; /* [T][n_head*head_dim] */
    float *kp = m->s_d;   /* [T][n_head_kv*head_dim] raw keys */
    float *att = m->s_f;  /* [T][n_head*head_dim] */
    float *kc = s->k_cache[il] + pos0 * KVD, *vc = s->v_cache[il] + pos0 * KVD;

    if (graph) {
        /* a recorded step (one token): the same arithmetic, with the cache
         * rows and the positions taken from d_pos on the device when the
         * step replays; merged (w_in), one matmul into [qg | k | v] */
        float *vp = m->s_v;
        if (m->fuse && ly->w_in.data) {
            TRY(vt_mc_mm(&m->mc, &ly->w_in, m->h, E, qg, ly->w_in.n_out, T));
            kp = qg + 2 * QD;
            vp = kp + KVD;
        } else {
            TRY(vt_mc_mm(&m->mc, &ly->wq, m->h, E, qg, 2 * QD, T));
            TRY(vt_mc_mm(&m->mc, &ly->wk, m->h, E, kp, KVD, T));
            TRY(vt_mc_mm(&m->mc, &ly->wv, m->h, E, vp, KVD, T));
        }
        TRY(A->rms_norm(c, qg, 2 * hd, ly->q_norm, q, hd, T * nh, hd, hp->eps));
        TRY(A->rms_norm(c, kp, hd, ly->k_norm, m->s_k, hd, T * nkv, hd, hp->eps));
        TRY(A->rope_neox_dpos(c, q, QD, hd, T, nh, hp->n_rot, m->d_pos, hp->rope_base, NULL));
        TRY(A->rope_neox_dpos(c, m->s_k, KVD, hd, T, nkv, hp->n_rot, m->d_pos, hp->rope_base, NULL));
        TRY(A->copy_rows_dpos(c, m->s_k, KVD, s->k_cache[il], KVD, T, KVD, m->d_pos));
        TRY(A->copy_rows_dpos(c, vp, KVD, s->v_cache[il], KVD, T, KVD, m->d_pos));
        TRY(A->attention_dpos(c, q, QD, hd, s->k_cache[il], s->v_cache[il], att, QD, T, nh, nkv,
                              hd, m->d_pos, m->n_ctx, 0, 1.0f / sqrtf((float)hd), 0.0f));
        goto gate;
    }
    TRY(vt_mc_mm(&m->mc, &ly->wq, m->h, E, qg, 2 * QD, T));
    TRY(vt_mc_mm(&m->mc, &ly->wk, m->h, E, kp, KVD, T));
    TRY(vt_mc_mm(&m->mc, &ly->wv, m->h, E, vc, KVD, T)); /* V goes to the cache as is */

    /* per-head RMSNorm with weights shared by all heads (pitfall 15); the
     * query rows of qg are uniformly strided by 2*head_dim */
    TRY(A->rms_norm(c, qg, 2 * hd, ly->q_norm, q, hd, T * nh, hd, hp->eps));
    TRY(A->rms_norm(c, kp, hd, ly->k_norm, kc, hd, T * nkv, hd, hp->eps));

    /* NeoX RoPE on the first n_rot dims after the norm (pitfall 14) */
    TRY(A->rope_neox(c, q, QD, hd, T, nh, hp->n_rot, m->pos, hp->rope_base, NULL));
    TRY(A->rope_neox(c, kc, KVD, hd, T, nkv, hp->n_rot, m->pos, hp->rope_base, NULL));

    /* grouped GQA: query head j uses KV head j / n_gqa (pitfall 4, in the op);
     * scale 1/sqrt(head_dim) with head_dim = key_length (pitfall 8) */
    TRY(A->attention(c, q, QD, hd, s->k_cache[il], s->v_cache[il], att, QD, T, nh, nkv, hd, pos0,
                     pos0 + T, 0, 1.0f / sqrtf((float)hd), 0.0f));

gate:
    /* o ⊙ sigmoid(gate), then W_o. The gate halves of qg are uniformly
     * strided by 2 head_dim over (token, head) rows: unmerged, or one token */
    if (m->fuse) {
        TRY(A->mul_act(c, VT_UNARY_SIGMOID, qg + hd, 2 * hd, att, hd, att, hd, T * nh, hd));
    } else {
        TRY(A->copy_2d(c, qg + hd, 2 * hd, gate, hd, T * nh, hd));
        TRY(A->unary(c, VT_UNARY_SIGMOID, gate, gate, T * QD));
        TRY(A->binary(c, VT_BINARY_MUL, att, gate, att, T * QD, T * QD));
    }
    TRY(vt_mc_mm(&m->mc, &ly->wo, att, QD, m->a, E, T));
    return VT_OK;
}

/* ---------------------------------------------------------------- */
/* FFN (§5.8): routed experts + shared expert, or dense SwiGLU         */
/* ---------------------------------------------------------------- */

/* y = W_down (silu(W_gate x) ⊙ W_up x) for rows of x [n][n_embd]; y [n][n_embd]. */
static vt_status q35_swiglu(vt_model *m, const vt_weight *wg, const vt_weight *wu,
                            const vt_weight *wd, const vt_weight *wgu, const float *x, float *y,
                            int64_t n)
{
    const int64_t E = m->hp.n_embd, F = wg->n_out;
    if (m->fuse && wgu && wgu->data) { /* merged: [gate | up] rows of f_g, SiLU·mul into f_u */
        TRY(vt_mc_mm(&m->mc, wgu, x, E, m->f_g, 2 * F, n));
        TRY(m->api->mul_act(m->ctx, VT_UNARY_SILU, m->f_g, 2 * F, m->f_g + F, 2 * F, m->f_u, F, n,
                            F));
        return vt_mc_mm(&m->mc, wd, m->f_u, F, y, E, n);
    }
    TRY(vt_mc_mm(&m->mc, wg, x, E, m->f_g, F, n));
    TRY(vt_mc_mm(&m->mc, wu, x, E, m->f_u, F, n));
    if (m->fuse) {
        TRY(m->api->mul_act(m->ctx, VT_UNARY_SILU, m->f_g, F, m->f_u, F, m->f_g, F, n, F));
    } else {
        TRY(m->api->unary(m->ctx, VT_UNARY_SILU, m->f_g, m->f_g, n * F));
        TRY(m->api->binary(m->ctx, VT_BINARY_MUL, m->f_g, m->f_u, m->f_g, n * F, n * F));
    }
    TRY(vt_mc_mm(&m->mc, wd, m->f_g, F, y, E, n));
    return VT_OK;
}


/* Layer il's router logits for the one-token prediction (vt_mc_predict_next):
 * its router on the residual x normed by its pre-FFN norm (its attention's
 * output is not known yet). */
vt_status q35_router_ahead(vt_model *m, uint32_t il)
{
    const qwen35_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, nx = hp->n_expert;
    const qwen35_layer *nl = &m->layers[il];
    const int merged = m->fuse && nl->w_rg.data;
    TRY(m->api->rms_norm(m->ctx, m->x, E, nl->post_norm, m->ah_h, E, 1, E, hp->eps));
    return vt_mc_mm(&m->mc, merged ? &nl->w_rg : &nl->router, m->ah_h, E, m->ah_logits,
                    merged ? nx + 1 : nx, 1);
}

/* Routed experts through the fused ops: routing into device arrays, then one
 * moe_ffn over all experts (resident) or one per group of at most top-k
 * experts made resident together (streamed: the ids come to the host, which
 * acquires each group and points the layer's table at its slots). moe_ffn's
 * additions into x run per token in increasing expert id, so the groups give
 * the bits of one call. */
static vt_status q35_moe_fused(vt_model *m, uint32_t il, int64_t T)
{
    const qwen35_hparams *hp = &m->hp;
    const vt_backend_api *A = m->api;
    vt_backend_ctx *c = m->ctx;
    const int64_t nx = hp->n_expert, K = hp->n_expert_used;
    TRY(A->moe_route(c, m->r_logits, T, nx, K, 1, NULL, m->r_ids, m->r_w));
    uint32_t n_ahead = 0;
    TRY(vt_mc_predict_next(&m->mc, il, T, &n_ahead));
    vt_moe_ffn_args a = vt_mc_moe_args(&m->mc, il, T);
    /* streamed: prefetched once the shared expert is queued (q35_moe_tail) */
    return vt_mc_moe_ffn_run(&m->mc, il, &a, T, n_ahead, vt_mc_table_cb, m);
}

/* Routed experts through the per-expert ops (a backend without the fused
 * ops): routing on the host, then per expert group gather, matmuls, SiLU,
 * product and scatter into x. */
static vt_status q35_moe_ops(vt_model *m, uint32_t il, int64_t T)
{
    const qwen35_hparams *hp = &m->hp;
    const qwen35_layer *ly = &m->layers[il];
    const vt_backend_api *A = m->api;
    vt_backend_ctx *c = m->ctx;
    const int64_t E = hp->n_embd, nx = hp->n_expert, K = hp->n_expert_used;

    TRY(A->softmax_topk(c, m->r_logits, T, nx, K, 1, m->topk_ids, m->topk_w, NULL));
    return vt_mc_moe_ops(&m->mc, &ly->x, il, T, E, hp->n_ff_exp, nx, K, VT_UNARY_SILU, m->h,
                         m->x);
}

/* The router logits of layer il into r_logits (softmax over all experts,
 * top-k, renormalise: pitfall 13) and the shared-expert gate's logit;
 * returns where the gate's logits are: one token with w_rg, the router and
 * the gate in one matmul, the gate's logit after the n_expert router logits */
static const float *q35_gate_of(const vt_model *m, uint32_t il, int64_t T)
{
    return m->fuse && T == 1 && m->layers[il].w_rg.data ? m->r_logits + m->hp.n_expert
                                                        : m->f_gamma;
}

static vt_status q35_router(vt_model *m, uint32_t il, int64_t T)
{
    const qwen35_layer *ly = &m->layers[il];
    const int64_t E = m->hp.n_embd;
    if (q35_gate_of(m, il, T) != m->f_gamma)
        return vt_mc_mm(&m->mc, &ly->w_rg, m->h, E, m->r_logits, m->hp.n_expert + 1, T);
    TRY(vt_mc_mm(&m->mc, &ly->router, m->h, E, m->r_logits, m->hp.n_expert, T));
    return vt_mc_mm(&m->mc, &ly->shexp_gate, m->h, E, m->f_gamma, 1, T);
}

/* After the routed experts: the shared expert, gated by sigmoid of a dot
 * product per token, added to x (fused: left pending for the next norm) */
static vt_status q35_moe_tail(vt_model *m, uint32_t il, int64_t T)
{
    const qwen35_layer *ly = &m->layers[il];
    const vt_backend_api *A = m->api;
    vt_backend_ctx *c = m->ctx;
    const int64_t E = m->hp.n_embd;
    const float *gamma = q35_gate_of(m, il, T);
    TRY(q35_swiglu(m, &ly->gate_shexp, &ly->up_shexp, &ly->down_shexp, &ly->w_sh_gu, m->h,
                   m->f_y, T));
    if (m->n_ahead) { /* the next layer's predicted experts, copied beside the ops queued */
        TRY(m->host->experts_prefetch(m->experts, il + 1, m->topk_ids + T * m->hp.n_expert_used,
                                      m->n_ahead));
        m->n_ahead = 0;
    }
    if (m->fuse) { /* the next norm adds it (add_rms_norm) */
        m->res_a = m->f_y;
        m->res_gate = gamma;
        return VT_OK;
    }
    TRY(A->unary(c, VT_UNARY_SIGMOID, m->f_gamma, m->f_gamma, T));
    TRY(A->mul_rows(c, m->f_y, m->f_gamma, m->f_y, T, E));
    TRY(A->binary(c, VT_BINARY_ADD, m->x, m->f_y, m->x, T * E, T * E));
    return VT_OK;
}

/* x += MoE(h) + sigmoid(w_shgate · h) · SharedExpert(h) */
static vt_status q35_moe(vt_model *m, uint32_t il, int64_t T)
{
    TRY(q35_router(m, il, T));
    TRY(m->fused_moe ? q35_moe_fused(m, il, T) : q35_moe_ops(m, il, T));
    return q35_moe_tail(m, il, T);
}

static vt_status q35_dense_ffn(vt_model *m, uint32_t il, int64_t T)
{
    const qwen35_layer *ly = &m->layers[il];
    const int64_t E = m->hp.n_embd;
    TRY(q35_swiglu(m, &ly->ffn_gate, &ly->ffn_up, &ly->ffn_down, NULL, m->h, m->f_y, T));
    if (m->fuse) { /* the next norm adds it (add_rms_norm) */
        m->res_a = m->f_y;
        m->res_gate = NULL;
        return VT_OK;
    }
    TRY(m->api->binary(m->ctx, VT_BINARY_ADD, m->x, m->f_y, m->x, T * E, T * E));
    return VT_OK;
}

/* ---------------------------------------------------------------- */
/* the whole step                                                     */
/* ---------------------------------------------------------------- */

/* The mixer of layer il (DeltaNet or full attention) for one sequence's T
 * rows (vt_mc_mixer_rows). */
static vt_status q35_mixer(vt_model *m, vt_model_seq *s, uint32_t il, int64_t T, int graph)
{
    return m->layers[il].linear ? q35_linear_attn(m, s, il, T) : q35_full_attn(m, s, il, T, graph);
}

/* Every layer on x (the embeddings on entry) for the n_seq sequences whose
 * tokens are consecutive rows (n_tok[i] each, T in all): the norms, the
 * projections after the mixer and the FFN (the routed experts grouped over
 * every row) run once over all T rows, each mixer over its sequence's rows.
 * graph: one sequence, one token, the full-attention layers take positions
 * and cache rows from d_pos (a recorded step). */
static vt_status q35_layers_multi(vt_model *m, vt_model_seq *const *seqs, const int64_t *n_tok,
                                  uint32_t n_seq, int64_t T, int graph)
{
    const qwen35_hparams *hp = &m->hp;
    const vt_backend_api *A = m->api;
    vt_backend_ctx *c = m->ctx;
    const int64_t E = hp->n_embd;
    m->res_a = NULL;
    for (uint32_t il = 0; il < hp->n_layer; il++) { /* MTP blocks excluded (pitfall 7) */
        const qwen35_layer *ly = &m->layers[il];
        TRY(vt_mc_norm_x(&m->mc, 0, T, ly->attn_norm, m->h)); /* pitfall 1 */
        TRY(vt_mc_mixer_rows(&m->mc, seqs, n_tok, n_seq, T, il, graph, q35_mixer));
        /* post_attention_norm is the pre-FFN norm; the FFN adds to x (pitfall 16) */
        if (m->fuse) {
            TRY(A->add_rms_norm(c, m->x, E, m->a, E, NULL, ly->post_norm, m->h, E, T, E, hp->eps));
        } else {
            TRY(A->binary(c, VT_BINARY_ADD, m->x, m->a, m->x, T * E, T * E));
            TRY(A->rms_norm(c, m->x, E, ly->post_norm, m->h, E, T, E, hp->eps));
        }
        if (hp->is_moe) TRY(q35_moe(m, il, T));
        else TRY(q35_dense_ffn(m, il, T));
        if (!graph && m->dump_path) { /* the dump shows x with the FFN added */
            TRY(vt_mc_norm_x(&m->mc, 0, T, NULL, NULL));
            TRY(vt_mc_dump(&m->mc, m->x, T, E));
        }
    }
    return VT_OK;
}

static vt_status q35_layers(vt_model *m, vt_model_seq *s, int64_t T, int graph)
{
    return q35_layers_multi(m, &s, &T, 1, T, graph);
}

/* The layers of one token with positions from d_pos: a whole-step graph
 * (vt_mc_graph_decode). */
vt_status q35_step_layers(vt_model *m, vt_model_seq *s) { return q35_layers(m, s, 1, 1); }

/* Every layer is a MoE layer (qwen35moe): segments cut at each. */
uint32_t q35_next_cut(const vt_model *m, uint32_t il)
{
    (void)m;
    return il;
}

/* Segment j of a streamed one-token step (vt_mc_family.seg_ops; here
 * after = j - 1): layer j-1's routed experts (over the table its acquire
 * wrote, the whole expert range) and shared expert (j > 0), then layer j up
 * to its routing and the prediction for layer j+1, or the head row (j ==
 * n_layer). The same ops, in the same order, as q35_layers' graph-decode
 * variant (graph = 1: attention reads the position from d_pos), whose bits
 * the resident graph tests hold equal to the op path. */
vt_status q35_seg_ops(vt_model *m, vt_model_seq *s, uint32_t j, uint32_t after)
{
    const qwen35_hparams *hp = &m->hp;
    const vt_backend_api *A = m->api;
    vt_backend_ctx *c = m->ctx;
    const int64_t E = hp->n_embd;
    if (after != UINT32_MAX) {
        vt_moe_ffn_args a = vt_mc_moe_args(&m->mc, after, 1);
        TRY(A->moe_ffn(c, &a));
        m->n_ahead = 0; /* the host issues the prefetch between segments */
        TRY(q35_moe_tail(m, after, 1));
    }
    if (j == hp->n_layer) return vt_mc_head_row(&m->mc, 0);
    const qwen35_layer *ly = &m->layers[j];
    TRY(vt_mc_norm_x(&m->mc, 0, 1, ly->attn_norm, m->h));
    if (ly->linear) TRY(q35_linear_attn(m, s, j, 1));
    else TRY(q35_full_attn(m, s, j, 1, 1));
    if (m->fuse) {
        TRY(A->add_rms_norm(c, m->x, E, m->a, E, NULL, ly->post_norm, m->h, E, 1, E, hp->eps));
    } else {
        TRY(A->binary(c, VT_BINARY_ADD, m->x, m->a, m->x, E, E));
        TRY(A->rms_norm(c, m->x, E, ly->post_norm, m->h, E, 1, E, hp->eps));
    }
    TRY(q35_router(m, j, 1));
    TRY(A->moe_route(c, m->r_logits, 1, hp->n_expert, hp->n_expert_used, 1, NULL, m->r_ids,
                     m->r_w));
    uint32_t n_ahead = 0;
    TRY(vt_mc_predict_next(&m->mc, j, 1, &n_ahead));
    s->seg_pred[j] = n_ahead != 0;
    return VT_OK;
}

vt_status qwen35_forward(vt_model *m, vt_model_seq *s, const int32_t *tokens, int64_t T,
                         float *logits, int all_logits)
{
    if (!m) return VT_ERR_INVALID_ARG;
    const qwen35_hparams *hp = &m->hp;
    const vt_backend_api *A = m->api;
    TRY(vt_mc_forward_check(&m->mc, s, tokens, T, m->d.n_vocab, hp->arch, hp->n_ctx_train, m->pos));
    /* §5.2 embeddings (no scaling) */
    TRY(vt_backend_get_rows_fn(A, m->token_embd.type)(m->ctx, &m->token_embd, tokens, T, m->x));
    int done = 0;
    TRY(vt_mc_graph_decode(&m->mc, &s->sq, T, m->pos, 1, logits, &done));
    if (done) return VT_OK;
    TRY(vt_mc_dump(&m->mc, m->x, T, hp->n_embd));
    TRY(q35_layers(m, s, T, 0));
    s->pos += T;
    /* §5.9 final norm and LM head */
    return vt_mc_logits(&m->mc, T, all_logits, logits);
}

vt_status qwen35_forward_multi(vt_model *m, vt_model_seq *const *seqs, const int64_t *n_tok,
                               uint32_t n_seq, const int32_t *tokens, float *logits)
{
    if (seqs && n_tok && tokens && n_seq == 1)
        return qwen35_forward(m, seqs[0], tokens, n_tok[0], logits, 0);
    int64_t T = 0;
    TRY(vt_mc_multi_check(&m->mc, seqs, n_tok, n_seq, tokens, m->d.n_vocab, m->pos, &T));
    TRY(vt_backend_get_rows_fn(m->api, m->token_embd.type)(m->ctx, &m->token_embd, tokens, T,
                                                           m->x));
    TRY(q35_layers_multi(m, seqs, n_tok, n_seq, T, 0));
    for (uint32_t i = 0; i < n_seq; i++) seqs[i]->pos += n_tok[i];
    return vt_mc_multi_logits(&m->mc, n_tok, n_seq, T, logits);
}
