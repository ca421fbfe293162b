/*
 * cmd_chat.c - vt chat (and vt run -cnv): a conversation in the terminal.
 * Each line read is a user turn; the answer streams to stdout. The
 * conversation is kept, and so is the KV cache: a turn evaluates only the
 * text its rendering adds after what the cache already holds (the previous
 * prompt and answer), as long as the template renders the history the same
 * way (a template that rewrites earlier turns, e.g. one dropping their
 * reasoning, makes the turn start over from an empty cache). /clear starts a
 * new conversation, /exit (or end of input) ends it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "engine.h"
#include "error.h"
#include "sampler.h"
#include "tokenizer.h"

typedef struct chat {
    const opts *o;
    vt_engine *e;
    const vt_tokenizer *tok;
    vt_model_info info;
    const char *family;
    char *tmpl;          /* the Jinja template, or NULL: the family's built-in one */
    unsigned flags;      /* the built-in template's variant */
    vt_chat_msg *msgs;   /* role and content malloc-ed (role: static strings) */
    size_t n_msgs, cap_msgs;
    size_t n_fixed;      /* the leading system message, kept by /clear */
    char *cached;        /* the text the KV cache holds (prompt and answers so far) */
    vt_sampler *smp;
    uint8_t *banned;
} chat;

static int push_msg(chat *c, const char *role, const char *text, size_t n)
{
    if (c->n_msgs == c->cap_msgs) {
        size_t cap = c->cap_msgs ? 2 * c->cap_msgs : 8;
        vt_chat_msg *m = realloc(c->msgs, cap * sizeof *m);
        if (!m) return -1;
        c->msgs = m;
        c->cap_msgs = cap;
    }
    char *s = malloc(n + 1);
    if (!s) return -1;
    memcpy(s, text, n);
    s[n] = 0;
    c->msgs[c->n_msgs++] = (vt_chat_msg){role, s};
    return 0;
}

static void pop_msgs(chat *c, size_t keep)
{
    while (c->n_msgs > keep) free((char *)c->msgs[--c->n_msgs].content);
}

/* The conversation rendered, ending with the generation prompt. */
static vt_status render(chat *c, char **text, vt_text_span **spans, size_t *n_spans)
{
    if (c->tmpl)
        return vt_chat_render_template(c->tok, c->tmpl, c->msgs, c->n_msgs, 1, 0, text, spans, n_spans);
    return vt_chat_render_spans(c->family, c->msgs, c->n_msgs, 1, c->flags, text, spans, n_spans);
}

/* The turn's new tokens: what the rendering adds after the cached text
 * (*reused: tokens kept in the cache), or all of it after a reset. The
 * messages' text stays text (control tokens spelled in it do not parse). */
static vt_status turn_tokens(chat *c, int32_t **ids, int64_t *n, int64_t *reused)
{
    char *text = NULL;
    vt_text_span *sp = NULL;
    size_t n_sp = 0;
    vt_status st = render(c, &text, &sp, &n_sp);
    if (st != VT_OK) return st;
    size_t off = c->cached ? strlen(c->cached) : 0;
    *reused = 0;
    if (off && vt_engine_pos(c->e) > 0 && !strncmp(text, c->cached, off)) {
        *reused = vt_engine_pos(c->e);
        size_t k = 0; /* the spans of the new text, moved to its start */
        for (size_t i = 0; i < n_sp; i++) {
            size_t s = sp[i].off, e = sp[i].off + sp[i].len;
            if (e <= off) continue;
            if (s < off) s = off;
            sp[k++] = (vt_text_span){s - off, e - s};
        }
        st = vt_tokenize_plain(c->tok, text + off, strlen(text) - off, 0, sp, k, ids, n);
    } else {
        if ((st = vt_engine_reset(c->e)) == VT_OK)
            st = vt_tokenize_plain(c->tok, text, strlen(text), 1, sp, n_sp, ids, n);
    }
    free(sp);
    free(c->cached);
    c->cached = text;
    return st;
}

/* Evaluate the turn's tokens and stream the answer; the answer's text is
 * appended to c->cached and returned in *answer. */
static vt_status answer(chat *c, const int32_t *ids, int64_t n_ids, char **answer_out,
                        int *n_gen_out, double *t_prefill, double *t_decode)
{
    *answer_out = NULL;
    vt_detok_stream *ds = vt_detok_stream_new(c->tok, 0);
    size_t cap = 256, len = 0;
    char *ans = malloc(cap);
    if (!ds || !ans) {
        vt_detok_stream_free(ds);
        free(ans);
        vt_set_error("out of memory for the answer");
        return VT_ERR_OUT_OF_MEMORY;
    }
    const float *logits;
    double t0 = cli_now_seconds();
    vt_status st = vt_engine_eval_last(c->e, ids, n_ids, &logits);
    double t1 = cli_now_seconds();
    int n_gen = 0;
    const int limit = c->o->n_predict_set ? c->o->n_predict : -1;
    while (st == VT_OK && (limit < 0 || n_gen < limit)) {
        int32_t id = vt_sampler_sample(c->smp, logits);
        if (id < 0) {
            vt_set_error("no token can be sampled (every token banned)");
            st = VT_ERR_INTERNAL;
            break;
        }
        if (vt_tokenizer_is_eog(c->tok, id)) break;
        n_gen++;
        size_t k;
        const char *piece = vt_detok_stream_push(ds, id, &k);
        if (len + k + 1 > cap) {
            while (len + k + 1 > cap) cap *= 2;
            char *a = realloc(ans, cap);
            if (!a) {
                vt_set_error("out of memory for the answer");
                st = VT_ERR_OUT_OF_MEMORY;
                break;
            }
            ans = a;
        }
        memcpy(ans + len, piece, k);
        len += k;
        fwrite(piece, 1, k, stdout);
        fflush(stdout);
        /* the token goes into the cache too, so that the cache holds the answer */
        if (c->info.n_ctx && vt_engine_pos(c->e) >= (int64_t)c->info.n_ctx) {
            fprintf(stderr, "\nvt chat: the context of %u tokens is full (/clear to start over, or "
                    "a larger --ctx)\n", c->info.n_ctx);
            break;
        }
        st = vt_engine_eval_last(c->e, &id, 1, &logits);
    }
    size_t k;
    const char *rest = vt_detok_stream_flush(ds, &k);
    fwrite(rest, 1, k, stdout);
    printf("\n");
    fflush(stdout);
    vt_detok_stream_free(ds);
    ans[len] = 0;
    *t_prefill = t1 - t0;
    *t_decode = cli_now_seconds() - t1;
    *n_gen_out = n_gen;
    if (st != VT_OK) {
        free(ans);
        return st;
    }
    size_t cl = strlen(c->cached);
    char *nc = realloc(c->cached, cl + len + 1);
    if (!nc) {
        free(ans);
        vt_set_error("out of memory for the conversation");
        return VT_ERR_OUT_OF_MEMORY;
    }
    memcpy(nc + cl, ans, len + 1);
    c->cached = nc;
    *answer_out = ans;
    return VT_OK;
}

int cli_chat_main(const opts *o_in)
{
    opts local = *o_in;
    const opts *o = &local;
    if (!o->model && !(local.model = cli_default_model("chat", o->stats))) return 2;
    chat c = {.o = o};
    int rc = 1;
    if (cli_open_engine(o, &c.e) != VT_OK) return cli_fail("chat");
    c.tok = vt_engine_tokenizer(c.e);
    vt_engine_model_info(c.e, &c.info);
    c.family = vt_chat_family_for_arch(vt_engine_arch(c.e));
    int bad;
    c.tmpl = cli_chat_template(o, vt_tokenizer_chat_template(c.tok), &bad);
    if (bad) goto out;
    if (!c.tmpl && !c.family) {
        vt_set_error("no chat template for architecture '%s' (the model has none; give one with "
                     "--chat-template-file FILE)", vt_engine_arch(c.e));
        goto out;
    }
    if (!c.tmpl) c.flags = vt_chat_flags_for_template(c.family, vt_tokenizer_chat_template(c.tok));
    uint64_t seed;
    if (cli_sampler_new(o, c.tok, &c.info, &c.banned, &c.smp, &seed) != VT_OK) goto out;
    if (o->system && push_msg(&c, "system", o->system, strlen(o->system))) goto oom;
    c.n_fixed = c.n_msgs;
    const int tty = isatty(STDIN_FILENO);
    if (tty)
        fprintf(stderr, "vt chat: %s; /clear starts over, /exit (or Ctrl-D) ends\n", o->model);
    char *line = NULL;
    size_t line_cap = 0;
    for (int turn = 1;; turn++) {
        if (tty) {
            fputs("> ", stdout);
            fflush(stdout);
        }
        ssize_t n = getline(&line, &line_cap, stdin);
        if (n < 0) break;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        if (memchr(line, 0, (size_t)n)) { /* the text would end at it, silently */
            fprintf(stderr, "vt chat: a line holding a NUL byte is not a turn (ignored)\n");
            turn--;
            continue;
        }
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
        if (!strcmp(line, "/clear")) {
            pop_msgs(&c, c.n_fixed);
            free(c.cached);
            c.cached = NULL;
            if (vt_engine_reset(c.e) != VT_OK) break;
            fprintf(stderr, "vt chat: a new conversation\n");
            turn = 0;
            continue;
        }
        if (!n) {
            turn--;
            continue;
        }
        if (push_msg(&c, "user", line, (size_t)n)) goto oom_line;
        int32_t *ids = NULL;
        int64_t n_ids = 0, reused = 0;
        vt_status st = turn_tokens(&c, &ids, &n_ids, &reused);
        if (st == VT_OK && c.info.n_ctx && vt_engine_pos(c.e) + n_ids >= (int64_t)c.info.n_ctx) {
            vt_set_error("the conversation no longer fits the context of %u tokens (/clear to "
                         "start over, or a larger --ctx)", c.info.n_ctx);
            st = VT_ERR_RANGE;
        }
        char *ans = NULL;
        int n_gen = 0;
        double tp = 0, td = 0;
        if (st == VT_OK) st = answer(&c, ids, n_ids, &ans, &n_gen, &tp, &td);
        free(ids);
        if (st != VT_OK) { /* the turn is dropped; the cache starts over next time */
            fprintf(stderr, "vt chat: %s\n", vt_last_error());
            pop_msgs(&c, c.n_msgs - 1);
            free(c.cached);
            c.cached = NULL;
            if (st == VT_ERR_OUT_OF_MEMORY) break;
            continue;
        }
        int failed = push_msg(&c, "assistant", ans, strlen(ans));
        free(ans);
        if (failed) goto oom_line;
        if (o->stats)
            fprintf(stderr, "turn %d: prefill %lld new tokens (%lld reused from the cache) in "
                    "%.3f s; %d tokens generated in %.3f s\n", turn, (long long)n_ids,
                    (long long)reused, tp, n_gen, td);
    }
    free(line);
    rc = 0;
    goto out;
oom_line:
    free(line);
oom:
    vt_set_error("out of memory for the conversation");
out:
    if (rc) cli_fail("chat");
    pop_msgs(&c, 0);
    free(c.msgs);
    free(c.cached);
    free(c.tmpl);
    vt_sampler_free(c.smp);
    free(c.banned);
    vt_engine_close(c.e);
    return rc;
}

static const cli_opt_use chat_options[] = {
    CLI_ENGINE_OPTIONS,
    {'n', NULL, "tokens per answer at most (default: until an end-of-generation token)"},
    {O_TEMP, NULL, NULL}, {O_TOPK, NULL, NULL}, {O_TOPP, NULL, NULL}, {O_MINP, NULL, NULL},
    {O_SEED, NULL, NULL}, {O_SYSTEM, NULL, "a system message before the conversation"},
    {O_STATS, NULL, "after each answer: the tokens evaluated and reused, and the times"},
    {O_JINJA, NULL, NULL}, {O_NO_JINJA, NULL, NULL}, {O_CHAT_TEMPLATE_FILE, NULL, NULL},
    {0, NULL, NULL}};

const cli_command cli_cmd_chat = {
    "chat", cli_chat_main, "[-m MODEL] [options]",
    "a conversation in the terminal (vt run -cnv)",
    "Reads one user turn per line from stdin and streams each answer to stdout, keeping the\n"
    "conversation and its KV cache (a turn evaluates only its new tokens). /clear starts\n"
    "over, /exit or end of input ends. Without -m, the shipped demo model.\n",
    chat_options};
