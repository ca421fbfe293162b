/*
 * gemma4.h - internal types of the Gemma 4 model plugin (model-gemma4).
 *
 * The plugin serves the GGUF architecture `gemma4`: the MoE model (26B-A4B
 * style: every layer a shared GeGLU MLP plus routed experts) and the dense
 * models (E2B / E4B with per-layer embeddings and shared-KV layers, 31B).
 * The math is llama.cpp's src/models/gemma4.cpp (and its conversion/gemma.py
 * for what the converter already applied), checked against the Hugging Face
 * transformers reference logits of the fixtures. § and pitfall numbers in
 * comments name sections of the project's Gemma 4 model notes.
 *
 * Files:
 *   gemma4_plugin.c   descriptor, vt_model_api table, sequences, info
 *   gemma4_hparams.c  hyperparameters (§2): reading, range checks, validation
 *   gemma4_load.c     tensor mapping and shape checks
 *                     (§3), weight placement, required_caps, memory_needs
 *   gemma4_forward.c  the forward pass (§5), all compute through backend ops
 *
 * Nothing here is visible outside the plugin (hidden visibility); the only
 * exported symbol is vt_plugin_entry.
 *
 * Precision: weights are dequantised by the backend's mat_mul; activations
 * and the KV cache are float32 throughout.
 *
 * KV cache (§6): full-attention (F) layers that own K/V keep n_ctx positions;
 * sliding (S) layers keep a bounded buffer of min(n_swa + n_batch, n_ctx)
 * positions whose row 0 holds position seq->swa_base. When a step would run
 * past its end, forward() first moves the last n_swa - 1 positions to the
 * front (gemma4_forward.c, g4_swa_shift), so a sequence of any length fits.
 * Shared-KV layers (§5.6) own no cache and read their source layer's.
 *
 * Debugging: env VT_GEMMA4_DUMP=FILE appends, for every forward() call, the
 * float32 hidden states [n_layer + 2][n_tokens][n_embd] (scaled embeddings,
 * the residual after each layer, then the final-normed rows whose logits were
 * asked for): the layout of the fixtures' refs/hidden-*.f32.bin.
 */
#ifndef VT_GEMMA4_H
#define VT_GEMMA4_H

#include "vt/model_common.h"
#include "vt/types.h"

/* ---- hyperparameters (spec §2, §5 "per layer derived values") ---- */

typedef struct gemma4_hparams {
    uint32_t n_ctx_train;     /* context_length */
    uint32_t n_embd;          /* D: embedding_length */
    uint32_t n_layer;         /* L: block_count */
    uint32_t head_dim_full;   /* attention.key_length (= value_length): F layers */
    uint32_t head_dim_swa;    /* attention.key_length_swa: S layers */
    uint32_t n_rot_full;      /* rope.dimension_count */
    uint32_t n_rot_swa;       /* rope.dimension_count_swa */
    float rope_base_full;     /* rope.freq_base */
    float rope_base_swa;      /* rope.freq_base_swa */
    uint32_t n_swa;           /* attention.sliding_window */
    uint32_t n_shared_kv;     /* attention.shared_kv_layers */
    uint32_t n_kv_layers;     /* L - shared_kv_layers: layers with their own K/V */
    float eps;                /* attention.layer_norm_rms_epsilon: every RMSNorm */
    uint32_t n_per_layer;     /* P: embedding_length_per_layer_input (0: no PLE) */
    uint32_t n_expert;        /* expert_count (0: dense) */
    uint32_t n_expert_used;   /* expert_used_count (top-k) */
    uint32_t n_ff_exp;        /* expert_feed_forward_length */
    float softcap;            /* final_logit_softcapping (default 30) */
    /* per layer (n_layer entries) */
    uint8_t *is_swa;          /* sliding_window_pattern[l] */
    uint32_t *n_head;         /* attention.head_count */
    uint32_t *n_head_kv;      /* attention.head_count_kv */
    uint32_t *n_ff;           /* feed_forward_length */
    int32_t *kv_src;          /* layer whose K/V this layer reads (itself when it owns them) */
} gemma4_hparams;

/* ---- weights ---- */

/* A stacked expert tensor (vt/model_common.h). */
typedef vt_mc_stack gemma4_stack;

typedef struct gemma4_layer {
    int swa;                  /* sliding-window layer */
    int has_kv;               /* owns K/V (l < n_kv_layers) */
    int has_v;                /* attn_v present (else V = raw K, §5.3 k_eq_v) */
    int moe;                  /* ffn_gate_inp present */
    uint32_t n_head, n_head_kv, head_dim, n_rot, n_ff;
    float rope_base;
    int32_t kv_src;           /* layer whose cache attention reads */

    const float *attn_norm, *post_attn_norm;   /* [D] */
    const float *q_norm, *k_norm;              /* [head_dim]; k_norm NULL without K/V */
    vt_weight wq, wk, wv, wo;
    const float *ffn_norm, *post_ffw_norm;     /* [D] */
    vt_weight ffn_gate, ffn_up, ffn_down;      /* dense / shared MLP */

    /* MoE (§5.3 "FFN block - MoE layer") */
    vt_weight router;                          /* ffn_gate_inp [D -> E] */
    const float *router_scale;                 /* ffn_gate_inp.scale [D] */
    const float *pre_ffw_norm_2, *post_ffw_norm_1, *post_ffw_norm_2;
    VT_MC_EXPERTS_HEAD;                        /* gate/up/down_exps, gate_up_exps, fused_gate_up */
    float *exp_scale;                          /* host copy of ffn_down_exps.scale [E], or NULL */

    /* per-layer embedding injection (P > 0) */
    vt_weight inp_gate, proj;                  /* [D -> P], [P -> D] */
    const float *ple_post_norm;                /* post_norm [D] */

    int has_out_scale;
    float out_scale;                           /* layer_output_scale (host copy) */

    /* Merged matrices (m->fuse, weights copied to the device; data NULL when
     * not merged): the rows of the matrices that read one input in one
     * allocation (vt_util_merge_weights), the parts above pointing into them.
     *   w_qkv: attn_q | attn_k [| attn_v] [D -> QD + KVD (+ KVD)], used for
     *          one-token graph steps of a layer with its own K/V;
     *   w_gu:  ffn_gate | ffn_up [D -> 2 n_ff]. */
    vt_weight w_qkv, w_gu;
} gemma4_layer;

/* ---- the model ---- */

struct vt_model {
    /* what every family has (vt/model_common.h): host, backend, api, ctx, family,
     * zero_copy, experts, dev_allocs, n_ctx (the F layers' cache length), n_batch,
     * the expert tables and acquire buffers, fused_moe, use_graph, use_seg_graph
     * (streamed: segments cut at each MoE layer's routing, vt_mc_graph_decode), fuse */
    VT_MC_MODEL_HEAD;
    gemma4_hparams hp;
    float *exp_scale_dev;        /* device n_layer x [n_expert] per-expert scales (1 when none) */
    /* res_a of the head: a residual addition x += res_a that the next norm
     * of x performs (add_rms_norm; res_gate stays NULL) */
    const float *rope_freqs;     /* [n_rot_full / 2] frequency divisors of F layers, or NULL */
    vt_weight ple_token_embd;    /* per_layer_token_embd [L*P -> n_vocab] (P > 0) */
    vt_weight ple_model_proj;    /* per_layer_model_proj [D -> L*P] */
    const float *ple_proj_norm;  /* per_layer_proj_norm [P] */
    gemma4_layer *layers;        /* n_layer */
    uint32_t swa_cap;            /* rows of an S layer's cache */

    /* scratch of the family (the shared parts: vt/model_common.h), device
     * memory in the one scratch allocation, sized for n_batch tokens; d_pos
     * (graph path) holds [0] the position (RoPE, F-layer cache row), [1] the
     * S-layer cache row (position - swa_base) */
    float *q, *att;              /* [T][max H*d] */
    float *kp, *vp;              /* [T][max Hkv*d] raw K / V projections */
    float *f_m, *f_e;            /* [T][D]: MLP out, expert sum */
    float *ple, *ple_tmp;        /* [T][L*P] */
    float *ple_g;                /* [T][P] */
};

struct vt_model_seq {
    VT_MC_SEQ_HEAD;              /* pos, graph, seg, seg_pred, k_cache and v_cache (NULL for
                                    shared-KV layers) */
    int64_t swa_base;            /* position held by row 0 of every S-layer cache */
};

/* gemma4_hparams.c: read and validate every hyperparameter of g into hp,
 * each error naming the key; hp owns its per-layer arrays after, also on
 * failure: free them with gemma4_hparams_free. */
vt_status gemma4_read_hparams(const vt_host_api *host, const vt_gguf *g, gemma4_hparams *hp);
void gemma4_hparams_free(gemma4_hparams *hp);

/* gemma4_load.c */
/* Host memory (n * size overflow-checked), NULL with the message set on
 * failure. */
void *gemma4_calloc(const vt_host_api *host, size_t n, size_t size, const char *what);
/* The family (vt/model_common.h): load, free, required_caps and
 * memory_needs run the shared sequences over its callbacks (tensor mapping,
 * scratch, caches). */
extern const vt_mc_family gemma4_family;
/* Bytes of layer il's K (= V) cache row: n_head_kv * head_dim floats. */
size_t gemma4_kv_row_bytes(const vt_model *m, uint32_t il);

/* gemma4_forward.c */
/* How the routed experts run (vt_model_info.moe_path; gemma4_load.c); NULL without experts. */
const char *gemma4_moe_path(const vt_model *m);
/* The family's forward-pass callbacks (vt_mc_family: step_layers,
 * seg_ops, next_cut, router_ahead). */
vt_status g4_step_layers(vt_model *m, vt_model_seq *s);
vt_status g4_seg_ops(vt_model *m, vt_model_seq *s, uint32_t j, uint32_t after);
uint32_t g4_next_cut(const vt_model *m, uint32_t il);
vt_status g4_router_ahead(vt_model *m, uint32_t il);
vt_status gemma4_forward(vt_model *m, vt_model_seq *s, const int32_t *tokens, int64_t n_tokens,
                         float *logits, int all_logits);
/* Several sequences in one pass (vt_model_api.forward_multi, ABI 1.8). */
vt_status gemma4_forward_multi(vt_model *m, vt_model_seq *const *seqs, const int64_t *n_tokens,
                               uint32_t n_seq, const int32_t *tokens, float *logits);

#endif
