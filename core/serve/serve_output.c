/*
 * serve_output.c - vt serve's output side of a job (serve_sched_internal.h):
 * generated text held back while a stop string or </think> may start in it,
 * then sent as OpenAI SSE chunks or gathered into one JSON body, logprobs,
 * and a job's end (an error, or the last chunk / the whole answer).
 */
#include "serve_sched_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "error.h"
#include "serve_json.h"

double sv_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int bb_put(bbuf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) return -1;
        b->p = q;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

/* Append text to b with every byte that is not part of valid UTF-8 replaced
 * by U+FFFD (JSON text must be UTF-8; a model can emit a stray byte token, and
 * the detokenizer passes bytes that can never complete a character as-is). */
int sv_bb_put_utf8(bbuf *b, const char *s, size_t n)
{
    while (n) {
        int64_t bad = vt_serve_utf8_invalid_at(s, n);
        size_t good = bad < 0 ? n : (size_t)bad;
        if (bb_put(b, s, good) != 0) return -1;
        if (bad < 0) return 0;
        if (bb_put(b, "\xEF\xBF\xBD", 3) != 0) return -1;
        s += good + 1;
        n -= good + 1;
    }
    return 0;
}

/* ------------------------------------------------------------------ job output */

/* Append bytes to the job's output and wake its reader (sched->mu held). */
static void out_locked(vt_serve_job *j, const char *s, size_t n)
{
    if (bb_put(&j->out, s, n) != 0) {
        /* out of memory for the output: end the job; the reader sees what is there */
        j->done = 1;
        if (!j->http) j->http = 500;
    }
    pthread_cond_broadcast(&j->cv);
}

/* cJSON_AddItemTo{Array,Object} that frees the item when it cannot be added
 * (a NULL parent or key after a failed allocation), so nothing leaks. */
static int arr_add(cJSON *arr, cJSON *item)
{
    if (cJSON_AddItemToArray(arr, item)) return 1;
    cJSON_Delete(item);
    return 0;
}

static void obj_add(cJSON *obj, const char *key, cJSON *item)
{
    if (!cJSON_AddItemToObject(obj, key, item)) cJSON_Delete(item);
}

/* One event of a streamed answer, framed for its API: "data: TEXT" and a
 * blank line (OpenAI's SSE), or TEXT and a newline (ollama's NDJSON);
 * sched->mu held. */
static void frame_locked(vt_serve_job *j, const char *text)
{
    const int sse = j->req.proto == VT_SERVE_OPENAI;
    if (sse) out_locked(j, "data: ", 6);
    out_locked(j, text, strlen(text));
    out_locked(j, "\n\n", sse ? 2 : 1);
}

/* One SSE event of obj, built since `mark` (vt_serve_json_failures): an
 * object missing a member (an allocation failed) or one that cannot be
 * printed is not sent; the job is marked broken and its caller ends it with
 * an error event (on_logits, finish_ok). */
static void out_event(vt_serve_job *j, cJSON *obj, unsigned long mark)
{
    if (vt_serve_json_failures() != mark) j->json_broken = 1;
    if (j->json_broken || !obj) {
        j->json_broken = 1;
        return;
    }
    char *s = cJSON_PrintUnformatted(obj);
    if (!s || vt_serve_json_failures() != mark) {
        j->json_broken = 1;
        free(s);
        return;
    }
    pthread_mutex_lock(&j->sched->mu);
    frame_locked(j, s);
    pthread_mutex_unlock(&j->sched->mu);
    free(s);
}

/* One alternative into a legacy completions top_logprobs object {token: logprob}:
 * two byte tokens can both read U+FFFD; the first (the likelier) keeps the key. */
static void add_top(cJSON *top, const cJSON *x)
{
    const char *tok = cJSON_GetStringValue(cJSON_GetObjectItem(x, "token"));
    const cJSON *lp = cJSON_GetObjectItem(x, "logprob");
    if (!top || !tok || !cJSON_IsNumber(lp) || cJSON_GetObjectItemCaseSensitive(top, tok)) return;
    cJSON_AddNumberToObject(top, tok, lp->valuedouble);
}

/* The legacy completions' logprobs of c: parallel arrays of the entries. */
static void legacy_logprobs(cJSON *c, const cJSON *entries)
{
    cJSON *lp = cJSON_AddObjectToObject(c, "logprobs");
    cJSON *toks = cJSON_AddArrayToObject(lp, "tokens"), *lps = cJSON_AddArrayToObject(lp, "token_logprobs"),
          *tops = cJSON_AddArrayToObject(lp, "top_logprobs"), *offs = cJSON_AddArrayToObject(lp, "text_offset");
    const cJSON *e;
    cJSON_ArrayForEach(e, entries) {
        arr_add(toks, cJSON_Duplicate(cJSON_GetObjectItem(e, "token"), 1));
        arr_add(lps, cJSON_Duplicate(cJSON_GetObjectItem(e, "logprob"), 1));
        cJSON *top = cJSON_CreateObject(), *x;
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(e, "top_logprobs")) add_top(top, x);
        arr_add(tops, top);
        arr_add(offs, cJSON_Duplicate(cJSON_GetObjectItem(e, "text_offset"), 1));
    }
}

/* The members an answer and each of its chunks start with; whole: the
 * answer's "object" name rather than a chunk's. */
static cJSON *answer_base(vt_serve_job *j, int whole)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "object", j->req.kind != VT_SERVE_CHAT ? "text_completion"
                                         : whole ? "chat.completion" : "chat.completion.chunk");
    cJSON_AddNumberToObject(o, "created", (double)j->created);
    cJSON_AddStringToObject(o, "model", j->sched->model_id);
    return o;
}

static cJSON *usage_json(const vt_serve_job *j)
{
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)j->n_ids);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)j->n_gen);
    cJSON_AddNumberToObject(u, "total_tokens", (double)(j->n_ids + j->n_gen));
    return u;
}

static const char *finish_name(const vt_serve_job *j)
{
    if (j->finish == FIN_LENGTH) return "length";
    return j->n_tool_calls ? "tool_calls" : "stop";
}

/* Streaming: one chunk carrying text (reasoning or content) or a tool call
 * (call: {index, id, type, function}), the pending logprobs, and/or the
 * finish reason. */
static void stream_chunk(vt_serve_job *j, const char *text, size_t n, int reasoning,
                         const cJSON *call, int finish)
{
    if (j->json_broken) return;
    const unsigned long mark = vt_serve_json_failures();
    if (j->req.proto != VT_SERVE_OPENAI) {
        char *t = malloc(n + 1);
        if (!t) {
            j->json_broken = 1;
            return;
        }
        memcpy(t, text ? text : "", n);
        t[n] = 0;
        cJSON *o = sv_ollama_chunk(j, t, reasoning, call, finish);
        free(t);
        out_event(j, o, mark);
        cJSON_Delete(o);
        return;
    }
    cJSON *o = answer_base(j, 0), *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    if (!arr_add(choices, c)) c = NULL; /* freed; what follows adds nothing to NULL */
    cJSON_AddNumberToObject(c, "index", 0);
    char *t = malloc(n + 1);
    if (t) {
        memcpy(t, text ? text : "", n);
        t[n] = 0;
    }
    if (j->req.kind == VT_SERVE_CHAT) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (!j->sent_role) {
            cJSON_AddStringToObject(d, "role", "assistant");
            j->sent_role = 1;
        }
        if (n && t) cJSON_AddStringToObject(d, reasoning ? "reasoning_content" : "content", t);
        if (call) arr_add(cJSON_AddArrayToObject(d, "tool_calls"), cJSON_Duplicate(call, 1));
        if (j->lp_pending && cJSON_GetArraySize(j->lp_pending)) {
            cJSON *lp = cJSON_AddObjectToObject(c, "logprobs");
            obj_add(lp, "content", j->lp_pending);
            j->lp_pending = j->req.logprobs ? cJSON_CreateArray() : NULL;
        } else {
            cJSON_AddNullToObject(c, "logprobs");
        }
    } else {
        cJSON_AddStringToObject(c, "text", t ? t : "");
        if (j->lp_pending && cJSON_GetArraySize(j->lp_pending)) {
            /* legacy completions shape: parallel arrays */
            legacy_logprobs(c, j->lp_pending);
            cJSON_Delete(j->lp_pending);
            j->lp_pending = cJSON_CreateArray();
        } else {
            cJSON_AddNullToObject(c, "logprobs");
        }
    }
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish_name(j));
    else cJSON_AddNullToObject(c, "finish_reason");
    if (!t) j->json_broken = 1;
    free(t);
    out_event(j, o, mark);
    cJSON_Delete(o);
}

/* Text the model produced, after stop strings and the think split. */
static void emit(vt_serve_job *j, const char *s, size_t n, int reasoning)
{
    if (!n) return;
    if (j->req.stream) {
        stream_chunk(j, s, n, reasoning, NULL, 0);
    } else if (bb_put(reasoning ? &j->reasoning : &j->content, s, n) != 0) {
        j->finish = FIN_ERROR;
    }
    if (!reasoning) j->text_off += n;
}

/* The longest suffix of p[0..n) that is a proper prefix of marker m. */
static size_t partial_suffix(const char *p, size_t n, const char *m)
{
    size_t ml = strlen(m);
    for (size_t k = ml - 1 < n ? ml - 1 : n; k > 0; k--)
        if (!memcmp(p + n - k, m, k)) return k;
    return 0;
}

static int is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

/* A call's text is complete (closed: its close marker was met): read it
 * into j->tool_calls and, streaming, send it; text that is not a call in the
 * model's syntax goes out as content, as the model wrote it. */
static void end_tool_call(vt_serve_job *j, int closed)
{
    const char *open = vt_tool_call_open(j->tool_syntax), *close = vt_tool_call_close(j->tool_syntax);
    char *name = NULL, *args = NULL, why[160];
    int rc = vt_tool_call_parse(j->tool_syntax, j->tool_text.p ? j->tool_text.p : "", j->tool_text.n,
                                j->tools, &name, &args, why, sizeof why);
    j->in_tool = 0;
    if (rc == -2) {
        j->json_broken = 1;
    } else if (rc) {
        vt_log(VT_LOG_INFO, "vt serve: request %s: a tool call that does not parse stays text (%s)",
               j->id, why);
        emit(j, open, strlen(open), 0);
        emit(j, j->tool_text.p ? j->tool_text.p : "", j->tool_text.n, 0);
        if (closed) emit(j, close, strlen(close), 0);
    } else {
        const unsigned long mark = vt_serve_json_failures();
        if (!j->tool_calls) j->tool_calls = cJSON_CreateArray();
        char id[96];
        snprintf(id, sizeof id, "call_%s_%d", strchr(j->id, '-') ? strchr(j->id, '-') + 1 : j->id,
                 j->n_tool_calls);
        cJSON *c = cJSON_CreateObject(), *f = cJSON_CreateObject();
        if (j->req.stream) cJSON_AddNumberToObject(c, "index", j->n_tool_calls);
        cJSON_AddStringToObject(c, "id", id);
        cJSON_AddStringToObject(c, "type", "function");
        obj_add(c, "function", f);
        cJSON_AddStringToObject(f, "name", name);
        cJSON_AddStringToObject(f, "arguments", args);
        j->n_tool_calls++;
        if (vt_serve_json_failures() != mark) j->json_broken = 1;
        if (j->req.stream) {
            stream_chunk(j, NULL, 0, 0, c, 0);
            cJSON_Delete(c);
        } else if (!arr_add(j->tool_calls, c)) {
            j->json_broken = 1;
        }
    }
    free(name);
    free(args);
    j->tool_text.n = 0;
}

/* Send what of j->pending can be sent; at_end: all of it. Returns 1 when a
 * stop string was met (the text before it was sent). */
int sv_drain_pending(vt_serve_job *j, int at_end)
{
    const char *topen = vt_tool_call_open(j->tool_syntax), *tclose = vt_tool_call_close(j->tool_syntax);
    for (;;) {
        char *p = j->pending.p;
        size_t n = j->pending.n;
        if (!n) {
            if (at_end && j->in_tool) end_tool_call(j, 0);
            return 0;
        }
        if (j->in_tool) { /* a call's text gathers until its close marker */
            char *hit = memmem(p, n, tclose, strlen(tclose));
            size_t take = hit ? (size_t)(hit - p) : at_end ? n : n - partial_suffix(p, n, tclose);
            if (bb_put(&j->tool_text, p, take) != 0) {
                j->finish = FIN_ERROR;
                return 0;
            }
            size_t used = take + (hit ? strlen(tclose) : 0);
            memmove(p, p + used, n - used);
            j->pending.n = n - used;
            if (hit || at_end) {
                end_tool_call(j, hit != NULL);
                continue;
            }
            return 0;
        }
        if (j->strip_nl && !j->in_think) {
            size_t k = 0;
            while (k < n && p[k] == '\n') k++;
            if (k < n) j->strip_nl = 0;
            memmove(p, p + k, n - k);
            j->pending.n = n -= k;
            if (!n) return 0;
        }
        /* the earliest marker: a stop string, </think> while thinking, a tool call's opening */
        size_t best = (size_t)-1, best_len = 0;
        int best_kind = 0; /* 0 stop, 1 think, 2 tool */
        for (size_t i = 0; i < j->req.n_stop; i++) {
            char *hit = memmem(p, n, j->req.stop[i], strlen(j->req.stop[i]));
            if (hit && (size_t)(hit - p) < best) best = (size_t)(hit - p), best_len = strlen(j->req.stop[i]), best_kind = 0;
        }
        if (j->in_think) {
            char *hit = memmem(p, n, "</think>", 8);
            if (hit && (size_t)(hit - p) < best) best = (size_t)(hit - p), best_len = 8, best_kind = 1;
        } else if (j->tool_syntax) {
            char *hit = memmem(p, n, topen, strlen(topen));
            if (hit && (size_t)(hit - p) < best) best = (size_t)(hit - p), best_len = strlen(topen), best_kind = 2;
        }
        if (best != (size_t)-1) {
            size_t text = best;
            if (best_kind == 2) /* the blank lines before a call are not content */
                while (text && is_space(p[text - 1])) text--;
            emit(j, p, text, j->in_think);
            if (best_kind == 0) {
                j->pending.n = 0;
                return 1;
            }
            if (best_kind == 1) {
                j->in_think = 0;
                j->strip_nl = 1;
            } else {
                j->in_tool = 1;
            }
            memmove(p, p + best + best_len, n - best - best_len);
            j->pending.n = n - best - best_len;
            continue;
        }
        size_t hold = 0;
        if (!at_end) {
            for (size_t i = 0; i < j->req.n_stop; i++) {
                size_t k = partial_suffix(p, n, j->req.stop[i]);
                if (k > hold) hold = k;
            }
            const char *m = j->in_think ? "</think>" : j->tool_syntax ? topen : NULL;
            if (m) {
                size_t k = partial_suffix(p, n, m);
                if (k > hold) hold = k;
            }
            if (m == topen) /* blank space may come before a call: held until text follows */
                while (hold < n && is_space(p[n - hold - 1])) hold++;
        } else if (j->n_tool_calls && !j->in_think) {
            size_t k = 0; /* the blank space after the calls is not content */
            while (k < n && is_space(p[k])) k++;
            if (k == n) {
                j->pending.n = 0;
                return 0;
            }
        }
        emit(j, p, n - hold, j->in_think);
        memmove(p, p + n - hold, hold);
        j->pending.n = hold;
        return 0;
    }
}

/* ------------------------------------------------------------------ logprobs */

/* JSON-safe text of a token piece: invalid UTF-8 bytes become U+FFFD; the raw
 * bytes go into "bytes". */
static cJSON *lp_entry(vt_serve_sched *s, int32_t id, double lp)
{
    char piece[256];
    int64_t k = vt_token_to_piece(s->tok, id, 0, piece, sizeof piece);
    if (k < 0) k = 0;
    if (k > (int64_t)sizeof piece) k = sizeof piece;
    char safe[sizeof piece * 3 + 1];
    size_t o = 0;
    for (int64_t i = 0; i < k;) {
        int64_t bad = vt_serve_utf8_invalid_at(piece + i, (size_t)(k - i));
        int64_t good = bad < 0 ? k - i : bad;
        memcpy(safe + o, piece + i, (size_t)good);
        o += (size_t)good;
        i += good;
        if (bad >= 0) {
            memcpy(safe + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    safe[o] = 0;
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "token", safe);
    cJSON_AddNumberToObject(e, "logprob", lp);
    cJSON *bytes = cJSON_AddArrayToObject(e, "bytes");
    for (int64_t i = 0; i < k; i++) arr_add(bytes, cJSON_CreateNumber((unsigned char)piece[i]));
    return e;
}

/* The chosen token's log-probability under the model (log-softmax of the
 * raw logits) and the top_logprobs most likely tokens. */
void sv_add_logprobs(vt_serve_job *j, const float *logits, int32_t id)
{
    vt_serve_sched *s = j->sched;
    const unsigned long mark = vt_serve_json_failures();
    double mx = -INFINITY;
    for (int64_t i = 0; i < s->n_vocab; i++)
        if (logits[i] > mx) mx = logits[i];
    double sum = 0;
    for (int64_t i = 0; i < s->n_vocab; i++) sum += exp((double)logits[i] - mx);
    double lse = mx + log(sum);
    cJSON *e = lp_entry(s, id, (double)logits[id] - lse);
    cJSON_AddNumberToObject(e, "text_offset", (double)(j->text_off + (j->in_think ? 0 : j->pending.n)));
    cJSON *tops = cJSON_AddArrayToObject(e, "top_logprobs");
    /* the k best in one pass: best[] kept sorted, descending */
    int32_t best[VT_SERVE_MAX_TOP_LOGPROBS];
    int k = j->req.top_logprobs < s->n_vocab ? j->req.top_logprobs : (int)s->n_vocab, nb = 0;
    for (int64_t i = 0; i < s->n_vocab && k > 0; i++) {
        if (nb == k && !(logits[i] > logits[best[nb - 1]])) continue;
        int at = nb < k ? nb++ : k - 1;
        while (at > 0 && logits[i] > logits[best[at - 1]]) {
            best[at] = best[at - 1];
            at--;
        }
        best[at] = (int32_t)i;
    }
    for (int t = 0; t < nb; t++)
        arr_add(tops, lp_entry(s, best[t], (double)logits[best[t]] - lse));
    if (!j->lp_pending) j->lp_pending = cJSON_CreateArray();
    arr_add(j->lp_pending, e);
    if (vt_serve_json_failures() != mark) j->json_broken = 1;
}

/* ------------------------------------------------------------------ finishing */

void sv_metrics_finish(vt_serve_sched *s, int finish)
{
    switch (finish) {
    case FIN_STOP: s->m.finished_stop++; break;
    case FIN_LENGTH: s->m.finished_length++; break;
    case FIN_CANCELLED: s->m.cancelled++; break;
    default: s->m.finished_error++; break;
    }
}

/* End a job with an error: an SSE error event, or the error as the body. */
void sv_finish_error(vt_serve_job *j, int http, const char *fmt, ...)
{
    vt_serve_error err;
    vt_serve_error_set(&err, http, NULL, "%s", "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err.message, sizeof err.message, fmt, ap);
    va_end(ap);
    /* a server fault is worth a line in the log; a refusal (503 at shutdown) is not */
    vt_log(http >= 500 && http != 503 ? VT_LOG_WARN : VT_LOG_INFO, "vt serve: request %s failed (%d): %s",
           j->id, http, err.message);
    const unsigned long mark = vt_serve_json_failures();
    char *js = vt_serve_error_json(&err);
    if (js && vt_serve_json_failures() != mark) {
        free(js);
        js = NULL;
    }
    /* when even the error cannot be built: a fixed one, no allocation */
    static const char oom[] = "{\"error\":{\"message\":\"out of memory while formatting the "
                              "response\",\"type\":\"server_error\",\"code\":500}}";
    const char *body = js ? js : oom;
    if (!js) http = 500;
    vt_serve_sched *s = j->sched;
    pthread_mutex_lock(&s->mu);
    if (j->req.stream) {
        frame_locked(j, body);
    } else {
        j->out.n = 0;
        out_locked(j, body, strlen(body));
        j->http = http;
    }
    j->done = 1;
    sv_metrics_finish(s, FIN_ERROR);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&s->mu);
    free(js);
}

/* The whole answer in OpenAI's shape (chat.completion or text_completion). */
static cJSON *openai_body(vt_serve_job *j)
{
    cJSON *o = answer_base(j, 1);
    cJSON *c = cJSON_CreateObject();
    if (!arr_add(cJSON_AddArrayToObject(o, "choices"), c)) c = NULL; /* freed */
    cJSON_AddNumberToObject(c, "index", 0);
    if (j->req.kind == VT_SERVE_CHAT) {
        cJSON *msg = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(msg, "role", "assistant");
        if (j->n_tool_calls && !j->content.n) /* OpenAI: a message of calls alone has null content */
            cJSON_AddNullToObject(msg, "content");
        else
            cJSON_AddStringToObject(msg, "content", j->content.p ? j->content.p : "");
        if (j->reasoning.n) cJSON_AddStringToObject(msg, "reasoning_content", j->reasoning.p);
        if (j->n_tool_calls) {
            obj_add(msg, "tool_calls", j->tool_calls);
            j->tool_calls = NULL;
        }
        if (j->req.logprobs) {
            cJSON *lp = cJSON_AddObjectToObject(c, "logprobs");
            obj_add(lp, "content", j->lp_pending ? j->lp_pending : cJSON_CreateArray());
            j->lp_pending = NULL;
        } else {
            cJSON_AddNullToObject(c, "logprobs");
        }
    } else {
        cJSON_AddStringToObject(c, "text", j->content.p ? j->content.p : "");
        if (j->req.logprobs) {
            legacy_logprobs(c, j->lp_pending);
        } else {
            cJSON_AddNullToObject(c, "logprobs");
        }
    }
    cJSON_AddStringToObject(c, "finish_reason", finish_name(j));
    obj_add(o, "usage", usage_json(j));
    return o;
}

void sv_finish_ok(vt_serve_job *j)
{
    vt_serve_sched *s = j->sched;
    static const char broken[] = "out of memory while formatting the response";
    if (j->json_broken) {
        sv_finish_error(j, 500, broken);
        return;
    }
    if (j->req.stream) {
        stream_chunk(j, NULL, 0, 0, NULL, j->finish);
        if (j->req.include_usage && !j->json_broken && j->req.proto == VT_SERVE_OPENAI) {
            const unsigned long mark = vt_serve_json_failures();
            cJSON *o = answer_base(j, 0);
            cJSON_AddArrayToObject(o, "choices");
            obj_add(o, "usage", usage_json(j));
            out_event(j, o, mark);
            cJSON_Delete(o);
        }
        if (j->json_broken) {
            sv_finish_error(j, 500, broken);
            return;
        }
        pthread_mutex_lock(&s->mu);
        if (j->req.proto == VT_SERVE_OPENAI) out_locked(j, "data: [DONE]\n\n", 14);
    } else {
        const unsigned long mark = vt_serve_json_failures();
        cJSON *o = j->req.proto != VT_SERVE_OPENAI ? sv_ollama_body(j) : openai_body(j);
        char *txt = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        if (!txt || vt_serve_json_failures() != mark) {
            free(txt);
            sv_finish_error(j, 500, broken);
            return;
        }
        pthread_mutex_lock(&s->mu);
        j->out.n = 0;
        if (txt) {
            out_locked(j, txt, strlen(txt));
            j->http = 200;
        } else {
            j->http = 500;
        }
        free(txt);
    }
    j->done = 1;
    sv_metrics_finish(s, j->finish);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&s->mu);
}

