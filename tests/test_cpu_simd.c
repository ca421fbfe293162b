/*
 * test_cpu_simd.c - every SIMD kernel set of backend-cpu against the scalar
 * reference set, op by op, through the backend table, on seeded random
 * inputs with odd sizes (tails, uneven thread splits, strided rows).
 *
 * Sets: "avx2" (AVX2+FMA+F16C), "avx512" (AVX-512F) and "avx2w16" (the
 * AVX-512 body's 16-lane logic on pairs of AVX2 registers). A set the CPU
 * lacks is skipped with a message. The SIMD context runs 3 threads (uneven
 * splits), the reference 1.
 *
 * Tolerances (u = 2^-24, the float32 unit roundoff). The scalar reference
 * accumulates in double and rounds once, so it is within u·|y| of the exact
 * result. A SIMD dot product of n terms accumulates in L lanes (n/L terms
 * each, with FMA) and then adds the lanes: its error is at most
 * γ(n/L + log2 L + 1)·Σ|a_i b_i| <= (n + 16)·u·Σ|a_i b_i| (Higham, recursive
 * summation). Tests use bound = (n + 16)·u·Σ|a_i b_i| + 2u·|y| per output;
 * it is tight enough to catch a wrong element or a missing term (their size
 * is ~|a_i b_i|, orders of magnitude above n·u·Σ|a b|).
 */
#include "test_cpu_common.h"

static const char *set_of(void **state) { return (const char *)*state; }

/* |got - want| <= tol, with a message naming what and where */
#define NEAR(got, want, tol, ...)                                                              \
    do {                                                                                       \
        double g_ = (got), w_ = (want), t_ = (tol);                                            \
        if (!(fabs(g_ - w_) <= t_)) {                                                          \
            print_error(__VA_ARGS__);                                                          \
            fail_msg(" got %.9g want %.9g |diff| %.3g > tol %.3g", g_, w_, fabs(g_ - w_), t_); \
        }                                                                                      \
    } while (0)

/* ---------------- mat_mul ---------------- */

/* A weight of n_out × n_in random values in [-1, 1) encoded as `type` (*rb: row bytes). */
static uint8_t *mm_weight(tc_rng *rng, uint32_t type, int64_t n_in, int64_t n_out, size_t *rb)
{
    float *wf = tc_alloc_f(n_out * n_in);
    tc_fill(rng, wf, n_out * n_in, -1.0f, 1.0f);
    uint8_t *wd = tc_encode(type, wf, n_out, n_in, rb);
    free(wf);
    return wd;
}

/* SIMD against scalar for one shape; x rows ldx apart, y rows ldy apart (gaps must survive). */
static void mm_case_ld(vt_backend_ctx *ref, vt_backend_ctx *simd, tc_rng *rng, uint32_t type,
                       int64_t n_in, int64_t n_out, int64_t T, int64_t ldx, int64_t ldy,
                       const char *set)
{
    const vt_backend_api *api = tc_api();
    float *x = tc_alloc_f(T * ldx);
    float *y0 = tc_alloc_f(T * ldy), *y1 = tc_alloc_f(T * ldy);
    tc_fill(rng, x, T * ldx, -1.0f, 1.0f);
    size_t rb;
    uint8_t *wd = mm_weight(rng, type, n_in, n_out, &rb);
    vt_weight w = {type, n_in, n_out, rb, wd, "test.weight"};
    for (int64_t i = 0; i < T * ldy; i++) y0[i] = y1[i] = -12345.0f;
    assert_int_equal(api->mat_mul[type](ref, &w, x, ldx, y0, ldy, T), VT_OK);
    assert_int_equal(api->mat_mul[type](simd, &w, x, ldx, y1, ldy, T), VT_OK);
    float *wabs = tc_alloc_f(n_out * n_in); /* |W|, decoded once */
    for (int64_t r = 0; r < n_out; r++)
        for (int64_t i = 0; i < n_in; i++) wabs[r * n_in + i] = fabsf(tc_decode(type, wd + r * rb, i));
    /* decode of a quantised type on the integer path rounds the activations to
     * int8 per 32 values: |x - x^| <= d_b/2 with d_b = max_b|x| / 127
     * (tests/test_cpu_quant_kernels.c derives it); the float bound then holds
     * over |x| + d_b */
    const int integer = T == 1 && simd->qd && simd->qd->dot[type];
    for (int64_t t = 0; t < T; t++) {
        for (int64_t r = 0; r < n_out; r++) {
            double mag = 0.0, qterm = 0.0;
            for (int64_t i = 0; i < n_in; i++) {
                double db = 0.0;
                if (integer) {
                    for (int64_t k = i / 32 * 32; k < i / 32 * 32 + 32; k++)
                        db = fmax(db, fabs(x[t * ldx + k]));
                    db /= 127.0;
                }
                mag += (double)wabs[r * n_in + i] * (fabs(x[t * ldx + i]) + db);
                qterm += (double)wabs[r * n_in + i] * 0.5005 * db;
            }
            double want = y0[t * ldy + r];
            NEAR(y1[t * ldy + r], want, (n_in + 16) * TC_U * mag + 2 * TC_U * fabs(want) + qterm,
                 "mat_mul %s set %s n_in %lld n_out %lld T %lld ldx %lld ldy %lld: token %lld "
                 "row %lld\n",
                 vt_type_name(type), set, (long long)n_in, (long long)n_out, (long long)T,
                 (long long)ldx, (long long)ldy, (long long)t, (long long)r);
        }
        for (int64_t r = n_out; r < ldy; r++) assert_true(y1[t * ldy + r] == -12345.0f);
    }
    free(wabs);
    free(x);
    free(y0);
    free(y1);
    free(wd);
}

static void mm_case(vt_backend_ctx *ref, vt_backend_ctx *simd, tc_rng *rng, uint32_t type,
                    int64_t n_in, int64_t n_out, int64_t T, const char *set)
{
    mm_case_ld(ref, simd, rng, type, n_in, n_out, T, n_in + 3, n_out + 5, set);
}

/*
 * Shapes for the tiled multi-token path (cpu_simd_body.h): row counts that
 * leave short row groups of every kind for groups of 3, 4, 6 and 8 rows (1,
 * 2, 3, 4, 5, 7, 17, 33); token counts for the decode path (1), the 2- and
 * 3-token chunks, chunks shorter than a tile (4, 5 with 6-token tiles) and
 * every remainder of 4- and 6-token tiles (4..17); n_in with and without
 * column tails (float types); x and y strided.
 */
/* A context of kernel set `set` with its integer dot products off: this file
 * tests the float kernels, which Q8_0 takes only then (with them on, Q8_0 runs
 * on int8 activations at every batch size: test_cpu_quant_kernels.c). */
static vt_backend_ctx *float_ctx(const char *set, int n_threads)
{
    vt_backend_ctx *c = tc_simd_ctx(set, n_threads);
    if (c) vt_cpu_ctx_set_qdot(c, NULL);
    return c;
}

static void test_mat_mul(void **state)
{
    const char *set = set_of(state);
    vt_backend_ctx *simd = float_ctx(set, 3);
    if (!simd) skip();
    vt_backend_ctx *ref = tc_ctx("scalar", 1);
    tc_rng rng = {0x5eed0001};
    static const int64_t rows[] = {1, 2, 3, 4, 5, 7, 17, 33};
    static const int64_t toks[] = {1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 13, 17};
    static const int64_t in_blk[] = {32, 96, 544};
    static const int64_t in_flt[] = {1, 5, 32, 37, 100, 544};
    for (int ti = 0; ti < 4; ti++) {
        uint32_t type = tc_types[ti];
        const int64_t *ins = type == VT_TYPE_Q8_0 ? in_blk : in_flt;
        int n_ins = type == VT_TYPE_Q8_0 ? 3 : 6;
        for (int a = 0; a < n_ins; a++)
            for (int b = 0; b < 8; b++)
                for (int c = 0; c < 12; c++)
                    mm_case(ref, simd, &rng, type, ins[a], rows[b], toks[c], set);
        /* unstrided x and y */
        mm_case_ld(ref, simd, &rng, type, ins[n_ins - 1], 7, 5, ins[n_ins - 1], 7, set);
        /* several column blocks of 512 (the last one short, with a column tail for
         * float types), token chunks of 64 crossed (the last chunk a single token) */
        mm_case(ref, simd, &rng, type, type == VT_TYPE_Q8_0 ? 1056 : 1061, 37, 65, set);
        /* big enough to be split across threads, token blocks of 64 crossed */
        mm_case(ref, simd, &rng, type, 512, 300, 70, set);
        mm_case(ref, simd, &rng, type, 2048, 257, 1, set);
    }
    tc_api()->shutdown(ref);
    tc_api()->shutdown(simd);
}

/*
 * Every output of a SIMD matmul is computed the same way whatever the split:
 * results are bit-identical for 1, 2 and 3 threads, and equal to calling the
 * kernel on the whole matrix or on any partition of the rows and on token
 * ranges that start at multiples of VT_CPU_MM_TOK_CHUNK (the op's contract).
 */
static void test_mat_mul_splits(void **state)
{
    const char *set = set_of(state);
    const vt_cpu_kernels *k = vt_cpu_kernels_find(set);
    vt_backend_ctx *c1 = float_ctx(set, 1);
    if (!c1) skip();
    vt_backend_ctx *c2 = float_ctx(set, 2), *c3 = float_ctx(set, 3);
    const vt_backend_api *api = tc_api();
    tc_rng rng = {0x5eed0008};
    static const int64_t toks[] = {2, 5, 17, 65, 130};
    for (int ti = 0; ti < 4; ti++) {
        uint32_t type = tc_types[ti];
        const int64_t n_in = type == VT_TYPE_Q8_0 ? 576 : 605, n_out = 37;
        const int64_t ldx = n_in + 1, ldy = n_out + 2, T_max = 130;
        size_t rb;
        uint8_t *wd = mm_weight(&rng, type, n_in, n_out, &rb);
        vt_weight w = {type, n_in, n_out, rb, wd, "test.split"};
        float *x = tc_alloc_f(T_max * ldx), *y[4];
        tc_fill(&rng, x, T_max * ldx, -1.0f, 1.0f);
        for (int i = 0; i < 4; i++) y[i] = tc_alloc_f(T_max * ldy);
        float *scratch = aligned_alloc(64, sizeof(float) * VT_CPU_MM_SCRATCH((size_t)n_in));
        assert_non_null(scratch);
        for (int a = 0; a < 5; a++) {
            int64_t T = toks[a];
            assert_int_equal(api->mat_mul[type](c1, &w, x, ldx, y[0], ldy, T), VT_OK);
            assert_int_equal(api->mat_mul[type](c2, &w, x, ldx, y[1], ldy, T), VT_OK);
            assert_int_equal(api->mat_mul[type](c3, &w, x, ldx, y[2], ldy, T), VT_OK);
            /* the kernel itself: rows cut at 0, 5, 6, 30, 37; tokens at multiples of the chunk */
            static const int64_t cuts[] = {0, 5, 6, 30, 37};
            for (int64_t t0 = 0; t0 < T; t0 += VT_CPU_MM_TOK_CHUNK) {
                int64_t nt = T - t0 < VT_CPU_MM_TOK_CHUNK ? T - t0 : VT_CPU_MM_TOK_CHUNK;
                for (int c = 0; c + 1 < 5; c++)
                    k->mat_mul[type](wd + (size_t)cuts[c] * rb, rb, n_in, x + t0 * ldx, ldx,
                                     y[3] + t0 * ldy + cuts[c], ldy, cuts[c + 1] - cuts[c], nt,
                                     scratch);
            }
            for (int i = 1; i < 4; i++)
                for (int64_t t = 0; t < T; t++)
                    if (memcmp(y[0] + t * ldy, y[i] + t * ldy, sizeof(float) * (size_t)n_out))
                        fail_msg("mat_mul %s set %s T %lld: token %lld differs between 1 thread and "
                                 "%s", vt_type_name(type), set, (long long)T, (long long)t,
                                 i == 1 ? "2 threads" : i == 2 ? "3 threads" : "a direct split");
        }
        free(scratch);
        for (int i = 0; i < 4; i++) free(y[i]);
        free(x);
        free(wd);
    }
    api->shutdown(c1);
    api->shutdown(c2);
    api->shutdown(c3);
}

/*
 * Dequantisation inside the SIMD matmul is exact: with x = one-hot rows
 * (T = n_in tokens forming the identity), y[t][r] = W[r][t] with no rounding,
 * so it must equal the scalar dequantisation bit for bit. F16 and BF16 cover
 * every finite 16-bit pattern (subnormals included), Q8_0 random blocks with
 * scales of every magnitude (subnormal fp16 scales included).
 */
static void test_dequant_exact(void **state)
{
    const char *set = set_of(state);
    vt_backend_ctx *simd = float_ctx(set, 2);
    if (!simd) skip();
    const vt_backend_api *api = tc_api();
    const int64_t n_in = 64, n_out = 1024;
    float *x = tc_alloc_f(n_in * n_in), *y = tc_alloc_f(n_in * n_out), *deq = tc_alloc_f(n_in);
    for (int64_t t = 0; t < n_in; t++) x[t * n_in + t] = 1.0f;
    tc_rng rng = {0x5eed0002};
    for (int ti = 1; ti < 4; ti++) {
        uint32_t type = tc_types[ti];
        size_t rb = (size_t)vt_type_row_bytes(type, (uint64_t)n_in);
        uint8_t *wd = calloc((size_t)n_out, rb);
        assert_non_null(wd);
        if (type == VT_TYPE_Q8_0) {
            for (int64_t r = 0; r < n_out; r++)
                for (int64_t b = 0; b < 2; b++) {
                    uint8_t *blk = wd + r * rb + b * 34;
                    uint16_t d = (uint16_t)(tc_next(&rng) & 0xffff);
                    if (((d >> 10) & 31) == 31) d &= 0x83ff; /* finite scales only */
                    memcpy(blk, &d, 2);
                    for (int i = 0; i < 32; i++) blk[2 + i] = (uint8_t)tc_next(&rng);
                }
        } else {
            for (int64_t i = 0; i < n_out * n_in; i++) {
                uint16_t h = (uint16_t)i;
                /* non-finite patterns would turn the 0·w terms into NaN: make them zero */
                if (type == VT_TYPE_F16 && ((h >> 10) & 31) == 31) h = 0;
                if (type == VT_TYPE_BF16 && ((h >> 7) & 255) == 255) h = 0;
                memcpy(wd + 2 * i, &h, 2);
            }
        }
        vt_weight w = {type, n_in, n_out, rb, wd, "onehot"};
        assert_int_equal(api->mat_mul[type](simd, &w, x, n_in, y, n_out, n_in), VT_OK);
        for (int64_t r = 0; r < n_out; r++) {
            assert_int_equal(vt_cpu_dequant_row(type, wd + r * rb, n_in, deq), VT_OK);
            for (int64_t t = 0; t < n_in; t++)
                if (y[t * n_out + r] != deq[t])
                    fail_msg("%s set %s: element [%lld][%lld] is %.9g, dequantised %.9g",
                             vt_type_name(type), set, (long long)r, (long long)t,
                             (double)y[t * n_out + r], (double)deq[t]);
        }
        free(wd);
    }
    free(x);
    free(y);
    free(deq);
    api->shutdown(simd);
}

/* ---------------- norms ---------------- */

static void test_norms(void **state)
{
    const char *set = set_of(state);
    vt_backend_ctx *simd = float_ctx(set, 3);
    if (!simd) skip();
    vt_backend_ctx *ref = tc_ctx("scalar", 1);
    const vt_backend_api *api = tc_api();
    tc_rng rng = {0x5eed0003};
    static const int64_t rows[] = {1, 3, 17, 200};
    static const int64_t ns[] = {1, 7, 16, 64, 100, 1000};
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 6; b++)
            for (int withw = 0; withw < 3; withw++) {
                int64_t R = rows[a], n = ns[b], ld = n + 2;
                float *x = tc_alloc_f(R * ld), *w = tc_alloc_f(n), *y0 = tc_alloc_f(R * ld),
                      *y1 = tc_alloc_f(R * ld);
                tc_fill(&rng, x, R * ld, -3.0f, 3.0f);
                tc_fill(&rng, w, n, 0.5f, 1.5f);
                if (withw < 2) {
                    const float *wp = withw ? w : NULL;
                    assert_int_equal(api->rms_norm(ref, x, ld, wp, y0, ld, R, n, 1e-6f), VT_OK);
                    assert_int_equal(api->rms_norm(simd, x, ld, wp, y1, ld, R, n, 1e-6f), VT_OK);
                } else {
                    assert_int_equal(api->l2_norm(ref, x, ld, y0, ld, R, n, 1e-6f), VT_OK);
                    assert_int_equal(api->l2_norm(simd, x, ld, y1, ld, R, n, 1e-6f), VT_OK);
                }
                /* both sum squares in double; the scale can differ by one rounding of
                 * 1/sqrt, the products are the same float operations: <= 2 ulp */
                for (int64_t r = 0; r < R; r++)
                    for (int64_t i = 0; i < n; i++)
                        NEAR(y1[r * ld + i], y0[r * ld + i], 4 * TC_U * fabs(y0[r * ld + i]),
                             "%s set %s rows %lld n %lld: [%lld][%lld]\n",
                             withw == 2 ? "l2_norm" : "rms_norm", set, (long long)R, (long long)n,
                             (long long)r, (long long)i);
                free(x);
                free(w);
                free(y0);
                free(y1);
            }
    api->shutdown(ref);
    api->shutdown(simd);
}

/* ---------------- attention ---------------- */

static void attn_case(vt_backend_ctx *ref, vt_backend_ctx *simd, tc_rng *rng, int64_t T,
                      int64_t n_head, int64_t n_head_kv, int64_t hd, int64_t pos0, int64_t window,
                      float softcap, const char *set)
{
    const vt_backend_api *api = tc_api();
    int64_t n_kv = pos0 + T, ldq_head = 2 * hd, ldq = n_head * ldq_head + 1; /* [query|gate] rows */
    int64_t ld_kv = n_head_kv * hd, ldo = n_head * hd + 3;
    float *q = tc_alloc_f(T * ldq), *k = tc_alloc_f(n_kv * ld_kv), *v = tc_alloc_f(n_kv * ld_kv);
    float *o0 = tc_alloc_f(T * ldo), *o1 = tc_alloc_f(T * ldo);
    tc_fill(rng, q, T * ldq, -1.0f, 1.0f);
    tc_fill(rng, k, n_kv * ld_kv, -1.0f, 1.0f);
    tc_fill(rng, v, n_kv * ld_kv, -1.0f, 1.0f);
    float scale = 1.0f / sqrtf((float)hd) * 2.0f;
    assert_int_equal(api->attention(ref, q, ldq, ldq_head, k, v, o0, ldo, T, n_head, n_head_kv, hd,
                                    pos0, n_kv, window, scale, softcap), VT_OK);
    assert_int_equal(api->attention(simd, q, ldq, ldq_head, k, v, o1, ldo, T, n_head, n_head_kv,
                                    hd, pos0, n_kv, window, scale, softcap), VT_OK);
    /*
     * A score s = scale·q·k has error e_s <= (hd + 16)·u·scale·Σ|q k| (a dot product;
     * tanh of the softcap is 1-Lipschitz after the division and scaling by softcap).
     * Softmax outputs move by at most 2·max e_s relative, exp adds a few ulp, and the
     * weighted sum over n positions and hd lanes adds (n + 16)·u: so
     * |Δo| <= (2·max e_s + (n + hd + 32)·4u)·max|v|.
     */
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < n_head; h++) {
            int64_t kvh = h / (n_head / n_head_kv), p = pos0 + t;
            int64_t s0 = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
            double es = 0.0, vmax = 0.0;
            for (int64_t s = s0; s <= p; s++) {
                double mag = 0.0;
                for (int64_t e = 0; e < hd; e++)
                    mag += fabs((double)q[t * ldq + h * ldq_head + e] * k[s * ld_kv + kvh * hd + e]);
                es = fmax(es, (hd + 16) * TC_U * scale * mag);
                for (int64_t e = 0; e < hd; e++) vmax = fmax(vmax, fabs(v[s * ld_kv + kvh * hd + e]));
            }
            double tol = (2 * es + (p - s0 + 1 + hd + 32) * 4 * TC_U) * vmax;
            for (int64_t e = 0; e < hd; e++)
                NEAR(o1[t * ldo + h * hd + e], o0[t * ldo + h * hd + e], tol,
                     "attention set %s T %lld heads %lld/%lld hd %lld pos0 %lld window %lld "
                     "softcap %g: token %lld head %lld dim %lld\n",
                     set, (long long)T, (long long)n_head, (long long)n_head_kv, (long long)hd,
                     (long long)pos0, (long long)window, (double)softcap, (long long)t,
                     (long long)h, (long long)e);
        }
    free(q);
    free(k);
    free(v);
    free(o0);
    free(o1);
}

static void test_attention(void **state)
{
    const char *set = set_of(state);
    vt_backend_ctx *simd = float_ctx(set, 3);
    if (!simd) skip();
    vt_backend_ctx *ref = tc_ctx("scalar", 1);
    tc_rng rng = {0x5eed0004};
    static const int64_t toks[] = {1, 2, 5};
    static const int64_t heads[][2] = {{4, 2}, {2, 2}, {6, 1}};
    static const int64_t hds[] = {8, 37, 64};
    static const int64_t pos0s[] = {0, 7, 40};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 3; c++)
                for (int d = 0; d < 3; d++) {
                    attn_case(ref, simd, &rng, toks[a], heads[b][0], heads[b][1], hds[c], pos0s[d], 0,
                              0.0f, set);
                    attn_case(ref, simd, &rng, toks[a], heads[b][0], heads[b][1], hds[c], pos0s[d], 3,
                              0.0f, set);
                    attn_case(ref, simd, &rng, toks[a], heads[b][0], heads[b][1], hds[c], pos0s[d], 0,
                              1.5f, set);
                }
    attn_case(ref, simd, &rng, 33, 8, 2, 128, 300, 0, 0.0f, set); /* threaded */
    attn_case(ref, simd, &rng, 9, 4, 4, 256, 500, 64, 50.0f, set);
    tc_api()->shutdown(ref);
    tc_api()->shutdown(simd);
}

/* ---------------- gated delta net ---------------- */

static void delta_case(vt_backend_ctx *ref, vt_backend_ctx *simd, tc_rng *rng, int64_t T,
                       int64_t n_k, int64_t n_v, int64_t d_k, int64_t d_v, const char *set)
{
    const vt_backend_api *api = tc_api();
    int64_t ldqk = n_k * d_k + 2, ldv = n_v * d_v + 1, ldo = n_v * d_v + 4;
    float *q = tc_alloc_f(T * ldqk), *k = tc_alloc_f(T * ldqk), *v = tc_alloc_f(T * ldv);
    float *g = tc_alloc_f(T * n_v), *beta = tc_alloc_f(T * n_v);
    float *S0 = tc_alloc_f(n_v * d_k * d_v), *S1 = tc_alloc_f(n_v * d_k * d_v);
    float *o0 = tc_alloc_f(T * ldo), *o1 = tc_alloc_f(T * ldo);
    tc_fill(rng, v, T * ldv, -1.0f, 1.0f);
    tc_fill(rng, g, T * n_v, -2.0f, 0.0f);
    tc_fill(rng, beta, T * n_v, 0.05f, 0.95f);
    tc_fill(rng, S0, n_v * d_k * d_v, -0.5f, 0.5f);
    memcpy(S1, S0, (size_t)(n_v * d_k * d_v) * sizeof(float));
    for (int64_t t = 0; t < T; t++) /* q, k: L2-normalised per key head, q scaled */
        for (int64_t h = 0; h < n_k; h++) {
            float *qh = q + t * ldqk + h * d_k, *kh = k + t * ldqk + h * d_k;
            tc_fill(rng, qh, d_k, -1.0f, 1.0f);
            tc_fill(rng, kh, d_k, -1.0f, 1.0f);
            double nq = 0, nk = 0;
            for (int64_t i = 0; i < d_k; i++) {
                nq += (double)qh[i] * qh[i];
                nk += (double)kh[i] * kh[i];
            }
            for (int64_t i = 0; i < d_k; i++) {
                qh[i] = (float)(qh[i] / sqrt(nq) / sqrt((double)d_k));
                kh[i] = (float)(kh[i] / sqrt(nk));
            }
        }
    /* magnitude bound B = max over tokens, heads, j of Σ_i |S_ij|(|k_i| + |q_i|) + |v_j|,
     * tracked with a double-precision run of the same recurrence */
    double B = 0.0, Smax = 0.0;
    {
        double *S = malloc(sizeof(double) * (size_t)(n_v * d_k * d_v));
        assert_non_null(S);
        for (int64_t i = 0; i < n_v * d_k * d_v; i++) S[i] = S0[i];
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < n_v; h++) {
                const float *qt = q + t * ldqk + (h % n_k) * d_k, *kt = k + t * ldqk + (h % n_k) * d_k;
                double *Sh = S + h * d_k * d_v, eg = exp(g[t * n_v + h]), b = beta[t * n_v + h];
                for (int64_t j = 0; j < d_v; j++) {
                    double m = 0.0, mag = fabs(v[t * ldv + h * d_v + j]);
                    for (int64_t i = 0; i < d_k; i++) {
                        Sh[i * d_v + j] *= eg;
                        m += Sh[i * d_v + j] * kt[i];
                        mag += fabs(Sh[i * d_v + j]) * (fabs(kt[i]) + fabs(qt[i]));
                    }
                    double dl = b * (v[t * ldv + h * d_v + j] - m);
                    for (int64_t i = 0; i < d_k; i++) {
                        Sh[i * d_v + j] += kt[i] * dl;
                        mag += fabs(Sh[i * d_v + j]) * (fabs(kt[i]) + fabs(qt[i]));
                        Smax = fmax(Smax, fabs(Sh[i * d_v + j]));
                    }
                    B = fmax(B, mag);
                }
            }
        free(S);
    }
    assert_int_equal(api->gated_delta_net(ref, q, k, ldqk, v, ldv, g, beta, S0, o0, ldo, T, n_k,
                                          n_v, d_k, d_v), VT_OK);
    assert_int_equal(api->gated_delta_net(simd, q, k, ldqk, v, ldv, g, beta, S1, o1, ldo, T, n_k,
                                          n_v, d_k, d_v), VT_OK);
    /*
     * Per token every output and every state element is a dot product of d_k terms
     * (or one FMA) of magnitude <= B: error <= (d_k + 16)·u·B plus one rounding.
     * The step S <- exp(g)(I - β k kᵀ)S... with ||k|| = 1, 0 < β < 1, g <= 0 does not
     * expand errors, so they add up over tokens: tol = T·(d_k + 16)·4u·B.
     */
    double tol = (double)T * (d_k + 16) * 4 * TC_U * B;
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < n_v * d_v; j++)
            NEAR(o1[t * ldo + j], o0[t * ldo + j], tol,
                 "gated_delta_net set %s T %lld n_k %lld n_v %lld d_k %lld d_v %lld: out token %lld "
                 "col %lld\n", set, (long long)T, (long long)n_k, (long long)n_v, (long long)d_k,
                 (long long)d_v, (long long)t, (long long)j);
    for (int64_t i = 0; i < n_v * d_k * d_v; i++)
        NEAR(S1[i], S0[i], tol + 4 * TC_U * Smax, "gated_delta_net set %s: state element %lld\n",
             set, (long long)i);
    free(q);
    free(k);
    free(v);
    free(g);
    free(beta);
    free(S0);
    free(S1);
    free(o0);
    free(o1);
}

static void test_delta_net(void **state)
{
    const char *set = set_of(state);
    vt_backend_ctx *simd = float_ctx(set, 3);
    if (!simd) skip();
    vt_backend_ctx *ref = tc_ctx("scalar", 1);
    tc_rng rng = {0x5eed0005};
    static const int64_t toks[] = {1, 2, 5};
    static const int64_t kv[][2] = {{1, 2}, {2, 4}};
    static const int64_t dks[] = {5, 8, 64};
    static const int64_t dvs[] = {16, 37, 64};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 2; b++)
            for (int c = 0; c < 3; c++)
                for (int d = 0; d < 3; d++)
                    delta_case(ref, simd, &rng, toks[a], kv[b][0], kv[b][1], dks[c], dvs[d], set);
    delta_case(ref, simd, &rng, 7, 4, 8, 128, 128, set); /* threaded, column strips */
    delta_case(ref, simd, &rng, 3, 2, 32, 128, 128, set);
    tc_api()->shutdown(ref);
    tc_api()->shutdown(simd);
}

/* ---------------- conv ---------------- */

static void test_ssm_conv(void **state)
{
    const char *set = set_of(state);
    vt_backend_ctx *simd = float_ctx(set, 3);
    if (!simd) skip();
    vt_backend_ctx *ref = tc_ctx("scalar", 1);
    const vt_backend_api *api = tc_api();
    tc_rng rng = {0x5eed0006};
    static const int64_t chs[] = {1, 7, 64, 300, 5000};
    static const int64_t toks[] = {1, 2, 5};
    static const int64_t dcs[] = {1, 2, 4};
    for (int a = 0; a < 5; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 3; c++) {
                int64_t C = chs[a], T = toks[b], K = dcs[c], ldx = C + 3, ldy = C + 1;
                float *x = tc_alloc_f(T * ldx), *w = tc_alloc_f(C * K);
                float *st0 = tc_alloc_f((K - 1) * C + 1), *st1 = tc_alloc_f((K - 1) * C + 1);
                float *y0 = tc_alloc_f(T * ldy), *y1 = tc_alloc_f(T * ldy);
                tc_fill(&rng, x, T * ldx, -2.0f, 2.0f);
                tc_fill(&rng, w, C * K, -1.0f, 1.0f);
                tc_fill(&rng, st0, (K - 1) * C, -2.0f, 2.0f);
                memcpy(st1, st0, sizeof(float) * (size_t)((K - 1) * C));
                assert_int_equal(api->ssm_conv(ref, x, ldx, w, st0, y0, ldy, T, C, K), VT_OK);
                assert_int_equal(api->ssm_conv(simd, x, ldx, w, st1, y1, ldy, T, C, K), VT_OK);
                /* K products summed (K + 2)·u·Σ|w x| <= (K + 2)·u·K·2, then SiLU: a few ulp */
                for (int64_t t = 0; t < T; t++)
                    for (int64_t ch = 0; ch < C; ch++)
                        NEAR(y1[t * ldy + ch], y0[t * ldy + ch],
                             (K + 2) * TC_U * 2.0 * K * 2 + 8 * TC_U * fabs(y0[t * ldy + ch]),
                             "ssm_conv set %s C %lld T %lld K %lld: token %lld channel %lld\n", set,
                             (long long)C, (long long)T, (long long)K, (long long)t, (long long)ch);
                /* the state is a copy of raw inputs: exact */
                assert_memory_equal(st0, st1, sizeof(float) * (size_t)((K - 1) * C));
                free(x);
                free(w);
                free(st0);
                free(st1);
                free(y0);
                free(y1);
            }
    api->shutdown(ref);
    api->shutdown(simd);
}

/* ---------------- elementwise ---------------- */

static void test_elementwise(void **state)
{
    const char *set = set_of(state);
    vt_backend_ctx *simd = float_ctx(set, 3);
    if (!simd) skip();
    vt_backend_ctx *ref = tc_ctx("scalar", 1);
    const vt_backend_api *api = tc_api();
    tc_rng rng = {0x5eed0007};
    const int64_t n = 40037;
    float *x = tc_alloc_f(n), *y0 = tc_alloc_f(n), *y1 = tc_alloc_f(n), *b = tc_alloc_f(n);
    tc_fill(&rng, x, n, -30.0f, 30.0f);
    tc_fill(&rng, x + 1000, 2000, -1.0f, 1.0f);
    tc_fill(&rng, x + 3000, 2000, -0.001f, 0.001f);
    static const float special[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 88.0f, 88.7f, 89.0f, 100.0f,
                                    -87.0f, -88.0f, -100.0f, -104.0f, -200.0f, 0.625f, -0.625f,
                                    0.62499f, 20.0f, 20.5f, -9.0f, -10.5f, -12.0f, 1e10f, -1e10f};
    memcpy(x + 5000, special, sizeof special);
    /* each function: a few float operations after an exp or tanh good to ~2 ulp:
     * |Δ| <= 16u·|y| (and an absolute 1e-30 for results flushed from ~1e-38 to 0).
     * GELU also forms its exp argument a = 2·sqrt(2/pi)(x + 0.044715x³) in float: two
     * roundings for x³, two for the constants, one FMA, one product; x and 0.044715x³
     * have the same sign, so |Δa| <= 6u·|a|, which moves e^a (and y, where it matters)
     * by 6u·|a| relative: 8u·|a|·|y| more. */
    for (int op = VT_UNARY_SILU; op <= VT_UNARY_TANH; op++) {
        assert_int_equal(api->unary(ref, (vt_unary_op)op, x, y0, n), VT_OK);
        assert_int_equal(api->unary(simd, (vt_unary_op)op, x, y1, n), VT_OK);
        for (int64_t i = 0; i < n; i++) {
            if (isinf(y0[i]) || isinf(y1[i])) {
                if (y0[i] != y1[i] && !(op == VT_UNARY_EXP && fabsf(x[i]) > 88.0f))
                    fail_msg("unary %d set %s: x %.9g gives %.9g, reference %.9g", op, set,
                             (double)x[i], (double)y1[i], (double)y0[i]);
                continue;
            }
            double xa = x[i], arg = 2 * 0.7978845608 * (xa + 0.044715 * xa * xa * xa);
            double rel = 16 + (op == VT_UNARY_GELU_TANH ? 8 * fabs(arg) : 0);
            NEAR(y1[i], y0[i], rel * TC_U * fabs(y0[i]) + 1e-30, "unary %d set %s: x = %.9g\n", op,
                 set, (double)x[i]);
        }
    }
    /* in place */
    memcpy(y1, x, sizeof(float) * (size_t)n);
    assert_int_equal(api->unary(simd, VT_UNARY_SILU, y1, y1, n), VT_OK);
    assert_int_equal(api->unary(ref, VT_UNARY_SILU, x, y0, n), VT_OK);
    for (int64_t i = 0; i < n; i++) NEAR(y1[i], y0[i], 16 * TC_U * fabs(y0[i]) + 1e-30, "silu in place %lld\n", (long long)i);

    /* binary, scale, mul_rows: the same single float operation per element: exact */
    tc_fill(&rng, b, n, -2.0f, 2.0f);
    static const int64_t nbs[] = {1, 7, 13, 40037};
    for (int op = VT_BINARY_ADD; op <= VT_BINARY_MUL; op++)
        for (int j = 0; j < 4; j++) {
            int64_t nn = nbs[j] == 13 ? 13 * 3079 : nbs[j] == 7 ? 7 * 5719 : n;
            assert_int_equal(api->binary(ref, (vt_binary_op)op, x, b, y0, nn, nbs[j]), VT_OK);
            memcpy(y1, x, sizeof(float) * (size_t)nn);
            assert_int_equal(api->binary(simd, (vt_binary_op)op, y1, b, y1, nn, nbs[j]), VT_OK);
            assert_memory_equal(y0, y1, sizeof(float) * (size_t)nn);
        }
    assert_int_equal(api->scale(ref, x, y0, n, 0.37f), VT_OK);
    assert_int_equal(api->scale(simd, x, y1, n, 0.37f), VT_OK);
    assert_memory_equal(y0, y1, sizeof(float) * (size_t)n);
    assert_int_equal(api->mul_rows(ref, x, b, y0, 1001, 39), VT_OK);
    assert_int_equal(api->mul_rows(simd, x, b, y1, 1001, 39), VT_OK);
    assert_memory_equal(y0, y1, sizeof(float) * 1001 * 39);
    free(x);
    free(y0);
    free(y1);
    free(b);
    api->shutdown(ref);
    api->shutdown(simd);
}

/* "auto" picks a SIMD set on a CPU that has one, "scalar" forces the reference. */
static void test_auto_choice(void **state)
{
    (void)state;
    vt_backend_ctx *a = tc_ctx("auto", 1), *s = tc_ctx("scalar", 1), *n = tc_ctx(NULL, 1);
    const char *env = getenv("VT_KERNELS");
    if (!env || !*env || !strcmp(env, "auto")) {
        assert_ptr_equal(vt_cpu_ctx_kernels(a), vt_cpu_kernels_best());
        assert_ptr_equal(vt_cpu_ctx_kernels(n), vt_cpu_kernels_best());
    }
    assert_string_equal(vt_cpu_ctx_kernels(s)->name, "scalar");
    fprintf(stderr, "[  INFO    ] auto kernel set on this CPU: %s (%s)\n", vt_cpu_kernels_best()->name,
            vt_cpu_kernels_best()->isa);
    tc_api()->shutdown(a);
    tc_api()->shutdown(s);
    tc_api()->shutdown(n);
}

#define SET_TESTS(fn)                                                                          \
    cmocka_unit_test_prestate(fn, (void *)"avx2"), cmocka_unit_test_prestate(fn, (void *)"avx512"), \
        cmocka_unit_test_prestate(fn, (void *)"avx2w16")

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auto_choice), SET_TESTS(test_dequant_exact), SET_TESTS(test_mat_mul),
        SET_TESTS(test_mat_mul_splits),
        SET_TESTS(test_norms),  SET_TESTS(test_attention),   SET_TESTS(test_delta_net),
        SET_TESTS(test_ssm_conv), SET_TESTS(test_elementwise),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
