/*
 * gguf_value.c - GGUF metadata values (gguf_internal.h): the value types'
 * names and scalar sizes, decoding a little-endian scalar, integer values
 * with their range checks, and a shard's key lookup; shared by the parser
 * (gguf_reader.c) and the accessors (gguf_access.c), which call into this
 * file and never into each other.
 */
#include "vt/gguf.h"

#include <inttypes.h>
#include <string.h>

#include "error.h"
#include "gguf_internal.h"

static const char *const type_names[VT_GGUF_TYPE_COUNT] = {
    "UINT8", "INT8",  "UINT16", "INT16", "UINT32", "INT32",  "FLOAT32",
    "BOOL",  "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64",
};

const char *vt_gguf_type_name(vt_gguf_type t)
{
    return (unsigned)t < VT_GGUF_TYPE_COUNT ? type_names[t] : "UNKNOWN";
}

/* Bytes of one scalar of type t; 0 for STRING/ARRAY/unknown. */
uint32_t gguf_scalar_size(vt_gguf_type t)
{
    switch (t) {
    case VT_GGUF_UINT8: case VT_GGUF_INT8: case VT_GGUF_BOOL: return 1;
    case VT_GGUF_UINT16: case VT_GGUF_INT16: return 2;
    case VT_GGUF_UINT32: case VT_GGUF_INT32: case VT_GGUF_FLOAT32: return 4;
    case VT_GGUF_UINT64: case VT_GGUF_INT64: case VT_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

/* Decode one little-endian scalar of type t from b into kv->v. */
void gguf_decode_scalar(vt_gguf_type t, const uint8_t *b, gguf_kv *kv)
{
    uint64_t x = 0;
    uint32_t n = gguf_scalar_size(t);
    for (int i = (int)n - 1; i >= 0; i--) x = x << 8 | b[i];
    switch (t) {
    case VT_GGUF_INT8: kv->v.i = (int8_t)x; break;
    case VT_GGUF_INT16: kv->v.i = (int16_t)x; break;
    case VT_GGUF_INT32: kv->v.i = (int32_t)x; break;
    case VT_GGUF_INT64: kv->v.i = (int64_t)x; break;
    case VT_GGUF_FLOAT32: {
        float f;
        uint32_t u = (uint32_t)x;
        memcpy(&f, &u, 4);
        kv->v.f = f;
        break;
    }
    case VT_GGUF_FLOAT64: memcpy(&kv->v.f, &x, 8); break;
    default: kv->v.u = x; break;
    }
}

bool gguf_is_int_type(vt_gguf_type t)
{
    switch (t) {
    case VT_GGUF_UINT8: case VT_GGUF_UINT16: case VT_GGUF_UINT32: case VT_GGUF_UINT64:
    case VT_GGUF_INT8: case VT_GGUF_INT16: case VT_GGUF_INT32: case VT_GGUF_INT64:
    case VT_GGUF_BOOL:
        return true;
    default:
        return false;
    }
}

bool gguf_is_signed_type(vt_gguf_type t)
{
    return t == VT_GGUF_INT8 || t == VT_GGUF_INT16 || t == VT_GGUF_INT32 || t == VT_GGUF_INT64;
}

/* Integer value of kv in [lo, hi]; VT_ERR_FORMAT naming the key otherwise. */
vt_status gguf_kv_int(const char *file, const gguf_kv *kv, int64_t lo, uint64_t hi,
                        int64_t *si, uint64_t *ui)
{
    if (!gguf_is_int_type(kv->type)) {
        vt_set_error("%s: metadata key '%s' has type %s, expected an integer", file, kv->key,
                     vt_gguf_type_name(kv->type));
        return VT_ERR_FORMAT;
    }
    if (gguf_is_signed_type(kv->type)) {
        int64_t v = kv->v.i;
        if (v < lo || (v >= 0 && (uint64_t)v > hi)) {
            vt_set_error("%s: metadata key '%s' = %" PRId64 " is out of range [%" PRId64
                         ", %" PRIu64 "]",
                         file, kv->key, v, lo, hi);
            return VT_ERR_FORMAT;
        }
        if (si) *si = v;
        if (ui) *ui = (uint64_t)v;
    } else {
        uint64_t v = kv->v.u;
        if (v > hi) {
            vt_set_error("%s: metadata key '%s' = %" PRIu64 " is out of range [%" PRId64
                         ", %" PRIu64 "]",
                         file, kv->key, v, lo, hi);
            return VT_ERR_FORMAT;
        }
        if (si) *si = (int64_t)v;
        if (ui) *ui = v;
    }
    return VT_OK;
}

const gguf_kv *gguf_shard_kv(const gguf_shard *s, const char *key)
{
    int64_t i = gguf_name_index_find(&s->kv_index, key);
    return i < 0 ? NULL : &s->kv[i];
}
