/*
 * test_streamer_prefetch.c - the expert streamer's router-ahead prefetch
 * (ABI 1.5 ahead publishes) on the pattern file of streamer_rig.h: bytes
 * exact through a store that copies an ahead publish only at join (an
 * acquire that read before the join would see stale bytes) and through one
 * that copies at once (a prefetch that took a slot of the last acquire would
 * overwrite it); used / wasted / skipped counted; prefetch_top and
 * prefetch_max bound what is copied; a failed ahead publish and a failed
 * join leave nothing claimed; prefetch without a host tier or with a store
 * of ABI 1.4 is refused by name.
 */
#include "streamer_rig.h"

#include "error.h"

static void prefetch_ok(rig *r, uint32_t l, const int32_t *ids, uint32_t n)
{
    if (vt_streamer_prefetch(r->s, l, ids, n) != VT_OK) fail_msg("%s", vt_last_error());
}

/* Layer by layer, as a model decodes: acquire layer l, prefetch layer l+1's
 * prediction (two ids, the first right, the second wrong), then check that
 * layer l's slots still hold layer l's bytes (mode 3 copies at once: a
 * victim taken from the last acquire would show) and that the next acquire
 * reads the prefetched bytes (mode 4 copies at join: reading before the join
 * would show). */
static void run_prefetch_tokens(int mode)
{
    rig r;
    rig_open_prefetch(&r, 4 * N_MAT, mode); /* two acquires of two experts */
    assert_true(vt_streamer_prefetch_on(r.s));
    warm_host_tier(&r);
    uint64_t used = 0, right = 0;
    for (int tok = 0; tok < 12; tok++) {
        for (uint32_t l = 0; l < N_LAYER; l++) {
            int32_t ids[2] = {(int32_t)((tok * 3 + l) % N_EXP), (int32_t)((tok * 5 + l + 1) % N_EXP)};
            if (ids[1] == ids[0]) ids[1] = (ids[0] + 1) % N_EXP;
            const void *out[2 * N_MAT];
            if (vt_streamer_acquire(r.s, l, ids, 2, out) != VT_OK) fail_msg("%s", vt_last_error());
            check_slices(l, ids, 2, out);
            if (l + 1 < N_LAYER) {
                const uint32_t nl = l + 1;
                int32_t next0 = (int32_t)((tok * 3 + nl) % N_EXP);
                int32_t pred[2] = {next0, (int32_t)((next0 + 4) % N_EXP)};
                int32_t next1 = (int32_t)((tok * 5 + nl + 1) % N_EXP);
                if (next1 == next0) next1 = (next0 + 1) % N_EXP;
                if (pred[1] == next1) pred[1] = (pred[1] + 1) % N_EXP;
                right++;
                prefetch_ok(&r, nl, pred, 2);
                check_slices(l, ids, 2, out); /* not overwritten by the prefetch */
                for (uint32_t m = 0; m < N_MAT; m++)
                    assert_true(vt_streamer_is_resident(r.s, nl, m, (uint32_t)next0));
            }
        }
    }
    vt_streamer_prefetch_stats ps;
    assert_int_equal(vt_streamer_prefetch_stats_get(r.s, &ps), VT_OK);
    used = ps.used;
    print_message("[prefetch mode %d] issued %llu, used %llu, wasted %llu, skipped %llu\n", mode,
                  (unsigned long long)ps.issued, (unsigned long long)ps.used,
                  (unsigned long long)ps.wasted, (unsigned long long)ps.skipped);
    assert_true(ps.issued > 0);
    assert_true(used > 0 && used <= right * N_MAT);
    assert_true(ps.wasted > 0); /* the wrong half of the predictions */
    assert_true(ps.used + ps.wasted <= ps.issued);
    assert_int_equal(ps.skipped, 0); /* the host tier holds every slice */
    assert_int_equal(ps.bytes_issued, ps.issued * SLICE);
    assert_true(n_join > 0 && n_begin > 0);
    rig_close(&r);
}

/* expert_cache.prefetch_top (prefetch_max beyond it): a prediction of 8 ids
 * (in decreasing router weight) copies the first 6 under auto, the first 3
 * under 3, all 8 under a top beyond them; the rest stay absent, and the
 * copied bytes are right. */
static void test_prefetch_top(void **state)
{
    (void)state;
    assert_int_equal(vt_streamer_prefetch_count(0, 8), 6);
    assert_int_equal(vt_streamer_prefetch_count(0, 10), 8);
    assert_int_equal(vt_streamer_prefetch_count(0, 3), 3);
    assert_int_equal(vt_streamer_prefetch_count(0, 2), 2);
    assert_int_equal(vt_streamer_prefetch_count(0, 1), 1);
    assert_int_equal(vt_streamer_prefetch_count(0, 0), 0);
    assert_int_equal(vt_streamer_prefetch_count(3, 8), 3);
    assert_int_equal(vt_streamer_prefetch_count(9, 8), 8);
    const uint32_t tops[3] = {0, 3, 100}, want[3] = {6, 3, 8};
    for (int mode = 3; mode <= 4; mode++)
        for (int t = 0; t < 3; t++) {
            rig r;
            rig_prefetch_top = tops[t];
            rig_open_prefetch(&r, 10 * N_MAT, mode);
            rig_prefetch_top = 0;
            rig_prefetch_max = RIG_NO_CAP;
            warm_host_tier(&r); /* the arena ends with layer 2 and layer 1's 6, 7 */
            int32_t a[2] = {0, 1}, pred[8] = {7, 6, 5, 4, 3, 2, 1, 0};
            acquire_ok(&r, 2, a, 2);
            for (uint32_t e = 0; e < N_EXP; e++)
                if (vt_streamer_is_resident(r.s, 0, 0, e)) fail_msg("layer 0 expert %u resident", e);
            vt_streamer_prefetch_stats before, after;
            vt_streamer_prefetch_stats_get(r.s, &before);
            prefetch_ok(&r, 0, pred, 8);
            vt_streamer_prefetch_stats_get(r.s, &after);
            if (after.issued - before.issued != (uint64_t)want[t] * N_MAT)
                fail_msg("prefetch_top %u, mode %d: %llu keys issued, want %u", tops[t], mode,
                         (unsigned long long)(after.issued - before.issued), want[t] * N_MAT);
            for (uint32_t i = 0; i < 8; i++)
                for (uint32_t m = 0; m < N_MAT; m++)
                    if (vt_streamer_is_resident(r.s, 0, m, (uint32_t)pred[i]) != (i < want[t]))
                        fail_msg("prefetch_top %u, mode %d: expert %d (rank %u) matrix %u %s",
                                 tops[t], mode, pred[i], i, m,
                                 i < want[t] ? "not copied" : "copied");
            int32_t use[2] = {pred[0], pred[want[t] - 1]};
            acquire_ok(&r, 0, use, 2); /* the prefetched bytes, after the join */
            rig_close(&r);
        }
    /* a resident expert ranked past the cut is still kept from the prefetch's
     * victims: layer 0's expert 2 is the oldest in a full LRU arena, ranked
     * 6th of 7 under prefetch_top 5, whose 5 copies need 5 of the 6 experts
     * not pinned by the last acquire */
    for (int mode = 3; mode <= 4; mode++) {
        rig r;
        rig_prefetch_top = 5;
        rig_open_prefetch(&r, 8 * N_MAT, mode);
        rig_prefetch_top = 0;
        rig_prefetch_max = RIG_NO_CAP;
        warm_host_tier(&r);
        const int32_t fill[4][2] = {{2, 3}, {0, 1}, {4, 5}, {6, 7}};
        for (int i = 0; i < 4; i++) acquire_ok(&r, i ? 1 : 0, fill[i], 2);
        int32_t pred[7] = {0, 1, 4, 5, 6, 2, 7};
        prefetch_ok(&r, 0, pred, 7);
        for (uint32_t m = 0; m < N_MAT; m++) {
            if (!vt_streamer_is_resident(r.s, 0, m, 2))
                fail_msg("mode %d: layer 0 expert 2 (predicted 6th, resident) was evicted", mode);
            for (int i = 0; i < 5; i++)
                if (!vt_streamer_is_resident(r.s, 0, m, (uint32_t)pred[i]))
                    fail_msg("mode %d: expert %d (rank %d) not copied", mode, pred[i], i);
            if (vt_streamer_is_resident(r.s, 0, m, 7)) fail_msg("mode %d: expert 7 copied", mode);
        }
        int32_t use[2] = {2, 6};
        acquire_ok(&r, 0, use, 2);
        rig_close(&r);
    }
}

/* expert_cache.prefetch_max: of the ids prefetch_top lets through (all 8
 * here), a prefetch copies at most `max` experts, the first not resident in
 * the ids' order: 3 under auto, 2 under 2, all that are missing under 100;
 * resident ones (ranks 1 and 2) are passed over, not counted. The same with
 * a slot per matrix (three keys an expert) and a slot per whole expert. */
static void test_prefetch_max(void **state)
{
    (void)state;
    assert_int_equal(vt_streamer_prefetch_max(0, 8), 3);
    assert_int_equal(vt_streamer_prefetch_max(0, 10), 4);
    assert_int_equal(vt_streamer_prefetch_max(0, 3), 2);
    assert_int_equal(vt_streamer_prefetch_max(0, 2), 1);
    assert_int_equal(vt_streamer_prefetch_max(0, 1), 1);
    assert_int_equal(vt_streamer_prefetch_max(0, 0), 0);
    assert_int_equal(vt_streamer_prefetch_max(2, 8), 2);
    assert_int_equal(vt_streamer_prefetch_max(9, 8), 8);
    const uint32_t maxes[3] = {0, 2, 100}, want[3] = {3, 2, 6};
    for (int unit = 0; unit < 2; unit++)
    for (int mode = 3; mode <= 4; mode++)
        for (int t = 0; t < 3; t++) {
            const uint32_t keys = unit ? 1 : N_MAT; /* keys per expert */
            rig r;
            rig_unit = unit;
            rig_host_slot_bytes = unit ? UNIT + 64 : SLICE + 64;
            rig_prefetch_top = 100;
            rig_prefetch_max = maxes[t];
            rig_open_prefetch(&r, 10 * keys, mode);
            rig_unit = 0;
            rig_host_slot_bytes = SLICE + 64;
            rig_prefetch_top = 0;
            rig_prefetch_max = RIG_NO_CAP;
            warm_host_tier(&r);
            int32_t have[2] = {7, 6}, a[2] = {0, 1}, pred[8] = {7, 6, 5, 4, 3, 2, 1, 0};
            acquire_ok(&r, 0, have, 2);
            acquire_ok(&r, 2, a, 2);
            vt_streamer_prefetch_stats before, after;
            vt_streamer_prefetch_stats_get(r.s, &before);
            prefetch_ok(&r, 0, pred, 8);
            vt_streamer_prefetch_stats_get(r.s, &after);
            if (after.issued - before.issued != (uint64_t)want[t] * keys)
                fail_msg("prefetch_max %u, mode %d, unit %d: %llu keys issued, want %u", maxes[t],
                         mode, unit, (unsigned long long)(after.issued - before.issued),
                         want[t] * keys);
            if (after.bytes_issued - before.bytes_issued != (uint64_t)want[t] * (unit ? UNIT : N_MAT * SLICE))
                fail_msg("prefetch_max %u, mode %d, unit %d: %llu bytes issued", maxes[t], mode,
                         unit, (unsigned long long)(after.bytes_issued - before.bytes_issued));
            for (uint32_t i = 0; i < 8; i++)
                for (uint32_t m = 0; m < N_MAT; m++)
                    if (vt_streamer_is_resident(r.s, 0, m, (uint32_t)pred[i]) != (i < 2 + want[t]))
                        fail_msg("prefetch_max %u, mode %d, unit %d: expert %d (rank %u) matrix %u %s",
                                 maxes[t], mode, unit, pred[i], i, m,
                                 i < 2 + want[t] ? "absent" : "copied");
            int32_t use[2] = {pred[2], pred[1 + want[t]]};
            acquire_ok(&r, 0, use, 2); /* the prefetched bytes, after the join */
            rig_close(&r);
        }
}

static void test_prefetch_bytes_and_counts(void **state)
{
    (void)state;
    run_prefetch_tokens(3);
    run_prefetch_tokens(4);
    /* a prefetch with every slot pinned (the last acquire holds the arena)
     * copies nothing and is no error */
    rig r;
    rig_open_prefetch(&r, 2 * N_MAT, 4);
    warm_host_tier(&r);
    int32_t a[2] = {0, 1}, p[2] = {2, 3};
    acquire_ok(&r, 0, a, 2);
    prefetch_ok(&r, 1, p, 2);
    vt_streamer_prefetch_stats ps;
    vt_streamer_prefetch_stats_get(r.s, &ps);
    assert_int_equal(ps.issued, 0);
    assert_false(vt_streamer_is_resident(r.s, 1, 0, 2));
    acquire_ok(&r, 0, a, 2);
    /* a key the host tier lacks is skipped (no file read in a prefetch) */
    rig_close(&r);
    rig_prefetch = 1;
    rig_open_host(&r, 4 * N_MAT, 2, 4);
    rig_prefetch = 0;
    size_t reads = n_reads;
    prefetch_ok(&r, 2, p, 2);
    assert_int_equal(n_reads, reads);
    vt_streamer_prefetch_stats_get(r.s, &ps);
    assert_int_equal(ps.skipped, 2 * N_MAT);
    assert_int_equal(ps.issued, 0);
    rig_close(&r);
    /* prefetches of the acquired layer itself, one after another, never take
     * the last acquire's slots (copies at once: an overwrite would show);
     * a repeated id is one key */
    rig_open_prefetch(&r, 4 * N_MAT, 3);
    warm_host_tier(&r);
    {
        int32_t a1[2] = {0, 1}, p1[2] = {2, 3}, p2[2] = {4, 5}, dup[2] = {6, 6};
        const void *out[2 * N_MAT];
        if (vt_streamer_acquire(r.s, 1, a1, 2, out) != VT_OK) fail_msg("%s", vt_last_error());
        prefetch_ok(&r, 1, a1, 2);
        prefetch_ok(&r, 1, p1, 2);
        prefetch_ok(&r, 1, p2, 2);
        check_slices(1, a1, 2, out);
        vt_streamer_prefetch_stats before, after;
        vt_streamer_prefetch_stats_get(r.s, &before);
        prefetch_ok(&r, 2, dup, 2);
        vt_streamer_prefetch_stats_get(r.s, &after);
        assert_int_equal(after.issued - before.issued, N_MAT);
        check_slices(1, a1, 2, out);
    }
    rig_close(&r);
    rig_prefetch = 1;
    rig_open_host(&r, 4 * N_MAT, 2, 4);
    rig_prefetch = 0;
    /* bad ids are refused as in an acquire */
    int32_t bad[1] = {N_EXP};
    assert_int_equal(vt_streamer_prefetch(r.s, 2, bad, 1), VT_ERR_RANGE);
    assert_int_equal(vt_streamer_prefetch(r.s, N_LAYER, p, 1), VT_ERR_INVALID_ARG);
    rig_close(&r);
}

static void test_prefetch_faults(void **state)
{
    (void)state;
    rig r;
    rig_open_prefetch(&r, 4 * N_MAT, 4);
    warm_host_tier(&r);
    int32_t a[2] = {0, 1}, p[2] = {4, 5};
    acquire_ok(&r, 0, a, 2);
    /* the fault hook at the publish: the key stays absent, nothing claimed */
    fault_point = VT_STREAMER_FAULT_PUBLISH;
    fault_expert = 5;
    uint64_t res0 = vt_streamer_n_resident(r.s);
    assert_int_equal(vt_streamer_prefetch(r.s, 1, p, 2), VT_ERR_IO);
    if (!strstr(vt_last_error(), "prefetch of 4 slices of layer 1")) fail_msg("%s", vt_last_error());
    /* one call queues the prefetch's copies: all or nothing. The arena was
     * full: the four victims taken (4's slices and 5's gate) went back to
     * the free list unclaimed */
    for (uint32_t m = 0; m < N_MAT; m++) {
        assert_false(vt_streamer_is_resident(r.s, 1, m, 5));
        assert_false(vt_streamer_is_resident(r.s, 1, m, 4));
    }
    assert_int_equal(vt_streamer_n_resident(r.s), res0 - 4);
    acquire_ok(&r, 1, p, 2); /* joins, then fills 5 on demand */
    /* the store's publish_ahead fails: the same */
    acquire_ok(&r, 0, a, 2);
    int32_t q[2] = {6, 7};
    publish_failures = 1;
    assert_int_equal(vt_streamer_prefetch(r.s, 2, q, 2), VT_ERR_IO);
    assert_false(vt_streamer_is_resident(r.s, 2, 0, 6));
    acquire_ok(&r, 2, q, 2);
    /* a failed join: every slot still marked prefetched is dropped (their
     * copies may not have landed), the acquire fails naming the join, and a
     * retry refills correct bytes */
    acquire_ok(&r, 0, a, 2);
    prefetch_ok(&r, 1, q, 2);
    assert_true(vt_streamer_is_resident(r.s, 1, 0, 6));
    join_failures = 1;
    const void *out[2 * N_MAT];
    assert_int_equal(vt_streamer_acquire(r.s, 1, q, 2, out), VT_ERR_IO);
    if (!strstr(vt_last_error(), "joining the prefetch copies")) fail_msg("%s", vt_last_error());
    for (uint32_t m = 0; m < N_MAT; m++) {
        assert_false(vt_streamer_is_resident(r.s, 1, m, 6));
        assert_false(vt_streamer_is_resident(r.s, 1, m, 7));
    }
    acquire_ok(&r, 1, q, 2);
    vt_expert_stats st;
    vt_streamer_stats(r.s, 1, &st);
    assert_true(st.fill_errors >= 2 * N_MAT);
    vt_streamer_prefetch_stats ps;
    vt_streamer_prefetch_stats_get(r.s, &ps);
    assert_int_equal(ps.wasted, 0); /* dropped by errors, not wrong predictions */
    rig_close(&r);
}

static void test_prefetch_refused(void **state)
{
    (void)state;
    rig r;
    memset(&r, 0, sizeof r);
    assert_int_equal(vt_gguf_open(model_path, VT_GGUF_NO_MMAP, &r.g), VT_OK);
    vt_store_params sp = {.struct_size = sizeof sp, .slot_bytes = SLICE, .n_slots = 12};
    for (int c = 0; c < 2; c++) {
        r.api = *vt_host_store_api();
        if (c == 1) r.api.struct_size = (uint32_t)offsetof(vt_store_api, begin_ahead);
        assert_int_equal(r.api.create(&sp, &r.store), VT_OK);
        vt_streamer_params p = {.gguf = r.g, .store_api = &r.api, .store = r.store, .n_slots = 12,
                                .slot_bytes = SLICE, .n_layer = N_LAYER, .prefetch = 1,
                                .n_host_slots = c == 1 ? 8 : 0, .host_slot_bytes = SLICE};
        assert_int_equal(vt_streamer_create(&p, &r.s), VT_ERR_UNSUPPORTED);
        assert_null(r.s);
        const char *want = c == 0 ? "there is none" : "store ABI 1.5";
        if (!strstr(vt_last_error(), "expert_cache.prefetch") || !strstr(vt_last_error(), want))
            fail_msg("%s", vt_last_error());
        r.api.destroy(r.store);
    }
    /* auto: on only with a host tier, the store's ahead publishes and a backend
     * that declares copy.h2d_ahead PRESENT; otherwise off, and create succeeds */
    static vt_capability caps[1] = {{.id = VT_CAP_COPY_H2D_AHEAD, .state = VT_CAP_PRESENT}};
    static vt_backend_api ba;
    ba.struct_size = sizeof ba;
    ba.caps = caps;
    ba.n_caps = 1;
    vt_backend be = {.api = &ba, .name = "ahead"};
    for (int c = 0; c < 4; c++) {
        r.api = *vt_host_store_api();
        if (c == 2) r.api.struct_size = (uint32_t)offsetof(vt_store_api, begin_ahead);
        caps[0].state = c == 3 ? VT_CAP_ABSENT : VT_CAP_PRESENT;
        assert_int_equal(r.api.create(&sp, &r.store), VT_OK);
        vt_streamer_params p = {.gguf = r.g, .store_api = &r.api, .store = r.store, .n_slots = 12,
                                .slot_bytes = SLICE, .n_layer = N_LAYER,
                                .prefetch = VT_STREAMER_PREFETCH_AUTO, .backend = &be,
                                .n_host_slots = c == 1 ? 0 : 8, .host_slot_bytes = SLICE};
        if (vt_streamer_create(&p, &r.s) != VT_OK) fail_msg("auto, case %d: %s", c, vt_last_error());
        assert_int_equal(vt_streamer_prefetch_on(r.s), c == 0);
        vt_streamer_destroy(r.s);
        r.api.destroy(r.store);
    }
    vt_gguf_close(r.g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefetch_bytes_and_counts),
        cmocka_unit_test(test_prefetch_top),
        cmocka_unit_test(test_prefetch_max),
        cmocka_unit_test(test_prefetch_faults),
        cmocka_unit_test(test_prefetch_refused),
    };
    return vt_test_exit(cmocka_run_group_tests(tests, group_setup, group_teardown));
}
