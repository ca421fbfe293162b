/*
 * serve_tools.h - tool calls of vt serve: the syntax in which a family's
 * models write a call, and a call's text parsed back into OpenAI's shape
 * ({"name": ..., "arguments": "<JSON object text>"}).
 *
 * The syntaxes are those the models' own chat templates teach (format data,
 * read from the templates published with the models):
 *  - qwen (Qwen3.5 / 3.6 / 3.8, Qwen3-Coder):
 *      <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n...</function>\n</tool_call>
 *    VALUE is raw text; its JSON type comes from the tool's schema
 *    (parameters.properties.KEY.type: "string" keeps the text, "integer",
 *    "number", "boolean", "object", "array" parse it as JSON); without a
 *    schema type, text that parses as JSON is taken as that value, else it
 *    is a string.
 *  - gemma4 (Gemma 4):
 *      <|tool_call>call:NAME{KEY:VALUE,...}<tool_call|>
 *    VALUE is <|"|>text<|"|> (a string), a number, true, false, null,
 *    {KEY:VALUE,...} or [VALUE,...].
 *
 * Thread-safety: pure functions.
 */
#ifndef VT_SERVE_TOOLS_H
#define VT_SERVE_TOOLS_H

#include <cjson/cJSON.h>
#include <stddef.h>

typedef enum {
    VT_TOOL_SYNTAX_NONE = 0, /* the model writes no tool calls vt can read */
    VT_TOOL_SYNTAX_QWEN = 1,
    VT_TOOL_SYNTAX_GEMMA4 = 2,
} vt_tool_syntax;

/* The syntax of a chat template (the text that opens a call appears in it),
 * else the family's ("qwen35" -> QWEN, "gemma4" -> GEMMA4); NONE when
 * neither tells. chat_template and family may be NULL. */
vt_tool_syntax vt_tool_syntax_for(const char *family, const char *chat_template);

/* The text that opens and the one that closes one call ("" for NONE). */
const char *vt_tool_call_open(vt_tool_syntax syn);
const char *vt_tool_call_close(vt_tool_syntax syn);

/* Whether the n bytes of text are one of the syntax's own markers (its open
 * and close texts; Gemma 4's string quote <|"|>): a vocabulary may hold
 * them as control tokens, which the server then writes out as text where a
 * request offers tools, so that the call can be read back. */
int vt_tool_syntax_marker(vt_tool_syntax syn, const char *text, size_t n);

/*
 * Parse the text between a call's open and close markers (body, n bytes,
 * not NUL-terminated). tools: the request's "tools" array (for the schema
 * types; may be NULL). On success returns 0 and sets *name (malloc-ed) and
 * *arguments (malloc-ed JSON object text, compact). On a call that does not
 * follow the syntax returns -1 and writes why into why[cap] (the caller then
 * keeps the text as content); -2 when out of memory.
 */
int vt_tool_call_parse(vt_tool_syntax syn, const char *body, size_t n, const cJSON *tools,
                       char **name, char **arguments, char *why, size_t cap);

#endif
