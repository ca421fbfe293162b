/*
 * cpu_simd_body.h - the width-generic SIMD kernels of backend-cpu.
 *
 * Included once per instruction set (cpu_kernels_avx2.c, cpu_kernels_avx512.c,
 * cpu_kernels_avx2w16.c) after that file has defined, for its vector of VW
 * floats `vf`:
 *   v_zero v_set1 v_load v_store v_add v_sub v_mul v_div v_max v_fma(a,b,c)=a·b+c
 *   v_hsum v_hmax v_load_f16 v_load_bf16 v_load_i8 (VW elements from bytes),
 *   v_hsum4(a, b, c, d, out[4]) (four sums at once; each sum's association
 *   must not depend on the other three arguments),
 *   v_exp v_tanh, f16_scalar(uint16_t), sumsq_d(x, n) (double sum of squares),
 *   MM_R, MM_NT (rows × tokens of the matmul micro-kernel's register tile;
 *   MM_R <= 8, 4 <= MM_NT <= 8), MM_R2, MM_R3 (rows of the tile when a chunk
 *   has only 2 or 3 tokens; <= 8), MM_R2Q, MM_R3Q (the same for Q8_0, whose
 *   row scales take registers too),
 *   KSET (the vt_cpu_kernels object's name), KNAME, KISA, KSUPPORTED.
 *
 * Arithmetic: activations float32, weights dequantised to float32 exactly (in
 * registers, or into a float32 panel in scratch; Q8_0: d·q is exact), float32
 * products accumulated in float32 with fused multiply-add. Only the order of summation (and FMA's single rounding)
 * differs from the scalar reference; tests/test_cpu_simd.c bounds that.
 * Tails (sizes not a multiple of VW) run the same arithmetic in scalar form.
 */

#include <math.h>

/* Optimised builds force inlining: the matmul's tile shapes and modes are
 * compile-time arguments that must fold away. Unoptimised (sanitizer) builds
 * leave it to the compiler, which keeps their compile time small. */
#if defined(__OPTIMIZE__)
#define BODY_INLINE static inline __attribute__((always_inline))
#else
#define BODY_INLINE static inline
#endif
/* Full unrolling of the tile loops (trip counts are compile-time): GCC needs
 * telling at -O2; clang unrolls them anyway and compiles much slower when told. */
#define BODY_PRAGMA(x) _Pragma(#x)
#if defined(__clang__)
#define BODY_UNROLL(n)
#else
#define BODY_UNROLL(n) BODY_PRAGMA(GCC unroll n)
#endif

/* ---- matmul ---- */

/* Element i of a row of a float-like weight type (tails only). */
BODY_INLINE float w_elem(uint32_t type, const uint8_t *row, int64_t i)
{
    switch (type) {
    case VT_TYPE_F16: return vt_cpu_f16_to_f32(vt_cpu_rd16(row + 2 * i));
    case VT_TYPE_BF16: return vt_cpu_bf16_to_f32(vt_cpu_rd16(row + 2 * i));
    default: {
        float f;
        memcpy(&f, row + 4 * i, sizeof f);
        return f;
    }
    }
}

BODY_INLINE vf w_vec(uint32_t type, const uint8_t *row, int64_t i)
{
    switch (type) {
    case VT_TYPE_F16: return v_load_f16(row + 2 * i);
    case VT_TYPE_BF16: return v_load_bf16(row + 2 * i);
    default: return v_load((const float *)(const void *)(row + 4 * i));
    }
}

/* One token (decode): each output summed exactly as mm_tile sums it in a
 * batch (per column block of MM_KB, one vector accumulator over the block's
 * whole vectors in order, v_hsum4, the tail columns by scalar FMA, y = s or
 * y += s in block order), so a token's result is the same alone and in any
 * batch (batch invariance: issue 43 item 5; it had four accumulators per
 * row, whose sums parted from the batch's in the last bits). Four rows at a
 * time give four independent FMA chains. */
BODY_INLINE void mm_rows_1tok(uint32_t type, const uint8_t *w, size_t rb, int64_t n_in,
                              const float *x, float *y, int64_t n_rows)
{
    for (int64_t r0 = 0; r0 < n_rows; r0 += 4) {
        const int nr = n_rows - r0 < 4 ? (int)(n_rows - r0) : 4;
        const uint8_t *row[4];
        for (int g = 0; g < 4; g++) row[g] = w + (size_t)(r0 + (g < nr ? g : 0)) * rb;
        for (int64_t k0 = 0; k0 < n_in; k0 += VT_CPU_MM_KB) {
            const int64_t n = n_in - k0 < VT_CPU_MM_KB ? n_in - k0 : VT_CPU_MM_KB, nv = n - n % VW;
            vf acc[4] = {v_zero(), v_zero(), v_zero(), v_zero()};
            if (type == VT_TYPE_Q8_0) { /* n a multiple of 32: no tail */
                for (int64_t b = k0 / 32; b < (k0 + n) / 32; b++) {
                    vf d[4];
                    for (int g = 0; g < 4; g++)
                        d[g] = v_set1(f16_scalar(vt_cpu_rd16(row[g] + (size_t)b * VT_CPU_Q8_0_BYTES)));
                    for (int u = 0; u < 32 / VW; u++) {
                        vf xv = v_load(x + b * 32 + u * VW);
                        for (int g = 0; g < 4; g++) {
                            const uint8_t *q = row[g] + (size_t)b * VT_CPU_Q8_0_BYTES + 2 + u * VW;
                            acc[g] = v_fma(v_mul(v_load_i8(q), d[g]), xv, acc[g]);
                        }
                    }
                }
            } else {
                for (int64_t i = k0; i < k0 + nv; i += VW) {
                    vf xv = v_load(x + i);
                    for (int g = 0; g < 4; g++) acc[g] = v_fma(w_vec(type, row[g], i), xv, acc[g]);
                }
            }
            float s[4];
            v_hsum4(acc[0], acc[1], acc[2], acc[3], s);
            for (int g = 0; g < nr; g++) {
                for (int64_t i = k0 + nv; i < k0 + n; i++) s[g] = fmaf(w_elem(type, row[g], i), x[i], s[g]);
                if (k0 == 0) y[r0 + g] = s[g];
                else y[r0 + g] += s[g];
            }
        }
    }
}

/*
 * Several tokens (prefill, the tokens routed to one expert): a GEMM tiled so
 * that each weight element is loaded and dequantised once per chunk of up to
 * VT_CPU_MM_TOK_CHUNK tokens.
 *  - n_in is cut into blocks of VT_CPU_MM_KB columns, the outer loop: the
 *    chunk's x block (64 tokens × 512 columns, 128 KiB) stays in L2 while
 *    every row of the slice passes.
 *  - In a block, rows are taken MM_R at a time (a row group) and multiplied
 *    with the chunk's tokens MM_NT at a time by a micro-kernel holding
 *    MM_R × MM_NT vector accumulators in registers.
 *  - The first tile of a row group dequantises the weights in registers and
 *    also stores them, as float32, to a panel in the thread's scratch
 *    (MM_R × 512 floats, in L1) (MM_FILL); the group's other tiles read the
 *    panel (MM_PANEL). So the conversion runs once per chunk, overlapped with
 *    the first tile's FMAs instead of in a pass of its own. F32 weights are
 *    read in place.
 *  - A chunk of 2 or 3 tokens is a single tile: taller row groups (MM_R2,
 *    MM_R3; MM_R2Q, MM_R3Q for Q8_0) fill the registers, and the weights are
 *    dequantised in registers only (MM_CONVERT).
 *  - A short row group (the slice's last) and a chunk of 4..MM_NT-1 tokens
 *    are dequantised into the panel by a pass of their own (mm_pack; rows
 *    past the group's end are zeros, computed but not stored, or, when they
 *    would be half the group or more, the real rows go one at a time), then
 *    go the MM_PANEL way. So only a few tile shapes are compiled: every
 *    MM_PANEL tile (any type) runs in one function per row-group height.
 *  - With 8 tokens or more, the weights two row groups on are prefetched
 *    while a group computes: the runs of a block (1 KiB of bf16 per row, rows
 *    KiBs apart) are too short for the hardware prefetcher.
 * Arithmetic of one output y[t][r], whatever tile, slice or thread computes
 * it: per column block, one vector accumulator takes the FMAs of the block's
 * whole vectors in order, v_hsum4 reduces it, the block's tail columns (float
 * types, last block) are added by scalar FMA; block sums are added in block
 * order. So results are the same for every thread count. A chunk of one token
 * takes the decode path (mm_rows_1tok); the op cuts token ranges at multiples
 * of the chunk too, so that choice does not depend on the split either.
 */

#define MM_KB VT_CPU_MM_KB
/* Prefetch (two row groups ahead) from this many tokens on: with fewer, a
 * group's compute is too short to hide the fetch, and the prefetch
 * instructions (one per 64 bytes) cost more than they save. */
#define MM_PF_TOKENS 8

/* Bytes of n columns of a row of `type` (n a multiple of 32 for Q8_0). */
BODY_INLINE size_t mm_col_bytes(uint32_t type, int64_t n)
{
    return type == VT_TYPE_Q8_0 ? (size_t)(n / 32) * VT_CPU_Q8_0_BYTES
                                : (size_t)n * (type == VT_TYPE_F32 ? 4 : 2);
}

/* Prefetch `len` bytes from each of rows [0, nr) (rb apart) starting at p. */
BODY_INLINE void mm_prefetch(const uint8_t *p, size_t rb, size_t len, int64_t nr)
{
    for (int64_t r = 0; r < nr; r++, p += rb) {
        for (size_t b = 0; b < len; b += 64) __builtin_prefetch(p + b);
        __builtin_prefetch(p + len - 1);
    }
}

/* How a tile gets its weights. */
enum {
    MM_PANEL = 0,   /* float32 from the panel (or F32 rows in place) */
    MM_FILL = 1,    /* dequantise from the rows, and store to the panel */
    MM_CONVERT = 2, /* dequantise from the rows (the group's only tile) */
};

/* Weight vector of row r at column i: from the panel (rows ldw apart), or
 * dequantised from the row's bytes (wq: row 0's at column i; Q8_0: scale
 * d[r]) and, for MM_FILL, also stored to the panel. */
BODY_INLINE vf mm_wvec(uint32_t type, const uint8_t *wq, size_t rb, const float *d,
                       const float *pr, float *pw, int64_t ldw, int r, int64_t i, const int MODE)
{
    if (MODE == MM_PANEL) return v_load(pr + r * ldw + i);
    const uint8_t *q = wq + (size_t)r * rb;
    vf v = type == VT_TYPE_Q8_0 ? v_mul(v_load_i8(q), v_set1(d[r])) : w_vec(type, q, 0);
    if (MODE == MM_FILL) v_store(pw + r * ldw + i, v);
    return v;
}

/* One vector step of the micro-kernel at column i (arguments as mm_wvec's). */
BODY_INLINE void mm_step(uint32_t type, const uint8_t *wq, size_t rb, const float *d,
                         const float *pr, float *pw, int64_t ldw, const float *x, int64_t ldx,
                         int64_t i, vf acc[8][8], const int R, const int NT, const int MODE)
{
#define MM_W(r) mm_wvec(type, wq, rb, d, pr, pw, ldw, r, i, MODE)
    if (R <= NT) {
        vf wv[8];
BODY_UNROLL(8)
        for (int r = 0; r < R; r++) wv[r] = MM_W(r);
BODY_UNROLL(8)
        for (int t = 0; t < NT; t++) {
            vf xv = v_load(x + t * ldx + i);
BODY_UNROLL(8)
            for (int r = 0; r < R; r++) acc[r][t] = v_fma(wv[r], xv, acc[r][t]);
        }
    } else {
        vf xv[8];
BODY_UNROLL(8)
        for (int t = 0; t < NT; t++) xv[t] = v_load(x + t * ldx + i);
BODY_UNROLL(8)
        for (int r = 0; r < R; r++) {
            vf wv = MM_W(r);
BODY_UNROLL(8)
            for (int t = 0; t < NT; t++) acc[r][t] = v_fma(wv, xv[t], acc[r][t]);
        }
    }
#undef MM_W
}

/* s[t][r] = the reduction of acc[r][t], by v_hsum4 four accumulators at a
 * time (four rows of a token when R allows, so they land side by side); a
 * group of fewer repeats its first: every output is reduced the same way. */
BODY_INLINE void mm_reduce(vf acc[8][8], float s[8][8], const int R, const int NT)
{
    if (R % 4 == 0) {
BODY_UNROLL(8)
        for (int t = 0; t < NT; t++)
BODY_UNROLL(2)
            for (int r = 0; r < R; r += 4)
                v_hsum4(acc[r][t], acc[r + 1][t], acc[r + 2][t], acc[r + 3][t], &s[t][r]);
        return;
    }
BODY_UNROLL(16)
    for (int f = 0; f < R * NT; f += 4) {
        vf a = acc[f % R][f / R];
        vf b = f + 1 < R * NT ? acc[(f + 1) % R][(f + 1) / R] : a;
        vf c = f + 2 < R * NT ? acc[(f + 2) % R][(f + 2) / R] : a;
        vf d = f + 3 < R * NT ? acc[(f + 3) % R][(f + 3) / R] : a;
        float o[4];
        v_hsum4(a, b, c, d, o);
BODY_UNROLL(4)
        for (int g = 0; g < 4; g++)
            if (f + g < R * NT) s[(f + g) / R][(f + g) % R] = o[g];
    }
}

/*
 * One tile, R rows × NT tokens of a column block: over the block's whole
 * vectors [0, nv) the micro-kernel (the smaller side of the tile held in
 * registers through a vector step), then the tail columns [nv, n) from the
 * panel by scalar FMA, then y = s (first block) or y += s for rows [0, nr).
 * wk: row 0's bytes at the block's first column (dequantising modes); qd:
 * the group's Q8_0 scales for MM_FILL, [block][8 rows].
 */
BODY_INLINE void mm_tile(uint32_t type, const uint8_t *wk, size_t rb, const float *qd,
                         const float *pr, float *pw, int64_t ldw, int64_t nv, int64_t n,
                         const float *x, int64_t ldx, float *y, int64_t ldy, int64_t nr,
                         int first, const int R, const int NT, const int MODE)
{
    vf acc[8][8];
BODY_UNROLL(8)
    for (int r = 0; r < R; r++)
BODY_UNROLL(8)
        for (int t = 0; t < NT; t++) acc[r][t] = v_zero();
    if (type == VT_TYPE_Q8_0 && MODE != MM_PANEL) { /* by blocks of 32: nv is a multiple */
        for (int64_t b = 0; b < nv / 32; b++) {
            const uint8_t *blk = wk + (size_t)b * VT_CPU_Q8_0_BYTES;
            /* scales: MM_FILL (a tile of many that follow) has them converted
             * beforehand into qd; MM_CONVERT (a chunk's only tile) converts
             * them here, among the FMAs */
            float dc[8];
            const float *d = dc;
            if (MODE == MM_FILL) {
                d = qd + b * 8;
            } else {
BODY_UNROLL(8)
                for (int r = 0; r < R; r++) dc[r] = f16_scalar(vt_cpu_rd16(blk + (size_t)r * rb));
            }
BODY_UNROLL(4)
            for (int u = 0; u < 32 / VW; u++)
                mm_step(type, blk + 2 + u * VW, rb, d, pr, pw, ldw, x, ldx, b * 32 + u * VW, acc, R,
                        NT, MODE);
        }
    } else {
        const size_t esz = type == VT_TYPE_F32 ? 4 : 2;
        for (int64_t i = 0; i < nv; i += VW)
            mm_step(type, MODE == MM_PANEL ? wk : wk + (size_t)i * esz, rb, qd, pr, pw, ldw, x, ldx,
                    i, acc, R, NT, MODE);
    }
    float s[8][8];
    mm_reduce(acc, s, R, NT);
    if (n > nv)
        for (int t = 0; t < NT; t++)
            for (int r = 0; r < R; r++)
                for (int64_t i = nv; i < n; i++)
                    s[t][r] = fmaf(pr[r * ldw + i], x[t * ldx + i], s[t][r]);
BODY_UNROLL(8)
    for (int t = 0; t < NT; t++) {
        float *yt = y + t * ldy;
        if (first) {
BODY_UNROLL(8)
            for (int r = 0; r < R; r++)
                if (r < nr) yt[r] = s[t][r];
        } else {
BODY_UNROLL(8)
            for (int r = 0; r < R; r++)
                if (r < nr) yt[r] += s[t][r];
        }
    }
}

/*
 * MM_PANEL tiles of R rows (rows [0, nr) stored) for tokens [t0, n_tok):
 * MM_NT at a time, then the rest; NTF > 0: exactly one tile of NTF tokens.
 * These are the same code for every weight type (one function per R below).
 */
BODY_INLINE void mm_panel_tokens(const float *pr, int64_t ldw, int64_t nv, int64_t n,
                                 const float *x, int64_t ldx, float *y, int64_t ldy, int64_t nr,
                                 int first, int64_t t0, int64_t n_tok, const int R, const int NTF)
{
#define MM_PT(NT, T)                                                                           \
    mm_tile(VT_TYPE_F32, NULL, 0, NULL, pr, NULL, ldw, nv, n, x + (T) * ldx, ldx, y + (T) * ldy, \
            ldy, nr, first, R, NT, MM_PANEL)
    if (NTF) {
        MM_PT(NTF, t0);
        return;
    }
    int64_t t = t0;
    for (; t + MM_NT <= n_tok; t += MM_NT) MM_PT(MM_NT, t);
    switch (n_tok - t) {
#if MM_NT > 7
    case 7: MM_PT(7, t); break;
#endif
#if MM_NT > 6
    case 6: MM_PT(6, t); break;
#endif
#if MM_NT > 5
    case 5: MM_PT(5, t); break;
#endif
#if MM_NT > 4
    case 4: MM_PT(4, t); break;
#endif
    case 3: MM_PT(3, t); break;
    case 2: MM_PT(2, t); break;
    case 1: MM_PT(1, t); break;
    default: break;
    }
#undef MM_PT
}

typedef void (*mm_panel_fn)(const float *pr, int64_t ldw, int64_t nv, int64_t n, const float *x,
                            int64_t ldx, float *y, int64_t ldy, int64_t nr, int first, int64_t t0,
                            int64_t n_tok);
#define MM_PANEL_FN(NAME, R, NTF)                                                              \
    static void NAME(const float *pr, int64_t ldw, int64_t nv, int64_t n, const float *x,      \
                     int64_t ldx, float *y, int64_t ldy, int64_t nr, int first, int64_t t0,    \
                     int64_t n_tok)                                                            \
    {                                                                                          \
        mm_panel_tokens(pr, ldw, nv, n, x, ldx, y, ldy, nr, first, t0, n_tok, R, NTF);         \
    }
MM_PANEL_FN(mm_panel_r, MM_R, 0)
MM_PANEL_FN(mm_panel_r1, 1, 0)
MM_PANEL_FN(mm_panel_r2, MM_R2, 2)
MM_PANEL_FN(mm_panel_r3, MM_R3, 3)
MM_PANEL_FN(mm_panel_r2q, MM_R2Q, 2)
MM_PANEL_FN(mm_panel_r3q, MM_R3Q, 3)

/* Columns [0, n) of rows [0, nr) (wk: row 0 at the block's first column) ->
 * panel[r·MM_KB + i] as float32, exactly; rows [nr, R) are zeros. */
BODY_INLINE void mm_pack(uint32_t type, const uint8_t *wk, size_t rb, int64_t n, float *panel,
                         int64_t nr, int64_t R)
{
    for (int64_t r = 0; r < R; r++) {
        const uint8_t *row = wk + (size_t)r * rb;
        float *p = panel + r * MM_KB;
        int64_t i = 0;
        if (r >= nr) {
            for (; i < n; i++) p[i] = 0.0f;
        } else if (type == VT_TYPE_Q8_0) { /* n is a multiple of 32 */
            for (int64_t b = 0; b < n / 32; b++) {
                const uint8_t *blk = row + (size_t)b * VT_CPU_Q8_0_BYTES;
                vf d = v_set1(f16_scalar(vt_cpu_rd16(blk)));
BODY_UNROLL(4)
                for (int u = 0; u < 32 / VW; u++)
                    v_store(p + b * 32 + u * VW, v_mul(v_load_i8(blk + 2 + u * VW), d));
            }
        } else {
            for (; i + VW <= n; i += VW) v_store(p + i, w_vec(type, row, i));
            for (; i < n; i++) p[i] = w_elem(type, row, i);
        }
    }
}

/*
 * One row group of R rows, rows [0, nr) of them real (wk: row 0 at column
 * k0, x at column k0), columns [k0, k0 + n), × the chunk's n_tok tokens.
 * SMALL: 0, or 2 / 3 for a chunk of that many tokens (R is then MM_R2(Q) /
 * MM_R3(Q)); panel_fn: the MM_PANEL function of height R.
 */
BODY_INLINE void mm_group(uint32_t type, const uint8_t *wk, size_t rb, int64_t n, const float *x,
                          int64_t ldx, float *y, int64_t ldy, int64_t nr, int64_t n_tok,
                          int first, float *scratch, mm_panel_fn panel_fn, const int R,
                          const int SMALL)
{
    const int64_t nv = n - n % VW;
    float *pw = scratch;             /* the panel: up to 8 rows of MM_KB */
    float *qd = scratch + 8 * MM_KB; /* Q8_0 scales for MM_FILL: [block][8 rows] */
    if (nr < R || (type != VT_TYPE_F32 && !SMALL && n_tok < MM_NT)) {
        mm_pack(type, wk, rb, n, pw, nr, R);
        if (2 * nr <= R) /* mostly padding: a row at a time instead */
            for (int64_t r = 0; r < nr; r++)
                mm_panel_r1(pw + r * MM_KB, MM_KB, nv, n, x, ldx, y + r, ldy, 1, first, 0, n_tok);
        else
            panel_fn(pw, MM_KB, nv, n, x, ldx, y, ldy, nr, first, 0, n_tok);
        return;
    }
    if (type == VT_TYPE_F32) {
        panel_fn((const float *)(const void *)wk, (int64_t)(rb / sizeof(float)), nv, n, x, ldx, y,
                 ldy, nr, first, 0, n_tok);
        return;
    }
    for (int r = 0; r < R; r++) /* tail columns: scalar, before any tile needs them */
        for (int64_t i = nv; i < n; i++) pw[r * MM_KB + i] = w_elem(type, wk + (size_t)r * rb, i);
    if (SMALL) {
        mm_tile(type, wk, rb, qd, pw, pw, MM_KB, nv, n, x, ldx, y, ldy, nr, first, R, SMALL,
                MM_CONVERT);
        return;
    }
    if (type == VT_TYPE_Q8_0) /* n is a multiple of 32 */
        for (int64_t b = 0; b < n / 32; b++)
            for (int r = 0; r < R; r++)
                qd[b * 8 + r] =
                    f16_scalar(vt_cpu_rd16(wk + (size_t)r * rb + (size_t)b * VT_CPU_Q8_0_BYTES));
    mm_tile(type, wk, rb, qd, pw, pw, MM_KB, nv, n, x, ldx, y, ldy, nr, first, R, MM_NT, MM_FILL);
    if (n_tok > MM_NT) panel_fn(pw, MM_KB, nv, n, x, ldx, y, ldy, nr, first, MM_NT, n_tok);
}

/* Every row of the slice in groups of R rows, for columns [k0, k0 + n). */
BODY_INLINE void mm_rows(uint32_t type, const uint8_t *w, size_t rb, int64_t k0, int64_t n,
                         const float *x, int64_t ldx, float *y, int64_t ldy, int64_t n_rows,
                         int64_t n_tok, float *scratch, mm_panel_fn panel_fn, const int R,
                         const int SMALL)
{
    const size_t off = mm_col_bytes(type, k0), len = mm_col_bytes(type, n);
    for (int64_t r = 0; r < n_rows; r += R) {
        const uint8_t *wk = w + (size_t)r * rb + off;
        int64_t nr = n_rows - r < R ? n_rows - r : R;
        if (n_tok >= MM_PF_TOKENS && r + 2 * R < n_rows) {
            int64_t pr0 = r + 2 * R, pnr = n_rows - pr0 < R ? n_rows - pr0 : R;
            mm_prefetch(w + (size_t)pr0 * rb + off, rb, len, pnr);
        }
        mm_group(type, wk, rb, n, x + k0, ldx, y + r, ldy, nr, n_tok, k0 == 0, scratch, panel_fn,
                 R, SMALL);
    }
}

/* A chunk of 2..VT_CPU_MM_TOK_CHUNK tokens × every row of the slice. */
BODY_INLINE void mm_chunk(uint32_t type, const uint8_t *w, size_t rb, int64_t n_in, const float *x,
                          int64_t ldx, float *y, int64_t ldy, int64_t n_rows, int64_t n_tok,
                          float *scratch)
{
    const int q8 = type == VT_TYPE_Q8_0;
    for (int64_t k0 = 0; k0 < n_in; k0 += MM_KB) {
        int64_t n = n_in - k0 < MM_KB ? n_in - k0 : MM_KB;
        if (n_tok == 2)
            mm_rows(type, w, rb, k0, n, x, ldx, y, ldy, n_rows, 2, scratch,
                    q8 ? mm_panel_r2q : mm_panel_r2, q8 ? MM_R2Q : MM_R2, 2);
        else if (n_tok == 3)
            mm_rows(type, w, rb, k0, n, x, ldx, y, ldy, n_rows, 3, scratch,
                    q8 ? mm_panel_r3q : mm_panel_r3, q8 ? MM_R3Q : MM_R3, 3);
        else
            mm_rows(type, w, rb, k0, n, x, ldx, y, ldy, n_rows, n_tok, scratch, mm_panel_r, MM_R, 0);
    }
}

BODY_INLINE void mm_all(uint32_t type, const uint8_t *w, size_t rb, int64_t n_in, const float *x,
                        int64_t ldx, float *y, int64_t ldy, int64_t n_rows, int64_t n_tok,
                        float *scratch)
{
    for (int64_t t = 0; t < n_tok; t += VT_CPU_MM_TOK_CHUNK) {
        int64_t nt = n_tok - t < VT_CPU_MM_TOK_CHUNK ? n_tok - t : VT_CPU_MM_TOK_CHUNK;
        if (nt == 1)
            mm_rows_1tok(type, w, rb, n_in, x + t * ldx, y + t * ldy, n_rows);
        else
            mm_chunk(type, w, rb, n_in, x + t * ldx, ldx, y + t * ldy, ldy, n_rows, nt, scratch);
    }
}

#define MM_FN(NAME, TYPE)                                                                      \
    static void NAME(const uint8_t *w, size_t rb, int64_t n_in, const float *x, int64_t ldx,  \
                     float *y, int64_t ldy, int64_t n_rows, int64_t n_tok, float *scratch)     \
    {                                                                                          \
        mm_all(TYPE, w, rb, n_in, x, ldx, y, ldy, n_rows, n_tok, scratch);                     \
    }
#define MM_DIRECT_DEF(T, n) MM_FN(mm_##n, VT_TYPE_##T)
VT_CPU_DIRECT_TYPES(MM_DIRECT_DEF)
#undef MM_DIRECT_DEF

/*
 * The other block-quantised types (Q4_0 ... MXFP4) on the float path (prefill,
 * and decode when the integer path is off): per chunk of tokens and column
 * block, each row group's block is dequantised exactly into the panel
 * (vt_cpu_dequant_row_fast: the reference's bits; a few KiB in L1, never a copy of the
 * matrix), then multiplied by the MM_PANEL tiles, so every output is summed
 * as for the other types and the same for every thread count. MM_KB is a
 * multiple of every block size (32, 256) and a row is whole blocks.
 */
BODY_INLINE void mm_blocks(uint32_t type, const uint8_t *w, size_t rb, int64_t n_in, const float *x,
                           int64_t ldx, float *y, int64_t ldy, int64_t n_rows, int64_t n_tok,
                           float *scratch)
{
    const int64_t bs = vt_type_block_size(type);
    const size_t ts = vt_type_size(type);
    for (int64_t t = 0; t < n_tok; t += VT_CPU_MM_TOK_CHUNK) {
        int64_t nt = n_tok - t < VT_CPU_MM_TOK_CHUNK ? n_tok - t : VT_CPU_MM_TOK_CHUNK;
        const float *xt = x + t * ldx;
        float *yt = y + t * ldy;
        for (int64_t k0 = 0; k0 < n_in; k0 += MM_KB) {
            int64_t n = n_in - k0 < MM_KB ? n_in - k0 : MM_KB;
            const int64_t nv = n - n % VW;
            const size_t off = (size_t)(k0 / bs) * ts;
            for (int64_t r = 0; r < n_rows; r += MM_R) {
                int64_t nr = n_rows - r < MM_R ? n_rows - r : MM_R;
                for (int64_t g = 0; g < MM_R; g++) {
                    float *p = scratch + g * MM_KB;
                    if (g < nr)
                        vt_cpu_dequant_row_fast(type, w + (size_t)(r + g) * rb + off, n, p);
                    else
                        memset(p, 0, (size_t)n * sizeof(float));
                }
                if (2 * nr <= MM_R)
                    for (int64_t g = 0; g < nr; g++)
                        mm_panel_r1(scratch + g * MM_KB, MM_KB, nv, n, xt + k0, ldx, yt + r + g, ldy,
                                    1, k0 == 0, 0, nt);
                else
                    mm_panel_r(scratch, MM_KB, nv, n, xt + k0, ldx, yt + r, ldy, nr, k0 == 0, 0, nt);
            }
        }
    }
}

#define MM_BLOCKS_FN(NAME, TYPE)                                                               \
    static void NAME(const uint8_t *w, size_t rb, int64_t n_in, const float *x, int64_t ldx,  \
                     float *y, int64_t ldy, int64_t n_rows, int64_t n_tok, float *scratch)     \
    {                                                                                          \
        mm_blocks(TYPE, w, rb, n_in, x, ldx, y, ldy, n_rows, n_tok, scratch);                  \
    }
#define MM_BLOCKS_DEF(T, n) MM_BLOCKS_FN(mm_##n, VT_TYPE_##T)
VT_CPU_PANEL_TYPES(MM_BLOCKS_DEF)
VT_CPU_EXT_TYPES(MM_BLOCKS_DEF)
#undef MM_BLOCKS_DEF

/* ---- small vector helpers ---- */

/* y[i] = x[i] · s */
BODY_INLINE void scale_f32(const float *x, float *y, int64_t n, float s)
{
    vf sv = v_set1(s);
    int64_t i = 0;
    for (; i + VW <= n; i += VW) v_store(y + i, v_mul(v_load(x + i), sv));
    for (; i < n; i++) y[i] = x[i] * s;
}

BODY_INLINE vf v_sigmoid(vf x)
{
    vf one = v_set1(1.0f);
    return v_div(one, v_add(one, v_exp(v_sub(v_zero(), x))));
}

/* ---- norms ---- */

static void rms_norm_row(const float *x, const float *w, float *y, int64_t n, float eps)
{
    double s = sumsq_d(x, n);
    float sc = (float)(1.0 / sqrt(s / (double)n + (double)eps));
    if (!w) {
        scale_f32(x, y, n, sc);
        return;
    }
    vf sv = v_set1(sc);
    int64_t i = 0;
    for (; i + VW <= n; i += VW) v_store(y + i, v_mul(v_mul(v_load(x + i), sv), v_load(w + i)));
    for (; i < n; i++) y[i] = (x[i] * sc) * w[i];
}

static void l2_norm_row(const float *x, float *y, int64_t n, float eps)
{
    double s = sumsq_d(x, n);
    scale_f32(x, y, n, (float)(1.0 / fmax(sqrt(s), (double)eps)));
}

/* ---- attention: one query head of one token ---- */

/* q·k of one key, from its reduced accumulator a and the tail dims [hv, hd). */
BODY_INLINE float attn_dot_tail(float a, const float *q, const float *kp, int64_t hv, int64_t hd)
{
    for (int64_t e = hv; e < hd; e++) a = fmaf(q[e], kp[e], a);
    return a;
}

/* scores[s] = scale·(q·k_s) for s0 <= s < s1, four keys per pass over q: one
 * vector accumulator per key, reduced by v_hsum4 (a lone key as (a, a, a, a),
 * so every key's score is formed the same way). */
BODY_INLINE void attn_scores(const float *q, const float *k, int64_t ld_kv, int64_t hd, int64_t s0,
                             int64_t s1, float scale, float *scores)
{
    const int64_t hv = hd - hd % VW;
    int64_t s = s0;
    for (; s + 4 <= s1; s += 4) {
        const float *k0 = k + s * ld_kv, *k1 = k0 + ld_kv, *k2 = k1 + ld_kv, *k3 = k2 + ld_kv;
        vf a0 = v_zero(), a1 = v_zero(), a2 = v_zero(), a3 = v_zero();
        for (int64_t e = 0; e < hv; e += VW) {
            vf qv = v_load(q + e);
            a0 = v_fma(qv, v_load(k0 + e), a0);
            a1 = v_fma(qv, v_load(k1 + e), a1);
            a2 = v_fma(qv, v_load(k2 + e), a2);
            a3 = v_fma(qv, v_load(k3 + e), a3);
        }
        float o[4];
        v_hsum4(a0, a1, a2, a3, o);
        scores[s] = attn_dot_tail(o[0], q, k0, hv, hd) * scale;
        scores[s + 1] = attn_dot_tail(o[1], q, k1, hv, hd) * scale;
        scores[s + 2] = attn_dot_tail(o[2], q, k2, hv, hd) * scale;
        scores[s + 3] = attn_dot_tail(o[3], q, k3, hv, hd) * scale;
    }
    for (; s < s1; s++) {
        const float *kp = k + s * ld_kv;
        vf a = v_zero();
        for (int64_t e = 0; e < hv; e += VW) a = v_fma(v_load(q + e), v_load(kp + e), a);
        float o[4];
        v_hsum4(a, a, a, a, o);
        scores[s] = attn_dot_tail(o[0], q, kp, hv, hd) * scale;
    }
}

static void attn_head(const float *q, const float *k, const float *v, int64_t ld_kv, int64_t hd,
                      int64_t s0, int64_t s1, float scale, float softcap, float *scores,
                      double *acc, float *out)
{
    (void)acc;
    attn_scores(q, k, ld_kv, hd, s0, s1, scale, scores);
    float *sc = scores + s0;
    const int64_t n = s1 - s0;
    int64_t i;
    if (softcap > 0.0f) {
        vf cv = v_set1(softcap), ic = v_set1(1.0f / softcap);
        for (i = 0; i + VW <= n; i += VW) v_store(sc + i, v_mul(cv, v_tanh(v_mul(v_load(sc + i), ic))));
        for (; i < n; i++) sc[i] = softcap * tanhf(sc[i] / softcap);
    }
    vf mv = v_set1(-INFINITY);
    for (i = 0; i + VW <= n; i += VW) mv = v_max(mv, v_load(sc + i));
    float mx = v_hmax(mv);
    for (; i < n; i++) mx = sc[i] > mx ? sc[i] : mx;
    vf sumv = v_zero(), mxv = v_set1(mx);
    for (i = 0; i + VW <= n; i += VW) {
        vf p = v_exp(v_sub(v_load(sc + i), mxv));
        v_store(sc + i, p);
        sumv = v_add(sumv, p);
    }
    float sum = v_hsum(sumv);
    for (; i < n; i++) {
        sc[i] = expf(sc[i] - mx);
        sum += sc[i];
    }
    /* out = Σ p_s v_s, four positions per pass over out */
    for (int64_t e = 0; e < hd; e++) out[e] = 0.0f;
    int64_t s = 0;
    for (; s + 4 <= n; s += 4) {
        const float *v0 = v + (s0 + s) * ld_kv;
        vf p0 = v_set1(sc[s]), p1 = v_set1(sc[s + 1]), p2 = v_set1(sc[s + 2]), p3 = v_set1(sc[s + 3]);
        int64_t e = 0;
        for (; e + VW <= hd; e += VW) {
            vf o = v_load(out + e);
            o = v_fma(p0, v_load(v0 + e), o);
            o = v_fma(p1, v_load(v0 + ld_kv + e), o);
            o = v_fma(p2, v_load(v0 + 2 * ld_kv + e), o);
            o = v_fma(p3, v_load(v0 + 3 * ld_kv + e), o);
            v_store(out + e, o);
        }
        for (; e < hd; e++) {
            float o = out[e];
            o = fmaf(sc[s], v0[e], o);
            o = fmaf(sc[s + 1], v0[ld_kv + e], o);
            o = fmaf(sc[s + 2], v0[2 * ld_kv + e], o);
            o = fmaf(sc[s + 3], v0[3 * ld_kv + e], o);
            out[e] = o;
        }
    }
    for (; s < n; s++) {
        const float *vs = v + (s0 + s) * ld_kv;
        vf p = v_set1(sc[s]);
        int64_t e = 0;
        for (; e + VW <= hd; e += VW) v_store(out + e, v_fma(p, v_load(vs + e), v_load(out + e)));
        for (; e < hd; e++) out[e] = fmaf(sc[s], vs[e], out[e]);
    }
    scale_f32(out, out, hd, 1.0f / sum);
}

/* ---- gated delta rule, one value head (qwen35moe.md §5.7.4) ----
 * Column j of S evolves from column j, k, q, v_j, g and β alone, so the head
 * is done in column strips of NV·VW columns kept in registers for every token.
 * Per token t: S ← e^{g_t}·S, m = Sᵀk_t, δ = β_t(v_t − m), S ← S + k_t δᵀ,
 * o_t = Sᵀq_t. One pass over the strip's rows does the second half of token t
 * and the first half of token t+1 (same operations, same order, as two
 * passes), so S is loaded and stored once per token. */

BODY_INLINE void delta_strip(const float *q, const float *k, int64_t ldqk, const float *v,
                             int64_t ldv, const float *g, const float *beta, int64_t ld_gb,
                             float *S, int64_t ld_s, float *out, int64_t ldo, int64_t n_tokens,
                             int64_t d_k, const int NV)
{
    vf m[2];
    { /* token 0: decay and m = Sᵀk */
        vf eg = v_set1(expf(g[0]));
BODY_UNROLL(2)
        for (int u = 0; u < NV; u++) m[u] = v_zero();
        for (int64_t i = 0; i < d_k; i++) {
            vf ki = v_set1(k[i]);
            float *row = S + i * ld_s;
BODY_UNROLL(2)
            for (int u = 0; u < NV; u++) {
                vf sv = v_mul(v_load(row + u * VW), eg);
                v_store(row + u * VW, sv);
                m[u] = v_fma(sv, ki, m[u]);
            }
        }
    }
    for (int64_t t = 0; t < n_tokens; t++) {
        const float *qt = q + t * ldqk, *kt = k + t * ldqk;
        vf b = v_set1(beta[t * ld_gb]), o[2], dl[2], mn[2];
BODY_UNROLL(2)
        for (int u = 0; u < NV; u++) {
            dl[u] = v_mul(b, v_sub(v_load(v + t * ldv + u * VW), m[u]));
            o[u] = v_zero();
            mn[u] = v_zero();
        }
        if (t + 1 < n_tokens) { /* update for t, decay and m for t+1 */
            const float *kn = kt + ldqk;
            vf egn = v_set1(expf(g[(t + 1) * ld_gb]));
            for (int64_t i = 0; i < d_k; i++) {
                vf ki = v_set1(kt[i]), qi = v_set1(qt[i]), kni = v_set1(kn[i]);
                float *row = S + i * ld_s;
BODY_UNROLL(2)
                for (int u = 0; u < NV; u++) {
                    vf sv = v_fma(ki, dl[u], v_load(row + u * VW));
                    o[u] = v_fma(sv, qi, o[u]);
                    sv = v_mul(sv, egn);
                    v_store(row + u * VW, sv);
                    mn[u] = v_fma(sv, kni, mn[u]);
                }
            }
        } else { /* last token: update only */
            for (int64_t i = 0; i < d_k; i++) {
                vf ki = v_set1(kt[i]), qi = v_set1(qt[i]);
                float *row = S + i * ld_s;
BODY_UNROLL(2)
                for (int u = 0; u < NV; u++) {
                    vf sv = v_fma(ki, dl[u], v_load(row + u * VW));
                    v_store(row + u * VW, sv);
                    o[u] = v_fma(sv, qi, o[u]);
                }
            }
        }
BODY_UNROLL(2)
        for (int u = 0; u < NV; u++) {
            v_store(out + t * ldo + u * VW, o[u]);
            m[u] = mn[u];
        }
    }
}

/* Scalar strip of one column (d_v tails). */
static void delta_col(const float *q, const float *k, int64_t ldqk, const float *v, int64_t ldv,
                      const float *g, const float *beta, int64_t ld_gb, float *S, int64_t ld_s,
                      float *out, int64_t ldo, int64_t n_tokens, int64_t d_k)
{
    for (int64_t t = 0; t < n_tokens; t++) {
        const float *qt = q + t * ldqk, *kt = k + t * ldqk;
        float eg = expf(g[t * ld_gb]), m = 0.0f, o = 0.0f;
        for (int64_t i = 0; i < d_k; i++) {
            S[i * ld_s] *= eg;
            m = fmaf(S[i * ld_s], kt[i], m);
        }
        float dl = beta[t * ld_gb] * (v[t * ldv] - m);
        for (int64_t i = 0; i < d_k; i++) {
            S[i * ld_s] = fmaf(kt[i], dl, S[i * ld_s]);
            o = fmaf(S[i * ld_s], qt[i], o);
        }
        out[t * ldo] = o;
    }
}

static void delta_head(const float *q, const float *k, int64_t ldqk, const float *v, int64_t ldv,
                       const float *g, const float *beta, int64_t ld_gb, float *S, int64_t ld_s,
                       float *out, int64_t ldo, int64_t n_tokens, int64_t d_k, int64_t d_v,
                       double *scratch)
{
    (void)scratch;
    int64_t j = 0;
    for (; j + 2 * VW <= d_v; j += 2 * VW)
        delta_strip(q, k, ldqk, v + j, ldv, g, beta, ld_gb, S + j, ld_s, out + j, ldo, n_tokens,
                    d_k, 2);
    for (; j + VW <= d_v; j += VW)
        delta_strip(q, k, ldqk, v + j, ldv, g, beta, ld_gb, S + j, ld_s, out + j, ldo, n_tokens,
                    d_k, 1);
    for (; j < d_v; j++)
        delta_col(q, k, ldqk, v + j, ldv, g, beta, ld_gb, S + j, ld_s, out + j, ldo, n_tokens, d_k);
}

/* ---- elementwise ---- */

/* gelu_tanh(x) = 0.5x(1 + tanh(u)) = x·sigmoid(2u), u = sqrt(2/pi)(x + 0.044715x³):
 * the sigmoid form has no cancellation for negative x. */
BODY_INLINE vf v_gelu_tanh(vf x)
{
    vf x3 = v_mul(v_mul(x, x), x);
    vf u2 = v_mul(v_set1(2.0f * 0.79788456080286535588f), v_fma(v_set1(0.044715f), x3, x));
    vf one = v_set1(1.0f);
    return v_div(x, v_add(one, v_exp(v_sub(v_zero(), u2))));
}

BODY_INLINE vf v_silu(vf x)
{
    vf one = v_set1(1.0f);
    return v_div(x, v_add(one, v_exp(v_sub(v_zero(), x))));
}

/* The vector function of op on one vector (softplus has none: -1). */
BODY_INLINE int unary_vec(vt_unary_op op, vf x, vf *y)
{
    switch (op) {
    case VT_UNARY_SILU: *y = v_silu(x); return 0;
    case VT_UNARY_SIGMOID: *y = v_sigmoid(x); return 0;
    case VT_UNARY_GELU_TANH: *y = v_gelu_tanh(x); return 0;
    case VT_UNARY_EXP: *y = v_exp(x); return 0;
    case VT_UNARY_TANH: *y = v_tanh(x); return 0;
    default: return -1;
    }
}

/* Every element through the same vector function, the last n % VW too (in a
 * zero-padded vector), so an element's result does not depend on where it
 * lies in the array: a token's activations come out the same alone and in a
 * batch (batch invariance: issue 43 item 5; the tail took the scalar
 * reference, whose rounding differs). Softplus: the reference throughout. */
static void unary(vt_unary_op op, const float *x, float *y, int64_t n)
{
    int64_t i = 0;
    switch (op) {
    case VT_UNARY_SILU:
        for (; i + VW <= n; i += VW) v_store(y + i, v_silu(v_load(x + i)));
        break;
    case VT_UNARY_SIGMOID:
        for (; i + VW <= n; i += VW) v_store(y + i, v_sigmoid(v_load(x + i)));
        break;
    case VT_UNARY_GELU_TANH:
        for (; i + VW <= n; i += VW) v_store(y + i, v_gelu_tanh(v_load(x + i)));
        break;
    case VT_UNARY_EXP:
        for (; i + VW <= n; i += VW) v_store(y + i, v_exp(v_load(x + i)));
        break;
    case VT_UNARY_TANH:
        for (; i + VW <= n; i += VW) v_store(y + i, v_tanh(v_load(x + i)));
        break;
    case VT_UNARY_SOFTPLUS: /* needs log1p: the reference, element by element */
        break;
    }
    if (i < n && op != VT_UNARY_SOFTPLUS) {
        float buf[VW] __attribute__((aligned(64)));
        memset(buf, 0, sizeof buf);
        memcpy(buf, x + i, (size_t)(n - i) * sizeof(float));
        vf r;
        if (unary_vec(op, v_load(buf), &r) == 0) {
            v_store(buf, r);
            memcpy(y + i, buf, (size_t)(n - i) * sizeof(float));
            return;
        }
    }
    for (; i < n; i++) y[i] = vt_cpu_unary_ref(op, x[i]);
}

static void binary(vt_binary_op op, const float *a, const float *b, float *y, int64_t n_rows,
                   int64_t nb)
{
    if (nb == 1) { /* one b for every element */
        vf bv = v_set1(b[0]);
        int64_t i = 0;
        if (op == VT_BINARY_ADD) {
            for (; i + VW <= n_rows; i += VW) v_store(y + i, v_add(v_load(a + i), bv));
            for (; i < n_rows; i++) y[i] = a[i] + b[0];
        } else {
            for (; i + VW <= n_rows; i += VW) v_store(y + i, v_mul(v_load(a + i), bv));
            for (; i < n_rows; i++) y[i] = a[i] * b[0];
        }
        return;
    }
    for (int64_t r = 0; r < n_rows; r++) {
        const float *ar = a + r * nb;
        float *yr = y + r * nb;
        int64_t c = 0;
        if (op == VT_BINARY_ADD) {
            for (; c + VW <= nb; c += VW) v_store(yr + c, v_add(v_load(ar + c), v_load(b + c)));
            for (; c < nb; c++) yr[c] = ar[c] + b[c];
        } else {
            for (; c + VW <= nb; c += VW) v_store(yr + c, v_mul(v_load(ar + c), v_load(b + c)));
            for (; c < nb; c++) yr[c] = ar[c] * b[c];
        }
    }
}

static void scale(const float *x, float *y, int64_t n, float s) { scale_f32(x, y, n, s); }

static void mul_rows(const float *x, const float *s, float *y, int64_t n_rows, int64_t n_cols)
{
    for (int64_t r = 0; r < n_rows; r++) scale_f32(x + r * n_cols, y + r * n_cols, n_cols, s[r]);
}

/* ---- causal depthwise conv + SiLU (qwen35moe.md §5.7.2) ----
 * Channels VW at a time: the block's d_conv taps are gathered once into
 * vectors (w is [channel][tap]), then every token is d_conv FMAs of whole
 * vectors from the state or x rows. Per channel, whichever loop runs: y = 0,
 * one FMA per tap in tap order, then SiLU (vector SiLU for the channels of
 * whole vectors, the reference's past them). Slices start at multiples of 64
 * channels (cpu_ops.c), so which channels those are does not depend on the split. */

#define CONV_MAX_TAPS 16

static void ssm_conv(const float *x, int64_t ldx, const float *w, float *state, int64_t ld_state,
                     float *y, int64_t ldy, int64_t n_tokens, int64_t n_ch, int64_t d_conv)
{
    const int64_t K1 = d_conv - 1;
    /* gathering the taps costs about a token's FMAs: not worth it for a few tokens */
    const int64_t nvc = d_conv <= CONV_MAX_TAPS && n_tokens >= 4 ? n_ch - n_ch % VW : 0;
    for (int64_t c = 0; c < nvc; c += VW) {
        float wt[CONV_MAX_TAPS][VW];
        for (int64_t kk = 0; kk < d_conv; kk++)
            for (int l = 0; l < VW; l++) wt[kk][l] = w[(c + l) * d_conv + kk];
        for (int64_t t = 0; t < n_tokens; t++) {
            vf acc = v_zero();
            for (int64_t kk = 0; kk < d_conv; kk++) {
                int64_t col = t + kk; /* column of X = [state, x] */
                const float *src = col < K1 ? state + col * ld_state : x + (col - K1) * ldx;
                acc = v_fma(v_load(wt[kk]), v_load(src + c), acc);
            }
            v_store(y + t * ldy + c, v_silu(acc));
        }
    }
    /* channels past the vectors (all of them for a few tokens or many taps) */
    const int64_t nv_all = n_ch - n_ch % VW;
    for (int64_t t = 0; t < n_tokens && nvc < n_ch; t++) {
        float *yt = y + t * ldy;
        for (int64_t c = nvc; c < n_ch; c++) yt[c] = 0.0f;
        for (int64_t kk = 0; kk < d_conv; kk++) {
            int64_t col = t + kk;
            const float *src = col < K1 ? state + col * ld_state : x + (col - K1) * ldx;
            for (int64_t c = nvc; c < n_ch; c++) yt[c] = fmaf(w[c * d_conv + kk], src[c], yt[c]);
        }
        for (int64_t c = nvc; c < nv_all; c += VW) v_store(yt + c, v_silu(v_load(yt + c)));
        for (int64_t c = nv_all; c < n_ch; c++) yt[c] = vt_cpu_unary_ref(VT_UNARY_SILU, yt[c]);
    }
    for (int64_t j = 0; j < K1; j++) {
        int64_t col = n_tokens + j;
        const float *src = col < K1 ? state + col * ld_state : x + (col - K1) * ldx;
        memmove(state + j * ld_state, src, (size_t)n_ch * sizeof(float));
    }
}

const vt_cpu_kernels KSET = {
    .name = KNAME,
    .isa = KISA,
    .lanes = VW,
    .supported = KSUPPORTED,
    .mat_mul = {VT_CPU_DIRECT_TYPES(VT_CPU_MM_INIT) VT_CPU_PANEL_TYPES(VT_CPU_MM_INIT)
                    VT_CPU_EXT_TYPES(VT_CPU_MM_INIT)},
    .rms_norm_row = rms_norm_row,
    .l2_norm_row = l2_norm_row,
    .attn_head = attn_head,
    .delta_head = delta_head,
    .ssm_conv = ssm_conv,
    .unary = unary,
    .binary = binary,
    .scale = scale,
    .mul_rows = mul_rows,
};
