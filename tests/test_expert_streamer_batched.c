/*
 * test_expert_streamer_batched.c - the batched fill path: reader threads
 * and the staging ring (one program with test_expert_streamer.c; see its
 * header).
 */
#include <errno.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "test_expert_streamer.h"

#include "cache_sim.h"
#include "error.h"
#include "streamer_rig.h"

/* ------------------------------------------------------------------------- */
/* The batched fill path: reader threads, the staging ring. */

#include "reader_pool.h"

typedef struct pool_run {
    int hits[97];
    uint32_t n_workers;
    int busy[8];      /* calls running per worker */
    int bad_worker;   /* a worker out of range, or two calls of one worker at once */
} pool_run;

static void count_job(void *ctx, uint64_t i, uint32_t worker)
{
    pool_run *r = ctx;
    __atomic_fetch_add(&r->hits[i], 1, __ATOMIC_RELAXED);
    if (worker >= r->n_workers || __atomic_fetch_add(&r->busy[worker], 1, __ATOMIC_ACQ_REL)) {
        __atomic_store_n(&r->bad_worker, 1, __ATOMIC_RELAXED);
        if (worker >= r->n_workers) return;
    }
    if (i % 7 == 0) usleep(100); /* let the other workers take jobs meanwhile */
    __atomic_fetch_sub(&r->busy[worker], 1, __ATOMIC_ACQ_REL);
}

/* Every job of every run runs exactly once, on pools of 1..5 readers; each
 * call names a worker in [0, readers) that runs no other call at the time. */
void test_reader_pool(void **state)
{
    (void)state;
    for (uint32_t nr = 1; nr <= 5; nr++) {
        vt_reader_pool *p;
        assert_int_equal(vt_reader_pool_create(nr, &p), VT_OK);
        assert_int_equal(vt_reader_pool_size(p), nr);
        pool_run r;
        for (int run = 0; run < 300; run++) {
            uint64_t n = (uint64_t)(run % 97) + 1;
            memset(&r, 0, sizeof r);
            r.n_workers = nr;
            vt_reader_pool_run(p, count_job, &r, n);
            for (uint64_t i = 0; i < 97; i++)
                if (r.hits[i] != (i < n ? 1 : 0))
                    fail_msg("%u readers, run %d of %llu jobs: job %llu ran %d times", nr, run,
                             (unsigned long long)n, (unsigned long long)i, r.hits[i]);
            if (r.bad_worker)
                fail_msg("%u readers, run %d: a call named a worker out of range, or one "
                         "already running a call", nr, run);
        }
        vt_reader_pool_destroy(p);
    }
}

/* The acquires of one workload: sizes 1, 2, 3 and 8 (the whole layer, as a
 * prefill chunk asks), repeated ids, every layer. */
static const int32_t wl_ids[][8] = {
    {0, 1}, {2, 3, 4}, {5}, {0, 1, 2, 3, 4, 5, 6, 7}, {7, 7, 1}, {6, 2}, {3, 3},
    {4, 0, 5}, {1, 6, 2, 7, 0, 3, 5, 4}, {2}, {5, 6, 7}, {0, 4},
};
static const uint32_t wl_n[] = {2, 3, 1, 8, 3, 2, 2, 3, 8, 1, 3, 2};
enum { WL = sizeof wl_n / sizeof wl_n[0] };

typedef struct wl_counts {
    vt_expert_stats d;
    vt_streamer_host_stats h;
} wl_counts;

static void run_workload(rig *r, wl_counts *c)
{
    for (int rep = 0; rep < 2; rep++)
        for (int i = 0; i < WL; i++)
            for (uint32_t l = 0; l < N_LAYER; l++) acquire_host_ok(r, (l + (uint32_t)i) % N_LAYER,
                                                               wl_ids[i], wl_n[i]);
    vt_streamer_stats(r->s, -1, &c->d);
    vt_streamer_host_stats_get(r->s, -1, &c->h);
}

/* Batched fills (reads at once on 2 or 4 readers; through the staging ring
 * without a host tier) give the same bytes and the same counts as one fill
 * at a time, through host tiers of 1..4 slots and the whole file, and rings
 * of 2..5 slots, under a store that copies at once and one that copies only
 * at quiesce (a ring or host slot read into before its copy ran shows). */
void test_batched_equals_serial(void **state)
{
    (void)state;
    const uint64_t hosts[] = {0, 1, 2, 4, N_LAYER * N_MAT * N_EXP};
    for (size_t hi = 0; hi < sizeof hosts / sizeof hosts[0]; hi++)
        for (int mode = 0; mode < 2; mode++) {
            const uint64_t n_host = hosts[hi];
            rig r;
            wl_counts ref, got;
            rig_readers = 0;
            rig_ring = 0;
            rig_open_host(&r, 24, n_host, mode);
            assert_int_equal(vt_streamer_n_readers(r.s), 1);
            run_workload(&r, &ref);
            rig_close(&r);
            for (uint32_t nr = 2; nr <= 4; nr += 2)
                for (uint64_t ring = 2; ring <= (n_host ? 2 : 5); ring++) {
                    rig_readers = nr;
                    rig_ring = n_host ? 0 : ring;
                    rig_open_host(&r, 24, n_host, mode);
                    assert_int_equal(vt_streamer_n_ring_slots(r.s), n_host ? 0 : ring);
                    assert_int_equal(vt_streamer_n_readers(r.s), nr);
                    n_publish = 0;
                    run_workload(&r, &got);
                    if (!n_host && mode == 1) assert_true(n_publish > 0); /* from the ring */
                    if (got.d.hits != ref.d.hits || got.d.misses != ref.d.misses ||
                        got.d.bytes_filled != ref.d.bytes_filled ||
                        got.d.evictions != ref.d.evictions || got.h.hits != ref.h.hits ||
                        got.h.misses != ref.h.misses || got.h.bytes_read != ref.h.bytes_read)
                        fail_msg("host %llu, mode %d, %u readers, ring %llu: device %llu/%llu "
                                 "hits/misses (serial %llu/%llu), host %llu/%llu (serial "
                                 "%llu/%llu)", (unsigned long long)n_host, mode, nr,
                                 (unsigned long long)rig_ring, (unsigned long long)got.d.hits,
                                 (unsigned long long)got.d.misses, (unsigned long long)ref.d.hits,
                                 (unsigned long long)ref.d.misses, (unsigned long long)got.h.hits,
                                 (unsigned long long)got.h.misses, (unsigned long long)ref.h.hits,
                                 (unsigned long long)ref.h.misses);
                    assert_int_equal(got.d.fill_errors, 0);
                    rig_close(&r);
                }
        }
    rig_readers = 0;
    rig_ring = 0;
}

/* Fails, once, the read whose range holds file offset `at`. */
typedef struct target_fault {
    uint64_t at;
    int kind;  /* 1 EIO, 2 end of file half way */
    int armed; /* atomic */
} target_fault;
static ssize_t targeted_read(void *ctx, int fd, void *buf, size_t n, off_t off)
{
    target_fault *t = ctx;
    __atomic_fetch_add(&n_reads, 1, __ATOMIC_RELAXED);
    if ((uint64_t)off <= t->at && t->at < (uint64_t)off + n &&
        __atomic_exchange_n(&t->armed, 0, __ATOMIC_ACQ_REL)) {
        if (t->kind == 1) {
            errno = EIO;
            return -1;
        }
        ssize_t r = pread(fd, buf, (size_t)(t->at - (uint64_t)off), off);
        (void)r;
        return 0; /* the file "ends" at t->at */
    }
    return pread(fd, buf, n, off);
}

static uint64_t slice_offset(rig *r, uint32_t l, uint32_t m, uint32_t e)
{
    char name[64];
    snprintf(name, sizeof name, "blk.%u.ffn_%s_exps.weight", l, mat_name[m]);
    const vt_gguf_tensor *t = vt_gguf_find_tensor(r->g, name);
    assert_non_null(t);
    return t->file_offset + (uint64_t)e * SLICE;
}

/* Faults in the batched path, with 4 readers, through a 4-slot host tier
 * and through a 4-slot ring, under both stores: a failed read of the up
 * slice of expert 5 (EIO, then end of file) publishes the slices before it
 * (its gate), leaves it and every slice after it absent (in both tiers),
 * words the error as the one-at-a-time path does, and leaks nothing; the
 * host-tier commit and the publish fail the same way; every retry is exact. */
void test_batched_faults(void **state)
{
    (void)state;
    for (int ringed = 0; ringed < 2; ringed++)
        for (int mode = 0; mode < 2; mode++) {
            rig r;
            rig_readers = 4;
            rig_ring = ringed ? 4 : 0;
            rig_open_host(&r, 9, ringed ? 0 : 4, mode);
            const uint64_t n_host = ringed ? 0 : 4;
            const void *out[16];
            int32_t w[3] = {0, 1, 2};
            acquire_host_ok(&r, 1, w, 3); /* the device tier full of layer 1 */
            for (int kind = 1; kind <= 2; kind++) {
                const uint32_t l = kind == 1 ? 2 : 0; /* a layer not read yet */
                target_fault tf = {slice_offset(&r, l, 1, 5) + SLICE / 2, kind, 1};
                vt_streamer_set_reader(r.s, targeted_read, &tf);
                int32_t a[2] = {5, 6};
                assert_int_equal(vt_streamer_acquire(r.s, l, a, 2, out), VT_ERR_IO);
                const char *msg = vt_last_error();
                char want[64];
                snprintf(want, sizeof want, "expert 5 of blk.%u.ffn_up_exps.weight", l);
                if (!strstr(msg, want) || !strstr(msg, model_path) ||
                    !strstr(msg, kind == 1 ? "Input/output error" : "file ends"))
                    fail_msg("batched read failure message: %s", msg);
                assert_int_equal(tf.armed, 0);
                assert_int_equal(vt_streamer_quiesce(r.s), VT_OK);
                assert_true(vt_streamer_is_resident(r.s, l, 0, 5));  /* before the failure */
                assert_false(vt_streamer_is_resident(r.s, l, 1, 5)); /* the failure */
                assert_false(vt_streamer_is_resident(r.s, l, 2, 5)); /* after it */
                for (uint32_t m = 0; m < N_MAT; m++)
                    assert_false(vt_streamer_is_resident(r.s, l, m, 6));
                if (n_host) {
                    assert_true(vt_streamer_is_host_resident(r.s, l, 0, 5));
                    assert_false(vt_streamer_is_host_resident(r.s, l, 1, 5));
                    assert_false(vt_streamer_is_host_resident(r.s, l, 1, 6));
                }
                vt_streamer_set_reader(r.s, counting_read, NULL);
                acquire_host_ok(&r, l, a, 2); /* the retry */
            }
            /* the host-tier commit (host tier only) and the publish, at the
             * up slice of expert 3 of layer 0 */
            for (int pt = ringed ? 2 : 1; pt <= 2; pt++) {
                const uint32_t l = pt == 1 ? 0 : 2; /* experts 3 and 4 not read there yet */
                int32_t b[2] = {3, 4};
                fault_point = pt;
                fault_expert = 3;
                assert_int_equal(vt_streamer_acquire(r.s, l, b, 2, out), VT_ERR_IO);
                const char *msg = vt_last_error();
                char want[96];
                snprintf(want, sizeof want, "%s of expert 3 of blk.%u.ffn_gate_exps",
                         pt == 1 ? "host-tier commit" : "publish", l);
                if (!strstr(msg, want)) fail_msg("batched fault %d message: %s", pt, msg);
                assert_int_equal(vt_streamer_quiesce(r.s), VT_OK);
                for (uint32_t m = 0; m < N_MAT; m++) {
                    assert_false(vt_streamer_is_resident(r.s, l, m, 3));
                    assert_false(vt_streamer_is_resident(r.s, l, m, 4));
                }
                if (n_host) /* a failed publish leaves the host copy */
                    assert_true(vt_streamer_is_host_resident(r.s, l, 0, 3) == (pt == 2));
                acquire_host_ok(&r, l, b, 2);
            }
            /* nothing leaked: nine new keys fill both tiers to exactly full */
            int32_t z[3] = {5, 6, 7};
            acquire_host_ok(&r, 1, z, 3);
            assert_int_equal(vt_streamer_n_resident(r.s), 9);
            assert_int_equal(vt_streamer_n_host_resident(r.s), n_host);
            vt_expert_stats d;
            vt_streamer_stats(r.s, -1, &d);
            assert_true(d.fill_errors >= 3);
            rig_close(&r);
        }
    rig_readers = 0;
    rig_ring = 0;
}

/* O_DIRECT in the batched path: reads in place into ring and host slots with
 * room for whole blocks, through each reader's bounce buffer into slots
 * without; the same bytes either way. */
void test_batched_direct_io(void **state)
{
    (void)state;
    for (int room = 0; room < 2; room++)
        for (int ringed = 0; ringed < 2; ringed++) {
            rig r;
            rig_host_slot_bytes = room ? SLICE + 64 + 2 * 4096 : SLICE + 64;
            rig_readers = 3;
            rig_ring = ringed ? 3 : 0;
            rig_open_with(&r, 9, 1, ringed ? 0 : 3, 0);
            for (int rep = 0; rep < 2; rep++)
                for (uint32_t l = 0; l < N_LAYER; l++)
                    for (int32_t e = 0; e + 2 < N_EXP; e += 3) {
                        int32_t b[3] = {e, e + 1, e + 2};
                        acquire_host_ok(&r, l, b, 3);
                    }
            rig_close(&r);
        }
    rig_host_slot_bytes = SLICE + 64;
    rig_readers = 0;
    rig_ring = 0;
}
