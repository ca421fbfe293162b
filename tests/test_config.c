/*
 * test_config.c - the residency configuration (core/src/config.c, config_yaml.c).
 *
 * - the built-in defaults are the documented ones (literal values from
 *   config.h and the residency issue), and the shipped conf/residency.yaml
 *   sets every one of them explicitly: loaded over deliberately wrong values
 *   it gives the defaults back, field by field, each from the file;
 * - byte sizes parse and print as documented (tables of literal values);
 * - each malformed file is refused with the exact "FILE:LINE:COL:" prefix
 *   (worked out by hand from the YAML text) and the key named;
 * - --set overrides change value and origin, create platforms and models,
 *   and bad ones are refused naming the override, changing nothing;
 * - vt_config_print shows each value with its origin.
 */
#include "test_util.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "error.h"
#include "test_config.h"

#define MiB (1ull << 20)

/* ------------------------------------------------------------------------ */
/* helpers                                                                   */
/* ------------------------------------------------------------------------ */

static char tmp_path[64];

/* Write text to a fresh temporary file; its name is in tmp_path. */
static const char *write_tmp_n(const char *text, size_t n)
{
    snprintf(tmp_path, sizeof tmp_path, "/tmp/vt-config-XXXXXX");
    int fd = mkstemp(tmp_path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, n), (ssize_t)n);
    close(fd);
    return tmp_path;
}

const char *write_tmp(const char *text) { return write_tmp_n(text, strlen(text)); }

/* Load text as a config file into *c (through a temporary file, removed after). */
vt_status load_text(const char *text, vt_config *c)
{
    const char *path = write_tmp(text);
    vt_status st = vt_config_load_file(path, c);
    unlink(path);
    return st;
}

/* As load_text; a refusal fails the test with the message and the text. */
static void load_ok(const char *text, vt_config *c)
{
    if (load_text(text, c) != VT_OK) fail_msg("refused: %s\n%s", vt_last_error(), text);
}

static char *shipped_path(void)
{
    static char path[4096];
    const char *src = getenv("VT_TEST_SOURCE_DIR");
    assert_non_null(src);
    snprintf(path, sizeof path, "%s/conf/residency.yaml", src);
    return path;
}

void assert_contains(const char *hay, const char *needle)
{
    if (!strstr(hay, needle)) fail_msg("expected '%s' in: %s", needle, hay);
}

void assert_src(vt_config_src s, int origin, uint32_t line, uint32_t col)
{
    if (s.origin != origin || s.line != line || s.column != col)
        fail_msg("origin %u %u:%u, expected %d %u:%u", s.origin, s.line, s.column, origin, line, col);
}

/* Values only (not origins) of two configurations, field by field. */
static void assert_same_values(const vt_config *a, const vt_config *b)
{
    assert_string_equal(a->default_platform, b->default_platform);
    assert_int_equal(a->n_models, b->n_models);
    for (int i = 0; i < a->n_models; i++) {
        assert_string_equal(a->models[i].key, b->models[i].key);
        assert_string_equal(a->models[i].value, b->models[i].value);
    }
    assert_int_equal(a->n_platforms, b->n_platforms);
    for (int i = 0; i < a->n_platforms; i++) {
        const vt_config_platform *p = &a->platforms[i], *q = &b->platforms[i];
        assert_string_equal(p->name, q->name);
        assert_string_equal(p->backend, q->backend);
        assert_int_equal(p->unified_memory, q->unified_memory);
        assert_int_equal(p->kv_cache_tokens, q->kv_cache_tokens);
        assert_int_equal(p->experts, q->experts);
        assert_string_equal(p->expert_store, q->expert_store);
        assert_int_equal(p->arena_bytes, q->arena_bytes);
        assert_int_equal(p->arena_slots, q->arena_slots);
        assert_int_equal(p->headroom_bytes, q->headroom_bytes);
        assert_int_equal(p->io_direct, q->io_direct);
        assert_int_equal(p->pinned_budget_bytes, q->pinned_budget_bytes);
        assert_int_equal(p->n_devices, q->n_devices);
        assert_int_equal(p->devices_all, q->devices_all);
        for (uint32_t d = 0; d < p->n_devices; d++) assert_int_equal(p->devices[d], q->devices[d]);
    }
}

/* ------------------------------------------------------------------------ */
/* defaults and the shipped file                                             */
/* ------------------------------------------------------------------------ */

static void check_platform(const vt_config *c, const char *name, const char *backend, int unified,
                           vt_experts_mode experts, const char *store, uint64_t headroom,
                           uint64_t pinned)
{
    const vt_config_platform *p = vt_config_platform_get(c, name);
    if (!p) fail_msg("no platform '%s'", name);
    assert_string_equal(p->backend, backend);
    assert_int_equal(p->unified_memory, unified);
    assert_int_equal(p->kv_cache_tokens, 4096);
    assert_int_equal(p->experts, experts);
    assert_string_equal(p->expert_store, store);
    assert_int_equal(p->arena_bytes, 0); /* auto */
    assert_int_equal(p->arena_slots, 0);
    assert_int_equal(p->headroom_bytes, headroom);
    assert_int_equal(p->pinned_budget_bytes, pinned);
    assert_int_equal(p->n_devices, 1); /* devices: 0 */
    assert_int_equal(p->devices[0], 0);
    assert_int_equal(p->devices_all, 0);
}

/* The values config.h and the issue document, as literals. */
static void check_documented_defaults(const vt_config *c)
{
    assert_string_equal(c->default_platform, "cpu");
    assert_int_equal(c->n_models, 3);
    assert_string_equal(vt_config_model_for_arch(c, "qwen35moe"), "qwen35");
    assert_string_equal(vt_config_model_for_arch(c, "qwen35"), "qwen35");
    assert_string_equal(vt_config_model_for_arch(c, "gemma4"), "gemma4");
    assert_null(vt_config_model_for_arch(c, "llama"));
    assert_int_equal(c->n_platforms, 4);
    check_platform(c, "cpu", "cpu", 0, VT_EXPERTS_RESIDENT, "host", 0, 0);
    check_platform(c, "cuda", "cuda", 0, VT_EXPERTS_AUTO, "device", 1073741824ull, 4294967296ull);
    check_platform(c, "rocm", "rocm", 0, VT_EXPERTS_AUTO, "device", 1073741824ull, 4294967296ull);
    check_platform(c, "unified", "cuda", 1, VT_EXPERTS_AUTO, "host", 1073741824ull, 0);
    assert_null(vt_config_platform_get(c, "vulkan"));
}

static void test_defaults(void **s)
{
    (void)s;
    vt_config c;
    vt_config_defaults(&c);
    check_documented_defaults(&c);
    assert_string_equal(c.path, "");
    assert_src(c.default_platform_src, VT_CONFIG_FROM_DEFAULT, 0, 0);
    assert_src(c.platforms[1].headroom_bytes_src, VT_CONFIG_FROM_DEFAULT, 0, 0);

    vt_config_platform p;
    memset(&p, 0x5a, sizeof p);
    vt_config_platform_defaults(&p, "vulkan");
    assert_string_equal(p.name, "vulkan");
    assert_string_equal(p.backend, "vulkan");
    assert_int_equal(p.unified_memory, 0);
    assert_int_equal(p.kv_cache_tokens, 4096);
    assert_int_equal(p.experts, VT_EXPERTS_RESIDENT);
    assert_string_equal(p.expert_store, "host");
    assert_int_equal(p.arena_bytes, 0);
    assert_int_equal(p.arena_slots, 0);
    assert_int_equal(p.headroom_bytes, 0);
    assert_int_equal(p.pinned_budget_bytes, 0);
    assert_src(p.experts_src, VT_CONFIG_FROM_DEFAULT, 0, 0);

    assert_string_equal(vt_experts_mode_name(VT_EXPERTS_RESIDENT), "resident");
    assert_string_equal(vt_experts_mode_name(VT_EXPERTS_STREAMED), "streamed");
    assert_string_equal(vt_experts_mode_name(VT_EXPERTS_AUTO), "auto");
}

/* Every value of the file's entries set wrong, so that only the file can
 * bring the defaults back. */
static void poison(vt_config *c)
{
    snprintf(c->default_platform, sizeof c->default_platform, "rocm");
    for (int i = 0; i < c->n_models; i++) snprintf(c->models[i].value, 64, "wrong");
    for (int i = 0; i < c->n_platforms; i++) {
        vt_config_platform *p = &c->platforms[i];
        snprintf(p->backend, sizeof p->backend, "wrong");
        p->unified_memory = !p->unified_memory;
        p->kv_cache_tokens = 7;
        p->experts = VT_EXPERTS_STREAMED;
        snprintf(p->expert_store, sizeof p->expert_store, "wrong");
        p->arena_bytes = 0;
        p->arena_slots = 5; /* "arena: auto" must clear it */
        p->headroom_bytes = 12345;
        p->pinned_budget_bytes = 999;
        p->n_devices = 2;
        p->devices[0] = 3;
        p->devices[1] = 4;
        p->devices_all = 1;
    }
}

static void test_shipped_file(void **s)
{
    (void)s;
    vt_config want, c;
    vt_config_defaults(&want);

    /* over wrong values: the file alone gives the defaults back */
    vt_config_defaults(&c);
    poison(&c);
    if (vt_config_load_file(shipped_path(), &c) != VT_OK) fail_msg("%s", vt_last_error());
    assert_same_values(&c, &want);
    check_documented_defaults(&c);

    /* over the defaults: same values, and every key the schema has a value
     * for came from the file (slots is the one key the file leaves out) */
    vt_config_defaults(&c);
    if (vt_config_load_file(shipped_path(), &c) != VT_OK) fail_msg("%s", vt_last_error());
    assert_same_values(&c, &want);
    assert_string_equal(c.path, shipped_path());
    assert_int_equal(c.default_platform_src.origin, VT_CONFIG_FROM_FILE);
    for (int i = 0; i < c.n_models; i++) assert_int_equal(c.models[i].src.origin, VT_CONFIG_FROM_FILE);
    for (int i = 0; i < c.n_platforms; i++) {
        const vt_config_platform *p = &c.platforms[i];
        const vt_config_src *srcs[] = {&p->backend_src,      &p->unified_memory_src,
                                       &p->kv_cache_tokens_src, &p->experts_src,
                                       &p->expert_store_src, &p->arena_bytes_src,
                                       &p->headroom_bytes_src, &p->io_direct_src,
                                       &p->host_arena_bytes_src, &p->policy_src,
                                       &p->prefetch_src, &p->prefetch_top_src,
                                       &p->prefetch_max_src, &p->readers_src,
                                       &p->staging_bytes_src, &p->slot_classes_src,
                                       &p->slot_unit_src,
                                       &p->pinned_budget_bytes_src, &p->devices_src};
        for (size_t k = 0; k < sizeof srcs / sizeof srcs[0]; k++) {
            if (srcs[k]->origin != VT_CONFIG_FROM_FILE || srcs[k]->line == 0 || srcs[k]->column == 0)
                fail_msg("platforms.%s: key #%zu not set by the file", p->name, k);
        }
        assert_src(p->arena_slots_src, VT_CONFIG_FROM_DEFAULT, 0, 0);
    }

    /* the recorded line of defaults.platform is the file's "  platform: cpu" line */
    char *text = vt_test_read_file(shipped_path(), NULL);
    char *at = strstr(text, "\n  platform: cpu");
    assert_non_null(at);
    uint32_t line = 2;
    for (char *q = text; q < at; q++) line += *q == '\n';
    free(text);
    assert_src(c.default_platform_src, VT_CONFIG_FROM_FILE, line, 13);
}

/* ------------------------------------------------------------------------ */
/* byte sizes                                                                */
/* ------------------------------------------------------------------------ */

static void test_parse_bytes(void **s)
{
    (void)s;
    static const struct {
        const char *text;
        uint64_t want;
    } good[] = {
        {"0", 0},
        {"123", 123},
        {"007", 7},
        {"1B", 1},
        {"512MiB", 536870912ull},
        {"512 MiB", 536870912ull},
        {"1.5GiB", 1610612736ull},
        {"2.25 GiB", 2415919104ull},
        {"1GB", 1000000000ull},
        {"1.5MB", 1500000ull},
        {"3TB", 3000000000000ull},
        {"1TiB", 1099511627776ull},
        {"1 PiB", 1125899906842624ull},
        {"1.5PiB", 1688849860263936ull},
        {"2PB", 2000000000000000ull},
        {" 7 KiB", 7168},   /* blanks around the value are ignored */
        {"7KiB\t ", 7168},
        {"\t2\tMiB", 2097152},
        {"0.5KiB", 512},
        {"1.0005KB", 1000}, /* 1000.5 bytes, rounded down */
        {"0.001KB", 1},
        {"0.0009KB", 0},
        {"1.99999999999999999999999KiB", 2047}, /* exact, not via double */
        {"18446744073709551615", 18446744073709551615ull},
        {"16777215TiB", 18446742974197923840ull},
        {"17179869183.999999999GiB", 18446744073709551614ull},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        uint64_t v = 42;
        if (vt_config_parse_bytes(good[i].text, &v) != VT_OK)
            fail_msg("'%s' refused: %s", good[i].text, vt_last_error());
        if (v != good[i].want)
            fail_msg("'%s' -> %llu, expected %llu", good[i].text, (unsigned long long)v,
                     (unsigned long long)good[i].want);
    }

    static const struct {
        const char *text, *why;
    } bad[] = {
        {"-1", "negative"},
        {" -5GiB", "negative"},
        {"1.5", "fraction of a byte"},
        {"1.5B", "fraction of a byte"},
        {"12XB", "unknown unit 'XB'"},
        {"1gib", "unknown unit 'gib'"}, /* units are case-sensitive */
        {"1G", "unknown unit 'G'"},
        {"", "empty value"},
        {"  ", "empty value"},
        {"18446744073709551616", "more than 18446744073709551615 bytes"},
        {"99999999TiB", "more than 18446744073709551615 bytes"},
        {"16777216TiB", "more than 18446744073709551615 bytes"},
        {"16384PiB", "more than 18446744073709551615 bytes"},
        {"17179869184GiB", "more than 18446744073709551615 bytes"},
        {"1e3", "unknown unit 'e3'"},
        {"0x10", "unknown unit 'x10'"},
        {"nan", "not a byte size"},
        {"inf", "not a byte size"},
        {"+1", "not a byte size"},
        {".5GiB", "not a byte size"},
        {"GiB", "not a byte size"},
        {"1.GiB", "expected digits after '.'"},
        {"1 2", "unknown unit '2'"},
        {"1,5GiB", "unknown unit ',5GiB'"},
        {"1.5.5GiB", "unknown unit '.5GiB'"},
        {"1_000", "unknown unit '_000'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v = 42;
        vt_clear_error();
        vt_status st = vt_config_parse_bytes(bad[i].text, &v);
        if (st != VT_ERR_INVALID_ARG) fail_msg("'%s' accepted (%llu)", bad[i].text, (unsigned long long)v);
        assert_int_equal(v, 42); /* untouched */
        assert_contains(vt_last_error(), bad[i].why);
    }
    assert_int_equal(vt_config_parse_bytes(NULL, NULL), VT_ERR_INVALID_ARG);
}

static void test_format_bytes(void **s)
{
    (void)s;
    static const struct {
        uint64_t bytes;
        const char *want;
    } t[] = {
        {0, "0 B"},
        {123, "123 B"},
        {1000, "1000 B"},
        {1023, "1023 B"},
        {1024, "1 KiB"},
        {1536, "1.50 KiB"},
        {1025, "1.00 KiB"},
        {536870912ull, "512 MiB"},
        {1610612736ull, "1.50 GiB"},
        {1342177280ull, "1.25 GiB"},
        {2147483648ull, "2 GiB"},
        {1099511627776ull, "1 TiB"},
        {1125899906842624ull, "1 PiB"}, /* the config reads PiB back */
        {1688849860263936ull, "1.50 PiB"},
        {18446744073709551615ull, "16.00 EiB"},
    };
    char buf[48];
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        const char *r = vt_format_bytes(t[i].bytes, 1, buf, sizeof buf);
        assert_ptr_equal(r, buf);
        if (strcmp(r, t[i].want))
            fail_msg("%llu -> '%s', expected '%s'", (unsigned long long)t[i].bytes, r, t[i].want);
    }
    char small[4];
    assert_string_equal(vt_format_bytes(1610612736ull, 1, small, sizeof small), "1.5");
}

/* ------------------------------------------------------------------------ */
/* files                                                                     */
/* ------------------------------------------------------------------------ */

/* The file is refused with status st, the message starting "PATH:L:C: " (or
 * "PATH: " when line is 0) and containing each needle; *c unchanged. */
void expect_file_error(const char *yaml, vt_status want, uint32_t line, uint32_t col,
                       const char *needle1, const char *needle2)
{
    vt_config c, before;
    vt_config_defaults(&c);
    memcpy(&before, &c, sizeof c);
    vt_clear_error();
    vt_status st = load_text(yaml, &c);
    const char *msg = vt_last_error();
    if (st != want) fail_msg("status %d, expected %d (%s) for:\n%s", st, want, msg, yaml);
    char prefix[128];
    if (line) snprintf(prefix, sizeof prefix, "%s:%u:%u: ", tmp_path, line, col);
    else snprintf(prefix, sizeof prefix, "%s: ", tmp_path);
    if (strncmp(msg, prefix, strlen(prefix)))
        fail_msg("expected the prefix '%s' in: %s\nfor:\n%s", prefix, msg, yaml);
    if (needle1 && !strstr(msg, needle1)) fail_msg("expected '%s' in: %s", needle1, msg);
    if (needle2 && !strstr(msg, needle2)) fail_msg("expected '%s' in: %s", needle2, msg);
    if (memcmp(&c, &before, sizeof c)) fail_msg("a refused file changed the configuration: %s", msg);
}

static void test_file_refusals(void **s)
{
    (void)s;
    const vt_status F = VT_ERR_FORMAT;
    /* unknown keys: the key's own mark */
    expect_file_error("version: 1\ndefaults:\n  platfrom: cpu\n", F, 3, 3,
                      "unknown key 'defaults.platfrom'", NULL);
    expect_file_error("version: 1\nplatfroms: {}\n", F, 2, 1, "unknown key 'platfroms'", NULL);
    expect_file_error("platforms:\n  cuda:\n    expert_cache:\n      stor: host\n", F, 4, 7,
                      "unknown key 'platforms.cuda.expert_cache.stor'",
                      "(expected store, arena, slots, headroom, io, host_arena, policy, prefetch, "
                      "prefetch_top, prefetch_max, readers, staging, slot_classes, slot_unit)");
    expect_file_error("platforms:\n  cuda:\n    headroom: 1GiB\n", F, 3, 5,
                      "unknown key 'platforms.cuda.headroom'",
                      "(expected backend, unified_memory, kv_cache_tokens, experts, expert_cache, "
                      "pinned_budget, devices)");
    /* duplicated keys: the second one's mark, and where the first was */
    expect_file_error("platforms:\n  cuda:\n    experts: auto\n    backend: cuda\n    experts: streamed\n",
                      F, 5, 5, "duplicate key 'platforms.cuda.experts'", "first at line 3, column 5");
    expect_file_error("models:\n  a: b\nmodels:\n  c: d\n", F, 3, 1, "duplicate key 'models'", NULL);
    expect_file_error("platforms:\n  cpu: {experts: auto}\n  cpu: {experts: resident}\n", F, 3, 3,
                      "duplicate key 'platforms.cpu'", NULL);
    expect_file_error("models:\n  gemma4: gemma4\n  gemma4: other\n", F, 3, 3,
                      "duplicate key 'models.gemma4'", NULL);
    expect_file_error("platforms:\n  vulkan:\n    experts: auto\n    expert_cache: {store: host, store: x}\n",
                      F, 4, 33, "duplicate key 'platforms.vulkan.expert_cache.store'", NULL);
    /* bad values: the value's mark, the key named */
    expect_file_error("platforms:\n  cuda:\n    experts: sometimes\n", F, 3, 14,
                      "platforms.cuda.experts: 'sometimes' is not one of resident, streamed, auto",
                      NULL);
    expect_file_error("platforms:\n  cuda:\n    expert_cache:\n      headroom: 2XB\n", F, 4, 17,
                      "platforms.cuda.expert_cache.headroom: unknown unit 'XB'", NULL);
    expect_file_error("platforms:\n  cpu:\n    pinned_budget: -1\n", F, 3, 20,
                      "platforms.cpu.pinned_budget: '-1' is negative", NULL);
    expect_file_error("platforms:\n  cpu:\n    pinned_budget: 18446744073709551616\n", F, 3, 20,
                      "platforms.cpu.pinned_budget", "more than 18446744073709551615 bytes");
    expect_file_error("platforms:\n  cpu:\n    kv_cache_tokens: 0\n", F, 3, 22,
                      "platforms.cpu.kv_cache_tokens: 0 is out of range", NULL);
    expect_file_error("platforms:\n  cpu:\n    kv_cache_tokens: 16777217\n", F, 3, 22,
                      "platforms.cpu.kv_cache_tokens", "from 1 to 16777216");
    expect_file_error("platforms:\n  cpu:\n    kv_cache_tokens: 4k\n", F, 3, 22,
                      "platforms.cpu.kv_cache_tokens: '4k' is not an integer", NULL);
    expect_file_error("platforms:\n  unified:\n    unified_memory: yes\n", F, 3, 21,
                      "platforms.unified.unified_memory: 'yes' is not a boolean", NULL);
    expect_file_error("platforms:\n  cpu:\n    backend: 'c p u'\n", F, 3, 14,
                      "platforms.cpu.backend: 'c p u' is not a name", NULL);
    expect_file_error("platforms:\n  cuda:\n    expert_cache:\n      prefetch_max: 0\n", F, 4, 21,
                      "prefetch_max", NULL);
    expect_file_error("platforms:\n  cuda:\n    expert_cache:\n      arena: 0\n", F, 4, 14,
                      "platforms.cuda.expert_cache.arena: an arena of 0 bytes", NULL);
    expect_file_error("platforms:\n  cuda:\n    expert_cache:\n      slots: 0\n", F, 4, 14,
                      "platforms.cuda.expert_cache.slots: 0 is out of range", NULL);
    expect_file_error("models:\n  llama: \"llama cpp\"\n", F, 2, 10, "models.llama: 'llama cpp'", NULL);
    expect_file_error("defaults:\n  platform: \"c\\0pu\"\n", F, 2, 13, "defaults.platform",
                      "NUL character");
    /* arena and slots in one platform: at the second one, naming both */
    expect_file_error("platforms:\n  cuda:\n    expert_cache:\n      arena: 8GiB\n      slots: 64\n", F,
                      5, 7, "platforms.cuda.expert_cache.slots: 'arena' is given too", NULL);
    expect_file_error("platforms: {rocm: {expert_cache: {slots: 64, arena: auto}}}\n", F, 1, 46,
                      "platforms.rocm.expert_cache.arena: 'slots' is given too", NULL);
    /* version */
    expect_file_error("version: 2\n", F, 1, 10, "version: this vt reads version 1", NULL);
    expect_file_error("version: one\n", F, 1, 10, "version: 'one' is not an integer", NULL);
    /* wrong node kinds */
    expect_file_error("platforms:\n  cpu:\n    backend:\n      name: cpu\n", F, 4, 7,
                      "platforms.cpu.backend: expected a value, found a mapping", NULL);
    expect_file_error("models: [a, b]\n", F, 1, 9, "models: expected a mapping, found a list", NULL);
    expect_file_error("platforms: cpu\n", F, 1, 12,
                      "platforms: expected a mapping, found a single value", NULL);
    expect_file_error("- a\n- b\n", F, 1, 1, "top level: expected a mapping", "found a list");
    expect_file_error("platforms:\n  cpu:\n    backend:\n", F, 3, 13,
                      "platforms.cpu.backend: expected a value, found none", NULL);
    expect_file_error("platforms:\n  ? [a, b]\n  : {}\n", F, 2, 5,
                      "platforms: expected a key (a name), found a list", NULL);
    expect_file_error("defaults: &d\n  platform: cpu\nmodels: *d\n", F, 3, 9,
                      "models: aliases (*d) are not supported", NULL);
    expect_file_error("version: 1\n---\nversion: 1\n", F, 2, 1, "a second YAML document", NULL);
    /* names */
    expect_file_error("platforms:\n  models: {}\n", F, 2, 3, "platforms.models: 'models' is reserved",
                      NULL);
    expect_file_error("platforms:\n  cu.da: {}\n", F, 2, 3, "platforms: 'cu.da' is not a name", NULL);
    expect_file_error("defaults:\n  platform: gpu\n", F, 2, 13,
                      "defaults.platform: no platform 'gpu'", "cpu, cuda, rocm, unified");
    /* broken YAML: libyaml's problem mark */
    expect_file_error("defaults:\n  platform: \"cpu\n", F, 3, 1,
                      "YAML error: found unexpected end of stream",
                      "while scanning a quoted scalar at 2:13");
    expect_file_error("defaults:\n\tplatform: cpu\n", F, 2, 1,
                      "YAML error: found character that cannot start any token", NULL);
    expect_file_error("defaults: platform: cpu\n", F, 1, 19,
                      "YAML error: mapping values are not allowed in this context", NULL);
    expect_file_error("version: 1\n# \xff\n", F, 2, 3, "YAML error: invalid leading UTF-8 octet",
                      "0xFF");
}

static void test_file_other(void **s)
{
    (void)s;
    vt_config c;
    /* missing file: an I/O error naming it */
    vt_config_defaults(&c);
    vt_clear_error();
    assert_int_equal(vt_config_load_file("/nonexistent/vt/residency.yaml", &c), VT_ERR_IO);
    assert_contains(vt_last_error(), "/nonexistent/vt/residency.yaml");

    /* too large */
    size_t big = (1u << 20) + 1;
    char *text = malloc(big);
    assert_non_null(text);
    memset(text, '#', big);
    const char *path = write_tmp_n(text, big);
    free(text);
    assert_int_equal(vt_config_load_file(path, &c), VT_ERR_FORMAT);
    unlink(path);
    assert_contains(vt_last_error(), "larger than 1048576 bytes");

    /* empty, comments only, empty sections: the defaults, unchanged */
    static const char *const empty[] = {"", "# nothing\n", "---\n", "version: 1\nplatforms:\nmodels:\n",
                                        "platforms:\n#  cpu:\n#    experts: auto\n"};
    for (size_t i = 0; i < sizeof empty / sizeof empty[0]; i++) {
        vt_config want;
        vt_config_defaults(&want);
        vt_config_defaults(&c);
        load_ok(empty[i], &c);
        assert_same_values(&c, &want);
    }

    /* a platform the defaults do not have starts from vt_config_platform_defaults;
     * a model entry is added; the other entries keep their defaults */
    vt_config_defaults(&c);
    load_ok("models:\n  llama: llama-plugin\nplatforms:\n  vulkan:\n    experts: streamed\n"
            "    expert_cache:\n      slots: 96\n  cuda:\n    kv_cache_tokens: \"8192\"\n",
            &c);
    assert_int_equal(c.n_models, 4);
    assert_string_equal(vt_config_model_for_arch(&c, "llama"), "llama-plugin");
    assert_src(c.models[3].src, VT_CONFIG_FROM_FILE, 2, 10);
    assert_string_equal(vt_config_model_for_arch(&c, "qwen35moe"), "qwen35");
    assert_int_equal(c.n_platforms, 5);
    const vt_config_platform *v = vt_config_platform_get(&c, "vulkan");
    assert_non_null(v);
    assert_string_equal(v->backend, "vulkan");
    assert_string_equal(v->expert_store, "host");
    assert_int_equal(v->experts, VT_EXPERTS_STREAMED);
    assert_src(v->experts_src, VT_CONFIG_FROM_FILE, 5, 14);
    assert_int_equal(v->arena_slots, 96);
    assert_src(v->arena_slots_src, VT_CONFIG_FROM_FILE, 7, 14);
    assert_src(v->backend_src, VT_CONFIG_FROM_DEFAULT, 0, 0);
    const vt_config_platform *cu = vt_config_platform_get(&c, "cuda");
    assert_int_equal(cu->kv_cache_tokens, 8192);
    assert_src(cu->kv_cache_tokens_src, VT_CONFIG_FROM_FILE, 9, 22);
    assert_int_equal(cu->headroom_bytes, 1073741824ull); /* untouched default */
    assert_src(cu->headroom_bytes_src, VT_CONFIG_FROM_DEFAULT, 0, 0);

    /* the prefetch keys in a file: where each came from, the rest default */
    vt_config_defaults(&c);
    load_ok("platforms:\n  cuda:\n    expert_cache:\n      prefetch_top: 5\n"
            "      prefetch_max: 1024\n",
            &c);
    cu = vt_config_platform_get(&c, "cuda");
    assert_int_equal(cu->prefetch_top, 5);
    assert_src(cu->prefetch_top_src, VT_CONFIG_FROM_FILE, 4, 21);
    assert_int_equal(cu->prefetch_max, 1024);
    assert_src(cu->prefetch_max_src, VT_CONFIG_FROM_FILE, 5, 21);
    assert_src(cu->prefetch_src, VT_CONFIG_FROM_DEFAULT, 0, 0);

    /* flow style, quoted keys and values, blanks inside quotes */
    vt_config_defaults(&c);
    load_ok("{\"platforms\": {cuda: {'expert_cache': {headroom: ' 512 MiB ', arena: 2.5GiB}, "
            "unified_memory: 1}}, defaults: {platform: cuda}}\n",
            &c);
    cu = vt_config_platform_get(&c, "cuda");
    assert_int_equal(cu->headroom_bytes, 536870912ull);
    assert_int_equal(cu->arena_bytes, 2684354560ull);
    assert_int_equal(cu->unified_memory, 1);
    assert_string_equal(c.default_platform, "cuda");
}

static void test_load_search(void **s)
{
    (void)s;
    vt_config c;
    /* $VT_CONFIG is read, and a missing one is an error (no silent fallback) */
    const char *path = write_tmp("platforms:\n  cpu:\n    kv_cache_tokens: 1234\n");
    char keep[64];
    snprintf(keep, sizeof keep, "%s", path);
    setenv("VT_CONFIG", keep, 1);
    if (vt_config_load(NULL, &c) != VT_OK) fail_msg("%s", vt_last_error());
    assert_string_equal(c.path, keep);
    assert_int_equal(vt_config_platform_get(&c, "cpu")->kv_cache_tokens, 1234);
    /* an explicit path wins over $VT_CONFIG */
    if (vt_config_load(shipped_path(), &c) != VT_OK) fail_msg("%s", vt_last_error());
    assert_int_equal(vt_config_platform_get(&c, "cpu")->kv_cache_tokens, 4096);
    unlink(keep);
    assert_int_equal(vt_config_load(NULL, &c), VT_ERR_IO);
    assert_contains(vt_last_error(), keep);
    unsetenv("VT_CONFIG");
    /* none given: some residency.yaml or the defaults, always valid */
    if (vt_config_load(NULL, &c) != VT_OK) fail_msg("%s", vt_last_error());
    vt_config want;
    vt_config_defaults(&want);
    assert_same_values(&c, &want);
}

/* ------------------------------------------------------------------------ */
/* overrides                                                                 */
/* ------------------------------------------------------------------------ */

void set_ok(vt_config *c, const char *arg)
{
    if (vt_config_set_arg(c, arg) != VT_OK) fail_msg("--set %s refused: %s", arg, vt_last_error());
}

static void test_overrides(void **s)
{
    (void)s;
    vt_config c;
    vt_config_defaults(&c);
    const vt_config_platform *cu = vt_config_platform_get(&c, "cuda");

    set_ok(&c, "cuda.expert_cache.headroom=2GiB");
    assert_int_equal(cu->headroom_bytes, 2147483648ull);
    assert_src(cu->headroom_bytes_src, VT_CONFIG_FROM_CLI, 0, 0);
    set_ok(&c, "platforms.cuda.expert_cache.headroom= 512 MiB");
    assert_int_equal(cu->headroom_bytes, 536870912ull);
    set_ok(&c, "platforms.rocm.experts=streamed");
    assert_int_equal(vt_config_platform_get(&c, "rocm")->experts, VT_EXPERTS_STREAMED);
    assert_src(vt_config_platform_get(&c, "rocm")->experts_src, VT_CONFIG_FROM_CLI, 0, 0);
    set_ok(&c, "cuda.backend=cuda2");
    assert_string_equal(cu->backend, "cuda2");
    set_ok(&c, "cuda.unified_memory=true");
    assert_int_equal(cu->unified_memory, 1);
    set_ok(&c, "cuda.kv_cache_tokens=16777216");
    assert_int_equal(cu->kv_cache_tokens, 16777216);
    set_ok(&c, "cuda.pinned_budget=0");
    assert_int_equal(cu->pinned_budget_bytes, 0);
    assert_src(cu->pinned_budget_bytes_src, VT_CONFIG_FROM_CLI, 0, 0);
    set_ok(&c, "cuda.expert_cache.store=host");
    assert_string_equal(cu->expert_store, "host");
    set_ok(&c, "version=1");

    /* arena in bytes and in slots replace each other */
    set_ok(&c, "cuda.expert_cache.slots=64");
    assert_int_equal(cu->arena_slots, 64);
    assert_int_equal(cu->arena_bytes, 0);
    set_ok(&c, "cuda.expert_cache.arena=3GiB");
    assert_int_equal(cu->arena_bytes, 3221225472ull);
    assert_int_equal(cu->arena_slots, 0);
    set_ok(&c, "cuda.expert_cache.slots=8");
    assert_int_equal(cu->arena_bytes, 0);
    assert_int_equal(cu->arena_slots, 8);
    set_ok(&c, "cuda.expert_cache.arena=auto");
    assert_int_equal(cu->arena_bytes, 0);
    assert_int_equal(cu->arena_slots, 0);
    assert_src(cu->arena_slots_src, VT_CONFIG_FROM_CLI, 0, 0);

    /* defaults.platform, models, new platforms */
    set_ok(&c, "defaults.platform=rocm");
    assert_string_equal(c.default_platform, "rocm");
    assert_src(c.default_platform_src, VT_CONFIG_FROM_CLI, 0, 0);
    set_ok(&c, "models.qwen35moe=qwen35-next");
    assert_string_equal(vt_config_model_for_arch(&c, "qwen35moe"), "qwen35-next");
    assert_src(c.models[0].src, VT_CONFIG_FROM_CLI, 0, 0);
    assert_int_equal(c.n_models, 3);
    set_ok(&c, "models.llama=llama");
    assert_int_equal(c.n_models, 4);
    assert_string_equal(vt_config_model_for_arch(&c, "llama"), "llama");
    set_ok(&c, "vulkan.experts=streamed");
    assert_int_equal(c.n_platforms, 5);
    const vt_config_platform *v = vt_config_platform_get(&c, "vulkan");
    assert_non_null(v);
    assert_string_equal(v->backend, "vulkan");
    assert_string_equal(v->expert_store, "host");
    assert_int_equal(v->experts, VT_EXPERTS_STREAMED);
    assert_src(v->experts_src, VT_CONFIG_FROM_CLI, 0, 0);
    assert_src(v->backend_src, VT_CONFIG_FROM_DEFAULT, 0, 0);
    set_ok(&c, "defaults.platform=vulkan");
    assert_string_equal(c.default_platform, "vulkan");

    /* vt_config_set: key and value apart */
    assert_int_equal(vt_config_set(&c, "platforms.vulkan.expert_cache.headroom", "1.5GiB"), VT_OK);
    assert_int_equal(v->headroom_bytes, 1610612736ull);
    assert_int_equal(vt_config_set(&c, "vulkan.experts", "bogus"), VT_ERR_INVALID_ARG);
    assert_contains(vt_last_error(), "--set vulkan.experts=bogus: 'bogus' is not one of");

    /* the host tier (issue 15): auto by default, bytes, 0 (none) */
    assert_true(v->host_arena_bytes == VT_HOST_ARENA_AUTO);
    set_ok(&c, "vulkan.expert_cache.host_arena=6GiB");
    assert_true(v->host_arena_bytes == 6ull << 30);
    assert_src(v->host_arena_bytes_src, VT_CONFIG_FROM_CLI, 0, 0);
    set_ok(&c, "vulkan.expert_cache.host_arena=0");
    assert_true(v->host_arena_bytes == 0);
    set_ok(&c, "vulkan.expert_cache.host_arena= auto ");
    assert_true(v->host_arena_bytes == VT_HOST_ARENA_AUTO);
    assert_int_equal(vt_config_set(&c, "vulkan.expert_cache.host_arena", "lots"), VT_ERR_INVALID_ARG);
    assert_contains(vt_last_error(), "host_arena");
    /* expert_cache.policy: lfru (default), layer or lru */
    assert_int_equal(v->policy, VT_POLICY_LFRU);
    set_ok(&c, "vulkan.expert_cache.policy=lru");
    assert_int_equal(v->policy, VT_POLICY_LRU);
    assert_src(v->policy_src, VT_CONFIG_FROM_CLI, 0, 0);
    set_ok(&c, "vulkan.expert_cache.policy= layer");
    assert_int_equal(v->policy, VT_POLICY_LAYER);
    set_ok(&c, "vulkan.expert_cache.policy=lfru");
    assert_int_equal(v->policy, VT_POLICY_LFRU);
    assert_int_equal(vt_config_set(&c, "vulkan.expert_cache.policy", "fifo"), VT_ERR_INVALID_ARG);
    if (!strstr(vt_last_error(), "not a replacement policy (lfru, layer, lru)"))
        fail_msg("%s", vt_last_error());
    /* expert_cache.prefetch: auto (default), next-layer or off */
    assert_int_equal(v->prefetch, VT_PREFETCH_AUTO);
    set_ok(&c, "vulkan.expert_cache.prefetch=next-layer");
    assert_int_equal(v->prefetch, 1);
    assert_src(v->prefetch_src, VT_CONFIG_FROM_CLI, 0, 0);
    set_ok(&c, "vulkan.expert_cache.prefetch= off ");
    assert_int_equal(v->prefetch, 0);
    set_ok(&c, "vulkan.expert_cache.prefetch=auto");
    assert_int_equal(v->prefetch, VT_PREFETCH_AUTO);
    /* expert_cache.prefetch_top: auto (0, default) or 1..1024 */
    assert_int_equal(v->prefetch_top, 0);
    set_ok(&c, "vulkan.expert_cache.prefetch_top=3");
    assert_int_equal(v->prefetch_top, 3);
    assert_src(v->prefetch_top_src, VT_CONFIG_FROM_CLI, 0, 0);
    set_ok(&c, "vulkan.expert_cache.prefetch_top= 1024 ");
    assert_int_equal(v->prefetch_top, 1024);
    set_ok(&c, "vulkan.expert_cache.prefetch_top=auto");
    assert_int_equal(v->prefetch_top, 0);
    set_ok(&c, "vulkan.expert_cache.prefetch_top=3");
    assert_int_equal(vt_config_set(&c, "vulkan.expert_cache.prefetch_top", "0"), VT_ERR_INVALID_ARG);
    if (!strstr(vt_last_error(), "from 1 to 1024")) fail_msg("message: %s", vt_last_error());
    assert_int_equal(vt_config_set(&c, "vulkan.expert_cache.prefetch_top", "1025"), VT_ERR_INVALID_ARG);
    assert_int_equal(vt_config_set(&c, "vulkan.expert_cache.prefetch_top", "five"), VT_ERR_INVALID_ARG);
    assert_int_equal(v->prefetch_top, 3); /* a refused value changes nothing */
    set_ok(&c, "vulkan.expert_cache.prefetch_top=auto");
    /* expert_cache.prefetch_max: auto (0, default) or 1..1024 */
    assert_int_equal(v->prefetch_max, 0);
    set_ok(&c, "vulkan.expert_cache.prefetch_max=2");
    assert_int_equal(v->prefetch_max, 2);
    assert_src(v->prefetch_max_src, VT_CONFIG_FROM_CLI, 0, 0);
    assert_int_equal(vt_config_set(&c, "vulkan.expert_cache.prefetch_max", "0"), VT_ERR_INVALID_ARG);
    assert_int_equal(vt_config_set(&c, "vulkan.expert_cache.prefetch_max", "1025"), VT_ERR_INVALID_ARG);
    assert_int_equal(vt_config_set(&c, "vulkan.expert_cache.prefetch_max", "-3"), VT_ERR_INVALID_ARG);
    assert_int_equal(v->prefetch_max, 2); /* a refused value changes nothing */
    set_ok(&c, "vulkan.expert_cache.prefetch_max= 1024 ");
    assert_int_equal(v->prefetch_max, 1024);
    set_ok(&c, "vulkan.expert_cache.prefetch_max=auto");
    assert_int_equal(v->prefetch_max, 0);
    assert_int_equal(vt_config_set(&c, "vulkan.expert_cache.prefetch", "on"), VT_ERR_INVALID_ARG);
    if (!strstr(vt_last_error(), "not a prefetch mode (off, next-layer, auto)"))
        fail_msg("%s", vt_last_error());
    /* expert_cache.slot_classes: auto (default) or off */
    assert_int_equal(v->slot_classes, VT_SLOT_CLASSES_AUTO);
    set_ok(&c, "vulkan.expert_cache.slot_classes=off");
    assert_int_equal(v->slot_classes, VT_SLOT_CLASSES_OFF);
    assert_src(v->slot_classes_src, VT_CONFIG_FROM_CLI, 0, 0);
    set_ok(&c, "vulkan.expert_cache.slot_classes= auto");
    assert_int_equal(v->slot_classes, VT_SLOT_CLASSES_AUTO);
    assert_int_equal(vt_config_set(&c, "vulkan.expert_cache.slot_classes", "on"),
                     VT_ERR_INVALID_ARG);
    if (!strstr(vt_last_error(), "not a slot_classes mode (auto, off)"))
        fail_msg("%s", vt_last_error());
    /* expert_cache.slot_unit: auto (default), expert or matrix */
    assert_int_equal(v->slot_unit, VT_SLOT_UNIT_AUTO);
    set_ok(&c, "vulkan.expert_cache.slot_unit=expert");
    assert_int_equal(v->slot_unit, VT_SLOT_UNIT_EXPERT);
    assert_src(v->slot_unit_src, VT_CONFIG_FROM_CLI, 0, 0);
    set_ok(&c, "vulkan.expert_cache.slot_unit= matrix");
    assert_int_equal(v->slot_unit, VT_SLOT_UNIT_MATRIX);
    assert_int_equal(vt_config_set(&c, "vulkan.expert_cache.slot_unit", "layer"),
                     VT_ERR_INVALID_ARG);
    assert_int_equal(v->slot_unit, VT_SLOT_UNIT_MATRIX); /* a refused value changes nothing */
    if (!strstr(vt_last_error(), "not a slot_unit (auto, expert, matrix)"))
        fail_msg("%s", vt_last_error());
    set_ok(&c, "vulkan.expert_cache.slot_unit=auto");
    /* expert_cache.readers: auto (0) or 1..64; expert_cache.staging: auto, bytes, 0 */
    assert_int_equal(v->readers, 0);
    set_ok(&c, "vulkan.expert_cache.readers=6");
    assert_int_equal(v->readers, 6);
    assert_src(v->readers_src, VT_CONFIG_FROM_CLI, 0, 0);
    set_ok(&c, "vulkan.expert_cache.readers= auto");
    assert_int_equal(v->readers, 0);
    assert_int_equal(vt_config_set(&c, "vulkan.expert_cache.readers", "0"), VT_ERR_INVALID_ARG);
    assert_int_equal(vt_config_set(&c, "vulkan.expert_cache.readers", "65"), VT_ERR_INVALID_ARG);
    assert_int_equal(vt_config_set(&c, "vulkan.expert_cache.readers", "many"), VT_ERR_INVALID_ARG);
    assert_int_equal(v->staging_bytes, VT_STAGING_AUTO);
    set_ok(&c, "vulkan.expert_cache.staging=256MiB");
    assert_int_equal(v->staging_bytes, 256ull << 20);
    set_ok(&c, "vulkan.expert_cache.staging=0");
    assert_int_equal(v->staging_bytes, 0);
    set_ok(&c, "vulkan.expert_cache.staging=auto");
    assert_int_equal(v->staging_bytes, VT_STAGING_AUTO);
    assert_int_equal(vt_config_set(&c, "vulkan.expert_cache.staging", "-1"), VT_ERR_INVALID_ARG);
}

void expect_set_error(const char *arg, const char *needle)
{
    vt_config c, before;
    vt_config_defaults(&c);
    memcpy(&before, &c, sizeof c);
    vt_clear_error();
    vt_status st = vt_config_set_arg(&c, arg);
    const char *msg = vt_last_error();
    if (st != VT_ERR_INVALID_ARG) fail_msg("--set %s: status %d (%s)", arg, st, msg);
    char prefix[256];
    snprintf(prefix, sizeof prefix, "--set %s: ", arg);
    if (strncmp(msg, prefix, strlen(prefix))) fail_msg("expected the prefix '%s' in: %s", prefix, msg);
    if (!strstr(msg, needle)) fail_msg("expected '%s' in: %s", needle, msg);
    if (memcmp(&c, &before, sizeof c)) fail_msg("a refused override changed the configuration: %s", msg);
}

static void test_override_refusals(void **s)
{
    (void)s;
    expect_set_error("cuda.expert_cache.headroom=2XB", "unknown unit 'XB'");
    expect_set_error("cuda.expert_cache.headroom=-1", "negative");
    expect_set_error("cuda.expert_cache.headroom=", "empty value");
    expect_set_error("cuda.experts=sometimes", "'sometimes' is not one of resident, streamed, auto");
    expect_set_error("cuda.expert_cach.store=host", "unknown platform key 'expert_cach.store'");
    expect_set_error("cuda.expert_cache=host", "'expert_cache' is a section");
    expect_set_error("cuda.headroom=1GiB", "unknown platform key 'headroom'");
    expect_set_error("cuda=x", "unknown key 'cuda'");
    expect_set_error("platforms=x", "'platforms' is a section");
    expect_set_error("platforms.cuda=x", "unknown key 'platforms.cuda'");
    expect_set_error("noequals", "expected KEY=VALUE");
    expect_set_error("=x", "empty key");
    expect_set_error("defaults.platform=gpu", "no platform 'gpu'");
    expect_set_error("defaults.kv_cache_tokens=1", "unknown key 'defaults.kv_cache_tokens'");
    expect_set_error("models=x", "'models' is a section");
    expect_set_error("models.a.b=x", "'a.b' is not an architecture name");
    expect_set_error("models.qwen35moe=", "empty value");
    expect_set_error("models.qwen35moe=a/b", "'a/b' is not a name");
    expect_set_error("version=2", "version 1");
    expect_set_error("version.x=1", "unknown key 'version.x'");
    expect_set_error("newplat.kv_cache_tokens=0", "0 is out of range"); /* and no platform made */
    expect_set_error("cuda.kv_cache_tokens=16777217", "from 1 to 16777216");
    expect_set_error("cuda.kv_cache_tokens=99999999999999999999999", "out of range");
    expect_set_error("platforms.models.backend=x", "'models' is reserved");
    expect_set_error("cu da.backend=x", "'cu da' is not a platform name");
    expect_set_error(".backend=x", "'' is not a platform name");
    expect_set_error("cuda.unified_memory=yes", "'yes' is not a boolean");
    expect_set_error("cuda.expert_cache.arena=0", "an arena of 0 bytes");
    expect_set_error("cuda.expert_cache.slots=0", "0 is out of range");
    expect_set_error("cuda.expert_cache.slots=4294967296", "out of range");
    expect_set_error("cuda.backend=", "empty value");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_shipped_file),
        cmocka_unit_test(test_parse_bytes),
        cmocka_unit_test(test_format_bytes),
        cmocka_unit_test(test_file_refusals),
        cmocka_unit_test(test_file_other),
        cmocka_unit_test(test_load_search),
        cmocka_unit_test(test_overrides),
        cmocka_unit_test(test_override_refusals),
        cmocka_unit_test(test_print),
        cmocka_unit_test(test_devices),
        cmocka_unit_test(test_fifo_config_refused),
    };
    return vt_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
