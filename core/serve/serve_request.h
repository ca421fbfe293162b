/*
 * serve_request.h - the JSON bodies of vt serve's endpoints, parsed and
 * checked before anything reaches the engine.
 *
 * Shapes follow OpenAI's API (chat/completions, completions) and
 * llama-server's (/tokenize, /detokenize). Every refusal is an HTTP status
 * (400, or 413 for size) and a message that names the field and, for a
 * range, the bounds and the value given. A field the server does not know is
 * refused by name (never silently dropped); a few fields are accepted only at
 * the value that means "off" (n: 1, presence/frequency_penalty: 0).
 *
 * Thread-safety: pure functions; a request is owned by one thread at a time.
 */
#ifndef VT_SERVE_REQUEST_H
#define VT_SERVE_REQUEST_H

#include <stddef.h>
#include <stdint.h>

enum { VT_SERVE_MAX_STOP = 8, VT_SERVE_MAX_TOP_LOGPROBS = 20, VT_SERVE_MAX_MESSAGES = 4096 };
/* Larger JSON nesting is refused (cJSON's own limit is 1000). */
#define VT_SERVE_MAX_DEPTH 64

typedef enum { VT_SERVE_CHAT = 1, VT_SERVE_COMPLETION = 2 } vt_serve_kind;

/* The API a request came by, which shapes its answer: OpenAI's (SSE), or
 * ollama's /api/chat and /api/generate (NDJSON; serve_ollama.h). */
typedef enum { VT_SERVE_OPENAI = 0, VT_SERVE_OLLAMA_CHAT = 1, VT_SERVE_OLLAMA_GENERATE = 2 } vt_serve_proto;

/* tool_choice: "auto" (the default when tools are given), "none", "required"
 * (the answer begins with a call: its opening is forced), or a named
 * function (its opening with that name forced) */
typedef enum {
    VT_SERVE_TOOLS_AUTO = 0,
    VT_SERVE_TOOLS_NONE = 1,
    VT_SERVE_TOOLS_REQUIRED = 2,
    VT_SERVE_TOOLS_NAMED = 3
} vt_serve_tool_choice;

typedef struct vt_serve_msg {
    char *role;    /* system | user | assistant | developer | tool */
    char *content; /* UTF-8 text (an array of {"type":"text"} parts is joined) */
} vt_serve_msg;

typedef struct vt_serve_request {
    vt_serve_kind kind;
    vt_serve_proto proto;   /* set by vt_serve_parse_ollama; OPENAI otherwise */
    char *model;            /* as given (NULL: absent); any value is served by the loaded model */
    vt_serve_msg *msgs;     /* chat: n_msgs >= 1 */
    size_t n_msgs;
    char *prompt;           /* completion, a string prompt (NULL when given as token ids) */
    int32_t *prompt_ids;    /* completion, the prompt as token ids (checked against the vocabulary later) */
    size_t n_prompt_ids;
    int64_t max_tokens;     /* -1: until end of generation or the context is full */
    float temperature;      /* [0, 2]; default 1 (OpenAI) */
    float top_p;            /* (0, 1]; default 1 */
    int32_t top_k;          /* >= 0; 0: off */
    float min_p;            /* [0, 1]; 0: off */
    uint64_t seed;
    int have_seed;
    char *stop[VT_SERVE_MAX_STOP]; /* never emitted; the text ends before the first one */
    size_t n_stop;
    int logprobs;           /* chat: logprobs true; completion: logprobs >= 0 given */
    int top_logprobs;       /* [0, 20] */
    int echo;               /* completion: not supported (refused) */
    int stream;
    int ignore_eos;         /* llama-server's: an end-of-generation token does not end the text */
    int include_usage;      /* stream_options.include_usage */
    int thinking;           /* chat_template_kwargs.enable_thinking: 1 on, 0 off, -1 the template's default */
    /* chat, for a Jinja chat template (chat_template.c's variables): */
    char *tmpl_messages;    /* the messages as a JSON array: role, content (parts joined), and
                               where given name, tool_call_id, reasoning_content, tool_calls
                               (each {id, type, function: {name, arguments}}, arguments a JSON
                               object where the client sent one or a string that parses as one) */
    char *tools;            /* the "tools" array as compact JSON (each {"type": "function",
                               "function": {"name", "description"?, "parameters"?}}); NULL: none */
    vt_serve_tool_choice tool_choice;
    char *tool_name;        /* tool_choice NAMED: the function (one of tools) */
    char *template_kwargs;  /* chat_template_kwargs as a compact JSON object (every member reaches
                               the template as a variable); NULL: none */
    int has_tool_calls;     /* a message carries tool_calls (only a Jinja template renders them) */
    int json;               /* response_format: 0 text, 1 json_object, 2 json_schema */
    char *json_schema;      /* json_schema: its "schema" as compact JSON (serve_json_schema.h) */
    unsigned given;         /* VT_SERVE_GIVEN_*: the sampling fields the body set (the others
                               take the server's defaults, vt serve --temp ...) */
} vt_serve_request;

enum { VT_SERVE_GIVEN_TEMP = 1, VT_SERVE_GIVEN_TOP_P = 2, VT_SERVE_GIVEN_TOP_K = 4,
       VT_SERVE_GIVEN_MIN_P = 8 };

typedef struct vt_serve_error {
    int http;        /* 400, 413, ... */
    char type[32];   /* "invalid_request_error" */
    char param[64];  /* the field, "" when none */
    char message[512];
} vt_serve_error;

/*
 * Parse the body of POST /v1/chat/completions (kind CHAT) or /v1/completions
 * (COMPLETION). body need not be NUL-terminated. Returns 0 and fills *out
 * (free with vt_serve_request_free) or -1 with *err filled (nothing to free).
 * Refused: invalid UTF-8 (the byte offset), malformed JSON, nesting deeper
 * than VT_SERVE_MAX_DEPTH, a body that is not an object, a missing or empty
 * messages/prompt, a field of the wrong type, a value out of range, an
 * unknown field.
 */
int vt_serve_parse_request(vt_serve_kind kind, const char *body, size_t len,
                           vt_serve_request *out, vt_serve_error *err);
void vt_serve_request_free(vt_serve_request *r);
/* The checks every body gets (valid UTF-8, JSON, an object, nesting within
 * VT_SERVE_MAX_DEPTH, no key twice in an object) and the parsed object
 * (cJSON_Delete it), or NULL with *err filled. */
struct cJSON;
struct cJSON *vt_serve_parse_body(const char *body, size_t len, vt_serve_error *err);

/* POST /tokenize {"content": "...", "add_special": bool, "parse_special": bool}. */
typedef struct vt_serve_tokenize_req {
    char *content;
    int add_special, parse_special;
    int with_pieces;
} vt_serve_tokenize_req;
int vt_serve_parse_tokenize(const char *body, size_t len, vt_serve_tokenize_req *out,
                            vt_serve_error *err);

/* POST /detokenize {"tokens": [ids]}; *ids malloc-ed (may be NULL for n = 0).
 * Ids are range-checked against n_vocab (the id and its index named). */
int vt_serve_parse_detokenize(const char *body, size_t len, int64_t n_vocab, int32_t **ids,
                              size_t *n, vt_serve_error *err);

/* The first invalid UTF-8 byte of s[0..len) (overlong forms, surrogates and
 * code points past U+10FFFF are invalid), or -1 when it is all valid. */
int64_t vt_serve_utf8_invalid_at(const char *s, size_t len);

/* {"error":{"message":...,"type":...,"param":...,"code":...}} as a malloc-ed
 * string (NULL when out of memory). */
char *vt_serve_error_json(const vt_serve_error *err);
void vt_serve_error_set(vt_serve_error *err, int http, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
