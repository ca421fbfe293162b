/*
 * progress.c - the text of a progress line (progress.h).
 */
#include "progress.h"

#include <stdio.h>

#include "vt/bytes.h"


/* bar[bar_width + 1] (clamped to 1..200) filled for done of total; returns
 * the fraction done */
static double fill_bar(char *bar, int bar_width, uint64_t *done, uint64_t total)
{
    if (bar_width < 1) bar_width = 1;
    if (bar_width > 200) bar_width = 200;
    if (*done > total) *done = total;
    double frac = total ? (double)*done / (double)total : 1.0;
    int fill = (int)(frac * bar_width);
    if (fill > bar_width) fill = bar_width;
    for (int i = 0; i < bar_width; i++)
        bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
    bar[bar_width] = 0;
    return frac;
}

size_t vt_progress_format_count(char *buf, size_t cap, const char *label, uint64_t done,
                                uint64_t total, const char *unit, int bar_width)
{
    char bar[201];
    double frac = fill_bar(bar, bar_width, &done, total);
    int n = snprintf(buf, cap, "%s [%s] %3d%%  %llu / %llu %s", label ? label : "", bar,
                     (int)(frac * 100.0), (unsigned long long)done, (unsigned long long)total,
                     unit ? unit : "");
    return n < 0 ? 0 : (size_t)n;
}

size_t vt_progress_format(char *buf, size_t cap, const char *label, uint64_t done,
                          uint64_t total, double seconds, int bar_width)
{
    char bar[201];
    double frac = fill_bar(bar, bar_width, &done, total);
    char d[32], t[32], r[48] = "";
    vt_format_bytes(done, 0, d, sizeof d);
    vt_format_bytes(total, 0, t, sizeof t);
    if (seconds > 0) {
        char rb[32];
        vt_format_bytes((uint64_t)((double)done / seconds), 0, rb, sizeof rb);
        snprintf(r, sizeof r, "  %s/s", rb);
    }
    int n = snprintf(buf, cap, "%s [%s] %3d%%  %s / %s%s", label ? label : "", bar,
                     (int)(frac * 100.0), d, t, r);
    return n < 0 ? 0 : (size_t)n;
}
