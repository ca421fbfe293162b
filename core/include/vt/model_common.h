/*
 * vt/model_common.h - the model layer every family shares (plugins/model-common,
 * the static library vt-model-common that model plugins link; shipped in the
 * SDK for third-party plugins): the part of a model that holds the backend and
 * its weight allocations, and the tensor loader (shape checks, weight types
 * against the backend's capabilities, placement in backend memory, merged
 * matrices, expert stacks). A family keeps what is its own: hyperparameters,
 * tensor names, the math of its layers.
 *
 * A family's struct vt_model starts with VT_MC_MODEL_HEAD: its fields are then
 * both m->api (the family's code) and m->mc.api (&m->mc is what the functions
 * here take), one storage through an anonymous union (C11).
 *
 * Errors: every function that can fail returns a vt_status and sets the
 * host's error message, prefixed with the family name ("qwen35: tensor
 * 'blk.0.attn_q.weight' has shape [64, 32], expected [64, 64] = ... from the
 * metadata"), naming the tensor, what was expected and the metadata keys it
 * came from (`from`). Shapes are in GGUF ne order: [n_in, n_out(, n_expert)].
 */
#ifndef VT_MODEL_COMMON_H
#define VT_MODEL_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "vt/backend.h"
#include "vt/gguf.h"
#include "vt/model.h"
#include "vt/plugin.h"
#include "vt/plugin_util.h" /* vt_util_table_fn */
#include "vt/status.h"

/* The figures of a model the shared layer reads, copied from the family's
 * hyperparameters when they are read (vt_mc_family.read_hparams). */
typedef struct vt_mc_dims {
    uint32_t n_layer;        /* layers that run */
    uint32_t n_embd;
    uint32_t n_expert;       /* routed experts (0: dense) */
    uint32_t n_expert_used;  /* top-k (0: dense) */
    uint32_t n_ff_exp;       /* an expert's FFN width */
    uint32_t n_ctx_train;
    float eps;               /* the RMSNorm epsilon of the final norm (and the residual's) */
    float softcap;           /* final logits: softcap . tanh(z / softcap); 0: none */
    int64_t n_vocab;         /* token_embd rows (set when the tensors are mapped) */
} vt_mc_dims;

struct vt_mc_family;

/* The fields every model has, in this order (see VT_MC_MODEL_HEAD). */
#define VT_MC_MODEL_FIELDS                                                                        \
    const vt_host_api *host;     /* the core's host table */                                      \
    const vt_backend *backend;   /* the backend the weights live on */                            \
    const vt_backend_api *api;   /* its op table */                                               \
    vt_backend_ctx *ctx;         /* its context */                                                \
    const char *family;          /* message prefix: "qwen35", "gemma4" */                         \
    int zero_copy;               /* weights used straight from the GGUF mmap (host-addressable) */ \
    vt_expert_streamer *experts; /* routed experts streamed through this (NULL: resident) */      \
    void **dev_allocs;           /* backend allocations of weights, owned by the model */         \
    size_t n_dev_allocs, cap_dev_allocs;                                                          \
    uint32_t n_ctx;              /* positions per sequence */                                     \
    uint32_t n_batch;            /* most tokens per forward() */                                  \
    const void **exp_slots;      /* [n_expert_used * 3] slot pointers of one acquire (streamed) */ \
    int32_t *exp_ids;            /* [n_expert_used] experts of one acquire */                     \
    /* fused routed experts (the backend declares op.moe_route and op.moe_ffn,                  \
     * env VT_MOE_FFN=0 not set): routing and the expert FFN as two ops */                        \
    int fused_moe;                                                                                \
    void *exp_tab_dev;           /* one device allocation: n_layer x [3][n_expert] pointers */    \
    void **exp_tab;              /* per layer (NULL without experts): gate, up, down pointers */  \
    const void **exp_tab_host;   /* [3][n_expert] host image of one layer's table */              \
    int exp_tab_pinned;          /* exp_tab_host is page-locked (vt_util_exp_tab_image) */        \
    int exp_tab_queued;          /* this call uploads it queued (one group: a one-token step) */  \
    /* decode graphs (vt_mc_setup_graph): a one-token step recorded once per                    \
     * sequence and replayed (use_graph, experts resident), or as segments cut at               \
     * each MoE layer's routing with the acquires between them (use_seg_graph) */              \
    int use_graph, use_seg_graph;                                                                 \
    int fuse;                    /* ABI 1.3's element-wise fusions and merged matrices */        \
    /* the routed experts' scratch: host (per-expert ops path) and device (FFN rows) */           \
    int32_t *topk_ids;           /* [(n_batch + 1) * top-k]: + a prediction for prefetch */        \
    float *topk_w;               /* [n_batch * top-k] */                                          \
    int32_t *exp_count;          /* [n_expert + 2] */                                             \
    int32_t *exp_tok;            /* [n_batch * top-k] token of each routed pair, by expert */      \
    float *exp_w;                /* the pairs' weights, same order */                             \
    vt_weight *grp_down;         /* [top-k] down matrices of one expert group */                  \
    int32_t *grp_row0, *grp_rows; /* [top-k] each group expert's first row and row count */       \
    float *f_x, *f_g, *f_u, *f_y; /* device: gathered input, gate, up, down out (FFN rows) */   \
    int32_t *r_ids;              /* device [T][top-k] routed ids (+ top-k predicted, prefetch) */ \
    float *r_w;                  /* device [T][top-k] their weights */                            \
    size_t moe_scratch_bytes;    /* moe_ffn's scratch: f_x .. the end of the moe part */          \
    uint32_t n_ahead;            /* predicted ids at topk_ids + T x top-k, for experts_prefetch */ \
    vt_mc_dims d;                /* the figures the shared layer reads (the family's hparams) */  \
    const struct vt_mc_family *fam; /* the family (set by vt_mc_load; the MoE and decode-graph \
                                  helpers read it: a model loaded otherwise sets it itself) */    \
    float *moe_out;              /* [T][n_embd] where the routed experts' sum is added (family) */ \
    vt_weight token_embd;        /* [n_embd -> n_vocab] rows (get_rows) */                        \
    vt_weight output;            /* the LM head (token_embd when tied) */                         \
    const float *output_norm;    /* [n_embd] */                                                   \
    /* a residual addition x += sigmoid(res_gate)·res_a (res_gate NULL: x += res_a)             \
     * that the next norm performs (add_rms_norm); res_a NULL: none pending */                    \
    const float *res_a, *res_gate;                                                                \
    int64_t head_rows;           /* rows of LM-head output per chunk */                           \
    /* device scratch for n_batch tokens (vt_mc_alloc_scratch): one allocation */                \
    void *scratch;                                                                                \
    float *x, *h, *a;            /* [T][n_embd]: residual, normed input, sublayer output */       \
    float *r_logits;             /* [T][n_expert + 1] router logits (+ a family's extra gate) */  \
    int32_t *d_pos;              /* [T] positions in device memory (graph path) */                \
    float *s_k, *s_v;            /* [T][max_kv] normed, roped K and V (graph path) */             \
    /* prefetch (streamed, one token): layer l+1's router on layer l's hidden state; its       \
     * ids go to r_ids + top-k (one copy brings both) */                                          \
    float *ah_h;                 /* [n_embd] layer l+1's router input */                          \
    float *ah_logits;            /* [n_expert + 1] */                                             \
    float *ah_w;                 /* [top-k] (unused weights of the prediction) */                 \
    float *logits_buf;           /* [head_rows][n_vocab] */                                       \
    int32_t *pos;                /* host [n_batch]: the positions of a call's tokens */           \
    const char *dump_path;       /* the family's dump env (vt_mc_family.dump_env): append here */

typedef struct vt_mc_model {
    VT_MC_MODEL_FIELDS
} vt_mc_model;

/* First member of a family's struct vt_model. */
#define VT_MC_MODEL_HEAD \
    union {              \
        vt_mc_model mc;  \
        struct {         \
            VT_MC_MODEL_FIELDS \
        };               \
    }

/* A stacked expert tensor [n_in, n_out, n_expert] (or a fused gate_up one with
 * n_out = 2 * n_ff_exp); slice e is bytes [e*n_out*row_bytes, (e+1)*...). */
typedef struct vt_mc_stack {
    uint32_t type;
    int64_t n_in, n_out, n_expert;
    uint64_t row_bytes;
    const uint8_t *data;          /* backend memory of the whole stack (NULL when streamed) */
    const char *name;
    const vt_gguf_tensor *tensor; /* the GGUF tensor (registered with the streamer) */
} vt_mc_stack;

/* A MoE layer's routed experts: gate, up and down stacks, or gate_up (fused,
 * rows [gate | up]) and down. A family's layer holds VT_MC_EXPERTS_HEAD (as
 * VT_MC_MODEL_HEAD: ly->down_exps and ly->x.down_exps are one storage). */
#define VT_MC_EXPERTS_FIELDS                                                  \
    vt_mc_stack gate_exps, up_exps, down_exps; /* gate_exps.data NULL when fused */ \
    vt_mc_stack gate_up_exps; /* fused form (ffn_gate_up_exps), used when fused_gate_up */ \
    int fused_gate_up;

typedef struct vt_mc_experts {
    VT_MC_EXPERTS_FIELDS
} vt_mc_experts;

#define VT_MC_EXPERTS_HEAD \
    union {                \
        vt_mc_experts x;   \
        struct {           \
            VT_MC_EXPERTS_FIELDS \
        };                 \
    }

/* The matrices of one routed expert (vt_mc_expert_weight). */
enum { VT_MC_EXP_GATE = 0, VT_MC_EXP_UP = 1, VT_MC_EXP_DOWN = 2 };

/* One mapping pass over a file's tensors. Run "dry" (required_caps: mc may
 * be NULL, nothing is placed, the capabilities each weight needs are
 * recorded in caps) or for real (load: every weight placed, each weight's op
 * checked against the backend). fm is the family's own model (NULL when dry
 * and there is none). */
typedef struct vt_mc_loader {
    const vt_host_api *host;
    const vt_gguf *g;
    vt_mc_model *mc;
    vt_model *fm;
    const char *family;   /* message prefix */
    int dry;              /* record types only; place nothing */
    uint32_t *caps;       /* dry: capability ids collected */
    uint32_t n_caps, cap_caps;
} vt_mc_loader;

/* How a 2-D weight is used by the forward pass (bit mask). */
#define VT_MC_USE_MAT_MUL 1  /* a projection, the LM head */
#define VT_MC_USE_GET_ROWS 2 /* the embedding lookup */

/* ---- allocations ---- */

/* Backend memory of `bytes` for `what` (a tensor name), NOT owned by the
 * model (scratch, caches): the backend's message kept when it names what and
 * its bytes, else ours appended (vt/backend.h). */
vt_status vt_mc_dev_alloc(vt_mc_model *m, size_t bytes, const char *what, void **out);
/* The same, owned by the model (m->dev_allocs): freed by vt_mc_free_weights. */
vt_status vt_mc_weight_alloc(vt_mc_model *m, size_t bytes, const char *what, void **out);
/* Give back one weight allocation p of m->dev_allocs (no-op when not one). */
void vt_mc_weight_free(vt_mc_model *m, const void *p);
/* Give back every weight allocation and the list. */
void vt_mc_free_weights(vt_mc_model *m);

/* ---- metadata keys ---- */

/* general.architecture of g into *arch; VT_ERR_NOT_FOUND ("<family>:
 * required metadata key 'general.architecture' is missing") when absent. */
vt_status vt_mc_key_arch(const vt_host_api *host, const vt_gguf *g, const char *family,
                         vt_gguf_str *arch);
/* The key "<arch>.<suffix>" of g as a u32 (f32): when absent, required
 * gives VT_ERR_NOT_FOUND ("<family>: required metadata key '<key>' is
 * missing"), else *out = dflt; a value of another type VT_ERR_FORMAT (the
 * host's message names the key). */
vt_status vt_mc_key_u32(const vt_host_api *host, const vt_gguf *g, const char *family,
                        const char *arch, const char *suffix, int required, uint32_t dflt,
                        uint32_t *out);
vt_status vt_mc_key_f32(const vt_host_api *host, const vt_gguf *g, const char *family,
                        const char *arch, const char *suffix, int required, float dflt,
                        float *out);

/* ---- the loader ---- */

/* Record capability id (dry mode): repeats dropped while within cap_caps;
 * n_caps counts on past it so the caller can say how much room it needs. */
void vt_mc_add_cap(vt_mc_loader *L, uint32_t id);
/* The tensor named, NULL when absent. */
const vt_gguf_tensor *vt_mc_find(vt_mc_loader *L, const char *name);
/* VT_ERR_NOT_FOUND: "required tensor 'name' is missing[: why]". */
vt_status vt_mc_missing(vt_mc_loader *L, const char *name, const char *why);
/* VT_ERR_UNSUPPORTED when the tensor is present: "tensor 'name' is present:
 * why" (a tensor the family does not implement is never silently ignored). */
vt_status vt_mc_refuse_if_present(vt_mc_loader *L, const char *name, const char *why);
/* Shape check of t against want[0..n) (trailing 1s count as absent). */
vt_status vt_mc_check_shape(vt_mc_loader *L, const vt_gguf_tensor *t, int n, const int64_t *want,
                            const char *from);
/* A weight type the matmul ops can take: a known block type, not an integer
 * type or F64. */
int vt_mc_is_weight_type(uint32_t type);
/* Dry: record mat_mul (or get_rows) of type; else VT_ERR_CAPABILITY when the
 * backend has no such op, naming the tensor, the type and the backend. */
vt_status vt_mc_need_typed(vt_mc_loader *L, const char *tname, uint32_t type, int get_rows);
/* Where the backend's ops read the bytes [0, bytes) of t: the mmap pointer
 * when zero_copy, else a model-owned allocation filled with copy_h2d (the
 * file's pages then released). Dry: *out = NULL. */
vt_status vt_mc_place(vt_mc_loader *L, const vt_gguf_tensor *t, uint64_t bytes, const void **out);
/* A 2-D weight [n_in, n_out] used as `uses` says (VT_MC_USE_*). found NULL:
 * required; else *found tells an optional one's presence (w zeroed when
 * absent). */
vt_status vt_mc_weight(vt_mc_loader *L, const char *name, const char *from, int64_t n_in,
                       int64_t n_out, int uses, vt_weight *w, int *found);
/* vt_mc_weight of a matrix used through mat_mul (a projection). */
static inline vt_status vt_mc_matrix(vt_mc_loader *L, const char *name, const char *from,
                                     int64_t n_in, int64_t n_out, vt_weight *w, int *found)
{
    return vt_mc_weight(L, name, from, n_in, n_out, VT_MC_USE_MAT_MUL, w, found);
}
/* An F32 tensor of shape want[0..n) read by ops (norms, scales, conv taps);
 * found as vt_mc_weight. */
vt_status vt_mc_f32(vt_mc_loader *L, const char *name, const char *from, int n,
                    const int64_t *want, const float **out, int *found);
/* vt_mc_f32 of a vector [n]. */
static inline vt_status vt_mc_vec(vt_mc_loader *L, const char *name, const char *from, int64_t n,
                                  const float **out, int *found)
{
    return vt_mc_f32(L, name, from, 1, &n, out, found);
}
/* A stacked expert tensor [n_in, n_out, n_expert] used through mat_mul. When
 * the model streams its experts (mc->experts) nothing is placed: the stack is
 * registered with the streamer after mapping. */
vt_status vt_mc_stack_map(vt_mc_loader *L, const char *name, const char *from, int64_t n_in,
                          int64_t n_out, int64_t n_expert, vt_mc_stack *s);
/*
 * Merge the n (<= 4) weights parts[] that read one input (one type, one n_in,
 * each in its own model-owned allocation) into one allocation, their rows in
 * the order given, as *out: one matmul then computes every part's outputs.
 * The parts' allocations are given back and each part's data points at its
 * rows in the merged one. Zero copy, parts that cannot be merged, or no room
 * for the merged copy (an optimisation after the fit check): nothing changes
 * and *out stays empty (data NULL); the forward pass then runs the parts.
 */
vt_status vt_mc_merge(vt_mc_model *m, vt_weight *const *parts, int n, vt_weight *out);

/* ---- routed experts ---- */

/* View of expert e's matrix `which` (VT_MC_EXP_*) of the layer whose experts
 * are x: with slots NULL (experts resident) a slice of the stacked tensor;
 * else slots holds the streamer's slots of expert e, one per stack in
 * registration order (gate, up, down; or gate_up, down). VT_ERR_INTERNAL
 * when e is out of range. */
vt_status vt_mc_expert_weight(const vt_mc_model *m, const vt_mc_experts *x, int which, uint32_t e,
                              const void *const *slots, vt_weight *out);
/* Fused path: write layer il's device table of expert pointers [3][n_expert]
 * (gate, up, down) from the stacks (slots NULL: every expert, resident) or,
 * streamed, the entries of the n experts ids[] whose slots an acquire
 * returned (slots[i * matrices + m]); uploaded unless device memory is
 * host-addressable (then written in place). */
vt_status vt_mc_write_expert_table(vt_mc_model *m, uint32_t il, const vt_mc_experts *x,
                                   int64_t n_expert, const int32_t *ids, uint32_t n,
                                   const void *const *slots);
/* Streamed experts: allocate the acquire buffers (exp_slots, exp_ids for
 * n_expert_used) and register every MoE layer's stacks with the streamer, in
 * the order the forward pass reads their slots. layer_experts(fm, il) gives
 * layer il's experts, NULL for a layer without. */
vt_status vt_mc_register_experts(vt_mc_model *m, uint32_t n_layer, uint32_t n_expert_used,
                                 const vt_mc_experts *(*layer_experts)(const vt_model *fm, uint32_t il),
                                 const vt_model *fm);
/* Decide use_graph and use_seg_graph (after fused_moe): the backend has
 * graphs (vt_util_graph_available), env VT_GRAPH (and VT_GRAPH_STREAMED for
 * segments) not 0; whole-step graphs need resident experts that run fused
 * (or no experts: has_moe 0), segments streamed and fused experts. */
void vt_mc_setup_graph(vt_mc_model *m, int has_moe);

/* ---- the model api's small entries ---- */

/* vt_model_api.info: fill *out from the model's figures, at most what the
 * caller's struct holds (its struct_size, or for a caller of ABI 1.1, which
 * was not asked to set it, the 1.1 struct). */
void vt_mc_info(const vt_mc_model *m, int64_t n_vocab, uint32_t n_embd, uint32_t n_layer,
                uint32_t n_ctx_train, const char *moe_path, const char *decode_path,
                vt_model_info *out);
/* Zeroed backend memory of `bytes` (at least 64) for a sequence's state,
 * named "<what> blk.<il>", not owned by the model (the sequence frees it). */
vt_status vt_mc_seq_alloc(vt_mc_model *m, size_t bytes, const char *what, uint32_t il,
                          float **out);

/* ---- scratch ---- */

/* One part of the activation scratch: *p gets rows x cols floats. */
typedef struct vt_mc_scratch_part {
    float **p;
    size_t rows, cols;
} vt_mc_scratch_part;

/* Carve parts[0..n) out of one backend allocation, in order, each padded to
 * 16 floats (n_batch comes from the caller: every product and the sum are
 * overflow-checked, VT_ERR_RANGE naming n_batch). bytes_only set: only its
 * size, nothing allocated; else *scratch is the allocation (the model frees
 * it) and every *parts[i].p points into it. */
vt_status vt_mc_carve_scratch(vt_mc_model *m, const vt_mc_scratch_part *parts, size_t n,
                              size_t *bytes_only, void **scratch);

/* ---- the forward pass (model_forward_common.c) ---- */

/* moe_ffn's arguments for layer il's routed experts (fam->layer_experts)
 * over all of its experts: T tokens of h, the sum added into moe_out with
 * fam->moe_act, r_ids / r_w the routing, f_x.. the scratch (the streamed
 * paths narrow the expert range per group). */
vt_moe_ffn_args vt_mc_moe_args(vt_mc_model *m, uint32_t il, int64_t T);
/* The prediction at decode (one token, il + 1 a MoE layer, prefetch on):
 * fam->router_ahead's logits of layer il + 1, routed to top-k ids after
 * layer il's in r_ids; *n_ahead their count (0: none queued). */
vt_status vt_mc_predict_next(vt_mc_model *m, uint32_t il, int64_t T, uint32_t *n_ahead);
/* The fused routed experts of layer il with moe_ffn args a (the routing in
 * r_ids / r_w): resident, one moe_ffn; streamed, the ids to the host, groups
 * of at most k experts acquired and the layer's table pointed at their
 * slots through write_table(user, ...), one moe_ffn per group (the same
 * bits: moe_ffn adds per token in increasing expert id), and the n_ahead
 * predicted ids of layer il + 1 (after the layer's in r_ids) brought to the
 * host for prefetch; m->n_ahead is then their count. */
vt_status vt_mc_moe_ffn_run(vt_mc_model *m, uint32_t il, vt_moe_ffn_args *a, int64_t T,
                            uint32_t n_ahead, vt_util_table_fn write_table, void *user);

/* vt_model_info.moe_path: how the routed experts run; NULL without experts. */
const char *vt_mc_moe_path(const vt_mc_model *m, int has_moe);

/*
 * The routed experts of layer il through the per-expert ops (a backend
 * without the fused moe ops, or VT_MOE_FFN=0), after the routing: topk_ids /
 * topk_w hold T x k (id, weight) pairs. The pairs are bucketed by expert
 * (counting sort, token order kept); experts run in increasing id, in groups
 * of at most k made resident together when streamed (acquired from the
 * streamer); a group's rows take one gather of h, the gate and up matmuls per
 * expert, one act(gate) . up, the down matmuls per expert and one weighted
 * scatter_add into out [T][n_embd] (the additions in the order of one expert
 * at a time). VT_ERR_INTERNAL naming the layer when an id is out of range.
 */
vt_status vt_mc_moe_ops(vt_mc_model *m, const vt_mc_experts *x, uint32_t il, int64_t T,
                        int64_t n_embd, int64_t n_ff, int64_t n_expert, int64_t k,
                        vt_unary_op act, const float *h, float *out);

/* A family's struct vt_model_seq begins with `int64_t pos` (tokens already
 * evaluated): the checks below read it through this. */
static inline int64_t vt_mc_seq_pos(const vt_model_seq *s) { return *(const int64_t *)(const void *)s; }

/* y[T, n_out] (ldy) = x[T, n_in] (ldx) . W^T through the weight type's
 * mat_mul; VT_ERR_CAPABILITY naming the type and tensor when there is none. */
vt_status vt_mc_mm(vt_mc_model *m, const vt_weight *w, const float *x, int64_t ldx, float *y,
                   int64_t ldy, int64_t T);
/* forward()'s arguments: T tokens (1..n_batch) at the sequence's position
 * within n_ctx, every id in [0, n_vocab); pos[t] = position of token t
 * (pos NULL: not written).
 * arch and n_ctx_train name the trained context in the message. */
vt_status vt_mc_forward_check(vt_mc_model *m, const vt_model_seq *s, const int32_t *tokens,
                              int64_t T, int64_t n_vocab, const char *arch, uint32_t n_ctx_train,
                              int32_t *pos);
/* forward_multi()'s arguments (n_seq >= 2 distinct sequences, each with
 * tokens, within n_ctx, T tokens in all <= n_batch, ids in range); pos[t] =
 * position of token t in its sequence; *T_out = T. */
vt_status vt_mc_multi_check(vt_mc_model *m, vt_model_seq *const *seqs, const int64_t *n_tok,
                            uint32_t n_seq, const int32_t *tokens, int64_t n_vocab, int32_t *pos,
                            int64_t *T_out);
/* The LM head of rows normed rows h[rows][n_embd] into logits[rows][n_vocab]
 * (host memory), head_rows at a time through logits_buf (backend memory,
 * head_rows x n_vocab); softcap > 0: logits = softcap . tanh(z / softcap). */
vt_status vt_mc_lm_head(vt_mc_model *m, const vt_weight *output, const float *h, int64_t n_embd,
                        int64_t n_vocab, int64_t rows, int64_t head_rows, float *logits_buf,
                        float softcap, float *logits);

/* ---- sequences ---- */

/* The fields every sequence has (a family's struct vt_model_seq begins with
 * VT_MC_SEQ_HEAD, as a model with VT_MC_MODEL_HEAD). */
#define VT_MC_SEQ_FIELDS                                                                          \
    int64_t pos;                /* tokens already evaluated */                                    \
    vt_graph *graph;            /* the recorded one-token step (NULL: none yet) */                \
    vt_graph **seg;             /* streamed: its segments, at most n_layer + 1 (NULL: none yet) */ \
    uint8_t *seg_pred;          /* per segment: 1 when it computes the next layer's prediction    \
                                   (recorded with it, so replays copy only real ids) */           \
    float **k_cache, **v_cache; /* per layer (NULL where a layer has none) */

typedef struct vt_mc_seq {
    VT_MC_SEQ_FIELDS
} vt_mc_seq;

#define VT_MC_SEQ_HEAD   \
    union {              \
        vt_mc_seq sq;    \
        struct {         \
            VT_MC_SEQ_FIELDS \
        };               \
    }

/* A new sequence of seq_size bytes (zeroed; the family's struct vt_model_seq)
 * with K and V tables of d.n_layer entries and, for each layer il where
 * kv_bytes(fm, il, &bytes) gives bytes > 0, zeroed K and V caches of that
 * size (kv_bytes returns an error, with the message set, when the size
 * overflows). On failure nothing is left allocated. */
vt_status vt_mc_seq_new(vt_mc_model *m, const vt_model *fm, size_t seq_size,
                        vt_status (*kv_bytes)(const vt_model *fm, uint32_t il, size_t *bytes),
                        vt_mc_seq **out);
/* Give back the sequence's graphs, segments, K and V caches and s itself
 * (what the family added it frees first). s NULL: nothing. */
void vt_mc_seq_free(vt_mc_model *m, vt_mc_seq *s);
/* Give back the sequence's streamed-decode segments only. */
void vt_mc_free_segments(vt_mc_model *m, vt_mc_seq *s);

/* ---- a family: the load, free, required_caps and memory_needs sequences ---- */

/*
 * What the shared sequences ask of a family (model_family.c). fm is the
 * family's model (struct vt_model, VT_MC_MODEL_HEAD first); every function
 * that can fail sets the host's message.
 */
typedef struct vt_mc_family {
    const char *name;         /* "qwen35": message prefix, vt_mc_model.family */
    size_t model_size;        /* sizeof the family's struct vt_model */
    const char *dump_env;     /* env naming the hidden-state dump file (vt_mc_model.dump_path) */
    uint32_t n_ctx_max;       /* the largest n_ctx its positions take */
    /* Read and validate the hyperparameters into fm's own fields and fill
     * fm's d (n_vocab excepted). */
    vt_status (*read_hparams)(const vt_host_api *host, const vt_gguf *g, vt_model *fm);
    /* The layer table (fm's own, d.n_layer entries). */
    vt_status (*alloc_layers)(vt_model *fm);
    /* Free what read_hparams, alloc_layers and finish allocated (not fm). */
    void (*free_own)(vt_model *fm);
    /* Record the op capabilities the forward pass calls (vt_mc_add_cap). */
    void (*op_caps)(const vt_model *fm, vt_mc_loader *L);
    /* Map every tensor (dry or for real). */
    vt_status (*map_model)(vt_mc_loader *L);
    /* The device scratch (vt_mc_alloc_scratch with the family's parts). */
    vt_status (*scratch)(vt_model *fm, size_t *bytes_only);
    /* K and V cache bytes per position and the bytes of state that do not
     * grow with positions, for n_ctx and n_batch (memory_needs). */
    void (*cache_bytes)(const vt_model *fm, uint32_t n_ctx, uint32_t n_batch, uint64_t *kv,
                        uint64_t *state);
    /* Layer il's routed experts, NULL for a layer without. */
    const vt_mc_experts *(*layer_experts)(const vt_model *fm, uint32_t il);
    /* The merged matrices (when fuse is on). */
    vt_status (*merge_layers)(vt_model *fm);
    /* The rest of the load, last (the family's own device tables, its log
     * line); NULL: none. */
    vt_status (*finish)(vt_model *fm, const vt_model_params *params);
    /* Decode graphs (backends that record them; vt_mc_graph_decode): */
    /* the layers of one token, positions from d_pos (a whole-step graph); */
    vt_status (*step_layers)(vt_model *fm, vt_model_seq *s);
    /* streamed: the ops of segment j, after the acquire of MoE layer after
     * (UINT32_MAX: the first segment): that layer's routed experts over the
     * table the acquire wrote and the rest of it, the layers up to the next
     * MoE layer's routing and its prediction for the layer after (whether
     * made: s->seg_pred[j]); past the last MoE layer, the rest and
     * vt_mc_head_row(0). The same ops in the same order as the op path; */
    vt_status (*seg_ops)(vt_model *fm, vt_model_seq *s, uint32_t j, uint32_t after);
    /* the first MoE layer at or after il (d.n_layer: none); */
    uint32_t (*next_cut)(const vt_model *fm, uint32_t il);
    /* Layer il's router logits [n_expert] into ah_logits for a one-token
     * prediction, from the residual x (ah_h: its normed input). */
    vt_status (*router_ahead)(vt_model *fm, uint32_t il);
    vt_moe_act moe_act;       /* the experts' activation (moe_ffn) */
} vt_mc_family;

/* The family's callbacks named P_read_hparams, P_alloc_layers, P_free_own,
 * P_op_caps, P_map_model, P_scratch, P_cache_bytes, P_layer_experts,
 * P_merge_layers, P_finish, P_step_layers, P_seg_ops, P_next_cut and
 * P_router_ahead, for a vt_mc_family initializer. */
#define VT_MC_FAMILY_FNS(P)                                                                    \
    .read_hparams = P##_read_hparams, .alloc_layers = P##_alloc_layers,                        \
    .free_own = P##_free_own, .op_caps = P##_op_caps, .map_model = P##_map_model,              \
    .scratch = P##_scratch, .cache_bytes = P##_cache_bytes,                                    \
    .layer_experts = P##_layer_experts, .merge_layers = P##_merge_layers, .finish = P##_finish, \
    .step_layers = P##_step_layers, .seg_ops = P##_seg_ops, .next_cut = P##_next_cut,          \
    .router_ahead = P##_router_ahead

/* vt_model_api.load: the model object, the hyperparameters, every op the
 * forward pass calls checked on the backend, n_ctx (params 0: the trained
 * context up to 4096) and n_batch (0: 512) range-checked, the tensors
 * mapped and placed, streamed experts registered, the scratch, the fused
 * experts' tables, decode graphs, merged matrices, then F->finish. */
vt_status vt_mc_load(const vt_mc_family *F, const vt_host_api *host, const vt_gguf *g,
                     const vt_backend *backend, const vt_model_params *params, vt_model **out);
/* vt_model_api.free: everything vt_mc_load allocated, then fm. */
void vt_mc_free(const vt_mc_family *F, vt_model *fm);
/* vt_model_api.required_caps: the mapping run dry. */
vt_status vt_mc_required_caps(const vt_mc_family *F, const vt_host_api *host, const vt_gguf *g,
                              uint32_t *ids, uint32_t cap, uint32_t *n);
/* vt_model_api.memory_needs: F->cache_bytes and the scratch's size. */
vt_status vt_mc_memory_needs(const vt_mc_family *F, const vt_host_api *host, const vt_gguf *g,
                             const vt_model_params *params, vt_model_memory *out);

/* vt_model_api.info of a model loaded by vt_mc_load: its d figures, n_ctx,
 * vt_mc_moe_path and vt_mc_decode_path (vt_mc_info). */
void vt_mc_info_entry(const vt_model *fm, vt_model_info *out);
/* vt_model_api.seq_pos: the sequence's position (s NULL: 0). */
int64_t vt_mc_seq_pos_entry(const vt_model *fm, const vt_model_seq *s);

/*
 * A model plugin of family FAMILY (a vt_mc_family): required_caps,
 * memory_needs, load, free and info through the shared sequences above, with
 * the family's SEQ_NEW, SEQ_FREE, SEQ_RESET, FORWARD and FORWARD_MULTI
 * (vt/model.h), the vt_model_api table, the plugin descriptor (NAME,
 * VERSION, DESCRIPTION) and the exported vt_plugin_entry. The arguments
 * after FORWARD_MULTI: the GGUF architectures it serves (strings).
 */
#define VT_MC_PLUGIN(FAMILY, NAME, VERSION, DESCRIPTION, SEQ_NEW, SEQ_FREE, SEQ_RESET, FORWARD,  \
                     FORWARD_MULTI, ...)                                                          \
    static vt_status vt_mc_plugin_required_caps_(const vt_host_api *host, const vt_gguf *g,      \
                                                 uint32_t *ids, uint32_t cap, uint32_t *n)       \
    {                                                                                             \
        return vt_mc_required_caps(&(FAMILY), host, g, ids, cap, n);                              \
    }                                                                                             \
    static vt_status vt_mc_plugin_memory_needs_(const vt_host_api *host, const vt_gguf *g,       \
                                                const vt_model_params *params,                    \
                                                vt_model_memory *out)                             \
    {                                                                                             \
        return vt_mc_memory_needs(&(FAMILY), host, g, params, out);                               \
    }                                                                                             \
    static vt_status vt_mc_plugin_load_(const vt_host_api *host, const vt_gguf *g,               \
                                        const vt_backend *backend, const vt_model_params *params, \
                                        vt_model **out)                                           \
    {                                                                                             \
        return vt_mc_load(&(FAMILY), host, g, backend, params, out);                              \
    }                                                                                             \
    static void vt_mc_plugin_free_(vt_model *m) { vt_mc_free(&(FAMILY), m); }                     \
    static const char *const vt_mc_plugin_archs_[] = {__VA_ARGS__, NULL};                         \
    static const vt_model_api vt_mc_plugin_api_ = {                                               \
        .struct_size = sizeof(vt_model_api), .architectures = vt_mc_plugin_archs_,                \
        .required_caps = vt_mc_plugin_required_caps_, .load = vt_mc_plugin_load_,                 \
        .free = vt_mc_plugin_free_, .info = vt_mc_info_entry, .seq_new = SEQ_NEW, .seq_free = SEQ_FREE,       \
        .seq_reset = SEQ_RESET, .seq_pos = vt_mc_seq_pos_entry, .forward = FORWARD,               \
        .memory_needs = vt_mc_plugin_memory_needs_, .forward_multi = FORWARD_MULTI};              \
    static const vt_plugin_desc vt_mc_plugin_desc_ = {                                            \
        .struct_size = sizeof(vt_plugin_desc), .abi_major = VT_ABI_MAJOR,                         \
        .abi_minor = VT_ABI_MINOR, .kind = VT_PLUGIN_MODEL, .name = NAME, .version = VERSION,     \
        .description = DESCRIPTION, .table = &vt_mc_plugin_api_};                                 \
    VT_PLUGIN_EXPORT const vt_plugin_desc *vt_plugin_entry(void);                                 \
    VT_PLUGIN_EXPORT const vt_plugin_desc *vt_plugin_entry(void) { return &vt_mc_plugin_desc_; }

/* vt_util_moe_ffn_streamed's table writer (user: the model): the acquired
 * group's slots into layer `layer`'s expert table (vt_mc_write_expert_table
 * with the family's layer_experts). */
vt_status vt_mc_table_cb(void *user, uint32_t layer, const int32_t *ids, uint32_t n,
                         const void *const *slots);

/* Append rows x n floats of device memory dev to the family's dump file
 * (dump_path; none: nothing), and log their RMS at debug level; a failed
 * host allocation is said (WARN) and the rows skipped (a debugging aid). */
vt_status vt_mc_dump(vt_mc_model *m, const float *dev, int64_t rows, int64_t n);

/* token_embd (get_rows; also the LM head when output.weight is absent),
 * output and output_norm [n_embd] into L->mc (which must be set, dry runs
 * too); d.n_vocab = token_embd's rows (VT_ERR_FORMAT outside 1..INT32_MAX). */
vt_status vt_mc_map_embeddings(vt_mc_loader *L);

/* The family's part of the device scratch: at most VT_MC_MAX_SCRATCH_PARTS
 * parts of its own (more: VT_ERR_INVALID_ARG). */
#define VT_MC_MAX_SCRATCH_PARTS 32
typedef struct vt_mc_scratch_spec {
    size_t n_ff;              /* widest FFN row the FFN scratch holds */
    size_t max_kv;            /* widest K (= V) row: s_k, s_v */
    const vt_mc_scratch_part *parts; /* the family's own parts */
    size_t n_parts;
} vt_mc_scratch_spec;

/* The device scratch for n_batch tokens, one allocation: x, h, a, the
 * family's parts, the FFN rows (f_x, f_g, f_u, f_y and moe_ffn's room: its
 * moe_scratch_bytes), r_logits, r_ids, r_w, d_pos, ah_*, s_k, s_v and
 * logits_buf (head_rows = min(n_batch, 16) rows), and the host scratch (pos,
 * the routing buffers). bytes_only: the device size only, nothing allocated. */
vt_status vt_mc_alloc_scratch(vt_mc_model *m, const vt_mc_scratch_spec *sp, size_t *bytes_only);

/* ---- the forward pass's ends (model_forward_common.c) ---- */

/* y[r0 .. r0+n) = rms_norm(x rows r0 .. r0+n) . w (d.eps), first adding the
 * residual addition left pending (res_a, res_gate) to those rows of x; y
 * NULL: only that addition (nothing pending: nothing to do). */
vt_status vt_mc_norm_x(vt_mc_model *m, int64_t r0, int64_t n, const float *w, float *y);
/* After the layers of one sequence's T tokens: the logits of the last row
 * (all_logits: of every row) into logits (host), through the final norm,
 * the dump and the LM head (d.softcap); logits NULL: the pending residual
 * dropped, nothing computed. */
vt_status vt_mc_logits(vt_mc_model *m, int64_t T, int all_logits, float *logits);
/* After the layers of n_seq sequences (n_tok[i] rows each, T in all): the
 * pending residual added, then the logits of each sequence's last row into
 * logits[n_seq][n_vocab] (logits NULL: none). */
vt_status vt_mc_multi_logits(vt_mc_model *m, const int64_t *n_tok, uint32_t n_seq, int64_t T,
                             float *logits);
/* The mixer of layer il (attention, DeltaNet) of the n_seq sequences whose
 * tokens are consecutive rows (n_tok[i] each): mixer(fm, s, il, T, graph)
 * once for one sequence, else per sequence over its rows (h, a and pos
 * offset to them, graph 0; the mixer's temporaries reused from row 0). */
vt_status vt_mc_mixer_rows(vt_mc_model *m, vt_model_seq *const *seqs, const int64_t *n_tok,
                           uint32_t n_seq, int64_t T, uint32_t il, int graph,
                           vt_status (*mixer)(vt_model *fm, vt_model_seq *s, uint32_t il,
                                              int64_t T, int graph));
/* The final norm, LM head and soft-cap of row r of x into logits_buf. */
vt_status vt_mc_head_row(vt_mc_model *m, int64_t r);
/* vt_model_info.decode_path of the model's decode. */
const char *vt_mc_decode_path(const vt_mc_model *m);
/*
 * A one-token step (T == 1, embedded; no dump) through a decode graph: the
 * sequence's recorded step (use_graph: family step_layers and the head
 * row, recorded on its first one-token step, replayed after), or, streamed
 * (use_seg_graph), its segments with the host's part between them (the
 * prefetch the last acquire's prediction asked for, the routing ids to the
 * host, the acquire, the table upload). rows[0 .. n_rows) go to d_pos
 * first (the position, and what else the family's layers read there).
 * *done = 1 when the step ran (the sequence's position advanced, logits
 * written unless NULL); 0 when the ops must run it (not a graph step, or
 * the graph could not be recorded: said once, graphs off; segments of a
 * sequence whose graphs went off are freed).
 */
vt_status vt_mc_graph_decode(vt_mc_model *m, vt_mc_seq *s, int64_t T, const int32_t *rows,
                             size_t n_rows, float *logits, int *done);

/* ---- capabilities ---- */

/* Whether backend api has the op of capability id (the VT_CAP_OP_* a model's
 * forward pass calls besides mat_mul and get_rows); *name gets the op's name
 * for messages. Ids this layer does not know: 0 with *name "?". */
int vt_mc_op_present(const vt_backend_api *a, uint32_t id, const char **name);
/* Backend memory is host-addressable (weights can be used from the mmap). */
int vt_mc_host_addressable(const vt_backend_api *a);

#endif
