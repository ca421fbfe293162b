/*
 * test_quantize.h - what the two files of the test_quantize program share:
 * test_quantize.c (the quantisers; setup, teardown, main) and
 * test_quantize_mkmodel.c (vt mkmodel's use of them).
 */
#ifndef VT_TEST_QUANTIZE_H
#define VT_TEST_QUANTIZE_H

#include <stddef.h>
#include <stdint.h>

/* the group's temporary directory (setup; removed by teardown) */
extern char *g_dir;
/* bytes of a row of n values of a block type */
size_t row_bytes(uint32_t type, int64_t n);

/* test_quantize_mkmodel.c */
void test_mkmodel_q4_k_m(void **state);
void test_mkmodel_gemma4_mix(void **state);
void test_lowbit_blocks(void **state);
void test_mkmodel_ud_mixes(void **state);
void test_fallback(void **state);
void test_run_q4_k_m(void **state);
void test_run_each_type(void **state);

#endif
