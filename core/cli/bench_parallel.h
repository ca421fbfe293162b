/*
 * bench_parallel.h - vt bench --parallel N: aggregate decode tokens/s of 1, 2,
 * 4, ... N sequences decoding together (one vt_engine_seqs_eval per round, as
 * vt serve runs its slots), next to the same tokens decoded one sequence after
 * another, with --profile the per-op table of the N-wide round.
 */
#ifndef VT_BENCH_PARALLEL_H
#define VT_BENCH_PARALLEL_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "engine.h"

/*
 * The engine holds at least n_par sequences besides its own (opened with
 * n_seq >= n_par + 1) and a context of n_prompt + n_gen. Each sequence gets
 * its own random prompt of n_prompt tokens (untimed), then n_gen rounds are
 * timed; reps repetitions after one warm-up, medians. Printed as a markdown
 * table, or added to json as "parallel": [{streams, batched_tok_s, round_ms,
 * one_by_one_tok_s}] (and "profile_parallel" with profile). Returns 0, or 1
 * after an engine error (vt_last_error()).
 */
int vt_bench_parallel(vt_engine *e, int n_prompt, int n_gen, int reps, int n_par, int64_t n_vocab,
                      int profile, cJSON *json);

#endif
