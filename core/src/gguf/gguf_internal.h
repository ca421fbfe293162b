/*
 * gguf_internal.h - the GGUF reader's objects and the helpers its files
 * share: gguf_reader.c (parsing, opening, mapping) and gguf_access.c (the
 * vt/gguf.h accessors of an open file) both call gguf_value.c (metadata
 * values) and gguf_name_index.c. Hidden: not exported from libvtcore.
 */
#ifndef VT_GGUF_INTERNAL_H
#define VT_GGUF_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "vt/gguf.h"

#define GGUF_INTERNAL __attribute__((visibility("hidden")))

/* ------------------------------------------------------------------------ */
/* Objects                                                                   */
/* ------------------------------------------------------------------------ */

/* One metadata entry. Scalars live in v; strings in str; arrays in arr_*. */
typedef struct gguf_kv {
    char *key;
    vt_gguf_type type;
    union {
        uint64_t u;
        int64_t i;
        double f;
    } v;
    vt_gguf_str str;
    vt_gguf_type arr_type;
    uint64_t arr_n;
    void *arr_data;       /* numeric elements, packed, count * size bytes */
    vt_gguf_str *arr_str; /* string elements (pointers into arr_chars) */
    char *arr_chars;      /* the NUL-terminated bytes of all string elements */
} gguf_kv;

/* Open-addressing name -> index table (keys of one shard, tensors of all). */
typedef struct name_index {
    const char **names;
    int64_t *idx;
    uint64_t cap; /* power of two, 0 = empty */
} name_index;

typedef struct gguf_shard {
    char *path;
    int fd;
    uint64_t size;       /* bytes of the file */
    int64_t mtime_ns;    /* its modification time at open (vt_gguf_check_unchanged) */
    uint64_t data_start; /* absolute offset of the data section */
    uint32_t version;
    uint32_t alignment;
    void *map; /* whole-file mapping or NULL */
    gguf_kv *kv;
    int64_t n_kv;
    name_index kv_index;
} gguf_shard;

struct vt_gguf {
    gguf_shard *shards;
    uint32_t n_shards;
    vt_gguf_tensor *tensors;
    char **tensor_names; /* owned names (tensors[i].name points at them) */
    int64_t n_tensors;
    int64_t cap_tensors;
    name_index tensor_index;
};

/* The name index (gguf_name_index.c): free its arrays; make room for n
 * entries (false on allocation failure); insert name -> i (the index already
 * stored under name, or -1 when inserted). */
GGUF_INTERNAL void gguf_name_index_free(name_index *ix);
GGUF_INTERNAL bool gguf_name_index_reserve(name_index *ix, uint64_t n);
GGUF_INTERNAL int64_t gguf_name_index_insert(name_index *ix, const char *name, int64_t i);
/* Index of name in ix, or -1. */
GGUF_INTERNAL int64_t gguf_name_index_find(const name_index *ix, const char *name);
/* Shard s's metadata entry key, or NULL. */
GGUF_INTERNAL const gguf_kv *gguf_shard_kv(const gguf_shard *s, const char *key);
/* Integer value of kv in [lo, hi] into *si / *ui (either may be NULL);
 * VT_ERR_FORMAT naming file and key otherwise. */
GGUF_INTERNAL vt_status gguf_kv_int(const char *file, const gguf_kv *kv, int64_t lo, uint64_t hi,
                                    int64_t *si, uint64_t *ui);
/* Whether t is one of the integer metadata types. */
GGUF_INTERNAL bool gguf_is_int_type(vt_gguf_type t);
/* Whether t is one of the signed integer metadata types. */
GGUF_INTERNAL bool gguf_is_signed_type(vt_gguf_type t);
/* Bytes of one scalar of type t; 0 for STRING/ARRAY/unknown. */
GGUF_INTERNAL uint32_t gguf_scalar_size(vt_gguf_type t);
/* Decode one little-endian scalar of type t from b into kv->v. */
GGUF_INTERNAL void gguf_decode_scalar(vt_gguf_type t, const uint8_t *b, gguf_kv *kv);

#endif
