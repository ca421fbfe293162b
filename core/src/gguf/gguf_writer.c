/*
 * gguf_writer.c - the GGUF v3 writer of the vt core (vt/gguf.h): used for
 * generated demo models (mkmodel.c) and test files.
 *
 * Format: GGUF v3 as ggml-org/ggml docs/gguf.md specifies it (header, metadata,
 * tensor infos, aligned data), split models named and keyed as llama.cpp's
 * src/llama-model-loader.cpp reads them (split.no, split.count,
 * split.tensors.count). Metadata
 * is written in the order the keys were first set (setting a key again
 * replaces its value in place); tensors are written in add order, each
 * starting at a multiple of the alignment from the data section start and
 * padded to the next multiple (the last one too), the gaps and the padding
 * before the data section filled with zeros. An alignment other than 32 is
 * recorded as general.alignment (u32) automatically. Each file is written to
 * a new temporary "<path>.tmp.XXXXXX" (mkstemp: created exclusively, so no
 * name someone planted beforehand, a symlink included, is ever followed),
 * given the destination's mode (0666 less the umask for a new file), synced
 * and renamed over path when complete (for a split model, once every shard
 * is complete). A destination that exists and is not a regular file (a
 * device, a FIFO, a directory) is refused and left as it was.
 *
 * Tensor data is either copied at add time, a hole (zeros, not written), or
 * produced by the caller's fill callback while the file is written, in chunks
 * of at most WRITER_CHUNK bytes, so that only one chunk is ever in memory.
 *
 * Not here: reading (gguf_reader.c).
 */
#include "vt/gguf.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "error.h"
#include "gguf_internal.h" /* gguf_scalar_size */
#include "vt/types.h"

#define WRITER_MAX_NAME 63u /* tensor name bytes (GGML_MAX_NAME = 64 incl. NUL) */
#define WRITER_CHUNK ((size_t)4 << 20) /* bytes per fill callback call, at most */
#define WRITER_MAX_SHARDS 99999u     /* the 5-digit split file naming (§5) */

typedef struct wkv {
    char *key;
    vt_gguf_type type;
    uint8_t scalar[8];  /* little-endian scalar bytes */
    char *str;          /* STRING value */
    vt_gguf_type arr_type;
    uint64_t arr_n;
    void *arr_data;     /* numeric array: packed elements */
    char **arr_str;     /* string array */
} wkv;

typedef struct wtensor {
    char *name;
    uint32_t type;
    uint32_t n_dims;
    int64_t ne[4];
    uint64_t nbytes;
    void *data;           /* copied bytes; NULL with fill NULL: a hole */
    vt_gguf_fill_fn fill; /* or: produced at write time */
    void *fill_user;
} wtensor;

struct vt_gguf_writer {
    uint32_t alignment;
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
    vt_gguf_progress_fn progress; /* vt_gguf_writer_set_progress */
    void *progress_user;
};

/* The progress of one write: data bytes done of total (every file). */
typedef struct wprogress {
    const vt_gguf_writer *w;
    uint64_t done, total;
} wprogress;

static void wprogress_add(wprogress *p, uint64_t n)
{
    p->done += n;
    if (p->w->progress) p->w->progress(p->w->progress_user, p->done, p->total);
}

static void wkv_clear(wkv *kv)
{
    free(kv->str);
    free(kv->arr_data);
    if (kv->arr_str)
        for (uint64_t i = 0; i < kv->arr_n; i++) free(kv->arr_str[i]);
    free(kv->arr_str);
    kv->str = NULL;
    kv->arr_data = NULL;
    kv->arr_str = NULL;
    kv->arr_n = 0;
}

vt_gguf_writer *vt_gguf_writer_new(uint32_t alignment)
{
    if (alignment == 0) alignment = 32;
    if (alignment & (alignment - 1)) {
        vt_set_error("gguf writer: alignment %" PRIu32 " is not a power of two", alignment);
        return NULL;
    }
    vt_gguf_writer *w = vt_calloc_named(1, sizeof *w, "gguf writer");
    if (!w) return NULL;
    w->alignment = alignment;
    return w;
}

void vt_gguf_writer_free(vt_gguf_writer *w)
{
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        wkv_clear(&w->kv[i]);
        free(w->kv[i].key);
    }
    free(w->kv);
    for (size_t i = 0; i < w->n_t; i++) {
        free(w->t[i].name);
        free(w->t[i].data);
    }
    free(w->t);
    free(w);
}

/* The entry for key: the existing one (cleared) or a new one at the end. */
static vt_status slot(vt_gguf_writer *w, const char *key, wkv **out)
{
    if (!w || !key || !*key) {
        vt_set_error("gguf writer: a writer and a non-empty key are required");
        return VT_ERR_INVALID_ARG;
    }
    for (size_t i = 0; i < w->n_kv; i++) {
        if (!strcmp(w->kv[i].key, key)) {
            wkv_clear(&w->kv[i]);
            *out = &w->kv[i];
            return VT_OK;
        }
    }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? 2 * w->cap_kv : 32;
        wkv *kv = vt_reallocarray_named(w->kv, cap, sizeof *kv, "gguf writer metadata table");
        if (!kv) goto oom;
        w->kv = kv;
        w->cap_kv = cap;
    }
    wkv *kv = &w->kv[w->n_kv];
    memset(kv, 0, sizeof *kv);
    if (!(kv->key = vt_strdup_named(key, "gguf writer key"))) goto oom;
    w->n_kv++;
    *out = kv;
    return VT_OK;
oom:
    vt_error_prefix("key '%s'", key);
    return VT_ERR_OUT_OF_MEMORY;
}

static vt_status set_scalar(vt_gguf_writer *w, const char *key, vt_gguf_type t, uint64_t bits)
{
    wkv *kv;
    vt_status st = slot(w, key, &kv);
    if (st) return st;
    kv->type = t;
    for (int i = 0; i < 8; i++) kv->scalar[i] = (uint8_t)(bits >> (8 * i));
    return VT_OK;
}

vt_status vt_gguf_writer_set_u32(vt_gguf_writer *w, const char *key, uint32_t v)
{
    return set_scalar(w, key, VT_GGUF_UINT32, v);
}

vt_status vt_gguf_writer_set_i32(vt_gguf_writer *w, const char *key, int32_t v)
{
    return set_scalar(w, key, VT_GGUF_INT32, (uint32_t)v);
}

vt_status vt_gguf_writer_set_u16(vt_gguf_writer *w, const char *key, uint16_t v)
{
    return set_scalar(w, key, VT_GGUF_UINT16, v);
}

vt_status vt_gguf_writer_set_f32(vt_gguf_writer *w, const char *key, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    return set_scalar(w, key, VT_GGUF_FLOAT32, u);
}

vt_status vt_gguf_writer_set_bool(vt_gguf_writer *w, const char *key, int v)
{
    return set_scalar(w, key, VT_GGUF_BOOL, v ? 1 : 0);
}

vt_status vt_gguf_writer_set_str(vt_gguf_writer *w, const char *key, const char *v)
{
    if (!v) {
        vt_set_error("gguf writer: key '%s': NULL string", key ? key : "(null)");
        return VT_ERR_INVALID_ARG;
    }
    wkv *kv;
    vt_status st = slot(w, key, &kv);
    if (st) return st;
    kv->type = VT_GGUF_STRING;
    if (!(kv->str = vt_strdup_named(v, "gguf writer string value"))) {
        kv->type = VT_GGUF_UINT8;
        vt_error_prefix("key '%s'", key);
        return VT_ERR_OUT_OF_MEMORY;
    }
    return VT_OK;
}

vt_status vt_gguf_writer_set_arr(vt_gguf_writer *w, const char *key, vt_gguf_type elem_type,
                                 const void *data, uint64_t count)
{
    uint32_t es = gguf_scalar_size(elem_type);
    if (!es || (count && !data)) {
        vt_set_error("gguf writer: key '%s': element type %s is not numeric (use "
                     "vt_gguf_writer_set_arr_str for strings) or data is NULL",
                     key ? key : "(null)", vt_gguf_type_name(elem_type));
        return VT_ERR_INVALID_ARG;
    }
    if (count > SIZE_MAX / es) {
        vt_set_error("gguf writer: key '%s': %" PRIu64 " elements overflow", key, count);
        return VT_ERR_INVALID_ARG;
    }
    wkv *kv;
    vt_status st = slot(w, key, &kv);
    if (st) return st;
    kv->type = VT_GGUF_ARRAY;
    kv->arr_type = elem_type;
    kv->arr_data = malloc(count ? (size_t)(count * es) : 1);
    if (!kv->arr_data) {
        kv->type = VT_GGUF_UINT8;
        vt_set_error_oom(count * es, "gguf writer array '%s' of %" PRIu64 " %s elements", key,
                         count, vt_gguf_type_name(elem_type));
        return VT_ERR_OUT_OF_MEMORY;
    }
    if (count) memcpy(kv->arr_data, data, (size_t)(count * es));
    kv->arr_n = count;
    return VT_OK;
}

vt_status vt_gguf_writer_set_arr_str(vt_gguf_writer *w, const char *key, const char *const *v,
                                     uint64_t count)
{
    if (count && !v) {
        vt_set_error("gguf writer: key '%s': NULL string array", key ? key : "(null)");
        return VT_ERR_INVALID_ARG;
    }
    for (uint64_t i = 0; i < count; i++) {
        if (!v[i]) {
            vt_set_error("gguf writer: key '%s': element %" PRIu64 " is NULL", key, i);
            return VT_ERR_INVALID_ARG;
        }
    }
    wkv *kv;
    vt_status st = slot(w, key, &kv);
    if (st) return st;
    kv->type = VT_GGUF_ARRAY;
    kv->arr_type = VT_GGUF_STRING;
    kv->arr_str = vt_calloc_named(count ? (size_t)count : 1, sizeof *kv->arr_str,
                                  "gguf writer string array");
    if (!kv->arr_str) goto oom;
    for (uint64_t i = 0; i < count; i++) {
        if (!(kv->arr_str[i] = vt_strdup_named(v[i], "gguf writer string array element")))
            goto oom;
        kv->arr_n = i + 1;
    }
    kv->arr_n = count;
    return VT_OK;
oom:
    wkv_clear(kv);
    kv->type = VT_GGUF_UINT8;
    vt_error_prefix("key '%s' (%" PRIu64 " strings)", key, count);
    return VT_ERR_OUT_OF_MEMORY;
}

/* Validate a tensor and append its table entry (no data; the caller bumps
 * n_t once the entry is complete); *out = the entry. */
static vt_status add_entry(vt_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                           const int64_t *ne, uint64_t nbytes, wtensor **out)
{
    if (!w || !name || !*name || (n_dims && !ne)) {
        vt_set_error("gguf writer: tensor '%s': writer, name and ne are required",
                     name ? name : "(null)");
        return VT_ERR_INVALID_ARG;
    }
    if (strlen(name) > WRITER_MAX_NAME) {
        vt_set_error("gguf writer: tensor '%s': name longer than %u bytes", name, WRITER_MAX_NAME);
        return VT_ERR_INVALID_ARG;
    }
    if (n_dims > 4) {
        vt_set_error("gguf writer: tensor '%s': n_dims = %" PRIu32 " exceeds 4", name, n_dims);
        return VT_ERR_INVALID_ARG;
    }
    vt_type_traits tr = vt_type_traits_of(type);
    if (!tr.block_size) {
        vt_set_error("gguf writer: tensor '%s': unknown type %" PRIu32, name, type);
        return VT_ERR_INVALID_ARG;
    }
    int64_t e[4] = {1, 1, 1, 1};
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] < 0) {
            vt_set_error("gguf writer: tensor '%s': ne[%u] = %" PRId64 " is negative", name, d,
                         ne[d]);
            return VT_ERR_INVALID_ARG;
        }
        e[d] = ne[d];
    }
    if ((uint64_t)e[0] % tr.block_size) {
        vt_set_error("gguf writer: tensor '%s': ne[0] = %" PRId64
                     " is not a multiple of the %s block size %" PRIu32,
                     name, e[0], tr.name, tr.block_size);
        return VT_ERR_INVALID_ARG;
    }
    uint64_t want = (uint64_t)e[0] / tr.block_size * tr.type_size;
    for (int d = 1; d < 4; d++) {
        if (__builtin_mul_overflow(want, (uint64_t)e[d], &want)) {
            vt_set_error("gguf writer: tensor '%s': byte size overflows 64 bits", name);
            return VT_ERR_INVALID_ARG;
        }
    }
    if (want != nbytes) {
        vt_set_error("gguf writer: tensor '%s': nbytes = %" PRIu64 " but %s ne=[%" PRId64
                     ", %" PRId64 ", %" PRId64 ", %" PRId64 "] is %" PRIu64 " bytes",
                     name, nbytes, tr.name, e[0], e[1], e[2], e[3], want);
        return VT_ERR_INVALID_ARG;
    }
    if (nbytes > (uint64_t)INT64_MAX / 2) { /* file offsets stay within off_t */
        vt_set_error("gguf writer: tensor '%s': %" PRIu64 " bytes is too large", name, nbytes);
        return VT_ERR_INVALID_ARG;
    }
    for (size_t i = 0; i < w->n_t; i++) {
        if (!strcmp(w->t[i].name, name)) {
            vt_set_error("gguf writer: tensor '%s' was already added", name);
            return VT_ERR_INVALID_ARG;
        }
    }
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 64;
        wtensor *t = vt_reallocarray_named(w->t, cap, sizeof *t, "gguf writer tensor table");
        if (!t) goto oom;
        w->t = t;
        w->cap_t = cap;
    }
    wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    t->type = type;
    t->n_dims = n_dims;
    memcpy(t->ne, e, sizeof e);
    t->nbytes = nbytes;
    if (!(t->name = vt_strdup_named(name, "gguf writer tensor name"))) goto oom;
    *out = t;
    return VT_OK;
oom:
    vt_error_prefix("tensor '%s'", name);
    return VT_ERR_OUT_OF_MEMORY;
}

vt_status vt_gguf_writer_add_tensor(vt_gguf_writer *w, const char *name, uint32_t type,
                                    uint32_t n_dims, const int64_t *ne, const void *data,
                                    uint64_t nbytes)
{
    wtensor *t;
    vt_status st = add_entry(w, name, type, n_dims, ne, nbytes, &t);
    if (st) return st;
    if (data) { /* NULL: zeros, a hole */
        if ((uint64_t)(size_t)nbytes != nbytes ||
            !(t->data = malloc(nbytes ? (size_t)nbytes : 1))) {
            free(t->name);
            vt_set_error_oom(nbytes, "gguf writer copy of tensor '%s'", name);
            return VT_ERR_OUT_OF_MEMORY;
        }
        if (nbytes) memcpy(t->data, data, (size_t)nbytes);
    }
    w->n_t++;
    return VT_OK;
}

vt_status vt_gguf_writer_add_tensor_fill(vt_gguf_writer *w, const char *name, uint32_t type,
                                         uint32_t n_dims, const int64_t *ne, uint64_t nbytes,
                                         vt_gguf_fill_fn fill, void *user)
{
    if (!fill) {
        vt_set_error("gguf writer: tensor '%s': a fill callback is required",
                     name ? name : "(null)");
        return VT_ERR_INVALID_ARG;
    }
    wtensor *t;
    vt_status st = add_entry(w, name, type, n_dims, ne, nbytes, &t);
    if (st) return st;
    t->fill = fill;
    t->fill_user = user;
    w->n_t++;
    return VT_OK;
}

/* ---- serialisation ---- */

typedef struct out {
    FILE *f;
    uint64_t pos;
    bool bad;
} out;

static void put(out *o, const void *p, size_t n)
{
    if (o->bad || !n) return;
    if (fwrite(p, 1, n, o->f) != n) o->bad = true;
    o->pos += n;
}

/* Advance n zero bytes without writing them (a hole in a sparse file). */
static void skip(out *o, uint64_t n)
{
    if (o->bad || !n) return;
    if (fflush(o->f) != 0 || n > INT64_MAX || fseeko(o->f, (off_t)n, SEEK_CUR) != 0) o->bad = true;
    o->pos += n;
}

static void put_u32(out *o, uint32_t v)
{
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(o, b, 4);
}

static void put_u64(out *o, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    put(o, b, 8);
}

static void put_str(out *o, const char *s)
{
    size_t n = strlen(s);
    put_u64(o, n);
    put(o, s, n);
}

static void put_zeros(out *o, uint64_t n)
{
    static const uint8_t z[256];
    while (n) {
        size_t k = n < sizeof z ? (size_t)n : sizeof z;
        put(o, z, k);
        n -= k;
    }
}

static bool has_key(const vt_gguf_writer *w, const char *key)
{
    for (size_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->kv[i].key, key)) return true;
    return false;
}

static uint64_t align_up(uint64_t x, uint64_t a) { return x + (a - x % a) % a; }

static void put_kv(out *o, const wkv *kv)
{
    put_str(o, kv->key);
    put_u32(o, kv->type);
    if (kv->type == VT_GGUF_STRING) {
        put_str(o, kv->str);
    } else if (kv->type == VT_GGUF_ARRAY) {
        put_u32(o, kv->arr_type);
        put_u64(o, kv->arr_n);
        if (kv->arr_type == VT_GGUF_STRING) {
            for (uint64_t k = 0; k < kv->arr_n; k++) put_str(o, kv->arr_str[k]);
        } else {
            /* elements were given in host order; vt hosts are little-endian */
            put(o, kv->arr_data, (size_t)(kv->arr_n * gguf_scalar_size(kv->arr_type)));
        }
    } else {
        put(o, kv->scalar, gguf_scalar_size(kv->type));
    }
}

/* A scalar entry built on the stack (the split keys). */
static wkv scalar_kv(const char *key, vt_gguf_type t, uint64_t bits)
{
    wkv kv = {.key = (char *)key, .type = t};
    for (int i = 0; i < 8; i++) kv.scalar[i] = (uint8_t)(bits >> (8 * i));
    return kv;
}

/* general.alignment must agree with the alignment the data is laid out with;
 * an alignment other than 32 is recorded. */
static vt_status check_alignment_key(vt_gguf_writer *w, const char *path)
{
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, "general.alignment")) continue;
        uint32_t a = (uint32_t)w->kv[i].scalar[0] | (uint32_t)w->kv[i].scalar[1] << 8 |
                     (uint32_t)w->kv[i].scalar[2] << 16 | (uint32_t)w->kv[i].scalar[3] << 24;
        if (w->kv[i].type != VT_GGUF_UINT32 || a != w->alignment) {
            vt_set_error("gguf writer: %s: general.alignment must be the UINT32 %" PRIu32
                         " given to vt_gguf_writer_new",
                         path, w->alignment);
            return VT_ERR_INVALID_ARG;
        }
    }
    if (w->alignment != 32 && !has_key(w, "general.alignment"))
        return vt_gguf_writer_set_u32(w, "general.alignment", w->alignment);
    return VT_OK;
}

/* What one file holds: tensors [t0, t1) of the writer; all metadata when meta;
 * the split keys when count > 1. */
typedef struct file_spec {
    size_t t0, t1;
    uint32_t no, count;
    bool meta;
} file_spec;

/* Bytes of the fill buffer: the largest chunk any fill tensor asks for. */
static size_t chunk_bytes(const vt_gguf_writer *w)
{
    size_t n = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        if (!w->t[i].fill) continue;
        uint64_t k = w->t[i].nbytes < WRITER_CHUNK ? w->t[i].nbytes : WRITER_CHUNK;
        if (k > n) n = (size_t)k;
    }
    return n;
}

/* The mode the file written for destination path gets: the destination's
 * when it is a regular file (through symlinks), 0666 less the umask when it
 * does not exist; anything else is refused by name. */
static vt_status dest_mode(const char *path, mode_t *mode)
{
    struct stat st;
    if (stat(path, &st) == 0) {
        if (!S_ISREG(st.st_mode)) {
            vt_set_error("%s: not a regular file (%s); refusing to replace it", path,
                         vt_file_type_name(st.st_mode));
            return VT_ERR_INVALID_ARG;
        }
        *mode = st.st_mode & 07777;
        return VT_OK;
    }
    if (errno != ENOENT) {
        vt_set_error("%s: %s", path, strerror(errno));
        return VT_ERR_IO;
    }
    mode_t um = umask(0);
    umask(um);
    *mode = 0666 & ~um;
    return VT_OK;
}

/* Write one GGUF file as fs says to a new temporary made from tmp (a
 * "...XXXXXX" template, filled in by mkstemp), with the given mode, synced.
 * buf: the fill buffer (chunk_bytes). */
static vt_status write_file(const vt_gguf_writer *w, char *tmp, mode_t mode, const file_spec *fs,
                            uint8_t *buf, wprogress *pr)
{
    int fd = mkstemp(tmp);
    if (fd < 0) {
        vt_set_error("%s: cannot create: %s", tmp, strerror(errno));
        return VT_ERR_IO;
    }
    out o = {.f = fchmod(fd, mode) == 0 ? fdopen(fd, "wb") : NULL};
    if (!o.f) {
        vt_set_error("%s: cannot set up: %s", tmp, strerror(errno));
        close(fd);
        remove(tmp);
        return VT_ERR_IO;
    }
    wkv split[4];
    size_t n_split = 0;
    if (fs->count > 1) {
        split[n_split++] = scalar_kv("split.no", VT_GGUF_UINT16, fs->no);
        split[n_split++] = scalar_kv("split.count", VT_GGUF_UINT16, fs->count);
        split[n_split++] = scalar_kv("split.tensors.count", VT_GGUF_INT32, w->n_t);
        if (!fs->meta && w->alignment != 32) /* each shard is parsed with its own alignment */
            split[n_split++] = scalar_kv("general.alignment", VT_GGUF_UINT32, w->alignment);
    }
    put(&o, "GGUF", 4);
    put_u32(&o, 3);
    put_u64(&o, fs->t1 - fs->t0);
    put_u64(&o, (fs->meta ? w->n_kv : 0) + n_split);
    if (fs->meta)
        for (size_t i = 0; i < w->n_kv; i++) put_kv(&o, &w->kv[i]);
    for (size_t i = 0; i < n_split; i++) put_kv(&o, &split[i]);
    uint64_t off = 0;
    for (size_t i = fs->t0; i < fs->t1; i++) {
        const wtensor *t = &w->t[i];
        put_str(&o, t->name);
        put_u32(&o, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) put_u64(&o, (uint64_t)t->ne[d]);
        put_u32(&o, t->type);
        put_u64(&o, off);
        off = align_up(off + t->nbytes, w->alignment);
    }
    if (fs->t1 > fs->t0) put_zeros(&o, align_up(o.pos, w->alignment) - o.pos);
    uint64_t data_start = o.pos;
    vt_status st = VT_OK;
    for (size_t i = fs->t0; i < fs->t1 && !o.bad; i++) {
        const wtensor *t = &w->t[i];
        if (t->fill) {
            uint32_t ts = vt_type_traits_of(t->type).type_size;
            size_t step = WRITER_CHUNK / ts * ts;
            for (uint64_t done = 0; done < t->nbytes && !o.bad;) {
                size_t n = t->nbytes - done < step ? (size_t)(t->nbytes - done) : step;
                if ((st = t->fill(t->fill_user, buf, done, n))) {
                    vt_error_prefix("%s: tensor '%s', bytes %" PRIu64 "..%" PRIu64, tmp, t->name,
                                    done, done + n);
                    break;
                }
                put(&o, buf, n);
                done += n;
                wprogress_add(pr, n);
            }
            if (st) break;
        } else if (t->data) {
            put(&o, t->data, (size_t)t->nbytes);
            wprogress_add(pr, t->nbytes);
        } else {
            skip(&o, t->nbytes);
            wprogress_add(pr, t->nbytes);
        }
        uint64_t pad = align_up(o.pos - data_start, w->alignment) - (o.pos - data_start);
        put_zeros(&o, pad);
        if (pad) wprogress_add(pr, pad);
    }
    /* a trailing hole needs the size set explicitly */
    if (!st && !o.bad &&
        (fflush(o.f) != 0 || ftruncate(fileno(o.f), (off_t)o.pos) != 0 || fsync(fileno(o.f)) != 0))
        o.bad = true;
    int err = errno;
    int close_failed = fclose(o.f) != 0;
    if (!st && (o.bad || close_failed)) {
        vt_set_error("%s: write failed after %" PRIu64 " bytes: %s", tmp, o.pos,
                     strerror(close_failed && !o.bad ? errno : err));
        st = VT_ERR_IO;
    }
    if (st) remove(tmp);
    return st;
}

#define TMP_SUFFIX ".tmp.XXXXXX"

/* "<path>.tmp.XXXXXX" (a mkstemp template), malloc-ed (NULL with the error set). */
static char *tmp_name(const char *path)
{
    size_t n = strlen(path) + sizeof TMP_SUFFIX;
    char *tmp = malloc(n);
    if (!tmp) vt_set_error_oom(n, "temporary path for %s", path);
    else snprintf(tmp, n, "%s" TMP_SUFFIX, path);
    return tmp;
}

void vt_gguf_writer_set_progress(vt_gguf_writer *w, vt_gguf_progress_fn fn, void *user)
{
    if (!w) return;
    w->progress = fn;
    w->progress_user = user;
}

static wprogress wprogress_start(const vt_gguf_writer *w)
{
    wprogress p = {w, 0, 0};
    for (size_t i = 0; i < w->n_t; i++) p.total += align_up(w->t[i].nbytes, w->alignment);
    return p;
}

vt_status vt_gguf_writer_write(vt_gguf_writer *w, const char *path)
{
    if (!w || !path) {
        vt_set_error("gguf writer: writer and path are required");
        return VT_ERR_INVALID_ARG;
    }
    vt_status st = check_alignment_key(w, path);
    if (st) return st;
    mode_t mode;
    if ((st = dest_mode(path, &mode))) return st;
    char *tmp = tmp_name(path);
    if (!tmp) return VT_ERR_OUT_OF_MEMORY;
    size_t nb = chunk_bytes(w);
    uint8_t *buf = nb ? vt_malloc_named(nb, "gguf writer fill buffer") : NULL;
    if (nb && !buf) {
        free(tmp);
        return VT_ERR_OUT_OF_MEMORY;
    }
    file_spec fs = {0, w->n_t, 0, 1, true};
    wprogress pr = wprogress_start(w);
    st = write_file(w, tmp, mode, &fs, buf, &pr);
    free(buf);
    if (!st && rename(tmp, path) != 0) {
        vt_set_error("%s: cannot rename to %s: %s", tmp, path, strerror(errno));
        remove(tmp);
        st = VT_ERR_IO;
    }
    free(tmp);
    return st;
}

/* ---- split models (§5) ---- */

/* If path ends in "-NNNNN-of-MMMMM.gguf", its prefix length and MMMMM; else -1. */
static long split_suffix(const char *path, unsigned *count)
{
    size_t n = strlen(path);
    const size_t suffix = strlen("-00001-of-00001.gguf");
    if (n < suffix) return -1;
    const char *p = path + n - suffix;
    if (p[0] != '-' || strncmp(p + 6, "-of-", 4) || strcmp(p + 15, ".gguf")) return -1;
    unsigned c = 0;
    for (int i = 1; i <= 5; i++) {
        if (p[i] < '0' || p[i] > '9' || p[9 + i] < '0' || p[9 + i] > '9') return -1;
        c = 10 * c + (unsigned)(p[9 + i] - '0');
    }
    *count = c;
    return (long)(n - suffix);
}

vt_status vt_gguf_writer_shard_path(const char *path, uint32_t k, uint32_t n_shards, char *out,
                                    size_t out_size)
{
    if (!path || !out || n_shards == 0 || n_shards > WRITER_MAX_SHARDS || k >= n_shards) {
        vt_set_error("gguf writer: shard %" PRIu32 " of %" PRIu32 " of %s: bad arguments", k + 1,
                     n_shards, path ? path : "(null)");
        return VT_ERR_INVALID_ARG;
    }
    size_t plen = strlen(path);
    int n;
    if (n_shards == 1) {
        n = snprintf(out, out_size, "%s", path);
    } else {
        unsigned c;
        long sl = split_suffix(path, &c);
        if (sl >= 0 && c != n_shards) {
            vt_set_error("gguf writer: %s names a split of %u shards, but %" PRIu32
                         " were asked for",
                         path, c, n_shards);
            return VT_ERR_INVALID_ARG;
        }
        if (sl >= 0) plen = (size_t)sl;
        else if (plen > 5 && !strcmp(path + plen - 5, ".gguf")) plen -= 5;
        n = snprintf(out, out_size, "%.*s-%05" PRIu32 "-of-%05" PRIu32 ".gguf", (int)plen, path,
                     k + 1, n_shards);
    }
    if (n < 0 || (size_t)n >= out_size) {
        vt_set_error("gguf writer: shard %" PRIu32 " of %" PRIu32 " of %s: name longer than %zu "
                     "bytes",
                     k + 1, n_shards, path, out_size ? out_size - 1 : 0);
        return VT_ERR_INVALID_ARG;
    }
    return VT_OK;
}

/* First tensor of each shard (first[n_shards] = n_t): consecutive runs of
 * roughly total/n_shards data bytes, each shard non-empty. A tensor goes to
 * the shard its byte midpoint falls in, moving at most one shard per tensor
 * and never leaving fewer tensors than shards still to fill. */
static void assign_shards(const vt_gguf_writer *w, uint32_t n_shards, size_t *first)
{
    uint64_t total = 1;
    for (size_t i = 0; i < w->n_t; i++) total += align_up(w->t[i].nbytes, w->alignment);
    uint64_t before = 0;
    uint32_t cur = 0;
    first[0] = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        uint64_t sz = align_up(w->t[i].nbytes, w->alignment);
        double mid = (double)(before + sz / 2) * n_shards / (double)total; /* total > 0 */
        uint32_t want = mid >= n_shards ? n_shards - 1 : (uint32_t)mid;
        uint32_t lo = (uint32_t)((uint64_t)n_shards > w->n_t - i ? n_shards - (w->n_t - i) : 0);
        uint32_t s = want > cur ? cur + 1 : cur;
        if (s < lo) s = lo;
        if (i == 0) s = 0;
        while (cur < s) first[++cur] = i;
        before += sz;
    }
    first[n_shards] = w->n_t;
}

vt_status vt_gguf_writer_write_split(vt_gguf_writer *w, const char *path, uint32_t n_shards)
{
    if (!w || !path) {
        vt_set_error("gguf writer: writer and path are required");
        return VT_ERR_INVALID_ARG;
    }
    if (n_shards == 1) return vt_gguf_writer_write(w, path);
    if (n_shards == 0 || n_shards > WRITER_MAX_SHARDS || n_shards > w->n_t) {
        vt_set_error("gguf writer: %s: cannot split %zu tensors into %" PRIu32
                     " shards (1..%u, at most one per tensor)",
                     path, w->n_t, n_shards, WRITER_MAX_SHARDS);
        return VT_ERR_INVALID_ARG;
    }
    if (w->n_t > (size_t)INT32_MAX) {
        vt_set_error("gguf writer: %s: %zu tensors do not fit split.tensors.count (i32)", path,
                     w->n_t);
        return VT_ERR_INVALID_ARG;
    }
    for (size_t i = 0; i < w->n_kv; i++) {
        if (!strncmp(w->kv[i].key, "split.", 6)) {
            vt_set_error("gguf writer: %s: key '%s' is set by the split writer itself", path,
                         w->kv[i].key);
            return VT_ERR_INVALID_ARG;
        }
    }
    vt_status st = check_alignment_key(w, path);
    if (st) return st;
    const size_t name_size = strlen(path) + 32;
    const size_t nb = chunk_bytes(w);
    /* name[k]: shard k's file; name[n_shards + k]: its temporary "<file>.tmp.XXXXXX" */
    char **name = vt_calloc_named(2 * (size_t)n_shards, sizeof *name, "gguf writer shard names");
    size_t *first = vt_calloc_named((size_t)n_shards + 1, sizeof *first, "gguf writer shard table");
    mode_t *modes = vt_calloc_named((size_t)n_shards, sizeof *modes, "gguf writer shard modes");
    uint8_t *buf = nb ? vt_malloc_named(nb, "gguf writer fill buffer") : NULL;
    if (!name || !first || !modes || (nb && !buf)) {
        st = VT_ERR_OUT_OF_MEMORY;
        goto out;
    }
    for (uint32_t k = 0; k < n_shards; k++) {
        if (!(name[k] = vt_malloc_named(name_size, "gguf writer shard name")) ||
            !(name[n_shards + k] = vt_malloc_named(name_size + sizeof TMP_SUFFIX,
                                                   "gguf writer shard name"))) {
            st = VT_ERR_OUT_OF_MEMORY;
            goto out;
        }
        if ((st = vt_gguf_writer_shard_path(path, k, n_shards, name[k], name_size))) goto out;
        snprintf(name[n_shards + k], name_size + sizeof TMP_SUFFIX, "%s" TMP_SUFFIX, name[k]);
        mode_t m;
        if ((st = dest_mode(name[k], &m))) goto out;
        modes[k] = m;
    }
    assign_shards(w, n_shards, first);
    wprogress pr = wprogress_start(w);
    for (uint32_t k = 0; k < n_shards && !st; k++) {
        file_spec fs = {first[k], first[k + 1], k, n_shards, k == 0};
        if ((st = write_file(w, name[n_shards + k], modes[k], &fs, buf, &pr)))
            for (uint32_t j = 0; j < k; j++) remove(name[n_shards + j]);
    }
    for (uint32_t k = 0; k < n_shards && !st; k++) {
        if (rename(name[n_shards + k], name[k]) == 0) continue;
        vt_set_error("%s: cannot rename to %s: %s", name[n_shards + k], name[k], strerror(errno));
        st = VT_ERR_IO;
        for (uint32_t j = 0; j < k; j++) remove(name[j]);
        for (uint32_t j = k; j < n_shards; j++) remove(name[n_shards + j]);
    }
out:
    if (name)
        for (uint32_t k = 0; k < 2 * n_shards; k++) free(name[k]);
    free(name);
    free(first);
    free(modes);
    free(buf);
    return st;
}
