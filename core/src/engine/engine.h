/*
 * engine.h - one model loaded for generation: the GGUF, its tokenizer, the
 * model plugin chosen by `general.architecture`, the backend, one sequence.
 *
 * This is what the vt command and the fixture tests drive. Prefill is split
 * into chunks of at most n_batch tokens; decode is one token per call.
 */
#ifndef VT_ENGINE_H
#define VT_ENGINE_H

#include <stdint.h>

#include "config.h"
#include "tokenizer.h"
#include "vt/gguf.h"
#include "vt/model.h"
#include "vt/status.h"

typedef struct vt_engine vt_engine;

/*
 * Load progress: called on the thread that opens the engine while the model
 * copies its weights into device memory (phase "upload": backends whose
 * device memory is not host-addressable), or while the weights a backend
 * reads in place from the mapping are read into memory (phase "read",
 * prefault.h; none with params.no_prefault). `done` and `total` are bytes;
 * for "upload" total is the fit check's estimate (dense weights, plus the
 * routed experts when resident) and grows if the copies exceed it, for
 * "read" the page-rounded bytes to read; the last call has done == total.
 * `seconds` counts from the start of the phase. A copy
 * a model makes from another thread is made but not reported. The callback
 * must return (no longjmp out of it) and must not open an engine.
 */
typedef void (*vt_engine_progress_fn)(void *user, const char *phase, uint64_t done,
                                      uint64_t total, double seconds);

typedef struct vt_engine_params {
    const char *model_path;  /* GGUF file, or the first shard of a split model */
    const char *plugin_dir;  /* --plugin-dir (NULL: VT_PLUGIN_PATH, install/build dirs) */
    const char *device;      /* backend name: "cpu" (NULL: "cpu") */
    int n_threads;           /* <= 0: every online core */
    const char *kernels;     /* "auto" (NULL) or "scalar" (reference kernels); env VT_KERNELS */
    uint32_t n_ctx;          /* KV cache tokens (0: min(trained context, 4096)) */
    uint32_t n_batch;        /* prefill chunk size in tokens (0: 512) */
    const char *config_path; /* residency config (NULL: search, see config.h) */
    const vt_config *config; /* an already loaded config (overrides applied); wins over config_path */
    vt_engine_progress_fn progress; /* NULL: none */
    int no_prefault;         /* 1: a backend that reads the weights in place from
                                the mapping (one declaring host-addressable memory:
                                the CPU) reads them at first use, not at open
                                (prefault.h; phase "read" of progress) */
    void *progress_user;
    int profile;             /* 1: ops can be timed (vt_engine_profile_*, op_profile.h) */
    int plan_only;           /* 1: stop after the plan (vt fit): the platform selected, the
                                device total probed (the backend started and stopped), the
                                fit check run; no tokenizer, no weight mapped, no model.
                                vt_engine_open then returns VT_ERR_DOES_NOT_FIT with *out
                                set when the check refuses, so the plan can be printed */
    vt_gguf_progress_fn open_progress; /* the shards of a split model as they are
                                opened (vt/gguf.h; user: progress_user); NULL: none */
    uint32_t n_seq;          /* sequences held at once (vt serve --parallel); the fit check
                                counts n_seq KV caches and states. 0: one, the engine's own,
                                made at open; >= 1: none made at open (vt_engine_seq_new) */
} vt_engine_params;

/* The KV cache length used when --ctx is not given: the platform's
 * kv_cache_tokens, capped by `<arch>.context_length`. */
uint32_t vt_engine_default_ctx(const vt_config *cfg, const vt_config_platform *plat,
                               const vt_gguf *g);

vt_status vt_engine_open(const vt_engine_params *p, vt_engine **out);
void vt_engine_close(vt_engine *e);

const vt_gguf *vt_engine_gguf(const vt_engine *e);
const vt_tokenizer *vt_engine_tokenizer(const vt_engine *e);
const char *vt_engine_arch(const vt_engine *e);
void vt_engine_model_info(const vt_engine *e, vt_model_info *out);
double vt_engine_load_seconds(const vt_engine *e);
/* How the weights came in at open: *bytes (the fit check's estimate where a
 * load without progress counted no copies), *seconds, and *how
 * ("copied to the device", "read from the file in place", or "read in place
 * at first use (--no-prefault)", then with 0 bytes and seconds). Any
 * pointer may be NULL. */
void vt_engine_weights(const vt_engine *e, uint64_t *bytes, double *seconds, const char **how);

/* The expert streamer when the residency streams experts, else NULL. */
const vt_expert_streamer *vt_engine_streamer(const vt_engine *e);
/* The expert store's name ("host", "device", ...). */
const char *vt_engine_store_name(const vt_engine *e);
/* The fit check's numbers and verdict for this model and platform. */
struct vt_fit;
const struct vt_fit *vt_engine_fit(const vt_engine *e);
/* The residency the plan resolved (platform, plugins, fit) and the KV cache
 * length it counted: what vt fit prints (vt_residency_print). */
struct vt_residency;
const struct vt_residency *vt_engine_residency(const vt_engine *e);
uint32_t vt_engine_n_ctx(const vt_engine *e);

/* Forget all evaluated tokens. */
vt_status vt_engine_reset(vt_engine *e);
/* Tokens evaluated so far. */
int64_t vt_engine_pos(const vt_engine *e);
/*
 * Append n tokens to the sequence, in chunks of at most n_batch.
 * logits (may be NULL): all_logits ? [n][n_vocab] : [n_vocab] of the last token.
 */
/*
 * Per-op profile (engine opened with params.profile = 1, else VT_ERR_INVALID_ARG):
 * start clears the table and records the ops that this thread's
 * vt_engine_eval / vt_engine_reset calls issue, each followed by a
 * synchronize (op_profile.h); stop ends the recording and copies the rows,
 * most time first, into rows[0..cap), returning how many there are.
 */
struct vt_op_profile_row;
vt_status vt_engine_profile_start(vt_engine *e);
int vt_engine_profile_stop(vt_engine *e, struct vt_op_profile_row *rows, int cap);

vt_status vt_engine_eval(vt_engine *e, const int32_t *tokens, int64_t n, float *logits,
                         int all_logits);
/*
 * vt_engine_eval of n >= 1 tokens with the last token's logits in the
 * engine's own buffer: *logits ([n_vocab] floats) stays valid until the next
 * eval, reset or close. On a discrete GPU the buffer is page-locked (within
 * the platform's pinned_budget), so a decode step's logits arrive in one DMA
 * (a refusal of the budget is a noted fallback); callers that sample every
 * step (vt run, vt bench) use this.
 */
vt_status vt_engine_eval_last(vt_engine *e, const int32_t *tokens, int64_t n, const float **logits);

/*
 * Several sequences (vt serve). The engine's own sequence (vt_engine_eval,
 * _reset, _pos) is one of params.n_seq: with n_seq > 1 it is made at its
 * first use, so a server that only uses vt_engine_seq_* holds n_seq of its
 * own (opened with n_seq >= 1, no sequence is made at open). Each sequence has its own KV cache and recurrent state; they share the
 * weights, the expert cache and the logits buffer. Same thread rule as the
 * engine: one call at a time.
 *
 * seq_new: VT_ERR_RANGE when n_seq sequences are already made (the fit check
 * counted no more), else the model's seq_new errors (out of memory naming the
 * cache). The sequence is the caller's until vt_engine_seq_free (before
 * vt_engine_close).
 * seq_eval_last: vt_engine_eval_last on sequence s (the same checks: ids in
 * the vocabulary, room in the context); *logits ([n_vocab]) is valid until the
 * next eval of any sequence. On an error the sequence must be reset.
 */
typedef struct vt_engine_seq vt_engine_seq;
uint32_t vt_engine_n_seq(const vt_engine *e);
vt_status vt_engine_seq_new(vt_engine *e, vt_engine_seq **out);
void vt_engine_seq_free(vt_engine *e, vt_engine_seq *s);
vt_status vt_engine_seq_reset(vt_engine *e, vt_engine_seq *s);
int64_t vt_engine_seq_pos(const vt_engine *e, const vt_engine_seq *s);
vt_status vt_engine_seq_eval_last(vt_engine *e, vt_engine_seq *s, const int32_t *tokens,
                                  int64_t n, const float **logits);

/*
 * Several sequences in one evaluation (continuous batching): seqs[i] gets
 * the n_tok[i] >= 1 tokens of tokens[] that follow those of the sequences
 * before it. With a model that has forward_multi (ABI 1.8;
 * vt_engine_batches_sequences) and at most n_batch tokens in all, one pass:
 * the matmuls and the routed experts run over every token of every sequence
 * together. Otherwise the sequences are evaluated one after another. *logits
 * = [n][n_vocab], the last token's of each sequence, in the engine's own
 * buffer (the one vt_engine_eval_last uses, page-locked the same way), valid
 * until the next evaluation of any sequence. n <= n_seq; a sequence at most once. On an error
 * every sequence given must be reset.
 */
vt_status vt_engine_seqs_eval(vt_engine *e, vt_engine_seq *const *seqs, const int64_t *n_tok,
                              uint32_t n, const int32_t *tokens, const float **logits);
int vt_engine_batches_sequences(const vt_engine *e);
/* The prefill chunk: the most tokens of one model call. */
uint32_t vt_engine_n_batch(const vt_engine *e);

#endif
