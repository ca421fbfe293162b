/*
 * test_tokenizer.h - what the two files of the test_tokenizer program
 * share: the helpers of test_tokenizer.c (setup, main) that
 * test_tokenizer_hostile.c uses, and the cases it defines.
 */
#ifndef VT_TEST_TOKENIZER_H
#define VT_TEST_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

void assert_ids(const int32_t *got, int64_t n_got, const int32_t *want, int64_t n_want,
                const char *what);

/* test_tokenizer_hostile.c: a temporary directory per case (setup and
 * teardown), and the cases */
int setup_tmp(void **state);
int teardown_tmp(void **state);
void test_small_vocab_bpe(void **state);
void test_fuzz_regressions(void **state);
void test_hostile_metadata(void **state);

#endif
