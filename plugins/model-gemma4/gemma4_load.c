/*
 * gemma4_load.c - loading a Gemma 4 GGUF (`gemma4`) (its hyperparameters:
 * gemma4_hparams.c): tensor mapping with shape checks, weight placement, scratch, the backend
 * capabilities the file needs, and the memory the fit check must count.
 *
 * Tensors: names and shapes as llama.cpp's src/models/gemma4.cpp and
 * src/llama-arch.cpp load them (norms used as stored: the converter already
 * applied their offsets), the shared-KV source rule of src/llama-model.cpp.
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

    TRY(vt_mc_vec(L, NAME("attn_norm.weight"), G4_F_E, E, &ly->attn_norm, NULL));
    snprintf(from, sizeof from, "[embedding_length, attention.head_count x %s]", kl);
    TRY(vt_mc_matrix(L, NAME("attn_q.weight"), from, E, nh * hd, &ly->wq, NULL));
    snprintf(from, sizeof from, "[%s]", kl);
    TRY(vt_mc_vec(L, NAME("attn_q_norm.weight"), from, hd, &ly->q_norm, NULL));
    if (ly->has_kv) {
        snprintf(from, sizeof from, "[embedding_length, attention.head_count_kv x %s]", kl);
        TRY(vt_mc_matrix(L, NAME("attn_k.weight"), from, E, nkv * hd, &ly->wk, NULL));
        TRY(vt_mc_matrix(L, NAME("attn_v.weight"), from, E, nkv * hd, &ly->wv, &ly->has_v));
        snprintf(from, sizeof from, "[%s]", kl);
        TRY(vt_mc_vec(L, NAME("attn_k_norm.weight"), from, hd, &ly->k_norm, NULL));
    } else if (vt_mc_find(L, NAME("attn_k.weight"))) {
        L->host->log(VT_LOG_WARN, "gemma4: blk.%u has attn_k.weight but is a shared-KV layer "
                     "(shared_kv_layers = %u); it reads layer %d's cache", il, hp->n_shared_kv,
                     ly->kv_src);
    }
    snprintf(from, sizeof from, "[attention.head_count x %s, embedding_length]", kl);
    TRY(vt_mc_matrix(L, NAME("attn_output.weight"), from, nh * hd, E, &ly->wo, NULL));
    TRY(vt_mc_vec(L, NAME("post_attention_norm.weight"), G4_F_E, E, &ly->post_attn_norm, NULL));

    /* dense / shared MLP (always present) */
    if (ly->n_ff == 0) {
        L->host->set_error("gemma4: metadata key 'gemma4.feed_forward_length' is 0 (or absent) "
                           "for blk.%u, which needs its MLP width", il);
        return VT_ERR_FORMAT;
    }
    const int64_t F = ly->n_ff;
    TRY(vt_mc_vec(L, NAME("ffn_norm.weight"), G4_F_E, E, &ly->ffn_norm, NULL));
    TRY(vt_mc_matrix(L, NAME("ffn_gate.weight"), "[embedding_length, feed_forward_length]", E, F,
                  &ly->ffn_gate, NULL));
    TRY(vt_mc_matrix(L, NAME("ffn_up.weight"), "[embedding_length, feed_forward_length]", E, F,
                  &ly->ffn_up, NULL));
    TRY(vt_mc_matrix(L, NAME("ffn_down.weight"), "[feed_forward_length, embedding_length]", F, E,
                  &ly->ffn_down, NULL));
    TRY(vt_mc_vec(L, NAME("post_ffw_norm.weight"), G4_F_E, E, &ly->post_ffw_norm, NULL));

    /* MoE: ffn_gate_inp defines an MoE layer (§3.2) */
    ly->moe = vt_mc_find(L, NAME("ffn_gate_inp.weight")) != NULL;
    if (ly->moe) {
        if (!hp->n_expert) {
            L->host->set_error("gemma4: blk.%u has ffn_gate_inp.weight (an MoE layer) but "
                               "'gemma4.expert_count' is 0 or absent", il);
            return VT_ERR_FORMAT;
        }
        const int64_t X = hp->n_expert, FX = hp->n_ff_exp;
        TRY(vt_mc_matrix(L, NAME("ffn_gate_inp.weight"), "[embedding_length, expert_count]", E, X,
                      &ly->router, NULL));
        TRY(vt_mc_vec(L, NAME("ffn_gate_inp.scale"), G4_F_E, E, &ly->router_scale, NULL));
        TRY(vt_mc_vec(L, NAME("pre_ffw_norm_2.weight"), G4_F_E, E, &ly->pre_ffw_norm_2, NULL));
        TRY(vt_mc_vec(L, NAME("post_ffw_norm_1.weight"), G4_F_E, E, &ly->post_ffw_norm_1, NULL));
        TRY(vt_mc_vec(L, NAME("post_ffw_norm_2.weight"), G4_F_E, E, &ly->post_ffw_norm_2, NULL));
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
        TRY(vt_mc_matrix(L, NAME("inp_gate.weight"),
                      "[embedding_length, embedding_length_per_layer_input]", E, P, &ly->inp_gate,
                      NULL));
        TRY(vt_mc_matrix(L, NAME("proj.weight"),
                      "[embedding_length_per_layer_input, embedding_length]", P, E, &ly->proj,
                      NULL));
        TRY(vt_mc_vec(L, NAME("post_norm.weight"), G4_F_E, E, &ly->ple_post_norm, NULL));
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
    st = vt_mc_map_embeddings(L);
    if (st != VT_OK) return st;
    int any_full = 0, found = 0;
    for (uint32_t il = 0; il < hp->n_layer; il++) any_full |= !hp->is_swa[il];
    if (any_full) {
        st = vt_mc_vec(L, "rope_freqs.weight", "[rope.dimension_count / 2]", hp->n_rot_full / 2,
                    &m->rope_freqs, &found);
        if (st != VT_OK) return st;
    }
    if (hp->n_per_layer) {
        const int64_t LP = (int64_t)hp->n_per_layer * hp->n_layer;
        st = vt_mc_weight(L, "per_layer_token_embd.weight",
                       "[embedding_length_per_layer_input x block_count, n_vocab]", LP,
                       m->d.n_vocab, VT_MC_USE_GET_ROWS, &m->ple_token_embd, NULL);
        if (st != VT_OK) return st;
        st = vt_mc_matrix(L, "per_layer_model_proj.weight",
                       "[embedding_length, embedding_length_per_layer_input x block_count]",
                       hp->n_embd, LP, &m->ple_model_proj, NULL);
        if (st != VT_OK) return st;
        st = vt_mc_vec(L, "per_layer_proj_norm.weight", "[embedding_length_per_layer_input]",
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

static void g4_cache_bytes(const vt_model *m, uint32_t n_ctx, uint32_t n_batch, uint64_t *kv,
                           uint64_t *state)
{
    const gemma4_hparams *hp = &m->hp;
    const uint32_t swa_cap = g4_swa_cap(hp, n_ctx, n_batch);
    for (uint32_t il = 0; il < hp->n_kv_layers; il++) {
        uint64_t d = hp->is_swa[il] ? hp->head_dim_swa : hp->head_dim_full;
        uint64_t row = 2ull * hp->n_head_kv[il] * d * sizeof(float); /* K and V */
        if (hp->is_swa[il]) *state += row * swa_cap; /* bounded by the window (§6) */
        else *kv += row;
    }
}

/* The attention temporaries, the MLP and expert sums and the per-layer
 * inputs, beside the shared scratch (vt_mc_alloc_scratch). */
static vt_status g4_scratch(vt_model *m, size_t *bytes_only)
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
    const size_t LP = (size_t)hp->n_per_layer * hp->n_layer;
    const vt_mc_scratch_part parts[] = {
        {&m->q, T, max_q + 2 * max_kv}, /* + k | v of a merged one-token projection */
        {&m->att, T, max_q}, {&m->kp, T, max_kv}, {&m->vp, T, max_kv},
        {&m->f_m, T, E}, {&m->f_e, T, E},
        {&m->ple, T, LP ? LP : 1}, {&m->ple_tmp, T, LP ? LP : 1},
        {&m->ple_g, T, hp->n_per_layer ? hp->n_per_layer : 1},
    };
    const vt_mc_scratch_spec sp = {max_ff, max_kv, parts, sizeof parts / sizeof parts[0]};
    vt_status st = vt_mc_alloc_scratch(&m->mc, &sp, bytes_only);
    m->moe_out = m->f_e; /* the expert branch's sum (§5.3) */
    return st;
}

/* ================================================================ */
/* load / free                                                        */
/* ================================================================ */

/* The per-expert scales in device memory for moe_route (fused experts). */
static vt_status g4_setup_scales(vt_model *m)
{
    const gemma4_hparams *hp = &m->hp;
    const size_t nx = hp->n_expert, L = hp->n_layer;
    float *sc = gemma4_calloc(m->host, nx * L, sizeof *sc, "the per-expert scales");
    if (!sc) return VT_ERR_OUT_OF_MEMORY;
    void *scd = NULL;
    vt_status st = vt_mc_dev_alloc(&m->mc, nx * L * sizeof(float), "gemma4 per-expert scales", &scd);
    m->exp_scale_dev = scd;
    for (uint32_t il = 0; il < L && st == VT_OK; il++) {
        const gemma4_layer *ly = &m->layers[il];
        for (size_t e = 0; e < nx; e++) sc[il * nx + e] = ly->exp_scale ? ly->exp_scale[e] : 1.0f;
    }
    if (st == VT_OK && m->zero_copy) memcpy(scd, sc, nx * L * sizeof(float));
    else if (st == VT_OK) st = m->api->copy_h2d(m->ctx, scd, sc, nx * L * sizeof(float));
    free(sc);
    return st;
}

/* Layer il's routed experts, NULL for a dense layer (registered with the
 * streamer in the order the forward pass reads their slots: gate_up, down;
 * or gate, up, down). */
static const vt_mc_experts *g4_layer_experts(const vt_model *fm, uint32_t il)
{
    if (!fm->layers[il].moe) return NULL;
    return &fm->layers[il].x;
}

const char *gemma4_moe_path(const vt_model *m) { return vt_mc_moe_path(&m->mc, m->hp.n_expert != 0); }

static vt_status g4_read_hparams(const vt_host_api *host, const vt_gguf *g, vt_model *m)
{
    vt_status st = gemma4_read_hparams(host, g, &m->hp);
    const gemma4_hparams *hp = &m->hp;
    m->d = (vt_mc_dims){.n_layer = hp->n_layer, .n_embd = hp->n_embd, .n_expert = hp->n_expert,
                        .n_expert_used = hp->n_expert ? hp->n_expert_used : 0,
                        .n_ff_exp = hp->n_ff_exp, .n_ctx_train = hp->n_ctx_train,
                        .eps = hp->eps, .softcap = hp->softcap};
    return st;
}

static vt_status g4_alloc_layers(vt_model *m)
{
    m->layers = gemma4_calloc(m->host, m->hp.n_layer, sizeof *m->layers, "the layer table");
    return m->layers ? VT_OK : VT_ERR_OUT_OF_MEMORY;
}

static void g4_free_own(vt_model *m)
{
    if (m->exp_scale_dev && m->api) m->api->free(m->ctx, m->exp_scale_dev);
    g4_layers_free(m);
    gemma4_hparams_free(&m->hp);
}

static vt_status g4_finish(vt_model *m, const vt_model_params *params)
{
    (void)params;
    const gemma4_hparams *hp = &m->hp;
    m->swa_cap = g4_swa_cap(hp, m->n_ctx, m->n_batch);
    if (m->fused_moe) {
        vt_status st = g4_setup_scales(m);
        if (st != VT_OK) return st;
    }
    if (m->fuse) {
        uint32_t n_merged = 0;
        for (uint32_t il = 0; il < hp->n_layer; il++)
            n_merged += !!m->layers[il].w_qkv.data + !!m->layers[il].w_gu.data;
        m->host->log(VT_LOG_INFO, "gemma4: element-wise fusions of ABI 1.3 on (mul_act, "
                     "add_rms_norm), %u merged projections", n_merged);
    }
    uint32_t n_swa_layers = 0, n_moe = 0;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        n_swa_layers += hp->is_swa[il];
        n_moe += m->layers[il].moe;
    }
    m->host->log(VT_LOG_INFO,
                 "gemma4: %u layers (%u sliding window %u, %u full; %u shared-KV; %u MoE: %u "
                 "experts top-%u%s%s%s), n_embd %u, n_vocab %" PRId64 ", per-layer input %u, n_ctx "
                 "%u, n_batch %u, sliding cache %u rows, weights %s", hp->n_layer, n_swa_layers,
                 hp->n_swa, hp->n_layer - n_swa_layers, hp->n_shared_kv, n_moe, hp->n_expert,
                 hp->n_expert_used, m->experts ? ", streamed" : "", hp->n_expert ? "; " : "",
                 hp->n_expert ? gemma4_moe_path(m) : "", hp->n_embd, m->d.n_vocab,
                 hp->n_per_layer, m->n_ctx, m->n_batch, m->swa_cap,
                 m->zero_copy ? "zero-copy from the mmap" : "copied to the device");
    return VT_OK;
}

const vt_mc_family gemma4_family = {.name = "gemma4", .model_size = sizeof(vt_model),
                                     .dump_env = "VT_GEMMA4_DUMP", .n_ctx_max = INT32_MAX / 2,
                                     .moe_act = VT_MOE_ACT_GELU_TANH, VT_MC_FAMILY_FNS(g4)};
