/*
 * test_cuda_quant.h - what the two files of the test_cuda_quant program
 * share: the helpers of test_cuda_quant.c (setup, main) that
 * test_cuda_quant_int8.c uses, and the cases it defines.
 */
#ifndef VT_TEST_CUDA_QUANT_H
#define VT_TEST_CUDA_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "vt/backend.h"

#define U32 5.9604644775390625e-8 /* 2^-24 */
#define MM(t) vt_backend_mat_mul_fn(G, (t))
#define GR(t) vt_backend_get_rows_fn(G, (t))
#define N_QTYPES n_qtypes
#define OKC(call)                                                                              \
    do {                                                                                       \
        vt_status st_ = (call);                                                                \
        if (st_ != VT_OK) fail_msg("%s: %s", #call, vt_last_error());                          \
    } while (0)
typedef struct qtype {
    uint32_t id;
    const char *name;
    int qk, bytes;
    int f16_at[2];
    int e8m0;
} qtype;
extern const vt_backend_api *G;
/* contexts: float kernels (cuBLAS), tiled GEMM, int8 activations */
extern vt_backend_ctx *gctx, *tctx, *qctx;
extern const qtype QTYPES[];
extern const int n_qtypes; /* entries of QTYPES */
extern double g_worst;
extern double g_worst_tc;
int ready(void);
float urand(float lo, float hi);
float *fbuf(size_t n);
void *dput(const void *h, size_t bytes);
void dget(void *h, const void *d, size_t bytes);
void dfree(void *d);
uint8_t *make_weight(const qtype *q, int64_t n_in, int64_t n_out, int hostile, size_t *rb);
float *ref_rows(uint32_t type, const uint8_t *w, size_t rb, int64_t n_in, int64_t n_out);
void round_int8(const float *x, int64_t n, double *xh);
void mm_case(const qtype *q, int64_t n_in, int64_t n_out, int64_t T);

/* test_cuda_quant_int8.c */
void test_mat_mul_int8(void **s);
void test_int8_rounding_reuse(void **s);
void test_refusals(void **s);

#endif
