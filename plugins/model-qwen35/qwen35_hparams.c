/*
 * qwen35_hparams.c - the hyperparameters of a Qwen3.5 GGUF (qwen35moe /
 * qwen35): every metadata key read, range-checked and validated before the
 * loader sizes anything from it (declared in qwen35.h).
 *
 * Keys: as llama.cpp's src/llama-arch.cpp names them and src/llama-model.cpp
 * reads them for qwen35moe / qwen35 (defaults included).
 * A refusal names the key and its value; tests/test_qwen35_hostile.c drives
 * every key through the engine.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qwen35.h"

void *qwen35_calloc(const vt_host_api *host, size_t n, size_t size, const char *what)
{
    return vt_util_calloc_named(host, "qwen35", n, size, what);
}

/* ================================================================ */
/* hyperparameters (spec §3)                                          */
/* ================================================================ */

typedef struct q35_keys {
    const vt_host_api *host;
    const vt_gguf *g;
    const char *arch;
} q35_keys;

static const char *q35_key(const q35_keys *k, const char *suffix, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s.%s", k->arch, suffix);
    return buf;
}

/* A u32 (f32) key: required (the error names the key) or defaulted. */
static vt_status q35_u32(const q35_keys *k, const char *suffix, int required, uint32_t dflt,
                         uint32_t *out)
{
    return vt_mc_key_u32(k->host, k->g, "qwen35", k->arch, suffix, required, dflt, out);
}

static vt_status q35_f32(const q35_keys *k, const char *suffix, int required, float dflt,
                         float *out)
{
    return vt_mc_key_f32(k->host, k->g, "qwen35", k->arch, suffix, required, dflt, out);
}

/* A u32 that is either a scalar or an array with one entry per block
 * (attention.head_count[_kv], §3). out has n entries. */
static vt_status q35_u32_per_layer(const q35_keys *k, const char *suffix, int required,
                                   const uint32_t *dflt, uint32_t n, uint32_t *out)
{
    char key[128];
    q35_key(k, suffix, key, sizeof key);
    uint32_t v;
    vt_status st = k->host->gguf_get_u32(k->g, key, &v);
    if (st == VT_OK) {
        for (uint32_t i = 0; i < n; i++) out[i] = v;
        return VT_OK;
    }
    if (st == VT_ERR_NOT_FOUND) {
        if (required) {
            k->host->set_error("qwen35: required metadata key '%s' is missing", key);
            return VT_ERR_NOT_FOUND;
        }
        for (uint32_t i = 0; i < n; i++) out[i] = dflt[i];
        return VT_OK;
    }
    /* not a scalar: try an array */
    vt_gguf_type et;
    uint64_t count;
    const void *data;
    if (k->host->gguf_get_arr(k->g, key, &et, &count, &data) != VT_OK) {
        k->host->set_error("qwen35: metadata key '%s' is neither a u32 nor an integer array", key);
        return VT_ERR_FORMAT;
    }
    if (count != n) {
        k->host->set_error("qwen35: metadata key '%s' has %" PRIu64 " entries; expected one per "
                           "block (block_count = %u)", key, count, n);
        return VT_ERR_FORMAT;
    }
    for (uint32_t i = 0; i < n; i++) {
        int64_t x;
        st = k->host->gguf_get_arr_i64(k->g, key, i, &x);
        if (st != VT_OK) return st;
        if (x < 0 || x > (int64_t)UINT32_MAX) {
            k->host->set_error("qwen35: metadata key '%s'[%u] = %" PRId64 " is out of range", key,
                               i, x);
            return VT_ERR_RANGE;
        }
        out[i] = (uint32_t)x;
    }
    return VT_OK;
}

/* attention.recurrent_layers: optional per-block flag array (bool/i32/u32;
 * non-zero = linear layer). Returns VT_ERR_NOT_FOUND when absent. */
static vt_status q35_recurrent_layers(const q35_keys *k, uint32_t n_all, uint32_t n_layer,
                                      uint8_t *is_linear)
{
    char key[128];
    q35_key(k, "attention.recurrent_layers", key, sizeof key);
    vt_gguf_type et;
    uint64_t count;
    const void *data;
    vt_status st = k->host->gguf_get_arr(k->g, key, &et, &count, &data);
    if (st != VT_OK) return st;
    if (count != n_all || !data) {
        k->host->set_error("qwen35: metadata key '%s' has %" PRIu64
                           " entries; expected block_count = %u numeric entries",
                           key, count, n_all);
        return VT_ERR_FORMAT;
    }
    size_t esz;
    switch (et) {
    case VT_GGUF_BOOL: case VT_GGUF_UINT8: case VT_GGUF_INT8: esz = 1; break;
    case VT_GGUF_UINT16: case VT_GGUF_INT16: esz = 2; break;
    case VT_GGUF_UINT32: case VT_GGUF_INT32: esz = 4; break;
    case VT_GGUF_UINT64: case VT_GGUF_INT64: esz = 8; break;
    default:
        k->host->set_error("qwen35: metadata key '%s' has element type %d; expected bool or integer",
                           key, (int)et);
        return VT_ERR_FORMAT;
    }
    const uint8_t *p = data;
    for (uint32_t i = 0; i < n_layer; i++) {
        int nz = 0;
        for (size_t b = 0; b < esz; b++) nz |= p[i * esz + b] != 0;
        is_linear[i] = (uint8_t)nz;
    }
    return VT_OK;
}

static vt_status q35_invalid(const vt_host_api *host, const char *what)
{
    host->set_error("qwen35: invalid hyperparameters: %s", what);
    return VT_ERR_FORMAT;
}

/* Bounds on hyperparameters, far above any released Qwen3.5 (largest: n_embd
 * 4096, head_dim 256, 512 experts, conv kernel 4, recurrent state 2^20
 * floats per layer) and low enough that no size computed from them can
 * overflow: one dimension or count, one row (elements of one activation row
 * or projection output), one per-layer state (elements), experts, conv
 * kernel width. */
#define Q35_MAX_DIM (1u << 20)
#define Q35_MAX_ROW ((uint64_t)INT32_MAX)
#define Q35_MAX_STATE ((uint64_t)1 << 28)
#define Q35_MAX_EXPERT (1u << 16)
#define Q35_MAX_CONV 1024u

/* key (arch-prefixed suffix) must be in lo..hi; note (may be NULL) says why hi. */
static vt_status q35_range(const q35_keys *k, const char *suffix, uint64_t v, uint64_t lo,
                           uint64_t hi, const char *note)
{
    if (v >= lo && v <= hi) return VT_OK;
    char key[128];
    q35_key(k, suffix, key, sizeof key);
    k->host->set_error("qwen35: metadata key '%s' = %" PRIu64 " is out of range: must be in "
                       "%" PRIu64 "..%" PRIu64 "%s%s%s", key, v, lo, hi, note ? " (" : "",
                       note ? note : "", note ? ")" : "");
    return VT_ERR_FORMAT;
}

/* A float key that must be finite and > 0 (not NaN, not inf). */
static vt_status q35_positive(const q35_keys *k, const char *suffix, float v)
{
    if (v > 0.0f && isfinite(v)) return VT_OK;
    char key[128];
    q35_key(k, suffix, key, sizeof key);
    k->host->set_error("qwen35: metadata key '%s' = %g is invalid: must be finite and > 0", key,
                       (double)v);
    return VT_ERR_FORMAT;
}

void qwen35_hparams_free(qwen35_hparams *hp)
{
    free(hp->is_linear);
    free(hp->n_head);
    free(hp->n_head_kv);
    hp->is_linear = NULL;
    hp->n_head = hp->n_head_kv = NULL;
}

/* Read and validate every hyperparameter (§3, "Validation at load"). */
vt_status qwen35_read_hparams(const vt_host_api *host, const vt_gguf *g, qwen35_hparams *hp)
{
    memset(hp, 0, sizeof *hp);
    vt_gguf_str arch;
    vt_status st = vt_mc_key_arch(host, g, "qwen35", &arch);
    if (st != VT_OK) return st;
    if (!strcmp(arch.ptr, "qwen3next")) {
        host->set_error("qwen35: architecture 'qwen3next' (Qwen3-Next: fused ssm_in/ssm_ba, grouped "
                        "V-head order) is not compatible with the qwen35 plugin");
        return VT_ERR_UNSUPPORTED;
    }
    if (strcmp(arch.ptr, "qwen35moe") && strcmp(arch.ptr, "qwen35")) {
        host->set_error("qwen35: architecture '%s' is not served by this plugin (qwen35moe, qwen35)",
                        arch.ptr);
        return VT_ERR_UNSUPPORTED;
    }
    snprintf(hp->arch, sizeof hp->arch, "%s", arch.ptr);
    hp->is_moe = !strcmp(arch.ptr, "qwen35moe");
    q35_keys k = {host, g, hp->arch};

#define Q35_TRY(x) do { vt_status s_ = (x); if (s_ != VT_OK) return s_; } while (0)
    Q35_TRY(q35_u32(&k, "context_length", 1, 0, &hp->n_ctx_train));
    Q35_TRY(q35_u32(&k, "embedding_length", 1, 0, &hp->n_embd));
    Q35_TRY(q35_u32(&k, "block_count", 1, 0, &hp->n_layer_all));
    Q35_TRY(q35_u32(&k, "nextn_predict_layers", 0, 0, &hp->n_nextn));
    uint32_t key_length, value_length;
    Q35_TRY(q35_u32(&k, "attention.key_length", 1, 0, &key_length));
    Q35_TRY(q35_u32(&k, "attention.value_length", 1, 0, &value_length));
    Q35_TRY(q35_f32(&k, "attention.layer_norm_rms_epsilon", 1, 0.0f, &hp->eps));
    Q35_TRY(q35_u32(&k, "rope.dimension_count", 1, 0, &hp->n_rot));
    Q35_TRY(q35_f32(&k, "rope.freq_base", 0, 10000.0f, &hp->rope_base));
    Q35_TRY(q35_u32(&k, "full_attention_interval", 0, 4, &hp->interval));
    Q35_TRY(q35_u32(&k, "ssm.conv_kernel", 1, 0, &hp->d_conv));
    Q35_TRY(q35_u32(&k, "ssm.state_size", 1, 0, &hp->d_k));
    Q35_TRY(q35_u32(&k, "ssm.group_count", 1, 0, &hp->n_k));
    Q35_TRY(q35_u32(&k, "ssm.time_step_rank", 1, 0, &hp->n_v));
    Q35_TRY(q35_u32(&k, "ssm.inner_size", 1, 0, &hp->value_dim));
    if (hp->is_moe) {
        Q35_TRY(q35_u32(&k, "expert_count", 1, 0, &hp->n_expert));
        Q35_TRY(q35_u32(&k, "expert_used_count", 1, 0, &hp->n_expert_used));
        Q35_TRY(q35_u32(&k, "expert_feed_forward_length", 1, 0, &hp->n_ff_exp));
        Q35_TRY(q35_u32(&k, "expert_shared_feed_forward_length", 1, 0, &hp->n_ff_shexp));
    } else {
        Q35_TRY(q35_u32(&k, "feed_forward_length", 1, 0, &hp->n_ff));
    }

    /* rope.dimension_sections: required (llama.cpp refuses without); its value
     * does not matter for text positions (§5.5). */
    {
        char key[128];
        vt_gguf_type et;
        uint64_t count;
        const void *data;
        q35_key(&k, "rope.dimension_sections", key, sizeof key);
        st = host->gguf_get_arr(g, key, &et, &count, &data);
        if (st == VT_ERR_NOT_FOUND) {
            host->set_error("qwen35: required metadata key '%s' is missing", key);
            return st;
        }
        if (st != VT_OK) return st;
    }
    /* RoPE scaling is not implemented (§5.5): refuse rather than ignore it. */
    {
        char key[128];
        vt_gguf_str sc;
        q35_key(&k, "rope.scaling.type", key, sizeof key);
        st = host->gguf_get_str(g, key, &sc);
        if (st == VT_OK && strcmp(sc.ptr, "none")) {
            host->set_error("qwen35: metadata key '%s' = '%s': RoPE scaling is not supported", key,
                            sc.ptr);
            return VT_ERR_UNSUPPORTED;
        }
    }

    /* validation (§3 "Validation at load"), and bounds against hostile files:
     * every dimension is range-checked before any product is formed, and each
     * product that sizes a row, a tensor or a per-sequence state is formed in
     * uint64 with an overflow check and capped (Q35_MAX_*). So nothing below
     * (or in the tensor mapping, the scratch and the sequence state) can
     * overflow, and no per-layer array is sized from an unchecked count. */
    char why[320];
    Q35_TRY(q35_range(&k, "embedding_length", hp->n_embd, 1, Q35_MAX_DIM, NULL));
    /* block_count: every block has several tensors, so a file cannot hold
     * more blocks than tensors; this bounds the per-layer arrays by the size
     * of the file's tensor table before they are allocated. */
    {
        int64_t n_tensors = host->gguf_n_tensors(g);
        snprintf(why, sizeof why, "the file has %" PRId64 " tensors", n_tensors);
        Q35_TRY(q35_range(&k, "block_count", hp->n_layer_all, 1,
                          n_tensors > 0 ? (uint64_t)n_tensors : 0, why));
    }
    if (hp->n_nextn >= hp->n_layer_all) {
        snprintf(why, sizeof why, "nextn_predict_layers (%u) must be < block_count (%u)",
                 hp->n_nextn, hp->n_layer_all);
        return q35_invalid(host, why);
    }
    hp->n_layer = hp->n_layer_all - hp->n_nextn;
    /* the last main block must be in the file (a file without blk.0 is an MTP
     * sidecar, refused by name when the tensors are mapped) */
    {
        char nm[64];
        snprintf(nm, sizeof nm, "blk.%u.attn_norm.weight", hp->n_layer - 1);
        if (host->gguf_find_tensor(g, "blk.0.attn_norm.weight") && !host->gguf_find_tensor(g, nm)) {
            char key[128];
            host->set_error("qwen35: metadata key '%s' = %u (with nextn_predict_layers = %u: %u "
                            "main blocks), but tensor '%s' is missing",
                            q35_key(&k, "block_count", key, sizeof key), hp->n_layer_all,
                            hp->n_nextn, hp->n_layer, nm);
            return VT_ERR_FORMAT;
        }
    }
    if (key_length == 0 || key_length != value_length) {
        snprintf(why, sizeof why,
                 "attention.key_length (%u) and attention.value_length (%u) must be equal and > 0",
                 key_length, value_length);
        return q35_invalid(host, why);
    }
    Q35_TRY(q35_range(&k, "attention.key_length", key_length, 1, Q35_MAX_DIM, NULL));
    hp->head_dim = key_length;
    if (hp->n_rot == 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2) {
        snprintf(why, sizeof why, "rope.dimension_count (%u) must be even and in 2..head_dim (%u)",
                 hp->n_rot, hp->head_dim);
        return q35_invalid(host, why);
    }
    Q35_TRY(q35_positive(&k, "attention.layer_norm_rms_epsilon", hp->eps));
    Q35_TRY(q35_positive(&k, "rope.freq_base", hp->rope_base));
    Q35_TRY(q35_range(&k, "ssm.conv_kernel", hp->d_conv, 1, Q35_MAX_CONV, NULL));
    Q35_TRY(q35_range(&k, "ssm.state_size", hp->d_k, 1, Q35_MAX_DIM, NULL));
    Q35_TRY(q35_range(&k, "ssm.group_count", hp->n_k, 1, Q35_MAX_DIM, NULL));
    Q35_TRY(q35_range(&k, "ssm.time_step_rank", hp->n_v, 1, Q35_MAX_DIM, NULL));
    Q35_TRY(q35_range(&k, "ssm.inner_size", hp->value_dim, 1, Q35_MAX_ROW, NULL));
    if (hp->n_v % hp->n_k) {
        snprintf(why, sizeof why,
                 "ssm.time_step_rank (n_v = %u) must be a multiple of ssm.group_count (n_k = %u)",
                 hp->n_v, hp->n_k);
        return q35_invalid(host, why);
    }
    if (hp->value_dim % hp->n_v || hp->value_dim / hp->n_v != hp->d_k) {
        snprintf(why, sizeof why,
                 "ssm.inner_size (%u) / ssm.time_step_rank (%u) must equal ssm.state_size (%u) (d_v == d_k)",
                 hp->value_dim, hp->n_v, hp->d_k);
        return q35_invalid(host, why);
    }
    hp->d_v = hp->value_dim / hp->n_v;
    {
        /* key_dim = n_k·d_k, conv_dim = 2·key_dim + value_dim (one row of the
         * fused projection), conv state + kernel d_conv·conv_dim, recurrent
         * state n_v·d_k·d_v per layer; factors are <= 2^31, so the products
         * of two are exact in uint64 and the checks below catch the rest */
        uint64_t key_dim = (uint64_t)hp->n_k * hp->d_k;
        uint64_t conv_dim = 2 * key_dim + hp->value_dim;
        uint64_t rec = 0, conv = 0;
        int ovf = __builtin_mul_overflow((uint64_t)hp->value_dim, (uint64_t)hp->d_k, &rec);
        ovf |= __builtin_mul_overflow(conv_dim, (uint64_t)hp->d_conv, &conv);
        if (key_dim > Q35_MAX_ROW || conv_dim > Q35_MAX_ROW || ovf || conv > Q35_MAX_STATE ||
            rec > Q35_MAX_STATE) {
            snprintf(why, sizeof why,
                     "ssm.group_count (%u) x ssm.state_size (%u), ssm.inner_size (%u) and "
                     "ssm.conv_kernel (%u) give key_dim %" PRIu64 ", conv_dim %" PRIu64
                     ", conv kernel %" PRIu64 " and recurrent state %" PRIu64
                     " elements per layer: limits are %" PRIu64 " per row and %" PRIu64
                     " per state", hp->n_k, hp->d_k, hp->value_dim, hp->d_conv, key_dim,
                     conv_dim, ovf ? UINT64_MAX : conv, ovf ? UINT64_MAX : rec,
                     (uint64_t)Q35_MAX_ROW, (uint64_t)Q35_MAX_STATE);
            return q35_invalid(host, why);
        }
        hp->key_dim = (uint32_t)key_dim;
        hp->conv_dim = (uint32_t)conv_dim;
    }
    if (hp->is_moe) {
        Q35_TRY(q35_range(&k, "expert_count", hp->n_expert, 1, Q35_MAX_EXPERT, NULL));
        if (hp->n_expert_used == 0 || hp->n_expert_used > hp->n_expert) {
            snprintf(why, sizeof why, "expert_used_count (%u) must be in 1..expert_count (%u)",
                     hp->n_expert_used, hp->n_expert);
            return q35_invalid(host, why);
        }
        Q35_TRY(q35_range(&k, "expert_feed_forward_length", hp->n_ff_exp, 1, Q35_MAX_DIM, NULL));
        Q35_TRY(q35_range(&k, "expert_shared_feed_forward_length", hp->n_ff_shexp, 1, Q35_MAX_DIM,
                          NULL));
    } else {
        Q35_TRY(q35_range(&k, "feed_forward_length", hp->n_ff, 1, Q35_MAX_DIM, NULL));
    }
    Q35_TRY(q35_range(&k, "full_attention_interval", hp->interval, 1, UINT32_MAX, NULL));

    /* per-layer facts (n_all <= number of tensors, checked above) */
    uint32_t n_all = hp->n_layer_all;
    if (!(hp->is_linear = qwen35_calloc(host, n_all, 1, "the layer kinds")) ||
        !(hp->n_head = qwen35_calloc(host, n_all, sizeof(uint32_t), "the per-layer head counts")) ||
        !(hp->n_head_kv = qwen35_calloc(host, n_all, sizeof(uint32_t),
                                        "the per-layer KV head counts")))
        return VT_ERR_OUT_OF_MEMORY;
    Q35_TRY(q35_u32_per_layer(&k, "attention.head_count", 1, NULL, n_all, hp->n_head));
    Q35_TRY(q35_u32_per_layer(&k, "attention.head_count_kv", 0, hp->n_head, n_all, hp->n_head_kv));
    st = q35_recurrent_layers(&k, n_all, hp->n_layer, hp->is_linear);
    hp->kinds_explicit = st == VT_OK;
    if (st == VT_ERR_NOT_FOUND) {
        /* pitfall 7: linear iff (il + 1) % interval != 0, il < n_layer */
        for (uint32_t il = 0; il < hp->n_layer; il++)
            hp->is_linear[il] = (il + 1) % hp->interval != 0;
    } else if (st != VT_OK) {
        return st;
    }
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        if (hp->is_linear[il]) continue;
        uint32_t nh = hp->n_head[il], nkv = hp->n_head_kv[il];
        char kh[128], kkv[128];
        q35_key(&k, "attention.head_count", kh, sizeof kh);
        q35_key(&k, "attention.head_count_kv", kkv, sizeof kkv);
        if (nh == 0 || nh > Q35_MAX_DIM || nkv == 0 || nh % nkv) {
            snprintf(why, sizeof why,
                     "layer %u: %s (%u) must be in 1..%u and a multiple of %s (%u)", il, kh, nh,
                     (unsigned)Q35_MAX_DIM, kkv, nkv);
            return q35_invalid(host, why);
        }
        /* rows of the query+gate projection: 2·n_head·head_dim (<= 2^41, exact) */
        uint64_t q_rows = 2 * (uint64_t)nh * hp->head_dim;
        if (q_rows > Q35_MAX_ROW) {
            snprintf(why, sizeof why,
                     "layer %u: 2 x %s (%u) x %s.attention.key_length (%u) = %" PRIu64
                     " exceeds %" PRIu64 " (one projection row)", il, kh, nh, hp->arch,
                     hp->head_dim, q_rows, (uint64_t)Q35_MAX_ROW);
            return q35_invalid(host, why);
        }
    }
#undef Q35_TRY
    return VT_OK;
}
