/*
 * test_gguf_mkmodel.c - the demo-model generator (mkmodel.h): the written file
 * opens, has every qwen35moe key of spec §3 and every tensor of §4 with the
 * shapes the spec tables give (computed here, not by the generator), the same
 * key set/types and tensor set/shapes as the converter-made fixture, sane
 * weights, a well-formed byte-level BPE vocabulary, is deterministic, and
 * loads in the tokenizer and (through the engine) in the model plugin.
 */
#include <math.h>
#include <stdbool.h>

#include "test_util.h"

#include "engine.h"
#include "error.h"
#include "mkmodel.h"
#include "tokenizer.h"
#include "vt/gguf.h"
#include "vt/types.h"

static char *g_dir;

static int setup(void **state)
{
    (void)state;
    g_dir = strdup("/tmp/vt-test-mkmodel-XXXXXX");
    return g_dir && mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    int rc = system(cmd);
    free(g_dir);
    return rc ? -1 : 0;
}

static char *make(const char *name, const vt_mkmodel_params *p)
{
    char *path = vt_test_path(g_dir, name);
    vt_status st = vt_mkmodel_qwen35moe(path, p);
    if (st) fail_msg("mkmodel %s: %s", path, vt_last_error());
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

/* GPT-2 byte symbol of b (tokenizers.md §4.1), from the explicit list of the 68 remapped bytes. */
static void gpt2_symbol(unsigned b, char *out)
{
    unsigned cp = b, k = 0;
    bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    if (!printable) {
        if (b <= 32) k = b;                  /* 0x00..0x20 -> 0..32 */
        else if (b <= 160) k = 33 + b - 127; /* 0x7F..0xA0 -> 33..66 */
        else k = 67;                         /* 0xAD */
        cp = 256 + k;
    }
    if (cp < 128) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 63));
        out[2] = 0;
    }
}

typedef struct expect_t {
    char name[64];
    uint32_t n_dims;
    int64_t ne[3];
    bool f32; /* always F32 (else the chosen weight type) */
} expect_t;

/* The tensor list of spec §4 for parameters p and vocabulary n_vocab. */
static int expected_tensors(const vt_mkmodel_params *p, int64_t n_vocab, expect_t *e)
{
    int n = 0;
    const int64_t E = p->n_embd, kd = p->ssm_n_k * p->ssm_d_k, vd = p->ssm_n_v * p->ssm_d_k;
#define T(nd, a, b, c, isf, ...)                                                                    \
    do {                                                                                           \
        snprintf(e[n].name, sizeof e[n].name, __VA_ARGS__);                                        \
        e[n].n_dims = nd;                                                                          \
        e[n].ne[0] = a;                                                                            \
        e[n].ne[1] = b;                                                                            \
        e[n].ne[2] = c;                                                                            \
        e[n].f32 = isf;                                                                            \
        n++;                                                                                       \
    } while (0)
    T(2, E, n_vocab, 1, false, "token_embd.weight");
    T(2, E, n_vocab, 1, false, "output.weight");
    T(1, E, 1, 1, true, "output_norm.weight");
    for (uint32_t il = 0; il < p->n_layer; il++) {
        T(1, E, 1, 1, true, "blk.%u.attn_norm.weight", il);
        T(1, E, 1, 1, true, "blk.%u.post_attention_norm.weight", il);
        if ((il + 1) % 4 == 0) {
            T(2, E, 2 * p->n_head * p->head_dim, 1, false, "blk.%u.attn_q.weight", il);
            T(2, E, p->n_head_kv * p->head_dim, 1, false, "blk.%u.attn_k.weight", il);
            T(2, E, p->n_head_kv * p->head_dim, 1, false, "blk.%u.attn_v.weight", il);
            T(2, p->n_head * p->head_dim, E, 1, false, "blk.%u.attn_output.weight", il);
            T(1, p->head_dim, 1, 1, true, "blk.%u.attn_q_norm.weight", il);
            T(1, p->head_dim, 1, 1, true, "blk.%u.attn_k_norm.weight", il);
        } else {
            T(2, E, 2 * kd + vd, 1, false, "blk.%u.attn_qkv.weight", il);
            T(2, E, vd, 1, false, "blk.%u.attn_gate.weight", il);
            T(2, p->ssm_d_conv, 2 * kd + vd, 1, true, "blk.%u.ssm_conv1d.weight", il);
            T(1, p->ssm_n_v, 1, 1, true, "blk.%u.ssm_dt.bias", il);
            T(1, p->ssm_n_v, 1, 1, true, "blk.%u.ssm_a", il);
            T(2, E, p->ssm_n_v, 1, false, "blk.%u.ssm_beta.weight", il);
            T(2, E, p->ssm_n_v, 1, false, "blk.%u.ssm_alpha.weight", il);
            T(1, p->ssm_d_k, 1, 1, true, "blk.%u.ssm_norm.weight", il);
            T(2, vd, E, 1, false, "blk.%u.ssm_out.weight", il);
        }
        T(2, E, p->n_expert, 1, true, "blk.%u.ffn_gate_inp.weight", il);
        T(3, E, p->n_ff_exp, p->n_expert, false, "blk.%u.ffn_gate_exps.weight", il);
        T(3, E, p->n_ff_exp, p->n_expert, false, "blk.%u.ffn_up_exps.weight", il);
        T(3, p->n_ff_exp, E, p->n_expert, false, "blk.%u.ffn_down_exps.weight", il);
        T(1, E, 1, 1, true, "blk.%u.ffn_gate_inp_shexp.weight", il);
        T(2, E, p->n_ff_shexp, 1, false, "blk.%u.ffn_gate_shexp.weight", il);
        T(2, E, p->n_ff_shexp, 1, false, "blk.%u.ffn_up_shexp.weight", il);
        T(2, p->n_ff_shexp, E, 1, false, "blk.%u.ffn_down_shexp.weight", il);
    }
#undef T
    return n;
}

static float value_at(const vt_gguf_tensor *t, uint64_t i)
{
    if (t->type == VT_TYPE_F32) return ((const float *)t->data)[i];
    uint32_t u = (uint32_t)((const uint16_t *)t->data)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void stats(const vt_gguf_tensor *t, double *mean, double *std, float *mn, float *mx)
{
    uint64_t n = (uint64_t)t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    double s = 0, s2 = 0;
    *mn = INFINITY;
    *mx = -INFINITY;
    for (uint64_t i = 0; i < n; i++) {
        float v = value_at(t, i);
        assert_true(isfinite(v));
        s += v;
        s2 += (double)v * v;
        if (v < *mn) *mn = v;
        if (v > *mx) *mx = v;
    }
    *mean = s / (double)n;
    *std = sqrt(s2 / (double)n - *mean * *mean);
}

static void check_model(const char *path, const vt_mkmodel_params *p)
{
    vt_gguf *g = open_path(path);
    vt_gguf_str s;
    assert_int_equal(vt_gguf_get_str(g, "general.architecture", &s), VT_OK);
    assert_string_equal(s.ptr, "qwen35moe");
    /* §3 keys */
    assert_int_equal(u32_of(g, "qwen35moe.block_count"), p->n_layer);
    assert_int_equal(u32_of(g, "qwen35moe.embedding_length"), p->n_embd);
    assert_int_equal(u32_of(g, "qwen35moe.context_length"), p->context_length);
    assert_int_equal(u32_of(g, "qwen35moe.attention.head_count"), p->n_head);
    assert_int_equal(u32_of(g, "qwen35moe.attention.head_count_kv"), p->n_head_kv);
    assert_int_equal(u32_of(g, "qwen35moe.attention.key_length"), p->head_dim);
    assert_int_equal(u32_of(g, "qwen35moe.attention.value_length"), p->head_dim);
    assert_int_equal(u32_of(g, "qwen35moe.rope.dimension_count"), p->n_rot);
    assert_int_equal(u32_of(g, "qwen35moe.expert_count"), p->n_expert);
    assert_int_equal(u32_of(g, "qwen35moe.expert_used_count"), p->n_expert_used);
    assert_int_equal(u32_of(g, "qwen35moe.expert_feed_forward_length"), p->n_ff_exp);
    assert_int_equal(u32_of(g, "qwen35moe.expert_shared_feed_forward_length"), p->n_ff_shexp);
    assert_int_equal(u32_of(g, "qwen35moe.ssm.conv_kernel"), p->ssm_d_conv);
    assert_int_equal(u32_of(g, "qwen35moe.ssm.state_size"), p->ssm_d_k);
    assert_int_equal(u32_of(g, "qwen35moe.ssm.group_count"), p->ssm_n_k);
    assert_int_equal(u32_of(g, "qwen35moe.ssm.time_step_rank"), p->ssm_n_v);
    assert_int_equal(u32_of(g, "qwen35moe.ssm.inner_size"), p->ssm_n_v * p->ssm_d_k);
    assert_int_equal(u32_of(g, "qwen35moe.full_attention_interval"), 4);
    assert_int_equal(u32_of(g, "general.file_type"), p->weight_type == VT_TYPE_F32 ? 0 : 32);
    float eps;
    assert_int_equal(vt_gguf_get_f32(g, "qwen35moe.attention.layer_norm_rms_epsilon", &eps), VT_OK);
    assert_true(eps > 0 && eps < 1e-4f);
    vt_gguf_type et;
    uint64_t n;
    const void *data;
    assert_int_equal(vt_gguf_get_arr(g, "qwen35moe.rope.dimension_sections", &et, &n, &data),
                     VT_OK);
    assert_int_equal(et, VT_GGUF_INT32);
    assert_int_equal(n, 4);
    const int32_t *sec = data;
    assert_int_equal(sec[0] + sec[1] + sec[2] + sec[3], (int32_t)p->n_rot / 2);

    /* tokenizer */
    assert_int_equal(vt_gguf_get_str(g, "tokenizer.ggml.model", &s), VT_OK);
    assert_string_equal(s.ptr, "gpt2");
    assert_int_equal(vt_gguf_get_str(g, "tokenizer.ggml.pre", &s), VT_OK);
    assert_string_equal(s.ptr, "qwen35");
    uint64_t n_vocab, n_merges, n_types;
    assert_int_equal(vt_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n_vocab, NULL), VT_OK);
    assert_int_equal(et, VT_GGUF_STRING);
    assert_int_equal(vt_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n_merges, NULL), VT_OK);
    assert_int_equal(et, VT_GGUF_STRING);
    assert_true(n_merges >= 200 && n_merges <= p->n_merges);
    assert_true(n_vocab <= 256 + n_merges + 3 && n_vocab > 256 + 3);
    assert_int_equal(vt_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &n_types, &data), VT_OK);
    assert_int_equal(et, VT_GGUF_INT32);
    assert_int_equal(n_types, n_vocab);
    const int32_t *types = data;
    for (unsigned b = 0; b < 256; b++) {
        char sym[4];
        gpt2_symbol(b, sym);
        assert_int_equal(vt_gguf_get_arr_str(g, "tokenizer.ggml.tokens", b, &s), VT_OK);
        if (strcmp(s.ptr, sym)) fail_msg("token %u is '%s', expected byte symbol '%s'", b, s.ptr, sym);
        assert_int_equal(types[b], 1);
    }
    const char *special[3] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    for (int k = 0; k < 3; k++) {
        assert_int_equal(vt_gguf_get_arr_str(g, "tokenizer.ggml.tokens", n_vocab - 3 + (uint64_t)k, &s),
                         VT_OK);
        assert_string_equal(s.ptr, special[k]);
        assert_int_equal(types[n_vocab - 3 + (uint64_t)k], 3);
    }
    assert_int_equal(u32_of(g, "tokenizer.ggml.eos_token_id"), n_vocab - 1);
    assert_int_equal(u32_of(g, "tokenizer.ggml.padding_token_id"), n_vocab - 3);
    /* every merge "A B": A, B and AB are tokens (AB may coincide with an older token) */
    for (uint64_t m = 0; m < n_merges; m++) {
        assert_int_equal(vt_gguf_get_arr_str(g, "tokenizer.ggml.merges", m, &s), VT_OK);
        const char *sp = strchr(s.ptr + 1, ' ');
        assert_non_null(sp);
        char a[128], b[128], ab[256];
        snprintf(a, sizeof a, "%.*s", (int)(sp - s.ptr), s.ptr);
        snprintf(b, sizeof b, "%s", sp + 1);
        snprintf(ab, sizeof ab, "%s%s", a, b);
        bool fa = false, fb = false, fab = false;
        for (uint64_t t = 0; t < n_vocab - 3; t++) {
            vt_gguf_str ts;
            assert_int_equal(vt_gguf_get_arr_str(g, "tokenizer.ggml.tokens", t, &ts), VT_OK);
            fa |= !strcmp(ts.ptr, a);
            fb |= !strcmp(ts.ptr, b);
            fab |= !strcmp(ts.ptr, ab);
        }
        if (!fa || !fb || !fab) fail_msg("merge %llu '%s': parts or result not in the vocabulary",
                                         (unsigned long long)m, s.ptr);
    }
    assert_int_equal(vt_gguf_find_key(g, "tokenizer.chat_template") >= 0, 1);

    /* §4 tensors */
    expect_t e[256];
    int ne = expected_tensors(p, (int64_t)n_vocab, e);
    assert_int_equal(vt_gguf_n_tensors(g), ne);
    for (int i = 0; i < ne; i++) {
        const vt_gguf_tensor *t = vt_gguf_find_tensor(g, e[i].name);
        if (!t) fail_msg("tensor %s missing", e[i].name);
        for (int d = 0; d < 3; d++)
            if (t->ne[d] != e[i].ne[d])
                fail_msg("tensor %s: ne[%d] = %lld, expected %lld", e[i].name, d,
                         (long long)t->ne[d], (long long)e[i].ne[d]);
        assert_int_equal(t->ne[3], 1);
        assert_int_equal(t->type, e[i].f32 ? VT_TYPE_F32 : p->weight_type);
        double mean, std;
        float mn, mx;
        stats(t, &mean, &std, &mn, &mx);
        if (strstr(e[i].name, "norm.weight")) { /* +1 baked in: around 1 */
            assert_true(mean > 0.9 && mean < 1.1);
            assert_true(mn > 0.5f);
        } else if (strlen(e[i].name) > 5 && !strcmp(e[i].name + strlen(e[i].name) - 5, "ssm_a")) {
            assert_true(mx < 0.0f);
        } else if (e[i].n_dims >= 2 && !strstr(e[i].name, "conv1d") && strcmp(e[i].name, "token_embd.weight")) {
            double want = 1.0 / sqrt((double)t->ne[0]); /* unit-scale outputs */
            if (!(std > 0.7 * want && std < 1.3 * want && fabs(mean) < 0.2 * want))
                fail_msg("tensor %s: mean %g std %g, expected ~0 and ~%g", e[i].name, mean, std,
                         want);
        }
    }
    vt_gguf_close(g);
}

static void test_default_bf16(void **state)
{
    (void)state;
    vt_mkmodel_params p;
    vt_mkmodel_defaults(&p);
    assert_int_equal(p.weight_type, VT_TYPE_BF16);
    char *path = make("demo-bf16.gguf", NULL);
    check_model(path, &p);
    free(path);
}

static void test_f32_and_other_shape(void **state)
{
    (void)state;
    vt_mkmodel_params p;
    vt_mkmodel_defaults(&p);
    assert_int_equal(vt_mkmodel_set_type(&p, "F32"), VT_OK);
    assert_int_equal(p.weight_type, VT_TYPE_F32);
    assert_int_equal(vt_mkmodel_set_type(&p, "q4_k"), VT_ERR_INVALID_ARG);
    assert_non_null(strstr(vt_last_error(), "q4_k"));
    p.n_layer = 8;
    p.n_embd = 128;
    p.n_ff_exp = 64;
    p.n_ff_shexp = 96;
    p.n_expert = 4;
    p.n_head = 8;
    p.n_head_kv = 2;
    p.head_dim = 32;
    p.n_rot = 8;
    p.ssm_d_k = 32;
    p.ssm_n_k = 2;
    p.ssm_n_v = 6;
    p.n_merges = 250;
    char *path = make("demo-f32.gguf", &p);
    check_model(path, &p);
    free(path);
}

static void test_deterministic(void **state)
{
    (void)state;
    vt_mkmodel_params p;
    vt_mkmodel_defaults(&p);
    p.n_layer = 1;
    p.full_attention_interval = 4;
    char *a = make("det-a.gguf", &p), *b = make("det-b.gguf", &p);
    p.seed = 99;
    char *c = make("det-c.gguf", &p);
    size_t la, lb, lc;
    uint8_t *da = vt_test_read_file(a, &la), *db = vt_test_read_file(b, &lb),
            *dc = vt_test_read_file(c, &lc);
    assert_int_equal(la, lb);
    assert_memory_equal(da, db, la);
    assert_int_equal(la, lc); /* same shapes and vocabulary */
    assert_true(memcmp(da, dc, la) != 0);
    free(da);
    free(db);
    free(dc);
    free(a);
    free(b);
    free(c);
}

static void test_bad_params(void **state)
{
    (void)state;
    vt_mkmodel_params p;
    vt_mkmodel_defaults(&p);
    p.n_head = 3;
    char *path = vt_test_path(g_dir, "bad.gguf");
    assert_int_equal(vt_mkmodel_qwen35moe(path, &p), VT_ERR_INVALID_ARG);
    assert_non_null(strstr(vt_last_error(), "n_head"));
    vt_mkmodel_defaults(&p);
    p.n_rot = 7;
    assert_int_equal(vt_mkmodel_qwen35moe(path, &p), VT_ERR_INVALID_ARG);
    assert_non_null(strstr(vt_last_error(), "n_rot"));
    vt_mkmodel_defaults(&p);
    p.ssm_n_v = 3;
    assert_int_equal(vt_mkmodel_qwen35moe(path, &p), VT_ERR_INVALID_ARG);
    assert_non_null(strstr(vt_last_error(), "ssm_n_v"));
    vt_mkmodel_defaults(&p);
    p.weight_type = VT_TYPE_Q8_0;
    assert_int_equal(vt_mkmodel_qwen35moe(path, &p), VT_ERR_INVALID_ARG);
    assert_int_equal(vt_mkmodel_qwen35moe(NULL, &p), VT_ERR_INVALID_ARG);
    free(path);
}

/* Same key names/types and tensor names/shapes (vocab aside) as the converter-made fixture. */
static void test_matches_fixture_layout(void **state)
{
    (void)state;
    const char *fx = vt_test_fixtures();
    if (!fx) return;
    char *fp = vt_test_path(fx, "qwen35moe-tiny/gguf/qwen35moe-tiny-bf16.gguf");
    vt_gguf *ref = open_path(fp);
    char *path = make("demo-layout.gguf", NULL);
    vt_gguf *g = open_path(path);
    for (int64_t i = 0; i < vt_gguf_n_kv(ref); i++) {
        const char *k = vt_gguf_kv_key(ref, i);
        if (!strcmp(k, "general.size_label")) continue; /* informational */
        int64_t j = vt_gguf_find_key(g, k);
        if (j < 0) fail_msg("demo model lacks key %s", k);
        assert_int_equal(vt_gguf_kv_type(g, j), vt_gguf_kv_type(ref, i));
        if (vt_gguf_kv_type(ref, i) == VT_GGUF_ARRAY) {
            vt_gguf_type ea, eb;
            assert_int_equal(vt_gguf_get_arr(ref, k, &ea, NULL, NULL), VT_OK);
            assert_int_equal(vt_gguf_get_arr(g, k, &eb, NULL, NULL), VT_OK);
            assert_int_equal(ea, eb);
        } else if (vt_gguf_kv_type(ref, i) == VT_GGUF_UINT32 && strncmp(k, "tokenizer.", 10)) {
            uint32_t a = u32_of(ref, k), b = u32_of(g, k);
            if (a != b) fail_msg("key %s: demo %u, fixture %u", k, b, a);
        }
    }
    assert_int_equal(vt_gguf_n_tensors(g), vt_gguf_n_tensors(ref));
    int64_t n_vocab = vt_gguf_find_tensor(g, "token_embd.weight")->ne[1];
    for (int64_t i = 0; i < vt_gguf_n_tensors(ref); i++) {
        const vt_gguf_tensor *r = vt_gguf_tensor_at(ref, i), *t = vt_gguf_tensor_at(g, i);
        assert_string_equal(t->name, r->name); /* also the converter's order */
        assert_int_equal(t->type, r->type);
        assert_int_equal(t->n_dims, r->n_dims);
        for (int d = 0; d < 4; d++)
            assert_int_equal(t->ne[d], r->ne[d] == 4096 && d == 1 ? n_vocab : r->ne[d]);
    }
    vt_gguf_close(g);
    vt_gguf_close(ref);
    free(path);
    free(fp);
}

/* The byte-level BPE tokenizer of the core loads it; text round-trips; merges apply. */
static void test_tokenizer_loads(void **state)
{
    (void)state;
    char *path = make("demo-tok.gguf", NULL);
    vt_gguf *g = open_path(path);
    vt_tokenizer *tok = NULL;
    if (vt_tokenizer_load(g, &tok)) fail_msg("tokenizer: %s", vt_last_error());
    vt_gguf_close(g);
    assert_int_equal(vt_tokenizer_eos(tok), vt_tokenizer_find(tok, "<|im_end|>"));
    assert_true(vt_tokenizer_find(tok, "\xc4\xa0the") >= 256); /* "Ġthe" was learned */
    const char *text = "The river runs past the old mill.\nHello, world! 42";
    int32_t *ids = NULL;
    int64_t n = 0;
    assert_int_equal(vt_tokenize(tok, text, strlen(text), 0, 0, &ids, &n), VT_OK);
    assert_true(n > 0 && n < (int64_t)strlen(text)); /* merges shortened it */
    char out[256] = "";
    size_t used = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t k = vt_token_to_piece(tok, ids[i], 0, out + used, sizeof out - used);
        assert_true(k >= 0 && used + (size_t)k < sizeof out);
        used += (size_t)k;
    }
    out[used] = 0;
    assert_string_equal(out, text);
    free(ids);
    int32_t *sp = NULL;
    assert_int_equal(vt_tokenize(tok, "<|im_start|>user", 16, 0, 1, &sp, &n), VT_OK);
    assert_true(n >= 2);
    assert_int_equal(sp[0], vt_tokenizer_find(tok, "<|im_start|>"));
    free(sp);
    vt_tokenizer_free(tok);
    free(path);
}

/* The qwen35moe model plugin loads it through the engine and produces finite logits. */
static void test_engine_runs(void **state)
{
    (void)state;
    char *path = make("demo-engine.gguf", NULL);
    vt_engine_params ep = {0};
    ep.model_path = path;
    ep.plugin_dir = vt_test_plugin_dir();
    ep.n_threads = 2;
    ep.n_ctx = 64;
    vt_engine *e = NULL;
    if (vt_engine_open(&ep, &e)) fail_msg("engine on the demo model: %s", vt_last_error());
    assert_string_equal(vt_engine_arch(e), "qwen35moe");
    const vt_tokenizer *tok = vt_engine_tokenizer(e);
    int64_t n_vocab = vt_tokenizer_n_vocab(tok);
    int32_t *ids = NULL;
    int64_t n = 0;
    assert_int_equal(vt_tokenize(tok, "The river runs past the", 23, 0, 0, &ids, &n), VT_OK);
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    assert_non_null(logits);
    assert_int_equal(vt_engine_eval(e, ids, n, logits, 0), VT_OK);
    for (int64_t v = 0; v < n_vocab; v++) assert_true(isfinite(logits[v]));
    int32_t next = 0;
    assert_int_equal(vt_engine_eval(e, &next, 1, logits, 0), VT_OK);
    assert_int_equal(vt_engine_pos(e), n + 1);
    free(logits);
    free(ids);
    vt_engine_close(e);
    free(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_bf16),
        cmocka_unit_test(test_f32_and_other_shape),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_bad_params),
        cmocka_unit_test(test_matches_fixture_layout),
        cmocka_unit_test(test_tokenizer_loads),
        cmocka_unit_test(test_engine_runs),
    };
    return vt_test_exit(cmocka_run_group_tests(tests, setup, teardown));
}
