/*
 * gemma4_load.c - loading a Gemma 4 GGUF (`gemma4`) (its hyperparameters:
 * gemma4_hparams.c): tensor mapping with shape checks, weight placement, scratch, the backend
 * capabilities the file needs, and the memory the fit check must count.
 *
 * Spec: ../shared/spec/gemma4.md §2 (keys and defaults), §3 (tensors and
 * shapes), §4 (what the converter already did: norms used as stored), §5.6
 * (the shared-KV source rule), §6 (per-sequence state).
 *
 * One mapping routine serves two purposes: required_caps() runs it "dry"
 * (reads only the tensor table, records the weight types it would use), and
 * load() runs it for real (places every weight in backend memory). So the
 * capabilities asked for are exactly those the forward pass will call.
 *
 * Hostile files: every hyperparameter is range-checked (G4_MAX_*) before any
 * size is computed from it, block_count is bounded by the tensor table, and
 * refusals name the key or tensor.
 */
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemma4.h"
#include "vt/model_common.h"
#include "vt/plugin_util.h"

#define G4_HEAD_ROWS 16 /* LM-head rows computed per chunk (bounds the logits scratch) */

/* ================================================================ */
/* named allocations                                                  */
/* ================================================================ */


vt_status gemma4_dev_alloc(vt_model *m, size_t bytes, const char *what, void **out)
{
    return vt_mc_dev_alloc(&m->mc, bytes, what, out);
}

void *gemma4_calloc(const vt_host_api *host, size_t n, size_t size, const char *what)
{
    return vt_util_calloc_named(host, "gemma4", n, size, what);
}

/* ================================================================ */
/* tensor mapping (spec §3)                                           */
/* ================================================================ */

/* The merged matrices of every layer (m->fuse): gemma4.h gemma4_layer. */
static vt_status g4_merge_layers(vt_model *m)
{
    const gemma4_hparams *hp = &m->hp;
    const uint64_t k = hp->n_expert ? hp->n_expert_used : 1;
    vt_status st = VT_OK;
    for (uint32_t il = 0; il < hp->n_layer && st == VT_OK; il++) {
        gemma4_layer *ly = &m->layers[il];
        if (ly->has_kv) {
            vt_weight *qkv[] = {&ly->wq, &ly->wk, &ly->wv};
            st = vt_mc_merge(&m->mc, qkv, ly->has_v ? 3 : 2, &ly->w_qkv);
        }
        /* the merged output [T][2 n_ff] lives in f_g: T x k x max_ff floats */
        size_t max_ff = 1;
        for (uint32_t j = 0; j < hp->n_layer; j++) max_ff = max_ff > hp->n_ff[j] ? max_ff : hp->n_ff[j];
        if (st == VT_OK && 2 * (uint64_t)ly->n_ff <= k * max_ff) {
            vt_weight *gu[] = {&ly->ffn_gate, &ly->ffn_up};
            st = vt_mc_merge(&m->mc, gu, 2, &ly->w_gu);
        }
    }
    return st;
}

static vt_status g4_matrix(vt_mc_loader *L, const char *name, const char *from, int64_t n_in,
                           int64_t n_out, vt_weight *w, int *found)
{
    return vt_mc_weight(L, name, from, n_in, n_out, VT_MC_USE_MAT_MUL, w, found);
}

/* An F32 vector [n] read by ops (norm weights, scales, rope_freqs). found
 * NULL: required. */
static vt_status g4_vec(vt_mc_loader *L, const char *name, const char *from, int64_t n,
                        const float **out, int *found)
{
    return vt_mc_f32(L, name, from, 1, &n, out, found);
}

/* An F32 vector [n] read on the host (per-expert scale, layer output scale):
 * copied from the mapping into host memory. */
static vt_status g4_host_vec(vt_mc_loader *L, const char *name, const char *from, int64_t n,
                             float **out, int *found)
{
    *out = NULL;
    const vt_gguf_tensor *t = vt_mc_find(L, name);
    *found = t != NULL;
    if (!t) return VT_OK;
    vt_status st = vt_mc_check_shape(L, t, 1, &n, from);
    if (st != VT_OK) return st;
    if (t->type != VT_TYPE_F32) {
        L->host->set_error("gemma4: tensor '%s' has type %s; expected F32", name,
                           vt_type_name(t->type));
        return VT_ERR_UNSUPPORTED;
    }
    if (L->dry) return VT_OK;
    if (t->nbytes < (uint64_t)n * 4 || !t->data) {
        L->host->set_error("gemma4: tensor '%s' has %s", name,
                           t->data ? "too few bytes for its shape" : "no mapped data");
        return VT_ERR_FORMAT;
    }
    float *p = gemma4_calloc(L->host, (size_t)n, sizeof(float), name);
    if (!p) return VT_ERR_OUT_OF_MEMORY;
    memcpy(p, t->data, (size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(p[i])) {
            L->host->set_error("gemma4: tensor '%s'[%" PRId64 "] = %g is not finite", name, i,
                               (double)p[i]);
            free(p);
            return VT_ERR_FORMAT;
        }
    *out = p;
    return VT_OK;
}

#define G4_F_E "[embedding_length]"

static vt_status g4_map_layer(vt_mc_loader *L, uint32_t il, gemma4_layer *ly)
{
    vt_model *m = L->fm;
    const gemma4_hparams *hp = &m->hp;
    char nm[96], from[192];
    vt_status st;
    const int64_t E = hp->n_embd;
#define NAME(suffix) (snprintf(nm, sizeof nm, "blk.%u." suffix, il), nm)
#define TRY(x) do { st = (x); if (st != VT_OK) return st; } while (0)

    ly->swa = hp->is_swa[il];
    ly->has_kv = il < hp->n_kv_layers;
    ly->kv_src = hp->kv_src[il];
    ly->n_head = hp->n_head[il];
    ly->n_head_kv = hp->n_head_kv[il];
    ly->head_dim = ly->swa ? hp->head_dim_swa : hp->head_dim_full;
    ly->n_rot = ly->swa ? hp->n_rot_swa : hp->n_rot_full;
    ly->rope_base = ly->swa ? hp->rope_base_swa : hp->rope_base_full;
    ly->n_ff = hp->n_ff[il];
    const int64_t hd = ly->head_dim, nh = ly->n_head, nkv = ly->n_head_kv;
    const char *kl = ly->swa ? "attention.key_length_swa" : "attention.key_length";

    TRY(g4_vec(L, NAME("attn_norm.weight"), G4_F_E, E, &ly->attn_norm, NULL));
    snprintf(from, sizeof from, "[embedding_length, attention.head_count x %s]", kl);
    TRY(g4_matrix(L, NAME("attn_q.weight"), from, E, nh * hd, &ly->wq, NULL));
    snprintf(from, sizeof from, "[%s]", kl);
    TRY(g4_vec(L, NAME("attn_q_norm.weight"), from, hd, &ly->q_norm, NULL));
    if (ly->has_kv) {
        snprintf(from, sizeof from, "[embedding_length, attention.head_count_kv x %s]", kl);
        TRY(g4_matrix(L, NAME("attn_k.weight"), from, E, nkv * hd, &ly->wk, NULL));
        TRY(g4_matrix(L, NAME("attn_v.weight"), from, E, nkv * hd, &ly->wv, &ly->has_v));
        snprintf(from, sizeof from, "[%s]", kl);
        TRY(g4_vec(L, NAME("attn_k_norm.weight"), from, hd, &ly->k_norm, NULL));
    } else if (vt_mc_find(L, NAME("attn_k.weight"))) {
        L->host->log(VT_LOG_WARN, "gemma4: blk.%u has attn_k.weight but is a shared-KV layer "
                     "(shared_kv_layers = %u); it reads layer %d's cache", il, hp->n_shared_kv,
                     ly->kv_src);
    }
    snprintf(from, sizeof from, "[attention.head_count x %s, embedding_length]", kl);
    TRY(g4_matrix(L, NAME("attn_output.weight"), from, nh * hd, E, &ly->wo, NULL));
    TRY(g4_vec(L, NAME("post_attention_norm.weight"), G4_F_E, E, &ly->post_attn_norm, NULL));

    /* dense / shared MLP (always present) */
    if (ly->n_ff == 0) {
        L->host->set_error("gemma4: metadata key 'gemma4.feed_forward_length' is 0 (or absent) "
                           "for blk.%u, which needs its MLP width", il);
        return VT_ERR_FORMAT;
    }
    const int64_t F = ly->n_ff;
    TRY(g4_vec(L, NAME("ffn_norm.weight"), G4_F_E, E, &ly->ffn_norm, NULL));
    TRY(g4_matrix(L, NAME("ffn_gate.weight"), "[embedding_length, feed_forward_length]", E, F,
                  &ly->ffn_gate, NULL));
    TRY(g4_matrix(L, NAME("ffn_up.weight"), "[embedding_length, feed_forward_length]", E, F,
                  &ly->ffn_up, NULL));
    TRY(g4_matrix(L, NAME("ffn_down.weight"), "[feed_forward_length, embedding_length]", F, E,
                  &ly->ffn_down, NULL));
    TRY(g4_vec(L, NAME("post_ffw_norm.weight"), G4_F_E, E, &ly->post_ffw_norm, NULL));

    /* MoE: ffn_gate_inp defines an MoE layer (§3.2) */
    ly->moe = vt_mc_find(L, NAME("ffn_gate_inp.weight")) != NULL;
    if (ly->moe) {
        if (!hp->n_expert) {
            L->host->set_error("gemma4: blk.%u has ffn_gate_inp.weight (an MoE layer) but "
                               "'gemma4.expert_count' is 0 or absent", il);
            return VT_ERR_FORMAT;
        }
        const int64_t X = hp->n_expert, FX = hp->n_ff_exp;
        TRY(g4_matrix(L, NAME("ffn_gate_inp.weight"), "[embedding_length, expert_count]", E, X,
                      &ly->router, NULL));
        TRY(g4_vec(L, NAME("ffn_gate_inp.scale"), G4_F_E, E, &ly->router_scale, NULL));
        TRY(g4_vec(L, NAME("pre_ffw_norm_2.weight"), G4_F_E, E, &ly->pre_ffw_norm_2, NULL));
        TRY(g4_vec(L, NAME("post_ffw_norm_1.weight"), G4_F_E, E, &ly->post_ffw_norm_1, NULL));
        TRY(g4_vec(L, NAME("post_ffw_norm_2.weight"), G4_F_E, E, &ly->post_ffw_norm_2, NULL));
        ly->fused_gate_up = vt_mc_find(L, NAME("ffn_gate_up_exps.weight")) != NULL;
        if (ly->fused_gate_up) { /* pitfall 16: rows [0, F) gate, [F, 2F) up */
            TRY(vt_mc_stack_map(L, NAME("ffn_gate_up_exps.weight"),
                             "[embedding_length, 2 x expert_feed_forward_length, expert_count]",
                             E, 2 * FX, X, &ly->gate_up_exps));
        } else {
            const char *f = "[embedding_length, expert_feed_forward_length, expert_count]";
            if (!vt_mc_find(L, NAME("ffn_gate_exps.weight")))
                return vt_mc_missing(L, NAME("ffn_gate_up_exps.weight"),
                                  "neither the fused nor the split (ffn_gate_exps) expert form");
            TRY(vt_mc_stack_map(L, NAME("ffn_gate_exps.weight"), f, E, FX, X, &ly->gate_exps));
            TRY(vt_mc_stack_map(L, NAME("ffn_up_exps.weight"), f, E, FX, X, &ly->up_exps));
        }
        TRY(vt_mc_stack_map(L, NAME("ffn_down_exps.weight"),
                         "[expert_feed_forward_length, embedding_length, expert_count]", FX, E, X,
                         &ly->down_exps));
        int found;
        TRY(g4_host_vec(L, NAME("ffn_down_exps.scale"), "[expert_count]", X, &ly->exp_scale,
                        &found));
    }

    /* per-layer embedding injection */
    if (hp->n_per_layer) {
        const int64_t P = hp->n_per_layer;
        TRY(g4_matrix(L, NAME("inp_gate.weight"),
                      "[embedding_length, embedding_length_per_layer_input]", E, P, &ly->inp_gate,
                      NULL));
        TRY(g4_matrix(L, NAME("proj.weight"),
                      "[embedding_length_per_layer_input, embedding_length]", P, E, &ly->proj,
                      NULL));
        TRY(g4_vec(L, NAME("post_norm.weight"), G4_F_E, E, &ly->ple_post_norm, NULL));
    }

    {
        float *v = NULL;
        int found = 0;
        TRY(g4_host_vec(L, NAME("layer_output_scale.weight"), "[1]", 1, &v, &found));
        ly->has_out_scale = found;
        ly->out_scale = v ? v[0] : 1.0f;
        free(v);
    }
    /* NVFP4 companion scales are not implemented: refuse rather than ignore */
    static const char *const nv[] = {"attn_q.scale", "attn_k.scale", "attn_v.scale",
                                     "attn_output.scale", "ffn_gate.scale", "ffn_up.scale",
                                     "ffn_down.scale", "ffn_gate_up_exps.scale",
                                     "ffn_gate_exps.scale", "ffn_up_exps.scale"};
    for (size_t i = 0; i < sizeof nv / sizeof nv[0]; i++) {
        snprintf(nm, sizeof nm, "blk.%u.%s", il, nv[i]);
        if (vt_mc_find(L, nm)) {
            L->host->set_error("gemma4: tensor '%s' is present: per-matrix output scales (NVFP4 "
                               "files) are not implemented", nm);
            return VT_ERR_UNSUPPORTED;
        }
    }
#undef NAME
#undef TRY
    return VT_OK;
}

static vt_status g4_map_model(vt_mc_loader *L)
{
    vt_model *m = L->fm;
    gemma4_hparams *hp = &m->hp;
    vt_status st;
    const vt_gguf_tensor *te = vt_mc_find(L, "token_embd.weight");
    if (!te) return vt_mc_missing(L, "token_embd.weight", NULL);
    if (te->ne[1] <= 0 || te->ne[1] > INT32_MAX) {
        L->host->set_error("gemma4: tensor 'token_embd.weight' has %" PRId64 " rows (n_vocab)",
                           te->ne[1]);
        return VT_ERR_FORMAT;
    }
    hp->n_vocab = te->ne[1];
    const int tied = vt_mc_find(L, "output.weight") == NULL;
    st = vt_mc_weight(L, "token_embd.weight", "[embedding_length, n_vocab]", hp->n_embd, hp->n_vocab,
                   VT_MC_USE_GET_ROWS | (tied ? VT_MC_USE_MAT_MUL : 0), &m->token_embd, NULL);
    if (st != VT_OK) return st;
    if (tied) {
        m->output = m->token_embd;
    } else {
        st = g4_matrix(L, "output.weight", "[embedding_length, n_vocab (token_embd rows)]",
                       hp->n_embd, hp->n_vocab, &m->output, NULL);
        if (st != VT_OK) return st;
    }
    st = g4_vec(L, "output_norm.weight", G4_F_E, hp->n_embd, &m->output_norm, NULL);
    if (st != VT_OK) return st;
    int any_full = 0, found = 0;
    for (uint32_t il = 0; il < hp->n_layer; il++) any_full |= !hp->is_swa[il];
    if (any_full) {
        st = g4_vec(L, "rope_freqs.weight", "[rope.dimension_count / 2]", hp->n_rot_full / 2,
                    &m->rope_freqs, &found);
        if (st != VT_OK) return st;
    }
    if (hp->n_per_layer) {
        const int64_t LP = (int64_t)hp->n_per_layer * hp->n_layer;
        st = vt_mc_weight(L, "per_layer_token_embd.weight",
                       "[embedding_length_per_layer_input x block_count, n_vocab]", LP,
                       hp->n_vocab, VT_MC_USE_GET_ROWS, &m->ple_token_embd, NULL);
        if (st != VT_OK) return st;
        st = g4_matrix(L, "per_layer_model_proj.weight",
                       "[embedding_length, embedding_length_per_layer_input x block_count]",
                       hp->n_embd, LP, &m->ple_model_proj, NULL);
        if (st != VT_OK) return st;
        st = g4_vec(L, "per_layer_proj_norm.weight", "[embedding_length_per_layer_input]",
                    hp->n_per_layer, &m->ple_proj_norm, NULL);
        if (st != VT_OK) return st;
    }
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        st = g4_map_layer(L, il, &m->layers[il]);
        if (st == VT_ERR_NOT_FOUND) {
            char prev[512];
            snprintf(prev, sizeof prev, "%s", L->host->last_error());
            L->host->set_error("%s (blk.%u is a %s layer by gemma4.attention.sliding_window_pattern"
                               "[%u]%s)", prev, il, hp->is_swa[il] ? "sliding" : "full", il,
                               il < hp->n_kv_layers ? ", with its own KV" : ", shared-KV");
        }
        if (st != VT_OK) return st;
    }
    return VT_OK;
}

/* Op capabilities the forward pass calls for this configuration. */
static void g4_op_caps(const vt_model *m, vt_mc_loader *L)
{
    vt_mc_add_cap(L, VT_CAP_OP_RMS_NORM);
    vt_mc_add_cap(L, VT_CAP_OP_ROPE_NEOX);
    vt_mc_add_cap(L, VT_CAP_OP_ATTENTION);
    vt_mc_add_cap(L, VT_CAP_OP_UNARY);
    vt_mc_add_cap(L, VT_CAP_OP_BINARY);
    vt_mc_add_cap(L, VT_CAP_OP_SCALE);
    int any_swa = 0;
    for (uint32_t il = 0; il < m->hp.n_layer; il++) any_swa |= m->hp.is_swa[il];
    if (any_swa || m->hp.n_per_layer) vt_mc_add_cap(L, VT_CAP_OP_COPY_2D);
    if (m->hp.n_expert) {
        vt_mc_add_cap(L, VT_CAP_OP_SOFTMAX_TOPK);
        vt_mc_add_cap(L, VT_CAP_OP_GATHER_ROWS);
        vt_mc_add_cap(L, VT_CAP_OP_SCATTER_ADD);
    }
}

/* ================================================================ */
/* required_caps                                                      */
/* ================================================================ */

static void g4_layers_free(vt_model *m)
{
    if (!m->layers) return;
    for (uint32_t il = 0; il < m->hp.n_layer; il++) free(m->layers[il].exp_scale);
    free(m->layers);
    m->layers = NULL;
}

vt_status gemma4_required_caps(const vt_host_api *host, const vt_gguf *g, uint32_t *ids,
                               uint32_t cap, uint32_t *n)
{
    if (!host || !g || !n || (cap && !ids)) {
        if (host) host->set_error("gemma4: required_caps: NULL argument");
        return VT_ERR_INVALID_ARG;
    }
    *n = 0;
    vt_model tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.host = host;
    tmp.family = "gemma4";
    vt_status st = gemma4_read_hparams(host, g, &tmp.hp);
    if (st != VT_OK) {
        gemma4_hparams_free(&tmp.hp);
        return st;
    }
    tmp.layers = gemma4_calloc(host, tmp.hp.n_layer, sizeof *tmp.layers, "the layer table");
    if (!tmp.layers) {
        gemma4_hparams_free(&tmp.hp);
        return VT_ERR_OUT_OF_MEMORY;
    }
    /* distinct ids number fewer than VT_CAP_ID_LIMIT (the fixed ids and two per
     * named type), so a table that size never overflows and the count is
     * exact whatever the caller's capacity */
    uint32_t all[VT_CAP_ID_LIMIT];
    vt_mc_loader L = {host, g, &tmp.mc, &tmp, "gemma4", 1, all, 0, VT_CAP_ID_LIMIT};
    g4_op_caps(&tmp, &L);
    st = g4_map_model(&L);
    g4_layers_free(&tmp);
    gemma4_hparams_free(&tmp.hp);
    if (st != VT_OK) return st;
    *n = L.n_caps;
    if (L.n_caps > cap) {
        host->set_error("gemma4: required_caps needs room for %u capability ids, got %u",
                        L.n_caps, cap);
        return VT_ERR_RANGE;
    }
    memcpy(ids, all, (size_t)L.n_caps * sizeof *ids);
    return VT_OK;
}

/* ================================================================ */
/* scratch and memory_needs                                           */
/* ================================================================ */

static size_t g4_max(size_t a, size_t b) { return a > b ? a : b; }

static uint32_t g4_swa_cap(const gemma4_hparams *hp, uint32_t n_ctx, uint32_t n_batch)
{
    uint64_t c = (uint64_t)hp->n_swa + n_batch;
    return c < n_ctx ? (uint32_t)c : n_ctx;
}

size_t gemma4_kv_row_bytes(const vt_model *m, uint32_t il)
{
    const gemma4_layer *ly = &m->layers[il];
    return (size_t)ly->n_head_kv * ly->head_dim * sizeof(float);
}

/* Carve the device scratch for n_batch tokens out of one allocation (and the
 * host scratch). bytes_only: compute the device size only. */
static vt_status g4_alloc_scratch(vt_model *m, size_t *bytes_only)
{
    const gemma4_hparams *hp = &m->hp;
    const size_t T = m->n_batch, E = hp->n_embd;
    size_t max_q = 1, max_kv = 1, max_ff = g4_max(hp->n_ff_exp, 1);
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        size_t d = hp->is_swa[il] ? hp->head_dim_swa : hp->head_dim_full;
        max_q = g4_max(max_q, (size_t)hp->n_head[il] * d);
        max_kv = g4_max(max_kv, (size_t)hp->n_head_kv[il] * d);
        max_ff = g4_max(max_ff, hp->n_ff[il]);
    }
    max_ff = g4_max(max_ff, hp->n_per_layer); /* f_g also holds a PLE slice */
    /* FFN rows: T tokens, or one expert group's (token, expert) pairs, at most
     * T x top-k, for the routed experts */
    const size_t TF = hp->n_expert ? T * (size_t)hp->n_expert_used : T;
    const size_t LP = (size_t)hp->n_per_layer * hp->n_layer;
    m->head_rows = m->n_batch < G4_HEAD_ROWS ? m->n_batch : G4_HEAD_ROWS;
    float *moe_extra = NULL, *r_ids_f = NULL, *d_pos_f = NULL;
    const vt_mc_scratch_part parts[] = {
        {&m->x, T, E}, {&m->h, T, E}, {&m->a, T, E},
        {&m->q, T, max_q + 2 * max_kv}, /* + k | v of a merged one-token projection */
        {&m->att, T, max_q}, {&m->kp, T, max_kv}, {&m->vp, T, max_kv},
        /* f_x .. moe_extra, contiguous, are also moe_ffn's scratch (fused path):
         * TF x (2 n_embd + 2 n_ff) floats and room for its int32 arrays */
        {&m->f_x, TF, E}, {&m->f_y, TF, E}, {&m->f_g, TF, max_ff}, {&m->f_u, TF, max_ff},
        {&moe_extra, TF * 4 + ((size_t)hp->n_expert + 1) * 2 + 1024, 1},
        {&m->f_m, T, E}, {&m->f_e, T, E},
        {&m->r_logits, T, hp->n_expert ? hp->n_expert : 1},
        /* r_ids: + top-k for the next layer's predicted ids (prefetch) */
        {&r_ids_f, TF + hp->n_expert_used, 1}, {&m->r_w, TF, 1}, {&d_pos_f, 2, 1},
        {&m->ah_h, 1, E}, {&m->ah_logits, 1, hp->n_expert ? hp->n_expert : 1},
        {&m->ah_w, 1, hp->n_expert_used ? hp->n_expert_used : 1},
        {&m->s_k, T, max_kv}, {&m->s_v, T, max_kv},
        {&m->ple, T, LP ? LP : 1}, {&m->ple_tmp, T, LP ? LP : 1},
        {&m->ple_g, T, hp->n_per_layer ? hp->n_per_layer : 1},
        {&m->logits_buf, (size_t)m->head_rows, (size_t)hp->n_vocab},
    };
    vt_status st = vt_mc_carve_scratch(&m->mc, parts, sizeof parts / sizeof parts[0], bytes_only,
                                       &m->scratch);
    if (st != VT_OK || bytes_only) return st;
    /* f_x .. moe_extra: moe_ffn's scratch (the part after moe_extra starts where it ends) */
    m->moe_scratch_bytes = (size_t)(m->f_m - m->f_x) * sizeof(float);
    m->r_ids = (int32_t *)(void *)r_ids_f; /* TF int32 in a part of TF floats */
    m->d_pos = (int32_t *)(void *)d_pos_f;
    size_t k = hp->n_expert ? hp->n_expert_used : 1;
    const vt_host_api *H = m->host;
    if (!(m->pos = gemma4_calloc(H, T, sizeof *m->pos, "the host scratch: positions")) ||
        !(m->topk_ids = gemma4_calloc(H, (T + 1) * k, sizeof *m->topk_ids,
                                      "the top-k expert ids")) || /* + a prediction */
        !(m->topk_w = gemma4_calloc(H, T * k, sizeof *m->topk_w, "the top-k expert weights")) ||
        !(m->exp_count = gemma4_calloc(H, (size_t)hp->n_expert + 2, sizeof *m->exp_count,
                                       "the per-expert counts")) ||
        !(m->exp_tok = gemma4_calloc(H, T * k, sizeof *m->exp_tok, "the routed tokens")) ||
        !(m->exp_w = gemma4_calloc(H, T * k, sizeof *m->exp_w, "the routed weights")) ||
        !(m->grp_down = gemma4_calloc(H, k, sizeof *m->grp_down,
                                      "an expert group's down matrices")) ||
        !(m->grp_row0 = gemma4_calloc(H, k, sizeof *m->grp_row0, "an expert group's rows")) ||
        !(m->grp_rows = gemma4_calloc(H, k, sizeof *m->grp_rows,
                                      "an expert group's row counts")))
        return VT_ERR_OUT_OF_MEMORY;
    return VT_OK;
}

static uint32_t g4_n_ctx(const gemma4_hparams *hp, const vt_model_params *params)
{
    uint32_t n_ctx = params ? params->n_ctx : 0;
    if (n_ctx == 0) n_ctx = hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    return n_ctx ? n_ctx : 4096;
}

vt_status gemma4_memory_needs(const vt_host_api *host, const vt_gguf *g,
                              const vt_model_params *params, vt_model_memory *out)
{
    if (!host || !g || !params || !out) {
        if (host) host->set_error("gemma4: memory_needs: NULL argument");
        return VT_ERR_INVALID_ARG;
    }
    vt_model tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.host = host;
    tmp.family = "gemma4";
    vt_status st = gemma4_read_hparams(host, g, &tmp.hp);
    if (st != VT_OK) {
        gemma4_hparams_free(&tmp.hp);
        return st;
    }
    const gemma4_hparams *hp = &tmp.hp;
    tmp.n_batch = params->n_batch ? params->n_batch : 512;
    uint32_t n_ctx = g4_n_ctx(hp, params);
    uint32_t swa_cap = g4_swa_cap(hp, n_ctx, tmp.n_batch);
    uint64_t kv = 0, state = 0;
    for (uint32_t il = 0; il < hp->n_kv_layers; il++) {
        uint64_t d = hp->is_swa[il] ? hp->head_dim_swa : hp->head_dim_full;
        uint64_t row = 2ull * hp->n_head_kv[il] * d * sizeof(float); /* K and V */
        if (hp->is_swa[il]) state += row * swa_cap; /* bounded by the window (§6) */
        else kv += row;
    }
    const vt_gguf_tensor *te = host->gguf_find_tensor(g, "token_embd.weight");
    tmp.hp.n_vocab = te && te->n_dims >= 2 && te->ne[1] > 0 ? te->ne[1] : 0;
    size_t scratch = 0;
    st = g4_alloc_scratch(&tmp, &scratch);
    gemma4_hparams_free(&tmp.hp);
    if (st != VT_OK) return st;
    out->kv_bytes_per_token = kv;
    out->state_bytes = state;
    out->scratch_bytes = scratch;
    return VT_OK;
}

/* ================================================================ */
/* load / free                                                        */
/* ================================================================ */

/* The fused-experts path (op.moe_route + op.moe_ffn PRESENT, VT_MOE_FFN not
 * "0"): per MoE layer a device table of expert pointers (written now for
 * resident stacks, per acquired group when streamed) and the per-expert
 * scales in device memory for moe_route. */
static vt_status g4_setup_fused(vt_model *m)
{
    const gemma4_hparams *hp = &m->hp;
    if (!hp->n_expert || vt_util_env_off(m->host, "VT_MOE_FFN") ||
        !vt_util_moe_fused_available(m->api))
        return VT_OK;
    /* the shapes every backend's moe_ffn takes (vt/backend.h): gate and up
     * of one type, rows of a multiple of 32 */
    if (hp->n_embd % 32 || hp->n_ff_exp % 32) return VT_OK;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        const gemma4_layer *ly = &m->layers[il];
        if (ly->moe && !ly->fused_gate_up && ly->gate_exps.type != ly->up_exps.type) return VT_OK;
    }
    const size_t nx = hp->n_expert, per = 3 * nx, L = hp->n_layer;
    m->exp_tab = gemma4_calloc(m->host, L, sizeof *m->exp_tab, "the expert tables");
    m->exp_tab_host = gemma4_calloc(m->host, per, sizeof *m->exp_tab_host, "an expert table");
    float *sc = gemma4_calloc(m->host, nx * L, sizeof *sc, "the per-expert scales");
    vt_status st = !m->exp_tab || !m->exp_tab_host || !sc ? VT_ERR_OUT_OF_MEMORY : VT_OK;
    /* streamed through a device table: a page-locked image, so that a
     * one-token step's upload is queued */
    if (st == VT_OK && m->experts && !m->zero_copy)
        m->exp_tab_pinned = vt_util_exp_tab_pin(m->host, m->api, m->ctx, &m->exp_tab_host,
                                                per * sizeof(void *), "gemma4 expert table image");
    if (st == VT_OK)
        st = gemma4_dev_alloc(m, per * L * sizeof(void *), "gemma4 expert pointer tables",
                              &m->exp_tab_dev);
    void *scd = NULL;
    if (st == VT_OK)
        st = gemma4_dev_alloc(m, nx * L * sizeof(float), "gemma4 per-expert scales", &scd);
    m->exp_scale_dev = scd;
    if (st == VT_OK && m->experts)
        st = m->api->memset_zero(m->ctx, m->exp_tab_dev, per * L * sizeof(void *));
    for (uint32_t il = 0; il < L && st == VT_OK; il++) {
        const gemma4_layer *ly = &m->layers[il];
        for (size_t e = 0; e < nx; e++) sc[il * nx + e] = ly->exp_scale ? ly->exp_scale[e] : 1.0f;
        if (!ly->moe) continue;
        m->exp_tab[il] = (void **)m->exp_tab_dev + per * il;
        /* streamed: zeroed until a group is acquired (a NULL entry is never read) */
        if (!m->experts) st = gemma4_write_expert_table(m, il, NULL, 0, NULL);
    }
    if (st == VT_OK && m->zero_copy) memcpy(scd, sc, nx * L * sizeof(float));
    else if (st == VT_OK) st = m->api->copy_h2d(m->ctx, scd, sc, nx * L * sizeof(float));
    free(sc);
    m->fused_moe = st == VT_OK;
    return st;
}

/* Decode graphs: the backend has them (vt_util_graph_available), and the
 * experts (if any) are fused; resident: the whole step, streamed: segments
 * between the MoE layers' acquires (g4_step_segments). */
static void g4_setup_graph(vt_model *m)
{
    vt_mc_setup_graph(&m->mc, m->hp.n_expert != 0);
}

vt_status gemma4_write_expert_table(vt_model *m, uint32_t il, const int32_t *ids, uint32_t n,
                                    const void *const *slots)
{
    return vt_mc_write_expert_table(&m->mc, il, &m->layers[il].x, m->hp.n_expert, ids, n, slots);
}

void gemma4_free(vt_model *m)
{
    if (!m) return;
    if (m->api) {
        if (m->exp_tab_dev) m->api->free(m->ctx, m->exp_tab_dev);
        if (m->exp_scale_dev) m->api->free(m->ctx, m->exp_scale_dev);
        vt_mc_free_weights(&m->mc);
        if (m->scratch) m->api->free(m->ctx, m->scratch);
    }
    free(m->dev_allocs);
    g4_layers_free(m);
    free(m->pos);
    free(m->topk_ids);
    free(m->topk_w);
    free(m->exp_count);
    free(m->exp_tok);
    free(m->exp_w);
    free(m->grp_down);
    free(m->grp_row0);
    free(m->grp_rows);
    free(m->exp_slots);
    free(m->exp_ids);
    free(m->exp_tab);
    vt_util_exp_tab_image_free(m->host, m->api, m->ctx, m->exp_tab_host,
                               3 * (size_t)m->hp.n_expert * sizeof(void *), m->exp_tab_pinned);
    gemma4_hparams_free(&m->hp);
    free(m);
}

/* Register every MoE layer's expert stacks with the streamer, in the order
 * the forward pass reads their slots (gate_up, down; or gate, up, down). */
static const vt_mc_experts *g4_layer_experts(const vt_model *fm, uint32_t il)
{
    if (!fm->layers[il].moe) return NULL;
    return &fm->layers[il].x;
}

static vt_status g4_register_experts(vt_model *m)
{
    return vt_mc_register_experts(&m->mc, m->hp.n_layer, m->hp.n_expert_used, g4_layer_experts, m);
}

vt_status gemma4_load(const vt_host_api *host, const vt_gguf *g, const vt_backend *backend,
                      const vt_model_params *params, vt_model **out)
{
    if (!host || !g || !backend || !backend->api || !out) {
        if (host) host->set_error("gemma4: load: NULL argument");
        return VT_ERR_INVALID_ARG;
    }
    *out = NULL;
    vt_model *m = gemma4_calloc(host, 1, sizeof *m, "the model object");
    if (!m) return VT_ERR_OUT_OF_MEMORY;
    m->host = host;
    m->family = "gemma4";
    m->backend = backend;
    m->api = backend->api;
    m->ctx = backend->ctx;
    vt_status st = gemma4_read_hparams(host, g, &m->hp);
    if (st != VT_OK) goto fail;
    const gemma4_hparams *hp = &m->hp;
    {
        uint32_t ids[32];
        vt_mc_loader C = {host, g, &m->mc, m, "gemma4", 1, ids, 0, 32};
        g4_op_caps(m, &C);
        for (uint32_t i = 0; i < C.n_caps && i < 32; i++) {
            const char *nm;
            if (!vt_mc_op_present(m->api, ids[i], &nm)) {
                host->set_error("gemma4: backend '%s' has no '%s' op, which this model needs",
                                backend->name ? backend->name : "?", nm);
                st = VT_ERR_CAPABILITY;
                goto fail;
            }
        }
    }
    m->zero_copy = vt_mc_host_addressable(m->api);
    m->layers = gemma4_calloc(host, hp->n_layer, sizeof *m->layers, "the layer table");
    if (!m->layers) {
        st = VT_ERR_OUT_OF_MEMORY;
        goto fail;
    }
    m->n_ctx = g4_n_ctx(hp, params);
    m->n_batch = params && params->n_batch ? params->n_batch : 512;
    if (m->n_ctx > (uint32_t)INT32_MAX / 2 ||
        (uint64_t)m->n_batch * (hp->n_expert ? hp->n_expert_used : 1) > (uint64_t)INT32_MAX) {
        host->set_error("gemma4: n_ctx = %u / n_batch = %u is too large", m->n_ctx, m->n_batch);
        st = VT_ERR_RANGE;
        goto fail;
    }
    m->swa_cap = g4_swa_cap(hp, m->n_ctx, m->n_batch);
    if (params && params->struct_size >= offsetof(vt_model_params, experts) + sizeof params->experts &&
        params->experts && hp->n_expert)
        m->experts = params->experts;
    vt_mc_loader L = {host, g, &m->mc, m, "gemma4", 0, NULL, 0, 0};
    st = g4_map_model(&L);
    if (st != VT_OK) goto fail;
    if (m->experts && (st = g4_register_experts(m)) != VT_OK) goto fail;
    st = g4_alloc_scratch(m, NULL);
    if (st != VT_OK) goto fail;
    st = g4_setup_fused(m);
    if (st != VT_OK) goto fail;
    g4_setup_graph(m);
    m->fuse = vt_util_fusions_available(host, m->api);
    if (m->fuse && (st = g4_merge_layers(m)) != VT_OK) goto fail;
    if (m->fuse) {
        uint32_t n_merged = 0;
        for (uint32_t il = 0; il < hp->n_layer; il++)
            n_merged += !!m->layers[il].w_qkv.data + !!m->layers[il].w_gu.data;
        host->log(VT_LOG_INFO, "gemma4: element-wise fusions of ABI 1.3 on (mul_act, "
                  "add_rms_norm), %u merged projections", n_merged);
    }
    const char *dump = getenv("VT_GEMMA4_DUMP");
    m->dump_path = dump && *dump ? dump : NULL;

    uint32_t n_swa_layers = 0, n_moe = 0;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        n_swa_layers += hp->is_swa[il];
        n_moe += m->layers[il].moe;
    }
    host->log(VT_LOG_INFO,
              "gemma4: %u layers (%u sliding window %u, %u full; %u shared-KV; %u MoE: %u experts "
              "top-%u%s%s%s), n_embd %u, n_vocab %" PRId64 ", per-layer input %u, n_ctx %u, n_batch "
              "%u, sliding cache %u rows, weights %s", hp->n_layer, n_swa_layers, hp->n_swa,
              hp->n_layer - n_swa_layers, hp->n_shared_kv, n_moe, hp->n_expert, hp->n_expert_used,
              m->experts ? ", streamed" : "", hp->n_expert ? "; " : "",
              hp->n_expert ? gemma4_moe_path(m) : "", hp->n_embd, hp->n_vocab, hp->n_per_layer, m->n_ctx,
              m->n_batch, m->swa_cap, m->zero_copy ? "zero-copy from the mmap" : "copied to the device");
    *out = m;
    return VT_OK;
fail:
    gemma4_free(m);
    return st;
}

/* ================================================================ */
/* expert views                                                       */
/* ================================================================ */

vt_status gemma4_expert_weight(const vt_model *m, uint32_t il, gemma4_expert_matrix which,
                               uint32_t e, const void *const *slots, vt_weight *out)
{
    return vt_mc_expert_weight(&m->mc, &m->layers[il].x, (int)which, e, slots, out);
}
