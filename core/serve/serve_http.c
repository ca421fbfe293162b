/*
 * serve_http.c - vt serve's HTTP endpoints on libmicrohttpd (serve_http.h).
 */

#include "serve_http.h"
#include "serve_ollama.h"
#include "serve_json.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "error.h"
#include "tokenizer.h"

struct vt_serve_http {
    struct MHD_Daemon *d;
    vt_serve_http_params p;
    char *api_key;
    char *cors_origin; /* --cors-origin (NULL: none) */
    char *host;        /* the bind address as given (a Host name it answers to) */
    char model_id[256];
    _Atomic(vt_serve_sched *) sched;
    atomic_int stopping;
    atomic_int in_flight; /* completions not yet answered in full (streams until freed) */
    atomic_size_t buffered; /* bytes of request bodies held, all connections together */
    atomic_int tokenizing;  /* /tokenize answers being made or sent */
    struct sockaddr_storage addr;
};

/* Request bodies held in memory, every connection together (beyond: 503). */
#define VT_SERVE_BUFFERED_MAX ((size_t)64 << 20)

/* What one request accumulates across the access handler's calls. */
typedef struct req_ctx {
    char *body;
    size_t n, cap;
    int too_large;
} req_ctx;

static void body_release(vt_serve_http *h, req_ctx *rc);

/* The body is parsed: its bytes leave the bound of held bodies now, not when
 * the (possibly long) answer ends. */
static void body_release(vt_serve_http *h, req_ctx *rc)
{
    atomic_fetch_sub(&h->buffered, rc->cap);
    free(rc->body);
    rc->body = NULL;
    rc->n = rc->cap = 0;
}

/* A streaming response's state (the content reader's). */
typedef struct stream_ctx {
    vt_serve_http *h;
    vt_serve_job *job;
    int fd;
    int ended;
} stream_ctx;

int vt_serve_key_equal(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    unsigned char diff = (unsigned char)(na != nb);
    /* compare over b's length (the secret's), a's bytes wrapped */
    for (size_t i = 0; i < nb; i++) diff |= (unsigned char)(b[i] ^ (na ? a[i % na] : 0));
    return diff == 0;
}

/* The request's Authorization header carries the key: the scheme "Bearer"
 * in any case (RFC 7235: case-insensitive), one or more spaces, the key. */
static int key_ok(struct MHD_Connection *c, const char *key)
{
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!auth || strncasecmp(auth, "Bearer", 6) || auth[6] != ' ') return 0;
    const char *k = auth + 6;
    while (*k == ' ') k++;
    return vt_serve_key_equal(k, key);
}

/* Header counts a request is refused for (ambiguous framing: request
 * smuggling through a proxy that reads it the other way). */
typedef struct hdr_scan {
    int n_length;     /* Content-Length headers */
    int length_differ; /* two of them with different values */
    const char *length;
    int chunked;      /* a Transfer-Encoding header */
} hdr_scan;

static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value)
{
    (void)kind;
    hdr_scan *h = cls;
    if (!strcasecmp(key, "Content-Length")) {
        if (h->n_length++ && (!h->length || !value || strcmp(h->length, value))) h->length_differ = 1;
        h->length = value;
    } else if (!strcasecmp(key, "Transfer-Encoding")) {
        h->chunked = 1;
    }
    return MHD_YES;
}

/* The method as ASCII for a message (a raw byte sequence would make the
 * JSON error body invalid): printable ASCII kept, anything else '?', at most
 * 31 characters. */
static void safe_ascii(const char *in, char *out, size_t cap)
{
    size_t o = 0;
    for (const unsigned char *u = (const unsigned char *)in; *u && o + 1 < cap; u++)
        out[o++] = *u >= 0x20 && *u < 0x7f ? (char)*u : '?';
    out[o] = 0;
}

/* The Access-Control-Allow-Origin value for the request this thread is
 * answering (MHD runs one thread per connection; set by on_request), or NULL. */
static __thread const char *tls_cors;

/* r queued with the request's CORS headers (an allowed Origin). */
static enum MHD_Result queue(struct MHD_Connection *c, unsigned status, struct MHD_Response *r)
{
    if (tls_cors) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", tls_cors);
        MHD_add_response_header(r, "Vary", "Origin");
    }
    return MHD_queue_response(c, status, r);
}

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned status, const char *ctype,
                                 char *text /* malloc-ed, taken */)
{
    if (!text) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                                  "\"param\":null,\"code\":500}}";
        struct MHD_Response *r = MHD_create_response_from_buffer(sizeof oom - 1, (void *)oom,
                                                                 MHD_RESPMEM_PERSISTENT);
        if (!r) return MHD_NO;
        MHD_add_response_header(r, "Content-Type", "application/json");
        enum MHD_Result ok = queue(c, 500, r);
        MHD_destroy_response(r);
        return ok;
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    enum MHD_Result ok = queue(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

/* o as the body, built since `mark` (vt_serve_json_failures): an object that
 * lost a member to a failed allocation is not sent; the fixed out-of-memory
 * 500 goes instead (send_text with NULL). */
static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, cJSON *o,
                                 unsigned long mark)
{
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (s && vt_serve_json_failures() != mark) {
        free(s);
        s = NULL;
    }
    return send_text(c, status, "application/json", s);
}

static enum MHD_Result send_error(struct MHD_Connection *c, const vt_serve_error *err)
{
    char *s = vt_serve_error_json(err);
    if (err->http == 401) {
        struct MHD_Response *r = s ? MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE)
                                   : NULL;
        if (!r) {
            free(s);
            return MHD_NO;
        }
        MHD_add_response_header(r, "Content-Type", "application/json");
        MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
        enum MHD_Result ok = queue(c, 401, r);
        MHD_destroy_response(r);
        return ok;
    }
    return send_text(c, (unsigned)err->http, "application/json", s);
}

/* Whether the client went away: the connection reset or closed, or its read
 * side at end of file. A client that half-closes after its request is taken
 * as gone too: a stream has nothing to write while its request waits in the
 * queue or in prefill, so a clean close (FIN) is all there is to see then
 * (issue 43 item 4), and no HTTP client keeps reading after shutting down its
 * write side. */
static int client_gone(int fd)
{
    if (fd < 0) return 0;
    struct pollfd pfd = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&pfd, 1, 0) <= 0) return 0;
    if (pfd.revents & (POLLHUP | POLLERR | POLLNVAL | POLLRDHUP)) return 1;
    if (pfd.revents & POLLIN) {
        char b;
        ssize_t k = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        return k == 0;
    }
    return 0;
}

static int conn_fd(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    stream_ctx *sc = cls;
    for (;;) {
        long r = vt_serve_job_read(sc->job, buf, max, 100, NULL);
        if (r > 0) return (ssize_t)r;
        if (r < 0) {
            sc->ended = 1;
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        if (client_gone(sc->fd)) {
            vt_serve_job_cancel(sc->job);
            sc->ended = 1;
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

static void stream_free(void *cls)
{
    stream_ctx *sc = cls;
    if (!sc->ended) vt_serve_job_cancel(sc->job); /* the connection closed early */
    vt_serve_job_release(sc->job);
    atomic_fetch_sub(&sc->h->in_flight, 1);
    free(sc);
}

/* POST /apply-template: {"prompt": the chat request rendered} */
static enum MHD_Result do_apply_template(vt_serve_http *h, vt_serve_sched *s,
                                         struct MHD_Connection *c, req_ctx *rc)
{
    vt_serve_request req;
    vt_serve_error err;
    int parsed = vt_serve_parse_request(VT_SERVE_CHAT, rc->body, rc->n, &req, &err);
    body_release(h, rc);
    if (parsed != 0) return send_error(c, &err);
    char *prompt = NULL;
    int bad = vt_serve_apply_template(s, &req, &prompt, &err);
    vt_serve_request_free(&req);
    if (bad) return send_error(c, &err);
    const unsigned long mark = vt_serve_json_failures();
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "prompt", prompt);
    free(prompt);
    return send_json(c, 200, o, mark);
}

/* OpenAI's /v1/chat/completions and /v1/completions, ollama's /api/chat and /api/generate */
static enum MHD_Result do_completion(vt_serve_http *h, vt_serve_sched *s, struct MHD_Connection *c,
                                     const char *url, req_ctx *rc)
{
    vt_serve_request req;
    vt_serve_error err;
    const int ollama = !strncmp(url, "/api/", 5);
    int parsed = ollama ? vt_serve_parse_ollama(!strcmp(url, "/api/generate"), rc->body, rc->n, &req, &err)
                        : vt_serve_parse_request(strstr(url, "chat/") ? VT_SERVE_CHAT : VT_SERVE_COMPLETION,
                                                 rc->body, rc->n, &req, &err);
    body_release(h, rc);
    if (parsed != 0) return send_error(c, &err);
    vt_serve_job *job;
    if (vt_serve_submit(s, &req, &job, &err) != 0) {
        vt_serve_request_free(&req);
        return send_error(c, &err);
    }
    int fd = conn_fd(c);
    atomic_fetch_add(&h->in_flight, 1);
    if (vt_serve_job_streams(job)) {
        stream_ctx *sc = calloc(1, sizeof *sc);
        if (!sc) {
            vt_serve_job_cancel(job);
            vt_serve_job_release(job);
            atomic_fetch_sub(&h->in_flight, 1);
            return send_text(c, 500, "application/json", NULL);
        }
        *sc = (stream_ctx){.h = h, .job = job, .fd = fd};
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384,
                                                                   stream_read, sc, stream_free);
        if (!r) {
            stream_free(sc);
            return MHD_NO;
        }
        MHD_add_response_header(r, "Content-Type", ollama ? "application/x-ndjson" : "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        enum MHD_Result ok = queue(c, 200, r);
        MHD_destroy_response(r);
        return ok;
    }
    /* not streaming: wait for the whole body, watching the client */
    char *body = NULL;
    size_t n = 0, cap = 0;
    int http = 0;
    char buf[16384];
    for (;;) {
        long r = vt_serve_job_read(job, buf, sizeof buf, 100, &http);
        if (r < 0) break;
        if (r == 0) {
            if (client_gone(fd)) {
                vt_serve_job_cancel(job);
                vt_serve_job_release(job);
                atomic_fetch_sub(&h->in_flight, 1);
                free(body);
                return MHD_NO;
            }
            continue;
        }
        if (n + (size_t)r + 1 > cap) {
            size_t nc = cap ? cap * 2 : 32768;
            while (nc < n + (size_t)r + 1) nc *= 2;
            char *q = realloc(body, nc);
            if (!q) {
                vt_serve_job_cancel(job);
                vt_serve_job_release(job);
                atomic_fetch_sub(&h->in_flight, 1);
                free(body);
                return send_text(c, 500, "application/json", NULL);
            }
            body = q;
            cap = nc;
        }
        memcpy(body + n, buf, (size_t)r);
        n += (size_t)r;
        body[n] = 0;
    }
    vt_serve_job_release(job);
    enum MHD_Result ok = send_text(c, http ? (unsigned)http : 500, "application/json", body);
    atomic_fetch_sub(&h->in_flight, 1);
    return ok;
}

/* /tokenize's answer written as it is sent, a token at a time, from the ids
 * (4 bytes a token, counted among the held bodies until sent): a cJSON tree
 * of a 4 MiB text's millions of tokens took ~180x its input (issue 43 item
 * 3). At most VT_SERVE_TOKENIZE_MAX tokenize at once. */
#define VT_SERVE_TOKENIZE_MAX 2
typedef struct tok_out {
    vt_serve_http *h;
    const vt_tokenizer *tok;
    int32_t *ids;
    int64_t n, i;
    int with_pieces;
    char buf[2048]; /* the JSON of the current token (or the head / tail) */
    size_t len, off;
    int stage; /* 0 head, 1 tokens, 2 tail, 3 done */
} tok_out;

/* One token's JSON into t->buf (with a leading comma after the first). */
static void tok_out_token(tok_out *t)
{
    int32_t id = t->ids[t->i];
    const char *sep = t->i ? "," : "";
    if (!t->with_pieces) {
        t->len = (size_t)snprintf(t->buf, sizeof t->buf, "%s%d", sep, id);
        return;
    }
    char piece[256];
    int64_t k = vt_token_to_piece(t->tok, id, 1, piece, sizeof piece - 1);
    if (k < 0) k = 0;
    if (k > (int64_t)sizeof piece - 1) k = sizeof piece - 1;
    piece[k] = 0;
    size_t o = (size_t)snprintf(t->buf, sizeof t->buf, "%s{\"id\":%d,\"piece\":", sep, id);
    if (vt_serve_utf8_invalid_at(piece, (size_t)k) < 0) { /* a JSON string */
        t->buf[o++] = '"';
        for (int64_t q = 0; q < k; q++) {
            unsigned char ch = (unsigned char)piece[q];
            if (ch == '"' || ch == '\\') {
                t->buf[o++] = '\\';
                t->buf[o++] = (char)ch;
            } else if (ch < 0x20) {
                const char *sh = ch == '\n' ? "\\n" : ch == '\t' ? "\\t" : ch == '\r' ? "\\r"
                               : ch == '\b' ? "\\b" : ch == '\f' ? "\\f" : NULL;
                if (sh) {
                    memcpy(t->buf + o, sh, 2);
                    o += 2;
                } else {
                    o += (size_t)snprintf(t->buf + o, sizeof t->buf - o, "\\u%04x", ch);
                }
            } else {
                t->buf[o++] = (char)ch;
            }
        }
        t->buf[o++] = '"';
    } else { /* a partial UTF-8 character: its bytes */
        t->buf[o++] = '[';
        for (int64_t q = 0; q < k; q++)
            o += (size_t)snprintf(t->buf + o, sizeof t->buf - o, "%s%u", q ? "," : "",
                                  (unsigned)(unsigned char)piece[q]);
        t->buf[o++] = ']';
    }
    t->buf[o++] = '}';
    t->len = o;
}

static ssize_t tok_out_read(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    tok_out *t = cls;
    size_t w = 0;
    while (w < max) {
        if (t->off == t->len) {
            t->off = t->len = 0;
            if (t->stage == 0) {
                t->len = (size_t)snprintf(t->buf, sizeof t->buf, "{\"tokens\":[");
                t->stage = 1;
            } else if (t->stage == 1 && t->i < t->n) {
                tok_out_token(t);
                t->i++;
            } else if (t->stage == 1) {
                t->len = (size_t)snprintf(t->buf, sizeof t->buf, "]}");
                t->stage = 2;
            } else {
                break;
            }
        }
        size_t k = t->len - t->off < max - w ? t->len - t->off : max - w;
        memcpy(out + w, t->buf + t->off, k);
        t->off += k;
        w += k;
    }
    return w ? (ssize_t)w : MHD_CONTENT_READER_END_OF_STREAM;
}

static void tok_out_free(void *cls)
{
    tok_out *t = cls;
    atomic_fetch_sub(&t->h->buffered, (size_t)t->n * sizeof *t->ids);
    free(t->ids);
    free(t);
}

static enum MHD_Result do_tokenize(vt_serve_http *h, vt_serve_sched *s, struct MHD_Connection *c,
                                   req_ctx *rc)
{
    vt_serve_tokenize_req tr;
    vt_serve_error err;
    int parsed = vt_serve_parse_tokenize(rc->body, rc->n, &tr, &err);
    body_release(h, rc);
    if (parsed != 0) return send_error(c, &err);
    if (atomic_fetch_add(&h->tokenizing, 1) >= VT_SERVE_TOKENIZE_MAX) {
        atomic_fetch_sub(&h->tokenizing, 1);
        free(tr.content);
        vt_serve_error_set(&err, 503, NULL, "%d /tokenize requests are running: try again later",
                           VT_SERVE_TOKENIZE_MAX);
        return send_error(c, &err);
    }
    tok_out *t = calloc(1, sizeof *t);
    const vt_tokenizer *tok = vt_serve_tokenizer(s);
    vt_status st = t ? vt_tokenize(tok, tr.content, strlen(tr.content), tr.add_special,
                                   tr.parse_special, &t->ids, &t->n)
                     : VT_ERR_OUT_OF_MEMORY;
    free(tr.content);
    /* the slot bounds the tokenizing; while the answer is sent (as slowly as
     * the client reads) the ids count among the bodies held instead */
    atomic_fetch_sub(&h->tokenizing, 1);
    if (st == VT_OK) {
        size_t held = atomic_fetch_add(&h->buffered, (size_t)t->n * sizeof *t->ids) +
                      (size_t)t->n * sizeof *t->ids;
        if (held > VT_SERVE_BUFFERED_MAX) {
            atomic_fetch_sub(&h->buffered, (size_t)t->n * sizeof *t->ids);
            free(t->ids);
            free(t);
            vt_serve_error_set(&err, 503, NULL, "the server holds %u MiB of requests already: "
                               "try again later", (unsigned)(VT_SERVE_BUFFERED_MAX >> 20));
            return send_error(c, &err);
        }
    }
    if (st != VT_OK) {
        vt_serve_error_set(&err, st == VT_ERR_OUT_OF_MEMORY ? 500 : 400, "content", "%s",
                           t ? vt_last_error() : "out of memory");
        if (t) free(t->ids);
        free(t);
        return send_error(c, &err);
    }
    t->h = h;
    t->tok = tok;
    t->with_pieces = tr.with_pieces;
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, tok_out_read,
                                                               t, tok_out_free);
    if (!r) {
        tok_out_free(t);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result ok = queue(c, 200, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result do_detokenize(vt_serve_http *h, vt_serve_sched *s, struct MHD_Connection *c,
                                     req_ctx *rc)
{
    int32_t *ids;
    size_t n;
    vt_serve_error err;
    int parsed = vt_serve_parse_detokenize(rc->body, rc->n, vt_serve_n_vocab(s), &ids, &n, &err);
    body_release(h, rc);
    if (parsed != 0)
        return send_error(c, &err);
    vt_detok_stream *ds = vt_detok_stream_new(vt_serve_tokenizer(s), 1);
    char *text = NULL;
    size_t tn = 0, cap = 0;
    int oom = !ds;
    for (size_t i = 0; i <= n && !oom; i++) {
        size_t k;
        const char *p = i < n ? vt_detok_stream_push(ds, ids[i], &k) : vt_detok_stream_flush(ds, &k);
        if (tn + k + 1 > cap) {
            size_t nc = cap ? cap * 2 : 256;
            while (nc < tn + k + 1) nc *= 2;
            char *q = realloc(text, nc);
            if (!q) {
                oom = 1;
                break;
            }
            text = q;
            cap = nc;
        }
        memcpy(text + tn, p, k);
        tn += k;
        text[tn] = 0;
    }
    vt_detok_stream_free(ds);
    free(ids);
    if (oom) {
        free(text);
        return send_text(c, 500, "application/json", NULL);
    }
    /* bytes that are not UTF-8 (a cut character) become U+FFFD in JSON */
    const unsigned long mark = vt_serve_json_failures();
    cJSON *o = cJSON_CreateObject();
    char *safe = malloc(tn * 3 + 1);
    size_t so = 0;
    if (safe) {
        for (size_t i = 0; i < tn;) {
            int64_t bad = vt_serve_utf8_invalid_at(text + i, tn - i);
            size_t good = bad < 0 ? tn - i : (size_t)bad;
            memcpy(safe + so, text + i, good);
            so += good;
            i += good;
            if (bad >= 0) {
                memcpy(safe + so, "\xEF\xBF\xBD", 3);
                so += 3;
                i++;
            }
        }
        safe[so] = 0;
    }
    cJSON_AddStringToObject(o, "content", safe ? safe : "");
    free(safe);
    free(text);
    return send_json(c, 200, o, mark);
}

static enum MHD_Result route(vt_serve_http *h, struct MHD_Connection *c, const char *url,
                             const char *method, req_ctx *rc)
{
    vt_serve_error err;
    const int get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    vt_serve_sched *s = atomic_load(&h->sched);
    if (!strcmp(url, "/health") || !strcmp(url, "/v1/health")) {
        if (!get) goto bad_method;
        if (!s) {
            vt_serve_error_set(&err, 503, NULL, "the model is loading");
            return send_error(c, &err);
        }
        const unsigned long mark = vt_serve_json_failures();
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "status", "ok");
        return send_json(c, 200, o, mark);
    }
    if (h->api_key && !key_ok(c, h->api_key)) {
        vt_serve_error_set(&err, 401, NULL,
                           MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization")
                               ? "invalid API key"
                               : "an API key is required (Authorization: Bearer KEY)");
        return send_error(c, &err);
    }
    int known = !strcmp(url, "/v1/models") || !strcmp(url, "/models") ||
                !strcmp(url, "/metrics") || !strcmp(url, "/v1/chat/completions") ||
                !strcmp(url, "/chat/completions") || !strcmp(url, "/v1/completions") ||
                !strcmp(url, "/completions") || !strcmp(url, "/tokenize") ||
                !strcmp(url, "/detokenize") || !strcmp(url, "/apply-template") ||
                !strcmp(url, "/props") || !strcmp(url, "/api/chat") || !strcmp(url, "/api/generate") ||
                !strcmp(url, "/api/tags") || !strcmp(url, "/api/version");
    if (!known) {
        char safe[256], m[32];
        safe_ascii(url, safe, sizeof safe); /* ASCII only: the JSON stays UTF-8 */
        safe_ascii(method, m, sizeof m);
        vt_serve_error_set(&err, 404, NULL, "no endpoint %s %s", m, safe);
        return send_error(c, &err);
    }
    if (!strcmp(url, "/v1/models") || !strcmp(url, "/models")) {
        if (!get) goto bad_method;
        const unsigned long mark = vt_serve_json_failures();
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "object", "list");
        cJSON *m = cJSON_CreateObject();
        if (!cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), m)) {
            cJSON_Delete(m);
            m = NULL; /* the body is incomplete: send_json answers 500 */
        }
        cJSON_AddStringToObject(m, "id", h->model_id);
        cJSON_AddStringToObject(m, "object", "model");
        cJSON_AddNumberToObject(m, "created", 0);
        cJSON_AddStringToObject(m, "owned_by", "vt");
        if (s) cJSON_AddNumberToObject(m, "context_length", vt_serve_n_ctx(s));
        return send_json(c, 200, o, mark);
    }
    if (!strcmp(url, "/api/tags") || !strcmp(url, "/api/version")) { /* ollama's */
        if (!get) goto bad_method;
        const unsigned long mark = vt_serve_json_failures();
        return send_json(c, 200, vt_serve_ollama_info_json(url[5] == 'v', h->model_id), mark);
    }
    if (!s) {
        vt_serve_error_set(&err, 503, NULL, "the model is loading");
        return send_error(c, &err);
    }
    if (!strcmp(url, "/props")) {
        if (!get) goto bad_method;
        const unsigned long mark = vt_serve_json_failures();
        return send_json(c, 200, vt_serve_props_json(s), mark);
    }
    if (!strcmp(url, "/metrics")) {
        if (!get) goto bad_method;
        return send_text(c, 200, "text/plain; version=0.0.4", vt_serve_metrics_text(s));
    }
    if (!post) goto bad_method;
    if (rc->too_large == 3) {
        vt_serve_error_set(&err, 503, NULL, "the server holds %u MiB of request bodies already "
                           "(every connection together): try again later",
                           (unsigned)(VT_SERVE_BUFFERED_MAX >> 20));
        return send_error(c, &err);
    }
    if (rc->too_large) {
        vt_serve_error_set(&err, 413, NULL, "the request body is larger than %zu bytes", h->p.max_body);
        return send_error(c, &err);
    }
    if (!strcmp(url, "/tokenize")) return do_tokenize(h, s, c, rc);
    if (!strcmp(url, "/detokenize")) return do_detokenize(h, s, c, rc);
    if (!strcmp(url, "/apply-template")) return do_apply_template(h, s, c, rc);
    return do_completion(h, s, c, url, rc);
bad_method: {
    char m[32];
    safe_ascii(method, m, sizeof m);
    vt_serve_error_set(&err, 405, NULL, "%s does not take %s", url, m);
    return send_error(c, &err);
}
}

/* Whether a Host header names this server: an IP literal (v4, or v6 in
 * brackets), "localhost", or the --host value, each with an optional port.
 * Any other name is what a DNS-rebinding page sends (its own domain, now
 * resolving here). */
static int host_ok(const vt_serve_http *h, const char *host)
{
    if (!host || !*host) return 0;
    char name[256];
    size_t n = strlen(host);
    if (n >= sizeof name) return 0;
    memcpy(name, host, n + 1);
    if (name[0] == '[') { /* [v6]:port */
        char *e = strchr(name, ']');
        if (!e || (e[1] && e[1] != ':')) return 0;
        *e = 0;
        struct in6_addr a6;
        return inet_pton(AF_INET6, name + 1, &a6) == 1 ||
               (h->host && !strcasecmp(name + 1, h->host));
    }
    char *colon = strrchr(name, ':');
    if (colon) *colon = 0;
    struct in_addr a4;
    if (inet_pton(AF_INET, name, &a4) == 1 || !strcasecmp(name, "localhost")) return 1;
    return h->host && !strcasecmp(name, h->host);
}

/* The Content-Type is JSON: application/json, parameters allowed. */
static int json_type(const char *ct)
{
    if (!ct) return 0;
    while (*ct == ' ') ct++;
    if (strncasecmp(ct, "application/json", 16)) return 0;
    return !ct[16] || ct[16] == ';' || ct[16] == ' ';
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    (void)version;
    vt_serve_http *h = cls;
    req_ctx *rc = *con_cls;
    /* an Origin header (a web page's request) is answered only where
     * --cors-origin allows it, with the CORS headers */
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    tls_cors = origin && h->cors_origin && (!strcmp(h->cors_origin, "*") || !strcmp(h->cors_origin, origin))
                   ? h->cors_origin
                   : NULL;
    if (!rc) {
        if (!(rc = calloc(1, sizeof *rc))) return MHD_NO;
        *con_cls = rc;
        /* answered from the headers, before any of the body is read (the
         * connection closes after): ambiguous framing, an encoded NUL in the
         * path, a missing or wrong API key */
        vt_serve_error early;
        early.http = 0;
        hdr_scan hs = {0};
        MHD_get_connection_values(c, MHD_HEADER_KIND, scan_header, &hs);
        if (hs.length_differ)
            vt_serve_error_set(&early, 400, NULL, "the request has two different Content-Length "
                               "headers: refused");
        else if (hs.n_length && hs.chunked)
            vt_serve_error_set(&early, 400, NULL, "the request has both Content-Length and "
                               "Transfer-Encoding: refused");
        else if (strstr(url, "%00"))
            vt_serve_error_set(&early, 400, NULL, "the path holds an encoded NUL byte (%%00)");
        else if (origin && !tls_cors)
            vt_serve_error_set(&early, 403, NULL, "a request from a web page (Origin) is refused: "
                               "start the server with --cors-origin to allow one");
        else if (!h->api_key && strcmp(url, "/health") && strcmp(url, "/v1/health") &&
                 !host_ok(h, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host")))
            vt_serve_error_set(&early, 403, NULL, "the Host header does not name this server: "
                               "without --api-key only its address, localhost or the --host "
                               "name are answered");
        else if (!h->api_key && !strcmp(method, "POST") &&
                 !json_type(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type")))
            vt_serve_error_set(&early, 415, NULL, "the body must be sent as Content-Type: "
                               "application/json");
        else if (h->api_key && strcmp(url, "/health") && strcmp(url, "/v1/health") &&
                 !(tls_cors && !strcmp(method, "OPTIONS")) /* a preflight carries no key */ &&
                 !key_ok(c, h->api_key))
            vt_serve_error_set(&early, 401, NULL,
                               MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization")
                                   ? "invalid API key"
                                   : "an API key is required (Authorization: Bearer KEY)");
        if (!early.http && tls_cors && !strcmp(method, "OPTIONS")) { /* a preflight */
            rc->too_large = 2;
            struct MHD_Response *r =
                MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
            if (!r) return MHD_NO;
            MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
            MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type");
            MHD_add_response_header(r, "Access-Control-Max-Age", "600");
            enum MHD_Result ok = queue(c, 204, r);
            MHD_destroy_response(r);
            return ok;
        }
        if (early.http) {
            rc->too_large = 2;
            return send_error(c, &early);
        }
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl) {
            char *end;
            unsigned long long v = strtoull(cl, &end, 10);
            if (*end || v > h->p.max_body) {
                /* answered before the body is read; the connection closes after */
                vt_serve_error err;
                vt_serve_error_set(&err, 413, NULL, "the request body is larger than %zu bytes",
                                   h->p.max_body);
                rc->too_large = 2;
                return send_error(c, &err);
            }
        }
        return MHD_YES;
    }
    if (rc->too_large == 2) {
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!rc->too_large) {
            if (rc->n + *upload_size > h->p.max_body) {
                rc->too_large = 1;
                atomic_fetch_sub(&h->buffered, rc->cap);
                free(rc->body);
                rc->body = NULL;
                rc->n = rc->cap = 0;
            } else {
                if (rc->n + *upload_size + 1 > rc->cap) {
                    size_t nc = rc->cap ? rc->cap : 4096;
                    while (nc < rc->n + *upload_size + 1) nc *= 2;
                    if (nc > h->p.max_body + 1) nc = h->p.max_body + 1; /* n + upload fits */
                    /* every connection's bodies together stay under the bound:
                     * slow bodies cannot take the memory */
                    size_t held = atomic_fetch_add(&h->buffered, nc - rc->cap) + (nc - rc->cap);
                    if (held > VT_SERVE_BUFFERED_MAX) {
                        atomic_fetch_sub(&h->buffered, nc);
                        free(rc->body);
                        rc->body = NULL;
                        rc->n = rc->cap = 0;
                        rc->too_large = 3;
                        *upload_size = 0;
                        return MHD_YES;
                    }
                    char *q = realloc(rc->body, nc);
                    if (!q) {
                        atomic_fetch_sub(&h->buffered, nc - rc->cap);
                        return MHD_NO;
                    }
                    rc->body = q;
                    rc->cap = nc;
                }
                memcpy(rc->body + rc->n, upload, *upload_size);
                rc->n += *upload_size;
                rc->body[rc->n] = 0;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    return route(h, c, url, method, rc);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)c, (void)toe;
    req_ctx *rc = *con_cls;
    if (!rc) return;
    vt_serve_http *h = cls;
    atomic_fetch_sub(&h->buffered, rc->cap);
    free(rc->body);
    free(rc);
    *con_cls = NULL;
}

/* The path's %XX escapes decoded in place, except %00, which stays as the
 * three characters (a decoded NUL would cut the path short: /metrics%00.txt
 * read as /metrics); the request is then refused naming it. Returns the new
 * length. */
static size_t unescape_path(void *cls, struct MHD_Connection *c, char *uri)
{
    (void)cls, (void)c;
    char *w = uri;
    for (const char *r = uri; *r;) {
        if (r[0] == '%' && isxdigit((unsigned char)r[1]) && isxdigit((unsigned char)r[2])) {
            char hex[3] = {r[1], r[2], 0};
            unsigned v = (unsigned)strtoul(hex, NULL, 16);
            if (v) {
                *w++ = (char)v;
                r += 3;
                continue;
            }
        }
        *w++ = *r++;
    }
    *w = 0;
    return (size_t)(w - uri);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n') msg[--n] = 0;
    vt_log(VT_LOG_DEBUG, "vt serve (http): %s", msg);
}

vt_serve_http *vt_serve_http_start(const vt_serve_http_params *p, uint16_t *bound_port)
{
    vt_serve_json_init(); /* before any response is built (serve_json.h) */
    vt_serve_http *h = calloc(1, sizeof *h);
    if (!h) {
        vt_set_error("out of memory for the HTTP server");
        return NULL;
    }
    h->p = *p;
    if (p->api_key && !(h->api_key = strdup(p->api_key))) {
        free(h);
        vt_set_error("out of memory for the HTTP server");
        return NULL;
    }
    snprintf(h->model_id, sizeof h->model_id, "%s", p->model_id ? p->model_id : "vt");
    const char *host = p->host ? p->host : "127.0.0.1";
    if ((p->cors_origin && !(h->cors_origin = strdup(p->cors_origin))) || !(h->host = strdup(host))) {
        free(h->cors_origin);
        free(h->api_key);
        free(h);
        vt_set_error("out of memory for the HTTP server");
        return NULL;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV}, *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%u", p->port);
    int gai = getaddrinfo(host, port, &hints, &ai);
    if (gai != 0 || !ai) {
        vt_set_error("--host %s: %s", host, gai_strerror(gai));
        free(h->api_key);
        free(h->cors_origin);
        free(h->host);
        free(h);
        return NULL;
    }
    memcpy(&h->addr, ai->ai_addr, ai->ai_addrlen);
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG | MHD_USE_POLL;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    freeaddrinfo(ai);
    h->d = MHD_start_daemon(flags, p->port, NULL, NULL, on_request, h,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&h->addr,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)p->timeout_s,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned int)p->max_conns,
                            /* one client address cannot take every connection */
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned int)(p->max_conns / 4 ? p->max_conns / 4 : 1),
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                            MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, h,
                            MHD_OPTION_UNESCAPE_CALLBACK, unescape_path, h,
                            MHD_OPTION_END);
    /* no SO_REUSEPORT (MHD_OPTION_LISTENING_ADDRESS_REUSE): with it a second
     * server bound the same port and the kernel split the requests between
     * two models; MHD's default SO_REUSEADDR only lets a restart take a port
     * whose old connections linger */
    if (!h->d) {
        int in_use = 0;
        int fd = socket(h->addr.ss_family, SOCK_STREAM, 0);
        if (fd >= 0) {
            int one = 1;
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
            socklen_t al = h->addr.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                         : sizeof(struct sockaddr_in);
            in_use = bind(fd, (struct sockaddr *)&h->addr, al) != 0 && errno == EADDRINUSE;
            close(fd);
        }
        if (in_use)
            vt_set_error("port %u on %s is already in use (another vt serve, or another program, "
                         "listens there): choose another --port", p->port, host);
        else
            vt_set_error("cannot listen on %s port %u (not an address of this machine, or no "
                         "permission)", host, p->port);
        free(h->api_key);
        free(h->cors_origin);
        free(h->host);
        free(h);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    if (bound_port) *bound_port = di ? di->port : p->port;
    return h;
}

void vt_serve_http_set_ready(vt_serve_http *h, vt_serve_sched *s) { atomic_store(&h->sched, s); }

void vt_serve_http_quiesce(vt_serve_http *h)
{
    MHD_socket fd = MHD_quiesce_daemon(h->d);
    if (fd != MHD_INVALID_SOCKET) close(fd);
}

void vt_serve_http_stop(vt_serve_http *h)
{
    if (!h) return;
    /* let every answer that was being written finish (each ended by the
     * scheduler's stop), at most 10 s, before the connections are closed */
    for (int i = 0; i < 1000 && atomic_load(&h->in_flight) > 0; i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    MHD_stop_daemon(h->d);
    free(h->api_key);
    free(h->cors_origin);
    free(h->host);
    free(h);
}
