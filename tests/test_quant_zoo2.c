/*
 * test_quant_zoo2.c - the low-bit weight types (IQ1-IQ3, TQ1_0/TQ2_0, NVFP4,
 * Q1_0/Q2_0, and the fork types IQ1_XS/IQ1_XXS/IQ1_XXXS, ids 64-66) against
 * the quant-zoo-2 fixture, which ggml itself quantised and dequantised.
 *
 * 1. Codebooks: every grid of vt/iq_grids.h, expanded, hashes to the FNV-1a
 *    of ggml's table (computed from ggml-common.h, not from vt), and the
 *    sign byte rule gives ggml's ksigns_iq2xs entries quoted below.
 * 2. quant-zoo-2.gguf: its 15 tensors bit for bit against ggml's
 *    dequantisation, and hostile calls refused (quant_zoo_check.h).
 * 3. `vt info` names all 15 types with their bits per weight.
 * 4. A tensor whose type id vt does not know (67, past the fork's 66) is
 *    refused at open, naming the tensor and the id.
 */
#include <unistd.h>

#include "quant_zoo_check.h"
#include "vt/iq_grids.h"

/* quant-zoo-2/README.md's table and index.json's offsets */
static const zoo_row zoo[] = {
    {"IQ2_XXS", 16, 256, 66, 0},      {"IQ2_XS", 17, 256, 74, 4224},
    {"IQ3_XXS", 18, 256, 98, 8960},   {"IQ1_S", 19, 256, 50, 15232},
    {"IQ3_S", 21, 256, 110, 18432},   {"IQ2_S", 22, 256, 82, 25472},
    {"IQ1_M", 29, 256, 56, 30720},    {"TQ1_0", 34, 256, 54, 34304},
    {"TQ2_0", 35, 256, 66, 37760},    {"NVFP4", 40, 64, 36, 41984},
    {"Q1_0", 41, 128, 18, 51200},     {"Q2_0", 42, 64, 18, 53504},
    {"IQ1_XS", 64, 256, 46, 58112},   {"IQ1_XXS", 65, 256, 42, 61056},
    {"IQ1_XXXS", 66, 256, 38, 63744},
};
#define N_ZOO ((int)(sizeof zoo / sizeof zoo[0]))
#define ZOO_DATA_START 960
static const zoo_set zoo_fixture = {"quant-zoo-2", "quant-zoo-2.gguf", ZOO_DATA_START, zoo, N_ZOO};

/* ---- 1. codebooks ---- */

static void test_grids(void **state)
{
    (void)state;
    static const uint32_t want_n[VT_IQ_GRID_COUNT] = {256, 512, 1024, 256, 512, 2048, 1024, 512, 256};
    for (int id = 0; id < VT_IQ_GRID_COUNT; id++) {
        const vt_iq_grid_def *g = vt_iq_grid((vt_iq_grid_id)id);
        assert_non_null(g);
        assert_int_equal(g->n, want_n[id]);
        uint64_t h = 0xcbf29ce484222325ULL;
        for (uint32_t i = 0; i < g->n; i++) {
            uint64_t w = vt_iq_grid_word(g, i);
            for (uint32_t j = 0; j < g->coords; j++) {
                h ^= (uint8_t)(w >> (8 * j));
                h *= 0x100000001b3ULL;
            }
        }
        if (h != g->fnv1a)
            fail_msg("grid %s: FNV-1a of the expanded table 0x%016llx, ggml's 0x%016llx", g->name,
                     (unsigned long long)h, (unsigned long long)g->fnv1a);
    }
    assert_null(vt_iq_grid(VT_IQ_GRID_COUNT));
    /* a few entries of ggml's tables, quoted from ggml-common.h */
    assert_true(vt_iq_grid_word(vt_iq_grid(VT_IQ_GRID_IQ2XXS), 1) == 0x080808080808082bULL);
    assert_true(vt_iq_grid_word(vt_iq_grid(VT_IQ_GRID_IQ2XXS), 255) == 0x2b2b2b1908081908ULL);
    assert_true(vt_iq_grid_word(vt_iq_grid(VT_IQ_GRID_IQ1S), 0) == 0xffffffffffffffffULL);
    /* ksigns_iq2xs: 0, 129, 130, 3, 132, ...; entry 127 = 255 */
    static const uint8_t ks[8] = {0, 129, 130, 3, 132, 5, 6, 135};
    for (uint32_t i = 0; i < 8; i++) assert_int_equal(vt_iq_sign_byte(i), ks[i]);
    assert_int_equal(vt_iq_sign_byte(127), 255);
    assert_int_equal(vt_iq_sign_byte(126), 126);
    /* the plugin's expanded copy is the same */
    assert_true(vt_cpu_iq.iq1xxxs[255] == vt_iq_grid_word(vt_iq_grid(VT_IQ_GRID_IQ1XXXS), 255));
    assert_true(vt_cpu_iq.iq3s[511] == (uint32_t)vt_iq_grid_word(vt_iq_grid(VT_IQ_GRID_IQ3S), 511));
}

/* ---- 2. bit-exact dequantisation, hostile calls; 3. vt info ---- */

static void test_zoo2_bit_exact(void **state)
{
    (void)state;
    zoo_bit_exact(&zoo_fixture);
}

static void test_zoo2_hostile(void **state)
{
    (void)state;
    zoo_hostile(&zoo_fixture);
}

static void test_info_names_types(void **state)
{
    (void)state;
    zoo_info_bits(&zoo_fixture);
}

/* ---- 4. an unknown type id ---- */

static void test_unknown_type_refused(void **state)
{
    (void)state;
    const char *dir = vt_test_fixtures();
    if (!dir) return;
    char *path = vt_test_path(dir, "quant-zoo-2/quant-zoo-2.gguf");
    size_t len = 0;
    uint8_t *buf = vt_test_read_file(path, &len);
    free(path);
    assert_non_null(buf);
    /* the tensor info of IQ1_XXXS.weight: name, n_dims 2, ne[0], ne[1], type */
    const char *nm = "IQ1_XXXS.weight";
    uint8_t *p = NULL;
    for (size_t i = 0; i + strlen(nm) < ZOO_DATA_START; i++)
        if (!memcmp(buf + i, nm, strlen(nm))) p = buf + i + strlen(nm);
    assert_non_null(p);
    uint8_t *type = p + 4 + 8 + 8;
    assert_int_equal(type[0], 66);
    type[0] = 67;
    char tmp[] = "/tmp/vt-zoo2-unknown-XXXXXX";
    int fd = mkstemp(tmp);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, buf, len), (ssize_t)len);
    close(fd);
    free(buf);
    vt_gguf *g = NULL;
    vt_status st = vt_gguf_open(tmp, 0, &g);
    unlink(tmp);
    assert_int_not_equal(st, VT_OK);
    assert_null(g);
    const char *msg = vt_last_error();
    if (!strstr(msg, "IQ1_XXXS.weight") || !strstr(msg, "67"))
        fail_msg("the refusal does not name the tensor and the id: %s", msg);
    fprintf(stderr, "[  INFO    ] type 67: %s\n", msg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grids),
        cmocka_unit_test(test_zoo2_bit_exact),
        cmocka_unit_test(test_zoo2_hostile),
        cmocka_unit_test(test_info_names_types),
        cmocka_unit_test(test_unknown_type_refused),
    };
    return vt_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
