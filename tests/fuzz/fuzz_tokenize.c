/*
 * fuzz_tokenize.c - libFuzzer target for the tokenizer (core/src/text/tokenizer.c and tokenizer_load.c,
 * tokenizer_unicode.c) and the chat template renderer (chat_template.c).
 * Built only with -DVT_FUZZ=ON (tests/fuzz.cmake); run by bench/fuzz.sh.
 *
 * The tokenizer is loaded once from the GGUF named by env VT_FUZZ_MODEL
 * (default: the qwen35moe-tiny bf16 fixture). Each input is tokenized with
 * the four add_special/parse_special combinations, then detokenized both
 * with vt_token_to_piece and with the streaming detokenizer. Invariants
 * (tokenizers.md §2-§7), any violation aborts:
 *   - vt_tokenize succeeds on any bytes and every id is in [0, n_vocab);
 *   - add_special only adds BOS in front / EOS at the end of the plain ids;
 *   - the streamed text equals the concatenated pieces, and for valid UTF-8
 *     output every streamed chunk is valid UTF-8;
 *   - for valid NFC UTF-8 input holding no special-token text,
 *     detokenize(tokenize(x)) == x.
 * When the input holds NUL bytes it is also read as chat messages (segments
 * split at NUL, the first byte of each picking the role) and rendered with
 * the qwen35 template; the rendering is tokenized with parse_special.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "error.h"
#include "tokenizer.h"
#include "vt/gguf.h"

#ifndef VT_FUZZ_DEFAULT_MODEL
#define VT_FUZZ_DEFAULT_MODEL "../shared/fixtures/qwen35moe-tiny/gguf/qwen35moe-tiny-bf16.gguf"
#endif

#define CHECK(cond)                                                                          \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "fuzz_tokenize: check failed at line %d: %s (last error: %s)\n", \
                    __LINE__, #cond, vt_last_error());                                       \
            abort();                                                                         \
        }                                                                                    \
    } while (0)

static vt_tokenizer *g_tok;
static int64_t g_n_vocab;
/* texts that the special-token partition may match (§3), or that do not
 * render as themselves without special */
static char **g_special;
static size_t *g_special_len;
static size_t g_n_special;

static char *piece(int32_t id, int special, size_t *len)
{
    int64_t n = vt_token_to_piece(g_tok, id, special, NULL, 0);
    CHECK(n >= 0);
    char *p = malloc((size_t)n + 1);
    CHECK(p != NULL);
    CHECK(vt_token_to_piece(g_tok, id, special, p, (size_t)n + 1) == n);
    p[n] = 0;
    *len = (size_t)n;
    return p;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *path = getenv("VT_FUZZ_MODEL");
    if (!path || !*path) path = VT_FUZZ_DEFAULT_MODEL;
    vt_gguf *g = NULL;
    if (vt_gguf_open(path, VT_GGUF_NO_MMAP, &g) != VT_OK ||
        vt_tokenizer_load(g, &g_tok) != VT_OK) {
        fprintf(stderr, "fuzz_tokenize: cannot load the tokenizer of %s (set VT_FUZZ_MODEL): %s\n",
                path, vt_last_error());
        exit(2);
    }
    vt_gguf_close(g);
    g_n_vocab = vt_tokenizer_n_vocab(g_tok);
    g_special = calloc((size_t)g_n_vocab, sizeof *g_special);
    g_special_len = calloc((size_t)g_n_vocab, sizeof *g_special_len);
    CHECK(g_special && g_special_len);
    for (int32_t id = 0; id < g_n_vocab; id++) {
        size_t l0, l1;
        char *p0 = piece(id, 0, &l0), *p1 = piece(id, 1, &l1);
        int special = vt_tokenizer_token_type(g_tok, id) != VT_TOKEN_NORMAL || l0 != l1 ||
                      memcmp(p0, p1, l0);
        free(p0);
        if (special && l1) {
            g_special[g_n_special] = p1;
            g_special_len[g_n_special++] = l1;
        } else
            free(p1);
    }
    fprintf(stderr, "fuzz_tokenize: %s: %lld tokens, %zu special texts\n", path,
            (long long)g_n_vocab, g_n_special);
    return 0;
}

typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

static void buf_add(buf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
        CHECK(b->p != NULL);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

/* Strict UTF-8 (no overlong forms, surrogates or code points above U+10FFFF). */
static int valid_utf8(const char *s, size_t n)
{
    utf8proc_int32_t cp;
    size_t i = 0;
    while (i < n) {
        utf8proc_ssize_t l =
            utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (l <= 0) return 0;
        i += (size_t)l;
    }
    return 1;
}

static int is_nfc(const char *s, size_t n)
{
    utf8proc_uint8_t *d = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &d,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    int same = r >= 0 && (size_t)r == n && !memcmp(d, s, n);
    free(d);
    return same;
}

static int has_special_text(const char *s, size_t n)
{
    for (size_t k = 0; k < g_n_special; k++)
        if (memmem(s, n, g_special[k], g_special_len[k])) return 1;
    return 0;
}

/* Detokenize ids plainly and streamed; both must agree. Returns the text. */
static void detok(const int32_t *ids, int64_t n, int special, buf *plain)
{
    buf streamed = {0};
    vt_detok_stream *ds = vt_detok_stream_new(g_tok, special);
    CHECK(ds != NULL);
    buf_add(plain, "", 0);
    buf_add(&streamed, "", 0);
    for (int64_t i = 0; i < n; i++) {
        size_t l;
        char *p = piece(ids[i], special, &l);
        buf_add(plain, p, l);
        free(p);
        const char *c = vt_detok_stream_push(ds, ids[i], &l);
        CHECK(c != NULL);
        buf_add(&streamed, c, l);
    }
    size_t l;
    const char *c = vt_detok_stream_flush(ds, &l);
    CHECK(c != NULL);
    buf_add(&streamed, c, l);
    vt_detok_stream_free(ds);
    CHECK(streamed.n == plain->n && !memcmp(streamed.p, plain->p, plain->n));
    free(streamed.p);
}

/* Every chunk the stream hands out is valid UTF-8 when the whole text is. */
static void check_stream_chunks(const int32_t *ids, int64_t n, int special)
{
    vt_detok_stream *ds = vt_detok_stream_new(g_tok, special);
    CHECK(ds != NULL);
    for (int64_t i = 0; i < n; i++) {
        size_t l;
        const char *c = vt_detok_stream_push(ds, ids[i], &l);
        CHECK(valid_utf8(c, l));
    }
    size_t l;
    const char *c = vt_detok_stream_flush(ds, &l);
    CHECK(valid_utf8(c, l));
    vt_detok_stream_free(ds);
}

static void tokenize_checked(const char *s, size_t n, int add_special, int parse_special,
                             int32_t **ids, int64_t *n_ids)
{
    vt_clear_error();
    vt_status st = vt_tokenize(g_tok, s, n, add_special, parse_special, ids, n_ids);
    CHECK(st == VT_OK);
    CHECK(*n_ids >= 0 && (*n_ids == 0) == (*ids == NULL));
    for (int64_t i = 0; i < *n_ids; i++) CHECK((*ids)[i] >= 0 && (*ids)[i] < g_n_vocab);
}

static void fuzz_chat(const uint8_t *data, size_t size)
{
    static const char *const roles[5] = {"system", "user", "assistant", "tool", "developer"};
    vt_chat_msg msgs[16];
    char *owned[16];
    size_t n = 0, pos = 0;
    while (pos < size && n < 16) {
        const uint8_t *z = memchr(data + pos, 0, size - pos);
        size_t end = z ? (size_t)(z - data) : size;
        if (end > pos) {
            msgs[n].role = roles[data[pos] % 5];
            owned[n] = strndup((const char *)data + pos + 1, end - pos - 1);
            CHECK(owned[n] != NULL);
            msgs[n].content = owned[n];
            n++;
        }
        pos = end + 1;
    }
    char *out = NULL;
    vt_status st = vt_chat_render_ex("qwen35", msgs, n, (int)(size & 1),
                                     (size & 2) ? VT_CHAT_NO_THINKING : 0, &out);
    CHECK(st == VT_OK || st == VT_ERR_INVALID_ARG);
    CHECK((st == VT_OK) == (out != NULL));
    if (out) {
        int32_t *ids;
        int64_t n_ids;
        tokenize_checked(out, strlen(out), 0, 1, &ids, &n_ids);
        free(ids);
        free(out);
    }
    for (size_t i = 0; i < n; i++) free(owned[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    const int clean = valid_utf8(s, size) && is_nfc(s, size) && !has_special_text(s, size);
    const int bos = vt_tokenizer_add_bos(g_tok) ? vt_tokenizer_bos(g_tok) : -1;
    const int32_t eos = vt_tokenizer_eos(g_tok);
    for (int parse_special = 0; parse_special < 2; parse_special++) {
        int32_t *plain_ids, *ids;
        int64_t n_plain, n;
        tokenize_checked(s, size, 0, parse_special, &plain_ids, &n_plain);
        tokenize_checked(s, size, 1, parse_special, &ids, &n);
        /* add_special: [BOS] + plain ids + [EOS] */
        int64_t head = (bos >= 0 && n > 0 && ids[0] == bos) ? 1 : 0;
        CHECK(head == (bos >= 0));
        CHECK(n - head >= n_plain && n - head - n_plain <= 1);
        if (n_plain) CHECK(!memcmp(ids + head, plain_ids, (size_t)n_plain * sizeof *ids));
        if (n - head > n_plain) CHECK(ids[n - 1] == eos);
        free(ids);

        for (int special = 0; special < 2; special++) {
            buf text = {0};
            detok(plain_ids, n_plain, special, &text);
            if (clean) {
                if (text.n != size || memcmp(text.p, s, size)) {
                    fprintf(stderr, "fuzz_tokenize: round trip (parse_special=%d special=%d) "
                                    "gave %zu bytes for %zu\n",
                            parse_special, special, text.n, size);
                    abort();
                }
            }
            if (valid_utf8(text.p, text.n)) check_stream_chunks(plain_ids, n_plain, special);
            free(text.p);
        }
        free(plain_ids);
    }
    if (memchr(data, 0, size)) fuzz_chat(data, size);
    return 0;
}
