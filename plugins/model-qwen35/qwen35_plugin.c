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

static void q35_seq_free(vt_model *m, vt_model_seq *s)
{
    if (!s) return;
    for (uint32_t il = 0; m && il < m->hp.n_layer; il++) {
        if (s->conv_state && s->conv_state[il]) m->api->free(m->ctx, s->conv_state[il]);
        if (s->rec_state && s->rec_state[il]) m->api->free(m->ctx, s->rec_state[il]);
    }
    free(s->conv_state);
    free(s->rec_state);
    vt_mc_seq_free(m ? &m->mc : NULL, &s->sq);
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


/* K and V cache bytes of a full-attention layer (n_ctx comes from the
 * caller: the product is overflow-checked); none for a linear layer. */
static vt_status q35_kv_bytes(const vt_model *m, uint32_t il, size_t *bytes)
{
    const qwen35_layer *ly = &m->layers[il];
    *bytes = 0;
    if (ly->linear) return VT_OK;
    if (__builtin_mul_overflow((size_t)m->n_ctx, (size_t)ly->n_head_kv * m->hp.head_dim, bytes) ||
        __builtin_mul_overflow(*bytes, sizeof(float), bytes)) {
        m->host->set_error("qwen35: the KV cache of blk.%u for n_ctx = %u overflows the address "
                           "space", il, m->n_ctx);
        return VT_ERR_RANGE;
    }
    return VT_OK;
}

static vt_status q35_seq_new(vt_model *m, vt_model_seq **out)
{
    if (!m || !out) return VT_ERR_INVALID_ARG;
    *out = NULL;
    vt_mc_seq *sq = NULL;
    vt_status st = vt_mc_seq_new(&m->mc, m, sizeof(vt_model_seq), q35_kv_bytes, &sq);
    if (st != VT_OK) return st;
    vt_model_seq *s = (vt_model_seq *)(void *)sq;
    const uint32_t L = m->hp.n_layer;
    if (!(s->conv_state = qwen35_calloc(m->host, L, sizeof(float *),
                                        "a sequence's conv state table")) ||
        !(s->rec_state = qwen35_calloc(m->host, L, sizeof(float *),
                                       "a sequence's recurrent state table")))
        st = VT_ERR_OUT_OF_MEMORY;
    for (uint32_t il = 0; il < L && st == VT_OK; il++) {
        if (!m->layers[il].linear) continue;
        st = vt_mc_seq_alloc(&m->mc, q35_conv_bytes(m), "conv state", il, &s->conv_state[il]);
        if (st == VT_OK)
            st = vt_mc_seq_alloc(&m->mc, q35_rec_bytes(m), "recurrent state", il, &s->rec_state[il]);
    }
    if (st != VT_OK) {
        q35_seq_free(m, s);
        return st;
    }
    *out = s;
    return VT_OK;
}

VT_MC_PLUGIN(qwen35_family, "qwen35", "0.1.0",
             "Qwen3.5 MoE (qwen35moe) and dense (qwen35): Gated DeltaNet + gated attention",
             q35_seq_new, q35_seq_free, q35_seq_reset, qwen35_forward,
             qwen35_forward_multi, "qwen35moe", "qwen35")
