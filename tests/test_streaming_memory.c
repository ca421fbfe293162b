/*
 * test_streaming_memory.c - memory bound of expert streaming on a generated
 * model (vt mkmodel's generator): 768 MiB of BF16 routed experts streamed
 * through a 32 MiB arena. The `vt run` child's peak RSS (wait4) must stay
 * within dense + arena + KV/state/scratch (the fit check's numbers) + 10% +
 * a fixed 48 MiB for the process itself (code, libraries, tokenizer, stdio),
 * and far below what holding the experts would take; its greedy tokens must
 * equal the all-resident run's. The bench script bench/stream_memory.sh does
 * the same at >= 4 GiB with a 256 MiB arena.
 */
#include "test_util.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "engine.h"
#include "error.h"
#include "mkmodel.h"
#include "residency.h"

extern char **environ;

#define MIB (1024.0 * 1024.0)

typedef struct child {
    char out[65536], err[65536];
    double maxrss_mib;
    int status;
} child;

static void run_vt(const char *const *args, child *c)
{
    char outp[256], errp[256];
    snprintf(outp, sizeof outp, "/tmp/vt-smem-out-%d", (int)getpid());
    snprintf(errp, sizeof errp, "/tmp/vt-smem-err-%d", (int)getpid());
    const char *argv[64];
    int n = 0;
    argv[n++] = vt_test_vt_bin();
    for (int i = 0; args[i]; i++) argv[n++] = args[i];
    argv[n] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, outp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, errp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_t pid;
    if (posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, environ) != 0)
        fail_msg("cannot start %s", argv[0]);
    posix_spawn_file_actions_destroy(&fa);
    struct rusage ru;
    if (wait4(pid, &c->status, 0, &ru) != pid) fail_msg("wait4 failed");
    c->maxrss_mib = (double)ru.ru_maxrss / 1024.0;
    size_t len;
    char *o = vt_test_read_file(outp, &len);
    snprintf(c->out, sizeof c->out, "%s", o ? o : "");
    free(o);
    char *e = vt_test_read_file(errp, &len);
    snprintf(c->err, sizeof c->err, "%s", e ? e : "");
    free(e);
    unlink(outp);
    unlink(errp);
}

static void test_rss_bound(void **state)
{
    (void)state;
    char path[256];
    snprintf(path, sizeof path, "%s/vt-smem-%d.gguf", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    vt_mkmodel_params p;
    vt_mkmodel_defaults(&p);
    p.n_embd = 512;
    p.n_layer = 8;
    p.n_head = 4;
    p.n_head_kv = 2;
    p.head_dim = 64;
    p.n_rot = 32;
#ifdef VT_TEST_SANITIZED
    p.n_expert = 16; /* -O0 + ASan: a smaller model; the RSS bound is not checked there */
#else
    p.n_expert = 128;
#endif
    p.n_expert_used = 4;
    p.n_ff_exp = 256;
    p.n_ff_shexp = 256;
    p.seed = 7;
    /* generated in a child process: a spawned child's ru_maxrss starts from the
     * high-water mark of the address space it was spawned from, so this
     * process must never hold the model's bytes */
    pid_t gen = fork();
    if (gen == 0) _exit(vt_mkmodel_qwen35moe(path, &p) == VT_OK ? 0 : 1);
    int gst = -1;
    if (gen < 0 || waitpid(gen, &gst, 0) != gen || gst != 0) fail_msg("mkmodel of %s failed", path);
    const uint64_t expert_bytes = 8ull * 3 * 512 * 256 * p.n_expert * 2;

    /* the fit check's numbers for the streamed configuration */
    static vt_config cfg;
    vt_config_defaults(&cfg);
    assert_int_equal(vt_config_set_arg(&cfg, "cpu.experts=streamed"), VT_OK);
    assert_int_equal(vt_config_set_arg(&cfg, "cpu.expert_cache.arena=32MiB"), VT_OK);
    setenv("VT_PLUGIN_PATH", vt_test_plugin_dir(), 1);
    vt_engine_params ep = {.model_path = path, .n_threads = 2, .n_ctx = 64, .n_batch = 512,
                           .config = &cfg};
    vt_engine *e;
    if (vt_engine_open(&ep, &e) != VT_OK) fail_msg("%s", vt_last_error());
    const vt_fit fit = *vt_engine_fit(e); /* a copy: the engine is closed below */
    const vt_fit *f = &fit;
    assert_int_equal(f->expert_bytes, expert_bytes);
    assert_int_equal(f->experts, VT_EXPERTS_STREAMED);
    double need_mib = (double)(f->dense_bytes + f->arena_bytes + f->kv_bytes + f->state_bytes +
                               f->scratch_bytes) / MIB;
    vt_engine_close(e);

    const char *prompt = "the quick brown fox jumps over the lazy dog and keeps on running far";
    const char *res[] = {"run", "-m", path, "-p", prompt, "-n", "16", "--temp", "0", "--ids",
                         "--ignore-eos", "--ctx", "64", "-t", "2", "--stats", NULL};
    const char *str[] = {"run", "-m", path, "-p", prompt, "-n", "16", "--temp", "0", "--ids",
                         "--ignore-eos", "--ctx", "64", "-t", "2", "--stats",
                         "--set", "cpu.experts=streamed", "--set", "cpu.expert_cache.arena=32MiB",
                         NULL};
    child *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    run_vt(res, a);
    if (a->status) fail_msg("resident run failed: %s", a->err);
    run_vt(str, b);
    if (b->status) fail_msg("streamed run failed: %s", b->err);
    print_message("[stream-mem] experts %.0f MiB, arena %.0f MiB, dense+arena+caches %.1f MiB; "
                  "peak RSS resident %.1f MiB, streamed %.1f MiB\n",
                  expert_bytes / MIB, f->arena_bytes / MIB, need_mib, a->maxrss_mib, b->maxrss_mib);
    if (strcmp(a->out, b->out)) fail_msg("streamed tokens differ:\n%s\nvs resident\n%s", b->out, a->out);
    if (!strstr(b->err, "experts: streamed")) fail_msg("not streamed: %s", b->err);
#ifdef VT_TEST_SANITIZED
    /* ASan's shadow memory and quarantine are part of the child's RSS: the
     * bound is checked in the plain build only */
    print_message("[stream-mem] sanitizer build: RSS bound not checked\n");
    free(a);
    free(b);
    unlink(path);
    return;
#endif
    double bound = 1.10 * need_mib + 48.0;
    if (b->maxrss_mib > bound)
        fail_msg("streamed peak RSS %.1f MiB exceeds dense + arena + caches + 10%% + 48 MiB = %.1f MiB",
                 b->maxrss_mib, bound);
    if (b->maxrss_mib > 0.5 * (double)expert_bytes / MIB)
        fail_msg("streamed peak RSS %.1f MiB is not far below the %.0f MiB of experts",
                 b->maxrss_mib, expert_bytes / MIB);
    free(a);
    free(b);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_rss_bound)};
    return vt_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
