/*
 * test_cli_progress.c - the progress bars of the vt commands, as a user sees
 * them: script(1) gives vt a terminal, a file is what a pipe gets.
 *   1. a model's load on a discrete device (the fake backend's copies) and
 *      on the CPU (the weights read in place at open, prefault.h) draws
 *      "vt: loading <file> [...] 100%  19.58 MiB / 19.58 MiB" on a terminal;
 *      none with --no-progress or -q, none on the CPU with --no-prefault
 *      (nothing is read at open), none on a file;
 *   2. --stats says how the weights came in: "weights: 19.58 MiB read from
 *      the file in place in ... s", or "read in place at first use";
 *   3. vt mkmodel draws "vt: writing <file> [...] 100%" while it writes;
 *   4. vt info and vt fit on a split model draw "vt: opening <first shard>
 *      [...] 100%  3 / 3 shards"; not on a single file, not on a file.
 * Where script(1) cannot give vt a terminal, the terminal cases say so
 * loudly and are not run; the file cases always run.
 */
#include "test_util.h"

#include <unistd.h>

static const char *fx;

static const char *model(const char *rel)
{
    static char buf[4][4096];
    static int k;
    char *b = buf[k++ % 4];
    snprintf(b, 4096, "%s/qwen35moe-tiny/gguf/%s", fx, rel);
    return b;
}

/* Run a shell command line with stdout and stderr into one file; its text. */
static char *capture(const char *cmdline)
{
    char outp[] = "/tmp/vt-progress-XXXXXX";
    int fd = mkstemp(outp);
    assert_true(fd >= 0);
    close(fd);
    char cmd[12288];
    snprintf(cmd, sizeof cmd, "%s > '%s' 2>&1", cmdline, outp);
    int rc = system(cmd);
    (void)rc; /* the callers look at the text */
    char *text = vt_test_read_file(outp, NULL);
    unlink(outp);
    return text;
}

/* vt ARGS on a terminal (script(1)); NULL where script cannot give one. */
static char *on_tty(const char *args)
{
    static int tty = -1;
    if (tty < 0) {
        tty = !access("/usr/bin/script", X_OK) && !system("script -qec true /dev/null >/dev/null 2>&1");
        if (!tty)
            fprintf(stderr, "\n*** [progress] script(1) cannot give vt a terminal on this machine: "
                            "the terminal cases are NOT run\n\n");
    }
    if (!tty) return NULL;
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "script -qec \"'%s' %s\" /dev/null", vt_test_vt_bin(), args);
    return capture(cmd);
}

/* vt ARGS with stdout and stderr into a file (no terminal) */
static char *on_file(const char *args)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' %s < /dev/null", vt_test_vt_bin(), args);
    return capture(cmd);
}

static void want(const char *text, const char *what, const char *needle, int present)
{
    if (!text) return;
    if (!!strstr(text, needle) != present)
        fail_msg("%s: '%s' %s in:\n%s", what, needle, present ? "missing" : "present", text);
}

static void test_load_bar(void **s)
{
    (void)s;
    if (!(fx = vt_test_fixtures())) return;
    const char *bin = getenv("VT_TEST_BINARY_DIR");
    assert_non_null(bin);
    const char *bar = "vt: loading qwen35moe-tiny-bf16.gguf [";
    const char *full = "] 100%  19.58 MiB / 19.58 MiB";
    char args[8192], *t;
    /* the fake discrete backend copies every weight, then fails at its first
     * op: the run's error line shows vt ran on the terminal in every case */
    static const char *extra[] = {"", "--no-progress", "-q"};
    for (int i = 0; i < 3; i++) {
        snprintf(args, sizeof args, "run -m '%s' --plugin-dir '%s/tests/fake-plugins/discrete' "
                 "--device fake -p hi -n 1 %s", model("qwen35moe-tiny-bf16.gguf"), bin, extra[i]);
        if (!(t = on_tty(args))) break;
        want(t, "discrete load on a terminal", "vt run:", 1);
        want(t, "discrete load on a terminal", bar, i == 0);
        if (i == 0) want(t, "discrete load on a terminal", full, 1);
        free(t);
    }
    snprintf(args, sizeof args, "run -m '%s' --plugin-dir '%s/tests/fake-plugins/discrete' "
             "--device fake -p hi -n 1", model("qwen35moe-tiny-bf16.gguf"), bin);
    t = on_file(args);
    want(t, "discrete load into a file", "vt: loading", 0);
    want(t, "discrete load into a file", "\r", 0);
    free(t);

    /* the CPU: the weights are read at open, with the same bar */
    static const char *cpu_extra[] = {"", "--no-progress", "-q", "--no-prefault"};
    for (int i = 0; i < 4; i++) {
        snprintf(args, sizeof args, "run -m '%s' --device cpu -p hi -n 2 --temp 0 %s",
                 model("qwen35moe-tiny-bf16.gguf"), cpu_extra[i]);
        if (!(t = on_tty(args))) break;
        want(t, "cpu load on a terminal", bar, i == 0);
        if (i == 0) want(t, "cpu load on a terminal", full, 1);
        free(t);
    }
    snprintf(args, sizeof args, "run -m '%s' --device cpu -p hi -n 2 --temp 0 --stats",
             model("qwen35moe-tiny-bf16.gguf"));
    t = on_file(args);
    want(t, "cpu load into a file", "vt: loading", 0);
    want(t, "cpu load into a file", "\r", 0);
    want(t, "cpu --stats", "weights: 19.58 MiB read from the file in place in ", 1);
    free(t);
    strcat(args, " --no-prefault");
    t = on_file(args);
    want(t, "cpu --stats --no-prefault", "weights: read in place at first use (--no-prefault)", 1);
    free(t);
}

static void test_mkmodel_bar(void **s)
{
    (void)s;
    char dir[] = "/tmp/vt-progress-mk-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char args[8192], path[4200], *t;
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    snprintf(args, sizeof args, "mkmodel -o '%s' --type q8_0", path);
    if ((t = on_tty(args))) {
        want(t, "mkmodel on a terminal", "vt: writing m.gguf [", 1);
        want(t, "mkmodel on a terminal", "] 100%  ", 1);
        want(t, "mkmodel on a terminal", "wrote ", 1);
        free(t);
        strcat(args, " --no-progress");
        t = on_tty(args);
        want(t, "mkmodel --no-progress on a terminal", "vt: writing", 0);
        free(t);
        args[strlen(args) - strlen(" --no-progress")] = 0;
    }
    t = on_file(args);
    want(t, "mkmodel into a file", "vt: writing", 0);
    want(t, "mkmodel into a file", "wrote ", 1);
    free(t);
    unlink(path);
    rmdir(dir);
}

static void test_split_open_bar(void **s)
{
    (void)s;
    if (!(fx = vt_test_fixtures())) return;
    const char *split = model("split/qwen35moe-tiny-q8_0-split-00001-of-00003.gguf");
    const char *bar = "vt: opening qwen35moe-tiny-q8_0-split-00001-of-00003.gguf [";
    char args[8192], *t;
    static const char *cmds[] = {"info", "fit --device cpu"};
    for (int c = 0; c < 2; c++) {
        snprintf(args, sizeof args, "%s -m '%s'", cmds[c], split);
        if ((t = on_tty(args))) {
            want(t, cmds[c], bar, 1);
            want(t, cmds[c], "] 100%  3 / 3 shards", 1);
            free(t);
            snprintf(args, sizeof args, "%s -m '%s' --no-progress", cmds[c], split);
            t = on_tty(args);
            want(t, cmds[c], "vt: opening", 0);
            free(t);
            snprintf(args, sizeof args, "%s -m '%s'", cmds[c], model("qwen35moe-tiny-q8_0.gguf"));
            t = on_tty(args);
            want(t, cmds[c], "vt: opening", 0); /* one file: nothing to count */
            free(t);
        }
        snprintf(args, sizeof args, "%s -m '%s'", cmds[c], split);
        t = on_file(args);
        want(t, cmds[c], "vt: opening", 0);
        want(t, cmds[c], "\r", 0);
        free(t);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_bar),
        cmocka_unit_test(test_mkmodel_bar),
        cmocka_unit_test(test_split_open_bar),
    };
    return vt_test_exit(cmocka_run_group_tests_name("cli_progress", tests, NULL, NULL));
}
