/*
 * gguf_writer.c - the minimal GGUF v3 writer of the vt core (vt/gguf.h): used
 * for generated demo models (mkmodel.c) and test files.
 *
 * Format: ../shared/spec/gguf.md §2. Metadata is written in the order the keys
 * were first set (setting a key again replaces its value in place); tensors
 * are written in add order, each starting at a multiple of the alignment from
 * the data section start and padded to the next multiple (the last one too),
 * the gaps and the padding before the data section filled with zeros. An alignment other than 32 is recorded as
 * general.alignment (u32) automatically. The file is written to "<path>.tmp"
 * and renamed over path when complete.
 *
 * Not here: reading (gguf_reader.c).
 */
#include "vt/gguf.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "error.h"
#include "vt/types.h"

#define WRITER_MAX_NAME 63u /* tensor name bytes (GGML_MAX_NAME = 64 incl. NUL) */

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
    void *data;
} wtensor;

struct vt_gguf_writer {
    uint32_t alignment;
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
};

/* Element bytes of a numeric GGUF value type (0 for STRING/ARRAY/unknown). */
static uint32_t value_size(vt_gguf_type t)
{
    switch (t) {
    case VT_GGUF_UINT8: case VT_GGUF_INT8: case VT_GGUF_BOOL: return 1;
    case VT_GGUF_UINT16: case VT_GGUF_INT16: return 2;
    case VT_GGUF_UINT32: case VT_GGUF_INT32: case VT_GGUF_FLOAT32: return 4;
    case VT_GGUF_UINT64: case VT_GGUF_INT64: case VT_GGUF_FLOAT64: return 8;
    default: return 0;
    }
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
    uint32_t es = value_size(elem_type);
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

vt_status vt_gguf_writer_add_tensor(vt_gguf_writer *w, const char *name, uint32_t type,
                                    uint32_t n_dims, const int64_t *ne, const void *data,
                                    uint64_t nbytes)
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
    for (size_t i = 0; i < w->n_t; i++) {
        if (!strcmp(w->t[i].name, name)) {
            vt_set_error("gguf writer: tensor '%s' was already added", name);
            return VT_ERR_INVALID_ARG;
        }
    }
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 64;
        wtensor *t = vt_reallocarray_named(w->t, cap, sizeof *t, "gguf writer tensor table");
        if (!t) goto oom_named;
        w->t = t;
        w->cap_t = cap;
    }
    wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    t->type = type;
    t->n_dims = n_dims;
    memcpy(t->ne, e, sizeof e);
    t->nbytes = nbytes;
    if ((uint64_t)(size_t)nbytes != nbytes) goto oom_data;
    if (!(t->name = vt_strdup_named(name, "gguf writer tensor name"))) goto oom_named;
    t->data = data ? malloc(nbytes ? (size_t)nbytes : 1) : NULL; /* NULL: zeros, a hole */
    if (data && !t->data) {
        free(t->name);
        goto oom_data;
    }
    if (data && nbytes) memcpy(t->data, data, (size_t)nbytes);
    w->n_t++;
    return VT_OK;
oom_named:
    vt_error_prefix("tensor '%s'", name);
    return VT_ERR_OUT_OF_MEMORY;
oom_data:
    vt_set_error_oom(nbytes, "gguf writer copy of tensor '%s'", name);
    return VT_ERR_OUT_OF_MEMORY;
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

vt_status vt_gguf_writer_write(vt_gguf_writer *w, const char *path)
{
    if (!w || !path) {
        vt_set_error("gguf writer: writer and path are required");
        return VT_ERR_INVALID_ARG;
    }
    /* general.alignment must agree with the alignment the data is laid out with */
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
    if (w->alignment != 32 && !has_key(w, "general.alignment")) {
        vt_status st = vt_gguf_writer_set_u32(w, "general.alignment", w->alignment);
        if (st) return st;
    }
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    if (!tmp) {
        vt_set_error_oom(plen + 5, "temporary path for %s", path);
        return VT_ERR_OUT_OF_MEMORY;
    }
    snprintf(tmp, plen + 5, "%s.tmp", path);
    out o = {.f = fopen(tmp, "wb")};
    if (!o.f) {
        vt_set_error("%s: cannot create: %s", tmp, strerror(errno));
        free(tmp);
        return VT_ERR_IO;
    }
    put(&o, "GGUF", 4);
    put_u32(&o, 3);
    put_u64(&o, w->n_t);
    put_u64(&o, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        const wkv *kv = &w->kv[i];
        put_str(&o, kv->key);
        put_u32(&o, kv->type);
        if (kv->type == VT_GGUF_STRING) {
            put_str(&o, kv->str);
        } else if (kv->type == VT_GGUF_ARRAY) {
            put_u32(&o, kv->arr_type);
            put_u64(&o, kv->arr_n);
            if (kv->arr_type == VT_GGUF_STRING) {
                for (uint64_t k = 0; k < kv->arr_n; k++) put_str(&o, kv->arr_str[k]);
            } else {
                /* elements were given in host order; vt hosts are little-endian */
                put(&o, kv->arr_data, (size_t)(kv->arr_n * value_size(kv->arr_type)));
            }
        } else {
            put(&o, kv->scalar, value_size(kv->type));
        }
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        put_str(&o, t->name);
        put_u32(&o, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) put_u64(&o, (uint64_t)t->ne[d]);
        put_u32(&o, t->type);
        put_u64(&o, off);
        off = align_up(off + t->nbytes, w->alignment);
    }
    if (w->n_t) put_zeros(&o, align_up(o.pos, w->alignment) - o.pos);
    uint64_t data_start = o.pos;
    for (size_t i = 0; i < w->n_t; i++) {
        if (w->t[i].data) put(&o, w->t[i].data, (size_t)w->t[i].nbytes);
        else skip(&o, w->t[i].nbytes);
        put_zeros(&o, align_up(o.pos - data_start, w->alignment) - (o.pos - data_start));
    }
    /* a trailing hole needs the size set explicitly */
    if (!o.bad && (fflush(o.f) != 0 || ftruncate(fileno(o.f), (off_t)o.pos) != 0)) o.bad = true;
    int close_failed = fclose(o.f) != 0;
    if (o.bad || close_failed) {
        vt_set_error("%s: write failed after %" PRIu64 " bytes: %s", tmp, o.pos, strerror(errno));
        remove(tmp);
        free(tmp);
        return VT_ERR_IO;
    }
    if (rename(tmp, path) != 0) {
        vt_set_error("%s: cannot rename to %s: %s", tmp, path, strerror(errno));
        remove(tmp);
        free(tmp);
        return VT_ERR_IO;
    }
    free(tmp);
    return VT_OK;
}
