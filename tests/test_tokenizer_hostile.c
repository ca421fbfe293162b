/*
 * test_tokenizer_hostile.c - small hand-made vocabularies written with
 * the GGUF writer, and hostile tokenizer metadata (one program with
 * test_tokenizer.c; see its header).
 */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"
#include "test_tokenizer.h"

#include "error.h"
#include "tokenizer.h"
#include "tokenizer_unicode.h"
#include "vt/gguf.h"

/* ------------------------------------------------------------------------ */
/* small hand-made vocabularies (writer) and hostile metadata                */
/* ------------------------------------------------------------------------ */

enum mutation {
    M_OK,
    M_NO_PRE,
    M_PRE_QWEN2,
    M_NO_MODEL,
    M_MODEL_LLAMA,
    M_MODEL_NOT_STR,
    M_PRE_UNKNOWN,
    M_NO_TOKENS,
    M_TOKENS_NOT_STR,
    M_TYPES_SHORT,
    M_TYPES_BAD_VALUE,
    M_TYPES_NOT_INT,
    M_SCORES_SHORT,
    M_NO_MERGES,
    M_MERGES_NOT_STR,
    M_MERGE_NO_SPACE,
    M_MERGE_LEADING_SPACE,
    M_MERGE_EMPTY_RIGHT,
    M_EOS_RANGE,
    M_BOS_RANGE,
    M_PAD_RANGE,
    M_EOS_STRING,
    M_ADD_BOS_NO_BOS,
    M_COUNT
};

#define EXTRA_TOKENS 9
static const char *const extra_tokens[EXTRA_TOKENS] = {"ab", "bc", "abc", "aa", "<|im_end|>",
                                                       "<tool>", "XYZ", "WX", "<|unused_1|>"};
static const int32_t extra_types[EXTRA_TOKENS] = {1, 1, 1, 1, 3, 4, 4, 4, 3};
/* ranks: "b c" before "a b"; "x y" makes "xy", which is no token */
static const char *const merges_ok[] = {"b c", "a b", "a bc", "a a", "x y"};

/* GPT-2 bytes_to_unicode, written here from §4.1 */
static void byte_char(int b, char out[4])
{
    int cp;
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) cp = b;
    else {
        int k = 0;
        for (int x = 0; x < b; x++)
            if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE)) k++;
        cp = 0x100 + k;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
    }
}

static void write_vocab(const char *path, enum mutation m)
{
    vt_gguf_writer *w = vt_gguf_writer_new(32);
    assert_non_null(w);
    char bytes[256][4];
    const char *tokens[256 + EXTRA_TOKENS];
    int32_t types[256 + EXTRA_TOKENS];
    for (int b = 0; b < 256; b++) {
        byte_char(b, bytes[b]);
        tokens[b] = bytes[b];
        types[b] = 1;
    }
    for (int k = 0; k < EXTRA_TOKENS; k++) {
        tokens[256 + k] = extra_tokens[k];
        types[256 + k] = extra_types[k];
    }
    const uint64_t nv = 256 + EXTRA_TOKENS;
    vt_gguf_writer_set_str(w, "general.architecture", "qwen35moe");
    if (m == M_MODEL_NOT_STR) vt_gguf_writer_set_u32(w, "tokenizer.ggml.model", 2);
    else if (m != M_NO_MODEL)
        vt_gguf_writer_set_str(w, "tokenizer.ggml.model", m == M_MODEL_LLAMA ? "llama" : "gpt2");
    if (m == M_PRE_UNKNOWN) vt_gguf_writer_set_str(w, "tokenizer.ggml.pre", "frobnicate");
    else if (m == M_PRE_QWEN2) vt_gguf_writer_set_str(w, "tokenizer.ggml.pre", "qwen2");
    else if (m != M_NO_PRE) vt_gguf_writer_set_str(w, "tokenizer.ggml.pre", "qwen35");
    if (m == M_TOKENS_NOT_STR) vt_gguf_writer_set_arr(w, "tokenizer.ggml.tokens", VT_GGUF_INT32, types, nv);
    else if (m != M_NO_TOKENS)
        vt_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tokens, nv);
    if (m == M_TYPES_BAD_VALUE) types[3] = 9;
    if (m == M_TYPES_NOT_INT) {
        float f[256 + EXTRA_TOKENS] = {0};
        vt_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", VT_GGUF_FLOAT32, f, nv);
    } else
        vt_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", VT_GGUF_INT32, types,
                               m == M_TYPES_SHORT ? nv - 1 : nv);
    if (m == M_SCORES_SHORT) {
        float f[10] = {0};
        vt_gguf_writer_set_arr(w, "tokenizer.ggml.scores", VT_GGUF_FLOAT32, f, 10);
    }
    const char *merges[5];
    memcpy(merges, merges_ok, sizeof merges);
    if (m == M_MERGE_NO_SPACE) merges[2] = "abc";
    if (m == M_MERGE_LEADING_SPACE) merges[2] = " abc";
    if (m == M_MERGE_EMPTY_RIGHT) merges[2] = "abc ";
    if (m == M_MERGES_NOT_STR) vt_gguf_writer_set_arr(w, "tokenizer.ggml.merges", VT_GGUF_INT32, types, 5);
    else if (m != M_NO_MERGES)
        vt_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, 5);
    if (m == M_EOS_STRING) vt_gguf_writer_set_str(w, "tokenizer.ggml.eos_token_id", "260");
    else
        vt_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id",
                               m == M_EOS_RANGE ? (uint32_t)nv : 256 + 4 /* <|im_end|> */);
    if (m == M_BOS_RANGE) vt_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 100000);
    if (m == M_PAD_RANGE) vt_gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)nv + 7);
    if (m == M_ADD_BOS_NO_BOS) vt_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", 1);
    vt_status st = vt_gguf_writer_write(w, path);
    if (st != VT_OK) fail_msg("writer: %s", vt_last_error());
    vt_gguf_writer_free(w);
}

static vt_status load_vocab(const char *path, vt_tokenizer **t)
{
    vt_gguf *g = NULL;
    vt_status st = vt_gguf_open(path, VT_GGUF_NO_MMAP, &g);
    if (st != VT_OK) fail_msg("open %s: %s", path, vt_last_error());
    vt_clear_error();
    st = vt_tokenizer_load(g, t);
    vt_gguf_close(g);
    return st;
}

static char tmpdir[256];

int setup_tmp(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "%s/vt-tok-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    return mkdtemp(tmpdir) ? 0 : -1;
}

int teardown_tmp(void **state)
{
    (void)state;
    char p[300];
    for (int m = 0; m < M_COUNT; m++) {
        snprintf(p, sizeof p, "%s/v%d.gguf", tmpdir, m);
        unlink(p);
    }
    rmdir(tmpdir);
    return 0;
}

static vt_tokenizer *small_vocab(enum mutation m)
{
    char p[300];
    snprintf(p, sizeof p, "%s/v%d.gguf", tmpdir, (int)m);
    write_vocab(p, m);
    vt_tokenizer *t = NULL;
    vt_status st = load_vocab(p, &t);
    if (st != VT_OK) fail_msg("load of mutation %d: %s", (int)m, vt_last_error());
    return t;
}

static void expect_ids(const vt_tokenizer *t, const char *text, int parse_special,
                       const int32_t *want, int64_t n_want)
{
    int32_t *ids;
    int64_t n;
    assert_int_equal(vt_tokenize(t, text, strlen(text), 0, parse_special, &ids, &n), VT_OK);
    char what[128];
    snprintf(what, sizeof what, "small vocab: '%s' parse_special=%d", text, parse_special);
    assert_ids(ids, n, want, n_want, what);
    free(ids);
}

void test_small_vocab_bpe(void **state)
{
    (void)state;
    vt_tokenizer *t = small_vocab(M_OK);
    const int32_t AB = 256, BC = 257, ABC = 258, AA = 259, IM_END = 260, TOOL = 261, XYZ = 262,
                  WX = 263, UNUSED = 264;
    /* byte tokens are in byte order at ids 0..255 of this vocab */
    /* rank order (§4.3): "b c" (0) before "a b" (1), then "a bc" */
    expect_ids(t, "abc", 0, (int32_t[]){ABC}, 1);
    /* ties: leftmost first */
    expect_ids(t, "aaa", 0, (int32_t[]){AA, 'a'}, 2);
    expect_ids(t, "aaaa", 0, (int32_t[]){AA, AA}, 2);
    /* a merge result that is no token: emitted as its single-byte tokens */
    expect_ids(t, "xy", 0, (int32_t[]){'x', 'y'}, 2);
    /* special partition (§3): USER_DEFINED always, CONTROL only with parse_special */
    expect_ids(t, "a<tool>b", 0, (int32_t[]){'a', TOOL, 'b'}, 3);
    expect_ids(t, "<|im_end|>", 1, (int32_t[]){IM_END}, 1);
    expect_ids(t, "<|im_end|>", 0, (int32_t[]){'<', '|', 'i', 'm', '_', 'e', 'n', 'd', '|', '>'}, 10);
    /* longest token first, not leftmost match: "WXYZ" -> W + XYZ */
    expect_ids(t, "WXYZ", 0, (int32_t[]){'W', XYZ}, 2);
    expect_ids(t, "WXWX", 0, (int32_t[]){WX, WX}, 2);
    /* pre-tokenization never crosses a special token */
    expect_ids(t, "ab<tool>c", 0, (int32_t[]){AB, TOOL, 'c'}, 3);
    expect_ids(t, "b<tool>c", 0, (int32_t[]){'b', TOOL, 'c'}, 3);
    (void)BC;

    assert_int_equal(vt_tokenizer_eos(t), IM_END);
    assert_true(vt_tokenizer_is_eog(t, IM_END));
    assert_false(vt_tokenizer_is_eog(t, TOOL));
    /* a CONTROL token named "unused" is still CONTROL to the file but hidden as text */
    assert_int_equal(vt_tokenizer_token_type(t, UNUSED), VT_TOKEN_CONTROL);
    char buf[32];
    assert_int_equal(vt_token_to_piece(t, UNUSED, 0, buf, sizeof buf), 0);
    assert_int_equal(vt_token_to_piece(t, TOOL, 0, buf, sizeof buf), 6);
    /* byte 0x0A as a token: "Ċ" decodes to '\n' */
    assert_int_equal(vt_token_to_piece(t, 0x0A, 0, buf, sizeof buf), 1);
    assert_int_equal(buf[0], '\n');
    vt_tokenizer_free(t);

    /* missing pre: qwen2-style split with a warning, still loads */
    t = small_vocab(M_NO_PRE);
    expect_ids(t, "abc", 0, (int32_t[]){ABC}, 1);
    vt_tokenizer_free(t);
    t = small_vocab(M_PRE_QWEN2);
    expect_ids(t, "abc", 0, (int32_t[]){ABC}, 1);
    vt_tokenizer_free(t);
}

/* Inputs found by tests/fuzz/ (bench/fuzz.sh); each once broke a sanitizer. */
void test_fuzz_regressions(void **state)
{
    (void)state;
    vt_tokenizer *t = small_vocab(M_OK);
    /* flush before any push: memcpy from the still-NULL pending buffer (UBSan nonnull) */
    vt_detok_stream *s = vt_detok_stream_new(t, 0);
    assert_non_null(s);
    size_t k = 99;
    const char *p = vt_detok_stream_flush(s, &k);
    assert_non_null(p);
    assert_int_equal(k, 0);
    vt_detok_stream_free(s);
    vt_tokenizer_free(t);
}

void test_hostile_metadata(void **state)
{
    (void)state;
    static const struct {
        enum mutation m;
        vt_status st;
        const char *key;  /* the message must name it */
        const char *also; /* and this, when set */
    } cases[] = {
        {M_NO_MODEL, VT_ERR_FORMAT, "tokenizer.ggml.model", NULL},
        {M_MODEL_LLAMA, VT_ERR_UNSUPPORTED, "tokenizer.ggml.model", "llama"},
        {M_MODEL_NOT_STR, VT_ERR_FORMAT, "tokenizer.ggml.model", NULL},
        {M_PRE_UNKNOWN, VT_ERR_UNSUPPORTED, "tokenizer.ggml.pre", "frobnicate"},
        {M_NO_TOKENS, VT_ERR_FORMAT, "tokenizer.ggml.tokens", NULL},
        {M_TOKENS_NOT_STR, VT_ERR_FORMAT, "tokenizer.ggml.tokens", NULL},
        {M_TYPES_SHORT, VT_ERR_FORMAT, "tokenizer.ggml.token_type", NULL},
        {M_TYPES_BAD_VALUE, VT_ERR_FORMAT, "tokenizer.ggml.token_type", NULL},
        {M_TYPES_NOT_INT, VT_ERR_FORMAT, "tokenizer.ggml.token_type", NULL},
        {M_SCORES_SHORT, VT_ERR_FORMAT, "tokenizer.ggml.scores", NULL},
        {M_NO_MERGES, VT_ERR_FORMAT, "tokenizer.ggml.merges", NULL},
        {M_MERGES_NOT_STR, VT_ERR_FORMAT, "tokenizer.ggml.merges", NULL},
        {M_MERGE_NO_SPACE, VT_ERR_FORMAT, "tokenizer.ggml.merges", "[2]"},
        {M_MERGE_LEADING_SPACE, VT_ERR_FORMAT, "tokenizer.ggml.merges", "[2]"},
        {M_MERGE_EMPTY_RIGHT, VT_ERR_FORMAT, "tokenizer.ggml.merges", "[2]"},
        {M_EOS_RANGE, VT_ERR_FORMAT, "tokenizer.ggml.eos_token_id", NULL},
        {M_BOS_RANGE, VT_ERR_FORMAT, "tokenizer.ggml.bos_token_id", NULL},
        {M_PAD_RANGE, VT_ERR_FORMAT, "tokenizer.ggml.padding_token_id", NULL},
        {M_EOS_STRING, VT_ERR_FORMAT, "tokenizer.ggml.eos_token_id", NULL},
        {M_ADD_BOS_NO_BOS, VT_ERR_FORMAT, "tokenizer.ggml.add_bos_token", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char p[300];
        snprintf(p, sizeof p, "%s/v%d.gguf", tmpdir, (int)cases[i].m);
        write_vocab(p, cases[i].m);
        vt_tokenizer *t = (vt_tokenizer *)1;
        vt_status st = load_vocab(p, &t);
        const char *msg = vt_last_error();
        if (st != cases[i].st || !strstr(msg, cases[i].key) ||
            (cases[i].also && !strstr(msg, cases[i].also)))
            fail_msg("mutation %d: got %d '%s', want %d naming %s", (int)cases[i].m, (int)st, msg,
                     (int)cases[i].st, cases[i].key);
        assert_null(t);
    }
}
