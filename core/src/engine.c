/*
 * engine.c - opens a model for generation: GGUF -> architecture -> model
 * plugin; device -> backend plugin; the model's capability needs checked
 * against the backend's declarations before any weight is read; then load,
 * one sequence, the tokenizer. Prefill is cut into n_batch-token chunks.
 */
#include "engine.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "capabilities.h"
#include "config.h"
#include "error.h"
#include "registry.h"

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
};

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Refuse by name when the model needs a capability the backend declares ABSENT. */
static vt_status check_required_caps(vt_engine *e)
{
    uint32_t ids[512], n = 0;
    vt_status st = e->mapi->required_caps(vt_host_table(), e->gguf, ids, 512, &n);
    if (st != VT_OK) {
        vt_error_prefix("model plugin '%s'", e->mplug->desc->name);
        return st;
    }
    for (uint32_t i = 0; i < n && i < 512; i++) {
        const char *reason;
        if (vt_caps_state(e->bplug->desc, ids[i], &reason) == VT_CAP_PRESENT) continue;
        char name[64];
        vt_set_error("model '%s' needs capability '%s', which backend '%s' declares ABSENT "
                     "(reason: %s)", e->mplug->desc->name, vt_cap_name(ids[i], name, sizeof name),
                     e->bplug->desc->name, reason);
        return VT_ERR_CAPABILITY;
    }
    return VT_OK;
}

vt_status vt_engine_open(const vt_engine_params *p, vt_engine **out)
{
    double t0 = now_seconds();
    vt_status st;
    vt_engine *e = calloc(1, sizeof *e);
    if (!e) {
        vt_set_error("out of memory creating the engine");
        return VT_ERR_OUT_OF_MEMORY;
    }
    e->n_batch = p->n_batch ? p->n_batch : 512;

    if ((st = vt_gguf_open(p->model_path, 0, &e->gguf)) != VT_OK) goto fail;
    vt_gguf_str arch;
    if ((st = vt_gguf_get_str(e->gguf, "general.architecture", &arch)) != VT_OK) {
        if (st == VT_ERR_NOT_FOUND) {
            vt_set_error("%s: metadata key 'general.architecture' is missing", p->model_path);
            st = VT_ERR_FORMAT;
        }
        goto fail;
    }
    snprintf(e->arch, sizeof e->arch, "%s", arch.ptr);

    vt_config cfg;
    if ((st = vt_config_load(p->config_path, &cfg)) != VT_OK) goto fail;
    const char *dirs[2] = {p->plugin_dir, NULL};
    if ((st = vt_registry_open(p->plugin_dir ? dirs : NULL, &e->reg)) != VT_OK) goto fail;
    const char *mname = vt_config_model_for_arch(&cfg, e->arch);
    if (mname) {
        e->mplug = vt_registry_find(e->reg, VT_PLUGIN_MODEL, mname);
        if (!e->mplug) {
            vt_set_error("config %s maps architecture '%s' to model plugin '%s', which was not "
                         "found (plugin directories: %s; %zu plugin file(s) refused, see 'vt plugins')",
                         cfg.path[0] ? cfg.path : "(built-in)", e->arch, mname,
                         vt_registry_dirs(e->reg), vt_registry_n_refused(e->reg));
            st = VT_ERR_NOT_FOUND;
            goto fail;
        }
    } else {
        e->mplug = vt_registry_find_model(e->reg, e->arch);
    }
    if (!e->mplug) {
        vt_set_error("no model plugin serves architecture '%s' of %s (plugin directories: %s; "
                     "%zu plugin file(s) refused, see 'vt plugins')", e->arch, p->model_path,
                     vt_registry_dirs(e->reg), vt_registry_n_refused(e->reg));
        st = VT_ERR_NOT_FOUND;
        goto fail;
    }
    e->mapi = e->mplug->desc->table;
    const char *device = p->device ? p->device : cfg.default_platform;
    const vt_config_platform *plat = vt_config_platform_get(&cfg, device);
    const char *bname = plat ? plat->backend : device;
    e->bplug = vt_registry_find(e->reg, VT_PLUGIN_BACKEND, bname);
    if (!e->bplug) {
        vt_set_error("--device %s: no backend plugin '%s' (plugin directories: %s; %zu plugin "
                     "file(s) refused, see 'vt plugins')", device, bname, vt_registry_dirs(e->reg),
                     vt_registry_n_refused(e->reg));
        st = VT_ERR_NOT_FOUND;
        goto fail;
    }
    const vt_backend_api *bapi = e->bplug->desc->table;
    if (bapi->device_count() <= 0) {
        vt_set_error("--device %s: backend '%s' (%s) reports zero devices", device,
                     e->bplug->desc->name, e->bplug->path);
        st = VT_ERR_UNSUPPORTED;
        goto fail;
    }
    if ((st = check_required_caps(e)) != VT_OK) goto fail;

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
    /* default KV length: the config's, capped by the trained context */
    uint32_t n_ctx = p->n_ctx;
    if (!n_ctx) {
        char key[128];
        uint32_t trained = 0;
        snprintf(key, sizeof key, "%s.context_length", e->arch);
        n_ctx = cfg.kv_cache_tokens;
        if (vt_gguf_get_u32(e->gguf, key, &trained) == VT_OK && trained > 0 && trained < n_ctx)
            n_ctx = trained;
    }
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
