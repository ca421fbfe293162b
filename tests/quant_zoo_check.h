/*
 * quant_zoo_check.h - what test_quant_zoo.c (quant-zoo) and test_quant_zoo2.c
 * (quant-zoo-2) check alike on their fixture: one 256 x 64 tensor per type,
 * made by ggml, with ggml's dequantisation beside it (see the fixtures'
 * READMEs).
 *
 *  - zoo_bit_exact: every tensor read with the core GGUF reader (GGUF v3,
 *    alignment 32, tensor count, data start; per tensor the README's id,
 *    vt/types.h's block geometry and name, shape, size and offset), then
 *    dequantised by backend-cpu's scalar reference row by row, as one
 *    whole-tensor call and by the fast (panel) decoder, equal to
 *    dequant-<TYPE>.f32.bin byte for byte (memcmp: -0.0 and NaN payloads
 *    count). Each type is judged and printed on its own; a missing reference
 *    is that type's failure.
 *  - zoo_hostile: n not a multiple of the block size, n < 0, NULL buffers are
 *    refused with VT_ERR_INVALID_ARG and write nothing; zero blocks decode.
 *  - zoo_info_bits: `vt info` (vt_gguf_print_info) has one totals line per
 *    type with one tensor and its bits per weight (8 · bytes / block), and
 *    the overall figure.
 * Header-only, for those two tests.
 */
#ifndef VT_TEST_QUANT_ZOO_CHECK_H
#define VT_TEST_QUANT_ZOO_CHECK_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"
#include "error.h"
#include "gguf_info.h"
#include "test_util.h"
#include "vt/gguf.h"

/* A README row: name, id, block, bytes per block, offset in the data section. */
typedef struct zoo_row {
    const char *name;
    uint32_t id, block, type_size;
    uint64_t offset;
} zoo_row;

/* One fixture: its folder under the fixtures, its GGUF, its data start, its rows. */
typedef struct zoo_set {
    const char *dir;  /* "quant-zoo" */
    const char *gguf; /* "quant-zoo.gguf" */
    uint64_t data_start;
    const zoo_row *rows;
    int n;
} zoo_set;

#define ZOO_ROWS 64
#define ZOO_COLS 256

static char zoo_why[512];
static const char *zoo_because(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const char *zoo_because(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(zoo_why, sizeof zoo_why, fmt, ap);
    va_end(ap);
    return zoo_why;
}

/* First differing float of got vs want (n floats), or -1; bit patterns compared. */
static int64_t zoo_first_diff(const float *got, const float *want, int64_t n)
{
    if (!memcmp(got, want, (size_t)n * sizeof(float))) return -1;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float))) return i;
    return -1;
}

static uint32_t zoo_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* The fixture's GGUF, opened (fails the test when it does not open); NULL when skipped. */
static vt_gguf *zoo_open(const zoo_set *s, const char **dir)
{
    *dir = vt_test_fixtures();
    if (!*dir) return NULL;
    char rel[128];
    snprintf(rel, sizeof rel, "%s/%s", s->dir, s->gguf);
    char *path = vt_test_path(*dir, rel);
    vt_gguf *g = NULL;
    if (vt_gguf_open(path, 0, &g) != VT_OK) fail_msg("vt_gguf_open %s: %s", path, vt_last_error());
    free(path);
    return g;
}

/* Checks one type; NULL when it passes, else a message (static buffer). */
static const char *zoo_check(const char *dir, const zoo_set *s, vt_gguf *g, const zoo_row *z)
{
    char name[64], rel[128];
    snprintf(name, sizeof name, "%s.weight", z->name);
    snprintf(rel, sizeof rel, "%s/dequant-%s.f32.bin", s->dir, z->name);
    const vt_gguf_tensor *t = vt_gguf_find_tensor(g, name);
    if (!t) return zoo_because("no tensor %s in %s", name, s->gguf);
    const uint64_t rb = (uint64_t)ZOO_COLS / z->block * z->type_size;
    if (t->type != z->id || vt_type_block_size(z->id) != z->block ||
        vt_type_size(z->id) != z->type_size || strcmp(vt_type_name(z->id), z->name) != 0 ||
        t->ne[0] != ZOO_COLS || t->ne[1] != ZOO_ROWS || t->ne[2] != 1 ||
        t->nbytes != ZOO_ROWS * rb || t->offset != z->offset ||
        t->file_offset != s->data_start + z->offset || !t->data)
        return zoo_because("%s: type %u (%s, %u/%u) ne [%lld, %lld] nbytes %llu offset %llu (data "
                           "%s); README: type %u block %u bytes %u ne [256, 64] nbytes %llu offset "
                           "%llu",
                           name, t->type, vt_type_name(t->type), vt_type_block_size(t->type),
                           vt_type_size(t->type), (long long)t->ne[0], (long long)t->ne[1],
                           (unsigned long long)t->nbytes, (unsigned long long)t->offset,
                           t->data ? "mapped" : "NULL", z->id, z->block, z->type_size,
                           (unsigned long long)(ZOO_ROWS * rb), (unsigned long long)z->offset);
    char *path = vt_test_path(dir, rel);
    FILE *f = fopen(path, "rb"); /* missing: this type's failure, not the whole test's */
    if (!f) {
        free(path);
        return zoo_because("reference file %s missing or unreadable", rel);
    }
    fclose(f);
    size_t len = 0;
    float *want = vt_test_read_file(path, &len);
    free(path);
    if (len != ZOO_ROWS * ZOO_COLS * sizeof(float)) {
        free(want);
        return zoo_because("reference file %s has %zu bytes, not 65536", rel, len);
    }
    const int64_t n = ZOO_ROWS * ZOO_COLS;
    float *got = malloc((size_t)n * sizeof(float));
    assert_non_null(got);
    const char *res = NULL;
    /* (a) row by row, dst pre-filled with a NaN pattern so unwritten values show */
    memset(got, 0xA5, (size_t)n * sizeof(float));
    for (int r = 0; r < ZOO_ROWS && !res; r++)
        if (vt_cpu_dequant_row(z->id, (const uint8_t *)t->data + r * rb, ZOO_COLS,
                               got + r * ZOO_COLS) != VT_OK)
            res = zoo_because("%s row %d: vt_cpu_dequant_row failed", name, r);
    int64_t i = res ? -1 : zoo_first_diff(got, want, n);
    if (i >= 0)
        res = zoo_because("%s row %lld column %lld (block %lld): got %.9g (0x%08x), reference "
                          "%.9g (0x%08x)",
                          name, (long long)(i / ZOO_COLS), (long long)(i % ZOO_COLS),
                          (long long)((i % ZOO_COLS) / z->block), (double)got[i],
                          (unsigned)zoo_bits(got[i]), (double)want[i], (unsigned)zoo_bits(want[i]));
    /* (b) the whole tensor in one call: blocks never cross rows */
    if (!res) {
        memset(got, 0x5A, (size_t)n * sizeof(float));
        if (vt_cpu_dequant_row(z->id, t->data, n, got) != VT_OK ||
            zoo_first_diff(got, want, n) >= 0)
            res = zoo_because("%s: whole-tensor call differs from the reference", name);
    }
    /* (c) the fast decoder of the float path's panels */
    if (!res && z->block > 1) {
        memset(got, 0x3C, (size_t)n * sizeof(float));
        vt_cpu_dequant_row_fast(z->id, t->data, n, got);
        if (zoo_first_diff(got, want, n) >= 0) res = zoo_because("%s: the fast decoder differs", name);
    }
    free(got);
    free(want);
    return res;
}

static void zoo_bit_exact(const zoo_set *s)
{
    const char *dir;
    vt_gguf *g = zoo_open(s, &dir);
    if (!g) return;
    assert_int_equal(vt_gguf_version(g), 3);
    assert_int_equal(vt_gguf_alignment(g), 32);
    assert_int_equal(vt_gguf_n_tensors(g), s->n);
    assert_int_equal(vt_gguf_shard_data_start(g, 0), s->data_start);
    int n_fail = 0;
    for (int k = 0; k < s->n; k++) {
        const char *msg = zoo_check(dir, s, g, &s->rows[k]);
        n_fail += msg != NULL;
        fprintf(stderr, "[  %s    ] %s %-8s %s\n", msg ? "FAIL" : "PASS", s->dir, s->rows[k].name,
                msg ? msg : "bit-exact (64 x 256)");
    }
    fprintf(stderr, "[  INFO    ] %s: %d of %d types bit-exact\n", s->dir, s->n - n_fail, s->n);
    vt_gguf_close(g);
    if (n_fail) fail_msg("%d %s type(s) not bit-exact (see above)", n_fail, s->dir);
}

static void zoo_hostile(const zoo_set *s)
{
    static uint8_t src[8 * 256 * 4]; /* zeros: room for any whole-block run used below */
    static float dst[2048];
    for (int k = 0; k < s->n; k++) {
        const zoo_row *z = &s->rows[k];
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
}

/* The totals line `label` of a vt info report: its tensor count and bits per weight. */
static void zoo_totals_line(const char *rep, const char *label, long *tensors, double *bpw)
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

static void zoo_info_bits(const zoo_set *s)
{
    const char *dir;
    vt_gguf *g = zoo_open(s, &dir);
    if (!g) return;
    char *rep = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&rep, &len);
    assert_non_null(f);
    assert_int_equal(vt_gguf_print_info(g, f), VT_OK);
    fclose(f);
    uint64_t all_bytes = 0;
    for (int k = 0; k < s->n; k++) {
        const zoo_row *z = &s->rows[k];
        char label[48];
        snprintf(label, sizeof label, "\ntype %-18s", z->name); /* padded: Q4_0 != Q4_0x */
        long n;
        double bpw, want = 8.0 * z->type_size / z->block;
        zoo_totals_line(rep, label, &n, &bpw);
        if (n != 1 || fabs(bpw - want) > 5e-5)
            fail_msg("vt info, type %s: %ld tensors, %.5f bits/weight; want 1 and %.5f", z->name,
                     n, bpw, want);
        all_bytes += (uint64_t)ZOO_ROWS * ZOO_COLS / z->block * z->type_size;
    }
    long n;
    double bpw, want = 8.0 * (double)all_bytes / ((double)s->n * ZOO_ROWS * ZOO_COLS);
    zoo_totals_line(rep, "\nall ", &n, &bpw);
    assert_int_equal(n, s->n);
    if (fabs(bpw - want) > 5e-5) fail_msg("vt info overall: %.5f bits/weight, want %.5f", bpw, want);
    fprintf(stderr, "[  INFO    ] vt info %s: overall %.4f bits/weight (%llu bytes)\n", s->dir, bpw,
            (unsigned long long)all_bytes);
    free(rep);
    vt_gguf_close(g);
}

#endif
