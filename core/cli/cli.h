/*
 * cli.h - what the files of the vt command share (git's builtin/ layout):
 *   vt.c           main: the command table, vt --help, vt --version
 *   cli_options.c  every option once (name, argument, help), parsing into
 *                  `opts`, the per-command check, vt <cmd> --help
 *   cli_common.c   what commands share: failing, the config, opening an
 *                  engine with its progress bar, clocks, peak RSS
 *   cmd_<name>.c   one command each: its options, its help, its work
 * Each command parses the options it lists (any other is a usage error naming
 * it) and reports failures as "vt <cmd>: <message>", exit status 1 (2 for
 * usage errors).
 */
#ifndef VT_CLI_H
#define VT_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "engine.h"
#include "expert_streamer.h"
#include "mkmodel.h"
#include "sampler.h"
#include "tokenizer.h"
#include "vt/status.h"

#define VT_VERSION_STRING "0.1.0"

/* getopt codes of the options without a short letter (cli_options.c names
 * them all); the short ones are their letter: 'm' 'p' 'n' 't' 'o' 'v' 'q' 'h'. */
enum {
    O_TEMP = 1000, O_TOPK, O_TOPP, O_MINP, O_SEED, O_CHAT, O_SYSTEM, O_STATS, O_IDS, O_TOKENS,
    O_DEVICE, O_PLUGIN_DIR, O_KERNELS, O_CTX, O_BATCH, O_TYPE, O_IGNORE_EOS, O_NPROMPT, O_REPS,
    O_CONFIG, O_VERBOSE_PROMPT, O_SET, O_SHOW, O_JSON, O_SPARSE, O_ARCH, O_NO_PROGRESS, O_PROFILE,
    O_NO_SPECIAL, O_TRACE, O_HOST, O_PORT, O_PARALLEL, O_API_KEY, O_API_KEY_FILE, O_QUEUE,
    O_TIMEOUT, O_ALIAS, O_CORS_ORIGIN, O_NO_PREFAULT, O_JINJA, O_NO_JINJA, O_CHAT_TEMPLATE_FILE,
    O_MK_SHAPE = 1199, /* in a command's list: every mkmodel shape option */
    O_MK_BASE = 1200   /* + index into the shape table */
};

typedef struct opts {
    const char *model, *prompt, *system, *tokens, *output, *device, *plugin_dir, *kernels, *type, *config;
    int n_predict, n_predict_set, threads, chat, stats, ids, ignore_eos, have_seed, n_prompt, reps, verbose_prompt;
    uint32_t ctx, batch;
    vt_sampler_params sp;
    const char *sets[64];
    int n_sets, show, json, no_progress, quiet, profile, no_special, no_prefault;
    const char *trace;
    int jinja;                 /* --jinja or --chat-template-file: a Jinja chat template, asked for */
    int no_jinja;              /* --no-jinja: the family's built-in template */
    const char *chat_template_file;
    const char *prompt_file;   /* -f FILE: the prompt from FILE ("-": stdin) */
    uint32_t mk_val[32];   /* mkmodel shape options, by index into the shape table */
    uint8_t mk_set[32];
    int mk_sparse;
    const char *mk_arch;   /* mkmodel --arch: qwen35moe (default) or gemma4 */
    /* vt serve */
    const char *host, *api_key, *api_key_file, *alias, *cors_origin;
    int port, parallel, queue, timeout;
    int help;              /* -h/--help was given */
    int seen[96];          /* the getopt codes of the options given, in order */
    int n_seen;
} opts;

/* One option as a command uses it: its code, and the argument name and help
 * text where the command's differ from the shared ones (NULL: shared). */
typedef struct cli_opt_use {
    int id;
    const char *arg;
    const char *help;
} cli_opt_use;

/* A command: cmd_<name>.c defines one. */
typedef struct cli_command {
    const char *name;
    int (*run)(const opts *o);
    const char *synopsis;   /* what follows "vt <name>" on the usage line */
    const char *summary;    /* one line in vt --help */
    const char *help;       /* the paragraph of vt <name> --help (lines end in \n) */
    const cli_opt_use *options; /* what it reads, {0} ends the list; -v -q -h always */
} cli_command;

extern const cli_command cli_cmd_run, cli_cmd_chat, cli_cmd_logits, cli_cmd_tokenize, cli_cmd_info,
    cli_cmd_plugins, cli_cmd_config, cli_cmd_fit, cli_cmd_mkmodel, cli_cmd_bench, cli_cmd_serve;

/* the options every command that opens an engine reads */
#define CLI_ENGINE_OPTIONS                                                                    \
    {'m', NULL, NULL}, {'t', NULL, NULL}, {O_DEVICE, NULL, NULL}, {O_PLUGIN_DIR, NULL, NULL}, \
        {O_KERNELS, NULL, NULL}, {O_CTX, NULL, NULL}, {O_BATCH, NULL, NULL},                  \
        {O_CONFIG, NULL, NULL}, {O_SET, NULL, NULL}, {O_NO_PROGRESS, NULL, NULL},           \
        {O_NO_PREFAULT, NULL, NULL}

/* cli_options.c */
/* Parse argv (argv[0] is "vt <cmd>") into o with the defaults; then check
 * that cmd lists every option given. 0, or a message on stderr and -1. With
 * -h/--help, o->help is set and the check is skipped. */
int cli_parse_options(const cli_command *cmd, int argc, char **argv, opts *o);
/* vt <cmd> --help: usage line, help paragraph, the command's options only. */
void cli_print_command_help(const cli_command *cmd, FILE *f);
/* Parse an integer option in [lo, hi]; 0 on success, else a message naming what. */
int cli_parse_long(const char *s, long lo, long hi, const char *what, long *out);
/* cli_llama_flags.c: what vt does instead of the llama.cpp flag arg ("-ngl",
 * "--ctx-size=4096"), NULL when arg is none of them. */
const char *cli_llama_hint(const char *arg);
/* Copy the mkmodel shape options given (--n-embd, ...) into p. */
void cli_mk_apply_shape(const opts *o, vt_mkmodel_params *p);

/* cli_common.c */
/* Print "vt CMD: <last error>" to stderr; returns the exit status 1. */
int cli_fail(const char *cmd);
/* CLOCK_MONOTONIC in seconds. */
double cli_now_seconds(void);
/* Open the engine the options describe (model, device, config, --set, ...),
 * with the load progress bar when stderr is a terminal. */
vt_status cli_open_engine(const opts *o, vt_engine **e);
/* The same engine's sequence up to the plan (vt fit: engine.h's plan_only):
 * *e is set also when the fit check refuses (VT_ERR_DOES_NOT_FIT). */
vt_status cli_open_engine_plan(const opts *o, vt_engine **e);
/* vt_gguf_open of o->model (header and tensor table, nothing mapped) with a
 * bar of the shards opened of a split model (vt info, vt fit) */
vt_status cli_open_gguf(const opts *o, vt_gguf **g);
/* The Jinja chat template chats are rendered with, parsed once: the file of
 * --chat-template-file, else the model's tokenizer.chat_template (the
 * default), malloc-ed. NULL: vt's built-in template for the family instead
 * (--no-jinja; or the model has none, or vt cannot parse its template: a
 * warning then, an error when --jinja asked for it), or on error (*failed
 * set, the message through vt_last_error). */
char *cli_chat_template(const opts *o, const char *model_template, int *failed);
/* The shipped demo model (vt run, vt chat without -m): <bindir>/VT_MODELS_REL_DIR,
 * or the source tree's models/ for a build tree's vt; NULL (and a message
 * naming where it looked, as "vt CMD: ...") when it is not there. Names the
 * model on stderr when say (--stats) or at -v. */
const char *cli_default_model(const char *cmd, int say);
/* The prompt of -f FILE, or of -p - (stdin): malloc-ed text (NUL-terminated;
 * at most 64 MiB), or NULL with the error set naming the file. */
char *cli_read_prompt(const char *path);
/* The sampler of the options (--temp, --top-k, ..., the seed from the clock
 * unless --seed), with UNUSED and suppressed tokens banned (*banned: the
 * [n_vocab] mask, malloc-ed, for the caller to free after the sampler); *seed: the seed used. */
vt_status cli_sampler_new(const opts *o, const vt_tokenizer *tok, const vt_model_info *info,
                          uint8_t **banned, vt_sampler **smp, uint64_t *seed);
/* vt chat's main, also vt run -cnv's */
int cli_chat_main(const opts *o);
/* --stats: "weights: 19.58 MiB read from the file in place in 0.012 s (1.60 GiB/s)" */
void cli_print_weights(FILE *f, const vt_engine *e);

/* cli_progress.c: a progress bar on stderr, shown only on a terminal and
 * not with --no-progress, -q or -v (o may be NULL: then only the terminal
 * and the log level decide). unit NULL: done/total are bytes (with a rate);
 * else a count of unit ("shards"). */
typedef struct cli_bar {
    char label[96];
    const char *unit;
    double t0, last;
    int show, drawn, ended, cols;
} cli_bar;
void cli_bar_init(cli_bar *b, const opts *o, const char *label, const char *unit);
void cli_bar_draw(cli_bar *b, uint64_t done, uint64_t total, double seconds);
void cli_bar_end(cli_bar *b); /* a newline when drawn and not finished */
/* callbacks with user = a cli_bar: the engine's load progress, and a
 * (done, total) report timed from cli_bar_init */
void cli_bar_engine_cb(void *user, const char *phase, uint64_t done, uint64_t total, double seconds);
void cli_bar_cb(void *user, uint64_t done, uint64_t total);
/* The process's peak resident set (getrusage ru_maxrss), in MiB. */
double cli_peak_rss_mib(void);
/* The residency config: the file found (or --config), then every --set; with
 * warn_unselected, a WARN naming each --set of a platform this run does not use. */
vt_status cli_load_config(const opts *o, vt_config *cfg, int warn_unselected);

#endif
