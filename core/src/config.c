/*
 * config.c - reads conf/residency.yaml with libyaml's event parser into a
 * vt_config. The grammar is small and fixed (see the shipped file); every
 * scalar is checked where it is read and errors carry file:line.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <yaml.h>

#include "error.h"

void vt_config_defaults(vt_config *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->default_platform, sizeof c->default_platform, "cpu");
    c->kv_cache_tokens = 4096;
    snprintf(c->models[0].key, 64, "qwen35moe");
    snprintf(c->models[0].value, 64, "qwen35");
    snprintf(c->models[1].key, 64, "qwen35");
    snprintf(c->models[1].value, 64, "qwen35");
    c->n_models = 2;
    snprintf(c->platforms[0].name, 64, "cpu");
    snprintf(c->platforms[0].backend, 64, "cpu");
    snprintf(c->platforms[0].experts, 16, "resident");
    c->n_platforms = 1;
}

typedef struct parser {
    yaml_parser_t y;
    yaml_event_t ev;
    const char *path;
} parser;

static vt_status next(parser *p)
{
    yaml_event_delete(&p->ev);
    if (!yaml_parser_parse(&p->y, &p->ev)) {
        vt_set_error("%s:%zu: YAML error: %s", p->path, p->y.problem_mark.line + 1,
                     p->y.problem ? p->y.problem : "parse failed");
        return VT_ERR_FORMAT;
    }
    return VT_OK;
}

static size_t line(const parser *p) { return p->ev.start_mark.line + 1; }

static vt_status expect(parser *p, yaml_event_type_t t, const char *what)
{
    vt_status st = next(p);
    if (st != VT_OK) return st;
    if (p->ev.type != t) {
        vt_set_error("%s:%zu: expected %s", p->path, line(p), what);
        return VT_ERR_FORMAT;
    }
    return VT_OK;
}

/* Read one scalar value into buf (cap bytes), naming key in errors. */
static vt_status scalar(parser *p, const char *key, char *buf, size_t cap)
{
    vt_status st = next(p);
    if (st != VT_OK) return st;
    if (p->ev.type != YAML_SCALAR_EVENT) {
        vt_set_error("%s:%zu: key '%s' needs a plain value", p->path, line(p), key);
        return VT_ERR_FORMAT;
    }
    const char *v = (const char *)p->ev.data.scalar.value;
    if (p->ev.data.scalar.length >= cap) {
        vt_set_error("%s:%zu: value of '%s' is too long", p->path, line(p), key);
        return VT_ERR_FORMAT;
    }
    snprintf(buf, cap, "%s", v);
    return VT_OK;
}

static vt_status u32_value(parser *p, const char *key, uint32_t lo, uint32_t hi, uint32_t *out)
{
    char buf[64];
    vt_status st = scalar(p, key, buf, sizeof buf);
    if (st != VT_OK) return st;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(buf, &end, 10);
    if (errno || end == buf || *end || v < lo || v > hi || buf[0] == '-') {
        vt_set_error("%s:%zu: '%s' must be an integer in [%u, %u], got '%s'", p->path, line(p), key,
                     lo, hi, buf);
        return VT_ERR_FORMAT;
    }
    *out = (uint32_t)v;
    return VT_OK;
}

/* Mapping of key -> scalar pairs (models:). */
static vt_status parse_models(parser *p, vt_config *c)
{
    vt_status st = expect(p, YAML_MAPPING_START_EVENT, "a mapping under 'models'");
    if (st != VT_OK) return st;
    c->n_models = 0;
    for (;;) {
        if ((st = next(p)) != VT_OK) return st;
        if (p->ev.type == YAML_MAPPING_END_EVENT) return VT_OK;
        if (p->ev.type != YAML_SCALAR_EVENT) {
            vt_set_error("%s:%zu: 'models' entries are 'architecture: plugin'", p->path, line(p));
            return VT_ERR_FORMAT;
        }
        if (c->n_models == VT_CONFIG_MAX_ENTRIES) {
            vt_set_error("%s:%zu: too many entries under 'models'", p->path, line(p));
            return VT_ERR_FORMAT;
        }
        vt_config_pair *e = &c->models[c->n_models++];
        if (p->ev.data.scalar.length >= sizeof e->key) {
            vt_set_error("%s:%zu: architecture name under 'models' is too long", p->path, line(p));
            return VT_ERR_FORMAT;
        }
        snprintf(e->key, sizeof e->key, "%s", (const char *)p->ev.data.scalar.value);
        char key[96];
        snprintf(key, sizeof key, "models.%s", e->key);
        if ((st = scalar(p, key, e->value, sizeof e->value)) != VT_OK) return st;
    }
}

static vt_status parse_platform(parser *p, vt_config_platform *pl)
{
    vt_status st = expect(p, YAML_MAPPING_START_EVENT, "a mapping for the platform");
    if (st != VT_OK) return st;
    memcpy(pl->backend, pl->name, sizeof pl->backend); /* both 64 bytes, NUL-terminated */
    snprintf(pl->experts, sizeof pl->experts, "resident");
    for (;;) {
        if ((st = next(p)) != VT_OK) return st;
        if (p->ev.type == YAML_MAPPING_END_EVENT) return VT_OK;
        if (p->ev.type != YAML_SCALAR_EVENT) {
            vt_set_error("%s:%zu: expected a key in platform '%s'", p->path, line(p), pl->name);
            return VT_ERR_FORMAT;
        }
        char key[64], full[160];
        snprintf(key, sizeof key, "%s", (const char *)p->ev.data.scalar.value);
        snprintf(full, sizeof full, "platforms.%s.%s", pl->name, key);
        if (!strcmp(key, "backend")) {
            st = scalar(p, full, pl->backend, sizeof pl->backend);
        } else if (!strcmp(key, "experts")) {
            st = scalar(p, full, pl->experts, sizeof pl->experts);
            if (st == VT_OK && strcmp(pl->experts, "resident")) {
                vt_set_error("%s:%zu: '%s' = '%s': this vt supports 'resident' only (streaming "
                             "arrives with the expert streamer)", p->path, line(p), full, pl->experts);
                return VT_ERR_UNSUPPORTED;
            }
        } else {
            vt_set_error("%s:%zu: unknown key '%s'", p->path, line(p), full);
            return VT_ERR_FORMAT;
        }
        if (st != VT_OK) return st;
    }
}

static vt_status parse_platforms(parser *p, vt_config *c)
{
    vt_status st = expect(p, YAML_MAPPING_START_EVENT, "a mapping under 'platforms'");
    if (st != VT_OK) return st;
    c->n_platforms = 0;
    for (;;) {
        if ((st = next(p)) != VT_OK) return st;
        if (p->ev.type == YAML_MAPPING_END_EVENT) return VT_OK;
        if (p->ev.type != YAML_SCALAR_EVENT) {
            vt_set_error("%s:%zu: expected a platform name under 'platforms'", p->path, line(p));
            return VT_ERR_FORMAT;
        }
        if (c->n_platforms == VT_CONFIG_MAX_ENTRIES) {
            vt_set_error("%s:%zu: too many platforms", p->path, line(p));
            return VT_ERR_FORMAT;
        }
        vt_config_platform *pl = &c->platforms[c->n_platforms++];
        if (p->ev.data.scalar.length >= sizeof pl->name) {
            vt_set_error("%s:%zu: platform name is too long", p->path, line(p));
            return VT_ERR_FORMAT;
        }
        snprintf(pl->name, sizeof pl->name, "%s", (const char *)p->ev.data.scalar.value);
        if ((st = parse_platform(p, pl)) != VT_OK) return st;
    }
}

static vt_status parse_defaults(parser *p, vt_config *c)
{
    vt_status st = expect(p, YAML_MAPPING_START_EVENT, "a mapping under 'defaults'");
    if (st != VT_OK) return st;
    for (;;) {
        if ((st = next(p)) != VT_OK) return st;
        if (p->ev.type == YAML_MAPPING_END_EVENT) return VT_OK;
        if (p->ev.type != YAML_SCALAR_EVENT) {
            vt_set_error("%s:%zu: expected a key under 'defaults'", p->path, line(p));
            return VT_ERR_FORMAT;
        }
        char key[64];
        snprintf(key, sizeof key, "%s", (const char *)p->ev.data.scalar.value);
        if (!strcmp(key, "platform"))
            st = scalar(p, "defaults.platform", c->default_platform, sizeof c->default_platform);
        else if (!strcmp(key, "kv_cache_tokens"))
            st = u32_value(p, "defaults.kv_cache_tokens", 1, 1u << 24, &c->kv_cache_tokens);
        else {
            vt_set_error("%s:%zu: unknown key 'defaults.%s'", p->path, line(p), key);
            return VT_ERR_FORMAT;
        }
        if (st != VT_OK) return st;
    }
}

vt_status vt_config_load_file(const char *path, vt_config *c)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        vt_set_error("cannot open config %s: %s", path, strerror(errno));
        return VT_ERR_IO;
    }
    vt_config_defaults(c);
    snprintf(c->path, sizeof c->path, "%s", path);
    parser p = {.path = path};
    yaml_parser_initialize(&p.y);
    yaml_parser_set_input_file(&p.y, f);
    vt_status st;
    if ((st = expect(&p, YAML_STREAM_START_EVENT, "a YAML stream")) != VT_OK) goto out;
    if ((st = expect(&p, YAML_DOCUMENT_START_EVENT, "a YAML document")) != VT_OK) goto out;
    if ((st = expect(&p, YAML_MAPPING_START_EVENT, "a mapping at the top level")) != VT_OK) goto out;
    for (;;) {
        if ((st = next(&p)) != VT_OK) goto out;
        if (p.ev.type == YAML_MAPPING_END_EVENT) break;
        if (p.ev.type != YAML_SCALAR_EVENT) {
            vt_set_error("%s:%zu: expected a top-level key", path, line(&p));
            st = VT_ERR_FORMAT;
            goto out;
        }
        char key[64];
        snprintf(key, sizeof key, "%s", (const char *)p.ev.data.scalar.value);
        if (!strcmp(key, "version")) {
            uint32_t v;
            if ((st = u32_value(&p, "version", 1, 1, &v)) != VT_OK) goto out;
        } else if (!strcmp(key, "defaults")) {
            st = parse_defaults(&p, c);
        } else if (!strcmp(key, "models")) {
            st = parse_models(&p, c);
        } else if (!strcmp(key, "platforms")) {
            st = parse_platforms(&p, c);
        } else {
            vt_set_error("%s:%zu: unknown top-level key '%s'", path, line(&p), key);
            st = VT_ERR_FORMAT;
        }
        if (st != VT_OK) goto out;
    }
    if (!vt_config_platform_get(c, c->default_platform)) {
        vt_set_error("%s: defaults.platform '%s' is not listed under 'platforms'", path,
                     c->default_platform);
        st = VT_ERR_FORMAT;
    }
out:
    yaml_event_delete(&p.ev);
    yaml_parser_delete(&p.y);
    fclose(f);
    return st;
}

vt_status vt_config_load(const char *explicit_path, vt_config *c)
{
    if (explicit_path) return vt_config_load_file(explicit_path, c);
    const char *env = getenv("VT_CONFIG");
    if (env && *env) return vt_config_load_file(env, c);
    char exe[PATH_MAX];
    ssize_t l = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (l > 0) {
        exe[l] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            char p[PATH_MAX + 64];
            snprintf(p, sizeof p, "%s/../share/vt/residency.yaml", exe);
            if (access(p, R_OK) == 0) return vt_config_load_file(p, c);
        }
    }
#ifdef VT_SOURCE_CONF_DIR
    if (access(VT_SOURCE_CONF_DIR "/residency.yaml", R_OK) == 0)
        return vt_config_load_file(VT_SOURCE_CONF_DIR "/residency.yaml", c);
#endif
    vt_config_defaults(c);
    return VT_OK;
}

const char *vt_config_model_for_arch(const vt_config *c, const char *arch)
{
    for (int i = 0; i < c->n_models; i++)
        if (!strcmp(c->models[i].key, arch)) return c->models[i].value;
    return NULL;
}

const vt_config_platform *vt_config_platform_get(const vt_config *c, const char *name)
{
    for (int i = 0; i < c->n_platforms; i++)
        if (!strcmp(c->platforms[i].name, name)) return &c->platforms[i];
    return NULL;
}
