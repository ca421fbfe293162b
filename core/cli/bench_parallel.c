/*
 * bench_parallel.c - vt bench --parallel N: decode of several sequences at
 * once, as vt serve's rounds run it (bench_parallel.h).
 */
#include "bench_parallel.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench_profile.h"
#include "error.h"

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Reset sequences 0..c and prefill each with its own prompt. */
static vt_status prefill(vt_engine *e, vt_engine_seq **seqs, int c, const int32_t *tok, int stride,
                         int n_prompt)
{
    const float *lg;
    for (int i = 0; i < c; i++) {
        vt_status st = vt_engine_seq_reset(e, seqs[i]);
        if (st == VT_OK) st = vt_engine_seq_eval_last(e, seqs[i], tok + (size_t)i * stride, n_prompt, &lg);
        if (st != VT_OK) return st;
    }
    return VT_OK;
}

int vt_bench_parallel(vt_engine *e, int n_prompt, int n_gen, int reps, int n_par, int64_t n_vocab,
                      int profile, cJSON *json)
{
    const int stride = n_prompt + n_gen;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)stride * (size_t)n_par);
    int32_t *round = malloc(sizeof(int32_t) * (size_t)n_gen * (size_t)n_par);
    vt_engine_seq **seqs = calloc((size_t)n_par, sizeof *seqs);
    int64_t *ones = malloc(sizeof(int64_t) * (size_t)n_par);
    double *bt = malloc(sizeof(double) * (size_t)reps), *st1 = malloc(sizeof(double) * (size_t)reps);
    int rc = 1, n_made = 0;
    if (!tok || !round || !seqs || !ones || !bt || !st1) {
        vt_set_error("out of memory: bench --parallel buffers");
        goto out;
    }
    /* each sequence its own random tokens (so they route to different experts) */
    uint64_t x = 777;
    for (size_t i = 0; i < (size_t)stride * (size_t)n_par; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (int32_t)((x >> 33) % (uint64_t)(n_vocab < 256 ? n_vocab : 256));
    }
    for (int i = 0; i < n_par; i++) ones[i] = 1;
    for (; n_made < n_par; n_made++)
        if (vt_engine_seq_new(e, &seqs[n_made]) != VT_OK) goto out;
    cJSON *arr = json ? cJSON_AddArrayToObject(json, "parallel") : NULL;
    /* a round wider than --batch, or a model without forward_multi, runs its
     * sequences one after another: said, so the "batched" column is read right */
    const int wide = n_par > (int)vt_engine_n_batch(e) || !vt_engine_batches_sequences(e);
    if (json) cJSON_AddBoolToObject(json, "parallel_batched", !wide);
    else if (wide)
        printf("\nnote: %s: the batched rounds run their sequences one after another\n",
               !vt_engine_batches_sequences(e) ? "the model plugin has no forward_multi"
                                               : "--parallel exceeds --batch");
    if (!json)
        printf("\nbatched decode (vt bench --parallel %d): %d-token prompts, %d tokens per "
               "sequence, median of %d reps\n| %7s | %14s | %10s | %16s | %6s |\n"
               "|---------|----------------|------------|------------------|--------|\n",
               n_par, n_prompt, n_gen, reps, "streams", "batched tok/s", "ms/round",
               "one-by-one tok/s", "gain");
    for (int c = 1;; c = c * 2 > n_par && c < n_par ? n_par : c * 2) {
        for (int k = 0; k < n_gen; k++)
            for (int i = 0; i < c; i++) round[(size_t)k * c + i] = tok[(size_t)i * stride + n_prompt + k];
        for (int r = 0; r < reps + 1; r++) { /* the first round warms up */
            const float *lg;
            /* batched: one evaluation of c tokens per round */
            if (prefill(e, seqs, c, tok, stride, n_prompt) != VT_OK) goto out;
            double t0 = now_seconds();
            for (int k = 0; k < n_gen; k++)
                if (vt_engine_seqs_eval(e, seqs, ones, (uint32_t)c, round + (size_t)k * c, &lg) != VT_OK)
                    goto out;
            double t1 = now_seconds();
            /* one after another, as a server without batching would */
            if (prefill(e, seqs, c, tok, stride, n_prompt) != VT_OK) goto out;
            double t2 = now_seconds();
            for (int k = 0; k < n_gen; k++)
                for (int i = 0; i < c; i++)
                    if (vt_engine_seq_eval_last(e, seqs[i], round + (size_t)k * c + i, 1, &lg) != VT_OK)
                        goto out;
            double t3 = now_seconds();
            if (r) {
                bt[r - 1] = (double)c * n_gen / (t1 - t0);
                st1[r - 1] = (double)c * n_gen / (t3 - t2);
            }
        }
        double b = median(bt, reps), s = median(st1, reps);
        if (arr) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "streams", c);
            cJSON_AddNumberToObject(o, "batched_tok_s", b);
            cJSON_AddNumberToObject(o, "round_ms", 1e3 * c / b);
            cJSON_AddNumberToObject(o, "one_by_one_tok_s", s);
            cJSON_AddItemToArray(arr, o);
        } else {
            printf("| %7d | %14.1f | %10.3f | %16.1f | %5.2fx |\n", c, b, 1e3 * c / b, s, b / s);
        }
        if (c == n_par) {
            if (profile) { /* the widest round, every op timed */
                if (prefill(e, seqs, c, tok, stride, n_prompt) != VT_OK) goto out;
                if (vt_bench_profile_multi(e, seqs, (uint32_t)c, round, n_gen, b, json)) goto out;
            }
            break;
        }
    }
    rc = 0;
out:
    for (int i = 0; i < n_made; i++) vt_engine_seq_free(e, seqs[i]);
    free(tok);
    free(round);
    free(seqs);
    free(ones);
    free(bt);
    free(st1);
    return rc;
}
