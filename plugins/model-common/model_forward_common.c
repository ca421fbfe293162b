/*
 * model_forward_common.c - the parts of a forward pass every family shares
 * (vt/model_common.h): the typed matmul, the argument checks of forward() and
 * forward_multi(), the LM head.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "vt/model_common.h"
#include "vt/plugin_util.h"
#include "vt/types.h"

#define TRY(x) do { vt_status st_ = (x); if (st_ != VT_OK) return st_; } while (0)

vt_status vt_mc_mm(vt_mc_model *m, const vt_weight *w, const float *x, int64_t ldx, float *y,
                   int64_t ldy, int64_t T)
{
    vt_mat_mul_fn mm = vt_backend_mat_mul_fn(m->api, w->type);
    if (!mm) {
        m->host->set_error("%s: backend has no mat_mul for type %s (tensor '%s')", m->family,
                           vt_type_name(w->type), w->name ? w->name : "?");
        return VT_ERR_CAPABILITY;
    }
    return mm(m->ctx, w, x, ldx, y, ldy, T);
}

vt_status vt_mc_forward_check(vt_mc_model *m, const vt_model_seq *s, const int32_t *tokens,
                              int64_t T, int64_t n_vocab, const char *arch, uint32_t n_ctx_train,
                              int32_t *pos)
{
    if (!s || (!tokens && T > 0)) {
        m->host->set_error("%s: forward: NULL sequence or tokens", m->family);
        return VT_ERR_INVALID_ARG;
    }
    if (T <= 0 || T > (int64_t)m->n_batch) {
        m->host->set_error("%s: forward: %" PRId64 " tokens; must be 1..n_batch (%u)", m->family,
                           T, m->n_batch);
        return VT_ERR_RANGE;
    }
    const int64_t p0 = vt_mc_seq_pos(s);
    if (p0 + T > (int64_t)m->n_ctx) {
        m->host->set_error("%s: forward: %" PRId64 " tokens at position %" PRId64
                           " exceed n_ctx (%u: the KV cache length; the model's %s.context_length"
                           " is %u)", m->family, T, p0, m->n_ctx, arch, n_ctx_train);
        return VT_ERR_RANGE;
    }
    for (int64_t t = 0; t < T; t++) {
        if (tokens[t] < 0 || tokens[t] >= n_vocab) {
            m->host->set_error("%s: forward: token %d at index %" PRId64
                               " is outside the vocabulary (n_vocab %" PRId64 ")", m->family,
                               tokens[t], t, n_vocab);
            return VT_ERR_RANGE;
        }
        if (pos) pos[t] = (int32_t)(p0 + t);
    }
    return VT_OK;
}

vt_status vt_mc_multi_check(vt_mc_model *m, vt_model_seq *const *seqs, const int64_t *n_tok,
                            uint32_t n_seq, const int32_t *tokens, int64_t n_vocab, int32_t *pos,
                            int64_t *T_out)
{
    if (!seqs || !n_tok || !tokens || n_seq == 0) {
        m->host->set_error("%s: forward_multi: NULL sequences, counts or tokens, or none",
                           m->family);
        return VT_ERR_INVALID_ARG;
    }
    int64_t T = 0;
    for (uint32_t i = 0; i < n_seq; i++) {
        if (!seqs[i] || n_tok[i] <= 0) {
            m->host->set_error("%s: forward_multi: sequence %u is NULL or has no tokens",
                               m->family, i);
            return VT_ERR_INVALID_ARG;
        }
        for (uint32_t k = 0; k < i; k++)
            if (seqs[k] == seqs[i]) {
                m->host->set_error("%s: forward_multi: sequences %u and %u are the same",
                                   m->family, k, i);
                return VT_ERR_INVALID_ARG;
            }
        const int64_t p0 = vt_mc_seq_pos(seqs[i]);
        if (p0 + n_tok[i] > (int64_t)m->n_ctx) {
            m->host->set_error("%s: forward_multi: sequence %u: %" PRId64 " tokens at position "
                               "%" PRId64 " exceed n_ctx (%u)", m->family, i, n_tok[i], p0,
                               m->n_ctx);
            return VT_ERR_RANGE;
        }
        T += n_tok[i];
    }
    if (T > (int64_t)m->n_batch) {
        m->host->set_error("%s: forward_multi: %" PRId64 " tokens in all; must be at most "
                           "n_batch (%u)", m->family, T, m->n_batch);
        return VT_ERR_RANGE;
    }
    for (int64_t t = 0, i = 0, r = 0; t < T; t++, r++) {
        while (r == n_tok[i]) r = 0, i++;
        if (tokens[t] < 0 || tokens[t] >= n_vocab) {
            m->host->set_error("%s: forward_multi: token %d at index %" PRId64
                               " is outside the vocabulary (n_vocab %" PRId64 ")", m->family,
                               tokens[t], t, n_vocab);
            return VT_ERR_RANGE;
        }
        pos[t] = (int32_t)(vt_mc_seq_pos(seqs[i]) + r);
    }
    *T_out = T;
    return VT_OK;
}

vt_status vt_mc_lm_head(vt_mc_model *m, const vt_weight *output, const float *h, int64_t n_embd,
                        int64_t n_vocab, int64_t rows, int64_t head_rows, float *logits_buf,
                        float softcap, float *logits)
{
    const vt_backend_api *A = m->api;
    vt_backend_ctx *c = m->ctx;
    const int64_t E = n_embd, V = n_vocab;
    for (int64_t r = 0; r < rows; r += head_rows) {
        int64_t n = rows - r < head_rows ? rows - r : head_rows;
        TRY(vt_mc_mm(m, output, h + r * E, E, logits_buf, V, n));
        if (softcap > 0) {
            TRY(A->scale(c, logits_buf, logits_buf, n * V, 1.0f / softcap));
            TRY(A->unary(c, VT_UNARY_TANH, logits_buf, logits_buf, n * V));
            TRY(A->scale(c, logits_buf, logits_buf, n * V, softcap));
        }
        TRY(A->copy_d2h(c, logits + r * V, logits_buf, (size_t)(n * V) * sizeof(float)));
    }
    return VT_OK;
}

const char *vt_mc_moe_path(const vt_mc_model *m, int has_moe)
{
    if (!has_moe) return NULL;
    if (!m->fused_moe) return "per-expert ops (backend without op.moe_route/op.moe_ffn, or VT_MOE_FFN=0)";
    return m->experts ? "moe_ffn (fused; routing on the device, ids copied to the host per layer "
                        "for the streamer)"
                      : "moe_ffn (fused; routing on the device)";
}

vt_status vt_mc_moe_ops(vt_mc_model *m, const vt_mc_experts *x, uint32_t il, int64_t T,
                        int64_t n_embd, int64_t n_ff, int64_t n_expert, int64_t k,
                        vt_unary_op act, const float *h, float *out)
{
    const vt_backend_api *A = m->api;
    vt_backend_ctx *c = m->ctx;
    const int64_t E = n_embd, F = n_ff, nx = n_expert, K = k;
    /* bucket the (token, weight) pairs by expert (counting sort, token order kept) */
    int32_t *cnt = m->exp_count;
    int64_t bad = vt_util_bucket_by_expert(m->topk_ids, m->topk_w, T * K, K, nx, cnt, m->exp_tok,
                                           m->exp_w);
    if (bad >= 0) {
        m->host->set_error("%s: blk.%u router picked expert %d of %" PRId64, m->family, il,
                           m->topk_ids[bad], nx);
        return VT_ERR_INTERNAL;
    }
    /* cnt[e] is now the end of expert e's run; its start is cnt[e-1] (0 for e = 0).
     * A group's (token, expert) rows are contiguous in the bucketed order, so
     * each group takes one gather, one activation, one product and one scatter
     * over all its rows, and only the matmuls per expert. */
    const uint32_t M = x->fused_gate_up ? 2 : 3;
    int64_t e_next = 0, e_first, e_last;
    uint32_t n_grp;
    while ((n_grp = vt_util_next_expert_group(cnt, nx, K, &e_next, m->exp_ids, &e_first, &e_last))) {
        if (m->experts)
            TRY(m->host->experts_acquire(m->experts, il, m->exp_ids, n_grp, m->exp_slots));
        const int32_t gb = e_first ? cnt[e_first - 1] : 0, ge = cnt[e_last];
        const int64_t n_rows = ge - gb;
        if (T > 1) TRY(A->gather_rows(c, h, E, m->exp_tok + gb, n_rows, E, m->f_x, E));
        uint32_t g = 0;
        for (int64_t e = e_first; e <= e_last; e++) {
            int32_t b = e ? cnt[e - 1] : 0, n = cnt[e] - b;
            if (n == 0) continue;
            const void *const *slots = m->experts ? m->exp_slots + (size_t)g * M : NULL;
            vt_weight wg, wu;
            TRY(vt_mc_expert_weight(m, x, VT_MC_EXP_GATE, (uint32_t)e, slots, &wg));
            TRY(vt_mc_expert_weight(m, x, VT_MC_EXP_UP, (uint32_t)e, slots, &wu));
            TRY(vt_mc_expert_weight(m, x, VT_MC_EXP_DOWN, (uint32_t)e, slots, &m->grp_down[g]));
            const float *xin = T > 1 ? m->f_x + (int64_t)(b - gb) * E : h;
            TRY(vt_mc_mm(m, &wg, xin, E, m->f_g + (int64_t)(b - gb) * F, F, n));
            TRY(vt_mc_mm(m, &wu, xin, E, m->f_u + (int64_t)(b - gb) * F, F, n));
            m->grp_row0[g] = b;
            m->grp_rows[g] = n;
            g++;
        }
        TRY(A->unary(c, act, m->f_g, m->f_g, n_rows * F));
        TRY(A->binary(c, VT_BINARY_MUL, m->f_g, m->f_u, m->f_g, n_rows * F, n_rows * F));
        for (uint32_t q = 0; q < g; q++)
            TRY(vt_mc_mm(m, &m->grp_down[q], m->f_g + (int64_t)(m->grp_row0[q] - gb) * F, F,
                         m->f_y + (int64_t)(m->grp_row0[q] - gb) * E, E, m->grp_rows[q]));
        TRY(A->scatter_add(c, m->f_y, E, m->exp_tok + gb, m->exp_w + gb, n_rows, E, out, E));
    }
    return VT_OK;
}

vt_moe_ffn_args vt_mc_moe_args(vt_mc_model *m, uint32_t il, int64_t T)
{
    const vt_mc_experts *x = m->fam->layer_experts((const vt_model *)(const void *)m, il);
    const int64_t nx = m->d.n_expert, n_embd = m->d.n_embd, n_ff = m->d.n_ff_exp,
                  k = m->d.n_expert_used;
    const vt_moe_act act = m->fam->moe_act;
    const float *h = m->h;
    float *out = m->moe_out;
    const vt_mc_stack *gs = x->fused_gate_up ? &x->gate_up_exps : &x->gate_exps;
    const vt_mc_stack *us = x->fused_gate_up ? &x->gate_up_exps : &x->up_exps;
    void **tab = m->exp_tab[il];
    vt_moe_ffn_args a = {
        .struct_size = sizeof a, .act = act, .n_tokens = T, .k = k, .n_embd = n_embd,
        .n_ff = n_ff, .n_expert = nx, .expert_begin = 0, .expert_end = nx, .x = h, .ldx = n_embd,
        .ids = m->r_ids, .weights = m->r_w, .out = out, .ldo = n_embd, .type_gate = gs->type,
        .type_up = us->type, .type_down = x->down_exps.type, .w_gate = (const void *const *)tab,
        .w_up = (const void *const *)tab + nx, .w_down = (const void *const *)tab + 2 * nx,
        .scratch = m->f_x, .scratch_bytes = m->moe_scratch_bytes, .name = x->down_exps.name};
    return a;
}

vt_status vt_mc_moe_ffn_run(vt_mc_model *m, uint32_t il, vt_moe_ffn_args *a, int64_t T,
                            uint32_t n_ahead, vt_util_table_fn write_table, void *user)
{
    m->n_ahead = 0;
    if (!m->experts) return m->api->moe_ffn(m->ctx, a);
    /* a one-token step routes at most top-k experts: one group, whose table
     * upload is queued (vt_util_exp_tab_upload) */
    m->exp_tab_queued = T == 1;
    vt_status st = vt_util_moe_ffn_streamed_ahead(m->host, m->api, m->ctx, m->experts, il, a,
                                                  m->topk_ids, m->exp_count, m->exp_ids,
                                                  m->exp_slots, write_table, user, m->family,
                                                  il + 1, n_ahead);
    m->exp_tab_queued = 0;
    TRY(st);
    m->n_ahead = n_ahead; /* prefetched once the family has queued what it wants first */
    return VT_OK;
}

/* ---------------------------------------------------------------- */
/* the ends of the forward pass                                       */
/* ---------------------------------------------------------------- */

vt_status vt_mc_norm_x(vt_mc_model *m, int64_t r0, int64_t n, const float *w, float *y)
{
    return vt_util_norm_pending(m->api, m->ctx, m->x, &m->res_a, m->res_gate, r0, n, m->d.n_embd,
                                w, y, m->d.eps);
}

vt_status vt_mc_logits(vt_mc_model *m, int64_t T, int all_logits, float *logits)
{
    if (!logits) {
        m->res_a = NULL; /* the last FFN's addition is not needed */
        return VT_OK;
    }
    /* the final norm and the LM head only for the rows whose logits are
     * wanted, in chunks of head_rows to bound the scratch */
    const int64_t r0 = all_logits ? 0 : T - 1, nr = all_logits ? T : 1, E = m->d.n_embd;
    TRY(vt_mc_norm_x(m, r0, nr, m->output_norm, m->h));
    TRY(vt_mc_dump(m, m->h, nr, E));
    return vt_mc_lm_head(m, &m->output, m->h, E, m->d.n_vocab, nr, m->head_rows, m->logits_buf,
                         m->d.softcap, logits);
}

vt_status vt_mc_multi_logits(vt_mc_model *m, const int64_t *n_tok, uint32_t n_seq, int64_t T,
                             float *logits)
{
    const int64_t E = m->d.n_embd;
    /* the last FFN's addition, then each sequence's last row: final norm into
     * h's rows 0..n_seq, LM head in chunks of head_rows */
    TRY(vt_mc_norm_x(m, 0, T, NULL, NULL));
    if (!logits) return VT_OK;
    int64_t r = 0;
    for (uint32_t i = 0; i < n_seq; i++) {
        r += n_tok[i];
        TRY(m->api->rms_norm(m->ctx, m->x + (r - 1) * E, E, m->output_norm, m->h + (int64_t)i * E,
                             E, 1, E, m->d.eps));
    }
    return vt_mc_lm_head(m, &m->output, m->h, E, m->d.n_vocab, n_seq, m->head_rows,
                         m->logits_buf, m->d.softcap, logits);
}

vt_status vt_mc_head_row(vt_mc_model *m, int64_t r)
{
    const vt_backend_api *A = m->api;
    const int64_t E = m->d.n_embd, V = m->d.n_vocab;
    const float c = m->d.softcap;
    TRY(vt_mc_norm_x(m, r, 1, m->output_norm, m->h));
    TRY(vt_mc_mm(m, &m->output, m->h, E, m->logits_buf, V, 1));
    if (c <= 0) return VT_OK;
    TRY(A->scale(m->ctx, m->logits_buf, m->logits_buf, V, 1.0f / c));
    TRY(A->unary(m->ctx, VT_UNARY_TANH, m->logits_buf, m->logits_buf, V));
    return A->scale(m->ctx, m->logits_buf, m->logits_buf, V, c);
}

vt_status vt_mc_mixer_rows(vt_mc_model *m, vt_model_seq *const *seqs, const int64_t *n_tok,
                           uint32_t n_seq, int64_t T, uint32_t il, int graph,
                           vt_status (*mixer)(vt_model *fm, vt_model_seq *s, uint32_t il,
                                              int64_t T, int graph))
{
    vt_model *fm = (vt_model *)(void *)m;
    if (n_seq == 1) return mixer(fm, seqs[0], il, T, graph);
    const int64_t E = m->d.n_embd;
    float *h = m->h, *a = m->a;
    int32_t *pos = m->pos;
    vt_status st = VT_OK;
    int64_t r0 = 0;
    for (uint32_t i = 0; i < n_seq && st == VT_OK; r0 += n_tok[i], i++) {
        m->h = h + r0 * E;
        m->a = a + r0 * E;
        m->pos = pos + r0;
        st = mixer(fm, seqs[i], il, n_tok[i], 0);
    }
    m->h = h;
    m->a = a;
    m->pos = pos;
    return st;
}

vt_status vt_mc_predict_next(vt_mc_model *m, uint32_t il, int64_t T, uint32_t *n_ahead)
{
    const vt_model *fm = (const vt_model *)(const void *)m;
    const int64_t nx = m->d.n_expert, K = m->d.n_expert_used;
    *n_ahead = 0;
    if (T != 1 || il + 1 >= m->d.n_layer || !m->fam->layer_experts(fm, il + 1) ||
        !vt_util_prefetch_on(m->host, m->experts))
        return VT_OK;
    TRY(m->fam->router_ahead((vt_model *)(void *)m, il + 1));
    TRY(m->api->moe_route(m->ctx, m->ah_logits, 1, nx, K, 1, NULL, m->r_ids + K, m->ah_w));
    *n_ahead = (uint32_t)K;
    return VT_OK;
}

vt_status vt_mc_table_cb(void *user, uint32_t layer, const int32_t *ids, uint32_t n,
                         const void *const *slots)
{
    vt_mc_model *m = user;
    const vt_mc_experts *x = m->fam->layer_experts((const vt_model *)user, layer);
    if (!x) {
        m->host->set_error("%s: blk.%u has no routed experts to acquire", m->family, layer);
        return VT_ERR_INTERNAL;
    }
    return vt_mc_write_expert_table(m, layer, x, m->d.n_expert, ids, n, slots);
}

vt_status vt_mc_dump(vt_mc_model *m, const float *dev, int64_t rows, int64_t n)
{
    if (!m->dump_path) return VT_OK;
    size_t bytes = (size_t)rows * (size_t)n * sizeof(float);
    float *buf = malloc(bytes ? bytes : 1);
    if (!buf) {
        char human[32];
        m->host->log(VT_LOG_WARN, "%s dump: allocation of %s (%zu bytes) for the dump buffer "
                     "failed: out of memory; rows skipped", m->family,
                     vt_format_bytes(bytes, 0, human, sizeof human), bytes);
        return VT_OK;
    }
    vt_status st = m->api->copy_d2h(m->ctx, buf, dev, bytes);
    if (st == VT_OK) {
        FILE *f = fopen(m->dump_path, "ab");
        if (f) {
            fwrite(buf, 1, bytes, f);
            fclose(f);
        }
        size_t cnt = (size_t)rows * (size_t)n;
        double ss = 0;
        for (size_t i = 0; i < cnt; i++) ss += (double)buf[i] * buf[i];
        m->host->log(VT_LOG_DEBUG, "%s dump: %" PRId64 " x %" PRId64 " rms %.6g", m->family, rows,
                     n, cnt ? sqrt(ss / (double)cnt) : 0.0);
    }
    free(buf);
    return st;
}
