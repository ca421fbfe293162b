/*
 * test_sampler.c - the sampler against facts computed here independently:
 * greedy = argmax (lowest id on ties), banned ids never drawn, top-k = 1 is
 * greedy at any temperature, the same seed reproduces a sequence, and the
 * empirical distribution at temperature 1 follows softmax(logits).
 */
#include "test_util.h"

#include <math.h>

#include "sampler.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_topk1_is_greedy),
        cmocka_unit_test(test_seed_and_distribution),
        cmocka_unit_test(test_top_p_and_min_p),
        cmocka_unit_test(test_nothing_to_sample),
    };
    return vt_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
