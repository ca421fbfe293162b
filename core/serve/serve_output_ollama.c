/*
 * serve_output_ollama.c - a job's answer in ollama's shape (serve_ollama.h),
 * for serve_output.c: per piece of text one NDJSON object
 * {"model", "created_at", "message": {"role", "content" | "thinking" |
 * "tool_calls"}, "done": false} (/api/generate: "response" / "thinking"),
 * and a last one with "done": true, "done_reason", "total_duration" (ns),
 * "prompt_eval_count" and "eval_count"; not streaming, one object of the
 * whole answer with those fields.
 */
#include "serve_sched_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve_json.h"

static cJSON *base(const vt_serve_job *j, int done)
{
    cJSON *o = cJSON_CreateObject();
    char ts[40];
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    struct tm tm;
    gmtime_r(&now.tv_sec, &tm);
    size_t k = strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(ts + k, sizeof ts - k, ".%09ldZ", now.tv_nsec);
    cJSON_AddStringToObject(o, "model", j->sched->model_id);
    cJSON_AddStringToObject(o, "created_at", ts);
    (void)done;
    return o;
}

/* One call of j->tool_calls' OpenAI form in ollama's: arguments an object. */
static cJSON *ollama_call(const cJSON *c)
{
    const cJSON *f = cJSON_GetObjectItem(c, "function");
    cJSON *o = cJSON_CreateObject(), *g = cJSON_AddObjectToObject(o, "function");
    cJSON_AddStringToObject(g, "name", cJSON_GetStringValue(cJSON_GetObjectItem(f, "name")));
    const char *text = cJSON_GetStringValue(cJSON_GetObjectItem(f, "arguments"));
    cJSON *args = cJSON_Parse(text);
    if (!args) args = cJSON_CreateString(text ? text : ""); /* too deep to parse again: as text */
    if (!args || !cJSON_AddItemToObject(g, "arguments", args)) {
        cJSON_Delete(args);
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static void add_done(const vt_serve_job *j, cJSON *o)
{
    cJSON_AddBoolToObject(o, "done", 1);
    cJSON_AddStringToObject(o, "done_reason", j->finish == FIN_LENGTH ? "length" : "stop");
    cJSON_AddNumberToObject(o, "total_duration", (double)(long long)((sv_now_s() - j->t_arrival) * 1e9));
    cJSON_AddNumberToObject(o, "prompt_eval_count", (double)j->n_ids);
    cJSON_AddNumberToObject(o, "eval_count", (double)j->n_gen);
}

/* The message (or response) fields of text, reasoning text and calls into o. */
static void add_text(const vt_serve_job *j, cJSON *o, const char *text, const char *thinking,
                     const cJSON *calls)
{
    if (j->req.proto == VT_SERVE_OLLAMA_GENERATE) {
        cJSON_AddStringToObject(o, "response", text ? text : "");
        if (thinking) cJSON_AddStringToObject(o, "thinking", thinking);
        return;
    }
    cJSON *m = cJSON_AddObjectToObject(o, "message");
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON_AddStringToObject(m, "content", text ? text : "");
    if (thinking) cJSON_AddStringToObject(m, "thinking", thinking);
    if (calls) {
        cJSON *arr = cJSON_AddArrayToObject(m, "tool_calls");
        const cJSON *c;
        cJSON_ArrayForEach(c, calls) {
            cJSON *oc = ollama_call(c);
            if (!oc || !cJSON_AddItemToArray(arr, oc)) {
                cJSON_Delete(oc);
                cJSON_AddNullToObject(m, "tool_calls"); /* a duplicate key marks the failure */
            }
        }
    }
}

cJSON *sv_ollama_chunk(vt_serve_job *j, const char *text, int reasoning, const cJSON *call,
                       int finish)
{
    cJSON *o = base(j, finish);
    cJSON *calls = NULL;
    if (call) {
        calls = cJSON_CreateArray();
        cJSON_AddItemToArray(calls, cJSON_Duplicate(call, 1));
    }
    add_text(j, o, reasoning ? "" : text, reasoning && text ? text : NULL, calls);
    cJSON_Delete(calls);
    if (finish) add_done(j, o);
    else cJSON_AddBoolToObject(o, "done", 0);
    return o;
}

cJSON *sv_ollama_body(vt_serve_job *j)
{
    cJSON *o = base(j, 1);
    add_text(j, o, j->content.p ? j->content.p : "", j->reasoning.n ? j->reasoning.p : NULL,
             j->n_tool_calls ? j->tool_calls : NULL);
    add_done(j, o);
    return o;
}
