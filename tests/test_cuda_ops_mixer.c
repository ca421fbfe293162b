/*
 * test_cuda_ops_mixer.c - the mixers' ops of test_cuda_ops (one program with
 * test_cuda_ops.c, whose rig and tolerances it uses): attention over a
 * growing cache, ssm_conv, gated_delta_net, against backend-cpu's scalar
 * reference.
 */
#include <math.h>

#include "test_util.h"
#include "test_cuda_ops.h"

/* ---------------------------------------------------------------- attention */

static void attn_case(int64_t T, int64_t n_head, int64_t n_head_kv, int64_t hd, int64_t pos0,
                      int64_t window, float softcap)
{
    const int64_t n_kv = pos0 + T, ldq_head = 2 * hd, ldq = n_head * ldq_head + 3;
    const int64_t ldo = n_head * hd + 4, kvd = n_head_kv * hd;
    size_t nq = (size_t)(T * ldq), nkv = (size_t)(n_kv * kvd), no = (size_t)(T * ldo);
    float *q = fbuf(nq), *k = fbuf(nkv), *v = fbuf(nkv), *oc = fbuf(no), *og = fbuf(no);
    fill_u(q, nq, -1.0f, 1.0f);
    fill_u(k, nkv, -1.0f, 1.0f);
    fill_u(v, nkv, -2.0f, 2.0f);
    fill_c(oc, no, -3.0f);
    const float scale = 1.0f / sqrtf((float)hd);
    OKC(C->attention(cctx, q, ldq, ldq_head, k, v, oc, ldo, T, n_head, n_head_kv, hd, pos0, n_kv,
                     window, scale, softcap));
    float *qd = dput(q, nq * sizeof(float)), *kd = dput(k, nkv * sizeof(float));
    float *vd = dput(v, nkv * sizeof(float)), *od = dput(oc, no * sizeof(float));
    fill_c(og, no, -3.0f);
    G->copy_h2d(gctx, od, og, no * sizeof(float));
    OKC(G->attention(gctx, qd, ldq, ldq_head, kd, vd, od, ldo, T, n_head, n_head_kv, hd, pos0, n_kv,
                     window, scale, softcap));
    dget(og, od, no * sizeof(float));
    /* the bound of the header comment, from the data */
    double qmax = 0, kmax = 0, vmax = 0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < n_head; h++) {
            double s2 = 0;
            for (int64_t e = 0; e < hd; e++) s2 += (double)q[t * ldq + h * ldq_head + e] * q[t * ldq + h * ldq_head + e];
            if (s2 > qmax) qmax = s2;
        }
    for (int64_t r = 0; r < n_kv * n_head_kv; r++) {
        double s2 = 0;
        for (int64_t e = 0; e < hd; e++) s2 += (double)k[r * hd + e] * k[r * hd + e];
        if (s2 > kmax) kmax = s2;
    }
    for (size_t i = 0; i < nkv; i++)
        if (fabs(v[i]) > vmax) vmax = fabs(v[i]);
    double ds = ((double)hd / 32 + 6) * U32 * scale * sqrt(qmax) * sqrt(kmax);
    double tol = vmax * (4 * ds + 4 * ((double)n_kv / 4 + 16) * U32);
    char what[160];
    snprintf(what, sizeof what, "attention T %lld h %lld/%lld hd %lld pos0 %lld win %lld cap %g",
             (long long)T, (long long)n_head, (long long)n_head_kv, (long long)hd, (long long)pos0,
             (long long)window, (double)softcap);
    compare(what, og, oc, (int64_t)no, NULL, tol, 0.0);
    dfree(qd);
    dfree(kd);
    dfree(vd);
    dfree(od);
    free(q);
    free(k);
    free(v);
    free(oc);
    free(og);
}

void test_attention(void **s)
{
    (void)s;
    if (!ready()) return;
    attn_case(1, 4, 2, 64, 36, 0, 0.0f);    /* decode */
    attn_case(1, 8, 1, 128, 700, 0, 0.0f);  /* decode, long cache, GQA 8 */
    attn_case(17, 4, 2, 64, 5, 0, 0.0f);    /* prefill after a prefix */
    attn_case(64, 4, 4, 256, 0, 0, 0.0f);   /* prefill, no GQA, head_dim 256 */
    attn_case(33, 4, 2, 64, 10, 7, 0.0f);   /* sliding window */
    attn_case(3, 2, 1, 96, 40, 0, 30.0f);   /* softcap, odd head_dim */
    attn_case(5, 2, 2, 512, 3, 4, 50.0f);   /* head_dim 512, window, softcap */
    /* 16 tokens and more, with at least as many (token, head) pairs as the
     * device has SMs (fewer take the split kernel): the tiled kernel (16
     * queries x 32 keys per tile) */
    attn_case(16, 16, 2, 64, 0, 0, 0.0f);   /* exactly one query tile */
    attn_case(47, 8, 2, 128, 9, 0, 0.0f);   /* partial tiles, prefix not a tile multiple */
    attn_case(130, 16, 2, 256, 0, 0, 0.0f); /* Qwen3.5's full-attention shape */
    attn_case(100, 4, 4, 256, 3, 20, 0.0f); /* window shorter than a key tile */
    attn_case(70, 4, 2, 512, 0, 0, 0.0f);   /* head_dim 512: four column chunks */
    attn_case(65, 8, 8, 384, 200, 64, 0.0f); /* three chunks, window, long prefix */
    attn_case(33, 8, 2, 96, 0, 0, 30.0f);   /* softcap, head_dim 96 */
    attn_case(40, 8, 1, 90, 5, 0, 0.0f);    /* head_dim not a multiple of 4: scalar loads */
    /* beyond the kernel's head_dim: refused by name */
    float *p = dput(NULL, 4096 * sizeof(float));
    vt_clear_error();
    assert_int_equal(G->attention(gctx, p, 1024, 1024, p, p, p, 1024, 1, 1, 1, 1024, 0, 1, 0, 1.0f, 0.0f),
                     VT_ERR_UNSUPPORTED);
    assert_non_null(strstr(vt_last_error(), "attention"));
    dfree(p);
}

/* ---------------------------------------------------------------- linear attention */

static void conv_case(int64_t T, int64_t n_ch, int64_t d_conv)
{
    const int64_t ldx = n_ch + 8, ldy = n_ch + 2;
    float *x = strided(T, n_ch, ldx, -2.0f, 2.0f);
    float *w = fbuf((size_t)(n_ch * d_conv));
    fill_u(w, (size_t)(n_ch * d_conv), -1.0f, 1.0f);
    size_t ns = (size_t)((d_conv - 1) * n_ch), ny = (size_t)(T * ldy);
    float *sc = fbuf(ns + 1), *sg = fbuf(ns + 1), *yc = fbuf(ny), *yg = fbuf(ny);
    fill_u(sc, ns, -2.0f, 2.0f);
    memcpy(sg, sc, ns * sizeof(float));
    fill_c(yc, ny, 5.0f);
    float *xd = dput(x, sizeof(float) * (size_t)(T * ldx)), *wd = dput(w, sizeof(float) * (size_t)(n_ch * d_conv));
    float *sd = dput(sg, ns * sizeof(float)), *yd = dput(yc, ny * sizeof(float));
    OKC(C->ssm_conv(cctx, x, ldx, w, sc, yc, ldy, T, n_ch, d_conv));
    OKC(G->ssm_conv(gctx, xd, ldx, wd, sd, yd, ldy, T, n_ch, d_conv));
    dget(yg, yd, ny * sizeof(float));
    dget(sg, sd, ns * sizeof(float));
    char what[128];
    snprintf(what, sizeof what, "ssm_conv T %lld n_ch %lld d_conv %lld: y", (long long)T,
             (long long)n_ch, (long long)d_conv);
    compare(what, yg, yc, (int64_t)ny, NULL, 1e-30, 2.0 * U32);
    snprintf(what, sizeof what, "ssm_conv T %lld n_ch %lld d_conv %lld: state", (long long)T,
             (long long)n_ch, (long long)d_conv);
    compare(what, sg, sc, (int64_t)ns, NULL, 0.0, 0.0);
    dfree(xd);
    dfree(wd);
    dfree(sd);
    dfree(yd);
    free(x);
    free(w);
    free(sc);
    free(sg);
    free(yc);
    free(yg);
}

void test_ssm_conv(void **s)
{
    (void)s;
    if (!ready()) return;
    conv_case(1, 96, 4);
    conv_case(2, 1000, 4);
    conv_case(5, 1000, 4);
    conv_case(33, 513, 4);
    conv_case(64, 96, 3);
    /* token chunks of 16 (one thread per channel and chunk, then the state) */
    conv_case(16, 257, 4);
    conv_case(17, 130, 4);
    conv_case(50, 8192, 4);
    conv_case(31, 77, 5);
    conv_case(40, 64, 1);
}

static void l2_rows(float *p, int64_t rows, int64_t ld, int64_t n_heads, int64_t d, float sc)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t h = 0; h < n_heads; h++) {
            float *v = p + r * ld + h * d;
            double s2 = 0;
            for (int64_t i = 0; i < d; i++) s2 += (double)v[i] * v[i];
            for (int64_t i = 0; i < d; i++) v[i] = (float)(v[i] / sqrt(s2)) * sc;
        }
}

static void delta_case(int64_t T, int64_t n_k, int64_t n_v, int64_t d_k, int64_t d_v)
{
    const int64_t ldqk = n_k * d_k + 5, ldv = n_v * d_v + 3, ldo = n_v * d_v + 7;
    float *q = strided(T, n_k * d_k, ldqk, -1.0f, 1.0f), *k = strided(T, n_k * d_k, ldqk, -1.0f, 1.0f);
    l2_rows(q, T, ldqk, n_k, d_k, 1.0f / sqrtf((float)d_k));
    l2_rows(k, T, ldqk, n_k, d_k, 1.0f);
    float *v = strided(T, n_v * d_v, ldv, -1.0f, 1.0f);
    float *g = fbuf((size_t)(T * n_v)), *beta = fbuf((size_t)(T * n_v));
    fill_u(g, (size_t)(T * n_v), -2.0f, -0.01f);
    fill_u(beta, (size_t)(T * n_v), 0.05f, 0.95f);
    size_t ns = (size_t)(n_v * d_k * d_v), no = (size_t)(T * ldo);
    float *sc = fbuf(ns), *sg = fbuf(ns), *oc = fbuf(no), *og = fbuf(no);
    fill_u(sc, ns, -0.5f, 0.5f);
    memcpy(sg, sc, ns * sizeof(float));
    fill_c(oc, no, 9.0f);
    float *qd = dput(q, sizeof(float) * (size_t)(T * ldqk)), *kd = dput(k, sizeof(float) * (size_t)(T * ldqk));
    float *vd = dput(v, sizeof(float) * (size_t)(T * ldv)), *gd = dput(g, sizeof(float) * (size_t)(T * n_v));
    float *bd = dput(beta, sizeof(float) * (size_t)(T * n_v)), *sd = dput(sg, ns * sizeof(float));
    float *od = dput(oc, no * sizeof(float));
    OKC(C->gated_delta_net(cctx, q, k, ldqk, v, ldv, g, beta, sc, oc, ldo, T, n_k, n_v, d_k, d_v));
    OKC(G->gated_delta_net(gctx, qd, kd, ldqk, vd, ldv, gd, bd, sd, od, ldo, T, n_k, n_v, d_k, d_v));
    dget(og, od, no * sizeof(float));
    dget(sg, sd, ns * sizeof(float));
    double omax = 0, smax = 0;
    for (size_t i = 0; i < no; i++)
        if (fabs(oc[i]) > omax) omax = fabs(oc[i]);
    for (size_t i = 0; i < ns; i++)
        if (fabs(sc[i]) > smax) smax = fabs(sc[i]);
    char what[128];
    snprintf(what, sizeof what, "gated_delta_net T %lld n_k %lld n_v %lld d_k %lld d_v %lld: out",
             (long long)T, (long long)n_k, (long long)n_v, (long long)d_k, (long long)d_v);
    compare(what, og, oc, (int64_t)no, NULL, 64.0 * U32 * (double)T * omax, 0.0);
    snprintf(what, sizeof what, "gated_delta_net T %lld n_k %lld n_v %lld d_k %lld d_v %lld: state",
             (long long)T, (long long)n_k, (long long)n_v, (long long)d_k, (long long)d_v);
    compare(what, sg, sc, (int64_t)ns, NULL, 64.0 * U32 * (double)T * smax, 0.0);
    dfree(qd);
    dfree(kd);
    dfree(vd);
    dfree(gd);
    dfree(bd);
    dfree(sd);
    dfree(od);
    free(q);
    free(k);
    free(v);
    free(g);
    free(beta);
    free(sc);
    free(sg);
    free(oc);
    free(og);
}

void test_gated_delta_net(void **s)
{
    (void)s;
    if (!ready()) return;
    delta_case(1, 2, 4, 64, 64);   /* qwen35moe-tiny's shape, decode */
    delta_case(4, 2, 4, 64, 64);
    delta_case(33, 2, 4, 64, 64);
    delta_case(17, 1, 3, 32, 160); /* two column strips, odd d_v */
    delta_case(8, 16, 32, 128, 128); /* a real model's shape */
    delta_case(70, 16, 32, 128, 128); /* ... over a prefill chunk (registers kernel) */
    delta_case(9, 2, 3, 128, 72);  /* registers kernel: a partial strip of columns */
    delta_case(6, 1, 2, 256, 32);  /* registers kernel, d_k 256 */
    delta_case(5, 2, 3, 48, 40);   /* d_k without a registers kernel: the global-state one */
}
