/*
 * cmd_config.c - vt config: the resolved residency config and where each value came from.
 */
#include <stdio.h>

#include "cli.h"
#include "config.h"

static int config_main(const opts *o)
{
    static vt_config cfg;
    if (cli_load_config(o, &cfg, 0) != VT_OK) return cli_fail("config");
    printf("# residency config: %s%s\n", cfg.path[0] ? cfg.path : "(built-in defaults)",
           o->n_sets ? ", with --set overrides" : "");
    vt_config_print(&cfg, stdout);
    return 0;
}

static const cli_opt_use config_options[] = {
    {O_CONFIG, NULL, NULL}, {O_SET, NULL, NULL}, {O_DEVICE, NULL, NULL}, {O_SHOW, NULL, NULL}, {0, NULL, NULL}};

const cli_command cli_cmd_config = {
    "config", config_main, "[--show] [--config FILE] [--set KEY=VALUE]...",
    "print the resolved residency config",
    "Prints the resolved residency config, every value with where it came from (built-in\ndefault, file:line:column, or --set).\n",
    config_options};
