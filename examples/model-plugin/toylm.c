/*
 * toylm.c - an example third-party vt model plugin, built out of tree against
 * the installed SDK only (the headers vt/plugin.h, vt/model.h, vt/backend.h;
 * no vt library is linked: everything goes through the host and backend
 * tables).
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
#include <vt/plugin.h>
#include <vt/status.h>
#include <vt/types.h>

struct vt_model {
    const vt_host_api *host;
    const vt_backend_api *api;
    vt_backend_ctx *ctx;
    uint32_t n_embd, n_ctx, n_ctx_train, n_batch;
    int64_t n_vocab;
    float eps;
    vt_weight tok_embd, output; /* data: backend memory */
    float *norm;                /* [n_embd], backend memory */
    float *x, *y;               /* scratch: [n_batch][n_embd], [n_batch][n_vocab] */
};

struct vt_model_seq {
    int64_t pos;
};

static const char *const toylm_architectures[] = {"toylm", NULL};

/* The three tensors, shape-checked against each other; errors name the tensor. */
static vt_status toylm_tensors(const vt_host_api *host, const vt_gguf *g,
                               const vt_gguf_tensor **emb, const vt_gguf_tensor **norm,
                               const vt_gguf_tensor **out, uint32_t *n_embd)
{
    vt_status st = host->gguf_get_u32(g, "toylm.embedding_length", n_embd);
    if (st == VT_ERR_NOT_FOUND) {
        host->set_error("toylm: metadata key 'toylm.embedding_length' is missing");
        return VT_ERR_FORMAT;
    }
    if (st != VT_OK) return st;
    const char *names[3] = {"token_embd.weight", "output_norm.weight", "output.weight"};
    const vt_gguf_tensor *t[3];
    for (int i = 0; i < 3; i++)
        if (!(t[i] = host->gguf_find_tensor(g, names[i]))) {
            host->set_error("toylm: tensor '%s' is missing", names[i]);
            return VT_ERR_FORMAT;
        }
    if (t[0]->n_dims != 2 || t[0]->ne[0] != *n_embd || t[0]->ne[1] < 1) {
        host->set_error("toylm: token_embd.weight must be {%u, n_vocab}, is {%lld, %lld}", *n_embd,
                        (long long)t[0]->ne[0], (long long)t[0]->ne[1]);
        return VT_ERR_FORMAT;
    }
    if (t[1]->type != VT_TYPE_F32 || t[1]->ne[0] != *n_embd || t[1]->ne[1] != 1) {
        host->set_error("toylm: output_norm.weight must be F32 {%u}, is %s {%lld, %lld}", *n_embd,
                        vt_type_name(t[1]->type), (long long)t[1]->ne[0], (long long)t[1]->ne[1]);
        return VT_ERR_FORMAT;
    }
    if (t[2]->n_dims != 2 || t[2]->ne[0] != *n_embd || t[2]->ne[1] != t[0]->ne[1]) {
        host->set_error("toylm: output.weight must be {%u, %lld}, is {%lld, %lld}", *n_embd,
                        (long long)t[0]->ne[1], (long long)t[2]->ne[0], (long long)t[2]->ne[1]);
        return VT_ERR_FORMAT;
    }
    *emb = t[0];
    *norm = t[1];
    *out = t[2];
    return VT_OK;
}

static vt_status toylm_required_caps(const vt_host_api *host, const vt_gguf *g, uint32_t *ids,
                                     uint32_t cap, uint32_t *n)
{
    const vt_gguf_tensor *emb, *norm, *out;
    uint32_t n_embd;
    vt_status st = toylm_tensors(host, g, &emb, &norm, &out, &n_embd);
    if (st != VT_OK) return st;
    if (cap < 3) {
        host->set_error("toylm: room for %u capability ids, 3 needed", cap);
        return VT_ERR_RANGE;
    }
    ids[0] = VT_CAP_GET_ROWS(emb->type);
    ids[1] = VT_CAP_OP_RMS_NORM;
    ids[2] = VT_CAP_MAT_MUL(out->type);
    *n = 3;
    return VT_OK;
}

static vt_status toylm_memory_needs(const vt_host_api *host, const vt_gguf *g,
                                    const vt_model_params *params, vt_model_memory *out)
{
    const vt_gguf_tensor *emb, *norm, *o;
    uint32_t n_embd;
    vt_status st = toylm_tensors(host, g, &emb, &norm, &o, &n_embd);
    if (st != VT_OK) return st;
    uint64_t n_batch = params->n_batch ? params->n_batch : 1;
    out->kv_bytes_per_token = 0; /* a bigram model keeps no cache */
    out->state_bytes = 0;
    out->scratch_bytes = n_batch * ((uint64_t)n_embd + (uint64_t)emb->ne[1]) * sizeof(float);
    return VT_OK;
}

static void toylm_free(vt_model *m)
{
    if (!m) return;
    void *p[5] = {(void *)m->tok_embd.data, (void *)m->output.data, m->norm, m->x, m->y};
    for (int i = 0; i < 5; i++)
        if (p[i]) m->api->free(m->ctx, p[i]);
    free(m);
}

/* Copy a mapped tensor into backend memory. */
static vt_status toylm_upload(vt_model *m, const vt_gguf_tensor *t, void **out)
{
    if (!t->data) {
        m->host->set_error("toylm: tensor '%s' is not mapped", t->name);
        return VT_ERR_INVALID_ARG;
    }
    vt_status st = m->api->alloc(m->ctx, (size_t)t->nbytes, t->name, out);
    if (st != VT_OK) return st;
    return m->api->copy_h2d(m->ctx, *out, t->data, (size_t)t->nbytes);
}

static vt_status toylm_load(const vt_host_api *host, const vt_gguf *g, const vt_backend *backend,
                            const vt_model_params *params, vt_model **out)
{
    *out = NULL;
    const vt_gguf_tensor *emb, *norm, *o;
    uint32_t n_embd;
    vt_status st = toylm_tensors(host, g, &emb, &norm, &o, &n_embd);
    if (st != VT_OK) return st;
    vt_model *m = calloc(1, sizeof *m);
    if (!m) {
        host->set_error("toylm: out of memory (%zu bytes for the model)", sizeof *m);
        return VT_ERR_OUT_OF_MEMORY;
    }
    m->host = host;
    m->api = backend->api;
    m->ctx = backend->ctx;
    m->n_embd = n_embd;
    m->n_vocab = emb->ne[1];
    m->eps = 1e-6f;
    (void)host->gguf_get_f32(g, "toylm.attention.layer_norm_rms_epsilon", &m->eps);
    if (host->gguf_get_u32(g, "toylm.context_length", &m->n_ctx_train) != VT_OK) m->n_ctx_train = 0;
    m->n_ctx = params->n_ctx ? params->n_ctx : (m->n_ctx_train ? m->n_ctx_train : 4096);
    m->n_batch = params->n_batch ? params->n_batch : 1;

    void *p;
    if ((st = toylm_upload(m, emb, &p)) != VT_OK) goto fail;
    m->tok_embd = (vt_weight){.type = emb->type, .n_in = n_embd, .n_out = emb->ne[1],
                              .row_bytes = vt_type_row_bytes(emb->type, n_embd), .data = p,
                              .name = emb->name};
    if ((st = toylm_upload(m, o, &p)) != VT_OK) goto fail;
    m->output = (vt_weight){.type = o->type, .n_in = n_embd, .n_out = o->ne[1],
                            .row_bytes = vt_type_row_bytes(o->type, n_embd), .data = p,
                            .name = o->name};
    if ((st = toylm_upload(m, norm, &p)) != VT_OK) goto fail;
    m->norm = p;
    if ((st = m->api->alloc(m->ctx, (size_t)m->n_batch * n_embd * sizeof(float), "toylm scratch x",
                            &p)) != VT_OK)
        goto fail;
    m->x = p;
    if ((st = m->api->alloc(m->ctx, (size_t)m->n_batch * (size_t)m->n_vocab * sizeof(float),
                            "toylm scratch logits", &p)) != VT_OK)
        goto fail;
    m->y = p;
    *out = m;
    return VT_OK;
fail:
    toylm_free(m);
    return st;
}

static void toylm_info(const vt_model *m, vt_model_info *out)
{
    out->struct_size = sizeof *out;
    out->n_vocab = m->n_vocab;
    out->n_embd = m->n_embd;
    out->n_layer = 0;
    out->n_ctx = m->n_ctx;
    out->n_ctx_train = m->n_ctx_train;
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
    if (n_tokens < 1 || n_tokens > m->n_batch) {
        m->host->set_error("toylm: forward of %lld tokens (1..n_batch = %u)", (long long)n_tokens,
                           m->n_batch);
        return VT_ERR_INVALID_ARG;
    }
    if (s->pos + n_tokens > m->n_ctx) {
        m->host->set_error("toylm: %lld tokens at position %lld exceed n_ctx = %u",
                           (long long)n_tokens, (long long)s->pos, m->n_ctx);
        return VT_ERR_RANGE;
    }
    for (int64_t i = 0; i < n_tokens; i++)
        if (tokens[i] < 0 || tokens[i] >= m->n_vocab) {
            m->host->set_error("toylm: token %d at index %lld is outside the vocabulary (%lld)",
                               tokens[i], (long long)i, (long long)m->n_vocab);
            return VT_ERR_INVALID_ARG;
        }
    const vt_backend_api *b = m->api;
    const int64_t E = m->n_embd, V = m->n_vocab;
    /* any type id, those past the per-type tables (ABI 1.9) too */
    vt_get_rows_fn get_rows = vt_backend_get_rows_fn(b, m->tok_embd.type);
    vt_mat_mul_fn mat_mul = vt_backend_mat_mul_fn(b, m->output.type);
    if (!get_rows || !mat_mul) {
        m->host->set_error("toylm: the backend has no %s for type %s",
                           !get_rows ? "get_rows" : "mat_mul",
                           vt_type_name(!get_rows ? m->tok_embd.type : m->output.type));
        return VT_ERR_CAPABILITY;
    }
    vt_status st;
    if ((st = get_rows(m->ctx, &m->tok_embd, tokens, n_tokens, m->x)) != VT_OK ||
        (st = b->rms_norm(m->ctx, m->x, E, m->norm, m->x, E, n_tokens, E, m->eps)) != VT_OK ||
        (st = mat_mul(m->ctx, &m->output, m->x, E, m->y, V, n_tokens)) != VT_OK)
        return st;
    if (logits) {
        const float *src = all_logits ? m->y : m->y + (n_tokens - 1) * V;
        size_t rows = all_logits ? (size_t)n_tokens : 1;
        if ((st = b->copy_d2h(m->ctx, logits, src, rows * (size_t)V * sizeof(float))) != VT_OK)
            return st;
    }
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
