/*
 * test_gguf_mkmodel_writer.c - the GGUF writer's fill and split modes, on
 * their own (one program with test_gguf_mkmodel.c; see its header).
 */
#include <math.h>
#include <stdbool.h>

#include "test_util.h"
#include "test_gguf_mkmodel.h"

#include "engine.h"
#include "error.h"
#include "mkmodel.h"
#include "tokenizer.h"
#include "vt/gguf.h"
#include "vt/types.h"

/* ---- the writer's fill and split modes, on their own ---- */

typedef struct fill_rec {
    uint32_t type_size;
    uint64_t next;   /* the offset the next call must ask for */
    int calls, fail_at;
} fill_rec;

static uint8_t pattern(uint64_t i) { return (uint8_t)(i * 7 + 1); }

static vt_status fill_pattern(void *user, void *buf, uint64_t offset, size_t n)
{
    fill_rec *r = user;
    assert_int_equal(offset, r->next); /* in order, each byte once */
    assert_int_equal(offset % r->type_size, 0);
    assert_int_equal(n % r->type_size, 0);
    assert_true(n > 0 && n <= ((size_t)16 << 20));
    if (++r->calls == r->fail_at) {
        vt_set_error("boom");
        return VT_ERR_IO;
    }
    for (size_t j = 0; j < n; j++) ((uint8_t *)buf)[j] = pattern(offset + j);
    r->next = offset + n;
    return VT_OK;
}

void test_writer_fill_and_split(void **state)
{
    (void)state;
    vt_gguf_writer *w = vt_gguf_writer_new(64);
    assert_non_null(w);
    assert_int_equal(vt_gguf_writer_set_str(w, "general.architecture", "test"), VT_OK);
    float a[10];
    for (int i = 0; i < 10; i++) a[i] = (float)i - 2.5f;
    const int64_t ne_a[1] = {10}, ne_b[2] = {1000, 3}, ne_c[1] = {16}, ne_d[2] = {64, 2},
                  ne_big[1] = {(int64_t)3 << 20};
    fill_rec rb = {2, 0, 0, 0}, rd = {34, 0, 0, 0}, rbig = {4, 0, 0, 0};
    assert_int_equal(vt_gguf_writer_add_tensor(w, "a", VT_TYPE_F32, 1, ne_a, a, sizeof a), VT_OK);
    assert_int_equal(vt_gguf_writer_add_tensor_fill(w, "b", VT_TYPE_F16, 2, ne_b, 6000,
                                                    fill_pattern, &rb), VT_OK);
    assert_int_equal(vt_gguf_writer_add_tensor(w, "c", VT_TYPE_F32, 1, ne_c, NULL, 64), VT_OK);
    assert_int_equal(vt_gguf_writer_add_tensor_fill(w, "d", VT_TYPE_Q8_0, 2, ne_d, 136,
                                                    fill_pattern, &rd), VT_OK);
    assert_int_equal(vt_gguf_writer_add_tensor_fill(w, "big", VT_TYPE_F32, 1, ne_big,
                                                    (uint64_t)12 << 20, fill_pattern, &rbig),
                     VT_OK);
    /* a wrong size or a missing callback is refused at add time */
    assert_int_equal(vt_gguf_writer_add_tensor_fill(w, "e", VT_TYPE_F32, 1, ne_a, 44,
                                                    fill_pattern, &rb), VT_ERR_INVALID_ARG);
    assert_int_equal(vt_gguf_writer_add_tensor_fill(w, "e", VT_TYPE_F32, 1, ne_a, 40, NULL, NULL),
                     VT_ERR_INVALID_ARG);

    char *path = vt_test_path(g_dir, "w.gguf"), first[512], second[512];
    assert_int_equal(vt_gguf_writer_shard_path(path, 0, 2, first, sizeof first), VT_OK);
    assert_int_equal(vt_gguf_writer_shard_path(path, 1, 2, second, sizeof second), VT_OK);
    assert_int_equal(vt_gguf_writer_write_split(w, path, 2), VT_OK);
    assert_true(rbig.calls >= 3); /* 12 MiB in chunks */
    assert_int_equal(rbig.next, (uint64_t)12 << 20);
    for (int pass = 0; pass < 2; pass++) {
        /* pass 0: the split model; pass 1: the same writer written again as one file */
        if (pass == 1) {
            rb.next = rd.next = rbig.next = 0;
            assert_int_equal(vt_gguf_writer_write(w, path), VT_OK);
        }
        vt_gguf *g = open_path(pass ? path : first);
        assert_int_equal(vt_gguf_n_shards(g), pass ? 1 : 2);
        assert_int_equal(vt_gguf_n_tensors(g), 5);
        const vt_gguf_tensor *t = vt_gguf_find_tensor(g, "a");
        assert_memory_equal(t->data, a, sizeof a);
        t = vt_gguf_find_tensor(g, "c");
        for (int i = 0; i < 64; i++) assert_int_equal(((const uint8_t *)t->data)[i], 0);
        static const char *const filled[3] = {"b", "d", "big"};
        for (int k = 0; k < 3; k++) {
            t = vt_gguf_find_tensor(g, filled[k]);
            assert_non_null(t);
            assert_int_equal(t->file_offset % 64, 0);
            for (uint64_t i = 0; i < t->nbytes; i += 4093)
                assert_int_equal(((const uint8_t *)t->data)[i], pattern(i));
        }
        if (!pass) { /* the 12 MiB tensor goes alone to the second shard */
            assert_int_equal(vt_gguf_find_tensor(g, "big")->shard, 1);
            assert_int_equal(vt_gguf_find_tensor(g, "d")->shard, 0);
        }
        vt_gguf_close(g);
    }
    /* the second shard carries general.alignment too, parsed with it */
    vt_gguf *s1 = NULL;
    assert_int_equal(vt_gguf_open(second, VT_GGUF_SINGLE_FILE, &s1), VT_OK);
    assert_int_equal(vt_gguf_alignment(s1), 64);
    assert_int_equal(vt_gguf_n_kv(s1), 4);
    vt_gguf_close(s1);

    /* shard names */
    char out[256];
    assert_int_equal(vt_gguf_writer_shard_path("d/m-00001-of-00003.gguf", 1, 3, out, sizeof out),
                     VT_OK);
    assert_string_equal(out, "d/m-00002-of-00003.gguf");
    assert_int_equal(vt_gguf_writer_shard_path("m", 2, 3, out, sizeof out), VT_OK);
    assert_string_equal(out, "m-00003-of-00003.gguf");
    assert_int_equal(vt_gguf_writer_shard_path("m.gguf", 0, 1, out, sizeof out), VT_OK);
    assert_string_equal(out, "m.gguf");
    assert_int_equal(vt_gguf_writer_shard_path("m-00001-of-00004.gguf", 0, 3, out, sizeof out),
                     VT_ERR_INVALID_ARG);
    assert_int_equal(vt_gguf_writer_shard_path("m.gguf", 3, 3, out, sizeof out), VT_ERR_INVALID_ARG);
    assert_int_equal(vt_gguf_writer_shard_path("m.gguf", 0, 3, out, 10), VT_ERR_INVALID_ARG);

    /* a failing fill: the status and message come back, no file is left */
    rb.next = rd.next = rbig.next = 0;
    rbig.calls = 0;
    rbig.fail_at = 2;
    char *fpath = vt_test_path(g_dir, "f.gguf"), f1[512], f2[512], t1[520];
    assert_int_equal(vt_gguf_writer_shard_path(fpath, 0, 2, f1, sizeof f1), VT_OK);
    assert_int_equal(vt_gguf_writer_shard_path(fpath, 1, 2, f2, sizeof f2), VT_OK);
    assert_int_equal(vt_gguf_writer_write_split(w, fpath, 2), VT_ERR_IO);
    assert_non_null(strstr(vt_last_error(), "boom"));
    assert_non_null(strstr(vt_last_error(), "'big'"));
    snprintf(t1, sizeof t1, "%s.tmp", f1);
    assert_false(file_exists(f1) || file_exists(f2) || file_exists(t1));
    /* split keys belong to the split writer */
    assert_int_equal(vt_gguf_writer_set_u16(w, "split.count", 2), VT_OK);
    assert_int_equal(vt_gguf_writer_write_split(w, fpath, 2), VT_ERR_INVALID_ARG);
    assert_non_null(strstr(vt_last_error(), "split.count"));
    vt_gguf_writer_free(w);
    free(fpath);
    free(path);
}

/* Same key names/types and tensor names/shapes (vocab aside) as the converter-made fixture. */
void test_matches_fixture_layout(void **state)
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
void test_tokenizer_loads(void **state)
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

/* The qwen35moe model plugin loads path through the engine and produces finite logits. */
static void engine_runs(const char *path)
{
    vt_engine_params ep = {0};
    ep.model_path = path;
    ep.plugin_dir = vt_test_plugin_dir();
    ep.n_threads = 2;
    ep.n_ctx = 64;
    vt_engine *e = NULL;
    if (vt_engine_open(&ep, &e)) fail_msg("engine on %s: %s", path, vt_last_error());
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
}

/* The default model, an F16 one of another shape, and a 3-shard Q8_0 one
 * (opened from its first shard) all run in the model plugin. */
void test_engine_runs(void **state)
{
    (void)state;
    char *path = make("demo-engine.gguf", NULL);
    engine_runs(path);
    free(path);
    vt_mkmodel_params p;
    vt_mkmodel_defaults(&p);
    assert_int_equal(vt_mkmodel_set_type(&p, "f16"), VT_OK);
    p.n_embd = 96;
    p.n_expert = 6;
    p.n_expert_used = 3;
    p.n_ff_exp = 40;
    p.n_ff_shexp = 24;
    p.n_layer = 5;
    path = make("demo-engine-f16.gguf", &p);
    engine_runs(path);
    free(path);
    vt_mkmodel_defaults(&p);
    assert_int_equal(vt_mkmodel_set_type(&p, "q8_0"), VT_OK);
    p.n_shards = 3;
    path = make("demo-engine-q8.gguf", &p);
    free(path);
    path = vt_test_path(g_dir, "demo-engine-q8-00001-of-00003.gguf");
    engine_runs(path);
    free(path);
}
