/*
 * cmd_run.c - vt run: generate text from a prompt (or one chat turn),
 * streamed to stdout; without -m the shipped demo model.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "engine.h"
#include "error.h"
#include "expert_streamer.h"
#include "registry.h"
#include "sampler.h"
#include "tokenizer.h"

/* Expert-streaming counters: the total and one line per layer that streamed. */
static void print_expert_stats(FILE *f, const vt_engine *e)
{
    const vt_expert_streamer *s = vt_engine_streamer(e);
    if (!s) {
        fprintf(f, "experts: resident (not streamed)\n");
        return;
    }
    vt_expert_stats t;
    vt_streamer_stats(s, -1, &t);
    fprintf(f, "experts: streamed, %llu slots (%llu resident), %s\n",
            (unsigned long long)vt_streamer_n_slots(s), (unsigned long long)vt_streamer_n_resident(s),
            vt_streamer_io_direct(s) ? "O_DIRECT" : "pread");
    fprintf(f, "  %-6s %10s %10s %8s %12s %10s %10s %9s\n", "layer", "hits", "misses", "hit%",
            "MiB filled", "fill s", "GB/s", "evicted");
    for (int32_t l = -1; l < (int32_t)vt_streamer_n_layers(s); l++) {
        vt_expert_stats x;
        if (l >= 0) {
            vt_streamer_stats(s, l, &x);
            if (!x.hits && !x.misses) continue;
        } else {
            x = t;
        }
        uint64_t u = x.hits + x.misses;
        char name[16];
        snprintf(name, sizeof name, l < 0 ? "total" : "%d", l);
        fprintf(f, "  %-6s %10llu %10llu %7.1f%% %12.1f %10.3f %10.2f %9llu\n", name,
                (unsigned long long)x.hits, (unsigned long long)x.misses,
                u ? 100.0 * (double)x.hits / (double)u : 0.0, (double)x.bytes_filled / 1048576.0,
                x.fill_seconds, x.fill_seconds > 0 ? (double)x.bytes_filled / x.fill_seconds / 1e9 : 0.0,
                (unsigned long long)x.evictions);
    }
    if (!vt_streamer_n_host_slots(s)) {
        fprintf(f, "host tier: none\n");
        return;
    }
    vt_streamer_host_stats h;
    vt_streamer_host_stats_get(s, -1, &h);
    uint64_t hu = h.hits + h.misses;
    char pb[32];
    fprintf(f, "host tier: %llu slots (%llu resident, %s pinned): %llu hits, %llu misses (%.1f%%), "
            "%.1f MiB read in %.3f s (%.2f GB/s), %llu evicted, %llu errors\n",
            (unsigned long long)vt_streamer_n_host_slots(s),
            (unsigned long long)vt_streamer_n_host_resident(s),
            vt_format_bytes(vt_streamer_host_pinned_bytes(s), 1, pb, sizeof pb),
            (unsigned long long)h.hits, (unsigned long long)h.misses,
            hu ? 100.0 * (double)h.hits / (double)hu : 0.0, (double)h.bytes_read / 1048576.0,
            h.read_seconds, h.read_seconds > 0 ? (double)h.bytes_read / h.read_seconds / 1e9 : 0.0,
            (unsigned long long)h.evictions, (unsigned long long)h.errors);
}

/* ------------------------------------------------------------------ run */

static int run_main(const opts *o_in)
{
    opts local = *o_in;
    const opts *o = &local;
    if (o->prompt && o->prompt_file) {
        fprintf(stderr, "vt run: give -p PROMPT or -f FILE, not both\n");
        return 2;
    }
    if (!o->prompt && !o->prompt_file) {
        fprintf(stderr, "vt run: -p PROMPT (or -f FILE) is required\n");
        return 2;
    }
    if (!o->model && !(local.model = cli_default_model("run", o->stats))) return 2;
    char *prompt_text = NULL; /* -f FILE, -p -: read before the model loads */
    if (o->prompt_file || !strcmp(o->prompt, "-")) {
        if (!(prompt_text = cli_read_prompt(o->prompt_file ? o->prompt_file : "-")))
            return cli_fail("run");
        local.prompt = prompt_text;
    }
    vt_engine *e;
    if (cli_open_engine(o, &e) != VT_OK) {
        free(prompt_text);
        return cli_fail("run");
    }
    const vt_tokenizer *tok = vt_engine_tokenizer(e);
    vt_model_info info;
    vt_engine_model_info(e, &info);
    int rc = 1;
    char *text = NULL;
    int32_t *ids = NULL;
    const float *logits = NULL; /* the engine's (vt_engine_eval_last) */
    uint8_t *banned = NULL;
    vt_sampler *smp = NULL;
    vt_detok_stream *ds = NULL;
    uint64_t seed = 0;

    const char *prompt = o->prompt;
    vt_text_span *plain = NULL; /* --no-special --chat: where the messages went */
    size_t n_plain = 0;
    if (o->chat || o->system || o->jinja) { /* --system, --jinja, --chat-template-file imply --chat */
        const char *family = vt_chat_family_for_arch(vt_engine_arch(e));
        vt_chat_msg msgs[2];
        size_t n = 0;
        if (o->system) msgs[n++] = (vt_chat_msg){"system", o->system};
        msgs[n++] = (vt_chat_msg){"user", o->prompt};
        int bad;
        char *tmpl = cli_chat_template(o, vt_tokenizer_chat_template(tok), &bad);
        if (bad) goto out;
        if (tmpl) { /* the Jinja template itself, through vt's interpreter */
            vt_status st = vt_chat_render_template(tok, tmpl, msgs, n, 1, 0, &text, &plain, &n_plain);
            free(tmpl);
            if (st != VT_OK) goto out;
        } else if (!family) {
            vt_set_error("no chat template for architecture '%s' (the model has none; give one "
                         "with --chat-template-file FILE)", vt_engine_arch(e));
            goto out;
        } else {
            /* the GGUF's own template decides template variants (gemma4's empty thought channel) */
            unsigned flags = vt_chat_flags_for_template(family, vt_tokenizer_chat_template(tok));
            if (vt_chat_render_spans(family, msgs, n, 1, flags, &text, &plain, &n_plain) != VT_OK)
                goto out;
        }
        prompt = text;
    }
    int64_t n_ids = 0;
    /* --no-special: the template's control tokens parse, the user's text stays text */
    vt_status tst = !o->no_special ? vt_tokenize(tok, prompt, strlen(prompt), 1, 1, &ids, &n_ids)
                    : text ? vt_tokenize_plain(tok, prompt, strlen(prompt), 1, plain, n_plain, &ids, &n_ids)
                           : vt_tokenize(tok, prompt, strlen(prompt), 1, 0, &ids, &n_ids);
    free(plain);
    if (tst != VT_OK) goto out;
    if (n_ids == 0) {
        vt_set_error("the prompt tokenizes to nothing");
        goto out;
    }
    if (o->verbose_prompt) {
        fprintf(stderr, "prompt: \"%s\"\nprompt tokens (%lld):", prompt, (long long)n_ids);
        for (int64_t i = 0; i < n_ids; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
    }
    if (cli_sampler_new(o, tok, &info, &banned, &smp, &seed) != VT_OK) goto out;
    ds = vt_detok_stream_new(tok, 0);
    if (!ds) {
        vt_set_error("out of memory for the detokenizer");
        goto out;
    }

    double t0 = cli_now_seconds();
    if (vt_engine_eval_last(e, ids, n_ids, &logits) != VT_OK) goto out;
    double t1 = cli_now_seconds();
    int n_gen = 0, ctx_full = 0;
    for (; o->n_predict < 0 || n_gen < o->n_predict; n_gen++) {
        int64_t bad = vt_sampler_bad_logits(logits, info.n_vocab);
        if (bad) {
            vt_set_error("the logits after position %lld hold %lld NaN or infinite values of %lld "
                         "(a model or backend fault); stopping", (long long)vt_engine_pos(e) - 1,
                         (long long)bad, (long long)info.n_vocab);
            goto out;
        }
        int32_t id = vt_sampler_sample(smp, logits);
        if (id < 0) {
            vt_set_error("no token can be sampled after position %lld (every token banned)",
                         (long long)vt_engine_pos(e) - 1);
            goto out;
        }
        if (!o->ignore_eos && vt_tokenizer_is_eog(tok, id)) break;
        if (o->ids) {
            printf(n_gen ? " %d" : "%d", id);
        } else {
            size_t n;
            const char *piece = vt_detok_stream_push(ds, id, &n);
            fwrite(piece, 1, n, stdout);
        }
        fflush(stdout);
        if (o->n_predict >= 0 && n_gen + 1 >= o->n_predict) {
            n_gen++;
            break;
        }
        if (info.n_ctx && vt_engine_pos(e) >= (int64_t)info.n_ctx) {
            n_gen++;
            ctx_full = 1;
            break;
        }
        if (vt_engine_eval_last(e, &id, 1, &logits) != VT_OK) goto out;
    }
    double t2 = cli_now_seconds();
    if (!o->ids) {
        size_t n;
        const char *rest = vt_detok_stream_flush(ds, &n);
        fwrite(rest, 1, n, stdout);
    }
    printf("\n");
    fflush(stdout);
    if (ctx_full)
        fprintf(stderr, "vt run: stopped: the context of %u tokens is full (raise --ctx)\n", info.n_ctx);
    if (o->stats) {
        /* the last sampled token is not evaluated: decode steps = n_gen - 1 */
        int steps = n_gen > 0 ? n_gen - 1 : 0;
        fprintf(stderr, "load: %.3f s\n", vt_engine_load_seconds(e));
        cli_print_weights(stderr, e);
        fprintf(stderr, "prefill: %lld tokens in %.4f s (%.1f tokens/s)\n", (long long)n_ids,
                t1 - t0, n_ids / (t1 - t0));
        fprintf(stderr, "decode: %d tokens in %.4f s (%.1f tokens/s)\n", steps, t2 - t1,
                steps > 0 ? steps / (t2 - t1) : 0.0);
        fprintf(stderr, "seed: %llu\n", (unsigned long long)seed);
        if (info.moe_path) fprintf(stderr, "moe: %s\n", info.moe_path);
        if (info.decode_path) fprintf(stderr, "decode steps: %s\n", info.decode_path);
        print_expert_stats(stderr, e);
        fprintf(stderr, "fallbacks: %llu (each logged at WARN)\n",
                (unsigned long long)vt_host_n_fallbacks());
        fprintf(stderr, "peak RSS: %.1f MiB\n", cli_peak_rss_mib());
    }
    rc = 0;
out:
    if (rc) cli_fail("run");
    vt_detok_stream_free(ds);
    vt_sampler_free(smp);
    free(banned);
    free(ids);
    free(text);
    free(prompt_text);
    vt_engine_close(e);
    return rc;
}

static const cli_opt_use run_options[] = {
    CLI_ENGINE_OPTIONS,
    {'p', NULL, NULL}, {'f', NULL, NULL}, {'n', NULL, NULL}, {O_TEMP, NULL, NULL}, {O_TOPK, NULL, NULL},
    {O_TOPP, NULL, NULL}, {O_MINP, NULL, NULL}, {O_SEED, NULL, NULL}, {O_CHAT, NULL, NULL},
    {O_SYSTEM, NULL, NULL}, {O_STATS, NULL, NULL}, {O_IDS, NULL, NULL}, {O_IGNORE_EOS, NULL, NULL},
    {O_VERBOSE_PROMPT, NULL, NULL},
    {O_NO_SPECIAL, NULL, "control tokens written in the prompt (or --chat messages) stay text"},
    {O_JINJA, NULL, NULL}, {O_NO_JINJA, NULL, NULL}, {O_CHAT_TEMPLATE_FILE, NULL, NULL},
    {0, NULL, NULL}};

const cli_command cli_cmd_run = {
    "run", run_main, "[-m MODEL] -p PROMPT|-f FILE [options]",
    "generate text (streams to stdout)",
    "Generates text from the prompt and streams it to stdout. Without -m, the shipped demo\n"
    "model (" VT_DEMO_MODEL_NAME ", a small trained qwen35moe: see the README).\n",
    run_options};
