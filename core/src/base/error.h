/*
 * error.h - the core's one error/reporting path: the calling thread's
 * last-error message and levelled logging to stderr.
 *
 * Every failing core function sets a message naming the thing that failed
 * (file, key, tensor, allocation) and returns a vt_status; callers read it with
 * vt_last_error(). Messages are per thread.
 */
#ifndef VT_ERROR_H
#define VT_ERROR_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "vt/plugin.h"
#include "vt/status.h"

#if defined(__GNUC__)
#define VT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define VT_PRINTF(a, b)
#endif

/* Text from outside (GGUF keys, tensor names, metadata strings, request
 * fields) can hold terminal control sequences; every message that vt sets or
 * logs, and vt info's listing, goes through this first (issue 43 item 9).
 * Copies src[0..n) into dst (cap bytes, NUL-terminated, cap >= 1) with every
 * C0 control byte (newline and tab too), DEL, the UTF-8 encoding of a C1
 * control (U+0080..U+009F, among them CSI U+009B) and every byte that is not
 * part of valid UTF-8 written as \xNN; all else is copied. What does not fit
 * is cut before a whole character or escape, never inside one. Returns the
 * length written. */
size_t vt_text_escape(char *dst, size_t cap, const char *src, size_t n);

/* Set the thread's last error (printf-style, escaped as vt_text_escape);
 * returns nothing. */
void vt_set_error(const char *fmt, ...) VT_PRINTF(1, 2);
void vt_set_error_v(const char *fmt, va_list ap);
/* Prefix the current message with "<prefix>: " (adds context while unwinding). */
void vt_error_prefix(const char *fmt, ...) VT_PRINTF(1, 2);
/* The thread's last error, "" when none. */
const char *vt_last_error(void);
void vt_clear_error(void);

/* ---- named allocations ----
 * Every allocation that can fail names what it is for and how many bytes, e.g.
 * "out of memory: tokenizer merges table (1.19 GiB, 1277952000 bytes)".
 *
 * vt_set_error_oom sets that message: what is printf-style (a tensor name, "KV
 * cache blk.3", a path), bytes the size that was asked for; below 1 KiB the human
 * size is left out ("(12 bytes)").
 *
 * The allocators below behave like malloc/calloc/realloc/strdup, except that on
 * failure they set the message above and return NULL (realloc leaves p untouched).
 * A request of 0 bytes allocates 1, so NULL always means failure. calloc and
 * reallocarray refuse an n * size that overflows size_t with the same message
 * naming the count and element size, without calling the allocator. */
void vt_set_error_oom(uint64_t bytes, const char *what_fmt, ...) VT_PRINTF(2, 3);
void *vt_malloc_named(size_t bytes, const char *what);
void *vt_calloc_named(size_t n, size_t size, const char *what);
void *vt_realloc_named(void *p, size_t bytes, const char *what);
void *vt_reallocarray_named(void *p, size_t n, size_t size, const char *what);
char *vt_strdup_named(const char *s, const char *what);

/* Logging: messages at or below the current level go to stderr (escaped as
 * vt_text_escape). Default WARN;
 * env VT_LOG_LEVEL=error|warn|info|debug overrides at first use. */
void vt_log(vt_log_level level, const char *fmt, ...) VT_PRINTF(2, 3);
void vt_log_set_level(vt_log_level level);
vt_log_level vt_log_get_level(void);

/* Name of a vt_status ("VT_ERR_FORMAT"). */
const char *vt_status_name(vt_status s);
/* "a directory", "a FIFO", "a character device", ... for the type bits of an
 * st_mode (a file refused for not being regular, in messages). */
const char *vt_file_type_name(unsigned mode);

#endif
