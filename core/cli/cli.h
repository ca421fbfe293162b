/*
 * cli.h - what the vt command's subcommand files share: the parsed options
 * and the helpers main.c defines for every subcommand.
 */
#ifndef VT_CLI_H
#define VT_CLI_H

#include <stdint.h>

#include "engine.h"
#include "mkmodel.h"
#include "expert_streamer.h"
#include "sampler.h"
#include "vt/status.h"

typedef struct opts {
    const char *model, *prompt, *system, *tokens, *output, *device, *plugin_dir, *kernels, *type, *config;
    int n_predict, n_predict_set, threads, chat, stats, ids, ignore_eos, have_seed, n_prompt, reps, verbose_prompt;
    uint32_t ctx, batch;
    vt_sampler_params sp;
    const char *sets[64];
    int n_sets, show, json, no_progress, quiet, profile, no_special;
    const char *trace;
    uint32_t mk_val[32];   /* mkmodel shape options, by index into mk_fields */
    uint8_t mk_set[32];
    int mk_sparse;
    const char *mk_arch;   /* mkmodel --arch: qwen35moe (default) or gemma4 */
    /* vt serve */
    const char *host, *api_key, *api_key_file, *alias, *cors_origin;
    int port, parallel, queue, timeout;
    int seen[96];          /* the getopt codes of the options given, in order (options_apply) */
    int n_seen;
} opts;
/* Print "vt CMD: <last error>" to stderr; returns the exit status 1. */
int cli_fail(const char *cmd);
/* CLOCK_MONOTONIC in seconds. */
double cli_now_seconds(void);
/* Open the engine the options describe (model, device, config, --set, ...),
 * with the load progress bar when stderr is a terminal. */
vt_status cli_open_engine(const opts *o, vt_engine **e);
/* Parse an integer option in [lo, hi]; 0 on success, else a message naming what. */
int cli_parse_long(const char *s, long lo, long hi, const char *what, long *out);
/* The process's peak resident set (getrusage ru_maxrss), in MiB. */
double cli_peak_rss_mib(void);
/* Write the streamer's routing trace to path (vt bench --trace). */
vt_status cli_write_trace(const char *path, const vt_expert_streamer *s);

/* The residency config: the file found (or --config), then every --set; with
 * warn_unselected, a WARN naming each --set of a platform this run does not use. */
vt_status cli_load_config(const opts *o, vt_config *cfg, int warn_unselected);

/* Copy the mkmodel shape options given (--n-embd, ...) into p. */
void cli_mk_apply_shape(const opts *o, vt_mkmodel_params *p);

/* vt logits, tokenize, info, plugins, config, fit, mkmodel (cmd_inspect.c). */
int cli_cmd_logits(const opts *o);
int cli_cmd_tokenize(const opts *o);
int cli_cmd_info(const opts *o);
int cli_cmd_plugins(const opts *o);
int cli_cmd_config(const opts *o);
int cli_cmd_fit(const opts *o);
int cli_cmd_mkmodel(const opts *o);

/* vt bench (bench.c). */
int cli_cmd_bench(const opts *o);
/* vt serve (serve.c). */
int cli_cmd_serve(const opts *o);

#endif
