/*
 * config.h - the residency configuration (conf/residency.yaml, libyaml).
 *
 * Today it chooses the model plugin for each `general.architecture`, the
 * backend of each platform, the default platform and the default KV cache
 * length. Unknown keys are refused by name (with file and line), so a typo is
 * never silently ignored.
 */
#ifndef VT_CONFIG_H
#define VT_CONFIG_H

#include <stdint.h>

#include "vt/status.h"

#define VT_CONFIG_MAX_ENTRIES 32

typedef struct vt_config_pair {
    char key[64];
    char value[64];
} vt_config_pair;

typedef struct vt_config_platform {
    char name[64];
    char backend[64];
    char experts[16]; /* "resident" */
} vt_config_platform;

typedef struct vt_config {
    char path[512];            /* where it was read from, "" for built-in defaults */
    char default_platform[64];
    uint32_t kv_cache_tokens;
    vt_config_pair models[VT_CONFIG_MAX_ENTRIES];
    int n_models;
    vt_config_platform platforms[VT_CONFIG_MAX_ENTRIES];
    int n_platforms;
} vt_config;

/* Built-in defaults (what conf/residency.yaml ships). */
void vt_config_defaults(vt_config *c);
/* Parse a file. Errors: VT_ERR_IO, VT_ERR_FORMAT naming file, line and key. */
vt_status vt_config_load_file(const char *path, vt_config *c);
/* Find and load the configuration: explicit path (may be NULL), $VT_CONFIG,
 * <bindir>/../share/vt/residency.yaml, the source tree's conf/ (build tree);
 * none found: built-in defaults. */
vt_status vt_config_load(const char *explicit_path, vt_config *c);

const char *vt_config_model_for_arch(const vt_config *c, const char *arch);
const vt_config_platform *vt_config_platform_get(const vt_config *c, const char *name);

#endif
