/*
 * test_store_device.c - the device slot store (plugins/store-device) against
 * its contract, on the CPU backend wrapped as a "lazy device" (CI) and on
 * backend-cuda when a GPU is present:
 *  - driven through the expert streamer, every slot it hands out for reading
 *    holds the same bytes as the host store's slot and as the file;
 *  - the lazy device applies copy_h2d only at synchronize(), so a store that
 *    skipped the H2D copy or the sync reads stale bytes and fails; a store that
 *    handed out its staging buffer for reads fails too (the batch's first
 *    expert would be overwritten by the second);
 *  - commit_slot of a slot other than the one staged is refused;
 *  - a failure at each acquisition in create (arena, pinned staging, pageable
 *    staging) leaves nothing allocated and no pinned budget reserved;
 *  - with no pinned budget the staging is pageable, a fallback is counted, and
 *    fills still land in device memory;
 *  - slot classes (ABI 1.7): the arena's slots of each class hold what was
 *    published or committed into them (read back from the device), slots do
 *    not overlap, and a publish or commit larger than the slot's class is
 *    refused naming its bytes.
 */
#include "test_util.h"

#include <dlfcn.h>
#include <unistd.h>

#include "error.h"
#include "expert_streamer.h"
#include "registry.h"
#include "vt/store.h"

#define N_LAYER 2
#define N_MAT 3
#define N_EXP 6
#define N_IN 64
#define N_OUT 3
#define SLICE (N_IN * N_OUT * 4)

static char model_path[256];
static const vt_store_api *dev_api;
static void *dev_handle;

static float pattern(uint32_t l, uint32_t m, uint32_t e, uint32_t i)
{
    return (float)(l * 100000 + m * 10000 + e * 1000 + i) + 0.25f;
}

/* ------------------------------------------------------------ lazy device */

/* The CPU backend with copy_h2d deferred to synchronize(), pinned host
 * allocation PRESENT, counted allocations and injectable failures. */
typedef struct pending {
    void *dst;
    void *bytes;
    size_t n;
} pending;

static const vt_backend_api *cpu;
static vt_backend_api lazy;
static vt_capability lazy_caps[VT_CAP_ID_LIMIT];
static pending queue[64];
static int n_queue;
static int live_allocs, live_pinned;
static int fail_at, n_acq; /* fail the fail_at-th acquisition (alloc or pinned); 0: never */

static int acquire_fails(void) { return fail_at && ++n_acq == fail_at; }

static vt_status lazy_alloc(vt_backend_ctx *c, size_t n, const char *what, void **out)
{
    if (acquire_fails()) {
        vt_set_error("injected: allocation of %zu bytes for %s failed", n, what);
        return VT_ERR_OUT_OF_MEMORY;
    }
    vt_status st = cpu->alloc(c, n, what, out);
    if (st == VT_OK) live_allocs++;
    return st;
}
static void lazy_free(vt_backend_ctx *c, void *p)
{
    live_allocs--;
    cpu->free(c, p);
}
static vt_status lazy_pinned(vt_backend_ctx *c, size_t n, const char *what, void **out)
{
    (void)c;
    if (acquire_fails()) {
        vt_set_error("injected: pinning %zu bytes for %s failed", n, what);
        return VT_ERR_OUT_OF_MEMORY;
    }
    *out = malloc(n);
    if (*out) live_pinned++;
    return *out ? VT_OK : VT_ERR_OUT_OF_MEMORY;
}
static void lazy_free_pinned(vt_backend_ctx *c, void *p)
{
    (void)c;
    live_pinned--;
    free(p);
}
static vt_status lazy_h2d(vt_backend_ctx *c, void *dst, const void *src, size_t n)
{
    (void)c;
    if (n_queue == 64) return VT_ERR_INTERNAL;
    queue[n_queue].dst = dst;
    queue[n_queue].bytes = malloc(n);
    memcpy(queue[n_queue].bytes, src, n);
    queue[n_queue++].n = n;
    return VT_OK;
}
static vt_status lazy_sync(vt_backend_ctx *c)
{
    (void)c;
    for (int i = 0; i < n_queue; i++) {
        memcpy(queue[i].dst, queue[i].bytes, queue[i].n);
        free(queue[i].bytes);
    }
    n_queue = 0;
    return VT_OK;
}

static void load_backends(void)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/backend-cpu.so", vt_test_plugin_dir());
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) fail_msg("dlopen %s: %s", path, dlerror());
    vt_plugin_entry_fn fn = (vt_plugin_entry_fn)dlsym(h, VT_PLUGIN_ENTRY_SYMBOL);
    cpu = fn()->table;
    lazy = *cpu;
    for (uint32_t i = 0; i < cpu->n_caps; i++) {
        lazy_caps[i] = cpu->caps[i];
        if (lazy_caps[i].id == VT_CAP_PINNED_HOST_ALLOC)
            lazy_caps[i] = (vt_capability){VT_CAP_PINNED_HOST_ALLOC, VT_CAP_PRESENT, NULL};
    }
    lazy.caps = lazy_caps;
    lazy.alloc = lazy_alloc;
    lazy.free = lazy_free;
    lazy.host_alloc_pinned = lazy_pinned;
    lazy.host_free_pinned = lazy_free_pinned;
    lazy.copy_h2d = lazy_h2d;
    lazy.synchronize = lazy_sync;

    snprintf(path, sizeof path, "%s/store-device.so", vt_test_plugin_dir());
    dev_handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!dev_handle) fail_msg("dlopen %s: %s", path, dlerror());
    fn = (vt_plugin_entry_fn)dlsym(dev_handle, VT_PLUGIN_ENTRY_SYMBOL);
    assert_non_null(fn);
    const vt_plugin_desc *d = fn();
    assert_int_equal(d->kind, VT_PLUGIN_STORE);
    assert_string_equal(d->name, "device");
    dev_api = d->table;
    assert_int_equal(dev_api->n_required_caps, 1);
    assert_int_equal(dev_api->required_caps[0], VT_CAP_MEMORY_PROBE);
}

static int group_setup(void **state)
{
    (void)state;
    load_backends();
    snprintf(model_path, sizeof model_path, "%s/vt-storedev-%d.gguf",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    vt_gguf_writer *w = vt_gguf_writer_new(32);
    vt_gguf_writer_set_str(w, "general.architecture", "test");
    float *buf = malloc((size_t)SLICE * N_EXP);
    static const char *mn[N_MAT] = {"gate", "up", "down"};
    for (uint32_t l = 0; l < N_LAYER; l++)
        for (uint32_t m = 0; m < N_MAT; m++) {
            for (uint32_t e = 0; e < N_EXP; e++)
                for (uint32_t i = 0; i < N_IN * N_OUT; i++) buf[e * N_IN * N_OUT + i] = pattern(l, m, e, i);
            char name[64];
            snprintf(name, sizeof name, "blk.%u.ffn_%s_exps.weight", l, mn[m]);
            int64_t ne[3] = {N_IN, N_OUT, N_EXP};
            assert_int_equal(vt_gguf_writer_add_tensor(w, name, VT_TYPE_F32, 3, ne, buf,
                                                       (uint64_t)SLICE * N_EXP), VT_OK);
        }
    free(buf);
    assert_int_equal(vt_gguf_writer_write(w, model_path), VT_OK);
    vt_gguf_writer_free(w);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    unlink(model_path);
    return 0;
}

/* ------------------------------------------------------------ helpers */

typedef struct side {
    const vt_store_api *api;
    vt_store *store;
    vt_expert_streamer *s;
} side;

static void side_open(side *x, const vt_store_api *api, const vt_backend *be, vt_gguf *g,
                      uint64_t n_slots)
{
    x->api = api;
    vt_store_params sp = {.struct_size = sizeof sp, .host = vt_host_table(), .backend = be,
                          .slot_bytes = SLICE, .n_slots = n_slots};
    if (api->create(&sp, &x->store) != VT_OK) fail_msg("store create: %s", vt_last_error());
    vt_streamer_params p = {.gguf = g, .store_api = api, .store = x->store, .n_slots = n_slots,
                            .slot_bytes = SLICE, .n_layer = N_LAYER};
    if (vt_streamer_create(&p, &x->s) != VT_OK) fail_msg("%s", vt_last_error());
    static const char *mn[N_MAT] = {"gate", "up", "down"};
    for (uint32_t l = 0; l < N_LAYER; l++)
        for (uint32_t m = 0; m < N_MAT; m++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%u.ffn_%s_exps.weight", l, mn[m]);
            assert_int_equal(vt_streamer_register(x->s, l, m, vt_gguf_find_tensor(g, name)), VT_OK);
        }
}

static void side_close(side *x)
{
    vt_streamer_destroy(x->s);
    x->api->destroy(x->store);
}

/* Drive host and device stores through the same acquisitions; after each,
 * the device slots (read back with copy_d2h) equal the host slots and the
 * file's bytes. */
static void compare_stores(const vt_backend *be)
{
    vt_gguf *g;
    assert_int_equal(vt_gguf_open(model_path, VT_GGUF_NO_MMAP, &g), VT_OK);
    side host, dev;
    side_open(&host, vt_host_store_api(), be, g, 6);
    side_open(&dev, dev_api, be, g, 6);
    static const int32_t seq[][2] = {{0, 1}, {2, 3}, {1, 5}, {4, 0}, {3, 3}, {5, 2}};
    float *back = malloc(SLICE);
    for (size_t k = 0; k < sizeof seq / sizeof seq[0]; k++) {
        uint32_t l = (uint32_t)(k % N_LAYER);
        const void *ph[6], *pd[6];
        if (vt_streamer_acquire(host.s, l, seq[k], 2, ph) != VT_OK) fail_msg("%s", vt_last_error());
        if (vt_streamer_acquire(dev.s, l, seq[k], 2, pd) != VT_OK) fail_msg("%s", vt_last_error());
        for (int i = 0; i < 2; i++)
            for (int m = 0; m < N_MAT; m++) {
                assert_int_equal(be->api->copy_d2h(be->ctx, back, pd[i * N_MAT + m], SLICE), VT_OK);
                if (memcmp(back, ph[i * N_MAT + m], SLICE))
                    fail_msg("step %zu: device slot of layer %u expert %d matrix %d differs from the "
                             "host store's", k, l, seq[k][i], m);
                for (int j = 0; j < N_IN * N_OUT; j++)
                    if (back[j] != pattern(l, (uint32_t)m, (uint32_t)seq[k][i], (uint32_t)j))
                        fail_msg("step %zu: device slot differs from the file at %d", k, j);
            }
    }
    free(back);
    vt_expert_stats st;
    vt_streamer_stats(dev.s, -1, &st);
    assert_true(st.misses > 0 && st.evictions > 0);
    side_close(&host);
    side_close(&dev);
    vt_gguf_close(g);
}

static vt_backend make_backend(const vt_backend_api *api, const char *name)
{
    vt_backend be = {.api = api, .name = name};
    vt_backend_params bp = {.struct_size = sizeof bp, .device = 0, .n_threads = 1,
                            .kernels = "scalar", .host = vt_host_table()};
    if (api->init(&bp, &be.ctx) != VT_OK) fail_msg("%s init: %s", name, vt_last_error());
    return be;
}

/* ------------------------------------------------------------ tests */

static void test_lazy_device_contract(void **state)
{
    (void)state;
    vt_host_set_pinned_budget(1u << 20);
    vt_backend be = make_backend(&lazy, "lazy-cpu");
    compare_stores(&be);
    assert_int_equal(live_allocs, 0);
    assert_int_equal(live_pinned, 0);
    assert_int_equal(vt_host_pinned_used(), 0);

    /* staging is never the slot a reader gets; commit of another slot refused */
    vt_store_params sp = {.struct_size = sizeof sp, .host = vt_host_table(), .backend = &be,
                          .slot_bytes = SLICE, .n_slots = 4};
    vt_store *s;
    assert_int_equal(dev_api->create(&sp, &s), VT_OK);
    assert_int_equal(live_pinned, 1);
    void *w = dev_api->slot_for_write(s, 3);
    assert_non_null(w);
    for (uint64_t k = 0; k < 4; k++) assert_ptr_not_equal(dev_api->slot_for_read(s, k), w);
    assert_int_equal(dev_api->commit_slot(s, 2, SLICE), VT_ERR_INVALID_ARG);
    if (!strstr(vt_last_error(), "staged slot is 3")) fail_msg("%s", vt_last_error());
    w = dev_api->slot_for_write(s, 3);
    assert_int_equal(dev_api->commit_slot(s, 3, SLICE), VT_OK);
    assert_int_equal(dev_api->commit_slot(s, 3, SLICE), VT_ERR_INVALID_ARG); /* not staged again */
    assert_null(dev_api->slot_for_write(s, 4));
    dev_api->destroy(s);
    assert_int_equal(live_allocs, 0);
    assert_int_equal(live_pinned, 0);
    assert_int_equal(vt_host_pinned_used(), 0);
    be.api->shutdown(be.ctx);
}

static void test_create_failures_release_everything(void **state)
{
    (void)state;
    vt_host_set_pinned_budget(1u << 20);
    vt_backend be = make_backend(&lazy, "lazy-cpu");
    vt_store_params sp = {.struct_size = sizeof sp, .host = vt_host_table(), .backend = &be,
                          .slot_bytes = SLICE, .n_slots = 4};
    /* acquisition 1: the arena; 2: the pinned staging (falls back to pageable) */
    for (int n = 1; n <= 2; n++) {
        fail_at = n;
        n_acq = 0;
        uint64_t fb0 = vt_host_n_fallbacks();
        vt_store *s = NULL;
        vt_status st = dev_api->create(&sp, &s);
        if (n == 1) {
            assert_int_equal(st, VT_ERR_OUT_OF_MEMORY);
            assert_null(s);
            if (!strstr(vt_last_error(), "expert arena")) fail_msg("%s", vt_last_error());
        } else {
            /* pinning failed: pageable staging, a counted fallback, still works */
            assert_int_equal(st, VT_OK);
            assert_int_equal(vt_host_n_fallbacks(), fb0 + 1);
            assert_int_equal(live_pinned, 0);
            assert_int_equal(vt_host_pinned_used(), 0);
            dev_api->destroy(s);
        }
        assert_int_equal(live_allocs, 0);
        assert_int_equal(live_pinned, 0);
        assert_int_equal(vt_host_pinned_used(), 0);
    }
    fail_at = 0;

    /* no pinned budget: pageable staging, counted, fills still land on the device */
    vt_host_set_pinned_budget(0);
    uint64_t fb0 = vt_host_n_fallbacks();
    compare_stores(&be);
    assert_true(vt_host_n_fallbacks() >= fb0 + 1);
    assert_int_equal(live_pinned, 0);
    be.api->shutdown(be.ctx);
}

/* Two classes, 3 slots of 200 bytes then 2 of SLICE: every slot filled with
 * its own bytes (publish, or slot_for_write + commit), all read back after. */
static void check_classes(const vt_backend *be)
{
    uint64_t slots[2] = {3, 2}, bytes[2] = {200, SLICE};
    vt_store_params sp = {.struct_size = sizeof sp, .host = vt_host_table(), .backend = be,
                          .slot_bytes = SLICE, .n_slots = 5, .n_classes = 2,
                          .class_slots = slots, .class_bytes = bytes};
    vt_store_footprint fp = {.struct_size = sizeof fp};
    assert_int_equal(dev_api->footprint(&sp, &fp), VT_OK);
    assert_int_equal(fp.device_bytes, 3 * 256 + 2 * ((SLICE + 255) / 256 * 256));
    vt_store *s;
    if (dev_api->create(&sp, &s) != VT_OK) fail_msg("%s", vt_last_error());
    static uint8_t src[5][SLICE], back[SLICE];
    for (int i = 0; i < 5; i++) {
        const uint64_t n = i < 3 ? 200 : SLICE;
        for (uint64_t j = 0; j < n; j++) src[i][j] = (uint8_t)(i * 37 + j * 11 + 1);
        if (i % 2) {
            assert_int_equal(dev_api->publish(s, (uint64_t)i, src[i], n), VT_OK);
        } else {
            uint8_t *dst = dev_api->slot_for_write(s, (uint64_t)i);
            assert_non_null(dst);
            memcpy(dst, src[i], n);
            assert_int_equal(dev_api->commit_slot(s, (uint64_t)i, n), VT_OK);
        }
    }
    assert_int_equal(dev_api->quiesce(s), VT_OK);
    for (int i = 0; i < 5; i++) {
        const uint64_t n = i < 3 ? 200 : SLICE;
        const uint8_t *p = dev_api->slot_for_read(s, (uint64_t)i);
        assert_non_null(p);
        for (int j = 0; j < 5; j++) {
            const uint8_t *q = dev_api->slot_for_read(s, (uint64_t)j);
            const uint64_t m = j < 3 ? 200 : SLICE;
            assert_true(i == j || p + n <= q || q + m <= p);
        }
        assert_int_equal(be->api->copy_d2h(be->ctx, back, p, n), VT_OK);
        if (memcmp(back, src[i], n)) fail_msg("slot %d (class %d): bytes differ", i, i >= 3);
    }
    assert_int_equal(dev_api->publish(s, 1, src[1], 201), VT_ERR_INVALID_ARG);
    if (!strstr(vt_last_error(), "of 200 bytes")) fail_msg("%s", vt_last_error());
    assert_non_null(dev_api->slot_for_write(s, 2));
    assert_int_equal(dev_api->commit_slot(s, 2, 201), VT_ERR_INVALID_ARG);
    assert_int_equal(dev_api->publish(s, 4, src[4], SLICE), VT_OK);
    assert_int_equal(dev_api->quiesce(s), VT_OK);
    dev_api->destroy(s);
    slots[0] = 4; /* 6 slots for n_slots 5: refused */
    assert_int_equal(dev_api->create(&sp, &s), VT_ERR_INVALID_ARG);
}

static void test_lazy_device_classes(void **state)
{
    (void)state;
    vt_host_set_pinned_budget(1u << 20);
    vt_backend be = make_backend(&lazy, "lazy-cpu");
    check_classes(&be);
    assert_int_equal(live_allocs, 0);
    be.api->shutdown(be.ctx);
}

static void test_cuda_device_store(void **state)
{
    (void)state;
    char path[4096];
    snprintf(path, sizeof path, "%s/backend-cuda.so", vt_test_plugin_dir());
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        print_message("SKIP: backend-cuda not built (%s)\n", dlerror());
        skip();
    }
    const vt_backend_api *cuda = ((vt_plugin_entry_fn)dlsym(h, VT_PLUGIN_ENTRY_SYMBOL))()->table;
    if (cuda->device_count() <= 0) {
        print_message("SKIP: no CUDA device here (the device store's GPU run needs one)\n");
        skip();
    }
    vt_host_set_pinned_budget(1u << 20);
    vt_backend be = make_backend(cuda, "cuda");
    compare_stores(&be);
    assert_int_equal(vt_host_pinned_used(), 0);
    vt_host_set_pinned_budget(0); /* forced pageable staging */
    uint64_t fb0 = vt_host_n_fallbacks();
    compare_stores(&be);
    assert_true(vt_host_n_fallbacks() > fb0);
    vt_host_set_pinned_budget(1u << 20);
    check_classes(&be);
    cuda->shutdown(be.ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lazy_device_contract),
        cmocka_unit_test(test_create_failures_release_everything),
        cmocka_unit_test(test_lazy_device_classes),
        cmocka_unit_test(test_cuda_device_store),
    };
    return vt_test_exit(cmocka_run_group_tests(tests, group_setup, group_teardown));
}
