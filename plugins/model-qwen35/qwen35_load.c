/*
 * qwen35_load.c - loading a Qwen3.5 GGUF (qwen35moe / qwen35): tensor mapping
 * with shape checks, weight placement, scratch, and the list of backend
 * capabilities the file needs (the hyperparameters: qwen35_hparams.c).
 *
 * Spec: ../shared/spec/qwen35moe.md §4 (tensors), §4.7 (MTP blocks are
 * skipped, MTP sidecars refused), §8 (pitfalls 7, 8, 9, 17, 18, 21).
 *
 * One mapping routine serves two purposes: required_caps() runs it "dry"
 * (reads only the tensor table, records the weight types it would use), and
 * load() runs it for real (places every weight in backend memory). So the
 * capabilities asked for are exactly those the forward pass will call.
 *
 * Hostile files: every hyperparameter is range-checked before it gets here
 * (qwen35_hparams.c: Q35_MAX_*, block_count bounded by the tensor table);
 * products that size rows, states and scratch are formed in uint64 with
 * overflow checks before anything is allocated from them, and a tensor shape
 * mismatch names the keys the expected shape came from.
 * tests/test_qwen35_hostile.c drives every key through the engine.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qwen35.h"
#include "vt/model_common.h"
#include "vt/plugin_util.h"

#define Q35_HEAD_ROWS 16 /* LM-head rows computed per chunk (bounds the logits scratch) */

/* ================================================================ */
/* named allocations                                                  */
/* ================================================================ */


vt_status qwen35_dev_alloc(vt_model *m, size_t bytes, const char *what, void **out)
{
    return vt_mc_dev_alloc(&m->mc, bytes, what, out);
}

void *qwen35_calloc(const vt_host_api *host, size_t n, size_t size, const char *what)
{
    return vt_util_calloc_named(host, "qwen35", n, size, what);
}

/* ================================================================ */
/* tensor mapping (spec §4)                                           */
/* ================================================================ */

static size_t q35_max3(size_t a, size_t b, size_t c);

/* The merged matrices of every layer (m->fuse): qwen35.h qwen35_layer. */
static vt_status q35_merge_layers(vt_model *m)
{
    const qwen35_hparams *hp = &m->hp;
    vt_status st = VT_OK;
    for (uint32_t il = 0; il < hp->n_layer && st == VT_OK; il++) {
        qwen35_layer *ly = &m->layers[il];
        if (ly->linear) {
            vt_weight *in[] = {&ly->wqkv, &ly->wz, &ly->wbeta, &ly->walpha};
            st = vt_mc_merge(&m->mc, in, 4, &ly->w_in);
        } else {
            vt_weight *in[] = {&ly->wq, &ly->wk, &ly->wv};
            st = vt_mc_merge(&m->mc, in, 3, &ly->w_in);
        }
        if (st != VT_OK || !hp->is_moe) continue;
        /* the merged shared-expert output [T][2 n_ff_shexp] lives in f_g, which
         * holds T x top-k x n_ff floats (q35_alloc_scratch) */
        if (2 * (uint64_t)hp->n_ff_shexp <= (uint64_t)hp->n_expert_used * q35_max3(hp->n_ff_exp,
                                                                                hp->n_ff_shexp, hp->n_ff)) {
            vt_weight *sh[] = {&ly->gate_shexp, &ly->up_shexp};
            st = vt_mc_merge(&m->mc, sh, 2, &ly->w_sh_gu);
        }
        if (st != VT_OK) continue;
        vt_weight *rg[] = {&ly->router, &ly->shexp_gate};
        st = vt_mc_merge(&m->mc, rg, 2, &ly->w_rg);
    }
    return st;
}

/* A 2-D weight used through mat_mul. */
static vt_status q35_matrix(vt_mc_loader *L, const char *name, const char *from, int64_t n_in,
                            int64_t n_out, vt_weight *w, int *found)
{
    return vt_mc_weight(L, name, from, n_in, n_out, VT_MC_USE_MAT_MUL, w, found);
}

static vt_status q35_vec(vt_mc_loader *L, const char *name, const char *from, int64_t n,
                         const float **out)
{
    return vt_mc_f32(L, name, from, 1, &n, out, NULL);
}

/* Register every layer's expert stacks with the streamer, in the order the
 * forward pass reads their slots (gate, up, down; or gate_up, down). */
static const vt_mc_experts *q35_layer_experts(const vt_model *fm, uint32_t il)
{
    return &fm->layers[il].x;
}

static vt_status q35_register_experts(vt_model *m)
{
    return vt_mc_register_experts(&m->mc, m->hp.n_layer, m->hp.n_expert_used, q35_layer_experts, m);
}

/* Expected shapes in metadata terms (§3, §4), for shape-mismatch messages. */
#define Q35_CONV_DIM "2 x ssm.group_count x ssm.state_size + ssm.inner_size"
#define Q35_F_E "[embedding_length]"
#define Q35_F_QKV "[embedding_length, " Q35_CONV_DIM "]"
#define Q35_F_CONV "[ssm.conv_kernel, " Q35_CONV_DIM "]"
#define Q35_F_NV "[ssm.time_step_rank]"
#define Q35_F_Q "[embedding_length, 2 x attention.head_count x attention.key_length]"
#define Q35_F_KV "[embedding_length, attention.head_count_kv x attention.key_length]"
#define Q35_F_O "[attention.head_count x attention.key_length, embedding_length]"
#define Q35_F_HD "[attention.key_length]"
#define Q35_F_EXP "[embedding_length, expert_feed_forward_length, expert_count]"
#define Q35_F_EXP_GU "[embedding_length, 2 x expert_feed_forward_length, expert_count]"
#define Q35_F_EXP_D "[expert_feed_forward_length, embedding_length, expert_count]"
#define Q35_F_SH "[embedding_length, expert_shared_feed_forward_length]"
#define Q35_F_SH_D "[expert_shared_feed_forward_length, embedding_length]"
#define Q35_F_FF "[embedding_length, feed_forward_length]"
#define Q35_F_FF_D "[feed_forward_length, embedding_length]"

static vt_status q35_map_layer(vt_mc_loader *L, uint32_t il, qwen35_layer *ly)
{
    const qwen35_hparams *hp = &L->fm->hp;
    char nm[96];
    vt_status st;
    const int64_t E = hp->n_embd;
#define NAME(suffix) (snprintf(nm, sizeof nm, "blk.%u." suffix, il), nm)
#define TRY(x) do { st = (x); if (st != VT_OK) return st; } while (0)

    ly->linear = hp->is_linear[il];
    ly->n_head = hp->n_head[il];
    ly->n_head_kv = hp->n_head_kv[il];
    TRY(q35_vec(L, NAME("attn_norm.weight"), Q35_F_E, E, &ly->attn_norm));
    TRY(q35_vec(L, NAME("post_attention_norm.weight"), Q35_F_E, E, &ly->post_norm));

    if (ly->linear) {
        /* §4.4; V-indexed tensors are in tiled head order (pitfall 3) */
        const int64_t CD = hp->conv_dim, VD = hp->value_dim, NV = hp->n_v;
        TRY(q35_matrix(L, NAME("attn_qkv.weight"), Q35_F_QKV, E, CD, &ly->wqkv, NULL));
        TRY(q35_matrix(L, NAME("attn_gate.weight"), "[embedding_length, ssm.inner_size]", E, VD,
                       &ly->wz, NULL));
        TRY(q35_matrix(L, NAME("ssm_beta.weight"), "[embedding_length, ssm.time_step_rank]", E,
                       NV, &ly->wbeta, NULL));
        TRY(q35_matrix(L, NAME("ssm_alpha.weight"), "[embedding_length, ssm.time_step_rank]", E,
                       NV, &ly->walpha, NULL));
        TRY(q35_matrix(L, NAME("ssm_out.weight"), "[ssm.inner_size, embedding_length]", VD, E,
                       &ly->wssm_out, NULL));
        int64_t conv_ne[2] = {hp->d_conv, CD}; /* pitfall 10 */
        TRY(vt_mc_f32(L, NAME("ssm_conv1d.weight"), Q35_F_CONV, 2, conv_ne, &ly->conv1d, NULL));
        TRY(q35_vec(L, NAME("ssm_dt.bias"), Q35_F_NV, NV, &ly->dt_bias));
        TRY(q35_vec(L, NAME("ssm_a"), Q35_F_NV, NV, &ly->ssm_a));
        TRY(q35_vec(L, NAME("ssm_norm.weight"), "[ssm.inner_size / ssm.time_step_rank]", hp->d_v,
                    &ly->ssm_norm));
        TRY(vt_mc_refuse_if_present(L, NAME("ssm_in.weight"),
                                  "a Qwen3-Next (qwen3next) layout, not supported by qwen35"));
    } else {
        /* products are bounded by qwen35_read_hparams (2·n_head·head_dim <= INT32_MAX) */
        const int64_t hd = hp->head_dim, nh = ly->n_head, nkv = ly->n_head_kv;
        TRY(q35_matrix(L, NAME("attn_q.weight"), Q35_F_Q, E, 2 * nh * hd, &ly->wq,
                       NULL)); /* pitfall 5 */
        TRY(q35_matrix(L, NAME("attn_k.weight"), Q35_F_KV, E, nkv * hd, &ly->wk, NULL));
        TRY(q35_matrix(L, NAME("attn_v.weight"), Q35_F_KV, E, nkv * hd, &ly->wv, NULL));
        TRY(q35_matrix(L, NAME("attn_output.weight"), Q35_F_O, nh * hd, E, &ly->wo, NULL));
        TRY(q35_vec(L, NAME("attn_q_norm.weight"), Q35_F_HD, hd, &ly->q_norm)); /* pitfall 15 */
        TRY(q35_vec(L, NAME("attn_k_norm.weight"), Q35_F_HD, hd, &ly->k_norm));
        TRY(vt_mc_refuse_if_present(L, NAME("attn_q.bias"), "attention biases are not implemented"));
        TRY(vt_mc_refuse_if_present(L, NAME("attn_k.bias"), "attention biases are not implemented"));
        TRY(vt_mc_refuse_if_present(L, NAME("attn_v.bias"), "attention biases are not implemented"));
        TRY(vt_mc_refuse_if_present(L, NAME("attn_qkv.weight"),
                                  "a fused QKV in a full-attention layer is not a qwen35 layout"));
    }

    if (hp->is_moe) {
        const int64_t F = hp->n_ff_exp, X = hp->n_expert;
        TRY(q35_matrix(L, NAME("ffn_gate_inp.weight"), "[embedding_length, expert_count]", E, X,
                       &ly->router, NULL));
        int fused = vt_mc_find(L, NAME("ffn_gate_up_exps.weight")) != NULL;
        ly->fused_gate_up = fused;
        if (fused) { /* pitfall 6: per expert rows 0..F-1 gate, F..2F-1 up */
            TRY(vt_mc_stack_map(L, NAME("ffn_gate_up_exps.weight"), Q35_F_EXP_GU, E, 2 * F, X,
                              &ly->gate_up_exps));
        } else {
            TRY(vt_mc_stack_map(L, NAME("ffn_gate_exps.weight"), Q35_F_EXP, E, F, X, &ly->gate_exps));
            TRY(vt_mc_stack_map(L, NAME("ffn_up_exps.weight"), Q35_F_EXP, E, F, X, &ly->up_exps));
        }
        TRY(vt_mc_stack_map(L, NAME("ffn_down_exps.weight"), Q35_F_EXP_D, F, E, X, &ly->down_exps));
        /* [n_embd] or [n_embd, 1] (pitfall 17): a one-row matrix */
        TRY(q35_matrix(L, NAME("ffn_gate_inp_shexp.weight"), "[embedding_length, 1]", E, 1,
                       &ly->shexp_gate, NULL));
        const int64_t S = hp->n_ff_shexp;
        TRY(q35_matrix(L, NAME("ffn_gate_shexp.weight"), Q35_F_SH, E, S, &ly->gate_shexp, NULL));
        TRY(q35_matrix(L, NAME("ffn_up_shexp.weight"), Q35_F_SH, E, S, &ly->up_shexp, NULL));
        TRY(q35_matrix(L, NAME("ffn_down_shexp.weight"), Q35_F_SH_D, S, E, &ly->down_shexp, NULL));
    } else {
        const int64_t F = hp->n_ff;
        TRY(q35_matrix(L, NAME("ffn_gate.weight"), Q35_F_FF, E, F, &ly->ffn_gate, NULL));
        TRY(q35_matrix(L, NAME("ffn_up.weight"), Q35_F_FF, E, F, &ly->ffn_up, NULL));
        TRY(q35_matrix(L, NAME("ffn_down.weight"), Q35_F_FF_D, F, E, &ly->ffn_down, NULL));
    }
#undef NAME
#undef TRY
    return VT_OK;
}

/* Map the whole model into L->m (hparams already read). */
static vt_status q35_map_model(vt_mc_loader *L)
{
    vt_model *m = L->fm;
    qwen35_hparams *hp = &m->hp;
    vt_status st;

    /* §4.7: an MTP sidecar has no main blocks */
    if (!vt_mc_find(L, "blk.0.attn_norm.weight")) {
        L->host->set_error("qwen35: tensor 'blk.0.attn_norm.weight' is missing: this looks like an "
                           "MTP/NextN sidecar (mtp-*.gguf), not a main model");
        return VT_ERR_UNSUPPORTED;
    }
    /* pitfall 21: Qwen3-Next layout under a qwen35 name */
    st = vt_mc_refuse_if_present(L, "blk.0.ssm_ba.weight",
                               "a Qwen3-Next (qwen3next) layout, not supported by qwen35");
    if (st != VT_OK) return st;

    const vt_gguf_tensor *te = vt_mc_find(L, "token_embd.weight");
    if (!te) return vt_mc_missing(L, "token_embd.weight", NULL);
    if (te->ne[1] <= 0 || te->ne[1] > INT32_MAX) {
        L->host->set_error("qwen35: tensor 'token_embd.weight' has %" PRId64 " rows (n_vocab)",
                           te->ne[1]);
        return VT_ERR_FORMAT;
    }
    hp->n_vocab = te->ne[1]; /* pitfall 19: padded vocabulary */
    /* token_embd is read by get_rows; it is also the LM head (mat_mul) only
     * when output.weight is absent (tied embeddings) */
    const int tied = vt_mc_find(L, "output.weight") == NULL;
    st = vt_mc_weight(L, "token_embd.weight", "[embedding_length, n_vocab]", hp->n_embd, hp->n_vocab,
                    VT_MC_USE_GET_ROWS | (tied ? VT_MC_USE_MAT_MUL : 0), &m->token_embd, NULL);
    if (st != VT_OK) return st;
    if (tied) {
        m->output = m->token_embd;
    } else {
        st = q35_matrix(L, "output.weight", "[embedding_length, n_vocab (token_embd rows)]",
                        hp->n_embd, hp->n_vocab, &m->output, NULL);
        if (st != VT_OK) return st;
    }
    st = q35_vec(L, "output_norm.weight", "[embedding_length]", hp->n_embd, &m->output_norm);
    if (st != VT_OK) return st;

    for (uint32_t il = 0; il < hp->n_layer; il++) {
        st = q35_map_layer(L, il, &m->layers[il]);
        if (st == VT_ERR_NOT_FOUND) {
            /* a missing tensor is most often a wrong layer kind: say where the
             * kind came from (pitfall 7) */
            char prev[512], why[160];
            snprintf(prev, sizeof prev, "%s", L->host->last_error());
            if (hp->kinds_explicit)
                snprintf(why, sizeof why, "%s.attention.recurrent_layers[%u]", hp->arch, il);
            else
                snprintf(why, sizeof why, "%s.full_attention_interval = %u", hp->arch,
                         hp->interval);
            L->host->set_error("%s (blk.%u is a %s layer by %s)", prev, il,
                               hp->is_linear[il] ? "linear-attention" : "full-attention", why);
        }
        if (st != VT_OK) return st;
    }
    return VT_OK;
}

/* Op capabilities the forward pass calls for this configuration. */
static void q35_op_caps(const qwen35_hparams *hp, vt_mc_loader *L)
{
    int any_lin = 0, any_full = 0;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        if (hp->is_linear[il]) any_lin = 1;
        else any_full = 1;
    }
    vt_mc_add_cap(L, VT_CAP_OP_RMS_NORM);
    vt_mc_add_cap(L, VT_CAP_OP_UNARY);
    vt_mc_add_cap(L, VT_CAP_OP_BINARY);
    if (any_lin) {
        vt_mc_add_cap(L, VT_CAP_OP_L2_NORM);
        vt_mc_add_cap(L, VT_CAP_OP_SCALE);
        vt_mc_add_cap(L, VT_CAP_OP_SSM_CONV);
        vt_mc_add_cap(L, VT_CAP_OP_GATED_DELTA_NET);
    }
    if (any_full) {
        vt_mc_add_cap(L, VT_CAP_OP_ROPE_NEOX);
        vt_mc_add_cap(L, VT_CAP_OP_ATTENTION);
        vt_mc_add_cap(L, VT_CAP_OP_COPY_2D);
    }
    if (hp->is_moe) {
        vt_mc_add_cap(L, VT_CAP_OP_SOFTMAX_TOPK);
        vt_mc_add_cap(L, VT_CAP_OP_GATHER_ROWS);
        vt_mc_add_cap(L, VT_CAP_OP_SCATTER_ADD);
        vt_mc_add_cap(L, VT_CAP_OP_MUL_ROWS);
    }
}

/* ================================================================ */
/* required_caps                                                      */
/* ================================================================ */

vt_status qwen35_required_caps(const vt_host_api *host, const vt_gguf *g, uint32_t *ids,
                               uint32_t cap, uint32_t *n)
{
    if (!host || !g || !n || (cap && !ids)) {
        if (host) host->set_error("qwen35: required_caps: NULL argument");
        return VT_ERR_INVALID_ARG;
    }
    *n = 0;
    vt_model tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.host = host;
    tmp.family = "qwen35";
    vt_status st = qwen35_read_hparams(host, g, &tmp.hp);
    if (st != VT_OK) {
        qwen35_hparams_free(&tmp.hp);
        return st;
    }
    tmp.layers = qwen35_calloc(host, tmp.hp.n_layer, sizeof *tmp.layers, "the layer table");
    if (!tmp.layers) {
        qwen35_hparams_free(&tmp.hp);
        return VT_ERR_OUT_OF_MEMORY;
    }
    vt_mc_loader L = {host, g, &tmp.mc, &tmp, "qwen35", 1, ids, 0, cap};
    q35_op_caps(&tmp.hp, &L);
    st = q35_map_model(&L);
    free(tmp.layers);
    qwen35_hparams_free(&tmp.hp);
    if (st != VT_OK) return st;
    if (L.n_caps > cap) {
        host->set_error("qwen35: required_caps needs room for %u capability ids, got %u", L.n_caps,
                        cap);
        *n = L.n_caps;
        return VT_ERR_RANGE;
    }
    *n = L.n_caps;
    return VT_OK;
}

/* ================================================================ */
/* memory_needs                                                       */
/* ================================================================ */

static vt_status q35_alloc_scratch(vt_model *m, size_t *bytes_only);

vt_status qwen35_memory_needs(const vt_host_api *host, const vt_gguf *g,
                              const vt_model_params *params, vt_model_memory *out)
{
    if (!host || !g || !params || !out) {
        if (host) host->set_error("qwen35: memory_needs: NULL argument");
        return VT_ERR_INVALID_ARG;
    }
    vt_model tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.host = host;
    tmp.family = "qwen35";
    vt_status st = qwen35_read_hparams(host, g, &tmp.hp);
    if (st != VT_OK) {
        qwen35_hparams_free(&tmp.hp);
        return st;
    }
    const qwen35_hparams *hp = &tmp.hp;
    uint64_t kv = 0, state = 0;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        if (hp->is_linear[il])
            state += (uint64_t)(hp->d_conv - 1) * hp->conv_dim * sizeof(float) +
                     (uint64_t)hp->n_v * hp->d_k * hp->d_v * sizeof(float);
        else
            kv += 2ull * hp->n_head_kv[il] * hp->head_dim * sizeof(float); /* K and V */
    }
    tmp.n_batch = params->n_batch ? params->n_batch : 512;
    const vt_gguf_tensor *te = host->gguf_find_tensor(g, "token_embd.weight");
    tmp.hp.n_vocab = te && te->n_dims >= 2 && te->ne[1] > 0 ? te->ne[1] : 0; /* logits scratch */
    size_t scratch = 0;
    st = q35_alloc_scratch(&tmp, &scratch);
    qwen35_hparams_free(&tmp.hp);
    if (st != VT_OK) return st;
    out->kv_bytes_per_token = kv;
    out->state_bytes = state;
    out->scratch_bytes = scratch;
    return VT_OK;
}

/* ================================================================ */
/* load / free                                                        */
/* ================================================================ */

static size_t q35_max3(size_t a, size_t b, size_t c)
{
    size_t m = a > b ? a : b;
    return m > c ? m : c;
}

/* Carve the device scratch for n_batch tokens out of one allocation. With
 * bytes_only set, only compute its size (memory_needs) and allocate nothing. */
static vt_status q35_alloc_scratch(vt_model *m, size_t *bytes_only)
{
    const qwen35_hparams *hp = &m->hp;
    const size_t T = m->n_batch;
    size_t max_nh = 0, max_nkv = 0;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        if (hp->is_linear[il]) continue;
        if (hp->n_head[il] > max_nh) max_nh = hp->n_head[il];
        if (hp->n_head_kv[il] > max_nkv) max_nkv = hp->n_head_kv[il];
    }
    const size_t hd = hp->head_dim, E = hp->n_embd;
    const size_t n_ff = q35_max3(hp->n_ff_exp, hp->n_ff_shexp, hp->n_ff);
    /* FFN rows: T tokens for the shared/dense FFN, and one expert group's
     * (token, expert) pairs, at most T x top-k, for the routed experts */
    const size_t TF = hp->is_moe ? T * (size_t)hp->n_expert_used : T;
    m->head_rows = m->n_batch < Q35_HEAD_ROWS ? m->n_batch : Q35_HEAD_ROWS;
    float *moe_extra = NULL, *r_ids_f = NULL, *d_pos_f = NULL;

    /* part sizes as rows x columns (floats), each padded to 16 floats; the
     * hyperparameters are bounded (qwen35_read_hparams) but n_batch comes from
     * the caller, so every product and the sum are overflow-checked */
    const vt_mc_scratch_part parts[] = {
        {&m->x, T, E}, {&m->h, T, E}, {&m->a, T, E},
        /* m | qg; merged (w_in): [mix | z | beta | alpha] | [qg | k | v] */
        {&m->s_a, T, q35_max3((size_t)hp->conv_dim + hp->value_dim + 2 * (size_t)hp->n_v,
                              2 * max_nh * hd + 2 * max_nkv * hd, 1)},
        {&m->s_b, T, q35_max3(hp->conv_dim, max_nh * hd, 1)},      /* conv out | q */
        {&m->s_c, T, q35_max3(hp->value_dim, max_nh * hd, 1)},     /* z | gate */
        {&m->s_d, T, q35_max3(2 * (size_t)hp->key_dim, max_nkv * hd, 1)}, /* q̂ (| k̂, one token) | k proj */
        {&m->s_e, T, hp->key_dim},                                 /* k̂ */
        {&m->s_f, T, q35_max3(hp->value_dim, max_nh * hd, 1)},     /* delta out | attn out */
        {&m->s_g, T, hp->value_dim},                               /* gated norm out */
        {&m->s_beta, T, hp->n_v}, {&m->s_gdecay, T, hp->n_v},
        {&m->r_logits, T, (size_t)hp->n_expert + 1}, /* + the shared-expert gate (w_rg) */
        /* f_x .. moe_extra, contiguous, are also moe_ffn's scratch (fused path):
         * TF x (2 n_embd + 2 n_ff) floats and room for its int32 arrays */
        {&m->f_x, TF, E}, {&m->f_g, TF, n_ff}, {&m->f_u, TF, n_ff}, {&m->f_y, TF, E},
        {&moe_extra, TF * 4 + ((size_t)hp->n_expert + 1) * 2 + 1024, 1},
        {&m->f_gamma, T, 1},
        /* r_ids: + top-k for the next layer's predicted ids (prefetch) */
        {&r_ids_f, TF + hp->n_expert_used, 1}, {&m->r_w, TF, 1}, {&d_pos_f, T, 1},
        {&m->ah_h, 1, E}, {&m->ah_logits, 1, (size_t)hp->n_expert + 1},
        {&m->ah_w, 1, q35_max3(hp->n_expert_used, 1, 1)},
        {&m->s_k, T, q35_max3(max_nkv * hd, 1, 1)}, {&m->s_v, T, q35_max3(max_nkv * hd, 1, 1)},
        {&m->logits_buf, (size_t)m->head_rows, (size_t)hp->n_vocab},
    };
    vt_status st = vt_mc_carve_scratch(&m->mc, parts, sizeof parts / sizeof parts[0], bytes_only,
                                       &m->scratch);
    if (st != VT_OK || bytes_only) return st;
    /* f_x .. moe_extra: moe_ffn's scratch (the part after moe_extra starts where it ends) */
    m->moe_scratch_bytes = (size_t)(m->f_gamma - m->f_x) * sizeof(float);
    m->r_ids = (int32_t *)(void *)r_ids_f; /* TF int32 in a part of TF floats */
    m->d_pos = (int32_t *)(void *)d_pos_f;

    size_t k = hp->is_moe ? hp->n_expert_used : 1;
    const vt_host_api *H = m->host;
    if (!(m->pos = qwen35_calloc(H, T, sizeof *m->pos, "the host scratch: positions")) ||
        !(m->topk_ids = qwen35_calloc(H, (T + 1) * k, sizeof *m->topk_ids, /* + a prediction */
                                      "the host scratch: top-k expert ids")) ||
        !(m->topk_w = qwen35_calloc(H, T * k, sizeof *m->topk_w,
                                    "the host scratch: top-k expert weights")) ||
        !(m->exp_count = qwen35_calloc(H, (size_t)hp->n_expert + 2, sizeof *m->exp_count,
                                       "the host scratch: per-expert counts")) ||
        !(m->exp_tok = qwen35_calloc(H, T * k, sizeof *m->exp_tok,
                                     "the host scratch: routed tokens")) ||
        !(m->exp_w = qwen35_calloc(H, T * k, sizeof *m->exp_w,
                                   "the host scratch: routed weights")) ||
        !(m->grp_down = qwen35_calloc(H, k, sizeof *m->grp_down,
                                      "the host scratch: an expert group's down matrices")) ||
        !(m->grp_row0 = qwen35_calloc(H, k, sizeof *m->grp_row0,
                                      "the host scratch: an expert group's rows")) ||
        !(m->grp_rows = qwen35_calloc(H, k, sizeof *m->grp_rows,
                                      "the host scratch: an expert group's row counts")))
        return VT_ERR_OUT_OF_MEMORY;
    return VT_OK;
}

/* The fused-experts path (op.moe_route + op.moe_ffn PRESENT, VT_MOE_FFN not
 * "0"): one device table of expert pointers per layer, written now for
 * resident stacks and per acquired group when streamed. */
static vt_status q35_setup_fused(vt_model *m)
{
    const qwen35_hparams *hp = &m->hp;
    if (!hp->is_moe || vt_util_env_off(m->host, "VT_MOE_FFN") ||
        !vt_util_moe_fused_available(m->api))
        return VT_OK;
    /* the shapes every backend's moe_ffn takes (vt/backend.h): gate and up
     * of one type, rows of a multiple of 32 */
    if (hp->n_embd % 32 || hp->n_ff_exp % 32) return VT_OK;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        const qwen35_layer *ly = &m->layers[il];
        if (!ly->fused_gate_up && ly->gate_exps.type != ly->up_exps.type) return VT_OK;
    }
    const size_t per = 3 * (size_t)hp->n_expert;
    m->exp_tab = qwen35_calloc(m->host, hp->n_layer, sizeof *m->exp_tab, "the expert tables");
    m->exp_tab_host = qwen35_calloc(m->host, per, sizeof *m->exp_tab_host, "an expert table");
    if (!m->exp_tab || !m->exp_tab_host) return VT_ERR_OUT_OF_MEMORY;
    /* streamed through a device table: a page-locked image, so that a
     * one-token step's upload is queued */
    if (m->experts && !m->zero_copy)
        m->exp_tab_pinned = vt_util_exp_tab_pin(m->host, m->api, m->ctx, &m->exp_tab_host,
                                                per * sizeof(void *), "qwen35 expert table image");
    vt_status st = qwen35_dev_alloc(m, per * hp->n_layer * sizeof(void *),
                                    "qwen35 expert pointer tables", &m->exp_tab_dev);
    if (st != VT_OK) return st;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        m->exp_tab[il] = (void **)m->exp_tab_dev + per * il;
        /* streamed: zeroed until a group is acquired (a NULL entry is never read) */
        if (!m->experts && (st = qwen35_write_expert_table(m, il, NULL, 0, NULL)) != VT_OK)
            return st;
    }
    if (m->experts)
        st = m->api->memset_zero(m->ctx, m->exp_tab_dev, per * hp->n_layer * sizeof(void *));
    m->fused_moe = st == VT_OK;
    return st;
}

/* Decode graphs: the backend has them (vt_util_graph_available), and the
 * experts are fused; resident: the whole step, streamed: segments between
 * the layers' acquires (q35_step_segments). */
static void q35_setup_graph(vt_model *m)
{
    vt_mc_setup_graph(&m->mc, m->hp.is_moe);
}

vt_status qwen35_write_expert_table(vt_model *m, uint32_t il, const int32_t *ids, uint32_t n,
                                    const void *const *slots)
{
    return vt_mc_write_expert_table(&m->mc, il, &m->layers[il].x, m->hp.n_expert, ids, n, slots);
}

void qwen35_free(vt_model *m)
{
    if (!m) return;
    if (m->api) {
        if (m->exp_tab_dev) m->api->free(m->ctx, m->exp_tab_dev);
        vt_mc_free_weights(&m->mc);
        if (m->scratch) m->api->free(m->ctx, m->scratch);
    }
    free(m->dev_allocs);
    free(m->layers);
    free(m->pos);
    free(m->topk_ids);
    free(m->topk_w);
    free(m->exp_count);
    free(m->exp_tok);
    free(m->exp_w);
    free(m->grp_down);
    free(m->grp_row0);
    free(m->grp_rows);
    free(m->exp_slots);
    free(m->exp_ids);
    free(m->exp_tab);
    vt_util_exp_tab_image_free(m->host, m->api, m->ctx, m->exp_tab_host,
                               3 * (size_t)m->hp.n_expert * sizeof(void *), m->exp_tab_pinned);
    qwen35_hparams_free(&m->hp);
    free(m);
}

vt_status qwen35_load(const vt_host_api *host, const vt_gguf *g, const vt_backend *backend,
                      const vt_model_params *params, vt_model **out)
{
    if (!host || !g || !backend || !backend->api || !out) {
        if (host) host->set_error("qwen35: load: NULL argument");
        return VT_ERR_INVALID_ARG;
    }
    *out = NULL;
    vt_model *m = qwen35_calloc(host, 1, sizeof *m, "the model object");
    if (!m) return VT_ERR_OUT_OF_MEMORY;
    m->host = host;
    m->family = "qwen35";
    m->backend = backend;
    m->api = backend->api;
    m->ctx = backend->ctx;
    vt_status st = qwen35_read_hparams(host, g, &m->hp);
    if (st != VT_OK) goto fail;
    const qwen35_hparams *hp = &m->hp;

    /* every op the forward pass calls must be there (the core checks the
     * declared capabilities first; this guards the function pointers) */
    {
        uint32_t ids[32];
        vt_mc_loader C = {host, g, &m->mc, m, "qwen35", 1, ids, 0, 32};
        q35_op_caps(hp, &C);
        for (uint32_t i = 0; i < C.n_caps && i < 32; i++) {
            const char *nm;
            if (!vt_mc_op_present(m->api, ids[i], &nm)) {
                host->set_error("qwen35: backend '%s' has no '%s' op, which this model needs",
                                backend->name ? backend->name : "?", nm);
                st = VT_ERR_CAPABILITY;
                goto fail;
            }
        }
    }

    m->zero_copy = vt_mc_host_addressable(m->api);
    m->layers = qwen35_calloc(host, hp->n_layer, sizeof *m->layers, "the layer table");
    if (!m->layers) {
        st = VT_ERR_OUT_OF_MEMORY;
        goto fail;
    }

    /* the caller's sizes, checked before any weight is placed */
    uint32_t n_ctx = params ? params->n_ctx : 0;
    if (n_ctx == 0) n_ctx = hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    if (n_ctx == 0) n_ctx = 4096;
    m->n_ctx = n_ctx;
    m->n_batch = params && params->n_batch ? params->n_batch : 512;
    /* positions are int32 (rope, attention); routed (token, expert) pairs
     * are counted in int32 */
    if (m->n_ctx > (uint32_t)INT32_MAX ||
        (uint64_t)m->n_batch * (hp->is_moe ? hp->n_expert_used : 1) > (uint64_t)INT32_MAX) {
        host->set_error("qwen35: n_ctx = %u / n_batch = %u is too large (n_ctx and n_batch x "
                        "expert_used_count must be <= %d)", m->n_ctx, m->n_batch, INT32_MAX);
        st = VT_ERR_RANGE;
        goto fail;
    }
    if (params && params->struct_size >= offsetof(vt_model_params, experts) + sizeof params->experts &&
        params->experts && hp->is_moe)
        m->experts = params->experts;
    vt_mc_loader L = {host, g, &m->mc, m, "qwen35", 0, NULL, 0, 0};
    st = q35_map_model(&L);
    if (st != VT_OK) goto fail;
    if (m->experts && (st = q35_register_experts(m)) != VT_OK) goto fail;

    st = q35_alloc_scratch(m, NULL);
    if (st != VT_OK) goto fail;
    st = q35_setup_fused(m);
    if (st != VT_OK) goto fail;
    q35_setup_graph(m);
    m->fuse = vt_util_fusions_available(host, m->api);
    if (m->fuse && (st = q35_merge_layers(m)) != VT_OK) goto fail;
    if (m->fuse) {
        uint32_t n_merged = 0;
        for (uint32_t il = 0; il < hp->n_layer; il++)
            n_merged += !!m->layers[il].w_in.data + !!m->layers[il].w_sh_gu.data +
                        !!m->layers[il].w_rg.data;
        host->log(VT_LOG_INFO, "qwen35: element-wise fusions of ABI 1.3 on (mul_act, add_rms_norm, "
                  "delta_net_gates), %u merged projections", n_merged);
    }

    const char *dump = getenv("VT_QWEN35_DUMP");
    m->dump_path = dump && *dump ? dump : NULL;

    uint32_t n_lin = 0;
    for (uint32_t il = 0; il < hp->n_layer; il++) n_lin += hp->is_linear[il];
    host->log(VT_LOG_INFO,
              "qwen35: %s, %u layers (%u linear, %u full attention%s), n_embd %u, n_vocab %" PRId64
              ", %u experts top-%u (%s), n_ctx %u, n_batch %u, weights %s",
              hp->arch, hp->n_layer, n_lin, hp->n_layer - n_lin,
              hp->n_nextn ? ", MTP block skipped" : "", hp->n_embd, hp->n_vocab, hp->n_expert,
              hp->n_expert_used, qwen35_moe_path(m), m->n_ctx, m->n_batch,
              m->zero_copy ? "zero-copy from the mmap" : "copied to the device");
    *out = m;
    return VT_OK;
fail:
    qwen35_free(m);
    return st;
}

/* ================================================================ */
/* expert views                                                       */
/* ================================================================ */

vt_status qwen35_expert_weight(const vt_model *m, uint32_t il, qwen35_expert_matrix which,
                               uint32_t e, const void *const *slots, vt_weight *out)
{
    return vt_mc_expert_weight(&m->mc, &m->layers[il].x, (int)which, e, slots, out);
}
