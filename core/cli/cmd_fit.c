/*
 * cmd_fit.c - vt fit: the fit check, what goes where and whether it fits.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "engine.h"
#include "registry.h"
#include "residency.h"
#include "vt/gguf.h"

static int fit_main(const opts *o)
{
    if (!o->model) {
        fprintf(stderr, "vt fit: -m MODEL is required\n");
        return 2;
    }
    static vt_config cfg;
    vt_gguf *g = NULL;
    vt_registry *reg = NULL;
    vt_residency *r = calloc(1, sizeof *r);
    int rc = 1;
    if (!r) {
        fprintf(stderr, "vt fit: out of memory (%zu bytes)\n", sizeof *r);
        return 1;
    }
    const char *dirs[2] = {o->plugin_dir, NULL};
    int probe_ok;
    uint64_t mem_free, mem_total;
    if (cli_load_config(o, &cfg, 1) != VT_OK || cli_open_gguf(o, &g) != VT_OK ||
        vt_registry_open(o->plugin_dir ? dirs : NULL, &reg) != VT_OK ||
        vt_residency_select(&cfg, reg, g, o->device, r) != VT_OK ||
        vt_residency_probe(r, &probe_ok, &mem_free, &mem_total) != VT_OK) {
        rc = cli_fail("fit");
        goto out;
    }
    uint32_t n_ctx = o->ctx ? o->ctx : vt_engine_default_ctx(&cfg, r->plat, g);
    r->n_seq = (uint32_t)o->parallel;
    vt_status st = vt_residency_fit(r, g, probe_ok, mem_free, mem_total, n_ctx,
                                    o->batch ? o->batch : 512);
    if (st != VT_OK && st != VT_ERR_DOES_NOT_FIT) {
        rc = cli_fail("fit");
        goto out;
    }
    vt_residency_print(r, o->model, n_ctx, stdout);
    rc = r->fit.fits ? 0 : 1;
out:
    vt_registry_close(reg);
    vt_gguf_close(g);
    free(r);
    return rc;
}

static const cli_opt_use fit_options[] = {
    {'m', NULL, NULL}, {O_DEVICE, NULL, NULL}, {O_CTX, NULL, NULL}, {O_BATCH, NULL, NULL},
    {O_PARALLEL, NULL, "sequences served at once (vt serve --parallel): N KV caches"},
    {O_PLUGIN_DIR, NULL, NULL}, {O_CONFIG, NULL, NULL}, {O_SET, NULL, NULL},
    {O_NO_PROGRESS, NULL, NULL}, {0, NULL, NULL}};

const cli_command cli_cmd_fit = {
    "fit", fit_main, "-m MODEL [--device D] [--ctx N] [--parallel N]",
    "the fit check: what goes where, and whether it fits",
    "The fit check: dense bytes, routed-expert bytes, slot arena, staging, KV cache, state,\nscratch and headroom against the device total; a table and a verdict, exit status 1 when\nit does not fit.\n",
    fit_options};
