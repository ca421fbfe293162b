/*
 * cli_progress.c - the progress bars of the vt commands on stderr (cli.h's
 * cli_bar): a model's load, vt mkmodel's writing, opening a split model.
 * Drawn on a terminal only (not a pipe or a file, not TERM=dumb), never with
 * --no-progress, -q or -v (log lines would run into it); redrawn at most
 * every 0.1 s and finished with a newline at 100% (or by cli_bar_end when
 * the step stops early). The line is fitted to the terminal's width (the
 * bar shrinks to 10 cells, then the label is cut), or each redraw would
 * leave a wrapped row behind; a terminal narrower than the numbers still
 * wraps.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "error.h"
#include "progress.h"

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void cli_bar_init(cli_bar *b, const opts *o, const char *label, const char *unit)
{
    memset(b, 0, sizeof *b);
    snprintf(b->label, sizeof b->label, "%s", label);
    b->unit = unit;
    b->t0 = now_seconds();
    const char *term = getenv("TERM");
    b->show = !(o && (o->no_progress || o->quiet)) && isatty(STDERR_FILENO) &&
              vt_log_get_level() < VT_LOG_INFO && !(term && !strcmp(term, "dumb"));
    struct winsize ws;
    if (b->show && ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) b->cols = ws.ws_col;
}

static size_t bar_line(const cli_bar *b, char *line, size_t cap, uint64_t done, uint64_t total,
                       double seconds, int width)
{
    return b->unit ? vt_progress_format_count(line, cap, b->label, done, total, b->unit, width)
                   : vt_progress_format(line, cap, b->label, done, total, seconds, width);
}

void cli_bar_draw(cli_bar *b, uint64_t done, uint64_t total, double seconds)
{
    double t = now_seconds();
    if (!b->show || b->ended || (done < total && b->drawn && t - b->last < 0.1)) return;
    /* the bar shrinks to 10 cells, then the label's end is cut */
    char line[512];
    int width = 30;
    size_t len = bar_line(b, line, sizeof line, done, total, seconds, width);
    if (b->cols > 0 && len > (size_t)b->cols - 1) {
        int over = (int)(len - (size_t)(b->cols - 1));
        width = width - over < 10 ? 10 : width - over;
        len = bar_line(b, line, sizeof line, done, total, seconds, width);
        if (len > (size_t)b->cols - 1 && len < sizeof line) {
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

void cli_bar_end(cli_bar *b)
{
    if (b->drawn && !b->ended) fputc('\n', stderr);
    b->ended = 1;
}

/* the engine's vt_engine_progress_fn and vt/gguf.h's vt_gguf_progress_fn */
void cli_bar_engine_cb(void *user, const char *phase, uint64_t done, uint64_t total, double seconds)
{
    (void)phase;
    cli_bar_draw(user, done, total, seconds);
}

void cli_bar_cb(void *user, uint64_t done, uint64_t total)
{
    cli_bar *b = user;
    cli_bar_draw(b, done, total, now_seconds() - b->t0);
}
