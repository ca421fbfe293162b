/*
 * progress.h - the text of a progress line (the bars of the vt commands on
 * stderr: a model's load, vt mkmodel, opening a split model).
 */
#ifndef VT_PROGRESS_H
#define VT_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

/*
 * Write one line, without a newline, into buf (cap bytes, always
 * NUL-terminated when cap > 0):
 *   "<label> [=========>          ]  45%  2.01 GiB / 4.46 GiB  3.20 GiB/s"
 * done and total are bytes (done is clamped to total; total 0 reads as 100%);
 * bar_width is the number of cells between the brackets (clamped to 1..200);
 * the rate is done / seconds and is left out while seconds <= 0. Returns the
 * length written (snprintf's, so a truncated line returns more than cap - 1).
 */
size_t vt_progress_format(char *buf, size_t cap, const char *label, uint64_t done,
                          uint64_t total, double seconds, int bar_width);

/*
 * The same line for a count of things (unit: "shards", ...) instead of bytes:
 *   "<label> [=========>          ]  33%  3 / 9 shards"
 * (no rate). Same clamping and return value as vt_progress_format.
 */
size_t vt_progress_format_count(char *buf, size_t cap, const char *label, uint64_t done,
                                uint64_t total, const char *unit, int bar_width);

#endif
