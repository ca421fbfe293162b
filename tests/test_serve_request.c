/*
 * test_serve_request.c - vt serve's request parser (core/serve/serve_request.c):
 * what it accepts, and that every bad body is a 4xx naming the field.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "serve_http.h"
#include "serve_request.h"

static int parse(vt_serve_kind k, const char *body, vt_serve_request *r, vt_serve_error *e)
{
    return vt_serve_parse_request(k, body, strlen(body), r, e);
}

/* body must be refused with status http, the message holding `needle` */
static void refused(vt_serve_kind k, const char *body, int http, const char *needle)
{
    vt_serve_request r;
    vt_serve_error e;
    memset(&e, 0, sizeof e);
    if (parse(k, body, &r, &e) == 0) {
        vt_serve_request_free(&r);
        fail_msg("accepted: %s", body);
    }
    if (e.http != http || !strstr(e.message, needle))
        fail_msg("%s\n  -> %d '%s' (wanted %d and '%s')", body, e.http, e.message, http, needle);
}

static void test_chat_accepted(void **state)
{
    (void)state;
    vt_serve_request r;
    vt_serve_error e;
    const char *b = "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
                    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":"
                    "\"text\",\"text\":\"b\"}]}],\"max_tokens\":16,\"temperature\":0.5,\"top_p\":0.9,"
                    "\"top_k\":40,\"min_p\":0.05,\"seed\":7,\"stop\":[\"\\n\",\"END\",\"\"],"
                    "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"logprobs\":true,"
                    "\"top_logprobs\":3,\"n\":1,\"user\":\"u\",\"frequency_penalty\":0,"
                    "\"chat_template_kwargs\":{\"enable_thinking\":false}}";
    assert_int_equal(parse(VT_SERVE_CHAT, b, &r, &e), 0);
    assert_string_equal(r.model, "m");
    assert_int_equal(r.n_msgs, 2);
    assert_string_equal(r.msgs[0].role, "system");
    assert_string_equal(r.msgs[1].content, "ab");
    assert_int_equal(r.max_tokens, 16);
    assert_true(r.temperature == 0.5f && r.top_p == 0.9f && r.min_p == 0.05f);
    assert_int_equal(r.top_k, 40);
    assert_true(r.have_seed && r.seed == 7);
    assert_int_equal(r.n_stop, 2); /* the empty string is no stop string */
    assert_string_equal(r.stop[1], "END");
    assert_true(r.stream && r.include_usage && r.logprobs);
    assert_int_equal(r.top_logprobs, 3);
    assert_int_equal(r.thinking, 0);
    vt_serve_request_free(&r);
    /* defaults: OpenAI's */
    assert_int_equal(parse(VT_SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                           &r, &e), 0);
    assert_int_equal(r.max_tokens, -1);
    assert_true(r.temperature == 1.0f && r.top_p == 1.0f && r.top_k == 0 && r.min_p == 0.0f);
    assert_int_equal(r.thinking, -1);
    assert_false(r.stream);
    vt_serve_request_free(&r);
    /* max_completion_tokens is max_tokens */
    assert_int_equal(parse(VT_SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                           "\"max_completion_tokens\":5}", &r, &e), 0);
    assert_int_equal(r.max_tokens, 5);
    vt_serve_request_free(&r);
}

static void test_completion_accepted(void **state)
{
    (void)state;
    vt_serve_request r;
    vt_serve_error e;
    assert_int_equal(parse(VT_SERVE_COMPLETION, "{\"prompt\":\"The\",\"logprobs\":2,\"stop\":\"x\","
                           "\"echo\":false}", &r, &e), 0);
    assert_string_equal(r.prompt, "The");
    assert_true(r.logprobs && r.top_logprobs == 2);
    assert_int_equal(r.n_stop, 1);
    vt_serve_request_free(&r);
    assert_int_equal(parse(VT_SERVE_COMPLETION, "{\"prompt\":[5,6,7]}", &r, &e), 0);
    assert_int_equal(r.n_prompt_ids, 3);
    assert_int_equal(r.prompt_ids[2], 7);
    vt_serve_request_free(&r);
    assert_int_equal(parse(VT_SERVE_COMPLETION, "{\"prompt\":[\"one\"]}", &r, &e), 0);
    assert_string_equal(r.prompt, "one");
    vt_serve_request_free(&r);
}

/* tools, tool_choice, assistant tool_calls and tool results: accepted, and
 * the messages a chat template sees carry them (arguments as an object) */
static void test_tools_accepted(void **state)
{
    (void)state;
    const char *body =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\","
        "\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
        "\"arguments\":\"{\\\"city\\\": \\\"Paris\\\", \\\"days\\\": 2}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"sunny\"}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
        "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}],"
        "\"tool_choice\":\"auto\",\"parallel_tool_calls\":true,\"response_format\":{\"type\":\"text\"},"
        "\"chat_template_kwargs\":{\"enable_thinking\":false,\"reasoning_effort\":\"low\"}}";
    vt_serve_request r;
    vt_serve_error e;
    if (parse(VT_SERVE_CHAT, body, &r, &e)) fail_msg("refused: %s", e.message);
    assert_int_equal(r.n_msgs, 3);
    assert_int_equal(r.has_tool_calls, 1);
    assert_int_equal(r.tool_choice, VT_SERVE_TOOLS_AUTO);
    assert_int_equal(r.thinking, 0);
    assert_string_equal(r.msgs[1].content, "");
    assert_non_null(r.tools);
    assert_non_null(strstr(r.tools, "\"name\":\"get_weather\""));
    assert_string_equal(r.template_kwargs, "{\"enable_thinking\":false,\"reasoning_effort\":\"low\"}");
    assert_string_equal(r.tmpl_messages,
                        "[{\"role\":\"user\",\"content\":\"weather?\"},"
                        "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"call_1\","
                        "\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                        "\"arguments\":{\"city\":\"Paris\",\"days\":2}}}]},"
                        "{\"role\":\"tool\",\"content\":\"sunny\",\"tool_call_id\":\"call_1\"}]");
    vt_serve_request_free(&r);
    /* tool_choice none; arguments that are not a JSON object stay the text they are */
    const char *b2 = "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":"
                     "{\"name\":\"f\",\"arguments\":\"[1\"}}]}],\"tool_choice\":\"none\",\"tools\":[]}";
    if (parse(VT_SERVE_CHAT, b2, &r, &e)) fail_msg("refused: %s", e.message);
    assert_int_equal(r.tool_choice, VT_SERVE_TOOLS_NONE);
    assert_null(r.tools);
    assert_non_null(strstr(r.tmpl_messages, "\"arguments\":\"[1\""));
    vt_serve_request_free(&r);
}

static void test_bad_json(void **state)
{
    (void)state;
    const vt_serve_kind C = VT_SERVE_CHAT;
    refused(C, "", 400, "empty");
    refused(C, "{\"messages\":", 400, "not valid JSON");
    refused(C, "{\"messages\":[]} trailing", 400, "after the JSON value");
    refused(C, "[1,2]", 400, "must be a JSON object");
    refused(C, "\"text\"", 400, "must be a JSON object");
    /* nesting: 65 levels refused before cJSON recurses; 100000 too */
    char deep[200001];
    size_t k = 0;
    for (int i = 0; i < 100000; i++) deep[k++] = '[';
    for (int i = 0; i < 100000; i++) deep[k++] = ']';
    deep[k] = 0;
    refused(C, deep, 400, "nests deeper than 64");
    char b[512];
    k = 0;
    k += (size_t)snprintf(b, sizeof b, "{\"x\":");
    for (int i = 0; i < 64; i++) b[k++] = '[';
    for (int i = 0; i < 64; i++) b[k++] = ']';
    b[k++] = '}';
    b[k] = 0;
    refused(C, b, 400, "nests deeper than 64"); /* 65 with the object */
    /* brackets inside strings do not count */
    refused(C, "{\"messages\":\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"}",
            400, "'messages' must be an array");
}

static void test_bad_utf8(void **state)
{
    (void)state;
    refused(VT_SERVE_COMPLETION, "{\"prompt\":\"\xff\"}", 400, "not valid UTF-8 (byte 11)");
    refused(VT_SERVE_COMPLETION, "{\"prompt\":\"\xc0\xaf\"}", 400, "not valid UTF-8");    /* overlong */
    refused(VT_SERVE_COMPLETION, "{\"prompt\":\"\xed\xa0\x80\"}", 400, "not valid UTF-8"); /* surrogate */
    refused(VT_SERVE_COMPLETION, "{\"prompt\":\"\xf4\x90\x80\x80\"}", 400, "not valid UTF-8"); /* > U+10FFFF */
    refused(VT_SERVE_COMPLETION, "{\"prompt\":\"\xe2\x82\"}", 400, "not valid UTF-8"); /* cut */
    assert_int_equal(vt_serve_utf8_invalid_at("a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 10), -1);
    assert_int_equal(vt_serve_utf8_invalid_at("ab\x80", 3), 2);
}

static void test_bad_fields(void **state)
{
    (void)state;
    const vt_serve_kind C = VT_SERVE_CHAT, P = VT_SERVE_COMPLETION;
#define MSG "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]"
    refused(C, "{}", 400, "'messages' is required");
    refused(C, "{\"messages\":[]}", 400, "'messages' is empty");
    refused(C, "{\"messages\":{}}", 400, "'messages' must be an array");
    refused(C, "{\"messages\":[1]}", 400, "'messages[0]' must be an object");
    refused(C, "{\"messages\":[{\"role\":\"king\",\"content\":\"x\"}]}", 400, "messages[0].role");
    refused(C, "{\"messages\":[{\"role\":\"user\"}]}", 400, "has no content");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", 400, "messages[0].content");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", 400,
            "no images");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"mood\":1}]}", 400,
            "'messages[0].mood' is not supported");
    refused(C, "{" MSG ",\"max_tokens\":-1}", 400, "'max_tokens' must be in [1, 2147483647], got -1");
    refused(C, "{" MSG ",\"max_tokens\":0}", 400, "'max_tokens' must be in [1,");
    refused(C, "{" MSG ",\"max_tokens\":1e12}", 400, "got 1000000000000");
    refused(C, "{" MSG ",\"max_tokens\":1.5}", 400, "'max_tokens' must be an integer");
    refused(C, "{" MSG ",\"max_tokens\":\"10\"}", 400, "'max_tokens' must be an integer");
    refused(C, "{" MSG ",\"temperature\":\"hot\"}", 400, "'temperature' must be a number");
    refused(C, "{" MSG ",\"temperature\":3}", 400, "'temperature' must be in [0, 2]");
    refused(C, "{" MSG ",\"temperature\":-0.1}", 400, "'temperature' must be in");
    refused(C, "{" MSG ",\"top_p\":0}", 400, "'top_p' must be in (0, 1]");
    refused(C, "{" MSG ",\"top_k\":-1}", 400, "'top_k' must be in");
    refused(C, "{" MSG ",\"min_p\":2}", 400, "'min_p' must be in [0, 1]");
    refused(C, "{" MSG ",\"logprobs\":true,\"top_logprobs\":1000000}", 400,
            "'top_logprobs' must be in [0, 20], got 1000000");
    refused(C, "{" MSG ",\"logprobs\":true,\"top_logprobs\":21}", 400, "'top_logprobs' must be in");
    refused(C, "{" MSG ",\"top_logprobs\":2}", 400, "needs 'logprobs': true");
    refused(C, "{" MSG ",\"logprobs\":1}", 400, "'logprobs' must be true or false");
    refused(C, "{" MSG ",\"n\":2}", 400, "'n' must be 1");
    refused(C, "{" MSG ",\"stop\":[1]}", 400, "'stop' must hold strings");
    refused(C, "{" MSG ",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\"]}", 400,
            "at most 8");
    refused(C, "{" MSG ",\"stop\":{}}", 400, "'stop' must be a string or an array");
    refused(C, "{" MSG ",\"stream\":\"yes\"}", 400, "'stream' must be true or false");
    refused(C, "{" MSG ",\"stream_options\":{\"include_usage\":true}}", 400, "needs 'stream': true");
    refused(C, "{" MSG ",\"stream\":true,\"stream_options\":{\"x\":1}}", 400, "stream_options.x");
    refused(C, "{" MSG ",\"presence_penalty\":0.5}", 400, "'presence_penalty' is not supported");
    refused(C, "{" MSG ",\"tools\":{}}", 400, "'tools' must be an array");
    refused(C, "{" MSG ",\"tools\":[{\"type\":\"function\",\"function\":{}}]}", 400, "'tools[0]' must be");
    refused(C, "{" MSG ",\"tools\":[{\"type\":\"code\",\"function\":{\"name\":\"f\"}}]}", 400,
            "'tools[0]' must be");
    refused(C, "{" MSG ",\"tool_choice\":\"required\"}", 400, "'tool_choice' \"required\" needs 'tools'");
    refused(C, "{" MSG ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}},"
            "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"g\"}}]}", 400,
            "'tool_choice' names 'f', which is not one of 'tools'");
    refused(C, "{" MSG ",\"tool_choice\":3}", 400, "'tool_choice' must be");
    refused(C, "{" MSG ",\"tool_choice\":\"required\",\"tools\":[{\"type\":\"function\",\"function\":"
            "{\"name\":\"g\"}}],\"response_format\":{\"type\":\"json_object\"}}", 400, "give one of them");
    refused(C, "{" MSG ",\"response_format\":{\"type\":\"yaml\"}}", 400,
            "'response_format' type 'yaml' is not one of");
    refused(C, "{" MSG ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":3}}}",
            400, "'response_format.json_schema' must be");
    refused(C, "{" MSG ",\"chat_template_kwargs\":{\"messages\":[]}}", 400, "set by the server");
    refused(C, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":1}}]}]}",
            400, "'messages[0].tool_calls[0]' must be");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"tool_calls\":[]}]}", 400,
            "'messages[0].tool_calls' is not supported");
    refused(C, "{" MSG ",\"wibble\":{\"deep\":[1,2,{}]}}", 400, "unknown field 'wibble'");
    refused(C, "{" MSG ",\"seed\":\"7\"}", 400, "'seed' must be an integer");
    refused(C, "{" MSG ",\"model\":5}", 400, "'model' must be a string");
    refused(C, "{" MSG ",\"chat_template_kwargs\":{\"enable_thinking\":\"no\"}}", 400,
            "enable_thinking");
    refused(P, "{\"prompt\":\"of\",\"prompt\":\"of\"}", 400, "the key 'prompt' appears twice");
    refused(C, "{" MSG "," MSG "}", 400, "the key 'messages' appears twice");
    refused(C, "{" MSG ",\"stop\":\"a\",\"stop\":[\"b\"]}", 400, "the key 'stop' appears twice");
    refused(P, "{\"prompt\":\"a\\u0000b\"}", 400, "\\u0000");
    { /* an escaped backslash, then "u0000": text, no NUL */
        vt_serve_request r;
        vt_serve_error e;
        assert_int_equal(parse(P, "{\"prompt\":\"a\\\\u0000b\"}", &r, &e), 0);
        assert_string_equal(r.prompt, "a\\u0000b");
        vt_serve_request_free(&r);
    }
    refused(C, "{" MSG ",\"max_tokens\":5,\"max_completion_tokens\":6}", 400, "not both");
    refused(P, "{}", 400, "'prompt' is required");
    refused(P, "{\"prompt\":5}", 400, "'prompt' must be a string");
    refused(P, "{\"prompt\":[]}", 400, "'prompt' must be a string");
    refused(P, "{\"prompt\":[1,-2]}", 400, "element 1 is not");
    refused(P, "{\"prompt\":[\"a\",\"b\"]}", 400, "batches of prompts are not supported");
    refused(P, "{\"prompt\":\"a\",\"logprobs\":true}", 400, "'logprobs' must be an integer");
    refused(P, "{\"prompt\":\"a\",\"echo\":true}", 400, "'echo': true is not supported");
    refused(P, "{\"prompt\":\"a\",\"messages\":[]}", 400, "unknown field 'messages'");
    refused(C, "{" MSG ",\"prompt\":\"a\"}", 400, "unknown field 'prompt'");
#undef MSG
}

static void test_tokenize_bodies(void **state)
{
    (void)state;
    vt_serve_tokenize_req t;
    vt_serve_error e;
    const char *ok = "{\"content\":\"hi\",\"add_special\":true,\"parse_special\":false}";
    assert_int_equal(vt_serve_parse_tokenize(ok, strlen(ok), &t, &e), 0);
    assert_string_equal(t.content, "hi");
    assert_true(t.add_special && !t.parse_special);
    free(t.content);
    assert_int_not_equal(vt_serve_parse_tokenize("{}", 2, &t, &e), 0);
    assert_non_null(strstr(e.message, "'content' is required"));
    assert_int_not_equal(vt_serve_parse_tokenize("{\"content\":1}", 13, &t, &e), 0);
    assert_non_null(strstr(e.message, "'content' must be a string"));

    int32_t *ids;
    size_t n;
    const char *d = "{\"tokens\":[0,5,99]}";
    assert_int_equal(vt_serve_parse_detokenize(d, strlen(d), 100, &ids, &n, &e), 0);
    assert_int_equal(n, 3);
    assert_int_equal(ids[2], 99);
    free(ids);
    d = "{\"tokens\":[0,100]}";
    assert_int_not_equal(vt_serve_parse_detokenize(d, strlen(d), 100, &ids, &n, &e), 0);
    assert_int_equal(e.http, 400);
    assert_non_null(strstr(e.message, "'tokens[1]' is not a token id: ids are integers in [0, 100)"));
    d = "{\"tokens\":[-1]}";
    assert_int_not_equal(vt_serve_parse_detokenize(d, strlen(d), 100, &ids, &n, &e), 0);
    d = "{\"tokens\":[1.5]}";
    assert_int_not_equal(vt_serve_parse_detokenize(d, strlen(d), 100, &ids, &n, &e), 0);
    d = "{\"tokens\":[\"a\"]}";
    assert_int_not_equal(vt_serve_parse_detokenize(d, strlen(d), 100, &ids, &n, &e), 0);
    d = "{\"ids\":[1]}";
    assert_int_not_equal(vt_serve_parse_detokenize(d, strlen(d), 100, &ids, &n, &e), 0);
    assert_non_null(strstr(e.message, "unknown field 'ids'"));
    d = "{}";
    assert_int_not_equal(vt_serve_parse_detokenize(d, strlen(d), 100, &ids, &n, &e), 0);
    assert_non_null(strstr(e.message, "'tokens'"));
}

static void test_error_json(void **state)
{
    (void)state;
    vt_serve_error e;
    vt_serve_error_set(&e, 400, "max_tokens", "'max_tokens' must be in [1, %d]", 9);
    char *s = vt_serve_error_json(&e);
    cJSON *j = cJSON_Parse(s);
    cJSON *err = cJSON_GetObjectItem(j, "error");
    assert_string_equal(cJSON_GetObjectItem(err, "message")->valuestring, "'max_tokens' must be in [1, 9]");
    assert_string_equal(cJSON_GetObjectItem(err, "type")->valuestring, "invalid_request_error");
    assert_string_equal(cJSON_GetObjectItem(err, "param")->valuestring, "max_tokens");
    assert_int_equal(cJSON_GetObjectItem(err, "code")->valueint, 400);
    cJSON_Delete(j);
    free(s);
    vt_serve_error_set(&e, 503, NULL, "busy");
    s = vt_serve_error_json(&e);
    j = cJSON_Parse(s);
    err = cJSON_GetObjectItem(j, "error");
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(err, "param")));
    assert_string_equal(cJSON_GetObjectItem(err, "type")->valuestring, "server_overloaded");
    cJSON_Delete(j);
    free(s);
}

/* issue 43 item 8: a key twice in one object (any depth) is refused, naming
 * it; a hostile object of many distinct keys is accepted quickly. */
static void test_duplicate_keys(void **state)
{
    (void)state;
    const vt_serve_kind C = VT_SERVE_CHAT;
    refused(C, "{\"messages\":[{\"role\":\"user\",\"role\":\"system\",\"content\":\"hi\"}]}",
            400, "the key 'role' appears twice");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":5,"
               "\"max_tokens\":9}", 400, "the key 'max_tokens' appears twice");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"x\":{\"a\":1,\"b\":{\"c\":1,"
               "\"c\":2}}}", 400, "the key 'c' appears twice");
    /* 20000 distinct keys: unknown fields are refused, but by name, after the check */
    size_t cap = 20000 * 16 + 64, k = 0;
    char *b = malloc(cap);
    assert_non_null(b);
    k += (size_t)snprintf(b, cap, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\",");
    for (int i = 0; i < 20000; i++) k += (size_t)snprintf(b + k, cap - k, "\"k%d\":1,", i);
    b[k - 1] = '}';
    k += (size_t)snprintf(b + k, cap - k, "]}");
    vt_serve_request r;
    vt_serve_error err;
    memset(&err, 0, sizeof err);
    if (vt_serve_parse_request(C, b, strlen(b), &r, &err) == 0) vt_serve_request_free(&r);
    else assert_null(strstr(err.message, "appears twice"));
    free(b);
}

/* issue 43 item 9: a message cut to the buffer ends on a character
 * boundary, so the JSON error body is valid UTF-8. */
static void test_error_cut_utf8(void **state)
{
    (void)state;
    char text[2000];
    size_t k = 0;
    for (int lead = 0; lead < 4; lead++) { /* every alignment of the cut */
        k = 0;
        for (int i = 0; i < lead; i++) text[k++] = 'x';
        while (k + 4 < sizeof text) {
            memcpy(text + k, "\xe2\x82\xac", 3); /* U+20AC, 3 bytes */
            k += 3;
        }
        text[k] = 0;
        vt_serve_error e;
        vt_serve_error_set(&e, 400, NULL, "%s", text);
        assert_int_equal(vt_serve_utf8_invalid_at(e.message, strlen(e.message)), -1);
        char *s = vt_serve_error_json(&e);
        assert_non_null(s);
        assert_int_equal(vt_serve_utf8_invalid_at(s, strlen(s)), -1);
        free(s);
    }
}

static void test_key_equal(void **state)
{
    (void)state;
    assert_true(vt_serve_key_equal("secret", "secret"));
    assert_false(vt_serve_key_equal("secreT", "secret"));
    assert_false(vt_serve_key_equal("secret2", "secret"));
    assert_false(vt_serve_key_equal("secre", "secret"));
    assert_false(vt_serve_key_equal("", "secret"));
    assert_false(vt_serve_key_equal("secretsecret", "secret")); /* wraps, still unequal */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_accepted),   cmocka_unit_test(test_completion_accepted),
        cmocka_unit_test(test_tools_accepted),
        cmocka_unit_test(test_bad_json),        cmocka_unit_test(test_bad_utf8),
        cmocka_unit_test(test_bad_fields),      cmocka_unit_test(test_tokenize_bodies),
        cmocka_unit_test(test_error_json),      cmocka_unit_test(test_key_equal),
        cmocka_unit_test(test_duplicate_keys),  cmocka_unit_test(test_error_cut_utf8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
