/*
 * test_moe_ops.c - the fused MoE ops of ABI 1.2 (moe_route, moe_ffn) of the
 * backend named by VT_MOE_TEST_BACKEND ("cpu" or "cuda"), both plugins
 * dlopen-ed from the build's plugin folder, against:
 *
 *  - an independent double-precision evaluation of the contract written
 *    here (weights decoded by backend-cpu's scalar get_rows, which
 *    test_cpu_ops / test_quant check against the spec): for backend-cpu's
 *    scalar kernels and for the backend under test;
 *  - backend-cpu's scalar moe_ffn (the reference): the backend under test
 *    (cpu "auto" kernels, or cuda) within the float32 rounding bound;
 *  - itself: the expert range split into groups gives the bits of one call
 *    (the streaming contract), and pairs outside the range change nothing.
 *
 * Sizes: every token count 1..18 (decode and prefill kernels on each side of
 * every switch) and 33, 64, 130; top-k 1, 2, 4, 8; expert counts with unused
 * experts and experts picked by many tokens; every weight type the backends
 * have kernels for, gate/up and down types mixed, the fused gate_up layout,
 * SiLU and tanh-GELU; x and out with row strides.
 *
 * Tolerance: a product y = W_down·(act(W_gate x) ⊙ W_up x) in float32 with
 * any summation order differs from the exact value by at most about
 * sqrt(n)·u·Σ|terms| per dot product (random walk); the bound used is
 * |Δ| <= 64·u·(sqrt(n_embd)·Σ_j|w_j|·||g_j||·max|W_down| ... ) folded into
 * a per-token scale S_t = Σ_j |w_j| · Σ_i |W_down[e_j][:, i]|·|g_j[i]| (the
 * sum of absolute terms) with |Δ| <= 8·sqrt(n_ff + n_embd)·u·S_t + the
 * propagated gate/up error, which is bounded the same way. The reference
 * check of the backend under test uses tol = 16·sqrt(n)·u·S (n = n_embd +
 * n_ff), the exact-data property tests use 0.
 *
 * Without a CUDA device (CI) the cuda variant skips loudly (77).
 */
#include <dlfcn.h>
#include <float.h>
#include <math.h>

#include "test_util.h"
#include "test_backend_load.h"

#include "error.h"
#include "registry.h"
#include "vt/backend.h"
#include "test_quant_blocks.h"

#ifndef VT_MOE_TEST_BACKEND
#define VT_MOE_TEST_BACKEND "cpu"
#endif
#ifndef VT_GPU_TEST_BUILT
#define VT_GPU_TEST_BUILT 1
#define VT_GPU_TEST_REQUIRED 0
#define VT_GPU_TEST_WHY ""
#endif

#define U32 5.9604644775390625e-8 /* 2^-24 */

static const vt_backend_api *B, *C;   /* backend under test, backend-cpu */
static vt_backend_ctx *bctx, *cctx;   /* under test ("auto" kernels for cpu), cpu scalar */
static vt_backend_ctx *fctx;          /* cuda with VT_GPU_INT8_DOT=0 VT_GPU_GEMM=cublas: the float kernels */
static double g_worst_tc;             /* largest |d|/tol of cuda's tensor-core prefill cases */
static int g_n_tc;                    /* cases with both products on tensor cores */
static int g_state;
static int is_cpu;

static const vt_backend_api *load_api(const char *name)
{
    const vt_plugin_desc *d = vt_test_load_backend(name);
    assert_int_equal(d->abi_minor, VT_ABI_MINOR);
    return (const vt_backend_api *)d->table;
}

static int declared_present(const vt_backend_api *a, uint32_t id)
{
    for (uint32_t i = 0; i < a->n_caps; i++)
        if (a->caps[i].id == id) return a->caps[i].state == VT_CAP_PRESENT;
    return 0;
}

static int ready(void)
{
    if (g_state == 0) {
        g_state = -1;
        is_cpu = !strcmp(VT_MOE_TEST_BACKEND, "cpu");
        if (!VT_GPU_TEST_BUILT) {
            if (VT_GPU_TEST_REQUIRED)
                fail_msg("backend-" VT_MOE_TEST_BACKEND " was not built although CMake ran with "
                         "CI=true and found its toolchain: %s", VT_GPU_TEST_WHY);
            fprintf(stderr, "*** SKIPPING: backend-" VT_MOE_TEST_BACKEND " was not built: %s\n",
                    VT_GPU_TEST_WHY);
            vt_test_fixtures_skipped = 1;
        } else {
            C = load_api("cpu");
            B = is_cpu ? C : load_api(VT_MOE_TEST_BACKEND);
            if (B->device_count() == 0) {
                fprintf(stderr, "\n*** SKIPPING: backend-" VT_MOE_TEST_BACKEND
                        " reports no device on this machine (the moe op checks run on the H200)\n\n");
                vt_test_fixtures_skipped = 1;
            } else {
                assert_true(declared_present(B, VT_CAP_OP_MOE_ROUTE));
                assert_true(declared_present(B, VT_CAP_OP_MOE_FFN));
                assert_non_null(B->moe_route);
                assert_non_null(B->moe_ffn);
                vt_backend_params bp = {.struct_size = sizeof bp, .device = 0, .n_threads = 3,
                                        .kernels = "auto", .host = vt_host_table()};
                if (B->init(&bp, &bctx) != VT_OK) fail_msg("init: %s", vt_last_error());
                if (!is_cpu) {
                    setenv("VT_GPU_INT8_DOT", "0", 1);
                    setenv("VT_GPU_GEMM", "cublas", 1);
                    if (B->init(&bp, &fctx) != VT_OK) fail_msg("init: %s", vt_last_error());
                    unsetenv("VT_GPU_INT8_DOT");
                    unsetenv("VT_GPU_GEMM");
                }
                vt_backend_params cp = {.struct_size = sizeof cp, .device = 0, .n_threads = 2,
                                        .kernels = "scalar", .host = vt_host_table()};
                if (C->init(&cp, &cctx) != VT_OK) fail_msg("cpu init: %s", vt_last_error());
                g_state = 1;
            }
        }
    }
    if (g_state != 1) {
        skip();
        return 0;
    }
    return 1;
}

static int teardown(void **s)
{
    (void)s;
    if (bctx) B->shutdown(bctx);
    if (cctx) C->shutdown(cctx);
    if (fctx) B->shutdown(fctx);
    bctx = cctx = fctx = NULL;
    return 0;
}

/* ---------------------------------------------------------------- helpers */

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static uint32_t rnd32(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}
static float urand(float lo, float hi) { return lo + (hi - lo) * (float)(rnd32() >> 8) * (1.0f / 16777216.0f); }

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    assert_non_null(p);
    return p;
}

/* device memory of the backend under test holding a copy of h (bytes) */
static void *dput(const void *h, size_t bytes)
{
    void *d = NULL;
    if (B->alloc(bctx, bytes ? bytes : 8, "test", &d) != VT_OK) fail_msg("alloc: %s", vt_last_error());
    if (h && bytes && B->copy_h2d(bctx, d, h, bytes) != VT_OK) fail_msg("h2d: %s", vt_last_error());
    return d;
}
static void dget(void *h, const void *d, size_t bytes)
{
    if (B->copy_d2h(bctx, h, d, bytes) != VT_OK) fail_msg("d2h: %s", vt_last_error());
}

/* n_rows rows of n_in values of `type`, random, decoding to values of about +-0.5 */
static uint8_t *make_rows(uint32_t type, int64_t n_rows, int64_t n_in, uint64_t seed)
{
    size_t rb = (size_t)vt_type_row_bytes(type, (uint64_t)n_in);
    uint8_t *p = xmalloc(rb * (size_t)n_rows);
    int64_t n = n_rows * n_in;
    if (type == VT_TYPE_F32) {
        for (int64_t i = 0; i < n; i++) ((float *)p)[i] = urand(-0.5f, 0.5f);
    } else if (type == VT_TYPE_F16) {
        uint64_t s = seed | 1;
        for (int64_t i = 0; i < n; i++) tqb_put16(p + 2 * i, tqb_f16(&s, -2 - (int)(tqb_next(&s) >> 62), 1));
    } else if (type == VT_TYPE_BF16) {
        for (int64_t i = 0; i < n; i++) {
            float f = urand(-0.5f, 0.5f);
            uint32_t b;
            memcpy(&b, &f, 4);
            tqb_put16(p + 2 * i, (uint16_t)(b >> 16));
        }
    } else {
        /* block scales chosen so that scale x sub-scale x largest code is about 1 */
        int e;
        switch (type) {
        case VT_TYPE_Q8_0: case VT_TYPE_IQ4_NL: e = -8; break;
        case VT_TYPE_Q4_0: case VT_TYPE_Q4_1: e = -4; break;
        case VT_TYPE_Q5_0: case VT_TYPE_Q5_1: e = -5; break;
        case VT_TYPE_Q2_K: e = -6; break;
        case VT_TYPE_Q3_K: e = -7; break;
        case VT_TYPE_Q4_K: case VT_TYPE_Q5_K: e = -11; break;
        case VT_TYPE_Q6_K: case VT_TYPE_IQ4_XS: e = -12; break;
        default: e = -6; break; /* MXFP4: 2^(e+4..7) x codes up to 6 */
        }
        tqb_fill(type, p, n_rows, n_in, seed, e);
    }
    return p;
}

/* rows decoded to float by backend-cpu's scalar get_rows */
static float *decode_rows(uint32_t type, const uint8_t *w, int64_t n_rows, int64_t n_in)
{
    vt_weight v = {type, n_in, n_rows, vt_type_row_bytes(type, (uint64_t)n_in), w, "decode"};
    int32_t *ids = xmalloc((size_t)n_rows * sizeof *ids);
    for (int64_t i = 0; i < n_rows; i++) ids[i] = (int32_t)i;
    float *out = xmalloc((size_t)(n_rows * n_in) * sizeof(float));
    if (vt_backend_get_rows_fn(C, type)(cctx, &v, ids, n_rows, out) != VT_OK) fail_msg("get_rows: %s", vt_last_error());
    free(ids);
    return out;
}

static double act_d(uint32_t act, double x)
{
    if (act == VT_MOE_ACT_SILU) return x / (1.0 + exp(-x));
    double u = sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
    return 0.5 * x * (1.0 + tanh(u));
}

/* ---------------------------------------------------------------- moe_route */

static void route_case(int64_t rows, int64_t n, int64_t k, int renorm, int scaled, int ties)
{
    float *lg = xmalloc((size_t)(rows * n) * sizeof(float)), *sc = xmalloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < rows * n; i++)
        lg[i] = ties ? (float)(int)urand(0.0f, 4.0f) : urand(-4.0f, 4.0f);
    for (int64_t i = 0; i < n; i++) sc[i] = urand(0.25f, 2.0f);
    int32_t *rid = xmalloc((size_t)(rows * k) * 4), *gid = xmalloc((size_t)(rows * k) * 4);
    float *rw = xmalloc((size_t)(rows * k) * 4), *gw = xmalloc((size_t)(rows * k) * 4);
    /* reference: softmax_topk (host arrays) then the scale, as vt/backend.h defines it */
    if (C->softmax_topk(cctx, lg, rows, n, k, renorm, rid, rw, NULL) != VT_OK)
        fail_msg("softmax_topk: %s", vt_last_error());
    if (scaled)
        for (int64_t i = 0; i < rows * k; i++) rw[i] *= sc[rid[i]];
    float *dl = dput(lg, (size_t)(rows * n) * 4), *ds = dput(sc, (size_t)n * 4);
    int32_t *di = dput(NULL, (size_t)(rows * k) * 4);
    float *dw = dput(NULL, (size_t)(rows * k) * 4);
    if (B->moe_route(bctx, dl, rows, n, k, renorm, scaled ? ds : NULL, di, dw) != VT_OK)
        fail_msg("moe_route: %s", vt_last_error());
    dget(gid, di, (size_t)(rows * k) * 4);
    dget(gw, dw, (size_t)(rows * k) * 4);
    for (int64_t i = 0; i < rows * k; i++) {
        if (gid[i] != rid[i])
            fail_msg("moe_route rows %lld n %lld k %lld: entry %lld picked expert %d, reference %d",
                     (long long)rows, (long long)n, (long long)k, (long long)i, gid[i], rid[i]);
        /* the same double evaluation; a device libm may differ by one ulp of exp */
        double tol = is_cpu ? 0.0 : 8 * U32 * fabs(rw[i]);
        if (fabs((double)gw[i] - rw[i]) > tol)
            fail_msg("moe_route: weight %lld = %.9g, reference %.9g", (long long)i, gw[i], rw[i]);
    }
    B->free(bctx, dl);
    B->free(bctx, ds);
    B->free(bctx, di);
    B->free(bctx, dw);
    free(lg); free(sc); free(rid); free(gid); free(rw); free(gw);
}

static void test_moe_route(void **s)
{
    (void)s;
    if (!ready()) return;
    const int64_t rows[] = {1, 2, 5, 17, 130}, ns[] = {4, 8, 60, 128, 256, 512}, ks[] = {1, 2, 4, 8};
    int cases = 0;
    /* backend-cuda's two routing kernels (VT_GPU_ROUTE: one warp per row
     * where it fits, else and with "block" the block kernel k_moe_route) */
    static const char *kernels[] = {"warp", "block"};
    for (int kv = 0; kv < (is_cpu ? 1 : 2); kv++) {
    if (!is_cpu) setenv("VT_GPU_ROUTE", kernels[kv], 1);
    for (size_t r = 0; r < 5; r++)
        for (size_t n = 0; n < 6; n++)
            for (size_t k = 0; k < 4; k++) {
                if (ks[k] > ns[n]) continue;
                route_case(rows[r], ns[n], ks[k], (int)((r + k) & 1), (int)(n & 1), 0);
                cases++;
            }
    route_case(9, 64, 8, 1, 1, 1); /* many equal logits: ties to the lower index */
    route_case(3, 16, 4, 0, 0, 1);
    /* odd top-k, and the one-warp kernel's limit (k <= 32, lane m keeps pick m) */
    route_case(5, 256, 3, 1, 1, 0);
    route_case(3, 256, 7, 0, 1, 0);
    route_case(2, 256, 32, 1, 1, 0);
    route_case(2, 256, 33, 1, 0, 0);
    route_case(4, 512, 32, 0, 1, 1);
    cases += 7;
    }
    unsetenv("VT_GPU_ROUTE");
    fprintf(stderr, "moe_route: %d cases equal softmax_topk + scale\n", cases);
}

/* ---------------------------------------------------------------- moe_ffn */

typedef struct ffn_case {
    uint32_t tg, tu, td; /* gate, up, down types */
    int64_t E, F, NX, K, T;
    uint32_t act;
    int fused;           /* gate_up in one stack, w_up = w_gate + F rows */
} ffn_case;

typedef struct ffn_data {
    uint8_t *gate_up, *gate, *up, *down; /* host: stacks [NX][rows][row bytes] */
    size_t rbg, rbu, rbd;
    float *x;            /* [T][ldx] */
    int32_t *ids;        /* [T][K] */
    float *w;            /* [T][K] */
    int64_t ldx, ldo;
} ffn_data;

static void make_data(const ffn_case *c, ffn_data *d)
{
    d->rbg = (size_t)vt_type_row_bytes(c->tg, (uint64_t)c->E);
    d->rbu = (size_t)vt_type_row_bytes(c->tu, (uint64_t)c->E);
    d->rbd = (size_t)vt_type_row_bytes(c->td, (uint64_t)c->F);
    uint64_t seed = rnd32() * 2654435761ull + 17;
    if (c->fused) { /* one stack of [NX][2F] rows of tg */
        d->gate_up = make_rows(c->tg, c->NX * 2 * c->F, c->E, seed);
        d->gate = d->up = NULL;
    } else {
        d->gate_up = NULL;
        d->gate = make_rows(c->tg, c->NX * c->F, c->E, seed);
        d->up = make_rows(c->tu, c->NX * c->F, c->E, seed + 1);
    }
    d->down = make_rows(c->td, c->NX * c->E, c->F, seed + 2);
    d->ldx = c->E + (c->T % 3 == 1 ? 3 : 0);
    d->ldo = c->E + (c->T % 2 ? 5 : 0);
    d->x = xmalloc((size_t)(c->T * d->ldx) * 4);
    for (int64_t i = 0; i < c->T * d->ldx; i++) d->x[i] = i % d->ldx < c->E ? urand(-1.0f, 1.0f) : NAN;
    d->ids = xmalloc((size_t)(c->T * c->K) * 4);
    d->w = xmalloc((size_t)(c->T * c->K) * 4);
    for (int64_t t = 0; t < c->T; t++) {
        /* distinct experts per token, skewed so that some experts get many tokens
         * and some none; one token in seven picks an expert twice when K > 1 */
        for (int64_t j = 0; j < c->K; j++) {
            int32_t e;
            int again;
            do {
                e = (int32_t)((rnd32() % 4 == 0) ? rnd32() % (uint32_t)c->NX : rnd32() % (uint32_t)((c->NX + 1) / 2));
                again = 0;
                for (int64_t q = 0; q < j; q++) again |= d->ids[t * c->K + q] == e;
            } while (again && !(t % 7 == 3 && j == 1));
            d->ids[t * c->K + j] = e;
            d->w[t * c->K + j] = urand(0.05f, 1.0f);
        }
    }
}

static void free_data(ffn_data *d)
{
    free(d->gate_up); free(d->gate); free(d->up); free(d->down);
    free(d->x); free(d->ids); free(d->w);
}

/* v rounded to TF32 as cvt.rna does (10 fraction bits, to nearest, ties away
 * from zero; finite values): the inputs of cuda's tensor-core products */
static float tf32_of(float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    if ((u & 0x7F800000u) != 0x7F800000u) u = (u + 0x1000u) & 0xFFFFE000u;
    memcpy(&v, &u, 4);
    return v;
}

/* x (n values, n a multiple of 32) rounded to int8 blocks as cuda's prefill
 * products round their activations (gpu_device.cuh, xq_round; the one-token
 * kernels' rounding): per 32 values d = max|x| / 127, q = x·(1/d) to nearest
 * even in [-127, 127], x̂ = d·q, all in float (finite x). */
static void xq_round_row(const float *x, int64_t n, float *out)
{
    for (int64_t b = 0; b < n / 32; b++) {
        float m = 0.0f;
        for (int i = 0; i < 32; i++) m = fmaxf(m, fabsf(x[32 * b + i]));
        float dq = m >= 127.0f * FLT_MIN ? m / 127.0f : 0.0f, id = dq > 0.0f ? 1.0f / dq : 0.0f;
        for (int i = 0; i < 32; i++) {
            float q = nearbyintf(x[32 * b + i] * id);
            q = q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q;
            out[32 * b + i] = dq * q;
        }
    }
}

/* The contract in double: out0 + Σ over in-range pairs in increasing expert
 * id (ties in order of j) of w·y, and S = the per-token sum of |terms|.
 * tc_gu / tc_dn: the inputs of the gate/up (x and the decoded weights) / of
 * the down product (the activation, rounded to float as the kernels store
 * it, and the decoded weights) rounded to TF32 first, as the tensor-core
 * kernels do, after rounding the activations to int8 blocks (xq_round_row):
 * x exactly as the kernel does; the down product's input is the kernels' own
 * float result, whose int8 rounding a reference in double cannot repeat
 * code for code, so there Q (when not NULL) gets the rounding's bound
 * Σ |w·d_b|/2 per output instead. The rest of the arithmetic is the same, so
 * the kernels then differ from this by float32 rounding only (and Q). */
static void reference_r(const ffn_case *c, const ffn_data *d, const float *out0, int64_t b,
                        int64_t e_end, double *ref, double *S, int tc_gu, int tc_dn, double *Q)
{
    float *xh = xmalloc((size_t)c->E * sizeof(float)), *gf = xmalloc((size_t)c->F * sizeof(float));
    double *db = xmalloc((size_t)(c->F / 32 + 1) * sizeof(double));
    const int64_t E = c->E, F = c->F;
    float *G = c->fused ? decode_rows(c->tg, d->gate_up, c->NX * 2 * F, E) : decode_rows(c->tg, d->gate, c->NX * F, E);
    float *Uw = c->fused ? NULL : decode_rows(c->tu, d->up, c->NX * F, E);
    float *D = decode_rows(c->td, d->down, c->NX * E, F);
    double *g = xmalloc((size_t)F * sizeof(double)), *ga = xmalloc((size_t)F * sizeof(double));
    for (int64_t t = 0; t < c->T; t++) {
        for (int64_t o = 0; o < E; o++) {
            ref[t * E + o] = out0[t * d->ldo + o];
            S[t * E + o] = fabs(out0[t * d->ldo + o]);
            if (Q) Q[t * E + o] = 0;
        }
        if (tc_gu) xq_round_row(d->x + t * d->ldx, E, xh);
        for (int64_t e = b; e < e_end; e++)
            for (int64_t j = 0; j < c->K; j++) {
                if (d->ids[t * c->K + j] != e) continue;
                const float *xr = tc_gu ? xh : d->x + t * d->ldx;
                for (int64_t f = 0; f < F; f++) {
                    const float *gr = c->fused ? G + ((e * 2 * F) + f) * E : G + (e * F + f) * E;
                    const float *ur = c->fused ? G + ((e * 2 * F) + F + f) * E : Uw + (e * F + f) * E;
                    double sg = 0, su = 0, ag = 0, au = 0;
                    for (int64_t i = 0; i < E; i++) {
                        double xv = tc_gu ? tf32_of(xr[i]) : xr[i];
                        double gv = tc_gu ? tf32_of(gr[i]) : gr[i], uv = tc_gu ? tf32_of(ur[i]) : ur[i];
                        sg += gv * xv;
                        su += uv * xv;
                        ag += fabs(gv * xv);
                        au += fabs(uv * xv);
                    }
                    double a = act_d(c->act, sg);
                    g[f] = a * su;
                    if (tc_dn) g[f] = tf32_of((float)g[f]);
                    gf[f] = (float)(a * su);
                    /* |d act/dx| <= 1.2 for both: the error of g from the dot products' */
                    ga[f] = fabs(a) * au + 1.2 * fabs(su) * ag + fabs(g[f]);
                }
                double wj = d->w[t * c->K + j];
                if (tc_dn && Q)
                    for (int64_t k = 0; k < F / 32; k++) {
                        float m = 0.0f;
                        for (int i = 0; i < 32; i++) m = fmaxf(m, fabsf(gf[32 * k + i]));
                        db[k] = 0.5005 * (1 + 0x1p-10) * m / 127.0;
                    }
                for (int64_t o = 0; o < E; o++) {
                    const float *dr = D + (e * E + o) * F;
                    double y = 0, ay = 0, aq = 0;
                    for (int64_t f = 0; f < F; f++) {
                        double dv = tc_dn ? tf32_of(dr[f]) : dr[f];
                        y += dv * g[f];
                        ay += fabs(dv) * ga[f];
                        if (tc_dn && Q) aq += fabs(dv) * db[f / 32];
                    }
                    ref[t * E + o] += wj * y;
                    S[t * E + o] += fabs(wj) * ay + fabs(ref[t * E + o]);
                    if (Q) Q[t * E + o] += fabs(wj) * aq;
                }
            }
    }
    free(G); free(Uw); free(D); free(g); free(ga); free(xh); free(gf); free(db);
}

static void reference(const ffn_case *c, const ffn_data *d, const float *out0, int64_t b,
                      int64_t e_end, double *ref, double *S)
{
    reference_r(c, d, out0, b, e_end, ref, S, 0, 0, NULL);
}

/* Run one moe_ffn on `api`/`ctx` (the caller's device memory) for experts [b, e). */
typedef struct dev_side {
    const vt_backend_api *api;
    vt_backend_ctx *ctx;
    void *gu, *g, *u, *dn, *x, *ids, *w, *out, *scratch, *tab;
    size_t scratch_bytes;
} dev_side;

static void *side_put(dev_side *s, const void *h, size_t bytes)
{
    void *p = NULL;
    if (s->api->alloc(s->ctx, bytes ? bytes : 8, "test", &p) != VT_OK) fail_msg("alloc: %s", vt_last_error());
    if (h && bytes && s->api->copy_h2d(s->ctx, p, h, bytes) != VT_OK) fail_msg("h2d: %s", vt_last_error());
    return p;
}

static void side_setup(dev_side *s, const vt_backend_api *api, vt_backend_ctx *ctx, const ffn_case *c,
                       const ffn_data *d)
{
    memset(s, 0, sizeof *s);
    s->api = api;
    s->ctx = ctx;
    const int64_t NX = c->NX, E = c->E, F = c->F;
    if (c->fused) s->gu = side_put(s, d->gate_up, d->rbg * (size_t)(NX * 2 * F));
    else {
        s->g = side_put(s, d->gate, d->rbg * (size_t)(NX * F));
        s->u = side_put(s, d->up, d->rbu * (size_t)(NX * F));
    }
    s->dn = side_put(s, d->down, d->rbd * (size_t)(NX * E));
    const void **tab = xmalloc((size_t)(3 * NX) * sizeof *tab);
    for (int64_t e = 0; e < NX; e++) {
        if (c->fused) {
            tab[e] = (const uint8_t *)s->gu + (size_t)(e * 2 * F) * d->rbg;
            tab[NX + e] = (const uint8_t *)s->gu + (size_t)(e * 2 * F + F) * d->rbg;
        } else {
            tab[e] = (const uint8_t *)s->g + (size_t)(e * F) * d->rbg;
            tab[NX + e] = (const uint8_t *)s->u + (size_t)(e * F) * d->rbu;
        }
        tab[2 * NX + e] = (const uint8_t *)s->dn + (size_t)(e * E) * d->rbd;
    }
    s->tab = side_put(s, tab, (size_t)(3 * NX) * sizeof *tab);
    free(tab);
    s->x = side_put(s, d->x, (size_t)(c->T * d->ldx) * 4);
    s->ids = side_put(s, d->ids, (size_t)(c->T * c->K) * 4);
    s->w = side_put(s, d->w, (size_t)(c->T * c->K) * 4);
    s->out = side_put(s, NULL, (size_t)(c->T * d->ldo) * 4);
    s->scratch_bytes = vt_moe_ffn_scratch_bytes(c->T, c->K, E, F, NX);
    s->scratch = side_put(s, NULL, s->scratch_bytes);
}

static void side_free(dev_side *s)
{
    void *ps[] = {s->gu, s->g, s->u, s->dn, s->x, s->ids, s->w, s->out, s->scratch, s->tab};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        if (ps[i]) s->api->free(s->ctx, ps[i]);
}

static void side_run(dev_side *s, const ffn_case *c, const ffn_data *d, const float *out0,
                     const int64_t *cuts, int n_cuts, float *got)
{
    if (s->api->copy_h2d(s->ctx, s->out, out0, (size_t)(c->T * d->ldo) * 4) != VT_OK)
        fail_msg("h2d: %s", vt_last_error());
    const void *const *tab = (const void *const *)s->tab;
    vt_moe_ffn_args a = {
        .struct_size = sizeof a, .act = c->act, .n_tokens = c->T, .k = c->K, .n_embd = c->E,
        .n_ff = c->F, .n_expert = c->NX, .x = s->x, .ldx = d->ldx, .ids = s->ids,
        .weights = s->w, .out = s->out, .ldo = d->ldo, .type_gate = c->tg, .type_up = c->tu,
        .type_down = c->td, .w_gate = tab, .w_up = tab + c->NX, .w_down = tab + 2 * c->NX,
        .scratch = s->scratch, .scratch_bytes = s->scratch_bytes, .name = "test_exps"};
    for (int i = 0; i + 1 < n_cuts; i++) {
        a.expert_begin = cuts[i];
        a.expert_end = cuts[i + 1];
        if (s->api->moe_ffn(s->ctx, &a) != VT_OK) fail_msg("moe_ffn: %s", vt_last_error());
    }
    if (s->api->copy_d2h(s->ctx, got, s->out, (size_t)(c->T * d->ldo) * 4) != VT_OK)
        fail_msg("d2h: %s", vt_last_error());
}

static double check(const char *what, const ffn_case *c, const ffn_data *d, const float *got,
                    const double *ref, const double *S, double tol_scale, const float *out0);

static const char *case_name(const ffn_case *c, char *buf, size_t cap)
{
    snprintf(buf, cap, "moe_ffn %s/%s/%s%s E %lld F %lld NX %lld K %lld T %lld %s",
             vt_type_name(c->tg), vt_type_name(c->tu), vt_type_name(c->td),
             c->fused ? " (fused gate_up)" : "", (long long)c->E, (long long)c->F, (long long)c->NX,
             (long long)c->K, (long long)c->T, c->act == VT_MOE_ACT_SILU ? "silu" : "gelu");
    return buf;
}

/* |got - ref| <= tol_scale · S (+ Q when not NULL) over the real columns;
 * padding keeps out0's bits. */
static double check_q(const char *what, const ffn_case *c, const ffn_data *d, const float *got,
                      const double *ref, const double *S, double tol_scale, const double *Q,
                      const float *out0)
{
    double worst = 0;
    for (int64_t t = 0; t < c->T; t++)
        for (int64_t o = 0; o < d->ldo; o++) {
            float gv = got[t * d->ldo + o];
            if (o >= c->E) {
                if (memcmp(&gv, &out0[t * d->ldo + o], 4))
                    fail_msg("%s: padding column %lld of token %lld was written", what, (long long)o,
                             (long long)t);
                continue;
            }
            double r = ref[t * c->E + o],
                   tol = tol_scale * S[t * c->E + o] + (Q ? Q[t * c->E + o] : 0) + 1e-30;
            double err = fabs((double)gv - r);
            if (!(err <= tol))
                fail_msg("%s: token %lld column %lld = %.9g, reference %.9g (|d| %.3g > %.3g)", what,
                         (long long)t, (long long)o, gv, r, err, tol);
            if (err / tol > worst) worst = err / tol;
        }
    return worst;
}

static double check(const char *what, const ffn_case *c, const ffn_data *d, const float *got,
                    const double *ref, const double *S, double tol_scale, const float *out0)
{
    return check_q(what, c, d, got, ref, S, tol_scale, NULL, out0);
}

/* The types whose one-token products backend-cuda takes on int8 activations */
static int int8_type(uint32_t t)
{
    return t == VT_TYPE_Q8_0 || t == VT_TYPE_Q4_0 || t == VT_TYPE_Q4_1 || t == VT_TYPE_Q5_0 ||
           t == VT_TYPE_Q5_1 || t == VT_TYPE_IQ4_NL || t == VT_TYPE_Q4_K || t == VT_TYPE_Q5_K ||
           t == VT_TYPE_Q6_K || tqb_is_lowbit(t);
}

/* One case: the scalar CPU and the backend under test against the double
 * reference, the backend against the scalar CPU, the split range bitwise. */
static void ffn_run(const ffn_case *c)
{
    char nm[256];
    case_name(c, nm, sizeof nm);
    ffn_data d;
    make_data(c, &d);
    float *out0 = xmalloc((size_t)(c->T * d.ldo) * 4);
    for (int64_t i = 0; i < c->T * d.ldo; i++) out0[i] = i % d.ldo < c->E ? urand(-1.0f, 1.0f) : -777.0f;
    double *ref = xmalloc((size_t)(c->T * c->E) * sizeof(double)), *S = xmalloc((size_t)(c->T * c->E) * sizeof(double));
    reference(c, &d, out0, 0, c->NX, ref, S);
    const double n = (double)(c->E + c->F);
    float *gc = xmalloc((size_t)(c->T * d.ldo) * 4), *gb = xmalloc((size_t)(c->T * d.ldo) * 4),
          *gs = xmalloc((size_t)(c->T * d.ldo) * 4);
    int64_t whole[2] = {0, c->NX};
    dev_side sc, sb;
    side_setup(&sc, C, cctx, c, &d);
    side_run(&sc, c, &d, out0, whole, 2, gc);
    char what[300];
    snprintf(what, sizeof what, "%s (cpu scalar vs double)", nm);
    check(what, c, &d, gc, ref, S, 8 * sqrt(n) * U32, out0);
    side_setup(&sb, B, bctx, c, &d);
    side_run(&sb, c, &d, out0, whole, 2, gb);
    /* backend-cpu's fast kernels quantise activations to 8-bit blocks for the
     * block types (their own bound is test_cpu_quant_kernels'), and so does
     * cuda's decode for the types of int8_type (test_cuda_quant bounds its
     * block dots): a loose check here; the GPU's float32 kernels (fctx)
     * get the float32 bound */
    const int rounds = is_cpu || (c->T <= 8 && int8_type(c->tg) && c->tu == c->tg && int8_type(c->td));
    /* cuda's prefill (more than 8 tokens) takes TF32 tensor cores
     * (gpu_mma.cu) for a product whose weights are a block type, whose n_in
     * is a multiple of 32 and (gate/up) whose x rows are 16-byte aligned:
     * such a case is held to a reference with the same inputs rounded to
     * TF32 (reference_r), within the float32 bound, which checks the
     * kernels' fragments and tiles as tightly as the float kernels'. */
    const int tc_gu = !is_cpu && c->T > 8 && vt_type_block_size(c->tg) > 1 && c->E % 32 == 0 &&
                      d.ldx % 4 == 0;
    const int tc_dn = !is_cpu && c->T > 8 && vt_type_block_size(c->td) > 1 && c->F % 32 == 0;
    const double *rb = ref, *Sb = S;
    double *ref_t = NULL, *S_t = NULL, *Q_t = NULL;
    if (tc_gu || tc_dn) {
        ref_t = xmalloc((size_t)(c->T * c->E) * sizeof(double));
        S_t = xmalloc((size_t)(c->T * c->E) * sizeof(double));
        Q_t = xmalloc((size_t)(c->T * c->E) * sizeof(double));
        reference_r(c, &d, out0, 0, c->NX, ref_t, S_t, tc_gu, tc_dn, Q_t);
        rb = ref_t;
        Sb = S_t;
    }
    snprintf(what, sizeof what, "%s (%s vs double%s)", nm, is_cpu ? "cpu auto" : VT_MOE_TEST_BACKEND,
             tc_gu || tc_dn ? tc_gu && tc_dn ? ", TF32 inputs" : tc_gu ? ", TF32 gate/up" : ", TF32 down" : "");
    /* the tensor cores' float32 accumulation order and rounding are not
     * specified: the linear (worst-case) bound n·u for them */
    double wtc = check_q(what, c, &d, gb, rb, Sb,
                         rounds ? 1.0 / 64 : tc_gu || tc_dn ? 4 * n * U32 : 16 * sqrt(n) * U32,
                         rounds ? NULL : Q_t, out0);
    if ((tc_gu || tc_dn) && wtc > g_worst_tc) g_worst_tc = wtc;
    if (tc_gu && tc_dn) g_n_tc++;
    free(ref_t);
    free(S_t);
    free(Q_t);
    if (!is_cpu) {
        dev_side sf;
        side_setup(&sf, B, fctx, c, &d);
        side_run(&sf, c, &d, out0, whole, 2, gs);
        snprintf(what, sizeof what, "%s (%s float kernels vs double)", nm, VT_MOE_TEST_BACKEND);
        check(what, c, &d, gs, ref, S, 16 * sqrt(n) * U32, out0);
        side_free(&sf);
    }
    /* split: [0, a), [a, b), [b, NX) and an empty range give one call's bits */
    int64_t a = c->NX / 3, b2 = (2 * c->NX) / 3;
    int64_t cuts[5] = {0, a, a, b2, c->NX};
    side_run(&sb, c, &d, out0, cuts, 5, gs);
    if (memcmp(gs, gb, (size_t)(c->T * d.ldo) * 4)) {
        for (int64_t i = 0; i < c->T * d.ldo; i++)
            if (memcmp(&gs[i], &gb[i], 4))
                fail_msg("%s: the expert range split in three calls differs from one call at "
                         "element %lld (%.9g vs %.9g)", nm, (long long)i, gs[i], gb[i]);
    }
    /* an empty range, and the range of an expert no pair picked (when there
     * is one: it reaches the kernels' filter), leave out unchanged */
    int64_t none[2] = {c->NX, c->NX};
    side_run(&sb, c, &d, out0, none, 2, gs);
    if (memcmp(gs, out0, (size_t)(c->T * d.ldo) * 4)) fail_msg("%s: an empty range changed out", nm);
    for (int64_t e = 0; e < c->NX; e++) {
        int used = 0;
        for (int64_t i = 0; i < c->T * c->K; i++) used |= d.ids[i] == e;
        if (used) continue;
        int64_t unpicked[2] = {e, e + 1};
        side_run(&sb, c, &d, out0, unpicked, 2, gs);
        if (memcmp(gs, out0, (size_t)(c->T * d.ldo) * 4))
            fail_msg("%s: the range of expert %lld, which no pair picked, changed out", nm,
                     (long long)e);
        break;
    }
    side_free(&sc);
    side_free(&sb);
    free(gc); free(gb); free(gs); free(out0); free(ref); free(S);
    free_data(&d);
}

static const uint32_t ALL_TYPES[] = {VT_TYPE_F32, VT_TYPE_F16, VT_TYPE_BF16, VT_TYPE_Q8_0,
                                     VT_TYPE_Q4_0, VT_TYPE_Q4_1, VT_TYPE_Q5_0, VT_TYPE_Q5_1,
                                     VT_TYPE_Q2_K, VT_TYPE_Q3_K, VT_TYPE_Q4_K, VT_TYPE_Q5_K,
                                     VT_TYPE_Q6_K, VT_TYPE_IQ4_NL, VT_TYPE_IQ4_XS, VT_TYPE_MXFP4,
                                     /* the low-bit types (test_quant_blocks.h) */
                                     VT_TYPE_IQ2_XXS, VT_TYPE_IQ2_XS, VT_TYPE_IQ2_S,
                                     VT_TYPE_IQ3_XXS, VT_TYPE_IQ3_S, VT_TYPE_IQ1_S, VT_TYPE_IQ1_M,
                                     VT_TYPE_IQ1_XS, VT_TYPE_IQ1_XXS, VT_TYPE_IQ1_XXXS,
                                     VT_TYPE_TQ1_0, VT_TYPE_TQ2_0, VT_TYPE_NVFP4, VT_TYPE_Q1_0,
                                     VT_TYPE_Q2_0};
#define N_ALL (sizeof ALL_TYPES / sizeof ALL_TYPES[0])

/* every token count 1..18 and three larger ones, the Q4_K_M mix (Q4_K gate/up, Q6_K down) */
static void test_moe_ffn_sizes(void **s)
{
    (void)s;
    if (!ready()) return;
    const int64_t Ts[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 33, 64, 130};
    int n = 0;
    for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++) {
        ffn_case c = {VT_TYPE_Q4_K, VT_TYPE_Q4_K, VT_TYPE_Q6_K, 256, 256, 9, i % 4 == 3 ? 1 : 4, Ts[i],
                      i % 2 ? VT_MOE_ACT_GELU_TANH : VT_MOE_ACT_SILU, (int)(i % 5 == 2)};
        ffn_run(&c);
        n++;
    }
    fprintf(stderr, "moe_ffn: %d token counts, Q4_K/Q6_K, within the bound; split == one call\n", n);
}

/* every weight type as gate/up and as down, at decode and prefill sizes */
static void test_moe_ffn_types(void **s)
{
    (void)s;
    if (!ready()) return;
    int n = 0;
    for (size_t i = 0; i < N_ALL; i++) {
        uint32_t t = ALL_TYPES[i], td = ALL_TYPES[(i + 5) % N_ALL];
        int64_t bs = vt_type_block_size(t) > vt_type_block_size(td) ? vt_type_block_size(t) : vt_type_block_size(td);
        int64_t E = bs > 32 ? 256 : 96, F = bs > 32 ? 512 : 160;
        const int64_t Ts[] = {1, 3, 8, 9, 21};
        for (size_t k = 0; k < 5; k++) {
            ffn_case c = {t, t, td, E, F, 6, k == 4 ? 8 : 2, Ts[k], (uint32_t)(k & 1), (int)(k == 2)};
            if (c.K > c.NX) c.K = c.NX;
            ffn_run(&c);
            n++;
        }
    }
    fprintf(stderr, "moe_ffn: %d cases over %zu weight types within the bound; tensor-core "
            "prefill (TF32-rounded reference, float32 bound): %d cases so far, worst |d|/bound %.3g\n",
            n, N_ALL, g_n_tc, g_worst_tc);
}

/* prefill with several tiles (32 pairs) per expert on the tensor-core path
 * (x rows 16-byte aligned: T % 3 != 1), partial output tiles, n_in an odd
 * multiple of 32, top-1, the fused gate_up layout */
static void test_moe_ffn_tiles(void **s)
{
    (void)s;
    if (!ready()) return;
    const ffn_case cs[] = {
        {VT_TYPE_Q4_K, VT_TYPE_Q4_K, VT_TYPE_Q6_K, 256, 512, 5, 4, 131, VT_MOE_ACT_SILU, 0},
        {VT_TYPE_Q8_0, VT_TYPE_Q8_0, VT_TYPE_Q8_0, 96, 160, 3, 2, 101, VT_MOE_ACT_GELU_TANH, 0},
        {VT_TYPE_Q4_0, VT_TYPE_Q4_0, VT_TYPE_Q5_1, 128, 96, 2, 1, 65, VT_MOE_ACT_SILU, 0},
        {VT_TYPE_IQ4_XS, VT_TYPE_IQ4_XS, VT_TYPE_Q2_K, 256, 256, 4, 2, 50, VT_MOE_ACT_SILU, 0},
        {VT_TYPE_Q5_K, VT_TYPE_Q5_K, VT_TYPE_Q4_K, 256, 256, 3, 2, 98, VT_MOE_ACT_GELU_TANH, 1},
        {VT_TYPE_Q3_K, VT_TYPE_Q3_K, VT_TYPE_MXFP4, 256, 224, 9, 8, 35, VT_MOE_ACT_SILU, 0},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) ffn_run(&cs[i]);
    fprintf(stderr, "moe_ffn: %zu multi-tile prefill cases within the bound (tensor-core cases so "
            "far %d, worst |d|/bound %.3g)\n", sizeof cs / sizeof cs[0], g_n_tc, g_worst_tc);
}

/* top-k 1..8, the odd ones too, at decode token counts: the int8 decode
 * kernels give each pair a lane group of 32 / K' lanes (K' = K rounded up to
 * a power of two) and add the K sums in (expert, j) order */
static void test_moe_ffn_topk(void **s)
{
    (void)s;
    if (!ready()) return;
    const int64_t Ks[] = {1, 2, 3, 5, 7, 8}, Ts[] = {1, 2, 5, 8};
    int n = 0;
    for (size_t k = 0; k < sizeof Ks / sizeof Ks[0]; k++)
        for (size_t t = 0; t < sizeof Ts / sizeof Ts[0]; t++) {
            ffn_case a = {VT_TYPE_Q4_K, VT_TYPE_Q4_K, VT_TYPE_Q6_K, 256, 512, 11, Ks[k], Ts[t],
                          (uint32_t)((k + t) & 1), (int)(t == 2)};
            ffn_case b = {VT_TYPE_Q8_0, VT_TYPE_Q8_0, VT_TYPE_Q8_0, 96, 160, 9, Ks[k], Ts[t],
                          (uint32_t)(t & 1), 0};
            ffn_run(&a);
            ffn_run(&b);
            n += 2;
        }
    /* one token with VT_GPU_MOE_GU=rows: the row kernel, then one rounding
     * launch (the default is the chunk-per-block kernel) */
    if (!is_cpu) {
        setenv("VT_GPU_MOE_GU", "rows", 1);
        for (size_t k = 0; k < sizeof Ks / sizeof Ks[0]; k++) {
            ffn_case a = {VT_TYPE_Q4_K, VT_TYPE_Q4_K, VT_TYPE_Q6_K, 256, 512, 11, Ks[k], 1,
                          (uint32_t)(k & 1), (int)(k == 3)};
            ffn_case b = {VT_TYPE_Q8_0, VT_TYPE_Q8_0, VT_TYPE_Q8_0, 96, 160, 9, Ks[k], 1, 0, 0};
            ffn_run(&a);
            ffn_run(&b);
            n += 2;
        }
        unsetenv("VT_GPU_MOE_GU");
    }
    /* n_ff > 3.2 n_embd: one token takes the chunk-per-block gate/up kernel
     * (the row kernel's float act does not fit in front of the rounding) */
    for (size_t k = 0; k < sizeof Ks / sizeof Ks[0]; k += 2) {
        ffn_case a = {VT_TYPE_Q4_K, VT_TYPE_Q4_K, VT_TYPE_Q6_K, 256, 1024, 10, Ks[k], 1,
                      (uint32_t)(k & 1), (int)(k == 2)};
        ffn_case b = {VT_TYPE_Q8_0, VT_TYPE_Q8_0, VT_TYPE_Q8_0, 64, 256, 9, Ks[k], 1, 0, 0};
        ffn_run(&a);
        ffn_run(&b);
        n += 2;
    }
    fprintf(stderr, "moe_ffn: %d top-k / token-count cases within the bound\n", n);
}

/* wrong arguments are refused naming what is wrong, and nothing is written */
static void test_moe_ffn_refusals(void **s)
{
    (void)s;
    if (!ready()) return;
    ffn_case c = {VT_TYPE_Q8_0, VT_TYPE_Q8_0, VT_TYPE_Q8_0, 64, 96, 4, 2, 3, VT_MOE_ACT_SILU, 0};
    ffn_data d;
    make_data(&c, &d);
    dev_side sb;
    side_setup(&sb, B, bctx, &c, &d);
    const void *const *tab = (const void *const *)sb.tab;
    vt_moe_ffn_args a = {
        .struct_size = sizeof a, .act = c.act, .n_tokens = c.T, .k = c.K, .n_embd = c.E,
        .n_ff = c.F, .n_expert = c.NX, .expert_begin = 0, .expert_end = c.NX, .x = sb.x,
        .ldx = d.ldx, .ids = sb.ids, .weights = sb.w, .out = sb.out, .ldo = d.ldo,
        .type_gate = c.tg, .type_up = c.tu, .type_down = c.td, .w_gate = tab, .w_up = tab + c.NX,
        .w_down = tab + 2 * c.NX, .scratch = sb.scratch, .scratch_bytes = sb.scratch_bytes,
        .name = "blk.0.ffn_down_exps"};
    /* out holds a pattern that every refused call must leave as it is */
    float *pat = xmalloc((size_t)(c.T * d.ldo) * 4), *back = xmalloc((size_t)(c.T * d.ldo) * 4);
    for (int64_t i = 0; i < c.T * d.ldo; i++) pat[i] = (float)i * 0.25f;
    assert_int_equal(B->copy_h2d(bctx, sb.out, pat, (size_t)(c.T * d.ldo) * 4), VT_OK);
    struct { vt_moe_ffn_args a; const char *needle; } bad[6];
    for (int i = 0; i < 6; i++) bad[i].a = a;
    bad[0].a.scratch_bytes = 100, bad[0].needle = "scratch";
    bad[1].a.expert_end = c.NX + 1, bad[1].needle = "range";
    bad[2].a.ldx = c.E - 1, bad[2].needle = "ldx";
    bad[3].a.type_down = 200, bad[3].needle = "type";
    bad[4].a.act = 9, bad[4].needle = "activation";
    bad[5].a.struct_size = 8, bad[5].needle = "struct_size";
    for (int i = 0; i < 6; i++) {
        vt_status st = B->moe_ffn(bctx, &bad[i].a);
        if (st == VT_OK) fail_msg("moe_ffn accepted bad case %d (%s)", i, bad[i].needle);
        if (!strstr(vt_last_error(), bad[i].needle) || !strstr(vt_last_error(), "blk.0.ffn_down_exps"))
            if (i != 5 || !strstr(vt_last_error(), bad[i].needle))
                fail_msg("moe_ffn bad case %d: message '%s' does not name '%s' and the tensor", i,
                         vt_last_error(), bad[i].needle);
    }
    dget(back, sb.out, (size_t)(c.T * d.ldo) * 4);
    if (memcmp(back, pat, (size_t)(c.T * d.ldo) * 4)) fail_msg("a refused moe_ffn wrote into out");
    free(pat);
    free(back);
    side_free(&sb);
    free_data(&d);
}

/* ---------------------------------------------------------------- graphs */

/* A recorded step replays with the positions of d_pos at each replay:
 * rope_neox_dpos, copy_rows_dpos and attention_dpos recorded once, replayed
 * for positions 0..n-1 of a growing cache, equal (bit for bit: the same
 * kernels) to rope_neox, copy_2d and attention run with host positions; a
 * host-array op inside a recording is refused by name. backend-cpu declares
 * VT_CAP_GRAPH ABSENT with a reason. */
static void test_graph_replay(void **s)
{
    (void)s;
    if (!ready()) return;
    const vt_capability *cap = NULL;
    for (uint32_t i = 0; i < B->n_caps; i++)
        if (B->caps[i].id == VT_CAP_GRAPH) cap = &B->caps[i];
    assert_non_null(cap);
    if (is_cpu) {
        assert_int_equal(cap->state, VT_CAP_ABSENT);
        assert_non_null(cap->reason);
        assert_null(B->graph_begin);
        return;
    }
    assert_int_equal(cap->state, VT_CAP_PRESENT);
    const int64_t nh = 4, nkv = 2, hd = 64, n_rot = 32, steps = 37, ctx_rows = 48;
    const int64_t QD = nh * hd, KVD = nkv * hd;
    float *q = xmalloc((size_t)QD * 4), *k = xmalloc((size_t)KVD * 4);
    float *dq = dput(NULL, (size_t)QD * 4), *dk = dput(NULL, (size_t)KVD * 4);
    float *dq2 = dput(NULL, (size_t)QD * 4), *dk2 = dput(NULL, (size_t)KVD * 4);
    float *kc = dput(NULL, (size_t)(ctx_rows * KVD) * 4), *kc2 = dput(NULL, (size_t)(ctx_rows * KVD) * 4);
    float *o = dput(NULL, (size_t)QD * 4), *o2 = dput(NULL, (size_t)QD * 4);
    int32_t *dpos = dput(NULL, 4);
    float *ho = xmalloc((size_t)QD * 4), *ho2 = xmalloc((size_t)QD * 4);
    /* the recording: q, k come in through dq2/dk2, which are refreshed before each replay */
    if (B->graph_begin(bctx) != VT_OK) fail_msg("graph_begin: %s", vt_last_error());
    int32_t hp0 = 0;
    vt_status refused = B->rope_neox(bctx, dq2, QD, hd, 1, nh, n_rot, &hp0, 10000.0f, NULL);
    vt_graph *bad = NULL;
    if (refused == VT_OK) fail_msg("rope_neox with host positions was accepted while recording");
    if (!strstr(vt_last_error(), "rope_neox")) fail_msg("refusal does not name the op: %s", vt_last_error());
    if (B->copy_h2d(bctx, dq2, q, (size_t)QD * 4) == VT_OK)
        fail_msg("copy_h2d was accepted while recording");
    if (!strstr(vt_last_error(), "copy_h2d")) fail_msg("refusal does not name the copy: %s", vt_last_error());
    if (B->graph_end(bctx, &bad) == VT_OK && bad) B->graph_free(bctx, bad); /* the ended recording */
    if (B->graph_begin(bctx) != VT_OK) fail_msg("graph_begin: %s", vt_last_error());
    vt_status st = B->rope_neox_dpos(bctx, dq2, QD, hd, 1, nh, n_rot, dpos, 10000.0f, NULL);
    if (st == VT_OK) st = B->rope_neox_dpos(bctx, dk2, KVD, hd, 1, nkv, n_rot, dpos, 10000.0f, NULL);
    if (st == VT_OK) st = B->copy_rows_dpos(bctx, dk2, KVD, kc2, KVD, 1, KVD, dpos);
    if (st == VT_OK)
        st = B->attention_dpos(bctx, dq2, QD, hd, kc2, kc2, o2, QD, 1, nh, nkv, hd, dpos, ctx_rows,
                               0, 0.125f, 0.0f);
    vt_graph *g = NULL;
    vt_status st_end = B->graph_end(bctx, &g);
    if (st != VT_OK || st_end != VT_OK || !g) fail_msg("recording: %s", vt_last_error());
    for (int32_t p = 0; p < steps; p++) {
        for (int64_t i = 0; i < QD; i++) q[i] = urand(-1.0f, 1.0f);
        for (int64_t i = 0; i < KVD; i++) k[i] = urand(-1.0f, 1.0f);
        /* direct ops with host positions */
        assert_int_equal(B->copy_h2d(bctx, dq, q, (size_t)QD * 4), VT_OK);
        assert_int_equal(B->copy_h2d(bctx, dk, k, (size_t)KVD * 4), VT_OK);
        assert_int_equal(B->rope_neox(bctx, dq, QD, hd, 1, nh, n_rot, &p, 10000.0f, NULL), VT_OK);
        assert_int_equal(B->rope_neox(bctx, dk, KVD, hd, 1, nkv, n_rot, &p, 10000.0f, NULL), VT_OK);
        assert_int_equal(B->copy_2d(bctx, dk, KVD, kc + (int64_t)p * KVD, KVD, 1, KVD), VT_OK);
        assert_int_equal(B->attention(bctx, dq, QD, hd, kc, kc, o, QD, 1, nh, nkv, hd, p, p + 1, 0,
                                      0.125f, 0.0f), VT_OK);
        /* the replay */
        assert_int_equal(B->copy_h2d(bctx, dq2, q, (size_t)QD * 4), VT_OK);
        assert_int_equal(B->copy_h2d(bctx, dk2, k, (size_t)KVD * 4), VT_OK);
        assert_int_equal(B->copy_h2d(bctx, dpos, &p, 4), VT_OK);
        if (B->graph_launch(bctx, g) != VT_OK) fail_msg("graph_launch: %s", vt_last_error());
        dget(ho, o, (size_t)QD * 4);
        dget(ho2, o2, (size_t)QD * 4);
        if (memcmp(ho, ho2, (size_t)QD * 4))
            fail_msg("graph replay at position %d differs from the ops with host positions", p);
    }
    B->graph_free(bctx, g);
    fprintf(stderr, "graph: one recording replayed at %lld positions == the host-position ops\n",
            (long long)steps);
    void *bufs[] = {dq, dk, dq2, dk2, kc, kc2, o, o2, dpos};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) B->free(bctx, bufs[i]);
    free(q); free(k); free(ho); free(ho2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_moe_route),
        cmocka_unit_test(test_moe_ffn_topk),
        cmocka_unit_test(test_moe_ffn_tiles),
        cmocka_unit_test(test_moe_ffn_sizes),
        cmocka_unit_test(test_moe_ffn_types),
        cmocka_unit_test(test_moe_ffn_refusals),
        cmocka_unit_test(test_graph_replay),
    };
    int rc = cmocka_run_group_tests(tests, NULL, teardown);
    return vt_test_exit(rc);
}
