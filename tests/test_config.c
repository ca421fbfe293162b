/*
 * test_config.c - the residency config: the shipped conf/residency.yaml
 * parses to the documented choices; a typo, a bad number, an unsupported
 * residency and broken YAML are each refused naming file, line and key.
 */
#include "test_util.h"

#include <unistd.h>

#include "config.h"
#include "error.h"

static char *write_tmp(const char *text)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/vt-config-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

static void test_shipped_config(void **s)
{
    (void)s;
    char path[4096];
    snprintf(path, sizeof path, "%s/conf/residency.yaml", getenv("VT_TEST_SOURCE_DIR"));
    vt_config c;
    if (vt_config_load_file(path, &c) != VT_OK) fail_msg("%s", vt_last_error());
    assert_string_equal(c.default_platform, "cpu");
    assert_int_equal(c.kv_cache_tokens, 4096);
    assert_string_equal(vt_config_model_for_arch(&c, "qwen35moe"), "qwen35");
    assert_null(vt_config_model_for_arch(&c, "llama"));
    const vt_config_platform *p = vt_config_platform_get(&c, "cpu");
    assert_non_null(p);
    assert_string_equal(p->backend, "cpu");
}

static void expect_refusal(const char *yaml, const char *needle)
{
    char *path = write_tmp(yaml);
    vt_config c;
    vt_status st = vt_config_load_file(path, &c);
    unlink(path);
    assert_int_not_equal(st, VT_OK);
    if (!strstr(vt_last_error(), needle) || !strstr(vt_last_error(), "/tmp/vt-config-"))
        fail_msg("expected '%s' and the file name in: %s", needle, vt_last_error());
}

static void test_refusals(void **s)
{
    (void)s;
    expect_refusal("version: 1\ndefaults:\n  platfrom: cpu\n", ":3: unknown key 'defaults.platfrom'");
    expect_refusal("defaults:\n  kv_cache_tokens: -5\n", "'defaults.kv_cache_tokens' must be an integer");
    expect_refusal("defaults:\n  kv_cache_tokens: 12abc\n", "got '12abc'");
    expect_refusal("platforms:\n  cpu:\n    experts: streamed\n", "'platforms.cpu.experts' = 'streamed'");
    expect_refusal("models: [a, b]\n", "a mapping under 'models'");
    expect_refusal("defaults: {platform: gpu}\n", "defaults.platform 'gpu' is not listed");
    expect_refusal("\"unterminated: 1\n", "YAML error");
    expect_refusal("version: 7\n", "'version' must be an integer in [1, 1]");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shipped_config),
        cmocka_unit_test(test_refusals),
    };
    return vt_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
