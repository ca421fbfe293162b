/*
 * main.c - the vt command: its options, the helpers every subcommand shares
 * (cli.h), and vt run; logits, tokenize, info, plugins, config, fit and mkmodel
 * are in cmd_inspect.c, vt bench in bench.c, vt serve in serve.c.
 *
 * Each subcommand parses its own options (getopt_long) and reports failures
 * as "vt <cmd>: <message>" with the core's error text, exit status 1 (2 for
 * usage errors).
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli.h"
#include "engine.h"
#include "expert_streamer.h"
#include "error.h"
#include "gguf_guard.h"
#include "mkmodel.h"
#include "progress.h"
#include "registry.h"
#include "sampler.h"
#include "tokenizer.h"

#define VT_VERSION_STRING "0.1.0"
#ifndef VT_PLUGIN_REL_DIR /* set by core/CMakeLists.txt from the install layout */
#define VT_PLUGIN_REL_DIR "../lib/vt/plugins"
#endif

static const char *usage_text =
    "usage: vt <command> [options]\n"
    "\n"
    "commands:\n"
    "  run       [-m MODEL] -p PROMPT [-n N] [-t THREADS] [--temp T] [--top-k K] [--top-p P]\n"
    "            [--min-p P] [--seed S] [--chat] [--system TEXT] [--stats] [--ids]\n"
    "            [--ignore-eos] [--verbose-prompt] [--no-special]\n"
    "            generate text (streams to stdout; --ids: token ids instead); --no-special:\n"
    "            control tokens written in the prompt (or --chat messages) stay text;\n"
    "            without -m,\n"
    "            the shipped demo model (" VT_DEMO_MODEL_NAME ", a small trained\n"
    "            qwen35moe: see the README)\n"
    "  logits    -m MODEL --tokens 1,2,3 -o FILE   write float32 logits [n_tokens][n_vocab]\n"
    "  tokenize  -m MODEL -p TEXT [--no-special]   print the token ids\n"
    "  info      -m MODEL                          metadata, tensor table, totals\n"
    "  plugins                                     list plugins and their capabilities\n"
    "  config    [--show]                          print the resolved residency config and\n"
    "                                              where each value came from\n"
    "  fit       -m MODEL [--device D] [--ctx N] [--parallel N]\n"
    "                                              the fit check: what goes where, and whether\n"
    "                                              it fits the device (exit 1 when not)\n"
    "  mkmodel   -o FILE [--type T] [--seed S] [--shards N] [--sparse]\n"
    "            T: f32 f16 bf16 (default) q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k\n"
    "            iq4_nl iq4_xs mxfp4, or the mixes q4_k_m q5_k_m (Q6_K output and ffn_down);\n"
    "            the low-bit iq2_xxs iq2_xs iq2_s iq3_xxs iq3_s iq1_s iq1_m iq1_xs iq1_xxs\n"
    "            iq1_xxxs tq1_0 tq2_0 nvfp4 q1_0 q2_0 (random valid blocks) and the UD mixes\n"
    "            ud-iq1_xxxs ud-iq2_xs ud-iq1_s\n"
    "            [--n-embd N] [--n-layer N] [--n-head N] [--n-head-kv N] [--head-dim N]\n"
    "            [--n-rot N] [--n-expert N] [--n-expert-used K] [--n-ff-exp N] [--n-ff-shexp N]\n"
    "            [--ssm-d-k N] [--ssm-n-k N] [--ssm-n-v N] [--n-merges N] [--context-length N]\n"
    "            [--n-vocab N] (pad the vocabulary to N tokens) [--arch qwen35moe|gemma4]\n"
    "            qwen35moe: [--nextn N] (N MTP blocks after the main ones, never run)\n"
    "            gemma4: [--n-ff N] [--head-dim-swa N] [--n-head-kv-full N]\n"
    "            [--sliding-window N] [--shared-kv-layers N] [--n-per-layer P] [--k-eq-v 0|1]\n"
    "            [--double-wide-mlp 0|1] (--n-expert 0: dense; --head-dim, --n-rot: full layers)\n"
    "            write a random-weight qwen35moe or gemma4 model of any shape\n"
    "  bench     -m MODEL [-p N] [-n N] [--reps R] [--json] [--profile] [--trace FILE]\n"
    "            [--parallel N]\n"
    "            [--set ...] prefill/decode tokens/s (median), expert hit rate (with\n"
    "            Belady's optimum on the same routing), fill GB/s, peak RSS;\n"
    "            --trace FILE: write the routing trace (one line per expert acquire:\n"
    "            step, phase, layer, expert ids) for bench/cache_sim;\n"
    "            --profile: then one round with every backend op timed (op, calls,\n"
    "            ms per step; each op followed by a synchronize);\n"
    "            --parallel N: then 1, 2, 4 .. N sequences decoding together (vt serve's\n"
    "            rounds): aggregate tok/s next to one sequence after another\n"
    "  serve     -m MODEL [--host ADDR] [--port N] [--parallel N] [--ctx N] [--queue N]\n"
    "            [--api-key KEY | --api-key-file F] [--timeout S] [--alias NAME]\n"
    "            [--cors-origin ORIGIN|*]\n"
    "            an OpenAI-compatible HTTP server (POST /v1/chat/completions,\n"
    "            /v1/completions, /tokenize, /detokenize; GET /v1/models, /health,\n"
    "            /metrics); binds 127.0.0.1:8080 unless told; --parallel N slots\n"
    "            (each its own KV cache of --ctx tokens), --queue N waiting (default\n"
    "            64; more: 503), --timeout S closes idle connections (default 600);\n"
    "            without an API key only Host names of the bind address and\n"
    "            application/json bodies are taken; a request from a web page\n"
    "            (Origin) only where --cors-origin allows it\n"
    "\n"
    "common options:\n"
    "  -m, --model FILE      GGUF file (a split model: its first shard)\n"
    "  -t, --threads N       CPU threads (default: every core)\n"
    "  --device NAME         platform of the residency config: cpu, cuda, rocm, unified\n"
    "                        (default: the config's defaults.platform)\n"
    "  --plugin-dir DIR      search DIR for plugins first (also VT_PLUGIN_PATH)\n"
    "  --config FILE         residency config (default: $VT_CONFIG, <prefix>/share/vt/residency.yaml)\n"
    "  --set KEY=VALUE       override one config key, e.g. --set cuda.expert_cache.headroom=2GiB\n"
    "                        (repeatable; see vt config --show for the keys)\n"
    "  --kernels SET         auto | scalar | avx2 | avx512; scalar = plain float32\n"
    "                        reference kernels (also env VT_KERNELS)\n"
    "  --ctx N               KV cache length in tokens (default min(trained, 4096))\n"
    "  --batch N             prefill chunk size in tokens (default 512)\n"
    "  -v, --verbose         log INFO (VT_LOG_LEVEL=debug for more)\n"
    "  -q, --quiet           log errors only, no progress bar\n"
    "  --no-progress         no progress bar while weights are copied to the device\n"
    "                        (it is drawn on stderr only when stderr is a terminal)\n"
    "\n"
    "files:\n"
    "  plugins   searched in --plugin-dir, VT_PLUGIN_PATH, then <bindir>/" VT_PLUGIN_REL_DIR "\n"
    "            (each NAME.so with its manifest NAME.ini)\n"
    "  config    <bindir>/../share/vt/residency.yaml (the default residency config)\n"
    "  SDK       <prefix>/include/vt/*.h, <libdir>/pkgconfig/vt-plugin.pc,\n"
    "            <libdir>/cmake/vt (find_package(vt)); docs/writing-a-model-plugin.md\n";


/* vt mkmodel's shape options: name -> vt_mkmodel_params field. */
static const struct {
    const char *opt;
    size_t off;
    uint32_t lo, hi;
} mk_fields[] = {
    {"n-embd", offsetof(vt_mkmodel_params, n_embd), 1, 1u << 20},
    {"n-layer", offsetof(vt_mkmodel_params, n_layer), 1, 4096},
    {"full-attention-interval", offsetof(vt_mkmodel_params, full_attention_interval), 1, 4096},
    {"n-head", offsetof(vt_mkmodel_params, n_head), 1, 4096},
    {"n-head-kv", offsetof(vt_mkmodel_params, n_head_kv), 1, 4096},
    {"head-dim", offsetof(vt_mkmodel_params, head_dim), 1, 4096},
    {"n-rot", offsetof(vt_mkmodel_params, n_rot), 2, 4096},
    {"n-expert", offsetof(vt_mkmodel_params, n_expert), 0, 65536}, /* gemma4: 0 = dense */
    {"n-expert-used", offsetof(vt_mkmodel_params, n_expert_used), 1, 65536},
    {"n-ff-exp", offsetof(vt_mkmodel_params, n_ff_exp), 1, 1u << 20},
    {"n-ff-shexp", offsetof(vt_mkmodel_params, n_ff_shexp), 1, 1u << 20},
    {"ssm-d-conv", offsetof(vt_mkmodel_params, ssm_d_conv), 1, 1024},
    {"ssm-d-k", offsetof(vt_mkmodel_params, ssm_d_k), 1, 4096},
    {"ssm-n-k", offsetof(vt_mkmodel_params, ssm_n_k), 1, 4096},
    {"ssm-n-v", offsetof(vt_mkmodel_params, ssm_n_v), 1, 4096},
    {"context-length", offsetof(vt_mkmodel_params, context_length), 1, 1u << 24},
    {"n-merges", offsetof(vt_mkmodel_params, n_merges), 0, 100000},
    {"shards", offsetof(vt_mkmodel_params, n_shards), 1, 9999},
    {"mk-threads", offsetof(vt_mkmodel_params, n_threads), 0, 16},
    {"n-vocab", offsetof(vt_mkmodel_params, n_vocab), 0, 1u << 22},
    {"nextn", offsetof(vt_mkmodel_params, n_nextn), 0, 16}, /* qwen35moe only */
    /* gemma4 only */
    {"head-dim-swa", offsetof(vt_mkmodel_params, head_dim_swa), 2, 4096},
    {"n-head-kv-full", offsetof(vt_mkmodel_params, n_head_kv_full), 0, 4096},
    {"n-ff", offsetof(vt_mkmodel_params, n_ff), 1, 1u << 19},
    {"sliding-window", offsetof(vt_mkmodel_params, sliding_window), 1, 1u << 24},
    {"shared-kv-layers", offsetof(vt_mkmodel_params, shared_kv_layers), 0, 4095},
    {"n-per-layer", offsetof(vt_mkmodel_params, n_per_layer), 0, 1u << 16},
    {"k-eq-v", offsetof(vt_mkmodel_params, k_eq_v), 0, 1},
    {"double-wide-mlp", offsetof(vt_mkmodel_params, double_wide_mlp), 0, 1},
};
#define N_MK_FIELDS (sizeof mk_fields / sizeof mk_fields[0])

void cli_mk_apply_shape(const opts *o, vt_mkmodel_params *p)
{
    for (size_t i = 0; i < N_MK_FIELDS; i++)
        if (o->mk_set[i]) *(uint32_t *)((char *)p + mk_fields[i].off) = o->mk_val[i];
}

enum {
    O_TEMP = 1000, O_TOPK, O_TOPP, O_MINP, O_SEED, O_CHAT, O_SYSTEM, O_STATS, O_IDS, O_TOKENS,
    O_DEVICE, O_PLUGIN_DIR, O_KERNELS, O_CTX, O_BATCH, O_TYPE, O_IGNORE_EOS, O_NPROMPT, O_REPS, O_CONFIG, O_VERBOSE_PROMPT, O_SET, O_SHOW, O_JSON, O_SPARSE, O_ARCH, O_NO_PROGRESS, O_PROFILE, O_NO_SPECIAL, O_TRACE, O_HOST, O_PORT, O_PARALLEL, O_API_KEY, O_API_KEY_FILE, O_QUEUE, O_TIMEOUT, O_ALIAS, O_CORS_ORIGIN, O_MK_BASE = 1200
};

static struct option long_opts[] = {
    {"model", required_argument, 0, 'm'},   {"prompt", required_argument, 0, 'p'},
    {"n-predict", required_argument, 0, 'n'}, {"threads", required_argument, 0, 't'},
    {"output", required_argument, 0, 'o'},  {"verbose", no_argument, 0, 'v'},
    {"help", no_argument, 0, 'h'},          {"temp", required_argument, 0, O_TEMP},
    {"top-k", required_argument, 0, O_TOPK}, {"top-p", required_argument, 0, O_TOPP},
    {"min-p", required_argument, 0, O_MINP}, {"seed", required_argument, 0, O_SEED},
    {"chat", no_argument, 0, O_CHAT},       {"system", required_argument, 0, O_SYSTEM},
    {"stats", no_argument, 0, O_STATS},     {"ids", no_argument, 0, O_IDS},
    {"tokens", required_argument, 0, O_TOKENS}, {"device", required_argument, 0, O_DEVICE},
    {"plugin-dir", required_argument, 0, O_PLUGIN_DIR}, {"kernels", required_argument, 0, O_KERNELS},
    {"ctx", required_argument, 0, O_CTX},   {"batch", required_argument, 0, O_BATCH},
    {"type", required_argument, 0, O_TYPE}, {"ignore-eos", no_argument, 0, O_IGNORE_EOS},
    {"set", required_argument, 0, O_SET}, {"show", no_argument, 0, O_SHOW}, {"json", no_argument, 0, O_JSON},
    {"sparse", no_argument, 0, O_SPARSE}, {"arch", required_argument, 0, O_ARCH},
    {"quiet", no_argument, 0, 'q'}, {"no-progress", no_argument, 0, O_NO_PROGRESS},
    {"profile", no_argument, 0, O_PROFILE}, {"no-special", no_argument, 0, O_NO_SPECIAL},
    {"trace", required_argument, 0, O_TRACE},
    {"host", required_argument, 0, O_HOST}, {"port", required_argument, 0, O_PORT},
    {"parallel", required_argument, 0, O_PARALLEL}, {"api-key", required_argument, 0, O_API_KEY},
    {"api-key-file", required_argument, 0, O_API_KEY_FILE}, {"queue", required_argument, 0, O_QUEUE},
    {"timeout", required_argument, 0, O_TIMEOUT}, {"alias", required_argument, 0, O_ALIAS},
    {"cors-origin", required_argument, 0, O_CORS_ORIGIN},
    {"config", required_argument, 0, O_CONFIG}, {"verbose-prompt", no_argument, 0, O_VERBOSE_PROMPT}, {"n-prompt", required_argument, 0, O_NPROMPT}, {"reps", required_argument, 0, O_REPS},
    /* room for the mkmodel shape options (mk_fields), filled in by add_mk_options() */
    {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0},
    {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0},
    {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0},
    {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0},
    {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0},
    {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}};

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

static void add_mk_options(void)
{
    _Static_assert(N_MK_FIELDS <= 32, "room for the mkmodel options in long_opts");
    size_t n = 0;
    while (long_opts[n].name) n++;
    for (size_t i = 0; i < N_MK_FIELDS; i++)
        long_opts[n + i] = (struct option){mk_fields[i].opt, required_argument, 0, O_MK_BASE + (int)i};
}

static int parse_opts(int argc, char **argv, opts *o)
{
    memset(o, 0, sizeof *o);
    add_mk_options();
    o->n_predict = 64;
    o->port = 8080;
    o->queue = 64;
    o->timeout = 600;
    o->sp = (vt_sampler_params){.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f};
    long v;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:p:n:t:o:vqh", long_opts, NULL)) != -1) {
        if (c != '?' && c != ':' && o->n_seen < (int)(sizeof o->seen / sizeof o->seen[0]))
            o->seen[o->n_seen++] = c;
        switch (c) {
        case 'm': o->model = optarg; break;
        case 'p': o->prompt = optarg; break;
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
        case 'h': fputs(usage_text, stdout); exit(0);
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

/* ------------------------------------------------------------------ options per command */

/* The options each command reads (getopt codes; 0 ends a list). -v and -q
 * apply everywhere. Anything else given to a command is a usage error that
 * names it, so that no option is accepted and then silently dropped. */
#define ENGINE_OPTS 'm', 't', O_DEVICE, O_PLUGIN_DIR, O_KERNELS, O_CTX, O_BATCH, O_CONFIG, O_SET, \
                    O_NO_PROGRESS
static const int opts_run[] = {ENGINE_OPTS, 'p', 'n', O_TEMP, O_TOPK, O_TOPP, O_MINP, O_SEED,
                               O_CHAT, O_SYSTEM, O_STATS, O_IDS, O_IGNORE_EOS, O_VERBOSE_PROMPT,
                               O_NO_SPECIAL, 0};
static const int opts_logits[] = {ENGINE_OPTS, O_TOKENS, 'o', 0};
static const int opts_tokenize[] = {'m', 'p', O_NO_SPECIAL, 0};
static const int opts_info[] = {'m', 0};
static const int opts_plugins[] = {O_PLUGIN_DIR, 0};
static const int opts_config[] = {O_CONFIG, O_SET, O_DEVICE, O_SHOW, 0};
static const int opts_fit[] = {'m', O_DEVICE, O_CTX, O_BATCH, O_PARALLEL, O_PLUGIN_DIR, O_CONFIG, O_SET, 0};
static const int opts_mkmodel[] = {'o', O_TYPE, O_SEED, O_SPARSE, O_ARCH, -1 /* + the shape options */, 0};
static const int opts_serve[] = {ENGINE_OPTS, O_HOST, O_PORT, O_PARALLEL, O_API_KEY,
                                 O_API_KEY_FILE, O_QUEUE, O_TIMEOUT, O_ALIAS, O_CORS_ORIGIN, 0};
static const int opts_bench[] = {ENGINE_OPTS, 'p', 'n', O_REPS, O_JSON, O_PROFILE, O_TRACE, O_NPROMPT,
                                 O_PARALLEL, 0};

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

/* 0 when every option given applies to cmd, else a usage message on stderr and -1. */
static int options_apply(const char *cmd, const opts *o)
{
    static const struct { const char *cmd; const int *ok; } table[] = {
        {"run", opts_run},         {"logits", opts_logits}, {"tokenize", opts_tokenize},
        {"info", opts_info},       {"plugins", opts_plugins}, {"config", opts_config},
        {"fit", opts_fit},         {"mkmodel", opts_mkmodel}, {"bench", opts_bench},
        {"serve", opts_serve}};
    const int *ok = NULL;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (!strcmp(table[i].cmd, cmd)) ok = table[i].ok;
    if (!ok) return 0; /* an unknown command is reported by main */
    for (int k = 0; k < o->n_seen; k++) {
        const int c = o->seen[k];
        int fine = c == 'v' || c == 'q';
        for (const int *p = ok; !fine && *p; p++)
            fine = *p == c || (*p == -1 && c >= O_MK_BASE && c < O_MK_BASE + (int)N_MK_FIELDS);
        if (!fine) {
            char nm[64];
            fprintf(stderr, "vt %s: %s does not apply to this command (vt --help lists what "
                    "each command takes)\n", cmd, option_name(c, nm, sizeof nm));
            return -1;
        }
    }
    return 0;
}

int cli_fail(const char *cmd)
{
    fprintf(stderr, "vt %s: %s\n", cmd, vt_last_error()[0] ? vt_last_error() : "failed");
    return 1;
}

double cli_now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The residency config: the file found (or --config), then every --set.
 * A run (warn_unselected) warns, naming it, about every --set of a platform
 * other than the one it uses (--device, else defaults.platform): such a
 * setting is accepted and has no effect. */
vt_status cli_load_config(const opts *o, vt_config *cfg, int warn_unselected)
{
    vt_status st = vt_config_load(o->config, cfg);
    for (int i = 0; st == VT_OK && i < o->n_sets; i++) st = vt_config_set_arg(cfg, o->sets[i]);
    if (st != VT_OK || !warn_unselected) return st;
    const char *sel = o->device ? o->device : cfg->default_platform;
    for (int i = 0; i < o->n_sets; i++) {
        const char *k = o->sets[i];
        while (*k == ' ' || *k == '\t') k++;
        if (!strncmp(k, "platforms.", 10)) k += 10;
        size_t n = strcspn(k, ".=");
        if ((n == 7 && !strncmp(k, "version", 7)) || (n == 8 && !strncmp(k, "defaults", 8)) ||
            (n == 6 && !strncmp(k, "models", 6)))
            continue;
        if (strlen(sel) != n || strncmp(k, sel, n))
            vt_log(VT_LOG_WARN, "--set %s: platform '%.*s' is not the one this run uses ('%s'); "
                   "the setting has no effect", o->sets[i], (int)n, k, sel);
    }
    return st;
}

/* The load-progress bar on stderr: redrawn at most every 0.1 s, finished
 * with a newline at 100% (or by progress_end when the load stops early). */
typedef struct progress_bar {
    char label[96];
    double last;
    int drawn, ended, cols;
} progress_bar;

static void progress_draw(void *user, const char *phase, uint64_t done, uint64_t total,
                          double seconds)
{
    (void)phase;
    progress_bar *b = user;
    double t = cli_now_seconds();
    if (b->ended || (done < total && b->drawn && t - b->last < 0.1)) return;
    /* the line must fit the terminal, or every redraw leaves a wrapped row
     * behind: the bar shrinks to 10 cells, then the label is cut */
    char line[512];
    int width = 30;
    size_t len = vt_progress_format(line, sizeof line, b->label, done, total, seconds, width);
    if (b->cols > 0 && len > (size_t)b->cols - 1) {
        int over = (int)(len - (size_t)(b->cols - 1));
        width = width - over < 10 ? 10 : width - over;
        len = vt_progress_format(line, sizeof line, b->label, done, total, seconds, width);
        if (len > (size_t)b->cols - 1 && len < sizeof line) {
            /* drop characters from the label's end, keeping the bar and numbers */
            size_t cut = len - (size_t)(b->cols - 1), lab = strlen(b->label);
            if (cut > lab) cut = lab;
            memmove(line + lab - cut, line + lab, len - lab + 1);
        }
    }
    fprintf(stderr, "\r%s\033[K", line);
    if (done >= total) {
        fputc('\n', stderr);
        b->ended = 1;
    }
    fflush(stderr);
    b->drawn = 1;
    b->last = t;
}

static void progress_end(progress_bar *b)
{
    if (b->drawn && !b->ended) fputc('\n', stderr);
    b->ended = 1;
}

vt_status cli_open_engine(const opts *o, vt_engine **e)
{
    static vt_config cfg; /* large; one per process */
    vt_status st = cli_load_config(o, &cfg, 1);
    if (st != VT_OK) return st;
    progress_bar bar = {.last = 0};
    const char *base = strrchr(o->model, '/');
    snprintf(bar.label, sizeof bar.label, "vt: loading %s", base ? base + 1 : o->model);
    /* a terminal only; not with -v (log lines would run into the bar) */
    const char *term = getenv("TERM");
    int show = !o->no_progress && !o->quiet && isatty(STDERR_FILENO) &&
               vt_log_get_level() < VT_LOG_INFO && !(term && !strcmp(term, "dumb"));
    struct winsize ws;
    if (show && ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) bar.cols = ws.ws_col;
    vt_engine_params p = {.model_path = o->model, .plugin_dir = o->plugin_dir, .device = o->device,
                          .n_threads = o->threads, .kernels = o->kernels, .n_ctx = o->ctx,
                          .n_batch = o->batch, .config = &cfg,
                          .progress = show ? progress_draw : NULL, .progress_user = &bar,
                          .profile = o->profile, .n_seq = (uint32_t)o->parallel};
    st = vt_engine_open(&p, e);
    progress_end(&bar);
    return st;
}

/* vt run without -m: the shipped demo model, installed beside the binary
 * (<bindir>/VT_MODELS_REL_DIR, e.g. ../share/vt/models) or, for the vt of a
 * build tree only, the source tree's models/. */
static const char *default_model(void)
{
    static char path[4096];
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return NULL;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return NULL;
    *slash = 0;
    snprintf(path, sizeof path, "%s/" VT_MODELS_REL_DIR "/%s", exe, VT_DEMO_MODEL_NAME);
    if (access(path, R_OK) == 0) return path;
    if (!strcmp(exe, VT_BUILD_BIN_DIR)) {
        snprintf(path, sizeof path, "%s/%s", VT_SOURCE_MODELS_DIR, VT_DEMO_MODEL_NAME);
        if (access(path, R_OK) == 0) return path;
    }
    return NULL;
}

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
            vt_config_format_bytes(vt_streamer_host_pinned_bytes(s), pb, sizeof pb),
            (unsigned long long)h.hits, (unsigned long long)h.misses,
            hu ? 100.0 * (double)h.hits / (double)hu : 0.0, (double)h.bytes_read / 1048576.0,
            h.read_seconds, h.read_seconds > 0 ? (double)h.bytes_read / h.read_seconds / 1e9 : 0.0,
            (unsigned long long)h.evictions, (unsigned long long)h.errors);
}

/* --trace FILE: "# vt routing trace" header, then one line per acquire:
 * step phase layer id id ... (phase 0 warm-up, 1 prefill, 2 decode). */
vt_status cli_write_trace(const char *path, const vt_expert_streamer *s)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        vt_set_error("--trace %s: cannot create it: %s", path, strerror(errno));
        return VT_ERR_IO;
    }
    const vt_streamer_trace *t = vt_streamer_get_trace(s);
    fprintf(f, "# vt routing trace v1: step phase(0 warm-up, 1 prefill, 2 decode) layer expert-ids...\n");
    uint32_t l0 = 0;
    while (l0 < vt_streamer_n_layers(s) && !vt_streamer_n_matrices(s, l0)) l0++;
    fprintf(f, "# layers %u matrices %u experts %llu slots %llu host_slots %llu\n",
            vt_streamer_n_layers(s), l0 < vt_streamer_n_layers(s) ? vt_streamer_n_matrices(s, l0) : 0,
            (unsigned long long)(l0 < vt_streamer_n_layers(s) ? vt_streamer_n_experts(s, l0) : 0),
            (unsigned long long)vt_streamer_n_slots(s),
            (unsigned long long)vt_streamer_n_host_slots(s));
    for (size_t a = 0; a < t->n_acquires; a++) {
        fprintf(f, "%zu %u %u", a, t->phase[a], t->layer[a]);
        for (uint64_t i = t->off[a]; i < t->off[a + 1]; i++) fprintf(f, " %d", t->ids[i]);
        fputc('\n', f);
    }
    if (fclose(f) != 0 || t->truncated) {
        vt_set_error("--trace %s: %s", path, t->truncated ? "the trace ran out of memory"
                                                          : strerror(errno));
        return VT_ERR_IO;
    }
    return VT_OK;
}

double cli_peak_rss_mib(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss / 1024.0 : 0.0;
}

/* ------------------------------------------------------------------ run */

static int cmd_run(const opts *o_in)
{
    opts local = *o_in;
    const opts *o = &local;
    if (!o->prompt) {
        fprintf(stderr, "vt run: -p PROMPT is required\n");
        return 2;
    }
    if (!o->model) {
        local.model = default_model();
        if (!local.model) {
            fprintf(stderr, "vt run: no -m MODEL given and the demo model %s is not in "
                    "<bindir>/" VT_MODELS_REL_DIR " (nor, for a build tree, in %s)\n",
                    VT_DEMO_MODEL_NAME, VT_SOURCE_MODELS_DIR);
            return 2;
        }
        if (o->stats || vt_log_get_level() >= VT_LOG_INFO)
            fprintf(stderr, "vt run: no -m given: the demo model %s\n", local.model);
    }
    vt_engine *e;
    if (cli_open_engine(o, &e) != VT_OK) return cli_fail("run");
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

    const char *prompt = o->prompt;
    vt_text_span *plain = NULL; /* --no-special --chat: where the messages went */
    size_t n_plain = 0;
    if (o->chat || o->system) { /* --system implies --chat */
        const char *family = vt_chat_family_for_arch(vt_engine_arch(e));
        vt_chat_msg msgs[2];
        size_t n = 0;
        if (o->system) msgs[n++] = (vt_chat_msg){"system", o->system};
        msgs[n++] = (vt_chat_msg){"user", o->prompt};
        if (!family) {
            vt_set_error("no chat template for architecture '%s'", vt_engine_arch(e));
            goto out;
        }
        /* the GGUF's own template decides template variants (gemma4's empty thought channel) */
        unsigned flags = vt_chat_flags_for_template(family, vt_tokenizer_chat_template(tok));
        if (vt_chat_render_spans(family, msgs, n, 1, flags, &text, &plain, &n_plain) != VT_OK)
            goto out;
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
    banned = calloc((size_t)info.n_vocab, 1);
    if (!banned) {
        vt_set_error("out of memory for the %lld-token sampling mask", (long long)info.n_vocab);
        goto out;
    }
    int64_t n_banned = 0;
    for (int64_t i = 0; i < info.n_vocab; i++)
        n_banned += banned[i] = vt_tokenizer_token_type(tok, (int32_t)i) == VT_TOKEN_UNUSED ||
                                vt_tokenizer_is_suppressed(tok, (int32_t)i); /* tokenizer.ggml.suppress_tokens */
    if (n_banned == info.n_vocab) {
        vt_set_error("%s: every one of the %lld tokens is UNUSED or suppressed: nothing can be "
                     "sampled", o->model, (long long)info.n_vocab);
        goto out;
    }
    vt_sampler_params sp = o->sp;
    if (!o->have_seed) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        sp.seed = ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^ ((uint64_t)getpid() << 32);
    }
    vt_log(VT_LOG_INFO, "sampling: temp %.3g top-k %d top-p %.3g min-p %.3g seed %llu",
           sp.temperature, sp.top_k, sp.top_p, sp.min_p, (unsigned long long)sp.seed);
    if (vt_sampler_new(&sp, info.n_vocab, banned, &smp) != VT_OK) goto out;
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
        fprintf(stderr, "prefill: %lld tokens in %.4f s (%.1f tokens/s)\n", (long long)n_ids,
                t1 - t0, n_ids / (t1 - t0));
        fprintf(stderr, "decode: %d tokens in %.4f s (%.1f tokens/s)\n", steps, t2 - t1,
                steps > 0 ? steps / (t2 - t1) : 0.0);
        fprintf(stderr, "seed: %llu\n", (unsigned long long)sp.seed);
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
    vt_engine_close(e);
    return rc;
}

/* ------------------------------------------------------------------ logits */

int main(int argc, char **argv)
{
    /* a model file truncated or overwritten in place while mapped: a message
     * naming it and exit status 1, not a bare SIGBUS (gguf_guard.h) */
    vt_gguf_sigbus_report_install();
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        fputs(usage_text, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("vt %s (plugin ABI %d.%d)\n", VT_VERSION_STRING, VT_ABI_MAJOR, VT_ABI_MINOR);
        return 0;
    }
    const char *cmd = argv[1];
    char prog[64];
    snprintf(prog, sizeof prog, "vt %s", cmd);
    argv[1] = prog; /* getopt's messages then read "vt run: ..." */
    opts o;
    if (parse_opts(argc - 1, argv + 1, &o) || options_apply(cmd, &o)) {
        fprintf(stderr, "run 'vt --help' for usage\n");
        return 2;
    }
    if (!strcmp(cmd, "run")) return cmd_run(&o);
    if (!strcmp(cmd, "logits")) return cli_cmd_logits(&o);
    if (!strcmp(cmd, "tokenize")) return cli_cmd_tokenize(&o);
    if (!strcmp(cmd, "info")) return cli_cmd_info(&o);
    if (!strcmp(cmd, "plugins")) return cli_cmd_plugins(&o);
    if (!strcmp(cmd, "mkmodel")) return cli_cmd_mkmodel(&o);
    if (!strcmp(cmd, "config")) return cli_cmd_config(&o);
    if (!strcmp(cmd, "fit")) return cli_cmd_fit(&o);
    if (!strcmp(cmd, "bench")) return cli_cmd_bench(&o);
    if (!strcmp(cmd, "serve")) return cli_cmd_serve(&o);
    fprintf(stderr, "vt: unknown command '%s'\n%s", cmd, usage_text);
    return 2;
}
