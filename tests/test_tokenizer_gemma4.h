/*
 * test_tokenizer_gemma4.h - what the two files of the
 * test_tokenizer_gemma4 program share: the helpers of
 * test_tokenizer_gemma4.c (setup, main) that test_tokenizer_gemma4_chat.c
 * uses, and the cases it defines.
 */
#ifndef VT_TEST_TOKENIZER_GEMMA4_H
#define VT_TEST_TOKENIZER_GEMMA4_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

vt_tokenizer *load_fixture_tokenizer(void);
char *detok(const vt_tokenizer *t, const int32_t *ids, int64_t n, int special, size_t *len);
int is_valid_utf8(const char *s, size_t n);
void assert_ids(const int32_t *got, int64_t n_got, const int32_t *want, int64_t n_want,
                const char *what);
char *stream_decode(const vt_tokenizer *t, const int32_t *ids, int64_t n, int special,
                    size_t *len, int *n_held);

/* test_tokenizer_gemma4_chat.c */
void test_chat_fixture_template(void **state);
void test_chat_released_template(void **state);
void test_chat_tokenized(void **state);
void test_random_strings(void **state);

#endif
