/*
 * test_gguf_mkmodel.h - what the two files of the test_gguf_mkmodel
 * program share: the helpers of test_gguf_mkmodel.c (setup, main) that
 * test_gguf_mkmodel_writer.c uses, and the cases it defines.
 */
#ifndef VT_TEST_GGUF_MKMODEL_H
#define VT_TEST_GGUF_MKMODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mkmodel.h"
#include "vt/gguf.h"

extern char *g_dir;
char *make(const char *name, const vt_mkmodel_params *p);
vt_gguf *open_path(const char *path);
uint32_t u32_of(const vt_gguf *g, const char *key);
bool file_exists(const char *path);

/* test_gguf_mkmodel_writer.c */
void test_writer_fill_and_split(void **state);
void test_matches_fixture_layout(void **state);
void test_tokenizer_loads(void **state);
void test_engine_runs(void **state);

#endif
