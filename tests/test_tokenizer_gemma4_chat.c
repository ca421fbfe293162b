/*
 * test_tokenizer_gemma4_chat.c - the gemma4 chat template (the fixture's
 * and the released one, rendered and tokenized) and random strings
 * through the Gemma 4 tokenizer (one program with
 * test_tokenizer_gemma4.c; see its header).
 */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"
#include "test_tokenizer_gemma4.h"

#include "error.h"
#include "tokenizer.h"
#include "vt/gguf.h"

/* ------------------------------------------------------------------------ */
/* chat template (§10.2)                                                     */
/* ------------------------------------------------------------------------ */

static char *render(const vt_chat_msg *m, size_t n, int gen, unsigned flags)
{
    char *out = NULL;
    vt_status st = vt_chat_render_ex("gemma4", m, n, gen, flags, &out);
    if (st != VT_OK) fail_msg("render: %s", vt_last_error());
    return out;
}

/*
 * Expected strings derived by hand from tokenizers/gemma4-tiny/chat_template.jinja:
 *   bos_token; per message '<|turn>' + role ('assistant' -> 'model') + '\n' +
 *   content + '<turn|>\n'; with add_generation_prompt '<|turn>model\n'.
 * The renderer leaves "<bos>" to the tokenizer unless VT_CHAT_BOS.
 */
void test_chat_fixture_template(void **state)
{
    (void)state;
    assert_string_equal(vt_chat_family_for_arch("gemma4"), "gemma4");
    static const struct {
        vt_chat_msg m[3];
        size_t n;
        int gen;
        const char *want;
    } cases[] = {
        {{{"user", "Hello"}}, 1, 1, "<bos><|turn>user\nHello<turn|>\n<|turn>model\n"},
        {{{"system", "You are terse."}, {"user", "Hi there"}},
         2,
         1,
         "<bos><|turn>system\nYou are terse.<turn|>\n<|turn>user\nHi there<turn|>\n<|turn>model\n"},
        {{{"user", "What is 2+2?"}, {"assistant", "4"}, {"user", "And 3+3?"}},
         3,
         1,
         "<bos><|turn>user\nWhat is 2+2?<turn|>\n<|turn>model\n4<turn|>\n<|turn>user\nAnd "
         "3+3?<turn|>\n<|turn>model\n"},
        {{{"user", "What is 2+2?"}, {"assistant", "4"}},
         2,
         0,
         "<bos><|turn>user\nWhat is 2+2?<turn|>\n<|turn>model\n4<turn|>\n"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        char *s = render(cases[k].m, cases[k].n, cases[k].gen, VT_CHAT_BOS);
        assert_string_equal(s, cases[k].want);
        free(s);
        s = render(cases[k].m, cases[k].n, cases[k].gen, 0);
        assert_string_equal(s, cases[k].want + 5); /* without "<bos>" */
        free(s);
    }
}

/* The released template's strings, §10.2. */
void test_chat_released_template(void **state)
{
    (void)state;
    const vt_chat_msg sua[3] = {{"system", "SYS"}, {"user", "USER"}, {"assistant", "ASSIST"}};
    char *s = render(sua, 3, 0, VT_CHAT_BOS | VT_CHAT_NO_THINKING);
    assert_string_equal(s, "<bos><|turn>system\nSYS<turn|>\n<|turn>user\nUSER<turn|>\n<|turn>model\nASSIST<turn|>\n");
    free(s);
    s = render(sua, 2, 1, VT_CHAT_BOS | VT_CHAT_EMPTY_THOUGHT);
    assert_string_equal(s, "<bos><|turn>system\nSYS<turn|>\n<|turn>user\nUSER<turn|>\n<|turn>model\n"
                           "<|channel>thought\n<channel|>");
    free(s);
    s = render(sua, 2, 1, VT_CHAT_BOS | VT_CHAT_THINKING | VT_CHAT_EMPTY_THOUGHT);
    assert_string_equal(s, "<bos><|turn>system\n<|think|>\nSYS<turn|>\n<|turn>user\nUSER<turn|>\n<|turn>model\n");
    free(s);
    s = render(sua + 1, 1, 1, VT_CHAT_BOS | VT_CHAT_THINKING);
    assert_string_equal(s, "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nUSER<turn|>\n<|turn>model\n");
    free(s);
    s = render(sua + 1, 1, 1, VT_CHAT_BOS | VT_CHAT_EMPTY_THOUGHT);
    assert_string_equal(s, "<bos><|turn>user\nUSER<turn|>\n<|turn>model\n<|channel>thought\n<channel|>");
    free(s);
    /* trimmed content; earlier reasoning (channel spans) dropped; developer = system */
    const vt_chat_msg m[4] = {{"developer", "  Be brief.\n"},
                              {"user", "\n Hi \t"},
                              {"assistant", "<|channel>thought\nhmm<channel|>  Hello!<|channel>x<channel|> \n"},
                              {"user", "Again"}};
    s = render(m, 4, 1, 0);
    assert_string_equal(s, "<|turn>system\nBe brief.<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\nHello!<turn|>\n"
                           "<|turn>user\nAgain<turn|>\n<|turn>model\n");
    free(s);
    /* no messages: just the generation prompt */
    s = render(NULL, 0, 1, 0);
    assert_string_equal(s, "<|turn>model\n");
    free(s);

    /* refused */
    char *out = (char *)"x";
    const vt_chat_msg tool[2] = {{"user", "q"}, {"tool", "r"}};
    assert_int_equal(vt_chat_render_ex("gemma4", tool, 2, 1, 0, &out), VT_ERR_INVALID_ARG);
    assert_null(out);
    assert_non_null(strstr(vt_last_error(), "tool"));
    assert_int_equal(vt_chat_render_ex("gemma4", sua, 2, 1, VT_CHAT_THINKING | VT_CHAT_NO_THINKING, &out),
                     VT_ERR_INVALID_ARG);
    const vt_chat_msg nullrole[1] = {{NULL, "q"}};
    assert_int_equal(vt_chat_render_ex("gemma4", nullrole, 1, 1, 0, &out), VT_ERR_INVALID_ARG);

    /* template hints: the empty thought channel in the generation-prompt branch */
    const char *big_tpl =
        "{%- for message in messages %}...{%- endfor %}"
        "{%- if add_generation_prompt -%}{{- '<|turn>model\\n' -}}"
        "{%- if not enable_thinking | default(false) -%}{{- '<|channel>thought\\n<channel|>' -}}"
        "{%- endif -%}{%- endif -%}";
    const char *small_tpl = "{%- if message.role == 'tool' %}{{- '<|channel>thought\\n' }}{%- endif %}"
                            "{%- if add_generation_prompt %}{{- '<|turn>model\\n' }}{%- endif %}"
                            "{# <channel|> #}";
    assert_int_equal(vt_chat_flags_for_template("gemma4", big_tpl), VT_CHAT_EMPTY_THOUGHT);
    assert_int_equal(vt_chat_flags_for_template("gemma4", small_tpl), 0);
    assert_int_equal(vt_chat_flags_for_template("qwen35", big_tpl), 0);
    assert_int_equal(vt_chat_flags_for_template("gemma4", NULL), 0);
}

/* The rendered prompt tokenizes to one BOS and single turn-marker ids (§10.2
 * BOS note, pitfall 9); both ways of handling "<bos>" give the same ids. The
 * first fixture rendering is case 38 of tokenizer-tests.json. */
void test_chat_tokenized(void **state)
{
    (void)state;
    vt_tokenizer *t = load_fixture_tokenizer();
    if (!t) return;
    const vt_chat_msg one[1] = {{"user", "Hello"}};
    char *with_bos = render(one, 1, 1, VT_CHAT_BOS);
    char *plain = render(one, 1, 1, 0);
    int32_t *a, *b;
    int64_t na, nb;
    assert_int_equal(vt_tokenize(t, with_bos, strlen(with_bos), 0, 1, &a, &na), VT_OK);
    assert_int_equal(vt_tokenize(t, plain, strlen(plain), 1, 1, &b, &nb), VT_OK);
    assert_ids(b, nb, a, na, "chat: add_special=1 on the plain prompt vs <bos> text");
    static const int32_t case38[] = {2, 5, 824, 390, 276, 317, 3037, 356, 6, 276, 5, 354, 1735, 276};
    assert_ids(a, na, case38, 14, "chat: tokenizer-tests.json case 38");
    free(a);
    free(b);
    free(with_bos);
    free(plain);

    const vt_chat_msg conv[3] = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}};
    char *s = render(conv, 3, 1, VT_CHAT_EMPTY_THOUGHT);
    assert_int_equal(vt_tokenize(t, s, strlen(s), 1, 1, &a, &na), VT_OK);
    int n_bos = 0, n_open = 0, n_close = 0, n_chan = 0;
    for (int64_t i = 0; i < na; i++) {
        n_bos += a[i] == 2;
        n_open += a[i] == 5;
        n_close += a[i] == 6;
        n_chan += a[i] == 8 || a[i] == 9;
    }
    assert_int_equal(a[0], 2);
    assert_int_equal(n_bos, 1);
    assert_int_equal(n_open, 4);
    assert_int_equal(n_close, 3);
    assert_int_equal(n_chan, 2);
    assert_int_equal(a[na - 1], 9); /* <channel|> */
    free(a);
    free(s);
    vt_tokenizer_free(t);
}

/* Seeded random strings over pieces that stress §3/§5 (bytes, U+2581,
 * newline runs, special-token texts, multi-byte characters). Invariants:
 * ids in range; add_special only adds BOS in front; streamed text equals the
 * concatenated pieces; valid UTF-8 without special-token text and without
 * U+2581 round-trips exactly. */
void test_random_strings(void **state)
{
    (void)state;
    vt_tokenizer *t = load_fixture_tokenizer();
    if (!t) return;
    static const char *const parts[] = {"a", "the", " ", "  ", "\n", "\n\n\n", "\r\n", "\t",
                                        "\xe2\x96\x81", "\xc3\xa9", "e\xcc\x81", "\xe6\x97\xa5",
                                        "\xf0\x9f\x9a\x80", "<turn|>", "<|turn>", "<|channel>",
                                        "<bos", "|>", "\xff", "\xc3", "\xe2\x96", "\x00", "12", "!?"};
    const size_t n_parts = sizeof parts / sizeof *parts;
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    char text[512];
    for (int iter = 0; iter < 3000; iter++) {
        size_t len = 0;
        int n_pieces = 1 + (int)((rng >> 33) % 24);
        for (int k = 0; k < n_pieces; k++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            const char *p = parts[(rng >> 33) % n_parts];
            size_t pl = p[0] ? strlen(p) : 1; /* "\x00" is one NUL byte */
            memcpy(text + len, p, pl);
            len += pl;
        }
        for (int parse = 0; parse < 2; parse++) {
            int32_t *ids, *ids_sp;
            int64_t n, n_sp;
            assert_int_equal(vt_tokenize(t, text, len, 0, parse, &ids, &n), VT_OK);
            assert_int_equal(vt_tokenize(t, text, len, 1, parse, &ids_sp, &n_sp), VT_OK);
            assert_int_equal(n_sp, n + 1);
            assert_int_equal(ids_sp[0], 2);
            if (n) assert_memory_equal(ids_sp + 1, ids, (size_t)n * sizeof *ids);
            for (int64_t i = 0; i < n; i++) assert_true(ids[i] >= 0 && ids[i] < 4096);
            for (int special = 0; special < 2; special++) {
                size_t pl, sl;
                char *plain = detok(t, ids, n, special, &pl);
                char *streamed = stream_decode(t, ids, n, special, &sl, NULL);
                assert_int_equal(pl, sl);
                assert_memory_equal(plain, streamed, pl);
                int plain_text = is_valid_utf8(text, len) && !memmem(text, len, "<", 1) &&
                                 !memmem(text, len, "\xe2\x96\x81", 3);
                if (plain_text && (pl != len || memcmp(plain, text, len)))
                    fail_msg("iteration %d: round trip differs", iter);
                free(plain);
                free(streamed);
            }
            free(ids);
            free(ids_sp);
        }
    }
    vt_tokenizer_free(t);
}
