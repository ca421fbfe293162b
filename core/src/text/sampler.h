/*
 * sampler.h - picks the next token from a row of logits.
 *
 * Order (as llama.cpp's default chain): banned tokens removed, top-k, top-p
 * (nucleus), min-p, temperature, then a draw from the softmax with a seeded
 * PRNG. temperature <= 0 is greedy (argmax, lowest id on ties) and ignores the
 * other settings.
 */
#ifndef VT_SAMPLER_H
#define VT_SAMPLER_H

#include <stdint.h>

#include "vt/status.h"

typedef struct vt_sampler_params {
    float temperature; /* <= 0: greedy */
    int32_t top_k;     /* <= 0: off */
    float top_p;       /* >= 1: off */
    float min_p;       /* <= 0: off (keep p >= min_p * p_max) */
    uint64_t seed;
} vt_sampler_params;

typedef struct vt_sampler vt_sampler;

/* n_vocab: logits per row; banned (may be NULL): n_vocab flags, non-zero = never pick. */
vt_status vt_sampler_new(const vt_sampler_params *p, int64_t n_vocab, const uint8_t *banned,
                         vt_sampler **out);
void vt_sampler_free(vt_sampler *s);
/* Pick a token id from logits [n_vocab] (not modified); NaN logits and
 * banned ids are never picked. -1 when nothing can be picked (every id
 * banned or NaN): the caller stops with an error, never emits a token. */
int32_t vt_sampler_sample(vt_sampler *s, const float *logits);
/* How many of logits [n] are NaN or infinite (a model or backend fault the
 * caller reports, naming the position, instead of sampling around it). */
int64_t vt_sampler_bad_logits(const float *logits, int64_t n);

#endif
