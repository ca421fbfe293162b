/*
 * jinja_internal.h - what the chat-template interpreter's files share (not a
 * public header; jinja.h is): values and the arena they live in
 * (jinja_value.c), the syntax tree (scanned by jinja_scan.c, built by
 * jinja_parse.c, run by jinja_eval.c) and the builtins (jinja_builtins.c,
 * jinja_filters.c).
 *
 * Memory: every value, string and node of one render is bump-allocated from
 * one arena (jv_alloc), freed at once when the render ends; values are
 * passed by value and never freed alone. Strings are (pointer, length), not
 * NUL-terminated. Lists and dicts are immutable once built (the sandbox),
 * except a namespace's attributes, which set changes in place.
 */
#ifndef VT_JINJA_INTERNAL_H
#define VT_JINJA_INTERNAL_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>

#include "jinja.h"

typedef enum jv_kind {
    JV_UNDEF, /* a name or key that is not there: prints as "", false, an error in arithmetic */
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,  /* also tuples: the same but for how they print */
    JV_DICT,
    JV_NS,    /* namespace(): a dict whose entries set can change */
    JV_MACRO,
    JV_FUNC,  /* a builtin global, or a method bound to its object */
    JV_LOOP   /* the loop variable of a for */
} jv_kind;

typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jnode jnode;
typedef struct jloop jloop;
typedef struct jfunc jfunc;
typedef struct jframe jframe;

typedef struct jv {
    jv_kind k;
    union {
        int b;
        int64_t i;
        double f;
        struct {
            const char *s;
            size_t n;
            const uint8_t *t; /* per byte: 1 where it came from the render's tainted
                                 variables (their text stays text); NULL: none did */
        } str;
        jlist *list;
        jdict *dict; /* JV_DICT, JV_NS */
        const struct jmacro *macro;
        jfunc *fn;
        jloop *loop;
    } u;
} jv;

struct jlist {
    jv *v;
    size_t n, cap;
    int tuple;
};

struct jdict { /* insertion order kept, as Python's dict */
    jv *key, *val;
    size_t n, cap;
};

struct jloop {
    const jlist *items;
    size_t index0;
};

/* a macro: its statement and the scope it was defined in */
typedef struct jmacro {
    const jnode *node;
    jframe *closure;
} jmacro;

/* A builtin: a global function, or a method (self set) */
typedef struct jenv jenv;
typedef jv (*jbuiltin)(jenv *E, const jfunc *f, const jv *args, size_t n_args,
                       const jv *kw_names, const jv *kw_vals, size_t n_kw);
struct jfunc {
    const char *name;
    jbuiltin fn;
    jv self;
};

/* ---- the syntax tree ---- */
typedef enum jnode_kind {
    /* statements */
    N_BODY, N_TEXT, N_OUTPUT, N_IF, N_FOR, N_SET, N_SET_ATTR, N_SET_BLOCK, N_MACRO, N_BREAK,
    N_CONTINUE,
    /* expressions */
    X_LITERAL, X_NAME, X_LIST, X_TUPLE, X_DICT, X_ATTR, X_ITEM, X_SLICE, X_CALL, X_FILTER, X_TEST,
    X_NEG, X_POS, X_NOT, X_AND, X_OR, X_BINOP, X_COMPARE, X_COND
} jnode_kind;

struct jnode {
    jnode_kind k;
    int line;
    const char *name; /* N_SET, N_SET_ATTR (the namespace), N_MACRO, X_NAME, X_ATTR, X_FILTER, X_TEST, N_SET_BLOCK */
    const char *attr; /* N_SET_ATTR */
    int op;           /* X_BINOP, X_COMPARE: jinja_parse.c's operator codes; X_TEST: negated */
    jv value;         /* X_LITERAL; N_TEXT (a string) */
    jnode *a, *b, *c; /* operands; N_IF: cond, then, else; N_FOR: iter, body, else; N_OUTPUT: expr */
    jnode *d;         /* N_FOR: the if filter (NULL: none) */
    jnode **kids;     /* N_BODY statements, X_LIST/X_TUPLE items, X_DICT keys and values (2n),
                         X_CALL/X_FILTER/X_TEST positional arguments, X_COMPARE operands,
                         N_MACRO parameters' defaults (NULL: none) */
    size_t n_kids;
    const char **names;  /* N_FOR targets, N_MACRO parameters, keyword argument names */
    size_t n_names;
    jnode **kw;          /* keyword argument values (n_names of them) */
    int *ops;            /* X_COMPARE: n_kids - 1 operators */
};

/* comparison and arithmetic operator codes */
enum { OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT,
       OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOT_IN };

/* ---- one render ---- */
typedef struct jbuf {
    char *p;
    uint8_t *m;  /* taint per byte (jv str.t), made at the first tainted byte */
    size_t n, cap;
    int limited; /* output (the render's, a macro's or set block's capture): held to
                    max_output; 0 for scratch text (a value's str, tojson, ...) */
} jbuf;

struct jenv {
    /* the arena */
    void *chunks;         /* list of blocks */
    char *cur;
    size_t left, used, max_memory;
    /* limits and counters */
    size_t max_output;
    uint32_t max_depth, depth;
    uint64_t max_steps, steps;
    /* scopes: the innermost, and the template's own (macros see it) */
    jframe *frame, *root;
    jbuf *out;            /* where output goes now (a macro call or set block captures its own) */
    int line;             /* of the node being run, for messages */
    /* loop control: 1 break, 2 continue, while unwinding to the loop */
    int loop_ctl;
    int in_loop;          /* for bodies being run (a break outside one is an error) */
    int has_taint;        /* a variable is tainted: buffers keep masks */
    /* errors: the message and the status, then a longjmp to the render */
    jmp_buf fail;
    vt_status st;
    char msg[512];
};

/* jinja_value.c: the arena, values, conversion and comparison */
void *jv_alloc(jenv *E, size_t bytes);
_Noreturn void jv_fail(jenv *E, vt_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
jv jv_undef(void);
jv jv_none(void);
jv jv_bool(int b);
jv jv_int(int64_t i);
jv jv_float(double f);
jv jv_str(jenv *E, const char *s, size_t n); /* copies */
jv jv_str_t(jenv *E, const char *s, size_t n, const uint8_t *t); /* copies, with taint t (NULL: none) */
jv jv_sub(jenv *E, jv s, size_t off, size_t n);                  /* bytes [off, off + n) of s, taint too */
jv jv_from_buf(jenv *E, const jbuf *b);                          /* the buffer's text and taint */
void jv_taint_all(jenv *E, jv *v); /* every string in v (dict keys too): tainted */
jv jv_cstr(const char *s);                   /* a static string, not copied */
jv jv_list(jenv *E, size_t cap);
void jv_list_push(jenv *E, jv *list, jv v);
jv jv_dict(jenv *E, size_t cap);
void jv_dict_set(jenv *E, jv *dict, jv key, jv val); /* replaces an equal key */
jv jv_dict_get(jv dict, jv key);                     /* JV_UNDEF when absent */
jv jv_dict_get_c(jv dict, const char *key);
int jv_truthy(jv v);
int jv_equal(jv a, jv b);
int jv_is_str(jv v, const char *s); /* a string equal to s */
const char *jv_kind_name(jv v);
/* str(v) as Python prints it ("" for undefined), and repr(v) (lists and
 * dicts print their items' repr); into b */
void jv_print(jenv *E, jbuf *b, jv v);
void jv_repr(jenv *E, jbuf *b, jv v);
/* str(v) as a string value */
jv jv_to_str(jenv *E, jv v);
/* json.dumps(v, ensure_ascii=False, indent=indent (< 0: None), sort_keys=False) */
void jv_tojson(jenv *E, jbuf *b, jv v, int indent, int level);
/* json.dumps with its options: indent (< 0: None), separators (item, key),
 * ensure_ascii (non-ASCII as \uXXXX), sort_keys */
typedef struct jv_json_opts {
    int indent, ensure_ascii, sort_keys;
    jv item_sep, key_sep;
} jv_json_opts;
void jv_tojson_opts(jenv *E, jbuf *b, jv v, const jv_json_opts *o, int level);
/* parse a JSON text into a value (dicts keep the member order) */
vt_status jv_parse_json(jenv *E, const char *s, size_t n, jv *out);
void jbuf_put(jenv *E, jbuf *b, const char *s, size_t n);
void jbuf_put_t(jenv *E, jbuf *b, const char *s, size_t n, const uint8_t *t); /* with taint */
void jbuf_put_str(jenv *E, jbuf *b, jv s); /* a string value, its taint too */
void jbuf_putc(jenv *E, jbuf *b, char c);
void jbuf_puts(jenv *E, jbuf *b, const char *s);
/* Python's float repr (shortest round-trip digits) into buf (>= 32 bytes) */
void jv_float_repr(double f, char *buf, size_t cap);

/* jinja_parse.c: the template into a tree (errors through jv_fail) */
jnode *jinja_parse(jenv *E, const char *src, size_t len);

/* jinja_eval.c */
jv jinja_eval(jenv *E, const jnode *x);
void jinja_run(jenv *E, const jnode *body);
/* variables: the innermost scope's, or up to the template's */
jv jinja_lookup(jenv *E, const char *name);
void jinja_assign(jenv *E, const char *name, jv v);
/* call a callable with evaluated arguments */
jv jinja_call(jenv *E, jv fn, const jv *args, size_t n, const jv *kw_names, const jv *kw_vals,
              size_t n_kw);

/* jinja_builtins.c: and the str helpers jinja_filters.c shares (strip: which
 * 1 left, 2 right, 3 both, chars a string or JV_UNDEF for whitespace; casemap:
 * 0 lower, 1 upper, 2 capitalize, 3 title; replace: count < 0 all) */
jv jb_strip(jenv *E, jv s, jv chars, int which);
/* Python's whitespace (str.isspace) at byte i of s[0, n), or ending at end:
 * its bytes, or 0 */
size_t jb_space_at(const char *s, size_t n, size_t i);
size_t jb_space_before(const char *s, size_t end);
jv jb_casemap(jenv *E, jv s, int mode);
jv jb_replace(jenv *E, jv s, jv old, jv new_, int64_t count);
jv jb_items(jenv *E, jv dict); /* [(key, value), ...] */
/* sep.join(str(x) for x in items), or of their attribute; the items of a
 * list, a dict's keys or a string's code points as a list (what: the
 * caller's name, for the error); attribute "a.b" of v (jinja2's
 * make_attrgetter) */
jv jb_join(jenv *E, jv sep, jv items, jv attribute);
jv jb_as_list(jenv *E, jv v, const char *what);
jv jb_attr_path(jenv *E, jv v, jv path);
/* a call's keyword argument name, or JV_UNDEF; its argument i, else the
 * keyword argument name (NULL: none), else JV_UNDEF */
jv jinja_kwarg(const jv *kn, const jv *kv, size_t n_kw, const char *name);
jv jinja_arg(const jv *a, size_t n, size_t i, const jv *kn, const jv *kv, size_t n_kw,
             const char *name);
jv jinja_global(jenv *E, const char *name);          /* range, namespace, ...; JV_UNDEF if none */
jv jinja_attr(jenv *E, jv obj, const char *name);    /* obj.name: a method, a key, loop.* */
jv jinja_filter(jenv *E, const char *name, jv v, const jv *args, size_t n, const jv *kw_names,
                const jv *kw_vals, size_t n_kw);
int jinja_test(jenv *E, const char *name, jv v, const jv *args, size_t n);

#endif
