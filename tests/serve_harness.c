/*
 * serve_harness.c - the vt serve tests' server control and HTTP client
 * (serve_harness.h).
 */
#include "test_util.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>

#include "serve_harness.h"

char *g_model;

const char *device(void)
{
    const char *d = getenv("VT_TEST_SERVE_DEVICE");
    return d && *d ? d : "cpu";
}


double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------ HTTP client */

int connect_port(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

int send_request(int fd, const char *method, const char *path, const char *extra_headers,
                        const char *body, size_t body_len)
{
    char head[1024];
    int n = snprintf(head, sizeof head,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                     method, path, extra_headers ? extra_headers : "", body ? body_len : 0);
    if (send_all(fd, head, (size_t)n)) return -1;
    return body && body_len ? send_all(fd, body, body_len) : 0;
}


/* Read to EOF (bounded by timeout_s) and decode the response. -1 on a
 * malformed response or a timeout. */
int read_response(int fd, double timeout_s, response *r)
{
    memset(r, 0, sizeof *r);
    size_t cap = 65536, n = 0;
    char *raw = malloc(cap);
    double t_end = now_s() + timeout_s;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int ms = (int)((t_end - now_s()) * 1000);
        if (ms <= 0 || poll(&p, 1, ms) <= 0) {
            free(raw);
            return -1;
        }
        if (n + 4096 > cap) raw = realloc(raw, cap *= 2);
        ssize_t k = recv(fd, raw + n, cap - n - 1, 0);
        if (k < 0) {
            free(raw);
            return -1;
        }
        if (k == 0) break;
        n += (size_t)k;
    }
    raw[n] = 0;
    char *hend = strstr(raw, "\r\n\r\n");
    if (!hend || sscanf(raw, "HTTP/1.%*d %d", &r->status) != 1) {
        free(raw);
        return -1;
    }
    *hend = 0;
    int chunked = strcasestr(raw, "Transfer-Encoding: chunked") != NULL;
    char *b = hend + 4;
    size_t blen = n - (size_t)(b - raw);
    r->body = malloc(blen + 1);
    if (!chunked) {
        memcpy(r->body, b, blen);
        r->len = blen;
    } else {
        size_t o = 0;
        char *p = b, *end = b + blen;
        while (p < end) {
            char *e;
            unsigned long sz = strtoul(p, &e, 16);
            char *nl = strstr(p, "\r\n");
            if (!nl || e == p) break;
            p = nl + 2;
            if (sz == 0) break;
            if (p + sz > end) sz = (unsigned long)(end - p);
            memcpy(r->body + o, p, sz);
            o += sz;
            p += sz + 2;
        }
        r->len = o;
    }
    r->body[r->len] = 0;
    free(raw);
    return 0;
}

/* One request on a new connection; the response in *r (free r->body). */
int http(int port, const char *method, const char *path, const char *headers,
                const char *body, response *r)
{
    int fd = connect_port(port);
    if (fd < 0) return -1;
    int rc = send_request(fd, method, path, headers, body, body ? strlen(body) : 0);
    if (rc == 0) rc = read_response(fd, 120, r);
    close(fd);
    return rc;
}

/* ------------------------------------------------------------------ the server */

/* Servers started and not yet stopped. A failed check leaves its test midway;
 * the teardown kills what that test left running, so no server outlives it. */
enum { MAX_LIVE = 8 };
static server g_live[MAX_LIVE];

void live_add(const server *s)
{
    for (int i = 0; i < MAX_LIVE; i++)
        if (!g_live[i].pid) {
            g_live[i] = *s;
            return;
        }
    fail_msg("more than %d vt serve processes at once", MAX_LIVE);
}

void live_remove(pid_t pid)
{
    for (int i = 0; i < MAX_LIVE; i++)
        if (g_live[i].pid == pid) g_live[i].pid = 0;
}

/* Teardown of every test: SIGKILL and reap what it left running, with its log. */
int reap_servers(void **state)
{
    (void)state;
    for (int i = 0; i < MAX_LIVE; i++) {
        if (!g_live[i].pid) continue;
        fprintf(stderr, "the test left vt serve (pid %d) running; killed. Its log:\n",
                (int)g_live[i].pid);
        kill(g_live[i].pid, SIGKILL);
        waitpid(g_live[i].pid, NULL, 0);
        char cmd[300];
        snprintf(cmd, sizeof cmd, "tail -30 %s >&2", g_live[i].log);
        if (system(cmd)) {}
        unlink(g_live[i].log);
        g_live[i].pid = 0;
    }
    return 0;
}

void server_start(server *s, const char *const *extra)
{
    snprintf(s->log, sizeof s->log, "/tmp/vt-test-serve-%d-XXXXXX", (int)getpid());
    int lfd = mkstemp(s->log);
    assert_true(lfd >= 0);
    const char *argv[64];
    int a = 0;
    argv[a++] = vt_test_vt_bin();
    argv[a++] = "serve";
    argv[a++] = "-m";
    argv[a++] = g_model;
    argv[a++] = "--plugin-dir";
    argv[a++] = vt_test_plugin_dir();
    argv[a++] = "--device";
    argv[a++] = device();
    argv[a++] = "--port";
    argv[a++] = "0";
    argv[a++] = "-t";
    argv[a++] = "2";
    for (int i = 0; extra && extra[i]; i++) argv[a++] = extra[i];
    argv[a] = NULL;
    s->pid = fork();
    assert_true(s->pid >= 0);
    if (s->pid == 0) {
        dup2(lfd, 2);
        int dn = open("/dev/null", O_RDWR);
        dup2(dn, 0);
        dup2(dn, 1);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(lfd);
    live_add(s);
    /* the port, then /health 200 */
    s->port = 0;
    double t_end = now_s() + 120;
    while (now_s() < t_end) {
        if (!s->port) {
            FILE *f = fopen(s->log, "r");
            char line[1024];
            while (f && fgets(line, sizeof line, f)) {
                const char *p = strstr(line, "listening on http://127.0.0.1:");
                if (p) s->port = atoi(p + strlen("listening on http://127.0.0.1:"));
            }
            if (f) fclose(f);
        }
        int st;
        if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
            live_remove(s->pid);
            char cmd[300];
            snprintf(cmd, sizeof cmd, "cat %s >&2", s->log);
            if (system(cmd)) {}
            unlink(s->log);
            fail_msg("vt serve exited before it was ready (status %d)", st);
        }
        if (s->port) {
            response r;
            if (http(s->port, "GET", "/health", NULL, NULL, &r) == 0) {
                int ok = r.status == 200;
                if (!ok) assert_int_equal(r.status, 503); /* loading */
                free(r.body);
                if (ok) return;
            }
        }
        usleep(20000);
    }
    fail_msg("vt serve did not become ready in 120 s (log %s)", s->log);
}

/* SIGTERM and wait; returns the exit status (or 128 + signal). */
int server_stop(server *s)
{
    kill(s->pid, SIGTERM);
    return server_wait(s);
}

int server_wait(server *s)
{
    int st = 0;
    char cmd[300];
    double t_end = now_s() + 30;
    while (waitpid(s->pid, &st, WNOHANG) == 0) {
        if (now_s() > t_end) {
            kill(s->pid, SIGKILL);
            waitpid(s->pid, &st, 0);
            live_remove(s->pid);
            snprintf(cmd, sizeof cmd, "tail -30 %s >&2", s->log);
            if (system(cmd)) {}
            unlink(s->log);
            fail_msg("vt serve did not exit within 30 s of SIGTERM");
        }
        usleep(10000);
    }
    live_remove(s->pid);
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (rc != 0) {
        snprintf(cmd, sizeof cmd, "tail -30 %s >&2", s->log);
        if (system(cmd)) {}
    }
    unlink(s->log);
    return rc;
}

int server_up(const server *s)
{
    response r;
    if (http(s->port, "GET", "/health", NULL, NULL, &r) != 0) return 0;
    int ok = r.status == 200;
    free(r.body);
    return ok;
}


long metric(int port, const char *name)
{
    response r;
    assert_int_equal(http(port, "GET", "/metrics", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *p = strstr(r.body, key);
    if (!p) fail_msg("/metrics has no %s", name);
    long v = atol(p + strlen(key));
    free(r.body);
    return v;
}

int read_until(int fd, const char *needle, double timeout_s)
{
    char buf[8192];
    size_t n = 0;
    const double t0 = now_s();
    while (now_s() - t0 < timeout_s) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0) continue;
        if (n == sizeof buf - 1) { /* keep the tail: the needle may straddle */
            const size_t keep = strlen(needle);
            memmove(buf, buf + n - keep, keep);
            n = keep;
        }
        ssize_t k = recv(fd, buf + n, sizeof buf - 1 - n, 0);
        if (k <= 0) return -1;
        n += (size_t)k;
        buf[n] = 0;
        if (strstr(buf, needle)) return 0;
    }
    return -1;
}
