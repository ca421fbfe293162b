/*
 * test_serve_tools.c - a model's tool calls read back (core/serve/serve_tools.c):
 * the Qwen3.5 and Gemma 4 syntaxes as their chat templates write them, the
 * arguments typed by the tool's schema, and text that is not a call refused
 * with the reason. The expected JSON is written out here by hand.
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

#include "serve_tools.h"

static const char TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},"
    "\"metric\":{\"type\":\"boolean\"},\"zip\":{\"type\":\"string\"},"
    "\"opts\":{\"type\":\"object\"},\"tags\":{\"type\":\"array\"},"
    "\"limit\":{\"type\":[\"number\",\"null\"]}}}}}]";

static void ok(vt_tool_syntax syn, const char *body, const char *want_name, const char *want_args)
{
    cJSON *tools = cJSON_Parse(TOOLS);
    assert_non_null(tools);
    char *name, *args, why[160];
    int rc = vt_tool_call_parse(syn, body, strlen(body), tools, &name, &args, why, sizeof why);
    cJSON_Delete(tools);
    if (rc) fail_msg("refused (%s): %s", why, body);
    if (strcmp(name, want_name) || strcmp(args, want_args))
        fail_msg("%s\n  -> %s %s\n  wanted %s %s", body, name, args, want_name, want_args);
    free(name);
    free(args);
}

static void bad(vt_tool_syntax syn, const char *body, const char *why_part)
{
    char *name = (char *)1, *args = (char *)1, why[160];
    int rc = vt_tool_call_parse(syn, body, strlen(body), NULL, &name, &args, why, sizeof why);
    if (rc != -1) fail_msg("accepted: %s", body);
    assert_null(name);
    assert_null(args);
    if (!strstr(why, why_part)) fail_msg("%s\n  -> '%s' (wanted '%s')", body, why, why_part);
}

static void test_syntax_of_template(void **state)
{
    (void)state;
    assert_int_equal(vt_tool_syntax_for(NULL, "{{ '<tool_call>\\n<function=' + n }}<parameter="),
                     VT_TOOL_SYNTAX_QWEN);
    assert_int_equal(vt_tool_syntax_for("qwen35", "{{ '<|tool_call>call:' }}"), VT_TOOL_SYNTAX_GEMMA4);
    assert_int_equal(vt_tool_syntax_for("qwen35", NULL), VT_TOOL_SYNTAX_QWEN);
    assert_int_equal(vt_tool_syntax_for("gemma4", NULL), VT_TOOL_SYNTAX_GEMMA4);
    /* a template that speaks of tools in a syntax vt does not read */
    assert_int_equal(vt_tool_syntax_for("qwen35", "{% for t in tools %}<fn>{{ t }}</fn>{% endfor %}"),
                     VT_TOOL_SYNTAX_NONE);
    assert_int_equal(vt_tool_syntax_for(NULL, NULL), VT_TOOL_SYNTAX_NONE);
    assert_string_equal(vt_tool_call_open(VT_TOOL_SYNTAX_QWEN), "<tool_call>");
    assert_string_equal(vt_tool_call_close(VT_TOOL_SYNTAX_GEMMA4), "<tool_call|>");
    assert_true(vt_tool_syntax_marker(VT_TOOL_SYNTAX_GEMMA4, "<|\"|>", 5));
    assert_true(vt_tool_syntax_marker(VT_TOOL_SYNTAX_GEMMA4, "<|tool_call>", 12));
    assert_false(vt_tool_syntax_marker(VT_TOOL_SYNTAX_QWEN, "<|\"|>", 5));
    assert_true(vt_tool_syntax_marker(VT_TOOL_SYNTAX_QWEN, "</tool_call>", 12));
    assert_false(vt_tool_syntax_marker(VT_TOOL_SYNTAX_QWEN, "<tool_call", 10));
    assert_false(vt_tool_syntax_marker(VT_TOOL_SYNTAX_NONE, "", 0));
}

static void test_qwen(void **state)
{
    (void)state;
    const vt_tool_syntax Q = VT_TOOL_SYNTAX_QWEN;
    /* as the Qwen3.5 template writes a call (between <tool_call> and </tool_call>) */
    ok(Q, "\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
          "</parameter>\n</function>\n",
       "get_weather", "{\"city\":\"Paris\",\"days\":3}");
    /* schema types: a string stays text even when it reads as a number */
    ok(Q, "<function=get_weather>\n<parameter=zip>\n02139\n</parameter>\n<parameter=metric>\ntrue\n"
          "</parameter>\n<parameter=opts>\n{\"a\": [1, 2]}\n</parameter>\n<parameter=tags>\n[\"x\"]\n"
          "</parameter>\n</function>",
       "get_weather", "{\"zip\":\"02139\",\"metric\":true,\"opts\":{\"a\":[1,2]},\"tags\":[\"x\"]}");
    /* a value of the wrong type for its schema is kept as text; a type list */
    ok(Q, "<function=get_weather>\n<parameter=days>\nthree\n</parameter>\n<parameter=limit>\nnull\n"
          "</parameter>\n</function>",
       "get_weather", "{\"days\":\"three\",\"limit\":null}");
    /* multi-line text; a function not in the tools: values that parse as JSON are JSON */
    ok(Q, "<function=note>\n<parameter=text>\nline one\nline two\n</parameter>\n<parameter=n>\n"
          "2.5\n</parameter>\n<parameter=w>\nhello world\n</parameter>\n</function>\n",
       "note", "{\"text\":\"line one\\nline two\",\"n\":2.5,\"w\":\"hello world\"}");
    /* no parameters; the model stopped before </function> */
    ok(Q, "<function=now>\n</function>", "now", "{}");
    /* an integer past 2^63 (no cast overflows: UBSan) */
    ok(Q, "<function=get_weather>\n<parameter=days>\n1e300\n</parameter>\n</function>", "get_weather",
       "{\"days\":1e+300}");
    ok(Q, "<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n", "get_weather",
       "{\"city\":\"Oslo\"}");
    /* non-ASCII and quotes in a value */
    ok(Q, "<function=get_weather>\n<parameter=city>\nS\xC3\xA3o \"Paulo\"\n</parameter>\n</function>",
       "get_weather", "{\"city\":\"S\xC3\xA3o \\\"Paulo\\\"\"}");
    bad(Q, "get_weather(city=Paris)", "expected '<function=NAME>'");
    bad(Q, "<function=>\n</function>", "function name");
    bad(Q, "<function=f>\n<parameter=a>\n1\n</function>", "has no '</parameter>'");
    bad(Q, "<function=f>\n<parameter=a>\n1\n</parameter>\n<parameter=a>\n2\n</parameter>\n</function>",
        "argument 'a' given twice");
    bad(Q, "<function=f>\n</function>\ntrailing", "text after '</function>'");
    bad(Q, "<function=f>\nstray\n</function>", "expected '<parameter=KEY>'");
}

static void test_gemma4(void **state)
{
    (void)state;
    const vt_tool_syntax G = VT_TOOL_SYNTAX_GEMMA4;
    /* as the Gemma 4 template writes a call (between <|tool_call> and <tool_call|>) */
    ok(G, "call:get_weather{city:<|\"|>Paris<|\"|>,days:3}", "get_weather",
       "{\"city\":\"Paris\",\"days\":3}");
    ok(G, "call:f{a:true,b:false,c:null,d:-1.5e2,e:[1,<|\"|>x, y<|\"|>,{k:<|\"|>v<|\"|>}],"
          "f:{<|\"|>q k<|\"|>:[]}}",
       "f", "{\"a\":true,\"b\":false,\"c\":null,\"d\":-150,\"e\":[1,\"x, y\",{\"k\":\"v\"}],\"f\":{\"q k\":[]}}");
    ok(G, "call:now{}", "now", "{}");
    /* the schema's types: a string parameter written bare stays text; "true" for a boolean */
    ok(G, "call:get_weather{zip:75001,metric:<|\"|>true<|\"|>,days:<|\"|>3<|\"|>,city:7}", "get_weather",
       "{\"zip\":\"75001\",\"metric\":true,\"days\":3,\"city\":\"7\"}");
    ok(G, "call:get_weather {\"zip\":<|\"|>1<|\"|>}", "get_weather", "{\"zip\":\"1\"}");
    /* a string may hold the syntax's own characters */
    ok(G, "call:say{text:<|\"|>a:{b},[c]<|\"|>}", "say", "{\"text\":\"a:{b},[c]\"}");
    /* an unquoted word is kept as the text it is */
    ok(G, "call:f{mode:fast}", "f", "{\"mode\":\"fast\"}");
    bad(G, "get_weather{}", "expected 'call:NAME{'");
    bad(G, "call:{a:1}", "function name");
    bad(G, "call:f{a:<|\"|>open}", "no closing");
    bad(G, "call:f{a:1", "',' or '}' expected");
    bad(G, "call:f{a:1}x", "text after");
    bad(G, "call:f{a:1,a:2}", "given twice");
    /* nesting is bounded */
    char deep[400] = "call:f{a:";
    for (int i = 0; i < 100; i++) strcat(deep, "[");
    bad(G, deep, "nested deeper");
}

static void test_no_syntax(void **state)
{
    (void)state;
    bad(VT_TOOL_SYNTAX_NONE, "<function=f></function>", "no tool-call syntax");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_syntax_of_template), cmocka_unit_test(test_qwen),
        cmocka_unit_test(test_gemma4), cmocka_unit_test(test_no_syntax),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
