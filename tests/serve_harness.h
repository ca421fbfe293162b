/*
 * serve_harness.h - what the vt serve tests share (serve_harness.c): start
 * `vt serve --port 0` on g_model with its stderr in a temporary file and wait
 * for /health, stop it with SIGTERM, and a small HTTP/1.1 client over
 * loopback sockets (one request per connection, the body de-chunked).
 */
#ifndef VT_TEST_SERVE_HARNESS_H
#define VT_TEST_SERVE_HARNESS_H

#include <stddef.h>
#include <sys/types.h>

/* the model every server of the test starts on (set by the test's setup) */
extern char *g_model;

typedef struct server {
    pid_t pid;
    int port;
    char log[256];
} server;

typedef struct response {
    int status;
    char *body; /* de-chunked, NUL-terminated (free it) */
    size_t len;
} response;

/* env VT_TEST_SERVE_DEVICE (default cpu): the platform vt serve and vt run use */
const char *device(void);
double now_s(void);

/* A connected loopback socket to port, or -1. */
int connect_port(int port);
/* Every byte of p, or -1. */
int send_all(int fd, const char *p, size_t n);
/* A request with Host: 127.0.0.1, Connection: close, Content-Type:
 * application/json and Content-Length, extra_headers ("K: V\r\n"...) before
 * them. */
int send_request(int fd, const char *method, const char *path, const char *extra_headers,
                 const char *body, size_t body_len);
/* Read to EOF (bounded by timeout_s) and decode; -1 on a malformed response
 * or a timeout. */
int read_response(int fd, double timeout_s, response *r);
/* One request on a new connection; the response in *r. */
int http(int port, const char *method, const char *path, const char *headers, const char *body,
         response *r);

/* The value of counter or gauge `name` in /metrics (the test fails when
 * /metrics does not answer or lacks it). */
long metric(int port, const char *name);
/* Read from fd until what came holds needle (0), or EOF, an error or
 * timeout_s (-1). What was read is dropped. */
int read_until(int fd, const char *needle, double timeout_s);

/* vt serve -m g_model --plugin-dir ... --device device() --port 0 -t 2
 * extra..., ready (/health 200) within 120 s, or the test fails with its log. */
void server_start(server *s, const char *const *extra);
/* SIGTERM and wait (30 s, then SIGKILL and fail); the exit status or 128 + signal. */
int server_stop(server *s);
/* Wait for it to exit by itself (after a signal already sent), as server_stop. */
int server_wait(server *s);
/* /health answers 200. */
int server_up(const server *s);
/* cmocka teardown: kill and reap any server a failed test left running. */
int reap_servers(void **state);
void live_add(const server *s);
void live_remove(pid_t pid);

#endif
