/*
 * test_sampler.c - the sampler against facts computed here independently:
 * greedy = argmax (lowest id on ties), banned ids never drawn, top-k = 1 is
 * greedy at any temperature, the same seed reproduces a sequence, and the
 * empirical distribution at temperature 1 follows softmax(logits). And the
 * sampler, which orders only as much of the vocabulary as each step reads,
 * draws what the chain over a FULLY sorted candidate list draws (ref_sample
 * below, written from the chain's definition in sampler.h) on every row.
 */
#include "test_util.h"

#include <math.h>

#include "sampler.h"
#include "../bench/sampler_adversary.h"

static void test_greedy(void **s)
{
    (void)s;
    float l[6] = {0.1f, 3.0f, -1.0f, 3.0f, 2.0f, 0.0f};
    vt_sampler_params p = {.temperature = 0};
    vt_sampler *sm;
    assert_int_equal(vt_sampler_new(&p, 6, NULL, &sm), VT_OK);
    assert_int_equal(vt_sampler_sample(sm, l), 1);
    vt_sampler_free(sm);
    uint8_t banned[6] = {0, 1, 0, 0, 0, 0};
    assert_int_equal(vt_sampler_new(&p, 6, banned, &sm), VT_OK);
    assert_int_equal(vt_sampler_sample(sm, l), 3);
    vt_sampler_free(sm);
}

static void test_topk1_is_greedy(void **s)
{
    (void)s;
    float l[5] = {0.5f, 0.4f, 0.6f, 0.1f, 0.59f};
    vt_sampler_params p = {.temperature = 5.0f, .top_k = 1, .top_p = 1.0f, .seed = 7};
    vt_sampler *sm;
    assert_int_equal(vt_sampler_new(&p, 5, NULL, &sm), VT_OK);
    for (int i = 0; i < 100; i++) assert_int_equal(vt_sampler_sample(sm, l), 2);
    vt_sampler_free(sm);
}

static void test_seed_and_distribution(void **s)
{
    (void)s;
    float l[4] = {0.0f, 1.0f, 2.0f, -1.0f};
    vt_sampler_params p = {.temperature = 1.0f, .top_p = 1.0f, .seed = 42};
    vt_sampler *a, *b;
    assert_int_equal(vt_sampler_new(&p, 4, NULL, &a), VT_OK);
    assert_int_equal(vt_sampler_new(&p, 4, NULL, &b), VT_OK);
    int count[4] = {0};
    const int n = 200000;
    for (int i = 0; i < n; i++) {
        int x = vt_sampler_sample(a, l);
        assert_int_equal(x, vt_sampler_sample(b, l));
        count[x]++;
    }
    double z = 0;
    for (int i = 0; i < 4; i++) z += exp(l[i]);
    for (int i = 0; i < 4; i++) {
        double pe = exp(l[i]) / z, got = (double)count[i] / n;
        /* 5 standard deviations of a binomial proportion */
        double tol = 5 * sqrt(pe * (1 - pe) / n);
        if (fabs(got - pe) > tol) fail_msg("token %d: p=%.4f got %.4f", i, pe, got);
    }
    vt_sampler_free(a);
    vt_sampler_free(b);
}

static void test_top_p_and_min_p(void **s)
{
    (void)s;
    /* probabilities ~ 0.64, 0.24, 0.09, 0.03: top_p 0.7 keeps the first two */
    float l[4] = {3.0f, 2.0f, 1.0f, 0.0f};
    vt_sampler_params p = {.temperature = 1.0f, .top_p = 0.7f, .seed = 1};
    vt_sampler *sm;
    assert_int_equal(vt_sampler_new(&p, 4, NULL, &sm), VT_OK);
    for (int i = 0; i < 2000; i++) assert_true(vt_sampler_sample(sm, l) <= 1);
    vt_sampler_free(sm);
    /* min_p 0.3: keeps p >= 0.3 * 0.64 = 0.19 -> ids 0, 1 */
    p = (vt_sampler_params){.temperature = 1.0f, .top_p = 1.0f, .min_p = 0.3f, .seed = 2};
    assert_int_equal(vt_sampler_new(&p, 4, NULL, &sm), VT_OK);
    int seen1 = 0;
    for (int i = 0; i < 2000; i++) {
        int x = vt_sampler_sample(sm, l);
        assert_true(x <= 1);
        seen1 |= x == 1;
    }
    assert_true(seen1);
    vt_sampler_free(sm);
}


/* Nothing to draw (issue 17): all logits NaN, or every token banned (an
 * all-UNUSED vocabulary), is -1, never token 0; non-finite logits are
 * counted for the caller to stop on. */
static void test_nothing_to_sample(void **s)
{
    (void)s;
    float l[4] = {NAN, NAN, NAN, NAN};
    vt_sampler_params p = {.temperature = 0};
    vt_sampler *sm;
    assert_int_equal(vt_sampler_new(&p, 4, NULL, &sm), VT_OK);
    assert_int_equal(vt_sampler_sample(sm, l), -1);
    vt_sampler_free(sm);
    float g[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    uint8_t all[4] = {1, 1, 1, 1};
    p.temperature = 0.8f;
    assert_int_equal(vt_sampler_new(&p, 4, all, &sm), VT_OK);
    assert_int_equal(vt_sampler_sample(sm, g), -1);
    vt_sampler_free(sm);
    float b[5] = {1.0f, INFINITY, NAN, -INFINITY, 0.0f};
    assert_int_equal(vt_sampler_bad_logits(b, 5), 3);
    assert_int_equal(vt_sampler_bad_logits(g, 4), 0);
}

/* ---- the reference: the whole candidate list sorted, then the chain ---- */

typedef struct ref_cand {
    float logit;
    int32_t id;
} ref_cand;

static int ref_cmp(const void *a, const void *b)
{
    const ref_cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id - y->id;
}

/* splitmix64-seeded xoshiro256**, as the sampler's header says it uses */
typedef struct ref_rng {
    uint64_t s[4];
} ref_rng;

static uint64_t ref_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static void ref_seed(ref_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++) {
        uint64_t z = (seed += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        r->s[i] = z ^ (z >> 31);
    }
}

static uint64_t ref_next(ref_rng *r)
{
    uint64_t x = ref_rotl(r->s[1] * 5, 7) * 9, t = r->s[1] << 17;
    r->s[2] ^= r->s[0];
    r->s[3] ^= r->s[1];
    r->s[1] ^= r->s[2];
    r->s[0] ^= r->s[3];
    r->s[2] ^= t;
    r->s[3] = ref_rotl(r->s[3], 45);
    return x;
}

static int32_t ref_sample(const vt_sampler_params *p, ref_rng *r, const float *l,
                          const uint8_t *banned, int64_t V, ref_cand *c, double *prob)
{
    int64_t n = 0;
    for (int64_t i = 0; i < V; i++)
        if (!(banned && banned[i]) && !isnan(l[i])) c[n++] = (ref_cand){l[i], (int32_t)i};
    if (!n) return -1;
    qsort(c, (size_t)n, sizeof *c, ref_cmp);
    if (p->temperature <= 0) return c[0].id;
    if (p->top_k > 0 && n > p->top_k) n = p->top_k;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (prob[i] = expf(c[i].logit - c[0].logit));
    if (p->top_p < 1.0f) {
        double acc = 0;
        for (int64_t i = 0; i < n; i++) {
            acc += prob[i] / sum;
            if (acc >= p->top_p) {
                n = i + 1;
                break;
            }
        }
    }
    if (p->min_p > 0.0f) {
        int64_t keep = 1;
        while (keep < n && prob[keep] >= p->min_p * prob[0]) keep++;
        n = keep;
    }
    sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (prob[i] = expf((c[i].logit - c[0].logit) / p->temperature));
    double u = (double)(ref_next(r) >> 11) * (1.0 / 9007199254740992.0) * sum, acc = 0;
    for (int64_t i = 0; i < n; i++) {
        acc += prob[i];
        if (u < acc) return c[i].id;
    }
    return c[n - 1].id;
}

/* Vocabularies of 1..300 tokens and 20,000, logits with ties (rounded to a
 * coarse grid, with 9 ids in 10 banned), flat and peaked rows, banned ids
 * and NaN; at 20,000 tokens also a row built against the sampled pivot, one
 * with 30 unbanned ids (fewer than top-k above the threshold) and one whose
 * threshold samples are all NaN; greedy and every combination
 * of top-k (off, 1, 5, 40, > n), top-p (off, 0.9, 0.5), min-p (off, 0.05,
 * 0.5) and temperature (0.3, 0.8, 1.5): every draw equals the reference's. */
static void test_against_full_sort(void **s)
{
    (void)s;
    static const int32_t topk[] = {0, 1, 5, 40, 1000000};
    static const float topp[] = {1.0f, 0.9f, 0.5f}, minp[] = {0.0f, 0.05f, 0.5f};
    static const float temps[] = {0.0f, 0.3f, 0.8f, 1.5f};
    const int64_t big = 20000;
    float *l = malloc(sizeof(float) * (size_t)big);
    uint8_t *ban = malloc((size_t)big);
    ref_cand *c = malloc(sizeof(ref_cand) * (size_t)big);
    double *prob = malloc(sizeof(double) * (size_t)big);
    assert_true(l && ban && c && prob);
    uint64_t g = 12345;
    int64_t draws = 0, rows = 0;
    for (int64_t V = 1; V <= big; V = V < 300 ? V + 7 : V == 302 ? big : big + 1) {
        for (int shape = 0; shape < (V == big ? 6 : 3); shape++) {
            if (shape == 3) { /* built against the sampled pivot (sampler_adversary.h) */
                assert_int_equal(vt_sampler_adversary(l, V), 0);
                memset(ban, 0, (size_t)V);
                rows++;
                goto draw;
            }
            for (int64_t i = 0; i < V; i++) {
                g = g * 6364136223846793005ull + 1442695040888963407ull;
                double x = (double)(g >> 11) / 9007199254740992.0;
                float v = shape == 0 ? (float)(x * 4.0)           /* flat */
                        : shape == 1 ? (float)(-log(x + 1e-12) * 3.0) /* a peaked tail */
                                     : (float)((int)(x * 8.0)) * 0.5f; /* few values: ties */
                l[i] = v;
                /* the tied rows ban 9 ids in 10 (as a padded vocabulary does) */
                ban[i] = shape == 2 ? i % 10 != 0 : ((g >> 20) & 31) == 0;
            }
            if (V > 3) l[V / 3] = NAN;
            if (shape == 4) /* 30 unbanned ids: top-k's threshold finds fewer than k */
                for (int64_t i = 0; i < V; i++) ban[i] = i % 667 != 0;
            if (shape == 5) /* every id the threshold samples is NaN */
                for (int q = 0; q < 1024; q++) l[(int64_t)q * (V / 1024)] = NAN;
            rows++;
        draw:
            for (size_t a = 0; a < sizeof topk / sizeof topk[0]; a++)
                for (size_t b = 0; b < 3; b++)
                    for (size_t d = 0; d < 3; d++)
                        for (size_t t = 0; t < 4; t++) {
                            vt_sampler_params p = {.temperature = temps[t], .top_k = topk[a],
                                                   .top_p = topp[b], .min_p = minp[d],
                                                   .seed = (uint64_t)(V * 131 + shape)};
                            vt_sampler *sm;
                            assert_int_equal(vt_sampler_new(&p, V, ban, &sm), VT_OK);
                            ref_rng r;
                            ref_seed(&r, p.seed);
                            const int reps = V == big ? 3 : 4;
                            for (int k = 0; k < reps; k++) {
                                int32_t want = ref_sample(&p, &r, l, ban, V, c, prob);
                                int32_t got = vt_sampler_sample(sm, l);
                                if (got != want)
                                    fail_msg("V %lld shape %d top_k %d top_p %.2f min_p %.2f temp "
                                             "%.1f draw %d: sampled %d, the fully sorted chain %d",
                                             (long long)V, shape, topk[a], (double)topp[b],
                                             (double)minp[d], (double)temps[t], k, got, want);
                                draws++;
                            }
                            vt_sampler_free(sm);
                        }
        }
    }
    printf("[sampler] %lld rows, %lld draws equal the fully sorted reference\n", (long long)rows,
           (long long)draws);
    free(l);
    free(ban);
    free(c);
    free(prob);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_topk1_is_greedy),
        cmocka_unit_test(test_seed_and_distribution),
        cmocka_unit_test(test_top_p_and_min_p),
        cmocka_unit_test(test_nothing_to_sample),
        cmocka_unit_test(test_against_full_sort),
    };
    return vt_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
