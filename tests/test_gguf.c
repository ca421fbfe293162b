/*
 * test_gguf.c - the GGUF reader and writer (vt/gguf.h) against the shipped
 * fixtures (facts from gguf-dump.txt, quant-zoo/index.json and the raw bytes
 * of the files) and writer -> reader round trips checked byte by byte.
 */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

#include "error.h"
#include "gguf_guard.h"
#include "vt/gguf.h"
#include "vt/types.h"

#define QDIR "qwen35moe-tiny/gguf/"
#define SPLIT1 QDIR "split/qwen35moe-tiny-q8_0-split-00001-of-00003.gguf"
#define SPLIT2 QDIR "split/qwen35moe-tiny-q8_0-split-00002-of-00003.gguf"
#define SPLIT3 QDIR "split/qwen35moe-tiny-q8_0-split-00003-of-00003.gguf"

static vt_gguf *open_fixture(const char *rel, uint32_t flags)
{
    const char *fx = vt_test_fixtures();
    if (!fx) return NULL;
    char *p = vt_test_path(fx, rel);
    vt_gguf *g = NULL;
    vt_status st = vt_gguf_open(p, flags, &g);
    if (st != VT_OK) fail_msg("open %s: %s (%s)", p, vt_status_name(st), vt_last_error());
    free(p);
    return g;
}

static void *read_at(const char *path, uint64_t off, uint64_t n)
{
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    void *b = malloc(n ? n : 1);
    assert_non_null(b);
    assert_int_equal(pread(fd, b, n, (off_t)off), (ssize_t)n);
    close(fd);
    return b;
}

/* Scratch directory under /tmp, removed by rm_tree. */
static char *make_tmpdir(void)
{
    char *d = strdup("/tmp/vt-test-gguf-XXXXXX");
    assert_non_null(d);
    assert_non_null(mkdtemp(d));
    return d;
}

static void rm_tree(char *d)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    assert_int_equal(system(cmd), 0);
    free(d);
}

/* ------------------------------------------------------------------ */

static void check_qwen_metadata(const vt_gguf *g)
{
    vt_gguf_str s;
    uint32_t u;
    float f;
    assert_int_equal(vt_gguf_version(g), 3);
    assert_int_equal(vt_gguf_alignment(g), 32);
    assert_int_equal(vt_gguf_get_str(g, "general.architecture", &s), VT_OK);
    assert_string_equal(s.ptr, "qwen35moe");
    assert_int_equal(s.len, 9);
    assert_int_equal(vt_gguf_get_str(g, "general.name", &s), VT_OK);
    assert_string_equal(s.ptr, "Qwen35Moe Tiny");
    assert_int_equal(vt_gguf_get_u32(g, "qwen35moe.block_count", &u), VT_OK);
    assert_int_equal(u, 4);
    assert_int_equal(vt_gguf_get_u32(g, "qwen35moe.ssm.time_step_rank", &u), VT_OK);
    assert_int_equal(u, 4);
    assert_int_equal(vt_gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &u), VT_OK);
    assert_int_equal(u, 4072);
    assert_int_equal(vt_gguf_get_u32(g, "tokenizer.ggml.padding_token_id", &u), VT_OK);
    assert_int_equal(u, 4070);
    assert_int_equal(vt_gguf_get_f32(g, "qwen35moe.rope.freq_base", &f), VT_OK);
    assert_true(f == 10000.0f);
    assert_int_equal(vt_gguf_get_f32(g, "qwen35moe.attention.layer_norm_rms_epsilon", &f), VT_OK);
    assert_true(f == 1e-6f);
    int64_t i64;
    assert_int_equal(vt_gguf_get_i64(g, "qwen35moe.embedding_length", &i64), VT_OK);
    assert_int_equal(i64, 256);

    vt_gguf_type et;
    uint64_t n;
    const void *data;
    assert_int_equal(vt_gguf_get_arr(g, "qwen35moe.rope.dimension_sections", &et, &n, &data),
                     VT_OK);
    assert_int_equal(et, VT_GGUF_INT32);
    assert_int_equal(n, 4);
    const int32_t *ds = data;
    assert_int_equal(ds[0], 3);
    assert_int_equal(ds[1], 3);
    assert_int_equal(ds[2], 2);
    assert_int_equal(ds[3], 0);
    assert_int_equal(vt_gguf_get_arr_i64(g, "qwen35moe.rope.dimension_sections", 2, &i64), VT_OK);
    assert_int_equal(i64, 2);
    assert_int_equal(vt_gguf_get_arr_i64(g, "qwen35moe.rope.dimension_sections", 4, &i64),
                     VT_ERR_RANGE);

    assert_int_equal(vt_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &data), VT_OK);
    assert_int_equal(et, VT_GGUF_STRING);
    assert_int_equal(n, 4096);
    assert_null(data);
    assert_int_equal(vt_gguf_get_arr_str(g, "tokenizer.ggml.tokens", 0, &s), VT_OK);
    assert_string_equal(s.ptr, "!");
    assert_int_equal(vt_gguf_get_arr_str(g, "tokenizer.ggml.tokens", 11, &s), VT_OK);
    assert_string_equal(s.ptr, ",");
    assert_int_equal(vt_gguf_get_arr_str(g, "tokenizer.ggml.tokens", 4095, &s), VT_OK);
    assert_string_equal(s.ptr, "</think>");
    assert_int_equal(vt_gguf_get_arr_str(g, "tokenizer.ggml.tokens", 4092, &s), VT_OK);
    assert_string_equal(s.ptr, "<tool_response>");
    assert_int_equal(vt_gguf_get_arr_str(g, "tokenizer.ggml.merges", 0, &s), VT_OK);
    assert_string_equal(s.ptr, "\xc4\xa0 \xc4\xa0"); /* "Ġ Ġ" */
    assert_int_equal(vt_gguf_get_arr_str(g, "tokenizer.ggml.merges", 3813, &s), VT_OK);
    assert_string_equal(s.ptr, "inclu de");
    assert_int_equal(vt_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n, NULL), VT_OK);
    assert_int_equal(n, 3814);

    /* token_type counts by type (dump: {1: 4070, 3: 20, 4: 6}) */
    assert_int_equal(vt_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &n, &data), VT_OK);
    assert_int_equal(et, VT_GGUF_INT32);
    int counts[8] = {0};
    for (uint64_t k = 0; k < n; k++) {
        assert_int_equal(vt_gguf_get_arr_i64(g, "tokenizer.ggml.token_type", k, &i64), VT_OK);
        assert_true(i64 >= 0 && i64 < 8);
        counts[i64]++;
    }
    assert_int_equal(counts[1], 4070);
    assert_int_equal(counts[3], 20);
    assert_int_equal(counts[4], 6);

    /* wrong types name the key; absent keys set no message */
    assert_int_equal(vt_gguf_get_u32(g, "general.architecture", &u), VT_ERR_FORMAT);
    assert_non_null(strstr(vt_last_error(), "general.architecture"));
    assert_int_equal(vt_gguf_get_str(g, "qwen35moe.block_count", &s), VT_ERR_FORMAT);
    assert_non_null(strstr(vt_last_error(), "qwen35moe.block_count"));
    assert_int_equal(vt_gguf_get_f32(g, "qwen35moe.block_count", &f), VT_ERR_FORMAT);
    assert_int_equal(vt_gguf_get_arr_str(g, "tokenizer.ggml.token_type", 0, &s), VT_ERR_FORMAT);
    assert_int_equal(vt_gguf_get_arr_i64(g, "tokenizer.ggml.tokens", 0, &i64), VT_ERR_FORMAT);
    vt_clear_error();
    assert_int_equal(vt_gguf_get_u32(g, "no.such.key", &u), VT_ERR_NOT_FOUND);
    assert_int_equal(vt_gguf_get_arr(g, "no.such.key", &et, &n, &data), VT_ERR_NOT_FOUND);
    assert_string_equal(vt_last_error(), "");
    assert_int_equal(vt_gguf_find_key(g, "no.such.key"), -1);

    int64_t ki = vt_gguf_find_key(g, "tokenizer.ggml.model");
    assert_true(ki >= 0);
    assert_string_equal(vt_gguf_kv_key(g, ki), "tokenizer.ggml.model");
    assert_int_equal(vt_gguf_kv_type(g, ki), VT_GGUF_STRING);
    assert_int_equal(vt_gguf_find_key(g, "general.architecture"), 0);

    const vt_gguf_tensor *t = vt_gguf_find_tensor(g, "blk.0.ffn_down_exps.weight");
    assert_non_null(t);
    assert_int_equal(t->n_dims, 3);
    assert_int_equal(t->ne[0], 256);
    assert_int_equal(t->ne[1], 256);
    assert_int_equal(t->ne[2], 8);
    assert_int_equal(t->ne[3], 1);
    assert_null(vt_gguf_find_tensor(g, "blk.9.nothing"));
    assert_int_equal(vt_gguf_n_tensors(g), 76);
}

static void test_q8_0_file(void **state)
{
    (void)state;
    vt_gguf *g = open_fixture(QDIR "qwen35moe-tiny-q8_0.gguf", 0);
    if (!g) return;
    check_qwen_metadata(g);
    assert_int_equal(vt_gguf_n_kv(g), 35);
    assert_int_equal(vt_gguf_n_shards(g), 1);
    assert_int_equal(vt_gguf_shard_data_start(g, 0), 139680);
    assert_int_equal(vt_gguf_shard_size(g, 0), 11080928);
    uint32_t ft;
    assert_int_equal(vt_gguf_get_u32(g, "general.file_type", &ft), VT_OK);
    assert_int_equal(ft, 7);
    assert_true(vt_gguf_shard_fd(g, 0) >= 0);
    /* every mapped tensor's bytes are the file's bytes at its offset */
    const char *path = vt_gguf_shard_path(g, 0);
    for (int64_t i = 0; i < vt_gguf_n_tensors(g); i++) {
        const vt_gguf_tensor *t = vt_gguf_tensor_at(g, i);
        assert_non_null(t->data);
        assert_int_equal(t->file_offset, 139680 + t->offset);
        assert_int_equal(t->file_offset % 32, 0);
        void *b = read_at(path, t->file_offset, t->nbytes);
        assert_memory_equal(b, t->data, t->nbytes);
        free(b);
    }
    assert_null(vt_gguf_tensor_at(g, 76));
    assert_null(vt_gguf_tensor_at(g, -1));
    vt_gguf_close(g);
}

static void test_bf16_file(void **state)
{
    (void)state;
    vt_gguf *g = open_fixture(QDIR "qwen35moe-tiny-bf16.gguf", VT_GGUF_NO_MMAP);
    if (!g) return;
    check_qwen_metadata(g);
    uint32_t ft;
    assert_int_equal(vt_gguf_get_u32(g, "general.file_type", &ft), VT_OK);
    assert_int_equal(ft, 32);
    const vt_gguf_tensor *t = vt_gguf_find_tensor(g, "token_embd.weight");
    assert_non_null(t);
    assert_int_equal(t->type, VT_TYPE_BF16);
    assert_int_equal(t->nbytes, 2097152);
    assert_int_equal(t->offset, 2097152);
    for (int64_t i = 0; i < vt_gguf_n_tensors(g); i++) assert_null(vt_gguf_tensor_at(g, i)->data);
    vt_gguf_close(g);
}

/* The split model: same metadata, and every tensor's bytes equal the single q8_0 file's. */
static void test_split_from_first_shard(void **state)
{
    (void)state;
    vt_gguf *g = open_fixture(SPLIT1, 0);
    if (!g) return;
    vt_gguf *one = open_fixture(QDIR "qwen35moe-tiny-q8_0.gguf", 0);
    check_qwen_metadata(g);
    assert_int_equal(vt_gguf_n_shards(g), 3);
    assert_int_equal(vt_gguf_n_kv(g), 38);
    assert_int_equal(vt_gguf_shard_data_start(g, 0), 135840);
    assert_int_equal(vt_gguf_shard_data_start(g, 1), 2400);
    assert_int_equal(vt_gguf_shard_data_start(g, 2), 1728);
    assert_int_equal(vt_gguf_shard_size(g, 0), 3768416);
    assert_int_equal(vt_gguf_shard_size(g, 1), 3806432);
    assert_int_equal(vt_gguf_shard_size(g, 2), 3506368);
    assert_non_null(strstr(vt_gguf_shard_path(g, 2), "-00003-of-00003.gguf"));
    assert_null(vt_gguf_shard_path(g, 3));
    uint32_t u;
    int64_t i64;
    assert_int_equal(vt_gguf_get_u32(g, "split.count", &u), VT_OK);
    assert_int_equal(u, 3);
    assert_int_equal(vt_gguf_get_i64(g, "split.tensors.count", &i64), VT_OK);
    assert_int_equal(i64, 76);
    int per_shard[3] = {0};
    for (int64_t i = 0; i < vt_gguf_n_tensors(g); i++) {
        const vt_gguf_tensor *t = vt_gguf_tensor_at(g, i);
        assert_true(t->shard < 3);
        per_shard[t->shard]++;
        assert_int_equal(t->file_offset, vt_gguf_shard_data_start(g, t->shard) + t->offset);
        const vt_gguf_tensor *o = vt_gguf_find_tensor(one, t->name);
        assert_non_null(o);
        assert_int_equal(o->type, t->type);
        assert_int_equal(o->nbytes, t->nbytes);
        assert_memory_equal(o->data, t->data, t->nbytes);
        void *b = read_at(vt_gguf_shard_path(g, t->shard), t->file_offset, t->nbytes);
        assert_memory_equal(b, t->data, t->nbytes);
        free(b);
    }
    assert_int_equal(per_shard[0], 14);
    assert_int_equal(per_shard[1], 37);
    assert_int_equal(per_shard[2], 25);
    assert_int_equal(vt_gguf_find_tensor(g, "blk.3.attn_norm.weight")->shard, 2);
    vt_gguf_close(one);
    vt_gguf_close(g);
}

static void test_split_later_shard_refused(void **state)
{
    (void)state;
    const char *fx = vt_test_fixtures();
    if (!fx) return;
    const char *rel[2] = {SPLIT2, SPLIT3};
    const char *no[2] = {"shard 2 of 3", "shard 3 of 3"};
    for (int k = 0; k < 2; k++) {
        char *p = vt_test_path(fx, rel[k]);
        vt_gguf *g = (vt_gguf *)1;
        assert_int_equal(vt_gguf_open(p, 0, &g), VT_ERR_FORMAT);
        assert_null(g);
        assert_non_null(strstr(vt_last_error(), "qwen35moe-tiny-q8_0-split-00001-of-00003.gguf"));
        assert_non_null(strstr(vt_last_error(), no[k]));
        /* tools may open one shard alone */
        assert_int_equal(vt_gguf_open(p, VT_GGUF_SINGLE_FILE, &g), VT_OK);
        assert_int_equal(vt_gguf_n_shards(g), 1);
        assert_int_equal(vt_gguf_n_tensors(g), k == 0 ? 37 : 25);
        vt_gguf_close(g);
        free(p);
    }
    /* SINGLE_FILE on the first shard: only its own 14 tensors */
    vt_gguf *g = open_fixture(SPLIT1, VT_GGUF_SINGLE_FILE);
    assert_int_equal(vt_gguf_n_tensors(g), 14);
    vt_gguf_close(g);
}

/* Missing shard, and a first shard whose name does not follow the pattern. */
static void test_split_missing_shard(void **state)
{
    (void)state;
    const char *fx = vt_test_fixtures();
    if (!fx) return;
    char *d = make_tmpdir();
    char *s1 = vt_test_path(fx, SPLIT1), *s2 = vt_test_path(fx, SPLIT2);
    char a[600], b[600], c[600];
    snprintf(a, sizeof a, "%s/m-00001-of-00003.gguf", d);
    snprintf(b, sizeof b, "%s/m-00002-of-00003.gguf", d);
    snprintf(c, sizeof c, "%s/renamed.gguf", d);
    assert_int_equal(symlink(s1, a), 0);
    assert_int_equal(symlink(s2, b), 0);
    assert_int_equal(symlink(s1, c), 0);
    vt_gguf *g = NULL;
    vt_status st = vt_gguf_open(a, 0, &g);
    assert_int_not_equal(st, VT_OK);
    assert_non_null(strstr(vt_last_error(), "m-00003-of-00003.gguf"));
    assert_int_equal(vt_gguf_open(c, 0, &g), VT_ERR_FORMAT);
    assert_non_null(strstr(vt_last_error(), "renamed.gguf"));
    assert_non_null(strstr(vt_last_error(), "split.count"));
    /* shard 2 in the place of shard 3: split.no mismatch */
    snprintf(c, sizeof c, "%s/m-00003-of-00003.gguf", d);
    assert_int_equal(symlink(s2, c), 0);
    assert_int_equal(vt_gguf_open(a, 0, &g), VT_ERR_FORMAT);
    assert_non_null(strstr(vt_last_error(), "split.no"));
    free(s1);
    free(s2);
    rm_tree(d);
}

/* Write shard k (0-based) of a count-shard writer-made split model under dir. */
static void write_shard(const char *dir, unsigned k, unsigned count, uint16_t no, uint16_t cnt,
                        int32_t total, const char *const *names, int n_names)
{
    char path[600];
    snprintf(path, sizeof path, "%s/w-%05u-of-%05u.gguf", dir, k + 1, count);
    vt_gguf_writer *w = vt_gguf_writer_new(32);
    assert_non_null(w);
    if (k == 0) assert_int_equal(vt_gguf_writer_set_str(w, "general.architecture", "w"), VT_OK);
    assert_int_equal(vt_gguf_writer_set_u16(w, "split.no", no), VT_OK);
    assert_int_equal(vt_gguf_writer_set_u16(w, "split.count", cnt), VT_OK);
    assert_int_equal(vt_gguf_writer_set_i32(w, "split.tensors.count", total), VT_OK);
    float v[8];
    for (int i = 0; i < 8; i++) v[i] = (float)(k * 100 + (unsigned)i);
    const int64_t ne[1] = {8};
    for (int i = 0; i < n_names; i++)
        assert_int_equal(vt_gguf_writer_add_tensor(w, names[i], VT_TYPE_F32, 1, ne, v, 32), VT_OK);
    assert_int_equal(vt_gguf_writer_write(w, path), VT_OK);
    vt_gguf_writer_free(w);
}

static void test_split_writer_made(void **state)
{
    (void)state;
    char *d = make_tmpdir();
    char first[600];
    snprintf(first, sizeof first, "%s/w-00001-of-00002.gguf", d);
    const char *n0[2] = {"a", "b"}, *n1[1] = {"c"}, *dup[1] = {"a"};
    vt_gguf *g = NULL;

    write_shard(d, 0, 2, 0, 2, 3, n0, 2);
    write_shard(d, 1, 2, 1, 2, 3, n1, 1);
    assert_int_equal(vt_gguf_open(first, 0, &g), VT_OK);
    assert_int_equal(vt_gguf_n_shards(g), 2);
    assert_int_equal(vt_gguf_n_tensors(g), 3);
    const vt_gguf_tensor *c = vt_gguf_find_tensor(g, "c");
    assert_int_equal(c->shard, 1);
    assert_true(((const float *)c->data)[3] == 103.0f);
    assert_true(((const float *)vt_gguf_find_tensor(g, "b")->data)[7] == 7.0f);
    vt_gguf_close(g);

    write_shard(d, 1, 2, 1, 2, 3, dup, 1); /* name "a" in both shards */
    assert_int_equal(vt_gguf_open(first, 0, &g), VT_ERR_FORMAT);
    assert_non_null(strstr(vt_last_error(), "duplicate"));
    assert_non_null(strstr(vt_last_error(), "'a'"));

    write_shard(d, 1, 2, 1, 2, 3, n1, 1);
    write_shard(d, 0, 2, 0, 2, 4, n0, 2); /* total says 4, shards hold 3 */
    assert_int_equal(vt_gguf_open(first, 0, &g), VT_ERR_FORMAT);
    assert_non_null(strstr(vt_last_error(), "split.tensors.count"));

    write_shard(d, 0, 2, 0, 2, 3, n0, 2);
    write_shard(d, 1, 2, 1, 3, 3, n1, 1); /* shard 2 says 3 shards */
    assert_int_equal(vt_gguf_open(first, 0, &g), VT_ERR_FORMAT);
    assert_non_null(strstr(vt_last_error(), "split.count"));
    assert_non_null(strstr(vt_last_error(), "w-00002-of-00002.gguf"));

    write_shard(d, 0, 2, 2, 2, 3, n0, 2); /* split.no out of range */
    assert_int_equal(vt_gguf_open(first, 0, &g), VT_ERR_FORMAT);
    assert_non_null(strstr(vt_last_error(), "split.no"));
    rm_tree(d);
}

static void test_gemma_and_quant_zoo(void **state)
{
    (void)state;
    vt_gguf *g = open_fixture("gemma4-moe-tiny/gguf/gemma4-moe-tiny-f16.gguf", 0);
    if (!g) return;
    assert_int_equal(vt_gguf_n_tensors(g), 89);
    assert_int_equal(vt_gguf_n_kv(g), 43);
    assert_int_equal(vt_gguf_shard_data_start(g, 0), 157440);
    vt_gguf_type et;
    uint64_t n;
    const void *data;
    assert_int_equal(vt_gguf_get_arr(g, "gemma4.attention.sliding_window_pattern", &et, &n, &data),
                     VT_OK);
    assert_int_equal(et, VT_GGUF_BOOL);
    assert_int_equal(n, 4);
    const uint8_t *bp = data;
    assert_true(bp[0] == 1 && bp[1] == 0 && bp[2] == 1 && bp[3] == 0);
    int b;
    assert_int_equal(vt_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b), VT_OK);
    assert_int_equal(b, 1);
    vt_gguf_close(g);

    /* quant-zoo: offsets from its index.json, bytes from the type table of spec §4 */
    g = open_fixture("quant-zoo/quant-zoo.gguf", 0);
    static const uint64_t offs[15] = {0,      32768,  41984,  52224,  63488,
                                      75776,  93184,  98560,  105600, 114816,
                                      126080, 139520, 148736, 157440, 190208};
    static const uint32_t types[15] = {1, 2, 3, 6, 7, 8, 10, 11, 12, 13, 14, 20, 23, 30, 39};
    static const uint32_t bytes_per_row[15] = {512, 144, 160, 176, 192, 272, 84, 110,
                                               144, 176, 210, 144, 136, 512, 136};
    assert_int_equal(vt_gguf_n_tensors(g), 15);
    assert_int_equal(vt_gguf_n_kv(g), 9);
    assert_int_equal(vt_gguf_shard_data_start(g, 0), 1824);
    for (int i = 0; i < 15; i++) {
        const vt_gguf_tensor *t = vt_gguf_tensor_at(g, i);
        char name[32];
        snprintf(name, sizeof name, "%s.weight", vt_type_name(types[i]));
        assert_string_equal(t->name, name);
        assert_int_equal(t->type, types[i]);
        assert_int_equal(t->ne[0], 256);
        assert_int_equal(t->ne[1], 64);
        assert_int_equal(t->offset, offs[i]);
        assert_int_equal(t->nbytes, 64u * bytes_per_row[i]);
    }
    /* BF16.weight holds the source bytes: source.f32 = bf16 << 16 */
    const char *fx = vt_test_fixtures();
    char *sp = vt_test_path(fx, "quant-zoo/source.f32.bin");
    size_t len;
    uint32_t *src = vt_test_read_file(sp, &len);
    assert_int_equal(len, 65536);
    const uint16_t *bf = vt_gguf_find_tensor(g, "BF16.weight")->data;
    for (int i = 0; i < 64 * 256; i++) assert_int_equal(src[i], (uint32_t)bf[i] << 16);
    free(src);
    free(sp);
    vt_gguf_close(g);
}

static void test_open_errors(void **state)
{
    (void)state;
    vt_gguf *g = NULL;
    assert_int_equal(vt_gguf_open("/nonexistent/x.gguf", 0, &g), VT_ERR_NOT_FOUND);
    assert_non_null(strstr(vt_last_error(), "/nonexistent/x.gguf"));
    assert_int_equal(vt_gguf_open(NULL, 0, &g), VT_ERR_INVALID_ARG);
    assert_int_equal(vt_gguf_open("/tmp", 0, &g), VT_ERR_IO);
    assert_string_equal(vt_gguf_type_name(VT_GGUF_FLOAT64), "FLOAT64");
    assert_string_equal(vt_gguf_type_name(VT_GGUF_TYPE_COUNT), "UNKNOWN");
}

/* ------------------------------------------------------------------ */
/* writer round trips                                                  */
/* ------------------------------------------------------------------ */

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

static void roundtrip(uint32_t alignment)
{
    char *d = make_tmpdir();
    char path[600];
    snprintf(path, sizeof path, "%s/rt.gguf", d);
    vt_gguf_writer *w = vt_gguf_writer_new(alignment);
    assert_non_null(w);
    assert_int_equal(vt_gguf_writer_set_str(w, "general.architecture", "rt"), VT_OK);
    assert_int_equal(vt_gguf_writer_set_u32(w, "a.u32", 4000000000u), VT_OK);
    assert_int_equal(vt_gguf_writer_set_i32(w, "a.i32", -7), VT_OK);
    assert_int_equal(vt_gguf_writer_set_u16(w, "a.u16", 65535), VT_OK);
    assert_int_equal(vt_gguf_writer_set_f32(w, "a.f32", 0.125f), VT_OK);
    assert_int_equal(vt_gguf_writer_set_bool(w, "a.bool", 1), VT_OK);
    assert_int_equal(vt_gguf_writer_set_str(w, "a.empty", ""), VT_OK);
    assert_int_equal(vt_gguf_writer_set_u32(w, "a.replaced", 1), VT_OK);
    assert_int_equal(vt_gguf_writer_set_str(w, "a.replaced", "second"), VT_OK);
    const int32_t i32s[5] = {-1, 0, 1, INT32_MIN, INT32_MAX};
    const uint8_t u8s[3] = {0, 255, 7};
    const double f64s[2] = {1.5, -2.25};
    const uint64_t u64s[2] = {0, UINT64_MAX};
    const char *strs[4] = {"", "x", "h\xc3\xa9llo", "a b"};
    assert_int_equal(vt_gguf_writer_set_arr(w, "arr.i32", VT_GGUF_INT32, i32s, 5), VT_OK);
    assert_int_equal(vt_gguf_writer_set_arr(w, "arr.u8", VT_GGUF_UINT8, u8s, 3), VT_OK);
    assert_int_equal(vt_gguf_writer_set_arr(w, "arr.f64", VT_GGUF_FLOAT64, f64s, 2), VT_OK);
    assert_int_equal(vt_gguf_writer_set_arr(w, "arr.u64", VT_GGUF_UINT64, u64s, 2), VT_OK);
    assert_int_equal(vt_gguf_writer_set_arr(w, "arr.empty", VT_GGUF_FLOAT32, NULL, 0), VT_OK);
    assert_int_equal(vt_gguf_writer_set_arr_str(w, "arr.str", strs, 4), VT_OK);
    assert_int_equal(vt_gguf_writer_set_arr(w, "arr.bad", VT_GGUF_STRING, strs, 4),
                     VT_ERR_INVALID_ARG);

    /* tensors: sizes chosen so that padding is needed between them */
    float f32[3 * 5];
    for (int i = 0; i < 15; i++) f32[i] = (float)i - 3.5f;
    uint8_t q8[2 * 34 * 2]; /* Q8_0 ne=[64, 2] */
    for (size_t i = 0; i < sizeof q8; i++) q8[i] = (uint8_t)(i * 7 + 1);
    uint16_t f16[7];
    for (int i = 0; i < 7; i++) f16[i] = (uint16_t)(0x3c00 + i);
    float f4d[2 * 1 * 3 * 2];
    for (int i = 0; i < 12; i++) f4d[i] = (float)i;
    const int64_t ne_f32[2] = {3, 5}, ne_q8[2] = {64, 2}, ne_f16[1] = {7}, ne_4d[4] = {2, 1, 3, 2};
    assert_int_equal(vt_gguf_writer_add_tensor(w, "t.f32", VT_TYPE_F32, 2, ne_f32, f32, 60),
                     VT_OK);
    assert_int_equal(vt_gguf_writer_add_tensor(w, "t.q8", VT_TYPE_Q8_0, 2, ne_q8, q8, 136), VT_OK);
    assert_int_equal(vt_gguf_writer_add_tensor(w, "t.f16", VT_TYPE_F16, 1, ne_f16, f16, 14),
                     VT_OK);
    assert_int_equal(vt_gguf_writer_add_tensor(w, "t.4d", VT_TYPE_F32, 4, ne_4d, f4d, 48), VT_OK);
    /* refusals */
    assert_int_equal(vt_gguf_writer_add_tensor(w, "t.f32", VT_TYPE_F32, 2, ne_f32, f32, 60),
                     VT_ERR_INVALID_ARG);
    assert_int_equal(vt_gguf_writer_add_tensor(w, "t.bad", VT_TYPE_F32, 2, ne_f32, f32, 59),
                     VT_ERR_INVALID_ARG);
    assert_non_null(strstr(vt_last_error(), "nbytes"));
    assert_int_equal(vt_gguf_writer_add_tensor(w, "t.bad", VT_TYPE_Q8_0, 1, ne_f16, q8, 34),
                     VT_ERR_INVALID_ARG);
    assert_int_equal(vt_gguf_writer_add_tensor(w, "t.bad", 4, 1, ne_f16, q8, 34),
                     VT_ERR_INVALID_ARG);
    char longname[80];
    memset(longname, 'n', 64);
    longname[64] = 0;
    assert_int_equal(vt_gguf_writer_add_tensor(w, longname, VT_TYPE_F32, 1, ne_f16, f32, 28),
                     VT_ERR_INVALID_ARG);
    assert_int_equal(vt_gguf_writer_write(w, path), VT_OK);
    vt_gguf_writer_free(w);

    vt_gguf *g = NULL;
    assert_int_equal(vt_gguf_open(path, 0, &g), VT_OK);
    assert_int_equal(vt_gguf_version(g), 3);
    assert_int_equal(vt_gguf_alignment(g), alignment);
    uint32_t u;
    int64_t i64;
    float f;
    int b;
    vt_gguf_str s;
    assert_int_equal(vt_gguf_get_u32(g, "a.u32", &u), VT_OK);
    assert_int_equal(u, 4000000000u);
    assert_int_equal(vt_gguf_get_i64(g, "a.u32", &i64), VT_OK);
    assert_int_equal(i64, 4000000000ll);
    assert_int_equal(vt_gguf_get_i64(g, "a.i32", &i64), VT_OK);
    assert_int_equal(i64, -7);
    assert_int_equal(vt_gguf_get_u32(g, "a.i32", &u), VT_ERR_FORMAT); /* negative into u32 */
    assert_non_null(strstr(vt_last_error(), "a.i32"));
    assert_int_equal(vt_gguf_get_u32(g, "a.u16", &u), VT_OK);
    assert_int_equal(u, 65535);
    assert_int_equal(vt_gguf_kv_type(g, vt_gguf_find_key(g, "a.u16")), VT_GGUF_UINT16);
    assert_int_equal(vt_gguf_get_f32(g, "a.f32", &f), VT_OK);
    assert_true(f == 0.125f);
    assert_int_equal(vt_gguf_get_bool(g, "a.bool", &b), VT_OK);
    assert_int_equal(b, 1);
    assert_int_equal(vt_gguf_get_str(g, "a.empty", &s), VT_OK);
    assert_int_equal(s.len, 0);
    assert_string_equal(s.ptr, "");
    assert_int_equal(vt_gguf_get_str(g, "a.replaced", &s), VT_OK);
    assert_string_equal(s.ptr, "second");
    /* key order = first-set order; the replaced key kept its place */
    assert_string_equal(vt_gguf_kv_key(g, 0), "general.architecture");
    assert_string_equal(vt_gguf_kv_key(g, 7), "a.replaced");

    vt_gguf_type et;
    uint64_t n;
    const void *data;
    assert_int_equal(vt_gguf_get_arr(g, "arr.i32", &et, &n, &data), VT_OK);
    assert_int_equal(et, VT_GGUF_INT32);
    assert_int_equal(n, 5);
    assert_memory_equal(data, i32s, sizeof i32s);
    assert_int_equal(vt_gguf_get_arr_i64(g, "arr.i32", 3, &i64), VT_OK);
    assert_int_equal(i64, INT32_MIN);
    assert_int_equal(vt_gguf_get_arr(g, "arr.u8", &et, &n, &data), VT_OK);
    assert_int_equal(et, VT_GGUF_UINT8);
    assert_memory_equal(data, u8s, 3);
    assert_int_equal(vt_gguf_get_arr(g, "arr.f64", &et, &n, &data), VT_OK);
    assert_memory_equal(data, f64s, sizeof f64s);
    assert_int_equal(vt_gguf_get_arr_i64(g, "arr.u64", 0, &i64), VT_OK);
    assert_int_equal(vt_gguf_get_arr_i64(g, "arr.u64", 1, &i64), VT_ERR_FORMAT); /* > INT64_MAX */
    assert_int_equal(vt_gguf_get_arr(g, "arr.empty", &et, &n, &data), VT_OK);
    assert_int_equal(n, 0);
    assert_int_equal(vt_gguf_get_arr(g, "arr.str", &et, &n, &data), VT_OK);
    assert_int_equal(n, 4);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(vt_gguf_get_arr_str(g, "arr.str", (uint64_t)i, &s), VT_OK);
        assert_string_equal(s.ptr, strs[i]);
        assert_int_equal(s.len, strlen(strs[i]));
    }
    if (alignment != 32) {
        assert_int_equal(vt_gguf_get_u32(g, "general.alignment", &u), VT_OK);
        assert_int_equal(u, alignment);
    }

    /* tensors: add order, offsets = running aligned sums, data intact, padding zero */
    const char *names[4] = {"t.f32", "t.q8", "t.f16", "t.4d"};
    const void *datas[4] = {f32, q8, f16, f4d};
    const uint64_t nb[4] = {60, 136, 14, 48};
    assert_int_equal(vt_gguf_n_tensors(g), 4);
    uint64_t off = 0;
    uint64_t ds = vt_gguf_shard_data_start(g, 0);
    assert_int_equal(ds % alignment, 0);
    size_t flen;
    uint8_t *raw = vt_test_read_file(path, &flen);
    assert_memory_equal(raw, "GGUF\3\0\0\0\4\0\0\0\0\0\0\0", 16);
    for (int i = 0; i < 4; i++) {
        const vt_gguf_tensor *t = vt_gguf_tensor_at(g, i);
        assert_string_equal(t->name, names[i]);
        assert_int_equal(t->offset, off);
        assert_int_equal(t->nbytes, nb[i]);
        assert_memory_equal(t->data, datas[i], nb[i]);
        uint64_t next = align_up(off + nb[i], alignment);
        for (uint64_t k = off + nb[i]; k < next; k++) assert_int_equal(raw[ds + k], 0);
        off = next;
    }
    assert_int_equal(flen, ds + off);
    const vt_gguf_tensor *t4 = vt_gguf_find_tensor(g, "t.4d");
    assert_int_equal(t4->n_dims, 4);
    assert_int_equal(t4->ne[0], 2);
    assert_int_equal(t4->ne[1], 1);
    assert_int_equal(t4->ne[2], 3);
    assert_int_equal(t4->ne[3], 2);
    assert_int_equal(vt_gguf_find_tensor(g, "t.f16")->ne[1], 1);
    free(raw);
    vt_gguf_close(g);
    rm_tree(d);
}

static void test_writer_roundtrip_32(void **state)
{
    (void)state;
    roundtrip(32);
}

static void test_writer_roundtrip_other_alignments(void **state)
{
    (void)state;
    roundtrip(64);
    roundtrip(8);
    roundtrip(4096);
}

/* The output file (issue: safe output files): the temporary is never a path
 * someone can plant (a symlink at "<out>.tmp" keeps its target), a
 * destination that is not a regular file is refused and left as it was, an
 * existing destination keeps its mode, and nothing temporary is left. */
static int dir_entries(const char *d)
{
    DIR *dh = opendir(d);
    int n = 0;
    struct dirent *de;
    while (dh && (de = readdir(dh)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) n++;
    if (dh) closedir(dh);
    return n;
}

static void test_writer_output_safety(void **state)
{
    (void)state;
    char *d = make_tmpdir();
    char out[600], tmp[620], victim[600], fifo[600];
    snprintf(out, sizeof out, "%s/m.gguf", d);
    snprintf(tmp, sizeof tmp, "%s/m.gguf.tmp", d);
    snprintf(victim, sizeof victim, "%s/victim", d);
    snprintf(fifo, sizeof fifo, "%s/fifo.gguf", d);
    FILE *f = fopen(victim, "w");
    assert_non_null(f);
    fputs("keep", f);
    fclose(f);
    assert_int_equal(symlink(victim, tmp), 0);
    vt_gguf_writer *w = vt_gguf_writer_new(32);
    assert_int_equal(vt_gguf_writer_set_str(w, "general.architecture", "none"), VT_OK);
    assert_int_equal(vt_gguf_writer_write(w, out), VT_OK);
    char buf[8] = {0};
    f = fopen(victim, "r");
    assert_non_null(f);
    assert_int_equal(fread(buf, 1, 4, f), 4);
    fclose(f);
    if (strcmp(buf, "keep")) fail_msg("the symlink planted at %s had its target %s overwritten", tmp, victim);
    struct stat st;
    assert_int_equal(lstat(out, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    /* the destination's mode is kept */
    assert_int_equal(chmod(out, 0600), 0);
    assert_int_equal(vt_gguf_writer_write(w, out), VT_OK);
    assert_int_equal(stat(out, &st), 0);
    if ((st.st_mode & 07777) != 0600)
        fail_msg("%s was 0600 and came back %04o", out, (unsigned)(st.st_mode & 07777));
    /* a FIFO (or any device) as the destination: refused by name, left a FIFO */
    assert_int_equal(mkfifo(fifo, 0600), 0);
    vt_clear_error();
    assert_int_not_equal(vt_gguf_writer_write(w, fifo), VT_OK);
    if (!strstr(vt_last_error(), fifo) || !strstr(vt_last_error(), "not a regular file"))
        fail_msg("refusal of a FIFO destination: %s", vt_last_error());
    assert_int_equal(lstat(fifo, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    /* only what the test made is left: m.gguf, m.gguf.tmp (the link), victim, fifo.gguf */
    assert_int_equal(dir_entries(d), 4);
    vt_gguf_writer_free(w);
    unlink(out);
    unlink(tmp);
    unlink(victim);
    unlink(fifo);
    rmdir(d);
    free(d);
}


/* -m FIFO is refused by its type, never waited on (issue 17) */
static void test_open_fifo_refused(void **state)
{
    (void)state;
    char *d = make_tmpdir();
    char f[600];
    snprintf(f, sizeof f, "%s/m.gguf", d);
    assert_int_equal(mkfifo(f, 0644), 0);
    vt_test_no_wait_begin("test_gguf: a FIFO given as the model");
    vt_gguf *g = NULL;
    vt_clear_error();
    assert_int_not_equal(vt_gguf_open(f, 0, &g), VT_OK);
    assert_null(g);
    if (!strstr(vt_last_error(), f) || !strstr(vt_last_error(), "not a regular file"))
        fail_msg("FIFO model: %s", vt_last_error());
    vt_test_no_wait_end();
    unlink(f);
    rmdir(d);
    free(d);
}


/* A mapped file truncated under its reader (issue 17): with the report
 * installed, the read that faults exits 1 with a message naming the file
 * and the tensor, never a bare SIGBUS death. Run in a child process. */
static void test_truncated_under_map_reported(void **state)
{
    (void)state;
    char *d = make_tmpdir();
    char path[600], errp[620];
    snprintf(path, sizeof path, "%s/m.gguf", d);
    snprintf(errp, sizeof errp, "%s/stderr", d);
    vt_gguf_writer *w = vt_gguf_writer_new(32);
    assert_int_equal(vt_gguf_writer_set_str(w, "general.architecture", "none"), VT_OK);
    static float big[1 << 18]; /* 1 MiB */
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) big[i] = (float)i;
    const int64_t ne[1] = {1 << 18};
    assert_int_equal(vt_gguf_writer_add_tensor(w, "blk.0.big", VT_TYPE_F32, 1, ne, big, sizeof big), VT_OK);
    assert_int_equal(vt_gguf_writer_write(w, path), VT_OK);
    vt_gguf_writer_free(w);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || dup2(fd, 2) < 0) _exit(10);
        vt_gguf *g;
        if (vt_gguf_open(path, 0, &g) != VT_OK) _exit(11);
        vt_gguf_sigbus_report_install();
        const vt_gguf_tensor *t = vt_gguf_find_tensor(g, "blk.0.big");
        if (!t || !t->data) _exit(12);
        if (truncate(path, 4096) != 0) _exit(13);
        volatile float sum = 0;
        const volatile float *p = t->data;
        for (size_t i = 0; i < (size_t)(t->nbytes / 4); i += 1024) sum += p[i];
        _exit(sum >= 0 ? 14 : 15); /* not reached: the read past the new end faults */
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    char *err = vt_test_read_file(errp, NULL);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 1)
        fail_msg("the child %s %d (stderr: %s)", WIFEXITED(status) ? "exited" : "died of signal",
                 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), err);
    if (!strstr(err, path) || !strstr(err, "blk.0.big") || !strstr(err, "changed while it was in use"))
        fail_msg("the SIGBUS report does not name the file and the tensor: %s", err);
    free(err);
    unlink(path);
    unlink(errp);
    rmdir(d);
    free(d);
}

/* RssFile of this process in KiB (/proc/self/status), or -1. */
static long rss_file_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long v = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "RssFile: %ld kB", &v) == 1) break;
    fclose(f);
    return v;
}

/* gguf_release_pages (ABI 1.6): a 32 MiB tensor read through the mapping
 * adds about 32 MiB to the resident set; released, the resident set drops by
 * about as much, and its bytes read back the same afterwards. Bad arguments
 * are refused by name. */
static void test_release_pages(void **state)
{
    (void)state;
    char *d = make_tmpdir();
    char path[600];
    snprintf(path, sizeof path, "%s/m.gguf", d);
    vt_gguf_writer *w = vt_gguf_writer_new(32);
    assert_int_equal(vt_gguf_writer_set_str(w, "general.architecture", "none"), VT_OK);
    const size_t n = 8u << 20; /* floats: 32 MiB */
    float *big = malloc(n * sizeof *big);
    assert_non_null(big);
    for (size_t i = 0; i < n; i++) big[i] = (float)(i % 100003);
    const int64_t ne[1] = {(int64_t)n};
    float small[3] = {1, 2, 3};
    const int64_t ne3[1] = {3};
    assert_int_equal(vt_gguf_writer_add_tensor(w, "small", VT_TYPE_F32, 1, ne3, small, sizeof small), VT_OK);
    assert_int_equal(vt_gguf_writer_add_tensor(w, "big", VT_TYPE_F32, 1, ne, big, n * sizeof *big), VT_OK);
    assert_int_equal(vt_gguf_writer_write(w, path), VT_OK);
    vt_gguf_writer_free(w);
    vt_gguf *g;
    assert_int_equal(vt_gguf_open(path, 0, &g), VT_OK);
    const vt_gguf_tensor *t = vt_gguf_find_tensor(g, "big");
    assert_non_null(t);
    assert_non_null(t->data);
    long r0 = rss_file_kib();
    if (r0 < 0) {
        print_message("[release_pages] no RssFile in /proc/self/status: the resident set is not checked\n");
    }
    volatile float sum = 0;
    const float *p = t->data;
    for (size_t i = 0; i < n; i += 1024) sum += p[i]; /* fault every page in */
    long r1 = rss_file_kib();
    assert_int_equal(vt_gguf_release_pages(g, t), VT_OK);
    long r2 = rss_file_kib();
    print_message("[release_pages] RssFile %ld -> %ld (read) -> %ld KiB (released)\n", r0, r1, r2);
    if (r0 >= 0) {
        assert_true(r1 - r0 >= 30 * 1024);
        assert_true(r1 - r2 >= 30 * 1024);
    }
    for (size_t i = 0; i < n; i++)
        if (p[i] != (float)(i % 100003)) fail_msg("element %zu after release: %g", i, p[i]);
    /* refusals */
    assert_int_equal(vt_gguf_release_pages(g, NULL), VT_ERR_INVALID_ARG);
    vt_gguf_tensor other = *t;
    assert_int_equal(vt_gguf_release_pages(g, &other), VT_ERR_INVALID_ARG);
    if (!strstr(vt_last_error(), "not a tensor of this file")) fail_msg("%s", vt_last_error());
    /* a tensor smaller than a page has no page of its own: nothing to do */
    assert_int_equal(vt_gguf_release_pages(g, vt_gguf_find_tensor(g, "small")), VT_OK);
    assert_true(vt_gguf_find_tensor(g, "small")->data != NULL);
    assert_true(((const float *)vt_gguf_find_tensor(g, "small")->data)[2] == 3.0f);
    vt_gguf_close(g);
    /* without a mapping */
    assert_int_equal(vt_gguf_open(path, VT_GGUF_NO_MMAP, &g), VT_OK);
    assert_int_equal(vt_gguf_release_pages(g, vt_gguf_find_tensor(g, "big")), VT_ERR_INVALID_ARG);
    if (!strstr(vt_last_error(), "not mapped")) fail_msg("%s", vt_last_error());
    vt_gguf_close(g);
    free(big);
    unlink(path);
    rmdir(d);
    free(d);
    (void)sum;
}

static void test_writer_errors(void **state)
{
    (void)state;
    assert_null(vt_gguf_writer_new(24));
    assert_non_null(strstr(vt_last_error(), "alignment"));
    vt_gguf_writer *w = vt_gguf_writer_new(0); /* 0 = default 32 */
    assert_non_null(w);
    assert_int_equal(vt_gguf_writer_set_u32(w, "", 1), VT_ERR_INVALID_ARG);
    assert_int_equal(vt_gguf_writer_set_u32(w, "general.alignment", 64), VT_OK);
    assert_int_equal(vt_gguf_writer_write(w, "/tmp/vt-never-written.gguf"), VT_ERR_INVALID_ARG);
    assert_non_null(strstr(vt_last_error(), "general.alignment"));
    assert_int_equal(vt_gguf_writer_set_u32(w, "general.alignment", 32), VT_OK);
    assert_int_equal(vt_gguf_writer_write(w, "/nonexistent-dir/x.gguf"), VT_ERR_IO);
    vt_gguf_writer_free(w);
    /* metadata-only file (no tensors) */
    char *d = make_tmpdir();
    char path[600];
    snprintf(path, sizeof path, "%s/empty.gguf", d);
    w = vt_gguf_writer_new(32);
    assert_int_equal(vt_gguf_writer_set_str(w, "general.architecture", "none"), VT_OK);
    assert_int_equal(vt_gguf_writer_write(w, path), VT_OK);
    vt_gguf_writer_free(w);
    vt_gguf *g;
    assert_int_equal(vt_gguf_open(path, 0, &g), VT_OK);
    assert_int_equal(vt_gguf_n_tensors(g), 0);
    assert_int_equal(vt_gguf_n_kv(g), 1);
    vt_gguf_close(g);
    rm_tree(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q8_0_file),
        cmocka_unit_test(test_bf16_file),
        cmocka_unit_test(test_split_from_first_shard),
        cmocka_unit_test(test_split_later_shard_refused),
        cmocka_unit_test(test_split_missing_shard),
        cmocka_unit_test(test_split_writer_made),
        cmocka_unit_test(test_gemma_and_quant_zoo),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_writer_roundtrip_32),
        cmocka_unit_test(test_writer_roundtrip_other_alignments),
        cmocka_unit_test(test_writer_errors),
        cmocka_unit_test(test_writer_output_safety),
        cmocka_unit_test(test_open_fifo_refused),
        cmocka_unit_test(test_truncated_under_map_reported),
        cmocka_unit_test(test_release_pages),
    };
    return vt_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
