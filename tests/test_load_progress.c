/*
 * test_load_progress.c - the load-progress report (engine.h's
 * vt_engine_progress_fn) and the text of the commands' bars (progress.h).
 *   1. vt_progress_format: the bar, percentage, byte units and rate at 0%,
 *      partial, 100%, done > total, total 0, no elapsed time;
 *      vt_progress_format_count: a count of shards;
 *   2. an engine on a backend whose memory is not host-addressable (the
 *      fake "discrete" backend: copy_h2d is a memcpy) reports every weight
 *      copy: done grows monotonically to total, the last call has
 *      done == total == the bytes copied, at least the fit check's dense
 *      bytes, and nothing is reported once the engine is open;
 *   3. the same model on backend-cpu (weights read in place): the weights
 *      are read at open (prefault.h), reported as phase "read" up to
 *      done == total, the tensors' bytes rounded out to pages (every tensor
 *      with resident experts, the dense ones only with streamed experts);
 *      vt_engine_weights says so, and mincore finds every page of them in
 *      memory after the fixture was dropped from the page cache; with
 *      params.no_prefault nothing is read or reported;
 *   4. the per-op profile (params.profile, op_profile.h): a profiled engine
 *      gives bit-identical logits, records the ops of the profiled calls only,
 *      and refuses to start on an engine opened without it.
 */
#include "test_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine.h"
#include "op_profile.h"
#include "error.h"
#include "progress.h"
#include "residency.h"

static void test_format(void **state)
{
    (void)state;
    char b[256];
    vt_progress_format(b, sizeof b, "vt: loading m.gguf", 0, 1024, 0.0, 10);
    assert_string_equal(b, "vt: loading m.gguf [>         ]   0%  0 B / 1.00 KiB");
    vt_progress_format(b, sizeof b, "L", 512, 1024, 2.0, 10);
    assert_string_equal(b, "L [=====>    ]  50%  512 B / 1.00 KiB  256 B/s");
    vt_progress_format(b, sizeof b, "L", 3ull << 30, 3ull << 30, 1.5, 4);
    assert_string_equal(b, "L [====] 100%  3.00 GiB / 3.00 GiB  2.00 GiB/s");
    /* done past total is shown as complete, never over 100% */
    vt_progress_format(b, sizeof b, "L", 5000, 4096, 0.0, 4);
    assert_string_equal(b, "L [====] 100%  4.00 KiB / 4.00 KiB");
    vt_progress_format(b, sizeof b, "L", 0, 0, 0.0, 2);
    assert_string_equal(b, "L [==] 100%  0 B / 0 B");
    /* width clamped to 1..200; a small buffer stays terminated */
    vt_progress_format(b, sizeof b, "L", 1, 2, 0.0, 0);
    assert_string_equal(b, "L [>]  50%  1 B / 2 B");
    char small[8];
    size_t n = vt_progress_format(small, sizeof small, "label", 1, 2, 0.0, 10);
    assert_true(n > sizeof small - 1);
    assert_int_equal(strlen(small), sizeof small - 1);
    /* a count (the shards of a split model): no byte units, no rate */
    vt_progress_format_count(b, sizeof b, "vt: opening m-00001-of-00009.gguf", 3, 9, "shards", 9);
    assert_string_equal(b, "vt: opening m-00001-of-00009.gguf [===>     ]  33%  3 / 9 shards");
    vt_progress_format_count(b, sizeof b, "L", 12, 9, "shards", 3);
    assert_string_equal(b, "L [===] 100%  9 / 9 shards");
}

typedef struct rec {
    int calls, after_open;
    uint64_t last_done, last_total, max_total;
    int monotone, within;
    const char *phase;
    double last_seconds;
} rec;

static void on_progress(void *user, const char *phase, uint64_t done, uint64_t total,
                        double seconds)
{
    rec *r = user; /* records only: the callback must return (engine.h) */
    if (strcmp(phase, r->phase)) r->within = 0;
    if (r->calls && done < r->last_done) r->monotone = 0;
    if (done > total) r->within = 0;
    if (seconds < r->last_seconds) r->monotone = 0;
    r->calls++;
    r->last_done = done;
    r->last_total = total;
    r->last_seconds = seconds;
    if (total > r->max_total) r->max_total = total;
}

static vt_engine *open_with(const char *device, const char *plugin_dir, rec *r, int no_prefault,
                            const char *set)
{
    const char *fx = vt_test_fixtures();
    if (!fx) return NULL;
    char *path = vt_test_path(fx, "qwen35moe-tiny/gguf/qwen35moe-tiny-bf16.gguf");
    static vt_config cfg;
    vt_config_defaults(&cfg);
    if (set) assert_int_equal(vt_config_set_arg(&cfg, set), VT_OK);
    vt_engine_params p = {.model_path = path, .plugin_dir = plugin_dir, .device = device,
                          .n_threads = 1, .n_ctx = 64, .n_batch = 8, .config = &cfg,
                          .progress = on_progress, .progress_user = r, .no_prefault = no_prefault};
    vt_engine *e = NULL;
    if (vt_engine_open(&p, &e) != VT_OK)
        fail_msg("vt_engine_open(%s on %s): %s", path, device, vt_last_error());
    free(path);
    return e;
}

static vt_engine *open_on(const char *device, const char *plugin_dir, rec *r)
{
    return open_with(device, plugin_dir, r, 0, NULL);
}

static void test_discrete_upload(void **state)
{
    (void)state;
    rec r = {.monotone = 1, .within = 1, .phase = "upload"};
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/discrete", VT_FAKE_PLUGIN_ROOT);
    vt_engine *e = open_on("fake", dir, &r);
    if (!e) return;
    const vt_fit *fit = vt_engine_fit(e);
    printf("[progress] fake discrete backend: %d calls, %llu of %llu bytes (fit: dense %llu, "
           "experts %llu)\n", r.calls, (unsigned long long)r.last_done,
           (unsigned long long)r.last_total, (unsigned long long)fit->dense_bytes,
           (unsigned long long)fit->expert_bytes);
    assert_true(r.calls >= 10);
    assert_true(r.monotone);
    assert_true(r.within);
    assert_int_equal(r.last_done, r.last_total);
    assert_true(r.last_done >= fit->dense_bytes);
    /* the model (resident experts) copies every tensor: the weights' bytes */
    assert_true(r.last_done <= fit->dense_bytes + fit->expert_bytes);
    assert_true(r.last_done >= fit->dense_bytes + fit->expert_bytes / 2);
    int before = r.calls;
    assert_int_equal(vt_engine_reset(e), VT_OK);
    vt_engine_close(e);
    assert_int_equal(r.calls, before);
}

/* The bytes of the tensors a CPU model reads in place, each rounded out to
 * whole pages (prefault.h): an upper bound of what is read (merged ranges
 * share pages), and the tensors' own bytes a lower one. */
static void in_place_bytes(const vt_engine *e, int experts, uint64_t *lo, uint64_t *hi)
{
    const vt_gguf *g = vt_engine_gguf(e);
    const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    *lo = *hi = 0;
    for (int64_t i = 0; i < vt_gguf_n_tensors(g); i++) {
        const vt_gguf_tensor *t = vt_gguf_tensor_at(g, i);
        if (!experts && strstr(t->name, "_exps")) continue;
        *lo += t->nbytes;
        *hi += (t->nbytes + 2 * page - 1) / page * page;
    }
}

/* Drop the fixture's pages from the page cache (where no other process maps
 * them: then the call changes nothing, and the resident check below says
 * nothing about the read it is meant to show). */
static void evict_fixture(void)
{
    const char *fx = vt_test_fixtures();
    char *path = vt_test_path(fx, "qwen35moe-tiny/gguf/qwen35moe-tiny-bf16.gguf");
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    free(path);
}

/* Pages of the in-place tensors of e's mapping that are not in memory
 * (mincore), of *n_pages. */
static uint64_t pages_absent(const vt_engine *e, int experts, uint64_t *n_pages)
{
    const vt_gguf *g = vt_engine_gguf(e);
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uint64_t absent = 0;
    *n_pages = 0;
    for (int64_t i = 0; i < vt_gguf_n_tensors(g); i++) {
        const vt_gguf_tensor *t = vt_gguf_tensor_at(g, i);
        if (!t->nbytes || (!experts && strstr(t->name, "_exps"))) continue;
        assert_non_null(t->data);
        uintptr_t lo = (uintptr_t)t->data & ~(page - 1), hi = (uintptr_t)t->data + t->nbytes;
        size_t np = (size_t)((hi - lo + page - 1) / page);
        unsigned char *vec = malloc(np);
        assert_non_null(vec);
        assert_int_equal(mincore((void *)lo, hi - lo, vec), 0);
        for (size_t k = 0; k < np; k++) absent += !(vec[k] & 1);
        *n_pages += np;
        free(vec);
    }
    return absent;
}

static void test_in_place_read_at_open(void **state)
{
    (void)state;
    for (int streamed = 0; streamed < 2; streamed++) {
        rec r = {.monotone = 1, .within = 1, .phase = "read"};
        if (vt_test_fixtures()) evict_fixture();
        vt_engine *e = open_with("cpu", vt_test_plugin_dir(), &r, 0,
                                 streamed ? "cpu.experts=streamed" : NULL);
        if (!e) return;
        uint64_t lo, hi, bytes;
        double sec;
        const char *how;
        in_place_bytes(e, !streamed, &lo, &hi);
        vt_engine_weights(e, &bytes, &sec, &how);
        printf("[progress] cpu, experts %s: %d calls, %llu of %llu bytes read (tensors %llu..%llu) "
               "in %.4f s: %s\n", streamed ? "streamed" : "resident", r.calls,
               (unsigned long long)r.last_done, (unsigned long long)r.last_total,
               (unsigned long long)lo, (unsigned long long)hi, sec, how);
        assert_true(r.calls >= 1);
        assert_true(r.monotone);
        assert_true(r.within);
        assert_int_equal(r.last_done, r.last_total);
        assert_true(r.last_done >= lo && r.last_done <= hi);
        assert_int_equal(bytes, r.last_done);
        assert_string_equal(how, "read from the file in place");
        /* every page of every tensor the model reads in place is in memory */
        uint64_t n_pages, absent = pages_absent(e, !streamed, &n_pages);
        printf("[progress] after the open: %llu of %llu pages of the in-place tensors absent\n",
               (unsigned long long)absent, (unsigned long long)n_pages);
        assert_int_equal(absent, 0);
        int before = r.calls;
        int32_t tok[3] = {1, 2, 3};
        float *lg = malloc(4096 * sizeof *lg * 3);
        assert_int_equal(vt_engine_eval(e, tok, 3, lg, 0), VT_OK);
        free(lg);
        vt_engine_close(e);
        assert_int_equal(r.calls, before);
    }
    /* no_prefault: nothing read at open, nothing reported (the pages absent
     * after eviction are printed: where none are, the check above showed
     * nothing, as when another process maps the fixture) */
    rec r = {.monotone = 1, .within = 1, .phase = "read"};
    evict_fixture();
    vt_engine *e = open_with("cpu", vt_test_plugin_dir(), &r, 1, NULL);
    if (!e) return;
    uint64_t n_pages, absent = pages_absent(e, 1, &n_pages);
    printf("[progress] --no-prefault, after the open: %llu of %llu pages absent%s\n",
           (unsigned long long)absent, (unsigned long long)n_pages,
           absent ? "" : " (the page cache kept them: the resident check proved nothing here)");
    uint64_t bytes;
    const char *how;
    vt_engine_weights(e, &bytes, NULL, &how);
    assert_int_equal(r.calls, 0);
    assert_int_equal(bytes, 0);
    assert_string_equal(how, "read in place at first use (--no-prefault)");
    vt_engine_close(e);
}

static void test_profile(void **state)
{
    (void)state;
    const char *fx = vt_test_fixtures();
    if (!fx) return;
    char *path = vt_test_path(fx, "qwen35moe-tiny/gguf/qwen35moe-tiny-bf16.gguf");
    static vt_config cfg;
    vt_config_defaults(&cfg);
    vt_engine *e[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        vt_engine_params p = {.model_path = path, .plugin_dir = vt_test_plugin_dir(),
                              .device = "cpu", .n_threads = 2, .kernels = "scalar", .n_ctx = 64,
                              .n_batch = 16, .config = &cfg, .profile = i};
        if (vt_engine_open(&p, &e[i]) != VT_OK) fail_msg("open: %s", vt_last_error());
    }
    assert_int_equal(vt_engine_profile_start(e[0]), VT_ERR_INVALID_ARG);
    vt_op_profile_row rows[64];
    assert_int_equal(vt_engine_profile_stop(e[0], rows, 64), 0);
    int32_t tok[5] = {11, 22, 33, 44, 55};
    const size_t V = 4096;
    float *a = malloc(sizeof(float) * 5 * V), *b = malloc(sizeof(float) * 5 * V);
    assert_int_equal(vt_engine_eval(e[0], tok, 5, a, 1), VT_OK);
    /* an eval before start is not recorded */
    assert_int_equal(vt_engine_eval(e[1], tok, 5, b, 1), VT_OK);
    assert_int_equal(vt_engine_reset(e[1]), VT_OK);
    assert_int_equal(vt_engine_profile_start(e[1]), VT_OK);
    assert_int_equal(vt_engine_eval(e[1], tok, 5, b, 1), VT_OK);
    int n = vt_engine_profile_stop(e[1], rows, 64);
    assert_memory_equal(a, b, sizeof(float) * 5 * V);
    assert_true(n >= 10 && n <= 64);
    uint64_t mm = 0;
    for (int i = 0; i < n; i++) {
        if (i) assert_true(rows[i].seconds <= rows[i - 1].seconds);
        if (!strcmp(rows[i].name, "mat_mul BF16 (dense)")) mm = rows[i].calls;
    }
    /* one 5-token chunk: the fixture's dense BF16 matmuls, once each (the LM
     * head for the 5 rows of all_logits: one call) */
    printf("[profile] %d op rows, dense BF16 mat_mul calls %llu\n", n, (unsigned long long)mm);
    assert_true(mm > 0);
    /* after stop nothing more is recorded */
    assert_int_equal(vt_engine_eval(e[1], tok, 1, b, 0), VT_OK);
    vt_op_profile_row again[64];
    assert_int_equal(vt_engine_profile_stop(e[1], again, 64), n);
    for (int i = 0; i < n; i++) assert_int_equal(again[i].calls, rows[i].calls);
    free(a);
    free(b);
    vt_engine_close(e[0]);
    vt_engine_close(e[1]);
    free(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format),
        cmocka_unit_test(test_discrete_upload),
        cmocka_unit_test(test_in_place_read_at_open),
        cmocka_unit_test(test_profile),
    };
    return vt_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
