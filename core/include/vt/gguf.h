/*
 * vt/gguf.h - the GGUF v3 reader (and a minimal writer) of the vt core.
 *
 * Format: GGUF v3 (ggml-org/ggml docs/gguf.md: little-endian layout, ne[0]
 * the fastest-varying dimension) and llama.cpp's multi-file splits. A vt_gguf is one model: a single file, or every shard
 * of a split model opened from its first shard (`-00001-of-0000N.gguf`).
 * Metadata is read from shard 0 only; tensors come from all shards.
 *
 * Every count, length, dimension and offset read from a file is bounds- and
 * overflow-checked before use; a malformed file is refused with VT_ERR_FORMAT
 * and a message naming the field (and the file). Tensor data is mmap-ed
 * read-only (MAP_PRIVATE) unless the open flags say otherwise.
 *
 * Thread-safety: an opened vt_gguf is immutable; any number of threads may read
 * it concurrently. Open/close are not thread-safe for the same object.
 */
/*
 * For plugin authors: the vt_gguf_* functions below are libvtcore's and a
 * plugin does not link libvtcore; a plugin reads an opened model through the
 * host table (vt_host_api in vt/plugin.h: gguf_get_u32, gguf_find_tensor...),
 * which has the same contracts. The types (vt_gguf_type, vt_gguf_str,
 * vt_gguf_tensor) are shared.
 */
#ifndef VT_GGUF_H
#define VT_GGUF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "vt/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Metadata value types (gguf.md §2.1). */
typedef enum vt_gguf_type {
    VT_GGUF_UINT8 = 0,
    VT_GGUF_INT8 = 1,
    VT_GGUF_UINT16 = 2,
    VT_GGUF_INT16 = 3,
    VT_GGUF_UINT32 = 4,
    VT_GGUF_INT32 = 5,
    VT_GGUF_FLOAT32 = 6,
    VT_GGUF_BOOL = 7,
    VT_GGUF_STRING = 8,
    VT_GGUF_ARRAY = 9,
    VT_GGUF_UINT64 = 10,
    VT_GGUF_INT64 = 11,
    VT_GGUF_FLOAT64 = 12,
    VT_GGUF_TYPE_COUNT = 13
} vt_gguf_type;

/* A string inside the file (not NUL-terminated in the file; vt copies add a NUL). */
typedef struct vt_gguf_str {
    const char *ptr; /* NUL-terminated copy owned by the vt_gguf */
    uint64_t len;    /* bytes, without the NUL */
} vt_gguf_str;

/* One tensor of the model. ne[] beyond n_dims are 1. */
typedef struct vt_gguf_tensor {
    const char *name;     /* NUL-terminated, owned by the vt_gguf */
    uint32_t type;        /* ggml type id (vt/types.h) */
    uint32_t n_dims;      /* 1..4 as stored (0 = scalar) */
    int64_t ne[4];        /* elements per dimension, ne[0] contiguous */
    uint64_t nbytes;      /* bytes of the tensor's data */
    uint64_t offset;      /* bytes from its shard's data section start */
    uint64_t file_offset; /* absolute byte offset in its shard file */
    uint32_t shard;       /* shard index (0 for a single file) */
    const void *data;     /* mmap-ed bytes, NULL when the data is not mapped */
} vt_gguf_tensor;

typedef struct vt_gguf vt_gguf;

/* vt_gguf_open flags */
#define VT_GGUF_NO_MMAP 0x1u    /* parse only: tensor.data stays NULL */
#define VT_GGUF_SINGLE_FILE 0x2u /* do not follow split.* keys (used by tools) */

/*
 * Progress of a long step: done of total, in the unit the function taking it
 * names (bytes, or shards), on the caller's thread, done never decreasing;
 * the last call has done == total. It must return (no longjmp out of it).
 */
typedef void (*vt_gguf_progress_fn)(void *user, uint64_t done, uint64_t total);

/*
 * Open a model file. For a split model pass the first shard; the other shards
 * are opened by name (gguf.md §5). A later shard passed alone is refused with
 * a message naming the first shard's file name.
 * Errors: VT_ERR_IO, VT_ERR_FORMAT, VT_ERR_OUT_OF_MEMORY (vt_last_error()).
 */
vt_status vt_gguf_open(const char *path, uint32_t flags, vt_gguf **out);
/* vt_gguf_open reporting a split model's shards to fn as each is parsed
 * (done, total in shards: 1 of N after the first); a single file gets no
 * call. fn NULL: vt_gguf_open. */
vt_status vt_gguf_open_progress(const char *path, uint32_t flags, vt_gguf_progress_fn fn,
                                void *user, vt_gguf **out);
void vt_gguf_close(vt_gguf *g);
/* Map the tensor data of a model opened with VT_GGUF_NO_MMAP (every shard not
 * yet mapped), pointing each tensor's data at it. Not thread-safe: call it
 * before the vt_gguf is shared. Errors: VT_ERR_IO naming the shard. */
vt_status vt_gguf_map(vt_gguf *g);
/* Whether any shard's tensor data is mapped (0 after a VT_GGUF_NO_MMAP open). */
int vt_gguf_is_mapped(const vt_gguf *g);

/* Model-level facts (shard 0 for the header fields). */
uint32_t vt_gguf_version(const vt_gguf *g);   /* GGUF version (3) */
uint32_t vt_gguf_alignment(const vt_gguf *g); /* data alignment in bytes (general.alignment, default 32) */
uint32_t vt_gguf_n_shards(const vt_gguf *g);  /* 1 for a single file */
/* Path of shard `shard` as opened (owned by g), or NULL when shard >= n_shards. */
const char *vt_gguf_shard_path(const vt_gguf *g, uint32_t shard);
/* The shard's read-only file descriptor, owned by g (do not close it; valid
 * until vt_gguf_close), for pread(); -1 when shard >= n_shards. */
int vt_gguf_shard_fd(const vt_gguf *g, uint32_t shard);
/* Byte offset of the shard's data section in its file (0 when out of range). */
uint64_t vt_gguf_shard_data_start(const vt_gguf *g, uint32_t shard);
/* Size of the shard file in bytes (0 when out of range). */
uint64_t vt_gguf_shard_size(const vt_gguf *g, uint32_t shard);
/* Whether every shard file is as it was opened: same size and modification
 * time of the open descriptor (one fstat per shard). A file written in place
 * while its weights are mapped or read gives wrong numbers or SIGBUS; a file
 * replaced by rename is not a change (the open descriptor keeps the old one).
 * VT_OK, or VT_ERR_IO with a message naming the file and what changed. */
vt_status vt_gguf_check_unchanged(const vt_gguf *g);

/* ---- metadata (shard 0) ---- */
int64_t vt_gguf_n_kv(const vt_gguf *g); /* number of metadata entries */
/* Key of entry i (0 <= i < n_kv; NUL-terminated, owned by g), NULL out of range. */
const char *vt_gguf_kv_key(const vt_gguf *g, int64_t i);
/* Value type of entry i (an array reports VT_GGUF_ARRAY; vt_gguf_get_arr gives
 * its element type); VT_GGUF_TYPE_COUNT out of range. */
vt_gguf_type vt_gguf_kv_type(const vt_gguf *g, int64_t i);
/* Index of key, or -1. */
int64_t vt_gguf_find_key(const vt_gguf *g, const char *key);

/*
 * Typed getters. Integer getters accept any integer value type (and BOOL)
 * range-checked into the destination; float getters accept FLOAT32/FLOAT64.
 * Return VT_ERR_NOT_FOUND when the key is absent (no error message is set, so
 * callers can apply defaults), VT_ERR_FORMAT naming the key when its type is
 * wrong or its value out of range.
 */
vt_status vt_gguf_get_u32(const vt_gguf *g, const char *key, uint32_t *out);
vt_status vt_gguf_get_i64(const vt_gguf *g, const char *key, int64_t *out);
vt_status vt_gguf_get_f32(const vt_gguf *g, const char *key, float *out);
vt_status vt_gguf_get_bool(const vt_gguf *g, const char *key, int *out);
vt_status vt_gguf_get_str(const vt_gguf *g, const char *key, vt_gguf_str *out);

/*
 * Arrays. vt_gguf_get_arr gives element type and count; numeric element data
 * is returned as a pointer to count packed little-endian elements of that type
 * (host byte order on little-endian hosts; vt only supports those). For a
 * string array, *data is NULL: read elements with vt_gguf_get_arr_str.
 */
vt_status vt_gguf_get_arr(const vt_gguf *g, const char *key, vt_gguf_type *elem_type,
                          uint64_t *count, const void **data);
vt_status vt_gguf_get_arr_str(const vt_gguf *g, const char *key, uint64_t i, vt_gguf_str *out);
/* Array element i of an integer array, converted with range check to int64. */
vt_status vt_gguf_get_arr_i64(const vt_gguf *g, const char *key, uint64_t i, int64_t *out);

/* Print the value of metadata entry i in a one-line human form (arrays abbreviated). */
void vt_gguf_kv_print(const vt_gguf *g, int64_t i, FILE *f);

/* ---- tensors (all shards) ---- */
/* Tensor count over all shards; tensors keep file order, shard by shard. */
int64_t vt_gguf_n_tensors(const vt_gguf *g);
/* Tensor i (0 <= i < n_tensors), NULL out of range. Owned by g, valid until
 * vt_gguf_close; data is the read-only mapping (never write through it). */
const vt_gguf_tensor *vt_gguf_tensor_at(const vt_gguf *g, int64_t i);
/* Drop the whole pages inside tensor t's mapped bytes from the resident set
 * (vt_host_api.gguf_release_pages, ABI 1.6): its data stays readable. */
vt_status vt_gguf_release_pages(const vt_gguf *g, const vt_gguf_tensor *t);
/* The tensor named `name` (exact match), or NULL (no error message is set). */
const vt_gguf_tensor *vt_gguf_find_tensor(const vt_gguf *g, const char *name);

/* The name of a metadata value type ("UNKNOWN" out of range). */
const char *vt_gguf_type_name(vt_gguf_type t);

/* ---- writer (for generated demo models and test files) ----
 * Accumulate metadata and tensors, then write a single GGUF v3 file, or a
 * split model of several (gguf.md §5), with the given alignment. Tensor data
 * is copied at add time (vt_gguf_writer_add_tensor), or produced at write time
 * by a callback (vt_gguf_writer_add_tensor_fill), so that a model larger than
 * memory can be written in a streaming way. */
typedef struct vt_gguf_writer vt_gguf_writer;
/* A new empty writer; alignment: bytes, a power of two (0: the GGUF default 32).
 * NULL when alignment is not a power of two or on allocation failure
 * (vt_last_error). One writer is used by one thread at a time. */
vt_gguf_writer *vt_gguf_writer_new(uint32_t alignment);
void vt_gguf_writer_free(vt_gguf_writer *w); /* NULL allowed */
/* Metadata setters: keys and values are copied; entries are written in the
 * order set. Errors: VT_ERR_OUT_OF_MEMORY, VT_ERR_INVALID_ARG. */
vt_status vt_gguf_writer_set_u32(vt_gguf_writer *w, const char *key, uint32_t v);
vt_status vt_gguf_writer_set_i32(vt_gguf_writer *w, const char *key, int32_t v);
vt_status vt_gguf_writer_set_u16(vt_gguf_writer *w, const char *key, uint16_t v);
vt_status vt_gguf_writer_set_f32(vt_gguf_writer *w, const char *key, float v);
vt_status vt_gguf_writer_set_bool(vt_gguf_writer *w, const char *key, int v);
vt_status vt_gguf_writer_set_str(vt_gguf_writer *w, const char *key, const char *v);
/* Numeric array: count elements of elem_type packed in data. */
vt_status vt_gguf_writer_set_arr(vt_gguf_writer *w, const char *key, vt_gguf_type elem_type,
                                 const void *data, uint64_t count);
vt_status vt_gguf_writer_set_arr_str(vt_gguf_writer *w, const char *key, const char *const *v,
                                     uint64_t count);
/* ne has n_dims entries; nbytes must equal the size the type and ne imply.
 * data NULL: the tensor is zeros, written as a hole (a sparse file), so test
 * files with the tensor table of a huge model cost no disk. */
vt_status vt_gguf_writer_add_tensor(vt_gguf_writer *w, const char *name, uint32_t type,
                                    uint32_t n_dims, const int64_t *ne, const void *data,
                                    uint64_t nbytes);
/*
 * Producer of a tensor's bytes at write time: write bytes [offset, offset + n)
 * of the tensor into buf. The writer calls it in increasing offset order,
 * covering the tensor exactly once per file written, with offset and n
 * multiples of the type's block bytes (vt_type_size) and n at most a few MiB.
 * user is the pointer given to vt_gguf_writer_add_tensor_fill. Return VT_OK,
 * or an error status after setting a message (vt_last_error); the write then
 * fails with that status and leaves no output file.
 */
typedef vt_status (*vt_gguf_fill_fn)(void *user, void *buf, uint64_t offset, size_t n);
/* As vt_gguf_writer_add_tensor, but the data (nbytes) comes from fill(user, ...)
 * while the file is written; nothing is copied now. user must stay valid until
 * the last write of w. */
vt_status vt_gguf_writer_add_tensor_fill(vt_gguf_writer *w, const char *name, uint32_t type,
                                         uint32_t n_dims, const int64_t *ne, uint64_t nbytes,
                                         vt_gguf_fill_fn fill, void *user);
/* Report the writes of w (vt_gguf_writer_write, _write_split) to fn: bytes
 * of tensor data (holes and padding included) of every file written, after
 * each chunk of at most a few MiB of a filled tensor, each tensor copied at
 * add time or written as a hole, and each padding; total: every tensor's
 * data bytes, padded to the alignment. fn NULL: none (the default). */
void vt_gguf_writer_set_progress(vt_gguf_writer *w, vt_gguf_progress_fn fn, void *user);
vt_status vt_gguf_writer_write(vt_gguf_writer *w, const char *path);
/*
 * Write a split model of n_shards files (gguf.md §5), named
 * vt_gguf_writer_shard_path(path, k, n_shards) for k = 0..n_shards-1. Whole
 * tensors, in add order, go to shards of roughly equal data bytes (every shard
 * gets at least one). Shard 0 holds all metadata; every shard holds split.no
 * (u16, 0-based), split.count (u16) and split.tensors.count (i32), and
 * general.alignment when it is not 32. n_shards = 1: the same as
 * vt_gguf_writer_write(w, path) (one file, no split keys). Each file is
 * written to "<file>.tmp"; all are renamed once every shard is complete.
 * Errors: VT_ERR_INVALID_ARG (n_shards 0, above 99999 or above the tensor
 * count; a key "split.*" set by the caller; a path naming a different shard
 * count), VT_ERR_IO / VT_ERR_OUT_OF_MEMORY naming the file, or a fill status.
 */
vt_status vt_gguf_writer_write_split(vt_gguf_writer *w, const char *path, uint32_t n_shards);
/*
 * The file name of shard k (0-based) of an n_shards split written to path:
 * "<prefix>-%05u-of-%05u.gguf" with k+1 and n_shards, where prefix is path
 * less a trailing "-NNNNN-of-MMMMM.gguf" (MMMMM must then be n_shards) or
 * else less a trailing ".gguf". n_shards = 1: path itself. Writes at most
 * out_size bytes including the NUL. Errors: VT_ERR_INVALID_ARG (k out of
 * range, shard count mismatch, out_size too small).
 */
vt_status vt_gguf_writer_shard_path(const char *path, uint32_t k, uint32_t n_shards, char *out,
                                    size_t out_size);

#ifdef __cplusplus
}
#endif
#endif
