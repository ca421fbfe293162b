/*
 * fuzz_gguf.c - libFuzzer target for the GGUF reader (core/src/gguf/gguf_reader.c),
 * the `vt info` report (gguf_info.c) and tokenizer loading from GGUF metadata
 * (tokenizer.c). Built only with -DVT_FUZZ=ON (tests/fuzz.cmake); run by
 * bench/fuzz.sh, never by CI.
 *
 * One input is one model: a single file, or, when it holds the 8-byte
 * separator FUZZ_SHARD_SEP, up to 4 shards written as
 * fz-0000k-of-0000N.gguf so the split code (gguf.md §5) is reached too.
 * Each input is opened twice (with and without VT_GGUF_NO_MMAP; a third time
 * with VT_GGUF_SINGLE_FILE when it names split.* keys); mapping must not
 * change the outcome. A loaded model has every getter called on every key
 * (and their answers must agree with the key's type and with each other),
 * its tensors checked against the file (mapped bytes equal to pread ones),
 * its report printed to /dev/null and its tokenizer loaded and used. A
 * refusal must be a VT_ERR_FORMAT / VT_ERR_IO / VT_ERR_NOT_FOUND with a
 * message; anything else aborts, so libFuzzer records the input.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "gguf_info.h"
#include "tokenizer.h"
#include "vt/gguf.h"

#define FUZZ_SHARD_SEP "VTSHARD!"
#define FUZZ_MAX_SHARDS 4

static char g_dir[256];
static FILE *g_null;

#define CHECK(cond)                                                                          \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "fuzz_gguf: check failed at line %d: %s (last error: %s)\n",     \
                    __LINE__, #cond, vt_last_error());                                       \
            abort();                                                                         \
        }                                                                                    \
    } while (0)

/* Remove every file a previous input may have left. */
static void unlink_all(void)
{
    char p[320];
    for (int k = 1; k <= FUZZ_MAX_SHARDS; k++)
        for (int n = 1; n <= FUZZ_MAX_SHARDS; n++) {
            snprintf(p, sizeof p, "%s/fz-%05d-of-%05d.gguf", g_dir, k, n);
            unlink(p);
        }
    snprintf(p, sizeof p, "%s/fz.gguf", g_dir);
    unlink(p);
}

static void cleanup(void)
{
    unlink_all();
    rmdir(g_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/vt-fuzz-gguf-XXXXXX", base);
    if (!mkdtemp(g_dir)) abort();
    atexit(cleanup);
    g_null = fopen("/dev/null", "w");
    if (!g_null) abort();
    vt_log_set_level(VT_LOG_ERROR); /* the missing-pre WARN would flood the output */
    return 0;
}

static void write_file(const char *path, const uint8_t *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK(fwrite(p, 1, n, f) == n);
    CHECK(fclose(f) == 0);
}

/* Split data at FUZZ_SHARD_SEP into files; returns the path of the first one. */
static const char *write_model(const uint8_t *data, size_t size, char *first, size_t cap)
{
    const uint8_t *part[FUZZ_MAX_SHARDS];
    size_t len[FUZZ_MAX_SHARDS];
    int n = 0;
    const uint8_t *p = data, *end = data + size;
    while (n < FUZZ_MAX_SHARDS - 1) {
        const uint8_t *m = memmem(p, (size_t)(end - p), FUZZ_SHARD_SEP, 8);
        if (!m) break;
        part[n] = p;
        len[n++] = (size_t)(m - p);
        p = m + 8;
    }
    part[n] = p;
    len[n++] = (size_t)(end - p);
    unlink_all();
    if (n == 1) {
        snprintf(first, cap, "%s/fz.gguf", g_dir);
        write_file(first, part[0], len[0]);
        return first;
    }
    for (int k = 0; k < n; k++) {
        char q[320];
        snprintf(q, sizeof q, "%s/fz-%05d-of-%05d.gguf", g_dir, k + 1, n);
        write_file(q, part[k], len[k]);
        if (k == 0) snprintf(first, cap, "%s", q);
    }
    return first;
}

static volatile uint8_t g_sink;

static void exercise_metadata(const vt_gguf *g)
{
    const int64_t n_kv = vt_gguf_n_kv(g);
    CHECK(n_kv >= 0);
    CHECK(vt_gguf_kv_key(g, -1) == NULL && vt_gguf_kv_key(g, n_kv) == NULL);
    CHECK(vt_gguf_kv_type(g, n_kv) == VT_GGUF_TYPE_COUNT);
    for (int64_t i = 0; i < n_kv; i++) {
        const char *k = vt_gguf_kv_key(g, i);
        CHECK(k != NULL && *k);
        CHECK(vt_gguf_find_key(g, k) == i);
        vt_gguf_type ty = vt_gguf_kv_type(g, i);
        CHECK((unsigned)ty < VT_GGUF_TYPE_COUNT);
        (void)vt_gguf_type_name(ty);
        vt_gguf_kv_print(g, i, g_null);

        uint32_t u32;
        int64_t i64;
        float f;
        int b;
        vt_gguf_str s;
        /* the getters agree with the type and with each other (vt/gguf.h) */
        const int is_int = ty <= VT_GGUF_INT32 || ty == VT_GGUF_BOOL || ty == VT_GGUF_UINT64 ||
                           ty == VT_GGUF_INT64;
        const int is_float = ty == VT_GGUF_FLOAT32 || ty == VT_GGUF_FLOAT64;
        vt_status st = vt_gguf_get_u32(g, k, &u32);
        CHECK(st == VT_OK || st == VT_ERR_FORMAT);
        CHECK(st != VT_OK || is_int);
        vt_status st64 = vt_gguf_get_i64(g, k, &i64);
        CHECK(st64 == VT_OK || st64 == VT_ERR_FORMAT);
        if (!is_int) CHECK(st64 == VT_ERR_FORMAT);
        else if (ty != VT_GGUF_UINT64) CHECK(st64 == VT_OK); /* UINT64 may not fit */
        if (st == VT_OK) CHECK(st64 == VT_OK && (int64_t)u32 == i64);
        if (st64 == VT_OK && i64 >= 0 && i64 <= UINT32_MAX) CHECK(st == VT_OK);
        st = vt_gguf_get_f32(g, k, &f);
        CHECK(st == (is_float ? VT_OK : VT_ERR_FORMAT));
        st = vt_gguf_get_bool(g, k, &b);
        CHECK(st == (is_int ? VT_OK : VT_ERR_FORMAT));
        if (st == VT_OK) CHECK(b == 0 || b == 1);
        st = vt_gguf_get_str(g, k, &s);
        CHECK(st == (ty == VT_GGUF_STRING ? VT_OK : VT_ERR_FORMAT));
        if (st == VT_OK) {
            CHECK(s.ptr != NULL && s.ptr[s.len] == '\0');
            CHECK(strlen(s.ptr) <= s.len);
        }

        vt_gguf_type et;
        uint64_t n;
        const void *d;
        st = vt_gguf_get_arr(g, k, &et, &n, &d);
        CHECK(st == (ty == VT_GGUF_ARRAY ? VT_OK : VT_ERR_FORMAT));
        if (st != VT_OK) continue;
        CHECK((unsigned)et < VT_GGUF_TYPE_COUNT && et != VT_GGUF_ARRAY);
        CHECK((et == VT_GGUF_STRING) == (d == NULL));
        const uint64_t idx[4] = {0, n / 2, n ? n - 1 : 0, n};
        const int elem_int = et <= VT_GGUF_INT32 || et == VT_GGUF_BOOL || et == VT_GGUF_UINT64 ||
                             et == VT_GGUF_INT64;
        for (int j = 0; j < 4; j++) {
            st = vt_gguf_get_arr_i64(g, k, idx[j], &i64);
            if (idx[j] >= n) CHECK(st == VT_ERR_RANGE);
            else if (!elem_int) CHECK(st == VT_ERR_FORMAT);
            else CHECK(st == VT_OK || (et == VT_GGUF_UINT64 && st == VT_ERR_FORMAT));
            st = vt_gguf_get_arr_str(g, k, idx[j], &s);
            if (idx[j] >= n) CHECK(st == VT_ERR_RANGE);
            else if (et == VT_GGUF_STRING) {
                CHECK(st == VT_OK && s.ptr && s.ptr[s.len] == '\0');
            } else
                CHECK(st == VT_ERR_FORMAT);
        }
        if (d && n) { /* the packed elements are all readable */
            const uint8_t *bytes = d;
            g_sink ^= bytes[0];
        }
    }
}

static void exercise_tensors(const vt_gguf *g)
{
    const uint32_t ns = vt_gguf_n_shards(g);
    CHECK(ns >= 1);
    for (uint32_t s = 0; s < ns; s++) {
        CHECK(vt_gguf_shard_path(g, s) != NULL);
        CHECK(vt_gguf_shard_fd(g, s) >= 0);
    }
    CHECK(vt_gguf_shard_path(g, ns) == NULL && vt_gguf_shard_fd(g, ns) == -1);
    (void)vt_gguf_version(g);
    uint32_t a = vt_gguf_alignment(g);
    CHECK(a && !(a & (a - 1)));
    const int64_t nt = vt_gguf_n_tensors(g);
    CHECK(vt_gguf_tensor_at(g, -1) == NULL && vt_gguf_tensor_at(g, nt) == NULL);
    for (int64_t i = 0; i < nt; i++) {
        const vt_gguf_tensor *t = vt_gguf_tensor_at(g, i);
        CHECK(t && t->name && *t->name);
        CHECK(vt_gguf_find_tensor(g, t->name) == t);
        CHECK(t->shard < ns);
        CHECK(t->n_dims <= 4);
        for (int d = 0; d < 4; d++) CHECK(t->ne[d] >= 0);
        CHECK(t->file_offset == vt_gguf_shard_data_start(g, t->shard) + t->offset);
        CHECK(t->file_offset + t->nbytes <= vt_gguf_shard_size(g, t->shard));
        CHECK(t->file_offset + t->nbytes >= t->file_offset);
        if (t->data && t->nbytes) { /* the mapping shows the file's bytes */
            const uint8_t *p = t->data;
            uint8_t first, last;
            int fd = vt_gguf_shard_fd(g, t->shard);
            CHECK(pread(fd, &first, 1, (off_t)t->file_offset) == 1 && first == p[0]);
            CHECK(pread(fd, &last, 1, (off_t)(t->file_offset + t->nbytes - 1)) == 1 &&
                  last == p[t->nbytes - 1]);
        }
    }
    CHECK(vt_gguf_find_tensor(g, "") == NULL);
}

static void exercise_tokenizer(const vt_gguf *g)
{
    vt_tokenizer *t = NULL;
    vt_clear_error();
    vt_status st = vt_tokenizer_load(g, &t);
    if (st != VT_OK) {
        CHECK(t == NULL);
        CHECK(st == VT_ERR_FORMAT || st == VT_ERR_UNSUPPORTED);
        CHECK(*vt_last_error());
        return;
    }
    const int64_t nv = vt_tokenizer_n_vocab(t);
    CHECK(nv > 0);
    int32_t bos = vt_tokenizer_bos(t), eos = vt_tokenizer_eos(t);
    CHECK(bos >= -1 && bos < nv && eos >= -1 && eos < nv);
    (void)vt_tokenizer_add_bos(t);
    CHECK(vt_token_to_piece(t, -1, 1, NULL, 0) == -1);
    CHECK(vt_token_to_piece(t, (int32_t)nv, 1, NULL, 0) == -1);
    CHECK(vt_tokenizer_token_type(t, (int32_t)nv) == 0);
    /* every token (the first 4096) back to text, plain and streamed */
    vt_detok_stream *ds = vt_detok_stream_new(t, 1);
    CHECK(ds != NULL);
    char buf[64];
    for (int32_t id = 0; id < nv && id < 4096; id++) {
        (void)vt_tokenizer_is_eog(t, id);
        int ty = vt_tokenizer_token_type(t, id);
        CHECK(ty >= 0 && ty <= VT_TOKEN_BYTE);
        int64_t n = vt_token_to_piece(t, id, id & 1, buf, sizeof buf);
        CHECK(n >= 0);
        if (n > 0 && (size_t)n < sizeof buf) {
            buf[n] = 0;
            int32_t f = vt_tokenizer_find(t, buf);
            CHECK(f >= -1 && f < nv);
        }
        size_t k;
        (void)vt_detok_stream_push(ds, id, &k);
    }
    size_t k;
    (void)vt_detok_stream_flush(ds, &k);
    vt_detok_stream_free(ds);
    static const char *const texts[] = {
        "Hello world", " it's  a\ttest\r\n\n 123 ", "<|im_start|>user\nhi<|im_end|>",
        "caf\xc3\xa9 e\xcc\x81 \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80", "\xff\xfe bad \xc3"};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        int32_t *ids = NULL;
        int64_t n = 0;
        st = vt_tokenize(t, texts[i], strlen(texts[i]), (int)(i & 1), (int)(i >> 1 & 1), &ids, &n);
        CHECK(st == VT_OK);
        for (int64_t j = 0; j < n; j++) CHECK(ids[j] >= 0 && ids[j] < nv);
        free(ids);
    }
    vt_tokenizer_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[320];
    write_model(data, size, path, sizeof path);
    /* parse only, mapped, and (for inputs naming split keys) a split's first
     * shard opened alone */
    const int modes = memmem(data, size, "split.", 6) ? 3 : 2;
    vt_status first = VT_OK;
    for (int mm = 0; mm < modes; mm++) {
        const uint32_t flags = mm == 1 ? 0 : mm == 2 ? VT_GGUF_SINGLE_FILE : VT_GGUF_NO_MMAP;
        vt_gguf *g = (vt_gguf *)1;
        vt_clear_error();
        vt_status st = vt_gguf_open(path, flags, &g);
        if (mm == 0) first = st;
        if (mm == 1) CHECK(st == first); /* mapping changes nothing a file can decide */
        if (st != VT_OK) {
            CHECK(g == NULL);
            CHECK(st == VT_ERR_FORMAT || st == VT_ERR_IO || st == VT_ERR_NOT_FOUND);
            CHECK(*vt_last_error());
            continue;
        }
        CHECK(g != NULL);
        exercise_metadata(g);
        exercise_tensors(g);
        CHECK(vt_gguf_print_info(g, g_null) == VT_OK);
        if (!mm) exercise_tokenizer(g); /* the metadata is the same both ways */
        vt_gguf_close(g);
    }
    return 0;
}
