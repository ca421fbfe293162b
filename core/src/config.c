/*
 * config.c - the residency configuration (see config.h for the schema): the
 * built-in defaults, conf/residency.yaml read with libyaml's event parser,
 * --set overrides, and a printout of every resolved value with its origin.
 *
 * One validation path: a value from the file and a value from --set go
 * through the same parse/apply functions, which set a bare message ("unknown
 * unit 'XB' in '2XB' ..."); the caller prefixes where it came from
 * ("FILE:LINE:COL: platforms.cuda.expert_cache.headroom: ..." or
 * "--set cuda.expert_cache.headroom=2XB: ...").
 *
 * A file is parsed into a copy of the configuration, which replaces the
 * caller's only when the whole file is valid: a refused file changes nothing.
 * Entries of the file merge into what is already there (the defaults): a
 * platform or model the file names is updated or added, the others stay.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "error.h"

#define NAME_CAP 64                  /* every name field is char[64] */
#define CONFIG_FILE_MAX (1u << 20)   /* a residency config is a few KiB; refuse more than 1 MiB */
#define KV_TOKENS_MAX (1u << 24)     /* kv_cache_tokens: 1 .. 16777216 */
#define SLOTS_MAX 4294967295ull      /* expert_cache.slots: 1 .. 2^32-1 */
#define QUOTE_MAX 80                 /* user text quoted in a message is cut here */

/* ------------------------------------------------------------------------ */
/* Platform keys, in schema order (the order vt_config_print uses)           */
/* ------------------------------------------------------------------------ */

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

/* The key's path under platforms.<name>. */
static const char *const pkey_path[PK_COUNT] = {
    "backend",           "unified_memory",     "kv_cache_tokens",
    "experts",           "expert_cache.store", "expert_cache.arena",
    "expert_cache.slots", "expert_cache.headroom", "expert_cache.io",
    "expert_cache.host_arena", "expert_cache.policy", "expert_cache.prefetch",
    "expert_cache.prefetch_top", "expert_cache.prefetch_max", "expert_cache.readers",
    "expert_cache.staging",
    "expert_cache.slot_classes", "expert_cache.slot_unit", "pinned_budget", "devices"};

static const char PKEY_LIST[] =
    "backend, unified_memory, kv_cache_tokens, experts, expert_cache.store, "
    "expert_cache.arena, expert_cache.slots, expert_cache.headroom, expert_cache.io, "
    "expert_cache.host_arena, expert_cache.policy, expert_cache.prefetch, "
    "expert_cache.prefetch_top, expert_cache.prefetch_max, expert_cache.readers, "
    "expert_cache.staging, expert_cache.slot_classes, expert_cache.slot_unit, pinned_budget, "
    "devices";

/* Names that cannot be platforms: they are the top-level keys, and an override
 * "models.x" or "defaults.platform" must not be read as a platform key. */
static int reserved_platform_name(const char *name)
{
    return !strcmp(name, "version") || !strcmp(name, "defaults") || !strcmp(name, "models") ||
           !strcmp(name, "platforms");
}

/* ------------------------------------------------------------------------ */
/* Defaults                                                                  */
/* ------------------------------------------------------------------------ */

static void copy_str(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src);
}

void vt_config_platform_defaults(vt_config_platform *p, const char *name)
{
    memset(p, 0, sizeof *p); /* every *_src: VT_CONFIG_FROM_DEFAULT */
    copy_str(p->name, sizeof p->name, name);
    copy_str(p->backend, sizeof p->backend, name);
    p->unified_memory = 0;
    p->kv_cache_tokens = 4096;
    p->experts = VT_EXPERTS_RESIDENT;
    copy_str(p->expert_store, sizeof p->expert_store, "host");
    p->arena_bytes = 0; /* auto */
    p->arena_slots = 0;
    p->headroom_bytes = 0;
    p->host_arena_bytes = VT_HOST_ARENA_AUTO;
    p->readers = 0;                       /* auto */
    p->staging_bytes = VT_STAGING_AUTO;
    p->prefetch = VT_PREFETCH_AUTO;
    p->pinned_budget_bytes = 0;
    p->n_devices = 1; /* device 0 */
}

static void add_model(vt_config *c, const char *arch, const char *plugin)
{
    vt_config_pair *m = &c->models[c->n_models++];
    copy_str(m->key, sizeof m->key, arch);
    copy_str(m->value, sizeof m->value, plugin);
}

void vt_config_defaults(vt_config *c)
{
    const uint64_t GiB = 1ull << 30;
    memset(c, 0, sizeof *c);
    copy_str(c->default_platform, sizeof c->default_platform, "cpu");
    add_model(c, "qwen35moe", "qwen35");
    add_model(c, "qwen35", "qwen35");
    add_model(c, "gemma4", "gemma4");

    vt_config_platform *p = &c->platforms[c->n_platforms++];
    vt_config_platform_defaults(p, "cpu");

    static const char *const gpus[] = {"cuda", "rocm"};
    for (int i = 0; i < 2; i++) {
        p = &c->platforms[c->n_platforms++];
        vt_config_platform_defaults(p, gpus[i]);
        p->experts = VT_EXPERTS_AUTO;
        copy_str(p->expert_store, sizeof p->expert_store, "device");
        p->headroom_bytes = 1 * GiB;
        p->pinned_budget_bytes = 4 * GiB;
    }

    p = &c->platforms[c->n_platforms++];
    vt_config_platform_defaults(p, "unified");
    copy_str(p->backend, sizeof p->backend, "cuda");
    p->unified_memory = 1;
    p->experts = VT_EXPERTS_AUTO;
    p->headroom_bytes = 1 * GiB;
}

/* ------------------------------------------------------------------------ */
/* Values: one parser per kind, shared by the file and --set                 */
/* ------------------------------------------------------------------------ */

static int is_blank(char ch) { return ch == ' ' || ch == '\t'; }
static int is_digit(char ch) { return ch >= '0' && ch <= '9'; }

/* text without its leading and trailing blanks (space, tab): [*b, *b + *n) */
static void trim(const char *text, const char **b, size_t *n)
{
    const char *s = text, *e = text + strlen(text);
    while (s < e && is_blank(*s)) s++;
    while (e > s && is_blank(e[-1])) e--;
    *b = s;
    *n = (size_t)(e - s);
}

static int quote_len(size_t n) { return n > QUOTE_MAX ? QUOTE_MAX : (int)n; }

static int eq(const char *s, size_t n, const char *lit)
{
    return strlen(lit) == n && !memcmp(s, lit, n);
}

/* A plugin, platform or architecture name: 1..63 of [A-Za-z0-9_-]. */
static vt_status parse_name(const char *text, char out[NAME_CAP])
{
    const char *s;
    size_t n;
    trim(text, &s, &n);
    if (n == 0) {
        vt_set_error("empty value: expected a name");
        return VT_ERR_INVALID_ARG;
    }
    if (n >= NAME_CAP) {
        vt_set_error("'%.*s...' is longer than %d characters", quote_len(n), s, NAME_CAP - 1);
        return VT_ERR_INVALID_ARG;
    }
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!(is_digit(ch) || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' ||
              ch == '-')) {
            vt_set_error("'%.*s' is not a name (letters, digits, '_' and '-' only)", quote_len(n), s);
            return VT_ERR_INVALID_ARG;
        }
    }
    memcpy(out, s, n);
    out[n] = 0;
    return VT_OK;
}

/* A decimal integer in [lo, hi]; no sign, no fraction, no unit. */
static vt_status parse_uint(const char *text, uint64_t lo, uint64_t hi, uint64_t *out)
{
    const char *s;
    size_t n;
    trim(text, &s, &n);
    if (n == 0) {
        vt_set_error("empty value: expected an integer from %llu to %llu", (unsigned long long)lo,
                     (unsigned long long)hi);
        return VT_ERR_INVALID_ARG;
    }
    uint64_t v = 0;
    int overflow = 0;
    for (size_t i = 0; i < n; i++) {
        if (!is_digit(s[i])) {
            vt_set_error("'%.*s' is not an integer from %llu to %llu", quote_len(n), s,
                         (unsigned long long)lo, (unsigned long long)hi);
            return VT_ERR_INVALID_ARG;
        }
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10) overflow = 1;
        else v = v * 10 + d;
    }
    if (overflow || v < lo || v > hi) {
        vt_set_error("%.*s is out of range: expected an integer from %llu to %llu", quote_len(n), s,
                     (unsigned long long)lo, (unsigned long long)hi);
        return VT_ERR_INVALID_ARG;
    }
    *out = v;
    return VT_OK;
}

/* "auto" (0) or a count from 1 to hi. */
static vt_status parse_auto_count(const char *text, uint64_t hi, uint64_t *out)
{
    const char *s;
    size_t n;
    trim(text, &s, &n);
    if (eq(s, n, "auto")) {
        *out = 0;
        return VT_OK;
    }
    return parse_uint(text, 1, hi, out);
}

static vt_status parse_bool(const char *text, int *out)
{
    const char *s;
    size_t n;
    trim(text, &s, &n);
    if (eq(s, n, "true") || eq(s, n, "1")) *out = 1;
    else if (eq(s, n, "false") || eq(s, n, "0")) *out = 0;
    else {
        vt_set_error("'%.*s' is not a boolean (true, false, 1 or 0)", quote_len(n), s);
        return VT_ERR_INVALID_ARG;
    }
    return VT_OK;
}

static vt_status parse_experts(const char *text, vt_experts_mode *out)
{
    const char *s;
    size_t n;
    trim(text, &s, &n);
    if (eq(s, n, "resident")) *out = VT_EXPERTS_RESIDENT;
    else if (eq(s, n, "streamed")) *out = VT_EXPERTS_STREAMED;
    else if (eq(s, n, "auto")) *out = VT_EXPERTS_AUTO;
    else {
        vt_set_error("'%.*s' is not one of resident, streamed, auto", quote_len(n), s);
        return VT_ERR_INVALID_ARG;
    }
    return VT_OK;
}

static const struct {
    const char *name;
    uint64_t mult;
} byte_units[] = {
    {"B", 1ull},
    {"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30}, {"TiB", 1ull << 40},
    {"KB", 1000ull}, {"MB", 1000000ull}, {"GB", 1000000000ull}, {"TB", 1000000000000ull},
};

/*
 * DIGITS [ "." DIGITS ] [ blanks ] [ UNIT ], blanks around the whole ignored.
 * The fraction is exact: floor(0.d1..dn * mult) is computed from the last
 * digit up as y = (d_i * mult + y) / 10 (integer division at every step gives
 * the same floor, and y < mult keeps it from overflowing).
 */
vt_status vt_config_parse_bytes(const char *text, uint64_t *out)
{
    if (!text || !out) {
        vt_set_error("vt_config_parse_bytes: NULL argument");
        return VT_ERR_INVALID_ARG;
    }
    const char *s;
    size_t n;
    trim(text, &s, &n);
    const char *p = s, *end = s + n;
    int q = quote_len(n);
    if (n == 0) {
        vt_set_error("empty value: expected a byte size such as 4096, 512MiB or 1.5GiB");
        return VT_ERR_INVALID_ARG;
    }
    if (*p == '-') {
        vt_set_error("'%.*s' is negative: a byte size is 0 or more", q, s);
        return VT_ERR_INVALID_ARG;
    }
    if (!is_digit(*p)) {
        vt_set_error("'%.*s' is not a byte size (expected a number such as 4096, 512MiB or 1.5GiB)",
                     q, s);
        return VT_ERR_INVALID_ARG;
    }
    uint64_t whole = 0;
    int overflow = 0;
    for (; p < end && is_digit(*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (whole > (UINT64_MAX - d) / 10) overflow = 1;
        else whole = whole * 10 + d;
    }
    const char *frac = p;
    size_t n_frac = 0;
    if (p < end && *p == '.') {
        frac = ++p;
        while (p < end && is_digit(*p)) p++;
        n_frac = (size_t)(p - frac);
        if (n_frac == 0) {
            vt_set_error("'%.*s' is not a byte size: expected digits after '.'", q, s);
            return VT_ERR_INVALID_ARG;
        }
    }
    while (p < end && is_blank(*p)) p++;
    size_t n_unit = (size_t)(end - p);
    uint64_t mult = 0;
    if (n_unit == 0) mult = 1;
    for (size_t i = 0; !mult && i < sizeof byte_units / sizeof byte_units[0]; i++)
        if (eq(p, n_unit, byte_units[i].name)) mult = byte_units[i].mult;
    if (!mult) {
        vt_set_error("unknown unit '%.*s' in '%.*s' (units: B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)",
                     quote_len(n_unit), p, q, s);
        return VT_ERR_INVALID_ARG;
    }
    if (n_frac && mult == 1) {
        vt_set_error("'%.*s' is a fraction of a byte: a fraction needs a unit of KB or KiB or more",
                     q, s);
        return VT_ERR_INVALID_ARG;
    }
    uint64_t part = 0;
    for (size_t i = n_frac; i-- > 0;) part = ((uint64_t)(frac[i] - '0') * mult + part) / 10;
    if (overflow || whole > (UINT64_MAX - part) / mult) {
        vt_set_error("'%.*s' is more than %llu bytes", q, s, (unsigned long long)UINT64_MAX);
        return VT_ERR_INVALID_ARG;
    }
    *out = whole * mult + part;
    return VT_OK;
}

const char *vt_config_format_bytes(uint64_t bytes, char *buf, size_t cap)
{
    static const char *const names[] = {"KiB", "MiB", "GiB", "TiB"};
    if (!buf || !cap) return "";
    if (bytes < 1024) {
        snprintf(buf, cap, "%llu B", (unsigned long long)bytes);
        return buf;
    }
    int u = 0;
    while (u < 3 && bytes >> (10 * (u + 2)) != 0) u++;
    uint64_t unit = 1ull << (10 * (u + 1));
    uint64_t whole = bytes / unit, rem = bytes % unit;
    if (rem == 0) {
        snprintf(buf, cap, "%llu %s", (unsigned long long)whole, names[u]);
        return buf;
    }
    uint64_t hundredths = (rem * 100 + unit / 2) / unit; /* rounded to nearest; rem < 2^40 */
    if (hundredths == 100) {
        whole++;
        hundredths = 0;
    }
    snprintf(buf, cap, "%llu.%02u %s", (unsigned long long)whole, (unsigned)hundredths, names[u]);
    return buf;
}

/*
 * Set one platform key from text. On failure *p is unchanged except where the
 * key was already written (callers apply to a copy) and the message is bare.
 * Giving the arena in bytes clears a slot count and the other way round;
 * whether the file gave both is the file parser's check.
 */
/* The index in names (NULL-terminated) of text, trimmed; -1 if none. */
static int choice(const char *text, const char *const *names)
{
    const char *t;
    size_t n;
    trim(text, &t, &n);
    for (int i = 0; names[i]; i++)
        if (eq(t, n, names[i])) return i;
    return -1;
}

/* devices: "all", one index, or indices separated by commas, optionally in
 * brackets ("0,1", "[0, 1]": the file's flow list arrives joined so). */
static vt_status parse_devices(const char *text, vt_config_platform *p, vt_config_src src)
{
    const char *s;
    size_t n;
    trim(text, &s, &n);
    if (eq(s, n, "all")) {
        p->devices_all = 1;
        p->n_devices = 0;
        p->devices_src = src;
        return VT_OK;
    }
    if (n >= 2 && s[0] == '[' && s[n - 1] == ']') {
        s++;
        n -= 2;
    }
    int32_t dev[VT_DEVICES_MAX];
    uint32_t nd = 0;
    size_t i = 0;
    for (;;) {
        size_t j = i;
        while (j < n && s[j] != ',') j++;
        /* the entry s[b, e), blanks and line breaks (a block scalar's) trimmed */
        size_t b = i, e = j;
        while (b < e && (is_blank(s[b]) || s[b] == '\n' || s[b] == '\r')) b++;
        while (e > b && (is_blank(s[e - 1]) || s[e - 1] == '\n' || s[e - 1] == '\r')) e--;
        char part[32];
        if (e == b) {
            if (nd == 0 && j >= n) vt_set_error("no device given: name device indices (0, [0, 1]) or 'all'");
            else vt_set_error("an empty entry in the device list '%.*s'", quote_len(n), s);
            return VT_ERR_INVALID_ARG;
        }
        if (e - b >= sizeof part) {
            vt_set_error("'%.*s' is not a device index (0..%d)", quote_len(e - b), s + b,
                         VT_DEVICE_INDEX_MAX);
            return VT_ERR_INVALID_ARG;
        }
        memcpy(part, s + b, e - b);
        part[e - b] = 0;
        const char *t = part;
        size_t tn = e - b;
        uint64_t u;
        if (parse_uint(part, 0, VT_DEVICE_INDEX_MAX, &u) != VT_OK) {
            vt_set_error("'%.*s' is not a device index (0..%d)", quote_len(tn), t,
                         VT_DEVICE_INDEX_MAX);
            return VT_ERR_INVALID_ARG;
        }
        for (uint32_t q = 0; q < nd; q++)
            if (dev[q] == (int32_t)u) {
                vt_set_error("device %llu is listed twice", (unsigned long long)u);
                return VT_ERR_INVALID_ARG;
            }
        if (nd == VT_DEVICES_MAX) {
            vt_set_error("more than %d devices listed", VT_DEVICES_MAX);
            return VT_ERR_INVALID_ARG;
        }
        dev[nd++] = (int32_t)u;
        if (j >= n) break;
        i = j + 1;
    }
    memcpy(p->devices, dev, nd * sizeof dev[0]);
    p->n_devices = nd;
    p->devices_all = 0;
    p->devices_src = src;
    return VT_OK;
}

static vt_status platform_apply(vt_config_platform *p, pkey k, const char *text, vt_config_src src)
{
    vt_status st = VT_OK;
    uint64_t u = 0;
    switch (k) {
    case PK_BACKEND:
        if ((st = parse_name(text, p->backend)) == VT_OK) p->backend_src = src;
        break;
    case PK_UNIFIED:
        if ((st = parse_bool(text, &p->unified_memory)) == VT_OK) p->unified_memory_src = src;
        break;
    case PK_KV:
        if ((st = parse_uint(text, 1, KV_TOKENS_MAX, &u)) == VT_OK) {
            p->kv_cache_tokens = (uint32_t)u;
            p->kv_cache_tokens_src = src;
        }
        break;
    case PK_EXPERTS:
        if ((st = parse_experts(text, &p->experts)) == VT_OK) p->experts_src = src;
        break;
    case PK_STORE:
        if ((st = parse_name(text, p->expert_store)) == VT_OK) p->expert_store_src = src;
        break;
    case PK_ARENA: {
        const char *s;
        size_t n;
        trim(text, &s, &n);
        if (!eq(s, n, "auto")) {
            if ((st = vt_config_parse_bytes(text, &u)) != VT_OK) break;
            if (u == 0) {
                vt_set_error("an arena of 0 bytes holds no expert: give a size, or 'auto'");
                st = VT_ERR_INVALID_ARG;
                break;
            }
        }
        p->arena_bytes = u;
        p->arena_bytes_src = src;
        if (p->arena_slots) {
            p->arena_slots = 0;
            p->arena_slots_src = src;
        }
        break;
    }
    case PK_SLOTS:
        if ((st = parse_uint(text, 1, SLOTS_MAX, &u)) != VT_OK) break;
        p->arena_slots = u;
        p->arena_slots_src = src;
        if (p->arena_bytes) {
            p->arena_bytes = 0;
            p->arena_bytes_src = src;
        }
        break;
    case PK_HEADROOM:
        if ((st = vt_config_parse_bytes(text, &u)) == VT_OK) {
            p->headroom_bytes = u;
            p->headroom_bytes_src = src;
        }
        break;
    case PK_IO: {
        static const char *const modes[] = {"pread", "direct", NULL};
        int k = choice(text, modes);
        if (k >= 0) {
            p->io_direct = k == 1;
            p->io_direct_src = src;
        } else {
            vt_set_error("'%s' is not an I/O mode (pread, direct)", text);
            st = VT_ERR_INVALID_ARG;
        }
        break;
    }
    case PK_POLICY: {
        /* in the order of VT_POLICY_* */
        static const char *const policies[] = {"lfru", "layer", "lru", NULL};
        int k = choice(text, policies);
        if (k >= 0) {
            p->policy = k;
            p->policy_src = src;
        } else {
            vt_set_error("'%s' is not a replacement policy (lfru, layer, lru)", text);
            st = VT_ERR_INVALID_ARG;
        }
        break;
    }
    case PK_SLOT_CLASSES: {
        /* in the order of VT_SLOT_CLASSES_* */
        static const char *const modes[] = {"auto", "off", NULL};
        int k = choice(text, modes);
        if (k >= 0) {
            p->slot_classes = k;
            p->slot_classes_src = src;
        } else {
            vt_set_error("'%s' is not a slot_classes mode (auto, off)", text);
            st = VT_ERR_INVALID_ARG;
        }
        break;
    }
    case PK_SLOT_UNIT: {
        /* in the order of VT_SLOT_UNIT_* */
        static const char *const units[] = {"auto", "expert", "matrix", NULL};
        int k = choice(text, units);
        if (k >= 0) {
            p->slot_unit = k;
            p->slot_unit_src = src;
        } else {
            vt_set_error("'%s' is not a slot_unit (auto, expert, matrix)", text);
            st = VT_ERR_INVALID_ARG;
        }
        break;
    }
    case PK_PREFETCH: {
        /* in the order of VT_PREFETCH_* */
        static const char *const modes[] = {"off", "next-layer", "auto", NULL};
        int k = choice(text, modes);
        if (k >= 0) {
            p->prefetch = k;
            p->prefetch_src = src;
        } else {
            vt_set_error("'%s' is not a prefetch mode (off, next-layer, auto)", text);
            st = VT_ERR_INVALID_ARG;
        }
        break;
    }
    case PK_PREFETCH_TOP:
        if ((st = parse_auto_count(text, VT_PREFETCH_TOP_MAX, &u)) != VT_OK) break;
        p->prefetch_top = (uint32_t)u;
        p->prefetch_top_src = src;
        break;
    case PK_PREFETCH_MAX:
        if ((st = parse_auto_count(text, VT_PREFETCH_TOP_MAX, &u)) != VT_OK) break;
        p->prefetch_max = (uint32_t)u;
        p->prefetch_max_src = src;
        break;
    case PK_READERS:
        if ((st = parse_auto_count(text, VT_READERS_MAX, &u)) != VT_OK) break;
        p->readers = (uint32_t)u;
        p->readers_src = src;
        break;
    case PK_STAGING: {
        const char *s;
        size_t n;
        trim(text, &s, &n);
        if (eq(s, n, "auto")) u = VT_STAGING_AUTO;
        else if ((st = vt_config_parse_bytes(text, &u)) != VT_OK) break;
        else if (u == VT_STAGING_AUTO) u--;
        p->staging_bytes = u;
        p->staging_bytes_src = src;
        break;
    }
    case PK_HOST_ARENA: {
        const char *s;
        size_t n;
        trim(text, &s, &n);
        if (eq(s, n, "auto")) u = VT_HOST_ARENA_AUTO;
        else if ((st = vt_config_parse_bytes(text, &u)) != VT_OK) break;
        else if (u == VT_HOST_ARENA_AUTO) u--; /* UINT64_MAX bytes: as many as can be had */
        p->host_arena_bytes = u;
        p->host_arena_bytes_src = src;
        break;
    }
    case PK_PINNED:
        if ((st = vt_config_parse_bytes(text, &u)) == VT_OK) {
            p->pinned_budget_bytes = u;
            p->pinned_budget_bytes_src = src;
        }
        break;
    case PK_DEVICES: st = parse_devices(text, p, src); break;
    case PK_COUNT:
        vt_set_error("internal: platform key %d", (int)k);
        st = VT_ERR_INTERNAL;
        break;
    }
    return st;
}

static int find_model(const vt_config *c, const char *arch)
{
    for (int i = 0; i < c->n_models; i++)
        if (!strcmp(c->models[i].key, arch)) return i;
    return -1;
}

static int find_platform(const vt_config *c, const char *name)
{
    for (int i = 0; i < c->n_platforms; i++)
        if (!strcmp(c->platforms[i].name, name)) return i;
    return -1;
}

/* "cpu, cuda, rocm, unified" into buf, for messages. */
static const char *platform_list(const vt_config *c, char *buf, size_t cap)
{
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < c->n_platforms && at < cap; i++) {
        int w = snprintf(buf + at, cap - at, "%s%s", i ? ", " : "", c->platforms[i].name);
        if (w < 0) break;
        at += (size_t)w;
    }
    if (!c->n_platforms) snprintf(buf, cap, "none");
    return buf;
}

/* ------------------------------------------------------------------------ */
/* The file                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct yparse {
    yaml_parser_t y;
    yaml_event_t ev;
    int have_ev; /* ev holds an event to delete */
    const char *path;
    const char *text; /* the whole file */
    size_t len;
    vt_config *c; /* the working copy */
} yparse;

/* A key met once in a mapping, and where (for "duplicate key" messages). */
typedef struct seen_key {
    int set;
    yaml_mark_t mark;
} seen_key;

static uint32_t mark_line(yaml_mark_t m) { return (uint32_t)m.line + 1; }
static uint32_t mark_col(yaml_mark_t m) { return (uint32_t)m.column + 1; }

static vt_config_src file_src(yaml_mark_t m)
{
    vt_config_src s = {VT_CONFIG_FROM_FILE, mark_line(m), mark_col(m)};
    return s;
}

static vt_status yp_yaml_error(yparse *p)
{
    const yaml_parser_t *y = &p->y;
    if (y->error == YAML_MEMORY_ERROR) {
        vt_set_error("%s: out of memory while reading YAML", p->path);
        return VT_ERR_OUT_OF_MEMORY;
    }
    const char *problem = y->problem ? y->problem : "cannot parse";
    if (y->error == YAML_READER_ERROR) {
        /* the reader reports a byte offset, not a mark: count lines ourselves
         * (the column is in bytes here) */
        size_t off = y->problem_offset < p->len ? y->problem_offset : p->len;
        uint32_t line = 1, col = 1;
        for (size_t i = 0; i < off; i++) {
            if (p->text[i] == '\n') {
                line++;
                col = 1;
            } else {
                col++;
            }
        }
        if (y->problem_value >= 0)
            vt_set_error("%s:%u:%u: YAML error: %s (byte 0x%02X)", p->path, line, col, problem,
                         (unsigned)y->problem_value);
        else
            vt_set_error("%s:%u:%u: YAML error: %s", p->path, line, col, problem);
        return VT_ERR_FORMAT;
    }
    if (y->context)
        vt_set_error("%s:%u:%u: YAML error: %s (%s at %u:%u)", p->path, mark_line(y->problem_mark),
                     mark_col(y->problem_mark), problem, y->context, mark_line(y->context_mark),
                     mark_col(y->context_mark));
    else
        vt_set_error("%s:%u:%u: YAML error: %s", p->path, mark_line(y->problem_mark),
                     mark_col(y->problem_mark), problem);
    return VT_ERR_FORMAT;
}

static vt_status yp_next(yparse *p)
{
    if (p->have_ev) yaml_event_delete(&p->ev);
    p->have_ev = 0;
    if (!yaml_parser_parse(&p->y, &p->ev)) return yp_yaml_error(p);
    p->have_ev = 1;
    return VT_OK;
}

static yaml_mark_t yp_mark(const yparse *p) { return p->ev.start_mark; }

static const char *kind_name(const yaml_event_t *e)
{
    switch (e->type) {
    case YAML_SCALAR_EVENT: return "a single value";
    case YAML_SEQUENCE_START_EVENT: return "a list";
    case YAML_MAPPING_START_EVENT: return "a mapping";
    case YAML_ALIAS_EVENT: return "an alias";
    default: return "something else";
    }
}

/* A plain scalar that YAML reads as null: empty, ~, null, Null, NULL. */
static int is_null_scalar(const yaml_event_t *e)
{
    if (e->type != YAML_SCALAR_EVENT || e->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return 0;
    const char *v = (const char *)e->data.scalar.value;
    return !*v || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") ||
           !strcmp(v, "NULL");
}

/* The current event is not the node kind `want` that `what` needs. */
static vt_status yp_kind_error(yparse *p, const char *what, const char *want)
{
    yaml_mark_t m = yp_mark(p);
    if (p->ev.type == YAML_ALIAS_EVENT)
        vt_set_error("%s:%u:%u: %s: aliases (*%s) are not supported; write the value out", p->path,
                     mark_line(m), mark_col(m), what, (const char *)p->ev.data.alias.anchor);
    else
        vt_set_error("%s:%u:%u: %s: expected %s, found %s", p->path, mark_line(m), mark_col(m),
                     what, want, kind_name(&p->ev));
    return VT_ERR_FORMAT;
}

/* Read the value node of `what`, which must be a mapping: *open = 1 when one
 * starts (the caller reads its entries), 0 for a null value (an empty section,
 * as left by commenting out every entry). */
static vt_status yp_mapping(yparse *p, const char *what, int *open)
{
    vt_status st = yp_next(p);
    if (st != VT_OK) return st;
    if (p->ev.type == YAML_MAPPING_START_EVENT) {
        *open = 1;
        return VT_OK;
    }
    if (is_null_scalar(&p->ev)) {
        *open = 0;
        return VT_OK;
    }
    return yp_kind_error(p, what, "a mapping");
}

/* Read the value node of `what`, which must be a non-null scalar; *text stays
 * valid until the next event. */
static vt_status yp_scalar(yparse *p, const char *what, const char **text, vt_config_src *src)
{
    vt_status st = yp_next(p);
    if (st != VT_OK) return st;
    if (p->ev.type != YAML_SCALAR_EVENT) return yp_kind_error(p, what, "a value");
    yaml_mark_t m = yp_mark(p);
    if (is_null_scalar(&p->ev)) {
        vt_set_error("%s:%u:%u: %s: expected a value, found none (null)", p->path, mark_line(m),
                     mark_col(m), what);
        return VT_ERR_FORMAT;
    }
    if (strlen((const char *)p->ev.data.scalar.value) != p->ev.data.scalar.length) {
        vt_set_error("%s:%u:%u: %s: the value contains a NUL character", p->path, mark_line(m),
                     mark_col(m), what);
        return VT_ERR_FORMAT;
    }
    *text = (const char *)p->ev.data.scalar.value;
    *src = file_src(m);
    return VT_OK;
}

/* The next key of the mapping `where` ("" at the top level) into key, or
 * *done at the mapping's end. */
static vt_status yp_key(yparse *p, const char *where, int *done, char key[NAME_CAP],
                        yaml_mark_t *mark)
{
    vt_status st = yp_next(p);
    if (st != VT_OK) return st;
    *done = p->ev.type == YAML_MAPPING_END_EVENT;
    if (*done) return VT_OK;
    const char *what = *where ? where : "top level";
    *mark = yp_mark(p);
    uint32_t l = mark_line(*mark), c = mark_col(*mark);
    if (p->ev.type != YAML_SCALAR_EVENT) {
        if (p->ev.type == YAML_ALIAS_EVENT) return yp_kind_error(p, what, "a key");
        vt_set_error("%s:%u:%u: %s: expected a key (a name), found %s", p->path, l, c, what,
                     kind_name(&p->ev));
        return VT_ERR_FORMAT;
    }
    const char *k = (const char *)p->ev.data.scalar.value;
    size_t n = p->ev.data.scalar.length;
    if (strlen(k) != n) {
        vt_set_error("%s:%u:%u: %s: a key contains a NUL character", p->path, l, c, what);
        return VT_ERR_FORMAT;
    }
    if (n >= NAME_CAP) {
        vt_set_error("%s:%u:%u: %s: key '%.*s...' is longer than %d characters", p->path, l, c,
                     what, quote_len(n), k, NAME_CAP - 1);
        return VT_ERR_FORMAT;
    }
    memcpy(key, k, n + 1);
    return VT_OK;
}

/* "where.key" (or "key" at the top level) into buf. */
static const char *full_key(char *buf, size_t cap, const char *where, const char *key)
{
    snprintf(buf, cap, "%s%s%s", where, *where ? "." : "", key);
    return buf;
}

static vt_status yp_unknown_key(yparse *p, yaml_mark_t m, const char *full, const char *expected)
{
    vt_set_error("%s:%u:%u: unknown key '%s' (expected %s)", p->path, mark_line(m), mark_col(m),
                 full, expected);
    return VT_ERR_FORMAT;
}

/* Record that `full` was met at m; a second time is an error. */
static vt_status yp_once(yparse *p, seen_key *s, const char *full, yaml_mark_t m)
{
    if (s->set) {
        vt_set_error("%s:%u:%u: duplicate key '%s' (first at line %u, column %u)", p->path,
                     mark_line(m), mark_col(m), full, mark_line(s->mark), mark_col(s->mark));
        return VT_ERR_FORMAT;
    }
    s->set = 1;
    s->mark = m;
    return VT_OK;
}

/* A name used as a key (platform or architecture), checked like a value. */
static vt_status yp_name_key(yparse *p, const char *key, yaml_mark_t m, const char *what,
                             char out[NAME_CAP])
{
    if (parse_name(key, out) != VT_OK) {
        vt_error_prefix("%s:%u:%u: %s", p->path, mark_line(m), mark_col(m), what);
        return VT_ERR_FORMAT;
    }
    if (strcmp(out, key)) { /* blanks around a quoted key */
        vt_set_error("%s:%u:%u: %s: '%s' is not a name (letters, digits, '_' and '-' only)",
                     p->path, mark_line(m), mark_col(m), what, key);
        return VT_ERR_FORMAT;
    }
    return VT_OK;
}

/* Read the scalar value of platform key k and apply it. */
static vt_status yp_platform_value(yparse *p, vt_config_platform *pl, pkey k)
{
    char full[160];
    snprintf(full, sizeof full, "platforms.%s.%s", pl->name, pkey_path[k]);
    const char *text;
    vt_config_src src;
    vt_status st = yp_scalar(p, full, &text, &src);
    if (st != VT_OK) return st;
    if (platform_apply(pl, k, text, src) != VT_OK) {
        vt_error_prefix("%s:%u:%u: %s", p->path, src.line, src.column, full);
        return VT_ERR_FORMAT;
    }
    return VT_OK;
}

/* devices: one value ("all", an index) or a list of indices ([0, 1] or a
 * block list), joined with commas for parse_devices. */
static vt_status yp_devices(yparse *p, vt_config_platform *pl)
{
    char full[160];
    snprintf(full, sizeof full, "platforms.%s.devices", pl->name);
    vt_status st = yp_next(p);
    if (st != VT_OK) return st;
    yaml_mark_t m = yp_mark(p);
    vt_config_src src = file_src(m);
    char joined[256];
    size_t o = 0;
    int n_items = 0;
    if (p->ev.type == YAML_SEQUENCE_START_EVENT) {
        for (;;) {
            if ((st = yp_next(p)) != VT_OK) return st;
            if (p->ev.type == YAML_SEQUENCE_END_EVENT) break;
            yaml_mark_t em = yp_mark(p);
            if (p->ev.type != YAML_SCALAR_EVENT || is_null_scalar(&p->ev)) {
                if (p->ev.type != YAML_SCALAR_EVENT) return yp_kind_error(p, full, "a device index");
                vt_set_error("%s:%u:%u: %s: an empty entry in the device list", p->path,
                             mark_line(em), mark_col(em), full);
                return VT_ERR_FORMAT;
            }
            const char *v = (const char *)p->ev.data.scalar.value;
            size_t vn = p->ev.data.scalar.length;
            uint64_t u;
            if (strlen(v) != vn) {
                vt_set_error("%s:%u:%u: %s: an entry contains a NUL character", p->path,
                             mark_line(em), mark_col(em), full);
                return VT_ERR_FORMAT;
            }
            if (++n_items > VT_DEVICES_MAX) {
                vt_set_error("%s:%u:%u: %s: more than %d devices listed", p->path, mark_line(em),
                             mark_col(em), full, VT_DEVICES_MAX);
                return VT_ERR_FORMAT;
            }
            if (strchr(v, ',') || o + vn + 2 >= sizeof joined ||
                parse_uint(v, 0, VT_DEVICE_INDEX_MAX, &u) != VT_OK) {
                vt_set_error("%s:%u:%u: %s: '%.*s' is not a device index (0..%d)", p->path,
                             mark_line(em), mark_col(em), full, quote_len(vn), v,
                             VT_DEVICE_INDEX_MAX);
                return VT_ERR_FORMAT;
            }
            o += (size_t)snprintf(joined + o, sizeof joined - o, "%s%s", o ? "," : "", v);
        }
        if (o == 0) {
            vt_set_error("%s:%u:%u: %s: an empty list: name device indices ([0, 1]) or 'all'",
                         p->path, mark_line(m), mark_col(m), full);
            return VT_ERR_FORMAT;
        }
    } else if (p->ev.type == YAML_SCALAR_EVENT && !is_null_scalar(&p->ev)) {
        const char *v = (const char *)p->ev.data.scalar.value;
        size_t vn = p->ev.data.scalar.length;
        if (strlen(v) != vn) {
            vt_set_error("%s:%u:%u: %s: the value contains a NUL character", p->path,
                         mark_line(m), mark_col(m), full);
            return VT_ERR_FORMAT;
        }
        if (p->ev.data.scalar.style == YAML_LITERAL_SCALAR_STYLE ||
            p->ev.data.scalar.style == YAML_FOLDED_SCALAR_STYLE) {
            vt_set_error("%s:%u:%u: %s: a block scalar (| or >); write the devices on one line "
                         "([0, 1]) or as a list", p->path, mark_line(m), mark_col(m), full);
            return VT_ERR_FORMAT;
        }
        if (vn >= sizeof joined) {
            vt_set_error("%s:%u:%u: %s: '%.*s' is not a device index (0..%d) or 'all'", p->path,
                         mark_line(m), mark_col(m), full, quote_len(vn), v, VT_DEVICE_INDEX_MAX);
            return VT_ERR_FORMAT;
        }
        memcpy(joined, v, vn + 1);
    } else if (p->ev.type == YAML_SCALAR_EVENT) {
        vt_set_error("%s:%u:%u: %s: expected a value, found none (null)", p->path, mark_line(m),
                     mark_col(m), full);
        return VT_ERR_FORMAT;
    } else {
        return yp_kind_error(p, full, "a device index, a list of them or 'all'");
    }
    if (parse_devices(joined, pl, src) != VT_OK) {
        vt_error_prefix("%s:%u:%u: %s", p->path, src.line, src.column, full);
        return VT_ERR_FORMAT;
    }
    return VT_OK;
}

static vt_status yp_expert_cache(yparse *p, vt_config_platform *pl)
{
    static const char *const names[] = {"store", "arena", "slots", "headroom", "io", "host_arena",
                                        "policy", "prefetch", "prefetch_top", "prefetch_max",
                                        "readers", "staging", "slot_classes", "slot_unit"};
    static const pkey keys[] = {PK_STORE, PK_ARENA, PK_SLOTS, PK_HEADROOM, PK_IO, PK_HOST_ARENA,
                                PK_POLICY, PK_PREFETCH, PK_PREFETCH_TOP, PK_PREFETCH_MAX, PK_READERS, PK_STAGING,
                                PK_SLOT_CLASSES, PK_SLOT_UNIT};
    enum { N = sizeof names / sizeof names[0] };
    char where[128], full[192], key[NAME_CAP];
    snprintf(where, sizeof where, "platforms.%s.expert_cache", pl->name);
    int open, done;
    vt_status st = yp_mapping(p, where, &open);
    if (st != VT_OK || !open) return st;
    seen_key seen[N] = {{0}};
    for (;;) {
        yaml_mark_t m;
        if ((st = yp_key(p, where, &done, key, &m)) != VT_OK) return st;
        if (done) return VT_OK;
        full_key(full, sizeof full, where, key);
        int i = 0;
        while (i < N && strcmp(key, names[i])) i++;
        if (i == N)
            return yp_unknown_key(p, m, full,
                                  "store, arena, slots, headroom, io, host_arena, policy, prefetch, "
                                  "prefetch_top, prefetch_max, readers, staging, slot_classes, "
                                  "slot_unit");
        if ((st = yp_once(p, &seen[i], full, m)) != VT_OK) return st;
        int other = keys[i] == PK_ARENA ? 2 : keys[i] == PK_SLOTS ? 1 : -1;
        if (other >= 0 && seen[other].set) {
            vt_set_error("%s:%u:%u: %s: '%s' is given too (line %u, column %u); give the arena "
                         "in bytes (arena) or in slots (slots), not both",
                         p->path, mark_line(m), mark_col(m), full, names[other],
                         mark_line(seen[other].mark), mark_col(seen[other].mark));
            return VT_ERR_FORMAT;
        }
        if ((st = yp_platform_value(p, pl, keys[i])) != VT_OK) return st;
    }
}

static vt_status yp_platform(yparse *p, vt_config_platform *pl)
{
    static const char *const names[] = {"backend", "unified_memory", "kv_cache_tokens", "experts",
                                        "expert_cache", "pinned_budget", "devices"};
    static const pkey keys[] = {PK_BACKEND, PK_UNIFIED, PK_KV, PK_EXPERTS, PK_COUNT, PK_PINNED,
                                PK_DEVICES};
    enum { N = sizeof names / sizeof names[0] };
    char where[96], full[160], key[NAME_CAP];
    snprintf(where, sizeof where, "platforms.%s", pl->name);
    int open, done;
    vt_status st = yp_mapping(p, where, &open);
    if (st != VT_OK || !open) return st;
    seen_key seen[N] = {{0}};
    for (;;) {
        yaml_mark_t m;
        if ((st = yp_key(p, where, &done, key, &m)) != VT_OK) return st;
        if (done) return VT_OK;
        full_key(full, sizeof full, where, key);
        int i = 0;
        while (i < N && strcmp(key, names[i])) i++;
        if (i == N)
            return yp_unknown_key(p, m, full, "backend, unified_memory, kv_cache_tokens, experts, "
                                              "expert_cache, pinned_budget, devices");
        if ((st = yp_once(p, &seen[i], full, m)) != VT_OK) return st;
        st = keys[i] == PK_COUNT     ? yp_expert_cache(p, pl)
             : keys[i] == PK_DEVICES ? yp_devices(p, pl)
                                     : yp_platform_value(p, pl, keys[i]);
        if (st != VT_OK) return st;
    }
}

static vt_status yp_platforms(yparse *p)
{
    vt_config *c = p->c;
    seen_key seen[VT_CONFIG_MAX_ENTRIES] = {{0}};
    char key[NAME_CAP], name[NAME_CAP], full[96];
    int open, done;
    vt_status st = yp_mapping(p, "platforms", &open);
    if (st != VT_OK || !open) return st;
    for (;;) {
        yaml_mark_t m;
        if ((st = yp_key(p, "platforms", &done, key, &m)) != VT_OK) return st;
        if (done) return VT_OK;
        if ((st = yp_name_key(p, key, m, "platforms", name)) != VT_OK) return st;
        snprintf(full, sizeof full, "platforms.%s", name);
        if (reserved_platform_name(name)) {
            vt_set_error("%s:%u:%u: %s: '%s' is reserved and cannot name a platform", p->path,
                         mark_line(m), mark_col(m), full, name);
            return VT_ERR_FORMAT;
        }
        int i = find_platform(c, name);
        if (i < 0) {
            if (c->n_platforms == VT_CONFIG_MAX_ENTRIES) {
                vt_set_error("%s:%u:%u: %s: more than %d platforms", p->path, mark_line(m),
                             mark_col(m), full, VT_CONFIG_MAX_ENTRIES);
                return VT_ERR_FORMAT;
            }
            i = c->n_platforms++;
            vt_config_platform_defaults(&c->platforms[i], name);
        }
        if ((st = yp_once(p, &seen[i], full, m)) != VT_OK) return st;
        if ((st = yp_platform(p, &c->platforms[i])) != VT_OK) return st;
    }
}

static vt_status yp_models(yparse *p)
{
    vt_config *c = p->c;
    seen_key seen[VT_CONFIG_MAX_ENTRIES] = {{0}};
    char key[NAME_CAP], arch[NAME_CAP], full[96];
    int open, done;
    vt_status st = yp_mapping(p, "models", &open);
    if (st != VT_OK || !open) return st;
    for (;;) {
        yaml_mark_t m;
        if ((st = yp_key(p, "models", &done, key, &m)) != VT_OK) return st;
        if (done) return VT_OK;
        if ((st = yp_name_key(p, key, m, "models", arch)) != VT_OK) return st;
        snprintf(full, sizeof full, "models.%s", arch);
        int i = find_model(c, arch);
        if (i < 0) {
            if (c->n_models == VT_CONFIG_MAX_ENTRIES) {
                vt_set_error("%s:%u:%u: %s: more than %d models", p->path, mark_line(m),
                             mark_col(m), full, VT_CONFIG_MAX_ENTRIES);
                return VT_ERR_FORMAT;
            }
            i = c->n_models++;
            memset(&c->models[i], 0, sizeof c->models[i]);
            copy_str(c->models[i].key, sizeof c->models[i].key, arch);
        }
        if ((st = yp_once(p, &seen[i], full, m)) != VT_OK) return st;
        const char *text;
        vt_config_src src;
        if ((st = yp_scalar(p, full, &text, &src)) != VT_OK) return st;
        if (parse_name(text, c->models[i].value) != VT_OK) {
            vt_error_prefix("%s:%u:%u: %s", p->path, src.line, src.column, full);
            return VT_ERR_FORMAT;
        }
        c->models[i].src = src;
    }
}

static vt_status yp_defaults(yparse *p)
{
    vt_config *c = p->c;
    seen_key seen = {0};
    char key[NAME_CAP], full[96];
    int open, done;
    vt_status st = yp_mapping(p, "defaults", &open);
    if (st != VT_OK || !open) return st;
    for (;;) {
        yaml_mark_t m;
        if ((st = yp_key(p, "defaults", &done, key, &m)) != VT_OK) return st;
        if (done) return VT_OK;
        full_key(full, sizeof full, "defaults", key);
        if (strcmp(key, "platform")) return yp_unknown_key(p, m, full, "platform");
        if ((st = yp_once(p, &seen, full, m)) != VT_OK) return st;
        const char *text;
        vt_config_src src;
        if ((st = yp_scalar(p, full, &text, &src)) != VT_OK) return st;
        if (parse_name(text, c->default_platform) != VT_OK) {
            vt_error_prefix("%s:%u:%u: %s", p->path, src.line, src.column, full);
            return VT_ERR_FORMAT;
        }
        c->default_platform_src = src; /* that it names a platform is checked at the end */
    }
}

static vt_status yp_version(yparse *p)
{
    const char *text;
    vt_config_src src;
    uint64_t v;
    vt_status st = yp_scalar(p, "version", &text, &src);
    if (st != VT_OK) return st;
    if (parse_uint(text, 0, UINT64_MAX, &v) != VT_OK) {
        vt_error_prefix("%s:%u:%u: version", p->path, src.line, src.column);
        return VT_ERR_FORMAT;
    }
    if (v != 1) {
        vt_set_error("%s:%u:%u: version: this vt reads version 1 files, this one says %llu", p->path,
                     src.line, src.column, (unsigned long long)v);
        return VT_ERR_FORMAT;
    }
    return VT_OK;
}

static vt_status yp_top(yparse *p)
{
    static const char *const names[] = {"version", "defaults", "models", "platforms"};
    seen_key seen[4] = {{0}};
    char key[NAME_CAP];
    int done;
    for (;;) {
        yaml_mark_t m;
        vt_status st = yp_key(p, "", &done, key, &m);
        if (st != VT_OK) return st;
        if (done) return VT_OK;
        int i = 0;
        while (i < 4 && strcmp(key, names[i])) i++;
        if (i == 4) return yp_unknown_key(p, m, key, "version, defaults, models, platforms");
        if ((st = yp_once(p, &seen[i], key, m)) != VT_OK) return st;
        switch (i) {
        case 0: st = yp_version(p); break;
        case 1: st = yp_defaults(p); break;
        case 2: st = yp_models(p); break;
        default: st = yp_platforms(p); break;
        }
        if (st != VT_OK) return st;
    }
}

/* stream-start [document-start root document-end] stream-end; one document. */
static vt_status yp_stream(yparse *p)
{
    vt_status st;
    if ((st = yp_next(p)) != VT_OK) return st;
    if (p->ev.type != YAML_STREAM_START_EVENT) return yp_kind_error(p, "stream", "a YAML stream");
    if ((st = yp_next(p)) != VT_OK) return st;
    if (p->ev.type == YAML_STREAM_END_EVENT) return VT_OK; /* empty or comments only */
    if ((st = yp_next(p)) != VT_OK) return st;              /* the document's root node */
    if (p->ev.type == YAML_MAPPING_START_EVENT) {
        if ((st = yp_top(p)) != VT_OK) return st;
    } else if (!is_null_scalar(&p->ev)) {
        return yp_kind_error(p, "top level", "a mapping (version, defaults, models, platforms)");
    }
    if ((st = yp_next(p)) != VT_OK) return st; /* document end */
    if ((st = yp_next(p)) != VT_OK) return st;
    if (p->ev.type != YAML_STREAM_END_EVENT) {
        yaml_mark_t m = yp_mark(p);
        vt_set_error("%s:%u:%u: a second YAML document; the configuration is one document",
                     p->path, mark_line(m), mark_col(m));
        return VT_ERR_FORMAT;
    }
    return VT_OK;
}

/* A first pass over every event: broken YAML is reported as such, before any
 * schema error that the events ahead of it would give. */
static vt_status yp_syntax(yparse *p)
{
    int depth = 0;
    for (;;) {
        vt_status st = yp_next(p);
        if (st != VT_OK) return st;
        if (p->ev.type == YAML_STREAM_END_EVENT) return VT_OK;
        if (p->ev.type == YAML_MAPPING_START_EVENT || p->ev.type == YAML_SEQUENCE_START_EVENT) {
            /* the schema is 4 levels deep; libyaml's time grows with the square of
             * the nesting, so a hostile file is stopped here */
            if (++depth > 16) {
                yaml_mark_t m = yp_mark(p);
                vt_set_error("%s:%u:%u: nested more than 16 levels deep (the configuration has 4)",
                             p->path, mark_line(m), mark_col(m));
                return VT_ERR_FORMAT;
            }
        } else if (p->ev.type == YAML_MAPPING_END_EVENT || p->ev.type == YAML_SEQUENCE_END_EVENT) {
            depth--;
        }
    }
}

static vt_status read_file(const char *path, char **text, size_t *len)
{
    /* O_NONBLOCK: opening a FIFO for reading would wait for a writer; the
     * type is checked on the descriptor */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        vt_set_error("cannot open config %s: %s", path, strerror(errno));
        return VT_ERR_IO;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        vt_set_error("cannot check config %s: %s", path, strerror(errno));
        close(fd);
        return VT_ERR_IO;
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        vt_set_error("config %s: %s, not a regular file", path, vt_file_type_name(sb.st_mode));
        return VT_ERR_IO;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        vt_set_error("cannot open config %s: %s", path, strerror(errno));
        return VT_ERR_IO;
    }
    char *buf = malloc(CONFIG_FILE_MAX + 1);
    if (!buf) {
        fclose(f);
        vt_set_error("%s: cannot allocate %u bytes to read it", path, CONFIG_FILE_MAX + 1);
        return VT_ERR_OUT_OF_MEMORY;
    }
    size_t n = fread(buf, 1, CONFIG_FILE_MAX + 1, f);
    int err = ferror(f) ? errno : 0;
    fclose(f);
    if (err) {
        free(buf);
        vt_set_error("cannot read config %s: %s", path, strerror(err));
        return VT_ERR_IO;
    }
    if (n > CONFIG_FILE_MAX) {
        free(buf);
        vt_set_error("%s: larger than %u bytes; not a residency configuration", path,
                     CONFIG_FILE_MAX);
        return VT_ERR_FORMAT;
    }
    buf[n] = 0;
    *text = buf;
    *len = n;
    return VT_OK;
}

vt_status vt_config_load_file(const char *path, vt_config *c)
{
    if (!path || !c) {
        vt_set_error("vt_config_load_file: NULL argument");
        return VT_ERR_INVALID_ARG;
    }
    if (strlen(path) >= sizeof c->path) {
        vt_set_error("config path '%.80s...' is longer than %zu bytes", path, sizeof c->path - 1);
        return VT_ERR_INVALID_ARG;
    }
    char *text;
    size_t len;
    vt_status st = read_file(path, &text, &len);
    if (st != VT_OK) return st;
    vt_config *w = malloc(sizeof *w);
    if (!w) {
        free(text);
        vt_set_error("%s: cannot allocate %zu bytes for the configuration", path, sizeof *w);
        return VT_ERR_OUT_OF_MEMORY;
    }
    *w = *c;
    copy_str(w->path, sizeof w->path, path);

    /* two passes over the text: YAML syntax first, then the schema */
    yparse p = {.path = path, .text = text, .len = len, .c = w};
    for (int pass = 0; pass < 2 && st == VT_OK; pass++) {
        if (pass) yaml_parser_delete(&p.y);
        if (!yaml_parser_initialize(&p.y)) {
            if (p.have_ev) yaml_event_delete(&p.ev);
            free(w);
            free(text);
            vt_set_error("%s: cannot initialize the YAML parser (out of memory)", path);
            return VT_ERR_OUT_OF_MEMORY;
        }
        yaml_parser_set_input_string(&p.y, (const unsigned char *)text, len);
        st = pass ? yp_stream(&p) : yp_syntax(&p);
    }
    if (st == VT_OK && find_platform(w, w->default_platform) < 0) {
        char list[512];
        vt_config_src s = w->default_platform_src;
        if (s.origin == VT_CONFIG_FROM_FILE)
            vt_set_error("%s:%u:%u: defaults.platform: no platform '%s' (platforms: %s)", path,
                         s.line, s.column, w->default_platform, platform_list(w, list, sizeof list));
        else
            vt_set_error("%s: defaults.platform '%s' names no platform (platforms: %s)", path,
                         w->default_platform, platform_list(w, list, sizeof list));
        st = VT_ERR_FORMAT;
    }
    if (st == VT_OK) *c = *w;
    if (p.have_ev) yaml_event_delete(&p.ev);
    yaml_parser_delete(&p.y);
    free(w);
    free(text);
    return st;
}

vt_status vt_config_load(const char *explicit_path, vt_config *c)
{
    vt_config_defaults(c);
    if (explicit_path) return vt_config_load_file(explicit_path, c);
    const char *env = getenv("VT_CONFIG");
    if (env && *env) return vt_config_load_file(env, c);
    char exe[PATH_MAX];
    ssize_t l = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (l <= 0) return VT_OK;
    exe[l] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return VT_OK;
    *slash = 0;
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/../share/vt/residency.yaml", exe);
    if (access(path, R_OK) == 0) return vt_config_load_file(path, c);
#if defined(VT_SOURCE_CONF_DIR) && defined(VT_BUILD_BIN_DIR)
    /* the source tree's file only for a binary of its own build tree: an
     * installed or copied vt reads its prefix, --config and VT_CONFIG only */
    if (!strcmp(exe, VT_BUILD_BIN_DIR) && access(VT_SOURCE_CONF_DIR "/residency.yaml", R_OK) == 0)
        return vt_config_load_file(VT_SOURCE_CONF_DIR "/residency.yaml", c);
#endif
    return VT_OK;
}

/* ------------------------------------------------------------------------ */
/* Overrides                                                                 */
/* ------------------------------------------------------------------------ */

/* The override without its "--set KEY=VALUE: " prefix (added by the caller). */
static vt_status set_value(vt_config *c, const char *key, const char *value)
{
    static const vt_config_src cli = {VT_CONFIG_FROM_CLI, 0, 0};
    const char *k;
    size_t kn;
    trim(key, &k, &kn);
    char buf[256];
    if (kn == 0) {
        vt_set_error("empty key: expected KEY=VALUE, such as cuda.experts=streamed");
        return VT_ERR_INVALID_ARG;
    }
    if (kn >= sizeof buf) {
        vt_set_error("the key is longer than %zu characters", sizeof buf - 1);
        return VT_ERR_INVALID_ARG;
    }
    memcpy(buf, k, kn);
    buf[kn] = 0;
    char *dot = strchr(buf, '.');
    char *rest = dot ? dot + 1 : NULL;
    if (dot) *dot = 0; /* buf: the first part */
    char name[NAME_CAP];
    uint64_t u;

    if (!strcmp(buf, "version")) {
        if (rest) goto unknown;
        if (parse_uint(value, 0, UINT64_MAX, &u) != VT_OK) return VT_ERR_INVALID_ARG;
        if (u != 1) {
            vt_set_error("this vt reads version 1 configurations only");
            return VT_ERR_INVALID_ARG;
        }
        return VT_OK; /* nothing to record */
    }
    if (!strcmp(buf, "defaults")) {
        if (!rest || strcmp(rest, "platform")) goto unknown;
        if (parse_name(value, name) != VT_OK) return VT_ERR_INVALID_ARG;
        if (find_platform(c, name) < 0) {
            char list[512];
            vt_set_error("no platform '%s' (platforms: %s; create one first with --set %s.backend=...)",
                         name, platform_list(c, list, sizeof list), name);
            return VT_ERR_INVALID_ARG;
        }
        copy_str(c->default_platform, sizeof c->default_platform, name);
        c->default_platform_src = cli;
        return VT_OK;
    }
    if (!strcmp(buf, "models")) {
        char arch[NAME_CAP], plugin[NAME_CAP];
        if (!rest) {
            vt_set_error("'models' is a section: set models.ARCHITECTURE=PLUGIN");
            return VT_ERR_INVALID_ARG;
        }
        if (parse_name(rest, arch) != VT_OK || strcmp(arch, rest)) {
            vt_set_error("'%s' is not an architecture name (letters, digits, '_' and '-' only)",
                         rest);
            return VT_ERR_INVALID_ARG;
        }
        if (parse_name(value, plugin) != VT_OK) return VT_ERR_INVALID_ARG;
        int i = find_model(c, arch);
        if (i < 0) {
            if (c->n_models == VT_CONFIG_MAX_ENTRIES) {
                vt_set_error("more than %d models", VT_CONFIG_MAX_ENTRIES);
                return VT_ERR_INVALID_ARG;
            }
            i = c->n_models++;
            memset(&c->models[i], 0, sizeof c->models[i]);
            copy_str(c->models[i].key, sizeof c->models[i].key, arch);
        }
        copy_str(c->models[i].value, sizeof c->models[i].value, plugin);
        c->models[i].src = cli;
        return VT_OK;
    }

    /* [platforms.]NAME.KEY */
    char *pname = buf;
    if (!strcmp(buf, "platforms")) {
        if (!rest) {
            vt_set_error("'platforms' is a section: set platforms.NAME.KEY=VALUE");
            return VT_ERR_INVALID_ARG;
        }
        pname = rest;
        dot = strchr(rest, '.');
        rest = dot ? dot + 1 : NULL;
        if (dot) *dot = 0;
    }
    if (!rest) {
        vt_set_error("unknown key '%.*s': a platform key is [platforms.]PLATFORM.KEY, such as "
                     "cuda.experts; keys: %s", (int)kn, k, PKEY_LIST);
        return VT_ERR_INVALID_ARG;
    }
    if (parse_name(pname, name) != VT_OK || strcmp(name, pname)) {
        vt_set_error("'%s' is not a platform name (letters, digits, '_' and '-' only)", pname);
        return VT_ERR_INVALID_ARG;
    }
    if (reserved_platform_name(name)) {
        vt_set_error("'%s' is reserved and cannot name a platform", name);
        return VT_ERR_INVALID_ARG;
    }
    int kidx = 0;
    while (kidx < PK_COUNT && strcmp(rest, pkey_path[kidx])) kidx++;
    if (kidx == PK_COUNT) {
        if (!strcmp(rest, "expert_cache"))
            vt_set_error("'expert_cache' is a section: set expert_cache.store, expert_cache.arena, "
                         "expert_cache.slots or expert_cache.headroom");
        else
            vt_set_error("unknown platform key '%s' (keys: %s)", rest, PKEY_LIST);
        return VT_ERR_INVALID_ARG;
    }
    int i = find_platform(c, name);
    vt_config_platform p;
    if (i >= 0) {
        p = c->platforms[i];
    } else {
        if (c->n_platforms == VT_CONFIG_MAX_ENTRIES) {
            vt_set_error("more than %d platforms", VT_CONFIG_MAX_ENTRIES);
            return VT_ERR_INVALID_ARG;
        }
        vt_config_platform_defaults(&p, name);
    }
    if (platform_apply(&p, (pkey)kidx, value, cli) != VT_OK) return VT_ERR_INVALID_ARG;
    if (i < 0) i = c->n_platforms++;
    c->platforms[i] = p;
    return VT_OK;

unknown:
    vt_set_error("unknown key '%.*s' (top-level keys: version, defaults.platform, models.ARCH, "
                 "[platforms.]PLATFORM.KEY)", (int)kn, k);
    return VT_ERR_INVALID_ARG;
}

vt_status vt_config_set(vt_config *c, const char *key, const char *value)
{
    if (!c || !key || !value) {
        vt_set_error("vt_config_set: NULL argument");
        return VT_ERR_INVALID_ARG;
    }
    if (set_value(c, key, value) != VT_OK) {
        vt_error_prefix("--set %s=%s", key, value);
        return VT_ERR_INVALID_ARG;
    }
    return VT_OK;
}

vt_status vt_config_set_arg(vt_config *c, const char *key_equals_value)
{
    if (!c || !key_equals_value) {
        vt_set_error("vt_config_set_arg: NULL argument");
        return VT_ERR_INVALID_ARG;
    }
    const char *eqs = strchr(key_equals_value, '=');
    if (!eqs) {
        vt_set_error("--set %s: expected KEY=VALUE, such as cuda.expert_cache.headroom=2GiB",
                     key_equals_value);
        return VT_ERR_INVALID_ARG;
    }
    char key[256];
    size_t kn = (size_t)(eqs - key_equals_value);
    if (kn >= sizeof key) {
        vt_set_error("--set %.80s...: the key is longer than %zu characters", key_equals_value,
                     sizeof key - 1);
        return VT_ERR_INVALID_ARG;
    }
    memcpy(key, key_equals_value, kn);
    key[kn] = 0;
    return vt_config_set(c, key, eqs + 1);
}

/* ------------------------------------------------------------------------ */
/* Lookups and printing                                                      */
/* ------------------------------------------------------------------------ */

const char *vt_config_model_for_arch(const vt_config *c, const char *arch)
{
    int i = c && arch ? find_model(c, arch) : -1;
    return i < 0 ? NULL : c->models[i].value;
}

const vt_config_platform *vt_config_platform_get(const vt_config *c, const char *name)
{
    int i = c && name ? find_platform(c, name) : -1;
    return i < 0 ? NULL : &c->platforms[i];
}

const char *vt_experts_mode_name(vt_experts_mode m)
{
    switch (m) {
    case VT_EXPERTS_RESIDENT: return "resident";
    case VT_EXPERTS_STREAMED: return "streamed";
    case VT_EXPERTS_AUTO: return "auto";
    }
    return "unknown";
}

static void print_line(FILE *f, const vt_config *c, const char *key, const char *value,
                       vt_config_src src)
{
    char left[256], origin[600];
    snprintf(left, sizeof left, "%s = %s", key, value);
    switch (src.origin) {
    case VT_CONFIG_FROM_FILE:
        snprintf(origin, sizeof origin, "%s:%u:%u", c->path[0] ? c->path : "(file)", src.line,
                 src.column);
        break;
    case VT_CONFIG_FROM_CLI: copy_str(origin, sizeof origin, "--set"); break;
    default: copy_str(origin, sizeof origin, "default"); break;
    }
    fprintf(f, "%-59s # %s\n", left, origin);
}

static const char *bytes_value(uint64_t b, char *buf, size_t cap)
{
    char human[48];
    snprintf(buf, cap, "%s (%llu)", vt_config_format_bytes(b, human, sizeof human),
             (unsigned long long)b);
    return buf;
}

void vt_config_print(const vt_config *c, FILE *f)
{
    char key[192], val[128]; /* 16 devices of 4 digits: 96 characters */
    print_line(f, c, "defaults.platform", c->default_platform, c->default_platform_src);
    for (int i = 0; i < c->n_models; i++) {
        snprintf(key, sizeof key, "models.%s", c->models[i].key);
        print_line(f, c, key, c->models[i].value, c->models[i].src);
    }
    for (int i = 0; i < c->n_platforms; i++) {
        const vt_config_platform *p = &c->platforms[i];
        for (int k = 0; k < PK_COUNT; k++) {
            vt_config_src src = {0};
            snprintf(key, sizeof key, "platforms.%s.%s", p->name, pkey_path[k]);
            switch ((pkey)k) {
            case PK_BACKEND: copy_str(val, sizeof val, p->backend); src = p->backend_src; break;
            case PK_UNIFIED:
                copy_str(val, sizeof val, p->unified_memory ? "true" : "false");
                src = p->unified_memory_src;
                break;
            case PK_KV:
                snprintf(val, sizeof val, "%u", p->kv_cache_tokens);
                src = p->kv_cache_tokens_src;
                break;
            case PK_EXPERTS:
                copy_str(val, sizeof val, vt_experts_mode_name(p->experts));
                src = p->experts_src;
                break;
            case PK_STORE: copy_str(val, sizeof val, p->expert_store); src = p->expert_store_src; break;
            case PK_ARENA:
                if (p->arena_bytes) bytes_value(p->arena_bytes, val, sizeof val);
                else copy_str(val, sizeof val, p->arena_slots ? "none (slots given)" : "auto");
                src = p->arena_bytes_src;
                break;
            case PK_SLOTS:
                if (p->arena_slots) snprintf(val, sizeof val, "%llu", (unsigned long long)p->arena_slots);
                else copy_str(val, sizeof val, "none");
                src = p->arena_slots_src;
                break;
            case PK_HEADROOM:
                bytes_value(p->headroom_bytes, val, sizeof val);
                src = p->headroom_bytes_src;
                break;
            case PK_IO:
                copy_str(val, sizeof val, p->io_direct ? "direct" : "pread");
                src = p->io_direct_src;
                break;
            case PK_POLICY:
                copy_str(val, sizeof val, p->policy == VT_POLICY_LRU     ? "lru"
                                          : p->policy == VT_POLICY_LAYER ? "layer"
                                                                         : "lfru");
                src = p->policy_src;
                break;
            case PK_PREFETCH:
                copy_str(val, sizeof val, p->prefetch == VT_PREFETCH_AUTO ? "auto"
                                          : p->prefetch ? "next-layer" : "off");
                src = p->prefetch_src;
                break;
            case PK_SLOT_CLASSES:
                copy_str(val, sizeof val, p->slot_classes == VT_SLOT_CLASSES_OFF ? "off" : "auto");
                src = p->slot_classes_src;
                break;
            case PK_SLOT_UNIT:
                copy_str(val, sizeof val, p->slot_unit == VT_SLOT_UNIT_EXPERT   ? "expert"
                                          : p->slot_unit == VT_SLOT_UNIT_MATRIX ? "matrix"
                                                                                : "auto");
                src = p->slot_unit_src;
                break;
            case PK_PREFETCH_TOP:
                if (p->prefetch_top) snprintf(val, sizeof val, "%u", p->prefetch_top);
                else copy_str(val, sizeof val, "auto");
                src = p->prefetch_top_src;
                break;
            case PK_PREFETCH_MAX:
                if (p->prefetch_max) snprintf(val, sizeof val, "%u", p->prefetch_max);
                else copy_str(val, sizeof val, "auto");
                src = p->prefetch_max_src;
                break;
            case PK_READERS:
                if (p->readers) snprintf(val, sizeof val, "%u", p->readers);
                else copy_str(val, sizeof val, "auto");
                src = p->readers_src;
                break;
            case PK_STAGING:
                if (p->staging_bytes == VT_STAGING_AUTO) copy_str(val, sizeof val, "auto");
                else bytes_value(p->staging_bytes, val, sizeof val);
                src = p->staging_bytes_src;
                break;
            case PK_HOST_ARENA:
                if (p->host_arena_bytes == VT_HOST_ARENA_AUTO) copy_str(val, sizeof val, "auto");
                else bytes_value(p->host_arena_bytes, val, sizeof val);
                src = p->host_arena_bytes_src;
                break;
            case PK_PINNED:
                bytes_value(p->pinned_budget_bytes, val, sizeof val);
                src = p->pinned_budget_bytes_src;
                break;
            case PK_DEVICES:
                if (p->devices_all) copy_str(val, sizeof val, "all");
                else if (p->n_devices == 1) snprintf(val, sizeof val, "%d", p->devices[0]);
                else {
                    size_t o = 0;
                    for (uint32_t d = 0; d < p->n_devices && o < sizeof val; d++)
                        o += (size_t)snprintf(val + o, sizeof val - o, "%s%d", d ? ", " : "[",
                                              p->devices[d]);
                    if (o < sizeof val) snprintf(val + o, sizeof val - o, "]");
                }
                src = p->devices_src;
                break;
            case PK_COUNT: break;
            }
            print_line(f, c, key, val, src);
        }
    }
}
