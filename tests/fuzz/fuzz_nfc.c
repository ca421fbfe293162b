/*
 * fuzz_nfc.c - libFuzzer target for the tokenizer's NFC normalization
 * (vt_unicode_nfc, core/src/text/tokenizer_unicode.c; tokenizers.md §4), the step
 * that took quadratic time on long runs of combining marks (issue 43 item 1).
 * Built only with -DVT_FUZZ=ON; fuzz_replay_fuzz_nfc replays its seeds in
 * every build.
 *
 * Input: byte 0 selects how the rest becomes code points:
 *   even: the rest is UTF-8 text, decoded as the tokenizer decodes it
 *         (vt_utf8_decode: a bad byte is U+FFFD);
 *   odd:  the rest is a list of 16-bit indices into a palette of what NFC
 *         acts on (combining marks of many classes, precomposed and
 *         decomposed letters, Hangul syllables and jamo, singletons,
 *         exclusions), so that short inputs reach long mark runs.
 * Checks (each failure aborts, which libFuzzer reports):
 *   - time: vt_unicode_nfc of n code points must take (thread CPU time)
 *     VT_FUZZ_NFC_BUDGET_US (default 2,000) + VT_FUZZ_NFC_US_PER_CP (default
 *     2) x n microseconds in the fastest of three runs, whatever the input: a slow input is a finding,
 *     also where libFuzzer's own -timeout (whole seconds) would not see it;
 *   - the result equals utf8proc_map(STABLE | COMPOSE) of the same text (a
 *     different implementation) for inputs of at most 2,048 code points
 *     (utf8proc's own ordering is a bubble sort: longer inputs would time
 *     the reference, not vt);
 *   - NFC is idempotent: normalizing the result again changes nothing.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <utf8proc.h>

#include "error.h"
#include "tokenizer_unicode.h"

#define REF_MAX_CPS 2048

static const uint32_t palette[] = {
    0x0301, 0x0316, 0x0300, 0x0327, 0x0328, 0x0308, 0x031B, 0x0345, 0x05B0, 0x05BC, 0x064B,
    0x0651, 0x0E38, 0x0E48, 0x302A, 0x302B, 0x3099, 0x309A, 0x1DCE, 0x0334, 0x0344, 0x0340,
    0x0065, 0x0041, 0x0061, 0x006F, 0x0055, 0x00E9, 0x00C5, 0x1E69, 0x1EA0, 0x01D5, 0x212B,
    0x2126, 0x0958, 0x0F73, 0x0F75, 0x0F81, 0x1100, 0x1161, 0x11A8, 0xAC00, 0xAC01, 0xD7A3,
    0x304B, 0x30CF, 0x4E00, 0x0020, 0x000A, 0xFFFD, 0x1F600, 0x0915, 0x093C, 0x094D,
};

static unsigned long env_ul(const char *name, unsigned long dflt)
{
    const char *e = getenv(name);
    return e && *e ? strtoul(e, NULL, 10) : dflt;
}

/* the thread's CPU time: a slow input is one that computes long, not one
 * that a loaded machine preempted (wall time gave such false findings) */
static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_nfc: %s\n", what);
        abort();
    }
}

/* UTF-8 of cps[0..n) into a new buffer (*len bytes, NUL-terminated). */
static char *encode(const uint32_t *cps, size_t n, size_t *len)
{
    char *s = malloc(4 * n + 1);
    check(s != NULL, "out of memory");
    size_t o = 0;
    for (size_t i = 0; i < n; i++) o += (size_t)utf8proc_encode_char((utf8proc_int32_t)cps[i], (utf8proc_uint8_t *)s + o);
    s[o] = 0;
    *len = o;
    return s;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    uint32_t *cps = NULL;
    size_t n = 0;
    if (data[0] & 1) {
        n = (size - 1) / 2;
        cps = calloc(n ? n : 1, sizeof *cps);
        check(cps != NULL, "out of memory");
        for (size_t i = 0; i < n; i++) {
            const unsigned k = (unsigned)data[1 + 2 * i] | (unsigned)data[2 + 2 * i] << 8;
            cps[i] = palette[k % (sizeof palette / sizeof *palette)];
        }
    } else if (vt_utf8_decode((const char *)data + 1, size - 1, &cps, &n) != VT_OK) {
        return 0; /* out of memory: not a finding of this target */
    }
    const size_t n_in = n;
    size_t in_len = 0;
    char *in_text = encode(cps, n, &in_len);

    /* a copy of the input for the re-runs below */
    uint32_t *orig = malloc((n_in ? n_in : 1) * sizeof *orig);
    check(orig != NULL, "out of memory");
    memcpy(orig, cps, n_in * sizeof *orig);
    double t0 = now_us();
    vt_status st = vt_unicode_nfc(&cps, &n);
    double dt = now_us() - t0;
    if (st != VT_OK) {
        free(orig);
        free(cps);
        free(in_text);
        return 0;
    }
    const double budget = (double)env_ul("VT_FUZZ_NFC_BUDGET_US", 2000) +
                          (double)env_ul("VT_FUZZ_NFC_US_PER_CP", 2) * (double)n_in;
    /* over it: twice more, the fastest counts (a slow input is slow every
     * time; page faults of the sanitizers' first touches and a loaded
     * machine's cache misses are not) */
    for (int rep = 0; rep < 2 && dt > budget; rep++) {
        size_t n2 = n_in;
        uint32_t *c2 = malloc((n_in ? n_in : 1) * sizeof *c2);
        check(c2 != NULL, "out of memory");
        memcpy(c2, orig, n_in * sizeof *c2);
        t0 = now_us();
        st = vt_unicode_nfc(&c2, &n2);
        const double d2 = now_us() - t0;
        free(c2);
        if (st == VT_OK && d2 < dt) dt = d2;
    }
    free(orig);
    if (dt > budget) {
        fprintf(stderr, "fuzz_nfc: %zu code points took %.0f us (the fastest of three runs), over "
                "the budget of %.0f us\n", n_in, dt, budget);
        abort();
    }
    /* NFC can lengthen text (U+0344 -> U+0308 U+0301 stays decomposed), by 3x at
     * most (UAX #15, "Stream-Safe Text Format" and its expansion table) */
    check(n <= 3 * n_in, "NFC made the text more than 3x longer");

    size_t out_len;
    char *out_text = encode(cps, n, &out_len);
    if (n_in <= REF_MAX_CPS) {
        utf8proc_uint8_t *ref = NULL;
        utf8proc_ssize_t rn = utf8proc_map((const utf8proc_uint8_t *)in_text, (utf8proc_ssize_t)in_len,
                                           &ref, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (rn >= 0) {
            if ((size_t)rn != out_len || memcmp(ref, out_text, out_len) != 0) {
                fprintf(stderr, "fuzz_nfc: vt's NFC differs from utf8proc's (%zu code points in)\n",
                        n_in);
                abort();
            }
            free(ref);
        }
    }
    /* idempotent */
    size_t n2 = n;
    uint32_t *again = malloc((n ? n : 1) * sizeof *again);
    check(again != NULL, "out of memory");
    memcpy(again, cps, n * sizeof *again);
    if (vt_unicode_nfc(&again, &n2) == VT_OK)
        check(n2 == n && memcmp(again, cps, n * sizeof *cps) == 0, "NFC of NFC text changed it");
    free(again);
    free(out_text);
    free(in_text);
    free(cps);
    return 0;
}
