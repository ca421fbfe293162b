/*
 * serve_sched.h - vt serve's scheduler: N slots over one engine, a bounded
 * queue, one engine thread that advances every running request by one step
 * (a prefill chunk or one decoded token) per round, and each request's output
 * already formatted for its HTTP response (SSE events or one JSON body).
 *
 * Continuous batching: a request waiting in the queue takes a free slot at
 * the start of the next round; its prompt is evaluated in chunks of at most
 * `chunk` tokens per round while other slots decode, so running streams keep
 * flowing. Each slot has its own sequence (KV cache, recurrent state) of the
 * engine, which was opened with n_seq = n_parallel (the fit check counted
 * them). A round is one vt_engine_seqs_eval of every running slot's tokens:
 * one forward pass when the model has forward_multi (qwen35, gemma4), where
 * the matmuls and the routed experts run over all the slots' tokens
 * together; else the slots one after another.
 *
 * Out of memory while a response is formatted (serve_json.h): what was not
 * built whole is not sent; the request ends with an error event (streams)
 * or a JSON 500, and the other slots go on.
 *
 * Threads: submit/read/cancel/release from any thread (the HTTP server's);
 * everything that touches the engine runs on the scheduler's own thread.
 */
#ifndef VT_SERVE_SCHED_H
#define VT_SERVE_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "engine.h"
#include "sampler.h"
#include "serve_request.h"

typedef struct vt_serve_sched vt_serve_sched;
typedef struct vt_serve_job vt_serve_job;

typedef struct vt_serve_sched_params {
    vt_engine *engine;      /* opened with n_seq >= n_parallel; not owned */
    uint32_t n_parallel;    /* slots (>= 1) */
    uint32_t queue_max;     /* requests that may wait for a slot; more: 503 */
    uint32_t chunk;         /* prompt tokens per round while other slots run (0: 128) */
    const char *model_id;   /* "model" in responses and /v1/models */
    const char *chat_template; /* a Jinja chat template for the chats (vt serve --jinja:
                                  tokenizer.h's vt_chat_render_template), or NULL: the
                                  built-in one of the model's family; not owned, valid
                                  until vt_serve_sched_free */
    const vt_sampler_params *defaults; /* vt serve --temp, --top-k, --top-p, --min-p: what a
                                          request that does not set a field gets, for the fields
                                          in defaults_set (VT_SERVE_GIVEN_*); NULL: OpenAI's
                                          (temperature 1, no top-k, top-p or min-p) */
    unsigned defaults_set;
    const char *force_output; /* a test setting (env VT_TEST_FORCE_OUTPUT of vt serve): every
                                 answer is this text (tokenized with control tokens parsed)
                                 and then the end of generation, whatever the logits say;
                                 NULL: off */
} vt_serve_sched_params;

/* Makes the slots' sequences and starts the scheduler thread. NULL on error
 * (vt_last_error names it). */
vt_serve_sched *vt_serve_sched_start(const vt_serve_sched_params *p);
/* Stop: every queued or running request ends with an error event ("the
 * server is shutting down") and the thread is joined. Jobs still held by
 * readers stay valid (and readable) until released. */
void vt_serve_sched_stop(vt_serve_sched *s);
/* Free the sequences and the scheduler, after every job was released (the
 * HTTP server stopped). Calls vt_serve_sched_stop when it was not. */
void vt_serve_sched_free(vt_serve_sched *s);
/* Stop taking requests (SIGTERM): submit answers 503 from now on. */
void vt_serve_sched_drain(vt_serve_sched *s);

/* POST /apply-template (llama-server's): the prompt a chat request renders
 * to with the server's chat template, tools included; *prompt malloc-ed.
 * 0, or -1 with err filled (a template error or raise_exception: 400). */
int vt_serve_apply_template(vt_serve_sched *s, const vt_serve_request *req, char **prompt,
                            vt_serve_error *err);
/*
 * Queue a parsed request (ownership of *req moves to the job, *req is
 * zeroed). The prompt is rendered (chat template) and tokenized here, on the
 * caller's thread. Returns 0 and *job (the caller's reference: release it)
 * or -1 with *err: 400 (prompt over the context, by how much; a token id
 * outside the vocabulary), 503 (queue full, or draining).
 */
int vt_serve_submit(vt_serve_sched *s, vt_serve_request *req, vt_serve_job **job,
                    vt_serve_error *err);

/*
 * Wait up to timeout_ms for output, then copy at most cap bytes of it.
 * Returns the bytes copied (> 0), 0 when nothing came in time, or -1 at the
 * end (all output read and the job finished). For a non-streaming request the
 * output is the whole JSON body and arrives at once at the end; *http is its
 * status (200, or the error's) when known, else 0.
 */
long vt_serve_job_read(vt_serve_job *j, char *buf, size_t cap, int timeout_ms, int *http);
/* Whether the job streams (SSE). */
int vt_serve_job_streams(const vt_serve_job *j);
/* The client went away: the scheduler frees the slot at its next round. */
void vt_serve_job_cancel(vt_serve_job *j);
/* Drop the caller's reference (after cancel when not finished). */
void vt_serve_job_release(vt_serve_job *j);

/* The engine's tokenizer and model facts for /tokenize, /detokenize, /v1/models. */
const vt_tokenizer *vt_serve_tokenizer(const vt_serve_sched *s);
int64_t vt_serve_n_vocab(const vt_serve_sched *s);
uint32_t vt_serve_n_ctx(const vt_serve_sched *s);
const char *vt_serve_model_id(const vt_serve_sched *s);
/* GET /props (llama-server's): the context, the slots, the model's name,
 * the chat template and the BOS/EOS texts; a cJSON object for the caller to
 * send and free. */
cJSON *vt_serve_props_json(const vt_serve_sched *s);

/* Running + queued requests (0: idle). */
uint32_t vt_serve_busy(vt_serve_sched *s);
/* The Prometheus text of GET /metrics, malloc-ed (NULL: out of memory). */
char *vt_serve_metrics_text(vt_serve_sched *s);

#endif
