/*
 * streamer_rig.c - the expert streamer tests' rig (streamer_rig.h): the
 * pattern file, the host store with its commit, publish and ahead queue
 * wrapped for fault injection and deferred copies, a counting reader, the
 * fault hook, and a streamer over them.
 */
#include "streamer_rig.h"

#include <errno.h>
#include <unistd.h>

#include "error.h"

const char *mat_name[N_MAT] = {"gate", "up", "down"};
char model_path[256];

float pattern(uint32_t l, uint32_t m, uint32_t e, uint32_t i)
{
    return (float)(l * 1000000 + m * 100000 + e * 1000 + i);
}

int group_setup(void **state)
{
    (void)state;
    snprintf(model_path, sizeof model_path, "%s/vt-streamer-%d.gguf",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    vt_gguf_writer *w = vt_gguf_writer_new(32);
    assert_non_null(w);
    assert_int_equal(vt_gguf_writer_set_str(w, "general.architecture", "test"), VT_OK);
    /* a dense tensor first, so expert data does not start at the data section */
    float dense[7] = {1, 2, 3, 4, 5, 6, 7};
    int64_t ne1[1] = {7};
    assert_int_equal(vt_gguf_writer_add_tensor(w, "dense.weight", VT_TYPE_F32, 1, ne1, dense,
                                               sizeof dense), VT_OK);
    float *buf = malloc((size_t)SLICE * N_EXP);
    for (uint32_t l = 0; l < N_LAYER; l++)
        for (uint32_t m = 0; m < N_MAT; m++) {
            for (uint32_t e = 0; e < N_EXP; e++)
                for (uint32_t i = 0; i < N_IN * N_OUT; i++)
                    buf[e * N_IN * N_OUT + i] = pattern(l, m, e, i);
            char name[64];
            snprintf(name, sizeof name, "blk.%u.ffn_%s_exps.weight", l, mat_name[m]);
            int64_t ne[3] = {N_IN, N_OUT, N_EXP};
            assert_int_equal(vt_gguf_writer_add_tensor(w, name, VT_TYPE_F32, 3, ne, buf,
                                                       (uint64_t)SLICE * N_EXP), VT_OK);
        }
    free(buf);
    assert_int_equal(vt_gguf_writer_write(w, model_path), VT_OK);
    vt_gguf_writer_free(w);
    return 0;
}

int group_teardown(void **state)
{
    (void)state;
    unlink(model_path);
    return 0;
}

vt_cache_policy rig_policy = VT_CACHE_POLICY_LRU;
int rig_prefetch; /* vt_streamer_params.prefetch of the next rig */
uint32_t rig_prefetch_top; /* vt_streamer_params.prefetch_top of the next rig */
uint32_t rig_prefetch_max = RIG_NO_CAP;
uint64_t rig_host_slot_bytes = SLICE + 64; /* the next rig's host-tier slots */
uint32_t rig_readers;  /* the next rig's reader threads (0: none) */
uint64_t rig_ring;     /* the next rig's staging ring slots (0: none) */
int rig_unit;          /* the next rig's slots hold whole experts (slot_unit_expert) */

int commit_failures; /* > 0: that many commits fail */
static vt_status (*real_commit)(vt_store *, uint64_t, uint64_t);
static vt_status failing_commit(vt_store *st, uint64_t slot, uint64_t bytes)
{
    if (commit_failures > 0) {
        commit_failures--;
        vt_set_error("injected commit failure");
        return VT_ERR_IO;
    }
    return real_commit(st, slot, bytes);
}

/* A store whose publish copies nothing until quiesce: the streamer must not
 * touch a publish's source before it quiesces. Wraps the host store. */
#define MAX_DEFERRED 64
typedef struct pending_copy {
    uint64_t slot, bytes;
    const void *src;
} pending_copy;
static pending_copy deferred[MAX_DEFERRED];
/* Land n queued copies into st's slots; the queue is then empty. */
static vt_status flush_copies(vt_store *st, const pending_copy *q, int *n)
{
    for (int i = 0; i < *n; i++)
        memcpy((void *)(uintptr_t)vt_host_store_api()->slot_for_read(st, q[i].slot), q[i].src,
               (size_t)q[i].bytes);
    *n = 0;
    return VT_OK;
}
static int n_deferred;
int n_quiesce, publish_failures, n_publish;
static vt_store *deferred_store;
static vt_status deferred_publish(vt_store *st, uint64_t slot, const void *src, uint64_t bytes)
{
    n_publish++;
    if (publish_failures > 0) {
        publish_failures--;
        vt_set_error("injected store publish failure");
        return VT_ERR_IO;
    }
    if (n_deferred == MAX_DEFERRED) fail_msg("more than %d publishes without a quiesce", MAX_DEFERRED);
    deferred_store = st;
    deferred[n_deferred].slot = slot;
    deferred[n_deferred].src = src;
    deferred[n_deferred].bytes = bytes;
    n_deferred++;
    return VT_OK;
}
int quiesce_failures; /* > 0: that many quiesces fail, copying nothing */
static vt_status deferred_quiesce(vt_store *st)
{
    n_quiesce++;
    if (quiesce_failures > 0) {
        quiesce_failures--;
        n_deferred = 0; /* the copies are lost */
        vt_set_error("injected copy failure");
        return VT_ERR_IO;
    }
    return flush_copies(st, deferred, &n_deferred);
}

/* Ahead publishes (mode 3: copied at once; mode 4: copied only at join or
 * quiesce, as a second copy queue may run them any time before the join). */
static pending_copy ahead_q[MAX_DEFERRED];
static int n_ahead_q, ahead_eager;
int n_begin, n_join, join_failures;
static vt_status ahead_flush(vt_store *st) { return flush_copies(st, ahead_q, &n_ahead_q); }
static vt_status test_begin_ahead(vt_store *st)
{
    (void)st;
    n_begin++;
    return VT_OK;
}
static vt_status test_publish_ahead(vt_store *st, const vt_store_publish *p, uint32_t n)
{
    if (publish_failures > 0) {
        publish_failures--;
        vt_set_error("injected ahead publish failure");
        return VT_ERR_IO;
    }
    if (n_begin == 0) fail_msg("publish_ahead before any begin_ahead");
    for (uint32_t i = 0; i < n; i++) {
        if (ahead_eager) {
            vt_status s = vt_host_store_api()->publish(st, p[i].slot, p[i].src, p[i].bytes);
            if (s != VT_OK) return s;
            continue;
        }
        if (n_ahead_q == MAX_DEFERRED) fail_msg("more than %d ahead publishes without a join", MAX_DEFERRED);
        ahead_q[n_ahead_q].slot = p[i].slot;
        ahead_q[n_ahead_q].src = p[i].src;
        ahead_q[n_ahead_q].bytes = p[i].bytes;
        n_ahead_q++;
    }
    return VT_OK;
}
static vt_status test_join_ahead(vt_store *st)
{
    n_join++;
    if (join_failures > 0) {
        join_failures--;
        n_ahead_q = 0; /* the copies are lost */
        vt_set_error("injected join failure");
        return VT_ERR_IO;
    }
    return ahead_flush(st);
}
static vt_status ahead_quiesce(vt_store *st) { return ahead_flush(st); }

size_t n_reads; /* reads that reached the counting reader (reader threads: atomic) */
ssize_t counting_read(void *ctx, int fd, void *buf, size_t n, off_t off)
{
    (void)ctx;
    __atomic_fetch_add(&n_reads, 1, __ATOMIC_RELAXED);
    return pread(fd, buf, n, off);
}

int fault_point; /* the point that fails once, or 0 */
uint32_t fault_expert;
static int fault_hook(void *ctx, vt_streamer_fault_point pt, uint32_t layer, uint32_t matrix,
                      uint32_t expert)
{
    (void)ctx;
    (void)layer;
    (void)matrix;
    if ((int)pt == fault_point && expert == fault_expert) {
        fault_point = 0;
        return 1;
    }
    return 0;
}

/* streamer_rig.h says what each mode wraps. */
void rig_open_with(rig *r, uint64_t n_slots, int direct, uint64_t n_host, int mode)
{
    memset(r, 0, sizeof *r);
    assert_int_equal(vt_gguf_open(model_path, VT_GGUF_NO_MMAP, &r->g), VT_OK);
    r->api = *vt_host_store_api();
    real_commit = r->api.commit_slot;
    r->api.commit_slot = failing_commit;
    if (mode == 1) {
        r->api.publish = deferred_publish;
        r->api.quiesce = deferred_quiesce;
    } else if (mode == 2) {
        r->api.struct_size = (uint32_t)offsetof(vt_store_api, publish);
        r->api.publish = NULL;
        r->api.quiesce = NULL;
    } else if (mode == 3 || mode == 4) {
        ahead_eager = mode == 3;
        r->api.quiesce = ahead_quiesce; /* the backend's synchronize waits for both queues */
        r->api.begin_ahead = test_begin_ahead;
        r->api.publish_ahead = test_publish_ahead;
        r->api.join_ahead = test_join_ahead;
    } else if (mode == 5) { /* a store of ABI 1.4: publish, no ahead publishes */
        r->api.struct_size = (uint32_t)offsetof(vt_store_api, begin_ahead);
    }
    n_ahead_q = n_begin = n_join = join_failures = 0;
    n_deferred = n_quiesce = publish_failures = n_publish = 0;
    const uint64_t slot_bytes = rig_unit ? UNIT : SLICE;
    vt_store_params sp = {.struct_size = sizeof sp, .slot_bytes = slot_bytes, .n_slots = n_slots};
    assert_int_equal(r->api.create(&sp, &r->store), VT_OK);
    vt_streamer_params p = {.gguf = r->g, .store_api = &r->api, .store = r->store,
                            .n_slots = n_slots, .slot_bytes = slot_bytes, .n_layer = N_LAYER,
                            .slot_unit_expert = rig_unit,
                            .io_direct = direct, .policy = rig_policy,
                            .n_host_slots = n_host, .host_slot_bytes = rig_host_slot_bytes,
                            .n_readers = rig_readers, .n_ring_slots = rig_ring,
                            .prefetch = rig_prefetch, .prefetch_top = rig_prefetch_top,
                            .prefetch_max = rig_prefetch_max};
    if (vt_streamer_create(&p, &r->s) != VT_OK) fail_msg("%s", vt_last_error());
    assert_int_equal(vt_streamer_n_host_slots(r->s), n_host);
    for (uint32_t l = 0; l < N_LAYER; l++)
        for (uint32_t m = 0; m < N_MAT; m++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%u.ffn_%s_exps.weight", l, mat_name[m]);
            const vt_gguf_tensor *t = vt_gguf_find_tensor(r->g, name);
            assert_non_null(t);
            if (vt_streamer_register(r->s, l, m, t) != VT_OK) fail_msg("%s", vt_last_error());
        }
}

void rig_open_host(rig *r, uint64_t n_slots, uint64_t n_host, int mode)
{
    rig_open_with(r, n_slots, 0, n_host, mode);
    vt_streamer_set_reader(r->s, counting_read, NULL);
    vt_streamer_set_fault(r->s, fault_hook, NULL);
}

void rig_open(rig *r, uint64_t n_slots, int direct)
{
    rig_open_with(r, n_slots, direct, 0, 0);
}

void rig_open_prefetch(rig *r, uint64_t n_slots, int mode)
{
    rig_prefetch = 1;
    rig_open_host(r, n_slots, N_LAYER * N_MAT * N_EXP, mode);
    rig_prefetch = 0;
}

void rig_close(rig *r)
{
    vt_streamer_destroy(r->s);
    r->api.destroy(r->store);
    vt_gguf_close(r->g);
}

void check_slices(uint32_t l, const int32_t *ids, uint32_t n, const void **out)
{
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t m = 0; m < N_MAT; m++) {
            const float *p = out[i * N_MAT + m];
            assert_non_null(p);
            for (uint32_t j = 0; j < N_IN * N_OUT; j++)
                if (p[j] != pattern(l, m, (uint32_t)ids[i], j))
                    fail_msg("layer %u matrix %u expert %d element %u: %g, want %g", l, m, ids[i], j,
                             p[j], pattern(l, m, (uint32_t)ids[i], j));
        }
}

void acquire_ok(rig *r, uint32_t l, const int32_t *ids, uint32_t n)
{
    const void *out[64];
    if (vt_streamer_acquire(r->s, l, ids, n, out) != VT_OK) fail_msg("%s", vt_last_error());
    check_slices(l, ids, n, out);
}

/* Every expert of every layer read once into the host tier (the arena keeps
 * the last ones). */
void warm_host_tier(rig *r)
{
    for (uint32_t l = 0; l < N_LAYER; l++)
        for (int32_t e = 0; e < N_EXP; e += 2) {
            int32_t ids[2] = {e, e + 1};
            acquire_ok(r, l, ids, 2);
        }
}
