/*
 * gguf_access.c - the accessors of an open GGUF file (vt/gguf.h): model-level
 * facts and shards, metadata getters with their type and range checks, the
 * metadata printer of `vt info`, and tensor lookup. Parsing and opening are
 * in gguf_reader.c, metadata values in gguf_value.c; the objects in
 * gguf_internal.h.
 */
#include "vt/gguf.h"

#include <errno.h>
#include <inttypes.h>
#include <sys/stat.h>
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "gguf_internal.h"

/* ------------------------------------------------------------------------ */
/* Model-level facts                                                         */
/* ------------------------------------------------------------------------ */

uint32_t vt_gguf_version(const vt_gguf *g) { return g->shards[0].version; }
uint32_t vt_gguf_alignment(const vt_gguf *g) { return g->shards[0].alignment; }
uint32_t vt_gguf_n_shards(const vt_gguf *g) { return g->n_shards; }

const char *vt_gguf_shard_path(const vt_gguf *g, uint32_t shard)
{
    return shard < g->n_shards ? g->shards[shard].path : NULL;
}

int vt_gguf_shard_fd(const vt_gguf *g, uint32_t shard)
{
    return shard < g->n_shards ? g->shards[shard].fd : -1;
}

uint64_t vt_gguf_shard_data_start(const vt_gguf *g, uint32_t shard)
{
    return shard < g->n_shards ? g->shards[shard].data_start : 0;
}

uint64_t vt_gguf_shard_size(const vt_gguf *g, uint32_t shard)
{
    return shard < g->n_shards ? g->shards[shard].size : 0;
}

vt_status vt_gguf_check_unchanged(const vt_gguf *g)
{
    for (uint32_t k = 0; k < g->n_shards; k++) {
        const gguf_shard *s = &g->shards[k];
        struct stat sb;
        if (s->fd < 0) continue;
        if (fstat(s->fd, &sb) != 0) {
            vt_set_error("%s: fstat failed: %s", s->path, strerror(errno));
            return VT_ERR_IO;
        }
        const int64_t mt = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
        if ((uint64_t)sb.st_size != s->size || mt != s->mtime_ns) {
            vt_set_error("%s: the model file changed on disk while in use (%s); its weights are "
                         "read from it: restart with the new file", s->path,
                         (uint64_t)sb.st_size != s->size ? "its size changed" : "it was written to");
            return VT_ERR_IO;
        }
    }
    return VT_OK;
}

/* ------------------------------------------------------------------------ */
/* Metadata getters                                                          */
/* ------------------------------------------------------------------------ */

int64_t vt_gguf_n_kv(const vt_gguf *g) { return g->shards[0].n_kv; }

const char *vt_gguf_kv_key(const vt_gguf *g, int64_t i)
{
    return i >= 0 && i < g->shards[0].n_kv ? g->shards[0].kv[i].key : NULL;
}

vt_gguf_type vt_gguf_kv_type(const vt_gguf *g, int64_t i)
{
    return i >= 0 && i < g->shards[0].n_kv ? g->shards[0].kv[i].type : VT_GGUF_TYPE_COUNT;
}

int64_t vt_gguf_find_key(const vt_gguf *g, const char *key)
{
    return gguf_name_index_find(&g->shards[0].kv_index, key);
}

static const gguf_kv *find_kv(const vt_gguf *g, const char *key) { return gguf_shard_kv(&g->shards[0], key); }

static vt_status wrong_type(const vt_gguf *g, const gguf_kv *kv, const char *expected)
{
    vt_set_error("%s: metadata key '%s' has type %s, expected %s", g->shards[0].path, kv->key,
                 vt_gguf_type_name(kv->type), expected);
    return VT_ERR_FORMAT;
}

vt_status vt_gguf_get_u32(const vt_gguf *g, const char *key, uint32_t *out)
{
    const gguf_kv *kv = find_kv(g, key);
    if (!kv) return VT_ERR_NOT_FOUND;
    uint64_t v;
    vt_status st = gguf_kv_int(g->shards[0].path, kv, 0, UINT32_MAX, NULL, &v);
    if (st) return st;
    *out = (uint32_t)v;
    return VT_OK;
}

vt_status vt_gguf_get_i64(const vt_gguf *g, const char *key, int64_t *out)
{
    const gguf_kv *kv = find_kv(g, key);
    if (!kv) return VT_ERR_NOT_FOUND;
    return gguf_kv_int(g->shards[0].path, kv, INT64_MIN, INT64_MAX, out, NULL);
}

vt_status vt_gguf_get_f32(const vt_gguf *g, const char *key, float *out)
{
    const gguf_kv *kv = find_kv(g, key);
    if (!kv) return VT_ERR_NOT_FOUND;
    if (kv->type != VT_GGUF_FLOAT32 && kv->type != VT_GGUF_FLOAT64)
        return wrong_type(g, kv, "FLOAT32 or FLOAT64");
    *out = (float)kv->v.f;
    return VT_OK;
}

vt_status vt_gguf_get_bool(const vt_gguf *g, const char *key, int *out)
{
    const gguf_kv *kv = find_kv(g, key);
    if (!kv) return VT_ERR_NOT_FOUND;
    if (!gguf_is_int_type(kv->type)) return wrong_type(g, kv, "BOOL");
    *out = kv->v.u != 0;
    return VT_OK;
}

vt_status vt_gguf_get_str(const vt_gguf *g, const char *key, vt_gguf_str *out)
{
    const gguf_kv *kv = find_kv(g, key);
    if (!kv) return VT_ERR_NOT_FOUND;
    if (kv->type != VT_GGUF_STRING) return wrong_type(g, kv, "STRING");
    *out = kv->str;
    return VT_OK;
}

vt_status vt_gguf_get_arr(const vt_gguf *g, const char *key, vt_gguf_type *elem_type,
                          uint64_t *count, const void **data)
{
    const gguf_kv *kv = find_kv(g, key);
    if (!kv) return VT_ERR_NOT_FOUND;
    if (kv->type != VT_GGUF_ARRAY) return wrong_type(g, kv, "ARRAY");
    if (elem_type) *elem_type = kv->arr_type;
    if (count) *count = kv->arr_n;
    if (data) *data = kv->arr_type == VT_GGUF_STRING ? NULL : kv->arr_data;
    return VT_OK;
}

/* The array kv of key with element i present, or an error. */
static vt_status arr_elem(const vt_gguf *g, const char *key, uint64_t i, const gguf_kv **out)
{
    const gguf_kv *kv = find_kv(g, key);
    if (!kv) return VT_ERR_NOT_FOUND;
    if (kv->type != VT_GGUF_ARRAY) return wrong_type(g, kv, "ARRAY");
    if (i >= kv->arr_n) {
        vt_set_error("%s: metadata key '%s': index %" PRIu64 " is past the array's %" PRIu64
                     " elements",
                     g->shards[0].path, kv->key, i, kv->arr_n);
        return VT_ERR_RANGE;
    }
    *out = kv;
    return VT_OK;
}

vt_status vt_gguf_get_arr_str(const vt_gguf *g, const char *key, uint64_t i, vt_gguf_str *out)
{
    const gguf_kv *kv;
    vt_status st = arr_elem(g, key, i, &kv);
    if (st) return st;
    if (kv->arr_type != VT_GGUF_STRING) {
        vt_set_error("%s: metadata key '%s' is an array of %s, expected STRING",
                     g->shards[0].path, kv->key, vt_gguf_type_name(kv->arr_type));
        return VT_ERR_FORMAT;
    }
    *out = kv->arr_str[i];
    return VT_OK;
}

vt_status vt_gguf_get_arr_i64(const vt_gguf *g, const char *key, uint64_t i, int64_t *out)
{
    const gguf_kv *kv;
    vt_status st = arr_elem(g, key, i, &kv);
    if (st) return st;
    if (!gguf_is_int_type(kv->arr_type)) {
        vt_set_error("%s: metadata key '%s' is an array of %s, expected integers",
                     g->shards[0].path, kv->key, vt_gguf_type_name(kv->arr_type));
        return VT_ERR_FORMAT;
    }
    gguf_kv tmp = {.key = kv->key, .type = kv->arr_type};
    uint32_t es = gguf_scalar_size(kv->arr_type);
    gguf_decode_scalar(kv->arr_type, (const uint8_t *)kv->arr_data + i * es, &tmp);
    if (!gguf_is_signed_type(tmp.type) && tmp.v.u > (uint64_t)INT64_MAX) {
        vt_set_error("%s: metadata key '%s': element %" PRIu64 " = %" PRIu64
                     " does not fit int64",
                     g->shards[0].path, kv->key, i, tmp.v.u);
        return VT_ERR_FORMAT;
    }
    *out = tmp.v.i;
    return VT_OK;
}

/* ------------------------------------------------------------------------ */
/* Printing one value                                                        */
/* ------------------------------------------------------------------------ */

#define PRINT_STR_MAX 160  /* bytes of a string value shown before "..." */
#define PRINT_ARR_MAX 12   /* leading array elements shown */

/* A string value between quotes: quote, backslash, newline, return and tab as
 * C escapes, everything else as vt_text_escape (control characters and bytes
 * of invalid UTF-8 as \xNN), at most max bytes of it. */
static void print_str(FILE *f, const char *s, uint64_t len, uint64_t max)
{
    fputc('\'', f);
    uint64_t n = len < max ? len : max;
    for (int k = 0; k < 3 && n < len && n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80; k++)
        n--; /* whole characters */
    char run[4 * 64 + 1];
    uint64_t i = 0;
    while (i < n) {
        const char *esc = NULL;
        switch (s[i]) {
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\\': esc = "\\\\"; break;
        case '\'': esc = "\\'"; break;
        default: break;
        }
        if (esc) {
            fputs(esc, f);
            i++;
            continue;
        }
        /* a run up to the next of those (all ASCII, never inside a UTF-8
         * sequence), 64 bytes at most, not cut inside a UTF-8 sequence */
        uint64_t j = i + 1;
        while (j < n && j - i < 64 && !strchr("\n\r\t\\'", s[j] ? s[j] : '\n')) j++;
        if (j < n && j - i == 64)
            for (uint64_t b = j; b > i + 1 && b + 4 > j; b--)
                if (((unsigned char)s[b] & 0xc0) != 0x80) {
                    j = b;
                    break;
                }
        vt_text_escape(run, sizeof run, s + i, (size_t)(j - i));
        fputs(run, f);
        i = j;
    }
    fputc('\'', f);
    if (len > n) fprintf(f, "... (%" PRIu64 " bytes)", len);
}

static void print_scalar(FILE *f, const gguf_kv *kv)
{
    switch (kv->type) {
    case VT_GGUF_INT8: case VT_GGUF_INT16: case VT_GGUF_INT32: case VT_GGUF_INT64:
        fprintf(f, "%" PRId64, kv->v.i);
        break;
    case VT_GGUF_BOOL: fputs(kv->v.u ? "true" : "false", f); break;
    case VT_GGUF_FLOAT32: fprintf(f, "%.9g", kv->v.f); break;
    case VT_GGUF_FLOAT64: fprintf(f, "%.17g", kv->v.f); break;
    default: fprintf(f, "%" PRIu64, kv->v.u); break;
    }
}

void vt_gguf_kv_print(const vt_gguf *g, int64_t i, FILE *f)
{
    if (!g || i < 0 || i >= g->shards[0].n_kv) return;
    const gguf_kv *kv = &g->shards[0].kv[i];
    if (kv->type == VT_GGUF_STRING) {
        print_str(f, kv->str.ptr, kv->str.len, PRINT_STR_MAX);
        return;
    }
    if (kv->type != VT_GGUF_ARRAY) {
        print_scalar(f, kv);
        return;
    }
    fprintf(f, "ARRAY[%s] len=%" PRIu64 " : [", vt_gguf_type_name(kv->arr_type), kv->arr_n);
    uint64_t n = kv->arr_n < PRINT_ARR_MAX ? kv->arr_n : PRINT_ARR_MAX;
    for (uint64_t k = 0; k < n; k++) {
        if (k) fputs(", ", f);
        if (kv->arr_type == VT_GGUF_STRING) {
            print_str(f, kv->arr_str[k].ptr, kv->arr_str[k].len, 48);
        } else {
            gguf_kv tmp = {.type = kv->arr_type};
            gguf_decode_scalar(kv->arr_type,
                          (const uint8_t *)kv->arr_data + k * gguf_scalar_size(kv->arr_type), &tmp);
            print_scalar(f, &tmp);
        }
    }
    if (kv->arr_n > n) fprintf(f, ", ... (%" PRIu64 " more)", kv->arr_n - n);
    fputc(']', f);
}

/* ------------------------------------------------------------------------ */
/* Tensors                                                                   */
/* ------------------------------------------------------------------------ */

int64_t vt_gguf_n_tensors(const vt_gguf *g) { return g->n_tensors; }

const vt_gguf_tensor *vt_gguf_tensor_at(const vt_gguf *g, int64_t i)
{
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const vt_gguf_tensor *vt_gguf_find_tensor(const vt_gguf *g, const char *name)
{
    int64_t i = gguf_name_index_find(&g->tensor_index, name);
    return i < 0 ? NULL : &g->tensors[i];
}
