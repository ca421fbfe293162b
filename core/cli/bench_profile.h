/*
 * bench_profile.h - vt bench --profile: one profiled round after the timed
 * ones, and its per-op tables (op_profile.h says what the times are).
 */
#ifndef VT_BENCH_PROFILE_H
#define VT_BENCH_PROFILE_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "engine.h"

/*
 * From a reset sequence: prefill toks[0..n_prompt) in one eval, then n_gen
 * single-token decode steps, each phase recorded separately. With json
 * non-NULL the tables are added to it as "profile": {"prefill": [...],
 * "decode": [...]}, else printed as markdown tables to stdout, with the
 * unprofiled rates (tok/s) for comparison. Returns 0, or 1 after an engine
 * error (the message is vt_last_error()).
 */
int vt_bench_profile(vt_engine *e, const int32_t *toks, int n_prompt, int n_gen,
                     double prefill_tok_s, double decode_tok_s, cJSON *json);

/*
 * The same for n_seq sequences decoding together (vt bench --parallel): n_gen
 * rounds of vt_engine_seqs_eval, one token each, tokens[k * n_seq + i] for
 * sequence i in round k. Printed, or added to json as
 * "profile_parallel". Returns 0, or 1 after an engine error.
 */
int vt_bench_profile_multi(vt_engine *e, vt_engine_seq *const *seqs, uint32_t n_seq,
                           const int32_t *tokens, int n_gen, double decode_tok_s, cJSON *json);

#endif
