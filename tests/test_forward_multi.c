/*
 * test_forward_multi.c - several sequences in one pass (model ABI 1.8
 * forward_multi, vt_engine_seqs_eval) equal each sequence evaluated alone.
 *
 * For every model below, four slots run token streams through rounds of
 * vt_engine_seqs_eval with chunk sizes drawn from {skip, 1, 2, 3, 4, 5, 7,
 * n_batch} (a round holds at most n_batch tokens; the slots' order in the
 * call is shuffled), a slot is reset mid-stream and another freed and made
 * again while the others run. Afterwards each stream is replayed alone on a
 * fifth sequence with the same chunks (vt_engine_seq_eval_last), and the
 * last-token logits of every chunk must equal the batched ones: bit for bit
 * with the reference kernels on the CPU, else within 1e-4 of the row's
 * largest |logit| (the chunk-size criterion of test_prefill_sweep). The
 * Q8_0 file runs on exact kernels only: on fast ones a one-row matmul (a
 * decode token, an expert that one token picked) takes integer dot products
 * over activations rounded to 8 bits, whether a row is alone depends on the
 * batch, and on the trained model that rounding flips near-tied routes (one
 * chunk against token by token: mean |Δ| up to 0.9, max 4.9 on the CPU), so
 * no tolerance would both hold and mean something.
 *
 * Models: the qwen35moe-tiny and gemma4-moe-tiny fixtures (the gemma4
 * streams run past the sliding window's cache, so each sequence's window
 * moves on its own), the trained qwen35moe (real routing), the tiny qwen35
 * with its experts streamed through the minimum arena, and generated
 * models (a qwen35moe, and a gemma4 with shared-KV layers, per-layer
 * embeddings and a window of 8), resident and streamed, which need no
 * fixture and so run on every device.
 * Both families must batch (vt_engine_batches_sequences), so a model that
 * falls back to one sequence after another fails here.
 *
 * The same source builds test_forward_multi (device "cpu") and
 * test_forward_multi_cuda (device "cuda"; skips loudly without a device).
 * VT_MULTI_SOME_FILES=1 passes over fixture files that are absent (a
 * machine given only some of them, as the H200 run is).
 */
#include "test_util.h"

#include <math.h>
#include <unistd.h>

#include "config.h"
#include "engine.h"
#include "error.h"
#include "mkmodel.h"

#ifndef VT_MULTI_DEVICE
#define VT_MULTI_DEVICE "cpu"
#endif
#ifndef VT_GPU_TEST_BUILT
#define VT_GPU_TEST_BUILT 1
#define VT_GPU_TEST_REQUIRED 0
#define VT_GPU_TEST_WHY ""
#endif

static const int g_cpu = !strcmp(VT_MULTI_DEVICE, "cpu") ? 1 : 0;

#define N_SLOTS 4
#define N_BATCH 12
#define N_CTX 128

static const char *g_fx;
static int g_device_state; /* 0 not tried, 1 usable, -1 skipped */
static vt_config g_cfg;

static void skip_banner(const char *why)
{
    fprintf(stderr,
            "\n**********************************************************************\n"
            "*** SKIPPING test_forward_multi on device '%s': %s\n"
            "**********************************************************************\n\n",
            VT_MULTI_DEVICE, why);
    vt_test_fixtures_skipped = 1;
}

/* An engine on path (absolute) holding N_SLOTS + 1 sequences; NULL when the
 * device is skipped (after skip()). */
static vt_engine *open_engine(const char *path, const char *kernels, const char *const *sets)
{
    if (!vt_test_fixture_file(path)) return NULL;
    vt_config_defaults(&g_cfg);
    for (int i = 0; sets && sets[i]; i++)
        if (vt_config_set_arg(&g_cfg, sets[i]) != VT_OK)
            fail_msg("--set %s: %s", sets[i], vt_last_error());
    vt_engine_params p = {.model_path = path, .plugin_dir = vt_test_plugin_dir(),
                          .device = VT_MULTI_DEVICE, .n_threads = g_cpu ? 2 : 0,
                          .kernels = g_cpu ? kernels : NULL, .n_ctx = N_CTX, .n_batch = N_BATCH,
                          .config = &g_cfg, .n_seq = N_SLOTS + 1};
    vt_engine *e = NULL;
    if (vt_engine_open(&p, &e) != VT_OK) {
        const char *msg = vt_last_error();
        if (!g_cpu && g_device_state == 0 && strstr(msg, "zero devices")) {
            g_device_state = -1;
            skip_banner("the CUDA backend reports no device (these cases run on the H200)");
            skip();
            return NULL;
        }
        fail_msg("vt_engine_open(%s, device %s): %s", path, VT_MULTI_DEVICE, msg);
    }
    g_device_state = 1;
    return e;
}

/* 1 when the cases can run (the fixtures found, the device there). */
static int ready(int need_fixtures)
{
    if (need_fixtures && !g_fx && !(g_fx = vt_test_fixtures())) return 0;
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
    if (!g_cpu && g_device_state == 0) {
        /* probe the device once, on the demo model, before a case allocates
         * anything or writes a file: skip() leaves the case at once */
        const char *src = getenv("VT_TEST_SOURCE_DIR");
        assert_non_null(src);
        char demo[4096];
        snprintf(demo, sizeof demo, "%s/models/vt-demo-qwen35moe.gguf", src);
        vt_engine *e = open_engine(demo, NULL, NULL);
        if (!e) return 0;
        vt_engine_close(e);
    }
    return 1;
}

/* ---------------------------------------------------------------- */
/* one run: rounds of batched chunks, then every stream replayed alone */
/* ---------------------------------------------------------------- */

#define MAX_INST 8
#define MAX_CHUNKS 160

/* one stream through one sequence, from position 0 */
typedef struct inst {
    int32_t ids[N_CTX];
    int len;                   /* tokens of the stream */
    int done;                  /* tokens evaluated */
    int n_chunks;
    int chunk[MAX_CHUNKS];     /* sizes in order */
    float *logits;             /* [MAX_CHUNKS][n_vocab] after each chunk (batched) */
} inst;

static uint64_t g_rng;
static uint32_t rnd(uint32_t n)
{
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)((g_rng >> 33) % n);
}

static void inst_init(inst *in, int which, int len, int64_t n_vocab)
{
    memset(in, 0, sizeof *in);
    const int64_t span = n_vocab > 300 ? 297 : n_vocab - 3;
    for (int t = 0; t < len; t++)
        in->ids[t] = (int32_t)(3 + ((int64_t)t * 37 + which * 101 + (t * which) % 13) % span);
    in->len = len;
    in->logits = malloc(sizeof(float) * MAX_CHUNKS * (size_t)n_vocab);
    assert_non_null(in->logits);
}

/* rows a and b: bit for bit, or within 1e-4 of b's largest |logit| */

static double row_diff(const float *a, const float *b, int64_t n, int exact, const char *what,
                       int chunk)
{
    double big = 0, worst = 0;
    for (int64_t v = 0; v < n; v++)
        if (fabs((double)b[v]) > big) big = fabs((double)b[v]);
    for (int64_t v = 0; v < n; v++) {
        double d = fabs((double)a[v] - (double)b[v]);
        if (!(d == d)) d = INFINITY;
        if (exact ? d != 0 : !(d <= 1e-4 * big))
            fail_msg("%s, chunk %d: logit %lld batched %.9g, alone %.9g (|d| %.3g, max |logit| "
                     "%.3g, %s)", what, chunk, (long long)v, (double)a[v], (double)b[v], d, big,
                     exact ? "bit for bit expected" : "1e-4 of it allowed");
        if (d > worst) worst = d;
    }
    return worst;
}

/* Rounds over N_SLOTS slots with streams of len tokens; slot 1 is reset
 * after round 5, slot 2 freed and made again after round 9 (each starts a
 * new stream). Then each stream alone. Returns the largest |Δ|. */
static double run_multi(vt_engine *e, const char *what, int len, int exact, uint64_t seed)
{
    vt_model_info info;
    vt_engine_model_info(e, &info);
    const int64_t V = info.n_vocab;
    if (!vt_engine_batches_sequences(e))
        fail_msg("%s: the model has no forward_multi (vt_engine_batches_sequences 0): several "
                 "sequences would run one after another", what);
    assert_int_equal(vt_engine_n_batch(e), N_BATCH);

    static inst in[MAX_INST];
    int n_inst = 0, slot_inst[N_SLOTS];
    vt_engine_seq *seq[N_SLOTS];
    for (int i = 0; i < N_SLOTS; i++) {
        assert_int_equal(vt_engine_seq_new(e, &seq[i]), VT_OK);
        inst_init(&in[n_inst], n_inst, len - 7 * i, V); /* unequal lengths */
        slot_inst[i] = n_inst++;
    }
    static const int sizes[] = {0, 1, 1, 1, 2, 3, 4, 5, 7, N_BATCH};
    g_rng = seed;
    int rounds = 0, multi_rounds = 0;
    for (;;) {
        int live = 0;
        for (int i = 0; i < N_SLOTS; i++) live += in[slot_inst[i]].done < in[slot_inst[i]].len;
        if (!live) break;
        if (rounds == 5) { /* reset slot 1: a new stream from position 0 */
            assert_int_equal(vt_engine_seq_reset(e, seq[1]), VT_OK);
            inst_init(&in[n_inst], n_inst, len / 2, V);
            slot_inst[1] = n_inst++;
        }
        if (rounds == 9) { /* free slot 2 while the others run; a new sequence */
            vt_engine_seq_free(e, seq[2]);
            assert_int_equal(vt_engine_seq_new(e, &seq[2]), VT_OK);
            inst_init(&in[n_inst], n_inst, len - 3, V);
            slot_inst[2] = n_inst++;
        }
        /* the call's order: a random permutation of the slots */
        int order[N_SLOTS];
        for (int i = 0; i < N_SLOTS; i++) order[i] = i;
        for (int i = N_SLOTS - 1; i > 0; i--) {
            int j = (int)rnd((uint32_t)i + 1), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        vt_engine_seq *cs[N_SLOTS];
        int64_t ct[N_SLOTS];
        int32_t toks[N_BATCH];
        int ci[N_SLOTS];
        uint32_t n = 0;
        int used = 0;
        for (int k = 0; k < N_SLOTS; k++) {
            int i = order[k];
            inst *s = &in[slot_inst[i]];
            int c = sizes[rnd(sizeof sizes / sizeof sizes[0])];
            if (c > s->len - s->done) c = s->len - s->done;
            if (c > N_BATCH - used) c = N_BATCH - used;
            if (c <= 0) continue;
            if (s->n_chunks == MAX_CHUNKS) fail_msg("%s: more than %d chunks", what, MAX_CHUNKS);
            memcpy(toks + used, s->ids + s->done, sizeof(int32_t) * (size_t)c);
            cs[n] = seq[i];
            ct[n] = c;
            ci[n] = slot_inst[i];
            n++;
            used += c;
        }
        rounds++;
        if (!n) continue;
        multi_rounds += n > 1;
        const float *lg = NULL;
        if (vt_engine_seqs_eval(e, cs, ct, n, toks, &lg) != VT_OK)
            fail_msg("%s: round %d (%u sequences, %d tokens): %s", what, rounds, n, used,
                     vt_last_error());
        for (uint32_t q = 0; q < n; q++) {
            inst *s = &in[ci[q]];
            memcpy(s->logits + (size_t)s->n_chunks * (size_t)V, lg + (size_t)q * (size_t)V,
                   sizeof(float) * (size_t)V);
            s->chunk[s->n_chunks++] = (int)ct[q];
            s->done += (int)ct[q];
            assert_int_equal(vt_engine_seq_pos(e, cs[q]), s->done);
        }
    }
    if (multi_rounds < 5) fail_msg("%s: only %d rounds held several sequences", what, multi_rounds);

    /* each stream alone, with the same chunks, on a fifth sequence */
    vt_engine_seq *ref;
    assert_int_equal(vt_engine_seq_new(e, &ref), VT_OK);
    double worst = 0;
    int n_chunks = 0;
    for (int k = 0; k < n_inst; k++) {
        inst *s = &in[k];
        assert_int_equal(vt_engine_seq_reset(e, ref), VT_OK);
        for (int j = 0, off = 0; j < s->n_chunks; off += s->chunk[j], j++) {
            const float *lg = NULL;
            if (vt_engine_seq_eval_last(e, ref, s->ids + off, s->chunk[j], &lg) != VT_OK)
                fail_msg("%s: stream %d alone, chunk %d: %s", what, k, j, vt_last_error());
            char w[160];
            snprintf(w, sizeof w, "%s, stream %d (%d tokens at position %d)", what, k,
                     s->chunk[j], off);
            double d = row_diff(s->logits + (size_t)j * (size_t)V, lg, V, exact, w, j);
            if (d > worst) worst = d;
            n_chunks++;
        }
        free(s->logits);
        s->logits = NULL;
    }
    vt_engine_seq_free(e, ref);
    for (int i = 0; i < N_SLOTS; i++) vt_engine_seq_free(e, seq[i]);
    printf("[multi] %-58s %d streams, %d chunks in %d rounds (%d batched): max |d| %.3g%s\n", what,
           n_inst, n_chunks, rounds, multi_rounds, worst,
           exact ? " (bit-exact)" : "");
    fflush(stdout);
    return worst;
}

/* ---------------------------------------------------------------- */
/* cases                                                              */
/* ---------------------------------------------------------------- */

typedef struct multi_file {
    const char *label;
    const char *rel; /* in the fixture folder */
    int len;         /* tokens per stream */
    int streamed;    /* experts streamed through the minimum arena (12 slots) */
    int lossy;       /* Q8_0: exact kernels only (see the top) */
} multi_file;

static const multi_file g_files[] = {
    {"qwen35moe-tiny bf16", "qwen35moe-tiny/gguf/qwen35moe-tiny-bf16.gguf", 64, 0, 0},
    {"qwen35moe-tiny bf16, streamed", "qwen35moe-tiny/gguf/qwen35moe-tiny-bf16.gguf", 48, 1, 0},
    /* n_swa 32 + n_batch 12: the sliding caches hold 44 rows, 100 tokens move them */
    {"gemma4-moe-tiny f16", "gemma4-moe-tiny/gguf/gemma4-moe-tiny-f16.gguf", 100, 0, 0},
    {"gemma4-moe-tiny f16, streamed", "gemma4-moe-tiny/gguf/gemma4-moe-tiny-f16.gguf", 60, 1, 0},
    {"qwen35moe-trained q8_0", "qwen35moe-trained/gguf/qwen35moe-trained-q8_0.gguf", 64, 0, 1},
};

static void run_file(const multi_file *f, const char *kernels, uint64_t seed)
{
    if (f->lossy && !(g_cpu && kernels && !strcmp(kernels, "scalar"))) {
        printf("[multi] %-58s not on %s kernels (Q8_0 rounding flips near-tied routes)\n",
               f->label, g_cpu ? "fast" : VT_MULTI_DEVICE);
        return;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", g_fx, f->rel);
    const char *some = getenv("VT_MULTI_SOME_FILES");
    if (some && *some == '1' && access(path, R_OK) != 0) {
        printf("[multi] %-58s not here (VT_MULTI_SOME_FILES=1)\n", f->label);
        return;
    }
    char streamed[64], slots[64];
    snprintf(streamed, sizeof streamed, "%s.experts=streamed", VT_MULTI_DEVICE);
    snprintf(slots, sizeof slots, "%s.expert_cache.slots=12", VT_MULTI_DEVICE);
    const char *sets[] = {streamed, slots, NULL};
    vt_engine *e = open_engine(path, kernels, f->streamed ? sets : NULL);
    if (!e) return;
    char what[160];
    snprintf(what, sizeof what, "%s, %s, kernels %s", f->label, VT_MULTI_DEVICE,
             kernels ? kernels : "auto");
    run_multi(e, what, f->len, g_cpu && kernels && !strcmp(kernels, "scalar"), seed);
    vt_engine_close(e);
}

static void test_fixtures_scalar(void **state)
{
    (void)state;
    if (!ready(1)) return;
    for (size_t i = 0; i < sizeof g_files / sizeof g_files[0]; i++) {
        run_file(&g_files[i], "scalar", 11 + i);
        if (g_device_state < 0) return;
    }
}

static void test_fixtures_fast(void **state)
{
    (void)state;
    if (!g_cpu) { /* the device has one set of kernels: the case above ran it */
        skip();
        return;
    }
    if (!ready(1)) return;
    for (size_t i = 0; i < sizeof g_files / sizeof g_files[0]; i++)
        if (!g_files[i].streamed) run_file(&g_files[i], NULL, 23 + i);
}

/* Generated models (no fixture needed, so these run on every device): a
 * qwen35moe and a gemma4 with shared-KV layers, per-layer embeddings, a
 * window of 8 (the sliding caches hold 20 rows) and an always-on MLP beside
 * the experts; each resident and with its experts streamed through 12 slots. */
static void test_generated(void **state)
{
    (void)state;
    if (!ready(0)) return;
    for (int fam = 0; fam < 2; fam++) {
        vt_mkmodel_params mp;
        if (fam == 0) {
            vt_mkmodel_defaults(&mp);
            mp.ssm_d_k = 16;
            mp.ssm_n_k = 2;
            mp.ssm_n_v = 4;
            mp.n_ff_shexp = 32;
        } else {
            vt_mkmodel_defaults_gemma4(&mp);
            mp.n_layer = 6;
            mp.head_dim_swa = 16;
            mp.n_ff = 64;
            mp.sliding_window = 8;
            mp.shared_kv_layers = 2;
            mp.n_per_layer = 16;
        }
        mp.n_embd = 64;
        mp.n_head = 2;
        mp.n_head_kv = 1;
        mp.head_dim = 32;
        mp.n_rot = 16;
        mp.n_ff_exp = 32;
        mp.n_expert = 8;
        mp.n_expert_used = 2;
        mp.n_merges = 64;
        mp.weight_type = VT_TYPE_F32;
        mp.seed = 4242 + (uint64_t)fam;
        char path[256];
        snprintf(path, sizeof path, "/tmp/vt-multi-%s-%d.gguf", fam ? "gemma4" : "qwen35",
                 (int)getpid());
        vt_status st = fam ? vt_mkmodel_gemma4(path, &mp) : vt_mkmodel_qwen35moe(path, &mp);
        if (st != VT_OK) fail_msg("mkmodel: %s", vt_last_error());
        for (int streamed = 0; streamed < 2; streamed++) {
            char sv[64], sl[64];
            snprintf(sv, sizeof sv, "%s.experts=streamed", VT_MULTI_DEVICE);
            snprintf(sl, sizeof sl, "%s.expert_cache.slots=12", VT_MULTI_DEVICE);
            const char *sets[] = {sv, sl, NULL};
            vt_engine *e = open_engine(path, "scalar", streamed ? sets : NULL);
            if (!e) {
                unlink(path);
                return;
            }
            char what[160];
            snprintf(what, sizeof what, "generated %s%s, %s",
                     fam ? "gemma4 (shared KV, PLE, window 8)" : "qwen35moe",
                     streamed ? ", streamed" : "", VT_MULTI_DEVICE);
            run_multi(e, what, 72, g_cpu, 5 + (uint64_t)(fam * 2 + streamed));
            vt_engine_close(e);
        }
        unlink(path);
    }
}

/* what forward_multi refuses, by name, and the engine's own checks */
static void test_refusals(void **state)
{
    (void)state;
    if (!ready(1)) return;
    static const char *const rels[] = {"qwen35moe-tiny/gguf/qwen35moe-tiny-bf16.gguf",
                                       "gemma4-moe-tiny/gguf/gemma4-moe-tiny-f16.gguf"};
    for (size_t f = 0; f < 2; f++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", g_fx, rels[f]);
        vt_engine *e = open_engine(path, "scalar", NULL);
        if (!e) return;
        vt_engine_seq *a, *b;
        assert_int_equal(vt_engine_seq_new(e, &a), VT_OK);
        assert_int_equal(vt_engine_seq_new(e, &b), VT_OK);
        const int32_t toks[4] = {5, 6, 7, 8};
        const float *lg;
        vt_engine_seq *same[2] = {a, a};
        int64_t n2[2] = {2, 2};
        assert_int_equal(vt_engine_seqs_eval(e, same, n2, 2, toks, &lg), VT_ERR_INVALID_ARG);
        assert_non_null(strstr(vt_last_error(), "are the same"));
        assert_null(lg);
        vt_engine_seq *ab[2] = {a, b};
        const int32_t bad[4] = {5, 6, 7, 1 << 30};
        assert_int_equal(vt_engine_seqs_eval(e, ab, n2, 2, bad, &lg), VT_ERR_RANGE);
        assert_non_null(strstr(vt_last_error(), "outside the vocabulary"));
        int64_t n0[2] = {2, 0};
        assert_int_equal(vt_engine_seqs_eval(e, ab, n0, 2, toks, &lg), VT_ERR_INVALID_ARG);
        /* a sequence without room: named, and the other is untouched */
        int32_t fill[N_BATCH];
        for (int i = 0; i < N_BATCH; i++) fill[i] = 9 + i;
        assert_int_equal(vt_engine_seq_reset(e, a), VT_OK);
        assert_int_equal(vt_engine_seq_reset(e, b), VT_OK);
        for (int k = 0; k < N_CTX / N_BATCH; k++)
            assert_int_equal(vt_engine_seq_eval_last(e, b, fill, N_BATCH, &lg), VT_OK);
        int64_t big[2] = {1, N_CTX - (N_CTX / N_BATCH) * N_BATCH + 1};
        assert_int_equal(vt_engine_seqs_eval(e, ab, big, 2, fill, &lg), VT_ERR_RANGE);
        assert_non_null(strstr(vt_last_error(), "sequence 1"));
        assert_int_equal(vt_engine_seq_pos(e, a), 0);
        vt_engine_seq_free(e, a);
        vt_engine_seq_free(e, b);
        vt_engine_close(e);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixtures_scalar),
        cmocka_unit_test(test_fixtures_fast),
        cmocka_unit_test(test_generated),
        cmocka_unit_test(test_refusals),
    };
    return vt_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
