/*
 * jinja_scan.c - the chat-template interpreter's scanner (jinja_parse.h):
 * the template's text and tags into tokens, with Jinja's whitespace control
 * (- and + inside a tag's delimiters, and the environment's trim_blocks and
 * lstrip_blocks as transformers sets them), jinja2's newline handling (every
 * "\r\n" and "\r" is "\n", one trailing newline dropped), raw blocks,
 * and Python's string and number literals.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_parse.h"

void jinja_push(parser *P, token t)
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
    if (e > s) jinja_push(P, (token){.k = T_TEXT, .line = line_of(src, s), .s = s, .n = (size_t)(e - s)});
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
            jinja_push(P, (token){.k = T_NAME, .line = line, .s = s, .n = (size_t)(p - s)});
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
            jinja_push(P, t);
        } else if (*p == '\'' || *p == '"') {
            char q = *p++;
            jbuf b = {0};
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
            if (p >= end) jv_fail(E, VT_ERR_FORMAT, "chat template line %d: a string is not closed", line);
            p++;
            jv s = jv_str(E, b.p ? b.p : "", b.n);
            jinja_push(P, (token){.k = T_STRING, .line = line, .s = s.u.str.s, .n = s.u.str.n});
        } else {
            int k = 0;
            for (; OPS[k]; k++) {
                size_t n = strlen(OPS[k]);
                if ((size_t)(end - p) >= n && !memcmp(p, OPS[k], n)) break;
            }
            if (!OPS[k])
                jv_fail(E, VT_ERR_FORMAT, "chat template line %d: unexpected character '%c'", line,
                        *p);
            jinja_push(P, (token){.k = T_OP, .line = line, .s = OPS[k], .n = strlen(OPS[k])});
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
            jinja_push(P, (token){.k = kind == '{' ? T_VAR_BEGIN : T_BLOCK_BEGIN, .line = line});
            size_t first = P->n;
            const char *close = kind == '{' ? "}}" : "%}";
            const char *c = scan_tag(P, src, q, end, close, &ctl);
            jinja_push(P, (token){.k = kind == '{' ? T_VAR_END : T_BLOCK_END, .line = line_of(src, c)});
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
    jinja_push(P, (token){.k = T_END, .line = line_of(src, end)});
}

void jinja_scan(parser *P, const char *src, size_t len)
{
    jenv *E = P->E;
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
    P->src = src;
    /* keep_trailing_newline=False: one newline at the end goes */
    if (len && src[len - 1] == '\n') len--;
    scan(P, src, len);
}
