/*
 * test_quant_zoo.c - backend-cpu's scalar reference dequantisation
 * (plugins/backend-cpu/cpu_dequant.c, gguf.md §6) against the quant-zoo
 * fixture, bit for bit, for every type in it; plus hostile arguments, the
 * spec's worked examples, and `vt info`'s type mix / bits per weight.
 *
 * 1. quant-zoo (fixtures/quant-zoo/README.md): every tensor of quant-zoo.gguf,
 *    read with the core GGUF reader (version, alignment, count, type ids,
 *    shapes, sizes and offsets checked against the README's table),
 *    dequantised row by row and as one whole-tensor call, equals
 *    dequant-<TYPE>.f32.bin byte for byte (memcmp: -0.0 and NaN payloads
 *    count). Products are exact in float32 and the min term is added once, so
 *    any correct decoder reproduces the reference bits (README "Why bit
 *    equality"). Each type is checked independently and a per-type verdict is
 *    printed; a missing reference file is that type's failure.
 * 2. Hostile calls: n not a multiple of the block size, n < 0, NULL buffers
 *    are refused with VT_ERR_INVALID_ARG and write nothing; types without a
 *    decoder give VT_ERR_UNSUPPORTED.
 * 3. Worked checks printed in gguf.md (§6.8 Q3_K scales, §6.9 Q4_K scale/min
 *    packing) and MXFP4 exponent edge cases, on hand-built blocks; expected
 *    values come from the spec text, not from the code under test.
 * 4. `vt info` (vt_gguf_print_info) of quant-zoo.gguf: one totals line per
 *    type with its tensor count and bits per weight (8 · bytes-per-block /
 *    block size, from the README's table), and the overall figure.
 * Every one of the 15 types is required to pass.
 */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "cpu_internal.h"
#include "error.h"
#include "gguf_info.h"
#include "vt/gguf.h"

/* The README's per-type table: name, id, block, bytes per block, offset in the data section. */
typedef struct zoo_row {
    const char *name;
    uint32_t id, block, type_size;
    uint64_t offset;
} zoo_row;

static const zoo_row zoo[] = {
    {"F16", 1, 1, 2, 0},          {"Q4_0", 2, 32, 18, 32768},    {"Q4_1", 3, 32, 20, 41984},
    {"Q5_0", 6, 32, 22, 52224},   {"Q5_1", 7, 32, 24, 63488},    {"Q8_0", 8, 32, 34, 75776},
    {"Q2_K", 10, 256, 84, 93184}, {"Q3_K", 11, 256, 110, 98560}, {"Q4_K", 12, 256, 144, 105600},
    {"Q5_K", 13, 256, 176, 114816}, {"Q6_K", 14, 256, 210, 126080},
    {"IQ4_NL", 20, 32, 18, 139520}, {"IQ4_XS", 23, 256, 136, 148736},
    {"BF16", 30, 1, 2, 157440},   {"MXFP4", 39, 32, 17, 190208},
};
#define N_ZOO ((int)(sizeof zoo / sizeof zoo[0]))
#define ZOO_ROWS 64
#define ZOO_COLS 256
#define ZOO_DATA_START 1824

/* Whole file, or NULL (no failure: the caller records it against the type). */
static void *read_opt(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf && n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = buf ? (size_t)n : 0;
    return buf;
}

/* First differing float of got vs want (n floats), or -1; bit patterns compared. */
static int64_t first_diff(const float *got, const float *want, int64_t n)
{
    if (!memcmp(got, want, (size_t)n * sizeof(float))) return -1;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float))) return i;
    return -1;
}

static char why[512];

/* Formats the reason a type failed into why and returns it. */
static const char *because(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const char *because(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return why;
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Checks one type; returns NULL when it passes, else a message (static buffer). */
static const char *zoo_check(const char *dir, vt_gguf *g, const zoo_row *z)
{
    char name[64], rel[96];
    snprintf(name, sizeof name, "%s.weight", z->name);
    snprintf(rel, sizeof rel, "quant-zoo/dequant-%s.f32.bin", z->name);
    const vt_gguf_tensor *t = vt_gguf_find_tensor(g, name);
    if (!t) return because("no tensor %s in quant-zoo.gguf", name);
    uint64_t rb = (uint64_t)ZOO_COLS / z->block * z->type_size;
    if (t->type != z->id || t->ne[0] != ZOO_COLS || t->ne[1] != ZOO_ROWS || t->ne[2] != 1 ||
        t->nbytes != ZOO_ROWS * rb || t->offset != z->offset ||
        t->file_offset != ZOO_DATA_START + z->offset || !t->data)
        return because("%s: type %u ne [%lld, %lld] nbytes %llu offset %llu, README says type %u "
                       "ne [256, 64] nbytes %llu offset %llu (data %s)",
                       name, t->type, (long long)t->ne[0], (long long)t->ne[1],
                       (unsigned long long)t->nbytes, (unsigned long long)t->offset, z->id,
                       (unsigned long long)(ZOO_ROWS * rb), (unsigned long long)z->offset,
                       t->data ? "mapped" : "NULL");

    char *path = vt_test_path(dir, rel);
    size_t len = 0;
    float *want = read_opt(path, &len);
    free(path);
    if (!want) return because("reference file %s missing or unreadable", rel);
    if (len != ZOO_ROWS * ZOO_COLS * sizeof(float)) {
        free(want);
        return because("reference file %s has %zu bytes, not 65536", rel, len);
    }
    const int64_t n = ZOO_ROWS * ZOO_COLS;
    float *got = malloc((size_t)n * sizeof(float));
    assert_non_null(got);
    const char *res = NULL;
    /* (a) row by row, dst pre-filled with a NaN pattern so unwritten values show */
    memset(got, 0xA5, (size_t)n * sizeof(float));
    for (int r = 0; r < ZOO_ROWS && !res; r++) {
        vt_status st = vt_cpu_dequant_row(z->id, (const uint8_t *)t->data + r * rb, ZOO_COLS,
                                          got + r * ZOO_COLS);
        if (st != VT_OK)
            res = because("%s row %d: vt_cpu_dequant_row returned %d", name, r, (int)st);
    }
    int64_t i = res ? -1 : first_diff(got, want, n);
    if (i >= 0)
        res = because("%s row %lld column %lld (block %lld): got %.9g (0x%08x), reference %.9g "
                      "(0x%08x)",
                      name, (long long)(i / ZOO_COLS), (long long)(i % ZOO_COLS),
                      (long long)((i % ZOO_COLS) / z->block), (double)got[i],
                      (unsigned)bits_of(got[i]), (double)want[i], (unsigned)bits_of(want[i]));
    /* (b) the whole tensor in one call: blocks never cross rows */
    if (!res) {
        memset(got, 0x5A, (size_t)n * sizeof(float));
        if (vt_cpu_dequant_row(z->id, t->data, n, got) != VT_OK || first_diff(got, want, n) >= 0)
            res = because("%s: whole-tensor call differs from row-by-row", name);
    }
    free(got);
    free(want);
    return res;
}

static void test_zoo_bit_exact(void **state)
{
    (void)state;
    const char *dir = vt_test_fixtures();
    if (!dir) return;
    char *path = vt_test_path(dir, "quant-zoo/quant-zoo.gguf");
    vt_gguf *g = NULL;
    if (vt_gguf_open(path, 0, &g) != VT_OK) fail_msg("vt_gguf_open %s: %s", path, vt_last_error());
    assert_int_equal(vt_gguf_version(g), 3);
    assert_int_equal(vt_gguf_alignment(g), 32);
    assert_int_equal(vt_gguf_n_tensors(g), N_ZOO);
    assert_int_equal(vt_gguf_shard_data_start(g, 0), ZOO_DATA_START);
    int n_fail = 0;
    char passed[256] = "";
    for (int k = 0; k < N_ZOO; k++) {
        const char *msg = zoo_check(dir, g, &zoo[k]);
        if (msg) {
            fprintf(stderr, "[  FAIL    ] quant-zoo %-6s %s\n", zoo[k].name, msg);
            n_fail++;
        } else {
            fprintf(stderr, "[  PASS    ] quant-zoo %-6s bit-exact (64 x 256)\n", zoo[k].name);
            strcat(passed, " ");
            strcat(passed, zoo[k].name);
        }
    }
    fprintf(stderr, "[  INFO    ] quant-zoo: %d of %d types bit-exact:%s\n", N_ZOO - n_fail, N_ZOO,
            passed);
    vt_gguf_close(g);
    free(path);
    if (n_fail) fail_msg("%d quant-zoo type(s) not bit-exact (see above)", n_fail);
}

static void test_hostile(void **state)
{
    (void)state;
    static uint8_t src[8 * 256 * 4]; /* zeros: room for any whole-block run used below */
    static float dst[2048];
    for (int k = 0; k < N_ZOO; k++) {
        const zoo_row *z = &zoo[k];
        int64_t bs = z->block;
        int64_t bad[] = {-1, -(int64_t)bs, bs > 1 ? bs - 1 : -2, bs > 1 ? bs + 1 : -3,
                         bs > 1 ? 3 * bs + bs / 2 : INT64_MIN};
        for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
            memset(dst, 0x7b, sizeof dst);
            vt_status st = vt_cpu_dequant_row(z->id, src, bad[b], dst);
            if (st != VT_ERR_INVALID_ARG)
                fail_msg("%s: n = %lld (block %lld) gave status %d, want VT_ERR_INVALID_ARG",
                         z->name, (long long)bad[b], (long long)bs, (int)st);
            for (size_t i = 0; i < sizeof dst / sizeof dst[0]; i++)
                if (((uint8_t *)dst)[4 * i] != 0x7b)
                    fail_msg("%s: refused call with n = %lld wrote dst[%zu]", z->name,
                             (long long)bad[b], i);
        }
        assert_int_equal(vt_cpu_dequant_row(z->id, NULL, bs, dst), VT_ERR_INVALID_ARG);
        assert_int_equal(vt_cpu_dequant_row(z->id, src, bs, NULL), VT_ERR_INVALID_ARG);
        assert_int_equal(vt_cpu_dequant_row(z->id, src, 0, dst), VT_OK);
        /* whole blocks of zero bytes decode (to finite values) */
        assert_int_equal(vt_cpu_dequant_row(z->id, src, 2 * bs, dst), VT_OK);
        for (int64_t i = 0; i < 2 * bs; i++) assert_true(isfinite(dst[i]));
        assert_true(vt_cpu_dequant_handles(z->id));
    }
    assert_int_equal(vt_cpu_dequant_row(VT_TYPE_F32, src, 7, dst), VT_OK);
    static const uint32_t unsupported[] = {VT_TYPE_Q8_1, VT_TYPE_Q8_K, VT_TYPE_I32, VT_TYPE_I8,
                                           4, 43, 63, 67, 1000, UINT32_MAX};
    for (size_t u = 0; u < sizeof unsupported / sizeof unsupported[0]; u++) {
        if (vt_cpu_dequant_row(unsupported[u], src, 256, dst) != VT_ERR_UNSUPPORTED)
            fail_msg("type id %u: want VT_ERR_UNSUPPORTED", unsupported[u]);
        assert_false(vt_cpu_dequant_handles(unsupported[u]));
    }
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

#define F16_ONE 0x3C00u

static void test_spec_worked_checks(void **state)
{
    (void)state;
    static const uint8_t scale_bytes[12] = {0x41, 0x02, 0xC3, 0x3F, 0x85, 0x06,
                                            0x47, 0xC8, 0x19, 0x2A, 0x3B, 0x4C};
    float y[256];

    /* §6.8: with d = 1, every hmask bit set (no -4) and every 2-bit code 1,
     * y[i] = sc[i/16]; the spec lists sc. */
    static const int q3_sc[16] = {-15, 2, 19, -17, 5, 6, 7, 24, -12, 0, 28, -29, -24, -32, -28, -4};
    uint8_t q3[110];
    memset(q3, 0xFF, 32);      /* hmask */
    memset(q3 + 32, 0x55, 64); /* qs: 01 01 01 01 */
    memcpy(q3 + 96, scale_bytes, 12);
    put16(q3 + 108, F16_ONE);
    assert_int_equal(vt_cpu_dequant_row(VT_TYPE_Q3_K, q3, 256, y), VT_OK);
    for (int i = 0; i < 256; i++)
        if (y[i] != (float)q3_sc[i / 16])
            fail_msg("Q3_K worked check: y[%d] = %g, spec scale %d", i, (double)y[i], q3_sc[i / 16]);
    /* hmask bits cleared: q = 1 - 4 = -3 */
    memset(q3, 0x00, 32);
    assert_int_equal(vt_cpu_dequant_row(VT_TYPE_Q3_K, q3, 256, y), VT_OK);
    for (int i = 0; i < 256; i++) assert_true(y[i] == (float)(-3 * q3_sc[i / 16]));

    /* §6.9: (sc, m) pairs of the worked example, through Q4_K with every code 1:
     * dmin = 0 gives y = sc, d = 0 gives y = -m. */
    static const int q4_sc[8] = {1, 2, 3, 63, 25, 10, 59, 12};
    static const int q4_m[8] = {5, 6, 7, 8, 33, 2, 19, 52};
    uint8_t q4[144];
    memcpy(q4 + 4, scale_bytes, 12);
    memset(q4 + 16, 0x11, 128);
    put16(q4, F16_ONE);
    put16(q4 + 2, 0);
    assert_int_equal(vt_cpu_dequant_row(VT_TYPE_Q4_K, q4, 256, y), VT_OK);
    for (int i = 0; i < 256; i++)
        if (y[i] != (float)q4_sc[i / 32])
            fail_msg("Q4_K worked check: y[%d] = %g, spec scale %d", i, (double)y[i], q4_sc[i / 32]);
    put16(q4, 0);
    put16(q4 + 2, F16_ONE);
    assert_int_equal(vt_cpu_dequant_row(VT_TYPE_Q4_K, q4, 256, y), VT_OK);
    for (int i = 0; i < 256; i++)
        if (y[i] != (float)-q4_m[i / 32])
            fail_msg("Q4_K worked check: y[%d] = %g, spec min %d", i, (double)y[i], q4_m[i / 32]);
    /* the same packing through Q5_K, 5th bit set everywhere: y = sc · 17 */
    uint8_t q5[176];
    put16(q5, F16_ONE);
    put16(q5 + 2, 0);
    memcpy(q5 + 4, scale_bytes, 12);
    memset(q5 + 16, 0xFF, 32);
    memset(q5 + 48, 0x11, 128);
    assert_int_equal(vt_cpu_dequant_row(VT_TYPE_Q5_K, q5, 256, y), VT_OK);
    for (int i = 0; i < 256; i++) assert_true(y[i] == (float)(17 * q4_sc[i / 32]));

    /* §6.16 MXFP4: E2M1 code c times 2^(e-127), including the subnormal scales
     * e = 0, 1 and the largest finite products. */
    static const double e2m1[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};
    static const int exps[] = {0, 1, 2, 100, 127, 128, 200, 253};
    for (size_t k = 0; k < sizeof exps / sizeof exps[0]; k++) {
        uint8_t mx[17];
        mx[0] = (uint8_t)exps[k];
        for (int j = 0; j < 16; j++) mx[1 + j] = (uint8_t)(j | (15 - j) << 4);
        assert_int_equal(vt_cpu_dequant_row(VT_TYPE_MXFP4, mx, 32, y), VT_OK);
        for (int j = 0; j < 32; j++) {
            int c = j < 16 ? j : 15 - (j - 16);
            float want = (float)ldexp(e2m1[c], exps[k] - 127); /* exact in float */
            if (memcmp(&y[j], &want, 4) && !(y[j] == 0 && want == 0))
                fail_msg("MXFP4 e=%d code %d: got %.9g, want %.9g", exps[k], c, (double)y[j],
                         (double)want);
        }
    }
}

/* The number after `label` on its totals line, and the bits/weight figure of that line. */
static void totals_line(const char *rep, const char *label, long *tensors, double *bpw)
{
    const char *p = strstr(rep, "-- totals --");
    assert_non_null(p);
    p = strstr(p, label);
    if (!p) fail_msg("vt info has no totals line '%s'", label + 1);
    const char *eol = strchr(p + 1, '\n'); /* p is at the newline before the line */
    *tensors = strtol(p + strlen(label), NULL, 10);
    const char *b = strstr(p, " bits/weight");
    if (!b || (eol && b > eol)) fail_msg("totals line '%s' has no bits/weight", label + 1);
    while (b > p && b[-1] != ' ') b--;
    *bpw = strtod(b, NULL);
}

static void test_info_bits_per_weight(void **state)
{
    (void)state;
    const char *dir = vt_test_fixtures();
    if (!dir) return;
    char *path = vt_test_path(dir, "quant-zoo/quant-zoo.gguf");
    vt_gguf *g = NULL;
    if (vt_gguf_open(path, 0, &g) != VT_OK) fail_msg("vt_gguf_open %s: %s", path, vt_last_error());
    char *rep = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&rep, &len);
    assert_non_null(f);
    assert_int_equal(vt_gguf_print_info(g, f), VT_OK);
    fclose(f);
    uint64_t all_bytes = 0;
    for (int k = 0; k < N_ZOO; k++) {
        char label[48];
        snprintf(label, sizeof label, "\ntype %-18s", zoo[k].name); /* padded: Q4_0 != Q4_0x */
        long n;
        double bpw, want = 8.0 * zoo[k].type_size / zoo[k].block;
        totals_line(rep, label, &n, &bpw);
        if (n != 1 || fabs(bpw - want) > 5e-5)
            fail_msg("vt info, type %s: %ld tensors, %.5f bits/weight; want 1 and %.5f", zoo[k].name,
                     n, bpw, want);
        all_bytes += (uint64_t)ZOO_ROWS * ZOO_COLS / zoo[k].block * zoo[k].type_size;
    }
    long n;
    double bpw, want = 8.0 * (double)all_bytes / (N_ZOO * ZOO_ROWS * ZOO_COLS);
    totals_line(rep, "\nall ", &n, &bpw);
    assert_int_equal(n, N_ZOO);
    if (fabs(bpw - want) > 5e-5) fail_msg("vt info overall: %.5f bits/weight, want %.5f", bpw, want);
    fprintf(stderr, "[  INFO    ] vt info quant-zoo: overall %.4f bits/weight (%llu bytes)\n", bpw,
            (unsigned long long)all_bytes);
    free(rep);
    vt_gguf_close(g);
    free(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zoo_bit_exact),
        cmocka_unit_test(test_hostile),
        cmocka_unit_test(test_spec_worked_checks),
        cmocka_unit_test(test_info_bits_per_weight),
    };
    return vt_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
