/*
 * serve_http.h - vt serve's HTTP side (libmicrohttpd, one thread per
 * connection): routing, the API key, body limits, SSE responses, and noticing
 * a client that went away.
 *
 * Endpoints: POST /v1/chat/completions, /v1/completions, /tokenize,
 * /detokenize; GET /v1/models, /health, /metrics. /health answers 503 until
 * vt_serve_http_set_ready gives it a scheduler.
 */
#ifndef VT_SERVE_HTTP_H
#define VT_SERVE_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "serve_sched.h"

typedef struct vt_serve_http vt_serve_http;

typedef struct vt_serve_http_params {
    const char *host;       /* address to bind (NULL: 127.0.0.1) */
    uint16_t port;          /* 0: any free port (see *bound_port) */
    const char *api_key;    /* NULL: none; else "Authorization: Bearer KEY" on all but /health */
    size_t max_body;        /* bytes; a larger body is 413 */
    unsigned timeout_s;     /* an idle connection (headers or body not arriving) is closed */
    unsigned max_conns;     /* connections at once */
    const char *model_id;   /* for /v1/models while loading */
    const char *cors_origin; /* NULL: every request with an Origin header is refused (403);
                                "*" or an origin ("https://app.example"): that one is
                                allowed, answered with CORS headers, preflights included */
} vt_serve_http_params;

/* Listen. NULL on error (vt_last_error: the address and why). */
vt_serve_http *vt_serve_http_start(const vt_serve_http_params *p, uint16_t *bound_port);
/* The model is loaded: requests go to s from now on. */
void vt_serve_http_set_ready(vt_serve_http *h, vt_serve_sched *s);
/* Stop accepting new connections (open ones go on). */
void vt_serve_http_quiesce(vt_serve_http *h);
/* Close everything (after the scheduler stopped, so that every open stream
 * has ended). */
void vt_serve_http_stop(vt_serve_http *h);

/* Whether a and b are equal, in time that depends only on their lengths. */
int vt_serve_key_equal(const char *a, const char *b);

#endif
