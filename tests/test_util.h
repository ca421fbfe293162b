/*
 * test_util.h - helpers shared by the cmocka suites: where the fixtures are
 * (and what to do when they are not), reading whole files, plugin and binary
 * locations from the build.
 */
#ifndef VT_TEST_UTIL_H
#define VT_TEST_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <cmocka.h>

/* Set when a test case was skipped for lack of fixtures (one per test binary). */
static int vt_test_fixtures_skipped;

/* ctest's SKIP_RETURN_CODE (tests/CMakeLists.txt): a binary whose cases were
 * skipped for lack of fixtures reports "Skipped" in ctest's summary instead
 * of passing quietly. */
#define VT_TEST_SKIP_CODE 77

/* Exit status of a test binary: failures first, then fixture skips. Use as
 * `return vt_test_exit(cmocka_run_group_tests(...));`. */
static inline int vt_test_exit(int failed)
{
    if (failed) return failed;
    return vt_test_fixtures_skipped ? VT_TEST_SKIP_CODE : 0;
}

/*
 * The fixture folder: env VT_FIXTURES_DIR, else the CMake option baked into
 * the test's environment. When it is absent: under CI=true the calling test
 * fails; otherwise the test is skipped with a loud message. Returns NULL when
 * the caller must return (after skip()).
 */
static inline const char *vt_test_fixtures(void)
{
    const char *d = getenv("VT_FIXTURES_DIR");
    if (!d || !*d) d = getenv("VT_TEST_FIXTURES_DEFAULT");
    struct stat st;
    if (d && *d && stat(d, &st) == 0 && S_ISDIR(st.st_mode)) return d;
    const char *ci = getenv("CI");
    if (ci && !strcmp(ci, "true")) {
        fail_msg("fixture folder '%s' is absent and CI=true: fixtures are required under CI",
                 d ? d : "(unset)");
        return NULL;
    }
    fprintf(stderr,
            "\n**********************************************************************\n"
            "*** SKIPPING: fixture folder '%s' not found.\n"
            "*** Set VT_FIXTURES_DIR (or -DVT_FIXTURES_DIR=) to ../shared/fixtures.\n"
            "**********************************************************************\n\n",
            d ? d : "(unset)");
    vt_test_fixtures_skipped = 1;
    skip();
    return NULL;
}

/*
 * One fixture file, path: 1 when it can be read. Absent from a partial copy
 * of the fixtures (a device run carries only some): under CI=true the
 * calling test fails; otherwise it is skipped with a loud message (skip()).
 */
static inline int vt_test_fixture_file(const char *path)
{
    if (access(path, R_OK) == 0) return 1;
    const char *ci = getenv("CI");
    if (ci && !strcmp(ci, "true")) {
        fail_msg("fixture file '%s' is absent and CI=true: fixtures are required under CI", path);
        return 0;
    }
    fprintf(stderr, "\n*** SKIPPING: fixture file '%s' is absent (a partial fixture copy)\n\n",
            path);
    vt_test_fixtures_skipped = 1;
    skip();
    return 0;
}

/* Join fixture dir + relative path into a static-ish buffer the caller owns. */
static inline char *vt_test_path(const char *dir, const char *rel)
{
    size_t n = strlen(dir) + strlen(rel) + 2;
    char *p = malloc(n);
    assert_non_null(p);
    snprintf(p, n, "%s/%s", dir, rel);
    return p;
}

/* A required file of the fixture set: missing is a failure (the folder exists). */
static inline void *vt_test_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open fixture file %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) fail_msg("short read of %s", path);
    fclose(f);
    ((char *)buf)[n] = 0;
    if (len) *len = (size_t)n;
    return buf;
}

static inline const char *vt_test_plugin_dir(void)
{
    const char *d = getenv("VT_TEST_PLUGIN_DIR");
    assert_non_null(d);
    return d;
}

static inline const char *vt_test_vt_bin(void)
{
    const char *d = getenv("VT_TEST_VT_BIN");
    assert_non_null(d);
    return d;
}

/* A guard for a step that must not block (a FIFO opened for reading waits
 * for a writer): vt_test_no_wait_begin(what) arms a 20 s alarm whose
 * handler writes "<what> was waited on" and exits 3; _end disarms it. */
static const char *vt_test_wait_what;
static inline void vt_test_wait_alarm(int sig)
{
    (void)sig;
    static const char tail[] = " was waited on (a FIFO: no writer ever comes)\n";
    const char *w = vt_test_wait_what ? vt_test_wait_what : "a step";
    if (write(2, w, strlen(w)) < 0 || write(2, tail, sizeof tail - 1) < 0) _exit(3);
    _exit(3);
}
static inline void vt_test_no_wait_begin(const char *what)
{
    vt_test_wait_what = what;
    signal(SIGALRM, vt_test_wait_alarm);
    alarm(20);
}
static inline void vt_test_no_wait_end(void)
{
    alarm(0);
    signal(SIGALRM, SIG_DFL);
}

#endif
