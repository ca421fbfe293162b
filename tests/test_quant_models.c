/*
 * test_quant_models.c - qwen35moe models written by vt mkmodel in every
 * quantised weight type and in the Q4_K_M / Q5_K_M mixes (BF16 as a control),
 * and in the low-bit types and ud-* mixes (random valid blocks; see one_type)
 * run through the engine on CPU; their logits with the fast kernels match
 * the scalar reference kernels (exact dequantisation, double sums) on the
 * same file, at 7 prompt positions and 4 decoded tokens.
 *
 * Two comparisons, two tolerances:
 *  - fast kernels with float activations (VT_CPU_INT8_DOT=0): weights are
 *    dequantised exactly, so they differ from the reference only in float32
 *    summation order (each op bounded in tests/test_cpu_simd.c and
 *    test_cpu_quant_kernels.c, relative ~n·2^-24); through 4 layers that
 *    stays far below 1e-3 of max |logit| (measured ~1e-6): max |Δ| <= 1e-3 ·
 *    max |logit| at every position, same argmax wherever the margin exceeds
 *    that.
 *  - fast kernels as they run by default (int8 activations for every
 *    matmul of a quantised type, prompt positions included, as llama.cpp's
 *    CPU kernels do): each matmul input is rounded to int8 per 32 values
 *    (|Δx| <= 1/254 of the block max, ~0.5% rms), which is not a
 *    summation-order effect: in an MoE it can flip a near-tie in the
 *    router's top-k, which moves that token's logits by far more than the
 *    rounding, and these random-weight routers are full of near-ties
 *    (measured: up to 61% of max |logit| at one position, pooled means
 *    0.4-4.4%; 0.2-0.6% when only decode rounded). The rounding itself is
 *    bounded kernel by kernel (test_cpu_quant_kernels.c, every batch size)
 *    and judged against llama.cpp on a trained model with real routing
 *    (test_lowbit_models.c); here the criterion is that no routing flip
 *    hides a wrong answer: the same argmax wherever the reference's margin
 *    exceeds 10% of max |logit|, and pooled mean |Δ| <= 5% of max |logit|.
 * Measured deviations are printed for the record.
 */
#include "test_util.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "error.h"
#include "mkmodel.h"

static const char *const types[] = {"bf16", "q4_k_m", "q5_k_m", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1",
                                    "q2_k",   "q3_k",   "q4_k", "q5_k", "q6_k", "iq4_nl", "iq4_xs",
                                    "mxfp4",
                                    /* from here: the low-bit types and mixes (random valid
                                     * blocks, quantize.h) */
                                    "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s",
                                    "iq1_m", "iq1_xs", "iq1_xxs", "iq1_xxxs", "tq1_0", "tq2_0",
                                    "nvfp4", "q1_0", "q2_0", "ud-iq1_xxxs", "ud-iq2_xs",
                                    "ud-iq1_s"};
#define N_TYPES (sizeof types / sizeof types[0])
#define FIRST_LOWBIT 16 /* types[16] = "iq2_xxs" */
#define N_PROMPT 7
#define N_DECODE 4

static vt_engine *open_engine(const char *path, const char *kernels)
{
    vt_engine_params p = {.model_path = path, .plugin_dir = vt_test_plugin_dir(), .device = "cpu",
                          .n_threads = 2, .kernels = kernels, .n_ctx = 64, .n_batch = 64};
    vt_engine *e = NULL;
    if (vt_engine_open(&p, &e) != VT_OK)
        fail_msg("vt_engine_open(%s, kernels %s): %s", path, kernels ? kernels : "auto",
                 vt_last_error());
    return e;
}

/* logits of N_PROMPT prompt positions, then of N_DECODE greedy-fed tokens
 * (the same token ids for both engines: the reference's argmax) */
static float *run(vt_engine *e, int64_t n_vocab, const int32_t *prompt, int32_t *feed, int choose)
{
    float *out = malloc(sizeof(float) * (size_t)n_vocab * (N_PROMPT + N_DECODE));
    assert_non_null(out);
    assert_int_equal(vt_engine_reset(e), VT_OK);
    if (vt_engine_eval(e, prompt, N_PROMPT, out, 1) != VT_OK) fail_msg("eval: %s", vt_last_error());
    for (int i = 0; i < N_DECODE; i++) {
        const float *prev = out + (size_t)(N_PROMPT - 1 + i) * (size_t)n_vocab;
        if (choose) {
            int best = 0;
            for (int64_t v = 1; v < n_vocab; v++)
                if (prev[v] > prev[best]) best = (int)v;
            feed[i] = best;
        }
        if (vt_engine_eval(e, &feed[i], 1, out + (size_t)(N_PROMPT + i) * (size_t)n_vocab, 0) != VT_OK)
            fail_msg("decode: %s", vt_last_error());
    }
    return out;
}

/* Compare b with the reference a at every position. tight: max |Δ| <= 1e-3 of
 * max |logit| and the same argmax wherever the margin exceeds it; else the
 * int8-activation criterion (pooled mean |Δ| <= 5% of max |logit|, argmax
 * kept where the margin exceeds 10%). Returns the worst max |Δ| / max |logit|.
 * judge = 0: the int8-activation figures are measured and returned only (the
 * low-bit models: see one_type). */
static double compare(const char *tname, const char *what, const float *a, const float *b,
                      int64_t nv, int tight, int judge, double *mean_rel)
{
    double worst = 0, sum_rel = 0;
    for (int pos = 0; pos < N_PROMPT + N_DECODE; pos++) {
        const float *ra = a + (size_t)pos * (size_t)nv, *rb = b + (size_t)pos * (size_t)nv;
        double amax = 0, dmax = 0, dsum = 0;
        int am = 0, bm = 0;
        for (int64_t v = 0; v < nv; v++) {
            double d = fabs((double)ra[v] - rb[v]);
            amax = fmax(amax, fabs(ra[v]));
            dmax = fmax(dmax, d);
            dsum += d;
            if (!isfinite(rb[v])) fail_msg("%s %s position %d: logit %lld is %g", tname, what, pos, (long long)v, rb[v]);
            if (ra[v] > ra[am]) am = (int)v;
            if (rb[v] > rb[bm]) bm = (int)v;
        }
        double second = -INFINITY;
        for (int64_t v = 0; v < nv; v++)
            if (v != am) second = fmax(second, ra[v]);
        worst = fmax(worst, dmax / amax);
        sum_rel += dsum / (double)nv / amax;
        double bound = (tight ? 1e-3 : 1e-1) * amax;
        if (tight && !(dmax <= bound))
            fail_msg("%s %s position %d: max |Δ| %.4g > %.4g (0.1%% of max |logit| %.4g)", tname,
                     what, pos, dmax, bound, amax);
        if (judge && am != bm && (double)ra[am] - second > bound)
            fail_msg("%s %s position %d: argmax %d, reference %d (margin %.4g > %.4g)", tname, what,
                     pos, bm, am, (double)ra[am] - second, bound);
    }
    *mean_rel = sum_rel / (N_PROMPT + N_DECODE);
    if (judge && !tight && !(*mean_rel <= 5e-2))
        fail_msg("%s %s: mean |Δ| / max |logit| %.4g > 5%%", tname, what, *mean_rel);
    return worst;
}

/* The low-bit models (lowbit) are held to the float path's criterion only:
 * their weights are random valid blocks with every scale near the row's
 * extreme, not an approximation of smooth values, and their prefill rounds
 * activations to int8 too (the low-bit types take the integer path at every
 * batch size), so the int8 path's deviation from the float reference is a
 * property of these synthetic weights (measured 0.02-8% mean), not a measure
 * of the kernels, which test_cpu_quant_kernels bounds from the arithmetic and
 * test_lowbit_models holds to llama.cpp's logits on trained weights. The
 * figure is printed. */
static void one_type(const char *tname, int lowbit)
{
    char path[256];
    snprintf(path, sizeof path, "%s/vt-test-quant-%s-%d.gguf", P_tmpdir, tname, (int)getpid());
    vt_mkmodel_params p;
    vt_mkmodel_defaults(&p);
    p.n_layer = 4;
    p.n_embd = 256;
    p.n_ff_exp = 256;
    p.n_ff_shexp = 256;
    p.n_threads = 2;
    if (vt_mkmodel_set_type(&p, tname) != VT_OK) fail_msg("mkmodel type %s: %s", tname, vt_last_error());
    if (vt_mkmodel_qwen35moe(path, &p) != VT_OK) fail_msg("mkmodel %s: %s", tname, vt_last_error());
    vt_engine *ref = open_engine(path, "scalar");
    setenv("VT_CPU_INT8_DOT", "0", 1); /* fast kernels, float activations everywhere */
    vt_engine *fastf = open_engine(path, NULL);
    unsetenv("VT_CPU_INT8_DOT");
    vt_engine *fasti = open_engine(path, NULL); /* fast kernels as they run by default */
    vt_model_info info;
    vt_engine_model_info(ref, &info);
    int64_t nv = info.n_vocab;
    int32_t prompt[N_PROMPT] = {17, 101, 42, 250, 7, 99, 3}, feed[N_DECODE];
    float *a = run(ref, nv, prompt, feed, 1), *bf = run(fastf, nv, prompt, feed, 0),
          *bi = run(fasti, nv, prompt, feed, 0);
    double mf, mi;
    double wf = compare(tname, "fast kernels, float activations", a, bf, nv, 1, 1, &mf);
    double wi = compare(tname, "fast kernels, int8 activations", a, bi, nv, 0, !lowbit, &mi);
    printf("  %-11s float path: max|Δ|/max|logit| %.2e   int8 path: max %.2e, mean %.2e%s\n",
           tname, wf, wi, mi, lowbit ? " (printed, not judged)" : "");
    free(a);
    free(bf);
    free(bi);
    vt_engine_close(ref);
    vt_engine_close(fastf);
    vt_engine_close(fasti);
    unlink(path);
}

static void test_every_type(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_TYPES; i++) {
#ifdef VT_TEST_SANITIZED
        /* sanitizer builds: one type per kernel family keeps the suite's time small */
        char key[32];
        snprintf(key, sizeof key, " %s ", types[i]);
        if (!strstr(" q4_k_m q8_0 q5_1 q3_k iq4_xs mxfp4 iq2_xs iq1_xxxs nvfp4 ", key)) continue;
#endif
        one_type(types[i], i >= FIRST_LOWBIT);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_every_type)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
