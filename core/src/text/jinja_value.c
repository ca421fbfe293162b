/*
 * jinja_value.c - the chat-template interpreter's values (jinja_internal.h):
 * the arena of one render, building lists and dicts, Python's truthiness,
 * equality, str() and repr() of every value, json.dumps as transformers'
 * tojson calls it, and the JSON parser of the render's variables.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "jinja_internal.h"

#define ARENA_BLOCK ((size_t)64 << 10)

typedef struct ablock {
    struct ablock *next;
} ablock;

_Noreturn void jv_fail(jenv *E, vt_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(E->msg, sizeof E->msg, fmt, ap);
    va_end(ap);
    E->st = st;
    longjmp(E->fail, 1);
}

void *jv_alloc(jenv *E, size_t bytes)
{
    bytes = (bytes + 15) & ~(size_t)15;
    if (bytes > E->left) {
        size_t want = bytes > ARENA_BLOCK ? bytes : ARENA_BLOCK;
        if (E->used + want > E->max_memory)
            jv_fail(E, VT_ERR_RANGE, "the render needs more than its memory limit of %zu bytes",
                    E->max_memory);
        ablock *b = malloc(sizeof(ablock) + 16 + want);
        if (!b) jv_fail(E, VT_ERR_OUT_OF_MEMORY, "out of memory (%zu bytes)", want);
        b->next = E->chunks;
        E->chunks = b;
        E->cur = (char *)b + ((sizeof(ablock) + 15) & ~(size_t)15);
        E->left = want;
        E->used += want;
    }
    void *p = E->cur;
    E->cur += bytes;
    E->left -= bytes;
    return p;
}

jv jv_undef(void) { return (jv){.k = JV_UNDEF}; }
jv jv_none(void) { return (jv){.k = JV_NONE}; }
jv jv_bool(int b) { return (jv){.k = JV_BOOL, .u.b = !!b}; }
jv jv_int(int64_t i) { return (jv){.k = JV_INT, .u.i = i}; }
jv jv_float(double f) { return (jv){.k = JV_FLOAT, .u.f = f}; }

jv jv_str(jenv *E, const char *s, size_t n)
{
    char *p = jv_alloc(E, n + 1);
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return (jv){.k = JV_STR, .u.str = {p, n, NULL}};
}

jv jv_cstr(const char *s) { return (jv){.k = JV_STR, .u.str = {s, strlen(s), NULL}}; }

jv jv_str_t(jenv *E, const char *s, size_t n, const uint8_t *t)
{
    jv v = jv_str(E, s, n);
    if (t && n && memchr(t, 1, n)) {
        uint8_t *m = jv_alloc(E, n);
        memcpy(m, t, n);
        v.u.str.t = m;
    }
    return v;
}

jv jv_sub(jenv *E, jv s, size_t off, size_t n)
{
    return jv_str_t(E, s.u.str.s + off, n, s.u.str.t ? s.u.str.t + off : NULL);
}

jv jv_from_buf(jenv *E, const jbuf *b)
{
    return jv_str_t(E, b->p ? b->p : "", b->n, b->m);
}

void jv_taint_all(jenv *E, jv *v)
{
    switch (v->k) {
    case JV_STR:
        if (v->u.str.n) {
            uint8_t *m = jv_alloc(E, v->u.str.n);
            memset(m, 1, v->u.str.n);
            v->u.str.t = m;
        }
        E->has_taint = 1;
        break;
    case JV_LIST:
        for (size_t i = 0; i < v->u.list->n; i++) jv_taint_all(E, &v->u.list->v[i]);
        break;
    case JV_DICT:
    case JV_NS:
        for (size_t i = 0; i < v->u.dict->n; i++) {
            jv_taint_all(E, &v->u.dict->key[i]);
            jv_taint_all(E, &v->u.dict->val[i]);
        }
        break;
    default:
        break;
    }
}

jv jv_list(jenv *E, size_t cap)
{
    jlist *l = jv_alloc(E, sizeof *l);
    l->n = 0;
    l->cap = cap ? cap : 4;
    l->tuple = 0;
    l->v = jv_alloc(E, l->cap * sizeof(jv));
    return (jv){.k = JV_LIST, .u.list = l};
}

void jv_list_push(jenv *E, jv *list, jv v)
{
    jlist *l = list->u.list;
    if (l->n == l->cap) {
        jv *nv = jv_alloc(E, 2 * l->cap * sizeof(jv));
        memcpy(nv, l->v, l->n * sizeof(jv));
        l->v = nv;
        l->cap *= 2;
    }
    l->v[l->n++] = v;
}

jv jv_dict(jenv *E, size_t cap)
{
    jdict *d = jv_alloc(E, sizeof *d);
    d->n = 0;
    d->cap = cap ? cap : 4;
    d->key = jv_alloc(E, d->cap * sizeof(jv));
    d->val = jv_alloc(E, d->cap * sizeof(jv));
    return (jv){.k = JV_DICT, .u.dict = d};
}

void jv_dict_set(jenv *E, jv *dict, jv key, jv val)
{
    jdict *d = dict->u.dict;
    for (size_t i = 0; i < d->n; i++)
        if (jv_equal(d->key[i], key)) {
            d->val[i] = val;
            return;
        }
    if (d->n == d->cap) {
        jv *nk = jv_alloc(E, 2 * d->cap * sizeof(jv)), *nv = jv_alloc(E, 2 * d->cap * sizeof(jv));
        memcpy(nk, d->key, d->n * sizeof(jv));
        memcpy(nv, d->val, d->n * sizeof(jv));
        d->key = nk;
        d->val = nv;
        d->cap *= 2;
    }
    d->key[d->n] = key;
    d->val[d->n++] = val;
}

jv jv_dict_get(jv dict, jv key)
{
    const jdict *d = dict.u.dict;
    for (size_t i = 0; i < d->n; i++)
        if (jv_equal(d->key[i], key)) return d->val[i];
    return jv_undef();
}

jv jv_dict_get_c(jv dict, const char *key) { return jv_dict_get(dict, jv_cstr(key)); }

int jv_truthy(jv v)
{
    switch (v.k) {
    case JV_UNDEF: case JV_NONE: return 0;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return v.u.str.n != 0;
    case JV_LIST: return v.u.list->n != 0;
    case JV_DICT: return v.u.dict->n != 0;
    default: return 1;
    }
}

static int is_num(jv v) { return v.k == JV_INT || v.k == JV_FLOAT || v.k == JV_BOOL; }

/* Python's ==: numbers by value (True == 1), strings by bytes, lists and
 * dicts item by item; undefined equals undefined only. */
#define VALUE_DEPTH_MAX 512 /* nesting of lists, dicts and namespaces walked (one can hold itself) */

static int equal_at(jv a, jv b, int depth);

int jv_equal(jv a, jv b) { return equal_at(a, b, 0); }

/* deeper than VALUE_DEPTH_MAX: unequal (jinja2 raises RecursionError) */
static int equal_at(jv a, jv b, int depth)
{
    if (depth > VALUE_DEPTH_MAX) return 0;
    if (is_num(a) && is_num(b)) {
        if (a.k != JV_FLOAT && b.k != JV_FLOAT) {
            int64_t x = a.k == JV_INT ? a.u.i : a.u.b, y = b.k == JV_INT ? b.u.i : b.u.b;
            return x == y;
        }
        if (a.k == JV_FLOAT && b.k == JV_FLOAT) return a.u.f == b.u.f;
        /* an int and a float: equal only when exactly the same number, as Python */
        jv i = a.k == JV_FLOAT ? b : a;
        double f = a.k == JV_FLOAT ? a.u.f : b.u.f;
        int64_t x = i.k == JV_INT ? i.u.i : i.u.b;
        return f >= -9223372036854775808.0 && f < 9223372036854775808.0 && f == (double)x &&
               (int64_t)f == x;
    }
    if (a.k != b.k) return 0;
    switch (a.k) {
    case JV_UNDEF: case JV_NONE: return 1;
    case JV_STR: return a.u.str.n == b.u.str.n && !memcmp(a.u.str.s, b.u.str.s, a.u.str.n);
    case JV_LIST:
        if (a.u.list->n != b.u.list->n || a.u.list->tuple != b.u.list->tuple) return 0;
        for (size_t i = 0; i < a.u.list->n; i++)
            if (!equal_at(a.u.list->v[i], b.u.list->v[i], depth + 1)) return 0;
        return 1;
    case JV_DICT:
        if (a.u.dict->n != b.u.dict->n) return 0;
        for (size_t i = 0; i < a.u.dict->n; i++) {
            jv o = jv_dict_get(b, a.u.dict->key[i]);
            if (o.k == JV_UNDEF || !equal_at(a.u.dict->val[i], o, depth + 1)) return 0;
        }
        return 1;
    case JV_NS: return a.u.dict == b.u.dict;
    case JV_MACRO: return a.u.macro == b.u.macro;
    case JV_FUNC: return a.u.fn == b.u.fn;
    case JV_LOOP: return a.u.loop == b.u.loop;
    default: return 0;
    }
}

int jv_is_str(jv v, const char *s)
{
    size_t n = strlen(s);
    return v.k == JV_STR && v.u.str.n == n && !memcmp(v.u.str.s, s, n);
}

const char *jv_kind_name(jv v)
{
    static const char *const names[] = {"undefined", "none", "bool", "int", "float", "str",
                                        "list", "dict", "namespace", "macro", "function", "loop"};
    if (v.k == JV_LIST && v.u.list->tuple) return "tuple";
    return names[v.k];
}

/* ---- output buffers ---- */

void jbuf_put_t(jenv *E, jbuf *b, const char *s, size_t n, const uint8_t *t)
{
    if (!n) return;
    if (b->limited && b->n + n > E->max_output)
        jv_fail(E, VT_ERR_RANGE, "the output passes its limit of %zu bytes", E->max_output);
    if (t && !b->m && memchr(t, 1, n)) { /* the first tainted byte: a mask from here on */
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        b->m = jv_alloc(E, cap);
        memset(b->m, 0, cap);
        if (cap > b->cap) { /* the text grows with it */
            char *p = jv_alloc(E, cap);
            if (b->n) memcpy(p, b->p, b->n);
            b->p = p;
            b->cap = cap;
        }
    }
    if (b->n + n + 1 > b->cap) { /* in the arena: nothing to free when a render fails */
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = jv_alloc(E, cap);
        if (b->n) memcpy(p, b->p, b->n);
        b->p = p;
        if (b->m) {
            uint8_t *m = jv_alloc(E, cap);
            memcpy(m, b->m, b->n);
            memset(m + b->n, 0, cap - b->n);
            b->m = m;
        }
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    if (b->m) {
        if (t) memcpy(b->m + b->n, t, n);
        else memset(b->m + b->n, 0, n);
    }
    b->n += n;
    b->p[b->n] = 0;
}

void jbuf_put(jenv *E, jbuf *b, const char *s, size_t n) { jbuf_put_t(E, b, s, n, NULL); }

void jbuf_put_str(jenv *E, jbuf *b, jv s) { jbuf_put_t(E, b, s.u.str.s, s.u.str.n, s.u.str.t); }

void jbuf_putc(jenv *E, jbuf *b, char c) { jbuf_put(E, b, &c, 1); }
void jbuf_puts(jenv *E, jbuf *b, const char *s) { jbuf_put(E, b, s, strlen(s)); }

/* ---- str() and repr() ---- */

void jv_float_repr(double f, char *buf, size_t cap)
{
    if (isnan(f)) {
        snprintf(buf, cap, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(buf, cap, f < 0 ? "-inf" : "inf");
        return;
    }
    /* the fewest significant digits that read back as f (Python's repr): the
     * correctly rounded string of each length, or the one just above or
     * below it in its last digit, the closer to f where both read back */
    char e[48];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, f);
        if (strtod(e, NULL) == f) break;
        const char *ex = strchr(e, 'e');
        long long m = 0;
        int mneg = e[0] == '-';
        for (const char *q = e + mneg; q < ex; q++)
            if (*q >= '0' && *q <= '9') m = m * 10 + (*q - '0');
        int x10 = atoi(ex + 1);
        char best[48] = "";
        long double best_d = 0;
        for (int d = -1; d <= 1; d += 2) {
            long long mm = m + d;
            int xx = x10;
            char digits[24];
            snprintf(digits, sizeof digits, "%lld", mm);
            int nd = (int)strlen(digits);
            if (nd != prec) { /* 99..9 + 1 or 10..0 - 1: the length changes */
                if (nd > prec) {
                    digits[prec] = 0;
                    xx++;
                } else if (nd < prec && prec > 1) {
                    continue;
                }
            }
            char c[48];
            snprintf(c, sizeof c, "%s%c%s%se%d", mneg ? "-" : "", digits[0], prec > 1 ? "." : "",
                     prec > 1 ? digits + 1 : "", xx);
            if (strtod(c, NULL) != f) continue;
            long double dist = fabsl(strtold(c, NULL) - (long double)f);
            if (!best[0] || dist < best_d) {
                snprintf(best, sizeof best, "%s", c);
                best_d = dist;
            }
        }
        if (best[0]) {
            /* back to the %.*e form the code below reads */
            snprintf(e, sizeof e, "%s", best);
            break;
        }
    }
    /* e: [-]d[.ddd]e[+-]XX: Python prints fixed notation for 1e-4 <= |f| < 1e16 */
    char digits[24];
    int nd = 0, neg = e[0] == '-';
    const char *p = e + neg;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    digits[nd] = 0;
    int exp10 = atoi(p + 1);
    char *o = buf;
    size_t left = cap;
#define OUT(...)                                                        \
    do {                                                                \
        int w_ = snprintf(o, left, __VA_ARGS__);                        \
        if (w_ < 0 || (size_t)w_ >= left) return;                       \
        o += w_;                                                        \
        left -= (size_t)w_;                                             \
    } while (0)
    if (neg) OUT("-");
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 < 0) {
            OUT("0.");
            for (int i = -1; i > exp10; i--) OUT("0");
            OUT("%s", digits);
        } else {
            for (int i = 0; i <= exp10; i++) OUT("%c", i < nd ? digits[i] : '0');
            OUT(".");
            if (nd > exp10 + 1) OUT("%s", digits + exp10 + 1);
            else OUT("0");
        }
    } else {
        OUT("%c", digits[0]);
        if (nd > 1) OUT(".%s", digits + 1);
        OUT("e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    }
#undef OUT
}

/* repr of a string: a byte of its text (escaped or not) keeps that byte's
 * taint; the quotes are the template's */
static void put_str_repr(jenv *E, jbuf *b, const char *s, size_t n, const uint8_t *t)
{
    int has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    jbuf_putc(E, b, q);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        if (c == '\\') snprintf(esc, sizeof esc, "\\\\");
        else if (c == (unsigned char)q) snprintf(esc, sizeof esc, "\\%c", q);
        else if (c == '\n') snprintf(esc, sizeof esc, "\\n");
        else if (c == '\r') snprintf(esc, sizeof esc, "\\r");
        else if (c == '\t') snprintf(esc, sizeof esc, "\\t");
        else if (c < 0x20 || c == 0x7f) snprintf(esc, sizeof esc, "\\x%02x", c);
        else if (c >= 0x80) { /* a code point: escaped where Python's str.isprintable says no */
            utf8proc_int32_t cp;
            utf8proc_ssize_t len = utf8proc_iterate((const utf8proc_uint8_t *)s + i,
                                                    (utf8proc_ssize_t)(n - i), &cp);
            if (len <= 0) { /* a bad byte: as it is */
                jbuf_put_t(E, b, s + i, 1, t ? t + i : NULL);
                continue;
            }
            utf8proc_category_t cat = utf8proc_category(cp);
            int printable = !(cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF ||
                              cat == UTF8PROC_CATEGORY_CS || cat == UTF8PROC_CATEGORY_CO ||
                              cat == UTF8PROC_CATEGORY_CN || cat == UTF8PROC_CATEGORY_ZL ||
                              cat == UTF8PROC_CATEGORY_ZP || cat == UTF8PROC_CATEGORY_ZS);
            if (printable) {
                jbuf_put_t(E, b, s + i, (size_t)len, t ? t + i : NULL);
            } else {
                char u[16];
                snprintf(u, sizeof u, cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x" : "\\U%08x",
                         (unsigned)cp);
                size_t k = strlen(u);
                uint8_t mk[16];
                memset(mk, t ? t[i] : 0, k);
                jbuf_put_t(E, b, u, k, mk);
            }
            i += (size_t)len - 1;
            continue;
        } else {
            esc[0] = (char)c;
            esc[1] = 0;
        }
        size_t k = strlen(esc);
        uint8_t mk[8];
        memset(mk, t ? t[i] : 0, k);
        jbuf_put_t(E, b, esc, k, mk);
    }
    jbuf_putc(E, b, q);
}

static void put_value(jenv *E, jbuf *b, jv v, int repr, int depth)
{
    if (depth > VALUE_DEPTH_MAX)
        jv_fail(E, VT_ERR_FORMAT, "chat template line %d: a value nested deeper than %d levels "
                "(a namespace that holds itself?)", E->line, VALUE_DEPTH_MAX);
    char num_buf[48];
    switch (v.k) {
    case JV_UNDEF: break;
    case JV_NONE: jbuf_puts(E, b, "None"); break;
    case JV_BOOL: jbuf_puts(E, b, v.u.b ? "True" : "False"); break;
    case JV_INT:
        snprintf(num_buf, sizeof num_buf, "%lld", (long long)v.u.i);
        jbuf_puts(E, b, num_buf);
        break;
    case JV_FLOAT:
        jv_float_repr(v.u.f, num_buf, sizeof num_buf);
        jbuf_puts(E, b, num_buf);
        break;
    case JV_STR:
        if (repr) put_str_repr(E, b, v.u.str.s, v.u.str.n, v.u.str.t);
        else jbuf_put_str(E, b, v);
        break;
    case JV_LIST: {
        const jlist *l = v.u.list;
        jbuf_putc(E, b, l->tuple ? '(' : '[');
        for (size_t i = 0; i < l->n; i++) {
            if (i) jbuf_puts(E, b, ", ");
            put_value(E, b, l->v[i], 1, depth + 1);
        }
        if (l->tuple && l->n == 1) jbuf_putc(E, b, ',');
        jbuf_putc(E, b, l->tuple ? ')' : ']');
        break;
    }
    case JV_DICT:
    case JV_NS: {
        const jdict *d = v.u.dict;
        if (v.k == JV_NS) jbuf_puts(E, b, "<Namespace ");
        jbuf_putc(E, b, '{');
        for (size_t i = 0; i < d->n; i++) {
            if (i) jbuf_puts(E, b, ", ");
            put_value(E, b, d->key[i], 1, depth + 1);
            jbuf_puts(E, b, ": ");
            put_value(E, b, d->val[i], 1, depth + 1);
        }
        jbuf_putc(E, b, '}');
        if (v.k == JV_NS) jbuf_putc(E, b, '>');
        break;
    }
    case JV_MACRO: jbuf_puts(E, b, "<Macro>"); break;
    case JV_FUNC: jbuf_puts(E, b, "<built-in function>"); break;
    case JV_LOOP: jbuf_puts(E, b, "<LoopContext>"); break;
    }
}

void jv_print(jenv *E, jbuf *b, jv v) { put_value(E, b, v, 0, 0); }
void jv_repr(jenv *E, jbuf *b, jv v) { put_value(E, b, v, 1, 0); }

jv jv_to_str(jenv *E, jv v)
{
    if (v.k == JV_STR) return v;
    jbuf b = {0}; /* scratch: not held to the output limit */
    put_value(E, &b, v, 0, 0);
    return jv_from_buf(E, &b);
}

/* ---- json.dumps ---- */

/* a JSON string; a byte of the text (escaped or not) keeps its taint;
 * ensure_ascii: a non-ASCII code point as \uXXXX (a surrogate pair above
 * U+FFFF), as json.dumps writes it */
static void put_json_str(jenv *E, jbuf *b, const char *s, size_t n, const uint8_t *t, int ensure_ascii)
{
    jbuf_putc(E, b, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[16];
        size_t from = i;
        switch (c) {
        case '"': snprintf(esc, sizeof esc, "\\\""); break;
        case '\\': snprintf(esc, sizeof esc, "\\\\"); break;
        case '\n': snprintf(esc, sizeof esc, "\\n"); break;
        case '\r': snprintf(esc, sizeof esc, "\\r"); break;
        case '\t': snprintf(esc, sizeof esc, "\\t"); break;
        case '\b': snprintf(esc, sizeof esc, "\\b"); break;
        case '\f': snprintf(esc, sizeof esc, "\\f"); break;
        default:
            if (c < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", c);
            } else if (c >= 0x80 && ensure_ascii) {
                unsigned cp = c, k = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
                cp &= k == 3 ? 0x07 : k == 2 ? 0x0F : k == 1 ? 0x1F : 0xFF;
                for (unsigned j = 0; j < k && i + 1 < n; j++) cp = cp << 6 | ((unsigned char)s[++i] & 0x3F);
                if (cp >= 0x10000) {
                    cp -= 0x10000;
                    snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
                } else {
                    snprintf(esc, sizeof esc, "\\u%04x", cp);
                }
            } else {
                esc[0] = (char)c;
                esc[1] = 0;
            }
        }
        size_t k = strlen(esc);
        uint8_t mk[16];
        memset(mk, t ? t[from] : 0, k);
        jbuf_put_t(E, b, esc, k, mk);
    }
    jbuf_putc(E, b, '"');
}

static void json_newline(jenv *E, jbuf *b, int indent, int level)
{
    jbuf_putc(E, b, '\n');
    for (int i = 0; i < indent * level; i++) jbuf_putc(E, b, ' ');
}

void jv_tojson(jenv *E, jbuf *b, jv v, int indent, int level)
{
    jv_json_opts o = {.indent = indent, .item_sep = jv_cstr(indent >= 0 ? "," : ", "),
                      .key_sep = jv_cstr(": ")};
    jv_tojson_opts(E, b, v, &o, level);
}

static int key_less(jv a, jv b) /* sort_keys: strings by code point */
{
    if (a.k != JV_STR || b.k != JV_STR) return 0;
    size_t n = a.u.str.n < b.u.str.n ? a.u.str.n : b.u.str.n;
    int c = memcmp(a.u.str.s, b.u.str.s, n);
    return c < 0 || (!c && a.u.str.n < b.u.str.n);
}

void jv_tojson_opts(jenv *E, jbuf *b, jv v, const jv_json_opts *o, int level)
{
    char num_buf[48];
    if (level > VALUE_DEPTH_MAX)
        jv_fail(E, VT_ERR_FORMAT, "chat template line %d: tojson of a value nested deeper than %d "
                "levels (a namespace that holds itself?)", E->line, VALUE_DEPTH_MAX);
    int indent = o->indent;
    switch (v.k) {
    case JV_NONE: jbuf_puts(E, b, "null"); break;
    case JV_BOOL: jbuf_puts(E, b, v.u.b ? "true" : "false"); break;
    case JV_INT:
        snprintf(num_buf, sizeof num_buf, "%lld", (long long)v.u.i);
        jbuf_puts(E, b, num_buf);
        break;
    case JV_FLOAT:
        if (isnan(v.u.f)) jbuf_puts(E, b, "NaN");
        else if (isinf(v.u.f)) jbuf_puts(E, b, v.u.f < 0 ? "-Infinity" : "Infinity");
        else {
            jv_float_repr(v.u.f, num_buf, sizeof num_buf);
            jbuf_puts(E, b, num_buf);
        }
        break;
    case JV_STR: put_json_str(E, b, v.u.str.s, v.u.str.n, v.u.str.t, o->ensure_ascii); break;
    case JV_LIST: {
        const jlist *l = v.u.list;
        if (!l->n) {
            jbuf_puts(E, b, "[]");
            break;
        }
        jbuf_putc(E, b, '[');
        for (size_t i = 0; i < l->n; i++) {
            if (i) jbuf_put_str(E, b, o->item_sep);
            if (indent >= 0) json_newline(E, b, indent, level + 1);
            jv_tojson_opts(E, b, l->v[i], o, level + 1);
        }
        if (indent >= 0) json_newline(E, b, indent, level);
        jbuf_putc(E, b, ']');
        break;
    }
    case JV_DICT:
    case JV_NS: {
        const jdict *d = v.u.dict;
        if (!d->n) {
            jbuf_puts(E, b, "{}");
            break;
        }
        size_t *order = jv_alloc(E, d->n * sizeof *order);
        for (size_t i = 0; i < d->n; i++) order[i] = i;
        if (o->sort_keys) /* insertion sort: stable, and dicts are small */
            for (size_t i = 1; i < d->n; i++)
                for (size_t j = i; j > 0 && key_less(d->key[order[j]], d->key[order[j - 1]]); j--) {
                    size_t t = order[j];
                    order[j] = order[j - 1];
                    order[j - 1] = t;
                }
        jbuf_putc(E, b, '{');
        for (size_t ii = 0; ii < d->n; ii++) {
            size_t i = order[ii];
            if (ii) jbuf_put_str(E, b, o->item_sep);
            if (indent >= 0) json_newline(E, b, indent, level + 1);
            jv k = d->key[i];
            if (k.k == JV_STR) {
                put_json_str(E, b, k.u.str.s, k.u.str.n, k.u.str.t, o->ensure_ascii);
            } else { /* Python converts int/float/bool/None keys to strings */
                jbuf kb = {0};
                if (k.k == JV_NONE) jbuf_puts(E, &kb, "null");
                else if (k.k == JV_BOOL) jbuf_puts(E, &kb, k.u.b ? "true" : "false");
                else jv_tojson(E, &kb, k, -1, 0);
                put_json_str(E, b, kb.p ? kb.p : "", kb.n, NULL, 0);
            }
            jbuf_put_str(E, b, o->key_sep);
            jv_tojson_opts(E, b, d->val[i], o, level + 1);
        }
        if (indent >= 0) json_newline(E, b, indent, level);
        jbuf_putc(E, b, '}');
        break;
    }
    default:
        jv_fail(E, VT_ERR_FORMAT, "tojson: a %s is not JSON serializable", jv_kind_name(v));
    }
}

/* ---- the JSON parser of the render's variables ---- */

typedef struct jparse {
    const char *s, *end;
    int depth;
} jparse;

static void skip_ws(jparse *p)
{
    while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r'))
        p->s++;
}

static int hex4(const char *s, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return 0;
    }
    *out = v;
    return 1;
}

static void put_utf8(jenv *E, jbuf *b, unsigned cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) { u[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { u[0] = (char)(0xC0 | cp >> 6); u[1] = (char)(0x80 | (cp & 0x3F)); n = 2; }
    else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | cp >> 12); u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F)); n = 3;
    } else {
        u[0] = (char)(0xF0 | cp >> 18); u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); u[3] = (char)(0x80 | (cp & 0x3F)); n = 4;
    }
    jbuf_put(E, b, u, n);
}

static vt_status parse_value(jenv *E, jparse *p, jv *out);

static vt_status parse_string(jenv *E, jparse *p, jv *out)
{
    p->s++; /* the quote */
    jbuf b = {0};
    while (p->s < p->end && *p->s != '"') {
        unsigned char c = (unsigned char)*p->s;
        if (c < 0x20) goto bad;
        if (c != '\\') {
            jbuf_putc(E, &b, (char)c);
            p->s++;
            continue;
        }
        if (p->end - p->s < 2) goto bad;
        char e = p->s[1];
        p->s += 2;
        switch (e) {
        case '"': jbuf_putc(E, &b, '"'); break;
        case '\\': jbuf_putc(E, &b, '\\'); break;
        case '/': jbuf_putc(E, &b, '/'); break;
        case 'b': jbuf_putc(E, &b, '\b'); break;
        case 'f': jbuf_putc(E, &b, '\f'); break;
        case 'n': jbuf_putc(E, &b, '\n'); break;
        case 'r': jbuf_putc(E, &b, '\r'); break;
        case 't': jbuf_putc(E, &b, '\t'); break;
        case 'u': {
            unsigned cp, lo;
            if (p->end - p->s < 4 || !hex4(p->s, &cp)) goto bad;
            p->s += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && p->end - p->s >= 6 && p->s[0] == '\\' &&
                p->s[1] == 'u' && hex4(p->s + 2, &lo) && lo >= 0xDC00 && lo < 0xE000) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                p->s += 6;
            }
            put_utf8(E, &b, cp);
            break;
        }
        default: goto bad;
        }
    }
    if (p->s >= p->end) goto bad;
    p->s++;
    *out = jv_str(E, b.p ? b.p : "", b.n);
    return VT_OK;
bad:
    return VT_ERR_INVALID_ARG;
}

static vt_status parse_number(jenv *E, jparse *p, jv *out)
{
    (void)E;
    const char *s = p->s;
    int is_float = 0;
    if (s < p->end && *s == '-') s++;
    while (s < p->end && ((*s >= '0' && *s <= '9') || *s == '.' || *s == 'e' || *s == 'E' ||
                          *s == '+' || *s == '-')) {
        if (*s == '.' || *s == 'e' || *s == 'E') is_float = 1;
        s++;
    }
    char tmp[64];
    size_t n = (size_t)(s - p->s);
    if (!n || n >= sizeof tmp) return VT_ERR_INVALID_ARG;
    memcpy(tmp, p->s, n);
    tmp[n] = 0;
    char *end;
    if (is_float) {
        double f = strtod(tmp, &end);
        if (*end) return VT_ERR_INVALID_ARG;
        *out = jv_float(f);
    } else {
        long long i = strtoll(tmp, &end, 10);
        if (*end) return VT_ERR_INVALID_ARG;
        *out = jv_int(i);
    }
    p->s = s;
    return VT_OK;
}

static vt_status parse_value(jenv *E, jparse *p, jv *out)
{
    skip_ws(p);
    if (p->s >= p->end || ++p->depth > 512) return VT_ERR_INVALID_ARG;
    vt_status st = VT_OK;
    char c = *p->s;
    if (c == '{' || c == '[') {
        int obj = c == '{';
        p->s++;
        *out = obj ? jv_dict(E, 0) : jv_list(E, 0);
        skip_ws(p);
        if (p->s < p->end && *p->s == (obj ? '}' : ']')) {
            p->s++;
        } else {
            for (;;) {
                jv k = jv_undef(), v;
                if (obj) {
                    skip_ws(p);
                    if (p->s >= p->end || *p->s != '"') return VT_ERR_INVALID_ARG;
                    if ((st = parse_string(E, p, &k))) return st;
                    skip_ws(p);
                    if (p->s >= p->end || *p->s != ':') return VT_ERR_INVALID_ARG;
                    p->s++;
                }
                if ((st = parse_value(E, p, &v))) return st;
                if (obj) jv_dict_set(E, out, k, v);
                else jv_list_push(E, out, v);
                skip_ws(p);
                if (p->s < p->end && *p->s == ',') {
                    p->s++;
                    continue;
                }
                if (p->s < p->end && *p->s == (obj ? '}' : ']')) {
                    p->s++;
                    break;
                }
                return VT_ERR_INVALID_ARG;
            }
        }
    } else if (c == '"') {
        st = parse_string(E, p, out);
    } else if (p->end - p->s >= 4 && !memcmp(p->s, "true", 4)) {
        *out = jv_bool(1);
        p->s += 4;
    } else if (p->end - p->s >= 5 && !memcmp(p->s, "false", 5)) {
        *out = jv_bool(0);
        p->s += 5;
    } else if (p->end - p->s >= 4 && !memcmp(p->s, "null", 4)) {
        *out = jv_none();
        p->s += 4;
    } else {
        st = parse_number(E, p, out);
    }
    p->depth--;
    return st;
}

vt_status jv_parse_json(jenv *E, const char *s, size_t n, jv *out)
{
    jparse p = {s, s + n, 0};
    vt_status st = parse_value(E, &p, out);
    if (st) return st;
    skip_ws(&p);
    return p.s == p.end ? VT_OK : VT_ERR_INVALID_ARG;
}
