/*
 * serve_sched.c - vt serve's slots, queue and engine thread (serve_sched.h); a
 * job's output (chunks, JSON body, logprobs, finishing) is in serve_output.c.
 */

#include "serve_sched_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "error.h"
#include "expert_streamer.h"
#include "registry.h"
#include "sampler.h"
#include "serve_json.h"
#include "serve_metrics.h"
#include "tokenizer.h"

static void job_unref_locked(vt_serve_job *j)
{
    if (--j->refs > 0) return;
    vt_serve_request_free(&j->req);
    free(j->ids);
    vt_sampler_free(j->smp);
    vt_detok_stream_free(j->ds);
    free(j->pending.p);
    free(j->content.p);
    free(j->reasoning.p);
    free(j->out.p);
    cJSON_Delete(j->lp_pending);
    cJSON_Delete(j->tools);
    cJSON_Delete(j->tool_calls);
    vt_json_matcher_free(j->jm);
    free(j->call_ids);
    vt_json_schema_free(j->schema);
    free(j->tool_text.p);
    pthread_cond_destroy(&j->cv);
    free(j);
}

/* The slot is free again: its sequence emptied, its job's reference dropped. */
static void slot_release(vt_serve_sched *s, slot *sl)
{
    if (vt_engine_seq_reset(s->e, sl->seq) != VT_OK)
        vt_log(VT_LOG_ERROR, "vt serve: resetting a slot's sequence failed: %s", vt_last_error());
    pthread_mutex_lock(&s->mu);
    job_unref_locked(sl->job);
    sl->job = NULL;
    s->m.running--;
    pthread_mutex_unlock(&s->mu);
}

/* ------------------------------------------------------------------ one step */

/* Start generating: sampler, detokenizer (scheduler thread). 0 or -1. */
static int job_begin(vt_serve_sched *s, vt_serve_job *j)
{
    vt_sampler_params sp = {.temperature = j->req.temperature, .top_k = j->req.top_k,
                            .top_p = j->req.top_p, .min_p = j->req.min_p, .seed = j->req.seed};
    if (!j->req.have_seed) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        sp.seed = ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^ (uintptr_t)j;
    }
    if (vt_sampler_new(&sp, s->n_vocab, s->banned, &j->smp) != VT_OK) return -1;
    if (!(j->ds = vt_detok_stream_new(s->tok, 0))) {
        vt_set_error("out of memory for the detokenizer");
        return -1;
    }
    if (j->req.logprobs && !(j->lp_pending = cJSON_CreateArray())) {
        vt_set_error("out of memory for logprobs");
        return -1;
    }
    return 0;
}

/* Every token's text, once (the first constrained request): 0 or -1. */
static int json_tables(vt_serve_sched *s)
{
    if (s->pieces) return 0;
    int64_t total = 0;
    for (int64_t i = 0; i < s->n_vocab; i++) {
        int64_t k = vt_token_to_piece(s->tok, (int32_t)i, 0, NULL, 0);
        total += k > 0 ? k : 0;
    }
    s->piece_off = malloc((size_t)(s->n_vocab + 1) * sizeof *s->piece_off);
    s->masked = malloc((size_t)s->n_vocab * sizeof *s->masked);
    s->pieces = malloc((size_t)total + 1);
    if (!s->piece_off || !s->masked || !s->pieces) {
        free(s->pieces);
        s->pieces = NULL;
        vt_set_error("out of memory for the vocabulary's texts (JSON output)");
        return -1;
    }
    int64_t o = 0;
    for (int64_t i = 0; i < s->n_vocab; i++) {
        s->piece_off[i] = o;
        int64_t k = vt_token_to_piece(s->tok, (int32_t)i, 0, s->pieces + o, (size_t)(total - o));
        o += k > 0 ? k : 0;
    }
    s->piece_off[s->n_vocab] = o;
    return 0;
}

/* Whether token id keeps the JSON answer a prefix of a valid document: an
 * end-of-generation token once it is complete; a token with no text never. */
static int json_token_ok(vt_serve_sched *s, vt_serve_job *j, int32_t id)
{
    if (json_tables(s)) return 0;
    if (vt_tokenizer_is_eog(s->tok, id)) return vt_json_matcher_complete(j->jm);
    const int64_t n = s->piece_off[id + 1] - s->piece_off[id];
    return n > 0 && vt_json_matcher_accepts(j->jm, s->pieces + s->piece_off[id], (size_t)n);
}

/* The token of the longest start of text end[0..el) (the end of generation
 * when el is 0), or -1. */
static int32_t json_ending_token(vt_serve_sched *s, const char *end, size_t el)
{
    if (!el) return vt_tokenizer_eos(s->tok);
    int32_t best = -1;
    int64_t best_len = 0;
    for (int64_t i = 0; i < s->n_vocab; i++) {
        const int64_t k = s->piece_off[i + 1] - s->piece_off[i];
        if (k > best_len && k <= (int64_t)el && !s->banned[i] &&
            !memcmp(s->pieces + s->piece_off[i], end, (size_t)k)) {
            best = (int32_t)i;
            best_len = k;
        }
    }
    return best;
}

/* The token budget of a JSON answer (max_tokens, the context): id as drawn
 * while it leaves room for the shortest text that completes the document
 * afterwards (its bytes bound its tokens), else the first token of that text
 * now, so that the answer is whole JSON when the budget ends. */
static int32_t json_budget(vt_serve_sched *s, vt_serve_job *j, int64_t pos, int32_t id)
{
    int64_t left = (int64_t)s->n_ctx - pos;
    if (j->req.max_tokens >= 0 && j->req.max_tokens - j->n_gen < left) left = j->req.max_tokens - j->n_gen;
    char end[4096];
    const size_t el = vt_json_matcher_ending(j->jm, end, sizeof end);
    if (el >= sizeof end || left > (int64_t)el + 64 || json_tables(s)) return id; /* far off */
    if (left <= (int64_t)el + 1) {
        const int32_t c = json_ending_token(s, end, el);
        return c >= 0 ? c : id;
    }
    if (id < 0 || vt_tokenizer_is_eog(s->tok, id)) return id;
    vt_json_matcher *t = vt_json_matcher_dup(j->jm);
    char end2[4096];
    size_t el2 = sizeof end2;
    if (t && !vt_json_matcher_feed(t, s->pieces + s->piece_off[id],
                                   (size_t)(s->piece_off[id + 1] - s->piece_off[id])))
        el2 = vt_json_matcher_ending(t, end2, sizeof end2);
    vt_json_matcher_free(t);
    if (el2 + 1 <= (size_t)left - 1) return id;
    const int32_t c = json_ending_token(s, end, el);
    return c >= 0 ? c : id;
}

/* s->masked: logits with NaN for every token that would break the JSON (the
 * sampler never draws a NaN). */
static int json_mask(vt_serve_sched *s, vt_serve_job *j, const float *logits)
{
    if (json_tables(s)) return -1;
    for (int64_t i = 0; i < s->n_vocab; i++)
        s->masked[i] = json_token_ok(s, j, (int32_t)i) ? logits[i] : NAN;
    return 0;
}

/* Logits of the last evaluated position -> the next token. Returns 1 when
 * the job finished (j->finish set), 0 to go on, -1 on an error. */
static int on_logits(vt_serve_sched *s, slot *sl, const float *logits)
{
    vt_serve_job *j = sl->job;
    int64_t pos = vt_engine_seq_pos(s->e, sl->seq);
    int64_t bad = vt_sampler_bad_logits(logits, s->n_vocab);
    if (bad) {
        vt_set_error("the logits after position %lld hold %lld NaN or infinite values (a model or "
                     "backend fault)", (long long)pos - 1, (long long)bad);
        return -1;
    }
    int32_t id = vt_sampler_sample(j->smp, logits);
    if (j->call_done < j->n_call_ids && !j->in_think) {
        id = j->call_ids[j->call_done++]; /* tool_choice: the call's opening */
    } else if (j->jm && !j->in_think && id >= 0 && !json_token_ok(s, j, id)) {
        /* the draw would break the JSON: draw again among the tokens that keep it */
        if (json_mask(s, j, logits) != 0) return -1;
        id = vt_sampler_sample(j->smp, s->masked);
        if (id < 0 || !json_token_ok(s, j, id)) {
            vt_set_error("no token can continue the JSON answer after position %lld",
                         (long long)pos - 1);
            return -1;
        }
    }
    if (j->jm && !j->in_think) id = json_budget(s, j, pos, id); /* room left to close it */
    if (s->force_ids) /* the test setting: the given text, then the end of generation */
        id = j->n_gen < s->n_force ? s->force_ids[j->n_gen] : vt_tokenizer_eos(s->tok);
    if (id < 0) {
        vt_set_error("no token can be sampled after position %lld (every token banned)",
                     (long long)pos - 1);
        return -1;
    }
    double t = sv_now_s();
    pthread_mutex_lock(&s->mu);
    if (!j->t_last_token) vt_serve_hist_add(&s->m.ttft, t - j->t_arrival);
    else vt_serve_hist_add(&s->m.itl, t - j->t_last_token);
    int eog = !j->req.ignore_eos && vt_tokenizer_is_eog(s->tok, id);
    if (!eog) s->m.generated_tokens++;
    pthread_mutex_unlock(&s->mu);
    j->t_last_token = t;
    if (eog) {
        /* the end-of-generation token is neither text nor counted in usage */
        j->finish = FIN_STOP;
        return 1;
    }
    j->n_gen++;
    if (j->req.logprobs) sv_add_logprobs(j, logits, id);
    size_t n;
    const char *piece = vt_detok_stream_push(j->ds, id, &n);
    char marker[32];
    if (!n && j->tool_syntax) { /* a control token that is a tool-call marker is text here */
        int64_t k = vt_token_to_piece(s->tok, id, 1, marker, sizeof marker);
        if (k > 0 && k < (int64_t)sizeof marker && vt_tool_syntax_marker(j->tool_syntax, marker, (size_t)k)) {
            piece = marker;
            n = (size_t)k;
        }
    }
    if (j->jm && !j->in_think && !json_tables(s)) vt_json_matcher_feed(j->jm, s->pieces + s->piece_off[id],
                                                    (size_t)(s->piece_off[id + 1] - s->piece_off[id]));
    if (sv_bb_put_utf8(&j->pending, piece, n) != 0) {
        vt_set_error("out of memory for the output text");
        return -1;
    }
    if (sv_drain_pending(j, 0)) {
        j->finish = FIN_STOP;
        j->stop_hit = 1;
        return 1;
    }
    if (j->finish == FIN_ERROR) {
        vt_set_error("out of memory for the output text");
        return -1;
    }
    if (j->json_broken) {
        vt_set_error("out of memory while formatting the response");
        return -1;
    }
    if (j->req.max_tokens >= 0 && j->n_gen >= j->req.max_tokens) {
        j->finish = FIN_LENGTH;
        return 1;
    }
    if (pos >= (int64_t)s->n_ctx) {
        j->finish = FIN_LENGTH;
        return 1;
    }
    j->last = id;
    return 0;
}

/* Flush the detokenizer and the held-back text at a normal finish; after a
 * stop string nothing more is sent. */
static void flush_text(vt_serve_job *j)
{
    if (j->stop_hit) return;
    size_t n;
    const char *rest = vt_detok_stream_flush(j->ds, &n);
    if (sv_bb_put_utf8(&j->pending, rest, n) != 0) return;
    if (sv_drain_pending(j, 0)) { /* a stop string completed by the last bytes */
        j->finish = FIN_STOP;
        j->stop_hit = 1;
        return;
    }
    sv_drain_pending(j, 1);
}

/* The slot's job after its logits (r from on_logits): go on, or finish and
 * free the slot. */
static void slot_after(vt_serve_sched *s, slot *sl, int r)
{
    vt_serve_job *j = sl->job;
    if (r == 0) return;
    if (r < 0) {
        sv_finish_error(j, 500, "%s", vt_last_error());
    } else {
        flush_text(j);
        sv_finish_ok(j);
    }
    slot_release(s, sl);
}

/*
 * One round: every running slot advances in ONE engine evaluation: a slot
 * that decodes gives its next token, a slot still in its prompt a chunk of
 * it (at most `chunk` tokens while others run, so that their tokens keep
 * flowing), at most n_batch tokens in all (slots left out go first next
 * round). The engine runs them in one forward pass when the model has
 * forward_multi, else one sequence after another.
 */
static void sched_round(vt_serve_sched *s)
{
    uint32_t n_run = 0;
    for (uint32_t i = 0; i < s->n_parallel; i++) {
        slot *sl = &s->slots[i];
        if (!sl->job) continue;
        if (atomic_load(&sl->job->cancelled)) {
            pthread_mutex_lock(&s->mu);
            sl->job->done = 1;
            sv_metrics_finish(s, FIN_CANCELLED);
            pthread_cond_broadcast(&sl->job->cv);
            pthread_mutex_unlock(&s->mu);
            slot_release(s, sl);
            continue;
        }
        n_run++;
    }
    if (!n_run) return;
    const int64_t budget = vt_engine_n_batch(s->e);
    int64_t T = 0;
    uint32_t n = 0;
    /* decoding slots first (one token each), from where the last round stopped */
    for (uint32_t k = 0; k < s->n_parallel && T < budget; k++) {
        uint32_t i = (s->rr + k) % s->n_parallel;
        vt_serve_job *j = s->slots[i].job;
        if (!j || j->n_eval < j->n_ids) continue;
        s->b_seq[n] = s->slots[i].seq;
        s->b_ntok[n] = 1;
        s->b_slot[n] = i;
        s->b_tok[T++] = j->last;
        n++;
    }
    for (uint32_t k = 0; k < s->n_parallel && T < budget; k++) {
        uint32_t i = (s->rr + k) % s->n_parallel;
        vt_serve_job *j = s->slots[i].job;
        if (!j || j->n_eval >= j->n_ids) continue;
        int64_t take = j->n_ids - j->n_eval;
        if (n_run > 1 && take > s->chunk) take = s->chunk;
        if (take > budget - T) take = budget - T;
        s->b_seq[n] = s->slots[i].seq;
        s->b_ntok[n] = take;
        s->b_slot[n] = i;
        memcpy(s->b_tok + T, j->ids + j->n_eval, (size_t)take * sizeof *s->b_tok);
        T += take;
        n++;
    }
    s->rr = (s->rr + 1) % s->n_parallel;
    const float *logits = NULL;
    vt_status st = vt_engine_seqs_eval(s->e, s->b_seq, s->b_ntok, n, s->b_tok, &logits);
    for (uint32_t k = 0; k < n; k++) {
        slot *sl = &s->slots[s->b_slot[k]];
        vt_serve_job *j = sl->job;
        if (st != VT_OK) {
            slot_after(s, sl, -1);
            continue;
        }
        if (j->n_eval < j->n_ids) {
            j->n_eval += s->b_ntok[k];
            pthread_mutex_lock(&s->mu);
            s->m.prompt_tokens += (uint64_t)s->b_ntok[k];
            pthread_mutex_unlock(&s->mu);
            if (j->n_eval < j->n_ids) continue;
        }
        slot_after(s, sl, on_logits(s, sl, logits + (size_t)k * (size_t)s->n_vocab));
    }
}

/* Copy the streamer's and the slots' figures into the metrics (scheduler thread). */
static void metrics_snapshot(vt_serve_sched *s)
{
    uint64_t used = 0;
    for (uint32_t i = 0; i < s->n_parallel; i++)
        used += (uint64_t)vt_engine_seq_pos(s->e, s->slots[i].seq);
    const vt_expert_streamer *es = vt_engine_streamer(s->e);
    vt_expert_stats dev = {0};
    vt_streamer_host_stats host = {0};
    vt_streamer_prefetch_stats pf = {0};
    if (es) {
        vt_streamer_stats(es, -1, &dev);
        if (vt_streamer_n_host_slots(es)) vt_streamer_host_stats_get(es, -1, &host);
        if (vt_streamer_prefetch_on(es)) vt_streamer_prefetch_stats_get(es, &pf);
    }
    pthread_mutex_lock(&s->mu);
    s->m.kv_tokens_used = used;
    s->m.fallbacks = vt_host_n_fallbacks();
    if (es) {
        s->m.streamed = 1;
        s->m.dev = dev;
        s->m.dev_slots = vt_streamer_n_slots(es);
        s->m.dev_resident = vt_streamer_n_resident(es);
        s->m.host_tier = vt_streamer_n_host_slots(es) > 0;
        s->m.host_slots = vt_streamer_n_host_slots(es);
        s->m.host_resident = vt_streamer_n_host_resident(es);
        s->m.host = host;
        s->m.prefetch_on = vt_streamer_prefetch_on(es);
        s->m.prefetch = pf;
    }
    pthread_mutex_unlock(&s->mu);
}

static void *sched_main(void *arg)
{
    vt_serve_sched *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        for (;;) {
            if (s->stopping) break;
            int any = s->q_len > 0;
            for (uint32_t i = 0; i < s->n_parallel && !any; i++) any = s->slots[i].job != NULL;
            if (any) break;
            pthread_cond_wait(&s->work, &s->mu);
        }
        if (s->stopping) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        /* admit queued requests to free slots, first come first served */
        vt_serve_job *admit[256];
        uint32_t n_admit = 0;
        for (uint32_t i = 0; i < s->n_parallel && s->q_head; i++) {
            if (s->slots[i].job) continue;
            vt_serve_job *j = s->q_head;
            s->q_head = j->next;
            if (!s->q_head) s->q_tail = NULL;
            s->q_len--;
            s->m.waiting = s->q_len;
            j->next = NULL;
            s->slots[i].job = j;
            s->m.running++;
            if (n_admit < 256) admit[n_admit++] = j;
        }
        pthread_mutex_unlock(&s->mu);
        for (uint32_t k = 0; k < n_admit; k++) {
            if (job_begin(s, admit[k]) != 0) {
                for (uint32_t i = 0; i < s->n_parallel; i++)
                    if (s->slots[i].job == admit[k]) {
                        sv_finish_error(admit[k], 500, "%s", vt_last_error());
                        slot_release(s, &s->slots[i]);
                    }
            }
        }
        sched_round(s);
        metrics_snapshot(s);
    }
    return NULL;
}

/* ------------------------------------------------------------------ public */

vt_serve_sched *vt_serve_sched_start(const vt_serve_sched_params *p)
{
    vt_serve_json_init();
    vt_serve_sched *s = calloc(1, sizeof *s);
    if (!s) {
        vt_set_error("out of memory for the scheduler");
        return NULL;
    }
    s->e = p->engine;
    s->tok = vt_engine_tokenizer(p->engine);
    vt_model_info info;
    vt_engine_model_info(p->engine, &info);
    s->n_vocab = info.n_vocab;
    s->n_ctx = info.n_ctx;
    s->n_parallel = p->n_parallel ? p->n_parallel : 1;
    s->queue_max = p->queue_max;
    s->chunk = p->chunk ? p->chunk : 128;
    snprintf(s->model_id, sizeof s->model_id, "%s", p->model_id ? p->model_id : "vt");
    s->family = vt_chat_family_for_arch(vt_engine_arch(p->engine));
    s->chat_template = p->chat_template;
    if (s->family) s->chat_flags = vt_chat_flags_for_template(s->family, vt_tokenizer_chat_template(s->tok));
    s->tool_syntax = vt_tool_syntax_for(s->family, s->chat_template);
    if (p->defaults) {
        s->defaults = *p->defaults;
        s->defaults_set = p->defaults_set;
    }
    s->m.n_parallel = s->n_parallel;
    s->m.kv_tokens_total = (uint64_t)s->n_parallel * s->n_ctx;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    s->banned = calloc((size_t)s->n_vocab, 1);
    s->slots = calloc(s->n_parallel, sizeof *s->slots);
    s->b_seq = calloc(s->n_parallel, sizeof *s->b_seq);
    s->b_ntok = calloc(s->n_parallel, sizeof *s->b_ntok);
    s->b_slot = calloc(s->n_parallel, sizeof *s->b_slot);
    s->b_tok = calloc(vt_engine_n_batch(p->engine), sizeof *s->b_tok);
    if (!s->banned || !s->slots || !s->b_seq || !s->b_ntok || !s->b_slot || !s->b_tok) {
        vt_set_error("out of memory for the scheduler's %u slots", s->n_parallel);
        goto fail;
    }
    /* A token stands for at most max_piece bytes of normalized text, and NFC
     * shrinks text at most 3x (Hangul jamo L V T, 9 bytes, compose to one
     * 3-byte syllable): a prompt of more than 3 · max_piece · n_ctx bytes
     * needs more than n_ctx tokens and is refused before any work on it. */
    int64_t max_piece = 1;
    for (int64_t i = 0; i < s->n_vocab; i++) {
        int64_t k = vt_token_to_piece(s->tok, (int32_t)i, 1, NULL, 0);
        if (k > max_piece) max_piece = k;
    }
    s->max_text = 3 * (uint64_t)max_piece * s->n_ctx;
    int64_t n_banned = 0;
    for (int64_t i = 0; i < s->n_vocab; i++)
        n_banned += s->banned[i] = vt_tokenizer_token_type(s->tok, (int32_t)i) == VT_TOKEN_UNUSED ||
                                   vt_tokenizer_is_suppressed(s->tok, (int32_t)i);
    if (n_banned == s->n_vocab) {
        vt_set_error("every one of the %lld tokens is UNUSED or suppressed: nothing can be sampled",
                     (long long)s->n_vocab);
        goto fail;
    }
    if (p->force_output) {
        if (vt_tokenize(s->tok, p->force_output, strlen(p->force_output), 0, 1, &s->force_ids,
                        &s->n_force) != VT_OK)
            goto fail;
        vt_log(VT_LOG_WARN, "vt serve: every answer is the forced text of the test setting "
               "(%lld tokens), not the model's", (long long)s->n_force);
    }
    for (uint32_t i = 0; i < s->n_parallel; i++)
        if (vt_engine_seq_new(s->e, &s->slots[i].seq) != VT_OK) {
            vt_error_prefix("slot %u of %u", i, s->n_parallel);
            goto fail;
        }
    if (pthread_create(&s->thread, NULL, sched_main, s) != 0) {
        vt_set_error("cannot start the scheduler thread");
        goto fail;
    }
    s->thread_started = 1;
    return s;
fail:
    vt_serve_sched_free(s);
    return NULL;
}

void vt_serve_sched_drain(vt_serve_sched *s)
{
    pthread_mutex_lock(&s->mu);
    s->draining = 1;
    pthread_mutex_unlock(&s->mu);
}

void vt_serve_sched_stop(vt_serve_sched *s)
{
    if (!s || s->stopped) return;
    s->stopped = 1;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    s->draining = 1;
    pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->mu);
    if (s->thread_started) pthread_join(s->thread, NULL);
    s->thread_started = 0;
    /* every request still queued or running ends with an error */
    for (uint32_t i = 0; s->slots && i < s->n_parallel; i++)
        if (s->slots[i].job) {
            sv_finish_error(s->slots[i].job, 503, "the server is shutting down");
            slot_release(s, &s->slots[i]);
        }
    for (;;) {
        pthread_mutex_lock(&s->mu);
        vt_serve_job *j = s->q_head;
        if (j) {
            s->q_head = j->next;
            s->q_len--;
        }
        pthread_mutex_unlock(&s->mu);
        if (!j) break;
        sv_finish_error(j, 503, "the server is shutting down");
        pthread_mutex_lock(&s->mu);
        job_unref_locked(j);
        pthread_mutex_unlock(&s->mu);
    }
}

void vt_serve_sched_free(vt_serve_sched *s)
{
    if (!s) return;
    if (!s->stopped) vt_serve_sched_stop(s);
    for (uint32_t i = 0; s->slots && i < s->n_parallel; i++) vt_engine_seq_free(s->e, s->slots[i].seq);
    free(s->slots);
    free(s->b_seq);
    free(s->b_ntok);
    free(s->b_slot);
    free(s->b_tok);
    free(s->banned);
    free(s->force_ids);
    free(s->pieces);
    free(s->piece_off);
    free(s->masked);
    pthread_cond_destroy(&s->work);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* A chat request's messages rendered with the chat template (the Jinja
 * one, else the family's built-in one): *text (malloc-ed) and the spans of
 * it that came from the request. 0, or -1 with err filled. */
static int render_chat(vt_serve_sched *s, const vt_serve_request *req, char **text,
                       vt_text_span **plain, size_t *n_plain, vt_serve_error *err)
{
    if (!s->family && !s->chat_template) {
        vt_serve_error_set(err, 400, "messages", "the model's architecture '%s' has no chat "
                           "template in vt; use /v1/completions", vt_engine_arch(s->e));
        return -1;
    }
    if (!s->chat_template && (req->tools || req->has_tool_calls)) {
        vt_serve_error_set(err, 400, req->tools ? "tools" : "messages",
                           "tools and tool calls need the model's own chat template, and "
                           "this server renders with vt's built-in one (start it with "
                           "--jinja, or --chat-template-file FILE)");
        return -1;
    }
    vt_chat_msg *msgs = calloc(req->n_msgs, sizeof *msgs);
    if (!msgs) {
        vt_serve_error_set(err, 500, NULL, "out of memory for the messages");
        return -1;
    }
    for (size_t i = 0; i < req->n_msgs; i++) {
        const char *role = req->msgs[i].role;
        /* OpenAI's "developer" is the system prompt; qwen35's template has no such role */
        if (!s->chat_template && !strcmp(role, "developer") && !strcmp(s->family, "qwen35"))
            role = "system";
        msgs[i] = (vt_chat_msg){role, req->msgs[i].content};
    }
    unsigned flags = s->chat_flags;
    if (req->thinking == 0) flags |= VT_CHAT_NO_THINKING;
    if (req->thinking == 1 && s->family && !strcmp(s->family, "gemma4")) flags |= VT_CHAT_THINKING;
    vt_status st;
    /* OpenAI's "developer" is the system prompt, for a template that knows no such role */
    char *dev_msgs = NULL;
    int has_dev = 0;
    for (size_t i = 0; i < req->n_msgs; i++) has_dev |= !strcmp(req->msgs[i].role, "developer");
    if (s->chat_template && has_dev && !strstr(s->chat_template, "developer")) {
        cJSON *a = cJSON_Parse(req->tmpl_messages), *m;
        cJSON_ArrayForEach(m, a) {
            const char *r = cJSON_GetStringValue(cJSON_GetObjectItem(m, "role"));
            if (r && !strcmp(r, "developer"))
                cJSON_ReplaceItemInObject(m, "role", cJSON_CreateString("system"));
        }
        dev_msgs = a ? cJSON_PrintUnformatted(a) : NULL;
        cJSON_Delete(a);
        if (!dev_msgs) {
            free(msgs);
            vt_serve_error_set(err, 500, NULL, "out of memory for the messages");
            return -1;
        }
    }
    if (s->chat_template) /* the Jinja template itself; thinking as the request asks */
        st = vt_chat_render_template_json(
            s->tok, s->chat_template, dev_msgs ? dev_msgs : req->tmpl_messages,
            req->tool_choice == VT_SERVE_TOOLS_NONE ? NULL : req->tools,
            req->template_kwargs, 1,
            req->template_kwargs ? 0 /* enable_thinking is among them */
            : req->thinking == 0 ? VT_CHAT_NO_THINKING
            : req->thinking == 1 ? VT_CHAT_THINKING : 0,
            text, plain, n_plain);
    else
        st = vt_chat_render_spans(s->family, msgs, req->n_msgs, 1, flags, text, plain, n_plain);
    free(msgs);
    free(dev_msgs);
    if (st != VT_OK) {
        vt_serve_error_set(err, st == VT_ERR_OUT_OF_MEMORY ? 500 : 400, "messages", "%s",
                           vt_last_error());
        return -1;
    }
    return 0;
}

int vt_serve_apply_template(vt_serve_sched *s, const vt_serve_request *req, char **prompt,
                            vt_serve_error *err)
{
    vt_text_span *plain = NULL;
    size_t n_plain = 0;
    *prompt = NULL;
    if (render_chat(s, req, prompt, &plain, &n_plain, err)) return -1;
    free(plain);
    return 0;
}

int vt_serve_submit(vt_serve_sched *s, vt_serve_request *req, vt_serve_job **out,
                    vt_serve_error *err)
{
    *out = NULL;
    vt_serve_job *j = calloc(1, sizeof *j);
    if (!j) {
        vt_serve_error_set(err, 500, NULL, "out of memory for the request");
        return -1;
    }
    j->sched = s;
    j->req = *req;
    memset(req, 0, sizeof *req);
    /* the server's sampling defaults, for what the request left unset */
    const unsigned dflt = s->defaults_set & ~j->req.given;
    if (dflt & VT_SERVE_GIVEN_TEMP) j->req.temperature = s->defaults.temperature;
    if (dflt & VT_SERVE_GIVEN_TOP_P) j->req.top_p = s->defaults.top_p;
    if (dflt & VT_SERVE_GIVEN_TOP_K) j->req.top_k = s->defaults.top_k;
    if (dflt & VT_SERVE_GIVEN_MIN_P) j->req.min_p = s->defaults.min_p;
    j->t_arrival = sv_now_s();
    j->created = (long)time(NULL);
    j->refs = 2;
    j->last = -1;
    pthread_cond_init(&j->cv, NULL);
    char *text = NULL;
    vt_text_span *plain = NULL;
    size_t n_plain = 0;
    /* the prompt's tokens */
    if (j->req.kind == VT_SERVE_CHAT) {
        if (render_chat(s, &j->req, &text, &plain, &n_plain, err)) goto fail;
        if (strlen(text) > s->max_text) {
            vt_serve_error_set(err, 400, "messages", "the messages are %zu bytes of text: more "
                               "than the context's %u tokens can hold (start the server with a "
                               "larger --ctx)", strlen(text), s->n_ctx);
            goto fail;
        }
        /* the messages' text stays text: control tokens spelled in it are not parsed */
        if (vt_tokenize_plain(s->tok, text, strlen(text), 1, plain, n_plain, &j->ids, &j->n_ids) != VT_OK) {
            vt_serve_error_set(err, 400, "messages", "%s", vt_last_error());
            goto fail;
        }
        /* qwen35's generation prompt opens the think block */
        size_t tl = strlen(text);
        if (tl >= 8 && !strcmp(text + tl - 8, "<think>\n") &&
            (s->chat_template || !strcmp(s->family, "qwen35")))
            j->in_think = 1;
        /* the calls the model writes are read back when the request offers tools */
        if (j->req.json) { /* the answer constrained to JSON (after any think block) */
            cJSON *sc = j->req.json_schema ? cJSON_Parse(j->req.json_schema) : NULL;
            char why[256];
            if (j->req.json_schema && !sc) {
                vt_serve_error_set(err, 500, NULL, "out of memory for the response format");
                goto fail;
            }
            j->schema = vt_json_schema_compile(sc, why, sizeof why);
            cJSON_Delete(sc);
            if (!j->schema || !(j->jm = vt_json_matcher_new(j->schema))) {
                vt_serve_error_set(err, j->schema ? 500 : 400, "response_format",
                                   "response_format: %s", j->schema ? "out of memory" : why);
                goto fail;
            }
            char end[4096];
            const size_t el = vt_json_matcher_ending(j->jm, end, sizeof end);
            if (el >= sizeof end || (j->req.max_tokens >= 0 && j->req.max_tokens < (int64_t)el)) {
                vt_serve_error_set(err, 400, "response_format", el >= sizeof end
                                   ? "response_format: the shortest document the schema allows is "
                                     "over 4 KiB"
                                   : "'max_tokens' %lld cannot hold the shortest document the schema "
                                     "allows (%zu bytes)", (long long)j->req.max_tokens, el);
                goto fail;
            }
        }
        if (j->req.tools && j->req.tool_choice != VT_SERVE_TOOLS_NONE && s->tool_syntax) {
            j->tool_syntax = s->tool_syntax;
            if (!(j->tools = cJSON_Parse(j->req.tools))) {
                vt_serve_error_set(err, 500, NULL, "out of memory for the request's tools");
                goto fail;
            }
        }
        if (j->req.tool_choice >= VT_SERVE_TOOLS_REQUIRED) { /* the answer opens a call */
            if (!j->tool_syntax) {
                vt_serve_error_set(err, 400, "tool_choice", "'tool_choice' forces a call, and this "
                                   "model's chat template writes calls in no syntax vt reads");
                goto fail;
            }
            char open[320];
            if (j->tool_syntax == VT_TOOL_SYNTAX_QWEN)
                snprintf(open, sizeof open, "<tool_call>\n<function=%s%s",
                         j->req.tool_name ? j->req.tool_name : "", j->req.tool_name ? ">\n" : "");
            else
                snprintf(open, sizeof open, "<|tool_call>call:%s%s", j->req.tool_name ? j->req.tool_name : "",
                         j->req.tool_name ? "{" : "");
            if (vt_tokenize(s->tok, open, strlen(open), 0, 1, &j->call_ids, &j->n_call_ids) != VT_OK) {
                vt_serve_error_set(err, 500, NULL, "%s", vt_last_error());
                goto fail;
            }
        }
    } else if (j->req.prompt) {
        if (strlen(j->req.prompt) > s->max_text) {
            vt_serve_error_set(err, 400, "prompt", "the prompt is %zu bytes of text: more than the "
                               "context's %u tokens can hold (start the server with a larger "
                               "--ctx)", strlen(j->req.prompt), s->n_ctx);
            goto fail;
        }
        if (vt_tokenize(s->tok, j->req.prompt, strlen(j->req.prompt), 1, 0, &j->ids, &j->n_ids) != VT_OK) {
            vt_serve_error_set(err, 400, "prompt", "%s", vt_last_error());
            goto fail;
        }
    } else {
        for (size_t i = 0; i < j->req.n_prompt_ids; i++)
            if (j->req.prompt_ids[i] >= s->n_vocab) {
                vt_serve_error_set(err, 400, "prompt", "'prompt[%zu]' = %d is not a token id: ids "
                                   "are in [0, %lld)", i, j->req.prompt_ids[i], (long long)s->n_vocab);
                goto fail;
            }
        j->ids = j->req.prompt_ids;
        j->n_ids = (int64_t)j->req.n_prompt_ids;
        j->req.prompt_ids = NULL;
    }
    free(text);
    text = NULL;
    free(plain);
    plain = NULL;
    if (j->n_ids == 0) {
        vt_serve_error_set(err, 400, j->req.kind == VT_SERVE_CHAT ? "messages" : "prompt",
                           "the prompt tokenizes to nothing");
        goto fail;
    }
    if (j->n_ids > (int64_t)s->n_ctx) {
        vt_serve_error_set(err, 400, j->req.kind == VT_SERVE_CHAT ? "messages" : "prompt",
                           "the prompt has %lld tokens but the context holds %u: %lld tokens too "
                           "many (start the server with a larger --ctx)", (long long)j->n_ids,
                           s->n_ctx, (long long)(j->n_ids - s->n_ctx));
        goto fail;
    }
    pthread_mutex_lock(&s->mu);
    uint32_t free_slots = 0;
    for (uint32_t i = 0; i < s->n_parallel; i++) free_slots += s->slots[i].job == NULL;
    if (s->draining || (s->q_len >= s->queue_max + free_slots)) {
        s->m.rejected++;
        pthread_mutex_unlock(&s->mu);
        if (s->draining) vt_serve_error_set(err, 503, NULL, "the server is shutting down");
        else vt_serve_error_set(err, 503, NULL, "the server is busy: %u requests running and %u "
                                "queued (--queue %u); try again later", s->n_parallel, s->q_len,
                                s->queue_max);
        goto fail;
    }
    snprintf(j->id, sizeof j->id, "%s-%llu", j->req.kind == VT_SERVE_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)++s->next_id);
    if (s->q_tail) s->q_tail->next = j;
    else s->q_head = j;
    s->q_tail = j;
    s->q_len++;
    s->m.waiting = s->q_len;
    pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->mu);
    *out = j;
    return 0;
fail:
    free(text);
    free(plain);
    j->refs = 1;
    pthread_mutex_lock(&s->mu);
    job_unref_locked(j);
    pthread_mutex_unlock(&s->mu);
    return -1;
}

long vt_serve_job_read(vt_serve_job *j, char *buf, size_t cap, int timeout_ms, int *http)
{
    vt_serve_sched *s = j->sched;
    pthread_mutex_lock(&s->mu);
    if (j->out_read == j->out.n && !j->done) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += timeout_ms / 1000;
        ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        while (j->out_read == j->out.n && !j->done)
            if (pthread_cond_timedwait(&j->cv, &s->mu, &ts) == ETIMEDOUT) break;
    }
    long r;
    if (http) *http = j->done ? (j->http ? j->http : 200) : 0;
    if (!j->req.stream && !j->done) {
        r = 0; /* the body comes at once at the end */
    } else if (j->out_read < j->out.n) {
        size_t n = j->out.n - j->out_read < cap ? j->out.n - j->out_read : cap;
        memcpy(buf, j->out.p + j->out_read, n);
        j->out_read += n;
        if (j->out_read == j->out.n) j->out_read = j->out.n = 0; /* all read: reuse the buffer */
        r = (long)n;
    } else {
        r = j->done ? -1 : 0;
    }
    pthread_mutex_unlock(&s->mu);
    return r;
}

int vt_serve_job_streams(const vt_serve_job *j) { return j->req.stream; }

void vt_serve_job_cancel(vt_serve_job *j)
{
    atomic_store(&j->cancelled, 1);
    vt_serve_sched *s = j->sched;
    pthread_mutex_lock(&s->mu);
    /* still queued: out of the queue now */
    vt_serve_job **pp = &s->q_head, *prev = NULL;
    while (*pp && *pp != j) prev = *pp, pp = &(*pp)->next;
    if (*pp == j) {
        *pp = j->next;
        if (s->q_tail == j) s->q_tail = prev;
        s->q_len--;
        s->m.waiting = s->q_len;
        s->m.cancelled++;
        j->done = 1;
        job_unref_locked(j); /* the scheduler's reference */
    }
    pthread_mutex_unlock(&s->mu);
}

void vt_serve_job_release(vt_serve_job *j)
{
    vt_serve_sched *s = j->sched;
    pthread_mutex_lock(&s->mu);
    job_unref_locked(j);
    pthread_mutex_unlock(&s->mu);
}

const vt_tokenizer *vt_serve_tokenizer(const vt_serve_sched *s) { return s->tok; }
int64_t vt_serve_n_vocab(const vt_serve_sched *s) { return s->n_vocab; }
uint32_t vt_serve_n_ctx(const vt_serve_sched *s) { return s->n_ctx; }
const char *vt_serve_model_id(const vt_serve_sched *s) { return s->model_id; }

cJSON *vt_serve_props_json(const vt_serve_sched *s)
{
    cJSON *o = cJSON_CreateObject(), *d = cJSON_AddObjectToObject(o, "default_generation_settings");
    cJSON_AddNumberToObject(d, "n_ctx", s->n_ctx);
    cJSON_AddNumberToObject(o, "total_slots", s->n_parallel);
    cJSON_AddStringToObject(o, "model_alias", s->model_id);
    /* the template chats are rendered with: the Jinja one, else the GGUF's text (the
     * family's built-in renderer stands in for it: --no-jinja) */
    const char *t = s->chat_template ? s->chat_template : vt_tokenizer_chat_template(s->tok);
    cJSON_AddStringToObject(o, "chat_template", t ? t : "");
    cJSON_AddStringToObject(o, "chat_template_renderer", s->chat_template ? "jinja" : "built-in");
    char bos[128] = "", eos[128] = "";
    int64_t k = vt_tokenizer_bos(s->tok) >= 0 ? vt_token_to_piece(s->tok, vt_tokenizer_bos(s->tok), 1, bos, sizeof bos - 1) : 0;
    bos[k > 0 && k < (int64_t)sizeof bos ? k : 0] = 0;
    k = vt_tokenizer_eos(s->tok) >= 0 ? vt_token_to_piece(s->tok, vt_tokenizer_eos(s->tok), 1, eos, sizeof eos - 1) : 0;
    eos[k > 0 && k < (int64_t)sizeof eos ? k : 0] = 0;
    cJSON_AddStringToObject(o, "bos_token", bos);
    cJSON_AddStringToObject(o, "eos_token", eos);
    return o;
}

uint32_t vt_serve_busy(vt_serve_sched *s)
{
    pthread_mutex_lock(&s->mu);
    uint32_t n = s->m.running + s->q_len;
    pthread_mutex_unlock(&s->mu);
    return n;
}

char *vt_serve_metrics_text(vt_serve_sched *s)
{
    vt_serve_metrics copy;
    pthread_mutex_lock(&s->mu);
    copy = s->m;
    pthread_mutex_unlock(&s->mu);
    return vt_serve_metrics_render(&copy, s->model_id);
}
