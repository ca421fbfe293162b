/*
 * chat_template.c - chats rendered as prompts: the families' chat templates
 * as hard-coded renderers (tokenizers.md §10), each family's released
 * template reproduced literally (the default), and any Jinja template (the
 * GGUF's tokenizer.chat_template, or a file's: vt run/serve --jinja)
 * through the interpreter of jinja.h (vt_chat_render_template).
 *
 * qwen35 (§10.1, models/templates/Qwen3.5-4B.jinja without tools): system only
 * as the first message, user turns, assistant turns (reasoning dropped before
 * the last user query, an explicit <think> block after it), tool results as
 * <tool_response> blocks inside a user turn, and the generation prompt with
 * thinking on (or an empty, closed think block with VT_CHAT_NO_THINKING).
 *
 * gemma4 (§10.2, models/templates/google-gemma-4-31B-it.jinja without tools):
 * "<bos>" (only with VT_CHAT_BOS: the tokenizer adds the id), a system turn
 * when the first message is system/developer or thinking is on ("<|think|>\n"
 * first), user turns, assistant turns under the role name "model" with every
 * <|channel>...<channel|> span removed, and the generation prompt
 * "<|turn>model\n" (+ "<|channel>thought\n<channel|>" with
 * VT_CHAT_EMPTY_THOUGHT when thinking is off). Message content is trimmed as
 * the released template does; the tiny fixtures' simplified template does not
 * trim but renders the same turns otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "jinja.h"
#include "tokenizer.h"
#include "tokenizer_unicode.h"

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
    size_t oom_bytes; /* the size whose allocation failed */
    vt_text_span *spans; /* where message content went (sb_content), when recorded */
    size_t n_spans, cap_spans;
    int record;
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

/* Message content: appended as sb_add does, its byte range recorded when the
 * caller asked for the spans (vt_chat_render_spans). */
static void sb_content(sbuf *b, const char *s, size_t n)
{
    const size_t at = b->n;
    sb_add(b, s, n);
    if (!b->record || b->oom || !n) return;
    if (b->n_spans == b->cap_spans) {
        size_t cap = b->cap_spans ? 2 * b->cap_spans : 8;
        vt_text_span *v = realloc(b->spans, cap * sizeof *v);
        if (!v) {
            b->oom = 1;
            b->oom_bytes = cap * sizeof *v;
            return;
        }
        b->spans = v;
        b->cap_spans = cap;
    }
    b->spans[b->n_spans++] = (vt_text_span){at, n};
}

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
            sb_content(b, c.p, c.n);
            sb_str(b, "<|im_end|>\n");
        } else if (!strcmp(role, "user")) {
            sb_str(b, "<|im_start|>user\n");
            sb_content(b, c.p, c.n);
            sb_str(b, "<|im_end|>\n");
        } else if (!strcmp(role, "assistant")) {
            span reasoning, answer;
            split_reasoning(c, &reasoning, &answer);
            sb_str(b, "<|im_start|>assistant\n");
            if (i > last_query) {
                sb_str(b, "<think>\n");
                sb_content(b, reasoning.p, reasoning.n);
                sb_str(b, "\n</think>\n\n");
            }
            sb_content(b, answer.p, answer.n);
            sb_str(b, "<|im_end|>\n");
        } else { /* tool: consecutive results share one user turn */
            if (i > 0 && strcmp(m[i - 1].role, "tool")) sb_str(b, "<|im_start|>user");
            sb_str(b, "\n<tool_response>\n");
            sb_content(b, c.p, c.n);
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

/* Assistant content with every complete <|channel>...<channel|> span removed,
 * then trimmed (§10.2). Written to b. */
static void add_without_channels(sbuf *b, span c)
{
    static const char open[] = "<|channel>", close[] = "<channel|>";
    sbuf tmp = {0};
    span rest = c;
    const char *o;
    while ((o = span_find(rest, open))) {
        span after = {o + strlen(open), rest.n - (size_t)(o + strlen(open) - rest.p)};
        const char *e = span_find(after, close);
        if (!e) break; /* an unclosed channel stays as text */
        sb_add(&tmp, rest.p, (size_t)(o - rest.p));
        size_t skip = (size_t)(e + strlen(close) - rest.p);
        rest.p += skip;
        rest.n -= skip;
    }
    sb_add(&tmp, rest.p, rest.n);
    if (tmp.oom) {
        b->oom = 1;
        b->oom_bytes = tmp.oom_bytes;
    } else if (tmp.p) {
        span t = trim((span){tmp.p, tmp.n});
        sb_content(b, t.p, t.n);
    }
    free(tmp.p);
}

static vt_status render_gemma4(const vt_chat_msg *m, size_t n, int add_gen, unsigned flags, sbuf *b)
{
    if ((flags & VT_CHAT_THINKING) && (flags & VT_CHAT_NO_THINKING)) {
        vt_set_error("chat template gemma4: VT_CHAT_THINKING and VT_CHAT_NO_THINKING together");
        return VT_ERR_INVALID_ARG;
    }
    const int thinking = (flags & VT_CHAT_THINKING) != 0;
    for (size_t i = 0; i < n; i++) {
        const char *r = m[i].role ? m[i].role : "(null)";
        if (strcmp(r, "system") && strcmp(r, "developer") && strcmp(r, "user") &&
            strcmp(r, "assistant")) {
            vt_set_error("chat template gemma4: message %zu has unsupported role '%s' (system, "
                         "developer, user, assistant; tool turns are not rendered)",
                         i, r);
            return VT_ERR_INVALID_ARG;
        }
    }
    if (flags & VT_CHAT_BOS) sb_str(b, "<bos>");
    size_t first = 0;
    const int has_system = n > 0 && (!strcmp(m[0].role, "system") || !strcmp(m[0].role, "developer"));
    if (has_system || thinking) {
        sb_str(b, "<|turn>system\n");
        if (thinking) sb_str(b, "<|think|>\n");
        if (has_system) {
            span c = trim(span_of(m[0].content));
            sb_content(b, c.p, c.n);
            first = 1;
        }
        sb_str(b, "<turn|>\n");
    }
    for (size_t i = first; i < n; i++) {
        const char *role = m[i].role;
        span c = trim(span_of(m[i].content));
        if (!strcmp(role, "assistant")) {
            sb_str(b, "<|turn>model\n");
            add_without_channels(b, c);
        } else {
            /* user; a later system/developer message keeps its turn name "system" */
            sb_str(b, !strcmp(role, "user") ? "<|turn>user\n" : "<|turn>system\n");
            sb_content(b, c.p, c.n);
        }
        sb_str(b, "<turn|>\n");
    }
    if (add_gen) {
        sb_str(b, "<|turn>model\n");
        if (!thinking && (flags & VT_CHAT_EMPTY_THOUGHT)) sb_str(b, "<|channel>thought\n<channel|>");
    }
    return VT_OK;
}

static vt_status chat_render(const char *family, const vt_chat_msg *msgs, size_t n_msgs,
                             int add_generation_prompt, unsigned flags, char **out,
                             vt_text_span **spans, size_t *n_spans)
{
    if (!family || !out || (!msgs && n_msgs)) {
        vt_set_error("vt_chat_render: NULL argument");
        return VT_ERR_INVALID_ARG;
    }
    *out = NULL;
    if (spans) *spans = NULL, *n_spans = 0;
    sbuf b = {.record = spans != NULL};
    vt_status st;
    if (!strcmp(family, "qwen35")) {
        st = render_qwen35(msgs, n_msgs, add_generation_prompt, flags, &b);
    } else if (!strcmp(family, "gemma4")) {
        st = render_gemma4(msgs, n_msgs, add_generation_prompt, flags, &b);
    } else {
        vt_set_error("chat template: family '%s' is not supported (supported: qwen35, gemma4)",
                     family);
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
        free(b.spans);
        return st;
    }
    *out = b.p;
    if (spans) *spans = b.spans, *n_spans = b.n_spans;
    return VT_OK;
}

vt_status vt_chat_render_ex(const char *family, const vt_chat_msg *msgs, size_t n_msgs,
                            int add_generation_prompt, unsigned flags, char **out)
{
    return chat_render(family, msgs, n_msgs, add_generation_prompt, flags, out, NULL, NULL);
}

vt_status vt_chat_render_spans(const char *family, const vt_chat_msg *msgs, size_t n_msgs,
                               int add_generation_prompt, unsigned flags, char **out,
                               vt_text_span **spans, size_t *n_spans)
{
    if (!spans || !n_spans) {
        vt_set_error("vt_chat_render_spans: NULL argument");
        return VT_ERR_INVALID_ARG;
    }
    return chat_render(family, msgs, n_msgs, add_generation_prompt, flags, out, spans, n_spans);
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
    if (!strcmp(arch, "gemma4")) return "gemma4";
    return NULL;
}

unsigned vt_chat_flags_for_template(const char *family, const char *chat_template)
{
    if (!family || !chat_template || strcmp(family, "gemma4")) return 0;
    span all = span_of(chat_template);
    const char *gen = span_find_last(all, "add_generation_prompt");
    if (!gen) return 0;
    span rest = {gen, all.n - (size_t)(gen - all.p)};
    static const char thought[] = "<|channel>thought", close[] = "<channel|>";
    const size_t tl = strlen(thought), cl = strlen(close);
    const char *m;
    while ((m = span_find(rest, thought))) {
        /* "<channel|>" right after: a real newline or a Jinja "\n" (2 bytes) between */
        size_t left = rest.n - (size_t)(m + tl - rest.p);
        span after = {m + tl, left < 2 + cl ? left : 2 + cl};
        if (span_find(after, close)) return VT_CHAT_EMPTY_THOUGHT;
        rest.n -= (size_t)(m + 1 - rest.p);
        rest.p = m + 1;
    }
    return 0;
}

/* ---- a Jinja template (the GGUF's own, or a file's): jinja.h ---- */

/* s as a JSON string (UTF-8 kept; quotes, backslash and controls escaped) */
static void sb_json_str(sbuf *b, const char *s, size_t n)
{
    sb_add(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            sb_add(b, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            sb_add(b, esc, 6);
        } else {
            sb_add(b, (const char *)&s[i], 1);
        }
    }
    sb_add(b, "\"", 1);
}

/* the text of token id (its special form), or "" */
static void token_text(const vt_tokenizer *tok, int32_t id, char *buf, size_t cap)
{
    buf[0] = 0;
    if (id < 0) return;
    int64_t k = vt_token_to_piece(tok, id, 1, buf, cap - 1);
    if (k < 0 || (size_t)k >= cap) k = 0;
    buf[k] = 0;
}

vt_status vt_chat_render_template(const vt_tokenizer *tok, const char *tmpl, const vt_chat_msg *msgs,
                                  size_t n_msgs, int add_generation_prompt, unsigned flags,
                                  char **out, vt_text_span **spans, size_t *n_spans)
{
    *out = NULL;
    if (spans) *spans = NULL;
    if (n_spans) *n_spans = 0;
    sbuf m = {0};
    sb_str(&m, "[");
    for (size_t i = 0; i < n_msgs; i++) {
        sb_str(&m, i ? ", {\"role\": " : "{\"role\": ");
        sb_json_str(&m, msgs[i].role, strlen(msgs[i].role));
        sb_str(&m, ", \"content\": ");
        sb_json_str(&m, msgs[i].content, strlen(msgs[i].content));
        sb_str(&m, "}");
    }
    sb_str(&m, "]");
    if (m.oom) {
        free(m.p);
        vt_set_error_oom(m.oom_bytes, "the chat template's messages");
        return VT_ERR_OUT_OF_MEMORY;
    }
    vt_status st = vt_chat_render_template_json(tok, tmpl, m.p, NULL, NULL, add_generation_prompt,
                                                flags, out, spans, n_spans);
    free(m.p);
    return st;
}

/* The members of JSON object text obj (between its braces), appended after
 * a comma; nothing for NULL or "{}". */
static void sb_members(sbuf *b, const char *obj)
{
    if (!obj) return;
    const char *l = strchr(obj, '{'), *r = strrchr(obj, '}');
    if (!l || !r || r <= l) return;
    const char *p = l + 1;
    while (p < r && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')) p++;
    if (p == r) return;
    sb_str(b, ", ");
    sb_add(b, p, (size_t)(r - p));
}

vt_status vt_chat_render_template_json(const vt_tokenizer *tok, const char *tmpl,
                                       const char *messages_json, const char *tools_json,
                                       const char *kwargs_json, int add_generation_prompt,
                                       unsigned flags, char **out, vt_text_span **spans,
                                       size_t *n_spans)
{
    *out = NULL;
    if (spans) *spans = NULL;
    if (n_spans) *n_spans = 0;
    if (!tmpl) {
        vt_set_error("the model has no chat template (tokenizer.chat_template)");
        return VT_ERR_NOT_FOUND;
    }
    char bos[128], eos[128];
    token_text(tok, vt_tokenizer_bos(tok), bos, sizeof bos);
    token_text(tok, vt_tokenizer_eos(tok), eos, sizeof eos);
    sbuf b = {0};
    sb_str(&b, "{\"messages\": ");
    sb_str(&b, messages_json ? messages_json : "[]");
    if (tools_json) {
        sb_str(&b, ", \"tools\": ");
        sb_str(&b, tools_json);
    }
    sb_str(&b, ", \"add_generation_prompt\": ");
    sb_str(&b, add_generation_prompt ? "true" : "false");
    sb_str(&b, ", \"bos_token\": ");
    sb_json_str(&b, bos, strlen(bos));
    sb_str(&b, ", \"eos_token\": ");
    sb_json_str(&b, eos, strlen(eos));
    if (flags & (VT_CHAT_NO_THINKING | VT_CHAT_THINKING))
        sb_str(&b, flags & VT_CHAT_NO_THINKING ? ", \"enable_thinking\": false"
                                               : ", \"enable_thinking\": true");
    sb_members(&b, kwargs_json);
    sb_str(&b, "}");
    if (b.oom) {
        free(b.p);
        vt_set_error_oom(b.oom_bytes, "the chat template's variables");
        return VT_ERR_OUT_OF_MEMORY;
    }
    static const char *const keep[] = {"bos_token", "eos_token", NULL};
    char *text = NULL;
    size_t len = 0, n_sp = 0;
    vt_jinja_span *sp = NULL;
    vt_status st = vt_jinja_render_spans(tmpl, strlen(tmpl), b.p, b.n, keep, NULL, &text, &len,
                                         &sp, &n_sp);
    free(b.p);
    if (st != VT_OK) return st;
    /* the tokenizer adds the BOS id itself: the template's BOS text goes */
    size_t cut = 0, bl = strlen(bos);
    if (vt_tokenizer_add_bos(tok) && bl && len >= bl && !memcmp(text, bos, bl) &&
        !(n_sp && sp[0].off < bl))
        cut = bl;
    if (cut) {
        memmove(text, text + cut, len - cut + 1);
        for (size_t i = 0; i < n_sp; i++) sp[i].off -= cut;
    }
    *out = text;
    if (spans) {
        vt_text_span *ts = n_sp ? malloc(n_sp * sizeof *ts) : NULL;
        if (n_sp && !ts) {
            free(sp);
            free(text);
            *out = NULL;
            vt_set_error_oom(n_sp * sizeof *ts, "the chat's text spans");
            return VT_ERR_OUT_OF_MEMORY;
        }
        for (size_t i = 0; i < n_sp; i++) ts[i] = (vt_text_span){sp[i].off, sp[i].len};
        *spans = ts;
        *n_spans = n_sp;
    }
    free(sp);
    return VT_OK;
}
