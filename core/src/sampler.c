/*
 * sampler.c - greedy, temperature, top-k, top-p, min-p sampling with a seeded
 * PRNG (splitmix64 seeding xoshiro256**), so a seed reproduces a run.
 */
#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

typedef struct cand {
    float logit;
    int32_t id;
} cand;

struct vt_sampler {
    vt_sampler_params p;
    int64_t n_vocab;
    uint8_t *banned;
    cand *c;
    float *prob;
    uint64_t s[4];
};

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t next_u64(vt_sampler *s)
{
    uint64_t r = rotl(s->s[1] * 5, 7) * 9, t = s->s[1] << 17;
    s->s[2] ^= s->s[0];
    s->s[3] ^= s->s[1];
    s->s[1] ^= s->s[2];
    s->s[0] ^= s->s[3];
    s->s[2] ^= t;
    s->s[3] = rotl(s->s[3], 45);
    return r;
}

vt_status vt_sampler_new(const vt_sampler_params *p, int64_t n_vocab, const uint8_t *banned,
                         vt_sampler **out)
{
    if (n_vocab <= 0) {
        vt_set_error("sampler: n_vocab must be positive (got %lld)", (long long)n_vocab);
        return VT_ERR_INVALID_ARG;
    }
    vt_sampler *s = vt_calloc_named(1, sizeof *s, "sampler");
    if (!s) return VT_ERR_OUT_OF_MEMORY;
    /* the first that fails names itself */
    if (!(s->c = vt_calloc_named((size_t)n_vocab, sizeof *s->c, "sampler: candidates")) ||
        !(s->prob = vt_calloc_named((size_t)n_vocab, sizeof *s->prob, "sampler: probabilities")) ||
        !(s->banned = vt_calloc_named((size_t)n_vocab, 1, "sampler: banned-token mask"))) {
        vt_sampler_free(s);
        return VT_ERR_OUT_OF_MEMORY;
    }
    s->p = *p;
    s->n_vocab = n_vocab;
    if (banned) memcpy(s->banned, banned, (size_t)n_vocab);
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++) s->s[i] = splitmix64(&x);
    *out = s;
    return VT_OK;
}

void vt_sampler_free(vt_sampler *s)
{
    if (!s) return;
    free(s->c);
    free(s->prob);
    free(s->banned);
    free(s);
}

static int cmp_desc(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id - y->id;
}

int64_t vt_sampler_bad_logits(const float *logits, int64_t n)
{
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += !isfinite(logits[i]);
    return bad;
}

int32_t vt_sampler_sample(vt_sampler *s, const float *logits)
{
    int32_t best = -1;
    for (int64_t i = 0; i < s->n_vocab; i++) {
        if (s->banned[i] || isnan(logits[i])) continue;
        if (best < 0 || logits[i] > logits[best]) best = (int32_t)i;
    }
    if (best < 0) return -1; /* nothing to draw */
    if (s->p.temperature <= 0.0f) return best;

    int64_t n = 0;
    for (int64_t i = 0; i < s->n_vocab; i++)
        if (!s->banned[i] && !isnan(logits[i])) s->c[n++] = (cand){logits[i], (int32_t)i};
    qsort(s->c, (size_t)n, sizeof *s->c, cmp_desc);
    if (s->p.top_k > 0 && n > s->p.top_k) n = s->p.top_k;

    /* probabilities at temperature 1 for top-p / min-p (llama.cpp filters before temp) */
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (s->prob[i] = expf(s->c[i].logit - s->c[0].logit));
    if (s->p.top_p < 1.0f) {
        double acc = 0;
        for (int64_t i = 0; i < n; i++) {
            acc += s->prob[i] / sum;
            if (acc >= s->p.top_p) {
                n = i + 1;
                break;
            }
        }
    }
    if (s->p.min_p > 0.0f) {
        int64_t keep = 1;
        while (keep < n && s->prob[keep] >= s->p.min_p * s->prob[0]) keep++;
        n = keep;
    }
    sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += (s->prob[i] = expf((s->c[i].logit - s->c[0].logit) / s->p.temperature));
    double u = (double)(next_u64(s) >> 11) * (1.0 / 9007199254740992.0) * sum, acc = 0;
    for (int64_t i = 0; i < n; i++) {
        acc += s->prob[i];
        if (u < acc) return s->c[i].id;
    }
    return s->c[n - 1].id;
}
