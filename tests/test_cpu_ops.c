/*
 * test_cpu_ops.c - backend-cpu's scalar reference ops against naive
 * re-computations written here in double from the contracts in vt/backend.h
 * and the formulas of spec/qwen35moe.md §5 and spec/gguf.md §6; plus the
 * semantics that need no arithmetic: strides, GQA head mapping, sliding
 * window, conv/delta-net state carried across calls, scatter order,
 * softmax_topk ties and renorm floor, argument errors, and the thread pool
 * (every op is also run on 3 threads and must equal the 1-thread result bit
 * for bit: slices never change the arithmetic).
 *
 * Tolerance: the scalar kernels accumulate in double and round once, so they
 * agree with a double re-computation to a few float ulps; tests use
 * 8u·|y| + 8u·(scale of the inputs) (u = 2^-24) unless stated.
 */
#include <time.h>

#include "test_cpu_common.h"

/* sanitizers abort on an impossible allocation instead of returning NULL */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define VT_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define VT_TEST_ASAN 1
#endif
#endif
#ifndef VT_TEST_ASAN
#define VT_TEST_ASAN 0
#endif

#define NEAR(got, want, tol, ...)                                                              \
    do {                                                                                       \
        double g_ = (got), w_ = (want), t_ = (tol);                                            \
        if (!(fabs(g_ - w_) <= t_)) {                                                          \
            print_error(__VA_ARGS__);                                                          \
            fail_msg(" got %.9g want %.9g |diff| %.3g > tol %.3g", g_, w_, fabs(g_ - w_), t_); \
        }                                                                                      \
    } while (0)

static vt_backend_ctx *ref1, *ref3; /* scalar, 1 and 3 threads */

static int setup(void **state)
{
    (void)state;
    ref1 = tc_ctx("scalar", 1);
    ref3 = tc_ctx("scalar", 3);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tc_api()->shutdown(ref1);
    tc_api()->shutdown(ref3);
    return 0;
}

/* ---------------- half floats (gguf.md §6.1) ---------------- */

static void test_half_conversions(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float a = vt_cpu_f16_to_f32((uint16_t)h), b = tc_f16_to_f32((uint16_t)h);
        if (isnan(b)) {
            assert_true(isnan(a));
            continue;
        }
        if (memcmp(&a, &b, 4)) fail_msg("f16 0x%04x: %.9g, spec formula %.9g", h, (double)a, (double)b);
        float c = vt_cpu_bf16_to_f32((uint16_t)h), d = tc_bf16_to_f32((uint16_t)h);
        assert_memory_equal(&c, &d, 4);
    }
}

/* ---------------- mat_mul and get_rows ---------------- */

static void test_mat_mul(void **state)
{
    (void)state;
    const vt_backend_api *api = tc_api();
    tc_rng rng = {0xa11ce001};
    static const int64_t shapes[][3] = {{32, 1, 1}, {64, 3, 2}, {96, 17, 5}, {256, 33, 3}, {512, 200, 70}};
    for (int ti = 0; ti < 4; ti++)
        for (int si = 0; si < 5; si++) {
            uint32_t type = tc_types[ti];
            int64_t n_in = shapes[si][0], n_out = shapes[si][1], T = shapes[si][2];
            int64_t ldx = n_in + 1, ldy = n_out + 2;
            float *wf = tc_alloc_f(n_out * n_in), *x = tc_alloc_f(T * ldx);
            float *y1 = tc_alloc_f(T * ldy), *y3 = tc_alloc_f(T * ldy);
            tc_fill(&rng, wf, n_out * n_in, -1, 1);
            tc_fill(&rng, x, T * ldx, -1, 1);
            size_t rb;
            uint8_t *wd = tc_encode(type, wf, n_out, n_in, &rb);
            vt_weight w = {type, n_in, n_out, rb, wd, "w"};
            assert_int_equal(api->mat_mul[type](ref1, &w, x, ldx, y1, ldy, T), VT_OK);
            assert_int_equal(api->mat_mul[type](ref3, &w, x, ldx, y3, ldy, T), VT_OK);
            assert_memory_equal(y1, y3, sizeof(float) * (size_t)(T * ldy));
            for (int64_t t = 0; t < T; t++)
                for (int64_t r = 0; r < n_out; r++) {
                    double s = 0, mag = 0;
                    for (int64_t i = 0; i < n_in; i++) {
                        double p = (double)tc_decode(type, wd + r * rb, i) * x[t * ldx + i];
                        s += p;
                        mag += fabs(p);
                    }
                    NEAR(y1[t * ldy + r], s, 2 * TC_U * fabs(s) + 1e-12 * mag, "mat_mul %s t %lld r %lld\n",
                         vt_type_name(type), (long long)t, (long long)r);
                }
            /* get_rows: exact dequantisation of the chosen rows */
            int32_t ids[4] = {(int32_t)(n_out - 1), 0, (int32_t)(n_out / 2), 0};
            float *rows = tc_alloc_f(4 * n_in);
            assert_int_equal(api->get_rows[type](ref3, &w, ids, 4, rows), VT_OK);
            for (int i = 0; i < 4; i++)
                for (int64_t c = 0; c < n_in; c++) {
                    float want = tc_decode(type, wd + ids[i] * rb, c);
                    assert_memory_equal(&rows[i * n_in + c], &want, 4);
                }
            free(rows);
            free(wf);
            free(x);
            free(y1);
            free(y3);
            free(wd);
        }
}

static void test_mat_mul_errors(void **state)
{
    (void)state;
    const vt_backend_api *api = tc_api();
    float x[64] = {0}, y[4];
    uint8_t data[4 * 68] = {0};
    vt_weight w = {VT_TYPE_Q8_0, 64, 4, 68, data, "blk.7.ffn_down.weight"};
    assert_int_equal(api->mat_mul[VT_TYPE_F16](ref1, &w, x, 64, y, 4, 1), VT_ERR_INVALID_ARG);
    assert_non_null(strstr(tc_err, "blk.7.ffn_down.weight"));
    assert_non_null(strstr(tc_err, "Q8_0"));
    w.row_bytes = 64;
    assert_int_equal(api->mat_mul[VT_TYPE_Q8_0](ref1, &w, x, 64, y, 4, 1), VT_ERR_INVALID_ARG);
    assert_non_null(strstr(tc_err, "row_bytes"));
    w.row_bytes = 68;
    assert_int_equal(api->mat_mul[VT_TYPE_Q8_0](ref1, &w, x, 32, y, 4, 1), VT_ERR_INVALID_ARG);
    int32_t bad = 4;
    float out[64];
    assert_int_equal(api->get_rows[VT_TYPE_Q8_0](ref1, &w, &bad, 1, out), VT_ERR_RANGE);
    assert_non_null(strstr(tc_err, "blk.7.ffn_down.weight"));
    assert_int_equal(api->mat_mul[VT_TYPE_Q8_0](ref1, &w, x, 64, y, 4, 1), VT_OK);
}

/* ---------------- norms ---------------- */

static void test_norms(void **state)
{
    (void)state;
    const vt_backend_api *api = tc_api();
    tc_rng rng = {0xa11ce002};
    const int64_t R = 37, n = 300, ld = 301;
    float *x = tc_alloc_f(R * ld), *w = tc_alloc_f(n), *y = tc_alloc_f(R * ld), *y3 = tc_alloc_f(R * ld);
    tc_fill(&rng, x, R * ld, -4, 4);
    tc_fill(&rng, w, n, -2, 2);
    const float eps = 1e-6f;
    assert_int_equal(api->rms_norm(ref1, x, ld, w, y, ld, R, n, eps), VT_OK);
    assert_int_equal(api->rms_norm(ref3, x, ld, w, y3, ld, R, n, eps), VT_OK);
    assert_memory_equal(y, y3, sizeof(float) * (size_t)(R * ld));
    for (int64_t r = 0; r < R; r++) {
        double ss = 0;
        for (int64_t i = 0; i < n; i++) ss += (double)x[r * ld + i] * x[r * ld + i];
        double sc = 1.0 / sqrt(ss / n + eps);
        for (int64_t i = 0; i < n; i++) {
            double want = x[r * ld + i] * sc * w[i];
            NEAR(y[r * ld + i], want, 4 * TC_U * fabs(want), "rms_norm [%lld][%lld]\n", (long long)r, (long long)i);
        }
    }
    /* no weight, in place */
    memcpy(y, x, sizeof(float) * (size_t)(R * ld));
    assert_int_equal(api->rms_norm(ref1, y, ld, NULL, y, ld, R, n, eps), VT_OK);
    for (int64_t r = 0; r < R; r++) {
        double ss = 0;
        for (int64_t i = 0; i < n; i++) ss += (double)x[r * ld + i] * x[r * ld + i];
        for (int64_t i = 0; i < n; i++) {
            double want = x[r * ld + i] / sqrt(ss / n + eps);
            NEAR(y[r * ld + i], want, 4 * TC_U * fabs(want), "rms_norm no weight\n");
        }
    }
    /* l2: x / max(||x||, eps); a tiny row hits the eps floor */
    for (int64_t i = 0; i < n; i++) x[i] = 1e-9f;
    assert_int_equal(api->l2_norm(ref1, x, ld, y, ld, R, n, eps), VT_OK);
    for (int64_t r = 0; r < R; r++) {
        double ss = 0;
        for (int64_t i = 0; i < n; i++) ss += (double)x[r * ld + i] * x[r * ld + i];
        double den = fmax(sqrt(ss), eps);
        for (int64_t i = 0; i < n; i++) {
            double want = x[r * ld + i] / den;
            NEAR(y[r * ld + i], want, 4 * TC_U * fabs(want), "l2_norm [%lld][%lld]\n", (long long)r, (long long)i);
        }
    }
    NEAR(y[0], 1e-9 / 1e-6, 1e-9, "l2_norm eps floor\n");
    free(x);
    free(w);
    free(y);
    free(y3);
}

/* ---------------- RoPE (qwen35moe.md §5.5) ---------------- */

static void rope_naive(double *x, int64_t n_rot, int32_t pos, double base, const float *ff)
{
    for (int64_t i = 0; i < n_rot / 2; i++) {
        double th = pos * pow(base, -2.0 * i / n_rot);
        if (ff) th /= ff[i];
        double a = x[i], b = x[i + n_rot / 2];
        x[i] = a * cos(th) - b * sin(th);
        x[i + n_rot / 2] = a * sin(th) + b * cos(th);
    }
}

static void test_rope(void **state)
{
    (void)state;
    const vt_backend_api *api = tc_api();
    tc_rng rng = {0xa11ce003};
    const int64_t T = 5, H = 3, hd = 40, n_rot = 16, ld_head = 2 * hd, ld_tok = H * ld_head + 1;
    int32_t pos[5] = {0, 1, 17, 300, 4095};
    float ff[8];
    tc_fill(&rng, ff, 8, 1.0f, 4.0f);
    for (int use_ff = 0; use_ff < 2; use_ff++)
        for (int single = 0; single < 2; single++) {
            float *x = tc_alloc_f(T * ld_tok), *x0 = tc_alloc_f(T * ld_tok);
            tc_fill(&rng, x0, T * ld_tok, -1, 1);
            memcpy(x, x0, sizeof(float) * (size_t)(T * ld_tok));
            const float *f = use_ff ? ff : NULL;
            if (single) /* the decode path (one token per call; a cached table) */
                for (int64_t t = 0; t < T; t++) {
                    assert_int_equal(api->rope_neox(ref1, x + t * ld_tok, ld_tok, ld_head, 1, H, n_rot,
                                                    &pos[t], 1e4f, f), VT_OK);
                }
            else
                assert_int_equal(api->rope_neox(ref3, x, ld_tok, ld_head, T, H, n_rot, pos, 1e4f, f), VT_OK);
            for (int64_t t = 0; t < T; t++)
                for (int64_t h = 0; h < H; h++) {
                    double d[40];
                    const float *src = x0 + t * ld_tok + h * ld_head;
                    for (int i = 0; i < hd; i++) d[i] = src[i];
                    rope_naive(d, n_rot, pos[t], 1e4, f);
                    for (int i = 0; i < hd; i++)
                        NEAR(x[t * ld_tok + h * ld_head + i], d[i], 4 * TC_U * (fabs(src[i]) + 1.0),
                             "rope ff %d single %d t %lld h %lld i %d\n", use_ff, single, (long long)t,
                             (long long)h, i);
                    /* dims n_rot.. and the gate half untouched */
                    assert_memory_equal(x + t * ld_tok + h * ld_head + n_rot, src + n_rot,
                                        sizeof(float) * (size_t)(ld_head - n_rot));
                }
            free(x);
            free(x0);
        }
    /* the decode cache must notice changed freq factors at the same position and pointer */
    float a[16] = {1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, b[16];
    memcpy(b, a, sizeof a);
    int32_t p = 9;
    float ffa[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    assert_int_equal(api->rope_neox(ref1, a, 16, 16, 1, 1, 16, &p, 1e4f, ffa), VT_OK);
    ffa[0] = 2.0f;
    assert_int_equal(api->rope_neox(ref1, b, 16, 16, 1, 1, 16, &p, 1e4f, ffa), VT_OK);
    NEAR(b[0], cos(4.5), 1e-6, "rope cache: new freq factors ignored\n");
    NEAR(a[0], cos(9.0), 1e-6, "rope pos 9\n");
}

/* ---------------- attention (qwen35moe.md §5.4 step 6) ---------------- */

static void attn_naive(const float *q, int64_t ldq, int64_t ldq_head, const float *k, const float *v,
                       double *out, int64_t T, int64_t H, int64_t Hkv, int64_t hd, int64_t pos0,
                       int64_t window, double scale, double softcap)
{
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++) {
            int64_t kvh = h / (H / Hkv), p = pos0 + t;
            double sc[512], mx = -INFINITY, sum = 0;
            for (int64_t s = 0; s <= p; s++) {
                if (window > 0 && s <= p - window) {
                    sc[s] = -INFINITY;
                    continue;
                }
                double d = 0;
                for (int64_t e = 0; e < hd; e++) d += (double)q[t * ldq + h * ldq_head + e] * k[s * Hkv * hd + kvh * hd + e];
                d *= scale;
                if (softcap > 0) d = softcap * tanh(d / softcap);
                sc[s] = d;
                mx = fmax(mx, d);
            }
            for (int64_t s = 0; s <= p; s++) sum += sc[s] == -INFINITY ? 0 : exp(sc[s] - mx);
            for (int64_t e = 0; e < hd; e++) {
                double o = 0;
                for (int64_t s = 0; s <= p; s++)
                    if (sc[s] != -INFINITY) o += exp(sc[s] - mx) / sum * v[s * Hkv * hd + kvh * hd + e];
                out[(t * H + h) * hd + e] = o;
            }
        }
}

static void test_attention(void **state)
{
    (void)state;
    const vt_backend_api *api = tc_api();
    tc_rng rng = {0xa11ce004};
    const int64_t T = 4, H = 6, Hkv = 2, hd = 16, pos0 = 5, n_kv = pos0 + T;
    const int64_t ldq_head = 2 * hd, ldq = H * ldq_head, ldo = H * hd;
    float *q = tc_alloc_f(T * ldq), *k = tc_alloc_f(n_kv * Hkv * hd), *v = tc_alloc_f(n_kv * Hkv * hd);
    float *o = tc_alloc_f(T * ldo), *o3 = tc_alloc_f(T * ldo);
    double *want = malloc(sizeof(double) * (size_t)(T * H * hd));
    assert_non_null(want);
    tc_fill(&rng, q, T * ldq, -1, 1);
    tc_fill(&rng, k, n_kv * Hkv * hd, -1, 1);
    tc_fill(&rng, v, n_kv * Hkv * hd, -1, 1);
    static const struct {
        int64_t window;
        float softcap;
    } cases[] = {{0, 0.0f}, {1, 0.0f}, {3, 0.0f}, {0, 0.7f}, {2, 0.5f}};
    for (int c = 0; c < 5; c++) {
        assert_int_equal(api->attention(ref1, q, ldq, ldq_head, k, v, o, ldo, T, H, Hkv, hd, pos0, n_kv,
                                        cases[c].window, 0.9f, cases[c].softcap), VT_OK);
        assert_int_equal(api->attention(ref3, q, ldq, ldq_head, k, v, o3, ldo, T, H, Hkv, hd, pos0, n_kv,
                                        cases[c].window, 0.9f, cases[c].softcap), VT_OK);
        assert_memory_equal(o, o3, sizeof(float) * (size_t)(T * ldo));
        attn_naive(q, ldq, ldq_head, k, v, want, T, H, Hkv, hd, pos0, cases[c].window, 0.9f, cases[c].softcap);
        for (int64_t i = 0; i < T * H * hd; i++)
            NEAR(o[i], want[i], 1e-5 * (1 + fabs(want[i])), "attention case %d element %lld\n", c, (long long)i);
    }
    /* window 1: each query sees only itself -> out = its own v (GQA: kv head h / 3) */
    assert_int_equal(api->attention(ref1, q, ldq, ldq_head, k, v, o, ldo, T, H, Hkv, hd, pos0, n_kv, 1, 0.9f, 0.0f), VT_OK);
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t e = 0; e < hd; e++)
                NEAR(o[t * ldo + h * hd + e], v[(pos0 + t) * Hkv * hd + (h / 3) * hd + e], 1e-7,
                     "window 1 t %lld h %lld\n", (long long)t, (long long)h);
    /* errors: cache too short, bad GQA */
    assert_int_equal(api->attention(ref1, q, ldq, ldq_head, k, v, o, ldo, T, H, Hkv, hd, pos0, n_kv - 1, 0, 1, 0),
                     VT_ERR_INVALID_ARG);
    assert_non_null(strstr(tc_err, "n_kv"));
    assert_int_equal(api->attention(ref1, q, ldq, ldq_head, k, v, o, ldo, T, H, 4, hd, pos0, n_kv, 0, 1, 0),
                     VT_ERR_INVALID_ARG);
    free(q);
    free(k);
    free(v);
    free(o);
    free(o3);
    free(want);
}

/* ---------------- conv (qwen35moe.md §5.7.2) ---------------- */

static void test_ssm_conv(void **state)
{
    (void)state;
    const vt_backend_api *api = tc_api();
    tc_rng rng = {0xa11ce005};
    const int64_t C = 700, K = 4, T = 7, ld = C + 5;
    float *x = tc_alloc_f(T * ld), *w = tc_alloc_f(C * K), *st = tc_alloc_f((K - 1) * C),
          *st0 = tc_alloc_f((K - 1) * C), *y = tc_alloc_f(T * ld), *y2 = tc_alloc_f(T * ld),
          *stb = tc_alloc_f((K - 1) * C);
    tc_fill(&rng, x, T * ld, -2, 2);
    tc_fill(&rng, w, C * K, -1, 1);
    tc_fill(&rng, st0, (K - 1) * C, -2, 2);
    memcpy(st, st0, sizeof(float) * (size_t)((K - 1) * C));
    assert_int_equal(api->ssm_conv(ref3, x, ld, w, st, y, ld, T, C, K), VT_OK);
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < C; c++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++) {
                int64_t col = t + k;
                double xv = col < K - 1 ? st0[col * C + c] : x[(col - K + 1) * ld + c];
                s += (double)w[c * K + k] * xv;
            }
            double want = s / (1 + exp(-s));
            NEAR(y[t * ld + c], want, 8 * TC_U * (fabs(want) + 8), "conv t %lld c %lld\n", (long long)t, (long long)c);
        }
    for (int64_t j = 0; j < K - 1; j++) /* state = last 3 raw inputs */
        assert_memory_equal(st + j * C, x + (T - K + 1 + j) * ld, sizeof(float) * (size_t)C);
    /* two calls (2 tokens then 5; then 1 + 1 + 5) equal one call of 7, bit for bit */
    static const int64_t splits[][3] = {{2, 5, 0}, {1, 1, 5}};
    for (int sp = 0; sp < 2; sp++) {
        memcpy(stb, st0, sizeof(float) * (size_t)((K - 1) * C));
        int64_t t0 = 0;
        for (int part = 0; part < 3 && splits[sp][part]; part++) {
            int64_t n = splits[sp][part];
            assert_int_equal(api->ssm_conv(ref1, x + t0 * ld, ld, w, stb, y2 + t0 * ld, ld, n, C, K), VT_OK);
            t0 += n;
        }
        for (int64_t t = 0; t < T; t++) assert_memory_equal(y + t * ld, y2 + t * ld, sizeof(float) * (size_t)C);
        assert_memory_equal(st, stb, sizeof(float) * (size_t)((K - 1) * C));
    }
    assert_int_equal(api->ssm_conv(ref1, x, ld, w, st, x, ld, T, C, K), VT_ERR_INVALID_ARG);
    free(x);
    free(w);
    free(st);
    free(st0);
    free(y);
    free(y2);
    free(stb);
}

/* ---------------- gated delta net (qwen35moe.md §5.7.4) ---------------- */

static void test_delta_net(void **state)
{
    (void)state;
    const vt_backend_api *api = tc_api();
    tc_rng rng = {0xa11ce006};
    const int64_t T = 6, n_k = 2, n_v = 4, d_k = 12, d_v = 10;
    const int64_t ldqk = n_k * d_k, ldv = n_v * d_v, ldo = n_v * d_v + 1;
    float *q = tc_alloc_f(T * ldqk), *k = tc_alloc_f(T * ldqk), *v = tc_alloc_f(T * ldv);
    float *g = tc_alloc_f(T * n_v), *beta = tc_alloc_f(T * n_v), *S = tc_alloc_f(n_v * d_k * d_v),
          *S0 = tc_alloc_f(n_v * d_k * d_v), *S2 = tc_alloc_f(n_v * d_k * d_v);
    float *o = tc_alloc_f(T * ldo), *o2 = tc_alloc_f(T * ldo);
    tc_fill(&rng, q, T * ldqk, -0.3f, 0.3f);
    tc_fill(&rng, k, T * ldqk, -0.3f, 0.3f);
    tc_fill(&rng, v, T * ldv, -1, 1);
    tc_fill(&rng, g, T * n_v, -1.5f, 0);
    tc_fill(&rng, beta, T * n_v, 0.1f, 0.9f);
    tc_fill(&rng, S0, n_v * d_k * d_v, -0.5f, 0.5f);
    memcpy(S, S0, sizeof(float) * (size_t)(n_v * d_k * d_v));
    assert_int_equal(api->gated_delta_net(ref1, q, k, ldqk, v, ldv, g, beta, S, o, ldo, T, n_k, n_v, d_k, d_v), VT_OK);
    /* the recurrence in double; value head h uses key head h % n_k */
    double Sd[4][12][10];
    for (int h = 0; h < n_v; h++)
        for (int i = 0; i < d_k; i++)
            for (int j = 0; j < d_v; j++) Sd[h][i][j] = S0[(h * d_k + i) * d_v + j];
    for (int t = 0; t < T; t++)
        for (int h = 0; h < n_v; h++) {
            const float *kt = k + t * ldqk + (h % n_k) * d_k, *qt = q + t * ldqk + (h % n_k) * d_k;
            double eg = exp(g[t * n_v + h]), b = beta[t * n_v + h];
            for (int i = 0; i < d_k; i++)
                for (int j = 0; j < d_v; j++) Sd[h][i][j] *= eg;
            for (int j = 0; j < d_v; j++) {
                double m = 0;
                for (int i = 0; i < d_k; i++) m += Sd[h][i][j] * kt[i];
                double dl = b * (v[t * ldv + h * d_v + j] - m);
                for (int i = 0; i < d_k; i++) Sd[h][i][j] += kt[i] * dl;
            }
            for (int j = 0; j < d_v; j++) {
                double oj = 0;
                for (int i = 0; i < d_k; i++) oj += Sd[h][i][j] * qt[i];
                NEAR(o[t * ldo + h * d_v + j], oj, 1e-6, "delta out t %d h %d j %d\n", t, h, j);
            }
        }
    for (int h = 0; h < n_v; h++)
        for (int i = 0; i < d_k; i++)
            for (int j = 0; j < d_v; j++)
                NEAR(S[(h * d_k + i) * d_v + j], Sd[h][i][j], 1e-6, "delta state h %d i %d j %d\n", h, i, j);
    /* 2 + 4 tokens in two calls == 6 in one, bit for bit; and 3 threads == 1 */
    memcpy(S2, S0, sizeof(float) * (size_t)(n_v * d_k * d_v));
    assert_int_equal(api->gated_delta_net(ref3, q, k, ldqk, v, ldv, g, beta, S2, o2, ldo, 2, n_k, n_v, d_k, d_v), VT_OK);
    assert_int_equal(api->gated_delta_net(ref3, q + 2 * ldqk, k + 2 * ldqk, ldqk, v + 2 * ldv, ldv, g + 2 * n_v,
                                          beta + 2 * n_v, S2, o2 + 2 * ldo, ldo, 4, n_k, n_v, d_k, d_v), VT_OK);
    for (int t = 0; t < T; t++) assert_memory_equal(o + t * ldo, o2 + t * ldo, sizeof(float) * (size_t)(n_v * d_v));
    assert_memory_equal(S, S2, sizeof(float) * (size_t)(n_v * d_k * d_v));
    free(q);
    free(k);
    free(v);
    free(g);
    free(beta);
    free(S);
    free(S0);
    free(S2);
    free(o);
    free(o2);
}

/* ---------------- elementwise (qwen35moe.md §5.1, backend.h) ---------------- */

static double unary_naive(int op, double x)
{
    switch (op) {
    case VT_UNARY_SILU: return x / (1 + exp(-x));
    case VT_UNARY_SIGMOID: return 1 / (1 + exp(-x));
    case VT_UNARY_SOFTPLUS: return x > 20 ? x : log(1 + exp(x));
    case VT_UNARY_GELU_TANH: {
        /* 0.5x(1 + tanh u); for u < 0, 1 + tanh u = 2e^{2u}/(1 + e^{2u}) avoids cancellation */
        double u = sqrt(2 / M_PI) * (x + 0.044715 * x * x * x);
        return u >= 0 ? 0.5 * x * (1 + tanh(u)) : x * exp(2 * u) / (1 + exp(2 * u));
    }
    case VT_UNARY_EXP: return exp(x);
    default: return tanh(x);
    }
}

static void test_elementwise(void **state)
{
    (void)state;
    const vt_backend_api *api = tc_api();
    tc_rng rng = {0xa11ce007};
    const int64_t n = 50001;
    float *x = tc_alloc_f(n), *y = tc_alloc_f(n), *y3 = tc_alloc_f(n), *b = tc_alloc_f(n);
    tc_fill(&rng, x, n, -25, 25);
    tc_fill(&rng, b, n, -3, 3);
    for (int op = 0; op <= VT_UNARY_TANH; op++) {
        assert_int_equal(api->unary(ref1, (vt_unary_op)op, x, y, n), VT_OK);
        assert_int_equal(api->unary(ref3, (vt_unary_op)op, x, y3, n), VT_OK);
        assert_memory_equal(y, y3, sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++) {
            double want = unary_naive(op, x[i]);
            /* log(1 + e^x) loses digits for x << 0 in double too; allow its error */
            double tol = 2 * TC_U * fabs(want) + (op == VT_UNARY_SOFTPLUS ? 1e-15 : 1e-38);
            NEAR(y[i], want, tol, "unary %d x %.9g\n", op, (double)x[i]);
        }
    }
    /* binary with every broadcast shape, y aliasing a */
    static const int64_t nbs[] = {1, 3, 50001};
    for (int op = 0; op < 2; op++)
        for (int j = 0; j < 3; j++) {
            int64_t nn = nbs[j] == 3 ? 50001 : n;
            memcpy(y, x, sizeof(float) * (size_t)nn);
            assert_int_equal(api->binary(ref3, (vt_binary_op)op, y, b, y, nn, nbs[j]), VT_OK);
            for (int64_t i = 0; i < nn; i++) {
                float want = op == VT_BINARY_ADD ? x[i] + b[i % nbs[j]] : x[i] * b[i % nbs[j]];
                assert_memory_equal(&y[i], &want, 4);
            }
        }
    /* every small shape: n_rows x nb for both in 1..40, so a row count equal to
     * the row length (4 tokens x 4 DeltaNet heads, 32 x 32 in Qwen3.5-35B-A3B)
     * is covered; each on 1 and 3 threads */
    for (int op = 0; op < 2; op++)
        for (int64_t nr = 1; nr <= 40; nr++)
            for (int64_t nb = 1; nb <= 40; nb++) {
                int64_t nn = nr * nb;
                for (int th = 0; th < 2; th++) {
                    assert_int_equal(api->binary(th ? ref3 : ref1, (vt_binary_op)op, x, b, y, nn,
                                                 nb), VT_OK);
                    for (int64_t i = 0; i < nn; i++) {
                        float want = op == VT_BINARY_ADD ? x[i] + b[i % nb] : x[i] * b[i % nb];
                        if (memcmp(&y[i], &want, 4))
                            fail_msg("binary op %d, %lld rows of %lld, %d thread(s): element %lld "
                                     "is %.9g, want %.9g", op, (long long)nr, (long long)nb,
                                     th ? 3 : 1, (long long)i, (double)y[i], (double)want);
                    }
                }
            }
    /* rows == row length large enough to be split over the 3 threads */
    for (int op = 0; op < 2; op++) {
        const int64_t nr = 200, nb = 200, nn = nr * nb; /* within the 50001 values */
        assert_int_equal(api->binary(ref3, (vt_binary_op)op, x, b, y, nn, nb), VT_OK);
        for (int64_t i = 0; i < nn; i++) {
            float want = op == VT_BINARY_ADD ? x[i] + b[i % nb] : x[i] * b[i % nb];
            if (memcmp(&y[i], &want, 4))
                fail_msg("binary op %d, %lld rows of %lld, 3 threads: element %lld", op,
                         (long long)nr, (long long)nb, (long long)i);
        }
    }
    assert_int_equal(api->binary(ref1, VT_BINARY_ADD, x, b, y, 10, 3), VT_ERR_INVALID_ARG);
    assert_int_equal(api->scale(ref3, x, y, n, -1.5f), VT_OK);
    for (int64_t i = 0; i < n; i++) assert_true(y[i] == x[i] * -1.5f);
    assert_int_equal(api->mul_rows(ref3, x, b, y, 1000, 50), VT_OK);
    for (int64_t r = 0; r < 1000; r++)
        for (int64_t c = 0; c < 50; c++) assert_true(y[r * 50 + c] == x[r * 50 + c] * b[r]);
    free(x);
    free(y);
    free(y3);
    free(b);
}

/* ---------------- copies, gather, scatter ---------------- */

static void test_copies(void **state)
{
    (void)state;
    const vt_backend_api *api = tc_api();
    tc_rng rng = {0xa11ce008};
    const int64_t R = 300, C = 70, lds = 80, ldd = 75;
    float *src = tc_alloc_f(R * lds), *dst = tc_alloc_f(R * ldd);
    tc_fill(&rng, src, R * lds, -1, 1);
    for (int64_t i = 0; i < R * ldd; i++) dst[i] = 7.0f;
    assert_int_equal(api->copy_2d(ref3, src, lds, dst, ldd, R, C), VT_OK);
    for (int64_t r = 0; r < R; r++) {
        assert_memory_equal(dst + r * ldd, src + r * lds, sizeof(float) * (size_t)C);
        for (int64_t c = C; c < ldd; c++) assert_true(dst[r * ldd + c] == 7.0f);
    }
    int32_t idx[6] = {5, 0, 299, 5, 17, 1};
    assert_int_equal(api->gather_rows(ref3, src, lds, idx, 6, C, dst, ldd), VT_OK);
    for (int i = 0; i < 6; i++) assert_memory_equal(dst + i * ldd, src + idx[i] * lds, sizeof(float) * (size_t)C);
    int32_t neg = -1;
    assert_int_equal(api->gather_rows(ref3, src, lds, &neg, 1, C, dst, ldd), VT_ERR_RANGE);
    /* scatter_add with repeats, weighted and not, adds in order of i */
    float wt[6] = {0.5f, -1.0f, 2.0f, 0.25f, 3.0f, 1.5f};
    for (int with_w = 0; with_w < 2; with_w++) {
        float *acc = tc_alloc_f(R * ldd), *want = tc_alloc_f(R * ldd);
        tc_fill(&rng, acc, R * ldd, -1, 1);
        memcpy(want, acc, sizeof(float) * (size_t)(R * ldd));
        for (int i = 0; i < 6; i++)
            for (int64_t c = 0; c < C; c++)
                want[idx[i] * ldd + c] += (with_w ? wt[i] : 1.0f) * src[i * lds + c];
        assert_int_equal(api->scatter_add(ref3, src, lds, idx, with_w ? wt : NULL, 6, C, acc, ldd), VT_OK);
        assert_memory_equal(acc, want, sizeof(float) * (size_t)(R * ldd));
        free(acc);
        free(want);
    }
    /* a large scatter goes through the pool: same result as 1 thread */
    {
        const int64_t n = 4000, cols = 512;
        float *s = tc_alloc_f(n * cols), *a1 = tc_alloc_f(64 * cols), *a3 = tc_alloc_f(64 * cols), *w = tc_alloc_f(n);
        int32_t *ix = malloc(sizeof(int32_t) * (size_t)n);
        assert_non_null(ix);
        tc_fill(&rng, s, n * cols, -1, 1);
        tc_fill(&rng, w, n, -1, 1);
        for (int64_t i = 0; i < n; i++) ix[i] = (int32_t)(tc_next(&rng) % 64);
        assert_int_equal(api->scatter_add(ref1, s, cols, ix, w, n, cols, a1, cols), VT_OK);
        assert_int_equal(api->scatter_add(ref3, s, cols, ix, w, n, cols, a3, cols), VT_OK);
        assert_memory_equal(a1, a3, sizeof(float) * (size_t)(64 * cols));
        free(s);
        free(a1);
        free(a3);
        free(w);
        free(ix);
    }
    free(src);
    free(dst);
}

/* ---------------- softmax_topk (qwen35moe.md §5.8 steps 1-3) ---------------- */

static void test_softmax_topk(void **state)
{
    (void)state;
    const vt_backend_api *api = tc_api();
    /* ties: the lower index wins */
    float l[8] = {1, 3, 2, 3, 0, 3, 2, -1};
    int32_t ids[4];
    float wts[4], probs[8];
    assert_int_equal(api->softmax_topk(ref1, l, 1, 8, 4, 1, ids, wts, probs), VT_OK);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 3);
    assert_int_equal(ids[2], 5);
    assert_int_equal(ids[3], 2);
    double sum = 0, e[8];
    for (int i = 0; i < 8; i++) sum += e[i] = exp(l[i] - 3.0);
    for (int i = 0; i < 8; i++) NEAR(probs[i], e[i] / sum, 2 * TC_U * e[i] / sum, "probs %d\n", i);
    double picked = (e[1] + e[3] + e[5] + e[2]) / sum;
    NEAR(wts[0], e[1] / sum / picked, 4 * TC_U, "renormalised weight\n");
    NEAR(wts[0] + wts[1] + wts[2] + wts[3], 1.0, 8 * TC_U, "weights sum to 1\n");
    /* no renorm: weights are p */
    assert_int_equal(api->softmax_topk(ref1, l, 1, 8, 2, 0, ids, wts, NULL), VT_OK);
    NEAR(wts[0], e[1] / sum, 2 * TC_U * e[1] / sum, "weight without renorm\n");
    /* renorm floor 6.103515625e-5: 40000 equal logits, k = 1 -> p = 2.5e-5 */
    {
        const int64_t n = 40000;
        float *lg = tc_alloc_f(n);
        int32_t id;
        float w;
        assert_int_equal(api->softmax_topk(ref1, lg, 1, n, 1, 1, &id, &w, NULL), VT_OK);
        assert_int_equal(id, 0);
        NEAR(w, (1.0 / n) / 6.103515625e-5, 1e-6, "renorm floor\n");
        free(lg);
    }
    /* many rows: 3 threads == 1 thread == the naive top-k */
    {
        const int64_t R = 500, n = 64, k = 6;
        tc_rng rng = {0xa11ce009};
        float *lg = tc_alloc_f(R * n), *w1 = tc_alloc_f(R * k), *w3 = tc_alloc_f(R * k);
        int32_t *i1 = calloc((size_t)(R * k), 4), *i3 = calloc((size_t)(R * k), 4);
        assert_non_null(i1);
        assert_non_null(i3);
        for (int64_t i = 0; i < R * n; i++) lg[i] = (float)(int)tc_unif(&rng, -8, 8); /* many ties */
        assert_int_equal(api->softmax_topk(ref1, lg, R, n, k, 1, i1, w1, NULL), VT_OK);
        assert_int_equal(api->softmax_topk(ref3, lg, R, n, k, 1, i3, w3, NULL), VT_OK);
        assert_memory_equal(i1, i3, sizeof(int32_t) * (size_t)(R * k));
        assert_memory_equal(w1, w3, sizeof(float) * (size_t)(R * k));
        for (int64_t r = 0; r < R; r++) {
            int taken[64] = {0};
            for (int64_t m = 0; m < k; m++) {
                int best = -1;
                for (int i = 0; i < n; i++)
                    if (!taken[i] && (best < 0 || lg[r * n + i] > lg[r * n + best])) best = i;
                taken[best] = 1;
                assert_int_equal(i1[r * k + m], best);
            }
        }
        free(lg);
        free(w1);
        free(w3);
        free(i1);
        free(i3);
    }
    assert_int_equal(api->softmax_topk(ref1, l, 1, 8, 9, 1, ids, wts, NULL), VT_ERR_INVALID_ARG);
}

/* ---------------- init, memory, threads ---------------- */

static void test_init_and_memory(void **state)
{
    (void)state;
    const vt_backend_api *api = tc_api();
    vt_backend_ctx *ctx = NULL;
    vt_backend_params p = {sizeof p, 0, 2, "bogus", &tc_host};
    assert_int_equal(api->init(&p, &ctx), VT_ERR_INVALID_ARG);
    assert_non_null(strstr(tc_err, "bogus"));
    p.kernels = "scalar";
    p.device = 1;
    assert_int_equal(api->init(&p, &ctx), VT_ERR_NOT_FOUND);
    p.device = 0;
    assert_int_equal(api->init(&p, &ctx), VT_OK);
    assert_int_equal(api->device_count(), 1);
    void *m = NULL;
    for (size_t sz = 0; sz < 300; sz += 37) {
        assert_int_equal(api->alloc(ctx, sz, "test buffer", &m), VT_OK);
        assert_non_null(m);
        assert_int_equal((uintptr_t)m % 64, 0);
        assert_int_equal(api->memset_zero(ctx, m, sz), VT_OK);
        api->free(ctx, m);
    }
#if !VT_TEST_ASAN
    assert_int_equal(api->alloc(ctx, (size_t)1 << 62, "KV cache blk.3", &m), VT_ERR_OUT_OF_MEMORY);
    assert_null(m);
    assert_non_null(strstr(tc_err, "KV cache blk.3"));
    assert_non_null(strstr(tc_err, "4611686018427387904"));
#endif
    uint64_t fr = 0, tot = 0;
    assert_int_equal(api->memory_probe(ctx, &fr, &tot), VT_OK);
    assert_true(tot > ((uint64_t)64 << 20));
    assert_true(fr > 0 && fr <= tot);
    char a[100], b[100];
    memset(a, 3, sizeof a);
    assert_int_equal(api->copy_h2d(ctx, b, a, sizeof a), VT_OK);
    assert_memory_equal(a, b, sizeof a);
    assert_int_equal(api->synchronize(ctx), VT_OK);
    api->shutdown(ctx);
    api->shutdown(NULL);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/*
 * The pool under churn: many contexts created and shut down (threads joined),
 * many tiny and pooled ops back to back, more threads than cores. Prints the
 * per-op cost of a tiny op (inline) and of a pooled matvec, for the record.
 */
static void test_pool(void **state)
{
    (void)state;
    const vt_backend_api *api = tc_api();
    for (int i = 0; i < 20; i++) api->shutdown(tc_ctx("auto", 1 + i % 5));
    vt_backend_ctx *ctx = tc_ctx("auto", 0); /* every online core */
    tc_rng rng = {0xa11ce00a};
    float x[256], y[256];
    tc_fill(&rng, x, 256, -1, 1);
    const int iters = 5000;
    double t0 = now_s();
    for (int i = 0; i < iters; i++) assert_int_equal(api->scale(ctx, x, y, 256, 1.0001f), VT_OK);
    double tiny = (now_s() - t0) / iters;
    float *wf = tc_alloc_f(256 * 256), *ys = tc_alloc_f(256), *yp = tc_alloc_f(256);
    tc_fill(&rng, wf, 256 * 256, -1, 1);
    vt_weight w = {VT_TYPE_F32, 256, 256, 1024, wf, "w"};
    vt_backend_ctx *one = tc_ctx("auto", 1);
    assert_int_equal(api->mat_mul[VT_TYPE_F32](one, &w, x, 256, ys, 256, 1), VT_OK);
    t0 = now_s();
    for (int i = 0; i < iters; i++) assert_int_equal(api->mat_mul[VT_TYPE_F32](ctx, &w, x, 256, yp, 256, 1), VT_OK);
    double mv = (now_s() - t0) / iters;
    assert_memory_equal(ys, yp, sizeof(float) * 256); /* row slices do not change the arithmetic */
    fprintf(stderr, "[  INFO    ] per-op cost, %d threads: scale of 256 floats %.2f us, "
                    "256x256 F32 matvec %.2f us\n", ctx->n_threads, tiny * 1e6, mv * 1e6);
    free(wf);
    free(ys);
    free(yp);
    api->shutdown(one);
    api->shutdown(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_half_conversions), cmocka_unit_test(test_mat_mul),
        cmocka_unit_test(test_mat_mul_errors),   cmocka_unit_test(test_norms),
        cmocka_unit_test(test_rope),             cmocka_unit_test(test_attention),
        cmocka_unit_test(test_ssm_conv),         cmocka_unit_test(test_delta_net),
        cmocka_unit_test(test_elementwise),      cmocka_unit_test(test_copies),
        cmocka_unit_test(test_softmax_topk),     cmocka_unit_test(test_init_and_memory),
        cmocka_unit_test(test_pool),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
