/*
 * error.c - per-thread last-error message and stderr logging (see error.h).
 */
#include "error.h"

#include "vt/bytes.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <strings.h>

#define VT_ERROR_MAX 1024

static _Thread_local char tl_error[VT_ERROR_MAX];

/* Length of the valid UTF-8 sequence at s[0..n) (RFC 3629: no overlongs, no
 * surrogates, at most U+10FFFF), 0 when there is none. *cp gets its value. */
static size_t utf8_seq(const unsigned char *s, size_t n, uint32_t *cp)
{
    const unsigned char c = s[0];
    size_t len;
    uint32_t v, min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if (c >= 0xc2 && c <= 0xdf) {
        len = 2, v = c & 0x1f, min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3, v = c & 0x0f, min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4, v = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
    *cp = v;
    return len;
}

size_t vt_text_escape(char *dst, size_t cap, const char *src, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *s = (const unsigned char *)src;
    size_t o = 0, i = 0;
    if (!cap) return 0;
    while (i < n) {
        uint32_t cp = 0;
        size_t len = utf8_seq(s + i, n - i, &cp);
        const int control = len == 0 || cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f);
        if (!control) {
            if (o + len >= cap) break;
            memcpy(dst + o, s + i, len);
            o += len;
            i += len;
            continue;
        }
        /* a control character: each of its bytes as \xNN; an invalid byte alone */
        if (!len) len = 1;
        if (o + 4 * len >= cap) break;
        for (size_t k = 0; k < len; k++) {
            dst[o++] = '\\';
            dst[o++] = 'x';
            dst[o++] = hex[s[i + k] >> 4];
            dst[o++] = hex[s[i + k] & 15];
        }
        i += len;
    }
    dst[o] = '\0';
    return o;
}

void vt_set_error_v(const char *fmt, va_list ap)
{
    char raw[VT_ERROR_MAX];
    vsnprintf(raw, sizeof raw, fmt, ap);
    vt_text_escape(tl_error, sizeof tl_error, raw, strlen(raw));
}

void vt_set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vt_set_error_v(fmt, ap);
    va_end(ap);
}

void vt_error_prefix(const char *fmt, ...)
{
    char prefix[VT_ERROR_MAX], old[VT_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, tl_error, sizeof old);
    /* the old message is escaped already; escaping is idempotent */
    char raw[2 * VT_ERROR_MAX + 2];
    snprintf(raw, sizeof raw, "%s: %s", prefix, old);
    vt_text_escape(tl_error, sizeof tl_error, raw, strlen(raw));
}

const char *vt_last_error(void) { return tl_error; }

void vt_clear_error(void) { tl_error[0] = '\0'; }

/* ---- named allocations ---- */

/* "(1.19 GiB, 1277952000 bytes)" or "(12 bytes)" into buf. */
static const char *oom_size(uint64_t bytes, char *buf, size_t cap)
{
    char human[48];
    if (bytes < 1024)
        snprintf(buf, cap, "(%llu bytes)", (unsigned long long)bytes);
    else
        snprintf(buf, cap, "(%s, %llu bytes)", vt_format_bytes(bytes, 1, human, sizeof human),
                 (unsigned long long)bytes);
    return buf;
}

void vt_set_error_oom(uint64_t bytes, const char *what_fmt, ...)
{
    char what[VT_ERROR_MAX / 2], size[96];
    va_list ap;
    va_start(ap, what_fmt);
    vsnprintf(what, sizeof what, what_fmt, ap);
    va_end(ap);
    vt_set_error("out of memory: %s %s", what, oom_size(bytes, size, sizeof size));
}

/* n * size overflowed size_t: name the request instead of a wrapped byte count. */
static void set_error_overflow(size_t n, size_t size, const char *what)
{
    vt_set_error("out of memory: %s (%zu elements of %zu bytes: more than %zu bytes)", what, n,
                 size, (size_t)SIZE_MAX);
}

void *vt_malloc_named(size_t bytes, const char *what)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) vt_set_error_oom(bytes, "%s", what);
    return p;
}

void *vt_calloc_named(size_t n, size_t size, const char *what)
{
    size_t bytes;
    if (__builtin_mul_overflow(n, size, &bytes)) {
        set_error_overflow(n, size, what);
        return NULL;
    }
    void *p = bytes ? calloc(n, size) : calloc(1, 1);
    if (!p) vt_set_error_oom(bytes, "%s", what);
    return p;
}

void *vt_realloc_named(void *p, size_t bytes, const char *what)
{
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q) vt_set_error_oom(bytes, "%s", what);
    return q;
}

void *vt_reallocarray_named(void *p, size_t n, size_t size, const char *what)
{
    size_t bytes;
    if (__builtin_mul_overflow(n, size, &bytes)) {
        set_error_overflow(n, size, what);
        return NULL;
    }
    return vt_realloc_named(p, bytes, what);
}

char *vt_strdup_named(const char *s, const char *what)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (!d) {
        vt_set_error_oom(n, "%s", what);
        return NULL;
    }
    return memcpy(d, s, n);
}

/* ---- logging ---- */

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static int log_level = VT_LOG_WARN; /* set once from the environment, then by the CLI */

static void log_init(void)
{
    const char *e = getenv("VT_LOG_LEVEL");
    if (!e) return;
    if (!strcasecmp(e, "error")) log_level = VT_LOG_ERROR;
    else if (!strcasecmp(e, "warn")) log_level = VT_LOG_WARN;
    else if (!strcasecmp(e, "info")) log_level = VT_LOG_INFO;
    else if (!strcasecmp(e, "debug")) log_level = VT_LOG_DEBUG;
    else /* vt_log would re-enter this once-initialiser: written directly, in its format */
        fprintf(stderr, "vt: WARN: VT_LOG_LEVEL=%s is none of error, warn, info, debug; logging at "
                        "warn\n", e);
}

void vt_log_set_level(vt_log_level level)
{
    pthread_once(&log_once, log_init);
    log_level = level;
}

vt_log_level vt_log_get_level(void)
{
    pthread_once(&log_once, log_init);
    return (vt_log_level)log_level;
}

void vt_log(vt_log_level level, const char *fmt, ...)
{
    static const char *names[] = {"ERROR", "WARN", "INFO", "DEBUG"};
    pthread_once(&log_once, log_init);
    if ((int)level > log_level) return;
    char raw[2048], buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    vt_text_escape(buf, sizeof buf, raw, strlen(raw));
    fprintf(stderr, "vt: %s: %s\n", names[level < 4 ? level : 3], buf);
}

const char *vt_status_name(vt_status s)
{
    switch (s) {
    case VT_OK: return "VT_OK";
    case VT_ERR_INVALID_ARG: return "VT_ERR_INVALID_ARG";
    case VT_ERR_IO: return "VT_ERR_IO";
    case VT_ERR_FORMAT: return "VT_ERR_FORMAT";
    case VT_ERR_NOT_FOUND: return "VT_ERR_NOT_FOUND";
    case VT_ERR_OUT_OF_MEMORY: return "VT_ERR_OUT_OF_MEMORY";
    case VT_ERR_UNSUPPORTED: return "VT_ERR_UNSUPPORTED";
    case VT_ERR_ABI: return "VT_ERR_ABI";
    case VT_ERR_CAPABILITY: return "VT_ERR_CAPABILITY";
    case VT_ERR_RANGE: return "VT_ERR_RANGE";
    case VT_ERR_INTERNAL: return "VT_ERR_INTERNAL";
    case VT_ERR_DOES_NOT_FIT: return "VT_ERR_DOES_NOT_FIT";
    }
    return "VT_ERR_?";
}

const char *vt_file_type_name(unsigned mode)
{
    mode_t m = (mode_t)mode;
    return S_ISREG(m) ? "a regular file" : S_ISDIR(m) ? "a directory" : S_ISCHR(m) ? "a character device"
         : S_ISBLK(m) ? "a block device" : S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket"
         : S_ISLNK(m) ? "a symlink" : "another file type";
}
