/*
 * serve_sched_internal.h - what vt serve's scheduler (serve_sched.c: slots,
 * queue, engine thread) and its output side (serve_output.c: a job's text,
 * SSE chunks or JSON body, logprobs, finishing) share: the job, slot and
 * scheduler objects. Hidden; included by those two files only.
 */
#ifndef VT_SERVE_SCHED_INTERNAL_H
#define VT_SERVE_SCHED_INTERNAL_H

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "sampler.h"
#include "serve_metrics.h"
#include "serve_sched.h"
#include "serve_json_schema.h"
#include "serve_tools.h"
#include "tokenizer.h"

#define SV_INTERNAL __attribute__((visibility("hidden")))

enum { FIN_NONE = 0, FIN_STOP, FIN_LENGTH, FIN_ERROR, FIN_CANCELLED };

/* A growable byte buffer. */
typedef struct bbuf {
    char *p;
    size_t n, cap;
} bbuf;

struct vt_serve_job {
    vt_serve_sched *sched;
    int refs;                /* under sched->mu: the caller's and the scheduler's */
    vt_serve_request req;
    int32_t *ids;            /* the prompt */
    int64_t n_ids, n_eval;   /* prompt tokens, of which evaluated */
    char id[48];
    long created;
    double t_arrival, t_last_token;
    /* generation (scheduler thread only) */
    vt_sampler *smp;
    vt_detok_stream *ds;
    int32_t last;            /* the token to evaluate next */
    int64_t n_gen;
    int in_think, strip_nl;  /* qwen35 <think> ... </think> */
    int sent_role;
    bbuf pending;            /* text held back (a stop string or </think> may start in it) */
    bbuf content, reasoning; /* non-streaming: the whole answer */
    cJSON *lp_pending;       /* logprob entries not yet sent (streaming) or all (not) */
    /* tool calls (serve_tools.h): read back where the request offers tools */
    vt_tool_syntax tool_syntax; /* NONE: the text is all content */
    cJSON *tools;            /* the request's tools, parsed (schema types of arguments) */
    int in_tool;             /* inside a call: its text gathers in tool_text */
    bbuf tool_text;
    vt_json_schema *schema;  /* response_format json_object / json_schema: the output's */
    vt_json_matcher *jm;     /* the answer so far against it (after any think block) */
    int32_t *call_ids;       /* tool_choice required / named: the call's opening, tokenized, */
    int64_t n_call_ids, call_done; /* forced once any think block is closed */
    cJSON *tool_calls;       /* the calls read so far: [{id, type, function: {name, arguments}}] */
    int n_tool_calls;
    cJSON *lp_c_tokens, *lp_c_lps, *lp_c_tops, *lp_c_offs; /* completion logprobs (non-streaming) */
    size_t text_off;
    int json_broken;         /* a cJSON allocation failed while formatting (serve_json.h):
                                nothing more is sent but an error */
    int finish;
    int stop_hit;            /* a stop string ended the text */
    /* output, under sched->mu */
    bbuf out;
    size_t out_read;
    int done;
    int http;                /* non-streaming: the status of out */
    atomic_int cancelled;
    pthread_cond_t cv;
    struct vt_serve_job *next; /* queue link */
};

typedef struct slot {
    vt_engine_seq *seq;
    vt_serve_job *job;
} slot;

struct vt_serve_sched {
    vt_engine *e;
    const vt_tokenizer *tok;
    int64_t n_vocab;
    uint32_t n_ctx, n_parallel, queue_max, chunk;
    uint64_t max_text;       /* prompt text bytes beyond which it cannot fit n_ctx tokens */
    char model_id[256];
    const char *family;      /* chat template family, NULL: none */
    unsigned chat_flags;
    const char *chat_template; /* params.chat_template: rendered instead of the family's */
    vt_tool_syntax tool_syntax; /* how the model writes tool calls (with chat_template) */
    vt_sampler_params defaults; /* params.defaults, for the fields in defaults_set */
    unsigned defaults_set;
    char *pieces;            /* every token's text (special 0), for the JSON mask; built at */
    int64_t *piece_off;      /* the first constrained request: [n_vocab + 1] offsets */
    float *masked;           /* [n_vocab]: the logits with the tokens the JSON refuses masked */
    int32_t *force_ids;      /* params.force_output tokenized (a test setting), or NULL */
    int64_t n_force;
    uint8_t *banned;         /* [n_vocab]: UNUSED and suppressed tokens */
    float *lp_scratch;       /* [n_vocab] */
    slot *slots;
    /* one round's evaluation: its sequences, their token counts, slots, tokens */
    vt_engine_seq **b_seq;
    int64_t *b_ntok;
    uint32_t *b_slot;
    int32_t *b_tok;          /* [n_batch] */
    uint32_t rr;             /* the slot a round starts from (fairness under a small n_batch) */
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;
    pthread_cond_t work;
    vt_serve_job *q_head, *q_tail;
    uint32_t q_len;
    int stopping, draining, stopped;
    uint64_t next_id;
    vt_serve_metrics m;      /* under mu */
};

/* CLOCK_MONOTONIC in seconds. */
SV_INTERNAL double sv_now_s(void);
/* Append n bytes to b, invalid UTF-8 replaced by U+FFFD; -1 when out of memory. */
SV_INTERNAL int sv_bb_put_utf8(bbuf *b, const char *s, size_t n);
/* Send what of j->pending can go (a stop string or </think> may still start
 * in it; at_end: all of it); nonzero when a stop string ended the text. */
SV_INTERNAL int sv_drain_pending(vt_serve_job *j, int at_end);
/* Record the logprob entry of token id under logits (request's top_logprobs). */
SV_INTERNAL void sv_add_logprobs(vt_serve_job *j, const float *logits, int32_t id);
/* Count a finished job in the metrics (under s->mu). */
SV_INTERNAL void sv_metrics_finish(vt_serve_sched *s, int finish);
/* End a job with an error: an SSE error event, or the error as the body. */
SV_INTERNAL void sv_finish_error(vt_serve_job *j, int http, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* serve_output_ollama.c: ollama's shape of a streamed piece (text, reasoning
 * or one call in OpenAI's form; finish: the last object, with the counts) and
 * of the whole answer. */
SV_INTERNAL cJSON *sv_ollama_chunk(vt_serve_job *j, const char *text, int reasoning,
                                   const cJSON *call, int finish);
SV_INTERNAL cJSON *sv_ollama_body(vt_serve_job *j);
/* End a job normally: the last chunk and [DONE], or the whole JSON body. */
SV_INTERNAL void sv_finish_ok(vt_serve_job *j);

#endif
