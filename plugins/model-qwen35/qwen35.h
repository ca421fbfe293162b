/*
 * qwen35.h - internal types of the Qwen3.5 model plugin (model-qwen35).
 *
 * The plugin serves the GGUF architectures `qwen35moe` (Gated DeltaNet + gated
 * full attention, routed-expert MoE with a shared expert) and `qwen35` (the
 * same with a dense SwiGLU FFN). The math is llama.cpp's src/models/qwen35moe.cpp
 * and src/models/delta-net-base.cpp (Gated DeltaNet), checked against the
 * Hugging Face transformers reference logits of the fixtures. § and pitfall
 * numbers in comments name sections of the project's Qwen3.5 model notes.
 *
 * Files:
 *   qwen35_plugin.c   descriptor, vt_model_api table, sequences, info
 *   qwen35_hparams.c  hyperparameters (§3): reading, range checks, validation
 *   qwen35_load.c     tensor mapping and shape checks (§4), weight placement,
 *                     scratch, required_caps
 *   qwen35_forward.c  the forward pass (§5), all compute through backend ops
 *
 * Nothing here is visible outside the plugin (hidden visibility); the only
 * exported symbol is vt_plugin_entry.
 *
 * Precision: weights are dequantised by the backend's mat_mul; activations,
 * KV cache, conv and recurrent state are float32 throughout.
 *
 * Debugging: env VT_QWEN35_DUMP=FILE appends, for every forward() call, the
 * float32 hidden states [n_layer + 2][n_tokens][n_embd] (embeddings, the
 * residual after each layer, then the final-normed rows whose logits were
 * asked for) to FILE: the layout of the fixtures' refs/hidden-*.f32.bin.
 */
#ifndef VT_QWEN35_H
#define VT_QWEN35_H

#include "vt/model_common.h"
#include "vt/types.h"

/* ---- hyperparameters (spec §3) ---- */

typedef struct qwen35_hparams {
    char arch[16];           /* "qwen35moe" or "qwen35" */
    int is_moe;              /* qwen35moe: routed experts + shared expert */
    uint32_t n_ctx_train;    /* context_length */
    uint32_t n_embd;         /* embedding_length */
    uint32_t n_layer_all;    /* block_count (main + MTP layers) */
    uint32_t n_nextn;        /* nextn_predict_layers (MTP blocks, skipped) */
    uint32_t n_layer;        /* n_layer_all - n_nextn: layers that run */
    uint32_t head_dim;       /* attention.key_length (= value_length) */
    float eps;               /* attention.layer_norm_rms_epsilon: every RMSNorm and L2 norm */
    uint32_t n_rot;          /* rope.dimension_count */
    float rope_base;         /* rope.freq_base (default 10000) */
    uint32_t interval;       /* full_attention_interval (default 4) */
    int kinds_explicit;      /* layer kinds from attention.recurrent_layers, not the interval */
    /* MoE (qwen35moe) */
    uint32_t n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    /* dense FFN (qwen35) */
    uint32_t n_ff;
    /* Gated DeltaNet (names of §3; pitfall 9) */
    uint32_t d_conv;         /* ssm.conv_kernel */
    uint32_t d_k;            /* ssm.state_size: key head dim */
    uint32_t n_k;            /* ssm.group_count: key heads */
    uint32_t n_v;            /* ssm.time_step_rank: value heads */
    uint32_t d_v;            /* ssm.inner_size / n_v */
    uint32_t key_dim;        /* n_k * d_k */
    uint32_t value_dim;      /* n_v * d_v (ssm.inner_size) */
    uint32_t conv_dim;       /* 2 * key_dim + value_dim */
    /* per main layer (n_layer entries) */
    uint8_t *is_linear;      /* 1: Gated DeltaNet layer, 0: full attention */
    uint32_t *n_head;        /* attention.head_count (scalar or per layer) */
    uint32_t *n_head_kv;     /* attention.head_count_kv */
} qwen35_hparams;

/* ---- weights ---- */

/* A stacked expert tensor (vt/model_common.h). */
typedef vt_mc_stack qwen35_stack;

typedef struct qwen35_layer {
    int linear;               /* Gated DeltaNet (1) or full attention (0) */
    uint32_t n_head, n_head_kv;
    const float *attn_norm;   /* [n_embd], +1 baked in (pitfall 1) */
    const float *post_norm;   /* post_attention_norm [n_embd]: the pre-FFN norm */

    /* full attention (§4.3) */
    vt_weight wq;             /* [n_embd -> 2*n_head*head_dim], per head [query | gate] */
    vt_weight wk, wv;         /* [n_embd -> n_head_kv*head_dim] */
    vt_weight wo;             /* [n_head*head_dim -> n_embd] */
    const float *q_norm, *k_norm; /* [head_dim] */

    /* Gated DeltaNet (§4.4) */
    vt_weight wqkv;           /* [n_embd -> conv_dim] */
    vt_weight wz;             /* attn_gate [n_embd -> value_dim] */
    vt_weight wbeta, walpha;  /* [n_embd -> n_v] */
    vt_weight wssm_out;       /* [value_dim -> n_embd] */
    const float *conv1d;      /* [conv_dim][d_conv], tap 0 oldest */
    const float *dt_bias;     /* [n_v] */
    const float *ssm_a;       /* [n_v], already -exp(A_log) */
    const float *ssm_norm;    /* [d_v], no +1 */

    /* MoE FFN (§4.5) */
    vt_weight router;         /* ffn_gate_inp [n_embd -> n_expert] */
    VT_MC_EXPERTS_HEAD;       /* gate/up/down_exps, gate_up_exps, fused_gate_up */
    vt_weight shexp_gate;     /* ffn_gate_inp_shexp as a [n_embd -> 1] matrix */
    vt_weight gate_shexp, up_shexp, down_shexp;

    /* dense FFN (qwen35) */
    vt_weight ffn_gate, ffn_up, ffn_down;

    /* Merged matrices (m->fuse, weights copied to the device; data NULL when
     * not merged): the rows of the matrices that read one input, in one
     * allocation, so that one matmul computes them all (qwen35_load.c
     * q35_merge; the parts above then point into these rows).
     *   w_in:    linear: attn_qkv | attn_gate | ssm_beta | ssm_alpha
     *            [n_embd -> conv_dim + value_dim + 2 n_v];
     *            full: attn_q | attn_k | attn_v [n_embd -> 2 QD + 2 KVD]
     *            (used for one-token graph steps);
     *   w_sh_gu: ffn_gate_shexp | ffn_up_shexp [n_embd -> 2 n_ff_shexp];
     *   w_rg:    ffn_gate_inp | ffn_gate_inp_shexp [n_embd -> n_expert + 1]
     *            (F32; used for one token: the router rows stay contiguous). */
    vt_weight w_in, w_sh_gu, w_rg;
} qwen35_layer;

/* ---- the model ---- */

struct vt_model {
    /* what every family has (vt/model_common.h): host, backend, api, ctx, family,
     * zero_copy, experts, dev_allocs, n_ctx, n_batch, the expert tables and
     * acquire buffers, fused_moe, use_graph, use_seg_graph (streamed: segments
     * cut at each layer's routing, vt_mc_graph_decode), fuse, the scratch */
    VT_MC_MODEL_HEAD;
    qwen35_hparams hp;
    qwen35_layer *layers;     /* n_layer */

    /* scratch of the family (the shared parts: vt/model_common.h), device
     * memory in the one scratch allocation, sized for n_batch tokens */
    float *s_a, *s_b, *s_c, *s_d, *s_e, *s_f, *s_g; /* mixer temporaries, see forward */
    float *s_beta, *s_gdecay; /* [T][n_v] */
    float *f_gamma;           /* [T] shared-expert gate (the raw logit when fused) */
};

struct vt_model_seq {
    VT_MC_SEQ_HEAD;           /* pos, graph, seg, seg_pred, k_cache and v_cache (NULL for
                                 linear layers): [n_ctx][n_head_kv*head_dim] */
    float **conv_state;       /* per layer (NULL for full): [d_conv-1][conv_dim] */
    float **rec_state;        /* per layer (NULL for full): [n_v][d_k][d_v] */
};

/* qwen35_hparams.c */
/* Read and validate every hyperparameter of g into hp (spec §3, "Validation
 * at load"), each error naming the key: VT_ERR_NOT_FOUND for a missing
 * required key, VT_ERR_FORMAT or VT_ERR_RANGE (with the value) for a mistyped
 * or out-of-range one, VT_ERR_UNSUPPORTED for another architecture,
 * VT_ERR_OUT_OF_MEMORY. hp is zeroed on entry (arrays it held are not freed)
 * and owns its per-layer arrays after, also on failure: free them with
 * qwen35_hparams_free. */
vt_status qwen35_read_hparams(const vt_host_api *host, const vt_gguf *g, qwen35_hparams *hp);
void qwen35_hparams_free(qwen35_hparams *hp);

/* qwen35_load.c */
/* Host memory, n * size checked for overflow; NULL on failure with the
 * message set ("qwen35: allocation of ... for what failed"). */
void *qwen35_calloc(const vt_host_api *host, size_t n, size_t size, const char *what);
/* The family (vt/model_common.h): load, free, required_caps and
 * memory_needs run the shared sequences over its callbacks (tensor mapping,
 * scratch, caches). */
extern const vt_mc_family qwen35_family;

/* qwen35_forward.c */
/* How the routed experts run (vt_model_info.moe_path; qwen35_load.c); NULL for a dense model. */
const char *qwen35_moe_path(const vt_model *m);
/* The family's forward-pass callbacks (vt_mc_family: step_layers,
 * seg_ops, next_cut, router_ahead). */
vt_status q35_step_layers(vt_model *m, vt_model_seq *s);
vt_status q35_seg_ops(vt_model *m, vt_model_seq *s, uint32_t j, uint32_t after);
uint32_t q35_next_cut(const vt_model *m, uint32_t il);
vt_status q35_router_ahead(vt_model *m, uint32_t il);
/* Several sequences in one pass (vt_model_api.forward_multi, ABI 1.8). */
vt_status qwen35_forward_multi(vt_model *m, vt_model_seq *const *seqs, const int64_t *n_tokens,
                               uint32_t n_seq, const int32_t *tokens, float *logits);
vt_status qwen35_forward(vt_model *m, vt_model_seq *s, const int32_t *tokens, int64_t n_tokens,
                         float *logits, int all_logits);

#endif
