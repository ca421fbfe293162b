/*
 * model_family.c - the sequences every model family runs the same way
 * (vt/model_common.h): load, free, required_caps and memory_needs around a
 * family's vt_mc_family, the embeddings and LM head tensors, the activation
 * scratch, the fused experts' tables, and sequences.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vt/model_common.h"
#include "vt/plugin_util.h"

#define MC_HEAD_ROWS 16 /* LM-head rows computed per chunk (bounds the logits scratch) */

/* The shared head of a family's model (VT_MC_MODEL_HEAD is its first member). */
static vt_mc_model *mc_of(vt_model *fm) { return (vt_mc_model *)(void *)fm; }

static void *mc_calloc(const vt_mc_model *m, size_t n, size_t size, const char *what)
{
    return vt_util_calloc_named(m->host, m->family, n, size, what);
}

/* ---------------------------------------------------------------- */
/* sequences                                                          */
/* ---------------------------------------------------------------- */

void vt_mc_seq_free(vt_mc_model *m, vt_mc_seq *s)
{
    if (!s) return;
    if (s->graph && m) m->api->graph_free(m->ctx, s->graph);
    vt_mc_free_segments(m, s);
    for (uint32_t il = 0; m && il < m->d.n_layer; il++) {
        if (s->k_cache && s->k_cache[il]) m->api->free(m->ctx, s->k_cache[il]);
        if (s->v_cache && s->v_cache[il]) m->api->free(m->ctx, s->v_cache[il]);
    }
    free(s->k_cache);
    free(s->v_cache);
    free(s);
}

vt_status vt_mc_seq_new(vt_mc_model *m, const vt_model *fm, size_t seq_size,
                        vt_status (*kv_bytes)(const vt_model *fm, uint32_t il, size_t *bytes),
                        vt_mc_seq **out)
{
    *out = NULL;
    const uint32_t L = m->d.n_layer;
    vt_mc_seq *s = mc_calloc(m, 1, seq_size, "a sequence");
    if (!s) return VT_ERR_OUT_OF_MEMORY;
    if (!(s->k_cache = mc_calloc(m, L, sizeof(float *), "a sequence's K cache table")) ||
        !(s->v_cache = mc_calloc(m, L, sizeof(float *), "a sequence's V cache table"))) {
        vt_mc_seq_free(m, s);
        return VT_ERR_OUT_OF_MEMORY;
    }
    vt_status st = VT_OK;
    for (uint32_t il = 0; il < L && st == VT_OK; il++) {
        size_t kv = 0;
        st = kv_bytes(fm, il, &kv);
        if (st != VT_OK || !kv) continue;
        st = vt_mc_seq_alloc(m, kv, "KV cache K", il, &s->k_cache[il]);
        if (st == VT_OK) st = vt_mc_seq_alloc(m, kv, "KV cache V", il, &s->v_cache[il]);
    }
    if (st != VT_OK) {
        vt_mc_seq_free(m, s);
        return st;
    }
    *out = s;
    return VT_OK;
}

void vt_mc_info_entry(const vt_model *fm, vt_model_info *out)
{
    if (!fm || !out) return;
    const vt_mc_model *m = (const vt_mc_model *)(const void *)fm;
    vt_mc_info(m, m->d.n_vocab, m->d.n_embd, m->d.n_layer, m->d.n_ctx_train,
               vt_mc_moe_path(m, m->d.n_expert != 0), vt_mc_decode_path(m), out);
}

int64_t vt_mc_seq_pos_entry(const vt_model *fm, const vt_model_seq *s)
{
    (void)fm;
    return s ? vt_mc_seq_pos(s) : 0;
}

/* ---------------------------------------------------------------- */
/* tensors and scratch                                                */
/* ---------------------------------------------------------------- */

vt_status vt_mc_map_embeddings(vt_mc_loader *L)
{
    vt_mc_model *m = L->mc;
    const vt_gguf_tensor *te = vt_mc_find(L, "token_embd.weight");
    if (!te) return vt_mc_missing(L, "token_embd.weight", NULL);
    if (te->ne[1] <= 0 || te->ne[1] > INT32_MAX) {
        L->host->set_error("%s: tensor 'token_embd.weight' has %" PRId64 " rows (n_vocab)",
                           L->family, te->ne[1]);
        return VT_ERR_FORMAT;
    }
    m->d.n_vocab = te->ne[1]; /* a padded vocabulary counts its padding rows */
    /* token_embd is read by get_rows; it is also the LM head (mat_mul) only
     * when output.weight is absent (tied embeddings) */
    const int tied = vt_mc_find(L, "output.weight") == NULL;
    const int64_t E = m->d.n_embd, V = m->d.n_vocab;
    vt_status st = vt_mc_weight(L, "token_embd.weight", "[embedding_length, n_vocab]", E, V,
                                VT_MC_USE_GET_ROWS | (tied ? VT_MC_USE_MAT_MUL : 0),
                                &m->token_embd, NULL);
    if (st != VT_OK) return st;
    if (tied) {
        m->output = m->token_embd;
    } else {
        st = vt_mc_weight(L, "output.weight", "[embedding_length, n_vocab (token_embd rows)]", E,
                          V, VT_MC_USE_MAT_MUL, &m->output, NULL);
        if (st != VT_OK) return st;
    }
    return vt_mc_f32(L, "output_norm.weight", "[embedding_length]", 1, &E, &m->output_norm, NULL);
}

static size_t mc_max(size_t a, size_t b) { return a > b ? a : b; }

vt_status vt_mc_alloc_scratch(vt_mc_model *m, const vt_mc_scratch_spec *sp, size_t *bytes_only)
{
    const vt_mc_dims *d = &m->d;
    const size_t T = m->n_batch, E = d->n_embd, X = d->n_expert;
    const size_t k = d->n_expert ? d->n_expert_used : 1;
    /* FFN rows: T tokens for a dense or shared FFN, and one expert group's
     * (token, expert) pairs, at most T x top-k, for the routed experts */
    const size_t TF = d->n_expert ? T * k : T;
    m->head_rows = m->n_batch < MC_HEAD_ROWS ? m->n_batch : MC_HEAD_ROWS;
    float *moe_extra = NULL, *r_ids_f = NULL, *d_pos_f = NULL;
    const vt_mc_scratch_part head[] = {{&m->x, T, E}, {&m->h, T, E}, {&m->a, T, E}};
    /* f_x .. moe_extra, contiguous, are also moe_ffn's scratch (fused path):
     * TF x (2 n_embd + 2 n_ff) floats and room for its int32 arrays */
    const vt_mc_scratch_part tail[] = {
        {&m->f_x, TF, E}, {&m->f_g, TF, sp->n_ff}, {&m->f_u, TF, sp->n_ff}, {&m->f_y, TF, E},
        {&moe_extra, TF * 4 + (X + 1) * 2 + 1024, 1},
        {&m->r_logits, T, X + 1},
        /* r_ids: + top-k for the next layer's predicted ids (prefetch) */
        {&r_ids_f, TF + k, 1}, {&m->r_w, TF, 1}, {&d_pos_f, mc_max(T, 2), 1},
        {&m->ah_h, 1, E}, {&m->ah_logits, 1, X + 1}, {&m->ah_w, 1, k},
        {&m->s_k, T, mc_max(sp->max_kv, 1)}, {&m->s_v, T, mc_max(sp->max_kv, 1)},
        {&m->logits_buf, (size_t)m->head_rows, (size_t)d->n_vocab},
    };
    const size_t nh = sizeof head / sizeof head[0], nt = sizeof tail / sizeof tail[0];
    if (sp->n_parts > VT_MC_MAX_SCRATCH_PARTS) {
        m->host->set_error("%s: %zu scratch parts of its own, at most %d", m->family, sp->n_parts,
                           VT_MC_MAX_SCRATCH_PARTS);
        return VT_ERR_INVALID_ARG;
    }
    vt_mc_scratch_part parts[sizeof head / sizeof head[0] + VT_MC_MAX_SCRATCH_PARTS +
                             sizeof tail / sizeof tail[0]];
    size_t np = 0;
    for (size_t i = 0; i < nh; i++) parts[np++] = head[i];
    for (size_t i = 0; i < sp->n_parts; i++) parts[np++] = sp->parts[i];
    for (size_t i = 0; i < nt; i++) parts[np++] = tail[i];
    vt_status st = vt_mc_carve_scratch(m, parts, np, bytes_only, &m->scratch);
    if (st != VT_OK || bytes_only) return st;
    /* f_x .. moe_extra: moe_ffn's scratch (the part after moe_extra starts where it ends) */
    m->moe_scratch_bytes = (size_t)(m->r_logits - m->f_x) * sizeof(float);
    m->r_ids = (int32_t *)(void *)r_ids_f; /* int32 in a part of as many floats */
    m->d_pos = (int32_t *)(void *)d_pos_f;

    if (!(m->pos = mc_calloc(m, T, sizeof *m->pos, "the host scratch: positions")) ||
        !(m->topk_ids = mc_calloc(m, (T + 1) * k, sizeof *m->topk_ids, /* + a prediction */
                                  "the host scratch: top-k expert ids")) ||
        !(m->topk_w = mc_calloc(m, T * k, sizeof *m->topk_w,
                                "the host scratch: top-k expert weights")) ||
        !(m->exp_count = mc_calloc(m, X + 2, sizeof *m->exp_count,
                                   "the host scratch: per-expert counts")) ||
        !(m->exp_tok = mc_calloc(m, T * k, sizeof *m->exp_tok, "the host scratch: routed tokens")) ||
        !(m->exp_w = mc_calloc(m, T * k, sizeof *m->exp_w, "the host scratch: routed weights")) ||
        !(m->grp_down = mc_calloc(m, k, sizeof *m->grp_down,
                                  "the host scratch: an expert group's down matrices")) ||
        !(m->grp_row0 = mc_calloc(m, k, sizeof *m->grp_row0,
                                  "the host scratch: an expert group's rows")) ||
        !(m->grp_rows = mc_calloc(m, k, sizeof *m->grp_rows,
                                  "the host scratch: an expert group's row counts")))
        return VT_ERR_OUT_OF_MEMORY;
    return VT_OK;
}

/* The fused-experts path (op.moe_route + op.moe_ffn PRESENT, VT_MOE_FFN not
 * "0"): one device table of expert pointers per MoE layer, written now for
 * resident stacks and per acquired group when streamed. */
static vt_status mc_setup_fused(const vt_mc_family *F, vt_model *fm)
{
    vt_mc_model *m = mc_of(fm);
    const vt_mc_dims *d = &m->d;
    if (!d->n_expert || vt_util_env_off(m->host, "VT_MOE_FFN") ||
        !vt_util_moe_fused_available(m->api))
        return VT_OK;
    /* the shapes every backend's moe_ffn takes (vt/backend.h): gate and up
     * of one type, rows of a multiple of 32 */
    if (d->n_embd % 32 || d->n_ff_exp % 32) return VT_OK;
    for (uint32_t il = 0; il < d->n_layer; il++) {
        const vt_mc_experts *x = F->layer_experts(fm, il);
        if (x && !x->fused_gate_up && x->gate_exps.type != x->up_exps.type) return VT_OK;
    }
    const size_t per = 3 * (size_t)d->n_expert, L = d->n_layer;
    m->exp_tab = mc_calloc(m, L, sizeof *m->exp_tab, "the expert tables");
    m->exp_tab_host = mc_calloc(m, per, sizeof *m->exp_tab_host, "an expert table");
    if (!m->exp_tab || !m->exp_tab_host) return VT_ERR_OUT_OF_MEMORY;
    char what[64];
    /* streamed through a device table: a page-locked image, so that a
     * one-token step's upload is queued */
    if (m->experts && !m->zero_copy) {
        snprintf(what, sizeof what, "%s expert table image", m->family);
        m->exp_tab_pinned = vt_util_exp_tab_pin(m->host, m->api, m->ctx, &m->exp_tab_host,
                                                per * sizeof(void *), what);
    }
    snprintf(what, sizeof what, "%s expert pointer tables", m->family);
    vt_status st = vt_mc_dev_alloc(m, per * L * sizeof(void *), what, &m->exp_tab_dev);
    if (st != VT_OK) return st;
    /* streamed: zeroed until a group is acquired (a NULL entry is never read) */
    if (m->experts) st = m->api->memset_zero(m->ctx, m->exp_tab_dev, per * L * sizeof(void *));
    for (uint32_t il = 0; il < L && st == VT_OK; il++) {
        const vt_mc_experts *x = F->layer_experts(fm, il);
        if (!x) continue;
        m->exp_tab[il] = (void **)m->exp_tab_dev + per * il;
        if (!m->experts) st = vt_mc_write_expert_table(m, il, x, d->n_expert, NULL, 0, NULL);
    }
    m->fused_moe = st == VT_OK;
    return st;
}

/* ---------------------------------------------------------------- */
/* load, free, required_caps, memory_needs                            */
/* ---------------------------------------------------------------- */

/* A zeroed model object of the family with the head's host and family set. */
static vt_model *mc_new(const vt_mc_family *F, const vt_host_api *host)
{
    vt_model *fm = vt_util_calloc_named(host, F->name, 1, F->model_size, "the model object");
    if (!fm) return NULL;
    mc_of(fm)->host = host;
    mc_of(fm)->family = F->name;
    return fm;
}

/* n_ctx of params (0: the trained context up to 4096, else 4096). */
static uint32_t mc_n_ctx(const vt_mc_model *m, const vt_model_params *params)
{
    uint32_t n_ctx = params ? params->n_ctx : 0;
    if (n_ctx == 0) n_ctx = m->d.n_ctx_train < 4096 ? m->d.n_ctx_train : 4096;
    return n_ctx ? n_ctx : 4096;
}

void vt_mc_free(const vt_mc_family *F, vt_model *fm)
{
    if (!fm) return;
    vt_mc_model *m = mc_of(fm);
    if (m->api) {
        if (m->exp_tab_dev) m->api->free(m->ctx, m->exp_tab_dev);
        vt_mc_free_weights(m);
        if (m->scratch) m->api->free(m->ctx, m->scratch);
    }
    F->free_own(fm);
    free(m->dev_allocs);
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
                               3 * (size_t)m->d.n_expert * sizeof(void *), m->exp_tab_pinned);
    free(fm);
}

vt_status vt_mc_load(const vt_mc_family *F, const vt_host_api *host, const vt_gguf *g,
                     const vt_backend *backend, const vt_model_params *params, vt_model **out)
{
    if (!host || !g || !backend || !backend->api || !out) {
        if (host) host->set_error("%s: load: NULL argument", F->name);
        return VT_ERR_INVALID_ARG;
    }
    *out = NULL;
    vt_model *fm = mc_new(F, host);
    if (!fm) return VT_ERR_OUT_OF_MEMORY;
    vt_mc_model *m = mc_of(fm);
    m->backend = backend;
    m->api = backend->api;
    m->ctx = backend->ctx;
    m->fam = F;
    vt_status st = F->read_hparams(host, g, fm);
    if (st != VT_OK) goto fail;
    const vt_mc_dims *d = &m->d;

    /* every op the forward pass calls must be there (the core checks the
     * declared capabilities first; this guards the function pointers) */
    {
        uint32_t ids[32];
        vt_mc_loader C = {host, g, m, fm, F->name, 1, ids, 0, 32};
        F->op_caps(fm, &C);
        for (uint32_t i = 0; i < C.n_caps && i < 32; i++) {
            const char *nm;
            if (!vt_mc_op_present(m->api, ids[i], &nm)) {
                host->set_error("%s: backend '%s' has no '%s' op, which this model needs", F->name,
                                backend->name ? backend->name : "?", nm);
                st = VT_ERR_CAPABILITY;
                goto fail;
            }
        }
    }
    m->zero_copy = vt_mc_host_addressable(m->api);
    if ((st = F->alloc_layers(fm)) != VT_OK) goto fail;

    /* the caller's sizes, checked before any weight is placed: positions are
     * int32 (rope, attention), routed (token, expert) pairs are counted in int32 */
    m->n_ctx = mc_n_ctx(m, params);
    m->n_batch = params && params->n_batch ? params->n_batch : 512;
    if (m->n_ctx > F->n_ctx_max ||
        (uint64_t)m->n_batch * (d->n_expert ? d->n_expert_used : 1) > (uint64_t)INT32_MAX) {
        host->set_error("%s: n_ctx = %u / n_batch = %u is too large (n_ctx must be <= %u and "
                        "n_batch x expert_used_count <= %d)", F->name, m->n_ctx, m->n_batch,
                        F->n_ctx_max, INT32_MAX);
        st = VT_ERR_RANGE;
        goto fail;
    }
    if (params && params->struct_size >= offsetof(vt_model_params, experts) + sizeof params->experts &&
        params->experts && d->n_expert)
        m->experts = params->experts;
    vt_mc_loader L = {host, g, m, fm, F->name, 0, NULL, 0, 0};
    if ((st = F->map_model(&L)) != VT_OK) goto fail;
    if (m->experts &&
        (st = vt_mc_register_experts(m, d->n_layer, d->n_expert_used, F->layer_experts, fm)) != VT_OK)
        goto fail;
    if ((st = F->scratch(fm, NULL)) != VT_OK) goto fail;
    if ((st = mc_setup_fused(F, fm)) != VT_OK) goto fail;
    vt_mc_setup_graph(m, d->n_expert != 0);
    m->fuse = vt_util_fusions_available(host, m->api);
    if (m->fuse && (st = F->merge_layers(fm)) != VT_OK) goto fail;
    const char *dump = F->dump_env ? getenv(F->dump_env) : NULL;
    m->dump_path = dump && *dump ? dump : NULL;
    if (F->finish && (st = F->finish(fm, params)) != VT_OK) goto fail;
    *out = fm;
    return VT_OK;
fail:
    vt_mc_free(F, fm);
    return st;
}

vt_status vt_mc_required_caps(const vt_mc_family *F, const vt_host_api *host, const vt_gguf *g,
                              uint32_t *ids, uint32_t cap, uint32_t *n)
{
    if (!host || !g || !n || (cap && !ids)) {
        if (host) host->set_error("%s: required_caps: NULL argument", F->name);
        return VT_ERR_INVALID_ARG;
    }
    *n = 0;
    vt_model *fm = mc_new(F, host);
    if (!fm) return VT_ERR_OUT_OF_MEMORY;
    vt_status st = F->read_hparams(host, g, fm);
    if (st == VT_OK) st = F->alloc_layers(fm);
    /* distinct ids number fewer than VT_CAP_ID_LIMIT (the fixed ids and two per
     * named type), so a table that size never overflows and the count is
     * exact whatever the caller's capacity */
    uint32_t all[VT_CAP_ID_LIMIT];
    vt_mc_loader L = {host, g, mc_of(fm), fm, F->name, 1, all, 0, VT_CAP_ID_LIMIT};
    if (st == VT_OK) {
        F->op_caps(fm, &L);
        st = F->map_model(&L);
    }
    F->free_own(fm);
    free(fm);
    if (st != VT_OK) return st;
    *n = L.n_caps;
    if (L.n_caps > cap) {
        host->set_error("%s: required_caps needs room for %u capability ids, got %u", F->name,
                        L.n_caps, cap);
        return VT_ERR_RANGE;
    }
    memcpy(ids, all, (size_t)L.n_caps * sizeof *ids);
    return VT_OK;
}

vt_status vt_mc_memory_needs(const vt_mc_family *F, const vt_host_api *host, const vt_gguf *g,
                             const vt_model_params *params, vt_model_memory *out)
{
    if (!host || !g || !params || !out) {
        if (host) host->set_error("%s: memory_needs: NULL argument", F->name);
        return VT_ERR_INVALID_ARG;
    }
    vt_model *fm = mc_new(F, host);
    if (!fm) return VT_ERR_OUT_OF_MEMORY;
    vt_mc_model *m = mc_of(fm);
    vt_status st = F->read_hparams(host, g, fm);
    uint64_t kv = 0, state = 0;
    size_t scratch = 0;
    if (st == VT_OK) {
        m->n_batch = params->n_batch ? params->n_batch : 512;
        F->cache_bytes(fm, mc_n_ctx(m, params), m->n_batch, &kv, &state);
        const vt_gguf_tensor *te = host->gguf_find_tensor(g, "token_embd.weight");
        m->d.n_vocab = te && te->n_dims >= 2 && te->ne[1] > 0 ? te->ne[1] : 0; /* logits scratch */
        st = F->scratch(fm, &scratch);
    }
    F->free_own(fm);
    free(fm);
    if (st != VT_OK) return st;
    out->kv_bytes_per_token = kv;
    out->state_bytes = state;
    out->scratch_bytes = scratch;
    return VT_OK;
}
