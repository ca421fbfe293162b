/*
 * test_cuda_ops.h - what the two files of the test_cuda_ops program share:
 * the rig of test_cuda_ops.c (both backends up, buffers, the comparison),
 * the mixer ops of test_cuda_ops_mixer.c and the model-level cases of
 * test_cuda_ops_models.c.
 */
#ifndef VT_TEST_CUDA_OPS_H
#define VT_TEST_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "vt/backend.h"

#define U32 5.9604644775390625e-8 /* 2^-24, the float32 unit roundoff */

/* backend-cuda and backend-cpu (scalar kernels); contexts: cuda with
 * cuBLAS, cuda with the tiled GEMM, cpu */
extern const vt_backend_api *G, *C;
extern vt_backend_ctx *gctx, *tctx, *cctx;

/* 1 when backend-cuda and backend-cpu are up; otherwise the case skips (0). */
int ready(void);
/* n floats (at least one), malloc-ed; fails the case when out of memory */
float *fbuf(size_t n);
/* p[0..n) uniform in [lo, hi), or all v */
void fill_u(float *p, size_t n, float lo, float hi);
void fill_c(float *p, size_t n, float v);
/* [rows][ld] uniform in [lo, hi), padding columns NaN (fbuf) */
float *strided(int64_t rows, int64_t cols, int64_t ld, float lo, float hi);
/* device buffer of bytes holding h (NULL: uninitialised), copy back, free */
void *dput(const void *h, size_t bytes);
void dget(void *h, const void *d, size_t bytes);
void dfree(void *d);
/* Compare n floats: |got - ref| <= (tol ? tol[i] : 0) + abs + rel·|ref|, NaN
 * only where ref is NaN. Prints one line of numbers; fails naming the first
 * bad element. Returns max |Δ|. */
double compare(const char *what, const float *got, const float *ref, int64_t n,
               const double *tol, double abs_tol, double rel_tol);

#define OKC(call)                                                                              \
    do {                                                                                       \
        vt_status st_ = (call);                                                                \
        if (st_ != VT_OK) fail_msg("%s: %s", #call, vt_last_error());                          \
    } while (0)

/* test_cuda_ops_mixer.c */
void test_attention(void **s);
void test_ssm_conv(void **s);
void test_gated_delta_net(void **s);

/* test_cuda_ops_models.c */
void test_model_fixtures(void **s);
void test_model_fused_vs_composed(void **s);

#endif
