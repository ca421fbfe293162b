/*
 * cpu_scratch.c - backend-cpu's error messages ("backend cpu: ...", an
 * allocation failure naming what and its bytes) and the per-thread scratch
 * every op may borrow (cpu_internal.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpu_internal.h"
#include "vt/plugin_util.h"

vt_status vt_cpu_fail(const vt_backend_ctx *ctx, vt_status st, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ctx && ctx->host && ctx->host->set_error)
        ctx->host->set_error("backend cpu: %s", msg);
    else
        fprintf(stderr, "backend cpu: %s\n", msg);
    return st;
}

/* "1.19 GiB", "64.00 KiB", "12 B" into buf. */
static const char *fmt_bytes(uint64_t bytes, char *buf, size_t cap)
{
    return vt_format_bytes(bytes, 0, buf, cap);
}

vt_status vt_cpu_fail_oom(const vt_backend_ctx *ctx, uint64_t bytes, const char *what_fmt, ...)
{
    char what[512], human[32];
    va_list ap;
    va_start(ap, what_fmt);
    vsnprintf(what, sizeof what, what_fmt, ap);
    va_end(ap);
    return vt_cpu_fail(ctx, VT_ERR_OUT_OF_MEMORY,
                       "allocation of %s (%llu bytes) for %s failed: out of memory",
                       fmt_bytes(bytes, human, sizeof human), (unsigned long long)bytes, what);
}

vt_status vt_cpu_scratch_reserve(vt_backend_ctx *ctx, size_t bytes)
{
    if (bytes <= ctx->scratch_bytes) return VT_OK;
    size_t want = bytes < 65536 ? 65536 : bytes + bytes / 4;
    want = (want + 63) & ~(size_t)63;
    for (int i = 0; i < ctx->n_threads; i++) {
        void *p = NULL;
        if (posix_memalign(&p, 64, want) != 0)
            return vt_cpu_fail_oom(ctx, want, "the scratch of thread %d", i);
        free(ctx->scratch[i]);
        ctx->scratch[i] = p;
    }
    ctx->scratch_bytes = want;
    return VT_OK;
}
