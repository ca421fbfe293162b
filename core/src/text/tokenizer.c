/*
 * tokenizer.c - tokenize, detokenize and the streaming detokenizer over the
 * vocabularies tokenizer_load.c reads from GGUF tokenizer.ggml.* metadata
 * (with every count, id and merge checked). Spec: tokenizers.md of the
 * project's format notes.
 *
 * Kinds handled (dispatch on tokenizer.ggml.model):
 * - "gpt2": byte-level BPE with the "qwen35" and "qwen2" pre-tokenizers and
 *   the Qwen family's NFC normalization (§4);
 * - "gemma4": SentencePiece-style BPE over raw UTF-8 characters, spaces
 *   escaped as U+2581, split only at newline runs, <0xHH> byte fallback (§5).
 * Both share the vocab/merge tables, the special-token partition (§3), the
 * merge loop (§4.3), the EOG set (§9) and the (streaming) detokenizer (§7);
 * they differ in how a RAW fragment becomes BPE symbols, in the fallback of a
 * piece that is not a token, and in how a NORMAL token renders.
 * The Unicode parts (UTF-8, classes, NFC, the pre-tokenizer rule list, the
 * byte map) live in tokenizer_unicode.c; chat templates in chat_template.c.
 *
 * Data layout: every string the BPE sees (vocab texts, both parts of every
 * merge and the merged result) is interned once in an arena; a string hash
 * maps text -> intern id, an intern id maps to its vocab id (or -1), and a
 * pair hash maps (left intern id, right intern id) -> (rank, result intern
 * id). BPE then works on intern ids with a priority queue keyed by
 * (rank, position), O(n log n) per chunk (§4.3).
 *
 * A loaded vt_tokenizer is immutable: any number of threads may tokenize and
 * detokenize with it at once.
 */
#include "tokenizer.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "vocab_tables.h"
#include "tokenizer_unicode.h"

/* ------------------------------------------------------------------------ */
/* tokenize                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct idvec {
    int32_t *v;
    size_t n, cap;
} idvec;

static vt_status idvec_push(idvec *o, int32_t id)
{
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        int32_t *v = realloc(o->v, cap * sizeof *v);
        if (!v) {
            vt_set_error_oom(cap * sizeof *v, "tokenize: token ids");
            return VT_ERR_OUT_OF_MEMORY;
        }
        o->v = v;
        o->cap = cap;
    }
    o->v[o->n++] = id;
    return VT_OK;
}

/* A fragment of the input: RAW text (id < 0) or one special token (§3). */
typedef struct frag {
    size_t off, len;
    int32_t id;
} frag;

typedef struct fragvec {
    frag *v;
    size_t n, cap;
} fragvec;

static vt_status fragvec_push(fragvec *f, size_t off, size_t len, int32_t id)
{
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        frag *v = realloc(f->v, cap * sizeof *v);
        if (!v) {
            vt_set_error_oom(cap * sizeof *v, "tokenize: fragments");
            return VT_ERR_OUT_OF_MEMORY;
        }
        f->v = v;
        f->cap = cap;
    }
    f->v[f->n++] = (frag){off, len, id};
    return VT_OK;
}

/* 1 when [at, at + n) overlaps one of the spans */
static int in_spans(const vt_text_span *sp, size_t n_sp, size_t at, size_t n)
{
    for (size_t i = 0; i < n_sp; i++)
        if (at < sp[i].off + sp[i].len && sp[i].off < at + n) return 1;
    return 0;
}

/* §3: split RAW fragments at every special token, longest token first; a
 * CONTROL/UNKNOWN token overlapping one of the plain spans is not matched
 * (vt_tokenize_plain). */
static vt_status partition_special(const vt_tokenizer *t, const char *text, size_t len,
                                   int parse_special, const vt_text_span *plain, size_t n_plain,
                                   fragvec *frags)
{
    vt_status st = fragvec_push(frags, 0, len, -1);
    if (st != VT_OK) return st;
    fragvec next = {0};
    for (size_t k = 0; k < t->n_special; k++) {
        int32_t id = t->special[k];
        if (!parse_special && (t->tok_attr[id] & (ATTR_CONTROL | ATTR_UNKNOWN))) continue;
        uint32_t iid = t->tok_str[id];
        const char *tok = tok_str_ptr(t, iid);
        size_t tl = t->str_len[iid];
        if (!memmem(text, len, tok, tl)) continue; /* cannot occur in any fragment */
        const int guarded = n_plain && (t->tok_attr[id] & (ATTR_CONTROL | ATTR_UNKNOWN));
        next.n = 0;
        for (size_t f = 0; f < frags->n && st == VT_OK; f++) {
            frag fr = frags->v[f];
            if (fr.id >= 0) {
                st = fragvec_push(&next, fr.off, fr.len, fr.id);
                continue;
            }
            size_t pos = fr.off, end = fr.off + fr.len, from = pos;
            while (st == VT_OK) {
                const char *m = end - from >= tl ? memmem(text + from, end - from, tok, tl) : NULL;
                if (!m) {
                    if (end > pos) st = fragvec_push(&next, pos, end - pos, -1);
                    break;
                }
                size_t at = (size_t)(m - text);
                if (guarded && in_spans(plain, n_plain, at, tl)) { /* text here */
                    from = at + 1;
                    continue;
                }
                if (at > pos) st = fragvec_push(&next, pos, at - pos, -1);
                if (st == VT_OK) st = fragvec_push(&next, at, tl, id);
                pos = from = at + tl;
            }
        }
        if (st != VT_OK) break;
        fragvec tmp = *frags;
        *frags = next;
        next = tmp;
    }
    free(next.v);
    return st;
}

/* Scratch of one tokenize call. */
typedef struct bpe_sym {
    int32_t prev, next;
    uint32_t iid; /* NONE: a byte whose character is in no token or merge */
} bpe_sym;

typedef struct bpe_cand {
    uint32_t rank, left, right, a, b, result;
} bpe_cand;

typedef struct work {
    const vt_tokenizer *t;
    const uint32_t *cps; /* code points of the current RAW fragment (gemma4: spaces escaped) */
    idvec *out;
    unsigned char *bytes;
    size_t bytes_cap;
    bpe_sym *sym;
    size_t sym_cap;
    bpe_cand *heap;
    size_t heap_n, heap_cap;
} work;

static int cand_less(const bpe_cand *x, const bpe_cand *y)
{
    return x->rank < y->rank || (x->rank == y->rank && x->left < y->left);
}

static void heap_push(work *w, bpe_cand c)
{
    size_t i = w->heap_n++;
    w->heap[i] = c;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&w->heap[i], &w->heap[p])) break;
        bpe_cand tmp = w->heap[p];
        w->heap[p] = w->heap[i];
        w->heap[i] = tmp;
        i = p;
    }
}

static bpe_cand heap_pop(work *w)
{
    bpe_cand top = w->heap[0];
    w->heap[0] = w->heap[--w->heap_n];
    size_t i = 0, n = w->heap_n;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && cand_less(&w->heap[l], &w->heap[m])) m = l;
        if (r < n && cand_less(&w->heap[r], &w->heap[m])) m = r;
        if (m == i) break;
        bpe_cand tmp = w->heap[m];
        w->heap[m] = w->heap[i];
        w->heap[i] = tmp;
        i = m;
    }
    return top;
}

static void try_pair(work *w, int32_t l, int32_t r)
{
    uint32_t a = w->sym[l].iid, b = w->sym[r].iid;
    if (a == NONE || b == NONE) return;
    const pair_slot *p = tok_pair_find(w->t, a, b);
    if (!p) return;
    heap_push(w, (bpe_cand){p->rank, (uint32_t)l, (uint32_t)r, a, b, p->result});
}

/* Emit the id(s) of one final piece (§4.3: unknown piece -> its single-byte tokens, if any). */
static vt_status emit_piece(work *w, uint32_t iid, unsigned char raw_byte)
{
    const vt_tokenizer *t = w->t;
    if (iid != NONE && t->str_vocab[iid] >= 0) return idvec_push(w->out, t->str_vocab[iid]);
    char buf[4];
    const char *s;
    size_t n;
    if (iid != NONE) {
        s = tok_str_ptr(t, iid);
        n = t->str_len[iid];
    } else {
        n = (size_t)vt_utf8_encode(vt_byte_to_cp(raw_byte), buf);
        s = buf;
    }
    for (size_t k = 0; k < n; k++) {
        uint32_t one = tok_str_lookup(t, s + k, 1);
        if (one != NONE && t->str_vocab[one] >= 0) {
            vt_status st = idvec_push(w->out, t->str_vocab[one]);
            if (st != VT_OK) return st;
        }
    }
    return VT_OK;
}

/* Scratch for a chunk of n_cps code points: up to 4 bytes/symbols each and
 * 3 heap entries per symbol (initial pairs + two per merge). */
static vt_status work_reserve(work *w, size_t n_cps)
{
    if (n_cps > (size_t)INT32_MAX / 4) {
        vt_set_error("tokenize: a pre-tokenizer chunk of %zu characters is too long", n_cps);
        return VT_ERR_RANGE;
    }
    size_t need = n_cps * 4;
    if (need <= w->bytes_cap) return VT_OK;
    unsigned char *b = realloc(w->bytes, need);
    bpe_sym *s = b ? realloc(w->sym, need * sizeof *s) : NULL;
    if (b) w->bytes = b;
    if (s) w->sym = s;
    bpe_cand *h = s ? realloc(w->heap, need * 3 * sizeof *h) : NULL;
    if (h) w->heap = h;
    if (!b || !s || !h) {
        size_t bytes = !b ? need : !s ? need * sizeof *s : need * 3 * sizeof *h;
        vt_set_error_oom(bytes, "tokenize: BPE %s for a %zu-character chunk",
                         !b ? "bytes" : !s ? "symbols" : "candidate heap", n_cps);
        return VT_ERR_OUT_OF_MEMORY;
    }
    w->bytes_cap = w->sym_cap = need;
    w->heap_cap = need * 3;
    return VT_OK;
}

/* §4.3 on w->sym[0..n) (iid set, linked left to right): repeatedly merge the
 * adjacent pair of lowest rank, leftmost on ties. Afterwards the surviving
 * symbols are linked from index 0 via next. Shared by both kinds. */
static void bpe_merge(work *w, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        w->sym[k].prev = (int32_t)k - 1;
        w->sym[k].next = k + 1 < n ? (int32_t)k + 1 : -1;
    }
    w->heap_n = 0;
    for (size_t k = 0; k + 1 < n; k++) try_pair(w, (int32_t)k, (int32_t)k + 1);
    while (w->heap_n) {
        bpe_cand c = heap_pop(w);
        bpe_sym *L = &w->sym[c.left], *R = &w->sym[c.right];
        /* stale: either side merged since (its id changed) or no longer adjacent */
        if (L->iid != c.a || R->iid != c.b || L->next != (int32_t)c.right) continue;
        L->iid = c.result;
        L->next = R->next;
        if (R->next >= 0) w->sym[R->next].prev = (int32_t)c.left;
        R->iid = NONE;
        R->next = R->prev = -2; /* dead */
        if (L->prev >= 0) try_pair(w, L->prev, (int32_t)c.left);
        if (L->next >= 0) try_pair(w, (int32_t)c.left, L->next);
    }
}

/* Pre-tokenizer callback: byte-encode one chunk and BPE-merge it (§4.1, §4.3). */
static vt_status bpe_chunk(void *ctx, size_t start, size_t n_cps)
{
    work *w = ctx;
    const vt_tokenizer *t = w->t;
    vt_status st = work_reserve(w, n_cps);
    if (st != VT_OK) return st;
    size_t nb = 0;
    for (size_t k = 0; k < n_cps; k++) nb += (size_t)vt_utf8_encode(w->cps[start + k], (char *)w->bytes + nb);
    if (nb == 1) return emit_piece(w, t->byte_sym[w->bytes[0]], w->bytes[0]);

    for (size_t k = 0; k < nb; k++) w->sym[k].iid = t->byte_sym[w->bytes[k]];
    bpe_merge(w, nb);
    for (int32_t k = 0; k >= 0; k = w->sym[k].next) {
        st = emit_piece(w, w->sym[k].iid, w->bytes[k]);
        if (st != VT_OK) return st;
    }
    return VT_OK;
}

/* gemma4 step 5 (§5): the token of s[0..n), else one <0xHH> token per byte
 * (a byte without such a token is dropped). */
static vt_status emit_gemma4(work *w, uint32_t iid, const char *s, size_t n)
{
    const vt_tokenizer *t = w->t;
    if (iid != NONE && t->str_vocab[iid] >= 0) return idvec_push(w->out, t->str_vocab[iid]);
    for (size_t k = 0; k < n; k++) {
        int32_t id = t->byte_tok[(unsigned char)s[k]];
        if (id < 0) continue;
        vt_status st = idvec_push(w->out, id);
        if (st != VT_OK) return st;
    }
    return VT_OK;
}

/* gemma4 steps 3-5 (§5) on one chunk: w->cps[start..start+n_cps), either a run
 * of '\n' or a run without '\n'; spaces already escaped as U+2581. Symbols are
 * the UTF-8 characters (no byte map). */
static vt_status gemma4_chunk(work *w, size_t start, size_t n_cps)
{
    const vt_tokenizer *t = w->t;
    const uint32_t *cp = w->cps + start;
    vt_status st = work_reserve(w, n_cps);
    if (st != VT_OK) return st;
    char *bytes = (char *)w->bytes;
    if (cp[0] == '\n') { /* newline shortcut: a run of '\n' that is a token as a whole */
        memset(bytes, '\n', n_cps);
        uint32_t iid = tok_str_lookup(t, bytes, n_cps);
        if (iid != NONE && t->str_vocab[iid] >= 0) return idvec_push(w->out, t->str_vocab[iid]);
    }
    /* symbol k = character k */
    size_t off = 0;
    for (size_t k = 0; k < n_cps; k++) {
        size_t l = (size_t)vt_utf8_encode(cp[k], bytes + off);
        w->sym[k].iid = tok_str_lookup(t, bytes + off, l);
        off += l;
    }
    bpe_merge(w, n_cps);
    for (int32_t k = 0; k >= 0; k = w->sym[k].next) {
        uint32_t iid = w->sym[k].iid;
        if (iid != NONE) {
            st = emit_gemma4(w, iid, tok_str_ptr(t, iid), t->str_len[iid]);
        } else { /* a character that is no token nor merge part: never merged */
            char c[4];
            st = emit_gemma4(w, NONE, c, (size_t)vt_utf8_encode(cp[k], c));
        }
        if (st != VT_OK) return st;
    }
    return VT_OK;
}

/* gemma4 steps 1-2 (§5) on one RAW fragment's code points: every U+0020
 * becomes U+2581 (no dummy prefix), then chunks are the maximal runs of '\n'
 * and of everything else ('\r' is an ordinary character). */
static vt_status gemma4_fragment(work *w, uint32_t *cps, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (cps[k] == 0x20) cps[k] = 0x2581;
    w->cps = cps;
    size_t k = 0;
    while (k < n) {
        size_t e = k + 1;
        const int nl = cps[k] == '\n';
        while (e < n && (cps[e] == '\n') == nl) e++;
        vt_status st = gemma4_chunk(w, k, e - k);
        if (st != VT_OK) return st;
        k = e;
    }
    return VT_OK;
}

static vt_status tokenize(const vt_tokenizer *t, const char *text, size_t len, int add_special,
                          int parse_special, const vt_text_span *plain, size_t n_plain,
                          int32_t **ids, int64_t *n_ids)
{
    if (!t || !ids || !n_ids || (!text && len)) {
        vt_set_error("vt_tokenize: NULL argument");
        return VT_ERR_INVALID_ARG;
    }
    *ids = NULL;
    *n_ids = 0;
    idvec out = {0};
    fragvec frags = {0};
    work w = {.t = t, .out = &out};
    uint32_t *cps = NULL;
    vt_status st = VT_OK;

    if (add_special && t->add_bos) st = idvec_push(&out, t->bos);
    if (st == VT_OK && len)
        st = partition_special(t, text, len, parse_special, plain, n_plain, &frags);
    for (size_t f = 0; st == VT_OK && f < frags.n; f++) {
        if (frags.v[f].id >= 0) {
            st = idvec_push(&out, frags.v[f].id);
            continue;
        }
        size_t n_cps;
        st = vt_utf8_decode(text + frags.v[f].off, frags.v[f].len, &cps, &n_cps);
        if (st == VT_OK && t->nfc) st = vt_unicode_nfc(&cps, &n_cps);
        if (st == VT_OK && t->kind == KIND_GEMMA4) {
            st = gemma4_fragment(&w, cps, n_cps);
        } else if (st == VT_OK) {
            w.cps = cps;
            st = vt_pretok_split(t->pretok, cps, n_cps, bpe_chunk, &w);
        }
        free(cps);
        cps = NULL;
    }
    if (st == VT_OK && add_special && t->add_eos) st = idvec_push(&out, t->eos);

    free(frags.v);
    free(w.bytes);
    free(w.sym);
    free(w.heap);
    if (st != VT_OK) {
        free(out.v);
        return st;
    }
    if (out.n == 0) {
        free(out.v);
        out.v = NULL;
    }
    *ids = out.v;
    *n_ids = (int64_t)out.n;
    return VT_OK;
}

vt_status vt_tokenize(const vt_tokenizer *t, const char *text, size_t len, int add_special,
                      int parse_special, int32_t **ids, int64_t *n_ids)
{
    return tokenize(t, text, len, add_special, parse_special, NULL, 0, ids, n_ids);
}

vt_status vt_tokenize_plain(const vt_tokenizer *t, const char *text, size_t len, int add_special,
                            const vt_text_span *plain, size_t n_plain, int32_t **ids,
                            int64_t *n_ids)
{
    if (n_plain && !plain) {
        vt_set_error("vt_tokenize_plain: NULL spans");
        return VT_ERR_INVALID_ARG;
    }
    return tokenize(t, text, len, add_special, 1, plain, n_plain, ids, n_ids);
}

/* ------------------------------------------------------------------------ */
/* detokenize (§7)                                                           */
/* ------------------------------------------------------------------------ */

static void put(char *buf, size_t cap, size_t *pos, const void *src, size_t n)
{
    if (*pos < cap) memcpy(buf + *pos, src, n < cap - *pos ? n : cap - *pos);
    *pos += n;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

int64_t vt_token_to_piece(const vt_tokenizer *t, int32_t id, int special, char *buf, size_t cap)
{
    if (!t || id < 0 || id >= t->n_vocab) return -1;
    if (!buf) cap = 0;
    const uint8_t attr = t->tok_attr[id];
    const uint32_t iid = t->tok_str[id];
    const char *s = tok_str_ptr(t, iid);
    const size_t n = t->str_len[iid];
    size_t pos = 0;

    if (attr & (ATTR_CONTROL | ATTR_UNKNOWN)) {
        if (special) put(buf, cap, &pos, s, n);
    } else if (attr & ATTR_USER_DEFINED) {
        put(buf, cap, &pos, s, n);
    } else if ((attr & ATTR_NORMAL) && t->kind == KIND_GEMMA4) {
        /* SPM-style: every U+2581 back to a space */
        size_t i = 0, run = 0;
        while (i < n) {
            if (n - i >= 3 && !memcmp(s + i, "\xE2\x96\x81", 3)) {
                put(buf, cap, &pos, s + run, i - run);
                put(buf, cap, &pos, " ", 1);
                i += 3;
                run = i;
            } else {
                i++;
            }
        }
        put(buf, cap, &pos, s + run, n - run);
    } else if (attr & ATTR_NORMAL) {
        /* byte-level BPE: each character back to its byte (inverse of §4.1) */
        const unsigned char *u = (const unsigned char *)s;
        size_t i = 0;
        while (i < n) {
            uint32_t cp;
            int l = vt_utf8_next(u + i, n - i, &cp);
            int b = l ? vt_cp_to_byte(cp) : -1;
            if (b >= 0) {
                unsigned char c = (unsigned char)b;
                put(buf, cap, &pos, &c, 1);
            } else {
                char tmp[32] = "[UNK_BYTE_0x";
                size_t tl = strlen(tmp);
                for (int k = 0; k < (l ? l : 1); k++)
                    tl += (size_t)snprintf(tmp + tl, sizeof tmp - tl, "%02x", u[i + (size_t)k]);
                tmp[tl++] = ']';
                put(buf, cap, &pos, tmp, tl);
            }
            i += l ? (size_t)l : 1;
        }
    } else if (attr & ATTR_BYTE) {
        if (n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' && hexval(s[3]) >= 0 && hexval(s[4]) >= 0) {
            unsigned char c = (unsigned char)(hexval(s[3]) * 16 + hexval(s[4]));
            put(buf, cap, &pos, &c, 1);
        }
    }
    return (int64_t)pos;
}

/* ---- streaming ---- */

struct vt_detok_stream {
    const vt_tokenizer *t;
    int special;
    char *pending; /* bytes not yet returned (an incomplete UTF-8 character at the end) */
    size_t n_pending, cap_pending;
    char *out;
    size_t cap_out;
};

vt_detok_stream *vt_detok_stream_new(const vt_tokenizer *t, int special)
{
    if (!t) return NULL;
    vt_detok_stream *s = vt_calloc_named(1, sizeof *s, "detokenizer stream");
    if (!s) return NULL;
    s->t = t;
    s->special = special;
    return s;
}

void vt_detok_stream_free(vt_detok_stream *s)
{
    if (!s) return;
    free(s->pending);
    free(s->out);
    free(s);
}

static int reserve(char **p, size_t *cap, size_t need)
{
    if (need <= *cap) return 1;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    char *q = vt_realloc_named(*p, c, "detokenizer stream buffer");
    if (!q) return 0;
    *p = q;
    *cap = c;
    return 1;
}

/* Bytes at the end of p[0..n) that start a UTF-8 character still missing bytes. */
static size_t incomplete_tail(const unsigned char *p, size_t n)
{
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        unsigned char b = p[n - k];
        if ((b & 0xC0) == 0x80) continue; /* continuation: look further back */
        size_t want = (b >= 0xC2 && b <= 0xDF) ? 2 : (b >= 0xE0 && b <= 0xEF) ? 3
                                                   : (b >= 0xF0 && b <= 0xF4) ? 4
                                                                              : 1;
        return want > k ? k : 0;
    }
    return 0;
}

const char *vt_detok_stream_push(vt_detok_stream *s, int32_t id, size_t *n)
{
    *n = 0;
    if (!s) return "";
    int64_t len = vt_token_to_piece(s->t, id, s->special, NULL, 0);
    if (len < 0) return ""; /* an invalid id adds nothing */
    if (!reserve(&s->pending, &s->cap_pending, s->n_pending + (size_t)len + 1)) return "";
    vt_token_to_piece(s->t, id, s->special, s->pending + s->n_pending, (size_t)len);
    s->n_pending += (size_t)len;
    size_t hold = incomplete_tail((const unsigned char *)s->pending, s->n_pending);
    size_t give = s->n_pending - hold;
    if (!reserve(&s->out, &s->cap_out, give + 1)) return "";
    memcpy(s->out, s->pending, give);
    s->out[give] = 0;
    memmove(s->pending, s->pending + give, hold);
    s->n_pending = hold;
    *n = give;
    return s->out;
}

const char *vt_detok_stream_flush(vt_detok_stream *s, size_t *n)
{
    *n = 0;
    if (!s) return "";
    if (!reserve(&s->out, &s->cap_out, s->n_pending + 1)) return "";
    if (s->n_pending) memcpy(s->out, s->pending, s->n_pending); /* pending is NULL before any push */
    s->out[s->n_pending] = 0;
    *n = s->n_pending;
    s->n_pending = 0;
    return s->out;
}
