/*
 * engine.c - opens a model for generation: the GGUF's header and tensor
 * table; the residency resolved (residency.h: plugins, every declared
 * requirement, the fit check against the device total probed once), all
 * before any weight is mapped or read; then the tokenizer, load, one
 * sequence. Prefill is cut into n_batch-token chunks.
 */
#include "engine.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "capabilities.h"
#include "expert_streamer.h"
#include "config.h"
#include "error.h"
#include "op_profile.h"
#include "prefault.h"
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
    vt_model_seq *seq;   /* the engine's own sequence (vt_engine_eval); with
                            n_seq > 1 made at its first use */
    uint32_t n_seq;      /* sequences the fit check counted (params.n_seq, >= 1) */
    uint32_t n_seq_live; /* made and not freed, the engine's own included */
    vt_model_info info;
    uint32_t n_batch;
    uint32_t n_ctx;      /* the KV cache length the plan counted */
    char arch[64];
    double load_seconds;
    /* the weights' arrival: bytes copied to the device or read from the
     * file in place (prefault), and the seconds it took */
    uint64_t weights_bytes;
    double weights_seconds;
    const char *weights_how;
    vt_config cfg;
    vt_residency res;
    const vt_store_api *store_api;
    vt_store *store;
    vt_expert_streamer *streamer;
    /* with params.profile or params.progress: the backend table the model is
     * given (and keeps), a copy of the plugin's (load_model) */
    vt_backend_api api_watched;
    vt_op_profile *prof; /* params.profile: the ops of api_watched are timed */
    /* the last token's logits for vt_engine_eval_last: [n_vocab] floats, page-locked
     * (backend host_alloc_pinned, within pinned_budget) on a backend whose device
     * memory is not host-addressable, so that each decode step's copy of the
     * logits is one DMA; else (or when the budget refuses) malloc-ed */
    float *last_logits;
    size_t last_logits_bytes;
    int last_logits_pinned;
};

vt_status vt_engine_seq_new(vt_engine *e, vt_engine_seq **out);

/* The engine's own sequence, made when missing (counted in n_seq_live). */
static vt_status own_seq(vt_engine *e)
{
    if (e->seq) return VT_OK;
    vt_engine_seq *s;
    vt_status st = vt_engine_seq_new(e, &s);
    if (st == VT_OK) e->seq = (vt_model_seq *)s;
    return st;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct load_watch {
    vt_engine_progress_fn fn;
    void *user;
    uint64_t done, total;
    double t0;
} load_watch;

/* vt_op_profile_watch_copies callback: one weight copy done */
static void on_weight_copy(void *user, size_t bytes)
{
    load_watch *w = user;
    w->done += bytes;
    if (w->done > w->total) w->total = w->done;
    w->fn(w->user, "upload", w->done, w->total, now_seconds() - w->t0);
}

/* The model's load. With params.profile or params.progress the model is
 * given (and keeps) a copy of the backend table wrapped by op_profile.c:
 * every op when profiling, else copy_h2d alone, for the load only. */
static vt_status load_model(vt_engine *e, const vt_engine_params *p, const vt_model_params *mp)
{
    const vt_backend_api *real = e->backend.api;
    vt_op_profile *prof = NULL;
    if (p->profile || p->progress) {
        size_t n = real->struct_size < sizeof e->api_watched ? real->struct_size
                                                               : sizeof e->api_watched;
        memset(&e->api_watched, 0, sizeof e->api_watched);
        memcpy(&e->api_watched, real, n);
        e->api_watched.struct_size = (uint32_t)n; /* what the copy holds */
        prof = vt_op_profile_install(&e->api_watched, real, e->backend.ctx, p->profile);
        if (!prof && p->profile) return VT_ERR_OUT_OF_MEMORY;
        if (prof) e->backend.api = &e->api_watched; /* else: a load without progress */
    }
    load_watch w = {.fn = p->progress, .user = p->progress_user, .t0 = now_seconds(),
                    .total = e->res.fit.dense_bytes +
                             (e->res.fit.experts == VT_EXPERTS_STREAMED ? 0 : e->res.fit.expert_bytes)};
    if (prof && p->progress) vt_op_profile_watch_copies(prof, on_weight_copy, &w);
    vt_status st = e->mapi->load(vt_host_table(), e->gguf, &e->backend, mp, &e->model);
    if (prof) vt_op_profile_watch_copies(prof, NULL, NULL);
    if (prof && !p->profile) { /* progress only: the model's copies go straight to the backend */
        e->api_watched.copy_h2d = real->copy_h2d;
        vt_op_profile_free(prof);
        prof = NULL;
    }
    e->prof = prof;
    if (st == VT_OK && p->progress && w.done && w.done != w.total)
        p->progress(p->progress_user, "upload", w.done, w.done, now_seconds() - w.t0);
    e->weights_seconds = now_seconds() - w.t0;
    e->weights_bytes = w.done ? w.done : w.total;
    return st;
}

typedef struct read_watch {
    vt_engine_progress_fn fn;
    void *user;
    double t0;
} read_watch;

static void on_weight_read(void *user, uint64_t done, uint64_t total)
{
    read_watch *w = user;
    w->fn(w->user, "read", done, total, now_seconds() - w->t0);
}

/* A backend that reads the weights in place from the mapping (one declaring
 * host-addressable device memory: the CPU): the model's load copied nothing,
 * so the weights are read here, before the first prompt (prefault.h),
 * unless params.no_prefault. */
static vt_status read_weights(vt_engine *e, const vt_engine_params *p)
{
    const char *why;
    if (vt_caps_state(e->bplug->desc, VT_CAP_HOST_ADDRESSABLE_DEVICE_MEMORY, &why) != VT_CAP_PRESENT) {
        e->weights_how = "copied to the device";
        return VT_OK;
    }
    e->weights_bytes = 0;
    e->weights_seconds = 0;
    if (p->no_prefault) {
        e->weights_how = "read in place at first use (--no-prefault)";
        return VT_OK;
    }
    e->weights_how = "read from the file in place";
    read_watch w = {.fn = p->progress, .user = p->progress_user, .t0 = now_seconds()};
    vt_status st = vt_prefault_weights(e->gguf, e->res.fit.experts == VT_EXPERTS_STREAMED,
                                       p->progress ? on_weight_read : NULL, &w, &e->weights_bytes);
    e->weights_seconds = now_seconds() - w.t0;
    return st;
}

static vt_status open_streamer(vt_engine *e, const char *device)
{
    const vt_fit *f = &e->res.fit;
    const vt_plugin_desc *md = e->mplug->desc;
    if (md->abi_minor < 1) {
        vt_set_error("--device %s streams the routed experts, but model plugin '%s' (%s) is built "
                     "for ABI %u.%u, which has no expert streamer (1.1); set %s.experts=resident "
                     "or update the plugin", device, md->name, e->mplug->path, md->abi_major,
                     md->abi_minor, device);
        return VT_ERR_UNSUPPORTED;
    }
    e->store_api = vt_residency_store_api(&e->res);
    vt_store_params sp = vt_residency_store_params(&e->res, f->slot_bytes, f->arena_slots, f,
                                                   &e->backend);
    vt_status st = e->store_api->create(&sp, &e->store);
    if (st != VT_OK) {
        vt_error_prefix("expert store '%s' (%llu slots of %llu bytes)", e->res.store_name,
                        (unsigned long long)f->arena_slots, (unsigned long long)f->slot_bytes);
        return st;
    }
    uint32_t n_layer = 0;
    char key[128];
    snprintf(key, sizeof key, "%s.block_count", e->arch);
    if (vt_gguf_get_u32(e->gguf, key, &n_layer) != VT_OK || n_layer == 0 || n_layer > 65536)
        n_layer = 65536;
    vt_streamer_params tp = {.gguf = e->gguf, .store_api = e->store_api, .store = e->store,
                             .n_slots = f->arena_slots, .slot_bytes = f->slot_bytes,
                             .n_layer = n_layer, .io_direct = e->res.plat->io_direct,
                             .policy = e->res.plat->policy == VT_POLICY_LRU ? VT_CACHE_POLICY_LRU
                                       : e->res.plat->policy == VT_POLICY_LAYER
                                           ? VT_CACHE_POLICY_LAYER
                                           : VT_CACHE_POLICY_LFRU,
                             .n_host_slots = f->host_slots, .host_slot_bytes = f->host_slot_bytes,
                             .n_readers = f->readers, .n_ring_slots = f->ring_slots,
                             .backend = &e->backend, .prefetch = e->res.plat->prefetch,
                             .prefetch_top = e->res.plat->prefetch_top,
                             .prefetch_max = e->res.plat->prefetch_max, .n_classes = f->n_classes,
                             .slot_unit_expert = f->slot_unit_expert};
    for (uint32_t c = 0; c < f->n_classes; c++) {
        tp.class_slots[c] = f->class_slots[c];
        tp.class_bytes[c] = f->class_bytes[c];
    }
    if ((st = vt_streamer_create(&tp, &e->streamer)) != VT_OK) return st;
    char hb[32], pb[32], pf[96], tb[16], mb[16];
    if (e->res.plat->prefetch_top) snprintf(tb, sizeof tb, "%u", e->res.plat->prefetch_top);
    else snprintf(tb, sizeof tb, "6/8");
    if (e->res.plat->prefetch_max) snprintf(mb, sizeof mb, "%u", e->res.plat->prefetch_max);
    else snprintf(mb, sizeof mb, "3/8");
    if (!vt_streamer_prefetch_on(e->streamer)) snprintf(pf, sizeof pf, "off");
    else snprintf(pf, sizeof pf, "next-layer, of the top %s predicted at most %s copied", tb, mb);
    for (uint32_t c = 0; c < f->n_classes; c++)
        vt_log(VT_LOG_INFO, "experts streamed: slot class %u: %llu slots of %llu bytes", c,
               (unsigned long long)f->class_slots[c], (unsigned long long)f->class_bytes[c]);
    vt_log(VT_LOG_INFO, "experts streamed: %llu slots (each %s) of at most %llu bytes in store '%s', %s, %u "
           "readers; host tier %llu slots (%s), staging ring %llu slots, %s pinned; prefetch %s",
           (unsigned long long)f->arena_slots,
           f->slot_unit_expert ? "a whole expert" : "one matrix of an expert",
           (unsigned long long)f->slot_bytes, e->res.store_name, vt_streamer_io_direct(e->streamer) ? "O_DIRECT" : "pread",
           vt_streamer_n_readers(e->streamer), (unsigned long long)f->host_slots,
           vt_format_bytes(f->host_arena_bytes, 1, hb, sizeof hb),
           (unsigned long long)vt_streamer_n_ring_slots(e->streamer),
           vt_format_bytes(vt_streamer_host_pinned_bytes(e->streamer), 1, pb, sizeof pb), pf);
    return VT_OK;
}

const vt_expert_streamer *vt_engine_streamer(const vt_engine *e) { return e->streamer; }
const vt_fit *vt_engine_fit(const vt_engine *e) { return &e->res.fit; }
const vt_residency *vt_engine_residency(const vt_engine *e) { return &e->res; }
uint32_t vt_engine_n_ctx(const vt_engine *e) { return e->n_ctx; }
const char *vt_engine_store_name(const vt_engine *e) { return e->res.store_name; }

/* e->last_logits ([n_seq][n_vocab]: one row for vt_engine_eval_last, a row
 * per sequence for vt_engine_seqs_eval): pinned when the backend can pin and
 * its device memory is not host-addressable and the pinned budget takes it
 * (a refusal is a noted fallback: the copy then goes through the driver's
 * staging), else malloc. */
static vt_status alloc_last_logits(vt_engine *e)
{
    const size_t bytes = (size_t)e->n_seq * (size_t)e->info.n_vocab * sizeof(float);
    const char *why;
    e->last_logits_bytes = bytes;
    if (vt_caps_state(e->bplug->desc, VT_CAP_PINNED_HOST_ALLOC, &why) == VT_CAP_PRESENT &&
        vt_caps_state(e->bplug->desc, VT_CAP_HOST_ADDRESSABLE_DEVICE_MEMORY, &why) != VT_CAP_PRESENT) {
        const vt_host_api *H = vt_host_table();
        void *p = NULL;
        int reserved = H->pinned_reserve(bytes);
        if (reserved) {
            if (e->backend.api->host_alloc_pinned(e->backend.ctx, bytes, "the logits (pinned)", &p) ==
                VT_OK) {
                e->last_logits = p;
                e->last_logits_pinned = 1;
                return VT_OK;
            }
            H->pinned_release(bytes);
            vt_clear_error();
        }
        char what[192];
        snprintf(what, sizeof what, "the logits (%zu bytes) are copied into pageable memory: "
                 "pinning them %s", bytes,
                 reserved ? "failed" : "exceeds the pinned budget (pinned_budget)");
        H->note_fallback(what);
    }
    e->last_logits = malloc(bytes ? bytes : 1);
    if (!e->last_logits) {
        vt_set_error("out of memory: %zu bytes for the logits", bytes);
        return VT_ERR_OUT_OF_MEMORY;
    }
    return VT_OK;
}

/* The plan: the KV cache length (params.n_ctx, or the platform's capped by
 * the trained context), the sequences counted, and the fit check of the
 * selected platform against the probed device total (what goes where, the
 * expert arena and tiers in bytes and slots). vt fit stops here
 * (params.plan_only). */
static vt_status plan(vt_engine *e, const vt_engine_params *p, int probe_ok, uint64_t mem_free,
                      uint64_t mem_total)
{
    e->n_ctx = p->n_ctx ? p->n_ctx : vt_engine_default_ctx(&e->cfg, e->res.plat, e->gguf);
    e->n_seq = p->n_seq ? p->n_seq : 1;
    e->res.n_seq = e->n_seq;
    vt_status st = vt_residency_fit(&e->res, e->gguf, probe_ok, mem_free, mem_total, e->n_ctx,
                                    e->n_batch);
    if (st != VT_OK) vt_error_prefix("%s on --device %s", p->model_path, e->res.platform);
    return st;
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
    if ((st = vt_gguf_open_progress(p->model_path, VT_GGUF_NO_MMAP, p->open_progress,
                                    p->progress_user, &e->gguf)) != VT_OK)
        goto fail;
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

    if (p->plan_only) { /* vt fit: the plan, and nothing made or read for it */
        int probe_ok;
        uint64_t mem_free, mem_total;
        if ((st = vt_residency_probe(&e->res, &probe_ok, &mem_free, &mem_total)) != VT_OK) goto fail;
        st = plan(e, p, probe_ok, mem_free, mem_total);
        if (st != VT_OK && st != VT_ERR_DOES_NOT_FIT) goto fail;
        e->load_seconds = now_seconds() - t0;
        *out = e;
        return st;
    }
    /* the tokenizer first: a refusal there must not wait for the weights */
    if ((st = vt_tokenizer_load(e->gguf, &e->tok)) != VT_OK) {
        vt_error_prefix("%s", p->model_path);
        goto fail;
    }
    /* the platform's pinned-memory budget, before the backend may pin anything */
    vt_host_set_pinned_budget(e->res.plat->pinned_budget_bytes);
    /* kernels NULL: the backend reads VT_KERNELS itself */
    vt_backend_params bp = {.struct_size = sizeof bp, .device = e->res.device, .n_threads = p->n_threads,
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
    if ((st = plan(e, p, probe_ok, mem_free, mem_total)) != VT_OK) goto fail;
    const uint32_t n_ctx = e->n_ctx;
    if (e->res.fit.experts == VT_EXPERTS_STREAMED && (st = open_streamer(e, device)) != VT_OK)
        goto fail;
    /* dense weights are read in place from the mapping; streamed experts are
     * never touched there (the streamer preads them) */
    if ((st = vt_gguf_map(e->gguf)) != VT_OK) goto fail;
    vt_model_params mp = {.struct_size = sizeof mp, .n_ctx = n_ctx, .n_batch = e->n_batch,
                          .experts = e->streamer};
    if ((st = load_model(e, p, &mp)) != VT_OK) {
        vt_error_prefix("%s", p->model_path);
        goto fail;
    }
    if ((st = read_weights(e, p)) != VT_OK) goto fail; /* its message names the file */
    memset(&e->info, 0, sizeof e->info);
    e->info.struct_size = sizeof e->info;
    e->mapi->info(e->model, &e->info);
    if (e->info.struct_size < offsetof(vt_model_info, decode_path) + sizeof e->info.decode_path)
        e->info.decode_path = NULL; /* a model built for ABI 1.1 */
    if (e->info.struct_size < offsetof(vt_model_info, moe_path) + sizeof e->info.moe_path)
        e->info.moe_path = NULL;
    if (e->info.n_ctx_train && e->info.n_ctx > e->info.n_ctx_train)
        vt_log(VT_LOG_WARN, "context of %u tokens exceeds the %u the model was trained with; "
               "quality past %u tokens is not expected", e->info.n_ctx, e->info.n_ctx_train,
               e->info.n_ctx_train);
    /* more tokens than rows: ids without logits; fewer: logits of rows that are
     * no token, which a sampler would pick and nothing could print (issue 17) */
    if (vt_tokenizer_n_vocab(e->tok) != e->info.n_vocab) {
        vt_set_error("%s: the tokenizer (tokenizer.ggml.tokens) has %lld tokens but the model's "
                     "vocabulary (token_embd) has %lld rows; they must be equal (a converter pads the tokenizer with "
                     "UNUSED tokens to the rows)", p->model_path,
                     (long long)vt_tokenizer_n_vocab(e->tok), (long long)e->info.n_vocab);
        st = VT_ERR_FORMAT;
        goto fail;
    }
    /* params.n_seq 0 (vt run, vt bench): the engine's own sequence, made now
     * so that a cache that does not fit is refused at load; n_seq given (vt
     * serve): the caller makes them (vt_engine_seq_new) */
    if (!p->n_seq && (st = own_seq(e)) != VT_OK) goto fail;
    if ((st = alloc_last_logits(e)) != VT_OK) goto fail;
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
    if (e->last_logits && e->last_logits_pinned) {
        e->backend.api->host_free_pinned(e->backend.ctx, e->last_logits);
        vt_host_table()->pinned_release(e->last_logits_bytes);
    } else {
        free(e->last_logits);
    }
    if (e->seq) e->mapi->seq_free(e->model, e->seq);
    if (e->model) e->mapi->free(e->model);
    vt_streamer_destroy(e->streamer);
    if (e->store) e->store_api->destroy(e->store);
    if (e->backend.ctx) e->backend.api->shutdown(e->backend.ctx);
    vt_op_profile_free(e->prof);
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

void vt_engine_weights(const vt_engine *e, uint64_t *bytes, double *seconds, const char **how)
{
    if (bytes) *bytes = e->weights_bytes;
    if (seconds) *seconds = e->weights_seconds;
    if (how) *how = e->weights_how ? e->weights_how : "";
}

vt_status vt_engine_reset(vt_engine *e)
{
    return e->seq ? e->mapi->seq_reset(e->model, e->seq) : VT_OK;
}

int64_t vt_engine_pos(const vt_engine *e)
{
    return e->seq ? e->mapi->seq_pos(e->model, e->seq) : 0;
}

uint32_t vt_engine_n_seq(const vt_engine *e) { return e->n_seq; }

vt_status vt_engine_seq_new(vt_engine *e, vt_engine_seq **out)
{
    *out = NULL;
    if (e->n_seq_live >= e->n_seq) {
        vt_set_error("%u sequences are in use and the engine was opened for %u (the fit check "
                     "counted that many KV caches)", e->n_seq_live, e->n_seq);
        return VT_ERR_RANGE;
    }
    vt_model_seq *s = NULL;
    vt_status st = e->mapi->seq_new(e->model, &s);
    if (st != VT_OK) return st;
    e->n_seq_live++;
    *out = (vt_engine_seq *)s;
    return VT_OK;
}

void vt_engine_seq_free(vt_engine *e, vt_engine_seq *s)
{
    if (!s) return;
    e->mapi->seq_free(e->model, (vt_model_seq *)s);
    e->n_seq_live--;
}

vt_status vt_engine_seq_reset(vt_engine *e, vt_engine_seq *s)
{
    return e->mapi->seq_reset(e->model, (vt_model_seq *)s);
}

int64_t vt_engine_seq_pos(const vt_engine *e, const vt_engine_seq *s)
{
    return e->mapi->seq_pos(e->model, (const vt_model_seq *)s);
}

vt_status vt_engine_profile_start(vt_engine *e)
{
    if (!e->prof) {
        vt_set_error("the engine was opened without profiling (params.profile)");
        return VT_ERR_INVALID_ARG;
    }
    vt_op_profile_reset(e->prof);
    vt_op_profile_begin(e->prof);
    return VT_OK;
}

int vt_engine_profile_stop(vt_engine *e, struct vt_op_profile_row *rows, int cap)
{
    vt_op_profile_end();
    return vt_op_profile_rows(e->prof, rows, cap);
}

static vt_status eval_seq(vt_engine *e, vt_model_seq *seq, const int32_t *tokens, int64_t n,
                          float *logits, int all_logits)
{
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= e->info.n_vocab) {
            vt_set_error("token id %d at index %lld is outside the vocabulary [0, %lld)",
                         tokens[i], (long long)i, (long long)e->info.n_vocab);
            return VT_ERR_RANGE;
        }
    int64_t pos = e->mapi->seq_pos(e->model, seq);
    if (e->info.n_ctx && pos + n > (int64_t)e->info.n_ctx) {
        if (pos == 0)
            vt_set_error("the prompt has %lld tokens but the context holds %u (raise --ctx)",
                         (long long)n, e->info.n_ctx);
        else
            vt_set_error("%lld more tokens after %lld do not fit the context of %u tokens (raise --ctx)",
                         (long long)n, (long long)pos, e->info.n_ctx);
        return VT_ERR_RANGE;
    }
    vt_status cst = vt_gguf_check_unchanged(e->gguf);
    if (cst != VT_OK) return cst;
    for (int64_t off = 0; off < n; off += e->n_batch) {
        int64_t m = n - off < e->n_batch ? n - off : e->n_batch;
        int last = off + m == n;
        float *out = NULL;
        if (logits && all_logits) out = logits + off * e->info.n_vocab;
        else if (logits && last) out = logits;
        vt_status st = e->mapi->forward(e->model, seq, tokens + off, m, out, all_logits);
        if (st != VT_OK) return st;
    }
    return VT_OK;
}

vt_status vt_engine_eval(vt_engine *e, const int32_t *tokens, int64_t n, float *logits,
                         int all_logits)
{
    vt_status st = own_seq(e);
    return st != VT_OK ? st : eval_seq(e, e->seq, tokens, n, logits, all_logits);
}

vt_status vt_engine_eval_last(vt_engine *e, const int32_t *tokens, int64_t n, const float **logits)
{
    *logits = NULL;
    vt_status st = vt_engine_eval(e, tokens, n, e->last_logits, 0);
    if (st == VT_OK) *logits = e->last_logits;
    return st;
}

vt_status vt_engine_seq_eval_last(vt_engine *e, vt_engine_seq *s, const int32_t *tokens,
                                  int64_t n, const float **logits)
{
    *logits = NULL;
    vt_status st = eval_seq(e, (vt_model_seq *)s, tokens, n, e->last_logits, 0);
    if (st == VT_OK) *logits = e->last_logits;
    return st;
}

uint32_t vt_engine_n_batch(const vt_engine *e) { return e->n_batch; }

int vt_engine_batches_sequences(const vt_engine *e)
{
    return e->mplug->desc->abi_minor >= 8 && e->mapi->struct_size >= VT_MODEL_API_SIZE_1_8 &&
           e->mapi->forward_multi != NULL;
}

vt_status vt_engine_seqs_eval(vt_engine *e, vt_engine_seq *const *seqs, const int64_t *n_tok,
                              uint32_t n, const int32_t *tokens, const float **logits)
{
    *logits = NULL;
    const int64_t V = e->info.n_vocab;
    if (n == 0 || n > e->n_seq) {
        vt_set_error("%u sequences in one evaluation; the engine holds at most %u", n, e->n_seq);
        return VT_ERR_RANGE;
    }
    int64_t T = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (n_tok[i] <= 0) {
            vt_set_error("sequence %u of the evaluation has %lld tokens; at least 1", i,
                         (long long)n_tok[i]);
            return VT_ERR_INVALID_ARG;
        }
        int64_t pos = e->mapi->seq_pos(e->model, (const vt_model_seq *)seqs[i]);
        if (e->info.n_ctx && pos + n_tok[i] > (int64_t)e->info.n_ctx) {
            vt_set_error("sequence %u: %lld more tokens after %lld do not fit the context of %u "
                         "tokens", i, (long long)n_tok[i], (long long)pos, e->info.n_ctx);
            return VT_ERR_RANGE;
        }
        T += n_tok[i];
    }
    for (int64_t t = 0; t < T; t++)
        if (tokens[t] < 0 || tokens[t] >= V) {
            vt_set_error("token id %d at index %lld is outside the vocabulary [0, %lld)", tokens[t],
                         (long long)t, (long long)V);
            return VT_ERR_RANGE;
        }
    vt_status st = vt_gguf_check_unchanged(e->gguf);
    if (st != VT_OK) return st;
    if (n > 1 && T <= (int64_t)e->n_batch && vt_engine_batches_sequences(e)) {
        st = e->mapi->forward_multi(e->model, (vt_model_seq *const *)seqs, n_tok, n, tokens,
                                    e->last_logits);
    } else { /* one sequence, or a model without forward_multi: one after another */
        st = VT_OK;
        for (uint32_t i = 0, off = 0; i < n && st == VT_OK; off += (uint32_t)n_tok[i], i++)
            st = eval_seq(e, (vt_model_seq *)seqs[i], tokens + off, n_tok[i],
                          e->last_logits + (size_t)i * (size_t)V, 0);
    }
    if (st == VT_OK) *logits = e->last_logits;
    return st;
}
