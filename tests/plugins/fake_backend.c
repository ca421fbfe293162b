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
 *   FAKE_ABI_MINOR      descriptor abi_minor; 0 builds the table as an ABI 1.0
 *                       plugin would (no device_name member, not declared)
 *   FAKE_NO_PROBE       declare memory_probe ABSENT (function NULL)
 *   FAKE_DISCRETE       with FAKE_ALL_OPS: device memory is not host-addressable,
 *                       so a model copies every weight with copy_h2d (memcpy
 *                       into malloc-ed "device" memory): load-progress tests
 *   FAKE_CTOR           an ELF constructor that creates the file named by
 *                       $VT_FAKE_CTOR_MARK: shows whether dlopen ran its code
 *   FAKE_ALL_OPS        declare every op and weight type PRESENT (stubs that
 *                       return VT_ERR_UNSUPPORTED) and host-addressable memory,
 *                       for fit-check tests; memory_probe reports
 *                       total = $VT_FAKE_TOTAL_BYTES (default 1 GiB), free = total
 * At load, every variant reads $VT_FAKE_DEVICES (the device count it reports,
 * default 1) and $VT_FAKE_PEER_COPY (set: peer_copy PRESENT with a stub):
 * the multi-device refusals of the residency.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "vt/backend.h"

#ifndef FAKE_ABI_MAJOR
#define FAKE_ABI_MAJOR VT_ABI_MAJOR
#endif
#ifndef FAKE_NAME
#define FAKE_NAME "fake"
#endif
#ifndef FAKE_ABI_MINOR
#define FAKE_ABI_MINOR VT_ABI_MINOR
#endif

#ifdef FAKE_CTOR
#include <stdio.h>
__attribute__((constructor)) static void fake_ctor(void)
{
    const char *p = getenv("VT_FAKE_CTOR_MARK");
    FILE *f = p ? fopen(p, "w") : NULL;
    if (f) fclose(f);
}
#endif

static int fake_device_count(void)
{
    const char *n = getenv("VT_FAKE_DEVICES");
    return n ? atoi(n) : 1;
}
static vt_status fake_copy_peer(vt_backend_ctx *dc, void *d, vt_backend_ctx *sc, const void *s,
                                size_t n)
{
    (void)dc; (void)d; (void)sc; (void)s; (void)n;
    return VT_ERR_UNSUPPORTED;
}
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
    const char *env = getenv("VT_FAKE_TOTAL_BYTES");
    *f = *t = env ? strtoull(env, NULL, 10) : (1u << 30);
    return VT_OK;
}
static vt_status fake_device_name(int device, char *buf, size_t cap)
{
    (void)device;
    if (cap) strncpy(buf, "fake device", cap - 1), buf[cap - 1] = 0;
    return VT_OK;
}
#ifdef FAKE_ALL_OPS
/* Stubs: present so that model requirements pass; the fit tests never run them. */
static vt_status stub_mm(vt_backend_ctx *c, const vt_weight *w, const float *x, int64_t ldx,
                         float *y, int64_t ldy, int64_t n)
{
    (void)c; (void)w; (void)x; (void)ldx; (void)y; (void)ldy; (void)n;
    return VT_ERR_UNSUPPORTED;
}
static vt_status stub_gr(vt_backend_ctx *c, const vt_weight *w, const int32_t *ids, int64_t n,
                         float *out)
{
    (void)c; (void)w; (void)ids; (void)n; (void)out;
    return VT_ERR_UNSUPPORTED;
}
#define STUB(name, ...)                                                                         \
    static vt_status name(__VA_ARGS__) { return VT_ERR_UNSUPPORTED; }
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
STUB(stub_l2, vt_backend_ctx *c, const float *x, int64_t ldx, float *y, int64_t ldy, int64_t r, int64_t n, float e)
STUB(stub_rope, vt_backend_ctx *c, float *x, int64_t a, int64_t b, int64_t t, int64_t h, int64_t r, const int32_t *p, float base, const float *ff)
STUB(stub_attn, vt_backend_ctx *c, const float *q, int64_t ldq, int64_t ldqh, const float *k, const float *v, float *o, int64_t ldo, int64_t t, int64_t h, int64_t hk, int64_t hd, int64_t p0, int64_t nkv, int64_t w, float s, float sc)
STUB(stub_conv, vt_backend_ctx *c, const float *x, int64_t ldx, const float *w, float *st, float *y, int64_t ldy, int64_t t, int64_t ch, int64_t dc)
STUB(stub_gdn, vt_backend_ctx *c, const float *q, const float *k, int64_t ldqk, const float *v, int64_t ldv, const float *g, const float *b, float *st, float *o, int64_t ldo, int64_t t, int64_t nk, int64_t nv, int64_t dk, int64_t dv)
STUB(stub_unary, vt_backend_ctx *c, vt_unary_op op, const float *x, float *y, int64_t n)
STUB(stub_binary, vt_backend_ctx *c, vt_binary_op op, const float *a, const float *b, float *y, int64_t n, int64_t nb)
STUB(stub_scale, vt_backend_ctx *c, const float *x, float *y, int64_t n, float s)
STUB(stub_mul_rows, vt_backend_ctx *c, const float *x, const float *s, float *y, int64_t r, int64_t n)
STUB(stub_copy_2d, vt_backend_ctx *c, const float *s, int64_t lds, float *d, int64_t ldd, int64_t r, int64_t n)
STUB(stub_gather, vt_backend_ctx *c, const float *s, int64_t lds, const int32_t *idx, int64_t n, int64_t nc, float *d, int64_t ldd)
STUB(stub_scatter, vt_backend_ctx *c, const float *s, int64_t lds, const int32_t *idx, const float *wt, int64_t n, int64_t nc, float *d, int64_t ldd)
STUB(stub_topk, vt_backend_ctx *c, const float *l, int64_t r, int64_t n, int64_t k, int rn, int32_t *ids, float *w, float *p)
#pragma GCC diagnostic pop
#endif
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
#if FAKE_ABI_MINOR >= 1
    caps[n++] = (vt_capability){VT_CAP_DEVICE_NAME, VT_CAP_PRESENT, NULL};
    table.device_name = fake_device_name;
#else
    (void)fake_device_name;
#endif
#if FAKE_ABI_MINOR >= 2
    caps[n++] = (vt_capability){VT_CAP_OP_MOE_ROUTE, VT_CAP_ABSENT, "fake backend computes nothing"};
    caps[n++] = (vt_capability){VT_CAP_OP_MOE_FFN, VT_CAP_ABSENT, "fake backend computes nothing"};
    caps[n++] = (vt_capability){VT_CAP_GRAPH, VT_CAP_ABSENT, "fake backend computes nothing"};
#endif
#if FAKE_ABI_MINOR >= 3
    caps[n++] = (vt_capability){VT_CAP_OP_MUL_ACT, VT_CAP_ABSENT, "fake backend computes nothing"};
    caps[n++] = (vt_capability){VT_CAP_OP_ADD_RMS_NORM, VT_CAP_ABSENT, "fake backend computes nothing"};
    caps[n++] = (vt_capability){VT_CAP_OP_DELTA_NET_GATES, VT_CAP_ABSENT,
                                "fake backend computes nothing"};
#endif
#if FAKE_ABI_MINOR >= 4
    caps[n++] = (vt_capability){VT_CAP_COPY_H2D_ASYNC, VT_CAP_ABSENT, "fake backend computes nothing"};
#endif
#if FAKE_ABI_MINOR >= 5
    caps[n++] = (vt_capability){VT_CAP_COPY_H2D_AHEAD, VT_CAP_ABSENT, "fake backend computes nothing"};
#endif
    if (getenv("VT_FAKE_PEER_COPY"))
        for (uint32_t i = 0; i < n; i++)
            if (caps[i].id == VT_CAP_PEER_COPY) {
                caps[i] = (vt_capability){VT_CAP_PEER_COPY, VT_CAP_PRESENT, NULL};
                table.copy_peer = fake_copy_peer;
            }
#ifndef FAKE_NO_PROBE
    for (uint32_t i = 0; i < n; i++)
        if (caps[i].id == VT_CAP_MEMORY_PROBE) caps[i] = (vt_capability){VT_CAP_MEMORY_PROBE, VT_CAP_PRESENT, NULL};
#else
    for (uint32_t i = 0; i < n; i++)
        if (caps[i].id == VT_CAP_MEMORY_PROBE)
            caps[i] = (vt_capability){VT_CAP_MEMORY_PROBE, VT_CAP_ABSENT,
                                      "fake backend: no memory probe (test)"};
#endif
#ifdef FAKE_ALL_OPS
    for (uint32_t i = 0; i < n; i++) {
        uint32_t id = caps[i].id;
        if (id == VT_CAP_PINNED_HOST_ALLOC || id == VT_CAP_ASYNC_QUEUE || id == VT_CAP_PEER_COPY ||
            id == VT_CAP_MEMORY_PROBE || id == VT_CAP_DEVICE_NAME || id == VT_CAP_OP_MOE_ROUTE ||
            id == VT_CAP_OP_MOE_FFN || id == VT_CAP_GRAPH || id == VT_CAP_OP_MUL_ACT ||
            id == VT_CAP_OP_ADD_RMS_NORM || id == VT_CAP_COPY_H2D_ASYNC || id == VT_CAP_COPY_H2D_AHEAD ||
            id == VT_CAP_OP_DELTA_NET_GATES) /* stay ABSENT: models compose them */
            continue;
#ifdef FAKE_DISCRETE
        if (id == VT_CAP_HOST_ADDRESSABLE_DEVICE_MEMORY) {
            caps[i].reason = "fake discrete device: weights are copied (test)";
            continue;
        }
#endif
        /* VT_FAKE_ABSENT_TYPE=<type id>: that weight type stays ABSENT (load-time refusal test) */
        const char *absent = getenv("VT_FAKE_ABSENT_TYPE");
        uint32_t wt;
        int gr;
        const int typed = vt_cap_weight_type(id, &wt, &gr);
        if (absent && typed && (uint32_t)atoi(absent) == wt) continue;
        if (typed && wt >= VT_TYPE_SLOTS && FAKE_ABI_MINOR < 9) continue;
        caps[i].state = VT_CAP_PRESENT;
        caps[i].reason = NULL;
        if (typed && wt < VT_TYPE_SLOTS) {
            if (gr) table.get_rows[wt] = stub_gr;
            else table.mat_mul[wt] = stub_mm;
        }
#if FAKE_ABI_MINOR >= 9 && !defined(FAKE_EXT_NULL) /* FAKE_EXT_NULL: PRESENT without it */
        if (typed && wt >= VT_TYPE_SLOTS) {
            if (gr) table.get_rows_ext = stub_gr;
            else table.mat_mul_ext = stub_mm;
        }
#endif
    }
    table.rms_norm = fake_rms;
    table.l2_norm = stub_l2;
    table.rope_neox = stub_rope;
    table.attention = stub_attn;
    table.ssm_conv = stub_conv;
    table.gated_delta_net = stub_gdn;
    table.unary = stub_unary;
    table.binary = stub_binary;
    table.scale = stub_scale;
    table.mul_rows = stub_mul_rows;
    table.copy_2d = stub_copy_2d;
    table.gather_rows = stub_gather;
    table.scatter_add = stub_scatter;
    table.softmax_topk = stub_topk;
#endif
    table.struct_size = FAKE_ABI_MINOR >= 1 ? sizeof table
                                            : offsetof(vt_backend_api, softmax_topk) + sizeof(void *);
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
#if !defined(FAKE_PRESENT_NULL) && !defined(FAKE_NO_PROBE)
    table.memory_probe = fake_probe;
#else
    (void)fake_probe;
#endif
#if defined(FAKE_ABSENT_SET)
    table.rms_norm = fake_rms;
#elif !defined(FAKE_ALL_OPS)
    (void)fake_rms;
#endif
}

VT_PLUGIN_EXPORT const vt_plugin_desc *vt_plugin_entry(void)
{
    static vt_plugin_desc d;
    build();
    d = (vt_plugin_desc){.struct_size = sizeof d, .abi_major = FAKE_ABI_MAJOR, .abi_minor = FAKE_ABI_MINOR,
                         .kind = VT_PLUGIN_BACKEND, .name = FAKE_NAME, .version = "0.0.1",
                         .description = "registry test plugin", .table = &table};
    return &d;
}
