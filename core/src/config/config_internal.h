/*
 * config_internal.h - what config.c (defaults, value parsers, overrides,
 * printout) and config_yaml.c (the file) share; not a public header.
 */
#ifndef VT_CONFIG_INTERNAL_H
#define VT_CONFIG_INTERNAL_H

#include <stdint.h>
#include <stdio.h>

#include "config.h"

#define CF_INTERNAL __attribute__((visibility("hidden")))

#define NAME_CAP 64                  /* every name field is char[64] */
#define QUOTE_MAX 80                 /* user text quoted in a message is cut here */

/* Platform keys, in schema order (the order vt_config_print uses). */
typedef enum pkey {
    PK_BACKEND,
    PK_UNIFIED,
    PK_KV,
    PK_EXPERTS,
    PK_STORE,
    PK_ARENA,
    PK_SLOTS,
    PK_HEADROOM,
    PK_IO,
    PK_HOST_ARENA,
    PK_POLICY,
    PK_PREFETCH,
    PK_PREFETCH_TOP,
    PK_PREFETCH_MAX,
    PK_READERS,
    PK_STAGING,
    PK_SLOT_CLASSES,
    PK_SLOT_UNIT,
    PK_PINNED,
    PK_DEVICES,
    PK_COUNT
} pkey;

/* The key's path under platforms.<name>, by pkey. */
CF_INTERNAL extern const char *const cf_pkey_path[PK_COUNT];

static inline void copy_str(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src);
}

/* How much of n bytes of user text a message quotes. */
static inline int quote_len(size_t n) { return n > QUOTE_MAX ? QUOTE_MAX : (int)n; }

/* The value parsers set a bare message ("unknown unit 'XB' in '2XB' ...");
 * the caller prefixes where the value came from. */

/* A plugin, platform or architecture name: 1..63 of [A-Za-z0-9_-]. */
CF_INTERNAL vt_status cf_parse_name(const char *text, char out[NAME_CAP]);
/* A decimal integer in [lo, hi]; no sign, no fraction, no unit. */
CF_INTERNAL vt_status cf_parse_uint(const char *text, uint64_t lo, uint64_t hi, uint64_t *out);
/* devices: "all", one index, or indices separated by commas, optionally in
 * brackets, into p (src: where it came from). */
CF_INTERNAL vt_status cf_parse_devices(const char *text, vt_config_platform *p, vt_config_src src);
/* Platform key k set to text in p, recording src; p unchanged on error. */
CF_INTERNAL vt_status cf_platform_apply(vt_config_platform *p, pkey k, const char *text,
                                        vt_config_src src);
/* Index of the model entry for arch / the platform named name, or -1. */
CF_INTERNAL int cf_find_model(const vt_config *c, const char *arch);
CF_INTERNAL int cf_find_platform(const vt_config *c, const char *name);
/* "cpu, cuda, rocm, unified" into buf, for messages. */
CF_INTERNAL const char *cf_platform_list(const vt_config *c, char *buf, size_t cap);
/* A top-level key ("version", "defaults", "models", "platforms"), never a platform. */
CF_INTERNAL int cf_reserved_platform_name(const char *name);

#endif
