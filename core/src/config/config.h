/*
 * config.h - the residency configuration (conf/residency.yaml, libyaml), with
 * command-line overrides and the origin of every value.
 *
 * Schema (every key optional; unknown keys are refused with file:line:column):
 *
 *   version: 1
 *   defaults:
 *     platform: cpu                    # the platform --device picks when not given
 *   models:                            # general.architecture -> model plugin name
 *     qwen35moe: qwen35
 *   platforms:
 *     <name>:                          # cpu, cuda, rocm, unified, or any other name
 *       backend: cuda                  # backend plugin name (default: the platform name)
 *       unified_memory: false          # device memory is the host's (GB10-like)
 *       kv_cache_tokens: 4096          # KV cache length per sequence (--ctx wins)
 *       experts: resident | streamed | auto
 *       expert_cache:
 *         store: host                  # slot store: "host" (core) or a store plugin name
 *         arena: auto | <bytes>        # slot arena budget ...
 *         slots: <count>               # ... or a slot count (not both)
 *         headroom: <bytes>            # device memory kept free by the fit check
 *         io: pread | direct           # how misses are read: buffered pread, or O_DIRECT
 *                                      # (page cache bypassed; falls back to pread with a WARN)
 *         host_arena: auto | <bytes>   # the host tier of a device store: expert slices kept in
 *                                      # host memory (pinned within pinned_budget); 0: none
 *         policy: lfru | layer | lru   # the device tier's replacement policy
 *         prefetch: off | next-layer | auto  # copy the next layer's predicted experts ahead
 *                                      # (auto: where a host tier and a second copy queue are)
 *         prefetch_top: auto | <count> # how many of a layer's predicted experts are considered
 *                                      # for copying ahead, the likeliest first (1..1024, at most top-k;
 *                                      # auto: 6 of every 8, rounded up)
 *         prefetch_max: auto | <count> # the most of them one prefetch copies (the first not
 *                                      # resident; auto: 3 of every 8 routed, rounded up)
 *         slot_classes: auto | off     # slots sized by class of expert slice, or all the largest
 *         slot_unit: auto | expert | matrix  # a slot holds a whole expert (its matrices back to
 *                                      # back: one copy per miss) or one matrix of it
 *         readers: auto | <count>      # reader threads for the misses' file reads (1..64;
 *                                      # auto: the online CPUs, at most 8)
 *         staging: auto | <bytes>      # without a host tier, a ring of pinned staging slots
 *                                      # for a device store (auto: two per reader; 0: the
 *                                      # store's one staging slot, one miss at a time)
 *       pinned_budget: <bytes>         # most pinned host memory the backend may take
 *       devices: 0 | [0, 1] | all      # the backend's devices the platform runs on (0-based
 *                                      # indices; default 0): one index picks that device;
 *                                      # several (or all, when the backend reports more than
 *                                      # one) spread the routed experts over them, which needs
 *                                      # the backend's peer_copy and a model plugin that can:
 *                                      # refused by name at load until both exist (issue 18)
 *
 * Byte sizes: a plain integer (bytes), or a number with a unit: B, KiB, MiB,
 * GiB, TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000); the number may
 * have a fraction ("1.5GiB") and the result is rounded down to whole bytes.
 * Negative, malformed, unknown-unit and > UINT64_MAX values are errors.
 * Units are case-sensitive; blanks between number and unit are allowed
 * ("512 MiB"); a fraction needs a unit of KB/KiB or more ("1.5" and "1.5B"
 * are refused); no sign, exponent or hex.
 *
 * Other values: blanks (space, tab) around any value are ignored. Booleans are
 * true, false, 1 or 0. Names (platforms, architectures, plugins) are 1..63 of
 * [A-Za-z0-9_-]. kv_cache_tokens is 1..16777216, slots 1..4294967295, arena
 * more than 0 bytes. A null or empty section (every entry commented out) is
 * an empty mapping. Aliases and a second YAML document are refused.
 *
 * The file merges over the defaults: a platform or model it names is updated
 * or added, the others keep their values; a refused file changes nothing.
 * Giving arena and slots in one platform of the file is an error; an
 * override of one clears the other.
 *
 * Overrides: vt_config_set("cuda.expert_cache.headroom", "2GiB", ...) sets one
 * key; the key is the YAML path with "platforms." optional for platform keys
 * ("cuda.experts", "platforms.cuda.experts", "defaults.platform",
 * "models.qwen35moe"). An override of a platform the file does not name
 * creates it. Errors name the override ("--set cuda.expert_cache.headroom=2XB:
 * unknown unit 'XB'").
 */
#ifndef VT_CONFIG_H
#define VT_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "vt/status.h"
#include "vt/bytes.h" /* vt_format_bytes: the config prints sizes with exact set */

#define VT_CONFIG_MAX_ENTRIES 32

/* Where a value came from. */
typedef enum vt_config_origin {
    VT_CONFIG_FROM_DEFAULT = 0, /* built in */
    VT_CONFIG_FROM_FILE = 1,    /* the YAML file (line/column recorded) */
    VT_CONFIG_FROM_CLI = 2      /* --set or a dedicated option (--ctx, --device) */
} vt_config_origin;

typedef struct vt_config_src {
    uint8_t origin;  /* vt_config_origin */
    uint32_t line;   /* 1-based, FROM_FILE only */
    uint32_t column; /* 1-based, FROM_FILE only */
} vt_config_src;

typedef enum vt_experts_mode {
    VT_EXPERTS_RESIDENT = 0, /* every routed expert in place (mmap or loaded) */
    VT_EXPERTS_STREAMED = 1, /* bounded slot arena, misses filled from the file */
    VT_EXPERTS_AUTO = 2      /* resident if the fit check says it fits, else streamed */
} vt_experts_mode;

typedef struct vt_config_pair {
    char key[64];
    char value[64];
    vt_config_src src;
} vt_config_pair;

/* expert_cache.host_arena: auto (sized by the fit check, residency.c) */
#define VT_HOST_ARENA_AUTO UINT64_MAX

/* expert_cache.readers: auto (0: the online CPUs, at most 8) or 1..VT_READERS_MAX */
#define VT_READERS_MAX 64
/* expert_cache.staging: auto (residency.c: two slots per reader), 0: one staging slot in the
 * store, no ring */
#define VT_STAGING_AUTO UINT64_MAX

/* expert_cache.prefetch (the same values as expert_streamer.h's VT_STREAMER_PREFETCH_*) */
enum { VT_PREFETCH_OFF = 0, VT_PREFETCH_NEXT_LAYER = 1, VT_PREFETCH_AUTO = 2 };

/* expert_cache.prefetch_top: 0 auto (ceil(3/4 of the predicted ids)) or 1..VT_PREFETCH_TOP_MAX;
 * expert_cache.prefetch_max: 0 auto (ceil(3/8 of them)) or 1..VT_PREFETCH_TOP_MAX */
#define VT_PREFETCH_TOP_MAX 1024

/* expert_cache.slot_classes: auto (the arena's slots in up to 4 size classes, residency.c),
 * off (every slot the largest slice) */
enum { VT_SLOT_CLASSES_AUTO = 0, VT_SLOT_CLASSES_OFF = 1 };

/* expert_cache.slot_unit: what one slot of the arena and of the host tier holds (residency.c
 * resolves auto, vt_residency_slot_unit_expert) */
enum { VT_SLOT_UNIT_AUTO = 0, VT_SLOT_UNIT_EXPERT = 1, VT_SLOT_UNIT_MATRIX = 2 };

/* devices: at most this many indices, each 0..VT_DEVICE_INDEX_MAX */
#define VT_DEVICES_MAX 16
#define VT_DEVICE_INDEX_MAX 1023

/* expert_cache.policy (the engine maps it to expert_streamer.h vt_cache_policy) */
enum { VT_POLICY_LFRU = 0, VT_POLICY_LAYER = 1, VT_POLICY_LRU = 2 };

typedef struct vt_config_platform {
    char name[64];
    char backend[64];              vt_config_src backend_src;
    int unified_memory;            vt_config_src unified_memory_src;
    uint32_t kv_cache_tokens;      vt_config_src kv_cache_tokens_src;
    vt_experts_mode experts;       vt_config_src experts_src;
    char expert_store[64];         vt_config_src expert_store_src;
    uint64_t arena_bytes;          vt_config_src arena_bytes_src;  /* 0: auto (or slots) */
    uint64_t arena_slots;          vt_config_src arena_slots_src;  /* 0: unset */
    uint64_t headroom_bytes;       vt_config_src headroom_bytes_src;
    int io_direct;                 vt_config_src io_direct_src;    /* expert_cache.io: direct */
    int policy;                    vt_config_src policy_src;       /* expert_cache.policy: VT_POLICY_* */
    int prefetch;                  vt_config_src prefetch_src;     /* expert_cache.prefetch: VT_PREFETCH_* */
    uint32_t prefetch_top;         vt_config_src prefetch_top_src; /* expert_cache.prefetch_top: 0 auto */
    uint32_t prefetch_max;         vt_config_src prefetch_max_src; /* expert_cache.prefetch_max: 0 auto */
    int slot_classes;              vt_config_src slot_classes_src; /* expert_cache.slot_classes:
                                                                    * VT_SLOT_CLASSES_* */
    int slot_unit;                 vt_config_src slot_unit_src;    /* expert_cache.slot_unit:
                                                                    * VT_SLOT_UNIT_* */
    uint64_t host_arena_bytes;     vt_config_src host_arena_bytes_src; /* VT_HOST_ARENA_AUTO, 0: off */
    uint32_t readers;              vt_config_src readers_src;      /* expert_cache.readers: 0 auto */
    uint64_t staging_bytes;        vt_config_src staging_bytes_src; /* VT_STAGING_AUTO, 0: no ring */
    uint64_t pinned_budget_bytes;  vt_config_src pinned_budget_bytes_src;
    /* devices: n_devices indices in the order given (distinct), or devices_all (n_devices 0):
     * every device the backend reports. Default: one, device 0. */
    uint32_t n_devices;
    int32_t devices[VT_DEVICES_MAX];
    int devices_all;               vt_config_src devices_src;
} vt_config_platform;

typedef struct vt_config {
    char path[512]; /* the file read, "" for built-in defaults only */
    char default_platform[64];
    vt_config_src default_platform_src;
    vt_config_pair models[VT_CONFIG_MAX_ENTRIES];
    int n_models;
    vt_config_platform platforms[VT_CONFIG_MAX_ENTRIES];
    int n_platforms;
} vt_config;

/*
 * Built-in defaults (what conf/residency.yaml ships): platform cpu;
 * qwen35moe/qwen35 -> qwen35, gemma4 -> gemma4; platforms cpu (backend cpu,
 * experts resident, store host), cuda and rocm (experts auto, store device,
 * headroom 1GiB, pinned_budget 4GiB), unified (backend cuda, unified_memory,
 * store host); kv_cache_tokens 4096 everywhere.
 */
void vt_config_defaults(vt_config *c);
/* Defaults of a platform not named in the file (used when a platform is
 * created by a file entry or an override): backend = name, experts resident,
 * store host, arena auto, headroom 0, pinned_budget 0, kv 4096. */
void vt_config_platform_defaults(vt_config_platform *p, const char *name);

/* Parse a file over the defaults already in *c (call vt_config_defaults first).
 * Errors: VT_ERR_IO naming the file; VT_ERR_FORMAT as "FILE:LINE:COL: message"
 * naming the key (unknown key, wrong type, bad value, broken YAML). */
vt_status vt_config_load_file(const char *path, vt_config *c);
/* Defaults, then the configuration found: explicit path (may be NULL),
 * $VT_CONFIG, <bindir>/../share/vt/residency.yaml, the source tree's conf/
 * (build tree); none found: defaults only. */
vt_status vt_config_load(const char *explicit_path, vt_config *c);

/* Apply one override "key=value" (as given to --set). Errors: VT_ERR_INVALID_ARG
 * naming the override and what is wrong. */
vt_status vt_config_set_arg(vt_config *c, const char *key_equals_value);
/* The same with key and value apart; origin is recorded as FROM_CLI. */
vt_status vt_config_set(vt_config *c, const char *key, const char *value);

/* Parse a byte size as described above. Errors: VT_ERR_INVALID_ARG with a
 * message saying what is wrong with text (the caller prefixes where). */
vt_status vt_config_parse_bytes(const char *text, uint64_t *out);

const char *vt_config_model_for_arch(const vt_config *c, const char *arch);
const vt_config_platform *vt_config_platform_get(const vt_config *c, const char *name);
const char *vt_experts_mode_name(vt_experts_mode m);

/* Print every resolved value with its origin, one per line:
 *   platforms.cuda.expert_cache.headroom = 2 GiB (2147483648)   # --set
 *   defaults.platform = cpu                                      # conf/residency.yaml:4:13
 *   models.qwen35moe = qwen35                                    # default
 */
void vt_config_print(const vt_config *c, FILE *f);

#endif
