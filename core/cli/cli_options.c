/*
 * cli_options.c - every option of the vt command once: its long and short
 * name, its argument and its help line; parsing into `opts` (getopt_long over
 * all of them, so that an option a command does not read is named in the
 * error rather than called unknown), the check against the command's list,
 * and the help of one command.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "error.h"

typedef struct cli_option {
    int id;           /* getopt code: the short letter, or an O_* value */
    const char *lng;  /* long name */
    const char *arg;  /* argument name in the help, NULL for a flag */
    const char *help; /* one line (more lines start with '\n') */
} cli_option;

static const cli_option options[] = {
    {'m', "model", "FILE", "GGUF file (a split model: its first shard)"},
    {'p', "prompt", "TEXT", "the prompt (- : read it from stdin)"},
    {'f', "file", "FILE", "read the prompt from FILE (- : stdin)"},
    {'n', "n-predict", "N", "tokens to generate (default 64; -1: until end of generation)"},
    {'t', "threads", "N", "CPU threads (default, or 0: one per online core)"},
    {'o', "output", "FILE", "the file to write"},
    {'v', "verbose", NULL, "log INFO (VT_LOG_LEVEL=debug for more)"},
    {'q', "quiet", NULL, "log errors only, no progress bar"},
    {'h', "help", NULL, "this help"},
    {O_TEMP, "temp", "T", "sampling temperature (default 0.8; 0: greedy)"},
    {O_TOPK, "top-k", "K", "keep the K likeliest tokens (default 40; 0: off)"},
    {O_TOPP, "top-p", "P", "keep the likeliest tokens up to mass P (default 0.95; 1: off)"},
    {O_MINP, "min-p", "P", "drop tokens below P x the likeliest's probability (default 0.05)"},
    {O_SEED, "seed", "S", "sampling seed (default: from the clock; printed by --stats)"},
    {O_CHAT, "chat", NULL, "render the prompt as one user turn of the model family's chat template"},
    {O_SYSTEM, "system", "TEXT", "a system message before it (implies --chat)"},
    {O_STATS, "stats", NULL, "print load, prefill and decode times, the expert cache and peak RSS"},
    {O_IDS, "ids", NULL, "print the generated token ids instead of text"},
    {O_TOKENS, "tokens", "1,2,3", "the token ids whose logits to write"},
    {O_DEVICE, "device", "NAME", "platform of the residency config: cpu, cuda, rocm, unified\n"
                                 "(default: the config's defaults.platform)"},
    {O_PLUGIN_DIR, "plugin-dir", "DIR", "search DIR for plugins first (also VT_PLUGIN_PATH)"},
    {O_KERNELS, "kernels", "SET", "auto | scalar | avx2 | avx512; scalar = plain float32 reference\n"
                                  "kernels (also env VT_KERNELS)"},
    {O_CTX, "ctx", "N", "KV cache length in tokens (default min(trained, 4096))"},
    {O_BATCH, "batch", "N", "prefill chunk size in tokens (default 512)"},
    {O_TYPE, "type", "T", "weight type of the matrices"},
    {O_IGNORE_EOS, "ignore-eos", NULL, "do not stop at an end-of-generation token"},
    {O_NPROMPT, "n-prompt", "N", "prompt tokens (the same as -p N)"},
    {O_REPS, "reps", "R", "repetitions after the warm-up (default 5; the median is printed)"},
    {O_CONFIG, "config", "FILE", "residency config (default: $VT_CONFIG, <prefix>/share/vt/residency.yaml)"},
    {O_VERBOSE_PROMPT, "verbose-prompt", NULL, "print the prompt and its token ids to stderr first"},
    {O_SET, "set", "KEY=VALUE", "override one config key, e.g. --set cuda.expert_cache.headroom=2GiB\n"
                                "(repeatable; vt config --show lists the keys)"},
    {O_SHOW, "show", NULL, "print the resolved config (the default)"},
    {O_JSON, "json", NULL, "print the results as one JSON object"},
    {O_SPARSE, "sparse", NULL, "write the matrices as holes (a tensor table at real sizes for vt fit)"},
    {O_ARCH, "arch", "ARCH", "qwen35moe (default) or gemma4"},
    {O_NO_PROGRESS, "no-progress", NULL, "no progress bar (drawn on stderr only when it is a terminal:\n"
                                         "while the weights come in, a model is written, a split\n"
                                         "model's shards are opened)"},
    {O_JINJA, "jinja", NULL, "chats rendered with the model's own chat template (tokenizer.chat_template),\n"
                             "which is the default; given, vt run chats (implies --chat) and a template\n"
                             "that vt cannot render is an error instead of a fallback"},
    {O_NO_JINJA, "no-jinja", NULL, "chats rendered with vt's built-in template for the model's family\n"
                                   "instead of the model's own (the fallback for a model without one)"},
    {O_CHAT_TEMPLATE_FILE, "chat-template-file", "FILE", "chats rendered with the Jinja chat template in FILE\n"
                                                         "(implies --jinja)"},
    /* llama.cpp's --chat-template takes a template's name; here only a file (the same option) */
    {O_CHAT_TEMPLATE_FILE, "chat-template", "FILE", "the same as --chat-template-file"},
    {O_NO_PREFAULT, "no-prefault", NULL, "weights used in place from the file (CPU): read them at first\n"
                                         "use, not at load (a faster start, a slower first prompt)"},
    {O_PROFILE, "profile", NULL, "then one round with every backend op timed (op, calls, ms per step;\n"
                                 "each op followed by a synchronize)"},
    {O_NO_SPECIAL, "no-special", NULL, "control tokens written in the text stay text"},
    {O_TRACE, "trace", "FILE", "write the routing trace (one line per expert acquire: step, phase,\n"
                               "layer, expert ids) for bench/cache_sim"},
    {O_HOST, "host", "ADDR", "address to bind (default 127.0.0.1)"},
    {O_PORT, "port", "N", "port to bind (default 8080; 0: any free one, printed)"},
    {O_PARALLEL, "parallel", "N", "sequences served at once, each its own KV cache of --ctx tokens"},
    {O_API_KEY, "api-key", "KEY", "require Authorization: Bearer KEY"},
    {O_API_KEY_FILE, "api-key-file", "FILE", "the key from the first line of FILE"},
    {O_QUEUE, "queue", "N", "requests waiting for a slot (default 64; more: 503)"},
    {O_TIMEOUT, "timeout", "S", "close a connection idle for S seconds (default 600)"},
    {O_ALIAS, "alias", "NAME", "the model id in responses and /v1/models (default: the file name)"},
    {O_CORS_ORIGIN, "cors-origin", "ORIGIN", "answer requests from web pages of ORIGIN (or *) with CORS headers"},
};
#define N_OPTIONS (sizeof options / sizeof options[0])

/* vt mkmodel's shape options: name -> vt_mkmodel_params field, with its range. */
static const struct {
    const char *opt;
    size_t off;
    uint32_t lo, hi;
    const char *help;
} mk_fields[] = {
    {"n-embd", offsetof(vt_mkmodel_params, n_embd), 1, 1u << 20, "embedding width n_embd"},
    {"n-layer", offsetof(vt_mkmodel_params, n_layer), 1, 4096, "blocks"},
    {"full-attention-interval", offsetof(vt_mkmodel_params, full_attention_interval), 1, 4096, "qwen35moe: every N-th block is full attention"},
    {"n-head", offsetof(vt_mkmodel_params, n_head), 1, 4096, "attention heads"},
    {"n-head-kv", offsetof(vt_mkmodel_params, n_head_kv), 1, 4096, "KV heads"},
    {"head-dim", offsetof(vt_mkmodel_params, head_dim), 1, 4096, "head width (gemma4: of the full layers)"},
    {"n-rot", offsetof(vt_mkmodel_params, n_rot), 2, 4096, "rotated dims (gemma4: of the full layers)"},
    {"n-expert", offsetof(vt_mkmodel_params, n_expert), 0, 65536, "routed experts (gemma4: 0 = dense)"},
    {"n-expert-used", offsetof(vt_mkmodel_params, n_expert_used), 1, 65536, "experts per token (top-k)"},
    {"n-ff-exp", offsetof(vt_mkmodel_params, n_ff_exp), 1, 1u << 20, "expert FFN width"},
    {"n-ff-shexp", offsetof(vt_mkmodel_params, n_ff_shexp), 1, 1u << 20, "shared-expert FFN width"},
    {"ssm-d-conv", offsetof(vt_mkmodel_params, ssm_d_conv), 1, 1024, "qwen35moe: DeltaNet conv kernel"},
    {"ssm-d-k", offsetof(vt_mkmodel_params, ssm_d_k), 1, 4096, "qwen35moe: DeltaNet key head width"},
    {"ssm-n-k", offsetof(vt_mkmodel_params, ssm_n_k), 1, 4096, "qwen35moe: DeltaNet key heads"},
    {"ssm-n-v", offsetof(vt_mkmodel_params, ssm_n_v), 1, 4096, "qwen35moe: DeltaNet value heads"},
    {"context-length", offsetof(vt_mkmodel_params, context_length), 1, 1u << 24, "trained context written to the file"},
    {"n-merges", offsetof(vt_mkmodel_params, n_merges), 0, 100000, "BPE merges of the vocabulary"},
    {"shards", offsetof(vt_mkmodel_params, n_shards), 1, 9999, "write a split model FILE-0000k-of-0000N.gguf"},
    {"mk-threads", offsetof(vt_mkmodel_params, n_threads), 0, 16, "writer threads (0: every core)"},
    {"n-vocab", offsetof(vt_mkmodel_params, n_vocab), 0, 1u << 22, "pad the vocabulary to N tokens"},
    {"nextn", offsetof(vt_mkmodel_params, n_nextn), 0, 16, "qwen35moe: N MTP blocks after the main ones (never run)"},
    /* gemma4 only */
    {"head-dim-swa", offsetof(vt_mkmodel_params, head_dim_swa), 2, 4096, "gemma4: head width of the sliding layers"},
    {"n-head-kv-full", offsetof(vt_mkmodel_params, n_head_kv_full), 0, 4096, "gemma4: KV heads of the full layers"},
    {"n-ff", offsetof(vt_mkmodel_params, n_ff), 1, 1u << 19, "gemma4: dense FFN width"},
    {"sliding-window", offsetof(vt_mkmodel_params, sliding_window), 1, 1u << 24, "gemma4: sliding window"},
    {"shared-kv-layers", offsetof(vt_mkmodel_params, shared_kv_layers), 0, 4095, "gemma4: last layers reusing KV"},
    {"n-per-layer", offsetof(vt_mkmodel_params, n_per_layer), 0, 1u << 16, "gemma4: per-layer embedding width"},
    {"k-eq-v", offsetof(vt_mkmodel_params, k_eq_v), 0, 1, "gemma4: full layers use K as V (0|1)"},
    {"double-wide-mlp", offsetof(vt_mkmodel_params, double_wide_mlp), 0, 1, "gemma4: shared-KV layers' FFN twice as wide (0|1)"},
};
#define N_MK_FIELDS (sizeof mk_fields / sizeof mk_fields[0])



/* getopt's table: every option above, then the shape options */
static struct option long_opts[N_OPTIONS + N_MK_FIELDS + 1];

static void build_long_opts(void)
{
    _Static_assert(N_MK_FIELDS <= 32, "room for the mkmodel options in opts");
    size_t n = 0;
    for (size_t i = 0; i < N_OPTIONS; i++)
        long_opts[n++] = (struct option){options[i].lng, options[i].arg ? required_argument : no_argument,
                                         0, options[i].id};
    for (size_t i = 0; i < N_MK_FIELDS; i++)
        long_opts[n++] = (struct option){mk_fields[i].opt, required_argument, 0, O_MK_BASE + (int)i};
    long_opts[n] = (struct option){0, 0, 0, 0};
}

static const cli_option *find_option(int id)
{
    for (size_t i = 0; i < N_OPTIONS; i++)
        if (options[i].id == id) return &options[i];
    return NULL;
}

void cli_mk_apply_shape(const opts *o, vt_mkmodel_params *p)
{
    for (size_t i = 0; i < N_MK_FIELDS; i++)
        if (o->mk_set[i]) *(uint32_t *)((char *)p + mk_fields[i].off) = o->mk_val[i];
}

int cli_parse_long(const char *s, long lo, long hi, const char *what, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "vt: %s must be an integer in [%ld, %ld], got '%s'\n", what, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_float(const char *s, const char *what, float *out)
{
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !isfinite(v)) {
        fprintf(stderr, "vt: %s must be a number, got '%s'\n", what, s);
        return -1;
    }
    *out = v;
    return 0;
}


/* A llama.cpp flag where getopt would read an option ("-ngl 99" would be
 * "-n gl"): said with what vt does instead, -1. The separate argument of a
 * vt option is skipped (a prompt "-c" stays a prompt). */
static int llama_flag_refused(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) return 0;
        if (a[0] != '-' || !a[1]) continue;
        const char *hint = cli_llama_hint(a);
        if (hint) {
            fprintf(stderr, "vt: '%s' is a llama.cpp flag: %s\n", a, hint);
            return -1;
        }
        if (a[1] != '-') {
            if (!a[2] && strchr("mpfnto", a[1])) i++; /* -m FILE */
        } else if (!strchr(a, '=')) {
            for (size_t k = 0; long_opts[k].name; k++)
                if (!strcmp(long_opts[k].name, a + 2)) {
                    if (long_opts[k].has_arg == required_argument) i++; /* --prompt TEXT */
                    break;
                }
        }
    }
    return 0;
}

static int parse_argv(int argc, char **argv, opts *o)
{
    memset(o, 0, sizeof *o);
    build_long_opts();
    if (llama_flag_refused(argc, argv)) return -1;
    o->n_predict = 64;
    o->port = 8080;
    o->queue = 64;
    o->timeout = 600;
    o->sp = (vt_sampler_params){.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f};
    long v;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:p:f:n:t:o:vqh", long_opts, NULL)) != -1) {
        if (c != '?' && c != ':' && o->n_seen < (int)(sizeof o->seen / sizeof o->seen[0]))
            o->seen[o->n_seen++] = c;
        switch (c) {
        case 'm': o->model = optarg; break;
        case 'p': o->prompt = optarg; break;
        case 'f': o->prompt_file = optarg; break;
        case 'n':
            if (cli_parse_long(optarg, -1, INT_MAX, "-n", &v)) return -1;
            o->n_predict = (int)v;
            o->n_predict_set = 1;
            break;
        case 't': if (cli_parse_long(optarg, 0, 4096, "--threads", &v)) return -1; o->threads = (int)v; break;
        case 'o': o->output = optarg; break;
        case 'v': vt_log_set_level(VT_LOG_INFO); break;
        case 'q':
            o->quiet = 1;
            vt_log_set_level(VT_LOG_ERROR);
            break;
        case O_NO_PROGRESS: o->no_progress = 1; break;
        case O_NO_PREFAULT: o->no_prefault = 1; break;
        case O_JINJA: o->jinja = 1; break;
        case O_NO_JINJA: o->no_jinja = 1; break;
        case O_CHAT_TEMPLATE_FILE:
            o->chat_template_file = optarg;
            o->jinja = 1;
            break;
        case O_PROFILE: o->profile = 1; break;
        case O_TRACE: o->trace = optarg; break;
        case O_NO_SPECIAL: o->no_special = 1; break;
        case O_HOST: o->host = optarg; break;
        case O_PORT: if (cli_parse_long(optarg, 0, 65535, "--port", &v)) return -1; o->port = (int)v; break;
        case O_PARALLEL: if (cli_parse_long(optarg, 1, 256, "--parallel", &v)) return -1; o->parallel = (int)v; break;
        case O_API_KEY: o->api_key = optarg; break;
        case O_API_KEY_FILE: o->api_key_file = optarg; break;
        case O_QUEUE: if (cli_parse_long(optarg, 0, 100000, "--queue", &v)) return -1; o->queue = (int)v; break;
        case O_TIMEOUT: if (cli_parse_long(optarg, 1, 86400, "--timeout", &v)) return -1; o->timeout = (int)v; break;
        case O_ALIAS: o->alias = optarg; break;
        case O_CORS_ORIGIN: o->cors_origin = optarg; break;
        case 'h': o->help = 1; break;
        case O_TEMP:
            if (parse_float(optarg, "--temp", &o->sp.temperature)) return -1;
            if (o->sp.temperature < 0) {
                fprintf(stderr, "vt: --temp must be >= 0 (0 = greedy), got '%s'\n", optarg);
                return -1;
            }
            break;
        case O_TOPK: if (cli_parse_long(optarg, 0, INT_MAX, "--top-k", &v)) return -1; o->sp.top_k = (int32_t)v; break;
        case O_TOPP:
            if (parse_float(optarg, "--top-p", &o->sp.top_p)) return -1;
            if (o->sp.top_p <= 0 || o->sp.top_p > 1) {
                fprintf(stderr, "vt: --top-p must be in (0, 1] (1 = off), got '%s'\n", optarg);
                return -1;
            }
            break;
        case O_MINP:
            if (parse_float(optarg, "--min-p", &o->sp.min_p)) return -1;
            if (o->sp.min_p < 0 || o->sp.min_p > 1) {
                fprintf(stderr, "vt: --min-p must be in [0, 1] (0 = off), got '%s'\n", optarg);
                return -1;
            }
            break;
        case O_SEED: {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(optarg, &end, 10);
            if (errno || *end || end == optarg || optarg[0] == '-') {
                fprintf(stderr, "vt: --seed must be a non-negative integer, got '%s'\n", optarg);
                return -1;
            }
            o->sp.seed = s;
            o->have_seed = 1;
            break;
        }
        case O_CHAT: o->chat = 1; break;
        case O_SYSTEM: o->system = optarg; break;
        case O_STATS: o->stats = 1; break;
        case O_IDS: o->ids = 1; break;
        case O_TOKENS: o->tokens = optarg; break;
        case O_DEVICE:
            if (!optarg[0]) {
                fprintf(stderr, "vt: --device needs a platform name (cpu, cuda, rocm, unified or a "
                                "backend plugin's name), got an empty string\n");
                return -1;
            }
            o->device = optarg;
            break;
        case O_PLUGIN_DIR: o->plugin_dir = optarg; break;
        case O_KERNELS:
            if (strcmp(optarg, "auto") && strcmp(optarg, "scalar") && strcmp(optarg, "avx2") &&
                strcmp(optarg, "avx512")) {
                fprintf(stderr, "vt: --kernels must be auto, scalar, avx2 or avx512, got '%s'\n", optarg);
                return -1;
            }
            o->kernels = optarg;
            break;
        case O_CTX: if (cli_parse_long(optarg, 1, 1L << 24, "--ctx", &v)) return -1; o->ctx = (uint32_t)v; break;
        case O_BATCH: if (cli_parse_long(optarg, 1, 1L << 16, "--batch", &v)) return -1; o->batch = (uint32_t)v; break;
        case O_TYPE: o->type = optarg; break;
        case O_IGNORE_EOS: o->ignore_eos = 1; break;
        case O_CONFIG: o->config = optarg; break;
        case O_SET:
            if (o->n_sets == (int)(sizeof o->sets / sizeof o->sets[0])) {
                fprintf(stderr, "vt: at most %zu --set options\n", sizeof o->sets / sizeof o->sets[0]);
                return -1;
            }
            o->sets[o->n_sets++] = optarg;
            break;
        case O_SHOW: o->show = 1; break;
        case O_JSON: o->json = 1; break;
        case O_SPARSE: o->mk_sparse = 1; break;
        case O_ARCH: o->mk_arch = optarg; break;
        case O_VERBOSE_PROMPT: o->verbose_prompt = 1; break;
        case O_NPROMPT: if (cli_parse_long(optarg, 1, 1L << 20, "--n-prompt", &v)) return -1; o->n_prompt = (int)v; break;
        case O_REPS: if (cli_parse_long(optarg, 1, 1000, "--reps", &v)) return -1; o->reps = (int)v; break;
        default:
            if (c >= O_MK_BASE && c < O_MK_BASE + (int)N_MK_FIELDS) {
                size_t i = (size_t)(c - O_MK_BASE);
                char what[64];
                snprintf(what, sizeof what, "--%s", mk_fields[i].opt);
                if (cli_parse_long(optarg, mk_fields[i].lo, mk_fields[i].hi, what, &v)) return -1;
                o->mk_val[i] = (uint32_t)v;
                o->mk_set[i] = 1;
                break;
            }
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "vt: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    return 0;
}

/* "-m/--model", "--chat" for getopt code c */
static const char *option_name(int c, char *buf, size_t cap)
{
    const char *lng = NULL;
    for (size_t i = 0; long_opts[i].name; i++)
        if (long_opts[i].val == c) {
            lng = long_opts[i].name;
            break;
        }
    if (c < 128 && lng) snprintf(buf, cap, "-%c/--%s", c, lng);
    else if (c < 128) snprintf(buf, cap, "-%c", c);
    else snprintf(buf, cap, "--%s", lng ? lng : "?");
    return buf;
}

static int command_reads(const cli_command *cmd, int c)
{
    if (c == 'v' || c == 'q' || c == 'h') return 1;
    for (const cli_opt_use *u = cmd->options; u->id; u++)
        if (u->id == c || (u->id == O_MK_SHAPE && c >= O_MK_BASE && c < O_MK_BASE + (int)N_MK_FIELDS))
            return 1;
    return 0;
}

int cli_parse_options(const cli_command *cmd, int argc, char **argv, opts *o)
{
    if (parse_argv(argc, argv, o) != 0) {
        if (o->help) return 0;
        fprintf(stderr, "run 'vt %s --help' for its options\n", cmd->name);
        return -1;
    }
    if (o->help) return 0;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (o->threads > 0 && cores > 0 && o->threads > cores)
        vt_log(VT_LOG_WARN, "--threads %d is more than the %ld online cores: the extra threads "
               "take turns on them (0: one per core)", o->threads, cores);
    /* an option the command does not read is a usage error that names it,
     * so that no option is accepted and then silently dropped */
    for (int k = 0; k < o->n_seen; k++) {
        if (command_reads(cmd, o->seen[k])) continue;
        char nm[64];
        fprintf(stderr, "vt %s: %s does not apply to this command ('vt %s --help' lists what it "
                "takes)\n", cmd->name, option_name(o->seen[k], nm, sizeof nm), cmd->name);
        return -1;
    }
    return 0;
}

/* "  -m, --model FILE" / "      --ctx N", padded to the help column; the help
 * text's lines after the first indented to it. */
static void print_option(FILE *f, int id, const char *lng, const char *arg, const char *help)
{
    char left[64];
    if (id < 128) snprintf(left, sizeof left, "  -%c, --%s%s%s", id, lng, arg ? " " : "", arg ? arg : "");
    else snprintf(left, sizeof left, "      --%s%s%s", lng, arg ? " " : "", arg ? arg : "");
    fprintf(f, "%-26s", left);
    if (strlen(left) >= 26) fprintf(f, "\n%26s", "");
    for (const char *p = help; *p; p++) {
        fputc(*p, f);
        if (*p == '\n') fprintf(f, "%26s", "");
    }
    fputc('\n', f);
}

void cli_print_command_help(const cli_command *cmd, FILE *f)
{
    fprintf(f, "usage: vt %s %s\n\n%s", cmd->name, cmd->synopsis, cmd->help ? cmd->help : "");
    fprintf(f, "%soptions:\n", cmd->help ? "\n" : "");
    for (const cli_opt_use *u = cmd->options; u->id; u++) {
        if (u->id == O_MK_SHAPE) {
            for (size_t i = 0; i < N_MK_FIELDS; i++) {
                char help[96];
                snprintf(help, sizeof help, "%s (%u .. %u)", mk_fields[i].help, mk_fields[i].lo,
                         mk_fields[i].hi);
                print_option(f, O_MK_BASE + (int)i, mk_fields[i].opt, "N", help);
            }
            continue;
        }
        const cli_option *d = find_option(u->id);
        if (!d) continue;
        print_option(f, d->id, d->lng, u->arg ? u->arg : d->arg, u->help ? u->help : d->help);
    }
    for (int c = 'v'; c; c = c == 'v' ? 'q' : c == 'q' ? 'h' : 0) {
        const cli_option *d = find_option(c);
        print_option(f, d->id, d->lng, d->arg, d->help);
    }
}
