/*
 * qwen35.h - internal types of the Qwen3.5 model plugin (model-qwen35).
 *
 * The plugin serves the GGUF architectures `qwen35moe` (Gated DeltaNet + gated
 * full attention, routed-expert MoE with a shared expert) and `qwen35` (the
 * same with a dense SwiGLU FFN). Specification: ../shared/spec/qwen35moe.md.
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

#include <stddef.h>
#include <stdint.h>

#include "vt/backend.h"
#include "vt/gguf.h"
#include "vt/model.h"
#include "vt/model_common.h"
#include "vt/plugin.h"
#include "vt/status.h"
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
    int64_t n_vocab;         /* token_embd ne[1] */
    /* per main layer (n_layer entries) */
    uint8_t *is_linear;      /* 1: Gated DeltaNet layer, 0: full attention */
    uint32_t *n_head;        /* attention.head_count (scalar or per layer) */
    uint32_t *n_head_kv;     /* attention.head_count_kv */
} qwen35_hparams;

/* ---- weights ---- */

/* A stacked expert tensor (vt/model_common.h). */
typedef vt_mc_stack qwen35_stack;

/* Matrices of one routed expert, as qwen35_expert_weight() hands them out. */
typedef enum qwen35_expert_matrix {
    QWEN35_EXP_GATE = 0,
    QWEN35_EXP_UP = 1,
    QWEN35_EXP_DOWN = 2
} qwen35_expert_matrix;

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
     * cut at each layer's routing, q35_step_segments), fuse */
    VT_MC_MODEL_HEAD;
    qwen35_hparams hp;
    /* a residual addition x += sigmoid(res_gate)·res_a (res_gate NULL: x += res_a)
     * that the next norm performs (add_rms_norm); res_a NULL: none pending */
    const float *res_a, *res_gate;

    vt_weight token_embd;     /* [n_embd -> n_vocab] rows */
    vt_weight output;         /* LM head (token_embd when tied) */
    const float *output_norm;
    qwen35_layer *layers;     /* n_layer */

    int64_t head_rows;        /* rows of LM-head output per chunk */

    /* scratch, device memory, sized for n_batch tokens */
    void *scratch;
    float *x, *h, *a;         /* [T][n_embd]: residual, normed input, mixer/FFN out */
    float *s_a, *s_b, *s_c, *s_d, *s_e, *s_f, *s_g; /* mixer temporaries, see forward */
    float *s_beta, *s_gdecay; /* [T][n_v] */
    float *r_logits;          /* [T][n_expert] */
    /* f_x, f_g, f_u, f_y (FFN: gathered input, gate, up, down out): vt/model_common.h */
    float *f_gamma;           /* [T] shared-expert gate (the raw logit when fused) */
    int32_t *d_pos;           /* [T] positions in device memory (graph path) */
    float *s_k, *s_v;         /* [T][max n_head_kv*head_dim] normed, roped K and V (graph path) */
    /* prefetch (streamed, one token): layer l+1's router on layer l's hidden
     * state; its ids go to r_ids + top-k (one copy brings both) */
    float *ah_h;              /* [n_embd] post_norm of layer l+1 applied to x */
    float *ah_logits;         /* [n_expert + 1] */
    float *ah_w;              /* [top-k] (unused weights of the prediction) */
    float *logits_buf;        /* [head_rows][n_vocab] */

    /* host scratch */
    int32_t *pos;             /* [n_batch] */
    /* topk_ids .. grp_rows: vt/model_common.h */

    const char *dump_path;    /* VT_QWEN35_DUMP: append hidden states here */
};

struct vt_model_seq {
    int64_t pos;              /* tokens already evaluated */
    vt_graph *graph;          /* the recorded one-token step of this sequence (NULL: none yet) */
    vt_graph **seg;           /* streamed: its n_layer + 1 segments (NULL: none yet) */
    uint8_t *seg_pred;        /* per segment: 1 when it computes the next layer's prediction
                                 (recorded with the segment, so replays copy only real ids) */
    float **k_cache, **v_cache; /* per layer (NULL for linear layers): [n_ctx][n_head_kv*head_dim] */
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
/* Allocation failures name what and how many bytes ("qwen35: allocation of
 * 1.19 GiB (1277952000 bytes) for blk.16.ffn_up_exps failed: ...").
 * qwen35_dev_alloc: backend memory through m->api->alloc; a backend message
 * that already names `what` and its bytes (vt/backend.h asks for that) is kept,
 * any other is appended to ours. qwen35_calloc: host memory, n * size checked
 * for overflow; NULL on failure with the message set. */
vt_status qwen35_dev_alloc(vt_model *m, size_t bytes, const char *what, void **out);
void *qwen35_calloc(const vt_host_api *host, size_t n, size_t size, const char *what);
vt_status qwen35_required_caps(const vt_host_api *host, const vt_gguf *g, uint32_t *ids,
                               uint32_t cap, uint32_t *n);
/* Cache and scratch bytes for the fit check (vt_model_api.memory_needs). */
vt_status qwen35_memory_needs(const vt_host_api *host, const vt_gguf *g,
                              const vt_model_params *params, vt_model_memory *out);
vt_status qwen35_load(const vt_host_api *host, const vt_gguf *g, const vt_backend *backend,
                      const vt_model_params *params, vt_model **out);
void qwen35_free(vt_model *m);
/* View of expert e's matrix of layer il. The one place that knows where
 * expert bytes live: with slots NULL (experts resident) a slice of the stacked
 * tensor; else slots holds the streamer's slots of expert e, one per stack of
 * the layer in registration order (gate, up, down; or gate_up, down). */
vt_status qwen35_expert_weight(const vt_model *m, uint32_t il, qwen35_expert_matrix which,
                               uint32_t e, const void *const *slots, vt_weight *out);
/* Fused path: write the device pointer table of layer il from the stacks
 * (slots NULL: every expert, resident) or, streamed, the entries of the n
 * experts ids[] whose slots an acquire returned (slots[i * matrices + m]). */
vt_status qwen35_write_expert_table(vt_model *m, uint32_t il, const int32_t *ids, uint32_t n,
                                    const void *const *slots);

/* qwen35_forward.c */
/* How the routed experts run (vt_model_info.moe_path); NULL for a dense model. */
const char *qwen35_moe_path(const vt_model *m);
/* How one-token steps run (vt_model_info.decode_path). */
const char *qwen35_decode_path(const vt_model *m);
/* frees the sequence's streamed-decode graph segments (qwen35_forward.c) */
void qwen35_free_segments(vt_model *m, vt_model_seq *s);
/* Several sequences in one pass (vt_model_api.forward_multi, ABI 1.8). */
vt_status qwen35_forward_multi(vt_model *m, vt_model_seq *const *seqs, const int64_t *n_tokens,
                               uint32_t n_seq, const int32_t *tokens, float *logits);
vt_status qwen35_forward(vt_model *m, vt_model_seq *s, const int32_t *tokens, int64_t n_tokens,
                         float *logits, int all_logits);

#endif
