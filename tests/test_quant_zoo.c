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
#include "quant_zoo_check.h"

/* The README's per-type table: name, id, block, bytes per block, offset in the data section. */
static const zoo_row zoo[] = {
    {"F16", 1, 1, 2, 0},          {"Q4_0", 2, 32, 18, 32768},    {"Q4_1", 3, 32, 20, 41984},
    {"Q5_0", 6, 32, 22, 52224},   {"Q5_1", 7, 32, 24, 63488},    {"Q8_0", 8, 32, 34, 75776},
    {"Q2_K", 10, 256, 84, 93184}, {"Q3_K", 11, 256, 110, 98560}, {"Q4_K", 12, 256, 144, 105600},
    {"Q5_K", 13, 256, 176, 114816}, {"Q6_K", 14, 256, 210, 126080},
    {"IQ4_NL", 20, 32, 18, 139520}, {"IQ4_XS", 23, 256, 136, 148736},
    {"BF16", 30, 1, 2, 157440},   {"MXFP4", 39, 32, 17, 190208},
};
#define N_ZOO ((int)(sizeof zoo / sizeof zoo[0]))
static const zoo_set zoo_fixture = {"quant-zoo", "quant-zoo.gguf", 1824, zoo, N_ZOO};

static void test_zoo_bit_exact(void **state)
{
    (void)state;
    zoo_bit_exact(&zoo_fixture);
}

static void test_hostile(void **state)
{
    (void)state;
    zoo_hostile(&zoo_fixture);
    static uint8_t src[8 * 256 * 4];
    static float dst[2048];
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
static void test_info_bits_per_weight(void **state)
{
    (void)state;
    zoo_info_bits(&zoo_fixture);
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
