/*
 * vocab_tables.h - what the tokenizer's two files share: the
 * vt_tokenizer layout (interned strings, the merge pair table, the vocab and
 * its attributes) built by tokenizer_load.c and read by tokenizer.c, and the
 * two lookups the encoder makes. Not a public header.
 */
#ifndef VT_VOCAB_TABLES_H
#define VT_VOCAB_TABLES_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"
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

/* The text of intern id iid (not NUL-terminated: its length is str_len[iid]). */
static inline const char *tok_str_ptr(const vt_tokenizer *t, uint32_t iid)
{
    return t->arena + t->str_off[iid];
}
/* The intern id of s[0..n), NONE when it was never interned. */
uint32_t tok_str_lookup(const vt_tokenizer *t, const char *s, size_t n);
/* The merge of (left, right) intern ids: its rank and result, NULL when none. */
const pair_slot *tok_pair_find(const vt_tokenizer *t, uint32_t a, uint32_t b);

#endif
