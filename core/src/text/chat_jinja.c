/*
 * chat_jinja.c - chats rendered with a Jinja chat template (the GGUF's own
 * tokenizer.chat_template, or a file's) through the interpreter of
 * jinja.h, with the variables transformers' apply_chat_template passes:
 * messages [{role, content}], add_generation_prompt, bos_token and
 * eos_token (the tokenizer's texts) and, when the caller chose,
 * enable_thinking. Declared in tokenizer.h (vt_chat_render_template).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "jinja.h"
#include "tokenizer.h"

typedef struct jsonb {
    char *p;
    size_t n, cap;
    int oom;
} jsonb;

static void jb_add(jsonb *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void jb_cstr(jsonb *b, const char *s) { jb_add(b, s, strlen(s)); }

/* s as a JSON string (UTF-8 kept; quotes, backslash and controls escaped) */
static void jb_json_str(jsonb *b, const char *s, size_t n)
{
    jb_add(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            jb_add(b, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            jb_add(b, esc, 6);
        } else {
            jb_add(b, (const char *)&s[i], 1);
        }
    }
    jb_add(b, "\"", 1);
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
    if (!tmpl) {
        vt_set_error("the model has no chat template (tokenizer.chat_template)");
        return VT_ERR_NOT_FOUND;
    }
    char bos[128], eos[128];
    token_text(tok, vt_tokenizer_bos(tok), bos, sizeof bos);
    token_text(tok, vt_tokenizer_eos(tok), eos, sizeof eos);
    jsonb b = {0};
    jb_cstr(&b, "{\"messages\": [");
    for (size_t i = 0; i < n_msgs; i++) {
        jb_cstr(&b, i ? ", {\"role\": " : "{\"role\": ");
        jb_json_str(&b, msgs[i].role, strlen(msgs[i].role));
        jb_cstr(&b, ", \"content\": ");
        jb_json_str(&b, msgs[i].content, strlen(msgs[i].content));
        jb_cstr(&b, "}");
    }
    jb_cstr(&b, "], \"add_generation_prompt\": ");
    jb_cstr(&b, add_generation_prompt ? "true" : "false");
    jb_cstr(&b, ", \"bos_token\": ");
    jb_json_str(&b, bos, strlen(bos));
    jb_cstr(&b, ", \"eos_token\": ");
    jb_json_str(&b, eos, strlen(eos));
    if (flags & (VT_CHAT_NO_THINKING | VT_CHAT_THINKING))
        jb_cstr(&b, flags & VT_CHAT_NO_THINKING ? ", \"enable_thinking\": false"
                                               : ", \"enable_thinking\": true");
    jb_cstr(&b, "}");
    if (b.oom) {
        free(b.p);
        vt_set_error_oom(b.cap, "the chat template's variables");
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
