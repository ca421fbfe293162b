/*
 * vt.c - main of the vt command: the table of commands, vt --help (the
 * commands and where things are), vt --version; vt <cmd> [options] parses the
 * options that command lists (cli_options.c) and runs it (cmd_<cmd>.c).
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "gguf_guard.h"
#include "vt/plugin.h"

#ifndef VT_PLUGIN_REL_DIR /* set by core/CMakeLists.txt from the install layout */
#define VT_PLUGIN_REL_DIR "../lib/vt/plugins"
#endif

static const cli_command *const commands[] = {
    &cli_cmd_run,     &cli_cmd_chat,   &cli_cmd_logits, &cli_cmd_tokenize, &cli_cmd_info,  &cli_cmd_plugins,
    &cli_cmd_config,  &cli_cmd_fit,    &cli_cmd_mkmodel,  &cli_cmd_bench, &cli_cmd_serve,
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void print_overview(FILE *f)
{
    fputs("usage: vt <command> [options]\n\ncommands:\n", f);
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-10s%s\n", commands[i]->name, commands[i]->summary);
    fputs("\n'vt <command> --help' lists the options of that command.\n"
          "\n"
          "common options:\n"
          "  -v, --verbose         log INFO (VT_LOG_LEVEL=debug for more)\n"
          "  -q, --quiet           log errors only, no progress bar\n"
          "  -h, --help            help (of the command, after one)\n"
          "  --version             the version and the plugin ABI\n"
          "\n"
          "files:\n"
          "  plugins   searched in --plugin-dir, VT_PLUGIN_PATH, then <bindir>/" VT_PLUGIN_REL_DIR "\n"
          "            (each NAME.so with its manifest NAME.ini)\n"
          "  config    <bindir>/../share/vt/residency.yaml (the default residency config)\n"
          "  SDK       <prefix>/include/vt/*.h, <libdir>/pkgconfig/vt-plugin.pc,\n"
          "            <libdir>/cmake/vt (find_package(vt)); docs/writing-a-model-plugin.md\n",
          f);
}

int main(int argc, char **argv)
{
    /* a model file truncated or overwritten in place while mapped: a message
     * naming it and exit status 1, not a bare SIGBUS (gguf_guard.h) */
    vt_gguf_sigbus_report_install();
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        print_overview(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("vt %s (plugin ABI %d.%d)\n", VT_VERSION_STRING, VT_ABI_MAJOR, VT_ABI_MINOR);
        return 0;
    }
    const cli_command *cmd = NULL;
    for (size_t i = 0; i < N_COMMANDS && !cmd; i++)
        if (!strcmp(argv[1], commands[i]->name)) cmd = commands[i];
    if (!cmd) {
        fprintf(stderr, "vt: unknown command '%s'\n", argv[1]);
        print_overview(stderr);
        return 2;
    }
    /* vt run -cnv (llama.cpp's conversation flag): vt chat */
    if (cmd == &cli_cmd_run)
        for (int i = 2; i < argc; i++)
            if (!strcmp(argv[i], "-cnv") || !strcmp(argv[i], "--conversation")) {
                memmove(argv + i, argv + i + 1, (size_t)(argc - i) * sizeof *argv);
                argc--;
                cmd = &cli_cmd_chat;
                break;
            }
    char prog[64];
    snprintf(prog, sizeof prog, "vt %s", cmd->name);
    argv[1] = prog; /* getopt's messages then read "vt run: ..." */
    opts o;
    if (cli_parse_options(cmd, argc - 1, argv + 1, &o) != 0) return 2;
    if (o.help) {
        cli_print_command_help(cmd, stdout);
        return 0;
    }
    return cmd->run(&o);
}
