/*
 * serve_ollama.h - ollama's API on vt serve: POST /api/chat and
 * /api/generate bodies read into the same request an OpenAI body makes
 * (serve_request.h), so that both run and answer alike; the answers are
 * written in ollama's shape by serve_output.c (NDJSON lines when streaming,
 * ollama's default; one JSON object otherwise). GET /api/tags lists the
 * model.
 *
 * Shapes follow ollama's docs/api.md: /api/chat {model, messages, tools,
 * stream (default true), think, format, options {num_predict, temperature,
 * top_k, top_p, min_p, seed, stop}, keep_alive}; /api/generate {model,
 * prompt, system, raw, stream, think, format, options, keep_alive}: the
 * prompt as one user turn of the chat template, or as is with raw.
 * keep_alive and options.num_ctx are accepted and ignored (one model stays
 * loaded; the context is the server's --ctx); images, a format (JSON
 * output), a suffix or a context array are refused by name, as any unknown
 * field or option.
 *
 * Thread-safety: pure functions.
 */
#ifndef VT_SERVE_OLLAMA_H
#define VT_SERVE_OLLAMA_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "serve_request.h"

/* Parse the body of POST /api/chat (generate 0) or /api/generate (1) into
 * *out (req.proto says which); 0, or -1 with *err filled. */
int vt_serve_parse_ollama(int generate, const char *body, size_t len, vt_serve_request *out,
                          vt_serve_error *err);

/* GET /api/tags ({"models": [the loaded model]}) or, version set, GET
 * /api/version: a cJSON object for the caller to send and free. */
cJSON *vt_serve_ollama_info_json(int version, const char *model_id);

#endif
