/*
 * test_gpu_backends.c - backend-cuda / backend-rocm (one binary per plugin:
 * VT_GPU_TEST_NAME is "cuda" or "rocm"), loaded through the plugin registry
 * as vt loads them:
 *  - the registry accepts the plugin; its capability declarations read back
 *    as documented (memory_probe, pinned_host_alloc, device_name, every op and
 *    mat_mul/get_rows for F32, F16, BF16, Q8_0 PRESENT with the function set;
 *    every other weight type ABSENT with its reason and a NULL function);
 *    the ops themselves are checked against backend-cpu in test_cuda_ops.c;
 *  - without a device (no /dev/nvidiactl, no /dev/kfd): device_count() is 0,
 *    init and device_name refuse device 0 by index and count, and
 *    `vt run --device <name>` fails saying the backend reports zero devices;
 *  - with a device: `vt run --device <name>` on the demo model (bf16)
 *    generates; init, the live memory probe (0 < free <= total,
 *    total > 1 GiB, free drops by what we allocate), a 256 MiB pattern
 *    round-trip h2d -> d2d -> d2h through pageable and pinned host memory,
 *    memset_zero with unaligned ends, and a 1 PiB allocation refused with a
 *    message naming the allocation and its bytes;
 *  - the ahead copies (copy.h2d_ahead, ABI 1.5): a batch of 100 copies from
 *    pinned and pageable memory, odd sizes and unaligned ends, lands
 *    byte-exact after the join; the fork orders them after an op issued
 *    before it (a memset_zero of the same bytes).
 * A plugin that was not built (toolchain absent at configure time) skips the
 * whole binary loudly (exit 77), except when CMake saw CI=true and the
 * toolchain: then it is a failure.
 */
#include "test_util.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "capabilities.h"
#include "error.h"
#include "registry.h"

#ifndef VT_GPU_TEST_NAME
#error "VT_GPU_TEST_NAME (cuda|rocm) must be defined by tests/gpu_backends.cmake"
#endif

#define MIB (1024ull * 1024ull)
#define GIB (1024ull * MIB)

static vt_registry *reg;
static const vt_plugin_entry *entry;
static const vt_backend_api *api;

/* ---------------------------------------------------------------- helpers */

static int plugin_built(void)
{
    if (VT_GPU_TEST_BUILT) return 1;
    if (VT_GPU_TEST_REQUIRED)
        fail_msg("backend-%s was not built although CMake ran with CI=true and found its "
                 "toolchain: %s", VT_GPU_TEST_NAME, VT_GPU_TEST_WHY);
    fprintf(stderr,
            "\n**********************************************************************\n"
            "*** SKIPPING: backend-%s was not built: %s\n"
            "**********************************************************************\n\n",
            VT_GPU_TEST_NAME, VT_GPU_TEST_WHY);
    vt_test_fixtures_skipped = 1;
    skip();
    return 0;
}

/* Whether the machine has the vendor's device nodes: an expectation that does
 * not come from the runtime under test. */
static int device_nodes_present(void)
{
    if (!strcmp(VT_GPU_TEST_NAME, "cuda"))
        return access("/dev/nvidiactl", F_OK) == 0 || access("/proc/driver/nvidia/version", F_OK) == 0;
    return access("/dev/kfd", F_OK) == 0;
}

static int teardown(void **s)
{
    (void)s;
    if (reg) vt_registry_close(reg);
    reg = NULL;
    return 0;
}

/* Load backend-<name>.so through a registry; fails with the refusal if any. */
static void load_plugin(void)
{
    if (api) return;
    char path[4096];
    snprintf(path, sizeof path, "%s/backend-%s.so", vt_test_plugin_dir(), VT_GPU_TEST_NAME);
    if (access(path, F_OK) != 0)
        fail_msg("backend-%s was built but %s does not exist", VT_GPU_TEST_NAME, path);
    unsetenv("VT_PLUGIN_PATH");
    assert_int_equal(vt_registry_open(NULL, &reg), VT_OK); /* the build's plugins load too */
    vt_status st = vt_registry_load_file(reg, path);
    char real[4096];
    if (!realpath(path, real)) snprintf(real, sizeof real, "%s", path);
    for (size_t i = 0; i < vt_registry_count(reg); i++) {
        const vt_plugin_entry *e = vt_registry_at(reg, i);
        if (!strcmp(e->path, real)) entry = e;
    }
    assert_non_null(entry);
    if (st != VT_OK || entry->error)
        fail_msg("registry refused %s: %s", path, entry->error ? entry->error : vt_last_error());
    assert_non_null(entry->desc);
    assert_int_equal(entry->desc->kind, VT_PLUGIN_BACKEND);
    assert_string_equal(entry->desc->name, VT_GPU_TEST_NAME);
    assert_int_equal(entry->desc->abi_major, VT_ABI_MAJOR);
    assert_int_equal(entry->desc->abi_minor, VT_ABI_MINOR);
    assert_ptr_equal(vt_registry_find(reg, VT_PLUGIN_BACKEND, VT_GPU_TEST_NAME), entry);
    api = entry->desc->table;
    assert_int_equal(api->struct_size, sizeof(vt_backend_api));
}

static void expect_state(uint32_t id, vt_cap_state want, const char *reason_part)
{
    const char *why = NULL;
    char name[64];
    vt_cap_state got = vt_caps_state(entry->desc, id, &why);
    if (got != want)
        fail_msg("backend-%s: capability %s is %s, expected %s (reason: %s)", VT_GPU_TEST_NAME,
                 vt_cap_name(id, name, sizeof name), got == VT_CAP_PRESENT ? "PRESENT" : "ABSENT",
                 want == VT_CAP_PRESENT ? "PRESENT" : "ABSENT", why ? why : "(null)");
    if (reason_part && (!why || !strstr(why, reason_part)))
        fail_msg("backend-%s: capability %s reason '%s' lacks '%s'", VT_GPU_TEST_NAME,
                 vt_cap_name(id, name, sizeof name), why ? why : "(null)", reason_part);
}

/* Run the vt binary (argv without argv[0], NULL-terminated); stderr into a
 * malloc-ed string. Returns the exit status. */
static int run_vt(const char *const *args, char **err)
{
    char e_path[] = "/tmp/vt-gpu-err-XXXXXX";
    int efd = mkstemp(e_path);
    assert_true(efd >= 0);
    const char *argv[32];
    int n = 0;
    argv[n++] = vt_test_vt_bin();
    for (int i = 0; args[i] && n < 31; i++) argv[n++] = args[i];
    argv[n] = NULL;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) dup2(devnull, 1);
        dup2(efd, 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    close(efd);
    *err = vt_test_read_file(e_path, NULL);
    unlink(e_path);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The build's demo model (top-level CMakeLists.txt); written with `vt mkmodel`
 * into /tmp when the build has not made it. */
static const char *demo_model(void)
{
    static char path[4096];
    const char *bin = getenv("VT_TEST_BINARY_DIR");
    if (bin) {
        snprintf(path, sizeof path, "%s/demo/vt-random-qwen35moe.gguf", bin);
        if (access(path, R_OK) == 0) return path;
    }
    snprintf(path, sizeof path, "/tmp/vt-gpu-demo-%d.gguf", (int)getpid());
    const char *args[] = {"mkmodel", "-o", path, "--type", "bf16", "--seed", "1", NULL};
    char *err;
    if (run_vt(args, &err) != 0) fail_msg("vt mkmodel -o %s failed: %s", path, err);
    free(err);
    return path;
}

/* Deterministic bytes, different for every offset and seed. */
static void fill_pattern(unsigned char *p, size_t n, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 1u;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        p[i] = (unsigned char)(x >> 24);
    }
}

/* ------------------------------------------------------------------ tests */

static void test_registry_accepts(void **s)
{
    (void)s;
    if (!plugin_built()) return;
    load_plugin();
    const char *no_type = "no kernels for integer, F64, Q8_1 or Q8_K weights";

    expect_state(VT_CAP_MEMORY_PROBE, VT_CAP_PRESENT, NULL);
    expect_state(VT_CAP_DEVICE_NAME, VT_CAP_PRESENT, NULL);
    expect_state(VT_CAP_PINNED_HOST_ALLOC, VT_CAP_PRESENT, NULL);
    expect_state(VT_CAP_HOST_ADDRESSABLE_DEVICE_MEMORY, VT_CAP_ABSENT, "not host-addressable");
    expect_state(VT_CAP_ASYNC_QUEUE, VT_CAP_ABSENT, "synchronous");
    expect_state(VT_CAP_PEER_COPY, VT_CAP_ABSENT, NULL);
    assert_non_null(api->memory_probe);
    assert_non_null(api->device_name);
    assert_non_null(api->host_alloc_pinned);
    assert_non_null(api->host_free_pinned);
    assert_null(api->copy_peer);

    /* every op the ABI knows: PRESENT, function set */
    for (uint32_t id = VT_CAP_OP_RMS_NORM; id < VT_CAP_FIXED_COUNT; id++) {
        uint16_t minor;
        if (!vt_cap_known(id, &minor)) continue;
        expect_state(id, VT_CAP_PRESENT, NULL);
    }
    assert_non_null(api->rms_norm);
    assert_non_null(api->l2_norm);
    assert_non_null(api->rope_neox);
    assert_non_null(api->attention);
    assert_non_null(api->ssm_conv);
    assert_non_null(api->gated_delta_net);
    assert_non_null(api->unary);
    assert_non_null(api->binary);
    assert_non_null(api->scale);
    assert_non_null(api->mul_rows);
    assert_non_null(api->copy_2d);
    assert_non_null(api->gather_rows);
    assert_non_null(api->scatter_add);
    assert_non_null(api->softmax_topk);
    /* weight types: every float and block type vt/types.h names PRESENT (the
     * low-bit ones and ids 64-66 included, the latter through
     * mat_mul_ext/get_rows_ext); the integer, F64 and activation-format ids
     * (Q8_1, Q8_K) and unnamed ids ABSENT, NULL */
    int n_types = 0;
    for (uint32_t t = 0; t < VT_TYPE_COUNT; t++) {
        int named = vt_cap_known(VT_CAP_MAT_MUL(t), NULL);
        int have = named && t != VT_TYPE_Q8_1 && t != VT_TYPE_Q8_K && t != VT_TYPE_I8 &&
                   t != VT_TYPE_I16 && t != VT_TYPE_I32 && t != VT_TYPE_I64 && t != VT_TYPE_F64;
        if (have) {
            assert_non_null(vt_backend_mat_mul_fn(api, t));
            assert_non_null(vt_backend_get_rows_fn(api, t));
        } else {
            assert_null(vt_backend_mat_mul_fn(api, t));
            assert_null(vt_backend_get_rows_fn(api, t));
        }
        if (!named) continue;
        expect_state(VT_CAP_MAT_MUL(t), have ? VT_CAP_PRESENT : VT_CAP_ABSENT, have ? NULL : no_type);
        expect_state(VT_CAP_GET_ROWS(t), have ? VT_CAP_PRESENT : VT_CAP_ABSENT, have ? NULL : no_type);
        n_types++;
    }
    assert_true(n_types >= 38); /* every id vt/types.h names, 64-66 included */
}

static void test_device_count(void **s)
{
    (void)s;
    if (!plugin_built()) return;
    load_plugin();
    int n = api->device_count();
    int nodes = device_nodes_present();
    fprintf(stderr, "backend-%s: device_count() = %d (device nodes %s)\n", VT_GPU_TEST_NAME, n,
            nodes ? "present" : "absent");
    assert_true(n >= 0);
    if (nodes && n == 0)
        fail_msg("backend-%s: this machine has %s devices (device nodes exist) but device_count() "
                 "is 0", VT_GPU_TEST_NAME, VT_GPU_TEST_NAME);
    if (!nodes) assert_int_equal(n, 0);
    /* a second call answers the same (the runtime's error state is cleared) */
    assert_int_equal(api->device_count(), n);

    /* out of range: init and device_name name the index and the count */
    vt_backend_params bp = {.struct_size = sizeof bp, .device = n, .host = vt_host_table()};
    vt_backend_ctx *ctx = (vt_backend_ctx *)1;
    vt_clear_error();
    assert_int_equal(api->init(&bp, &ctx), VT_ERR_RANGE);
    assert_null(ctx);
    char want[128];
    snprintf(want, sizeof want, "device %d requested, but backend %s has %d device(s)", n,
             VT_GPU_TEST_NAME, n);
    if (!strstr(vt_last_error(), want))
        fail_msg("init(device %d) message lacks '%s': %s", n, want, vt_last_error());
    char name[256];
    assert_int_equal(api->device_name(n, name, sizeof name), VT_ERR_RANGE);
    bp.device = -1;
    assert_int_equal(api->init(&bp, &ctx), VT_ERR_RANGE);
}

/* Without a device, `vt run --device <name>` is refused up front. With one,
 * the demo model (bf16 qwen35moe: every op and type it needs is PRESENT)
 * generates a token. */
static void test_vt_run_device(void **s)
{
    (void)s;
    if (!plugin_built()) return;
    load_plugin();
    int n = api->device_count();
    const char *model = demo_model();
    const char *args[] = {"run", "-m", model, "--device", VT_GPU_TEST_NAME, "-p", "hello", "-n", "1",
                          NULL};
    char *err;
    int rc = run_vt(args, &err);
    fprintf(stderr, "vt run --device %s: exit %d: %s", VT_GPU_TEST_NAME, rc, err);
    assert_true(rc < 128); /* refused or run, not crashed */
    if (n == 0) {
        assert_int_not_equal(rc, 0);
        char want[128];
        snprintf(want, sizeof want, "backend '%s'", VT_GPU_TEST_NAME);
        if (!strstr(err, want) || !strstr(err, "reports zero devices"))
            fail_msg("vt run --device %s without a device: message lacks \"%s ... reports zero "
                     "devices\": %s", VT_GPU_TEST_NAME, want, err);
    } else if (rc != 0) {
        fail_msg("vt run --device %s on a machine with %d device(s) failed (exit %d): %s",
                 VT_GPU_TEST_NAME, n, rc, err);
    }
    free(err);
    if (!strncmp(model, "/tmp/vt-gpu-demo-", 17)) unlink(model);
}

/* Everything below needs a device: skipped (in cmocka's report) without one,
 * the binary still passing on what it could check. */
static vt_backend_ctx *device_ctx(void)
{
    if (!plugin_built()) return NULL;
    load_plugin();
    if (api->device_count() == 0) {
        fprintf(stderr, "backend-%s: no device on this machine: device memory checks skipped\n",
                VT_GPU_TEST_NAME);
        skip();
        return NULL;
    }
    vt_backend_params bp = {.struct_size = sizeof bp, .device = 0, .host = vt_host_table()};
    vt_backend_ctx *ctx = NULL;
    if (api->init(&bp, &ctx) != VT_OK) fail_msg("init(device 0): %s", vt_last_error());
    assert_non_null(ctx);
    return ctx;
}

static void test_device_name_and_probe(void **s)
{
    (void)s;
    vt_backend_ctx *ctx = device_ctx();
    if (!ctx) return;
    char name[256] = "";
    assert_int_equal(api->device_name(0, name, sizeof name), VT_OK);
    fprintf(stderr, "backend-%s: device 0 is '%s'\n", VT_GPU_TEST_NAME, name);
    assert_true(strlen(name) > 0 && strcmp(name, "?"));

    uint64_t free0 = 0, total0 = 0;
    assert_int_equal(api->memory_probe(ctx, &free0, &total0), VT_OK);
    fprintf(stderr, "backend-%s: memory_probe: %.2f GiB free of %.2f GiB\n", VT_GPU_TEST_NAME,
            (double)free0 / GIB, (double)total0 / GIB);
    assert_true(free0 > 0);
    assert_true(free0 <= total0);
    assert_true(total0 > GIB);

    /* live: free drops by (about) what we hold */
    void *big = NULL;
    assert_int_equal(api->alloc(ctx, 512 * MIB, "test.probe", &big), VT_OK);
    assert_int_equal(api->memset_zero(ctx, big, 512 * MIB), VT_OK); /* touch it */
    uint64_t free1 = 0, total1 = 0;
    assert_int_equal(api->memory_probe(ctx, &free1, &total1), VT_OK);
    assert_true(total1 == total0);
    if (!(free1 + 400 * MIB <= free0))
        fail_msg("memory_probe is not live: free %llu bytes before a 512 MiB allocation, %llu after",
                 (unsigned long long)free0, (unsigned long long)free1);
    api->free(ctx, big);
    api->shutdown(ctx);
}

static void test_copy_round_trip(void **s)
{
    (void)s;
    vt_backend_ctx *ctx = device_ctx();
    if (!ctx) return;
    const size_t n = 256 * MIB;
    unsigned char *src = malloc(n), *back = malloc(n);
    assert_non_null(src);
    assert_non_null(back);
    fill_pattern(src, n, 7);
    memset(back, 0xAB, n);

    void *a = NULL, *b = NULL;
    assert_int_equal(api->alloc(ctx, n, "test.a", &a), VT_OK);
    assert_int_equal(api->alloc(ctx, n, "test.b", &b), VT_OK);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal((uintptr_t)a % 64, 0);
    assert_int_equal(api->copy_h2d(ctx, a, src, n), VT_OK);
    assert_int_equal(api->copy_d2d(ctx, b, a, n), VT_OK);
    assert_int_equal(api->copy_d2h(ctx, back, b, n), VT_OK);
    assert_int_equal(api->synchronize(ctx), VT_OK);
    if (memcmp(src, back, n)) {
        size_t i = 0;
        while (i < n && src[i] == back[i]) i++;
        fail_msg("h2d -> d2d -> d2h of %zu bytes differs first at byte %zu (%u vs %u)", n, i,
                 src[i], back[i]);
    }

    /* memset_zero with unaligned ends: [3, n - 5) of b is zero, the rest intact */
    unsigned char *bb = b;
    assert_int_equal(api->memset_zero(ctx, bb + 3, n - 8), VT_OK);
    assert_int_equal(api->copy_d2h(ctx, back, b, n), VT_OK);
    for (size_t i = 0; i < n; i++) {
        unsigned char want = (i >= 3 && i < n - 5) ? 0 : src[i];
        if (back[i] != want)
            fail_msg("after memset_zero(b + 3, n - 8): byte %zu is %u, expected %u", i, back[i], want);
    }
    /* a is untouched by memset of b */
    assert_int_equal(api->copy_d2h(ctx, back, a, n), VT_OK);
    assert_memory_equal(back, src, n);

    /* pinned host memory as the source and destination of copies */
    void *pin = NULL;
    const size_t pn = 16 * MIB;
    assert_int_equal(api->host_alloc_pinned(ctx, pn, "test.staging", &pin), VT_OK);
    assert_non_null(pin);
    fill_pattern(pin, pn, 11);
    assert_int_equal(api->copy_h2d(ctx, a, pin, pn), VT_OK);
    memset(back, 0, pn);
    assert_int_equal(api->copy_d2h(ctx, back, a, pn), VT_OK);
    assert_memory_equal(back, pin, pn);
    memset(pin, 0, pn);
    assert_int_equal(api->copy_d2h(ctx, pin, b, pn), VT_OK); /* b: zero from byte 3 on */
    for (size_t i = 0; i < pn; i++)
        if (((unsigned char *)pin)[i] != (i < 3 ? src[i] : 0)) fail_msg("pinned d2h: byte %zu", i);
    api->host_free_pinned(ctx, pin);

    assert_int_equal(api->copy_h2d(ctx, a, src, 0), VT_OK); /* zero bytes: nothing */
    assert_int_equal(api->copy_h2d(ctx, NULL, src, 16), VT_ERR_INVALID_ARG);

    api->free(ctx, a);
    api->free(ctx, b);
    free(src);
    free(back);
    api->shutdown(ctx);
}

/* Small copies both ways, every alignment class and size around the
 * backend's small-copy path (a D2H of <= 64 KiB bounces through a pinned
 * buffer on the context's stream) and queued H2D copies from pinned and
 * pageable sources, at offsets 0/1/3/16 of source and destination: the
 * bytes around the destination untouched, and two queued copies into one
 * place land in order. */
static void test_small_copies(void **s)
{
    (void)s;
    vt_backend_ctx *ctx = device_ctx();
    if (!ctx) return;
    if (!api->copy_h2d_async) {
        print_message("SKIP: %s has no copy_h2d_async\n", VT_GPU_TEST_NAME);
        api->shutdown(ctx);
        return;
    }
    const size_t cap = (1u << 20) + 64;
    void *pin = NULL, *pin2 = NULL, *d = NULL;
    unsigned char *page = malloc(cap), *back = malloc(cap + 64), *want = malloc(cap + 64);
    assert_non_null(page);
    assert_non_null(back);
    assert_non_null(want);
    assert_int_equal(api->host_alloc_pinned(ctx, cap, "test.small", &pin), VT_OK);
    assert_int_equal(api->host_alloc_pinned(ctx, cap, "test.small2", &pin2), VT_OK);
    assert_int_equal(api->alloc(ctx, cap + 64, "test.small.dst", &d), VT_OK);
    static const size_t sizes[] = {1, 15, 16, 17, 255, 4096, 6144, 65535, 65536, 65537, 1u << 20};
    static const size_t offs[] = {0, 1, 3, 16};
    for (int pinned = 0; pinned < 2; pinned++)
        for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
            for (size_t so = 0; so < 4; so++)
                for (size_t dof = 0; dof < 4; dof++) {
                    const size_t n = sizes[si], a = offs[so], b = offs[dof];
                    if (a + n > cap) continue;
                    unsigned char *src = pinned ? pin : page;
                    fill_pattern(want, cap + 64, (unsigned)(si * 16 + so * 4 + dof));
                    assert_int_equal(api->copy_h2d(ctx, d, want, cap + 64), VT_OK);
                    fill_pattern(src, cap, (unsigned)(si + 101));
                    assert_int_equal(api->copy_h2d_async(ctx, (unsigned char *)d + b, src + a, n),
                                     VT_OK);
                    memcpy(want + b, src + a, n);
                    /* the copied range alone first (<= 64 KiB: through the
                     * bounce, which must wait for the queued copy), then
                     * the whole buffer back (pageable, > 64 KiB) */
                    memset(back, 0xEE, n + 2);
                    assert_int_equal(api->copy_d2h(ctx, back + 1, (unsigned char *)d + b, n), VT_OK);
                    if (back[0] != 0xEE || back[n + 1] != 0xEE || memcmp(back + 1, want + b, n))
                        fail_msg("copy_d2h of %zu bytes from dst + %zu, right after a queued "
                                 "copy_h2d_async from a %s source, differs", n, b,
                                 pinned ? "pinned" : "pageable");
                    assert_int_equal(api->copy_d2h(ctx, back, d, cap + 64), VT_OK);
                    for (size_t i = 0; i < cap + 64; i++)
                        if (back[i] != want[i])
                            fail_msg("copy_h2d_async of %zu bytes (%s source + %zu, dst + %zu): "
                                     "byte %zu is %u, want %u", n, pinned ? "pinned" : "pageable",
                                     a, b, i, back[i], want[i]);
                }
    /* two queued copies into one place: the later one's bytes */
    memset(pin, 1, 6144);
    memset(pin2, 2, 6144);
    for (int r = 0; r < 100; r++) {
        assert_int_equal(api->copy_h2d_async(ctx, d, pin, 6144), VT_OK);
        assert_int_equal(api->copy_h2d_async(ctx, d, pin2, 6144), VT_OK);
    }
    assert_int_equal(api->copy_d2h(ctx, back, d, 6144), VT_OK);
    for (size_t i = 0; i < 6144; i++)
        if (back[i] != 2) fail_msg("queued copies out of order: byte %zu is %u", i, back[i]);
    api->free(ctx, d);
    api->host_free_pinned(ctx, pin);
    api->host_free_pinned(ctx, pin2);
    free(page);
    free(back);
    free(want);
    api->shutdown(ctx);
}

static void test_ahead_copies(void **s)
{
    (void)s;
    vt_backend_ctx *ctx = device_ctx();
    if (!ctx) return;
    if (!api->copy_h2d_ahead || !api->ahead_fork || !api->ahead_join) {
        print_message("SKIP: %s has no ahead copies\n", VT_GPU_TEST_NAME);
        api->shutdown(ctx);
        return;
    }
    const size_t n = 8 * MIB;
    unsigned char *page = malloc(n), *back = malloc(n), *want = malloc(n);
    assert_non_null(page);
    assert_non_null(back);
    assert_non_null(want);
    void *pin = NULL, *d = NULL;
    assert_int_equal(api->host_alloc_pinned(ctx, n, "test.ahead", &pin), VT_OK);
    assert_int_equal(api->alloc(ctx, n, "test.ahead.dst", &d), VT_OK);
    fill_pattern(pin, n, 21);
    fill_pattern(page, n, 22);
    fill_pattern(want, n, 23);
    assert_int_equal(api->copy_h2d(ctx, d, want, n), VT_OK); /* the old bytes */
    unsigned char *dd = d, *pp = pin;
    enum { N_COPY = 100 };
    vt_h2d_copy c[N_COPY];
    size_t at = 0;
    for (int i = 0; i < N_COPY; i++) {
        /* mostly 16-aligned pinned slices of whole 16-byte words; every 7th
         * pageable, every 11th of an odd size, every 13th from an unaligned
         * address */
        size_t bytes = i == 0 ? 589824 : 4096 + 16 * (size_t)i;
        const unsigned char *src = pp + at;
        if (i % 7 == 3) src = page + at;
        if (i % 11 == 5) bytes += 3;
        if (i % 13 == 6) src += 4;
        c[i] = (vt_h2d_copy){.dst = dd + at, .src = src, .bytes = bytes};
        memcpy(want + at, src, bytes);
        at += (bytes + 64) / 64 * 64 + 64; /* gaps keep their old bytes */
        assert_true(at + 700000 < n);
    }
    /* an op before the fork writes the bytes of the first copy: the fork
     * orders the copies after it, so the copy wins */
    assert_int_equal(api->memset_zero(ctx, dd, 589824), VT_OK);
    assert_int_equal(api->ahead_fork(ctx), VT_OK);
    assert_int_equal(api->copy_h2d_ahead(ctx, c, N_COPY), VT_OK);
    assert_int_equal(api->copy_h2d_ahead(ctx, c, 0), VT_OK); /* nothing */
    assert_int_equal(api->ahead_join(ctx), VT_OK);
    assert_int_equal(api->copy_d2h(ctx, back, d, n), VT_OK); /* after the join: no synchronize */
    for (size_t i = 0; i < n; i++)
        if (back[i] != want[i])
            fail_msg("ahead copies: byte %zu is %u, expected %u", i, back[i], want[i]);
    vt_h2d_copy bad = {.dst = NULL, .src = pin, .bytes = 16};
    assert_int_equal(api->copy_h2d_ahead(ctx, &bad, 1), VT_ERR_INVALID_ARG);
    assert_int_equal(api->synchronize(ctx), VT_OK);
    api->free(ctx, d);
    api->host_free_pinned(ctx, pin);
    free(page);
    free(back);
    free(want);
    api->shutdown(ctx);
}

static void test_absurd_alloc(void **s)
{
    (void)s;
    vt_backend_ctx *ctx = device_ctx();
    if (!ctx) return;
    const size_t pib = 1024ull * 1024ull * GIB;
    void *p = (void *)1;
    vt_clear_error();
    vt_status st = api->alloc(ctx, pib, "blk.99.ffn_up_exps", &p);
    const char *msg = vt_last_error();
    fprintf(stderr, "backend-%s: 1 PiB alloc: %s\n", VT_GPU_TEST_NAME, msg);
    assert_int_equal(st, VT_ERR_OUT_OF_MEMORY);
    assert_null(p);
    char bytes[64];
    snprintf(bytes, sizeof bytes, "(%zu bytes)", pib);
    if (!strstr(msg, "blk.99.ffn_up_exps") || !strstr(msg, bytes) || !strstr(msg, "1.00 PiB") ||
        !strstr(msg, "Malloc"))
        fail_msg("1 PiB allocation message lacks the name, '1.00 PiB' or '%s': %s", bytes, msg);
    /* the device still works after the refusal */
    void *q = NULL;
    assert_int_equal(api->alloc(ctx, MIB, "test.after", &q), VT_OK);
    assert_int_equal(api->memset_zero(ctx, q, MIB), VT_OK);
    api->free(ctx, q);

    vt_clear_error();
    st = api->host_alloc_pinned(ctx, pib, "test.pinned_absurd", &p);
    assert_int_not_equal(st, VT_OK);
    if (!strstr(vt_last_error(), "test.pinned_absurd") || !strstr(vt_last_error(), "bytes"))
        fail_msg("1 PiB pinned allocation message: %s", vt_last_error());
    api->shutdown(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry_accepts),
        cmocka_unit_test(test_device_count),
        cmocka_unit_test(test_vt_run_device),
        cmocka_unit_test(test_device_name_and_probe),
        cmocka_unit_test(test_copy_round_trip),
        cmocka_unit_test(test_small_copies),
        cmocka_unit_test(test_ahead_copies),
        cmocka_unit_test(test_absurd_alloc),
    };
    return vt_test_exit(
        cmocka_run_group_tests_name("gpu_backend_" VT_GPU_TEST_NAME, tests, NULL, teardown));
}
