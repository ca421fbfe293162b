/*
 * test_residency.c - resolving a configuration and the fit check.
 *
 *  - a store that requires memory_probe, on a backend that declares it ABSENT,
 *    is refused at resolution naming store, capability, backend and reason,
 *    before any tensor data is mapped (the GGUF stays unmapped) - also through
 *    vt_engine_open;
 *  - with the probe ABSENT, configurations that depend on the device total
 *    (experts auto, an automatic arena) are refused as "budget unknown";
 *  - a synthetic ~375 GiB qwen35moe tensor table (a sparse file written by
 *    mkmodel) against a fake device of 119.6 GiB: resident is refused with the
 *    numbers, streamed fits, auto picks streamed, an arena below one layer's
 *    top-k is refused naming the minimum; `vt fit` prints the same verdicts;
 *  - the trailing MTP block of a nextn_predict_layers file counts in neither
 *    the dense nor the expert bytes and sizes no slot.
 * Expected byte counts are computed here from the generator's shape
 * parameters, not read back from the code under test.
 */
#include "test_util.h"

#include <math.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "engine.h"
#include "error.h"
#include "expert_streamer.h"
#include "gguf_info.h"
#include "mkmodel.h"
#include "registry.h"
#include "residency.h"

#define GIB (1024.0 * 1024.0 * 1024.0)
#define DEVICE_TOTAL 128419522150ull /* 119.6 GiB */

static vt_registry *registry_with(const char *variant)
{
    static char d1[4096], d2[4096];
    snprintf(d1, sizeof d1, "%s/%s", VT_FAKE_PLUGIN_ROOT, variant);
    snprintf(d2, sizeof d2, "%s/store", VT_FAKE_PLUGIN_ROOT);
    const char *dirs[] = {d1, d2, vt_test_plugin_dir(), NULL};
    unsetenv("VT_PLUGIN_PATH");
    vt_registry *r;
    assert_int_equal(vt_registry_open(dirs, &r), VT_OK);
    assert_non_null(vt_registry_find(r, VT_PLUGIN_BACKEND, "fake"));
    assert_non_null(vt_registry_find(r, VT_PLUGIN_MODEL, "qwen35"));
    return r;
}

static const char *demo_model(void)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/demo/vt-random-qwen35moe.gguf", getenv("VT_TEST_BINARY_DIR"));
    if (access(path, R_OK) != 0) fail_msg("demo model %s missing (built with vt)", path);
    return path;
}

static void set(vt_config *c, const char *k, const char *v)
{
    if (vt_config_set(c, k, v) != VT_OK) fail_msg("--set %s=%s: %s", k, v, vt_last_error());
}

static void assert_contains(const char *hay, const char *needle)
{
    if (!strstr(hay, needle)) fail_msg("expected '%s' in: %s", needle, hay);
}

/* A model plugin built before ABI 1.9 is refused a file with a type id past
 * VT_TYPE_SLOTS (IQ1_XXXS, 66), naming plugin, tensor and type: its ids for
 * such a type would read as others' capabilities (64 + t = get_rows.F32) and
 * it may index the backend's 64-entry tables with it. The same plugin at its
 * real minor (1.9) gets past that check (to the fake backend's ops). */
static void test_old_model_plugin_refuses_new_types(void **s)
{
    (void)s;
    char path[4096];
    snprintf(path, sizeof path, "%s/vt-test-iq1xxxs-%d.gguf", P_tmpdir, (int)getpid());
    vt_mkmodel_params p;
    vt_mkmodel_defaults(&p);
    assert_int_equal(vt_mkmodel_set_type(&p, "iq1_xxxs"), VT_OK);
    assert_int_equal(vt_mkmodel_qwen35moe(path, &p), VT_OK);
    vt_gguf *g;
    assert_int_equal(vt_gguf_open(path, VT_GGUF_NO_MMAP, &g), VT_OK);
    vt_registry *reg = registry_with("allops");
    vt_plugin_entry *e = (vt_plugin_entry *)vt_registry_find(reg, VT_PLUGIN_MODEL, "qwen35");
    const vt_plugin_desc *real = e->desc;
    vt_plugin_desc old = *real;
    old.abi_minor = 8;
    e->desc = &old;
    vt_config cfg;
    vt_config_defaults(&cfg);
    set(&cfg, "fake.experts", "resident");
    vt_residency *r = calloc(1, sizeof *r);
    assert_int_equal(vt_residency_select(&cfg, reg, g, "fake", r), VT_ERR_CAPABILITY);
    const char *msg = vt_last_error();
    assert_contains(msg, "model plugin 'qwen35'");
    assert_contains(msg, "ABI 1.8");
    assert_contains(msg, " is IQ1_XXXS");
    assert_contains(msg, "(id 66");
    e->desc = real;
    memset(r, 0, sizeof *r);
    vt_status st = vt_residency_select(&cfg, reg, g, "fake", r);
    if (st != VT_OK && strstr(vt_last_error(), "is built for ABI"))
        fail_msg("a 1.9 model plugin was refused as an old one: %s", vt_last_error());
    free(r);
    vt_registry_close(reg);
    vt_gguf_close(g);
    unlink(path);
}

/* ---------------------------------------------------------------------------- */

static void test_store_needs_probe(void **s)
{
    (void)s;
    vt_registry *reg = registry_with("noprobe");
    vt_config cfg;
    vt_config_defaults(&cfg);
    set(&cfg, "fake.experts", "streamed");
    set(&cfg, "fake.expert_cache.store", "devfake");
    set(&cfg, "fake.expert_cache.slots", "64");
    vt_gguf *g;
    assert_int_equal(vt_gguf_open(demo_model(), VT_GGUF_NO_MMAP, &g), VT_OK);
    vt_residency *r = calloc(1, sizeof *r);
    assert_int_equal(vt_residency_select(&cfg, reg, g, "fake", r), VT_ERR_CAPABILITY);
    const char *msg = vt_last_error();
    assert_contains(msg, "store 'devfake' needs capability 'memory_probe'");
    assert_contains(msg, "backend 'fake' declares ABSENT");
    assert_contains(msg, "fake backend: no memory probe (test)");
    /* nothing of the tensor data was mapped, so none could have been read */
    assert_false(vt_gguf_is_mapped(g));
    for (int64_t i = 0; i < vt_gguf_n_tensors(g); i++) assert_null(vt_gguf_tensor_at(g, i)->data);

    /* the same through the engine (VT_PLUGIN_PATH brings the fake plugins) */
    char path[8192];
    snprintf(path, sizeof path, "%s/noprobe:%s/store", VT_FAKE_PLUGIN_ROOT, VT_FAKE_PLUGIN_ROOT);
    setenv("VT_PLUGIN_PATH", path, 1);
    vt_engine *e = NULL;
    vt_engine_params p = {.model_path = demo_model(), .device = "fake", .config = &cfg};
    assert_int_equal(vt_engine_open(&p, &e), VT_ERR_CAPABILITY);
    assert_null(e);
    assert_contains(vt_last_error(), "store 'devfake' needs capability 'memory_probe'");
    unsetenv("VT_PLUGIN_PATH");

    /* resident experts do not use the store: resolution passes, and the fit
     * check says the budget is unknown without refusing */
    set(&cfg, "fake.experts", "resident");
    assert_int_equal(vt_residency_select(&cfg, reg, g, "fake", r), VT_OK);
    assert_int_equal(vt_residency_fit(r, g, 0, 0, 0, 256, 32), VT_OK);
    assert_true(r->fit.fits);
    assert_contains(r->fit.verdict, "memory_probe ABSENT");

    /* experts auto depends on the device total: refused as unknown */
    set(&cfg, "fake.experts", "auto");
    set(&cfg, "fake.expert_cache.store", "host");
    assert_int_equal(vt_residency_select(&cfg, reg, g, "fake", r), VT_OK);
    assert_int_equal(vt_residency_fit(r, g, 0, 0, 0, 256, 32), VT_ERR_DOES_NOT_FIT);
    assert_false(r->fit.fits);
    assert_contains(r->fit.verdict, "budget is unknown");

    assert_false(vt_gguf_is_mapped(g));
    free(r);
    vt_gguf_close(g);
    vt_registry_close(reg);
}

/* Gemma 4 through the same path: its experts in the real device store on a
 * backend whose memory probe is ABSENT are refused at resolution, by name,
 * with the GGUF unmapped (issue 6's first failure of another engine). */
static void test_gemma_device_store_needs_probe(void **s)
{
    (void)s;
    const char *fx = vt_test_fixtures();
    if (!fx) return;
    char path[4096];
    snprintf(path, sizeof path, "%s/gemma4-moe-tiny/gguf/gemma4-moe-tiny-f16.gguf", fx);
    vt_registry *reg = registry_with("noprobe");
    if (!vt_registry_find(reg, VT_PLUGIN_MODEL, "gemma4") || !vt_registry_find(reg, VT_PLUGIN_STORE, "device"))
        fail_msg("model-gemma4 or store-device not found in %s", vt_test_plugin_dir());
    vt_config cfg;
    vt_config_defaults(&cfg);
    set(&cfg, "fake.experts", "auto");
    set(&cfg, "fake.expert_cache.store", "device");
    vt_gguf *g;
    assert_int_equal(vt_gguf_open(path, VT_GGUF_NO_MMAP, &g), VT_OK);
    vt_residency *r = calloc(1, sizeof *r);
    assert_int_equal(vt_residency_select(&cfg, reg, g, "fake", r), VT_ERR_CAPABILITY);
    assert_contains(vt_last_error(), "store 'device' needs capability 'memory_probe', which "
                                     "backend 'fake' declares ABSENT");
    assert_false(vt_gguf_is_mapped(g));
    free(r);
    vt_gguf_close(g);
    vt_registry_close(reg);
}

/* A backend that declares the model's ops ABSENT is refused before the store
 * is even looked at, naming the model and the capability. */
static void test_model_needs_ops(void **s)
{
    (void)s;
    vt_registry *reg = registry_with("good");
    vt_config cfg;
    vt_config_defaults(&cfg);
    set(&cfg, "fake.experts", "streamed");
    set(&cfg, "fake.expert_cache.store", "host");
    vt_gguf *g;
    assert_int_equal(vt_gguf_open(demo_model(), VT_GGUF_NO_MMAP, &g), VT_OK);
    vt_residency *r = calloc(1, sizeof *r);
    /* the good fake backend declares every op ABSENT: the model is refused first */
    assert_int_equal(vt_residency_select(&cfg, reg, g, "fake", r), VT_ERR_CAPABILITY);
    assert_contains(vt_last_error(), "model 'qwen35' needs capability");
    free(r);
    vt_gguf_close(g);
    vt_registry_close(reg);
}

/* A weight type the backend lacks is refused at load time naming the tensor,
 * its type and the backend (every op PRESENT but the file's matrix type). */
static void test_weight_type_refused(void **s)
{
    (void)s;
    vt_gguf *g;
    assert_int_equal(vt_gguf_open(demo_model(), VT_GGUF_NO_MMAP, &g), VT_OK);
    const vt_gguf_tensor *t = vt_gguf_find_tensor(g, "blk.0.ffn_down_exps.weight");
    assert_non_null(t);
    char type_id[16];
    snprintf(type_id, sizeof type_id, "%u", t->type);
    setenv("VT_FAKE_ABSENT_TYPE", type_id, 1);
    vt_registry *reg = registry_with("allops");
    vt_config cfg;
    vt_config_defaults(&cfg);
    set(&cfg, "fake.experts", "resident");
    vt_residency *r = calloc(1, sizeof *r);
    assert_int_equal(vt_residency_select(&cfg, reg, g, "fake", r), VT_ERR_CAPABILITY);
    const char *msg = vt_last_error();
    char want[128];
    snprintf(want, sizeof want, "of type %s, which backend 'fake' declares ABSENT", vt_type_name(t->type));
    assert_contains(msg, "model 'qwen35' needs capability '");
    assert_contains(msg, "for tensor '");
    assert_contains(msg, want);
    unsetenv("VT_FAKE_ABSENT_TYPE");
    free(r);
    vt_registry_close(reg);
    vt_gguf_close(g);
}

/* ---------------------------------------------------------------------------- */

typedef struct big_model {
    char path[256];
    vt_mkmodel_params p;
    uint64_t expert_bytes, slot_bytes;
} big_model;

static void make_big(big_model *b)
{
    vt_mkmodel_defaults(&b->p);
    b->p.n_embd = 4096;
    b->p.n_layer = 61;
    b->p.n_head = 32;
    b->p.n_head_kv = 4;
    b->p.head_dim = 128;
    b->p.n_rot = 64;
    b->p.n_expert = 256;
    b->p.n_expert_used = 8;
    b->p.n_ff_exp = 1024;
    b->p.n_ff_shexp = 1024;
    b->p.ssm_d_k = 128;
    b->p.ssm_n_k = 16;
    b->p.ssm_n_v = 32;
    b->p.context_length = 262144;
    b->p.n_merges = 50;
    b->p.sparse = 1;
    snprintf(b->path, sizeof b->path, "%s/vt-fit-370g-%d.gguf",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    if (vt_mkmodel_qwen35moe(b->path, &b->p) != VT_OK) fail_msg("mkmodel: %s", vt_last_error());
    /* gate, up: [n_embd, n_ff_exp, n_expert]; down: [n_ff_exp, n_embd, n_expert]; BF16 */
    b->slot_bytes = (uint64_t)b->p.n_embd * b->p.n_ff_exp * 2;
    b->expert_bytes = (uint64_t)b->p.n_layer * 3 * b->slot_bytes * b->p.n_expert;
}

/* devices (issue 18): several need the backend's peer_copy, then a model
 * plugin that splits routed experts over devices (none can yet); each refusal
 * names the platform, the list, what is missing and who lacks it. One index
 * past the backend's count names the count; one in range is the device the
 * platform runs on. */
static void test_devices(void **s)
{
    (void)s;
    vt_gguf *g;
    assert_int_equal(vt_gguf_open(demo_model(), VT_GGUF_NO_MMAP, &g), VT_OK);
    vt_residency *r = calloc(1, sizeof *r);
    vt_config cfg;
    vt_config_defaults(&cfg);

    /* the CPU backend: one device, peer_copy ABSENT */
    vt_registry *reg = registry_with("allops");
    set(&cfg, "cpu.devices", "0,1");
    assert_int_equal(vt_residency_select(&cfg, reg, g, "cpu", r), VT_ERR_CAPABILITY);
    assert_contains(vt_last_error(), "platform 'cpu' (devices: [0, 1]) needs capability 'peer_copy'");
    assert_contains(vt_last_error(), "which backend 'cpu' declares ABSENT (reason: one CPU device)");
    assert_contains(vt_last_error(), "name one device, such as devices: 0");
    set(&cfg, "cpu.devices", "5,7"); /* the hint names a device that exists */
    assert_int_equal(vt_residency_select(&cfg, reg, g, "cpu", r), VT_ERR_CAPABILITY);
    assert_contains(vt_last_error(), "name one device, such as devices: 0");
    set(&cfg, "cpu.devices", "1");
    assert_int_equal(vt_residency_select(&cfg, reg, g, "cpu", r), VT_ERR_NOT_FOUND);
    assert_contains(vt_last_error(), "platform 'cpu' (devices: 1): backend 'cpu' reports 1 device "
                                     "(indices 0..0)");
    set(&cfg, "cpu.devices", "all"); /* all of one device */
    if (vt_residency_select(&cfg, reg, g, "cpu", r) != VT_OK) fail_msg("%s", vt_last_error());
    assert_int_equal(r->device, 0);
    vt_registry_close(reg);

    /* the same refusal through the engine, before any weight is read */
    set(&cfg, "cpu.devices", "[1, 0]");
    vt_engine *e = NULL;
    vt_engine_params p = {.model_path = demo_model(), .device = "cpu", .config = &cfg};
    assert_int_equal(vt_engine_open(&p, &e), VT_ERR_CAPABILITY);
    assert_null(e);
    assert_contains(vt_last_error(), "platform 'cpu' (devices: [1, 0]) needs capability 'peer_copy'");
    assert_contains(vt_last_error(), "such as devices: 0"); /* 1 does not exist here */

    /* a backend of three devices without peer_copy */
    setenv("VT_FAKE_DEVICES", "3", 1);
    reg = registry_with("allops");
    set(&cfg, "fake.devices", "[2, 0]");
    assert_int_equal(vt_residency_select(&cfg, reg, g, "fake", r), VT_ERR_CAPABILITY);
    assert_contains(vt_last_error(), "platform 'fake' (devices: [2, 0]) needs capability 'peer_copy'");
    assert_contains(vt_last_error(), "backend 'fake' declares ABSENT (reason: fake backend computes "
                                     "nothing)");
    set(&cfg, "fake.devices", "all");
    assert_int_equal(vt_residency_select(&cfg, reg, g, "fake", r), VT_ERR_CAPABILITY);
    assert_contains(vt_last_error(), "platform 'fake' (devices: all) needs capability 'peer_copy'");
    set(&cfg, "fake.devices", "2");
    assert_int_equal(vt_residency_select(&cfg, reg, g, "fake", r), VT_OK);
    assert_int_equal(r->device, 2);
    set(&cfg, "fake.devices", "3");
    assert_int_equal(vt_residency_select(&cfg, reg, g, "fake", r), VT_ERR_NOT_FOUND);
    assert_contains(vt_last_error(), "backend 'fake' reports 3 devices (indices 0..2)");
    vt_registry_close(reg);

    /* with peer_copy: the model plugin is what is missing */
    setenv("VT_FAKE_PEER_COPY", "1", 1);
    reg = registry_with("allops");
    set(&cfg, "fake.devices", "0,1");
    assert_int_equal(vt_residency_select(&cfg, reg, g, "fake", r), VT_ERR_CAPABILITY);
    assert_contains(vt_last_error(), "platform 'fake' (devices: [0, 1]): model plugin 'qwen35' "
                                     "cannot split routed experts over several devices");
    set(&cfg, "fake.devices", "1");
    assert_int_equal(vt_residency_select(&cfg, reg, g, "fake", r), VT_OK);
    assert_int_equal(r->device, 1);
    vt_registry_close(reg);
    unsetenv("VT_FAKE_PEER_COPY");
    unsetenv("VT_FAKE_DEVICES");

    assert_false(vt_gguf_is_mapped(g));
    free(r);
    vt_gguf_close(g);
}

static void test_fit_370gib(void **s)
{
    (void)s;
    big_model *b = calloc(1, sizeof *b);
    make_big(b);
    assert_true(b->expert_bytes / GIB > 360.0);
    vt_registry *reg = registry_with("allops");
    char total[32];
    snprintf(total, sizeof total, "%llu", DEVICE_TOTAL);
    setenv("VT_FAKE_TOTAL_BYTES", total, 1);

    vt_config cfg;
    vt_config_defaults(&cfg);
    set(&cfg, "fake.expert_cache.slot_unit", "matrix"); /* slots of one matrix (units: below) */
    vt_gguf *g;
    if (vt_gguf_open(b->path, VT_GGUF_NO_MMAP, &g) != VT_OK) fail_msg("%s", vt_last_error());
    vt_residency *r = calloc(1, sizeof *r);
    if (vt_residency_select(&cfg, reg, g, "fake", r) != VT_OK) fail_msg("%s", vt_last_error());
    int ok;
    uint64_t fr, tot;
    assert_int_equal(vt_residency_probe(r, &ok, &fr, &tot), VT_OK);
    assert_true(ok);
    assert_int_equal(tot, DEVICE_TOTAL);

    /* resident (the default of an unnamed platform): refused with the numbers */
    assert_int_equal(vt_residency_fit(r, g, ok, fr, tot, 4096, 512), VT_ERR_DOES_NOT_FIT);
    const vt_fit *f = &r->fit;
    assert_false(f->fits);
    assert_int_equal(f->expert_bytes, b->expert_bytes);
    assert_int_equal(f->slot_bytes, b->slot_bytes);
    assert_int_equal(f->min_slots, 8 * 3);
    assert_true(f->dense_bytes > 0 && f->dense_bytes < f->expert_bytes / 10);
    char eb[32];
    vt_format_bytes(b->expert_bytes, 1, eb, sizeof eb);
    char want[128];
    snprintf(want, sizeof want, "needs %s of routed experts resident", eb);
    assert_contains(f->verdict, want);
    assert_contains(f->verdict, "device total is 119.60 GiB");
    assert_contains(f->verdict, "stream them");
    assert_contains(vt_last_error(), "device total is 119.60 GiB");

    /* streamed with an automatic arena: fits, the arena takes what is left */
    set(&cfg, "fake.experts", "streamed");
    assert_int_equal(vt_residency_select(&cfg, reg, g, "fake", r), VT_OK);
    if (vt_residency_fit(r, g, ok, fr, tot, 4096, 512) != VT_OK) fail_msg("%s", r->fit.verdict);
    assert_true(f->fits);
    assert_int_equal(f->experts, VT_EXPERTS_STREAMED);
    assert_true(f->arena_slots >= f->min_slots);
    assert_int_equal(f->arena_bytes, f->arena_slots * b->slot_bytes);
    assert_true(f->have_model_memory);
    uint64_t sum = f->dense_bytes + f->arena_bytes + f->kv_bytes + f->state_bytes +
                   f->scratch_bytes + f->headroom_bytes;
    assert_int_equal(f->device_need, sum);
    /* a host-addressable device is one pool: the host store's arena is counted once,
     * against the device total, and never again as host memory (the unified rule) */
    assert_true(f->unified);
    assert_int_equal(f->host_need, 0);
    assert_true(f->device_need <= DEVICE_TOTAL);
    assert_true(DEVICE_TOTAL - f->device_need < b->slot_bytes); /* filled to within one slot */
    /* KV: 61 layers, every 4th full attention (15), K+V, 4 heads x 128 x f32 */
    assert_int_equal(f->kv_bytes, 15ull * 2 * 4 * 128 * 4 * 4096);

    /* io: direct with the automatic arena: the bounce buffers come out of the
     * one pool before the arena takes the rest (the arena used to be sized
     * first, and the buffers then pushed the need past the total); without a
     * host tier or a ring the streamer has no reader pool, so one buffer */
    set(&cfg, "fake.expert_cache.io", "direct");
    assert_int_equal(vt_residency_select(&cfg, reg, g, "fake", r), VT_OK);
    if (vt_residency_fit(r, g, ok, fr, tot, 4096, 512) != VT_OK)
        fail_msg("io: direct, automatic arena: %s", r->fit.verdict);
    assert_true(f->fits);
    assert_int_equal(f->host_slots, 0);
    assert_int_equal(f->ring_slots, 0);
    assert_int_equal(f->bounce_bytes, (b->slot_bytes + 2 * 4096 - 1) / 4096 * 4096);
    assert_int_equal(f->device_need, f->dense_bytes + f->arena_bytes + f->kv_bytes +
                                         f->state_bytes + f->scratch_bytes + f->headroom_bytes +
                                         f->bounce_bytes);
    assert_true(f->device_need <= DEVICE_TOTAL);
    set(&cfg, "fake.expert_cache.io", "pread");

    /* auto: resident does not fit, so streamed */
    set(&cfg, "fake.experts", "auto");
    assert_int_equal(vt_residency_select(&cfg, reg, g, "fake", r), VT_OK);
    assert_int_equal(vt_residency_fit(r, g, ok, fr, tot, 4096, 512), VT_OK);
    assert_int_equal(f->experts, VT_EXPERTS_STREAMED);

    /* an arena below one layer's top-k x 3 matrices is refused with the minimum */
    set(&cfg, "fake.experts", "streamed");
    set(&cfg, "fake.expert_cache.slots", "10");
    assert_int_equal(vt_residency_select(&cfg, reg, g, "fake", r), VT_OK);
    assert_int_equal(vt_residency_fit(r, g, ok, fr, tot, 4096, 512), VT_ERR_DOES_NOT_FIT);
    assert_contains(f->verdict, "need 24 slots");
    assert_contains(f->verdict, "expert_cache.slots=24");

    /* an explicit arena larger than the device: refused with the numbers */
    set(&cfg, "fake.expert_cache.slots", "20000");
    assert_int_equal(vt_residency_select(&cfg, reg, g, "fake", r), VT_OK);
    assert_int_equal(vt_residency_fit(r, g, ok, fr, tot, 4096, 512), VT_ERR_DOES_NOT_FIT);
    assert_contains(f->verdict, "device total is 119.60 GiB");
    assert_false(vt_gguf_is_mapped(g));

    /* the command: same verdicts, exit status 1 / 0 */
    char cmd[8192], out[16384];
    for (int streamed = 0; streamed < 2; streamed++) {
        snprintf(cmd, sizeof cmd,
                 "VT_FAKE_TOTAL_BYTES=%llu '%s' fit -m '%s' --device fake --plugin-dir '%s/allops' "
                 "%s 2>&1", DEVICE_TOTAL, vt_test_vt_bin(), b->path, VT_FAKE_PLUGIN_ROOT,
                 streamed ? "--set fake.experts=streamed" : "");
        FILE *pp = popen(cmd, "r");
        assert_non_null(pp);
        size_t n = fread(out, 1, sizeof out - 1, pp);
        out[n] = 0;
        int rc = pclose(pp);
        if (streamed) {
            if (rc != 0) fail_msg("vt fit (streamed) exit %d:\n%s", rc, out);
            assert_contains(out, "verdict    fits");
            assert_contains(out, "expert arena");
        } else {
            if (WEXITSTATUS(rc) != 1) fail_msg("vt fit (resident) exit %d:\n%s", rc, out);
            assert_contains(out, "DOES NOT FIT");
            assert_contains(out, want);
            assert_contains(out, "119.60 GiB");
        }
    }

    free(r);
    vt_gguf_close(g);
    vt_registry_close(reg);
    unlink(b->path);
    free(b);
    unsetenv("VT_FAKE_TOTAL_BYTES");
}

/* A file with an MTP block (nextn_predict_layers 1, the ud-iq1_xxxs mix:
 * IQ1_XXXS experts, the MTP block's Q2_K, as in the published UD files): no
 * model runs that block, so its tensors are neither dense weights nor
 * experts, and its larger Q2_K experts size no slot. Failed before: one slot
 * was the Q2_K expert, twice the size of a real one. */
static void test_fit_skips_mtp_block(void **s)
{
    (void)s;
    big_model *b = calloc(1, sizeof *b);
    vt_mkmodel_defaults(&b->p);
    b->p.n_embd = 1024;
    b->p.n_layer = 4;
    b->p.n_expert = 32;
    b->p.n_expert_used = 4;
    b->p.n_ff_exp = 512;
    b->p.n_ff_shexp = 512;
    b->p.n_merges = 50;
    b->p.sparse = 1;
    b->p.n_nextn = 1;
    assert_int_equal(vt_mkmodel_set_type(&b->p, "ud-iq1_xxxs"), VT_OK);
    snprintf(b->path, sizeof b->path, "%s/vt-fit-mtp-%d.gguf",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    if (vt_mkmodel_qwen35moe(b->path, &b->p) != VT_OK) fail_msg("mkmodel: %s", vt_last_error());
    vt_gguf *g;
    if (vt_gguf_open(b->path, VT_GGUF_NO_MMAP, &g) != VT_OK) fail_msg("%s", vt_last_error());
    uint32_t blocks = 0, nextn = 0;
    assert_int_equal(vt_gguf_get_u32(g, "qwen35moe.block_count", &blocks), VT_OK);
    assert_int_equal(vt_gguf_get_u32(g, "qwen35moe.nextn_predict_layers", &nextn), VT_OK);
    assert_int_equal(blocks, 5);
    assert_int_equal(nextn, 1);
    /* expected figures from the tensor table: blk.4 is the MTP block */
    uint64_t mtp = 0, dense = 0, experts = 0, unit = 0;
    for (int64_t i = 0; i < vt_gguf_n_tensors(g); i++) {
        const vt_gguf_tensor *t = vt_gguf_tensor_at(g, i);
        if (!strncmp(t->name, "blk.4.", 6)) {
            mtp += t->nbytes;
            if (vt_gguf_is_routed_expert(t)) assert_int_equal(t->type, VT_TYPE_Q2_K);
        } else if (vt_gguf_is_routed_expert(t)) {
            assert_int_equal(t->type, VT_TYPE_IQ1_XXXS);
            experts += t->nbytes;
            if (!strncmp(t->name, "blk.0.", 6)) unit += t->nbytes / (uint64_t)t->ne[2];
        } else {
            dense += t->nbytes;
        }
    }
    assert_non_null(vt_gguf_find_tensor(g, "blk.4.nextn.eh_proj.weight"));
    vt_registry *reg = registry_with("allops");
    setenv("VT_FAKE_TOTAL_BYTES", "128419522150", 1);
    vt_config cfg;
    vt_config_defaults(&cfg);
    set(&cfg, "fake.experts", "streamed");
    set(&cfg, "fake.expert_cache.arena", "64MiB");
    vt_residency *r = calloc(1, sizeof *r);
    if (vt_residency_select(&cfg, reg, g, "fake", r) != VT_OK) fail_msg("%s", vt_last_error());
    int ok;
    uint64_t fr, tot;
    assert_int_equal(vt_residency_probe(r, &ok, &fr, &tot), VT_OK);
    if (vt_residency_fit(r, g, ok, fr, tot, 256, 32) != VT_OK) fail_msg("%s", r->fit.verdict);
    const vt_fit *f = &r->fit;
    assert_int_equal(f->unrun_bytes, mtp);
    assert_int_equal(f->dense_bytes, dense);
    assert_int_equal(f->expert_bytes, experts);
    assert_true(f->slot_unit_expert);
    assert_true(f->slot_bytes >= unit && f->slot_bytes < unit + 3 * VT_STREAMER_UNIT_ALIGN);
    assert_int_equal(f->n_expert_slices, 4ull * 32);
    char out[8192];
    FILE *mf = fmemopen(out, sizeof out, "w");
    vt_residency_print(r, b->path, 256, mf);
    fclose(mf);
    assert_contains(out, "MTP blocks (nextn, not loaded)");
    /* matrix slots with classes: every class is a main block's IQ1_XXXS
     * slice (gate/up and down have one size here), none the MTP's Q2_K */
    set(&cfg, "fake.expert_cache.slot_unit", "matrix");
    set(&cfg, "fake.expert_cache.slot_classes", "auto");
    if (vt_residency_select(&cfg, reg, g, "fake", r) != VT_OK) fail_msg("%s", vt_last_error());
    if (vt_residency_fit(r, g, ok, fr, tot, 256, 32) != VT_OK) fail_msg("%s", r->fit.verdict);
    const vt_gguf_tensor *main_gate = vt_gguf_find_tensor(g, "blk.0.ffn_gate_exps.weight");
    const uint64_t slice = main_gate->nbytes / (uint64_t)main_gate->ne[2];
    assert_int_equal(f->slot_bytes, slice);
    assert_int_equal(f->n_classes, 0); /* one slice size: no classes */
    assert_int_equal(f->n_expert_slices, 4ull * 3 * 32);
    vt_gguf_close(g);
    vt_registry_close(reg);
    unsetenv("VT_FAKE_TOTAL_BYTES");
    unlink(b->path);
    free(r);
    free(b);
}

/* Slot classes (expert_cache.slot_classes: auto): a Q4_K_M tensor table whose
 * ffn_down slices are Q6_K in some layers and Q4_K in the others. The
 * expected classes are counted here from the tensor table (each routed
 * stack's slice size and layer), not from the fit. */
static void test_fit_slot_classes(void **s)
{
    (void)s;
    big_model *b = calloc(1, sizeof *b);
    vt_mkmodel_defaults(&b->p);
    b->p.n_embd = 2048;
    b->p.n_layer = 8;
    b->p.n_head = 16;
    b->p.n_head_kv = 2;
    b->p.head_dim = 128;
    b->p.n_rot = 64;
    b->p.n_expert = 64;
    b->p.n_expert_used = 8;
    b->p.n_ff_exp = 512;
    b->p.n_ff_shexp = 512;
    b->p.ssm_d_k = 128;
    b->p.ssm_n_k = 16;
    b->p.ssm_n_v = 32;
    b->p.n_merges = 50;
    b->p.sparse = 1;
    assert_int_equal(vt_mkmodel_set_type(&b->p, "q4_k_m"), VT_OK);
    snprintf(b->path, sizeof b->path, "%s/vt-fit-classes-%d.gguf",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    if (vt_mkmodel_qwen35moe(b->path, &b->p) != VT_OK) fail_msg("mkmodel: %s", vt_last_error());
    vt_gguf *g;
    if (vt_gguf_open(b->path, VT_GGUF_NO_MMAP, &g) != VT_OK) fail_msg("%s", vt_last_error());
    /* the two slice sizes, their slices, and per layer how many stacks take the larger */
    uint64_t small = UINT64_MAX, large = 0, n_small = 0, n_large = 0, all_bytes = 0;
    for (int64_t i = 0; i < vt_gguf_n_tensors(g); i++) {
        const vt_gguf_tensor *t = vt_gguf_tensor_at(g, i);
        if (!vt_gguf_is_routed_expert(t)) continue;
        uint64_t sl = t->nbytes / (uint64_t)t->ne[2];
        if (sl < small) small = sl;
        if (sl > large) large = sl;
    }
    assert_true(small < large);
    uint32_t small_per_layer = 0;
    for (int64_t i = 0; i < vt_gguf_n_tensors(g); i++) {
        const vt_gguf_tensor *t = vt_gguf_tensor_at(g, i);
        if (!vt_gguf_is_routed_expert(t)) continue;
        uint64_t sl = t->nbytes / (uint64_t)t->ne[2];
        assert_true(sl == small || sl == large); /* Q4_K_M: two sizes here */
        if (sl == small) n_small += (uint64_t)t->ne[2];
        else n_large += (uint64_t)t->ne[2];
        all_bytes += t->nbytes;
    }
    /* per layer, the stacks of the smaller size (every down is Q6_K here: 2 of 3) */
    for (uint32_t l = 0; l < b->p.n_layer; l++) {
        char name[64];
        snprintf(name, sizeof name, "blk.%u.ffn_down_exps.weight", l);
        const vt_gguf_tensor *t = vt_gguf_find_tensor(g, name);
        assert_non_null(t);
        uint32_t k = t->nbytes / (uint64_t)t->ne[2] == small ? 3 : 2;
        if (k > small_per_layer) small_per_layer = k;
    }
    assert_true(n_large > 0);

    vt_registry *reg = registry_with("allops");
    setenv("VT_FAKE_TOTAL_BYTES", "128419522150", 1);
    vt_config cfg;
    vt_config_defaults(&cfg);
    set(&cfg, "fake.experts", "streamed");
    set(&cfg, "fake.expert_cache.arena", "64MiB");
    set(&cfg, "fake.expert_cache.slot_unit", "matrix"); /* the matrices' classes (units: below) */
    vt_residency *r = calloc(1, sizeof *r);
    if (vt_residency_select(&cfg, reg, g, "fake", r) != VT_OK) fail_msg("%s", vt_last_error());
    int ok;
    uint64_t fr, tot;
    assert_int_equal(vt_residency_probe(r, &ok, &fr, &tot), VT_OK);
    if (vt_residency_fit(r, g, ok, fr, tot, 256, 32) != VT_OK) fail_msg("%s", r->fit.verdict);
    const vt_fit *f = &r->fit;
    assert_int_equal(f->n_classes, 2);
    assert_int_equal(f->class_bytes[0], small);
    assert_int_equal(f->class_bytes[1], large);
    assert_int_equal(f->class_slices[0], n_small);
    assert_int_equal(f->class_slices[1], n_large);
    assert_int_equal(f->class_min[0], 8ull * small_per_layer);
    assert_int_equal(f->class_min[1], 8);
    assert_int_equal(f->arena_slots, f->class_slots[0] + f->class_slots[1]);
    /* the host store's slots are whole pages: within 64 MiB, and more slots
     * than 64 MiB of slots of the largest slice */
    const uint64_t pg_small = (small + 4095) / 4096 * 4096, pg_large = (large + 4095) / 4096 * 4096;
    assert_int_equal(f->arena_bytes, f->class_slots[0] * pg_small + f->class_slots[1] * pg_large);
    assert_true(f->arena_bytes <= 64ull << 20);
    assert_true(f->arena_slots > (64ull << 20) / pg_large);
    /* each class the same share of its slices beyond its minimum, to a slot */
    double s0 = (double)(f->class_slots[0] - f->class_min[0]) / (double)(n_small - f->class_min[0]);
    double s1 = (double)(f->class_slots[1] - f->class_min[1]) / (double)(n_large - f->class_min[1]);
    assert_true(fabs(s0 - s1) < 1.0 / (double)(n_small - f->class_min[0]) +
                                    1.0 / (double)(n_large - f->class_min[1]));
    (void)all_bytes;

    /* an arena below the classes' minimums: refused with the minimum in bytes */
    set(&cfg, "fake.expert_cache.arena", "1MiB");
    assert_int_equal(vt_residency_select(&cfg, reg, g, "fake", r), VT_OK);
    assert_int_equal(vt_residency_fit(r, g, ok, fr, tot, 256, 32), VT_ERR_DOES_NOT_FIT);
    char want[96];
    snprintf(want, sizeof want, "expert_cache.arena=%llu",
             (unsigned long long)(8ull * small_per_layer * pg_small + 8 * pg_large));
    assert_contains(f->verdict, want);
    /* off, or an arena in slots: one size */
    set(&cfg, "fake.expert_cache.arena", "64MiB");
    set(&cfg, "fake.expert_cache.slot_classes", "off");
    assert_int_equal(vt_residency_select(&cfg, reg, g, "fake", r), VT_OK);
    assert_int_equal(vt_residency_fit(r, g, ok, fr, tot, 256, 32), VT_OK);
    assert_int_equal(f->n_classes, 0);
    assert_int_equal(f->arena_slots, (64ull << 20) / pg_large);
    set(&cfg, "fake.expert_cache.slot_classes", "auto");
    set(&cfg, "fake.expert_cache.slots", "100");
    assert_int_equal(vt_residency_select(&cfg, reg, g, "fake", r), VT_OK);
    assert_int_equal(vt_residency_fit(r, g, ok, fr, tot, 256, 32), VT_OK);
    assert_int_equal(f->n_classes, 0);
    assert_contains(f->classes_note, "expert_cache.slots");

    /* whole-expert slots (slot_unit: expert): one unit per layer and expert,
     * its three slices each rounded up to 256 bytes; counted here from the
     * tensor table (one unit size when every layer's down has one type,
     * else two: classes) */
    uint64_t unit_of[8] = {0}, u_small = UINT64_MAX, u_large = 0, nu_small = 0, nu_large = 0;
    for (int64_t i = 0; i < vt_gguf_n_tensors(g); i++) {
        const vt_gguf_tensor *t = vt_gguf_tensor_at(g, i);
        if (!vt_gguf_is_routed_expert(t)) continue;
        unsigned l = 0;
        assert_int_equal(sscanf(t->name, "blk.%u.", &l), 1);
        assert_true(l < 8);
        unit_of[l] += (t->nbytes / (uint64_t)t->ne[2] + 255) / 256 * 256;
    }
    for (unsigned l = 0; l < 8; l++) {
        if (unit_of[l] < u_small) u_small = unit_of[l];
        if (unit_of[l] > u_large) u_large = unit_of[l];
    }
    for (unsigned l = 0; l < 8; l++) {
        if (unit_of[l] == u_small) nu_small += 64;
        else nu_large += 64;
    }
    vt_config_defaults(&cfg);
    set(&cfg, "fake.experts", "streamed");
    set(&cfg, "fake.expert_cache.arena", "64MiB");
    set(&cfg, "fake.expert_cache.slot_unit", "expert");
    assert_int_equal(vt_residency_select(&cfg, reg, g, "fake", r), VT_OK);
    if (vt_residency_fit(r, g, ok, fr, tot, 256, 32) != VT_OK) fail_msg("%s", f->verdict);
    assert_int_equal(f->slot_unit_expert, 1);
    assert_int_equal(f->slot_bytes, u_large);
    assert_int_equal(f->n_expert_slices, 8 * 64);
    assert_int_equal(f->min_slots, 8);
    if (u_small < u_large) {
        assert_int_equal(f->n_classes, 2);
        assert_int_equal(f->class_bytes[0], u_small);
        assert_int_equal(f->class_bytes[1], u_large);
        assert_int_equal(f->class_slices[0], nu_small);
        assert_int_equal(f->class_slices[1], nu_large);
        assert_int_equal(f->class_min[0], 8);
        assert_int_equal(f->class_min[1], 8);
    } else {
        assert_int_equal(f->n_classes, 0);
        assert_contains(f->classes_note, "every expert unit is one size");
        assert_int_equal(f->arena_slots, (64ull << 20) / ((u_large + 4095) / 4096 * 4096));
    }
    char *printed = NULL;
    size_t printed_len = 0;
    FILE *mem = open_memstream(&printed, &printed_len);
    assert_non_null(mem);
    vt_residency_print(r, b->path, 256, mem);
    fclose(mem);
    assert_contains(printed, "one slot (largest expert)");
    assert_contains(printed, "minimum slots (top-k)");
    free(printed);
    /* below the minimum: refused naming top-k slots of one expert each */
    set(&cfg, "fake.expert_cache.arena", "1MiB");
    assert_int_equal(vt_residency_select(&cfg, reg, g, "fake", r), VT_OK);
    assert_int_equal(vt_residency_fit(r, g, ok, fr, tot, 256, 32), VT_ERR_DOES_NOT_FIT);
    if (u_small < u_large) {
        snprintf(want, sizeof want, "expert_cache.arena=%llu",
                 (unsigned long long)(8 * ((u_small + 4095) / 4096 * 4096) +
                                      8 * ((u_large + 4095) / 4096 * 4096)));
        assert_contains(f->verdict, want);
    } else {
        assert_contains(f->verdict, "need 8 slots (one whole expert each");
    }

    free(r);
    vt_gguf_close(g);
    vt_registry_close(reg);
    unlink(b->path);
    free(b);
    unsetenv("VT_FAKE_TOTAL_BYTES");
}

/* Two plugins of one kind and name with the same priority (issue 17): the
 * run names the conflict and both files, not a plugin "not found". */
static void test_equal_priority_conflict_named(void **s)
{
    (void)s;
    char d1[4096], d2[4096];
    snprintf(d1, sizeof d1, "%s/allops", VT_FAKE_PLUGIN_ROOT);
    snprintf(d2, sizeof d2, "%s/noprobe", VT_FAKE_PLUGIN_ROOT);
    const char *dirs[] = {d1, d2, vt_test_plugin_dir(), NULL};
    unsetenv("VT_PLUGIN_PATH");
    vt_registry *reg;
    assert_int_equal(vt_registry_open(dirs, &reg), VT_OK);
    assert_null(vt_registry_find(reg, VT_PLUGIN_BACKEND, "fake"));
    vt_config cfg;
    vt_config_defaults(&cfg);
    vt_gguf *g;
    assert_int_equal(vt_gguf_open(demo_model(), VT_GGUF_NO_MMAP, &g), VT_OK);
    vt_residency *r = calloc(1, sizeof *r);
    vt_clear_error();
    assert_int_not_equal(vt_residency_select(&cfg, reg, g, "fake", r), VT_OK);
    const char *msg = vt_last_error();
    assert_contains(msg, "same priority");
    assert_contains(msg, d1);
    assert_contains(msg, d2);
    free(r);
    vt_gguf_close(g);
    vt_registry_close(reg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_store_needs_probe),
        cmocka_unit_test(test_model_needs_ops), cmocka_unit_test(test_weight_type_refused),
        cmocka_unit_test(test_old_model_plugin_refuses_new_types),
        cmocka_unit_test(test_gemma_device_store_needs_probe),
        cmocka_unit_test(test_devices),
        cmocka_unit_test(test_fit_370gib),
        cmocka_unit_test(test_fit_slot_classes),
        cmocka_unit_test(test_fit_skips_mtp_block),
        cmocka_unit_test(test_equal_priority_conflict_named),
    };
    return vt_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
