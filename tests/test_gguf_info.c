/*
 * test_gguf_info.c - `vt info` (vt_gguf_print_info) against gguf-dump.txt of
 * the fixtures: for each shipped qwen35moe-tiny file (bf16, q8_0, and the
 * 3-shard split opened from its first shard) every tensor line of the dump
 * (name, type, ne, n_elements, n_bytes, offset) must appear in vt's printed
 * tensor table, and for the split each shard file's tensors must be reported
 * with that shard's index. The gemma4 f16 dump is checked the same way.
 */
#include <ctype.h>
#include <stdbool.h>

#include "test_util.h"

#include "error.h"
#include "gguf_info.h"
#include "vt/gguf.h"

/* One tensor line: "name | TYPE | ne=[..] | n_elements | n_bytes | offset..." */
typedef struct row {
    char name[80];
    char type[16];
    char ne[64];
    unsigned long long n_el, n_bytes, shard, offset;
} row;

static char *trim(char *s)
{
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
    return s;
}

/* Split a line on '|' into at most max trimmed fields; returns the count. */
static int split_fields(char *line, char **fields, int max)
{
    int n = 0;
    char *p = line;
    while (n < max) {
        char *bar = strchr(p, '|');
        if (bar) *bar = 0;
        fields[n++] = trim(p);
        if (!bar) break;
        p = bar + 1;
    }
    return n;
}

/* Tensor rows of the dump section of file `fname` (text between "==== fname" and the next "===="). */
static row *dump_rows(const char *dump, const char *fname, int *n_out)
{
    char hdr[256];
    snprintf(hdr, sizeof hdr, "==== %s\n", fname);
    const char *p = strstr(dump, hdr);
    if (!p) fail_msg("gguf-dump.txt has no section '%s'", fname);
    p += strlen(hdr);
    const char *end = strstr(p, "\n====");
    if (!end) end = p + strlen(p);
    row *rows = calloc(200, sizeof *rows);
    assert_non_null(rows);
    int n = 0;
    bool in_table = false;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) nl = end;
        char line[512];
        size_t len = (size_t)(nl - p);
        if (len >= sizeof line) len = sizeof line - 1;
        memcpy(line, p, len);
        line[len] = 0;
        p = nl + 1;
        if (!strncmp(line, "-- tensors:", 11)) {
            in_table = true;
            continue;
        }
        if (!in_table || !strchr(line, '|')) continue;
        char *f[8];
        int nf = split_fields(line, f, 8);
        assert_int_equal(nf, 6);
        assert_true(n < 200);
        row *r = &rows[n++];
        snprintf(r->name, sizeof r->name, "%s", f[0]);
        snprintf(r->type, sizeof r->type, "%s", f[1]);
        snprintf(r->ne, sizeof r->ne, "%s", f[2]);
        r->n_el = strtoull(f[3], NULL, 10);
        r->n_bytes = strtoull(f[4], NULL, 10);
        r->offset = strtoull(f[5], NULL, 10);
    }
    *n_out = n;
    return rows;
}

/* Tensor rows of vt's report (7 fields: ... | shard | offset). */
static row *vt_rows(const char *report, int *n_out)
{
    const char *p = strstr(report, "-- tensors:");
    assert_non_null(p);
    p = strchr(p, '\n') + 1;
    const char *end = strstr(p, "-- totals --");
    assert_non_null(end);
    row *rows = calloc(200, sizeof *rows);
    assert_non_null(rows);
    int n = 0;
    while (p < end) {
        const char *nl = strchr(p, '\n');
        char line[512];
        size_t len = (size_t)(nl - p);
        assert_true(len < sizeof line);
        memcpy(line, p, len);
        line[len] = 0;
        p = nl + 1;
        char *f[8];
        assert_int_equal(split_fields(line, f, 8), 7);
        assert_true(n < 200);
        row *r = &rows[n++];
        snprintf(r->name, sizeof r->name, "%s", f[0]);
        snprintf(r->type, sizeof r->type, "%s", f[1]);
        snprintf(r->ne, sizeof r->ne, "%s", f[2]);
        r->n_el = strtoull(f[3], NULL, 10);
        r->n_bytes = strtoull(f[4], NULL, 10);
        r->shard = strtoull(f[5], NULL, 10);
        r->offset = strtoull(f[6], NULL, 10);
    }
    *n_out = n;
    return rows;
}

static char *report_of(const vt_gguf *g)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    assert_int_equal(vt_gguf_print_info(g, f), VT_OK);
    fclose(f);
    return buf;
}

static const row *find_row(const row *rows, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(rows[i].name, name)) return &rows[i];
    return NULL;
}

/* Every dump row of section fname is in vt's rows with the same facts (and shard). */
static int check_section(const char *dump, const char *fname, const row *vt, int n_vt,
                         unsigned shard)
{
    int n;
    row *d = dump_rows(dump, fname, &n);
    assert_true(n > 0);
    for (int i = 0; i < n; i++) {
        const row *v = find_row(vt, n_vt, d[i].name);
        if (!v) fail_msg("%s: tensor '%s' of the dump is missing from vt info", fname, d[i].name);
        if (strcmp(v->type, d[i].type) || strcmp(v->ne, d[i].ne) || v->n_el != d[i].n_el ||
            v->n_bytes != d[i].n_bytes || v->offset != d[i].offset || v->shard != shard)
            fail_msg("%s: tensor '%s': vt says %s %s %llu %llu shard %llu offset %llu, dump says "
                     "%s %s %llu %llu shard %u offset %llu",
                     fname, d[i].name, v->type, v->ne, v->n_el, v->n_bytes, v->shard, v->offset,
                     d[i].type, d[i].ne, d[i].n_el, d[i].n_bytes, shard, d[i].offset);
    }
    free(d);
    return n;
}

/* Integer and plain-string metadata lines shown in the dump section appear verbatim. */
static void check_metadata_lines(const char *dump, const char *fname, const char *report,
                                 const char *skip_key)
{
    char hdr[256];
    snprintf(hdr, sizeof hdr, "==== %s\n", fname);
    const char *p = strstr(dump, hdr);
    assert_non_null(p);
    const char *end = strstr(p, "-- tensors:");
    int checked = 0;
    while ((p = strchr(p, '\n')) && p < end) {
        p++;
        const char *nl = strchr(p, '\n');
        char line[512];
        size_t len = (size_t)(nl - p);
        if (len >= sizeof line) continue;
        memcpy(line, p, len);
        line[len] = 0;
        if (!strncmp(line, "GGUF.", 5) || (skip_key && !strncmp(line, skip_key, strlen(skip_key))))
            continue;
        bool simple = strstr(line, " : UINT32 : ") || strstr(line, " : UINT16 : ") ||
                      strstr(line, " : INT32 : ") ||
                      (strstr(line, " : STRING : '") && !strchr(line, '\\') &&
                       !strchr(line, '"'));
        if (!simple) continue;
        char want[520];
        snprintf(want, sizeof want, "\n%s\n", line);
        if (!strstr(report, want)) fail_msg("%s: metadata line '%s' not in vt info", fname, line);
        checked++;
    }
    assert_true(checked > 0);
}

/* The tensor count on the totals line that starts with label. */
static long total_tensors(const char *rep, const char *label)
{
    const char *p = strstr(strstr(rep, "-- totals --"), label);
    assert_non_null(p);
    p += strlen(label);
    return strtol(p, NULL, 10);
}

static char *load_dump(const char *fx, const char *rel)
{
    char *p = vt_test_path(fx, rel);
    char *d = vt_test_read_file(p, NULL);
    free(p);
    return d;
}

static vt_gguf *open_rel(const char *fx, const char *rel)
{
    char *p = vt_test_path(fx, rel);
    vt_gguf *g = NULL;
    vt_status st = vt_gguf_open(p, 0, &g);
    if (st) fail_msg("open %s: %s", p, vt_last_error());
    free(p);
    return g;
}

static void test_single_files(void **state)
{
    (void)state;
    const char *fx = vt_test_fixtures();
    if (!fx) return;
    char *dump = load_dump(fx, "qwen35moe-tiny/gguf-dump.txt");
    const char *files[2] = {"qwen35moe-tiny-bf16.gguf", "qwen35moe-tiny-q8_0.gguf"};
    for (int k = 0; k < 2; k++) {
        char rel[256];
        snprintf(rel, sizeof rel, "qwen35moe-tiny/gguf/%s", files[k]);
        vt_gguf *g = open_rel(fx, rel);
        char *rep = report_of(g);
        int n_vt;
        row *vt = vt_rows(rep, &n_vt);
        assert_int_equal(n_vt, 76);
        assert_int_equal(check_section(dump, files[k], vt, n_vt, 0), 76);
        check_metadata_lines(dump, files[k], rep, NULL);
        /* the f32 section shows the full metadata, identical but for file_type */
        check_metadata_lines(dump, "qwen35moe-tiny-f32.gguf", rep, "general.file_type");
        assert_non_null(strstr(rep, "\ntokenizer.ggml.tokens : ARRAY[STRING] len=4096 : ['!', "));
        assert_non_null(strstr(rep, "\nqwen35moe.rope.dimension_sections : ARRAY[INT32] len=4 : "
                                    "[3, 3, 2, 0]\n"));
        /* totals: 12 routed-expert stacks (3 per layer x 4 layers) */
        assert_int_equal(total_tensors(rep, "\nrouted experts (_exps)"), 12);
        assert_int_equal(total_tensors(rep, "\ndense "), 64);
        assert_int_equal(total_tensors(rep, "\nall "), 76);
        free(vt);
        free(rep);
        vt_gguf_close(g);
    }
    free(dump);
}

static void test_split(void **state)
{
    (void)state;
    const char *fx = vt_test_fixtures();
    if (!fx) return;
    char *dump = load_dump(fx, "qwen35moe-tiny/gguf-dump.txt");
    vt_gguf *g = open_rel(fx, "qwen35moe-tiny/gguf/split/qwen35moe-tiny-q8_0-split-00001-of-00003.gguf");
    char *rep = report_of(g);
    int n_vt;
    row *vt = vt_rows(rep, &n_vt);
    assert_int_equal(n_vt, 76);
    int total = 0;
    for (unsigned s = 0; s < 3; s++) {
        char fname[128];
        snprintf(fname, sizeof fname, "qwen35moe-tiny-q8_0-split-%05u-of-00003.gguf", s + 1);
        total += check_section(dump, fname, vt, n_vt, s);
    }
    assert_int_equal(total, 76);
    check_metadata_lines(dump, "qwen35moe-tiny-q8_0-split-00001-of-00003.gguf", rep, NULL);
    assert_non_null(strstr(rep, "\nsplit.count : UINT16 : 3\n"));
    assert_non_null(strstr(rep, "shard 2 : "));
    free(vt);
    free(rep);
    vt_gguf_close(g);
    free(dump);
}

static void test_gemma_and_zoo(void **state)
{
    (void)state;
    const char *fx = vt_test_fixtures();
    if (!fx) return;
    char *dump = load_dump(fx, "gemma4-moe-tiny/gguf-dump.txt");
    vt_gguf *g = open_rel(fx, "gemma4-moe-tiny/gguf/gemma4-moe-tiny-f16.gguf");
    char *rep = report_of(g);
    int n_vt;
    row *vt = vt_rows(rep, &n_vt);
    assert_int_equal(n_vt, 89);
    assert_int_equal(check_section(dump, "gemma4-moe-tiny-f16.gguf", vt, n_vt, 0), 89);
    assert_non_null(strstr(rep, "\ngemma4.attention.sliding_window_pattern : ARRAY[BOOL] len=4 : "
                                "[true, false, true, false]\n"));
    free(vt);
    free(rep);
    vt_gguf_close(g);
    free(dump);

    g = open_rel(fx, "quant-zoo/quant-zoo.gguf");
    rep = report_of(g);
    vt = vt_rows(rep, &n_vt);
    assert_int_equal(n_vt, 15);
    assert_non_null(strstr(rep, "type MXFP4"));
    assert_non_null(strstr(rep, "\nquant-zoo.rows : UINT32 : 64\n"));
    free(vt);
    free(rep);
    vt_gguf_close(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_files),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_gemma_and_zoo),
    };
    return vt_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
