/*
 * test_config_print.c - vt config --show's printing, the device list, a
 * config that is a FIFO (one program with test_config.c; see its header).
 */
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"
#include "test_config.h"

#include "config.h"
#include "error.h"

/* ------------------------------------------------------------------------ */
/* printing                                                                  */
/* ------------------------------------------------------------------------ */

static char *print_to_string(const vt_config *c)
{
    FILE *f = tmpfile();
    assert_non_null(f);
    vt_config_print(c, f);
    long n = ftell(f);
    assert_true(n > 0);
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = 0;
    fclose(f);
    return buf;
}

/* The line "KEY = VALUE<blanks># ORIGIN" is in out; returns its number (0-based). */
static int expect_line(const char *out, const char *key, const char *value, const char *origin)
{
    int no = 0;
    for (const char *l = out; *l; no++) {
        const char *e = strchr(l, '\n');
        assert_non_null(e);
        size_t kn = strlen(key);
        if (!strncmp(l, key, kn) && !strncmp(l + kn, " = ", 3)) {
            char want_v[160], line[512];
            snprintf(line, sizeof line, "%.*s", (int)(e - l), l);
            snprintf(want_v, sizeof want_v, "%s = %s ", key, value);
            if (strncmp(line, want_v, strlen(want_v))) fail_msg("'%s', expected value '%s'", line, value);
            const char *p = line + strlen(want_v);
            while (*p == ' ') p++;
            if (*p != '#' || strcmp(p + 1, "") == 0 || p[1] != ' ' || strcmp(p + 2, origin))
                fail_msg("'%s', expected origin '# %s'", line, origin);
            return no;
        }
        l = e + 1;
    }
    fail_msg("no line for '%s' in:\n%s", key, out);
    return -1;
}

void test_print(void **s)
{
    (void)s;
    vt_config c;
    vt_config_defaults(&c);
    const char *path = write_tmp("version: 1\ndefaults:\n  platform: cuda\nplatforms:\n  cuda:\n"
                                 "    expert_cache:\n      headroom: 3GiB\n      slots: 64\n");
    char file[64];
    snprintf(file, sizeof file, "%s", path);
    if (vt_config_load_file(file, &c) != VT_OK) fail_msg("%s", vt_last_error());
    unlink(file);
    set_ok(&c, "cuda.experts=streamed");
    set_ok(&c, "rocm.expert_cache.headroom=2GiB");
    set_ok(&c, "rocm.expert_cache.arena=1.5GiB");
    char *out = print_to_string(&c);

    char o[96];
    snprintf(o, sizeof o, "%s:3:13", file);
    int l_def = expect_line(out, "defaults.platform", "cuda", o);
    int l_model = expect_line(out, "models.qwen35moe", "qwen35", "default");
    expect_line(out, "models.gemma4", "gemma4", "default");
    snprintf(o, sizeof o, "%s:7:17", file);
    int l_head = expect_line(out, "platforms.cuda.expert_cache.headroom", "3 GiB (3221225472)", o);
    snprintf(o, sizeof o, "%s:8:14", file);
    int l_slots = expect_line(out, "platforms.cuda.expert_cache.slots", "64", o);
    expect_line(out, "platforms.cuda.expert_cache.arena", "none (slots given)", "default");
    int l_exp = expect_line(out, "platforms.cuda.experts", "streamed", "--set");
    int l_back = expect_line(out, "platforms.cuda.backend", "cuda", "default");
    expect_line(out, "platforms.cuda.pinned_budget", "4 GiB (4294967296)", "default");
    expect_line(out, "platforms.cuda.unified_memory", "false", "default");
    expect_line(out, "platforms.cuda.kv_cache_tokens", "4096", "default");
    expect_line(out, "platforms.cuda.expert_cache.store", "device", "default");
    expect_line(out, "platforms.rocm.expert_cache.arena", "1.50 GiB (1610612736)", "--set");
    expect_line(out, "platforms.cpu.expert_cache.arena", "auto", "default");
    expect_line(out, "platforms.cpu.expert_cache.slots", "none", "default");
    expect_line(out, "platforms.cpu.expert_cache.headroom", "0 B (0)", "default");
    expect_line(out, "platforms.unified.unified_memory", "true", "default");
    expect_line(out, "platforms.unified.pinned_budget", "0 B (0)", "default");
    int l_last = expect_line(out, "platforms.unified.devices", "0", "default");
    /* deterministic order: defaults, models, then each platform's keys in schema order */
    assert_int_equal(l_def, 0);
    assert_int_equal(l_model, 1);
    assert_true(l_back < l_exp && l_exp < l_slots && l_slots < l_head);
    expect_line(out, "platforms.cuda.expert_cache.host_arena", "auto", "default");
    expect_line(out, "platforms.cuda.expert_cache.policy", "lfru", "default");
    expect_line(out, "platforms.cuda.expert_cache.prefetch", "auto", "default");
    expect_line(out, "platforms.cuda.expert_cache.prefetch_top", "auto", "default");
    expect_line(out, "platforms.cuda.expert_cache.prefetch_max", "auto", "default");
    expect_line(out, "platforms.cuda.expert_cache.readers", "auto", "default");
    expect_line(out, "platforms.cuda.expert_cache.staging", "auto", "default");
    expect_line(out, "platforms.cuda.expert_cache.slot_classes", "auto", "default");
    expect_line(out, "platforms.cuda.expert_cache.slot_unit", "auto", "default");
    assert_int_equal(l_last, 1 + 3 + 4 * 20 - 1);
    /* the header's example line, exactly */
    assert_contains(out, "\nplatforms.rocm.expert_cache.headroom = 2 GiB (2147483648)   # --set\n");
    /* padded so that '#' is at column 61, as in config.h */
    const char *first = "defaults.platform = cuda                                    # ";
    assert_int_equal(strlen(first), 62);
    assert_int_equal(strncmp(out, first, strlen(first)), 0);
    free(out);
}


/* devices: every form of the file and of --set, each refusal naming the key
 * and the bad entry, and what vt config --show prints. */
void test_devices(void **s)
{
    (void)s;
    static const struct {
        const char *yaml_value; /* after "devices:" */
        int all;
        uint32_t n;
        int32_t dev[3];
    } ok[] = {{" 0", 0, 1, {0}},          {" 1", 0, 1, {1}},          {" [0, 1]", 0, 2, {0, 1}},
              {" [2,0,1]", 0, 3, {2, 0, 1}}, {"\n      - 3\n      - 1", 0, 2, {3, 1}},
              {" all", 1, 0, {0}},        {" \"0, 1\"", 0, 2, {0, 1}}, {" [1023]", 0, 1, {1023}}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char yaml[256];
        snprintf(yaml, sizeof yaml, "version: 1\nplatforms:\n  cuda:\n    devices:%s\n",
                 ok[i].yaml_value);
        vt_config c;
        vt_config_defaults(&c);
        if (load_text(yaml, &c) != VT_OK) fail_msg("devices:%s: %s", ok[i].yaml_value, vt_last_error());
        const vt_config_platform *p = vt_config_platform_get(&c, "cuda");
        assert_int_equal(p->devices_all, ok[i].all);
        assert_int_equal(p->n_devices, ok[i].n);
        for (uint32_t d = 0; d < ok[i].n; d++) assert_int_equal(p->devices[d], ok[i].dev[d]);
        assert_int_equal(p->devices_src.origin, VT_CONFIG_FROM_FILE);
        assert_int_equal(p->devices_src.line, ok[i].yaml_value[0] == '\n' ? 5 : 4);
        /* the other platforms keep device 0 */
        assert_int_equal(vt_config_platform_get(&c, "cpu")->n_devices, 1);
    }

    const vt_status F = VT_ERR_FORMAT;
    expect_file_error("version: 1\nplatforms:\n  cuda:\n    devices: [0, 0]\n", F, 4, 14,
                      "platforms.cuda.devices", "device 0 is listed twice");
    expect_file_error("version: 1\nplatforms:\n  cuda:\n    devices: []\n", F, 4, 14,
                      "platforms.cuda.devices", "an empty list");
    expect_file_error("version: 1\nplatforms:\n  cuda:\n    devices: [0, x]\n", F, 4, 18,
                      "platforms.cuda.devices", "'x' is not a device index");
    expect_file_error("version: 1\nplatforms:\n  cuda:\n    devices: [0, ~]\n", F, 4, 18,
                      "platforms.cuda.devices", "an empty entry");
    expect_file_error("version: 1\nplatforms:\n  cuda:\n    devices: [0, [1]]\n", F, 4, 18,
                      "platforms.cuda.devices", "expected a device index");
    expect_file_error("version: 1\nplatforms:\n  cuda:\n    devices: {a: 1}\n", F, 4, 14,
                      "platforms.cuda.devices", "found a mapping");
    expect_file_error("version: 1\nplatforms:\n  cuda:\n    devices:\n", F, 4, 13,
                      "platforms.cuda.devices", "found none");
    expect_file_error("version: 1\nplatforms:\n  cuda:\n    devices: 1024\n", F, 4, 14,
                      "platforms.cuda.devices", "'1024' is not a device index (0..1023)");
    expect_file_error("version: 1\nplatforms:\n  cuda:\n    devices: -1\n", F, 4, 14,
                      "platforms.cuda.devices", "'-1' is not a device index");
    expect_file_error("version: 1\nplatforms:\n  cuda:\n    devices: \"0,,1\"\n", F, 4, 14,
                      "platforms.cuda.devices", "an empty entry in the device list");
    expect_file_error("version: 1\nplatforms:\n  cuda:\n    devices: [0,1,2,3,4,5,6,7,8,9,10,11,"
                      "12,13,14,15,16]\n", F, 4, 53, "platforms.cuda.devices",
                      "more than 16 devices");
    expect_file_error("version: 1\nplatforms:\n  cuda:\n    devices: 0\n    devices: 1\n", F, 5, 5,
                      "platforms.cuda.devices", NULL);

    vt_config c;
    vt_config_defaults(&c);
    const vt_config_platform *p = vt_config_platform_get(&c, "cuda");
    set_ok(&c, "cuda.devices=1");
    assert_int_equal(p->n_devices, 1);
    assert_int_equal(p->devices[0], 1);
    assert_src(p->devices_src, VT_CONFIG_FROM_CLI, 0, 0);
    set_ok(&c, "cuda.devices=0,1");
    assert_int_equal(p->n_devices, 2);
    assert_int_equal(p->devices[1], 1);
    set_ok(&c, "platforms.cuda.devices=[3, 2]");
    assert_int_equal(p->n_devices, 2);
    assert_int_equal(p->devices[0], 3);
    assert_int_equal(p->devices[1], 2);
    char *out = print_to_string(&c);
    expect_line(out, "platforms.cuda.devices", "[3, 2]", "--set");
    expect_line(out, "platforms.cpu.devices", "0", "default");
    free(out);
    set_ok(&c, "cuda.devices=all");
    assert_int_equal(p->devices_all, 1);
    assert_int_equal(p->n_devices, 0);
    out = print_to_string(&c);
    expect_line(out, "platforms.cuda.devices", "all", "--set");
    free(out);
    set_ok(&c, "cuda.devices=2");
    assert_int_equal(p->devices_all, 0);
    assert_int_equal(p->n_devices, 1);
    assert_int_equal(p->devices[0], 2);
    expect_set_error("cuda.devices=", "no device given");
    expect_set_error("cuda.devices=0,0", "device 0 is listed twice");
    expect_set_error("cuda.devices=gpu0", "'gpu0' is not a device index");
    expect_set_error("cuda.devices=0,", "an empty entry");
    expect_set_error("cuda.devices=[]", "no device given");
    /* an entry is trimmed before its length counts; line breaks are blanks */
    set_ok(&c, "cuda.devices=0,                                        1");
    assert_int_equal(p->n_devices, 2);
    expect_set_error("cuda.devices=0,                        12345678901234567890123456789012",
                     "'12345678901234567890123456789012' is not a device index");
    /* sixteen four-digit indices print whole */
    set_ok(&c, "cuda.devices=1008,1009,1010,1011,1012,1013,1014,1015,1016,1017,1018,1019,1020,1021,"
               "1022,1023");
    out = print_to_string(&c);
    expect_line(out, "platforms.cuda.devices", "[1008, 1009, 1010, 1011, 1012, 1013, 1014, 1015, "
                "1016, 1017, 1018, 1019, 1020, 1021, 1022, 1023]", "--set");
    free(out);
    /* the file: the 17th entry is the one named, whatever its spelling */
    expect_file_error("version: 1\nplatforms:\n  cuda:\n    devices: [0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,"
                      "0,0]\n", F, 4, 47, "platforms.cuda.devices", "more than 16 devices");
    expect_file_error("version: 1\nplatforms:\n  cuda:\n    devices: [0,1,2,3,4,5,6,7,8,9,10,11,12,"
                      "13,14,0000000000000000000015,0000000000000000000016]\n",
                      F, 4, 73, "platforms.cuda.devices", "more than 16 devices");
    expect_file_error("version: 1\nplatforms:\n  cuda:\n    devices: [0,1,1]\n", F, 4, 14,
                      "platforms.cuda.devices", "device 1 is listed twice");
    static const char nul_scalar[] = "version: 1\nplatforms:\n  cuda:\n    devices: \"0\\x001\"\n";
    expect_file_error(nul_scalar, F, 4, 14, "platforms.cuda.devices", "contains a NUL character");
    static const char nul_entry[] = "version: 1\nplatforms:\n  cuda:\n    devices: [\"0\\x001\"]\n";
    expect_file_error(nul_entry, F, 4, 15, "platforms.cuda.devices", "contains a NUL character");
    expect_file_error("version: 1\nplatforms:\n  cuda:\n    devices: >\n      0,\n      1\n", F, 4, 14,
                      "platforms.cuda.devices", "a block scalar");
    expect_file_error("version: 1\nplatforms:\n  cuda:\n    devices: |\n      0\n      1\n", F, 4, 14,
                      "platforms.cuda.devices", "a block scalar");
}

/* --config FIFO (or any non-regular file) is refused by its type, never
 * waited on (issue 17) */
void test_fifo_config_refused(void **s)
{
    (void)s;
    char d[] = "/tmp/vt-cfg-XXXXXX";
    assert_non_null(mkdtemp(d));
    char f[300];
    snprintf(f, sizeof f, "%s/residency.yaml", d);
    assert_int_equal(mkfifo(f, 0644), 0);
    vt_test_no_wait_begin("test_config: a FIFO given as the config");
    vt_config c;
    vt_config_defaults(&c);
    vt_clear_error();
    assert_int_not_equal(vt_config_load_file(f, &c), VT_OK);
    if (!strstr(vt_last_error(), f) || !strstr(vt_last_error(), "not a regular file"))
        fail_msg("FIFO config: %s", vt_last_error());
    vt_clear_error();
    assert_int_not_equal(vt_config_load_file(d, &c), VT_OK);
    if (!strstr(vt_last_error(), "not a regular file")) fail_msg("directory config: %s", vt_last_error());
    vt_test_no_wait_end();
    unlink(f);
    rmdir(d);
}
