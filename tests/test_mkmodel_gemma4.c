/*
 * test_mkmodel_gemma4.c - vt_mkmodel_gemma4 (core/tools/mkmodel.c): generated
 * gemma4 models (spec/gemma4.md) round-trip through the GGUF reader with the
 * keys and tensor shapes the spec tables give (computed here from the
 * parameters, not by the generator); the default shape has the converter-made
 * gemma4-moe-tiny fixture's key set/types and tensor names/shapes; the
 * vocabulary loads in the gemma4 tokenizer (tokenizers.md §5) and round-trips
 * text; MoE (F16, BF16 as 2 shards, Q8_0) and dense E2B-style (F32, Q8_0; per-layer
 * embeddings, shared-KV layers, double-wide MLP, own attn_v) load in the
 * gemma4 plugin through the plugin ABI (dlopen-ed backend-cpu and
 * model-gemma4) and give finite logits; experts streamed through the minimum
 * arena are bit-identical to resident; a sparse 26B-A4B-shaped file has the
 * real tensor table; bad shapes are refused naming the parameter.
 */
#include "test_util.h"

#include <dlfcn.h>
#include <math.h>
#include <sys/stat.h>

#include "error.h"
#include "expert_streamer.h"
#include "mkmodel.h"
#include "registry.h"
#include "tokenizer.h"
#include "vt/backend.h"
#include "vt/gguf.h"
#include "vt/model.h"
#include "vt/store.h"

static char *g_dir;
static void *h_cpu, *h_model;
static const vt_backend_api *cpu;
static const vt_model_api *mapi;

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

static int setup(void **state)
{
    (void)state;
    g_dir = strdup("/tmp/vt-test-mkg4-XXXXXX");
    return g_dir && mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    int rc = system(cmd);
    free(g_dir);
    if (h_model) dlclose(h_model);
    if (h_cpu) dlclose(h_cpu);
    return rc ? -1 : 0;
}

static void plugins(void)
{
    if (mapi) return;
    cpu = plugin_table("backend-cpu.so", &h_cpu, VT_PLUGIN_BACKEND);
    mapi = plugin_table("model-gemma4.so", &h_model, VT_PLUGIN_MODEL);
}

static char *make(const char *name, const vt_mkmodel_params *p)
{
    char *path = vt_test_path(g_dir, name);
    if (vt_mkmodel_gemma4(path, p)) fail_msg("mkmodel %s: %s", path, vt_last_error());
    return path;
}

static vt_gguf *open_path(const char *path)
{
    vt_gguf *g = NULL;
    if (vt_gguf_open(path, 0, &g)) fail_msg("open %s: %s", path, vt_last_error());
    return g;
}

static uint32_t u32_of(const vt_gguf *g, const char *key)
{
    uint32_t v = 0;
    if (vt_gguf_get_u32(g, key, &v)) fail_msg("key %s: %s", key, vt_last_error());
    return v;
}

/* Tensor name must exist with shape ne[0..n) (trailing dims 1) and type. */
static const vt_gguf_tensor *expect(const vt_gguf *g, const char *name, uint32_t type, int n,
                                    int64_t a, int64_t b, int64_t c)
{
    const vt_gguf_tensor *t = vt_gguf_find_tensor(g, name);
    if (!t) fail_msg("tensor %s is missing", name);
    const int64_t want[4] = {a, n > 1 ? b : 1, n > 2 ? c : 1, 1};
    for (int i = 0; i < 4; i++)
        if (t->ne[i] != want[i])
            fail_msg("%s: ne[%d] = %lld, expected %lld", name, i, (long long)t->ne[i],
                     (long long)want[i]);
    if (t->type != type) fail_msg("%s: type %u, expected %u", name, t->type, type);
    return t;
}

/* Every tensor of spec §3 for parameters p, shapes from the §3.2 table. */
static void check_layout(const vt_gguf *g, const vt_mkmodel_params *p, int64_t n_vocab)
{
    const uint32_t wt = p->weight_type, F = VT_TYPE_F32, L = p->n_layer;
    const int64_t D = p->n_embd, P = p->n_per_layer, X = p->n_expert;
    char nm[128];
    size_t count = 0;
    expect(g, "token_embd.weight", wt, 2, D, n_vocab, 1), count++;
    assert_null(vt_gguf_find_tensor(g, "output.weight")); /* tied */
    expect(g, "output_norm.weight", F, 1, D, 1, 1), count++;
    int any_full = 0;
    for (uint32_t il = 0; il < L; il++) any_full |= (il + 1) % p->full_attention_interval == 0;
    if (any_full) {
        const vt_gguf_tensor *rf = expect(g, "rope_freqs.weight", F, 1, p->head_dim / 2, 1, 1);
        count++;
        if (rf->data) {
            const float *v = rf->data;
            for (uint32_t i = 0; i < p->head_dim / 2; i++)
                if (v[i] != (i < p->n_rot / 2 ? 1.0f : 1e30f))
                    fail_msg("rope_freqs[%u] = %g", i, (double)v[i]);
        }
    }
    if (P) {
        expect(g, "per_layer_token_embd.weight", wt, 2, P * L, n_vocab, 1);
        expect(g, "per_layer_model_proj.weight", wt, 2, D, P * L, 1);
        expect(g, "per_layer_proj_norm.weight", F, 1, P, 1, 1);
        count += 3;
    }
    const uint32_t kv_full = p->n_head_kv_full ? p->n_head_kv_full : p->n_head_kv;
    for (uint32_t il = 0; il < L; il++) {
        const int swa = (il + 1) % p->full_attention_interval != 0;
        const int own_kv = il < L - p->shared_kv_layers;
        const int64_t d = swa ? p->head_dim_swa : p->head_dim, H = p->n_head,
                      Hkv = swa ? p->n_head_kv : kv_full;
        const int64_t ff = p->double_wide_mlp && !own_kv ? 2 * (int64_t)p->n_ff : p->n_ff;
#define T(s) (snprintf(nm, sizeof nm, "blk.%u.%s", il, s), count++, nm)
        expect(g, T("attn_norm.weight"), F, 1, D, 1, 1);
        expect(g, T("attn_q.weight"), wt, 2, D, H * d, 1);
        expect(g, T("attn_q_norm.weight"), F, 1, d, 1, 1);
        if (own_kv) {
            expect(g, T("attn_k.weight"), wt, 2, D, Hkv * d, 1);
            expect(g, T("attn_k_norm.weight"), F, 1, d, 1, 1);
            if (swa || !p->k_eq_v) expect(g, T("attn_v.weight"), wt, 2, D, Hkv * d, 1);
        }
        snprintf(nm, sizeof nm, "blk.%u.attn_v.weight", il);
        if (!(own_kv && (swa || !p->k_eq_v))) assert_null(vt_gguf_find_tensor(g, nm));
        expect(g, T("attn_output.weight"), wt, 2, H * d, D, 1);
        expect(g, T("post_attention_norm.weight"), F, 1, D, 1, 1);
        expect(g, T("ffn_norm.weight"), F, 1, D, 1, 1);
        expect(g, T("ffn_gate.weight"), wt, 2, D, ff, 1);
        expect(g, T("ffn_up.weight"), wt, 2, D, ff, 1);
        expect(g, T("ffn_down.weight"), wt, 2, ff, D, 1);
        expect(g, T("post_ffw_norm.weight"), F, 1, D, 1, 1);
        expect(g, T("layer_output_scale.weight"), F, 1, 1, 1, 1);
        if (X) {
            expect(g, T("ffn_gate_inp.weight"), F, 2, D, X, 1);
            expect(g, T("ffn_gate_inp.scale"), F, 1, D, 1, 1);
            expect(g, T("pre_ffw_norm_2.weight"), F, 1, D, 1, 1);
            expect(g, T("post_ffw_norm_1.weight"), F, 1, D, 1, 1);
            expect(g, T("post_ffw_norm_2.weight"), F, 1, D, 1, 1);
            expect(g, T("ffn_gate_up_exps.weight"), wt, 3, D, 2 * (int64_t)p->n_ff_exp, X);
            expect(g, T("ffn_down_exps.weight"), wt, 3, p->n_ff_exp, D, X);
            expect(g, T("ffn_down_exps.scale"), F, 1, X, 1, 1);
        }
        if (P) {
            expect(g, T("inp_gate.weight"), wt, 2, D, P, 1);
            expect(g, T("proj.weight"), wt, 2, P, D, 1);
            expect(g, T("post_norm.weight"), F, 1, D, 1, 1);
        }
#undef T
    }
    assert_int_equal(vt_gguf_n_tensors(g), (int64_t)count);
    /* §2 keys */
    assert_int_equal(u32_of(g, "gemma4.block_count"), L);
    assert_int_equal(u32_of(g, "gemma4.embedding_length"), p->n_embd);
    assert_int_equal(u32_of(g, "gemma4.attention.key_length"), p->head_dim);
    assert_int_equal(u32_of(g, "gemma4.attention.key_length_swa"), p->head_dim_swa);
    assert_int_equal(u32_of(g, "gemma4.attention.sliding_window"), p->sliding_window);
    assert_int_equal(u32_of(g, "gemma4.attention.shared_kv_layers"), p->shared_kv_layers);
    assert_int_equal(u32_of(g, "gemma4.embedding_length_per_layer_input"), p->n_per_layer);
    vt_gguf_type et;
    uint64_t cnt;
    const void *data;
    assert_int_equal(vt_gguf_get_arr(g, "gemma4.attention.sliding_window_pattern", &et, &cnt,
                                     &data), VT_OK);
    assert_int_equal(et, VT_GGUF_BOOL);
    assert_int_equal(cnt, L);
    for (uint32_t il = 0; il < L; il++)
        assert_int_equal(((const uint8_t *)data)[il], (il + 1) % p->full_attention_interval != 0);
    if (kv_full != p->n_head_kv) { /* an INT32 array, as the converter writes it */
        assert_int_equal(vt_gguf_get_arr(g, "gemma4.attention.head_count_kv", &et, &cnt, &data),
                         VT_OK);
        assert_int_equal(et, VT_GGUF_INT32);
        for (uint32_t il = 0; il < L; il++)
            assert_int_equal(((const int32_t *)data)[il],
                             (il + 1) % p->full_attention_interval ? p->n_head_kv : kv_full);
    } else {
        assert_int_equal(u32_of(g, "gemma4.attention.head_count_kv"), p->n_head_kv);
    }
    if (X) {
        assert_int_equal(u32_of(g, "gemma4.expert_count"), X);
        assert_int_equal(u32_of(g, "gemma4.expert_used_count"), p->n_expert_used);
    } else {
        uint32_t v;
        assert_int_equal(vt_gguf_get_u32(g, "gemma4.expert_count", &v), VT_ERR_NOT_FOUND);
    }
}

/* ---------------------------------------------------------------- plugin rig */

typedef struct rig {
    vt_backend be;
    vt_model *m;
    vt_model_seq *s;
    vt_model_info info;
    vt_store *store;
    vt_expert_streamer *streamer;
} rig;

static void rig_open(rig *r, const vt_gguf *g, uint32_t n_layer, int streamed)
{
    plugins();
    memset(r, 0, sizeof *r);
    const vt_host_api *host = vt_host_table();
    vt_backend_params bp = {sizeof bp, 0, 2, "scalar", host};
    if (cpu->init(&bp, &r->be.ctx) != VT_OK) fail_msg("cpu init: %s", vt_last_error());
    r->be.api = cpu;
    r->be.name = "cpu";
    vt_model_params mp = {.struct_size = sizeof mp, .n_ctx = 64, .n_batch = 16};
    if (streamed) { /* the minimum arena: top-k experts x 2 matrices (gate_up, down) */
        uint32_t k = 0;
        assert_int_equal(vt_gguf_get_u32(g, "gemma4.expert_used_count", &k), VT_OK);
        const vt_gguf_tensor *gu = vt_gguf_find_tensor(g, "blk.0.ffn_gate_up_exps.weight");
        assert_non_null(gu);
        uint64_t slot_bytes = gu->nbytes / (uint64_t)gu->ne[2], n_slots = 2ull * k;
        const vt_store_api *sa = vt_host_store_api();
        vt_store_params sp = {.struct_size = sizeof sp, .host = host, .backend = &r->be,
                              .slot_bytes = slot_bytes, .n_slots = n_slots};
        if (sa->create(&sp, &r->store) != VT_OK) fail_msg("host store: %s", vt_last_error());
        vt_streamer_params p = {.gguf = g, .store_api = sa, .store = r->store,
                                .n_slots = n_slots, .slot_bytes = slot_bytes, .n_layer = n_layer};
        if (vt_streamer_create(&p, &r->streamer) != VT_OK) fail_msg("%s", vt_last_error());
        mp.experts = r->streamer;
    }
    if (mapi->load(host, g, &r->be, &mp, &r->m) != VT_OK)
        fail_msg("gemma4 load: %s", vt_last_error());
    if (mapi->seq_new(r->m, &r->s) != VT_OK) fail_msg("seq_new: %s", vt_last_error());
    r->info.struct_size = sizeof r->info;
    mapi->info(r->m, &r->info);
}

static void rig_close(rig *r)
{
    mapi->seq_free(r->m, r->s);
    mapi->free(r->m);
    if (r->streamer) vt_streamer_destroy(r->streamer);
    if (r->store) vt_host_store_api()->destroy(r->store);
    r->be.api->shutdown(r->be.ctx);
}

/* Logits of every position of toks[0..n), prefill in chunks of `chunk`; all finite. */
static float *run(rig *r, const int32_t *toks, int n, int chunk)
{
    assert_int_equal(mapi->seq_reset(r->m, r->s), VT_OK);
    const size_t V = (size_t)r->info.n_vocab;
    float *out = malloc((size_t)n * V * sizeof *out);
    assert_non_null(out);
    for (int i = 0; i < n; i += chunk) {
        int k = n - i < chunk ? n - i : chunk;
        if (mapi->forward(r->m, r->s, toks + i, k, out + (size_t)i * V, 1) != VT_OK)
            fail_msg("forward at %d: %s", i, vt_last_error());
    }
    for (size_t i = 0; i < (size_t)n * V; i++)
        if (!isfinite(out[i])) fail_msg("logit %zu is %g", i, (double)out[i]);
    /* the final softcap (§5) bounds every logit by 30 */
    for (size_t i = 0; i < (size_t)n * V; i++) assert_true(fabsf(out[i]) <= 30.0f);
    return out;
}

/* Tokenize a sentence with the file's own tokenizer, load, run, finite logits. */
static void runs_in_plugin(const char *path, uint32_t n_layer, const char *what)
{
    vt_gguf *g = open_path(path);
    vt_tokenizer *tok = NULL;
    if (vt_tokenizer_load(g, &tok)) fail_msg("tokenizer: %s", vt_last_error());
    int32_t *ids = NULL;
    int64_t n = 0;
    assert_int_equal(vt_tokenize(tok, "The river runs past the old mill.", 33, 1, 0, &ids, &n),
                     VT_OK);
    assert_true(n >= 3 && ids[0] == 2); /* BOS */
    rig r;
    rig_open(&r, g, n_layer, 0);
    assert_int_equal(r.info.n_vocab, vt_tokenizer_n_vocab(tok));
    float *a = run(&r, ids, (int)n, (int)n);
    float *b = run(&r, ids, (int)n, 1); /* token by token: the same within float noise */
    double d = 0;
    for (size_t i = 0; i < (size_t)n * (size_t)r.info.n_vocab; i++) {
        double x = fabs((double)a[i] - (double)b[i]);
        if (!(x <= d)) d = x;
    }
    print_message("[mkmodel gemma4] %-34s %lld tokens, n_vocab %lld, one chunk vs token by "
                  "token max |d| %.3g\n", what, (long long)n, (long long)r.info.n_vocab, d);
    if (!(d <= 1e-3)) fail_msg("%s: chunked vs token-by-token max |d| %g", what, d);
    free(a);
    free(b);
    rig_close(&r);
    free(ids);
    vt_tokenizer_free(tok);
    vt_gguf_close(g);
}

/* ---------------------------------------------------------------- tests */

/* Default (the fixture's shape) in F16: layout, and the fixture's key set and tensor table. */
static void test_default_layout_and_fixture(void **state)
{
    (void)state;
    vt_mkmodel_params p;
    vt_mkmodel_defaults_gemma4(&p);
    p.weight_type = VT_TYPE_F16;
    p.n_vocab = 4096; /* the fixture's vocabulary size */
    char *path = make("default-f16.gguf", &p);
    vt_gguf *g = open_path(path);
    check_layout(g, &p, 4096);
    runs_in_plugin(path, p.n_layer, "default MoE f16");
    const char *fx = vt_test_fixtures();
    if (fx) {
        char *fp = vt_test_path(fx, "gemma4-moe-tiny/gguf/gemma4-moe-tiny-f16.gguf");
        vt_gguf *f = open_path(fp);
        assert_int_equal(vt_gguf_n_tensors(f), vt_gguf_n_tensors(g));
        for (int64_t i = 0; i < vt_gguf_n_tensors(f); i++) {
            const vt_gguf_tensor *a = vt_gguf_tensor_at(f, i);
            const vt_gguf_tensor *b = vt_gguf_find_tensor(g, a->name);
            if (!b) fail_msg("fixture tensor %s is not generated", a->name);
            assert_int_equal(a->type, b->type);
            for (int k = 0; k < 4; k++) assert_int_equal(a->ne[k], b->ne[k]);
            /* same order as the converter */
            assert_string_equal(vt_gguf_tensor_at(g, i)->name, a->name);
        }
        for (int64_t i = 0; i < vt_gguf_n_kv(f); i++) {
            const char *k = vt_gguf_kv_key(f, i);
            if (!strcmp(k, "general.size_label")) continue;
            int64_t j = vt_gguf_find_key(g, k);
            if (j < 0) fail_msg("fixture key %s is not generated", k);
            assert_int_equal(vt_gguf_kv_type(f, i), vt_gguf_kv_type(g, j));
        }
        print_message("[mkmodel gemma4] default shape: fixture's %lld tensors and keys match\n",
                      (long long)vt_gguf_n_tensors(f));
        vt_gguf_close(f);
        free(fp);
    }
    vt_gguf_close(g);
    free(path);
}

/* The gemma4 vocabulary: specials at the real ids, byte tokens, merges; text round-trips. */
static void test_tokenizer(void **state)
{
    (void)state;
    vt_mkmodel_params p;
    vt_mkmodel_defaults_gemma4(&p);
    p.n_layer = 2;
    p.n_vocab = 1000;
    char *path = make("tok.gguf", &p);
    vt_gguf *g = open_path(path);
    vt_tokenizer *tok = NULL;
    if (vt_tokenizer_load(g, &tok)) fail_msg("tokenizer: %s", vt_last_error());
    assert_string_equal(vt_tokenizer_model(tok), "gemma4");
    assert_int_equal(vt_tokenizer_n_vocab(tok), 1000);
    assert_int_equal(vt_tokenizer_bos(tok), 2);
    assert_int_equal(vt_tokenizer_eos(tok), 1);
    assert_int_equal(vt_tokenizer_find(tok, "<turn|>"), 6);
    assert_true(vt_tokenizer_is_eog(tok, 1) && vt_tokenizer_is_eog(tok, 6));
    assert_int_equal(vt_tokenizer_find(tok, "<|tool_response>"), 14);
    assert_int_equal(vt_tokenizer_token_type(tok, 14), 4);
    assert_int_equal(vt_tokenizer_token_type(tok, vt_tokenizer_find(tok, "<0x0A>")), 6);
    assert_true(vt_tokenizer_find(tok, "\xe2\x96\x81the") > 0); /* "▁the" was learned */
    const char *text = "The river runs past the old mill.\nHello, world! 42 \xc3\xa9t\xc3\xa9";
    int32_t *ids = NULL;
    int64_t n = 0;
    assert_int_equal(vt_tokenize(tok, text, strlen(text), 0, 0, &ids, &n), VT_OK);
    assert_true(n > 0 && n < (int64_t)strlen(text)); /* merges shortened it */
    char out[256] = "";
    size_t used = 0;
    for (int64_t i = 0; i < n; i++) {
        assert_true(ids[i] >= 0 && ids[i] < 1000);
        int64_t k = vt_token_to_piece(tok, ids[i], 0, out + used, sizeof out - used);
        assert_true(k >= 0 && used + (size_t)k < sizeof out);
        used += (size_t)k;
    }
    out[used] = 0;
    assert_string_equal(out, text); /* "é" went through the <0xHH> byte fallback */
    free(ids);
    assert_int_equal(vt_tokenize(tok, "<|turn>user\nhi", 14, 1, 1, &ids, &n), VT_OK);
    assert_true(n >= 3 && ids[0] == 2 && ids[1] == 5);
    free(ids);
    vt_tokenizer_free(tok);
    vt_gguf_close(g);
    free(path);
}

/* MoE in BF16 as 2 shards, and in Q8_0 with another shape: layout and plugin. */
static void test_moe_types_and_shards(void **state)
{
    (void)state;
    vt_mkmodel_params p;
    vt_mkmodel_defaults_gemma4(&p);
    p.n_shards = 2;
    char *path = make("moe-bf16.gguf", &p);
    char *first = vt_test_path(g_dir, "moe-bf16-00001-of-00002.gguf");
    char *second = vt_test_path(g_dir, "moe-bf16-00002-of-00002.gguf");
    struct stat sb;
    assert_int_equal(stat(second, &sb), 0);
    assert_int_not_equal(stat(path, &sb), 0); /* only the shards */
    vt_gguf *g = open_path(first);
    check_layout(g, &p, vt_gguf_find_tensor(g, "token_embd.weight")->ne[1]);
    vt_gguf_close(g);
    runs_in_plugin(first, p.n_layer, "MoE bf16, 2 shards");
    free(path);
    free(first);
    free(second);

    vt_mkmodel_defaults_gemma4(&p);
    p.weight_type = VT_TYPE_Q8_0;
    p.n_layer = 6;
    p.full_attention_interval = 3;
    p.n_expert = 4;
    p.n_expert_used = 3;
    p.n_ff_exp = 96;
    p.n_ff = 160;
    p.k_eq_v = 0;
    p.n_head_kv_full = 0;
    p.sliding_window = 4;
    path = make("moe-q8.gguf", &p);
    g = open_path(path);
    check_layout(g, &p, vt_gguf_find_tensor(g, "token_embd.weight")->ne[1]);
    vt_gguf_close(g);
    runs_in_plugin(path, p.n_layer, "MoE q8_0, 6 layers, window 4");
    free(path);
}

/* Dense E2B-style: per-layer embeddings, shared-KV layers, double-wide MLP, own attn_v. */
static void test_dense_e2b_style(void **state)
{
    (void)state;
    vt_mkmodel_params p;
    vt_mkmodel_defaults_gemma4(&p);
    p.n_expert = 0;
    p.full_attention_interval = 5; /* S,S,S,S,F as E2B */
    p.n_layer = 10;                /* two groups */
    p.shared_kv_layers = 4;        /* owners 0..5 */
    p.double_wide_mlp = 1;
    p.n_per_layer = 32;
    p.n_head_kv = 1;
    p.n_head_kv_full = 1;
    p.k_eq_v = 0;
    p.sliding_window = 8;
    const uint32_t types[] = {VT_TYPE_F32, VT_TYPE_Q8_0};
    for (int i = 0; i < 2; i++) {
        p.weight_type = types[i];
        char name[64];
        snprintf(name, sizeof name, "dense-%d.gguf", i);
        char *path = make(name, &p);
        vt_gguf *g = open_path(path);
        check_layout(g, &p, vt_gguf_find_tensor(g, "token_embd.weight")->ne[1]);
        vt_gguf_type et;
        uint64_t cnt;
        const void *data;
        assert_int_equal(vt_gguf_get_arr(g, "gemma4.feed_forward_length", &et, &cnt, &data), VT_OK);
        assert_int_equal(cnt, 10);
        assert_int_equal(((const int32_t *)data)[5], 256);
        assert_int_equal(((const int32_t *)data)[6], 512);
        vt_gguf_close(g);
        runs_in_plugin(path, p.n_layer, i ? "dense E2B-style q8_0" : "dense E2B-style f32");
        free(path);
    }
}

/* Experts streamed through the minimum arena vs resident: bit-identical logits. */
static void test_streamed_bit_identical(void **state)
{
    (void)state;
    vt_mkmodel_params p;
    vt_mkmodel_defaults_gemma4(&p);
    p.n_shards = 2;
    p.seed = 99;
    char *path = make("stream.gguf", &p);
    char *first = vt_test_path(g_dir, "stream-00001-of-00002.gguf");
    vt_gguf *g = open_path(first);
    int32_t toks[24];
    for (int i = 0; i < 24; i++) toks[i] = (int32_t)(2 + (i * 37) % 700);
    for (int c = 0; c < 2; c++) {
        const int chunk = c ? 1 : 16;
        rig a, b;
        rig_open(&a, g, p.n_layer, 0);
        rig_open(&b, g, p.n_layer, 1);
        float *la = run(&a, toks, 24, chunk), *lb = run(&b, toks, 24, chunk);
        const size_t cnt = 24 * (size_t)a.info.n_vocab;
        if (memcmp(la, lb, cnt * sizeof *la)) {
            size_t i = 0;
            while (la[i] == lb[i]) i++;
            fail_msg("streamed logits differ from resident at %zu: %.9g vs %.9g", i, lb[i], la[i]);
        }
        vt_expert_stats st;
        assert_int_equal(vt_streamer_stats(b.streamer, -1, &st), VT_OK);
        print_message("[mkmodel gemma4] streamed (chunks of %d): bit-identical; %llu hits, %llu "
                      "misses, %llu evictions\n", chunk, (unsigned long long)st.hits,
                      (unsigned long long)st.misses, (unsigned long long)st.evictions);
        if (st.misses == 0 || st.evictions == 0) fail_msg("the streamer was bypassed");
        free(la);
        free(lb);
        rig_close(&a);
        rig_close(&b);
    }
    vt_gguf_close(g);
    free(path);
    free(first);
}

/* A sparse file with the 26B-A4B tensor table (spec §2.1, §3.3) at no disk cost. */
static void test_sparse_26b_shape(void **state)
{
    (void)state;
    vt_mkmodel_params p;
    vt_mkmodel_defaults_gemma4(&p);
    p.sparse = 1;
    p.n_embd = 2816;
    p.n_layer = 30;
    p.full_attention_interval = 6;
    p.n_head = 16;
    p.n_head_kv = 8;
    p.n_head_kv_full = 2;
    p.head_dim = 512;
    p.head_dim_swa = 256;
    p.n_rot = 128;
    p.n_expert = 128;
    p.n_expert_used = 8;
    p.n_ff_exp = 704;
    p.n_ff = 2112;
    p.sliding_window = 1024;
    p.context_length = 262144;
    p.n_vocab = 262144;
    char *path = make("sparse-26b.gguf", &p);
    vt_gguf *g = open_path(path);
    check_layout(g, &p, 262144);
    const vt_gguf_tensor *q5 = expect(g, "blk.5.attn_q.weight", VT_TYPE_BF16, 2, 2816, 8192, 1);
    (void)q5;
    expect(g, "blk.0.attn_k.weight", VT_TYPE_BF16, 2, 2816, 2048, 1);
    expect(g, "blk.5.attn_k.weight", VT_TYPE_BF16, 2, 2816, 1024, 1);
    expect(g, "blk.0.ffn_gate_up_exps.weight", VT_TYPE_BF16, 3, 2816, 1408, 128);
    uint64_t total = 0;
    for (int64_t i = 0; i < vt_gguf_n_tensors(g); i++) total += vt_gguf_tensor_at(g, i)->nbytes;
    print_message("[mkmodel gemma4] sparse 26B-A4B shape: %lld tensors, %.2f GiB of weights\n",
                  (long long)vt_gguf_n_tensors(g), total / 1073741824.0);
    /* about 25.2e9 parameters (the published total of 26B-A4B's text decoder) in BF16 */
    assert_true(total / 2 > 24.5e9 && total / 2 < 26.0e9);
    plugins();
    uint32_t ids[64], n = 0;
    if (mapi->required_caps(vt_host_table(), g, ids, 64, &n) != VT_OK)
        fail_msg("required_caps: %s", vt_last_error());
    assert_true(n > 0);
    vt_gguf_close(g);
    free(path);
}

static void test_bad_params(void **state)
{
    (void)state;
    char *path = vt_test_path(g_dir, "bad.gguf");
    vt_mkmodel_params p;
    vt_mkmodel_defaults_gemma4(&p);
    p.weight_type = VT_TYPE_Q8_0;
    p.n_ff = 48;
    assert_int_equal(vt_mkmodel_gemma4(path, &p), VT_ERR_INVALID_ARG);
    assert_non_null(strstr(vt_last_error(), "n_ff"));
    vt_mkmodel_defaults_gemma4(&p);
    p.shared_kv_layers = 3; /* only layer 0 (S) owns a cache: F layers 1, 3 have no source */
    assert_int_equal(vt_mkmodel_gemma4(path, &p), VT_ERR_INVALID_ARG);
    assert_non_null(strstr(vt_last_error(), "shared-KV layer"));
    vt_mkmodel_defaults_gemma4(&p);
    p.n_head_kv_full = 3;
    assert_int_equal(vt_mkmodel_gemma4(path, &p), VT_ERR_INVALID_ARG);
    assert_non_null(strstr(vt_last_error(), "n_head_kv_full"));
    struct stat sb;
    assert_int_not_equal(stat(path, &sb), 0);
    free(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_layout_and_fixture),
        cmocka_unit_test(test_tokenizer),
        cmocka_unit_test(test_moe_types_and_shards),
        cmocka_unit_test(test_dense_e2b_style),
        cmocka_unit_test(test_streamed_bit_identical),
        cmocka_unit_test(test_sparse_26b_shape),
        cmocka_unit_test(test_bad_params),
    };
    return vt_test_exit(cmocka_run_group_tests(tests, setup, teardown));
}
