/*
 * serve_json_schema.h - output constrained to JSON (response_format
 * json_object / json_schema): a JSON schema compiled into a matcher that
 * follows the text byte by byte and says whether a piece of text keeps it a
 * prefix of a document that parses and validates, and whether the document
 * is complete. The sampler uses it to mask the tokens that would break it.
 *
 * The documents the matcher accepts are a subset of those the schema
 * validates (RFC 8259 JSON; JSON Schema 2020-12 semantics of the keywords
 * below), chosen so that every prefix can be completed:
 *  - whitespace: none, except one optional space after ':' and ',';
 *  - an object with "properties" holds only those keys, in the schema's
 *    order, each at most once, every "required" one present (so
 *    "additionalProperties" is satisfied whatever its value); an object
 *    without "properties" (json_object) any keys of at most 64 characters,
 *    each value any JSON;
 *  - keywords: type (one of object, array, string, number, integer,
 *    boolean, null), properties, required, additionalProperties, items,
 *    enum, const, minLength and maxLength (characters: a byte, an escape or
 *    a UTF-8 sequence each), minItems and maxItems; title, description,
 *    $schema, $id, $comment, default and examples
 *    are ignored. Any other keyword (anyOf, $ref, pattern, minimum,
 *    format, ...) is refused by name: the caller answers 400.
 *
 * Thread-safety: a compiled schema is read-only (shared); a matcher is one
 * job's.
 */
#ifndef VT_SERVE_JSON_SCHEMA_H
#define VT_SERVE_JSON_SCHEMA_H

#include <cjson/cJSON.h>
#include <stddef.h>

typedef struct vt_json_schema vt_json_schema;
typedef struct vt_json_matcher vt_json_matcher;

/* Compile schema (a JSON Schema object), or any JSON object when schema is
 * NULL (json_object). NULL on a keyword or shape it does not support, with
 * why[cap] naming it and where ("properties.age: 'minimum' is not
 * supported"), or out of memory ("out of memory"). */
vt_json_schema *vt_json_schema_compile(const cJSON *schema, char *why, size_t cap);
void vt_json_schema_free(vt_json_schema *s);

/* A matcher at the start of a document (malloc-ed; NULL: out of memory). */
vt_json_matcher *vt_json_matcher_new(const vt_json_schema *s);
void vt_json_matcher_free(vt_json_matcher *m);
/* A copy of m (malloc-ed; NULL: out of memory). */
vt_json_matcher *vt_json_matcher_dup(const vt_json_matcher *m);

/* Whether the n bytes of text can follow what the matcher has seen (n = 0:
 * 1). Does not change m. */
int vt_json_matcher_accepts(const vt_json_matcher *m, const char *text, size_t n);
/* Feed the n bytes (they must be accepted): 0, or -1 when they are not. */
int vt_json_matcher_feed(vt_json_matcher *m, const char *text, size_t n);
/* Whether what was fed is a whole document (the end of generation may come). */
int vt_json_matcher_complete(const vt_json_matcher *m);
/* A short text that completes the document (every open string, key,
 * number, array and object closed, required properties and items added with
 * the smallest values): written into buf[cap] NUL-terminated, cut short if
 * it does not fit; returns its full length ("" when complete). The sampler
 * writes it when the answer's token budget runs out, so that the JSON is
 * whole even then. */
size_t vt_json_matcher_ending(const vt_json_matcher *m, char *buf, size_t cap);

#endif
