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

#include "vt/plugin.h"
#include "vt/status.h"

#if defined(__GNUC__)
#define VT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define VT_PRINTF(a, b)
#endif

/* Set the thread's last error (printf-style); returns nothing. */
void vt_set_error(const char *fmt, ...) VT_PRINTF(1, 2);
void vt_set_error_v(const char *fmt, va_list ap);
/* Prefix the current message with "<prefix>: " (adds context while unwinding). */
void vt_error_prefix(const char *fmt, ...) VT_PRINTF(1, 2);
/* The thread's last error, "" when none. */
const char *vt_last_error(void);
void vt_clear_error(void);

/* Logging: messages at or below the current level go to stderr. Default WARN;
 * env VT_LOG_LEVEL=error|warn|info|debug overrides at first use. */
void vt_log(vt_log_level level, const char *fmt, ...) VT_PRINTF(2, 3);
void vt_log_set_level(vt_log_level level);
vt_log_level vt_log_get_level(void);

/* Name of a vt_status ("VT_ERR_FORMAT"). */
const char *vt_status_name(vt_status s);

#endif
