/*
 * qwen35_load.c - loading a Qwen3.5 GGUF (qwen35moe / qwen35): tensor mapping
 * with shape checks, weight placement, scratch, and the list of backend
 * capabilities the file needs (the hyperparameters: qwen35_hparams.c).
 *
 * Tensors: names and shapes as llama.cpp's src/models/qwen35moe.cpp and
 * src/llama-arch.cpp load them (MTP blocks skipped, MTP sidecars refused).
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



/* ================================================================ */
/* tensor mapping (spec §4)                                           */
/* ================================================================ */

static size_t q35_max3(size_t a, size_t b, size_t c)
{
    size_t m = a > b ? a : b;
    return m > c ? m : c;
}

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
         * holds T x top-k x n_ff floats (q35_scratch) */
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

/* Layer il's routed experts (registered with the streamer in the order the
 * forward pass reads their slots: gate, up, down; or gate_up, down). */
static const vt_mc_experts *q35_layer_experts(const vt_model *fm, uint32_t il)
{
    return fm->hp.is_moe ? &fm->layers[il].x : NULL;
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
    TRY(vt_mc_vec(L, NAME("attn_norm.weight"), Q35_F_E, E, &ly->attn_norm, NULL));
    TRY(vt_mc_vec(L, NAME("post_attention_norm.weight"), Q35_F_E, E, &ly->post_norm, NULL));

    if (ly->linear) {
        /* §4.4; V-indexed tensors are in tiled head order (pitfall 3) */
        const int64_t CD = hp->conv_dim, VD = hp->value_dim, NV = hp->n_v;
        TRY(vt_mc_matrix(L, NAME("attn_qkv.weight"), Q35_F_QKV, E, CD, &ly->wqkv, NULL));
        TRY(vt_mc_matrix(L, NAME("attn_gate.weight"), "[embedding_length, ssm.inner_size]", E, VD,
                       &ly->wz, NULL));
        TRY(vt_mc_matrix(L, NAME("ssm_beta.weight"), "[embedding_length, ssm.time_step_rank]", E,
                       NV, &ly->wbeta, NULL));
        TRY(vt_mc_matrix(L, NAME("ssm_alpha.weight"), "[embedding_length, ssm.time_step_rank]", E,
                       NV, &ly->walpha, NULL));
        TRY(vt_mc_matrix(L, NAME("ssm_out.weight"), "[ssm.inner_size, embedding_length]", VD, E,
                       &ly->wssm_out, NULL));
        int64_t conv_ne[2] = {hp->d_conv, CD}; /* pitfall 10 */
        TRY(vt_mc_f32(L, NAME("ssm_conv1d.weight"), Q35_F_CONV, 2, conv_ne, &ly->conv1d, NULL));
        TRY(vt_mc_vec(L, NAME("ssm_dt.bias"), Q35_F_NV, NV, &ly->dt_bias, NULL));
        TRY(vt_mc_vec(L, NAME("ssm_a"), Q35_F_NV, NV, &ly->ssm_a, NULL));
        TRY(vt_mc_vec(L, NAME("ssm_norm.weight"), "[ssm.inner_size / ssm.time_step_rank]", hp->d_v,
                      &ly->ssm_norm, NULL));
        TRY(vt_mc_refuse_if_present(L, NAME("ssm_in.weight"),
                                  "a Qwen3-Next (qwen3next) layout, not supported by qwen35"));
    } else {
        /* products are bounded by qwen35_read_hparams (2·n_head·head_dim <= INT32_MAX) */
        const int64_t hd = hp->head_dim, nh = ly->n_head, nkv = ly->n_head_kv;
        TRY(vt_mc_matrix(L, NAME("attn_q.weight"), Q35_F_Q, E, 2 * nh * hd, &ly->wq,
                       NULL)); /* pitfall 5 */
        TRY(vt_mc_matrix(L, NAME("attn_k.weight"), Q35_F_KV, E, nkv * hd, &ly->wk, NULL));
        TRY(vt_mc_matrix(L, NAME("attn_v.weight"), Q35_F_KV, E, nkv * hd, &ly->wv, NULL));
        TRY(vt_mc_matrix(L, NAME("attn_output.weight"), Q35_F_O, nh * hd, E, &ly->wo, NULL));
        TRY(vt_mc_vec(L, NAME("attn_q_norm.weight"), Q35_F_HD, hd, &ly->q_norm, NULL)); /* pitfall 15 */
        TRY(vt_mc_vec(L, NAME("attn_k_norm.weight"), Q35_F_HD, hd, &ly->k_norm, NULL));
        TRY(vt_mc_refuse_if_present(L, NAME("attn_q.bias"), "attention biases are not implemented"));
        TRY(vt_mc_refuse_if_present(L, NAME("attn_k.bias"), "attention biases are not implemented"));
        TRY(vt_mc_refuse_if_present(L, NAME("attn_v.bias"), "attention biases are not implemented"));
        TRY(vt_mc_refuse_if_present(L, NAME("attn_qkv.weight"),
                                  "a fused QKV in a full-attention layer is not a qwen35 layout"));
    }

    if (hp->is_moe) {
        const int64_t F = hp->n_ff_exp, X = hp->n_expert;
        TRY(vt_mc_matrix(L, NAME("ffn_gate_inp.weight"), "[embedding_length, expert_count]", E, X,
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
        TRY(vt_mc_matrix(L, NAME("ffn_gate_inp_shexp.weight"), "[embedding_length, 1]", E, 1,
                       &ly->shexp_gate, NULL));
        const int64_t S = hp->n_ff_shexp;
        TRY(vt_mc_matrix(L, NAME("ffn_gate_shexp.weight"), Q35_F_SH, E, S, &ly->gate_shexp, NULL));
        TRY(vt_mc_matrix(L, NAME("ffn_up_shexp.weight"), Q35_F_SH, E, S, &ly->up_shexp, NULL));
        TRY(vt_mc_matrix(L, NAME("ffn_down_shexp.weight"), Q35_F_SH_D, S, E, &ly->down_shexp, NULL));
    } else {
        const int64_t F = hp->n_ff;
        TRY(vt_mc_matrix(L, NAME("ffn_gate.weight"), Q35_F_FF, E, F, &ly->ffn_gate, NULL));
        TRY(vt_mc_matrix(L, NAME("ffn_up.weight"), Q35_F_FF, E, F, &ly->ffn_up, NULL));
        TRY(vt_mc_matrix(L, NAME("ffn_down.weight"), Q35_F_FF_D, F, E, &ly->ffn_down, NULL));
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

    st = vt_mc_map_embeddings(L); /* pitfall 19: a padded vocabulary */
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
static void q35_op_caps(const vt_model *m, vt_mc_loader *L)
{
    const qwen35_hparams *hp = &m->hp;
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

const char *qwen35_moe_path(const vt_model *m) { return vt_mc_moe_path(&m->mc, m->hp.is_moe); }

/* ================================================================ */
/* the family (vt/model_common.h vt_mc_family)                        */
/* ================================================================ */

static vt_status q35_read_hparams(const vt_host_api *host, const vt_gguf *g, vt_model *m)
{
    vt_status st = qwen35_read_hparams(host, g, &m->hp);
    const qwen35_hparams *hp = &m->hp;
    m->d = (vt_mc_dims){.n_layer = hp->n_layer, .n_embd = hp->n_embd,
                        .n_expert = hp->is_moe ? hp->n_expert : 0,
                        .n_expert_used = hp->is_moe ? hp->n_expert_used : 0,
                        .n_ff_exp = hp->n_ff_exp, .n_ctx_train = hp->n_ctx_train,
                        .eps = hp->eps};
    return st;
}

static vt_status q35_alloc_layers(vt_model *m)
{
    m->layers = qwen35_calloc(m->host, m->hp.n_layer, sizeof *m->layers, "the layer table");
    return m->layers ? VT_OK : VT_ERR_OUT_OF_MEMORY;
}

static void q35_free_own(vt_model *m)
{
    free(m->layers);
    m->layers = NULL;
    qwen35_hparams_free(&m->hp);
}

static void q35_cache_bytes(const vt_model *m, uint32_t n_ctx, uint32_t n_batch, uint64_t *kv,
                            uint64_t *state)
{
    (void)n_ctx;
    (void)n_batch;
    const qwen35_hparams *hp = &m->hp;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        if (hp->is_linear[il])
            *state += (uint64_t)(hp->d_conv - 1) * hp->conv_dim * sizeof(float) +
                      (uint64_t)hp->n_v * hp->d_k * hp->d_v * sizeof(float);
        else
            *kv += 2ull * hp->n_head_kv[il] * hp->head_dim * sizeof(float); /* K and V */
    }
}

/* The mixer temporaries and the shared-expert gate, beside the shared
 * scratch (vt_mc_alloc_scratch). */
static vt_status q35_scratch(vt_model *m, size_t *bytes_only)
{
    const qwen35_hparams *hp = &m->hp;
    const size_t T = m->n_batch;
    size_t max_nh = 0, max_nkv = 0;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        if (hp->is_linear[il]) continue;
        if (hp->n_head[il] > max_nh) max_nh = hp->n_head[il];
        if (hp->n_head_kv[il] > max_nkv) max_nkv = hp->n_head_kv[il];
    }
    const size_t hd = hp->head_dim;
    const vt_mc_scratch_part parts[] = {
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
        {&m->f_gamma, T, 1},
    };
    const vt_mc_scratch_spec sp = {q35_max3(hp->n_ff_exp, hp->n_ff_shexp, hp->n_ff), max_nkv * hd,
                                   parts, sizeof parts / sizeof parts[0]};
    vt_status st = vt_mc_alloc_scratch(&m->mc, &sp, bytes_only);
    m->moe_out = m->x; /* the routed experts add into the residual */
    return st;
}

static vt_status q35_finish(vt_model *m, const vt_model_params *params)
{
    (void)params;
    const qwen35_hparams *hp = &m->hp;
    if (m->fuse) {
        uint32_t n_merged = 0;
        for (uint32_t il = 0; il < hp->n_layer; il++)
            n_merged += !!m->layers[il].w_in.data + !!m->layers[il].w_sh_gu.data +
                        !!m->layers[il].w_rg.data;
        m->host->log(VT_LOG_INFO, "qwen35: element-wise fusions of ABI 1.3 on (mul_act, "
                     "add_rms_norm, delta_net_gates), %u merged projections", n_merged);
    }
    uint32_t n_lin = 0;
    for (uint32_t il = 0; il < hp->n_layer; il++) n_lin += hp->is_linear[il];
    m->host->log(VT_LOG_INFO,
                 "qwen35: %s, %u layers (%u linear, %u full attention%s), n_embd %u, n_vocab %" PRId64
                 ", %u experts top-%u (%s), n_ctx %u, n_batch %u, weights %s",
                 hp->arch, hp->n_layer, n_lin, hp->n_layer - n_lin,
                 hp->n_nextn ? ", MTP block skipped" : "", hp->n_embd, m->d.n_vocab, hp->n_expert,
                 hp->n_expert_used, qwen35_moe_path(m), m->n_ctx, m->n_batch,
                 m->zero_copy ? "zero-copy from the mmap" : "copied to the device");
    return VT_OK;
}

const vt_mc_family qwen35_family = {.name = "qwen35", .model_size = sizeof(vt_model),
                                     .dump_env = "VT_QWEN35_DUMP", .n_ctx_max = INT32_MAX,
                                     .moe_act = VT_MOE_ACT_SILU, VT_MC_FAMILY_FNS(q35)};
