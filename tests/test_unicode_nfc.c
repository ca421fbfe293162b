/*
 * test_unicode_nfc.c - the tokenizer's NFC normalization (vt_unicode_nfc,
 * tokenizer_unicode.c; tokenizers.md §4) and its cost (issue 43, item 1).
 *
 *  - Same result as utf8proc_map(STABLE | COMPOSE), the call vt made before
 *    (a different implementation: the library's own decomposition, bubble-
 *    sort ordering and composition), on random text from a palette that has
 *    what NFC acts on: precomposed and decomposed letters, combining marks
 *    of many classes in every order and in runs past the short-run sort
 *    (16), Hangul syllables and jamo, singletons (U+212B), composition
 *    exclusions (U+0958), the two-mark decomposition U+0344, CJK, ASCII.
 *  - Bounded time: text made of a long run of combining marks in alternating
 *    canonical order (U+0301 U+0316 repeated), 200 KB of it, normalized and
 *    tokenized by the qwen35 tokenizer of the fixture in under 1 s (5 s in a
 *    sanitizer build); utf8proc_map took 20 s for 100 k marks. The time is
 *    a bound on a class of inputs, not a speed figure: a quadratic step
 *    misses it by orders of magnitude.
 */
#include "test_util.h"

#include <string.h>
#include <time.h>
#include <utf8proc.h>

#include "error.h"
#include "tokenizer.h"
#include "tokenizer_unicode.h"
#include "vt/gguf.h"

static const uint32_t palette[] = {
    'a',    'e',    'o',    'A',    ' ',    '.',    0x00E9, 0x00C5, 0x1E69, 0x01D5, /* precomposed */
    0x0301, 0x0316, 0x0327, 0x0345, 0x05B0, 0x05B4, 0x0323, 0x0308, 0x0300, 0x0302, /* marks */
    0x031B, 0x0334, 0x0659, 0x093C, 0x0E38, 0x302A, 0x1DCE, 0x20D2, 0x0344, 0x0340,
    0xAC00, 0xAC01, 0x1100, 0x1161, 0x11A8, 0x1112, 0x1175, /* Hangul */
    0x212B, 0x2126, 0x0958, 0x2ADC, 0x0F73, 0x1E9B, 0x4E2D, 0x1F600, 0x0041, 0x030A};
#define N_PALETTE (sizeof palette / sizeof palette[0])

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* utf8proc_map's NFC of cps, as code points (malloc-ed). */
static uint32_t *reference_nfc(const uint32_t *cps, size_t n, size_t *n_out)
{
    char *u = malloc(n * 4 + 1);
    assert_non_null(u);
    size_t len = 0;
    for (size_t i = 0; i < n; i++) len += (size_t)vt_utf8_encode(cps[i], u + len);
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)u, (utf8proc_ssize_t)len, &dst,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    free(u);
    assert_true(r >= 0);
    uint32_t *out = NULL;
    assert_int_equal(vt_utf8_decode((const char *)dst, (size_t)r, &out, n_out), VT_OK);
    free(dst);
    return out;
}

static void test_same_as_utf8proc_map(void **state)
{
    (void)state;
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    for (int round = 0; round < 3000; round++) {
        size_t n = 1 + rng_next(&seed) % (round % 10 == 0 ? 400 : 40);
        uint32_t *cps = malloc(n * sizeof *cps);
        assert_non_null(cps);
        for (size_t i = 0; i < n; i++) {
            /* every 7th round: long runs of marks (the counting sort's side) */
            size_t k = round % 7 == 0 && rng_next(&seed) % 8 ? 10 + rng_next(&seed) % 20
                                                              : rng_next(&seed) % N_PALETTE;
            cps[i] = palette[k];
        }
        size_t n_ref = 0;
        uint32_t *ref = reference_nfc(cps, n, &n_ref);
        size_t n_got = n;
        assert_int_equal(vt_unicode_nfc(&cps, &n_got), VT_OK);
        if (n_got != n_ref || memcmp(cps, ref, n_ref * sizeof *ref)) {
            size_t at = 0;
            while (at < n_got && at < n_ref && cps[at] == ref[at]) at++;
            fail_msg("round %d (%zu code points): vt's NFC has %zu code points, utf8proc_map's %zu; "
                     "first difference at %zu (U+%04X vs U+%04X)",
                     round, n, n_got, n_ref, at, at < n_got ? (unsigned)cps[at] : 0u,
                     at < n_ref ? (unsigned)ref[at] : 0u);
        }
        free(cps);
        free(ref);
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define NFC_BOUND_S 5.0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define NFC_BOUND_S 5.0
#endif
#endif
#ifndef NFC_BOUND_S
#define NFC_BOUND_S 1.0
#endif

static void test_alternating_marks_bounded(void **state)
{
    (void)state;
    enum { PAIRS = 50000 }; /* 'a' + 100,000 marks: 200,001 bytes */
    size_t n = 1 + 2 * (size_t)PAIRS;
    uint32_t *cps = malloc(n * sizeof *cps);
    assert_non_null(cps);
    cps[0] = 'a';
    for (size_t i = 0; i < PAIRS; i++) {
        cps[1 + 2 * i] = 0x0301; /* class 230 */
        cps[2 + 2 * i] = 0x0316; /* class 220 */
    }
    double t0 = now_s();
    size_t m = n;
    assert_int_equal(vt_unicode_nfc(&cps, &m), VT_OK);
    double dt = now_s() - t0;
    fprintf(stderr, "[  NOTE    ] NFC of 'a' + %d alternating marks: %.3f s\n", 2 * PAIRS, dt);
    /* canonical order puts every U+0316 (220) before every U+0301 (230); the
     * first U+0301 is not blocked (220 < 230) and composes with 'a' (U+00E1) */
    assert_int_equal(m, n - 1);
    assert_int_equal(cps[0], 0x00E1);
    for (size_t i = 1; i < m; i++) assert_int_equal(cps[i], i <= PAIRS ? 0x0316 : 0x0301);
    if (dt > NFC_BOUND_S) fail_msg("NFC took %.2f s (bound %.1f s): not linear", dt, NFC_BOUND_S);
    free(cps);

    /* the whole tokenizer on the same text as UTF-8 */
    const char *dir = vt_test_fixtures();
    if (!dir) return;
    char *path = vt_test_path(dir, "qwen35moe-tiny/gguf/qwen35moe-tiny-bf16.gguf");
    vt_gguf *g = NULL;
    if (vt_gguf_open(path, VT_GGUF_NO_MMAP, &g) != VT_OK) fail_msg("open %s: %s", path, vt_last_error());
    vt_tokenizer *t = NULL;
    if (vt_tokenizer_load(g, &t) != VT_OK) fail_msg("tokenizer: %s", vt_last_error());
    vt_gguf_close(g);
    free(path);
    size_t len = 1 + 4 * (size_t)PAIRS;
    char *text = malloc(len + 1);
    assert_non_null(text);
    text[0] = 'a';
    for (size_t i = 0; i < PAIRS; i++) memcpy(text + 1 + 4 * i, "\xcc\x81\xcc\x96", 4);
    text[len] = 0;
    int32_t *ids = NULL;
    int64_t n_ids = 0;
    t0 = now_s();
    assert_int_equal(vt_tokenize(t, text, len, 0, 1, &ids, &n_ids), VT_OK);
    dt = now_s() - t0;
    fprintf(stderr, "[  NOTE    ] tokenize %zu bytes of alternating marks: %lld tokens, %.3f s\n", len,
            (long long)n_ids, dt);
    assert_true(n_ids > 0);
    if (dt > NFC_BOUND_S)
        fail_msg("tokenizing took %.2f s (bound %.1f s): a step is not linear", dt, NFC_BOUND_S);
    free(ids);
    free(text);
    vt_tokenizer_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_as_utf8proc_map),
        cmocka_unit_test(test_alternating_marks_bounded),
    };
    return vt_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
