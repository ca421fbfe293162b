/*
 * test_slot_classes.c - slot classes (vt/store.h ABI 1.7): an arena whose
 * slots come in several sizes, so that small expert slices do not take slots
 * sized for the largest one.
 *  - vt_residency_slot_classes: six slice sizes merged down to four (the
 *    pair wasting fewest bytes first), each class's minimum from the layer
 *    with the most stacks in it;
 *  - vt_store_layout_init: one class without them (and for a params struct
 *    from before 1.7), offsets and strides by class, and every inconsistent
 *    layout refused (counts that do not sum to n_slots, a class of 0 bytes
 *    or larger than slot_bytes, more than VT_STORE_MAX_CLASSES, overflow);
 *  - the host store over a layout: slots of each class do not overlap, a
 *    commit or publish larger than its slot's class is refused;
 *  - the expert streamer on a file whose gate/up slices are 3200 bytes and
 *    whose down slices are 6400 (one page and two in the host store's
 *    page-aligned arena, so a slot addressed with the wrong class's stride
 *    overlaps its neighbour): with a class of each, slices come back
 *    byte-exact through the smallest arena of each class, with and without a
 *    host tier and under each policy; every gate/up pointer lies in the small
 *    class and every down pointer in the large one (no key is ever placed in
 *    a class that cannot hold it); an acquire needing more slots of one class
 *    than it has is refused naming the class's bytes; a stack that no class
 *    with slots holds is refused at register; more slots of the same bytes
 *    give more hits than slots of the largest slice.
 */
#include "test_util.h"

#include <unistd.h>

#include "error.h"
#include "expert_streamer.h"
#include "residency.h"
#include "vt/gguf.h"

#define N_LAYER 2
#define N_MAT 3
#define N_EXP 8
#define N_IN 40
#define OUT_SMALL 20 /* gate, up: 40 x 20 F32 = 3200 bytes (a 4 KiB page in the host store) */
#define OUT_LARGE 40 /* down: 40 x 40 F32 = 6400 bytes (two pages) */
#define SMALL (N_IN * OUT_SMALL * 4)
#define LARGE (N_IN * OUT_LARGE * 4)

static const char *mat_name[N_MAT] = {"gate", "up", "down"};
static char model_path[256];

static uint32_t n_out(uint32_t m) { return m == 2 ? OUT_LARGE : OUT_SMALL; }

static float pattern(uint32_t l, uint32_t m, uint32_t e, uint32_t i)
{
    return (float)(l * 1000000 + m * 100000 + e * 1000 + i);
}

static int group_setup(void **state)
{
    (void)state;
    snprintf(model_path, sizeof model_path, "%s/vt-slot-classes-%d.gguf",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    vt_gguf_writer *w = vt_gguf_writer_new(32);
    assert_non_null(w);
    assert_int_equal(vt_gguf_writer_set_str(w, "general.architecture", "test"), VT_OK);
    float *buf = malloc((size_t)LARGE * N_EXP);
    assert_non_null(buf);
    for (uint32_t l = 0; l < N_LAYER; l++)
        for (uint32_t m = 0; m < N_MAT; m++) {
            const uint32_t per = N_IN * n_out(m);
            for (uint32_t e = 0; e < N_EXP; e++)
                for (uint32_t i = 0; i < per; i++) buf[e * per + i] = pattern(l, m, e, i);
            char name[64];
            snprintf(name, sizeof name, "blk.%u.ffn_%s_exps.weight", l, mat_name[m]);
            int64_t ne[3] = {N_IN, n_out(m), N_EXP};
            assert_int_equal(vt_gguf_writer_add_tensor(w, name, VT_TYPE_F32, 3, ne, buf,
                                                       (uint64_t)per * 4 * N_EXP), VT_OK);
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

/* ------------------------------------------------------------------ layout */

static void test_layout(void **state)
{
    (void)state;
    vt_store_layout l;
    vt_store_params p = {.struct_size = sizeof p, .slot_bytes = 1000, .n_slots = 7};
    /* no classes: one class of slot_bytes, strides aligned */
    assert_int_equal(vt_store_layout_init(&p, 256, &l), 0);
    assert_int_equal(l.n_classes, 1);
    assert_int_equal(l.stride[0], 1024);
    assert_int_equal(l.total, 7 * 1024);
    uint64_t cap;
    assert_int_equal(vt_store_slot_offset(&l, 6, &cap), 6 * 1024);
    assert_int_equal(cap, 1000);

    /* two classes: 4 slots of 300 (stride 512), then 3 of 1000 (stride 1024) */
    uint64_t slots[2] = {4, 3}, bytes[2] = {300, 1000};
    p.n_classes = 2;
    p.class_slots = slots;
    p.class_bytes = bytes;
    assert_int_equal(vt_store_layout_init(&p, 256, &l), 0);
    assert_int_equal(l.n_classes, 2);
    assert_int_equal(l.total, 4 * 512 + 3 * 1024);
    assert_int_equal(vt_store_slot_offset(&l, 0, &cap), 0);
    assert_int_equal(cap, 300);
    assert_int_equal(vt_store_slot_offset(&l, 3, &cap), 3 * 512);
    assert_int_equal(cap, 300);
    assert_int_equal(vt_store_slot_offset(&l, 4, &cap), 4 * 512);
    assert_int_equal(cap, 1000);
    assert_int_equal(vt_store_slot_offset(&l, 6, &cap), 4 * 512 + 2 * 1024);

    /* a params struct from before 1.7 (no class members) is one class */
    vt_store_params old = p;
    old.struct_size = (uint32_t)offsetof(vt_store_params, n_classes);
    assert_int_equal(vt_store_layout_init(&old, 256, &l), 0);
    assert_int_equal(l.n_classes, 1);
    assert_int_equal(l.total, 7 * 1024);

    /* inconsistent layouts */
    slots[1] = 2; /* 6 slots, not 7 */
    assert_int_equal(vt_store_layout_init(&p, 256, &l), -1);
    slots[1] = 3;
    bytes[0] = 0;
    assert_int_equal(vt_store_layout_init(&p, 256, &l), -1);
    bytes[0] = 1001; /* more than slot_bytes */
    assert_int_equal(vt_store_layout_init(&p, 256, &l), -1);
    bytes[0] = 300;
    p.n_classes = VT_STORE_MAX_CLASSES + 1;
    assert_int_equal(vt_store_layout_init(&p, 256, &l), -1);
    p.n_classes = 2;
    p.class_bytes = NULL;
    assert_int_equal(vt_store_layout_init(&p, 256, &l), -1);
    p.class_bytes = bytes;
    uint64_t huge[2] = {UINT64_MAX / 256, 3};
    p.class_slots = huge;
    p.n_slots = huge[0] + 3;
    assert_int_equal(vt_store_layout_init(&p, 256, &l), -1); /* 512 x (2^64 / 256) overflows */
    huge[0] = UINT64_MAX / 512; /* fits, but the next class's bytes take the sum past 2^64 */
    p.n_slots = huge[0] + 3;
    assert_int_equal(vt_store_layout_init(&p, 256, &l), -1);
}

static void test_host_store_classes(void **state)
{
    (void)state;
    const vt_store_api *a = vt_host_store_api();
    uint64_t slots[2] = {3, 2}, bytes[2] = {SMALL, LARGE};
    vt_store_params p = {.struct_size = sizeof p, .slot_bytes = LARGE, .n_slots = 5,
                         .n_classes = 2, .class_slots = slots, .class_bytes = bytes};
    vt_store_footprint fp = {.struct_size = sizeof fp};
    assert_int_equal(a->footprint(&p, &fp), VT_OK);
    assert_int_equal(fp.host_bytes, 3 * 4096 + 2 * 8192); /* page-aligned slots by class */
    vt_store *s;
    assert_int_equal(a->create(&p, &s), VT_OK);
    /* every slot's bytes apart from every other's */
    for (uint64_t i = 0; i < 5; i++) {
        const uint8_t *pi = a->slot_for_read(s, i);
        uint64_t ci = i < 3 ? SMALL : LARGE;
        for (uint64_t j = 0; j < 5; j++) {
            if (i == j) continue;
            const uint8_t *pj = a->slot_for_read(s, j);
            uint64_t cj = j < 3 ? SMALL : LARGE;
            assert_true(pi + ci <= pj || pj + cj <= pi);
        }
    }
    assert_null(a->slot_for_read(s, 5));
    static uint8_t src[LARGE + 1];
    assert_int_equal(a->publish(s, 3, src, LARGE), VT_OK);
    assert_int_equal(a->publish(s, 2, src, SMALL), VT_OK);
    assert_int_equal(a->publish(s, 2, src, SMALL + 1), VT_ERR_INVALID_ARG);
    assert_non_null(strstr(vt_last_error(), "of 3200 bytes"));
    assert_non_null(a->slot_for_write(s, 1));
    assert_int_equal(a->commit_slot(s, 1, SMALL + 1), VT_ERR_INVALID_ARG);
    assert_non_null(a->slot_for_write(s, 4));
    assert_int_equal(a->commit_slot(s, 4, LARGE), VT_OK);
    a->destroy(s);
    /* an inconsistent layout is refused at create */
    slots[1] = 1;
    assert_int_equal(a->create(&p, &s), VT_ERR_INVALID_ARG);
}

/* ---------------------------------------------------------------- streamer */

static int rig_prefetch; /* vt_streamer_params.prefetch of the next rig */

typedef struct rig {
    vt_gguf *g;
    vt_store *store;
    const vt_store_api *api;
    vt_expert_streamer *s;
    const uint8_t *small_lo, *small_hi, *large_lo, *large_hi; /* the classes' bytes */
} rig;

/* The host store and a streamer over n_small slots of SMALL then n_large of
 * LARGE (n_large 0 and n_small > 0: uniform slots of LARGE when uniform),
 * n_host host-tier slots; registers every stack (returns its status). */
static vt_status rig_open(rig *r, uint64_t n_small, uint64_t n_large, int uniform,
                          uint64_t n_host, vt_cache_policy policy)
{
    memset(r, 0, sizeof *r);
    assert_int_equal(vt_gguf_open(model_path, VT_GGUF_NO_MMAP, &r->g), VT_OK);
    r->api = vt_host_store_api();
    uint64_t slots[2] = {n_small, n_large}, bytes[2] = {SMALL, LARGE};
    vt_store_params sp = {.struct_size = sizeof sp, .slot_bytes = LARGE,
                          .n_slots = n_small + n_large, .n_classes = uniform ? 0 : 2,
                          .class_slots = slots, .class_bytes = bytes};
    assert_int_equal(r->api->create(&sp, &r->store), VT_OK);
    vt_streamer_params p = {.gguf = r->g, .store_api = r->api, .store = r->store,
                            .n_slots = n_small + n_large, .slot_bytes = LARGE,
                            .n_layer = N_LAYER, .policy = policy, .n_host_slots = n_host,
                            .host_slot_bytes = LARGE + 64, .n_classes = uniform ? 0 : 2,
                            .prefetch = rig_prefetch, .prefetch_top = 8, /* every id given, */
                            .prefetch_max = 8,                           /* every one copied */
                            .class_slots = {n_small, n_large}, .class_bytes = {SMALL, LARGE}};
    if (vt_streamer_create(&p, &r->s) != VT_OK) fail_msg("%s", vt_last_error());
    if (!uniform) {
        r->small_lo = r->api->slot_for_read(r->store, 0);
        vt_store_layout l = {0}; /* the host store's: page-aligned slots */
        assert_int_equal(vt_store_layout_init(&sp, 4096, &l), 0);
        r->small_hi = r->small_lo + l.offset[1];
        r->large_lo = r->small_hi;
        r->large_hi = r->small_lo + l.total;
    }
    for (uint32_t l = 0; l < N_LAYER; l++)
        for (uint32_t m = 0; m < N_MAT; m++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%u.ffn_%s_exps.weight", l, mat_name[m]);
            const vt_gguf_tensor *t = vt_gguf_find_tensor(r->g, name);
            assert_non_null(t);
            vt_status st = vt_streamer_register(r->s, l, m, t);
            if (st != VT_OK) return st;
        }
    return VT_OK;
}

static void rig_close(rig *r)
{
    vt_streamer_destroy(r->s);
    r->api->destroy(r->store);
    vt_gguf_close(r->g);
}

/* acquire, then check every slice's bytes and, with classes, its class */
static void acquire_ok(rig *r, uint32_t l, const int32_t *ids, uint32_t n)
{
    const void *out[N_EXP * N_MAT];
    if (vt_streamer_acquire(r->s, l, ids, n, out) != VT_OK) fail_msg("%s", vt_last_error());
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t m = 0; m < N_MAT; m++) {
            const float *p = out[i * N_MAT + m];
            assert_non_null(p);
            if (r->small_lo) {
                const uint8_t *b = (const uint8_t *)p;
                if (m == 2 ? !(b >= r->large_lo && b < r->large_hi)
                           : !(b >= r->small_lo && b < r->small_hi))
                    fail_msg("layer %u matrix %u expert %d: slot outside its class", l, m, ids[i]);
            }
            for (uint32_t j = 0; j < N_IN * n_out(m); j++)
                if (p[j] != pattern(l, m, (uint32_t)ids[i], j))
                    fail_msg("layer %u matrix %u expert %d element %u: %g, want %g", l, m, ids[i],
                             j, p[j], pattern(l, m, (uint32_t)ids[i], j));
        }
}

/* A fixed pseudo-random workload of acquires of 1..4 distinct experts. */
static uint64_t run_workload(rig *r, int steps)
{
    uint64_t rng = 0x2545f4914f6cdd1dull;
    for (int t = 0; t < steps; t++) {
        for (uint32_t l = 0; l < N_LAYER; l++) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            uint32_t n = 1 + (uint32_t)(rng % 4);
            int32_t ids[4];
            uint32_t k = 0;
            uint64_t x = rng >> 8;
            while (k < n) {
                int32_t e = (int32_t)(x % N_EXP);
                x = x / N_EXP + 0x9e37ull * (k + 1);
                int dup = 0;
                for (uint32_t j = 0; j < k; j++) dup |= ids[j] == e;
                if (!dup) ids[k++] = e;
                if (!x) x = rng | 1;
            }
            acquire_ok(r, l, ids, n);
        }
    }
    vt_expert_stats st;
    assert_int_equal(vt_streamer_stats(r->s, -1, &st), VT_OK);
    return st.hits;
}

static void test_streamer_classes_bytes(void **state)
{
    (void)state;
    const vt_cache_policy pol[3] = {VT_CACHE_POLICY_LRU, VT_CACHE_POLICY_LAYER,
                                    VT_CACHE_POLICY_LFRU};
    for (int k = 0; k < 3; k++)
        for (int host = 0; host < 2; host++) {
            /* the smallest arena of each class: 4 experts x 2 small, 4 x 1 large */
            rig r;
            if (rig_open(&r, 8, 4, 0, host ? N_LAYER * N_MAT * N_EXP : 0, pol[k]) != VT_OK)
                fail_msg("%s", vt_last_error());
            run_workload(&r, 40);
            vt_expert_stats st;
            assert_int_equal(vt_streamer_stats(r.s, -1, &st), VT_OK);
            assert_true(st.misses > 0 && st.evictions > 0);
            rig_close(&r);
            /* one class roomy, the other at its minimum */
            if (rig_open(&r, 30, 4, 0, 0, pol[k]) != VT_OK) fail_msg("%s", vt_last_error());
            run_workload(&r, 40);
            rig_close(&r);
            if (rig_open(&r, 8, 15, 0, 0, pol[k]) != VT_OK) fail_msg("%s", vt_last_error());
            run_workload(&r, 40);
            rig_close(&r);
        }
}

static void test_streamer_class_minimum(void **state)
{
    (void)state;
    rig r;
    /* 12 slots, 3 of them large: an acquire of 4 experts needs 4 down slices at once */
    if (rig_open(&r, 9, 3, 0, 0, VT_CACHE_POLICY_LFRU) != VT_OK) fail_msg("%s", vt_last_error());
    int32_t ids[4] = {0, 1, 2, 3};
    const void *out[N_EXP * N_MAT];
    assert_int_equal(vt_streamer_acquire(r.s, 0, ids, 4, out), VT_ERR_RANGE);
    assert_non_null(strstr(vt_last_error(), "slots of 6400 bytes"));
    acquire_ok(&r, 0, ids, 3); /* three fit */
    rig_close(&r);
    /* a file slice larger than every class with slots: refused at register */
    assert_int_equal(rig_open(&r, 12, 0, 0, 0, VT_CACHE_POLICY_LRU), VT_ERR_RANGE);
    assert_non_null(strstr(vt_last_error(), "no slot class"));
    rig_close(&r);
}

/* A prefetch whose keys' class has every slot pinned (the small class is
 * exactly the last acquire's) still copies the keys of the other class. */
static void test_prefetch_class_full(void **state)
{
    (void)state;
    rig r;
    rig_prefetch = 1;
    vt_status st = rig_open(&r, 8, 8, 0, N_LAYER * N_MAT * N_EXP, VT_CACHE_POLICY_LFRU);
    rig_prefetch = 0;
    if (st != VT_OK) fail_msg("%s", vt_last_error());
    int32_t ids[4] = {0, 1, 2, 3}, next[4] = {4, 5, 6, 7};
    for (uint32_t l = 0; l < N_LAYER; l++) acquire_ok(&r, l, next, 4); /* the host tier */
    for (uint32_t l = 0; l < N_LAYER; l++) acquire_ok(&r, l, ids, 4);
    /* layer 1's 8 small slots are the last acquire's; 4 large slots hold
     * layer 0's down slices of 0..3 and can be taken */
    if (vt_streamer_prefetch(r.s, 0, next, 4) != VT_OK) fail_msg("%s", vt_last_error());
    vt_streamer_prefetch_stats ps;
    assert_int_equal(vt_streamer_prefetch_stats_get(r.s, &ps), VT_OK);
    assert_int_equal(ps.issued, 4); /* the down slices of 4..7 */
    acquire_ok(&r, 0, next, 4);
    rig_close(&r);
}

static void test_streamer_classes_more_hits(void **state)
{
    (void)state;
    /* in the host store's pages, 16 slots of the largest slice take 16 x 8 KiB;
     * the same bytes hold 16 small and 8 large slots (16 x 4 KiB + 8 x 8 KiB) */
    rig r;
    if (rig_open(&r, 16, 0, 1, 0, VT_CACHE_POLICY_LFRU) != VT_OK) fail_msg("%s", vt_last_error());
    uint64_t uniform = run_workload(&r, 200);
    rig_close(&r);
    if (rig_open(&r, 16, 8, 0, 0, VT_CACHE_POLICY_LFRU) != VT_OK) fail_msg("%s", vt_last_error());
    uint64_t classes = run_workload(&r, 200);
    rig_close(&r);
    if (classes <= uniform) fail_msg("hits: %llu with classes, %llu without",
                                     (unsigned long long)classes, (unsigned long long)uniform);
}

/* vt_residency_slot_classes on a table of six slice sizes: 100, 104, 200,
 * 400, 800, 808 bytes per expert (F32 rows of 25, 26, 50, 100, 200, 202)
 * spread over three layers. Merging the adjacent pair that wastes fewest bytes
 * (slices x size gap) until four remain: 100 into 104 (4 bytes x 8 slices),
 * then 800 into 808 (8 x 8); the minimum of a class is top-k x the most
 * stacks of one layer in it. */
static void test_find_classes(void **state)
{
    (void)state;
    char path[256];
    snprintf(path, sizeof path, "%s/vt-find-classes-%d.gguf",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    vt_gguf_writer *w = vt_gguf_writer_new(32);
    assert_non_null(w);
    assert_int_equal(vt_gguf_writer_set_str(w, "general.architecture", "test"), VT_OK);
    /* layer: row lengths of its stacks (8 experts, one row each) */
    static const struct { uint32_t layer; int64_t row; const char *mat; } st[] = {
        {0, 25, "gate"}, {0, 26, "up"}, {0, 200, "down"},
        {1, 50, "gate"}, {1, 100, "up"}, {1, 202, "down"},
        {2, 26, "gate"}, {2, 26, "up"}, {2, 100, "down"},
    };
    static float buf[202 * 8];
    for (size_t i = 0; i < sizeof st / sizeof st[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "blk.%u.ffn_%s_exps.weight", st[i].layer, st[i].mat);
        int64_t ne[3] = {st[i].row, 1, 8};
        assert_int_equal(vt_gguf_writer_add_tensor(w, name, VT_TYPE_F32, 3, ne, buf,
                                                   (uint64_t)st[i].row * 4 * 8), VT_OK);
    }
    assert_int_equal(vt_gguf_writer_write(w, path), VT_OK);
    vt_gguf_writer_free(w);
    vt_gguf *g;
    assert_int_equal(vt_gguf_open(path, VT_GGUF_NO_MMAP, &g), VT_OK);
    vt_fit f;
    memset(&f, 0, sizeof f);
    f.n_expert_used = 2;
    vt_residency_slot_classes(&f, g);
    assert_int_equal(f.n_classes, 4);
    const uint64_t bytes[4] = {104, 200, 400, 808}, slices[4] = {32, 8, 16, 16};
    /* stacks per layer in each class: layer 0 {2, 0, 0, 1}, 1 {0, 1, 1, 1}, 2 {2, 0, 1, 0} */
    const uint64_t min[4] = {2 * 2, 2 * 1, 2 * 1, 2 * 1};
    for (uint32_t c = 0; c < 4; c++) {
        assert_int_equal(f.class_bytes[c], bytes[c]);
        assert_int_equal(f.class_slices[c], slices[c]);
        assert_int_equal(f.class_min[c], min[c]);
    }
    /* whole-expert slots: one unit per layer, each slice rounded up to 256
     * bytes: layer 0 256 + 256 + 1024, layer 1 256 + 512 + 1024, layer 2
     * 256 + 256 + 512; a class per unit size, top-k of each at once */
    memset(&f, 0, sizeof f);
    f.n_expert_used = 2;
    f.slot_unit_expert = 1;
    vt_residency_slot_classes(&f, g);
    assert_int_equal(f.n_classes, 3);
    const uint64_t ubytes[3] = {1024, 1536, 1792};
    for (uint32_t c = 0; c < 3; c++) {
        assert_int_equal(f.class_bytes[c], ubytes[c]);
        assert_int_equal(f.class_slices[c], 8);
        assert_int_equal(f.class_min[c], 2);
    }
    vt_gguf_close(g);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_find_classes),
        cmocka_unit_test(test_host_store_classes),
        cmocka_unit_test(test_streamer_classes_bytes),
        cmocka_unit_test(test_streamer_class_minimum),
        cmocka_unit_test(test_streamer_classes_more_hits),
        cmocka_unit_test(test_prefetch_class_full),
    };
    return vt_test_exit(cmocka_run_group_tests(tests, group_setup, group_teardown));
}
