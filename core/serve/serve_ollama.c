/*
 * serve_ollama.c - ollama's /api/chat and /api/generate bodies read into
 * vt serve's request (serve_ollama.h): rewritten as the OpenAI body that
 * means the same and parsed by vt_serve_parse_request, so that every check
 * of that parser holds for both.
 */
#include "serve_ollama.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int OOM(vt_serve_error *err)
{
    vt_serve_error_set(err, 500, NULL, "out of memory parsing the request");
    return -1;
}

static int put(cJSON *o, const char *k, cJSON *v)
{
    if (v && cJSON_AddItemToObject(o, k, v)) return 0;
    cJSON_Delete(v);
    return -1;
}

/* options {...} into the OpenAI body's sampling fields */
static int map_options(const cJSON *opt, cJSON *oa, vt_serve_error *err)
{
    if (!cJSON_IsObject(opt)) {
        vt_serve_error_set(err, 400, "options", "'options' must be an object");
        return -1;
    }
    static const char *const same[][2] = {{"temperature", "temperature"}, {"top_k", "top_k"},
                                          {"top_p", "top_p"},             {"min_p", "min_p"},
                                          {"seed", "seed"},               {"stop", "stop"}};
    for (const cJSON *o = opt->child; o; o = o->next) {
        const char *k = o->string;
        size_t i = 0;
        while (i < sizeof same / sizeof *same && strcmp(same[i][0], k)) i++;
        if (i < sizeof same / sizeof *same) {
            if (put(oa, same[i][1], cJSON_Duplicate(o, 1))) return OOM(err);
        } else if (!strcmp(k, "num_predict")) {
            /* -1: until the end (ollama's -2, until the context is full, is the same here) */
            if (!cJSON_IsNumber(o)) {
                vt_serve_error_set(err, 400, "options", "'options.num_predict' must be an integer");
                return -1;
            }
            if (o->valuedouble > 0 && put(oa, "max_tokens", cJSON_CreateNumber(o->valuedouble)))
                return OOM(err);
        } else if (strcmp(k, "num_ctx") && strcmp(k, "num_thread") && strcmp(k, "num_gpu")) {
            vt_serve_error_set(err, 400, "options", "'options.%s' is not supported (known: "
                               "num_predict, temperature, top_k, top_p, min_p, seed, stop; "
                               "num_ctx, num_thread and num_gpu are ignored)", k);
            return -1;
        }
    }
    return 0;
}

/* An ollama message into an OpenAI one: tool_calls' arguments (an object)
 * become JSON text, thinking becomes reasoning_content, tool_name name. */
static cJSON *map_message(const cJSON *m, int i, vt_serve_error *err)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) {
        OOM(err);
        return NULL;
    }
    if (!cJSON_IsObject(m)) {
        vt_serve_error_set(err, 400, "messages", "'messages[%d]' must be an object", i);
        goto bad;
    }
    for (const cJSON *f = m->child; f; f = f->next) {
        const char *k = f->string;
        if (!strcmp(k, "role") || !strcmp(k, "content")) {
            if (put(o, k, cJSON_Duplicate(f, 1))) goto oom;
        } else if (!strcmp(k, "thinking")) {
            if (put(o, "reasoning_content", cJSON_Duplicate(f, 1))) goto oom;
        } else if (!strcmp(k, "tool_name")) {
            if (put(o, "name", cJSON_Duplicate(f, 1))) goto oom;
        } else if (!strcmp(k, "images")) {
            if (cJSON_GetArraySize(f) == 0) continue;
            vt_serve_error_set(err, 400, "messages", "'messages[%d].images': images are not "
                               "supported (vt serves text models)", i);
            goto bad;
        } else if (!strcmp(k, "tool_calls")) {
            cJSON *arr = cJSON_CreateArray();
            if (put(o, "tool_calls", arr)) goto oom;
            const cJSON *tc;
            cJSON_ArrayForEach(tc, f) {
                const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
                const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
                cJSON *c = cJSON_CreateObject(), *g = cJSON_CreateObject();
                if (!cJSON_AddItemToArray(arr, c)) {
                    cJSON_Delete(c);
                    cJSON_Delete(g);
                    goto oom;
                }
                if (put(c, "type", cJSON_CreateString("function")) || put(c, "function", g))
                    goto oom;
                const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
                if (name && put(g, "name", cJSON_Duplicate(name, 1))) goto oom;
                if (cJSON_IsObject(args)) {
                    char *t = cJSON_PrintUnformatted(args);
                    int bad = !t || put(g, "arguments", cJSON_CreateString(t));
                    free(t);
                    if (bad) goto oom;
                } else if (args && put(g, "arguments", cJSON_Duplicate(args, 1))) {
                    goto oom;
                }
            }
        } else {
            vt_serve_error_set(err, 400, "messages", "'messages[%d].%s' is not supported (known: "
                               "role, content, thinking, tool_calls, tool_name, images)", i, k);
            goto bad;
        }
    }
    return o;
oom:
    (void)OOM(err);
bad:
    cJSON_Delete(o);
    return NULL;
}

int vt_serve_parse_ollama(int generate, const char *body, size_t len, vt_serve_request *out,
                          vt_serve_error *err)
{
    memset(out, 0, sizeof *out);
    cJSON *j = vt_serve_parse_body(body, len, err); /* the checks of every body */
    if (!j) return -1;
    cJSON *oa = cJSON_CreateObject(); /* the OpenAI body */
    int rc = -1, stream = 1, raw = 0;
    const cJSON *prompt = NULL, *system = NULL;
    if (!oa) goto oom;
    for (const cJSON *f = j->child; f; f = f->next) {
        const char *k = f->string;
        if (!strcmp(k, "model")) {
            if (put(oa, "model", cJSON_Duplicate(f, 1))) goto oom;
        } else if (!strcmp(k, "stream")) {
            if (!cJSON_IsBool(f)) {
                vt_serve_error_set(err, 400, k, "'stream' must be true or false");
                goto out;
            }
            stream = cJSON_IsTrue(f);
        } else if (!strcmp(k, "options")) {
            if (map_options(f, oa, err)) goto out;
        } else if (!strcmp(k, "think")) {
            cJSON *kw = cJSON_CreateObject();
            if (put(oa, "chat_template_kwargs", kw) || put(kw, "enable_thinking", cJSON_Duplicate(f, 1)))
                goto oom;
        } else if (!strcmp(k, "keep_alive")) { /* one model, loaded for the server's life */
        } else if (!strcmp(k, "format")) {
            if (cJSON_IsNull(f) || (cJSON_IsString(f) && !f->valuestring[0])) continue;
            vt_serve_error_set(err, 400, k, "'format' (JSON output) is not supported: vt does not "
                               "constrain output to JSON yet");
            goto out;
        } else if (!generate && !strcmp(k, "messages")) {
            cJSON *msgs = cJSON_CreateArray();
            if (put(oa, "messages", msgs)) goto oom;
            if (!cJSON_IsArray(f)) {
                vt_serve_error_set(err, 400, k, "'messages' must be an array of messages");
                goto out;
            }
            int i = 0;
            const cJSON *m;
            cJSON_ArrayForEach(m, f) {
                cJSON *om = map_message(m, i++, err);
                if (!om) goto out;
                if (!cJSON_AddItemToArray(msgs, om)) {
                    cJSON_Delete(om);
                    goto oom;
                }
            }
        } else if (!generate && !strcmp(k, "tools")) {
            if (put(oa, "tools", cJSON_Duplicate(f, 1))) goto oom;
        } else if (generate && !strcmp(k, "prompt")) {
            prompt = f;
        } else if (generate && !strcmp(k, "system")) {
            system = f;
        } else if (generate && !strcmp(k, "raw")) {
            if (!cJSON_IsBool(f)) {
                vt_serve_error_set(err, 400, k, "'raw' must be true or false");
                goto out;
            }
            raw = cJSON_IsTrue(f);
        } else {
            vt_serve_error_set(err, 400, k, "unknown field '%s'", k);
            goto out;
        }
    }
    if (generate) {
        if (!cJSON_IsString(prompt) || (system && !cJSON_IsString(system))) {
            vt_serve_error_set(err, 400, "prompt", "'prompt' (and 'system') must be strings");
            goto out;
        }
        if (raw) {
            if (system) {
                vt_serve_error_set(err, 400, "system", "'system' has no place in a raw prompt");
                goto out;
            }
            if (put(oa, "prompt", cJSON_Duplicate(prompt, 1))) goto oom;
        } else { /* the prompt as one user turn of the chat template */
            cJSON *msgs = cJSON_CreateArray(), *u = cJSON_CreateObject(), *s = NULL;
            if (put(oa, "messages", msgs)) {
                cJSON_Delete(u);
                goto oom;
            }
            if (system && (!(s = cJSON_CreateObject()) || !cJSON_AddItemToArray(msgs, s) ||
                           put(s, "role", cJSON_CreateString("system")) ||
                           put(s, "content", cJSON_Duplicate(system, 1)))) {
                cJSON_Delete(u);
                goto oom;
            }
            if (!cJSON_AddItemToArray(msgs, u)) {
                cJSON_Delete(u);
                goto oom;
            }
            if (put(u, "role", cJSON_CreateString("user")) ||
                put(u, "content", cJSON_Duplicate(prompt, 1)))
                goto oom;
        }
    }
    if (put(oa, "stream", cJSON_CreateBool(stream))) goto oom;
    char *text = cJSON_PrintUnformatted(oa);
    if (!text) goto oom;
    const int chat = !generate || !raw;
    rc = vt_serve_parse_request(chat ? VT_SERVE_CHAT : VT_SERVE_COMPLETION, text, strlen(text),
                                out, err);
    free(text);
    if (rc == 0) out->proto = generate ? VT_SERVE_OLLAMA_GENERATE : VT_SERVE_OLLAMA_CHAT;
    goto out;
oom:
    (void)OOM(err);
out:
    cJSON_Delete(oa);
    cJSON_Delete(j);
    return rc;
}

cJSON *vt_serve_ollama_info_json(int version, const char *model_id)
{
    cJSON *o = cJSON_CreateObject();
    if (version) {
        cJSON_AddStringToObject(o, "version", "0.0.0-vt");
        return o;
    }
    cJSON *m = cJSON_CreateObject();
    if (!cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "models"), m)) {
        cJSON_Delete(m);
        m = NULL; /* the body is incomplete: the sender answers 500 */
    }
    cJSON_AddStringToObject(m, "name", model_id);
    cJSON_AddStringToObject(m, "model", model_id);
    cJSON_AddStringToObject(m, "modified_at", "1970-01-01T00:00:00Z");
    cJSON_AddNumberToObject(m, "size", 0);
    cJSON_AddStringToObject(m, "digest", "");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(m, "details"), "format", "gguf");
    return o;
}
