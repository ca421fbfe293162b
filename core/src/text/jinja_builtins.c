/*
 * jinja_builtins.c - the chat-template interpreter's builtins
 * (jinja_internal.h): the globals (range, namespace, dict, raise_exception,
 * strftime_now), attributes (loop.*, a dict's keys, methods of str and
 * dict), filters and tests, each with the semantics of Python's jinja2 and
 * str/dict methods that the published chat templates rely on.
 *
 * Filters: abs, capitalize, count, d, default, dictsort, e, escape, first,
 * float, indent, int, items, join, last, length, list, lower, map, reject,
 * rejectattr, replace, reverse, round, safe, select, selectattr, sort,
 * string, title, tojson, trim, upper. Tests: boolean, callable, defined,
 * divisibleby, eq, equalto, even, false, float, ge, gt, in, integer,
 * iterable, le, lower, lt, mapping, ne, none, number, odd, sameas,
 * sequence, string, true, undefined, upper. str methods: capitalize,
 * count, endswith, find, join, lower, lstrip, replace, rfind, rsplit,
 * rstrip, split, startswith, strip, title, upper; dict methods: get, items,
 * keys, values. Upper and lower case apply to ASCII letters only (Python
 * maps every script; the published templates case only ASCII names).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jinja_internal.h"

#define FAIL(...) jv_fail(E, VT_ERR_FORMAT, __VA_ARGS__)

static int intlike(jv v) { return v.k == JV_INT || v.k == JV_BOOL; }
static int64_t ival(jv v) { return v.k == JV_INT ? v.u.i : v.u.b; }

static jv bound(jenv *E, const char *name, jbuiltin fn, jv self)
{
    jfunc *f = jv_alloc(E, sizeof *f);
    f->name = name;
    f->fn = fn;
    f->self = self;
    return (jv){.k = JV_FUNC, .u.fn = f};
}

jv jinja_kwarg(const jv *kn, const jv *kv, size_t n_kw, const char *name)
{
    for (size_t i = 0; i < n_kw; i++)
        if (jv_is_str(kn[i], name)) return kv[i];
    return jv_undef();
}

jv jinja_arg(const jv *a, size_t n, size_t i, const jv *kn, const jv *kv, size_t n_kw,
              const char *name)
{
    if (i < n) return a[i];
    return name ? jinja_kwarg(kn, kv, n_kw, name) : jv_undef();
}

static jv need_str(jenv *E, jv v, const char *what)
{
    if (v.k != JV_STR) FAIL("chat template line %d: %s needs a string, got a %s", E->line, what, jv_kind_name(v));
    return v;
}


/* ---- whitespace as Python's str.isspace sees it, by code point ---- */

size_t jb_space_at(const char *s, size_t n, size_t i) /* bytes of a space at i, or 0 */
{
    unsigned char c = (unsigned char)s[i];
    if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f)) return 1;
    if (c == 0xC2 && i + 1 < n && ((unsigned char)s[i + 1] == 0x85 || (unsigned char)s[i + 1] == 0xA0)) return 2;
    if (i + 2 < n) {
        unsigned a = (unsigned char)s[i + 1], b = (unsigned char)s[i + 2];
        if (c == 0xE1 && a == 0x9A && b == 0x80) return 3;                      /* U+1680 */
        if (c == 0xE2 && a == 0x80 && ((b >= 0x80 && b <= 0x8A) || b == 0xA8 || b == 0xA9 || b == 0xAF))
            return 3;                                                           /* U+2000..200A, 2028, 2029, 202F */
        if (c == 0xE2 && a == 0x81 && b == 0x9F) return 3;                      /* U+205F */
        if (c == 0xE3 && a == 0x80 && b == 0x80) return 3;                      /* U+3000 */
    }
    return 0;
}

size_t jb_space_before(const char *s, size_t end) /* bytes of a space ending at end, or 0 */
{
    for (size_t k = 1; k <= 3 && k <= end; k++)
        if (jb_space_at(s, end, end - k) == k) return k;
    return 0;
}

/* strip: which 1 left, 2 right, 3 both; chars: the set (a string), or whitespace */
jv jb_strip(jenv *E, jv s, jv chars, int which)
{
    const char *p = s.u.str.s;
    size_t a = 0, b = s.u.str.n;
    if (chars.k == JV_STR) {
        /* a set of code points: compare whole UTF-8 sequences */
        const char *cs = chars.u.str.s;
        size_t cn = chars.u.str.n;
#define IN_SET(q, len) (memmem(cs, cn, (q), (len)) != NULL)
        if (which & 1)
            while (a < b) {
                size_t k = 1;
                while (a + k < b && ((unsigned char)p[a + k] & 0xC0) == 0x80) k++;
                if (!IN_SET(p + a, k)) break;
                a += k;
            }
        if (which & 2)
            while (b > a) {
                size_t k = 1;
                while (b - k > a && ((unsigned char)p[b - k] & 0xC0) == 0x80) k++;
                if (!IN_SET(p + b - k, k)) break;
                b -= k;
            }
#undef IN_SET
    } else {
        size_t k;
        if (which & 1)
            while (a < b && (k = jb_space_at(p, b, a))) a += k;
        if (which & 2)
            while (b > a && (k = jb_space_before(p, b))) b -= k;
    }
    return jv_sub(E, s, a, b - a);
}

static jv split(jenv *E, jv s, jv sep, int64_t maxsplit, int from_right)
{
    jv out = jv_list(E, 0);
    const char *p = s.u.str.s;
    size_t n = s.u.str.n;
    if (sep.k == JV_STR) {
        if (!sep.u.str.n) FAIL("chat template line %d: split: empty separator", E->line);
        const char *q = sep.u.str.s;
        size_t m = sep.u.str.n;
        if (!from_right) {
            size_t start = 0;
            for (size_t i = 0; i + m <= n && maxsplit != 0;) {
                if (!memcmp(p + i, q, m)) {
                    jv_list_push(E, &out, jv_sub(E, s, start, i - start));
                    i += m;
                    start = i;
                    if (maxsplit > 0) maxsplit--;
                } else {
                    i++;
                }
            }
            jv_list_push(E, &out, jv_sub(E, s, start, n - start));
            return out;
        }
        /* from the right: collect, then reverse */
        size_t end = n;
        for (size_t i = n; i >= m && maxsplit != 0;) {
            if (!memcmp(p + i - m, q, m)) {
                jv_list_push(E, &out, jv_sub(E, s, i, end - i));
                i -= m;
                end = i;
                if (maxsplit > 0) maxsplit--;
            } else {
                i--;
            }
        }
        jv_list_push(E, &out, jv_sub(E, s, 0, end));
    } else { /* runs of whitespace, no empty items */
        size_t i = 0, k;
        if (from_right) FAIL("chat template line %d: rsplit without a separator is not supported", E->line);
        for (;;) {
            while (i < n && (k = jb_space_at(p, n, i))) i += k;
            if (i >= n) break;
            if (maxsplit == 0) { /* the rest as it is, trailing spaces too (Python) */
                jv_list_push(E, &out, jv_sub(E, s, i, n - i));
                break;
            }
            size_t start = i;
            while (i < n && !jb_space_at(p, n, i)) i++;
            jv_list_push(E, &out, jv_sub(E, s, start, i - start));
            if (maxsplit > 0) maxsplit--;
        }
        return out;
    }
    /* reverse the right split's items */
    jlist *l = out.u.list;
    for (size_t i = 0; i < l->n / 2; i++) {
        jv t = l->v[i];
        l->v[i] = l->v[l->n - 1 - i];
        l->v[l->n - 1 - i] = t;
    }
    return out;
}

/* 0 lower, 1 upper, 2 capitalize, 3 str.title (a word: letters), 4 the
 * title filter (jinja2: a word starts after - ( { [ < or whitespace) */
jv jb_casemap(jenv *E, jv s, int mode)
{
    char *p = jv_alloc(E, s.u.str.n + 1);
    int prev_cased = 0;
    for (size_t i = 0; i < s.u.str.n; i++) {
        char c = s.u.str.s[i];
        int word_start = i == 0 || strchr("-({[< \t\n\r\f\v", s.u.str.s[i - 1]) != NULL;
        int upper = mode == 1 || (mode == 2 && i == 0) || (mode == 3 && !prev_cased) ||
                    (mode == 4 && word_start);
        if (upper && c >= 'a' && c <= 'z') c = (char)(c - 32);
        else if (!upper && c >= 'A' && c <= 'Z') c = (char)(c + 32);
        p[i] = c;
        prev_cased = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || ((unsigned char)c >= 0x80);
    }
    p[s.u.str.n] = 0;
    return (jv){.k = JV_STR, .u.str = {p, s.u.str.n, s.u.str.t}}; /* the same bytes' taint */
}

jv jb_replace(jenv *E, jv s, jv old, jv new_, int64_t count)
{
    need_str(E, old, "replace");
    need_str(E, new_, "replace");
    jbuf b = {0};
    const char *p = s.u.str.s;
    size_t n = s.u.str.n, m = old.u.str.n;
    size_t i = 0;
    if (!m) { /* Python inserts new before every code point and at the end */
        for (; i < n && count != 0; count--) {
            jbuf_put_str(E, &b, new_);
            size_t k = 1;
            while (i + k < n && ((unsigned char)p[i + k] & 0xC0) == 0x80) k++;
            jbuf_put_t(E, &b, p + i, k, s.u.str.t ? s.u.str.t + i : NULL);
            i += k;
        }
        if (i < n) jbuf_put_t(E, &b, p + i, n - i, s.u.str.t ? s.u.str.t + i : NULL);
        else if (count != 0) jbuf_put_str(E, &b, new_);
    } else {
        while (i < n) {
            if (count != 0 && i + m <= n && !memcmp(p + i, old.u.str.s, m)) {
                jbuf_put_str(E, &b, new_);
                i += m;
                if (count > 0) count--;
            } else {
                jbuf_put_t(E, &b, p + i, 1, s.u.str.t ? s.u.str.t + i : NULL);
                i++;
            }
        }
    }
    return jv_from_buf(E, &b);
}

static size_t cp_index(const char *s, size_t byte) /* code points before byte */
{
    size_t k = 0;
    for (size_t i = 0; i < byte; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

static int64_t find(jv s, jv sub, int from_right)
{
    size_t n = s.u.str.n, m = sub.u.str.n;
    if (m > n) return -1;
    if (!from_right) {
        for (size_t i = 0; i + m <= n; i++)
            if (!memcmp(s.u.str.s + i, sub.u.str.s, m)) return (int64_t)cp_index(s.u.str.s, i);
    } else {
        for (size_t i = n - m + 1; i-- > 0;)
            if (!memcmp(s.u.str.s + i, sub.u.str.s, m)) return (int64_t)cp_index(s.u.str.s, i);
    }
    return -1;
}

static int starts(jv s, jv with, int at_end)
{
    if (with.k == JV_LIST) { /* a tuple of prefixes */
        for (size_t i = 0; i < with.u.list->n; i++)
            if (starts(s, with.u.list->v[i], at_end)) return 1;
        return 0;
    }
    if (with.k != JV_STR || with.u.str.n > s.u.str.n) return 0;
    const char *p = at_end ? s.u.str.s + s.u.str.n - with.u.str.n : s.u.str.s;
    return !memcmp(p, with.u.str.s, with.u.str.n);
}

/* ---- lists of items, attribute paths, join ---- */

/* a list of the items of a list, a dict's keys or a string's code points */
jv jb_as_list(jenv *E, jv v, const char *what)
{
    if (v.k == JV_LIST) return v;
    jv r = jv_list(E, 0);
    if (v.k == JV_DICT || v.k == JV_NS) {
        for (size_t i = 0; i < v.u.dict->n; i++) jv_list_push(E, &r, v.u.dict->key[i]);
    } else if (v.k == JV_STR) {
        for (size_t i = 0; i < v.u.str.n;) {
            size_t k = 1;
            while (i + k < v.u.str.n && ((unsigned char)v.u.str.s[i + k] & 0xC0) == 0x80) k++;
            jv_list_push(E, &r, jv_sub(E, v, i, k));
            i += k;
        }
    } else if (v.k != JV_UNDEF) {
        FAIL("chat template line %d: %s: a %s is not iterable", E->line, what, jv_kind_name(v));
    }
    return r;
}

/* attribute "a.b" of v (jinja2's make_attrgetter) */
jv jb_attr_path(jenv *E, jv v, jv path)
{
    if (path.k == JV_INT) return v.k == JV_LIST && path.u.i >= 0 && (size_t)path.u.i < v.u.list->n
                                     ? v.u.list->v[path.u.i] : jv_undef();
    if (path.k != JV_STR) FAIL("chat template line %d: an attribute name must be a string", E->line);
    const char *s = path.u.str.s, *e = s + path.u.str.n;
    while (s <= e && v.k != JV_UNDEF) {
        const char *dot = memchr(s, '.', (size_t)(e - s));
        if (!dot) dot = e;
        jv key = jv_str(E, s, (size_t)(dot - s));
        if (v.k == JV_DICT || v.k == JV_NS) {
            jv x = jv_dict_get(v, key);
            v = x.k != JV_UNDEF ? x : jinja_attr(E, v, key.u.str.s);
        } else {
            v = jinja_attr(E, v, key.u.str.s);
        }
        s = dot + 1;
    }
    return v;
}

jv jb_join(jenv *E, jv sep, jv items, jv attribute)
{
    jv l = jb_as_list(E, items, "join");
    jbuf b = {0};
    for (size_t i = 0; i < l.u.list->n; i++) {
        if (i && sep.k == JV_STR) jbuf_put_str(E, &b, sep);
        jv x = l.u.list->v[i];
        if (attribute.k != JV_UNDEF) x = jb_attr_path(E, x, attribute);
        jv_print(E, &b, x);
    }
    return jv_from_buf(E, &b);
}

/* ---- methods ---- */

static jv str_method(jenv *E, jv self, const jv *a, size_t n, const jv *kn, const jv *kv,
                     size_t n_kw, const char *name)
{
    if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
        if (!n) FAIL("chat template line %d: %s() takes a prefix", E->line, name);
        return jv_bool(starts(self, a[0], name[0] == 'e'));
    }
    if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip"))
        return jb_strip(E, self, jinja_arg(a, n, 0, kn, kv, n_kw, "chars"),
                     name[0] == 'l' ? 1 : name[0] == 'r' ? 2 : 3);
    if (!strcmp(name, "split") || !strcmp(name, "rsplit")) {
        jv sep = jinja_arg(a, n, 0, kn, kv, n_kw, "sep"), mx = jinja_arg(a, n, 1, kn, kv, n_kw, "maxsplit");
        return split(E, self, sep, intlike(mx) ? ival(mx) : -1, name[0] == 'r');
    }
    if (!strcmp(name, "upper")) return jb_casemap(E, self, 1);
    if (!strcmp(name, "lower")) return jb_casemap(E, self, 0);
    if (!strcmp(name, "capitalize")) return jb_casemap(E, self, 2);
    if (!strcmp(name, "title")) return jb_casemap(E, self, 3);
    if (!strcmp(name, "replace")) {
        if (n < 2) FAIL("chat template line %d: replace() takes old and new", E->line);
        return jb_replace(E, self, a[0], a[1], n > 2 && intlike(a[2]) ? ival(a[2]) : -1);
    }
    if (!strcmp(name, "find") || !strcmp(name, "rfind")) {
        if (!n) FAIL("chat template line %d: %s() takes a string", E->line, name);
        return jv_int(find(self, need_str(E, a[0], name), name[0] == 'r'));
    }
    if (!strcmp(name, "count")) {
        if (!n) FAIL("chat template line %d: count() takes a string", E->line);
        jv sub = need_str(E, a[0], "count");
        int64_t c = 0;
        if (!sub.u.str.n) return jv_int((int64_t)cp_index(self.u.str.s, self.u.str.n) + 1);
        for (size_t i = 0; i + sub.u.str.n <= self.u.str.n;)
            if (!memcmp(self.u.str.s + i, sub.u.str.s, sub.u.str.n)) {
                c++;
                i += sub.u.str.n;
            } else {
                i++;
            }
        return jv_int(c);
    }
    if (!strcmp(name, "join")) {
        if (!n) FAIL("chat template line %d: join() takes an iterable", E->line);
        return jb_join(E, self, a[0], jv_undef());
    }
    FAIL("chat template line %d: str has no method '%s'", E->line, name);
}

static jv call_str_method(jenv *E, const jfunc *f, const jv *a, size_t n, const jv *kn,
                          const jv *kv, size_t n_kw)
{
    return str_method(E, f->self, a, n, kn, kv, n_kw, f->name);
}

jv jb_items(jenv *E, jv d)
{
    jv r = jv_list(E, d.u.dict->n + 1);
    for (size_t i = 0; i < d.u.dict->n; i++) {
        jv t = jv_list(E, 2);
        t.u.list->tuple = 1;
        jv_list_push(E, &t, d.u.dict->key[i]);
        jv_list_push(E, &t, d.u.dict->val[i]);
        jv_list_push(E, &r, t);
    }
    return r;
}

static jv call_dict_method(jenv *E, const jfunc *f, const jv *a, size_t n, const jv *kn,
                           const jv *kv, size_t n_kw)
{
    jv d = f->self;
    if (!strcmp(f->name, "get")) {
        if (!n) FAIL("chat template line %d: get() takes a key", E->line);
        jv v = jv_dict_get(d, a[0]);
        if (v.k != JV_UNDEF) return v;
        jv dflt = jinja_arg(a, n, 1, kn, kv, n_kw, "default");
        return dflt.k == JV_UNDEF ? jv_none() : dflt;
    }
    if (!strcmp(f->name, "items")) return jb_items(E, d);
    jv r = jv_list(E, d.u.dict->n + 1);
    for (size_t i = 0; i < d.u.dict->n; i++)
        jv_list_push(E, &r, !strcmp(f->name, "keys") ? d.u.dict->key[i] : d.u.dict->val[i]);
    return r;
}

static jv loop_cycle(jenv *E, const jfunc *f, const jv *a, size_t n, const jv *kn, const jv *kv,
                     size_t n_kw)
{
    (void)kn, (void)kv, (void)n_kw;
    if (!n) FAIL("chat template line %d: loop.cycle() takes at least one value", E->line);
    return a[f->self.u.loop->index0 % n];
}

jv jinja_attr(jenv *E, jv obj, const char *name)
{
    static const char *const str_methods[] = {"startswith", "endswith", "strip", "lstrip", "rstrip",
                                              "split", "rsplit", "upper", "lower", "capitalize",
                                              "title", "replace", "find", "rfind", "count", "join",
                                              NULL};
    switch (obj.k) {
    case JV_LOOP: {
        const jloop *l = obj.u.loop;
        size_t len = l->items->n, i = l->index0;
        if (!strcmp(name, "index")) return jv_int((int64_t)i + 1);
        if (!strcmp(name, "index0")) return jv_int((int64_t)i);
        if (!strcmp(name, "revindex")) return jv_int((int64_t)(len - i));
        if (!strcmp(name, "revindex0")) return jv_int((int64_t)(len - i - 1));
        if (!strcmp(name, "first")) return jv_bool(i == 0);
        if (!strcmp(name, "last")) return jv_bool(i + 1 == len);
        if (!strcmp(name, "length")) return jv_int((int64_t)len);
        if (!strcmp(name, "depth")) return jv_int(1); /* of a recursive loop: none here */
        if (!strcmp(name, "depth0")) return jv_int(0);
        if (!strcmp(name, "previtem")) return i ? l->items->v[i - 1] : jv_undef();
        if (!strcmp(name, "nextitem")) return i + 1 < len ? l->items->v[i + 1] : jv_undef();
        if (!strcmp(name, "cycle")) return bound(E, "cycle", loop_cycle, obj);
        return jv_undef();
    }
    case JV_NS: return jv_dict_get_c(obj, name);
    case JV_DICT:
        if (!strcmp(name, "get") || !strcmp(name, "items") || !strcmp(name, "keys") ||
            !strcmp(name, "values"))
            return bound(E, name, call_dict_method, obj);
        return jv_dict_get_c(obj, name);
    case JV_STR:
        for (const char *const *m = str_methods; *m; m++)
            if (!strcmp(*m, name)) return bound(E, *m, call_str_method, obj);
        return jv_undef();
    case JV_LIST:
        if (!strcmp(name, "append") || !strcmp(name, "pop") || !strcmp(name, "extend") ||
            !strcmp(name, "insert") || !strcmp(name, "remove") || !strcmp(name, "clear") ||
            !strcmp(name, "sort") || !strcmp(name, "reverse"))
            FAIL("chat template line %d: access to attribute '%s' of a list is unsafe (the "
                 "sandbox does not change lists)", E->line, name);
        return jv_undef();
    default:
        return jv_undef();
    }
}

/* ---- globals ---- */

static jv g_range(jenv *E, const jfunc *self, const jv *a, size_t n, const jv *kn,
                  const jv *kv, size_t n_kw)
{
    (void)self, (void)kn, (void)kv, (void)n_kw;
    int64_t start = 0, stop, st = 1;
    for (size_t i = 0; i < n; i++)
        if (!intlike(a[i])) FAIL("chat template line %d: range() takes integers", E->line);
    if (n == 1) stop = ival(a[0]);
    else if (n == 2 || n == 3) {
        start = ival(a[0]);
        stop = ival(a[1]);
        if (n == 3) st = ival(a[2]);
    } else FAIL("chat template line %d: range() takes 1 to 3 arguments", E->line);
    if (!st) FAIL("chat template line %d: range() step must not be zero", E->line);
    jv r = jv_list(E, 0);
    for (int64_t i = start; st > 0 ? i < stop : i > stop;) {
        if (r.u.list->n >= 100000)
            jv_fail(E, VT_ERR_RANGE, "chat template line %d: range() of more than 100000 items", E->line);
        jv_list_push(E, &r, jv_int(i));
        if (__builtin_add_overflow(i, st, &i)) break;
    }
    return r;
}

static jv g_namespace(jenv *E, const jfunc *self, const jv *a, size_t n, const jv *kn,
                      const jv *kv, size_t n_kw)
{
    (void)self;
    jv ns = jv_dict(E, n_kw + 1);
    ns.k = JV_NS;
    for (size_t i = 0; i < n; i++) { /* a dict given positionally */
        if (a[i].k != JV_DICT) FAIL("chat template line %d: namespace() takes keyword arguments or a dict", E->line);
        for (size_t j = 0; j < a[i].u.dict->n; j++) jv_dict_set(E, &ns, a[i].u.dict->key[j], a[i].u.dict->val[j]);
    }
    for (size_t i = 0; i < n_kw; i++) jv_dict_set(E, &ns, kn[i], kv[i]);
    return ns;
}

static jv g_dict(jenv *E, const jfunc *self, const jv *a, size_t n, const jv *kn,
                 const jv *kv, size_t n_kw)
{
    jv d = g_namespace(E, self, a, n, kn, kv, n_kw);
    d.k = JV_DICT;
    return d;
}

static jv g_raise(jenv *E, const jfunc *self, const jv *a, size_t n, const jv *kn,
                  const jv *kv, size_t n_kw)
{
    (void)self, (void)kn, (void)kv, (void)n_kw;
    jv msg = n ? jv_to_str(E, a[0]) : jv_cstr("");
    FAIL("chat template line %d: raised: %.*s", E->line, (int)(msg.u.str.n > 400 ? 400 : msg.u.str.n),
         msg.u.str.s);
}

static jv g_strftime_now(jenv *E, const jfunc *self, const jv *a, size_t n, const jv *kn,
                         const jv *kv, size_t n_kw)
{
    (void)self, (void)kn, (void)kv, (void)n_kw;
    if (!n || a[0].k != JV_STR) FAIL("chat template line %d: strftime_now() takes a format", E->line);
    char fmt[128], buf[256];
    snprintf(fmt, sizeof fmt, "%.*s", (int)a[0].u.str.n, a[0].u.str.s);
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    size_t k = strftime(buf, sizeof buf, fmt, &tm);
    jv r = jv_str(E, buf, k);
    if (a[0].u.str.t && k) jv_taint_all(E, &r); /* a request's format: all of it is text */
    return r;
}

jv jinja_global(jenv *E, const char *name)
{
    if (!strcmp(name, "range")) return bound(E, name, g_range, jv_none());
    if (!strcmp(name, "namespace")) return bound(E, name, g_namespace, jv_none());
    if (!strcmp(name, "dict")) return bound(E, name, g_dict, jv_none());
    if (!strcmp(name, "raise_exception")) return bound(E, name, g_raise, jv_none());
    if (!strcmp(name, "strftime_now")) return bound(E, name, g_strftime_now, jv_none());
    return jv_undef();
}
