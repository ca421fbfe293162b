/*
 * fuzz_vocab.c - libFuzzer target for tokenizer loading and BPE on hostile
 * vocabularies (core/src/text/tokenizer_load.c, tokenizer.c). fuzz_gguf reaches the tokenizer only
 * through byte mutations of whole GGUF files, which rarely keep a file valid;
 * here the input describes a vocabulary and vt's writer makes the GGUF, so
 * every input reaches vt_tokenizer_load. Built only with -DVT_FUZZ=ON.
 *
 * Input: byte 0 = flags, bytes 1 and 2 = bos and eos id (counted after the
 * byte-map tokens when those are added), then lines ('\n'):
 *   token lines until an empty line: first byte '0'..'7' is the token type
 *     (7 is out of range on purpose), the rest the token text;
 *   merge lines until the next empty line ("A B" as in the file);
 *   everything after that: the text to tokenize.
 * flags: bit 0 add the 256 byte-map tokens first, bit 1 pre = qwen2,
 * bit 2 no pre, bit 3 write bos_token_id, bit 4 write eos_token_id,
 * bit 5 add_bos_token, bit 6 add_eos_token, bit 7 no token_type array.
 * A loaded tokenizer must tokenize the text (all four add_special /
 * parse_special combinations) into in-range ids, and the streaming
 * detokenizer must agree with vt_token_to_piece. For valid UTF-8 text of at
 * most REF_MAX_TEXT bytes holding no special-token text, the ids must also
 * equal those of a naive reference BPE written here from tokenizers.md §4.3
 * (repeatedly merge the adjacent pair of lowest rank, leftmost first; a final
 * piece that is no token becomes its single-byte tokens), run on the same
 * NFC code points and pre-tokenizer chunks (vt_pretok_split, tested on its
 * own in test_tokenizer.c).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <utf8proc.h>

#include "error.h"
#include "tokenizer.h"
#include "tokenizer_unicode.h"
#include "vt/gguf.h"
#include "vt/types.h"

#define CHECK(cond)                                                                          \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "fuzz_vocab: check failed at line %d: %s (last error: %s)\n",    \
                    __LINE__, #cond, vt_last_error());                                       \
            abort();                                                                         \
        }                                                                                    \
    } while (0)

#define MAX_ITEMS 4096
#define REF_MAX_TEXT 512                /* bytes of text checked against the reference */
#define REF_MAX_BYTES (3 * REF_MAX_TEXT) /* after NFC (UAX #15: at most 3x in UTF-8) */

static char g_dir[256], g_path[320];

static void cleanup(void)
{
    unlink(g_path);
    rmdir(g_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/vt-fuzz-vocab-XXXXXX", base);
    if (!mkdtemp(g_dir)) abort();
    snprintf(g_path, sizeof g_path, "%s/v.gguf", g_dir);
    atexit(cleanup);
    vt_log_set_level(VT_LOG_ERROR);
    return 0;
}

/* GPT-2 bytes_to_unicode (tokenizers.md §4.1), written here independently. */
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

/* Next line of [*p, end) as a NUL-terminated copy; NULL at the end of the input. */
static char *next_line(const uint8_t **p, const uint8_t *end, size_t *len)
{
    if (*p >= end) return NULL;
    const uint8_t *nl = memchr(*p, '\n', (size_t)(end - *p));
    size_t n = nl ? (size_t)(nl - *p) : (size_t)(end - *p);
    char *s = strndup((const char *)*p, n);
    CHECK(s != NULL);
    *len = strlen(s); /* a NUL inside the line ends it */
    *p += n + (nl ? 1 : 0);
    return s;
}

/* A growing byte buffer (doubling: per-token reallocs made long texts quadratic). */
typedef struct bytes {
    char *p;
    size_t n, cap;
} bytes;

static char *bytes_room(bytes *b, size_t more)
{
    if (b->n + more + 1 > b->cap) {
        b->cap = 2 * (b->n + more + 1);
        b->p = realloc(b->p, b->cap);
        CHECK(b->p != NULL);
    }
    return b->p + b->n;
}

static void use_tokenizer(const vt_tokenizer *t, const char *text, size_t len)
{
    const int64_t nv = vt_tokenizer_n_vocab(t);
    for (int k = 0; k < 4; k++) {
        int32_t *ids = NULL;
        int64_t n = 0;
        vt_clear_error();
        vt_status st = vt_tokenize(t, text, len, k & 1, k >> 1, &ids, &n);
        CHECK(st == VT_OK);
        for (int64_t i = 0; i < n; i++) CHECK(ids[i] >= 0 && ids[i] < nv);
        bytes plain = {0}, stream = {0};
        vt_detok_stream *ds = vt_detok_stream_new(t, k >> 1);
        CHECK(ds != NULL);
        size_t c;
        for (int64_t i = 0; i < n; i++) {
            int64_t l = vt_token_to_piece(t, ids[i], k >> 1, NULL, 0);
            CHECK(l >= 0);
            CHECK(vt_token_to_piece(t, ids[i], k >> 1, bytes_room(&plain, (size_t)l), (size_t)l) == l);
            plain.n += (size_t)l;
            const char *s = vt_detok_stream_push(ds, ids[i], &c);
            memcpy(bytes_room(&stream, c), s, c);
            stream.n += c;
        }
        const char *s = vt_detok_stream_flush(ds, &c);
        memcpy(bytes_room(&stream, c), s, c);
        stream.n += c;
        CHECK(stream.n == plain.n && (!plain.n || !memcmp(stream.p, plain.p, plain.n)));
        vt_detok_stream_free(ds);
        free(plain.p);
        free(stream.p);
        free(ids);
    }
    for (int32_t id = 0; id < nv; id++) {
        char buf[16];
        CHECK(vt_token_to_piece(t, id, id & 1, buf, sizeof buf) >= 0);
        (void)vt_tokenizer_is_eog(t, id);
    }
}

/* ---- reference BPE (tokenizers.md §4.3), deliberately naive ---- */

/* A byte-string -> value map (open addressing, FNV-1a), for the reference only. */
typedef struct smap {
    char **key;
    size_t *len;
    long *val;
    size_t cap;
} smap;

static uint64_t smap_hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static void smap_init(smap *m, size_t n)
{
    m->cap = 64;
    while (m->cap < 2 * n + 2) m->cap *= 2;
    m->key = calloc(m->cap, sizeof *m->key);
    m->len = calloc(m->cap, sizeof *m->len);
    m->val = calloc(m->cap, sizeof *m->val);
    CHECK(m->key && m->len && m->val);
}

static void smap_free(smap *m)
{
    for (size_t i = 0; i < m->cap; i++) free(m->key[i]);
    free(m->key);
    free(m->len);
    free(m->val);
}

/* Slot of s: its own, or the empty one where it would go. */
static size_t smap_slot(const smap *m, const char *s, size_t n)
{
    size_t h = (size_t)smap_hash(s, n) & (m->cap - 1);
    while (m->key[h] && (m->len[h] != n || memcmp(m->key[h], s, n))) h = (h + 1) & (m->cap - 1);
    return h;
}

/* Set s -> v; when s is present, replace only if `replace`. */
static void smap_put(smap *m, const char *s, size_t n, long v, int replace)
{
    size_t h = smap_slot(m, s, n);
    if (m->key[h]) {
        if (replace) m->val[h] = v;
        return;
    }
    m->key[h] = malloc(n + 1);
    CHECK(m->key[h] != NULL);
    memcpy(m->key[h], s, n);
    m->len[h] = n;
    m->val[h] = v;
}

static long smap_get(const smap *m, const char *s, size_t n)
{
    size_t h = smap_slot(m, s, n);
    return m->key[h] ? m->val[h] : -1;
}

/* The vocabulary as the reference sees it. Texts hold no NUL (lines end at
 * one), so a merge is keyed "A\0B". */
typedef struct vocab_desc {
    char **tok;
    const int32_t *types;
    size_t n_tok;
    char **merge;
    size_t n_merge;
    smap ids;   /* text -> last id with that text */
    smap ranks; /* "A\0B" -> first rank */
} vocab_desc;

static void ref_build(vocab_desc *v)
{
    smap_init(&v->ids, v->n_tok);
    for (size_t i = 0; i < v->n_tok; i++)
        smap_put(&v->ids, v->tok[i], strlen(v->tok[i]), (long)i, 1);
    smap_init(&v->ranks, v->n_merge);
    for (size_t r = 0; r < v->n_merge; r++) {
        /* "A B" splits at the first space at index >= 1 (§1) */
        char *m = v->merge[r];
        size_t ml = strlen(m);
        char *sp = ml > 1 ? memchr(m + 1, ' ', ml - 1) : NULL;
        if (!sp) continue;
        *sp = '\0';
        smap_put(&v->ranks, m, ml, (long)r, 0);
        *sp = ' ';
    }
}

static int32_t ref_find(const vocab_desc *v, const char *s, size_t n)
{
    return (int32_t)smap_get(&v->ids, s, n);
}

/* Rank of merging a[0..na) with b[0..nb), -1 when no merge names the pair. */
static long ref_rank(const vocab_desc *v, const char *a, size_t na, const char *b, size_t nb)
{
    static char key[2 * REF_MAX_BYTES * 2 + 2];
    CHECK(na + nb + 1 <= sizeof key);
    memcpy(key, a, na);
    key[na] = '\0';
    memcpy(key + na + 1, b, nb);
    return smap_get(&v->ranks, key, na + nb + 1);
}

typedef struct idlist {
    int32_t *v;
    size_t n, cap;
} idlist;

static void ids_push(idlist *l, int32_t id)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
        CHECK(l->v != NULL);
    }
    l->v[l->n++] = id;
}

typedef struct ref_ctx {
    const vocab_desc *v;
    const uint32_t *cps;
    idlist *out;
} ref_ctx;

static vt_status ref_chunk(void *ctx, size_t start, size_t n_cps)
{
    ref_ctx *c = ctx;
    /* byte-encode: every UTF-8 byte of the chunk as its byte-map character (§4.1) */
    static char enc[REF_MAX_BYTES * 2 + 4];
    static size_t sym_off[REF_MAX_BYTES + 1];
    size_t n_sym = 0, n = 0;
    for (size_t k = 0; k < n_cps; k++) {
        char u[4];
        int l = vt_utf8_encode(c->cps[start + k], u);
        CHECK(n_sym + (size_t)l <= REF_MAX_BYTES);
        for (int j = 0; j < l; j++) {
            sym_off[n_sym++] = n;
            byte_char((unsigned char)u[j], enc + n);
            n += strlen(enc + n);
        }
    }
    sym_off[n_sym] = n;
    /* symbols are ranges [sym_off[i], sym_off[i + 1]) of enc; merge until no pair has a rank */
    for (;;) {
        long best = -1;
        size_t at = 0;
        for (size_t i = 0; i + 1 < n_sym; i++) {
            long r = ref_rank(c->v, enc + sym_off[i], sym_off[i + 1] - sym_off[i],
                              enc + sym_off[i + 1], sym_off[i + 2] - sym_off[i + 1]);
            if (r >= 0 && (best < 0 || r < best)) {
                best = r;
                at = i;
            }
        }
        if (best < 0) break;
        memmove(sym_off + at + 1, sym_off + at + 2, (n_sym - at - 1) * sizeof *sym_off);
        n_sym--;
    }
    for (size_t i = 0; i < n_sym; i++) {
        const char *s = enc + sym_off[i];
        size_t l = sym_off[i + 1] - sym_off[i];
        int32_t id = ref_find(c->v, s, l);
        if (id >= 0) {
            ids_push(c->out, id);
            continue;
        }
        for (size_t j = 0; j < l; j++) { /* a piece that is no token: its single-byte tokens */
            int32_t one = ref_find(c->v, s + j, 1);
            if (one >= 0) ids_push(c->out, one);
        }
    }
    return VT_OK;
}

/* Reference ids of text (valid UTF-8) with the tokenizer's NFC and pre-tokenizer. */
static void ref_tokenize(const vocab_desc *v, uint8_t flags, const char *text, size_t len,
                         idlist *out)
{
    const utf8proc_option_t opt =
        (flags & 4) ? UTF8PROC_STABLE : UTF8PROC_STABLE | UTF8PROC_COMPOSE; /* no pre: no NFC */
    utf8proc_ssize_t cap = (utf8proc_ssize_t)len + 1, n;
    utf8proc_int32_t *buf = NULL;
    for (;;) { /* the decomposition may be longer than the text */
        buf = realloc(buf, (size_t)cap * sizeof *buf);
        CHECK(buf != NULL);
        n = utf8proc_decompose((const utf8proc_uint8_t *)text, (utf8proc_ssize_t)len, buf, cap,
                               opt);
        CHECK(n >= 0);
        if (n <= cap) break;
        cap = n;
    }
    if (!(flags & 4)) n = utf8proc_reencode(buf, n, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    CHECK(n >= 0);
    /* utf8proc_reencode leaves UTF-8 bytes in buf: decode them back to code points */
    uint32_t *cps = NULL;
    size_t n_cps = 0;
    if (!(flags & 4)) {
        CHECK(vt_utf8_decode((const char *)buf, (size_t)n, &cps, &n_cps) == VT_OK);
    } else {
        cps = malloc(((size_t)n + 1) * sizeof *cps);
        CHECK(cps != NULL);
        for (utf8proc_ssize_t i = 0; i < n; i++) cps[i] = (uint32_t)buf[i];
        n_cps = (size_t)n;
    }
    free(buf);
    ref_ctx c = {v, cps, out};
    const vt_pretok kind = (flags & 6) ? VT_PRETOK_QWEN2 : VT_PRETOK_QWEN35;
    CHECK(vt_pretok_split(kind, cps, n_cps, ref_chunk, &c) == VT_OK);
    free(cps);
}

/* Does text hold the text of a token the special partition may match (§3)? */
static int has_special_text(const vt_tokenizer *t, const vocab_desc *v, const char *text, size_t len)
{
    for (size_t i = 0; i < v->n_tok; i++) {
        size_t l = strlen(v->tok[i]);
        if (!l || !memmem(text, len, v->tok[i], l)) continue;
        int ty = vt_tokenizer_token_type(t, (int32_t)i);
        if (ty == VT_TOKEN_UNKNOWN || ty == VT_TOKEN_CONTROL || ty == VT_TOKEN_USER_DEFINED) return 1;
        /* end-of-generation tokens become CONTROL (§9): shown only with special */
        if (vt_token_to_piece(t, (int32_t)i, 0, NULL, 0) == 0 &&
            vt_token_to_piece(t, (int32_t)i, 1, NULL, 0) > 0)
            return 1;
    }
    return 0;
}

static int valid_utf8(const char *s, size_t n)
{
    utf8proc_int32_t cp;
    for (size_t i = 0; i < n;) {
        utf8proc_ssize_t l =
            utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (l <= 0) return 0;
        i += (size_t)l;
    }
    return 1;
}

static void check_reference(const vt_tokenizer *t, vocab_desc *v, uint8_t flags,
                            const char *text, size_t len)
{
    if (len > REF_MAX_TEXT || !valid_utf8(text, len) || has_special_text(t, v, text, len)) return;
    idlist want = {0};
    ref_build(v);
    ref_tokenize(v, flags, text, len, &want);
    for (int parse_special = 0; parse_special < 2; parse_special++) {
        int32_t *ids;
        int64_t n;
        CHECK(vt_tokenize(t, text, len, 0, parse_special, &ids, &n) == VT_OK);
        int same = (size_t)n == want.n && (!n || !memcmp(ids, want.v, want.n * sizeof *ids));
        if (!same) {
            fprintf(stderr, "fuzz_vocab: vt gave %lld ids, the reference BPE %zu:\n",
                    (long long)n, want.n);
            for (size_t i = 0; i < (size_t)n || i < want.n; i++)
                fprintf(stderr, "  [%zu] vt %d ref %d\n", i, i < (size_t)n ? ids[i] : -1,
                        i < want.n ? want.v[i] : -1);
            abort();
        }
        free(ids);
    }
    free(want.v);
    smap_free(&v->ids);
    smap_free(&v->ranks);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3) return 0;
    const uint8_t flags = data[0], bos = data[1], eos = data[2];
    const uint8_t *p = data + 3, *end = data + size;
    char *tok[256 + MAX_ITEMS], *merge[MAX_ITEMS], bytes[256][4];
    int32_t types[256 + MAX_ITEMS];
    size_t n_tok = 0, n_merge = 0, len;
    if (flags & 1)
        for (int b = 0; b < 256; b++) {
            byte_char(b, bytes[b]);
            tok[n_tok] = bytes[b];
            types[n_tok++] = VT_TOKEN_NORMAL;
        }
    const size_t n_bytes = n_tok;
    char *line;
    while (n_tok < 256 + MAX_ITEMS && (line = next_line(&p, end, &len))) {
        if (!len) {
            free(line);
            break;
        }
        types[n_tok] = (line[0] - '0') & 7;
        memmove(line, line + 1, len); /* drop the type byte, keep the NUL */
        tok[n_tok++] = line;
    }
    while (n_merge < MAX_ITEMS && (line = next_line(&p, end, &len))) {
        if (!len) {
            free(line);
            break;
        }
        merge[n_merge++] = line;
    }

    vt_gguf_writer *w = vt_gguf_writer_new(32);
    CHECK(w != NULL);
    vt_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    if (!(flags & 4)) vt_gguf_writer_set_str(w, "tokenizer.ggml.pre", (flags & 2) ? "qwen2" : "qwen35");
    vt_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tok, n_tok);
    if (!(flags & 128))
        vt_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", VT_GGUF_INT32, types, n_tok);
    vt_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)merge, n_merge);
    if (flags & 8) vt_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)(n_bytes + bos));
    if (flags & 16) vt_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)(n_bytes + eos));
    if (flags & 32) vt_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", 1);
    if (flags & 64) vt_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", 1);
    vt_status st = vt_gguf_writer_write(w, g_path);
    vt_gguf_writer_free(w);
    vt_tokenizer *t = NULL;
    if (st == VT_OK) { /* the writer may refuse e.g. a token text */
        vt_gguf *g = NULL;
        CHECK(vt_gguf_open(g_path, VT_GGUF_NO_MMAP, &g) == VT_OK);
        vt_clear_error();
        st = vt_tokenizer_load(g, &t);
        vt_gguf_close(g);
        if (st != VT_OK)
            CHECK(t == NULL && (st == VT_ERR_FORMAT || st == VT_ERR_UNSUPPORTED) &&
                  *vt_last_error());
    }
    if (t) {
        const char *text = (const char *)p;
        const size_t text_len = (size_t)(end - p);
        use_tokenizer(t, text, text_len);
        vocab_desc v = {tok, types, n_tok, merge, n_merge, {0}, {0}};
        check_reference(t, &v, flags, text, text_len);
        vt_tokenizer_free(t);
    }
    for (size_t i = n_bytes; i < n_tok; i++) free(tok[i]);
    for (size_t i = 0; i < n_merge; i++) free(merge[i]);
    return 0;
}
