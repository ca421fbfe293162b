/*
 * cmd_mkmodel.c - vt mkmodel: a random-weight qwen35moe or gemma4 model of any shape.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "error.h"
#include "mkmodel.h"
#include "vt/gguf.h"

static int mkmodel_main(const opts *o)
{
    if (!o->output) {
        fprintf(stderr, "vt mkmodel: -o FILE is required\n");
        return 2;
    }
    const int gemma = o->mk_arch && !strcmp(o->mk_arch, "gemma4");
    if (o->mk_arch && !gemma && strcmp(o->mk_arch, "qwen35moe")) {
        fprintf(stderr, "vt mkmodel: --arch must be qwen35moe or gemma4, got '%s'\n", o->mk_arch);
        return 2;
    }
    vt_mkmodel_params p;
    (gemma ? vt_mkmodel_defaults_gemma4 : vt_mkmodel_defaults)(&p);
    /* mkmodel's messages already start with "mkmodel: " */
    if (o->have_seed) p.seed = o->sp.seed;
    cli_mk_apply_shape(o, &p);
    p.sparse = o->mk_sparse;
    cli_bar bar;
    const char *base = strrchr(o->output, '/');
    char label[96];
    snprintf(label, sizeof label, "vt: writing %s", base ? base + 1 : o->output);
    cli_bar_init(&bar, o, label, NULL);
    if (bar.show) {
        p.progress = cli_bar_cb;
        p.progress_user = &bar;
    }
    vt_status st = o->type ? vt_mkmodel_set_type(&p, o->type) : VT_OK;
    if (st == VT_OK) st = (gemma ? vt_mkmodel_gemma4 : vt_mkmodel_qwen35moe)(o->output, &p);
    cli_bar_end(&bar);
    if (st != VT_OK) { /* mkmodel's own messages start with "mkmodel: ", the writer's do not */
        const char *msg = vt_last_error();
        fprintf(stderr, "vt mkmodel: %s\n", strncmp(msg, "mkmodel: ", 9) ? msg : msg + 9);
        return 1;
    }
    if (o->quiet) return 0;
    char first[4200];
    if (p.n_shards > 1 &&
        vt_gguf_writer_shard_path(o->output, 0, p.n_shards, first, sizeof first) == VT_OK)
        fprintf(stderr, "wrote %s (shard 1 of %u: open this one)\n", first, p.n_shards);
    else
        fprintf(stderr, "wrote %s\n", o->output);
    return 0;
}

static const cli_opt_use mkmodel_options[] = {
    {'o', NULL, "the model file to write"}, {O_TYPE, NULL, NULL}, {O_ARCH, NULL, NULL},
    {O_SEED, NULL, "weight seed"}, {O_SPARSE, NULL, NULL}, {O_MK_SHAPE, NULL, NULL},
    {O_NO_PROGRESS, NULL, NULL}, {0, NULL, NULL}};

const cli_command cli_cmd_mkmodel = {
    "mkmodel", mkmodel_main, "-o FILE [--type T] [--arch ARCH] [shape options]",
    "write a random-weight model of any shape",
    "Writes a random-weight qwen35moe or gemma4 model of any shape. --type T: f32 f16 bf16\n(default) q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k iq4_nl iq4_xs mxfp4, the mixes\nq4_k_m q5_k_m (Q6_K output and ffn_down), the low-bit iq2_xxs iq2_xs iq2_s iq3_xxs iq3_s\niq1_s iq1_m iq1_xs iq1_xxs iq1_xxxs tq1_0 tq2_0 nvfp4 q1_0 q2_0 (random valid blocks) and\nthe UD mixes ud-iq1_xxxs ud-iq2_xs ud-iq1_s.\n",
    mkmodel_options};
