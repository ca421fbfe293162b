/*
 * config_yaml.c - the residency configuration file (config.h's schema) read
 * with libyaml's event parser: every key checked against the schema, its
 * value through config.c's parsers, errors as "FILE:LINE:COL: key: ...".
 * A file is parsed into a copy of the configuration, which replaces the
 * caller's only when the whole file is valid: a refused file changes nothing.
 * Entries of the file merge into what is already there (the defaults): a
 * platform or model the file names is updated or added, the others stay.
 */
#include "config_internal.h"

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

#define CONFIG_FILE_MAX (1u << 20)   /* a residency config is a few KiB; refuse more than 1 MiB */

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
    if (cf_parse_name(key, out) != VT_OK) {
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
    snprintf(full, sizeof full, "platforms.%s.%s", pl->name, cf_pkey_path[k]);
    const char *text;
    vt_config_src src;
    vt_status st = yp_scalar(p, full, &text, &src);
    if (st != VT_OK) return st;
    if (cf_platform_apply(pl, k, text, src) != VT_OK) {
        vt_error_prefix("%s:%u:%u: %s", p->path, src.line, src.column, full);
        return VT_ERR_FORMAT;
    }
    return VT_OK;
}

/* devices: one value ("all", an index) or a list of indices ([0, 1] or a
 * block list), joined with commas for cf_parse_devices. */
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
                cf_parse_uint(v, 0, VT_DEVICE_INDEX_MAX, &u) != VT_OK) {
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
    if (cf_parse_devices(joined, pl, src) != VT_OK) {
        vt_error_prefix("%s:%u:%u: %s", p->path, src.line, src.column, full);
        return VT_ERR_FORMAT;
    }
    return VT_OK;
}

/* The next key of a mapping whose keys are names[0..n-1]: *i its index, or -1
 * at the mapping's end; full (cap bytes) its path, *m where it stands. An
 * unknown key is refused with the list of names, a second one by yp_once. */
static vt_status yp_table_key(yparse *p, const char *where, const char *const *names, int n,
                              seen_key *seen, char *full, size_t cap, yaml_mark_t *m, int *i)
{
    char key[NAME_CAP];
    int done;
    vt_status st = yp_key(p, where, &done, key, m);
    if (st != VT_OK) return st;
    *i = -1;
    if (done) return VT_OK;
    full_key(full, cap, where, key);
    int k = 0;
    while (k < n && strcmp(key, names[k])) k++;
    if (k == n) {
        char expected[256];
        size_t at = 0;
        expected[0] = 0;
        for (int j = 0; j < n && at < sizeof expected; j++)
            at += (size_t)snprintf(expected + at, sizeof expected - at, "%s%s", j ? ", " : "",
                                   names[j]);
        return yp_unknown_key(p, *m, full, expected);
    }
    if ((st = yp_once(p, &seen[k], full, *m)) != VT_OK) return st;
    *i = k;
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
    char where[128], full[192];
    snprintf(where, sizeof where, "platforms.%s.expert_cache", pl->name);
    int open, i;
    vt_status st = yp_mapping(p, where, &open);
    if (st != VT_OK || !open) return st;
    seen_key seen[N] = {{0}};
    for (;;) {
        yaml_mark_t m;
        if ((st = yp_table_key(p, where, names, N, seen, full, sizeof full, &m, &i)) != VT_OK)
            return st;
        if (i < 0) return VT_OK;
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
    char where[96], full[160];
    snprintf(where, sizeof where, "platforms.%s", pl->name);
    int open, i;
    vt_status st = yp_mapping(p, where, &open);
    if (st != VT_OK || !open) return st;
    seen_key seen[N] = {{0}};
    for (;;) {
        yaml_mark_t m;
        if ((st = yp_table_key(p, where, names, N, seen, full, sizeof full, &m, &i)) != VT_OK)
            return st;
        if (i < 0) return VT_OK;
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
        if (cf_reserved_platform_name(name)) {
            vt_set_error("%s:%u:%u: %s: '%s' is reserved and cannot name a platform", p->path,
                         mark_line(m), mark_col(m), full, name);
            return VT_ERR_FORMAT;
        }
        int i = cf_find_platform(c, name);
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
        int i = cf_find_model(c, arch);
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
        if (cf_parse_name(text, c->models[i].value) != VT_OK) {
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
        if (cf_parse_name(text, c->default_platform) != VT_OK) {
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
    if (cf_parse_uint(text, 0, UINT64_MAX, &v) != VT_OK) {
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
    if (st == VT_OK && cf_find_platform(w, w->default_platform) < 0) {
        char list[512];
        vt_config_src s = w->default_platform_src;
        if (s.origin == VT_CONFIG_FROM_FILE)
            vt_set_error("%s:%u:%u: defaults.platform: no platform '%s' (platforms: %s)", path,
                         s.line, s.column, w->default_platform, cf_platform_list(w, list, sizeof list));
        else
            vt_set_error("%s: defaults.platform '%s' names no platform (platforms: %s)", path,
                         w->default_platform, cf_platform_list(w, list, sizeof list));
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
    if (env && *env) {
        vt_status st = vt_config_load_file(env, c);
        if (st != VT_OK) vt_error_prefix("VT_CONFIG=%s", env); /* the file came from there */
        return st;
    }
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
