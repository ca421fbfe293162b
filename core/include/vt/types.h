/*
 * vt/types.h - GGML tensor type ids and their block geometry.
 *
 * Source: ggml's type table (ggml.h / ggml-common.h of llama.cpp d32676d77;
 * ids 64..66 from unslothai/llama.cpp branch iq1-narrow, 36fe8e1cc): ids,
 * elements per block, bytes per block.
 * Header-only so plugins share the table without linking the core. A tensor
 * row of n elements of type t occupies (n / vt_type_block_size(t)) *
 * vt_type_size(t) bytes; n must be a multiple of the block size.
 */
#ifndef VT_TYPES_H
#define VT_TYPES_H

#include <stdint.h>

typedef enum vt_type {
    VT_TYPE_F32 = 0,
    VT_TYPE_F16 = 1,
    VT_TYPE_Q4_0 = 2,
    VT_TYPE_Q4_1 = 3,
    VT_TYPE_Q5_0 = 6,
    VT_TYPE_Q5_1 = 7,
    VT_TYPE_Q8_0 = 8,
    VT_TYPE_Q8_1 = 9,
    VT_TYPE_Q2_K = 10,
    VT_TYPE_Q3_K = 11,
    VT_TYPE_Q4_K = 12,
    VT_TYPE_Q5_K = 13,
    VT_TYPE_Q6_K = 14,
    VT_TYPE_Q8_K = 15,
    VT_TYPE_IQ2_XXS = 16,
    VT_TYPE_IQ2_XS = 17,
    VT_TYPE_IQ3_XXS = 18,
    VT_TYPE_IQ1_S = 19,
    VT_TYPE_IQ4_NL = 20,
    VT_TYPE_IQ3_S = 21,
    VT_TYPE_IQ2_S = 22,
    VT_TYPE_IQ4_XS = 23,
    VT_TYPE_I8 = 24,
    VT_TYPE_I16 = 25,
    VT_TYPE_I32 = 26,
    VT_TYPE_I64 = 27,
    VT_TYPE_F64 = 28,
    VT_TYPE_IQ1_M = 29,
    VT_TYPE_BF16 = 30,
    VT_TYPE_TQ1_0 = 34,
    VT_TYPE_TQ2_0 = 35,
    VT_TYPE_MXFP4 = 39,
    VT_TYPE_NVFP4 = 40,
    VT_TYPE_Q1_0 = 41,
    VT_TYPE_Q2_0 = 42,
    /* ids 43..63 are left to upstream ggml; 64..66 are unslothai/llama.cpp's
     * branch iq1-narrow (commit 36fe8e1cc): IQ1_S's rule with a narrower grid
     * index (ABI 1.9) */
    VT_TYPE_IQ1_XS = 64,
    VT_TYPE_IQ1_XXS = 65,
    VT_TYPE_IQ1_XXXS = 66,
    VT_TYPE_COUNT = 67 /* one past the largest id known to this ABI */
} vt_type;

/* Size of the per-type tables in the backend ABI (vt_backend_api's mat_mul[]
 * and get_rows[], frozen since ABI 1.0). Ids >= VT_TYPE_SLOTS (the fork
 * types 64..66) go through the ABI 1.9 members mat_mul_ext/get_rows_ext and
 * the extended capability ids of vt/backend.h. */
#define VT_TYPE_SLOTS 64

typedef struct vt_type_traits {
    const char *name;    /* ggml's name: "F32", "Q8_0", ... ; NULL for a removed id */
    uint32_t block_size; /* elements per block; 0 for a removed/unknown id */
    uint32_t type_size;  /* bytes per block */
} vt_type_traits;

static inline vt_type_traits vt_type_traits_of(uint32_t t)
{
    /* positional (ids 0..VT_TYPE_COUNT-1 in order) so that C++ compilers (nvcc, hipcc)
     * accept the header too; {0, 0, 0} marks a removed id */
    static const vt_type_traits tab[VT_TYPE_COUNT] = {
        /*  0 */ {"F32", 1, 4},
        /*  1 */ {"F16", 1, 2},
        /*  2 */ {"Q4_0", 32, 18},
        /*  3 */ {"Q4_1", 32, 20},
        /*  4 */ {0, 0, 0},
        /*  5 */ {0, 0, 0},
        /*  6 */ {"Q5_0", 32, 22},
        /*  7 */ {"Q5_1", 32, 24},
        /*  8 */ {"Q8_0", 32, 34},
        /*  9 */ {"Q8_1", 32, 36},
        /* 10 */ {"Q2_K", 256, 84},
        /* 11 */ {"Q3_K", 256, 110},
        /* 12 */ {"Q4_K", 256, 144},
        /* 13 */ {"Q5_K", 256, 176},
        /* 14 */ {"Q6_K", 256, 210},
        /* 15 */ {"Q8_K", 256, 292},
        /* 16 */ {"IQ2_XXS", 256, 66},
        /* 17 */ {"IQ2_XS", 256, 74},
        /* 18 */ {"IQ3_XXS", 256, 98},
        /* 19 */ {"IQ1_S", 256, 50},
        /* 20 */ {"IQ4_NL", 32, 18},
        /* 21 */ {"IQ3_S", 256, 110},
        /* 22 */ {"IQ2_S", 256, 82},
        /* 23 */ {"IQ4_XS", 256, 136},
        /* 24 */ {"I8", 1, 1},
        /* 25 */ {"I16", 1, 2},
        /* 26 */ {"I32", 1, 4},
        /* 27 */ {"I64", 1, 8},
        /* 28 */ {"F64", 1, 8},
        /* 29 */ {"IQ1_M", 256, 56},
        /* 30 */ {"BF16", 1, 2},
        /* 31 */ {0, 0, 0},
        /* 32 */ {0, 0, 0},
        /* 33 */ {0, 0, 0},
        /* 34 */ {"TQ1_0", 256, 54},
        /* 35 */ {"TQ2_0", 256, 66},
        /* 36 */ {0, 0, 0},
        /* 37 */ {0, 0, 0},
        /* 38 */ {0, 0, 0},
        /* 39 */ {"MXFP4", 32, 17},
        /* 40 */ {"NVFP4", 64, 36},
        /* 41 */ {"Q1_0", 128, 18},
        /* 42 */ {"Q2_0", 64, 18},
        /* 43..63: not assigned */
        {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0},
        {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0},
        {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0},
        /* 64 */ {"IQ1_XS", 256, 46},
        /* 65 */ {"IQ1_XXS", 256, 42},
        /* 66 */ {"IQ1_XXXS", 256, 38},
    };
    vt_type_traits none = {0, 0, 0};
    return t < VT_TYPE_COUNT ? tab[t] : none;
}

static inline uint32_t vt_type_block_size(uint32_t t) { return vt_type_traits_of(t).block_size; }
static inline uint32_t vt_type_size(uint32_t t) { return vt_type_traits_of(t).type_size; }
static inline const char *vt_type_name(uint32_t t)
{
    const char *n = vt_type_traits_of(t).name;
    return n ? n : "unknown";
}

/* Bytes of one row of n elements, 0 if n is not a multiple of the block size. */
static inline uint64_t vt_type_row_bytes(uint32_t t, uint64_t n)
{
    vt_type_traits tr = vt_type_traits_of(t);
    if (tr.block_size == 0 || n % tr.block_size) return 0;
    return n / tr.block_size * tr.type_size;
}

#endif
