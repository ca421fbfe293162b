/*
 * cpu_moe.c - backend-cpu's MoE ops of ABI 1.2 (vt/backend.h): moe_route
 * (softmax_topk with the per-expert scale) and moe_ffn (the routed-expert
 * FFN of a whole batch).
 *
 * moe_ffn is the composition the model plugins ran before the op existed,
 * on this backend's own matmul, unary and binary ops: the pairs in the
 * expert range are bucketed by expert (a counting sort that keeps token
 * order), each expert's rows are gathered and multiplied by its gate and up
 * matrices, the activation and product run over the expert's rows, each
 * expert's rows go through its down matrix, and the weighted rows are added
 * into out in bucket order - per token one expert at a time in increasing id,
 * which is the order the contract fixes. With the scalar kernels it is the
 * reference every other backend's moe_ffn is tested against.
 */
#include <stdint.h>
#include <string.h>

#include "cpu_internal.h"
#include "vt/plugin_util.h"

#define CHECK(cond, ...)                                                                       \
    do {                                                                                       \
        if (!(cond)) return vt_cpu_fail(ctx, VT_ERR_INVALID_ARG, __VA_ARGS__);                 \
    } while (0)
#define TRY(x)                                                                                 \
    do {                                                                                       \
        vt_status st_ = (x);                                                                   \
        if (st_ != VT_OK) return st_;                                                          \
    } while (0)

vt_status vt_cpu_moe_route(vt_backend_ctx *ctx, const float *logits, int64_t n_rows, int64_t n,
                           int64_t k, int renorm, const float *expert_scale, int32_t *ids,
                           float *weights)
{
    TRY(vt_cpu_softmax_topk(ctx, logits, n_rows, n, k, renorm, ids, weights, NULL));
    if (expert_scale)
        for (int64_t i = 0; i < n_rows * k; i++) weights[i] *= expert_scale[ids[i]];
    return VT_OK;
}

/* An expert matrix as a vt_weight ([n_out][n_in] of type). */
static vt_weight expert_matrix(uint32_t type, int64_t n_in, int64_t n_out, const void *data,
                               const char *name)
{
    vt_weight w = {type, n_in, n_out, vt_type_row_bytes(type, (uint64_t)n_in), data, name};
    return w;
}

/* Bytes rounded up to 64 (scratch carving). */
static size_t up64(size_t b) { return (b + 63) & ~(size_t)63; }

vt_status vt_cpu_moe_ffn(vt_backend_ctx *ctx, const vt_moe_ffn_args *a)
{
    char why[512];
    int work = vt_util_moe_ffn_check(a, why, sizeof why);
    if (work < 0) return vt_cpu_fail(ctx, VT_ERR_INVALID_ARG, "%s", why);
    if (!work) return VT_OK;
    const char *nm = a->name ? a->name : "(unnamed experts)";
    const int64_t T = a->n_tokens, K = a->k, E = a->n_embd, F = a->n_ff, NX = a->n_expert;

    /* scratch: cnt [NX + 1], tok [P], wt [P], then xg [P][E], g, u [P][F], y [P][E] */
    const int64_t P = T * K;
    uint8_t *sp = (uint8_t *)a->scratch;
    int32_t *cnt = (int32_t *)sp;
    sp += up64((size_t)(NX + 1) * sizeof(int32_t));
    int32_t *tok = (int32_t *)sp;
    sp += up64((size_t)P * sizeof(int32_t));
    float *wt = (float *)sp;
    sp += up64((size_t)P * sizeof(float));
    float *xg = (float *)sp;
    sp += up64((size_t)P * (size_t)E * sizeof(float));
    float *g = (float *)sp;
    sp += up64((size_t)P * (size_t)F * sizeof(float));
    float *u = (float *)sp;
    sp += up64((size_t)P * (size_t)F * sizeof(float));
    float *y = (float *)sp;

    /* bucket the pairs of the range by expert, token order kept */
    memset(cnt, 0, (size_t)(NX + 1) * sizeof *cnt);
    for (int64_t i = 0; i < P; i++) {
        int32_t e = a->ids[i];
        if (e >= a->expert_begin && e < a->expert_end) cnt[e + 1]++;
    }
    for (int64_t e = 0; e < NX; e++) cnt[e + 1] += cnt[e];
    const int64_t n_rows = cnt[NX];
    if (n_rows == 0) return VT_OK;
    for (int64_t i = 0; i < P; i++) {
        int32_t e = a->ids[i];
        if (e < a->expert_begin || e >= a->expert_end) continue;
        int32_t at = cnt[e]++;
        tok[at] = (int32_t)(i / K);
        wt[at] = a->weights[i];
    }
    /* cnt[e] is now the end of expert e's run, cnt[e - 1] its start */
    TRY(vt_cpu_gather_rows(ctx, a->x, a->ldx, tok, n_rows, E, xg, E));
    for (int64_t e = a->expert_begin; e < a->expert_end; e++) {
        int32_t b = e ? cnt[e - 1] : 0, n = cnt[e] - b;
        if (n == 0) continue;
        CHECK(a->w_gate[e] && a->w_up[e] && a->w_down[e],
              "moe_ffn %s: expert %lld is routed to but its weight pointer is NULL", nm,
              (long long)e);
        vt_weight wg = expert_matrix(a->type_gate, E, F, a->w_gate[e], nm);
        vt_weight wu = expert_matrix(a->type_up, E, F, a->w_up[e], nm);
        float *ge = g + (int64_t)b * F, *ue = u + (int64_t)b * F;
        TRY(vt_cpu_mat_mul(ctx, a->type_gate, &wg, xg + (int64_t)b * E, E, ge, F, n));
        TRY(vt_cpu_mat_mul(ctx, a->type_up, &wu, xg + (int64_t)b * E, E, ue, F, n));
        /* per expert, not over all rows at once: how the elementwise ops split
         * their work (SIMD bodies and tails) then depends on this expert's
         * rows only, so a split expert range gives the same bits */
        TRY(vt_cpu_unary(ctx, a->act == VT_MOE_ACT_SILU ? VT_UNARY_SILU : VT_UNARY_GELU_TANH, ge,
                         ge, (int64_t)n * F));
        TRY(vt_cpu_binary(ctx, VT_BINARY_MUL, ge, ue, ge, (int64_t)n * F, (int64_t)n * F));
    }
    for (int64_t e = a->expert_begin; e < a->expert_end; e++) {
        int32_t b = e ? cnt[e - 1] : 0, n = cnt[e] - b;
        if (n == 0) continue;
        vt_weight wd = expert_matrix(a->type_down, F, E, a->w_down[e], nm);
        TRY(vt_cpu_mat_mul(ctx, a->type_down, &wd, g + (int64_t)b * F, F, y + (int64_t)b * E, E, n));
    }
    return vt_cpu_scatter_add(ctx, y, E, tok, wt, n_rows, E, a->out, a->ldo);
}
