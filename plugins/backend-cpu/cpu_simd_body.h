/*
 * cpu_simd_body.h - the width-generic SIMD kernels of backend-cpu.
 *
 * Included once per instruction set (cpu_kernels_avx2.c, cpu_kernels_avx512.c,
 * cpu_kernels_avx2w16.c) after that file has defined, for its vector of VW
 * floats `vf`:
 *   v_zero v_set1 v_load v_store v_add v_sub v_mul v_div v_max v_fma(a,b,c)=a·b+c
 *   v_hsum v_hmax v_load_f16 v_load_bf16 v_load_i8 (VW elements from bytes)
 *   v_exp v_tanh, f16_scalar(uint16_t), sumsq_d(x, n) (double sum of squares),
 *   MM_R2..MM_R4 (rows per matmul tile for 2..4 tokens; at most 8),
 *   KSET (the vt_cpu_kernels object's name), KNAME, KISA, KSUPPORTED.
 *
 * Arithmetic: activations float32, weights dequantised to float32 exactly in
 * registers (Q8_0: d·q is exact), float32 products accumulated in float32 with
 * fused multiply-add. Only the order of summation (and FMA's single rounding)
 * differs from the scalar reference; tests/test_cpu_simd.c bounds that.
 * Tails (sizes not a multiple of VW) run the same arithmetic in scalar form.
 */

#include <math.h>

#define BODY_INLINE static inline __attribute__((always_inline))

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

/* R rows × NT tokens of an F32/F16/BF16 weight (type is a constant here). */
BODY_INLINE void mm_tile_flt(uint32_t type, const uint8_t *w, size_t rb, int64_t n_in,
                             const float *x, int64_t ldx, float *y, int64_t ldy, const int R,
                             const int NT)
{
    vf acc[8][4];
    const int64_t nv = n_in - n_in % VW;
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) acc[r][t] = v_zero();
    for (int64_t i = 0; i < nv; i += VW) {
        vf xv[4];
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) xv[t] = v_load(x + t * ldx + i);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            vf wv = w_vec(type, w + (size_t)r * rb, i);
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) acc[r][t] = v_fma(wv, xv[t], acc[r][t]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            float s = v_hsum(acc[r][t]);
            for (int64_t i = nv; i < n_in; i++)
                s = fmaf(w_elem(type, w + (size_t)r * rb, i), x[t * ldx + i], s);
            y[t * ldy + r] = s;
        }
}

/* R rows × NT tokens of a Q8_0 weight: per block, w = d·q in registers (exact). */
BODY_INLINE void mm_tile_q8(const uint8_t *w, size_t rb, int64_t n_in, const float *x,
                            int64_t ldx, float *y, int64_t ldy, const int R, const int NT)
{
    vf acc[8][4];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) acc[r][t] = v_zero();
    const int64_t nb = n_in / 32;
    for (int64_t b = 0; b < nb; b++) {
        vf d[8];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
            d[r] = v_set1(f16_scalar(vt_cpu_rd16(w + (size_t)r * rb + (size_t)b * VT_CPU_Q8_0_BYTES)));
#pragma GCC unroll 4
        for (int u = 0; u < 32 / VW; u++) {
            vf xv[4];
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) xv[t] = v_load(x + t * ldx + b * 32 + u * VW);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                const uint8_t *qs = w + (size_t)r * rb + (size_t)b * VT_CPU_Q8_0_BYTES + 2;
                vf wv = v_mul(v_load_i8(qs + u * VW), d[r]);
#pragma GCC unroll 4
                for (int t = 0; t < NT; t++) acc[r][t] = v_fma(wv, xv[t], acc[r][t]);
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) y[t * ldy + r] = v_hsum(acc[r][t]);
}

BODY_INLINE void mm_tile(uint32_t type, const uint8_t *w, size_t rb, int64_t n_in,
                         const float *x, int64_t ldx, float *y, int64_t ldy, const int R,
                         const int NT)
{
    if (type == VT_TYPE_Q8_0)
        mm_tile_q8(w, rb, n_in, x, ldx, y, ldy, R, NT);
    else
        mm_tile_flt(type, w, rb, n_in, x, ldx, y, ldy, R, NT);
}

/* One token (decode): each row is one sequential stream through memory (the
 * hardware prefetcher's best case; short rows of many interleaved streams are
 * not), with four independent accumulators to cover the FMA latency. */
BODY_INLINE void mm_rows_1tok(uint32_t type, const uint8_t *w, size_t rb, int64_t n_in,
                              const float *x, float *y, int64_t n_rows)
{
    const int64_t nv = n_in - n_in % VW;
    for (int64_t r = 0; r < n_rows; r++) {
        const uint8_t *row = w + (size_t)r * rb;
        vf a0 = v_zero(), a1 = v_zero(), a2 = v_zero(), a3 = v_zero();
        float s;
        if (type == VT_TYPE_Q8_0) {
            const int64_t nb = n_in / 32;
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *blk = row + (size_t)b * VT_CPU_Q8_0_BYTES;
                vf d = v_set1(f16_scalar(vt_cpu_rd16(blk)));
                const float *xb = x + b * 32;
                if (VW == 8) {
                    a0 = v_fma(v_mul(v_load_i8(blk + 2), d), v_load(xb), a0);
                    a1 = v_fma(v_mul(v_load_i8(blk + 2 + VW), d), v_load(xb + VW), a1);
                    a2 = v_fma(v_mul(v_load_i8(blk + 2 + 2 * VW), d), v_load(xb + 2 * VW), a2);
                    a3 = v_fma(v_mul(v_load_i8(blk + 2 + 3 * VW), d), v_load(xb + 3 * VW), a3);
                } else if (b & 1) {
                    a2 = v_fma(v_mul(v_load_i8(blk + 2), d), v_load(xb), a2);
                    a3 = v_fma(v_mul(v_load_i8(blk + 2 + VW), d), v_load(xb + VW), a3);
                } else {
                    a0 = v_fma(v_mul(v_load_i8(blk + 2), d), v_load(xb), a0);
                    a1 = v_fma(v_mul(v_load_i8(blk + 2 + VW), d), v_load(xb + VW), a1);
                }
            }
            s = v_hsum(v_add(v_add(a0, a1), v_add(a2, a3)));
        } else {
            int64_t i = 0;
            for (; i + 4 * VW <= nv; i += 4 * VW) {
                a0 = v_fma(w_vec(type, row, i), v_load(x + i), a0);
                a1 = v_fma(w_vec(type, row, i + VW), v_load(x + i + VW), a1);
                a2 = v_fma(w_vec(type, row, i + 2 * VW), v_load(x + i + 2 * VW), a2);
                a3 = v_fma(w_vec(type, row, i + 3 * VW), v_load(x + i + 3 * VW), a3);
            }
            for (; i < nv; i += VW) a0 = v_fma(w_vec(type, row, i), v_load(x + i), a0);
            s = v_hsum(v_add(v_add(a0, a1), v_add(a2, a3)));
            for (; i < n_in; i++) s = fmaf(w_elem(type, row, i), x[i], s);
        }
        y[r] = s;
    }
}

/* Every row of the slice for NT tokens: tiles of R rows, then single rows. */
BODY_INLINE void mm_rows(uint32_t type, const uint8_t *w, size_t rb, int64_t n_in, const float *x,
                         int64_t ldx, float *y, int64_t ldy, int64_t n_rows, const int R,
                         const int NT)
{
    int64_t r = 0;
    for (; r + R <= n_rows; r += R)
        mm_tile(type, w + (size_t)r * rb, rb, n_in, x, ldx, y + r, ldy, R, NT);
    for (; r < n_rows; r++) mm_tile(type, w + (size_t)r * rb, rb, n_in, x, ldx, y + r, ldy, 1, NT);
}

/* Token groups of 4 outermost: the slice's weight rows stay in cache across groups. */
BODY_INLINE void mm_all(uint32_t type, const uint8_t *w, size_t rb, int64_t n_in, const float *x,
                        int64_t ldx, float *y, int64_t ldy, int64_t n_rows, int64_t n_tok)
{
    int64_t t = 0;
    for (; t + 4 <= n_tok; t += 4)
        mm_rows(type, w, rb, n_in, x + t * ldx, ldx, y + t * ldy, ldy, n_rows, MM_R4, 4);
    switch (n_tok - t) {
    case 3: mm_rows(type, w, rb, n_in, x + t * ldx, ldx, y + t * ldy, ldy, n_rows, MM_R3, 3); break;
    case 2: mm_rows(type, w, rb, n_in, x + t * ldx, ldx, y + t * ldy, ldy, n_rows, MM_R2, 2); break;
    case 1: mm_rows_1tok(type, w, rb, n_in, x + t * ldx, y + t * ldy, n_rows); break;
    default: break;
    }
}

#define MM_FN(NAME, TYPE)                                                                      \
    static void NAME(const uint8_t *w, size_t rb, int64_t n_in, const float *x, int64_t ldx,  \
                     float *y, int64_t ldy, int64_t n_rows, int64_t n_tok, float *scratch)     \
    {                                                                                          \
        (void)scratch;                                                                         \
        mm_all(TYPE, w, rb, n_in, x, ldx, y, ldy, n_rows, n_tok);                              \
    }
MM_FN(mm_f32, VT_TYPE_F32)
MM_FN(mm_f16, VT_TYPE_F16)
MM_FN(mm_bf16, VT_TYPE_BF16)
MM_FN(mm_q8_0, VT_TYPE_Q8_0)

/* ---- small vector helpers ---- */

BODY_INLINE float dot_f32(const float *a, const float *b, int64_t n)
{
    vf s0 = v_zero(), s1 = v_zero();
    int64_t i = 0;
    for (; i + 2 * VW <= n; i += 2 * VW) {
        s0 = v_fma(v_load(a + i), v_load(b + i), s0);
        s1 = v_fma(v_load(a + i + VW), v_load(b + i + VW), s1);
    }
    for (; i + VW <= n; i += VW) s0 = v_fma(v_load(a + i), v_load(b + i), s0);
    float s = v_hsum(v_add(s0, s1));
    for (; i < n; i++) s = fmaf(a[i], b[i], s);
    return s;
}

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

static void attn_head(const float *q, const float *k, const float *v, int64_t ld_kv, int64_t hd,
                      int64_t s0, int64_t s1, float scale, float softcap, float *scores,
                      double *acc, float *out)
{
    (void)acc;
    for (int64_t s = s0; s < s1; s++) scores[s] = dot_f32(q, k + s * ld_kv, hd) * scale;
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
 * is done in column strips of 2·VW kept in registers for every token: one
 * pass over the strip's rows decays S and forms m = Sᵀk, a second adds k ⊗ δ
 * and forms o = Sᵀq. */

BODY_INLINE void delta_strip(const float *q, const float *k, int64_t ldqk, const float *v,
                             int64_t ldv, const float *g, const float *beta, int64_t ld_gb,
                             float *S, int64_t ld_s, float *out, int64_t ldo, int64_t n_tokens,
                             int64_t d_k, const int NV)
{
    for (int64_t t = 0; t < n_tokens; t++) {
        const float *qt = q + t * ldqk, *kt = k + t * ldqk;
        vf eg = v_set1(expf(g[t * ld_gb]));
        vf m[2], o[2], dl[2];
#pragma GCC unroll 2
        for (int u = 0; u < NV; u++) m[u] = v_zero();
        for (int64_t i = 0; i < d_k; i++) {
            vf ki = v_set1(kt[i]);
            float *row = S + i * ld_s;
#pragma GCC unroll 2
            for (int u = 0; u < NV; u++) {
                vf s = v_mul(v_load(row + u * VW), eg);
                v_store(row + u * VW, s);
                m[u] = v_fma(s, ki, m[u]);
            }
        }
        vf b = v_set1(beta[t * ld_gb]);
#pragma GCC unroll 2
        for (int u = 0; u < NV; u++) {
            dl[u] = v_mul(b, v_sub(v_load(v + t * ldv + u * VW), m[u]));
            o[u] = v_zero();
        }
        for (int64_t i = 0; i < d_k; i++) {
            vf ki = v_set1(kt[i]), qi = v_set1(qt[i]);
            float *row = S + i * ld_s;
#pragma GCC unroll 2
            for (int u = 0; u < NV; u++) {
                vf s = v_fma(ki, dl[u], v_load(row + u * VW));
                v_store(row + u * VW, s);
                o[u] = v_fma(s, qi, o[u]);
            }
        }
#pragma GCC unroll 2
        for (int u = 0; u < NV; u++) v_store(out + t * ldo + u * VW, o[u]);
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

/* ---- causal depthwise conv + SiLU (qwen35moe.md §5.7.2) ---- */

static void ssm_conv(const float *x, int64_t ldx, const float *w, float *state, int64_t ld_state,
                     float *y, int64_t ldy, int64_t n_tokens, int64_t n_ch, int64_t d_conv)
{
    const int64_t K1 = d_conv - 1;
    for (int64_t t = 0; t < n_tokens; t++) {
        float *yt = y + t * ldy;
        for (int64_t c = 0; c < n_ch; c++) yt[c] = 0.0f;
        for (int64_t kk = 0; kk < d_conv; kk++) {
            int64_t col = t + kk;
            const float *src = col < K1 ? state + col * ld_state : x + (col - K1) * ldx;
            for (int64_t c = 0; c < n_ch; c++) yt[c] = fmaf(w[c * d_conv + kk], src[c], yt[c]);
        }
        int64_t c = 0;
        for (; c + VW <= n_ch; c += VW) v_store(yt + c, v_silu(v_load(yt + c)));
        for (; c < n_ch; c++) yt[c] = vt_cpu_unary_ref(VT_UNARY_SILU, yt[c]);
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
    .mat_mul = {[VT_TYPE_F32] = mm_f32, [VT_TYPE_F16] = mm_f16, [VT_TYPE_BF16] = mm_bf16,
                [VT_TYPE_Q8_0] = mm_q8_0},
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
