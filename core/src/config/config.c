/*
 * config.c - the residency configuration (see config.h for the schema): the
 * built-in defaults, the value parsers, --set overrides, and a printout of
 * every resolved value with its origin. The file (conf/residency.yaml, read
 * with libyaml's event parser) is config_yaml.c's.
 *
 * One validation path: a value from the file and a value from --set go
 * through the same parse/apply functions, which set a bare message ("unknown
 * unit 'XB' in '2XB' ..."); the caller prefixes where it came from
 * ("FILE:LINE:COL: platforms.cuda.expert_cache.headroom: ..." or
 * "--set cuda.expert_cache.headroom=2XB: ...").
 */
#include "config_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

#define KV_TOKENS_MAX (1u << 24)     /* kv_cache_tokens: 1 .. 16777216 */
#define SLOTS_MAX 4294967295ull      /* expert_cache.slots: 1 .. 2^32-1 */

/* The key's path under platforms.<name>. */
const char *const cf_pkey_path[PK_COUNT] = {
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
int cf_reserved_platform_name(const char *name)
{
    return !strcmp(name, "version") || !strcmp(name, "defaults") || !strcmp(name, "models") ||
           !strcmp(name, "platforms");
}

/* ------------------------------------------------------------------------ */
/* Defaults                                                                  */
/* ------------------------------------------------------------------------ */

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

static int eq(const char *s, size_t n, const char *lit)
{
    return strlen(lit) == n && !memcmp(s, lit, n);
}

/* A plugin, platform or architecture name: 1..63 of [A-Za-z0-9_-]. */
vt_status cf_parse_name(const char *text, char out[NAME_CAP])
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
vt_status cf_parse_uint(const char *text, uint64_t lo, uint64_t hi, uint64_t *out)
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
    return cf_parse_uint(text, 1, hi, out);
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
    {"PiB", 1ull << 50},
    {"KB", 1000ull}, {"MB", 1000000ull}, {"GB", 1000000000ull}, {"TB", 1000000000000ull},
    {"PB", 1000000000000000ull},
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
        vt_set_error("unknown unit '%.*s' in '%.*s' (units: B, KiB, MiB, GiB, TiB, PiB, KB, MB, GB, TB, PB)",
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
vt_status cf_parse_devices(const char *text, vt_config_platform *p, vt_config_src src)
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
        if (cf_parse_uint(part, 0, VT_DEVICE_INDEX_MAX, &u) != VT_OK) {
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

vt_status cf_platform_apply(vt_config_platform *p, pkey k, const char *text, vt_config_src src)
{
    vt_status st = VT_OK;
    uint64_t u = 0;
    switch (k) {
    case PK_BACKEND:
        if ((st = cf_parse_name(text, p->backend)) == VT_OK) p->backend_src = src;
        break;
    case PK_UNIFIED:
        if ((st = parse_bool(text, &p->unified_memory)) == VT_OK) p->unified_memory_src = src;
        break;
    case PK_KV:
        if ((st = cf_parse_uint(text, 1, KV_TOKENS_MAX, &u)) == VT_OK) {
            p->kv_cache_tokens = (uint32_t)u;
            p->kv_cache_tokens_src = src;
        }
        break;
    case PK_EXPERTS:
        if ((st = parse_experts(text, &p->experts)) == VT_OK) p->experts_src = src;
        break;
    case PK_STORE:
        if ((st = cf_parse_name(text, p->expert_store)) == VT_OK) p->expert_store_src = src;
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
        if ((st = cf_parse_uint(text, 1, SLOTS_MAX, &u)) != VT_OK) break;
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
    case PK_DEVICES: st = cf_parse_devices(text, p, src); break;
    case PK_COUNT:
        vt_set_error("internal: platform key %d", (int)k);
        st = VT_ERR_INTERNAL;
        break;
    }
    return st;
}

int cf_find_model(const vt_config *c, const char *arch)
{
    for (int i = 0; i < c->n_models; i++)
        if (!strcmp(c->models[i].key, arch)) return i;
    return -1;
}

int cf_find_platform(const vt_config *c, const char *name)
{
    for (int i = 0; i < c->n_platforms; i++)
        if (!strcmp(c->platforms[i].name, name)) return i;
    return -1;
}

/* "cpu, cuda, rocm, unified" into buf, for messages. */
const char *cf_platform_list(const vt_config *c, char *buf, size_t cap)
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
        if (cf_parse_uint(value, 0, UINT64_MAX, &u) != VT_OK) return VT_ERR_INVALID_ARG;
        if (u != 1) {
            vt_set_error("this vt reads version 1 configurations only");
            return VT_ERR_INVALID_ARG;
        }
        return VT_OK; /* nothing to record */
    }
    if (!strcmp(buf, "defaults")) {
        if (!rest || strcmp(rest, "platform")) goto unknown;
        if (cf_parse_name(value, name) != VT_OK) return VT_ERR_INVALID_ARG;
        if (cf_find_platform(c, name) < 0) {
            char list[512];
            vt_set_error("no platform '%s' (platforms: %s; create one first with --set %s.backend=...)",
                         name, cf_platform_list(c, list, sizeof list), name);
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
        if (cf_parse_name(rest, arch) != VT_OK || strcmp(arch, rest)) {
            vt_set_error("'%s' is not an architecture name (letters, digits, '_' and '-' only)",
                         rest);
            return VT_ERR_INVALID_ARG;
        }
        if (cf_parse_name(value, plugin) != VT_OK) return VT_ERR_INVALID_ARG;
        int i = cf_find_model(c, arch);
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
    if (cf_parse_name(pname, name) != VT_OK || strcmp(name, pname)) {
        vt_set_error("'%s' is not a platform name (letters, digits, '_' and '-' only)", pname);
        return VT_ERR_INVALID_ARG;
    }
    if (cf_reserved_platform_name(name)) {
        vt_set_error("'%s' is reserved and cannot name a platform", name);
        return VT_ERR_INVALID_ARG;
    }
    int kidx = 0;
    while (kidx < PK_COUNT && strcmp(rest, cf_pkey_path[kidx])) kidx++;
    if (kidx == PK_COUNT) {
        if (!strcmp(rest, "expert_cache"))
            vt_set_error("'expert_cache' is a section: set expert_cache.store, expert_cache.arena, "
                         "expert_cache.slots or expert_cache.headroom");
        else
            vt_set_error("unknown platform key '%s' (keys: %s)", rest, PKEY_LIST);
        return VT_ERR_INVALID_ARG;
    }
    int i = cf_find_platform(c, name);
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
    if (cf_platform_apply(&p, (pkey)kidx, value, cli) != VT_OK) return VT_ERR_INVALID_ARG;
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
    int i = c && arch ? cf_find_model(c, arch) : -1;
    return i < 0 ? NULL : c->models[i].value;
}

const vt_config_platform *vt_config_platform_get(const vt_config *c, const char *name)
{
    int i = c && name ? cf_find_platform(c, name) : -1;
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
    snprintf(buf, cap, "%s (%llu)", vt_format_bytes(b, 1, human, sizeof human),
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
            snprintf(key, sizeof key, "platforms.%s.%s", p->name, cf_pkey_path[k]);
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

