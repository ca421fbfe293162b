/*
 * jinja_eval.c - the chat-template interpreter's evaluator
 * (jinja_internal.h, jinja.h): scopes, statements, expressions with
 * Python's semantics (the types and errors of Python's operators), macro
 * calls, loops, and vt_jinja_render itself.
 *
 * Scopes follow Jinja's: each iteration of a for runs in a scope of its
 * own (a set there is gone after it), if does not open one, a macro runs
 * in a scope under the template's (so it sees the template's variables
 * and the macros defined before it is called, not its caller's locals).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "jinja_internal.h"

struct jframe {
    jframe *parent;
    const char **names;
    jv *vals;
    size_t n, cap;
};

static jframe *frame_new(jenv *E, jframe *parent)
{
    jframe *f = jv_alloc(E, sizeof *f);
    memset(f, 0, sizeof *f);
    f->parent = parent;
    return f;
}

static void frame_set(jenv *E, jframe *f, const char *name, jv v)
{
    for (size_t i = 0; i < f->n; i++)
        if (!strcmp(f->names[i], name)) {
            f->vals[i] = v;
            return;
        }
    if (f->n == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 8;
        const char **nn = jv_alloc(E, cap * sizeof *nn);
        jv *nv = jv_alloc(E, cap * sizeof *nv);
        if (f->n) {
            memcpy(nn, f->names, f->n * sizeof *nn);
            memcpy(nv, f->vals, f->n * sizeof *nv);
        }
        f->names = nn;
        f->vals = nv;
        f->cap = cap;
    }
    f->names[f->n] = name;
    f->vals[f->n++] = v;
}

jv jinja_lookup(jenv *E, const char *name)
{
    for (jframe *f = E->frame; f; f = f->parent)
        for (size_t i = f->n; i-- > 0;)
            if (!strcmp(f->names[i], name)) return f->vals[i];
    return jinja_global(E, name);
}

void jinja_assign(jenv *E, const char *name, jv v) { frame_set(E, E->frame, name, v); }

static void step(jenv *E, int line)
{
    E->line = line;
    if (++E->steps > E->max_steps)
        jv_fail(E, VT_ERR_RANGE, "chat template line %d: the render passes its limit of %llu steps",
                line, (unsigned long long)E->max_steps);
}

static void enter(jenv *E, int line)
{
    if (++E->depth > E->max_depth)
        jv_fail(E, VT_ERR_RANGE, "chat template line %d: nesting deeper than its limit of %u", line,
                E->max_depth);
}

/* ---- operators ---- */

static int is_num(jv v) { return v.k == JV_INT || v.k == JV_FLOAT || v.k == JV_BOOL; }
static int is_intlike(jv v) { return v.k == JV_INT || v.k == JV_BOOL; }
static int64_t ival(jv v) { return v.k == JV_INT ? v.u.i : v.u.b; }
static double fval(jv v) { return v.k == JV_FLOAT ? v.u.f : (double)ival(v); }

static const char *op_name(int op)
{
    static const char *const names[] = {"?", "+", "-", "*", "/", "//", "%", "**", "~", "==", "!=",
                                        "<", "<=", ">", ">=", "in", "not in"};
    return op >= 0 && op <= OP_NOT_IN ? names[op] : "?";
}

static _Noreturn void type_error(jenv *E, int op, jv a, jv b)
{
    if (a.k == JV_UNDEF || b.k == JV_UNDEF)
        jv_fail(E, VT_ERR_FORMAT, "chat template line %d: an undefined value in '%s'", E->line,
                op_name(op));
    jv_fail(E, VT_ERR_FORMAT, "chat template line %d: unsupported operand types for '%s': '%s' and '%s'",
            E->line, op_name(op), jv_kind_name(a), jv_kind_name(b));
}

static jv concat_lists(jenv *E, jv a, jv b)
{
    jv r = jv_list(E, a.u.list->n + b.u.list->n + 1);
    for (size_t i = 0; i < a.u.list->n; i++) jv_list_push(E, &r, a.u.list->v[i]);
    for (size_t i = 0; i < b.u.list->n; i++) jv_list_push(E, &r, b.u.list->v[i]);
    r.u.list->tuple = a.u.list->tuple;
    return r;
}

static jv repeat(jenv *E, jv s, int64_t k)
{
    if (k <= 0) {
        if (s.k == JV_STR) return jv_cstr("");
        jv r = jv_list(E, 0);
        r.u.list->tuple = s.u.list->tuple;
        return r;
    }
    if (s.k == JV_STR) {
        if (s.u.str.n && (uint64_t)k > E->max_memory / s.u.str.n)
            jv_fail(E, VT_ERR_RANGE, "chat template line %d: a repeated string passes the memory limit", E->line);
        jbuf bb = {0};
        for (int64_t i = 0; i < k; i++) jbuf_put_str(E, &bb, s);
        return jv_from_buf(E, &bb);
    }
    if (s.u.list->n && (uint64_t)k > E->max_memory / (s.u.list->n * sizeof(jv)))
        jv_fail(E, VT_ERR_RANGE, "chat template line %d: a repeated list passes the memory limit", E->line);
    jv r = jv_list(E, s.u.list->n * (size_t)k + 1);
    for (int64_t i = 0; i < k; i++)
        for (size_t j = 0; j < s.u.list->n; j++) jv_list_push(E, &r, s.u.list->v[j]);
    r.u.list->tuple = s.u.list->tuple;
    return r;
}

static jv arith(jenv *E, int op, jv a, jv b)
{
    if (op == OP_CONCAT) {
        jv x = jv_to_str(E, a), y = jv_to_str(E, b);
        jbuf bb = {0};
        jbuf_put_str(E, &bb, x);
        jbuf_put_str(E, &bb, y);
        return jv_from_buf(E, &bb);
    }
    if (op == OP_ADD && a.k == JV_STR && b.k == JV_STR) return arith(E, OP_CONCAT, a, b);
    if (op == OP_ADD && a.k == JV_LIST && b.k == JV_LIST && a.u.list->tuple == b.u.list->tuple)
        return concat_lists(E, a, b);
    if (op == OP_MUL && (a.k == JV_STR || a.k == JV_LIST) && is_intlike(b)) return repeat(E, a, ival(b));
    if (op == OP_MUL && (b.k == JV_STR || b.k == JV_LIST) && is_intlike(a)) return repeat(E, b, ival(a));
    if (!is_num(a) || !is_num(b)) type_error(E, op, a, b);
    if (is_intlike(a) && is_intlike(b) && op != OP_DIV) {
        int64_t x = ival(a), y = ival(b), r;
        switch (op) {
        case OP_ADD: if (__builtin_add_overflow(x, y, &r)) goto overflow; return jv_int(r);
        case OP_SUB: if (__builtin_sub_overflow(x, y, &r)) goto overflow; return jv_int(r);
        case OP_MUL: if (__builtin_mul_overflow(x, y, &r)) goto overflow; return jv_int(r);
        case OP_FLOORDIV:
        case OP_MOD: {
            if (!y) jv_fail(E, VT_ERR_FORMAT, "chat template line %d: integer division or modulo by zero", E->line);
            if (x == INT64_MIN && y == -1) goto overflow;
            int64_t q = x / y, m = x % y;
            if (m && ((m < 0) != (y < 0))) { /* Python rounds toward negative infinity */
                q--;
                m += y;
            }
            return jv_int(op == OP_MOD ? m : q);
        }
        case OP_POW:
            if (y >= 0) { /* by squaring: log2(y) steps */
                int64_t base = x;
                r = 1;
                for (int64_t e = y; e; e >>= 1) {
                    if ((e & 1) && __builtin_mul_overflow(r, base, &r)) goto overflow;
                    if (e > 1 && __builtin_mul_overflow(base, base, &base)) {
                        if (x == 0 || x == 1) break; /* cannot overflow: r is final */
                        if (x == -1) { r = (y & 1) ? -1 : 1; break; }
                        goto overflow;
                    }
                }
                return jv_int(r);
            }
            if (x == 0) jv_fail(E, VT_ERR_FORMAT, "chat template line %d: 0 cannot be raised to a negative power", E->line);
            return jv_float(pow((double)x, (double)y));
        }
    }
    double x = fval(a), y = fval(b);
    switch (op) {
    case OP_ADD: return jv_float(x + y);
    case OP_SUB: return jv_float(x - y);
    case OP_MUL: return jv_float(x * y);
    case OP_DIV:
        if (y == 0) jv_fail(E, VT_ERR_FORMAT, "chat template line %d: division by zero", E->line);
        return jv_float(x / y);
    case OP_FLOORDIV:
        if (y == 0) jv_fail(E, VT_ERR_FORMAT, "chat template line %d: float floor division by zero", E->line);
        return jv_float(floor(x / y));
    case OP_MOD: {
        if (y == 0) jv_fail(E, VT_ERR_FORMAT, "chat template line %d: float modulo by zero", E->line);
        double m = fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return jv_float(m);
    }
    case OP_POW: return jv_float(pow(x, y));
    }
overflow:
    jv_fail(E, VT_ERR_FORMAT, "chat template line %d: integer overflow in '%s'", E->line, op_name(op));
}

/* Python's ordering: numbers, strings (code point order: UTF-8 bytes), lists */
static int order(jenv *E, int op, jv a, jv b)
{
    if (is_num(a) && is_num(b)) {
        if (is_intlike(a) && is_intlike(b)) return ival(a) < ival(b) ? -1 : ival(a) > ival(b);
        double x = fval(a), y = fval(b);
        return x < y ? -1 : x > y;
    }
    if (a.k == JV_STR && b.k == JV_STR) {
        size_t n = a.u.str.n < b.u.str.n ? a.u.str.n : b.u.str.n;
        int c = memcmp(a.u.str.s, b.u.str.s, n);
        if (c) return c < 0 ? -1 : 1;
        return a.u.str.n < b.u.str.n ? -1 : a.u.str.n > b.u.str.n;
    }
    if (a.k == JV_LIST && b.k == JV_LIST) {
        size_t n = a.u.list->n < b.u.list->n ? a.u.list->n : b.u.list->n;
        for (size_t i = 0; i < n; i++)
            if (!jv_equal(a.u.list->v[i], b.u.list->v[i])) return order(E, op, a.u.list->v[i], b.u.list->v[i]);
        return a.u.list->n < b.u.list->n ? -1 : a.u.list->n > b.u.list->n;
    }
    type_error(E, op, a, b);
}

static int contains(jenv *E, jv item, jv in)
{
    switch (in.k) {
    case JV_UNDEF: return 0;
    case JV_STR:
        if (item.k != JV_STR) type_error(E, OP_IN, item, in);
        if (!item.u.str.n) return 1;
        if (item.u.str.n > in.u.str.n) return 0;
        for (size_t i = 0; i + item.u.str.n <= in.u.str.n; i++)
            if (!memcmp(in.u.str.s + i, item.u.str.s, item.u.str.n)) return 1;
        return 0;
    case JV_LIST:
        for (size_t i = 0; i < in.u.list->n; i++)
            if (jv_equal(item, in.u.list->v[i])) return 1;
        return 0;
    case JV_DICT:
    case JV_NS: return jv_dict_get(in, item).k != JV_UNDEF;
    default: type_error(E, OP_IN, item, in);
    }
}

static int compare(jenv *E, int op, jv a, jv b)
{
    switch (op) {
    case OP_EQ: return jv_equal(a, b);
    case OP_NE: return !jv_equal(a, b);
    case OP_LT: return order(E, op, a, b) < 0;
    case OP_LE: return order(E, op, a, b) <= 0;
    case OP_GT: return order(E, op, a, b) > 0;
    case OP_GE: return order(E, op, a, b) >= 0;
    case OP_IN: return contains(E, a, b);
    default: return !contains(E, a, b);
    }
}

/* ---- strings by code point (Python's str) ---- */

static size_t cp_len(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

/* the byte offset of code point index k (k <= its length) */
static size_t cp_off(const char *s, size_t n, size_t k)
{
    size_t i = 0;
    while (i < n && k) {
        i++;
        while (i < n && ((unsigned char)s[i] & 0xC0) == 0x80) i++;
        k--;
    }
    return i;
}

static jv item(jenv *E, jv obj, jv key)
{
    switch (obj.k) {
    case JV_DICT:
    case JV_NS: {
        jv v = jv_dict_get(obj, key);
        if (v.k != JV_UNDEF || key.k != JV_STR) return v;
        return jinja_attr(E, obj, key.u.str.s); /* obj['items'] is obj.items where no such key */
    }
    case JV_LIST:
    case JV_STR: {
        if (key.k == JV_STR) return jinja_attr(E, obj, key.u.str.s);
        if (!is_intlike(key)) return jv_undef();
        int64_t n = obj.k == JV_LIST ? (int64_t)obj.u.list->n : (int64_t)cp_len(obj.u.str.s, obj.u.str.n);
        int64_t i = ival(key);
        if (i < 0) i += n;
        if (i < 0 || i >= n) return jv_undef();
        if (obj.k == JV_LIST) return obj.u.list->v[i];
        size_t a = cp_off(obj.u.str.s, obj.u.str.n, (size_t)i);
        size_t b = cp_off(obj.u.str.s, obj.u.str.n, (size_t)i + 1);
        return jv_sub(E, obj, a, b - a);
    }
    case JV_LOOP:
        if (key.k == JV_STR) return jinja_attr(E, obj, key.u.str.s);
        return jv_undef();
    case JV_UNDEF:
        jv_fail(E, VT_ERR_FORMAT, "chat template line %d: a subscript of an undefined value", E->line);
    default:
        return jv_undef();
    }
}

/* Python's slice indices for a length n */
static void slice_bounds(jenv *E, jv a, jv b, jv c, int64_t n, int64_t *start, int64_t *stop,
                         int64_t *stepv)
{
    int64_t st = c.k == JV_UNDEF || c.k == JV_NONE ? 1 : ival(c);
    if ((c.k != JV_UNDEF && c.k != JV_NONE && !is_intlike(c)) ||
        (a.k != JV_UNDEF && a.k != JV_NONE && !is_intlike(a)) ||
        (b.k != JV_UNDEF && b.k != JV_NONE && !is_intlike(b)))
        jv_fail(E, VT_ERR_FORMAT, "chat template line %d: slice indices must be integers", E->line);
    if (!st) jv_fail(E, VT_ERR_FORMAT, "chat template line %d: slice step cannot be zero", E->line);
    int64_t lo = st > 0 ? 0 : -1, hi = st > 0 ? n : n - 1;
    int64_t s0 = st > 0 ? lo : hi, s1 = st > 0 ? hi : lo;
    if (a.k != JV_UNDEF && a.k != JV_NONE) {
        s0 = ival(a);
        if (s0 < 0) s0 += n;
        if (s0 < lo) s0 = lo;
        if (s0 > hi) s0 = hi;
    }
    if (b.k != JV_UNDEF && b.k != JV_NONE) {
        s1 = ival(b);
        if (s1 < 0) s1 += n;
        if (s1 < lo) s1 = lo;
        if (s1 > hi) s1 = hi;
    }
    *start = s0;
    *stop = s1;
    *stepv = st;
}

static jv slice(jenv *E, jv obj, jv a, jv b, jv c)
{
    if (obj.k != JV_LIST && obj.k != JV_STR) return jv_undef(); /* jinja2: undefined */
    int64_t n = obj.k == JV_LIST ? (int64_t)obj.u.list->n : (int64_t)cp_len(obj.u.str.s, obj.u.str.n);
    int64_t s0, s1, st;
    slice_bounds(E, a, b, c, n, &s0, &s1, &st);
    if (obj.k == JV_LIST) {
        jv r = jv_list(E, 0);
        r.u.list->tuple = obj.u.list->tuple;
        for (int64_t i = s0; st > 0 ? i < s1 : i > s1;) {
            jv_list_push(E, &r, obj.u.list->v[i]);
            if (__builtin_add_overflow(i, st, &i)) break;
        }
        return r;
    }
    /* a string: its code points' byte offsets, in one pass */
    size_t *off = jv_alloc(E, ((size_t)n + 1) * sizeof *off);
    for (size_t i = 0, k = 0; k <= (size_t)n; k++) {
        off[k] = i;
        if (i < obj.u.str.n) i++;
        while (i < obj.u.str.n && ((unsigned char)obj.u.str.s[i] & 0xC0) == 0x80) i++;
    }
    jbuf bb = {0};
    for (int64_t i = s0; st > 0 ? i < s1 : i > s1;) {
        jbuf_put_t(E, &bb, obj.u.str.s + off[i], off[i + 1] - off[i],
                   obj.u.str.t ? obj.u.str.t + off[i] : NULL);
        if (__builtin_add_overflow(i, st, &i)) break;
    }
    return jv_from_buf(E, &bb);
}

/* ---- calls ---- */

static void eval_args(jenv *E, const jnode *x, jv **args, jv **kw_names, jv **kw_vals)
{
    *args = jv_alloc(E, (x->n_kids + 1) * sizeof(jv));
    for (size_t i = 0; i < x->n_kids; i++) (*args)[i] = jinja_eval(E, x->kids[i]);
    *kw_names = jv_alloc(E, (x->n_names + 1) * sizeof(jv));
    *kw_vals = jv_alloc(E, (x->n_names + 1) * sizeof(jv));
    for (size_t i = 0; i < x->n_names; i++) {
        (*kw_names)[i] = jv_cstr(x->names[i]);
        (*kw_vals)[i] = jinja_eval(E, x->kw[i]);
    }
}

static jv call_macro(jenv *E, const jmacro *mac, const jv *args, size_t n, const jv *kw_names,
                     const jv *kw_vals, size_t n_kw)
{
    const jnode *m = mac->node;
    if (n > m->n_names)
        jv_fail(E, VT_ERR_FORMAT, "chat template line %d: macro '%s' takes %zu arguments, %zu given",
                E->line, m->name, m->n_names, n);
    jframe *saved = E->frame;
    jbuf *saved_out = E->out;
    int saved_line = E->line;
    jframe *f = frame_new(E, mac->closure);
    int saved_in_loop = E->in_loop;
    E->in_loop = 0; /* a break in the macro is not its caller's */
    unsigned char *given = jv_alloc(E, m->n_names + 1);
    memset(given, 0, m->n_names + 1);
    for (size_t i = 0; i < n; i++) {
        frame_set(E, f, m->names[i], args[i]);
        given[i] = 1;
    }
    for (size_t k = 0; k < n_kw; k++) {
        size_t i = 0;
        while (i < m->n_names && strcmp(m->names[i], kw_names[k].u.str.s)) i++;
        if (i == m->n_names)
            jv_fail(E, VT_ERR_FORMAT, "chat template line %d: macro '%s' has no parameter '%s'",
                    E->line, m->name, kw_names[k].u.str.s);
        if (given[i])
            jv_fail(E, VT_ERR_FORMAT, "chat template line %d: macro '%s' got parameter '%s' twice",
                    E->line, m->name, m->names[i]);
        frame_set(E, f, m->names[i], kw_vals[k]);
        given[i] = 1;
    }
    E->frame = f;
    for (size_t i = 0; i < m->n_names; i++)
        if (!given[i]) frame_set(E, f, m->names[i], m->kids[i] ? jinja_eval(E, m->kids[i]) : jv_undef());
    jbuf capture = {.limited = 1};
    E->out = &capture;
    jinja_run(E, m->a);
    E->out = saved_out;
    E->frame = saved;
    E->line = saved_line;
    E->loop_ctl = 0;
    E->in_loop = saved_in_loop;
    return jv_from_buf(E, &capture);
}

jv jinja_call(jenv *E, jv fn, const jv *args, size_t n, const jv *kw_names, const jv *kw_vals,
              size_t n_kw)
{
    if (fn.k == JV_MACRO) {
        enter(E, E->line);
        jv r = call_macro(E, fn.u.macro, args, n, kw_names, kw_vals, n_kw);
        E->depth--;
        return r;
    }
    if (fn.k == JV_FUNC) return fn.u.fn->fn(E, fn.u.fn, args, n, kw_names, kw_vals, n_kw);
    if (fn.k == JV_UNDEF)
        jv_fail(E, VT_ERR_FORMAT, "chat template line %d: a call of an undefined name", E->line);
    jv_fail(E, VT_ERR_FORMAT, "chat template line %d: a %s is not callable", E->line, jv_kind_name(fn));
}

/* ---- expressions ---- */

jv jinja_eval(jenv *E, const jnode *x)
{
    enter(E, x->line);
    E->line = x->line;
    jv r;
    switch (x->k) {
    case X_LITERAL: r = x->value; break;
    case X_NAME: r = jinja_lookup(E, x->name); break;
    case X_LIST:
    case X_TUPLE:
        r = jv_list(E, x->n_kids);
        for (size_t i = 0; i < x->n_kids; i++) jv_list_push(E, &r, jinja_eval(E, x->kids[i]));
        r.u.list->tuple = x->k == X_TUPLE;
        break;
    case X_DICT:
        r = jv_dict(E, x->n_kids / 2);
        for (size_t i = 0; i + 1 < x->n_kids; i += 2) {
            jv k = jinja_eval(E, x->kids[i]);
            jv_dict_set(E, &r, k, jinja_eval(E, x->kids[i + 1]));
        }
        break;
    case X_ATTR: {
        jv obj = jinja_eval(E, x->a);
        if (obj.k == JV_UNDEF)
            jv_fail(E, VT_ERR_FORMAT, "chat template line %d: attribute '%s' of an undefined value",
                    x->line, x->name);
        r = jinja_attr(E, obj, x->name);
        break;
    }
    case X_ITEM: {
        jv obj = jinja_eval(E, x->a);
        r = item(E, obj, jinja_eval(E, x->b));
        break;
    }
    case X_SLICE: {
        jv obj = jinja_eval(E, x->a);
        jv a = x->b ? jinja_eval(E, x->b) : jv_none(), b = x->c ? jinja_eval(E, x->c) : jv_none(),
           c = x->d ? jinja_eval(E, x->d) : jv_none();
        r = slice(E, obj, a, b, c);
        break;
    }
    case X_CALL: {
        jv fn = jinja_eval(E, x->a), *args, *kn, *kv;
        eval_args(E, x, &args, &kn, &kv);
        E->line = x->line;
        r = jinja_call(E, fn, args, x->n_kids, kn, kv, x->n_names);
        break;
    }
    case X_FILTER: {
        jv v = jinja_eval(E, x->a), *args, *kn, *kv;
        eval_args(E, x, &args, &kn, &kv);
        E->line = x->line;
        r = jinja_filter(E, x->name, v, args, x->n_kids, kn, kv, x->n_names);
        break;
    }
    case X_TEST: {
        jv v = jinja_eval(E, x->a), *args, *kn, *kv;
        eval_args(E, x, &args, &kn, &kv);
        E->line = x->line;
        int t = jinja_test(E, x->name, v, args, x->n_kids);
        r = jv_bool(x->op ? !t : t);
        break;
    }
    case X_NEG:
    case X_POS: {
        jv v = jinja_eval(E, x->a);
        if (!is_num(v))
            jv_fail(E, VT_ERR_FORMAT, "chat template line %d: bad operand type for unary %c: '%s'",
                    x->line, x->k == X_NEG ? '-' : '+', jv_kind_name(v));
        if (x->k == X_POS) r = v.k == JV_BOOL ? jv_int(v.u.b) : v;
        else if (v.k == JV_FLOAT) r = jv_float(-v.u.f);
        else if (ival(v) == INT64_MIN) jv_fail(E, VT_ERR_FORMAT, "chat template line %d: integer overflow", x->line);
        else r = jv_int(-ival(v));
        break;
    }
    case X_NOT: r = jv_bool(!jv_truthy(jinja_eval(E, x->a))); break;
    case X_AND: {
        jv a = jinja_eval(E, x->a);
        r = jv_truthy(a) ? jinja_eval(E, x->b) : a;
        break;
    }
    case X_OR: {
        jv a = jinja_eval(E, x->a);
        r = jv_truthy(a) ? a : jinja_eval(E, x->b);
        break;
    }
    case X_BINOP: {
        jv a = jinja_eval(E, x->a), b = jinja_eval(E, x->b);
        E->line = x->line;
        r = arith(E, x->op, a, b);
        break;
    }
    case X_COMPARE: {
        jv a = jinja_eval(E, x->kids[0]);
        r = jv_bool(1);
        for (size_t i = 1; i < x->n_kids; i++) {
            jv b = jinja_eval(E, x->kids[i]);
            E->line = x->line;
            if (!compare(E, x->ops[i - 1], a, b)) {
                r = jv_bool(0);
                break;
            }
            a = b;
        }
        break;
    }
    case X_COND:
        if (jv_truthy(jinja_eval(E, x->a))) r = jinja_eval(E, x->b);
        else r = x->c ? jinja_eval(E, x->c) : jv_undef();
        break;
    default:
        jv_fail(E, VT_ERR_INTERNAL, "chat template line %d: node %d is not an expression", x->line, x->k);
    }
    E->depth--;
    return r;
}

/* ---- statements ---- */

/* the items a for runs over: a list's, a dict's keys, a string's code points */
static jv iterable(jenv *E, jv v, int line)
{
    switch (v.k) {
    case JV_UNDEF: return jv_list(E, 0);
    case JV_LIST: return v;
    case JV_DICT: {
        jv r = jv_list(E, v.u.dict->n + 1);
        for (size_t i = 0; i < v.u.dict->n; i++) jv_list_push(E, &r, v.u.dict->key[i]);
        return r;
    }
    case JV_STR: {
        jv r = jv_list(E, cp_len(v.u.str.s, v.u.str.n) + 1);
        for (size_t i = 0; i < v.u.str.n;) {
            size_t k = 1;
            while (i + k < v.u.str.n && ((unsigned char)v.u.str.s[i + k] & 0xC0) == 0x80) k++;
            jv_list_push(E, &r, jv_sub(E, v, i, k));
            i += k;
        }
        return r;
    }
    default:
        jv_fail(E, VT_ERR_FORMAT, "chat template line %d: a %s is not iterable", line, jv_kind_name(v));
    }
}

static void bind_targets(jenv *E, const jnode *x, jv v)
{
    if (x->n_names == 1) {
        jinja_assign(E, x->names[0], v);
        return;
    }
    if (v.k != JV_LIST || v.u.list->n != x->n_names)
        jv_fail(E, VT_ERR_FORMAT, "chat template line %d: cannot unpack a %s into %zu loop targets",
                x->line, jv_kind_name(v), x->n_names);
    for (size_t i = 0; i < x->n_names; i++) jinja_assign(E, x->names[i], v.u.list->v[i]);
}

static void run_for(jenv *E, const jnode *x)
{
    jv all = iterable(E, jinja_eval(E, x->a), x->line);
    jframe *outer = E->frame;
    jv items = all;
    if (x->d) { /* the if filter comes before the loop's counting */
        items = jv_list(E, all.u.list->n + 1);
        for (size_t i = 0; i < all.u.list->n; i++) {
            E->frame = frame_new(E, outer);
            bind_targets(E, x, all.u.list->v[i]);
            if (jv_truthy(jinja_eval(E, x->d))) jv_list_push(E, &items, all.u.list->v[i]);
            E->frame = outer;
        }
    }
    jloop *lp = jv_alloc(E, sizeof *lp);
    lp->items = items.u.list;
    int completed = 0; /* jinja2's else: no iteration ran to its end (break, continue) */
    E->in_loop++;
    for (size_t i = 0; i < items.u.list->n; i++) {
        step(E, x->line);
        lp->index0 = i;
        E->frame = frame_new(E, outer);
        bind_targets(E, x, items.u.list->v[i]);
        jinja_assign(E, "loop", (jv){.k = JV_LOOP, .u.loop = lp});
        jinja_run(E, x->b);
        E->frame = outer;
        int ctl = E->loop_ctl;
        E->loop_ctl = 0;
        if (!ctl) completed = 1;
        if (ctl == 1) break;
    }
    E->in_loop--;
    if (!completed && x->c) jinja_run(E, x->c);
}

static void run_stmt(jenv *E, const jnode *s)
{
    step(E, s->line);
    switch (s->k) {
    case N_BODY: jinja_run(E, s); break;
    case N_TEXT: jbuf_put(E, E->out, s->value.u.str.s, s->value.u.str.n); break; /* the template's */
    case N_OUTPUT: jv_print(E, E->out, jinja_eval(E, s->a)); break;
    case N_IF:
        if (jv_truthy(jinja_eval(E, s->a))) jinja_run(E, s->b);
        else if (s->c && s->c->k == N_IF) run_stmt(E, s->c); /* elif */
        else if (s->c) jinja_run(E, s->c);
        break;
    case N_FOR: run_for(E, s); break;
    case N_SET: jinja_assign(E, s->name, jinja_eval(E, s->a)); break;
    case N_SET_ATTR: {
        jv ns = jinja_lookup(E, s->name);
        if (ns.k != JV_NS)
            jv_fail(E, VT_ERR_FORMAT, "chat template line %d: cannot set attribute '%s' of a %s "
                    "(only a namespace's)", s->line, s->attr, jv_kind_name(ns));
        jv v = jinja_eval(E, s->a);
        jv_dict_set(E, &ns, jv_cstr(s->attr), v);
        break;
    }
    case N_SET_BLOCK: {
        jbuf capture = {.limited = 1}, *keep = E->out;
        E->out = &capture;
        jinja_run(E, s->a);
        E->out = keep;
        jinja_assign(E, s->name, jv_from_buf(E, &capture));
        break;
    }
    case N_MACRO: { /* it sees the scope it is defined in (a loop's, another macro's) */
        jmacro *m = jv_alloc(E, sizeof *m);
        m->node = s;
        m->closure = E->frame;
        jinja_assign(E, s->name, (jv){.k = JV_MACRO, .u.macro = m});
        break;
    }
    case N_BREAK:
    case N_CONTINUE:
        if (!E->in_loop)
            jv_fail(E, VT_ERR_FORMAT, "chat template line %d: '%s' outside a loop", s->line,
                    s->k == N_BREAK ? "break" : "continue");
        E->loop_ctl = s->k == N_BREAK ? 1 : 2;
        break;
    default:
        jv_fail(E, VT_ERR_INTERNAL, "chat template line %d: node %d is not a statement", s->line, s->k);
    }
}

void jinja_run(jenv *E, const jnode *body)
{
    for (size_t i = 0; i < body->n_kids && !E->loop_ctl; i++) run_stmt(E, body->kids[i]);
}

/* ---- the render ---- */

/* the arena's blocks, then the environment */
static void env_free(jenv *E)
{
    while (E->chunks) {
        void *next = *(void **)E->chunks;
        free(E->chunks);
        E->chunks = next;
    }
    free(E);
}

vt_status vt_jinja_check(const char *tmpl, size_t len)
{
    if (!tmpl) {
        vt_set_error("chat template: the template is required");
        return VT_ERR_INVALID_ARG;
    }
    jenv *E = calloc(1, sizeof *E);
    if (!E) {
        vt_set_error_oom(sizeof *E, "chat template parser");
        return VT_ERR_OUT_OF_MEMORY;
    }
    E->max_memory = (size_t)256 << 20;
    vt_status st = VT_OK;
    if (setjmp(E->fail)) {
        st = E->st;
        vt_set_error("%s", E->msg);
    } else {
        jinja_parse(E, tmpl, len);
    }
    env_free(E);
    return st;
}

vt_status vt_jinja_render(const char *tmpl, size_t len, const char *context_json, size_t json_len,
                          const vt_jinja_limits *lim, char **out, size_t *out_len)
{
    return vt_jinja_render_spans(tmpl, len, context_json, json_len, NULL, lim, out, out_len, NULL,
                                 NULL);
}

/* the runs of taint in b's mask, into spans (malloc-ed) */
static vt_status taint_spans(const jbuf *b, vt_jinja_span **spans, size_t *n_spans)
{
    size_t n = 0, cap = 0;
    vt_jinja_span *v = NULL;
    for (size_t i = 0; b->m && i < b->n;) {
        if (!b->m[i]) {
            i++;
            continue;
        }
        size_t j = i;
        while (j < b->n && b->m[j]) j++;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            vt_jinja_span *nv = realloc(v, cap * sizeof *v);
            if (!nv) {
                free(v);
                vt_set_error_oom(cap * sizeof *v, "chat template: the spans of the variables' text");
                return VT_ERR_OUT_OF_MEMORY;
            }
            v = nv;
        }
        v[n++] = (vt_jinja_span){i, j - i};
        i = j;
    }
    *spans = v;
    *n_spans = n;
    return VT_OK;
}

vt_status vt_jinja_render_spans(const char *tmpl, size_t len, const char *context_json,
                                size_t json_len, const char *const *keep,
                                const vt_jinja_limits *lim, char **out, size_t *out_len,
                                vt_jinja_span **spans, size_t *n_spans)
{
    if (spans) *spans = NULL;
    if (n_spans) *n_spans = 0;
    if (out) *out = NULL;
    if (out_len) *out_len = 0;
    if (!tmpl || !context_json || !out) {
        vt_set_error("chat template: template, variables and out are required");
        return VT_ERR_INVALID_ARG;
    }
    jenv *E = calloc(1, sizeof *E);
    if (!E) {
        vt_set_error_oom(sizeof *E, "chat template renderer");
        return VT_ERR_OUT_OF_MEMORY;
    }
    E->max_output = lim && lim->max_output ? lim->max_output : (size_t)16 << 20;
    E->max_memory = lim && lim->max_memory ? lim->max_memory : (size_t)256 << 20;
    E->max_depth = lim && lim->max_depth ? lim->max_depth : 200;
    E->max_steps = lim && lim->max_steps ? lim->max_steps : 10000000;
    jbuf result = {.limited = 1};
    vt_status st = VT_OK;
    if (setjmp(E->fail)) {
        st = E->st;
        vt_set_error("%s", E->msg);
        goto done;
    }
    jv vars;
    if (jv_parse_json(E, context_json, json_len, &vars) != VT_OK || vars.k != JV_DICT) {
        vt_set_error("chat template: the variables are not a JSON object");
        st = VT_ERR_INVALID_ARG;
        goto done;
    }
    jnode *body = jinja_parse(E, tmpl, len);
    E->root = E->frame = frame_new(E, NULL);
    for (size_t i = 0; i < vars.u.dict->n; i++) {
        if (vars.u.dict->key[i].k != JV_STR) continue;
        const char *name = vars.u.dict->key[i].u.str.s;
        int kept = !spans;
        for (const char *const *k = keep; !kept && k && *k; k++) kept = !strcmp(*k, name);
        if (!kept) jv_taint_all(E, &vars.u.dict->val[i]);
        frame_set(E, E->root, name, vars.u.dict->val[i]);
    }
    E->out = &result;
    jinja_run(E, body);
    E->loop_ctl = 0;
    char *copy = malloc(result.n + 1); /* out of the arena, for the caller */
    if (!copy) {
        vt_set_error_oom(result.n + 1, "chat template output");
        st = VT_ERR_OUT_OF_MEMORY;
        goto done;
    }
    if (result.n) memcpy(copy, result.p, result.n);
    copy[result.n] = 0;
    if (spans && (st = taint_spans(&result, spans, n_spans)) != VT_OK) {
        free(copy);
        goto done;
    }
    *out = copy;
    if (out_len) *out_len = result.n;
done:
    env_free(E);
    return st;
}
