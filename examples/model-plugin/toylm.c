/*
 * toylm.c - an example third-party vt model plugin, built out of tree against
 * the installed SDK only: the headers vt/plugin.h, vt/model.h, vt/backend.h,
 * and the model layer vt's own families share (vt/model_common.h, the static
 * libvt-model-common.a linked into the plugin: its tensor loader checks the
 * shapes and the backend's ops and places the weights, and it writes the LM
 * head). Nothing of vt is linked at run time: everything goes through the
 * host and backend tables.
 *
 * Architecture `toylm` (general.architecture = "toylm"): a bigram language
 * model. For tokens t[0..T):
 *   x[i]      = token_embd[t[i]]                    get_rows   [T, n_embd]
 *   x[i]      = rms_norm(x[i]) * output_norm        rms_norm   [T, n_embd]
 *   logits[i] = output · x[i]                       mat_mul    [T, n_vocab]
 * so the logits of a position depend on its token only (no attention, no KV
 * cache); the sequence state is just its position.
 *
 * GGUF contents (toylm_mkgguf.c writes such a file):
 *   toylm.embedding_length (u32)   n_embd
 *   toylm.context_length (u32)     trained context (bounds n_ctx)
 *   toylm.attention.layer_norm_rms_epsilon (f32, optional, default 1e-6)
 *   token_embd.weight   ne = {n_embd, n_vocab}  any type the backend can get_rows
 *   output_norm.weight  ne = {n_embd}           F32
 *   output.weight       ne = {n_embd, n_vocab}  any type the backend can mat_mul
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <vt/backend.h>
#include <vt/model.h>
#include <vt/model_common.h>
#include <vt/plugin.h>
#include <vt/status.h>
#include <vt/types.h>

struct vt_model {
    VT_MC_MODEL_HEAD; /* host, api, ctx, n_ctx, n_batch, the weights' allocations, ... */
    uint32_t n_embd, n_ctx_train;
    int64_t n_vocab;
    float eps;
    /* of the head: token_embd, output (data: backend memory, or the mmap when
     * host-addressable), output_norm [n_embd], scratch, x [n_batch][n_embd] */
    float *y;                   /* [n_batch][n_vocab] */
};

struct vt_model_seq {
    int64_t pos; /* first, as vt/model_common.h asks */
};

static const char *const toylm_architectures[] = {"toylm", NULL};

/* The three tensors through the shared loader: shapes, types against the
 * backend's ops (dry: the capabilities they need), placement. */
static vt_status toylm_map(vt_mc_loader *L, vt_model *m)
{
    vt_status st = L->host->gguf_get_u32(L->g, "toylm.embedding_length", &m->n_embd);
    if (st == VT_ERR_NOT_FOUND) {
        L->host->set_error("toylm: metadata key 'toylm.embedding_length' is missing");
        return VT_ERR_FORMAT;
    }
    if (st != VT_OK) return st;
    const vt_gguf_tensor *emb = vt_mc_find(L, "token_embd.weight");
    if (!emb) return vt_mc_missing(L, "token_embd.weight", NULL);
    const int64_t E = m->n_embd;
    m->n_vocab = emb->ne[1];
    if ((st = vt_mc_weight(L, "token_embd.weight", "[toylm.embedding_length, n_vocab]", E,
                           m->n_vocab, VT_MC_USE_GET_ROWS, &m->token_embd, NULL)) != VT_OK ||
        (st = vt_mc_f32(L, "output_norm.weight", "[toylm.embedding_length]", 1, &E, &m->output_norm,
                        NULL)) != VT_OK ||
        (st = vt_mc_weight(L, "output.weight", "[toylm.embedding_length, n_vocab]", E, m->n_vocab,
                           VT_MC_USE_MAT_MUL, &m->output, NULL)) != VT_OK)
        return st;
    vt_mc_add_cap(L, VT_CAP_OP_RMS_NORM);
    return VT_OK;
}

static vt_status toylm_required_caps(const vt_host_api *host, const vt_gguf *g, uint32_t *ids,
                                     uint32_t cap, uint32_t *n)
{
    vt_model tmp;
    memset(&tmp, 0, sizeof tmp);
    vt_mc_loader L = {host, g, NULL, &tmp, "toylm", 1, ids, 0, cap};
    vt_status st = toylm_map(&L, &tmp);
    if (st != VT_OK) return st;
    *n = L.n_caps;
    if (L.n_caps > cap) {
        host->set_error("toylm: room for %u capability ids, %u needed", cap, L.n_caps);
        return VT_ERR_RANGE;
    }
    return VT_OK;
}

static vt_status toylm_memory_needs(const vt_host_api *host, const vt_gguf *g,
                                    const vt_model_params *params, vt_model_memory *out)
{
    vt_model tmp;
    memset(&tmp, 0, sizeof tmp);
    vt_mc_loader L = {host, g, NULL, &tmp, "toylm", 1, NULL, 0, 0};
    vt_status st = toylm_map(&L, &tmp);
    if (st != VT_OK) return st;
    uint64_t n_batch = params->n_batch ? params->n_batch : 1;
    out->kv_bytes_per_token = 0; /* a bigram model keeps no cache */
    out->state_bytes = 0;
    out->scratch_bytes = n_batch * ((uint64_t)tmp.n_embd + (uint64_t)tmp.n_vocab) * sizeof(float);
    return VT_OK;
}

static void toylm_free(vt_model *m)
{
    if (!m) return;
    vt_mc_free_weights(&m->mc);
    if (m->scratch) m->api->free(m->ctx, m->scratch);
    free(m);
}

static vt_status toylm_load(const vt_host_api *host, const vt_gguf *g, const vt_backend *backend,
                            const vt_model_params *params, vt_model **out)
{
    *out = NULL;
    vt_model *m = calloc(1, sizeof *m);
    if (!m) {
        host->set_error("toylm: out of memory (%zu bytes for the model)", sizeof *m);
        return VT_ERR_OUT_OF_MEMORY;
    }
    m->host = host;
    m->family = "toylm";
    m->backend = backend;
    m->api = backend->api;
    m->ctx = backend->ctx;
    m->zero_copy = vt_mc_host_addressable(m->api); /* weights read from the mmap itself */
    m->eps = 1e-6f;
    (void)host->gguf_get_f32(g, "toylm.attention.layer_norm_rms_epsilon", &m->eps);
    if (host->gguf_get_u32(g, "toylm.context_length", &m->n_ctx_train) != VT_OK) m->n_ctx_train = 0;
    m->n_ctx = params->n_ctx ? params->n_ctx : (m->n_ctx_train ? m->n_ctx_train : 4096);
    m->n_batch = params->n_batch ? params->n_batch : 1;
    vt_mc_loader L = {host, g, &m->mc, m, "toylm", 0, NULL, 0, 0};
    vt_status st = toylm_map(&L, m);
    if (st == VT_OK && !m->api->rms_norm) {
        host->set_error("toylm: the backend has no rms_norm op");
        st = VT_ERR_CAPABILITY;
    }
    const vt_mc_scratch_part parts[] = {{&m->x, m->n_batch, m->n_embd},
                                        {&m->y, m->n_batch, (size_t)m->n_vocab}};
    if (st == VT_OK) st = vt_mc_carve_scratch(&m->mc, parts, 2, NULL, &m->scratch);
    if (st != VT_OK) {
        toylm_free(m);
        return st;
    }
    *out = m;
    return VT_OK;
}

static void toylm_info(const vt_model *m, vt_model_info *out)
{
    vt_mc_info(&m->mc, m->n_vocab, m->n_embd, 0, m->n_ctx_train, NULL, NULL, out);
}

static vt_status toylm_seq_new(vt_model *m, vt_model_seq **out)
{
    if (!(*out = calloc(1, sizeof **out))) {
        m->host->set_error("toylm: out of memory (a sequence)");
        return VT_ERR_OUT_OF_MEMORY;
    }
    return VT_OK;
}

static void toylm_seq_free(vt_model *m, vt_model_seq *s)
{
    (void)m;
    free(s);
}

static vt_status toylm_seq_reset(vt_model *m, vt_model_seq *s)
{
    (void)m;
    s->pos = 0;
    return VT_OK;
}

static int64_t toylm_seq_pos(const vt_model *m, const vt_model_seq *s)
{
    (void)m;
    return s->pos;
}

static vt_status toylm_forward(vt_model *m, vt_model_seq *s, const int32_t *tokens, int64_t n_tokens,
                               float *logits, int all_logits)
{
    /* n_tokens within 1..n_batch and n_ctx, every id in the vocabulary (a
     * bigram model needs no positions) */
    vt_status st = vt_mc_forward_check(&m->mc, s, tokens, n_tokens, m->n_vocab, "toylm",
                                       m->n_ctx_train, NULL);
    if (st != VT_OK) return st;
    const vt_backend_api *b = m->api;
    const int64_t E = m->n_embd;
    /* any type id, those past the per-type tables (ABI 1.9) too */
    vt_get_rows_fn get_rows = vt_backend_get_rows_fn(b, m->token_embd.type);
    if ((st = get_rows(m->ctx, &m->token_embd, tokens, n_tokens, m->x)) != VT_OK ||
        (st = b->rms_norm(m->ctx, m->x, E, m->output_norm, m->x, E, n_tokens, E, m->eps)) != VT_OK)
        return st;
    /* the LM head of the rows whose logits are asked for (y holds n_batch rows) */
    const int64_t r0 = all_logits ? 0 : n_tokens - 1, rows = all_logits ? n_tokens : 1;
    if (logits && (st = vt_mc_lm_head(&m->mc, &m->output, m->x + r0 * E, E, m->n_vocab, rows,
                                      m->n_batch, m->y, 0, logits)) != VT_OK)
        return st;
    s->pos += n_tokens;
    return VT_OK;
}

static const vt_model_api toylm_api = {
    .struct_size = sizeof(vt_model_api),
    .architectures = toylm_architectures,
    .required_caps = toylm_required_caps,
    .load = toylm_load,
    .free = toylm_free,
    .info = toylm_info,
    .seq_new = toylm_seq_new,
    .seq_free = toylm_seq_free,
    .seq_reset = toylm_seq_reset,
    .seq_pos = toylm_seq_pos,
    .forward = toylm_forward,
    .memory_needs = toylm_memory_needs,
};

static const vt_plugin_desc toylm_desc = {
    .struct_size = sizeof(vt_plugin_desc),
    .abi_major = VT_ABI_MAJOR,
    .abi_minor = VT_ABI_MINOR,
    .kind = VT_PLUGIN_MODEL,
    .name = "toylm",
    .version = "1.0.0",
    .description = "toylm: an out-of-tree example model plugin (bigram LM: get_rows, rms_norm, mat_mul)",
    .table = &toylm_api,
};

VT_PLUGIN_EXPORT const vt_plugin_desc *vt_plugin_entry(void);

VT_PLUGIN_EXPORT const vt_plugin_desc *vt_plugin_entry(void)
{
    return &toylm_desc;
}
