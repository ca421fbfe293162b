/*
 * cpu_kernels_scalar.c - the "scalar" kernel set: plain C, the float32
 * reference every other kernel set (and every other backend) is tested
 * against.
 *
 * Rules: activations stay float32 (never rounded to a narrower type); weights
 * are dequantised to float32 exactly (cpu_dequant.c); every dot product and
 * every sum is accumulated in double and rounded once; transcendental
 * functions are evaluated in double and rounded once. The state of the delta
 * net stays float32 between steps as the model defines it
 * (qwen35moe.md §6: recurrent state is float32).
 * Selected with vt_backend_params.kernels = "scalar" or env VT_KERNELS=scalar.
 */
#include <math.h>

#include "cpu_internal.h"

/* ---- elementwise functions (qwen35moe.md §5.1, backend.h vt_unary_op) ---- */

float vt_cpu_unary_ref(vt_unary_op op, float xf)
{
    double x = xf;
    switch (op) {
    case VT_UNARY_SILU:
        return (float)(x / (1.0 + exp(-x)));
    case VT_UNARY_SIGMOID:
        return (float)(1.0 / (1.0 + exp(-x)));
    case VT_UNARY_SOFTPLUS:
        return xf > 20.0f ? xf : (float)log1p(exp(x));
    case VT_UNARY_GELU_TANH: {
        /* 0.5x(1 + tanh(u)) = x / (1 + e^(-2u)): the same function without the
         * cancellation of 1 + tanh(u) for u << 0 (which loses every digit below
         * x ≈ -7 even in double) */
        const double c = 0.79788456080286535588; /* sqrt(2/pi) */
        double u = c * (x + 0.044715 * x * x * x);
        return (float)(x / (1.0 + exp(-2.0 * u)));
    }
    case VT_UNARY_EXP:
        return (float)exp(x);
    case VT_UNARY_TANH:
        return (float)tanh(x);
    }
    return xf;
}

/* ---- matmul: dequantise one row, dot with every token in double ---- */

static void mm_scalar(uint32_t type, const uint8_t *w, size_t row_bytes, int64_t n_in,
                      const float *x, int64_t ldx, float *y, int64_t ldy, int64_t n_rows,
                      int64_t n_tok, float *scratch)
{
    for (int64_t r = 0; r < n_rows; r++) {
        vt_cpu_dequant_row(type, w + (size_t)r * row_bytes, n_in, scratch);
        for (int64_t t = 0; t < n_tok; t++) {
            const float *xt = x + t * ldx;
            double s = 0.0;
            for (int64_t i = 0; i < n_in; i++) s += (double)scratch[i] * (double)xt[i];
            y[t * ldy + r] = (float)s;
        }
    }
}

#define MM_SCALAR(NAME, TYPE)                                                                  \
    static void NAME(const uint8_t *w, size_t rb, int64_t n_in, const float *x, int64_t ldx,  \
                     float *y, int64_t ldy, int64_t n_rows, int64_t n_tok, float *scratch)     \
    {                                                                                          \
        mm_scalar(TYPE, w, rb, n_in, x, ldx, y, ldy, n_rows, n_tok, scratch);                  \
    }
#define MM_SCALAR_DEF(T, n) MM_SCALAR(mm_##n, VT_TYPE_##T)
VT_CPU_DIRECT_TYPES(MM_SCALAR_DEF)
VT_CPU_PANEL_TYPES(MM_SCALAR_DEF)
VT_CPU_EXT_TYPES(MM_SCALAR_DEF)
#undef MM_SCALAR_DEF

/* ---- norms ---- */

static void rms_norm_row(const float *x, const float *w, float *y, int64_t n, float eps)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
    float sc = (float)(1.0 / sqrt(s / (double)n + (double)eps));
    if (w)
        for (int64_t i = 0; i < n; i++) y[i] = (x[i] * sc) * w[i];
    else
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * sc;
}

static void l2_norm_row(const float *x, float *y, int64_t n, float eps)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
    float sc = (float)(1.0 / fmax(sqrt(s), (double)eps));
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * sc;
}

/* ---- attention: one query head of one token ---- */

static void attn_head(const float *q, const float *k, const float *v, int64_t ld_kv,
                      int64_t hd, int64_t s0, int64_t s1, float scale, float softcap,
                      float *scores, double *acc, float *out)
{
    float mx = -INFINITY;
    for (int64_t s = s0; s < s1; s++) {
        const float *ks = k + s * ld_kv;
        double d = 0.0;
        for (int64_t e = 0; e < hd; e++) d += (double)q[e] * (double)ks[e];
        float sc = (float)(d * (double)scale);
        if (softcap > 0.0f) sc = (float)((double)softcap * tanh((double)sc / (double)softcap));
        scores[s] = sc;
        if (sc > mx) mx = sc;
    }
    double sum = 0.0;
    for (int64_t s = s0; s < s1; s++) {
        float p = (float)exp((double)scores[s] - (double)mx);
        scores[s] = p;
        sum += p;
    }
    for (int64_t e = 0; e < hd; e++) acc[e] = 0.0;
    for (int64_t s = s0; s < s1; s++) {
        const float *vs = v + s * ld_kv;
        double p = scores[s];
        for (int64_t e = 0; e < hd; e++) acc[e] += p * (double)vs[e];
    }
    for (int64_t e = 0; e < hd; e++) out[e] = (float)(acc[e] / sum);
}

/* ---- gated delta rule, one value head (qwen35moe.md §5.7.4) ---- */

static void delta_head(const float *q, const float *k, int64_t ldqk, const float *v, int64_t ldv,
                       const float *g, const float *beta, int64_t ld_gb, float *S, int64_t ld_s,
                       float *out, int64_t ldo, int64_t n_tokens, int64_t d_k, int64_t d_v,
                       double *scratch)
{
    double *m = scratch, *o = scratch + d_v;
    float *dl = (float *)(scratch + 2 * d_v);
    for (int64_t t = 0; t < n_tokens; t++) {
        const float *qt = q + t * ldqk, *kt = k + t * ldqk, *vt = v + t * ldv;
        float eg = (float)exp((double)g[t * ld_gb]);
        float b = beta[t * ld_gb];
        for (int64_t j = 0; j < d_v; j++) m[j] = 0.0;
        for (int64_t i = 0; i < d_k; i++) {
            float *row = S + i * ld_s;
            for (int64_t j = 0; j < d_v; j++) {
                row[j] *= eg;
                m[j] += (double)row[j] * (double)kt[i];
            }
        }
        for (int64_t j = 0; j < d_v; j++) dl[j] = b * (vt[j] - (float)m[j]);
        for (int64_t j = 0; j < d_v; j++) o[j] = 0.0;
        for (int64_t i = 0; i < d_k; i++) {
            float *row = S + i * ld_s;
            for (int64_t j = 0; j < d_v; j++) {
                row[j] += kt[i] * dl[j];
                o[j] += (double)row[j] * (double)qt[i];
            }
        }
        for (int64_t j = 0; j < d_v; j++) out[t * ldo + j] = (float)o[j];
    }
}

/* ---- causal depthwise conv + SiLU (qwen35moe.md §5.7.2) ---- */

static void ssm_conv(const float *x, int64_t ldx, const float *w, float *state, int64_t ld_state,
                     float *y, int64_t ldy, int64_t n_tokens, int64_t n_ch, int64_t d_conv)
{
    const int64_t K1 = d_conv - 1;
    for (int64_t c = 0; c < n_ch; c++) {
        const float *wc = w + c * d_conv;
        for (int64_t t = 0; t < n_tokens; t++) {
            double s = 0.0;
            for (int64_t kk = 0; kk < d_conv; kk++) {
                int64_t col = t + kk; /* column of X = [state, x] */
                float xv = col < K1 ? state[col * ld_state + c] : x[(col - K1) * ldx + c];
                s += (double)wc[kk] * (double)xv;
            }
            y[t * ldy + c] = vt_cpu_unary_ref(VT_UNARY_SILU, (float)s);
        }
        /* state <- the last K1 columns of X; reads ahead of writes, so in place is safe */
        for (int64_t j = 0; j < K1; j++) {
            int64_t col = n_tokens + j;
            state[j * ld_state + c] = col < K1 ? state[col * ld_state + c] : x[(col - K1) * ldx + c];
        }
    }
}

/* ---- elementwise ---- */

static void unary(vt_unary_op op, const float *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = vt_cpu_unary_ref(op, x[i]);
}

static void binary(vt_binary_op op, const float *a, const float *b, float *y, int64_t n_rows,
                   int64_t nb)
{
    for (int64_t r = 0; r < n_rows; r++) {
        const float *ar = a + r * nb;
        float *yr = y + r * nb;
        if (op == VT_BINARY_ADD)
            for (int64_t c = 0; c < nb; c++) yr[c] = ar[c] + b[c];
        else
            for (int64_t c = 0; c < nb; c++) yr[c] = ar[c] * b[c];
    }
}

static void scale(const float *x, float *y, int64_t n, float s)
{
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * s;
}

static void mul_rows(const float *x, const float *s, float *y, int64_t n_rows, int64_t n_cols)
{
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t c = 0; c < n_cols; c++) y[r * n_cols + c] = x[r * n_cols + c] * s[r];
}

static int always(void) { return 1; }

const vt_cpu_kernels vt_cpu_kernels_scalar = {
    .name = "scalar",
    .isa = "plain C reference, float32 with double accumulation",
    .lanes = 1,
    .supported = always,
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
