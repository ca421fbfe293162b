/*
 * quantize.h - float32 rows to the GGUF weight types (gguf.md §6), the
 * inverse of backend-cpu's reference dequantiser (cpu_dequant.c).
 *
 * Core-internal: used by the model generator (mkmodel.c) to write random
 * models in every common weight type. The quantisers are round-to-nearest
 * (no search over scales as llama.cpp's are, no importance matrix): each
 * block's scales come from its own min / max / signed extreme, and each weight
 * is then rounded with the FINAL (f16- or 6-bit-rounded) scale, so the only
 * error beyond the grid step is the scale's own rounding. Deterministic: the
 * same floats give the same bytes on every IEEE host (no libm, no FMA-able
 * expressions).
 *
 * Per type (x one block, "extreme" the value of largest |x|, first if tied):
 *  F32, F16, BF16   F16/BF16 rounded to nearest even (overflow: inf).
 *  Q8_0             d = amax/127 (f16), q = round(x * (1/d)) with the
 *                   unrounded d (llama.cpp's reference quantiser, byte-exact).
 *  Q4_0, Q5_0       d = extreme / -8 (-16) as f16 d'; q = round(x/d') in
 *                   [-8, 7] ([-16, 15]): the extreme maps to the end code.
 *  Q4_1, Q5_1       m = min, d = (max - min)/15 (31), both f16; q =
 *                   round((x - m')/d') in [0, 15] ([0, 31]).
 *  Q2_K, Q4_K, Q5_K sub-blocks of 16 (Q2_K) or 32 values: lo = min(0, min x),
 *                   scale_j = (max x - lo)/L (L = 3, 15, 31), min_j = -lo;
 *                   d = max_j scale_j / S, dmin = max_j min_j / S (S = 15 for
 *                   the 4-bit Q2_K fields, 63 for the 6-bit ones), f16;
 *                   sc_j = round(scale_j/d'), m_j = round(min_j/dmin');
 *                   q = round((x + dmin'*m_j) / (d'*sc_j)) in [0, L].
 *  Q3_K, Q6_K       sub-blocks of 16: s_j = extreme_j / -4 (-32); d = max_j
 *                   |s_j| / S (S = 31 for the signed 6-bit Q3_K scales, 127 for
 *                   Q6_K's int8), f16; sc_j = round(s_j/d') in [-S, S];
 *                   q = round(x / (d'*sc_j)) in [-4, 3] ([-32, 31]).
 *  IQ4_NL           d = extreme / -127 (the codebook's end value), f16; each
 *                   weight the nearest codebook value K[k]·d' (§6.14).
 *  IQ4_XS           sub-blocks of 32: s_j = extreme_j / -127, d = max_j |s_j|
 *                   / 31 (f16), ls_j - 32 = round(s_j/d') in [-31, 31], weight
 *                   nearest K[k]·d'·(ls_j - 32).
 *  MXFP4            e = the smallest E8M0 exponent with amax <= 6·2^(e-127),
 *                   each weight the nearest E2M1 value (±0, 0.5, 1, 1.5, 2,
 *                   3, 4, 6) times 2^(e-127) (§6.16).
 * Ties between two codes go to the lower code (the nearest-codebook types)
 * or away from zero (the uniform grids).
 *  low-bit types    IQ1_S, IQ1_M, IQ1_XS, IQ1_XXS, IQ1_XXXS, IQ2_XXS, IQ2_XS,
 *                   IQ2_S, IQ3_XXS, IQ3_S, TQ1_0, TQ2_0, NVFP4, Q1_0, Q2_0:
 *                   no quantiser. A block's codes are a hash of its values and
 *                   its scales are set so the decoded values span about its
 *                   max |x|: valid blocks of real magnitude for benchmarks,
 *                   not an approximation of x.
 */
#ifndef VT_QUANTIZE_H
#define VT_QUANTIZE_H

#include <stdint.h>

#include "vt/status.h"

/*
 * Quantise the row x[0..n) to `type` into dst: n / vt_type_block_size(type)
 * blocks of vt_type_size(type) bytes (gguf.md §6 layouts). Types: F32, F16,
 * BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL,
 * IQ4_XS, MXFP4, and the low-bit types above. x must be finite for the block types (F32/F16/BF16 take
 * inf/NaN), and a block's scale must fit f16 (|x| up to about 65504 times the
 * type's largest code). n = 0 writes nothing.
 * Errors (message names the type and n): VT_ERR_UNSUPPORTED for any other
 * type; VT_ERR_INVALID_ARG for n < 0, n not a multiple of the block size
 * (vt_type_block_size), NULL x/dst with n > 0, or a
 * non-finite value in a block type (nothing is promised about dst then).
 * Thread-safe (no state).
 */
vt_status vt_quantize_row(uint32_t type, const float *x, int64_t n, void *dst);

/* 1 when vt_quantize_row handles `type`, else 0. */
int vt_quantize_handles(uint32_t type);

/*
 * The type to use instead of `type` for a row whose length is not a multiple
 * of type's block size, as llama.cpp's quantiser does ("using fallback
 * quantization", llama.cpp d32676d77 and iq1-narrow 36fe8e1cc): the IQ1, IQ2,
 * IQ3 types and IQ4_XS -> IQ4_NL; Q2_0, Q2_K, Q3_K, TQ1_0, TQ2_0 -> Q4_0;
 * Q4_K -> Q5_0; Q5_K -> Q5_1; Q6_K -> Q8_0; any other type (32-value blocks,
 * NVFP4, Q1_0) -> F16, which fits every row. Apply repeatedly until the row fits: Q4_K on a row of 48
 * values gives Q5_0, on a row of 40 values Q5_0 and then F16.
 */
uint32_t vt_quantize_fallback(uint32_t type);

#endif
