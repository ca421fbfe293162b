/*
 * cmd_logits.c - vt logits: the logits of every position of a token list, to a file.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "engine.h"
#include "error.h"

static int parse_token_list(const char *s, int32_t **out, int64_t *n)
{
    int64_t cap = 16, k = 0;
    int32_t *v = malloc((size_t)cap * sizeof *v);
    if (!v) return -1;
    const char *p = s;
    while (*p) {
        while (*p == ',' || *p == ' ') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (errno || end == p || x < 0 || x > INT32_MAX) {
            fprintf(stderr, "vt logits: bad token id near '%.20s'\n", p);
            free(v);
            return -1;
        }
        if (k == cap) {
            int32_t *nv = realloc(v, (size_t)(cap *= 2) * sizeof *v);
            if (!nv) {
                free(v);
                return -1;
            }
            v = nv;
        }
        v[k++] = (int32_t)x;
        p = end;
    }
    *out = v;
    *n = k;
    return 0;
}

static int logits_main(const opts *o)
{
    if (!o->model || !o->tokens || !o->output) {
        fprintf(stderr, "vt logits: -m MODEL, --tokens LIST and -o FILE are required\n");
        return 2;
    }
    int32_t *toks;
    int64_t n;
    if (parse_token_list(o->tokens, &toks, &n)) return 2;
    if (n == 0) {
        fprintf(stderr, "vt logits: --tokens is empty\n");
        free(toks);
        return 2;
    }
    vt_engine *e;
    if (cli_open_engine(o, &e) != VT_OK) {
        free(toks);
        return cli_fail("logits");
    }
    vt_model_info info;
    vt_engine_model_info(e, &info);
    int rc = 1;
    float *logits = malloc((size_t)n * (size_t)info.n_vocab * sizeof *logits);
    if (!logits) {
        vt_set_error("out of memory for %lld x %lld logits", (long long)n, (long long)info.n_vocab);
    } else if (vt_engine_eval(e, toks, n, logits, 1) == VT_OK) {
        FILE *f = fopen(o->output, "wb");
        if (!f) {
            vt_set_error("cannot create %s: %s", o->output, strerror(errno));
        } else {
            size_t cnt = (size_t)n * (size_t)info.n_vocab;
            if (fwrite(logits, sizeof *logits, cnt, f) != cnt || fclose(f) != 0)
                vt_set_error("write %s failed: %s", o->output, strerror(errno));
            else
                rc = 0;
        }
    }
    if (rc) cli_fail("logits");
    free(logits);
    free(toks);
    vt_engine_close(e);
    return rc;
}

static const cli_opt_use logits_options[] = {
    CLI_ENGINE_OPTIONS,
    {'o', NULL, "the file to write the logits to"}, {O_TOKENS, NULL, NULL}, {0, NULL, NULL}};

const cli_command cli_cmd_logits = {
    "logits", logits_main, "-m MODEL --tokens 1,2,3 -o FILE [options]",
    "write the logits of every position to a file",
    "Evaluates the token ids and writes the logits of every position as little-endian float32\n[n_tokens][n_vocab] to FILE.\n",
    logits_options};
