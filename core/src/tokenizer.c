/*
 * tokenizer.c - the vocabularies read from GGUF tokenizer.ggml.* metadata:
 * load (with every count, id and merge checked), tokenize, detokenize and the
 * streaming detokenizer. Spec: ../shared/spec/tokenizers.md.
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
#include "tokenizer_unicode.h"

#define NONE UINT32_MAX

/* Token attributes (bit set; §1.1). */
enum {
    ATTR_NORMAL = 1u << 0,
    ATTR_UNKNOWN = 1u << 1,
    ATTR_CONTROL = 1u << 2,
    ATTR_USER_DEFINED = 1u << 3,
    ATTR_UNUSED = 1u << 4,
    ATTR_BYTE = 1u << 5,
    ATTR_EOG = 1u << 6,     /* end of generation (§9) */
    ATTR_SUPPRESS = 1u << 7 /* listed in tokenizer.ggml.suppress_tokens (§1) */
};

/* Tokenizer kinds (tokenizer.ggml.model). */
typedef enum tok_kind {
    KIND_GPT2 = 0,  /* byte-level BPE (§4) */
    KIND_GEMMA4 = 1 /* SPM-style BPE over raw UTF-8 with byte fallback (§5) */
} tok_kind;

typedef struct pair_slot {
    uint64_t key; /* (left << 32) | right, UINT64_MAX = empty */
    uint32_t rank;
    uint32_t result;
} pair_slot;

struct vt_tokenizer {
    tok_kind kind;
    vt_pretok pretok; /* gpt2 only */
    int nfc; /* NFC-normalize RAW fragments before splitting (Qwen family, §4) */
    int64_t n_vocab;

    /* interned strings */
    char *arena;
    size_t arena_len, arena_cap;
    size_t *str_off;
    uint32_t *str_len;
    int32_t *str_vocab; /* vocab id of the string, -1 when it is not a token */
    uint32_t n_str, cap_str;
    uint64_t *str_hash; /* open addressing: (hash >> 32) << 32 | (intern id + 1), 0 = empty */
    uint32_t str_hash_cap;

    /* merges */
    pair_slot *pairs;
    uint64_t pair_cap, n_pairs;

    /* vocab */
    uint32_t *tok_str; /* vocab id -> intern id */
    uint8_t *tok_type; /* tokenizer.ggml.token_type as stored (0..6) */
    uint8_t *tok_attr; /* ATTR_* */

    uint32_t byte_sym[256]; /* gpt2: intern id of the byte-map character of each byte, NONE if absent */
    int32_t byte_tok[256];  /* gemma4: vocab id of the token <0xHH> of each byte, -1 if absent */
    char *chat_template;    /* tokenizer.chat_template, NULL when absent */

    int32_t *special; /* CONTROL/USER_DEFINED/UNKNOWN ids, longest text first (§1.1) */
    size_t n_special;

    int32_t bos, eos;
    int add_bos, add_eos;
};

/* ------------------------------------------------------------------------ */
/* string interning                                                          */
/* ------------------------------------------------------------------------ */

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    h ^= h >> 32; /* fold the well-mixed high half into the slot bits */
    h *= 0x94D049BB133111EBull;
    return h ^ (h >> 29);
}

static const char *str_ptr(const vt_tokenizer *t, uint32_t iid) { return t->arena + t->str_off[iid]; }

/* Slot tag: the hash's high half, compared before touching the string. */
static uint64_t hash_tag(uint64_t h) { return h & 0xFFFFFFFF00000000ull; }

static uint32_t str_lookup_h(const vt_tokenizer *t, const char *s, size_t n, uint64_t hash)
{
    if (!t->str_hash_cap) return NONE;
    uint32_t mask = t->str_hash_cap - 1;
    for (uint32_t h = (uint32_t)hash & mask;; h = (h + 1) & mask) {
        uint64_t v = t->str_hash[h];
        if (!v) return NONE;
        if (hash_tag(v) != hash_tag(hash)) continue;
        uint32_t iid = (uint32_t)v - 1;
        if (t->str_len[iid] == n && !memcmp(str_ptr(t, iid), s, n)) return iid;
    }
}

static uint32_t str_lookup(const vt_tokenizer *t, const char *s, size_t n)
{
    return str_lookup_h(t, s, n, hash_bytes(s, n));
}

/* Grow the string hash to at least min_cap slots (a power of two). */
static vt_status str_hash_grow(vt_tokenizer *t, uint64_t min_cap)
{
    uint64_t cap = t->str_hash_cap ? (uint64_t)t->str_hash_cap * 2 : 1024;
    while (cap < min_cap) cap *= 2;
    if (cap > (1u << 31)) {
        vt_set_error("tokenizer: too many distinct strings (%" PRIu32 ")", t->n_str);
        return VT_ERR_FORMAT;
    }
    uint64_t *h = calloc(cap, sizeof *h);
    if (!h) {
        vt_set_error_oom(cap * sizeof *h, "tokenizer: string hash of %" PRIu64 " slots", cap);
        return VT_ERR_OUT_OF_MEMORY;
    }
    for (uint32_t i = 0; i < t->str_hash_cap; i++) {
        uint64_t v = t->str_hash[i];
        if (!v) continue;
        uint32_t iid = (uint32_t)v - 1;
        uint64_t hash = hash_bytes(str_ptr(t, iid), t->str_len[iid]);
        uint32_t s = (uint32_t)hash & (cap - 1);
        while (h[s]) s = (s + 1) & (cap - 1);
        h[s] = v;
    }
    free(t->str_hash);
    t->str_hash = h;
    t->str_hash_cap = (uint32_t)cap;
    return VT_OK;
}

/* Intern s[0..n); *iid gets its id (existing or new). */
static vt_status str_intern(vt_tokenizer *t, const char *s, size_t n, uint32_t *iid)
{
    const uint64_t hash = hash_bytes(s, n);
    uint32_t found = str_lookup_h(t, s, n, hash);
    if (found != NONE) {
        *iid = found;
        return VT_OK;
    }
    if (n > UINT32_MAX / 4) {
        vt_set_error("tokenizer: a string of %zu bytes is too long", n);
        return VT_ERR_FORMAT;
    }
    if ((uint64_t)(t->n_str + 1) * 2 > t->str_hash_cap) {
        vt_status st = str_hash_grow(t, 0);
        if (st != VT_OK) return st;
    }
    if (t->n_str == t->cap_str) {
        uint32_t cap = t->cap_str ? t->cap_str * 2 : 1024;
        size_t *off = realloc(t->str_off, (size_t)cap * sizeof *off);
        if (off) t->str_off = off;
        uint32_t *len = realloc(t->str_len, (size_t)cap * sizeof *len);
        if (len) t->str_len = len;
        int32_t *voc = realloc(t->str_vocab, (size_t)cap * sizeof *voc);
        if (voc) t->str_vocab = voc;
        if (!off || !len || !voc) {
            size_t bytes = (size_t)cap * (!off ? sizeof *off : !len ? sizeof *len : sizeof *voc);
            vt_set_error_oom(bytes, "tokenizer: string table %s of %" PRIu32 " entries",
                             !off ? "offsets" : !len ? "lengths" : "token ids", cap);
            return VT_ERR_OUT_OF_MEMORY;
        }
        t->cap_str = cap;
    }
    if (t->arena_len + n + 1 > t->arena_cap) {
        size_t cap = t->arena_cap ? t->arena_cap : 65536;
        while (cap < t->arena_len + n + 1) cap *= 2;
        char *a = realloc(t->arena, cap);
        if (!a) {
            vt_set_error_oom(cap, "tokenizer: token text arena");
            return VT_ERR_OUT_OF_MEMORY;
        }
        t->arena = a;
        t->arena_cap = cap;
    }
    uint32_t id = t->n_str++;
    t->str_off[id] = t->arena_len;
    t->str_len[id] = (uint32_t)n;
    t->str_vocab[id] = -1;
    if (n) memcpy(t->arena + t->arena_len, s, n);
    t->arena[t->arena_len + n] = 0;
    t->arena_len += n + 1;
    uint32_t mask = t->str_hash_cap - 1;
    uint32_t h = (uint32_t)hash & mask;
    while (t->str_hash[h]) h = (h + 1) & mask;
    t->str_hash[h] = hash_tag(hash) | (id + 1u);
    *iid = id;
    return VT_OK;
}

/* ------------------------------------------------------------------------ */
/* merge pairs                                                               */
/* ------------------------------------------------------------------------ */

/* splitmix64 finalizer: every key bit reaches the low bits used as the slot */
static uint64_t pair_hash(uint64_t key)
{
    key ^= key >> 30;
    key *= 0xBF58476D1CE4E5B9ull;
    key ^= key >> 27;
    key *= 0x94D049BB133111EBull;
    return key ^ (key >> 31);
}

static const pair_slot *pair_find(const vt_tokenizer *t, uint32_t a, uint32_t b)
{
    if (!t->pair_cap) return NULL;
    uint64_t key = ((uint64_t)a << 32) | b, mask = t->pair_cap - 1;
    for (uint64_t h = pair_hash(key) & mask;; h = (h + 1) & mask) {
        const pair_slot *p = &t->pairs[h];
        if (p->key == key) return p;
        if (p->key == UINT64_MAX) return NULL;
    }
}

static vt_status pair_table_init(vt_tokenizer *t, uint64_t n_merges)
{
    uint64_t cap = 1024;
    while (cap < n_merges * 2) cap *= 2;
    t->pairs = malloc(cap * sizeof *t->pairs);
    if (!t->pairs) {
        vt_set_error_oom(cap * (uint64_t)sizeof *t->pairs,
                         "tokenizer: merges table of %" PRIu64 " slots", cap);
        return VT_ERR_OUT_OF_MEMORY;
    }
    for (uint64_t i = 0; i < cap; i++) t->pairs[i].key = UINT64_MAX;
    t->pair_cap = cap;
    return VT_OK;
}

/* Insert unless present: the first (lowest) rank of a pair wins. */
static void pair_insert(vt_tokenizer *t, uint32_t a, uint32_t b, uint32_t rank, uint32_t result)
{
    uint64_t key = ((uint64_t)a << 32) | b, mask = t->pair_cap - 1;
    for (uint64_t h = pair_hash(key) & mask;; h = (h + 1) & mask) {
        pair_slot *p = &t->pairs[h];
        if (p->key == key) return;
        if (p->key == UINT64_MAX) {
            p->key = key;
            p->rank = rank;
            p->result = result;
            t->n_pairs++;
            return;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* load                                                                      */
/* ------------------------------------------------------------------------ */

void vt_tokenizer_free(vt_tokenizer *t)
{
    if (!t) return;
    free(t->arena);
    free(t->str_off);
    free(t->str_len);
    free(t->str_vocab);
    free(t->str_hash);
    free(t->pairs);
    free(t->tok_str);
    free(t->tok_type);
    free(t->tok_attr);
    free(t->special);
    free(t->chat_template);
    free(t);
}

/* Optional token-id key: absent -> *out unchanged; present -> must name a token. */
static vt_status read_token_id(const vt_gguf *g, const char *key, int64_t n_vocab, int32_t *out)
{
    int64_t v;
    vt_status st = vt_gguf_get_i64(g, key, &v);
    if (st == VT_ERR_NOT_FOUND) return VT_OK;
    if (st != VT_OK) return st;
    if (v < 0 || v >= n_vocab) {
        vt_set_error("tokenizer: %s = %" PRId64 " is outside the vocabulary (0..%" PRId64 ")", key,
                     v, n_vocab - 1);
        return VT_ERR_FORMAT;
    }
    *out = (int32_t)v;
    return VT_OK;
}

/* Optional bool key. */
static vt_status read_bool(const vt_gguf *g, const char *key, int *out)
{
    int v;
    vt_status st = vt_gguf_get_bool(g, key, &v);
    if (st == VT_ERR_NOT_FOUND) return VT_OK;
    if (st != VT_OK) return st;
    *out = v != 0;
    return VT_OK;
}

static int is_integer_type(vt_gguf_type ty)
{
    switch (ty) {
    case VT_GGUF_UINT8:
    case VT_GGUF_INT8:
    case VT_GGUF_UINT16:
    case VT_GGUF_INT16:
    case VT_GGUF_UINT32:
    case VT_GGUF_INT32:
    case VT_GGUF_UINT64:
    case VT_GGUF_INT64: return 1;
    default: return 0;
    }
}

static vt_status load_vocab(vt_tokenizer *t, const vt_gguf *g)
{
    const char *key = "tokenizer.ggml.tokens";
    vt_gguf_type ty;
    uint64_t count;
    const void *data;
    vt_status st = vt_gguf_get_arr(g, key, &ty, &count, &data);
    if (st == VT_ERR_NOT_FOUND) {
        vt_set_error("tokenizer: %s is missing", key);
        return VT_ERR_FORMAT;
    }
    if (st != VT_OK) return st;
    if (ty != VT_GGUF_STRING) {
        vt_set_error("tokenizer: %s is an array of %s, expected strings", key, vt_gguf_type_name(ty));
        return VT_ERR_FORMAT;
    }
    if (count == 0 || count > (uint64_t)INT32_MAX) {
        vt_set_error("tokenizer: %s has %" PRIu64 " entries (allowed 1..%d)", key, count, INT32_MAX);
        return VT_ERR_FORMAT;
    }
    t->n_vocab = (int64_t)count;
    /* room for the vocab and the few merge strings that are no token, without rehashing */
    if ((st = str_hash_grow(t, count * 2 + count / 4)) != VT_OK) return st;
    if (!(t->tok_str = vt_malloc_named(count * sizeof *t->tok_str, "tokenizer: vocab strings")) ||
        !(t->tok_type = vt_malloc_named(count, "tokenizer: vocab token types")) ||
        !(t->tok_attr = vt_malloc_named(count, "tokenizer: vocab token attributes")))
        return VT_ERR_OUT_OF_MEMORY;
    for (uint64_t i = 0; i < count; i++) {
        vt_gguf_str s;
        if ((st = vt_gguf_get_arr_str(g, key, i, &s)) != VT_OK) return st;
        uint32_t iid;
        if ((st = str_intern(t, s.ptr, (size_t)s.len, &iid)) != VT_OK) {
            vt_error_prefix("%s[%" PRIu64 "]", key, i);
            return st;
        }
        t->tok_str[i] = iid;
        t->str_vocab[iid] = (int32_t)i; /* a duplicate text maps to its last id (as llama.cpp) */
        t->tok_type[i] = VT_TOKEN_NORMAL;
    }

    key = "tokenizer.ggml.token_type";
    st = vt_gguf_get_arr(g, key, &ty, &count, &data);
    if (st == VT_OK) {
        if (!is_integer_type(ty)) {
            vt_set_error("tokenizer: %s is an array of %s, expected integers", key,
                         vt_gguf_type_name(ty));
            return VT_ERR_FORMAT;
        }
        if (count != (uint64_t)t->n_vocab) {
            vt_set_error("tokenizer: %s has %" PRIu64 " entries but tokenizer.ggml.tokens has %" PRId64,
                         key, count, t->n_vocab);
            return VT_ERR_FORMAT;
        }
        for (uint64_t i = 0; i < count; i++) {
            int64_t v;
            if ((st = vt_gguf_get_arr_i64(g, key, i, &v)) != VT_OK) return st;
            if (v < 0 || v > VT_TOKEN_BYTE) {
                vt_set_error("tokenizer: %s[%" PRIu64 "] = %" PRId64 " is not a token type (0..6)", key,
                             i, v);
                return VT_ERR_FORMAT;
            }
            t->tok_type[i] = (uint8_t)v;
        }
    } else if (st != VT_ERR_NOT_FOUND)
        return st;

    key = "tokenizer.ggml.scores"; /* unused by BPE, but must be consistent when present */
    st = vt_gguf_get_arr(g, key, &ty, &count, &data);
    if (st == VT_OK) {
        if (ty != VT_GGUF_FLOAT32 || count != (uint64_t)t->n_vocab) {
            vt_set_error("tokenizer: %s must be %" PRId64 " float32 values (one per token), found %" PRIu64
                         " of %s",
                         key, t->n_vocab, count, vt_gguf_type_name(ty));
            return VT_ERR_FORMAT;
        }
    } else if (st != VT_ERR_NOT_FOUND)
        return st;
    return VT_OK;
}

static const char *kind_name(tok_kind k) { return k == KIND_GEMMA4 ? "gemma4" : "gpt2"; }

static vt_status load_merges(vt_tokenizer *t, const vt_gguf *g)
{
    const char *key = "tokenizer.ggml.merges";
    vt_gguf_type ty;
    uint64_t count;
    const void *data;
    vt_status st = vt_gguf_get_arr(g, key, &ty, &count, &data);
    if (st == VT_ERR_NOT_FOUND) {
        vt_set_error("tokenizer: %s is missing (required for tokenizer.ggml.model = %s)", key,
                     kind_name(t->kind));
        return VT_ERR_FORMAT;
    }
    if (st != VT_OK) return st;
    if (ty != VT_GGUF_STRING) {
        vt_set_error("tokenizer: %s is an array of %s, expected strings", key, vt_gguf_type_name(ty));
        return VT_ERR_FORMAT;
    }
    if (count >= UINT32_MAX / 4) {
        vt_set_error("tokenizer: %s has %" PRIu64 " entries (too many)", key, count);
        return VT_ERR_FORMAT;
    }
    if ((st = pair_table_init(t, count)) != VT_OK) return st;
    char *joined = NULL;
    size_t joined_cap = 0;
    for (uint64_t r = 0; r < count; r++) {
        vt_gguf_str s;
        if ((st = vt_gguf_get_arr_str(g, key, r, &s)) != VT_OK) break;
        /* split at the first space at byte index >= 1 (§1) */
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', (size_t)s.len - 1) : NULL;
        if (!sp || sp == s.ptr + s.len - 1) {
            vt_set_error("tokenizer: %s[%" PRIu64 "] = '%.64s' is not two parts separated by a space",
                         key, r, s.ptr);
            st = VT_ERR_FORMAT;
            break;
        }
        size_t la = (size_t)(sp - s.ptr), lb = (size_t)s.len - la - 1;
        if (la + lb > joined_cap) {
            joined_cap = (la + lb) * 2;
            char *j = realloc(joined, joined_cap);
            if (!j) {
                vt_set_error_oom(joined_cap, "tokenizer: %s[%" PRIu64 "] merge text", key, r);
                st = VT_ERR_OUT_OF_MEMORY;
                break;
            }
            joined = j;
        }
        memcpy(joined, s.ptr, la);
        memcpy(joined + la, sp + 1, lb);
        uint32_t a, b, res;
        if ((st = str_intern(t, s.ptr, la, &a)) != VT_OK ||
            (st = str_intern(t, sp + 1, lb, &b)) != VT_OK ||
            (st = str_intern(t, joined, la + lb, &res)) != VT_OK) {
            vt_error_prefix("%s[%" PRIu64 "]", key, r);
            break;
        }
        pair_insert(t, a, b, (uint32_t)r, res);
    }
    free(joined);
    return st;
}

static int cmp_special(const void *pa, const void *pb)
{
    const uint64_t a = *(const uint64_t *)pa, b = *(const uint64_t *)pb;
    return a < b ? -1 : a > b;
}

static void mark_eog_text(vt_tokenizer *t, const char *text)
{
    int32_t id = vt_tokenizer_find(t, text);
    if (id >= 0) t->tok_attr[id] |= ATTR_EOG;
}

/* Attributes from types, the llama.cpp fix-ups, EOG set (§1.1, §9), special cache. */
static vt_status finish_attributes(vt_tokenizer *t, const int32_t *eog_ids, size_t n_eog_ids,
                                   const int fim_key_present[3])
{
    static const uint8_t type_attr[7] = {0,           ATTR_NORMAL,       ATTR_UNKNOWN, ATTR_CONTROL,
                                         ATTR_USER_DEFINED, ATTR_UNUSED, ATTR_BYTE};
    const int64_t n = t->n_vocab;
    for (int64_t i = 0; i < n; i++) {
        uint8_t a = type_attr[t->tok_type[i]];
        if ((a & ATTR_CONTROL) && strstr(str_ptr(t, t->tok_str[i]), "unused")) a |= ATTR_UNUSED;
        t->tok_attr[i] = a;
    }

    static const char *const eog_texts[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
        "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
        "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
        "<\357\275\234end\342\226\201of\342\226\201sentence\357\275\234>" /* <｜end▁of▁sentence｜> */, "[e~["};
    for (size_t k = 0; k < sizeof eog_texts / sizeof *eog_texts; k++) mark_eog_text(t, eog_texts[k]);
    for (size_t k = 0; k < n_eog_ids; k++)
        if (eog_ids[k] >= 0) t->tok_attr[eog_ids[k]] |= ATTR_EOG;
    /* FIM pad / repo / file-separator tokens found by text when no key names them */
    static const char *const fim_texts[3][5] = {
        {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", NULL},
        {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"},
        {"<|file_sep|>", "<file_sep>", NULL, NULL, NULL}};
    for (int f = 0; f < 3; f++) {
        if (fim_key_present[f]) continue;
        for (int k = 0; k < 5 && fim_texts[f][k]; k++) mark_eog_text(t, fim_texts[f][k]);
    }
    /* Gemma 4 fix-up (§9) */
    int32_t tr = vt_tokenizer_find(t, "<|tool_response>");
    int32_t eos_s = vt_tokenizer_find(t, "</s>");
    if (tr >= 0 && (t->tok_attr[tr] & ATTR_EOG) && eos_s >= 0) {
        t->tok_attr[eos_s] = ATTR_NORMAL; /* no longer end-of-generation, rendered as text */
    }
    for (int64_t i = 0; i < n; i++)
        if (t->tok_attr[i] & ATTR_EOG) t->tok_attr[i] |= ATTR_CONTROL;

    /* special-token cache: longest text first, ties by id */
    size_t n_sp = 0;
    for (int64_t i = 0; i < n; i++)
        if ((t->tok_attr[i] & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN)) &&
            t->str_len[t->tok_str[i]] > 0)
            n_sp++;
    if (!n_sp) return VT_OK;
    uint64_t *keys = vt_malloc_named(n_sp * sizeof *keys, "tokenizer: special-token sort keys");
    if (!keys) return VT_ERR_OUT_OF_MEMORY;
    t->special = vt_malloc_named(n_sp * sizeof *t->special, "tokenizer: special-token list");
    if (!t->special) {
        free(keys);
        return VT_ERR_OUT_OF_MEMORY;
    }
    size_t k = 0;
    for (int64_t i = 0; i < n; i++)
        if ((t->tok_attr[i] & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN)) &&
            t->str_len[t->tok_str[i]] > 0)
            keys[k++] = ((uint64_t)(UINT32_MAX - t->str_len[t->tok_str[i]]) << 32) | (uint64_t)i;
    qsort(keys, n_sp, sizeof *keys, cmp_special);
    for (k = 0; k < n_sp; k++) t->special[k] = (int32_t)(keys[k] & 0xFFFFFFFFu);
    t->n_special = n_sp;
    free(keys);
    return VT_OK;
}

/* Optional tokenizer.ggml.suppress_tokens (§1): integer ids, each in the vocabulary. */
static vt_status load_suppress(vt_tokenizer *t, const vt_gguf *g)
{
    const char *key = "tokenizer.ggml.suppress_tokens";
    vt_gguf_type ty;
    uint64_t count;
    const void *data;
    vt_status st = vt_gguf_get_arr(g, key, &ty, &count, &data);
    if (st == VT_ERR_NOT_FOUND) return VT_OK;
    if (st != VT_OK) return st;
    if (!is_integer_type(ty)) {
        vt_set_error("tokenizer: %s is an array of %s, expected integers", key, vt_gguf_type_name(ty));
        return VT_ERR_FORMAT;
    }
    for (uint64_t i = 0; i < count; i++) {
        int64_t v;
        if ((st = vt_gguf_get_arr_i64(g, key, i, &v)) != VT_OK) return st;
        if (v < 0 || v >= t->n_vocab) {
            vt_set_error("tokenizer: %s[%" PRIu64 "] = %" PRId64 " is outside the vocabulary (0..%" PRId64
                         ")",
                         key, i, v, t->n_vocab - 1);
            return VT_ERR_FORMAT;
        }
        t->tok_attr[v] |= ATTR_SUPPRESS;
    }
    return VT_OK;
}

/* Optional tokenizer.chat_template, kept as text (the renderers of chat_template.c
 * read hints from it, §10.2). */
static vt_status load_chat_template(vt_tokenizer *t, const vt_gguf *g)
{
    vt_gguf_str s;
    vt_status st = vt_gguf_get_str(g, "tokenizer.chat_template", &s);
    if (st == VT_ERR_NOT_FOUND) return VT_OK;
    if (st != VT_OK) return st;
    t->chat_template = vt_malloc_named((size_t)s.len + 1, "tokenizer: chat template text");
    if (!t->chat_template) return VT_ERR_OUT_OF_MEMORY;
    memcpy(t->chat_template, s.ptr, (size_t)s.len);
    t->chat_template[s.len] = 0;
    return VT_OK;
}

/*
 * Special ids, add_bos/add_eos, attributes and EOG set (§1, §1.1, §9), common
 * to the kinds. Neither kind has usable default ids (gpt2's placeholder 11 is
 * not kept; gemma4's are unset until read): absent keys give -1. gemma4 always
 * adds BOS (llama.cpp forces it, §1.2); when its bos_token_id key is absent the
 * token "<bos>" is looked up by text.
 */
static vt_status load_special(vt_tokenizer *t, const vt_gguf *g)
{
    vt_status st;
    t->bos = t->eos = -1;
    int32_t eot = -1, eom = -1, unk = -1, sep = -1, pad = -1, mask = -1;
    int32_t fim[6] = {-1, -1, -1, -1, -1, -1};
    static const char *const fim_keys[6] = {
        "tokenizer.ggml.fim_pad_token_id", "tokenizer.ggml.fim_rep_token_id",
        "tokenizer.ggml.fim_sep_token_id", "tokenizer.ggml.fim_pre_token_id",
        "tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.fim_mid_token_id"};
    const int64_t V = t->n_vocab;
    if ((st = read_token_id(g, "tokenizer.ggml.bos_token_id", V, &t->bos)) != VT_OK ||
        (st = read_token_id(g, "tokenizer.ggml.eos_token_id", V, &t->eos)) != VT_OK ||
        (st = read_token_id(g, "tokenizer.ggml.eot_token_id", V, &eot)) != VT_OK ||
        (st = read_token_id(g, "tokenizer.ggml.eom_token_id", V, &eom)) != VT_OK ||
        (st = read_token_id(g, "tokenizer.ggml.unknown_token_id", V, &unk)) != VT_OK ||
        (st = read_token_id(g, "tokenizer.ggml.seperator_token_id", V, &sep)) != VT_OK ||
        (st = read_token_id(g, "tokenizer.ggml.padding_token_id", V, &pad)) != VT_OK ||
        (st = read_token_id(g, "tokenizer.ggml.mask_token_id", V, &mask)) != VT_OK)
        return st;
    for (int k = 0; k < 6; k++)
        if ((st = read_token_id(g, fim_keys[k], V, &fim[k])) != VT_OK) return st;

    t->add_bos = 0;
    t->add_eos = 0;
    if ((st = read_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos)) != VT_OK ||
        (st = read_bool(g, "tokenizer.ggml.add_eos_token", &t->add_eos)) != VT_OK)
        return st;
    if (t->kind == KIND_GEMMA4) {
        if (!t->add_bos)
            vt_log(VT_LOG_DEBUG, "tokenizer: gemma4 file says add_bos_token = false; BOS is added "
                                 "anyway (files converted before llama.cpp PR #21500)");
        t->add_bos = 1;
        if (t->bos < 0) t->bos = vt_tokenizer_find(t, "<bos>");
        if (t->bos < 0) {
            vt_set_error("tokenizer: gemma4 needs a BOS token but tokenizer.ggml.bos_token_id is "
                         "missing and the vocabulary has no '<bos>'");
            return VT_ERR_FORMAT;
        }
    }
    if (t->add_bos && t->bos < 0) {
        vt_set_error("tokenizer: tokenizer.ggml.add_bos_token is true but "
                     "tokenizer.ggml.bos_token_id is missing");
        return VT_ERR_FORMAT;
    }
    if (t->add_eos && t->eos < 0) {
        vt_set_error("tokenizer: tokenizer.ggml.add_eos_token is true but "
                     "tokenizer.ggml.eos_token_id is missing");
        return VT_ERR_FORMAT;
    }

    const int32_t eog_ids[] = {t->eos, eot, eom, fim[0], fim[1], fim[2]};
    const int fim_present[3] = {fim[0] >= 0, fim[1] >= 0, fim[2] >= 0};
    if ((st = finish_attributes(t, eog_ids, sizeof eog_ids / sizeof *eog_ids, fim_present)) != VT_OK)
        return st;
    return load_suppress(t, g);
}

static vt_status load_gpt2(vt_tokenizer *t, const vt_gguf *g)
{
    vt_status st;
    vt_gguf_str pre;
    st = vt_gguf_get_str(g, "tokenizer.ggml.pre", &pre);
    if (st == VT_ERR_NOT_FOUND) {
        vt_log(VT_LOG_WARN,
               "tokenizer: tokenizer.ggml.pre is missing; using the qwen2 pre-tokenizer without "
               "normalization");
        t->pretok = VT_PRETOK_QWEN2;
        t->nfc = 0;
    } else if (st != VT_OK) {
        return st;
    } else if (!strcmp(pre.ptr, "qwen35")) {
        t->pretok = VT_PRETOK_QWEN35;
        t->nfc = 1;
    } else if (!strcmp(pre.ptr, "qwen2")) {
        t->pretok = VT_PRETOK_QWEN2;
        t->nfc = 1;
    } else {
        vt_set_error("tokenizer: tokenizer.ggml.pre = '%.64s' is not supported (supported: qwen35, "
                     "qwen2)",
                     pre.ptr);
        return VT_ERR_UNSUPPORTED;
    }

    if ((st = load_vocab(t, g)) != VT_OK) return st;
    if ((st = load_merges(t, g)) != VT_OK) return st;
    if ((st = load_special(t, g)) != VT_OK) return st;

    for (int b = 0; b < 256; b++) {
        char u[4];
        int n = vt_utf8_encode(vt_byte_to_cp((uint8_t)b), u);
        t->byte_sym[b] = str_lookup(t, u, (size_t)n);
        t->byte_tok[b] = -1;
    }
    return VT_OK;
}

/* §5: no pre name (model "gemma4" forces pre "gemma4", any stored value is
 * ignored), no normalization, merges required, byte tokens <0xHH>. */
static vt_status load_gemma4(vt_tokenizer *t, const vt_gguf *g)
{
    vt_status st;
    t->nfc = 0;
    if ((st = load_vocab(t, g)) != VT_OK) return st;
    if ((st = load_merges(t, g)) != VT_OK) return st;
    if ((st = load_special(t, g)) != VT_OK) return st;
    static const char hex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; b++) {
        char name[7] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>', 0};
        t->byte_tok[b] = vt_tokenizer_find(t, name);
        t->byte_sym[b] = NONE;
    }
    return VT_OK;
}

vt_status vt_tokenizer_load(const vt_gguf *g, vt_tokenizer **out)
{
    if (!g || !out) {
        vt_set_error("vt_tokenizer_load: NULL argument");
        return VT_ERR_INVALID_ARG;
    }
    *out = NULL;
    vt_gguf_str model;
    vt_status st = vt_gguf_get_str(g, "tokenizer.ggml.model", &model);
    if (st == VT_ERR_NOT_FOUND) {
        vt_set_error("tokenizer: tokenizer.ggml.model is missing");
        return VT_ERR_FORMAT;
    }
    if (st != VT_OK) return st;
    tok_kind kind;
    if (!strcmp(model.ptr, "gpt2")) {
        kind = KIND_GPT2;
    } else if (!strcmp(model.ptr, "gemma4")) {
        kind = KIND_GEMMA4;
    } else {
        vt_set_error("tokenizer: tokenizer.ggml.model = '%.64s' is not supported (supported: gpt2, "
                     "gemma4)",
                     model.ptr);
        return VT_ERR_UNSUPPORTED;
    }
    vt_tokenizer *t = vt_calloc_named(1, sizeof *t, "tokenizer");
    if (!t) return VT_ERR_OUT_OF_MEMORY;
    t->kind = kind;
    st = kind == KIND_GEMMA4 ? load_gemma4(t, g) : load_gpt2(t, g);
    if (st == VT_OK) st = load_chat_template(t, g);
    if (st != VT_OK) {
        vt_tokenizer_free(t);
        return st;
    }
    vt_log(VT_LOG_DEBUG, "tokenizer: %s%s, %" PRId64 " tokens, %" PRIu64 " merges, %zu special",
           kind_name(kind),
           kind == KIND_GEMMA4 ? "" : t->pretok == VT_PRETOK_QWEN35 ? "/qwen35" : "/qwen2", t->n_vocab,
           t->n_pairs, t->n_special);
    *out = t;
    return VT_OK;
}

/* ------------------------------------------------------------------------ */
/* queries                                                                   */
/* ------------------------------------------------------------------------ */

int64_t vt_tokenizer_n_vocab(const vt_tokenizer *t) { return t ? t->n_vocab : 0; }
int32_t vt_tokenizer_bos(const vt_tokenizer *t) { return t ? t->bos : -1; }
int32_t vt_tokenizer_eos(const vt_tokenizer *t) { return t ? t->eos : -1; }
int vt_tokenizer_add_bos(const vt_tokenizer *t) { return t ? t->add_bos : 0; }

int vt_tokenizer_is_eog(const vt_tokenizer *t, int32_t id)
{
    return t && id >= 0 && id < t->n_vocab && (t->tok_attr[id] & ATTR_EOG);
}

int vt_tokenizer_is_suppressed(const vt_tokenizer *t, int32_t id)
{
    return t && id >= 0 && id < t->n_vocab && (t->tok_attr[id] & ATTR_SUPPRESS);
}

const char *vt_tokenizer_model(const vt_tokenizer *t) { return t ? kind_name(t->kind) : NULL; }

const char *vt_tokenizer_chat_template(const vt_tokenizer *t) { return t ? t->chat_template : NULL; }

int vt_tokenizer_token_type(const vt_tokenizer *t, int32_t id)
{
    if (!t || id < 0 || id >= t->n_vocab) return 0;
    return t->tok_type[id];
}

int32_t vt_tokenizer_find(const vt_tokenizer *t, const char *text)
{
    if (!t || !text) return -1;
    uint32_t iid = str_lookup(t, text, strlen(text));
    return iid == NONE ? -1 : t->str_vocab[iid];
}

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
        const char *tok = str_ptr(t, iid);
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
    const pair_slot *p = pair_find(w->t, a, b);
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
        s = str_ptr(t, iid);
        n = t->str_len[iid];
    } else {
        n = (size_t)vt_utf8_encode(vt_byte_to_cp(raw_byte), buf);
        s = buf;
    }
    for (size_t k = 0; k < n; k++) {
        uint32_t one = str_lookup(t, s + k, 1);
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
        uint32_t iid = str_lookup(t, bytes, n_cps);
        if (iid != NONE && t->str_vocab[iid] >= 0) return idvec_push(w->out, t->str_vocab[iid]);
    }
    /* symbol k = character k */
    size_t off = 0;
    for (size_t k = 0; k < n_cps; k++) {
        size_t l = (size_t)vt_utf8_encode(cp[k], bytes + off);
        w->sym[k].iid = str_lookup(t, bytes + off, l);
        off += l;
    }
    bpe_merge(w, n_cps);
    for (int32_t k = 0; k >= 0; k = w->sym[k].next) {
        uint32_t iid = w->sym[k].iid;
        if (iid != NONE) {
            st = emit_gemma4(w, iid, str_ptr(t, iid), t->str_len[iid]);
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
    const char *s = str_ptr(t, iid);
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
