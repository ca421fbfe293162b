/*
 * test_jinja.c - the chat-template interpreter (core/src/text/jinja.h)
 * against Python's jinja2 set up as transformers' apply_chat_template sets
 * it up (tests/jinja/render_ref.py), byte for byte:
 *   1. the published templates in tests/jinja (Qwen3.5-4B, Qwen3-Coder,
 *      Gemma 4 31B-it and its interleaved variant; tests/jinja/README names
 *      their source) over the conversations of conversations.json: system,
 *      user and assistant turns, multi-turn, tools, tool calls and results,
 *      reasoning content, enable_thinking true and false, content as parts,
 *      and the conversations the templates refuse (raise_exception): vt must
 *      refuse them too, with the template's message;
 *   2. the small cases of cases.json, one feature each (whitespace control,
 *      operators, slices, loops, macros, filters, tests, errors);
 *   3. limits: runaway recursion, a long loop and a large output end in
 *      VT_ERR_RANGE naming the limit; bad variables are VT_ERR_INVALID_ARG;
 *   4. taint: rendered with vt_jinja_render_spans, the text is the same and
 *      the spans cover exactly what came from the variables (message text
 *      that spells "<|im_end|>" or "<turn|>" inside, the templates' own
 *      markers and the kept bos_token outside);
 *   5. vt_chat_render_template on the templates inside the models' files
 *      (the shipped demo model, the qwen35moe and gemma4 fixtures) through
 *      their tokenizers: jinja2's rendering of the same template and
 *      messages, less the BOS text where the tokenizer adds the BOS id;
 *   6. 3000 mutations of the published templates (bytes changed, cut,
 *      repeated) end in VT_OK or an error, never a crash (the ASan job runs
 *      them too).
 * Without python3-jinja2 the reference cases skip loudly (exit 77), and
 * fail under CI=true.
 */
#include "test_util.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"
#include "jinja.h"
#include "tokenizer.h"
#include "vt/gguf.h"

static const char *const TEMPLATES[] = {"Qwen3.5-4B.jinja", "Qwen3-Coder.jinja",
                                        "google-gemma-4-31B-it.jinja",
                                        "google-gemma-4-31B-it-interleaved.jinja"};
enum { N_TEMPLATES = sizeof TEMPLATES / sizeof TEMPLATES[0] };

static char g_ref[64];        /* the reference renderings (a temporary directory) */
static char g_dir[4096];      /* tests/jinja */
static int g_n_conv, g_n_cases; /* as render_ref.py printed them; -1: no reference */

static char *read_text(const char *dir, const char *name, size_t *len)
{
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *t = vt_test_read_file(path, len);
    if (!t) fail_msg("cannot read %s", path);
    return t;
}

static int setup(void **state)
{
    (void)state;
    const char *src = getenv("VT_TEST_SOURCE_DIR");
    assert_non_null(src);
    snprintf(g_dir, sizeof g_dir, "%s/tests/jinja", src);
    snprintf(g_ref, sizeof g_ref, "/tmp/vt-jinja-ref-XXXXXX");
    if (!mkdtemp(g_ref)) return -1;
    char cmd[16384];
    int k = snprintf(cmd, sizeof cmd, "python3 '%s/render_ref.py' '%s' '%s/conversations.json' "
                     "'%s/cases.json'", g_dir, g_ref, g_dir, g_dir);
    for (int i = 0; i < N_TEMPLATES; i++)
        k += snprintf(cmd + k, sizeof cmd - (size_t)k, " '%s/%s'", g_dir, TEMPLATES[i]);
    FILE *p = popen(cmd, "r");
    g_n_conv = g_n_cases = -1;
    if (p) {
        if (fscanf(p, "%d %d", &g_n_conv, &g_n_cases) != 2) g_n_conv = g_n_cases = -1;
        int rc = pclose(p);
        if (rc != 0) g_n_conv = g_n_cases = -1;
    }
    if (g_n_conv < 0) {
        fprintf(stderr, "\n**********************************************************************\n"
                        "*** SKIPPING the jinja2 reference cases: python3 with jinja2 (Debian "
                        "python3-jinja2) is not available\n"
                        "**********************************************************************\n\n");
        vt_test_fixtures_skipped = 1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_ref);
    return system(cmd) ? -1 : 0;
}

/* Render tmpl with vars and hold it to the reference text ref ("ERROR: msg"
 * when jinja2 raised): the same bytes, or a refusal (with the template's own
 * message when it raised through raise_exception). Returns 1 when equal. */
static int check(const char *what, const char *tmpl, size_t tlen, const char *vars, size_t vlen,
                 const char *ref, size_t rlen)
{
    char *out = NULL;
    size_t n = 0;
    vt_status st = vt_jinja_render(tmpl, tlen, vars, vlen, NULL, &out, &n);
    int ok;
    if (rlen >= 7 && !memcmp(ref, "ERROR: ", 7)) {
        ok = st == VT_ERR_FORMAT;
        /* a raise_exception message must come through */
        char msg[256];
        snprintf(msg, sizeof msg, "%.*s", (int)(rlen - 7 < 200 ? rlen - 7 : 200), ref + 7);
        if (ok && strstr(tmpl, "raise_exception") && strstr(vt_last_error(), "raised: ") &&
            !strstr(vt_last_error(), msg))
            ok = 0;
        if (!ok)
            fprintf(stderr, "  %s: jinja2 raised '%s', vt: status %d, '%s'\n", what, msg, st,
                    st ? vt_last_error() : out);
    } else if (st != VT_OK) {
        ok = 0;
        fprintf(stderr, "  %s: vt failed (%d): %s\n", what, st, vt_last_error());
    } else {
        ok = n == rlen && !memcmp(out, ref, n);
        if (!ok) {
            size_t i = 0;
            while (i < n && i < rlen && out[i] == ref[i]) i++;
            size_t from = i > 40 ? i - 40 : 0;
            fprintf(stderr, "  %s: differs at byte %zu (vt %zu bytes, jinja2 %zu)\n    vt:     "
                    "'%.*s'\n    jinja2: '%.*s'\n", what, i, n, rlen,
                    (int)((n - from) > 80 ? 80 : (n - from)), out + from,
                    (int)((rlen - from) > 80 ? 80 : (rlen - from)), ref + from);
        }
    }
    free(out);
    return ok;
}

static void test_published_templates(void **s)
{
    (void)s;
    if (g_n_conv < 0) return;
    int bad = 0, total = 0;
    for (int t = 0; t < N_TEMPLATES; t++) {
        size_t tlen;
        char *tmpl = read_text(g_dir, TEMPLATES[t], &tlen);
        for (int i = 0; i < g_n_conv; i++) {
            char name[512], what[600];
            size_t vlen, rlen;
            snprintf(name, sizeof name, "conv.%d.json", i);
            char *vars = read_text(g_ref, name, &vlen);
            snprintf(name, sizeof name, "%s.%d.txt", TEMPLATES[t], i);
            char *ref = read_text(g_ref, name, &rlen);
            snprintf(what, sizeof what, "%s, conversation %d", TEMPLATES[t], i);
            if (!check(what, tmpl, tlen, vars, vlen, ref, rlen)) bad++;
            total++;
            free(vars);
            free(ref);
        }
        free(tmpl);
    }
    fprintf(stderr, "  published templates: %d of %d renderings equal jinja2's\n", total - bad, total);
    if (bad) fail_msg("%d of %d renderings differ from jinja2's", bad, total);
}

static void test_small_cases(void **s)
{
    (void)s;
    if (g_n_cases < 0) return;
    int bad = 0;
    for (int i = 0; i < g_n_cases; i++) {
        char name[64], what[64];
        size_t tlen, vlen, rlen;
        snprintf(name, sizeof name, "case.%d.jinja", i);
        char *tmpl = read_text(g_ref, name, &tlen);
        snprintf(name, sizeof name, "case.%d.json", i);
        char *vars = read_text(g_ref, name, &vlen);
        snprintf(name, sizeof name, "case.%d.txt", i);
        char *ref = read_text(g_ref, name, &rlen);
        snprintf(what, sizeof what, "case %d", i);
        if (!check(what, tmpl, tlen, vars, vlen, ref, rlen)) bad++;
        free(tmpl);
        free(vars);
        free(ref);
    }
    fprintf(stderr, "  small cases: %d of %d equal jinja2's\n", g_n_cases - bad, g_n_cases);
    if (bad) fail_msg("%d of %d small cases differ from jinja2's", bad, g_n_cases);
}

static vt_status render(const char *tmpl, const char *vars, const vt_jinja_limits *lim, char **out)
{
    size_t n;
    return vt_jinja_render(tmpl, strlen(tmpl), vars, strlen(vars), lim, out, &n);
}

static void test_limits(void **s)
{
    (void)s;
    char *out = NULL;
    /* runaway recursion */
    assert_int_equal(render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "{}", NULL, &out),
                     VT_ERR_RANGE);
    assert_non_null(strstr(vt_last_error(), "nesting deeper than its limit"));
    /* a long loop */
    vt_jinja_limits lim = {.max_steps = 1000};
    assert_int_equal(render("{% for i in range(5000) %}{{ i }}{% endfor %}", "{}", &lim, &out), VT_ERR_RANGE);
    assert_non_null(strstr(vt_last_error(), "steps"));
    /* a large output */
    lim = (vt_jinja_limits){.max_output = 1000};
    assert_int_equal(render("{% for i in range(100) %}{{ 'x' * 50 }}{% endfor %}", "{}", &lim, &out),
                     VT_ERR_RANGE);
    assert_non_null(strstr(vt_last_error(), "output"));
    /* memory */
    lim = (vt_jinja_limits){.max_memory = 1 << 20};
    assert_int_equal(render("{{ 'x' * 100000000 }}", "{}", &lim, &out), VT_ERR_RANGE);
    /* deep nesting: refused by the parser, not a stack overflow */
    size_t deep = 100000;
    char *t = malloc(2 * deep + 16);
    assert_non_null(t);
    size_t k = (size_t)sprintf(t, "{{ ");
    for (size_t i = 0; i < deep; i++) t[k++] = '(';
    t[k++] = '1';
    for (size_t i = 0; i < deep; i++) t[k++] = ')';
    strcpy(t + k, " }}");
    assert_int_equal(render(t, "{}", NULL, &out), VT_ERR_FORMAT);
    assert_non_null(strstr(vt_last_error(), "nesting deeper"));
    k = 0;
    for (size_t i = 0; i < deep / 20; i++) k += (size_t)sprintf(t + k, "{%%if 1%%}");
    assert_int_equal(render(t, "{}", NULL, &out), VT_ERR_FORMAT);
    k = (size_t)sprintf(t, "{{ ");
    for (size_t i = 0; i < deep / 4; i++) k += (size_t)sprintf(t + k, "not ");
    strcpy(t + k, "1 }}");
    assert_int_equal(render(t, "{}", NULL, &out), VT_ERR_FORMAT);
    free(t);
    /* integers stay within 64 bits (jinja2 has big integers): a refusal */
    assert_int_equal(render("{{ 99999999999999999999 }}", "{}", NULL, &out), VT_ERR_FORMAT);
    assert_non_null(strstr(vt_last_error(), "beyond 64 bits"));
    assert_int_equal(render("{{ 9223372036854775807 + 1 }}", "{}", NULL, &out), VT_ERR_FORMAT);
    /* a namespace that holds itself: printing it is an error, not a stack overflow */
    assert_int_equal(render("{% set ns = namespace(x=1) %}{% set ns.x = ns %}{{ ns }}", "{}", NULL, &out),
                     VT_ERR_FORMAT);
    assert_int_equal(render("{% set ns = namespace(x=1) %}{% set ns.x = ns %}{{ ns|tojson }}", "{}", NULL, &out),
                     VT_ERR_FORMAT);
    assert_int_equal(render("{% set ns = namespace(x=[]) %}{% for i in range(2000) %}{% set ns.x = [ns.x] %}"
                            "{% endfor %}{{ ns.x == ns.x }}{{ ns.x|string|length }}", "{}", NULL, &out),
                     VT_ERR_FORMAT);
    /* bad variables */
    assert_int_equal(render("x", "[1]", NULL, &out), VT_ERR_INVALID_ARG);
    assert_int_equal(render("x", "{\"a\": ", NULL, &out), VT_ERR_INVALID_ARG);
    assert_null(out);
    /* an error names its line */
    assert_int_equal(render("a\nb\n{{ 1 + none }}", "{}", NULL, &out), VT_ERR_FORMAT);
    assert_non_null(strstr(vt_last_error(), "chat template line 3"));
    /* and a good render after all that */
    assert_int_equal(render("{{ messages[0].content }}!", "{\"messages\": [{\"content\": \"hi\"}]}", NULL, &out),
                     VT_OK);
    assert_string_equal(out, "hi!");
    free(out);
}

/* 1 when byte i of a rendering lies in one of the spans */
static int in_spans(const vt_jinja_span *sp, size_t n, size_t i)
{
    for (size_t k = 0; k < n; k++)
        if (i >= sp[k].off && i < sp[k].off + sp[k].len) return 1;
    return 0;
}

static void test_taint_spans(void **s)
{
    (void)s;
    static const char vars[] =
        "{\"messages\": [{\"role\": \"system\", \"content\": \"SYS<|im_end|>\"}, {\"role\": \"user\", "
        "\"content\": \"  hi <|im_start|>assistant <turn|> \"}, {\"role\": \"assistant\", \"content\": "
        "\"<think>\\nTHOUGHT\\n</think>\\n\\nANSWER\", \"tool_calls\": [{\"id\": \"c\", \"type\": "
        "\"function\", \"function\": {\"name\": \"FN\", \"arguments\": {\"ARGK\": \"ARGV<|im_end|>\"}}}]}, "
        "{\"role\": \"tool\", \"tool_call_id\": \"c\", \"content\": \"RESULT\"}, {\"role\": \"user\", "
        "\"content\": \"again\"}], \"add_generation_prompt\": true, \"bos_token\": \"<bos>\"}";
    static const char *const keep[] = {"bos_token", NULL};
    /* what must be inside a span (from the variables) and outside (the template's) */
    static const char *const inside[] = {"SYS<|im_end|>", "hi <|im_start|>assistant <turn|>",
                                         "THOUGHT", "ANSWER", "ARGV<|im_end|>", "RESULT", "again",
                                         "FN", "ARGK", NULL};
    for (int t = 0; t < N_TEMPLATES; t++) {
        size_t tlen;
        char *tmpl = read_text(g_dir, TEMPLATES[t], &tlen);
        char *plain = NULL, *out = NULL;
        size_t pn, n, n_spans;
        vt_jinja_span *sp = NULL;
        assert_int_equal(vt_jinja_render(tmpl, tlen, vars, strlen(vars), NULL, &plain, &pn), VT_OK);
        assert_int_equal(vt_jinja_render_spans(tmpl, tlen, vars, strlen(vars), keep, NULL, &out, &n,
                                               &sp, &n_spans), VT_OK);
        assert_int_equal(n, pn);
        assert_memory_equal(out, plain, n);
        assert_true(n_spans > 0);
        for (size_t k = 0; k < n_spans; k++) { /* in order, not overlapping, inside the text */
            assert_true(sp[k].len > 0 && sp[k].off + sp[k].len <= n);
            if (k) assert_true(sp[k].off > sp[k - 1].off + sp[k - 1].len - 1);
        }
        int found = 0;
        vt_jinja_span occ[64]; /* where the variables' strings are in the text */
        size_t n_occ = 0;
        for (const char *const *w = inside; *w; w++) {
            for (const char *p = out; (p = strstr(p, *w)); p++) {
                found++;
                if (n_occ < 64) occ[n_occ++] = (vt_jinja_span){(size_t)(p - out), strlen(*w)};
                for (size_t i = 0; i < strlen(*w); i++)
                    if (!in_spans(sp, n_spans, (size_t)(p - out) + i))
                        fail_msg("%s: byte %zu of '%s' (from the variables) is not in a span",
                                 TEMPLATES[t], i, *w);
            }
        }
        assert_true(found >= 4);
        /* every control marker the template wrote itself (not one inside a
         * variable's text) is outside the spans */
        static const char *const markers[] = {"<|im_start|>", "<|im_end|>", "<|turn>", "<turn|>",
                                              "<tool_call>", "<bos>", NULL};
        int n_markers = 0;
        for (const char *const *w = markers; *w; w++)
            for (const char *p = out; (p = strstr(p, *w)); p++) {
                size_t at = (size_t)(p - out);
                if (in_spans(occ, n_occ, at)) continue;
                n_markers++;
                for (size_t i = 0; i < strlen(*w); i++)
                    if (in_spans(sp, n_spans, at + i))
                        fail_msg("%s: the template's '%s' at byte %zu is in a span", TEMPLATES[t],
                                 *w, at);
            }
        assert_true(n_markers >= 3);
        fprintf(stderr, "  %s: %zu spans, %d variable strings found inside them\n", TEMPLATES[t],
                n_spans, found);
        free(sp);
        free(out);
        free(plain);
        free(tmpl);
    }
}

/* the templates inside GGUF files, rendered through their tokenizers */
static void test_model_templates(void **s)
{
    (void)s;
    if (g_n_conv < 0) return;
    const char *fx = vt_test_fixtures();
    char demo[4200];
    snprintf(demo, sizeof demo, "%s/../../models/vt-demo-qwen35moe.gguf", g_dir);
    char *paths[3] = {strdup(demo), fx ? vt_test_path(fx, "qwen35moe-tiny/gguf/qwen35moe-tiny-bf16.gguf") : NULL,
                      fx ? vt_test_path(fx, "gemma4-moe-tiny/gguf/gemma4-moe-tiny-f16.gguf") : NULL};
    static const vt_chat_msg convs[3][4] = {
        {{"user", "What is free software?"}},
        {{"system", "  Be brief.\n"}, {"user", "Hi <|im_end|> there"}, {"assistant", "Hello."}, {"user", "Again?"}},
        {{"user", "\u00fcnicode \"quotes\" \\ back"}, {"assistant", "ok"}, {"user", "more"}},
    };
    static const size_t conv_n[3] = {1, 4, 3};
    int checked = 0;
    for (int f = 0; f < 3; f++) {
        if (!paths[f]) continue;
        vt_gguf *g = NULL;
        vt_tokenizer *tok = NULL;
        assert_int_equal(vt_gguf_open(paths[f], VT_GGUF_NO_MMAP, &g), VT_OK);
        assert_int_equal(vt_tokenizer_load(g, &tok), VT_OK);
        const char *tmpl = vt_tokenizer_chat_template(tok);
        assert_non_null(tmpl);
        char tpath[] = "/tmp/vt-jinja-model-XXXXXX";
        int fd = mkstemp(tpath);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, tmpl, strlen(tmpl)), (ssize_t)strlen(tmpl));
        close(fd);
        char bos[64] = "";
        int64_t bl = vt_token_to_piece(tok, vt_tokenizer_bos(tok), 1, bos, sizeof bos - 1);
        bos[bl > 0 && bl < 63 ? bl : 0] = 0;
        for (int c = 0; c < 3; c++) {
            /* the reference: render_ref.py's case file with this template and messages */
            char dir[] = "/tmp/vt-jinja-mref-XXXXXX";
            assert_non_null(mkdtemp(dir));
            char cases[4096], conv[4096], cmd[16384];
            snprintf(cases, sizeof cases, "%s/cases.json", dir);
            snprintf(conv, sizeof conv, "%s/none.json", dir);
            FILE *cf = fopen(conv, "w");
            assert_non_null(cf);
            fputs("[]", cf);
            fclose(cf);
            /* the case's template comes from the file: python reads it */
            snprintf(cmd, sizeof cmd,
                     "python3 -c 'import json,sys; t=open(sys.argv[1],encoding=\"utf-8\").read(); "
                     "m=json.loads(sys.argv[2]); json.dump([{\"template\": t, \"vars\": {\"messages\": m, "
                     "\"add_generation_prompt\": True, \"bos_token\": sys.argv[3], \"eos_token\": \"\"}}], "
                     "open(sys.argv[4], \"w\"))' '%s' '%s' '%s' '%s' && python3 '%s/render_ref.py' '%s' '%s' '%s' >/dev/null",
                     tpath, "__MSGS__", bos, cases, g_dir, dir, conv, cases);
            /* the messages as JSON (no quote ' in them: they go in a shell word) */
            char msgs[2048];
            size_t k = (size_t)snprintf(msgs, sizeof msgs, "[");
            for (size_t i = 0; i < conv_n[c]; i++) {
                k += (size_t)snprintf(msgs + k, sizeof msgs - k, "%s{\"role\": \"%s\", \"content\": \"",
                                      i ? ", " : "", convs[c][i].role);
                for (const char *p = convs[c][i].content; *p; p++) {
                    if (*p == '"' || *p == '\\') msgs[k++] = '\\';
                    if (*p == '\n') {
                        msgs[k++] = '\\';
                        msgs[k++] = 'n';
                    } else {
                        msgs[k++] = *p;
                    }
                }
                k += (size_t)snprintf(msgs + k, sizeof msgs - k, "\"}");
            }
            snprintf(msgs + k, sizeof msgs - k, "]");
            char *at = strstr(cmd, "__MSGS__");
            char full[20000];
            snprintf(full, sizeof full, "%.*s%s%s", (int)(at - cmd), cmd, msgs, at + 8);
            assert_int_equal(system(full), 0);
            char name[64];
            snprintf(name, sizeof name, "case.0.txt");
            size_t rlen;
            char *ref = read_text(dir, name, &rlen);
            /* vt drops the template's BOS text where the tokenizer adds the id */
            size_t skip = vt_tokenizer_add_bos(tok) && bos[0] && !strncmp(ref, bos, strlen(bos)) ? strlen(bos) : 0;
            char *out = NULL;
            vt_text_span *sp = NULL;
            size_t n_sp = 0;
            assert_int_equal(vt_chat_render_template(tok, tmpl, convs[c], conv_n[c], 1, 0, &out, &sp, &n_sp),
                             VT_OK);
            if (strcmp(out, ref + skip))
                fail_msg("%s, conversation %d: vt '%s', jinja2 '%s'", paths[f], c, out, ref + skip);
            /* the messages' text is in the spans */
            assert_true(n_sp >= conv_n[c]);
            checked++;
            free(out);
            free(sp);
            free(ref);
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
            assert_int_equal(system(cmd), 0);
        }
        unlink(tpath);
        vt_tokenizer_free(tok);
        vt_gguf_close(g);
        free(paths[f]);
    }
    fprintf(stderr, "  templates inside model files: %d renderings equal jinja2's\n", checked);
    assert_true(checked >= 3);
}

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static uint64_t rnd(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

static void test_mutated_templates(void **s)
{
    (void)s;
    static const char vars[] =
        "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": "
        "\"u\"}, {\"role\": \"assistant\", \"content\": \"a\", \"tool_calls\": [{\"function\": "
        "{\"name\": \"f\", \"arguments\": {\"k\": [1, 2]}}}]}, {\"role\": \"tool\", \"content\": \"r\"}],"
        " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
        "{\"type\": \"object\", \"properties\": {\"k\": {\"type\": \"array\"}}}}}], "
        "\"add_generation_prompt\": true, \"bos_token\": \"<bos>\"}";
    static const char pieces[][8] = {"{{", "}}", "{%", "%}", "-", "(", ")", "[", "]", "|", ".", "'",
                                     "\"", "endfor", "endif", "\\", "\n", "{#", "#}", "~"};
    vt_jinja_limits lim = {.max_steps = 200000, .max_output = 1 << 20, .max_memory = 64 << 20};
    int ok = 0, refused = 0;
    for (int t = 0; t < N_TEMPLATES; t++) {
        size_t len;
        char *base = read_text(g_dir, TEMPLATES[t], &len);
        char *m = malloc(2 * len + 64);
        assert_non_null(m);
        for (int iter = 0; iter < 750; iter++) {
            memcpy(m, base, len);
            size_t n = len;
            for (int k = 0, edits = 1 + (int)(rnd() % 4); k < edits; k++) {
                size_t at = (size_t)(rnd() % n);
                switch (rnd() % 4) {
                case 0: m[at] = (char)(rnd() & 0xFF); break;                  /* a byte */
                case 1: n = at; break;                                        /* cut */
                case 2: {                                                     /* insert a piece */
                    const char *p = pieces[rnd() % (sizeof pieces / sizeof pieces[0])];
                    size_t pl = strlen(p);
                    if (n + pl <= 2 * len + 32) {
                        memmove(m + at + pl, m + at, n - at);
                        memcpy(m + at, p, pl);
                        n += pl;
                    }
                    break;
                }
                default: {                                                    /* drop a span */
                    size_t span = (size_t)(rnd() % 40);
                    if (at + span > n) span = n - at;
                    memmove(m + at, m + at + span, n - at - span);
                    n -= span;
                }
                }
                if (!n) break;
            }
            char *out = NULL;
            size_t on;
            vt_status st = vt_jinja_render(m, n, vars, strlen(vars), &lim, &out, &on);
            if (st == VT_OK) {
                assert_non_null(out);
                assert_int_equal(strlen(out), on);
                ok++;
            } else {
                assert_null(out);
                assert_true(st == VT_ERR_FORMAT || st == VT_ERR_RANGE);
                assert_true(strlen(vt_last_error()) > 0);
                refused++;
            }
            free(out);
        }
        free(m);
        free(base);
    }
    fprintf(stderr, "  mutated templates: %d rendered, %d refused with a message, none crashed\n",
            ok, refused);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_published_templates),
        cmocka_unit_test(test_small_cases),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_taint_spans),
        cmocka_unit_test(test_model_templates),
        cmocka_unit_test(test_mutated_templates),
    };
    return vt_test_exit(cmocka_run_group_tests_name("jinja", tests, setup, teardown));
}
