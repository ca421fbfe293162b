/*
 * chat_template.c - the families' chat templates as hard-coded renderers
 * (tokenizers.md §10). The GGUF's tokenizer.chat_template (Jinja) is not
 * interpreted; each family's released template is reproduced literally.
 *
 * qwen35 (§10.1, models/templates/Qwen3.5-4B.jinja without tools): system only
 * as the first message, user turns, assistant turns (reasoning dropped before
 * the last user query, an explicit <think> block after it), tool results as
 * <tool_response> blocks inside a user turn, and the generation prompt with
 * thinking on (or an empty, closed think block with VT_CHAT_NO_THINKING).
 */
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "tokenizer.h"
#include "tokenizer_unicode.h"

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
    size_t oom_bytes; /* the size whose allocation failed */
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            b->oom_bytes = cap;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

/* A view of a string: [p, p+n). */
typedef struct span {
    const char *p;
    size_t n;
} span;

/* Jinja `trim` (Python str.strip()): leading and trailing whitespace off. */
static span trim(span s)
{
    const unsigned char *u = (const unsigned char *)s.p;
    uint32_t cp;
    while (s.n) {
        int l = vt_utf8_next(u, s.n, &cp);
        if (!l || !vt_cp_is_strip_space(cp)) break;
        u += l;
        s.p += l;
        s.n -= (size_t)l;
    }
    while (s.n) {
        size_t k = 1; /* start of the last character */
        while (k < 4 && k < s.n && (u[s.n - k] & 0xC0) == 0x80) k++;
        int l = vt_utf8_next(u + s.n - k, k, &cp);
        if (l != (int)k || !vt_cp_is_strip_space(cp)) break;
        s.n -= k;
    }
    return s;
}

static span span_of(const char *s) { return (span){s ? s : "", s ? strlen(s) : 0}; }

static const char *span_find(span s, const char *needle)
{
    return memmem(s.p, s.n, needle, strlen(needle));
}

/* Last occurrence of needle in s, NULL if none. */
static const char *span_find_last(span s, const char *needle)
{
    const char *last = NULL;
    size_t nl = strlen(needle);
    span rest = s;
    const char *m;
    while ((m = memmem(rest.p, rest.n, needle, nl))) {
        last = m;
        rest.n -= (size_t)(m + 1 - rest.p);
        rest.p = m + 1;
    }
    return last;
}

static int span_starts(span s, const char *pre)
{
    size_t n = strlen(pre);
    return s.n >= n && !memcmp(s.p, pre, n);
}

static int span_ends(span s, const char *suf)
{
    size_t n = strlen(suf);
    return s.n >= n && !memcmp(s.p + s.n - n, suf, n);
}

/* Assistant content -> (reasoning, answer) as the template splits it at </think>. */
static void split_reasoning(span content, span *reasoning, span *answer)
{
    *reasoning = (span){"", 0};
    *answer = content;
    const char *first_end = span_find(content, "</think>");
    if (!first_end) return;
    /* content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
    span r = {content.p, (size_t)(first_end - content.p)};
    while (r.n && r.p[r.n - 1] == '\n') r.n--;
    const char *open = span_find_last(r, "<think>");
    if (open) {
        r.n -= (size_t)(open + 7 - r.p);
        r.p = open + 7;
    }
    while (r.n && r.p[0] == '\n') r.p++, r.n--;
    *reasoning = trim(r);
    /* content.split('</think>')[-1].lstrip('\n') */
    const char *last_end = span_find_last(content, "</think>");
    span a = {last_end + 8, content.n - (size_t)(last_end + 8 - content.p)};
    while (a.n && a.p[0] == '\n') a.p++, a.n--;
    *answer = a;
}

static vt_status render_qwen35(const vt_chat_msg *m, size_t n, int add_gen, unsigned flags, sbuf *b)
{
    if (n == 0) {
        vt_set_error("chat template qwen35: no messages provided");
        return VT_ERR_INVALID_ARG;
    }
    for (size_t i = 0; i < n; i++) {
        const char *r = m[i].role ? m[i].role : "(null)";
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool")) {
            vt_set_error("chat template qwen35: message %zu has unexpected role '%s' (system, user, "
                         "assistant, tool)",
                         i, r);
            return VT_ERR_INVALID_ARG;
        }
        if (i > 0 && !strcmp(r, "system")) {
            vt_set_error("chat template qwen35: system message must be at the beginning (message %zu)",
                         i);
            return VT_ERR_INVALID_ARG;
        }
    }
    /* the last user message that is not a bare tool response */
    size_t last_query = n;
    for (size_t i = n; i-- > 0;) {
        if (strcmp(m[i].role, "user")) continue;
        span c = trim(span_of(m[i].content));
        if (!(span_starts(c, "<tool_response>") && span_ends(c, "</tool_response>"))) {
            last_query = i;
            break;
        }
    }
    if (last_query == n) {
        vt_set_error("chat template qwen35: no user query found in messages");
        return VT_ERR_INVALID_ARG;
    }

    for (size_t i = 0; i < n; i++) {
        const char *role = m[i].role;
        span c = trim(span_of(m[i].content));
        if (!strcmp(role, "system")) {
            sb_str(b, "<|im_start|>system\n");
            sb_add(b, c.p, c.n);
            sb_str(b, "<|im_end|>\n");
        } else if (!strcmp(role, "user")) {
            sb_str(b, "<|im_start|>user\n");
            sb_add(b, c.p, c.n);
            sb_str(b, "<|im_end|>\n");
        } else if (!strcmp(role, "assistant")) {
            span reasoning, answer;
            split_reasoning(c, &reasoning, &answer);
            sb_str(b, "<|im_start|>assistant\n");
            if (i > last_query) {
                sb_str(b, "<think>\n");
                sb_add(b, reasoning.p, reasoning.n);
                sb_str(b, "\n</think>\n\n");
            }
            sb_add(b, answer.p, answer.n);
            sb_str(b, "<|im_end|>\n");
        } else { /* tool: consecutive results share one user turn */
            if (i > 0 && strcmp(m[i - 1].role, "tool")) sb_str(b, "<|im_start|>user");
            sb_str(b, "\n<tool_response>\n");
            sb_add(b, c.p, c.n);
            sb_str(b, "\n</tool_response>");
            if (i + 1 == n || strcmp(m[i + 1].role, "tool")) sb_str(b, "<|im_end|>\n");
        }
    }
    if (add_gen) {
        sb_str(b, "<|im_start|>assistant\n");
        sb_str(b, (flags & VT_CHAT_NO_THINKING) ? "<think>\n\n</think>\n\n" : "<think>\n");
    }
    return VT_OK;
}

vt_status vt_chat_render_ex(const char *family, const vt_chat_msg *msgs, size_t n_msgs,
                            int add_generation_prompt, unsigned flags, char **out)
{
    if (!family || !out || (!msgs && n_msgs)) {
        vt_set_error("vt_chat_render: NULL argument");
        return VT_ERR_INVALID_ARG;
    }
    *out = NULL;
    sbuf b = {0};
    vt_status st;
    if (!strcmp(family, "qwen35")) {
        st = render_qwen35(msgs, n_msgs, add_generation_prompt, flags, &b);
    } else {
        vt_set_error("chat template: family '%s' is not supported (supported: qwen35)", family);
        return VT_ERR_UNSUPPORTED;
    }
    if (st == VT_OK && b.oom) {
        vt_set_error_oom(b.oom_bytes, "chat template: rendered prompt");
        st = VT_ERR_OUT_OF_MEMORY;
    }
    if (st == VT_OK && !b.p) {
        b.p = vt_calloc_named(1, 1, "chat template: empty prompt");
        if (!b.p) st = VT_ERR_OUT_OF_MEMORY;
    }
    if (st != VT_OK) {
        free(b.p);
        return st;
    }
    *out = b.p;
    return VT_OK;
}

vt_status vt_chat_render(const char *family, const vt_chat_msg *msgs, size_t n_msgs,
                         int add_generation_prompt, char **out)
{
    return vt_chat_render_ex(family, msgs, n_msgs, add_generation_prompt, 0, out);
}

const char *vt_chat_family_for_arch(const char *arch)
{
    if (!arch) return NULL;
    if (!strcmp(arch, "qwen35moe") || !strcmp(arch, "qwen35")) return "qwen35";
    return NULL;
}
