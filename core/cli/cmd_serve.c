/*
 * cmd_serve.c - vt serve: the OpenAI-compatible HTTP server (core/serve/).
 *
 * Order: listen first (GET /health answers 503 while the model loads), open
 * the engine with --parallel sequences, start the scheduler, answer 200.
 * SIGTERM or SIGINT: stop accepting connections, end every open stream with
 * an error event, wait for the connections to finish, exit 0. A second
 * signal exits at once (status 1), and so does a shutdown still running
 * after SHUTDOWN_DEADLINE_S seconds.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "error.h"
#include "serve_http.h"
#include "serve_sched.h"

/* The key in a file: its first line, without the line end. NULL on error. */
static char *read_key_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "vt serve: --api-key-file %s: %s\n", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        fprintf(stderr, "vt serve: --api-key-file %s is a directory, not a file\n", path);
        return NULL;
    }
    char buf[4096];
    errno = 0;
    char *line = fgets(buf, sizeof buf, f);
    int read_error = ferror(f) ? errno : 0;
    fclose(f);
    if (!line) {
        if (read_error)
            fprintf(stderr, "vt serve: --api-key-file %s: %s\n", path, strerror(read_error));
        else
            fprintf(stderr, "vt serve: --api-key-file %s is empty\n", path);
        return NULL;
    }
    size_t n = strlen(buf);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ')) buf[--n] = 0;
    if (!n) {
        fprintf(stderr, "vt serve: --api-key-file %s holds an empty key\n", path);
        return NULL;
    }
    return strdup(buf);
}

#define SHUTDOWN_DEADLINE_S 20

/* After the first signal: a second one, or the deadline, ends the process
 * at once (a handler stuck in a long step must not hold the exit forever). */
static void *shutdown_watch(void *arg)
{
    const sigset_t *sigs = arg;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int sig = -1;
    for (;;) { /* interrupted waits (EINTR) wait again for the time left */
        clock_gettime(CLOCK_MONOTONIC, &now);
        double left = SHUTDOWN_DEADLINE_S - ((double)(now.tv_sec - t0.tv_sec) +
                                              1e-9 * (double)(now.tv_nsec - t0.tv_nsec));
        if (left <= 0) break;
        struct timespec until = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
        sig = sigtimedwait(sigs, NULL, &until);
        if (sig > 0 || errno == EAGAIN) break;
    }
    if (sig > 0)
        fprintf(stderr, "vt serve: a second %s: exiting now\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    else
        fprintf(stderr, "vt serve: shutdown still running after %d s: exiting now\n",
                SHUTDOWN_DEADLINE_S);
    _exit(1);
    return NULL;
}

/* The sampling options given on the command line (VT_SERVE_GIVEN_*): the
 * server's defaults for requests that leave those fields unset. */
static unsigned serve_defaults_set(const opts *o)
{
    unsigned set = 0;
    for (int k = 0; k < o->n_seen; k++)
        set |= o->seen[k] == O_TEMP ? VT_SERVE_GIVEN_TEMP : o->seen[k] == O_TOPK ? VT_SERVE_GIVEN_TOP_K
               : o->seen[k] == O_TOPP ? VT_SERVE_GIVEN_TOP_P : o->seen[k] == O_MINP ? VT_SERVE_GIVEN_MIN_P : 0;
    return set;
}

static int serve_main(const opts *o_in)
{
    opts local = *o_in;
    const opts *o = &local;
    if (!local.parallel) local.parallel = 1; /* the engine then holds exactly the slots' sequences */
    if (local.batch && local.batch < (uint32_t)local.parallel) {
        /* a step holds every running slot's decode token first: fewer than
         * --parallel tokens a step would leave no room for a new prompt */
        fprintf(stderr, "vt: WARN: vt serve: --batch %u is below --parallel %d: raised to %d, so "
                "that a step has room for every slot\n", local.batch, local.parallel,
                local.parallel);
        local.batch = (uint32_t)local.parallel;
    }
    if (!o->model) {
        fprintf(stderr, "vt serve: -m MODEL is required\n");
        return 2;
    }
    if (o->api_key && o->api_key_file) {
        fprintf(stderr, "vt serve: give --api-key or --api-key-file, not both\n");
        return 2;
    }
    if (o->api_key && !o->api_key[0]) {
        fprintf(stderr, "vt serve: --api-key is empty\n");
        return 2;
    }
    char *key = NULL;
    if (o->api_key_file && !(key = read_key_file(o->api_key_file))) return 2;
    if (o->api_key && !(key = strdup(o->api_key))) return 1;

    /* every thread started from here inherits the mask: the signals come to sigwait */
    static sigset_t sigs; /* static: the detached shutdown watch reads it after we return */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    const char *base = strrchr(o->model, '/');
    const char *model_id = o->alias ? o->alias : base ? base + 1 : o->model;
    const char *host = o->host ? o->host : "127.0.0.1";
    vt_serve_http_params hp = {.host = host, .port = (uint16_t)o->port, .api_key = key,
                               .max_body = 4u << 20, .timeout_s = (unsigned)o->timeout,
                               .max_conns = 1024, .model_id = model_id,
                               .cors_origin = o->cors_origin};
    uint16_t port = 0;
    vt_serve_http *http = vt_serve_http_start(&hp, &port);
    free(key);
    if (!http) return cli_fail("serve");
    fprintf(stderr, "vt serve: listening on http://%s%s%s:%u (loading %s)\n",
            strchr(host, ':') ? "[" : "", host, strchr(host, ':') ? "]" : "", port, o->model);

    vt_engine *e = NULL;
    vt_serve_sched *sched = NULL;
    int rc = 1;
    char *tmpl = NULL;
    if (cli_open_engine(o, &e) != VT_OK) goto out;
    int bad;
    tmpl = cli_chat_template(o, vt_tokenizer_chat_template(vt_engine_tokenizer(e)), &bad);
    if (bad) goto out;
    vt_serve_sched_params sp = {.engine = e, .n_parallel = (uint32_t)o->parallel,
                                .queue_max = (uint32_t)o->queue, .chunk = 0, .model_id = model_id,
                                .chat_template = tmpl,
                                .defaults = &o->sp, .defaults_set = serve_defaults_set(o),
                                /* a test setting: every answer is this text (the tool-call tests) */
                                .force_output = getenv("VT_TEST_FORCE_OUTPUT")};
    if (!(sched = vt_serve_sched_start(&sp))) goto out;
    vt_serve_http_set_ready(http, sched);
    vt_model_info info;
    vt_engine_model_info(e, &info);
    fprintf(stderr, "vt serve: ready: %s, %d slot%s of %u tokens, queue %d\n", model_id,
            o->parallel, o->parallel == 1 ? "" : "s", info.n_ctx, o->queue);

    int sig = 0;
    while (sigwait(&sigs, &sig) != 0) {}
    fprintf(stderr, "vt serve: %s: stopping (open streams end with an error event; a second "
            "signal exits at once)\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    pthread_t watch;
    if (pthread_create(&watch, NULL, shutdown_watch, &sigs) == 0) pthread_detach(watch);
    rc = 0;
out:
    if (rc) cli_fail("serve");
    vt_serve_http_quiesce(http);
    if (sched) {
        vt_serve_sched_drain(sched);
        vt_serve_sched_stop(sched);
    }
    vt_serve_http_stop(http);
    vt_serve_sched_free(sched);
    vt_engine_close(e);
    free(tmpl);
    return rc;
}

static const cli_opt_use serve_options[] = {
    {O_TEMP, NULL, "the temperature of a request that sets none (default: OpenAI's 1)"},
    {O_TOPK, NULL, "the top-k of a request that sets none (default: off)"},
    {O_TOPP, NULL, "the top-p of a request that sets none (default: off)"},
    {O_MINP, NULL, "the min-p of a request that sets none (default: off)"},
    CLI_ENGINE_OPTIONS,
    {O_HOST, NULL, NULL}, {O_PORT, NULL, NULL},
    {O_PARALLEL, NULL, "requests served at once (slots), each its own KV cache of --ctx tokens"},
    {O_QUEUE, NULL, NULL}, {O_API_KEY, NULL, NULL}, {O_API_KEY_FILE, NULL, NULL},
    {O_TIMEOUT, NULL, NULL}, {O_ALIAS, NULL, NULL}, {O_CORS_ORIGIN, NULL, NULL},
    {O_JINJA, NULL, NULL}, {O_NO_JINJA, NULL, NULL}, {O_CHAT_TEMPLATE_FILE, NULL, NULL},
    {0, NULL, NULL}};

const cli_command cli_cmd_serve = {
    "serve", serve_main, "-m MODEL [options]",
    "an OpenAI-compatible HTTP server",
    "An OpenAI-compatible HTTP server: POST /v1/chat/completions, /v1/completions, /tokenize,\n"
    "/detokenize; GET /v1/models, /health, /metrics. Binds 127.0.0.1:8080 unless told.\n"
    "Without an API key only Host names of the bind address and application/json bodies are\n"
    "taken; a request from a web page (Origin) only where --cors-origin allows it.\n",
    serve_options};
