/*
 * cli_common.c - what the vt commands share: failing with the core's
 * message, the monotonic clock, the residency config with --set, opening an
 * engine with the load-progress bar, peak RSS.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli.h"
#include "error.h"
#include "progress.h"

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

double cli_peak_rss_mib(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss / 1024.0 : 0.0;
}
