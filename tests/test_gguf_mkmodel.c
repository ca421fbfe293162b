/*
 * test_gguf_mkmodel.c - the demo-model generator (mkmodel.h) and the GGUF
 * writer's streaming and split modes (vt/gguf.h): the written file opens, has
 * every qwen35moe key of spec §3 and every tensor of §4 with the shapes and
 * byte sizes the spec tables give (computed here, not by the generator), the
 * same key set/types and tensor set/shapes as the converter-made fixture, sane
 * weights, a well-formed byte-level BPE vocabulary, is deterministic (also
 * across thread counts), and loads in the tokenizer and (through the engine)
 * in the model plugin. F16, BF16 and Q8_0 matrices are decoded here (gguf.md
 * §6.1, §6.2) and compared with the F32 model of the same seed within each
 * type's rounding; a 3-shard split (gguf.md §5) holds every tensor once, with
 * the split keys of every shard right, and the same bytes as one file.
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
#include "test_gguf_mkmodel.h"

char *g_dir;

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

char *make(const char *name, const vt_mkmodel_params *p)
{
    char *path = vt_test_path(g_dir, name);
    vt_status st = vt_mkmodel_qwen35moe(path, p);
    if (st) fail_msg("mkmodel %s: %s", path, vt_last_error());
    return path;
}

vt_gguf *open_path(const char *path)
{
    vt_gguf *g = NULL;
    if (vt_gguf_open(path, 0, &g)) fail_msg("open %s: %s", path, vt_last_error());
    return g;
}

uint32_t u32_of(const vt_gguf *g, const char *key)
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
        T(2, E, 1, 1, true, "blk.%u.ffn_gate_inp_shexp.weight", il); /* [n_embd, 1] */
        T(2, E, p->n_ff_shexp, 1, false, "blk.%u.ffn_gate_shexp.weight", il);
        T(2, E, p->n_ff_shexp, 1, false, "blk.%u.ffn_up_shexp.weight", il);
        T(2, p->n_ff_shexp, E, 1, false, "blk.%u.ffn_down_shexp.weight", il);
    }
#undef T
    return n;
}

/* IEEE half to float (gguf.md §6.1), by the formula. */
static float half_to_float(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 0) v = ldexp(m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexp(1.0 + m / 1024.0, e - 15);
    return (float)(s ? -v : v);
}

static float bf16_to_float(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* Element i (flat, ne[0] fastest) of t, decoded (gguf.md §6.1, §6.2). */
static float value_at(const vt_gguf_tensor *t, uint64_t i)
{
    const uint8_t *d = t->data;
    switch (t->type) {
    case VT_TYPE_F32: {
        float f;
        memcpy(&f, d + 4 * i, 4);
        return f;
    }
    case VT_TYPE_F16: return half_to_float(le16(d + 2 * i));
    case VT_TYPE_BF16: return bf16_to_float(le16(d + 2 * i));
    case VT_TYPE_Q8_0: {
        const uint8_t *blk = d + 34 * (i / 32);
        return half_to_float(le16(blk)) * (float)(int8_t)blk[2 + i % 32];
    }
    default: fail_msg("tensor %s: unexpected type %u", t->name, t->type);
    }
    return 0;
}

/* Bytes of n elements of a weight type (gguf.md §4 table). */
static uint64_t bytes_of(uint32_t type, uint64_t n)
{
    switch (type) {
    case VT_TYPE_F32: return 4 * n;
    case VT_TYPE_F16: case VT_TYPE_BF16: return 2 * n;
    case VT_TYPE_Q8_0: assert_int_equal(n % 32, 0); return n / 32 * 34;
    default: fail_msg("unexpected type %u", type);
    }
    return 0;
}

/* general.file_type of a weight type (gguf.md §7). */
static uint32_t file_type_of(uint32_t type)
{
    switch (type) {
    case VT_TYPE_F32: return 0;
    case VT_TYPE_F16: return 1;
    case VT_TYPE_Q8_0: return 7;
    default: return 32; /* BF16 */
    }
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
    assert_int_equal(u32_of(g, "general.file_type"), file_type_of(p->weight_type));
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
        assert_int_equal(t->n_dims, e[i].n_dims);
        assert_int_equal(t->type, e[i].f32 ? VT_TYPE_F32 : p->weight_type);
        assert_int_equal(t->nbytes, bytes_of(t->type, (uint64_t)e[i].ne[0] * e[i].ne[1] * e[i].ne[2]));
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
    assert_int_equal(vt_mkmodel_set_type(&p, "q8_1"), VT_ERR_INVALID_ARG);
    assert_non_null(strstr(vt_last_error(), "q8_1"));
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
    /* every type: the same bytes whatever the number of generator threads */
    static const char *const types[] = {"f32", "f16", "bf16", "q8_0"};
    for (int k = 0; k < 4; k++) {
        vt_mkmodel_defaults(&p);
        assert_int_equal(vt_mkmodel_set_type(&p, types[k]), VT_OK);
        p.n_threads = 1;
        char n1[64], n3[64];
        snprintf(n1, sizeof n1, "det-%s-1.gguf", types[k]);
        snprintf(n3, sizeof n3, "det-%s-3.gguf", types[k]);
        char *p1 = make(n1, &p);
        p.n_threads = 3;
        char *p3 = make(n3, &p);
        uint8_t *d1 = vt_test_read_file(p1, &la), *d3 = vt_test_read_file(p3, &lb);
        assert_non_null(d1);
        assert_non_null(d3);
        assert_int_equal(la, lb);
        if (memcmp(d1, d3, la)) fail_msg("%s: 1 and 3 generator threads differ", types[k]);
        free(d1);
        free(d3);
        free(p1);
        free(p3);
    }
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
    p.weight_type = VT_TYPE_Q8_1; /* a type mkmodel does not write */
    assert_int_equal(vt_mkmodel_qwen35moe(path, &p), VT_ERR_INVALID_ARG);
    assert_non_null(strstr(vt_last_error(), "weight_type"));
    assert_int_equal(vt_mkmodel_qwen35moe(NULL, &p), VT_ERR_INVALID_ARG);
    /* Q8_0 rows must be whole blocks of 32: the message names the dimension */
    vt_mkmodel_defaults(&p);
    assert_int_equal(vt_mkmodel_set_type(&p, "q8_0"), VT_OK);
    p.n_ff_exp = 48;
    assert_int_equal(vt_mkmodel_qwen35moe(path, &p), VT_ERR_INVALID_ARG);
    assert_non_null(strstr(vt_last_error(), "n_ff_exp (ffn_down_exps rows) = 48"));
    p.n_ff_exp = 64;
    p.n_embd = 200;
    assert_int_equal(vt_mkmodel_qwen35moe(path, &p), VT_ERR_INVALID_ARG);
    assert_non_null(strstr(vt_last_error(), "n_embd = 200"));
    p.n_embd = 256;
    p.head_dim = 36; /* n_head * head_dim = 144 */
    p.n_rot = 8;
    assert_int_equal(vt_mkmodel_qwen35moe(path, &p), VT_ERR_INVALID_ARG);
    assert_non_null(strstr(vt_last_error(), "n_head * head_dim"));
    /* F16 takes any row length */
    vt_mkmodel_defaults(&p);
    assert_int_equal(vt_mkmodel_set_type(&p, "F16"), VT_OK);
    assert_int_equal(p.weight_type, VT_TYPE_F16);
    p.n_ff_exp = 48;
    p.n_layer = 1;
    assert_int_equal(vt_mkmodel_qwen35moe(path, &p), VT_OK);
    /* more shards than tensors */
    vt_mkmodel_defaults(&p);
    p.n_layer = 1;
    p.n_shards = 500;
    assert_int_equal(vt_mkmodel_qwen35moe(path, &p), VT_ERR_INVALID_ARG);
    assert_non_null(strstr(vt_last_error(), "500 shards"));
    free(path);
}

/* The generator's documented value formula, computed here independently: a
 * matrix [n_in, ...] element i is (2 S - 262140) * std * sqrt(3) / 2^17 with
 * std = 1/sqrt(n_in) and S the sum of the four 16-bit fields of wyrand output
 * i of the stream seeded by FNV-1a(seed, name). Checked on an F32 tensor of
 * several writer chunks and thread parts, so a chunk or thread at the wrong
 * element offset fails. */
static void test_values_formula(void **state)
{
    (void)state;
    vt_mkmodel_params p;
    vt_mkmodel_defaults(&p);
    assert_int_equal(vt_mkmodel_set_type(&p, "f32"), VT_OK);
    p.n_layer = 1;
    p.n_embd = 512;
    p.n_ff_exp = 512;
    p.n_expert = 8; /* ffn_gate_exps: 8 MiB of F32 */
    p.n_threads = 3;
    p.seed = 77;
    char *path = make("formula.gguf", &p);
    vt_gguf *g = open_path(path);
    const char *name = "blk.0.ffn_gate_exps.weight";
    const vt_gguf_tensor *t = vt_gguf_find_tensor(g, name);
    assert_non_null(t);
    assert_true(t->nbytes >= ((uint64_t)8 << 20));
    uint64_t s = 1469598103934665603ull ^ p.seed;
    for (const char *c = name; *c; c++) s = (s ^ (unsigned char)*c) * 1099511628211ull;
    const float scale = (float)(1.0 / sqrt(512.0) * sqrt(3.0) / 131072.0);
    const uint64_t n = t->nbytes / 4;
    for (uint64_t k = 0; k <= n / 4099 + 1; k++) {
        uint64_t i = k <= n / 4099 ? k * 4099 : n - 1; /* every 4099th, and the last */
        uint64_t z = s + (i + 1) * 0xA0761D6478BD642Full;
        unsigned __int128 m = (unsigned __int128)z * (z ^ 0xE7037ED1A0B428DBull);
        uint64_t h = (uint64_t)m ^ (uint64_t)(m >> 64);
        int32_t sum = (int32_t)((h & 0xFFFF) + ((h >> 16) & 0xFFFF) + ((h >> 32) & 0xFFFF) +
                                (h >> 48));
        float want = (float)(2 * sum - 262140) * scale, got = value_at(t, i);
        if (fabsf(got - want) > 1e-6f * fabsf(want) + 1e-12f)
            fail_msg("%s element %llu: %.9g, formula %.9g", name, (unsigned long long)i,
                     (double)got, (double)want);
    }
    vt_gguf_close(g);
    free(path);
}

/* Compare tensor t (any weight type) with r, the F32 tensor of the same name
 * from the same seed, within t's rounding (gguf.md §6.1, §6.2). */
static void compare_with_f32(const vt_gguf_tensor *t, const vt_gguf_tensor *r)
{
    uint64_t n = (uint64_t)r->ne[0] * r->ne[1] * r->ne[2] * r->ne[3];
    const float *x = r->data;
    assert_int_equal(r->type, VT_TYPE_F32);
    if (t->type == VT_TYPE_F32) {
        assert_int_equal(t->nbytes, r->nbytes);
        assert_memory_equal(t->data, r->data, r->nbytes);
        return;
    }
    if (t->type == VT_TYPE_Q8_0) {
        for (uint64_t b = 0; b < n / 32; b++) {
            const float *xb = x + 32 * b;
            float amax = 0;
            int imax = 0;
            for (int j = 0; j < 32; j++)
                if (fabsf(xb[j]) > amax) amax = fabsf(xb[j]), imax = j;
            const uint8_t *blk = (const uint8_t *)t->data + 34 * b;
            double d = half_to_float(le16(blk)), d_exact = amax / 127.0;
            /* d is amax/127 rounded to F16 (half an F16 ulp) */
            if (fabs(d - d_exact) > ldexp(d_exact, -11) + ldexp(1, -25))
                fail_msg("%s block %llu: d = %g, amax/127 = %g", t->name, (unsigned long long)b, d,
                         d_exact);
            assert_int_equal(abs((int8_t)blk[2 + imax]), amax > 0 ? 127 : 0);
            double tol = 0.5 * d_exact * (1 + 1e-6) + 127 * fabs(d - d_exact) + 1e-9;
            for (int j = 0; j < 32; j++) {
                double y = value_at(t, 32 * b + (uint64_t)j);
                if (fabs(y - xb[j]) > tol)
                    fail_msg("%s element %llu: Q8_0 %g, F32 %g (tolerance %g)", t->name,
                             (unsigned long long)(32 * b + (uint64_t)j), y, (double)xb[j], tol);
            }
        }
        return;
    }
    /* F16: 11 significant bits, subnormals in steps of 2^-24; BF16: 8 bits. Round to
     * nearest: at most half an ulp. */
    int bits = t->type == VT_TYPE_F16 ? 11 : 8;
    for (uint64_t i = 0; i < n; i++) {
        double y = value_at(t, i), tol = ldexp(fabs(x[i]), -bits);
        if (t->type == VT_TYPE_F16 && tol < ldexp(1, -25)) tol = ldexp(1, -25);
        if (fabs(y - x[i]) > tol)
            fail_msg("%s element %llu: %s %.9g, F32 %.9g", t->name, (unsigned long long)i,
                     t->type == VT_TYPE_F16 ? "F16" : "BF16", y, (double)x[i]);
    }
}

/* F16, BF16 and Q8_0 models: full checks, and every value is the F32 model's
 * value (same seed) within the type's rounding; F32 tensors are identical. */
static void test_types_match_f32(void **state)
{
    (void)state;
    vt_mkmodel_params p;
    vt_mkmodel_defaults(&p);
    p.seed = 5;
    p.weight_type = VT_TYPE_F32;
    char *fp = make("cmp-f32.gguf", &p);
    vt_gguf *ref = open_path(fp);
    static const char *const types[] = {"f16", "bf16", "q8_0"};
    for (int k = 0; k < 3; k++) {
        assert_int_equal(vt_mkmodel_set_type(&p, types[k]), VT_OK);
        char name[64];
        snprintf(name, sizeof name, "cmp-%s.gguf", types[k]);
        char *path = make(name, &p);
        check_model(path, &p);
        vt_gguf *g = open_path(path);
        assert_int_equal(vt_gguf_n_tensors(g), vt_gguf_n_tensors(ref));
        for (int64_t i = 0; i < vt_gguf_n_tensors(ref); i++) {
            const vt_gguf_tensor *r = vt_gguf_tensor_at(ref, i);
            const vt_gguf_tensor *t = vt_gguf_find_tensor(g, r->name);
            assert_non_null(t);
            assert_int_equal(t->type, r->n_dims >= 2 && !strstr(r->name, "conv1d") &&
                                              !strstr(r->name, "ffn_gate_inp")
                                          ? p.weight_type
                                          : VT_TYPE_F32);
            compare_with_f32(t, r);
        }
        vt_gguf_close(g);
        free(path);
    }
    vt_gguf_close(ref);
    free(fp);
}

bool file_exists(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f) fclose(f);
    return f != NULL;
}

static uint64_t align32(uint64_t x) { return (x + 31) / 32 * 32; }

/* A 3-shard Q8_0 model: every tensor once, split keys right in every shard,
 * metadata in the first only, opened from the first shard, balanced by bytes,
 * the same bytes as the single file, deterministic. */
static void test_split_three(void **state)
{
    (void)state;
    vt_mkmodel_params p;
    vt_mkmodel_defaults(&p);
    assert_int_equal(vt_mkmodel_set_type(&p, "q8_0"), VT_OK);
    p.seed = 11;
    p.n_shards = 3;
    char *path = make("split.gguf", &p);
    char *shard[3], *again[3];
    for (int k = 0; k < 3; k++) {
        char n[64];
        snprintf(n, sizeof n, "split-%05d-of-00003.gguf", k + 1);
        shard[k] = vt_test_path(g_dir, n);
        if (!file_exists(shard[k])) fail_msg("%s was not written", shard[k]);
        char tmp[512];
        snprintf(tmp, sizeof tmp, "%s.tmp", shard[k]);
        assert_false(file_exists(tmp));
    }
    assert_false(file_exists(path)); /* the name of the model, not of a file */
    check_model(shard[0], &p);        /* keys and every tensor, through the first shard */

    /* the same model as one file: same tensors in the same order, same bytes */
    p.n_shards = 1;
    char *single = make("split-single.gguf", &p);
    vt_gguf *one = open_path(single), *g = open_path(shard[0]);
    assert_int_equal(vt_gguf_n_shards(g), 3);
    assert_int_equal(vt_gguf_n_shards(one), 1);
    const int64_t total = vt_gguf_n_tensors(one);
    assert_int_equal(vt_gguf_n_tensors(g), total);
    uint64_t all_bytes = 0, max_bytes = 0;
    uint32_t prev_shard = 0;
    for (int64_t i = 0; i < total; i++) {
        const vt_gguf_tensor *a = vt_gguf_tensor_at(one, i), *b = vt_gguf_tensor_at(g, i);
        assert_string_equal(b->name, a->name); /* whole tensors, in add order */
        assert_int_equal(b->type, a->type);
        assert_int_equal(b->nbytes, a->nbytes);
        for (int d = 0; d < 4; d++) assert_int_equal(b->ne[d], a->ne[d]);
        assert_memory_equal(b->data, a->data, a->nbytes);
        assert_true(b->shard >= prev_shard && b->shard < 3);
        prev_shard = b->shard;
        all_bytes += align32(a->nbytes);
        if (a->nbytes > max_bytes) max_bytes = a->nbytes;
    }
    vt_gguf_close(g);
    vt_gguf_close(one);

    /* each shard on its own: split keys with the spec's types, metadata in shard 0 only */
    int64_t sum = 0;
    for (uint32_t k = 0; k < 3; k++) {
        vt_gguf *s = NULL;
        assert_int_equal(vt_gguf_open(shard[k], VT_GGUF_SINGLE_FILE, &s), VT_OK);
        int64_t i = vt_gguf_find_key(s, "split.no");
        assert_true(i >= 0);
        assert_int_equal(vt_gguf_kv_type(s, i), VT_GGUF_UINT16);
        assert_int_equal(u32_of(s, "split.no"), k);
        i = vt_gguf_find_key(s, "split.count");
        assert_true(i >= 0);
        assert_int_equal(vt_gguf_kv_type(s, i), VT_GGUF_UINT16);
        assert_int_equal(u32_of(s, "split.count"), 3);
        i = vt_gguf_find_key(s, "split.tensors.count");
        assert_true(i >= 0);
        assert_int_equal(vt_gguf_kv_type(s, i), VT_GGUF_INT32);
        int64_t tc = 0;
        assert_int_equal(vt_gguf_get_i64(s, "split.tensors.count", &tc), VT_OK);
        assert_int_equal(tc, total);
        if (k == 0) {
            assert_true(vt_gguf_n_kv(s) > 30);
            assert_true(vt_gguf_find_key(s, "general.architecture") >= 0);
        } else {
            assert_int_equal(vt_gguf_n_kv(s), 3);
        }
        int64_t n = vt_gguf_n_tensors(s);
        assert_true(n >= 1);
        sum += n;
        uint64_t bytes = 0;
        for (int64_t j = 0; j < n; j++) bytes += align32(vt_gguf_tensor_at(s, j)->nbytes);
        /* roughly equal: whole tensors, so within one tensor of a third */
        if (bytes + max_bytes < all_bytes / 3 || bytes > all_bytes / 3 + max_bytes)
            fail_msg("shard %u holds %llu of %llu data bytes (largest tensor %llu)", k,
                     (unsigned long long)bytes, (unsigned long long)all_bytes,
                     (unsigned long long)max_bytes);
        vt_gguf_close(s);
    }
    assert_int_equal(sum, total);

    /* a later shard alone is refused, naming the first */
    vt_gguf *bad = NULL;
    assert_int_equal(vt_gguf_open(shard[1], 0, &bad), VT_ERR_FORMAT);
    assert_non_null(strstr(vt_last_error(), "split-00001-of-00003.gguf"));

    /* deterministic: the same files again, written through the first shard's name */
    p.n_shards = 3;
    char *again_path = vt_test_path(g_dir, "again-00001-of-00003.gguf");
    assert_int_equal(vt_mkmodel_qwen35moe(again_path, &p), VT_OK);
    for (int k = 0; k < 3; k++) {
        char n[64];
        snprintf(n, sizeof n, "again-%05d-of-00003.gguf", k + 1);
        again[k] = vt_test_path(g_dir, n);
        size_t la, lb;
        uint8_t *da = vt_test_read_file(shard[k], &la), *db = vt_test_read_file(again[k], &lb);
        assert_non_null(da);
        assert_non_null(db);
        assert_int_equal(la, lb);
        assert_memory_equal(da, db, la);
        free(da);
        free(db);
        free(again[k]);
        free(shard[k]);
    }
    free(again_path);
    free(single);
    free(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_bf16),
        cmocka_unit_test(test_f32_and_other_shape),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_values_formula),
        cmocka_unit_test(test_types_match_f32),
        cmocka_unit_test(test_split_three),
        cmocka_unit_test(test_writer_fill_and_split),
        cmocka_unit_test(test_bad_params),
        cmocka_unit_test(test_matches_fixture_layout),
        cmocka_unit_test(test_tokenizer_loads),
        cmocka_unit_test(test_engine_runs),
    };
    return vt_test_exit(cmocka_run_group_tests(tests, setup, teardown));
}
