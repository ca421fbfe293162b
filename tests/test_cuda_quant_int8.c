/*
 * test_cuda_quant_int8.c - the int8-activation paths of backend-cuda
 * (one-token matvecs, the MoE op, prefill on rounded activations) against
 * the scalar reference (one program with test_cuda_quant.c; see its
 * header).
 */
#include <dlfcn.h>
#include <float.h>
#include <math.h>

#include "test_util.h"
#include "test_quant_blocks.h"
#include "test_cuda_quant.h"

#include "cpu_internal.h"
#include "error.h"
#include "registry.h"
#include "vt/backend.h"
#include "vt/gguf.h"

/* ------------------------------------------------- 3b. int8 activations */

/* The types with int8 kernels (gpu_matvec.cu); every other type takes the
 * float kernel on qctx too. */
static int has_int8(uint32_t t)
{
    return t == VT_TYPE_Q8_0 || t == VT_TYPE_Q4_0 || t == VT_TYPE_Q4_1 || t == VT_TYPE_Q5_0 ||
           t == VT_TYPE_Q5_1 || t == VT_TYPE_IQ4_NL || t == VT_TYPE_Q4_K || t == VT_TYPE_Q5_K ||
           t == VT_TYPE_Q6_K || tqb_is_lowbit(t);
}

/* One token through qctx: against Σ w_i·x̂_i in double (x̂ the rounded
 * activations, w the reference dequantisation) for the int8 types, against
 * Σ w_i·x_i for the others. The integer sums are exact; the block scales are
 * applied in float32 and the units summed in float32 (lanes, then a shuffle
 * tree), so as in mm_case |Δ| <= 8·sqrt(n_in)·u·(||w_o|| + ||m_o||)·||x̂||,
 * where m is the min term of Q4_1, Q5_1, Q4_K and Q5_K (−dmin·m per element, the row decoded with its
 * codes zeroed), which the kernel scales separately and which may cancel
 * against the code term. nan_at >= 0 puts a NaN at that column: every output
 * must be NaN. */
static void mm_int8_case(const qtype *q, int64_t n_in, int64_t n_out, int nan_at)
{
    size_t rb;
    uint8_t *wh = make_weight(q, n_in, n_out, 0, &rb);
    float *wf = ref_rows(q->id, wh, rb, n_in, n_out);
    float *wm = NULL;
    /* the min terms alone (codes zeroed from byte `cz` of each block on) */
    const size_t cz = q->id == VT_TYPE_Q4_K || q->id == VT_TYPE_Q5_K   ? 16
                      : q->id == VT_TYPE_Q4_1 || q->id == VT_TYPE_Q5_1 ? 4
                                                                       : 0;
    if (cz) {
        uint8_t *w0 = malloc(rb * (size_t)n_out);
        assert_non_null(w0);
        memcpy(w0, wh, rb * (size_t)n_out);
        for (size_t b = 0; b < rb * (size_t)n_out / (size_t)q->bytes; b++)
            memset(w0 + (size_t)q->bytes * b + cz, 0, (size_t)q->bytes - cz);
        wm = ref_rows(q->id, w0, rb, n_in, n_out);
        free(w0);
    }
    float *x = fbuf((size_t)n_in);
    for (int64_t i = 0; i < n_in; i++) x[i] = urand(-1.0f, 1.0f);
    if (n_in >= 96) /* a block with a large value and one of tiny ones */
        for (int i = 0; i < 32; i++) x[i] = i == 3 ? 7.5f : x[i], x[64 + i] *= 1e-6f;
    if (nan_at >= 0) x[nan_at] = NAN;
    double *xh = calloc((size_t)n_in, sizeof(double));
    assert_non_null(xh);
    const int int8 = has_int8(q->id);
    if (int8) round_int8(x, n_in, xh);
    else
        for (int64_t i = 0; i < n_in; i++) xh[i] = x[i];
    double xn = 0;
    for (int64_t i = 0; i < n_in; i++) xn += xh[i] * xh[i];
    const int64_t ny = n_out + 3;
    float *yg = fbuf((size_t)ny);
    for (int64_t k = 0; k < ny; k++) yg[k] = 1234.5f;
    void *wd = dput(wh, rb * (size_t)n_out);
    float *xd = dput(x, sizeof(float) * (size_t)n_in), *yd = dput(yg, sizeof(float) * (size_t)ny);
    vt_weight wg = {q->id, n_in, n_out, rb, wd, "test.w"};
    OKC(MM(q->id)(qctx, &wg, xd, n_in, yd, ny, 1));
    dget(yg, yd, sizeof(float) * (size_t)ny);
    char what[160];
    snprintf(what, sizeof what, "%s one token, n_in %lld n_out %lld%s %s", q->name,
             (long long)n_in, (long long)n_out, nan_at >= 0 ? " NaN" : "",
             int8 ? "[int8]" : "[float]");
    double worst = 0, max_abs = 0;
    for (int64_t o = 0; o < ny; o++) {
        if (o >= n_out) {
            if (yg[o] != 1234.5f) fail_msg("%s: padding %lld written (%g)", what, (long long)o, yg[o]);
            continue;
        }
        if (nan_at >= 0) {
            if (!isnan(yg[o])) fail_msg("%s: row %lld is %g, not NaN", what, (long long)o, yg[o]);
            continue;
        }
        double ref = 0, wn = 0, mn = 0;
        for (int64_t i = 0; i < n_in; i++) {
            ref += (double)wf[o * n_in + i] * xh[i];
            wn += (double)wf[o * n_in + i] * wf[o * n_in + i];
            if (wm) mn += (double)wm[o * n_in + i] * wm[o * n_in + i];
        }
        double tol = 8.0 * sqrt((double)n_in) * U32 * (sqrt(wn) + sqrt(mn)) * sqrt(xn);
        double d = fabs((double)yg[o] - ref);
        if (d > max_abs) max_abs = d;
        if (tol > 0 && d / tol > worst) worst = d / tol;
        if (!(d <= tol))
            fail_msg("%s: row %lld: cuda %.9g, reference %.9g (|d| %.3g > tol %.3g)", what,
                     (long long)o, (double)yg[o], ref, d, tol);
    }
    if (worst > g_worst) g_worst = worst;
    fprintf(stderr, "  %-58s max|d| %.3g  worst d/tol %.3g\n", what, max_abs, worst);
    dfree(wd);
    dfree(xd);
    dfree(yd);
    free(yg);
    free(xh);
    free(x);
    free(wm);
    free(wf);
    free(wh);
}

void test_mat_mul_int8(void **s)
{
    (void)s;
    if (!ready()) return;
    g_worst = g_worst_tc = 0;
    for (int k = 0; k < N_QTYPES; k++) {
        const qtype *q = &QTYPES[k];
        /* one unit per row up to ~70 per lane group; rows per warp 1 .. 32 */
        const int64_t n_ins[] = {q->qk == 32 ? 32 : 256, q->qk == 32 ? 160 : 1280, 2048,
                                 q->qk == 32 ? 4128 : 4352};
        const int64_t n_outs[] = {1, 7, 333, 1000};
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 4; b++) mm_int8_case(q, n_ins[a], n_outs[b], -1);
        mm_int8_case(q, 2048, 9, 37);
        if (has_int8(q->id)) /* more rows than one pass of the grid (grid-stride) */
            mm_int8_case(q, q->qk == 32 ? 64 : 256, 20011, -1);
    }
    fprintf(stderr, "  one-token mat_mul on the int8 context: worst |d|/tol %.3g\n", g_worst);
}


/* One matmul of w (host wh, device wd) on device x against the reference on
 * the rounded activations xh (host copy of x), by mm_int8_case's bound. */
static float *g_ydev; /* check_one's output: allocated before the ops it checks (an allocation
                       * forgets rounded activations) */

static void check_one(const char *what, const qtype *q, const uint8_t *wh, void *wd, size_t rb,
                      int64_t n_in, int64_t n_out, const float *xdev)
{
    float *x = fbuf((size_t)n_in), *y = fbuf((size_t)n_out);
    /* the matmul first: the copies below forget rounded activations, and it
     * must see the rounding state the caller left */
    float *yd = g_ydev;
    vt_weight wg = {q->id, n_in, n_out, rb, wd, "test.w"};
    OKC(MM(q->id)(qctx, &wg, xdev, n_in, yd, n_out, 1));
    dget(x, xdev, sizeof(float) * (size_t)n_in);
    float *wf = ref_rows(q->id, wh, rb, n_in, n_out);
    double *xh = calloc((size_t)n_in, sizeof(double));
    assert_non_null(xh);
    round_int8(x, n_in, xh);
    dget(y, yd, sizeof(float) * (size_t)n_out);
    double xn = 0;
    for (int64_t i = 0; i < n_in; i++) xn += xh[i] * xh[i];
    for (int64_t o = 0; o < n_out; o++) {
        double ref = 0, wn = 0;
        for (int64_t i = 0; i < n_in; i++) {
            ref += (double)wf[o * n_in + i] * xh[i];
            wn += (double)wf[o * n_in + i] * wf[o * n_in + i];
        }
        /* Q6_K and Q8_0 only here: no min term */
        double tol = 8.0 * sqrt((double)n_in) * U32 * sqrt(wn) * sqrt(xn);
        if (!(fabs((double)y[o] - ref) <= tol))
            fail_msg("%s: row %lld: cuda %.9g, reference %.9g (tol %.3g): stale rounded "
                     "activations?", what, (long long)o, (double)y[o], ref, tol);
    }
    fprintf(stderr, "  %-58s ok\n", what);
    free(xh);
    free(wf);
    free(x);
    free(y);
}

/* The rounded activations are shared by the one-token matmuls of one input
 * (gpu_matvec.cu, ctx->xq_src) and must be redone whenever the input may have
 * changed: after another op wrote it, a copy into it, or a matmul whose
 * output overlaps it. */
void test_int8_rounding_reuse(void **s)
{
    (void)s;
    if (!ready()) return;
    const qtype *q6 = &QTYPES[9], *q8 = &QTYPES[4];
    assert_int_equal(q6->id, VT_TYPE_Q6_K);
    assert_int_equal(q8->id, VT_TYPE_Q8_0);
    const int64_t n = 512, n_out = 77;
    size_t rb6, rb8;
    uint8_t *w6 = make_weight(q6, n, n_out, 0, &rb6), *w8 = make_weight(q8, n, n_out, 0, &rb8);
    void *d6 = dput(w6, rb6 * (size_t)n_out), *d8 = dput(w8, rb8 * (size_t)n_out);
    /* buf: x = buf[0..n), another input buf[n..2n) */
    float *hb = fbuf((size_t)(2 * n));
    for (int64_t i = 0; i < 2 * n; i++) hb[i] = urand(-1.0f, 1.0f);
    float *buf = dput(hb, sizeof(float) * (size_t)(2 * n));
    g_ydev = dput(NULL, sizeof(float) * 128);
    check_one("Q6_K on x", q6, w6, d6, rb6, n, n_out, buf);
    check_one("Q8_0 on the same x (its rounding reused)", q8, w8, d8, rb8, n, n_out, buf);
    OKC(G->scale(qctx, buf, buf, n, 3.0f)); /* another op writes x */
    check_one("Q6_K after scale wrote x", q6, w6, d6, rb6, n, n_out, buf);
    for (int64_t i = 0; i < n; i++) hb[i] = urand(-2.0f, 2.0f);
    OKC(G->copy_h2d(qctx, buf, hb, sizeof(float) * (size_t)n)); /* a copy into x */
    check_one("Q8_0 after copy_h2d into x", q8, w8, d8, rb8, n, n_out, buf);
    /* a matmul (F32, n x n) from buf[n..] whose output is x itself */
    float *wf = fbuf((size_t)(n * n));
    for (int64_t i = 0; i < n * n; i++) wf[i] = urand(-0.1f, 0.1f);
    void *dwf = dput(wf, sizeof(float) * (size_t)(n * n));
    vt_weight wg = {VT_TYPE_F32, n, n, sizeof(float) * (size_t)n, dwf, "test.f32"};
    check_one("Q6_K on x again", q6, w6, d6, rb6, n, n_out, buf);
    OKC(MM(VT_TYPE_F32)(qctx, &wg, buf + n, n, buf, n, 1));
    check_one("Q6_K after a matmul wrote x", q6, w6, d6, rb6, n, n_out, buf);
    /* a matmul of x into another buffer keeps x's rounding, and x is unchanged */
    float *other = dput(NULL, sizeof(float) * (size_t)n);
    OKC(MM(VT_TYPE_F32)(qctx, &wg, buf, n, other, n, 1));
    check_one("Q8_0 on x after a matmul read it", q8, w8, d8, rb8, n, n_out, buf);
    dfree(other);
    /* a one-row rms_norm rounds its output as it stores it (gpu_norm.cu,
     * 1024 threads x up to 4 values): the matmul right after reads that
     * rounding; an element-wise op writing elsewhere keeps it, one writing
     * into the normed row must not */
    static const int64_t norm_ns[] = {512, 2048, 2816, 4096};
    for (size_t c = 0; c < sizeof norm_ns / sizeof norm_ns[0]; c++) {
        const int64_t nn = norm_ns[c], no = 33;
        size_t rbn;
        uint8_t *wn = make_weight(q8, nn, no, 0, &rbn);
        void *dwn = dput(wn, rbn * (size_t)no);
        float *xn = fbuf((size_t)nn), *gam = fbuf((size_t)nn);
        for (int64_t i = 0; i < nn; i++) xn[i] = urand(-3.0f, 3.0f), gam[i] = urand(0.5f, 1.5f);
        float *dxn = dput(xn, sizeof(float) * (size_t)nn), *dgam = dput(gam, sizeof(float) * (size_t)nn);
        float *dyn = dput(NULL, sizeof(float) * (size_t)nn);
        OKC(G->rms_norm(qctx, dxn, nn, dgam, dyn, nn, 1, nn, 1e-6f));
        char what[96];
        snprintf(what, sizeof what, "Q8_0 on rms_norm's output, n %lld", (long long)nn);
        check_one(what, q8, wn, dwn, rbn, nn, no, dyn);
        OKC(G->rms_norm(qctx, dxn, nn, dgam, dyn, nn, 1, nn, 1e-6f));
        OKC(G->unary(qctx, VT_UNARY_SILU, dgam, dgam, nn)); /* another buffer: kept */
        OKC(G->binary(qctx, VT_BINARY_MUL, dgam, dxn, dgam, nn, nn));
        snprintf(what, sizeof what, "Q8_0 on rms_norm's output after ops elsewhere, n %lld",
                 (long long)nn);
        check_one(what, q8, wn, dwn, rbn, nn, no, dyn);
        OKC(G->rms_norm(qctx, dxn, nn, dgam, dyn, nn, 1, nn, 1e-6f));
        OKC(G->unary(qctx, VT_UNARY_SIGMOID, dyn, dyn, nn)); /* into the normed row */
        snprintf(what, sizeof what, "Q8_0 after unary wrote rms_norm's output, n %lld", (long long)nn);
        check_one(what, q8, wn, dwn, rbn, nn, no, dyn);
        OKC(G->rms_norm(qctx, dxn, nn, dgam, dyn, nn, 1, nn, 1e-6f));
        OKC(G->binary(qctx, VT_BINARY_ADD, dgam, dgam, dyn + nn / 2, nn / 2, nn / 2)); /* half of it */
        snprintf(what, sizeof what, "Q8_0 after binary wrote half of rms_norm's output, n %lld",
                 (long long)nn);
        check_one(what, q8, wn, dwn, rbn, nn, no, dyn);
        /* add_rms_norm (ABI 1.3) rounds its one-row output the same way */
        OKC(G->add_rms_norm(qctx, dxn, nn, dgam, nn, NULL, dgam, dyn, nn, 1, nn, 1e-6f));
        snprintf(what, sizeof what, "Q8_0 on add_rms_norm's output, n %lld", (long long)nn);
        check_one(what, q8, wn, dwn, rbn, nn, no, dyn);
        OKC(G->add_rms_norm(qctx, dxn, nn, dgam, nn, dgam + 1, dgam, dyn, nn, 1, nn, 1e-6f));
        snprintf(what, sizeof what, "Q8_0 on add_rms_norm's output, gated, n %lld", (long long)nn);
        check_one(what, q8, wn, dwn, rbn, nn, no, dyn);
        OKC(G->add_rms_norm(qctx, dxn, nn, dgam, nn, NULL, dgam, dyn, nn, 1, nn, 1e-6f));
        OKC(G->add_rms_norm(qctx, dxn, nn, dgam, nn, NULL, NULL, NULL, nn, 1, nn, 1e-6f));
        OKC(G->copy_d2d(qctx, dyn, dxn, sizeof(float) * (size_t)nn)); /* y changed: redone */
        snprintf(what, sizeof what, "Q8_0 after a copy into add_rms_norm's output, n %lld",
                 (long long)nn);
        check_one(what, q8, wn, dwn, rbn, nn, no, dyn);
        /* mul_act (ABI 1.3) rounds a contiguous output of up to 16384 values:
         * one row, and 16 rows of nn / 16 */
        OKC(G->mul_act(qctx, VT_UNARY_SILU, dxn, nn, dgam, nn, dyn, nn, 1, nn));
        snprintf(what, sizeof what, "Q8_0 on mul_act's output, n %lld", (long long)nn);
        check_one(what, q8, wn, dwn, rbn, nn, no, dyn);
        OKC(G->mul_act(qctx, VT_UNARY_SIGMOID, dxn, nn / 16, dgam, nn / 16, dyn, nn / 16, 16, nn / 16));
        snprintf(what, sizeof what, "Q8_0 on mul_act's output, 16 rows of %lld", (long long)nn / 16);
        check_one(what, q8, wn, dwn, rbn, nn, no, dyn);
        OKC(G->mul_act(qctx, VT_UNARY_SILU, dxn, nn, dgam, nn, dyn, nn, 1, nn));
        OKC(G->mul_act(qctx, VT_UNARY_SILU, dyn, nn, dgam, nn, dyn, nn, 1, nn)); /* in place: redone */
        snprintf(what, sizeof what, "Q8_0 on mul_act's output in place, n %lld", (long long)nn);
        check_one(what, q8, wn, dwn, rbn, nn, no, dyn);
        OKC(G->rms_norm(qctx, dxn, nn, dgam, dxn, nn, 1, nn, 1e-6f)); /* in place */
        snprintf(what, sizeof what, "Q8_0 on rms_norm's output in place, n %lld", (long long)nn);
        check_one(what, q8, wn, dwn, rbn, nn, no, dxn);
        dfree(dwn);
        dfree(dxn);
        dfree(dgam);
        dfree(dyn);
        free(wn);
        free(xn);
        free(gam);
    }
    dfree(g_ydev);
    dfree(dwf);
    dfree(buf);
    dfree(d6);
    dfree(d8);
    free(wf);
    free(hb);
    free(w6);
    free(w8);
}

/* ---------------------------------------------------------------- 4. refusals */

void test_refusals(void **s)
{
    (void)s;
    if (!ready()) return;
    const qtype *q = &QTYPES[7]; /* Q4_K: 144-byte blocks, read in 32-bit words */
    assert_int_equal(q->id, VT_TYPE_Q4_K);
    size_t rb;
    uint8_t *wh = make_weight(q, 256, 3, 0, &rb);
    uint8_t *wd = dput(NULL, rb * 3 + 16);
    float *xd = dput(NULL, sizeof(float) * 256 * 2), *yd = dput(NULL, sizeof(float) * 3 * 2);
    int32_t id = 1;
    vt_weight wg = {q->id, 256, 3, rb, wd + 2, "test.misaligned"};
    vt_clear_error();
    assert_int_equal(MM(q->id)(gctx, &wg, xd, 256, yd, 3, 1), VT_ERR_INVALID_ARG);
    assert_non_null(strstr(vt_last_error(), "test.misaligned"));
    assert_non_null(strstr(vt_last_error(), "aligned"));
    vt_clear_error();
    assert_int_equal(GR(q->id)(gctx, &wg, &id, 1, yd), VT_ERR_INVALID_ARG);
    assert_non_null(strstr(vt_last_error(), "aligned"));
    /* n_in not a whole number of 256-value blocks, even with row_bytes 0 */
    vt_weight wb = {q->id, 128, 3, 0, wd, "test.partial"};
    vt_clear_error();
    assert_int_equal(MM(q->id)(gctx, &wb, xd, 256, yd, 3, 1), VT_ERR_INVALID_ARG);
    assert_non_null(strstr(vt_last_error(), "test.partial"));
    fprintf(stderr, "  refusals: misaligned Q4_K data and a partial block are refused by name\n");
    dfree(wd);
    dfree(xd);
    dfree(yd);
    free(wh);
}
