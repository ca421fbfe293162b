/*
 * engine.c - opens a model for generation: the GGUF's header and tensor
 * table; the residency resolved (residency.h: plugins, every declared
 * requirement, the fit check against the device total probed once), all
 * before any weight is mapped or read; then the tokenizer, load, one
 * sequence. Prefill is cut into n_batch-token chunks.
 */
#include "engine.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "capabilities.h"
#include "config.h"
#include "error.h"
#include "registry.h"
#include "residency.h"

struct vt_engine {
    vt_gguf *gguf;
    vt_registry *reg;
    vt_tokenizer *tok;
    const vt_model_api *mapi;
    const vt_plugin_entry *mplug, *bplug;
    vt_backend backend;
    vt_model *model;
    vt_model_seq *seq;
    vt_model_info info;
    uint32_t n_batch;
    char arch[64];
    double load_seconds;
    vt_config cfg;
    vt_residency res;
};

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

vt_status vt_engine_open(const vt_engine_params *p, vt_engine **out)
{
    double t0 = now_seconds();
    vt_status st;
    vt_engine *e = calloc(1, sizeof *e);
    if (!e) {
        vt_set_error("out of memory creating the engine (%zu bytes)", sizeof *e);
        return VT_ERR_OUT_OF_MEMORY;
    }
    e->n_batch = p->n_batch ? p->n_batch : 512;

    /* the header and tensor table only: no weight is mapped or read until the
     * configuration is resolved and the fit check passed */
    if ((st = vt_gguf_open(p->model_path, VT_GGUF_NO_MMAP, &e->gguf)) != VT_OK) goto fail;
    vt_gguf_str arch;
    if ((st = vt_gguf_get_str(e->gguf, "general.architecture", &arch)) != VT_OK) {
        if (st == VT_ERR_NOT_FOUND) {
            vt_set_error("%s: metadata key 'general.architecture' is missing", p->model_path);
            st = VT_ERR_FORMAT;
        }
        goto fail;
    }
    snprintf(e->arch, sizeof e->arch, "%s", arch.ptr);

    if (p->config) {
        e->cfg = *p->config;
    } else if ((st = vt_config_load(p->config_path, &e->cfg)) != VT_OK) {
        goto fail;
    }
    const char *dirs[2] = {p->plugin_dir, NULL};
    if ((st = vt_registry_open(p->plugin_dir ? dirs : NULL, &e->reg)) != VT_OK) goto fail;
    if ((st = vt_residency_select(&e->cfg, e->reg, e->gguf, p->device, &e->res)) != VT_OK) goto fail;
    e->mplug = e->res.model;
    e->bplug = e->res.backend;
    e->mapi = e->mplug->desc->table;
    const vt_backend_api *bapi = e->bplug->desc->table;
    const char *device = e->res.platform;

    /* the tokenizer first: a refusal there must not wait for the weights */
    if ((st = vt_tokenizer_load(e->gguf, &e->tok)) != VT_OK) {
        vt_error_prefix("%s", p->model_path);
        goto fail;
    }
    /* kernels NULL: the backend reads VT_KERNELS itself */
    vt_backend_params bp = {.struct_size = sizeof bp, .device = 0, .n_threads = p->n_threads,
                            .kernels = p->kernels, .host = vt_host_table()};
    e->backend.api = bapi;
    e->backend.name = e->bplug->desc->name;
    if ((st = bapi->init(&bp, &e->backend.ctx)) != VT_OK) {
        vt_error_prefix("backend '%s' init", device);
        goto fail;
    }
    /* the device total, probed once here ("at registration") for the fit check */
    uint64_t mem_free = 0, mem_total = 0;
    const char *reason;
    int probe_ok = 0;
    if (vt_caps_state(e->bplug->desc, VT_CAP_MEMORY_PROBE, &reason) == VT_CAP_PRESENT) {
        if ((st = bapi->memory_probe(e->backend.ctx, &mem_free, &mem_total)) != VT_OK) {
            vt_error_prefix("backend '%s' memory_probe", e->bplug->desc->name);
            goto fail;
        }
        probe_ok = 1;
    }
    /* default KV length: the platform's, capped by the trained context */
    uint32_t n_ctx = p->n_ctx;
    if (!n_ctx) n_ctx = vt_engine_default_ctx(&e->cfg, e->res.plat, e->gguf);
    if ((st = vt_residency_fit(&e->res, e->gguf, probe_ok, mem_free, mem_total, n_ctx,
                               e->n_batch)) != VT_OK) {
        vt_error_prefix("%s on --device %s", p->model_path, device);
        goto fail;
    }
    if (e->res.fit.experts == VT_EXPERTS_STREAMED) {
        vt_set_error("%s on --device %s: the resolved residency streams the routed experts "
                     "(%s), but this vt has no expert streamer yet; set %s.experts=resident",
                     p->model_path, device, e->res.fit.verdict, device);
        st = VT_ERR_UNSUPPORTED;
        goto fail;
    }
    if ((st = vt_gguf_map(e->gguf)) != VT_OK) goto fail;
    vt_model_params mp = {.struct_size = sizeof mp, .n_ctx = n_ctx, .n_batch = e->n_batch};
    if ((st = e->mapi->load(vt_host_table(), e->gguf, &e->backend, &mp, &e->model)) != VT_OK) {
        vt_error_prefix("%s", p->model_path);
        goto fail;
    }
    e->info.struct_size = sizeof e->info;
    e->mapi->info(e->model, &e->info);
    if (e->info.n_ctx_train && e->info.n_ctx > e->info.n_ctx_train)
        vt_log(VT_LOG_WARN, "context of %u tokens exceeds the %u the model was trained with; "
               "quality past %u tokens is not expected", e->info.n_ctx, e->info.n_ctx_train,
               e->info.n_ctx_train);
    if (vt_tokenizer_n_vocab(e->tok) > e->info.n_vocab) {
        vt_set_error("%s: the tokenizer has %lld tokens but the model's vocabulary (token_embd) "
                     "has %lld rows", p->model_path, (long long)vt_tokenizer_n_vocab(e->tok),
                     (long long)e->info.n_vocab);
        st = VT_ERR_FORMAT;
        goto fail;
    }
    if ((st = e->mapi->seq_new(e->model, &e->seq)) != VT_OK) goto fail;
    e->load_seconds = now_seconds() - t0;
    *out = e;
    return VT_OK;
fail:
    vt_engine_close(e);
    return st;
}

uint32_t vt_engine_default_ctx(const vt_config *cfg, const vt_config_platform *plat,
                               const vt_gguf *g)
{
    (void)cfg;
    uint32_t n_ctx = plat && plat->kv_cache_tokens ? plat->kv_cache_tokens : 4096;
    vt_gguf_str arch;
    if (vt_gguf_get_str(g, "general.architecture", &arch) == VT_OK) {
        char key[128];
        uint32_t trained = 0;
        snprintf(key, sizeof key, "%s.context_length", arch.ptr);
        if (vt_gguf_get_u32(g, key, &trained) == VT_OK && trained > 0 && trained < n_ctx)
            n_ctx = trained;
    }
    return n_ctx;
}

void vt_engine_close(vt_engine *e)
{
    if (!e) return;
    if (e->seq) e->mapi->seq_free(e->model, e->seq);
    if (e->model) e->mapi->free(e->model);
    if (e->backend.ctx) e->backend.api->shutdown(e->backend.ctx);
    vt_tokenizer_free(e->tok);
    vt_registry_close(e->reg);
    vt_gguf_close(e->gguf);
    free(e);
}

const vt_gguf *vt_engine_gguf(const vt_engine *e) { return e->gguf; }
const vt_tokenizer *vt_engine_tokenizer(const vt_engine *e) { return e->tok; }
const char *vt_engine_arch(const vt_engine *e) { return e->arch; }
void vt_engine_model_info(const vt_engine *e, vt_model_info *out) { *out = e->info; }
double vt_engine_load_seconds(const vt_engine *e) { return e->load_seconds; }

vt_status vt_engine_reset(vt_engine *e) { return e->mapi->seq_reset(e->model, e->seq); }

int64_t vt_engine_pos(const vt_engine *e) { return e->mapi->seq_pos(e->model, e->seq); }

vt_status vt_engine_eval(vt_engine *e, const int32_t *tokens, int64_t n, float *logits,
                         int all_logits)
{
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= e->info.n_vocab) {
            vt_set_error("token id %d at index %lld is outside the vocabulary [0, %lld)",
                         tokens[i], (long long)i, (long long)e->info.n_vocab);
            return VT_ERR_RANGE;
        }
    if (e->info.n_ctx && vt_engine_pos(e) + n > (int64_t)e->info.n_ctx) {
        if (vt_engine_pos(e) == 0)
            vt_set_error("the prompt has %lld tokens but the context holds %u (raise --ctx)",
                         (long long)n, e->info.n_ctx);
        else
            vt_set_error("%lld more tokens after %lld do not fit the context of %u tokens (raise --ctx)",
                         (long long)n, (long long)vt_engine_pos(e), e->info.n_ctx);
        return VT_ERR_RANGE;
    }
    for (int64_t off = 0; off < n; off += e->n_batch) {
        int64_t m = n - off < e->n_batch ? n - off : e->n_batch;
        int last = off + m == n;
        float *out = NULL;
        if (logits && all_logits) out = logits + off * e->info.n_vocab;
        else if (logits && last) out = logits;
        vt_status st = e->mapi->forward(e->model, e->seq, tokens + off, m, out, all_logits);
        if (st != VT_OK) return st;
    }
    return VT_OK;
}
