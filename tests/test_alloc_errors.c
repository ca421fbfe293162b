/*
 * test_alloc_errors.c - every allocation that can fail names what it was for
 * and how many bytes (DESIGN.md: "cudaMalloc of 1.19 GiB for
 * blk.16.ffn_up_exps failed: out of memory"):
 *   - the core helpers (error.h: vt_malloc_named and friends): SIZE_MAX bytes,
 *     an n * size that overflows, and a real failure of 1277952000 bytes under
 *     a lowered RLIMIT_AS, whose message is checked word for word;
 *   - backend-cpu's alloc(): SIZE_MAX/2 bytes, a size past the address space,
 *     1 PiB and 1277952000 bytes under a lowered RLIMIT_AS: VT_ERR_OUT_OF_MEMORY
 *     and a message with the name and the byte count;
 *   - the qwen35 model plugin's load() and seq_new() on the demo model, through
 *     a backend table whose alloc() fails at call N (for every N the load and
 *     one sequence make): the error names that call's `what` (tensor name,
 *     "qwen35 activation scratch", "KV cache K blk.3") and its byte count, and
 *     every backend allocation made before the failure has been freed (the
 *     ASan build checks host memory as well).
 * The expected messages are written out here by hand, never taken from the
 * code under test.
 */
#include "test_util.h"

#include <stdint.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "error.h"
#include "registry.h"
#include "vt/backend.h"
#include "vt/gguf.h"
#include "vt/model.h"

/* ASan must hand impossible requests back as NULL, as malloc does, instead of
 * aborting the test. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

#define SIZE_1_19_GIB ((size_t)1277952000) /* 1.19 GiB, the DESIGN.md example */

static vt_registry *g_reg;
static const vt_backend_api *g_bapi;
static const vt_model_api *g_mapi;

static void open_plugins(void)
{
    if (g_reg) return;
    const char *dirs[] = {vt_test_plugin_dir(), NULL};
    assert_int_equal(vt_registry_open(dirs, &g_reg), VT_OK);
    const vt_plugin_entry *b = vt_registry_find(g_reg, VT_PLUGIN_BACKEND, "cpu");
    const vt_plugin_entry *m = vt_registry_find(g_reg, VT_PLUGIN_MODEL, "qwen35");
    if (!b || !m) fail_msg("plugins 'cpu' and 'qwen35' are needed in %s", vt_test_plugin_dir());
    g_bapi = b->desc->table;
    g_mapi = m->desc->table;
}

static void expect_contains(const char *msg, const char *part)
{
    if (!strstr(msg, part)) fail_msg("message '%s' lacks '%s'", msg, part);
}

/* Run fn in a child process whose address space is limited to what it uses
 * now plus 512 MiB, so that a request of a GiB or more really fails; the
 * child's status and message come back through a pipe. */
typedef vt_status (*limited_fn)(void *arg);

static vt_status run_limited(limited_fn fn, void *arg, char *msg, size_t cap)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        unsigned long vm_pages = 0;
        FILE *f = fopen("/proc/self/statm", "r");
        if (!f || fscanf(f, "%lu", &vm_pages) != 1) _exit(2);
        fclose(f);
        struct rlimit rl;
        getrlimit(RLIMIT_AS, &rl);
        rlim_t want = (rlim_t)vm_pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)512 << 20);
        if (rl.rlim_max != RLIM_INFINITY && want > rl.rlim_max) want = rl.rlim_max;
        rl.rlim_cur = want;
        if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(3);
        vt_clear_error();
        int32_t st = (int32_t)fn(arg);
        const char *e = vt_last_error();
        uint32_t n = (uint32_t)strlen(e);
        if (write(fds[1], &st, sizeof st) != sizeof st || write(fds[1], &n, sizeof n) != sizeof n ||
            write(fds[1], e, n) != (ssize_t)n)
            _exit(4);
        _exit(0);
    }
    close(fds[1]);
    int32_t st = -1;
    uint32_t n = 0;
    assert_int_equal(read(fds[0], &st, sizeof st), sizeof st);
    assert_int_equal(read(fds[0], &n, sizeof n), sizeof n);
    assert_true(n < cap);
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fds[0], msg + got, n - got);
        assert_true(r > 0);
        got += (size_t)r;
    }
    msg[n] = '\0';
    close(fds[0]);
    int ws = 0;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    return (vt_status)st;
}

/* ---- the core helpers ---- */

static void test_core_helper_size_max(void **state)
{
    (void)state;
    vt_clear_error();
    assert_null(vt_malloc_named(SIZE_MAX, "tokenizer merges table"));
    expect_contains(vt_last_error(), "out of memory: tokenizer merges table (");
    expect_contains(vt_last_error(), "18446744073709551615 bytes)");

    vt_clear_error();
    void *p = malloc(16);
    assert_non_null(p);
    assert_null(vt_realloc_named(p, SIZE_MAX, "KV cache blk.3"));
    expect_contains(vt_last_error(), "out of memory: KV cache blk.3 (");
    expect_contains(vt_last_error(), "18446744073709551615 bytes)");
    free(p); /* a failed realloc leaves the block alone */

    vt_clear_error();
    assert_null(vt_calloc_named(SIZE_MAX / 2, 4, "vocab strings"));
    expect_contains(vt_last_error(), "out of memory: vocab strings (");
    expect_contains(vt_last_error(), "9223372036854775807 elements of 4 bytes");

    vt_clear_error();
    assert_null(vt_reallocarray_named(NULL, 3, SIZE_MAX / 2, "tensor table"));
    expect_contains(vt_last_error(), "out of memory: tensor table (3 elements of "
                                     "9223372036854775807 bytes");

    vt_clear_error();
    vt_set_error_oom(12, "key '%s'", "general.name");
    assert_string_equal(vt_last_error(), "out of memory: key 'general.name' (12 bytes)");
    vt_set_error_oom(1536, "read buffer");
    assert_string_equal(vt_last_error(), "out of memory: read buffer (1.50 KiB, 1536 bytes)");

    /* the helpers allocate like malloc when they can */
    char *s = vt_strdup_named("blk.0", "tensor name");
    assert_non_null(s);
    assert_string_equal(s, "blk.0");
    free(s);
    uint32_t *z = vt_calloc_named(8, sizeof *z, "zeros");
    assert_non_null(z);
    for (int i = 0; i < 8; i++) assert_int_equal(z[i], 0);
    free(z);
    void *one = vt_malloc_named(0, "empty");
    assert_non_null(one);
    free(one);
}

static vt_status core_alloc_1_19_gib(void *arg)
{
    (void)arg;
    void *p = vt_malloc_named(SIZE_1_19_GIB, "blk.16.ffn_up_exps");
    if (p) {
        free(p);
        return VT_OK;
    }
    return VT_ERR_OUT_OF_MEMORY;
}

static void test_core_helper_real_failure(void **state)
{
    (void)state;
    char msg[1024];
    assert_int_equal(run_limited(core_alloc_1_19_gib, NULL, msg, sizeof msg), VT_ERR_OUT_OF_MEMORY);
    assert_string_equal(msg, "out of memory: blk.16.ffn_up_exps (1.19 GiB, 1277952000 bytes)");
}

/* ---- backend-cpu ---- */

static vt_backend_ctx *cpu_ctx(void)
{
    open_plugins();
    vt_backend_params bp = {.struct_size = sizeof bp, .device = 0, .n_threads = 1,
                            .kernels = "scalar", .host = vt_host_table()};
    vt_backend_ctx *ctx = NULL;
    if (g_bapi->init(&bp, &ctx) != VT_OK) fail_msg("cpu init: %s", vt_last_error());
    return ctx;
}

static void test_cpu_alloc_impossible(void **state)
{
    (void)state;
    vt_backend_ctx *ctx = cpu_ctx();
    void *p = (void *)1;
    vt_clear_error();
    assert_int_equal(g_bapi->alloc(ctx, SIZE_MAX / 2, "blk.16.ffn_up_exps", &p),
                     VT_ERR_OUT_OF_MEMORY);
    assert_null(p);
    expect_contains(vt_last_error(), "backend cpu: allocation of ");
    expect_contains(vt_last_error(), "(9223372036854775807 bytes) for blk.16.ffn_up_exps failed: "
                                     "out of memory");

    p = (void *)1;
    vt_clear_error();
    assert_int_equal(g_bapi->alloc(ctx, SIZE_MAX - 8, "KV cache K blk.3", &p),
                     VT_ERR_OUT_OF_MEMORY);
    assert_null(p);
    expect_contains(vt_last_error(), "(18446744073709551607 bytes) for KV cache K blk.3");

    /* a small one still works and is freed */
    p = NULL;
    assert_int_equal(g_bapi->alloc(ctx, 100, "small", &p), VT_OK);
    assert_non_null(p);
    g_bapi->free(ctx, p);
    g_bapi->shutdown(ctx);
}

typedef struct cpu_req {
    vt_backend_ctx *ctx;
    size_t bytes;
    const char *what;
} cpu_req;

static vt_status cpu_alloc_limited(void *arg)
{
    cpu_req *r = arg;
    void *p = NULL;
    vt_status st = g_bapi->alloc(r->ctx, r->bytes, r->what, &p);
    if (st == VT_OK) g_bapi->free(r->ctx, p);
    if (st == VT_OK || p) return VT_ERR_INTERNAL; /* the limit should have made it fail */
    return st;
}

static void test_cpu_alloc_rlimit(void **state)
{
    (void)state;
    vt_backend_ctx *ctx = cpu_ctx();
    char msg[1024];
    cpu_req big = {ctx, (size_t)1 << 50, "blk.0.ffn_gate_exps"};
    assert_int_equal(run_limited(cpu_alloc_limited, &big, msg, sizeof msg), VT_ERR_OUT_OF_MEMORY);
    assert_string_equal(msg, "backend cpu: allocation of 1.00 PiB (1125899906842624 bytes) for "
                             "blk.0.ffn_gate_exps failed: out of memory");
    cpu_req gib = {ctx, SIZE_1_19_GIB, "blk.16.ffn_up_exps"};
    assert_int_equal(run_limited(cpu_alloc_limited, &gib, msg, sizeof msg), VT_ERR_OUT_OF_MEMORY);
    assert_string_equal(msg, "backend cpu: allocation of 1.19 GiB (1277952000 bytes) for "
                             "blk.16.ffn_up_exps failed: out of memory");
    g_bapi->shutdown(ctx);
}

/* ---- qwen35 load / seq_new with an alloc that fails at call N ---- */

enum { MODE_SILENT, MODE_NAMED };

static struct {
    long calls, fail_at, live;
    int mode;
    char what[256];
    size_t bytes;
} g_inj;

static vt_status failing_alloc(vt_backend_ctx *ctx, size_t bytes, const char *what, void **out)
{
    g_inj.calls++;
    if (g_inj.calls == g_inj.fail_at) {
        snprintf(g_inj.what, sizeof g_inj.what, "%s", what ? what : "(null)");
        g_inj.bytes = bytes;
        *out = NULL;
        if (g_inj.mode == MODE_SILENT) /* a backend that does not say what or how much */
            vt_set_error("injected failure");
        else /* one that does, as vt/backend.h asks */
            vt_set_error("test backend: allocation of %zu bytes for %s failed: out of memory",
                         bytes, what);
        return VT_ERR_OUT_OF_MEMORY;
    }
    vt_status st = g_bapi->alloc(ctx, bytes, what, out);
    if (st == VT_OK) g_inj.live++;
    return st;
}

static void counting_free(vt_backend_ctx *ctx, void *p)
{
    if (p) g_inj.live--;
    g_bapi->free(ctx, p);
}

typedef struct rig {
    vt_gguf *g;
    vt_backend_api api;
    vt_capability *caps;
    vt_backend be;
} rig;

/* copy: hide host-addressable memory so that every weight is allocated and copied */
static void rig_open(rig *r, int copy)
{
    open_plugins();
    memset(r, 0, sizeof *r);
    const char *bin = getenv("VT_TEST_BINARY_DIR");
    assert_non_null(bin);
    char path[4096];
    snprintf(path, sizeof path, "%s/demo/vt-random-qwen35moe.gguf", bin);
    if (vt_gguf_open(path, 0, &r->g) != VT_OK) fail_msg("open %s: %s", path, vt_last_error());
    r->api = *g_bapi;
    r->api.alloc = failing_alloc;
    r->api.free = counting_free;
    r->caps = malloc(sizeof *r->caps * g_bapi->n_caps);
    assert_non_null(r->caps);
    memcpy(r->caps, g_bapi->caps, sizeof *r->caps * g_bapi->n_caps);
    for (uint32_t i = 0; copy && i < g_bapi->n_caps; i++)
        if (r->caps[i].id == VT_CAP_HOST_ADDRESSABLE_DEVICE_MEMORY) {
            r->caps[i].state = VT_CAP_ABSENT;
            r->caps[i].reason = "hidden by the test (copy path)";
        }
    r->api.caps = r->caps;
    vt_backend_params bp = {.struct_size = sizeof bp, .device = 0, .n_threads = 1,
                            .kernels = "scalar", .host = vt_host_table()};
    if (r->api.init(&bp, &r->be.ctx) != VT_OK) fail_msg("cpu init: %s", vt_last_error());
    r->be.api = &r->api;
    r->be.name = "cpu";
}

static void rig_close(rig *r)
{
    r->api.shutdown(r->be.ctx);
    vt_gguf_close(r->g);
    free(r->caps);
}

/* Load and make one sequence with alloc failing at call fail_at (0: never).
 * Returns the status of the step that failed (VT_OK when none did). */
static vt_status load_and_seq(rig *r, long fail_at, int mode)
{
    memset(&g_inj, 0, sizeof g_inj);
    g_inj.fail_at = fail_at;
    g_inj.mode = mode;
    vt_model_params mp = {.struct_size = sizeof mp, .n_ctx = 64, .n_batch = 16};
    vt_model *m = NULL;
    vt_clear_error();
    vt_status st = g_mapi->load(vt_host_table(), r->g, &r->be, &mp, &m);
    if (st != VT_OK) {
        assert_null(m);
        return st;
    }
    assert_non_null(m);
    vt_model_seq *s = NULL;
    st = g_mapi->seq_new(m, &s);
    if (st != VT_OK) assert_null(s);
    g_mapi->seq_free(m, s);
    g_mapi->free(m);
    return st;
}

/* Every N from 1 to the number of allocations a load plus a sequence make. */
static void sweep(int copy)
{
    rig r;
    rig_open(&r, copy);
    assert_int_equal(load_and_seq(&r, 0, MODE_SILENT), VT_OK);
    const long total = g_inj.calls;
    assert_int_equal(g_inj.live, 0);
    /* the copy path allocates every weight, the zero-copy one scratch and state only */
    assert_true(total >= (copy ? vt_gguf_n_tensors(r.g) : 2));
    int saw_tensor = 0, saw_scratch = 0, saw_kv = 0;
    for (long n = 1; n <= total; n++) {
        for (int mode = MODE_SILENT; mode <= MODE_NAMED; mode++) {
            vt_status st = load_and_seq(&r, n, mode);
            if (st != VT_ERR_OUT_OF_MEMORY)
                fail_msg("alloc failing at call %ld of %ld: status %s (%s)", n, total,
                         vt_status_name(st), vt_last_error());
            assert_int_equal(g_inj.calls, n); /* nothing allocated after the failure */
            if (g_inj.live != 0)
                fail_msg("alloc failing at call %ld (%s): %ld backend allocations leaked", n,
                         g_inj.what, g_inj.live);
            const char *msg = vt_last_error();
            char bytes[64];
            snprintf(bytes, sizeof bytes, "%zu bytes", g_inj.bytes);
            expect_contains(msg, g_inj.what);
            expect_contains(msg, bytes);
            if (mode == MODE_SILENT) {
                /* the model adds name and size, and keeps the backend's reason */
                expect_contains(msg, "qwen35: allocation of ");
                expect_contains(msg, "failed: injected failure");
            } else {
                /* a message that names them already is left as it is */
                char want[512];
                snprintf(want, sizeof want,
                         "test backend: allocation of %zu bytes for %s failed: out of memory",
                         g_inj.bytes, g_inj.what);
                assert_string_equal(msg, want);
            }
        }
        saw_tensor |= !strncmp(g_inj.what, "blk.", 4) || strstr(g_inj.what, "weight") != NULL;
        saw_scratch |= strstr(g_inj.what, "scratch") != NULL;
        saw_kv |= strstr(g_inj.what, "KV cache") != NULL;
    }
    assert_true(saw_scratch);
    assert_true(saw_kv);
    if (copy) assert_true(saw_tensor);
    rig_close(&r);
}

static void test_qwen35_load_alloc_fails_copy_path(void **state)
{
    (void)state;
    sweep(1);
}

static void test_qwen35_load_alloc_fails_zero_copy(void **state)
{
    (void)state;
    sweep(0);
}

static int teardown_all(void **state)
{
    (void)state;
    vt_registry_close(g_reg);
    g_reg = NULL;
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_core_helper_size_max),
        cmocka_unit_test(test_core_helper_real_failure),
        cmocka_unit_test(test_cpu_alloc_impossible),
        cmocka_unit_test(test_cpu_alloc_rlimit),
        cmocka_unit_test(test_qwen35_load_alloc_fails_copy_path),
        cmocka_unit_test(test_qwen35_load_alloc_fails_zero_copy),
    };
    return vt_test_exit(cmocka_run_group_tests(tests, NULL, teardown_all));
}
