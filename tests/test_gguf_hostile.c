/*
 * test_gguf_hostile.c - the GGUF reader on hostile input (label "parser": the
 * sanitizer CI job runs it). Every malformed file must either load or be
 * refused with VT_ERR_FORMAT and a message naming the file and the field;
 * never crash, never allocate what the file cannot hold.
 *
 * Cases: hand-crafted files (huge counts, lengths, dims, offsets, bad
 * alignment, 64-bit overflow, ...) each asserting the field word in the
 * message; truncations of the real q8_0 fixture at 20 points; 200 random byte
 * overwrites (fixed seed) of its header/metadata/tensor-info region; and every
 * header byte of a small writer-made file flipped three ways.
 * Terminal escapes (issue 43 item 9): keys, values and tensor names with
 * ESC, BEL and CSI print escaped in vt info and in error messages.
 * Scratch files live in a mkdtemp directory under /tmp, removed at the end.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <unistd.h>

#include "test_util.h"

#include "error.h"
#include "gguf_info.h"
#include "vt/gguf.h"
#include "vt/types.h"

static char *g_dir; /* scratch directory */

static int setup(void **state)
{
    (void)state;
    g_dir = strdup("/tmp/vt-test-gguf-hostile-XXXXXX");
    if (!g_dir || !mkdtemp(g_dir)) return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    int rc = system(cmd);
    free(g_dir);
    return rc == 0 ? 0 : -1;
}

/* ------------------------------------------------------------------ */
/* byte builder                                                        */
/* ------------------------------------------------------------------ */

typedef struct bb {
    uint8_t *p;
    size_t n, cap;
} bb;

static void bb_put(bb *b, const void *src, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 256;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void u32(bb *b, uint32_t v)
{
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    bb_put(b, x, 4);
}

static void u64(bb *b, uint64_t v)
{
    uint8_t x[8];
    for (int i = 0; i < 8; i++) x[i] = (uint8_t)(v >> (8 * i));
    bb_put(b, x, 8);
}

static void str(bb *b, const char *s)
{
    u64(b, strlen(s));
    bb_put(b, s, strlen(s));
}

static void header(bb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    bb_put(b, "GGUF", 4);
    u32(b, version);
    u64(b, n_tensors);
    u64(b, n_kv);
}

static void kv_u32(bb *b, const char *k, uint32_t v)
{
    str(b, k);
    u32(b, VT_GGUF_UINT32);
    u32(b, v);
}

static void kv_str(bb *b, const char *k, const char *v)
{
    str(b, k);
    u32(b, VT_GGUF_STRING);
    str(b, v);
}

static void tinfo(bb *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                  uint64_t offset)
{
    str(b, name);
    u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) u64(b, ne[d]);
    u32(b, type);
    u64(b, offset);
}

static void pad(bb *b, size_t align, size_t extra_data)
{
    static const uint8_t z[64];
    while (b->n % align) bb_put(b, z, 1);
    for (size_t i = 0; i < extra_data; i++) bb_put(b, z, 1);
}

static char *write_file(const char *name, const void *p, size_t n)
{
    char *path = vt_test_path(g_dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
    return path;
}

/* Open path (no mmap, and with mmap); require a refusal naming the file and each word. */
static void expect_refused(const char *name, bb *b, const char *w1, const char *w2)
{
    char *path = write_file(name, b->p, b->n);
    for (int mm = 0; mm < 2; mm++) {
        vt_gguf *g = NULL;
        vt_status st = vt_gguf_open(path, mm ? 0 : VT_GGUF_NO_MMAP, &g);
        if (st != VT_ERR_FORMAT)
            fail_msg("%s: expected VT_ERR_FORMAT, got %s (%s)", name, vt_status_name(st),
                     vt_last_error());
        assert_null(g);
        const char *m = vt_last_error();
        if (!strstr(m, name) || (w1 && !strstr(m, w1)) || (w2 && !strstr(m, w2)))
            fail_msg("%s: message '%s' lacks the file name or '%s' / '%s'", name, m,
                     w1 ? w1 : "", w2 ? w2 : "");
    }
    remove(path);
    free(path);
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* A valid one-tensor file, optionally with one field replaced (see callers). */
static void good_prefix(bb *b, uint64_t n_tensors, uint64_t n_kv)
{
    header(b, 3, n_tensors, n_kv);
    kv_str(b, "general.architecture", "hostile");
}

static void test_crafted_header(void **state)
{
    (void)state;
    bb b = {0};
    bb_put(&b, "GGUX", 4);
    u32(&b, 3);
    u64(&b, 0);
    u64(&b, 0);
    expect_refused("magic.gguf", &b, "magic", NULL);

    header(&b, 0x03000000u, 0, 0);
    expect_refused("swapped.gguf", &b, "version", "byte-swapped");
    header(&b, 1, 0, 0);
    expect_refused("v1.gguf", &b, "version", NULL);
    header(&b, 0, 0, 0);
    expect_refused("v0.gguf", &b, "version 0", NULL);
    header(&b, 4, 0, 0);
    expect_refused("v4.gguf", &b, "version", NULL);

    header(&b, 3, UINT64_C(1) << 62, 0);
    expect_refused("ntensors.gguf", &b, "n_tensors", NULL);
    header(&b, 3, UINT64_MAX, 0);
    expect_refused("ntensors2.gguf", &b, "n_tensors", NULL);
    header(&b, 3, 0, UINT64_C(1) << 40);
    expect_refused("nkv.gguf", &b, "n_kv", NULL);
    header(&b, 3, 0, 2); /* 2 kv promised, 1 present */
    kv_str(&b, "a.b", "a value long enough for two minimal entries");
    expect_refused("nkv_short.gguf", &b, "metadata key #1", "truncated");

    bb_put(&b, "GGUF", 4); /* truncated inside the header */
    u32(&b, 3);
    u32(&b, 0);
    expect_refused("short_header.gguf", &b, "n_tensors", "truncated");
}

static void test_crafted_metadata(void **state)
{
    (void)state;
    bb b = {0};
    good_prefix(&b, 0, 2);
    u64(&b, UINT64_C(1) << 32); /* key length */
    expect_refused("keylen.gguf", &b, "key length", NULL);

    good_prefix(&b, 0, 2);
    str(&b, "");
    u32(&b, VT_GGUF_UINT8);
    bb_put(&b, "x", 1);
    expect_refused("emptykey.gguf", &b, "key", "empty");

    good_prefix(&b, 0, 2);
    str(&b, "general.name");
    u32(&b, VT_GGUF_STRING);
    u64(&b, UINT64_C(4294967296));
    bb_put(&b, "abc", 3);
    expect_refused("strlen.gguf", &b, "'general.name'", "string length 4294967296 exceeds");

    good_prefix(&b, 0, 2);
    str(&b, "general.name");
    u32(&b, VT_GGUF_STRING);
    u64(&b, UINT64_MAX);
    expect_refused("strlen2.gguf", &b, "general.name", "string length");

    good_prefix(&b, 0, 2);
    str(&b, "x.type");
    u32(&b, 13);
    expect_refused("vtype.gguf", &b, "value type", NULL);

    good_prefix(&b, 0, 2);
    str(&b, "x.arr");
    u32(&b, VT_GGUF_ARRAY);
    u32(&b, VT_GGUF_INT32);
    u64(&b, UINT64_C(1) << 40);
    expect_refused("arrcount.gguf", &b, "x.arr", "array count");

    good_prefix(&b, 0, 2);
    str(&b, "x.arr");
    u32(&b, VT_GGUF_ARRAY);
    u32(&b, VT_GGUF_UINT64);
    u64(&b, UINT64_C(1) << 29); /* under the element cap, beyond the file */
    u64(&b, 1);
    expect_refused("arrcount2.gguf", &b, "array count", "exceeds file size");

    good_prefix(&b, 0, 2);
    str(&b, "x.arr");
    u32(&b, VT_GGUF_ARRAY);
    u32(&b, VT_GGUF_UINT64);
    u64(&b, UINT64_C(1) << 61); /* count * 8 overflows 64 bits */
    expect_refused("arrcount3.gguf", &b, "array count", NULL);

    good_prefix(&b, 0, 2);
    str(&b, "x.arr");
    u32(&b, VT_GGUF_ARRAY);
    u32(&b, VT_GGUF_STRING);
    u64(&b, 1000000);
    str(&b, "only one");
    expect_refused("arrcount4.gguf", &b, "array count", NULL);

    good_prefix(&b, 0, 2);
    str(&b, "x.arr");
    u32(&b, VT_GGUF_ARRAY);
    u32(&b, VT_GGUF_STRING);
    u64(&b, 2);
    str(&b, "one");
    u64(&b, UINT64_C(1) << 33);
    u64(&b, 0);
    expect_refused("arrstrlen.gguf", &b, "element 1", "string length");

    good_prefix(&b, 0, 2);
    str(&b, "x.arr");
    u32(&b, VT_GGUF_ARRAY);
    u32(&b, VT_GGUF_ARRAY);
    u64(&b, 1);
    u32(&b, VT_GGUF_UINT8);
    u64(&b, 1);
    bb_put(&b, "x", 1);
    expect_refused("nested.gguf", &b, "nested", NULL);

    good_prefix(&b, 0, 2);
    str(&b, "x.arr");
    u32(&b, VT_GGUF_ARRAY);
    u32(&b, 77);
    u64(&b, 0);
    expect_refused("arrtype.gguf", &b, "element type", NULL);

    good_prefix(&b, 0, 2);
    kv_str(&b, "general.architecture", "again");
    expect_refused("dupkey.gguf", &b, "general.architecture", "duplicate");

    good_prefix(&b, 0, 2);
    kv_u32(&b, "general.alignment", 48);
    expect_refused("align48.gguf", &b, "alignment", "power of two");
    good_prefix(&b, 0, 2);
    kv_u32(&b, "general.alignment", 0);
    expect_refused("align0.gguf", &b, "alignment", NULL);
    good_prefix(&b, 0, 2);
    kv_str(&b, "general.alignment", "32");
    expect_refused("alignstr.gguf", &b, "alignment", "STRING");
    good_prefix(&b, 0, 2);
    str(&b, "general.alignment");
    u32(&b, VT_GGUF_INT64);
    u64(&b, UINT64_C(1) << 40);
    expect_refused("alignbig.gguf", &b, "alignment", NULL);

    /* split.count without a split file name */
    good_prefix(&b, 0, 3);
    str(&b, "split.count");
    u32(&b, VT_GGUF_UINT16);
    bb_put(&b, "\x02\x00", 2);
    kv_u32(&b, "split.no", 0);
    expect_refused("nosplitname.gguf", &b, "split.count", NULL);
}

static void one_tensor(bb *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                       uint32_t type, uint64_t offset, size_t data)
{
    good_prefix(b, 1, 1);
    tinfo(b, name, n_dims, ne, type, offset);
    pad(b, 32, data);
}

static void test_crafted_tensors(void **state)
{
    (void)state;
    bb b = {0};
    const uint64_t ne4[2] = {4, 1};
    /* sanity: the valid variant loads */
    one_tensor(&b, "ok.weight", 2, ne4, VT_TYPE_F32, 0, 16);
    char *ok = write_file("ok.gguf", b.p, b.n);
    vt_gguf *g = NULL;
    assert_int_equal(vt_gguf_open(ok, 0, &g), VT_OK);
    assert_int_equal(vt_gguf_n_tensors(g), 1);
    vt_gguf_close(g);
    free(ok);
    free(b.p);
    memset(&b, 0, sizeof b);

    const uint64_t huge1[2] = {4, UINT64_MAX};
    one_tensor(&b, "blk.0.attn_q.weight", 2, huge1, VT_TYPE_F32, 0, 16);
    expect_refused("nehuge.gguf", &b, "tensor 'blk.0.attn_q.weight'",
                   "ne[1] = 18446744073709551615");

    const uint64_t over[2] = {UINT64_C(1) << 40, UINT64_C(1) << 40};
    one_tensor(&b, "t", 2, over, VT_TYPE_F32, 0, 16);
    expect_refused("neprod.gguf", &b, "ne[1]", "overflows");

    const uint64_t bytes_over[2] = {UINT64_C(1) << 31, UINT64_C(1) << 31}; /* 2^62 el, 2^64 B */
    one_tensor(&b, "t", 2, bytes_over, VT_TYPE_F32, 0, 16);
    expect_refused("nebytes.gguf", &b, "ne[1]", "overflows");

    const uint64_t big4[4] = {1 << 16, 1 << 16, 1 << 16, 1 << 16};
    one_tensor(&b, "t4", 4, big4, VT_TYPE_F32, 0, 16);
    expect_refused("ne4d.gguf", &b, "ne[3]", "overflows");

    const uint64_t ok_big[2] = {1 << 20, 1 << 20}; /* fits 64 bits, not the file */
    one_tensor(&b, "t", 2, ok_big, VT_TYPE_F32, 0, 16);
    expect_refused("pasteof.gguf", &b, "offset", "past the end");

    one_tensor(&b, "t", 2, ne4, VT_TYPE_F32, UINT64_MAX - 31, 16); /* aligned, wraps */
    expect_refused("offwrap.gguf", &b, "offset", "past the end");

    one_tensor(&b, "t", 2, ne4, VT_TYPE_F32, 4096, 16);
    expect_refused("offpast.gguf", &b, "offset 4096", NULL);

    one_tensor(&b, "t", 2, ne4, VT_TYPE_F32, 4, 32);
    expect_refused("misaligned.gguf", &b, "offset 4", "alignment");

    const uint64_t five[5] = {1, 1, 1, 1, 1};
    one_tensor(&b, "t", 5, five, VT_TYPE_F32, 0, 16);
    expect_refused("ndims.gguf", &b, "n_dims", NULL);

    one_tensor(&b, "t", 2, ne4, 4, 0, 16);
    expect_refused("removedtype.gguf", &b, "type 4", NULL);
    one_tensor(&b, "t", 2, ne4, 1000, 0, 16);
    expect_refused("badtype.gguf", &b, "type 1000", NULL);

    const uint64_t ne33[1] = {33};
    one_tensor(&b, "q", 1, ne33, VT_TYPE_Q8_0, 0, 64);
    expect_refused("block.gguf", &b, "ne[0] = 33", "Q8_0");

    const uint64_t neg[1] = {UINT64_C(1) << 63};
    one_tensor(&b, "n", 1, neg, VT_TYPE_F32, 0, 16);
    expect_refused("negne.gguf", &b, "ne[0]", "negative");

    char longname[80];
    memset(longname, 'x', 64);
    longname[64] = 0;
    one_tensor(&b, longname, 1, ne4, VT_TYPE_F32, 0, 16);
    expect_refused("longname.gguf", &b, "name length", NULL);

    good_prefix(&b, 1, 1);
    u64(&b, UINT64_C(1) << 35); /* tensor name length */
    expect_refused("namelen.gguf", &b, "tensor", "name length");

    good_prefix(&b, 2, 1);
    tinfo(&b, "a", 1, ne4, VT_TYPE_F32, 0);
    tinfo(&b, "a", 1, ne4, VT_TYPE_F32, 32);
    pad(&b, 32, 64);
    expect_refused("dupname.gguf", &b, "'a'", "duplicate");

    const uint64_t ne16[1] = {16};
    good_prefix(&b, 2, 1);
    tinfo(&b, "a", 1, ne16, VT_TYPE_F32, 0);
    tinfo(&b, "b", 1, ne16, VT_TYPE_F32, 32); /* a is 64 bytes: overlaps b */
    pad(&b, 32, 128);
    expect_refused("overlap.gguf", &b, "overlaps", NULL);

    /* an empty tensor between two overlapping ones must not hide the overlap */
    const uint64_t ne32[1] = {32}, ne0[1] = {0};
    good_prefix(&b, 3, 1);
    tinfo(&b, "big", 1, ne32, VT_TYPE_F32, 0);
    tinfo(&b, "empty", 1, ne0, VT_TYPE_F32, 32);
    tinfo(&b, "late", 1, ne16, VT_TYPE_F32, 64);
    pad(&b, 32, 256);
    expect_refused("overlap2.gguf", &b, "'late'", "overlaps tensor 'big'");

    good_prefix(&b, 1, 1);
    tinfo(&b, "t", 1, ne4, VT_TYPE_F32, 0);
    expect_refused("nodata.gguf", &b, NULL, "past the end");

    good_prefix(&b, 2, 1);
    tinfo(&b, "a", 1, ne4, VT_TYPE_F32, 0);
    u64(&b, 1);
    expect_refused("trunc_tinfo.gguf", &b, "tensor info #1", "name length");
}

/* ------------------------------------------------------------------ */
/* corruptions of real files                                           */
/* ------------------------------------------------------------------ */

/* Use a loaded (possibly corrupted) model a little: all getters, printing. */
static void exercise(vt_gguf *g)
{
    FILE *null = fopen("/dev/null", "w");
    assert_non_null(null);
    for (int64_t i = 0; i < vt_gguf_n_kv(g); i++) {
        const char *k = vt_gguf_kv_key(g, i);
        assert_non_null(k);
        assert_int_equal(vt_gguf_find_key(g, k), i);
        vt_gguf_kv_print(g, i, null);
        uint32_t u;
        float f;
        vt_gguf_str s;
        vt_gguf_type et;
        uint64_t n;
        const void *d;
        (void)vt_gguf_get_u32(g, k, &u);
        (void)vt_gguf_get_f32(g, k, &f);
        (void)vt_gguf_get_str(g, k, &s);
        if (vt_gguf_get_arr(g, k, &et, &n, &d) == VT_OK && n > 0) {
            int64_t v;
            (void)vt_gguf_get_arr_i64(g, k, n - 1, &v);
            (void)vt_gguf_get_arr_str(g, k, n - 1, &s);
        }
    }
    fclose(null);
    for (int64_t i = 0; i < vt_gguf_n_tensors(g); i++) {
        const vt_gguf_tensor *t = vt_gguf_tensor_at(g, i);
        assert_true(t->file_offset + t->nbytes <= vt_gguf_shard_size(g, t->shard));
        assert_true(vt_gguf_find_tensor(g, t->name) == t);
    }
}

/* Open path; either loads (then exercised) or is refused with a message naming it. */
static void load_or_refuse(const char *path, uint32_t flags, const char *what)
{
    vt_gguf *g = NULL;
    vt_clear_error();
    vt_status st = vt_gguf_open(path, flags, &g);
    if (st == VT_OK) {
        exercise(g);
        vt_gguf_close(g);
        return;
    }
    if (st != VT_ERR_FORMAT)
        fail_msg("%s: expected load or VT_ERR_FORMAT, got %s (%s)", what, vt_status_name(st),
                 vt_last_error());
    assert_null(g);
    if (!*vt_last_error() || !strstr(vt_last_error(), path))
        fail_msg("%s: refusal message '%s' does not name the file", what, vt_last_error());
}

static char *copy_fixture(const char *fx, const char *rel, const char *name, size_t *len)
{
    char *src = vt_test_path(fx, rel);
    void *data = vt_test_read_file(src, len);
    char *path = write_file(name, data, *len);
    free(data);
    free(src);
    return path;
}

#define FIXTURE_Q8 "qwen35moe-tiny/gguf/qwen35moe-tiny-q8_0.gguf"
#define FIXTURE_DATA_START 139680u

static void test_truncations(void **state)
{
    (void)state;
    const char *fx = vt_test_fixtures();
    if (!fx) return;
    size_t len;
    char *path = copy_fixture(fx, FIXTURE_Q8, "trunc.gguf", &len);
    /* descending, so one copy is cut shorter and shorter */
    const uint64_t pts[20] = {len - 1, 5000000, FIXTURE_DATA_START + 1, FIXTURE_DATA_START,
                              FIXTURE_DATA_START - 1, 138000, 136000, 120000,
                              50000, 1000, 100, 40, 24, 23, 16, 12, 8, 5, 4, 0};
    for (int i = 0; i < 20; i++) {
        assert_true(pts[i] < len);
        assert_int_equal(truncate(path, (off_t)pts[i]), 0);
        char what[64];
        snprintf(what, sizeof what, "truncated at %llu", (unsigned long long)pts[i]);
        vt_gguf *g = NULL;
        vt_status st = vt_gguf_open(path, i % 4 == 0 ? 0 : VT_GGUF_NO_MMAP, &g);
        if (st != VT_ERR_FORMAT) /* every cut loses bytes of the last tensor or more */
            fail_msg("%s: expected VT_ERR_FORMAT, got %s (%s)", what, vt_status_name(st),
                     vt_last_error());
        assert_non_null(strstr(vt_last_error(), "trunc.gguf"));
    }
    remove(path);
    free(path);
}

/* xorshift64*: fixed-seed randomness independent of libc */
static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

static void test_random_overwrites(void **state)
{
    (void)state;
    const char *fx = vt_test_fixtures();
    if (!fx) return;
    size_t len;
    char *path = copy_fixture(fx, FIXTURE_Q8, "corrupt.gguf", &len);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    int loaded = 0, refused = 0;
    for (int i = 0; i < 200; i++) {
        uint64_t r = rng_next(&seed);
        /* half the hits in the first 4 KiB (header, small keys), half anywhere before the data */
        uint64_t off = (i % 2) ? r % FIXTURE_DATA_START : r % 4096;
        if (i % 10 == 0) off = FIXTURE_DATA_START - 1 - r % 2300; /* tensor infos */
        uint8_t old, val = (uint8_t)(rng_next(&seed) >> 56);
        assert_int_equal(pread(fd, &old, 1, (off_t)off), 1);
        if (val == old) val ^= 0xFF;
        assert_int_equal(pwrite(fd, &val, 1, (off_t)off), 1);
        char what[64];
        snprintf(what, sizeof what, "byte %llu = 0x%02x", (unsigned long long)off, val);
        vt_clear_error();
        vt_gguf *g = NULL;
        vt_status st = vt_gguf_open(path, i % 16 == 0 ? 0 : VT_GGUF_NO_MMAP, &g);
        if (st == VT_OK) {
            loaded++;
            exercise(g);
            vt_gguf_close(g);
        } else {
            refused++;
            if (st != VT_ERR_FORMAT || !strstr(vt_last_error(), "corrupt.gguf"))
                fail_msg("%s: %s (%s)", what, vt_status_name(st), vt_last_error());
        }
        assert_int_equal(pwrite(fd, &old, 1, (off_t)off), 1);
    }
    close(fd);
    print_message("random overwrites: %d loaded, %d refused\n", loaded, refused);
    assert_true(refused > 0);
    remove(path);
    free(path);
}

/* Every byte before the data section of a small writer-made file, set three ways. */
static void test_small_file_every_byte(void **state)
{
    (void)state;
    char *path = vt_test_path(g_dir, "small.gguf");
    vt_gguf_writer *w = vt_gguf_writer_new(32);
    assert_non_null(w);
    assert_int_equal(vt_gguf_writer_set_str(w, "general.architecture", "small"), VT_OK);
    assert_int_equal(vt_gguf_writer_set_u32(w, "small.n", 7), VT_OK);
    assert_int_equal(vt_gguf_writer_set_f32(w, "small.f", 0.5f), VT_OK);
    const int32_t arr[3] = {1, 2, 3};
    assert_int_equal(vt_gguf_writer_set_arr(w, "small.arr", VT_GGUF_INT32, arr, 3), VT_OK);
    const char *toks[3] = {"a", "bc", "def"};
    assert_int_equal(vt_gguf_writer_set_arr_str(w, "small.tok", toks, 3), VT_OK);
    float data[64] = {0};
    const int64_t ne_a[2] = {8, 2}, ne_b[1] = {32}, ne_q[2] = {32, 1};
    uint8_t q8[34] = {0};
    assert_int_equal(vt_gguf_writer_add_tensor(w, "a", VT_TYPE_F32, 2, ne_a, data, 64), VT_OK);
    assert_int_equal(vt_gguf_writer_add_tensor(w, "b", VT_TYPE_F32, 1, ne_b, data, 128), VT_OK);
    assert_int_equal(vt_gguf_writer_add_tensor(w, "q", VT_TYPE_Q8_0, 2, ne_q, q8, 34), VT_OK);
    assert_int_equal(vt_gguf_writer_write(w, path), VT_OK);
    vt_gguf_writer_free(w);
    vt_gguf *g;
    assert_int_equal(vt_gguf_open(path, 0, &g), VT_OK);
    uint64_t ds = vt_gguf_shard_data_start(g, 0);
    vt_gguf_close(g);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    for (uint64_t off = 0; off < ds; off++) {
        uint8_t old;
        assert_int_equal(pread(fd, &old, 1, (off_t)off), 1);
        const uint8_t vals[3] = {0x00, 0xFF, (uint8_t)(old ^ 0x80)};
        for (int k = 0; k < 3; k++) {
            if (vals[k] == old) continue;
            assert_int_equal(pwrite(fd, &vals[k], 1, (off_t)off), 1);
            char what[64];
            snprintf(what, sizeof what, "small byte %llu = 0x%02x", (unsigned long long)off,
                     vals[k]);
            load_or_refuse(path, (off + (uint64_t)k) % 8 == 0 ? 0 : VT_GGUF_NO_MMAP, what);
        }
        assert_int_equal(pwrite(fd, &old, 1, (off_t)off), 1);
    }
    close(fd);
    remove(path);
    free(path);
}

/* Tables are never sized from the file's apparent size (issue 17): a sparse
 * 64 GiB file whose header promises 2,748,779,068 tensors (or as many
 * metadata entries), zeros after it, is refused for its first bad entry,
 * never with an allocation (the old reader tried a 365.7 GiB calloc). */
static void test_sparse_huge_tables(void **state)
{
    (void)state;
    for (int which = 0; which < 2; which++) {
        bb b = {0};
        header(&b, 3, which ? 0 : UINT64_C(2748779068), which ? UINT64_C(2748779068) : 0);
        const char *name = which ? "sparse_kv.gguf" : "sparse_tensors.gguf";
        char *path = write_file(name, b.p, b.n);
        if (truncate(path, (off_t)64 << 30) != 0) {
            fprintf(stderr, "  (cannot make a 64 GiB sparse file in %s: %s; case skipped)\n", g_dir,
                    strerror(errno));
        } else {
            for (int mm = 0; mm < 2; mm++) {
                vt_gguf *g = NULL;
                vt_clear_error();
                vt_status st = vt_gguf_open(path, mm ? 0 : VT_GGUF_NO_MMAP, &g);
                assert_null(g);
                const char *m = vt_last_error();
                if (st != VT_ERR_FORMAT || !strstr(m, name))
                    fail_msg("%s: expected a format refusal naming the file, got %s: %s", name,
                             vt_status_name(st), m);
            }
        }
        remove(path);
        free(path);
        free(b.p);
    }
}

/* No byte of s[0..n) starts a terminal control sequence: ESC, BEL, CSI as
 * a raw byte (0x9b) or in UTF-8 (c2 9b), other C0 controls but newline. */
static void assert_no_controls(const char *what, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        if ((c < 0x20 && c != '\n') || c == 0x7f || c == 0x9b ||
            (c == 0xc2 && i + 1 < n && (unsigned char)s[i + 1] >= 0x80 &&
             (unsigned char)s[i + 1] <= 0x9f))
            fail_msg("%s: control byte 0x%02x at %zu", what, c, i);
    }
}

/* Item 9 of issue 43: keys, tensor names and values from a file reach the
 * terminal (vt info, error messages, the log) with their control characters
 * escaped. */
static void test_terminal_escapes(void **state)
{
    (void)state;
    char out[64];
    /* the escaper itself: controls, C1 in UTF-8, invalid bytes; text kept */
    assert_int_equal(vt_text_escape(out, sizeof out, "a\x1b[31mb", 7), 10);
    assert_string_equal(out, "a\\x1b[31mb");
    vt_text_escape(out, sizeof out, "\xc2\x9b" "1\x9b\n\t\x7f", 7);
    assert_string_equal(out, "\\xc2\\x9b1\\x9b\\x0a\\x09\\x7f");
    vt_text_escape(out, sizeof out, "caf\xc3\xa9 \xf0\x9f\x99\x82 \xe2\x80\xae", 14);
    assert_string_equal(out, "caf\xc3\xa9 \xf0\x9f\x99\x82 \xe2\x80\xae");
    vt_text_escape(out, sizeof out, "\xed\xa0\x80\xc0\xaf", 5); /* surrogate, overlong */
    assert_string_equal(out, "\\xed\\xa0\\x80\\xc0\\xaf");
    /* cut before a whole character or escape, never inside one */
    assert_int_equal(vt_text_escape(out, 5, "ab\xc3\xa9z", 5), 4);
    assert_string_equal(out, "ab\xc3\xa9");
    assert_int_equal(vt_text_escape(out, 4, "ab\xc3\xa9z", 5), 2);
    assert_int_equal(vt_text_escape(out, 6, "a\x1b", 2), 5);
    assert_int_equal(vt_text_escape(out, 5, "a\x1b", 2), 1);
    /* escaping twice changes nothing more */
    char twice[64];
    vt_text_escape(out, sizeof out, "x\x1b]0;t\x07y", 8);
    vt_text_escape(twice, sizeof twice, out, strlen(out));
    assert_string_equal(out, twice);

    /* vt info of a file whose key, value and tensor name carry escapes */
    bb b = {0};
    header(&b, 3, 1, 2);
    kv_str(&b, "general.architecture", "hostile");
    kv_str(&b, "evil\x1b]0;title\x07.key", "\x1b[2J\xc2\x9b" "31m\x9b\n");
    const uint64_t ne4[2] = {4, 1};
    tinfo(&b, "blk.0.\x1b[31mred", 2, ne4, VT_TYPE_F32, 0);
    pad(&b, 32, 16);
    char *path = write_file("escapes.gguf", b.p, b.n);
    vt_gguf *g = NULL;
    assert_int_equal(vt_gguf_open(path, 0, &g), VT_OK);
    char *txt = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&txt, &len);
    assert_non_null(f);
    vt_gguf_print_info(g, f);
    fclose(f);
    assert_no_controls("vt info", txt, len);
    assert_non_null(strstr(txt, "evil\\x1b]0;title\\x07.key"));
    assert_non_null(strstr(txt, "blk.0.\\x1b[31mred"));
    assert_non_null(strstr(txt, "'\\x1b[2J\\xc2\\x9b31m\\x9b\\n'"));
    free(txt);
    vt_gguf_close(g);
    free(path);
    free(b.p);
    memset(&b, 0, sizeof b);

    /* an error naming the tensor: its message (what vt prints) is escaped */
    const uint64_t huge[2] = {4, UINT64_MAX};
    one_tensor(&b, "blk.1.\x1b[31mred\x9b", 2, huge, VT_TYPE_F32, 0, 16);
    path = write_file("escapes2.gguf", b.p, b.n);
    assert_int_equal(vt_gguf_open(path, 0, &g), VT_ERR_FORMAT);
    const char *m = vt_last_error();
    assert_no_controls("error message", m, strlen(m));
    if (!strstr(m, "blk.1.\\x1b[31mred\\x9b")) fail_msg("message: %s", m);
    vt_error_prefix("loading %s", "\x1b[1mx");
    m = vt_last_error();
    assert_no_controls("prefixed message", m, strlen(m));
    free(path);
    free(b.p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crafted_header),
        cmocka_unit_test(test_crafted_metadata),
        cmocka_unit_test(test_crafted_tensors),
        cmocka_unit_test(test_truncations),
        cmocka_unit_test(test_random_overwrites),
        cmocka_unit_test(test_small_file_every_byte),
        cmocka_unit_test(test_sparse_huge_tables),
        cmocka_unit_test(test_terminal_escapes),
    };
    return vt_test_exit(cmocka_run_group_tests(tests, setup, teardown));
}
