/*
 * jinja_parse.c - the chat-template interpreter's parser (jinja_internal.h):
 * the scanner's tokens (jinja_scan.c) into statements and expressions by
 * recursive descent, with Jinja's operator precedence (jinja2/parser.py's
 * order: conditional expression, or, and, not, comparisons, + -, ~,
 * * / // %, **, unary - +, then subscripts, attributes, calls, filters and
 * tests), nesting bounded (PARSE_DEPTH_MAX).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_parse.h"

#define PARSE_DEPTH_MAX 256 /* deeper nesting is refused: the parser recurses */

static void enter_parse(parser *P, int line)
{
    if (++P->depth > PARSE_DEPTH_MAX)
        jv_fail(P->E, VT_ERR_FORMAT, "chat template line %d: nesting deeper than %d", line,
                PARSE_DEPTH_MAX);
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
        jbuf_put(P->E, &b, t->s, t->n);
        while (peek(P)->k == T_STRING) {
            token *u = next(P);
            jbuf_put(P->E, &b, u->s, u->n);
        }
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
    parser P = {.E = E};
    jinja_scan(&P, src, len);
    return parse_body(&P, NULL, "template");
}
