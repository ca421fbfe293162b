/*
 * test_serve_oom.c - vt serve's formatter when memory runs out: every cJSON
 * allocation that builds a response can fail (serve_json.h's fault hook, the
 * k-th allocation after the request is queued, for k = 0, 1, 2, ... until a
 * request finishes without reaching it), and what goes out is always either
 * the whole answer or an error: in a stream, every event is complete JSON,
 * and the stream ends with one `[DONE]` after text equal to the unfaulted
 * run's, or with one error event; a non-streamed answer is the unfaulted
 * body (bar its id and time) with status 200, or a JSON error with status
 * 500. The scheduler serves a normal request afterwards. Before the hooks,
 * a failed allocation dropped a member ("content", a logprob) and the event
 * went out without it, or the stream ended with neither [DONE] nor an error.
 *
 * In-process (the scheduler over an engine on the trained fixture, CPU,
 * reference kernels, one slot), so the fault lands on the scheduler's
 * formatting; the HTTP endpoints' answers (/tokenize, /v1/models) go
 * through the same check (serve_http.c send_json) but are not faulted here.
 */
#include "test_util.h"

#include <cJSON.h>

#include "engine.h"
#include "error.h"
#include "serve_json.h"
#include "serve_request.h"
#include "serve_sched.h"

static vt_engine *g_e;
static vt_serve_sched *g_s;
static int g_fired; /* the last run's armed fault fired */

/* Submit body (kind), arm the fault after `fail_after` allocations (-1:
 * none), read everything; returns the output (malloc) and *http. */
static char *run(vt_serve_kind kind, const char *body, long fail_after, int *http)
{
    vt_serve_request req;
    vt_serve_error err;
    if (vt_serve_parse_request(kind, body, strlen(body), &req, &err) != 0)
        fail_msg("parse: %s", err.message);
    vt_serve_job *j = NULL;
    /* armed before the job is queued: the scheduler may start it at once */
    vt_serve_json_fail_after(fail_after);
    if (vt_serve_submit(g_s, &req, &j, &err) != 0) fail_msg("submit: %s", err.message);
    size_t cap = 1 << 16, n = 0;
    char *out = malloc(cap);
    assert_non_null(out);
    *http = 0;
    for (;;) {
        if (cap - n < 4096) {
            out = realloc(out, cap *= 2);
            assert_non_null(out);
        }
        long r = vt_serve_job_read(j, out + n, cap - n - 1, 10000, http);
        if (r < 0) break;
        n += (size_t)r;
    }
    out[n] = 0;
    g_fired = fail_after >= 0 && vt_serve_json_fail_after(-1) < 0;
    vt_serve_job_release(j);
    return out;
}

/* The text of a stream's events (content / text), checking each event;
 * *ended: 1 [DONE], 2 an error event. */
static char *stream_text(const char *out, int *ended, int *events)
{
    size_t cap = strlen(out) + 1, n = 0;
    char *text = calloc(cap, 1);
    *ended = 0;
    *events = 0;
    const char *p = out;
    while (*p) {
        if (*ended) fail_msg("output after the stream ended: %.80s", p);
        if (strncmp(p, "data: ", 6)) fail_msg("not an SSE event: %.80s", p);
        const char *e = strstr(p, "\n\n");
        if (!e) fail_msg("an unterminated event: %.80s", p);
        size_t len = (size_t)(e - p - 6);
        char *ev = strndup(p + 6, len);
        (*events)++;
        if (!strcmp(ev, "[DONE]")) {
            *ended = 1;
        } else {
            cJSON *o = cJSON_Parse(ev);
            if (!o) fail_msg("an event is not JSON: %s", ev);
            if (cJSON_GetObjectItem(o, "error")) {
                const cJSON *m = cJSON_GetObjectItem(cJSON_GetObjectItem(o, "error"), "message");
                if (!cJSON_IsString(m)) fail_msg("an error event without a message: %s", ev);
                *ended = 2;
            } else {
                const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
                if (c) {
                    const cJSON *t = cJSON_GetObjectItem(c, "text");
                    if (!t) t = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "delta"), "content");
                    if (!cJSON_GetObjectItem(c, "finish_reason"))
                        fail_msg("a chunk without finish_reason: %s", ev);
                    if (cJSON_IsString(t)) {
                        size_t k = strlen(t->valuestring);
                        memcpy(text + n, t->valuestring, k);
                        n += k;
                    }
                }
            }
            cJSON_Delete(o);
        }
        free(ev);
        p = e + 2;
    }
    return text;
}

/* every event of a stream without its id and created time, one per line */
static char *events_core(const char *out)
{
    size_t cap = strlen(out) + 16, n = 0;
    char *res = calloc(cap, 1);
    for (const char *p = out; *p;) {
        const char *e = strstr(p, "\n\n");
        if (!e) break;
        char *ev = strndup(p + 6, (size_t)(e - p - 6));
        cJSON *o = cJSON_Parse(ev);
        char *core = NULL;
        if (o) {
            cJSON_DeleteItemFromObject(o, "id");
            cJSON_DeleteItemFromObject(o, "created");
            core = cJSON_PrintUnformatted(o);
            cJSON_Delete(o);
        }
        const char *w = core ? core : ev;
        size_t k = strlen(w);
        if (n + k + 2 > cap) {
            res = realloc(res, cap = 2 * (n + k + 2));
            assert_non_null(res);
        }
        memcpy(res + n, w, k);
        n += k;
        res[n++] = '\n';
        res[n] = 0;
        free(core);
        free(ev);
        p = e + 2;
    }
    return res;
}

/* a non-streamed body without its id and created time */
static char *body_core(const char *out)
{
    cJSON *o = cJSON_Parse(out);
    if (!o) fail_msg("the body is not JSON: %.200s", out);
    cJSON_DeleteItemFromObject(o, "id");
    cJSON_DeleteItemFromObject(o, "created");
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static int setup(void **state)
{
    (void)state;
    const char *fx = vt_test_fixtures();
    if (!fx) return 0;
    char *path = vt_test_path(fx, "qwen35moe-trained/gguf/qwen35moe-trained-q8_0.gguf");
    vt_engine_params p = {.model_path = path, .plugin_dir = vt_test_plugin_dir(), .device = "cpu",
                          .n_threads = 2, .kernels = "scalar", .n_ctx = 256, .n_seq = 1};
    if (vt_engine_open(&p, &g_e) != VT_OK) {
        fprintf(stderr, "engine: %s\n", vt_last_error());
        free(path);
        return -1;
    }
    free(path);
    vt_serve_sched_params sp = {.engine = g_e, .n_parallel = 1, .queue_max = 4,
                                .model_id = "trained"};
    g_s = vt_serve_sched_start(&sp);
    return g_s ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    if (g_s) vt_serve_sched_free(g_s);
    if (g_e) vt_engine_close(g_e);
    return 0;
}

static const char *const g_stream_bodies[] = {
    "{\"prompt\":\"The history of\",\"max_tokens\":3,\"temperature\":0,\"stream\":true,"
    "\"logprobs\":2,\"stream_options\":{\"include_usage\":true}}",
    "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me about the library.\"}],"
    "\"max_tokens\":3,\"temperature\":0,\"stream\":true,\"logprobs\":true,\"top_logprobs\":2,"
    "\"chat_template_kwargs\":{\"enable_thinking\":false}}",
};

static void test_stream_faults(void **state)
{
    (void)state;
    if (!g_s) {
        skip();
        return;
    }
    for (int b = 0; b < 2; b++) {
        const vt_serve_kind kind = b ? VT_SERVE_CHAT : VT_SERVE_COMPLETION;
        int http, ended, events;
        char *ref_out = run(kind, g_stream_bodies[b], -1, &http);
        char *ref = stream_text(ref_out, &ended, &events);
        if (ended != 1) fail_msg("the unfaulted stream did not end with [DONE]: %s", ref_out);
        char *ref_events = events_core(ref_out);
        int errors = 0, k;
        for (k = 0; k < 4000; k++) {
            char *out = run(kind, g_stream_bodies[b], k, &http);
            char *text = stream_text(out, &ended, &events);
            if (ended == 0) fail_msg("fault at allocation %d: the stream ended with neither [DONE] "
                                     "nor an error event: %s", k, out);
            if (ended == 1 && strcmp(text, ref))
                fail_msg("fault at allocation %d: the stream ended with [DONE] but its text "
                         "'%s' is not the unfaulted '%s'", k, text, ref);
            if (ended == 1) { /* every event whole: logprobs, finish, usage as unfaulted */
                char *evs = events_core(out);
                if (strcmp(evs, ref_events))
                    fail_msg("fault at allocation %d: the stream ended with [DONE] but its events "
                             "differ from the unfaulted ones:\n%s\nunfaulted:\n%s", k, evs,
                             ref_events);
                free(evs);
            }
            if (ended == 2 && strncmp(text, ref, strlen(text)))
                fail_msg("fault at allocation %d: the text before the error event '%s' is not a "
                         "beginning of the unfaulted '%s'", k, text, ref);
            errors += ended == 2;
            const int fired = g_fired;
            if (!fired && ended != 1) fail_msg("no fault fired at %d, and yet: %s", k, out);
            free(text);
            free(out);
            if (!fired) break; /* the output was made with fewer allocations: all tried */
        }
        if (k == 4000) fail_msg("4000 faulted runs and the output never came out whole");
        if (k == 0) fail_msg("no fault ever fired: the server does not watch cJSON's allocations");
        if (errors < k / 2) fail_msg("only %d of %d faulted runs ended with an error", errors, k);
        printf("[oom] %s stream: faults at allocations 0..%d, %d error events, the rest whole\n",
               b ? "chat" : "completion", k - 1, errors);
        free(ref);
        free(ref_events);
        free(ref_out);
    }
}

static void test_body_faults(void **state)
{
    (void)state;
    if (!g_s) {
        skip();
        return;
    }
    const char *body = "{\"prompt\":\"The history of\",\"max_tokens\":3,\"temperature\":0,"
                       "\"logprobs\":2}";
    int http;
    char *ref_out = run(VT_SERVE_COMPLETION, body, -1, &http);
    assert_int_equal(http, 200);
    char *ref = body_core(ref_out);
    int k, errors = 0;
    for (k = 0; k < 4000; k++) {
        char *out = run(VT_SERVE_COMPLETION, body, k, &http);
        if (!g_fired && http != 200) fail_msg("no fault fired at %d, and yet status %d", k, http);
        if (http == 200) {
            char *core = body_core(out);
            int same = !strcmp(core, ref);
            if (!same) fail_msg("fault at allocation %d: status 200 with a body that differs: %s",
                                k, out);
            free(core);
            free(out);
            if (!g_fired) break; /* made with fewer allocations: every one was tried */
            continue;
        }
        if (http != 500) fail_msg("fault at allocation %d: status %d: %s", k, http, out);
        cJSON *o = cJSON_Parse(out);
        if (!o || !cJSON_IsString(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "error"), "message")))
            fail_msg("fault at allocation %d: status 500 without a JSON error: %s", k, out);
        cJSON_Delete(o);
        errors++;
        free(out);
    }
    if (k == 4000) fail_msg("4000 faulted runs and the body never came out whole");
    if (k == 0) fail_msg("no fault ever fired: the server does not watch cJSON's allocations");
    if (errors < k / 2) fail_msg("only %d of %d faulted runs answered 500", errors, k);
    printf("[oom] completion body: faults at allocations 0..%d, %d answered 500\n", k - 1, errors);
    free(ref);
    free(ref_out);
    /* the scheduler still serves */
    char *out = run(VT_SERVE_COMPLETION, body, -1, &http);
    assert_int_equal(http, 200);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_faults),
        cmocka_unit_test(test_body_faults),
    };
    return vt_test_exit(cmocka_run_group_tests(tests, setup, teardown));
}
