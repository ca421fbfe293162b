/*
 * cmd_fit.c - vt fit: the fit check, what goes where and whether it fits.
 */
#include <stdio.h>

#include "cli.h"
#include "engine.h"
#include "residency.h"

static int fit_main(const opts *o)
{
    if (!o->model) {
        fprintf(stderr, "vt fit: -m MODEL is required\n");
        return 2;
    }
    /* the engine's own sequence up to the plan: what vt run would place */
    vt_engine *e = NULL;
    vt_status st = cli_open_engine_plan(o, &e);
    if (!e) return cli_fail("fit");
    vt_residency_print(vt_engine_residency(e), o->model, vt_engine_n_ctx(e), stdout);
    int rc = st == VT_OK && vt_engine_residency(e)->fit.fits ? 0 : 1;
    vt_engine_close(e);
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
