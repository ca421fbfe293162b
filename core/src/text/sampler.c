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
    free(s->banned);
    free(s);
}

/* The candidates' order: higher logit first, the lower id on equal logits
 * (a total order, so every selection below is deterministic). */
static inline int before(const cand *x, const cand *y)
{
    return x->logit > y->logit || (x->logit == y->logit && x->id < y->id);
}

static int cmp_desc(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    return before(x, y) ? -1 : before(y, x) ? 1 : 0;
}

static inline void swap_cand(cand *a, cand *b)
{
    cand t = *a;
    *a = *b;
    *b = t;
}

/* Reorder c[0..n) so that its first k (0 < k < n) come first in the
 * candidates' order (in any order among themselves): quickselect with a
 * median-of-three pivot and Hoare's partition, or a sampled pivot when few
 * are wanted from many. Every pass, of either kind, is charged to one budget
 * of 2·log2(n) + 8: an order built against the pivots (each pass cutting off
 * little) then has the part left sorted, O(n log n) at worst. */
static void select_first(cand *c, int64_t n, int64_t k)
{
    int64_t lo = 0, hi = n, rounds = 8;
    for (int64_t m = n; m > 1; m >>= 1) rounds += 2;
    /* invariant: c[0..lo) <= c[lo..hi) <= c[hi..n) in the order */
    while (lo < k && k < hi) {
        const int64_t len = hi - lo;
        if (rounds-- == 0) {
            qsort(c + lo, (size_t)len, sizeof *c, cmp_desc);
            return;
        }
        if (len > 4096 && (k - lo) < len / 32) {
            /* few wanted from many (top-k of a vocabulary): the pivot is the
             * element of an evenly spaced sample of 256 whose rank there
             * predicts about twice the wanted count before it, and one pass
             * (mostly compares) moves what comes before it to the front */
            cand smp[256];
            for (int q = 0; q < 256; q++) smp[q] = c[lo + (int64_t)q * (len / 256)];
            qsort(smp, 256, sizeof *smp, cmp_desc);
            int64_t r = 2 + (int64_t)((double)(k - lo) * 2.0 * 256.0 / (double)len);
            const cand piv = smp[r < 255 ? r : 255];
            int64_t w = lo;
            for (int64_t i = lo; i < hi; i++)
                if (!before(&piv, &c[i])) swap_cand(&c[w++], &c[i]);
            /* c[lo..w) <= piv, strictly before c[w..hi); w > lo (piv is one) */
            if (k <= w) hi = w;
            else lo = w;
            continue;
        }
        if (len <= 16) {
            qsort(c + lo, (size_t)(hi - lo), sizeof *c, cmp_desc);
            return;
        }
        const int64_t mid = lo + (hi - lo) / 2;
        if (before(&c[mid], &c[lo])) swap_cand(&c[mid], &c[lo]);
        if (before(&c[hi - 1], &c[lo])) swap_cand(&c[hi - 1], &c[lo]);
        if (before(&c[hi - 1], &c[mid])) swap_cand(&c[hi - 1], &c[mid]);
        const cand piv = c[mid];
        int64_t i = lo - 1, j = hi;
        for (;;) {
            do i++; while (before(&c[i], &piv));
            do j--; while (before(&piv, &c[j]));
            if (i >= j) break;
            swap_cand(&c[i], &c[j]);
        }
        /* c[lo..j] <= piv <= c[j+1..hi), lo <= j < hi - 1 */
        if (k <= j + 1) hi = j + 1;
        else lo = j + 1;
    }
}

/* Make c[0..want) the first `want` of c[0..n) in the candidates' order,
 * sorted, given that c[0..*sorted) already are: the next ones are selected
 * from the rest and sorted, growing the sorted prefix at least fourfold (to
 * 64 at first), so a walk down the whole list costs log4(n) selections of
 * O(n) each, and a walk of a few candidates one. */
static void ensure_sorted(cand *c, int64_t n, int64_t *sorted, int64_t want)
{
    if (want <= *sorted) return;
    int64_t grow = *sorted * 4;
    if (grow < 64) grow = 64;
    if (grow < want) grow = want;
    if (grow > n) grow = n;
    if (grow < n) select_first(c + *sorted, n - *sorted, grow - *sorted);
    qsort(c + *sorted, (size_t)(grow - *sorted), sizeof *c, cmp_desc);
    *sorted = grow;
}

int64_t vt_sampler_bad_logits(const float *logits, int64_t n)
{
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += !isfinite(logits[i]);
    return bad;
}

/*
 * The chain over the candidates in the order above: top-k keeps the first
 * k, top-p the shortest prefix whose probabilities (at temperature 1, over
 * what top-k kept) reach top_p, min-p the prefix with p >= min_p · p_max,
 * then a draw at the temperature walking the kept prefix in order. Only as
 * much of the order as a step reads is made (ensure_sorted), so a
 * 248k-token vocabulary is not sorted per token (it was: 42 ms a token).
 * A sum over a part not yet sorted is taken in array order while the walk
 * adds in sorted order: the two totals can differ by about n·2^-53
 * relative, so a draw differs from a fully sorted walk only when u lands in
 * that sliver (then the walk falls off the end and takes the last kept
 * candidate), about 3e-11 of draws at 248k tokens (test_sampler compares
 * the two on 100k draws).
 */
int32_t vt_sampler_sample(vt_sampler *s, const float *logits)
{
    const int64_t V = s->n_vocab;
    /* the largest logit that is not NaN (a NaN compares false): one pass
     * without branches or the banned mask; the first unbanned id holding it
     * is the argmax (the lowest id on ties), else the masked scan finds it */
    float mx = -INFINITY;
    for (int64_t i = 0; i < V; i++) mx = logits[i] > mx ? logits[i] : mx;
    int32_t best = -1;
    for (int64_t i = 0; i < V; i++)
        if (logits[i] == mx && !s->banned[i]) {
            best = (int32_t)i;
            break;
        }
    if (best < 0) /* every id holding the largest logit is banned (or all is NaN) */
        for (int64_t i = 0; i < V; i++) {
            if (s->banned[i] || isnan(logits[i])) continue;
            if (best < 0 || logits[i] > logits[best]) best = (int32_t)i;
        }
    if (best < 0) return -1; /* nothing to draw */
    if (s->p.temperature <= 0.0f) return best;

    /* the candidates: with top-k on a large vocabulary, only those at or
     * above a threshold that an evenly spaced sample of 1024 logits predicts
     * about 8·k + 64 of (checked: at least k must be found, else all);
     * top-k of the subset is top-k of all, the order being total */
    int64_t n = 0;
    const int32_t K = s->p.top_k;
    if (K > 0 && V >= 16384 && (int64_t)K * 64 < V) {
        float smp[1024];
        int ns = 0;
        for (int q = 0; q < 1024; q++) {
            float x = logits[(int64_t)q * (V / 1024)];
            if (!isnan(x)) smp[ns++] = x;
        }
        if (ns > 64) {
            /* the sample's element of rank r (0: the largest) predicts about
             * r/ns of V at or above it; the r+1 largest kept in top[],
             * descending (r <= 132 here: V >= 64·K) */
            int64_t r = ((int64_t)K * 8 + 64) * ns / V;
            if (r >= ns) r = ns - 1;
            float top[1024];
            int nt = 0;
            for (int i = 0; i < ns; i++) {
                const float x = smp[i];
                if (nt == r + 1 && !(x > top[nt - 1])) continue;
                int k = nt < r + 1 ? nt++ : nt - 1;
                while (k > 0 && top[k - 1] < x) {
                    top[k] = top[k - 1];
                    k--;
                }
                top[k] = x;
            }
            const float t = top[nt - 1];
            for (int64_t i = 0; i < V; i++)
                if (logits[i] >= t && !s->banned[i]) s->c[n++] = (cand){logits[i], (int32_t)i};
            if (n < K) n = 0; /* too few (banned ids, or a skewed sample): all */
        }
    }
    if (n == 0)
        for (int64_t i = 0; i < V; i++)
            if (!s->banned[i] && !isnan(logits[i])) s->c[n++] = (cand){logits[i], (int32_t)i};

    cand *c = s->c;
    int64_t sorted = 0;
    const float l0 = logits[best];
    if (K > 0 && n >= K) { /* the first K, sorted (the sums below run over them in order) */
        ensure_sorted(c, n, &sorted, K);
        n = K;
    }
    /* probabilities at temperature 1 for top-p / min-p (llama.cpp filters before temp) */
    if (s->p.top_p < 1.0f) {
        double sum = 0, acc = 0;
        for (int64_t i = 0; i < n; i++) sum += expf(c[i].logit - l0);
        for (int64_t i = 0; i < n; i++) {
            ensure_sorted(c, n, &sorted, i + 1);
            acc += expf(c[i].logit - l0) / sum;
            if (acc >= s->p.top_p) {
                n = i + 1;
                break;
            }
        }
    }
    if (s->p.min_p > 0.0f) {
        int64_t keep = 1;
        for (;;) {
            ensure_sorted(c, n, &sorted, keep + 1 < n ? keep + 1 : n);
            if (keep >= n || !(expf(c[keep].logit - l0) >= s->p.min_p)) break;
            keep++;
        }
        n = keep;
    }
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += expf((c[i].logit - l0) / s->p.temperature);
    double u = (double)(next_u64(s) >> 11) * (1.0 / 9007199254740992.0) * sum, acc = 0;
    for (int64_t i = 0; i < n; i++) {
        ensure_sorted(c, n, &sorted, i + 1);
        acc += expf((c[i].logit - l0) / s->p.temperature);
        if (u < acc) return c[i].id;
    }
    ensure_sorted(c, n, &sorted, n);
    return c[n - 1].id;
}
