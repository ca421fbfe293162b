/*
 * vt/bytes.h - byte counts for people: the one formatter of the core, the
 * plugins and the SDK (static inline: plugins link no part of vt).
 */
#ifndef VT_BYTES_H
#define VT_BYTES_H

#include <stdint.h>
#include <stdio.h>

/*
 * bytes in the largest binary unit that keeps the value >= 1, into buf (cap
 * bytes, truncated to fit); returns buf ("" when buf is NULL or cap is 0).
 * Below 1 KiB: "512 B". Above, two decimals rounded to nearest ("1.19 GiB",
 * "64.00 KiB"); with exact set, a whole multiple of its unit has none
 * ("64 GiB": what the residency config prints, so that a value read back is
 * the same number of bytes).
 */
static inline const char *vt_format_bytes(uint64_t bytes, int exact, char *buf, size_t cap)
{
    static const char *const names[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (!buf || !cap) return "";
    if (bytes < 1024) {
        snprintf(buf, cap, "%llu B", (unsigned long long)bytes);
        return buf;
    }
    int u = 0;
    while (u < 5 && bytes >> (10 * (u + 2)) != 0) u++;
    const uint64_t unit = 1ull << (10 * (u + 1));
    uint64_t whole = bytes / unit, rem = bytes % unit;
    if (rem == 0 && exact) {
        snprintf(buf, cap, "%llu %s", (unsigned long long)whole, names[u]);
        return buf;
    }
    /* rounded to nearest; rem * 100 fits 64 bits up to TiB (rem < 2^40) */
    uint64_t hundredths = u <= 3 ? (rem * 100 + unit / 2) / unit
                                 : (uint64_t)((double)rem * 100.0 / (double)unit + 0.5);
    if (hundredths == 100) {
        whole++;
        hundredths = 0;
    }
    snprintf(buf, cap, "%llu.%02u %s", (unsigned long long)whole, (unsigned)hundredths, names[u]);
    return buf;
}

#endif
