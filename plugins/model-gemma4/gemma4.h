/*
 * gemma4.h - internal types of the Gemma 4 model plugin (model-gemma4).
 *
 * The plugin serves the GGUF architecture `gemma4`: the MoE model (26B-A4B
 * style: every layer a shared GeGLU MLP plus routed experts) and the dense
 * models (E2B / E4B with per-layer embeddings and shared-KV layers, 31B).
 * Specification: ../shared/spec/gemma4.md.
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

#include <stddef.h>
#include <stdint.h>

#include "vt/backend.h"
#include "vt/gguf.h"
#include "vt/model.h"
#include "vt/model_common.h"
#include "vt/plugin.h"
#include "vt/status.h"
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
    int64_t n_vocab;          /* token_embd ne[1] */
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

typedef enum gemma4_expert_matrix {
    GEMMA4_EXP_GATE = 0,
    GEMMA4_EXP_UP = 1,
    GEMMA4_EXP_DOWN = 2
} gemma4_expert_matrix;

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
     * (streamed: segments cut at each MoE layer's routing, g4_step_segments), fuse */
    VT_MC_MODEL_HEAD;
    gemma4_hparams hp;
    float *exp_scale_dev;        /* device n_layer x [n_expert] per-expert scales (1 when none) */
    /* a residual addition x += res_a that the next norm of x performs
     * (add_rms_norm); NULL: none pending */
    const float *res_a;

    vt_weight token_embd;        /* [D -> n_vocab] rows */
    vt_weight output;            /* LM head (token_embd when tied) */
    const float *output_norm;
    const float *rope_freqs;     /* [n_rot_full / 2] frequency divisors of F layers, or NULL */
    vt_weight ple_token_embd;    /* per_layer_token_embd [L*P -> n_vocab] (P > 0) */
    vt_weight ple_model_proj;    /* per_layer_model_proj [D -> L*P] */
    const float *ple_proj_norm;  /* per_layer_proj_norm [P] */
    gemma4_layer *layers;        /* n_layer */


    uint32_t swa_cap;            /* rows of an S layer's cache */
    int64_t head_rows;           /* rows of LM-head output per chunk */

    /* scratch, device memory, sized for n_batch tokens */
    void *scratch;
    float *x, *h, *a;            /* [T][D]: residual, normed input, sublayer output */
    float *q, *att;              /* [T][max H*d] */
    float *kp, *vp;              /* [T][max Hkv*d] raw K / V projections */
    float *f_m, *f_e;            /* [T][D]: MLP out, expert sum */
    /* f_x, f_y ([T][D]: gathered input, expert out), f_g, f_u ([T][max n_ff]): vt/model_common.h */
    float *r_logits;             /* [T][n_expert] */
    int32_t *d_pos;              /* graph path, device: [0] the position (RoPE, F-layer cache
                                    row), [1] the S-layer cache row (position - swa_base) */
    float *s_k, *s_v;            /* [T][max n_head_kv*head_dim] normed K and V (graph path) */
    /* prefetch (streamed, one token): layer l+1's router on layer l's hidden
     * state; its ids go to r_ids + top-k (one copy brings both) */
    float *ah_h;                 /* [n_embd] layer l+1's router input from x */
    float *ah_logits;            /* [n_expert] */
    float *ah_w;                 /* [top-k] (unused weights of the prediction) */
    float *ple, *ple_tmp;        /* [T][L*P] */
    float *ple_g;                /* [T][P] */
    float *logits_buf;           /* [head_rows][n_vocab] */

    /* host scratch */
    int32_t *pos;                /* [n_batch] */
    /* topk_ids .. grp_rows: vt/model_common.h */

    const char *dump_path;       /* VT_GEMMA4_DUMP */
};

struct vt_model_seq {
    int64_t pos;                 /* tokens already evaluated */
    int64_t swa_base;            /* position held by row 0 of every S-layer cache */
    vt_graph *graph;             /* the recorded one-token step of this sequence (NULL: none yet) */
    vt_graph **seg;              /* streamed: its segments, at most n_layer + 1 (NULL: none yet) */
    uint8_t *seg_pred;           /* per segment: 1 when it computes the next layer's
                                    prediction (recorded with it: replays copy only real ids) */
    float **k_cache, **v_cache;  /* per layer (NULL for shared-KV layers) */
};

/* gemma4_hparams.c: read and validate every hyperparameter of g into hp,
 * each error naming the key; hp owns its per-layer arrays after, also on
 * failure: free them with gemma4_hparams_free. */
vt_status gemma4_read_hparams(const vt_host_api *host, const vt_gguf *g, gemma4_hparams *hp);
void gemma4_hparams_free(gemma4_hparams *hp);

/* gemma4_load.c */
/* Allocation failures name what and how many bytes. gemma4_dev_alloc: backend
 * memory; gemma4_calloc: host memory (n * size overflow-checked), NULL with
 * the message set on failure. */
vt_status gemma4_dev_alloc(vt_model *m, size_t bytes, const char *what, void **out);
void *gemma4_calloc(const vt_host_api *host, size_t n, size_t size, const char *what);
vt_status gemma4_required_caps(const vt_host_api *host, const vt_gguf *g, uint32_t *ids,
                               uint32_t cap, uint32_t *n);
vt_status gemma4_memory_needs(const vt_host_api *host, const vt_gguf *g,
                              const vt_model_params *params, vt_model_memory *out);
vt_status gemma4_load(const vt_host_api *host, const vt_gguf *g, const vt_backend *backend,
                      const vt_model_params *params, vt_model **out);
void gemma4_free(vt_model *m);
/* View of expert e's gate, up or down matrix of layer il: with slots NULL
 * (resident) a slice of the stacked tensor; else slots holds the streamer's
 * slots of expert e in registration order (gate_up, down; or gate, up, down). */
vt_status gemma4_expert_weight(const vt_model *m, uint32_t il, gemma4_expert_matrix which,
                               uint32_t e, const void *const *slots, vt_weight *out);
/* Fused path: write layer il's device pointer table from the stacks (slots
 * NULL: every expert) or, streamed, the entries of the n experts ids[] whose
 * slots an acquire returned. */
vt_status gemma4_write_expert_table(vt_model *m, uint32_t il, const int32_t *ids, uint32_t n,
                                    const void *const *slots);
/* Bytes of layer il's K (= V) cache row: n_head_kv * head_dim floats. */
size_t gemma4_kv_row_bytes(const vt_model *m, uint32_t il);

/* gemma4_forward.c */
/* How the routed experts run (vt_model_info.moe_path); NULL without experts. */
const char *gemma4_moe_path(const vt_model *m);
/* How one-token steps run (vt_model_info.decode_path). */
const char *gemma4_decode_path(const vt_model *m);
/* frees the sequence's streamed-decode graph segments (gemma4_forward.c) */
void gemma4_free_segments(vt_model *m, vt_model_seq *s);
vt_status gemma4_forward(vt_model *m, vt_model_seq *s, const int32_t *tokens, int64_t n_tokens,
                         float *logits, int all_logits);
/* Several sequences in one pass (vt_model_api.forward_multi, ABI 1.8). */
vt_status gemma4_forward_multi(vt_model *m, vt_model_seq *const *seqs, const int64_t *n_tokens,
                               uint32_t n_seq, const int32_t *tokens, float *logits);

#endif
