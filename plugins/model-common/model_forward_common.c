/*
 * model_forward_common.c - the parts of a forward pass every family shares
 * (vt/model_common.h): the typed matmul, the argument checks of forward() and
 * forward_multi(), the LM head.
 */
#include <inttypes.h>

#include "vt/model_common.h"
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
