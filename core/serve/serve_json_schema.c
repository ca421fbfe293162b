/*
 * serve_json_schema.c - a JSON schema as a byte-level matcher
 * (serve_json_schema.h). The matcher is a stack of frames, one per value
 * being written (object, array, string, number, literal); a byte either
 * advances the top frame, completes it (then the parent goes on; a number
 * or literal completes at the first byte that cannot extend it, which is
 * then fed to the parent), or is refused. The JSON grammar is RFC 8259's.
 */
#include "serve_json_schema.h"

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* MAX_KEY: the characters of a key of an object without "properties" (a
 * model that rambles inside a key would never close the document) */
enum { MAX_DEPTH = 32, MAX_MEMBERS = 64, MAX_KEY = 64 };

typedef enum { K_ANY, K_OBJECT, K_ARRAY, K_STRING, K_NUMBER, K_INTEGER, K_LIT } kind;

typedef struct node node;
struct node {
    kind k;
    int n;           /* object: properties; literal: alternatives */
    char **names;    /* object: the property names; literal: the serialized values */
    node **props;    /* object: the properties' schemas */
    uint64_t required;
    int free_keys;   /* object without properties: any keys, any values */
    node *items;     /* array: the items' schema (the any node when absent) */
    int64_t min, max; /* string: minLength, maxLength (characters); array: minItems,
                          maxItems; max -1: none */
    node *next;      /* every node of a schema, for freeing */
};

struct vt_json_schema {
    node *root, *all;
    node any, any_obj, any_arr, any_str, any_key, any_num, any_lit;
};

typedef struct frame {
    const node *n;
    uint8_t st, sp;  /* state; one space taken here already */
    uint16_t pos;    /* key or literal bytes matched */
    int16_t last;    /* object: the last property written (-1: none) */
    int16_t key;     /* object: the property whose value comes next */
    uint64_t cand;   /* key or literal candidates */
    int64_t count;   /* string: characters written; array: items */
} frame;

struct vt_json_matcher {
    const vt_json_schema *s;
    int depth, done;
    frame f[MAX_DEPTH];
};

/* ---------------------------------------------------------------- compile */

static char *lits_true_false_null[] = {"true", "false", "null"};

static node *new_node(vt_json_schema *s, kind k)
{
    node *n = calloc(1, sizeof *n);
    if (!n) return NULL;
    n->k = k;
    n->next = s->all;
    s->all = n;
    return n;
}

typedef struct cctx {
    vt_json_schema *s;
    char *why;
    size_t cap;
    int failed;
} cctx;

__attribute__((format(printf, 3, 4))) static node *cfail(cctx *c, const char *path, const char *fmt, ...)
{
    if (!c->failed) {
        int k = snprintf(c->why, c->cap, "%s%s", path, *path ? ": " : "");
        if (k >= 0 && (size_t)k < c->cap) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(c->why + k, c->cap - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    c->failed = 1;
    return NULL;
}

static node *compile(cctx *c, const cJSON *j, const char *path, int depth);

static char *dup_s(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static node *compile_object(cctx *c, const cJSON *j, const char *path, int depth)
{
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(j, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(j, "required");
    node *n = new_node(c->s, K_OBJECT);
    if (!n) return cfail(c, "", "out of memory");
    const cJSON *ap = cJSON_GetObjectItemCaseSensitive(j, "additionalProperties");
    if (ap && !cJSON_IsBool(ap))
        return cfail(c, path, "'additionalProperties' as a schema is not supported (true or false are)");
    if (!props) {
        if (req && cJSON_GetArraySize(req)) return cfail(c, path, "'required' without 'properties' is not supported");
        n->free_keys = !cJSON_IsFalse(ap); /* false: no keys at all, "{}" */
        return n;
    }
    if (!cJSON_IsObject(props)) return cfail(c, path, "'properties' must be an object");
    int np = cJSON_GetArraySize(props);
    if (np > MAX_MEMBERS) return cfail(c, path, "more than %d properties are not supported", MAX_MEMBERS);
    n->names = calloc((size_t)(np ? np : 1), sizeof *n->names);
    n->props = calloc((size_t)(np ? np : 1), sizeof *n->props);
    if (!n->names || !n->props) return cfail(c, "", "out of memory");
    const cJSON *p;
    cJSON_ArrayForEach(p, props) {
        for (const char *q = p->string; *q; q++)
            if (*q == '"' || *q == '\\' || (unsigned char)*q < 0x20)
                return cfail(c, path, "property name '%s': quotes, backslashes and control "
                             "characters in names are not supported", p->string);
        char sub[256];
        snprintf(sub, sizeof sub, "%s%sproperties.%s", path, *path ? "." : "", p->string);
        if (!(n->names[n->n] = dup_s(p->string))) return cfail(c, "", "out of memory");
        n->n++;
        if (!(n->props[n->n - 1] = compile(c, p, sub, depth + 1))) return NULL;
    }
    if (req) {
        if (!cJSON_IsArray(req)) return cfail(c, path, "'required' must be an array of names");
        const cJSON *r;
        cJSON_ArrayForEach(r, req) {
            int i = 0;
            while (i < n->n && !(cJSON_IsString(r) && !strcmp(n->names[i], r->valuestring))) i++;
            if (i == n->n)
                return cfail(c, path, "'required' names '%s', which is not in 'properties'",
                             cJSON_IsString(r) ? r->valuestring : "?");
            n->required |= (uint64_t)1 << i;
        }
    }
    return n;
}

static node *compile(cctx *c, const cJSON *j, const char *path, int depth)
{
    if (depth >= MAX_DEPTH - 1) return cfail(c, path, "nested deeper than %d", MAX_DEPTH - 2);
    if (cJSON_IsTrue(j)) return &c->s->any;
    if (!cJSON_IsObject(j)) return cfail(c, path, "a schema must be an object");
    static const char *const ignored[] = {"title", "description", "$schema", "$id", "default",
                                          "examples", "$comment"};
    static const char *const known[] = {"type", "properties", "required", "additionalProperties",
                                        "items", "enum", "const", "minLength", "maxLength",
                                        "minItems", "maxItems"};
    for (const cJSON *f = j->child; f; f = f->next) {
        int ok = 0;
        for (size_t i = 0; i < sizeof ignored / sizeof *ignored; i++) ok |= !strcmp(f->string, ignored[i]);
        for (size_t i = 0; i < sizeof known / sizeof *known; i++) ok |= !strcmp(f->string, known[i]);
        if (!ok) return cfail(c, path, "'%s' is not supported", f->string);
    }
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(j, "enum");
    const cJSON *cn = cJSON_GetObjectItemCaseSensitive(j, "const");
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(j, "type");
    if ((en || cn) && ty) { /* a value of another type than 'type' would not validate */
        if (!cJSON_IsString(ty)) return cfail(c, path, "'type' must be one type name");
        for (const cJSON *v = en ? en->child : cn; v; v = en ? v->next : NULL) {
            const char *t = ty->valuestring;
            int ok = !strcmp(t, "string") ? cJSON_IsString(v) : !strcmp(t, "number") ? cJSON_IsNumber(v)
                     : !strcmp(t, "integer") ? cJSON_IsNumber(v) && fabs(v->valuedouble) < 9007199254740992.0 &&
                                                   v->valuedouble == (double)(int64_t)v->valuedouble
                     : !strcmp(t, "boolean") ? cJSON_IsBool(v) : !strcmp(t, "null") ? cJSON_IsNull(v)
                     : !strcmp(t, "object") ? cJSON_IsObject(v) : !strcmp(t, "array") ? cJSON_IsArray(v) : 0;
            if (!ok) return cfail(c, path, "an 'enum'/'const' value is not of type '%s'", t);
            if (!en) break;
        }
    }
    if (en || cn) { /* the values' JSON text, byte for byte */
        if (en && (!cJSON_IsArray(en) || !cJSON_GetArraySize(en)))
            return cfail(c, path, "'enum' must be a non-empty array");
        int nl = en ? cJSON_GetArraySize(en) : 1;
        if (nl > MAX_MEMBERS) return cfail(c, path, "an enum of more than %d values is not supported", MAX_MEMBERS);
        node *n = new_node(c->s, K_LIT);
        if (!n || !(n->names = calloc((size_t)nl, sizeof *n->names))) return cfail(c, "", "out of memory");
        const cJSON *v = en ? en->child : cn;
        for (; v && n->n < nl; v = v->next) {
            if (!(n->names[n->n++] = cJSON_PrintUnformatted(v))) return cfail(c, "", "out of memory");
            if (!en) break;
        }
        return n;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
    if (type && !cJSON_IsString(type))
        return cfail(c, path, "'type' must be one type name (a list of types is not supported)");
    const char *t = type ? type->valuestring : cJSON_GetObjectItemCaseSensitive(j, "properties") ? "object" : NULL;
    if (!t) return &c->s->any;
    /* minLength/maxLength (string), minItems/maxItems (array): non-negative integers */
    int64_t lim[2] = {0, -1};
    const int is_str = !strcmp(t, "string"), is_arr = !strcmp(t, "array");
    const char *kw[2] = {is_str ? "minLength" : "minItems", is_str ? "maxLength" : "maxItems"};
    for (int q = 0; q < 2 && (is_str || is_arr); q++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, kw[q]);
        if (!v) continue;
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1e9 ||
            v->valuedouble != (double)(int64_t)v->valuedouble)
            return cfail(c, path, "'%s' must be a non-negative integer", kw[q]);
        lim[q] = (int64_t)v->valuedouble;
    }
    for (int q = 0; q < 4; q++) {
        static const char *const all[] = {"minLength", "maxLength", "minItems", "maxItems"};
        if (cJSON_GetObjectItemCaseSensitive(j, all[q]) && !((q < 2 && is_str) || (q >= 2 && is_arr)))
            return cfail(c, path, "'%s' does not apply to type '%s'", all[q], t);
    }
    if (lim[1] >= 0 && lim[0] > lim[1]) return cfail(c, path, "'%s' is above '%s'", kw[0], kw[1]);
    if (!strcmp(t, "object")) return compile_object(c, j, path, depth);
    if (!strcmp(t, "array")) {
        node *n = new_node(c->s, K_ARRAY);
        if (!n) return cfail(c, "", "out of memory");
        n->min = lim[0];
        n->max = lim[1];
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(j, "items");
        char sub[256];
        snprintf(sub, sizeof sub, "%s%sitems", path, *path ? "." : "");
        n->items = it ? compile(c, it, sub, depth + 1) : &c->s->any;
        return n->items ? n : NULL;
    }
    if (!strcmp(t, "string")) {
        if (!lim[0] && lim[1] < 0) return &c->s->any_str;
        node *n = new_node(c->s, K_STRING);
        if (!n) return cfail(c, "", "out of memory");
        n->min = lim[0];
        n->max = lim[1];
        return n;
    }
    if (!strcmp(t, "number")) return &c->s->any_num;
    if (!strcmp(t, "integer")) {
        node *n = new_node(c->s, K_INTEGER);
        return n ? n : cfail(c, "", "out of memory");
    }
    if (!strcmp(t, "boolean") || !strcmp(t, "null")) {
        node *n = new_node(c->s, K_LIT);
        if (!n) return cfail(c, "", "out of memory");
        n->names = t[0] == 'b' ? lits_true_false_null : lits_true_false_null + 2;
        n->n = t[0] == 'b' ? 2 : 1;
        n->free_keys = -1; /* the names are static */
        return n;
    }
    return cfail(c, path, "type '%s' is not one of object, array, string, number, integer, "
                 "boolean, null", t);
}

void vt_json_schema_free(vt_json_schema *s)
{
    if (!s) return;
    for (node *n = s->all, *next; n; n = next) {
        next = n->next;
        if (n->free_keys != -1)
            for (int i = 0; n->names && i < n->n; i++) free(n->names[i]);
        if (n->free_keys != -1) free(n->names);
        free(n->props);
        free(n);
    }
    free(s);
}

vt_json_schema *vt_json_schema_compile(const cJSON *schema, char *why, size_t cap)
{
    char scratch[8];
    cctx c = {calloc(1, sizeof(vt_json_schema)), why && cap ? why : scratch, why && cap ? cap : sizeof scratch, 0};
    c.why[0] = 0;
    if (!c.s) {
        snprintf(c.why, c.cap, "out of memory");
        return NULL;
    }
    vt_json_schema *s = c.s;
    s->any.k = K_ANY;
    s->any_obj = (node){.k = K_OBJECT, .free_keys = 1};
    s->any_arr = (node){.k = K_ARRAY, .items = &s->any, .max = -1};
    s->any_str = (node){.k = K_STRING, .max = -1};
    s->any_key = (node){.k = K_STRING, .max = MAX_KEY};
    s->any_num.k = K_NUMBER;
    s->any_lit = (node){.k = K_LIT, .n = 3, .names = lits_true_false_null, .free_keys = -1};
    s->root = schema ? compile(&c, schema, "", 0) : &s->any_obj;
    if (!s->root) {
        vt_json_schema_free(s);
        return NULL;
    }
    return s;
}

/* ---------------------------------------------------------------- match */

/* The properties that may come after property `last`: the later ones up to
 * and including the first required one. */
static uint64_t key_candidates(const node *n, int last)
{
    uint64_t m = 0;
    for (int i = last + 1; i < n->n; i++) {
        m |= (uint64_t)1 << i;
        if (n->required >> i & 1) break;
    }
    return m;
}

/* every required property written by the time the object closes */
static int required_done(const node *n, int last)
{
    return last + 1 >= 64 || !(n->required >> (last + 1));
}

static int push(vt_json_matcher *m, const node *n, uint8_t st)
{
    if (m->depth == MAX_DEPTH) return -1;
    m->f[m->depth++] = (frame){.n = n, .st = st, .last = -1, .cand = ~(uint64_t)0};
    return 0;
}

static void pop(vt_json_matcher *m)
{
    if (--m->depth == 0) m->done = 1;
}

static int is_digit(unsigned c) { return c >= '0' && c <= '9'; }

/* One byte. */
static int step(vt_json_matcher *m, unsigned c)
{
    for (;;) { /* loops when a completed number or literal hands c to its parent */
        if (m->depth == 0) return -1;
        frame *f = &m->f[m->depth - 1];
        const node *n = f->n;
        switch (n->k) {
        case K_ANY: {
            const vt_json_schema *s = m->s;
            f->n = c == '{' ? &s->any_obj : c == '[' ? &s->any_arr : c == '"' ? &s->any_str
                   : (c == '-' || is_digit(c)) ? &s->any_num : (c == 't' || c == 'f' || c == 'n') ? &s->any_lit
                   : NULL;
            if (!f->n) return -1;
            continue;
        }
        case K_STRING:
            switch (f->st) {
            case 0: if (c != '"') return -1; f->st = 1; return 0;
            case 1:
                if (c == '"') {
                    if (f->count < n->min) return -1;
                    pop(m);
                    return 0;
                }
                if (c < 0x20) return -1;
                if (n->max >= 0 && f->count >= n->max) return -1;
                f->count++; /* a character begins: a byte, an escape or a UTF-8 sequence */
                if (c == '\\') f->st = 2;
                else if (c >= 0x80) { /* UTF-8: a lead byte, then its continuation bytes */
                    if (c < 0xC2 || c > 0xF4) return -1;
                    f->pos = c < 0xE0 ? 1 : c < 0xF0 ? 2 : 3;
                    f->st = 4;
                }
                return 0;
            case 2:
                if (c == 'u') { f->st = 3; f->pos = 0; f->sp = 0; return 0; }
                if (!strchr("\"\\/bfnrt", (int)c) || !c) return -1;
                f->st = 1;
                return 0;
            case 3: /* \uXXXX; no surrogate halves (a parser may refuse a lone one) */
                if (!is_digit(c) && !((c | 0x20) >= 'a' && (c | 0x20) <= 'f')) return -1;
                if (f->pos == 0) f->sp = (c | 0x20) == 'd';
                if (f->pos == 1 && f->sp && !is_digit(c) && (c | 0x20) >= 'a') return -1;
                if (f->pos == 1 && f->sp && (c == '8' || c == '9')) return -1;
                if (++f->pos == 4) f->st = 1;
                return 0;
            default: /* 4: a continuation byte */
                if (c < 0x80 || c > 0xBF) return -1;
                if (--f->pos == 0) f->st = 1;
                return 0;
            }
        case K_NUMBER:
        case K_INTEGER: {
            const int in = n->k == K_INTEGER;
            switch (f->st) {
            case 0: if (c == '-') { f->st = 1; return 0; } /* fall through */
            case 1:
                if (c == '0') { f->st = 2; return 0; }
                if (is_digit(c)) { f->st = 3; return 0; }
                return -1;
            case 2: case 3:
                if (f->st == 3 && is_digit(c)) return 0;
                if (!in && c == '.') { f->st = 4; return 0; }
                if (!in && (c == 'e' || c == 'E')) { f->st = 6; return 0; }
                pop(m);
                continue;
            case 4: if (!is_digit(c)) return -1; f->st = 5; return 0;
            case 5:
                if (is_digit(c)) return 0;
                if (c == 'e' || c == 'E') { f->st = 6; return 0; }
                pop(m);
                continue;
            case 6: if (c == '+' || c == '-') { f->st = 7; return 0; } /* fall through */
            case 7: if (!is_digit(c)) return -1; f->st = 8; return 0;
            default:
                if (is_digit(c)) return 0;
                pop(m);
                continue;
            }
        }
        case K_LIT: {
            uint64_t keep = 0, whole = 0;
            for (int i = 0; i < n->n; i++) {
                if (!(f->cand >> i & 1)) continue;
                if (n->names[i][f->pos] == (char)c && c) keep |= (uint64_t)1 << i;
                if (!n->names[i][f->pos]) whole = 1;
            }
            if (keep) {
                f->cand = keep;
                f->pos++;
                return 0;
            }
            if (!whole) return -1;
            pop(m);
            continue;
        }
        case K_ARRAY:
            switch (f->st) {
            case 0: if (c != '[') return -1; f->st = 1; return 0;
            case 1:
                if (c == ']') {
                    if (n->min > 0) return -1;
                    pop(m);
                    return 0;
                }
                if (n->max == 0) return -1;
                f->st = 2;
                f->count = 1;
                if (push(m, n->items, 0)) return -1;
                continue;
            case 2:
                if (c == ',' && (n->max < 0 || f->count < n->max)) { f->st = 3; f->sp = 0; return 0; }
                if (c == ']' && f->count >= n->min) { pop(m); return 0; }
                return -1;
            default:
                if (c == ' ' && !f->sp) { f->sp = 1; return 0; }
                f->st = 2;
                f->count++;
                if (push(m, n->items, 0)) return -1;
                continue;
            }
        case K_OBJECT:
            switch (f->st) {
            case 0: if (c != '{') return -1; f->st = 1; return 0;
            case 1: /* after '{' */
            case 7: /* after ',' */
                if (f->st == 7 && c == ' ' && !f->sp) { f->sp = 1; return 0; }
                if (f->st == 1 && c == '}') {
                    if (!n->free_keys && !required_done(n, -1)) return -1;
                    pop(m);
                    return 0;
                }
                if (c != '"') return -1;
                if (n->free_keys) { /* any key: a string, then ':' */
                    f->st = 4;
                    return push(m, &m->s->any_key, 1);
                }
                f->cand = key_candidates(n, f->last);
                if (!f->cand) return -1;
                f->pos = 0;
                f->st = 3;
                return 0;
            case 3: { /* a property name of the schema */
                uint64_t keep = 0;
                int whole = -1;
                for (int i = 0; i < n->n; i++) {
                    if (!(f->cand >> i & 1)) continue;
                    if (c != '"' && n->names[i][f->pos] == (char)c) keep |= (uint64_t)1 << i;
                    if (c == '"' && !n->names[i][f->pos]) whole = i;
                }
                if (c == '"') {
                    if (whole < 0) return -1;
                    f->key = (int16_t)whole;
                    f->st = 4;
                    return 0;
                }
                if (!keep) return -1;
                f->cand = keep;
                f->pos++;
                return 0;
            }
            case 4: if (c != ':') return -1; f->st = 5; f->sp = 0; return 0;
            case 5:
                if (c == ' ' && !f->sp) { f->sp = 1; return 0; }
                f->st = 6;
                if (!n->free_keys) f->last = f->key;
                if (push(m, n->free_keys ? &m->s->any : n->props[f->key], 0)) return -1;
                continue;
            default: /* 6: after a value */
                if (c == ',') {
                    if (!n->free_keys && !key_candidates(n, f->last)) return -1;
                    f->st = 7;
                    f->sp = 0;
                    return 0;
                }
                if (c != '}') return -1;
                if (!n->free_keys && !required_done(n, f->last)) return -1;
                pop(m);
                return 0;
            }
        }
        return -1;
    }
}

vt_json_matcher *vt_json_matcher_new(const vt_json_schema *s)
{
    vt_json_matcher *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->s = s;
    push(m, s->root, 0);
    return m;
}

void vt_json_matcher_free(vt_json_matcher *m) { free(m); }

vt_json_matcher *vt_json_matcher_dup(const vt_json_matcher *m)
{
    vt_json_matcher *d = malloc(sizeof *d);
    if (d) memcpy(d, m, sizeof *d);
    return d;
}

int vt_json_matcher_feed(vt_json_matcher *m, const char *text, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (step(m, (unsigned char)text[i])) return -1;
    return 0;
}

int vt_json_matcher_accepts(const vt_json_matcher *m, const char *text, size_t n)
{
    vt_json_matcher t;
    /* only the frames in use are copied: this runs for every token of the vocabulary */
    memcpy(&t, m, offsetof(vt_json_matcher, f) + (size_t)m->depth * sizeof(frame));
    return vt_json_matcher_feed(&t, text, n) == 0;
}

int vt_json_matcher_complete(const vt_json_matcher *m)
{
    if (m->done) return 1;
    if (m->depth != 1) return 0;
    const frame *f = &m->f[0];
    if (f->n->k == K_NUMBER || f->n->k == K_INTEGER) return f->st == 2 || f->st == 3 || f->st == 5 || f->st == 8;
    if (f->n->k == K_LIT)
        for (int i = 0; i < f->n->n; i++)
            if ((f->cand >> i & 1) && f->pos && !f->n->names[i][f->pos]) return 1;
    return 0;
}

/* ---------------------------------------------------------------- the shortest ending */

typedef struct wbuf {
    char *p;
    size_t n, cap;
} wbuf;

/* Writes stop counting past cap: the caller learns only that the ending does
 * not fit, and the work stays bounded however large the schema's minimums
 * multiply (minItems nested in minItems). */
static int w_full(const wbuf *w) { return w->n >= w->cap; }
static void w_put(wbuf *w, const char *s, size_t n)
{
    for (size_t i = 0; i < n && !w_full(w); i++, w->n++)
        if (w->n + 1 < w->cap) w->p[w->n] = s[i];
}
static void w_str(wbuf *w, const char *s) { w_put(w, s, strlen(s)); }
static void w_rep(wbuf *w, char c, int64_t k)
{
    for (int64_t i = 0; i < k && !w_full(w); i++) w_put(w, &c, 1);
}

static const char *shortest_lit(const node *n, uint64_t cand, int pos)
{
    const char *best = NULL;
    for (int i = 0; i < n->n; i++)
        if ((cand >> i & 1) && (int)strlen(n->names[i]) >= pos &&
            (!best || strlen(n->names[i]) < strlen(best)))
            best = n->names[i];
    return best ? best : "";
}

static void min_value(wbuf *w, const node *n, int depth);

/* the object's required properties after `last`, each `,"k":v` (first: no comma) */
static void rest_required(wbuf *w, const node *n, int last, int first, int depth)
{
    for (int i = last + 1; i < n->n && !w_full(w); i++) {
        if (!(n->required >> i & 1)) continue;
        if (!first) w_str(w, ",");
        first = 0;
        w_str(w, "\"");
        w_str(w, n->names[i]);
        w_str(w, "\":");
        min_value(w, n->props[i], depth + 1);
    }
}

static void min_value(wbuf *w, const node *n, int depth)
{
    if (depth > MAX_DEPTH || w_full(w)) return;
    switch (n->k) {
    case K_STRING: w_str(w, "\""); w_rep(w, 'a', n->min); w_str(w, "\""); return;
    case K_LIT: w_str(w, shortest_lit(n, ~(uint64_t)0, 0)); return;
    case K_ARRAY:
        w_str(w, "[");
        for (int64_t i = 0; i < n->min && !w_full(w); i++) {
            if (i) w_str(w, ",");
            min_value(w, n->items, depth + 1);
        }
        w_str(w, "]");
        return;
    case K_OBJECT:
        w_str(w, "{");
        if (!n->free_keys) rest_required(w, n, -1, 1, depth);
        w_str(w, "}");
        return;
    default: w_str(w, "0"); return; /* number, integer, any */
    }
}

size_t vt_json_matcher_ending(const vt_json_matcher *m, char *buf, size_t cap)
{
    wbuf w = {buf, 0, cap};
    for (int d = m->depth - 1; d >= 0 && !w_full(&w); d--) {
        const frame *f = &m->f[d];
        const node *n = f->n;
        switch (n->k) {
        case K_ANY: w_str(&w, "0"); break;
        case K_STRING:
            if (f->st == 0) {
                min_value(&w, n, 0);
                break;
            }
            if (f->st == 2) w_str(&w, "n");
            if (f->st == 3) w_rep(&w, '0', 4 - f->pos);
            if (f->st == 4) w_rep(&w, (char)0x80, f->pos);
            w_rep(&w, 'a', n->min - f->count);
            w_str(&w, "\"");
            break;
        case K_NUMBER:
        case K_INTEGER:
            if (f->st == 0 || f->st == 1 || f->st == 4 || f->st == 6 || f->st == 7) w_str(&w, "0");
            break;
        case K_LIT: w_str(&w, shortest_lit(n, f->cand, f->pos) + f->pos); break;
        case K_ARRAY: {
            if (f->st == 0) {
                min_value(&w, n, 0);
                break;
            }
            int64_t have = f->st == 1 ? 0 : f->count;
            if (f->st == 3) { /* after ',': an item is due */
                min_value(&w, n->items, 1);
            }
            for (int64_t i = have; i < n->min && !w_full(&w); i++) {
                if (i || f->st == 3) w_str(&w, ",");
                min_value(&w, n->items, 1);
            }
            w_str(&w, "]");
            break;
        }
        case K_OBJECT:
            switch (f->st) {
            case 0: min_value(&w, n, 0); break;
            case 1: if (!n->free_keys) rest_required(&w, n, -1, 1, 0); w_str(&w, "}"); break;
            case 3: { /* inside a property name: finish the likeliest one, the required first */
                int pick = -1;
                for (int i = 0; i < n->n; i++)
                    if ((f->cand >> i & 1) && (pick < 0 || (n->required >> i & 1))) {
                        pick = i;
                        if (n->required >> i & 1) break;
                    }
                if (pick < 0) break;
                w_str(&w, n->names[pick] + f->pos);
                w_str(&w, "\":");
                min_value(&w, n->props[pick], 1);
                rest_required(&w, n, pick, 0, 0);
                w_str(&w, "}");
                break;
            }
            case 4:
            case 5:
                if (f->st == 4) w_str(&w, ":");
                min_value(&w, n->free_keys ? &m->s->any : n->props[f->key], 1);
                __attribute__((fallthrough)); /* then as after a value */
            case 6:
                if (!n->free_keys) rest_required(&w, n, f->st == 6 ? f->last : f->key, 0, 0);
                w_str(&w, "}");
                break;
            default: /* 7: after ',' a key is due */
                if (n->free_keys) {
                    w_str(&w, "\"\":0}");
                } else {
                    uint64_t c = key_candidates(n, f->last);
                    int k = 0;
                    while (k < n->n && !(c >> k & 1)) k++;
                    if (k == n->n) break;
                    w_str(&w, "\"");
                    w_str(&w, n->names[k]);
                    w_str(&w, "\":");
                    min_value(&w, n->props[k], 1);
                    rest_required(&w, n, k, 0, 0);
                    w_str(&w, "}");
                }
                break;
            }
            break;
        }
    }
    if (cap) buf[w.n < cap ? w.n : cap - 1] = 0;
    return w.n;
}
