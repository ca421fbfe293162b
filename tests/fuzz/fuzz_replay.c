/*
 * fuzz_replay.c - runs a libFuzzer harness over saved inputs without
 * libFuzzer, so that every build (gcc or clang, release or ASan/UBSan) can
 * replay the seed corpora and any saved finding as a test.
 *
 *   fuzz_replay_<target> PATH...
 *
 * Each PATH is a file (one input) or a directory (each regular file in it is
 * one input, in name order; subdirectories are not entered). The harness's
 * LLVMFuzzerInitialize runs first, then LLVMFuzzerTestOneInput once per
 * input, as libFuzzer would call them. A harness reports a failure by
 * aborting (its CHECK), which ends the replay with the signal; an input that
 * cannot be read ends it with status 1 and the path. Status 0 and the count
 * of inputs on stdout otherwise; no input at all is status 1 (a replay that
 * runs nothing must not pass).
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static long g_inputs;

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (!f || fstat(fileno(f), &st) != 0) {
        fprintf(stderr, "fuzz_replay: %s: %s\n", path, strerror(errno));
        if (f) fclose(f);
        return 1;
    }
    /* libFuzzer hands the harness a buffer of exactly the input's size */
    size_t n = (size_t)st.st_size;
    uint8_t *p = malloc(n ? n : 1);
    int bad = !p || fread(p, 1, n, f) != n;
    fclose(f);
    if (bad) {
        fprintf(stderr, "fuzz_replay: %s: %s\n", path, p ? "read error" : "out of memory");
        free(p);
        return 1;
    }
    fprintf(stderr, "fuzz_replay: %s (%zu bytes)\n", path, n);
    LLVMFuzzerTestOneInput(p, n);
    free(p);
    g_inputs++;
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int replay_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "fuzz_replay: %s: %s\n", dir, strerror(errno));
        return 1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **q = realloc(names, cap * sizeof *q);
            if (!q) {
                rc = 1;
                break;
            }
            names = q;
        }
        names[n] = strdup(e->d_name);
        if (!names[n]) {
            rc = 1;
            break;
        }
        n++;
    }
    closedir(d);
    if (rc) fprintf(stderr, "fuzz_replay: %s: out of memory\n", dir);
    if (n) qsort(names, n, sizeof *names, by_name);
    for (size_t i = 0; i < n && !rc; i++) {
        size_t len = strlen(dir) + strlen(names[i]) + 2;
        char *path = malloc(len);
        if (!path) {
            rc = 1;
            break;
        }
        snprintf(path, len, "%s/%s", dir, names[i]);
        struct stat st;
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) rc = replay_file(path);
        free(path);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH... (input files or directories of them)\n", argv[0]);
        return 2;
    }
    LLVMFuzzerInitialize(&argc, &argv);
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "fuzz_replay: %s: %s\n", argv[i], strerror(errno));
            return 1;
        }
        int rc = S_ISDIR(st.st_mode) ? replay_dir(argv[i]) : replay_file(argv[i]);
        if (rc) return rc;
    }
    if (!g_inputs) {
        fprintf(stderr, "fuzz_replay: no input under the paths given\n");
        return 1;
    }
    printf("fuzz_replay: %ld inputs, no failure\n", g_inputs);
    return 0;
}
