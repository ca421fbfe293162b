/*
 * test_config.h - what the two files of the test_config program share:
 * the helpers of test_config.c (setup, main) that test_config_print.c
 * uses, and the cases it defines.
 */
#ifndef VT_TEST_CONFIG_H
#define VT_TEST_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "vt/status.h"

#define GiB (1ull << 30)
const char *write_tmp(const char *text);
vt_status load_text(const char *text, vt_config *c);
void assert_contains(const char *hay, const char *needle);
void assert_src(vt_config_src s, int origin, uint32_t line, uint32_t col);
void expect_file_error(const char *yaml, vt_status want, uint32_t line, uint32_t col,
                       const char *needle1, const char *needle2);
void set_ok(vt_config *c, const char *arg);
void expect_set_error(const char *arg, const char *needle);

/* test_config_print.c */
void test_print(void **s);
void test_devices(void **s);
void test_fifo_config_refused(void **s);

#endif
