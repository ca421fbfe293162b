/*
 * tokenizer_load.c - reading a vocabulary from GGUF tokenizer.ggml.* metadata
 * (vocab_tables.h: the layout): every string interned once, the merge
 * pair table, token types and attributes, special tokens, the EOG set and
 * the suppressed tokens, each count, id and merge checked with an error
 * naming the key; vt_tokenizer_free and the accessors.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "vocab_tables.h"

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
        if (t->str_len[iid] == n && !memcmp(tok_str_ptr(t, iid), s, n)) return iid;
    }
}

uint32_t tok_str_lookup(const vt_tokenizer *t, const char *s, size_t n)
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
        uint64_t hash = hash_bytes(tok_str_ptr(t, iid), t->str_len[iid]);
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

const pair_slot *tok_pair_find(const vt_tokenizer *t, uint32_t a, uint32_t b)
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
        if ((a & ATTR_CONTROL) && strstr(tok_str_ptr(t, t->tok_str[i]), "unused")) a |= ATTR_UNUSED;
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
        t->byte_sym[b] = tok_str_lookup(t, u, (size_t)n);
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
    uint32_t iid = tok_str_lookup(t, text, strlen(text));
    return iid == NONE ? -1 : t->str_vocab[iid];
}

