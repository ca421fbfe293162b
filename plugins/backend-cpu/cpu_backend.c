/*
 * cpu_backend.c - backend-cpu's plugin table (vt/backend.h): one device (the
 * host), memory through 64-byte aligned malloc, the capability list, context
 * creation (kernel set choice, thread pool, per-thread scratch).
 *
 * Kernel sets: vt_backend_params.kernels "auto" (or NULL) takes env
 * VT_KERNELS when set, else the fastest set the CPU supports (avx512, avx2,
 * scalar); "scalar" forces the float32 reference kernels for every op (the
 * documented switch for reference runs); "avx2"/"avx512" force one SIMD set
 * and fail when the CPU lacks it. The choice is logged at INFO.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/sysinfo.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "cpu_internal.h"
#include "vt/plugin_util.h"

#define CPU_PLUGIN_VERSION "0.1.0"

/* ======================= kernel sets ======================= */

static const vt_cpu_kernels *const all_sets[] = {
    &vt_cpu_kernels_scalar, &vt_cpu_kernels_avx2, &vt_cpu_kernels_avx512, &vt_cpu_kernels_avx2w16};

const vt_cpu_kernels *vt_cpu_kernels_find(const char *name)
{
    for (size_t i = 0; i < sizeof all_sets / sizeof all_sets[0]; i++)
        if (!strcmp(all_sets[i]->name, name)) return all_sets[i];
    return NULL;
}

int vt_cpu_has_f16c(void)
{
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    return (c >> 29) & 1u;
#else
    return 0;
#endif
}

const vt_cpu_kernels *vt_cpu_kernels_best(void)
{
    if (vt_cpu_kernels_avx512.supported()) return &vt_cpu_kernels_avx512;
    if (vt_cpu_kernels_avx2.supported()) return &vt_cpu_kernels_avx2;
    return &vt_cpu_kernels_scalar;
}

const vt_cpu_qdot_set *vt_cpu_qdot_for(const vt_cpu_kernels *k)
{
    const char *env = getenv("VT_CPU_INT8_DOT");
    if (!k || k == &vt_cpu_kernels_scalar || (env && !strcmp(env, "0"))) return NULL;
    if (k == &vt_cpu_kernels_avx512 && vt_cpu_qdot_avx512vnni.supported())
        return &vt_cpu_qdot_avx512vnni;
    if (vt_cpu_qdot_avx2.supported()) return &vt_cpu_qdot_avx2;
    return NULL;
}

void vt_cpu_ctx_set_kernels(vt_backend_ctx *ctx, const vt_cpu_kernels *k)
{
    ctx->k = k;
    ctx->qd = vt_cpu_qdot_for(k);
}
void vt_cpu_ctx_set_qdot(vt_backend_ctx *ctx, const vt_cpu_qdot_set *qd) { ctx->qd = qd; }
const vt_cpu_kernels *vt_cpu_ctx_kernels(const vt_backend_ctx *ctx) { return ctx->k; }

/* ======================= required functions ======================= */

static int cpu_device_count(void) { return 1; }

static void cpu_shutdown(vt_backend_ctx *ctx)
{
    if (!ctx) return;
    vt_cpu_pool_destroy(ctx->pool);
    if (ctx->scratch)
        for (int i = 0; i < ctx->n_threads; i++) free(ctx->scratch[i]);
    free(ctx->scratch);
    free(ctx->xq);
    free(ctx->rope.ff);
    free(ctx->rope.cs);
    free(ctx);
}

static vt_status cpu_init(const vt_backend_params *p, vt_backend_ctx **out)
{
    if (!out) return vt_cpu_fail(NULL, VT_ERR_INVALID_ARG, "init: out is NULL");
    *out = NULL;
    if (!p) return vt_cpu_fail(NULL, VT_ERR_INVALID_ARG, "init: params is NULL");
    vt_backend_ctx tmp = {0};
    tmp.host = p->host; /* for error messages below */
    if (p->struct_size < offsetof(vt_backend_params, host) + sizeof p->host)
        return vt_cpu_fail(&tmp, VT_ERR_ABI, "init: vt_backend_params struct_size %u is too small (%zu)",
                           p->struct_size, offsetof(vt_backend_params, host) + sizeof p->host);
    if (p->device != 0)
        return vt_cpu_fail(&tmp, VT_ERR_NOT_FOUND, "device %d requested, but the CPU backend has one device (0)",
                           (int)p->device);

    const char *want = p->kernels;
    const char *source = "kernels parameter";
    if (!want || !*want || !strcasecmp(want, "auto")) {
        const char *env = getenv("VT_KERNELS");
        want = NULL;
        if (env && *env && strcasecmp(env, "auto")) {
            want = env;
            source = "env VT_KERNELS";
        }
    }
    const vt_cpu_kernels *k;
    if (!want) {
        k = vt_cpu_kernels_best();
    } else {
        k = vt_cpu_kernels_find(want);
        if (!k)
            return vt_cpu_fail(&tmp, VT_ERR_INVALID_ARG,
                               "kernel set '%s' (%s) is unknown; use auto, scalar, avx2 or avx512", want,
                               source);
        if (!k->supported())
            return vt_cpu_fail(&tmp, VT_ERR_UNSUPPORTED,
                               "kernel set '%s' (%s) needs %s, which this CPU lacks", want, source,
                               k->isa);
    }

    vt_backend_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return vt_cpu_fail_oom(&tmp, sizeof *ctx, "the backend context");
    ctx->host = p->host;
    ctx->k = k;
    ctx->qd = vt_cpu_qdot_for(k);
    const char *i8 = getenv("VT_CPU_INT8_DOT");
    if (i8 && strcmp(i8, "0") && strcmp(i8, "1") && p->host && p->host->log)
        p->host->log(VT_LOG_WARN, "backend cpu: VT_CPU_INT8_DOT=%s is neither 0 nor 1; decode of "
                     "quantised weights keeps integer dot products (1)", i8);
    ctx->n_threads = p->n_threads > 0 ? (int)p->n_threads : vt_cpu_online_cores();
    ctx->scratch = calloc((size_t)ctx->n_threads, sizeof *ctx->scratch);
    if (!ctx->scratch) {
        int n = ctx->n_threads;
        cpu_shutdown(ctx);
        return vt_cpu_fail_oom(&tmp, (uint64_t)n * sizeof(void *), "the scratch table of %d threads",
                               n);
    }
    vt_status st = vt_cpu_pool_create(ctx, ctx->n_threads, &ctx->pool);
    if (st) {
        int n = ctx->n_threads;
        cpu_shutdown(ctx);
        if (st == VT_ERR_OUT_OF_MEMORY) return st; /* the pool named the allocation */
        return vt_cpu_fail(&tmp, st, "init: cannot start a thread pool of %d threads", n);
    }
    st = vt_cpu_scratch_reserve(ctx, 65536);
    if (st) {
        cpu_shutdown(ctx);
        return st;
    }
    if (p->host && p->host->log)
        p->host->log(VT_LOG_INFO, "backend cpu: kernel set '%s' (%s)%s, %d threads; decode of quantised "
                     "weights: %s%s", k->name, k->isa,
                     want ? " as requested" : ", chosen from the CPU's features", ctx->n_threads,
                     ctx->qd ? ctx->qd->name : "float path",
                     ctx->qd ? " integer dot products (int8 activations)" : "");
    *out = ctx;
    return VT_OK;
}

static vt_status cpu_alloc(vt_backend_ctx *ctx, size_t bytes, const char *what, void **out)
{
    if (!out) return vt_cpu_fail(ctx, VT_ERR_INVALID_ARG, "alloc for %s: out is NULL", what ? what : "?");
    *out = NULL;
    if (bytes > SIZE_MAX - 64)
        return vt_cpu_fail_oom(ctx, bytes, "%s (larger than the address space)",
                               what ? what : "(unnamed)");
    void *p = NULL;
    size_t sz = (bytes + 63) & ~(size_t)63;
    if (sz == 0) sz = 64;
    if (posix_memalign(&p, 64, sz) != 0)
        return vt_cpu_fail_oom(ctx, bytes, "%s", what ? what : "(unnamed)");
    *out = p;
    return VT_OK;
}

static void cpu_free(vt_backend_ctx *ctx, void *ptr)
{
    (void)ctx;
    free(ptr);
}

static vt_status cpu_copy(vt_backend_ctx *ctx, const char *op, void *dst, const void *src, size_t bytes)
{
    if (!bytes) return VT_OK;
    if (!dst || !src) return vt_cpu_fail(ctx, VT_ERR_INVALID_ARG, "%s of %zu bytes: NULL pointer", op, bytes);
    memmove(dst, src, bytes);
    return VT_OK;
}

static vt_status cpu_copy_h2d(vt_backend_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    return cpu_copy(ctx, "copy_h2d", dst, src, bytes);
}
static vt_status cpu_copy_d2h(vt_backend_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    return cpu_copy(ctx, "copy_d2h", dst, src, bytes);
}
static vt_status cpu_copy_d2d(vt_backend_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    return cpu_copy(ctx, "copy_d2d", dst, src, bytes);
}

static vt_status cpu_memset_zero(vt_backend_ctx *ctx, void *dst, size_t bytes)
{
    if (!bytes) return VT_OK;
    if (!dst) return vt_cpu_fail(ctx, VT_ERR_INVALID_ARG, "memset_zero of %zu bytes: NULL pointer", bytes);
    memset(dst, 0, bytes);
    return VT_OK;
}

static vt_status cpu_synchronize(vt_backend_ctx *ctx)
{
    (void)ctx; /* ops are synchronous */
    return VT_OK;
}

/* Live MemAvailable / MemTotal from /proc/meminfo; sysinfo() where that is absent. */
static vt_status cpu_memory_probe(vt_backend_ctx *ctx, uint64_t *free_bytes, uint64_t *total_bytes)
{
    if (!free_bytes || !total_bytes)
        return vt_cpu_fail(ctx, VT_ERR_INVALID_ARG, "memory_probe: NULL output");
    uint64_t avail = 0, total = 0;
    int have_avail = 0, have_total = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f)) {
            unsigned long long kb;
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
                avail = (uint64_t)kb * 1024u;
                have_avail = 1;
            } else if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) {
                total = (uint64_t)kb * 1024u;
                have_total = 1;
            }
        }
        fclose(f);
    }
    if (!have_avail || !have_total) {
        struct sysinfo si;
        if (sysinfo(&si) != 0)
            return vt_cpu_fail(ctx, VT_ERR_IO, "memory_probe: neither /proc/meminfo nor sysinfo() is readable");
        if (!have_total) total = (uint64_t)si.totalram * si.mem_unit;
        if (!have_avail) avail = ((uint64_t)si.freeram + si.bufferram) * si.mem_unit;
    }
    *free_bytes = avail;
    *total_bytes = total;
    return VT_OK;
}

/* "host CPU (<model name>, <SIMD level>)" from /proc/cpuinfo. */
static vt_status cpu_device_name(int device, char *buf, size_t cap)
{
    if (!buf || !cap) return VT_ERR_INVALID_ARG;
    if (device != 0) {
        snprintf(buf, cap, "?");
        return VT_ERR_RANGE;
    }
    char model[128] = "unknown model";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f)) {
            const char *c = strchr(line, ':');
            if (!strncmp(line, "model name", 10) && c) {
                snprintf(model, sizeof model, "%s", c + 2);
                model[strcspn(model, "\n")] = 0;
                break;
            }
        }
        fclose(f);
    }
    snprintf(buf, cap, "host CPU (%s)", model);
    return VT_OK;
}

/* ======================= op entry points ======================= */

#define MM_ENTRY(NAME, TYPE)                                                                   \
    static vt_status NAME(vt_backend_ctx *ctx, const vt_weight *w, const float *x, int64_t ldx, \
                          float *y, int64_t ldy, int64_t n_tokens)                             \
    {                                                                                          \
        return vt_cpu_mat_mul(ctx, TYPE, w, x, ldx, y, ldy, n_tokens);                         \
    }
#define GR_ENTRY(NAME, TYPE)                                                                   \
    static vt_status NAME(vt_backend_ctx *ctx, const vt_weight *w, const int32_t *ids,         \
                          int64_t n, float *out)                                               \
    {                                                                                          \
        return vt_cpu_get_rows(ctx, TYPE, w, ids, n, out);                                     \
    }
#define OP_ENTRIES(T, n) MM_ENTRY(mm_##n, VT_TYPE_##T) GR_ENTRY(gr_##n, VT_TYPE_##T)
VT_CPU_DIRECT_TYPES(OP_ENTRIES)
VT_CPU_PANEL_TYPES(OP_ENTRIES)
#undef OP_ENTRIES
/* ids >= VT_TYPE_SLOTS (ABI 1.9): one entry each, the type read from the weight */
static vt_status mm_ext(vt_backend_ctx *ctx, const vt_weight *w, const float *x, int64_t ldx,
                        float *y, int64_t ldy, int64_t n_tokens)
{
    return vt_cpu_mat_mul(ctx, w ? w->type : 0, w, x, ldx, y, ldy, n_tokens);
}
static vt_status gr_ext(vt_backend_ctx *ctx, const vt_weight *w, const int32_t *ids, int64_t n,
                        float *out)
{
    return vt_cpu_get_rows(ctx, w ? w->type : 0, w, ids, n, out);
}

/* ======================= capabilities ======================= */

#define PRESENT(id) {(uint32_t)(id), VT_CAP_PRESENT, NULL}
#define ABSENT(id, why) {(uint32_t)(id), VT_CAP_ABSENT, why}
#define TYPE_PRESENT(t) PRESENT(VT_CAP_MAT_MUL(t)), PRESENT(VT_CAP_GET_ROWS(t))
#define TYPE_ABSENT(t, name)                                                                   \
    ABSENT(VT_CAP_MAT_MUL(t), "weight type " name " not implemented in backend-cpu yet"),     \
        ABSENT(VT_CAP_GET_ROWS(t), "weight type " name " not implemented in backend-cpu yet")

static const vt_capability cpu_caps[] = {
    PRESENT(VT_CAP_MEMORY_PROBE),
    ABSENT(VT_CAP_PINNED_HOST_ALLOC, "host memory is already CPU memory; no pinning needed"),
    PRESENT(VT_CAP_HOST_ADDRESSABLE_DEVICE_MEMORY),
    ABSENT(VT_CAP_ASYNC_QUEUE, "ops run synchronously"),
    ABSENT(VT_CAP_PEER_COPY, "one CPU device"),
    PRESENT(VT_CAP_DEVICE_NAME),
    PRESENT(VT_CAP_OP_RMS_NORM),
    PRESENT(VT_CAP_OP_L2_NORM),
    PRESENT(VT_CAP_OP_ROPE_NEOX),
    PRESENT(VT_CAP_OP_ATTENTION),
    PRESENT(VT_CAP_OP_SSM_CONV),
    PRESENT(VT_CAP_OP_GATED_DELTA_NET),
    PRESENT(VT_CAP_OP_UNARY),
    PRESENT(VT_CAP_OP_BINARY),
    PRESENT(VT_CAP_OP_SCALE),
    PRESENT(VT_CAP_OP_MUL_ROWS),
    PRESENT(VT_CAP_OP_COPY_2D),
    PRESENT(VT_CAP_OP_GATHER_ROWS),
    PRESENT(VT_CAP_OP_SCATTER_ADD),
    PRESENT(VT_CAP_OP_SOFTMAX_TOPK),
    PRESENT(VT_CAP_OP_MOE_ROUTE),
    PRESENT(VT_CAP_OP_MOE_FFN),
    ABSENT(VT_CAP_GRAPH, "ops run synchronously on the calling thread's pool: there is no launch "
           "cost for a recorded graph to save"),
#define VT_CPU_NO_FUSION "a fused element-wise op saves launches, which the CPU does not have: " \
                         "models compose unary, binary, mul_rows and rms_norm"
    ABSENT(VT_CAP_OP_MUL_ACT, VT_CPU_NO_FUSION),
    ABSENT(VT_CAP_OP_ADD_RMS_NORM, VT_CPU_NO_FUSION),
    ABSENT(VT_CAP_OP_DELTA_NET_GATES, VT_CPU_NO_FUSION),
    ABSENT(VT_CAP_COPY_H2D_ASYNC, "device memory is host memory: copy_h2d is a memcpy on the "
           "calling thread, with nothing to overlap"),
    ABSENT(VT_CAP_COPY_H2D_AHEAD, "device memory is host memory: there is no second copy queue "
           "to run beside the ops"),
    /* weight types: every id that vt/types.h names */
    TYPE_PRESENT(VT_TYPE_F32),
    TYPE_PRESENT(VT_TYPE_F16),
    TYPE_PRESENT(VT_TYPE_Q4_0),
    TYPE_PRESENT(VT_TYPE_Q4_1),
    TYPE_PRESENT(VT_TYPE_Q5_0),
    TYPE_PRESENT(VT_TYPE_Q5_1),
    TYPE_PRESENT(VT_TYPE_Q8_0),
    TYPE_ABSENT(VT_TYPE_Q8_1, "Q8_1"),
    TYPE_PRESENT(VT_TYPE_Q2_K),
    TYPE_PRESENT(VT_TYPE_Q3_K),
    TYPE_PRESENT(VT_TYPE_Q4_K),
    TYPE_PRESENT(VT_TYPE_Q5_K),
    TYPE_PRESENT(VT_TYPE_Q6_K),
    TYPE_ABSENT(VT_TYPE_Q8_K, "Q8_K"),
    TYPE_PRESENT(VT_TYPE_IQ2_XXS),
    TYPE_PRESENT(VT_TYPE_IQ2_XS),
    TYPE_PRESENT(VT_TYPE_IQ3_XXS),
    TYPE_PRESENT(VT_TYPE_IQ1_S),
    TYPE_PRESENT(VT_TYPE_IQ4_NL),
    TYPE_PRESENT(VT_TYPE_IQ3_S),
    TYPE_PRESENT(VT_TYPE_IQ2_S),
    TYPE_PRESENT(VT_TYPE_IQ4_XS),
    TYPE_ABSENT(VT_TYPE_I8, "I8"),
    TYPE_ABSENT(VT_TYPE_I16, "I16"),
    TYPE_ABSENT(VT_TYPE_I32, "I32"),
    TYPE_ABSENT(VT_TYPE_I64, "I64"),
    TYPE_ABSENT(VT_TYPE_F64, "F64"),
    TYPE_PRESENT(VT_TYPE_IQ1_M),
    TYPE_PRESENT(VT_TYPE_BF16),
    TYPE_PRESENT(VT_TYPE_TQ1_0),
    TYPE_PRESENT(VT_TYPE_TQ2_0),
    TYPE_PRESENT(VT_TYPE_MXFP4),
    TYPE_PRESENT(VT_TYPE_NVFP4),
    TYPE_PRESENT(VT_TYPE_Q1_0),
    TYPE_PRESENT(VT_TYPE_Q2_0),
    TYPE_PRESENT(VT_TYPE_IQ1_XS), /* ABI 1.9: mat_mul_ext / get_rows_ext */
    TYPE_PRESENT(VT_TYPE_IQ1_XXS),
    TYPE_PRESENT(VT_TYPE_IQ1_XXXS),
};

/* ======================= the table ======================= */

static const vt_backend_api cpu_api = {
    .struct_size = sizeof(vt_backend_api),
    .caps = cpu_caps,
    .n_caps = sizeof cpu_caps / sizeof cpu_caps[0],
    .device_count = cpu_device_count,
    .init = cpu_init,
    .shutdown = cpu_shutdown,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy_h2d = cpu_copy_h2d,
    .copy_d2h = cpu_copy_d2h,
    .copy_d2d = cpu_copy_d2d,
    .memset_zero = cpu_memset_zero,
    .synchronize = cpu_synchronize,
    .memory_probe = cpu_memory_probe,
    .host_alloc_pinned = NULL,
    .host_free_pinned = NULL,
    .copy_peer = NULL,
    .mat_mul = {VT_CPU_DIRECT_TYPES(VT_CPU_MM_INIT) VT_CPU_PANEL_TYPES(VT_CPU_MM_INIT)},
    .get_rows = {VT_CPU_DIRECT_TYPES(VT_CPU_GR_INIT) VT_CPU_PANEL_TYPES(VT_CPU_GR_INIT)},
    .rms_norm = vt_cpu_rms_norm,
    .l2_norm = vt_cpu_l2_norm,
    .rope_neox = vt_cpu_rope_neox,
    .attention = vt_cpu_attention,
    .ssm_conv = vt_cpu_ssm_conv,
    .gated_delta_net = vt_cpu_gated_delta_net,
    .unary = vt_cpu_unary,
    .binary = vt_cpu_binary,
    .scale = vt_cpu_scale,
    .mul_rows = vt_cpu_mul_rows,
    .copy_2d = vt_cpu_copy_2d,
    .gather_rows = vt_cpu_gather_rows,
    .scatter_add = vt_cpu_scatter_add,
    .softmax_topk = vt_cpu_softmax_topk,
    .device_name = cpu_device_name,
    .moe_route = vt_cpu_moe_route,
    .moe_ffn = vt_cpu_moe_ffn,
    .mat_mul_ext = mm_ext,
    .get_rows_ext = gr_ext,
};

static const vt_plugin_desc cpu_desc = {
    .struct_size = sizeof(vt_plugin_desc),
    .abi_major = VT_ABI_MAJOR,
    .abi_minor = VT_ABI_MINOR,
    .kind = VT_PLUGIN_BACKEND,
    .name = "cpu",
    .version = CPU_PLUGIN_VERSION,
    .description = "CPU backend: float32 scalar reference, AVX2/AVX-512 kernels for F32/F16/BF16 and every common quantised type (Q4_0..Q8_0, K-quants, IQ4, MXFP4) and the low-bit types (IQ1-IQ3, TQ, NVFP4, Q1_0/Q2_0; float path), pthread pool",
    .table = &cpu_api,
};

const vt_backend_api *vt_cpu_backend_api(void) { return &cpu_api; }
const vt_plugin_desc *vt_cpu_plugin_desc(void) { return &cpu_desc; }
