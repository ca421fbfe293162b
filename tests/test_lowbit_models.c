/*
 * test_lowbit_models.c - the trained qwen35moe model in the low-bit mixes of
 * ../shared/fixtures/qwen35moe-trained-lowbit/ (routed experts in IQ1_S,
 * IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, TQ1_0 / IQ1_XXXS, IQ1_XXS,
 * IQ1_XS, TQ2_0, NVFP4, Q1_0, Q2_0 / IQ1_XXXS everywhere) against llama.cpp's
 * own logits on the same files, by the fixture README's criterion:
 *   - mean |Δ| over all 54 x 4096 logits of seq54 <= 0.25, and
 *   - the same argmax at every position where llama.cpp's top-1/top-2
 *     margin is at least 0.5;
 * on the CPU backend's default kernels, through prefill (all 54 positions in
 * one call) and decode (one token per call), both on int8 activations as
 * llama.cpp computes, resident, and streamed through the minimum device
 * arena (top-k slots), which must equal resident bit for bit (with fills and
 * evictions counted, so a bypassed streamer fails).
 *
 * Built twice: test_lowbit_models on device "cpu", and (VT_LOWBIT_DEVICE
 * "cuda") test_lowbit_models_cuda on backend-cuda's kernels (decode: int8
 * activations for every type of the files; prefill: tensor cores on the
 * activations rounded to int8 blocks first). Without
 * a CUDA device that one skips
 * loudly (77); a plugin that should have been built under CI=true fails.
 */
#include "test_util.h"
#include "test_backend_load.h"

#include <cjson/cJSON.h>
#include <math.h>

#include "config.h"
#include "engine.h"
#include "error.h"
#include "expert_streamer.h"
#include "residency.h"

#ifndef VT_LOWBIT_DEVICE
#define VT_LOWBIT_DEVICE "cpu"
#define VT_GPU_TEST_BUILT 1
#define VT_GPU_TEST_REQUIRED 0
#define VT_GPU_TEST_WHY ""
#endif
#define DEV VT_LOWBIT_DEVICE

#define SEQ 54
#define VOCAB 4096

static const char *const files[] = {"trained-lowbit-iq", "trained-lowbit-fork",
                                    "trained-ud-iq1_xxxs"};
#define N_FILES (sizeof files / sizeof files[0])

static char *g_dir;
static int32_t g_ids[SEQ];

static int load_index(void)
{
    if (g_dir) return 1;
    const char *fx = vt_test_fixtures();
    if (!fx) return 0;
    g_dir = vt_test_path(fx, "qwen35moe-trained-lowbit");
    char *ip = vt_test_path(g_dir, "refs/index.json");
    char *txt = vt_test_read_file(ip, NULL);
    free(ip);
    assert_non_null(txt);
    cJSON *root = cJSON_Parse(txt);
    free(txt);
    assert_non_null(root);
    cJSON *ids = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "seq54"), "ids");
    assert_int_equal(cJSON_GetArraySize(ids), SEQ);
    for (int i = 0; i < SEQ; i++) g_ids[i] = cJSON_GetArrayItem(ids, i)->valueint;
    cJSON_Delete(root);
    return 1;
}

static vt_engine *open_file(const char *name, const char *const *sets)
{
    char rel[128];
    snprintf(rel, sizeof rel, "gguf/%s.gguf", name);
    char *path = vt_test_path(g_dir, rel);
    static vt_config cfg;
    vt_config_defaults(&cfg);
    for (int i = 0; sets && sets[i]; i++)
        if (vt_config_set_arg(&cfg, sets[i]) != VT_OK) fail_msg("%s", vt_last_error());
    vt_engine_params p = {.model_path = path, .plugin_dir = vt_test_plugin_dir(), .device = DEV,
                          .n_threads = 2, .n_ctx = 128, .n_batch = 64, .config = &cfg};
    vt_engine *e = NULL;
    if (vt_engine_open(&p, &e) != VT_OK) fail_msg("%s: %s", path, vt_last_error());
    free(path);
    vt_model_info info;
    vt_engine_model_info(e, &info);
    assert_int_equal(info.n_vocab, VOCAB);
    return e;
}

static float *eval_seq(vt_engine *e)
{
    float *out = malloc(sizeof(float) * SEQ * VOCAB);
    assert_non_null(out);
    assert_int_equal(vt_engine_reset(e), VT_OK);
    if (vt_engine_eval(e, g_ids, SEQ, out, 1) != VT_OK) fail_msg("eval: %s", vt_last_error());
    return out;
}

/* The same logits through the decode path: one token per call (the backend's
 * one-token kernels: int8 activations with integer dot products). */
static float *eval_decode(vt_engine *e)
{
    float *out = malloc(sizeof(float) * SEQ * VOCAB);
    assert_non_null(out);
    assert_int_equal(vt_engine_reset(e), VT_OK);
    for (int t = 0; t < SEQ; t++)
        if (vt_engine_eval(e, &g_ids[t], 1, out + (size_t)t * VOCAB, 0) != VT_OK)
            fail_msg("decode step %d: %s", t, vt_last_error());
    return out;
}

static int argmax(const float *row, double *margin)
{
    int a = 0, b = -1;
    for (int i = 1; i < VOCAB; i++) {
        if (row[i] > row[a]) {
            b = a;
            a = i;
        } else if (b < 0 || row[i] > row[b]) {
            b = i;
        }
    }
    if (margin) *margin = (double)row[a] - (double)row[b];
    return a;
}

/* The one known shortfall: vt's prefill multiplies the Q4_K/Q6_K/Q8_0/IQ4_NL
 * tensors with exact float activations (backend-cuda: float or TF32) where
 * llama.cpp rounds them to 8 bits (its decode path does round: there the
 * criterion holds everywhere); on trained-lowbit-iq that moves position 6,
 * where llama.cpp's margin is 1.22, to another token, on the CPU (by 0.56)
 * and on CUDA (by 0.55) alike. Emulating llama.cpp's 8-bit rounding in every
 * matmul meets the criterion there (mean |d| 0.153), so it is rounding, not a
 * misread weight. Listed, printed, and allowed nowhere else. (Decode on
 * backend-cuda flipped trained-ud-iq1_xxxs position 28, where llama.cpp's
 * margin is 0.504, while some types' int8 kernels were missing; with every
 * type on int8 activations it is met, and is not listed.) */
/* The README's criterion; prints the figures; returns 1 when met. */
static int judge(const char *name, const float *got, const float *ref)
{
    double sum = 0, max = 0;
    int checked = 0, agree = 0, top1 = 0;
    for (int t = 0; t < SEQ; t++) {
        const float *a = got + (size_t)t * VOCAB, *b = ref + (size_t)t * VOCAB;
        for (int i = 0; i < VOCAB; i++) {
            double d = fabs((double)a[i] - (double)b[i]);
            if (!(d == d)) d = INFINITY;
            sum += d;
            if (d > max) max = d;
        }
        double margin;
        int ra = argmax(b, &margin), ga = argmax(a, NULL);
        top1 += ra == ga;
        if (margin >= 0.5) {
            checked++;
            agree += ra == ga;
            if (ra != ga)
                print_message("[lowbit] %s position %d: llama.cpp's top-1 %d leads by %.3f; "
                              "vt's top-1 %d (vt: %.3f vs %.3f)\n", name, t, ra, margin, ga,
                              (double)a[ga], (double)a[ra]);
        }
    }
    double mean = sum / (SEQ * VOCAB);
    int ok = mean <= 0.25 && agree == checked;
    print_message("[lowbit] %-30s mean|d| %.4f  max|d| %.3f  argmax %d/%d where margin >= 0.5 "
                  "(%d/%d overall): %s\n", name, mean, max, agree, checked, top1, SEQ,
                  ok ? "met" : "NOT met");
    return ok;
}

static float *read_ref(const char *name)
{
    char rel[160];
    snprintf(rel, sizeof rel, "refs/%s-logits-seq54.f32.bin", name);
    char *p = vt_test_path(g_dir, rel);
    size_t len = 0;
    float *r = vt_test_read_file(p, &len);
    free(p);
    if (!r || len != sizeof(float) * SEQ * VOCAB) fail_msg("%s: %zu bytes", rel, len);
    return r;
}

/* 1 when the device's backend is there and has a device; else skipped (0) */
static int device_ready(void)
{
    if (!strcmp(DEV, "cpu")) return 1;
    if (!VT_GPU_TEST_BUILT) {
        if (VT_GPU_TEST_REQUIRED)
            fail_msg("backend-" DEV " was not built although CMake ran with CI=true and found its "
                     "toolchain: %s", VT_GPU_TEST_WHY);
        fprintf(stderr, "\n*** SKIPPING: backend-" DEV " was not built: %s\n\n", VT_GPU_TEST_WHY);
        vt_test_fixtures_skipped = 1;
        skip();
        return 0;
    }
    const vt_backend_api *api = (const vt_backend_api *)vt_test_load_backend(DEV)->table;
    if (api->device_count() == 0) {
        fprintf(stderr, "\n*** SKIPPING: backend-" DEV " reports no device on this machine (the "
                "low-bit files run there on the GPU machine)\n\n");
        vt_test_fixtures_skipped = 1;
        skip();
        return 0;
    }
    return 1;
}

static void test_resident_and_streamed(void **state)
{
    (void)state;
    if (!device_ready() || !load_index()) return;
    int n_fail = 0;
    for (size_t f = 0; f < N_FILES; f++) {
        float *ref = read_ref(files[f]);
        const char *resident[] = {DEV ".experts=resident", NULL};
        vt_engine *e = open_file(files[f], resident);
        const uint64_t min_slots = vt_engine_fit(e)->min_slots;
        float *lr = eval_seq(e);
        float *dr = eval_decode(e);
        vt_engine_close(e);
        char what[96];
        snprintf(what, sizeof what, "%s prefill%s", files[f], strcmp(DEV, "cpu") ? " " DEV : "");
        n_fail += !judge(what, lr, ref);
        snprintf(what, sizeof what, "%s decode%s", files[f], strcmp(DEV, "cpu") ? " " DEV : "");
        n_fail += !judge(what, dr, ref);

        char slots[64];
        snprintf(slots, sizeof slots, DEV ".expert_cache.slots=%llu", (unsigned long long)min_slots);
        const char *streamed[] = {DEV ".experts=streamed", slots, NULL};
        e = open_file(files[f], streamed);
        const vt_expert_streamer *s = vt_engine_streamer(e);
        if (!s) fail_msg("%s: experts not streamed", files[f]);
        float *ls = eval_seq(e);
        float *ds = eval_decode(e);
        vt_expert_stats st;
        assert_int_equal(vt_streamer_stats(s, -1, &st), VT_OK);
        if (st.misses == 0 || st.evictions == 0)
            fail_msg("%s: the streamer was bypassed (misses %llu, evictions %llu)", files[f],
                     (unsigned long long)st.misses, (unsigned long long)st.evictions);
        vt_engine_close(e);
        if (memcmp(lr, ls, sizeof(float) * SEQ * VOCAB)) {
            int64_t i = 0;
            while (lr[i] == ls[i]) i++;
            fail_msg("%s: streamed (%llu slots) differs from resident at %lld: %.9g vs %.9g",
                     files[f], (unsigned long long)min_slots, (long long)i, (double)ls[i],
                     (double)lr[i]);
        }
        if (memcmp(dr, ds, sizeof(float) * SEQ * VOCAB))
            fail_msg("%s: streamed decode differs from resident decode", files[f]);
        print_message("[lowbit] %-22s streamed through %llu slots (%llu misses, %llu evictions) "
                      "equals resident bit for bit\n", files[f], (unsigned long long)min_slots,
                      (unsigned long long)st.misses, (unsigned long long)st.evictions);
        free(lr);
        free(ls);
        free(dr);
        free(ds);
        free(ref);
    }
    if (n_fail) fail_msg("%d low-bit file(s) miss the fixture criterion (see above)", n_fail);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resident_and_streamed),
    };
    int r = cmocka_run_group_tests(tests, NULL, NULL);
    free(g_dir);
    return vt_test_exit(r);
}
