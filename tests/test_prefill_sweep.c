/*
 * test_prefill_sweep.c - every prefill length and every chunk size, on every
 * fixture model, through the engine (issue: "every prefill chunk length
 * right"). A prefill of exactly 4 tokens once gave wrong qwen35 logits on the
 * CPU because 4 tokens x 4 DeltaNet heads made a broadcast add read as one
 * row; no test used a 4-token chunk. These cases leave no length out:
 *
 *   prefix sweep  for every L in 1..N, the first L tokens of the reference
 *                 prompt in ONE chunk: every position meets the fixture's
 *                 criterion against the reference, and (reference kernels)
 *                 equals the same position of the full N-token chunk bit for
 *                 bit (a causal model's position t does not depend on L);
 *   chunk sweep   for every chunk size c in 1..N (n_batch = c), the whole
 *                 prompt equals one chunk: bit for bit on the CPU (reference
 *                 and fast kernels: each row is computed as it is alone,
 *                 whatever the batch), within 1e-4 of max |logit| per
 *                 position on a GPU (qwen35moe.md §6);
 *   greedy        the trained model's refs/greedy.json (4 prompts x 48
 *                 tokens, made without stopping at end-of-generation)
 *                 reproduced token for token on the bf16 file in one chunk and
 *                 with n_batch 1..8, experts resident and streamed through
 *                 the minimum arena (top-k x 3 slots).
 *
 * Fixture criteria (../shared/fixtures/README.md, "How to compare"):
 *   f32-exact files (bf16 / f16 GGUF, weights equal to f32): max |Δ| <= 1e-2 at
 *     every position and the same argmax wherever the reference top-1/top-2
 *     gap exceeds 1e-3;
 *   q8_0 (lossy): a smoke test, mean |Δ| over the positions of the prefix
 *     <= 0.5 on the float path, <= 0.8 on the integer path (int8
 *     activations, as llama.cpp's CPU computes; the README measures
 *     llama.cpp's per-prompt mean at up to 0.36 over whole prompts, and a
 *     short prefix averages fewer positions: 0.57 at 9 tokens); both well
 *     below the logit std of 1.6;
 *   qwen35moe-trained (no logit file): the reference sequence is the prompt
 *     followed by its 48 greedy tokens, so the argmax at every position from
 *     the last prompt token on must be the next token of that sequence.
 *
 *   shapes        generated qwen35moe models (vt mkmodel) whose DeltaNet head
 *                 counts and conv kernel differ from the fixtures' (value heads
 *                 2, 6, 8, 16 and 32, the count of Qwen3.5-35B-A3B; conv
 *                 kernels 3 and 5): every prefix 1..N equals the N-token chunk
 *                 and every chunk size equals one chunk, bit for bit on the
 *                 reference kernels (a size that coincides with a model
 *                 dimension has nowhere to hide).
 *
 * The same source builds test_prefill_sweep (device "cpu": reference and
 * fast kernels) and test_prefill_sweep_cuda (device "cuda", run on the H200;
 * skips loudly without a CUDA device, like test_cuda_ops).
 */
#include "test_util.h"

#include <cJSON.h>
#include <math.h>
#include <unistd.h>

#include "config.h"
#include "engine.h"
#include "error.h"
#include "mkmodel.h"

#ifndef VT_SWEEP_DEVICE
#define VT_SWEEP_DEVICE "cpu"
#endif
#ifndef VT_GPU_TEST_BUILT
#define VT_GPU_TEST_BUILT 1
#define VT_GPU_TEST_REQUIRED 0
#define VT_GPU_TEST_WHY ""
#endif

static const int g_cpu = !strcmp(VT_SWEEP_DEVICE, "cpu") ? 1 : 0;

typedef enum { CRIT_F32, CRIT_Q8, CRIT_GREEDY, CRIT_NONE } crit_kind;

typedef struct sweep_file {
    const char *label;
    const char *path;   /* relative to the fixture folder */
    const char *refdir; /* fixture with refs/index.json (prompt "len40"), or NULL: the
                           trained model's refs/greedy.json case 0 */
    crit_kind crit;
    int fast_exact;     /* fast kernels are held to the f32 criterion as well */
} sweep_file;

static const sweep_file g_files[] = {
    {"qwen35moe-tiny bf16", "qwen35moe-tiny/gguf/qwen35moe-tiny-bf16.gguf", "qwen35moe-tiny",
     CRIT_F32, 1},
    {"qwen35moe-tiny q8_0", "qwen35moe-tiny/gguf/qwen35moe-tiny-q8_0.gguf", "qwen35moe-tiny",
     CRIT_Q8, 0},
    {"qwen35moe-tiny q8_0 split",
     "qwen35moe-tiny/gguf/split/qwen35moe-tiny-q8_0-split-00001-of-00003.gguf", "qwen35moe-tiny",
     CRIT_Q8, 0},
    {"gemma4-moe-tiny f16", "gemma4-moe-tiny/gguf/gemma4-moe-tiny-f16.gguf", "gemma4-moe-tiny",
     CRIT_F32, 1},
    {"qwen35moe-trained bf16", "qwen35moe-trained/gguf/qwen35moe-trained-bf16-00001-of-00003.gguf",
     NULL, CRIT_GREEDY, 1},
    {"qwen35moe-trained q8_0", "qwen35moe-trained/gguf/qwen35moe-trained-q8_0.gguf", NULL,
     CRIT_NONE, 0},
};
#define N_FILES (sizeof g_files / sizeof g_files[0])

/* the reference of one file: token ids, and either logits (+ argmax, margin)
 * or the number of prompt tokens before the greedy continuation */
typedef struct sweep_ref {
    int32_t *ids;
    int n;
    float *logits;  /* [n][n_vocab] or NULL */
    int *argmax;    /* [n] */
    double *margin; /* [n] */
    int n_prompt;   /* CRIT_GREEDY: ids[n_prompt..] are the greedy tokens */
    int64_t n_vocab;
} sweep_ref;

static const char *g_fx;
static int g_device_state; /* 0 not tried, 1 usable, -1 skipped */

static void skip_banner(const char *why)
{
    fprintf(stderr,
            "\n**********************************************************************\n"
            "*** SKIPPING test_prefill_sweep on device '%s': %s\n"
            "**********************************************************************\n\n",
            VT_SWEEP_DEVICE, why);
    vt_test_fixtures_skipped = 1;
}

static int *json_ints(const cJSON *a, int *n)
{
    if (!cJSON_IsArray(a)) fail_msg("expected a JSON array");
    *n = cJSON_GetArraySize(a);
    int *v = malloc(sizeof(int) * (size_t)(*n ? *n : 1));
    assert_non_null(v);
    for (int i = 0; i < *n; i++) v[i] = (int)cJSON_GetArrayItem(a, i)->valuedouble;
    return v;
}

static cJSON *read_json(const char *rel)
{
    char *path = vt_test_path(g_fx, rel);
    if (!vt_test_fixture_file(path)) /* a partial copy: skipped loudly (fails under CI=true) */
        fail_msg("fixture file %s is absent", path); /* not reached: skip() leaves the case */
    char *txt = vt_test_read_file(path, NULL);
    cJSON *j = cJSON_Parse(txt);
    if (!j) fail_msg("%s is not JSON", path);
    free(txt);
    free(path);
    return j;
}

static void load_ref(const sweep_file *f, sweep_ref *r)
{
    memset(r, 0, sizeof *r);
    if (f->refdir) {
        char rel[256];
        snprintf(rel, sizeof rel, "%s/refs/index.json", f->refdir);
        cJSON *root = read_json(rel);
        const cJSON *p = NULL, *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(root, "prompts"))
            if (!strcmp(cJSON_GetObjectItem(it, "name")->valuestring, "len40")) p = it;
        if (!p) fail_msg("%s: no prompt 'len40'", rel);
        r->ids = (int32_t *)json_ints(cJSON_GetObjectItem(p, "prompt_ids"), &r->n);
        int n;
        r->argmax = json_ints(cJSON_GetObjectItem(p, "argmax_per_position"), &n);
        assert_int_equal(n, r->n);
        const cJSON *mg = cJSON_GetObjectItem(p, "top1_minus_top2_per_position");
        assert_int_equal(cJSON_GetArraySize(mg), r->n);
        r->margin = malloc(sizeof(double) * (size_t)r->n);
        for (int t = 0; t < r->n; t++) r->margin[t] = cJSON_GetArrayItem(mg, t)->valuedouble;
        r->n_vocab = (int64_t)cJSON_GetArrayItem(cJSON_GetObjectItem(p, "shape"), 1)->valuedouble;
        snprintf(rel, sizeof rel, "%s/refs/%s", f->refdir,
                 cJSON_GetObjectItem(p, "file")->valuestring);
        char *lp = vt_test_path(g_fx, rel);
        size_t len;
        r->logits = vt_test_read_file(lp, &len);
        assert_int_equal(len, (size_t)r->n * (size_t)r->n_vocab * sizeof(float));
        free(lp);
        cJSON_Delete(root);
    } else {
        cJSON *root = read_json("qwen35moe-trained/refs/greedy.json");
        const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "cases"), 0);
        int np, ng;
        int *p = json_ints(cJSON_GetObjectItem(c, "prompt_ids"), &np);
        int *g = json_ints(cJSON_GetObjectItem(c, "new_ids"), &ng);
        r->n = np + ng;
        r->n_prompt = np;
        r->ids = malloc(sizeof(int32_t) * (size_t)r->n);
        for (int i = 0; i < np; i++) r->ids[i] = p[i];
        for (int i = 0; i < ng; i++) r->ids[np + i] = g[i];
        free(p);
        free(g);
        cJSON_Delete(root);
    }
}

static void free_ref(sweep_ref *r)
{
    free(r->ids);
    free(r->logits);
    free(r->argmax);
    free(r->margin);
}

static vt_config g_cfg;

/* An engine on the file with prefill chunks of n_batch tokens; sets are
 * --set overrides. NULL when the device is skipped (after skip()). */
static vt_engine *open_engine(const char *rel, const char *kernels, uint32_t n_batch,
                              const char *const *sets)
{
    char *path = vt_test_path(g_fx, rel);
    if (!vt_test_fixture_file(path)) {
        free(path);
        return NULL;
    }
    vt_config_defaults(&g_cfg);
    for (int i = 0; sets && sets[i]; i++)
        if (vt_config_set_arg(&g_cfg, sets[i]) != VT_OK) fail_msg("--set %s: %s", sets[i],
                                                                  vt_last_error());
    vt_engine_params p = {.model_path = path, .plugin_dir = vt_test_plugin_dir(),
                          .device = VT_SWEEP_DEVICE, .n_threads = g_cpu ? 2 : 0,
                          .kernels = g_cpu ? kernels : NULL, .n_ctx = 128, .n_batch = n_batch,
                          .config = &g_cfg};
    vt_engine *e = NULL;
    vt_status st = vt_engine_open(&p, &e);
    if (st != VT_OK) {
        const char *msg = vt_last_error();
        if (!g_cpu && g_device_state == 0 && strstr(msg, "zero devices")) {
            g_device_state = -1;
            skip_banner("the CUDA backend reports no device (these cases run on the H200)");
            free(path);
            skip();
            return NULL;
        }
        fail_msg("vt_engine_open(%s, device %s, kernels %s, n_batch %u): %s", path,
                 VT_SWEEP_DEVICE, kernels ? kernels : "auto", n_batch, msg);
    }
    g_device_state = 1;
    free(path);
    return e;
}

/* 1 when the cases of this binary can run; otherwise they are skipped. */
static int ready(void)
{
    if (!g_fx) g_fx = vt_test_fixtures();
    if (!g_fx) return 0;
    if (g_device_state < 0) {
        skip();
        return 0;
    }
    if (!g_cpu && !VT_GPU_TEST_BUILT) {
        if (VT_GPU_TEST_REQUIRED)
            fail_msg("backend-cuda was not built although CMake ran with CI=true and found its "
                     "toolchain: %s", VT_GPU_TEST_WHY);
        g_device_state = -1;
        skip_banner("backend-cuda was not built: " VT_GPU_TEST_WHY);
        skip();
        return 0;
    }
    if (g_device_state == 0) {
        /* probe the device once, before a case allocates anything: skip()
         * leaves the case at once, so nothing may be left to free then */
        size_t probe = 0; /* the first file a VT_SWEEP_FILES subset holds */
        const char *sel = getenv("VT_SWEEP_FILES");
        if (sel && *sel) {
            long v = strtol(sel, NULL, 10);
            if (v >= 0 && (size_t)v < N_FILES) probe = (size_t)v;
        }
        vt_engine *e = open_engine(g_files[probe].path, "scalar", 8, NULL);
        if (!e) return 0;
        vt_engine_close(e);
    }
    return 1;
}

/* Logits of every position of ids[0..n) from a fresh sequence. */
static float *eval_all(vt_engine *e, const int32_t *ids, int n, int64_t n_vocab)
{
    float *out = malloc(sizeof(float) * (size_t)n * (size_t)n_vocab);
    assert_non_null(out);
    assert_int_equal(vt_engine_reset(e), VT_OK);
    if (vt_engine_eval(e, ids, n, out, 1) != VT_OK) fail_msg("eval of %d tokens: %s", n,
                                                             vt_last_error());
    return out;
}

static int argmax_row(const float *row, int64_t n)
{
    int best = 0;
    for (int64_t i = 1; i < n; i++)
        if (row[i] > row[best]) best = (int)i;
    return best;
}

/* Positions 0..L-1 of got against the reference by the file's criterion;
 * returns the largest |Δ| (logit files) and fails with the position. */
static double check_ref(const sweep_file *f, const sweep_ref *r, const float *got, int L,
                        const char *what, int exact, int rounds)
{
    double worst = 0, sum = 0;
    for (int t = 0; t < L; t++) {
        const float *a = got + (size_t)t * r->n_vocab;
        int am = argmax_row(a, r->n_vocab);
        if (f->crit == CRIT_GREEDY) {
            if (t >= r->n_prompt - 1 && t + 1 < r->n && am != r->ids[t + 1])
                fail_msg("%s: prefix of %d tokens, position %d: argmax %d, the reference "
                         "continuation has %d", what, L, t, am, r->ids[t + 1]);
            continue;
        }
        if (!r->logits) continue;
        const float *b = r->logits + (size_t)t * r->n_vocab;
        double row = 0;
        for (int64_t v = 0; v < r->n_vocab; v++) {
            double d = fabs((double)a[v] - (double)b[v]);
            if (!(d == d)) d = INFINITY;
            sum += d;
            if (d > row) row = d;
        }
        if (row > worst) worst = row;
        if (f->crit == CRIT_F32 && exact) {
            if (!(row <= 1e-2))
                fail_msg("%s: prefix of %d tokens, position %d: max |d| %.4g vs the reference "
                         "> 1e-2", what, L, t, row);
            if (r->margin[t] > 1e-3 && am != r->argmax[t])
                fail_msg("%s: prefix of %d tokens, position %d: argmax %d, reference %d "
                         "(margin %.3g)", what, L, t, am, r->argmax[t], r->margin[t]);
        }
    }
    if (f->crit == CRIT_Q8 || (f->crit == CRIT_F32 && !exact)) {
        double mean = sum / ((double)L * (double)r->n_vocab);
        double lim = f->crit == CRIT_Q8 ? (rounds ? 0.8 : 0.5) : 0.1;
        if (!(mean <= lim))
            fail_msg("%s: prefix of %d tokens: mean |d| %.4g vs the reference > %.2g", what, L,
                     mean, lim);
    }
    return worst;
}

/* rows 0..L-1 of a and b: bit for bit (exact) or per position within 1e-4 of
 * max |logit|; returns the largest |Δ|. */
static double check_same(const float *a, const float *b, int L, int64_t n_vocab, int exact,
                         const char *what, const char *which, int arg)
{
    double worst = 0;
    for (int t = 0; t < L; t++) {
        const float *x = a + (size_t)t * n_vocab, *y = b + (size_t)t * n_vocab;
        double mx = 0, md = 0;
        for (int64_t v = 0; v < n_vocab; v++) {
            if (fabs(x[v]) > mx) mx = fabs(x[v]);
            double d = fabs((double)x[v] - (double)y[v]);
            if (!(d <= md)) md = d;
        }
        if (md > worst) worst = md;
        if (exact && memcmp(x, y, sizeof(float) * (size_t)n_vocab))
            fail_msg("%s: %s %d, position %d differs from one chunk of the whole prompt "
                     "(max |d| %.4g; the reference kernels must agree bit for bit)", what, which,
                     arg, t, md);
        if (!exact && !(md <= 1e-4 * mx))
            fail_msg("%s: %s %d, position %d: max |d| %.4g > 1e-4 * max |logit| %.4g", what,
                     which, arg, t, md, mx);
    }
    return worst;
}

/* the kernel sets a file is swept with: on the CPU the reference kernels
 * (bit-exact checks) and the fast ones; a GPU has one set */
static int kernel_sets(const char **sets)
{
    if (!g_cpu) {
        sets[0] = NULL;
        return 1;
    }
    sets[0] = "scalar";
    sets[1] = "auto";
    return 2;
}

#ifdef VT_TEST_SANITIZED
/* sanitizer builds run at -O0: the reference kernels on the first and the
 * gemma4 file keep the suite short; the release build runs them all */
static int file_selected(size_t i) { return i == 0 || i == 3; }
static int kernels_selected(int k) { return k == 0; }
#else
/* VT_SWEEP_FILES=0,3,4 limits a run to those entries of g_files (a device run
 * whose copy of the fixtures holds only some files); printed, never silent */
static int file_selected(size_t i)
{
    const char *sel = getenv("VT_SWEEP_FILES");
    if (!sel || !*sel) return 1;
    for (const char *p = sel; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) fail_msg("VT_SWEEP_FILES='%s': expected indices like 0,3,4", sel);
        if (v == (long)i) return 1;
        p = *end == ',' ? end + 1 : end;
    }
    printf("[sweep] %s: not selected by VT_SWEEP_FILES=%s\n", g_files[i].label, sel);
    return 0;
}
static int kernels_selected(int k) { (void)k; return 1; }
#endif

/* The CPU's fast kernels compute each row the same way whatever the batch
 * (batch invariance, issue 43 item 5): their chunks and prefixes are held to
 * one chunk bit for bit, like the reference kernels'. A GPU's kernels round
 * differently with the number of tokens (a matvec for few, tensor-core GEMMs
 * for more): held to 1e-4 of max |logit|, except on lossy q8_0 files whose
 * integer path moves the router (test_quant_models bounds that path). */
static int fast_comparable(const sweep_file *f) { return f->fast_exact || f->crit == CRIT_Q8; }

/* On a GPU one-token matmuls and the experts of chunks of up to 8 tokens
 * take int8 activations (unless VT_GPU_INT8_DOT=0), and longer chunks round
 * them to int8 blocks and then TF32 on tensor cores (unless VT_GPU_GEMM is
 * cublas or tiled): on a q8_0 file those runs are held to the reference
 * criterion, at every prefix and every chunk size, not to each other. */
static int gpu_int8(void)
{
    /* and prefill chunks of more than 8 tokens on TF32 tensor cores
     * (gpu_mma.cu) unless VT_GPU_GEMM is cublas or tiled */
    const char *q = getenv("VT_GPU_INT8_DOT"), *g = getenv("VT_GPU_GEMM");
    int int8 = !(q && !strcmp(q, "0")), tc = !(g && (!strcmp(g, "cublas") || !strcmp(g, "tiled")));
    return !g_cpu && (int8 || tc);
}
/* The kernels round a q8_0 file's activations to int8: the CPU's fast
 * kernels (at every batch size) and a GPU's int8 / tensor-core paths. */
static int rounds_int8(const sweep_file *f, int exact_kernels)
{
    if (f->crit != CRIT_Q8 || exact_kernels) return 0;
    return g_cpu || gpu_int8();
}
/* Held to the reference instead of to one chunk: a GPU whose rounding
 * depends on the chunk (the CPU's does not: each row is computed as it is
 * alone, whatever the batch, so its chunks and prefixes equal one chunk bit
 * for bit). */
static int int8_path(const sweep_file *f, int exact_kernels)
{
    return !g_cpu && rounds_int8(f, exact_kernels);
}

/* One sweep case: file f with its reference r on one kernel set ("scalar",
 * "auto", or NULL on a GPU), named `what` in messages. */
typedef void (*sweep_case_fn)(const sweep_file *f, sweep_ref *r, const char *kernels,
                              int exact_kernels, const char *what);

/* Every selected file on every kernel set it is swept with. */
static void for_each_case(sweep_case_fn fn)
{
    const char *ks[2];
    int nk = kernel_sets(ks);
    for (size_t fi = 0; fi < N_FILES; fi++) {
        if (!file_selected(fi)) continue;
        const sweep_file *f = &g_files[fi];
        sweep_ref r;
        load_ref(f, &r);
        for (int k = 0; k < nk; k++) {
            if (!kernels_selected(k)) continue;
            int exact_kernels = g_cpu && !strcmp(ks[k], "scalar");
            /* a lossy file without a logit reference has nothing to hold
             * rounded activations to (its q8_0 products are swept with the
             * reference kernels, and on a GPU with VT_GPU_INT8_DOT=0
             * VT_GPU_GEMM=cublas) */
            if (!g_cpu && gpu_int8() && !exact_kernels && !fast_comparable(f)) continue;
            char what[256];
            snprintf(what, sizeof what, "%s, device %s, kernels %s", f->label, VT_SWEEP_DEVICE,
                     ks[k] ? ks[k] : "default");
            fn(f, &r, ks[k], exact_kernels, what);
        }
        free_ref(&r);
    }
}

/* The full prompt in one chunk from a fresh engine with n_batch = N; fills
 * r->n_vocab for files without a logit reference. */
static float *one_chunk(const sweep_file *f, sweep_ref *r, const char *kernels, vt_engine **keep)
{
    vt_engine *e = open_engine(f->path, kernels, (uint32_t)r->n, NULL);
    vt_model_info info;
    vt_engine_model_info(e, &info);
    if (!r->n_vocab) r->n_vocab = info.n_vocab;
    assert_int_equal(info.n_vocab, r->n_vocab);
    float *full = eval_all(e, r->ids, r->n, r->n_vocab);
    if (keep) *keep = e;
    else vt_engine_close(e);
    return full;
}

static void prefix_case(const sweep_file *f, sweep_ref *r, const char *kernels,
                        int exact_kernels, const char *what)
{
    vt_engine *e;
    float *full = one_chunk(f, r, kernels, &e);
    /* exact criterion on the reference kernels, on a GPU and on the fast
     * kernels of f32-exact files alike */
    int exact_crit = exact_kernels || !g_cpu || f->fast_exact;
    double worst_ref = 0, worst_full = 0;
    for (int L = 1; L <= r->n; L++) {
        float *got = eval_all(e, r->ids, L, r->n_vocab);
        double w = check_ref(f, r, got, L, what, exact_crit, rounds_int8(f, exact_kernels));
        if (w > worst_ref) worst_ref = w;
        if (!int8_path(f, exact_kernels)) {
            w = check_same(full, got, L, r->n_vocab, exact_kernels || g_cpu, what, "prefix of", L);
            if (w > worst_full) worst_full = w;
        }
        free(got);
    }
    char vs_ref[64] = "argmax = the reference continuation";
    if (r->logits) snprintf(vs_ref, sizeof vs_ref, "max |d| vs reference %.3g", worst_ref);
    else if (f->crit == CRIT_NONE) snprintf(vs_ref, sizeof vs_ref, "no reference");
    printf("[sweep] %-48s prefixes 1..%d in one chunk: %s, vs the %d-token chunk "
           "%.3g%s\n", what, r->n, vs_ref, r->n, worst_full, exact_kernels ? " (bit-exact)" : "");
    fflush(stdout);
    free(full);
    vt_engine_close(e);
}

static void chunk_case(const sweep_file *f, sweep_ref *r, const char *kernels, int exact_kernels,
                       const char *what)
{
    float *one = one_chunk(f, r, kernels, NULL);
    double worst = 0;
    for (int c = 1; c < r->n; c++) {
        vt_engine *e = open_engine(f->path, kernels, (uint32_t)c, NULL);
        float *got = eval_all(e, r->ids, r->n, r->n_vocab);
        vt_engine_close(e);
        double w;
        if (int8_path(f, exact_kernels)) {
            char w1[300];
            snprintf(w1, sizeof w1, "%s, chunks of %d (integer path)", what, c);
            w = check_ref(f, r, got, r->n, w1, 1, 1);
        } else {
            w = check_same(one, got, r->n, r->n_vocab, exact_kernels || g_cpu, what, "chunks of", c);
        }
        if (w > worst) worst = w;
        free(got);
    }
    printf("[sweep] %-48s chunks of 1..%d vs %s: max |d| %.3g%s\n", what, r->n - 1,
           int8_path(f, exact_kernels) ? "the reference (mean criterion)" : "one chunk", worst,
           exact_kernels ? " (bit-exact)" : "");
    fflush(stdout);
    free(one);
}

static void test_prefix_sweep(void **state)
{
    (void)state;
    if (ready()) for_each_case(prefix_case);
}

static void test_chunk_sweep(void **state)
{
    (void)state;
    if (ready()) for_each_case(chunk_case);
}

/* the trained model's four greedy references, 48 tokens each, on the bf16
 * file: one chunk and n_batch 1..8, resident and streamed */
static void test_trained_greedy(void **state)
{
    (void)state;
    if (!ready()) return;
    if (!file_selected(4)) return;
    cJSON *root = read_json("qwen35moe-trained/refs/greedy.json");
    const cJSON *cases = cJSON_GetObjectItem(root, "cases");
    const int n_cases = cJSON_GetArraySize(cases);
    assert_true(n_cases >= 4);
    char streamed[64], slots[64];
    snprintf(streamed, sizeof streamed, "%s.experts=streamed", VT_SWEEP_DEVICE);
    /* the minimum arena: top-4 experts x gate/up/down */
    snprintf(slots, sizeof slots, "%s.expert_cache.slots=12", VT_SWEEP_DEVICE);
    const char *resident_sets[] = {NULL};
    const char *streamed_sets[] = {streamed, slots, NULL};
    const char *const *residency[2] = {resident_sets, streamed_sets};
#ifdef VT_TEST_SANITIZED
    static const uint32_t batches[] = {512, 1, 4};
#else
    static const uint32_t batches[] = {512, 1, 2, 3, 4, 5, 6, 7, 8};
#endif
    /* rs 0: resident (on a backend with graphs, decode steps replay a
     * recorded graph), 1: streamed, 2: resident with graphs off (VT_GRAPH=0) */
    for (int rs = 0; rs < 3; rs++)
        for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++) {
            if (rs == 2 && (g_cpu || bi > 1)) break; /* the CPU has no graphs */
            if (rs == 2) setenv("VT_GRAPH", "0", 1);
            vt_engine *e = open_engine(g_files[4].path, NULL, batches[bi], residency[rs % 2]);
            unsetenv("VT_GRAPH");
            if (!e) { cJSON_Delete(root); return; }
            if (rs == 1 && !vt_engine_streamer(e))
                fail_msg("--set %s: the experts are not streamed", streamed);
            vt_model_info info;
            vt_engine_model_info(e, &info);
            const char *want_path = rs == 0 && !g_cpu ? "graph" : "ops";
            if (!info.decode_path || strncmp(info.decode_path, want_path, strlen(want_path)))
                fail_msg("decode steps run as '%s', want '%s ...' (%s)",
                         info.decode_path ? info.decode_path : "(null)", want_path,
                         rs == 0 ? "resident" : rs == 1 ? "streamed" : "VT_GRAPH=0");
            float *lg = malloc(sizeof(float) * (size_t)info.n_vocab);
            for (int ci = 0; ci < n_cases; ci++) {
                const cJSON *c = cJSON_GetArrayItem(cases, ci);
                int np, ng;
                int *p = json_ints(cJSON_GetObjectItem(c, "prompt_ids"), &np);
                int *want = json_ints(cJSON_GetObjectItem(c, "new_ids"), &ng);
                int32_t *ids = malloc(sizeof(int32_t) * (size_t)np);
                for (int i = 0; i < np; i++) ids[i] = p[i];
                assert_int_equal(vt_engine_reset(e), VT_OK);
                if (vt_engine_eval(e, ids, np, lg, 0) != VT_OK) fail_msg("%s", vt_last_error());
                for (int s = 0; s < ng; s++) {
                    int32_t best = (int32_t)argmax_row(lg, info.n_vocab);
                    if (best != want[s])
                        fail_msg("greedy '%s', %s, n_batch %u, device %s: token %d is %d, the "
                                 "reference has %d",
                                 cJSON_GetObjectItem(c, "prompt_text")->valuestring,
                                 rs == 1 ? "streamed (12 slots)" : rs ? "resident, graphs off" : "resident", batches[bi],
                                 VT_SWEEP_DEVICE, s, best, want[s]);
                    if (vt_engine_eval(e, &best, 1, lg, 0) != VT_OK)
                        fail_msg("%s", vt_last_error());
                }
                free(ids);
                free(p);
                free(want);
            }
            printf("[sweep] trained bf16 greedy, %s, n_batch %u, device %s, decode %s: %d x 48 "
                   "tokens equal the reference\n",
                   rs == 1 ? "streamed through 12 slots" : "resident", batches[bi], VT_SWEEP_DEVICE,
                   info.decode_path, n_cases);
            fflush(stdout);
            free(lg);
            vt_engine_close(e);
        }
    cJSON_Delete(root);
}

/* generated shapes: causal invariance and chunk invariance without a reference
 * (no fixture needed: on the CPU this case runs everywhere) */
static void test_generated_shapes(void **state)
{
    (void)state;
    if (!g_cpu && !ready()) return;
    static const struct { uint32_t n_k, n_v, d_conv; } shapes[] = {
        {1, 2, 4}, {2, 6, 3}, {2, 8, 4}, {4, 16, 5}, {4, 32, 4},
    };
#ifdef VT_TEST_SANITIZED
    const size_t n_shapes = 2, N = 36;
#else
    const size_t n_shapes = sizeof shapes / sizeof shapes[0], N = 40;
#endif
    int32_t ids[40];
    for (size_t i = 0; i < N; i++) ids[i] = (int32_t)(3 + (i * 37) % 250);
    for (size_t si = 0; si < n_shapes; si++) {
        vt_mkmodel_params mp;
        vt_mkmodel_defaults(&mp);
        mp.n_embd = 64;
        mp.n_head = 2;
        mp.n_head_kv = 1;
        mp.head_dim = 32;
        mp.n_rot = 16;
        mp.n_expert = 8;
        mp.n_expert_used = 2;
        mp.n_ff_exp = 32;
        mp.n_ff_shexp = 32;
        mp.ssm_d_k = 16;
        mp.ssm_n_k = shapes[si].n_k;
        mp.ssm_n_v = shapes[si].n_v;
        mp.ssm_d_conv = shapes[si].d_conv;
        mp.weight_type = VT_TYPE_F32;
        mp.n_merges = 64;
        mp.seed = 77 + si;
        char path[256];
        snprintf(path, sizeof path, "/tmp/vt-sweep-shape-%d-%zu.gguf", (int)getpid(), si);
        if (vt_mkmodel_qwen35moe(path, &mp) != VT_OK) fail_msg("mkmodel: %s", vt_last_error());
        char what[128];
        snprintf(what, sizeof what, "generated qwen35moe n_k %u n_v %u d_conv %u, device %s",
                 mp.ssm_n_k, mp.ssm_n_v, mp.ssm_d_conv, VT_SWEEP_DEVICE);
        /* open_engine joins the fixture folder: give it an absolute path */
        const char *saved = g_fx;
        g_fx = "";
        vt_engine *e = open_engine(path, "scalar", (uint32_t)N, NULL);
        if (!e) { g_fx = saved; unlink(path); return; }
        vt_model_info info;
        vt_engine_model_info(e, &info);
        float *full = eval_all(e, ids, (int)N, info.n_vocab);
        double worst_p = 0, worst_c = 0;
        for (int L = 1; L < (int)N; L++) {
            float *got = eval_all(e, ids, L, info.n_vocab);
            double w = check_same(full, got, L, info.n_vocab, g_cpu, what, "prefix of", L);
            if (w > worst_p) worst_p = w;
            free(got);
        }
        vt_engine_close(e);
        for (int c = 1; c < (int)N; c++) {
            e = open_engine(path, "scalar", (uint32_t)c, NULL);
            float *got = eval_all(e, ids, (int)N, info.n_vocab);
            vt_engine_close(e);
            double w = check_same(full, got, (int)N, info.n_vocab, g_cpu, what, "chunks of", c);
            if (w > worst_c) worst_c = w;
            free(got);
        }
        g_fx = saved;
        printf("[sweep] %-56s prefixes 1..%zu: max |d| %.3g, chunks 1..%zu: max |d| %.3g%s\n",
               what, N, worst_p, N - 1, worst_c, g_cpu ? " (bit-exact)" : "");
        fflush(stdout);
        free(full);
        unlink(path);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefix_sweep),
        cmocka_unit_test(test_chunk_sweep),
        cmocka_unit_test(test_trained_greedy),
        cmocka_unit_test(test_generated_shapes),
    };
    return vt_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
