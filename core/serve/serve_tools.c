/*
 * serve_tools.c - a model's tool calls read back into OpenAI's shape
 * (serve_tools.h).
 */
#include "serve_tools.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QWEN_OPEN "<tool_call>"
#define QWEN_CLOSE "</tool_call>"
#define GEMMA_OPEN "<|tool_call>"
#define GEMMA_CLOSE "<tool_call|>"
#define GEMMA_QUOTE "<|\"|>"

/* nesting of a Gemma 4 argument value, well past what a schema holds */
enum { MAX_VALUE_DEPTH = 64 };

vt_tool_syntax vt_tool_syntax_for(const char *family, const char *chat_template)
{
    if (chat_template) {
        if (strstr(chat_template, GEMMA_OPEN)) return VT_TOOL_SYNTAX_GEMMA4;
        if (strstr(chat_template, QWEN_OPEN) && strstr(chat_template, "<function=") &&
            strstr(chat_template, "<parameter="))
            return VT_TOOL_SYNTAX_QWEN;
        if (strstr(chat_template, "tools")) return VT_TOOL_SYNTAX_NONE; /* another syntax */
    }
    if (family && !strcmp(family, "qwen35")) return VT_TOOL_SYNTAX_QWEN;
    if (family && !strcmp(family, "gemma4")) return VT_TOOL_SYNTAX_GEMMA4;
    return VT_TOOL_SYNTAX_NONE;
}

const char *vt_tool_call_open(vt_tool_syntax syn)
{
    return syn == VT_TOOL_SYNTAX_QWEN ? QWEN_OPEN : syn == VT_TOOL_SYNTAX_GEMMA4 ? GEMMA_OPEN : "";
}

const char *vt_tool_call_close(vt_tool_syntax syn)
{
    return syn == VT_TOOL_SYNTAX_QWEN ? QWEN_CLOSE : syn == VT_TOOL_SYNTAX_GEMMA4 ? GEMMA_CLOSE : "";
}

int vt_tool_syntax_marker(vt_tool_syntax syn, const char *text, size_t n)
{
    const char *m[3] = {vt_tool_call_open(syn), vt_tool_call_close(syn),
                        syn == VT_TOOL_SYNTAX_GEMMA4 ? GEMMA_QUOTE : ""};
    for (int i = 0; i < 3; i++)
        if (*m[i] && strlen(m[i]) == n && !memcmp(m[i], text, n)) return 1;
    return 0;
}

/* A cursor over the call's text; err set (and why written) on the first problem. */
typedef struct cur {
    const char *p, *end, *start;
    char *why;
    size_t cap;
    int err; /* -1 syntax, -2 out of memory */
} cur;

__attribute__((format(printf, 2, 3))) static void fail(cur *c, const char *fmt, ...)
{
    if (c->err) return;
    c->err = -1;
    int k = snprintf(c->why, c->cap, "at byte %zu: ", (size_t)(c->p - c->start));
    if (k < 0 || (size_t)k >= c->cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->why + k, c->cap - (size_t)k, fmt, ap);
    va_end(ap);
}

static void *oom(cur *c)
{
    if (!c->err) {
        c->err = -2;
        snprintf(c->why, c->cap, "out of memory");
    }
    return NULL;
}

static void skip_ws(cur *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\t' || *c->p == '\r'))
        c->p++;
}

static int take(cur *c, const char *lit)
{
    size_t n = strlen(lit);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, lit, n)) return 0;
    c->p += n;
    return 1;
}

static const char *find(const cur *c, const char *lit)
{
    return memmem(c->p, (size_t)(c->end - c->p), lit, strlen(lit));
}

static char *dup_n(cur *c, const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (!d) return oom(c);
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

/* The schema of parameter key of tool name in the request's tools, or NULL. */
static const cJSON *param_schema(const cJSON *tools, const char *name, const char *key)
{
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function");
        const char *fn = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(f, "name"));
        if (!fn || strcmp(fn, name)) continue;
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(f, "parameters"), "properties");
        return cJSON_GetObjectItemCaseSensitive(props, key);
    }
    return NULL;
}

/* Does JSON value v have the JSON-schema type named t? */
static int has_type(const cJSON *v, const char *t)
{
    if (!strcmp(t, "string")) return cJSON_IsString(v);
    if (!strcmp(t, "number")) return cJSON_IsNumber(v);
    if (!strcmp(t, "integer")) /* whole; from 2^53 on every double is (and no cast overflows) */
        return cJSON_IsNumber(v) && (fabs(v->valuedouble) >= 9007199254740992.0 ||
                                     v->valuedouble == (double)(int64_t)v->valuedouble);
    if (!strcmp(t, "boolean")) return cJSON_IsBool(v);
    if (!strcmp(t, "object")) return cJSON_IsObject(v);
    if (!strcmp(t, "array")) return cJSON_IsArray(v);
    if (!strcmp(t, "null")) return cJSON_IsNull(v);
    return 0;
}

/* A qwen parameter's raw text as the JSON value its schema asks for. */
static cJSON *typed_value(cur *c, const char *s, size_t n, const cJSON *schema)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(schema, "type");
    char *text = dup_n(c, s, n);
    if (!text) return NULL;
    cJSON *v = NULL;
    if (!(cJSON_IsString(type) && !strcmp(type->valuestring, "string"))) {
        const char *endp = NULL;
        v = cJSON_ParseWithOpts(text, &endp, 1);
        int ok = v != NULL;
        if (ok && cJSON_IsString(type)) {
            ok = has_type(v, type->valuestring);
        } else if (ok && cJSON_IsArray(type)) {
            ok = 0;
            const cJSON *t;
            cJSON_ArrayForEach(t, type) if (cJSON_IsString(t) && has_type(v, t->valuestring)) ok = 1;
        }
        if (!ok) {
            cJSON_Delete(v);
            v = NULL;
        }
    }
    if (!v) v = cJSON_CreateString(text);
    free(text);
    return v ? v : oom(c);
}

static int add_member(cur *c, cJSON *obj, const char *key, cJSON *v)
{
    if (!v) return -1;
    if (cJSON_GetObjectItemCaseSensitive(obj, key)) {
        cJSON_Delete(v);
        fail(c, "argument '%s' given twice", key);
        return -1;
    }
    if (!cJSON_AddItemToObject(obj, key, v)) {
        cJSON_Delete(v);
        oom(c);
        return -1;
    }
    return 0;
}

/* \n<function=NAME>\n<parameter=K>\nV\n</parameter>\n...</function>\n */
static cJSON *parse_qwen(cur *c, const cJSON *tools, char **name)
{
    skip_ws(c);
    if (!take(c, "<function=")) {
        fail(c, "expected '<function=NAME>'");
        return NULL;
    }
    const char *gt = find(c, ">");
    if (!gt || gt == c->p || memchr(c->p, '\n', (size_t)(gt - c->p))) {
        fail(c, "a function name ended by '>' expected");
        return NULL;
    }
    if (!(*name = dup_n(c, c->p, (size_t)(gt - c->p)))) return NULL;
    c->p = gt + 1;
    cJSON *args = cJSON_CreateObject();
    if (!args) return oom(c);
    for (;;) {
        skip_ws(c);
        if (take(c, "</function>")) {
            skip_ws(c);
            if (c->p != c->end) fail(c, "text after '</function>'");
            break;
        }
        if (c->p == c->end) { /* the model stopped before </function>: what it wrote stands */
            break;
        }
        if (!take(c, "<parameter=")) {
            fail(c, "expected '<parameter=KEY>' or '</function>'");
            break;
        }
        const char *kgt = find(c, ">");
        if (!kgt || kgt == c->p || memchr(c->p, '\n', (size_t)(kgt - c->p))) {
            fail(c, "a parameter name ended by '>' expected");
            break;
        }
        char *key = dup_n(c, c->p, (size_t)(kgt - c->p));
        if (!key) break;
        c->p = kgt + 1;
        if (c->p < c->end && *c->p == '\n') c->p++;
        const char *close = find(c, "</parameter>");
        if (!close) {
            fail(c, "parameter '%s' has no '</parameter>'", key);
            free(key);
            break;
        }
        const char *vend = close > c->p && close[-1] == '\n' ? close - 1 : close;
        int bad = add_member(c, args, key,
                             typed_value(c, c->p, (size_t)(vend - c->p), param_schema(tools, *name, key)));
        free(key);
        if (bad) break;
        c->p = close + strlen("</parameter>");
    }
    if (c->err) {
        cJSON_Delete(args);
        return NULL;
    }
    return args;
}

/* ---- Gemma 4: call:NAME{KEY:VALUE,...} ---- */

static cJSON *gemma_value(cur *c, int depth);

/* A key: <|"|>text<|"|> or the bare text before ':' */
static char *gemma_key(cur *c)
{
    skip_ws(c);
    if (take(c, GEMMA_QUOTE)) {
        const char *q = find(c, GEMMA_QUOTE);
        if (!q) {
            fail(c, "a quoted key has no closing <|\"|>");
            return NULL;
        }
        char *k = dup_n(c, c->p, (size_t)(q - c->p));
        c->p = q + strlen(GEMMA_QUOTE);
        return k;
    }
    const char *s = c->p;
    while (c->p < c->end && *c->p != ':' && *c->p != ',' && *c->p != '}' && *c->p != '{')
        c->p++;
    const char *e = c->p;
    while (e > s && (e[-1] == ' ' || e[-1] == '\n')) e--;
    if (e == s || c->p == c->end || *c->p != ':') {
        fail(c, "expected KEY:VALUE");
        return NULL;
    }
    if (e - s >= 2 && *s == '"' && e[-1] == '"') s++, e--; /* a JSON-quoted key */
    return dup_n(c, s, (size_t)(e - s));
}

static cJSON *gemma_object(cur *c, int depth)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) return oom(c);
    skip_ws(c);
    if (take(c, "}")) return o;
    for (;;) {
        char *k = gemma_key(c);
        if (!k) break;
        skip_ws(c);
        if (!take(c, ":")) {
            fail(c, "':' expected after key '%s'", k);
            free(k);
            break;
        }
        int bad = add_member(c, o, k, gemma_value(c, depth + 1));
        free(k);
        if (bad) break;
        skip_ws(c);
        if (take(c, "}")) return o;
        if (!take(c, ",")) {
            fail(c, "',' or '}' expected");
            break;
        }
    }
    cJSON_Delete(o);
    return NULL;
}

static cJSON *gemma_array(cur *c, int depth)
{
    cJSON *a = cJSON_CreateArray();
    if (!a) return oom(c);
    skip_ws(c);
    if (take(c, "]")) return a;
    for (;;) {
        cJSON *v = gemma_value(c, depth + 1);
        if (!v) break;
        if (!cJSON_AddItemToArray(a, v)) {
            cJSON_Delete(v);
            oom(c);
            break;
        }
        skip_ws(c);
        if (take(c, "]")) return a;
        if (!take(c, ",")) {
            fail(c, "',' or ']' expected");
            break;
        }
    }
    cJSON_Delete(a);
    return NULL;
}

static cJSON *gemma_value(cur *c, int depth)
{
    if (depth > MAX_VALUE_DEPTH) {
        fail(c, "arguments nested deeper than %d", MAX_VALUE_DEPTH);
        return NULL;
    }
    skip_ws(c);
    if (take(c, GEMMA_QUOTE)) {
        const char *q = find(c, GEMMA_QUOTE);
        if (!q) {
            fail(c, "a string has no closing <|\"|>");
            return NULL;
        }
        char *s = dup_n(c, c->p, (size_t)(q - c->p));
        if (!s) return NULL;
        c->p = q + strlen(GEMMA_QUOTE);
        cJSON *v = cJSON_CreateString(s);
        free(s);
        return v ? v : oom(c);
    }
    if (take(c, "{")) return gemma_object(c, depth);
    if (take(c, "[")) return gemma_array(c, depth);
    /* a bare scalar up to the next ',', '}' or ']' */
    const char *s = c->p;
    while (c->p < c->end && *c->p != ',' && *c->p != '}' && *c->p != ']') c->p++;
    const char *e = c->p;
    while (e > s && (e[-1] == ' ' || e[-1] == '\n')) e--;
    if (e == s) {
        fail(c, "a value expected");
        return NULL;
    }
    char *text = dup_n(c, s, (size_t)(e - s));
    if (!text) return NULL;
    const char *endp = NULL;
    cJSON *v = cJSON_ParseWithOpts(text, &endp, 1);
    if (v && !cJSON_IsNumber(v) && !cJSON_IsBool(v) && !cJSON_IsNull(v)) {
        cJSON_Delete(v);
        v = NULL;
    }
    if (!v) v = cJSON_CreateString(text); /* an unquoted word: kept as the text it is */
    free(text);
    return v ? v : oom(c);
}

/* Gemma 4 writes its values untyped where a string needs no quotes: each
 * top-level argument takes its schema's type where its text reads as one
 * (a number or boolean for a "string" parameter becomes its text; "true" /
 * "false" for a "boolean" one, a number's text for "integer" / "number",
 * their values). */
static int gemma_types(cur *c, cJSON *args, const cJSON *tools, const char *name)
{
    for (cJSON *a = args->child; a; a = a->next) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(param_schema(tools, name, a->string), "type");
        const char *t = cJSON_GetStringValue(ty);
        if (!t) continue;
        cJSON *v = NULL;
        if (!strcmp(t, "string") && (cJSON_IsNumber(a) || cJSON_IsBool(a))) {
            char *txt = cJSON_PrintUnformatted(a);
            v = txt ? cJSON_CreateString(txt) : NULL;
            free(txt);
            if (!v) return oom(c), -1;
        } else if (cJSON_IsString(a) && (!strcmp(t, "boolean") || !strcmp(t, "integer") || !strcmp(t, "number"))) {
            const char *endp = NULL;
            v = cJSON_ParseWithOpts(a->valuestring, &endp, 1);
            if (v && !has_type(v, t)) {
                cJSON_Delete(v);
                v = NULL;
            }
        }
        if (v && !cJSON_ReplaceItemInObjectCaseSensitive(args, a->string, v)) {
            cJSON_Delete(v);
            return oom(c), -1;
        }
        if (v) a = v; /* the replacement holds a's place in the list */
    }
    return 0;
}

static cJSON *parse_gemma(cur *c, const cJSON *tools, char **name)
{
    skip_ws(c);
    if (!take(c, "call:")) {
        fail(c, "expected 'call:NAME{'");
        return NULL;
    }
    const char *br = find(c, "{");
    if (!br || br == c->p || memchr(c->p, '\n', (size_t)(br - c->p))) {
        fail(c, "a function name followed by '{' expected");
        return NULL;
    }
    const char *ne = br;
    while (ne > c->p && (ne[-1] == ' ' || ne[-1] == '\t')) ne--; /* "call:NAME {" */
    if (ne == c->p) {
        fail(c, "a function name followed by '{' expected");
        return NULL;
    }
    if (!(*name = dup_n(c, c->p, (size_t)(ne - c->p)))) return NULL;
    c->p = br + 1;
    cJSON *args = gemma_object(c, 0);
    if (args) {
        skip_ws(c);
        if (c->p != c->end) fail(c, "text after the arguments' '}'");
        else gemma_types(c, args, tools, *name);
    }
    if (c->err) {
        cJSON_Delete(args);
        return NULL;
    }
    return args;
}

int vt_tool_call_parse(vt_tool_syntax syn, const char *body, size_t n, const cJSON *tools,
                       char **name, char **arguments, char *why, size_t cap)
{
    char scratch[8];
    cur c = {body, body + n, body, why && cap ? why : scratch, why && cap ? cap : sizeof scratch, 0};
    c.why[0] = 0;
    *name = NULL;
    *arguments = NULL;
    cJSON *args = NULL;
    if (syn == VT_TOOL_SYNTAX_QWEN) args = parse_qwen(&c, tools, name);
    else if (syn == VT_TOOL_SYNTAX_GEMMA4) args = parse_gemma(&c, tools, name);
    else fail(&c, "this model has no tool-call syntax vt reads");
    if (args && !(*arguments = cJSON_PrintUnformatted(args))) oom(&c);
    cJSON_Delete(args);
    if (c.err || !args) {
        free(*name);
        free(*arguments);
        *name = *arguments = NULL;
        return c.err == -2 ? -2 : -1;
    }
    return 0;
}
