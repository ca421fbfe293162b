/*
 * test_json_schema.c - output constrained to JSON (core/serve/serve_json_schema.c):
 * documents the matcher must accept whole, prefixes it must refuse, schema
 * keywords it must refuse by name, and random walks: at every step a byte
 * drawn among those the matcher accepts, until it says the document is
 * complete; every such document must parse (cJSON) and validate against the
 * schema (checked here by hand).
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

#include "serve_json_schema.h"

static vt_json_schema *compile(const char *schema_json)
{
    cJSON *j = schema_json ? cJSON_Parse(schema_json) : NULL;
    if (schema_json) assert_non_null(j);
    char why[256];
    vt_json_schema *s = vt_json_schema_compile(j, why, sizeof why);
    cJSON_Delete(j);
    if (!s) fail_msg("schema refused: %s", why);
    return s;
}

/* doc whole: accepted and complete (want 1), or refused somewhere / not complete (0) */
static void doc(const vt_json_schema *s, const char *text, int want)
{
    vt_json_matcher *m = vt_json_matcher_new(s);
    assert_non_null(m);
    int ok = vt_json_matcher_feed(m, text, strlen(text)) == 0 && vt_json_matcher_complete(m);
    vt_json_matcher_free(m);
    if (ok != want) fail_msg("%s: %s", text, want ? "refused" : "accepted");
}

static const char PERSON[] =
    "{\"type\":\"object\",\"title\":\"p\",\"properties\":{\"name\":{\"type\":\"string\"},"
    "\"age\":{\"type\":\"integer\"},\"score\":{\"type\":\"number\"},\"ok\":{\"type\":\"boolean\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}},"
    "\"color\":{\"enum\":[\"red\",\"green\",1,null]},\"extra\":{}},\"required\":[\"name\",\"age\"],"
    "\"additionalProperties\":false}";

static void test_documents(void **state)
{
    (void)state;
    vt_json_schema *s = compile(PERSON);
    doc(s, "{\"name\":\"Ann\",\"age\":31}", 1);
    doc(s, "{\"name\": \"A\\u00e9\\\"b\", \"age\": -0, \"score\": 1.5e-3, \"ok\": true, \"tags\": [\"x\", \"y\"], "
           "\"color\": \"green\", \"extra\": {\"k\": [1, {\"z\": null}]}}", 1);
    doc(s, "{\"name\":\"A\",\"age\":3,\"color\":1}", 1);
    doc(s, "{\"name\":\"A\",\"age\":3,\"color\":null}", 1);
    doc(s, "{\"name\":\"A\",\"age\":3,\"tags\":[]}", 1);
    doc(s, "{\"age\":3,\"name\":\"A\"}", 0);        /* the schema's order */
    doc(s, "{\"name\":\"A\"}", 0);                   /* age is required */
    doc(s, "{\"name\":\"A\",\"age\":3.5}", 0);       /* an integer */
    doc(s, "{\"name\":\"A\",\"age\":03}", 0);        /* no leading zero */
    doc(s, "{\"name\":\"A\",\"age\":3,\"color\":\"blue\"}", 0);
    doc(s, "{\"name\":\"A\",\"age\":3,\"other\":1}", 0);
    doc(s, "{\"name\":\"A\",\"age\":3,}", 0);
    doc(s, "{\"name\":\"A\",\"age\":3} ", 0);        /* nothing after the document */
    doc(s, "{\"name\":\"A\",  \"age\":3}", 0);       /* one space at most */
    doc(s, "{\"name\":\"a\nb\",\"age\":3}", 0);      /* a raw control character */
    doc(s, "{\"name\":\"A\",\"age\":3", 0);          /* not complete */
    vt_json_schema_free(s);
    s = compile(NULL); /* json_object: any object */
    doc(s, "{}", 1);
    doc(s, "{\"a\":[1,-2.5E+3,\"s\",true,false,null,{}],\"b\":{\"c\":\"d\"}}", 1);
    doc(s, "[1]", 0);
    doc(s, "\"s\"", 0);
    doc(s, "{\"a\":tru}", 0);
    doc(s, "{\"a\":1.}", 0);
    doc(s, "{a:1}", 0);
    vt_json_schema_free(s);
    s = compile("{\"type\":\"integer\"}"); /* a number ends with the document */
    doc(s, "42", 1);
    doc(s, "-", 0);
    vt_json_schema_free(s);
    s = compile("{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"minLength\":2,"
                "\"maxLength\":3},\"a\":{\"type\":\"array\",\"minItems\":1,\"maxItems\":2}}}");
    doc(s, "{\"s\":\"ab\"}", 1);
    doc(s, "{\"s\":\"a\\u00e9\xC3\xA9\"}", 1); /* 3 characters, 9 bytes */
    doc(s, "{\"s\":\"a\"}", 0);
    doc(s, "{\"s\":\"abcd\"}", 0);
    doc(s, "{\"a\":[1,2]}", 1);
    doc(s, "{\"a\":[]}", 0);
    doc(s, "{\"a\":[1,2,3]}", 0);
    doc(s, "{\"s\":\"\\ud800\"}", 0);     /* no surrogate halves */
    doc(s, "{\"s\":\"\xC3(x\"}", 0);       /* a UTF-8 lead byte wants its continuation */
    vt_json_schema_free(s);
    s = compile("{\"enum\":[\"a\",\"ab\"]}");
    doc(s, "\"a\"", 1);
    doc(s, "\"ab\"", 1);
    doc(s, "\"abc\"", 0);
    vt_json_schema_free(s);
}

/* The shortest ending stays bounded work and says when it does not fit,
 * however the schema's minimums multiply (minItems in minItems); a schema
 * nested as deep as the matcher's frames allow is refused at compile time. */
static void test_ending_bounds(void **state)
{
    (void)state;
    vt_json_schema *s = compile("{\"type\":\"array\",\"minItems\":100000,\"items\":{\"type\":"
                                "\"array\",\"minItems\":100000}}");
    vt_json_matcher *m = vt_json_matcher_new(s);
    char end[64];
    assert_true(vt_json_matcher_ending(m, end, sizeof end) >= sizeof end);
    vt_json_matcher_free(m);
    vt_json_schema_free(s);
    char deep[2048] = "", tail[256] = "";
    for (int d = 0; d < 40; d++) {
        char sch[2048 + 64];
        snprintf(sch, sizeof sch, "{\"type\":\"array\",\"items\":%s}", d ? deep : "{\"type\":\"integer\"}");
        snprintf(deep, sizeof deep, "%s", sch);
        cJSON *j = cJSON_Parse(deep);
        char why[256];
        vt_json_schema *x = vt_json_schema_compile(j, why, sizeof why);
        cJSON_Delete(j);
        if (!x) {
            assert_non_null(strstr(why, "nested deeper"));
            break;
        }
        /* what compiles can be written out whole: the deepest document */
        vt_json_matcher *mm = vt_json_matcher_new(x);
        int n = 0;
        for (int k = 0; k <= d; k++) tail[n++] = '[';
        tail[n++] = '1';
        for (int k = 0; k <= d; k++) tail[n++] = ']';
        tail[n] = 0;
        if (vt_json_matcher_feed(mm, tail, (size_t)n) || !vt_json_matcher_complete(mm))
            fail_msg("depth %d compiles but its document is refused", d + 1);
        vt_json_matcher_free(mm);
        vt_json_schema_free(x);
    }
}

static void test_refused_keywords(void **state)
{
    (void)state;
    static const char *const bad[][2] = {
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":\"x\"}}}", "properties.a: 'pattern' is not supported"},
        {"{\"type\":\"integer\",\"maxLength\":2}", "'maxLength' does not apply to type 'integer'"},
        {"{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", "'minLength' is above 'maxLength'"},
        {"{\"anyOf\":[{\"type\":\"string\"}]}", "'anyOf' is not supported"},
        {"{\"$ref\":\"#/x\"}", "'$ref' is not supported"},
        {"{\"type\":[\"string\",\"null\"]}", "a list of types"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"]}", "'required' names 'b'"},
        {"{\"type\":\"date\"}", "type 'date'"},
        {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}", "'additionalProperties' as a schema"},
        {"{\"type\":\"string\",\"enum\":[1,2]}", "not of type 'string'"},
        {"{\"type\":\"object\",\"properties\":{\"a\\\"b\":{}}}", "quotes"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cJSON *j = cJSON_Parse(bad[i][0]);
        assert_non_null(j);
        char why[256] = "";
        vt_json_schema *s = vt_json_schema_compile(j, why, sizeof why);
        cJSON_Delete(j);
        if (s || !strstr(why, bad[i][1])) fail_msg("%s -> %s (wanted '%s')", bad[i][0], why, bad[i][1]);
    }
}

/* A document the walk wrote: it parses, and is a PERSON. */
static void check_person(const char *text)
{
    cJSON *j = cJSON_Parse(text);
    if (!j) fail_msg("does not parse: %s", text);
    const cJSON *name = cJSON_GetObjectItem(j, "name"), *age = cJSON_GetObjectItem(j, "age");
    /* an integer: whole (a double from 2^53 on always is) */
    const double a = cJSON_IsNumber(age) ? age->valuedouble : 0.5;
    if (!cJSON_IsObject(j) || !cJSON_IsString(name) ||
        (a > -9007199254740992.0 && a < 9007199254740992.0 && a != (double)(long long)a))
        fail_msg("not a person: %s", text);
    static const char *const allowed[] = {"name", "age", "score", "ok", "tags", "color", "extra"};
    for (const cJSON *f = j->child; f; f = f->next) {
        size_t k = 0;
        while (k < 7 && strcmp(f->string, allowed[k])) k++;
        if (k == 7) fail_msg("key '%s': %s", f->string, text);
        if ((k == 2 && !cJSON_IsNumber(f)) || (k == 3 && !cJSON_IsBool(f)) || (k == 4 && !cJSON_IsArray(f)))
            fail_msg("'%s' of the wrong type: %s", f->string, text);
    }
    cJSON_Delete(j);
}

static void test_random_walks(void **state)
{
    (void)state;
    static const char alphabet[] = "{}[]\":, -+.0123456789eEabcdefghijklmnopqrstuvwxyz\\/\x01\xC3\xA9";
    const char *schemas[] = {PERSON, NULL};
    uint64_t rng = 88172645463325252ull;
    for (int sc = 0; sc < 2; sc++) {
        vt_json_schema *s = compile(schemas[sc]);
        for (int walk = 0; walk < 300; walk++) {
            vt_json_matcher *m = vt_json_matcher_new(s);
            char text[4096];
            size_t n = 0;
            while (!vt_json_matcher_complete(m) || (n < 60 && (rng >> 60) & 1)) {
                char ok[64];
                int n_ok = 0;
                for (const char *a = alphabet; *a; a++)
                    if (vt_json_matcher_accepts(m, a, 1)) ok[n_ok++] = *a;
                if (!n_ok) break; /* complete and nothing may follow */
                rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                /* past 2000 bytes, close what is open: the bytes that end values first */
                char c = ok[rng % (uint64_t)n_ok];
                if (n > 2000)
                    for (int i = 0; i < n_ok; i++)
                        if (strchr("}]\"0", ok[i])) c = ok[i];
                assert_int_equal(vt_json_matcher_feed(m, &c, 1), 0);
                text[n++] = c;
                if (n % 7 == 0) { /* the shortest ending completes the document from here */
                    char end[2048];
                    size_t el = vt_json_matcher_ending(m, end, sizeof end);
                    assert_true(el < sizeof end);
                    vt_json_matcher *m2 = vt_json_matcher_new(s);
                    assert_int_equal(vt_json_matcher_feed(m2, text, n), 0);
                    if (vt_json_matcher_feed(m2, end, el) || !vt_json_matcher_complete(m2))
                        fail_msg("schema %d: the ending '%s' does not complete '%.*s'", sc, end, (int)n, text);
                    vt_json_matcher_free(m2);
                }
                assert_true(n < sizeof text - 1);
            }
            text[n] = 0;
            if (!vt_json_matcher_complete(m)) fail_msg("schema %d walk %d: stuck after %s", sc, walk, text);
            if (sc == 0) check_person(text);
            else {
                cJSON *d = cJSON_Parse(text);
                if (!cJSON_IsObject(d)) fail_msg("not an object: %s", text);
                cJSON_Delete(d);
            }
            vt_json_matcher_free(m);
        }
        vt_json_schema_free(s);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_documents),
        cmocka_unit_test(test_refused_keywords),
        cmocka_unit_test(test_ending_bounds),
        cmocka_unit_test(test_random_walks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
