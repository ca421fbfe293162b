/*
 * cli_common.c - what the vt commands share: failing with the core's
 * message, the monotonic clock, the residency config with --set, opening an
 * engine with the load-progress bar (cli_progress.c), peak RSS.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli.h"
#include "vt/bytes.h"
#include "error.h"
#include "jinja.h"

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
        if (strlen(sel) != n || strncmp(k, sel, n)) {
            vt_log(VT_LOG_WARN, "--set %s: platform '%.*s' is not the one this run uses ('%s'); "
                   "the setting has no effect", o->sets[i], (int)n, k, sel);
            continue;
        }
        /* the expert cache of a platform whose experts stay resident is never made */
        const vt_config_platform *pl = vt_config_platform_get(cfg, sel);
        if (pl && pl->experts == VT_EXPERTS_RESIDENT && !strncmp(k + n, ".expert_cache.", 14))
            vt_log(VT_LOG_WARN, "--set %s: %s.experts is resident, so there is no expert cache and "
                   "the setting has no effect (--set %s.experts=streamed or auto uses it)",
                   o->sets[i], sel, sel);
    }
    return st;
}

/* the two bars of an engine's open: progress_user of vt_engine_params */
typedef struct bars {
    cli_bar *shards, *load;
} bars;

static void load_cb(void *user, const char *phase, uint64_t done, uint64_t total, double seconds)
{
    cli_bar_engine_cb(((bars *)user)->load, phase, done, total, seconds);
}

static void shards_cb(void *user, uint64_t done, uint64_t total)
{
    cli_bar_cb(((bars *)user)->shards, done, total);
}

/* vt_engine_open with the config of o (--config, --set) and the load bar
 * (a split model's shards while they open, then the weights) */
static vt_status open_engine(const opts *o, int plan_only, vt_engine **e)
{
    static vt_config cfg; /* large; one per process */
    vt_status st = cli_load_config(o, &cfg, 1);
    if (st != VT_OK) return st;
    cli_bar shards, bar;
    const char *base = strrchr(o->model, '/');
    char label[96];
    snprintf(label, sizeof label, "vt: opening %s", base ? base + 1 : o->model);
    cli_bar_init(&shards, o, label, "shards");
    snprintf(label, sizeof label, "vt: loading %s", base ? base + 1 : o->model);
    cli_bar_init(&bar, o, label, NULL);
    bars both = {&shards, &bar};
    vt_engine_params p = {.model_path = o->model, .plugin_dir = o->plugin_dir, .device = o->device,
                          .n_threads = o->threads, .kernels = o->kernels, .n_ctx = o->ctx,
                          .n_batch = o->batch, .config = &cfg,
                          .progress = bar.show ? load_cb : NULL, .progress_user = &both,
                          .open_progress = shards.show ? shards_cb : NULL,
                          .profile = o->profile, .n_seq = (uint32_t)o->parallel,
                          .no_prefault = o->no_prefault, .plan_only = plan_only};
    st = vt_engine_open(&p, e);
    cli_bar_end(&shards);
    cli_bar_end(&bar);
    return st;
}

vt_status cli_open_engine(const opts *o, vt_engine **e) { return open_engine(o, 0, e); }

vt_status cli_open_engine_plan(const opts *o, vt_engine **e) { return open_engine(o, 1, e); }

vt_status cli_open_gguf(const opts *o, vt_gguf **g)
{
    cli_bar bar;
    const char *base = strrchr(o->model, '/');
    char label[96];
    snprintf(label, sizeof label, "vt: opening %s", base ? base + 1 : o->model);
    cli_bar_init(&bar, o, label, "shards");
    vt_status st = vt_gguf_open_progress(o->model, VT_GGUF_NO_MMAP,
                                         bar.show ? cli_bar_cb : NULL, &bar, g);
    cli_bar_end(&bar);
    return st;
}

char *cli_chat_template(const opts *o, const char *model_template, int *failed)
{
    *failed = 0;
    if (o->no_jinja) {
        if (o->jinja) {
            vt_set_error("--no-jinja contradicts %s", o->chat_template_file ? "--chat-template-file"
                                                                            : "--jinja");
            *failed = 1;
        } else {
            vt_log(VT_LOG_INFO, "chat template: vt's built-in one for the model's family (--no-jinja)");
        }
        return NULL;
    }
    char *t = NULL;
    if (o->chat_template_file) {
        FILE *f = fopen(o->chat_template_file, "rb");
        long n = -1;
        if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && n <= (16l << 20) &&
            fseek(f, 0, SEEK_SET) == 0 && (t = malloc((size_t)n + 1)) &&
            fread(t, 1, (size_t)n, f) == (size_t)n) {
            t[n] = 0;
            vt_log(VT_LOG_INFO, "chat template: %s (--chat-template-file)", o->chat_template_file);
        } else {
            vt_set_error("--chat-template-file %s: %s%s", o->chat_template_file,
                         !f ? strerror(errno) : n > (16l << 20) ? "larger than 16 MiB" : "cannot be read",
                         !f && !strchr(o->chat_template_file, '/') && !strchr(o->chat_template_file, '.')
                             ? " (vt takes a Jinja template file; llama.cpp's named templates are not "
                               "built in: the model's own template is the default)"
                             : "");
            free(t);
            t = NULL;
        }
        if (f) fclose(f);
    } else if (!model_template) {
        if (!o->jinja) {
            vt_log(VT_LOG_INFO, "chat template: vt's built-in one for the model's family (the model "
                   "has no tokenizer.chat_template)");
            return NULL;
        }
        vt_set_error("--jinja: the model has no chat template (tokenizer.chat_template); give one "
                     "with --chat-template-file FILE");
    } else if (!(t = strdup(model_template))) {
        vt_set_error("out of memory copying the chat template");
    } else {
        vt_log(VT_LOG_INFO, "chat template: the model's own (tokenizer.chat_template, %zu bytes)",
               strlen(t));
    }
    /* a template that does not parse is refused now, not at each chat */
    if (t && vt_jinja_check(t, strlen(t)) != VT_OK) {
        free(t);
        t = NULL;
        if (!o->jinja) { /* the default: the family's template stands in */
            vt_log(VT_LOG_WARN, "the model's chat template cannot be read by vt (%s): chats use "
                   "vt's built-in template for the model's family (--no-jinja says so quietly)",
                   vt_last_error());
            return NULL;
        }
        vt_error_prefix("%s", o->chat_template_file ? o->chat_template_file : "the model's chat template");
    }
    *failed = !t;
    return t;
}

void cli_print_weights(FILE *f, const vt_engine *e)
{
    uint64_t bytes;
    double sec;
    const char *how;
    vt_engine_weights(e, &bytes, &sec, &how);
    if (!bytes) {
        fprintf(f, "weights: %s\n", how);
        return;
    }
    char b[32], r[32];
    vt_format_bytes(bytes, 0, b, sizeof b);
    fprintf(f, "weights: %s %s in %.3f s", b, how, sec);
    if (sec > 0) fprintf(f, " (%s/s)", vt_format_bytes((uint64_t)((double)bytes / sec), 0, r, sizeof r));
    fputc('\n', f);
}

double cli_peak_rss_mib(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss / 1024.0 : 0.0;
}

const char *cli_default_model(const char *cmd, int say)
{
    static char path[4096];
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    char *slash = n > 0 ? (exe[n] = 0, strrchr(exe, '/')) : NULL;
    if (slash) {
        *slash = 0;
        snprintf(path, sizeof path, "%s/" VT_MODELS_REL_DIR "/%s", exe, VT_DEMO_MODEL_NAME);
        if (access(path, R_OK) != 0 && !strcmp(exe, VT_BUILD_BIN_DIR)) /* a build tree's vt */
            snprintf(path, sizeof path, "%s/%s", VT_SOURCE_MODELS_DIR, VT_DEMO_MODEL_NAME);
        if (access(path, R_OK) == 0) {
            if (say || vt_log_get_level() >= VT_LOG_INFO)
                fprintf(stderr, "vt %s: no -m given: the demo model %s\n", cmd, path);
            return path;
        }
    }
    fprintf(stderr, "vt %s: no -m MODEL given and the demo model %s is not in <bindir>/"
            VT_MODELS_REL_DIR " (nor, for a build tree, in %s)\n", cmd, VT_DEMO_MODEL_NAME,
            VT_SOURCE_MODELS_DIR);
    return NULL;
}

char *cli_read_prompt(const char *path)
{
    const int in = !strcmp(path, "-");
    FILE *f = in ? stdin : fopen(path, "rb");
    if (!f) {
        vt_set_error("-f %s: %s", path, strerror(errno));
        return NULL;
    }
    const size_t max = (size_t)64 << 20;
    size_t cap = 4096, len = 0;
    char *s = malloc(cap);
    if (!s) vt_set_error("out of memory for the prompt");
    while (s) {
        if (len + 1 == cap) {
            char *t = cap <= max ? realloc(s, cap * 2) : NULL;
            if (!t) {
                free(s);
                s = NULL;
                vt_set_error("%s: %s", in ? "the prompt on stdin" : path,
                             cap > max ? "longer than 64 MiB" : "out of memory");
                break;
            }
            s = t;
            cap *= 2;
        }
        size_t k = fread(s + len, 1, cap - 1 - len, f);
        len += k;
        if (k == 0) {
            if (ferror(f)) {
                vt_set_error("%s: %s", in ? "reading the prompt from stdin" : path, strerror(errno));
                free(s);
                s = NULL;
            }
            break;
        }
    }
    if (s) s[len] = 0;
    if (!in) fclose(f);
    return s;
}

vt_status cli_sampler_new(const opts *o, const vt_tokenizer *tok, const vt_model_info *info,
                          uint8_t **banned, vt_sampler **smp, uint64_t *seed)
{
    *smp = NULL;
    uint8_t *b = calloc((size_t)info->n_vocab, 1);
    if (!(*banned = b)) {
        vt_set_error("out of memory for the %lld-token sampling mask", (long long)info->n_vocab);
        return VT_ERR_OUT_OF_MEMORY;
    }
    int64_t n_banned = 0;
    for (int64_t i = 0; i < info->n_vocab; i++)
        n_banned += b[i] = vt_tokenizer_token_type(tok, (int32_t)i) == VT_TOKEN_UNUSED ||
                           vt_tokenizer_is_suppressed(tok, (int32_t)i); /* tokenizer.ggml.suppress_tokens */
    if (n_banned == info->n_vocab) {
        vt_set_error("%s: every one of the %lld tokens is UNUSED or suppressed: nothing can be "
                     "sampled", o->model, (long long)info->n_vocab);
        return VT_ERR_FORMAT;
    }
    vt_sampler_params sp = o->sp;
    if (!o->have_seed) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        sp.seed = ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^ ((uint64_t)getpid() << 32);
    }
    *seed = sp.seed;
    vt_log(VT_LOG_INFO, "sampling: temp %.3g top-k %d top-p %.3g min-p %.3g seed %llu",
           sp.temperature, sp.top_k, sp.top_p, sp.min_p, (unsigned long long)sp.seed);
    return vt_sampler_new(&sp, info->n_vocab, b, smp);
}
