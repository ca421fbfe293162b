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

static void g4_seq_free(vt_model *m, vt_model_seq *s)
{
    if (s) vt_mc_seq_free(m ? &m->mc : NULL, &s->sq);
}

static vt_status g4_seq_reset(vt_model *m, vt_model_seq *s)
{
    if (!m || !s) return VT_ERR_INVALID_ARG;
    s->pos = 0;
    s->swa_base = 0;
    return VT_OK;
}


/* K and V cache bytes of a layer that owns K/V: n_ctx rows, or swa_cap for
 * an S layer; none for a shared-KV layer. */
static vt_status g4_kv_bytes(const vt_model *m, uint32_t il, size_t *bytes)
{
    const gemma4_layer *ly = &m->layers[il];
    *bytes = 0;
    if (!ly->has_kv) return VT_OK;
    size_t rows = ly->swa ? m->swa_cap : m->n_ctx;
    if (__builtin_mul_overflow(rows, gemma4_kv_row_bytes(m, il), bytes)) {
        m->host->set_error("gemma4: the KV cache of blk.%u for %zu positions overflows the "
                           "address space", il, rows);
        return VT_ERR_RANGE;
    }
    return VT_OK;
}

static vt_status g4_seq_new(vt_model *m, vt_model_seq **out)
{
    if (!m || !out) return VT_ERR_INVALID_ARG;
    return vt_mc_seq_new(&m->mc, m, sizeof(vt_model_seq), g4_kv_bytes, (vt_mc_seq **)(void *)out);
}

VT_MC_PLUGIN(gemma4_family, "gemma4", "0.1.0",
             "Gemma 4 (gemma4): MoE and dense, sliding-window + full attention, per-layer "
             "embeddings",
             g4_seq_new, g4_seq_free, g4_seq_reset, gemma4_forward, gemma4_forward_multi,
             "gemma4")
