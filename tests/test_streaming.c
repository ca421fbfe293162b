/*
 * test_streaming.c - experts streamed through the minimum arena (top-k x 3
 * slots shared by all layers) give bit-identical logits and greedy tokens to
 * all-resident, on every qwen35moe-tiny fixture file (bf16, q8_0, the 3-shard
 * split), with the counters showing that fills and evictions happened (a run
 * that bypassed the streamer would show none and fail); both runs take the
 * fused moe_route/moe_ffn path (vt_model_info.moe_path says so), and on the
 * scalar kernels that path gives the bits of the per-expert ops
 * (VT_MOE_FFN=0). Also: the same with
 * O_DIRECT reads, with a prefill chunk of one token, and a streamed run whose
 * arena is below the minimum is refused by name before any weight is read.
 */
#include "test_util.h"

#include <cjson/cJSON.h>
#include <dlfcn.h>
#include <unistd.h>

#include "config.h"
#include "engine.h"
#include "mkmodel.h"
#include "error.h"
#include "expert_streamer.h"
#include "registry.h"
#include "residency.h"

static const char *fx;
static cJSON *index_json, *greedy_json; /* of the family being compared */
static const char *json_family;

static const char *files[] = {"qwen35moe-tiny/gguf/qwen35moe-tiny-bf16.gguf",
                              "qwen35moe-tiny/gguf/qwen35moe-tiny-q8_0.gguf",
                              "qwen35moe-tiny/gguf/split/qwen35moe-tiny-q8_0-split-00001-of-00003.gguf",
                              "gemma4-moe-tiny/gguf/gemma4-moe-tiny-f16.gguf"};

static int setup(void **state)
{
    (void)state;
    return 0;
}

static cJSON *load_json_of(const char *family, const char *rel)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s/%s", fx, family, rel);
    char *text = vt_test_read_file(path, NULL);
    if (!text) fail_msg("cannot read %s", path);
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j) fail_msg("%s is not JSON", path);
    return j;
}


/* index_json / greedy_json of the family of file rel ("<family>/gguf/..."). */
static void use_family_of(const char *rel)
{
    char fam[64];
    size_t n = strcspn(rel, "/");
    snprintf(fam, sizeof fam, "%.*s", (int)n, rel);
    if (json_family && !strcmp(json_family, fam) && index_json) return;
    cJSON_Delete(index_json);
    cJSON_Delete(greedy_json);
    index_json = load_json_of(fam, "refs/index.json");
    greedy_json = load_json_of(fam, "refs/greedy.json");
    json_family = strstr(rel, "gemma4") == rel ? "gemma4-moe-tiny" : "qwen35moe-tiny";
}

static const char *g_device = "cpu";

static vt_engine *open_with(const char *rel, const char *const *sets, uint32_t n_batch)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", fx, rel);
    static vt_config cfg;
    vt_config_defaults(&cfg);
    for (int i = 0; sets && sets[i]; i++)
        if (vt_config_set_arg(&cfg, sets[i]) != VT_OK) fail_msg("%s", vt_last_error());
    vt_engine_params p = {.model_path = path, .n_threads = 2, .kernels = "scalar", .n_ctx = 128,
                          .n_batch = n_batch, .config = &cfg, .device = g_device};
    setenv("VT_PLUGIN_PATH", vt_test_plugin_dir(), 1);
    vt_engine *e = NULL;
    if (vt_engine_open(&p, &e) != VT_OK) fail_msg("%s: %s", rel, vt_last_error());
    return e;
}

/* Logits of every position of the len40 prompt, then 32 greedy steps. */
static void run(vt_engine *e, float **logits, int32_t *greedy, int n_greedy, int64_t *n_out)
{
    cJSON *pr = cJSON_GetObjectItem(index_json, "prompts");
    cJSON *p40 = NULL, *it;
    cJSON_ArrayForEach(it, pr)
        if (!strcmp(cJSON_GetObjectItem(it, "name")->valuestring, "len40")) p40 = it;
    assert_non_null(p40);
    cJSON *ids = cJSON_GetObjectItem(p40, "prompt_ids");
    int n = cJSON_GetArraySize(ids);
    int32_t *toks = malloc((size_t)n * sizeof *toks);
    for (int i = 0; i < n; i++) toks[i] = cJSON_GetArrayItem(ids, i)->valueint;
    vt_model_info info;
    vt_engine_model_info(e, &info);
    *logits = malloc((size_t)n * (size_t)info.n_vocab * sizeof **logits);
    assert_int_equal(vt_engine_reset(e), VT_OK);
    if (vt_engine_eval(e, toks, n, *logits, 1) != VT_OK) fail_msg("%s", vt_last_error());
    *n_out = (int64_t)n * info.n_vocab;
    free(toks);

    /* greedy from the greedy.json prompt */
    cJSON *gp = cJSON_GetObjectItem(greedy_json, "prompt_ids");
    int gn = cJSON_GetArraySize(gp);
    int32_t *g = malloc((size_t)(gn + n_greedy) * sizeof *g);
    for (int i = 0; i < gn; i++) g[i] = cJSON_GetArrayItem(gp, i)->valueint;
    float *lg = malloc((size_t)info.n_vocab * sizeof *lg);
    assert_int_equal(vt_engine_reset(e), VT_OK);
    if (vt_engine_eval(e, g, gn, lg, 0) != VT_OK) fail_msg("%s", vt_last_error());
    for (int s = 0; s < n_greedy; s++) {
        int32_t best = 0;
        for (int64_t v = 1; v < info.n_vocab; v++)
            if (lg[v] > lg[best]) best = (int32_t)v;
        greedy[s] = best;
        if (vt_engine_eval(e, &best, 1, lg, 0) != VT_OK) fail_msg("%s", vt_last_error());
    }
    free(lg);
    free(g);
}

#define N_FILES (sizeof files / sizeof files[0])
#ifdef VT_TEST_SANITIZED
/* sanitizer builds run at -O0: one file per family keeps the suite short */
static int file_in_run(size_t f) { return f == 0 || f == 3; }
#else
static int file_in_run(size_t f) { (void)f; return 1; }
#endif

/* The engine's model took the routed-expert path whose description starts with want. */
static void assert_moe_path(vt_engine *e, const char *want)
{
    vt_model_info info;
    vt_engine_model_info(e, &info);
    if (!info.moe_path || strncmp(info.moe_path, want, strlen(want)))
        fail_msg("routed experts ran as '%s', want '%s...'", info.moe_path ? info.moe_path : "(null)",
                 want);
}

/* The decode steps of a streamed engine on a GPU ran as recorded graph
 * segments (the default where the backend records graphs; VT_GRAPH=0 or
 * VT_GRAPH_STREAMED=0 turn them off), checked after the run: a segment that
 * could not be recorded turns them off and shows here. */
static void assert_decode_path(vt_engine *e, const char *dev)
{
    if (strcmp(dev, "cuda")) return;
    const char *g = getenv("VT_GRAPH"), *gs = getenv("VT_GRAPH_STREAMED");
    const int seg = !(g && !strcmp(g, "0")) && !(gs && !strcmp(gs, "0"));
    const char *want = seg ? "graph segments" : "ops";
    vt_model_info info;
    vt_engine_model_info(e, &info);
    if (!info.decode_path || strncmp(info.decode_path, want, strlen(want)))
        fail_msg("streamed decode ran as '%s', want '%s...'",
                 info.decode_path ? info.decode_path : "(null)", want);
}

/* A fixture file absent from a partial copy of the fixtures is skipped
 * loudly, except under CI=true (where it fails). */
static int file_present(size_t f)
{
    char fpath[4096];
    snprintf(fpath, sizeof fpath, "%s/%s", fx, files[f]);
    if (!access(fpath, R_OK)) return 1;
    const char *ci = getenv("CI");
    if (ci && !strcmp(ci, "true")) fail_msg("fixture file %s is absent", fpath);
    print_message("SKIP: fixture file %s is absent (a partial fixture copy)\n", fpath);
    return 0;
}

/* The first qwen35moe file present (the refusal checks need one model,
 * any of them); -1 when the copy has none. */
static int first_qwen_file(void)
{
    for (size_t f = 0; f < 3; f++)
        if (file_present(f)) return (int)f;
    return -1;
}

/* The host tier of a streamed run: none, its smallest (one slot), or every
 * slice of the file. */
enum { HOST_NONE, HOST_ONE_SLOT, HOST_ALL };

/* The device arena of the next compare_streamed: this many times the
 * minimum (a prefetch needs slots beyond the last acquire's). */
static uint64_t g_slot_factor = 1;

/* expert_cache.slot_unit of the next compare_streamed, on both of its runs
 * (the resident one's fit check gives the minimum arena in those slots);
 * NULL: the default */
static const char *g_unit_set;

/* Every file, resident against streamed through the minimum device arena
 * (top-k x expert matrices, read from the fit check) with the given host
 * tier and extra settings, on g_device: logits of every position and greedy
 * tokens bit for bit, with the counters proving both tiers were used. */
static void compare_streamed(int host, const char *extra, uint32_t n_batch)
{
    const char *dev = g_device;
    for (size_t f = 0; f < N_FILES; f++) {
        if (!file_in_run(f) || !file_present(f)) continue;
        use_family_of(files[f]);
        float *lr, *ls;
        int32_t gr[32], gs[32];
        int64_t nr, ns;
        const char *resident[] = {"cpu.experts=resident", "cuda.experts=resident", g_unit_set,
                                  NULL};
        vt_engine *e = open_with(files[f], resident, n_batch);
        assert_null(vt_engine_streamer(e));
        assert_moe_path(e, "moe_ffn (fused; routing on the device)");
        const vt_fit *fit = vt_engine_fit(e);
        /* a host slot as the fit check sizes it: with io: direct whole 4 KiB
         * blocks and one more (an O_DIRECT read lands in the slot itself) */
        uint64_t min_slots = fit->min_slots,
                 slot_bytes = extra && strstr(extra, "io=direct")
                                  ? (fit->slot_bytes + 4095) / 4096 * 4096 + 4096
                                  : (fit->slot_bytes + 63) / 64 * 64;
        const uint64_t n_slices = fit->n_expert_slices; /* fit dies with the engine */
        const uint32_t top_k = fit->n_expert_used;
        uint64_t all_bytes = slot_bytes * n_slices;
        run(e, &lr, gr, 32, &nr);
        vt_engine_close(e);

        char s_streamed[64], s_slots[64], s_host[96];
        snprintf(s_streamed, sizeof s_streamed, "%s.experts=streamed", dev);
        snprintf(s_slots, sizeof s_slots, "%s.expert_cache.slots=%llu", dev,
                 (unsigned long long)(min_slots * g_slot_factor));
        snprintf(s_host, sizeof s_host, "%s.expert_cache.host_arena=%llu", dev,
                 (unsigned long long)(host == HOST_NONE ? 0 : host == HOST_ONE_SLOT ? slot_bytes
                                                                                     : all_bytes));
        const char *sets[] = {s_streamed, s_slots, s_host, g_unit_set ? g_unit_set : extra,
                              g_unit_set ? extra : NULL, NULL};
        e = open_with(files[f], sets, n_batch);
        const vt_expert_streamer *s = vt_engine_streamer(e);
        if (!s) fail_msg("%s: experts not streamed", files[f]);
        assert_moe_path(e, "moe_ffn (fused; routing on the device, ids copied to the host");
        assert_int_equal(vt_streamer_n_slots(s), min_slots * g_slot_factor);
        { /* whole-expert slots (the default): one key per expert; matrix: one per matrix */
            const int unit = !g_unit_set || strstr(g_unit_set, "=expert");
            uint32_t l0 = 0;
            while (l0 < vt_streamer_n_layers(s) && !vt_streamer_n_matrices(s, l0)) l0++;
            const uint32_t keys = l0 < vt_streamer_n_layers(s) ? vt_streamer_n_matrices(s, l0) : 0;
            assert_int_equal(vt_engine_fit(e)->slot_unit_expert, unit);
            if (unit) {
                assert_int_equal(keys, 1);
                assert_int_equal(min_slots, top_k);
            } else {
                assert_true(keys > 1);
                assert_int_equal(min_slots, (uint64_t)top_k * keys);
            }
        }
        assert_int_equal(vt_streamer_n_host_slots(s),
                         host == HOST_NONE ? 0 : host == HOST_ONE_SLOT ? 1 : n_slices);
        run(e, &ls, gs, 32, &ns);
        assert_decode_path(e, dev);
        vt_expert_stats st;
        vt_streamer_host_stats hs;
        assert_int_equal(vt_streamer_stats(s, -1, &st), VT_OK);
        assert_int_equal(vt_streamer_host_stats_get(s, -1, &hs), VT_OK);
        print_message("[streaming] %s on %s, n_batch %u, host tier %s%s: device %llu hits, %llu "
                      "misses, %llu evictions, %.1f MiB; host %llu hits, %llu misses, %llu "
                      "evictions\n", files[f], dev, n_batch,
                      host == HOST_NONE ? "none" : host == HOST_ONE_SLOT ? "1 slot" : "all",
                      vt_streamer_io_direct(s) ? " (O_DIRECT)" : "",
                      (unsigned long long)st.hits, (unsigned long long)st.misses,
                      (unsigned long long)st.evictions, st.bytes_filled / 1048576.0,
                      (unsigned long long)hs.hits, (unsigned long long)hs.misses,
                      (unsigned long long)hs.evictions);
        vt_streamer_prefetch_stats ps;
        assert_int_equal(vt_streamer_prefetch_stats_get(s, &ps), VT_OK);
        if (vt_streamer_prefetch_on(s)) {
            print_message("[streaming] prefetch: %llu issued, %llu used, %llu wasted, %llu "
                          "skipped\n", (unsigned long long)ps.issued, (unsigned long long)ps.used,
                          (unsigned long long)ps.wasted, (unsigned long long)ps.skipped);
            /* one-token steps predict; with a host tier of every slice only a
             * key not read yet is skipped, so some are copied and used, given
             * slots beyond one acquire's (prefetch: auto, the default, is on
             * at the minimum arena too, where it can take none) */
            if (host == HOST_ALL && g_slot_factor > 1 && (ps.issued == 0 || ps.used == 0))
                fail_msg("%s: prefetch on, host tier of every slice: %llu issued, %llu used",
                         files[f], (unsigned long long)ps.issued, (unsigned long long)ps.used);
        } else if (ps.issued) {
            fail_msg("%s: prefetch off but %llu keys were prefetched", files[f],
                     (unsigned long long)ps.issued);
        }
        if (st.misses == 0 || st.evictions == 0 || st.bytes_filled == 0)
            fail_msg("%s: the streamer was bypassed (misses %llu, evictions %llu)", files[f],
                     (unsigned long long)st.misses, (unsigned long long)st.evictions);
        if (host != HOST_NONE && hs.hits + hs.misses != st.misses)
            fail_msg("%s: %llu device misses but the host tier saw %llu", files[f],
                     (unsigned long long)st.misses, (unsigned long long)(hs.hits + hs.misses));
        if (host == HOST_ONE_SLOT && (hs.evictions == 0 || hs.misses < st.misses / 2))
            fail_msg("%s: a one-slot host tier evicted %llu times", files[f],
                     (unsigned long long)hs.evictions);
        if (host == HOST_ALL && (hs.evictions || hs.hits == 0 || hs.misses > n_slices))
            fail_msg("%s: a host tier of every slice: %llu hits, %llu misses, %llu evictions",
                     files[f], (unsigned long long)hs.hits, (unsigned long long)hs.misses,
                     (unsigned long long)hs.evictions);
        assert_int_equal(nr, ns);
        if (memcmp(lr, ls, (size_t)nr * sizeof *lr)) {
            int64_t i = 0;
            while (lr[i] == ls[i]) i++;
            fail_msg("%s: streamed logits differ from resident at %lld: %.9g vs %.9g", files[f],
                     (long long)i, ls[i], lr[i]);
        }
        assert_memory_equal(gr, gs, sizeof gr);
        vt_engine_close(e);
        free(lr);
        free(ls);
    }
}

static void test_min_arena_bit_identical(void **state)
{
    (void)state;
    if (!(fx = vt_test_fixtures())) return;
    /* one chunk, and token by token (every acquire is one token's top-k) */
#ifdef VT_TEST_SANITIZED
    /* -O0 with sanitizers: each host tier once, in both shapes of acquire */
    compare_streamed(HOST_NONE, NULL, 512);
    compare_streamed(HOST_ONE_SLOT, NULL, 1);
    compare_streamed(HOST_ALL, NULL, 512);
    compare_streamed(HOST_NONE, "cpu.expert_cache.io=direct", 512);
#else
    for (int host = HOST_NONE; host <= HOST_ALL; host++) {
        compare_streamed(host, NULL, 512);
        compare_streamed(host, NULL, 1);
    }
    compare_streamed(HOST_NONE, "cpu.expert_cache.io=direct", 512);
    compare_streamed(HOST_ONE_SLOT, "cpu.expert_cache.io=direct", 7);
#endif
}

/* Prefetch (next-layer) through a device arena of twice the minimum: the
 * same bits in one chunk and token by token, on the CPU (the host store's
 * ahead publishes are copies) and, when there is one, the GPU (a second
 * copy queue beside the ops). */
static void compare_prefetch(void)
{
    char set[96];
    snprintf(set, sizeof set, "%s.expert_cache.prefetch=next-layer", g_device);
    g_slot_factor = 2;
    compare_streamed(HOST_ALL, set, 512);
    compare_streamed(HOST_ALL, set, 1);
#ifndef VT_TEST_SANITIZED
    compare_streamed(HOST_ONE_SLOT, set, 512);
    compare_streamed(HOST_ALL, set, 5);
#endif
    g_slot_factor = 1;
}

/* Slots of one matrix each (expert_cache.slot_unit: matrix; the default,
 * whole-expert slots, runs in every other comparison): the same bits as
 * resident through the minimum arena (top-k x matrices slots) with each
 * host tier, in one chunk, token by token and in chunks of 5, with the
 * prefetch, and (CPU) O_DIRECT reads (in place in the host tier's slots). */
static void compare_units(void)
{
    char set[96];
    snprintf(set, sizeof set, "%s.expert_cache.slot_unit=matrix", g_device);
    g_unit_set = set;
    compare_streamed(HOST_NONE, NULL, 512);
    compare_streamed(HOST_ONE_SLOT, NULL, 1);
    compare_streamed(HOST_ALL, NULL, 5);
#ifndef VT_TEST_SANITIZED
    compare_streamed(HOST_NONE, NULL, 1);
    compare_streamed(HOST_ALL, NULL, 512);
#endif
    compare_prefetch();
    if (!strcmp(g_device, "cpu")) {
        compare_streamed(HOST_ONE_SLOT, "cpu.expert_cache.io=direct", 7);
        compare_streamed(HOST_NONE, "cpu.expert_cache.io=direct", 512);
    }
    g_unit_set = NULL;
}

static void test_slot_unit_matrix_bit_identical(void **state)
{
    (void)state;
    if (!(fx = vt_test_fixtures())) return;
    compare_units();
}

static void test_prefetch_bit_identical(void **state)
{
    (void)state;
    if (!(fx = vt_test_fixtures())) return;
    compare_prefetch();
    /* prefetch without a host tier is refused by name */
    const char *sets[] = {"cpu.experts=streamed", "cpu.expert_cache.host_arena=0",
                          "cpu.expert_cache.prefetch=next-layer", NULL};
    int f0 = first_qwen_file();
    if (f0 < 0) return;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", fx, files[f0]);
    static vt_config cfg;
    vt_config_defaults(&cfg);
    for (int i = 0; sets[i]; i++)
        if (vt_config_set_arg(&cfg, sets[i]) != VT_OK) fail_msg("%s", vt_last_error());
    vt_engine_params p = {.model_path = path, .n_threads = 2, .kernels = "scalar", .n_ctx = 128,
                          .n_batch = 512, .config = &cfg, .device = "cpu"};
    vt_engine *e = NULL;
    vt_status st = vt_engine_open(&p, &e);
    if (st == VT_OK || !strstr(vt_last_error(), "expert_cache.prefetch"))
        fail_msg("prefetch without a host tier: status %d, %s", st, vt_last_error());
    print_message("[streaming] refused: %s\n", vt_last_error());
}

/* The same on the GPU: experts streamed through the device store (arena in
 * device memory, H2D commits from the staging slot) against all experts
 * resident on the device; then with no pinned budget (pageable staging, a
 * counted fallback), which must still run the experts on the GPU. */
static void test_cuda_device_store(void **state)
{
    (void)state;
    if (!(fx = vt_test_fixtures())) return;
    char path[4096];
    snprintf(path, sizeof path, "%s/backend-cuda.so", vt_test_plugin_dir());
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        print_message("SKIP: backend-cuda not built\n");
        skip();
    }
    const vt_backend_api *cuda = ((vt_plugin_entry_fn)dlsym(h, VT_PLUGIN_ENTRY_SYMBOL))()->table;
    if (cuda->device_count() <= 0) {
        print_message("SKIP: no CUDA device here\n");
        skip();
    }
    g_device = "cuda";
    for (int host = HOST_NONE; host <= HOST_ALL; host++) {
        compare_streamed(host, NULL, 512);
        compare_streamed(host, NULL, 1);
    }
    /* no pinned budget: pageable staging and host tier, counted fallbacks */
    uint64_t fb0 = vt_host_n_fallbacks();
    compare_streamed(HOST_NONE, "cuda.pinned_budget=0", 16);
    compare_streamed(HOST_ALL, "cuda.pinned_budget=0", 3);
    assert_true(vt_host_n_fallbacks() > fb0);
    compare_prefetch();
    compare_units();
    g_device = "cpu";
}

/* Slot classes end to end: a generated Q4_K_M model (Q4_K gate/up slices,
 * larger down slices) streamed through arenas given in bytes, so the fit
 * makes two slot classes: at the classes' minimum, and at a quarter of the
 * expert bytes with and without a host tier, prompt logits (one chunk) and
 * 16 greedy steps (token by token) equal the resident run's bits, on the CPU
 * and on CUDA where present. */
static void run_tokens(vt_engine *e, float *logits, int32_t *greedy, int n_greedy, int64_t n_vocab)
{
    int32_t toks[24];
    for (int i = 0; i < 24; i++) toks[i] = (int32_t)((i * 131 + 7) % n_vocab);
    assert_int_equal(vt_engine_reset(e), VT_OK);
    if (vt_engine_eval(e, toks, 24, logits, 1) != VT_OK) fail_msg("%s", vt_last_error());
    float *lg = malloc((size_t)n_vocab * sizeof *lg);
    assert_non_null(lg);
    int32_t t = toks[23];
    for (int s = 0; s < n_greedy; s++) {
        if (vt_engine_eval(e, &t, 1, lg, 0) != VT_OK) fail_msg("%s", vt_last_error());
        int32_t best = 0;
        for (int64_t v = 1; v < n_vocab; v++)
            if (lg[v] > lg[best]) best = (int32_t)v;
        greedy[s] = t = best;
    }
    free(lg);
}

static void classes_on(const char *dev, const char *path)
{
    char sets[4][128];
    const char *resident[] = {sets[0], NULL};
    snprintf(sets[0], sizeof sets[0], "%s.experts=resident", dev);
    vt_config cfg;
    vt_config_defaults(&cfg);
    for (int i = 0; resident[i]; i++)
        if (vt_config_set_arg(&cfg, resident[i]) != VT_OK) fail_msg("%s", vt_last_error());
    vt_engine_params p = {.model_path = path, .n_threads = 2, .kernels = "scalar", .n_ctx = 128,
                          .n_batch = 512, .config = &cfg, .device = dev};
    setenv("VT_PLUGIN_PATH", vt_test_plugin_dir(), 1);
    vt_engine *e = NULL;
    if (vt_engine_open(&p, &e) != VT_OK) fail_msg("%s", vt_last_error());
    vt_model_info info;
    vt_engine_model_info(e, &info);
    const int64_t nv = info.n_vocab;
    float *ref = malloc((size_t)(24 * nv) * sizeof *ref), *got = malloc((size_t)(24 * nv) * sizeof *got);
    int32_t gref[16], ggot[16];
    run_tokens(e, ref, gref, 16, nv);
    const uint64_t expert_bytes = vt_engine_fit(e)->expert_bytes;
    vt_engine_close(e);
    /* the minimum (the fit's refusal names it), then a quarter of the experts */
    uint64_t arenas[2] = {0, expert_bytes / 4};
    for (int a = 0; a < 2; a++)
        for (int host = 0; host < 2; host++) {
            vt_config_defaults(&cfg);
            snprintf(sets[3], sizeof sets[3], "%s.expert_cache.slot_unit=matrix", dev);
            if (vt_config_set_arg(&cfg, sets[3]) != VT_OK) fail_msg("%s", vt_last_error());
            snprintf(sets[0], sizeof sets[0], "%s.experts=streamed", dev);
            snprintf(sets[1], sizeof sets[1], "%s.expert_cache.arena=%llu", dev,
                     (unsigned long long)(arenas[a] ? arenas[a] : 4096));
            snprintf(sets[2], sizeof sets[2], "%s.expert_cache.host_arena=%s", dev,
                     host ? "1GiB" : "0");
            for (int i = 0; i < 3; i++)
                if (vt_config_set_arg(&cfg, sets[i]) != VT_OK) fail_msg("%s", vt_last_error());
            if (!arenas[a]) { /* learn the minimum from the refusal */
                assert_int_not_equal(vt_engine_open(&p, &e), VT_OK);
                const char *m = strstr(vt_last_error(), "expert_cache.arena=");
                if (!m) fail_msg("%s", vt_last_error());
                arenas[a] = strtoull(m + strlen("expert_cache.arena="), NULL, 10);
                vt_config_defaults(&cfg);
                snprintf(sets[1], sizeof sets[1], "%s.expert_cache.arena=%llu", dev,
                         (unsigned long long)arenas[a]);
                for (int i = 0; i < 4; i++)
                    if (vt_config_set_arg(&cfg, sets[i]) != VT_OK) fail_msg("%s", vt_last_error());
            }
            if (vt_engine_open(&p, &e) != VT_OK) fail_msg("%s", vt_last_error());
            assert_int_equal(vt_engine_fit(e)->n_classes, 2);
            run_tokens(e, got, ggot, 16, nv);
            vt_expert_stats st;
            assert_int_equal(vt_streamer_stats(vt_engine_streamer(e), -1, &st), VT_OK);
            assert_true(st.misses > 0);
            vt_engine_close(e);
            if (memcmp(ref, got, (size_t)(24 * nv) * sizeof *ref))
                fail_msg("%s: arena %llu, host tier %d: prompt logits differ from resident", dev,
                         (unsigned long long)arenas[a], host);
            for (int i = 0; i < 16; i++)
                if (gref[i] != ggot[i])
                    fail_msg("%s: arena %llu, host tier %d: greedy step %d: %d, resident %d", dev,
                             (unsigned long long)arenas[a], host, i, ggot[i], gref[i]);
        }
    free(ref);
    free(got);
}

static void test_slot_classes_bit_identical(void **state)
{
    (void)state;
    vt_mkmodel_params mp;
    vt_mkmodel_defaults(&mp);
    mp.n_embd = 256;
    mp.n_layer = 4;
    mp.n_head = 4;
    mp.n_head_kv = 2;
    mp.head_dim = 64;
    mp.n_rot = 32;
    mp.n_expert = 16;
    mp.n_expert_used = 4;
    mp.n_ff_exp = 256;
    mp.n_ff_shexp = 256;
    mp.ssm_d_k = 32;
    mp.ssm_n_k = 4;
    mp.ssm_n_v = 8;
    mp.n_vocab = 1024;
    mp.n_merges = 50;
    assert_int_equal(vt_mkmodel_set_type(&mp, "q4_k_m"), VT_OK);
    char path[256];
    snprintf(path, sizeof path, "%s/vt-classes-%d.gguf",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    if (vt_mkmodel_qwen35moe(path, &mp) != VT_OK) fail_msg("mkmodel: %s", vt_last_error());
    classes_on("cpu", path);
    char so[4096];
    snprintf(so, sizeof so, "%s/backend-cuda.so", vt_test_plugin_dir());
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (h && ((const vt_backend_api *)((vt_plugin_entry_fn)dlsym(h, VT_PLUGIN_ENTRY_SYMBOL))()
                  ->table)->device_count() > 0)
        classes_on("cuda", path);
    else
        print_message("slot classes: no CUDA device here, CPU only\n");
    unlink(path);
}

/* The fused path (moe_route + moe_ffn) against the per-expert ops it
 * replaces (VT_MOE_FFN=0), all resident, on backend-cpu's scalar kernels:
 * the same bits, logits of every position and greedy tokens. */
static void test_fused_equals_ops(void **state)
{
    (void)state;
    if (!(fx = vt_test_fixtures())) return;
    const char *resident[] = {"cpu.experts=resident", NULL};
    for (size_t f = 0; f < N_FILES; f++) {
        if (!file_in_run(f) || !file_present(f)) continue;
        use_family_of(files[f]);
        for (int nb = 0; nb < 2; nb++) {
            uint32_t n_batch = nb ? 3 : 512;
            float *lo, *lf;
            int32_t go[32], gf[32];
            int64_t no, nf;
            setenv("VT_MOE_FFN", "0", 1);
            vt_engine *e = open_with(files[f], resident, n_batch);
            unsetenv("VT_MOE_FFN");
            assert_moe_path(e, "per-expert ops");
            run(e, &lo, go, 32, &no);
            vt_engine_close(e);
            e = open_with(files[f], resident, n_batch);
            assert_moe_path(e, "moe_ffn");
            run(e, &lf, gf, 32, &nf);
            vt_engine_close(e);
            assert_int_equal(no, nf);
            for (int64_t i = 0; i < no; i++)
                if (memcmp(&lo[i], &lf[i], sizeof lo[i]))
                    fail_msg("%s, n_batch %u: fused logits differ from the per-expert ops at %lld: "
                             "%.9g vs %.9g", files[f], n_batch, (long long)i, lf[i], lo[i]);
            assert_memory_equal(go, gf, sizeof go);
            free(lo);
            free(lf);
        }
    }
}

static void test_below_minimum_refused(void **state)
{
    (void)state;
    if (!(fx = vt_test_fixtures())) return;
    int f0 = first_qwen_file();
    if (f0 < 0) return;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", fx, files[f0]);
    static vt_config cfg;
    vt_config_defaults(&cfg);
    assert_int_equal(vt_config_set_arg(&cfg, "cpu.experts=streamed"), VT_OK);
    assert_int_equal(vt_config_set_arg(&cfg, "cpu.expert_cache.slots=5"), VT_OK);
    assert_int_equal(vt_config_set_arg(&cfg, "cpu.expert_cache.slot_unit=matrix"), VT_OK);
    setenv("VT_PLUGIN_PATH", vt_test_plugin_dir(), 1);
    vt_engine_params p = {.model_path = path, .n_threads = 1, .n_ctx = 64, .config = &cfg};
    vt_engine *e = NULL;
    assert_int_equal(vt_engine_open(&p, &e), VT_ERR_DOES_NOT_FIT);
    const char *msg = vt_last_error();
    if (!strstr(msg, "need 6 slots") || !strstr(msg, "expert_cache.slots=6"))
        fail_msg("below-minimum arena not refused with the minimum: %s", msg);
    /* whole-expert slots (the default): top-k slots */
    vt_config_defaults(&cfg);
    assert_int_equal(vt_config_set_arg(&cfg, "cpu.experts=streamed"), VT_OK);
    assert_int_equal(vt_config_set_arg(&cfg, "cpu.expert_cache.slots=1"), VT_OK);
    assert_int_equal(vt_engine_open(&p, &e), VT_ERR_DOES_NOT_FIT);
    msg = vt_last_error();
    if (!strstr(msg, "need 2 slots (one whole expert each") || !strstr(msg, "expert_cache.slots=2"))
        fail_msg("below-minimum arena of whole experts not refused with the minimum: %s", msg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_min_arena_bit_identical),
        cmocka_unit_test(test_prefetch_bit_identical),
        cmocka_unit_test(test_slot_unit_matrix_bit_identical),
        cmocka_unit_test(test_fused_equals_ops),
        cmocka_unit_test(test_below_minimum_refused),
        cmocka_unit_test(test_slot_classes_bit_identical),
        cmocka_unit_test(test_cuda_device_store),
    };
    int rc = cmocka_run_group_tests(tests, setup, NULL);
    cJSON_Delete(index_json);
    cJSON_Delete(greedy_json);
    return vt_test_exit(rc);
}
