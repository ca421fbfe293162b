/*
 * fuzz_serve_request.c - libFuzzer target for vt serve's request parser
 * (core/serve/serve_request.c). Built only with -DVT_FUZZ=ON
 * (tests/fuzz.cmake); run by bench/fuzz.sh; its seeds
 * (tests/fuzz/serve_request_seeds/) are replayed in every build.
 *
 * Each input is parsed as a chat request, a completion request, a /tokenize
 * body and a /detokenize body. Invariants, any violation aborts:
 *   - a refusal has an HTTP status in [400, 500] and a non-empty message,
 *     and its JSON form parses back with that message;
 *   - an accepted request satisfies every bound the parser promises
 *     (serve_request.h): sampling ranges, stop count, top_logprobs, messages;
 *   - an accepted body is valid UTF-8 (the parser refuses any other).
 */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve_ollama.h"
#include "serve_request.h"

#define CHECK(c)                                                                  \
    do {                                                                          \
        if (!(c)) {                                                               \
            fprintf(stderr, "fuzz_serve_request: check failed: %s (line %d)\n", #c, \
                    __LINE__);                                                    \
            abort();                                                              \
        }                                                                         \
    } while (0)

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    return 0;
}

static void check_error(const vt_serve_error *e)
{
    CHECK(e->http >= 400 && e->http <= 500);
    CHECK(e->message[0]);
    char *js = vt_serve_error_json(e);
    CHECK(js);
    cJSON *j = cJSON_Parse(js);
    CHECK(j);
    const cJSON *m = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "message");
    CHECK(cJSON_IsString(m) && !strcmp(m->valuestring, e->message));
    cJSON_Delete(j);
    free(js);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *body = (const char *)data;
    for (int k = VT_SERVE_CHAT; k <= VT_SERVE_COMPLETION; k++) {
        vt_serve_request r;
        vt_serve_error e;
        if (vt_serve_parse_request((vt_serve_kind)k, body, size, &r, &e) != 0) {
            check_error(&e);
            continue;
        }
        CHECK(vt_serve_utf8_invalid_at(body, size) < 0);
        CHECK(r.temperature >= 0 && r.temperature <= 2);
        CHECK(r.top_p > 0 && r.top_p <= 1);
        CHECK(r.min_p >= 0 && r.min_p <= 1);
        CHECK(r.top_k >= 0);
        CHECK(r.max_tokens == -1 || r.max_tokens >= 1);
        CHECK(r.n_stop <= VT_SERVE_MAX_STOP);
        for (size_t i = 0; i < r.n_stop; i++) CHECK(r.stop[i] && r.stop[i][0]);
        CHECK(r.top_logprobs >= 0 && r.top_logprobs <= VT_SERVE_MAX_TOP_LOGPROBS);
        if (k == VT_SERVE_CHAT) {
            CHECK(r.n_msgs >= 1 && r.n_msgs <= VT_SERVE_MAX_MESSAGES);
            for (size_t i = 0; i < r.n_msgs; i++) CHECK(r.msgs[i].role && r.msgs[i].content);
        } else {
            CHECK(r.prompt || (r.prompt_ids && r.n_prompt_ids > 0));
        }
        vt_serve_request_free(&r);
    }
    for (int g = 0; g < 2; g++) { /* ollama's /api/chat and /api/generate */
        vt_serve_request r;
        vt_serve_error e;
        if (vt_serve_parse_ollama(g, body, size, &r, &e) != 0) {
            check_error(&e);
            continue;
        }
        CHECK(r.proto == (g ? VT_SERVE_OLLAMA_GENERATE : VT_SERVE_OLLAMA_CHAT));
        CHECK(r.kind == VT_SERVE_COMPLETION ? r.prompt != NULL : r.n_msgs >= 1);
        if (r.kind == VT_SERVE_CHAT) CHECK(r.tmpl_messages != NULL);
        vt_serve_request_free(&r);
    }
    vt_serve_tokenize_req t;
    vt_serve_error e;
    if (vt_serve_parse_tokenize(body, size, &t, &e) == 0) {
        CHECK(t.content);
        free(t.content);
    } else {
        check_error(&e);
    }
    int32_t *ids;
    size_t n;
    if (vt_serve_parse_detokenize(body, size, 4096, &ids, &n, &e) == 0) {
        for (size_t i = 0; i < n; i++) CHECK(ids[i] >= 0 && ids[i] < 4096);
        free(ids);
    } else {
        check_error(&e);
    }
    return 0;
}
