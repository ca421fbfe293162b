/*
 * progress.c - the text of a load-progress line (progress.h).
 */
#include "progress.h"

#include <stdio.h>

#include "vt/bytes.h"


size_t vt_progress_format(char *buf, size_t cap, const char *label, uint64_t done,
                          uint64_t total, double seconds, int bar_width)
{
    if (bar_width < 1) bar_width = 1;
    if (bar_width > 200) bar_width = 200;
    if (done > total) done = total;
    double frac = total ? (double)done / (double)total : 1.0;
    int fill = (int)(frac * bar_width);
    if (fill > bar_width) fill = bar_width;
    char bar[201];
    for (int i = 0; i < bar_width; i++)
        bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
    bar[bar_width] = 0;
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
