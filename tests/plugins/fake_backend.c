/*
 * fake_backend.c - a minimal backend plugin built several times with
 * different FAKE_* definitions, to test what the registry accepts and
 * refuses. It computes nothing: only the required functions exist.
 *   FAKE_ABI_MAJOR      descriptor abi_major (default VT_ABI_MAJOR)
 *   FAKE_SMALL_TABLE    table struct_size smaller than ABI 1.0 requires
 *   FAKE_UNDECLARED     leave memory_probe undeclared
 *   FAKE_PRESENT_NULL   declare memory_probe PRESENT with a NULL function
 *   FAKE_ABSENT_SET     declare rms_norm ABSENT with its function set
 *   FAKE_NAME           plugin name (default "fake")
 */
#include <stdlib.h>
#include <string.h>

#include "vt/backend.h"

#ifndef FAKE_ABI_MAJOR
#define FAKE_ABI_MAJOR VT_ABI_MAJOR
#endif
#ifndef FAKE_NAME
#define FAKE_NAME "fake"
#endif

static int fake_device_count(void) { return 1; }
static vt_status fake_init(const vt_backend_params *p, vt_backend_ctx **out)
{
    (void)p;
    *out = (vt_backend_ctx *)malloc(1);
    return VT_OK;
}
static void fake_shutdown(vt_backend_ctx *c) { free(c); }
static vt_status fake_alloc(vt_backend_ctx *c, size_t n, const char *what, void **out)
{
    (void)c;
    (void)what;
    *out = malloc(n);
    return *out ? VT_OK : VT_ERR_OUT_OF_MEMORY;
}
static void fake_free(vt_backend_ctx *c, void *p) { (void)c; free(p); }
static vt_status fake_copy(vt_backend_ctx *c, void *d, const void *s, size_t n)
{
    (void)c;
    memcpy(d, s, n);
    return VT_OK;
}
static vt_status fake_zero(vt_backend_ctx *c, void *d, size_t n)
{
    (void)c;
    memset(d, 0, n);
    return VT_OK;
}
static vt_status fake_sync(vt_backend_ctx *c) { (void)c; return VT_OK; }
static vt_status fake_probe(vt_backend_ctx *c, uint64_t *f, uint64_t *t)
{
    (void)c;
    *f = *t = 1u << 30;
    return VT_OK;
}
static vt_status fake_rms(vt_backend_ctx *c, const float *x, int64_t ldx, const float *w, float *y,
                          int64_t ldy, int64_t r, int64_t n, float eps)
{
    (void)c; (void)x; (void)ldx; (void)w; (void)y; (void)ldy; (void)r; (void)n; (void)eps;
    return VT_ERR_UNSUPPORTED;
}

static vt_capability caps[VT_CAP_ID_LIMIT];
static vt_backend_api table;

static void build(void)
{
    static const uint32_t fixed[] = {
        VT_CAP_MEMORY_PROBE, VT_CAP_PINNED_HOST_ALLOC, VT_CAP_HOST_ADDRESSABLE_DEVICE_MEMORY,
        VT_CAP_ASYNC_QUEUE, VT_CAP_PEER_COPY, VT_CAP_OP_RMS_NORM, VT_CAP_OP_L2_NORM,
        VT_CAP_OP_ROPE_NEOX, VT_CAP_OP_ATTENTION, VT_CAP_OP_SSM_CONV, VT_CAP_OP_GATED_DELTA_NET,
        VT_CAP_OP_UNARY, VT_CAP_OP_BINARY, VT_CAP_OP_SCALE, VT_CAP_OP_MUL_ROWS, VT_CAP_OP_COPY_2D,
        VT_CAP_OP_GATHER_ROWS, VT_CAP_OP_SCATTER_ADD, VT_CAP_OP_SOFTMAX_TOPK};
    uint32_t n = 0;
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
#ifdef FAKE_UNDECLARED
        if (fixed[i] == VT_CAP_MEMORY_PROBE) continue;
#endif
        caps[n++] = (vt_capability){fixed[i], VT_CAP_ABSENT, "fake backend computes nothing"};
    }
    for (uint32_t t = 0; t < VT_TYPE_COUNT; t++) {
        if (!vt_type_block_size(t)) continue;
        caps[n++] = (vt_capability){VT_CAP_MAT_MUL(t), VT_CAP_ABSENT, "fake backend computes nothing"};
        caps[n++] = (vt_capability){VT_CAP_GET_ROWS(t), VT_CAP_ABSENT, "fake backend computes nothing"};
    }
    for (uint32_t i = 0; i < n; i++)
        if (caps[i].id == VT_CAP_MEMORY_PROBE) caps[i] = (vt_capability){VT_CAP_MEMORY_PROBE, VT_CAP_PRESENT, NULL};
    table.struct_size = sizeof table;
#ifdef FAKE_SMALL_TABLE
    table.struct_size = 64;
#endif
    table.caps = caps;
    table.n_caps = n;
    table.device_count = fake_device_count;
    table.init = fake_init;
    table.shutdown = fake_shutdown;
    table.alloc = fake_alloc;
    table.free = fake_free;
    table.copy_h2d = fake_copy;
    table.copy_d2h = fake_copy;
    table.copy_d2d = fake_copy;
    table.memset_zero = fake_zero;
    table.synchronize = fake_sync;
#ifndef FAKE_PRESENT_NULL
    table.memory_probe = fake_probe;
#else
    (void)fake_probe;
#endif
#ifdef FAKE_ABSENT_SET
    table.rms_norm = fake_rms;
#else
    (void)fake_rms;
#endif
}

VT_PLUGIN_EXPORT const vt_plugin_desc *vt_plugin_entry(void)
{
    static vt_plugin_desc d;
    build();
    d = (vt_plugin_desc){.struct_size = sizeof d, .abi_major = FAKE_ABI_MAJOR, .abi_minor = VT_ABI_MINOR,
                         .kind = VT_PLUGIN_BACKEND, .name = FAKE_NAME, .version = "0.0.1",
                         .description = "registry test plugin", .table = &table};
    return &d;
}
