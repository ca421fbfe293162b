/*
 * serve_request.c - parse and check vt serve's request bodies (serve_request.h).
 */
#include "serve_request.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void vt_serve_error_set(vt_serve_error *err, int http, const char *param, const char *fmt, ...)
{
    err->http = http;
    snprintf(err->type, sizeof err->type, "%s",
             http == 401 ? "authentication_error" : http == 404 ? "not_found_error"
             : http == 503 ? "server_overloaded" : http >= 500 ? "server_error"
             : "invalid_request_error");
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    /* cut short: end on a character boundary, so the JSON body stays UTF-8 */
    if (n >= (int)sizeof err->message) {
        size_t k = strlen(err->message);
        size_t start = k;
        while (start > 0 && ((unsigned char)err->message[start - 1] & 0xC0) == 0x80) start--;
        if (start > 0 && (unsigned char)err->message[start - 1] >= 0xC0) {
            unsigned lead = (unsigned char)err->message[start - 1];
            size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
            if (k - (start - 1) < need) err->message[start - 1] = 0;
        }
    }
}

/* strcmp for qsort over an array of key pointers */
static int key_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first key that appears twice in one object anywhere in j (depth
 * bounded by depth_ok), or NULL; *oom set when the check could not allocate.
 * Sorting the keys keeps a hostile object of many keys at n log n. */
static const char *duplicate_key(const cJSON *j, int *oom)
{
    if (cJSON_IsObject(j)) {
        size_t n = 0;
        for (const cJSON *c = j->child; c; c = c->next) n++;
        if (n > 1) {
            const char **k = malloc(n * sizeof *k);
            if (!k) {
                *oom = 1;
                return NULL;
            }
            size_t i = 0;
            for (const cJSON *c = j->child; c; c = c->next) k[i++] = c->string ? c->string : "";
            qsort(k, n, sizeof *k, key_cmp);
            const char *dup = NULL;
            for (i = 1; i < n && !dup; i++)
                if (!strcmp(k[i - 1], k[i])) dup = k[i];
            free(k);
            if (dup) return dup;
        }
    }
    for (const cJSON *c = j->child; c; c = c->next) {
        const char *d = duplicate_key(c, oom);
        if (d || *oom) return d;
    }
    return NULL;
}

char *vt_serve_error_json(const vt_serve_error *err)
{
    cJSON *root = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(root, "error");
    char *s = NULL;
    if (e && cJSON_AddStringToObject(e, "message", err->message) &&
        cJSON_AddStringToObject(e, "type", err->type) &&
        (err->param[0] ? cJSON_AddStringToObject(e, "param", err->param) != NULL
                       : cJSON_AddNullToObject(e, "param") != NULL) &&
        cJSON_AddNumberToObject(e, "code", err->http))
        s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

int64_t vt_serve_utf8_invalid_at(const char *str, size_t len)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n;
        unsigned cp, min;
        if ((c & 0xE0) == 0xC0) n = 2, cp = c & 0x1F, min = 0x80;
        else if ((c & 0xF0) == 0xE0) n = 3, cp = c & 0x0F, min = 0x800;
        else if ((c & 0xF8) == 0xF0) n = 4, cp = c & 0x07, min = 0x10000;
        else return (int64_t)i;
        if (i + n > len) return (int64_t)i;
        for (size_t k = 1; k < n; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return (int64_t)i;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return (int64_t)i;
        i += n;
    }
    return -1;
}

static int depth_ok(const cJSON *j, int depth)
{
    if (depth > VT_SERVE_MAX_DEPTH) return 0;
    for (const cJSON *c = j->child; c; c = c->next)
        if (!depth_ok(c, depth + 1)) return 0;
    return 1;
}

/* The body as a JSON object, or NULL with err set. */
cJSON *vt_serve_parse_body(const char *body, size_t len, vt_serve_error *err)
{
    if (len == 0) {
        vt_serve_error_set(err, 400, NULL, "the request body is empty; a JSON object is expected");
        return NULL;
    }
    int64_t bad = vt_serve_utf8_invalid_at(body, len);
    if (bad >= 0) {
        vt_serve_error_set(err, 400, NULL, "the request body is not valid UTF-8 (byte %lld)",
                           (long long)bad);
        return NULL;
    }
    /* strings are C strings here: a NUL (raw or \u0000) would cut one short silently */
    if (memchr(body, 0, len)) {
        vt_serve_error_set(err, 400, NULL, "the request body holds a NUL byte (byte %zu)",
                           (size_t)((const char *)memchr(body, 0, len) - body));
        return NULL;
    }
    for (size_t i = 0; i + 6 <= len; i++)
        if (body[i] == '\\') {
            if (body[i + 1] == 'u' && body[i + 2] == '0' && body[i + 3] == '0' && body[i + 4] == '0' &&
                body[i + 5] == '0') {
                vt_serve_error_set(err, 400, NULL, "a string holds \\u0000 (byte %zu): NUL "
                                   "characters are not accepted", i);
                return NULL;
            }
            i++; /* the escaped character */
        }
    /* the nesting is counted before cJSON recurses into it */
    int depth = 0, in_str = 0, esc = 0;
    for (size_t i = 0; i < len; i++) {
        char c = body[i];
        if (in_str) {
            if (esc) esc = 0;
            else if (c == '\\') esc = 1;
            else if (c == '"') in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '{' || c == '[') {
            if (++depth > VT_SERVE_MAX_DEPTH) {
                vt_serve_error_set(err, 400, NULL, "the JSON nests deeper than %d levels",
                                   VT_SERVE_MAX_DEPTH);
                return NULL;
            }
        } else if (c == '}' || c == ']') {
            depth--;
        }
    }
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (!j) {
        size_t at = end && end >= body && end <= body + len ? (size_t)(end - body) : 0;
        vt_serve_error_set(err, 400, NULL, "the request body is not valid JSON (near byte %zu)", at);
        return NULL;
    }
    /* only whitespace may follow the value */
    if (end) {
        while (end < body + len && (*end == ' ' || *end == '\n' || *end == '\r' || *end == '\t'))
            end++;
        if (end < body + len && *end) {
            vt_serve_error_set(err, 400, NULL, "the request body has data after the JSON value "
                               "(byte %zu)", (size_t)(end - body));
            cJSON_Delete(j);
            return NULL;
        }
    }
    if (!cJSON_IsObject(j) || !depth_ok(j, 0)) {
        vt_serve_error_set(err, 400, NULL, "the request body must be a JSON object");
        cJSON_Delete(j);
        return NULL;
    }
    /* a key twice in one object is ambiguous (parsers keep the first or the
     * last: a proxy and vt would read two different requests): refused */
    int oom = 0;
    const char *dup = duplicate_key(j, &oom);
    if (dup || oom) {
        if (oom) vt_serve_error_set(err, 500, NULL, "out of memory parsing the request");
        else vt_serve_error_set(err, 400, NULL, "the key '%s' appears twice in one object: "
                                "ambiguous, refused", dup);
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

#define OOM(err) (vt_serve_error_set((err), 500, NULL, "out of memory parsing the request"), -1)

/* A number field that must be an integer in [lo, hi]. */
static int get_int(const cJSON *v, const char *name, double lo, double hi, int64_t *out,
                   vt_serve_error *err)
{
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble != floor(v->valuedouble)) {
        vt_serve_error_set(err, 400, name, "'%s' must be an integer", name);
        return -1;
    }
    if (v->valuedouble < lo || v->valuedouble > hi) {
        vt_serve_error_set(err, 400, name, "'%s' must be in [%.0f, %.0f], got %.17g", name, lo, hi,
                           v->valuedouble);
        return -1;
    }
    *out = (int64_t)v->valuedouble;
    return 0;
}

static int get_float(const cJSON *v, const char *name, double lo, double hi, int lo_open,
                     float *out, vt_serve_error *err)
{
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
        vt_serve_error_set(err, 400, name, "'%s' must be a number", name);
        return -1;
    }
    double x = v->valuedouble;
    if (x > hi || x < lo || (lo_open && x == lo)) {
        vt_serve_error_set(err, 400, name, "'%s' must be in %c%g, %g], got %.17g", name,
                           lo_open ? '(' : '[', lo, hi, x);
        return -1;
    }
    *out = (float)x;
    return 0;
}

static int get_bool(const cJSON *v, const char *name, int *out, vt_serve_error *err)
{
    if (!cJSON_IsBool(v)) {
        vt_serve_error_set(err, 400, name, "'%s' must be true or false", name);
        return -1;
    }
    *out = cJSON_IsTrue(v);
    return 0;
}

/* Message content: a string, or an array of {"type":"text","text":...} parts (joined). */
static int get_content(const cJSON *v, size_t idx, char **out, vt_serve_error *err)
{
    char name[64];
    snprintf(name, sizeof name, "messages[%zu].content", idx);
    if (cJSON_IsString(v)) {
        if (!(*out = dup_str(v->valuestring))) return OOM(err);
        return 0;
    }
    if (cJSON_IsNull(v)) {
        if (!(*out = dup_str(""))) return OOM(err);
        return 0;
    }
    if (!cJSON_IsArray(v)) {
        vt_serve_error_set(err, 400, name, "'%s' must be a string or an array of text parts", name);
        return -1;
    }
    size_t total = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, v) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsObject(part) || !cJSON_IsString(type) || strcmp(type->valuestring, "text") ||
            !cJSON_IsString(text)) {
            vt_serve_error_set(err, 400, name, "'%s': only parts {\"type\": \"text\", \"text\": "
                               "string} are supported (no images or audio)", name);
            return -1;
        }
        total += strlen(text->valuestring);
    }
    char *s = malloc(total + 1);
    if (!s) return OOM(err);
    size_t off = 0;
    cJSON_ArrayForEach(part, v) {
        const char *t = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        size_t n = strlen(t);
        memcpy(s + off, t, n);
        off += n;
    }
    s[off] = 0;
    *out = s;
    return 0;
}

/* cJSON_AddItemToObject that frees v when it cannot be added. */
static int put(cJSON *o, const char *k, cJSON *v)
{
    if (v && cJSON_AddItemToObject(o, k, v)) return 0;
    cJSON_Delete(v);
    return -1;
}

/* An assistant message's tool_calls, checked, into the template's form
 * (arguments as a JSON object where they parse as one). */
static int parse_tool_calls(const cJSON *v, const char *name, cJSON *out, vt_serve_error *err)
{
    if (!cJSON_IsArray(v)) {
        vt_serve_error_set(err, 400, name, "'%s.tool_calls' must be an array", name);
        return -1;
    }
    cJSON *arr = cJSON_CreateArray();
    if (put(out, "tool_calls", arr)) return OOM(err);
    int i = 0;
    const cJSON *tc;
    cJSON_ArrayForEach(tc, v) {
        char at[96];
        snprintf(at, sizeof at, "%s.tool_calls[%d]", name, i++);
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(tc, "id");
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(tc, "type");
        const cJSON *fname = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        if (!cJSON_IsObject(tc) || !cJSON_IsObject(fn) || !cJSON_IsString(fname) ||
            (id && !cJSON_IsString(id)) ||
            (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "function"))) ||
            (args && !cJSON_IsString(args) && !cJSON_IsObject(args))) {
            vt_serve_error_set(err, 400, name, "'%s' must be {\"id\": string, \"type\": "
                               "\"function\", \"function\": {\"name\": string, \"arguments\": "
                               "JSON text}}", at);
            return -1;
        }
        cJSON *c = cJSON_CreateObject(), *f = cJSON_CreateObject();
        if (!cJSON_AddItemToArray(arr, c)) {
            cJSON_Delete(c);
            cJSON_Delete(f);
            return OOM(err);
        }
        if ((id && put(c, "id", cJSON_CreateString(id->valuestring))) ||
            put(c, "type", cJSON_CreateString("function")) || put(c, "function", f) ||
            put(f, "name", cJSON_CreateString(fname->valuestring)))
            return OOM(err);
        cJSON *a = NULL;
        if (cJSON_IsString(args)) { /* OpenAI sends JSON text; templates iterate a mapping */
            a = cJSON_Parse(args->valuestring);
            if (a && !cJSON_IsObject(a)) {
                cJSON_Delete(a);
                a = NULL;
            }
            if (!a) a = cJSON_CreateString(args->valuestring);
        } else {
            a = args ? cJSON_Duplicate(args, 1) : cJSON_CreateObject();
        }
        if (put(f, "arguments", a)) return OOM(err);
    }
    return 0;
}

static int parse_messages(const cJSON *v, vt_serve_request *r, vt_serve_error *err)
{
    if (!cJSON_IsArray(v)) {
        vt_serve_error_set(err, 400, "messages", "'messages' must be an array of messages");
        return -1;
    }
    int n = cJSON_GetArraySize(v);
    if (n == 0) {
        vt_serve_error_set(err, 400, "messages", "'messages' is empty");
        return -1;
    }
    if (n > VT_SERVE_MAX_MESSAGES) {
        vt_serve_error_set(err, 400, "messages", "'messages' has %d messages; at most %d", n,
                           VT_SERVE_MAX_MESSAGES);
        return -1;
    }
    if (!(r->msgs = calloc((size_t)n, sizeof *r->msgs))) return OOM(err);
    cJSON *tm = cJSON_CreateArray(); /* the messages as a template sees them */
    if (!tm) return OOM(err);
    int rc = -1;
    const cJSON *m;
    cJSON_ArrayForEach(m, v) {
        size_t i = r->n_msgs;
        char name[64];
        snprintf(name, sizeof name, "messages[%zu]", i);
        if (!cJSON_IsObject(m)) {
            vt_serve_error_set(err, 400, name, "'%s' must be an object", name);
            goto out;
        }
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsString(role) ||
            (strcmp(role->valuestring, "system") && strcmp(role->valuestring, "user") &&
             strcmp(role->valuestring, "assistant") && strcmp(role->valuestring, "developer") &&
             strcmp(role->valuestring, "tool"))) {
            vt_serve_error_set(err, 400, name, "'%s.role' must be one of system, developer, user, "
                               "assistant, tool", name);
            goto out;
        }
        const int assistant = !strcmp(role->valuestring, "assistant");
        for (const cJSON *f = m->child; f; f = f->next) {
            const char *k = f->string;
            if (!strcmp(k, "role") || !strcmp(k, "content")) continue;
            if (!strcmp(k, "name") || !strcmp(k, "tool_call_id") ||
                (assistant && !strcmp(k, "reasoning_content"))) {
                if (!cJSON_IsString(f) && !cJSON_IsNull(f)) {
                    vt_serve_error_set(err, 400, name, "'%s.%s' must be a string", name, k);
                    goto out;
                }
                continue;
            }
            if (assistant && !strcmp(k, "tool_calls")) continue;
            vt_serve_error_set(err, 400, name, "'%s.%s' is not supported (known: role, content, "
                               "name, tool_call_id%s)", name, k,
                               assistant ? ", tool_calls, reasoning_content" : "");
            goto out;
        }
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        if (cJSON_IsNull(calls)) calls = NULL;
        if (!content && !calls) {
            vt_serve_error_set(err, 400, name, "'%s' has no content", name);
            goto out;
        }
        if (!(r->msgs[i].role = dup_str(role->valuestring))) {
            rc = OOM(err);
            goto out;
        }
        r->n_msgs++;
        if (content) {
            if (get_content(content, i, &r->msgs[i].content, err)) goto out;
        } else if (!(r->msgs[i].content = dup_str(""))) { /* tool_calls alone: no text */
            rc = OOM(err);
            goto out;
        }
        cJSON *o = cJSON_CreateObject();
        if (!cJSON_AddItemToArray(tm, o)) {
            cJSON_Delete(o);
            rc = OOM(err);
            goto out;
        }
        if (put(o, "role", cJSON_CreateString(role->valuestring)) ||
            put(o, "content", cJSON_CreateString(r->msgs[i].content))) {
            rc = OOM(err);
            goto out;
        }
        static const char *const strs[] = {"name", "tool_call_id", "reasoning_content"};
        for (size_t k = 0; k < sizeof strs / sizeof *strs; k++) {
            const cJSON *s = cJSON_GetObjectItemCaseSensitive(m, strs[k]);
            if (cJSON_IsString(s) && put(o, strs[k], cJSON_CreateString(s->valuestring))) {
                rc = OOM(err);
                goto out;
            }
        }
        if (calls) {
            if (parse_tool_calls(calls, name, o, err)) goto out;
            r->has_tool_calls = 1;
        }
    }
    if (!(r->tmpl_messages = cJSON_PrintUnformatted(tm))) {
        rc = OOM(err);
        goto out;
    }
    rc = 0;
out:
    cJSON_Delete(tm);
    return rc;
}

static int parse_stop(const cJSON *v, vt_serve_request *r, vt_serve_error *err)
{
    if (cJSON_IsNull(v)) return 0;
    if (cJSON_IsString(v)) {
        if (!v->valuestring[0]) return 0;
        if (!(r->stop[0] = dup_str(v->valuestring))) return OOM(err);
        r->n_stop = 1;
        return 0;
    }
    if (!cJSON_IsArray(v)) {
        vt_serve_error_set(err, 400, "stop", "'stop' must be a string or an array of strings");
        return -1;
    }
    if (cJSON_GetArraySize(v) > VT_SERVE_MAX_STOP) {
        vt_serve_error_set(err, 400, "stop", "'stop' has %d strings; at most %d",
                           cJSON_GetArraySize(v), VT_SERVE_MAX_STOP);
        return -1;
    }
    const cJSON *s;
    cJSON_ArrayForEach(s, v) {
        if (!cJSON_IsString(s)) {
            vt_serve_error_set(err, 400, "stop", "'stop' must hold strings only");
            return -1;
        }
        if (!s->valuestring[0]) continue;
        if (!(r->stop[r->n_stop] = dup_str(s->valuestring))) return OOM(err);
        r->n_stop++;
    }
    return 0;
}

static int parse_prompt(const cJSON *v, vt_serve_request *r, vt_serve_error *err)
{
    if (cJSON_IsString(v)) {
        if (!(r->prompt = dup_str(v->valuestring))) return OOM(err);
        return 0;
    }
    /* ["one string"] or [token ids] */
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1 && cJSON_IsString(v->child)) {
        if (!(r->prompt = dup_str(v->child->valuestring))) return OOM(err);
        return 0;
    }
    if (cJSON_IsArray(v) && cJSON_IsString(v->child)) {
        vt_serve_error_set(err, 400, "prompt", "'prompt' holds %d strings: batches of prompts are "
                           "not supported (one request per prompt)", cJSON_GetArraySize(v));
        return -1;
    }
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) > 0) {
        int n = cJSON_GetArraySize(v);
        if (!(r->prompt_ids = malloc((size_t)n * sizeof *r->prompt_ids))) return OOM(err);
        const cJSON *t;
        cJSON_ArrayForEach(t, v) {
            int64_t id;
            if (get_int(t, "prompt", 0, INT32_MAX, &id, err)) {
                snprintf(err->message, sizeof err->message, "'prompt' must be a string, an array "
                         "of one string or an array of token ids (integers >= 0); element %zu is "
                         "not", r->n_prompt_ids);
                return -1;
            }
            r->prompt_ids[r->n_prompt_ids++] = (int32_t)id;
        }
        return 0;
    }
    vt_serve_error_set(err, 400, "prompt", "'prompt' must be a string, an array of one string or "
                       "a non-empty array of token ids (batches of prompts are not supported)");
    return -1;
}

/* "tools": [{"type": "function", "function": {"name", "description"?,
 * "parameters"?}}], kept as compact JSON for the template and the parser. */
static int parse_tools(const cJSON *v, vt_serve_request *r, vt_serve_error *err)
{
    if (cJSON_IsNull(v)) return 0;
    if (!cJSON_IsArray(v)) {
        vt_serve_error_set(err, 400, "tools", "'tools' must be an array of tools");
        return -1;
    }
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, v) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        const cJSON *desc = cJSON_GetObjectItemCaseSensitive(fn, "description");
        if (!cJSON_IsObject(t) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") ||
            !cJSON_IsObject(fn) || !cJSON_IsString(name) || !name->valuestring[0] ||
            (params && !cJSON_IsObject(params)) || (desc && !cJSON_IsString(desc))) {
            vt_serve_error_set(err, 400, "tools", "'tools[%d]' must be {\"type\": \"function\", "
                               "\"function\": {\"name\": string, \"description\": string, "
                               "\"parameters\": JSON schema object}}", i);
            return -1;
        }
        i++;
    }
    if (i && !(r->tools = cJSON_PrintUnformatted(v))) return OOM(err);
    return 0;
}

/* "tool_choice": "auto" | "none" | "required" | {"type": "function",
 * "function": {"name": NAME}} (NAME checked against tools after all fields) */
static int parse_tool_choice(const cJSON *v, vt_serve_request *r, vt_serve_error *err)
{
    if (cJSON_IsNull(v)) return 0;
    static const char *const names[] = {"auto", "none", "required"};
    for (int i = 0; cJSON_IsString(v) && i < 3; i++)
        if (!strcmp(v->valuestring, names[i])) {
            r->tool_choice = (vt_serve_tool_choice)(i == 0 ? VT_SERVE_TOOLS_AUTO : i == 1 ? VT_SERVE_TOOLS_NONE
                                                                                   : VT_SERVE_TOOLS_REQUIRED);
            return 0;
        }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(v, "type");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(v, "function"), "name");
    if (cJSON_IsObject(v) && cJSON_IsString(type) && !strcmp(type->valuestring, "function") &&
        cJSON_IsString(name) && name->valuestring[0]) {
        r->tool_choice = VT_SERVE_TOOLS_NAMED;
        if (!(r->tool_name = dup_str(name->valuestring))) return OOM(err);
        return 0;
    }
    vt_serve_error_set(err, 400, "tool_choice", "'tool_choice' must be \"auto\", \"none\", "
                       "\"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    return -1;
}

static int parse_fields(const cJSON *j, vt_serve_kind kind, vt_serve_request *r,
                        vt_serve_error *err)
{
    const int chat = kind == VT_SERVE_CHAT;
    int64_t x;
    /* a key given twice was refused by parse_object (duplicate_key) */
    for (const cJSON *f = j->child; f; f = f->next) {
        const char *k = f->string;
        if (!strcmp(k, "model")) {
            if (!cJSON_IsString(f)) {
                vt_serve_error_set(err, 400, k, "'model' must be a string");
                return -1;
            }
            if (!(r->model = dup_str(f->valuestring))) return OOM(err);
        } else if (chat && !strcmp(k, "messages")) {
            if (parse_messages(f, r, err)) return -1;
        } else if (!chat && !strcmp(k, "prompt")) {
            if (parse_prompt(f, r, err)) return -1;
        } else if (!strcmp(k, "max_tokens") || (chat && !strcmp(k, "max_completion_tokens"))) {
            if (cJSON_IsNull(f)) continue;
            if (r->max_tokens != -1) {
                vt_serve_error_set(err, 400, k, "give 'max_tokens' or 'max_completion_tokens', not both");
                return -1;
            }
            if (get_int(f, k, 1, INT32_MAX, &x, err)) return -1;
            r->max_tokens = x;
        } else if (!strcmp(k, "temperature")) {
            if (get_float(f, k, 0, 2, 0, &r->temperature, err)) return -1;
            r->given |= VT_SERVE_GIVEN_TEMP;
        } else if (!strcmp(k, "top_p")) {
            if (get_float(f, k, 0, 1, 1, &r->top_p, err)) return -1;
            r->given |= VT_SERVE_GIVEN_TOP_P;
        } else if (!strcmp(k, "top_k")) {
            if (get_int(f, k, 0, INT32_MAX, &x, err)) return -1;
            r->top_k = (int32_t)x;
            r->given |= VT_SERVE_GIVEN_TOP_K;
        } else if (!strcmp(k, "min_p")) {
            if (get_float(f, k, 0, 1, 0, &r->min_p, err)) return -1;
            r->given |= VT_SERVE_GIVEN_MIN_P;
        } else if (!strcmp(k, "seed")) {
            if (cJSON_IsNull(f)) continue;
            /* a double holds integers exactly up to 2^53 */
            if (get_int(f, k, -9007199254740992.0, 9007199254740992.0, &x, err)) return -1;
            r->seed = (uint64_t)x;
            r->have_seed = 1;
        } else if (!strcmp(k, "stop")) {
            if (parse_stop(f, r, err)) return -1;
        } else if (!strcmp(k, "stream")) {
            if (cJSON_IsNull(f)) continue;
            if (get_bool(f, k, &r->stream, err)) return -1;
        } else if (!strcmp(k, "stream_options")) {
            if (cJSON_IsNull(f)) continue;
            if (!cJSON_IsObject(f)) {
                vt_serve_error_set(err, 400, k, "'stream_options' must be an object");
                return -1;
            }
            for (const cJSON *o = f->child; o; o = o->next) {
                if (!strcmp(o->string, "include_usage")) {
                    if (get_bool(o, "stream_options.include_usage", &r->include_usage, err)) return -1;
                } else {
                    vt_serve_error_set(err, 400, "stream_options", "'stream_options.%s' is not "
                                       "supported (known: include_usage)", o->string);
                    return -1;
                }
            }
        } else if (chat && !strcmp(k, "logprobs")) {
            if (cJSON_IsNull(f)) continue;
            if (get_bool(f, k, &r->logprobs, err)) return -1;
        } else if (!chat && !strcmp(k, "logprobs")) {
            if (cJSON_IsNull(f)) continue;
            if (get_int(f, k, 0, VT_SERVE_MAX_TOP_LOGPROBS, &x, err)) return -1;
            r->logprobs = 1;
            r->top_logprobs = (int)x;
        } else if (chat && !strcmp(k, "top_logprobs")) {
            if (cJSON_IsNull(f)) continue;
            if (get_int(f, k, 0, VT_SERVE_MAX_TOP_LOGPROBS, &x, err)) return -1;
            r->top_logprobs = (int)x;
        } else if (!strcmp(k, "n")) {
            if (get_int(f, k, 1, 1, &x, err)) {
                snprintf(err->message, sizeof err->message, "'n' must be 1: one choice per request "
                         "(send several requests for several choices)");
                return -1;
            }
        } else if (!strcmp(k, "presence_penalty") || !strcmp(k, "frequency_penalty")) {
            float p;
            if (get_float(f, k, -2, 2, 0, &p, err)) return -1;
            if (p != 0) {
                vt_serve_error_set(err, 400, k, "'%s' is not supported (only 0)", k);
                return -1;
            }
        } else if (!chat && !strcmp(k, "echo")) {
            if (get_bool(f, k, &r->echo, err)) return -1;
            if (r->echo) {
                vt_serve_error_set(err, 400, k, "'echo': true is not supported");
                return -1;
            }
        } else if (!strcmp(k, "ignore_eos")) { /* llama-server's */
            if (get_bool(f, k, &r->ignore_eos, err)) return -1;
        } else if (!strcmp(k, "user")) {
            if (!cJSON_IsString(f)) {
                vt_serve_error_set(err, 400, k, "'user' must be a string");
                return -1;
            }
        } else if (chat && !strcmp(k, "chat_template_kwargs")) {
            if (!cJSON_IsObject(f)) {
                vt_serve_error_set(err, 400, k, "'chat_template_kwargs' must be an object");
                return -1;
            }
            static const char *const reserved[] = {"messages", "tools", "add_generation_prompt",
                                                   "bos_token", "eos_token"};
            for (const cJSON *o = f->child; o; o = o->next) {
                if (!strcmp(o->string, "enable_thinking")) {
                    if (get_bool(o, "chat_template_kwargs.enable_thinking", &r->thinking, err))
                        return -1;
                }
                for (size_t q = 0; q < sizeof reserved / sizeof *reserved; q++)
                    if (!strcmp(o->string, reserved[q])) {
                        vt_serve_error_set(err, 400, k, "'chat_template_kwargs.%s' is set by the "
                                           "server, not by the request", o->string);
                        return -1;
                    }
            }
            if (!(r->template_kwargs = cJSON_PrintUnformatted(f))) return OOM(err);
        } else if (chat && !strcmp(k, "tools")) {
            if (parse_tools(f, r, err)) return -1;
        } else if (chat && !strcmp(k, "tool_choice")) {
            if (parse_tool_choice(f, r, err)) return -1;
        } else if (chat && !strcmp(k, "parallel_tool_calls")) {
            int on;
            if (get_bool(f, k, &on, err)) return -1; /* several calls are read either way */
        } else if (chat && !strcmp(k, "response_format")) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(f, "type");
            if (!cJSON_IsObject(f) || !cJSON_IsString(t)) {
                vt_serve_error_set(err, 400, k, "'response_format' must be an object with a "
                                   "string 'type'");
                return -1;
            }
            if (!strcmp(t->valuestring, "json_object")) {
                r->json = 1;
            } else if (!strcmp(t->valuestring, "json_schema")) {
                const cJSON *js = cJSON_GetObjectItemCaseSensitive(f, "json_schema");
                const cJSON *sc = cJSON_GetObjectItemCaseSensitive(js, "schema");
                if (!cJSON_IsObject(js) || (sc && !cJSON_IsObject(sc))) {
                    vt_serve_error_set(err, 400, k, "'response_format.json_schema' must be an "
                                       "object whose 'schema' is a JSON schema object");
                    return -1;
                }
                r->json = 2;
                if (sc && !(r->json_schema = cJSON_PrintUnformatted(sc))) return OOM(err);
            } else if (strcmp(t->valuestring, "text")) {
                vt_serve_error_set(err, 400, k, "'response_format' type '%s' is not one of text, "
                                   "json_object, json_schema", t->valuestring);
                return -1;
            }
        } else {
            vt_serve_error_set(err, 400, k, "unknown field '%s'", k);
            return -1;
        }
    }
    if (chat && !r->msgs) {
        vt_serve_error_set(err, 400, "messages", "'messages' is required");
        return -1;
    }
    if (!chat && !r->prompt && !r->prompt_ids) {
        vt_serve_error_set(err, 400, "prompt", "'prompt' is required");
        return -1;
    }
    if (r->json && r->n_stop) {
        vt_serve_error_set(err, 400, "stop", "'stop' would cut a JSON answer ('response_format' "
                           "%s) short of a whole document: give one of them",
                           r->json == 1 ? "json_object" : "json_schema");
        return -1;
    }
    if (r->tool_choice >= VT_SERVE_TOOLS_REQUIRED && r->json) {
        vt_serve_error_set(err, 400, "tool_choice", "'tool_choice' forces a tool call and "
                           "'response_format' JSON: give one of them");
        return -1;
    }
    if (r->tool_choice >= VT_SERVE_TOOLS_REQUIRED) { /* a call is forced: of a tool given */
        cJSON *tools = r->tools ? cJSON_Parse(r->tools) : NULL;
        int found = 0;
        const cJSON *t;
        cJSON_ArrayForEach(t, tools) {
            const char *n = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(t, "function"), "name"));
            found |= n && (!r->tool_name || !strcmp(n, r->tool_name));
        }
        cJSON_Delete(tools);
        if (!found) {
            vt_serve_error_set(err, 400, "tool_choice", r->tool_name ? "'tool_choice' names '%s', "
                               "which is not one of 'tools'" : "'tool_choice' \"required\" needs "
                               "'tools'%s", r->tool_name ? r->tool_name : "");
            return -1;
        }
    }
    if (chat && r->top_logprobs > 0 && !r->logprobs) {
        vt_serve_error_set(err, 400, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
        return -1;
    }
    if (r->include_usage && !r->stream) {
        vt_serve_error_set(err, 400, "stream_options", "'stream_options' needs 'stream': true");
        return -1;
    }
    return 0;
}

int vt_serve_parse_request(vt_serve_kind kind, const char *body, size_t len,
                           vt_serve_request *out, vt_serve_error *err)
{
    memset(out, 0, sizeof *out);
    out->kind = kind;
    out->max_tokens = -1;
    out->temperature = 1.0f;
    out->top_p = 1.0f;
    out->thinking = -1;
    cJSON *j = vt_serve_parse_body(body, len, err);
    if (!j) return -1;
    int rc = parse_fields(j, kind, out, err);
    cJSON_Delete(j);
    if (rc) vt_serve_request_free(out);
    return rc;
}

void vt_serve_request_free(vt_serve_request *r)
{
    if (!r) return;
    free(r->model);
    for (size_t i = 0; i < r->n_msgs; i++) {
        free(r->msgs[i].role);
        free(r->msgs[i].content);
    }
    free(r->msgs);
    free(r->prompt);
    free(r->prompt_ids);
    for (size_t i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->tmpl_messages);
    free(r->tools);
    free(r->template_kwargs);
    free(r->json_schema);
    free(r->tool_name);
    memset(r, 0, sizeof *r);
}

int vt_serve_parse_tokenize(const char *body, size_t len, vt_serve_tokenize_req *out,
                            vt_serve_error *err)
{
    memset(out, 0, sizeof *out);
    out->add_special = 0;
    out->parse_special = 1;
    cJSON *j = vt_serve_parse_body(body, len, err);
    if (!j) return -1;
    int rc = -1;
    for (const cJSON *f = j->child; f; f = f->next) {
        if (!strcmp(f->string, "content")) {
            if (!cJSON_IsString(f)) {
                vt_serve_error_set(err, 400, "content", "'content' must be a string");
                goto out;
            }
            free(out->content);
            if (!(out->content = dup_str(f->valuestring))) {
                vt_serve_error_set(err, 500, NULL, "out of memory parsing the request");
                goto out;
            }
        } else if (!strcmp(f->string, "add_special")) {
            if (get_bool(f, "add_special", &out->add_special, err)) goto out;
        } else if (!strcmp(f->string, "parse_special")) {
            if (get_bool(f, "parse_special", &out->parse_special, err)) goto out;
        } else if (!strcmp(f->string, "with_pieces")) {
            if (get_bool(f, "with_pieces", &out->with_pieces, err)) goto out;
        } else {
            vt_serve_error_set(err, 400, f->string, "unknown field '%s' (known: content, "
                               "add_special, parse_special, with_pieces)", f->string);
            goto out;
        }
    }
    if (!out->content) {
        vt_serve_error_set(err, 400, "content", "'content' is required");
        goto out;
    }
    rc = 0;
out:
    if (rc) {
        free(out->content);
        out->content = NULL;
    }
    cJSON_Delete(j);
    return rc;
}

int vt_serve_parse_detokenize(const char *body, size_t len, int64_t n_vocab, int32_t **ids,
                              size_t *n, vt_serve_error *err)
{
    *ids = NULL;
    *n = 0;
    cJSON *j = vt_serve_parse_body(body, len, err);
    if (!j) return -1;
    int rc = -1;
    const cJSON *t = NULL;
    for (const cJSON *f = j->child; f; f = f->next) {
        if (!strcmp(f->string, "tokens")) {
            t = f;
        } else {
            vt_serve_error_set(err, 400, f->string, "unknown field '%s' (known: tokens)", f->string);
            goto out;
        }
    }
    if (!cJSON_IsArray(t)) {
        vt_serve_error_set(err, 400, "tokens", "'tokens' (an array of token ids) is required");
        goto out;
    }
    int cnt = cJSON_GetArraySize(t);
    if (cnt > 0 && !(*ids = malloc((size_t)cnt * sizeof **ids))) {
        vt_serve_error_set(err, 500, NULL, "out of memory parsing the request");
        goto out;
    }
    const cJSON *v;
    cJSON_ArrayForEach(v, t) {
        int64_t id;
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 ||
            v->valuedouble >= (double)n_vocab) {
            vt_serve_error_set(err, 400, "tokens", "'tokens[%zu]' is not a token id: ids are "
                               "integers in [0, %lld)", *n, (long long)n_vocab);
            goto out;
        }
        id = (int64_t)v->valuedouble;
        (*ids)[(*n)++] = (int32_t)id;
    }
    rc = 0;
out:
    if (rc) {
        free(*ids);
        *ids = NULL;
        *n = 0;
    }
    cJSON_Delete(j);
    return rc;
}
