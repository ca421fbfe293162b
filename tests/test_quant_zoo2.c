/*
 * test_quant_zoo2.c - the low-bit weight types (IQ1-IQ3, TQ1_0/TQ2_0, NVFP4,
 * Q1_0/Q2_0, and the fork types IQ1_XS/IQ1_XXS/IQ1_XXXS, ids 64-66) against
 * the quant-zoo-2 fixture, which ggml itself quantised and dequantised.
 *
 * 1. Codebooks: every grid of vt/iq_grids.h, expanded, hashes to the FNV-1a
 *    of ggml's table (computed from ggml-common.h, not from vt), and the
 *    sign byte rule gives ggml's ksigns_iq2xs entries quoted below.
 * 2. quant-zoo-2.gguf: its 15 tensors read with the core GGUF reader (ids,
 *    block geometry and offsets against the README's table), dequantised by
 *    backend-cpu's scalar reference row by row, as one whole-tensor call and
 *    through the fast (panel) decoder, equal dequant-<TYPE>.f32.bin bit for
 *    bit. Each type is judged and printed on its own.
 * 3. `vt info` names all 15 types with their bits per weight.
 * 4. A tensor whose type id vt does not know (67, past the fork's 66) is
 *    refused at open, naming the tensor and the id.
 */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"
#include "cpu_internal.h"
#include "error.h"
#include "gguf_info.h"
#include "vt/gguf.h"
#include "vt/iq_grids.h"

typedef struct zoo_row {
    const char *name;
    uint32_t id, block, type_size;
    uint64_t offset;
} zoo_row;

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
#define ZOO_ROWS 64
#define ZOO_COLS 256
#define ZOO_DATA_START 960

static char why[512];
static const char *because(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const char *because(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return why;
}

static int64_t first_diff(const float *got, const float *want, int64_t n)
{
    if (!memcmp(got, want, (size_t)n * sizeof(float))) return -1;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float))) return i;
    return -1;
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

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

/* ---- 2. bit-exact dequantisation ---- */

static const char *zoo_check(const char *dir, vt_gguf *g, const zoo_row *z)
{
    char name[64], rel[96];
    snprintf(name, sizeof name, "%s.weight", z->name);
    snprintf(rel, sizeof rel, "quant-zoo-2/dequant-%s.f32.bin", z->name);
    const vt_gguf_tensor *t = vt_gguf_find_tensor(g, name);
    if (!t) return because("no tensor %s in quant-zoo-2.gguf", name);
    const uint64_t rb = (uint64_t)ZOO_COLS / z->block * z->type_size;
    if (t->type != z->id || vt_type_block_size(z->id) != z->block ||
        vt_type_size(z->id) != z->type_size || strcmp(vt_type_name(z->id), z->name) != 0 ||
        t->ne[0] != ZOO_COLS || t->ne[1] != ZOO_ROWS || t->nbytes != ZOO_ROWS * rb ||
        t->offset != z->offset || t->file_offset != ZOO_DATA_START + z->offset || !t->data)
        return because("%s: type %u (%s, %u/%u) ne [%lld, %lld] offset %llu; README: type %u "
                       "block %u bytes %u offset %llu",
                       name, t->type, vt_type_name(t->type), vt_type_block_size(t->type),
                       vt_type_size(t->type), (long long)t->ne[0], (long long)t->ne[1],
                       (unsigned long long)t->offset, z->id, z->block, z->type_size,
                       (unsigned long long)z->offset);
    char *path = vt_test_path(dir, rel);
    size_t len = 0;
    float *want = vt_test_read_file(path, &len);
    free(path);
    if (len != ZOO_ROWS * ZOO_COLS * sizeof(float)) {
        free(want);
        return because("reference file %s has %zu bytes, not 65536", rel, len);
    }
    const int64_t n = ZOO_ROWS * ZOO_COLS;
    float *got = malloc((size_t)n * sizeof(float));
    assert_non_null(got);
    const char *res = NULL;
    memset(got, 0xA5, (size_t)n * sizeof(float));
    for (int r = 0; r < ZOO_ROWS && !res; r++)
        if (vt_cpu_dequant_row(z->id, (const uint8_t *)t->data + r * rb, ZOO_COLS,
                               got + r * ZOO_COLS) != VT_OK)
            res = because("%s row %d: vt_cpu_dequant_row failed", name, r);
    int64_t i = res ? -1 : first_diff(got, want, n);
    if (i >= 0)
        res = because("%s row %lld column %lld (block %lld): got %.9g (0x%08x), reference %.9g "
                      "(0x%08x)",
                      name, (long long)(i / ZOO_COLS), (long long)(i % ZOO_COLS),
                      (long long)((i % ZOO_COLS) / z->block), (double)got[i],
                      (unsigned)bits_of(got[i]), (double)want[i], (unsigned)bits_of(want[i]));
    if (!res) {
        memset(got, 0x5A, (size_t)n * sizeof(float));
        if (vt_cpu_dequant_row(z->id, t->data, n, got) != VT_OK || first_diff(got, want, n) >= 0)
            res = because("%s: whole-tensor call differs from the reference", name);
    }
    if (!res) {
        memset(got, 0x3C, (size_t)n * sizeof(float));
        vt_cpu_dequant_row_fast(z->id, t->data, n, got);
        if (first_diff(got, want, n) >= 0) res = because("%s: the fast decoder differs", name);
    }
    free(got);
    free(want);
    return res;
}

static void test_zoo2_bit_exact(void **state)
{
    (void)state;
    const char *dir = vt_test_fixtures();
    if (!dir) return;
    char *path = vt_test_path(dir, "quant-zoo-2/quant-zoo-2.gguf");
    vt_gguf *g = NULL;
    if (vt_gguf_open(path, 0, &g) != VT_OK) fail_msg("vt_gguf_open %s: %s", path, vt_last_error());
    assert_int_equal(vt_gguf_n_tensors(g), N_ZOO);
    assert_int_equal(vt_gguf_shard_data_start(g, 0), ZOO_DATA_START);
    int n_fail = 0;
    for (int k = 0; k < N_ZOO; k++) {
        const char *msg = zoo_check(dir, g, &zoo[k]);
        if (msg) n_fail++;
        fprintf(stderr, "[  %s    ] quant-zoo-2 %-8s %s\n", msg ? "FAIL" : "PASS", zoo[k].name,
                msg ? msg : "bit-exact (64 x 256)");
    }
    vt_gguf_close(g);
    free(path);
    if (n_fail) fail_msg("%d quant-zoo-2 type(s) not bit-exact (see above)", n_fail);
}

/* ---- 3. vt info ---- */

static void test_info_names_types(void **state)
{
    (void)state;
    const char *dir = vt_test_fixtures();
    if (!dir) return;
    char *path = vt_test_path(dir, "quant-zoo-2/quant-zoo-2.gguf");
    vt_gguf *g = NULL;
    if (vt_gguf_open(path, 0, &g) != VT_OK) fail_msg("vt_gguf_open %s: %s", path, vt_last_error());
    char *rep = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&rep, &len);
    assert_non_null(f);
    assert_int_equal(vt_gguf_print_info(g, f), VT_OK);
    fclose(f);
    const char *totals = strstr(rep, "-- totals --");
    assert_non_null(totals);
    for (int k = 0; k < N_ZOO; k++) {
        char label[48];
        snprintf(label, sizeof label, "\ntype %-18s", zoo[k].name);
        const char *p = strstr(totals, label);
        if (!p) fail_msg("vt info has no totals line for %s", zoo[k].name);
        const char *eol = strchr(p + 1, '\n');
        const char *b = strstr(p, " bits/weight");
        if (!b || (eol && b > eol)) fail_msg("totals line of %s has no bits/weight", zoo[k].name);
        while (b > p && b[-1] != ' ') b--;
        double bpw = strtod(b, NULL), want = 8.0 * zoo[k].type_size / zoo[k].block;
        if (fabs(bpw - want) > 5e-5)
            fail_msg("vt info, type %s: %.5f bits/weight, want %.5f", zoo[k].name, bpw, want);
    }
    free(rep);
    vt_gguf_close(g);
    free(path);
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
        cmocka_unit_test(test_info_names_types),
        cmocka_unit_test(test_unknown_type_refused),
    };
    return vt_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
