/*
 * cmd_info.c - vt info: a GGUF file's metadata, tensor table and totals.
 */
#include <stdio.h>

#include "cli.h"
#include "error.h"
#include "gguf_info.h"
#include "vt/gguf.h"

static int info_main(const opts *o)
{
    if (!o->model) {
        fprintf(stderr, "vt info: -m MODEL is required\n");
        return 2;
    }
    vt_gguf *g;
    if (cli_open_gguf(o, &g) != VT_OK) return cli_fail("info");
    vt_status st = vt_gguf_print_info(g, stdout);
    vt_gguf_close(g);
    return st == VT_OK ? 0 : cli_fail("info");
}

static const cli_opt_use info_options[] = {
    {'m', NULL, NULL}, {O_NO_PROGRESS, NULL, NULL}, {0, NULL, NULL}};

const cli_command cli_cmd_info = {
    "info", info_main, "-m MODEL",
    "metadata, tensor table, totals",
    "Prints the metadata, the tensor table (name, type, shape, bytes, shard) and totals (dense\nvs routed experts, per type).\n",
    info_options};
