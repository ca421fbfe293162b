/*
 * jinja_parse.c - the chat-template interpreter's scanner and parser
 * (jinja_internal.h): the template's text and tags into tokens, with
 * Jinja's whitespace control (- and + inside a tag's delimiters, and the
 * environment's trim_blocks and lstrip_blocks as transformers sets them),
 * then a recursive-descent parse into statements and expressions with
 * Jinja's operator precedence (jinja2/parser.py's order: conditional
 * expression, or, and, not, comparisons, + -, ~, * / // %, **, unary - +,
 * then subscripts, attributes, calls, filters and tests).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_internal.h"

typedef enum tk {
    T_END, T_TEXT, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END,
    T_NAME, T_STRING, T_INT, T_FLOAT, T_OP
} tk;

typedef struct token {
    tk k;
    int line;
    const char *s; /* T_TEXT, T_STRING: the text (unescaped), T_NAME, T_OP: the spelling */
    size_t n;
    int64_t i;
    double f;
} token;

typedef struct parser {
    jenv *E;
    token *t;
    size_t n, cap, pos;
    const char *src, *lpos; /* line_of's memory: the line of lpos */
    int lline;
    int depth;              /* nested expressions and blocks being parsed */
} parser;

#define PARSE_DEPTH_MAX 256 /* deeper nesting is refused: the parser recurses */

static void enter_parse(parser *P, int line)
{
    if (++P->depth > PARSE_DEPTH_MAX)
        jv_fail(P->E, VT_ERR_FORMAT, "chat template line %d: nesting deeper than %d", line,
                PARSE_DEPTH_MAX);
}

static void push(parser *P, token t)
{
    if (P->n == P->cap) {
        size_t cap = P->cap ? 2 * P->cap : 256;
        token *nt = jv_alloc(P->E, cap * sizeof *nt);
        if (P->n) memcpy(nt, P->t, P->n * sizeof *nt);
        P->t = nt;
        P->cap = cap;
    }
    P->t[P->n++] = t;
}

/* ---- the scanner ---- */

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
static int is_name0(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* the line of p, counted on from the last position asked (the scanner
 * asks in increasing order, mostly) */
static int line_at(parser *P, const char *p)
{
    if (!P->lpos || p < P->lpos) {
        P->lpos = P->src;
        P->lline = 1;
    }
    for (const char *q = P->lpos; q < p; q++) P->lline += *q == '\n';
    P->lpos = p;
    return P->lline;
}
#define line_of(src, p) ((void)(src), line_at(P, (p)))

/* The text token of [s, e), less what whitespace control takes: rstrip
 * (the next tag's -), lstrip_blocks (the next tag is a block or comment
 * on a line of its own so far), lstrip (the previous tag's -), trim_blocks
 * (the previous tag was a block or comment: one newline). */
static void push_text(parser *P, const char *src, const char *s, const char *e, int lstrip,
                      int trim_nl, int rstrip, int lstrip_line)
{
    size_t k;
    if (lstrip)
        while (s < e && (k = jb_space_at(s, (size_t)(e - s), 0))) s += k;
    else if (trim_nl) {
        if (s < e && *s == '\n') s++;
        else if (e - s >= 2 && s[0] == '\r' && s[1] == '\n') s += 2;
    }
    if (rstrip) {
        while (e > s && (k = jb_space_before(s, (size_t)(e - s)))) e -= k;
    } else if (lstrip_line) {
        const char *q = e;
        while (q > s && (q[-1] == ' ' || q[-1] == '\t')) q--;
        if (q == s ? 1 : q[-1] == '\n') {
            /* only spaces since the line's start (or since the text's start,
             * which must then itself start a line: the previous tag's end) */
            if (q > s || s == src || s[-1] == '\n') e = q;
        }
    }
    if (e > s) push(P, (token){.k = T_TEXT, .line = line_of(src, s), .s = s, .n = (size_t)(e - s)});
}

static const char *const OPS[] = {"**", "//", "==", "!=", "<=", ">=", "<", ">", "+", "-", "*", "/",
                                  "%", "~", "|", ".", ",", ":", "(", ")", "[", "]", "{", "}", "=",
                                  NULL};

/* Tokens of a tag from p up to its end delimiter (close: "}}", "%}" or
 * "#}"); returns the end delimiter's start, and *ctl gets its control
 * character ('-', '+' or 0). */
static const char *scan_tag(parser *P, const char *src, const char *p, const char *end,
                            const char *close, int *ctl)
{
    jenv *E = P->E;
    int depth = 0; /* open ( [ {: a "}}" inside a dict literal does not end the tag */
    for (;;) {
        while (p < end && is_space(*p)) p++;
        if (p >= end) jv_fail(E, VT_ERR_FORMAT, "chat template line %d: a tag is not closed (missing '%s')",
                              line_of(src, p), close);
        if (!depth && (*p == '-' || *p == '+') && end - p >= 3 && p[1] == close[0] && p[2] == close[1]) {
            *ctl = *p;
            return p;
        }
        if (!depth && end - p >= 2 && p[0] == close[0] && p[1] == close[1]) {
            *ctl = 0;
            return p;
        }
        int line = line_of(src, p);
        if (is_name0(*p)) {
            const char *s = p;
            while (p < end && (is_name0(*p) || is_digit(*p))) p++;
            push(P, (token){.k = T_NAME, .line = line, .s = s, .n = (size_t)(p - s)});
        } else if (is_digit(*p)) {
            const char *s = p;
            int is_f = 0;
            while (p < end && (is_digit(*p) || *p == '_')) p++;
            if (p + 1 < end && *p == '.' && is_digit(p[1])) {
                is_f = 1;
                p++;
                while (p < end && is_digit(*p)) p++;
            }
            if (p < end && (*p == 'e' || *p == 'E')) {
                const char *q = p + 1;
                if (q < end && (*q == '+' || *q == '-')) q++;
                if (q < end && is_digit(*q)) {
                    is_f = 1;
                    p = q;
                    while (p < end && is_digit(*p)) p++;
                }
            }
            char tmp[64];
            size_t k = 0;
            for (const char *q = s; q < p && k < sizeof tmp - 1; q++) {
                if (*q == '_' && !(q > s && is_digit(q[-1]) && q + 1 < p && is_digit(q[1])))
                    jv_fail(E, VT_ERR_FORMAT, "chat template line %d: a misplaced '_' in a number", line);
                if (*q != '_') tmp[k++] = *q;
            }
            tmp[k] = 0;
            token t = {.k = is_f ? T_FLOAT : T_INT, .line = line};
            if (is_f) t.f = strtod(tmp, NULL);
            else {
                errno = 0;
                t.i = strtoll(tmp, NULL, 10);
                if (errno == ERANGE)
                    jv_fail(E, VT_ERR_FORMAT, "chat template line %d: integer %s is beyond 64 bits", line, tmp);
            }
            push(P, t);
        } else if (*p == '\'' || *p == '"') {
            char q = *p++;
            jbuf b = {0};
            jbuf *keep = E->out;
            E->out = NULL;
            while (p < end && *p != q) {
                if (*p == '\\' && p + 1 < end) {
                    char c = p[1];
                    p += 2;
                    switch (c) {
                    case 'n': jbuf_putc(E, &b, '\n'); break;
                    case 't': jbuf_putc(E, &b, '\t'); break;
                    case 'r': jbuf_putc(E, &b, '\r'); break;
                    case 'a': jbuf_putc(E, &b, '\a'); break;
                    case 'b': jbuf_putc(E, &b, '\b'); break;
                    case 'f': jbuf_putc(E, &b, '\f'); break;
                    case 'v': jbuf_putc(E, &b, '\v'); break;
                    case '\\': jbuf_putc(E, &b, '\\'); break;
                    case '\'': jbuf_putc(E, &b, '\''); break;
                    case '"': jbuf_putc(E, &b, '"'); break;
                    case '\n': break; /* a backslash-newline continues the line */
                    case 'x': case 'u': case 'U': { /* \xHH, \uHHHH, \UHHHHHHHH */
                        int digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
                        unsigned cp = 0;
                        int ok = end - p >= digits;
                        for (int i = 0; ok && i < digits; i++) {
                            char h = p[i];
                            int v = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                                  : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                            if (v < 0) ok = 0;
                            else cp = cp << 4 | (unsigned)v;
                        }
                        if (!ok || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000))
                            jv_fail(E, VT_ERR_FORMAT, "chat template line %d: a bad \\%c escape in a "
                                    "string", line, c);
                        p += digits;
                        char u[4];
                        size_t un;
                        if (cp < 0x80) { u[0] = (char)cp; un = 1; }
                        else if (cp < 0x800) { u[0] = (char)(0xC0 | cp >> 6); u[1] = (char)(0x80 | (cp & 0x3F)); un = 2; }
                        else if (cp < 0x10000) { u[0] = (char)(0xE0 | cp >> 12); u[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); u[2] = (char)(0x80 | (cp & 0x3F)); un = 3; }
                        else { u[0] = (char)(0xF0 | cp >> 18); u[1] = (char)(0x80 | ((cp >> 12) & 0x3F)); u[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); u[3] = (char)(0x80 | (cp & 0x3F)); un = 4; }
                        jbuf_put(E, &b, u, un);
                        break;
                    }
                    default:
                        if (c >= '0' && c <= '7') { /* octal, up to three digits */
                            unsigned v = (unsigned)(c - '0');
                            for (int i = 0; i < 2 && p < end && *p >= '0' && *p <= '7'; i++)
                                v = v * 8 + (unsigned)(*p++ - '0');
                            if (v < 0x80) jbuf_putc(E, &b, (char)v);
                            else {
                                char u[2] = {(char)(0xC0 | v >> 6), (char)(0x80 | (v & 0x3F))};
                                jbuf_put(E, &b, u, 2);
                            }
                        } else { /* Python keeps an unknown escape as written */
                            jbuf_putc(E, &b, '\\');
                            jbuf_putc(E, &b, c);
                        }
                    }
                } else {
                    jbuf_putc(E, &b, *p++);
                }
            }
            E->out = keep;
            if (p >= end) jv_fail(E, VT_ERR_FORMAT, "chat template line %d: a string is not closed", line);
            p++;
            jv s = jv_str(E, b.p ? b.p : "", b.n);
            push(P, (token){.k = T_STRING, .line = line, .s = s.u.str.s, .n = s.u.str.n});
        } else {
            int k = 0;
            for (; OPS[k]; k++) {
                size_t n = strlen(OPS[k]);
                if ((size_t)(end - p) >= n && !memcmp(p, OPS[k], n)) break;
            }
            if (!OPS[k])
                jv_fail(E, VT_ERR_FORMAT, "chat template line %d: unexpected character '%c'", line,
                        *p);
            push(P, (token){.k = T_OP, .line = line, .s = OPS[k], .n = strlen(OPS[k])});
            p += strlen(OPS[k]);
            if (*OPS[k] == '(' || *OPS[k] == '[' || *OPS[k] == '{') depth++;
            else if ((*OPS[k] == ')' || *OPS[k] == ']' || *OPS[k] == '}') && depth) depth--;
        }
    }
}

static void scan(parser *P, const char *src, size_t len)
{
    const char *p = src, *end = src + len;
    int lstrip = 0, trim_nl = 0; /* from the previous tag */
    while (p < end) {
        /* the next tag opening */
        const char *t = p;
        while (t < end && !(t[0] == '{' && t + 1 < end && (t[1] == '{' || t[1] == '%' || t[1] == '#')))
            t++;
        if (t >= end) {
            push_text(P, src, p, end, lstrip, trim_nl, 0, 0);
            break;
        }
        char kind = t[1];
        char open_ctl = t + 2 < end && (t[2] == '-' || t[2] == '+') ? t[2] : 0;
        push_text(P, src, p, t, lstrip, trim_nl, open_ctl == '-',
                  kind != '{' && open_ctl != '+');
        const char *q = t + 2 + (open_ctl ? 1 : 0);
        int ctl = 0, line = line_of(src, t);
        if (kind == '#') {
            const char *c = q;
            while (c + 1 < end && !(c[0] == '#' && c[1] == '}')) c++;
            if (c + 1 >= end) jv_fail(P->E, VT_ERR_FORMAT, "chat template line %d: a comment is not closed", line);
            ctl = c > q && (c[-1] == '-' || c[-1] == '+') ? c[-1] : 0;
            p = c + 2;
        } else {
            push(P, (token){.k = kind == '{' ? T_VAR_BEGIN : T_BLOCK_BEGIN, .line = line});
            size_t first = P->n;
            const char *close = kind == '{' ? "}}" : "%}";
            const char *c = scan_tag(P, src, q, end, close, &ctl);
            push(P, (token){.k = kind == '{' ? T_VAR_END : T_BLOCK_END, .line = line_of(src, c)});
            p = c + (ctl ? 3 : 2);
            /* raw: the text up to {% endraw %} as it is */
            if (kind == '%' && P->n == first + 2 && P->t[first].k == T_NAME &&
                P->t[first].n == 3 && !memcmp(P->t[first].s, "raw", 3)) {
                P->n -= 3; /* the raw tag's tokens */
                const char *r = p;
                for (;; r++) {
                    if (r + 1 >= end) jv_fail(P->E, VT_ERR_FORMAT, "chat template line %d: raw is not closed by endraw", line);
                    if (r[0] != '{' || r[1] != '%') continue;
                    const char *s = r + 2;
                    if (s < end && (*s == '-' || *s == '+')) s++;
                    while (s < end && is_space(*s)) s++;
                    if (end - s >= 6 && !memcmp(s, "endraw", 6)) break;
                }
                int rctl = r + 2 < end ? r[2] : 0;
                push_text(P, src, p, r, ctl == '-', 0, rctl == '-', rctl != '+'); /* jinja2 keeps
                                                                                     raw's newline */
                const char *s = r + 2;
                while (s + 1 < end && !(s[0] == '%' && s[1] == '}')) s++;
                if (s + 1 >= end) jv_fail(P->E, VT_ERR_FORMAT, "chat template line %d: endraw is not closed", line);
                ctl = s[-1] == '-' || s[-1] == '+' ? s[-1] : 0;
                p = s + 2;
            }
        }
        lstrip = ctl == '-';
        trim_nl = kind != '{' && ctl != '+';
    }
    push(P, (token){.k = T_END, .line = line_of(src, end)});
}

/* ---- the parser ---- */

static token *peek(parser *P) { return &P->t[P->pos]; }
static token *next(parser *P) { return &P->t[P->pos < P->n - 1 ? P->pos++ : P->pos]; }

static int is_op(const token *t, const char *op)
{
    return t->k == T_OP && t->n == strlen(op) && !memcmp(t->s, op, t->n);
}

static int is_name(const token *t, const char *name)
{
    return t->k == T_NAME && t->n == strlen(name) && !memcmp(t->s, name, t->n);
}

static const char *tok_desc(const token *t, char *buf, size_t cap)
{
    switch (t->k) {
    case T_END: return "the end of the template";
    case T_TEXT: return "text";
    case T_VAR_BEGIN: return "'{{'";
    case T_VAR_END: return "'}}'";
    case T_BLOCK_BEGIN: return "'{%'";
    case T_BLOCK_END: return "'%}'";
    case T_STRING: return "a string";
    case T_INT: case T_FLOAT: return "a number";
    default: snprintf(buf, cap, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s); return buf;
    }
}

static _Noreturn void unexpected(parser *P, const token *t, const char *wanted)
{
    char b[64];
    jv_fail(P->E, VT_ERR_FORMAT, "chat template line %d: expected %s, got %s", t->line, wanted,
            tok_desc(t, b, sizeof b));
}

static void expect_op(parser *P, const char *op)
{
    token *t = next(P);
    if (!is_op(t, op)) {
        char w[16];
        snprintf(w, sizeof w, "'%s'", op);
        unexpected(P, t, w);
    }
}

static const char *expect_name(parser *P)
{
    token *t = next(P);
    if (t->k != T_NAME) unexpected(P, t, "a name");
    return jv_str(P->E, t->s, t->n).u.str.s;
}

static jnode *node(parser *P, jnode_kind k, int line)
{
    jnode *n = jv_alloc(P->E, sizeof *n);
    memset(n, 0, sizeof *n);
    n->k = k;
    n->line = line;
    return n;
}

/* a growing array of node pointers in the arena */
typedef struct nvec {
    jnode **v;
    size_t n, cap;
} nvec;

static void nvec_push(parser *P, nvec *a, jnode *x)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 4;
        jnode **nv = jv_alloc(P->E, cap * sizeof *nv);
        if (a->n) memcpy(nv, a->v, a->n * sizeof *nv);
        a->v = nv;
        a->cap = cap;
    }
    a->v[a->n++] = x;
}

static jnode *parse_expr(parser *P);
static jnode *parse_or(parser *P);
static jnode *parse_unary(parser *P, int with_filter);

/* (args) of a call, a filter or a test: positional, then name=value */
static void parse_args(parser *P, jnode *x)
{
    nvec pos = {0}, kw = {0};
    const char **names = NULL;
    size_t n_names = 0, cap_names = 0;
    expect_op(P, "(");
    while (!is_op(peek(P), ")")) {
        if (pos.n || kw.n) expect_op(P, ",");
        if (is_op(peek(P), ")")) break; /* a trailing comma */
        token *t = peek(P);
        if (t->k == T_NAME && is_op(&P->t[P->pos + 1], "=")) {
            const char *name = expect_name(P);
            next(P);
            if (n_names == cap_names) {
                cap_names = cap_names ? 2 * cap_names : 4;
                const char **nn = jv_alloc(P->E, cap_names * sizeof *nn);
                if (n_names) memcpy(nn, names, n_names * sizeof *nn);
                names = nn;
            }
            names[n_names++] = name;
            nvec_push(P, &kw, parse_expr(P));
        } else {
            if (kw.n) jv_fail(P->E, VT_ERR_FORMAT, "chat template line %d: a positional argument after a keyword argument", t->line);
            nvec_push(P, &pos, parse_expr(P));
        }
    }
    expect_op(P, ")");
    x->kids = pos.v;
    x->n_kids = pos.n;
    x->names = names;
    x->n_names = n_names;
    x->kw = kw.v;
}

static jnode *parse_primary(parser *P)
{
    token *t = next(P);
    jnode *x;
    switch (t->k) {
    case T_NAME:
        if (is_name(t, "true") || is_name(t, "True") || is_name(t, "false") || is_name(t, "False")) {
            x = node(P, X_LITERAL, t->line);
            x->value = jv_bool(t->s[0] == 't' || t->s[0] == 'T');
        } else if (is_name(t, "none") || is_name(t, "None")) {
            x = node(P, X_LITERAL, t->line);
            x->value = jv_none();
        } else {
            x = node(P, X_NAME, t->line);
            x->name = jv_str(P->E, t->s, t->n).u.str.s;
        }
        return x;
    case T_STRING: {
        /* adjacent strings are one */
        jbuf b = {0};
        jbuf *keep = P->E->out;
        P->E->out = NULL;
        jbuf_put(P->E, &b, t->s, t->n);
        while (peek(P)->k == T_STRING) {
            token *u = next(P);
            jbuf_put(P->E, &b, u->s, u->n);
        }
        P->E->out = keep;
        x = node(P, X_LITERAL, t->line);
        x->value = jv_str(P->E, b.p ? b.p : "", b.n);
        return x;
    }
    case T_INT:
        x = node(P, X_LITERAL, t->line);
        x->value = jv_int(t->i);
        return x;
    case T_FLOAT:
        x = node(P, X_LITERAL, t->line);
        x->value = jv_float(t->f);
        return x;
    case T_OP:
        if (is_op(t, "(")) { /* a parenthesized expression, or a tuple */
            if (is_op(peek(P), ")")) {
                next(P);
                return node(P, X_TUPLE, t->line);
            }
            jnode *e = parse_expr(P);
            if (!is_op(peek(P), ",")) {
                expect_op(P, ")");
                return e;
            }
            nvec items = {0};
            nvec_push(P, &items, e);
            while (is_op(peek(P), ",")) {
                next(P);
                if (is_op(peek(P), ")")) break;
                nvec_push(P, &items, parse_expr(P));
            }
            expect_op(P, ")");
            x = node(P, X_TUPLE, t->line);
            x->kids = items.v;
            x->n_kids = items.n;
            return x;
        }
        if (is_op(t, "[")) {
            nvec items = {0};
            while (!is_op(peek(P), "]")) {
                if (items.n) expect_op(P, ",");
                if (is_op(peek(P), "]")) break;
                nvec_push(P, &items, parse_expr(P));
            }
            expect_op(P, "]");
            x = node(P, X_LIST, t->line);
            x->kids = items.v;
            x->n_kids = items.n;
            return x;
        }
        if (is_op(t, "{")) {
            nvec items = {0};
            while (!is_op(peek(P), "}")) {
                if (items.n) expect_op(P, ",");
                if (is_op(peek(P), "}")) break;
                nvec_push(P, &items, parse_expr(P));
                expect_op(P, ":");
                nvec_push(P, &items, parse_expr(P));
            }
            expect_op(P, "}");
            x = node(P, X_DICT, t->line);
            x->kids = items.v;
            x->n_kids = items.n;
            return x;
        }
        break;
    default:
        break;
    }
    unexpected(P, t, "an expression");
}

/* subscripts, attributes and calls after a primary */
static jnode *parse_postfix(parser *P, jnode *x)
{
    for (;;) {
        token *t = peek(P);
        if (is_op(t, ".")) {
            next(P);
            token *a = next(P);
            jnode *y;
            if (a->k == T_NAME) {
                y = node(P, X_ATTR, a->line);
                y->name = jv_str(P->E, a->s, a->n).u.str.s;
            } else if (a->k == T_INT) { /* x.0 is x[0] */
                y = node(P, X_ITEM, a->line);
                y->b = node(P, X_LITERAL, a->line);
                y->b->value = jv_int(a->i);
            } else {
                unexpected(P, a, "an attribute name");
            }
            y->a = x;
            x = y;
        } else if (is_op(t, "[")) {
            next(P);
            jnode *parts[3] = {NULL, NULL, NULL};
            int n_colons = 0;
            for (;;) {
                if (is_op(peek(P), "]")) break;
                if (is_op(peek(P), ":")) {
                    next(P);
                    if (++n_colons > 2) unexpected(P, peek(P), "']'");
                    continue;
                }
                if (parts[n_colons]) unexpected(P, peek(P), "':' or ']'");
                parts[n_colons] = parse_expr(P);
            }
            expect_op(P, "]");
            jnode *y;
            if (n_colons) {
                y = node(P, X_SLICE, t->line);
                y->b = parts[0];
                y->c = parts[1];
                y->d = parts[2];
            } else {
                if (!parts[0]) unexpected(P, t, "a subscript");
                y = node(P, X_ITEM, t->line);
                y->b = parts[0];
            }
            y->a = x;
            x = y;
        } else if (is_op(t, "(")) {
            jnode *y = node(P, X_CALL, t->line);
            y->a = x;
            parse_args(P, y);
            x = y;
        } else {
            return x;
        }
    }
}

/* filters (|name(args)), tests (is [not] name [arg]) and calls after x */
static jnode *parse_filters(parser *P, jnode *x)
{
    for (;;) {
        token *t = peek(P);
        if (is_op(t, "|")) {
            next(P);
            jnode *y = node(P, X_FILTER, t->line);
            y->name = expect_name(P);
            while (is_op(peek(P), ".")) { /* a dotted filter name */
                next(P);
                const char *more = expect_name(P);
                size_t n = strlen(y->name) + strlen(more) + 2;
                char *s = jv_alloc(P->E, n);
                snprintf(s, n, "%s.%s", y->name, more);
                y->name = s;
            }
            y->a = x;
            if (is_op(peek(P), "(")) parse_args(P, y);
            x = y;
        } else if (is_name(t, "is")) {
            next(P);
            jnode *y = node(P, X_TEST, t->line);
            if (is_name(peek(P), "not")) {
                next(P);
                y->op = 1;
            }
            token *n = next(P);
            if (n->k != T_NAME) unexpected(P, n, "the name of a test");
            y->name = jv_str(P->E, n->s, n->n).u.str.s;
            y->a = x;
            if (is_op(peek(P), "(")) {
                parse_args(P, y);
            } else {
                token *u = peek(P);
                /* one argument without parentheses (jinja2's rule): a
                 * primary, unless the next token is else, or, and */
                if (u->k == T_STRING || u->k == T_INT || u->k == T_FLOAT || is_op(u, "[") ||
                    is_op(u, "{") ||
                    (u->k == T_NAME && !is_name(u, "else") && !is_name(u, "or") &&
                     !is_name(u, "and"))) {
                    nvec a = {0};
                    nvec_push(P, &a, parse_postfix(P, parse_primary(P)));
                    y->kids = a.v;
                    y->n_kids = a.n;
                }
            }
            x = y;
        } else {
            return x;
        }
    }
}

static jnode *parse_unary(parser *P, int with_filter)
{
    token *t = peek(P);
    jnode *x;
    enter_parse(P, t->line);
    if (is_op(t, "-") || is_op(t, "+")) {
        next(P);
        x = node(P, is_op(t, "-") ? X_NEG : X_POS, t->line);
        x->a = parse_unary(P, 0);
    } else {
        x = parse_postfix(P, parse_primary(P));
    }
    x = with_filter ? parse_filters(P, x) : x;
    P->depth--;
    return x;
}

static jnode *binop(parser *P, int op, jnode *a, jnode *b, int line)
{
    jnode *x = node(P, X_BINOP, line);
    x->op = op;
    x->a = a;
    x->b = b;
    return x;
}

static jnode *parse_pow(parser *P)
{
    jnode *x = parse_unary(P, 1);
    while (is_op(peek(P), "**")) {
        int line = next(P)->line;
        x = binop(P, OP_POW, x, parse_unary(P, 1), line);
    }
    return x;
}

static jnode *parse_math2(parser *P)
{
    jnode *x = parse_pow(P);
    for (;;) {
        token *t = peek(P);
        int op = is_op(t, "*") ? OP_MUL : is_op(t, "/") ? OP_DIV : is_op(t, "//") ? OP_FLOORDIV
                 : is_op(t, "%") ? OP_MOD : 0;
        if (!op) return x;
        next(P);
        x = binop(P, op, x, parse_pow(P), t->line);
    }
}

static jnode *parse_concat(parser *P)
{
    jnode *x = parse_math2(P);
    while (is_op(peek(P), "~")) {
        int line = next(P)->line;
        x = binop(P, OP_CONCAT, x, parse_math2(P), line);
    }
    return x;
}

static jnode *parse_math1(parser *P)
{
    jnode *x = parse_concat(P);
    for (;;) {
        token *t = peek(P);
        int op = is_op(t, "+") ? OP_ADD : is_op(t, "-") ? OP_SUB : 0;
        if (!op) return x;
        next(P);
        x = binop(P, op, x, parse_concat(P), t->line);
    }
}

static jnode *parse_compare(parser *P)
{
    jnode *first = parse_math1(P);
    nvec operands = {0};
    int ops[64], n_ops = 0;
    for (;;) {
        token *t = peek(P);
        int op = is_op(t, "==") ? OP_EQ : is_op(t, "!=") ? OP_NE : is_op(t, "<") ? OP_LT
                 : is_op(t, "<=") ? OP_LE : is_op(t, ">") ? OP_GT : is_op(t, ">=") ? OP_GE
                 : is_name(t, "in") ? OP_IN : 0;
        if (!op && is_name(t, "not") && is_name(&P->t[P->pos + 1], "in")) {
            next(P);
            op = OP_NOT_IN;
        }
        if (!op) break;
        if (n_ops == 64) jv_fail(P->E, VT_ERR_FORMAT, "chat template line %d: more than 64 chained comparisons", t->line);
        next(P);
        if (!operands.n) nvec_push(P, &operands, first);
        ops[n_ops++] = op;
        nvec_push(P, &operands, parse_math1(P));
    }
    if (!n_ops) return first;
    jnode *x = node(P, X_COMPARE, first->line);
    x->kids = operands.v;
    x->n_kids = operands.n;
    x->ops = jv_alloc(P->E, (size_t)n_ops * sizeof(int));
    memcpy(x->ops, ops, (size_t)n_ops * sizeof(int));
    return x;
}

static jnode *parse_not(parser *P)
{
    if (is_name(peek(P), "not")) {
        jnode *x = node(P, X_NOT, next(P)->line);
        enter_parse(P, x->line);
        x->a = parse_not(P);
        P->depth--;
        return x;
    }
    return parse_compare(P);
}

static jnode *parse_and(parser *P)
{
    jnode *x = parse_not(P);
    while (is_name(peek(P), "and")) {
        jnode *y = node(P, X_AND, next(P)->line);
        y->a = x;
        y->b = parse_not(P);
        x = y;
    }
    return x;
}

static jnode *parse_or(parser *P)
{
    jnode *x = parse_and(P);
    while (is_name(peek(P), "or")) {
        jnode *y = node(P, X_OR, next(P)->line);
        y->a = x;
        y->b = parse_and(P);
        x = y;
    }
    return x;
}

static jnode *parse_expr(parser *P)
{
    enter_parse(P, peek(P)->line);
    jnode *x = parse_or(P);
    while (is_name(peek(P), "if")) {
        jnode *y = node(P, X_COND, next(P)->line);
        y->a = parse_or(P);
        y->b = x;
        if (is_name(peek(P), "else")) {
            next(P);
            y->c = parse_expr(P);
        }
        x = y;
    }
    P->depth--;
    return x;
}

/* ---- statements ---- */

static void expect_block_end(parser *P)
{
    token *t = next(P);
    if (t->k != T_BLOCK_END) unexpected(P, t, "'%}'");
}

/* the statements up to a block tag named one of ends (NULL-terminated);
 * that tag's name token is left next */
static jnode *parse_body(parser *P, const char *const *ends, const char *what);

static jnode *parse_if(parser *P, int line)
{
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    jnode *x = node(P, N_IF, line);
    x->a = parse_expr(P);
    expect_block_end(P);
    x->b = parse_body(P, ends, "if");
    token *t = next(P);
    if (is_name(t, "elif")) {
        x->c = parse_if(P, t->line);
        return x;
    }
    if (is_name(t, "else")) {
        static const char *const end_only[] = {"endif", NULL};
        expect_block_end(P);
        x->c = parse_body(P, end_only, "else");
        next(P);
    }
    expect_block_end(P);
    return x;
}

static jnode *parse_for(parser *P, int line)
{
    static const char *const ends[] = {"else", "endfor", NULL};
    jnode *x = node(P, N_FOR, line);
    const char *names[8];
    size_t n = 0;
    int paren = is_op(peek(P), "(");
    if (paren) next(P);
    do {
        if (n == 8) jv_fail(P->E, VT_ERR_FORMAT, "chat template line %d: more than 8 loop targets", line);
        names[n++] = expect_name(P);
    } while (is_op(peek(P), ",") && next(P));
    if (paren) expect_op(P, ")");
    x->names = jv_alloc(P->E, n * sizeof *x->names);
    memcpy(x->names, names, n * sizeof *names);
    x->n_names = n;
    token *in = next(P);
    if (!is_name(in, "in")) unexpected(P, in, "'in'");
    x->a = parse_or(P); /* no conditional expression: its if is the loop's filter */
    if (is_name(peek(P), "if")) {
        next(P);
        x->d = parse_or(P);
    }
    if (is_name(peek(P), "recursive"))
        jv_fail(P->E, VT_ERR_FORMAT, "chat template line %d: recursive loops are not supported", line);
    expect_block_end(P);
    x->b = parse_body(P, ends, "for");
    if (is_name(next(P), "else")) {
        static const char *const end_only[] = {"endfor", NULL};
        expect_block_end(P);
        x->c = parse_body(P, end_only, "for's else");
        next(P);
    }
    expect_block_end(P);
    return x;
}

static jnode *parse_set(parser *P, int line)
{
    const char *name = expect_name(P);
    if (is_op(peek(P), ".")) {
        next(P);
        jnode *x = node(P, N_SET_ATTR, line);
        x->name = name;
        x->attr = expect_name(P);
        expect_op(P, "=");
        x->a = parse_expr(P);
        expect_block_end(P);
        return x;
    }
    if (is_op(peek(P), "=")) {
        next(P);
        jnode *x = node(P, N_SET, line);
        x->name = name;
        x->a = parse_expr(P);
        expect_block_end(P);
        return x;
    }
    if (is_op(peek(P), ",")) jv_fail(P->E, VT_ERR_FORMAT, "chat template line %d: set with several targets is not supported", line);
    static const char *const ends[] = {"endset", NULL};
    jnode *x = node(P, N_SET_BLOCK, line);
    x->name = name;
    expect_block_end(P);
    x->a = parse_body(P, ends, "set");
    next(P);
    expect_block_end(P);
    return x;
}

static jnode *parse_macro(parser *P, int line)
{
    static const char *const ends[] = {"endmacro", NULL};
    jnode *x = node(P, N_MACRO, line);
    x->name = expect_name(P);
    expect_op(P, "(");
    const char *names[64];
    jnode *defaults[64];
    size_t n = 0;
    while (!is_op(peek(P), ")")) {
        if (n) expect_op(P, ",");
        if (n == 64) jv_fail(P->E, VT_ERR_FORMAT, "chat template line %d: more than 64 macro parameters", line);
        names[n] = expect_name(P);
        defaults[n] = NULL;
        if (is_op(peek(P), "=")) {
            next(P);
            defaults[n] = parse_expr(P);
        }
        n++;
    }
    expect_op(P, ")");
    expect_block_end(P);
    x->names = jv_alloc(P->E, (n ? n : 1) * sizeof *x->names);
    x->kids = jv_alloc(P->E, (n ? n : 1) * sizeof *x->kids);
    memcpy(x->names, names, n * sizeof *names);
    memcpy(x->kids, defaults, n * sizeof *defaults);
    x->n_names = x->n_kids = n;
    x->a = parse_body(P, ends, "macro");
    next(P);
    if (peek(P)->k == T_NAME) next(P); /* {% endmacro name %} */
    expect_block_end(P);
    return x;
}

static jnode *parse_body(parser *P, const char *const *ends, const char *what)
{
    nvec stmts = {0};
    int line = peek(P)->line;
    enter_parse(P, line);
    for (;;) {
        token *t = peek(P);
        if (t->k == T_END) {
            if (!ends) break;
            jv_fail(P->E, VT_ERR_FORMAT, "chat template line %d: the %s opened on line %d is not closed",
                    t->line, what, line);
        }
        if (t->k == T_TEXT) {
            next(P);
            jnode *x = node(P, N_TEXT, t->line);
            x->value = (jv){.k = JV_STR, .u.str = {t->s, t->n, NULL}};
            nvec_push(P, &stmts, x);
            continue;
        }
        if (t->k == T_VAR_BEGIN) {
            next(P);
            jnode *x = node(P, N_OUTPUT, t->line);
            x->a = parse_expr(P);
            token *e = next(P);
            if (e->k != T_VAR_END) unexpected(P, e, "'}}'");
            nvec_push(P, &stmts, x);
            continue;
        }
        if (t->k != T_BLOCK_BEGIN) unexpected(P, t, "text or a tag");
        token *kw = &P->t[P->pos + 1];
        if (kw->k != T_NAME) unexpected(P, kw, "a statement");
        if (ends)
            for (const char *const *e = ends; *e; e++)
                if (is_name(kw, *e)) {
                    next(P); /* the {%; the name is next */
                    goto done;
                }
        next(P);
        next(P);
        jnode *x = NULL;
        if (is_name(kw, "if")) x = parse_if(P, kw->line);
        else if (is_name(kw, "for")) x = parse_for(P, kw->line);
        else if (is_name(kw, "set")) x = parse_set(P, kw->line);
        else if (is_name(kw, "macro")) x = parse_macro(P, kw->line);
        else if (is_name(kw, "break") || is_name(kw, "continue")) {
            x = node(P, is_name(kw, "break") ? N_BREAK : N_CONTINUE, kw->line);
            expect_block_end(P);
        } else if (is_name(kw, "generation")) { /* transformers' assistant mask: its body as it is */
            static const char *const gen_end[] = {"endgeneration", NULL};
            expect_block_end(P);
            x = parse_body(P, gen_end, "generation");
            next(P);
            expect_block_end(P);
        } else {
            jv_fail(P->E, VT_ERR_FORMAT, "chat template line %d: unknown or misplaced statement '%.*s'",
                    kw->line, (int)kw->n, kw->s);
        }
        nvec_push(P, &stmts, x);
    }
done:;
    P->depth--;
    jnode *b = node(P, N_BODY, line);
    b->kids = stmts.v;
    b->n_kids = stmts.n;
    return b;
}

jnode *jinja_parse(jenv *E, const char *src, size_t len)
{
    /* jinja2's newline_sequence "\n": every "\r\n" and "\r" of the source is "\n" */
    if (memchr(src, '\r', len)) {
        char *c = jv_alloc(E, len + 1);
        size_t k = 0;
        for (size_t i = 0; i < len; i++) {
            if (src[i] == '\r') {
                c[k++] = '\n';
                if (i + 1 < len && src[i + 1] == '\n') i++;
            } else {
                c[k++] = src[i];
            }
        }
        c[k] = 0;
        src = c;
        len = k;
    }
    parser P = {.E = E, .src = src};
    /* keep_trailing_newline=False: one newline at the end goes */
    if (len && src[len - 1] == '\n') len--;
    scan(&P, src, len);
    jnode *body = parse_body(&P, NULL, "template");
    return body;
}
