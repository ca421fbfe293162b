/*
 * mkmodel_internal.h - what mkmodel.c (the model writers) and mkmodel_vocab.c
 * (their tokenizer) share. Hidden: not exported from libvtcore.
 */
#ifndef VT_MKMODEL_INTERNAL_H
#define VT_MKMODEL_INTERNAL_H

#include <stdint.h>

#include "vt/gguf.h"
#include "vt/status.h"

#define MK_INTERNAL __attribute__((visibility("hidden")))

#define MAX_SYM 64 /* bytes of one token string (merges of short words stay far below) */

typedef struct bpe {
    char (*tok)[MAX_SYM]; /* token strings in GPT-2 byte-symbol form */
    uint32_t n_tok, cap_tok;
    char (*merges)[2 * MAX_SYM + 1];
    uint32_t n_merges;
    /* chunks of the text: symbol sequences with counts */
    uint32_t **word;
    uint32_t *word_len, *word_count;
    uint32_t n_word;
} bpe;

/* Train on the embedded text with at most max_merges merges (gemma: the
 * SentencePiece-style symbols); b zero-initialised before, mk_bpe_free after. */
MK_INTERNAL vt_status mk_bpe_train(bpe *b, uint32_t max_merges, int gemma);
MK_INTERNAL void mk_bpe_free(bpe *b);
/* Write b's vocabulary (with the family's special tokens), merges and chat
 * template as the tokenizer.* keys of a qwen35moe (gpt2) or gemma4 model,
 * padded with placeholder tokens up to want_vocab when that is larger;
 * *n_vocab gets the count written. */
MK_INTERNAL vt_status mk_add_tokenizer(vt_gguf_writer *w, bpe *b, uint32_t want_vocab,
                                       uint32_t *n_vocab);
MK_INTERNAL vt_status mk_add_tokenizer_gemma4(vt_gguf_writer *w, const bpe *b,
                                              uint32_t want_vocab, uint32_t *n_vocab);

#endif
