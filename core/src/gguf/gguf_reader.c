/*
 * gguf_reader.c - the GGUF v3 reader of the vt core (declared in vt/gguf.h).
 *
 * Format: GGUF v3 (ggml-org/ggml docs/gguf.md: layout, alignment), the type
 * geometry of ggml's type traits (vt/types.h), split models as llama.cpp's
 * src/llama-model-loader.cpp opens them, and the checks of its reader
 * (ggml/src/gguf.cpp) plus those a hostile file needs.
 *
 * Parsing reads the header region with pread through a small buffer; every
 * count, length and offset is checked against the bytes left in the file
 * BEFORE anything is allocated for it, so a huge count in a small file is
 * refused, never malloc-ed. A refusal is VT_ERR_FORMAT with a message of the
 * form "<file>: <where>: <what>" (where = header, metadata key #i 'key',
 * tensor 'name'). After parsing, each shard is mmap-ed read-only
 * (PROT_READ, MAP_PRIVATE) unless VT_GGUF_NO_MMAP is given.
 *
 * Not here: metadata values and their checks (gguf_value.c), the accessors
 * of an open file (gguf_access.c), the writer
 * (gguf_writer.c), `vt info` printing (gguf_info.c) and the SIGBUS report over
 * the mappings (gguf_guard.c).
 */
#include "vt/gguf.h"
#include "gguf_guard.h"
#include "gguf_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"
#include "vt/bytes.h"
#include "vt/types.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_MAX_STRING ((uint64_t)1 << 30)   /* bytes of one string (llama.cpp's cap) */
#define GGUF_MAX_KEY ((uint64_t)65535)          /* bytes of one key (gguf.md §2.1) */
#define GGUF_MAX_ARRAY ((uint64_t)1 << 30)    /* elements of one array (llama.cpp's cap) */
#define GGUF_MAX_NAME 64u              /* tensor name bytes incl. NUL (GGML_MAX_NAME) */
#define GGUF_MAX_DIMS 4u
#define GGUF_MAX_SHARDS 99999u         /* the 5-digit split file naming (§5) */
#define RD_BUF_SIZE (256u * 1024u)

/* ------------------------------------------------------------------------ */
/* Buffered pread reader with field context for error messages               */
/* ------------------------------------------------------------------------ */

enum { CTX_HEADER, CTX_KV, CTX_TENSOR };

typedef struct reader {
    const char *path;
    int fd;
    uint64_t size;
    uint64_t pos;
    uint8_t *buf;
    uint64_t buf_off; /* file offset of buf[0] */
    size_t buf_len;
    /* where we are, for messages */
    int ctx;
    int64_t ctx_i;
    const char *ctx_name;
} reader;

static void ctx_where(const reader *r, char *out, size_t n)
{
    switch (r->ctx) {
    case CTX_KV:
        if (r->ctx_name)
            snprintf(out, n, "metadata key #%" PRId64 " '%s'", r->ctx_i, r->ctx_name);
        else
            snprintf(out, n, "metadata key #%" PRId64, r->ctx_i);
        break;
    case CTX_TENSOR:
        if (r->ctx_name)
            snprintf(out, n, "tensor '%s'", r->ctx_name);
        else
            snprintf(out, n, "tensor info #%" PRId64, r->ctx_i);
        break;
    default:
        snprintf(out, n, "header");
        break;
    }
}

/* Set "<file>: <where>: <message>" and return VT_ERR_FORMAT. */
static vt_status VT_PRINTF(2, 3) rd_fail(const reader *r, const char *fmt, ...)
{
    char where[256], msg[768];
    ctx_where(r, where, sizeof where);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    vt_set_error("%s: %s: %s", r->path, where, msg);
    return VT_ERR_FORMAT;
}

/* Set "<file>: <where>: out of memory: <what> (<size>)" and return VT_ERR_OUT_OF_MEMORY. */
static vt_status VT_PRINTF(3, 4) rd_oom(const reader *r, uint64_t bytes, const char *fmt, ...)
{
    char where[256], what[512];
    ctx_where(r, where, sizeof where);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    vt_set_error_oom(bytes, "%s", what);
    vt_error_prefix("%s: %s", r->path, where);
    return VT_ERR_OUT_OF_MEMORY;
}

static uint64_t rd_left(const reader *r) { return r->size - r->pos; }

/* Read n bytes of `what` at the cursor; refuses reads past the end of the file. */
static vt_status rd_bytes(reader *r, void *dst, uint64_t n, const char *what)
{
    if (n > rd_left(r))
        return rd_fail(r, "file truncated: %s needs %" PRIu64 " bytes at offset %" PRIu64
                          " but the file has %" PRIu64 " bytes",
                       what, n, r->pos, r->size);
    uint8_t *d = dst;
    while (n > 0) {
        if (r->pos >= r->buf_off && r->pos < r->buf_off + r->buf_len) {
            size_t k = (size_t)(r->buf_off + r->buf_len - r->pos);
            if (k > n) k = (size_t)n;
            memcpy(d, r->buf + (r->pos - r->buf_off), k);
            d += k;
            r->pos += k;
            n -= k;
            continue;
        }
        if (n >= RD_BUF_SIZE) { /* large: straight into the destination */
            ssize_t got = pread(r->fd, d, (size_t)n, (off_t)r->pos);
            if (got <= 0) {
                vt_set_error("%s: read of %" PRIu64 " bytes at offset %" PRIu64 " failed: %s",
                             r->path, n, r->pos, got < 0 ? strerror(errno) : "end of file");
                return VT_ERR_IO;
            }
            d += got;
            r->pos += (uint64_t)got;
            n -= (uint64_t)got;
            continue;
        }
        uint64_t want = r->size - r->pos;
        if (want > RD_BUF_SIZE) want = RD_BUF_SIZE;
        ssize_t got = pread(r->fd, r->buf, (size_t)want, (off_t)r->pos);
        if (got <= 0) {
            vt_set_error("%s: read of %" PRIu64 " bytes at offset %" PRIu64 " failed: %s", r->path,
                         want, r->pos, got < 0 ? strerror(errno) : "end of file");
            return VT_ERR_IO;
        }
        r->buf_off = r->pos;
        r->buf_len = (size_t)got;
    }
    return VT_OK;
}

static vt_status rd_u32(reader *r, uint32_t *v, const char *what)
{
    uint8_t b[4];
    vt_status st = rd_bytes(r, b, 4, what);
    if (st) return st;
    *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    return VT_OK;
}

static vt_status rd_u64(reader *r, uint64_t *v, const char *what)
{
    uint8_t b[8];
    vt_status st = rd_bytes(r, b, 8, what);
    if (st) return st;
    uint64_t x = 0;
    for (int i = 7; i >= 0; i--) x = x << 8 | b[i];
    *v = x;
    return VT_OK;
}

/* A string: u64 length + bytes; a NUL-terminated malloc-ed copy in *out.
 * max caps the length (beyond the bytes left in the file). */
static vt_status rd_string(reader *r, vt_gguf_str *out, char **owned, uint64_t max,
                           const char *what)
{
    uint64_t len;
    char lw[96];
    snprintf(lw, sizeof lw, "%s length", what);
    vt_status st = rd_u64(r, &len, lw);
    if (st) return st;
    if (len > max)
        return rd_fail(r, "%s length %" PRIu64 " exceeds the limit of %" PRIu64 " bytes", what,
                       len, max);
    if (len > rd_left(r))
        return rd_fail(r, "%s length %" PRIu64 " exceeds file size (%" PRIu64
                          " bytes left at offset %" PRIu64 ")",
                       what, len, rd_left(r), r->pos);
    char *s = malloc((size_t)len + 1);
    if (!s) return rd_oom(r, len + 1, "%s", what);
    st = rd_bytes(r, s, len, what);
    if (st) {
        free(s);
        return st;
    }
    s[len] = '\0';
    out->ptr = s;
    out->len = len;
    *owned = s;
    return VT_OK;
}

/* ------------------------------------------------------------------------ */
/* Metadata                                                                  */
/* ------------------------------------------------------------------------ */

static void kv_free(gguf_kv *kv)
{
    free(kv->key);
    if (kv->type == VT_GGUF_STRING) free((char *)kv->str.ptr);
    free(kv->arr_data);
    free(kv->arr_str);
    free(kv->arr_chars);
}

static vt_status read_array(reader *r, gguf_kv *kv)
{
    uint32_t et;
    vt_status st = rd_u32(r, &et, "array element type");
    if (st) return st;
    if (et == VT_GGUF_ARRAY) return rd_fail(r, "nested array (array element type ARRAY) is not supported");
    if (et >= VT_GGUF_TYPE_COUNT)
        return rd_fail(r, "array element type %" PRIu32 " is not a GGUF value type", et);
    uint64_t n;
    st = rd_u64(r, &n, "array count");
    if (st) return st;
    kv->arr_type = (vt_gguf_type)et;
    if (n > GGUF_MAX_ARRAY)
        return rd_fail(r, "array count %" PRIu64 " exceeds the limit of %" PRIu64 " elements", n,
                       GGUF_MAX_ARRAY);
    if (et == VT_GGUF_STRING) {
        /* each element needs at least its 8-byte length */
        if (n > rd_left(r) / 8)
            return rd_fail(r, "array count %" PRIu64 " of STRING elements exceeds file size (%" PRIu64
                              " bytes left)",
                           n, rd_left(r));
        uint64_t cap = 4096, used = 0;
        if (!(kv->arr_str = calloc(n ? n : 1, sizeof *kv->arr_str)))
            return rd_oom(r, (n ? n : 1) * sizeof *kv->arr_str,
                          "string array of %" PRIu64 " elements", n);
        uint64_t *offs = malloc((n ? n : 1) * sizeof *offs);
        if (!offs)
            return rd_oom(r, (n ? n : 1) * sizeof *offs,
                          "offsets of a string array of %" PRIu64 " elements", n);
        char *chars = malloc(cap);
        if (!chars) {
            free(offs);
            return rd_oom(r, cap, "characters of a string array of %" PRIu64 " elements", n);
        }
        for (uint64_t i = 0; i < n; i++) {
            uint64_t len;
            st = rd_u64(r, &len, "array string length");
            if (st) goto str_fail;
            if (len > GGUF_MAX_STRING || len > rd_left(r)) {
                st = rd_fail(r, "array element %" PRIu64 ": string length %" PRIu64
                                " exceeds file size (%" PRIu64 " bytes left)",
                             i, len, rd_left(r));
                goto str_fail;
            }
            if (used + len + 1 > cap) {
                while (used + len + 1 > cap) cap *= 2;
                char *nc = realloc(chars, cap);
                if (!nc) {
                    st = rd_oom(r, cap, "characters of a string array of %" PRIu64 " elements",
                                n);
                    goto str_fail;
                }
                chars = nc;
            }
            st = rd_bytes(r, chars + used, len, "array string");
            if (st) goto str_fail;
            chars[used + len] = '\0';
            offs[i] = used;
            kv->arr_str[i].len = len;
            used += len + 1;
        }
        for (uint64_t i = 0; i < n; i++) kv->arr_str[i].ptr = chars + offs[i];
        free(offs);
        kv->arr_chars = chars;
        kv->arr_n = n;
        return VT_OK;
    str_fail:
        free(offs);
        free(chars);
        return st;
    }
    uint32_t es = gguf_scalar_size((vt_gguf_type)et);
    if (n > rd_left(r) / es)
        return rd_fail(r, "array count %" PRIu64 " of %s elements (%" PRIu64
                          " bytes) exceeds file size (%" PRIu64 " bytes left)",
                       n, vt_gguf_type_name((vt_gguf_type)et), n * es, rd_left(r));
    kv->arr_data = malloc(n > 0 ? (size_t)(n * es) : 1);
    if (!kv->arr_data)
        return rd_oom(r, n * es, "array of %" PRIu64 " %s elements", n,
                      vt_gguf_type_name((vt_gguf_type)et));
    st = rd_bytes(r, kv->arr_data, n * es, "array data");
    if (st) return st;
    kv->arr_n = n;
    return VT_OK;
}

static vt_status read_kv(reader *r, gguf_kv *kv)
{
    vt_gguf_str key;
    vt_status st = rd_string(r, &key, &kv->key, GGUF_MAX_KEY, "key");
    if (st) return st;
    r->ctx_name = kv->key;
    if (key.len == 0) return rd_fail(r, "key is empty");
    if (strlen(kv->key) != key.len) return rd_fail(r, "key contains a NUL byte");
    uint32_t t;
    st = rd_u32(r, &t, "value type");
    if (st) return st;
    if (t >= VT_GGUF_TYPE_COUNT)
        return rd_fail(r, "value type %" PRIu32 " is not a GGUF value type (0..12)", t);
    kv->type = (vt_gguf_type)t;
    if (t == VT_GGUF_STRING) {
        char *owned = NULL;
        st = rd_string(r, &kv->str, &owned, GGUF_MAX_STRING, "string");
        if (st) kv->type = VT_GGUF_UINT8; /* nothing owned in str */
        return st;
    }
    if (t == VT_GGUF_ARRAY) return read_array(r, kv);
    uint8_t b[8];
    st = rd_bytes(r, b, gguf_scalar_size(kv->type), "value");
    if (st) return st;
    gguf_decode_scalar(kv->type, b, kv);
    return VT_OK;
}

/* ------------------------------------------------------------------------ */
/* Typed metadata during open                                                */
/* ------------------------------------------------------------------------ */

/* Optional unsigned integer key of a shard (during open). *found = 0 if absent. */
static vt_status shard_get_uint(const gguf_shard *s, const char *key, uint64_t hi, uint64_t *v,
                                int *found)
{
    const gguf_kv *kv = gguf_shard_kv(s, key);
    *found = kv != NULL;
    if (!kv) return VT_OK;
    return gguf_kv_int(s->path, kv, 0, hi, NULL, v);
}

/* ------------------------------------------------------------------------ */
/* Tensor infos                                                              */
/* ------------------------------------------------------------------------ */

static vt_status tensors_grow(vt_gguf *g, uint64_t more)
{
    uint64_t need = (uint64_t)g->n_tensors + more;
    if (need <= (uint64_t)g->cap_tensors) return VT_OK;
    vt_gguf_tensor *t = realloc(g->tensors, need * sizeof *t);
    if (!t) goto oom;
    g->tensors = t;
    char **n = realloc(g->tensor_names, need * sizeof *n);
    if (!n) goto oom;
    g->tensor_names = n;
    g->cap_tensors = (int64_t)need;
    return VT_OK;
oom:
    vt_set_error_oom(need * (t ? sizeof *n : sizeof *t), "table of %" PRIu64 " tensors%s", need,
                     t ? " (names)" : "");
    return VT_ERR_OUT_OF_MEMORY;
}

static vt_status read_tensor_info(reader *r, vt_gguf *g, uint32_t shard, int64_t idx)
{
    vt_gguf_tensor *t = &g->tensors[idx];
    memset(t, 0, sizeof *t);
    t->ne[0] = t->ne[1] = t->ne[2] = t->ne[3] = 1;
    t->shard = shard;
    vt_gguf_str name;
    char *owned = NULL;
    vt_status st = rd_string(r, &name, &owned, GGUF_MAX_STRING, "tensor name");
    if (st) return st;
    g->tensor_names[idx] = owned;
    t->name = owned;
    g->n_tensors = idx + 1; /* owned name is now freed by close */
    r->ctx_name = owned;
    if (name.len == 0) return rd_fail(r, "tensor name is empty");
    if (name.len >= GGUF_MAX_NAME)
        return rd_fail(r, "name length %" PRIu64 " exceeds %u bytes (including the NUL)",
                       name.len + 1, GGUF_MAX_NAME);
    if (strlen(owned) != name.len) return rd_fail(r, "name contains a NUL byte");
    st = rd_u32(r, &t->n_dims, "n_dims");
    if (st) return st;
    if (t->n_dims > GGUF_MAX_DIMS)
        return rd_fail(r, "n_dims = %" PRIu32 " exceeds %u", t->n_dims, GGUF_MAX_DIMS);
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t ne;
        char what[16];
        snprintf(what, sizeof what, "ne[%u]", d);
        st = rd_u64(r, &ne, what);
        if (st) return st;
        if (ne > (uint64_t)INT64_MAX)
            return rd_fail(r, "ne[%u] = %" PRIu64 " is negative as int64 (overflows int64)", d, ne);
        t->ne[d] = (int64_t)ne;
    }
    st = rd_u32(r, &t->type, "type");
    if (st) return st;
    vt_type_traits tr = vt_type_traits_of(t->type);
    if (tr.block_size == 0)
        return rd_fail(r, "type %" PRIu32 " is not a known ggml tensor type", t->type);
    st = rd_u64(r, &t->offset, "offset");
    if (st) return st;
    if ((uint64_t)t->ne[0] % tr.block_size)
        return rd_fail(r, "ne[0] = %" PRId64 " is not a multiple of the %s block size %" PRIu32,
                       t->ne[0], tr.name, tr.block_size);
    /* element count and bytes, overflow-checked in 64 bits */
    uint64_t n_el = 1;
    for (int d = 0; d < 4; d++) {
        if (__builtin_mul_overflow(n_el, (uint64_t)t->ne[d], &n_el) || n_el > (uint64_t)INT64_MAX)
            return rd_fail(r, "ne[%d] = %" PRId64 " overflows: element count exceeds 2^63", d,
                           t->ne[d]);
    }
    uint64_t nb = (uint64_t)t->ne[0] / tr.block_size * tr.type_size;
    for (int d = 1; d < 4; d++) {
        if (__builtin_mul_overflow(nb, (uint64_t)t->ne[d], &nb))
            return rd_fail(r, "ne[%d] = %" PRId64 " overflows: byte size exceeds 2^64", d,
                           t->ne[d]);
    }
    t->nbytes = nb;
    return VT_OK;
}

/* Sort key for the overlap check: one tensor's byte range in its shard. */
typedef struct span {
    uint64_t offset, nbytes;
    int64_t idx;
} span;

static int cmp_span(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Offsets: aligned, in bounds, not overlapping (gguf.md §2.2-2.3). */
static vt_status check_tensor_offsets(reader *r, vt_gguf *g, gguf_shard *s, int64_t first,
                                      int64_t n)
{
    for (int64_t i = first; i < first + n; i++) {
        vt_gguf_tensor *t = &g->tensors[i];
        r->ctx = CTX_TENSOR;
        r->ctx_name = t->name;
        if (t->offset % s->alignment)
            return rd_fail(r, "offset %" PRIu64 " is not a multiple of the alignment %" PRIu32,
                           t->offset, s->alignment);
        uint64_t end;
        if (__builtin_add_overflow(s->data_start, t->offset, &t->file_offset) ||
            __builtin_add_overflow(t->file_offset, t->nbytes, &end) || end > s->size)
            return rd_fail(r, "offset %" PRIu64 " + %" PRIu64 " bytes is past the end of the file"
                              " (data section starts at %" PRIu64 ", file has %" PRIu64 " bytes)",
                           t->offset, t->nbytes, s->data_start, s->size);
    }
    if (n < 2) return VT_OK;
    span *order = malloc((size_t)n * sizeof *order);
    if (!order) {
        vt_set_error_oom((uint64_t)n * sizeof *order, "offset order of %" PRId64 " tensors", n);
        vt_error_prefix("%s", s->path);
        return VT_ERR_OUT_OF_MEMORY;
    }
    for (int64_t i = 0; i < n; i++)
        order[i] = (span){g->tensors[first + i].offset, g->tensors[first + i].nbytes, first + i};
    qsort(order, (size_t)n, sizeof *order, cmp_span);
    vt_status st = VT_OK;
    /* sweep in offset order: a non-empty tensor must start at or after the end of
     * every earlier one (empty tensors occupy nothing) */
    const vt_gguf_tensor *last = NULL; /* the tensor reaching furthest so far */
    for (int64_t i = 0; i < n; i++) {
        const vt_gguf_tensor *b = &g->tensors[order[i].idx];
        if (!b->nbytes) continue;
        if (last && last->offset + last->nbytes > b->offset) {
            r->ctx = CTX_TENSOR;
            r->ctx_name = b->name;
            st = rd_fail(r, "offset %" PRIu64 " overlaps tensor '%s' (offset %" PRIu64 ", %" PRIu64
                            " bytes)",
                         b->offset, last->name, last->offset, last->nbytes);
            break;
        }
        if (!last || b->offset + b->nbytes > last->offset + last->nbytes) last = b;
    }
    free(order);
    return st;
}

/* ------------------------------------------------------------------------ */
/* One file                                                                  */
/* ------------------------------------------------------------------------ */

static void shard_free(gguf_shard *s)
{
    if (s->map) {
        vt_gguf_guard_remove(s->map);
        munmap(s->map, (size_t)s->size);
    }
    if (s->fd >= 0) close(s->fd);
    for (int64_t i = 0; i < s->n_kv; i++) kv_free(&s->kv[i]);
    free(s->kv);
    gguf_name_index_free(&s->kv_index);
    free(s->path);
    memset(s, 0, sizeof *s);
    s->fd = -1;
}

/* Parse one GGUF file into shard s; its tensors are appended to g. */
static vt_status parse_file(vt_gguf *g, gguf_shard *s, uint32_t shard_no)
{
    reader r = {.path = s->path, .fd = -1, .ctx = CTX_HEADER};
    /* O_NONBLOCK: opening a FIFO for reading would wait for a writer; the
     * type is checked on the descriptor, then the flag dropped */
    s->fd = open(s->path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (s->fd < 0) {
        vt_set_error("%s: cannot open: %s", s->path, strerror(errno));
        return errno == ENOENT ? VT_ERR_NOT_FOUND : VT_ERR_IO;
    }
    struct stat sb;
    if (fstat(s->fd, &sb) != 0) {
        vt_set_error("%s: fstat failed: %s", s->path, strerror(errno));
        return VT_ERR_IO;
    }
    if (!S_ISREG(sb.st_mode)) {
        vt_set_error("%s: %s, not a regular file", s->path, vt_file_type_name(sb.st_mode));
        return VT_ERR_IO;
    }
    int fl = fcntl(s->fd, F_GETFL);
    if (fl != -1) (void)fcntl(s->fd, F_SETFL, fl & ~O_NONBLOCK);
    s->size = (uint64_t)sb.st_size;
    s->mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
    r.fd = s->fd;
    r.size = s->size;
    r.buf = malloc(RD_BUF_SIZE);
    if (!r.buf) {
        vt_set_error_oom(RD_BUF_SIZE, "read buffer");
        vt_error_prefix("%s", s->path);
        return VT_ERR_OUT_OF_MEMORY;
    }
    vt_status st;
    uint8_t magic[4];
    if ((st = rd_bytes(&r, magic, 4, "magic"))) goto out;
    if (memcmp(magic, GGUF_MAGIC, 4)) {
        st = rd_fail(&r, "magic %02x %02x %02x %02x is not 'GGUF': not a GGUF file", magic[0],
                     magic[1], magic[2], magic[3]);
        goto out;
    }
    if ((st = rd_u32(&r, &s->version, "version"))) goto out;
    if (s->version != 0 && (s->version & 0xFFFFu) == 0) {
        st = rd_fail(&r, "version 0x%08" PRIx32 " is byte-swapped: a big-endian GGUF file "
                         "(host/model endianness mismatch) is not supported",
                     s->version);
        goto out;
    }
    if (s->version != 2 && s->version != 3) {
        st = rd_fail(&r, "version %" PRIu32 " is not supported (only GGUF v2 and v3)", s->version);
        goto out;
    }
    uint64_t n_tensors, n_kv;
    if ((st = rd_u64(&r, &n_tensors, "n_tensors"))) goto out;
    if ((st = rd_u64(&r, &n_kv, "n_kv"))) goto out;
    /* a tensor info is at least 8 (name len) + 1 + 4 (n_dims) + 4 (type) + 8 (offset) bytes,
     * a metadata entry at least 8 (key len) + 1 + 4 (type) + 1 (value) bytes */
    if (n_tensors > rd_left(&r) / 25) {
        st = rd_fail(&r, "n_tensors = %" PRIu64 " exceeds what the file size (%" PRIu64
                         " bytes) can hold",
                     n_tensors, r.size);
        goto out;
    }
    if (n_kv > rd_left(&r) / 14) {
        st = rd_fail(&r, "n_kv = %" PRIu64 " exceeds what the file size (%" PRIu64
                         " bytes) can hold",
                     n_kv, r.size);
        goto out;
    }
    /* the tables grow as entries are read (doubling, up to the count the
     * header promised), so a header that lies costs only what the bytes
     * actually read hold, never an allocation sized from its counts */
    uint64_t kv_cap = n_kv < 64 ? (n_kv ? n_kv : 1) : 64;
    s->kv = calloc(kv_cap, sizeof *s->kv);
    if (!s->kv)
        vt_set_error_oom(kv_cap * sizeof *s->kv, "table of %" PRIu64 " metadata entries", kv_cap);
    if (!s->kv || !gguf_name_index_reserve(&s->kv_index, kv_cap)) { /* the latter sets its message */
        vt_error_prefix("%s", s->path);
        st = VT_ERR_OUT_OF_MEMORY;
        goto out;
    }
    r.ctx = CTX_KV;
    for (uint64_t i = 0; i < n_kv; i++) {
        r.ctx_i = (int64_t)i;
        r.ctx_name = NULL;
        if (i == kv_cap) {
            uint64_t nc = kv_cap * 2 < n_kv ? kv_cap * 2 : n_kv;
            gguf_kv *nk = realloc(s->kv, nc * sizeof *s->kv);
            if (!nk || !gguf_name_index_reserve(&s->kv_index, nc)) {
                if (nk) s->kv = nk;
                else vt_set_error_oom(nc * sizeof *s->kv, "table of %" PRIu64 " metadata entries", nc);
                vt_error_prefix("%s", s->path);
                st = VT_ERR_OUT_OF_MEMORY;
                goto out;
            }
            memset(nk + kv_cap, 0, (nc - kv_cap) * sizeof *nk);
            s->kv = nk;
            kv_cap = nc;
        }
        s->n_kv = (int64_t)i + 1; /* entry i is freed by shard_free even if half read */
        if ((st = read_kv(&r, &s->kv[i]))) goto out;
        int64_t dup = gguf_name_index_insert(&s->kv_index, s->kv[i].key, (int64_t)i);
        if (dup >= 0) {
            st = rd_fail(&r, "duplicate key (first at #%" PRId64 ")", dup);
            goto out;
        }
    }
    /* alignment (§1) */
    r.ctx = CTX_HEADER;
    s->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *akv = gguf_shard_kv(s, "general.alignment");
    if (akv) {
        uint64_t a;
        r.ctx = CTX_KV;
        r.ctx_i = akv - s->kv;
        r.ctx_name = akv->key;
        if (!gguf_is_int_type(akv->type) || akv->type == VT_GGUF_BOOL) {
            st = rd_fail(&r, "alignment has type %s, expected UINT32",
                         vt_gguf_type_name(akv->type));
            goto out;
        }
        if (gguf_kv_int(s->path, akv, 0, UINT32_MAX, NULL, &a)) {
            st = rd_fail(&r, "alignment is out of range (must be a power of two < 2^32)");
            goto out;
        }
        if (a == 0 || (a & (a - 1))) {
            st = rd_fail(&r, "alignment = %" PRIu64 " is not a non-zero power of two", a);
            goto out;
        }
        s->alignment = (uint32_t)a;
    }
    /* tensor infos (the table grows as they are read, as above) */
    int64_t first = g->n_tensors;
    r.ctx = CTX_TENSOR;
    for (uint64_t i = 0; i < n_tensors; i++) {
        r.ctx_i = (int64_t)i;
        r.ctx_name = NULL;
        if (g->n_tensors >= g->cap_tensors) { /* g->n_tensors == first + i here */
            uint64_t left = n_tensors - i, more = g->cap_tensors > 64 ? (uint64_t)g->cap_tensors : 64;
            if ((st = tensors_grow(g, more < left ? more : left))) {
                vt_error_prefix("%s", s->path);
                goto out;
            }
        }
        if ((st = read_tensor_info(&r, g, shard_no, first + (int64_t)i))) goto out;
    }
    /* data section */
    uint64_t pad = (s->alignment - r.pos % s->alignment) % s->alignment;
    s->data_start = r.pos + pad;
    if (n_tensors > 0 && s->data_start > s->size) {
        r.ctx = CTX_HEADER;
        st = rd_fail(&r, "file truncated: data section at offset %" PRIu64 " (alignment %" PRIu32
                         ") is past the end of the file (%" PRIu64 " bytes)",
                     s->data_start, s->alignment, s->size);
        goto out;
    }
    st = check_tensor_offsets(&r, g, s, first, (int64_t)n_tensors);
out:
    free(r.buf);
    return st;
}

vt_status vt_gguf_release_pages(const vt_gguf *g, const vt_gguf_tensor *t)
{
    if (!g || !t || t < g->tensors || t >= g->tensors + g->n_tensors || !t->data) {
        vt_set_error("gguf_release_pages: %s", !g || !t ? "NULL argument"
                     : !t->data ? "the tensor is not mapped" : "not a tensor of this file");
        return VT_ERR_INVALID_ARG;
    }
    long pg = sysconf(_SC_PAGESIZE);
    const uint64_t page = pg > 0 ? (uint64_t)pg : 4096;
    const uintptr_t a = (uintptr_t)t->data, b = a + (uintptr_t)t->nbytes;
    const uintptr_t lo = (a + page - 1) / page * page, hi = b / page * page;
    if (hi <= lo) return VT_OK; /* no whole page of its own */
    if (madvise((void *)lo, (size_t)(hi - lo), MADV_DONTNEED) != 0) {
        vt_set_error("gguf_release_pages: madvise of tensor '%s' (%" PRIu64 " bytes) failed: %s",
                     t->name, (uint64_t)(hi - lo), strerror(errno));
        return VT_ERR_IO;
    }
    return VT_OK;
}

/* Map a parsed shard and point its tensors at the mapping. */
static vt_status map_shard(vt_gguf *g, gguf_shard *s, uint32_t shard_no)
{
    if (s->size == 0) return VT_OK;
    if ((uint64_t)(size_t)s->size != s->size) {
        vt_set_error("%s: %" PRIu64 " bytes do not fit the address space", s->path, s->size);
        return VT_ERR_IO;
    }
    void *m = mmap(NULL, (size_t)s->size, PROT_READ, MAP_PRIVATE, s->fd, 0);
    if (m == MAP_FAILED) {
        char human[48];
        vt_set_error("%s: mmap of %s (%" PRIu64 " bytes) failed: %s", s->path,
                     vt_format_bytes(s->size, 1, human, sizeof human), s->size,
                     strerror(errno));
        return VT_ERR_IO;
    }
    s->map = m;
    vt_gguf_guard_add(m, s->size, g, shard_no, s->path);
    for (int64_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].shard == shard_no)
            g->tensors[i].data = (const uint8_t *)m + g->tensors[i].file_offset;
    return VT_OK;
}

/* ------------------------------------------------------------------------ */
/* Splits (§5)                                                               */
/* ------------------------------------------------------------------------ */

/* If path ends in "-NNNNN-of-MMMMM.gguf", the length of its prefix; else -1. */
static long split_prefix_len(const char *path, unsigned *no, unsigned *count)
{
    size_t n = strlen(path);
    const size_t suffix = strlen("-00001-of-00001.gguf");
    if (n < suffix) return -1;
    const char *p = path + n - suffix;
    unsigned a, b;
    char tail[8];
    if (p[0] != '-' || p[6] != '-' || p[7] != 'o' || p[8] != 'f' || p[9] != '-') return -1;
    for (int i = 1; i <= 5; i++)
        if (p[i] < '0' || p[i] > '9' || p[9 + i] < '0' || p[9 + i] > '9') return -1;
    if (sscanf(p, "-%5u-of-%5u%7s", &a, &b, tail) != 3 || strcmp(tail, ".gguf")) return -1;
    if (no) *no = a;
    if (count) *count = b;
    return (long)(n - suffix);
}

static char *shard_name(const char *path, long prefix_len, unsigned k1, unsigned count)
{
    size_t n = (size_t)prefix_len + 32;
    char *s = malloc(n);
    if (!s) return NULL;
    snprintf(s, n, "%.*s-%05u-of-%05u.gguf", (int)prefix_len, path, k1, count);
    return s;
}

static vt_status open_splits(vt_gguf *g, uint64_t count, uint32_t flags, vt_gguf_progress_fn fn,
                             void *user)
{
    gguf_shard *s0 = &g->shards[0];
    long plen = split_prefix_len(s0->path, NULL, NULL);
    if (plen < 0) {
        vt_set_error("%s: split.count = %" PRIu64 " but the file name does not end in "
                     "'-00001-of-%05" PRIu64 ".gguf', so the other shards cannot be found",
                     s0->path, count, count);
        return VT_ERR_FORMAT;
    }
    uint64_t total = 0;
    int found;
    vt_status st = shard_get_uint(s0, "split.tensors.count", INT64_MAX, &total, &found);
    if (st) return st;
    if (!found) {
        vt_set_error("%s: split.count = %" PRIu64 " but key split.tensors.count is missing",
                     s0->path, count);
        return VT_ERR_FORMAT;
    }
    gguf_shard *sh = realloc(g->shards, count * sizeof *sh);
    if (!sh) {
        vt_set_error_oom(count * sizeof *sh, "table of %" PRIu64 " shards of %s", count,
                         s0->path);
        return VT_ERR_OUT_OF_MEMORY;
    }
    g->shards = sh;
    s0 = &g->shards[0]; /* the array moved */
    if (fn) fn(user, 1, count);
    for (uint64_t k = 1; k < count; k++) {
        gguf_shard *s = &g->shards[k];
        memset(s, 0, sizeof *s);
        s->fd = -1;
        g->n_shards = (uint32_t)k + 1;
        s->path = shard_name(g->shards[0].path, plen, (unsigned)k + 1, (unsigned)count);
        if (!s->path) {
            vt_set_error_oom((uint64_t)plen + 32, "path of shard %" PRIu64 " of %s", k + 1,
                             g->shards[0].path);
            return VT_ERR_OUT_OF_MEMORY;
        }
        if ((st = parse_file(g, s, (uint32_t)k))) {
            if (st == VT_ERR_NOT_FOUND)
                vt_error_prefix("shard %" PRIu64 " of %" PRIu64 " of %s", k + 1, count,
                                g->shards[0].path);
            return st;
        }
        uint64_t no = 0, cnt = 0;
        if ((st = shard_get_uint(s, "split.no", UINT16_MAX, &no, &found))) return st;
        if (!found || no != k) {
            vt_set_error("%s: split.no is %s%" PRIu64 ", expected %" PRIu64 " (shard %" PRIu64
                         " of %" PRIu64 ")",
                         s->path, found ? "" : "missing, ", no, k, k + 1, count);
            return VT_ERR_FORMAT;
        }
        if ((st = shard_get_uint(s, "split.count", UINT16_MAX, &cnt, &found))) return st;
        if (!found || cnt != count) {
            vt_set_error("%s: split.count is %s%" PRIu64 ", expected %" PRIu64
                         " as in the first shard",
                         s->path, found ? "" : "missing, ", cnt, count);
            return VT_ERR_FORMAT;
        }
        if (!(flags & VT_GGUF_NO_MMAP) && (st = map_shard(g, s, (uint32_t)k))) return st;
        if (fn) fn(user, k + 1, count);
    }
    if ((uint64_t)g->n_tensors != total) {
        vt_set_error("%s: split.tensors.count = %" PRIu64 " but the %" PRIu64
                     " shards hold %" PRId64 " tensors",
                     s0->path, total, count, g->n_tensors);
        return VT_ERR_FORMAT;
    }
    return VT_OK;
}

/* ------------------------------------------------------------------------ */
/* Open / close                                                              */
/* ------------------------------------------------------------------------ */

static vt_status build_tensor_index(vt_gguf *g)
{
    if (!gguf_name_index_reserve(&g->tensor_index, (uint64_t)g->n_tensors)) {
        vt_error_prefix("tensor index of %s", g->shards[0].path);
        return VT_ERR_OUT_OF_MEMORY;
    }
    for (int64_t i = 0; i < g->n_tensors; i++) {
        int64_t dup = gguf_name_index_insert(&g->tensor_index, g->tensors[i].name, i);
        if (dup >= 0) {
            const vt_gguf_tensor *a = &g->tensors[dup], *b = &g->tensors[i];
            if (a->shard == b->shard)
                vt_set_error("%s: tensor '%s': duplicate tensor name", g->shards[b->shard].path,
                             b->name);
            else
                vt_set_error("%s: tensor '%s': duplicate tensor name (also in shard %" PRIu32
                             ", %s)",
                             g->shards[b->shard].path, b->name, a->shard + 1,
                             g->shards[a->shard].path);
            return VT_ERR_FORMAT;
        }
    }
    return VT_OK;
}

vt_status vt_gguf_open(const char *path, uint32_t flags, vt_gguf **out)
{
    return vt_gguf_open_progress(path, flags, NULL, NULL, out);
}

vt_status vt_gguf_open_progress(const char *path, uint32_t flags, vt_gguf_progress_fn fn,
                                void *user, vt_gguf **out)
{
    if (!out || !path) {
        vt_set_error("vt_gguf_open: path and out are required");
        return VT_ERR_INVALID_ARG;
    }
    *out = NULL;
    vt_gguf *g = vt_calloc_named(1, sizeof *g, "GGUF handle");
    if (!g || !(g->shards = vt_calloc_named(1, sizeof *g->shards, "GGUF shard table"))) {
        free(g);
        vt_error_prefix("opening %s", path);
        return VT_ERR_OUT_OF_MEMORY;
    }
    g->n_shards = 1;
    gguf_shard *s0 = &g->shards[0];
    s0->fd = -1;
    vt_status st = VT_OK;
    if (!(s0->path = vt_strdup_named(path, "GGUF path"))) {
        vt_error_prefix("opening %s", path);
        st = VT_ERR_OUT_OF_MEMORY;
        goto fail;
    }
    if ((st = parse_file(g, s0, 0))) goto fail;
    if (!(flags & VT_GGUF_NO_MMAP) && (st = map_shard(g, s0, 0))) goto fail;
    uint64_t count = 1, no = 0;
    int found_count = 0, found_no = 0;
    if (!(flags & VT_GGUF_SINGLE_FILE)) {
        if ((st = shard_get_uint(s0, "split.count", GGUF_MAX_SHARDS, &count, &found_count)))
            goto fail;
        if ((st = shard_get_uint(s0, "split.no", GGUF_MAX_SHARDS, &no, &found_no))) goto fail;
        if (!found_count) count = 1;
    }
    if (count > 1) {
        if (no >= count) {
            vt_set_error("%s: split.no = %" PRIu64 " is not below split.count = %" PRIu64, path, no,
                         count);
            st = VT_ERR_FORMAT;
            goto fail;
        }
        if (no != 0) {
            long plen = split_prefix_len(path, NULL, NULL);
            char *first = plen >= 0 ? shard_name(path, plen, 1, (unsigned)count) : NULL;
            const char *base = first ? strrchr(first, '/') : NULL;
            vt_set_error("%s is shard %" PRIu64 " of %" PRIu64 " of a split model; open the "
                         "first shard %s",
                         path, no + 1, count,
                         first ? (base ? base + 1 : first) : "(split.no = 0, -00001-of-...)");
            free(first);
            st = VT_ERR_FORMAT;
            goto fail;
        }
        if ((st = open_splits(g, count, flags, fn, user))) goto fail;
    }
    if ((st = build_tensor_index(g))) goto fail;
    *out = g;
    return VT_OK;
fail:
    vt_gguf_close(g);
    return st;
}

vt_status vt_gguf_map(vt_gguf *g)
{
    for (uint32_t k = 0; k < g->n_shards; k++) {
        if (g->shards[k].map) continue;
        vt_status st = map_shard(g, &g->shards[k], k);
        if (st != VT_OK) return st;
    }
    return VT_OK;
}

int vt_gguf_is_mapped(const vt_gguf *g)
{
    for (uint32_t k = 0; k < g->n_shards; k++)
        if (g->shards[k].map) return 1;
    return 0;
}

void vt_gguf_close(vt_gguf *g)
{
    if (!g) return;
    for (uint32_t i = 0; i < g->n_shards; i++) shard_free(&g->shards[i]);
    free(g->shards);
    for (int64_t i = 0; i < g->n_tensors; i++) free(g->tensor_names[i]);
    free(g->tensor_names);
    free(g->tensors);
    gguf_name_index_free(&g->tensor_index);
    free(g);
}

