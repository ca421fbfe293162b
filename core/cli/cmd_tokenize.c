/*
 * cmd_tokenize.c - vt tokenize: the token ids of a text.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "error.h"
#include "tokenizer.h"
#include "vt/gguf.h"

static int tokenize_main(const opts *o)
{
    if (!o->model || !o->prompt) {
        fprintf(stderr, "vt tokenize: -m MODEL and -p TEXT are required\n");
        return 2;
    }
    vt_gguf *g;
    if (vt_gguf_open(o->model, VT_GGUF_NO_MMAP, &g) != VT_OK) return cli_fail("tokenize");
    vt_tokenizer *t;
    if (vt_tokenizer_load(g, &t) != VT_OK) {
        vt_error_prefix("%s", o->model);
        vt_gguf_close(g);
        return cli_fail("tokenize");
    }
    int32_t *ids;
    int64_t n;
    int rc = 0;
    if (vt_tokenize(t, o->prompt, strlen(o->prompt), 1, !o->no_special, &ids, &n) != VT_OK) {
        rc = cli_fail("tokenize");
    } else {
        for (int64_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
        free(ids);
    }
    vt_tokenizer_free(t);
    vt_gguf_close(g);
    return rc;
}

static const cli_opt_use tokenize_options[] = {
    {'m', NULL, NULL}, {'p', "TEXT", "the text to tokenize"}, {O_NO_SPECIAL, NULL, NULL}, {0, NULL, NULL}};

const cli_command cli_cmd_tokenize = {
    "tokenize", tokenize_main, "-m MODEL -p TEXT [--no-special]",
    "print the token ids of a text",
    "Prints the token ids of TEXT (special tokens written in the text are recognized unless\n--no-special).\n",
    tokenize_options};
