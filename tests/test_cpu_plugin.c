/*
 * test_cpu_plugin.c - backend-cpu.so as the registry sees it: dlopen it from
 * the build's plugin folder, read the descriptor through vt_plugin_entry,
 * and check the contract of vt/plugin.h and vt/backend.h: ABI version, kind,
 * name, struct sizes, every required function set, and a capability list
 * that declares every capability id of vt_cap_id and VT_CAP_MAT_MUL(t) /
 * VT_CAP_GET_ROWS(t) for every type id that vt/types.h names, exactly once,
 * PRESENT with the function set or ABSENT with the function NULL and a reason.
 * Also the manifest beside the .so.
 */
#include <dlfcn.h>

#include "test_util.h"
#include "vt/backend.h"

static const vt_backend_api *load(void **handle)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/backend-cpu.so", vt_test_plugin_dir());
    *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!*handle) fail_msg("dlopen %s: %s", path, dlerror());
    vt_plugin_entry_fn entry = (vt_plugin_entry_fn)dlsym(*handle, VT_PLUGIN_ENTRY_SYMBOL);
    assert_non_null(entry);
    const vt_plugin_desc *d = entry();
    assert_non_null(d);
    assert_int_equal(d->struct_size, sizeof(vt_plugin_desc));
    assert_int_equal(d->abi_major, VT_ABI_MAJOR);
    assert_int_equal(d->abi_minor, VT_ABI_MINOR);
    assert_int_equal(d->kind, VT_PLUGIN_BACKEND);
    assert_string_equal(d->name, "cpu");
    assert_non_null(d->version);
    assert_non_null(d->description);
    const vt_backend_api *api = d->table;
    assert_non_null(api);
    assert_int_equal(api->struct_size, sizeof(vt_backend_api));
    return api;
}

/* pointer of the function a capability id stands for; NULL slot = not an id */
static int cap_fn(const vt_backend_api *a, uint32_t id, const void **fn)
{
    switch (id) {
    case VT_CAP_MEMORY_PROBE: *fn = (const void *)a->memory_probe; return 1;
    case VT_CAP_PINNED_HOST_ALLOC: *fn = (const void *)a->host_alloc_pinned; return 1;
    case VT_CAP_HOST_ADDRESSABLE_DEVICE_MEMORY: *fn = NULL; return 2; /* a property, no function */
    case VT_CAP_ASYNC_QUEUE: *fn = NULL; return 2;
    case VT_CAP_PEER_COPY: *fn = (const void *)a->copy_peer; return 1;
    case VT_CAP_DEVICE_NAME: *fn = (const void *)a->device_name; return 1;
    case VT_CAP_OP_RMS_NORM: *fn = (const void *)a->rms_norm; return 1;
    case VT_CAP_OP_L2_NORM: *fn = (const void *)a->l2_norm; return 1;
    case VT_CAP_OP_ROPE_NEOX: *fn = (const void *)a->rope_neox; return 1;
    case VT_CAP_OP_ATTENTION: *fn = (const void *)a->attention; return 1;
    case VT_CAP_OP_SSM_CONV: *fn = (const void *)a->ssm_conv; return 1;
    case VT_CAP_OP_GATED_DELTA_NET: *fn = (const void *)a->gated_delta_net; return 1;
    case VT_CAP_OP_UNARY: *fn = (const void *)a->unary; return 1;
    case VT_CAP_OP_BINARY: *fn = (const void *)a->binary; return 1;
    case VT_CAP_OP_SCALE: *fn = (const void *)a->scale; return 1;
    case VT_CAP_OP_MUL_ROWS: *fn = (const void *)a->mul_rows; return 1;
    case VT_CAP_OP_COPY_2D: *fn = (const void *)a->copy_2d; return 1;
    case VT_CAP_OP_GATHER_ROWS: *fn = (const void *)a->gather_rows; return 1;
    case VT_CAP_OP_SCATTER_ADD: *fn = (const void *)a->scatter_add; return 1;
    case VT_CAP_OP_SOFTMAX_TOPK: *fn = (const void *)a->softmax_topk; return 1;
    case VT_CAP_OP_MOE_ROUTE: *fn = (const void *)a->moe_route; return 1;
    case VT_CAP_OP_MOE_FFN: *fn = (const void *)a->moe_ffn; return 1;
    case VT_CAP_GRAPH: *fn = (const void *)a->graph_begin; return 1;
    case VT_CAP_OP_MUL_ACT: *fn = (const void *)a->mul_act; return 1;
    case VT_CAP_OP_ADD_RMS_NORM: *fn = (const void *)a->add_rms_norm; return 1;
    case VT_CAP_OP_DELTA_NET_GATES: *fn = (const void *)a->delta_net_gates; return 1;
    case VT_CAP_COPY_H2D_ASYNC: *fn = (const void *)a->copy_h2d_async; return 1;
    case VT_CAP_COPY_H2D_AHEAD: *fn = (const void *)a->copy_h2d_ahead; return 1;
    }
    if (id >= VT_CAP_MAT_MUL_BASE && id < VT_CAP_GET_ROWS_BASE) {
        *fn = (const void *)a->mat_mul[id - VT_CAP_MAT_MUL_BASE];
        return 1;
    }
    if (id >= VT_CAP_GET_ROWS_BASE && id < VT_CAP_ID_LIMIT) {
        *fn = (const void *)a->get_rows[id - VT_CAP_GET_ROWS_BASE];
        return 1;
    }
    uint32_t t;
    int gr;
    if (id >= VT_CAP_TYPE_EXT_BASE && vt_cap_weight_type(id, &t, &gr) && t < VT_TYPE_COUNT) {
        /* ABI 1.9: one function for every extended type, so ABSENT may have it set */
        *fn = gr ? (const void *)a->get_rows_ext : (const void *)a->mat_mul_ext;
        return 3;
    }
    return 0;
}

#define SEEN_IDS (VT_CAP_TYPE_EXT_BASE + 2 * (VT_TYPE_COUNT - VT_TYPE_SLOTS))

static void test_descriptor_and_caps(void **state)
{
    (void)state;
    void *h;
    const vt_backend_api *a = load(&h);
    assert_non_null(a->device_count);
    assert_non_null(a->init);
    assert_non_null(a->shutdown);
    assert_non_null(a->alloc);
    assert_non_null(a->free);
    assert_non_null(a->copy_h2d);
    assert_non_null(a->copy_d2h);
    assert_non_null(a->copy_d2d);
    assert_non_null(a->memset_zero);
    assert_non_null(a->synchronize);
    assert_int_equal(a->device_count(), 1);

    static int seen[SEEN_IDS];
    memset(seen, 0, sizeof seen);
    for (uint32_t i = 0; i < a->n_caps; i++) {
        const vt_capability *c = &a->caps[i];
        const void *fn = NULL;
        int kind = c->id < SEEN_IDS ? cap_fn(a, c->id, &fn) : 0;
        if (!kind) fail_msg("capability id %u is not one this ABI knows", c->id);
        if (seen[c->id]++) fail_msg("capability id %u declared twice", c->id);
        if (c->state == VT_CAP_PRESENT) {
            if ((kind == 1 || kind == 3) && !fn)
                fail_msg("capability %u PRESENT but its function is NULL", c->id);
        } else {
            assert_int_equal(c->state, VT_CAP_ABSENT);
            if (kind == 1 && fn) fail_msg("capability %u ABSENT but its function is set", c->id);
            if (!c->reason || !*c->reason) fail_msg("capability %u ABSENT without a reason", c->id);
        }
    }
    static const uint32_t fixed[] = {0, 1, 2, 3, 4, 5, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 36};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        if (!seen[fixed[i]]) fail_msg("capability id %u not declared", fixed[i]);
    for (uint32_t t = 0; t < VT_TYPE_COUNT; t++) {
        if (!vt_type_traits_of(t).name) continue;
        for (int g = 0; g < 2; g++) {
            uint32_t id = g ? VT_CAP_GET_ROWS(t) : VT_CAP_MAT_MUL(t);
            if (!seen[id]) fail_msg("type %s: %s capability not declared", vt_type_name(t), g ? "get_rows" : "mat_mul");
            for (uint32_t i = 0; i < a->n_caps; i++)
                if (a->caps[i].id == id && a->caps[i].state == VT_CAP_ABSENT &&
                    !strstr(a->caps[i].reason, vt_type_name(t)))
                    fail_msg("type %s: reason '%s' does not name the type", vt_type_name(t), a->caps[i].reason);
        }
    }
    /* the four implemented types are PRESENT */
    static const uint32_t present[] = {VT_TYPE_F32, VT_TYPE_F16, VT_TYPE_BF16, VT_TYPE_Q8_0};
    for (int i = 0; i < 4; i++) {
        assert_non_null(a->mat_mul[present[i]]);
        assert_non_null(a->get_rows[present[i]]);
    }
    assert_non_null(a->memory_probe);
    assert_null(a->host_alloc_pinned);
    assert_null(a->copy_peer);
    dlclose(h);
}

static void test_manifest(void **state)
{
    (void)state;
    char path[4096];
    snprintf(path, sizeof path, "%s/backend-cpu.ini", vt_test_plugin_dir());
    char *ini = vt_test_read_file(path, NULL);
    assert_non_null(strstr(ini, "[plugin]"));
    assert_non_null(strstr(ini, "kind=backend"));
    assert_non_null(strstr(ini, "name=cpu"));
    assert_non_null(strstr(ini, "file=backend-cpu.so"));
    assert_non_null(strstr(ini, "priority=0"));
    assert_non_null(strstr(ini, "description="));
    free(ini);
}

/* The loaded plugin runs ops: a context through dlopen-ed code, 2 threads. */
static void test_smoke(void **state)
{
    (void)state;
    void *h;
    const vt_backend_api *a = load(&h);
    vt_backend_params p = {sizeof p, 0, 2, NULL, NULL};
    vt_backend_ctx *ctx = NULL;
    assert_int_equal(a->init(&p, &ctx), VT_OK);
    float *x = NULL;
    assert_int_equal(a->alloc(ctx, 4096 * sizeof(float), "x", (void **)&x), VT_OK);
    for (int i = 0; i < 4096; i++) x[i] = (float)(i % 7) - 3.0f;
    assert_int_equal(a->scale(ctx, x, x, 4096, 2.0f), VT_OK);
    assert_true(x[1] == -4.0f);
    a->free(ctx, x);
    a->shutdown(ctx);
    dlclose(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_descriptor_and_caps),
        cmocka_unit_test(test_manifest),
        cmocka_unit_test(test_smoke),
    };
    return vt_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
