/*
 * gemma4_plugin.c - the model-gemma4 plugin's descriptor and vt_model_api
 * table (vt/model.h): model info and per-sequence state.
 *
 * Per-sequence state (gemma4.md §6), all float32 in backend memory, for each
 * layer that owns K/V (l < n_kv_layers):
 *   F layer: K and V caches [n_ctx][Hkv * d] (K after k-norm and RoPE, V
 *     after the weightless norm);
 *   S layer: the same rows, but only swa_cap = min(n_swa + n_batch, n_ctx) of
 *     them; row 0 holds position swa_base (gemma4_forward.c moves the window
 *     to the front when a step would run past the end).
 * Shared-KV layers own nothing. A new or reset sequence has position 0 and
 * swa_base 0; cache rows beyond the position are never read.
 */
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>

#include "gemma4.h"
#include "vt/model_common.h"

static void g4_info(const vt_model *m, vt_model_info *out)
{
    if (!m || !out) return;
    vt_mc_info(&m->mc, m->hp.n_vocab, m->hp.n_embd, m->hp.n_layer, m->hp.n_ctx_train,
               gemma4_moe_path(m), gemma4_decode_path(m), out);
}

static void g4_seq_free(vt_model *m, vt_model_seq *s)
{
    if (!s) return;
    if (s->graph && m) m->api->graph_free(m->ctx, s->graph);
    gemma4_free_segments(m, s);
    for (uint32_t il = 0; m && il < m->hp.n_layer; il++) {
        if (s->k_cache && s->k_cache[il]) m->api->free(m->ctx, s->k_cache[il]);
        if (s->v_cache && s->v_cache[il]) m->api->free(m->ctx, s->v_cache[il]);
    }
    free(s->k_cache);
    free(s->v_cache);
    free(s);
}

static vt_status g4_seq_reset(vt_model *m, vt_model_seq *s)
{
    if (!m || !s) return VT_ERR_INVALID_ARG;
    s->pos = 0;
    s->swa_base = 0;
    return VT_OK;
}


static vt_status g4_seq_new(vt_model *m, vt_model_seq **out)
{
    if (!m || !out) return VT_ERR_INVALID_ARG;
    *out = NULL;
    const uint32_t L = m->hp.n_layer;
    vt_model_seq *s = gemma4_calloc(m->host, 1, sizeof *s, "a sequence");
    if (!s) return VT_ERR_OUT_OF_MEMORY;
    if (!(s->k_cache = gemma4_calloc(m->host, L, sizeof(float *), "a sequence's K cache table")) ||
        !(s->v_cache = gemma4_calloc(m->host, L, sizeof(float *), "a sequence's V cache table"))) {
        g4_seq_free(m, s);
        return VT_ERR_OUT_OF_MEMORY;
    }
    vt_status st = VT_OK;
    for (uint32_t il = 0; il < L && st == VT_OK; il++) {
        const gemma4_layer *ly = &m->layers[il];
        if (!ly->has_kv) continue;
        size_t rows = ly->swa ? m->swa_cap : m->n_ctx, kv = 0;
        if (__builtin_mul_overflow(rows, gemma4_kv_row_bytes(m, il), &kv)) {
            m->host->set_error("gemma4: the KV cache of blk.%u for %zu positions overflows the "
                               "address space", il, rows);
            st = VT_ERR_RANGE;
            break;
        }
        st = vt_mc_seq_alloc(&m->mc, kv, "KV cache K", il, &s->k_cache[il]);
        if (st == VT_OK) st = vt_mc_seq_alloc(&m->mc, kv, "KV cache V", il, &s->v_cache[il]);
    }
    if (st != VT_OK) {
        g4_seq_free(m, s);
        return st;
    }
    *out = s;
    return VT_OK;
}

static int64_t g4_seq_pos(const vt_model *m, const vt_model_seq *s)
{
    (void)m;
    return s ? s->pos : 0;
}

static vt_status g4_forward_entry(vt_model *m, vt_model_seq *s, const int32_t *tokens,
                                  int64_t n_tokens, float *logits, int all_logits)
{
    if (!m) return VT_ERR_INVALID_ARG;
    return gemma4_forward(m, s, tokens, n_tokens, logits, all_logits);
}

static const char *const g4_architectures[] = {"gemma4", NULL};

static const vt_model_api g4_api = {
    .struct_size = sizeof(vt_model_api),
    .architectures = g4_architectures,
    .required_caps = gemma4_required_caps,
    .load = gemma4_load,
    .free = gemma4_free,
    .info = g4_info,
    .seq_new = g4_seq_new,
    .seq_free = g4_seq_free,
    .seq_reset = g4_seq_reset,
    .seq_pos = g4_seq_pos,
    .forward = g4_forward_entry,
    .memory_needs = gemma4_memory_needs,
    .forward_multi = gemma4_forward_multi,
};

static const vt_plugin_desc g4_desc = {
    .struct_size = sizeof(vt_plugin_desc),
    .abi_major = VT_ABI_MAJOR,
    .abi_minor = VT_ABI_MINOR,
    .kind = VT_PLUGIN_MODEL,
    .name = "gemma4",
    .version = "0.1.0",
    .description = "Gemma 4 (gemma4): MoE and dense, sliding-window + full attention, per-layer "
                   "embeddings",
    .table = &g4_api,
};

VT_PLUGIN_EXPORT const vt_plugin_desc *vt_plugin_entry(void);

VT_PLUGIN_EXPORT const vt_plugin_desc *vt_plugin_entry(void)
{
    return &g4_desc;
}
