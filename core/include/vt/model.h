/*
 * vt/model.h - the model plugin table.
 *
 * A model plugin (descriptor kind VT_PLUGIN_MODEL) serves one or more GGUF
 * architectures (`general.architecture`). The core opens the GGUF, picks the
 * plugin whose `architectures` list holds the file's architecture, creates the
 * backend, and calls load(). The plugin maps tensors by name, checks every
 * shape against the hyperparameters (errors name the tensor), and places the
 * weights in backend memory (directly from the mmap when the backend declares
 * VT_CAP_HOST_ADDRESSABLE_DEVICE_MEMORY PRESENT, else through copy_h2d).
 *
 * Sequences: each vt_model_seq holds one sequence's state (KV cache for
 * attention layers, conv + recurrent state for recurrent layers) and the
 * number of tokens already evaluated (its position). forward() appends
 * n_tokens tokens to a sequence; calling it on a prompt in one chunk, in
 * chunks, or token by token gives the same logits up to float rounding.
 *
 * Thread-safety: one model and its sequences are used by one thread at a time.
 *
 * ABI history: 1.0 up to forward; 1.1 appends memory_needs; 1.2 appends
 * vt_model_info.moe_path and decode_path (the table is unchanged); 1.8
 * appends forward_multi (several sequences in one pass, for vt serve).
 */
#ifndef VT_MODEL_H
#define VT_MODEL_H

#include <stdint.h>

#include "vt/backend.h"
#include "vt/gguf.h"
#include "vt/plugin.h"
#include "vt/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vt_model vt_model;         /* defined by each model plugin */
typedef struct vt_model_seq vt_model_seq; /* defined by each model plugin */

/* What load() gets; owned by the caller, read during load() only (keep copies). */
typedef struct vt_model_params {
    uint32_t struct_size;
    uint32_t n_ctx;      /* KV cache length in tokens per sequence (0: min(trained, 4096)) */
    uint32_t n_batch;    /* most tokens one forward() call will be given (sizes scratch) */
    /* ABI 1.1: routed experts streamed through this (NULL: resident, read in place).
     * The model registers its expert stacks with host->experts_register at load
     * and never touches their bytes in the GGUF mapping. */
    vt_expert_streamer *experts;
} vt_model_params;

/* Filled by info(): the caller sets struct_size to the size it knows and
 * zeroes the rest; info() writes at most struct_size bytes and sets
 * struct_size to what it filled. */
typedef struct vt_model_info {
    uint32_t struct_size;
    int64_t n_vocab;     /* logits per position (rows of the output matrix); the
                            tokenizer's vocabulary may not be larger */
    int64_t n_embd;      /* hidden size */
    int64_t n_layer;     /* blocks (for display) */
    uint32_t n_ctx;      /* KV cache length actually allocated per sequence */
    uint32_t n_ctx_train;
    /* ---- ABI 1.2 (read only when struct_size covers it) ---- */
    /* How the routed experts run, for `vt run --stats` and `vt bench`:
     * "moe_ffn (fused; routing on the device)", "per-expert ops (...)"; NULL
     * for a model without routed experts. A static string of the plugin. */
    const char *moe_path;
    /* How one-token (decode) steps run: "graph (recorded once per sequence,
     * replayed per token)" or "ops (...)". A static string of the plugin. */
    const char *decode_path;
} vt_model_info;

/*
 * What a model needs besides its weights, for the fit check (ABI 1.1). All
 * bytes are in the memory of the model's backend.
 */
typedef struct vt_model_memory {
    uint32_t struct_size;
    uint64_t kv_bytes_per_token; /* KV cache bytes per token of context, all layers, one sequence */
    uint64_t state_bytes;        /* fixed per-sequence state (recurrent + conv state) */
    uint64_t scratch_bytes;      /* activation scratch for params.n_batch tokens */
} vt_model_memory;

typedef struct vt_model_api {
    uint32_t struct_size;
    /* NULL-terminated list of `general.architecture` values this plugin serves. */
    const char *const *architectures;

    /* Capabilities this model needs of its backend for this file (its weight
     * types included): fills ids[0..*n) (at most cap) and returns VT_OK. Called
     * when the configuration is resolved, before any weight is read. */
    vt_status (*required_caps)(const vt_host_api *host, const vt_gguf *g, uint32_t *ids,
                               uint32_t cap, uint32_t *n);
    /* Load the model from an opened GGUF onto a backend. g and backend stay
     * valid until free(m); tensor data (t->data) is a read-only mapping the
     * model may read in place while g is open. On success *out is the caller's,
     * given back with free(); on failure nothing stays allocated and the
     * error (host->set_error) names the tensor or key: VT_ERR_FORMAT (missing
     * tensor, wrong shape), VT_ERR_UNSUPPORTED (a weight type or
     * hyperparameter the plugin does not handle), VT_ERR_OUT_OF_MEMORY, or a
     * backend status. */
    vt_status (*load)(const vt_host_api *host, const vt_gguf *g, const vt_backend *backend,
                      const vt_model_params *params, vt_model **out);
    /* Free the model and its backend memory (its sequences are freed first by
     * the caller). NULL allowed. */
    void (*free)(vt_model *m);
    void (*info)(const vt_model *m, vt_model_info *out);

    /* A new sequence at position 0 (empty cache, zero state), owned by the
     * caller until seq_free. Errors: VT_ERR_OUT_OF_MEMORY naming the cache. */
    vt_status (*seq_new)(vt_model *m, vt_model_seq **out);
    /* Free a sequence of m; NULL allowed. */
    void (*seq_free)(vt_model *m, vt_model_seq *s);
    /* Forget the sequence's tokens: empty KV cache, zero recurrent state. */
    vt_status (*seq_reset)(vt_model *m, vt_model_seq *s);
    /* Tokens already evaluated in the sequence. */
    int64_t (*seq_pos)(const vt_model *m, const vt_model_seq *s);

    /*
     * Evaluate n_tokens tokens (host ids, each < n_vocab) at positions
     * seq_pos .. seq_pos + n_tokens − 1 and append them to the sequence.
     * logits (host, may be NULL): all_logits ? [n_tokens][n_vocab] : [1][n_vocab]
     * (the last token's). n_tokens ≤ params.n_batch; the sequence must have room
     * (VT_ERR_RANGE naming n_ctx otherwise). On error the sequence is left in an
     * unspecified state: reset it.
     */
    vt_status (*forward)(vt_model *m, vt_model_seq *s, const int32_t *tokens, int64_t n_tokens,
                         float *logits, int all_logits);

    /* ---- ABI 1.1 (read only when the plugin's abi_minor >= 1) ---- */
    /* Fill out (out->struct_size set by the caller) from the file's
     * hyperparameters and params (n_ctx, n_batch), reading no weight. Called by
     * the fit check when the configuration is resolved. NULL: the fit check
     * counts weights only and says so. */
    vt_status (*memory_needs)(const vt_host_api *host, const vt_gguf *g,
                              const vt_model_params *params, vt_model_memory *out);

    /* ---- ABI 1.8 (read only when the plugin's abi_minor >= 8) ---- */
    /*
     * Evaluate several sequences in one pass (continuous batching, vt serve):
     * sequence seqs[i] gets the n_tokens[i] >= 1 tokens that follow those of
     * the sequences before it in tokens[] (host ids), at its own positions
     * seq_pos(seqs[i]) onwards. Every matmul, and the routed experts (one
     * expert acquire serves all the tokens of all the sequences that picked
     * it), run over all the tokens together; attention and recurrent state are
     * each sequence's own. logits (host, may be NULL): [n_seq][n_vocab], the
     * last token's of each sequence, in the order of seqs. A sequence appears
     * at most once; the sum of n_tokens is at most params.n_batch; each
     * sequence must have room (VT_ERR_RANGE naming it). The result equals
     * forward() on each sequence up to float rounding. On error the sequences
     * are in an unspecified state: reset them. NULL: the core calls forward()
     * once per sequence.
     */
    vt_status (*forward_multi)(vt_model *m, vt_model_seq *const *seqs, const int64_t *n_tokens,
                               uint32_t n_seq, const int32_t *tokens, float *logits);
} vt_model_api;

#ifdef __cplusplus
}
#endif
#endif
