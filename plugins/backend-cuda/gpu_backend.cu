/*
 * gpu_backend.cu - the vendor half of backend-cuda and backend-rocm: device
 * discovery, contexts, device and pinned host memory, copies, the zero-fill
 * kernel and the live memory probe, written once against the vt_gpu_* names
 * of gpu_vendor.h (CUDA runtime by default, HIP with -DVT_GPU_HIP).
 *
 * Compiled as C++ by nvcc (sm_90) or hipcc (gfx90a, gfx1030), in a C style;
 * every entry point has C linkage and the signature of its vt_backend_api
 * member (gpu_internal.h). The compute ops are in gpu_ops.cu.
 *
 * Execution model: ops run on the context's (blocking) stream, in issue
 * order; copies and fills are complete when their function returns
 * (capability async_queue is ABSENT). A copy runs on the legacy default
 * stream, which the blocking stream is ordered with, except a device-to-host
 * copy of at most 64 KiB (a layer's routing ids), which is queued on the
 * context's stream through a pinned bounce buffer and synchronised there
 * (VT_GPU_PINNED_D2H=0: the legacy stream). A context is used by one thread at a time, but not
 * always the same thread, so each call selects its device first.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_internal.h"
#include "gpu_vendor.h"

/* ======================= errors ======================= */


/* Report through the host table (or stderr before one is known); returns st. */
vt_status vt_gpu_fail(const vt_host_api *host, vt_status st, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (host && host->set_error)
        host->set_error("backend " VT_GPU_PLUGIN_NAME ": %s", msg);
    else
        fprintf(stderr, "backend " VT_GPU_PLUGIN_NAME ": %s\n", msg);
    return st;
}

/* The vt_status for a runtime error; clears the runtime's last error so a
 * later call does not report this one again. */
vt_status vt_gpu_status_of(vt_gpu_error e)
{
    (void)vt_gpu_get_last_error();
    if (e == vt_gpu_error_oom) return VT_ERR_OUT_OF_MEMORY;
    if (e == vt_gpu_error_invalid_value) return VT_ERR_INVALID_ARG;
    return VT_ERR_IO;
}

/* Select the context's device; on failure sets the error naming the call. */
vt_status vt_gpu_select_device(vt_backend_ctx *ctx, const char *op)
{
    vt_gpu_error e = vt_gpu_set_device(ctx->device);
    if (e == vt_gpu_success) return VT_OK;
    return vt_gpu_fail(ctx->host, vt_gpu_status_of(e), "%s: " VT_GPU_RT "SetDevice(%d) failed: %s", op,
                    ctx->device, vt_gpu_get_error_string(e));
}

/* ======================= kernels ======================= */

/* dst[i] = 0 for i < n_words 16-byte words, grid-stride. */
static __global__ void vt_gpu_zero_words(uint4 *dst, size_t n_words)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_words; i += stride)
        dst[i] = make_uint4(0u, 0u, 0u, 0u);
}

/* dst[i] = 0 for i < n bytes (unaligned head and tail), grid-stride. */
static __global__ void vt_gpu_zero_bytes(unsigned char *dst, size_t n)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) dst[i] = 0;
}

#define ZERO_THREADS 256u
#define ZERO_MAX_BLOCKS 8192u

static unsigned zero_blocks(size_t n_items)
{
    size_t b = (n_items + ZERO_THREADS - 1) / ZERO_THREADS;
    if (b > ZERO_MAX_BLOCKS) b = ZERO_MAX_BLOCKS;
    return b ? (unsigned)b : 1u;
}

/* ======================= devices ======================= */

unsigned long vt_gpu_xq_epoch;

extern "C" int vt_gpu_device_count(void)
{
    int n = 0;
    vt_gpu_error e = vt_gpu_get_device_count(&n);
    if (e != vt_gpu_success) {
        /* no driver, no device (cudaErrorNoDevice, hipErrorNoDevice, ...): zero devices */
        (void)vt_gpu_get_last_error();
        return 0;
    }
    return n > 0 ? n : 0;
}

/* Range check shared by init and device_name; why gets the runtime's reason
 * for a zero count. */
static int device_in_range(int device, int *count, const char **why)
{
    int n = 0;
    vt_gpu_error e = vt_gpu_get_device_count(&n);
    *why = "";
    if (e != vt_gpu_success) {
        *why = vt_gpu_get_error_string(e);
        (void)vt_gpu_get_last_error();
        n = 0;
    }
    *count = n;
    return device >= 0 && device < n;
}

extern "C" vt_status vt_gpu_device_name(int device, char *buf, size_t cap)
{
    if (!buf || !cap) return VT_ERR_INVALID_ARG;
    int n;
    const char *why;
    if (!device_in_range(device, &n, &why)) {
        snprintf(buf, cap, "?");
        return VT_ERR_RANGE;
    }
    vt_gpu_device_prop prop;
    vt_gpu_error e = vt_gpu_get_device_properties(&prop, device);
    if (e != vt_gpu_success) {
        snprintf(buf, cap, "?");
        return vt_gpu_status_of(e);
    }
    snprintf(buf, cap, "%s", prop.name);
    return VT_OK;
}

extern "C" vt_status vt_gpu_init_device(int device, const vt_host_api *host, vt_backend_ctx **out)
{
    if (!out) return vt_gpu_fail(host, VT_ERR_INVALID_ARG, "init: out is NULL");
    *out = NULL;
    int n;
    const char *why;
    if (!device_in_range(device, &n, &why))
        return vt_gpu_fail(host, VT_ERR_RANGE,
                        "device %d requested, but backend " VT_GPU_PLUGIN_NAME
                        " has %d device(s)%s%s%s",
                        device, n, *why ? " (" VT_GPU_RT "GetDeviceCount: " : "", why,
                        *why ? ")" : "");
    vt_gpu_device_prop prop;
    vt_gpu_error e = vt_gpu_get_device_properties(&prop, device);
    if (e != vt_gpu_success)
        return vt_gpu_fail(host, vt_gpu_status_of(e), "init: " VT_GPU_RT "GetDeviceProperties(%d) failed: %s",
                        device, vt_gpu_get_error_string(e));
    e = vt_gpu_set_device(device);
    /* free(NULL) creates the device's runtime context, so driver errors show here */
    if (e == vt_gpu_success) e = vt_gpu_free(NULL);
    if (e != vt_gpu_success)
        return vt_gpu_fail(host, vt_gpu_status_of(e), "init: cannot create a " VT_GPU_RUNTIME_NAME
                        " context on device %d (%s): %s", device, prop.name,
                        vt_gpu_get_error_string(e));

    vt_backend_ctx *ctx = (vt_backend_ctx *)calloc(1, sizeof *ctx);
    if (!ctx)
        return vt_gpu_fail(host, VT_ERR_OUT_OF_MEMORY, "init: context of %zu bytes", sizeof *ctx);
    ctx->device = device;
    ctx->host = host;
    snprintf(ctx->name, sizeof ctx->name, "%s", prop.name);
    vt_gpu_stream st = NULL;
    e = vt_gpu_stream_create(&st);
    if (e != vt_gpu_success) {
        free(ctx);
        return vt_gpu_fail(host, vt_gpu_status_of(e), "init: " VT_GPU_RT "StreamCreate on device %d "
                           "(%s) failed: %s", device, prop.name, vt_gpu_get_error_string(e));
    }
    ctx->stream = (void *)st;
    ctx->n_sm = prop.multiProcessorCount;
    vt_gpu_ops_init(ctx);
    if (host && host->log) {
        char total[32];
        vt_format_bytes((uint64_t)prop.totalGlobalMem, 0, total, sizeof total);
        host->log(VT_LOG_INFO, "backend " VT_GPU_PLUGIN_NAME ": device %d of %d: %s, %s, "
                  "compute capability %d.%d", device, n, prop.name, total, prop.major, prop.minor);
    }
    *out = ctx;
    return VT_OK;
}

/* ======================= diagnostic timeline ======================= */

#define TL_MAX (1u << 19)
struct vt_gpu_timeline {
    char path[4096];
    uint32_t n;
    vt_gpu_event ev[TL_MAX];
    char kind[TL_MAX];
};

void vt_gpu_tl_mark(vt_backend_ctx *ctx, char kind, int ahead)
{
    if (!ctx || ctx->capturing) return;
    if (!ctx->tl) {
        static int off;
        const char *p = off ? NULL : getenv("VT_GPU_TIMELINE");
        if (!p || !*p) {
            off = 1;
            return;
        }
        ctx->tl = (struct vt_gpu_timeline *)calloc(1, sizeof *ctx->tl);
        if (!ctx->tl) return;
        snprintf(ctx->tl->path, sizeof ctx->tl->path, "%s", p);
    }
    struct vt_gpu_timeline *t = ctx->tl;
    if (t->n >= TL_MAX) return;
    vt_gpu_event e;
    if (vt_gpu_event_create_timed(&e) != vt_gpu_success) {
        (void)vt_gpu_get_last_error(); /* not the next launch check's failure */
        return;
    }
    vt_gpu_stream s = ahead ? (vt_gpu_stream)ctx->ahead_stream : VT_ST;
    if (vt_gpu_event_record(e, s) != vt_gpu_success) {
        (void)vt_gpu_event_destroy(e);
        (void)vt_gpu_get_last_error();
        return;
    }
    t->ev[t->n] = e;
    t->kind[t->n++] = kind;
}

/* Every context of the process that recorded marks appends its own section
 * ("# context N: M marks", times from its first mark); the first section
 * written truncates the file. */
static void tl_write(vt_backend_ctx *ctx)
{
    struct vt_gpu_timeline *t = ctx->tl;
    if (!t) return;
    static int sections;
    FILE *f = fopen(t->path, sections ? "a" : "w");
    if (f) fprintf(f, "# context %d: %u marks\n", sections++, t->n);
    for (uint32_t i = 0; i < t->n; i++) {
        float ms = 0;
        if (f && vt_gpu_event_elapsed(&ms, t->ev[0], t->ev[i]) == vt_gpu_success)
            fprintf(f, "%c %.4f\n", t->kind[i], ms);
    }
    for (uint32_t i = 0; i < t->n; i++) (void)vt_gpu_event_destroy(t->ev[i]); /* ev[0] last read above */
    (void)vt_gpu_get_last_error();
    if (f) fclose(f);
    free(t);
    ctx->tl = NULL;
}

extern "C" void vt_gpu_shutdown(vt_backend_ctx *ctx)
{
    if (!ctx) return;
    /* finish what was queued on the device before its memory goes away */
    if (vt_gpu_set_device(ctx->device) == vt_gpu_success) (void)vt_gpu_device_synchronize();
    (void)vt_gpu_get_last_error();
    tl_write(ctx);
    vt_gpu_ops_release(ctx);
    if (ctx->ev_fork) (void)vt_gpu_event_destroy((vt_gpu_event)ctx->ev_fork);
    if (ctx->ev_join) (void)vt_gpu_event_destroy((vt_gpu_event)ctx->ev_join);
    if (ctx->ahead_stream) (void)vt_gpu_stream_destroy((vt_gpu_stream)ctx->ahead_stream);
    if (ctx->stream) (void)vt_gpu_stream_destroy((vt_gpu_stream)ctx->stream);
    (void)vt_gpu_get_last_error();
    free(ctx);
}

/* ======================= memory ======================= */

extern "C" vt_status vt_gpu_alloc(vt_backend_ctx *ctx, size_t bytes, const char *what, void **out)
{
    vt_gpu_xq_forget(NULL); /* a freed source's address may come back */
    const char *name = what ? what : "(unnamed)";
    if (!ctx || !out)
        return vt_gpu_fail(ctx ? ctx->host : NULL, VT_ERR_INVALID_ARG, "alloc for %s: %s is NULL",
                        name, ctx ? "out" : "ctx");
    *out = NULL;
    vt_status st = vt_gpu_select_device(ctx, "alloc");
    if (st) return st;
    void *p = NULL;
    vt_gpu_error e = vt_gpu_malloc(&p, bytes ? bytes : 256);
    if (e != vt_gpu_success) {
        char h[32], fr[32] = "?", tot[32] = "?";
        size_t f = 0, t = 0;
        const char *es = vt_gpu_get_error_string(e);
        st = vt_gpu_status_of(e);
        if (vt_gpu_mem_get_info(&f, &t) == vt_gpu_success) {
            vt_format_bytes(f, 0, fr, sizeof fr);
            vt_format_bytes(t, 0, tot, sizeof tot);
        }
        (void)vt_gpu_get_last_error();
        vt_format_bytes(bytes, 0, h, sizeof h);
        return vt_gpu_fail(ctx->host, st, VT_GPU_RT "Malloc of %s (%zu bytes) for %s failed: %s "
                        "(device %d, %s: %s free of %s)", h, bytes, name, es, ctx->device,
                        ctx->name, fr, tot);
    }
    *out = p;
    return VT_OK;
}

extern "C" void vt_gpu_free_mem(vt_backend_ctx *ctx, void *ptr)
{
    vt_gpu_xq_forget(NULL);
    if (!ctx || !ptr) return;
    if (vt_gpu_set_device(ctx->device) != vt_gpu_success) {
        (void)vt_gpu_get_last_error();
        return;
    }
    vt_gpu_error e = vt_gpu_free(ptr);
    if (e != vt_gpu_success) {
        /* free has no status to return: log, so a bad pointer is not silent */
        if (ctx->host && ctx->host->log)
            ctx->host->log(VT_LOG_WARN, "backend " VT_GPU_PLUGIN_NAME ": " VT_GPU_RT
                           "Free(%p) on device %d failed: %s", ptr, ctx->device,
                           vt_gpu_get_error_string(e));
        (void)vt_gpu_get_last_error();
    }
}

extern "C" vt_status vt_gpu_host_alloc_pinned(vt_backend_ctx *ctx, size_t bytes, const char *what,
                                              void **out)
{
    const char *name = what ? what : "(unnamed)";
    if (!ctx || !out)
        return vt_gpu_fail(ctx ? ctx->host : NULL, VT_ERR_INVALID_ARG,
                        "host_alloc_pinned for %s: %s is NULL", name, ctx ? "out" : "ctx");
    *out = NULL;
    vt_status st = vt_gpu_select_device(ctx, "host_alloc_pinned");
    if (st) return st;
    void *p = NULL;
    vt_gpu_error e = vt_gpu_host_alloc(&p, bytes ? bytes : 64);
    if (e != vt_gpu_success) {
        char h[32];
        vt_format_bytes(bytes, 0, h, sizeof h);
        const char *es = vt_gpu_get_error_string(e);
        return vt_gpu_fail(ctx->host, vt_gpu_status_of(e),
#ifdef VT_GPU_HIP
                        "hipHostMalloc"
#else
                        "cudaHostAlloc"
#endif
                        " of %s (%zu bytes) of pinned host memory for %s failed: %s", h, bytes,
                        name, es);
    }
    *out = p;
    return VT_OK;
}

extern "C" void vt_gpu_host_free_pinned(vt_backend_ctx *ctx, void *ptr)
{

    if (!ptr) return;
    vt_gpu_error e = vt_gpu_host_free(ptr);
    if (e != vt_gpu_success) {
        if (ctx && ctx->host && ctx->host->log)
            ctx->host->log(VT_LOG_WARN, "backend " VT_GPU_PLUGIN_NAME ": pinned host free of %p "
                           "failed: %s", ptr, vt_gpu_get_error_string(e));
        (void)vt_gpu_get_last_error();
    }
}

/* ======================= copies, fill, sync ======================= */

static vt_status gpu_copy(vt_backend_ctx *ctx, const char *op, void *dst, const void *src,
                          size_t bytes, int kind_d2d)
{
    if (!ctx) return vt_gpu_fail(NULL, VT_ERR_INVALID_ARG, "%s of %zu bytes: ctx is NULL", op, bytes);
    vt_gpu_xq_forget(ctx); /* dst may be the rounded activations' source */
    if (ctx->capturing) /* a copy is synchronous (legacy stream or bounce): not recordable */
        return vt_gpu_fail(ctx->host, VT_ERR_UNSUPPORTED, "%s of %zu bytes: copies cannot be "
                           "recorded into a graph (graph_begin .. graph_end)", op, bytes);
    if (!bytes) return VT_OK;
    if (!dst || !src)
        return vt_gpu_fail(ctx->host, VT_ERR_INVALID_ARG, "%s of %zu bytes: NULL %s pointer", op,
                        bytes, dst ? "source" : "destination");
    vt_status st = vt_gpu_select_device(ctx, op);
    if (st) return st;
    vt_gpu_error e;
    if (kind_d2d == 0) e = vt_gpu_memcpy(dst, src, bytes, vt_gpu_memcpy_h2d);
    else if (kind_d2d == 1) {
        vt_gpu_tl_mark(ctx, 'R', 0); /* the stream reached an ids/logits copy */
        /* a small copy (a layer's routing ids at decode) through the pinned
         * bounce on the context's stream: a pageable cudaMemcpy stages it
         * through the driver's buffer, slower to return */
        uint8_t *b = vt_gpu_d2h_bounce(ctx, bytes);
        if (b) {
            e = vt_gpu_memcpy_async(b, src, bytes, vt_gpu_memcpy_d2h, VT_ST);
            if (e == vt_gpu_success) e = vt_gpu_stream_synchronize(VT_ST);
            if (e == vt_gpu_success) memcpy(dst, b, bytes);
        } else {
            e = vt_gpu_memcpy(dst, src, bytes, vt_gpu_memcpy_d2h);
        }
    }
    else {
        /* a device-to-device copy returns before it completes: wait for it */
        e = vt_gpu_memcpy(dst, src, bytes, vt_gpu_memcpy_d2d);
        if (e == vt_gpu_success) e = vt_gpu_device_synchronize();
    }
    if (e != vt_gpu_success) {
        char h[32];
        vt_format_bytes(bytes, 0, h, sizeof h);
        return vt_gpu_fail(ctx->host, vt_gpu_status_of(e), "%s of %s (%zu bytes, %p -> %p) on device %d "
                        "failed: %s", op, h, bytes, src, dst, ctx->device,
                        vt_gpu_get_error_string(e));
    }
    return VT_OK;
}

extern "C" vt_status vt_gpu_copy_h2d(vt_backend_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    return gpu_copy(ctx, "copy_h2d", dst, src, bytes, 0);
}

/* ABI 1.4: queued on the context's stream (ordered with its ops; the
 * synchronous copies use the legacy stream, which the blocking stream is
 * ordered with too); returns once queued. */
extern "C" vt_status vt_gpu_copy_h2d_async(vt_backend_ctx *ctx, void *dst, const void *src,
                                           size_t bytes)
{
    if (!ctx) return vt_gpu_fail(NULL, VT_ERR_INVALID_ARG, "copy_h2d_async of %zu bytes: ctx is NULL", bytes);
    vt_gpu_xq_forget(ctx); /* dst may be the rounded activations' source */
    if (ctx->capturing)
        return vt_gpu_fail(ctx->host, VT_ERR_UNSUPPORTED, "copy_h2d_async of %zu bytes: copies "
                           "cannot be recorded into a graph (graph_begin .. graph_end)", bytes);
    if (!bytes) return VT_OK;
    if (!dst || !src)
        return vt_gpu_fail(ctx->host, VT_ERR_INVALID_ARG, "copy_h2d_async of %zu bytes: NULL %s "
                           "pointer", bytes, dst ? "source" : "destination");
    vt_status st = vt_gpu_select_device(ctx, "copy_h2d_async");
    if (st) return st;
    vt_gpu_tl_mark(ctx, 'd', 0);
    vt_gpu_error e = vt_gpu_memcpy_async(dst, src, bytes, vt_gpu_memcpy_h2d, VT_ST);
    vt_gpu_tl_mark(ctx, 'D', 0);
    if (e != vt_gpu_success) {
        char h[32];
        vt_format_bytes(bytes, 0, h, sizeof h);
        return vt_gpu_fail(ctx->host, vt_gpu_status_of(e), "copy_h2d_async of %s (%zu bytes, %p -> "
                           "%p) on device %d failed: %s", h, bytes, src, dst, ctx->device,
                           vt_gpu_get_error_string(e));
    }
    return VT_OK;
}

/* ABI 1.5: the second copy queue. The fork records an event on the
 * context's stream (which the synchronous copies' legacy stream is ordered
 * with, so it covers them too) and makes the ahead stream wait for it; the
 * join records one on the ahead stream and makes the context's stream wait.
 * Neither blocks the host. */
static vt_status ahead_setup(vt_backend_ctx *ctx, const char *op)
{
    if (!ctx) return vt_gpu_fail(NULL, VT_ERR_INVALID_ARG, "%s: ctx is NULL", op);
    if (ctx->capturing)
        return vt_gpu_fail(ctx->host, VT_ERR_UNSUPPORTED, "%s: not allowed while a graph is "
                           "being recorded (graph_begin .. graph_end)", op);
    vt_status st = vt_gpu_select_device(ctx, op);
    if (st) return st;
    if (ctx->ahead_stream) return VT_OK;
    vt_gpu_stream as = NULL;
    vt_gpu_event f = NULL, j = NULL;
    vt_gpu_error e = vt_gpu_stream_create_nonblocking(&as);
    if (e == vt_gpu_success) e = vt_gpu_event_create(&f);
    if (e == vt_gpu_success) e = vt_gpu_event_create(&j);
    if (e != vt_gpu_success) {
        if (j) (void)vt_gpu_event_destroy(j);
        if (f) (void)vt_gpu_event_destroy(f);
        if (as) (void)vt_gpu_stream_destroy(as);
        return vt_gpu_fail(ctx->host, vt_gpu_status_of(e), "%s: creating the ahead copy stream "
                           "and its events on device %d failed: %s", op, ctx->device,
                           vt_gpu_get_error_string(e));
    }
    ctx->ahead_stream = (void *)as;
    ctx->ev_fork = (void *)f;
    ctx->ev_join = (void *)j;
    return VT_OK;
}

static vt_status ahead_order(vt_backend_ctx *ctx, const char *op, void *ev, void *after,
                             void *waiter)
{
    vt_gpu_error e = vt_gpu_event_record((vt_gpu_event)ev, (vt_gpu_stream)after);
    if (e == vt_gpu_success) e = vt_gpu_stream_wait_event((vt_gpu_stream)waiter, (vt_gpu_event)ev);
    if (e != vt_gpu_success)
        return vt_gpu_fail(ctx->host, vt_gpu_status_of(e), "%s on device %d failed: %s", op,
                           ctx->device, vt_gpu_get_error_string(e));
    return VT_OK;
}

extern "C" vt_status vt_gpu_ahead_fork(vt_backend_ctx *ctx)
{
    vt_status st = ahead_setup(ctx, "ahead_fork");
    if (st) return st;
    return ahead_order(ctx, "ahead_fork", ctx->ev_fork, ctx->stream, ctx->ahead_stream);
}

extern "C" vt_status vt_gpu_ahead_join(vt_backend_ctx *ctx)
{
    vt_status st = ahead_setup(ctx, "ahead_join");
    if (st) return st;
    vt_gpu_xq_forget(ctx); /* the joined copies may have overwritten its source */
    st = ahead_order(ctx, "ahead_join", ctx->ev_join, ctx->ahead_stream, ctx->stream);
    vt_gpu_tl_mark(ctx, 'J', 0);
    return st;
}

/* The ahead copies: one cudaMemcpyBatchAsync (CUDA 13), else one
 * cudaMemcpyAsync each on the ahead stream (bench_h2d's batch column;
 * a gather kernel reading the page-locked host tier in place measured the
 * same, 42.7 against 42.8 GB/s at 589,824 bytes, and was not kept). */
extern "C" vt_status vt_gpu_copy_h2d_ahead(vt_backend_ctx *ctx, const vt_h2d_copy *copies,
                                           uint32_t n)
{
    vt_status st = ahead_setup(ctx, "copy_h2d_ahead");
    if (st) return st;
    if (n && !copies)
        return vt_gpu_fail(ctx->host, VT_ERR_INVALID_ARG, "copy_h2d_ahead of %u copies: NULL array", n);
    for (uint32_t i = 0; i < n; i++)
        if (copies[i].bytes && (!copies[i].dst || !copies[i].src))
            return vt_gpu_fail(ctx->host, VT_ERR_INVALID_ARG, "copy_h2d_ahead: copy %u of %u: "
                               "NULL %s pointer", i, n, copies[i].dst ? "source" : "destination");
#if !defined(VT_GPU_HIP) && CUDART_VERSION >= 13000
    /* CUDA 13: the copies in one cudaMemcpyBatchAsync call, which the
     * driver runs closer to the link's rate than single copies (bench_h2d on
     * the H100: 24 copies of 589,824 bytes at 51.4 GB/s against 43.9 one by
     * one; Qwen3.5-shape streamed decode 437 -> 447 tok/s). Sources are read
     * in stream order (the host tier slot is not reused before a quiesce).
     * VT_GPU_BATCH_COPY=0: one cudaMemcpyAsync each (for comparisons). */
    static int batch = -1;
    if (batch < 0) batch = !(getenv("VT_GPU_BATCH_COPY") && !strcmp(getenv("VT_GPU_BATCH_COPY"), "0"));
    if (batch && n > 1 && n <= 256) {
        void *dsts[256];
        const void *srcs[256];
        size_t sizes[256], idx = 0, m = 0;
        for (uint32_t i = 0; i < n; i++) {
            if (!copies[i].bytes) continue;
            dsts[m] = copies[i].dst;
            srcs[m] = copies[i].src;
            sizes[m++] = copies[i].bytes;
        }
        if (!m) return VT_OK;
        cudaMemcpyAttributes at;
        memset(&at, 0, sizeof at);
        at.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
        vt_gpu_tl_mark(ctx, 'a', 1);
        cudaError_t e = cudaMemcpyBatchAsync(dsts, srcs, sizes, m, &at, &idx, 1,
                                             (cudaStream_t)ctx->ahead_stream);
        vt_gpu_tl_mark(ctx, 'A', 1);
        if (e != cudaSuccess)
            return vt_gpu_fail(ctx->host, vt_gpu_status_of(e), "copy_h2d_ahead: a batch of %zu "
                               "copies on device %d failed: %s", m, ctx->device,
                               vt_gpu_get_error_string(e));
        return VT_OK;
    }
#endif
    for (uint32_t i = 0; i < n; i++) {
        if (!copies[i].bytes) continue;
        vt_gpu_tl_mark(ctx, 'a', 1);
        vt_gpu_error e = vt_gpu_memcpy_async(copies[i].dst, copies[i].src, copies[i].bytes,
                                             vt_gpu_memcpy_h2d, (vt_gpu_stream)ctx->ahead_stream);
        vt_gpu_tl_mark(ctx, 'A', 1);
        if (e != vt_gpu_success) {
            char h[32];
            vt_format_bytes(copies[i].bytes, 0, h, sizeof h);
            return vt_gpu_fail(ctx->host, vt_gpu_status_of(e), "copy_h2d_ahead of %s (%zu bytes, "
                               "%p -> %p) on device %d failed: %s", h, copies[i].bytes,
                               copies[i].src, copies[i].dst, ctx->device,
                               vt_gpu_get_error_string(e));
        }
    }
    return VT_OK;
}

extern "C" vt_status vt_gpu_copy_d2h(vt_backend_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    return gpu_copy(ctx, "copy_d2h", dst, src, bytes, 1);
}

extern "C" vt_status vt_gpu_copy_d2d(vt_backend_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    return gpu_copy(ctx, "copy_d2d", dst, src, bytes, 2);
}

extern "C" vt_status vt_gpu_memset_zero(vt_backend_ctx *ctx, void *dst, size_t bytes)
{
    if (!ctx) return vt_gpu_fail(NULL, VT_ERR_INVALID_ARG, "memset_zero of %zu bytes: ctx is NULL", bytes);
    vt_gpu_xq_forget(ctx);
    if (!bytes) return VT_OK;
    if (!dst)
        return vt_gpu_fail(ctx->host, VT_ERR_INVALID_ARG, "memset_zero of %zu bytes: NULL pointer", bytes);
    vt_status st = vt_gpu_select_device(ctx, "memset_zero");
    if (st) return st;
    unsigned char *p = (unsigned char *)dst;
    /* bytes up to the first 16-byte boundary, whole words, then the tail */
    size_t head = (size_t)((16u - ((uintptr_t)p & 15u)) & 15u);
    if (head > bytes) head = bytes;
    size_t n_words = (bytes - head) / 16;
    size_t tail = bytes - head - n_words * 16;
    if (head) vt_gpu_zero_bytes<<<1, ZERO_THREADS, 0, VT_ST>>>(p, head);
    if (n_words) vt_gpu_zero_words<<<zero_blocks(n_words), ZERO_THREADS, 0, VT_ST>>>((uint4 *)(p + head), n_words);
    if (tail) vt_gpu_zero_bytes<<<1, ZERO_THREADS, 0, VT_ST>>>(p + head + n_words * 16, tail);
    /* launch errors now; execution errors at the next synchronising call, as for every op */
    vt_gpu_error e = vt_gpu_get_last_error();
    if (e != vt_gpu_success) {
        char h[32];
        vt_format_bytes(bytes, 0, h, sizeof h);
        return vt_gpu_fail(ctx->host, vt_gpu_status_of(e), "memset_zero of %s (%zu bytes at %p) on device %d "
                        "failed: %s", h, bytes, dst, ctx->device, vt_gpu_get_error_string(e));
    }
    return VT_OK;
}

extern "C" vt_status vt_gpu_synchronize(vt_backend_ctx *ctx)
{
    if (!ctx) return vt_gpu_fail(NULL, VT_ERR_INVALID_ARG, "synchronize: ctx is NULL");
    if (ctx->capturing)
        return vt_gpu_fail(ctx->host, VT_ERR_UNSUPPORTED, "synchronize: not allowed while a graph "
                           "is being recorded (graph_begin .. graph_end)");
    vt_status st = vt_gpu_select_device(ctx, "synchronize");
    if (st) return st;
    vt_gpu_error e = vt_gpu_device_synchronize();
    if (e != vt_gpu_success)
        return vt_gpu_fail(ctx->host, vt_gpu_status_of(e), "synchronize on device %d failed: %s", ctx->device,
                        vt_gpu_get_error_string(e));
    return VT_OK;
}

/* ======================= memory probe ======================= */

extern "C" vt_status vt_gpu_memory_probe(vt_backend_ctx *ctx, uint64_t *free_bytes,
                                         uint64_t *total_bytes)
{
    if (!ctx || !free_bytes || !total_bytes)
        return vt_gpu_fail(ctx ? ctx->host : NULL, VT_ERR_INVALID_ARG, "memory_probe: NULL %s",
                        ctx ? "output" : "ctx");
    vt_status st = vt_gpu_select_device(ctx, "memory_probe");
    if (st) return st;
    size_t f = 0, t = 0;
    vt_gpu_error e = vt_gpu_mem_get_info(&f, &t);
    if (e != vt_gpu_success)
        return vt_gpu_fail(ctx->host, vt_gpu_status_of(e), "memory_probe: " VT_GPU_RT "MemGetInfo on device "
                        "%d failed: %s", ctx->device, vt_gpu_get_error_string(e));
    *free_bytes = (uint64_t)f;
    *total_bytes = (uint64_t)t;
    return VT_OK;
}
