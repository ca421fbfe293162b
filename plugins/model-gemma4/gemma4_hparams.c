/*
 * gemma4_hparams.c - the Gemma 4 hyperparameters (gemma4.<key> metadata):
 * read, range-checked and validated, each error naming the key
 * (gemma4_read_hparams, gemma4.h). Tensor mapping: gemma4_load.c.
 */
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemma4.h"

void *gemma4_calloc(const vt_host_api *host, size_t n, size_t size, const char *what)
{
    return vt_util_calloc_named(host, "gemma4", n, size, what);
}

#define G4_MAX_DIM (1u << 20)
#define G4_MAX_ROW ((uint64_t)INT32_MAX)
#define G4_MAX_EXPERT (1u << 16)

/* ================================================================ */
/* hyperparameters (spec §2)                                          */
/* ================================================================ */

typedef struct g4_keys {
    const vt_host_api *host;
    const vt_gguf *g;
} g4_keys;

#define G4_KEY(buf, suffix) snprintf(buf, sizeof buf, "gemma4.%s", suffix)

/* A u32 (f32) key: required (the error names the key) or defaulted. */
static vt_status g4_u32(const g4_keys *k, const char *suffix, int required, uint32_t dflt,
                        uint32_t *out)
{
    return vt_mc_key_u32(k->host, k->g, "gemma4", "gemma4", suffix, required, dflt, out);
}

static vt_status g4_f32(const g4_keys *k, const char *suffix, int required, float dflt, float *out)
{
    return vt_mc_key_f32(k->host, k->g, "gemma4", "gemma4", suffix, required, dflt, out);
}

/* A key that is a scalar (broadcast to every layer) or an array with one
 * entry per block (bool or integer elements). out has n entries. dflt NULL
 * and absent: VT_ERR_NOT_FOUND with the message set when required, else
 * filled with dflt_scalar. */
static vt_status g4_per_layer(const g4_keys *k, const char *suffix, int required,
                              const uint32_t *dflt, uint32_t n, uint32_t *out)
{
    char key[128];
    G4_KEY(key, suffix);
    vt_gguf_type et;
    uint64_t count;
    const void *data;
    vt_status st = k->host->gguf_get_arr(k->g, key, &et, &count, &data);
    if (st == VT_OK) {
        if (count != n || !data) {
            k->host->set_error("gemma4: metadata key '%s' has %" PRIu64 " entries; expected one "
                               "per block (block_count = %u)", key, count, n);
            return VT_ERR_FORMAT;
        }
        if (et == VT_GGUF_BOOL) {
            for (uint32_t i = 0; i < n; i++) out[i] = ((const uint8_t *)data)[i] != 0;
            return VT_OK;
        }
        for (uint32_t i = 0; i < n; i++) {
            int64_t x;
            st = k->host->gguf_get_arr_i64(k->g, key, i, &x);
            if (st != VT_OK) return st;
            if (x < 0 || x > (int64_t)UINT32_MAX) {
                k->host->set_error("gemma4: metadata key '%s'[%u] = %" PRId64 " is out of range",
                                   key, i, x);
                return VT_ERR_FORMAT;
            }
            out[i] = (uint32_t)x;
        }
        return VT_OK;
    }
    uint32_t v;
    st = k->host->gguf_get_u32(k->g, key, &v);
    if (st == VT_OK) {
        for (uint32_t i = 0; i < n; i++) out[i] = v;
        return VT_OK;
    }
    if (st == VT_ERR_NOT_FOUND) {
        if (required || !dflt) {
            k->host->set_error("gemma4: required metadata key '%s' is missing", key);
            return VT_ERR_NOT_FOUND;
        }
        for (uint32_t i = 0; i < n; i++) out[i] = dflt[i];
        return VT_OK;
    }
    k->host->set_error("gemma4: metadata key '%s' is neither an integer nor an array of one "
                       "integer or bool per block", key);
    return VT_ERR_FORMAT;
}

static vt_status g4_range(const char *suffix, const vt_host_api *host, uint64_t v, uint64_t lo,
                          uint64_t hi)
{
    if (v >= lo && v <= hi) return VT_OK;
    host->set_error("gemma4: metadata key 'gemma4.%s' = %" PRIu64 " is out of range: must be in "
                    "%" PRIu64 "..%" PRIu64, suffix, v, lo, hi);
    return VT_ERR_FORMAT;
}

static vt_status g4_positive(const char *suffix, const vt_host_api *host, float v)
{
    if (v > 0.0f && isfinite(v)) return VT_OK;
    host->set_error("gemma4: metadata key 'gemma4.%s' = %g is invalid: must be finite and > 0",
                    suffix, (double)v);
    return VT_ERR_FORMAT;
}

void gemma4_hparams_free(gemma4_hparams *hp)
{
    free(hp->is_swa);
    free(hp->n_head);
    free(hp->n_head_kv);
    free(hp->n_ff);
    free(hp->kv_src);
    hp->is_swa = NULL;
    hp->n_head = hp->n_head_kv = hp->n_ff = NULL;
    hp->kv_src = NULL;
}

vt_status gemma4_read_hparams(const vt_host_api *host, const vt_gguf *g, gemma4_hparams *hp)
{
    memset(hp, 0, sizeof *hp);
    vt_gguf_str arch;
    vt_status st = vt_mc_key_arch(host, g, "gemma4", &arch);
    if (st != VT_OK) return st;
    if (strcmp(arch.ptr, "gemma4")) {
        host->set_error("gemma4: architecture '%s' is not served by this plugin (gemma4)%s",
                        arch.ptr, !strcmp(arch.ptr, "gemma4-assistant")
                                      ? ": the MTP draft head needs its target model"
                                      : "");
        return VT_ERR_UNSUPPORTED;
    }
    g4_keys k = {host, g};
#define G4_TRY(x) do { vt_status s_ = (x); if (s_ != VT_OK) return s_; } while (0)
    G4_TRY(g4_u32(&k, "context_length", 1, 0, &hp->n_ctx_train));
    G4_TRY(g4_u32(&k, "embedding_length", 1, 0, &hp->n_embd));
    G4_TRY(g4_u32(&k, "block_count", 1, 0, &hp->n_layer));
    G4_TRY(g4_range("embedding_length", host, hp->n_embd, 1, G4_MAX_DIM));
    {
        int64_t n_tensors = host->gguf_n_tensors(g);
        if (hp->n_layer == 0 || (int64_t)hp->n_layer > n_tensors) {
            host->set_error("gemma4: metadata key 'gemma4.block_count' = %u is out of range: must "
                            "be in 1..%" PRId64 " (the file has %" PRId64 " tensors)",
                            hp->n_layer, n_tensors, n_tensors);
            return VT_ERR_FORMAT;
        }
    }
    const uint32_t L = hp->n_layer;
    if (!(hp->is_swa = gemma4_calloc(host, L, 1, "the layer kinds")) ||
        !(hp->n_head = gemma4_calloc(host, L, sizeof(uint32_t), "the per-layer head counts")) ||
        !(hp->n_head_kv = gemma4_calloc(host, L, sizeof(uint32_t), "the per-layer KV heads")) ||
        !(hp->n_ff = gemma4_calloc(host, L, sizeof(uint32_t), "the per-layer FFN widths")) ||
        !(hp->kv_src = gemma4_calloc(host, L, sizeof(int32_t), "the KV source layers")))
        return VT_ERR_OUT_OF_MEMORY;

    G4_TRY(g4_per_layer(&k, "attention.head_count", 1, NULL, L, hp->n_head));
    G4_TRY(g4_per_layer(&k, "attention.head_count_kv", 0, hp->n_head, L, hp->n_head_kv));
    {
        uint32_t *zeros = gemma4_calloc(host, L, sizeof(uint32_t), "defaults");
        if (!zeros) return VT_ERR_OUT_OF_MEMORY;
        st = g4_per_layer(&k, "feed_forward_length", 0, zeros, L, hp->n_ff);
        free(zeros);
        if (st != VT_OK) return st;
    }
    {
        uint32_t *pat = gemma4_calloc(host, L, sizeof(uint32_t), "the sliding-window pattern");
        if (!pat) return VT_ERR_OUT_OF_MEMORY;
        st = g4_per_layer(&k, "attention.sliding_window_pattern", 1, NULL, L, pat);
        for (uint32_t i = 0; st == VT_OK && i < L; i++) hp->is_swa[i] = pat[i] != 0;
        free(pat);
        if (st != VT_OK) return st;
    }
    uint32_t hd_default = hp->n_head[0] ? hp->n_embd / hp->n_head[0] : 0;
    uint32_t vlen, vlen_swa;
    G4_TRY(g4_u32(&k, "attention.key_length", 0, hd_default, &hp->head_dim_full));
    G4_TRY(g4_u32(&k, "attention.value_length", 0, hp->head_dim_full, &vlen));
    G4_TRY(g4_u32(&k, "attention.key_length_swa", 1, 0, &hp->head_dim_swa));
    G4_TRY(g4_u32(&k, "attention.value_length_swa", 0, hp->head_dim_swa, &vlen_swa));
    G4_TRY(g4_u32(&k, "rope.dimension_count", 0, hp->head_dim_full, &hp->n_rot_full));
    G4_TRY(g4_u32(&k, "rope.dimension_count_swa", 0, hp->n_rot_full, &hp->n_rot_swa));
    G4_TRY(g4_f32(&k, "rope.freq_base", 0, 10000.0f, &hp->rope_base_full));
    G4_TRY(g4_f32(&k, "rope.freq_base_swa", 0, 10000.0f, &hp->rope_base_swa));
    G4_TRY(g4_u32(&k, "attention.sliding_window", 1, 0, &hp->n_swa));
    G4_TRY(g4_u32(&k, "attention.shared_kv_layers", 0, 0, &hp->n_shared_kv));
    G4_TRY(g4_f32(&k, "attention.layer_norm_rms_epsilon", 1, 0.0f, &hp->eps));
    G4_TRY(g4_u32(&k, "embedding_length_per_layer_input", 1, 0, &hp->n_per_layer));
    G4_TRY(g4_u32(&k, "expert_count", 0, 0, &hp->n_expert));
    G4_TRY(g4_u32(&k, "expert_used_count", 0, 0, &hp->n_expert_used));
    G4_TRY(g4_u32(&k, "expert_feed_forward_length", 0, 0, &hp->n_ff_exp));
    G4_TRY(g4_f32(&k, "final_logit_softcapping", 0, 30.0f, &hp->softcap));
    {
        char key[128];
        vt_gguf_str sc;
        G4_KEY(key, "rope.scaling.type");
        if (host->gguf_get_str(g, key, &sc) == VT_OK && strcmp(sc.ptr, "none")) {
            host->set_error("gemma4: metadata key '%s' = '%s': RoPE scaling is not supported "
                            "(Gemma 4 has none, spec §2)", key, sc.ptr);
            return VT_ERR_UNSUPPORTED;
        }
    }

    /* validation */
    G4_TRY(g4_range("attention.key_length", host, hp->head_dim_full, 1, G4_MAX_DIM));
    G4_TRY(g4_range("attention.key_length_swa", host, hp->head_dim_swa, 1, G4_MAX_DIM));
    if (vlen != hp->head_dim_full || vlen_swa != hp->head_dim_swa) {
        host->set_error("gemma4: metadata keys 'gemma4.attention.value_length' (%u) / "
                        "'value_length_swa' (%u) must equal key_length (%u) / key_length_swa (%u)",
                        vlen, vlen_swa, hp->head_dim_full, hp->head_dim_swa);
        return VT_ERR_FORMAT;
    }
    if (hp->n_rot_full == 0 || hp->n_rot_full % 2 || hp->n_rot_full > hp->head_dim_full) {
        host->set_error("gemma4: metadata key 'gemma4.rope.dimension_count' = %u must be even and "
                        "in 2..key_length (%u)", hp->n_rot_full, hp->head_dim_full);
        return VT_ERR_FORMAT;
    }
    if (hp->n_rot_swa == 0 || hp->n_rot_swa % 2 || hp->n_rot_swa > hp->head_dim_swa) {
        host->set_error("gemma4: metadata key 'gemma4.rope.dimension_count_swa' = %u must be even "
                        "and in 2..key_length_swa (%u)", hp->n_rot_swa, hp->head_dim_swa);
        return VT_ERR_FORMAT;
    }
    G4_TRY(g4_positive("rope.freq_base", host, hp->rope_base_full));
    G4_TRY(g4_positive("rope.freq_base_swa", host, hp->rope_base_swa));
    G4_TRY(g4_positive("attention.layer_norm_rms_epsilon", host, hp->eps));
    G4_TRY(g4_positive("final_logit_softcapping", host, hp->softcap));
    G4_TRY(g4_range("attention.sliding_window", host, hp->n_swa, 1, INT32_MAX / 2));
    G4_TRY(g4_range("attention.shared_kv_layers", host, hp->n_shared_kv, 0, L - 1));
    G4_TRY(g4_range("embedding_length_per_layer_input", host, hp->n_per_layer, 0, G4_MAX_DIM));
    if ((uint64_t)hp->n_per_layer * L > G4_MAX_ROW) {
        host->set_error("gemma4: embedding_length_per_layer_input (%u) x block_count (%u) exceeds "
                        "%" PRIu64, hp->n_per_layer, L, (uint64_t)G4_MAX_ROW);
        return VT_ERR_FORMAT;
    }
    if (hp->n_expert) {
        G4_TRY(g4_range("expert_count", host, hp->n_expert, 1, G4_MAX_EXPERT));
        G4_TRY(g4_range("expert_used_count", host, hp->n_expert_used, 1, hp->n_expert));
        G4_TRY(g4_range("expert_feed_forward_length", host, hp->n_ff_exp, 1, G4_MAX_DIM));
    }
    hp->n_kv_layers = L - hp->n_shared_kv;
    for (uint32_t il = 0; il < L; il++) {
        uint32_t nh = hp->n_head[il], nkv = hp->n_head_kv[il];
        uint32_t d = hp->is_swa[il] ? hp->head_dim_swa : hp->head_dim_full;
        if (nh == 0 || nh > G4_MAX_DIM || nkv == 0 || nh % nkv) {
            host->set_error("gemma4: layer %u: 'gemma4.attention.head_count' (%u) must be in 1..%u "
                            "and a multiple of 'gemma4.attention.head_count_kv' (%u)",
                            il, nh, (unsigned)G4_MAX_DIM, nkv);
            return VT_ERR_FORMAT;
        }
        if ((uint64_t)nh * d > G4_MAX_ROW) {
            host->set_error("gemma4: layer %u: head_count (%u) x head dim (%u) exceeds %" PRIu64,
                            il, nh, d, (uint64_t)G4_MAX_ROW);
            return VT_ERR_FORMAT;
        }
        if (hp->n_ff[il] > G4_MAX_DIM) {
            host->set_error("gemma4: metadata key 'gemma4.feed_forward_length'[%u] = %u exceeds %u",
                            il, hp->n_ff[il], (unsigned)G4_MAX_DIM);
            return VT_ERR_FORMAT;
        }
        /* §5.6 shared-KV source: HF rule (the last layer < n_kv_layers of the
         * same type), checked against llama.cpp's (n_kv - 2 for S, n_kv - 1 for F) */
        if (il < hp->n_kv_layers) {
            hp->kv_src[il] = (int32_t)il;
            continue;
        }
        int32_t src = -1;
        for (int32_t j = (int32_t)hp->n_kv_layers - 1; j >= 0; j--)
            if (hp->is_swa[j] == hp->is_swa[il]) {
                src = j;
                break;
            }
        if (src < 0) {
            host->set_error("gemma4: layer %u is a shared-KV %s layer (shared_kv_layers = %u), but "
                            "no layer below %u of that type owns a KV cache", il,
                            hp->is_swa[il] ? "sliding" : "full", hp->n_shared_kv, hp->n_kv_layers);
            return VT_ERR_FORMAT;
        }
        int64_t lcpp = (int64_t)hp->n_kv_layers - (hp->is_swa[il] ? 2 : 1);
        if (lcpp != src)
            host->log(VT_LOG_WARN, "gemma4: layer %u reads layer %d's KV cache (HF rule); "
                      "llama.cpp would read layer %" PRId64, il, src, lcpp);
        hp->kv_src[il] = src;
        if (hp->n_head_kv[src] != nkv) {
            host->set_error("gemma4: layer %u shares layer %d's KV cache but head_count_kv "
                            "differs (%u vs %u)", il, src, nkv, hp->n_head_kv[src]);
            return VT_ERR_FORMAT;
        }
    }
#undef G4_TRY
    return VT_OK;
}
