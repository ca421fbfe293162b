/*
 * sampler_adversary.h - a row of logits built against the sampler's sampled
 * pivot (core/src/text/sampler.c, select_first): it replays that selection on ids
 * 0..V-1 in order (the candidate list of a row with nothing banned and no
 * NaN) while wanting the first 64, and at each pass gives the 256 sampled
 * ids the lowest values not yet given, so every pass cuts off little; the
 * other ids get higher values in a shuffled order. Without a bound on those
 * passes a selection costs about V²/256 compares (184 ms a token at 248k, a
 * reviewer's measurement); with it, O(V log V). Used by bench_sampler (the
 * time) and test_sampler (the draws still equal the fully sorted chain).
 * Mirrors the pivot rule of sampler.c: change both together.
 */
#ifndef VT_SAMPLER_ADVERSARY_H
#define VT_SAMPLER_ADVERSARY_H

#include <stdint.h>
#include <stdlib.h>

static double *adv_val_;
static int adv_before_(int32_t x, int32_t y)
{
    const double vx = adv_val_[x] < 0 ? 1e30 : adv_val_[x], vy = adv_val_[y] < 0 ? 1e30 : adv_val_[y];
    return vx > vy || (vx == vy && x < y);
}
static int adv_cmp_(const void *a, const void *b)
{
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return adv_before_(x, y) ? -1 : adv_before_(y, x) ? 1 : 0;
}

/* Fill l[0..V) (V >= 8192); returns 0, or -1 when out of memory. */
static inline int vt_sampler_adversary(float *l, int64_t V)
{
    const int64_t k = 64;
    double *val = malloc(sizeof(double) * (size_t)V);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)V);
    int64_t *perm = malloc(sizeof(int64_t) * (size_t)V);
    if (!val || !pos || !perm) {
        free(val);
        free(pos);
        free(perm);
        return -1;
    }
    adv_val_ = val;
    for (int64_t i = 0; i < V; i++) val[i] = -1, pos[i] = (int32_t)i; /* -1: not given yet */
    double next = 1;
    int64_t lo = 0, hi = V;
    while (lo < k && k < hi) {
        const int64_t len = hi - lo;
        if (!(len > 4096 && (k - lo) < len / 32)) break;
        int32_t smp[256];
        for (int q = 0; q < 256; q++) {
            const int32_t id = pos[lo + (int64_t)q * (len / 256)];
            if (val[id] < 0) val[id] = next++;
            smp[q] = id;
        }
        qsort(smp, 256, sizeof *smp, adv_cmp_);
        const int64_t r = 2 + (int64_t)((double)(k - lo) * 2.0 * 256.0 / (double)len);
        const int32_t piv = smp[r < 255 ? r : 255];
        int64_t w = lo;
        for (int64_t i = lo; i < hi; i++)
            if (!adv_before_(piv, pos[i])) {
                const int32_t t = pos[w];
                pos[w++] = pos[i];
                pos[i] = t;
            }
        if (k <= w) hi = w;
        else lo = w;
    }
    int64_t nun = 0;
    for (int64_t i = 0; i < V; i++)
        if (val[i] < 0) {
            perm[nun] = nun;
            nun++;
        }
    uint64_t g = 99;
    for (int64_t i = nun - 1; i > 0; i--) {
        g = g * 6364136223846793005ull + 1442695040888963407ull;
        const int64_t j = (int64_t)((g >> 33) % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int64_t i = 0, u = 0; i < V; i++) l[i] = (float)(val[i] < 0 ? next + (double)perm[u++] : val[i]);
    free(val);
    free(pos);
    free(perm);
    return 0;
}

#endif
