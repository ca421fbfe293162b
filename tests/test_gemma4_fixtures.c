/*
 * test_gemma4_fixtures.c - the gemma4 model plugin (plugins/model-gemma4) on
 * the gemma4-moe-tiny fixture, driven through the plugin ABI directly
 * (dlopen-ed backend-cpu.so and model-gemma4.so, the core's host table), not
 * through vt_engine (so the test does not depend on the Gemma 4 tokenizer):
 *
 *  - logits of every position of the published prompts (len1, len8, len40)
 *    against the transformers float32 reference (fixtures README "How to
 *    compare": max |Δ| <= 1e-2, same argmax wherever the top-1/top-2 margin
 *    exceeds 1e-3), with the "scalar" and the "auto" CPU kernels;
 *  - 32 greedy tokens against refs/greedy.json (prompt + generation run past
 *    the sliding window of 32, so the bounded sliding cache wraps);
 *  - the len40 prompt (longer than the window) in one chunk, in chunks of 7
 *    and token by token: the same logits within 1e-4;
 *  - routed experts streamed through the minimum arena (top-k x 2 slots,
 *    core expert streamer + host slot store) bit-identical to resident, with
 *    the counters showing misses and evictions;
 *  - required_caps lists only capabilities backend-cpu declares PRESENT;
 *  - the E-style dense variant (per-layer embeddings, shared-KV layers,
 *    double-wide MLP, own attn_v), which has no published fixture: a tiny
 *    random f32 model written here, against a double-precision transcription
 *    of the spec's formulas, prefill in one chunk, chunks of 5, token by token.
 */
#include "test_util.h"

#include <cjson/cJSON.h>
#include <dlfcn.h>
#include <math.h>
#include <unistd.h>

#include "error.h"
#include "expert_streamer.h"
#include "registry.h"
#include "vt/backend.h"
#include "vt/gguf.h"
#include "vt/model.h"
#include "vt/store.h"

#define GGUF_REL "gemma4-moe-tiny/gguf/gemma4-moe-tiny-f16.gguf"

static const char *fx;
static cJSON *index_json, *greedy_json;
static void *h_cpu, *h_model;
static const vt_backend_api *cpu;
static const vt_model_api *mapi;
/* the backend and expert store the rigs use: backend-cpu and the core's host
 * store, or backend-cuda and store-device for the GPU case */
static const vt_backend_api *be_api;
static const vt_store_api *st_api;
static const char *be_name = "cpu";
static vt_gguf *gguf;

static cJSON *load_json(const char *rel)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/gemma4-moe-tiny/%s", fx, rel);
    char *text = vt_test_read_file(path, NULL);
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j) fail_msg("%s is not JSON", path);
    return j;
}

static const void *plugin_table(const char *file, void **handle, uint32_t kind)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", vt_test_plugin_dir(), file);
    *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!*handle) fail_msg("dlopen %s: %s", path, dlerror());
    vt_plugin_entry_fn entry = (vt_plugin_entry_fn)dlsym(*handle, VT_PLUGIN_ENTRY_SYMBOL);
    assert_non_null(entry);
    const vt_plugin_desc *d = entry();
    assert_int_equal(d->abi_major, VT_ABI_MAJOR);
    assert_int_equal(d->kind, kind);
    return d->table;
}

/* Fixtures, plugins and the GGUF, once for every case (NULL fx: skipped). */
static int ensure(void)
{
    if (gguf) return 1;
    if (!(fx = vt_test_fixtures())) return 0;
    index_json = load_json("refs/index.json");
    greedy_json = load_json("refs/greedy.json");
    cpu = plugin_table("backend-cpu.so", &h_cpu, VT_PLUGIN_BACKEND);
    mapi = plugin_table("model-gemma4.so", &h_model, VT_PLUGIN_MODEL);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", fx, GGUF_REL);
    if (vt_gguf_open(path, 0, &gguf) != VT_OK) fail_msg("%s", vt_last_error());
    return 1;
}

typedef struct rig {
    vt_backend be;
    vt_model *m;
    vt_model_seq *s;
    vt_model_info info;
    /* streaming */
    vt_store *store;
    vt_expert_streamer *streamer;
} rig;

static void rig_open(rig *r, const char *kernels, uint32_t n_batch, int streamed)
{
    memset(r, 0, sizeof *r);
    const vt_host_api *host = vt_host_table();
    const vt_backend_api *api = be_api ? be_api : cpu;
    vt_backend_params bp = {sizeof bp, 0, 2, kernels, host};
    if (api->init(&bp, &r->be.ctx) != VT_OK) fail_msg("%s init: %s", be_name, vt_last_error());
    r->be.api = api;
    r->be.name = be_name;
    vt_model_params mp = {.struct_size = sizeof mp, .n_ctx = 128, .n_batch = n_batch};
    if (streamed) {
        /* the minimum arena: top-k (2) experts x 2 matrices (gate_up, down);
         * a slot holds the largest slice (gate_up: 2 x 256 rows of 256 f16) */
        const vt_gguf_tensor *gu = vt_gguf_find_tensor(gguf, "blk.0.ffn_gate_up_exps.weight");
        assert_non_null(gu);
        uint64_t slot_bytes = gu->nbytes / (uint64_t)gu->ne[2];
        const uint64_t n_slots = 2 * 2;
        const vt_store_api *sa = st_api ? st_api : vt_host_store_api();
        vt_store_params sp = {.struct_size = sizeof sp, .host = host, .backend = &r->be,
                              .slot_bytes = slot_bytes, .n_slots = n_slots};
        if (sa->create(&sp, &r->store) != VT_OK) fail_msg("host store: %s", vt_last_error());
        vt_streamer_params p = {.gguf = gguf, .store_api = sa, .store = r->store,
                                .n_slots = n_slots, .slot_bytes = slot_bytes, .n_layer = 4};
        if (vt_streamer_create(&p, &r->streamer) != VT_OK) fail_msg("%s", vt_last_error());
        mp.experts = r->streamer;
    }
    if (mapi->load(host, gguf, &r->be, &mp, &r->m) != VT_OK)
        fail_msg("gemma4 load: %s", vt_last_error());
    if (mapi->seq_new(r->m, &r->s) != VT_OK) fail_msg("seq_new: %s", vt_last_error());
    r->info.struct_size = sizeof r->info;
    mapi->info(r->m, &r->info);
    assert_int_equal(r->info.n_vocab, 4096);
}

static void rig_close(rig *r)
{
    mapi->seq_free(r->m, r->s);
    mapi->free(r->m);
    if (r->streamer) vt_streamer_destroy(r->streamer);
    if (r->store) (st_api ? st_api : vt_host_store_api())->destroy(r->store);
    r->be.api->shutdown(r->be.ctx);
}

/* Evaluate toks[0..n) from a fresh sequence in chunks of `chunk`; all logits. */
static float *eval_all(rig *r, const int32_t *toks, int n, int chunk)
{
    assert_int_equal(mapi->seq_reset(r->m, r->s), VT_OK);
    const int64_t V = r->info.n_vocab;
    float *out = malloc((size_t)n * (size_t)V * sizeof *out);
    assert_non_null(out);
    for (int i = 0; i < n; i += chunk) {
        int k = n - i < chunk ? n - i : chunk;
        if (mapi->forward(r->m, r->s, toks + i, k, out + (size_t)i * V, 1) != VT_OK)
            fail_msg("forward at %d (+%d): %s", i, k, vt_last_error());
    }
    assert_int_equal(mapi->seq_pos(r->m, r->s), n);
    return out;
}

static cJSON *prompt(const char *name)
{
    cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(index_json, "prompts"))
        if (!strcmp(cJSON_GetObjectItem(it, "name")->valuestring, name)) return it;
    fail_msg("prompt %s not in index.json", name);
    return NULL;
}

static int32_t *ids_of(cJSON *arr, int *n)
{
    *n = cJSON_GetArraySize(arr);
    int32_t *t = malloc((size_t)*n * sizeof *t);
    for (int i = 0; i < *n; i++) t[i] = cJSON_GetArrayItem(arr, i)->valueint;
    return t;
}

static int64_t argmax(const float *v, int64_t n)
{
    int64_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

/* The fixtures README criterion; returns the number of top-1 agreements. */
static int compare_ref(const char *what, cJSON *p, const float *got, int n, int64_t V,
                       double *pooled_sum, int64_t *pooled_n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/gemma4-moe-tiny/refs/%s", fx,
             cJSON_GetObjectItem(p, "file")->valuestring);
    size_t len;
    float *ref = vt_test_read_file(path, &len);
    assert_int_equal(len, (size_t)n * (size_t)V * sizeof(float));
    cJSON *margin = cJSON_GetObjectItem(p, "top1_minus_top2_per_position");
    double maxd = 0, sum = 0;
    int top1 = 0;
    for (int t = 0; t < n; t++) {
        const float *a = got + (size_t)t * V, *b = ref + (size_t)t * V;
        for (int64_t v = 0; v < V; v++) {
            double d = fabs((double)a[v] - (double)b[v]);
            if (!(d <= maxd)) maxd = d; /* NaN propagates */
            sum += d;
        }
        int64_t ga = argmax(a, V), ra = argmax(b, V);
        top1 += ga == ra;
        double mg = cJSON_GetArrayItem(margin, t)->valuedouble;
        if (ga != ra && mg > 1e-3)
            fail_msg("%s: position %d argmax %lld, reference %lld (margin %.3g)", what, t,
                     (long long)ga, (long long)ra, mg);
    }
    print_message("[gemma4] %-28s max |d| %.3g  mean |d| %.3g  top-1 %d/%d\n", what, maxd,
                  sum / ((double)n * (double)V), top1, n);
    if (!(maxd <= 1e-2)) fail_msg("%s: max |d| %.4g > 1e-2", what, maxd);
    if (pooled_sum) *pooled_sum += sum;
    if (pooled_n) *pooled_n += (int64_t)n * V;
    free(ref);
    return top1;
}

/* All positions of every published prompt against transformers. */
static void logits_vs_hf(const char *kernels)
{
    if (!ensure()) return;
    rig r;
    rig_open(&r, kernels, 64, 0);
    const char *names[] = {"len1", "len8", "len40"};
    double pooled = 0;
    int64_t pooled_n = 0;
    int top1 = 0, total = 0;
    for (int i = 0; i < 3; i++) {
        cJSON *p = prompt(names[i]);
        int n;
        int32_t *toks = ids_of(cJSON_GetObjectItem(p, "prompt_ids"), &n);
        float *lg = eval_all(&r, toks, n, n);
        char what[64];
        snprintf(what, sizeof what, "%s (%s kernels)", names[i], kernels);
        top1 += compare_ref(what, p, lg, n, r.info.n_vocab, &pooled, &pooled_n);
        total += n;
        free(lg);
        free(toks);
    }
    print_message("[gemma4] pooled (%s kernels): mean |d| %.3g, top-1 %d of %d\n", kernels,
                  pooled / (double)pooled_n, top1, total);
    rig_close(&r);
}

static void test_logits_scalar(void **state)
{
    (void)state;
    logits_vs_hf("scalar");
}

static void test_logits_auto(void **state)
{
    (void)state;
    logits_vs_hf("auto");
}

/* Greedy continuation of greedy.json's prompt; prefill in chunks of `chunk`. */
static void greedy(rig *r, int chunk, int32_t *out, int n_new)
{
    int n;
    int32_t *toks = ids_of(cJSON_GetObjectItem(greedy_json, "prompt_ids"), &n);
    const int64_t V = r->info.n_vocab;
    float *lg = malloc((size_t)V * sizeof *lg);
    assert_int_equal(mapi->seq_reset(r->m, r->s), VT_OK);
    for (int i = 0; i < n; i += chunk) {
        int k = n - i < chunk ? n - i : chunk;
        if (mapi->forward(r->m, r->s, toks + i, k, lg, 0) != VT_OK)
            fail_msg("prefill: %s", vt_last_error());
    }
    for (int s = 0; s < n_new; s++) {
        int32_t best = (int32_t)argmax(lg, V);
        out[s] = best;
        if (s + 1 < n_new && mapi->forward(r->m, r->s, &best, 1, lg, 0) != VT_OK)
            fail_msg("decode step %d: %s", s, vt_last_error());
    }
    free(lg);
    free(toks);
}

static void check_greedy(const int32_t *got, const char *what)
{
    cJSON *ref = cJSON_GetObjectItem(greedy_json, "new_ids");
    assert_int_equal(cJSON_GetArraySize(ref), 32);
    for (int i = 0; i < 32; i++)
        if (got[i] != cJSON_GetArrayItem(ref, i)->valueint)
            fail_msg("%s: greedy token %d is %d, reference %d", what, i, got[i],
                     cJSON_GetArrayItem(ref, i)->valueint);
    print_message("[gemma4] greedy 32 tokens (%s): all match\n", what);
}

static void test_greedy(void **state)
{
    (void)state;
    if (!ensure()) return;
    int32_t got[32];
    rig r;
    rig_open(&r, "scalar", 64, 0);
    greedy(&r, 64, got, 32);
    check_greedy(got, "one-chunk prefill");
    rig_close(&r);
    /* n_batch 8: the sliding cache holds 40 rows, prompt + generation is 55 */
    rig_open(&r, "scalar", 8, 0);
    greedy(&r, 8, got, 32);
    check_greedy(got, "n_batch 8, sliding cache wraps");
    rig_close(&r);
}

static void max_diff(const float *a, const float *b, size_t n, const char *what, double tol)
{
    double d = 0;
    for (size_t i = 0; i < n; i++) {
        double x = fabs((double)a[i] - (double)b[i]);
        if (!(x <= d)) d = x;
    }
    print_message("[gemma4] %-40s max |d| vs one chunk %.3g\n", what, d);
    if (!(d <= tol)) fail_msg("%s: max |d| %.4g > %.g", what, d, tol);
}

/* len40 (> sliding window 32): one chunk, chunks of 7, token by token. */
static void test_chunked_prefill(void **state)
{
    (void)state;
    if (!ensure()) return;
    cJSON *p = prompt("len40");
    int n;
    int32_t *toks = ids_of(cJSON_GetObjectItem(p, "prompt_ids"), &n);
    assert_true(n > 32);
    rig r;
    rig_open(&r, "scalar", 64, 0);
    float *one = eval_all(&r, toks, n, n);
    const size_t cnt = (size_t)n * (size_t)r.info.n_vocab;
    compare_ref("len40 one chunk", p, one, n, r.info.n_vocab, NULL, NULL);
    rig_close(&r);

    rig_open(&r, "scalar", 7, 0); /* sliding cache 39 rows: moves once */
    float *c7 = eval_all(&r, toks, n, 7);
    max_diff(one, c7, cnt, "len40 in chunks of 7 (n_batch 7)", 1e-4);
    free(c7);
    rig_close(&r);

    rig_open(&r, "scalar", 1, 0); /* sliding cache 33 rows: moves every other token */
    float *c1 = eval_all(&r, toks, n, 1);
    max_diff(one, c1, cnt, "len40 token by token (n_batch 1)", 1e-4);
    compare_ref("len40 token by token", p, c1, n, r.info.n_vocab, NULL, NULL);
    free(c1);
    rig_close(&r);

    rig_open(&r, "scalar", 64, 0); /* chunks of 7 with room to spare: no move */
    float *c7b = eval_all(&r, toks, n, 7);
    max_diff(one, c7b, cnt, "len40 in chunks of 7 (n_batch 64)", 1e-4);
    free(c7b);
    rig_close(&r);
    free(one);
    free(toks);
}

/* Experts streamed through the minimum arena vs resident: bit-identical. */
static void test_streamed_bit_identical(void **state)
{
    (void)state;
    if (!ensure()) return;
    cJSON *p = prompt("len40");
    int n;
    int32_t *toks = ids_of(cJSON_GetObjectItem(p, "prompt_ids"), &n);
    const int chunks[] = {64, 1};
    for (int c = 0; c < 2; c++) {
        rig a, b;
        rig_open(&a, "scalar", (uint32_t)chunks[c], 0);
        rig_open(&b, "scalar", (uint32_t)chunks[c], 1);
        float *la = eval_all(&a, toks, n, chunks[c]);
        float *lb = eval_all(&b, toks, n, chunks[c]);
        const size_t cnt = (size_t)n * (size_t)a.info.n_vocab;
        if (memcmp(la, lb, cnt * sizeof *la)) {
            size_t i = 0;
            while (la[i] == lb[i]) i++;
            fail_msg("streamed logits differ from resident at %zu: %.9g vs %.9g", i, lb[i],
                     la[i]);
        }
        int32_t ga[32], gb[32];
        greedy(&a, chunks[c], ga, 32);
        greedy(&b, chunks[c], gb, 32);
        assert_memory_equal(ga, gb, sizeof ga);
        check_greedy(gb, chunks[c] == 1 ? "streamed, token by token" : "streamed");
        vt_expert_stats st;
        assert_int_equal(vt_streamer_stats(b.streamer, -1, &st), VT_OK);
        print_message("[gemma4] streamed (n_batch %d): %llu hits, %llu misses, %llu evictions, "
                      "%.1f MiB filled\n", chunks[c], (unsigned long long)st.hits,
                      (unsigned long long)st.misses, (unsigned long long)st.evictions,
                      st.bytes_filled / 1048576.0);
        if (st.misses == 0 || st.evictions == 0 || st.bytes_filled == 0)
            fail_msg("the streamer was bypassed (misses %llu, evictions %llu)",
                     (unsigned long long)st.misses, (unsigned long long)st.evictions);
        free(la);
        free(lb);
        rig_close(&a);
        rig_close(&b);
    }
    free(toks);
}

/* required_caps: every id is one backend-cpu declares PRESENT; F16 matmul and
 * get_rows are among them. */
static void test_required_caps(void **state)
{
    (void)state;
    if (!ensure()) return;
    uint32_t ids[128], n = 0;
    if (mapi->required_caps(vt_host_table(), gguf, ids, 128, &n) != VT_OK)
        fail_msg("%s", vt_last_error());
    int f16_mm = 0, f16_rows = 0;
    for (uint32_t i = 0; i < n; i++) {
        int present = 0;
        for (uint32_t j = 0; j < cpu->n_caps; j++)
            if (cpu->caps[j].id == ids[i]) present = cpu->caps[j].state == VT_CAP_PRESENT;
        if (!present) fail_msg("capability %u is not PRESENT in backend-cpu", ids[i]);
        f16_mm |= ids[i] == VT_CAP_MAT_MUL(VT_TYPE_F16);
        f16_rows |= ids[i] == VT_CAP_GET_ROWS(VT_TYPE_F16);
    }
    assert_true(f16_mm && f16_rows);
    uint32_t small = 0;
    assert_int_equal(mapi->required_caps(vt_host_table(), gguf, ids, 2, &small), VT_ERR_RANGE);
    assert_int_equal(small, n);
}


/* ================================================================ */
/* E-style dense variant (per-layer embeddings, shared-KV layers,    */
/* double-wide MLP): no published fixture, so a tiny random f32 model */
/* is written here and the plugin is compared with a plain double-    */
/* precision transcription of the spec's formulas (gemma4.md §5.1-5.7) */
/* that shares no code with the plugin: full no-cache forward, every  */
/* layer over every position.                                          */
/* ================================================================ */

enum { DD = 64, DL = 6, DH = 2, DS = 32, DF = 64, DP = 16, DV = 128, DSWA = 8, DSHARED = 3 };
static const int d_is_swa[DL] = {1, 1, 0, 1, 1, 0};
static const int d_nff[DL] = {64, 64, 64, 128, 128, 128}; /* double-wide on shared-KV layers */

typedef struct dense_w {
    float *emb, *out_norm, *rope_freqs, *ple_emb, *ple_proj, *ple_norm;
    struct {
        float *attn_norm, *wq, *q_norm, *wk, *k_norm, *wv, *wo, *post_attn;
        float *ffn_norm, *wg, *wu, *wd, *post_ffw, *inp_gate, *proj, *post_norm, *out_scale;
    } l[DL];
    float *all[128];
    int n_all;
} dense_w;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float urand(float lo, float hi)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    double u = (double)(rng_state >> 11) / 9007199254740992.0;
    return (float)(lo + (hi - lo) * u);
}

static float *dense_tensor(vt_gguf_writer *w, dense_w *dw, const char *name, int n_dims,
                           int64_t ne0, int64_t ne1, float lo, float hi)
{
    int64_t ne[2] = {ne0, ne1};
    size_t n = (size_t)ne0 * (size_t)(n_dims > 1 ? ne1 : 1);
    float *p = malloc(n * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) p[i] = urand(lo, hi);
    assert_int_equal(vt_gguf_writer_add_tensor(w, name, VT_TYPE_F32, (uint32_t)n_dims, ne, p,
                                               n * sizeof *p), VT_OK);
    dw->all[dw->n_all++] = p;
    return p;
}

static void dense_write(const char *path, dense_w *dw)
{
    memset(dw, 0, sizeof *dw);
    vt_gguf_writer *w = vt_gguf_writer_new(32);
    assert_non_null(w);
    vt_gguf_writer_set_str(w, "general.architecture", "gemma4");
    vt_gguf_writer_set_u32(w, "gemma4.context_length", 256);
    vt_gguf_writer_set_u32(w, "gemma4.embedding_length", DD);
    vt_gguf_writer_set_u32(w, "gemma4.block_count", DL);
    vt_gguf_writer_set_arr(w, "gemma4.feed_forward_length", VT_GGUF_INT32, d_nff, DL);
    vt_gguf_writer_set_u32(w, "gemma4.attention.head_count", DH);
    vt_gguf_writer_set_u32(w, "gemma4.attention.head_count_kv", 1);
    vt_gguf_writer_set_u32(w, "gemma4.attention.key_length", DF);
    vt_gguf_writer_set_u32(w, "gemma4.attention.value_length", DF);
    vt_gguf_writer_set_u32(w, "gemma4.attention.key_length_swa", DS);
    vt_gguf_writer_set_u32(w, "gemma4.attention.value_length_swa", DS);
    vt_gguf_writer_set_u32(w, "gemma4.rope.dimension_count", DF);
    vt_gguf_writer_set_u32(w, "gemma4.rope.dimension_count_swa", DS);
    vt_gguf_writer_set_f32(w, "gemma4.rope.freq_base", 1e6f);
    vt_gguf_writer_set_f32(w, "gemma4.rope.freq_base_swa", 1e4f);
    vt_gguf_writer_set_u32(w, "gemma4.attention.sliding_window", DSWA);
    uint8_t pat[DL];
    for (int i = 0; i < DL; i++) pat[i] = (uint8_t)d_is_swa[i];
    vt_gguf_writer_set_arr(w, "gemma4.attention.sliding_window_pattern", VT_GGUF_BOOL, pat, DL);
    vt_gguf_writer_set_u32(w, "gemma4.attention.shared_kv_layers", DSHARED);
    vt_gguf_writer_set_f32(w, "gemma4.attention.layer_norm_rms_epsilon", 1e-6f);
    vt_gguf_writer_set_u32(w, "gemma4.embedding_length_per_layer_input", DP);
    vt_gguf_writer_set_f32(w, "gemma4.final_logit_softcapping", 30.0f);

    const float a = 1.0f / sqrtf((float)DD);
    {   /* proportional RoPE, partial rotary factor 0.25 (§4 item 3); the writer
         * copies at add time, so the values go in first */
        float *ff = malloc(DF / 2 * sizeof *ff);
        assert_non_null(ff);
        for (int i = 0; i < DF / 2; i++) ff[i] = i < DF / 8 ? 1.0f : 1e30f;
        int64_t ne = DF / 2;
        assert_int_equal(vt_gguf_writer_add_tensor(w, "rope_freqs.weight", VT_TYPE_F32, 1, &ne, ff,
                                                   DF / 2 * sizeof *ff), VT_OK);
        dw->rope_freqs = dw->all[dw->n_all++] = ff;
    }
    dw->emb = dense_tensor(w, dw, "token_embd.weight", 2, DD, DV, -0.5f, 0.5f);
    dw->out_norm = dense_tensor(w, dw, "output_norm.weight", 1, DD, 1, 0.5f, 1.5f);
    dw->ple_emb = dense_tensor(w, dw, "per_layer_token_embd.weight", 2, DP * DL, DV, -0.5f, 0.5f);
    dw->ple_proj = dense_tensor(w, dw, "per_layer_model_proj.weight", 2, DD, DP * DL, -a, a);
    dw->ple_norm = dense_tensor(w, dw, "per_layer_proj_norm.weight", 1, DP, 1, 0.5f, 1.5f);
    for (int l = 0; l < DL; l++) {
        char nm[96];
        const int d = d_is_swa[l] ? DS : DF, kv = l < DL - DSHARED, F = d_nff[l];
#define T_(suffix, nd, n0, n1, lo, hi) \
    (snprintf(nm, sizeof nm, "blk.%d." suffix, l), dense_tensor(w, dw, nm, nd, n0, n1, lo, hi))
        dw->l[l].attn_norm = T_("attn_norm.weight", 1, DD, 1, 0.5f, 1.5f);
        dw->l[l].wq = T_("attn_q.weight", 2, DD, DH * d, -a, a);
        dw->l[l].q_norm = T_("attn_q_norm.weight", 1, d, 1, 0.2f, 0.6f);
        if (kv) {
            dw->l[l].wk = T_("attn_k.weight", 2, DD, d, -a, a);
            dw->l[l].k_norm = T_("attn_k_norm.weight", 1, d, 1, 0.2f, 0.6f);
            dw->l[l].wv = T_("attn_v.weight", 2, DD, d, -a, a);
        }
        dw->l[l].wo = T_("attn_output.weight", 2, DH * d, DD, -a, a);
        dw->l[l].post_attn = T_("post_attention_norm.weight", 1, DD, 1, 0.5f, 1.5f);
        dw->l[l].ffn_norm = T_("ffn_norm.weight", 1, DD, 1, 0.5f, 1.5f);
        dw->l[l].wg = T_("ffn_gate.weight", 2, DD, F, -a, a);
        dw->l[l].wu = T_("ffn_up.weight", 2, DD, F, -a, a);
        dw->l[l].wd = T_("ffn_down.weight", 2, F, DD, -1.0f / sqrtf((float)F), 1.0f / sqrtf((float)F));
        dw->l[l].post_ffw = T_("post_ffw_norm.weight", 1, DD, 1, 0.5f, 1.5f);
        dw->l[l].inp_gate = T_("inp_gate.weight", 2, DD, DP, -2 * a, 2 * a);
        dw->l[l].proj = T_("proj.weight", 2, DP, DD, -0.25f, 0.25f);
        dw->l[l].post_norm = T_("post_norm.weight", 1, DD, 1, 0.5f, 1.5f);
        dw->l[l].out_scale = T_("layer_output_scale.weight", 1, 1, 1, 0.6f, 1.4f);
#undef T_
    }
    if (vt_gguf_writer_write(w, path) != VT_OK) fail_msg("%s", vt_last_error());
    vt_gguf_writer_free(w);
}

/* ---- the reference: spec formulas, double precision ---- */

static void r_norm(double *x, int n, const float *w)
{
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double k = 1.0 / sqrt(ss / n + 1e-6);
    for (int i = 0; i < n; i++) x[i] = x[i] * k * (w ? w[i] : 1.0);
}

static void r_mv(const float *W, int n_in, int n_out, const double *x, double *y)
{
    for (int o = 0; o < n_out; o++) {
        double s = 0;
        for (int i = 0; i < n_in; i++) s += (double)W[(size_t)o * n_in + i] * x[i];
        y[o] = s;
    }
}

static double r_gelu(double x)
{
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

static void r_rope(double *v, int n, int pos, double base, const float *ff)
{
    for (int i = 0; i < n / 2; i++) {
        double th = pos * pow(base, -2.0 * i / n) / (ff ? (double)ff[i] : 1.0);
        double a = v[i], b = v[i + n / 2];
        v[i] = a * cos(th) - b * sin(th);
        v[i + n / 2] = a * sin(th) + b * cos(th);
    }
}

static void dense_reference(const dense_w *dw, const int32_t *tok, int n, float *logits)
{
    double(*x)[DD] = calloc((size_t)n, sizeof *x);
    double(*ple)[DL * DP] = calloc((size_t)n, sizeof *ple);
    double *K[DL] = {0}, *Vc[DL] = {0}; /* [n][d] per KV layer (one KV head) */
    for (int t = 0; t < n; t++) { /* §5.1, §5.2 */
        for (int i = 0; i < DD; i++) x[t][i] = dw->emb[(size_t)tok[t] * DD + i] * sqrt((double)DD);
        double proj[DL * DP];
        r_mv(dw->ple_proj, DD, DL * DP, x[t], proj);
        for (int l = 0; l < DL; l++) {
            double *sl = proj + l * DP;
            for (int j = 0; j < DP; j++) sl[j] /= sqrt((double)DD);
            r_norm(sl, DP, dw->ple_norm);
            for (int j = 0; j < DP; j++)
                ple[t][l * DP + j] =
                    (sl[j] + dw->ple_emb[(size_t)tok[t] * DL * DP + l * DP + j] * sqrt((double)DP)) /
                    sqrt(2.0);
        }
    }
    for (int l = 0; l < DL; l++) { /* §5.3 */
        const int d = d_is_swa[l] ? DS : DF, kv = l < DL - DSHARED, F = d_nff[l];
        const double base = d_is_swa[l] ? 1e4 : 1e6;
        const float *ff = d_is_swa[l] ? NULL : dw->rope_freqs;
        int src = l;
        if (!kv) /* §5.6 HF rule: last KV layer of the same type */
            for (src = DL - DSHARED - 1; d_is_swa[src] != d_is_swa[l]; src--) {}
        double(*h)[DD] = calloc((size_t)n, sizeof *h);
        double *q = calloc((size_t)n * DH * d, sizeof *q);
        for (int t = 0; t < n; t++) {
            memcpy(h[t], x[t], sizeof h[t]);
            r_norm(h[t], DD, dw->l[l].attn_norm);
            r_mv(dw->l[l].wq, DD, DH * d, h[t], q + (size_t)t * DH * d);
            for (int hh = 0; hh < DH; hh++) {
                r_norm(q + ((size_t)t * DH + hh) * d, d, dw->l[l].q_norm);
                r_rope(q + ((size_t)t * DH + hh) * d, d, t, base, ff);
            }
        }
        if (kv) {
            K[l] = calloc((size_t)n * d, sizeof(double));
            Vc[l] = calloc((size_t)n * d, sizeof(double));
            for (int t = 0; t < n; t++) {
                double *k = K[l] + (size_t)t * d, *v = Vc[l] + (size_t)t * d;
                r_mv(dw->l[l].wk, DD, d, h[t], k);
                r_mv(dw->l[l].wv, DD, d, h[t], v);
                r_norm(v, d, NULL);
                r_norm(k, d, dw->l[l].k_norm);
                r_rope(k, d, t, base, ff);
            }
        }
        double *sc = calloc((size_t)n, sizeof *sc);
        for (int t = 0; t < n; t++) {
            double att[DH * DF], o[DD], r[DD], u[DD], g[128], up[128], f[DD];
            for (int hh = 0; hh < DH; hh++) {
                const double *qq = q + ((size_t)t * DH + hh) * d;
                double mx = -1e300, den = 0;
                for (int p = 0; p <= t; p++) {
                    sc[p] = -1e300;
                    if (d_is_swa[l] && t - p >= DSWA) continue; /* §5.7 */
                    double s = 0;
                    for (int i = 0; i < d; i++) s += qq[i] * K[src][(size_t)p * d + i];
                    sc[p] = s; /* scale 1.0 */
                    if (s > mx) mx = s;
                }
                for (int p = 0; p <= t; p++) den += sc[p] > -1e299 ? exp(sc[p] - mx) : 0;
                for (int i = 0; i < d; i++) {
                    double acc = 0;
                    for (int p = 0; p <= t; p++)
                        if (sc[p] > -1e299) acc += exp(sc[p] - mx) / den * Vc[src][(size_t)p * d + i];
                    att[hh * d + i] = acc;
                }
            }
            r_mv(dw->l[l].wo, DH * d, DD, att, o);
            r_norm(o, DD, dw->l[l].post_attn);
            for (int i = 0; i < DD; i++) r[i] = x[t][i] + o[i];
            memcpy(u, r, sizeof u);
            r_norm(u, DD, dw->l[l].ffn_norm);
            r_mv(dw->l[l].wg, DD, F, u, g);
            r_mv(dw->l[l].wu, DD, F, u, up);
            for (int i = 0; i < F; i++) g[i] = r_gelu(g[i]) * up[i];
            r_mv(dw->l[l].wd, F, DD, g, f);
            r_norm(f, DD, dw->l[l].post_ffw);
            for (int i = 0; i < DD; i++) x[t][i] = r[i] + f[i];
            double pg[DP], y[DD];
            r_mv(dw->l[l].inp_gate, DD, DP, x[t], pg);
            for (int j = 0; j < DP; j++) pg[j] = r_gelu(pg[j]) * ple[t][l * DP + j];
            r_mv(dw->l[l].proj, DP, DD, pg, y);
            r_norm(y, DD, dw->l[l].post_norm);
            for (int i = 0; i < DD; i++) x[t][i] = (x[t][i] + y[i]) * dw->l[l].out_scale[0];
        }
        free(sc);
        free(q);
        free(h);
    }
    for (int t = 0; t < n; t++) { /* §5.5 */
        double z[DV];
        r_norm(x[t], DD, dw->out_norm);
        r_mv(dw->emb, DD, DV, x[t], z);
        for (int v = 0; v < DV; v++) logits[(size_t)t * DV + v] = (float)(30.0 * tanh(z[v] / 30.0));
    }
    for (int l = 0; l < DL; l++) {
        free(K[l]);
        free(Vc[l]);
    }
    free(ple);
    free(x);
}

static void test_dense_variant_vs_spec_reference(void **state)
{
    (void)state;
    if (!ensure()) return; /* the plugins; the model is generated here */
    char path[512];
    snprintf(path, sizeof path, "%s/vt-gemma4-dense-%d.gguf",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    dense_w dw;
    dense_write(path, &dw);
    enum { N = 21 }; /* > 2 x the window of 8 */
    int32_t toks[N];
    for (int i = 0; i < N; i++) toks[i] = (int32_t)((i * 37 + 5) % DV);
    float *ref = malloc((size_t)N * DV * sizeof *ref);
    dense_reference(&dw, toks, N, ref);

    vt_gguf *g = NULL;
    if (vt_gguf_open(path, 0, &g) != VT_OK) fail_msg("%s", vt_last_error());
    const uint32_t batches[] = {32, 5, 1};
    const int chunks[] = {N, 5, 1};
    for (int c = 0; c < 3; c++) {
        const vt_host_api *host = vt_host_table();
        vt_backend be = {cpu, NULL, "cpu"};
        vt_backend_params bp = {sizeof bp, 0, 2, "scalar", host};
        assert_int_equal(cpu->init(&bp, &be.ctx), VT_OK);
        vt_model_params mp = {.struct_size = sizeof mp, .n_ctx = 64, .n_batch = batches[c]};
        vt_model *m = NULL;
        vt_model_seq *s = NULL;
        if (mapi->load(host, g, &be, &mp, &m) != VT_OK) fail_msg("load: %s", vt_last_error());
        assert_int_equal(mapi->seq_new(m, &s), VT_OK);
        float *got = malloc((size_t)N * DV * sizeof *got);
        for (int i = 0; i < N; i += chunks[c]) {
            int k = N - i < chunks[c] ? N - i : chunks[c];
            if (mapi->forward(m, s, toks + i, k, got + (size_t)i * DV, 1) != VT_OK)
                fail_msg("forward: %s", vt_last_error());
        }
        double maxd = 0, maxabs = 0;
        for (size_t i = 0; i < (size_t)N * DV; i++) {
            double dlt = fabs((double)got[i] - (double)ref[i]);
            if (!(dlt <= maxd)) maxd = dlt;
            if (fabs(ref[i]) > maxabs) maxabs = fabs(ref[i]);
        }
        print_message("[gemma4] dense E-style (PLE, shared KV, window 8), chunks of %2d: max |d| "
                      "vs the spec reference %.3g (max |logit| %.3g)\n", chunks[c], maxd, maxabs);
        if (!(maxd <= 1e-3)) fail_msg("dense variant, chunks of %d: max |d| %.4g", chunks[c], maxd);
        free(got);
        mapi->seq_free(m, s);
        mapi->free(m);
        cpu->shutdown(be.ctx);
    }
    vt_gguf_close(g);
    unlink(path);
    free(ref);
    for (int i = 0; i < dw.n_all; i++) free(dw.all[i]);
}

/* The GPU: backend-cuda against transformers, and experts streamed through the
 * device store (device arena, H2D commits) bit-identical to resident on it. */
static void test_cuda(void **state)
{
    (void)state;
    if (!ensure()) return;
    char path[4096];
    snprintf(path, sizeof path, "%s/backend-cuda.so", vt_test_plugin_dir());
    void *hc = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!hc) {
        print_message("SKIP: backend-cuda not built\n");
        skip();
    }
    const vt_backend_api *cuda = ((vt_plugin_entry_fn)dlsym(hc, VT_PLUGIN_ENTRY_SYMBOL))()->table;
    if (cuda->device_count() <= 0) {
        print_message("SKIP: no CUDA device here\n");
        skip();
    }
    void *hs;
    st_api = plugin_table("store-device.so", &hs, VT_PLUGIN_STORE);
    be_api = cuda;
    be_name = "cuda";
    logits_vs_hf("cuda");
    test_streamed_bit_identical(state);
    be_api = NULL;
    st_api = NULL;
    be_name = "cpu";
}

static int teardown(void **state)
{
    (void)state;
    if (gguf) vt_gguf_close(gguf);
    cJSON_Delete(index_json);
    cJSON_Delete(greedy_json);
    if (h_model) dlclose(h_model);
    if (h_cpu) dlclose(h_cpu);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_required_caps),
        cmocka_unit_test(test_logits_scalar),
        cmocka_unit_test(test_logits_auto),
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_chunked_prefill),
        cmocka_unit_test(test_streamed_bit_identical),
        cmocka_unit_test(test_dense_variant_vs_spec_reference),
        cmocka_unit_test(test_cuda),
    };
    return vt_test_exit(cmocka_run_group_tests(tests, NULL, teardown));
}
