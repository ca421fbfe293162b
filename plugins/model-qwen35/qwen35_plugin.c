/*
 * qwen35_plugin.c - the model-qwen35 plugin's descriptor and vt_model_api
 * table (vt/model.h): model info and per-sequence state.
 *
 * Per-sequence state (qwen35moe.md §6), all float32 in backend memory:
 *   full-attention layer: K and V caches [n_ctx][n_head_kv * head_dim]
 *     (post-RoPE K, raw V);
 *   Gated DeltaNet layer: conv state [d_conv - 1][conv_dim] (raw projections,
 *     oldest first) and recurrent state [n_v][d_k][d_v] (S[i][j], i = key dim).
 * A new or reset sequence has position 0 and zero conv/recurrent state; KV
 * cache rows beyond the position are never read.
 */
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>

#include "qwen35.h"
#include "vt/model_common.h"

static void q35_info(const vt_model *m, vt_model_info *out)
{
    if (!m || !out) return;
    vt_mc_info(&m->mc, m->hp.n_vocab, m->hp.n_embd, m->hp.n_layer, m->hp.n_ctx_train,
               qwen35_moe_path(m), qwen35_decode_path(m), out);
}

static void q35_seq_free(vt_model *m, vt_model_seq *s)
{
    if (!s) return;
    if (s->graph && m) m->api->graph_free(m->ctx, s->graph);
    qwen35_free_segments(m, s);
    for (uint32_t il = 0; m && il < m->hp.n_layer; il++) {
        if (s->k_cache && s->k_cache[il]) m->api->free(m->ctx, s->k_cache[il]);
        if (s->v_cache && s->v_cache[il]) m->api->free(m->ctx, s->v_cache[il]);
        if (s->conv_state && s->conv_state[il]) m->api->free(m->ctx, s->conv_state[il]);
        if (s->rec_state && s->rec_state[il]) m->api->free(m->ctx, s->rec_state[il]);
    }
    free(s->k_cache);
    free(s->v_cache);
    free(s->conv_state);
    free(s->rec_state);
    free(s);
}

static size_t q35_conv_bytes(const vt_model *m)
{
    return (size_t)(m->hp.d_conv - 1) * m->hp.conv_dim * sizeof(float);
}

static size_t q35_rec_bytes(const vt_model *m)
{
    return (size_t)m->hp.n_v * m->hp.d_k * m->hp.d_v * sizeof(float);
}

static vt_status q35_seq_reset(vt_model *m, vt_model_seq *s)
{
    if (!m || !s) return VT_ERR_INVALID_ARG;
    for (uint32_t il = 0; il < m->hp.n_layer; il++) {
        if (!m->layers[il].linear) continue;
        if (q35_conv_bytes(m)) {
            vt_status st = m->api->memset_zero(m->ctx, s->conv_state[il], q35_conv_bytes(m));
            if (st != VT_OK) return st;
        }
        vt_status st = m->api->memset_zero(m->ctx, s->rec_state[il], q35_rec_bytes(m));
        if (st != VT_OK) return st;
    }
    s->pos = 0;
    return VT_OK;
}


static vt_status q35_seq_new(vt_model *m, vt_model_seq **out)
{
    if (!m || !out) return VT_ERR_INVALID_ARG;
    *out = NULL;
    const uint32_t L = m->hp.n_layer;
    vt_model_seq *s = qwen35_calloc(m->host, 1, sizeof *s, "a sequence");
    if (!s) return VT_ERR_OUT_OF_MEMORY;
    if (!(s->k_cache = qwen35_calloc(m->host, L, sizeof(float *), "a sequence's K cache table")) ||
        !(s->v_cache = qwen35_calloc(m->host, L, sizeof(float *), "a sequence's V cache table")) ||
        !(s->conv_state = qwen35_calloc(m->host, L, sizeof(float *),
                                        "a sequence's conv state table")) ||
        !(s->rec_state = qwen35_calloc(m->host, L, sizeof(float *),
                                       "a sequence's recurrent state table"))) {
        q35_seq_free(m, s);
        return VT_ERR_OUT_OF_MEMORY;
    }
    vt_status st = VT_OK;
    for (uint32_t il = 0; il < L && st == VT_OK; il++) {
        const qwen35_layer *ly = &m->layers[il];
        if (ly->linear) {
            st = vt_mc_seq_alloc(&m->mc, q35_conv_bytes(m), "conv state", il, &s->conv_state[il]);
            if (st == VT_OK)
                st = vt_mc_seq_alloc(&m->mc, q35_rec_bytes(m), "recurrent state", il,
                                     &s->rec_state[il]);
        } else {
            /* n_ctx comes from the caller: the product is overflow-checked */
            size_t kv = 0;
            if (__builtin_mul_overflow((size_t)m->n_ctx, (size_t)ly->n_head_kv * m->hp.head_dim,
                                       &kv) ||
                __builtin_mul_overflow(kv, sizeof(float), &kv)) {
                m->host->set_error("qwen35: the KV cache of blk.%u for n_ctx = %u overflows the "
                                   "address space", il, m->n_ctx);
                st = VT_ERR_RANGE;
                break;
            }
            st = vt_mc_seq_alloc(&m->mc, kv, "KV cache K", il, &s->k_cache[il]);
            if (st == VT_OK) st = vt_mc_seq_alloc(&m->mc, kv, "KV cache V", il, &s->v_cache[il]);
        }
    }
    if (st != VT_OK) {
        q35_seq_free(m, s);
        return st;
    }
    *out = s;
    return VT_OK;
}

static int64_t q35_seq_pos(const vt_model *m, const vt_model_seq *s)
{
    (void)m;
    return s ? s->pos : 0;
}

static vt_status q35_forward_entry(vt_model *m, vt_model_seq *s, const int32_t *tokens,
                                   int64_t n_tokens, float *logits, int all_logits)
{
    if (!m) return VT_ERR_INVALID_ARG;
    return qwen35_forward(m, s, tokens, n_tokens, logits, all_logits);
}

static const char *const q35_architectures[] = {"qwen35moe", "qwen35", NULL};

static const vt_model_api q35_api = {
    .struct_size = sizeof(vt_model_api),
    .architectures = q35_architectures,
    .required_caps = qwen35_required_caps,
    .load = qwen35_load,
    .free = qwen35_free,
    .info = q35_info,
    .seq_new = q35_seq_new,
    .seq_free = q35_seq_free,
    .seq_reset = q35_seq_reset,
    .seq_pos = q35_seq_pos,
    .forward = q35_forward_entry,
    .memory_needs = qwen35_memory_needs,
    .forward_multi = qwen35_forward_multi,
};

static const vt_plugin_desc q35_desc = {
    .struct_size = sizeof(vt_plugin_desc),
    .abi_major = VT_ABI_MAJOR,
    .abi_minor = VT_ABI_MINOR,
    .kind = VT_PLUGIN_MODEL,
    .name = "qwen35",
    .version = "0.1.0",
    .description = "Qwen3.5 MoE (qwen35moe) and dense (qwen35): Gated DeltaNet + gated attention",
    .table = &q35_api,
};

VT_PLUGIN_EXPORT const vt_plugin_desc *vt_plugin_entry(void);

VT_PLUGIN_EXPORT const vt_plugin_desc *vt_plugin_entry(void)
{
    return &q35_desc;
}
