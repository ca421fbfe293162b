/*
 * progress.c - the text of a load-progress line (progress.h).
 */
#include "progress.h"

#include <stdio.h>

/* bytes in binary units with two decimals: 512 B, 1.50 KiB, 4.46 GiB */
static void fmt_bytes(char *out, size_t cap, double v)
{
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    while (v >= 1024.0 && u < 5) {
        v /= 1024.0;
        u++;
    }
    if (u == 0) snprintf(out, cap, "%.0f B", v);
    else snprintf(out, cap, "%.2f %s", v, unit[u]);
}

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
    fmt_bytes(d, sizeof d, (double)done);
    fmt_bytes(t, sizeof t, (double)total);
    if (seconds > 0) {
        char rb[32];
        fmt_bytes(rb, sizeof rb, (double)done / seconds);
        snprintf(r, sizeof r, "  %s/s", rb);
    }
    int n = snprintf(buf, cap, "%s [%s] %3d%%  %s / %s%s", label ? label : "", bar,
                     (int)(frac * 100.0), d, t, r);
    return n < 0 ? 0 : (size_t)n;
}
