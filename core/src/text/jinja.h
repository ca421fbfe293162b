/*
 * jinja.h - the chat-template interpreter: Jinja templates as the models'
 * GGUF files ship them (tokenizer.chat_template), rendered as Hugging Face
 * transformers' apply_chat_template renders them (its jinja2 environment:
 * trim_blocks, lstrip_blocks, the loopcontrols extension, a sandbox in which
 * lists and dicts cannot be changed, tojson as json.dumps with
 * ensure_ascii=False and no key sorting, and the globals raise_exception
 * and strftime_now), so that the prompt vt tokenizes is the one the model
 * was trained on. Written here from the Jinja template documentation
 * (jinja.palletsprojects.com/templates); the tests hold it to Python's
 * jinja2 byte for byte on the published templates.
 *
 * What is covered: text, {{ }}, {% %}, {# #} with - and + whitespace control;
 * if/elif/else, for (tuple targets, an if filter, else, loop.index,
 * index0, revindex, revindex0, first, last, length, previtem, nextitem,
 * depth), break, continue, set (names, namespace attributes, set blocks),
 * macro with defaults and keyword arguments, raw, generation; expressions
 * with Python's values (none, booleans, integers, floats, strings, lists,
 * tuples, dicts), operators (+ - * / // % ** ~, comparisons, in, not in,
 * is, and, or, not, the conditional expression), subscripts and slices;
 * the filters, tests, methods and globals listed in jinja_builtins.c.
 * Anything else is an error naming it and the template line.
 */
#ifndef VT_JINJA_H
#define VT_JINJA_H

#include <stddef.h>
#include <stdint.h>

#include "vt/status.h"

/* Bounds on one render, so that a hostile template fails with an error
 * instead of exhausting the machine. 0 in a field: its default. */
typedef struct vt_jinja_limits {
    size_t max_output;     /* bytes of output (default 16 MiB) */
    size_t max_memory;     /* bytes of values and syntax tree (default 256 MiB) */
    uint32_t max_depth;    /* nested macro calls and expressions (default 200) */
    uint64_t max_steps;    /* statements and loop iterations run (default 10,000,000) */
} vt_jinja_limits;

/*
 * Render the template tmpl (UTF-8, len bytes) with the variables of
 * context_json: a JSON object (json_len bytes) whose members become the
 * template's variables (messages, tools, add_generation_prompt, bos_token,
 * enable_thinking, ...). JSON numbers keep Python's distinction: "1" is an
 * integer, "1.0" a float. On VT_OK *out is a malloc-ed NUL-terminated
 * string (the caller frees it) of *out_len bytes.
 * Errors (message through vt_last_error, *out NULL):
 *  - VT_ERR_FORMAT: a syntax error, or an error while rendering (an
 *    undefined value in arithmetic, a type error, an unknown filter, ...):
 *    "chat template line L: ..."; raise_exception(msg) in the template:
 *    "chat template line L: raised: msg";
 *  - VT_ERR_INVALID_ARG: context_json is not a JSON object;
 *  - VT_ERR_RANGE: a limit of lim was reached, naming it;
 *  - VT_ERR_OUT_OF_MEMORY.
 * lim may be NULL (the defaults).
 */
vt_status vt_jinja_render(const char *tmpl, size_t len, const char *context_json, size_t json_len,
                          const vt_jinja_limits *lim, char **out, size_t *out_len);

/* Parse tmpl without rendering it: VT_OK, or the syntax error (VT_ERR_FORMAT,
 * "chat template line L: ..."), so that a server can refuse a broken
 * template at startup rather than at each request. */
vt_status vt_jinja_check(const char *tmpl, size_t len);

/* A byte range [off, off + len) of a rendering. */
typedef struct vt_jinja_span {
    size_t off, len;
} vt_jinja_span;

/*
 * vt_jinja_render, keeping track of what came from the variables: every
 * string in them (dict keys included) is tainted, except the top-level
 * members named in keep (NULL-terminated list, may be NULL; e.g. the
 * bos_token whose text must parse as the control token it spells), and a
 * byte of the output is tainted where it was copied from a tainted byte,
 * through any filter, method, slice or concatenation (escaped forms too:
 * tojson, repr). *spans (malloc-ed, the caller frees; NULL when *n_spans is
 * 0) gets the tainted byte ranges in order, not overlapping: what a
 * tokenizer must keep as text (a message that spells a control token must
 * not become one). Errors as vt_jinja_render; *spans NULL then.
 */
vt_status vt_jinja_render_spans(const char *tmpl, size_t len, const char *context_json,
                                size_t json_len, const char *const *keep,
                                const vt_jinja_limits *lim, char **out, size_t *out_len,
                                vt_jinja_span **spans, size_t *n_spans);

#endif
