/*
 * bench_profile.c - vt bench --profile (bench_profile.h).
 */
#include "bench_profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "error.h"
#include "op_profile.h"

#define MAX_ROWS 128

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct phase {
    const char *name;
    int tokens, steps;
    double wall, unprofiled_tok_s;
    vt_op_profile_row rows[MAX_ROWS];
    int n_rows;
} phase;

static void print_phase(const phase *ph)
{
    double sum = 0;
    for (int i = 0; i < ph->n_rows && i < MAX_ROWS; i++) sum += ph->rows[i].seconds;
    double per = ph->steps ? 1e3 / ph->steps : 0; /* ms per step */
    printf("\nper-op profile, %s: %d token(s) in %d step(s); profiled %.1f tok/s (every op "
           "followed by a synchronize), unprofiled %.1f tok/s\n", ph->name, ph->tokens, ph->steps,
           ph->wall > 0 ? ph->tokens / ph->wall : 0, ph->unprofiled_tok_s);
    printf("| %-34s | %8s | %10s | %9s | %6s |\n", "op", "calls", "ms/step", "us/call", "%");
    printf("|------------------------------------|----------|------------|-----------|--------|\n");
    for (int i = 0; i < ph->n_rows && i < MAX_ROWS; i++) {
        const vt_op_profile_row *r = &ph->rows[i];
        printf("| %-34s | %8llu | %10.3f | %9.1f | %5.1f%% |\n", r->name,
               (unsigned long long)r->calls, r->seconds * per, 1e6 * r->seconds / (double)r->calls,
               ph->wall > 0 ? 100.0 * r->seconds / ph->wall : 0);
    }
    double rest = ph->wall - sum;
    printf("| %-34s | %8s | %10.3f | %9s | %5.1f%% |\n", "(between ops: host work, fills)", "",
           rest * per, "", ph->wall > 0 ? 100.0 * rest / ph->wall : 0);
}

static void add_phase(cJSON *obj, const phase *ph)
{
    cJSON *p = cJSON_AddObjectToObject(obj, ph->name);
    cJSON_AddNumberToObject(p, "tokens", ph->tokens);
    cJSON_AddNumberToObject(p, "steps", ph->steps);
    cJSON_AddNumberToObject(p, "profiled_seconds", ph->wall);
    cJSON_AddNumberToObject(p, "unprofiled_tok_s", ph->unprofiled_tok_s);
    cJSON *ops = cJSON_AddArrayToObject(p, "ops");
    double sum = 0;
    for (int i = 0; i < ph->n_rows && i < MAX_ROWS; i++) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "op", ph->rows[i].name);
        cJSON_AddNumberToObject(r, "calls", (double)ph->rows[i].calls);
        cJSON_AddNumberToObject(r, "seconds", ph->rows[i].seconds);
        cJSON_AddItemToArray(ops, r);
        sum += ph->rows[i].seconds;
    }
    cJSON_AddNumberToObject(p, "between_ops_seconds", ph->wall - sum);
}

int vt_bench_profile(vt_engine *e, const int32_t *toks, int n_prompt, int n_gen,
                     double prefill_tok_s, double decode_tok_s, cJSON *json)
{
    static phase pre, dec;
    pre = (phase){.name = "prefill", .tokens = n_prompt, .steps = 1,
                  .unprofiled_tok_s = prefill_tok_s};
    dec = (phase){.name = "decode", .tokens = n_gen, .steps = n_gen,
                  .unprofiled_tok_s = decode_tok_s};
    if (vt_engine_reset(e) != VT_OK) return 1;
    if (vt_engine_profile_start(e) != VT_OK) return 1;
    double t0 = now_seconds();
    const float *logits;
    vt_status st = vt_engine_eval_last(e, toks, n_prompt, &logits);
    pre.wall = now_seconds() - t0;
    pre.n_rows = vt_engine_profile_stop(e, pre.rows, MAX_ROWS);
    if (st != VT_OK) return 1;
    if (vt_engine_profile_start(e) != VT_OK) return 1;
    t0 = now_seconds();
    for (int i = 0; i < n_gen && st == VT_OK; i++)
        st = vt_engine_eval_last(e, &toks[n_prompt + i], 1, &logits);
    dec.wall = now_seconds() - t0;
    dec.n_rows = vt_engine_profile_stop(e, dec.rows, MAX_ROWS);
    if (st != VT_OK) return 1;
    if (json) {
        cJSON *p = cJSON_AddObjectToObject(json, "profile");
        add_phase(p, &pre);
        add_phase(p, &dec);
    } else {
        print_phase(&pre);
        print_phase(&dec);
    }
    return 0;
}

int vt_bench_profile_multi(vt_engine *e, vt_engine_seq *const *seqs, uint32_t n_seq,
                           const int32_t *tokens, int n_gen, double decode_tok_s, cJSON *json)
{
    static phase dec;
    dec = (phase){.name = "batched decode", .tokens = n_gen * (int)n_seq, .steps = n_gen,
                  .unprofiled_tok_s = decode_tok_s};
    int64_t *ones = malloc(sizeof(int64_t) * (n_seq ? n_seq : 1));
    if (!ones) {
        vt_set_error("out of memory: %u token counts", n_seq);
        return 1;
    }
    for (uint32_t i = 0; i < n_seq; i++) ones[i] = 1;
    if (vt_engine_profile_start(e) != VT_OK) {
        free(ones);
        return 1;
    }
    double t0 = now_seconds();
    const float *logits;
    vt_status st = VT_OK;
    for (int k = 0; k < n_gen && st == VT_OK; k++)
        st = vt_engine_seqs_eval(e, seqs, ones, n_seq, tokens + (size_t)k * n_seq, &logits);
    dec.wall = now_seconds() - t0;
    dec.n_rows = vt_engine_profile_stop(e, dec.rows, MAX_ROWS);
    free(ones);
    if (st != VT_OK) return 1;
    if (json) add_phase(cJSON_AddObjectToObject(json, "profile_parallel"), &dec);
    else print_phase(&dec);
    return 0;
}
