/*
 * jinja_filters.c - the chat-template interpreter's filters and tests
 * (jinja_internal.h; the lists are in jinja_builtins.c's header comment),
 * with jinja2's semantics: default leaves a defined value (with boolean,
 * any true one), dictsort and sort compare strings without case unless
 * case_sensitive, tojson is transformers' json.dumps (non-ASCII kept, no
 * key sorting), a test of a sequence is true for strings and dicts too (as
 * jinja2's test_sequence: anything with a length and items).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_internal.h"

#define FAIL(...) jv_fail(E, VT_ERR_FORMAT, __VA_ARGS__)

static int intlike(jv v) { return v.k == JV_INT || v.k == JV_BOOL; }
static int64_t ival(jv v) { return v.k == JV_INT ? v.u.i : v.u.b; }
static int is_num(jv v) { return v.k == JV_INT || v.k == JV_FLOAT || v.k == JV_BOOL; }

static size_t cp_count(jv s)
{
    size_t k = 0;
    for (size_t i = 0; i < s.u.str.n; i++) k += ((unsigned char)s.u.str.s[i] & 0xC0) != 0x80;
    return k;
}

/* ---- sorting: stable, as Python's sorted ---- */

typedef struct sort_ctx {
    jenv *E;
    int case_sensitive, by_value;
    jv attribute;
} sort_ctx;

static jv sort_key(const sort_ctx *c, jv v)
{
    if (c->by_value >= 0 && v.k == JV_LIST && v.u.list->n == 2) v = v.u.list->v[c->by_value];
    if (c->attribute.k != JV_UNDEF) v = jb_attr_path(c->E, v, c->attribute);
    if (!c->case_sensitive && v.k == JV_STR) return jb_casemap(c->E, v, 0);
    return v;
}

static int cmp_values(jenv *E, jv a, jv b)
{
    if (is_num(a) && is_num(b)) {
        double x = a.k == JV_FLOAT ? a.u.f : (double)ival(a), y = b.k == JV_FLOAT ? b.u.f : (double)ival(b);
        return x < y ? -1 : x > y;
    }
    if (a.k == JV_STR && b.k == JV_STR) {
        size_t n = a.u.str.n < b.u.str.n ? a.u.str.n : b.u.str.n;
        int c = memcmp(a.u.str.s, b.u.str.s, n);
        return c ? (c < 0 ? -1 : 1) : (a.u.str.n < b.u.str.n ? -1 : a.u.str.n > b.u.str.n);
    }
    if (a.k == JV_LIST && b.k == JV_LIST) {
        size_t n = a.u.list->n < b.u.list->n ? a.u.list->n : b.u.list->n;
        for (size_t i = 0; i < n; i++) {
            int c = cmp_values(E, a.u.list->v[i], b.u.list->v[i]);
            if (c) return c;
        }
        return a.u.list->n < b.u.list->n ? -1 : a.u.list->n > b.u.list->n;
    }
    FAIL("chat template line %d: cannot order a %s and a %s", E->line, jv_kind_name(a), jv_kind_name(b));
}

static void merge_sort(const sort_ctx *c, jv *v, jv *keys, jv *tmp_v, jv *tmp_k, size_t n, int reverse)
{
    if (n < 2) return;
    size_t h = n / 2;
    merge_sort(c, v, keys, tmp_v, tmp_k, h, reverse);
    merge_sort(c, v + h, keys + h, tmp_v, tmp_k, n - h, reverse);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int r = cmp_values(c->E, keys[j], keys[i]);
        if (reverse) r = -r;
        if (r < 0) { /* strictly before: the right item moves first */
            tmp_v[k] = v[j];
            tmp_k[k++] = keys[j++];
        } else {
            tmp_v[k] = v[i];
            tmp_k[k++] = keys[i++];
        }
    }
    while (i < h) { tmp_v[k] = v[i]; tmp_k[k++] = keys[i++]; }
    while (j < n) { tmp_v[k] = v[j]; tmp_k[k++] = keys[j++]; }
    memcpy(v, tmp_v, n * sizeof *v);
    memcpy(keys, tmp_k, n * sizeof *keys);
}

static jv sorted(jenv *E, jv list, const sort_ctx *c, int reverse)
{
    size_t n = list.u.list->n;
    jv r = jv_list(E, n + 1);
    jv *keys = jv_alloc(E, (n + 1) * sizeof(jv)), *tv = jv_alloc(E, (n + 1) * sizeof(jv)),
       *tk = jv_alloc(E, (n + 1) * sizeof(jv));
    for (size_t i = 0; i < n; i++) {
        jv_list_push(E, &r, list.u.list->v[i]);
        keys[i] = sort_key(c, list.u.list->v[i]);
    }
    merge_sort(c, r.u.list->v, keys, tv, tk, n, reverse);
    return r;
}

/* ---- filters ---- */

/* the number a string spells (Python's int() or float() of its stripped
 * text): 1 with *f (and *is_int, *i when it is an integer), else 0 */
static int text_number(jenv *E, jv v, int *is_int, int64_t *i, double *f)
{
    char buf[64];
    jv t = jb_strip(E, v, jv_undef(), 3);
    if (!t.u.str.n || t.u.str.n >= sizeof buf) return 0;
    size_t k = 0;
    for (size_t j = 0; j < t.u.str.n; j++) {
        char c = t.u.str.s[j];
        if (c == 'x' || c == 'X' || c == 'p' || c == 'P') return 0; /* no hex: not Python's */
        if (c == '_') { /* between two digits only */
            if (!j || j + 1 >= t.u.str.n || !(t.u.str.s[j - 1] >= '0' && t.u.str.s[j - 1] <= '9') ||
                !(t.u.str.s[j + 1] >= '0' && t.u.str.s[j + 1] <= '9'))
                return 0;
            continue;
        }
        buf[k++] = c;
    }
    buf[k] = 0;
    char *end;
    long long x = strtoll(buf, &end, 10);
    *is_int = !*end;
    if (*is_int) {
        *i = x;
        *f = (double)x;
        return 1;
    }
    *f = strtod(buf, &end);
    return !*end;
}

static jv to_int(jenv *E, jv v, jv dflt)
{
    if (intlike(v)) return jv_int(ival(v));
    int is_int;
    int64_t i;
    double f;
    if (v.k == JV_FLOAT) f = v.u.f;
    else if (v.k == JV_STR && text_number(E, v, &is_int, &i, &f)) {
        if (is_int) return jv_int(i);
    } else return dflt;
    if (!isfinite(f)) return dflt;
    if (!(f > -9223372036854775808.0 && f < 9223372036854775808.0))
        FAIL("chat template line %d: int of %g: beyond 64 bits", E->line, f);
    return jv_int((int64_t)f);
}

static jv to_float(jenv *E, jv v, jv dflt)
{
    if (is_num(v)) return jv_float(v.k == JV_FLOAT ? v.u.f : (double)ival(v));
    int is_int;
    int64_t i;
    double f;
    if (v.k == JV_STR && text_number(E, v, &is_int, &i, &f)) return jv_float(f);
    return dflt;
}

/* bytes of a line boundary at i (str.splitlines's: \n \r \r\n \v \f \x1c-\x1e
 * U+0085 U+2028 U+2029), or 0 */
static size_t line_break(const char *p, size_t n, size_t i)
{
    unsigned char c = (unsigned char)p[i];
    if (c == '\r') return i + 1 < n && p[i + 1] == '\n' ? 2 : 1;
    if (c == '\n' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e)) return 1;
    if (c == 0xC2 && i + 1 < n && (unsigned char)p[i + 1] == 0x85) return 2;
    if (c == 0xE2 && i + 2 < n && (unsigned char)p[i + 1] == 0x80 &&
        ((unsigned char)p[i + 2] == 0xA8 || (unsigned char)p[i + 2] == 0xA9))
        return 3;
    return 0;
}

/* jinja2's indent filter: the text plus "\n" split into lines
 * (str.splitlines), each line after the first prefixed unless it is
 * empty (blank: every one), joined with "\n"; first: the first too */
static jv indent(jenv *E, jv s, jv ind, int first, int blank)
{
    jbuf t = {0}, b = {0};
    jbuf_put_str(E, &t, s);
    jbuf_putc(E, &t, '\n');
    if (first) jbuf_put_str(E, &b, ind);
    int line0 = 1;
    for (size_t i = 0; i < t.n;) {
        size_t j = i, k = 0;
        while (j < t.n && !(k = line_break(t.p, t.n, j))) j++;
        if (!line0) {
            jbuf_putc(E, &b, '\n');
            if (blank || j > i) jbuf_put_str(E, &b, ind);
        }
        jbuf_put_t(E, &b, t.p + i, j - i, t.m ? t.m + i : NULL);
        line0 = 0;
        i = j + k;
    }
    return jv_from_buf(E, &b);
}

static jv escape_html(jenv *E, jv s)
{
    jbuf b = {0};
    for (size_t i = 0; i < s.u.str.n; i++) {
        char c = s.u.str.s[i];
        const char *r = c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;"
                      : c == '"' ? "&#34;" : c == '\'' ? "&#39;" : NULL;
        uint8_t mk[8];
        size_t k = r ? strlen(r) : 1;
        memset(mk, s.u.str.t ? s.u.str.t[i] : 0, k);
        jbuf_put_t(E, &b, r ? r : &s.u.str.s[i], k, mk);
    }
    return jv_from_buf(E, &b);
}

/* select/reject (attr: the attribute to test, or JV_UNDEF), keep: 1 select */
static jv select_items(jenv *E, jv v, jv attr, const jv *a, size_t n, int keep)
{
    jv l = jb_as_list(E, v, keep ? "select" : "reject"), r = jv_list(E, 0);
    const char *test = NULL;
    if (n) {
        if (a[0].k != JV_STR) FAIL("chat template line %d: the test's name must be a string", E->line);
        test = a[0].u.str.s;
    }
    for (size_t i = 0; i < l.u.list->n; i++) {
        jv x = l.u.list->v[i], t = attr.k != JV_UNDEF ? jb_attr_path(E, x, attr) : x;
        int ok = test ? jinja_test(E, test, t, a + 1, n - 1) : jv_truthy(t);
        if (ok == keep) jv_list_push(E, &r, x);
    }
    return r;
}

jv jinja_filter(jenv *E, const char *name, jv v, const jv *a, size_t n, const jv *kn,
                const jv *kv, size_t n_kw)
{
#define IS(s) (!strcmp(name, (s)))
#define ARG(i, kw) jinja_arg(a, n, (i), kn, kv, n_kw, (kw))
    if (IS("default") || IS("d")) {
        jv dflt = ARG(0, "default_value"), boolean = ARG(1, "boolean");
        if (dflt.k == JV_UNDEF) dflt = jv_cstr("");
        if (v.k == JV_UNDEF || (jv_truthy(boolean) && !jv_truthy(v))) return dflt;
        return v;
    }
    if (IS("safe")) return v;
    if (IS("string")) return jv_to_str(E, v);
    if (IS("tojson")) { /* transformers': tojson(x, ensure_ascii, indent, separators, sort_keys) */
        jv ind = ARG(1, "indent"), sep = ARG(2, "separators");
        jv_json_opts jo = {.indent = intlike(ind) ? (int)ival(ind) : -1,
                           .ensure_ascii = jv_truthy(ARG(0, "ensure_ascii")),
                           .sort_keys = jv_truthy(ARG(3, "sort_keys"))};
        if (jo.indent < 0 && intlike(ind)) jo.indent = 0; /* json.dumps: a negative indent is 0 */
        jo.item_sep = jo.indent >= 0 ? jv_cstr(",") : jv_cstr(", ");
        jo.key_sep = jv_cstr(": ");
        if (sep.k == JV_LIST && sep.u.list->n == 2 && sep.u.list->v[0].k == JV_STR &&
            sep.u.list->v[1].k == JV_STR) {
            jo.item_sep = sep.u.list->v[0];
            jo.key_sep = sep.u.list->v[1];
        } else if (sep.k != JV_UNDEF && sep.k != JV_NONE) {
            FAIL("chat template line %d: tojson: separators must be two strings", E->line);
        }
        jbuf b = {0};
        jv_tojson_opts(E, &b, v, &jo, 0);
        return jv_from_buf(E, &b);
    }
    if (IS("length") || IS("count")) {
        switch (v.k) {
        case JV_STR: return jv_int((int64_t)cp_count(v));
        case JV_LIST: return jv_int((int64_t)v.u.list->n);
        case JV_DICT: case JV_NS: return jv_int((int64_t)v.u.dict->n);
        case JV_UNDEF: return jv_int(0);
        default: FAIL("chat template line %d: length of a %s", E->line, jv_kind_name(v));
        }
    }
    if (IS("trim")) return jb_strip(E, jv_to_str(E, v), ARG(0, "chars"), 3);
    if (IS("upper") || IS("lower") || IS("capitalize") || IS("title"))
        return jb_casemap(E, jv_to_str(E, v), IS("lower") ? 0 : IS("upper") ? 1 : IS("capitalize") ? 2 : 4);
    if (IS("replace")) {
        jv cnt = ARG(2, "count");
        return jb_replace(E, jv_to_str(E, v), jv_to_str(E, ARG(0, "old")), jv_to_str(E, ARG(1, "new")),
                          intlike(cnt) ? ival(cnt) : -1);
    }
    if (IS("items")) {
        if (v.k == JV_UNDEF) return jv_list(E, 0);
        if (v.k != JV_DICT && v.k != JV_NS) FAIL("chat template line %d: items of a %s", E->line, jv_kind_name(v));
        return jb_items(E, v);
    }
    if (IS("dictsort")) {
        if (v.k != JV_DICT && v.k != JV_NS) FAIL("chat template line %d: dictsort of a %s", E->line, jv_kind_name(v));
        jv by = ARG(1, "by");
        sort_ctx c = {E, jv_truthy(ARG(0, "case_sensitive")), jv_is_str(by, "value") ? 1 : 0, jv_undef()};
        return sorted(E, jb_items(E, v), &c, jv_truthy(ARG(2, "reverse")));
    }
    if (IS("sort")) {
        sort_ctx c = {E, jv_truthy(ARG(1, "case_sensitive")), -1, ARG(2, "attribute")};
        return sorted(E, jb_as_list(E, v, "sort"), &c, jv_truthy(ARG(0, "reverse")));
    }
    if (IS("list")) {
        jv l = jb_as_list(E, v, "list"), r = jv_list(E, l.u.list->n + 1);
        for (size_t i = 0; i < l.u.list->n; i++) jv_list_push(E, &r, l.u.list->v[i]);
        return r;
    }
    if (IS("first") || IS("last")) {
        jv l = jb_as_list(E, v, name);
        if (!l.u.list->n) return jv_undef();
        return l.u.list->v[IS("first") ? 0 : l.u.list->n - 1];
    }
    if (IS("reverse")) {
        if (v.k == JV_STR) {
            jv l = jb_as_list(E, v, "reverse");
            jbuf b = {0};
            for (size_t i = l.u.list->n; i-- > 0;) jv_print(E, &b, l.u.list->v[i]);
            return jv_from_buf(E, &b);
        }
        jv l = jb_as_list(E, v, "reverse"), r = jv_list(E, l.u.list->n + 1);
        for (size_t i = l.u.list->n; i-- > 0;) jv_list_push(E, &r, l.u.list->v[i]);
        return r;
    }
    if (IS("join")) return jb_join(E, ARG(0, "d").k == JV_UNDEF ? jv_cstr("") : jv_to_str(E, ARG(0, "d")), v, ARG(1, "attribute"));
    if (IS("map")) {
        jv l = jb_as_list(E, v, "map"), r = jv_list(E, l.u.list->n + 1);
        jv attribute = jinja_kwarg(kn, kv, n_kw, "attribute");
        if (attribute.k != JV_UNDEF) {
            jv dflt = jinja_kwarg(kn, kv, n_kw, "default");
            for (size_t i = 0; i < l.u.list->n; i++) {
                jv x = jb_attr_path(E, l.u.list->v[i], attribute);
                jv_list_push(E, &r, x.k == JV_UNDEF && dflt.k != JV_UNDEF ? dflt : x);
            }
            return r;
        }
        if (!n || a[0].k != JV_STR) FAIL("chat template line %d: map takes a filter name or attribute=", E->line);
        for (size_t i = 0; i < l.u.list->n; i++)
            jv_list_push(E, &r, jinja_filter(E, a[0].u.str.s, l.u.list->v[i], a + 1, n - 1, kn, kv, n_kw));
        return r;
    }
    if (IS("select") || IS("reject")) return select_items(E, v, jv_undef(), a, n, IS("select"));
    if (IS("selectattr") || IS("rejectattr")) {
        if (!n) FAIL("chat template line %d: %s takes an attribute name", E->line, name);
        return select_items(E, v, a[0], a + 1, n - 1, IS("selectattr"));
    }
    if ((IS("int") || IS("float")) && v.k == JV_UNDEF)
        FAIL("chat template line %d: %s of an undefined value", E->line, name);
    if (IS("int")) return to_int(E, v, ARG(0, "default").k == JV_UNDEF ? jv_int(0) : ARG(0, "default"));
    if (IS("float")) return to_float(E, v, ARG(0, "default").k == JV_UNDEF ? jv_float(0) : ARG(0, "default"));
    if (IS("abs")) {
        if (v.k == JV_FLOAT) return jv_float(fabs(v.u.f));
        if (intlike(v)) {
            if (ival(v) == INT64_MIN) FAIL("chat template line %d: integer overflow in abs", E->line);
            return jv_int(ival(v) < 0 ? -ival(v) : ival(v));
        }
        FAIL("chat template line %d: abs of a %s", E->line, jv_kind_name(v));
    }
    if (IS("round")) {
        jv prec = ARG(0, "precision"), method = ARG(1, "method");
        if (!is_num(v)) FAIL("chat template line %d: round of a %s", E->line, jv_kind_name(v));
        int64_t pr = intlike(prec) ? ival(prec) : 0;
        int common = !jv_is_str(method, "floor") && !jv_is_str(method, "ceil");
        if (intlike(v) && (common || pr >= 0)) return jv_int(ival(v)); /* an int stays one */
        double x = v.k == JV_FLOAT ? v.u.f : (double)ival(v);
        if (!common) {
            double m = pow(10.0, (double)pr);
            return jv_float(jv_is_str(method, "floor") ? floor(x * m) / m : ceil(x * m) / m);
        }
        if (pr >= 0 && pr <= 300 && isfinite(x)) { /* Python's round: of the exact binary value,
                                                      ties to even, as printf rounds */
            char buf[400];
            snprintf(buf, sizeof buf, "%.*f", (int)pr, x);
            return jv_float(strtod(buf, NULL));
        }
        double m = pow(10.0, (double)pr);
        return jv_float(nearbyint(x * m) / m);
    }
    if (IS("indent")) {
        jv w = ARG(0, "width"), ind;
        if (w.k == JV_STR) ind = w;
        else {
            int64_t k = intlike(w) ? ival(w) : 4;
            if (k < 0) k = 0;
            if (k > 4096) FAIL("chat template line %d: indent of more than 4096", E->line);
            char *sp = jv_alloc(E, (size_t)k + 1);
            memset(sp, ' ', (size_t)k);
            sp[k] = 0;
            ind = jv_cstr(sp);
        }
        return indent(E, jv_to_str(E, v), ind, jv_truthy(ARG(1, "first")), jv_truthy(ARG(2, "blank")));
    }
    if (IS("escape") || IS("e")) return escape_html(E, jv_to_str(E, v));
    FAIL("chat template line %d: unknown filter '%s'", E->line, name);
#undef ARG
#undef IS
}

/* ---- tests ---- */

int jinja_test(jenv *E, const char *name, jv v, const jv *a, size_t n)
{
#define IS(s) (!strcmp(name, (s)))
    if (IS("defined")) return v.k != JV_UNDEF;
    if (IS("undefined")) return v.k == JV_UNDEF;
    if (IS("none")) return v.k == JV_NONE;
    if (IS("string")) return v.k == JV_STR;
    if (IS("mapping")) return v.k == JV_DICT || v.k == JV_NS;
    if (IS("boolean")) return v.k == JV_BOOL;
    if (IS("true")) return v.k == JV_BOOL && v.u.b;
    if (IS("false")) return v.k == JV_BOOL && !v.u.b;
    if (IS("number")) return is_num(v);
    if (IS("integer")) return v.k == JV_INT;
    if (IS("float")) return v.k == JV_FLOAT;
    if (IS("iterable")) return v.k == JV_STR || v.k == JV_LIST || v.k == JV_DICT || v.k == JV_NS || v.k == JV_UNDEF;
    if (IS("sequence")) return v.k == JV_STR || v.k == JV_LIST || v.k == JV_DICT || v.k == JV_NS || v.k == JV_UNDEF;
    if (IS("callable")) return v.k == JV_MACRO || v.k == JV_FUNC;
    if (IS("lower") || IS("upper")) { /* str.islower / isupper: a cased letter, none of the other case */
        if (v.k != JV_STR) return 0;
        int cased = 0;
        for (size_t i = 0; i < v.u.str.n; i++) {
            char c = v.u.str.s[i];
            if (c >= 'a' && c <= 'z') {
                if (IS("upper")) return 0;
                cased = 1;
            } else if (c >= 'A' && c <= 'Z') {
                if (IS("lower")) return 0;
                cased = 1;
            }
        }
        return cased;
    }
    if (IS("odd") || IS("even") || IS("divisibleby")) {
        jv d = IS("divisibleby") ? (n ? a[0] : jv_undef()) : jv_int(2);
        if (!is_num(v) || !is_num(d)) FAIL("chat template line %d: test %s of a %s", E->line, name, jv_kind_name(v));
        if (intlike(v) && intlike(d)) {
            int64_t x = ival(v), y = ival(d);
            if (!y) FAIL("chat template line %d: divisibleby zero", E->line);
            int64_t m = y == -1 ? 0 : x % y; /* INT64_MIN % -1 traps */
            return IS("odd") ? m != 0 : m == 0;
        }
        double x = v.k == JV_FLOAT ? v.u.f : (double)ival(v), y = d.k == JV_FLOAT ? d.u.f : (double)ival(d);
        if (y == 0) FAIL("chat template line %d: divisibleby zero", E->line);
        double m = fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return IS("odd") ? m == 1.0 : m == 0.0;
    }
    if (!n && (IS("eq") || IS("equalto") || IS("ne") || IS("lt") || IS("le") || IS("gt") ||
               IS("ge") || IS("in") || IS("sameas")))
        FAIL("chat template line %d: test %s takes a value", E->line, name);
    if (IS("eq") || IS("equalto") || IS("==")) return jv_equal(v, a[0]);
    if (IS("ne") || IS("!=")) return !jv_equal(v, a[0]);
    if (IS("sameas")) return v.k == a[0].k && jv_equal(v, a[0]);
    if (IS("lt") || IS("le") || IS("gt") || IS("ge")) {
        int c = cmp_values(E, v, a[0]);
        return IS("lt") ? c < 0 : IS("le") ? c <= 0 : IS("gt") ? c > 0 : c >= 0;
    }
    if (IS("in")) {
        jv in = a[0];
        if (in.k == JV_LIST) {
            for (size_t i = 0; i < in.u.list->n; i++)
                if (jv_equal(v, in.u.list->v[i])) return 1;
            return 0;
        }
        if (in.k == JV_DICT || in.k == JV_NS) return jv_dict_get(in, v).k != JV_UNDEF;
        if (in.k == JV_STR && v.k == JV_STR)
            return !v.u.str.n || memmem(in.u.str.s, in.u.str.n, v.u.str.s, v.u.str.n) != NULL;
        FAIL("chat template line %d: test in of a %s", E->line, jv_kind_name(in));
    }
    FAIL("chat template line %d: unknown test '%s'", E->line, name);
#undef IS
}
