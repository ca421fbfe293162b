/*
 * test_cache_sim.c - the offline replacement simulations (core/src/stream/cache_sim.c):
 *  - hand-worked traces for Belady's optimum and LRU (cyclic access larger
 *    than the cache: LRU 0 hits, Belady capacity-1 of every cycle);
 *  - the batch rule: keys of one batch are never each other's victims, a
 *    repeat within a batch is one use, a batch larger than the cache refused;
 *  - on random traces Belady >= LRU, both <= uses, and Belady is monotone in
 *    the cache size. (LRU replayed over the expert streamer's own trace
 *    equals its measured hits: test_expert_streamer's test_trace_replay.)
 */
#include "test_util.h"

#include "cache_sim.h"
#include "error.h"

static void run_both(const uint32_t *k, const uint64_t *b, size_t n, uint32_t n_keys, uint64_t cap,
                     vt_cache_sim_result *lru, vt_cache_sim_result *opt)
{
    if (vt_cache_sim_lru(k, b, NULL, n, n_keys, cap, lru) != VT_OK) fail_msg("%s", vt_last_error());
    if (vt_cache_sim_belady(k, b, NULL, n, n_keys, cap, opt) != VT_OK) fail_msg("%s", vt_last_error());
}

static void test_cyclic(void **state)
{
    (void)state;
    /* keys 0 1 2 3 repeated 5 times, one key per batch, cache of 3 */
    uint32_t k[20];
    uint64_t b[20];
    for (int i = 0; i < 20; i++) {
        k[i] = (uint32_t)(i % 4);
        b[i] = (uint64_t)i;
    }
    vt_cache_sim_result lru, opt;
    run_both(k, b, 20, 4, 3, &lru, &opt);
    assert_int_equal(lru.uses, 20);
    assert_int_equal(lru.hits, 0); /* LRU always evicts the next key needed */
    /* Belady, worked by hand: misses at positions 0 1 2 (cold), 3, 6, 9,
     * 12, 15, 18 (one in every 3 after the first cycle: it keeps the two keys
     * needed soonest); hits at 4 5 7 8 10 11 13 14 16 17 19 = 11 */
    assert_int_equal(opt.hits, 11);
    /* a cache holding everything: only the cold misses */
    run_both(k, b, 20, 4, 4, &lru, &opt);
    assert_int_equal(lru.hits, 16);
    assert_int_equal(opt.hits, 16);
}

static void test_batches(void **state)
{
    (void)state;
    /* batch 0: {0, 1, 1}; batch 1: {2, 0}; batch 2: {1}; cache 2.
     * b0: 0 miss, 1 miss, 1 repeat (not a use). b1: the resident 0 is claimed
     * first (a hit; evicting it for 2, as a plain in-order LRU would, is
     * what the batch rule forbids), then 2 misses and evicts 1 -> {0, 2}.
     * b2: 1 miss. 1 hit of 5 uses, LRU and Belady alike. Then batch 1 as
     * {2, 1}: LRU evicts 0 for 2 (older than 1); Belady evicts 0 too (never
     * used again) -> both 1 hit (the 1 of batch 1), and b2 a hit as well. */
    uint32_t k[] = {0, 1, 1, 2, 0, 1};
    uint64_t b[] = {0, 0, 0, 1, 1, 2};
    vt_cache_sim_result lru, opt;
    run_both(k, b, 6, 3, 2, &lru, &opt);
    assert_int_equal(lru.uses, 5);
    assert_int_equal(lru.hits, 1);
    assert_int_equal(opt.uses, 5);
    assert_int_equal(opt.hits, 1);
    uint32_t k2[] = {0, 1, 1, 2, 1, 1};
    run_both(k2, b, 6, 3, 2, &lru, &opt);
    assert_int_equal(lru.hits, 2);
    assert_int_equal(opt.hits, 2);
    /* batch order: in {2, 0} of cache {0, 1} (0 older), an in-order LRU that
     * did not claim hits first would evict 0 for 2 and then miss on 0 */
    uint32_t k3o[] = {0, 1, 2, 0};
    uint64_t b3o[] = {0, 1, 2, 2};
    run_both(k3o, b3o, 4, 3, 2, &lru, &opt);
    assert_int_equal(lru.hits, 1);
    /* counted: only batch 1 counts */
    uint8_t c[] = {0, 0, 0, 1, 1, 0};
    assert_int_equal(vt_cache_sim_belady(k, b, c, 6, 3, 2, &opt), VT_OK);
    assert_int_equal(opt.uses, 2);
    assert_int_equal(opt.hits, 1);
    /* refusals */
    uint32_t k3[] = {0, 1, 2};
    uint64_t b3[] = {0, 0, 0};
    assert_int_equal(vt_cache_sim_lru(k3, b3, NULL, 3, 3, 2, &lru), VT_ERR_INVALID_ARG);
    if (!strstr(vt_last_error(), "needs 3 keys")) fail_msg("%s", vt_last_error());
    uint32_t kb[] = {5};
    uint64_t bb[] = {0};
    assert_int_equal(vt_cache_sim_belady(kb, bb, NULL, 1, 3, 2, &opt), VT_ERR_INVALID_ARG);
    uint64_t bo[] = {1, 0};
    assert_int_equal(vt_cache_sim_belady(k, bo, NULL, 2, 3, 2, &opt), VT_ERR_INVALID_ARG);
}

/* Belady is optimal: on random traces it never has fewer hits than LRU, nor
 * than any cache size smaller than its own (monotone in capacity). */
static void test_random(void **state)
{
    (void)state;
    uint64_t x = 42;
    for (int round = 0; round < 50; round++) {
        size_t n = 2000;
        uint32_t n_keys = 8 + (uint32_t)(round % 40);
        uint32_t *k = malloc(n * sizeof *k);
        uint64_t *b = malloc(n * sizeof *b);
        uint64_t batch = 0;
        for (size_t i = 0; i < n; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            /* skewed: half the requests go to the first quarter of the keys */
            uint32_t r = (uint32_t)(x >> 33);
            k[i] = (r & 1) ? r / 2 % (n_keys / 4) : r / 2 % n_keys;
            if (i % 3 == 0) batch++;
            b[i] = batch;
        }
        uint64_t prev_opt = 0;
        for (uint64_t cap = 3; cap <= n_keys; cap += 2) {
            vt_cache_sim_result lru, opt;
            run_both(k, b, n, n_keys, cap, &lru, &opt);
            if (opt.hits < lru.hits)
                fail_msg("round %d, cache %llu: Belady %llu hits < LRU %llu", round,
                         (unsigned long long)cap, (unsigned long long)opt.hits,
                         (unsigned long long)lru.hits);
            if (opt.hits < prev_opt) fail_msg("Belady not monotone in the cache size");
            assert_true(opt.hits <= opt.uses);
            assert_int_equal(opt.uses, lru.uses);
            prev_opt = opt.hits;
        }
        free(k);
        free(b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cyclic),
        cmocka_unit_test(test_batches),
        cmocka_unit_test(test_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
